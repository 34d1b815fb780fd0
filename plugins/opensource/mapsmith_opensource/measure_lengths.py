"""Lengths of lines segment by segment, geodesic or planar, horizontal or along Z; and the one rule
for measures taken of 3-D data: Z is used when asked, and a 2-D measure of 3-D data is said aloud.

Why hand-written: pyproj's ``Geod.geometry_length`` and shapely's ``length`` both drop Z, and no
library combines a geodesic horizontal distance with a height difference. Here every line is cut
into its segments (parts never joined to one another); a segment's length is its horizontal length
(geodesic on the layer's ellipsoid, or planar in the layer's CRS times its unit) and, with Z, the
hypotenuse ``sqrt(horizontal**2 + dz**2)``. The geodesic horizontal length is taken on the ellipsoid's
surface, not at the segment's height: at 1,000 m above the ellipsoid a horizontal distance is longer
by h / R, about 0.016 %, which this module does not add (it is stated in every 3-D answer).

What this module must never do: drop a Z coordinate without ``warn_measured_in_2d`` having been
called, read degrees as metres, guess a Z unit without stating it in the answer, or join two parts
of a multi-part line with a segment that is not in the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, linear_unit_metres
from mapsmith.errors import InputError

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np
    from pyproj import CRS

    from mapsmith.runner import RunContext

# Relative length a horizontal geodesic distance gains per metre of height (1 / Earth's mean radius).
HEIGHT_SCALE_PER_METRE = 1 / 6_371_000


def has_z(geoms: Any) -> np.ndarray:
    """True per geometry that carries Z (null and empty geometries carry none)."""
    import shapely

    return shapely.has_z(geoms) & ~(shapely.is_missing(geoms) | shapely.is_empty(geoms))


def warn_measured_in_2d(ctx: RunContext, gdf: gpd.GeoDataFrame, measured: str, hint: str) -> int:
    """Say that ``measured`` (e.g. "areas and perimeters") ignored Z, when any feature has Z.

    Returns how many features had Z. The warning is the same code wherever a measure is taken, so
    an agent can branch on it once: MEASURE_2D_ON_3D.
    """
    count = int(has_z(gdf.geometry.values).sum())
    warn_z_count(ctx, count, len(gdf), measured, hint)
    return count


def warn_z_count(ctx: RunContext, count: int, total: int, measured: str, hint: str) -> None:
    """``warn_measured_in_2d``'s warning for ``count`` features with Z of ``total`` (counted batch by batch)."""
    if count:
        ctx.warn(
            "MEASURE_2D_ON_3D",
            f"{count} of {total} features have Z coordinates; {measured} are horizontal (2-D): Z was not used",
            hint,
        )


@dataclass(frozen=True)
class ZUnit:
    """How many metres one Z unit is, and where that figure comes from (stated in every 3-D answer)."""

    metres: float
    source: str


def z_unit(crs: CRS) -> ZUnit:
    """The unit of Z: the CRS's vertical axis when it declares one, otherwise the convention stated.

    A 2-D geographic CRS (EPSG:4326) with Z: heights in metres, the convention of GeoJSON (RFC 7946
    section 4) and of GNSS tracks. A 2-D projected CRS with Z: the unit of its horizontal axes, as
    GIS software reads it. Neither is declared by the file, so the answer says which was assumed.
    """
    vertical = [a for a in crs.axis_info if a.direction in ("up", "down")]
    if vertical:
        return ZUnit(float(vertical[0].unit_conversion_factor), f"the CRS's vertical axis ({vertical[0].unit_name})")
    if crs.is_geographic:
        return ZUnit(
            1.0,
            "metres: the CRS declares no vertical axis; heights with longitude/latitude are read in metres (RFC 7946)",
        )
    unit = linear_unit_metres(crs)
    return ZUnit(unit, f"{unit:g} m (the CRS's horizontal unit): {crs_label(crs)} declares no vertical axis")


@dataclass
class Lengths:
    """Per feature: the length (None without geometry) and the horizontal part of it, in metres."""

    values: list[float | None]
    horizontal: list[float | None]
    with_z: int  # features whose Z entered their length


def segment_lengths(gdf: gpd.GeoDataFrame, *, planar: bool, use_z: bool) -> tuple[Lengths, ZUnit | None]:
    """Lengths of each feature's lines (a polygon's rings: its perimeter), segment by segment.

    ``planar``: in the layer's own projected CRS, times its unit (the caller refuses degrees first).
    Otherwise geodesic on the ellipsoid of the layer's own datum. ``use_z``: each segment's height
    difference enters its length; a feature with a missing (NaN) Z is refused, not measured flat.
    """
    import numpy as np
    import shapely

    geoms = gdf.geometry.values
    n = len(geoms)
    gone = shapely.is_missing(geoms) | shapely.is_empty(geoms)
    dims = shapely.get_dimensions(geoms)
    measurable = ~gone & (dims >= 1)
    # A polygon's length is its perimeter: its rings, each a closed line, as separate parts.
    lines = np.array(geoms, dtype=object)
    polygons = measurable & (dims == 2)
    if polygons.any():
        lines[polygons] = shapely.boundary(geoms[polygons])
    parts, owner = shapely.get_parts(lines[measurable], return_index=True)
    owner = np.flatnonzero(measurable)[owner] if len(owner) else owner
    coords, part = shapely.get_coordinates(parts, include_z=True, return_index=True)
    x, y, z = coords[:, 0], coords[:, 1], coords[:, 2]
    zunit = z_unit(gdf.crs) if use_z else None
    with_z = has_z(geoms) if use_z else np.zeros(n, dtype=bool)
    if use_z:
        owners_of_nan = np.unique(owner[part[np.isnan(z)]]) if len(part) else np.array([], dtype=int)
        nan_z = [int(i) for i in owners_of_nan if with_z[i]]
        if nan_z:
            raise InputError(
                f"{len(nan_z)} features have Z coordinates with no value (NaN); a 3-D length of them is undefined",
                code="Z_VALUES_MISSING",
                evidence={"feature_indices": nan_z[:20], "count": len(nan_z)},
                hint="measure with use_z=false (horizontal lengths), or fill the missing heights first",
            )
    if planar:
        unit = linear_unit_metres(gdf.crs)
        horizontal = np.hypot(np.diff(x), np.diff(y)) * unit
    else:
        lon, lat = _lonlat(gdf.crs, x, y)
        horizontal = np.asarray(gdf.crs.get_geod().line_lengths(lon, lat), dtype=float) if len(lon) > 1 else np.zeros(0)
    # Consecutive coordinates of different parts are not a segment of the data.
    same = part[:-1] == part[1:] if len(part) > 1 else np.zeros(0, dtype=bool)
    seg_owner = owner[part[:-1]][same] if len(part) > 1 else np.zeros(0, dtype=int)
    flat = horizontal[same] if len(horizontal) else horizontal
    if use_z and zunit is not None:
        dz = np.diff(z)[same] * zunit.metres if len(part) > 1 else np.zeros(0)
        dz = np.where(with_z[seg_owner], np.nan_to_num(dz), 0.0)
        full = np.hypot(flat, dz)
    else:
        full = flat
    totals = np.bincount(seg_owner, weights=full, minlength=n) if len(seg_owner) else np.zeros(n)
    flats = np.bincount(seg_owner, weights=flat, minlength=n) if len(seg_owner) else np.zeros(n)
    values = [float(totals[i]) if measurable[i] else None for i in range(n)]
    horizontals = [float(flats[i]) if measurable[i] else None for i in range(n)]
    return Lengths(values, horizontals, int(with_z.sum())), zunit


def _lonlat(crs: CRS, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates in the geographic CRS of the layer's own datum: no datum shift enters a measure."""
    if crs.is_geographic:
        return x, y
    from pyproj import Transformer

    lon, lat = Transformer.from_crs(crs, crs.geodetic_crs, always_xy=True).transform(x, y)
    return lon, lat


def warn_z_dropped(ctx: RunContext, before: Any, after: Any, why: str) -> int:
    """Say that features which had Z are written without it (``why``: the reason, e.g. "a centroid is
    a 2-D point"). ``before`` and ``after`` are aligned geometry arrays. Returns the count."""
    import shapely

    lost = has_z(before) & ~shapely.has_z(after) & ~(shapely.is_missing(after) | shapely.is_empty(after))
    count = int(lost.sum())
    if count:
        ctx.warn(
            "Z_DROPPED",
            f"{count} of {len(before)} features had Z coordinates and are written without them: {why}",
            "keep the input for its heights; sample_raster_at_points or a join by feature id brings heights back "
            "if the output needs them",
        )
    return count
