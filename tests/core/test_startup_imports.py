"""Start-up stays light: building the service and the MCP server imports no geospatial engine
and starts no QGIS.

The cold start to ``tools/list`` is a benchmark (docs/benchmarks.md); these tests only guard the
causes that would break it: an engine imported at module level by the core or a plugin, and the
qgis stack probing ``qgis_process`` or loading its algorithms before one is asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENGINES = ("geopandas", "shapely", "pyproj", "pyogrio", "duckdb", "pyarrow", "pandas", "numpy")


def test_building_the_server_imports_no_engine(tmp_path) -> None:
    code = (
        "import json, sys\n"
        "from mapsmith.app import MapSmith\n"
        "from mapsmith.server import build_server\n"
        f"build_server(MapSmith({{'MAPSMITH_WORKSPACE': {str(tmp_path)!r}}}))\n"
        f"print(json.dumps(sorted(m for m in {ENGINES!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


@pytest.mark.skipif(os.name != "posix", reason="the stand-in qgis_process is a POSIX shell script")
def test_building_the_server_with_qgis_installed_starts_no_qgis(tmp_path: Path) -> None:
    calls = tmp_path / "qgis-calls.txt"
    qgis = tmp_path / "bin" / "qgis_process.bin"
    qgis.parent.mkdir()
    qgis.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\necho "QGIS 3.22.16-Białowieża \'Białowieża\' (x)"\n')
    qgis.chmod(0o755)
    code = (
        "import json, os\n"
        "from mapsmith.app import MapSmith\n"
        "from mapsmith.server import build_server\n"
        f"app = MapSmith({{'MAPSMITH_WORKSPACE': {str(tmp_path)!r}}})\n"
        "build_server(app)\n"
        "name = app.router.candidates('buffer_layer').stack\n"
        f"before = os.path.exists({str(calls)!r})\n"
        "states = [t['state'] for t in app.server_info()['toolboxes']]\n"
        "print(json.dumps([name, before, states]))\n"
    )
    env = {
        **os.environ,
        "PATH": f"{qgis.parent}:/usr/bin:/bin",
        "MAPSMITH_QGIS_ALGORITHMS": "1",
        "MAPSMITH_QGIS_CACHE": str(tmp_path / "cache"),
        "MAPSMITH_PLUGINS": "opensource,qgis",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)

    # no qgis_process ran to build the server and route an opensource operation; server_info then
    # asked the stack's availability (one --version) and still left the qgis: toolbox unloaded
    assert json.loads(out.stdout) == ["opensource", False, ["pending"]]
    assert calls.read_text().splitlines() == ["--version"]
