"""Layers of a GeoPackage as deliverables: added atomically, the others kept row for row, refused on a
name clash unless overwrite, and a second dataset's layer named with <role>_layer. Values by hand."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point, box

from layers import read, write_layer
from mapsmith.errors import MapSmithError

SPEC_SCHEMA = Path(__file__).resolve().parents[3] / "shared" / "manifest-spec" / "schema" / "manifest-v1.schema.json"
# A 64-gon inscribed in a circle of radius r (16 segments a quarter circle): 32 r^2 sin(2 pi / 64).
AREA_R10 = 313.6548490545939  # 32 * 100 * 0.0980171403295606
AREA_R20 = 4 * AREA_R10


def _stored_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    """The test's own reading of one layer: every stored row as SQLite holds it (geometry blobs as bytes)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return list(db.execute(f'SELECT * FROM "{table}" ORDER BY rowid'))


def _deliverable(ws: Path) -> Path:
    """deliver.gpkg: roads (2 lines) and sites (3 points), British National Grid."""
    path = ws / "deliver.gpkg"
    lines = [LineString([(0, 0), (100, 0)]), LineString([(0, 50), (0, 150)])]
    write_layer(path, lines, "EPSG:27700", "roads", ref=["A1", "B2"])
    write_layer(path, [Point(10, 10), Point(20, 20), Point(30, 30)], "EPSG:27700", "sites", name=["x", "y", "é"])
    # Near the grid's central meridian (E 400 km), where its scale (0.9996) is within buffer_layer's 0.1 %
    # tolerance: the buffer is drawn in the grid itself, so its area is the 64-gon's exactly.
    write_layer(ws / "wells.gpkg", [Point(400_500, 100_500)], "EPSG:27700", well=[7])
    return path


def _manifest(ws: Path, container: str, layer: str) -> dict[str, Any]:
    return json.loads((ws / f"{container}.{layer}.provenance.json").read_text("utf-8"))


def test_a_third_layer_is_added_and_the_two_others_read_back_identical(app: Any, workspace: Path) -> None:
    import jsonschema

    from mapsmith.provenance.digests import dataset_digest

    path = _deliverable(workspace)
    roads, sites = _stored_rows(path, "roads"), _stored_rows(path, "sites")
    result = app.run(
        "buffer_layer",
        {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "deliver.gpkg", "output_layer": "wells_10m"},
    )
    import pyogrio

    assert [str(n) for n, _ in pyogrio.list_layers(path)] == ["roads", "sites", "wells_10m"]
    assert _stored_rows(path, "roads") == roads and _stored_rows(path, "sites") == sites
    added = read(path, "wells_10m")
    assert list(added["well"]) == [7] and added.crs.to_epsg() == 27700
    assert added.geometry.iloc[0].area == pytest.approx(AREA_R10, rel=1e-9)
    assert result.manifest_path == "deliver.gpkg.wells_10m.provenance.json"
    record = _manifest(workspace, "deliver.gpkg", "wells_10m")
    assert record["output"]["layer"] == "wells_10m" and record["output"]["path"] == "deliver.gpkg"
    assert record["output"]["sha256"] == dataset_digest(path)
    jsonschema.validate(record, json.loads(SPEC_SCHEMA.read_text("utf-8")))
    checks = {c["name"]: c for c in record["verification"]}
    intact = checks["x-mapsmith:container_layers_intact"]
    assert intact["passed"] and "['roads', 'sites']" in intact["detail"]
    assert checks["x-mapsmith:container_layer_written"]["passed"]
    # nothing MapSmith made is left beside the container
    assert sorted(p.name for p in workspace.iterdir()) == [
        "deliver.gpkg",
        "deliver.gpkg.wells_10m.provenance.json",
        "wells.gpkg",
    ]


def test_a_layer_name_that_exists_is_refused_and_overwrite_replaces_that_layer_alone(app: Any, workspace: Path) -> None:
    path = _deliverable(workspace)
    args = {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "deliver.gpkg", "output_layer": "sites"}
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(MapSmithError) as refused:
        app.run("buffer_layer", args)
    assert refused.value.code == "OUTPUT_LAYER_EXISTS"
    assert refused.value.evidence["layers"] == ["roads", "sites"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # not a byte changed
    # the clean twin: overwrite=true replaces "sites" and nothing else
    roads = _stored_rows(path, "roads")
    app.run("buffer_layer", {**args, "distance_meters": 20, "overwrite": True})
    import pyogrio

    assert sorted(str(n) for n, _ in pyogrio.list_layers(path)) == ["roads", "sites"]
    assert _stored_rows(path, "roads") == roads
    sites = read(path, "sites")
    assert len(sites) == 1 and sites.geometry.iloc[0].area == pytest.approx(AREA_R20, rel=1e-9)
    assert _manifest(workspace, "deliver.gpkg", "sites")["output"]["layer"] == "sites"


def test_a_new_container_gets_the_named_layer(app: Any, workspace: Path) -> None:
    _deliverable(workspace)
    app.run(
        "buffer_layer",
        {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "new.gpkg", "output_layer": "zone"},
    )
    import pyogrio

    assert [str(n) for n, _ in pyogrio.list_layers(workspace / "new.gpkg")] == ["zone"]
    record = _manifest(workspace, "new.gpkg", "zone")
    detail = {c["name"]: c["detail"] for c in record["verification"]}["x-mapsmith:container_layers_intact"]
    assert detail == "the container is new: no other layer"


@pytest.mark.parametrize(
    ("output_path", "layer", "code"),
    [
        ("out.parquet", "zone", "OUTPUT_LAYER_UNSUPPORTED"),
        ("out.gpkg", "gpkg_contents", "OUTPUT_LAYER_NAME_INVALID"),
        ("out.gpkg", "2zones", "OUTPUT_LAYER_NAME_INVALID"),
        ("out.gpkg", "a/b", "OUTPUT_LAYER_NAME_INVALID"),
    ],
)
def test_an_output_layer_that_cannot_be_written_is_refused(
    app: Any, workspace: Path, output_path: str, layer: str, code: str
) -> None:
    _deliverable(workspace)
    with pytest.raises(MapSmithError) as refused:
        app.run(
            "buffer_layer",
            {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": output_path, "output_layer": layer},
        )
    assert refused.value.code == code
    assert not (workspace / output_path).exists()


def _zones(ws: Path) -> None:
    # parcels: two 10 x 10 squares; zones.gpkg: "north" covers x 5..25, "south" is far away.
    write_layer(ws / "parcels.gpkg", [box(0, 0, 10, 10), box(20, 0, 30, 10)], "EPSG:27700", pid=[1, 2])
    write_layer(ws / "zones.gpkg", [box(5, 0, 25, 10)], "EPSG:27700", "north", zone=["N"])
    write_layer(ws / "zones.gpkg", [box(100, 100, 110, 110)], "EPSG:27700", "south", zone=["S"])


def test_clip_takes_the_mask_layer_of_a_two_layer_container(app: Any, workspace: Path) -> None:
    _zones(workspace)
    with pytest.raises(MapSmithError) as refused:
        app.run("clip_layer", {"input_path": "parcels.gpkg", "mask_path": "zones.gpkg", "output_path": "c.gpkg"})
    assert refused.value.code == "LAYER_REQUIRED" and "'mask_layer'" in refused.value.hint
    # the clean twin: naming the layer. Square 1 keeps x 5..10, square 2 keeps x 20..25: 50 m2 each.
    app.run(
        "clip_layer",
        {"input_path": "parcels.gpkg", "mask_path": "zones.gpkg", "mask_layer": "north", "output_path": "c.gpkg"},
    )
    clipped = read(workspace / "c.gpkg").sort_values("pid")
    assert list(clipped["pid"]) == [1, 2]
    assert list(clipped.geometry.area) == [50.0, 50.0]
    record = json.loads((workspace / "c.gpkg.provenance.json").read_text("utf-8"))
    mask = next(i for i in record["inputs"] if i["argument"] == "mask_path")
    assert mask["layer"] == "north"


def test_a_role_layer_that_is_not_there_or_has_no_dataset_is_refused(app: Any, workspace: Path) -> None:
    _zones(workspace)
    base = {"input_path": "parcels.gpkg", "mask_path": "zones.gpkg", "output_path": "c.gpkg"}
    with pytest.raises(MapSmithError) as missing:
        app.run("clip_layer", {**base, "mask_layer": "east"})
    assert missing.value.code == "LAYER_NOT_FOUND" and missing.value.evidence["layers"] == ["north", "south"]
    assert "as mask_layer" in missing.value.hint
    with pytest.raises(MapSmithError) as orphan:
        app.run("spatial_join", {"input_path": "parcels.gpkg", "join_layer": "north", "output_path": "j.gpkg"})
    assert orphan.value.code in ("MISSING_ARGUMENT", "LAYER_WITHOUT_DATASET")


def test_two_calls_adding_layers_at_once_both_land(make_app: Any, workspace: Path) -> None:
    """The lock covers the whole copy-add-rename: without it, the later rename would drop the layer
    the other call added to its own copy."""
    from concurrent.futures import ThreadPoolExecutor

    path = _deliverable(workspace)
    roads = _stored_rows(path, "roads")

    def add(name: str) -> Any:
        return make_app().run(
            "buffer_layer",
            {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "deliver.gpkg", "output_layer": name},
        )

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, ["w1", "w2", "w3", "w4"]))
    import pyogrio

    assert sorted(str(n) for n, _ in pyogrio.list_layers(path)) == ["roads", "sites", "w1", "w2", "w3", "w4"]
    assert _stored_rows(path, "roads") == roads


def test_a_failed_rename_leaves_the_container_and_a_failure_record_named_for_the_layer(
    app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mapsmith import runner

    path = _deliverable(workspace)
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    def broken(source: Path, target: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "_replace", broken)
    with pytest.raises(MapSmithError) as failed:
        app.run(
            "buffer_layer",
            {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "deliver.gpkg", "output_layer": "w"},
        )
    assert failed.value.code == "OUTPUT_WRITE_FAILED"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    record = json.loads((workspace / "deliver.gpkg.w.failed.provenance.json").read_text("utf-8"))
    assert record["x-mapsmith:error"]["code"] == "OUTPUT_WRITE_FAILED"
    assert "output" not in record  # the container at the path is not what this run produced
    assert sorted(p.name for p in workspace.iterdir()) == [
        "deliver.gpkg",
        "deliver.gpkg.w.failed.provenance.json",
        "wells.gpkg",
    ]


def test_overwriting_a_container_without_output_layer_says_which_layers_went(app: Any, workspace: Path) -> None:
    _deliverable(workspace)
    args = {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "deliver.gpkg", "overwrite": True}
    result = app.run("buffer_layer", args)
    import pyogrio

    assert [str(n) for n, _ in pyogrio.list_layers(workspace / "deliver.gpkg")] == ["deliver"]
    warning = next(w for w in result.warnings if w["code"] == "OUTPUT_LAYERS_REPLACED")
    assert "['roads', 'sites']" in warning["message"] and "output_layer" in warning["hint"]
