"""The geometry operations on the opensource stack, against values worked out by hand.

Most layers sit in EPSG:32610 on its central meridian (easting 500,000), where the Transverse
Mercator scale is exactly k0 = 0.9996 at every latitude: a grid length L is a ground (geodesic)
length of L / 0.9996 and a grid area S a ground area of S / 0.9996^2 = S / 0.99920016. Features a
few hundred metres wide change that scale by less than 1e-9. Every expected number below is derived
in its comment before the code ran.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from shapely.geometry import LineString, MultiPoint, Point, Polygon, box

from layers import manifest, read, write_layer
from mapsmith.errors import GeometryTypeRefused, InputError

K0 = 0.9996  # UTM scale on the central meridian
E0, N0 = 500_000.0, 5_000_000.0  # on UTM 10N's central meridian (123 W), near 45.1 N
UTM10 = "EPSG:32610"


def shift(coords: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(E0 + x, N0 + y) for x, y in coords]


def utm_to_lonlat(coords: list[tuple[float, float]]) -> list[tuple[float, float]]:
    from pyproj import Transformer

    to_ll = Transformer.from_crs(32610, 4326, always_xy=True)
    return [to_ll.transform(x, y) for x, y in coords]


# -- simplify_layer ---------------------------------------------------------------------------

BUMP = [(0, 0), (0, 49), (1, 50), (0, 51), (0, 100)]  # a 100 m north-south line, a 1 m bump east at 50 m


def test_simplify_straightens_a_1m_bump_at_5m_and_measures_before_and_after(app, workspace: Path) -> None:
    # Grid length before: 49 + sqrt(2) + sqrt(2) + 49 = 98 + 2 sqrt(2) = 100.828427 m; after: the
    # straight 100 m. On the central meridian both are ground lengths divided by k0:
    # 100.828427 / 0.9996 = 100.868775 m before, 100 / 0.9996 = 100.040016 m after. 5 vertices -> 2.
    # The bump vertex is 1 m from the chord: the Hausdorff distance is 1 m, within the 5 m tolerance.
    write_layer(workspace / "line.gpkg", [LineString(shift(BUMP))], UTM10, id=[1])
    result = app.run("simplify_layer", {"input_path": "line.gpkg", "tolerance_meters": 5, "output_path": "s.gpkg"})
    geom = read(workspace / "s.gpkg").geometry.iloc[0]
    assert list(geom.coords) == shift([(0, 0), (0, 100)])
    answer = result.answer
    assert answer["line_length_m"]["before"] == pytest.approx(100.868775, rel=1e-7)
    assert answer["line_length_m"]["after"] == pytest.approx(100.040016, rel=1e-7)
    assert (answer["vertices_before"], answer["vertices_after"]) == (5, 2)
    assert answer["polygon_area_m2"] == {"before": None, "after": None}
    check = next(c for c in result.checks if c["name"] == "x-mapsmith:within_tolerance")
    assert check["passed"] and "1.000000 m (tolerance 5 m)" in check["detail"]
    record = manifest(workspace / "s.gpkg")
    assert record["parameters"]["x-mapsmith:tolerance_in_analysis_units"] == 5
    assert record["crs_decisions"]["analysis_crs"] == UTM10 and "round_trip" not in record["crs_decisions"]
    assert any("geodesically" in n for n in record["notes"])
    # at 0.5 m the 1 m bump is kept: all five vertices stay
    kept = app.run("simplify_layer", {"input_path": "line.gpkg", "tolerance_meters": 0.5, "output_path": "k.gpkg"})
    assert kept.answer["vertices_after"] == 5
    assert len(read(workspace / "k.gpkg").geometry.iloc[0].coords) == 5


def test_simplify_a_geographic_line_in_metres_with_the_round_trip_recorded(app, workspace: Path) -> None:
    # The same bumped line, expressed in lon/lat. Simplified in metres (UTM 10N, estimated from the
    # extent), 5 m straightens it; 0.5 m keeps the 1 m bump. Read as degrees, 0.5 would flatten a
    # line only 0.0009 degrees long, so the surviving bump shows the tolerance was metres.
    write_layer(workspace / "line.geojson", [LineString(utm_to_lonlat(shift(BUMP)))], "EPSG:4326", id=[1])
    result = app.run(
        "simplify_layer", {"input_path": "line.geojson", "tolerance_meters": 5, "output_path": "s.geojson"}
    )
    out = read(workspace / "s.geojson")
    assert out.crs.to_epsg() == 4326 and len(out.geometry.iloc[0].coords) == 2
    start, end = out.geometry.iloc[0].coords
    expected_start, *_, expected_end = utm_to_lonlat(shift(BUMP))
    assert start == pytest.approx(expected_start, abs=1e-9) and end == pytest.approx(expected_end, abs=1e-9)
    assert result.answer["line_length_m"]["after"] == pytest.approx(100.040016, rel=1e-6)
    decisions = manifest(workspace / "s.geojson")["crs_decisions"]
    assert decisions["analysis_crs"] == UTM10 and decisions["source_crs"] == "EPSG:4326"
    assert "+inv" in decisions["round_trip"]["return_transformation"]["pipeline"]
    kept = app.run(
        "simplify_layer", {"input_path": "line.geojson", "tolerance_meters": 0.5, "output_path": "k.geojson"}
    )
    assert kept.answer["vertices_after"] == 5


def test_simplify_a_polygon_reports_area_before_and_after(app, workspace: Path) -> None:
    # A 100 m square with one extra vertex 1 m below the middle of its south side: grid area
    # 10,000 + (1/2) * 100 * 1 = 10,050 m2 before, 10,000 after. Ground areas divide by 0.99920016:
    # 10,058.0448 m2 before, 10,008.0048 m2 after.
    ring = shift([(0, 0), (50, -1), (100, 0), (100, 100), (0, 100)])
    write_layer(workspace / "sq.gpkg", [Polygon(ring)], UTM10, id=[1])
    result = app.run("simplify_layer", {"input_path": "sq.gpkg", "tolerance_meters": 5, "output_path": "s.gpkg"})
    area = result.answer["polygon_area_m2"]
    assert area["before"] == pytest.approx(10_058.0448, rel=1e-7)
    assert area["after"] == pytest.approx(10_008.0048, rel=1e-7)
    assert read(workspace / "s.gpkg").geometry.iloc[0].area == pytest.approx(10_000)
    assert result.answer["rows"][0]["vertices_before"] == 6  # 5 corners + the closing vertex
    assert result.answer["rows"][0]["vertices_after"] == 5


def test_simplify_without_topology_reports_a_polygon_it_empties(app, workspace: Path) -> None:
    # Plain Douglas-Peucker at 5 m reduces a 1 m square to fewer than 3 distinct vertices: it is
    # written empty, counted and warned about; the 100 m square beside it keeps its four corners.
    polygons = [box(E0, N0, E0 + 1, N0 + 1), box(E0 + 10, N0, E0 + 110, N0 + 100)]
    write_layer(workspace / "p.gpkg", polygons, UTM10, id=[1, 2])
    args = {"input_path": "p.gpkg", "tolerance_meters": 5, "output_path": "s.gpkg"}
    result = app.run("simplify_layer", {**args, "preserve_topology": False})
    assert result.answer["emptied_feature_indices"] == [0]
    assert [w["code"] for w in result.warnings] == ["SIMPLIFIED_TO_EMPTY"]
    out = read(workspace / "s.gpkg")
    assert len(out) == 2 and out.geometry.iloc[0].is_empty and out.geometry.iloc[1].area == pytest.approx(10_000)
    # with topology preserved (the default) nothing is emptied
    kept = app.run("simplify_layer", {**args, "output_path": "t.gpkg"})
    assert kept.answer["emptied_feature_indices"] == [] and not kept.warnings


def test_simplify_refuses_points(app, workspace: Path) -> None:
    write_layer(workspace / "pts.gpkg", [Point(E0, N0)], UTM10, id=[1])
    with pytest.raises(GeometryTypeRefused) as err:
        app.run("simplify_layer", {"input_path": "pts.gpkg", "tolerance_meters": 5, "output_path": "s.gpkg"})
    assert err.value.code == "GEOMETRY_TYPE_REFUSED"


# -- centroid_layer and point_on_surface ------------------------------------------------------

# An L: [0,30] x [0,10] (area 300, centre (15, 5)) plus [0,10] x [10,30] (area 200, centre (5, 20)).
L_SHAPE = [(0, 0), (30, 0), (30, 10), (10, 10), (10, 30), (0, 30)]
# A C opening east: the square [0,30]^2 (900, centre (15, 15)) less the notch [10,30] x [10,20] (200, (20, 15)).
C_SHAPE = [(0, 0), (30, 0), (30, 10), (10, 10), (10, 20), (30, 20), (30, 30), (0, 30)]


def test_centroid_of_an_l_shape_is_its_centre_of_mass_and_falls_outside(app, workspace: Path) -> None:
    # x = (300 * 15 + 200 * 5) / 500 = 11, y = (300 * 5 + 200 * 20) / 500 = 11: the point (11, 11),
    # which is in neither arm (x > 10 and y > 10), so it is outside the L and the run says so.
    write_layer(workspace / "l.gpkg", [Polygon(shift(L_SHAPE))], UTM10, id=[7])
    result = app.run("centroid_layer", {"input_path": "l.gpkg", "output_path": "c.gpkg"})
    out = read(workspace / "c.gpkg")
    assert (out.geometry.iloc[0].x, out.geometry.iloc[0].y) == pytest.approx((E0 + 11, N0 + 11), abs=1e-9)
    assert out["id"].tolist() == [7]
    assert result.answer["centroids_outside_their_polygon"] == 1
    assert [w["code"] for w in result.warnings] == ["CENTROID_OUTSIDE_POLYGON"]
    assert "point_on_surface" in result.warnings[0]["hint"]
    assert result.crs_decisions["analysis_crs"] == UTM10


def test_centroid_of_a_geographic_polygon_is_the_metric_centroid(app, workspace: Path) -> None:
    # A triangle 2 degrees wide from 58 N to 62 N. Its centroid in degrees, the vertex mean
    # (-122.3333, 59.3333), is not its centre of mass: the ground narrows northward with cos(latitude).
    # The expected point is computed here the way the contract says: in UTM 10N (the zone of its
    # centre, 122 W) and transformed back; it lies 1.5 km from the degree centroid.
    import numpy as np
    import shapely
    from pyproj import Geod, Transformer

    triangle = Polygon([(-123, 58), (-121, 58), (-123, 62)])
    write_layer(workspace / "tri.geojson", [triangle], "EPSG:4326", id=[1])
    result = app.run("centroid_layer", {"input_path": "tri.geojson", "output_path": "c.geojson"})
    fwd = Transformer.from_crs(4326, 32610, always_xy=True)
    back = Transformer.from_crs(32610, 4326, always_xy=True)
    in_utm = shapely.transform(triangle, lambda c: np.column_stack(fwd.transform(c[:, 0], c[:, 1])))
    expected = back.transform(in_utm.centroid.x, in_utm.centroid.y)
    got = read(workspace / "c.geojson").geometry.iloc[0]
    assert (got.x, got.y) == pytest.approx(expected, abs=1e-9)
    apart = Geod(ellps="WGS84").line_length([got.x, triangle.centroid.x], [got.y, triangle.centroid.y])
    assert apart > 1_000
    decisions = manifest(workspace / "c.geojson")["crs_decisions"]
    assert decisions["analysis_crs"] == UTM10 and "round_trip" in decisions
    assert result.answer["computed_in"] == UTM10 and result.answer["centroids_outside_their_polygon"] == 0


def test_point_on_surface_is_inside_a_c_shape_whose_centroid_is_not(app, workspace: Path) -> None:
    # Centroid of the C: x = (900 * 15 - 200 * 20) / 700 = 9,500 / 700 = 13.571, y = 15: inside the
    # notch (10 < x < 30, 10 < y < 20), so outside the C. point_on_surface must be strictly inside.
    c_shape = Polygon(shift(C_SHAPE))
    write_layer(workspace / "c.gpkg", [c_shape], UTM10, id=[1])
    centroid = app.run("centroid_layer", {"input_path": "c.gpkg", "output_path": "centroid.gpkg"})
    assert centroid.answer["centroids_outside_their_polygon"] == 1
    assert read(workspace / "centroid.gpkg").geometry.iloc[0].x == pytest.approx(E0 + 9_500 / 700)
    result = app.run("point_on_surface", {"input_path": "c.gpkg", "output_path": "p.gpkg"})
    point = read(workspace / "p.gpkg").geometry.iloc[0]
    assert point.within(c_shape)
    check = next(c for c in result.checks if c["name"] == "x-mapsmith:points_inside_features")
    assert check["passed"] and check["critical"]
    assert result.answer["points_inside_polygons"] == 1
    record = manifest(workspace / "p.gpkg")
    assert record["crs_decisions"]["analysis_crs"] == UTM10 and record["crs_decisions"]["target_crs"] is None
    assert {c["name"] for c in record["verification"]} >= {"x-mapsmith:points_inside_features", "geometry_types"}


def test_point_on_surface_of_a_line_lies_on_it_and_points_are_refused(app, workspace: Path) -> None:
    line = LineString(shift([(0, 0), (10, 0), (10, 10)]))
    write_layer(workspace / "line.gpkg", [line], UTM10, id=[1])
    result = app.run("point_on_surface", {"input_path": "line.gpkg", "output_path": "p.gpkg"})
    assert read(workspace / "p.gpkg").geometry.iloc[0].intersects(line)
    assert result.answer["points_on_lines"] == 1
    write_layer(workspace / "pts.gpkg", [Point(E0, N0)], UTM10, id=[1])
    with pytest.raises(GeometryTypeRefused):
        app.run("point_on_surface", {"input_path": "pts.gpkg", "output_path": "q.gpkg"})


# -- convex_hull ------------------------------------------------------------------------------


def test_convex_hull_per_feature_by_hand(app, workspace: Path) -> None:
    # Feature 0: the corners of a 40 x 30 rectangle plus (20, 10) inside it: hull = the rectangle,
    # 1,200 m2. Feature 1: the L above: its hull cuts the corner triangle (30,10)-(30,30)-(10,30) of
    # area 200 from the 30 x 30 square: 900 - 200 = 700 m2. Ground total (1,200 + 700) / 0.99920016
    # = 1,900 * 1.00080048 = 1,901.5209 m2.
    points = MultiPoint(shift([(0, 0), (40, 0), (40, 30), (0, 30), (20, 10)]))
    write_layer(workspace / "f.gpkg", [points, Polygon(shift(L_SHAPE))], UTM10, id=[1, 2])
    result = app.run("convex_hull", {"input_path": "f.gpkg", "output_path": "h.gpkg"})
    out = read(workspace / "h.gpkg")
    assert out.geometry.area.tolist() == pytest.approx([1_200, 700])
    assert out["id"].tolist() == [1, 2]
    assert result.answer["total_hull_area_m2"] == pytest.approx(1_901.5209, rel=1e-7)
    names = {c["name"]: c for c in result.checks}
    assert names["x-mapsmith:hulls_contain_features"]["passed"]
    assert names["feature_count_exact"]["passed"] and names["feature_count_bounded"]["passed"]


def test_convex_hull_reports_hulls_that_are_lines_or_points(app, workspace: Path) -> None:
    # A lone point's hull is that point; three collinear points' hull is a line: neither is a polygon.
    # Both are written without geometry (2 features in, 3 out would break the count), and reported.
    collinear = MultiPoint(shift([(0, 0), (10, 10), (20, 20)]))
    square = box(E0, N0, E0 + 10, N0 + 10)
    write_layer(workspace / "f.gpkg", [Point(E0, N0), collinear, square], UTM10, id=[1, 2, 3])
    result = app.run("convex_hull", {"input_path": "f.gpkg", "output_path": "h.gpkg"})
    assert result.answer["degenerate_hulls"] == [
        {"feature_index": 0, "hull_type": "Point"},
        {"feature_index": 1, "hull_type": "LineString"},
    ]
    assert [w["code"] for w in result.warnings] == ["DEGENERATE_HULL"]
    out = read(workspace / "h.gpkg")
    assert len(out) == 3 and out.geometry.isna().tolist() == [True, True, False]
    assert out.geometry.iloc[2].area == pytest.approx(100)


def test_convex_hull_of_all_features_and_its_refusal_when_collinear(app, workspace: Path) -> None:
    # Points at the corners of a 50 x 20 rectangle and two inside: one hull of 1,000 m2, 6 features.
    corners = shift([(0, 0), (50, 0), (50, 20), (0, 20), (10, 10), (25, 5)])
    write_layer(workspace / "pts.gpkg", [Point(c) for c in corners], UTM10, id=list(range(6)))
    result = app.run("convex_hull", {"input_path": "pts.gpkg", "group_all": True, "output_path": "h.gpkg"})
    out = read(workspace / "h.gpkg")
    assert len(out) == 1 and out.geometry.iloc[0].area == pytest.approx(1_000)
    assert out["feature_count"].tolist() == [6]
    assert result.answer["hull_count"] == 1
    # three points on one line have no area to enclose: refused, not written
    line = shift([(0, 0), (5, 5), (10, 10)])
    write_layer(workspace / "line_pts.gpkg", [Point(c) for c in line], UTM10, id=[1, 2, 3])
    with pytest.raises(InputError) as err:
        app.run("convex_hull", {"input_path": "line_pts.gpkg", "group_all": True, "output_path": "g.gpkg"})
    assert err.value.code == "HULL_DEGENERATE"
    assert err.value.evidence["hull_type"] == "LineString" and err.value.evidence["distinct_vertices"] == 3
    assert not (workspace / "g.gpkg").exists()


# -- measure_length ---------------------------------------------------------------------------


def test_measure_length_of_a_meridian_degree_and_an_equator_degree(app, workspace: Path) -> None:
    # Meridian arc on WGS 84 (a = 6,378,137, f = 1/298.257223563, e2 = f(2 - f) = 0.00669438):
    # M(phi) = a [(1 - e2/4 - 3e2^2/64 - 5e2^3/256) phi - (3e2/8 + 3e2^2/32 + 45e2^3/1024) sin 2phi
    #            + (15e2^2/256 + 45e2^3/1024) sin 4phi - (35e2^3/3072) sin 6phi]
    # M(45.5 N) - M(44.5 N) = 111,131.778 m. The equator is a geodesic: 1 degree of longitude is
    # a * pi / 180 = 111,319.491 m.
    lines = [LineString([(-123, 44.5), (-123, 45.5)]), LineString([(0, 0), (1, 0)])]
    write_layer(workspace / "l.geojson", lines, "EPSG:4326", name=["meridian", "equator"])
    result = app.run("measure_length", {"input_path": "l.geojson", "output_path": "len.gpkg"})
    assert read(workspace / "len.gpkg")["length_m"].tolist() == pytest.approx([111_131.778, 111_319.491], abs=0.01)
    assert result.answer["total_length_m"] == pytest.approx(111_131.778 + 111_319.491, abs=0.02)
    assert result.answer["rows"][0] == {"name": "meridian", "length_m": pytest.approx(111_131.778, abs=0.01)}
    assert "WGS 84" in result.crs_decisions["reason"]


def test_measure_length_in_utm_is_ground_length_not_grid_length(app, workspace: Path) -> None:
    # 1,000 m of grid northing on the central meridian is 1,000 / 0.9996 = 1,000.4002 m of ground.
    write_layer(workspace / "l.gpkg", [LineString(shift([(0, 0), (0, 1_000)]))], UTM10, id=[1])
    result = app.run("measure_length", {"input_path": "l.gpkg", "output_path": "len.gpkg"})
    assert result.answer["total_length_m"] == pytest.approx(1_000.4002, rel=1e-7)
    assert result.crs_decisions["analysis_crs"] == "EPSG:4326"  # WGS 84 UTM's own geographic CRS
    assert next(c for c in result.checks if c["name"] == "x-mapsmith:lengths_non_negative")["passed"]


@pytest.mark.parametrize(("geometry", "family"), [(box(0, 0, 1, 1), "polygon"), (Point(0, 0), "point")])
def test_measure_length_refuses_polygons_and_points(app, workspace: Path, geometry, family) -> None:
    write_layer(workspace / "g.gpkg", [geometry], UTM10, id=[1])
    with pytest.raises(GeometryTypeRefused) as err:
        app.run("measure_length", {"input_path": "g.gpkg", "output_path": "len.gpkg"})
    assert err.value.code == "GEOMETRY_TYPE_REFUSED" and family in err.value.message
    assert not (workspace / "len.gpkg").exists()


def test_measure_length_will_not_overwrite_a_length_field(app, workspace: Path) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(0, 0), (1, 1)])], UTM10, length_m=[3.0])
    with pytest.raises(InputError) as err:
        app.run("measure_length", {"input_path": "l.gpkg", "output_path": "len.gpkg"})
    assert err.value.code == "FIELD_EXISTS" and err.value.evidence["field"] == "length_m"


# -- repair_geometries ------------------------------------------------------------------------


def test_repair_geometries_reports_every_change(app, workspace: Path) -> None:
    # 0: a valid 10 m square, written unchanged.
    # 1: a 100 m bow-tie: as drawn its two lobes cancel (shoelace area 0; on the ellipsoid the two
    #    lobes differ by a few mm2, as the projection's scale differs across them); make_valid gives two
    #    triangles of (1/2) * 100 * 50 = 2,500 m2 each, 5,000 m2 of grid = 5,004.0024 m2 of ground.
    # 2: a 20 m square whose ring returns to a corner through a spike to its centre ("Ring
    #    Self-intersection"): 400 m2 of grid before and after (400.3203 m2 of ground); the spike,
    #    a line, is dropped to keep a polygon (1 lower-dimension part).
    # 3: a triangle with collinear vertices ("Self-intersection"): make_valid leaves two lines and
    #    no polygon, so it is written empty and reported (2 more lower-dimension parts).
    bowtie = Polygon(shift([(0, 0), (100, 100), (100, 0), (0, 100)]))
    spiked = Polygon(shift([(0, 0), (20, 0), (20, 20), (0, 20), (0, 0), (10, 10), (0, 0)]))
    flat = Polygon(shift([(0, 0), (10, 10), (20, 20)]))
    valid = box(E0, N0, E0 + 10, N0 + 10)
    write_layer(workspace / "bad.gpkg", [valid, bowtie, spiked, flat], UTM10, id=[1, 2, 3, 4])
    before = (workspace / "bad.gpkg").read_bytes()
    result = app.run("repair_geometries", {"input_path": "bad.gpkg", "output_path": "fixed.gpkg"})
    answer = result.answer
    assert (answer["invalid_before"], answer["invalid_after"]) == (3, 0)
    assert answer["by_reason"] == {"Ring Self-intersection": 1, "Self-intersection": 2}
    assert answer["repaired_feature_indices"] == [1, 2, 3]
    assert answer["emptied_feature_indices"] == [3]
    assert answer["lower_dimension_parts_dropped"] == 3
    by_index = {r["feature_index"]: r for r in answer["repaired"]}
    assert by_index[1]["area_m2_before"] == pytest.approx(0, abs=1e-3)
    assert by_index[1]["area_m2_after"] == pytest.approx(5_000 / K0**2, rel=1e-7)
    assert (by_index[1]["geometry_type_before"], by_index[1]["geometry_type_after"]) == ("Polygon", "MultiPolygon")
    assert by_index[2]["area_m2_before"] == pytest.approx(400 / K0**2, rel=1e-7)
    assert by_index[2]["area_m2_after"] == pytest.approx(400 / K0**2, rel=1e-7)
    assert by_index[3]["empty_after"] is True and by_index[3]["area_m2_after"] == 0
    assert "GEOMETRY_EMPTIED_BY_REPAIR" in [w["code"] for w in result.warnings]
    out = read(workspace / "fixed.gpkg")
    assert len(out) == 4 and out["id"].tolist() == [1, 2, 3, 4]
    assert out.geometry.iloc[0].equals_exact(valid, 0)
    assert out.geometry.iloc[1].area == pytest.approx(5_000) and out.geometry.iloc[3].is_empty
    record = manifest(workspace / "fixed.gpkg")
    assert record["parameters"]["x-mapsmith:repair_report"]["by_reason"] == answer["by_reason"]
    assert "repairs" not in record  # the output was valid: the runner had nothing left to repair
    checks = {c["name"]: c for c in record["verification"]}
    assert checks["geometry_valid"]["passed"] and checks["feature_count_exact"]["passed"]
    assert checks["x-mapsmith:features_not_emptied"]["passed"] is False
    assert checks["x-mapsmith:features_not_emptied"]["critical"] is False
    assert (workspace / "bad.gpkg").read_bytes() == before  # the input is never modified


def test_repair_geometries_on_a_valid_layer_changes_nothing(app, workspace: Path) -> None:
    squares = [box(E0, N0, E0 + 10, N0 + 10), box(E0 + 20, N0, E0 + 30, N0 + 10)]
    write_layer(workspace / "ok.gpkg", squares, UTM10, id=[1, 2])
    result = app.run("repair_geometries", {"input_path": "ok.gpkg", "output_path": "same.gpkg"})
    assert (result.answer["invalid_before"], result.answer["repaired"], result.warnings) == (0, [], [])
    out = read(workspace / "same.gpkg")
    assert all(a.equals_exact(b, 0) for a, b in zip(out.geometry, squares, strict=True))


# -- cluster_points_by_distance ---------------------------------------------------------------

ROW = [(0, 0), (5, 0), (10, 0), (100, 0)]  # points 5 m apart, and one 90 m further on


def test_clusters_chain_points_within_the_distance(app, workspace: Path) -> None:
    # distance 6: 0-5 and 5-10 are linked (5 <= 6), so 0, 5, 10 chain into one cluster even though
    # 0 and 10 are 10 m apart; 100 is alone. Clusters numbered by first appearance: [1, 1, 1, 2].
    write_layer(workspace / "pts.gpkg", [Point(p) for p in shift(ROW)], UTM10, id=[1, 2, 3, 4])
    result = app.run(
        "cluster_points_by_distance", {"input_path": "pts.gpkg", "distance_meters": 6, "output_path": "c.gpkg"}
    )
    assert read(workspace / "c.gpkg")["cluster_id"].tolist() == [1, 1, 1, 2]
    assert result.answer["cluster_sizes"] == [{"cluster_id": 1, "size": 3}, {"cluster_id": 2, "size": 1}]
    assert (result.answer["cluster_count"], result.answer["unclustered_count"]) == (2, 0)
    assert manifest(workspace / "c.gpkg")["parameters"]["x-mapsmith:distance_in_analysis_units"] == 6


@pytest.mark.parametrize(("distance", "labels"), [(5, [1, 1, 1, 2]), (4.99, [1, 2, 3, 4])])
def test_cluster_distance_is_inclusive(app, workspace: Path, distance: float, labels: list[int]) -> None:
    # "within" includes the distance itself: at 5 m the 5 m steps link; at 4.99 m nothing does.
    write_layer(workspace / "pts.gpkg", [Point(p) for p in shift(ROW)], UTM10, id=[1, 2, 3, 4])
    app.run(
        "cluster_points_by_distance",
        {"input_path": "pts.gpkg", "distance_meters": distance, "output_path": "c.gpkg"},
    )
    assert read(workspace / "c.gpkg")["cluster_id"].tolist() == labels


def test_min_points_leaves_small_groups_unclustered(app, workspace: Path) -> None:
    # With min_points = 2 the lone point at 100 m belongs to no cluster: null cluster_id, counted.
    write_layer(workspace / "pts.gpkg", [Point(p) for p in shift(ROW)], UTM10, id=[1, 2, 3, 4])
    result = app.run(
        "cluster_points_by_distance",
        {"input_path": "pts.gpkg", "distance_meters": 6, "min_points": 2, "output_path": "c.gpkg"},
    )
    labels = read(workspace / "c.gpkg")["cluster_id"]
    assert labels.iloc[:3].tolist() == [1, 1, 1] and labels.isna().tolist() == [False, False, False, True]
    assert (result.answer["cluster_count"], result.answer["unclustered_count"]) == (1, 1)


def test_clusters_of_geographic_points_are_measured_in_metres(app, workspace: Path) -> None:
    # The same row in lon/lat: distances are measured in UTM 10N, so 6 m still links the 5 m steps
    # (6 degrees would link everything). The written coordinates are the input's, never round-tripped.
    lonlat = utm_to_lonlat(shift(ROW))
    write_layer(workspace / "pts.geojson", [Point(p) for p in lonlat], "EPSG:4326", id=[1, 2, 3, 4])
    result = app.run(
        "cluster_points_by_distance", {"input_path": "pts.geojson", "distance_meters": 6, "output_path": "c.gpkg"}
    )
    out = read(workspace / "c.gpkg")
    assert out["cluster_id"].tolist() == [1, 1, 1, 2]
    assert [(p.x, p.y) for p in out.geometry] == [(p.x, p.y) for p in read(workspace / "pts.geojson").geometry]
    decisions = result.crs_decisions
    assert (decisions["analysis_crs"], decisions["target_crs"]) == (UTM10, UTM10)
    assert "round_trip" not in decisions and "no coordinate was transformed back" in decisions["reason"]


def test_points_without_a_position_keep_a_null_cluster(app, workspace: Path) -> None:
    write_layer(workspace / "pts.gpkg", [Point(E0, N0), None, Point(E0 + 1, N0)], UTM10, id=[1, 2, 3])
    result = app.run(
        "cluster_points_by_distance", {"input_path": "pts.gpkg", "distance_meters": 2, "output_path": "c.gpkg"}
    )
    out = read(workspace / "c.gpkg")
    assert len(out) == 3 and out["cluster_id"].isna().tolist() == [False, True, False]
    assert result.answer["features_without_position"] == 1
    assert "FEATURES_WITHOUT_POSITION" in [w["code"] for w in result.warnings]


# -- nearest_neighbour_index ------------------------------------------------------------------

GRID = [(10 * i, 10 * j) for j in range(4) for i in range(4)]  # a 4 x 4 square lattice, spacing 10 m


def test_a_square_lattice_is_dispersed_with_r_equal_2(app, workspace: Path) -> None:
    # Every lattice point's nearest neighbour is 10 m away: observed mean d = 10. With A = n d^2 =
    # 16 * 100 = 1,600 m2 the density is 0.01 and the expected mean 0.5 / sqrt(0.01) = 5 m: R = 2.
    # SE = 0.26136 / sqrt(16 * 0.01) = 0.6534; z = (10 - 5) / 0.6534 = 7.6523.
    write_layer(workspace / "grid.gpkg", [Point(p) for p in shift(GRID)], UTM10, id=list(range(16)))
    result = app.run("nearest_neighbour_index", {"input_path": "grid.gpkg", "area_m2": 1_600})
    answer = result.answer
    assert answer["observed_mean_distance_m"] == pytest.approx(10)
    assert answer["expected_mean_distance_m"] == pytest.approx(5)
    assert answer["nearest_neighbour_ratio"] == pytest.approx(2)
    assert answer["z_score"] == pytest.approx(7.6523, abs=1e-4)
    assert answer["pattern"] == "dispersed" and answer["study_area_source"] == "the area_m2 argument"
    assert result.manifest_path is None and result.output_path is None  # an answer, no dataset
    assert next(c for c in result.checks if c["name"] == "x-mapsmith:study_area_covers_points")["passed"]


def test_without_an_area_the_convex_hull_is_the_stated_study_area(app, workspace: Path) -> None:
    # The lattice's hull is the 30 x 30 square, 900 m2: expected 0.5 / sqrt(16 / 900) = 0.5 * 30 / 4
    # = 3.75 m, so R = 10 / 3.75 = 2.6667 (= 2 * 4/3: the hull leaves out the margin a lattice cell has).
    write_layer(workspace / "grid.gpkg", [Point(p) for p in shift(GRID)], UTM10, id=list(range(16)))
    answer = app.run("nearest_neighbour_index", {"input_path": "grid.gpkg"}).answer
    assert answer["study_area_m2"] == pytest.approx(900)
    assert answer["study_area_source"].startswith("convex hull")
    assert answer["nearest_neighbour_ratio"] == pytest.approx(8 / 3)


def test_a_tight_cluster_has_r_below_1(app, workspace: Path) -> None:
    # Four points on a 1 m square in a 10,000 m2 study area: observed mean 1 m; expected
    # 0.5 / sqrt(4 / 10,000) = 25 m, R = 0.04. SE = 0.26136 / sqrt(4 * 4 / 10,000) = 6.534, so
    # z = (1 - 25) / 6.534 = -3.6731: clustered.
    square = shift([(0, 0), (1, 0), (1, 1), (0, 1)])
    write_layer(workspace / "tight.gpkg", [Point(p) for p in square], UTM10, id=[1, 2, 3, 4])
    answer = app.run("nearest_neighbour_index", {"input_path": "tight.gpkg", "area_m2": 10_000}).answer
    assert answer["nearest_neighbour_ratio"] == pytest.approx(0.04)
    assert answer["z_score"] == pytest.approx(-3.6731, abs=1e-4)
    assert answer["pattern"] == "clustered"


def test_coincident_points_are_each_others_nearest_neighbour_at_zero(app, workspace: Path) -> None:
    # Two points at one spot and one 10 m away: nearest distances 0, 0, 10, mean 10/3 = 3.3333 m.
    # A = 100 m2: expected 0.5 / sqrt(3 / 100) = 2.88675 m, R = 3.3333 / 2.88675 = 1.15470.
    pts = shift([(0, 0), (0, 0), (10, 0)])
    write_layer(workspace / "dup.gpkg", [Point(p) for p in pts], UTM10, id=[1, 2, 3])
    answer = app.run("nearest_neighbour_index", {"input_path": "dup.gpkg", "area_m2": 100}).answer
    assert answer["observed_mean_distance_m"] == pytest.approx(10 / 3)
    assert answer["nearest_neighbour_ratio"] == pytest.approx(1.15470, abs=1e-5)
    assert answer["coincident_points"] == 2


def test_a_study_area_smaller_than_the_points_is_flagged(app, workspace: Path) -> None:
    # The lattice's hull is 900 m2; 9 m2 (a km2 / m2 slip, say) is smaller: warned, check failed.
    write_layer(workspace / "grid.gpkg", [Point(p) for p in shift(GRID)], UTM10, id=list(range(16)))
    result = app.run("nearest_neighbour_index", {"input_path": "grid.gpkg", "area_m2": 9})
    assert [w["code"] for w in result.warnings] == ["STUDY_AREA_SMALLER_THAN_POINTS"]
    assert not next(c for c in result.checks if c["name"] == "x-mapsmith:study_area_covers_points")["passed"]


@pytest.mark.parametrize(
    ("geometries", "arguments", "code"),
    [
        ([Point(E0, N0), None, Point(E0 + 1, N0), None], {"area_m2": 100}, "FEATURES_WITHOUT_POSITION"),
        ([Point(E0, N0)], {"area_m2": 100}, "NOT_ENOUGH_POINTS"),
        ([Point(p) for p in shift([(0, 0), (5, 5), (10, 10)])], {}, "STUDY_AREA_ZERO"),
        ([MultiPoint(shift([(0, 0), (1, 1)])), Point(E0 + 5, N0)], {"area_m2": 100}, "MULTIPOINT_REFUSED"),
    ],
)
def test_nearest_neighbour_index_refusals(app, workspace: Path, geometries, arguments, code) -> None:
    write_layer(workspace / "p.gpkg", geometries, UTM10, id=list(range(len(geometries))))
    with pytest.raises(InputError) as err:
        app.run("nearest_neighbour_index", {"input_path": "p.gpkg", **arguments})
    assert err.value.code == code and err.value.hint
    if code == "FEATURES_WITHOUT_POSITION":
        assert err.value.evidence["count"] == 2 and err.value.evidence["feature_indices"] == [1, 3]


def test_nearest_neighbour_index_refuses_lines(app, workspace: Path) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(0, 0), (1, 1)])], UTM10, id=[1])
    with pytest.raises(GeometryTypeRefused) as err:
        app.run("nearest_neighbour_index", {"input_path": "l.gpkg", "area_m2": 100})
    assert err.value.code == "GEOMETRY_TYPE_REFUSED"


def test_answers_are_plain_json(app, workspace: Path) -> None:
    import json

    write_layer(workspace / "grid.gpkg", [Point(p) for p in shift(GRID)], UTM10, id=list(range(16)))
    result = app.run("nearest_neighbour_index", {"input_path": "grid.gpkg", "area_m2": 1_600})
    assert math.isfinite(json.loads(json.dumps(result.to_dict()))["answer"]["p_value"])


# -- every index readable: centroid_layer, convex_hull and repair_geometries page their lists ----

# 500 features in a row, 40 m apart: even indices are the trouble (a C whose centroid falls outside,
# a lone point whose hull is a point, a bow-tie), odd indices a plain 10 m square. So the lists hold
# exactly the 250 even indices 0, 2, ..., 498: more than the 200 the answers used to be cut at.
TROUBLED = list(range(0, 500, 2))


def _row_of(kind: str) -> list:  # type: ignore[type-arg]
    trouble = {
        "c": lambda dx: Polygon([(E0 + dx + x, N0 + y) for x, y in C_SHAPE]),
        "point": lambda dx: Point(E0 + dx, N0),
        "bowtie": lambda dx: Polygon([(E0 + dx + x, N0 + y) for x, y in [(0, 0), (30, 30), (30, 0), (0, 30)]]),
    }[kind]
    return [trouble(40 * i) if i % 2 == 0 else box(E0 + 40 * i, N0, E0 + 40 * i + 10, N0 + 10) for i in range(500)]


def _read_every_page(app, operation: str, arguments: dict, key: str, limit: int) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    """Follow page.next_offset from 0 to the end; the rows of ``key`` in order, and each page record."""
    rows: list = []  # type: ignore[type-arg]
    pages = []
    offset: int | None = 0
    while offset is not None:
        answer = app.run(
            operation, {**arguments, "offset": offset, "limit": limit, "output_path": f"p{offset}.gpkg"}
        ).answer
        rows += answer[key]
        pages.append(answer["page"])
        offset = answer["page"]["next_offset"]
    return rows, pages


def test_centroid_layer_pages_every_outside_index(app, workspace: Path) -> None:
    write_layer(workspace / "c.gpkg", _row_of("c"), UTM10, id=list(range(500)))
    first = app.run("centroid_layer", {"input_path": "c.gpkg", "output_path": "c0.gpkg"})
    assert first.answer["centroids_outside_their_polygon"] == 250
    assert first.answer["outside_feature_indices"] == TROUBLED[:100]  # the default page: 100
    assert first.answer["page"] == {
        "offset": 0,
        "limit": 100,
        "returned": 100,
        "total": 250,
        "complete": False,
        "next_offset": 100,
    }
    rows, pages = _read_every_page(app, "centroid_layer", {"input_path": "c.gpkg"}, "outside_feature_indices", 120)
    assert rows == TROUBLED
    assert [p["returned"] for p in pages] == [120, 120, 10] and pages[-1]["complete"] is True


def test_convex_hull_pages_every_degenerate_hull(app, workspace: Path) -> None:
    write_layer(workspace / "h.gpkg", _row_of("point"), UTM10, id=list(range(500)))
    rows, pages = _read_every_page(app, "convex_hull", {"input_path": "h.gpkg"}, "degenerate_hulls", 200)
    assert rows == [{"feature_index": i, "hull_type": "Point"} for i in TROUBLED]
    assert [p["returned"] for p in pages] == [200, 50] and pages[0]["total"] == 250
    last = app.run("convex_hull", {"input_path": "h.gpkg", "offset": 240, "output_path": "last.gpkg"}).answer
    assert last["degenerate_count"] == 250 and [d["feature_index"] for d in last["degenerate_hulls"]] == TROUBLED[240:]


def test_repair_geometries_pages_every_repaired_feature(app, workspace: Path) -> None:
    # each bow-tie becomes two triangles of (1/2) * 30 * 15 = 225 m2 each: 450 m2 of grid, 450 / k0^2
    # of ground on the central meridian; the last is 19.96 km east of it, where k^2 is larger by
    # about x^2 / R^2 = 19,960^2 / 6,380,000^2 = 1e-5.
    write_layer(workspace / "b.gpkg", _row_of("bowtie"), UTM10, id=list(range(500)))
    rows, pages = _read_every_page(app, "repair_geometries", {"input_path": "b.gpkg"}, "repaired", 100)
    assert [r["feature_index"] for r in rows] == TROUBLED
    assert rows[0]["area_m2_after"] == pytest.approx(450 / K0**2, rel=1e-7)
    assert all(r["area_m2_after"] == pytest.approx(450 / K0**2, rel=1.1e-5) for r in rows)
    assert [p["returned"] for p in pages] == [100, 100, 50]
    middle = app.run("repair_geometries", {"input_path": "b.gpkg", "offset": 100, "output_path": "m.gpkg"}).answer
    assert middle["invalid_before"] == 250 and middle["repaired_feature_indices"] == TROUBLED[100:200]
    assert middle["emptied_feature_indices"] == [] and middle["emptied_count"] == 0
    # the manifest keeps the first 200 in full and says so
    report = manifest(workspace / "m.gpkg")["parameters"]["x-mapsmith:repair_report"]
    assert report["invalid_before"] == 250 and report["repaired_listed"] == 200
    assert [r["feature_index"] for r in report["repaired"]] == TROUBLED[:200]
