"""Through real MCP clients: list_operations shows maturity, a plugin's result warns, its manifest names its code.

The server runs as ``python -m mapsmith`` in a subprocess with the installed hello plugin on PYTHONPATH (found
through the entry-point group, as on a user's machine). Two clients: the Python MCP SDK (``tests/mcp_client``)
and the MCP Inspector CLI 0.15.0 from npm. MapSmith's own ``measure_area`` on the same data is the clean twin.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import Polygon

from conftest import published_schema_errors
from layers import write_layer
from mcp_client import call, mcp_session

pytestmark = pytest.mark.mcp

OPERATION = "count_vertices"
TRIANGLE = Polygon([(500_000, 5_000_000), (500_100, 5_000_000), (500_000, 5_000_100)])
HOLED = Polygon(
    [(500_200, 5_000_000), (500_300, 5_000_000), (500_300, 5_000_100), (500_200, 5_000_100)],
    [[(500_225, 5_000_025), (500_275, 5_000_025), (500_275, 5_000_075), (500_225, 5_000_075)]],
)
# A listing by facets alone (no query, so no ranker): the first entries by name, count_vertices among them.
LISTING = {"input_kind": "vector", "produces": "dataset:vector", "dataset_count": 1}
# The Inspector the environment provides (the brief's install), else the pinned one of tests/clients/node.
# The pinned Inspector 0.15.0 the clients nox session installs (MAPSMITH_NODE_CLIENTS), or beside the lockfile.
NODE_CLIENTS = Path(os.environ.get("MAPSMITH_NODE_CLIENTS", Path(__file__).resolve().parents[1] / "clients" / "node"))
INSPECTOR = NODE_CLIENTS / "node_modules" / "inspector-0.15" / "cli" / "build" / "cli.js"


def _pythonpath(site: Path) -> str:
    # The plugin's site first; whatever the test run itself was given after it (a checkout under test).
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)


async def _converse(workspace: Path, site: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with mcp_session(workspace, PYTHONPATH=_pythonpath(site)) as (session, _):
        out["catalog"] = await call(session, "list_operations", LISTING)
        arguments = {"input_path": "shapes.gpkg", "output_path": "vertices.gpkg"}
        out["run"] = await call(session, "run_operation", {"operation": OPERATION, "arguments": arguments})
        twin = {"input_path": "shapes.gpkg", "output_path": "areas.gpkg"}
        out["twin"] = await call(session, "run_operation", {"operation": "measure_area", "arguments": twin})
        out["provenance"] = await call(session, "get_provenance", {"path": "vertices.gpkg"})
        out["twin_provenance"] = await call(session, "get_provenance", {"path": "areas.gpkg"})
    return out


def test_the_sdk_client_sees_maturity_the_warning_and_the_plugin_identity(
    workspace: Path, hello_site: Path, hello_digest: str
) -> None:
    write_layer(workspace / "shapes.gpkg", [TRIANGLE, HOLED], "EPSG:32610", name=["triangle", "holed"])

    replies = anyio.run(_converse, workspace, hello_site)

    catalog = replies["catalog"]
    assert not catalog.is_error
    maturity = {c["operation"]: c["maturity"] for c in catalog.data["candidates"]}
    assert maturity[OPERATION] == "experimental"
    assert set(maturity.values()) == {"stable", "experimental"}
    assert [name for name, level in maturity.items() if level == "experimental"] == [OPERATION]

    run = replies["run"]
    assert not run.is_error, run.data
    assert run.data["answer"] == {"feature_count": 2, "total_vertex_count": 14}  # 4 + 10, by hand
    codes = [w["code"] for w in run.data["warnings"]]
    assert codes == ["EXPERIMENTAL_OPERATION"]
    assert "list_operations" in run.data["warnings"][0]["hint"]

    twin = replies["twin"]
    assert not twin.is_error, twin.data
    assert "EXPERIMENTAL_OPERATION" not in [w["code"] for w in twin.data["warnings"]]

    record = replies["provenance"].data["manifest"]
    assert published_schema_errors(record) == []
    assert record["x-mapsmith:plugin"]["code_sha256"] == hello_digest
    assert record["x-mapsmith:plugin"]["version"] == "0.1.0"
    assert record["x-mapsmith:plugin"]["maturity"] == "experimental"
    assert "x-mapsmith:plugin" not in replies["twin_provenance"].data["manifest"]


def _inspector(workspace: Path, site: Path, *method: str) -> dict[str, Any]:
    node = shutil.which("node")
    if not INSPECTOR.is_file() or node is None:
        missing = "the MCP Inspector CLI 0.15.0 is not installed: npm ci --prefix tests/clients/node"
        if os.environ.get("MAPSMITH_CLIENTS_REQUIRED") == "1":
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    command = [node, str(INSPECTOR), "--cli"]
    for key, value in (
        ("MAPSMITH_WORKSPACE", str(workspace)),
        ("MAPSMITH_QGIS_ALGORITHMS", "0"),
        ("PYTHONPATH", _pythonpath(site)),
    ):
        command += ["-e", f"{key}={value}"]
    command += [sys.executable, "-m", "mapsmith", *method]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    done = subprocess.run(command, env=env, cwd=workspace, capture_output=True, text=True, timeout=180, check=False)
    assert done.stdout.strip(), f"no output (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_inspector_cli_sees_the_same(workspace: Path, hello_site: Path) -> None:
    write_layer(workspace / "shapes.gpkg", [TRIANGLE, HOLED], "EPSG:32610", name=["triangle", "holed"])
    call_tool = ("--method", "tools/call", "--tool-name")

    facets = [f"{k}={v}" for k, v in LISTING.items()]
    listed = _inspector(workspace, hello_site, *call_tool, "list_operations", "--tool-arg", *facets)
    candidates = listed["structuredContent"]["candidates"]
    assert {c["operation"]: c["maturity"] for c in candidates}[OPERATION] == "experimental"

    arguments = json.dumps({"input_path": "shapes.gpkg", "output_path": "v.gpkg"})
    ran = _inspector(
        workspace,
        hello_site,
        *call_tool,
        "run_operation",
        "--tool-arg",
        f"operation={OPERATION}",
        f"arguments={arguments}",
    )
    assert not ran.get("isError"), ran
    result = ran["structuredContent"]
    assert result["answer"]["total_vertex_count"] == 14
    assert [w["code"] for w in result["warnings"]] == ["EXPERIMENTAL_OPERATION"]
