"""Totals over overlapping features: the sum and the union, both reported, with a warning giving both.

Hand-worked, planar in EPSG:6933 (equal-area on the ellipsoid, so planar = ground within 0.001 %):
two 100 x 100 m squares overlapping by 50 x 100 m sum to 20,000 m2 and cover 15,000 m2. Lines:
two 100 m lines along one axis sharing 50 m sum to 200 m and cover 150 m.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import LineString, box

from layers import manifest, read, write_layer

EASE = "EPSG:6933"
X0, Y0 = 1_000_000.0, 5_000_000.0


def square(dx: float, dy: float = 0.0, size: float = 100.0):  # type: ignore[no-untyped-def]
    return box(X0 + dx, Y0 + dy, X0 + dx + size, Y0 + dy + size)


def test_overlapping_squares_report_sum_and_union(app, workspace: Path) -> None:
    write_layer(workspace / "sq.gpkg", [square(0), square(50)], EASE, id=[1, 2])
    result = app.run("measure_area", {"input_path": "sq.gpkg", "method": "planar", "output_path": "a.gpkg"})
    answer = result.answer
    assert answer["total_area_m2"] == pytest.approx(20_000, abs=1e-6)
    assert answer["union_area_m2"] == pytest.approx(15_000, abs=1e-6)
    assert (answer["overlapping_feature_count"], answer["overlapping_pairs"]) == (2, 1)
    [warning] = result.warnings
    assert warning["code"] == "TOTAL_COUNTS_OVERLAPS"
    assert "20,000.000 m2" in warning["message"] and "15,000.000 m2" in warning["message"]
    assert "feature indices [0, 1]" in warning["message"] and "union_area_m2" in warning["hint"]
    # each feature keeps its own area: the per-feature values are not cut by the overlap
    assert read(workspace / "a.gpkg")["area_m2"].tolist() == pytest.approx([10_000, 10_000], abs=1e-6)
    assert manifest(workspace / "a.gpkg")["x-mapsmith:warnings"][0]["code"] == "TOTAL_COUNTS_OVERLAPS"
    # geodesic (the default): the same figures within EASE-Grid's 0.001 % of the ellipsoid
    geodesic = app.run("measure_area", {"input_path": "sq.gpkg", "output_path": "g.gpkg"}).answer
    assert geodesic["total_area_m2"] == pytest.approx(20_000, rel=1e-4)
    assert geodesic["union_area_m2"] == pytest.approx(15_000, rel=1e-4)
    assert geodesic["union_area_m2"] / geodesic["total_area_m2"] == pytest.approx(0.75, rel=1e-6)


def test_clean_twin_disjoint_and_touching_squares_have_no_warning(app, workspace: Path) -> None:
    # apart (200 m gap) and edge to edge (sharing x = X0 + 100): nothing is counted twice
    write_layer(workspace / "sq.gpkg", [square(0), square(100), square(300)], EASE, id=[1, 2, 3])
    result = app.run("measure_area", {"input_path": "sq.gpkg", "method": "planar", "output_path": "a.gpkg"})
    assert result.warnings == []
    assert result.answer["total_area_m2"] == pytest.approx(30_000, abs=1e-6)
    assert result.answer["union_area_m2"] == result.answer["total_area_m2"]
    assert result.answer["overlapping_feature_count"] == 0


def test_a_square_inside_another_overlaps_and_a_third_stays_out_of_the_union(app, workspace: Path) -> None:
    # 100 m square containing a 20 m square; a third square 500 m away overlaps nothing.
    # sum 10,000 + 400 + 10,000 = 20,400; union 10,000 + 10,000 = 20,000.
    layers = [square(0), square(40, 40, size=20), square(500)]
    write_layer(workspace / "sq.gpkg", layers, EASE, id=[1, 2, 3])
    result = app.run("measure_area", {"input_path": "sq.gpkg", "method": "planar", "output_path": "a.gpkg"})
    assert result.answer["total_area_m2"] == pytest.approx(20_400, abs=1e-6)
    assert result.answer["union_area_m2"] == pytest.approx(20_000, abs=1e-6)
    assert result.answer["overlapping_feature_count"] == 2
    assert "feature indices [0, 1]" in result.warnings[0]["message"]


def test_overlapping_lines_report_sum_and_union_crossing_lines_do_not(app, workspace: Path) -> None:
    along = [LineString([(X0, Y0), (X0 + 100, Y0)]), LineString([(X0 + 50, Y0), (X0 + 150, Y0)])]
    write_layer(workspace / "l.gpkg", along, "EPSG:32610", id=[1, 2])
    result = app.run("measure_length", {"input_path": "l.gpkg", "method": "planar", "output_path": "o.gpkg"})
    assert result.answer["total_length_m"] == pytest.approx(200, abs=1e-9)
    assert result.answer["union_length_m"] == pytest.approx(150, abs=1e-9)
    [warning] = [w for w in result.warnings if w["code"] == "TOTAL_COUNTS_OVERLAPS"]
    assert "200.000 m" in warning["message"] and "150.000 m" in warning["message"]
    # clean twin: two lines crossing at one point share no length
    crossing = [LineString([(X0, Y0), (X0 + 100, Y0)]), LineString([(X0 + 50, Y0 - 50), (X0 + 50, Y0 + 50)])]
    write_layer(workspace / "x.gpkg", crossing, "EPSG:32610", id=[1, 2])
    clean = app.run("measure_length", {"input_path": "x.gpkg", "method": "planar", "output_path": "c.gpkg"})
    assert clean.answer["union_length_m"] == clean.answer["total_length_m"] == pytest.approx(200, abs=1e-9)
    assert not [w for w in clean.warnings if w["code"] == "TOTAL_COUNTS_OVERLAPS"]


def test_overlapping_3d_lines_union_is_measured_along_z_too(app, workspace: Path) -> None:
    # Both lines climb 1 m per metre east: each 100 m stretch is 100 sqrt(2) long along Z.
    # Sum 200 sqrt(2) = 282.843 m; union (150 m east) 150 sqrt(2) = 212.132 m.
    a = LineString([(X0, Y0, 0), (X0 + 100, Y0, 100)])
    b = LineString([(X0 + 50, Y0, 50), (X0 + 150, Y0, 150)])
    write_layer(workspace / "l.gpkg", [a, b], "EPSG:32610", id=[1, 2])
    arguments = {"input_path": "l.gpkg", "method": "planar", "use_z": True, "output_path": "o.gpkg"}
    answer = app.run("measure_length", arguments).answer
    assert answer["total_length_m"] == pytest.approx(200 * 2**0.5, abs=1e-9)
    assert answer["union_length_m"] == pytest.approx(150 * 2**0.5, abs=1e-9)
