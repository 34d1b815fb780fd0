"""Polygons computed in a plane, returned to longitude/latitude without tearing at 180° or a pole.

A polygon drawn in a projected plane (a UTM zone, an azimuthal equidistant plane) and transformed
vertex by vertex to longitude/latitude is wrong in two places, though every vertex is right: a ring
that crosses the antimeridian jumps from +179° to -179° and, read as planar lon/lat, wraps the long way
round the world; a ring around a pole is not closed at all in lon/lat. This module rewrites only such
polygons, by one rule (RFC 7946 §3.1.9 and the usual GIS reading of EPSG:4326):

* a polygon crossing the antimeridian is split there into parts on each side, cut exactly at ±180°;
* a polygon containing a pole becomes the polygon covering the pole cap: its ring, opened at the
  antimeridian, runs from -180° to +180°, and is closed along ±180° and the pole's own latitude.

Which pole a ring goes round is read in the plane the polygon was computed in (is the pole inside the
ring there?), never guessed from the ring's orientation. It must never touch a polygon whose rings
do not jump across the antimeridian (those are returned as they were), and never move a vertex.

Hand-written because no library we ship does it: Shapely is planar and knows no antimeridian, and
the antimeridian-splitting packages on PyPI handle rings crossing 180° but not the same polygon's
plane-side pole test, which is what decides a cap correctly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from shapely.geometry.base import BaseGeometry

# A step in longitude larger than this between neighbouring vertices is a crossing of ±180°, not
# a step the other way round the world: no edge of a buffer is half the world wide.
JUMP_DEGREES = 180.0


def crossing_mask(geoms: np.ndarray) -> np.ndarray:
    """Which geometries (lon/lat) have a ring whose neighbouring vertices jump across ±180°."""
    import numpy as np
    import shapely

    n = len(geoms)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    rings, ring_owner = shapely.get_rings(geoms, return_index=True)
    if len(rings) == 0:
        return out
    coords, coord_ring = shapely.get_coordinates(rings, return_index=True)
    jump = np.abs(np.diff(coords[:, 0])) > JUMP_DEGREES
    same_ring = coord_ring[1:] == coord_ring[:-1]  # a step between two rings is no edge
    crossing_rings = np.unique(coord_ring[1:][jump & same_ring])
    out[np.unique(ring_owner[crossing_rings])] = True
    return out


def ambiguous_edges(geoms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges (of lines and rings, in lon/lat) spanning more than 180 degrees of longitude between two
    points off the poles: read as geodesics they cross the antimeridian the short way, read as planar
    lon/lat they go the long way round. Returns (feature index, [lon1, lat1, lon2, lat2]) per edge."""
    import numpy as np
    import shapely

    parts, part_owner = shapely.get_parts(geoms, return_index=True)
    polygonal = shapely.get_type_id(parts) == 3
    rings, ring_part = shapely.get_rings(parts[polygonal], return_index=True)
    lines = parts[shapely.get_type_id(parts) == 1]
    line_owner = part_owner[shapely.get_type_id(parts) == 1]
    ring_owner = part_owner[polygonal][ring_part]
    paths = np.concatenate([rings, lines])
    owners = np.concatenate([ring_owner, line_owner]).astype(int)
    if len(paths) == 0:
        return np.zeros(0, dtype=int), np.zeros((0, 4))
    coords, path = shapely.get_coordinates(paths, return_index=True)
    a, b = coords[:-1], coords[1:]
    same = path[1:] == path[:-1]
    off_pole = (np.abs(a[:, 1]) < 90) & (np.abs(b[:, 1]) < 90)
    bad = same & off_pole & (np.abs(b[:, 0] - a[:, 0]) > JUMP_DEGREES)
    return owners[path[1:][bad]], np.column_stack([a[bad], b[bad]])


def wrap_polygon(lonlat: BaseGeometry, plane: BaseGeometry, north_xy: Any, south_xy: Any) -> BaseGeometry:
    """``lonlat`` (the vertex-by-vertex transform of ``plane``) split at ±180° and closed over a pole.

    ``plane`` is the same polygon in the plane it was computed in, part for part and ring for ring;
    ``north_xy`` / ``south_xy`` are the poles' coordinates in that plane (None where the plane cannot
    hold one). Raises ``ValueError`` for a ring that goes round a pole that neither pole's plane
    position lies inside (the plane is not the one the polygon came from).
    """
    import shapely

    pieces = []
    for part_ll, part_plane in zip(shapely.get_parts(lonlat), shapely.get_parts(plane), strict=True):
        rings_ll = [part_ll.exterior, *part_ll.interiors]
        rings_plane = [part_plane.exterior, *part_plane.interiors]
        regions = [
            _ring_region(r_ll, r_pl, north_xy, south_xy) for r_ll, r_pl in zip(rings_ll, rings_plane, strict=True)
        ]
        outer, holes = regions[0], regions[1:]
        if holes:
            outer = outer.difference(shapely.union_all([_copies(h) for h in holes]))
        pieces.extend(_fold_into_world(outer))
    return shapely.union_all(pieces)


def _copies(region: BaseGeometry) -> BaseGeometry:
    """A region together with its copies one turn east and west, so a hole removes area on every sheet."""
    import shapely
    from shapely import affinity

    return shapely.union_all([affinity.translate(region, xoff=turn) for turn in (-360.0, 0.0, 360.0)])


def _fold_into_world(region: BaseGeometry) -> list[BaseGeometry]:
    """The parts of an unwrapped region, each moved by whole turns into -180°..180°."""
    import shapely
    from shapely import affinity
    from shapely.geometry import box

    out: list[BaseGeometry] = []
    for turn in (-2, -1, 0, 1, 2):
        # Windows cut exactly at odd multiples of 180: after the shift the cut lies exactly on ±180.
        window = box(-180.0 + 360.0 * turn, -90.0, 180.0 + 360.0 * turn, 90.0)
        piece = region.intersection(window)
        polygons = [p for p in shapely.get_parts(piece) if p.geom_type in ("Polygon", "MultiPolygon") and p.area > 0]
        out.extend(affinity.translate(p, xoff=-360.0 * turn) for p in polygons)
    return out


def _ring_region(ring_ll: Any, ring_plane: Any, north_xy: Any, south_xy: Any) -> BaseGeometry:
    """The region one ring bounds, in unwrapped longitude (which may run past ±180°)."""
    import numpy as np
    from shapely.geometry import Point, Polygon

    coords = np.asarray(ring_ll.coords)[:-1, :2]
    lon, lat = coords[:, 0], coords[:, 1]
    unwrapped = np.unwrap(lon, period=360.0)
    closing = unwrapped[0] - (unwrapped[-1] + _step(lon[-1], lon[0]))
    turns = round(-closing / 360.0)
    if turns == 0:
        return Polygon(np.column_stack([unwrapped, lat]))
    pole_plane = Polygon(np.asarray(ring_plane.coords)[:, :2])
    if north_xy is not None and pole_plane.contains(Point(north_xy)):
        pole_lat = 90.0
    elif south_xy is not None and pole_plane.contains(Point(south_xy)):
        pole_lat = -90.0
    else:
        raise ValueError("a ring goes round a pole in longitude/latitude but encloses neither pole in its plane")
    # Open the ring where it first crosses ±180°, at a vertex put exactly on the antimeridian, so the
    # cap's sides lie exactly on -180° and +180° and the folded parts meet without a sliver.
    i = int(np.flatnonzero(np.abs(np.diff(np.append(lon, lon[0]))) > JUMP_DEGREES)[0])
    j = (i + 1) % len(lon)
    after = lon[i] + _step(lon[i], lon[j])  # the next vertex, on lon[i]'s sheet
    edge = 180.0 if after > 180.0 else -180.0
    cross_lat = lat[i] + (lat[j] - lat[i]) * (edge - lon[i]) / (after - lon[i])
    order = np.r_[j : len(lon), 0:j]
    start = -edge  # the same meridian seen from the next vertex's side
    path = np.unwrap(np.r_[start, lon[order]], period=360.0)
    end = start + 360.0 * turns
    ring = np.column_stack([np.r_[path, end, end, start], np.r_[cross_lat, lat[order], cross_lat, pole_lat, pole_lat]])
    return Polygon(ring)


def _step(a: float, b: float) -> float:
    """The longitude step from ``a`` to ``b`` the short way round (what np.unwrap assumes)."""
    d = (b - a + 180.0) % 360.0 - 180.0
    return d
