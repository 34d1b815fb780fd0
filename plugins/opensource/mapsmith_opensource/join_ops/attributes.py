"""join_attributes: a table's rows attached to a layer's features by key.

It must never normalise a key unless the conversion is lossless, never pick one of several table rows
for a key, and never drop an unmatched feature without counting it.

A CSV's columns are typed by GDAL's own detection (the CSV driver's AUTODETECT_TYPE, over the whole
file): GDAL already reads the CSV (separators, quoting, encodings, .csvt files) and pandas' detection
would be a second reader with rules of its own. A spreadsheet's 310101.0 codes thus read as numbers
and the lossless key normalisation can match them. GDAL keeps "007" as text, but it reads
"12345678901234567890" as the largest 64-bit integer without a word, so each detected column is
compared cell by cell with its text (tables.number_loses) and kept as text, with the reason, where a
number would lose a digit or a leading zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    read_input,
    set_engine,
    write_output,
)
from mapsmith_opensource.join_ops.shared import _attach, _attributes, _field_not_found, _given, _plain
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.tables import number_loses

if TYPE_CHECKING:
    import pandas as pd

    from mapsmith.runner import RunContext


# How many unmatched keys of each side join_attributes names in its answer and manifest.
UNMATCHED_KEYS_SHOWN = 20
TABLE_SUFFIX = "_table"
# Every whole number up to 2**53 is exactly representable as a double; beyond it 310101.0-style
# keys may already have lost digits, so they are not normalised to text.
MAX_EXACT_INTEGER = 2**53


REGISTRATIONS = (Registration("join_attributes", "join_attributes"),)

# -- join_attributes --------------------------------------------------------------------------


def _read_table(ctx: RunContext) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """table_path's attributes, and for a CSV the record of its column types (None for other formats)."""
    import pandas as pd
    import pyogrio

    path, layer = ctx.paths["table_path"], ctx.layers.get("table_path")
    key = ctx.arguments["table_key"]
    if io.is_parquet(path):
        return _attributes(io.read_layer(path)), None
    try:
        table = pyogrio.read_dataframe(io.vector_source(path)[0], layer=layer, read_geometry=False)
        if key not in table.columns and path.suffix.lower() in (".xlsx", ".ods"):
            # GDAL takes the first row as a header only when its cells differ in type from the next
            # row's; a sheet of text cells reads as Field1, Field2 ... The first row naming the key
            # is the evidence that it is a header.
            forced = pyogrio.read_dataframe(
                io.vector_source(path)[0], layer=layer, read_geometry=False, HEADERS="FORCE"
            )
            if key in forced.columns:
                ctx.notes.append(
                    "GDAL did not detect the header row of table_path (its cells are all text); it was read "
                    f"with HEADERS=FORCE because the first row names table_key {key!r}"
                )
                table = forced
    except Exception as exc:
        raise InputError(
            f"cannot read {_given(ctx, 'table_path')} as a table: {exc}",
            code="INPUT_UNREADABLE",
            evidence={"argument": "table_path", "path": _given(ctx, "table_path"), "engine_message": str(exc)},
            hint="pass a CSV, XLSX, ODS or GeoPackage attribute table",
        ) from exc
    info = ctx.inputs.get("table_path")
    if info is not None and info.kind == "vector":
        ctx.notes.append("table_path has geometries; only its attributes were read")
    if info is not None and info.driver == "CSV":
        return _typed_csv(ctx, pd.DataFrame(table), io.vector_source(path)[0], layer)
    return pd.DataFrame(table), None


def _typed_csv(
    ctx: RunContext, text: pd.DataFrame, source: str, layer: str | None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The CSV with the columns GDAL detects as numbers read as numbers, where no cell loses anything.

    ``text`` is the CSV as GDAL reads it without detection (every column text); a column stays text when
    detection gives another type than a number (dates, times: not asked for here) or a cell would change.
    Also returns the record of which columns were read as numbers and which kept as text, and why.
    """
    import pyogrio
    from pandas.api import types

    detected = pyogrio.read_dataframe(
        source, layer=layer, read_geometry=False, AUTODETECT_TYPE="YES", AUTODETECT_SIZE_LIMIT="0"
    )
    numbers: dict[str, str] = {}
    kept: dict[str, str] = {}
    if list(detected.columns) == list(text.columns) and len(detected) == len(text):
        for column in text.columns:
            values = detected[column]
            if types.is_bool_dtype(values) or not types.is_numeric_dtype(values):
                continue
            problem = number_loses(text[column].tolist(), values.tolist(), integers=types.is_integer_dtype(values))
            if problem is None:
                numbers[str(column)] = "integer" if types.is_integer_dtype(values) else "decimal"
                text[column] = values
            else:
                kept[str(column)] = problem
    else:  # the two reads disagree on the shape: nothing is typed rather than something guessed
        kept = {"*": "GDAL's type detection read the CSV with other columns or rows than without it"}
    ctx.notes.append(
        "table_path is CSV: GDAL's type detection (AUTODETECT_TYPE, whole file) read "
        + (", ".join(f"{c} ({k})" for c, k in numbers.items()) or "no column")
        + " as numbers, checked cell by cell against the text; every other column is text"
        + (
            "; kept as text although detected as numbers: " + "; ".join(f"{c}: {why}" for c, why in kept.items())
            if kept
            else ""
        )
    )
    return text, {"read_as_numbers": numbers, "kept_as_text": kept}


def _key_type(values: pd.Series) -> str:
    from pandas.api import types

    if types.is_bool_dtype(values):
        return "other"
    if types.is_integer_dtype(values):
        return "integer"
    if types.is_float_dtype(values):
        return "decimal"
    present = values.dropna()
    if types.is_string_dtype(values) and all(isinstance(v, str) for v in present):
        return "text"
    return "other"


def _not_whole(values: pd.Series) -> list[Any]:
    """Values of a decimal key that are not whole numbers written exactly (empty: all are)."""
    import numpy as np

    present = values.dropna().to_numpy(dtype=float)
    bad = ~np.isfinite(present) | (present != np.floor(present)) | (np.abs(present) > MAX_EXACT_INTEGER)
    return [float(v) for v in present[bad]]


def _not_canonical(values: pd.Series) -> list[str]:
    """Text codes that are not a whole number's canonical digits ("0123", " 12", "12a")."""
    import re

    canonical = re.compile(r"0|-?[1-9][0-9]*")
    return [v for v in values.dropna() if not canonical.fullmatch(v)]


def _normalise_keys(ctx: RunContext, left: pd.Series, right: pd.Series) -> tuple[pd.Series, pd.Series, dict[str, Any]]:
    """The keys as compared, and the record of what was done to them: numbers against text are
    turned into text only when no two keys could become one and no digit is lost."""
    left_type, right_type = _key_type(left), _key_type(right)
    record: dict[str, Any] = {"applied": False, "input_key_type": left_type, "table_key_type": right_type}
    numeric = {"integer", "decimal"}
    if {left_type, right_type} & numeric and "text" in (left_type, right_type):
        number_side = "input_path" if left_type in numeric else "table_path"
        numbers, texts = (left, right) if number_side == "input_path" else (right, left)
        number_type = left_type if number_side == "input_path" else right_type
        fractional = _not_whole(numbers) if number_type == "decimal" else []
        odd_texts = _not_canonical(texts)
        if fractional or odd_texts:
            record["reason"] = (
                "numbers against text were not normalised, because it would not be lossless: "
                + "; ".join(
                    part
                    for part in (
                        f"{len(fractional)} numbers are not whole or not exact" if fractional else "",
                        f"{len(odd_texts)} text codes are not plain digits (leading zeros, spaces, letters), so "
                        "a number could not give them back"
                        if odd_texts
                        else "",
                    )
                    if part
                )
            )
            record["blocking_values"] = [_plain(v) for v in (fractional + odd_texts)[:5]]
            ctx.warn(
                "KEY_TYPES_DIFFER",
                f"input_key is {left_type} and table_key is {right_type}, and converting one to the other would "
                f"lose information ({record['blocking_values']}), so no key of one type matches the other",
                "store both keys as text with the same formatting (e.g. keep leading zeros in both), then join again",
            )
            return left, right, record
        as_text = numbers.map(lambda v: str(int(v)), na_action="ignore")
        record.update(
            {
                "applied": True,
                "converted": number_side,
                "rule": f"{number_type} keys of {number_side} were compared as the text of their whole number "
                "(310101.0 as '310101'): every one is whole and exact, and every text code is plain digits "
                "without a leading zero, so the conversion loses nothing and merges no two keys",
            }
        )
        ctx.notes.append(
            f"key normalisation: {record['rule']}; the output keeps input_key's own values and type unchanged"
        )
        return (as_text, right, record) if number_side == "input_path" else (left, as_text, record)
    record["reason"] = (
        f"keys compared as read ({left_type} against {right_type})"
        if left_type == right_type or {left_type, right_type} <= numeric
        else f"keys compared as read ({left_type} against {right_type}); no conversion between these types is attempted"
    )
    return left, right, record


def join_attributes(ctx: RunContext) -> None:
    import numpy as np
    import pandas as pd

    set_engine(ctx)
    left = read_input(ctx)
    table, csv_types = _read_table(ctx)
    input_key, table_key = ctx.arguments["input_key"], ctx.arguments["table_key"]
    if input_key not in left.columns or input_key == left.geometry.name:
        raise _field_not_found(
            ctx, "input_key", "input_path", input_key, [str(c) for c in left.columns if c != left.geometry.name]
        )
    if table_key not in table.columns:
        raise _field_not_found(ctx, "table_key", "table_path", table_key, [str(c) for c in table.columns])
    left_keys, table_keys, normalisation = _normalise_keys(ctx, left[input_key], table[table_key])
    if csv_types is not None:  # the types the keys were compared as come from the CSV's detection
        normalisation["csv_column_types"] = csv_types
    ctx.parameters["x-mapsmith:key_normalisation"] = normalisation
    present = table_keys.notna()
    repeated = table_keys[present].value_counts()
    repeated = repeated[repeated > 1]
    if len(repeated):
        raise InputError(
            f"table_key {table_key!r} is not unique in {_given(ctx, 'table_path')}: {len(repeated)} keys occur on "
            "several rows, so a feature would match several rows",
            code="TABLE_KEY_NOT_UNIQUE",
            evidence={
                "argument": "table_key",
                "field": table_key,
                "path": _given(ctx, "table_path"),
                "duplicate_keys": {str(k): int(v) for k, v in repeated.head(UNMATCHED_KEYS_SHOWN).items()},
            },
            hint="aggregate the table to one row per key (or remove the duplicate rows) first; join_attributes "
            "writes one row per input feature and will not pick one of several rows",
        )
    index = pd.Index(table_keys[present].to_numpy(dtype=object))
    positions = np.flatnonzero(present.to_numpy())
    found = index.get_indexer(left_keys.to_numpy(dtype=object))
    left_null = left_keys.isna().to_numpy()  # missing keys: the index holds none, so they match nothing
    right = np.where(found >= 0, positions[np.maximum(found, 0)], -1)
    attrs = table.drop(columns=[table_key])
    out, renamed = _attach(left, attrs, np.arange(len(left)), right, TABLE_SUFFIX)
    unmatched_left = (~left_null) & (right < 0)
    used = np.zeros(len(table), dtype=bool)
    used[right[right >= 0]] = True
    unmatched_table = present.to_numpy() & ~used
    counts: dict[str, Any] = {
        "input_features": len(left),
        "table_rows": len(table),
        "input_features_matched": int((right >= 0).sum()),
        "input_features_unmatched": int(unmatched_left.sum()),
        "input_features_without_key": int(left_null.sum()),
        "table_rows_matched": int(used.sum()),
        "table_rows_unmatched": int(unmatched_table.sum()),
        "table_rows_without_key": int((~present).sum()),
        "input_unmatched_keys": [
            _plain(v) for v in pd.unique(left[input_key][unmatched_left].to_numpy())[:UNMATCHED_KEYS_SHOWN]
        ],
        "table_unmatched_keys": [
            _plain(v) for v in pd.unique(table[table_key][unmatched_table].to_numpy())[:UNMATCHED_KEYS_SHOWN]
        ],
    }
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    summary = (
        f"{counts['input_features_matched']} of {len(left)} input features matched a table row; "
        f"{counts['input_features_unmatched']} have a key the table lacks (first: {counts['input_unmatched_keys']}) "
        f"and {counts['input_features_without_key']} have no key, all kept with empty table fields; "
        f"{counts['table_rows_unmatched']} of {len(table)} table rows matched no feature (first: "
        f"{counts['table_unmatched_keys']}) and {counts['table_rows_without_key']} have no key"
    )
    ctx.notes.append(summary + (f"; table fields renamed: {renamed}" if renamed else ""))
    ctx.check(
        "x-mapsmith:keys_matched",
        counts["input_features_unmatched"] + counts["input_features_without_key"] == 0,
        summary,
        critical=False,
    )
    if counts["input_features_unmatched"] or counts["input_features_without_key"]:
        ctx.warn(
            "UNMATCHED_KEYS",
            f"{counts['input_features_unmatched'] + counts['input_features_without_key']} of {len(left)} input "
            f"features found no table row (first keys: {counts['input_unmatched_keys']}); table keys that matched "
            f"nothing: {counts['table_unmatched_keys']}",
            "compare the unmatched keys of both sides: leading zeros, spaces, or numbers stored as text are the "
            "usual causes",
        )
    ctx.answer = {**counts, "key_normalisation": normalisation, "renamed_fields": renamed}
    write_output(ctx, out)
