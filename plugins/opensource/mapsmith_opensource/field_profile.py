"""What each field of a layer holds, as the engine reads it: type, null count, a few sample values.

For describe_dataset. The type is the reading engine's own: Arrow's for a CSV or a JSON array of
records (read as the operations that take tables read them), GDAL's field type and subtype for what
pyogrio opens (``Integer64``, ``String(JSON)``, ``Integer(Boolean)``), the Arrow type for GeoParquet
(nested types spelled out whole, ``struct<city: string, zip: int32>``), with every nested leaf listed
once by its full path (``address.city``, ``tags[]``) so two leaves called ``id`` stay two names. The
values are read in Arrow batches (pyogrio ``open_arrow``, pyarrow ``iter_batches``) and never held
whole: null counts cover every feature; samples are the first distinct non-null values in file order.

What this module must never do: read geometries (they are described by ``io.inspect``), keep a whole
layer in memory, or return a value an agent cannot read as JSON (dates become ISO text, bytes hex).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from mapsmith import parts
from mapsmith.errors import InputError
from mapsmith_opensource import io

__all__ = ["SAMPLE_CHARS", "SAMPLE_VALUES", "field_profiles"]

SAMPLE_VALUES = 5  # distinct non-null values shown per field
SAMPLE_CHARS = 80  # text longer than this is shortened (marked with "…")
_BATCH_ROWS = 65_536


def field_profiles(path: Path, layer: str | None) -> list[dict[str, Any]]:
    """One record per attribute field of ``path``/``layer``, in the layer's order."""
    if parts.is_parts_folder(path):
        types, nested, batches = _parquet_parts(path)
    elif io.is_parquet(path):
        types, nested, batches = _parquet(path)
    elif io._is_json_array(path):
        types, nested, batches = _table(path)
    elif path.suffix.lower() in (".csv", ".tsv"):
        try:
            types, nested, batches = _table(path)
        except InputError:
            # Not a table the table operations can read (rows of unequal width, bytes that do not decode):
            # described as GDAL's CSV driver reads it, which is what the layer operations would see.
            types, nested, batches = _ogr(path, layer)
    else:
        types, nested, batches = _ogr(path, layer)
    nulls = dict.fromkeys(types, 0)
    samples: dict[str, dict[str, Any]] = {name: {} for name in types}
    shortened = dict.fromkeys(types, False)
    for batch in batches:
        for name in types:
            column = batch.column(name)
            nulls[name] += column.null_count
            if len(samples[name]) >= SAMPLE_VALUES:
                continue
            for value in column.drop_null().to_pylist():
                shown, cut = _readable(value)
                shortened[name] = shortened[name] or cut
                key = json.dumps(shown, sort_keys=True, default=str)
                samples[name].setdefault(key, shown)
                if len(samples[name]) >= SAMPLE_VALUES:
                    break
    return [
        {
            "name": name,
            "type": types[name],
            **({"nested_fields": nested[name]} if nested.get(name) else {}),
            "null_count": nulls[name],
            "samples": list(samples[name].values()),
            "samples_shortened": shortened[name],
        }
        for name in types
    ]


def _ogr(path: Path, layer: str | None) -> tuple[dict[str, str], dict[str, list[dict[str, str]]], Iterator[Any]]:
    import pyogrio

    source, _ = io.vector_source(path)
    try:
        info = pyogrio.read_info(source, layer=layer)
    except Exception as exc:
        raise io._unreadable(path, exc) from exc
    types: dict[str, str] = {}
    for name, ogr_type, subtype in zip(info["fields"], info["ogr_types"], info["ogr_subtypes"], strict=True):
        text = str(ogr_type).removeprefix("OFT")
        sub = str(subtype).removeprefix("OFST")
        types[str(name)] = text if sub in ("None", "") else f"{text}({sub})"

    def batches() -> Iterator[Any]:
        if not types:
            return
        with pyogrio.open_arrow(source, layer=layer, read_geometry=False, batch_size=_BATCH_ROWS, use_pyarrow=True) as (
            _meta,
            reader,
        ):
            yield from reader

    return types, {}, batches()


def _table(path: Path) -> tuple[dict[str, str], dict[str, list[dict[str, str]]], Iterable[Any]]:
    """A CSV or a JSON array of records, typed as the operations that take tables read it
    (``tables.read_table``: pyarrow's type inference, so a column of 1, 2, 3 is int64, not GDAL's String)."""
    from mapsmith_opensource.tables import read_table

    table = read_table(path)
    types = {f.name: str(f.type) for f in table.schema}
    nested = {f.name: _leaves(f.name, f.type) for f in table.schema}
    return types, nested, table.to_batches(max_chunksize=_BATCH_ROWS)


def _parquet(path: Path) -> tuple[dict[str, str], dict[str, list[dict[str, str]]], Iterable[Any]]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    geo = json.loads((parquet.schema_arrow.metadata or {}).get(b"geo", b"{}") or b"{}")
    geometry_columns = set((geo.get("columns") or {}).keys())
    fields = [f for f in parquet.schema_arrow if f.name not in geometry_columns]
    types = {f.name: str(f.type) for f in fields}
    nested = {f.name: _leaves(f.name, f.type) for f in fields}
    names = list(types)
    return types, nested, (parquet.iter_batches(columns=names, batch_size=_BATCH_ROWS) if names else ())


def _parquet_parts(folder: Path) -> tuple[dict[str, str], dict[str, list[dict[str, str]]], Iterable[Any]]:
    """A folder of GeoParquet parts as one dataset, read in the listing order (parts.part_files). Hive keys are
    fields, typed as every engine reads the folder (``parts.hive_key_types``: ``year=2024`` is ``int32``)."""
    import pyarrow.parquet as pq

    dataset = parts.arrow_dataset(folder)
    geo = json.loads((pq.read_schema(parts.part_files(folder)[0]).metadata or {}).get(b"geo", b"{}") or b"{}")
    geometry_columns = set((geo.get("columns") or {}).keys())
    fields = [f for f in dataset.schema if f.name not in geometry_columns]
    types = {f.name: str(f.type) for f in fields}
    nested = {f.name: _leaves(f.name, f.type) for f in fields}
    names = list(types)
    if not names:
        return types, nested, ()
    return types, nested, dataset.to_batches(columns=names, batch_size=_BATCH_ROWS, use_threads=False)


def _leaves(prefix: str, arrow_type: Any) -> list[dict[str, str]]:
    """Every leaf under a nested type, named by its full path (empty for a plain type)."""
    import pyarrow.types as pt

    out: list[dict[str, str]] = []
    if pt.is_struct(arrow_type):
        for i in range(arrow_type.num_fields):
            child = arrow_type.field(i)
            path = f"{prefix}.{child.name}"
            out.extend(_leaves(path, child.type) or [{"path": path, "type": str(child.type)}])
    elif pt.is_list(arrow_type) or pt.is_large_list(arrow_type) or pt.is_fixed_size_list(arrow_type):
        path = f"{prefix}[]"
        out.extend(_leaves(path, arrow_type.value_type) or [{"path": path, "type": str(arrow_type.value_type)}])
    elif pt.is_map(arrow_type):
        out.append({"path": f"{prefix}{{key}}", "type": str(arrow_type.key_type)})
        out.extend(
            _leaves(f"{prefix}{{value}}", arrow_type.item_type)
            or [{"path": f"{prefix}{{value}}", "type": str(arrow_type.item_type)}]
        )
    return out


def _readable(value: Any) -> tuple[Any, bool]:
    """A JSON-safe rendering of one value and whether it was shortened."""
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value, False
    if isinstance(value, float):
        return (value if math.isfinite(value) else str(value)), False
    if isinstance(value, Decimal):
        return _short(str(value))
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat(), False
    if isinstance(value, bytes):
        return _short(value.hex())
    if isinstance(value, str):
        return _short(value)
    return _short(json.dumps(value, default=str, ensure_ascii=False))


def _short(text: str) -> tuple[str, bool]:
    return (text, False) if len(text) <= SAMPLE_CHARS else (text[: SAMPLE_CHARS - 1] + "…", True)
