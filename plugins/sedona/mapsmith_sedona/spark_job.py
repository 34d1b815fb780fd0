"""The machinery every Spark operation of the sedona stack shares: eligibility, one job's session and record.

Reading a GeoParquet input -- a file, or a folder of parts (spark_parts) -- with an order key (input order
survives Spark's shuffles), the validity record and refusal the GeoPandas engine makes (a points layer's
counted by DuckDB, as GEOS counts them: Sedona reads a point with a NaN coordinate as empty), writing one
GeoParquet file, or a folder of parts when output_path ends in ``.parquet/``, at the runner's temporary path
with the input's CRS, the ``x-mapsmith:spark_job`` and ``x-mapsmith:spark_cluster`` records, and the page
of rows an answer lists.
spark_ops (the joins), spark_dissolve and spark_overlay build on it. What it must never do: import
pyspark at module level (the server's start-up stays fast), or write anywhere but the runner's
temporary path.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import EngineError
from mapsmith.paging import page

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

ENGINE = "apache-sedona-spark"
ROW = "__mapsmith_row"  # an order key added to every input: input order, then join order
OUTPUT_SUFFIXES = (".parquet", ".geoparquet")


# -- eligibility and validation: before Spark starts ----------------------------------------------


def geoparquet_problem(ctx: RunContext, keys: tuple[str, ...]) -> str | None:
    from mapsmith import parts
    from mapsmith_opensource import io

    for key in keys:
        if ctx.inputs[key].driver == parts.FOLDER_DRIVER:
            continue  # a folder of GeoParquet parts: read part by part
        if not io.is_parquet(ctx.paths[key]):
            return (
                f"{key} is not GeoParquet ({ctx.inputs[key].driver}); the Spark engine reads GeoParquet files only: "
                "convert_format it to .parquet first"
            )
    return None


def pair_eligible(ctx: RunContext, keys: tuple[str, str]) -> str | None:
    from pyproj import CRS

    suffix = ctx.output_path.suffix.lower() if ctx.output_path else ""
    if suffix not in OUTPUT_SUFFIXES:
        return (
            f"the Spark engine writes GeoParquet only, not {suffix or '(no extension)'}; choose an output_path "
            "ending in .parquet (convert_format can turn it into another format afterwards)"
        )
    problem = geoparquet_problem(ctx, keys)
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


# -- Spark work ------------------------------------------------------------------------------------


@dataclass
class Job:
    """One run's Spark handles and what it records."""

    ctx: RunContext
    spark: Any
    session: Any
    t0: float
    partitions: dict[str, int]
    details: dict[str, Any] = field(default_factory=dict)  # what this operation adds to x-mapsmith:spark_job
    output_parts: int = 1  # parts written: 1 for a file
    started_here: bool = False  # this run started the process's session (and paid its start)

    def progress(self, fraction: float, message: str) -> None:
        if self.ctx.progress is not None:
            try:
                self.ctx.progress(fraction, message)
            except Exception:  # a client that went away must not fail the run
                pass


def start_job(ctx: RunContext) -> Job:
    from importlib import metadata

    from mapsmith_sedona import engine_versions
    from mapsmith_sedona.jars import ARTIFACTS, GEOTOOLS_WRAPPER_VERSION, SCALA_VERSION, SEDONA_VERSION
    from mapsmith_sedona.spark_session import get_session, master_of, running

    fresh = running() is None
    if ctx.progress is not None and fresh:
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
    return Job(ctx, spark, session, t0, {}, started_here=fresh)


def geometry_column(path: Path) -> str:
    import pyarrow.parquet as pq

    from mapsmith_sedona.spark_parts import first_part

    meta = pq.read_schema(first_part(path)).metadata or {}
    geo = json.loads(meta.get(b"geo", b"{}") or b"{}")
    return str(geo.get("primary_column") or "geometry")


def read_layer(job: Job, key: str) -> tuple[Any, str, list[str]]:
    """The input as a DataFrame with an order key; its geometry column and attribute fields."""
    from pyspark.sql import functions as F

    from mapsmith_sedona.spark_parts import is_folder, read_folder

    path = job.ctx.paths[key]
    geom = geometry_column(path)
    if is_folder(path):
        df = read_folder(job.spark, path, ROW)
    else:
        df = job.spark.read.format("geoparquet").load(str(path))
        # A single file's splits are numbered in file order, so this id orders rows as the file does.
        df = df.withColumn(ROW, F.monotonically_increasing_id())
    job.partitions[key] = df.rdd.getNumPartitions()
    fields = [c for c in df.columns if c not in (geom, ROW)]
    return df, geom, fields


def check_validity(job: Job, df: Any, geom: str, key: str, *, refuse: bool) -> int:
    """The GeoPandas engine's validity record (and refusal); returns how many geometries are null or empty.

    Points are counted by layer_facts, as the GeoPandas engine's GEOS counts them (``_point_facts``): Sedona reads a
    point with a NaN coordinate as an empty point, valid, where GEOS calls it invalid, so Spark's own count passed
    such a layer with no warning. It is also cheaper: the header read has usually counted them already, and on
    10,000,000 points in 3 parts on the two-worker cluster Spark's pass took 11.8 s of a spatial_join's 106 s of
    Spark stages. Other geometries are counted by Spark."""
    from pyspark.sql import functions as F

    from mapsmith_opensource import join_ops
    from mapsmith_opensource.common import INVALID_ROWS_SHOWN, invalid_input_error, record_input_validity
    from mapsmith_opensource.join_ops.points_in_polygons_sql import first_invalid_points

    path = job.ctx.paths[key]
    counted = _point_facts(job.ctx, key)
    if counted is not None:
        first = first_invalid_points(path, geom, INVALID_ROWS_SHOWN) if counted.invalid else []
        record_input_validity(
            job.ctx, key, rows=counted.rows, invalid_count=counted.invalid, missing_count=counted.missing, invalid=first
        )
        job.ctx.notes.append(
            f"{key}: its points' validity and the null or empty ones were counted over the same unchanged files by "
            "layer_facts (DuckDB, or shapely where DuckDB cannot read them), as GEOS counts them, not by Spark "
            "(Sedona reads a point with a NaN coordinate as an empty point)"
        )
        if refuse and counted.invalid:
            raise invalid_input_error(
                job.ctx,
                key,
                counted.invalid,
                [n for n, _ in first],
                [w for _, w in first],
                join_ops.UNDEFINED_ON_INVALID,
            )
        return counted.missing
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
            F.row_number().over(order_window()).alias("n"),
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
    return int(row["missing"] or 0)


def _point_facts(ctx: RunContext, key: str) -> Any:
    """The input's facts, validity counted as GEOS counts it, when its footers declare points only: those the
    header read kept (layer_facts.counted_facts), or one scan now (DuckDB; for a file DuckDB cannot read,
    layer_facts' shapely stream). None for other types, or a folder DuckDB cannot read: Spark then counts."""
    from mapsmith import parts
    from mapsmith_opensource.layer_facts import CHEAP_VALIDITY, counted_facts, duckdb_parts_scan, scan_facts

    path = ctx.paths[key]
    types = set(ctx.inputs[key].geometry_types)
    if not types or not types <= CHEAP_VALIDITY:
        return None
    kept = counted_facts(path)
    if kept is not None:
        return kept
    if path.is_dir():
        duckdb_parts_scan(parts.part_files(path), geometry_column(path), True)  # kept when DuckDB read them
        return counted_facts(path)
    return scan_facts(path, validity=True)


def order_window() -> Any:
    from pyspark.sql import Window

    return Window.orderBy(ROW)


def write_geoparquet(job: Job, df: Any, order: list[str], crs_wkt: str) -> None:
    """One GeoParquet file at the runner's temporary path, rows in ``order``, with the input's CRS; or,
    when output_path ends in ``.parquet/``, a folder of parts there whose listing order is that order."""
    from pyproj import CRS

    from mapsmith_sedona.spark_parts import wants_folder, write_parts

    ctx = job.ctx
    assert ctx.temp_output is not None
    if wants_folder(ctx.arguments):
        # As many parts as tasks read the largest input (at least one per core): each executor writes its own.
        wanted = max([*job.partitions.values(), job.spark.sparkContext.defaultParallelism])
        job.output_parts = write_parts(df, order, ctx.temp_output, CRS.from_wkt(crs_wkt).to_json(), wanted)
        return
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


def finish_job(job: Job) -> None:
    from mapsmith_sedona import spark_executors
    from mapsmith_sedona.jars import SEDONA_VERSION

    cluster = spark_executors.describe(job.spark, job.session.master, SEDONA_VERSION)
    job.ctx.parameters["x-mapsmith:spark_cluster"] = cluster
    job.ctx.engine_components["spark_master"] = cluster["master"]
    job.ctx.engine_components["spark_application"] = str(cluster["application_id"])
    job.ctx.parameters["x-mapsmith:spark_job"] = {
        "master": cluster["master"],
        "spark_version": job.spark.version,
        "input_partitions": dict(job.partitions),
        "output_partitions": job.output_parts,
        "default_parallelism": job.spark.sparkContext.defaultParallelism,
        "session_start_seconds": job.session.start_seconds,
        # who paid those seconds: this run, an earlier one of the process, or the warm-up (MAPSMITH_SPARK_WARM=1)
        "session_started_by": _started_by(job),
        "executor_wait_seconds": job.session.executor_wait_seconds,
        "job_seconds": round(time.perf_counter() - job.t0, 3),
        **job.details,
    }
    job.ctx.engine_components["partitions"] = str(max(job.partitions.values(), default=1))
    job.progress(1.0, "written")


def _started_by(job: Job) -> str:
    """Who started the session: the warm-up (a run that came while it was starting waited for the rest of it), this
    run, or an earlier run of the process."""
    if job.session.started_by != "a run":
        return str(job.session.started_by)
    return "this run" if job.started_here else "an earlier run"


def page_rows(path: Path, geom: str, arguments: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page of written rows the call's offset/limit ask for, and its ``page`` record (a folder's rows
    in listing order); only the page's rows are read, without geometries."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mapsmith_sedona.spark_parts import is_folder

    files = _parts_of(path) if is_folder(path) else [path]
    counts = [pq.read_metadata(f).num_rows for f in files]
    _, window = page(range(sum(counts)), arguments)
    start, stop, pieces, seen = window["offset"], window["offset"] + window["returned"], [], 0
    for file, n in zip(files, counts, strict=True):
        if seen < stop and seen + n > start:
            columns = [c for c in pq.read_schema(file).names if c != geom]
            table = pq.read_table(file, columns=columns)
            pieces.append(table.slice(max(start - seen, 0), min(stop, seen + n) - max(start, seen)))
        seen += n
    if not pieces:
        return [], window
    frame = pa.concat_tables(pieces).to_pandas()
    return json.loads(frame.to_json(orient="records")), window


def _parts_of(path: Path) -> list[Path]:
    from mapsmith import parts

    return parts.part_files(path)


def written_rows(path: Path) -> int:
    """Rows written at ``path`` (a file or a folder of parts), from the Parquet footers."""
    import pyarrow.parquet as pq

    from mapsmith_sedona.spark_parts import is_folder

    return sum(pq.read_metadata(f).num_rows for f in (_parts_of(path) if is_folder(path) else [path]))


def fields_as_long(df: Any, fields: list[str]) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, IntegerType, ShortType

    small = {f.name for f in df.schema.fields if isinstance(f.dataType, (ByteType, IntegerType, ShortType))}
    for name in fields:
        if name in small:
            df = df.withColumn(name, F.col(f"`{name}`").cast("bigint"))
    return df


def window_by(order: list[Any]) -> Any:
    from pyspark.sql import Window

    return Window.orderBy(*order)
