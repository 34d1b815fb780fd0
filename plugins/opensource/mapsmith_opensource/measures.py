"""Measures on the ellipsoid that several modules share, measure_length and measure_area.

Lengths, perimeters and areas are geodesic by default, on the ellipsoid of the layer's own datum
(pyproj's ``Geod``), so no projection's scale enters a number and degrees are never read as metres.
A planar measure is taken in any projected CRS when asked, with its scale error measured at the data
and stated (``planar_scale``); 3-D lengths and the warning for 2-D measures of 3-D data live in
``measure_lengths``, totals over overlapping features (the union beside the sum) in ``measure_totals``.
This module also owns the rule for the column a measure is written to (``claim_output_field``): an
existing column is replaced only when the caller said ``overwrite_field=true``, and the answer says
so. Nothing here writes anywhere but ``ctx.temp_output``; engines are imported inside functions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, linear_unit_metres
from mapsmith.errors import InputError
from mapsmith.paging import page
from mapsmith_opensource.common import (
    MAX_SCALE_DISTORTION,
    MetricFrame,
    geodesic_areas,
    read_input,
    set_engine,
    transform_frame,
    write_output,
)
from mapsmith_opensource.derived import measurable
from mapsmith_opensource.measure_lengths import HEIGHT_SCALE_PER_METRE, segment_lengths, warn_measured_in_2d
from mapsmith_opensource.measure_totals import find_overlaps, report_overlaps
from mapsmith_opensource.planar_scale import record_scale_error, refuse_degrees, sample_rows
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration("measure_length", "measure_length"),
    Registration("measure_area", "measure_area"),
)


# -- geodesic measures and the helpers the geometry modules share ----------------------------


def geodetic(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """The layer in the geographic CRS of its own datum: no datum shift enters a geodesic measure."""
    crs = gdf.crs
    if crs.is_geographic:
        return gdf
    from pyproj import Transformer

    geographic = crs.geodetic_crs
    return transform_frame(gdf, Transformer.from_crs(crs, geographic, always_xy=True), geographic)


def ellipsoid_name(gdf: gpd.GeoDataFrame) -> str:
    return gdf.crs.ellipsoid.name if gdf.crs.ellipsoid else "unknown"


def geodesic_measures(gdf: gpd.GeoDataFrame) -> tuple[list[float | None], list[float | None]]:
    """Per feature: geodesic length (a line's length, a polygon's perimeter) and geodesic area
    (polygons only), on the layer's ellipsoid. None where the measure does not apply or there is
    no geometry."""
    import shapely

    from mapsmith_opensource.common import geodesic_areas

    lonlat = geodetic(gdf)
    geod = gdf.crs.get_geod()
    geoms = lonlat.geometry.values
    dims = shapely.get_dimensions(geoms)
    absent = shapely.is_missing(geoms) | shapely.is_empty(geoms)
    lengths: list[float | None] = []
    areas: list[float | None] = []
    polygons = [i for i in range(len(geoms)) if dims[i] == 2 and not absent[i]]
    polygon_areas = dict(zip(polygons, geodesic_areas(lonlat.iloc[polygons]), strict=True)) if polygons else {}
    for i, geom in enumerate(geoms):
        if absent[i] or dims[i] < 1:
            lengths.append(None)
        else:
            lengths.append(float(geod.geometry_length(geom)))
        areas.append(float(polygon_areas[i]) if i in polygon_areas else None)
    return lengths, areas


def total(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(sum(present)) if present else None


def absent(geoms: Any) -> np.ndarray:
    """True where a feature has no position: a null or an empty geometry."""
    import shapely

    return shapely.is_missing(geoms) | shapely.is_empty(geoms)


def measured_only(ctx: RunContext, metric: MetricFrame, what: str) -> None:
    """Correct to_metric's record when the metric frame was used to measure only: the coordinates
    written (if any) are input_path's own and never made the return trip."""
    if not metric.transformed:
        return
    source, analysis = crs_label(metric.source), crs_label(metric.crs)
    why = (
        f"{source} is geographic (degrees), so metres cannot be measured in it"
        if metric.source.is_geographic
        else f"{source} distorts distances by more than {MAX_SCALE_DISTORTION:.0%} at the data's centre"
    )
    ctx.crs_decisions["target_crs"] = analysis
    ctx.crs_decisions["reason"] = (
        f"{why}; {what} in the UTM zone estimated from the layer's extent ({analysis}). Only the "
        f"measurement used that zone: no coordinate was transformed back, and any coordinates written "
        f"are input_path's own, in {source}"
    )


def native_crs_decision(ctx: RunContext, gdf: gpd.GeoDataFrame, why: str) -> None:
    label = crs_label(gdf.crs)
    ctx.crs_decisions.update({"analysis_crs": label, "reason": why, "source_crs": label, "target_crs": None})


def indices(mask: Any) -> list[int]:
    import numpy as np

    return [int(i) for i in np.flatnonzero(mask)]


def refuse_existing_field(ctx: RunContext, gdf: gpd.GeoDataFrame, field: str) -> None:
    """For operations whose output field has a fixed name and no overwrite_field argument."""
    if field in gdf.columns:
        raise InputError(
            f"the input already has a field {field!r}; MapSmith will not overwrite it",
            code="FIELD_EXISTS",
            evidence={"field": field, "path": ctx.arguments["input_path"]},
            hint=f"rename or drop the existing {field} field first (rename_fields, select_fields)",
        )


def claim_output_field(ctx: RunContext, frame: Any, field: str, *, overwrite: bool) -> bool:
    """Whether writing ``field`` replaces an existing column; refuse (FIELD_EXISTS) unless ``overwrite``.

    The geometry column is never replaceable: it is not a field. A replacement is recorded in the
    manifest's parameters, a note and the answer, so nobody reads the new values as the old ones.
    """
    exists = field in list(frame.columns)
    geometry = getattr(frame, "geometry_name", None)
    if exists and field == geometry:
        raise InputError(
            f"{field!r} is the layer's geometry column, not a field",
            code="FIELD_IS_GEOMETRY",
            evidence={"field": field, "path": ctx.given_paths.get("input_path", "")},
            hint="choose another output_field name",
        )
    if exists and not overwrite:
        raise InputError(
            f"the input already has a field {field!r}; MapSmith will not overwrite it unless asked",
            code="FIELD_EXISTS",
            evidence={"field": field, "path": ctx.given_paths.get("input_path", "")},
            hint=f"pass overwrite_field=true to replace {field}, or choose another output_field name",
        )
    ctx.parameters["x-mapsmith:field_replaced"] = exists
    if exists:
        ctx.notes.append(f"the existing field {field!r} was replaced by the new values (overwrite_field=true)")
    return exists


# -- measure_length ---------------------------------------------------------------------------


def measure_length(ctx: RunContext) -> None:
    set_engine(ctx)
    method = ctx.arguments.get("method") or "geodesic"
    use_z = bool(ctx.arguments.get("use_z"))
    gdf = measurable(ctx, read_input(ctx))
    field = ctx.arguments.get("output_field") or "length_m"
    replaced = claim_output_field(ctx, gdf, field, overwrite=bool(ctx.arguments.get("overwrite_field")))
    crs = gdf.crs
    planar = method == "planar"
    if planar:
        refuse_degrees(ctx, crs, "length")
    measured, zunit = segment_lengths(gdf, planar=planar, use_z=use_z)
    lengths = measured.values
    scale = None
    if planar:
        rows = sample_rows(len(gdf))
        ground, _ = segment_lengths(gdf.iloc[rows], planar=False, use_z=False)
        scale = record_scale_error(
            ctx,
            crs,
            rows,
            [measured.horizontal[i] for i in rows],
            ground.values,
            what="length",
            unit="m",
            total_count=len(gdf),
        )
        how = f"planar length in {crs_label(crs)}, its unit {linear_unit_metres(crs)} m; {scale['statement']}"
    else:
        how = (
            f"geodesic length on the {ellipsoid_name(gdf)} ellipsoid of the layer's own datum; no planar "
            "projection's scale enters the number"
        )
    if use_z:
        how += (
            "; each segment's height difference combined with its horizontal length (sqrt(horizontal^2 + dz^2)), "
            "Z in " + (zunit.source if zunit else "metres")
        )
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs if planar or crs.is_geographic else crs.geodetic_crs),
            "reason": how,
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    ctx.parameters["x-mapsmith:measure_dimensions"] = "3d" if use_z else "2d"
    out = gdf.copy()
    out[field] = lengths
    present = [v for v in lengths if v is not None]
    total_length = float(sum(present))
    found = find_overlaps(
        gdf, lengths, 1, lambda frame: segment_lengths(frame, planar=planar, use_z=use_z)[0].values[0] or 0.0
    )
    attrs = [c for c in out.columns if c != out.geometry.name]
    _, window = page(range(len(out)), ctx.arguments)
    ctx.answer = {
        "total_length_m": total_length,
        **report_overlaps(ctx, found, total_length, what="length", unit="m", answer_key="union_length_m"),
        "feature_count": len(out),
        "features_without_geometry": len(lengths) - len(present),
        "method": method,
        "dimensions": "3d" if use_z else "2d",
        "output_field": field,
        "field_replaced": replaced,
        "rows": out[attrs].iloc[window["offset"] : window["offset"] + window["returned"]].to_dict(orient="records"),
        "page": window,
    }
    if scale is not None:
        ctx.answer["planar_scale_error"] = scale
    if use_z:
        horizontal = [v for v in measured.horizontal if v is not None]
        ctx.answer.update(
            total_horizontal_length_m=float(sum(horizontal)),
            features_measured_with_z=measured.with_z,
            z_unit=zunit.source if zunit else None,
            z_unit_metres=zunit.metres if zunit else None,
        )
        if not planar:
            ctx.answer["height_note"] = (
                "horizontal distances are taken on the ellipsoid's surface, not at the segment's height "
                f"(+{HEIGHT_SCALE_PER_METRE * 1000:.4%} per 1,000 m of height, not added)"
            )
        if measured.with_z < len(present):
            ctx.notes.append(
                f"use_z=true, but {len(present) - measured.with_z} of {len(present)} features have no Z: "
                "their lengths are horizontal"
            )
    else:
        warn_measured_in_2d(
            ctx,
            gdf,
            "lengths",
            "pass use_z=true for lengths along the slope (3-D), combining each segment's "
            "height difference with its horizontal length",
        )
    ctx.check(
        "x-mapsmith:lengths_non_negative",
        all(v >= 0 and math.isfinite(v) for v in present),
        f"{len(present)} lengths, minimum {min(present) if present else 0:.3f} m; "
        f"{len(lengths) - len(present)} features without geometry have no length (null)",
    )
    if len(present) < len(lengths):
        ctx.notes.append(f"{len(lengths) - len(present)} features have no geometry: their {field} is null")
    write_output(ctx, out)


# -- measure_area -----------------------------------------------------------------------------


def measure_area(ctx: RunContext) -> None:
    set_engine(ctx)
    method = ctx.arguments.get("method") or "geodesic"
    gdf = measurable(ctx, read_input(ctx))
    field = ctx.arguments.get("output_field") or "area_m2"
    replaced = claim_output_field(ctx, gdf, field, overwrite=bool(ctx.arguments.get("overwrite_field")))
    crs = gdf.crs
    scale = None
    if method == "geodesic":
        areas = geodesic_areas(gdf)

        def measure(frame: gpd.GeoDataFrame) -> float:
            return geodesic_areas(frame)[0]

        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
                "reason": f"geodesic area on the {ellipsoid_name(gdf)} ellipsoid of the layer's own datum (the "
                "default); no planar projection's distortion enters the number",
                "source_crs": crs_label(crs),
                "target_crs": None,
            }
        )
    else:
        refuse_degrees(ctx, crs, "area")
        unit = linear_unit_metres(crs)
        areas = [float(a) for a in gdf.geometry.area * unit * unit]

        def measure(frame: gpd.GeoDataFrame) -> float:
            return float(frame.geometry.area.iloc[0]) * unit * unit

        rows = sample_rows(len(gdf))
        scale = record_scale_error(
            ctx,
            crs,
            rows,
            [areas[i] for i in rows],
            geodesic_areas(gdf.iloc[rows]) if rows else [],
            what="area",
            unit="m2",
            total_count=len(gdf),
        )
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs),
                "reason": f"planar area requested, in {crs_label(crs)}'s own plane; its unit is {unit} m, so areas "
                f"are multiplied by {unit * unit}; {scale['statement']}",
                "source_crs": crs_label(crs),
                "target_crs": None,
            }
        )
    ctx.parameters["x-mapsmith:measure_dimensions"] = "2d"
    warn_measured_in_2d(
        ctx,
        gdf,
        "areas",
        "areas are horizontal areas (as parcels and zones are measured); MapSmith has no 3-D surface area: "
        "for the length along the slope of lines use measure_length with use_z=true",
    )
    out = gdf.copy()
    out[field] = areas
    total_area = float(sum(areas))
    found = find_overlaps(gdf, list(areas), 2, measure)
    attrs = [c for c in out.columns if c != out.geometry.name]
    chosen, window = page(range(len(out)), ctx.arguments)
    rows_out = out[attrs].iloc[chosen[0] : chosen[-1] + 1].to_dict(orient="records") if chosen else []
    ctx.answer = {
        "total_area_m2": total_area,
        **report_overlaps(ctx, found, total_area, what="area", unit="m2", answer_key="union_area_m2"),
        "feature_count": len(out),
        "method": method,
        "dimensions": "2d",
        "output_field": field,
        "field_replaced": replaced,
        "rows": rows_out,
        "page": window,
    }
    if scale is not None:
        ctx.answer["planar_scale_error"] = scale
    ctx.check(
        "x-mapsmith:areas_non_negative",
        all(a >= 0 for a in areas),
        f"{len(areas)} areas, minimum {min(areas) if areas else 0:.3f} m2",
    )
    write_output(ctx, out)
