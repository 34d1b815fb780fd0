"""DuckDB's spatial extension loads from the PyPI package's own file, with downloads switched off."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_spatial_loads_offline_from_the_wheel_and_computes() -> None:
    import duckdb
    import duckdb_extension_spatial

    from mapsmith_opensource import duckdb_spatial

    path = duckdb_spatial.extension_file()
    assert Path(duckdb_extension_spatial.__file__).parent in path.parents
    assert path.parent.name == f"v{duckdb.__version__}"
    con = duckdb_spatial.connect()
    try:
        # a 2 x 3 rectangle: area 6, perimeter 10
        area, length = con.execute(
            "SELECT ST_Area(g), ST_Perimeter(g) FROM (SELECT ST_GeomFromText('POLYGON((0 0,2 0,2 3,0 3,0 0))') g)"
        ).fetchone()
        assert (area, length) == (6.0, 10.0)
        autoinstall = con.execute("SELECT current_setting('autoinstall_known_extensions')").fetchone()[0]
        assert autoinstall is False
    finally:
        con.close()


def test_versions_report_duckdb_and_its_spatial_build() -> None:
    import duckdb

    from mapsmith_opensource import duckdb_spatial

    versions = duckdb_spatial.versions()
    assert versions["duckdb"] == duckdb.__version__ == "1.5.5"
    assert versions["duckdb-spatial"] not in ("", "unknown")


def test_a_mismatched_extension_version_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    from mapsmith.errors import ConfigurationError
    from mapsmith_opensource import duckdb_spatial

    monkeypatch.setattr(duckdb, "__version__", "9.9.9")
    with pytest.raises(ConfigurationError) as err:
        duckdb_spatial.extension_file()
    assert err.value.code == "DUCKDB_SPATIAL_MISMATCH"
    assert "duckdb-extension-spatial==9.9.9" in err.value.hint
