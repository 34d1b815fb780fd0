"""Coordinate reference systems: parse them, name them, choose where to measure, and record how
coordinates were moved between them.

Every coordinate-system decision MapSmith makes goes through here, so that the provenance
manifest (§3.7 ``crs_decisions``) can say which PROJ operation moved the coordinates, its stated
accuracy, whether it was a ballpark fallback, and what a missing grid file cost.

What this module must never do:

* read ``srid:<n>`` as ``EPSG:<n>``: an SRID is a database's row number, and equals the EPSG code
  only by convention, so guessing would put a plausible but unverified CRS in the record;
* derive a return leg from an outbound one: each direction is asked of PROJ on its own (§3.7);
* let PROJ fetch grids over the network: the answer must not depend on connectivity, and a
  missing grid is recorded (``better_available_m``) instead of silently downloaded;
* import pyproj, geopandas or shapely at module level: the server imports this at start-up, and
  loading PROJ's database is paid by the first request that needs it, inside the function.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from mapsmith.errors import CRSError, CRSRequired

if TYPE_CHECKING:
    from pyproj import CRS, Transformer

    #: Anything ``parse_crs`` accepts: ``"EPSG:4326"``, ``4326``, WKT, a PROJ string, PROJJSON
    #: (text or dict), a ``pyproj.CRS``, or an object with ``to_wkt()`` (a rasterio CRS).
    CRSLike: TypeAlias = str | int | Mapping[str, Any] | CRS | object

__all__ = [
    "choose_transformer",
    "crs_label",
    "estimate_utm_crs",
    "is_equal_area",
    "is_geographic",
    "linear_unit_metres",
    "parse_crs",
    "round_trip_record",
    "transformation_record",
]

# "srid:4326", "SRID=4326", and EWKT's "SRID=4326;POINT(...)": a number with no authority.
_SRID_FORM = re.compile(r"^\s*srid\s*[:=]\s*(?P<srid>[+-]?\d+)\s*(?:;.*)?$", re.IGNORECASE | re.DOTALL)

# A label claims an authority code only when PROJ is this sure the CRS *is* that code. At PROJ's
# default (70) a bare "+proj=utm +zone=10 +datum=WGS84" is labelled EPSG:32610 although its axes
# are unspecified; a provenance label must not claim more than the definition says.
_LABEL_MIN_CONFIDENCE = 90

# UTM is defined between these latitudes (the UPS zones cover the poles).
_UTM_NORTH_LIMIT_DEG = 84.0
_UTM_SOUTH_LIMIT_DEG = -80.0

# Equal-area methods as EPSG codes them. Codes, not names, because EPSG renames methods
# ("(Spherical)" variants were split off and renumbered) while a code keeps its meaning.
_EQUAL_AREA_EPSG_METHODS = frozenset(
    {
        "9820",  # Lambert Azimuthal Equal Area
        "9821",  # Lambert Azimuthal Equal Area (Spherical), the superseded code
        "1027",  # Lambert Azimuthal Equal Area (Spherical)
        "9822",  # Albers Equal Area
        "9827",  # Bonne
        "9828",  # Bonne (South Orientated)
        "9834",  # Lambert Cylindrical Equal Area (Spherical)
        "9835",  # Lambert Cylindrical Equal Area (also what ESRI's Behrmann maps to)
        "1078",  # Equal Earth
    }
)

# Methods EPSG does not define: PROJ names them itself (also for ESRI and IGNF definitions).
# Compared after _normalise_method_name. Every entry, and every omission among PROJ's
# projections, is checked against PROJ's own areal scale factor in tests/crs/test_crs.py.
_EQUAL_AREA_METHOD_NAMES = frozenset(
    {
        "craster parabolic",
        "eckert ii",
        "eckert iv",
        "eckert vi",
        "flat polar quartic",
        "goode homolosine",
        "hammer aitoff",  # ESRI's spelling, "Hammer_Aitoff"
        "interrupted goode homolosine",
        "interrupted goode homolosine ocean",
        "mollweide",
        "quartic authalic",
        "sinusoidal",
        "transverse cylindrical equal area",
        "wagner i",
        "wagner iv",
        "wagner vii",
    }
)

# Projections PROJ knows only by its short name ("PROJ hammer"). HEALPix and rHEALPix are absent
# on purpose: their areal scale is a constant ~1.18, so areas in their units are not ground areas.
_EQUAL_AREA_PROJ_SHORT_NAMES = frozenset(
    {
        "boggs",
        "collg",
        "fouc",
        "fouc_s",
        "hammer",
        "hatano",
        "imoll",
        "imoll_o",
        "kav5",
        "leac",
        "mbt_fps",
        "mbt_s",
        "mbtfpp",
        "mbtfps",
        "nell",
        "nell_h",
        "ocea",
        "putp2",
        "putp4p",
        "putp6",
        "putp6p",
    }
)


def parse_crs(value: CRSLike) -> CRS:
    """Turn what a caller wrote into a ``pyproj.CRS``, or refuse it with a reason.

    Accepts ``"EPSG:4326"`` (any ``AUTHORITY:CODE``), an EPSG integer, WKT, a PROJ string,
    PROJJSON (text or dict), a ``pyproj.CRS`` (returned as is) or any object with ``to_wkt()``.

    Raises ``CRSRequired`` when nothing was given, ``CRSError`` with code ``CRS_AMBIGUOUS_SRID``
    for ``srid:<n>`` / ``SRID=<n>`` (no authority), and ``CRS_INVALID`` when PROJ cannot read it.
    """
    from pyproj import CRS
    from pyproj.exceptions import CRSError as ProjCRSError

    if isinstance(value, CRS):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        raise CRSRequired(
            "No coordinate reference system was given.",
            evidence={"value": _shorten(value)},
            hint="Pass a CRS such as 'EPSG:4326', an EPSG code as an integer, WKT or PROJJSON.",
        )
    if isinstance(value, bool):
        # bool is an int to Python; True must not become EPSG:1.
        raise CRSError(
            f"{value!r} is not a coordinate reference system.",
            code="CRS_INVALID",
            evidence={"value": _shorten(value)},
            hint="Pass a CRS such as 'EPSG:4326', an EPSG code as an integer, WKT or PROJJSON.",
        )
    if isinstance(value, str):
        srid = _SRID_FORM.match(value)
        if srid:
            number = int(srid.group("srid"))
            raise CRSError(
                f"{value.strip()!r} gives an SRID without saying whose code it is.",
                code="CRS_AMBIGUOUS_SRID",
                evidence={"value": _shorten(value), "srid": number},
                hint=(
                    f"Write it as EPSG:{number} if that is what is meant; an SRID equals the EPSG "
                    "code only by convention, so otherwise pass the CRS's WKT from the "
                    "database's spatial_ref_sys table."
                ),
            )
    try:
        return from_user_input(value)
    except (ProjCRSError, TypeError) as exc:
        raise CRSError(
            f"PROJ cannot read {_shorten(value)} as a coordinate reference system.",
            code="CRS_INVALID",
            evidence={"value": _shorten(value), "engine_message": str(exc)},
            hint=(
                "Pass an authority code such as 'EPSG:32610', an EPSG integer, WKT or PROJJSON; "
                "check the code exists in the EPSG registry."
            ),
        ) from exc


# PROJ reads a PROJJSON document in 40-65 ms (a GeoParquet file's CRS, EPSG:32610, on this project's 2-core machine;
# its WKT in 0.4 ms) and finds a transformation to longitude/latitude in about as long; one run asks both of the same
# CRS several times (the input checks, the CRS guard, the engine, the record). Each definition is read once per
# process: a pyproj CRS or Transformer is safe to share between threads (each thread gets its own PROJ object).
_PARSED_KEPT = 64


def from_user_input(value: Any) -> CRS:
    """``pyproj.CRS.from_user_input``, a text or PROJJSON dict read once per process; raises what pyproj raises."""
    from pyproj import CRS

    if isinstance(value, Mapping) and "proj" not in value and "init" not in value:
        value = json.dumps(dict(value))  # what pyproj does with a PROJJSON dict before reading it
    return _read_text(value) if isinstance(value, str) else CRS.from_user_input(value)


@functools.lru_cache(maxsize=_PARSED_KEPT)
def _read_text(text: str) -> CRS:
    from pyproj import CRS

    return CRS.from_user_input(text)


@functools.lru_cache(maxsize=_PARSED_KEPT)
def _to_lonlat(srs: str) -> Transformer:
    """From the CRS as read back from its own WKT: the same CRS (equal), PROJ's search for the transformation far
    shorter when it was read from a PROJJSON whose datum ensemble lists its members without ids, as GeoPandas writes
    GeoParquet's (EPSG:32610 and EPSG:3857 from such a document: 28 ms against 0.9 ms). tests/core/test_crs_lonlat.py
    holds the two ways to the same transformation and the same coordinates."""
    from pyproj import CRS, Transformer

    crs = from_user_input(srs)
    wkt = crs.to_wkt()  # None where the CRS has no WKT form: then it is searched from as read
    return Transformer.from_crs(CRS.from_wkt(wkt) if wkt else crs, "EPSG:4326", always_xy=True)


def to_lonlat(crs: CRSLike) -> Transformer:
    """PROJ's default transformation from ``crs`` to EPSG:4326 (longitude first), found once per definition and
    process: for an extent in degrees (what a layer covers, where to search), not for moving data (choose_transformer
    records what it moves data with)."""
    return _to_lonlat(parse_crs(crs).srs)


def crs_label(crs: CRSLike | None) -> str | None:
    """The short name a manifest uses for a CRS: ``"EPSG:32610"`` when PROJ identifies an
    authority code with confidence of at least 90, else the CRS's name (its definition when the
    name is PROJ's placeholder ``"unknown"``). ``None`` for ``None``.
    """
    if crs is None:
        return None
    parsed = parse_crs(crs)
    authority = parsed.to_authority(min_confidence=_LABEL_MIN_CONFIDENCE)
    if authority is not None:
        return f"{authority[0]}:{authority[1]}"
    if parsed.name and parsed.name != "unknown":
        return parsed.name
    # "unknown" names nothing a reader can check; the definition as given at least says what it is.
    return parsed.srs


def is_geographic(crs: CRSLike) -> bool:
    """Whether coordinates in ``crs`` are angles (longitude/latitude), for compound and bound
    CRSs too. A distance or area computed on such coordinates is in degrees, which means nothing.
    """
    return bool(parse_crs(crs).is_geographic)


def estimate_utm_crs(bounds_lonlat: tuple[float, float, float, float], datum_name: str = "WGS 84") -> CRS:
    """The UTM zone on ``datum_name`` containing the centre of an area of interest.

    ``bounds_lonlat`` is ``(west, south, east, north)`` in degrees; ``west > east`` means the area
    crosses the antimeridian. On a zone boundary the zone to the east is taken, and on the equator
    the northern one, so the answer does not depend on the order PROJ lists candidates in.

    Raises ``CRSError`` with code ``CRS_NO_UTM_ZONE`` when the centre lies beyond 84°N or 80°S or
    no UTM CRS on that datum covers it, and ``CRS_BOUNDS_NOT_LONLAT`` for bounds that are not
    degrees.
    """
    from pyproj import CRS
    from pyproj.aoi import AreaOfInterest
    from pyproj.database import query_utm_crs_info

    west, south, east, north = _lonlat_bounds(bounds_lonlat)
    centre_lon, centre_lat = _centre_lonlat(west, south, east, north)
    evidence: dict[str, Any] = {
        "bounds_lonlat": [west, south, east, north],
        "centre_lonlat": [centre_lon, centre_lat],
        "datum_name": datum_name,
    }
    if not _UTM_SOUTH_LIMIT_DEG <= centre_lat <= _UTM_NORTH_LIMIT_DEG:
        raise CRSError(
            f"The area's centre is at latitude {centre_lat:g}°, outside UTM's 80°S to 84°N.",
            code="CRS_NO_UTM_ZONE",
            evidence=evidence,
            hint=(
                "Pass a projected CRS for the polar area: for distances e.g. EPSG:3413 (north) or "
                "EPSG:3031 (south), polar stereographic; for areas EPSG:6931 (north) or EPSG:6932 "
                "(south), EASE-Grid 2.0 Lambert azimuthal equal-area."
            ),
        )

    # The zone by its definition (6° wide from 180°W), computed rather than taken from PROJ's
    # candidate list, which holds two zones when the centre lies on a boundary.
    zone = min(int((centre_lon + 180.0) // 6.0) + 1, 60)
    wanted = f"{zone}{'N' if centre_lat >= 0 else 'S'}"
    infos = query_utm_crs_info(
        datum_name=datum_name,
        area_of_interest=AreaOfInterest(centre_lon, centre_lat, centre_lon, centre_lat),
    )
    candidates = []
    for info in infos:
        candidate = CRS.from_authority(info.auth_name, info.code)
        # Variants with northing first or a zone-prefixed easting (ETRS89 has both) are UTM on
        # paper but not the grid a caller expects coordinates in.
        if candidate.utm_zone == wanted and candidate.axis_info[0].direction == "east":
            candidates.append(candidate)
    if not candidates:
        raise CRSError(
            f"No UTM zone {wanted} on datum {datum_name!r} covers the area's centre.",
            code="CRS_NO_UTM_ZONE",
            evidence={**evidence, "utm_zone": wanted},
            hint=(
                "Use datum_name='WGS 84', whose UTM zones cover the world between 80°S and 84°N, "
                "or pass a projected CRS for the area."
            ),
        )
    # Several datum realisations can share a prefix ("ETRS89/DREF91/2016"); the EPSG name of the
    # plain one is exactly "<datum> / UTM zone <n><h>".
    exact_name = f"{datum_name} / UTM zone {wanted}"
    return next((c for c in candidates if c.name == exact_name), candidates[0])


def choose_transformer(
    src: CRSLike,
    dst: CRSLike,
    area_of_interest: tuple[float, float, float, float] | None,
    *,
    allow_ballpark: bool | None = None,
) -> tuple[Transformer, dict[str, Any]]:
    """Choose the operation that moves coordinates from ``src`` to ``dst``, and describe it.

    ``area_of_interest`` is the data's ``(west, south, east, north)`` in degrees. It decides the
    choice: PROJ ranks the operations available on this machine (grids present) with ballpark
    fallbacks last, then by how much of the area each covers, then by stated accuracy, and the
    first that shifts the datum is taken; an operation more accurate on paper but defined for
    another region (NAD27 to WGS 84 for Cuba, 1 m, for data across the United States) is not
    chosen. When PROJ offers only a ballpark directly, a path through an intermediate datum
    (two legs, each PROJ's best for the area, accuracies added) is taken if one exists. With
    ``None`` PROJ ranks by the size of each operation's own area of use, which picks the
    operation for the largest region rather than for the data: pass the bounds whenever the
    datums differ.

    When only a ballpark is left between two different datums, ``allow_ballpark=False`` refuses
    it with ``CRS_BALLPARK_REFUSED`` (evidence ``expected_error_m``: how far the ballpark puts
    points at the data from a real datum shift); ``True`` accepts it as the caller's choice and
    ``None`` (the default, for steps that align a second input or round-trip through a metric
    CRS) applies it for the caller to warn about. Both record the expected error under
    ``x-mapsmith:chosen_by.ballpark``.

    Returns the ``pyproj.Transformer`` (``always_xy``: longitude/easting first) to apply, and the
    §3.7 ``transformation`` object: ``pipeline`` (PROJ string), ``accuracy_m`` (``None`` when
    PROJ states none), ``is_ballpark``, ``better_available_m``, plus ``x-mapsmith:`` extensions;
    ``x-mapsmith:chosen_by`` lists every operation considered with the reason it was or was not
    used (``considered``), the ``intermediate_crs`` of a two-leg path, and for an accepted
    ballpark its expected error (``ballpark``). The one operation is applied to every coordinate,
    so the record describes what was done; ``Transformer.from_crs`` may switch operation per
    coordinate, which no single record could.

    Raises ``CRSError`` with code ``CRS_NO_TRANSFORMATION`` when no operation is available.
    """
    # The choosing lives in its own module (candidates, intermediate datums, ballpark estimates).
    from mapsmith.crs_transform import choose_transformer as choose

    return choose(src, dst, area_of_interest, allow_ballpark=allow_ballpark)


def transformation_record(
    src: CRSLike,
    dst: CRSLike,
    area_of_interest: tuple[float, float, float, float] | None,
) -> dict[str, Any]:
    """The §3.7 ``transformation`` object for ``src`` to ``dst``; see ``choose_transformer``."""
    return choose_transformer(src, dst, area_of_interest)[1]


def round_trip_record(
    caller_crs: CRSLike,
    analysis_crs: CRSLike,
    area_of_interest: tuple[float, float, float, float] | None,
) -> dict[str, Any]:
    """The §3.7 ``round_trip`` object: ``transformation`` (caller's CRS to ``analysis_crs``) and
    ``return_transformation`` (back), each chosen and measured by PROJ for its own direction.

    Attach it to a manifest only once the output is back in the caller's CRS (§3.7, "the moment
    is fixed"): building it says nothing about whether the trip finished.
    """
    return {
        "transformation": transformation_record(caller_crs, analysis_crs, area_of_interest),
        "return_transformation": transformation_record(analysis_crs, caller_crs, area_of_interest),
    }


def linear_unit_metres(crs: CRSLike) -> float:
    """Metres per unit of the first axis of a projected CRS, as PROJ states it: ``1.0`` for
    metre, ``0.3048`` for the international foot, ~``1200/3937`` for the US survey foot.

    Raises ``CRSError`` with code ``CRS_NOT_PROJECTED`` for geographic (and geocentric) CRSs,
    whose coordinates are not lengths on a map.
    """
    parsed = parse_crs(crs)
    if not parsed.is_projected:
        raise CRSError(
            f"{crs_label(parsed)} is not a projected CRS, so its units are not lengths on a map.",
            code="CRS_NOT_PROJECTED",
            evidence={"crs": crs_label(parsed), "type": parsed.type_name},
            hint="Project the data first: estimate_utm_crs(bounds) gives a metric CRS for the area.",
        )
    axes = parsed.axis_info
    if not axes:
        raise CRSError(
            f"{crs_label(parsed)} declares no axes, so its unit is unknown.",
            code="CRS_INVALID",
            evidence={"crs": crs_label(parsed)},
            hint="Pass the CRS as an authority code or full WKT, which state the axis units.",
        )
    return float(axes[0].unit_conversion_factor)


def is_equal_area(crs: CRSLike) -> bool:
    """Whether areas measured in ``crs`` are true to the ground, decided by the projection
    method (EPSG method code, else PROJ's method name), never by the CRS's name.

    ``False`` for geographic CRSs. Bound and compound CRSs are judged by their projected part.
    Spherical-only methods (Mollweide, Eckert IV ...) are equal-area on the sphere PROJ puts
    under them, which on an ellipsoidal datum is not exactly the ellipsoid's area.
    """
    projected = _projected_part(parse_crs(crs))
    if projected is None or projected.coordinate_operation is None:
        return False
    method = projected.coordinate_operation
    if method.method_auth_name == "EPSG" and str(method.method_code) in _EQUAL_AREA_EPSG_METHODS:
        return True
    if method.method_name.startswith("PROJ "):
        # "PROJ mbt_fps": a projection PROJ knows only by its short name, underscores and all.
        parts = method.method_name.split()
        return len(parts) > 1 and parts[1] in _EQUAL_AREA_PROJ_SHORT_NAMES
    return _normalise_method_name(method.method_name) in _EQUAL_AREA_METHOD_NAMES


# --- helpers ---------------------------------------------------------------------------------


def _shorten(value: object, limit: int = 200) -> str:
    """A value for a message or evidence: WKT can run to kilobytes."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lonlat_bounds(bounds: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    """Check ``(west, south, east, north)`` are degrees; projected bounds passed by mistake
    would otherwise become a nonsense area of interest without any error.
    """
    try:
        west, south, east, north = (float(v) for v in bounds)
    except (TypeError, ValueError) as exc:
        raise CRSError(
            f"Bounds {_shorten(bounds)} are not four numbers.",
            code="CRS_BOUNDS_NOT_LONLAT",
            evidence={"bounds": _shorten(bounds)},
            hint="Pass (west, south, east, north) in degrees of longitude and latitude.",
        ) from exc
    # Bounds transformed from another CRS can overshoot by rounding (180.00000000000003);
    # that is still the edge of the world, not an error.
    if all(math.isfinite(v) for v in (west, south, east, north)):
        west, east = (_clamp(v, 180.0) for v in (west, east))
        south, north = (_clamp(v, 90.0) for v in (south, north))
    ok = (
        all(math.isfinite(v) for v in (west, south, east, north))
        and -180.0 <= west <= 180.0
        and -180.0 <= east <= 180.0
        and -90.0 <= south <= north <= 90.0
    )
    if not ok:
        raise CRSError(
            f"Bounds {[west, south, east, north]} are not (west, south, east, north) in degrees.",
            code="CRS_BOUNDS_NOT_LONLAT",
            evidence={"bounds": [west, south, east, north]},
            hint=(
                "Pass longitude/latitude bounds within ±180/±90: a projected layer's bounds must "
                "be transformed to EPSG:4326 first, and 0-360 longitudes wrapped to ±180 (west "
                "may exceed east across the antimeridian)."
            ),
        )
    return west, south, east, north


def _clamp(value: float, limit: float, tolerance: float = 1e-9) -> float:
    """``value`` pulled onto ``±limit`` when it lies within ``tolerance`` beyond it."""
    if limit < abs(value) <= limit + tolerance:
        return math.copysign(limit, value)
    return value


def _centre_lonlat(west: float, south: float, east: float, north: float) -> tuple[float, float]:
    """The centre of a lon/lat box, the right way round when it crosses the antimeridian."""
    if west <= east:
        centre_lon = (west + east) / 2.0
    else:
        centre_lon = (west + east + 360.0) / 2.0
        if centre_lon >= 180.0:
            centre_lon -= 360.0
    return centre_lon, (south + north) / 2.0


def _projected_part(crs: CRS) -> CRS | None:
    """The projected CRS inside ``crs``: itself, a bound CRS's source, or a compound's
    horizontal part. A bound CRS's own operation is its datum shift, not its projection.
    """
    if crs.is_bound and crs.source_crs is not None:
        return _projected_part(crs.source_crs)
    if crs.is_compound:
        for sub_crs in crs.sub_crs_list:
            found = _projected_part(sub_crs)
            if found is not None:
                return found
        return None
    return crs if crs.is_projected else None


def _normalise_method_name(name: str) -> str:
    """ESRI writes ``Hammer_Aitoff`` where PROJ writes ``Hammer Aitoff``."""
    return " ".join(name.replace("_", " ").lower().split())
