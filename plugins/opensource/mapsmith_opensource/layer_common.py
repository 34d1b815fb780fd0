"""What the whole-layer operations share: counting what was written, field types and names, answer rows.

overlay_ops, dissolve_ops and merge_explode_ops each change the number of features and prove the count
by reading the written file back (``check_count``); they read each field's declared type from the file's
header, not the loaded frame, and give it back to fields pandas widened (``field_families``,
``restore_types``); and they refuse two output fields GeoPackage would take for one. Every layer
operation writes GeoParquet through ``write_geoparquet`` and drops lower-dimension fragments through
``keep_own_dimension``. What this module must never do: hold an operation's own logic, or load an
engine at import time.
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
        schema = io.parquet_schema(path)
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


def clip_to_region(geometries: Any, region: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """clip_layer's cut: which features meet ``region``, what is left of each (keep_own_dimension), and
    how many lower-dimension parts were dropped.

    A flat single point that meets the region is left as it is: GEOS's intersection of a point with a
    region it meets is that point, and the union of one point is the point, byte for byte (held to that
    in tests/vector/test_layer_write_speed.py); the two calls cost 1 s on the benchmark's 280,000 points
    inside the mask. Every other feature is intersected and reduced as before.
    """
    import numpy as np
    import shapely

    geoms = np.asarray(geometries, dtype=object)
    hits = shapely.intersects(geoms, region)
    met = geoms[hits]
    out = np.full(len(met), None, dtype=object)
    point = (shapely.get_type_id(met) == 0) & ~shapely.has_z(met)
    out[point] = met[point]
    cut = ~point
    kept, dropped = keep_own_dimension(shapely.intersection(met[cut], region), shapely.get_dimensions(met[cut]))
    out[cut] = kept
    return hits, out, dropped


def keep_own_dimension(results: np.ndarray, dimensions: np.ndarray) -> tuple[np.ndarray, int]:
    """Each result reduced to its non-empty parts of the given dimension, unioned; None where none is left.

    clip_layer's rule for what an intersection leaves of a feature (a polygon's clip keeps polygons; the
    points and lines where it only touches the mask are counted and dropped). A result whose parts are
    all kept and number one - nearly every feature - is unioned in one GEOS call per batch of
    DIMENSION_BATCH features (``union_all`` along an axis is the same per-row union); only results with
    several kept parts are unioned one by one. Batches keep the parts GEOS copies out to one batch's worth.
    On a million clipped points the per-feature loop took 5 s, this 0.2 s.
    Returns the geometries (an object array, None for nothing left) and the number of parts dropped.
    """
    import numpy as np

    results = np.asarray(results, dtype=object)
    dimensions = np.asarray(dimensions)
    out = np.full(len(results), None, dtype=object)
    dropped = 0
    for start in range(0, len(results), DIMENSION_BATCH):
        stop = min(start + DIMENSION_BATCH, len(results))
        dropped += _keep_batch(results[start:stop], dimensions[start:stop], out[start:stop])
    return out, dropped


DIMENSION_BATCH = 65_536  # features whose parts are taken apart at a time


def _keep_batch(results: np.ndarray, dimensions: np.ndarray, out: np.ndarray) -> int:
    """keep_own_dimension on one batch, written into ``out`` (a view); the number of parts dropped."""
    import numpy as np
    import shapely

    parts, owner = shapely.get_parts(results, return_index=True)
    keep = (shapely.get_dimensions(parts) == dimensions[owner]) & ~shapely.is_empty(parts)
    kept, kept_owner = parts[keep], owner[keep]  # get_parts lists parts feature by feature: owners ascend
    starts = np.searchsorted(kept_owner, np.arange(len(results) + 1))
    count = np.diff(starts)
    single = np.flatnonzero(count == 1)
    if len(single):
        out[single] = shapely.union_all(kept[starts[single]].reshape(-1, 1), axis=1)
    for i in np.flatnonzero(count > 1):
        out[i] = shapely.union_all(kept[starts[i] : starts[i + 1]])
    return int(len(parts) - keep.sum())


# -- GeoParquet written the way GeoPandas writes it, without its slow WKB column --------------------

# Arrow's binary type addresses its bytes with 32-bit offsets: a geometry column larger than this is
# left to GeoPandas, which splits it into chunks itself.
BINARY_ARRAY_LIMIT_BYTES = 2**31 - 1
# Below this many bytes of WKB, GeoPandas' own column is as fast: a million points (21 MiB) took 0.67 s of CPU
# to write through it and 0.9 s through the buffer built here, a million 50 m buffers (1 GiB) 11.1 s and 6.8 s.
FAST_MIN_BYTES = 64 * 2**20
# ... and below this many bytes a value on average (16 vertices): the join below would hold a view of 80 bytes
# per value, more than the values themselves for points.
FAST_MIN_MEAN_BYTES = 256


def write_geoparquet(gdf: gpd.GeoDataFrame, path: Any) -> None:
    """``gdf.to_parquet(path, index=False)``, the same bytes, with the WKB column built from one buffer.

    Hand-written for one reason: GeoPandas hands pyarrow a numpy array of a million WKB ``bytes`` and
    pyarrow appends them one by one, growing its buffer as it goes; on a million 65-vertex buffers
    that took 10.9 s of the 15 s the write cost, against 0.7 s for joining the bytes once and handing
    Arrow the offsets (benchmarks/goal_ops.py's buffer_layer). Everything else is GeoPandas' and
    pyarrow's own: the attribute columns are converted as GeoPandas converts them, the column and
    file metadata are the ones GeoPandas writes for the same frame with no rows, completed with the
    two facts that depend on the rows (geometry types and bbox) as GeoParquet defines them.
    tests/vector/test_layer_write_speed.py holds it to byte-identical files. It must never write what
    GeoPandas would not: a frame it does not cover (several geometry columns, a column over
    BINARY_ARRAY_LIMIT_BYTES, a process where geoarrow's extension types are registered) goes through
    GeoPandas, and so does one whose column is small or made of small values (FAST_MIN_BYTES,
    FAST_MIN_MEAN_BYTES), where GeoPandas' path costs no more.
    """
    import io as _bytes_io
    import json

    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    import shapely

    name = gdf.geometry.name
    geoms = np.asarray(gdf.geometry.values, dtype=object)
    # 16 bytes a 2-D vertex: a lower bound of the column's WKB size, known without writing it
    estimate = 16 * int(shapely.get_num_coordinates(geoms).sum())
    small = estimate < FAST_MIN_BYTES or estimate < FAST_MIN_MEAN_BYTES * len(geoms)
    if small or list(gdf.columns[gdf.dtypes == "geometry"]) != [name]:
        gdf.to_parquet(path, index=False)
        return
    # The metadata GeoPandas writes for this frame without rows: CRS as PROJJSON, encoding, version.
    empty = _bytes_io.BytesIO()
    gdf.iloc[:0].to_parquet(empty, index=False)
    template = pq.read_schema(pa.BufferReader(empty.getvalue()))
    if isinstance(template.field(name).type, pa.ExtensionType):
        # geoarrow.wkb is registered with pyarrow in this process (sedonadb and geoarrow-pyarrow register it when
        # imported, as after a SedonaDB run): GeoPandas then writes the column's extension metadata its own way,
        # which this writer does not reproduce byte for byte, so GeoPandas writes it.
        gdf.to_parquet(path, index=False)
        return
    from mapsmith_opensource import chunked

    # GeoPandas writes ISO WKB (GEOS >= 3.10, which shapely 2 wheels carry); chunked: on every core.
    wkb = chunked.apply(shapely.to_wkb, geoms, flavor="iso")
    present = ~shapely.is_missing(geoms)
    everywhere = bool(present.all())
    lengths = np.zeros(len(wkb), dtype=np.int64)
    lengths[present] = np.fromiter(
        map(len, wkb if everywhere else wkb[present]), dtype=np.int64, count=int(present.sum())
    )
    if int(lengths.sum()) > BINARY_ARRAY_LIMIT_BYTES:
        gdf.to_parquet(path, index=False)
        return
    offsets = np.zeros(len(wkb) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    # One join: copying in batches instead faulted in every batch's fresh buffer again (4.6 s against 0.5 s
    # for a million buffers). The join holds an 80-byte view per value while it copies, at most a third of
    # the bytes joined because FAST_MIN_MEAN_BYTES keeps small values on GeoPandas' path.
    data = b"".join(wkb if everywhere else wkb[present])
    del wkb
    validity = None if everywhere else pa.array(present).buffers()[1]
    column = pa.Array.from_buffers(
        pa.binary(),
        len(offsets) - 1,
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=int((~present).sum()),
    )
    geo = json.loads(template.metadata[b"geo"])
    geo["columns"][name]["geometry_types"] = _geometry_type_names(geoms, present)
    bbox = gdf.geometry.total_bounds.tolist()
    if np.isfinite(bbox).all():  # an empty or all-null column has no bbox, as GeoPandas leaves it out
        geo["columns"][name]["bbox"] = bbox
    attributes = pd.DataFrame(gdf.copy(deep=False))
    attributes[name] = None  # a null column holding no memory, replaced below
    table = pa.Table.from_pandas(attributes, preserve_index=False)
    at = table.schema.get_field_index(name)
    field = template.field(name)
    table = table.set_column(at, field, column)
    metadata = dict(template.metadata)
    metadata[b"pandas"] = table.schema.metadata[b"pandas"]  # the full frame's, not the empty one's
    metadata[b"geo"] = json.dumps(geo).encode("utf-8")
    pq.write_table(table.replace_schema_metadata(metadata), path, compression="snappy")


# GeoParquet's names for GEOS type ids 0-7 (a LinearRing is written as a LineString), " Z" with a Z.
_GEOPARQUET_TYPES = (
    "Point",
    "LineString",
    "LineString",
    "Polygon",
    "MultiPoint",
    "MultiLineString",
    "MultiPolygon",
    "GeometryCollection",
)


def _geometry_type_names(geoms: np.ndarray, present: np.ndarray) -> list[str]:
    import numpy as np
    import shapely

    ids = shapely.get_type_id(geoms[present]) + 8 * shapely.has_z(geoms[present])
    names = [_GEOPARQUET_TYPES[i % 8] + (" Z" if i >= 8 else "") for i in np.unique(ids).tolist()]
    return sorted(names)
