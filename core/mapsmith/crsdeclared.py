"""Reading the CRS a dataset declares, from its bytes, before GDAL opens it (for ``crsguard``).

Each format MapSmith accepts under a workspace is parsed here just far enough to find every CRS
definition GDAL or PROJ would read from it and from the sidecars GDAL reads with it: a GeoPackage's
``gpkg_spatial_ref_sys``, GeoParquet's ``geo`` metadata, a FlatGeobuf header, GeoTIFF citations and
``.aux.xml``/``.tab``/``.prj`` sidecars, a GeoJSON ``crs`` member. The readers are hand-written
because the point is to read the declaration without GDAL (the library being guarded), and each
refuses what it cannot read the same way the engine would: a ``gpkg_spatial_ref_sys`` that is a
view, a virtual table or has triggers (its answer could depend on the SQLite version), JSON with a
duplicated key at any depth (parsers disagree on which one wins).

What this module must never do: import GDAL, judge a definition (``crsguard`` does), or return a
partial list when a file could not be read (it raises ``CRS_DECLARATION_UNREADABLE`` instead).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

from mapsmith.errors import InputError

__all__ = [
    "CHECKED_FORMATS",
    "UNCHECKED_FORMATS",
    "DeclaredCRS",
    "DuplicateKeyError",
    "read_declared_crs",
    "strict_json_loads",
]

#: Formats whose declared CRS is read here before GDAL opens them (what a refusal lists).
CHECKED_FORMATS = (
    "GeoPackage (.gpkg)",
    "shapefile (.shp with .prj)",
    "GeoParquet (.parquet)",
    "GeoTIFF (.tif/.tiff, with .aux.xml/.tfw/.tab/.prj sidecars)",
    "GeoJSON (.geojson/.json)",
    "FlatGeobuf (.fgb)",
    "tables without a CRS (.csv/.tsv/.xlsx/.ods/.dbf)",
    "KML/KMZ (WGS 84 by definition; external references refused)",
    "zipped shapefiles (.zip, the .prj members)",
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
    if suffix in (".kml", ".kmz", ".zip"):
        from mapsmith import containers

        # KML's CRS is WGS 84 by its specification: nothing to read, only references to refuse.
        containers.check_container(p, argument=argument)
        prjs = containers.zip_prj_texts(p, argument=argument) if suffix == ".zip" else []
        return [DeclaredCRS(f"{member} in {p.name}", text) for member, text in prjs]
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
    if suffix == ".json" and text_head.startswith(b"["):
        return []  # a JSON array of records is a table (read by tables.read_table, not GDAL): no CRS
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
            schema = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
            srs = [(kind, sql) for kind, name, _, sql in schema if str(name).lower() == "gpkg_spatial_ref_sys"]
            if not srs:
                # A SQLite file that is not a GeoPackage (SpatiaLite, FDO ...): GDAL's SQLite driver
                # reads spatial_ref_sys with srtext and proj4text, which this module does not.
                self.unchecked("SQLite databases other than GeoPackage")
            self._plain_table(srs, schema)
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

    def _plain_table(self, srs: list[tuple[Any, Any]], schema: list[tuple[Any, ...]]) -> None:
        """The CRS table must be stored rows: a view, a virtual table or a trigger computes its answer
        (a view can ask ``sqlite_version()``), so the rows read here could differ from GDAL's."""
        kind, sql = srs[0]
        triggers = [
            name for k, name, table, _ in schema if k == "trigger" and str(table).lower() == "gpkg_spatial_ref_sys"
        ]
        what = None
        if kind != "table":
            what = f"a {kind}"
        elif str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
            what = "a virtual table"
        elif triggers:
            what = f"a table with triggers ({', '.join(map(str, triggers))})"
        if what is not None:
            raise InputError(
                f"{self.argument}: the GeoPackage's gpkg_spatial_ref_sys is {what}, so the CRS GDAL would read "
                "can differ from the one read here; it is not opened",
                code="GPKG_SRS_NOT_A_TABLE",
                evidence={"argument": self.argument, "path": self.path.name, "gpkg_spatial_ref_sys": what},
                hint="rewrite the GeoPackage with GDAL outside MapSmith (ogr2ogr -f GPKG new.gpkg old.gpkg), which "
                "stores gpkg_spatial_ref_sys as a plain table, and pass the new file",
            )

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
                    geo = strict_json_loads(text)
                except ValueError as exc:
                    # A duplicated key included: pyarrow/GDAL readers keep the first, Python the last.
                    raise self.unreadable(f"the 'geo' metadata is not strict JSON: {exc}", exc) from exc
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
            count_size = struct.calcsize(endian + count_fmt)
            (count,) = struct.unpack(endian + count_fmt, read(next_ifd, count_size))
            entries = read(next_ifd + count_size, count * entry_size)
            for i in range(count):
                base = i * entry_size
                tag, _type, n = struct.unpack_from(endian + entry_fmt, entries, base)
                if tag != _GEOTIFF_ASCII_TAG:
                    continue
                raw = entries[base + struct.calcsize(endian + entry_fmt) : base + entry_size]
                if n <= inline:
                    data = raw[:n]
                else:
                    (offset,) = struct.unpack(endian + off_fmt, raw)
                    if n > _MAX_SIDECAR_BYTES:
                        raise reader.unreadable("the GeoTIFF ASCII parameters are implausibly long")
                    data = read(offset, n)
                yield ifd_no, data.decode("latin-1").replace("\x00", "")
            offset_size = struct.calcsize(endian + off_fmt)
            (next_ifd,) = struct.unpack(endian + off_fmt, read(next_ifd + count_size + count * entry_size, offset_size))
            ifd_no += 1


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice: readers disagree on which value wins."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKeyError(f"the key {key!r} appears twice in one object")
        seen[key] = value
    return seen


_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicate_keys)


def strict_json_loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses a duplicated key at any depth (``DuplicateKeyError``, a ValueError).

    The CRS read here must be the one the engine reads; with two ``crs`` keys Python keeps the last
    and other parsers the first, so a file with duplicates is refused rather than read one way.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text, object_pairs_hook=_no_duplicate_keys)


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
                        value, _ = _STRICT_DECODER.raw_decode(text, _skip_space(text, match.end()))
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
