"""dissolve_layer as a Spark job with Apache Sedona SQL: the GeoPandas engine's dissolve, group by group.

The arguments, refusals, notes and the warning on a plain mean of a rate are dissolve_ops' own functions,
called rather than copied; the groups, the union (ST_Union_Aggr) and every aggregation are computed by
Spark: the weighted mean as sum(x*w)/sum(w) and the ratio as sum(a)/sum(b) over the rows where both
fields are non-null, null where nothing is left or the weights sum to 0 -- the rule of
mapsmith_opensource.aggregation, with the same refusal of a negative or infinite weight (WEIGHT_INVALID).
Sums of floating-point numbers may add in another order than numpy's, so the last bits of a weighted value
can differ from the GeoPandas engine's on large groups. What it must never do: write a group's value that
the GeoPandas engine would write null (or the reverse), or aggregate a field the caller did not declare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.paging import page_window
from mapsmith_sedona.spark_job import (
    OUTPUT_SUFFIXES,
    ROW,
    check_validity,
    finish_job,
    geoparquet_problem,
    order_window,
    page_rows,
    read_layer,
    start_job,
    window_by,
    write_geoparquet,
)

if TYPE_CHECKING:
    from mapsmith.runner import RunContext
    from mapsmith_opensource.dissolve_ops import Aggregation

# How many offending rows a WEIGHT_INVALID refusal lists, as aggregation.py does.
BAD_ROWS_SHOWN = 10


def dissolve_eligible(ctx: RunContext) -> str | None:
    suffix = ctx.output_path.suffix.lower() if ctx.output_path else ""
    if suffix not in OUTPUT_SUFFIXES:
        return (
            f"the Spark engine writes GeoParquet only, not {suffix or '(no extension)'}; choose an output_path "
            "ending in .parquet (convert_format can turn it into another format afterwards)"
        )
    return geoparquet_problem(ctx, ("input_path",))


def _dissolve_plan(ctx: RunContext) -> tuple[list[str], dict[str, Aggregation]]:
    """The GeoPandas engine's argument and field refusals (dissolve_ops), in the same order: the keys and
    the declared aggregations by output field."""
    from mapsmith_opensource import dissolve_ops

    return dissolve_ops.dissolve_plan(ctx)


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


def _roles(agg: Aggregation) -> list[tuple[str, str]]:
    """(field, role) of the two fields of a weighted mean or ratio, in the order aggregation.py checks them."""
    from mapsmith_opensource.dissolve_ops import WEIGHTED_MEAN

    assert agg.other is not None
    if agg.function == WEIGHTED_MEAN:
        return [(agg.field, "value"), (agg.other, "weight")]
    return [(agg.field, "numerator"), (agg.other, "denominator")]


def _refuse_bad_weights(df: Any, paired: list[Aggregation]) -> None:
    """aggregation.py's refusal, counted by Spark: an infinite value, or a negative or infinite weight."""
    from pyspark.sql import functions as F

    from mapsmith_opensource.aggregation import weight_error

    checks = []
    for agg in paired:
        for name, role in _roles(agg):
            col = F.col(f"`{name}`").cast("double")
            bad = col.isNotNull() & (F.abs(col) == F.lit(float("inf")))
            if role == "weight":
                bad = bad | (col < 0)
            checks.append((name, role, bad))
    if not checks:
        return
    counts = df.agg(*[F.sum(F.when(bad, 1).otherwise(0)).alias(f"__bad{i}") for i, (_, _, bad) in enumerate(checks)])
    row = counts.collect()[0]
    for i, (name, role, bad) in enumerate(checks):
        count = int(row[f"__bad{i}"] or 0)
        if count:
            ranked = df.select(
                F.row_number().over(order_window()).alias("n"),
                F.col(f"`{name}`").cast("double").alias("v"),
                bad.alias("bad"),
            )
            found = ranked.where("bad").orderBy("n").limit(BAD_ROWS_SHOWN).collect()
            raise weight_error(name, role, [int(r["n"]) - 1 for r in found], [float(r["v"]) for r in found], count)


def _paired_columns(paired: list[Aggregation]) -> list[Any]:
    """Per group, for each weighted mean or ratio: its value, the rows used and skipped, and the total."""
    from pyspark.sql import functions as F

    from mapsmith_opensource.dissolve_ops import WEIGHTED_MEAN

    columns = []
    for i, agg in enumerate(paired):
        x = F.col(f"`{agg.field}`").cast("double")
        w = F.col(f"`{agg.other}`").cast("double")
        both = x.isNotNull() & w.isNotNull()
        top = F.sum(F.when(both, x * w if agg.function == WEIGHTED_MEAN else x))
        total = F.sum(F.when(both, w))
        used = F.count(F.when(both, 1))
        columns += [
            F.when((used > 0) & (total != 0), top / total).alias(agg.output),
            used.alias(f"__used{i}"),
            F.count(F.when(~both, 1)).alias(f"__skip{i}"),
            F.coalesce(total, F.lit(0.0)).alias(f"__total{i}"),
        ]
    return columns


def _paired_tallies(grouped: Any, paired: list[Aggregation]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The rows skipped and the groups written null (by aggregation.py's reasons), over every group."""
    from pyspark.sql import functions as F

    from mapsmith_opensource import aggregation
    from mapsmith_opensource.dissolve_ops import WEIGHTED_MEAN

    if not paired:
        return {}, {}
    tallies = []
    for i in range(len(paired)):
        used, total = F.col(f"__used{i}"), F.col(f"__total{i}")
        tallies += [
            F.sum(f"__skip{i}").alias(f"s{i}"),
            F.sum(F.when(used == 0, 1).otherwise(0)).alias(f"none{i}"),
            F.sum(F.when((used > 0) & (total == 0), 1).otherwise(0)).alias(f"zero{i}"),
        ]
    row = grouped.agg(*tallies).collect()[0]
    skipped: dict[str, int] = {}
    undefined: dict[str, dict[str, int]] = {}
    for i, agg in enumerate(paired):
        skipped[agg.output] = int(row[f"s{i}"] or 0)
        zero = aggregation.ZERO_TOTAL if agg.function == WEIGHTED_MEAN else aggregation.ZERO_DENOMINATOR
        reasons = {aggregation.NO_ROWS: int(row[f"none{i}"] or 0), zero: int(row[f"zero{i}"] or 0)}
        undefined[agg.output] = {r: n for r, n in reasons.items() if n}
    return skipped, undefined


def dissolve_layer_spark(ctx: RunContext) -> None:
    """dissolve_ops.dissolve_layer on Spark: one row per distinct key combination (a null key is a value of
    its own), sorted by the keys with nulls last; geometries unioned with ST_Union_Aggr; the declared
    aggregations with nulls skipped (first/last: the first/last non-null value in input order)."""
    from pyspark.sql import functions as F

    from mapsmith.errors import InputError
    from mapsmith_opensource import dissolve_ops
    from mapsmith_opensource.layer_common import check_count

    keys, declared = _dissolve_plan(ctx)
    plain = [a for a in declared.values() if a.function in dissolve_ops.AGGREGATIONS]
    paired = [a for a in declared.values() if a.function in dissolve_ops.PAIRED_AGGREGATIONS]
    used_fields = list(dict.fromkeys([a.field for a in declared.values()] + [a.other for a in paired if a.other]))
    info = ctx.inputs["input_path"]
    fields = list(info.fields)
    job = start_job(ctx)
    job.progress(0.1, "reading input_path")
    df, geom, _ = read_layer(job, "input_path")
    check_validity(job, df, geom, "input_path", refuse=True)
    df = _no_nan(df, [*keys, *used_fields])
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
            ranked = df.select(F.row_number().over(order_window()).alias("n"), null_mask.alias("bad"))
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
    _refuse_bad_weights(df, paired)
    dissolve_ops.warn_plain_means(ctx, keys, declared)
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

    columns = [
        union,
        *[aggregate(a.field, a.function) for a in plain],
        *_paired_columns(paired),
        F.count(F.lit(1)).alias("__n"),
    ]
    grouped = df.groupBy(*[F.col(f"`{k}`") for k in keys]).agg(*columns) if keys else df.agg(*columns)
    grouped = grouped.where(F.col("__n") > 0)  # a layer with no features dissolves into no group
    order = [F.col(f"`{k}`").asc_nulls_last() for k in keys]
    grouped = (
        grouped.withColumn("__order", F.row_number().over(window_by(order)))
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
        skipped, undefined = _paired_tallies(grouped, paired)
        # Only the requested page's group sizes travel back from Spark; __order counts groups from 1.
        first, per_page = page_window(ctx.arguments)
        in_page = (F.col("__order") > first) & (F.col("__order") <= first + per_page)
        sizes = [int(r["__n"]) for r in grouped.where(in_page).orderBy("__order").select("__n").collect()]
        job.progress(0.6, "writing GeoParquet")
        assert info.crs_wkt is not None  # the runner refuses a dissolve without a CRS first (CRS_REQUIRED)
        write_geoparquet(job, out, ["__order"], info.crs_wkt)
    finally:
        grouped.unpersist()
    if no_geometry:
        ctx.notes.append(f"{no_geometry} groups have no geometry (all their features had none): written without one")
    weighted = dissolve_ops.report_paired(ctx, declared, skipped, undefined)
    ctx.parameters["x-mapsmith:fields_dropped"] = dropped
    ctx.parameters["x-mapsmith:null_key_features"] = null_count
    written = check_count(
        ctx,
        expected,
        f"the distinct combinations of {', '.join(keys)} in the input, counted before the dissolve"
        if keys
        else "one group for the whole layer",
    )
    dissolve_ops.dissolve_notes(
        ctx, keys, n_rows, written, "Sedona's ST_Union_Aggr on Spark", declared, dropped, null_count
    )
    assert ctx.temp_output is not None
    rows, window = page_rows(ctx.temp_output, geom, ctx.arguments)
    for row, n in zip(rows, sizes, strict=False):
        row["feature_count"] = n
    from mapsmith_opensource.dissolve_ops import dissolve_answer

    ctx.answer = dissolve_answer(written, keys, declared, dropped, null_count, rows, window, weighted)
    finish_job(job)
