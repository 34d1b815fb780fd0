"""QGIS algorithms through MCP: found by list_operations and run by run_operation over stdio, on the
default (opensource) stack, with a valid manifest; and a success that wrote nothing is a failure.

Runs in the nox ``qgis`` session against a real QGIS (tests/stacks/test_qgis_algorithms.py says how
it is found and why it never skips there).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

import mapsmith_qgis
from conftest import published_schema_errors
from mapsmith.errors import MapSmithError
from mcp_client import call, mcp_session

QGIS = next((p for n in mapsmith_qgis.EXECUTABLE_NAMES if (p := shutil.which(n, path="/usr/bin:/bin"))), None)
pytestmark = pytest.mark.skipif(QGIS is None, reason="qgis_process is not installed")
if QGIS is None and os.environ.get("MAPSMITH_QGIS_REQUIRED") == "1":
    raise RuntimeError("MAPSMITH_QGIS_REQUIRED=1 but no qgis_process is installed")


def _square(workspace: Path) -> None:
    import geopandas as gpd
    from shapely.geometry import box

    gpd.GeoDataFrame({"name": ["a"]}, geometry=[box(500000, 5000000, 500100, 5000100)], crs="EPSG:32633").to_file(
        workspace / "square.gpkg"
    )


def test_a_qgis_algorithm_is_found_and_run_over_stdio(workspace: Path) -> None:
    _square(workspace)

    async def converse() -> tuple[Any, Any]:
        async with mcp_session(workspace, MAPSMITH_QGIS_ALGORITHMS="1") as (session, _):
            found = await call(
                session, "list_operations", {"query": "voronoi polygons from points", "engine": "lexical"}
            )
            ran = await call(
                session,
                "run_operation",
                {
                    "operation": "qgis:native:buffer",
                    "arguments": {"input_path": "square.gpkg", "distance": 10, "segments": 2, "output_path": "b.gpkg"},
                },
            )
            return found, ran

    found, ran = anyio.run(converse)
    assert "qgis:qgis:voronoipolygons" in [c["operation"] for c in found.data["candidates"]][:5]
    assert not ran.is_error, ran.data
    # 100 m square, 10 m buffer, 2 segments per quarter circle: a regular octagon of radius 10 m at the corners
    expected = 100**2 + 4 * 100 * 10 + 0.5 * 8 * 10**2 * math.sin(2 * math.pi / 8)
    import geopandas as gpd

    assert gpd.read_file(workspace / "b.gpkg").geometry.area.sum() == pytest.approx(expected, rel=1e-9)
    manifest = json.loads((workspace / "b.gpkg.provenance.json").read_text("utf-8"))
    assert published_schema_errors(manifest) == []
    assert manifest["engine"]["name"] == "qgis" and manifest["x-mapsmith:engine_choice"]["stack"] == "qgis"


def test_a_success_that_wrote_nothing_is_a_failure(make_app: Any, workspace: Path, monkeypatch: Any) -> None:
    import mapsmith_qgis.run

    _square(workspace)
    monkeypatch.setenv(mapsmith_qgis.ALGORITHMS_ENV, "1")
    app = make_app()

    def reports_success(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        # what qgis_process prints for a run that ended well, with no file written
        return subprocess.CompletedProcess(argv, 0, stdout=b'{"results": {"OUTPUT": "nowhere.gpkg"}}', stderr=b"")

    monkeypatch.setattr(mapsmith_qgis.run.subprocess, "run", reports_success)
    with pytest.raises(MapSmithError) as err:
        app.run("qgis:native:buffer", {"input_path": "square.gpkg", "distance": 10, "output_path": "b.gpkg"})
    assert err.value.code == "QGIS_NO_OUTPUT"
    assert not (workspace / "b.gpkg").exists()
    assert list(workspace.glob("b.gpkg.failed*.provenance.json"))
