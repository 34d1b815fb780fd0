"""nearest_join on SedonaDB: the planar nearest from exact distance joins, the rest join_ops' code.

Worked out by hand on a local metre grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), then a seeded
scatter with real ties compared with the GeoPandas engine row by row.

    T (0,0) is exactly 100 m from both J1 (100,0) and J2 (-100,0): a tie, J1 (the first join row) wins.
    U (1000,0) is 300 m from J3 (1000,300), 900 m from J1 and 1,100 m from J2: J3, 300 m.
    With max_distance_meters=150, T still finds J1 and U finds nothing.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"

pytestmark = pytest.mark.skipif(
    bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
    reason="SedonaDB not installed",
)


def p(x: float, y: float) -> Point:
    return Point(X0 + x, Y0 + y)


def test_nearest_on_sedonadb_by_hand(make_app: Any, workspace: Path) -> None:
    write_layer(workspace / "probes.parquet", [p(0, 0), p(1000, 0)], UTM, pid=["T", "U"])
    write_layer(workspace / "targets.parquet", [p(100, 0), p(-100, 0), p(1000, 300)], UTM, jid=["J1", "J2", "J3"])
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
    args = {"input_path": "probes.parquet", "join_path": "targets.parquet", "output_path": "near.parquet"}
    result = app.run("nearest_join", args)
    assert result.engine["name"] == "sedonadb"
    out = read(workspace / "near.parquet")
    assert list(out["jid"]) == ["J1", "J3"]
    assert list(out["distance_m"]) == [pytest.approx(100.0, abs=1e-6), pytest.approx(300.0, abs=1e-6)]
    notes = manifest(workspace / "near.parquet")["notes"]
    assert any("not ST_KNN" in n for n in notes)

    limited = app.run("nearest_join", {**args, "max_distance_meters": 150.0, "output_path": "near150.parquet"})
    assert limited.engine["name"] == "sedonadb"
    out = read(workspace / "near150.parquet")
    assert list(out["jid"])[0] == "J1" and out["jid"].isna().tolist() == [False, True]


def test_nearest_on_sedonadb_equals_geopandas_on_a_seeded_scatter(make_app: Any, workspace: Path) -> None:
    import numpy as np
    import shapely

    rng = np.random.default_rng(20261130)
    # Points on a 10 m lattice (many exact ties) against points, lines and squares.
    probes = [p(float(x), float(y)) for x, y in rng.integers(0, 100, (300, 2)) * 10]
    targets: list[Any] = [p(float(x), float(y)) for x, y in rng.integers(0, 100, (20, 2)) * 10]
    targets += [LineString([(X0 + x, Y0 + y), (X0 + x + 50, Y0 + y)]) for x, y in rng.integers(0, 95, (10, 2)) * 10]
    targets += [shapely.box(X0 + x, Y0 + y, X0 + x + 30, Y0 + y + 30) for x, y in rng.integers(0, 95, (10, 2)) * 10]
    write_layer(workspace / "probes.parquet", probes, UTM, pid=list(range(len(probes))))
    write_layer(workspace / "targets.parquet", targets, UTM, jid=list(range(len(targets))))
    args = {"input_path": "probes.parquet", "join_path": "targets.parquet"}
    make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0").run("nearest_join", {**args, "output_path": "sdb.parquet"})
    make_app().run("nearest_join", {**args, "output_path": "gpd.parquet"})
    got, ref = read(workspace / "sdb.parquet"), read(workspace / "gpd.parquet")
    assert manifest(workspace / "sdb.parquet")["engine"]["name"] == "sedonadb"
    assert manifest(workspace / "gpd.parquet")["engine"]["name"] == "geopandas"
    assert list(got.columns) == list(ref.columns)
    assert list(got["jid"]) == list(ref["jid"])
    assert got["distance_m"].to_numpy() == pytest.approx(ref["distance_m"].to_numpy(), abs=1e-9)


def test_nearest_passes_over_sedonadb_by_default(make_app: Any, workspace: Path) -> None:
    write_layer(workspace / "probes.parquet", [p(0, 0)], UTM, pid=["T"])
    write_layer(workspace / "targets.parquet", [p(100, 0)], UTM, jid=["J1"])
    args = {"input_path": "probes.parquet", "join_path": "targets.parquet", "output_path": "near.parquet"}
    make_app().run("nearest_join", args)
    (passed,) = manifest(workspace / "near.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "sedonadb"
    assert passed["reason"].startswith("SedonaDB's nearest search was never measured faster")
