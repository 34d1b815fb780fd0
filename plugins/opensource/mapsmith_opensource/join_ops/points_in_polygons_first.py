"""count_in_polygons and summarize_points_in_polygons by first polygon, in SedonaDB: points_in_polygons_sql's
"first" path, which groups no point (its grouping by point holds a group per matched point: the memory this path
saves beyond points_in_polygons_sql.GROUPED_MAX_POINTS points).

Each point is counted once, at its first polygon (the lowest-numbered polygon it meets). A point meets another
polygon only if that polygon meets this one, so a pair (i, point) is the point's first exactly when the point meets
none of i's lower-numbered neighbours, and the point is in several polygons exactly when, besides, it meets one of
i's higher-numbered neighbours. Each polygon carries its lower and its higher neighbours as two geometry
collections of the original polygons (neighbours: no overlay, so no rounding), tested with the same ST_Intersects
as the join: per polygon the query sums the pairs that are a point's first (the points counted) and those of a
point in several polygons. A point in several polygons lies inside overlapping ones when it is in the interior of
one of them (points_in_polygons.pair_counts); when it is not in its first polygon's interior, the query returns it,
and a small second query over those points alone (interior_sql) asks whether any polygon holds it in its interior.
A pair's neighbour tests cost in proportion to the coordinates of its polygon's neighbours, so where the polygons
overlap more (FIRST_POLYGON_MAX_COORDINATES, measured) the points are grouped instead. Written by hand because no
engine counts distinct points per polygon without a grouping by point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith_opensource.join_ops.points_in_polygons_sql import column_total

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np


def count(
    run: Callable[[str], Any],
    light: str,
    register: Callable[[tuple[np.ndarray, np.ndarray] | None], str],
    polygons: Any,
) -> tuple[tuple[Any, int, int, int] | None, str | None]:
    """The per-polygon rows (points_in_polygons_sql.polygon_rows_sql's columns but ``edge``) and the points counted,
    in several polygons and inside overlapping ones, by first polygon; or None where this path does not take the run
    (neighbours of too many coordinates, too many points aside, tests that disagree), with the polygons' relation when
    it was registered (the grouping then reads it). ``run``, ``light`` and ``register`` as aggregate's; ``polygons``
    the polygons' geometries."""
    geoms, left, right = meeting_pairs(polygons)
    if neighbour_coordinates(geoms, left, right) > FIRST_POLYGON_MAX_COORDINATES:
        return None, None
    zones = register(neighbours(geoms, left, right))
    found = run(first_polygon_sql(light, zones))
    pairs_found, counted, several = (column_total(found, c) for c in ("times", "firsts", "several"))
    on_boundary = on_boundaries(run, found.column("aside"), zones)
    # Each several-polygon point has two pairs at least: what consistent tests always give
    if on_boundary is None or not (0 <= on_boundary <= several <= counted and counted + several <= pairs_found):
        return None, zones
    rows = found.drop_columns(["firsts", "several", "aside"])
    return (rows, counted, several, several - on_boundary), zones


def first_polygon_sql(points: str, zones: str) -> str:
    """Per polygon, from an inner join: the polygon_rows_sql columns but ``edge``, and ``firsts`` (the pairs that
    are their point's first: the point meets none of the polygon's lower neighbours), ``several`` (first pairs
    whose point meets a higher neighbour too) and ``aside``, the points (WKB) of the several-polygon first pairs
    whose point is not in the polygon's interior (null when none). ``points`` has g and v, ``zones`` n, g, and
    lower and higher (neighbours' collections, null where none)."""
    return (
        "SELECT k, count(*) AS times, count(v) AS nv, sum(v) AS sv, min(v) AS mn, max(v) AS mx, avg(v) AS av, "
        "count(*) FILTER (WHERE v IS NULL) AS nulls, sum(f) AS firsts, sum(m) AS several, "
        "array_agg(ST_AsBinary(g)) FILTER (WHERE m = 1 AND NOT inside) AS aside FROM ("
        "SELECT k, v, g, inside, f, CASE WHEN f = 1 AND higher IS NOT NULL AND ST_Intersects(higher, g) THEN 1 "
        "ELSE 0 END AS m FROM ("
        "SELECT t.n AS k, p.v AS v, p.g AS g, t.higher AS higher, ST_Contains(t.g, p.g) AS inside, "
        "CASE WHEN t.lower IS NULL THEN 1 WHEN ST_Intersects(t.lower, p.g) THEN 0 ELSE 1 END AS f "
        f"FROM {points} AS p JOIN {zones} AS t ON ST_Intersects(t.g, p.g))) GROUP BY k"
    )


def interior_sql(xs: list[float], ys: list[float], zones: str) -> str:
    """For each point (x, y) given, by its position in the lists: whether a polygon of ``zones`` (n, g) holds it in
    its interior, by the engine's own ST_Contains. The coordinates are Python's shortest round-trip forms, read back
    to the same doubles; each has an exponent, so that DuckDB reads a DOUBLE literal rather than a DECIMAL."""

    def number(value: float) -> str:
        text = repr(float(value))
        return text if "e" in text else f"{text}e0"

    rows = ", ".join(f"({n}, {number(x)}, {number(y)})" for n, (x, y) in enumerate(zip(xs, ys, strict=True)))
    return (
        "SELECT q.id AS id, bool_or(ST_Contains(t.g, ST_Point(q.x, q.y))) AS interior "
        f"FROM (VALUES {rows}) AS q(id, x, y) JOIN {zones} AS t ON ST_Intersects(t.g, ST_Point(q.x, q.y)) GROUP BY q.id"
    )


def meeting_pairs(geometries: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The polygons as an array, and the pairs (left < right) of them that intersect (touching included)."""
    import numpy as np
    import shapely

    geoms = np.asarray(geometries, dtype=object)
    if len(geoms) < 2:
        return geoms, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    left, right = shapely.STRtree(geoms).query(geoms, predicate="intersects")
    keep = left < right
    return geoms, left[keep], right[keep]


# Up to how many coordinates of neighbours a pair's point is tested against, on average, ``count`` counts each
# point at its first polygon; beyond, it groups the points. A pair's tests cost in proportion to the coordinates of
# its polygon's neighbours (neighbour_coordinates), while the grouping's cost does not grow with them. Measured for
# issue 22: whole count_in_polygons runs on SedonaDB, 1,000,000 points, benchmarks/scale_data.make_inputs' 10,000
# zones (17 coordinates each) scaled about their centres so that each meets more, warm, one fresh process each, load
# 1.3-1.9 (/tmp scratch script, not in the repo), first polygon against the grouping grouped_sql replaced (itself
# slower than grouped_sql, measured in the module's docstring):
#   scale  neighbours (mean, area-weighted)  coordinates per pair  first polygon (s)     grouped (s)
#   1      3.2, 3.6                          62                    2.24, 1.67            2.94, 2.57
#   1.25   5.0, 5.7                          97                    3.49, 2.59, 2.96      3.24, 3.43, 2.63
#   1.5    7.1, 8.2                          139                   4.28                  2.81
#   2      12.6, 14.5                        246                   14.38                 3.49
#   4      49.7, 56.8                        966                   101.45                8.08
FIRST_POLYGON_MAX_COORDINATES = 80


def neighbour_coordinates(geoms: np.ndarray, left: np.ndarray, right: np.ndarray) -> float:
    """The coordinates of its polygon's neighbours a pair's point is tested against, on average over the pairs as
    the polygons' areas share them out (points spread evenly): sum over the neighbours of each polygon, weighted by
    its area (each polygon alike when none has any)."""
    import numpy as np
    import shapely

    if not len(left):
        return 0.0
    coordinates = shapely.get_num_coordinates(geoms).astype(float)
    per_polygon = np.bincount(left, weights=coordinates[right], minlength=len(geoms))
    per_polygon += np.bincount(right, weights=coordinates[left], minlength=len(geoms))
    areas = np.nan_to_num(shapely.area(geoms))  # a polygon without geometry has no area (NaN)
    total = float(areas.sum())
    return float((per_polygon * areas).sum() / total) if total > 0 else float(per_polygon.mean())


def neighbours(geoms: np.ndarray, left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per polygon, the polygons it meets (meeting_pairs' pairs) with a lower row, and those with a higher row, each
    as one geometry collection of the original polygons (None where there is none)."""
    import numpy as np
    import shapely

    def collections(owner: np.ndarray, other: np.ndarray) -> np.ndarray:
        out = np.full(len(geoms), None, dtype=object)
        if len(owner):
            order = np.argsort(owner, kind="stable")
            owner, other = owner[order], other[order]
            owners = np.unique(owner)
            out[owners] = shapely.geometrycollections(geoms[other], indices=np.searchsorted(owners, owner))
        return out

    return collections(right, left), collections(left, right)


# At most this many points in several polygons but not in their first polygon's interior go to interior_sql (one
# VALUES row each); more take the grouping by point. Such points lie on a polygon's boundary: rare in measured
# data, common only where points were placed on edges.
ASIDE_MAX_POINTS = 10_000


def on_boundaries(run: Callable[[str], Any], aside: Any, zones: str) -> int | None:
    """How many of first_polygon_sql's ``aside`` points (in several polygons, not in their first one's interior) are
    in no polygon's interior: on a boundary their polygons share. None when there are more than ASIDE_MAX_POINTS,
    or the second query misses one of them."""
    import pyarrow.compute as pc
    import shapely

    wkb = pc.list_flatten(aside).drop_null().to_numpy(zero_copy_only=False)
    if len(wkb) == 0:
        return 0
    if len(wkb) > ASIDE_MAX_POINTS:
        return None
    points = shapely.from_wkb(wkb)
    found = run(interior_sql(shapely.get_x(points).tolist(), shapely.get_y(points).tolist(), zones))
    if found.num_rows != len(points):  # each meets its first polygon at least
        return None
    return sum(1 for interior in found.column("interior").to_pylist() if not interior)
