"""table_to_points and calculate_field through a real MCP client (``python -m mapsmith`` over stdio).

One session: points from a CSV of DMS text, its refusal without the CRS and with a bad row, then a
field calculated on the points. Values are the hand-worked ones of test_table_to_points.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from layers import manifest, read
from mcp_client import call, mcp_session

pytestmark = pytest.mark.mcp

CSV = 'id,name,lon,lat\n1,Paris,"2°21\'03""E","48°51\'24""N"\n2,Sydney,151°12.5\'E,-33 52.1\n'
BASE = {"input_path": "cities.csv", "x_field": "lon", "y_field": "lat"}


async def converse(ws: Path) -> dict[str, Any]:
    replies = {}
    async with mcp_session(ws) as (session, _):
        run = "run_operation"
        replies["no_crs"] = await call(
            session, run, {"operation": "table_to_points", "arguments": {**BASE, "output_path": "p.gpkg"}}
        )
        replies["bad_row"] = await call(
            session,
            run,
            {
                "operation": "table_to_points",
                "arguments": {**BASE, "input_path": "bad.csv", "crs": "EPSG:4326", "output_path": "bad.gpkg"},
            },
        )
        replies["ok"] = await call(
            session,
            run,
            {"operation": "table_to_points", "arguments": {**BASE, "crs": "EPSG:4326", "output_path": "p.gpkg"}},
        )
        replies["calc"] = await call(
            session,
            run,
            {
                "operation": "calculate_field",
                "arguments": {
                    "input_path": "p.gpkg",
                    "output_field": "lat_x2",
                    "expression": "round($y * 2, 4)",
                    "output_path": "q.gpkg",
                },
            },
        )
    return replies


def test_table_to_points_over_mcp(workspace: Path) -> None:
    (workspace / "cities.csv").write_text(CSV, encoding="utf-8")
    (workspace / "bad.csv").write_text(CSV + "3,Nowhere,abc,10\n", encoding="utf-8")
    replies = anyio.run(converse, workspace)

    no_crs = replies["no_crs"]
    assert no_crs.is_error and no_crs.data["code"] == "MISSING_ARGUMENT"
    bad = replies["bad_row"]
    assert bad.is_error and bad.data["code"] == "TABLE_ROWS_UNPARSEABLE"
    assert bad.data["evidence"]["rows"][0]["row"] == 3
    assert not (workspace / "bad.gpkg").exists()

    ok = replies["ok"]
    assert not ok.is_error
    assert ok.data["answer"]["point_count"] == 2
    assert ok.data["manifest_path"] == "p.gpkg.provenance.json"
    out = read(workspace / "p.gpkg")
    # 2°21'03"E = 2.3508333, 48°51'24"N = 48.8566667; 151°12.5'E = 151.2083333, -33 52.1 = -33.8683333
    assert list(out.geometry.x) == pytest.approx([2.3508333333, 151.2083333333], abs=1e-9)
    assert list(out.geometry.y) == pytest.approx([48.8566666667, -33.8683333333], abs=1e-9)
    assert manifest(workspace / "p.gpkg")["output"]["crs"] == "EPSG:4326"

    calc = replies["calc"]
    assert not calc.is_error
    # round(48.8566667 * 2, 4) = 97.7133; round(-33.8683333 * 2, 4) = -67.7367
    assert calc.data["answer"]["sample"] == [97.7133, -67.7367]
    assert list(read(workspace / "q.gpkg")["lat_x2"]) == [97.7133, -67.7367]
