"""nearest_join as a Spark job with Apache Sedona SQL (``MAPSMITH_STACK=sedona``): exact distance joins over a
widening radius.

Sedona's ST_KNN join measures from centroids when either side is not points, so it cannot give the nearest
line or polygon; here every candidate is measured exactly (ST_DWithin, planned by Sedona as a partitioned
range join, then ST_Distance). Distances are planar, in a projected CRS true to scale at the data; anything
else is refused with CRS_NOT_PROJECTED before Spark starts. The semantics (ties to the lowest join row within
join_ops.TIE_TOLERANCE_METRES, unmatched rows kept with empty join fields) are the GeoPandas engine's.
Split from spark_ops, which registers it. It imports pyspark only inside the functions that run a job.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from mapsmith.errors import CRSError
from mapsmith_sedona.spark_job import (
    ENGINE,
    ROW,
    Job,
    check_validity,
    fields_as_long,
    finish_job,
    pair_eligible,
    read_layer,
    start_job,
    write_geoparquet,
)
from mapsmith_sedona.spark_ops import pd_frame

if TYPE_CHECKING:
    from mapsmith.runner import RunContext


# -- nearest_join ----------------------------------------------------------------------------------
#
# Sedona's ST_KNN join measures from centroids when either side is not points, so it cannot give the
# nearest line or polygon. The nearest is found instead with exact distance joins (ST_DWithin, which
# Sedona plans as a partitioned range join) over a widening radius: a row is settled in the round
# whose radius reaches its nearest distance plus the tie tolerance, so every tied candidate is seen;
# the last round's radius spans both layers' extents, so every input row with a geometry is matched.
NEAREST_RADIUS_GROWTH = 4.0


def nearest_join_eligible(ctx: RunContext) -> str | None:
    return pair_eligible(ctx, ("input_path", "join_path"))


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


def _nearest_pairs(job: Job, left: Any, lgeom: str, right: Any, rgeom: str, limit: float | None) -> Any:
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

    job = start_job(ctx)
    job.progress(0.1, "reading input_path and join_path")
    left, lgeom, lfields = read_layer(job, "input_path")
    right, rgeom, rfields = read_layer(job, "join_path")
    check_validity(job, left, lgeom, "input_path", refuse=False)
    check_validity(job, right, rgeom, "join_path", refuse=False)
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
        # distance_m is this run's own field: a join field of that name is renamed, as the GeoPandas engine does
        renamed = join_ops._rename_clashes([*lfields, lgeom, "distance_m"], rfields, join_ops.JOIN_SUFFIX)
        extra = right.select(F.col(ROW).alias("__jj"), *[F.col(f"`{f}`").alias(renamed.get(f, f)) for f in rfields])
        extra = fields_as_long(extra, [renamed.get(f, f) for f in rfields])
        joined = left.join(chosen, left[ROW] == chosen["__i"], "left")
        joined = joined.join(extra, joined["__j"] == extra["__jj"], "left")
        out = joined.select(
            *[F.col(f"`{c}`") for c in left.columns if c != ROW],
            *[F.col(f"`{renamed.get(f, f)}`") for f in rfields],
            (F.col("__d") * unit_m).cast("double").alias("distance_m"),
            F.col(ROW).alias("__o1"),
        )
        job.progress(0.7, "writing GeoParquet")
        write_geoparquet(job, out, ["__o1"], ctx.inputs["input_path"].crs_wkt)
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
    finish_job(job)
