"""count_in_polygons and summarize_points_in_polygons on DuckDB and SedonaDB take points_path's missing and invalid
counts from the facts its header read kept (points_in_polygons_sql.kept_point_facts) and test no point's validity
again; the invalid ones are named by reading them again (first_invalid_points); the counts and the record are the
ones worked by hand.

A points file whose footer declares Point and no bbox (as DuckDB writes it) is scanned by the header read for its
extent, which counts the points' validity too (layer_facts). Local grid in EPSG:32610 (x0 = 500,000 E,
y0 = 5,000,000 N), a unit a metre:

    Z1 = 0..100 x 0..100, Z2 = 100..200 x 0..100 (they share the edge x = 100)
    points: Q0 (50,50) in Z1, v 1; Q1 (150,50) in Z2, v NaN; Q2 (160,60) in Z2, v 5; Q3 no geometry, v 7;
            Q4 (900,900) in no zone, v 9; Q5 (150, NaN), invalid (GEOS: Invalid Coordinate), meets no zone, v 2

Worked by hand: counts [1, 2]; 6 points, 3 counted, 1 without geometry, 1 invalid (feature 5). With R (100,20) on
the shared edge as well (the grouping by point, points_in_polygons_sql.grouped_sql): counts [2, 3], 7 points. The
clean twin drops Q5: counts [1, 2], 5 points, none invalid. Weighted mean of v with every weight 1: Z1 1.0 (Q0),
Z2 5.0 (Q2; Q1's NaN left out).
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import drop_bbox, manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
SEDONADB = pytest.mark.skipif(importlib.util.find_spec("sedonadb") is None, reason="SedonaDB not installed")
ENGINES = ["duckdb", pytest.param("sedonadb", marks=SEDONADB)]
ARGS = {"input_path": "zones.parquet", "points_path": "points.parquet"}


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


@pytest.fixture(autouse=True)
def nothing_kept() -> Any:
    from mapsmith_opensource import layer_facts

    layer_facts._kept.clear()
    yield
    layer_facts._kept.clear()


def write_case(workspace: Path, *, invalid: bool = True, edge: bool = False) -> None:
    import pyarrow.parquet as pq

    zones = [box(*g(0, 0), *g(100, 100)), box(*g(100, 0), *g(200, 100))]
    write_layer(workspace / "zones.parquet", zones, UTM, zid=["Z1", "Z2"])
    points = [(Point(g(50, 50)), 1.0), (Point(g(150, 50)), math.nan), (Point(g(160, 60)), 5.0), (None, 7.0)]
    points += [(Point(g(900, 900)), 9.0)]
    points += [(Point(g(150, math.nan)), 2.0)] if invalid else []
    points += [(Point(g(100, 20)), 4.0)] if edge else []
    path = workspace / "points.parquet"
    write_layer(path, [p for p, _ in points], UTM, pid=[f"Q{n}" for n in range(len(points))], v=[v for _, v in points])
    drop_bbox(path)
    column = json.loads(pq.read_schema(path).metadata[b"geo"])["columns"]["geometry"]
    assert column["geometry_types"] == ["Point"] and "bbox" not in column


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What kept_point_facts answered, and the scans of the points' facts run, during the run."""
    from mapsmith_opensource.join_ops import points_in_polygons_sql as sql

    seen: dict[str, list[Any]] = {"kept": [], "scans": []}
    kept, scan = sql.kept_point_facts, sql.points_scan_sql
    monkeypatch.setattr(sql, "kept_point_facts", lambda p: seen["kept"].append(kept(p)) or seen["kept"][-1])
    monkeypatch.setattr(
        sql, "points_scan_sql", lambda *a, **k: seen["scans"].append(scan(*a, **k)) or seen["scans"][-1]
    )
    return seen


def _validity(workspace: Path, name: str) -> dict[str, Any]:
    (check,) = [
        c
        for c in manifest(workspace / name)["verification"]
        if c["name"] == "x-mapsmith:input_geometry_valid" and c.get("argument") == "points_path"
    ]
    return check


@pytest.mark.parametrize("invalid", [True, False], ids=["with the invalid point", "clean twin"])
@pytest.mark.parametrize("edge", [False, True], ids=["plain queries", "grouping by point"])
@pytest.mark.parametrize("engine", ENGINES)
def test_count_takes_the_kept_counts_and_tests_no_point_again(
    make_app: Callable[..., Any], workspace: Path, spied: dict[str, list[Any]], engine: str, edge: bool, invalid: bool
) -> None:
    write_case(workspace, invalid=invalid, edge=edge)
    result = make_app(MAPSMITH_ENGINE=engine).run("count_in_polygons", {**ARGS, "output_path": "c.parquet"})
    assert result.engine["name"] == engine
    assert read(workspace / "c.parquet")["point_count"].tolist() == ([2, 3] if edge else [1, 2])
    points = 5 + edge + invalid
    assert (result.answer["points"], result.answer["points_without_geometry"]) == (points, 1)
    assert [(f.rows, f.missing, f.invalid) for f in spied["kept"]] == [(points, 1, int(invalid))]
    # one scan of the points' facts, which reads the kept counts and no geometry (no ST_IsValid, no ST_IsEmpty)
    (scan,) = spied["scans"]
    assert f"CAST(1 AS BIGINT) AS missing, CAST({int(invalid)} AS BIGINT) AS bad" in scan
    assert "ST_" not in scan
    check = _validity(workspace, "c.parquet")
    if invalid:  # the invalid point named (read again by streaming: first_invalid_points)
        assert check["passed"] is False
        assert f"1 of {points} geometries invalid (first feature indices [5]; Invalid Coordinate)" in check["detail"]
    else:
        assert check["passed"] is True


@SEDONADB
@pytest.mark.parametrize("invalid", [True, False], ids=["with the invalid point", "clean twin"])
def test_sedonadb_weighted_mean_reads_the_kept_counts(
    make_app: Callable[..., Any], workspace: Path, spied: dict[str, list[Any]], invalid: bool
) -> None:
    """summarize_points_in_polygons with weighted_mean on SedonaDB's direct path (the pairs come back for the
    weights): its scan of the points takes the kept counts too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_case(workspace, invalid=invalid)
    path = workspace / "points.parquet"
    table = pq.read_table(path)
    pq.write_table(table.append_column("w", pa.array([1.0] * table.num_rows)), path)
    result = make_app(MAPSMITH_ENGINE="sedonadb").run(
        "summarize_points_in_polygons",
        {**ARGS, "field": "v", "statistics": "weighted_mean", "weight_field": "w", "output_path": "s.parquet"},
    )
    assert result.engine["name"] == "sedonadb"
    assert read(workspace / "s.parquet")["v_weighted_mean"].tolist() == [1.0, 5.0]
    points = 6 if invalid else 5
    assert [(f.rows, f.missing, f.invalid) for f in spied["kept"]] == [(points, 1, int(invalid))]
    check = _validity(workspace, "s.parquet")
    assert check["passed"] is not invalid
    if invalid:
        assert "1 of 6 geometries invalid (first feature indices [5]; Invalid Coordinate)" in check["detail"]
