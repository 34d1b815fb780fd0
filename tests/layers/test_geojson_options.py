"""GeoJSON beyond RFC 7946's defaults: another CRS when asked for (legacy crs member, a warning naming
the readers that ignore it), and top-level members. Values worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point

from layers import read, write_layer
from mapsmith.errors import MapSmithError

# Two points in British National Grid (metres); the GeoJSON must carry them unchanged.
BNG_POINTS = [Point(530000, 180000), Point(531000, 181500)]


def test_a_geojson_in_the_national_grid_carries_its_crs_member_and_a_warning(app: Any, workspace: Path) -> None:
    write_layer(workspace / "sites.gpkg", BNG_POINTS, "EPSG:27700", site=[1, 2])
    args = {"input_path": "sites.gpkg", "output_path": "sites.geojson"}
    with pytest.raises(MapSmithError) as refused:
        app.run("convert_format", args)
    assert refused.value.code == "GEOJSON_REQUIRES_WGS84" and "geojson_keep_crs" in refused.value.hint
    assert not (workspace / "sites.geojson").exists()
    # the clean twin: asked for explicitly
    result = app.run("convert_format", {**args, "geojson_keep_crs": True})
    document = json.loads((workspace / "sites.geojson").read_text("utf-8"))
    assert document["crs"] == {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::27700"}}
    assert [f["geometry"]["coordinates"] for f in document["features"]] == [[530000.0, 180000.0], [531000.0, 181500.0]]
    assert [f["properties"]["site"] for f in document["features"]] == [1, 2]
    assert read(workspace / "sites.geojson").crs.to_epsg() == 27700
    warning = next(w for w in result.warnings if w["code"] == "GEOJSON_LEGACY_CRS")
    assert "EPSG:27700" in warning["message"] and "Leaflet" in warning["message"]
    record = json.loads((workspace / "sites.geojson.provenance.json").read_text("utf-8"))
    assert record["output"]["crs"] == "EPSG:27700"
    checks = {c["name"]: c["passed"] for c in record["verification"]}
    assert checks["x-mapsmith:geojson_crs_member"] and checks["x-mapsmith:geojson_rows"]
    assert record["x-mapsmith:warnings"][0]["code"] == "GEOJSON_LEGACY_CRS"
    # the GeoPackage the engine wrote first is gone: only the deliverable and its record are new
    assert sorted(p.name for p in workspace.iterdir()) == [
        "sites.geojson",
        "sites.geojson.provenance.json",
        "sites.gpkg",
    ]


def test_feature_collection_members_are_written_and_read_back(app: Any, workspace: Path) -> None:
    write_layer(workspace / "wgs.gpkg", [Point(-0.1, 51.5)], "EPSG:4326", id=[1])
    members = {"removed_count": 3, "source": {"survey": "2024", "ok": True}, "notes": None}
    result = app.run(
        "convert_format",
        {"input_path": "wgs.gpkg", "output_path": "out.geojson", "feature_collection_members": members},
    )
    document = json.loads((workspace / "out.geojson").read_text("utf-8"))
    assert document["type"] == "FeatureCollection" and len(document["features"]) == 1
    assert {k: document[k] for k in members} == members
    assert "crs" not in document  # WGS 84 stays RFC 7946: no crs member
    assert not [w for w in result.warnings if w["code"] == "GEOJSON_LEGACY_CRS"]
    assert document["features"][0]["geometry"]["coordinates"] == [-0.1, 51.5]


@pytest.mark.parametrize(
    ("extra", "output_path", "code"),
    [
        ({"feature_collection_members": {"crs": 1}}, "out.geojson", "GEOJSON_MEMBER_RESERVED"),
        ({"feature_collection_members": {"features": []}}, "out.geojson", "GEOJSON_MEMBER_RESERVED"),
        ({"feature_collection_members": {"x": float("nan")}}, "out.geojson", "WRONG_ARGUMENT_TYPE"),
        ({"feature_collection_members": [1]}, "out.geojson", "WRONG_ARGUMENT_TYPE"),
        ({"feature_collection_members": {"removed_count": 3}}, "out.gpkg", "GEOJSON_OPTION_UNSUPPORTED"),
        ({"geojson_keep_crs": True}, "out.fgb", "GEOJSON_OPTION_UNSUPPORTED"),
    ],
)
def test_geojson_options_that_cannot_be_honoured_are_refused(
    app: Any, workspace: Path, extra: dict[str, Any], output_path: str, code: str
) -> None:
    write_layer(workspace / "wgs.gpkg", [Point(-0.1, 51.5)], "EPSG:4326", id=[1])
    with pytest.raises(MapSmithError) as refused:
        app.run("convert_format", {"input_path": "wgs.gpkg", "output_path": output_path, **extra})
    assert refused.value.code == code
    assert not (workspace / output_path).exists()
