"""nearest_join on SedonaDB: the planar nearest from exact distance joins over a widening radius; the
tie rule and the geodesic measures are join_ops.nearest's. It must never import sedonadb when imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith_opensource.join_ops import nearest as nearest_ops
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.sedonadb_ops import (
    ENGINE,
    NEAREST_MIN_FEATURES,
    SEDONADB_PREFERENCE,
    WKB_PATH_NOTE,
    _connection,
    _eligible,
    _geometry_views,
    _set_engine,
)

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext


REGISTRATIONS = (
    Registration(
        "nearest_join",
        "nearest_join_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="nearest_join_eligible",
    ),
)


# -- nearest_join: the planar nearest by SedonaDB's distance join ---------------------------------

NEAREST_ROUND_FACTOR = 4.0  # each search round widens the radius this much


def nearest_join_eligible(ctx: RunContext) -> str | None:
    return _eligible(
        ctx,
        ("input_path", "join_path"),
        NEAREST_MIN_FEATURES,
        "SedonaDB's nearest search",
        "at 1,000,000 points: sedonadb_ops.NEAREST_MIN_FEATURES",
    )


def _extent_diagonal(*geoms: np.ndarray) -> float:
    import numpy as np
    import shapely

    boxes = np.array([shapely.total_bounds(g) for g in geoms if len(g)])
    if not len(boxes) or np.isnan(boxes).all():
        return 0.0
    x0, y0 = np.nanmin(boxes[:, 0]), np.nanmin(boxes[:, 1])
    x1, y1 = np.nanmax(boxes[:, 2]), np.nanmax(boxes[:, 3])
    return float(np.hypot(x1 - x0, y1 - y0))


def sedonadb_planar_nearest(
    left: np.ndarray, right: np.ndarray, limit: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What shapely's STRtree.query_nearest(all_matches=True, max_distance=limit) gives, from SedonaDB.

    SedonaDB's KNN join measures from centroids where a geometry is not a point, so this uses exact
    distance joins (ST_DWithin, ST_Distance: GEOS, as shapely) over a radius that widens each round.
    An input row is settled in the first round that finds any join row within the radius: its nearest
    lies within that radius too, so every row at the least distance has been found. The last round's
    radius is the diagonal of both layers' extent, which holds every pair.
    """

    import numpy as np
    import shapely

    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))
    usable_left = ~(shapely.is_missing(left) | shapely.is_empty(left))
    usable_right = ~(shapely.is_missing(right) | shapely.is_empty(right))
    if not usable_left.any() or not usable_right.any():
        return none
    diagonal = _extent_diagonal(left[usable_left], right[usable_right])
    if limit is not None:
        radii = [float(limit)]
    else:
        minx, miny, maxx, maxy = shapely.total_bounds(right[usable_right])
        spacing = max(float(np.sqrt(max((maxx - minx) * (maxy - miny), 0.0) / usable_right.sum())), diagonal * 1e-6)
        radii = []
        radius = spacing
        while radius < diagonal:
            radii.append(radius)
            radius *= NEAREST_ROUND_FACTOR
        radii.append(max(diagonal, spacing))
    found_i, found_j, found_d = [], [], []
    pending = np.flatnonzero(usable_left)
    with _geometry_views(right) as (rv,):
        for radius in radii:
            if not len(pending):
                break
            subset = np.full(len(left), None, dtype=object)
            subset[pending] = left[pending]
            with _geometry_views(subset) as (lv,):
                got = (
                    _connection()
                    .sql(
                        f"SELECT l.n AS i, r.n AS j, ST_Distance(l.g, r.g) AS d FROM {lv} AS l "
                        f"JOIN {rv} AS r ON ST_DWithin(l.g, r.g, {radius!r})"
                    )
                    .to_arrow_table()
                )
            i = got.column("i").to_numpy().astype(np.int64)
            j = got.column("j").to_numpy().astype(np.int64)
            d = got.column("d").to_numpy().astype(float)
            if len(i):
                least = np.full(len(left), np.inf)
                np.minimum.at(least, i, d)
                keep = d == least[i]  # every join row at exactly the least distance, as all_matches=True
                found_i.append(i[keep])
                found_j.append(j[keep])
                found_d.append(d[keep])
            pending = np.setdiff1d(pending, i)
    if not found_i:
        return none
    i, j, d = np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_d)
    order = np.lexsort((j, i))  # STRtree's order: input row, then tree row
    return i[order], j[order], d[order]


def nearest_join_sedonadb(ctx: RunContext) -> None:
    """nearest_join with the planar nearest found by SedonaDB; tie rule, geodesic measures and the rest are
    join_ops.nearest's code."""
    _set_engine(ctx, ("input_path", "join_path"), NEAREST_MIN_FEATURES)
    ctx.notes.append(
        f"{WKB_PATH_NOTE}; the planar nearest was found with exact distance joins (ST_DWithin over a radius "
        f"widened {NEAREST_ROUND_FACTOR:g}x a round, ST_Distance), not ST_KNN, which measures from centroids"
    )
    nearest_ops.nearest_join(ctx, planar_nearest=sedonadb_planar_nearest)
