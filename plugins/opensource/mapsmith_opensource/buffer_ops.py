"""buffer_layer: buffers at a distance in metres, computed where metres are metres.

The distance is never applied in degrees. The layer is buffered in one metric CRS (its own, or the
UTM zone of its extent: ``common.to_metric``) when that projection's scale, measured where every
buffer will lie, is within BUFFER_TOLERANCE of true; otherwise each feature is buffered in a local
azimuthal equidistant plane on the layer's own ellipsoid (``buffer_local``). Results in longitude/
latitude are split at the antimeridian and closed over a pole (``lonlat_wrap``). Which path ran, the
measured scale error that chose it and the distance bound of the result are in the manifest.

Edges of a layer in longitude/latitude are read as geodesics, as measure_length and measure_area read
them; an edge spanning more than 180 degrees of longitude has two readings (the short way across the
antimeridian, or the long way round) and is refused. Edges of a projected layer are straight in its
projection, and are densified there before leaving it.

It must never return a buffer whose distance error it has not bounded: above MAX_SHORTFALL the run
is refused, between BUFFER_TOLERANCE and MAX_SHORTFALL it is answered with a warning naming the features.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, estimate_utm_crs, linear_unit_metres
from mapsmith.errors import CRSError, EngineError, InputError
from mapsmith_opensource.buffer_local import (
    DENSIFY_SEGMENT_M,
    METRES_PER_DEGREE_LAT_MAX,
    QUARTER_MERIDIAN_M,
    Footprints,
    buffer_in_planes,
    choose_planes,
    footprints_of,
    inverse_pipeline_for,
    pipeline_for,
    reach_m,
)
from mapsmith_opensource.common import (
    MAX_SCALE_DISTORTION,
    read_input,
    scale_distortion,
    set_engine,
    to_metric,
    write_output,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np
    from pyproj import CRS, Geod

    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("buffer_layer", "buffer_layer"),)

# A buffer's edge may lie this much (relative) nearer its feature than asked and still be answered
# silently: 1 m in 1 km. One UTM zone stays within it (scale 0.9996 to 1.001); a layer over six zones
# at 70 N does not (0.5 % at the outer zones).
BUFFER_TOLERANCE = 0.001
# Beyond this shortfall no answer is given: the common stack-wide limit on scale distortion.
MAX_SHORTFALL = MAX_SCALE_DISTORTION
# Bearings at which the single projection's scale is sampled around each feature's buffered disc.
SAMPLE_AZIMUTHS = (0.0, 45.0, 90.0, 135.0, 180.0, 225.0, 270.0, 315.0)
FEATURES_LISTED = 20
POINT_TYPE_IDS = (0, 4)  # shapely's Point and MultiPoint
# Feature centres are binned this finely (degrees) for the scale sample: ~5.6 km of latitude.
SAMPLE_BIN_DEGREES = 0.05


# -- buffer_layer -----------------------------------------------------------------------------


def buffer_layer(ctx: RunContext) -> None:
    set_engine(ctx)
    distance = float(ctx.arguments["distance_meters"])
    segments = int(ctx.arguments["segments_per_quarter_circle"])
    gdf = read_input(ctx)
    if ctx.inputs["input_path"].bounds_lonlat is None or gdf.crs.geodetic_crs is None:
        # Empty, or a CRS with no link to the Earth: nothing to place on an ellipsoid; to_metric decides.
        write_output(ctx, _single(ctx, gdf, distance, segments, None))
        return
    where = _locate(gdf)
    candidate = single_candidate(ctx, gdf.crs)
    error = scale_error(candidate, where.footprints, where.geod, distance) if candidate is not None else None
    if error is not None and error <= BUFFER_TOLERANCE:
        try:
            write_output(ctx, _single(ctx, gdf, distance, segments, error, candidate, where))
            return
        except _OtherCRS as other:
            candidate, error = other.crs, other.error
    write_output(ctx, _local(ctx, gdf, where, distance, segments, candidate, error))


@dataclass
class _Where:
    """The layer in lon/lat on its own geodetic CRS, and each feature's centre and radius there."""

    geodetic: CRS
    geod: Geod
    shapes: np.ndarray  # the features as they are placed: flat, and densified where projected
    footprints: Footprints  # holds their vertices in lon/lat (footprints.coords)
    projected: bool  # shapes are in the layer's projected CRS, not yet in lon/lat

    @cached_property
    def lonlat(self) -> np.ndarray:
        """The features in lon/lat, built only for the local planes: the single projection buffers the
        layer where it is (0.9 s of geometry building on a million points saved there)."""
        import shapely

        if not self.projected:
            return self.shapes
        return shapely.set_coordinates(self.shapes.copy(), self.footprints.coords)


def _locate(gdf: gpd.GeoDataFrame) -> _Where:
    import numpy as np
    import shapely
    from pyproj import Transformer

    source = gdf.crs
    geodetic = source if source.is_geographic else source.geodetic_crs
    geoms = np.asarray(gdf.geometry.values, dtype=object)
    # Shapely geometries are immutable, so a layer that is already flat is used as it is: force_2d would
    # copy every geometry unchanged (0.6 s on a million points).
    if shapely.has_z(geoms).any() or shapely.has_m(geoms).any():
        geoms = shapely.force_2d(geoms)
    geod = geodetic.get_geod()
    assert geod is not None  # a geodetic CRS always has an ellipsoid
    coords, owner = shapely.get_coordinates(geoms, return_index=True)
    if not source.is_geographic:
        # An edge of a projected layer is straight in its own projection: densified there first, so the
        # plane receives that shape and not the chord between its far-apart vertices. Points have no edge.
        if not np.isin(shapely.get_type_id(geoms), POINT_TYPE_IDS).all():
            geoms = shapely.segmentize(geoms, DENSIFY_SEGMENT_M / linear_unit_metres(source))
            coords, owner = shapely.get_coordinates(geoms, return_index=True)
        to_geodetic = Transformer.from_crs(source, geodetic, always_xy=True)  # same datum: a conversion only
        x, y = to_geodetic.transform(coords[:, 0], coords[:, 1])
        coords = np.column_stack([x, y])
    else:
        _refuse_ambiguous_edges(geoms)
    return _Where(geodetic, geod, geoms, footprints_of(coords, owner, len(geoms), geod), not source.is_geographic)


def _refuse_ambiguous_edges(geoms: np.ndarray) -> None:
    """Refuse a lon/lat edge longer than 180 degrees of longitude: it has two readings (see lonlat_wrap)."""
    from mapsmith_opensource.lonlat_wrap import ambiguous_edges

    owners, edges = ambiguous_edges(geoms)
    if len(owners) == 0:
        return
    raise InputError(
        f"{len(set(owners.tolist()))} feature(s) have an edge spanning more than 180 degrees of longitude "
        f"(first: feature {int(owners[0])}, from {edges[0][:2].tolist()} to {edges[0][2:].tolist()}): it either "
        "crosses the antimeridian the short way or goes the long way round the world, and the data does not say which",
        code="EDGE_LONGITUDE_AMBIGUOUS",
        evidence={
            "first_features": sorted({int(i) for i in owners})[:FEATURES_LISTED],
            "first_edges_lonlat": [[round(float(v), 9) for v in e] for e in edges[:FEATURES_LISTED]],
        },
        hint="if the edge crosses the antimeridian, split the feature there into parts that end on 180 and -180 "
        "(a multi-part geometry); if it goes the long way round, add vertices along it no more than 180 degrees apart",
    )


def single_candidate(ctx: RunContext, source: CRS) -> CRS | None:
    """The CRS ``to_metric`` would compute in for a layer in ``source`` (its own rule, repeated), or None where it
    has none."""
    aoi = ctx.inputs["input_path"].bounds_lonlat
    assert aoi is not None  # buffer_layer handles an empty layer before asking
    if not source.is_geographic:
        distortion = scale_distortion(source, aoi)
        if distortion is None or distortion <= MAX_SCALE_DISTORTION:
            return source
    try:
        return estimate_utm_crs(aoi)
    except CRSError:
        return None  # beyond 84 N or 80 S: no zone, so no single projection


def scale_error(candidate: CRS, fp: Footprints, geod: Geod, distance: float) -> float:
    """The largest departure from true scale of ``candidate`` over every feature's buffered disc.

    Sampled at the centre and at 8 bearings on the rim of a disc covering each feature's buffer; a
    projection's scale error grows outwards from its line or point of true scale, so the rim holds its
    largest values. Tissot's semi-axes give the error in the worst direction. Features are binned by
    centre on a SAMPLE_BIN_DEGREES grid and each bin's disc is widened by the bin's half-diagonal, so
    100,000 features cost a few thousand samples, never fewer metres of disc than a feature needs.
    """
    import numpy as np
    from pyproj import Proj

    keep = fp.present
    if not keep.any():
        return 0.0
    if not np.isfinite(fp.radius_m[keep]).all():
        return float("inf")
    cells, which = _sample_cells(fp.lon[keep], fp.lat[keep])
    radius = np.zeros(len(cells))
    np.maximum.at(radius, which, fp.radius_m[keep])
    lon0 = np.clip((cells[:, 0] + 0.5) * SAMPLE_BIN_DEGREES, -180.0, 180.0)
    lat0 = np.clip((cells[:, 1] + 0.5) * SAMPLE_BIN_DEGREES, -90.0, 90.0)
    half_diagonal = SAMPLE_BIN_DEGREES * METRES_PER_DEGREE_LAT_MAX * 0.75  # ~ sqrt(2)/2 of a bin, rounded up
    reach = radius + distance + half_diagonal
    if reach.max() >= QUARTER_MERIDIAN_M:
        return float("inf")
    lons, lats = [lon0], [lat0]
    for azimuth in SAMPLE_AZIMUTHS:
        lon, lat, _ = geod.fwd(lon0, lat0, np.full(len(lon0), azimuth), reach)
        lons.append(np.asarray(lon))
        lats.append(np.asarray(lat))
    factors = Proj(candidate).get_factors(np.concatenate(lons), np.concatenate(lats))
    a, b = np.asarray(factors.tissot_semimajor), np.asarray(factors.tissot_semiminor)
    worst = np.maximum(np.abs(a - 1), np.abs(b - 1))
    return float(np.max(np.where(np.isfinite(worst), worst, np.inf)))


def _sample_cells(lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The SAMPLE_BIN_DEGREES cells holding the positions (sorted by lon bin, then lat bin), and each
    position's cell: ``np.unique(bins, axis=0, return_inverse=True)``, found through one integer key per
    position because the row-wise unique sorts a million rows in over a second."""
    import numpy as np

    bins = np.floor(np.column_stack([lon, lat]) / SAMPLE_BIN_DEGREES)
    if len(bins) == 0:
        return bins, np.zeros(0, dtype=np.intp)
    low = bins.min(axis=0)
    ix, iy = (bins - low).astype(np.int64).T  # bins are whole numbers of a few thousand at most: exact
    key = ix * (int(iy.max()) + 1) + iy
    unique_keys, which = np.unique(key, return_inverse=True)
    rows = int(iy.max()) + 1
    cells = np.column_stack([unique_keys // rows, unique_keys % rows]).astype(float) + low
    return cells, which.reshape(-1)


class _OtherCRS(Exception):
    """to_metric chose another CRS than the one measured, and it is out of tolerance (never escapes)."""

    def __init__(self, crs: CRS, error: float) -> None:
        super().__init__(crs_label(crs))
        self.crs, self.error = crs, error


# -- one projection for the whole layer ------------------------------------------------------------


def _single(
    ctx: RunContext,
    gdf: gpd.GeoDataFrame,
    distance: float,
    segments: int,
    error: float | None,
    candidate: CRS | None = None,
    where: _Where | None = None,
) -> Any:
    """The layer buffered in ``to_metric``'s CRS; _OtherCRS (nothing recorded) if that CRS, not the one
    measured, is out of tolerance."""
    metric = to_metric(ctx, gdf, "buffered")
    if candidate is not None and where is not None and not metric.crs.equals(candidate):
        # to_metric's rule is repeated in single_candidate; should the two ever part, the CRS it chose is
        # measured again rather than trusted, and the local planes take over when it is out of tolerance.
        error = scale_error(metric.crs, where.footprints, where.geod, distance)
        if error > BUFFER_TOLERANCE:
            for key in ("analysis_crs", "reason", "source_crs", "target_crs", "transformation"):
                ctx.crs_decisions.pop(key, None)
            ctx.warnings[:] = [w for w in ctx.warnings if w.code != "WIDE_LAYER_FOR_UTM"]
            raise _OtherCRS(metric.crs, error)
    import geopandas as gpd
    import shapely

    from mapsmith_opensource import chunked

    units = metric.units(distance)
    # GeoSeries.buffer's own shapely call, on every core (chunked: the same buffers, element for element)
    frame = metric.frame
    plane = gpd.GeoSeries(
        chunked.apply(shapely.buffer, frame.geometry.values, units, quad_segs=segments),
        index=frame.index,
        crs=frame.crs,
        name=frame.geometry.name,
    )
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
    out = metric.back(ctx, metric.frame.set_geometry(plane))
    if error is None:
        return out
    if any(w.code == "WIDE_LAYER_FOR_UTM" for w in ctx.warnings):
        # to_metric warns on the layer's width alone; the scale was measured where the buffers lie.
        ctx.warnings[:] = [w for w in ctx.warnings if w.code != "WIDE_LAYER_FOR_UTM"]
        ctx.notes.append(
            f"the layer is wider than one UTM zone, but {ctx.crs_decisions.get('analysis_crs')}'s scale is within "
            f"{error:.3%} of true wherever a buffer lies, so one projection was used"
        )
    ctx.crs_decisions["x-mapsmith:buffer_projection"] = single_projection_record(error)
    if metric.transformed and not gdf.crs.is_geographic:
        _refuse_torn(out.geometry.values, gdf.crs, distance)
    if metric.transformed and gdf.crs.is_geographic:
        import numpy as np

        poles = _poles_in(metric.crs)
        n = len(out)
        out = out.set_geometry(
            _wrap_crossings(out.geometry.values, plane.values, np.tile(poles[:2], (n, 1)), np.tile(poles[2:], (n, 1))),
            crs=out.crs,
        )
    return out


def single_projection_record(error: float) -> dict[str, Any]:
    """``x-mapsmith:buffer_projection`` for a layer buffered in one projection, ``error`` its measured scale error."""
    return {
        "method": "single_projection",
        "tolerance": BUFFER_TOLERANCE,
        "max_scale_error": error,
        "sampled_at": "each feature's centre and 8 bearings at its radius plus the buffer distance",
    }


def _poles_in(crs: CRS) -> np.ndarray:
    import numpy as np
    from pyproj import Transformer

    to_plane = Transformer.from_crs(crs.geodetic_crs, crs, always_xy=True)
    nx, ny = to_plane.transform(0.0, 90.0)
    sx, sy = to_plane.transform(0.0, -90.0)
    return np.array([nx, ny, sx, sy], dtype=float)


def _wrap_crossings(lonlat: Any, plane: Any, north_xy: np.ndarray, south_xy: np.ndarray) -> Any:
    """Split at 180° (and close over a pole) only the buffers whose rings jump across it."""
    import numpy as np

    from mapsmith_opensource.lonlat_wrap import crossing_mask, wrap_polygon

    geoms = np.asarray(lonlat, dtype=object).copy()
    planes = np.asarray(plane, dtype=object)
    for i in np.flatnonzero(crossing_mask(geoms)):
        north = tuple(north_xy[i]) if np.isfinite(north_xy[i]).all() else None
        south = tuple(south_xy[i]) if np.isfinite(south_xy[i]).all() else None
        try:
            geoms[i] = wrap_polygon(geoms[i], planes[i], north, south)
        except ValueError as exc:
            raise EngineError(
                f"feature {int(i)}: its buffer could not be returned to longitude/latitude: {exc}",
                code="BUFFER_WRAP_FAILED",
                evidence={"feature_index": int(i), "engine_message": str(exc)},
                hint="report this with the input; meanwhile reproject_layer the input to a projected CRS centred "
                "on it (EPSG:3413 / EPSG:3031 near a pole) and buffer that",
            ) from exc
    return geoms


# -- a plane per feature group ---------------------------------------------------------------------


def _local(
    ctx: RunContext,
    gdf: gpd.GeoDataFrame,
    where: _Where,
    distance: float,
    segments: int,
    candidate: CRS | None,
    error: float | None,
) -> Any:
    import numpy as np
    import shapely
    from pyproj import Transformer

    source = gdf.crs
    geod = where.geod
    planes = choose_planes(where.footprints, distance, BUFFER_TOLERANCE, geod)
    bound = planes.bound
    _refuse_or_warn(ctx, bound, where.footprints, distance)
    local = buffer_in_planes(where.lonlat, where.footprints, planes, where.geodetic.ellipsoid, distance, segments)
    if source.is_geographic:
        geoms = _wrap_crossings(local.lonlat, local.plane, local.north_xy, local.south_xy)
    else:
        back = Transformer.from_crs(where.geodetic, source, always_xy=True)
        coords = shapely.get_coordinates(local.lonlat)
        x, y = back.transform(coords[:, 0], coords[:, 1])
        geoms = shapely.set_coordinates(local.lonlat.copy(), np.column_stack([x, y]))
        north = shapely.contains_xy(local.plane, local.north_xy[:, 0], local.north_xy[:, 1])
        south = shapely.contains_xy(local.plane, local.south_xy[:, 0], local.south_xy[:, 1])
        _refuse_torn(geoms, source, distance, int(north.sum() + south.sum()))
    _record_local(ctx, source, where, planes, distance, candidate, error)
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = distance
    return gdf.set_geometry(geoms, crs=source)


def _refuse_torn(geoms: Any, crs: CRS, distance: float, around_a_pole: int = 0) -> None:
    """Refuse buffers a projected CRS cannot hold: a vertex it has no coordinates for (a pole in Mercator)
    or an edge torn across its seam (every edge is at most DENSIFY_SEGMENT_M on the ground, or a
    segment of a small buffer; an edge longer than a quarter meridian jumped across the map)."""
    import numpy as np
    import shapely

    rings = shapely.get_rings(np.asarray(geoms, dtype=object))
    coords, ring = shapely.get_coordinates(rings, return_index=True)
    finite = bool(np.isfinite(coords).all())
    steps = np.hypot(np.diff(coords[:, 0]), np.diff(coords[:, 1]))[ring[1:] == ring[:-1]]
    longest = float(np.nanmax(steps)) * linear_unit_metres(crs) if len(steps) and finite else 0.0
    if finite and longest <= QUARTER_MERIDIAN_M:
        return
    raise InputError(
        f"some buffers reach where {crs_label(crs)} cannot draw them ("
        + (
            f"{around_a_pole} of them contain a pole"
            if around_a_pole
            else "a place outside the projection's domain"
            if not finite
            else "across the projection's seam"
        )
        + "), so they cannot be written in the layer's CRS",
        code="BUFFER_OUTSIDE_PROJECTION",
        evidence={
            "crs": crs_label(crs),
            "distance_meters": distance,
            "coordinates_finite": finite,
            "buffers_containing_a_pole": around_a_pole,
            "longest_edge_m": None if not finite else round(longest, 1),
        },
        hint="reproject_layer the input to EPSG:4326 (buffers over a pole are written as polar caps, and across "
        "180 degrees as two parts) or to a CRS centred on the data such as EPSG:3413 / EPSG:3031 near a pole, "
        "and buffer that",
    )


def _refuse_or_warn(ctx: RunContext, bound: np.ndarray, fp: Footprints, distance: float) -> None:
    import numpy as np

    over = np.flatnonzero(bound > MAX_SHORTFALL)
    if len(over):
        raise InputError(
            f"{len(over)} feature(s) are too large for one local plane at this distance: their buffers' edges "
            f"could lie up to {float(np.max(bound[over])):.2%} nearer than {distance:g} m (limit {MAX_SHORTFALL:.0%})",
            code="BUFFER_TOO_WIDE_FOR_ONE_PLANE",
            evidence={
                "first_features": [int(i) for i in over[:FEATURES_LISTED]],
                "feature_radius_m": [round(float(fp.radius_m[i]), 1) for i in over[:FEATURES_LISTED]],
                "distance_meters": distance,
                "max_shortfall": float(np.max(bound[over])),
                "limit": MAX_SHORTFALL,
                "within_limit_radius_m": round(reach_m(MAX_SHORTFALL), 0),
            },
            hint="buffer a shorter distance, or split the named features into parts smaller than "
            "within_limit_radius_m minus the distance (explode_layer splits multi-part features) and buffer those",
        )
    approx = np.flatnonzero(bound > BUFFER_TOLERANCE)
    if len(approx):
        ctx.warn(
            "BUFFER_DISTANCE_APPROXIMATE",
            f"{len(approx)} feature(s) (first {[int(i) for i in approx[:5]]}) are large for one local plane: their "
            f"buffers' edges lie up to {float(np.max(bound[approx])):.2%} nearer than {distance:g} m",
            "the manifest's crs_decisions x-mapsmith:buffer_projection names them; split them into smaller parts "
            "(explode_layer for multi-part features) for a closer buffer",
        )


def _record_local(
    ctx: RunContext,
    source: CRS,
    where: _Where,
    planes: Any,
    distance: float,
    candidate: CRS | None,
    error: float | None,
) -> None:
    import numpy as np

    geodetic = crs_label(where.geodetic)
    why = (
        f"no UTM zone covers the layer's centre (beyond 84 N or 80 S) and {crs_label(source)} is not a projection "
        "with true scale at the data"
        if candidate is None
        else f"{crs_label(candidate)}, the one projection for the whole layer, is off true scale by up to "
        f"{error:.2%} where the buffers lie (tolerance {BUFFER_TOLERANCE:.1%})"
    )
    ctx.crs_decisions.update(
        {
            "analysis_crs": f"azimuthal equidistant planes on {geodetic}, centred at the features "
            f"({len(planes.centres)} plane(s); x-mapsmith:buffer_projection)",
            "reason": f"{why}; each feature was buffered in an azimuthal equidistant plane centred at it or near "
            f"it (distances from the centre are geodesic), densified to {DENSIFY_SEGMENT_M:g} m edges and "
            f"returned to {crs_label(source)}",
            "source_crs": crs_label(source),
            "target_crs": crs_label(source),
        }
    )
    lon, lat = float(planes.centres[0][0]), float(planes.centres[0][1])
    leg_note = "first of the planes listed in x-mapsmith:buffer_projection; each plane differs only in lat_0/lon_0"
    if not source.is_geographic:
        leg_note += f"; coordinates were first converted from {crs_label(source)} to {geodetic} (same datum) and back"
    # The pipeline strings handed to PROJ, each direction its own (the return leg is the inverse projection).
    ctx.crs_decisions["round_trip"] = {
        "transformation": _leg(pipeline_for(lon, lat, where.geodetic.ellipsoid), leg_note),
        "return_transformation": _leg(inverse_pipeline_for(lon, lat, where.geodetic.ellipsoid), leg_note),
    }
    bound = planes.bound
    over = np.flatnonzero(bound > BUFFER_TOLERANCE)
    ctx.crs_decisions["x-mapsmith:buffer_projection"] = {
        "method": "local_azimuthal_equidistant",
        "tolerance": BUFFER_TOLERANCE,
        "single_projection": None if candidate is None else crs_label(candidate),
        "single_projection_max_scale_error": error if error is None or np.isfinite(error) else None,
        "planes": len(planes.centres),
        "plane_centres_lonlat": [[round(float(c[0]), 9), round(float(c[1]), 9)] for c in planes.centres[:50]],
        "pipeline": pipeline_for(0.0, 0.0, where.geodetic.ellipsoid).replace(
            "+lat_0=0 +lon_0=0", "+lat_0=<lat> +lon_0=<lon>"
        ),
        "densify_segment_m": DENSIFY_SEGMENT_M,
        "max_distance_shortfall": float(bound.max()) if len(bound) else 0.0,
        "features_over_tolerance": [int(i) for i in over[:FEATURES_LISTED]],
        "antimeridian_rule": "parts split at ±180°; a buffer containing a pole is the polygon covering the pole "
        "cap, closed along ±180° and the pole's latitude",
    }


def _leg(pipeline: str, note: str) -> dict[str, Any]:
    # A conversion on one ellipsoid: no datum is crossed, so nothing is approximated by a ballpark.
    return {
        "pipeline": pipeline,
        "accuracy_m": 0.0,
        "is_ballpark": False,
        "better_available_m": None,
        "x-mapsmith:description": note,
    }
