"""Measures on the ellipsoid that several modules share, measure_length and measure_area.

Lengths, perimeters and areas are geodesic, on the ellipsoid of the layer's own datum (pyproj's
``Geod``), so no projection's scale enters a number and degrees are never read as metres. This
module also owns the rule for the column a measure is written to (``claim_output_field``): an
existing column is replaced only when the caller said ``overwrite_field=true``, and the answer says
so. Nothing here writes anywhere but ``ctx.temp_output``; engines are imported inside functions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, is_equal_area, linear_unit_metres
from mapsmith.errors import CRSError, InputError
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
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

MAX_ANSWER_ROWS = 200

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
    gdf = read_input(ctx)
    field = ctx.arguments.get("output_field") or "length_m"
    replaced = claim_output_field(ctx, gdf, field, overwrite=bool(ctx.arguments.get("overwrite_field")))
    lengths, _ = geodesic_measures(gdf)
    crs = gdf.crs
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
            "reason": f"geodesic length on the {ellipsoid_name(gdf)} ellipsoid of the layer's own datum; no planar "
            "projection's scale enters the number",
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    out = gdf.copy()
    out[field] = lengths
    present = [v for v in lengths if v is not None]
    attrs = [c for c in out.columns if c != out.geometry.name]
    _, window = page(range(len(out)), ctx.arguments)
    ctx.answer = {
        "total_length_m": float(sum(present)),
        "feature_count": len(out),
        "features_without_geometry": len(lengths) - len(present),
        "method": "geodesic",
        "output_field": field,
        "field_replaced": replaced,
        "rows": out[attrs].iloc[window["offset"] : window["offset"] + window["returned"]].to_dict(orient="records"),
        "page": window,
    }
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


def _require_true_planar_area(gdf: gpd.GeoDataFrame, unit: float) -> None:
    """Measure, rather than trust the projection's name: a projection that is equal-area only on a
    sphere (PROJ's Mollweide on WGS 84) overstates ellipsoidal areas by about 0.5 %."""
    import geopandas as gpd
    from shapely.geometry import box

    if len(gdf) == 0:
        return
    x0, y0, x1, y1 = gdf.total_bounds
    cx, cy, half = (x0 + x1) / 2, (y0 + y1) / 2, 500.0 / unit
    probe = gpd.GeoDataFrame(geometry=[box(cx - half, cy - half, cx + half, cy + half)], crs=gdf.crs)
    planar = float(probe.geometry.area.iloc[0]) * unit * unit
    geodesic = geodesic_areas(probe)[0]
    if abs(planar / geodesic - 1) > 1e-4:
        raise CRSError(
            f"planar areas in {crs_label(gdf.crs)} are not ground areas here: a 1 km square at the data's "
            f"centre measures {planar:,.1f} m2 planar and {geodesic:,.1f} m2 on the ellipsoid",
            code="CRS_NOT_EQUAL_AREA",
            evidence={"crs": crs_label(gdf.crs), "planar_m2": planar, "geodesic_m2": geodesic},
            hint="use method='geodesic' (the default), or an ellipsoidal equal-area CRS such as EPSG:6933",
        )


def measure_area(ctx: RunContext) -> None:
    set_engine(ctx)
    method = ctx.arguments["method"]
    gdf = read_input(ctx)
    field = ctx.arguments.get("output_field") or "area_m2"
    replaced = claim_output_field(ctx, gdf, field, overwrite=bool(ctx.arguments.get("overwrite_field")))
    crs = gdf.crs
    if method == "geodesic":
        areas = geodesic_areas(gdf)
        ellipsoid = crs.ellipsoid.name if crs.ellipsoid else "unknown"
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
                "reason": f"geodesic area on the {ellipsoid} ellipsoid of the layer's own datum (the default); "
                "no planar projection's distortion enters the number",
                "source_crs": crs_label(crs),
                "target_crs": None,
            }
        )
    else:
        if crs.is_geographic or not is_equal_area(crs):
            raise CRSError(
                f"a planar area in {crs_label(crs)} is not a ground area: "
                + ("it is geographic (degrees)" if crs.is_geographic else "it is not an equal-area projection"),
                code="CRS_NOT_EQUAL_AREA",
                evidence={"crs": crs_label(crs), "method": method},
                hint="use method='geodesic' (the default), or reproject_layer to an equal-area CRS first",
            )
        unit = linear_unit_metres(crs)
        _require_true_planar_area(gdf, unit)
        areas = list(gdf.geometry.area * unit * unit)
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs),
                "reason": f"planar area requested; {crs_label(crs)} is an equal-area projection; its unit is "
                f"{unit} m, so areas are multiplied by {unit * unit}",
                "source_crs": crs_label(crs),
                "target_crs": None,
            }
        )
    out = gdf.copy()
    out[field] = areas
    total = float(sum(areas))
    attrs = [c for c in out.columns if c != out.geometry.name]
    chosen, window = page(range(len(out)), ctx.arguments)
    rows = out[attrs].iloc[chosen[0] : chosen[-1] + 1].to_dict(orient="records") if chosen else []
    ctx.answer = {
        "total_area_m2": total,
        "feature_count": len(out),
        "method": method,
        "output_field": field,
        "field_replaced": replaced,
        "rows": rows,
        "page": window,
    }
    ctx.check(
        "x-mapsmith:areas_non_negative",
        all(a >= 0 for a in areas),
        f"{len(areas)} areas, minimum {min(areas) if areas else 0:.3f} m2",
    )
    write_output(ctx, out)
