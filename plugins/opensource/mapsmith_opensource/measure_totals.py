"""Totals over features that overlap one another: the sum counts every overlap once per feature
covering it, so where features overlap the total also reports the union, and a warning gives both.

Overlap means the interiors meet in the measure's own dimension: two polygons sharing area
(DE-9IM interior/interior of dimension 2), two lines sharing a stretch (dimension 1). Polygons that
only touch along an edge, and lines that only cross at a point, do not overlap. Only the features
that overlap another are unioned (GEOS, through shapely), so a layer without overlaps costs one
spatial-index query.

What this module must never do: replace the sum by the union (both are reported; which one answers
the question is the caller's choice), or leave the union out silently when it cannot be computed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import geopandas as gpd

    from mapsmith.runner import RunContext

# DE-9IM masks: the interiors of the two features intersect in an area / along a line.
OVERLAP_PATTERNS = {2: "2********", 1: "1********"}


@dataclass
class Overlaps:
    """Which features overlap another, and the union total (None when GEOS could not union them)."""

    pairs: int
    feature_indices: list[int]
    union_total: float | None
    union_error: str | None = None


def find_overlaps(
    gdf: gpd.GeoDataFrame, values: list[float | None], dimension: int, measure: Callable[[gpd.GeoDataFrame], float]
) -> Overlaps | None:
    """The overlaps among ``gdf``'s features of ``dimension`` (2 areas, 1 lengths), or None if none.

    ``values`` are the per-feature measures already taken; ``measure`` measures a one-feature frame
    the same way (same method, same CRS), so the union is measured exactly as the features were.
    """
    import numpy as np
    import shapely

    geoms = gdf.geometry.values
    usable = ~(shapely.is_missing(geoms) | shapely.is_empty(geoms)) & (shapely.get_dimensions(geoms) == dimension)
    if usable.sum() < 2:
        return None
    rows = np.flatnonzero(usable)
    candidates = geoms[rows]
    left, right = shapely.STRtree(candidates).query(candidates, predicate="intersects")
    keep = left < right
    if dimension == 2:
        # Areas can only overlap where the bounding boxes do with some area: this skips the (slow)
        # DE-9IM test for neighbours that only share an edge, the common case in a tiling of parcels.
        bounds = shapely.bounds(candidates)
        width = np.minimum(bounds[left, 2], bounds[right, 2]) - np.maximum(bounds[left, 0], bounds[right, 0])
        height = np.minimum(bounds[left, 3], bounds[right, 3]) - np.maximum(bounds[left, 1], bounds[right, 1])
        keep &= (width > 0) & (height > 0)
    left, right = left[keep], right[keep]
    if not len(left):
        return None
    hit = shapely.relate_pattern(candidates[left], candidates[right], OVERLAP_PATTERNS[dimension])
    if not hit.any():
        return None
    involved = np.unique(np.concatenate([left[hit], right[hit]]))
    indices = [int(rows[i]) for i in involved]
    total = sum(v for v in values if v is not None)
    try:
        merged = shapely.union_all(candidates[involved])
    except shapely.errors.GEOSException as exc:  # invalid geometries: say so instead of guessing
        return Overlaps(int(hit.sum()), indices, None, str(exc))
    frame = gdf.iloc[[indices[0]]].set_geometry([merged], crs=gdf.crs)
    union_of_involved = measure(frame)
    union_total = total - sum(values[i] or 0.0 for i in indices) + union_of_involved
    return Overlaps(int(hit.sum()), indices, float(union_total))


def report_overlaps(
    ctx: RunContext, found: Overlaps | None, total: float, *, what: str, unit: str, answer_key: str
) -> dict[str, Any]:
    """The answer's fields about overlaps, and the warning that gives both numbers when there are any.

    ``what``: "area" or "length"; ``answer_key``: the union figure's key (``union_area_m2``).
    Without overlaps the union equals the sum and is reported as such.
    """
    if found is None:
        return {answer_key: total, "overlapping_feature_count": 0, "overlapping_pairs": 0}
    shown = found.feature_indices[:20]
    if found.union_total is None:
        ctx.warn(
            "TOTAL_COUNTS_OVERLAPS",
            f"{len(found.feature_indices)} features overlap one another ({_pairs(found.pairs)}; feature indices "
            f"{shown}): the total {what} {total:,.3f} {unit} counts each overlap once per feature, and their union "
            f"could not be computed ({found.union_error})",
            "run repair_geometries on the input, then measure again to get the union as well; dissolve_layer "
            "merges the features if the union is the figure you need",
        )
    else:
        ctx.warn(
            "TOTAL_COUNTS_OVERLAPS",
            f"{len(found.feature_indices)} features overlap one another ({_pairs(found.pairs)}; feature indices "
            f"{shown}): the sum of their {what}s is {total:,.3f} {unit}, counting each overlap once per feature; "
            f"the {what} they cover together (their union) is {found.union_total:,.3f} {unit}",
            f"use {answer_key} for the {what} covered; the per-feature values are each feature's own and stay "
            "correct; dissolve_layer merges overlapping features if you need them as one",
        )
    return {
        answer_key: found.union_total,
        "overlapping_feature_count": len(found.feature_indices),
        "overlapping_pairs": found.pairs,
    }


def _pairs(count: int) -> str:
    return f"{count} overlapping pair" + ("" if count == 1 else "s")
