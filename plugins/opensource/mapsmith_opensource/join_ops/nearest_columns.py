"""nearest_join on GeoParquet without a DataFrame: the GeoPandas engine's search and tie rule, every field carried
as an Arrow column.

The GeoPandas engine (``join_ops.nearest``) reads both layers into GeoDataFrames, attaches the join fields with
pandas and writes the frame back, re-encoding every geometry. Measured for issue 22 on benchmarks/goal_ops'
1,000,000 points and 2,000 sites (one profile, 2 cores): reading took 1.2 s, writing 1.0 s, the search 0.9-1.7 s.
Here the layers are read with pyarrow, only the geometry columns are decoded (shapely, for the search), the join
fields are taken by row (``pyarrow.Table.take``) and the input's geometry column is written as its bytes were read;
input_path is read, searched and written in batches (BATCH_ROWS), so its decoded geometries are never all held at
once (a 2-D point costs about 215 bytes in GEOS and Python). pandas is never imported.
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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mapsmith_opensource.join_ops import nearest as nearest_ops
from mapsmith_opensource.join_ops import spatial_join_duckdb as files
from mapsmith_opensource.join_ops.shared import JOIN_SUFFIX, _rename_clashes
from mapsmith_opensource.layer_facts import FactsTally

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext

KEYS = ("input_path", "join_path")
COLUMNS_ENGINE = "GeoPandas (columns)"  # how spatial_join_duckdb._geoparquet's reasons name this path
PURPOSE = "measured for nearest neighbours"
# input_path's rows per batch: at least two of chunked.MIN_CHUNK, so the search's threads split each batch (a batch of
# 65,536 searched on one thread: whole runs 4.1 s). Measured on benchmarks/goal_ops' 1,000,000 points, whole warm runs
# interleaved, peak RSS: 131,072 rows 3.1-3.7 s and 424-453 MiB, 262,144 rows 2.8-3.3 s and 493-512 MiB; the whole
# layer at once (before batches) 3.0 s and 668-685 MiB.
BATCH_ROWS = 131_072
PATH_NOTE = (
    "engine path: columns -- the GeoPandas engine's search and tie rule without a DataFrame: pyarrow read both "
    "GeoParquet files, shapely decoded the geometries and searched, the join fields were taken by row as Arrow "
    "columns and input_path's geometries written as their bytes were read"
)


def columns_problem(ctx: RunContext) -> str | None:
    """Why this run cannot take the columns path before anything is read, or None."""
    from mapsmith import parts
    from mapsmith.crs import parse_crs
    from mapsmith.derived_fields import DerivedPlan
    from mapsmith_opensource import io
    from mapsmith_opensource.common import true_to_scale

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
    crs = parse_crs(first.crs_wkt)
    if not crs.equals(parse_crs(second.crs_wkt), ignore_axis_order=True):
        return f"input_path is in {first.crs_label} and join_path in {second.crs_label} (join_path is aligned first)"
    if not true_to_scale(crs, first.bounds_lonlat):
        why = "geographic" if crs.is_geographic else "not true to scale at the data"
        return f"{first.crs_label} is {why}: distances are measured geodesically"
    plan: DerivedPlan | None = getattr(ctx, "derived", None)
    if plan is not None and plan.stale:
        return "a derived field is stale, which the GeoPandas engine measures again on the geometries written"
    layers, problem = files.layers_problem(ctx, COLUMNS_ENGINE)
    if problem:
        return problem
    if any(c.casefold() == "distance_m" for c in layers["input_path"].columns):
        return "input_path already has a field distance_m (the GeoPandas engine refuses the run: FIELD_EXISTS)"
    if layers["input_path"].geometry in layers["join_path"].fields:
        return "join_path has a field named as input_path's geometry column"
    return None


def _decoded(values: Any) -> np.ndarray:
    """A WKB column's values as shapely geometries (None for a null). A decoder reading 2-D points' coordinates
    straight from Arrow's buffers was measured and left out: creating the GEOS points is most of the cost (0.42 s
    against shapely.from_wkb's 0.55 s on 1,000,000 points)."""
    import pyarrow as pa
    import shapely

    from mapsmith_opensource.layer_facts import _objects

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return shapely.from_wkb(_objects(values))


@dataclass
class _Pass:
    """What one pass over input_path's batches learnt: the facts of the geometries read (the output's: they are
    written as read), how many have Z, and the tally of the choices (the chosen distances kept, 8 bytes a row; the
    rows themselves are written batch by batch)."""

    n_join: int
    facts: FactsTally = field(default_factory=FactsTally)
    with_z: int = 0
    matched: int = 0
    tied: int = 0
    beyond: int = 0
    used: np.ndarray | None = None  # which join rows were chosen, over the batches so far
    metres: list[np.ndarray] = field(default_factory=list)

    def add(self, geoms: np.ndarray, chosen: nearest_ops.Chosen) -> None:
        import numpy as np

        from mapsmith_opensource.measure_lengths import has_z

        self.with_z += int(has_z(geoms).sum())
        self.matched += len(chosen.left)
        self.tied += chosen.tied
        self.beyond += chosen.beyond
        chosen_here = np.bincount(chosen.right, minlength=self.n_join) > 0
        self.used = chosen_here if self.used is None else self.used | chosen_here
        self.metres.append(chosen.metres)

    def tally(self) -> nearest_ops.Tally:
        """The batches' tallies as one: what ``nearest_ops.Tally.of`` gives for the whole layer's choices (each input
        row's choice depends on its own candidates only, and the distances stay in input order)."""
        import numpy as np

        used = int(self.used.sum()) if self.used is not None else 0
        metres = np.concatenate(self.metres) if self.metres else np.zeros(0)
        return nearest_ops.Tally(self.matched, self.tied, self.beyond, used, metres)


def nearest_join_columns(ctx: RunContext) -> bool:
    """Run the nearest join on the columns path and write the output: True; False when the path cannot take it
    (nothing recorded but a note naming the reason, when both inputs are GeoParquet).

    input_path is read, searched and written BATCH_ROWS rows at a time (a row's choice depends on its own candidates
    only), so one batch's decoded geometries are held at once, never the layer's; what the records need is gathered
    on the way and recorded once the pass is over, in the GeoPandas path's order. A batch with an invalid geometry
    ends the pass: the partial output is removed and the GeoPandas engine runs instead."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import shapely

    from mapsmith.crs import linear_unit_metres, parse_crs
    from mapsmith.runner import OutputStats
    from mapsmith_opensource import io
    from mapsmith_opensource.common import record_input_validity, report_geometry_validity, to_metric
    from mapsmith_opensource.derived import record_unchanged
    from mapsmith_opensource.join_ops.ground import _CrsOnly, _record_planar
    from mapsmith_opensource.join_ops.spatial_join_sedonadb import _geo_metadata
    from mapsmith_opensource.measure_lengths import warn_z_count

    problem = columns_problem(ctx)
    if problem is not None:
        if all(io.is_parquet(ctx.paths[k]) for k in KEYS):
            ctx.notes.append(f"engine path: GeoDataFrame -- the columns path was not taken: {problem}")
        return False
    layers, _ = files.layers_problem(ctx, COLUMNS_ENGINE)
    left_layer, join_layer = layers["input_path"], layers["join_path"]
    # ParquetFile, not read_table: read_table imports pyarrow.dataset, which imports pandas (0.25 s of a fresh process)
    join = pq.ParquetFile(join_layer.path).read(columns=list(join_layer.columns))
    join_geoms = _decoded(join.column(join_layer.geometry))
    tree = shapely.STRtree(join_geoms)
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt or "")
    unit_m = linear_unit_metres(crs)  # the unit to_metric records below for this planar CRS (columns_problem)
    max_m = ctx.arguments.get("max_distance_meters")
    limit = max_m / unit_m if max_m is not None else None
    incoming = join_layer.fields
    renamed = _rename_clashes([*left_layer.columns, "distance_m"], incoming, JOIN_SUFFIX)  # as nearest_join's
    fields = join.select(incoming)
    passed = _Pass(len(join_geoms))
    assert ctx.temp_output is not None
    writer: Any = None
    try:
        # pre_buffer off: with it, the reader kept every row group's bytes it had read until the end (Arrow's
        # allocation grew by the file's size: 43 against 243 MiB after 60 batches of benchmarks/goal_ops' 10M points)
        source = pq.ParquetFile(left_layer.path, pre_buffer=False)
        for batch in source.iter_batches(BATCH_ROWS, columns=list(left_layer.columns)):
            geoms = _decoded(batch.column(left_layer.geometry))
            if passed.facts.add(geoms):  # invalid geometries in this batch
                ctx.notes.append(
                    "engine path: GeoDataFrame -- the columns path was not taken: input_path has invalid "
                    "geometries, which the GeoPandas engine makes valid before measuring"
                )
                if writer is not None:
                    writer.close()
                    writer = None
                ctx.temp_output.unlink(missing_ok=True)
                return False
            found_left, found_right, found = nearest_ops.nearest_in_threads(tree, geoms, limit)
            chosen = nearest_ops.choose(found_left, found_right, found * unit_m, len(geoms), max_m)
            passed.add(geoms, chosen)
            right, distance = chosen.columns(len(geoms))
            taken = fields.take(_arrow(right, right >= 0))
            out = pa.Table.from_batches([batch])
            for name in incoming:
                column = taken.column(name)
                if pa.types.is_integer(column.type) and not pa.types.is_int64(column.type):
                    column = column.cast(pa.int64())  # as the GeoPandas engine writes join_path's (pandas' Int64)
                out = out.append_column(renamed.get(name, name), column)
            out = out.append_column("distance_m", _arrow(distance, ~np.isnan(distance)))
            out = out.replace_schema_metadata(None)  # input_path's own (its geo, pandas' index) would be stale
            if writer is None:
                writer = pq.ParquetWriter(ctx.temp_output, out.schema)
            writer.write_table(out)
        facts = passed.facts.facts()
        n_left = facts.rows
        assert writer is not None  # columns_problem: input_path has features
        writer.add_key_value_metadata({"geo": _geo_metadata(left_layer, facts)})
        writer.close()
        writer = None
    finally:
        if writer is not None:  # an error above: the partial file is the runner's temporary output, removed with it
            writer.close()
    # The records, in the order the GeoPandas path makes them (common.read_input, then nearest_ops.nearest_join).
    _set_engine(ctx)
    ctx.notes.append(PATH_NOTE)
    record_input_validity(ctx, "input_path", rows=n_left, invalid_count=0, missing_count=facts.missing, invalid=[])
    warn_z_count(ctx, passed.with_z, n_left, "distance_m", "distance_m is the horizontal distance")
    report_geometry_validity(ctx, join_geoms, "join_path")
    metric = to_metric(ctx, _CrsOnly(crs), PURPOSE)  # type: ignore[arg-type]  # planar: columns_problem
    _record_planar(ctx, metric, n_left)
    nearest_ops.record_nearest(ctx, passed.tally(), n_left, len(join_geoms), renamed, max_m)
    record_unchanged(ctx, [*left_layer.columns, *(renamed.get(n, n) for n in incoming), "distance_m"])
    # input_path's geometries are written as read, and every one was valid (checked above).
    ctx.output_stats = OutputStats(feature_count=n_left, invalid_count=0, geometry_types=facts.geometry_types)
    return True


def _arrow(values: np.ndarray, valid: np.ndarray) -> Any:
    """A numpy array of int64 or float64 as an Arrow array, null where ``valid`` is False, built from its buffers:
    ``pyarrow.array`` on a numpy array imports pandas to ask whether it is one (0.25 s of a fresh process)."""
    import numpy as np
    import pyarrow as pa

    kind = {np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64()}[values.dtype]
    nulls = len(values) - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        kind, len(values), [bitmap, pa.py_buffer(np.ascontiguousarray(values))], null_count=nulls
    )


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
