"""Through a real MCP client (python -m mapsmith over stdio): a layer added to a two-layer GeoPackage
with the others kept, a mask layer named, and a GeoJSON with members. Values worked out by hand."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import Point, box

from layers import read, write_layer
from mcp_client import call, mcp_session

pytestmark = pytest.mark.mcp


def _rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return list(db.execute(f'SELECT * FROM "{table}" ORDER BY rowid'))


def test_layers_and_geojson_members_over_mcp(workspace: Path) -> None:
    write_layer(workspace / "parcels.gpkg", [box(0, 0, 10, 10), box(20, 0, 30, 10)], "EPSG:27700", pid=[1, 2])
    zones = workspace / "zones.gpkg"
    write_layer(zones, [box(5, 0, 25, 10)], "EPSG:27700", "north", zone=["N"])
    write_layer(zones, [box(100, 100, 110, 110)], "EPSG:27700", "south", zone=["S"])
    north, south = _rows(zones, "north"), _rows(zones, "south")
    write_layer(workspace / "wgs.gpkg", [Point(-0.1, 51.5)], "EPSG:4326", id=[1])

    async def talk() -> dict[str, Any]:
        async with mcp_session(workspace) as (session, _):
            listed = {t.name: t for t in (await session.list_tools()).tools}
            replies: dict[str, Any] = {"schema": listed["clip_layer"].input_schema["properties"]}
            # clip by the "north" layer and deliver the result as a third layer of zones.gpkg
            replies["clip"] = await call(
                session,
                "clip_layer",
                {
                    "input_path": "parcels.gpkg",
                    "mask_path": "zones.gpkg",
                    "mask_layer": "north",
                    "output_path": "deliver.gpkg",
                    "output_layer": "clipped",
                },
            )
            replies["clash"] = await call(
                session,
                "clip_layer",
                {
                    "input_path": "parcels.gpkg",
                    "mask_path": "zones.gpkg",
                    "mask_layer": "north",
                    "output_path": "deliver.gpkg",
                    "output_layer": "clipped",
                },
            )
            replies["geojson"] = await call(
                session,
                "run_operation",
                {
                    "operation": "convert_format",
                    "arguments": {
                        "input_path": "wgs.gpkg",
                        "output_path": "wgs.geojson",
                        "feature_collection_members": {"removed_count": 3},
                    },
                },
            )
            # the record of one layer of the container, asked for by name (and refused without it)
            replies["provenance"] = await call(session, "get_provenance", {"path": "deliver.gpkg", "layer": "clipped"})
            replies["lineage"] = await call(session, "get_lineage", {"path": "deliver.gpkg", "layer": "clipped"})
            replies["unnamed"] = await call(session, "get_provenance", {"path": "deliver.gpkg"})
            return replies

    replies = anyio.run(talk)
    assert {"mask_layer", "output_layer", "geojson_keep_crs", "feature_collection_members"} <= set(replies["schema"])
    clip = replies["clip"]
    assert not clip.is_error, clip.data
    assert clip.data["manifest_path"] == "deliver.gpkg.clipped.provenance.json"
    clipped = read(workspace / "deliver.gpkg", "clipped").sort_values("pid")
    assert list(clipped.geometry.area) == [50.0, 50.0]  # x 5..10 and x 20..25, 10 high
    assert _rows(zones, "north") == north and _rows(zones, "south") == south  # the mask container is untouched
    record = json.loads((workspace / "deliver.gpkg.clipped.provenance.json").read_text("utf-8"))
    assert record["output"]["layer"] == "clipped"
    assert next(i for i in record["inputs"] if i["argument"] == "mask_path")["layer"] == "north"
    clash = replies["clash"]
    assert clash.is_error and clash.data["code"] == "OUTPUT_LAYER_EXISTS"
    assert not replies["geojson"].is_error, replies["geojson"].data
    assert json.loads((workspace / "wgs.geojson").read_text("utf-8"))["removed_count"] == 3
    provenance = replies["provenance"]
    assert not provenance.is_error, provenance.data
    assert provenance.data["manifest_path"] == "deliver.gpkg.clipped.provenance.json"
    assert provenance.data["output_matches"] is True
    lineage = replies["lineage"]
    assert [hop["operation"] for hop in lineage.data["hops"]] == ["clip_layer"]
    assert {(o["path"], o["status"]) for o in lineage.data["originals"]} == {
        ("parcels.gpkg", "present"),
        ("zones.gpkg", "present"),
    }
    unnamed = replies["unnamed"]
    assert unnamed.is_error and unnamed.data["code"] == "LAYER_REQUIRED"
    assert unnamed.data["evidence"]["layers_with_manifests"] == ["clipped"]
