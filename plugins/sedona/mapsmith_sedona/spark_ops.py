"""MapSmith's point-and-polygon joins as Spark jobs with Apache Sedona SQL (``MAPSMITH_STACK=sedona``).

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
GeoPandas engine transforms one; here, reproject first). within_distance runs only in a projected
CRS true to scale at the data; a geographic CRS is refused with CRS_NOT_PROJECTED.

This module imports pyspark only inside the functions that run a job.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import CRSError, EngineError

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
MAX_ANSWER_ROWS = 200


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
    }
    job.ctx.engine_components["partitions"] = str(max(job.partitions.values(), default=1))
    job.progress(1.0, "written")


def _rows(path: Path, geom: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    frame = table.drop_columns([geom]).slice(0, MAX_ANSWER_ROWS).to_pandas()
    return json.loads(frame.to_json(orient="records"))


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
    ctx.answer = {
        **counts,
        "total_point_count": pairs,
        "boundary_rule": join_ops.BOUNDARY_RULE,
        "rows": _rows(ctx.temp_output, geom),
        "rows_truncated": counts["polygons"] > MAX_ANSWER_ROWS,
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
    ctx.answer = {
        **counts,
        "field": name,
        "statistics": statistics,
        "boundary_rule": join_ops.BOUNDARY_RULE,
        "rows": _rows(ctx.temp_output, geom),
        "rows_truncated": counts["polygons"] > MAX_ANSWER_ROWS,
    }
