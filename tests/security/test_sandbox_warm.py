"""The sandboxed worker warms its engines (MapSmith.warm) after it says it is ready, before any call comes, and says
when it is done: server_info's sandbox.warm_workers."""

from __future__ import annotations

import time
from pathlib import Path

from security.sandbox_helpers import env, require_sandbox, worker_pids


def _mapped(pid: int, needle: str) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_a_prestarted_worker_loads_duckdb_spatial_before_any_call(workspace: Path) -> None:
    require_sandbox(workspace)
    from mapsmith.sandbox import SandboxedMapSmith, build_app

    app = build_app({"MAPSMITH_WORKSPACE": str(workspace), **env("on", MAPSMITH_WORKERS="1")})
    assert isinstance(app, SandboxedMapSmith)
    try:
        # the one worker is starting, warming or warm: counted once either way
        counts = app.server_info()["sandbox"]
        assert counts["warm_workers"] + counts["warming_workers"] == 1
        deadline = time.monotonic() + 60
        pids: list[int] = []
        while time.monotonic() < deadline:
            pids = worker_pids(workspace)
            if pids and all(_mapped(pid, "spatial.duckdb_extension") for pid in pids):
                break
            time.sleep(0.2)
        assert pids, "no worker started"
        # the extension's shared object is mapped into the worker: its DuckDB database is open, no call made
        assert all(_mapped(pid, "spatial.duckdb_extension") for pid in pids)
        assert app.pool.calls_running() == 0
        while time.monotonic() < deadline and app.server_info()["sandbox"]["warm_workers"] == 0:
            time.sleep(0.1)
        counts = app.server_info()["sandbox"]
        assert (counts["warm_workers"], counts["warming_workers"]) == (1, 0)
        (worker,) = app.pool._idle
        assert worker.warmed is not None and worker.warmed.get("opensource") == "ready"
    finally:
        app.close()
