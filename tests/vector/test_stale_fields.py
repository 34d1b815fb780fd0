"""Measures an earlier MapSmith run wrote are measured again (or dropped) when an operation changes the geometry;
fields that only look like measures are named in a warning.

Every figure is worked out by hand in EPSG:3035 (ETRS89 / LAEA Europe, equal-area on the ellipsoid), at its
centre 4321000 E, 3210000 N, where a planar square metre is a ground square metre to within 1e-5, so
measure_area's geodesic area of a 100 x 100 m square is 10 000 m2:

* clip_layer to the left half (x 0..50): 50 x 100 = 5 000 m2.
* overlay_layers, intersection with the left half: the same 5 000 m2.
* dissolve_layer of two squares overlapping by half (x 0..100 and 50..150): the union is 150 x 100 =
  15 000 m2, where area_m2:sum would say 20 000 (the overlap counted twice).
* simplify_layer with a 2 m tolerance of the square with a 1 m notch out of its south edge at x = 50
  ((0,0) (50,-1) (100,0) ...): 10 000 + 100 * 1 / 2 = 10 050 m2 before; the notch (1 m < 2 m) goes: 10 000.
* buffer_layer by 10 m with 16 segments per quarter circle: 10 000 + 4 * 100 * 10 for the sides, plus the
  corners, which together are the regular 64-gon of radius 10, 64/2 * 10^2 * sin(2 pi / 64) = 313.655 m2:
  14 313.655 m2.
* convex_hull of the L (0,0) (100,0) (100,50) (50,50) (50,100) (0,100), area 7 500: the hull adds the
  triangle (100,50) (50,50) (50,100) of 50 * 50 / 2 = 1 250: 8 750 m2.
* explode_layer of two disjoint 100 m squares measured together (20 000 m2): 10 000 m2 each.
* repair_geometries of a bow-tie ring (0,0) (2,2) (2,0) (0,2) recorded with area 0 (its lobes cancel):
  the two triangles written are 1 m2 each, 2 m2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import shapely
from shapely.geometry import MultiPolygon, Point, Polygon, box

from layers import manifest, read, write_layer
from mapsmith.derived_fields import RESHAPING_OPERATIONS, looks_like_measure
from mapsmith.provenance.digests import dataset_digest

LAEA = "EPSG:3035"
X0, Y0 = 4_321_000.0, 3_210_000.0
BUFFERED = 10_000 + 4 * 100 * 10 + 32 * 100 * math.sin(2 * math.pi / 64)


def sq(x0: float, y0: float, x1: float, y1: float) -> Polygon:
    return box(X0 + x0, Y0 + y0, X0 + x1, Y0 + y1)


def poly(coords: list[tuple[float, float]]) -> Polygon:
    return Polygon([(X0 + x, Y0 + y) for x, y in coords])


def measured(app: Any, workspace: Path, name: str, geometries: list[Any], **columns: list[Any]) -> str:
    """A layer whose area_m2 measure_area wrote (so its manifest says so); returns its name."""
    write_layer(workspace / f"raw_{name}", geometries, LAEA, **columns)
    app.run("measure_area", {"input_path": f"raw_{name}", "output_path": name})
    return name


def left_half(workspace: Path) -> str:
    write_layer(workspace / "left.gpkg", [sq(-10, -10, 50, 110)], LAEA, zone=["L"])
    return "left.gpkg"


def with_bowtie_measured_as_drawn(app: Any, workspace: Path) -> str:
    """A layer whose manifest (a real measure_area record) says area_m2 is MapSmith's, holding a bow-tie
    with the 0 m2 its ring encloses: what a MapSmith output looked like before measures were taken after
    repair. The record's digest is made that of the new bytes, as if measure_area had written them."""
    measured(app, workspace, "bow.gpkg", [sq(0, 0, 10, 10)], id=[1])
    write_layer(workspace / "bow.gpkg", [poly([(0, 0), (2, 2), (2, 0), (0, 2)])], LAEA, id=[1], area_m2=[0.0])
    record_path = workspace / "bow.gpkg.provenance.json"
    record = json.loads(record_path.read_text("utf-8"))
    record["output"]["sha256"] = dataset_digest(workspace / "bow.gpkg")
    record_path.write_text(json.dumps(record), "utf-8")
    return "bow.gpkg"


# (arguments with the measured input's name, the area_m2 each written feature must carry)
def case(app: Any, workspace: Path, operation: str) -> tuple[dict[str, Any], list[float]]:
    square = [sq(0, 0, 100, 100)]
    if operation == "clip_layer":
        name = measured(app, workspace, "in.gpkg", square, id=[1])
        return {"input_path": name, "mask_path": left_half(workspace)}, [5_000]
    if operation == "overlay_layers":
        name = measured(app, workspace, "in.gpkg", square, id=[1])
        return {"input_path": name, "overlay_path": left_half(workspace), "how": "intersection"}, [5_000]
    if operation == "dissolve_layer":
        name = measured(app, workspace, "in.gpkg", [sq(0, 0, 100, 100), sq(50, 0, 150, 100)], id=[1, 2])
        return {"input_path": name, "aggregations": "area_m2:sum"}, [15_000]
    if operation == "simplify_layer":
        notched = poly([(0, 0), (50, -1), (100, 0), (100, 100), (0, 100)])
        name = measured(app, workspace, "in.gpkg", [notched], id=[1])
        assert read(workspace / name)["area_m2"].iloc[0] == pytest.approx(10_050, rel=1e-5)
        return {"input_path": name, "tolerance_meters": 2}, [10_000]
    if operation == "buffer_layer":
        name = measured(app, workspace, "in.gpkg", square, id=[1])
        return {"input_path": name, "distance_meters": 10}, [BUFFERED]
    if operation == "convex_hull":
        ell = poly([(0, 0), (100, 0), (100, 50), (50, 50), (50, 100), (0, 100)])
        name = measured(app, workspace, "in.gpkg", [ell], id=[1])
        assert read(workspace / name)["area_m2"].iloc[0] == pytest.approx(7_500, rel=1e-5)
        return {"input_path": name}, [8_750]
    if operation == "explode_layer":
        name = measured(app, workspace, "in.gpkg", [MultiPolygon([sq(0, 0, 100, 100), sq(200, 0, 300, 100)])], id=[1])
        assert read(workspace / name)["area_m2"].iloc[0] == pytest.approx(20_000, rel=1e-5)
        return {"input_path": name}, [10_000, 10_000]
    if operation == "repair_geometries":
        return {"input_path": with_bowtie_measured_as_drawn(app, workspace)}, [2]
    raise AssertionError(f"no hand-worked case for {operation}: add one when adding it to RESHAPING_OPERATIONS")


@pytest.mark.parametrize("operation", sorted(RESHAPING_OPERATIONS))
def test_every_reshaping_operation_measures_mapsmith_s_area_again(app, workspace: Path, operation: str) -> None:
    args, expected = case(app, workspace, operation)
    result = app.run(operation, {**args, "output_path": "out.gpkg"})
    out = read(workspace / "out.gpkg")
    # geodesic areas of a square metre or two carry ~1e-4 m2 of arithmetic from degrees: abs 1e-3
    assert out["area_m2"].tolist() == pytest.approx(expected, rel=1e-5, abs=1e-3)
    # the value is the area of the geometry written (planar = ground here), feature by feature
    assert out["area_m2"].tolist() == pytest.approx(list(shapely.area(out.geometry.values)), rel=1e-5, abs=1e-3)
    record = manifest(workspace / "out.gpkg")
    assert {"field": "area_m2", "measure": "area", "method": "geodesic", "written_by": "measure_area"}.items() <= (
        record["parameters"]["x-mapsmith:derived_fields"][0].items()
    )
    assert record["parameters"]["x-mapsmith:derived_fields"][0]["action"] == "recomputed"
    assert any("area_m2 was written by measure_area" in n and "measured again" in n for n in result.notes)
    assert "MEASURE_FIELDS_CARRIED" not in [w["code"] for w in result.warnings]


@pytest.mark.parametrize("operation", sorted(RESHAPING_OPERATIONS - {"repair_geometries"}))
def test_the_clean_twin_has_no_measure_fields_and_no_warning(app, workspace: Path, operation: str) -> None:
    args, _ = case(app, workspace, operation)
    args.pop("aggregations", None)  # dissolve_layer: area_m2:sum names the field left out here
    # the same geometry and fields without area_m2 (and without a manifest): nothing to measure or warn about
    raw = read(workspace / args["input_path"]).drop(columns=["area_m2"])
    raw.to_file(workspace / "plain.gpkg")
    result = app.run(operation, {**args, "input_path": "plain.gpkg", "output_path": "out.gpkg"})
    codes = [w["code"] for w in result.warnings]
    assert "MEASURE_FIELDS_CARRIED" not in codes and "DERIVED_FIELD_DROPPED" not in codes
    assert "area_m2" not in read(workspace / "out.gpkg").columns
    assert "x-mapsmith:derived_fields" not in manifest(workspace / "out.gpkg")["parameters"]


def test_a_measure_like_field_mapsmith_did_not_write_is_named_and_left_alone(app, workspace: Path) -> None:
    # Shape_Area and acres came from another tool: MapSmith cannot know how they were measured.
    write_layer(
        workspace / "esri.gpkg", [sq(0, 0, 100, 100)], LAEA, id=[1], Shape_Area=[10_000.0], acres=[2.471], name=["a"]
    )
    result = app.run(
        "clip_layer", {"input_path": "esri.gpkg", "mask_path": left_half(workspace), "output_path": "c.gpkg"}
    )
    [warning] = [w for w in result.warnings if w["code"] == "MEASURE_FIELDS_CARRIED"]
    assert "carried Shape_Area, acres, whose names look like measures" in warning["message"]
    assert "measure_area" in warning["hint"] and "overwrite_field" in warning["hint"]
    out = read(workspace / "c.gpkg")
    assert out["Shape_Area"].tolist() == [10_000.0]  # not guessed at: named
    assert out.geometry.iloc[0].area == pytest.approx(5_000)


def test_a_record_of_other_bytes_is_not_trusted(app, workspace: Path) -> None:
    # The file was edited after measure_area wrote it: its manifest describes other bytes, so area_m2 is
    # treated as a field MapSmith knows nothing of: named in a warning, not silently measured again.
    name = measured(app, workspace, "in.gpkg", [sq(0, 0, 100, 100)], id=[1])
    original = (workspace / name).read_bytes()
    edited = read(workspace / name)
    edited["area_m2"] = [9_999.0]
    (workspace / name).unlink()
    edited.to_file(workspace / name)
    result = app.run("clip_layer", {"input_path": name, "mask_path": left_half(workspace), "output_path": "c.gpkg"})
    assert [w["code"] for w in result.warnings] == ["MEASURE_FIELDS_CARRIED"]
    assert read(workspace / "c.gpkg")["area_m2"].tolist() == [9_999.0]
    # put back the bytes measure_area wrote, which the workspace's record check compares at teardown
    (workspace / name).write_bytes(original)


def test_a_distance_that_cannot_be_taken_again_is_dropped_and_said(app, workspace: Path) -> None:
    # nearest_join's distance_m (to a station 50 m west of the square) means nothing once clip_layer cut
    # the square: dropped, with a warning naming it and what writes it again.
    write_layer(workspace / "sq.gpkg", [sq(0, 0, 100, 100)], LAEA, id=[1])
    write_layer(workspace / "st.gpkg", [Point(X0 - 50, Y0 + 50)], LAEA, sid=[7])
    app.run("nearest_join", {"input_path": "sq.gpkg", "join_path": "st.gpkg", "output_path": "near.gpkg"})
    assert read(workspace / "near.gpkg")["distance_m"].tolist() == pytest.approx([50.0], rel=1e-5)
    write_layer(workspace / "right.gpkg", [sq(60, -10, 120, 110)], LAEA, zone=["R"])
    result = app.run("clip_layer", {"input_path": "near.gpkg", "mask_path": "right.gpkg", "output_path": "c.gpkg"})
    [warning] = [w for w in result.warnings if w["code"] == "DERIVED_FIELD_DROPPED"]
    assert "distance_m" in warning["message"] and "nearest_join" in warning["hint"]
    out = read(workspace / "c.gpkg")
    assert "distance_m" not in out.columns and out["sid_join" if "sid_join" in out else "sid"].tolist() == [7]
    dropped = manifest(workspace / "c.gpkg")["parameters"]["x-mapsmith:derived_fields"]
    assert dropped == [
        {"field": "distance_m", "measure": "distance", "method": "", "written_by": "nearest_join", "action": "dropped"}
    ]


def test_an_area_carried_onto_centroids_stays_but_is_no_longer_tracked_as_their_measure(app, workspace: Path) -> None:
    # centroid_layer keeps the polygon's area beside the point standing for it (not reshaping); a later
    # buffer cannot take that area again as the buffer's, so the name warning applies from there on.
    name = measured(app, workspace, "in.gpkg", [sq(0, 0, 100, 100)], id=[1])
    app.run("centroid_layer", {"input_path": name, "output_path": "c.gpkg"})
    assert read(workspace / "c.gpkg")["area_m2"].tolist() == pytest.approx([10_000], rel=1e-5)
    assert "x-mapsmith:derived_fields" not in manifest(workspace / "c.gpkg")["parameters"]
    result = app.run("buffer_layer", {"input_path": "c.gpkg", "distance_meters": 5, "output_path": "b.gpkg"})
    assert "MEASURE_FIELDS_CARRIED" in [w["code"] for w in result.warnings]
    assert read(workspace / "b.gpkg")["area_m2"].tolist() == pytest.approx([10_000], rel=1e-5)


@pytest.mark.parametrize(
    ("name", "looks"),
    [
        ("area_m2", True),
        ("Shape_Area", True),
        ("SHAPE_Leng", True),
        ("perimeter", True),
        ("acres", True),
        ("hectares", True),
        ("len_km", True),
        ("AreaHa", True),
        ("name", False),
        ("population", False),
        ("areal_code", False),
        ("harbour", False),
        ("id", False),
    ],
)
def test_measure_like_names(name: str, looks: bool) -> None:
    assert looks_like_measure(name) is looks
