"""The opensource stack's geometry operations: simplify, centroids, points on surface, convex hulls
and explicit repair.

Every distance or area is in metres: geodesic on the layer's own ellipsoid, or measured in the frame
``common.to_metric`` chose and recorded. Degrees are never read as a length. Operations that only
choose a point or a hull from the data's own vertices (point_on_surface, convex_hull) work in
input_path's CRS, so their results hold exactly against the geometry as stored. Nothing is dropped:
a feature whose result is empty, degenerate or unplaceable is written, counted and reported. Engines
are imported inside functions only.

measure_length, measure_area and the geodesic helpers live in ``measures``; the point-pattern
operations (cluster_points_by_distance, nearest_neighbour_index) in ``point_pattern_ops``, which this
module's REGISTRATIONS still names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label
from mapsmith.errors import InputError
from mapsmith.paging import page
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    read_input,
    set_engine,
    to_metric,
    write_output,
)
from mapsmith_opensource.derived import measurable
from mapsmith_opensource.measure_lengths import warn_measured_in_2d, warn_z_dropped
from mapsmith_opensource.measures import absent as _absent
from mapsmith_opensource.measures import ellipsoid_name as _ellipsoid
from mapsmith_opensource.measures import geodesic_measures as _geodesic_measures
from mapsmith_opensource.measures import indices as _indices
from mapsmith_opensource.measures import native_crs_decision as _native_crs_decision
from mapsmith_opensource.measures import total as _total
from mapsmith_opensource.point_pattern_ops import cluster_points_by_distance as cluster_points_by_distance
from mapsmith_opensource.point_pattern_ops import nearest_neighbour_index as nearest_neighbour_index
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration("simplify_layer", "simplify_layer"),
    Registration("centroid_layer", "centroid_layer"),
    Registration("point_on_surface", "point_on_surface"),
    Registration("convex_hull", "convex_hull"),
    Registration("repair_geometries", "repair_geometries"),
    Registration("cluster_points_by_distance", "cluster_points_by_distance"),
    Registration("nearest_neighbour_index", "nearest_neighbour_index"),
)

# repair_geometries lists this many repaired features in full in the manifest (the answer pages all).
MANIFEST_ROWS = 200
# A check compares distances computed in two ways; this much relative slack absorbs float rounding.
RELATIVE_SLACK = 1e-9


# -- simplify_layer ---------------------------------------------------------------------------


def simplify_layer(ctx: RunContext) -> None:
    import numpy as np
    import shapely

    set_engine(ctx)
    tolerance = ctx.arguments["tolerance_meters"]
    preserve = ctx.arguments["preserve_topology"]
    gdf = read_input(ctx)
    before_input = gdf.geometry.values
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
    chosen, window = page(range(len(gdf)), ctx.arguments)  # per-feature rows page (mapsmith.paging)
    for i in chosen:
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
        "page": window,
    }
    ctx.notes.append(
        f"lengths and areas before and after simplification were measured geodesically on the {ellipsoid} "
        f"ellipsoid, not in the analysis CRS: vertices {int(vertices_before.sum())} -> "
        f"{int(vertices_after.sum())}; line length {_fmt(ctx.answer['line_length_m'])} m; polygon area "
        f"{_fmt(ctx.answer['polygon_area_m2'])} m2"
    )
    warn_measured_in_2d(
        ctx,
        gdf,
        "the lengths, perimeters and areas before and after simplification",
        "the simplification itself keeps each vertex's Z; use measure_length with use_z=true on the output for "
        "lengths along the slope",
    )
    warn_z_dropped(ctx, before_input, out.geometry.values, "they were simplified in a 2-D analysis CRS")
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
    gdf = measurable(ctx, read_input(ctx))
    metric = to_metric(ctx, gdf, "reduced to centroids")
    geoms = metric.frame.geometry.values
    centroids = shapely.centroid(geoms)
    polygons = (shapely.get_dimensions(geoms) == 2) & ~_absent(geoms)
    outside = _indices(polygons & ~shapely.within(centroids, geoms))
    out = metric.back(ctx, metric.frame.set_geometry(centroids, crs=metric.crs))
    without = _indices(_absent(geoms))
    shown, window = page(outside, ctx.arguments)  # every index readable, a page at a time (mapsmith.paging)
    ctx.answer = {
        "feature_count": len(gdf),
        "computed_in": crs_label(metric.crs),
        "centroids_outside_their_polygon": len(outside),
        "outside_feature_indices": shown,
        "page": window,
        "features_without_geometry": len(without),
    }
    if outside:
        ctx.warn(
            "CENTROID_OUTSIDE_POLYGON",
            f"{len(outside)} polygon centroids fall outside their own polygon (feature indices {outside[:20]}); "
            "a centroid is the centre of mass, which a C- or L-shape does not contain",
            "use point_on_surface for a point guaranteed inside each polygon (labels, joins by location)",
        )
    warn_z_dropped(ctx, gdf.geometry.values, out.geometry.values, "a centroid is computed in 2-D (GEOS)")
    if without:
        ctx.notes.append(f"{len(without)} features have no geometry and are written without a centroid")
    write_output(ctx, out)


# -- point_on_surface -------------------------------------------------------------------------


def point_on_surface(ctx: RunContext) -> None:
    import shapely

    set_engine(ctx)
    gdf = measurable(ctx, read_input(ctx))
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
    warn_z_dropped(ctx, geoms, points, "GEOS placed their point inside the feature in 2-D")
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
    shown, window = page(degenerate, ctx.arguments)  # every degenerate hull readable, a page at a time
    ctx.answer = {
        "group_all": group_all,
        "hull_count": len(written),
        "total_hull_area_m2": float(sum(areas)),
        "area_measured": f"geodesic, on the {_ellipsoid(gdf)} ellipsoid",
        "degenerate_hulls": shown,
        "degenerate_count": len(degenerate),
        "page": window,
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
    warn_measured_in_2d(
        ctx, gdf, "hull areas", "a hull is a footprint: its area is horizontal, as measure_area gives it"
    )
    if not group_all:
        warn_z_dropped(ctx, geoms, hull_values, "a convex hull is computed in 2-D (GEOS)")
    if absent.any():
        ctx.notes.append(f"{int(absent.sum())} features have no geometry and contribute to no hull")
    write_output(ctx, out)
    assert ctx.temp_output is not None  # write_output wrote it
    count = io.inspect(ctx.temp_output, None).feature_count
    ctx.check(
        "feature_count_exact",
        count == expected,
        f"expected {expected} features ({'one hull of all' if group_all else 'one per input feature'}), got {count}",
    )


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
        "emptied_count": len(emptied),
        "by_reason": by_reason,
        "lower_dimension_parts_dropped": int(helper.get("lower_dimension_parts_dropped", 0)),
    }
    # The manifest keeps the first MANIFEST_ROWS features in full (a record must stay readable); the
    # answer pages through all of them, so an agent can read every repaired feature.
    ctx.parameters["x-mapsmith:repair_report"] = {
        **report,
        "repaired": repaired[:MANIFEST_ROWS],
        "repaired_listed": min(len(repaired), MANIFEST_ROWS),
    }
    shown, window = page(repaired, ctx.arguments)
    ellipsoid = _ellipsoid(before)
    ctx.answer = {
        **report,
        "repaired": shown,
        "repaired_feature_indices": [e["feature_index"] for e in shown],
        "emptied_feature_indices": [e["feature_index"] for e in shown if e["empty_after"]],
        "page": window,
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
    if invalid:
        warn_measured_in_2d(
            ctx,
            before.iloc[invalid],
            "the areas and lengths before and after repair",
            "make_valid keeps Z; use measure_length with use_z=true on the output for lengths along the slope",
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
