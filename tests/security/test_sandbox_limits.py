"""The sandboxed worker dies, the server does not: crashes, the wall-time limit, the memory limit, cancellation.

Each through a real MCP client over stdio with ``MAPSMITH_SANDBOX=on``, each followed by its clean twin:
the next call on the same session is answered normally (by a fresh worker). The slow call is a DuckDB
count over ten to the eleventh rows (about a minute and a half on this machine: far longer than any
limit below); the call that never ends is a VRT reading a FIFO; the big allocation is the band
statistics of a 30000 x 30000 float32 GeoTIFF that is sparse on disk (3.6 GB of cells in about a
hundred kilobytes).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin
from shapely.geometry import Point

import mapsmith
from layers import write_layer
from mapsmith.sandbox.launcher import TIMEOUT_GRACE_S
from mcp_client import call, mcp_session
from security.sandbox_helpers import env, require_sandbox, vrt_in_csv, worker_pids

pytestmark = pytest.mark.mcp

SLOW_SQL = {
    "sql": "SELECT count(*) AS n, ST_Point(0, 0) AS geom FROM range(100000000000)",
    "output_crs": "EPSG:4326",
    "output_path": "slow.gpkg",
}
CHECKOUT = str(Path(mapsmith.__file__).resolve().parents[2])


def _points(workspace: Path) -> None:
    write_layer(workspace / "pts.gpkg", [Point(500000, 4000000), Point(500100, 4000000)], "EPSG:32633", name=["a", "b"])


def _described_two_points(reply: Any) -> None:
    assert not reply.is_error, reply.data
    assert reply.data["answer"]["described"][0]["feature_count"] == 2


async def _wait_for_worker(workspace: Path, timeout_s: float = 150.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = worker_pids(workspace)
        if pids:
            return pids
        await anyio.sleep(0.2)
    raise AssertionError("no sandboxed worker appeared")


def test_a_worker_killed_by_sigsegv_mid_call_is_engine_crashed_and_the_next_call_works(workspace: Path) -> None:
    require_sandbox(workspace)
    _points(workspace)
    token = "tok" + os.urandom(16).hex() + os.urandom(16).hex()

    async def conversation() -> tuple[Any, Any, dict[str, str], list[int]]:
        async with mcp_session(workspace, **env("on", MAPSMITH_HTTP_TOKEN=token)) as (session, _):
            pids = await _wait_for_worker(workspace)
            # The worker's real environment, read from the host: no token, and the sandbox's own marker.
            environ = dict(
                item.split("=", 1) for item in Path(f"/proc/{pids[0]}/environ").read_text().split("\0") if "=" in item
            )
            results: dict[str, Any] = {}

            async def slow() -> None:
                results["slow"] = await call(session, "run_sql", SLOW_SQL)

            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                await anyio.sleep(2.0)  # the count is running
                busy = worker_pids(workspace)
                for pid in busy:
                    os.kill(pid, signal.SIGSEGV)
            after = await call(session, "describe_dataset", {"input_path": "pts.gpkg"})
            return results["slow"], after, environ, busy

    crashed, after, environ, busy = anyio.run(conversation)
    assert environ.get("MAPSMITH_IN_SANDBOX") == "1" and "MAPSMITH_HTTP_TOKEN" not in environ
    assert token not in json.dumps(environ)
    assert busy, "the worker was found while the count ran"
    assert crashed.is_error and crashed.data["code"] == "ENGINE_CRASHED", crashed.data
    assert crashed.data["evidence"]["signal"] == "SIGSEGV"
    assert crashed.data["evidence"]["exit_code"] == 128 + signal.SIGSEGV  # bwrap's report of a signalled child
    tail = crashed.data["evidence"]["stderr_tail"]
    assert crashed.data["evidence"]["fatal_error"] == "Fatal Python error: Segmentation fault"  # faulthandler's
    assert "most recent call first" in tail  # ... report, with the Python stack ...
    assert CHECKOUT not in json.dumps(crashed.data) and "<outside the workspace>" in tail  # ... its host paths redacted
    _described_two_points(after)


def test_the_wall_time_limit_stops_a_call_with_call_timeout_and_the_next_call_works(workspace: Path) -> None:
    """A VRT whose source is a FIFO: GDAL's open() blocks forever on a pipe with no writer, in C, where no
    timer inside the process can reach it. Only the worker's death stops it."""
    require_sandbox(workspace)
    _points(workspace)
    os.mkfifo(workspace / "pipe.csv")
    vrt_in_csv(workspace / "hang.csv", str(workspace / "pipe.csv"))

    async def conversation() -> tuple[Any, float, Any]:
        async with mcp_session(workspace, **env("on", MAPSMITH_CALL_TIMEOUT_S="3")) as (session, _):
            await call(session, "describe_dataset", {"input_path": "pts.gpkg"})  # a started worker: time only the call
            t0 = time.monotonic()
            hung = await call(session, "describe_dataset", {"input_path": "hang.csv"})
            elapsed = time.monotonic() - t0
            return hung, elapsed, await call(session, "describe_dataset", {"input_path": "pts.gpkg"})

    hung, elapsed, after = anyio.run(conversation)
    assert hung.is_error and hung.data["code"] == "CALL_TIMEOUT", hung.data
    assert hung.data["evidence"] == {"method": "run", "timeout_s": 3.0}
    # stopped at the limit plus the grace engines get to stop themselves (2 s), not never
    assert 3.0 + TIMEOUT_GRACE_S <= elapsed < 3.0 + TIMEOUT_GRACE_S + 15.0
    _described_two_points(after)


def _raster(path: Path, size: int, values: np.ndarray | None = None) -> Path:
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=size,
        height=size,
        count=1,
        dtype="float32",
        crs="EPSG:32633",
        transform=from_origin(500000, 4000000, 1, 1),
        tiled=size >= 256,
        compress="deflate",
        sparse_ok=True,
    ) as dst:
        if values is not None:
            dst.write(values.astype("float32"), 1)
    return path


def test_the_memory_limit_turns_a_huge_read_into_memory_limit_and_a_small_one_still_works(workspace: Path) -> None:
    require_sandbox(workspace)
    _raster(workspace / "huge.tif", 30000)  # 30000^2 float32 cells = 3.6 GB once read
    # 2 x 2 cells 1, 2, 3, 4: mean 2.5, minimum 1, maximum 4.
    _raster(workspace / "small.tif", 2, np.array([[1, 2], [3, 4]]))

    async def conversation() -> tuple[Any, Any, Any]:
        async with mcp_session(
            workspace, **env("on", MAPSMITH_WORKER_MEMORY_MB="1500", MAPSMITH_MAX_RASTER_CELLS="2000000000")
        ) as (session, _):
            stats = {"operation": "band_statistics"}
            huge = await call(session, "run_operation", {**stats, "arguments": {"input_path": "huge.tif"}})
            small = await call(session, "run_operation", {**stats, "arguments": {"input_path": "small.tif"}})
            info = await call(session, "server_info", {})
            return huge, small, info

    huge, small, info = anyio.run(conversation)
    assert huge.is_error and huge.data["code"] == "MEMORY_LIMIT", huge.data
    assert huge.data["evidence"]["memory_limit_mb"] == 1500
    assert not small.is_error, small.data
    band = small.data["answer"]["bands"][0]
    assert (band["min"], band["max"], band["mean"]) == (1.0, 4.0, 2.5)
    assert info.data["sandbox"]["worker_memory_mb"] == 1500


def test_cancel_kills_the_worker_of_that_call_and_the_next_call_gets_a_fresh_one(workspace: Path) -> None:
    require_sandbox(workspace)
    _points(workspace)
    from mapsmith.sandbox import SandboxedMapSmith, build_app

    # One worker: the one running the call is the only one there is, so every pid seen must go.
    app = build_app({"MAPSMITH_WORKSPACE": str(workspace), **env("on", MAPSMITH_WORKERS="1")})
    assert isinstance(app, SandboxedMapSmith)
    try:
        outcome: dict[str, Any] = {}

        def slow() -> None:
            try:
                app.run("run_sql", SLOW_SQL)
            except mapsmith.errors.MapSmithError as exc:
                outcome["error"] = exc.to_dict()

        thread = threading.Thread(target=slow)
        thread.start()
        deadline = time.monotonic() + 60
        while not app.pool.calls_running():  # the call has reached a worker
            assert time.monotonic() < deadline
            time.sleep(0.1)
        old = app.pool.worker_pids()
        time.sleep(1.0)
        t0 = time.monotonic()
        assert app.cancel(thread.ident) is True
        thread.join(timeout=30)
        assert not thread.is_alive() and time.monotonic() - t0 < 15
        assert outcome["error"]["code"] == "CALL_CANCELLED"
        assert all(not Path(f"/proc/{pid}").exists() for pid in old)  # the worker (bwrap and all) is gone
        assert app.cancel(thread.ident) is False  # nothing runs under that thread any more
        result = app.run("describe_dataset", {"input_path": "pts.gpkg"})
        assert result.answer["described"][0]["feature_count"] == 2
        assert set(app.pool.worker_pids()).isdisjoint(old)
    finally:
        app.close()


def test_an_mcp_cancellation_stops_the_worker(workspace: Path) -> None:
    require_sandbox(workspace)

    async def conversation() -> tuple[list[int], bool]:
        # One worker: the pre-started one runs the call, so the pids seen are the busy worker's alone.
        async with mcp_session(workspace, **env("on", MAPSMITH_WORKERS="1")) as (session, _):
            await _wait_for_worker(workspace)
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.call_tool, "run_sql", SLOW_SQL)
                await anyio.sleep(2.5)  # the count is running in the worker
                busy = worker_pids(workspace)
                tg.cancel_scope.cancel()  # the client gives up: the SDK sends notifications/cancelled
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in busy):
                await anyio.sleep(0.2)
            return busy, any(Path(f"/proc/{p}").exists() for p in busy)

    busy, still_running = anyio.run(conversation)
    assert busy and not still_running
