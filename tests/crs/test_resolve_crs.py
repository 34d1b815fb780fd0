"""resolve_crs: descriptions to EPSG codes, checked against PROJ's own database and the zone formulas.

The expected codes are not trusted as written: each is looked up in pyproj's EPSG database by the
test, and its parameters compared with numbers worked out by hand from the zone systems' rules:

* 3-degree Gauss-Kruger zone n: central meridian 3n E; "zone n" grids carry the zone in front of
  the easting, false easting n * 1,000,000 + 500,000 m; "CM" grids have 500,000 m.
* 6-degree Gauss-Kruger zone n: central meridian 6n - 3 E, same false-easting rule.
* UTM zone n: central meridian 6n - 183 E, false easting 500,000 m; false northing 0 in the north,
  10,000,000 m in the south.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyproj import CRS

from mapsmith.errors import ArgumentError, CRSError


def facts(code: int) -> dict:
    """What PROJ's database says about an EPSG code: name, central meridian, false easting/northing."""
    crs = CRS.from_epsg(code)
    params = {p.name: p.value for p in crs.coordinate_operation.params} if crs.is_projected else {}
    return {
        "name": crs.name,
        "central_meridian": params.get("Longitude of natural origin"),
        "false_easting": params.get("False easting"),
        "false_northing": params.get("False northing"),
    }


def resolve(app, description: str) -> dict:
    result = app.run("resolve_crs", {"description": description})
    assert result.output_path is None and result.manifest_path is None  # an answer, no dataset
    return result.answer


# (description, EPSG code, its name in the database, central meridian, false easting), worked by hand:
CGCS_3_ZONE_40 = (4528, "CGCS2000 / 3-degree Gauss-Kruger zone 40", 3 * 40, 40 * 1_000_000 + 500_000)
XIAN_6_ZONE_20 = (2334, "Xian 1980 / Gauss-Kruger zone 20", 6 * 20 - 3, 20 * 1_000_000 + 500_000)
BEIJING_3_ZONE_39 = (2415, "Beijing 1954 / 3-degree Gauss-Kruger zone 39", 3 * 39, 39 * 1_000_000 + 500_000)
CGCS_3_CM_117 = (4548, "CGCS2000 / 3-degree Gauss-Kruger CM 117E", 117, 500_000)
WGS84_UTM_33N = (32633, "WGS 84 / UTM zone 33N", 6 * 33 - 183, 500_000)
WGS84_UTM_33S = (32733, "WGS 84 / UTM zone 33S", 6 * 33 - 183, 500_000)

RESOLVED = [
    ("CGCS2000 3-degree Gauss-Kruger zone 40", CGCS_3_ZONE_40),
    ("CGCS2000 3度带第40带", CGCS_3_ZONE_40),
    ("国家2000 3度带 第40带", CGCS_3_ZONE_40),
    # the zone number read from the false easting's prefix
    ("CGCS2000 3-degree false easting 40500000", CGCS_3_ZONE_40),
    ("Xian 1980 6-degree zone 20", XIAN_6_ZONE_20),
    ("西安80 6度带第20带", XIAN_6_ZONE_20),
    ("Xi'an 1980 6° Gauss-Kruger zone 20", XIAN_6_ZONE_20),
    ("北京54 3度带第39带", BEIJING_3_ZONE_39),
    ("CGCS2000 3-degree central meridian 117 without zone prefix", CGCS_3_CM_117),
    ("CGCS2000 3度带 中央经线117 不带带号", CGCS_3_CM_117),
    ("CGCS2000 / 3-degree Gauss-Kruger CM 117E", CGCS_3_CM_117),  # the exact EPSG name
    ("WGS 84 UTM 33N", WGS84_UTM_33N),
    ("WGS84 UTM zone 33 north", WGS84_UTM_33N),
    ("WGS 84 UTM 33S", WGS84_UTM_33S),
]


@pytest.mark.parametrize(("description", "expected"), RESOLVED)
def test_descriptions_resolve_to_the_code_the_database_confirms(app, description: str, expected: tuple) -> None:
    code, name, central_meridian, false_easting = expected
    db = facts(code)
    assert db["name"] == name
    assert db["central_meridian"] == pytest.approx(central_meridian)
    assert db["false_easting"] == pytest.approx(false_easting)
    answer = resolve(app, description)
    assert answer["status"] == "resolved"
    assert (answer["epsg"], answer["code"], answer["name"]) == (code, f"EPSG:{code}", name)
    assert answer["candidates"] == []
    area = CRS.from_epsg(code).area_of_use
    assert answer["area_of_use"] == {"name": area.name, "bounds": [area.west, area.south, area.east, area.north]}


def test_southern_utm_has_the_ten_thousand_km_false_northing() -> None:
    assert facts(32733)["false_northing"] == 10_000_000
    assert facts(32633)["false_northing"] == 0


def test_the_parsed_reading_is_returned(app) -> None:
    answer = resolve(app, "西安80 6度带第20带")
    parsed = answer["parsed"]
    assert (parsed["datum"], parsed["projection"], parsed["zone_width"], parsed["zone"]) == (
        "Xian 1980",
        "gauss_kruger",
        6,
        20,
    )
    assert answer["projection"] == {"central_meridian": 117.0, "false_easting": 20_500_000.0, "zone": 20}


def test_a_zone_grid_names_its_unprefixed_twin(app) -> None:
    # zone 40's central meridian is 120 E: the same grid without the prefix is "CM 120E", FE 500,000 m
    answer = resolve(app, "CGCS2000 3-degree Gauss-Kruger zone 40")
    twin = answer["alternative"]
    db = facts(twin["epsg"])
    assert db["name"] == "CGCS2000 / 3-degree Gauss-Kruger CM 120E" == twin["name"]
    assert (db["central_meridian"], db["false_easting"]) == (120, 500_000)
    assert "no zone number" in twin["when"]


@pytest.mark.parametrize(
    ("description", "code", "form"),
    [
        ("EPSG:4490", 4490, "authority_code"),
        ("epsg 4528", 4528, "authority_code"),
        ("urn:ogc:def:crs:EPSG::4326", 4326, "authority_code"),
        ("4490", 4490, "bare_number"),
    ],
)
def test_codes_resolve_with_their_area_of_use(app, description: str, code: int, form: str) -> None:
    answer = resolve(app, description)
    assert answer["status"] == "resolved" and answer["epsg"] == code
    assert answer["name"] == CRS.from_epsg(code).name
    assert answer["parsed"]["form"] == form
    assert answer["area_of_use"]["bounds"] == list(CRS.from_epsg(code).area_of_use.bounds)


def test_a_bare_number_is_read_as_epsg_only_because_no_other_authority_has_it(app) -> None:
    answer = resolve(app, "4490")
    assert answer["parsed"]["authority"] == "EPSG"
    assert "only as EPSG:4490" in answer["parsed"]["assumed"]


def test_wkt_and_projjson_resolve_by_their_identifier_or_by_identification(app) -> None:
    crs = CRS.from_epsg(4548)
    assert resolve(app, crs.to_wkt())["epsg"] == 4548
    assert resolve(app, crs.to_json())["epsg"] == 4548
    # the same definition without its identifier: PROJ identifies it with full confidence
    definition = crs.to_json_dict()
    del definition["id"]
    answer = resolve(app, json.dumps(definition))
    assert answer["status"] == "resolved" and answer["epsg"] == 4548
    assert "identified_by" in answer["parsed"]


def test_a_partial_definition_is_offered_not_taken(app) -> None:
    # A PROJ string states no axis order: PROJ matches EPSG:32633 at less than full confidence.
    answer = resolve(app, "+proj=utm +zone=33 +datum=WGS84 +units=m +no_defs")
    assert answer["status"] == "needs_clarification" and answer["epsg"] is None
    (candidate,) = answer["candidates"]
    assert candidate["epsg"] == 32633 and candidate["confidence"] < 90


def test_a_central_meridian_alone_lists_every_datum_and_both_grid_forms(app) -> None:
    # 117 E is 3-degree zone 39 (3 x 39) and 6-degree zone 20 (6 x 20 - 3), each with a prefixed
    # grid (FE 39,500,000 / 20,500,000 m) and an unprefixed "CM 117E" one (FE 500,000 m).
    for description in ("central meridian 117", "中央经线117"):
        answer = resolve(app, description)
        assert answer["status"] == "needs_clarification" and answer["epsg"] is None
        assert answer["missing"] == ["datum", "zone_width", "zone_prefix"]
        candidates = answer["candidates"]
        assert {"CGCS2000", "Xian 1980", "Beijing 1954"} <= {c["datum"] for c in candidates}
        for c in candidates:
            db = facts(c["epsg"])
            assert db["name"] == c["name"]
            assert db["central_meridian"] == 117
            assert db["false_easting"] in (500_000, 39_500_000, 20_500_000)
            assert c["area_of_use"]["name"]
        assert {c["false_easting"] for c in candidates} == {500_000, 39_500_000, 20_500_000}
        assert "CGCS2000" in answer["hint"] and "3-degree or 6-degree" in answer["hint"]


def test_a_named_datum_still_leaves_width_and_prefix_open(app) -> None:
    answer = resolve(app, "CGCS2000 central meridian 117")
    assert answer["status"] == "needs_clarification"
    assert answer["missing"] == ["zone_width", "zone_prefix"]
    codes = [c["epsg"] for c in answer["candidates"]]
    assert sorted(codes) == [4498, 4509, 4527, 4548]
    expected_names = {
        4548: "CGCS2000 / 3-degree Gauss-Kruger CM 117E",
        4527: "CGCS2000 / 3-degree Gauss-Kruger zone 39",
        4509: "CGCS2000 / Gauss-Kruger CM 117E",
        4498: "CGCS2000 / Gauss-Kruger zone 20",
    }
    for code, name in expected_names.items():
        assert facts(code)["name"] == name
        assert facts(code)["central_meridian"] == 117
    # saying 3-degree leaves only the prefix open
    narrower = resolve(app, "CGCS2000 3-degree central meridian 117")
    assert sorted(c["epsg"] for c in narrower["candidates"]) == [4527, 4548]
    assert narrower["missing"] == ["zone_prefix"]


def test_a_zone_without_datum_or_width_needs_clarification(app) -> None:
    # 3-degree zone 40: central meridian 120 E, false easting 40,500,000 m, on every datum that has it
    answer = resolve(app, "Gauss-Kruger zone 40")
    assert answer["status"] == "needs_clarification" and answer["missing"] == ["datum"]
    assert {"CGCS2000", "Xian 1980", "Beijing 1954"} <= {c["datum"] for c in answer["candidates"]}
    for c in answer["candidates"]:
        db = facts(c["epsg"])
        assert (db["central_meridian"], db["false_easting"]) == (120, 40_500_000)


def test_utm_without_hemisphere_or_datum_needs_clarification(app) -> None:
    answer = resolve(app, "WGS 84 UTM 33")
    assert sorted(c["epsg"] for c in answer["candidates"]) == [32633, 32733]
    assert answer["missing"] == ["hemisphere"]
    answer = resolve(app, "UTM zone 33N")
    assert answer["missing"] == ["datum"]
    assert {32633, 25833} <= {c["epsg"] for c in answer["candidates"]}
    assert facts(25833)["name"] == "ETRS89 / UTM zone 33N"


def test_a_width_the_database_settles_is_inferred_and_said(app) -> None:
    # CGCS2000's 3-degree zones run 25-45 and its 6-degree zones 13-23: zone 20 exists only 6-degree.
    answer = resolve(app, "CGCS2000 Gauss-Kruger zone 20")
    assert answer["status"] == "resolved" and answer["epsg"] == 4498
    assert facts(4498)["name"] == "CGCS2000 / Gauss-Kruger zone 20"
    assert "zone_width" in answer["parsed"]["inferred"]


def test_a_datum_alone_names_its_geographic_crs(app) -> None:
    assert resolve(app, "CGCS2000")["epsg"] == 4490
    beijing = resolve(app, "北京54")
    assert beijing["epsg"] == 4214 and facts(4214)["name"] == "Beijing 1954"
    assert "geographic" in beijing["note"]


@pytest.mark.parametrize(
    ("description", "fragment"),
    [
        # 6-degree zones on Xian 1980 are 13-23: zone 40 exists only as a 3-degree zone
        ("Xian 1980 6-degree zone 40", "6-degree zones 13-23"),
        ("CGCS2000 UTM 50N", "no UTM grid on CGCS2000"),
        ("EPSG:999999", "no EPSG:999999"),
        ("the projection my surveyor uses", "no datum, zone, central meridian or code was recognised"),
    ],
)
def test_what_does_not_exist_is_not_found_with_what_does(app, description: str, fragment: str) -> None:
    answer = resolve(app, description)
    assert answer["status"] == "not_found" and answer["epsg"] is None and answer["candidates"] == []
    assert fragment in answer["hint"]


@pytest.mark.parametrize("description", ["srid:4326", "SRID=4326", "srid 4326"])
def test_an_srid_without_authority_is_refused(app, workspace: Path, description: str) -> None:
    with pytest.raises(CRSError) as err:
        app.run("resolve_crs", {"description": description})
    assert err.value.code == "CRS_AMBIGUOUS_SRID"
    assert "EPSG:4326" in err.value.hint
    assert list(workspace.iterdir()) == []


def test_an_empty_description_is_refused(app) -> None:
    with pytest.raises(ArgumentError) as err:
        app.run("resolve_crs", {"description": "   "})
    assert err.value.code == "DESCRIPTION_EMPTY"


def test_the_answer_names_its_engine_and_database(app) -> None:
    import pyproj
    from pyproj.database import get_database_metadata

    result = app.run("resolve_crs", {"description": "WGS 84 UTM 33N"})
    assert result.engine["name"] == "pyproj" and result.engine["version"] == pyproj.__version__
    assert result.answer["epsg_database"] == get_database_metadata("EPSG.VERSION")
    assert result.checks == [] and result.warnings == []
