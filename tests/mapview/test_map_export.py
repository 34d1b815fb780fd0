"""export_map: one standalone HTML file with the library inlined and a manifest naming inputs by digest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import published_schema_errors
from mapsmith.errors import MapSmithError
from mapview.map_fixtures import APP_ENV


@pytest.fixture
def app(make_app: Any, workspace: Path) -> Any:
    from mapsmith.examples.worked_example import write_inputs

    write_inputs(workspace)
    return make_app(**APP_ENV)


def test_export_writes_page_and_manifest(app: Any, workspace: Path) -> None:
    import hashlib

    from mapsmith import mapview
    from mapsmith.provenance.digests import dataset_digest

    reply = mapview.export_map(app, ["parcels.geojson", "elevation.tif"], "map.html", background="none")
    page = workspace / "map.html"
    html = page.read_text("utf-8")
    record = json.loads((workspace / "map.html.provenance.json").read_text("utf-8"))
    assert reply["output_path"] == "map.html" and reply["manifest_path"] == "map.html.provenance.json"
    assert published_schema_errors(record) == []
    assert record["operation"] == "export_map"
    assert record["output"]["sha256"] == hashlib.sha256(page.read_bytes()).hexdigest()
    assert record["output"]["x-mapsmith:media_type"] == "text/html"
    assert [(i["path"], i["sha256"], i["argument"]) for i in record["inputs"]] == [
        ("parcels.geojson", dataset_digest(workspace / "parcels.geojson"), "paths[0]"),
        ("elevation.tif", dataset_digest(workspace / "elevation.tif"), "paths[1]"),
    ]
    assert [c["name"] for c in record["verification"] if c["passed"]] == [
        "x-mapsmith:map_library_intact",
        "x-mapsmith:no_remote_resources",
        "x-mapsmith:layers_rendered",
    ]
    # Standalone: Leaflet's code is in the page, nothing is loaded by URL.
    leaflet = (Path(mapview.__file__).parent / "static" / "leaflet" / "leaflet.js").read_text("utf-8")
    assert leaflet in html
    assert "<script src" not in html and "<link" not in html
    assert "tile.openstreetmap.org" not in html.split('id="mapsmith-data">', 1)[1].split("</script>", 1)[0]


def test_export_refusals(app: Any, workspace: Path) -> None:
    from mapsmith import mapview

    cases = [
        ("map.png", "OUTPUT_FORMAT_UNSUPPORTED"),
        ("nowhere/map.html", "OUTPUT_FOLDER_MISSING"),
    ]
    for output, code in cases:
        with pytest.raises(MapSmithError) as caught:
            mapview.export_map(app, ["parcels.geojson"], output)
        assert caught.value.code == code
    with pytest.raises(MapSmithError):
        mapview.export_map(app, ["parcels.geojson"], "../escape.html")
    mapview.export_map(app, ["parcels.geojson"], "map.html", background="none")
    with pytest.raises(MapSmithError) as caught:
        mapview.export_map(app, ["parcels.geojson"], "map.html")
    assert caught.value.code == "OUTPUT_EXISTS"
    assert not list(workspace.glob(".map.tmp-*"))


def test_library_matches_its_pin() -> None:
    from mapsmith import mapview

    assert mapview.library()["version"] == "1.9.4"
    assert mapview.library_problems() == []
    assert set(mapview.library()["files"]) >= {"LICENSE", "leaflet.js", "leaflet.css"}


def test_an_exported_map_is_walked_back_and_replayed(app: Any, workspace: Path) -> None:
    """The page is deterministic, so replay rebuilds it byte for byte from its record and its input's chain."""
    from mapsmith import mapview

    app.run("buffer_layer", {"input_path": "parcels.geojson", "distance_meters": 5.0, "output_path": "buf.gpkg"})
    mapview.export_map(app, ["buf.gpkg"], "buffered.html", background="none")
    lineage = app.get_lineage("buffered.html")
    assert [h["operation"] for h in lineage["hops"]] == ["buffer_layer", "export_map"]  # oldest first
    replayed = app.replay("buffered.html")
    assert [(s["operation"], s["result"]) for s in replayed["steps"]] == [
        ("buffer_layer", "identical"),
        ("export_map", "identical"),
    ]
    assert replayed["steps"][1]["arguments"]["background"] == "none"
    assert replayed["verdict"] == "identical"
