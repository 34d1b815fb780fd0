"""CRS definitions are inputs too: refuse the ones that would make PROJ read files outside the workspace.

A CRS written by a model (``target_crs``) or declared inside a dataset (a GeoPackage's
``gpkg_spatial_ref_sys``, a shapefile's ``.prj``, GeoParquet's ``geo`` metadata, GeoTIFF keys, a
GeoJSON ``crs`` member, a FlatGeobuf header) can name files for PROJ or GDAL to open: datum grids
(``+nadgrids=``, ``+geoidgrids=``, ``+grids=``, ``+xy_grids=`` ...), other PROJ inputs (``+file=``
of tinshift, ``+model=`` of defmodel, ``+init=file:id``), WKT ``PARAMETERFILE[...]`` and GDAL's
``EXTENSION["PROJ4_GRIDS", ...]``, PROJJSON ``"parameters": [{"name": ..., "value": "file"}]``
(a string value *is* a file: every other PROJJSON parameter value is a number). Under a workspace
this module finds every such reference and refuses it (``CRS_REFERENCES_FILE``) unless it resolves
inside the workspace, and it does so before GDAL or PROJ sees the definition.

Bare grid names are allowed. ``us_noaa_conus.tif``, ``@null`` or ``@ntv2_0.gsb`` (no separator, no
``~``, no ``.``/``..``) are looked up by PROJ only in its own search path: the data directory of the
installed PROJ (``PROJ_DATA``) and the user-writable directory (``~/.local/share/proj``), never the
current directory (checked with strace against PROJ 9.5). Both are chosen by whoever started the
server, like the EPSG database itself, so a bare name reads nothing the operator did not install.
Refusing them would refuse the ordinary PROJ strings that GDAL writes (``+nadgrids=@null`` in every
Web Mercator ``.prj``). With PROJ's network off (``disable_proj_network``), a bare name that is not
installed is a missing grid, never a download. Anything with a separator, ``~``, a drive letter or a
URL is a path: it must resolve inside the workspace through ``Workspace.resolve``; relative paths are
taken against the process's current directory, because that is where PROJ opens them.

Formats whose CRS cannot be read here before GDAL opens them (netCDF, HDF4/5, JPEG 2000, ERDAS IMG,
GRIB, and anything unrecognised) are refused under a workspace (``CRS_FORMAT_UNCHECKED``), by
extension and by magic bytes, so a netCDF renamed ``.tif`` is refused too.

What this module must never do: import GDAL (reading the declaration with GDAL is the thing it
guards), follow a reference to check it (a path is judged by its string and ``realpath``), or let a
definition through because it could not read it: an unreadable declaration is refused
(``CRS_DECLARATION_UNREADABLE``). Without a workspace every check returns at once: the server is
unconfined by choice and PROJ may read what the operator can.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

from mapsmith.errors import CRSError, InputError, PathError
from mapsmith.workspace import Workspace

__all__ = [
    "CHECKED_FORMATS",
    "UNCHECKED_FORMATS",
    "DeclaredCRS",
    "check_crs_definition",
    "check_declared_crs",
    "crs_parameters",
    "disable_proj_network",
    "read_declared_crs",
]

# PROJ keys whose value names files (grid lists, init files, tinshift/defmodel JSON). Matched
# case-insensitively, which is broader than PROJ: a refusal too many is the safe side here.
_FILE_KEYS = ("nadgrids", "geoidgrids", "grids", "xy_grids", "z_grids", "file", "init", "model")
# PROJ's own tokenizer (pj_shrink) drops whitespace around '=' and ',', so "+nadgrids = a , /b" is
# "+nadgrids=a,/b": undo that before matching. A value may be double-quoted with "" as the escape.
_SHRINK = re.compile(r"\s*([=,])\s*")
_PROJ_KEY_VALUE = re.compile(
    r"(?<![A-Za-z0-9_])(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\"(?:[^\"]|\"\")*\"|[^\s\"\]\[;]+)"
)
# Where a WKT names a file: PARAMETERFILE (WKT2) and GDAL's EXTENSION (WKT1). WKT allows () for []
# and PROJ also reads curly double quotes, so both are accepted here.
_WKT_FILE_KEYWORDS = re.compile(r"(?<![A-Za-z_])(PARAMETERFILE|EXTENSION|GRIDFILE)\s*[\[(]", re.IGNORECASE)
_WKT_QUOTED = re.compile(r"[\"\u201c\u201d](?P<text>(?:[^\"\u201c\u201d]|\"\")*)[\"\u201c\u201d]")
_OGC_CRS_URL = re.compile(r"^https?://(www\.)?opengis\.net/def/crs", re.IGNORECASE)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:/")

# Parameters that hold a CRS although their name does not end in "crs" (operation, parameter).
_CRS_PARAMETERS_BY_OPERATION = {("resolve_crs", "description")}

#: Formats whose declared CRS is read here before GDAL opens them (what a refusal lists).
CHECKED_FORMATS = (
    "GeoPackage (.gpkg)",
    "shapefile (.shp with .prj)",
    "GeoParquet (.parquet)",
    "GeoTIFF (.tif/.tiff, with .aux.xml/.tfw/.tab/.prj sidecars)",
    "GeoJSON (.geojson/.json)",
    "FlatGeobuf (.fgb)",
    "tables without a CRS (.csv/.tsv/.xlsx/.ods/.dbf)",
)
#: Formats GDAL reads a CRS from that this module cannot: refused under a workspace.
UNCHECKED_FORMATS = {
    ".nc": "netCDF",
    ".nc4": "netCDF",
    ".cdf": "netCDF",
    ".hdf": "HDF4",
    ".hdf4": "HDF4",
    ".h4": "HDF4",
    ".hdf5": "HDF5",
    ".h5": "HDF5",
    ".he5": "HDF-EOS5",
    ".he4": "HDF-EOS",
    ".jp2": "JPEG 2000",
    ".j2k": "JPEG 2000",
    ".jpx": "JPEG 2000",
    ".jpf": "JPEG 2000",
    ".img": "ERDAS IMG",
    ".aux": "ERDAS IMG (.aux)",
    ".grb": "GRIB",
    ".grib": "GRIB",
    ".grb2": "GRIB",
    ".grib2": "GRIB",
}
_MAGIC_UNCHECKED = (
    (b"CDF\x01", "netCDF"),
    (b"CDF\x02", "netCDF"),
    (b"CDF\x05", "netCDF"),
    (b"\x89HDF\r\n\x1a\n", "HDF5"),  # netCDF-4 is HDF5 too
    (b"\x0e\x03\x13\x01", "HDF4"),
    (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000"),
    (b"EHFA_HEADER_TAG", "ERDAS IMG"),
    (b"ERDAS_IMG_EXTERNAL_RASTER", "ERDAS IMG"),
    (b"GRIB", "GRIB"),
)
_GEOJSON_SUFFIXES = {".geojson", ".json"}
# What a file with this extension must be, by its first bytes (else INPUT_UNREADABLE).
_EXPECTED_FORMAT = {
    ".gpkg": "GeoPackage",
    ".parquet": "Parquet",
    ".geoparquet": "Parquet",
    ".fgb": "FlatGeobuf",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".shp": "shapefile",
    ".xlsx": "XLSX",
    ".ods": "ODS",
    ".csv": "CSV",
    ".tsv": "TSV",
    ".dbf": "dBASE",
    ".geojson": "GeoJSON",
    ".json": "GeoJSON",
}
_SHP_MAGIC = b"\x00\x00\x27\x0a"
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_FGB_MAGIC = b"fgb\x03fgb"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_PARQUET_MAGIC = b"PAR1"
# GeoKeyDirectory entries whose value lives in GeoAsciiParamsTag: the citations GDAL reads an
# ESRI PE string or a PROJ string from (GTCitation, GeogCitation, PCSCitation, VerticalCitation).
_GEOTIFF_ASCII_TAG, _GEOTIFF_KEYS_TAG = 34737, 34735
_MAX_SIDECAR_BYTES = 16 << 20  # a CRS sidecar is a few kilobytes; a bigger one is not read whole


@dataclass(frozen=True)
class DeclaredCRS:
    """One CRS definition a file declares, and where in the file it was found (for evidence)."""

    source: str
    definition: str | dict[str, Any]
    # "definition": a CRS GDAL/PROJ parses (checked whole, then parsed); "text": text around one
    # (metadata, citations, sidecars), scanned for references only; "link": a reference GDAL follows.
    mode: str = "definition"


# -- process settings -------------------------------------------------------------------------


def disable_proj_network() -> None:
    """Turn PROJ's network access off for this process (grids are read from disk or are missing).

    Sets ``PROJ_NETWORK=OFF`` in ``os.environ``: PROJ contexts made from now on (pyproj's, and
    GDAL's own) read it, and it wins over a ``proj.ini`` that says ``network = on``. When pyproj is
    already imported its contexts are told as well, including a setting made in code. Cheap enough
    for start-up: it never imports pyproj itself.
    """
    import sys

    os.environ["PROJ_NETWORK"] = "OFF"
    if "pyproj" in sys.modules:
        import pyproj.network

        pyproj.network.set_network_enabled(False)


def crs_parameters(operation: str, parameter_names: list[str] | tuple[str, ...]) -> list[str]:
    """The parameters of ``operation`` that hold a CRS: ``crs``, ``*_crs``, and the known others."""
    return [
        name
        for name in parameter_names
        if name == "crs" or name.endswith("_crs") or (operation, name) in _CRS_PARAMETERS_BY_OPERATION
    ]


# -- CRS definitions --------------------------------------------------------------------------


def check_crs_definition(value: Any, *, argument: str, workspace_root: Path | str | None, source: str = "") -> None:
    """Refuse a CRS definition that would make PROJ or GDAL read a file outside the workspace.

    ``value`` is anything a CRS argument may be: an EPSG code (int or text), a PROJ string, WKT1 or
    WKT2, PROJJSON as text or dict, or an object with ``to_json_dict``/``to_wkt`` (a pyproj CRS).
    ``argument`` names the tool argument (or the input slot) for the evidence; ``source`` says where
    in a file the definition was found. Returns ``None`` when the definition is allowed, and always
    when ``workspace_root`` is ``None``. Raises ``CRSError`` with code ``CRS_REFERENCES_FILE``
    (evidence: ``argument``, ``key``, ``reference``, ``reason``), or ``CRS_INVALID`` for PROJJSON
    text that is not JSON (PROJ would not read it either).
    """
    if workspace_root is None:
        return
    guard = _Guard(Workspace(root=Path(workspace_root), allow_remote=False), argument, source)
    guard.definition(value)


class _Guard:
    def __init__(self, workspace: Workspace, argument: str, source: str) -> None:
        self.workspace = workspace
        self.argument = argument
        self.source = source

    # -- dispatch on the form of the definition ------------------------------------------------

    def definition(self, value: Any) -> None:
        if value is None or isinstance(value, (bool, int, float)):
            return  # an EPSG integer names a database entry, never a file
        if isinstance(value, Mapping) or isinstance(value, list):
            self.projjson(value)
            self.parsed(value)
            return
        if not isinstance(value, str):
            to_json = getattr(value, "to_json_dict", None)
            if callable(to_json):
                self.projjson(to_json())
                return
            to_wkt = getattr(value, "to_wkt", None)
            if callable(to_wkt):
                self.definition(to_wkt())
                return
            self.definition(str(value))
            return
        text = value.strip().lstrip("\ufeff")
        if text.startswith("{"):
            try:
                decoded = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise CRSError(
                    f"{self.argument}: the CRS looks like PROJJSON but is not valid JSON: {exc}",
                    code="CRS_INVALID",
                    evidence=self._evidence(reason="invalid_json"),
                    hint="pass PROJJSON that parses as JSON, WKT, or an authority code such as EPSG:32610",
                ) from exc
            self.text(text)  # the raw text too: a parser that disagrees with json.loads must not help
            self.projjson(decoded)
            self.parsed(decoded)
            return
        self.whole_value_as_path(text)
        self.text(text)
        if "[" in text or "(" in text:
            self.parsed(text)

    def text(self, text: str) -> None:
        """PROJ key=value pairs anywhere (PROJ strings, WKT1 EXTENSION["PROJ4"], PROJ-based method
        names, ESRI PE citations), then the WKT keywords that name files."""
        shrunk = _SHRINK.sub(r"\1", text)
        for match in _PROJ_KEY_VALUE.finditer(shrunk):
            key = match.group("key").lower()
            raw = match.group("value")
            value = raw[1:-1].replace('""', '"') if raw.startswith('"') else raw
            if key in _FILE_KEYS or key.endswith(("grids", "_grid", "file")):
                if key == "init":
                    # "+init=epsg:4326" names the "epsg" file in PROJ's data directory and a code in it.
                    name = value.rsplit(":", 1)[0] if ":" in value and not _URL.match(value) else value
                    self.reference(name, key=f"+{key}")
                else:
                    self.grid_list(value, key=f"+{key}")
            elif _URL.match(value) or value.startswith(("/", "\\", "~", "./", "../")):
                self.reference(value, key=f"+{key}")  # an unknown key with a path: judged as one
        for keyword in _WKT_FILE_KEYWORDS.finditer(text):
            strings = [m.group("text").replace('""', '"') for m in _WKT_QUOTED.finditer(_bracket(text, keyword.end()))]
            name = keyword.group(1).upper()
            if name == "EXTENSION":
                if len(strings) >= 2 and strings[0].upper() == "PROJ4_GRIDS":
                    self.grid_list(strings[1], key='EXTENSION["PROJ4_GRIDS"]')
                continue  # EXTENSION["PROJ4", "..."] was scanned as key=value above
            for string in strings[1:]:
                self.grid_list(string, key=name)

    def projjson(self, node: Any, depth: int = 0) -> None:
        """Every ``parameters[].value`` that is a string is a file; every string is also scanned."""
        if depth > 64:
            raise CRSError(
                f"{self.argument}: the PROJJSON is nested more than 64 levels deep",
                code="CRS_INVALID",
                evidence=self._evidence(reason="too_deep"),
                hint="pass an ordinary PROJJSON document, WKT, or an authority code",
            )
        if isinstance(node, Mapping):
            params = node.get("parameters")
            if isinstance(params, list):
                for param in params:
                    if isinstance(param, Mapping) and isinstance(param.get("value"), str):
                        self.grid_list(param["value"], key=f"parameters[{param.get('name', '?')}].value")
            for key, child in node.items():
                if isinstance(key, str) and "=" in key:
                    self.text(key)
                self.projjson(child, depth + 1)
        elif isinstance(node, list):
            for child in node:
                self.projjson(child, depth + 1)
        elif isinstance(node, str):
            self.text(node)

    def parsed(self, value: Any) -> None:
        """Second opinion: what PROJ itself makes of a WKT/PROJJSON that passed the text checks.

        Catches spellings the text scan did not foresee (ESRI names PROJ maps to grid files,
        quoting PROJ accepts and a regex does not). Text that PROJ cannot read passes here: it is
        no CRS, and ``parse_crs`` refuses it with its own code when it is used as one.
        """
        try:
            from pyproj import CRS
            from pyproj.exceptions import CRSError as ProjCRSError
        except ImportError:  # pragma: no cover - pyproj is a core dependency
            return
        try:
            crs = CRS.from_user_input(dict(value) if isinstance(value, Mapping) else value)
            document = crs.to_json_dict()
        except (ProjCRSError, TypeError, ValueError):
            return
        self.projjson(document)

    # -- references ----------------------------------------------------------------------------

    def whole_value_as_path(self, text: str) -> None:
        """GDAL's SetFromUserInput opens a definition that is a file name (and fetches URLs)."""
        if _OGC_CRS_URL.match(text) or text.lower().startswith("urn:"):
            return  # OGC CRS URLs and URNs are parsed locally by PROJ and GDAL, never fetched
        if _URL.match(text):
            self.reference(text, key="(the whole definition)")
            return
        if text.startswith(("/", "\\", "~", "./", "../", "file:")) or re.match(r"^[A-Za-z]:[\\/]", text):
            self.reference(text.removeprefix("file:"), key="(the whole definition)")

    def grid_list(self, value: str, *, key: str) -> None:
        for item in value.split(","):
            item = item.strip()
            if item.startswith("@"):  # "@" marks an optional grid; the path after it is still opened
                item = item[1:].strip()
            if item:
                self.reference(item, key=key)

    def reference(self, item: str, *, key: str) -> None:
        if _is_bare_name(item):
            return  # looked up in PROJ's own search path only (module docstring)
        if item.startswith("~"):
            self._refuse(item, key, "home_directory", "PROJ expands '~' to the home directory, outside the workspace")
        if _URL.match(item) and not re.match(r"^[A-Za-z]:[\\/]", item):
            self._refuse(item, key, "url", "a URL makes PROJ or GDAL fetch the file over the network")
        # PROJ opens a relative path against the current directory, not the workspace.
        target = item if os.path.isabs(item) else os.path.join(os.getcwd(), item)
        try:
            resolved = self.workspace.resolve(target, argument=self.argument)
        except PathError as exc:
            self._refuse(item, key, exc.code, exc.message, resolved=exc.evidence.get("resolved_path"))
            return
        if not isinstance(resolved, Path):  # pragma: no cover - resolve refuses remote forms under a workspace
            self._refuse(item, key, "remote", "remote references are never read under a workspace")

    def _refuse(self, item: str, key: str, reason: str, detail: str, resolved: str | None = None) -> None:
        evidence = self._evidence(key=key, reference=item, reason=reason)
        if resolved is not None:
            evidence["resolved_path"] = resolved
        where = f" ({self.source})" if self.source else ""
        raise CRSError(
            f"{self.argument}: the CRS definition{where} makes PROJ read {item!r} through {key}, "
            f"outside the workspace: {detail}",
            code="CRS_REFERENCES_FILE",
            evidence=evidence,
            hint="use an authority code (EPSG:32610) or a definition without file references; a datum grid "
            "must be installed in PROJ's data directory by the operator and named without a path "
            "(+nadgrids=us_noaa_conus.tif), or copied into the workspace",
        )

    def _evidence(self, **fields: Any) -> dict[str, Any]:
        evidence: dict[str, Any] = {"argument": self.argument}
        if self.source:
            evidence["source"] = self.source
        evidence.update(fields)
        return evidence


def _is_bare_name(item: str) -> bool:
    return not (
        "/" in item
        or "\\" in item
        or ":" in item
        or item.startswith("~")
        or item in (".", "..")
        or any(ord(c) < 32 for c in item)
    )


def _bracket(text: str, start: int) -> str:
    """The text from ``start`` to the bracket that closes the one just before it (quotes respected)."""
    depth, i, quote_open = 1, start, False
    while i < len(text) and depth:
        c = text[i]
        if c in '"\u201c\u201d':
            quote_open = not quote_open
        elif not quote_open and c in "[(":
            depth += 1
        elif not quote_open and c in "])":
            depth -= 1
        i += 1
    return text[start:i]


# -- CRS declared inside input files ----------------------------------------------------------


def check_declared_crs(path: Path | str, *, argument: str, workspace_root: Path | str | None) -> None:
    """Under a workspace, refuse an input whose declared CRS references files outside it, or whose
    format's CRS cannot be read here first. Call it after the path was resolved and found to exist,
    and before any GDAL call on it. Does nothing without a workspace.

    Raises ``CRSError`` (``CRS_REFERENCES_FILE``) or ``InputError`` (``CRS_FORMAT_UNCHECKED``,
    ``CRS_DECLARATION_UNREADABLE``).
    """
    if workspace_root is None:
        return
    workspace = Workspace(root=Path(workspace_root), allow_remote=False)
    for declared in read_declared_crs(path, argument=argument):
        guard = _Guard(workspace, argument, declared.source)
        if declared.mode == "link":
            guard._refuse(
                str(declared.definition), declared.source, "linked_crs", "GDAL opens or downloads a linked CRS"
            )
        elif declared.mode == "text":
            guard.text(str(declared.definition))
        else:
            guard.definition(declared.definition)


def read_declared_crs(path: Path | str, *, argument: str = "input_path") -> list[DeclaredCRS]:
    """Every CRS definition ``path`` and the sidecars GDAL reads with it declare, read from bytes.

    An empty list means the file declares none (a table, a shapefile without ``.prj``, a GeoTIFF
    without georeferencing). Raises ``InputError`` with ``CRS_FORMAT_UNCHECKED`` for a format this
    module cannot read (by extension or magic bytes) and ``CRS_DECLARATION_UNREADABLE`` when a file
    of a known format cannot be parsed far enough to find its CRS.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    reader = _Reader(p, argument)
    if p.is_dir():
        if suffix == ".gdb":
            reader.unchecked("a FileGDB directory")
        # Never handed to GDAL: a folder of shapefiles would be opened whole, every .prj in it.
        raise InputError(
            f"{argument} is a directory, not a dataset: {p.name}",
            code="INPUT_IS_DIRECTORY",
            evidence={"argument": argument, "path": p.name},
            hint="pass the path of a dataset file",
        )
    with open(p, "rb") as fh:
        head = fh.read(64)
    for magic, name in _MAGIC_UNCHECKED:
        if head.startswith(magic):
            reader.unchecked(name)
    if suffix in UNCHECKED_FORMATS:
        reader.unchecked(UNCHECKED_FORMATS[suffix])
    # GDAL picks a driver by content, not by extension: what is read here is what the bytes are.
    text_head = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(_SQLITE_MAGIC):
        return reader.geopackage()
    if head.startswith(_PARQUET_MAGIC):
        return reader.geoparquet()
    if head.startswith(_FGB_MAGIC):
        return reader.flatgeobuf()
    if head.startswith(_TIFF_MAGIC):
        return reader.geotiff() + reader.raster_sidecars()
    if suffix == ".shp" and head.startswith(_SHP_MAGIC):
        return reader.prj_sidecar()
    if suffix in (".xlsx", ".ods") and head.startswith(b"PK\x03\x04"):
        return []  # a spreadsheet holds no CRS
    if suffix in (".csv", ".tsv", ".dbf") and not text_head.startswith((b"<", b"{", b"[")):
        return reader.prj_sidecar()  # GDAL's CSV driver reads a .prj beside the file as well
    if text_head.startswith(b"{") and (suffix in _GEOJSON_SUFFIXES or suffix not in _EXPECTED_FORMAT):
        return reader.geojson()
    if suffix in _EXPECTED_FORMAT:
        # A ".gpkg" that is no GeoPackage: GDAL would guess a driver from its content instead.
        raise InputError(
            f"{argument} is not a {_EXPECTED_FORMAT[suffix]} file, whatever its extension says: {p.name}",
            code="INPUT_UNREADABLE",
            evidence={"argument": argument, "path": p.name, "expected": _EXPECTED_FORMAT[suffix]},
            hint="check the file is complete and of the format its extension says; under a workspace MapSmith "
            "does not let GDAL guess the format of an input",
        )
    reader.unchecked(f"'{suffix or p.name}' files")


class _Reader:
    def __init__(self, path: Path, argument: str) -> None:
        self.path = path
        self.argument = argument

    def unchecked(self, what: str) -> NoReturn:
        raise InputError(
            f"{self.argument}: MapSmith cannot read the CRS of {what} before GDAL opens it, and a CRS "
            "declared inside a file can make PROJ read other files; under a workspace such inputs are refused",
            code="CRS_FORMAT_UNCHECKED",
            evidence={
                "argument": self.argument,
                "path": self.path.name,
                "format": what,
                "checked": list(CHECKED_FORMATS),
            },
            hint="convert the file outside MapSmith (e.g. gdal_translate / ogr2ogr) to GeoTIFF or GeoPackage and "
            "pass the converted file; formats whose CRS is checked: " + "; ".join(CHECKED_FORMATS),
        )

    def unreadable(self, what: str, exc: BaseException | None = None) -> InputError:
        return InputError(
            f"{self.argument}: cannot read the CRS {self.path.name} declares ({what}); it is not opened "
            "with GDAL until its CRS is checked",
            code="CRS_DECLARATION_UNREADABLE",
            evidence={"argument": self.argument, "path": self.path.name, "problem": what}
            | ({"error": f"{type(exc).__name__}: {exc}"} if exc else {}),
            hint="check the file is complete and of the format its extension says; rewrite it with GDAL outside "
            "MapSmith if it is damaged",
        )

    def _sidecar(self, *suffixes: str) -> list[Path]:
        """Sidecars beside the file: ``name.ext`` with ``ext`` in any case, like GDAL on a case-sensitive disk."""
        wanted = {s.lower() for s in suffixes}
        stem = self.path.stem
        try:
            names = os.listdir(self.path.parent)
        except OSError:
            return []
        return sorted(
            self.path.parent / n
            for n in names
            if (n[: len(stem)] == stem and n[len(stem) :].lower() in wanted)
            or (n[: len(self.path.name)] == self.path.name and n[len(self.path.name) :].lower() in wanted)
        )

    def _read_small(self, path: Path) -> str:
        if path.stat().st_size > _MAX_SIDECAR_BYTES:
            raise self.unreadable(f"{path.name} is larger than {_MAX_SIDECAR_BYTES >> 20} MB")
        return path.read_bytes().decode("utf-8", errors="replace")

    def prj_sidecar(self) -> list[DeclaredCRS]:
        return [DeclaredCRS(f"{p.name} sidecar", self._read_small(p)) for p in self._sidecar(".prj")]

    # -- GeoPackage ----------------------------------------------------------------------------

    def geopackage(self) -> list[DeclaredCRS]:
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        try:
            con = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise self.unreadable("SQLite cannot open it read-only", exc) from exc
        try:
            con.execute("PRAGMA trusted_schema=OFF")
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
            if "gpkg_spatial_ref_sys" not in tables:
                # A SQLite file that is not a GeoPackage (SpatiaLite, FDO ...): GDAL's SQLite driver
                # reads spatial_ref_sys with srtext and proj4text, which this module does not.
                self.unchecked("SQLite databases other than GeoPackage")
            columns = [r[1] for r in con.execute("PRAGMA table_info(gpkg_spatial_ref_sys)")]
            wanted = [c for c in columns if c.lower() not in ("srs_name", "organization", "description")]
            select = ", ".join(f'"{c}"' for c in wanted)
            rows = con.execute(f"SELECT {select} FROM gpkg_spatial_ref_sys").fetchall()  # noqa: S608 - names from the file's schema, quoted
        except sqlite3.Error as exc:
            raise self.unreadable("gpkg_spatial_ref_sys cannot be read", exc) from exc
        finally:
            con.close()
        found = []
        # Every row, not only those gpkg_contents uses: GDAL may read any, and a clean file has few.
        for row in rows:
            srs_id = dict(zip(wanted, row, strict=True)).get("srs_id")
            for column, value in zip(wanted, row, strict=True):
                if isinstance(value, bytes):
                    value = value.decode("utf-8", errors="replace")
                if isinstance(value, str) and value.strip() and value.strip().lower() != "undefined":
                    found.append(DeclaredCRS(f"gpkg_spatial_ref_sys srs_id={srs_id} {column}", value))
        return found

    # -- GeoParquet ----------------------------------------------------------------------------

    def geoparquet(self) -> list[DeclaredCRS]:
        import pyarrow.parquet as pq

        try:
            metadata = pq.read_metadata(self.path).metadata or {}
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... on a damaged footer
            raise self.unreadable("the Parquet footer cannot be read", exc) from exc
        found = []
        for key, value in metadata.items():
            text = value.decode("utf-8", errors="replace")
            if key == b"geo":
                try:
                    geo = json.loads(text)
                except ValueError as exc:
                    raise self.unreadable("the 'geo' metadata is not JSON", exc) from exc
                columns = geo.get("columns") if isinstance(geo, dict) else None
                if not isinstance(columns, dict):
                    raise self.unreadable("the 'geo' metadata has no 'columns' object")
                for name, column in columns.items():
                    if isinstance(column, dict) and column.get("crs") is not None:
                        found.append(DeclaredCRS(f"GeoParquet geo.columns[{name!r}].crs", column["crs"]))
                found.append(DeclaredCRS("GeoParquet 'geo' metadata", text, "text"))
            elif not key.startswith(b"ARROW:"):
                found.append(DeclaredCRS(f"Parquet metadata {key.decode('utf-8', 'replace')!r}", text, "text"))
        return found

    # -- FlatGeobuf ----------------------------------------------------------------------------

    def flatgeobuf(self) -> list[DeclaredCRS]:
        with open(self.path, "rb") as fh:
            head = fh.read(12)
            if len(head) < 12:
                raise self.unreadable("the header is truncated")
            (size,) = struct.unpack_from("<I", head, 8)
            if size < 8 or size > (64 << 20):
                raise self.unreadable(f"the header size {size} is implausible")
            buf = fh.read(size)
        if len(buf) < size:
            raise self.unreadable("the header is truncated")
        fb = _FlatBuffer(buf, self)
        header = fb.root()
        crs = fb.table_field(header, 10)
        if crs is None:
            return []
        strings = {
            name: fb.string_field(crs, index)
            for index, name in ((0, "org"), (2, "name"), (3, "description"), (4, "wkt"), (5, "code_string"))
        }
        found = []
        if strings["wkt"]:
            found.append(DeclaredCRS("FlatGeobuf header crs.wkt", strings["wkt"]))
        if strings["code_string"]:
            # GDAL reads "org:code_string" as a user input definition
            found.append(
                DeclaredCRS(
                    "FlatGeobuf header crs.org:code_string", f"{strings['org'] or 'EPSG'}:{strings['code_string']}"
                )
            )
        for name, text in strings.items():
            if text:
                found.append(DeclaredCRS(f"FlatGeobuf header crs.{name}", text, "text"))
        return found

    # -- GeoJSON -------------------------------------------------------------------------------

    def geojson(self) -> list[DeclaredCRS]:
        found = []
        # Every top-level "crs" (a duplicate key is read differently by different parsers).
        for member in _geojson_top_level_members(self.path, "crs", self):
            if member is None:
                continue
            if not isinstance(member, dict):
                raise self.unreadable("the top-level 'crs' member is not an object")
            raw_props = member.get("properties")
            props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
            if str(member.get("type", "")).lower() == "link" or "href" in props:
                # GDAL opens or fetches the href of a linked CRS; there is no safe way to follow one.
                found.append(DeclaredCRS("GeoJSON crs of type link", str(props.get("href", "")), "link"))
                continue
            found.append(DeclaredCRS("GeoJSON crs member", json.dumps(member), "text"))
            for field_name in ("name", "urn", "code"):
                value = props.get(field_name)
                if isinstance(value, str):
                    found.append(DeclaredCRS(f"GeoJSON crs.properties.{field_name}", value))
        # ESRI JSON, which GDAL also opens from a .json: {"spatialReference": {"wkid": ..., "wkt": ...}}.
        for member in _geojson_top_level_members(self.path, "spatialReference", self):
            if isinstance(member, dict):
                if isinstance(member.get("wkt"), str):
                    found.append(DeclaredCRS("ESRI JSON spatialReference.wkt", member["wkt"]))
                found.append(DeclaredCRS("ESRI JSON spatialReference", json.dumps(member), "text"))
        return found

    # -- GeoTIFF -------------------------------------------------------------------------------

    def geotiff(self) -> list[DeclaredCRS]:
        found = []
        for ifd, ascii_params in _tiff_geo_ascii(self.path, self):
            if ascii_params:
                found.append(DeclaredCRS(f"GeoTIFF IFD {ifd} GeoAsciiParamsTag (citations)", ascii_params, "text"))
        return found

    def raster_sidecars(self) -> list[DeclaredCRS]:
        found = []
        for aux in self._sidecar(".aux"):
            if aux.name.lower().endswith(".aux"):
                self.unchecked(f"an ERDAS .aux sidecar ({aux.name})")
        for xml in self._sidecar(".aux.xml"):
            text = self._read_small(xml)
            for match in re.finditer(r"<SRS\b[^>]*>(.*?)</SRS>", text, re.DOTALL | re.IGNORECASE):
                found.append(DeclaredCRS(f"{xml.name} <SRS>", _xml_unescape(match.group(1))))
            found.append(DeclaredCRS(xml.name, _xml_unescape(text), "text"))
        # .tab (MapInfo CoordSys) and .prj: scanned as text. World files (.tfw/.wld) hold no CRS.
        for side in self._sidecar(".tab", ".prj"):
            found.append(DeclaredCRS(f"{side.name} sidecar", self._read_small(side), "text"))
        return found


def _xml_unescape(text: str) -> str:
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&")):
        text = text.replace(entity, char)
    return re.sub(
        r"&#x([0-9a-fA-F]+);|&#([0-9]+);", lambda m: chr(int(m.group(1) or m.group(2), 16 if m.group(1) else 10)), text
    )


class _FlatBuffer:
    """Just enough of the FlatBuffers wire format to read two tables, with every offset bounds-checked."""

    def __init__(self, buf: bytes, reader: _Reader) -> None:
        self.buf, self.reader = buf, reader

    def _u32(self, at: int) -> int:
        if at < 0 or at + 4 > len(self.buf):
            raise self.reader.unreadable("a FlatGeobuf header offset points outside the header")
        return int(struct.unpack_from("<I", self.buf, at)[0])

    def root(self) -> int:
        return self._u32(0)

    def _field(self, table: int, index: int) -> int | None:
        vtable = table - struct.unpack_from("<i", self.buf, table)[0] if 0 <= table <= len(self.buf) - 4 else -1
        if vtable < 0 or vtable + 4 > len(self.buf):
            raise self.reader.unreadable("a FlatGeobuf vtable lies outside the header")
        (vsize,) = struct.unpack_from("<H", self.buf, vtable)
        slot = 4 + 2 * index
        if slot + 2 > vsize or vtable + slot + 2 > len(self.buf):
            return None
        (offset,) = struct.unpack_from("<H", self.buf, vtable + slot)
        return table + offset if offset else None

    def table_field(self, table: int, index: int) -> int | None:
        at = self._field(table, index)
        return None if at is None else at + self._u32(at)

    def string_field(self, table: int, index: int) -> str | None:
        at = self._field(table, index)
        if at is None:
            return None
        start = at + self._u32(at)
        length = self._u32(start)
        if start + 4 + length > len(self.buf):
            raise self.reader.unreadable("a FlatGeobuf string runs past the header")
        return self.buf[start + 4 : start + 4 + length].decode("utf-8", errors="replace")


def _tiff_geo_ascii(path: Path, reader: _Reader) -> Iterator[tuple[int, str]]:
    """GeoAsciiParamsTag of every IFD (TIFF and BigTIFF): the citations GDAL reads PE/PROJ strings from."""
    size = path.stat().st_size
    with open(path, "rb") as fh:

        def read(at: int, n: int) -> bytes:
            if at < 0 or n < 0 or at + n > size:
                raise reader.unreadable("a TIFF offset points past the end of the file")
            fh.seek(at)
            return fh.read(n)

        head = read(0, 16) if size >= 16 else read(0, 8)
        endian = "<" if head[:2] == b"II" else ">"
        big = head[2:4] in (b"+\x00", b"\x00+")
        if big:
            next_ifd = struct.unpack_from(endian + "Q", head, 8)[0]
            count_fmt, entry_size, entry_fmt, off_fmt, inline = "Q", 20, "HHQ", "Q", 8
        else:
            next_ifd = struct.unpack_from(endian + "I", head, 4)[0]
            count_fmt, entry_size, entry_fmt, off_fmt, inline = "H", 12, "HHI", "I", 4
        seen: set[int] = set()
        ifd_no = 0
        while next_ifd:
            if next_ifd in seen or len(seen) >= 4096:
                raise reader.unreadable("the TIFF IFD chain loops or is implausibly long")
            seen.add(next_ifd)
            count_size = struct.calcsize(count_fmt)
            (count,) = struct.unpack(endian + count_fmt, read(next_ifd, count_size))
            entries = read(next_ifd + count_size, count * entry_size)
            for i in range(count):
                base = i * entry_size
                tag, _type, n = struct.unpack_from(endian + entry_fmt, entries, base)
                if tag != _GEOTIFF_ASCII_TAG:
                    continue
                raw = entries[base + struct.calcsize(entry_fmt) : base + entry_size]
                if n <= inline:
                    data = raw[:n]
                else:
                    (offset,) = struct.unpack(endian + off_fmt, raw)
                    if n > _MAX_SIDECAR_BYTES:
                        raise reader.unreadable("the GeoTIFF ASCII parameters are implausibly long")
                    data = read(offset, n)
                yield ifd_no, data.decode("latin-1").replace("\x00", "")
            offset_size = struct.calcsize(off_fmt)
            (next_ifd,) = struct.unpack(endian + off_fmt, read(next_ifd + count_size + count * entry_size, offset_size))
            ifd_no += 1


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:]', re.DOTALL)


def _geojson_top_level_members(path: Path, name: str, reader: _Reader) -> list[Any]:
    """The values of every top-level member called ``name``, found by a bracket-depth scan (a regex
    in C, no full parse of the features)."""
    text = path.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
    values: list[Any] = []
    depth = 0
    last_string: str | None = None
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
        elif token == ":":
            if depth == 1 and last_string is not None:
                try:
                    key = json.loads(last_string)
                except ValueError:
                    key = None
                if key == name:
                    try:
                        value, _ = json.JSONDecoder().raw_decode(text, _skip_space(text, match.end()))
                    except ValueError as exc:
                        raise reader.unreadable(f"the top-level {name!r} member is not valid JSON", exc) from exc
                    values.append(value)
        if token.startswith('"'):
            last_string = token
        elif token != ":":
            last_string = None
    return values


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at
