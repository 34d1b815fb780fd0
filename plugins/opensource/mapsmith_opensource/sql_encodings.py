"""Shapefile text encodings for run_sql: the .cpg a shapefile carries, turned into the reading option
DuckDB's GDAL (or its own ST_ReadSHP) needs to decode the .dbf's text as UTF-8, or a refusal.

Split from ``sql_analysis`` (the parser wall), which calls it for every shapefile the SQL reads. This
module must never let a code page be read as another one that gives different characters: text read
wrongly would be written into string columns and pass every later check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# A shapefile's .cpg names the code page of its .dbf text. The GDAL inside duckdb-spatial 1.5.5 is built
# without iconv: it recodes ISO-8859-1 to UTF-8 when told to (open option ENCODING), but returns CP1252
# bytes unchanged inside VARCHAR values that are not UTF-8 (measured: "Zürich" came back as b"Z\xfcrich",
# and run_sql wrote those bytes into a Parquet string column). CP1252 and ISO-8859-1 differ only in
# bytes 0x80-0x9F, so a CP1252 file without those bytes is read exactly as ISO-8859-1; one with them,
# or any other code page, is refused with the way round (convert_format recodes through pyogrio's GDAL).
_UTF8_NAMES = frozenset({"utf-8", "utf8", "65001"})
_LATIN1_NAMES = frozenset({"iso-8859-1", "iso8859-1", "iso88591", "88591", "8859-1", "latin1", "latin-1", "28591"})
_CP1252_NAMES = frozenset({"cp1252", "1252", "windows-1252", "win1252", "ansi 1252", "ansi1252"})
ENCODING_OPTION = "ENCODING=ISO-8859-1"


def shapefile_encoding(path: Path, given: str) -> str | None:
    """The .cpg encoding of a shapefile when it needs recoding (None for UTF-8 or no .cpg); refuses
    encodings DuckDB's GDAL cannot recode exactly."""
    from mapsmith_opensource.sql_analysis import _refuse  # the parser wall's refusal (it imports this module)

    cpg = next((p for p in (path.with_suffix(".cpg"), path.with_suffix(".CPG")) if p.is_file()), None)
    if cpg is None:
        return None  # GDAL's default reading; text that is not UTF-8 is refused after the query runs
    declared = cpg.read_bytes()[:64].decode("ascii", "replace").strip()
    name = declared.lower()
    if name in _UTF8_NAMES:
        return None
    if name in _LATIN1_NAMES:
        return "ISO-8859-1"
    if name in _CP1252_NAMES:
        differing = cp1252_only_bytes(path.with_suffix(".dbf"))
        if differing == 0:
            return "CP1252 (read as ISO-8859-1: no byte of the .dbf's records lies in 0x80-0x9F)"
        raise _refuse(
            "SQL_ENCODING_UNSUPPORTED",
            f"{given} is CP1252 text (its .cpg says {declared!r}) with {differing} byte(s) in 0x80-0x9F "
            "(such as the euro sign or typographic quotes), which DuckDB's GDAL cannot recode",
            f"convert_format {given} to .gpkg first (it recodes CP1252 to UTF-8) and query the GeoPackage",
            path=given,
            encoding=declared,
        )
    raise _refuse(
        "SQL_ENCODING_UNSUPPORTED",
        f"{given} declares the text encoding {declared!r} in its .cpg, which DuckDB's GDAL cannot recode",
        f"convert_format {given} to .gpkg first (it recodes the text to UTF-8) and query the GeoPackage",
        path=given,
        encoding=declared,
    )


def cp1252_only_bytes(dbf: Path) -> int:
    """Bytes in 0x80-0x9F in the records of a .dbf (after its header), where CP1252 and ISO-8859-1 differ."""
    if not dbf.is_file():
        return 0
    with open(dbf, "rb") as handle:
        head = handle.read(32)
        header_bytes = int.from_bytes(head[8:10], "little") if len(head) >= 10 else 0
        handle.seek(header_bytes)
        count = 0
        while chunk := handle.read(1 << 20):
            count += sum(chunk.count(bytes([b])) for b in range(0x80, 0xA0))
    return count


def is_encoding_option(value: dict[str, Any]) -> bool:
    children = value.get("children") or []
    return (
        value.get("class") == "FUNCTION"
        and value.get("function_name") == "list_value"
        and len(children) == 1
        and children[0].get("class") == "CONSTANT"
        and (children[0].get("value") or {}).get("value") == ENCODING_OPTION
    )


def string_constant(text: str) -> dict[str, Any]:
    return {
        "class": "CONSTANT",
        "type": "VALUE_CONSTANT",
        "alias": "",
        "query_location": 0,
        "value": {"type": {"id": "VARCHAR", "type_info": None}, "is_null": False, "value": text},
    }


def encoding_option_node(key: str = "open_options", value: dict[str, Any] | None = None) -> dict[str, Any]:
    """A named argument as DuckDB's AST spells it: open_options=['ENCODING=ISO-8859-1'] by default."""
    constant = string_constant(ENCODING_OPTION)
    return {
        "class": "COMPARISON",
        "type": "COMPARE_EQUAL",
        "alias": "",
        "query_location": 0,
        "left": {
            "class": "COLUMN_REF",
            "type": "COLUMN_REF",
            "alias": "",
            "query_location": 0,
            "column_names": [key],
        },
        "right": value
        if value is not None
        else {
            "class": "FUNCTION",
            "type": "FUNCTION",
            "alias": "",
            "query_location": 0,
            "function_name": "list_value",
            "schema": "main",
            "children": [constant],
            "filter": None,
            "order_bys": {"type": "ORDER_MODIFIER", "orders": []},
            "distinct": False,
            "is_operator": False,
            "export_state": False,
            "catalog": "",
        },
    }
