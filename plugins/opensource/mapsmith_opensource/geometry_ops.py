"""The opensource stack's geometry operations: simplify, centroids, points on surface, convex hulls,
lengths, explicit repair, distance clustering and the nearest-neighbour index.

Every distance or area is in metres: geodesic on the layer's own ellipsoid, or measured in the frame
``common.to_metric`` chose and recorded. Degrees are never read as a length. Operations that only
choose a point or a hull from the data's own vertices (point_on_surface, convex_hull) work in
input_path's CRS, so their results hold exactly against the geometry as stored. Nothing is dropped:
a feature whose result is empty, degenerate or unplaceable is written, counted and reported. Engines
are imported inside functions only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label
from mapsmith.errors import InputError
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    MAX_SCALE_DISTORTION,
    MetricFrame,
    read_input,
    set_engine,
    to_metric,
    transform_frame,
    write_output,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration("simplify_layer", "simplify_layer"),
    Registration("centroid_layer", "centroid_layer"),
    Registration("point_on_surface", "point_on_surface"),
    Registration("convex_hull", "convex_hull"),
    Registration("measure_length", "measure_length"),
    Registration("repair_geometries", "repair_geometries"),
    Registration("cluster_points_by_distance", "cluster_points_by_distance"),
    Registration("nearest_neighbour_index", "nearest_neighbour_index"),
)

MAX_ANSWER_ROWS = 200
# A check compares distances computed in two ways; this much relative slack absorbs float rounding.
RELATIVE_SLACK = 1e-9
# Clark & Evans (1954): the standard error of the mean nearest-neighbour distance under complete
# spatial randomness is 0.26136 / sqrt(n * density).
CLARK_EVANS_SE = 0.26136
# |z| above this rejects complete spatial randomness at the 5 % level (two-sided).
Z_CRITICAL_5_PERCENT = 1.959964
# Features are queried against the STRtree in blocks, so memory grows with the pairs of one block.
QUERY_BLOCK = 8192


# -- shared helpers ---------------------------------------------------------------------------


def _geodetic(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """The layer in the geographic CRS of its own datum: no datum shift enters a geodesic measure."""
    crs = gdf.crs
    if crs.is_geographic:
        return gdf
    from pyproj import Transformer

    geographic = crs.geodetic_crs
    return transform_frame(gdf, Transformer.from_crs(crs, geographic, always_xy=True), geographic)


def _ellipsoid(gdf: gpd.GeoDataFrame) -> str:
    return gdf.crs.ellipsoid.name if gdf.crs.ellipsoid else "unknown"


def _geodesic_measures(gdf: gpd.GeoDataFrame) -> tuple[list[float | None], list[float | None]]:
    """Per feature: geodesic length (a line's length, a polygon's perimeter) and geodesic area
    (polygons only), on the layer's ellipsoid. None where the measure does not apply or there is
    no geometry."""
    import shapely

    from mapsmith_opensource.common import geodesic_areas

    lonlat = _geodetic(gdf)
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


def _total(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(sum(present)) if present else None


def _absent(geoms: Any) -> np.ndarray:
    """True where a feature has no position: a null or an empty geometry."""
    import shapely

    return shapely.is_missing(geoms) | shapely.is_empty(geoms)


def _refuse_existing_field(ctx: RunContext, gdf: gpd.GeoDataFrame, field: str) -> None:
    if field in gdf.columns:
        raise InputError(
            f"the input already has a field {field!r}; MapSmith will not overwrite it",
            code="FIELD_EXISTS",
            evidence={"field": field, "path": ctx.arguments["input_path"]},
            hint=f"rename or drop the existing {field} field first",
        )


def _measured_only(ctx: RunContext, metric: MetricFrame, what: str) -> None:
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


def _native_crs_decision(ctx: RunContext, gdf: gpd.GeoDataFrame, why: str) -> None:
    label = crs_label(gdf.crs)
    ctx.crs_decisions.update({"analysis_crs": label, "reason": why, "source_crs": label, "target_crs": None})


def _indices(mask: Any) -> list[int]:
    import numpy as np

    return [int(i) for i in np.flatnonzero(mask)]


# -- simplify_layer ---------------------------------------------------------------------------


def simplify_layer(ctx: RunContext) -> None:
    import numpy as np
    import shapely

    set_engine(ctx)
    tolerance = ctx.arguments["tolerance_meters"]
    preserve = ctx.arguments["preserve_topology"]
    gdf = read_input(ctx)
    metric = to_metric(ctx, gdf, "simplified")
    units = metric.units(tolerance)
    ctx.parameters["x-mapsmith:tolerance_in_analysis_units"] = units
    before = metric.frame.geometry.values
    after = shapely.simplify(before, units, preserve_topology=preserve)
    work = metric.frame.set_geometry(after, crs=metric.crs)
    out = metric.back(ctx, work)

    absent_before = _absent(before)
    emptied = _indices(_absent(after) & ~absent_before)
    # Douglas-Peucker keeps a subset of the vertices, each dropped one within the tolerance of the
    # simplified shape: the vertex-sampled Hausdorff distance can therefore not exceed it.
    compared = ~absent_before & ~_absent(after)
    hausdorff = np.zeros(len(before))
    hausdorff[compared] = shapely.hausdorff_distance(before[compared], after[compared])
    worst_m = float(hausdorff.max() * metric.metres_per_unit) if len(before) else 0.0
    vertices_before = shapely.get_num_coordinates(before)
    vertices_after = shapely.get_num_coordinates(after)
    grew = _indices(vertices_after > vertices_before)
    ctx.check(
        "x-mapsmith:within_tolerance",
        worst_m <= tolerance * (1 + RELATIVE_SLACK) and not grew,
        f"largest vertex-sampled Hausdorff distance between a feature and its simplification: {worst_m:.6f} m "
        f"(tolerance {tolerance:g} m); vertices {int(vertices_before.sum())} -> {int(vertices_after.sum())}; "
        f"features with more vertices than before: {grew or 'none'}",
        # Without topology preservation GEOS mends collapsed rings afterwards, which may move a shape.
        critical=preserve,
    )

    lengths_before, areas_before = _geodesic_measures(gdf)
    lengths_after, areas_after = _geodesic_measures(out)
    dims = shapely.get_dimensions(gdf.geometry.values)
    line_rows = [i for i in range(len(gdf)) if dims[i] == 1]
    polygon_rows = [i for i in range(len(gdf)) if dims[i] == 2]

    def totals(values: list[float | None], rows: list[int]) -> float | None:
        return _total([values[i] for i in rows]) if rows else None

    rows = []
    for i in range(min(len(gdf), MAX_ANSWER_ROWS)):
        row: dict[str, Any] = {
            "feature_index": i,
            "vertices_before": int(vertices_before[i]),
            "vertices_after": int(vertices_after[i]),
        }
        if dims[i] == 1:
            row.update(length_m_before=lengths_before[i], length_m_after=lengths_after[i])
        elif dims[i] == 2:
            row.update(
                area_m2_before=areas_before[i],
                area_m2_after=areas_after[i],
                perimeter_m_before=lengths_before[i],
                perimeter_m_after=lengths_after[i],
            )
        rows.append(row)
    ellipsoid = _ellipsoid(gdf)
    ctx.answer = {
        "feature_count": len(gdf),
        "tolerance_meters": tolerance,
        "preserve_topology": preserve,
        "vertices_before": int(vertices_before.sum()),
        "vertices_after": int(vertices_after.sum()),
        "line_length_m": {
            "before": totals(lengths_before, line_rows),
            "after": totals(lengths_after, line_rows),
        },
        "polygon_area_m2": {
            "before": totals(areas_before, polygon_rows),
            "after": totals(areas_after, polygon_rows),
        },
        "polygon_perimeter_m": {
            "before": totals(lengths_before, polygon_rows),
            "after": totals(lengths_after, polygon_rows),
        },
        "measured": f"geodesic, on the {ellipsoid} ellipsoid of input_path's own datum (input and output alike)",
        "emptied_feature_indices": emptied,
        "rows": rows,
        "rows_truncated": len(gdf) > MAX_ANSWER_ROWS,
    }
    ctx.notes.append(
        f"lengths and areas before and after simplification were measured geodesically on the {ellipsoid} "
        f"ellipsoid, not in the analysis CRS: vertices {int(vertices_before.sum())} -> "
        f"{int(vertices_after.sum())}; line length {_fmt(ctx.answer['line_length_m'])} m; polygon area "
        f"{_fmt(ctx.answer['polygon_area_m2'])} m2"
    )
    if emptied:
        ctx.warn(
            "SIMPLIFIED_TO_EMPTY",
            f"{len(emptied)} features collapsed to an empty geometry at {tolerance} m and are written empty "
            f"(feature indices {emptied[:20]})",
            "use preserve_topology=true (the default), which never collapses a feature, or a smaller tolerance",
        )
    write_output(ctx, out)


def _fmt(pair: dict[str, float | None]) -> str:
    return " -> ".join("n/a" if v is None else f"{v:,.3f}" for v in (pair["before"], pair["after"]))


# -- centroid_layer ---------------------------------------------------------------------------


def centroid_layer(ctx: RunContext) -> None:
    import shapely

    set_engine(ctx)
    gdf = read_input(ctx)
    metric = to_metric(ctx, gdf, "reduced to centroids")
    geoms = metric.frame.geometry.values
    centroids = shapely.centroid(geoms)
    polygons = (shapely.get_dimensions(geoms) == 2) & ~_absent(geoms)
    outside = _indices(polygons & ~shapely.within(centroids, geoms))
    out = metric.back(ctx, metric.frame.set_geometry(centroids, crs=metric.crs))
    without = _indices(_absent(geoms))
    ctx.answer = {
        "feature_count": len(gdf),
        "computed_in": crs_label(metric.crs),
        "centroids_outside_their_polygon": len(outside),
        "outside_feature_indices": outside[:MAX_ANSWER_ROWS],
        "features_without_geometry": len(without),
    }
    if outside:
        ctx.warn(
            "CENTROID_OUTSIDE_POLYGON",
            f"{len(outside)} polygon centroids fall outside their own polygon (feature indices {outside[:20]}); "
            "a centroid is the centre of mass, which a C- or L-shape does not contain",
            "use point_on_surface for a point guaranteed inside each polygon (labels, joins by location)",
        )
    if without:
        ctx.notes.append(f"{len(without)} features have no geometry and are written without a centroid")
    write_output(ctx, out)


# -- point_on_surface -------------------------------------------------------------------------


def point_on_surface(ctx: RunContext) -> None:
    import shapely

    set_engine(ctx)
    gdf = read_input(ctx)
    _native_crs_decision(
        ctx,
        gdf,
        "a point is chosen inside each feature, nothing is measured: computed in input_path's own CRS, so "
        "each point lies inside the feature exactly as stored (straight edges in that CRS)",
    )
    geoms = gdf.geometry.values
    points = shapely.point_on_surface(geoms)
    present = ~_absent(geoms)
    polygons = present & (shapely.get_dimensions(geoms) == 2)
    lines = present & (shapely.get_dimensions(geoms) == 1)
    inside = shapely.within(points[polygons], geoms[polygons])
    on_line = shapely.intersects(points[lines], geoms[lines])
    failures = _indices(polygons)
    failures = [i for i, ok in zip(failures, inside, strict=True) if not ok]
    failures += [i for i, ok in zip(_indices(lines), on_line, strict=True) if not ok]
    invalid = _indices(present & ~shapely.is_valid(geoms))
    ctx.check(
        "x-mapsmith:points_inside_features",
        not failures,
        f"{int(polygons.sum())} points strictly inside their polygon, {int(lines.sum())} on their line; "
        f"not: {sorted(failures) or 'none'}"
        + (f"; invalid input geometries (run repair_geometries first): {invalid[:20]}" if invalid else ""),
    )
    without = _indices(~present)
    ctx.answer = {
        "feature_count": len(gdf),
        "points_inside_polygons": int(polygons.sum()) - len([i for i in failures if polygons[i]]),
        "points_on_lines": int(lines.sum()) - len([i for i in failures if lines[i]]),
        "features_without_geometry": len(without),
    }
    if without:
        ctx.notes.append(f"{len(without)} features have no geometry and are written without a point")
    write_output(ctx, gdf.set_geometry(points, crs=gdf.crs))


# -- convex_hull ------------------------------------------------------------------------------


def convex_hull(ctx: RunContext) -> None:
    import geopandas as gpd
    import shapely

    from mapsmith_opensource.common import geodesic_areas

    set_engine(ctx)
    group_all = ctx.arguments["group_all"]
    gdf = read_input(ctx)
    _native_crs_decision(
        ctx,
        gdf,
        "a hull is made of the input's own vertices, nothing is measured to build it: computed in "
        "input_path's own CRS, so each hull contains its features exactly as stored; hull areas are geodesic",
    )
    geoms = gdf.geometry.values
    absent = _absent(geoms)
    if group_all:
        present = geoms[~absent]
        coords = shapely.get_coordinates(present)
        hull = shapely.convex_hull(shapely.multipoints(coords)) if len(coords) else None
        if len(gdf) and (hull is None or shapely.get_dimensions(hull) < 2):
            kind = "nothing (no feature has a geometry)" if hull is None else hull.geom_type
            raise InputError(
                f"the hull of all {len(present)} features is not a polygon but {kind}: the points are "
                "collinear or coincide",
                code="HULL_DEGENERATE",
                evidence={
                    "path": ctx.arguments["input_path"],
                    "hull_type": None if hull is None else hull.geom_type,
                    "features_with_geometry": len(present),
                    "distinct_vertices": len({tuple(c) for c in coords.tolist()}),
                },
                hint="a hull needs three points that are not on one line: add features, or buffer_layer the "
                "features first if a corridor around them is what you want",
            )
        out = gpd.GeoDataFrame(
            {"feature_count": [len(present)] if len(gdf) else []},
            geometry=[hull] if len(gdf) else [],
            crs=gdf.crs,
        )
        expected = 1 if len(gdf) else 0
        members: list[tuple[int, Any]] = [(0, present)] if len(gdf) else []
        degenerate: list[dict[str, Any]] = []
    else:
        hulls = shapely.convex_hull(geoms)
        flat = ~absent & (shapely.get_dimensions(hulls) < 2)
        degenerate = [{"feature_index": i, "hull_type": hulls[i].geom_type} for i in _indices(flat)]
        hulls[flat | absent] = None
        out = gdf.set_geometry(hulls, crs=gdf.crs)
        expected = len(gdf)
        members = [(i, geoms[i : i + 1]) for i in _indices(~absent & ~flat)]
    hull_values = out.geometry.values
    uncovered = [i for i, parts in members if not shapely.covers(hull_values[i], parts).all()]
    ctx.check(
        "x-mapsmith:hulls_contain_features",
        not uncovered,
        f"{len(members)} hulls checked to cover their features; not covering: {uncovered or 'none'}",
    )
    written = [i for i in range(len(out)) if not _absent(hull_values[i : i + 1])[0]]
    areas = geodesic_areas(out.iloc[written]) if written else []
    ctx.answer = {
        "group_all": group_all,
        "hull_count": len(written),
        "total_hull_area_m2": float(sum(areas)),
        "area_measured": f"geodesic, on the {_ellipsoid(gdf)} ellipsoid",
        "degenerate_hulls": degenerate[:MAX_ANSWER_ROWS],
        "degenerate_count": len(degenerate),
        "features_without_geometry": int(absent.sum()),
    }
    if degenerate:
        ctx.warn(
            "DEGENERATE_HULL",
            f"{len(degenerate)} features have a hull that is a line or a point, not a polygon (a single point, "
            f"or collinear vertices); they are written with no geometry (feature indices "
            f"{[d['feature_index'] for d in degenerate[:20]]})",
            "group_all=true makes one hull of all features; buffer_layer first if an area around them is wanted",
        )
    if absent.any():
        ctx.notes.append(f"{int(absent.sum())} features have no geometry and contribute to no hull")
    write_output(ctx, out)
    count = io.inspect(ctx.temp_output, None).feature_count
    ctx.check(
        "feature_count_exact",
        count == expected,
        f"expected {expected} features ({'one hull of all' if group_all else 'one per input feature'}), got {count}",
    )


# -- measure_length ---------------------------------------------------------------------------


def measure_length(ctx: RunContext) -> None:
    set_engine(ctx)
    gdf = read_input(ctx)
    _refuse_existing_field(ctx, gdf, "length_m")
    lengths, _ = _geodesic_measures(gdf)
    crs = gdf.crs
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
            "reason": f"geodesic length on the {_ellipsoid(gdf)} ellipsoid of the layer's own datum; no planar "
            "projection's scale enters the number",
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    out = gdf.copy()
    out["length_m"] = lengths
    present = [v for v in lengths if v is not None]
    attrs = [c for c in out.columns if c != out.geometry.name]
    ctx.answer = {
        "total_length_m": float(sum(present)),
        "feature_count": len(out),
        "features_without_geometry": len(lengths) - len(present),
        "method": "geodesic",
        "rows": out[attrs].head(MAX_ANSWER_ROWS).to_dict(orient="records"),
        "rows_truncated": len(out) > MAX_ANSWER_ROWS,
    }
    ctx.check(
        "x-mapsmith:lengths_non_negative",
        all(v >= 0 and math.isfinite(v) for v in present),
        f"{len(present)} lengths, minimum {min(present) if present else 0:.3f} m; "
        f"{len(lengths) - len(present)} features without geometry have no length (null)",
    )
    if len(present) < len(lengths):
        ctx.notes.append(f"{len(lengths) - len(present)} features have no geometry: their length_m is null")
    write_output(ctx, out)


# -- repair_geometries ------------------------------------------------------------------------


def repair_geometries(ctx: RunContext) -> None:
    import tempfile
    from collections import Counter
    from pathlib import Path

    import shapely

    set_engine(ctx)
    source = ctx.paths["input_path"]
    layer = ctx.layers.get("input_path")
    before = io.read_layer(source, layer)  # the very frame the repair helper reads
    with tempfile.TemporaryDirectory(prefix="mapsmith-repair-") as scratch:
        # The runner's own output repair, applied on request: written to a scratch GeoParquet (keeps
        # feature order and doubles), so each repaired feature can be compared with its original.
        repaired_path = Path(scratch) / "repaired.parquet"
        helper = io.repair_geometries(source, repaired_path, layer)
        after = io.read_layer(repaired_path)
    geoms_before, geoms_after = before.geometry.values, after.geometry.values
    present = ~shapely.is_missing(geoms_before)
    invalid = _indices(present & ~shapely.is_valid(geoms_before))
    reasons = shapely.is_valid_reason(geoms_before[invalid]) if invalid else []
    still_invalid = _indices(~shapely.is_missing(geoms_after) & ~shapely.is_valid(geoms_after))
    emptied = [i for i in invalid if shapely.is_empty(geoms_after[i])]
    _, areas_before = _geodesic_measures(before.iloc[invalid]) if invalid else ([], [])
    lengths_before, _ = _geodesic_measures(before.iloc[invalid]) if invalid else ([], [])
    lengths_after, areas_after = _geodesic_measures(after.iloc[invalid]) if invalid else ([], [])
    dims = shapely.get_dimensions(geoms_before)
    repaired = []
    for k, i in enumerate(invalid):
        entry: dict[str, Any] = {
            "feature_index": i,
            "reason": str(reasons[k]).split("[")[0],
            "detail": str(reasons[k]),
            "geometry_type_before": geoms_before[i].geom_type,
            "geometry_type_after": geoms_after[i].geom_type,
            "empty_after": i in emptied,
        }
        if dims[i] == 2:
            entry.update(area_m2_before=areas_before[k], area_m2_after=areas_after[k] or 0.0)
        elif dims[i] == 1:
            entry.update(length_m_before=lengths_before[k], length_m_after=lengths_after[k] or 0.0)
        repaired.append(entry)
    by_reason = dict(sorted(Counter(e["reason"] for e in repaired).items()))
    report = {
        "action": helper.get("action", "shapely.make_valid"),
        "feature_count": len(before),
        "invalid_before": len(invalid),
        "invalid_after": len(still_invalid),
        "by_reason": by_reason,
        "repaired_feature_indices": invalid[:MAX_ANSWER_ROWS],
        "emptied_feature_indices": emptied[:MAX_ANSWER_ROWS],
        "lower_dimension_parts_dropped": int(helper.get("lower_dimension_parts_dropped", 0)),
        "truncated": len(invalid) > MAX_ANSWER_ROWS,
    }
    ctx.parameters["x-mapsmith:repair_report"] = {**report, "repaired": repaired[:MAX_ANSWER_ROWS]}
    ellipsoid = _ellipsoid(before)
    ctx.answer = {
        **report,
        "repaired": repaired[:MAX_ANSWER_ROWS],
        "measured": f"areas and lengths geodesic on the {ellipsoid} ellipsoid; an invalid polygon's area is "
        "the sum of its rings as drawn (a bow-tie's two lobes cancel)",
    }
    ctx.notes.append(
        f"{len(invalid)} of {len(before)} input geometries were invalid ("
        + (", ".join(f"{n} {r}" for r, n in by_reason.items()) or "none")
        + f"); after make_valid {len(still_invalid)} remain invalid and {len(emptied)} became empty; "
        f"{report['lower_dimension_parts_dropped']} lower-dimension parts were dropped to keep each "
        "feature's dimension; valid features were written unchanged"
    )
    ctx.check(
        "x-mapsmith:features_not_emptied",
        not emptied,
        f"{len(invalid)} features repaired, {len(emptied)} of them left empty: {emptied[:20] or 'none'}",
        critical=False,
    )
    if emptied:
        ctx.warn(
            "GEOMETRY_EMPTIED_BY_REPAIR",
            f"{len(emptied)} invalid features had no part of their own dimension left after make_valid (a "
            f"polygon of zero area, a line of one point) and are written with an empty geometry "
            f"(feature indices {emptied[:20]})",
            "inspect those features in the input: they had no area (or length) to keep",
        )
    write_output(ctx, after)


# -- cluster_points_by_distance ---------------------------------------------------------------


def _union_find_components(tree_geoms: Any, distance: float) -> list[int]:
    """For each geometry, the smallest index of the group it chains into: geometries within
    ``distance`` of each other (inclusive) are linked, and links are transitive (single linkage)."""
    import shapely

    tree = shapely.STRtree(tree_geoms)
    parent = list(range(len(tree_geoms)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for start in range(0, len(tree_geoms), QUERY_BLOCK):
        block = tree_geoms[start : start + QUERY_BLOCK]
        pairs = tree.query(block, predicate="dwithin", distance=distance)
        for a, b in zip((pairs[0] + start).tolist(), pairs[1].tolist(), strict=True):
            if a < b:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    return [find(i) for i in range(len(tree_geoms))]


def cluster_points_by_distance(ctx: RunContext) -> None:
    import pandas as pd

    set_engine(ctx)
    distance = ctx.arguments["distance_meters"]
    min_points = ctx.arguments["min_points"]
    gdf = read_input(ctx)
    _refuse_existing_field(ctx, gdf, "cluster_id")
    metric = to_metric(ctx, gdf, "clustered")
    _measured_only(ctx, metric, "distances between points were measured")
    units = metric.units(distance)
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
    geoms = metric.frame.geometry.values
    placed = _indices(~_absent(geoms))
    roots = _union_find_components(geoms[placed], units) if placed else []
    sizes: dict[int, int] = {}
    for r in roots:
        sizes[r] = sizes.get(r, 0) + 1
    ids: dict[int, int] = {}  # root -> cluster_id, numbered by first appearance in the input
    labels: list[int | None] = [None] * len(gdf)
    for i, r in zip(placed, roots, strict=True):
        if sizes[r] < min_points:
            continue
        labels[i] = ids.setdefault(r, len(ids) + 1)
    out = gdf.copy()
    out["cluster_id"] = pd.array(labels, dtype="Int64")
    clusters = [{"cluster_id": cid, "size": sizes[r]} for r, cid in ids.items()]
    unclustered = sum(sizes[r] for r in sizes if sizes[r] < min_points)
    without = len(gdf) - len(placed)
    ctx.answer = {
        "cluster_count": len(clusters),
        "cluster_sizes": clusters[:MAX_ANSWER_ROWS],
        "clusters_truncated": len(clusters) > MAX_ANSWER_ROWS,
        "largest_cluster_size": max((c["size"] for c in clusters), default=0),
        "unclustered_count": unclustered,
        "features_without_position": without,
        "distance_meters": distance,
        "min_points": min_points,
        "linkage": "single: points within distance_meters of each other (inclusive) chain into one cluster",
    }
    if unclustered:
        ctx.notes.append(
            f"{unclustered} points lie in groups smaller than min_points={min_points}: their cluster_id is null"
        )
    if without:
        ctx.warn(
            "FEATURES_WITHOUT_POSITION",
            f"{without} features have no geometry (null or empty): they are written with a null cluster_id",
            "select the features with a geometry first if they should not be in the output",
        )
    write_output(ctx, out)


# -- nearest_neighbour_index ------------------------------------------------------------------


def nearest_neighbour_index(ctx: RunContext) -> None:
    import numpy as np
    import shapely

    set_engine(ctx)
    given_area = ctx.arguments.get("area_m2")
    gdf = read_input(ctx)
    geoms = gdf.geometry.values
    path = ctx.arguments["input_path"]
    absent = _indices(_absent(geoms))
    if absent:
        raise InputError(
            f"{len(absent)} of {len(gdf)} features have no position (null or empty geometry); the index "
            "counts points, and a point without a position cannot be counted or measured",
            code="FEATURES_WITHOUT_POSITION",
            evidence={"path": path, "count": len(absent), "feature_indices": absent[:20]},
            hint="select the features that have a geometry first, then run the index on them",
        )
    parts = shapely.get_num_geometries(geoms)
    multi = _indices(parts > 1)
    if multi:
        raise InputError(
            f"{len(multi)} features are multi-points with more than one point; the index needs one point per event",
            code="MULTIPOINT_REFUSED",
            evidence={"path": path, "count": len(multi), "feature_indices": multi[:20]},
            hint="split multi-part features into single points first, so each point is counted once",
        )
    n = len(gdf)
    if n < 2:
        raise InputError(
            f"the nearest-neighbour index needs at least 2 points; {path} has {n}",
            code="NOT_ENOUGH_POINTS",
            evidence={"path": path, "count": n},
            hint="run it on a layer with two or more points",
        )
    metric = to_metric(ctx, gdf, "measured")
    _measured_only(ctx, metric, "nearest-neighbour distances and the hull area were measured")
    xy = shapely.get_coordinates(metric.frame.geometry.values)
    unit = metric.metres_per_unit
    unique, inverse, counts = np.unique(xy, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    nearest_unique = np.zeros(len(unique))
    if len(unique) > 1:
        # Coincident points are one tree entry: STRtree's exclusive query skips equal geometries,
        # which would otherwise hide a nearest neighbour at distance 0.
        tree_points = shapely.points(unique)
        (source, _), distances = shapely.STRtree(tree_points).query_nearest(
            tree_points, exclusive=True, return_distance=True, all_matches=False
        )
        nearest_unique[source] = distances
    nearest = np.where(counts[inverse] > 1, 0.0, nearest_unique[inverse]) * unit
    coincident = int((counts[inverse] > 1).sum())
    hull_area = float(shapely.convex_hull(shapely.multipoints(xy)).area) * unit * unit
    if given_area is None:
        if hull_area <= 0:
            raise InputError(
                "the points' convex hull has no area (they are collinear or coincide), so it cannot be the study area",
                code="STUDY_AREA_ZERO",
                evidence={"path": path, "count": n, "distinct_positions": len(unique)},
                hint="pass the study area in square metres as area_m2",
            )
        area, area_source = hull_area, "convex hull of the points (area_m2 not given)"
    else:
        area, area_source = float(given_area), "the area_m2 argument"
        ctx.check(
            "x-mapsmith:study_area_covers_points",
            hull_area <= area * (1 + RELATIVE_SLACK),
            f"the points' convex hull covers {hull_area:,.3f} m2; the stated study area is {area:,.3f} m2",
            critical=False,
        )
        if hull_area > area * (1 + RELATIVE_SLACK):
            ctx.warn(
                "STUDY_AREA_SMALLER_THAN_POINTS",
                f"area_m2={area:,.1f} is smaller than the convex hull of the points ({hull_area:,.1f} m2)",
                "check the unit: area_m2 is in square metres (1 km2 = 1,000,000 m2; 1 ha = 10,000 m2)",
            )
    observed = float(nearest.mean())
    density = n / area
    expected = 0.5 / math.sqrt(density)
    standard_error = CLARK_EVANS_SE / math.sqrt(n * density)
    z = (observed - expected) / standard_error
    p = math.erfc(abs(z) / math.sqrt(2))
    ratio = observed / expected
    if abs(z) < Z_CRITICAL_5_PERCENT:
        pattern = "not significantly different from random (5 % level)"
    else:
        pattern = "clustered" if ratio < 1 else "dispersed"
    ctx.answer = {
        "point_count": n,
        "observed_mean_distance_m": observed,
        "expected_mean_distance_m": expected,
        "nearest_neighbour_ratio": ratio,
        "z_score": z,
        "p_value": p,
        "pattern": pattern,
        "study_area_m2": area,
        "study_area_source": area_source,
        "convex_hull_area_m2": hull_area,
        "coincident_points": coincident,
        "computed_in": crs_label(metric.crs),
        "formula": "Clark & Evans (1954): R = observed / (0.5 / sqrt(n / A)); z = (observed - expected) / "
        "(0.26136 / sqrt(n^2 / A)); no edge correction",
    }
    ctx.notes.append(
        f"study area {area:,.3f} m2 from {area_source}; without an edge correction, points near the study "
        "area's edge find their nearest neighbour farther away than inside, which raises R"
    )
