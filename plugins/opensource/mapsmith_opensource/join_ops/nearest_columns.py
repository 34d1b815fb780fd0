"""nearest_join on GeoParquet without a DataFrame: the GeoPandas engine's search and tie rule, every field carried
as an Arrow column.

The GeoPandas engine (``join_ops.nearest``) reads both layers into GeoDataFrames, attaches the join fields with
pandas and writes the frame back, re-encoding every geometry. Measured for issue 22 on benchmarks/goal_ops'
1,000,000 points and 2,000 sites (one profile, 2 cores): reading took 1.2 s, writing 1.0 s, the search 0.9-1.7 s.
Here the layers are read with pyarrow, only the geometry columns are decoded (shapely, for the search), the join
fields are taken by row (``pyarrow.Table.take``) and the input's geometry column is written as its bytes were read.
The search, the ties and the record are ``join_ops.nearest``'s own (``nearest_in_threads``, ``choose``,
``record_nearest``), so the rows, values, counts, notes and checks are the GeoPandas engine's
(tests/vector/test_nearest_columns.py runs both on the same layers).

Taken when both inputs and the output are single GeoParquet files the file-to-file engines can carry
(``spatial_join_duckdb._geoparquet``'s conditions: one WKB geometry column, a PROJJSON CRS, no pandas index,
fields of types carried exactly), in one CRS, projected and true to scale at the data (planar distances), with
no derived field to measure again and, once read, no invalid input geometry (the GeoPandas engine repairs those
before measuring: ``derived.measurable``). Otherwise the GeoPandas engine runs, and a note says why when both
inputs were GeoParquet. Types are the file's own: the GeoPandas engine widens an integer field with nulls to a
double and writes a NaN as a null, as pandas reads them; a join integer becomes int64 in both, as pandas' Int64.

Written by hand because the work is MapSmith's own: no library attaches one layer's fields to another's by nearest
row under this tie rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith_opensource.join_ops import nearest as nearest_ops
from mapsmith_opensource.join_ops import spatial_join_duckdb as files
from mapsmith_opensource.join_ops.shared import JOIN_SUFFIX, _rename_clashes, refuse_existing_fields

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from mapsmith.runner import RunContext

KEYS = ("input_path", "join_path")
COLUMNS_ENGINE = "GeoPandas (columns)"  # how spatial_join_duckdb._geoparquet's reasons name this path
PURPOSE = "measured for nearest neighbours"
PATH_NOTE = (
    "engine path: columns -- the GeoPandas engine's search and tie rule without a DataFrame: pyarrow read both "
    "GeoParquet files, shapely decoded the geometries and searched, the join fields were taken by row as Arrow "
    "columns and input_path's geometries written as their bytes were read"
)


def columns_problem(ctx: RunContext) -> str | None:
    """Why this run cannot take the columns path before anything is read, or None."""
    from pyproj import CRS

    from mapsmith import parts
    from mapsmith.derived_fields import DerivedPlan
    from mapsmith_opensource import io
    from mapsmith_opensource.common import MAX_SCALE_DISTORTION, scale_distortion

    for key in KEYS:
        path = ctx.paths[key]
        if not io.is_parquet(path) or not path.is_file():
            return f"{key} is not one GeoParquet file"
    given = str(ctx.arguments.get("output_path") or "")
    if ctx.output_path is None or not io.is_parquet(ctx.output_path) or parts.is_folder_output(given):
        return "output_path is not one GeoParquet file"
    first, second = (ctx.inputs[k] for k in KEYS)
    if not first.feature_count or not second.feature_count:
        return "a layer has no features"
    if first.crs_wkt is None or second.crs_wkt is None:
        return "a CRS is unknown"
    crs = CRS.from_wkt(first.crs_wkt)
    if not crs.equals(CRS.from_wkt(second.crs_wkt), ignore_axis_order=True):
        return f"input_path is in {first.crs_label} and join_path in {second.crs_label} (join_path is aligned first)"
    if crs.is_geographic:
        return f"{first.crs_label} is geographic: distances are measured geodesically"
    distortion = scale_distortion(crs, first.bounds_lonlat)
    if distortion is not None and distortion > MAX_SCALE_DISTORTION:
        return f"{first.crs_label} distorts distances by {distortion:.1%} at the data: they are measured geodesically"
    plan: DerivedPlan | None = getattr(ctx, "derived", None)
    if plan is not None and plan.stale:
        return "a derived field is stale, which the GeoPandas engine measures again on the geometries written"
    layers, problem = files.layers_problem(ctx, COLUMNS_ENGINE)
    if problem:
        return problem
    if layers["input_path"].geometry in _fields(layers["join_path"]):
        return "join_path has a field named as input_path's geometry column"
    return None


def _fields(layer: files._GeoParquet) -> list[str]:
    return [c for c in layer.columns if c != layer.geometry]


def _decoded(table: pa.Table, column: str) -> np.ndarray:
    """The column's WKB as shapely geometries (None for a null). A decoder reading 2-D points' coordinates straight
    from Arrow's buffers was measured and left out: creating the GEOS points is most of the cost (0.42 s against
    shapely.from_wkb's 0.55 s on 1,000,000 points)."""
    import shapely

    from mapsmith_opensource.layer_facts import _objects

    return shapely.from_wkb(_objects(table.column(column).combine_chunks()))


def nearest_join_columns(ctx: RunContext) -> bool:
    """Run the nearest join on the columns path and write the output: True; False when the path cannot take it
    (nothing recorded but a note naming the reason, when both inputs are GeoParquet)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import shapely
    from pyproj import CRS

    from mapsmith.runner import OutputStats
    from mapsmith.verify.facts import OutputFacts
    from mapsmith_opensource import io
    from mapsmith_opensource.common import TYPE_NAMES, record_input_validity, report_geometry_validity, to_metric
    from mapsmith_opensource.join_ops.ground import _CrsOnly, _record_planar
    from mapsmith_opensource.join_ops.spatial_join_sedonadb import _geo_metadata
    from mapsmith_opensource.measure_lengths import warn_2d_geometries

    problem = columns_problem(ctx)
    if problem is not None:
        if all(io.is_parquet(ctx.paths[k]) for k in KEYS):
            ctx.notes.append(f"engine path: GeoDataFrame -- the columns path was not taken: {problem}")
        return False
    layers, _ = files.layers_problem(ctx, COLUMNS_ENGINE)
    left_layer, join_layer = layers["input_path"], layers["join_path"]
    # ParquetFile, not read_table: read_table imports pyarrow.dataset, which imports pandas (0.25 s of a fresh process)
    left = pq.ParquetFile(left_layer.path).read(columns=list(left_layer.columns))
    left_geoms = _decoded(left, left_layer.geometry)
    missing = shapely.is_missing(left_geoms) | shapely.is_empty(left_geoms)
    if not bool(np.all(shapely.is_valid(left_geoms) | missing)):
        ctx.notes.append(
            "engine path: GeoDataFrame -- the columns path was not taken: input_path has invalid geometries, which "
            "the GeoPandas engine makes valid before measuring"
        )
        return False
    join = pq.ParquetFile(join_layer.path).read(columns=list(join_layer.columns))
    join_geoms = _decoded(join, join_layer.geometry)
    _set_engine(ctx)
    ctx.notes.append(PATH_NOTE)
    # what common.read_input records of each layer it reads: input_path's were all valid (above)
    record_input_validity(
        ctx, "input_path", rows=len(left_geoms), invalid_count=0, missing_count=int(missing.sum()), invalid=[]
    )
    warn_2d_geometries(ctx, left_geoms, "distance_m", "distance_m is the horizontal distance")
    report_geometry_validity(ctx, join_geoms, "join_path")
    refuse_existing_fields(ctx, list(left_layer.columns), ["distance_m"])
    crs = CRS.from_wkt(ctx.inputs["input_path"].crs_wkt or "")
    metric = to_metric(ctx, _CrsOnly(crs), PURPOSE)  # type: ignore[arg-type]  # planar: columns_problem
    n_left, n_join = len(left_geoms), len(join_geoms)
    _record_planar(ctx, metric, n_left)
    max_m = ctx.arguments.get("max_distance_meters")
    limit = metric.units(max_m) if max_m is not None else None
    tree = shapely.STRtree(join_geoms)
    found_left, found_right, found = nearest_ops.nearest_in_threads(tree, left_geoms, limit)
    chosen = nearest_ops.choose(found_left, found_right, found * metric.metres_per_unit, n_left, max_m)
    right, distance = chosen.columns(n_left)
    incoming = _fields(join_layer)
    renamed = _rename_clashes([*left_layer.columns, "distance_m"], incoming, JOIN_SUFFIX)  # as nearest_join's
    taken = join.select(incoming).take(pa.array(right, mask=right < 0))
    out = left
    for name in incoming:
        column = taken.column(name)
        if pa.types.is_integer(column.type) and not pa.types.is_int64(column.type):
            column = column.cast(pa.int64())  # as the GeoPandas engine writes join_path's integers (pandas' Int64)
        out = out.append_column(renamed.get(name, name), column)
    out = out.append_column("distance_m", pa.array(distance, mask=np.isnan(distance)))
    nearest_ops.record_nearest(ctx, chosen, n_left, n_join, renamed, max_m)
    present = ~missing
    types = tuple(TYPE_NAMES[t] for t in sorted(set(np.unique(shapely.get_type_id(left_geoms[present])).tolist())))
    bounds = _bounds(left_geoms[present])
    facts = OutputFacts(n_left, n_left - int(present.sum()), 0, types, bounds)  # type: ignore[arg-type]
    _derived_kept(ctx, out.column_names)
    assert ctx.temp_output is not None
    pq.write_table(out.replace_schema_metadata({"geo": _geo_metadata(left_layer, facts)}), ctx.temp_output)
    # input_path's geometries are written as read, and every one was valid (checked above).
    ctx.output_stats = OutputStats(feature_count=n_left, invalid_count=0, geometry_types=types)
    return True


def _bounds(geoms: np.ndarray) -> tuple[float, float, float, float] | None:
    """The extent of present geometries, from their coordinates (shapely.total_bounds asks GEOS for each geometry's
    box: 0.25 s against 0.06 s on 1,000,000 points, the same four doubles); None when there are none."""
    import shapely

    xy = shapely.get_coordinates(geoms)
    if not len(xy):
        return None
    return (float(xy[:, 0].min()), float(xy[:, 1].min()), float(xy[:, 0].max()), float(xy[:, 1].max()))


def _derived_kept(ctx: RunContext, names: list[str]) -> None:
    """What ``derived.refresh`` records of a layer written with valid geometries and no stale field: each derived
    field present is written (this run's own, distance_m) or kept (an input's)."""
    from mapsmith.derived_fields import DerivedPlan

    plan: DerivedPlan | None = getattr(ctx, "derived", None)
    if plan is None or not plan.fields:
        return
    present = plan.in_output(names)
    plan.refreshed = True
    if not present:
        return
    actions = plan.actions if plan.actions is not None else {}
    plan.actions = actions
    for field in present:
        actions.setdefault(field.name, "written" if field.own else "kept")


def _set_engine(ctx: RunContext) -> None:
    """The GeoPandas engine, as the router named it, with the libraries that did this path's work: shapely (GEOS)
    searched and measured, pyproj read the CRS, pyarrow read and wrote. GeoPandas is named by its installed version:
    importing it (and pandas) would cost a fresh process 0.25 s this path does not need."""
    from importlib import metadata

    import pyarrow
    import pyproj
    import shapely

    ctx.set_engine(
        "geopandas",
        metadata.version("geopandas"),
        shapely=shapely.__version__,
        GEOS=shapely.geos_version_string,
        pyproj=pyproj.__version__,
        PROJ=pyproj.proj_version_str,
        pyarrow=pyarrow.__version__,
    )
