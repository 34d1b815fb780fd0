"""A third-party plugin, installed for real, is found, listed and run like MapSmith's own stacks.

``tests/fixtures/mapsmith-plugin-hello`` is a separate distribution: it is built with pip into a
throwaway ``site`` folder (never into the test venv), and the server runs in a subprocess with
that folder on PYTHONPATH, so the plugin reaches MapSmith only through the ``mapsmith`` entry-point
group, as it would on a user's machine.
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
from layers import manifest, read, write_layer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mapsmith-plugin-hello"
DISTRIBUTION = "mapsmith-plugin-hello"
OPERATION = "count_vertices"
# the built-in catalog: one contract file per operation
BUILT_IN = len(list((Path(__file__).resolve().parents[2] / "contracts" / "operations").glob("*.toml")))


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture distribution installed into its own folder, once per module."""
    root = tmp_path_factory.mktemp("hello-plugin")
    # Build from a copy: setuptools writes build/ and *.egg-info beside the sources.
    source = shutil.copytree(FIXTURE, root / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--quiet"]
        + ["--target", str(site), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip could not install the fixture plugin:\n{done.stdout}\n{done.stderr}"
    assert (site / "mapsmith_hello" / "count_vertices.toml").is_file()  # the contract ships as package data
    return site


def _env(workspace: Path, site: Path, **extra: str) -> dict[str, str]:
    env = {"MAPSMITH_WORKSPACE": str(workspace), "PYTHONPATH": str(site), "MAPSMITH_QGIS_ALGORITHMS": "0"}
    return {**env, **extra}


async def _converse(workspace: Path, site: Path) -> dict[str, Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mapsmith"], env=_env(workspace, site), cwd=str(workspace)
    )
    calls = {
        "info": ("server_info", {}),
        "catalog": (
            "list_operations",
            {"query": "number of vertices in each feature", "input_kind": "vector", "detail": True},
        ),
        "raster_catalog": ("list_operations", {"input_kind": "raster"}),
        "run": (
            "run_operation",
            {"operation": OPERATION, "arguments": {"input_path": "shapes.gpkg", "output_path": "shapes_vertices.gpkg"}},
        ),
        "misspelt": ("run_operation", {"operation": "count_vertex", "arguments": {}}),
        "bad_argument": (
            "run_operation",
            {"operation": OPERATION, "arguments": {"input_path": "shapes.gpkg", "output": "x.gpkg"}},
        ),
        "provenance": ("get_provenance", {"path": "shapes_vertices.gpkg"}),
        # Its own output already has vertex_count: the plugin refuses rather than overwrite the field.
        "field_exists": (
            "run_operation",
            {"operation": OPERATION, "arguments": {"input_path": "shapes_vertices.gpkg", "output_path": "again.gpkg"}},
        ),
    }
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read_stream, write_stream), ClientSession(read_stream, write_stream) as session:
        await session.initialize()
        for key, (tool, arguments) in calls.items():
            result = await session.call_tool(tool, arguments)
            out[key] = (bool(result.is_error), result.structured_content or json.loads(result.content[0].text))
    return out


def test_installed_plugin_is_listed_run_and_recorded(workspace: Path, plugin_site: Path) -> None:
    # Hand counts, closing coordinates included: the triangle's ring is 3 corners + the closing
    # point = 4; the square with a square hole is 5 (shell) + 5 (hole) = 10.
    triangle = Polygon([(500_000, 5_000_000), (500_100, 5_000_000), (500_000, 5_000_100)])
    holed = Polygon(
        [(500_200, 5_000_000), (500_300, 5_000_000), (500_300, 5_000_100), (500_200, 5_000_100)],
        [[(500_225, 5_000_025), (500_275, 5_000_025), (500_275, 5_000_075), (500_225, 5_000_075)]],
    )
    write_layer(workspace / "shapes.gpkg", [triangle, holed], "EPSG:32610", name=["triangle", "holed"])

    replies = anyio.run(_converse, workspace, plugin_site)

    failed, info = replies["info"]
    assert not failed
    plugins = {p["plugin"]: p for p in info["plugins"]}
    assert plugins["hello"]["distribution"].replace("_", "-").lower() == DISTRIBUTION
    assert plugins["hello"]["version"] == "0.1.0"
    assert info["operations"] == BUILT_IN + 1  # the built-in contracts and the plugin's

    failed, catalog = replies["catalog"]
    # found by describing the goal, first among the candidates
    entry = catalog["candidates"][0]
    assert entry["operation"] == OPERATION and entry["output_kind"] == "dataset:vector"
    assert entry["summary"].startswith("Add a vertex_count field")
    assert entry["example"]["arguments"]["input_path"]
    assert OPERATION not in [op["operation"] for op in replies["raster_catalog"][1]["candidates"]]

    failed, run = replies["run"]
    assert not failed, run
    # A third party's operation is experimental until promoted on evidence: the answer says so.
    assert run["status"] == "ok_with_warnings"
    assert [w["code"] for w in run["warnings"]] == ["EXPERIMENTAL_OPERATION"]
    assert run["engine"]["name"] == "shapely" and run["engine"]["stack"] == "opensource"
    assert run["answer"] == {"feature_count": 2, "total_vertex_count": 14}
    out = read(workspace / "shapes_vertices.gpkg").set_index("name")
    assert out["vertex_count"].to_dict() == {"triangle": 4, "holed": 10}
    assert out.crs.to_epsg() == 32610
    assert out.geometry["holed"].equals(holed)  # geometries are written unchanged

    record = manifest(workspace / "shapes_vertices.gpkg")
    assert published_schema_errors(record) == []
    assert record["operation"] == OPERATION
    assert record["x-mapsmith:plugin"]["version"] == "0.1.0"
    assert record["x-mapsmith:plugin"]["maturity"] == "experimental"
    assert record["engine"]["name"] == "shapely"
    assert record["x-mapsmith:engine_choice"] == {"stack": "opensource", "engine": "shapely"}
    checks = {c["name"]: c["passed"] for c in record["verification"]}
    assert checks["crs_present"] and checks["crs_matches"] and checks["feature_count_exact"]

    failed, provenance = replies["provenance"]
    assert not failed and provenance["output_matches"] is True
    assert [hop["operation"] for hop in provenance["lineage"]["producers"]] == [OPERATION]

    # A plugin's domain error reaches the client as a built-in one does, and the runner keeps its
    # promise for it too: no dataset at output_path, a failure record beside it.
    failed, refused = replies["field_exists"]
    assert failed and refused["code"] == "FIELD_EXISTS" and refused["hint"]
    assert not (workspace / "again.gpkg").exists()
    failure = json.loads((workspace / "again.gpkg.failed.provenance.json").read_text("utf-8"))
    assert failure["x-mapsmith:error"]["code"] == "FIELD_EXISTS"
    assert published_schema_errors(failure) == []

    # The plugin's contract is checked like a built-in one: names are suggested, extras refused.
    failed, misspelt = replies["misspelt"]
    assert failed and misspelt["code"] == "UNKNOWN_OPERATION"
    assert misspelt["evidence"]["suggestions"][0] == OPERATION
    failed, bad = replies["bad_argument"]
    assert failed and bad["code"] == "UNKNOWN_ARGUMENT"
    assert bad["evidence"]["accepted"] == ["input_path", "layer", "output_path", "overwrite", "output_layer"]
    assert "'output_path'" in bad["message"]


def test_allow_list_leaves_the_plugin_out(workspace: Path, plugin_site: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env.update(_env(workspace, plugin_site, MAPSMITH_PLUGINS="opensource"))
    done = subprocess.run(
        [sys.executable, "-m", "mapsmith", "info"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert [p["plugin"] for p in info["plugins"]] == ["opensource"]
    assert info["operations"] == BUILT_IN
