"""Point-pattern operations on the opensource stack: distance clustering and the nearest-neighbour index.

Distances are in metres, measured in the frame ``common.to_metric`` chose and recorded; only the
measurement uses that frame, and points are written in input_path's CRS. A point without a position
is written with a null result and counted, never dropped. Engines are imported inside functions.
Registered through ``geometry_ops.REGISTRATIONS`` (these operations were split out of it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label
from mapsmith.errors import InputError
from mapsmith.paging import page
from mapsmith_opensource.common import read_input, set_engine, to_metric, write_output
from mapsmith_opensource.measure_lengths import warn_measured_in_2d
from mapsmith_opensource.measures import absent as _absent
from mapsmith_opensource.measures import indices, measured_only, refuse_existing_field

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

# A check compares distances computed in two ways; this much relative slack absorbs float rounding.
RELATIVE_SLACK = 1e-9
# Clark & Evans (1954): the standard error of the mean nearest-neighbour distance under complete
# spatial randomness is 0.26136 / sqrt(n * density).
CLARK_EVANS_SE = 0.26136
# |z| above this rejects complete spatial randomness at the 5 % level (two-sided).
Z_CRITICAL_5_PERCENT = 1.959964
# Features are queried against the STRtree in blocks, so memory grows with the pairs of one block.
QUERY_BLOCK = 8192


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
    refuse_existing_field(ctx, gdf, "cluster_id")
    metric = to_metric(ctx, gdf, "clustered")
    measured_only(ctx, metric, "distances between points were measured")
    units = metric.units(distance)
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
    geoms = metric.frame.geometry.values
    placed = indices(~_absent(geoms))
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
    shown, window = page(clusters, ctx.arguments)
    ctx.answer = {
        "cluster_count": len(clusters),
        "cluster_sizes": shown,
        "page": window,
        "largest_cluster_size": max((c["size"] for c in clusters), default=0),
        "unclustered_count": unclustered,
        "features_without_position": without,
        "distance_meters": distance,
        "min_points": min_points,
        "linkage": "single: points within distance_meters of each other (inclusive) chain into one cluster",
    }
    warn_measured_in_2d(
        ctx,
        gdf,
        "distances between points",
        "clusters chain points within distance_meters horizontally; Z does not enter the distance",
    )
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
    absent = indices(_absent(geoms))
    if absent:
        raise InputError(
            f"{len(absent)} of {len(gdf)} features have no position (null or empty geometry); the index "
            "counts points, and a point without a position cannot be counted or measured",
            code="FEATURES_WITHOUT_POSITION",
            evidence={"path": path, "count": len(absent), "feature_indices": absent[:20]},
            hint="select the features that have a geometry first, then run the index on them",
        )
    parts = shapely.get_num_geometries(geoms)
    multi = indices(parts > 1)
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
    measured_only(ctx, metric, "nearest-neighbour distances and the hull area were measured")
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
    warn_measured_in_2d(
        ctx,
        gdf,
        "nearest-neighbour distances and the study area",
        "the Clark & Evans index is a 2-D statistic of point positions on the map; Z does not enter it",
    )
    ctx.notes.append(
        f"study area {area:,.3f} m2 from {area_source}; without an edge correction, points near the study "
        "area's edge find their nearest neighbour farther away than inside, which raises R"
    )
