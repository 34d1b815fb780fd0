"""A layer read from a GeoPackage and the result added to the same GeoPackage as another layer; the
provenance of one layer of a container, asked for by name. Values worked out by hand."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point

from layers import read, write_layer
from mapsmith.errors import MapSmithError

# A 100 m line buffered by 10 m with 16 segments a quarter circle: a 20 x 100 m body and two round caps
# that together make the 64-gon inscribed in a circle of radius 10 (32 r^2 sin(2 pi / 64)).
BODY = 20 * 100
CAPS = 32 * 100 * 0.0980171403295606


def _rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return list(db.execute(f'SELECT * FROM "{table}" ORDER BY rowid'))


# Near British National Grid's central meridian (E 400 km), where its scale (0.9996) is within buffer_layer's
# 0.1 % tolerance: buffers are drawn in the grid itself, so their areas are the hand-worked ones exactly.
E, N = 400_000, 100_000


def _city(ws: Path) -> Path:
    """city.gpkg: roads (two 100 m lines) and sites (three points), British National Grid."""
    path = ws / "city.gpkg"
    roads = [LineString([(E, N), (E + 100, N)]), LineString([(E, N + 50), (E, N + 150)])]
    write_layer(path, roads, "EPSG:27700", "roads", ref=["A1", "B2"])
    sites = [Point(E + 10, N + 10), Point(E + 20, N + 20), Point(E + 30, N + 30)]
    write_layer(path, sites, "EPSG:27700", "sites", name=["x", "y", "z"])
    return path


def test_one_layer_is_read_and_the_result_added_to_the_same_container(app: Any, workspace: Path) -> None:
    import pyogrio

    path = _city(workspace)
    roads, sites = _rows(path, "roads"), _rows(path, "sites")
    result = app.run(
        "buffer_layer",
        {
            "input_path": "city.gpkg",
            "layer": "roads",
            "distance_meters": 10,
            "output_path": "city.gpkg",
            "output_layer": "roads_10m",
        },
    )
    assert [str(n) for n, _ in pyogrio.list_layers(path)] == ["roads", "sites", "roads_10m"]
    assert _rows(path, "roads") == roads and _rows(path, "sites") == sites
    buffered = read(path, "roads_10m")
    assert list(buffered["ref"]) == ["A1", "B2"]
    assert list(buffered.geometry.area) == pytest.approx([BODY + CAPS] * 2, rel=1e-9)
    warning = next(w for w in result.warnings if w["code"] == "INPUT_CONTAINER_UPDATED")
    assert "input_path" in warning["message"] and "another .gpkg" in warning["hint"]
    # the layer's own record names the layer it read
    provenance = app.get_provenance("city.gpkg", layer="roads_10m")
    assert provenance["output_matches"] is True
    assert provenance["manifest"]["output"]["layer"] == "roads_10m"
    (read_input,) = provenance["manifest"]["inputs"]
    assert (read_input["path"], read_input["layer"]) == ("city.gpkg", "roads")
    # the walk back finds buffer_layer, and says honestly that the container's bytes then are gone
    lineage = app.get_lineage("city.gpkg", layer="roads_10m")
    assert [h["operation"] for h in lineage["hops"]] == ["buffer_layer"]
    (original,) = lineage["originals"]
    assert (original["layer"], original["status"]) == ("roads", "changed")


def test_writing_over_the_layer_that_is_read_is_refused(app: Any, workspace: Path) -> None:
    path = _city(workspace)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    args = {"input_path": "city.gpkg", "layer": "roads", "distance_meters": 10, "output_path": "city.gpkg"}
    with pytest.raises(MapSmithError) as same:
        app.run("buffer_layer", {**args, "output_layer": "roads", "overwrite": True})
    assert same.value.code == "OUTPUT_IS_INPUT"
    with pytest.raises(MapSmithError) as whole:  # no output_layer: the whole file would be replaced
        app.run("buffer_layer", {**args, "overwrite": True})
    assert whole.value.code == "OUTPUT_IS_INPUT"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_an_unnamed_layer_counts_as_every_layer_of_the_file(app: Any, workspace: Path) -> None:
    import pyogrio

    wells = write_layer(workspace / "wells.gpkg", [Point(E + 500, N + 500)], "EPSG:27700", "wells", well=[7])
    base = {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "wells.gpkg"}
    with pytest.raises(MapSmithError) as same:  # the one layer read is the one named for the output
        app.run("buffer_layer", {**base, "output_layer": "wells", "overwrite": True})
    assert same.value.code == "OUTPUT_IS_INPUT"
    app.run("buffer_layer", {**base, "output_layer": "wells_10m"})  # the clean twin: a new layer
    assert [str(n) for n, _ in pyogrio.list_layers(wells)] == ["wells", "wells_10m"]
    assert read(wells, "wells_10m").geometry.area.iloc[0] == pytest.approx(CAPS, rel=1e-9)


def test_provenance_of_a_container_asks_for_the_layer(app: Any, workspace: Path) -> None:
    _city(workspace)
    app.run(
        "buffer_layer",
        {
            "input_path": "city.gpkg",
            "layer": "sites",
            "distance_meters": 10,
            "output_path": "out.gpkg",
            "output_layer": "a",
        },
    )
    app.run(
        "buffer_layer",
        {
            "input_path": "city.gpkg",
            "layer": "roads",
            "distance_meters": 10,
            "output_path": "out.gpkg",
            "output_layer": "b",
        },
    )
    with pytest.raises(MapSmithError) as unnamed:
        app.get_provenance("out.gpkg")
    assert unnamed.value.code == "LAYER_REQUIRED"
    assert unnamed.value.evidence["layers_with_manifests"] == ["a", "b"]
    assert "layer" in unnamed.value.hint
    assert app.get_provenance("out.gpkg", layer="a")["manifest"]["operation"] == "buffer_layer"
    with pytest.raises(MapSmithError) as traversal:
        app.get_provenance("out.gpkg", layer="../a")
    assert traversal.value.code == "INVALID_ARGUMENT"
    with pytest.raises(MapSmithError) as absent:
        app.get_provenance("out.gpkg", layer="c")
    assert absent.value.code == "NO_MANIFEST"
    # the clean twin: a single-dataset file needs no layer
    app.run(
        "buffer_layer", {"input_path": "city.gpkg", "layer": "sites", "distance_meters": 10, "output_path": "s.gpkg"}
    )
    assert app.get_provenance("s.gpkg")["output_matches"] is True
