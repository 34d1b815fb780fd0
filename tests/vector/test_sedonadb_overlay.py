"""dissolve_layer and overlay_layers (intersection) on SedonaDB: the manifest says SedonaDB ran and why, or
why it was passed over, and the geometry is GEOS's (the GeoPandas engine's vertices), worked out by hand on a
local metre grid in EPSG:32610. test_engine_parity.py runs every registered engine of both against GeoPandas.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, box

from layers import manifest, read, write_layer
from mapsmith._compat import install_command

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"

sedonadb_only = pytest.mark.skipif(
    bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
    reason="SedonaDB not installed",
)


def grid_box(x1: float, y1: float, x2: float, y2: float) -> Any:
    return box(X0 + x1, Y0 + y1, X0 + x2, Y0 + y2)


def _squares(ws: Path, crs: Any = UTM) -> None:
    # Two adjacent 100 m squares in group A (value 1 and 2), one square far off in B (value 4, null name).
    write_layer(
        ws / "squares.parquet",
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), grid_box(500, 500, 600, 600)],
        crs,
        grp=["A", "A", "B"],
        value=[1, 2, 4],
        name=["x", "y", None],
    )


@sedonadb_only
def test_adjacent_squares_dissolve_on_sedonadb_with_geos_vertices(make_app: Any, workspace: Path) -> None:
    from mapsmith_opensource import sedonadb_overlay

    _squares(workspace)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="3")
    result = app.run(
        "dissolve_layer",
        {"input_path": "squares.parquet", "by_fields": "grp", "aggregations": "value:sum", "output_path": "d.parquet"},
    )
    assert result.engine["name"] == "sedonadb"
    record = manifest(workspace / "d.parquet")
    assert record["x-mapsmith:engine_choice"] == {"stack": "opensource", "engine": "sedonadb"}
    assert record["engine"]["version"] == importlib.import_module("sedonadb").__version__
    why = [n for n in record["notes"] if n.startswith("engine: SedonaDB ran")]
    assert why and "it has 3 features, at least the 3 from which" in why[0]
    assert sedonadb_overlay.DISSOLVE_PATH_NOTE in record["notes"]
    assert any(sedonadb_overlay.UNION_LABEL in n for n in record["notes"])

    out = read(workspace / "d.parquet")
    assert out["grp"].tolist() == ["A", "B"] and out["value"].tolist() == [3, 4]
    a, b = out.geometry.values
    # A: 200 m x 100 m, one ring and no hole (no interior edge). GEOS's unary union keeps the two nodes
    # where the squares met, (100, 0) and (100, 100): 6 vertices + closing (ST_Union_Agg would give 4 + 1).
    assert a.geom_type == "Polygon" and len(a.interiors) == 0
    assert a.area == pytest.approx(20_000.0, abs=1e-6)
    ring = [(round(x - X0, 6), round(y - Y0, 6)) for x, y in a.exterior.coords]
    assert len(ring) == 7 and ring[0] == ring[-1]
    assert set(ring) == {(0, 0), (100, 0), (200, 0), (200, 100), (100, 100), (0, 100)}
    assert b.geom_type == "Polygon" and b.area == pytest.approx(10_000.0, abs=1e-6)


@sedonadb_only
def test_whole_layer_and_crossing_lines_equal_geopandas(make_app: Any, workspace: Path, monkeypatch: Any) -> None:
    import shapely

    _squares(workspace)
    # Two lines crossing at (50, 50) and one null geometry: GEOS splits the lines at the crossing, 4 parts.
    write_layer(
        workspace / "lines.parquet",
        [LineString([(X0, Y0), (X0 + 100, Y0 + 100)]), LineString([(X0, Y0 + 100), (X0 + 100, Y0)]), None],
        UTM,
        lid=[1, 2, 3],
    )
    sedona, geopandas = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0"), make_app()
    for source, arguments in (
        ("squares", {"aggregations": "value:mean,name:first"}),
        ("lines", {"aggregations": "lid:count"}),
    ):
        outs = {}
        for label, app, engine in (("s", sedona, "sedonadb"), ("g", geopandas, "geopandas")):
            name = f"{source}_{label}.parquet"
            result = app.run("dissolve_layer", {"input_path": f"{source}.parquet", **arguments, "output_path": name})
            assert result.engine["name"] == engine
            outs[label] = read(workspace / name)
        got, ref = outs["s"], outs["g"]
        assert list(got.columns) == list(ref.columns) and len(got) == 1
        for column in (c for c in ref.columns if c != "geometry"):
            assert got[column].dtype == ref[column].dtype and got[column].tolist() == ref[column].tolist()
        assert bool(shapely.equals_exact(got.geometry.values, ref.geometry.values, tolerance=0).all())
    assert outs["s"]["lid"].tolist() == [3]  # count over the 3 features, the null geometry included
    lines = outs["s"].geometry.values[0]
    assert lines.geom_type == "MultiLineString" and shapely.get_num_geometries(lines) == 4
    assert lines.length == pytest.approx(2 * 100 * 2**0.5, abs=1e-6)


@sedonadb_only
def test_small_layer_passes_over_sedonadb_with_the_threshold(make_app: Any, workspace: Path) -> None:
    from mapsmith_opensource import sedonadb_ops

    _squares(workspace)
    result = make_app().run("dissolve_layer", {"input_path": "squares.parquet", "output_path": "d.parquet"})
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "d.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed == {
        "engine": "sedonadb",
        "reason": "SedonaDB's dissolve was never measured faster than DuckDB or GeoPandas "
        "(benchmarks/bench_scale.py), so it runs only when MAPSMITH_SEDONADB_MIN_FEATURES sets a threshold",
    }
    assert sedonadb_ops.DISSOLVE_MIN_FEATURES is None


@sedonadb_only
def test_unknown_crs_is_a_reason_to_pass_over_sedonadb() -> None:
    # The runner refuses a dissolve without a CRS before any engine is chosen (CRS_REQUIRED), so the
    # eligibility rule is checked on its own, with the header of a layer that declares none.
    from types import SimpleNamespace

    from mapsmith_opensource import sedonadb_overlay

    ctx = SimpleNamespace(
        inputs={"input_path": SimpleNamespace(crs_wkt=None, feature_count=3)}, environ={}, arguments={}
    )
    assert sedonadb_overlay.dissolve_layer_eligible(ctx) == (  # type: ignore[arg-type]
        "the CRS of input_path is unknown; the SedonaDB engine dissolves only layers whose CRS is known"
    )


def test_missing_sedonadb_passes_over_dissolve(make_app: Any, workspace: Path, monkeypatch: Any) -> None:
    from mapsmith_opensource import sedonadb_ops

    monkeypatch.setattr(sedonadb_ops, "SEDONADB_MODULES", {"sedonadb_absent_for_test": "sedonadb"})
    _squares(workspace)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
    result = app.run("dissolve_layer", {"input_path": "squares.parquet", "output_path": "d.parquet"})
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "d.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed == {
        "engine": "sedonadb",
        "reason": f"SedonaDB is not installed here (missing: sedonadb); fix: {install_command('sedona')}",
    }


# -- overlay_layers, intersection ---------------------------------------------------------------


@sedonadb_only
def test_overlay_intersection_on_sedonadb_is_geopandas_piece_for_piece(make_app: Any, workspace: Path) -> None:
    """Two adjacent 100 m squares (x 0..100 and 100..200) cut by a strip x 75..125 across both: two 25 x 100 m
    pieces (2,500 m2 each), in input order, both layers' `name` suffixed _1/_2; then a seeded scatter compared
    with GeoPandas row by row."""
    import numpy as np
    import shapely

    _squares(workspace)
    # in GeoPackage, so that the WKB path runs (GeoParquet layers take the file-to-file path:
    # test_sedonadb_overlay_files.py)
    write_layer(workspace / "strip.gpkg", [grid_box(75, -10, 125, 110)], UTM, name=["strip"], cut=[7])
    sedona, geopandas = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0"), make_app()
    args = {"input_path": "squares.parquet", "overlay_path": "strip.gpkg", "how": "intersection"}
    result = sedona.run("overlay_layers", {**args, "output_path": "cut.parquet"})
    assert result.engine["name"] == "sedonadb"
    out = read(workspace / "cut.parquet")
    assert list(out.columns) == ["grp", "value", "name_1", "name_2", "cut", "geometry"]
    assert list(out["name_1"]) == ["x", "y"] and list(out["name_2"]) == ["strip", "strip"]
    assert list(out.geometry.area) == [pytest.approx(2500.0), pytest.approx(2500.0)]
    record = manifest(workspace / "cut.parquet")
    assert any("SedonaDB also computed each pair's intersection" in n for n in record["notes"])

    rng = np.random.default_rng(20261130)
    centres = rng.uniform(0, 1000, (60, 2))
    blobs = [
        shapely.buffer(shapely.Point(X0 + x, Y0 + y), r)
        for (x, y), r in zip(centres, rng.uniform(20, 90, 60), strict=True)
    ]
    write_layer(workspace / "a.parquet", blobs[:30], UTM, k=list(range(30)))
    write_layer(workspace / "b.gpkg", blobs[30:], UTM, k=list(range(30, 60)))
    scatter = {"input_path": "a.parquet", "overlay_path": "b.gpkg", "how": "intersection"}
    sedona.run("overlay_layers", {**scatter, "output_path": "s_sdb.parquet"})
    geopandas.run("overlay_layers", {**scatter, "output_path": "s_gpd.parquet"})
    got, ref = read(workspace / "s_sdb.parquet"), read(workspace / "s_gpd.parquet")
    assert len(ref) > 5, "the scatter must overlap somewhere"
    assert list(got.columns) == list(ref.columns)
    assert list(got["k_1"]) == list(ref["k_1"]) and list(got["k_2"]) == list(ref["k_2"])
    assert bool(shapely.equals_exact(got.geometry.values, ref.geometry.values, tolerance=0).all())


@sedonadb_only
def test_other_overlay_modes_and_default_sizes_pass_over_sedonadb(make_app: Any, workspace: Path) -> None:
    _squares(workspace)
    write_layer(workspace / "strip.parquet", [grid_box(75, -10, 125, 110)], UTM, cut=[7])
    args = {"input_path": "squares.parquet", "overlay_path": "strip.parquet"}
    make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0").run(
        "overlay_layers", {**args, "how": "union", "output_path": "u.parquet"}
    )
    (passed,) = manifest(workspace / "u.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "sedonadb" and passed["reason"].startswith("how='union': SedonaDB's overlay engine")
    make_app().run("overlay_layers", {**args, "how": "intersection", "output_path": "i.parquet"})
    (passed,) = manifest(workspace / "i.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["reason"].startswith(
        "the larger input has 3 features, fewer than the 30,000 from which SedonaDB's overlay file to file is "
        "considered"
    )
    # a layer in GeoPackage: the WKB path, whose threshold is its own
    write_layer(workspace / "strip.gpkg", [grid_box(75, -10, 125, 110)], UTM, cut=[7])
    wkb = {**args, "overlay_path": "strip.gpkg", "how": "intersection", "output_path": "w.parquet"}
    make_app().run("overlay_layers", wkb)
    (passed,) = manifest(workspace / "w.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["reason"].startswith(
        "the larger input has 3 features, fewer than the 100,000 from which SedonaDB's overlay is considered"
    )


def test_an_intersection_overlay_from_the_measured_size_runs_on_sedonadb(
    make_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clean twin of the size refusal above: at the threshold (lowered to the case's 3 squares, as 100,000
    features would be) the router takes SedonaDB with no engine named, and says why."""
    from mapsmith_opensource import sedonadb_overlay

    monkeypatch.setattr(sedonadb_overlay, "OVERLAY_FILE_MIN_FEATURES", 3)
    monkeypatch.setattr(sedonadb_overlay, "OVERLAY_MIN_FEATURES", 2)
    _squares(workspace)
    write_layer(workspace / "strip.parquet", [grid_box(75, -10, 125, 110)], UTM, cut=[7])
    args = {"input_path": "squares.parquet", "overlay_path": "strip.parquet", "how": "intersection"}
    result = make_app().run("overlay_layers", {**args, "output_path": "i4.parquet"})
    assert result.engine["name"] == "sedonadb"
    notes = manifest(workspace / "i4.parquet")["notes"]
    assert any("the larger input has 3 features, at least the 3 from which it is preferred" in n for n in notes)
    assert any(n.startswith("engine path: file to file") for n in notes)
    # the WKB path (a layer in GeoPackage) with its own threshold
    write_layer(workspace / "strip.gpkg", [grid_box(75, -10, 125, 110)], UTM, cut=[7])
    result = make_app().run("overlay_layers", {**args, "overlay_path": "strip.gpkg", "output_path": "w4.parquet"})
    assert result.engine["name"] == "sedonadb"
    notes = manifest(workspace / "w4.parquet")["notes"]
    assert any("the larger input has 3 features, at least the 2 from which it is preferred" in n for n in notes)
