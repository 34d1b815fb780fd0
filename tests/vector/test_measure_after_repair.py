"""A value derived from a geometry is the value of the geometry written, after any repair, or the run is refused.

Hand-worked, in EPSG:3035 (ETRS89 / LAEA Europe, an ellipsoidal equal-area projection; at its centre
4321000 E, 3210000 N a planar square metre is a ground square metre to well under 1e-6):

* the bow-tie ring (0,0) (2,2) (2,0) (0,2), shifted to that centre, crosses itself at (1,1). Its
  shoelace sum is 0*2-2*0 + 2*0-2*2 + 2*2-0*0 + 0*0-0*2 = 0 + (-4) + 4 + 0 = 0: as a ring it encloses
  0 m2. make_valid gives its two lobes, the triangles (0,0) (1,1) (0,2) and (1,1) (2,2) (2,0), each
  half of base 2 times height 1 = 1 m2: 2 m2 written. Before this rule the 0 was written beside them.
* the clean twin: a 10 x 10 m square, 100 m2, measured as before.
* the lopsided bow-tie (0,0) (6,2) (6,0) (0,4) crosses at (4, 4/3); its lobes are the triangles
  (0,0) (4,4/3) (0,4), area 8, centroid (4/3, 16/9), and (4,4/3) (6,2) (6,0), area 2, centroid (16/3, 10/9).
  The centre of mass of the 10 m2 written is ((8*4/3 + 2*16/3)/10, (8*16/9 + 2*10/9)/10) = (32/15, 148/90),
  while GEOS's centroid of the ring as drawn is (0, 2): a point outside both lobes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import shapely
from shapely.geometry import LineString, Point, Polygon, box

from layers import manifest, read, write_layer
from mapsmith.derived_fields import DERIVING_OPERATIONS
from mapsmith.errors import MapSmithError

LAEA = "EPSG:3035"
X0, Y0 = 4_321_000.0, 3_210_000.0


def at(coords: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(X0 + x, Y0 + y) for x, y in coords]


BOWTIE = Polygon(at([(0, 0), (2, 2), (2, 0), (0, 2)]))
LOPSIDED = Polygon(at([(0, 0), (6, 2), (6, 0), (0, 4)]))
SQUARE = box(X0 + 100, Y0, X0 + 110, Y0 + 10)
REFUSALS = {"INPUT_GEOMETRY_INVALID", "MEASURED_GEOMETRY_INVALID", "MEASURED_GEOMETRY_REPAIRED"}


def test_the_hand_worked_figures_hold() -> None:
    assert shapely.area(BOWTIE) == 0.0 and not BOWTIE.is_valid  # the lobes cancel
    lobes = shapely.make_valid(BOWTIE)
    assert sorted(shapely.area(p) for p in shapely.get_parts(lobes)) == [1.0, 1.0]
    made = shapely.make_valid(LOPSIDED)
    assert made.area == pytest.approx(10.0)
    assert (made.centroid.x - X0, made.centroid.y - Y0) == pytest.approx((32 / 15, 148 / 90))


def test_measure_area_measures_the_triangles_it_writes_not_the_bowtie_s_zero(app, workspace: Path) -> None:
    # measure_area makes the bow-tie valid in memory (derived.measurable on what it read), discloses the repair
    # with the area before (0) and after (2), and measures what it writes: 2 m2, never the ring's 0.
    write_layer(workspace / "bow.gpkg", [BOWTIE, SQUARE], LAEA, id=[1, 2])
    result = app.run("measure_area", {"input_path": "bow.gpkg", "output_path": "a.gpkg"})
    out = read(workspace / "a.gpkg")
    assert out["area_m2"].tolist() == pytest.approx([2.0, 100.0], rel=1e-5, abs=1e-3)
    assert out.geometry.iloc[0].is_valid and out.geometry.iloc[0].area == pytest.approx(2.0)
    assert result.answer["total_area_m2"] == pytest.approx(102.0, abs=1e-3)
    [repair] = result.repairs
    [change] = repair["x-mapsmith:report"]["changes"]
    assert (change["feature_index"], change["before"], change["after"]) == (0, 0.0, pytest.approx(2.0))
    assert "OUTPUT_REPAIRED" in [w["code"] for w in result.warnings]
    assert manifest(workspace / "a.gpkg")["repairs"] == result.repairs
    # the same numbers as the explicit way round: repair_geometries, then measure_area
    app.run("repair_geometries", {"input_path": "bow.gpkg", "output_path": "fixed.gpkg"})
    app.run("measure_area", {"input_path": "fixed.gpkg", "output_path": "b.gpkg"})
    assert read(workspace / "b.gpkg")["area_m2"].tolist() == pytest.approx([2.0, 100.0], rel=1e-5, abs=1e-3)


def test_the_clean_twin_is_measured_as_before(app, workspace: Path) -> None:
    write_layer(workspace / "sq.gpkg", [SQUARE], LAEA, id=[2])
    result = app.run("measure_area", {"input_path": "sq.gpkg", "output_path": "a.gpkg"})
    assert read(workspace / "a.gpkg")["area_m2"].tolist() == pytest.approx([100.0], rel=1e-5)
    assert result.repairs == [] and "OUTPUT_REPAIRED" not in [w["code"] for w in result.warnings]
    derived = manifest(workspace / "a.gpkg")["parameters"]["x-mapsmith:derived_fields"]
    assert derived == [
        {"field": "area_m2", "measure": "area", "method": "geodesic", "written_by": "measure_area", "action": "written"}
    ]


def test_a_distance_is_taken_to_the_geometry_written(app, workspace: Path) -> None:
    # nearest_join measures distance_m from each input geometry: the bow-tie is made valid first (two
    # triangles), so the distance written is to the triangle whose vertex (2, 0) is nearest: 50 - 2 = 48 m.
    write_layer(workspace / "bow.gpkg", [BOWTIE], LAEA, id=[1])
    write_layer(workspace / "pts.gpkg", [Point(X0 + 50, Y0)], LAEA, pid=[1])
    result = app.run("nearest_join", {"input_path": "bow.gpkg", "join_path": "pts.gpkg", "output_path": "n.gpkg"})
    written = read(workspace / "n.gpkg")
    assert written["distance_m"].tolist() == pytest.approx([48.0], rel=1e-5)
    assert written.geometry.iloc[0].is_valid and result.repairs
    # clean twin: the point lies 50 m west of the square's west edge (x 50 -> 100), on the ground
    write_layer(workspace / "sq.gpkg", [SQUARE], LAEA, id=[2])
    clean = app.run("nearest_join", {"input_path": "sq.gpkg", "join_path": "pts.gpkg", "output_path": "m.gpkg"})
    assert read(workspace / "m.gpkg")["distance_m"].tolist() == pytest.approx([50.0], rel=1e-5)
    assert clean.repairs == []


# -- the catalogue: every operation that derives a value from geometry, fed a bow-tie ----------------

POINTS = [Point(X0 + 1, Y0 + 1.5), Point(X0 + 105, Y0 + 5)]
SOURCE = box(X0 - 10, Y0 - 10, X0 + 200, Y0 + 200)


def _case(operation: str) -> tuple[dict[str, Any], str | None]:
    """Arguments, and the derived field to compare with the written geometry (None: the geometry is the value)."""
    return {
        "measure_area": ({}, "area_m2"),
        "measure_length": ({}, "length_m"),
        "nearest_join": ({"join_path": "pts.gpkg"}, "distance_m"),
        "count_in_polygons": ({"points_path": "pts.gpkg"}, "point_count"),
        "summarize_points_in_polygons": ({"points_path": "pts.gpkg", "field": "pid"}, "pid_count"),
        "apportion_by_area": (
            {"source_path": "src.gpkg", "field": "pop", "quantity_type": "extensive"},
            "pop_apportioned",
        ),
        "calculate_field": ({"output_field": "a_m2", "expression": "$area"}, "a_m2"),
        "centroid_layer": ({}, None),
        "point_on_surface": ({}, None),
    }[operation]


def _expected(operation: str, field: str | None, written: Any, points: Any) -> list[Any]:
    """The value each written feature should carry, computed by the test from the geometry written."""
    geoms = list(written.geometry)
    if operation in ("measure_area", "calculate_field"):
        return [pytest.approx(g.area, rel=1e-5, abs=1e-3) for g in geoms]
    if operation == "measure_length":
        return [pytest.approx(g.length, rel=1e-3) for g in geoms]
    if operation == "nearest_join":
        return [pytest.approx(min(g.distance(p) for p in points), rel=1e-3, abs=1e-6) for g in geoms]
    if operation in ("count_in_polygons", "summarize_points_in_polygons"):
        return [sum(g.covers(p) for p in points) for g in geoms]
    if operation == "apportion_by_area":  # 100 people spread evenly over SOURCE
        return [pytest.approx(100 * g.intersection(SOURCE).area / SOURCE.area, rel=1e-5) for g in geoms]
    raise AssertionError(operation)


@pytest.mark.parametrize("operation", sorted(DERIVING_OPERATIONS))
def test_every_deriving_operation_measures_what_it_writes_or_refuses(app, workspace: Path, operation: str) -> None:
    args, field = _case(operation)
    if operation == "measure_length":
        # a line is valid even when it crosses itself (simple is another matter): measured as drawn, 2*sqrt(8)+2
        layer = [LineString(at([(0, 0), (2, 2), (2, 0), (0, 2)]))]
    else:
        layer = [LOPSIDED, SQUARE]
    write_layer(workspace / "in.gpkg", layer, LAEA, id=list(range(len(layer))))
    write_layer(workspace / "pts.gpkg", POINTS, LAEA, pid=[1, 2])
    write_layer(workspace / "src.gpkg", [SOURCE], LAEA, pop=[100.0])
    try:
        app.run(operation, {"input_path": "in.gpkg", "output_path": "out.gpkg", **args})
    except MapSmithError as err:
        assert err.code in REFUSALS, f"{operation} refused with {err.code}"
        assert "repair_geometries" in (err.hint or "")
        assert not (workspace / "out.gpkg").exists()
        return
    written = read(workspace / "out.gpkg")
    if field is None:  # the centre of the 10 m2 written lobes, not GEOS's (0, 2) of the ring as drawn
        centre = shapely.make_valid(LOPSIDED).centroid if operation == "centroid_layer" else None
        if centre is not None:
            assert (written.geometry.iloc[0].x, written.geometry.iloc[0].y) == pytest.approx((centre.x, centre.y))
        else:
            assert shapely.make_valid(LOPSIDED).covers(written.geometry.iloc[0])
        return
    assert all(g.is_valid for g in written.geometry)
    assert written[field].tolist() == _expected(operation, field, written, POINTS)
    if operation == "measure_length":
        assert written[field].iloc[0] == pytest.approx(2 * 8**0.5 + 2, rel=1e-3)


@pytest.mark.parametrize("operation", sorted(DERIVING_OPERATIONS))
def test_every_deriving_operation_answers_the_clean_twin(app, workspace: Path, operation: str) -> None:
    # The same calls on valid geometry (the 10 m square; a straight 10 m line for measure_length) are answered
    # with the values of what is written: 100 m2, 10 m, 0 m to the point inside the square (it is the 1 inside).
    args, field = _case(operation)
    layer = [LineString(at([(0, 0), (10, 0)]))] if operation == "measure_length" else [SQUARE]
    write_layer(workspace / "in.gpkg", layer, LAEA, id=[0])
    write_layer(workspace / "pts.gpkg", POINTS, LAEA, pid=[1, 2])
    write_layer(workspace / "src.gpkg", [SOURCE], LAEA, pop=[100.0])
    result = app.run(operation, {"input_path": "in.gpkg", "output_path": "out.gpkg", **args})
    assert result.repairs == []
    written = read(workspace / "out.gpkg")
    if field is None:
        assert SQUARE.covers(written.geometry.iloc[0])
        if operation == "centroid_layer":
            assert (written.geometry.iloc[0].x, written.geometry.iloc[0].y) == pytest.approx((X0 + 105, Y0 + 5))
        return
    assert written[field].tolist() == _expected(operation, field, written, POINTS)
    by_hand = {
        "measure_area": 100.0,
        "calculate_field": 100.0,
        "measure_length": 10.0,
        "apportion_by_area": 100 * 100 / 210**2,
    }
    if operation in by_hand:
        assert written[field].iloc[0] == pytest.approx(by_hand[operation], rel=1e-5)
