"""dissolve_layer's weighted mean and ratio of sums on Spark (MAPSMITH_STACK=sedona) against hand values and
the GeoPandas engine's file, value for value.

Four 100 m squares in EPSG:32610, grouped by g (rows in input order):
  A: density 10 over pop 100 (cases 5), 40 over 300 (cases 15), 20 over a null pop (cases 3)
     -> weighted density (10*100 + 40*300) / 400 = 32.5 (the null-pop row left out: 1 skipped);
        cases_per_pop (5 + 15) / (100 + 300) = 0.05 (the row with a null pop left out there too)
  B: density 5 over pop 0 (cases 1) -> total weight 0: null, AGGREGATE_UNDEFINED; cases_per_pop null too
  null key: density 7 over pop 2 (cases 2) -> 7.0; cases_per_pop 2 / 2 = 1.0
Spark's group order is the GeoPandas engine's: sorted by the key, the null key last.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from spark_cluster import on_cluster

pytest_plugins = ["spark_cluster"]  # its session fixtures: spark_master, spark_cluster (one cluster per session)

needs_spark = pytest.mark.skipif(
    importlib.util.find_spec("pyspark") is None, reason="pyspark is not installed (pip install 'mapsmith[spark]')"
)

X0, Y0 = 500_000.0, 5_000_000.0


@pytest.fixture
def sedona_app(workspace: Path, spark_master: str) -> Any:
    """On the session's Spark master (tests/spark_cluster.py): local[2], or a standalone cluster's executors."""
    from mapsmith.app import MapSmith

    environ = {"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_STACK": "sedona", "MAPSMITH_SPARK_MASTER": spark_master}
    if on_cluster(spark_master):
        environ["MAPSMITH_SPARK_MIN_EXECUTORS"] = "2"
    return MapSmith(environ)


def _write(workspace: Path, name: str, **columns: list[Any]) -> None:
    import geopandas as gpd
    import shapely

    n = len(next(iter(columns.values())))
    squares = [shapely.box(X0 + 200 * i, Y0, X0 + 200 * i + 100, Y0 + 100) for i in range(n)]
    gpd.GeoDataFrame(dict(columns), geometry=squares, crs="EPSG:32610").to_parquet(workspace / name, index=False)


def _column(path: Path, name: str) -> list[Any]:
    import pyarrow.parquet as pq

    return pq.read_table(path).column(name).to_pylist()


@needs_spark
def test_weighted_mean_and_ratio_on_spark_match_hand_values_and_geopandas(
    sedona_app: Any, make_app: Any, workspace: Path
) -> None:
    import pyarrow.parquet as pq

    _write(
        workspace,
        "t.parquet",
        g=["A", "A", "A", "B", None],
        density=[10.0, 40.0, 20.0, 5.0, 7.0],
        pop=[100.0, 300.0, None, 0.0, 2.0],
        cases=[5, 15, 3, 1, 2],
    )
    args = {"input_path": "t.parquet", "by_fields": "g", "aggregations": "density:weighted_mean:pop,cases:ratio:pop"}
    spark = sedona_app.run("dissolve_layer", {**args, "output_path": "s.parquet"})
    assert spark.engine["name"] == "apache-sedona"
    assert _column(workspace / "s.parquet", "g") == ["A", "B", None]
    assert _column(workspace / "s.parquet", "density") == [32.5, None, 7.0]
    ratios = _column(workspace / "s.parquet", "cases_per_pop")
    assert ratios[0] == pytest.approx(0.05, abs=1e-15) and ratios[1] is None and ratios[2] == 1.0

    geopandas = make_app().run("dissolve_layer", {**args, "output_path": "o.parquet"})
    for name in ("g", "density", "cases_per_pop"):
        assert _column(workspace / "s.parquet", name) == _column(workspace / "o.parquet", name), name
    types = [
        {f.name: str(f.type) for f in pq.read_schema(workspace / p) if f.name != "geometry"}
        for p in ("s.parquet", "o.parquet")
    ]
    assert types[0]["density"] == types[1]["density"] == "double"
    assert types[0]["cases_per_pop"] == types[1]["cases_per_pop"] == "double"

    # The same record of what was left out and what is undefined, and the same warning, on both engines.
    assert spark.answer["weighted_aggregates"] == geopandas.answer["weighted_aggregates"]
    assert spark.answer["weighted_aggregates"]["density"]["rows_skipped_null"] == 1
    assert spark.answer["weighted_aggregates"]["density"]["groups_null"] == {"the total weight is 0": 1}
    assert spark.answer["weighted_aggregates"]["cases_per_pop"]["groups_null"] == {"the sum of the denominator is 0": 1}
    assert spark.answer["aggregations"] == geopandas.answer["aggregations"]
    codes = [[w["code"] for w in r.warnings] for r in (spark, geopandas)]
    assert codes[0] == codes[1] == ["AGGREGATE_UNDEFINED", "AGGREGATE_UNDEFINED"]
    record = json.loads((workspace / "s.parquet.provenance.json").read_text("utf-8"))
    assert any("sum(density*pop)/sum(pop)" in n for n in record["notes"])


@needs_spark
def test_plain_mean_of_a_rate_warns_on_spark_and_a_count_does_not(sedona_app: Any, workspace: Path) -> None:
    # density 10 and 40: plain mean 25 with UNWEIGHTED_MEAN_OF_RATE; households 40 and 120: mean 80, no warning.
    _write(workspace, "p.parquet", g=["A", "A"], density=[10.0, 40.0], pop=[100.0, 300.0], households=[40, 120])
    warned = sedona_app.run(
        "dissolve_layer",
        {"input_path": "p.parquet", "by_fields": "g", "aggregations": "density:mean", "output_path": "m.parquet"},
    )
    assert _column(workspace / "m.parquet", "density") == [25.0]
    (warning,) = warned.warnings
    assert warning["code"] == "UNWEIGHTED_MEAN_OF_RATE" and "density:weighted_mean:" in warning["hint"]
    clean = sedona_app.run(
        "dissolve_layer",
        {"input_path": "p.parquet", "by_fields": "g", "aggregations": "households:mean", "output_path": "h.parquet"},
    )
    assert _column(workspace / "h.parquet", "households") == [80.0] and clean.warnings == []


@needs_spark
def test_a_negative_weight_is_refused_on_spark_as_on_geopandas(sedona_app: Any, make_app: Any, workspace: Path) -> None:
    from mapsmith.errors import InputError

    _write(workspace, "n.parquet", g=["A", "A", "A"], density=[10.0, 40.0, 1.0], pop=[100.0, -300.0, 5.0])
    args = {"input_path": "n.parquet", "by_fields": "g", "aggregations": "density:weighted_mean:pop"}
    refusals = []
    for app, out in ((sedona_app, "x1.parquet"), (make_app(), "x2.parquet")):
        with pytest.raises(InputError) as err:
            app.run("dissolve_layer", {**args, "output_path": out})
        refusals.append((err.value.code, err.value.message, err.value.evidence))
        assert not (workspace / out).exists()
    assert refusals[0] == refusals[1]
    assert (
        refusals[0][0] == "WEIGHT_INVALID" and refusals[0][2]["rows"] == [1] and refusals[0][2]["values"] == ["-300.0"]
    )
