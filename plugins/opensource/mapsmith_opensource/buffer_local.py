"""Buffers drawn feature by feature in a local azimuthal equidistant plane, on the layer's own ellipsoid.

buffer_layer uses this when no single projection keeps a metre a metre across the layer (a layer over
many UTM zones, near a pole). Each feature is projected into an azimuthal equidistant (aeqd) plane
centred at it or near it, buffered there by GEOS, densified, and returned to longitude/latitude. It
must never change the datum (the plane sits on the layer's geodetic CRS, so no datum shift enters and
none is recorded) and never hand back a buffer whose distance error bound it has not computed.

Why this plane, and the bound. In an aeqd plane centred at C the distance from C to any point is its
geodesic distance (PROJ's ellipsoidal aeqd solves the geodesic problem), and the scale across that
direction is h = x / sin x at angular distance x = rho / R from C, so every planar distance inside a
disc of radius rho about C is between 1 and h times its ground distance. A feature lying within r of C
buffered by d has its buffer inside the disc rho = r + d, hence the buffer's edge lies between
d * sin(x)/x and d from the feature on the ground: the shortfall is at most 1 - sin(x)/x (spherical
R = 6,371,008.8 m, the IUGG mean radius; the ellipsoid changes that bound by a part in a few hundred).
A single point buffered in a plane centred at it has no shortfall at all: every vertex lies at exactly
d along a geodesic.

Grouping, to keep PROJ objects few. Features whose own r leaves room are binned in cells of a
latitude-band grid (plus a cap cell at each pole) and share the plane centred at the mean of their
centres (a feature alone in its cell: at itself); the offset s from a feature to its plane's centre
enters the bound (rho = s + r + d), and a feature whose bound would exceed the tolerance so gets a
plane of its own. Building one plane costs about 0.06 ms
(a PROJ pipeline string, not a CRS object: 4.6 ms each through pyproj.CRS).

Hand-written because no library buffers on the ellipsoid: GEOS is planar, pyproj's Geod measures and
offsets points but does not buffer lines or polygons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from pyproj import Geod

MEAN_RADIUS_M = 6_371_008.8
# Longest edge, on the ground, of a buffer returned to lon/lat: a straight lon/lat edge of 5 km departs
# from the curve it stands for by under 3 m at 80° of latitude and under 60 m at 89.5° (l^2 tan(lat)/8R).
DENSIFY_SEGMENT_M = 5_000.0
# A feature no wider than this about its centre is a point (the centre is rebuilt from unit vectors).
POINT_RADIUS_M = 0.001
# A buffer reaching this far from its plane's centre could reach both poles; no plane holds that.
QUARTER_MERIDIAN_M = 10_001_965.7
# Conservative lengths of one degree: latitude (largest, at the poles) and longitude at the equator.
METRES_PER_DEGREE_LAT_MAX = 111_700.0
METRES_PER_DEGREE_LON_EQUATOR = 111_320.0
PIPELINE = (
    "+proj=pipeline +step +proj=unitconvert +xy_in=deg +xy_out=rad "
    "+step +proj=aeqd +lat_0={lat:.12g} +lon_0={lon:.12g} +x_0=0 +y_0=0 +a={a!r} +rf={rf!r}"
)


INVERSE_PIPELINE = (
    "+proj=pipeline +step +inv +proj=aeqd +lat_0={lat:.12g} +lon_0={lon:.12g} +x_0=0 +y_0=0 +a={a!r} +rf={rf!r} "
    "+step +proj=unitconvert +xy_in=rad +xy_out=deg"
)


def shortfall(rho_m: np.ndarray) -> np.ndarray:
    """The largest relative shortfall of a buffer distance drawn within ``rho_m`` of an aeqd centre."""
    import numpy as np

    x = np.asarray(rho_m, dtype=float) / MEAN_RADIUS_M
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(x > 0, 1.0 - np.sin(x) / np.where(x > 0, x, 1.0), 0.0)
    return np.where(np.asarray(rho_m) >= QUARTER_MERIDIAN_M, np.inf, out)


def reach_m(tolerance: float) -> float:
    """The radius about an aeqd centre within which the shortfall stays at or below ``tolerance``."""
    lo, hi = 0.0, math.pi / 2
    for _ in range(60):  # bisection on a monotone function: 60 halvings reach double precision
        mid = (lo + hi) / 2
        if 1.0 - math.sin(mid) / mid <= tolerance:
            lo = mid
        else:
            hi = mid
    return lo * MEAN_RADIUS_M


@dataclass
class Footprints:
    """Where each feature is: centre (lon/lat), radius to its farthest vertex, and presence."""

    lon: np.ndarray
    lat: np.ndarray
    radius_m: np.ndarray
    present: np.ndarray
    coords: np.ndarray  # every vertex, lon/lat, in shapely.get_coordinates order
    owner: np.ndarray  # the feature each vertex belongs to


def footprints(geoms_lonlat: np.ndarray, geod: Geod) -> Footprints:
    """Centre each feature at the normalised mean of its vertices' unit vectors (right across 180° and
    at the poles, where a mean of longitudes is not), and measure its radius geodesically."""
    import shapely

    coords, owner = shapely.get_coordinates(geoms_lonlat, return_index=True)
    return footprints_of(coords, owner, len(geoms_lonlat), geod)


def footprints_of(coords: np.ndarray, owner: np.ndarray, n: int, geod: Geod) -> Footprints:
    """``footprints`` from the vertices already in lon/lat (``shapely.get_coordinates`` order) and the
    feature each belongs to, for ``n`` features: the layer's geometries need not be rebuilt in lon/lat."""
    import numpy as np

    if len(owner) == n and np.array_equal(owner, np.arange(n)):
        # One vertex per feature (a layer of points): each is centred on its vertex with radius 0, as below, without
        # the unit-vector round trip, whose arrays cost a fresh process 1.1 s of a million points' 1.9 s measure.
        return Footprints(coords[:, 0].copy(), coords[:, 1].copy(), np.zeros(n), np.ones(n, dtype=bool), coords, owner)
    lon_r, lat_r = np.radians(coords[:, 0]), np.radians(coords[:, 1])
    xyz = np.column_stack([np.cos(lat_r) * np.cos(lon_r), np.cos(lat_r) * np.sin(lon_r), np.sin(lat_r)])
    sums = np.column_stack([np.bincount(owner, xyz[:, k], minlength=n) for k in range(3)])
    vertices = np.bincount(owner, minlength=n)
    present = vertices > 0
    norm = np.linalg.norm(sums, axis=1)
    safe = np.where(norm > 0, norm, 1.0)
    lat = np.degrees(np.arcsin(np.clip(sums[:, 2] / safe, -1.0, 1.0)))
    lon = np.degrees(np.arctan2(sums[:, 1], sums[:, 0]))
    radius = np.zeros(n)
    # A feature of one vertex (a point) is centred on it, radius 0: no geodesic to measure (a million points'
    # geod.inv cost 0.7 s, for distances of the last bits the unit-vector round trip leaves).
    single = vertices[owner] == 1
    lon[owner[single]], lat[owner[single]] = coords[single, 0], coords[single, 1]
    many = ~single
    if many.any():
        _, _, dist = geod.inv(lon[owner[many]], lat[owner[many]], coords[many, 0], coords[many, 1])
        np.maximum.at(radius, owner[many], np.asarray(dist))
    # Vertices whose unit vectors cancel (a ring round the equator) have no centre: no plane fits them.
    radius[present & (norm < 1e-9 * np.maximum(np.bincount(owner, minlength=n), 1))] = np.inf
    return Footprints(lon, lat, radius, present, coords, owner)


@dataclass
class Planes:
    """The aeqd plane each feature is buffered in, and the distance bound that plane gives it."""

    group: np.ndarray  # per feature, index into centres
    centres: np.ndarray  # (k, 2) lon/lat of each plane's centre
    offset_m: np.ndarray  # per feature, geodesic distance from its centre to its plane's centre
    bound: np.ndarray  # per feature, the largest relative shortfall of its buffer distance


def choose_planes(fp: Footprints, distance_m: float, tolerance: float, geod: Geod) -> Planes:
    """Share planes between features where the bound allows, else centre a plane on the feature."""
    import numpy as np

    reach = reach_m(tolerance)
    lon, lat = fp.lon.copy(), fp.lat.copy()
    half_diagonal = (reach - distance_m) / 2
    if half_diagonal > 0:
        shared = fp.present & (fp.radius_m <= half_diagonal)
        glon, glat = _cell_centres(fp.lon[shared], fp.lat[shared], half_diagonal)
        # The plane sits at the mean of its members' centres, not the cell's: a feature alone in its cell
        # gets a plane centred on it, and a cluster one as near as possible to all of them.
        lon[shared], lat[shared] = _member_means(fp.lon[shared], fp.lat[shared], glon, glat)
    offset = _distance(geod, fp.lon, fp.lat, lon, lat)
    # Where the cell's centre lies farther than the grid promised, the feature takes its own plane.
    own = offset + fp.radius_m + distance_m > reach
    lon[own], lat[own], offset[own] = fp.lon[own], fp.lat[own], 0.0
    centres, group = np.unique(np.round(np.column_stack([lon, lat]), 9), axis=0, return_inverse=True)
    bound = shortfall(offset + fp.radius_m + distance_m)
    # A point at its plane's centre: every vertex exact. (Its centre, rebuilt from a unit vector, may sit
    # nanometres off the point; a millimetre is the limit of "at".)
    bound[(offset <= POINT_RADIUS_M) & (fp.radius_m <= POINT_RADIUS_M)] = 0.0
    bound[~fp.present] = 0.0
    return Planes(group.reshape(-1), centres, offset, bound)


def _member_means(lon: np.ndarray, lat: np.ndarray, cell_lon: np.ndarray, cell_lat: np.ndarray) -> tuple[Any, Any]:
    """Per position, the normalised mean unit vector of all positions sharing its cell, as lon/lat."""
    import numpy as np

    if len(lon) == 0:
        return lon, lat
    _, cell = np.unique(np.column_stack([cell_lon, cell_lat]), axis=0, return_inverse=True)
    cell = cell.reshape(-1)
    lon_r, lat_r = np.radians(lon), np.radians(lat)
    xyz = np.column_stack([np.cos(lat_r) * np.cos(lon_r), np.cos(lat_r) * np.sin(lon_r), np.sin(lat_r)])
    sums = np.column_stack([np.bincount(cell, xyz[:, k]) for k in range(3)])[cell]
    norm = np.linalg.norm(sums, axis=1)
    out_lat = np.degrees(np.arcsin(np.clip(sums[:, 2] / norm, -1.0, 1.0)))
    out_lon = np.degrees(np.arctan2(sums[:, 1], sums[:, 0]))
    # A lone member's mean is itself: keep its coordinates bit for bit, so its offset is exactly 0.
    alone = np.bincount(cell)[cell] == 1
    return np.where(alone, lon, out_lon), np.where(alone, lat, out_lat)


def _distance(geod: Geod, lon1: np.ndarray, lat1: np.ndarray, lon2: np.ndarray, lat2: np.ndarray) -> np.ndarray:
    import numpy as np

    if len(lon1) == 0:
        return np.zeros(0)
    return np.asarray(geod.inv(lon1, lat1, lon2, lat2)[2], dtype=float)


def _cell_centres(lon: np.ndarray, lat: np.ndarray, half_diagonal_m: float) -> tuple[np.ndarray, np.ndarray]:
    """Centres of the cells (side half_diagonal * sqrt 2 on the ground, or a cap of radius
    half_diagonal at a pole) holding each position."""
    import numpy as np

    side = half_diagonal_m * math.sqrt(2)
    cap = half_diagonal_m / METRES_PER_DEGREE_LAT_MAX
    band_h = side / METRES_PER_DEGREE_LAT_MAX
    out_lon, out_lat = np.empty_like(lon), np.empty_like(lat)
    north, south = lat >= 90 - cap, lat <= -90 + cap
    out_lon[north | south] = 0.0
    out_lat[north], out_lat[south] = 90.0, -90.0
    rest = ~(north | south)
    band = np.floor((lat[rest] + 90.0) / band_h)
    lo, hi = band * band_h - 90.0, (band + 1) * band_h - 90.0
    equatorward = np.where(np.abs(lo) < np.abs(hi), lo, hi)
    equatorward = np.where((lo < 0) & (hi > 0), 0.0, equatorward)
    # Cells as wide as `side` on the band's equatorward edge are narrower than that poleward.
    width = side / (METRES_PER_DEGREE_LON_EQUATOR * np.cos(np.radians(np.clip(equatorward, -89.9, 89.9))))
    count = np.maximum(np.floor(360.0 / width), 1.0)
    cell = np.minimum(np.floor((lon[rest] + 180.0) / 360.0 * count), count - 1)
    out_lon[rest] = (cell + 0.5) * 360.0 / count - 180.0
    out_lat[rest] = np.clip((lo + hi) / 2, -90.0, 90.0)
    return out_lon, out_lat


def pipeline_for(lon: float, lat: float, ellipsoid: Any) -> str:
    """The PROJ pipeline from lon/lat degrees to the aeqd plane centred at (lon, lat) on ``ellipsoid``."""
    return PIPELINE.format(lat=lat, lon=lon, a=ellipsoid.semi_major_metre, rf=_inverse_flattening(ellipsoid))


def inverse_pipeline_for(lon: float, lat: float, ellipsoid: Any) -> str:
    """The PROJ pipeline from the aeqd plane centred at (lon, lat) back to lon/lat degrees (the return leg)."""
    return INVERSE_PIPELINE.format(lat=lat, lon=lon, a=ellipsoid.semi_major_metre, rf=_inverse_flattening(ellipsoid))


def _inverse_flattening(ellipsoid: Any) -> float:
    rf = ellipsoid.inverse_flattening
    return float(rf) if rf and rf > 0 else 0.0


@dataclass
class LocalBuffers:
    """Buffers in lon/lat (not yet split at 180°), and what is needed to split them correctly."""

    lonlat: np.ndarray
    plane: np.ndarray
    north_xy: np.ndarray  # per feature, the north pole in its plane
    south_xy: np.ndarray
    planes: Planes


def buffer_in_planes(
    geoms_lonlat: np.ndarray,
    fp: Footprints,
    planes: Planes,
    ellipsoid: Any,
    distance_m: float,
    quad_segs: int,
) -> LocalBuffers:
    """Project each feature into its plane, buffer, densify to DENSIFY_SEGMENT_M, and project back.

    Coordinates move group by group as array slices: one PROJ pipeline per plane, one GEOS call per step.
    """
    import numpy as np
    import shapely
    from pyproj import Transformer

    n = len(geoms_lonlat)
    k = len(planes.centres)
    # Each direction from its own pipeline string: the return leg recorded is the one that ran.
    transformers = [
        Transformer.from_pipeline(pipeline_for(float(c[0]), float(c[1]), ellipsoid)) for c in planes.centres
    ]
    returns = [
        Transformer.from_pipeline(inverse_pipeline_for(float(c[0]), float(c[1]), ellipsoid)) for c in planes.centres
    ]
    vertex_group = planes.group[fp.owner]
    planar_xy = _move(fp.coords, vertex_group, transformers)
    plane_geoms = shapely.set_coordinates(geoms_lonlat.copy(), planar_xy)
    buffered = shapely.buffer(plane_geoms, distance_m, quad_segs=quad_segs)
    buffered = shapely.segmentize(buffered, DENSIFY_SEGMENT_M)
    out_xy, out_owner = shapely.get_coordinates(buffered, return_index=True)
    lonlat_xy = _move(out_xy, planes.group[out_owner], returns)
    lonlat = shapely.set_coordinates(buffered.copy(), lonlat_xy)
    poles = np.zeros((k, 4))
    for g, t in enumerate(transformers):
        nx, ny = t.transform(0.0, 90.0)
        sx, sy = t.transform(0.0, -90.0)
        poles[g] = (nx, ny, sx, sy)
    per_feature = poles[planes.group] if n else np.zeros((0, 4))
    return LocalBuffers(lonlat, buffered, per_feature[:, :2], per_feature[:, 2:], planes)


def _move(coords: np.ndarray, group: np.ndarray, transformers: list[Any]) -> np.ndarray:
    """Each vertex through its own group's pipeline, as array slices sorted by group."""
    import numpy as np

    out = np.empty_like(coords)
    if len(coords) == 0:
        return out
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(len(transformers) + 1))
    for g, t in enumerate(transformers):
        rows = order[bounds[g] : bounds[g + 1]]
        if len(rows):
            x, y = t.transform(coords[rows, 0], coords[rows, 1])
            out[rows, 0], out[rows, 1] = x, y
    return out
