"""Through a real MCP client (python -m mapsmith over stdio): run_sql answers with rows, and a CSV is
delivered with its manifest. Expected values are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import Point

from layers import write_layer
from mcp_client import call, mcp_session

pytestmark = pytest.mark.mcp

# Parish A: wells 1 and 4; parish B: well 2. Sorted by id: 1 A, 2 B, 4 A; two wells in A, one in B.
WELLS_CSV = "id,parish\n4,A\n1,A\n2,B\n"
COUNT_SQL = "SELECT parish, count(*) AS wells FROM read_csv('wells.csv') GROUP BY parish ORDER BY parish"


def test_run_sql_answers_and_a_csv_is_delivered_over_mcp(workspace: Path) -> None:
    (workspace / "wells.csv").write_text(WELLS_CSV)
    write_layer(workspace / "sites.gpkg", [Point(8.5, 47.375), Point(2.25, 48.875)], "EPSG:4326", id=[7, 3])

    async def talk() -> dict[str, Any]:
        async with mcp_session(workspace) as (session, _):
            replies = {}
            replies["answer"] = await call(
                session, "run_operation", {"operation": "run_sql", "arguments": {"sql": COUNT_SQL, "max_rows": 1}}
            )
            replies["csv"] = await call(session, "run_sql", {"sql": COUNT_SQL, "output_path": "wells_per_parish.csv"})
            replies["xy"] = await call(
                session,
                "convert_format",
                {"input_path": "sites.gpkg", "geometry_as": "xy", "output_path": "sites.csv"},
            )
            replies["refused"] = await call(
                session, "convert_format", {"input_path": "sites.gpkg", "output_path": "nogeom.csv"}
            )
            return replies

    replies = anyio.run(talk)
    answer = replies["answer"]
    assert not answer.is_error, answer.data
    rows = answer.data["answer"]
    assert rows["rows"] == [{"parish": "A", "wells": 2}]
    assert (rows["total_rows"], rows["complete"]) == (2, False)
    assert rows["columns"] == [{"name": "parish", "type": "VARCHAR"}, {"name": "wells", "type": "BIGINT"}]
    assert rows["provenance"]["inputs"][0]["path"] == "wells.csv"

    csv = replies["csv"]
    assert not csv.is_error, csv.data
    assert (workspace / "wells_per_parish.csv").read_text() == '"parish","wells"\n"A",2\n"B",1\n'
    record = json.loads((workspace / "wells_per_parish.csv.provenance.json").read_text())
    assert record["output"]["path"] == "wells_per_parish.csv"

    assert (workspace / "sites.csv").read_text() == '"lon","lat","id"\n8.5,47.375,7\n2.25,48.875,3\n'
    assert replies["refused"].is_error and replies["refused"].data["code"] == "TABLE_GEOMETRY_CHOICE_REQUIRED"
