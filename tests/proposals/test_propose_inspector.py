"""Done-when through the official MCP Inspector CLI (TypeScript SDK, 0.15.0 on the OS's Node 20): an agent's
hexagon_grid is proposed, run, used in a plan, and a cheating proposal is refused with its code.

Each CLI call starts its own ``mapsmith`` over stdio, as a user's client configuration does, so every call
after the first is served by a new server that found the proposal in the workspace's store: the restart
path is exercised by the client itself. The Inspector is the pinned one of ``tests/clients/node``
(``npm ci --prefix tests/clients/node``), or the 0.15.0 ``cli.js`` named by MAPSMITH_INSPECTOR_CLI.
Expected numbers: ``proposals/hexagon.py`` (8 cells) and ``test_propose.py`` (counts 2, 1, 1, five zeros).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proposals.hexagon import CELL_AREA_M2, CELLS, CODE, CONTRACT, examples, write_square
from proposals.test_propose import EXPECTED_COUNTS, POINTS

pytestmark = [pytest.mark.mcp, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap")]
REPO = Path(__file__).resolve().parents[2]
# The pinned clients: where the clients nox session installs them (MAPSMITH_NODE_CLIENTS), or beside the lockfile.
NODE_CLIENTS = Path(os.environ.get("MAPSMITH_NODE_CLIENTS", REPO / "tests" / "clients" / "node"))
PINNED = NODE_CLIENTS / "node_modules" / "inspector-0.15" / "cli" / "build" / "cli.js"
FIX = "install the pinned clients with `npm ci --prefix tests/clients/node`, or set MAPSMITH_INSPECTOR_CLI"


def _launcher() -> tuple[str, str]:
    cli = Path(os.environ.get("MAPSMITH_INSPECTOR_CLI") or PINNED)
    node = shutil.which("node")
    missing = None if cli.is_file() else f"no Inspector CLI at {cli}"
    missing = missing or (None if node else "Node.js is not on PATH")
    if missing:
        if os.environ.get("MAPSMITH_CLIENTS_REQUIRED") == "1":
            pytest.fail(f"{missing}; {FIX}", pytrace=False)
        pytest.skip(f"{missing}; {FIX}")
    assert node is not None
    return node, str(cli)


def _mapsmith() -> str:
    script = Path(sys.executable).with_name("mapsmith")
    return str(script) if script.exists() else str(shutil.which("mapsmith"))


def _call(ws: Path, tool: str, **arguments: Any) -> dict[str, Any]:
    node, cli = _launcher()
    args = []
    for key, value in arguments.items():
        args += ["--tool-arg", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    done = subprocess.run(
        [node, cli, "--cli", "-e", f"MAPSMITH_WORKSPACE={ws}", _mapsmith(), "--method", "tools/call"]
        + ["--tool-name", tool, *args],
        env=env,
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    if result.get("isError"):
        return {"error": json.loads(result["content"][0]["text"])}
    return dict(result["structuredContent"])


def test_the_inspector_proposes_runs_plans_and_sees_a_cheat_refused(workspace: Path) -> None:
    import geopandas as gpd
    import pyogrio
    from shapely.geometry import Point

    _launcher()
    write_square(workspace)
    gpd.GeoDataFrame({"id": [1, 2, 3, 4]}, geometry=[Point(p) for p in POINTS], crs="EPSG:32631").to_file(
        workspace / "points.gpkg", driver="GPKG"
    )
    proposed = _call(workspace, "propose_operation", contract=CONTRACT, code=CODE, examples=examples())
    assert proposed.get("status") == "registered", proposed
    assert proposed["examples"][0]["seen"]["feature_count"] == CELLS

    arguments = {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "h.gpkg"}
    run = _call(workspace, "run_operation", operation="hexagon_grid", arguments=arguments)
    assert run["answer"]["cell_count"] == CELLS, run
    assert "EXPERIMENTAL_OPERATION" in [w["code"] for w in run["warnings"]]
    record = _call(workspace, "get_provenance", path="h.gpkg")
    assert record["manifest"]["x-mapsmith:plugin"]["maturity"] == "experimental" and record["conforms"] is True

    plan = {
        "goal": "points per hexagon",
        "steps": [
            {"id": "hex", "operation": "hexagon_grid", "arguments": {**arguments, "output_path": "ph.gpkg"}},
            {
                "id": "counts",
                "operation": "count_in_polygons",
                "arguments": {"input_path": "$hex", "points_path": "points.gpkg", "output_path": "pc.gpkg"},
            },
        ],
    }
    executed = _call(workspace, "execute_plan", plan=plan)
    assert executed["status"] in ("ok", "ok_with_warnings"), executed
    assert sorted(int(c) for c in pyogrio.read_dataframe(workspace / "pc.gpkg")["point_count"]) == EXPECTED_COUNTS

    cheat = _call(
        workspace,
        "propose_operation",
        contract=CONTRACT.replace('name = "hexagon_grid"', 'name = "hexagon_seven"'),
        code=CODE.replace("def hexagon_grid(", "def hexagon_seven("),
        examples=examples(cells=7, area=7 * CELL_AREA_M2),
    )
    assert cheat["error"]["code"] == "PROPOSAL_EXAMPLE_WRONG"
    assert {d["fact"]: d["got"] for d in cheat["error"]["evidence"]["differences"]}["feature_count"] == CELLS
    taken = _call(workspace, "propose_operation", contract=CONTRACT, code=CODE + "\n", examples=examples())
    assert taken["error"]["code"] == "PROPOSAL_NAME_TAKEN"
