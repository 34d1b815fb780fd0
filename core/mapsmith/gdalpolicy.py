"""How GDAL may open an input: with the driver its extension names, and nothing beside it unchecked.

GDAL chooses a driver by content, not by extension: text that says ``<OGRVRTDataSource>`` after a
CSV header line, or inside a JSON string of a GeoJSON file, makes GDAL open the file as a virtual
dataset whose sources are any path or URL. So every open in the opensource stack asks this module
for what to hand the engine:

- **vector** (pyogrio): ``vector_source`` returns the path with the GDAL prefix that forces the
  driver where GDAL has one (``CSV:``, ``GeoJSON:``); for binary formats, whose first bytes hold a
  NUL that stops GDAL's text-sniffing drivers, the file's magic bytes must be its format's. After the
  open, ``check_vector_driver`` compares the driver GDAL reports with the one expected.
- **KML, KMZ, zipped shapefiles**: ``mapsmith.containers`` checks the XML (no DTD, no external
  reference) or the zip's members (no climbing names, links, bombs) and builds the path GDAL gets
  (``/vsizip/<archive>/doc.kml``, ``/vsizip/<archive>/<a.shp>``); LIBKML must open a KML (or the
  KML driver where LIBKML is absent), the shapefile driver a zip.
- **raster** (rasterio): ``raster_drivers`` is the allowed-drivers list for ``rasterio.open``
  (GDAL's ``GDALOpenEx`` allow-list), ``["GTiff"]`` for a ``.tif``.
- **files beside the input**: ``check_members`` checks every directory entry GDAL (or SQLite under
  the GeoPackage driver) may open beside the named file -- overviews ``.ovr``, masks ``.msk``,
  ``.aux.xml``, world files, ``.tab``, RPC/IMD files, shapefile members ``.dbf .shx .prj .cpg .qix
  .sbn``, SQLite ``-wal``/``-shm``/``-journal`` -- with ``Workspace.check_sidecar``: a symlink out of
  the workspace, a hard link (a second name of a file that may live outside) and a FIFO or device are
  refused. ``.ovr`` and ``.msk`` are opened by GDAL with every driver, so they must be TIFFs.

Formats with no rule (``.vrt``, ``.img`` ...) get ``None``: GDAL picks. Under a workspace they never
get here, because ``crsguard`` refuses every format whose CRS it cannot read first (``.vrt`` among
them), so VRT, OGR_VRT and the network drivers are never chosen for a workspace input.

``MAPSMITH_PARSER_WALLS=off`` turns the driver and sidecar walls off. It exists for testing only: it
lets the sandbox's tests prove that the OS sandbox alone contains a hostile file. Never set it in
production; the CRS guard and the path policy stay on whatever it says.

What this module must never do: import GDAL, pyogrio or rasterio (core never imports an engine), open
a sidecar to read more than its first bytes, or follow a symlink it is checking.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapsmith import containers
from mapsmith.errors import ConfigurationError, InputError
from mapsmith.workspace import Workspace

__all__ = [
    "FORMATS",
    "PARSER_WALLS_ENV",
    "FormatRule",
    "allowed_driver",
    "check_members",
    "check_vector_driver",
    "duckdb_allowed_drivers_argument",
    "member_names",
    "parser_walls_enabled",
    "raster_drivers",
    "vector_source",
]

PARSER_WALLS_ENV = "MAPSMITH_PARSER_WALLS"

_SQLITE = b"SQLite format 3\x00"
_TIFF = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_ZIP = b"PK\x03\x04"


@dataclass(frozen=True)
class FormatRule:
    """What a file with one extension must be, and how GDAL is told to read it as that."""

    label: str
    driver: str  # GDAL short name, as pyogrio/rasterio report it after the open
    kind: str  # "vector" | "raster"
    prefix: str | None = None  # a GDAL connection prefix that selects the driver
    magic: tuple[bytes, ...] = ()  # the file must start with one of these


FORMATS: dict[str, FormatRule] = {
    ".gpkg": FormatRule("GeoPackage", "GPKG", "vector", magic=(_SQLITE,)),
    ".geojson": FormatRule("GeoJSON", "GeoJSON", "vector", prefix="GeoJSON:"),
    ".json": FormatRule("GeoJSON", "GeoJSON", "vector", prefix="GeoJSON:"),  # or ESRI JSON / TopoJSON: _json_rule
    ".fgb": FormatRule("FlatGeobuf", "FlatGeobuf", "vector", magic=(b"fgb\x03fgb",)),
    ".shp": FormatRule("shapefile", "ESRI Shapefile", "vector", magic=(b"\x00\x00\x27\x0a",)),
    ".dbf": FormatRule("dBASE", "ESRI Shapefile", "vector"),
    ".csv": FormatRule("CSV", "CSV", "vector", prefix="CSV:"),
    ".tsv": FormatRule("TSV", "CSV", "vector", prefix="CSV:"),
    ".xlsx": FormatRule("XLSX", "XLSX", "vector", magic=(_ZIP,)),
    ".ods": FormatRule("ODS", "ODS", "vector", magic=(_ZIP,)),
    # KML is XML that LIBKML reads (the KML driver where LIBKML is absent: _SAME_FORMAT); no prefix selects
    # either, so mapsmith.containers refuses the text other XML drivers sniff before handing it over.
    ".kml": FormatRule("KML", "LIBKML", "vector"),
    ".kmz": FormatRule("KMZ", "LIBKML", "vector", magic=(_ZIP,)),
    ".zip": FormatRule("zipped shapefile", "ESRI Shapefile", "vector", magic=(_ZIP,)),
    ".tif": FormatRule("GeoTIFF", "GTiff", "raster", magic=_TIFF),
    ".tiff": FormatRule("GeoTIFF", "GTiff", "raster", magic=_TIFF),
}
# A ".json" is GeoJSON, ESRI JSON or TopoJSON: GDAL's three JSON drivers, none of which follows a reference
# to another file. The choice among them only decides which parser reads it, so a look at the first keys
# is enough: a wrong guess is an unreadable file, never another driver.
_JSON_RULES: tuple[tuple[re.Pattern[bytes], FormatRule | None], ...] = (
    (re.compile(rb'"type"\s*:\s*"Topology"'), FormatRule("TopoJSON", "TopoJSON", "vector", prefix="TopoJSON:")),
    (re.compile(rb'"type"\s*:\s*"Feature(Collection)?"'), None),  # GeoJSON, whatever its properties say
    (
        re.compile(rb'"(geometryType|spatialReference)"\s*:'),
        FormatRule("ESRI JSON", "ESRIJSON", "vector", prefix="ESRIJSON:"),
    ),
)
_JSON_SNIFF_BYTES = 64 << 10

# Files GDAL's imagery metadata readers (GDALMDReader*: SPOT, Pleiades, ALOS ...) look for in the dataset's
# folder under names that do not derive from the dataset's own.
_FOLDER_METADATA = frozenset({"metadata.dim", "summary.txt", "metadata.xml", "metadata.txt"})
_FOLDER_METADATA_PREFIXES = ("dim_", "rpc_", "img_")

# Drivers that read the same format: the one an extension names, and the others that may open it.
_SAME_FORMAT = {"LIBKML": frozenset({"LIBKML", "KML"})}

# Files GDAL opens with every driver (GDALOpen), not its own parser: they must be TIFFs.
_OPENED_AS_DATASETS = (".ovr", ".msk")


def parser_walls_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """False only when ``MAPSMITH_PARSER_WALLS=off`` (for testing the sandbox alone)."""
    value = (os.environ if environ is None else environ).get(PARSER_WALLS_ENV)
    if value in (None, "", "on"):
        return True
    if value == "off":
        return False
    # Anything else fails loudly: read as "off" it would open the walls by a typo.
    raise ConfigurationError(
        f"{PARSER_WALLS_ENV} must be 'on' or 'off', not {value!r}.",
        evidence={"parser_walls": value},
        hint=f"Unset {PARSER_WALLS_ENV}; 'off' is for testing the engine sandbox only.",
    )


def _rule(path: Path, kind: str) -> FormatRule | None:
    rule = FORMATS.get(path.suffix.lower())
    if rule is None or rule.kind != kind or not parser_walls_enabled():
        return None
    if path.suffix.lower() == ".json":
        return _json_rule(path, rule)
    return rule


def _json_rule(path: Path, geojson: FormatRule) -> FormatRule:
    try:
        with open(path, "rb") as fh:
            head = fh.read(_JSON_SNIFF_BYTES)
    except OSError:
        return geojson
    for pattern, rule in _JSON_RULES:
        if pattern.search(head):
            return rule or geojson
    return geojson


def _check_content(path: Path, rule: FormatRule) -> None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(32)
    except OSError:
        return  # the engine reports a missing or unreadable file in its own words
    wrong = bool(rule.magic) and not head.startswith(rule.magic)
    if rule.label == "dBASE":
        # dBASE III+ header bytes 12-13 are reserved zeros: a text-sniffing driver's signature
        # cannot fit in the 11 bytes before them, and a file without them is no dBASE table.
        wrong = len(head) < 32 or head[12:14] != b"\x00\x00"
    if wrong:
        raise InputError(
            f"{path.name} is not a {rule.label} file, whatever its extension says",
            code="INPUT_UNREADABLE",
            evidence={"path": path.name, "expected": rule.label, "first_bytes": head[:16].hex()},
            hint="check the file is complete and of the format its extension says; MapSmith opens a file only "
            "with the driver its extension names",
        )


def vector_source(path: Path) -> tuple[str, str | None]:
    """What to pass to pyogrio for ``path``, and the driver that must open it (``None``: any).

    A KML, KMZ or zipped shapefile is checked by ``mapsmith.containers`` first (whatever the walls
    say: the ``/vsizip/`` path is built only for a checked archive) and handed over as the path it
    builds. Raises ``InputError`` (``INPUT_UNREADABLE``) when a binary format's first bytes are not its
    own, and the containers' own codes (``KML_EXTERNAL_REFERENCE``, ``ARCHIVE_MEMBER_UNSAFE`` ...).
    """
    rule = _rule(path, "vector")
    if containers.is_container(path):
        if rule is not None:
            _check_content(path, rule)
        return containers.gdal_path(path), (rule.driver if rule else None)
    if rule is None:
        return str(path), None
    _check_content(path, rule)
    return (f"{rule.prefix}{path}" if rule.prefix else str(path)), rule.driver


def check_vector_driver(path: Path, opened: object, expected: str | None) -> None:
    """Refuse a dataset GDAL opened with another driver than the extension names (``INPUT_DRIVER_MISMATCH``)."""
    if expected is None or opened == expected or str(opened) in _SAME_FORMAT.get(expected, ()):
        return
    raise InputError(
        f"{path.name} was opened by GDAL's {opened} driver, not the {expected} driver its extension names",
        code="INPUT_DRIVER_MISMATCH",
        evidence={"path": path.name, "expected_driver": expected, "opened_driver": str(opened)},
        hint="rename the file to the extension of its real format, or convert it outside MapSmith",
    )


def raster_drivers(path: Path) -> list[str] | None:
    """The allowed-drivers list for ``rasterio.open(path, driver=...)``; ``None`` lets GDAL choose."""
    rule = _rule(path, "raster")
    if rule is None:
        return None
    _check_content(path, rule)
    return [rule.driver]


def allowed_driver(path: Path) -> str | None:
    """The one GDAL driver allowed to open ``path`` (vector or raster), after its content check; ``None``
    when the extension has no rule or the walls are off."""
    rule = _rule(path, "vector") or _rule(path, "raster")
    if rule is None:
        return None
    _check_content(path, rule)
    return rule.driver


def duckdb_allowed_drivers_argument(path: Path) -> dict[str, Any] | None:
    """``allowed_drivers=['<driver>']`` as a node of DuckDB's parse tree (``json_serialize_sql`` form).

    DuckDB spatial's ``ST_Read`` carries its own GDAL, which sniffs content like any other; appended to
    the ``st_read`` function's ``children`` before the tree is deparsed, this named argument makes it
    open ``path`` with the driver its extension names only. Plain JSON data: DuckDB is not imported.
    ``None`` when ``allowed_driver`` is ``None``.
    """
    driver = allowed_driver(path)
    if driver is None:
        return None

    def constant(text: str) -> dict[str, Any]:
        value = {"type": {"id": "VARCHAR", "type_info": None}, "is_null": False, "value": text}
        return {"class": "CONSTANT", "type": "VALUE_CONSTANT", "alias": "", "query_location": 0, "value": value}

    drivers = {
        "class": "FUNCTION",
        "type": "FUNCTION",
        "alias": "",
        "query_location": 0,
        "function_name": "list_value",
        "schema": "main",
        "children": [constant(driver)],
        "filter": None,
        "order_bys": {"type": "ORDER_MODIFIER", "orders": []},
        "distinct": False,
        "is_operator": False,
        "export_state": False,
        "catalog": "",
    }
    name = {"class": "COLUMN_REF", "type": "COLUMN_REF", "alias": "", "query_location": 0}
    return {
        "class": "COMPARISON",
        "type": "COMPARE_EQUAL",
        "alias": "",
        "query_location": 0,
        "left": {**name, "column_names": ["allowed_drivers"]},
        "right": drivers,
    }


def member_names(path: Path, names: list[str]) -> list[str]:
    """The entries of ``names`` (one directory's listing) GDAL may open with ``path``.

    GDAL's sidecars are the dataset's name plus a suffix (``a.tif.ovr``, ``a.tif.aux.xml``,
    ``a.gpkg-wal``) or its stem plus one (``a.tfw``, ``a.dbf``, ``a_rpc.txt``), matched case-blind as
    GDAL does on a case-sensitive disk, plus the folder-wide names imagery metadata readers look for
    (``METADATA.DIM``, ``DIM_*.XML``, ``RPC_*.XML`` ...). Wider than GDAL's own lists on purpose: a name
    checked in vain costs one ``lstat``.
    """
    own = path.name.lower()
    stem = path.stem.lower()
    out = []
    for name in names:
        low = name.lower()
        if low == own:
            continue
        if (
            low.startswith(own)
            or (low.startswith(stem) and low[len(stem) : len(stem) + 1] in (".", "_", "-"))
            or low in _FOLDER_METADATA
            or low.startswith(_FOLDER_METADATA_PREFIXES)
        ):
            out.append(name)
    return sorted(out)


def check_members(path: Path, workspace: Workspace, *, argument: str) -> None:
    """Check ``path`` and every file GDAL may open beside it by the workspace's path policy.

    Does nothing without a workspace or with the walls off. Raises ``PathError``
    (``SIDECAR_OUTSIDE_WORKSPACE``, ``PATH_HARD_LINK``, ``PATH_NOT_REGULAR_FILE``) or ``InputError``
    (``SIDECAR_FORMAT_UNEXPECTED``) naming the member.
    """
    if workspace.root is None or not parser_walls_enabled():
        return
    workspace.check_sidecar(path, argument=argument)
    if path.is_dir() or not path.parent.is_relative_to(workspace.root):
        return  # a folder is never handed to GDAL (crsguard refuses it); the root's parent is not listed
    try:
        names = os.listdir(path.parent)
    except OSError:
        return  # the caller reports the input's own absence
    for name in member_names(path, names):
        member = path.parent / name
        workspace.check_sidecar(member, argument=argument, member_of=path.name)
        if name.lower().endswith(_OPENED_AS_DATASETS) and stat.S_ISREG(os.lstat(member).st_mode):
            with open(member, "rb") as fh:
                head = fh.read(4)
            if not head.startswith(_TIFF):
                raise InputError(
                    f"{argument}: {name} beside {path.name} is not a TIFF; GDAL would open it with any driver "
                    "it recognises (a VRT among them) as the overview or mask of the input",
                    code="SIDECAR_FORMAT_UNEXPECTED",
                    evidence={"argument": argument, "path": path.name, "sidecar": name, "first_bytes": head.hex()},
                    hint=f"delete or rename {name}; rebuild overviews inside the workspace if they are wanted",
                )
