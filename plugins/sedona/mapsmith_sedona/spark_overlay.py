"""overlay_layers as a Spark job with Apache Sedona SQL: every mode of geopandas.overlay, piece by piece.

The pieces are built as geopandas.overlay builds them (see OVERLAY_PARTS), the polygonal part of each is
kept and every lower-dimension fragment counted, as overlay_ops does; overlay_ops' field rules (suffixes
for shared names, refused clashes) are called, not copied. What it must never do: keep a fragment
uncounted, or name a field other than overlay_ops would.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from mapsmith_sedona.spark_job import (
    ROW,
    check_validity,
    fields_as_long,
    finish_job,
    pair_eligible,
    read_layer,
    start_job,
    write_geoparquet,
)

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

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
    return pair_eligible(ctx, ("input_path", "overlay_path"))


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
    job = start_job(ctx)
    job.progress(0.1, "reading input_path and overlay_path")
    left, lgeom, _ = read_layer(job, "input_path")
    right, rgeom, _ = read_layer(job, "overlay_path")
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs),
            "reason": "overlaid in input_path's CRS (planar: edges are straight lines in its coordinates), so the "
            "input's coordinates are written unchanged",
        }
    )
    check_validity(job, left, lgeom, "input_path", refuse=True)
    check_validity(job, right, rgeom, "overlay_path", refuse=True)
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
                result = fields_as_long(result, list(result.columns))
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
                write_geoparquet(job, out, ["__o0", "__o1", "__o2"], ctx.inputs["input_path"].crs_wkt)
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
    finish_job(job)
