"""dissolve_layer's weighted mean and ratio of sums, and the warning on a plain mean of a rate, by hand.

Two tracts in one district: density 10 over population 100, density 40 over population 300; cases 5 and
15. The district's density is (10*100 + 40*300) / (100 + 300) = 13,000 / 400 = 32.5 people per unit, not
the plain mean (10 + 40) / 2 = 25; its case rate is (5 + 15) / (100 + 300) = 20 / 400 = 0.05.
Squares are 100 m cells in EPSG:32610; the geometry is incidental here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import box

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError, InputError

UTM = "EPSG:32610"
X0, Y0 = 500_000.0, 5_000_000.0


def sq(i: int) -> Any:
    return box(X0 + i * 100, Y0, X0 + i * 100 + 100, Y0 + 100)


def warnings_of(result: Any) -> dict[str, dict[str, str]]:
    return {w["code"]: w for w in result.warnings}


@pytest.fixture
def tracts(workspace: Path) -> Path:
    return write_layer(
        workspace / "tracts.gpkg",
        [sq(0), sq(1)],
        UTM,
        district=["d", "d"],
        density=[10.0, 40.0],
        pop=[100, 300],
        cases=[5, 15],
        households=[40, 120],
    )


def test_weighted_mean_and_ratio_of_sums_of_two_tracts(app, workspace, tracts) -> None:
    result = app.run(
        "dissolve_layer",
        {
            "input_path": "tracts.gpkg",
            "by_fields": "district",
            "aggregations": "density:weighted_mean:pop,cases:ratio:pop",
            "output_path": "d.gpkg",
        },
    )
    out = read(workspace / "d.gpkg")
    assert list(out.columns) == ["district", "density", "cases_per_pop", "geometry"]
    assert out["density"].tolist() == [32.5]
    assert out["cases_per_pop"].iloc[0] == pytest.approx(0.05, abs=1e-15)
    answer = result.answer
    assert answer["aggregations"] == {"density": "weighted_mean:pop", "cases_per_pop": "ratio:pop"}
    assert answer["groups"][0]["density"] == 32.5 and answer["groups"][0]["feature_count"] == 2
    assert answer["weighted_aggregates"]["density"] == {
        "function": "weighted_mean",
        "field": "density",
        "weight": "pop",
        "rows_skipped_null": 0,
        "groups_null": {},
    }
    assert answer["weighted_aggregates"]["cases_per_pop"]["denominator"] == "pop"
    assert answer["fields_dropped"] == ["pop", "cases", "households"]  # used, but not written as themselves
    assert result.warnings == []
    record = manifest(workspace / "d.gpkg")
    assert record["parameters"]["aggregations"] == "density:weighted_mean:pop,cases:ratio:pop"
    assert any("sum(density*pop)/sum(pop)" in n for n in record["notes"])
    assert any("cases_per_pop = sum(cases)/sum(pop)" in n for n in record["notes"])


def test_a_plain_mean_of_a_density_is_25_and_warned_about_with_the_weighted_syntax(app, workspace, tracts) -> None:
    result = app.run(
        "dissolve_layer",
        {"input_path": "tracts.gpkg", "by_fields": "district", "aggregations": "density:mean", "output_path": "m.gpkg"},
    )
    assert read(workspace / "m.gpkg")["density"].tolist() == [25.0]
    warning = warnings_of(result)["UNWEIGHTED_MEAN_OF_RATE"]
    assert "'density'" in warning["message"] and "density" in warning["message"]
    # Three numeric candidates (pop, cases, households): the syntax is given with a placeholder and the list.
    assert "aggregations='density:weighted_mean:<weight field>'" in warning["hint"]
    assert "aggregations='<numerator field>:ratio:<denominator field>'" in warning["hint"]
    assert "numeric fields here: pop, cases, households" in warning["hint"]
    assert manifest(workspace / "m.gpkg")["x-mapsmith:warnings"][0]["code"] == "UNWEIGHTED_MEAN_OF_RATE"


def test_the_warning_names_the_one_candidate_weight(app, workspace) -> None:
    write_layer(workspace / "t.gpkg", [sq(0), sq(1)], UTM, k=["a", "a"], pct_forest=[10.0, 40.0], area_ha=[1, 3])
    result = app.run(
        "dissolve_layer",
        {"input_path": "t.gpkg", "by_fields": "k", "aggregations": "pct_forest:mean", "output_path": "o.gpkg"},
    )
    assert "aggregations='pct_forest:weighted_mean:area_ha'" in warnings_of(result)["UNWEIGHTED_MEAN_OF_RATE"]["hint"]


def test_clean_twin_a_count_fields_plain_mean_has_no_warning(app, workspace, tracts) -> None:
    # households 40 and 120: plain mean 80, and no warning (a count is not a quotient).
    result = app.run(
        "dissolve_layer",
        {
            "input_path": "tracts.gpkg",
            "by_fields": "district",
            "aggregations": "households:mean",
            "output_path": "h.gpkg",
        },
    )
    assert read(workspace / "h.gpkg")["households"].tolist() == [80.0]
    assert result.warnings == []


def test_a_ratio_sits_beside_its_numerators_sum(app, workspace, tracts) -> None:
    app.run(
        "dissolve_layer",
        {"input_path": "tracts.gpkg", "aggregations": "cases:sum,cases:ratio:pop,pop:sum", "output_path": "r.gpkg"},
    )
    out = read(workspace / "r.gpkg")
    assert list(out.columns) == ["cases", "cases_per_pop", "pop", "geometry"]
    assert (out["cases"].iloc[0], out["pop"].iloc[0]) == (20, 400)
    assert out["cases_per_pop"].iloc[0] == pytest.approx(20 / 400, abs=1e-15)


def test_groups_line_up_with_their_keys_including_a_null_key(app, workspace) -> None:
    # Rows in input order: b (20, w 1), null (7, w 2), a (10, w 1), b (50, w 3).
    # a: 10. b: (20*1 + 50*3) / (1 + 3) = 170 / 4 = 42.5. null key: 7.
    write_layer(
        workspace / "g.gpkg",
        [sq(0), sq(1), sq(2), sq(3)],
        UTM,
        k=["b", None, "a", "b"],
        rate=[20.0, 7.0, 10.0, 50.0],
        w=[1, 2, 1, 3],
    )
    app.run(
        "dissolve_layer",
        {"input_path": "g.gpkg", "by_fields": "k", "aggregations": "rate:weighted_mean:w", "output_path": "g_out.gpkg"},
    )
    out = read(workspace / "g_out.gpkg")
    got = {(k if isinstance(k, str) else None): v for k, v in zip(out["k"], out["rate"], strict=True)}
    assert got == {"a": 10.0, "b": 42.5, None: 7.0}


def test_null_weights_are_counted_and_a_zero_total_weight_is_null_with_a_warning(app, workspace) -> None:
    # Group A: (10, 100), (40, 300), (20, null) -> 32.5 from the two complete rows; 1 row left out.
    # Group B: (5, 0) -> total weight 0: null (never 0, never the plain mean 5), warning AGGREGATE_UNDEFINED.
    write_layer(
        workspace / "z.gpkg",
        [sq(0), sq(1), sq(2), sq(3)],
        UTM,
        g=["A", "A", "A", "B"],
        density=[10.0, 40.0, 20.0, 5.0],
        pop=[100, 300, None, 0],
    )
    result = app.run(
        "dissolve_layer",
        {
            "input_path": "z.gpkg",
            "by_fields": "g",
            "aggregations": "density:weighted_mean:pop",
            "output_path": "z_out.gpkg",
        },
    )
    out = read(workspace / "z_out.gpkg").set_index("g")
    assert out.loc["A", "density"] == 32.5
    assert out["density"].isna().to_dict() == {"A": False, "B": True}
    undefined = warnings_of(result)["AGGREGATE_UNDEFINED"]
    assert "1 group(s)" in undefined["message"] and "the total weight is 0" in undefined["message"]
    record = result.answer["weighted_aggregates"]["density"]
    assert record["rows_skipped_null"] == 1 and record["groups_null"] == {"the total weight is 0": 1}
    assert any(
        "1 features left out because density or pop is null" in n for n in manifest(workspace / "z_out.gpkg")["notes"]
    )


def test_a_null_result_is_a_null_in_geoparquet_not_nan(app, workspace) -> None:
    import pyarrow.parquet as pq

    write_layer(workspace / "p.parquet", [sq(0), sq(1)], UTM, g=["A", "B"], density=[10.0, 5.0], pop=[100.0, 0.0])
    app.run(
        "dissolve_layer",
        {
            "input_path": "p.parquet",
            "by_fields": "g",
            "aggregations": "density:weighted_mean:pop",
            "output_path": "p_out.parquet",
        },
    )
    column = pq.read_table(workspace / "p_out.parquet").column("density")
    assert column.to_pylist() == [10.0, None] and column.null_count == 1


@pytest.mark.parametrize(
    ("aggregations", "error", "code", "fragment"),
    [
        ("density:weighted_mean", ArgumentError, "AGGREGATION_INVALID", "needs a second field"),
        ("cases:ratio", ArgumentError, "AGGREGATION_INVALID", "(the denominator)"),
        ("density:weighted_mean:popp", InputError, "FIELD_NOT_FOUND", "did you mean 'pop'"),
        ("density:weighted_mean:density", ArgumentError, "AGGREGATION_INVALID", "by itself"),
        ("density:weighted_mean:district", InputError, "FIELD_NOT_NUMERIC", "(its weight)"),
        ("district:ratio:pop", ArgumentError, "AGGREGATION_INVALID", "key field"),
        ("density:mean,density:weighted_mean:pop", ArgumentError, "AGGREGATION_INVALID", "twice"),
        ("density:weighted_man:pop", ArgumentError, "AGGREGATION_INVALID", "did you mean 'weighted_mean'"),
    ],
)
def test_refusals(app, workspace, tracts, aggregations, error, code, fragment) -> None:
    with pytest.raises(error) as err:
        app.run(
            "dissolve_layer",
            {
                "input_path": "tracts.gpkg",
                "by_fields": "district",
                "aggregations": aggregations,
                "output_path": "x.gpkg",
            },
        )
    assert err.value.code == code and fragment in err.value.message, err.value.message
    assert err.value.hint
    assert not (workspace / "x.gpkg").exists()


def test_a_ratio_field_that_would_clash_with_a_key_is_refused(app, workspace) -> None:
    write_layer(workspace / "c.gpkg", [sq(0)], UTM, Cases_per_pop=["k"], cases=[1], pop=[2])
    with pytest.raises(InputError) as err:
        app.run(
            "dissolve_layer",
            {
                "input_path": "c.gpkg",
                "by_fields": "Cases_per_pop",
                "aggregations": "cases:ratio:pop",
                "output_path": "x.gpkg",
            },
        )
    assert err.value.code == "FIELD_NAME_CLASH"


def test_a_negative_weight_is_refused_before_anything_is_written(app, workspace) -> None:
    write_layer(workspace / "n.gpkg", [sq(0), sq(1)], UTM, g=["A", "A"], density=[10.0, 40.0], pop=[100, -300])
    with pytest.raises(InputError) as err:
        app.run(
            "dissolve_layer",
            {
                "input_path": "n.gpkg",
                "by_fields": "g",
                "aggregations": "density:weighted_mean:pop",
                "output_path": "x.gpkg",
            },
        )
    assert err.value.code == "WEIGHT_INVALID" and err.value.evidence["rows"] == [1]
    assert not (workspace / "x.gpkg").exists()


sedonadb_only = pytest.mark.skipif(
    bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
    reason="SedonaDB not installed",
)


@sedonadb_only
def test_sedonadb_engine_computes_the_same_weighted_values(make_app: Any, workspace: Path) -> None:
    # The SedonaDB engine unions the groups; the aggregates are the shared code's: 32.5 and 0.05 again.
    write_layer(
        workspace / "t.parquet",
        [sq(0), sq(1), sq(5)],
        UTM,
        district=["d", "d", "e"],
        density=[10.0, 40.0, 8.0],
        pop=[100, 300, 50],
        cases=[5, 15, 1],
    )
    result = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="3").run(
        "dissolve_layer",
        {
            "input_path": "t.parquet",
            "by_fields": "district",
            "aggregations": "density:weighted_mean:pop,cases:ratio:pop",
            "output_path": "s.parquet",
        },
    )
    assert result.engine["name"] == "sedonadb"
    out = read(workspace / "s.parquet").set_index("district")
    assert out.loc["d", "density"] == 32.5 and out.loc["e", "density"] == 8.0
    assert out.loc["d", "cases_per_pop"] == pytest.approx(0.05, abs=1e-15)
    assert out.loc["e", "cases_per_pop"] == pytest.approx(1 / 50, abs=1e-15)
