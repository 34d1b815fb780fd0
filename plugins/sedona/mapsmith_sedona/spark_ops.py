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

This module imports pyspark only inside the functions that run a job.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import CRSError, EngineError
from mapsmith.paging import page, page_window

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

ENGINE = "apache-sedona-spark"
ROW = "__mapsmith_row"  # an order key added to every input: input order, then join order
OUTPUT_SUFFIXES = (".parquet", ".geoparquet")
PREDICATES = {
    "intersects": "ST_Intersects",
    "within": "ST_Within",
    "contains": "ST_Contains",
    "touches": "ST_Touches",
    "crosses": "ST_Crosses",
    "overlaps": "ST_Overlaps",
}


# -- eligibility and validation: before Spark starts ----------------------------------------------


def _geoparquet_problem(ctx: RunContext, keys: tuple[str, ...]) -> str | None:
    from mapsmith_opensource import io

    for key in keys:
        if not io.is_parquet(ctx.paths[key]):
            return (
                f"{key} is not GeoParquet ({ctx.inputs[key].driver}); the Spark engine reads GeoParquet files only: "
                "convert_format it to .parquet first"
            )
    return None


def _eligible(ctx: RunContext, keys: tuple[str, str]) -> str | None:
    from pyproj import CRS

    suffix = ctx.output_path.suffix.lower() if ctx.output_path else ""
    if suffix not in OUTPUT_SUFFIXES:
        return (
            f"the Spark engine writes GeoParquet only, not {suffix or '(no extension)'}; choose an output_path "
            "ending in .parquet (convert_format can turn it into another format afterwards)"
        )
    problem = _geoparquet_problem(ctx, keys)
    if problem:
        return problem
    first, second = (ctx.inputs[k] for k in keys)
    if first.crs_wkt is None or second.crs_wkt is None:
        return None  # the runner has refused this already (CRS_REQUIRED)
    if not CRS.from_wkt(first.crs_wkt).equals(CRS.from_wkt(second.crs_wkt), ignore_axis_order=True):
        return (
            f"{keys[0]} is in {first.crs_label} and {keys[1]} in {second.crs_label}; the Spark engine joins only "
            f"layers in one CRS: reproject_layer {keys[1]} to {first.crs_label} first"
        )
    return None


def spatial_join_eligible(ctx: RunContext) -> str | None:
    return _eligible(ctx, ("input_path", "join_path"))


def points_in_polygons_eligible(ctx: RunContext) -> str | None:
    return _eligible(ctx, ("input_path", "points_path"))


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


# -- Spark work ------------------------------------------------------------------------------------


@dataclass
class _Job:
    """One run's Spark handles and what it records."""

    ctx: RunContext
    spark: Any
    session: Any
    t0: float
    partitions: dict[str, int]
    details: dict[str, Any] = field(default_factory=dict)  # what this operation adds to x-mapsmith:spark_job

    def progress(self, fraction: float, message: str) -> None:
        if self.ctx.progress is not None:
            try:
                self.ctx.progress(fraction, message)
            except Exception:  # a client that went away must not fail the run
                pass


def _start(ctx: RunContext) -> _Job:
    from importlib import metadata

    from mapsmith_sedona import engine_versions
    from mapsmith_sedona.jars import ARTIFACTS, GEOTOOLS_WRAPPER_VERSION, SCALA_VERSION, SEDONA_VERSION
    from mapsmith_sedona.spark_session import get_session, master_of, running

    if ctx.progress is not None and running() is None:
        ctx.progress(0.02, "starting Spark with Apache Sedona (once per process)")
    session = get_session(ctx.environ)
    t0 = time.perf_counter()  # the job's own time: the session's start is recorded apart
    asked = master_of(ctx.environ)
    if asked != session.master:
        ctx.notes.append(
            f"Spark master: this run asked for {asked}, but the process's SparkSession was started on "
            f"{session.master} and one process has one session; it ran there (restart the server to change it)"
        )
    spark = session.spark
    versions = engine_versions()
    components = {
        "spark": spark.version,
        "pyspark": metadata.version("pyspark"),
        "scala": SCALA_VERSION,
        "sedona-jar": ARTIFACTS[0].coordinate,
        "geotools-wrapper": GEOTOOLS_WRAPPER_VERSION,
        "spark_master": session.master,
        "default_parallelism": str(spark.sparkContext.defaultParallelism),
    }
    if "apache-sedona" in versions:
        components["apache-sedona (python)"] = versions["apache-sedona"]
    if "java" in versions:
        components["java"] = versions["java"]
    ctx.set_engine("apache-sedona", SEDONA_VERSION, **components)
    return _Job(ctx, spark, session, t0, {})


def _geometry_column(path: Path) -> str:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    geo = json.loads(meta.get(b"geo", b"{}") or b"{}")
    return str(geo.get("primary_column") or "geometry")


def _read(job: _Job, key: str) -> tuple[Any, str, list[str]]:
    """The input as a DataFrame with an order key; its geometry column and attribute fields."""
    from pyspark.sql import functions as F

    path = job.ctx.paths[key]
    geom = _geometry_column(path)
    df = job.spark.read.format("geoparquet").load(str(path))
    # A single file's splits are numbered in file order, so this id orders rows as the file does.
    df = df.withColumn(ROW, F.monotonically_increasing_id())
    job.partitions[key] = df.rdd.getNumPartitions()
    fields = [c for c in df.columns if c not in (geom, ROW)]
    return df, geom, fields


def _check_validity(job: _Job, df: Any, geom: str, key: str, *, refuse: bool) -> None:
    """The GeoPandas engine's validity record (and refusal), with the counting done by Spark."""
    from pyspark.sql import functions as F

    from mapsmith_opensource import join_ops
    from mapsmith_opensource.common import INVALID_ROWS_SHOWN, invalid_input_error, record_input_validity

    g = F.col(f"`{geom}`")
    missing = g.isNull() | F.expr(f"ST_IsEmpty(`{geom}`)")
    invalid = ~missing & ~F.expr(f"ST_IsValid(`{geom}`)")
    row = df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(invalid, 1).otherwise(0)).alias("invalid"),
        F.sum(F.when(missing, 1).otherwise(0)).alias("missing"),
    ).collect()[0]
    n_invalid = int(row["invalid"] or 0)
    first: list[tuple[int, str]] = []
    if n_invalid:
        ranked = df.select(
            F.row_number().over(_order_window()).alias("n"),
            F.expr(f"ST_IsValidReason(`{geom}`)").alias("why"),
            invalid.alias("bad"),
        )
        for r in ranked.where("bad").orderBy("n").limit(INVALID_ROWS_SHOWN).collect():
            first.append((int(r["n"]) - 1, str(r["why"])))
    record_input_validity(
        job.ctx,
        key,
        rows=int(row["rows"]),
        invalid_count=n_invalid,
        missing_count=int(row["missing"] or 0),
        invalid=first,
    )
    if refuse and n_invalid:
        raise invalid_input_error(
            job.ctx, key, n_invalid, [n for n, _ in first], [w for _, w in first], join_ops.UNDEFINED_ON_INVALID
        )


def _order_window() -> Any:
    from pyspark.sql import Window

    return Window.orderBy(ROW)


def _write(job: _Job, df: Any, order: list[str], crs_wkt: str) -> None:
    """One GeoParquet file at the runner's temporary path, rows in ``order``, with the input's CRS."""
    from pyproj import CRS

    ctx = job.ctx
    assert ctx.temp_output is not None
    scratch = ctx.temp_output.parent / f".{ctx.temp_output.stem}.spark-{uuid.uuid4().hex[:8]}"
    out = df.repartition(1).sortWithinPartitions(*order).drop(*order)
    try:
        (
            out.write.format("geoparquet")
            .option("geoparquet.crs", CRS.from_wkt(crs_wkt).to_json())
            .mode("errorifexists")
            .save(str(scratch))
        )
        parts = sorted(p for p in scratch.iterdir() if p.name.startswith("part-") and p.suffix == ".parquet")
        if len(parts) != 1:
            raise EngineError(
                f"Spark wrote {len(parts)} part files where one was expected",
                code="SPARK_OUTPUT_UNEXPECTED",
                evidence={"parts": [p.name for p in parts]},
                hint="this is a bug in the Spark engine adapter; run with MAPSMITH_STACK=opensource meanwhile",
            )
        os.replace(parts[0], ctx.temp_output)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _finish(job: _Job) -> None:
    job.ctx.parameters["x-mapsmith:spark_job"] = {
        "master": job.session.master,
        "spark_version": job.spark.version,
        "input_partitions": dict(job.partitions),
        "output_partitions": 1,
        "default_parallelism": job.spark.sparkContext.defaultParallelism,
        "session_start_seconds": job.session.start_seconds,
        "job_seconds": round(time.perf_counter() - job.t0, 3),
        **job.details,
    }
    job.ctx.engine_components["partitions"] = str(max(job.partitions.values(), default=1))
    job.progress(1.0, "written")


def _rows(path: Path, geom: str, arguments: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page of written rows the call's offset/limit ask for, and its ``page`` record."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    _, window = page(range(table.num_rows), arguments)
    frame = table.drop_columns([geom]).slice(window["offset"], window["returned"]).to_pandas()
    return json.loads(frame.to_json(orient="records")), window


def _join_fields_as_long(df: Any, fields: list[str]) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, IntegerType, ShortType

    small = {f.name for f in df.schema.fields if isinstance(f.dataType, (ByteType, IntegerType, ShortType))}
    for name in fields:
        if name in small:
            df = df.withColumn(name, F.col(f"`{name}`").cast("bigint"))
    return df


# -- the operations --------------------------------------------------------------------------------


def spatial_join_spark(ctx: RunContext) -> None:
    from pyspark.sql import functions as F

    from mapsmith.crs import linear_unit_metres, parse_crs
    from mapsmith_opensource import join_ops

    job = _start(ctx)
    job.progress(0.1, "reading input_path and join_path")
    left, lgeom, lfields = _read(job, "input_path")
    right, rgeom, rfields = _read(job, "join_path")
    _check_validity(job, left, lgeom, "input_path", refuse=True)
    _check_validity(job, right, rgeom, "join_path", refuse=True)
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
    suffix = uuid.uuid4().hex[:8]
    lview, rview = f"mapsmith_l_{suffix}", f"mapsmith_r_{suffix}"
    left.createOrReplaceTempView(lview)
    right.createOrReplaceTempView(rview)
    try:
        pairs = job.spark.sql(
            f"SELECT l.{ROW} AS i, r.{ROW} AS j FROM {lview} l JOIN {rview} r ON {condition}"
        ).persist()
        try:
            tally_row = pairs.agg(
                F.count(F.lit(1)).alias("pairs"),
                F.countDistinct("i").alias("left"),
                F.countDistinct("j").alias("right"),
            ).collect()[0]
            renamed = join_ops._rename_clashes([*lfields, lgeom], rfields, join_ops.JOIN_SUFFIX)
            extra = right.select(F.col(ROW).alias("__j"), *[F.col(f"`{f}`").alias(renamed.get(f, f)) for f in rfields])
            extra = _join_fields_as_long(extra, [renamed.get(f, f) for f in rfields])
            how = ctx.arguments["how"]
            joined = left.join(pairs, left[ROW] == pairs["i"], "left" if how == "left" else "inner")
            joined = joined.join(extra, joined["j"] == extra["__j"], "left")
            out = joined.select(
                *[F.col(f"`{c}`") for c in left.columns if c != ROW],
                *[F.col(f"`{renamed.get(f, f)}`") for f in rfields],
                F.col(ROW).alias("__o1"),
                F.col("j").alias("__o2"),
            )
            job.progress(0.6, "writing GeoParquet")
            _write(job, out, ["__o1", "__o2"], ctx.inputs["input_path"].crs_wkt)
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
    _finish(job)
    join_ops._check_written(ctx, tally, ctx.io.inspect(ctx.temp_output, None).feature_count)


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

    job = _start(ctx)
    job.progress(0.1, "reading input_path and points_path")
    polygons, pgeom, pfields = _read(job, "input_path")
    points, tgeom, _ = _read(job, "points_path")
    if value_field is not None:  # the GeoPandas engine's refusals, on a frame with the file's types and no rows
        empty = pq.read_schema(ctx.paths["points_path"]).empty_table().to_pandas()
        join_ops._numeric_field(ctx, empty.drop(columns=[tgeom], errors="ignore"), value_field, "points_path")
    join_ops._refuse_existing(ctx, pd_frame([*pfields, pgeom]), new_fields)
    _check_validity(job, polygons, pgeom, "input_path", refuse=True)
    _check_validity(job, points, tgeom, "points_path", refuse=False)
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt)
    join_ops._record_topological(ctx, crs, "points_path", "points were tested against polygons")
    job.progress(0.3, "finding the points in each polygon with Sedona's spatial join")
    suffix = uuid.uuid4().hex[:8]
    pview, tview = f"mapsmith_p_{suffix}", f"mapsmith_t_{suffix}"
    polygons.createOrReplaceTempView(pview)
    points.createOrReplaceTempView(tview)
    try:
        pairs = job.spark.sql(
            f"SELECT p.{ROW} AS i, t.{ROW} AS j FROM {pview} p JOIN {tview} t "
            f"ON ST_Intersects(p.`{pgeom}`, t.`{tgeom}`)"
        ).persist()
        try:
            stats = pairs.agg(
                F.count(F.lit(1)).alias("pairs"), F.countDistinct("i").alias("polys"), F.countDistinct("j").alias("pts")
            ).collect()[0]
            several = pairs.groupBy("j").count().where("count > 1").count()
            no_geometry = points.where(F.col(f"`{tgeom}`").isNull() | F.expr(f"ST_IsEmpty(`{tgeom}`)")).count()
            keyed, columns = per_polygon(pairs, points)
            out = polygons.join(keyed, polygons[ROW] == keyed["i"], "left").select(
                *[F.col(f"`{c}`") for c in polygons.columns if c != ROW], *columns, F.col(ROW).alias("__o1")
            )
            job.progress(0.6, "writing GeoParquet")
            _write(job, out, ["__o1"], ctx.inputs["input_path"].crs_wkt)
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
        "points_in_several_polygons": int(several),
        "polygons_with_no_points": n_polygons - int(stats["polys"]),
    }
    ctx.parameters["x-mapsmith:boundary_rule"] = join_ops.BOUNDARY_RULE
    ctx.notes.append(
        f"{counted} of {n_points} points lie in at least one polygon; {n_points - counted} lie in none (not "
        f"counted anywhere; {no_geometry} of them have no geometry); {several} lie on a boundary several "
        "polygons share and are counted in each of them"
    )
    _finish(job)
    return counts, int(stats["pairs"]), pgeom


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
    rows, window = _rows(ctx.temp_output, geom, ctx.arguments)
    ctx.answer = {
        **counts,
        "total_point_count": pairs,
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
    rows, window = _rows(ctx.temp_output, geom, ctx.arguments)
    ctx.answer = {
        **counts,
        "field": name,
        "statistics": statistics,
        "boundary_rule": join_ops.BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }


# -- nearest_join ----------------------------------------------------------------------------------
#
# Sedona's ST_KNN join measures from centroids when either side is not points, so it cannot give the
# nearest line or polygon. The nearest is found instead with exact distance joins (ST_DWithin, which
# Sedona plans as a partitioned range join) over a widening radius: a row is settled in the round
# whose radius reaches its nearest distance plus the tie tolerance, so every tied candidate is seen;
# the last round's radius spans both layers' extents, so every input row with a geometry is matched.
NEAREST_RADIUS_GROWTH = 4.0


def nearest_join_eligible(ctx: RunContext) -> str | None:
    return _eligible(ctx, ("input_path", "join_path"))


def _planar_problem(ctx: RunContext) -> str | None:
    """Why input_path's CRS cannot be measured in planar (to_metric would move it), or None."""
    from mapsmith.crs import crs_label, parse_crs
    from mapsmith_opensource.common import MAX_SCALE_DISTORTION, scale_distortion

    info = ctx.inputs["input_path"]
    crs = parse_crs(info.crs_wkt)
    if crs.is_geographic:
        return f"{crs_label(crs)} is geographic (degrees)"
    distortion = scale_distortion(crs, info.bounds_lonlat)
    if distortion is not None and distortion > MAX_SCALE_DISTORTION:
        return f"{crs_label(crs)} distorts distances by {distortion:.1%} at the data's centre"
    return None


def validate_nearest_join(ctx: RunContext) -> None:
    """Before Spark starts: distances are planar here, and distance_m must be a new field."""
    from mapsmith.crs import crs_label, parse_crs
    from mapsmith_opensource import join_ops

    join_ops._refuse_existing(ctx, pd_frame(list(ctx.inputs["input_path"].fields)), ["distance_m"])
    problem = _planar_problem(ctx)
    if problem is not None:
        raise CRSError(
            f"nearest_join on the Spark engine measures in the layer's own CRS, and {problem}, so distance_m "
            "could not be metres on the ground there",
            code="CRS_NOT_PROJECTED",
            evidence={"crs": crs_label(parse_crs(ctx.inputs["input_path"].crs_wkt)), "engine": ENGINE},
            hint="reproject_layer both inputs to a projected CRS true to scale at the data (a UTM zone), or run "
            "with MAPSMITH_STACK=opensource, which measures geodesically on the ellipsoid",
        )


def _search_radii(ctx: RunContext, n_join: int) -> tuple[float, float]:
    """(first radius, last radius) in CRS units: about the join layer's spacing, and the diagonal of
    both layers' common extent, beyond which no pair can be."""
    import math

    boxes = [ctx.inputs[k].bounds for k in ("input_path", "join_path") if ctx.inputs[k].bounds is not None]
    if not boxes:
        return 0.0, 0.0
    x0, y0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
    x1, y1 = max(b[2] for b in boxes), max(b[3] for b in boxes)
    last = math.hypot(x1 - x0, y1 - y0)
    return last / math.sqrt(max(n_join, 1)), last


def _nearest_pairs(job: _Job, left: Any, lgeom: str, right: Any, rgeom: str, limit: float | None) -> Any:
    """One row per matched input row: __i, __j (the nearest join row; ties to the lowest), __d (CRS units)
    and __tied (how many join rows were within the tie tolerance of the nearest)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from mapsmith.crs import linear_unit_metres, parse_crs
    from mapsmith_opensource import join_ops

    ctx = job.ctx
    tolerance = join_ops.TIE_TOLERANCE_METRES / linear_unit_metres(parse_crs(ctx.inputs["input_path"].crs_wkt))
    present = "{0} IS NOT NULL AND NOT ST_IsEmpty({0})"
    lg = left.where(present.format(f"`{lgeom}`")).select(F.col(ROW).alias("__i"), F.col(f"`{lgeom}`").alias("__g"))
    rg = right.where(present.format(f"`{rgeom}`")).select(F.col(ROW).alias("__j"), F.col(f"`{rgeom}`").alias("__g"))
    first, last = _search_radii(ctx, ctx.inputs["join_path"].feature_count or 0)
    last = last * (1 + 1e-9) + 2 * tolerance  # rounding must not keep the farthest pair out
    radius = limit if limit is not None else min(max(first, tolerance * 4), last)
    suffix = uuid.uuid4().hex[:8]
    lview, rview = f"mapsmith_nl_{suffix}", f"mapsmith_nr_{suffix}"
    rg.createOrReplaceTempView(rview)
    found: list[Any] = []
    pending = lg
    rounds = 0
    try:
        while True:
            final = limit is not None or radius >= last
            rounds += 1
            job.progress(min(0.3 + 0.1 * rounds, 0.6), f"distance join, round {rounds}: radius {radius:.6g} CRS units")
            pending.createOrReplaceTempView(lview)
            pairs = job.spark.sql(
                f"SELECT l.__i, r.__j, ST_Distance(l.__g, r.__g) AS __d FROM {lview} l JOIN {rview} r "
                f"ON ST_DWithin(l.__g, r.__g, {radius!r})"
            )
            pairs = pairs.withColumn("__dmin", F.min("__d").over(Window.partitionBy("__i")))
            near = pairs.where(F.col("__d") <= F.col("__dmin") + tolerance)
            if not final:  # a row whose ties may lie just beyond this radius waits for the next round
                near = near.where(F.col("__dmin") <= radius - tolerance)
            chosen = near.groupBy("__i").agg(
                F.min(F.struct("__j", "__d")).alias("__best"), F.count(F.lit(1)).alias("__tied")
            )
            chosen = chosen.select("__i", "__best.__j", "__best.__d", "__tied").localCheckpoint()
            found.append(chosen)
            if final:
                break
            pending = pending.join(chosen.select("__i"), "__i", "left_anti").localCheckpoint()
            if pending.isEmpty():
                break
            radius = min(radius * NEAREST_RADIUS_GROWTH, last)
    finally:
        job.spark.catalog.dropTempView(lview)
        job.spark.catalog.dropTempView(rview)
    job.details["nearest_search"] = {"distance_join_rounds": rounds, "last_radius_crs_units": radius}
    out = found[0]
    for more in found[1:]:
        out = out.unionByName(more)
    return out


def nearest_join_spark(ctx: RunContext) -> None:
    from pyspark.sql import functions as F

    from mapsmith.crs import parse_crs
    from mapsmith_opensource import join_ops
    from mapsmith_opensource.common import to_metric

    job = _start(ctx)
    job.progress(0.1, "reading input_path and join_path")
    left, lgeom, lfields = _read(job, "input_path")
    right, rgeom, rfields = _read(job, "join_path")
    _check_validity(job, left, lgeom, "input_path", refuse=False)
    _check_validity(job, right, rgeom, "join_path", refuse=False)
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt)
    metric = to_metric(ctx, join_ops._CrsOnly(crs), "measured for nearest neighbours")
    n_left = ctx.inputs["input_path"].feature_count or 0
    n_join = ctx.inputs["join_path"].feature_count or 0
    join_ops._record_planar(ctx, metric, n_left)
    max_m = ctx.arguments.get("max_distance_meters")
    limit = metric.units(max_m) if max_m is not None else None
    unit_m = metric.metres_per_unit
    chosen = _nearest_pairs(job, left, lgeom, right, rgeom, limit).persist()
    try:
        stats = chosen.agg(
            F.count(F.lit(1)).alias("matched"),
            F.sum(F.when(F.col("__tied") > 1, 1).otherwise(0)).alias("tied"),
            F.countDistinct("__j").alias("used"),
            (F.min("__d") * unit_m).alias("min"),
            (F.max("__d") * unit_m).alias("max"),
            (F.avg("__d") * unit_m).alias("mean"),
        ).collect()[0]
        renamed = join_ops._rename_clashes([*lfields, lgeom], rfields, join_ops.JOIN_SUFFIX)
        extra = right.select(F.col(ROW).alias("__jj"), *[F.col(f"`{f}`").alias(renamed.get(f, f)) for f in rfields])
        extra = _join_fields_as_long(extra, [renamed.get(f, f) for f in rfields])
        joined = left.join(chosen, left[ROW] == chosen["__i"], "left")
        joined = joined.join(extra, joined["__j"] == extra["__jj"], "left")
        out = joined.select(
            *[F.col(f"`{c}`") for c in left.columns if c != ROW],
            *[F.col(f"`{renamed.get(f, f)}`") for f in rfields],
            (F.col("__d") * unit_m).cast("double").alias("distance_m"),
            F.col(ROW).alias("__o1"),
        )
        job.progress(0.7, "writing GeoParquet")
        _write(job, out, ["__o1"], ctx.inputs["input_path"].crs_wkt)
    finally:
        chosen.unpersist()
    matched, tied = int(stats["matched"]), int(stats["tied"] or 0)
    unmatched = n_left - matched
    counts = {
        "input_features": n_left,
        "join_features": n_join,
        "input_features_matched": matched,
        "input_features_unmatched": unmatched,
        "input_features_with_tied_nearest": tied,
        "join_features_used": int(stats["used"]),
    }
    if max_m is not None:
        counts["nearest_beyond_max_distance"] = 0  # planar: the search itself stops at max_distance_meters
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    ctx.parameters["x-mapsmith:tie_rule"] = join_ops.TIE_RULE
    why_unmatched = (
        f"no join feature within {max_m} m, or no geometry" if max_m is not None else "no geometry, or no join features"
    )
    ctx.notes.append(
        f"{matched} of {n_left} input features got their nearest join feature; {unmatched} got none "
        f"({why_unmatched}) and were kept with empty join fields and distance_m; {tied} had several equally "
        "near join features (" + join_ops.TIE_RULE + ")" + (f"; join fields renamed: {renamed}" if renamed else "")
    )
    ctx.notes.append(
        "nearest found on Spark with exact distance joins over a widening radius (Sedona's ST_KNN join measures "
        "from centroids for lines and polygons, so it is not used); see nearest_search in x-mapsmith:spark_job"
    )
    low = float(stats["min"]) if matched else 0.0
    high = float(stats["max"]) if matched else 0.0
    bound = max_m if max_m is not None else float("inf")
    ctx.check(
        "values_in_expected_range",
        not matched or (low >= 0 and high <= bound),
        f"{matched} distances, between {low:.3f} and {high:.3f} m; allowed 0 to {bound} m",
    )
    ctx.answer = {
        **counts,
        "distance_method": ctx.parameters["x-mapsmith:distance_method"],
        "tie_rule": join_ops.TIE_RULE,
        "distance_m": {
            "min": float(stats["min"]) if matched else None,
            "max": float(stats["max"]) if matched else None,
            "mean": float(stats["mean"]) if matched else None,
        },
        "renamed_fields": renamed,
    }
    _finish(job)


# -- dissolve_layer --------------------------------------------------------------------------------


def dissolve_eligible(ctx: RunContext) -> str | None:
    suffix = ctx.output_path.suffix.lower() if ctx.output_path else ""
    if suffix not in OUTPUT_SUFFIXES:
        return (
            f"the Spark engine writes GeoParquet only, not {suffix or '(no extension)'}; choose an output_path "
            "ending in .parquet (convert_format can turn it into another format afterwards)"
        )
    return _geoparquet_problem(ctx, ("input_path",))


def _dissolve_plan(ctx: RunContext) -> tuple[list[str], dict[str, str]]:
    """The GeoPandas engine's argument and field refusals (overlay_ops), in the same order: the keys and
    the declared aggregations."""
    from mapsmith_opensource import overlay_ops

    return overlay_ops.dissolve_plan(ctx)


def validate_dissolve(ctx: RunContext) -> None:
    _dissolve_plan(ctx)


def _no_nan(df: Any, names: list[str]) -> Any:
    """Float NaN read as null, as pandas (and so the GeoPandas engine) reads it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    floats = {f.name for f in df.schema.fields if isinstance(f.dataType, (DoubleType, FloatType))}
    for name in names:
        if name in floats:
            col = F.col(f"`{name}`")
            df = df.withColumn(name, F.when(F.isnan(col), F.lit(None)).otherwise(col))
    return df


def dissolve_layer_spark(ctx: RunContext) -> None:
    """overlay_ops.dissolve_layer on Spark: one row per distinct key combination (a null key is a value of
    its own), sorted by the keys with nulls last; geometries unioned with ST_Union_Aggr; the declared
    aggregations with nulls skipped (first/last: the first/last non-null value in input order)."""
    from pyspark.sql import functions as F

    from mapsmith.errors import InputError
    from mapsmith_opensource import overlay_ops

    keys, declared = _dissolve_plan(ctx)
    info = ctx.inputs["input_path"]
    fields = list(info.fields)
    job = _start(ctx)
    job.progress(0.1, "reading input_path")
    df, geom, _ = _read(job, "input_path")
    _check_validity(job, df, geom, "input_path", refuse=True)
    df = _no_nan(df, [*keys, *declared])
    null_keys = ctx.arguments["null_keys"]
    n_rows = info.feature_count or 0
    null_count = 0
    if keys:
        null_mask = F.lit(False)
        for k in keys:
            null_mask = null_mask | F.col(f"`{k}`").isNull()
        tallies = df.agg(
            F.sum(F.when(null_mask, 1).otherwise(0)).alias("__any"),
            *[F.sum(F.when(F.col(f"`{k}`").isNull(), 1).otherwise(0)).alias(k) for k in keys],
        ).collect()[0]
        null_count = int(tallies["__any"] or 0)
        if null_count and null_keys == "refuse":
            by_field = {k: int(tallies[k]) for k in keys if tallies[k]}
            ranked = df.select(F.row_number().over(_order_window()).alias("n"), null_mask.alias("bad"))
            first_rows = [int(r["n"]) - 1 for r in ranked.where("bad").orderBy("n").limit(10).collect()]
            raise InputError(
                f"{null_count} features have a null key ({', '.join(f'{k}: {n}' for k, n in by_field.items())}) "
                "and null_keys is 'refuse'",
                code="NULL_GROUP_KEY",
                evidence={"null_key_features": null_count, "by_field": by_field, "first_rows": first_rows},
                hint="fill the null keys first, or pass null_keys='group' to dissolve them into a group of their own",
            )
        expected = df.select(*[F.col(f"`{k}`") for k in keys]).distinct().count()
    else:
        expected = min(n_rows, 1)
    dropped = [f for f in fields if f not in keys and f not in declared]

    job.progress(0.3, "dissolving with ST_Union_Aggr" + (f" grouped by {', '.join(keys)}" if keys else ""))
    g = f"`{geom}`"
    union = F.expr(f"ST_Union_Aggr({g}) FILTER (WHERE {g} IS NOT NULL AND NOT ST_IsEmpty({g}))").alias("__u")
    by_row = F.col(ROW)

    def aggregate(name: str, function: str) -> Any:
        col = F.col(f"`{name}`")
        present_row = F.when(col.isNotNull(), by_row)
        return {
            "sum": F.sum(col),
            "mean": F.avg(col),
            "median": F.median(col),
            "min": F.min(col),
            "max": F.max(col),
            "first": F.min_by(col, present_row),
            "last": F.max_by(col, present_row),
            "count": F.count(col),
        }[function].alias(name)

    columns = [union, *[aggregate(n, f) for n, f in declared.items()], F.count(F.lit(1)).alias("__n")]
    grouped = df.groupBy(*[F.col(f"`{k}`") for k in keys]).agg(*columns) if keys else df.agg(*columns)
    grouped = grouped.where(F.col("__n") > 0)  # a layer with no features dissolves into no group
    order = [F.col(f"`{k}`").asc_nulls_last() for k in keys]
    grouped = (
        grouped.withColumn("__order", F.row_number().over(_window_by(order)))
        if keys
        else grouped.withColumn("__order", F.lit(1))
    )
    grouped = grouped.persist()
    try:
        empty_geometry = F.col("__u").isNull() | F.expr("ST_IsEmpty(__u)")
        out = grouped.select(
            *[F.col(f"`{k}`") for k in keys],
            *[F.col(f"`{n}`") for n in declared],
            F.when(empty_geometry, F.lit(None)).otherwise(F.col("__u")).alias(geom),
            F.col("__order"),
        )
        no_geometry = grouped.where(empty_geometry).count()
        # Only the requested page's group sizes travel back from Spark; __order counts groups from 1.
        first, per_page = page_window(ctx.arguments)
        in_page = (F.col("__order") > first) & (F.col("__order") <= first + per_page)
        sizes = [int(r["__n"]) for r in grouped.where(in_page).orderBy("__order").select("__n").collect()]
        job.progress(0.6, "writing GeoParquet")
        _write(job, out, ["__order"], info.crs_wkt)
    finally:
        grouped.unpersist()
    if no_geometry:
        ctx.notes.append(f"{no_geometry} groups have no geometry (all their features had none): written without one")
    ctx.parameters["x-mapsmith:fields_dropped"] = dropped
    ctx.parameters["x-mapsmith:null_key_features"] = null_count
    written = overlay_ops._check_count(
        ctx,
        expected,
        f"the distinct combinations of {', '.join(keys)} in the input, counted before the dissolve"
        if keys
        else "one group for the whole layer",
    )
    overlay_ops.dissolve_notes(
        ctx, keys, n_rows, written, "Sedona's ST_Union_Aggr on Spark", declared, dropped, null_count
    )
    assert ctx.temp_output is not None
    rows, window = _rows(ctx.temp_output, geom, ctx.arguments)
    for row, n in zip(rows, sizes, strict=False):
        row["feature_count"] = n
    ctx.answer = {
        "group_count": written,
        "by_fields": keys,
        "aggregations": declared,
        "fields_dropped": dropped,
        "null_key_features": null_count,
        "groups": rows,
        "page": window,
    }
    _finish(job)


def _window_by(order: list[Any]) -> Any:
    from pyspark.sql import Window

    return Window.orderBy(*order)


# -- overlay_layers --------------------------------------------------------------------------------
#
# Every mode is built from three kinds of piece, in geopandas.overlay's order: the intersection of each
# intersecting pair (input_path order, then overlay_path order); each input_path polygon minus the union of
# the overlay polygons it intersects; each overlay_path polygon minus the union of the input polygons it
# intersects (geopandas subtracts them one by one: the same point set; empty differences are dropped).
OVERLAY_PARTS = {
    "intersection": ("intersection",),
    "difference": ("input_minus_overlay",),
    "identity": ("intersection", "input_minus_overlay"),
    "symmetric_difference": ("input_minus_overlay", "overlay_minus_input"),
    "union": ("intersection", "input_minus_overlay", "overlay_minus_input"),
}


def overlay_eligible(ctx: RunContext) -> str | None:
    return _eligible(ctx, ("input_path", "overlay_path"))


def _overlay_fields(ctx: RunContext, how: str) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """input_path's and overlay_path's fields and the renames of the shared ones: overlay_ops' rules."""
    from mapsmith_opensource import overlay_ops

    left_fields = list(ctx.inputs["input_path"].fields)
    right_fields = list(ctx.inputs["overlay_path"].fields)
    renamed, _ = overlay_ops.overlay_fields(how, left_fields, right_fields)
    return left_fields, right_fields, renamed


def validate_overlay(ctx: RunContext) -> None:
    """Before Spark starts: overlay_ops' field rules (every mode of the contract runs here)."""
    _overlay_fields(ctx, ctx.arguments["how"])


def _polygonal(df: Any) -> Any:
    """overlay_ops' keep_geom_type made explicit, per piece in column __g: polygons kept as they are, the
    polygonal parts of a collection unioned, and every lower-dimension part counted in __fragments."""
    from pyspark.sql import functions as F

    kind = F.expr("GeometryType(__g)")
    polygon = kind.isin("POLYGON", "MULTIPOLYGON")
    n_polygons = F.expr("ST_NumGeometries(ST_CollectionExtract(__g, 3))")
    n_parts = F.expr("size(ST_Dump(__g))")
    kept = (
        F.when(polygon, F.col("__g"))
        .when(n_polygons == 0, F.lit(None))
        .when(n_polygons == 1, F.expr("ST_GeometryN(ST_CollectionExtract(__g, 3), 0)"))
        .otherwise(F.expr("ST_UnaryUnion(ST_CollectionExtract(__g, 3))"))
    )
    return df.withColumn("__fragments", F.when(polygon, 0).otherwise(n_parts - n_polygons)).withColumn("__g", kept)


def overlay_layers_spark(ctx: RunContext) -> None:
    from pyspark.sql import functions as F

    from mapsmith.crs import crs_label, parse_crs
    from mapsmith_opensource import overlay_ops

    how = ctx.arguments["how"]
    left_fields, right_fields, renamed = _overlay_fields(ctx, how)
    job = _start(ctx)
    job.progress(0.1, "reading input_path and overlay_path")
    left, lgeom, _ = _read(job, "input_path")
    right, rgeom, _ = _read(job, "overlay_path")
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs),
            "reason": "overlaid in input_path's CRS (planar: edges are straight lines in its coordinates), so the "
            "input's coordinates are written unchanged",
        }
    )
    _check_validity(job, left, lgeom, "input_path", refuse=True)
    _check_validity(job, right, rgeom, "overlay_path", refuse=True)
    without_geometry: dict[str, int] = {}
    frames = {}
    for key, frame, geom in (("input_path", left, lgeom), ("overlay_path", right, rgeom)):
        missing = F.col(f"`{geom}`").isNull() | F.expr(f"ST_IsEmpty(`{geom}`)")
        n_missing = frame.where(missing).count()
        if n_missing:
            without_geometry[key] = n_missing
            ctx.notes.append(
                f"{key}: {n_missing} features have no geometry (null or empty) and take no part in the overlay"
            )
        frames[key] = frame.where(~missing)
    left_names = {n: (n + overlay_ops.OVERLAY_SUFFIXES[0] if n in renamed else n) for n in left_fields}
    right_names = {n: (n + overlay_ops.OVERLAY_SUFFIXES[1] if n in renamed else n) for n in right_fields}
    lsel = frames["input_path"].select(
        F.col(ROW).alias("__i"),
        F.col(f"`{lgeom}`").alias("__lg"),
        *[F.col(f"`{n}`").alias(left_names[n]) for n in left_fields],
    )
    rsel = frames["overlay_path"].select(
        F.col(ROW).alias("__j"),
        F.col(f"`{rgeom}`").alias("__rg"),
        *[F.col(f"`{n}`").alias(right_names[n]) for n in right_fields],
    )
    suffix = uuid.uuid4().hex[:8]
    lview, rview = f"mapsmith_ol_{suffix}", f"mapsmith_or_{suffix}"
    lsel.createOrReplaceTempView(lview)
    rsel.createOrReplaceTempView(rview)
    job.progress(0.3, f"overlay ({how}): pairing polygons with Sedona's spatial join")
    try:
        pairs = job.spark.sql(
            f"SELECT l.*, r.* FROM {lview} l JOIN {rview} r ON ST_Intersects(l.__lg, r.__rg)"
        ).persist()
        try:
            left_out = [F.col(f"`{left_names[n]}`") for n in left_fields]
            right_out = [F.col(f"`{right_names[n]}`") for n in right_fields]
            left_null = [
                F.lit(None).cast(lsel.schema[left_names[n]].dataType).alias(left_names[n]) for n in left_fields
            ]
            right_null = [
                F.lit(None).cast(rsel.schema[right_names[n]].dataType).alias(right_names[n]) for n in right_fields
            ]
            parts = OVERLAY_PARTS[how]
            pieces = []
            if "intersection" in parts:
                pieces.append(
                    pairs.select(
                        *left_out,
                        *right_out,
                        F.expr("ST_Intersection(__lg, __rg)").alias("__g"),
                        F.lit(parts.index("intersection")).alias("__o0"),
                        F.col("__i").alias("__o1"),
                        F.col("__j").alias("__o2"),
                    )
                )
            if "input_minus_overlay" in parts:
                unions = pairs.groupBy("__i").agg(F.expr("ST_Union_Aggr(__rg)").alias("__u"))
                diff = lsel.join(unions, "__i", "left").select(
                    *left_out,
                    *(right_null if how != "difference" else []),
                    F.when(F.col("__u").isNull(), F.col("__lg"))
                    .otherwise(F.expr("ST_Difference(__lg, __u)"))
                    .alias("__g"),
                    F.lit(parts.index("input_minus_overlay")).alias("__o0"),
                    F.col("__i").alias("__o1"),
                    F.lit(0).cast("bigint").alias("__o2"),
                )
                pieces.append(diff.where("NOT ST_IsEmpty(__g)"))  # geopandas drops empty differences
            if "overlay_minus_input" in parts:
                unions = pairs.groupBy("__j").agg(F.expr("ST_Union_Aggr(__lg)").alias("__u"))
                diff = rsel.join(unions, "__j", "left").select(
                    *left_null,
                    *right_out,
                    F.when(F.col("__u").isNull(), F.col("__rg"))
                    .otherwise(F.expr("ST_Difference(__rg, __u)"))
                    .alias("__g"),
                    F.lit(parts.index("overlay_minus_input")).alias("__o0"),
                    F.col("__j").alias("__o1"),
                    F.lit(0).cast("bigint").alias("__o2"),
                )
                pieces.append(diff.where("NOT ST_IsEmpty(__g)"))
            result = pieces[0]
            for more in pieces[1:]:
                result = result.unionByName(more)
            if len(parts) > 1:  # fields that now hold nulls are written 64-bit, as GeoPandas' Int64 writes them
                result = _join_fields_as_long(result, list(result.columns))
            result = _polygonal(result).persist()
            try:
                tally = result.agg(
                    F.count(F.lit(1)).alias("pieces"),
                    F.sum("__fragments").alias("fragments"),
                    F.sum(F.when(F.col("__g").isNull(), 1).otherwise(0)).alias("no_area"),
                ).collect()[0]
                names = [left_names[n] for n in left_fields] + (
                    [right_names[n] for n in right_fields] if how != "difference" else []
                )
                out = result.where(F.col("__g").isNotNull()).select(
                    *[F.col(f"`{n}`") for n in names], F.col("__g").alias("geometry"), "__o0", "__o1", "__o2"
                )
                job.progress(0.6, "writing GeoParquet")
                _write(job, out, ["__o0", "__o1", "__o2"], ctx.inputs["input_path"].crs_wkt)
            finally:
                result.unpersist()
        finally:
            pairs.unpersist()
    finally:
        job.spark.catalog.dropTempView(lview)
        job.spark.catalog.dropTempView(rview)
    pieces_n, fragments, no_area = int(tally["pieces"]), int(tally["fragments"] or 0), int(tally["no_area"] or 0)
    written = pieces_n - no_area
    ctx.parameters["x-mapsmith:lower_dimension_fragments_dropped"] = fragments
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    ctx.notes.append(
        f"overlay how={how!r} on Spark (Sedona ST_Intersection / ST_Difference on the pairs its spatial join "
        f"found) gave {pieces_n} pieces; MapSmith kept the polygonal part of each: {written} written, {no_area} had "
        f"no area at all (where the layers only touch), {fragments} lower-dimension fragments (lines along shared "
        "edges, points at touching corners) were dropped"
    )
    if renamed:
        ctx.notes.append(
            "fields in both layers were renamed: "
            + ", ".join(f"{k} -> {v[0]} (input_path), {v[1]} (overlay_path)" for k, v in renamed.items())
        )
    ctx.answer = {
        "how": how,
        "feature_count": written,
        "lower_dimension_fragments_dropped": fragments,
        "pieces_without_area_dropped": no_area,
        "renamed_fields": renamed,
        "input_features_without_geometry": without_geometry,
    }
    _finish(job)


# -- registration ----------------------------------------------------------------------------------

# operation -> (implementation, eligible, validate): what mapsmith_sedona registers on the sedona stack.
SPARK_OPERATIONS: dict[str, tuple[str, str, str | None]] = {
    "spatial_join": ("spatial_join_spark", "spatial_join_eligible", "validate_spatial_join"),
    "count_in_polygons": ("count_in_polygons_spark", "points_in_polygons_eligible", None),
    "summarize_points_in_polygons": (
        "summarize_points_in_polygons_spark",
        "points_in_polygons_eligible",
        "validate_summarize_points",
    ),
    "nearest_join": ("nearest_join_spark", "nearest_join_eligible", "validate_nearest_join"),
    "dissolve_layer": ("dissolve_layer_spark", "dissolve_eligible", "validate_dissolve"),
    "overlay_layers": ("overlay_layers_spark", "overlay_eligible", "validate_overlay"),
}


def register_operations(register: Any, requirement: Callable[[], Any], only: tuple[str, ...] | None = None) -> None:
    """Register the Spark engine of every operation in SPARK_OPERATIONS (or of ``only`` those)."""
    from mapsmith_sedona import STACK

    here = globals()
    for operation, (function, eligible, validate) in SPARK_OPERATIONS.items():
        if only is not None and operation not in only:
            continue
        register(
            here[function],
            operation=operation,
            stack=STACK,
            engine=ENGINE,
            eligible=here[eligible],
            requirement=requirement,
            validate=here[validate] if validate else None,
        )
