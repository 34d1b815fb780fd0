"""The join operations on the opensource stack, against values worked out by hand.

Layers are built here on a local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), so every
expected count, distance and share is read off the drawing in the comment before the assertion.
Where a layer is geographic the expected distance or area comes from pyproj.Geod, called here
independently of the code under test. spatial_join is run on both of its engines: the DuckDB
engine is made to win by raising its preference in REGISTRATIONS and lowering DUCKDB_MIN_ROWS
before the service is built (the registrations are read when the service starts).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import LineString, Point, box

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError, InputError

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def grid_box(x1: float, y1: float, x2: float, y2: float):  # type: ignore[no-untyped-def]
    return box(X0 + x1, Y0 + y1, X0 + x2, Y0 + y2)


def grid_point(x: float, y: float) -> Point:
    return Point(X0 + x, Y0 + y)


def prefer_duckdb(monkeypatch: pytest.MonkeyPatch, min_rows: int) -> None:
    """Make DuckDB the first engine tried for spatial_join in services built after this call."""
    from mapsmith_opensource import join_ops

    monkeypatch.setattr(join_ops, "DUCKDB_MIN_ROWS", min_rows)
    monkeypatch.setattr(
        join_ops,
        "REGISTRATIONS",
        tuple(
            r._replace(preference=join_ops.GEOPANDAS_PREFERENCE + 1) if r.engine == "duckdb" else r
            for r in join_ops.REGISTRATIONS
        ),
    )


@pytest.fixture(params=["geopandas", "duckdb"])
def engine_app(request, make_app, monkeypatch):  # type: ignore[no-untyped-def]
    if request.param == "duckdb":
        prefer_duckdb(monkeypatch, min_rows=0)
    return request.param, make_app()


def zones_and_points(workspace: Path) -> None:
    # Z1 = 0..100 x 0..100, Z2 = 100..200 x 0..100 (they share the edge x = 100), Z3 far away.
    # P1 (50,50) inside Z1; P2 (100,50) on the shared edge; P3 (150,50) inside Z2; P4 (300,300) in none.
    write_layer(
        workspace / "zones.gpkg",
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), grid_box(500, 500, 600, 600)],
        UTM,
        zid=["Z1", "Z2", "Z3"],
        name=["north", "south", "far"],
    )
    write_layer(
        workspace / "points.gpkg",
        [grid_point(50, 50), grid_point(100, 50), grid_point(150, 50), grid_point(300, 300)],
        UTM,
        pid=["P1", "P2", "P3", "P4"],
        name=["a", "b", "c", "d"],
    )


def pairs(path: Path, left: str, right: str) -> list[tuple]:
    out = read(path)
    return sorted((a, None if b != b or b is None else b) for a, b in zip(out[left], out[right], strict=True))


# -- spatial_join -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "expected", "dropped"),
    [
        # intersects: P1-Z1, P2 on the shared edge meets both Z1 and Z2, P3-Z2, P4 nothing.
        ("left", [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2"), ("P4", None)], 0),
        ("inner", [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2")], 1),
    ],
)
def test_spatial_join_intersects_one_row_per_pair_on_both_engines(
    engine_app, workspace: Path, how: str, expected: list, dropped: int
) -> None:
    engine, app = engine_app
    zones_and_points(workspace)
    result = app.run(
        "spatial_join",
        {"input_path": "points.gpkg", "join_path": "zones.gpkg", "how": how, "output_path": "j.gpkg"},
    )
    assert result.engine["name"] == engine
    assert pairs(workspace / "j.gpkg", "pid", "zid") == expected
    # both layers have 'name': the join's is renamed and the renaming listed
    out = read(workspace / "j.gpkg")
    assert {"name", "name_join"} <= set(out.columns)
    assert result.answer["renamed_fields"] == {"name": "name_join"}
    assert result.answer["input_features_dropped"] == dropped
    assert result.answer["matched_pairs"] == 4
    assert result.answer["join_features_unmatched"] == 1  # Z3
    record = manifest(workspace / "j.gpkg")
    assert record["x-mapsmith:engine_choice"]["engine"] == engine
    assert record["parameters"]["x-mapsmith:join_counts"]["input_features_unmatched"] == 1
    assert next(c for c in record["verification"] if c["name"] == "feature_count_exact")["passed"]


# Zones Z1 = 0..100 x 0..100 and Z2 = 100..200 x 0..100 are the input; the join features are
# L1 a line (50,50)-(150,50) running through both zones, L2 the line x = 0 from y = -10 to 110
# (along Z1's west edge and beyond it), Q1 the square 50..150 x 50..150 straddling both zones,
# Q2 the square 10..20 x 10..20 inside Z1. Read as "zone <predicate> feature":
PREDICATE_CASES = {
    "intersects": [("Z1", "L1"), ("Z1", "L2"), ("Z1", "Q1"), ("Z1", "Q2"), ("Z2", "L1"), ("Z2", "Q1")],
    "contains": [("Z1", "Q2")],  # L2 reaches outside Z1, so Z1 does not contain it
    "within": [],  # no zone lies inside a join feature
    "touches": [("Z1", "L2")],  # L2 meets Z1's boundary only
    "crosses": [("Z1", "L1"), ("Z2", "L1")],  # L1 runs through each zone's interior and out of it
    "overlaps": [("Z1", "Q1"), ("Z2", "Q1")],  # same dimension, part shared, neither inside the other
}


@pytest.mark.parametrize("predicate", sorted(PREDICATE_CASES))
def test_every_predicate_gives_the_hand_worked_pairs_on_both_engines(engine_app, workspace: Path, predicate) -> None:
    engine, app = engine_app
    write_layer(workspace / "zones.gpkg", [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100)], UTM, zid=["Z1", "Z2"])
    features = [
        LineString([(X0 + 50, Y0 + 50), (X0 + 150, Y0 + 50)]),
        LineString([(X0, Y0 - 10), (X0, Y0 + 110)]),
        grid_box(50, 50, 150, 150),
        grid_box(10, 10, 20, 20),
    ]
    write_layer(workspace / "features.gpkg", features, UTM, fid_name=["L1", "L2", "Q1", "Q2"])
    result = app.run(
        "spatial_join",
        {
            "input_path": "zones.gpkg",
            "join_path": "features.gpkg",
            "predicate": predicate,
            "how": "inner",
            "output_path": "j.gpkg",
        },
    )
    assert result.engine["name"] == engine
    assert pairs(workspace / "j.gpkg", "zid", "fid_name") == PREDICATE_CASES[predicate]


def test_within_distance_in_degrees_is_decided_on_the_ellipsoid_on_both_engines(engine_app, workspace: Path) -> None:
    # From O (122 W, 46 N) two points due east, placed with pyproj.Geod.fwd at 99 m and 101 m on the
    # WGS 84 ellipsoid. Within 100 m: only the 99 m one. The 101 m one lies inside the widened UTM
    # search (101 m x 0.9997 scale < 101 m), so it is a candidate removed by the geodesic measure.
    from pyproj import Geod

    engine, app = engine_app
    geod = Geod(ellps="WGS84")
    near = geod.fwd(-122.0, 46.0, 90, 99.0)
    far = geod.fwd(-122.0, 46.0, 90, 101.0)
    write_layer(workspace / "o.gpkg", [Point(-122.0, 46.0)], "EPSG:4326", oid=["O"])
    write_layer(workspace / "t.gpkg", [Point(near[0], near[1]), Point(far[0], far[1])], "EPSG:4326", tid=["99", "101"])
    result = app.run(
        "spatial_join",
        {
            "input_path": "o.gpkg",
            "join_path": "t.gpkg",
            "predicate": "within_distance",
            "distance_meters": 100,
            "output_path": "j.gpkg",
        },
    )
    assert result.engine["name"] == engine
    assert pairs(workspace / "j.gpkg", "oid", "tid") == [("O", "99")]
    assert result.answer["candidate_pairs_beyond_distance"] == 1
    record = manifest(workspace / "j.gpkg")
    assert record["parameters"]["x-mapsmith:distance_method"].startswith("geodesic on the WGS 84 ellipsoid")
    assert record["crs_decisions"]["analysis_crs"] == "EPSG:32610"
    assert "output keeps input_path's own coordinates" in record["crs_decisions"]["reason"]


def test_within_distance_in_utm_is_planar_in_metres(app, workspace: Path) -> None:
    # P5 (230,50) is 30 m east of Z2 (x = 200) and 130 m from Z1; P4 (300,300) is 223.6 m from Z2's
    # corner (200,100). Within 60 m: P5-Z2 only.
    zones_and_points(workspace)
    write_layer(workspace / "p.gpkg", [grid_point(230, 50), grid_point(300, 300)], UTM, pid=["P5", "P4"])
    result = app.run(
        "spatial_join",
        {
            "input_path": "p.gpkg",
            "join_path": "zones.gpkg",
            "predicate": "within_distance",
            "distance_meters": 60,
            "how": "inner",
            "output_path": "j.gpkg",
        },
    )
    assert pairs(workspace / "j.gpkg", "pid", "zid") == [("P5", "Z2")]
    assert result.answer["input_features_dropped"] == 1
    assert manifest(workspace / "j.gpkg")["parameters"]["x-mapsmith:distance_method"].startswith("planar in EPSG:32610")


def test_geopandas_is_chosen_by_default_and_duckdb_is_passed_over_with_its_reason(
    make_app, workspace: Path, monkeypatch
) -> None:
    zones_and_points(workspace)
    args = {"input_path": "points.gpkg", "join_path": "zones.gpkg", "output_path": "a.gpkg"}
    # Default registrations: GeoPandas is preferred (measured faster), so it runs and DuckDB is not tried.
    result = make_app().run("spatial_join", args)
    assert result.engine["name"] == "geopandas"
    assert "passed_over" not in manifest(workspace / "a.gpkg")["x-mapsmith:engine_choice"]
    # DuckDB first: 4 points and 3 zones are far below the row threshold, so it is passed over.
    prefer_duckdb(monkeypatch, min_rows=1_000_000)
    result = make_app().run("spatial_join", {**args, "output_path": "b.gpkg"})
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "b.gpkg")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "duckdb" and "fewer than the 1,000,000" in passed["reason"]
    # DuckDB first with no threshold, but the join layer is in another CRS: passed over again.
    from pyproj import Transformer

    to_ll = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    write_layer(workspace / "zones_ll.gpkg", [Point(*to_ll.transform(X0 + 50, Y0 + 50)).buffer(1e-4)], "EPSG:4326")
    prefer_duckdb(monkeypatch, min_rows=0)
    result = make_app().run("spatial_join", {**args, "join_path": "zones_ll.gpkg", "output_path": "c.gpkg"})
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "c.gpkg")["x-mapsmith:engine_choice"]["passed_over"]
    assert "EPSG:32610" in passed["reason"] and "EPSG:4326" in passed["reason"]
    assert "join_path" in manifest(workspace / "c.gpkg")["crs_decisions"]["x-mapsmith:alignment"]


def test_distance_meters_only_with_within_distance(app, workspace: Path) -> None:
    zones_and_points(workspace)
    base = {"input_path": "points.gpkg", "join_path": "zones.gpkg", "output_path": "j.gpkg"}
    with pytest.raises(ArgumentError) as missing:
        app.run("spatial_join", {**base, "predicate": "within_distance"})
    assert missing.value.code == "MISSING_ARGUMENT" and missing.value.evidence["argument"] == "distance_meters"
    with pytest.raises(ArgumentError) as stray:
        app.run("spatial_join", {**base, "predicate": "intersects", "distance_meters": 10})
    assert stray.value.code == "ARGUMENT_NOT_APPLICABLE" and "within_distance" in stray.value.hint
    # refused before the engine started: no output and no failure record
    assert not list(workspace.glob("j.gpkg*"))


def test_spatial_join_refuses_invalid_polygons_with_the_rows(app, workspace: Path) -> None:
    from shapely.geometry import Polygon

    bowtie = Polygon([(X0, Y0), (X0 + 10, Y0 + 10), (X0 + 10, Y0), (X0, Y0 + 10)])
    write_layer(workspace / "bad.gpkg", [grid_box(0, 0, 5, 5), bowtie], UTM, zid=["ok", "bowtie"])
    zones_and_points(workspace)
    with pytest.raises(InputError) as err:
        app.run("spatial_join", {"input_path": "points.gpkg", "join_path": "bad.gpkg", "output_path": "j.gpkg"})
    assert err.value.code == "INPUT_GEOMETRY_INVALID"
    assert err.value.evidence["argument"] == "join_path" and err.value.evidence["first_rows"] == [1]
    assert "repair_geometries" in err.value.hint


# -- nearest_join -----------------------------------------------------------------------------


def nearest_layers(workspace: Path) -> None:
    # Inputs A (0,0), B (100,0), C (200,0). Join rows, in file order: S1 (3,4), S2 (106,8),
    # S4 (170,40), S3 (230,40). A-S1 = 5 (3-4-5); B-S2 = 10 (6-8-10); C-S4 = C-S3 = 50 (30-40-50),
    # a tie broken by file order: S4 comes first. Every other pair is farther (B-S4 = 80.6, A-S2 = 106.3).
    write_layer(
        workspace / "in.gpkg", [grid_point(0, 0), grid_point(100, 0), grid_point(200, 0)], UTM, name=["A", "B", "C"]
    )
    write_layer(
        workspace / "cand.gpkg",
        [grid_point(3, 4), grid_point(106, 8), grid_point(170, 40), grid_point(230, 40)],
        UTM,
        name=["S1", "S2", "S4", "S3"],
    )


def test_nearest_join_distances_are_hand_triangles_and_ties_go_to_the_first_row(app, workspace: Path) -> None:
    nearest_layers(workspace)
    result = app.run("nearest_join", {"input_path": "in.gpkg", "join_path": "cand.gpkg", "output_path": "n.gpkg"})
    out = read(workspace / "n.gpkg").set_index("name")
    assert out["name_join"].to_dict() == {"A": "S1", "B": "S2", "C": "S4"}
    assert out["distance_m"].to_dict() == {"A": pytest.approx(5.0), "B": pytest.approx(10.0), "C": pytest.approx(50.0)}
    assert result.answer["input_features_with_tied_nearest"] == 1
    record = manifest(workspace / "n.gpkg")
    assert "first in join_path" in record["parameters"]["x-mapsmith:tie_rule"]
    assert record["parameters"]["x-mapsmith:distance_method"].startswith("planar in EPSG:32610")
    assert record["parameters"]["x-mapsmith:renamed_fields"] == {"name": "name_join"}
    assert next(c for c in record["verification"] if c["name"] == "values_in_expected_range")["passed"]


def test_nearest_join_beyond_max_distance_keeps_the_feature_empty_and_counts_it(app, workspace: Path) -> None:
    # Within 8 m: A-S1 (5 m) only; B (10 m) and C (50 m) keep empty join fields.
    nearest_layers(workspace)
    result = app.run(
        "nearest_join",
        {"input_path": "in.gpkg", "join_path": "cand.gpkg", "max_distance_meters": 8, "output_path": "n.gpkg"},
    )
    out = read(workspace / "n.gpkg").set_index("name")
    assert len(out) == 3
    assert out.loc["A", "distance_m"] == pytest.approx(5.0)
    assert out.loc[["B", "C"], "distance_m"].isna().all() and out.loc[["B", "C"], "name_join"].isna().all()
    assert result.answer["input_features_unmatched"] == 2


def test_nearest_join_in_degrees_is_geodesic_at_46n(app, workspace: Path) -> None:
    # Inputs O1 (122.000 W, 46.0000 N) and O2 (121.995 W, 46.0025 N); candidates J1 (121.996 W,
    # 46.000 N) and J2 (122.000 W, 46.003 N). By hand (1 deg lat = 111.1 km, 1 deg lon = 77.3 km here):
    # O1-J1 = 309 m, O1-J2 = 333 m -> J1; O2-J1 = hypot(77, 278) = 289 m, O2-J2 = hypot(387, 56) = 391 m -> J1.
    # The exact figures come from pyproj.Geod on WGS 84 here. A planar distance in UTM zone 10 would
    # be off by about 0.03 % (0.1 m) this far from the central meridian; the tolerance is 1 mm.
    from pyproj import Geod

    origins = [(-122.0, 46.0), (-121.995, 46.0025)]
    candidates = [(-121.996, 46.0), (-122.0, 46.003)]
    write_layer(workspace / "o.gpkg", [Point(*p) for p in origins], "EPSG:4326", oid=["O1", "O2"])
    write_layer(workspace / "j.gpkg", [Point(*p) for p in candidates], "EPSG:4326", jid=["J1", "J2"])
    result = app.run("nearest_join", {"input_path": "o.gpkg", "join_path": "j.gpkg", "output_path": "n.gpkg"})
    geod = Geod(ellps="WGS84")
    expected = [geod.inv(*origin, *candidates[0])[2] for origin in origins]
    assert expected == [pytest.approx(309, abs=2), pytest.approx(289, abs=2)]  # the hand figures
    out = read(workspace / "n.gpkg").set_index("oid")
    assert out["jid"].to_dict() == {"O1": "J1", "O2": "J1"}
    assert out.loc["O1", "distance_m"] == pytest.approx(expected[0], abs=1e-3)
    assert out.loc["O2", "distance_m"] == pytest.approx(expected[1], abs=1e-3)
    assert result.crs_decisions["analysis_crs"] == "EPSG:32610"
    assert "geodesically on the WGS 84 ellipsoid" in result.crs_decisions["reason"]
    assert read(workspace / "n.gpkg").crs.to_epsg() == 4326


def test_nearest_join_refuses_an_input_that_already_has_distance_m(app, workspace: Path) -> None:
    write_layer(workspace / "in.gpkg", [grid_point(0, 0)], UTM, distance_m=[1.0])
    write_layer(workspace / "cand.gpkg", [grid_point(3, 4)], UTM, name=["S1"])
    with pytest.raises(InputError) as err:
        app.run("nearest_join", {"input_path": "in.gpkg", "join_path": "cand.gpkg", "output_path": "n.gpkg"})
    assert err.value.code == "FIELD_EXISTS" and err.value.evidence["field"] == "distance_m"


# -- count_in_polygons ------------------------------------------------------------------------


def districts(workspace: Path, **fields: list) -> None:
    # A = 0..100 x 0..100, B = 100..200 x 0..100 (shared edge x = 100), C = 300..400 x 0..100.
    write_layer(
        workspace / "districts.gpkg",
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), grid_box(300, 0, 400, 100)],
        UTM,
        did=["A", "B", "C"],
        **fields,
    )


def test_count_in_polygons_keeps_zero_polygons_and_counts_a_shared_boundary_point_in_both(app, workspace: Path) -> None:
    # Points: (10,10), (20,20), (50,50) inside A; (100,50) on the A|B edge; (150,50) inside B;
    # (1000,1000) in nothing. Counts: A = 3 + 1 = 4, B = 1 + 1 = 2, C = 0. Of 6 points 5 are counted,
    # one of them twice, so the counts add up to 6; 1 point is in no polygon.
    districts(workspace)
    pts = [grid_point(10, 10), grid_point(20, 20), grid_point(50, 50), grid_point(100, 50), grid_point(150, 50)]
    write_layer(workspace / "pts.gpkg", [*pts, grid_point(1000, 1000)], UTM, pid=[1, 2, 3, 4, 5, 6])
    result = app.run(
        "count_in_polygons", {"input_path": "districts.gpkg", "points_path": "pts.gpkg", "output_path": "c.gpkg"}
    )
    out = read(workspace / "c.gpkg").set_index("did")
    assert out["point_count"].to_dict() == {"A": 4, "B": 2, "C": 0}
    assert result.answer["total_point_count"] == 6
    assert result.answer["points_in_no_polygon"] == 1
    assert result.answer["points_in_several_polygons"] == 1
    assert result.answer["polygons_with_no_points"] == 1
    record = manifest(workspace / "c.gpkg")
    assert record["parameters"]["x-mapsmith:boundary_rule"].startswith("intersects")
    assert next(c for c in record["verification"] if c["name"] == "feature_count_exact")["passed"]


def test_count_in_polygons_moves_points_in_another_crs_and_records_it(app, workspace: Path) -> None:
    # The three interior points of A and the one of B, given in lon/lat: A = 3, B = 1, C = 0.
    from pyproj import Transformer

    districts(workspace)
    to_ll = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    pts = [Point(*to_ll.transform(X0 + x, Y0 + y)) for x, y in [(10, 10), (20, 20), (50, 50), (150, 50)]]
    write_layer(workspace / "pts.geojson", pts, "EPSG:4326", pid=[1, 2, 3, 4])
    result = app.run(
        "count_in_polygons", {"input_path": "districts.gpkg", "points_path": "pts.geojson", "output_path": "c.gpkg"}
    )
    assert read(workspace / "c.gpkg").set_index("did")["point_count"].to_dict() == {"A": 3, "B": 1, "C": 0}
    aligned = result.crs_decisions["x-mapsmith:alignment"]["points_path"]
    assert (aligned["source_crs"], aligned["target_crs"]) == ("EPSG:4326", "EPSG:32610")


def test_count_in_polygons_will_not_overwrite_point_count(app, workspace: Path) -> None:
    districts(workspace, point_count=[1, 2, 3])
    write_layer(workspace / "pts.gpkg", [grid_point(10, 10)], UTM, pid=[1])
    with pytest.raises(InputError) as err:
        app.run(
            "count_in_polygons", {"input_path": "districts.gpkg", "points_path": "pts.gpkg", "output_path": "c.gpkg"}
        )
    assert err.value.code == "FIELD_EXISTS"


# -- summarize_points_in_polygons -------------------------------------------------------------


def valued_points(workspace: Path) -> None:
    # In A: 10, 20, (null), 40; in B: 5, 7; on the A|B edge: 100 (counted in both); C gets nothing.
    geoms = [grid_point(10, 10), grid_point(20, 20), grid_point(30, 30), grid_point(40, 40)]
    geoms += [grid_point(150, 10), grid_point(150, 20), grid_point(100, 50)]
    values = [10.0, 20.0, None, 40.0, 5.0, 7.0, 100.0]
    write_layer(workspace / "pts.gpkg", geoms, UTM, value=values, name=list("abcdefg"))


def test_summarize_gives_hand_means_and_counts_nulls_apart(app, workspace: Path) -> None:
    # A: values 10, 20, 40, 100 -> mean 170 / 4 = 42.5, sum 170, min 10, max 100, count 4, 1 null.
    # B: values 5, 7, 100 -> mean 112 / 3 = 37.333, sum 112, min 5, max 100, count 3, 0 null.
    # C: no values -> mean, min, max empty; sum 0; count 0; 0 null.
    districts(workspace)
    valued_points(workspace)
    result = app.run(
        "summarize_points_in_polygons",
        {"input_path": "districts.gpkg", "points_path": "pts.gpkg", "field": "value", "output_path": "s.gpkg"},
    )
    out = read(workspace / "s.gpkg").set_index("did")
    assert out.loc["A", ["value_mean", "value_sum", "value_min", "value_max"]].tolist() == [42.5, 170, 10, 100]
    assert out.loc["B", "value_mean"] == pytest.approx(112 / 3)
    assert out.loc["B", ["value_sum", "value_min", "value_max"]].tolist() == [112, 5, 100]
    assert out["value_count"].to_dict() == {"A": 4, "B": 3, "C": 0}
    assert out["value_null_count"].to_dict() == {"A": 1, "B": 0, "C": 0}
    assert out.loc["C", ["value_mean", "value_min", "value_max"]].isna().all() and out.loc["C", "value_sum"] == 0
    assert [w["code"] for w in result.warnings] == ["NULL_VALUES_EXCLUDED"]
    assert result.answer["points_with_null_value"] == 1
    assert manifest(workspace / "s.gpkg")["parameters"]["statistics"] == "mean,sum,min,max,count"


def test_summarize_writes_only_the_statistics_asked_for(app, workspace: Path) -> None:
    districts(workspace)
    valued_points(workspace)
    app.run(
        "summarize_points_in_polygons",
        {
            "input_path": "districts.gpkg",
            "points_path": "pts.gpkg",
            "field": "value",
            "statistics": " max, mean ,max",
            "output_path": "s.gpkg",
        },
    )
    out = read(workspace / "s.gpkg")
    assert [c for c in out.columns if c.startswith("value_")] == ["value_max", "value_mean", "value_null_count"]
    assert manifest(workspace / "s.gpkg")["parameters"]["statistics"] == "max,mean"


@pytest.mark.parametrize(
    ("field", "statistics", "error", "code"),
    [
        ("name", "mean", InputError, "FIELD_NOT_NUMERIC"),
        ("valu", "mean", InputError, "FIELD_NOT_FOUND"),
        ("value", "mean,median", ArgumentError, "ARGUMENT_NOT_IN_CHOICES"),
    ],
)
def test_summarize_refuses_what_it_cannot_compute(app, workspace: Path, field, statistics, error, code) -> None:
    districts(workspace)
    valued_points(workspace)
    with pytest.raises(error) as err:
        app.run(
            "summarize_points_in_polygons",
            {
                "input_path": "districts.gpkg",
                "points_path": "pts.gpkg",
                "field": field,
                "statistics": statistics,
                "output_path": "s.gpkg",
            },
        )
    assert err.value.code == code
    if code == "FIELD_NOT_NUMERIC":
        assert err.value.evidence["field"] == "name" and err.value.evidence["type"] in ("str", "object")
    if code == "FIELD_NOT_FOUND":
        assert "did you mean 'value'" in err.value.message
    assert not (workspace / "s.gpkg").exists()
    # an unknown statistic is refused before the engine starts, so it leaves no failure record either
    assert (code == "ARGUMENT_NOT_IN_CHOICES") == (not list(workspace.glob("s.gpkg*")))


# -- apportion_by_area ------------------------------------------------------------------------


def test_apportion_extensive_splits_a_total_by_overlap_area(app, workspace: Path) -> None:
    # One source square 0..200 x 0..200 holding 100 people. T1 = 0..50 x 0..200 covers a quarter of
    # it -> 25; T2 = 50..200 x 0..200 three quarters -> 75; T3 lies outside every source -> empty.
    # Nothing lies outside the targets, so 25 + 75 = 100 is all of it.
    write_layer(workspace / "src.gpkg", [grid_box(0, 0, 200, 200)], UTM, value=[100.0])
    targets = [grid_box(0, 0, 50, 200), grid_box(50, 0, 200, 200), grid_box(1000, 0, 1100, 100)]
    write_layer(workspace / "tgt.gpkg", targets, UTM, tid=["T1", "T2", "T3"])
    result = app.run(
        "apportion_by_area",
        {
            "input_path": "tgt.gpkg",
            "source_path": "src.gpkg",
            "field": "value",
            "quantity_type": "extensive",
            "output_path": "a.gpkg",
        },
    )
    out = read(workspace / "a.gpkg").set_index("tid")
    assert out.loc["T1", "value_apportioned"] == pytest.approx(25, rel=1e-6)
    assert out.loc["T2", "value_apportioned"] == pytest.approx(75, rel=1e-6)
    assert out["value_apportioned"].isna().tolist() == [False, False, True]
    assert out["source_coverage"].tolist()[:2] == [pytest.approx(1, rel=1e-6)] * 2
    assert result.answer["targets_not_covered"] == 1
    assert result.answer["quantity_not_allocated"] == pytest.approx(0, abs=1e-6)
    record = manifest(workspace / "a.gpkg")
    assert next(c for c in record["verification"] if c["name"] == "x-mapsmith:quantity_conserved")["passed"]
    assert "geodesically on the WGS 84 ellipsoid" in record["crs_decisions"]["reason"]


def test_apportion_intensive_is_an_area_weighted_mean_over_the_covered_part(app, workspace: Path) -> None:
    # Sources: left half 0..100 x 0..200 with density 10, right half 100..200 x 0..200 with 30.
    # T1 = 50..150 x 0..200 spans both equally -> (10 + 30) / 2 = 20. T2 = 0..50 x 0..100 in the
    # left half only -> 10. T3 = 150..250 x 100..200: half of it over the right half -> 30, coverage 0.5.
    write_layer(workspace / "src.gpkg", [grid_box(0, 0, 100, 200), grid_box(100, 0, 200, 200)], UTM, value=[10.0, 30.0])
    targets = [grid_box(50, 0, 150, 200), grid_box(0, 0, 50, 100), grid_box(150, 100, 250, 200)]
    write_layer(workspace / "tgt.gpkg", targets, UTM, tid=["T1", "T2", "T3"])
    result = app.run(
        "apportion_by_area",
        {
            "input_path": "tgt.gpkg",
            "source_path": "src.gpkg",
            "field": "value",
            "quantity_type": "intensive",
            "output_path": "a.gpkg",
        },
    )
    out = read(workspace / "a.gpkg").set_index("tid")
    assert out["value_apportioned"].to_dict() == {
        "T1": pytest.approx(20, rel=1e-6),
        "T2": pytest.approx(10, rel=1e-9),
        "T3": pytest.approx(30, rel=1e-9),
    }
    assert out.loc["T3", "source_coverage"] == pytest.approx(0.5, rel=1e-6)
    assert result.answer["targets_partly_covered"] == 1
    assert next(c for c in result.checks if c["name"] == "values_in_expected_range")["passed"]


def test_apportion_in_degrees_uses_ellipsoidal_not_degree_areas(app, workspace: Path) -> None:
    # A 1 x 1 degree source (122-121 W, 46-47 N) holding 1000, cut at 46.5 N. In square degrees the
    # halves are equal (500 each); on the ground the southern half is larger. On a sphere the share
    # is (sin 46.5 - sin 46) / (sin 47 - sin 46) = 0.006031 / 0.012012 = 0.5021 -> about 502.1.
    # The exact expectation is the ratio of the two ellipsoidal areas from pyproj.Geod here, with a
    # vertex every 0.001 degree so the edges follow the parallels as drawn.
    import shapely
    from pyproj import Geod

    source = box(-122, 46, -121, 47)
    south, north = box(-122, 46, -121, 46.5), box(-122, 46.5, -121, 47)
    write_layer(workspace / "src.gpkg", [source], "EPSG:4326", value=[1000.0])
    write_layer(workspace / "tgt.gpkg", [south, north], "EPSG:4326", tid=["S", "N"])
    app.run(
        "apportion_by_area",
        {
            "input_path": "tgt.gpkg",
            "source_path": "src.gpkg",
            "field": "value",
            "quantity_type": "extensive",
            "output_path": "a.gpkg",
        },
    )
    geod = Geod(ellps="WGS84")
    area = {
        k: abs(geod.geometry_area_perimeter(shapely.segmentize(g, 0.001))[0])
        for k, g in {"S": south, "N": north, "all": source}.items()
    }
    out = read(workspace / "a.gpkg").set_index("tid")["value_apportioned"]
    assert out["S"] == pytest.approx(1000 * area["S"] / area["all"], rel=1e-7)
    assert out["S"] == pytest.approx(502.1, abs=0.3) and out["N"] == pytest.approx(497.9, abs=0.3)


def test_apportion_requires_the_quantity_type_and_says_why(app, workspace: Path) -> None:
    write_layer(workspace / "src.gpkg", [grid_box(0, 0, 200, 200)], UTM, value=[100.0])
    write_layer(workspace / "tgt.gpkg", [grid_box(0, 0, 50, 200)], UTM, tid=["T1"])
    with pytest.raises(ArgumentError) as err:
        app.run(
            "apportion_by_area",
            {"input_path": "tgt.gpkg", "source_path": "src.gpkg", "field": "value", "output_path": "a.gpkg"},
        )
    assert err.value.code == "MISSING_ARGUMENT" and err.value.evidence["argument"] == "quantity_type"
    assert "never guessed" in err.value.message


# -- join_attributes --------------------------------------------------------------------------


def write_table(path: Path, **columns: list) -> Path:
    import pandas as pd
    import pyogrio

    pyogrio.write_dataframe(pd.DataFrame(columns), path, driver="XLSX")
    return path


@pytest.mark.parametrize(
    ("codes", "read_as"),
    [
        # a blank key cell makes GDAL read the column as decimals: 310101.0
        ([310101.0, 310102.0, None], "decimal"),
        # whole numbers only: GDAL reads them as integers
        ([310101.0, 310102.0, 310104.0], "integer"),
    ],
)
def test_join_attributes_matches_spreadsheet_numbers_to_text_codes_after_recorded_normalisation(
    app, workspace: Path, codes: list, read_as: str
) -> None:
    # Districts carry text codes "310101" and "310103". The sheet's keys 310101, 310102 (and a blank
    # or 310104): 310101 matches; district 310103 has no row; 310102 (and 310104) match no district.
    write_layer(
        workspace / "districts.gpkg", [grid_box(0, 0, 10, 10), grid_box(10, 0, 20, 10)], UTM, code=["310101", "310103"]
    )
    write_table(workspace / "census.xlsx", code=codes, pop=[100, 200, 300])
    result = app.run(
        "join_attributes",
        {
            "input_path": "districts.gpkg",
            "table_path": "census.xlsx",
            "input_key": "code",
            "table_key": "code",
            "output_path": "j.gpkg",
        },
    )
    out = read(workspace / "j.gpkg").set_index("code")
    assert out.loc["310101", "pop"] == 100
    assert out["pop"].isna().tolist() == [False, True]
    assert out.index.tolist() == ["310101", "310103"]  # input_key written as it was: text
    norm = result.answer["key_normalisation"]
    assert norm["applied"] is True and norm["converted"] == "table_path" and norm["table_key_type"] == read_as
    assert result.answer["input_unmatched_keys"] == ["310103"]
    assert result.answer["table_unmatched_keys"][0] == 310102
    assert result.answer["table_rows_without_key"] == (1 if read_as == "decimal" else 0)
    assert "UNMATCHED_KEYS" in [w["code"] for w in result.warnings]
    record = manifest(workspace / "j.gpkg")
    assert record["parameters"]["x-mapsmith:key_normalisation"]["applied"] is True
    assert any("key normalisation" in n for n in record["notes"])
    check = next(c for c in record["verification"] if c["name"] == "x-mapsmith:keys_matched")
    assert check["passed"] is False and check["critical"] is False and "310103" in check["detail"]


def test_join_attributes_never_matches_a_leading_zero_code_to_a_number(app, workspace: Path) -> None:
    # The layer's key is the number 123.0; the CSV code is "0123". Turning 123.0 into text gives
    # "123", not "0123", and "0123" read as a number loses its zero: no normalisation, no match,
    # and both sides are reported unmatched.
    write_layer(workspace / "sites.gpkg", [grid_point(0, 0)], UTM, site=[123.0])
    (workspace / "codes.csv").write_text("code,label\n0123,first\n")
    result = app.run(
        "join_attributes",
        {
            "input_path": "sites.gpkg",
            "table_path": "codes.csv",
            "input_key": "site",
            "table_key": "code",
            "output_path": "j.gpkg",
        },
    )
    assert read(workspace / "j.gpkg")["label"].isna().all()
    norm = result.answer["key_normalisation"]
    assert norm["applied"] is False and "0123" in norm["blocking_values"]
    assert result.answer["input_unmatched_keys"] == [123.0]
    assert result.answer["table_unmatched_keys"] == ["0123"]
    assert {"KEY_TYPES_DIFFER", "UNMATCHED_KEYS"} <= {w["code"] for w in result.warnings}


def test_join_attributes_refuses_duplicate_table_keys(app, workspace: Path) -> None:
    write_layer(workspace / "d.gpkg", [grid_box(0, 0, 10, 10)], UTM, code=["A"])
    (workspace / "t.csv").write_text("code,v\nA,1\nA,2\nB,3\n")
    with pytest.raises(InputError) as err:
        app.run(
            "join_attributes",
            {
                "input_path": "d.gpkg",
                "table_path": "t.csv",
                "input_key": "code",
                "table_key": "code",
                "output_path": "j.gpkg",
            },
        )
    assert err.value.code == "TABLE_KEY_NOT_UNIQUE"
    assert err.value.evidence["duplicate_keys"] == {"A": 2}


def test_join_attributes_reads_a_text_only_sheet_with_its_header_and_renames_clashes(app, workspace: Path) -> None:
    # Every cell text: GDAL would name the columns Field1, Field2 ... The first row names the key,
    # so the sheet is read with its header (noted). Both sides have 'name': the table's is renamed.
    write_layer(workspace / "d.gpkg", [grid_box(0, 0, 10, 10)], UTM, code=["0042"], name=["district"])
    write_table(workspace / "t.xlsx", code=["0042"], name=["from table"])
    result = app.run(
        "join_attributes",
        {
            "input_path": "d.gpkg",
            "table_path": "t.xlsx",
            "input_key": "code",
            "table_key": "code",
            "output_path": "j.gpkg",
        },
    )
    out = read(workspace / "j.gpkg")
    assert out.loc[0, ["code", "name", "name_table"]].tolist() == ["0042", "district", "from table"]
    assert result.answer["renamed_fields"] == {"name": "name_table"}
    assert result.answer["input_features_unmatched"] == 0 and result.status == "ok"
    assert any("HEADERS=FORCE" in n for n in result.notes)


def test_join_attributes_names_a_missing_key_field(app, workspace: Path) -> None:
    write_layer(workspace / "d.gpkg", [grid_box(0, 0, 10, 10)], UTM, code=["A"])
    (workspace / "t.csv").write_text("kode,v\nA,1\n")
    with pytest.raises(InputError) as err:
        app.run(
            "join_attributes",
            {
                "input_path": "d.gpkg",
                "table_path": "t.csv",
                "input_key": "code",
                "table_key": "code",
                "output_path": "j.gpkg",
            },
        )
    assert err.value.code == "FIELD_NOT_FOUND" and err.value.evidence["argument"] == "table_key"
    assert err.value.evidence["fields"] == ["kode", "v"]
