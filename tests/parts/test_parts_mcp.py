"""Through a real MCP client (python -m mapsmith over stdio): run_sql and select_features' DuckDB engine write
folders of Parquet parts, the manifest beside it digests the folder by the listing rule, and a folder request no
parts writer can take is refused with its code. Expected values are worked out by hand."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import Point

from layers import write_layer
from mcp_client import call, mcp_session

pytestmark = pytest.mark.mcp


def test_a_folder_of_parts_is_written_and_refused_over_mcp(workspace: Path) -> None:
    # Depths 10, 20, 30: two wells are deeper than 15 m.
    write_layer(
        workspace / "wells.gpkg",
        [Point(500_000, 4_000_000), Point(500_010, 4_000_000), Point(500_020, 4_000_000)],
        "EPSG:32633",
        depth=[10, 20, 30],
    )
    write_layer(
        workspace / "wells.parquet",
        [Point(500_000, 4_000_000), Point(500_010, 4_000_000), Point(500_020, 4_000_000)],
        "EPSG:32633",
        depth=[10, 20, 30],
    )
    sql = "SELECT depth, geom FROM ST_Read('wells.gpkg') WHERE depth > 15"
    selection = {"input_path": "wells.parquet", "where": "depth > 15", "output_path": "s.parquet/"}

    async def talk() -> dict[str, Any]:
        async with mcp_session(workspace) as (session, _):
            return {
                "parts": await call(session, "run_sql", {"sql": sql, "output_path": "deep.parquet/"}),
                "selected": await call(
                    session,
                    "run_operation",
                    {
                        "operation": "select_features",
                        "arguments": selection,
                    },
                ),
                "refused": await call(
                    session,
                    "run_operation",
                    {
                        "operation": "buffer_layer",
                        "arguments": {"input_path": "wells.gpkg", "distance_meters": 5, "output_path": "b.parquet/"},
                    },
                ),
            }

    replies = anyio.run(talk)
    parts = replies["parts"]
    assert not parts.is_error, parts.data
    assert parts.data["answer"]["feature_count"] == 2
    folder = workspace / "deep.parquet"
    members = sorted(folder.rglob("*.parquet"))
    assert members
    listing = sorted(
        (p.relative_to(folder).as_posix().encode(), hashlib.sha256(p.read_bytes()).hexdigest().encode())
        for p in members
    )
    expected = hashlib.sha256(b"".join(n + b"\0" + h + b"\n" for n, h in listing)).hexdigest()
    record = json.loads((workspace / "deep.parquet.provenance.json").read_text("utf-8"))
    assert record["output"]["sha256"] == expected
    # select_features' DuckDB engine writes the parts (the only writer of them on this stack, at any size)
    selected = replies["selected"]
    assert not selected.is_error, selected.data
    assert selected.data["engine"]["name"] == "duckdb"
    import geopandas as gpd

    assert gpd.read_parquet(workspace / "s.parquet")["depth"].tolist() == [20, 30]
    assert [p.name for p in (workspace / "s.parquet").iterdir()] == ["part-00000.parquet"]
    refused = replies["refused"]
    assert refused.is_error and refused.data["code"] == "OUTPUT_PARTS_UNSUPPORTED"
    assert refused.data["hint"]
    assert not (workspace / "b.parquet").exists()
