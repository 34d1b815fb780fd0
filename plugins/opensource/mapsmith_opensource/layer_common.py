"""What the whole-layer operations share: counting what was written, field types and names, answer rows.

overlay_ops, dissolve_ops and merge_explode_ops each change the number of features and prove the count
by reading the written file back (``check_count``); they read each field's declared type from the file's
header, not the loaded frame, and give it back to fields pandas widened (``field_families``,
``restore_types``); and they refuse two output fields GeoPackage would take for one. What this module
must never do: hold an operation's own logic, or load an engine at import time.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError
from mapsmith_opensource import io

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext


def written_count(ctx: RunContext) -> int:
    """The feature count of the written temporary output, read back from the file itself."""
    assert ctx.temp_output is not None
    return int(ctx.io.inspect(ctx.temp_output, None).feature_count or 0)


def check_count(ctx: RunContext, expected: int, derivation: str) -> int:
    written = written_count(ctx)
    ctx.check(
        "feature_count_exact",
        written == expected,
        f"expected {expected} features ({derivation}), the output holds {written}",
    )
    return written


def no_geometry(gdf: gpd.GeoDataFrame) -> np.ndarray:
    """True where a feature has no geometry to compute with (null or empty)."""
    import shapely

    geoms = gdf.geometry.values
    return shapely.is_missing(geoms) | shapely.is_empty(geoms)


def type_family(dtype: str) -> str:
    """A field's type family from a header's type name (numpy, pandas or Arrow spelling)."""
    name = dtype.lower()
    if name.startswith(("int", "uint")):
        return "integer"
    if name.startswith(("float", "double", "halffloat")):
        return "real"
    if name.startswith("bool"):
        return "boolean"
    if name in ("object", "str", "string", "large_string", "utf8", "large_utf8"):
        return "string"
    if name.startswith(("datetime", "timestamp")):
        return "datetime"
    if name.startswith("date"):
        return "date"
    return name


def field_families(ctx: RunContext, key: str) -> dict[str, str]:
    """Each field's declared type family, from the file's header rather than the loaded frame.

    The header is the truth: pyogrio loads an integer field that holds a null as float64, so the
    frame alone would report 'real' for a field the file declares as integer.
    """
    path = ctx.paths[key]
    fields = ctx.inputs[key].fields
    if io.is_parquet(path):
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        return {n: type_family(str(schema.field(n).type)) for n in fields if n in schema.names}
    import pyogrio

    info = pyogrio.read_info(io.vector_source(path)[0], layer=ctx.layers.get(key))
    return {str(n): type_family(str(t)) for n, t in zip(info["fields"], info["dtypes"], strict=True)}


def restore_types(gdf: gpd.GeoDataFrame, families: dict[str, str]) -> gpd.GeoDataFrame:
    """Give integer and boolean fields that picked up nulls their declared type back.

    pandas holds such a column as float64 (NaN for null); written as it is, an integer field of
    the input would become a real field of the output. Nullable dtypes keep the declared type.
    """
    import pandas as pd

    out = gdf.copy()
    for name, family in families.items():
        if name not in out.columns or name == out.geometry.name:
            continue
        column = out[name]
        if family == "integer" and not pd.api.types.is_integer_dtype(column.dtype):
            values = column.dropna()
            if len(values) == 0 or (pd.api.types.is_numeric_dtype(values) and (values % 1 == 0).all()):
                out[name] = column.astype("Int64")
        elif family == "boolean" and not pd.api.types.is_bool_dtype(column.dtype):
            out[name] = column.astype("boolean")
    return out


def require_one_family(ctx: RunContext, keys: list[str], operation: str) -> str | None:
    """The one geometry family (point, line or polygon) the inputs share, or a refusal."""
    by_input = {k: sorted(ctx.inputs[k].geometry_families - {"unknown"}) for k in keys}
    families = sorted({f for fams in by_input.values() for f in fams})
    if len(families) > 1:
        raise InputError(
            f"{operation} needs one geometry family; the input holds {', '.join(families)}",
            code="MIXED_GEOMETRY_TYPES",
            evidence={"geometry_families": by_input},
            hint="split the layer by geometry type first (select the points, lines and polygons separately) "
            "and run the operation on each",
        )
    return families[0] if families else None


def taken_name(name: str, fields: Any) -> str | None:
    """The existing field ``name`` would collide with: GeoPackage field names ignore case."""
    return next((f for f in fields if f.casefold() == name.casefold()), None)


def refuse_name_clashes(names: list[str], where: str, evidence: dict[str, Any]) -> None:
    """Two output fields whose names differ only in case are one field to GeoPackage: refuse."""
    seen: dict[str, str] = {}
    for name in names:
        first = seen.setdefault(name.casefold(), name)
        if first != name:
            raise InputError(
                f"{where} would hold the fields {first!r} and {name!r}, which differ only in case; GeoPackage "
                "field names ignore case, so they would be one field",
                code="FIELD_NAME_CLASH",
                evidence={"fields": [first, name], **evidence},
                hint=f"rename {name!r} (or {first!r}) in its input first",
            )


def field_not_found(argument: str, field: str, available: list[str], path: str) -> InputError:
    close = difflib.get_close_matches(field, available, n=1)
    return InputError(
        f"{argument} names the field {field!r}, which {path} does not have"
        + (f"; did you mean {close[0]!r}?" if close else ""),
        code="FIELD_NOT_FOUND",
        evidence={"argument": argument, "field": field, "fields": available, "path": path},
        hint=f"name one of the fields {available} (describe_dataset lists them)",
    )


def attribute_rows(gdf: gpd.GeoDataFrame) -> list[dict[str, Any]]:
    import json

    attrs = [c for c in gdf.columns if c != gdf.geometry.name]
    if not attrs:
        return [{} for _ in range(len(gdf))]  # pandas writes a frame without columns as [], whatever its rows
    # Through JSON so numpy and pandas scalars (and NA) become plain values.
    return json.loads(gdf[attrs].to_json(orient="records"))  # callers hand in one page (mapsmith.paging)


def crs_equal(a: Any, b: Any) -> bool:
    from pyproj import CRS

    return CRS.from_user_input(a).equals(CRS.from_user_input(b), ignore_axis_order=True)
