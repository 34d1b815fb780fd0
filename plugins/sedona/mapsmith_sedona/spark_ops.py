"""MapSmith's heavy vector operations as Spark jobs with Apache Sedona SQL (``MAPSMITH_STACK=sedona``).

spatial_join, nearest_join, count_in_polygons, summarize_points_in_polygons, dissolve_layer and
overlay_layers (SPARK_OPERATIONS; registered by ``register_operations``).

GeoParquet in, GeoParquet out: Spark reads the inputs, finds the matching pairs with Sedona's spatial
join, assembles the rows and writes one GeoParquet file with the input's CRS. The semantics are the
GeoPandas engine's (join_ops), and its pure helpers are reused where they touch no data -- field
renaming on clashes, the join counts and their notes, the CRS record, the validity check -- so the
two cannot drift apart in how results are named and reported:

- predicates read "input <predicate> join", on the geometries as they are in the file;
- how='left' keeps every input row (one row with empty join fields when nothing matches), rows come
  in input order and, within one input row, in join order; join fields clashing with input fields
  (ignoring case) get the suffix ``_join``; join-side integer fields become 64-bit, as GeoPandas'
  nullable Int64 writes them;
- an input with invalid geometries is refused with INPUT_GEOMETRY_INVALID where the GeoPandas engine
  refuses it.

What it does not do, and says so before Spark starts (NO_ELIGIBLE_ENGINE with the reason): read
anything but GeoParquet, write anything but GeoParquet, align two inputs in different CRSs (the
GeoPandas engine transforms one; here, reproject first). within_distance and nearest_join measure
only in a projected CRS true to scale at the data (where the GeoPandas engine measures planar too);
where it would measure geodesically they are refused with CRS_NOT_PROJECTED. dissolve_layer refuses
invalid input geometries (INPUT_GEOMETRY_INVALID), whose union JTS does not define, where the
GeoPandas engine unions them anyway. Polygons and lines are matched exactly: nothing here uses
Sedona's ST_KNN join, which measures lines and polygons from their centroids.

This module holds the joins (spatial_join, count_in_polygons, summarize_points_in_polygons) and the
registration of every Spark operation; the job machinery is spark_job, nearest_join is spark_nearest,
dissolve_layer is spark_dissolve and overlay_layers spark_overlay. It imports pyspark only inside the
functions that run a job.
"""

from __future__ import annotations

import importlib
import math
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mapsmith.errors import CRSError
from mapsmith_sedona.spark_job import (
    ENGINE,
    ROW,
    check_validity,
    fields_as_long,
    finish_job,
    page_rows,
    pair_eligible,
    read_layer,
    start_job,
    write_geoparquet,
    written_rows,
)
from mapsmith_sedona.spark_parts import first_part

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

JOIN_ROW = "__mapsmith_join_row"  # the join row's order key, carried beside the input row's through Sedona's join
PREDICATES = {
    "intersects": "ST_Intersects",
    "within": "ST_Within",
    "contains": "ST_Contains",
    "touches": "ST_Touches",
    "crosses": "ST_Crosses",
    "overlaps": "ST_Overlaps",
}


# -- eligibility and validation: before Spark starts ----------------------------------------------


def spatial_join_eligible(ctx: RunContext) -> str | None:
    return pair_eligible(ctx, ("input_path", "join_path"))


def points_in_polygons_eligible(ctx: RunContext) -> str | None:
    return pair_eligible(ctx, ("input_path", "points_path"))


def validate_spatial_join(ctx: RunContext) -> None:
    """join_ops' argument rules, then: within_distance needs a CRS whose units are lengths."""
    from mapsmith.crs import crs_label, parse_crs
    from mapsmith_opensource import join_ops

    join_ops.validate_spatial_join(ctx)
    if ctx.arguments["predicate"] != "within_distance":
        return
    info = ctx.inputs["input_path"]
    crs = parse_crs(info.crs_wkt)
    if crs.is_geographic:
        raise CRSError(
            f"within_distance on the Spark engine measures in the layer's CRS, and {crs_label(crs)} is "
            "geographic (degrees), so distance_meters cannot be applied there",
            code="CRS_NOT_PROJECTED",
            evidence={"crs": crs_label(crs), "argument": "distance_meters", "engine": ENGINE},
            hint="reproject_layer both inputs to a projected CRS true to scale at the data (a UTM zone), or run "
            "with MAPSMITH_STACK=opensource, which measures on the ellipsoid",
        )


# -- the operations --------------------------------------------------------------------------------


def spatial_join_spark(ctx: RunContext) -> None:
    """Sedona's join carries every output column (the input row's, the join row's attributes) and is kept once;
    the counts are taken from what was kept and the rows written in order from it; how='left' adds the input rows
    with no match (an anti join on the order key). Measured for issue 22 on 10,000,000 points in 10 parts and 10,000
    zones (how='inner', a folder of parts out, the two-worker cluster of 1 core and 1 GiB each; /tmp scratch
    scripts, load 2.2-3.1): whole MapSmith runs, a fresh process's first run then a second, old and new interleaved,
    132.8, 138.3 s and 87.9, 100.5 s with the path before it -- only the pairs' row numbers kept, the input rows
    joined back onto them by row number, whose shuffle of every input row and whose range partitioner's sampling
    (running that join back a second time) cost about 30 s -- against 116.6, 134.6 s and 80.5, 87.3 s now; keeping
    the carried rows makes Sedona's join stage 42-54 s instead of 29-36 s. The zones' attributes carried through
    the join, rather than joined on by a broadcast afterwards, measured the same (one session, 59.1, 75.2 s against
    67.2, 65.2 s). At 100,000,000 points (bench_goals.py --preset cluster-100m) the work took 865.0 s, 892.6 s before
    (separate runs). In local mode (local[2], the same data, a fresh process's first run, interleaved, load 0.3-1.9):
    84.4, 81.8 s before, 80.3, 72.8 s now; an earlier measurement there, with one output file, had carrying the
    columns and keeping them cost more than the join back (103.0 s against 87.1 s).

    The rows are kept on the executors' disks only (DISK_ONLY): kept in memory first (MEMORY_AND_DISK), a partition
    of carried rows larger than a 1 GiB executor's heap failed while being cached ("Putting block ... failed:
    OutOfMemoryError") at 30,000,000 points, one file out: one run lost the job, another an executor, 238.2 s; kept
    on disk, 160.8 s, no executor lost, against 157.1 s for the path before (the cluster above, the MapSmith process
    under an 8 GiB cgroup, a session started before the clock, one run each). At 10,000,000 points, one file out:
    63.2, 59.7 s on disk, 62.0, 61.5 s the path before; a folder of parts out: 77.3, 74.8 s on disk, 77.2, 82.0 s in
    memory first, 97.5, 89.8 s the path before (interleaved, load 2.6-3.6). At 100,000,000 points (the cluster-100m
    preset, a folder of parts out, the session started before the clock): 640.4 s on disk, against 865.0 s kept in
    memory first with the session's start on the clock (separate runs; raw Spark 285.9 s and 279.6 s in each)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from mapsmith.crs import linear_unit_metres, parse_crs
    from mapsmith_opensource import join_ops

    job = start_job(ctx)
    job.progress(0.1, "reading input_path and join_path")
    left, lgeom, lfields = read_layer(job, "input_path")
    right, rgeom, rfields = read_layer(job, "join_path")
    check_validity(job, left, lgeom, "input_path", refuse=True)
    check_validity(job, right, rgeom, "join_path", refuse=True)
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt)
    predicate = ctx.arguments["predicate"]
    if predicate == "within_distance":
        units = float(ctx.arguments["distance_meters"]) / linear_unit_metres(crs)
        ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
        condition = f"ST_DWithin(l.`{lgeom}`, r.`{rgeom}`, {units!r})"
        join_ops._record_topological(ctx, crs, "join_path", "distances were measured (planar, in its own units)")
    else:
        condition = f"{PREDICATES[predicate]}(l.`{lgeom}`, r.`{rgeom}`)"
        join_ops._record_topological(ctx, crs, "join_path", f"the predicate '{predicate}' was evaluated")
    job.progress(0.3, f"finding pairs with Sedona's spatial join ({predicate})")
    renamed = join_ops._rename_clashes([*lfields, lgeom], rfields, join_ops.JOIN_SUFFIX)
    right_names = [renamed.get(f, f) for f in rfields]
    suffix = uuid.uuid4().hex[:8]
    lview, rview = f"mapsmith_l_{suffix}", f"mapsmith_r_{suffix}"
    left.createOrReplaceTempView(lview)
    right.createOrReplaceTempView(rview)
    try:
        carried_columns = ", ".join(
            [f"r.{ROW} AS {JOIN_ROW}", *[f"r.`{f}` AS `{n}`" for f, n in zip(rfields, right_names, strict=True)]]
        )
        # on disk only: a partition of carried rows cached in memory first overflowed an executor's heap (docstring)
        pairs = job.spark.sql(f"SELECT l.*, {carried_columns} FROM {lview} l JOIN {rview} r ON {condition}").persist(
            StorageLevel.DISK_ONLY
        )
        try:
            tally_row = pairs.agg(
                F.count(F.lit(1)).alias("pairs"),
                F.countDistinct(ROW).alias("left"),
                F.countDistinct(JOIN_ROW).alias("right"),
            ).collect()[0]
            rows = pairs
            if ctx.arguments["how"] == "left":  # the input rows with no match, once each, their join fields empty
                rows = rows.unionByName(left.join(pairs.select(ROW), ROW, "left_anti"), allowMissingColumns=True)
            rows = fields_as_long(rows, right_names)
            out = rows.select(
                *[F.col(f"`{c}`") for c in left.columns if c != ROW],
                *[F.col(f"`{n}`") for n in right_names],
                F.col(ROW).alias("__o1"),
                F.col(JOIN_ROW).alias("__o2"),
            )
            job.progress(0.6, "writing GeoParquet")
            write_geoparquet(job, out, ["__o1", "__o2"], ctx.inputs["input_path"].crs_wkt)
        finally:
            pairs.unpersist()
    finally:
        job.spark.catalog.dropTempView(lview)
        job.spark.catalog.dropTempView(rview)
    n_left = ctx.inputs["input_path"].feature_count or 0
    n_join = ctx.inputs["join_path"].feature_count or 0
    tally = join_ops._JoinTally(
        n_left, n_join, int(tally_row["pairs"]), int(tally_row["left"]), int(tally_row["right"])
    )
    join_ops._record_spatial_join(ctx, tally, renamed)
    finish_job(job)
    assert ctx.temp_output is not None
    join_ops._check_written(ctx, tally, written_rows(ctx.temp_output))


# How many points in several polygons one task of the interior test's join takes at most. Measured on 10,000,000 and
# 30,000,000 points and 10,000 overlapping zones (2,034,849 and 6-7 million points in several), the two-worker cluster
# (1 core and 1 GiB each), that join's stage, one run per setting, interleaved (/tmp scratch script, Spark's REST API):
#   tasks                            10M                          30M
#   the shuffle's 200                22.6, 23.5, 26.3 s           45.8 s
#   as many as task slots (2)        14.8, 14.9, 17.9 s           39.9 s, 41 MB spilled
#   at most 1,000,000 points each    20.2 s (3 tasks)             42.6 s (7 tasks), none spilled
# Two tasks were fastest at 10M, but their share grows with the points and spilled at 30M: a task's points are bounded
# instead. Whole runs moved within the day's noise (30M: 237.5 s with 200 tasks, 240.6 s with 2, 245.7 s bounded).
SEVERAL_POINTS_PER_TASK = 1_000_000


def _points_in_polygons(
    ctx: RunContext,
    new_fields: list[str],
    per_polygon: Callable[[Any, Any], tuple[Any, list[Any]]],
    value_field: str | None = None,
) -> tuple[dict[str, int], int, str]:
    """join_ops._points_in_polygons on Spark: read, check, pair by ST_Intersects, then write the polygons
    with the columns ``per_polygon(pairs, points)`` computes (a frame keyed by ``i``, and its columns).

    Returns the counts join_ops reports, the number of pairs, and the polygons' geometry column.
    """
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from mapsmith.crs import parse_crs
    from mapsmith_opensource import join_ops

    job = start_job(ctx)
    job.progress(0.1, "reading input_path and points_path")
    polygons, pgeom, pfields = read_layer(job, "input_path")
    points, tgeom, _ = read_layer(job, "points_path")
    if value_field is not None:  # the GeoPandas engine's refusals, on a frame with the file's types and no rows
        empty = pq.read_schema(first_part(ctx.paths["points_path"])).empty_table().to_pandas()
        join_ops._numeric_field(ctx, empty.drop(columns=[tgeom], errors="ignore"), value_field, "points_path")
    join_ops._refuse_existing(ctx, pd_frame([*pfields, pgeom]), new_fields)
    check_validity(job, polygons, pgeom, "input_path", refuse=True)
    no_geometry = check_validity(job, points, tgeom, "points_path", refuse=False)
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt)
    join_ops._record_topological(ctx, crs, "points_path", "points were tested against polygons")
    job.progress(0.3, "finding the points in each polygon with Sedona's spatial join")
    suffix = uuid.uuid4().hex[:8]
    pview, tview = f"mapsmith_p_{suffix}", f"mapsmith_t_{suffix}"
    polygons.createOrReplaceTempView(pview)
    points.createOrReplaceTempView(tview)
    try:
        # The pairs carry the point as WKB. Whether a point lies inside (in the interior of) a polygon tells a point in
        # overlapping polygons from one on a boundary they share (join_ops.points_in_polygons.pair_counts gives the
        # rule), and it matters only for a point in several polygons: it is asked once the pairs are grouped by point,
        # by a second join over those points alone. Asked of every pair (ST_Contains beside the join), it doubled the
        # join's stage. Measured on 10,000,000 points and 10,000 overlapping zones (2,034,849 points in several), Spark
        # local mode on 2 cores, the operation's time in a warm process, before and after interleaved (load 1.6-2.9):
        # count_in_polygons 74.4, 74.4, 72.5 s -> 67.2, 69.0, 69.8 s (the join's stage 46.2 -> 26.2 s, the second
        # join's 10.1 s, the grouping by point again 3.8 s); summarize_points_in_polygons 86.6, 85.0 -> 82.1, 82.4 s.
        pairs = job.spark.sql(
            f"SELECT p.{ROW} AS i, t.{ROW} AS j, ST_AsBinary(t.`{tgeom}`) AS w "
            f"FROM {pview} p JOIN {tview} t ON ST_Intersects(p.`{pgeom}`, t.`{tgeom}`)"
        ).persist()
        try:
            # One pass over the pairs grouped by point gives the pairs, the points counted and those in several
            # polygons; the polygons with a point are the rows of the per-polygon frame, kept for the write. A
            # separate count of distinct polygons and points was 14 s of Spark stages on 10,000,000 points in 3
            # parts on the two-worker cluster: whole runs took 117.0 and 110.4 s with it, 99.3 and 103.6 s now.
            per_point = pairs.groupBy("j").agg(F.count(F.lit(1)).alias("n"), F.first("w").alias("w"))
            several_n = F.col("n") > 1
            stats = per_point.agg(
                F.count(F.lit(1)).alias("pts"),
                F.sum("n").alias("pairs"),
                F.count(F.when(several_n, 1)).alias("several"),
            ).collect()[0]
            several, overlapping = int(stats["several"] or 0), 0
            if several:
                # The points in several polygons that lie inside one of them: Sedona's join with ST_Contains over
                # those points alone (its index, as for the pairs), not a test of each of their pairs.
                # In partitions of at most SEVERAL_POINTS_PER_TASK points (and no fewer than task slots), not in the
                # shuffle's 200, which on a cluster (local mode sets them to the cores) are mostly tiny tasks.
                sview = f"mapsmith_s_{suffix}"
                tasks = max(job.spark.sparkContext.defaultParallelism, math.ceil(several / SEVERAL_POINTS_PER_TASK))
                per_point.where(several_n).select(F.col("j"), F.expr("ST_GeomFromWKB(w)").alias("g")).coalesce(
                    tasks
                ).createOrReplaceTempView(sview)
                try:
                    overlapping = int(
                        job.spark.sql(
                            f"SELECT count(DISTINCT s.j) AS n FROM {pview} p JOIN {sview} s "
                            f"ON ST_Contains(p.`{pgeom}`, s.g)"
                        ).collect()[0]["n"]
                    )
                finally:
                    job.spark.catalog.dropTempView(sview)
            keyed, columns = per_polygon(pairs, points)
            # One row per polygon with a point: as few partitions as task slots, not the shuffle's 200 (each an
            # empty task when read back from the cache)
            keyed = keyed.coalesce(job.spark.sparkContext.defaultParallelism).persist()
            try:
                polygons_counted = keyed.count()
                out = polygons.join(keyed, polygons[ROW] == keyed["i"], "left").select(
                    *[F.col(f"`{c}`") for c in polygons.columns if c != ROW], *columns, F.col(ROW).alias("__o1")
                )
                job.progress(0.6, "writing GeoParquet")
                write_geoparquet(job, out, ["__o1"], ctx.inputs["input_path"].crs_wkt)
            finally:
                keyed.unpersist()
        finally:
            pairs.unpersist()
    finally:
        job.spark.catalog.dropTempView(pview)
        job.spark.catalog.dropTempView(tview)
    n_polygons = ctx.inputs["input_path"].feature_count or 0
    n_points = ctx.inputs["points_path"].feature_count or 0
    counted = int(stats["pts"])
    counts = {
        "polygons": n_polygons,
        "points": n_points,
        "points_counted": counted,
        "points_in_no_polygon": n_points - counted,
        "points_without_geometry": int(no_geometry),
        "points_in_several_polygons": several,
        "points_in_overlapping_polygons": overlapping,
        "points_on_shared_boundaries": several - overlapping,
        "polygons_with_no_points": n_polygons - polygons_counted,
    }
    from mapsmith_opensource.join_ops.points_in_polygons import record_pair_counts

    record_pair_counts(ctx, counts)  # the same note and boundary rule as every engine
    finish_job(job)
    return counts, int(stats["pairs"] or 0), pgeom


def pd_frame(columns: list[str]) -> Any:
    import pandas as pd

    return pd.DataFrame(columns=columns)


def count_in_polygons_spark(ctx: RunContext) -> None:
    from pyspark.sql import functions as F

    from mapsmith_opensource import join_ops

    def per_polygon(pairs: Any, points: Any) -> tuple[Any, list[Any]]:
        keyed = pairs.groupBy("i").agg(F.count(F.lit(1)).alias("n"))
        return keyed, [F.coalesce(F.col("n"), F.lit(0)).cast("bigint").alias("point_count")]

    counts, pairs, geom = _points_in_polygons(ctx, ["point_count"], per_polygon)
    ctx.parameters["x-mapsmith:join_counts"] = counts
    assert ctx.temp_output is not None
    rows, window = page_rows(ctx.temp_output, geom, ctx.arguments)
    from mapsmith_opensource.join_ops.points_in_polygons import warn_total_counts_overlaps

    warn_total_counts_overlaps(ctx, pairs, counts)
    ctx.answer = {
        **counts,
        "total_point_count": pairs,
        "distinct_point_count": counts["points_counted"],
        "boundary_rule": join_ops.BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }


def validate_summarize_points(ctx: RunContext) -> None:
    from mapsmith_opensource import join_ops

    join_ops.validate_summarize_points(ctx)


def summarize_points_in_polygons_spark(ctx: RunContext) -> None:
    """join_ops.summarize_points_in_polygons on Spark: nulls (and NaN, which GeoPandas reads as null) are left
    out of every statistic and counted per polygon; over no values sum and count are 0, mean/min/max empty."""
    from pyspark.sql import functions as F

    from mapsmith_opensource import join_ops

    name = ctx.arguments["field"]
    statistics = join_ops._parse_statistics(ctx.arguments["statistics"])
    ctx.parameters["statistics"] = ",".join(statistics)
    columns = {s: f"{name}_{s}" for s in statistics}
    null_column = f"{name}_null_count"
    nulls: dict[str, int] = {}

    def per_polygon(pairs: Any, points: Any) -> tuple[Any, list[Any]]:
        raw = F.col(f"`{name}`").cast("double")
        value = F.when(raw.isNull() | F.isnan(raw), F.lit(None)).otherwise(raw)
        valued = points.select(F.col(ROW).alias("jj"), value.alias("v"))
        nulls["points"] = valued.where(F.col("v").isNull()).count()
        joined = pairs.join(valued, pairs["j"] == valued["jj"])
        nulls["pairs"] = joined.where(F.col("v").isNull()).count()
        aggregates = {
            "mean": F.avg("v"),
            "sum": F.sum("v"),
            "min": F.min("v"),
            "max": F.max("v"),
            "count": F.count("v"),
        }
        keyed = joined.groupBy("i").agg(
            *[aggregates[s].alias(f"__{s}") for s in statistics],
            F.sum(F.when(F.col("v").isNull(), 1).otherwise(0)).alias("__nulls"),
        )
        out = []
        for statistic, column in columns.items():
            col = F.col(f"__{statistic}")
            if statistic == "count":
                out.append(F.coalesce(col, F.lit(0)).cast("bigint").alias(column))
            elif statistic == "sum":
                out.append(F.coalesce(col, F.lit(0.0)).cast("double").alias(column))
            else:
                out.append(col.cast("double").alias(column))
        out.append(F.coalesce(F.col("__nulls"), F.lit(0)).cast("bigint").alias(null_column))
        return keyed, out

    found, _, geom = _points_in_polygons(ctx, [*columns.values(), null_column], per_polygon, value_field=name)
    counts = {**found, "points_with_null_value": nulls["points"], "null_values_in_polygons": nulls["pairs"]}
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.notes.append(
        f"null values of {name!r} are left out of every statistic ({', '.join(statistics)}) and counted per "
        f"polygon in {null_column}; {nulls['points']} points have no value; over no values sum and count are 0 "
        "and mean, min and max are empty"
    )
    if nulls["pairs"]:
        ctx.warn(
            "NULL_VALUES_EXCLUDED",
            f"{nulls['pairs']} (polygon, point) pairs had no value of {name!r} and were left out of the statistics",
            f"see {null_column} per polygon; fill the missing values first if they should count",
        )
    assert ctx.temp_output is not None
    rows, window = page_rows(ctx.temp_output, geom, ctx.arguments)
    ctx.answer = {
        **counts,
        "field": name,
        "statistics": statistics,
        "boundary_rule": join_ops.BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }


# -- registration ----------------------------------------------------------------------------------

# operation -> (module of mapsmith_sedona, implementation, eligible, validate): what mapsmith_sedona registers
# on the sedona stack.
SPARK_OPERATIONS: dict[str, tuple[str, str, str, str | None]] = {
    "spatial_join": ("spark_ops", "spatial_join_spark", "spatial_join_eligible", "validate_spatial_join"),
    "count_in_polygons": ("spark_ops", "count_in_polygons_spark", "points_in_polygons_eligible", None),
    "summarize_points_in_polygons": (
        "spark_ops",
        "summarize_points_in_polygons_spark",
        "points_in_polygons_eligible",
        "validate_summarize_points",
    ),
    "nearest_join": ("spark_nearest", "nearest_join_spark", "nearest_join_eligible", "validate_nearest_join"),
    "dissolve_layer": ("spark_dissolve", "dissolve_layer_spark", "dissolve_eligible", "validate_dissolve"),
    "overlay_layers": ("spark_overlay", "overlay_layers_spark", "overlay_eligible", "validate_overlay"),
}


def register_operations(register: Any, requirement: Callable[[], Any], only: tuple[str, ...] | None = None) -> None:
    """Register the Spark engine of every operation in SPARK_OPERATIONS (or of ``only`` those)."""
    from mapsmith_sedona import STACK

    for operation, (module_name, function, eligible, validate) in SPARK_OPERATIONS.items():
        if only is not None and operation not in only:
            continue
        # The modules import no engine at module level, so this stays cheap at the server's start.
        module = importlib.import_module(f"mapsmith_sedona.{module_name}")
        register(
            getattr(module, function),
            operation=operation,
            stack=STACK,
            engine=ENGINE,
            eligible=getattr(module, eligible),
            requirement=requirement,
            validate=getattr(module, validate) if validate else None,
            writes_parts=True,  # spark_job.write_geoparquet writes parts when output_path ends in ".parquet/"
        )
