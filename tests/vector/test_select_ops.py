"""select_features: whole features kept by attribute, range and spatial relation, counted by hand.

Each expected selection is worked out in the comment beside it from the small layers built here
(coordinates in EPSG:32610 are offsets from (500000, 5000000), so every relation can be drawn on
squared paper). The workspace fixture validates every manifest a test leaves behind.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from shapely.geometry import LineString, Point, box

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError
from mapsmith.expressions import ExpressionError

X0, Y0 = 500_000, 5_000_000


def at(x: float, y: float) -> Point:
    return Point(X0 + x, Y0 + y)


def square(x0: float, y0: float, x1: float, y1: float):
    return box(X0 + x0, Y0 + y0, X0 + x1, Y0 + y1)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# The attribute table of test_expressions, on six points 10 m apart.
# id | name   | value | landuse     | owner
#  1 | Alpha  | 10.0  | residential | Li
#  2 | beta   | 20.0  | mixed       | NULL
#  3 | Gamma  | NULL  | industrial  | Wang
#  4 | delta  | 35.5  | residential | Zhao
#  5 | NULL   |  5.0  | park        | NULL
#  6 | O'Neil | 20.0  | mixed       | Chen
@pytest.fixture
def parcels(workspace: Path) -> Path:
    return write_layer(
        workspace / "parcels.gpkg",
        [at(10 * i, 0) for i in range(6)],
        "EPSG:32610",
        id=[1, 2, 3, 4, 5, 6],
        name=["Alpha", "beta", "Gamma", "delta", None, "O'Neil"],
        value=[10.0, 20.0, None, 35.5, 5.0, 20.0],
        landuse=["residential", "mixed", "industrial", "residential", "park", "mixed"],
        owner=["Li", None, "Wang", "Zhao", None, "Chen"],
    )


def test_where_keeps_whole_features_and_reports_the_count(app, workspace: Path, parcels: Path) -> None:
    # value >= 10 AND landuse <> 'park': rows 1 (10), 2 (20), 4 (35.5), 6 (20); row 3's value is NULL
    # (unknown, not selected, reported), row 5 is 5 and a park. 4 of 6.
    before = sha256(parcels)
    result = app.run(
        "select_features",
        {"input_path": "parcels.gpkg", "where": "value >= 10 AND landuse <> 'park'", "output_path": "sel.gpkg"},
    )
    assert result.answer["selected_count"] == 4 and result.answer["total_count"] == 6
    assert result.answer["summary"] == "4 of 6 features selected"
    (where,) = result.answer["criteria"]
    assert (where["matched"], where["not_matched"], where["unknown_because_null"]) == (4, 1, 1)
    out = read(workspace / "sel.gpkg")
    source = read(parcels)
    assert out["id"].tolist() == [1, 2, 4, 6]
    # whole features: every field and every coordinate as in the input
    expected = source[source["id"].isin([1, 2, 4, 6])].reset_index(drop=True)
    assert list(out.columns) == list(source.columns)
    assert out.drop(columns="geometry").equals(expected.drop(columns="geometry"))
    assert out.geometry.geom_equals_exact(expected.geometry, tolerance=0).all()
    assert sha256(parcels) == before  # the input is never modified
    record = manifest(workspace / "sel.gpkg")
    assert record["parameters"]["where"] == "value >= 10 AND landuse <> 'park'"
    assert record["parameters"]["x-mapsmith:where_canonical"] == "((value >= 10) AND (landuse <> 'park'))"
    checks = {c["name"]: c for c in record["verification"]}
    assert checks["feature_count_exact"]["passed"] and "4 features selected" in checks["feature_count_exact"]["detail"]
    assert checks["feature_count_bounded"]["passed"]
    assert checks["extent_within_expected"]["passed"] and checks["x-mapsmith:fields_preserved"]["passed"]
    assert any("1 feature was not selected because where is unknown" in n for n in result.notes)
    assert "crs_decisions" not in record  # no geometry was computed on


def test_field_range_is_inclusive_and_one_bound_is_enough(app, workspace: Path, parcels: Path) -> None:
    # 10 <= value <= 20: rows 1, 2, 6 (both ends included)
    both = app.run(
        "select_features",
        {"input_path": "parcels.gpkg", "field": "value", "min_value": 10, "max_value": 20, "output_path": "a.gpkg"},
    )
    assert read(workspace / "a.gpkg")["id"].tolist() == [1, 2, 6]
    assert both.answer["criteria"][0]["condition"] == "(value BETWEEN 10.0 AND 20.0)"
    # value >= 20: rows 2, 4, 6
    app.run(
        "select_features", {"input_path": "parcels.gpkg", "field": "value", "min_value": 20, "output_path": "b.gpkg"}
    )
    assert read(workspace / "b.gpkg")["id"].tolist() == [2, 4, 6]
    # value <= 10: rows 1 (10), 5 (5)
    app.run(
        "select_features", {"input_path": "parcels.gpkg", "field": "value", "max_value": 10, "output_path": "c.gpkg"}
    )
    assert read(workspace / "c.gpkg")["id"].tolist() == [1, 5]


def test_an_empty_selection_is_written_and_warned_about(app, workspace: Path, parcels: Path) -> None:
    result = app.run(
        "select_features", {"input_path": "parcels.gpkg", "where": "value > 1000", "output_path": "none.gpkg"}
    )
    assert result.answer["selected_count"] == 0
    assert [w["code"] for w in result.warnings] == ["SELECTION_EMPTY"]
    assert len(read(workspace / "none.gpkg")) == 0
    empty = next(c for c in result.checks if c["name"] == "result_not_empty")
    assert empty["passed"] is False and empty["critical"] is False


@pytest.mark.parametrize(
    ("arguments", "error", "code", "evidence"),
    [
        ({"where": "code = 310101"}, ExpressionError, "FIELD_NOT_FOUND", {"field": "code"}),
        ({"where": "name = 5"}, ExpressionError, "EXPRESSION_TYPE_MISMATCH", {"position": 0}),
        ({"where": "__import__('os').system('ls')"}, ExpressionError, "EXPRESSION_SYNTAX", {"position": 10}),
        ({"where": "value > 1; DROP TABLE parcels"}, ExpressionError, "EXPRESSION_SYNTAX", {"position": 9}),
        ({"field": "name", "min_value": 1}, ExpressionError, "EXPRESSION_TYPE_MISMATCH", {"argument": "field"}),
        ({"field": "vlaue", "min_value": 1}, ExpressionError, "FIELD_NOT_FOUND", {"field": "vlaue"}),
        ({}, ArgumentError, "SELECTION_CRITERION_REQUIRED", {}),
        (
            {"field": "value"},
            ArgumentError,
            "SELECTION_CRITERION_INCOMPLETE",
            {"missing": "min_value and/or max_value"},
        ),
        ({"max_value": 3}, ArgumentError, "SELECTION_CRITERION_INCOMPLETE", {"missing": "field"}),
        ({"field": "value", "min_value": 5, "max_value": 1}, ArgumentError, "ARGUMENT_OUT_OF_RANGE", {}),
        ({"relation": "intersects"}, ArgumentError, "SELECTION_CRITERION_INCOMPLETE", {"missing": "relation_path"}),
        ({"relation_path": "parcels.gpkg"}, ArgumentError, "SELECTION_CRITERION_INCOMPLETE", {"missing": "relation"}),
        (
            {"relation": "within_distance", "relation_path": "parcels.gpkg"},
            ArgumentError,
            "SELECTION_CRITERION_INCOMPLETE",
            {"missing": "distance_meters"},
        ),
        (
            {"relation": "intersects", "relation_path": "parcels.gpkg", "distance_meters": 5},
            ArgumentError,
            "ARGUMENT_NOT_APPLICABLE",
            {"argument": "distance_meters"},
        ),
        ({"relation": "near", "relation_path": "parcels.gpkg"}, ArgumentError, "ARGUMENT_NOT_IN_CHOICES", {}),
    ],
)
def test_refusals_have_their_own_codes_and_write_nothing(
    app, workspace: Path, parcels: Path, arguments: dict, error: type, code: str, evidence: dict
) -> None:
    before = sha256(parcels)
    with pytest.raises(error) as err:
        app.run("select_features", {"input_path": "parcels.gpkg", **arguments, "output_path": "x.gpkg"})
    assert err.value.code == code
    assert err.value.hint
    for key, value in evidence.items():
        assert err.value.evidence[key] == value, key
    assert not (workspace / "x.gpkg").exists()
    assert sha256(parcels) == before


# Relation fixtures (offsets in metres, EPSG:32610). The zone Z is the square 5..25 x 5..15.
#   A 0..10 x 0..10     overlaps Z (shares 5..10 x 5..10)
#   B 20..30 x 0..10    overlaps Z (shares 20..25 x 5..10)
#   C 40..50 x 0..10    far from Z
#   E 6..8 x 6..8       within Z
#   F -100..100 squared contains Z
#   G 25..30 x 5..15    touches Z along x = 25
#   H line x = 15 from y -5 to 20: crosses Z (enters and leaves its interior)
RELATION_CASES = {
    "intersects": ["A", "B", "E", "F", "G", "H"],
    "within": ["E"],
    "contains": ["F"],
    "touches": ["G"],
    "overlaps": ["A", "B"],
    "crosses": ["H"],
}


@pytest.fixture
def shapes(workspace: Path) -> Path:
    write_layer(workspace / "zone.gpkg", [square(5, 5, 25, 15)], "EPSG:32610", zid=[1])
    geometries = [
        square(0, 0, 10, 10),
        square(20, 0, 30, 10),
        square(40, 0, 50, 10),
        square(6, 6, 8, 8),
        square(-100, -100, 100, 100),
        square(25, 5, 30, 15),
        LineString([(X0 + 15, Y0 - 5), (X0 + 15, Y0 + 20)]),
    ]
    return write_layer(workspace / "shapes.gpkg", geometries, "EPSG:32610", key=["A", "B", "C", "E", "F", "G", "H"])


@pytest.mark.parametrize(("relation", "keys"), sorted(RELATION_CASES.items()))
def test_each_relation_selects_the_features_drawn_for_it(
    app, workspace: Path, shapes: Path, relation: str, keys: list[str]
) -> None:
    result = app.run(
        "select_features",
        {"input_path": "shapes.gpkg", "relation": relation, "relation_path": "zone.gpkg", "output_path": "r.gpkg"},
    )
    out = read(workspace / "r.gpkg")
    assert out["key"].tolist() == keys
    assert result.answer["selected_count"] == len(keys) and result.answer["total_count"] == 7
    # whole features: F keeps its full 200 m square, unlike a clip (which would cut it to Z)
    if "F" in keys:
        assert out.set_index("key").geometry["F"].area == pytest.approx(200 * 200)
    assert result.crs_decisions["analysis_crs"] == "EPSG:32610"


def test_within_distance_in_a_projected_crs_includes_the_boundary(app, workspace: Path) -> None:
    # Points 0, 30 and 50 m from the relation point: within 30 m are the first two (30 m exactly counts).
    write_layer(workspace / "pts.gpkg", [at(0, 0), at(0, 30), at(0, 50)], "EPSG:32610", pid=[1, 2, 3])
    write_layer(workspace / "target.gpkg", [at(0, 0)], "EPSG:32610", tid=[1])
    result = app.run(
        "select_features",
        {
            "input_path": "pts.gpkg",
            "relation": "within_distance",
            "relation_path": "target.gpkg",
            "distance_meters": 30,
            "output_path": "near.gpkg",
        },
    )
    assert read(workspace / "near.gpkg")["pid"].tolist() == [1, 2]
    assert result.answer["criteria"][0]["distance_meters"] == 30
    assert manifest(workspace / "near.gpkg")["parameters"]["x-mapsmith:distance_in_analysis_units"] == 30


def test_within_distance_on_geographic_data_is_measured_in_metres_not_degrees(app, workspace: Path) -> None:
    # Three points due north of a target at (-122.2, 46.2) by 990 m, 1,010 m and 50 km on the WGS 84
    # ellipsoid (pyproj.Geod.fwd). With 1,000 m only the first is within; read as degrees, 1,000 would
    # take all three. UTM 10N's scale near -122.2 is within 0.0004 of 1, so the 10 m margins are
    # 25 times the projection's error at 1 km.
    from pyproj import Geod

    geod = Geod(ellps="WGS84")
    lon0, lat0 = -122.2, 46.2
    points = [Point(*geod.fwd(lon0, lat0, 0, d)[:2]) for d in (990, 1010, 50_000)]
    write_layer(workspace / "pts.gpkg", points, "EPSG:4326", pid=[1, 2, 3])
    write_layer(workspace / "target.gpkg", [Point(lon0, lat0)], "EPSG:4326", tid=[1])
    result = app.run(
        "select_features",
        {
            "input_path": "pts.gpkg",
            "relation": "within_distance",
            "relation_path": "target.gpkg",
            "distance_meters": 1000,
            "output_path": "near.gpkg",
        },
    )
    out = read(workspace / "near.gpkg")
    assert out["pid"].tolist() == [1]
    # the written coordinates are the input's, not a round trip through UTM
    assert out.geometry.iloc[0].equals_exact(points[0], tolerance=0)
    assert out.crs.to_epsg() == 4326
    decisions = result.crs_decisions
    assert decisions["analysis_crs"] == "EPSG:32610" and decisions["source_crs"] == "EPSG:4326"
    assert decisions["target_crs"] == "EPSG:32610"
    assert "+zone=10" in decisions["transformation"]["pipeline"]
    assert "written in EPSG:4326 unchanged" in decisions["reason"]
    assert "round_trip" not in decisions


def test_a_relation_layer_in_another_crs_is_aligned_and_recorded(app, workspace: Path, shapes: Path) -> None:
    # Z again, its corners transformed to lon/lat: aligned back to EPSG:32610 it is Z within
    # millimetres, so the within selection is the one drawn above.
    from pyproj import Transformer
    from shapely.geometry import Polygon

    to_ll = Transformer.from_crs(32610, 4326, always_xy=True)
    ring = [to_ll.transform(X0 + x, Y0 + y) for x, y in [(5, 5), (25, 5), (25, 15), (5, 15)]]
    write_layer(workspace / "zone_ll.geojson", [Polygon(ring)], "EPSG:4326", zid=[1])
    result = app.run(
        "select_features",
        {
            "input_path": "shapes.gpkg",
            "relation": "within",
            "relation_path": "zone_ll.geojson",
            "output_path": "o.gpkg",
        },
    )
    # E lies 1 m or more inside every edge of Z, far beyond the millimetres of the round trip (the
    # edge-sharing G is not a fair test here: a millimetre decides touches against overlaps)
    assert read(workspace / "o.gpkg")["key"].tolist() == ["E"]
    alignment = result.crs_decisions["x-mapsmith:alignment"]["relation_path"]
    assert (alignment["source_crs"], alignment["target_crs"]) == ("EPSG:4326", "EPSG:32610")
    share = next(c for c in result.checks if c["name"] == "inputs_share_crs")
    assert share["passed"] is False


def test_every_criterion_given_must_hold(app, workspace: Path, shapes: Path) -> None:
    # intersects Z: A, B, E, F, G, H; key IN ('A', 'C', 'F', 'H'): A, C, F, H; both: A, F, H.
    result = app.run(
        "select_features",
        {
            "input_path": "shapes.gpkg",
            "where": "key IN ('A', 'C', 'F', 'H')",
            "relation": "intersects",
            "relation_path": "zone.gpkg",
            "output_path": "both.gpkg",
        },
    )
    assert read(workspace / "both.gpkg")["key"].tolist() == ["A", "F", "H"]
    where, relation = result.answer["criteria"]
    assert (where["mode"], where["matched"]) == ("where", 4)
    assert (relation["mode"], relation["matched"]) == ("relation", 6)
    assert result.answer["selected_count"] == 3


def test_an_empty_geojson_selection_says_it_has_no_field_list(app, workspace: Path) -> None:
    # GeoJSON keeps fields on features only: with none selected the file has no schema. Nothing was
    # lost, so the check fails without stopping the run, and says why.
    write_layer(workspace / "p.geojson", [Point(-122.0, 46.0)], "EPSG:4326", pid=[1])
    result = app.run("select_features", {"input_path": "p.geojson", "where": "pid > 1", "output_path": "e.geojson"})
    assert result.answer["selected_count"] == 0
    fields = next(c for c in result.checks if c["name"] == "x-mapsmith:fields_preserved")
    assert fields["passed"] is False and fields["critical"] is False
    assert "empty GeoJSON carries no field list" in fields["detail"]


# Points against Z (5..25 x 5..15): P inside at (10, 10); Q on Z's west edge at (5, 10), exactly
# (offsets are whole metres, so the edge is represented exactly); R outside at (40, 10).
# within: P only (Q touches the boundary, and within needs the interiors to meet) -> 1, and Q is
# the one boundary point left out. intersects: P and Q -> 2.
def _points(workspace: Path, keys: list[str]) -> Path:
    where = {"P": at(10, 10), "Q": at(5, 10), "R": at(40, 10)}
    return write_layer(workspace / "pts.gpkg", [where[k] for k in keys], "EPSG:32610", key=keys)


def _select(app, relation: str):
    return app.run(
        "select_features",
        {
            "input_path": "pts.gpkg",
            "relation": relation,
            "relation_path": "zone.gpkg",
            "output_path": f"{relation}.gpkg",
        },
    )


def test_within_counts_and_names_the_points_it_leaves_on_the_boundary(app, workspace: Path, shapes: Path) -> None:
    _points(workspace, ["P", "Q", "R"])
    within = _select(app, "within")
    assert read(workspace / "within.gpkg")["key"].tolist() == ["P"]
    (criterion,) = within.answer["criteria"]
    assert criterion["matched"] == 1 and criterion["on_boundary_not_selected"] == 1
    (warning,) = [w for w in within.warnings if w["code"] == "ON_BOUNDARY_NOT_SELECTED"]
    assert warning["message"].startswith("1 input feature lies exactly on the boundary")
    assert "relation='intersects'" in warning["hint"]

    intersects = _select(app, "intersects")
    assert read(workspace / "intersects.gpkg")["key"].tolist() == ["P", "Q"]
    assert intersects.answer["selected_count"] == 2
    assert "on_boundary_not_selected" not in intersects.answer["criteria"][0]
    assert not [w for w in intersects.warnings if w["code"] == "ON_BOUNDARY_NOT_SELECTED"]


def test_within_without_boundary_points_says_nothing_about_boundaries(app, workspace: Path, shapes: Path) -> None:
    # Clean twin: P and R only; within selects P, and no point lies on the boundary.
    _points(workspace, ["P", "R"])
    within = _select(app, "within")
    assert read(workspace / "within.gpkg")["key"].tolist() == ["P"]
    assert within.answer["criteria"][0]["on_boundary_not_selected"] == 0
    assert not [w for w in within.warnings if w["code"] == "ON_BOUNDARY_NOT_SELECTED"]


def test_contains_counts_the_relation_points_on_the_input_boundary(app, workspace: Path) -> None:
    # The same rule the other way round: Z contains P but not Q, which lies on Z's edge.
    write_layer(workspace / "zone.gpkg", [square(5, 5, 25, 15)], "EPSG:32610", zid=[1])
    write_layer(workspace / "q.gpkg", [at(5, 10)], "EPSG:32610", key=["Q"])
    result = app.run(
        "select_features",
        {"input_path": "zone.gpkg", "relation": "contains", "relation_path": "q.gpkg", "output_path": "c.gpkg"},
    )
    assert result.answer["selected_count"] == 0
    assert result.answer["criteria"][0]["on_boundary_not_selected"] == 1
    assert [w["code"] for w in result.warnings if w["code"] == "ON_BOUNDARY_NOT_SELECTED"] == [
        "ON_BOUNDARY_NOT_SELECTED"
    ]
