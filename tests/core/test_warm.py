"""MapSmith.warm: the engines a run may use are loaded before the first run, never raising.

A fresh interpreter per case: what is imported and opened is process state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from mapsmith.app import MapSmith
from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, StackSpec


def _fresh(code: str, workspace: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, cwd=workspace
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


WARM_THEN_LOOK = """
import json, sys
from mapsmith.app import MapSmith
from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database
app = MapSmith({"MAPSMITH_WORKSPACE": "."})
before = duckdb_database.cache_info().currsize
warmed = app.warm()
db = duckdb_database()
loaded = db.execute(
    "SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'spatial'").fetchone()[0]
print(json.dumps({"warmed": warmed, "before": before, "after": duckdb_database.cache_info().currsize,
    "spatial_loaded": loaded, "pandas": "pandas" in sys.modules, "pyproj": "pyproj" in sys.modules,
    "pyarrow.parquet": "pyarrow.parquet" in sys.modules}))
"""


def test_warm_opens_the_duckdb_database_with_spatial_and_imports_no_pandas(tmp_path: Path) -> None:
    seen = _fresh(WARM_THEN_LOOK, tmp_path)
    assert seen["warmed"] == {"opensource": "ready"}
    assert (seen["before"], seen["after"]) == (0, 1)  # the one database the DuckDB engines share, opened by warm
    assert seen["spatial_loaded"] is True
    assert seen["pyproj"] and seen["pyarrow.parquet"]
    assert seen["pandas"] is False  # the DuckDB paths never need it (tests/scale/test_engines_without_pandas.py)


RUN_AFTER_WARM = """
import json
from mapsmith.app import MapSmith
from mapsmith_opensource import duckdb_spatial
app = MapSmith({"MAPSMITH_WORKSPACE": ".", "MAPSMITH_ENGINE": "duckdb"})
app.warm()
calls = []
original = duckdb_spatial.connect
duckdb_spatial.connect = lambda *a, **k: calls.append(1) or original(*a, **k)
result = app.run("select_features", {"input_path": "pts.parquet", "where": "v > 1", "output_path": "out.parquet"})
print(json.dumps({"status": result.status, "engine": result.engine.get("name"), "connects": len(calls)}))
"""


def test_a_run_after_warm_opens_no_database_of_its_own(tmp_path: Path) -> None:
    import geopandas as gpd
    from shapely.geometry import Point

    gpd.GeoDataFrame({"v": [1, 2, 3]}, geometry=[Point(0, 0), Point(1, 1), Point(2, 2)], crs="EPSG:4326").to_parquet(
        tmp_path / "pts.parquet"
    )
    seen = _fresh(RUN_AFTER_WARM, tmp_path)
    assert seen == {"status": "ok", "engine": "duckdb", "connects": 0}
    kept = gpd.read_parquet(tmp_path / "out.parquet")
    assert sorted(kept["v"]) == [2, 3]


class _Stack:
    """A plugin registering one stack, with its availability and warm-up, and no operation."""

    def __init__(self, name: str, available: bool, warm: Callable[[Mapping[str, str]], None]) -> None:
        self.name, self.available, self.warm = name, available, warm

    @hookimpl
    def mapsmith_register_stacks(self, register) -> None:
        available = self.available
        register(StackSpec(self.name, "a test stack", availability=lambda: Availability(available), warm=self.warm))

    @hookimpl
    def mapsmith_register_operations(self, register) -> None:
        return None


def _broken(environ: Mapping[str, str]) -> None:
    raise OSError("the engine's library is missing")


def _never(environ: Mapping[str, str]) -> None:
    raise AssertionError("an unavailable stack must not be warmed")


def test_a_stack_that_cannot_warm_is_reported_not_raised(tmp_path: Path) -> None:
    app = MapSmith(
        {"MAPSMITH_WORKSPACE": str(tmp_path), "MAPSMITH_STACK": "broken"},
        extra_plugins=[("broken", _Stack("broken", True, _broken))],
    )
    warmed = app.warm()
    assert warmed["broken"] == "OSError: the engine's library is missing"
    assert warmed["opensource"] == "ready"  # every dataset is read through it, whatever stack is chosen


def test_an_unavailable_stack_is_not_warmed(tmp_path: Path) -> None:
    app = MapSmith(
        {"MAPSMITH_WORKSPACE": str(tmp_path), "MAPSMITH_STACK": "absent"},
        extra_plugins=[("absent", _Stack("absent", False, _never))],
    )
    assert app.warm() == {"opensource": "ready"}


def test_a_server_without_the_sandbox_warms_up_in_a_thread_and_says_when_done(tmp_path: Path) -> None:
    import time

    from mapsmith.sandbox import InProcessMapSmith, build_app

    env = {"MAPSMITH_WORKSPACE": str(tmp_path), "MAPSMITH_SANDBOX": "off"}
    app = build_app(env)
    assert isinstance(app, InProcessMapSmith)
    deadline = time.monotonic() + 60
    while app.server_info()["sandbox"].get("warm") == "warming" and time.monotonic() < deadline:
        time.sleep(0.05)
    sandbox = app.server_info()["sandbox"]
    assert sandbox["enabled"] is False and sandbox["warm"] == {"opensource": "ready"}
    # `mapsmith info` builds its app with prestart=False: nothing warmed, and nothing said of a warm-up
    assert "warm" not in build_app(env, prestart=False).server_info()["sandbox"]
