"""DuckDB with its spatial extension, loaded from the ``duckdb-extension-spatial`` wheel's own file.

Machines without internet cannot let DuckDB download extensions at run time, so the extension is
installed from the file the PyPI package ships, whose version must equal DuckDB's. This module
never enables autoloading or network installs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mapsmith.errors import ConfigurationError


def extension_file() -> Path:
    """The spatial extension binary shipped for the installed DuckDB version."""
    import duckdb
    import duckdb_extension_spatial

    root = Path(duckdb_extension_spatial.__file__).parent / "extensions"
    wanted = root / f"v{duckdb.__version__}" / "spatial.duckdb_extension"
    if not wanted.is_file():
        found = sorted(p.parent.name for p in root.glob("*/spatial.duckdb_extension"))
        raise ConfigurationError(
            f"duckdb {duckdb.__version__} has no matching spatial extension file (found {found})",
            code="DUCKDB_SPATIAL_MISMATCH",
            hint=f"pip install 'duckdb-extension-spatial=={duckdb.__version__}'",
        )
    return wanted


def connect(database: str = ":memory:") -> Any:
    """A DuckDB connection with spatial loaded from the local file, autoinstall off."""
    import duckdb

    con = duckdb.connect(database, config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.install_extension(str(extension_file()))
    con.load_extension("spatial")
    return con


def versions() -> dict[str, str]:
    import duckdb

    con = connect()
    try:
        row = con.execute(
            "SELECT extension_version FROM duckdb_extensions() WHERE extension_name = 'spatial'"
        ).fetchone()
    finally:
        con.close()
    return {"duckdb": duckdb.__version__, "duckdb-spatial": str(row[0]) if row else "unknown"}
