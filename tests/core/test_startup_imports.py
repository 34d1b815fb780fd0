"""Start-up stays light: building the service and the MCP server imports no geospatial engine.

The cold start to ``tools/list`` is a benchmark (docs/benchmarks.md); this test only guards the
cause that would break it, an engine imported at module level by the core or a plugin.
"""

from __future__ import annotations

import json
import subprocess
import sys

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
