"""Weighted means in the join summaries, against values worked out by hand: summarize_points_in_polygons'
weighted_mean (GeoPandas and SedonaDB's direct path), and apportion_by_area's weight_field for intensive
quantities. A plain mean of a rate-like field is warned about, naming the weighted alternative.

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), metres from it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError, InputError

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"

sedonadb_missing = bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules())
ENGINES = [
    pytest.param("geopandas", ".gpkg", id="geopandas"),
    pytest.param(
        "sedonadb", ".parquet", id="sedonadb-direct", marks=pytest.mark.skipif(sedonadb_missing, reason="no sedonadb")
    ),
]


def strip(x1: float, x2: float) -> Any:
    return box(X0 + x1, Y0, X0 + x2, Y0 + 100)


# -- summarize_points_in_polygons: weighted_mean ------------------------------------------------
#
#   Z1 = 0..100:   (25, 50) rate 10 pop 100; (75, 50) rate 40 pop 300
#   Z2 = 200..300: (250, 50) rate 7 pop 50; (260, 50) rate 9, no pop
#   Z3 = 500..600: no points
#
#   Z1 mean (10 + 40) / 2 = 25; weighted by pop (10*100 + 40*300) / 400 = 13,000 / 400 = 32.5
#   Z2 mean (7 + 9) / 2 = 8; weighted: the point without pop is left out, 7*50 / 50 = 7
#   Z3: both empty


def _zones_and_people(workspace: Path, ext: str) -> None:
    write_layer(workspace / "zones.gpkg", [strip(0, 100), strip(200, 300), strip(500, 600)], UTM, zid=[1, 2, 3])
    write_layer(
        workspace / f"people{ext}",
        [Point(X0 + x, Y0 + 50) for x in (25, 75, 250, 260)],
        UTM,
        rate=[10.0, 40.0, 7.0, 9.0],
        pop=[100.0, 300.0, 50.0, None],
    )


def summarize(make_app: Any, engine: str, ext: str, **arguments: Any) -> Any:
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0") if engine == "sedonadb" else make_app()
    result = app.run(
        "summarize_points_in_polygons",
        {"input_path": "zones.gpkg", "points_path": f"people{ext}", "output_path": "s.gpkg", **arguments},
    )
    assert result.engine["name"] == engine
    return result


@pytest.mark.parametrize(("engine", "ext"), ENGINES)
def test_weighted_mean_of_a_rate_by_population(make_app: Any, workspace: Path, engine: str, ext: str) -> None:
    _zones_and_people(workspace, ext)
    result = summarize(make_app, engine, ext, field="rate", statistics="mean,weighted_mean,count", weight_field="pop")
    out = read(workspace / "s.gpkg").set_index("zid")
    assert out.loc[1, "rate_weighted_mean"] == pytest.approx(32.5, rel=1e-12)
    assert out.loc[1, "rate_mean"] == pytest.approx(25.0)
    assert out.loc[2, "rate_weighted_mean"] == pytest.approx(7.0, rel=1e-12)
    assert out.loc[2, "rate_mean"] == pytest.approx(8.0)
    assert out.loc[3, ["rate_mean", "rate_weighted_mean"]].isna().all()
    assert out["rate_count"].tolist() == [2, 2, 0]
    record = result.answer["weighted_mean"]
    assert record["weight_field"] == "pop" and record["pairs_skipped_for_a_null"] == 1
    assert record["polygons_with_zero_total_weight"] == 0
    # the weighted mean is asked for, so the plain mean beside it is not warned about
    assert "UNWEIGHTED_MEAN_OF_RATE" not in [w["code"] for w in result.warnings]


@pytest.mark.parametrize(("engine", "ext"), ENGINES)
def test_a_plain_mean_of_a_rate_is_warned_about_with_the_weighted_alternative(
    make_app: Any, workspace: Path, engine: str, ext: str
) -> None:
    _zones_and_people(workspace, ext)
    result = summarize(make_app, engine, ext, field="rate", statistics="mean")
    assert read(workspace / "s.gpkg").set_index("zid").loc[1, "rate_mean"] == pytest.approx(25.0)
    (warning,) = [w for w in result.warnings if w["code"] == "UNWEIGHTED_MEAN_OF_RATE"]
    assert "statistics='mean,weighted_mean' with weight_field='pop'" in warning["hint"]


def test_a_plain_mean_of_a_field_that_is_no_rate_is_not_warned_about(make_app: Any, workspace: Path) -> None:
    # The clean twin: the same values under the name "height" (no rate, share or density in it).
    write_layer(workspace / "zones.gpkg", [strip(0, 100)], UTM, zid=[1])
    write_layer(workspace / "people.gpkg", [Point(X0 + 25, Y0 + 50), Point(X0 + 75, Y0 + 50)], UTM, height=[10.0, 40.0])
    result = summarize(make_app, "geopandas", ".gpkg", field="height", statistics="mean")
    assert read(workspace / "s.gpkg")["height_mean"].tolist() == [25.0]
    assert "UNWEIGHTED_MEAN_OF_RATE" not in [w["code"] for w in result.warnings]


def test_zero_total_weight_leaves_the_weighted_mean_empty_with_a_warning(make_app: Any, workspace: Path) -> None:
    write_layer(workspace / "zones.gpkg", [strip(0, 100)], UTM, zid=[1])
    write_layer(workspace / "people.gpkg", [Point(X0 + 25, Y0 + 50)], UTM, rate=[10.0], pop=[0.0])
    result = summarize(make_app, "geopandas", ".gpkg", field="rate", statistics="weighted_mean", weight_field="pop")
    assert read(workspace / "s.gpkg")["rate_weighted_mean"].isna().all()
    assert "AGGREGATE_UNDEFINED" in [w["code"] for w in result.warnings]


def test_a_negative_weight_is_refused(make_app: Any, workspace: Path) -> None:
    write_layer(workspace / "zones.gpkg", [strip(0, 100)], UTM, zid=[1])
    write_layer(workspace / "people.gpkg", [Point(X0 + 25, Y0 + 50)], UTM, rate=[10.0], pop=[-5.0])
    with pytest.raises(InputError) as err:
        summarize(make_app, "geopandas", ".gpkg", field="rate", statistics="weighted_mean", weight_field="pop")
    assert err.value.code == "WEIGHT_INVALID"


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"statistics": "weighted_mean"}, "MISSING_ARGUMENT"),
        ({"statistics": "mean", "weight_field": "pop"}, "ARGUMENT_NOT_APPLICABLE"),
        ({"statistics": "weighted_mean", "weight_field": "rate"}, "WEIGHT_INVALID"),
    ],
)
def test_weight_field_goes_with_weighted_mean_only(make_app: Any, workspace: Path, arguments: dict, code: str) -> None:
    _zones_and_people(workspace, ".gpkg")
    with pytest.raises(ArgumentError) as err:
        summarize(make_app, "geopandas", ".gpkg", field="rate", **arguments)
    assert err.value.code == code


def test_engines_that_reuse_the_validator_refuse_weighted_mean_instead_of_dropping_it() -> None:
    # Spark's summarize computes the plain statistics only and validates through join_ops.validate_summarize_points.
    from mapsmith_opensource import join_ops

    ctx = SimpleNamespace(arguments={"field": "rate", "statistics": "mean,weighted_mean", "weight_field": "pop"})
    with pytest.raises(ArgumentError) as err:
        join_ops.validate_summarize_points(ctx)
    assert err.value.code == "ARGUMENT_NOT_APPLICABLE" and "opensource" in err.value.hint
    join_ops.validate_summarize_points(SimpleNamespace(arguments={"field": "rate", "statistics": "mean,sum"}))


# -- apportion_by_area: weight_field for an intensive quantity -----------------------------------
#
#   sources (y 0..100):  S1 x 0..100   rate 10, pop 100   (area 10,000 m2 on the grid)
#                        S2 x 100..300 rate 40, pop 300   (20,000)
#                        S3 x 300..400 rate 20, pop 50    (10,000)
#   targets:             T1 x 0..300 (holds S1 and S2 whole)   T2 x 200..400 (half of S2, all of S3)
#
#   by area:  T1 (10*10,000 + 40*20,000) / 30,000 = 30      T2 (40*10,000 + 20*10,000) / 20,000 = 30
#   by pop:   T1 (10*100 + 40*300) / 400 = 32.5            T2 (40*150 + 20*50) / (150 + 50) = 35
#             (S2's 300 people spread over its area: 150 in its half inside T2)
#   extensive pop: T1 100 + 300 = 400                       T2 150 + 50 = 200
#
# Areas are geodesic; in UTM the ratios of these adjacent strips differ from the grid's by < 1e-8.


def _sources_and_targets(workspace: Path) -> None:
    write_layer(
        workspace / "src.gpkg",
        [strip(0, 100), strip(100, 300), strip(300, 400)],
        UTM,
        rate=[10.0, 40.0, 20.0],
        pop=[100.0, 300.0, 50.0],
    )
    write_layer(workspace / "tgt.gpkg", [strip(0, 300), strip(200, 400)], UTM, tid=["T1", "T2"])


def apportion(app: Any, **arguments: Any) -> Any:
    return app.run(
        "apportion_by_area",
        {"input_path": "tgt.gpkg", "source_path": "src.gpkg", "output_path": "a.gpkg", **arguments},
    )


def test_intensive_rate_weighted_by_area_says_so(app: Any, workspace: Path) -> None:
    _sources_and_targets(workspace)
    result = apportion(app, field="rate", quantity_type="intensive")
    out = read(workspace / "a.gpkg").set_index("tid")["rate_apportioned"]
    assert out["T1"] == pytest.approx(30.0, rel=1e-6) and out["T2"] == pytest.approx(30.0, rel=1e-6)
    assert result.answer["weighted_by"] == "overlap area"
    assert any("Area is the right weight for a density" in n and "pass weight_field" in n for n in result.notes)
    assert any("Area is the right weight" in n for n in manifest(workspace / "a.gpkg")["notes"])


def test_intensive_rate_weighted_by_population(app: Any, workspace: Path) -> None:
    _sources_and_targets(workspace)
    result = apportion(app, field="rate", quantity_type="intensive", weight_field="pop")
    out = read(workspace / "a.gpkg").set_index("tid")["rate_apportioned"]
    assert out["T1"] == pytest.approx(32.5, rel=1e-6) and out["T2"] == pytest.approx(35.0, rel=1e-6)
    assert result.answer["weighted_by"] == "pop" and result.answer["sources_with_null_weight"] == 0
    record = manifest(workspace / "a.gpkg")
    assert record["parameters"]["weight_field"] == "pop"
    assert any("weighted by 'pop'" in n for n in record["notes"])
    check = next(c for c in result.checks if c["name"] == "values_in_expected_range")
    assert check["passed"] is True and "pop-weighted means" in check["detail"]


def test_extensive_quantities_are_unchanged_and_take_no_weight(app: Any, workspace: Path) -> None:
    # The clean twin: population itself is extensive, split by area share as before.
    _sources_and_targets(workspace)
    result = apportion(app, field="pop", quantity_type="extensive")
    out = read(workspace / "a.gpkg").set_index("tid")["pop_apportioned"]
    assert out["T1"] == pytest.approx(400.0, rel=1e-6) and out["T2"] == pytest.approx(200.0, rel=1e-6)
    assert "weighted_by" not in result.answer
    with pytest.raises(ArgumentError) as err:
        apportion(app, field="pop", quantity_type="extensive", weight_field="rate", output_path="b.gpkg")
    assert err.value.code == "ARGUMENT_NOT_APPLICABLE"
