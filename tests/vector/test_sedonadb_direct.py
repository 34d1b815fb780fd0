"""The SedonaDB engine's direct path: points_path read by SedonaDB, never a GeoDataFrame, same record as GeoPandas.

count_in_polygons and summarize_points_in_polygons with points_path in GeoParquet go direct; anything
else (a GeoPackage, a field that is not a number) goes the WKB path, and the manifest's notes say which
and why. Both are checked against values worked out by hand and against the GeoPandas engine's run:
the same rows, parameters, CRS record and checks (validity counts, first invalid rows and reasons).

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre:

    Z1 = 0..100 x 0..100, Z2 = 100..200 x 0..100 (they share the edge x = 100)
    points: Q0 (50,50) in Z1, v 1; Q1 (100,50) on the shared edge, v NaN; Q2 (150,50) in Z2, v 5;
            Q3 no geometry, v 7; Q4 empty point, v null; Q5 (900,900) in no zone, v 9;
            Q6 (150, NaN), an invalid point (GEOS: Invalid Coordinate) that meets no zone, v 2
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer

pytestmark = pytest.mark.skipif(
    bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
    reason="SedonaDB not installed",
)

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


def write_zones(path: Path, **extra: list[Any]) -> None:
    zones = [box(*g(0, 0), *g(100, 100)), box(*g(100, 0), *g(200, 100))]
    write_layer(path, zones, UTM, zid=["Z1", "Z2"], **extra)


def write_points(path: Path) -> None:
    write_layer(
        path,
        [
            Point(g(50, 50)),
            Point(g(100, 50)),
            Point(g(150, 50)),
            None,
            Point(),
            Point(g(900, 900)),
            Point(g(150, math.nan)),
        ],
        UTM,
        pid=["Q0", "Q1", "Q2", "Q3", "Q4", "Q5", "Q6"],
        v=[1.0, float("nan"), 5.0, 7.0, None, 9.0, 2.0],
        label=["a", "b", "c", "d", "e", "f", "g"],
    )


@pytest.fixture
def engines(make_app: Callable[..., Any]) -> dict[str, Any]:
    """A service whose threshold lets SedonaDB take any size, and one on which only GeoPandas can run."""
    return {
        "sedonadb": make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0"),
        "geopandas": make_app(MAPSMITH_SEDONADB_MIN_FEATURES=str(10**12)),
    }


def _path_notes(record: dict[str, Any]) -> list[str]:
    return [n for n in record.get("notes", []) if n.startswith("engine path:")]


def _same_record(workspace: Path, got: str, ref: str) -> None:
    """Everything the GeoPandas engine's run records, the SedonaDB run records alike."""
    mine, theirs = manifest(workspace / got), manifest(workspace / ref)
    timing = "x-mapsmith:engine_seconds"
    assert {k: v for k, v in mine["parameters"].items() if k != timing} == {
        k: v for k, v in theirs["parameters"].items() if k != timing
    }
    assert mine["crs_decisions"] == theirs["crs_decisions"]
    assert mine["verification"] == theirs["verification"]
    assert mine.get("warnings") == theirs.get("warnings")


def test_count_goes_direct_and_records_what_geopandas_records(engines: dict[str, Any], workspace: Path) -> None:
    write_zones(workspace / "zones.parquet")
    write_points(workspace / "points.parquet")
    arguments = {"input_path": "zones.parquet", "points_path": "points.parquet"}
    result = engines["sedonadb"].run("count_in_polygons", {**arguments, "output_path": "c.parquet"})
    reference = engines["geopandas"].run("count_in_polygons", {**arguments, "output_path": "ref.parquet"})
    assert (result.engine["name"], reference.engine["name"]) == ("sedonadb", "geopandas")
    (path,) = _path_notes(manifest(workspace / "c.parquet"))
    assert path.startswith("engine path: direct")
    # Z1: Q0 and Q1 (edge); Z2: Q1 (edge) and Q2.
    assert read(workspace / "c.parquet")["point_count"].tolist() == [2, 2]
    assert result.answer["points_counted"] == 3
    assert result.answer["points_in_no_polygon"] == 4  # Q3, Q4 (no geometry), Q5 (far) and Q6 (NaN)
    assert result.answer["points_without_geometry"] == 2
    assert result.answer["points_in_several_polygons"] == 1
    # The invalid point geometry is counted and named by its row (6), with GEOS's reason, as GeoPandas does.
    (validity,) = [
        c
        for c in manifest(workspace / "c.parquet")["verification"]
        if c["name"] == "x-mapsmith:input_geometry_valid" and c.get("argument") == "points_path"
    ]
    assert validity["passed"] is False
    assert "1 of 7 geometries invalid (first feature indices [6]; Invalid Coordinate)" in validity["detail"]
    assert "2 empty or missing" in validity["detail"]
    _same_record(workspace, "c.parquet", "ref.parquet")


def test_summary_leaves_out_nan_and_null_as_geopandas_does(engines: dict[str, Any], workspace: Path) -> None:
    write_zones(workspace / "zones.parquet")
    write_points(workspace / "points.parquet")
    arguments = {
        "input_path": "zones.parquet",
        "points_path": "points.parquet",
        "field": "v",
        "statistics": "mean,sum,min,max,count",
    }
    result = engines["sedonadb"].run("summarize_points_in_polygons", {**arguments, "output_path": "s.parquet"})
    engines["geopandas"].run("summarize_points_in_polygons", {**arguments, "output_path": "ref.parquet"})
    assert _path_notes(manifest(workspace / "s.parquet"))[0].startswith("engine path: direct")
    out = read(workspace / "s.parquet")
    # Z1: Q0 = 1 and Q1 = NaN (left out); Z2: Q1 = NaN (left out) and Q2 = 5.
    assert out["v_count"].tolist() == [1, 1]
    assert out["v_sum"].tolist() == [1.0, 5.0]
    assert out["v_mean"].tolist() == [1.0, 5.0]
    assert out["v_min"].tolist() == [1.0, 5.0]
    assert out["v_max"].tolist() == [1.0, 5.0]
    assert out["v_null_count"].tolist() == [1, 1]
    assert result.answer["points_with_null_value"] == 2  # Q1 (NaN) and Q4 (null)
    assert result.answer["null_values_in_polygons"] == 2  # Q1 in Z1 and in Z2
    _same_record(workspace, "s.parquet", "ref.parquet")


def test_geopackage_points_go_the_wkb_path_and_say_why(engines: dict[str, Any], workspace: Path) -> None:
    write_zones(workspace / "zones.parquet")
    write_points(workspace / "points.gpkg")
    arguments = {"input_path": "zones.parquet", "points_path": "points.gpkg", "output_path": "c.parquet"}
    result = engines["sedonadb"].run("count_in_polygons", arguments)
    assert result.engine["name"] == "sedonadb"
    (path,) = _path_notes(manifest(workspace / "c.parquet"))
    assert path.startswith("engine path: WKB")
    assert path.endswith("because points_path is GPKG, not GeoParquet, which SedonaDB reads directly")
    assert read(workspace / "c.parquet")["point_count"].tolist() == [2, 2]


def test_a_text_field_is_refused_as_geopandas_refuses_it(engines: dict[str, Any], workspace: Path) -> None:
    from mapsmith.errors import MapSmithError

    write_zones(workspace / "zones.parquet")
    write_points(workspace / "points.parquet")
    arguments = {
        "input_path": "zones.parquet",
        "points_path": "points.parquet",
        "field": "label",
        "statistics": "sum",
        "output_path": "s.parquet",
    }
    with pytest.raises(MapSmithError) as caught:
        engines["sedonadb"].run("summarize_points_in_polygons", arguments)
    assert caught.value.code == "FIELD_NOT_NUMERIC"
    assert caught.value.evidence["field"] == "label"


def test_a_field_the_polygons_have_is_refused_on_the_direct_path(engines: dict[str, Any], workspace: Path) -> None:
    from mapsmith.errors import MapSmithError

    write_zones(workspace / "zones.parquet", POINT_COUNT=[0, 0])
    write_points(workspace / "points.parquet")
    arguments = {"input_path": "zones.parquet", "points_path": "points.parquet", "output_path": "c.parquet"}
    with pytest.raises(MapSmithError) as caught:
        engines["sedonadb"].run("count_in_polygons", arguments)
    assert caught.value.code == "FIELD_EXISTS"
    assert caught.value.evidence["field"] == "POINT_COUNT"


@pytest.mark.parametrize(
    ("zones", "points", "expected"),
    [
        # one point (0.5,0.5) in one zone 0..1 x 0..1; no zones; no points
        (1, 1, {"polygons": 1, "points": 1, "points_counted": 1, "polygons_with_no_points": 0}),
        (0, 1, {"polygons": 0, "points": 1, "points_counted": 0, "points_in_no_polygon": 1}),
        (1, 0, {"polygons": 1, "points": 0, "points_counted": 0, "polygons_with_no_points": 1}),
    ],
)
def test_one_row_and_empty_layers(
    engines: dict[str, Any], workspace: Path, zones: int, points: int, expected: dict[str, int]
) -> None:
    write_layer(workspace / "z.parquet", [box(*g(0, 0), *g(1, 1))][:zones], UTM, zid=["Z"][:zones])
    write_layer(workspace / "p.parquet", [Point(g(0.5, 0.5))][:points], UTM, v=[3.0][:points])
    arguments = {"input_path": "z.parquet", "points_path": "p.parquet", "output_path": "c.parquet"}
    result = engines["sedonadb"].run("count_in_polygons", arguments)
    assert result.engine["name"] == "sedonadb"
    assert _path_notes(manifest(workspace / "c.parquet"))[0].startswith("engine path: direct")
    assert {k: result.answer[k] for k in expected} == expected
    assert read(workspace / "c.parquet")["point_count"].tolist() == [points][:zones]
