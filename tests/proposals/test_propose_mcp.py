"""Done-when, through a real MCP client (the Python SDK over stdio, ``python -m mapsmith``): an agent proposes
hexagon_grid, it passes, it runs with a manifest marked experimental, a plan uses it (hexagons, then
count_in_polygons), and proposals that cheat are refused with their codes while the server stays healthy.

The server runs as a user starts it: with a workspace on Linux its engines run in the bubblewrap worker,
so each proposal is checked in a jail started from inside that worker. Numbers are worked out in
``proposals/hexagon.py`` (8 cells, 120000 sqrt(3) m2) and ``test_propose.py`` (counts 2, 1, 1, five zeros).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_client import call, mcp_session
from proposals.hexagon import CELL_AREA_M2, CELLS, CODE, CONTRACT, TOTAL_AREA_M2, examples, proposal_with, write_square
from proposals.test_propose import EXPECTED_COUNTS, POINTS

pytestmark = [pytest.mark.mcp, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap")]


def _points(ws: Path) -> None:
    import geopandas as gpd
    from shapely.geometry import Point

    gpd.GeoDataFrame({"id": [1, 2, 3, 4]}, geometry=[Point(p) for p in POINTS], crs="EPSG:32631").to_file(
        ws / "points.gpkg", driver="GPKG"
    )


def test_an_agent_proposes_runs_and_plans_with_hexagon_grid(workspace: Path) -> None:
    write_square(workspace)
    _points(workspace)
    cheat_network = proposal_with(
        '__import__("soc" + "ket").create_connection(("10.0.0.1", 80), timeout=2)', "cheat_net"
    )
    wrong = CONTRACT.replace('name = "hexagon_grid"', 'name = "hexagon_seven"')

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with mcp_session(workspace) as (session, _):
            tools = {t.name: t for t in (await session.list_tools()).tools}
            out["tool"] = tools["propose_operation"]
            out["info"] = await call(session, "server_info", {})
            out["propose"] = await call(
                session, "propose_operation", {"contract": CONTRACT, "code": CODE, "examples": examples()}
            )
            out["listed"] = await call(session, "list_operations", {"query": "hexagon grid"})
            out["run"] = await call(
                session,
                "run_operation",
                {
                    "operation": "hexagon_grid",
                    "arguments": {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "h.gpkg"},
                },
            )
            out["provenance"] = await call(session, "get_provenance", {"path": "h.gpkg"})
            plan = {
                "goal": "points per hexagon",
                "steps": [
                    {
                        "id": "hex",
                        "operation": "hexagon_grid",
                        "arguments": {
                            "input_path": "square.gpkg",
                            "cell_area_m2": CELL_AREA_M2,
                            "output_path": "ph.gpkg",
                        },
                    },
                    {
                        "id": "counts",
                        "operation": "count_in_polygons",
                        "arguments": {"input_path": "$hex", "points_path": "points.gpkg", "output_path": "pc.gpkg"},
                    },
                ],
            }
            out["plan"] = await call(session, "execute_plan", {"plan": plan})
            out["replay"] = await call(session, "replay", {"path": "h.gpkg"})
            # Cheating proposals: a worked answer that is not the answer, the network, a name that exists.
            out["wrong"] = await call(
                session,
                "propose_operation",
                {
                    "contract": wrong,
                    "code": CODE.replace("def hexagon_grid(", "def hexagon_seven("),
                    "examples": examples(cells=7, area=7 * CELL_AREA_M2),
                },
            )
            out["network"] = await call(
                session,
                "propose_operation",
                {"contract": cheat_network[0], "code": cheat_network[1], "examples": examples(cells=1, area=1.0)},
            )
            clash = proposal_with("pass", "buffer_layer")
            out["clash"] = await call(
                session, "propose_operation", {"contract": clash[0], "code": clash[1], "examples": examples()}
            )
            # Healthy afterwards: the accepted operation still runs.
            out["after"] = await call(
                session,
                "hexagon_grid" if "hexagon_grid" in tools else "run_operation",
                {
                    "operation": "hexagon_grid",
                    "arguments": {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "h2.gpkg"},
                },
            )
        return out

    out = anyio.run(go)
    assert len(json.dumps(out["tool"].input_schema)) < 1500  # a short schema: tools/list has a budget
    assert out["info"].data["sandbox"]["enabled"] is True  # the proposal ran in a jail inside the worker

    proposed = out["propose"]
    assert not proposed.is_error, proposed.data
    assert proposed.data["status"] == "registered"
    assert proposed.data["examples"][0]["seen"]["feature_count"] == CELLS
    assert proposed.data["examples"][0]["seen"]["total_area_m2"] == pytest.approx(TOTAL_AREA_M2, rel=1e-9)

    candidates = out["listed"].data["candidates"]
    [entry] = [c for c in candidates if c["operation"] == "hexagon_grid"]
    assert entry["maturity"] == "experimental"

    run = out["run"]
    assert not run.is_error, run.data
    assert run.data["answer"]["cell_count"] == CELLS
    assert "EXPERIMENTAL_OPERATION" in [w["code"] for w in run.data["warnings"]]
    manifest = out["provenance"].data["manifest"]
    assert out["provenance"].data["conforms"] is True
    assert manifest["x-mapsmith:plugin"]["maturity"] == "experimental"
    assert manifest["engine"]["name"] == "proposed:hexagon_grid"

    assert not out["plan"].is_error, out["plan"].data
    import pyogrio

    counts = sorted(int(c) for c in pyogrio.read_dataframe(workspace / "pc.gpkg")["point_count"])
    assert counts == EXPECTED_COUNTS
    assert out["replay"].data["identical"] is True, out["replay"].data

    assert out["wrong"].is_error and out["wrong"].data["code"] == "PROPOSAL_EXAMPLE_WRONG"
    assert out["network"].is_error and out["network"].data["code"] == "PROPOSAL_NETWORK_ATTEMPT"
    assert out["clash"].is_error and out["clash"].data["code"] == "PROPOSAL_NAME_TAKEN"
    for key in ("wrong", "network", "clash"):
        assert "propose_operation" in out[key].data["hint"] or "list_operations" in out[key].data["hint"]
    assert not out["after"].is_error and out["after"].data["answer"]["cell_count"] == CELLS
