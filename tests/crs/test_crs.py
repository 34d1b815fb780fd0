"""Contract tests for mapsmith.crs: parsing, labels, UTM choice, units, equal-area, and the §3.7
transformation records.

Expected numbers come from outside the code under test (the UTM zone formula, unit definitions,
the EPSG registry's stated accuracies, PROJ's own scale factors) and each says where from.
The transformation cases describe this machine: PROJ data without NADCON grids, network off.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pyproj
import pytest
from pyproj import CRS

from mapsmith import crs as mcrs
from mapsmith.errors import CRSError, CRSRequired, MapSmithError

# TransformerGroup warns when the best operation lacks a grid; the record carries that fact,
# and these tests assert it there.
pytestmark = pytest.mark.filterwarnings("ignore:Best transformation is not available:UserWarning")

CONUS_LONLAT = (-124.8, 24.5, -66.9, 49.4)  # conterminous US, rounded outward
SAN_FRANCISCO_LONLAT = (-122.5, 37.5, -122.0, 38.0)
SEATTLE_AREA_LONLAT = (-122.5, 46.0, -122.0, 46.5)  # inside UTM zone 10 (126°W-120°W)

# §3.6 extension-name grammar, as the schema writes it (manifest-v1.schema.json).
EXTENSION_KEY = re.compile(r"^x-[a-z0-9][a-z0-9_-]*:[a-z0-9][a-z0-9_]*$")
TRANSFORMATION_KEYS = {"pipeline", "accuracy_m", "is_ballpark", "better_available_m"}
# The published schema in shared/ beside the checkout (CI lays it there too).
SCHEMA_PATH = Path(__file__).resolve().parents[2].parent / "shared/manifest-spec/schema/manifest-v1.schema.json"


def _grid_on_disk(name: str) -> bool:
    """Whether PROJ could find a grid file locally; the NAD27 expectations assume it cannot."""
    dirs = pyproj.datadir.get_data_dir().split(os.pathsep) + [pyproj.datadir.get_user_data_dir()]
    return any((Path(d) / name).exists() for d in dirs)


needs_no_nadcon = pytest.mark.skipif(
    _grid_on_disk("us_noaa_conus.tif") or pyproj.network.is_network_enabled(),
    reason="expectations describe a machine without the NADCON grid us_noaa_conus.tif",
)


def _assert_transformation_shape(record: dict) -> None:
    for key in record:
        assert key in TRANSFORMATION_KEYS or EXTENSION_KEY.match(key), key
    assert TRANSFORMATION_KEYS <= set(record)
    assert record["pipeline"] is None or isinstance(record["pipeline"], str)
    assert record["accuracy_m"] is None or isinstance(record["accuracy_m"], float)
    assert isinstance(record["is_ballpark"], bool)
    json.dumps(record)  # it goes into a JSON manifest as is


# --- start-up cost -------------------------------------------------------------------------------


def test_importing_the_module_loads_no_geo_library() -> None:
    code = (
        "import sys, mapsmith.crs\n"
        "heavy = [m for m in ('pyproj', 'geopandas', 'shapely') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(mcrs.__file__).parents[1])}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --- parse_crs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "EPSG:4326",
        4326,
        CRS.from_epsg(4326).to_wkt(),
        CRS.from_epsg(4326).to_json(),
        CRS.from_epsg(4326).to_json_dict(),
        CRS.from_epsg(4326),
    ],
    ids=["authority", "int", "wkt", "projjson", "projjson-dict", "pyproj"],
)
def test_parse_crs_accepts_the_usual_forms(value: object) -> None:
    assert mcrs.parse_crs(value) == CRS.from_epsg(4326)


@pytest.mark.parametrize("value", ["srid:4326", "SRID=4326", " Srid = 4326 ", "SRID=4326;POINT(0 0)"])
def test_parse_crs_refuses_an_srid_without_authority(value: str) -> None:
    with pytest.raises(CRSError) as info:
        mcrs.parse_crs(value)
    assert info.value.code == "CRS_AMBIGUOUS_SRID"
    assert info.value.evidence["srid"] == 4326
    assert "EPSG:4326" in (info.value.hint or "")


@pytest.mark.parametrize("value", ["not a crs", "EPSG:999999", True, [4326]])
def test_parse_crs_refuses_what_proj_cannot_read(value: object) -> None:
    with pytest.raises(CRSError) as info:
        mcrs.parse_crs(value)
    assert info.value.code == "CRS_INVALID"
    assert isinstance(info.value, ValueError)  # callers catching ValueError still see it
    assert info.value.hint


def test_parse_crs_keeps_proj_message_and_cause() -> None:
    with pytest.raises(CRSError) as info:
        mcrs.parse_crs("EPSG:999999")
    assert isinstance(info.value.__cause__, pyproj.exceptions.CRSError)
    assert "999999" in info.value.evidence["engine_message"]


@pytest.mark.parametrize("value", [None, "", "   "])
def test_parse_crs_says_a_crs_is_required_when_none_is_given(value: object) -> None:
    with pytest.raises(CRSRequired) as info:
        mcrs.parse_crs(value)
    assert info.value.code == "CRS_REQUIRED"


def test_each_definition_is_read_once_per_process() -> None:
    """PROJ takes tens of milliseconds to read a PROJJSON document; a run reads its inputs' several times."""
    document = CRS.from_epsg(32610).to_json_dict()
    first = mcrs.parse_crs(json.dumps(document))
    assert first == CRS.from_epsg(32610)
    assert mcrs.parse_crs(json.dumps(document)) is first
    assert mcrs.parse_crs(document) is first  # a PROJJSON dict is its JSON text, as pyproj reads it
    # a dict of PROJ parameters is no PROJJSON: read as pyproj reads it, a PROJ string
    utm = mcrs.parse_crs({"proj": "utm", "zone": 10, "datum": "WGS84", "units": "m"})
    assert utm.to_epsg(min_confidence=20) == 32610 and utm.srs.startswith("+proj=utm")


def test_a_crs_read_once_answers_in_another_thread() -> None:
    from concurrent.futures import ThreadPoolExecutor

    crs = mcrs.parse_crs(CRS.from_epsg(3310).to_json())
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda _: crs.to_epsg(), range(4))) == [3310] * 4


def test_to_lonlat_is_proj_s_default_transformation_found_once() -> None:
    box = (500000.0, 4100000.0, 600000.0, 4200000.0)
    t = mcrs.to_lonlat(CRS.from_epsg(32610).to_json())
    assert mcrs.to_lonlat("EPSG:32610") is not t  # another definition text: found on its own
    assert mcrs.to_lonlat(CRS.from_epsg(32610).to_json()) is t
    expected = pyproj.Transformer.from_crs("EPSG:32610", "EPSG:4326", always_xy=True)
    assert t.transform_bounds(*box, densify_pts=21) == expected.transform_bounds(*box, densify_pts=21)
    # UTM 10N's central meridian is 123 W: the box's west edge, 500 km east, lies on it
    assert t.transform_bounds(*box, densify_pts=21)[0] == pytest.approx(-123.0, abs=1e-9)


# --- crs_label ---------------------------------------------------------------------------------


def test_crs_label_names_the_authority_code() -> None:
    assert mcrs.crs_label("EPSG:32610") == "EPSG:32610"
    # ESRI's WKT for the same CRS is identified with full confidence.
    assert mcrs.crs_label(CRS.from_epsg(32610).to_wkt("WKT1_ESRI")) == "EPSG:32610"
    assert mcrs.crs_label(None) is None


def test_crs_label_does_not_claim_a_code_on_low_confidence() -> None:
    # PROJ matches this PROJ string to EPSG:32610 only at confidence 70 (axes unspecified).
    proj_string = "+proj=utm +zone=10 +datum=WGS84 +type=crs"
    assert CRS(proj_string).to_authority(min_confidence=70) == ("EPSG", "32610")
    assert mcrs.crs_label(proj_string) == proj_string


def test_crs_label_falls_back_to_the_name() -> None:
    from pyproj.crs import ProjectedCRS
    from pyproj.crs.coordinate_operation import LambertAzimuthalEqualAreaConversion

    custom = ProjectedCRS(LambertAzimuthalEqualAreaConversion(10.5, -33.25), name="MapSmith test grid")
    assert mcrs.crs_label(custom) == "MapSmith test grid"


# --- estimate_utm_crs --------------------------------------------------------------------------


# Expected zones from the UTM definition: zone = floor((lon + 180) / 6) + 1, 'N' at lat >= 0,
# and EPSG numbers WGS 84 zones 326zz (north) and 327zz (south).
@pytest.mark.parametrize(
    ("lon", "lat", "expected"),
    [
        (-122.2, 46.2, "EPSG:32610"),  # floor(57.8 / 6) + 1 = 10, north
        (13.4, 52.5, "EPSG:32633"),  # floor(193.4 / 6) + 1 = 33, north
        (151.2, -33.9, "EPSG:32756"),  # floor(331.2 / 6) + 1 = 56, south
        (-120.0, 40.0, "EPSG:32611"),  # on the 10/11 boundary: floor(60 / 6) + 1 = 11
        (0.0, 0.0, "EPSG:32631"),  # on the equator and a boundary: 31 north
    ],
)
def test_estimate_utm_crs_picks_the_zone_of_the_centre(lon: float, lat: float, expected: str) -> None:
    assert mcrs.crs_label(mcrs.estimate_utm_crs((lon, lat, lon, lat))) == expected
    # A box centred on the same point gives the same zone.
    box = (lon - 0.25, lat - 0.25, lon + 0.25, lat + 0.25)  # binary-exact offsets
    assert mcrs.crs_label(mcrs.estimate_utm_crs(box)) == expected


def test_estimate_utm_crs_across_the_antimeridian() -> None:
    # West 170°E, east 170°W: the centre is 180°, i.e. -180°, zone 1; centre latitude -15°: south.
    assert mcrs.crs_label(mcrs.estimate_utm_crs((170.0, -20.0, -170.0, -10.0))) == "EPSG:32701"


def test_estimate_utm_crs_on_another_datum() -> None:
    # NAD83 / UTM zone 14N is EPSG:26914; ETRS89 / UTM zone 33N is EPSG:25833 (EPSG registry).
    assert mcrs.crs_label(mcrs.estimate_utm_crs((-100.0, 40.0, -99.0, 41.0), "NAD83")) == "EPSG:26914"
    assert mcrs.crs_label(mcrs.estimate_utm_crs((13.0, 52.0, 13.8, 52.5), "ETRS89")) == "EPSG:25833"


@pytest.mark.parametrize("bounds", [(0.0, 88.0, 10.0, 90.0), (0.0, -85.0, 10.0, -82.0)])
def test_estimate_utm_crs_refuses_polar_areas(bounds: tuple[float, float, float, float]) -> None:
    with pytest.raises(CRSError) as info:
        mcrs.estimate_utm_crs(bounds)
    assert info.value.code == "CRS_NO_UTM_ZONE"
    assert "projected CRS" in (info.value.hint or "")


def test_polar_hint_names_crss_that_are_what_it_says() -> None:
    with pytest.raises(CRSError) as info:
        mcrs.estimate_utm_crs((0.0, 88.0, 10.0, 90.0))
    named = dict.fromkeys(re.findall(r"EPSG:\d+", info.value.hint or ""))
    assert list(named) == ["EPSG:3413", "EPSG:3031", "EPSG:6931", "EPSG:6932"]
    assert not mcrs.is_equal_area("EPSG:3413") and not mcrs.is_equal_area("EPSG:3031")
    assert mcrs.is_equal_area("EPSG:6931") and mcrs.is_equal_area("EPSG:6932")


def test_estimate_utm_crs_refuses_a_datum_that_does_not_cover_the_area() -> None:
    with pytest.raises(CRSError) as info:
        mcrs.estimate_utm_crs((13.0, 52.0, 13.8, 52.5), "NAD83")
    assert info.value.code == "CRS_NO_UTM_ZONE"


@pytest.mark.parametrize(
    "bounds",
    [
        (500000.0, 4100000.0, 510000.0, 4110000.0),  # UTM metres passed as degrees
        (10.0, 50.0, 11.0, 40.0),  # south above north
        (10.0, math.nan, 11.0, 40.0),
        (190.0, 10.0, 200.0, 20.0),  # 0-360 longitudes
    ],
)
def test_bounds_that_are_not_degrees_are_refused(bounds: tuple[float, float, float, float]) -> None:
    with pytest.raises(CRSError) as info:
        mcrs.estimate_utm_crs(bounds)
    assert info.value.code == "CRS_BOUNDS_NOT_LONLAT"
    with pytest.raises(CRSError):
        mcrs.choose_transformer("EPSG:4326", "EPSG:32610", bounds)


def test_bounds_overshooting_the_world_by_rounding_are_accepted() -> None:
    # transform_bounds of a world layer can return 180.00000000000003.
    world = (-180.00000000000003, -90.0, 180.00000000000003, 90.0)
    _, record = mcrs.choose_transformer("EPSG:4326", "EPSG:3857", world)
    assert record["x-mapsmith:chosen_by"]["area_of_interest_lonlat"] == [-180.0, -90.0, 180.0, 90.0]


# --- linear_unit_metres ------------------------------------------------------------------------


def test_linear_unit_us_survey_foot() -> None:
    # US survey foot = 1200/3937 m by definition (US Metric Act 1866, NIST). PROJ states
    # 0.30480060960121924, one unit in the last place above the double nearest 1200/3937.
    assert mcrs.linear_unit_metres("EPSG:2227") == pytest.approx(1200 / 3937, rel=1e-15)


def test_linear_unit_metre_and_international_foot() -> None:
    assert mcrs.linear_unit_metres("EPSG:32610") == 1.0
    # International foot = 0.3048 m exactly (1959 agreement).
    assert mcrs.linear_unit_metres("+proj=utm +zone=10 +units=ft +type=crs") == 0.3048


@pytest.mark.parametrize("value", ["EPSG:4326", "EPSG:4978"], ids=["geographic", "geocentric"])
def test_linear_unit_refuses_crss_that_are_not_projected(value: str) -> None:
    with pytest.raises(CRSError) as info:
        mcrs.linear_unit_metres(value)
    assert info.value.code == "CRS_NOT_PROJECTED"


# --- is_geographic -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("EPSG:4326", True), ("EPSG:4267", True), ("EPSG:4326+5773", True), ("EPSG:32610", False)],
)
def test_is_geographic(value: str, expected: bool) -> None:
    assert mcrs.is_geographic(value) is expected


# --- is_equal_area -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("EPSG:5070", True),  # NAD83 / Conus Albers: Albers Equal Area
        ("EPSG:6933", True),  # EASE-Grid 2.0 Global: Lambert Cylindrical Equal Area
        ("EPSG:3035", True),  # LAEA Europe: Lambert Azimuthal Equal Area
        ("EPSG:8857", True),  # Equal Earth Greenwich
        ("ESRI:54009", True),  # World Mollweide, a method with no EPSG code
        ("EPSG:32610", False),  # Transverse Mercator
        ("EPSG:3857", False),  # Pseudo-Mercator
        ("EPSG:4326", False),  # geographic
        ("EPSG:5070+5703", True),  # compound: judged by its projected part
        ("+proj=aea +lat_1=20 +lat_2=50 +towgs84=1,2,3 +type=crs", True),  # bound CRS
    ],
)
def test_is_equal_area(value: str, expected: bool) -> None:
    assert mcrs.is_equal_area(value) is expected


def test_is_equal_area_ignores_the_crs_name() -> None:
    from pyproj.crs import ProjectedCRS
    from pyproj.crs.coordinate_operation import TransverseMercatorConversion

    misleading = ProjectedCRS(TransverseMercatorConversion(0, 15), name="Equal Area (not really)")
    assert mcrs.is_equal_area(misleading) is False


# Points away from the poles and from interruptions, where PROJ's numerical factors are sound.
_FACTOR_POINTS = [(lon, lat) for lon in (-150.0, -75.0, -10.0, 40.0, 110.0) for lat in (-55.0, -20.0, 5.0, 35.0, 60.0)]
# Parameters some projections require; the first that gives a projected CRS is used.
_PARAMETER_VARIANTS = ["", " +lat_1=20 +lat_2=50", " +lat_1=30", " +h=3000000"]


def _proj_projections() -> list[tuple[str, CRS]]:
    found = []
    for short_name in sorted(pyproj.get_proj_operations_map()):
        for extra in _PARAMETER_VARIANTS:
            try:
                candidate = CRS(f"+proj={short_name}{extra} +type=crs")
            except pyproj.exceptions.CRSError:
                continue
            if candidate.is_projected:
                found.append((short_name, candidate))
            break
    return found


def _areal_scales(crs: CRS) -> list[float]:
    proj = pyproj.Proj(crs)
    scales = []
    for lon, lat in _FACTOR_POINTS:
        try:
            scale = proj.get_factors(lon, lat, errcheck=True).areal_scale
        except pyproj.exceptions.ProjError:
            continue
        if math.isfinite(scale):
            scales.append(scale)
    return scales


def test_is_equal_area_agrees_with_proj_areal_scale_for_every_projection() -> None:
    """Every PROJ projection: equal-area by method iff PROJ's areal scale is 1 at every point.

    The independent measure is PROJ's own scale factor (areal scale = 1 means a square metre on
    the map is a square metre on the ground). 1e-4 admits methods published with rounded
    constants (Hatano, Wagner VII, McBryde-Thomas: ~2e-5). A new PROJ projection fails here
    until it is classified.
    """
    disagreements = []
    checked = 0
    for short_name, projected in _proj_projections():
        scales = _areal_scales(projected)
        if len(scales) < 10:
            continue
        checked += 1
        measured = all(abs(scale - 1.0) < 1e-4 for scale in scales)
        if mcrs.is_equal_area(projected) is not measured:
            method = projected.coordinate_operation.method_name
            disagreements.append((short_name, method, measured, min(scales), max(scales)))
    assert checked > 80  # the loop really covered PROJ's projections
    assert disagreements == []


# --- transformations ---------------------------------------------------------------------------


def test_wgs84_to_utm_is_the_projection_and_return_is_its_inverse() -> None:
    transformer, outbound = mcrs.choose_transformer("EPSG:4326", "EPSG:32610", SEATTLE_AREA_LONLAT)
    _, inbound = mcrs.choose_transformer("EPSG:32610", "EPSG:4326", SEATTLE_AREA_LONLAT)
    for record in (outbound, inbound):
        _assert_transformation_shape(record)
        assert record["is_ballpark"] is False
        # PROJ states 0.0 for a conversion: exact by definition, no datum change.
        assert record["accuracy_m"] == 0.0
        assert record["better_available_m"] is None
    assert "+proj=utm" in outbound["pipeline"] and "+zone=10" in outbound["pipeline"]
    assert "+inv" not in outbound["pipeline"]
    assert "+inv +proj=utm" in inbound["pipeline"] and "+zone=10" in inbound["pipeline"]
    assert inbound["pipeline"] != outbound["pipeline"]
    # The transformer handed back is the operation the record names, longitude first.
    assert transformer.to_proj4() == outbound["pipeline"]
    easting, northing = transformer.transform(-123.0, 46.0)
    # Zone 10's central meridian is 123°W, where easting is the false easting 500 000 m.
    assert easting == pytest.approx(500_000.0, abs=1e-6)
    assert 5_000_000 < northing < 5_200_000


def test_round_trip_record_measures_each_leg() -> None:
    trip = mcrs.round_trip_record("EPSG:4326", "EPSG:32610", SEATTLE_AREA_LONLAT)
    assert set(trip) == {"transformation", "return_transformation"}
    assert trip["transformation"] == mcrs.transformation_record("EPSG:4326", "EPSG:32610", SEATTLE_AREA_LONLAT)
    assert trip["return_transformation"] == mcrs.transformation_record("EPSG:32610", "EPSG:4326", SEATTLE_AREA_LONLAT)
    assert "Inverse of UTM zone 10N" in trip["return_transformation"]["x-mapsmith:description"]


@needs_no_nadcon
def test_nad27_to_wgs84_over_conus_names_what_was_used_and_what_is_missing() -> None:
    transformer, record = mcrs.choose_transformer("EPSG:4267", "EPSG:4326", CONUS_LONLAT)
    _assert_transformation_shape(record)
    # Chosen: EPSG:1173 "NAD27 to WGS 84 (4)", CONUS, a 3-parameter shift (-8, 160, 176) m --
    # the DMA TR 8350.2 mean values for NAD27 CONUS -- whose stated accuracy in EPSG is 10 m.
    # Not EPSG "NAD27 to WGS 84 (88)", 1 m on paper, which is defined for Cuba.
    assert "NAD27 to WGS 84 (4)" in record["x-mapsmith:description"]
    assert "+proj=helmert +x=-8 +y=160 +z=176" in record["pipeline"]
    assert record["accuracy_m"] == 10.0
    assert record["is_ballpark"] is False
    # §3.7: better_available_m means something only beside a ballpark.
    assert record["better_available_m"] is None
    # What the missing grid would have given: NADCON over CONUS, stated 5 m in EPSG.
    assert record["x-mapsmith:better_unavailable"] == {
        "operation": "NAD27 to WGS 84 (79)",
        "accuracy_m": 5.0,
        "missing_grids": ["us_noaa_conus.tif"],
    }
    # The shift is real: near Meades Ranch, Kansas (NAD27's origin) tens of metres.
    lon, lat = transformer.transform(-98.54, 39.22)
    distance_m = pyproj.Geod(ellps="WGS84").inv(-98.54, 39.22, lon, lat)[2]
    assert 10.0 < distance_m < 100.0


@needs_no_nadcon
def test_nad27_to_wgs84_for_a_small_area_takes_the_most_accurate_operation_covering_it() -> None:
    record = mcrs.transformation_record("EPSG:4267", "EPSG:4326", SAN_FRANCISCO_LONLAT)
    # Both "(4)" CONUS (10 m) and "(6)" CONUS west of the Mississippi (7 m) cover San Francisco;
    # the more accurate one wins.
    assert "NAD27 to WGS 84 (6)" in record["x-mapsmith:description"]
    assert record["accuracy_m"] == 7.0
    # HPGN for northern California on top of NADCON, stated 1.5 m, needs two missing grids.
    better = record["x-mapsmith:better_unavailable"]
    assert better["accuracy_m"] == 1.5
    assert sorted(better["missing_grids"]) == ["us_noaa_cnhpgn.tif", "us_noaa_conus.tif"]


@needs_no_nadcon
def test_nad27_to_nad83_without_nadcon_goes_through_wgs84_and_says_what_is_missing() -> None:
    transformer, record = mcrs.choose_transformer("EPSG:4267", "EPSG:4269", CONUS_LONLAT)
    _assert_transformation_shape(record)
    # EPSG has no Helmert for NAD27 to NAD83 over CONUS, only NADCON grids, so PROJ's direct list
    # holds only a ballpark (coordinates passed unchanged). Through WGS 84 there is a datum shift:
    # EPSG "NAD27 to WGS 84 (4)" (CONUS, 10 m) then the inverse of "NAD83 to WGS 84 (1)" (4 m),
    # 14 m in all by PROJ's rule for concatenated operations (accuracies add).
    assert record["is_ballpark"] is False
    assert record["accuracy_m"] == 14.0
    assert record["x-mapsmith:chosen_by"]["intermediate_crs"] == "EPSG:4326"
    assert record["x-mapsmith:description"] == "NAD27 to WGS 84 (4) + Inverse of NAD83 to WGS 84 (1)"
    # Near Meades Ranch the NAD27 -> NAD83 shift is tens of metres; the ballpark would have left it out.
    lon, lat = transformer.transform(-98.54, 39.22)
    assert 10.0 < pyproj.Geod(ellps="GRS80").inv(-98.54, 39.22, lon, lat)[2] < 100.0
    # §3.7: better_available_m is for a ballpark only; NADCON (EPSG:1241, 0.15 m) is still named.
    assert record["better_available_m"] is None
    assert record["x-mapsmith:better_unavailable"]["accuracy_m"] == 0.15
    assert "us_noaa_conus.tif" in record["x-mapsmith:better_unavailable"]["missing_grids"]


def test_a_ballpark_with_nothing_better_published_says_so() -> None:
    # A datum PROJ knows only by its ellipsoid: no published operation, so nothing is missing.
    record = mcrs.transformation_record("+proj=longlat +ellps=clrk66 +type=crs", "EPSG:4326", CONUS_LONLAT)
    assert record["is_ballpark"] is True
    assert record["better_available_m"] is None
    assert "x-mapsmith:better_unavailable" not in record


@needs_no_nadcon
def test_nad27_round_trip_legs_are_separate_operations() -> None:
    trip = mcrs.round_trip_record("EPSG:4267", "EPSG:32614", (-100.0, 35.0, -98.0, 37.0))
    outbound, inbound = trip["transformation"], trip["return_transformation"]
    assert "+proj=helmert +x=-8 +y=159 +z=175" in outbound["pipeline"]  # EPSG "(6)", west
    assert "+proj=helmert +x=8 +y=-159 +z=-175" in inbound["pipeline"]  # and its inverse
    assert inbound["pipeline"].startswith("+proj=pipeline +step +inv +proj=utm +zone=14")


def test_no_area_of_interest_is_recorded_as_such() -> None:
    record = mcrs.transformation_record("EPSG:4326", "EPSG:32610", None)
    assert record["x-mapsmith:chosen_by"]["area_of_interest_lonlat"] is None
    assert "no area of interest" in record["x-mapsmith:chosen_by"]["rule"]


def test_no_operation_at_all_is_refused() -> None:
    with pytest.raises(CRSError) as info:
        mcrs.choose_transformer("EPSG:4326", "IAU_2015:49900", None)  # Mars
    assert info.value.code == "CRS_NO_TRANSFORMATION"
    assert info.value.evidence["missing_grids"] == []


def test_choosing_leaves_the_network_off() -> None:
    mcrs.choose_transformer("EPSG:4267", "EPSG:4326", CONUS_LONLAT)
    assert pyproj.network.is_network_enabled() is False


def test_records_validate_against_the_manifest_schema() -> None:
    import jsonschema

    from mapsmith.provenance.validator import load_schema

    schema = json.loads(SCHEMA_PATH.read_text()) if SCHEMA_PATH.exists() else load_schema()
    # Validate only crs_decisions: keep the schema's properties so its "#/properties/..." refs
    # resolve, and drop the manifest's other required fields.
    partial = {key: schema[key] for key in ("$schema", "properties") if key in schema}
    crs_decisions = {
        "analysis_crs": "EPSG:32614",
        "reason": "test",
        "transformation": mcrs.transformation_record("EPSG:4267", "EPSG:4269", CONUS_LONLAT),
        "round_trip": mcrs.round_trip_record("EPSG:4267", "EPSG:32614", CONUS_LONLAT),
    }
    jsonschema.validate({"crs_decisions": crs_decisions}, partial)


def test_errors_are_mapsmith_errors_with_a_hint() -> None:
    for call in (
        lambda: mcrs.parse_crs("srid:4326"),
        lambda: mcrs.estimate_utm_crs((0.0, 89.0, 0.0, 89.0)),
        lambda: mcrs.linear_unit_metres("EPSG:4326"),
    ):
        with pytest.raises(MapSmithError) as info:
            call()
        assert info.value.hint and info.value.to_dict()["code"] == info.value.code
