"""dissolve_layer on SedonaDB takes only the aggregation functions it has been checked with: weighted_mean and
ratio give the hand-worked values there as on GeoPandas; a function it does not know sends the run to
GeoPandas, with the reason in the manifest.

Local grid in EPSG:32610: group A is two adjacent 100 m squares with density 10 (population 100, cases 5)
and density 40 (population 300, cases 15); group B one square far off with density 7 (population 50, cases 1).

    A's density weighted by population: (10*100 + 40*300) / (100 + 300) = 13,000 / 400 = 32.5
    A's cases per population: (5 + 15) / (100 + 300) = 20 / 400 = 0.05
    B: 7 and 1 / 50 = 0.02 (one feature)
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
AGGREGATIONS = "population:sum,density:weighted_mean:population,cases:ratio:population"

sedonadb_only = pytest.mark.skipif(
    bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
    reason="SedonaDB not installed",
)


def _zones(ws: Path) -> None:
    write_layer(
        ws / "zones.parquet",
        [box(X0, Y0, X0 + 100, Y0 + 100), box(X0 + 100, Y0, X0 + 200, Y0 + 100), box(X0 + 500, Y0, X0 + 600, Y0 + 100)],
        UTM,
        grp=["A", "A", "B"],
        density=[10.0, 40.0, 7.0],
        population=[100, 300, 50],
        cases=[5, 15, 1],
    )


@sedonadb_only
@pytest.mark.parametrize("engine", ["sedonadb", "geopandas"])
def test_weighted_mean_and_ratio_on_each_engine(make_app: Any, workspace: Path, engine: str) -> None:
    _zones(workspace)
    env = {"MAPSMITH_SEDONADB_MIN_FEATURES": "0"} if engine == "sedonadb" else {}
    result = make_app(**env).run(
        "dissolve_layer",
        {"input_path": "zones.parquet", "by_fields": "grp", "aggregations": AGGREGATIONS, "output_path": "d.parquet"},
    )
    assert result.engine["name"] == engine
    out = read(workspace / "d.parquet").set_index("grp")
    assert out.loc["A", "density"] == pytest.approx(32.5, rel=1e-12)
    assert out.loc["A", "cases_per_population"] == pytest.approx(0.05, rel=1e-12)
    assert out.loc["A", "population"] == 400
    assert out.loc["B", "density"] == pytest.approx(7.0) and out.loc["B", "cases_per_population"] == pytest.approx(0.02)
    assert out.loc["A"].geometry.area == pytest.approx(20_000.0)


@sedonadb_only
def test_an_aggregation_sedonadb_was_not_checked_with_goes_to_geopandas_with_the_reason(
    make_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A function dissolve_ops learns after this engine was checked ("std" here, added for the test): the
    # SedonaDB engine steps aside, named in the engine choice, and GeoPandas answers. std of A's densities
    # 10 and 40 (pandas' sample standard deviation): |40 - 10| / sqrt(2) = 21.2132...
    from mapsmith_opensource import dissolve_ops

    monkeypatch.setattr(dissolve_ops, "AGGREGATIONS", {**dissolve_ops.AGGREGATIONS, "std": "std"})
    _zones(workspace)
    result = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0").run(
        "dissolve_layer",
        {"input_path": "zones.parquet", "by_fields": "grp", "aggregations": "density:std", "output_path": "d.parquet"},
    )
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "d.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "sedonadb"
    assert passed["reason"].startswith(
        "aggregations uses std, which the SedonaDB dissolve engine has not been checked against GeoPandas with"
    )
    assert read(workspace / "d.parquet").set_index("grp").loc["A", "density"] == pytest.approx(30 / 2**0.5)


def test_the_known_functions_are_every_function_dissolve_ops_has_today() -> None:
    # When dissolve_ops gains a function this fails, so somebody decides (and tests) whether SedonaDB takes it.
    from mapsmith_opensource import dissolve_ops, sedonadb_overlay

    assert set(dissolve_ops.ALL_FUNCTIONS) == sedonadb_overlay.DISSOLVE_FUNCTIONS
