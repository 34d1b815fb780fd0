"""Every engine of the heavy vector operations gives the hand-computed answer, and the GeoPandas engine's rows.

The engines are discovered from the opensource stack's registrations (``REGISTRATIONS`` of each module
in ``OPERATION_MODULES``), so an engine registered tomorrow is run here without touching this file. An
engine is forced by building the service with that operation's other registrations removed (the
registrations are read when a service is built) and with the size thresholds lowered to zero
(``MAPSMITH_SEDONADB_MIN_FEATURES=0``, ``spatial_join_duckdb.DUCKDB_MIN_ROWS = 0``). Fixtures are GeoParquet,
which every engine reads, on a local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N) where a
unit is a metre and the scale is within 0.04 % of true, so distances are planar and read off the drawing:

    y=200  L1 ----------------------- (0..200)          | L2 (x = 400, y 0..400)
    y=100  +---- Z1 ----+---- Z2 ----+                  |
           | P1(50,50)  P2(100,50) P3(150,50)           |        Z3 = 500..600 x 500..600 (far)
           |            |   P5(120,80)                  |        P4 = (300,300), in no zone
    y=0    +------------+------------+
          x=0        x=100        x=200
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point, box

from layers import manifest, read, write_layer
from mapsmith._compat import install_command

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
HEAVY_OPERATIONS = (
    "spatial_join",
    "nearest_join",
    "count_in_polygons",
    "summarize_points_in_polygons",
    "dissolve_layer",
    "overlay_layers",
)
REFERENCE = "geopandas"
TOLERANCE_M = 1e-6


def _operation_modules() -> list[Any]:
    from mapsmith_opensource import OPERATION_MODULES

    return [importlib.import_module(f"mapsmith_opensource.{name}") for name in OPERATION_MODULES]


def registered_engines() -> list[tuple[str, str]]:
    """(operation, engine) for every engine the opensource stack registers for the heavy operations."""
    found = {(r.operation, r.engine) for m in _operation_modules() for r in m.REGISTRATIONS}
    return sorted(p for p in found if p[0] in HEAVY_OPERATIONS)


def _needs(engine: str) -> list[Any]:
    """Engines from optional extras are skipped, with the reason, where the extra is not installed."""
    if engine != "sedonadb":
        return []
    from mapsmith_opensource import sedonadb_ops

    missing = sedonadb_ops.missing_modules()
    return [pytest.mark.skipif(bool(missing), reason=f"SedonaDB not installed: {missing}")]


ENGINES = [pytest.param(op, engine, id=f"{op}-{engine}", marks=_needs(engine)) for op, engine in registered_engines()]


@pytest.fixture
def forced(make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], Any]:
    """A service on which ``engine`` is the only registered engine of ``operation``, with no size threshold."""
    from mapsmith_opensource.join_ops import points_in_polygons_duckdb, spatial_join_duckdb

    def unlimited() -> None:
        monkeypatch.setattr(spatial_join_duckdb, "DUCKDB_MIN_ROWS", 0)
        monkeypatch.setattr(points_in_polygons_duckdb, "DUCKDB_POINTS_MIN_ROWS", 0)

    unlimited()

    def make(operation: str, engine: str) -> Any:
        for module in _operation_modules():
            kept = tuple(r for r in module.REGISTRATIONS if r.operation != operation or r.engine == engine)
            monkeypatch.setattr(module, "REGISTRATIONS", kept)
        app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
        monkeypatch.undo()  # the service keeps the registrations it was built with
        unlimited()
        return app

    return make


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


def grid_box(x1: float, y1: float, x2: float, y2: float):  # type: ignore[no-untyped-def]
    return box(*g(x1, y1), *g(x2, y2))


def write_fixtures(ws: Path) -> None:
    write_layer(
        ws / "zones.parquet",
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), grid_box(500, 500, 600, 600)],
        UTM,
        zid=["Z1", "Z2", "Z3"],
        grp=["A", "A", "B"],
        name=["north", "south", "far"],
    )
    write_layer(
        ws / "points.parquet",
        [Point(g(50, 50)), Point(g(100, 50)), Point(g(150, 50)), Point(g(300, 300)), Point(g(120, 80))],
        UTM,
        pid=["P1", "P2", "P3", "P4", "P5"],
        name=["a", "b", "c", "d", "e"],
        v=[1.0, 2.0, 4.0, 8.0, None],
    )
    write_layer(
        ws / "lines.parquet",
        [LineString([g(0, 200), g(200, 200)]), LineString([g(400, 0), g(400, 400)])],
        UTM,
        lid=["L1", "L2"],
    )
    # For nearest_join: A (50,150) is 50 m below L1; B (380,100) 20 m left of L2 (L1's end is 205.9 m);
    # C (300,250) 100 m from L2 and 111.8 m from L1's end (200,200).
    write_layer(
        ws / "probes.parquet",
        [Point(g(50, 150)), Point(g(380, 100)), Point(g(300, 250))],
        UTM,
        qid=["A", "B", "C"],
    )
    write_layer(ws / "cutter.parquet", [grid_box(50, 0, 150, 100)], UTM, cid=["K"])
    # For the predicates: C1 the line (50,50)-(150,50) through Z1 and Z2; C2 the line x = 0 from y = -10
    # to 110, along Z1's west edge; C3 the square 150..250 x 50..150, half in Z2; C4 10..20 x 10..20 in Z1.
    write_layer(
        ws / "shapes.parquet",
        [
            LineString([g(50, 50), g(150, 50)]),
            LineString([g(0, -10), g(0, 110)]),
            grid_box(150, 50, 250, 150),
            grid_box(10, 10, 20, 20),
        ],
        UTM,
        cid=["C1", "C2", "C3", "C4"],
    )


def _none(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _column(out: Any, name: str) -> list[Any]:
    return [_none(v) for v in out[name].tolist()]


def _areas_by(out: Any, key: str) -> dict[str, float]:
    return {k: round(float(a), 6) for k, a in zip(out[key], out.geometry.area, strict=True)}


# Each case: the operation's arguments (output_path added) and a check of the output against values
# worked out by hand from the drawing above.
def _spatial_join(out: Any, answer: dict[str, Any]) -> None:
    # intersects, how=left: P2 on the shared edge meets Z1 and Z2; P4 meets nothing and keeps one empty row.
    assert list(zip(_column(out, "pid"), _column(out, "zid"), strict=True)) == [
        ("P1", "Z1"),
        ("P2", "Z1"),
        ("P2", "Z2"),
        ("P3", "Z2"),
        ("P4", None),
        ("P5", "Z2"),
    ]
    assert list(out.columns) == ["pid", "name", "v", "geometry", "zid", "grp", "name_join"]
    assert answer["matched_pairs"] == 5 and answer["input_features_unmatched"] == 1


def _within_distance(out: Any, answer: dict[str, Any]) -> None:
    # 250 m: every point but P4 is within 50 m of both Z1 and Z2; P4 is 223.6 m from Z2's corner
    # (200,100) and 282.8 m from Z1's (100,100) and Z3's (500,500).
    assert list(zip(_column(out, "pid"), _column(out, "zid"), strict=True)) == [
        ("P1", "Z1"),
        ("P1", "Z2"),
        ("P2", "Z1"),
        ("P2", "Z2"),
        ("P3", "Z1"),
        ("P3", "Z2"),
        ("P4", "Z2"),
        ("P5", "Z1"),
        ("P5", "Z2"),
    ]
    assert answer["join_features_unmatched"] == 1  # Z3


# (shapes.parquet row, zone) pairs each predicate gives, read off the drawing; how='inner' (intersects is
# the points_zones case).
PREDICATE_PAIRS = {
    "touches": [("C2", "Z1")],  # along the edge only; C3 shares area with Z2, so it does not touch it
    "crosses": [("C1", "Z1"), ("C1", "Z2")],  # a line through a polygon's inside and out of it
    "overlaps": [("C3", "Z2")],  # two polygons sharing part of their area
    "within": [("C4", "Z1")],
    "contains": [],  # no shape contains a zone: an empty output
}


def _predicate_check(predicate: str) -> Callable[[Any, dict[str, Any]], None]:
    def check(out: Any, answer: dict[str, Any]) -> None:
        assert list(zip(_column(out, "cid"), _column(out, "zid"), strict=True)) == PREDICATE_PAIRS[predicate]
        assert answer["matched_pairs"] == len(PREDICATE_PAIRS[predicate])

    return check


def _nearest(out: Any, answer: dict[str, Any]) -> None:
    assert _column(out, "lid") == ["L1", "L2", "L2"]
    assert out["distance_m"].tolist() == pytest.approx([50.0, 20.0, 100.0], abs=TOLERANCE_M)


def _count(out: Any, answer: dict[str, Any]) -> None:
    # Z1: P1 and P2 (edge); Z2: P2 (edge), P3, P5; Z3: none. P4 is in no zone.
    assert _column(out, "point_count") == [2, 3, 0]
    assert answer["points_in_no_polygon"] == 1 and answer["points_in_several_polygons"] == 1


def _summarize(out: Any, answer: dict[str, Any]) -> None:
    # Z1: v of P1, P2 = 1, 2. Z2: P2, P3, P5 = 2, 4, null (left out, counted). Z3: no values.
    assert _column(out, "v_mean") == [1.5, 3.0, None]
    assert _column(out, "v_sum") == [3.0, 6.0, 0.0]
    assert _column(out, "v_min") == [1.0, 2.0, None]
    assert _column(out, "v_max") == [2.0, 4.0, None]
    assert _column(out, "v_count") == [2, 2, 0]
    assert _column(out, "v_null_count") == [0, 1, 0]


def _dissolve(out: Any, answer: dict[str, Any]) -> None:
    # A = Z1 + Z2, 200 m x 100 m; B = Z3, 100 m x 100 m.
    assert _areas_by(out, "grp") == {"A": 20_000.0, "B": 10_000.0}


def _overlay(out: Any, answer: dict[str, Any]) -> None:
    # The cutter 50..150 x 0..100 takes half of Z1 and half of Z2 and misses Z3.
    assert _areas_by(out, "zid") == {"Z1": 5_000.0, "Z2": 5_000.0}


CASES: dict[str, list[tuple[str, dict[str, Any], Callable[[Any, dict[str, Any]], None]]]] = {
    "spatial_join": [
        ("points_zones", {"input_path": "points.parquet", "join_path": "zones.parquet", "how": "left"}, _spatial_join),
        (
            "within_distance",
            {
                "input_path": "points.parquet",
                "join_path": "zones.parquet",
                "how": "inner",
                "predicate": "within_distance",
                "distance_meters": 250,
            },
            _within_distance,
        ),
        *(
            (
                predicate,
                {"input_path": "shapes.parquet", "join_path": "zones.parquet", "how": "inner", "predicate": predicate},
                _predicate_check(predicate),
            )
            for predicate in PREDICATE_PAIRS
        ),
    ],
    "nearest_join": [("lines", {"input_path": "probes.parquet", "join_path": "lines.parquet"}, _nearest)],
    "count_in_polygons": [("zones", {"input_path": "zones.parquet", "points_path": "points.parquet"}, _count)],
    "summarize_points_in_polygons": [
        (
            "v",
            {
                "input_path": "zones.parquet",
                "points_path": "points.parquet",
                "field": "v",
                "statistics": "mean,sum,min,max,count",
            },
            _summarize,
        )
    ],
    "dissolve_layer": [("grp", {"input_path": "zones.parquet", "by_fields": "grp"}, _dissolve)],
    "overlay_layers": [
        (
            "intersection",
            {"input_path": "zones.parquet", "overlay_path": "cutter.parquet", "how": "intersection"},
            _overlay,
        )
    ],
}


def test_every_heavy_operation_has_a_case_and_an_engine() -> None:
    engines = registered_engines()
    assert {op for op, _ in engines} == set(HEAVY_OPERATIONS)
    assert set(CASES) == set(HEAVY_OPERATIONS)
    assert all((op, REFERENCE) in engines for op in HEAVY_OPERATIONS)


def _assert_same_rows(got: Any, ref: Any) -> None:
    """Same columns in the same order, same attribute values row by row, geometries equal within tolerance."""
    import shapely

    assert list(got.columns) == list(ref.columns)
    assert len(got) == len(ref)
    for name in (c for c in ref.columns if c != ref.geometry.name):
        assert got[name].dtype == ref[name].dtype, name
        if got[name].dtype.kind == "f":  # sums may add the same values in another order
            assert got[name].to_numpy() == pytest.approx(ref[name].to_numpy(), rel=1e-12, nan_ok=True), name
        else:
            assert _column(got, name) == _column(ref, name), name
    equal = shapely.equals_exact(got.geometry.values, ref.geometry.values, tolerance=TOLERANCE_M)
    assert bool(equal.all()), f"geometries differ in rows {list(equal.nonzero()[0])}"
    assert got.crs == ref.crs


@pytest.mark.parametrize(("operation", "engine"), ENGINES)
def test_engine_gives_the_hand_answer_and_the_geopandas_rows(
    forced: Callable[[str, str], Any], workspace: Path, operation: str, engine: str
) -> None:
    write_fixtures(workspace)
    app, reference = forced(operation, engine), forced(operation, REFERENCE)
    for label, arguments, check in CASES[operation]:
        out_name, ref_name = f"{label}_{engine}.parquet", f"{label}_ref.parquet"
        result = app.run(operation, {**arguments, "output_path": out_name})
        assert result.engine["name"] == engine
        record = manifest(workspace / out_name)
        assert record["x-mapsmith:engine_choice"]["engine"] == engine
        assert record["engine"]["name"] == engine
        out = read(workspace / out_name)
        check(out, result.answer)
        if engine != REFERENCE:
            ref_result = reference.run(operation, {**arguments, "output_path": ref_name})
            assert ref_result.engine["name"] == REFERENCE
            _assert_same_rows(out, read(workspace / ref_name))
            timing = "x-mapsmith:engine_seconds"  # the one parameter that may differ
            ref_record = manifest(workspace / ref_name)
            assert {k: v for k, v in record["parameters"].items() if k != timing} == {
                k: v for k, v in ref_record["parameters"].items() if k != timing
            }
            assert record.get("crs_decisions") == ref_record.get("crs_decisions")


# -- how the router chooses SedonaDB ----------------------------------------------------------

sedonadb_only = pytest.mark.skipif(
    bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
    reason="SedonaDB not installed",
)


@sedonadb_only
def test_small_inputs_pass_over_sedonadb_with_the_threshold_as_reason(make_app, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    from mapsmith_opensource import sedonadb_ops

    write_fixtures(workspace)
    app = make_app()
    result = app.run("count_in_polygons", {**CASES["count_in_polygons"][0][1], "output_path": "c.parquet"})
    assert result.engine["name"] == "geopandas"
    passed = manifest(workspace / "c.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed == [
        {
            "engine": "sedonadb",
            "reason": f"the larger input has 5 features, fewer than the {sedonadb_ops.DIRECT_MIN_FEATURES:,} from "
            "which SedonaDB's direct path is considered (it was measured no faster below it; "
            "MAPSMITH_SEDONADB_MIN_FEATURES overrides)",
        },
        {
            "engine": "duckdb",
            "reason": "points_path has 5 features, fewer than the 1,000,000 from which DuckDB is preferred to "
            "GeoPandas (DUCKDB_POINTS_MIN_ROWS, measured)",
        },
    ]


@sedonadb_only
def test_sedonadb_is_preferred_to_duckdb_when_eligible_and_says_why(make_app, workspace: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mapsmith_opensource.join_ops import spatial_join_duckdb

    monkeypatch.setattr(spatial_join_duckdb, "DUCKDB_MIN_ROWS", 0)
    write_fixtures(workspace)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="5")
    app.run("spatial_join", {**CASES["spatial_join"][0][1], "output_path": "j.parquet"})
    record = manifest(workspace / "j.parquet")
    assert record["x-mapsmith:engine_choice"] == {"stack": "opensource", "engine": "sedonadb"}
    assert record["engine"]["version"] == importlib.import_module("sedonadb").__version__
    why = [n for n in record["notes"] if n.startswith("engine: SedonaDB ran")]
    assert why and "has 5 features, at least the 5 from which" in why[0]


@sedonadb_only
def test_spatial_join_goes_to_sedonadb_only_when_asked(make_app, workspace: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Neither SedonaDB path (file to file, WKB) was measured faster through MapSmith, so by default DuckDB takes it."""
    from mapsmith_opensource.join_ops import spatial_join_duckdb

    monkeypatch.setattr(spatial_join_duckdb, "DUCKDB_MIN_ROWS", 0)
    write_fixtures(workspace)
    make_app().run("spatial_join", {**CASES["spatial_join"][0][1], "output_path": "j.parquet"})
    choice = manifest(workspace / "j.parquet")["x-mapsmith:engine_choice"]
    assert choice["engine"] == "duckdb"
    assert choice["passed_over"] == [
        {
            "engine": "sedonadb",
            "reason": "file to file: SedonaDB's spatial_join file to file was never measured faster than DuckDB or "
            "GeoPandas (whole MapSmith runs: FILE_MIN_FEATURES), so it runs only when MAPSMITH_SEDONADB_MIN_FEATURES "
            "sets a threshold; the WKB path: SedonaDB's spatial_join (the WKB path) was never measured faster than "
            "DuckDB or GeoPandas (benchmarks/bench_scale.py), so it runs only when MAPSMITH_SEDONADB_MIN_FEATURES "
            "sets a threshold",
        }
    ]


@sedonadb_only
def test_different_crs_pass_over_sedonadb(make_app, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    write_fixtures(workspace)
    write_layer(workspace / "points_3857.parquet", [Point(0, 0)], "EPSG:3857", pid=["Q"])
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
    app.run(
        "count_in_polygons",
        {"input_path": "zones.parquet", "points_path": "points_3857.parquet", "output_path": "c.parquet"},
    )
    passed, duckdb = manifest(workspace / "c.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "sedonadb"
    assert passed["reason"].startswith("input_path is in EPSG:32610 and points_path in EPSG:3857")
    assert duckdb["engine"] == "duckdb"  # DuckDB too matches only layers in one CRS
    assert duckdb["reason"].startswith("input_path is in EPSG:32610 and points_path in EPSG:3857")


def test_missing_sedonadb_is_passed_over_not_an_error(make_app, workspace: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mapsmith_opensource import sedonadb_ops

    monkeypatch.setattr(sedonadb_ops, "SEDONADB_MODULES", {"sedonadb_absent_for_test": "sedonadb"})
    write_fixtures(workspace)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
    result = app.run("count_in_polygons", {**CASES["count_in_polygons"][0][1], "output_path": "c.parquet"})
    assert result.engine["name"] == "geopandas"
    passed = manifest(workspace / "c.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed == [
        {
            "engine": "sedonadb",
            "reason": f"SedonaDB is not installed here (missing: sedonadb); fix: {install_command('sedona')}",
        },
        {
            "engine": "duckdb",
            "reason": "points_path has 5 features, fewer than the 1,000,000 from which DuckDB is preferred to "
            "GeoPandas (DUCKDB_POINTS_MIN_ROWS, measured)",
        },
    ]


@pytest.mark.parametrize(("threshold", "engine"), [(5, "duckdb"), (6, "geopandas")])
def test_duckdb_takes_points_in_polygons_from_its_threshold_where_sedonadb_does_not(
    make_app, workspace: Path, monkeypatch, threshold: int, engine: str
) -> None:  # type: ignore[no-untyped-def]
    """The fixture's 5 points, SedonaDB's threshold out of reach: DuckDB runs once its threshold is 5 (preferred to
    GeoPandas from DUCKDB_POINTS_MIN_ROWS), GeoPandas at 6 with DuckDB's reason recorded; the hand counts either way."""
    from mapsmith_opensource.join_ops import points_in_polygons_duckdb

    monkeypatch.setattr(points_in_polygons_duckdb, "DUCKDB_POINTS_MIN_ROWS", threshold)
    write_fixtures(workspace)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES=str(10**12))
    result = app.run("count_in_polygons", {**CASES["count_in_polygons"][0][1], "output_path": "c.parquet"})
    assert result.engine["name"] == engine
    passed = {
        p["engine"]: p["reason"] for p in manifest(workspace / "c.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    }
    if engine == "geopandas":
        assert passed["duckdb"].startswith(
            "points_path has 5 features, fewer than the 6 from which DuckDB is preferred"
        )
    else:
        assert "duckdb" not in passed
    _count(read(workspace / "c.parquet"), result.answer)  # the hand counts: [2, 3, 0], P2 in two zones


def test_a_threshold_that_is_not_a_number_is_refused(make_app, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    from mapsmith.errors import MapSmithError
    from mapsmith_opensource import sedonadb_ops

    if sedonadb_ops.missing_modules():
        pytest.skip("the threshold is read only where SedonaDB is installed")
    write_fixtures(workspace)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="lots")
    with pytest.raises(MapSmithError) as caught:
        app.run("count_in_polygons", {**CASES["count_in_polygons"][0][1], "output_path": "c.parquet"})
    assert caught.value.code == "SEDONADB_MIN_FEATURES_INVALID"
    assert caught.value.evidence == {"variable": "MAPSMITH_SEDONADB_MIN_FEATURES", "value": "lots"}
