"""What is installed, read from install metadata and data files: versions, extras, and how to add one.

``server_info`` reports every engine's version and every optional extra without importing an engine
(importing geopandas and duckdb to read ``__version__`` took seconds): Python distributions by their
metadata (``importlib.metadata``), the native libraries the wheels bundle from files that state their
version (PROJ's ``proj.db`` metadata table, GDAL's ``GDALConfigVersion.cmake``, the versioned name
of the GEOS library a shapely wheel ships). What cannot be read that way is left out, never guessed.

The extras and their distributions come from MapSmith's own metadata (``Requires-Dist`` with an
``extra`` marker), so pyproject.toml stays the one place they are declared. The command that adds a
missing extra points at where this MapSmith was installed from (PEP 610's ``direct_url.json``): the
distribution called ``mapsmith`` on PyPI is another project and is never suggested.

It must never import an engine, and never raise: a file it cannot read is a version it does not report.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import sqlite3
import sys
from collections.abc import Iterable
from importlib import metadata, util
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "mapsmith"
# The extras server_info reports, in the order a user adds them. [qgis] and [esri] install nothing
# (QGIS and ArcGIS Pro come from elsewhere); [test], [browser] and [all] are not engines.
REPORTED_EXTRAS = ("raster", "whitebox", "sedona", "spark")


def version_of(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # broken metadata on disk: not installed as far as anyone can tell
        return None


def versions_of(distributions: Iterable[str]) -> dict[str, str]:
    """Versions of the installed ones among ``distributions``, by name."""
    out = {}
    for name in distributions:
        version = version_of(name)
        if version is not None:
            out[name] = version
    return out


@functools.cache
def extra_requirements() -> dict[str, tuple[str, ...]]:
    """Each extra of MapSmith and the distributions it installs, from MapSmith's own metadata."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        lines = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        lines = []
    extras: dict[str, list[str]] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None:
            continue
        for extra in REPORTED_EXTRAS:
            if req.marker.evaluate({"extra": extra}) and req.name not in extras.setdefault(extra, []):
                extras[extra].append(req.name)
    return {k: tuple(v) for k, v in extras.items()}


def _install_source() -> tuple[str, bool] | None:
    """Where this MapSmith was installed from (a local folder or wheel) and whether editable; None if unknown."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        record = json.loads(text) if text else None
    except Exception:
        return None
    if not isinstance(record, dict) or not str(record.get("url", "")).startswith("file:"):
        return None
    parsed = urlparse(record["url"])
    path = unquote(parsed.path)
    if os.name == "nt" and re.match(r"^/[A-Za-z]:", path):
        path = path[1:]
    editable = bool((record.get("dir_info") or {}).get("editable"))
    return path, editable


def install_command(extra: str | None = None) -> str:
    """The command that adds ``extra`` (or, for None, MapSmith's required packages) to this very
    environment, from where MapSmith came from."""
    python = sys.executable or "python"
    source = _install_source()
    wanted = f"[{extra}]" if extra else ""

    def quote(text: str) -> str:
        return f'"{text}"' if os.name == "nt" else shlex.quote(text)

    if source is None:
        return (
            f"{quote(python)} -m pip install '<your MapSmith checkout or wheel>{wanted}' "
            "(the 'mapsmith' on PyPI is another project)"
        )
    path, editable = source
    return f"{quote(python)} -m pip install {'-e ' if editable else ''}{quote(f'{path}{wanted}')}"


def extras() -> dict[str, dict[str, object]]:
    """Each reported extra: installed or not, its distributions' versions, and the fix when missing."""
    out: dict[str, dict[str, object]] = {}
    for extra, distributions in sorted(extra_requirements().items(), key=lambda kv: REPORTED_EXTRAS.index(kv[0])):
        found = {name: version_of(name) for name in distributions}
        missing = [name for name, version in found.items() if version is None]
        entry: dict[str, object] = {
            "installed": not missing,
            "distributions": {name: version or "not installed" for name, version in found.items()},
        }
        if missing:
            entry["missing"] = missing
            entry["fix"] = install_command(extra)
        out[extra] = entry
    return out


def missing_extra_message(extra: str) -> str | None:
    """One sentence naming what ``extra`` lacks and the command that adds it; None when installed."""
    entry = extras().get(extra)
    if entry is None or entry["installed"]:
        return None
    return f"the [{extra}] extra is not installed (missing: {', '.join(entry['missing'])}); add it with: {entry['fix']}"  # type: ignore[arg-type]


# -- native libraries bundled in the wheels, read from their files ---------------------------------


def _package_dir(package: str) -> Path | None:
    try:
        spec = util.find_spec(package)  # a top-level name: locates without importing
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def proj_version() -> str | None:
    """PROJ's version from the metadata table of the proj.db pyproj uses (it records ``PROJ.VERSION``)."""
    candidates = []
    here = _package_dir("pyproj")
    if here is not None:
        candidates.append(here / "proj_dir" / "share" / "proj" / "proj.db")
    for var in ("PROJ_DATA", "PROJ_LIB"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "proj.db")
    for db in candidates:
        if not db.is_file():
            continue
        try:
            with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as con:
                row = con.execute("SELECT value FROM metadata WHERE key = 'PROJ.VERSION'").fetchone()
        except sqlite3.Error:
            continue
        if row and re.match(r"\d", str(row[0])):
            return str(row[0])
    return None


def gdal_version() -> str | None:
    """GDAL's version from the CMake package file pyogrio's wheel ships with GDAL's data."""
    here = _package_dir("pyogrio")
    if here is None:
        return None
    try:
        text = (here / "gdal_data" / "GDALConfigVersion.cmake").read_text("utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r'set\(PACKAGE_VERSION "(\d[^"]*)"\)', text)
    return match.group(1) if match else None


def geos_version() -> str | None:
    """GEOS's version from the versioned name of the libgeos a shapely wheel ships (libgeos-….so.3.14.1)."""
    try:
        files = metadata.files("shapely") or []
    except Exception:
        return None
    for f in files:
        name = Path(str(f)).name
        match = re.match(r"libgeos(?!_c)[-.][^/]*?(\d+\.\d+\.\d+)(?:\.dylib)?$", name)
        if match:
            return match.group(1)
    return None
