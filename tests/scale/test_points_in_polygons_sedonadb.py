"""SedonaDB's points-in-polygons path aggregates in the engine: no (polygon, point) pair comes back.

The hand values (write_case): Z1 holds Q0 and Q1 (on the shared edge), Z2 holds Q1 and Q2, so the
counts are [2, 2] and the sums of v [1, 5] (Q1's NaN left out). The trap is the pairs path itself: it is
made to fail, and count_in_polygons and a plain summary still answer; its clean twin, weighted_mean
(computed from pairs, where aggregation.py's refusals live), still takes it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


def write_case(workspace: Path) -> None:
    """Z1 = 0..100 x 0..100, Z2 = 100..200 x 0..100; Q0 (50,50) v 1, Q1 (100,50) on the shared edge v NaN,
    Q2 (150,50) v 5, Q3 no geometry, Q4 (900,900) in none."""
    from shapely.geometry import box

    write_layer(
        workspace / "zones.parquet", [box(*g(0, 0), *g(100, 100)), box(*g(100, 0), *g(200, 100))], UTM, zid=["Z1", "Z2"]
    )
    write_layer(
        workspace / "points.parquet",
        [Point(g(50, 50)), Point(g(100, 50)), Point(g(150, 50)), None, Point(g(900, 900))],
        UTM,
        v=[1.0, float("nan"), 5.0, 7.0, 9.0],
    )


pytestmark = pytest.mark.skipif(importlib.util.find_spec("sedonadb") is None, reason="SedonaDB not installed")


@pytest.fixture
def no_pairs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pairs path, replaced by one that records that it was asked and refuses."""
    from mapsmith_opensource import sedonadb_points

    asked: list[str] = []

    def refuse(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(ctx.contract.name)
        raise AssertionError("the pairs path ran")

    monkeypatch.setattr(sedonadb_points, "_direct_points_in_polygons", refuse)
    return asked


def test_count_and_summary_come_back_aggregated(
    make_app: Callable[..., Any], workspace: Path, no_pairs: list[str]
) -> None:
    write_case(workspace)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
    counted = app.run(
        "count_in_polygons",
        {"input_path": "zones.parquet", "points_path": "points.parquet", "output_path": "c.parquet"},
    )
    assert counted.engine["name"] == "sedonadb"
    assert read(workspace / "c.parquet")["point_count"].tolist() == [2, 2]
    notes = [n for n in manifest(workspace / "c.parquet")["notes"] if n.startswith("engine path:")]
    assert notes[0].startswith("engine path: direct, aggregated -- SedonaDB")
    summary = app.run(
        "summarize_points_in_polygons",
        {
            "input_path": "zones.parquet",
            "points_path": "points.parquet",
            "field": "v",
            "statistics": "sum,count",
            "output_path": "s.parquet",
        },
    )
    assert summary.engine["name"] == "sedonadb"
    assert read(workspace / "s.parquet")["v_sum"].tolist() == [1.0, 5.0]  # Z1: 1 (Q1's NaN left out); Z2: 5
    assert no_pairs == []


def test_weighted_mean_still_takes_the_pairs_path(
    make_app: Callable[..., Any], workspace: Path, no_pairs: list[str]
) -> None:
    write_case(workspace)
    write_layer(workspace / "wp.parquet", [Point(g(50, 50)), Point(g(150, 50))], UTM, v=[1.0, 3.0], n=[1.0, 3.0])
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
    with pytest.raises(Exception, match="the pairs path ran"):
        app.run(
            "summarize_points_in_polygons",
            {
                "input_path": "zones.parquet",
                "points_path": "wp.parquet",
                "field": "v",
                "statistics": "weighted_mean",
                "weight_field": "n",
                "output_path": "w.parquet",
            },
        )
    assert no_pairs == ["summarize_points_in_polygons"]
