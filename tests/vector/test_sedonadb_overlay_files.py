"""overlay_layers(how='intersection') on SedonaDB file to file (mapsmith_opensource.sedonadb_overlay_files): the pieces,
their order, fields, counts and refusals are the GeoPandas engine's, worked out by hand on a local metre grid in
EPSG:32610 (100 m squares), then compared with the GeoPandas engine's file on a seeded scatter."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import MultiPolygon, Polygon, box

from layers import manifest, read, write_layer
from mapsmith.errors import MapSmithError

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
SEDONADB = {"MAPSMITH_SEDONADB_MIN_FEATURES": "0"}

pytestmark = pytest.mark.skipif(
    bool(importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()),
    reason="SedonaDB not installed",
)


def grid_box(x1: float, y1: float, x2: float, y2: float) -> Any:
    return box(X0 + x1, Y0 + y1, X0 + x2, Y0 + y2)


def _squares(ws: Path, name: str = "squares.parquet") -> None:
    """Square 0 (x 0..100), square 1 (x 100..200), a feature without geometry, square 3 far off (x 500..600)."""
    write_layer(
        ws / name,
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), None, grid_box(500, 500, 600, 600)],
        UTM,
        grp=["A", "A", "C", "B"],
        value=[1, 2, 3, 4],
        name=["x", "y", "z", None],
    )


def _cutters(ws: Path, name: str = "cutters.parquet") -> None:
    """Feature 0: a strip x 75..125 across both squares; feature 1: a strip x -10..25 over square 0 only;
    feature 2: a square x 200..300 touching square 1 along its east edge (a line, no area)."""
    write_layer(
        ws / name,
        [grid_box(75, -10, 125, 110), grid_box(-10, -10, 25, 110), grid_box(200, 0, 300, 100)],
        UTM,
        name=["strip", "west", "touch"],
        cut=[7, 9, 8],
    )


def record_geo(path: Path) -> dict[str, Any]:
    """The output's GeoParquet column metadata, as written in its footer."""
    import json

    import pyarrow.parquet as pq

    geo = json.loads(pq.read_schema(path).metadata[b"geo"])
    return dict(geo["columns"][geo["primary_column"]])


ARGS = {"input_path": "squares.parquet", "overlay_path": "cutters.parquet", "how": "intersection"}


def test_pieces_in_input_then_overlay_order_with_the_touching_pair_counted(make_app: Any, workspace: Path) -> None:
    """Pairs (square, cutter): (0, strip) 25 x 100 m, (0, west) 25 x 100 m, (1, strip) 25 x 100 m, each 2,500 m2,
    written in that order (input row, then overlay row); (1, touch) is a line: a piece without area and one
    lower-dimension fragment; the feature without geometry takes no part, and `name` is suffixed _1/_2."""
    from mapsmith_opensource import sedonadb_overlay_files

    _squares(workspace)
    _cutters(workspace)
    result = make_app(**SEDONADB).run("overlay_layers", {**ARGS, "output_path": "cut.parquet"})
    assert result.engine["name"] == "sedonadb"
    out = read(workspace / "cut.parquet")
    assert list(out.columns) == ["grp", "value", "name_1", "name_2", "cut", "geometry"]
    assert list(out["value"]) == [1, 1, 2]
    assert list(out["cut"]) == [7, 9, 7]
    assert list(out["name_2"]) == ["strip", "west", "strip"]
    assert list(out.geometry.area) == [pytest.approx(2500.0)] * 3
    assert out.geometry.values[0].equals(grid_box(75, 0, 100, 100))
    assert out.crs.to_epsg() == 32610
    assert result.answer == {
        "how": "intersection",
        "feature_count": 3,
        "lower_dimension_fragments_dropped": 1,
        "pieces_without_area_dropped": 1,
        "renamed_fields": {"name": ["name_1", "name_2"]},
        "input_features_without_geometry": {"input_path": 1},
    }
    record = manifest(workspace / "cut.parquet")
    assert sedonadb_overlay_files.PATH_NOTE in record["notes"]
    column = record_geo(workspace / "cut.parquet")
    assert column["geometry_types"] == ["Polygon"]
    assert column["bbox"] == [X0, Y0, X0 + 125, Y0 + 100]
    kept = "gave 4 pieces; MapSmith kept the polygonal part of each: 3 written, 1 had no area"
    assert any(kept in n for n in record["notes"])
    assert "input_path: 1 features have no geometry (null or empty) and take no part in the overlay" in record["notes"]


def test_the_file_path_writes_the_geopandas_engine_s_file(make_app: Any, workspace: Path) -> None:
    """The same run on the GeoPandas engine: the same fields and types, values, answer, and geometries to the bit."""
    import pyarrow.parquet as pq
    import shapely

    _squares(workspace)
    _cutters(workspace)
    sedona = make_app(**SEDONADB).run("overlay_layers", {**ARGS, "output_path": "s.parquet"})
    geopandas = make_app().run("overlay_layers", {**ARGS, "output_path": "g.parquet"})
    assert geopandas.engine["name"] == "geopandas"
    assert sedona.answer == geopandas.answer
    got, ref = read(workspace / "s.parquet"), read(workspace / "g.parquet")
    assert got.drop(columns="geometry").equals(ref.drop(columns="geometry"))
    assert bool(shapely.equals_exact(got.geometry.values, ref.geometry.values, tolerance=0).all())
    assert list(shapely.to_wkb(got.geometry.values)) == list(shapely.to_wkb(ref.geometry.values))
    assert [f.name for f in pq.read_schema(workspace / "s.parquet")] == [
        f.name for f in pq.read_schema(workspace / "g.parquet")
    ]


def test_a_seeded_scatter_matches_geopandas_piece_for_piece(make_app: Any, workspace: Path) -> None:
    import numpy as np
    import shapely

    rng = np.random.default_rng(20261206)
    centres = rng.uniform(0, 1000, (80, 2))
    blobs = [
        shapely.buffer(shapely.Point(X0 + x, Y0 + y), r)
        for (x, y), r in zip(centres, rng.uniform(20, 120, 80), strict=True)
    ]
    write_layer(workspace / "a.parquet", blobs[:40], UTM, k=list(range(40)), label=[f"a{i}" for i in range(40)])
    write_layer(workspace / "b.parquet", blobs[40:], UTM, k=list(range(40, 80)), w=[i / 4 for i in range(40)])
    args = {"input_path": "a.parquet", "overlay_path": "b.parquet", "how": "intersection"}
    sedona = make_app(**SEDONADB).run("overlay_layers", {**args, "output_path": "s.parquet"})
    make_app().run("overlay_layers", {**args, "output_path": "g.parquet"})
    assert any("engine path: file to file" in n for n in manifest(workspace / "s.parquet")["notes"])
    got, ref = read(workspace / "s.parquet"), read(workspace / "g.parquet")
    assert len(ref) > 10, "the scatter must overlap somewhere"
    assert sedona.answer["feature_count"] == len(ref)
    assert got.drop(columns="geometry").equals(ref.drop(columns="geometry"))
    assert bool(shapely.equals_exact(got.geometry.values, ref.geometry.values, tolerance=0).all())


def test_a_cut_that_is_a_collection_keeps_its_polygon_and_counts_its_line(make_app: Any, workspace: Path) -> None:
    """Square 0 (x 0..100, y 0..100) against one cutter of two parts: x 50..150 by y 0..50 overlaps it (a
    50 x 50 m piece, 2,500 m2), x 0..20 by y 100..120 touches its north edge (a 20 m line): the cut is a
    collection, its polygon written and its line counted as one fragment; the piece has area, so none is
    without."""
    write_layer(workspace / "one.parquet", [grid_box(0, 0, 100, 100)], UTM, value=[1])
    two = MultiPolygon([grid_box(50, 0, 150, 50), grid_box(0, 100, 20, 120)])
    write_layer(workspace / "two.parquet", [two], UTM, cut=[5])
    args = {"input_path": "one.parquet", "overlay_path": "two.parquet", "how": "intersection"}
    result = make_app(**SEDONADB).run("overlay_layers", {**args, "output_path": "c.parquet"})
    assert any("engine path: file to file" in n for n in manifest(workspace / "c.parquet")["notes"])
    assert result.answer["feature_count"] == 1
    assert result.answer["lower_dimension_fragments_dropped"] == 1
    assert result.answer["pieces_without_area_dropped"] == 0
    (piece,) = read(workspace / "c.parquet").geometry.values
    assert piece.equals(grid_box(50, 0, 100, 50)) and piece.area == pytest.approx(2500.0)
    # the footer's extent and types are the treated piece's (no piece was written as cut)
    column = record_geo(workspace / "c.parquet")
    assert column["geometry_types"] == ["Polygon"]
    assert column["bbox"] == [X0 + 50, Y0, X0 + 100, Y0 + 50]


def test_an_invalid_input_is_refused_as_the_geopandas_engine_refuses_it(make_app: Any, workspace: Path) -> None:
    """A bow-tie (self-crossing ring) as square 1: refused with INPUT_GEOMETRY_INVALID naming row 1, the same
    error the GeoPandas engine gives; nothing is written. The clean twin is the first test above."""
    bowtie = Polygon([(X0 + 100, Y0), (X0 + 200, Y0 + 100), (X0 + 200, Y0), (X0 + 100, Y0 + 100)])
    write_layer(workspace / "squares.parquet", [grid_box(0, 0, 100, 100), bowtie], UTM, value=[1, 2])
    _cutters(workspace)
    errors = []
    for env, out in ((SEDONADB, "s.parquet"), ({}, "g.parquet")):
        with pytest.raises(MapSmithError) as raised:
            make_app(**env).run("overlay_layers", {**ARGS, "output_path": out})
        errors.append(raised.value)
        assert not (workspace / out).exists()
    assert errors[0].code == errors[1].code == "INPUT_GEOMETRY_INVALID"
    assert errors[0].evidence == errors[1].evidence
    assert errors[0].evidence["first_rows"] == [1] and errors[0].evidence["invalid_count"] == 1
    assert str(errors[0]) == str(errors[1])


def test_a_layer_not_in_geoparquet_takes_the_wkb_path_and_says_why(make_app: Any, workspace: Path) -> None:
    _squares(workspace)
    _cutters(workspace, "cutters.gpkg")
    result = make_app(**SEDONADB).run(
        "overlay_layers", {**ARGS, "overlay_path": "cutters.gpkg", "output_path": "w.parquet"}
    )
    assert result.engine["name"] == "sedonadb"
    notes = manifest(workspace / "w.parquet")["notes"]
    assert "engine path: WKB -- the file-to-file path was not taken: overlay_path is not one GeoParquet file" in notes
    assert list(read(workspace / "w.parquet")["cut"]) == [7, 9, 7]


def test_a_derived_field_sends_the_run_to_the_wkb_path_which_measures_it_again(make_app: Any, workspace: Path) -> None:
    """Square 0's area_m2 as measure_area wrote it (geodesic: on UTM 10N's central meridian a grid metre is
    1 / 0.9996 m, so 10,000 / 0.9996^2 m2); cut by the west strip (x -10..25) the piece is 25 x 100 grid metres,
    2,500 / 0.9996^2 = 2,502.0 m2, which the GeoPandas engine's code measures again on the WKB path the run takes,
    saying why (the file-to-file path carries fields unchanged)."""
    write_layer(workspace / "raw.parquet", [grid_box(0, 0, 100, 100)], UTM, value=[1])
    app = make_app(**SEDONADB)
    app.run("measure_area", {"input_path": "raw.parquet", "output_path": "measured.parquet"})
    write_layer(workspace / "west.parquet", [grid_box(-10, -10, 25, 110)], UTM, cut=[9])
    args = {"input_path": "measured.parquet", "overlay_path": "west.parquet", "how": "intersection"}
    result = app.run("overlay_layers", {**args, "output_path": "m.parquet"})
    assert result.engine["name"] == "sedonadb"
    notes = manifest(workspace / "m.parquet")["notes"]
    assert any(
        n.startswith(
            "engine path: WKB -- the file-to-file path was not taken: the inputs carry derived fields (area_m2)"
        )
        for n in notes
    )
    (area,) = read(workspace / "m.parquet")["area_m2"]
    assert area == pytest.approx(2500 / 0.9996**2, rel=1e-4)


def test_layers_that_do_not_meet_give_an_empty_layer_as_geopandas_does(make_app: Any, workspace: Path) -> None:
    """Two squares whose geometry column is named `geom`, against a square 4,900 m east of them: no pair, so an
    empty layer with the fields v and c and a geometry column named `geometry`, as the GeoPandas engine writes."""
    import geopandas as gpd

    squares = gpd.GeoDataFrame(
        {"v": [1, 2]}, geometry=[grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100)], crs=UTM
    ).rename_geometry("geom")
    squares.to_parquet(workspace / "geom.parquet")
    write_layer(workspace / "far.parquet", [grid_box(5000, 0, 5100, 100)], UTM, c=[1])
    args = {"input_path": "geom.parquet", "overlay_path": "far.parquet", "how": "intersection"}
    sedona = make_app(**SEDONADB).run("overlay_layers", {**args, "output_path": "s.parquet"})
    geopandas = make_app().run("overlay_layers", {**args, "output_path": "g.parquet"})
    assert any(n.startswith("engine path: file to file") for n in manifest(workspace / "s.parquet")["notes"])
    assert sedona.answer == geopandas.answer
    assert sedona.answer["feature_count"] == 0
    got, ref = read(workspace / "s.parquet"), read(workspace / "g.parquet")
    assert list(got.columns) == list(ref.columns) == ["v", "c", "geometry"]
    assert len(got) == len(ref) == 0
