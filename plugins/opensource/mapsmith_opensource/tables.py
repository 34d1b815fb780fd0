"""Tables without geometry as datasets: read, write and verify CSV, JSON, Parquet and Excel (.xlsx).

One module for every operation that reads or delivers a table (run_sql, convert_format, and the field
operations), so a table is written and checked the same way whoever produced it. The API:

- ``read_table(path, *, encoding="utf-8", sheet=None) -> pyarrow.Table``: a CSV (decoded from
  ``encoding``; bytes that do not decode are refused, never replaced; a column pyarrow types as numbers
  stays text where a number would change a cell: "007", 12345678901234567890), a JSON array of
  records, a Parquet file or one sheet of an .xlsx workbook.
- ``write_table(table, path, *, sheet_name=None)``: writes exactly at ``path`` (the runner's temporary
  output); ``write_table_atomic`` writes beside ``path`` and renames, for callers outside the runner.
- ``verify_table(path, table, *, sheet_name=None) -> list[Check]``: reads the written bytes back (not the
  table in memory) and compares row count, column names in order, and each column's type family.
- ``deliver_table(ctx, table, *, crs=None, sheet_name=None)``: the three steps for an operation: refuse
  what the format cannot hold, write ``ctx.temp_output``, verify, and hand the runner
  ``ctx.table_output`` (a ``DatasetInfo`` of kind "table"), which the runner digests into the manifest.

Engines: pyarrow writes and reads CSV and Parquet; the standard library writes JSON (pyarrow writes
only line-delimited JSON, and a deliverable JSON is one array of records); GDAL's XLSX driver (through
pyogrio, already a dependency) writes and reads Excel, so no new package is needed. Excel refuses a
workbook whose sheet name is longer than 31 characters or holds ``[]:*?/\\`` while GDAL writes one
without complaint, so those names are refused here. What is hand-written is the JSON value mapping
(dates to ISO 8601 text, NaN to null with a count), the type-family comparison (no library compares
a schema with what a text format can carry) and ``number_loses``, the cell-by-cell check that a CSV
column read as numbers gives every cell back (no reader checks it).

This module must never write a value the format cannot hold faithfully without refusing or saying so,
and never report a check it did not make on the bytes written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError, OutputError

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pyarrow as pa

    from mapsmith.runner import RunContext
    from mapsmith.verify import Check

# Output suffixes that are always tables; ".parquet" is a table only when the data has no geometry.
TABLE_SUFFIXES = (".csv", ".json", ".xlsx")
READABLE_SUFFIXES = (".csv", ".tsv", ".json", ".parquet", ".xlsx")
EXCEL_SHEET_MAX_CHARS = 31
EXCEL_SHEET_FORBIDDEN = frozenset("[]:*?/\\")
EXCEL_MAX_DATA_ROWS = 1_048_575  # 1,048,576 rows a sheet, one of them the header
EXCEL_CELL_MAX_CHARS = 32_767


def is_table_suffix(path: Path | str) -> bool:
    """Whether a path names a format that holds tables only (CSV, JSON records, Excel)."""
    text = str(path).lower()
    return any(text.endswith(suffix) for suffix in TABLE_SUFFIXES)


# -- reading ----------------------------------------------------------------------------------------

# Every whole number up to 2**53 is exactly representable as a double; beyond it a digit may be lost.
MAX_EXACT_INTEGER = 2**53


def number_loses(texts: Iterable[Any], numbers: Iterable[Any], *, integers: bool) -> str | None:
    """Why reading a CSV column's cells (``texts``) as the numbers a type detection gave (``numbers``) would
    lose something -- a leading zero, a digit, a value -- or None when every cell comes back.

    Hand-written because no reader checks this: pyarrow reads "007" as 7 and 12345678901234567890 as a
    double that is 12345678901234567168; GDAL reads the latter as the largest 64-bit integer.
    """
    import re

    for text, number in zip(texts, numbers, strict=True):
        if text is None or (isinstance(text, float) and text != text) or not str(text).strip():
            continue  # an empty cell is read as null either way
        cell = str(text).strip()
        if re.match(r"[+-]?0[0-9]", cell):
            return f"{text!r} has a leading zero, which a number would drop"
        try:
            if integers or re.fullmatch(r"[+-]?[0-9]+", cell):
                # compared as Python ints: exact, where a double may already have rounded the text
                same = int(cell) == number if integers else float(number).is_integer() and int(cell) == int(number)
            elif abs(float(cell)) > MAX_EXACT_INTEGER:
                # beyond 2**53 a double rounds even whole numbers: the text's exact value must be the double's
                same = decimal.Decimal(cell) == decimal.Decimal(number)
            else:
                same = float(cell) == number
        except (ValueError, OverflowError, TypeError, decimal.InvalidOperation):
            same = False
        if not same:
            return f"{text!r} was read as {number!r}"
    return None


def _numbers_that_lose_kept_as_text(path: Path, table: pa.Table, encoding: str, parse: Any) -> pa.Table:
    """The CSV as pyarrow typed it, except the numeric columns a number would change (number_loses),
    which are read again as the text they are."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    numeric = [
        n
        for n, kind in zip(table.column_names, table.schema.types, strict=True)
        if pa.types.is_integer(kind) or pa.types.is_floating(kind)
    ]
    if not numeric:
        return table
    texts = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(encoding=encoding),
        parse_options=parse,
        convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(numeric, pa.string())),
    )
    for name in numeric:
        column = table.column(name)
        if number_loses(texts.column(name).to_pylist(), column.to_pylist(), integers=pa.types.is_integer(column.type)):
            table = table.set_column(table.column_names.index(name), name, texts.column(name))
    return table


def read_table(path: Path, *, encoding: str = "utf-8", sheet: str | None = None) -> pa.Table:
    """The table in ``path`` as Arrow; refusals are TABLE_* codes with a hint."""
    import pyarrow as pa

    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        import pyarrow.csv as pacsv

        try:
            "".encode(encoding)
        except LookupError as exc:
            raise InputError(
                f"{encoding!r} is not a text encoding Python knows",
                code="TABLE_ENCODING_UNKNOWN",
                evidence={"path": path.name, "encoding": encoding},
                hint="name the encoding as Python spells it: utf-8, cp1252, latin-1, utf-16 ...",
            ) from exc
        parse = pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
        try:
            table = pacsv.read_csv(path, read_options=pacsv.ReadOptions(encoding=encoding), parse_options=parse)
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            text = str(exc)
            if "UTF8" in text or "utf-8" in text.lower() or isinstance(exc, UnicodeDecodeError):
                raise InputError(
                    f"{path.name} is not valid {encoding} text: {text[:200]}",
                    code="TABLE_ENCODING_INVALID",
                    evidence={"path": path.name, "encoding": encoding},
                    hint="name the file's encoding (cp1252 and latin-1 are common for files from Windows "
                    "and older GIS exports); MapSmith never replaces bytes it cannot decode",
                ) from exc
            raise InputError(
                f"{path.name} cannot be read as CSV: {text[:200]}",
                code="TABLE_UNREADABLE",
                evidence={"path": path.name},
                hint="check that every row has as many fields as the header",
            ) from exc
        # pyarrow types a column whose bytes do not decode as binary instead of failing: refused here.
        undecoded = [n for n, t in zip(table.column_names, table.schema.types, strict=True) if pa.types.is_binary(t)]
        if undecoded:
            raise InputError(
                f"{path.name} is not valid {encoding} text: column(s) {undecoded} hold bytes that do not decode",
                code="TABLE_ENCODING_INVALID",
                evidence={"path": path.name, "encoding": encoding, "columns": undecoded},
                hint="name the file's encoding (cp1252 and latin-1 are common for files from Windows "
                "and older GIS exports); MapSmith never replaces bytes it cannot decode",
            )
        return _numbers_that_lose_kept_as_text(path, table, encoding, parse)
    if suffix == ".json":
        try:
            records = json.loads(path.read_text(encoding))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(
                f"{path.name} is not JSON text in {encoding}: {exc}",
                code="TABLE_UNREADABLE",
                evidence={"path": path.name, "encoding": encoding},
                hint='a JSON table is one array of objects, e.g. [{"id": 1}, {"id": 2}]',
            ) from exc
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise InputError(
                f"{path.name} is not an array of records (objects)",
                code="TABLE_JSON_NOT_RECORDS",
                evidence={"path": path.name, "top_level": type(records).__name__},
                hint='a JSON table is one array of objects, e.g. [{"id": 1}, {"id": 2}]',
            )
        return pa.Table.from_pylist(records)
    if suffix in (".parquet", ".geoparquet"):
        import pyarrow.parquet as pq

        # one file by ParquetFile: read_table goes through pyarrow.dataset, which imports pandas (0.25 s)
        return pq.ParquetFile(path).read() if path.is_file() else pq.read_table(path)
    if suffix == ".xlsx":
        import pyogrio

        sheets = [str(name) for name, _ in pyogrio.list_layers(path)]
        if sheet is None and len(sheets) > 1:
            raise InputError(
                f"{path.name} holds {len(sheets)} sheets ({', '.join(sheets)}) and none was named",
                code="LAYER_REQUIRED",
                evidence={"path": path.name, "layers": sheets},
                hint="name the sheet with the 'layer' argument",
            )
        chosen = sheet or (sheets[0] if sheets else None)
        if chosen not in sheets:
            raise InputError(
                f"{path.name} has no sheet {chosen!r}; its sheets are {sheets}",
                code="LAYER_NOT_FOUND",
                evidence={"path": path.name, "layers": sheets},
                hint=f"name one of {sheets}",
            )
        # HEADERS=FORCE: the first row is the header even when every cell of the sheet is text.
        _meta, table = pyogrio.read_arrow(path, layer=chosen, HEADERS="FORCE", FIELD_TYPES="AUTO")
        return table.drop_columns([c for c in table.column_names if c in ("FID", "OGC_FID")])
    raise InputError(
        f"{path.name}: {suffix or 'no extension'} is not a table format MapSmith reads",
        code="TABLE_FORMAT_UNSUPPORTED",
        evidence={"path": path.name, "format": suffix},
        hint="tables are read from " + ", ".join(READABLE_SUFFIXES),
    )


# -- writing ----------------------------------------------------------------------------------------


def check_sheet_name(name: str, argument: str = "sheet_name") -> None:
    """Refuse a sheet name Excel will not open (GDAL writes it anyway)."""
    bad = sorted(set(name) & EXCEL_SHEET_FORBIDDEN)
    if not name or len(name) > EXCEL_SHEET_MAX_CHARS or bad or name.startswith("'") or name.endswith("'"):
        raise OutputError(
            f"{name!r} is not a sheet name Excel accepts: at most {EXCEL_SHEET_MAX_CHARS} characters, "
            "none of [ ] : * ? / \\, not starting or ending with an apostrophe",
            code="TABLE_SHEET_NAME_INVALID",
            evidence={"argument": argument, "sheet_name": name, "characters": len(name), "forbidden": bad},
            hint=f"name the sheet in at most {EXCEL_SHEET_MAX_CHARS} characters without those signs "
            "(the sheet is named after the output file unless you name it)",
        )


def check_writable(table: pa.Table, suffix: str, *, sheet_name: str | None = None) -> None:
    """Refuse, before anything is written, a table the format cannot hold faithfully."""
    import pyarrow as pa

    if suffix in (".parquet", ".geoparquet"):
        return
    for name, column_type in zip(table.column_names, table.schema.types, strict=True):
        nested = pa.types.is_nested(column_type) or pa.types.is_binary(column_type)
        nested = nested or pa.types.is_large_binary(column_type) or pa.types.is_fixed_size_binary(column_type)
        if nested:
            raise OutputError(
                f"column {name!r} holds {column_type} values, which a {suffix} table cannot hold as cells",
                code="TABLE_TYPE_UNSUPPORTED",
                evidence={"column": name, "type": str(column_type), "format": suffix},
                hint="write .parquet, which keeps nested and binary types, or turn the column into text first "
                "(in run_sql: to_json(col), ST_AsText(geom), hex(blob))",
            )
    names = [str(n) for n in table.column_names]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise OutputError(
            f"the table has columns with the same name: {duplicates}",
            code="TABLE_DUPLICATE_COLUMNS",
            evidence={"columns": duplicates},
            hint="give every column its own name (AS in SQL, or rename_fields)",
        )
    if suffix == ".xlsx":
        check_sheet_name(sheet_name or "", "sheet_name")
        if table.num_rows > EXCEL_MAX_DATA_ROWS:
            raise OutputError(
                f"the table has {table.num_rows} rows; an Excel sheet holds {EXCEL_MAX_DATA_ROWS} below its header",
                code="TABLE_XLSX_TOO_MANY_ROWS",
                evidence={"rows": table.num_rows, "limit": EXCEL_MAX_DATA_ROWS},
                hint="write .csv or .parquet, which have no row limit, or select fewer rows",
            )
        import pyarrow.compute as pc

        for name, column_type in zip(table.column_names, table.schema.types, strict=True):
            if pa.types.is_string(column_type) or pa.types.is_large_string(column_type):
                longest = pc.max(pc.utf8_length(table.column(name))).as_py() or 0
                if longest > EXCEL_CELL_MAX_CHARS:
                    raise OutputError(
                        f"column {name!r} has a value of {longest} characters; an Excel cell holds "
                        f"{EXCEL_CELL_MAX_CHARS}",
                        code="TABLE_XLSX_CELL_TOO_LONG",
                        evidence={"column": name, "characters": longest, "limit": EXCEL_CELL_MAX_CHARS},
                        hint="write .csv or .parquet, or shorten the column first",
                    )


def write_table(table: pa.Table, path: Path, *, sheet_name: str | None = None) -> list[str]:
    """Write ``table`` exactly at ``path`` in the format its suffix names; returns notes to disclose."""
    suffix = path.suffix.lower()
    check_writable(table, suffix, sheet_name=sheet_name)
    notes: list[str] = []
    if suffix == ".csv":
        import pyarrow.csv as pacsv

        # "needed" quoting: numbers stay bare, so a spreadsheet reads them as numbers.
        pacsv.write_csv(table, path, pacsv.WriteOptions(include_header=True, quoting_style="needed"))
    elif suffix == ".json":
        records, nan_count = _json_records(table)
        if nan_count:
            notes.append(f"{nan_count} NaN or infinite value(s) were written as JSON null (JSON has no NaN)")
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            json.dump(records, handle, ensure_ascii=False, allow_nan=False, indent=1)
            handle.write("\n")
    elif suffix in (".parquet", ".geoparquet"):
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif suffix == ".xlsx":
        import pyogrio

        frame = table.to_pandas()
        pyogrio.write_dataframe(frame, path, driver="XLSX", layer=sheet_name)
    else:
        raise OutputError(
            f"{path.name}: {suffix or 'no extension'} is not a table format",
            code="TABLE_FORMAT_UNSUPPORTED",
            evidence={"format": suffix},
            hint="write a table as .csv, .json, .parquet or .xlsx",
        )
    return notes


def write_table_atomic(table: pa.Table, path: Path, *, sheet_name: str | None = None) -> list[str]:
    """``write_table`` beside ``path`` under a temporary name, then one rename into place."""
    temp = path.with_name(f".{path.stem}.tmp-{uuid.uuid4().hex[:8]}{path.suffix}")
    try:
        notes = write_table(table, temp, sheet_name=sheet_name)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return notes


def _json_value(value: Any) -> tuple[Any, bool]:
    """A JSON-safe value and whether a NaN or infinity became null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None, True
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat(), False
    if isinstance(value, dt.timedelta):
        return value.total_seconds(), False
    if isinstance(value, decimal.Decimal):
        return str(value), False  # text keeps every digit a float would round away
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex(), False  # as DuckDB prints a BLOB
    if isinstance(value, list):
        items = [_json_value(v) for v in value]
        return [v for v, _ in items], any(n for _, n in items)
    if isinstance(value, dict):
        pairs = {k: _json_value(v) for k, v in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(n for _, n in pairs.values())
    return value, False


def _json_records(table: pa.Table) -> tuple[list[dict[str, Any]], int]:
    nan_count = 0
    records = []
    for row in table.to_pylist():
        out = {}
        for key, value in row.items():
            out[key], was_nan = _json_value(value)
            nan_count += was_nan
        records.append(out)
    return records, nan_count


# -- verifying --------------------------------------------------------------------------------------


def type_family(column_type: Any) -> str:
    """integer, number, boolean, text, temporal or other: what a text format can say a value is."""
    import pyarrow as pa

    if pa.types.is_boolean(column_type):
        return "boolean"
    if pa.types.is_integer(column_type):
        return "integer"
    if pa.types.is_floating(column_type) or pa.types.is_decimal(column_type):
        return "number"
    if pa.types.is_string(column_type) or pa.types.is_large_string(column_type):
        return "text"
    if pa.types.is_temporal(column_type):
        return "temporal"
    if pa.types.is_null(column_type):
        return "null"
    return "other"


def _compatible(written: str, read: str, suffix: str) -> bool:
    if written == read or read == "null" or written == "null":
        return True
    if suffix == ".json":
        # JSON has numbers, text, booleans: dates travel as ISO text, integral floats may read as integers.
        return (written, read) in {("temporal", "text"), ("number", "integer"), ("integer", "number")}
    if suffix == ".xlsx":
        # Excel stores every number as a double; GDAL reads integral ones back as integers.
        return {written, read} <= {"integer", "number"} or (written, read) in {("temporal", "text")}
    return False


def _read_back(path: Path, table: pa.Table, sheet_name: str | None) -> pa.Table:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        import pyarrow as pa
        import pyarrow.csv as pacsv

        # Read with the types written: a column that no longer parses as its type fails here.
        types = {n: t for n, t in zip(table.column_names, table.schema.types, strict=True) if not pa.types.is_null(t)}
        return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=types))
    return read_table(path, sheet=sheet_name)


def verify_table(path: Path, table: pa.Table, *, sheet_name: str | None = None) -> list[Check]:
    """Checks of the bytes at ``path`` against ``table``: row count, columns in order, type families."""
    from mapsmith.verify import Check

    suffix = path.suffix.lower()
    try:
        back = _read_back(path, table, sheet_name)
    except Exception as exc:  # any failure to read back is a failed check, with its reason
        return [Check("x-mapsmith:table_readable", False, f"the written {suffix} could not be read back: {exc}"[:300])]
    checks = [Check("x-mapsmith:table_readable", True, f"the written {suffix} was read back")]
    checks.append(
        Check(
            "x-mapsmith:row_count",
            back.num_rows == table.num_rows,
            f"expected {table.num_rows} rows, read back {back.num_rows}",
        )
    )
    written_names = [str(n) for n in table.column_names]
    read_names = [str(n) for n in back.column_names]
    checks.append(
        Check(
            "x-mapsmith:columns_present",
            read_names == written_names,
            f"expected columns {written_names}, read back {read_names}",
        )
    )
    mismatched = []
    for name, column_type in zip(table.column_names, table.schema.types, strict=True):
        if name not in back.column_names:
            continue
        want, got = type_family(column_type), type_family(back.schema.field(name).type)
        if not _compatible(want, got, suffix):
            mismatched.append(f"{name}: wrote {want}, read {got}")
    checks.append(
        Check(
            "x-mapsmith:column_types",
            not mismatched,
            "every column reads back as the type family written" if not mismatched else "; ".join(mismatched),
        )
    )
    return checks


def schema_record(table: pa.Table) -> list[dict[str, str]]:
    """Column names and types as the manifest and answers state them."""
    return [{"name": str(n), "type": str(t)} for n, t in zip(table.column_names, table.schema.types, strict=True)]


def deliver_table(ctx: RunContext, table: pa.Table, *, crs: Any = None, sheet_name: str | None = None) -> None:
    """Write ``table`` to the run's temporary output, verify it, and hand the runner its description.

    ``crs`` (a pyproj CRS, or None) is the CRS of coordinates the table carries as text or columns (WKT,
    x/y); it is recorded as the output's CRS and stated in a note by the caller.
    """
    from mapsmith.registry import DatasetInfo

    assert ctx.temp_output is not None and ctx.output_path is not None
    suffix = ctx.output_path.suffix.lower()
    if suffix == ".xlsx":
        sheet_name = sheet_name or ctx.output_path.stem
    ctx.notes.extend(write_table(table, ctx.temp_output, sheet_name=sheet_name))
    ctx.checks.extend(verify_table(ctx.temp_output, table, sheet_name=sheet_name))
    ctx.parameters["x-mapsmith:table_columns"] = schema_record(table)
    if sheet_name is not None:
        ctx.parameters["x-mapsmith:sheet_name"] = sheet_name
    from mapsmith.crs import crs_label

    ctx.table_output = DatasetInfo(
        path=str(ctx.arguments.get("output_path")),
        kind="table",
        driver={".csv": "CSV", ".json": "JSON", ".xlsx": "XLSX"}.get(suffix, "Parquet"),
        layer=sheet_name,
        layers=(sheet_name,) if sheet_name else (),
        crs_wkt=crs.to_wkt() if crs is not None else None,
        crs_label=crs_label(crs) if crs is not None else None,
        crs_is_geographic=bool(crs.is_geographic) if crs is not None else None,
        feature_count=table.num_rows,
        geometry_types=(),
        bounds=None,
        bounds_lonlat=None,
        fields=tuple(str(n) for n in table.column_names),
    )
