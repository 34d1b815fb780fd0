"""count_in_polygons and summarize_points_in_polygons on DuckDB: the count and the statistics done in one
query (GROUP BY GROUPING SETS), the points' validity counted by it, the answer and record GeoPandas gives.

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre:

    Z1 = 0..100 x 0..100, Z2 = 100..200 x 0..100 (they share the edge x = 100)
    points: Q0 (50,50) in Z1, v 1; Q1 (100,50) on the shared edge, v NaN; Q2 (150,50) in Z2, v 5;
            Q3 no geometry, v 7; Q4 empty point, v null; Q5 (900,900) in no zone, v 9;
            Q6 (150, NaN), an invalid point (GEOS: Invalid Coordinate) that meets no zone, v 2

Worked by hand: Z1 holds Q0 and Q1, Z2 holds Q1 and Q2, so the counts are [2, 2], the total 4 and the
distinct points 3; Q1 is in several polygons and lies on their shared boundary (in neither interior).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


def write_case(workspace: Path) -> None:
    write_layer(
        workspace / "zones.parquet", [box(*g(0, 0), *g(100, 100)), box(*g(100, 0), *g(200, 100))], UTM, zid=["Z1", "Z2"]
    )
    write_layer(
        workspace / "points.parquet",
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
    )


@pytest.fixture
def apps(make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A service on which DuckDB is the only engine of the two operations, at any size (the router prefers it to
    GeoPandas from points_in_polygons_duckdb.DUCKDB_POINTS_MIN_ROWS), and its threshold at 0."""
    import importlib

    from mapsmith_opensource import OPERATION_MODULES
    from mapsmith_opensource.join_ops import points_in_polygons_duckdb, spatial_join_duckdb

    operations = ("count_in_polygons", "summarize_points_in_polygons")
    for name in OPERATION_MODULES:
        module = importlib.import_module(f"mapsmith_opensource.{name}")
        kept = tuple(r for r in module.REGISTRATIONS if r.operation not in operations or r.engine == "duckdb")
        monkeypatch.setattr(module, "REGISTRATIONS", kept)
    duck = make_app()
    monkeypatch.undo()  # the service keeps the registrations it was built with
    monkeypatch.setattr(spatial_join_duckdb, "DUCKDB_MIN_ROWS", 0)
    monkeypatch.setattr(points_in_polygons_duckdb, "DUCKDB_POINTS_MIN_ROWS", 0)
    return {"duckdb": duck}


def _reference(make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A service on which GeoPandas runs (named: ``apps`` set DuckDB's threshold to 0 for the test)."""
    return make_app(MAPSMITH_ENGINE="geopandas")


def _same_record(workspace: Path, got: str, ref: str) -> None:
    mine, theirs = manifest(workspace / got), manifest(workspace / ref)
    timing = "x-mapsmith:engine_seconds"
    assert {k: v for k, v in mine["parameters"].items() if k != timing} == {
        k: v for k, v in theirs["parameters"].items() if k != timing
    }
    assert mine["crs_decisions"] == theirs["crs_decisions"]
    assert mine["verification"] == theirs["verification"]
    assert mine.get("warnings") == theirs.get("warnings")


def test_count_is_aggregated_in_duckdb_with_the_hand_counts(apps, make_app, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    write_case(workspace)
    arguments = {"input_path": "zones.parquet", "points_path": "points.parquet"}
    result = apps["duckdb"].run("count_in_polygons", {**arguments, "output_path": "c.parquet"})
    assert result.engine["name"] == "duckdb"
    notes = [n for n in manifest(workspace / "c.parquet")["notes"] if n.startswith("engine path:")]
    assert notes and notes[0].startswith("engine path: direct, aggregated -- DuckDB")
    assert read(workspace / "c.parquet")["point_count"].tolist() == [2, 2]
    expected = {
        "polygons": 2,
        "points": 7,
        "points_counted": 3,
        "points_in_no_polygon": 4,
        "points_without_geometry": 2,
        "points_in_several_polygons": 1,
        "points_in_overlapping_polygons": 0,
        "points_on_shared_boundaries": 1,
        "polygons_with_no_points": 0,
        "total_point_count": 4,
        "distinct_point_count": 3,
    }
    assert {k: result.answer[k] for k in expected} == expected
    (validity,) = [
        c
        for c in manifest(workspace / "c.parquet")["verification"]
        if c["name"] == "x-mapsmith:input_geometry_valid" and c.get("argument") == "points_path"
    ]
    assert validity["passed"] is False
    assert "1 of 7 geometries invalid (first feature indices [6]; Invalid Coordinate)" in validity["detail"]
    assert "2 empty or missing" in validity["detail"]
    # the clean twin: the same request on the GeoPandas engine records the same
    ref = _reference(make_app, monkeypatch).run("count_in_polygons", {**arguments, "output_path": "ref.parquet"})
    assert ref.engine["name"] == "geopandas"
    _same_record(workspace, "c.parquet", "ref.parquet")


def test_summary_leaves_out_nan_and_null_in_sql(apps, make_app, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    write_case(workspace)
    arguments = {
        "input_path": "zones.parquet",
        "points_path": "points.parquet",
        "field": "v",
        "statistics": "mean,sum,min,max,count",
    }
    result = apps["duckdb"].run("summarize_points_in_polygons", {**arguments, "output_path": "s.parquet"})
    assert result.engine["name"] == "duckdb"
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
    _reference(make_app, monkeypatch).run("summarize_points_in_polygons", {**arguments, "output_path": "ref.parquet"})
    _same_record(workspace, "s.parquet", "ref.parquet")
    # the same columns, types and values as the GeoPandas engine wrote
    import pandas as pd

    pd.testing.assert_frame_equal(read(workspace / "s.parquet"), read(workspace / "ref.parquet"))


def test_overlapping_polygons_are_told_from_shared_edges(apps, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """Trap: A = 0..10 square, B = 5..15 square overlap; P (7,7) is inside both (an overlap), R (5,2) is
    on B's edge and inside A (also an overlap: it is in A's interior), S (20,20) in neither."""
    write_layer(
        workspace / "zones.parquet", [box(*g(0, 0), *g(10, 10)), box(*g(5, 0), *g(15, 10))], UTM, zid=["A", "B"]
    )
    write_layer(
        workspace / "points.parquet", [Point(g(7, 7)), Point(g(5, 2)), Point(g(20, 20))], UTM, pid=["P", "R", "S"]
    )
    result = apps["duckdb"].run(
        "count_in_polygons",
        {"input_path": "zones.parquet", "points_path": "points.parquet", "output_path": "o.parquet"},
    )
    assert result.engine["name"] == "duckdb"
    assert read(workspace / "o.parquet")["point_count"].tolist() == [2, 2]
    assert result.answer["points_in_overlapping_polygons"] == 2
    assert result.answer["points_on_shared_boundaries"] == 0
    assert result.answer["total_point_count"] == 4 and result.answer["distinct_point_count"] == 2
    assert [w["code"] for w in result.warnings] == ["TOTAL_COUNTS_OVERLAPS"]


def test_weighted_mean_is_left_to_the_pairs_engines_with_the_reason(apps, make_app, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """Trap: weighted_mean on the DuckDB-only service is refused before any file is written, naming why;
    its clean twin (a plain mean) runs in DuckDB; on the default service weighted_mean runs on GeoPandas."""
    from mapsmith.errors import MapSmithError

    write_case(workspace)
    plain = apps["duckdb"].run(
        "summarize_points_in_polygons",
        {
            "input_path": "zones.parquet",
            "points_path": "points.parquet",
            "field": "v",
            "statistics": "mean",
            "output_path": "m.parquet",
        },
    )
    assert plain.engine["name"] == "duckdb"
    write_layer(workspace / "wp.parquet", [Point(g(50, 50)), Point(g(150, 50))], UTM, v=[1.0, 3.0], n=[1.0, 3.0])
    arguments = {
        "input_path": "zones.parquet",
        "points_path": "wp.parquet",
        "field": "v",
        "statistics": "weighted_mean",
        "weight_field": "n",
    }
    with pytest.raises(MapSmithError) as err:
        apps["duckdb"].run("summarize_points_in_polygons", {**arguments, "output_path": "w.parquet"})
    assert err.value.code == "NO_ELIGIBLE_ENGINE"
    assert "weighted_mean is computed from (polygon, point) pairs" in (err.value.hint or "")
    assert not (workspace / "w.parquet").exists()
    weighted = make_app().run("summarize_points_in_polygons", {**arguments, "output_path": "w.parquet"})
    assert weighted.engine["name"] in ("geopandas", "sedonadb")
    # Z1 holds the point of v 1 (weight 1), Z2 the point of v 3 (weight 3): each mean is its one value
    assert read(workspace / "w.parquet")["v_weighted_mean"].tolist() == [1.0, 3.0]


def test_a_field_the_polygons_have_is_refused_before_the_query(apps, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    from mapsmith.errors import MapSmithError

    write_case(workspace)
    write_layer(workspace / "zc.parquet", [box(*g(0, 0), *g(100, 100))], UTM, point_count=[9])
    with pytest.raises(MapSmithError) as err:
        apps["duckdb"].run(
            "count_in_polygons",
            {"input_path": "zc.parquet", "points_path": "points.parquet", "output_path": "x.parquet"},
        )
    assert err.value.code == "FIELD_EXISTS"
    assert not (workspace / "x.parquet").exists()


def test_empty_polygons_still_count_the_points(apps, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    write_layer(workspace / "z0.parquet", [box(0, 0, 1, 1)][:0], UTM, zid=[])
    write_case(workspace)
    result = apps["duckdb"].run(
        "count_in_polygons", {"input_path": "z0.parquet", "points_path": "points.parquet", "output_path": "e.parquet"}
    )
    assert result.engine["name"] == "duckdb"
    assert {k: result.answer[k] for k in ("polygons", "points", "points_counted", "points_without_geometry")} == {
        "polygons": 0,
        "points": 7,
        "points_counted": 0,
        "points_without_geometry": 2,
    }


def test_the_operator_can_put_duckdb_first_without_touching_the_registrations(make_app, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    # MAPSMITH_ENGINE=duckdb: the DuckDB engine runs at this size (its preference is below GeoPandas') and
    # gives the hand counts of the module docstring.
    write_case(workspace)
    arguments = {"input_path": "zones.parquet", "points_path": "points.parquet", "output_path": "e.parquet"}
    result = make_app(MAPSMITH_ENGINE="duckdb").run("count_in_polygons", arguments)
    assert result.engine["name"] == "duckdb"
    assert read(workspace / "e.parquet")["point_count"].tolist() == [2, 2]
    assert (result.answer["total_point_count"], result.answer["distinct_point_count"]) == (4, 3)
    assert manifest(workspace / "e.parquet")["x-mapsmith:engine_choice"]["preferred_by"] == "MAPSMITH_ENGINE=duckdb"
