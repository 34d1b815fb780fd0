"""What the engine sandbox costs: start-up, the start of one worker, and the overhead of a small call.

Three measurements, each sandbox on against off (``MAPSMITH_SANDBOX``), runs interleaved so that a
change of machine load hits both sides alike:

- start-up: spawning ``python -m mapsmith`` through the MCP SDK's stdio client to the answer of
  ``tools/list`` (with the sandbox on, the server also starts its first worker in the background);
- worker start: one ``bwrap`` worker from spawn to its ready frame (the engines it warms imported),
  timed in this process with the launcher the server uses;
- per call: ``describe_dataset`` of a two-point GeoPackage and ``buffer_layer`` of it to FlatGeobuf
  over one MCP session, after one untimed warm-up call (so the worker is up and engines are imported).

Writes ``benchmarks/results/sandbox.json``. It measures only and asserts nothing.

    python benchmarks/bench_sandbox.py [--runs 7] [--calls 15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "sandbox.json"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))


def _env(workspace: Path, sandbox: str) -> dict[str, str]:
    env = {"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_SANDBOX": sandbox, "MAPSMITH_QGIS_ALGORITHMS": "0"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


async def _session(workspace: Path, sandbox: str, body: Any) -> Any:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mapsmith"], env=_env(workspace, sandbox), cwd=str(workspace)
    )
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await body(session, t0)


def startup(workspace: Path, sandbox: str) -> float:
    async def body(session: Any, t0: float) -> float:
        await session.list_tools()
        return time.perf_counter() - t0

    return anyio.run(_session, workspace, sandbox, body)


def per_call(workspace: Path, sandbox: str, calls: int) -> dict[str, list[float]]:
    async def body(session: Any, t0: float) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"describe_dataset": [], "buffer_layer": []}
        requests = {
            "describe_dataset": {"input_path": "pts.gpkg"},
            "buffer_layer": {
                "input_path": "pts.gpkg",
                "distance_meters": 10.0,
                "output_path": f"buffer_{sandbox}.fgb",
                "overwrite": True,
            },
        }
        for tool, args in requests.items():
            result = await session.call_tool(tool, args)  # warm-up: worker up, engines imported
            assert not result.is_error, result.content[0].text
        for _ in range(calls):
            for tool, args in requests.items():
                t = time.perf_counter()
                result = await session.call_tool(tool, args)
                times[tool].append(time.perf_counter() - t)
                assert not result.is_error, result.content[0].text
        return times

    return anyio.run(_session, workspace, sandbox, body)


def worker_starts(workspace: Path, runs: int) -> list[float]:
    from mapsmith.sandbox import build_app
    from mapsmith.sandbox.proxy import SandboxedMapSmith

    app = build_app({**os.environ, **_env(workspace, "on")}, prestart=False)
    assert isinstance(app, SandboxedMapSmith), "no sandbox on this machine"
    out = []
    try:
        for _ in range(runs):
            worker = app.pool.spawn()  # the pool's own factory: the same plan the server uses
            out.append(worker.start_seconds)
            worker.close()
    finally:
        app.close()
    return out


def _bwrap_version() -> str:
    import shutil
    import subprocess

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "not installed"
    return subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "median_s": round(statistics.median(values), 4),
        "min_s": round(min(values), 4),
        "max_s": round(max(values), 4),
        "runs": len(values),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()
    from common import machine
    from shapely.geometry import Point

    from layers import write_layer

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="mapsmith-bench-sandbox-") as tmp:
        workspace = Path(tmp)
        write_layer(workspace / "pts.gpkg", [Point(500000, 4000000), Point(500100, 4000000)], "EPSG:32633")
        startup(workspace, "on")  # untimed: a warm disk cache for both sides
        starts: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(args.runs):
            for mode in ("off", "on"):
                starts[mode].append(startup(workspace, mode))
        calls = {mode: per_call(workspace, mode, args.calls) for mode in ("off", "on")}
        workers = worker_starts(workspace, args.runs)
    load_after = os.getloadavg()[0]

    call_summary = {
        tool: {
            "in_process": _summary(calls["off"][tool]),
            "sandbox": _summary(calls["on"][tool]),
            "overhead_median_s": round(statistics.median(calls["on"][tool]) - statistics.median(calls["off"][tool]), 4),
        }
        for tool in ("describe_dataset", "buffer_layer")
    }
    result = {
        "benchmark": "sandbox",
        "description": "What running engines in the bubblewrap worker costs: server start to tools/list, one "
        "worker's start, and the per-call time of a small describe_dataset and buffer_layer over MCP stdio, "
        "sandbox on against in-process.",
        "command": f"python benchmarks/bench_sandbox.py --runs {args.runs} --calls {args.calls}",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            **machine(["mcp", "pyogrio"], {"bubblewrap": _bwrap_version()}),
            "implementation": platform.python_implementation(),
            "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)},
        },
        "startup_to_tools_list": {
            "in_process": _summary(starts["off"]),
            "sandbox": _summary(starts["on"]),
            "overhead_median_s": round(statistics.median(starts["on"]) - statistics.median(starts["off"]), 4),
        },
        "worker_start": _summary(workers),
        "per_call": call_summary,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
