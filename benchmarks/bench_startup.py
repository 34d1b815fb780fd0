"""Cold start of the MCP server: process spawn to the answer of ``tools/list``, over stdio.

Each run starts a fresh ``python -m mapsmith`` through the MCP SDK's own stdio client -- the way a
real client starts it -- then ``initialize`` and ``list_tools``; the clock stops when the tool list
arrives. "Cold" means a new process, not a cold disk cache: one untimed start comes first. Two
floors are timed as often, interleaved with the server runs: ``python -c pass``, which no Python
server can beat, and importing the MCP SDK's server modules, which no server on the SDK can beat.
Optional breakdowns say where the time goes: ``-X importtime`` of ``mapsmith.server`` and the
phases of ``python -m mapsmith`` up to serving. Always recorded: which engine modules (geopandas,
shapely, pyproj, pyogrio, duckdb) the server imported before any tool was called (there must be none).

Writes ``benchmarks/results/startup.json``; ``benchmarks/render.py`` turns it into
``docs/benchmarks.md``. It measures only: it never edits the code it measures, and it never asserts
-- whether the target was met is recorded, and the test suite checks no timing.

    python benchmarks/bench_startup.py [--runs 9] [--no-breakdown]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "startup.json"
TARGET_MEDIAN_SECONDS = 1.5
# Top-level modules that are engines: the server must not import them before a tool is called.
ENGINE_MODULES = ("geopandas", "shapely", "pyproj", "pyogrio", "duckdb")
TOP_IMPORTS = 15
# What any server on the MCP SDK pays before its own code runs: the SDK modules `python -m mapsmith`
# needs to serve stdio. Importing any of them runs the `mcp` package's __init__.
SDK_IMPORT = "import mcp.server.lowlevel, mcp.server.stdio"
COMMAND = "python benchmarks/bench_startup.py --runs {runs}"

# Runs in the server process ahead of `python -m mapsmith`: an import hook that records the first
# import of each engine module, appended to a file at once (the server may be killed at the end).
_ENGINE_SPY = """
import os, runpy, sys
ENGINES = set(os.environ["MAPSMITH_BENCH_ENGINES"].split(","))
LOG = os.environ["MAPSMITH_BENCH_ENGINE_LOG"]
class _Spy:
    def find_spec(self, name, path=None, target=None):
        if name in ENGINES:
            with open(LOG, "a") as f:
                f.write(name + "\\n")
        return None
sys.meta_path.insert(0, _Spy())
sys.argv = ["mapsmith"]
runpy.run_module("mapsmith", run_name="__main__", alter_sys=True)
"""

# The phases of `python -m mapsmith` up to serving, timed in one fresh process.
_PHASES = """
import json, time
t0 = time.perf_counter()
import mapsmith.cli
t1 = time.perf_counter()
from mapsmith.app import MapSmith
t2 = time.perf_counter()
app = MapSmith()
t3 = time.perf_counter()
from mapsmith.server import build_server
t4 = time.perf_counter()
build_server(app)
t5 = time.perf_counter()
print(json.dumps({
    "import mapsmith.cli": t1 - t0,
    "import mapsmith.app": t2 - t1,
    "MapSmith()": t3 - t2,
    "import mapsmith.server": t4 - t3,
    "build_server(app)": t5 - t4,
}))
"""


def _server_env(workspace: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    # What river_parcels.py passes: the caller's MAPSMITH_* settings and a workspace. The SDK adds
    # its default environment (PATH, HOME, ...).
    env = {k: v for k, v in os.environ.items() if k.startswith("MAPSMITH_")}
    env["MAPSMITH_WORKSPACE"] = str(workspace)
    env.update(extra or {})
    return env


async def _one_cold_start(workspace: Path, args: list[str], env: dict[str, str]) -> tuple[float, list[str]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(workspace))
    start = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        elapsed = time.perf_counter() - start
    return elapsed, sorted(t.name for t in listed.tools)


def cold_start(workspace: Path) -> tuple[float, list[str]]:
    """Seconds from spawn to the ``tools/list`` answer of one fresh server, and the tools listed."""
    elapsed, tools = anyio.run(_one_cold_start, workspace, ["-m", "mapsmith"], _server_env(workspace))
    if not tools:
        raise SystemExit("bench_startup: the server listed no tools")
    return elapsed, tools


def time_python(code: str) -> float:
    """Seconds for ``python -c code`` in a fresh process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def measure(runs: int, workspace: Path) -> tuple[dict[str, list[float]], list[str]]:
    """Time the server and both floors ``runs`` times each, interleaved.

    Interleaving makes a burst of load from a neighbour on a shared machine fall on all three
    series alike, rather than on whichever happened to be running.
    """
    times: dict[str, list[float]] = {"server": [], "interpreter_floor": [], "sdk_import": []}
    tools: list[str] = []
    for _ in range(runs):
        elapsed, tools = cold_start(workspace)
        times["server"].append(elapsed)
        times["interpreter_floor"].append(time_python("pass"))
        times["sdk_import"].append(time_python(SDK_IMPORT))
    return times, tools


def engines_imported_before_a_tool_call(workspace: Path) -> list[str]:
    """Engine modules the server imported while starting and answering ``tools/list``."""
    log = workspace / "engines-imported.txt"
    log.unlink(missing_ok=True)
    env = _server_env(
        workspace, {"MAPSMITH_BENCH_ENGINES": ",".join(ENGINE_MODULES), "MAPSMITH_BENCH_ENGINE_LOG": str(log)}
    )
    anyio.run(_one_cold_start, workspace, ["-c", _ENGINE_SPY], env)
    return sorted(set(log.read_text().split())) if log.exists() else []


def phases(workspace: Path) -> dict[str, float]:
    env = {**os.environ, **_server_env(workspace)}
    out = subprocess.run(
        [sys.executable, "-c", _PHASES], check=True, capture_output=True, text=True, env=env, cwd=workspace
    )
    return {k: round(v, 4) for k, v in json.loads(out.stdout).items()}


def import_breakdown(module: str = "mapsmith.server") -> dict[str, Any]:
    """``-X importtime`` of ``module``: the slowest imports (cumulative) and the time by top-level package."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], check=True, capture_output=True, text=True
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, self_us, cumulative_us, name = (part.strip() for part in line.replace("import time:", "|", 1).split("|"))
        rows.append((name, int(self_us), int(cumulative_us)))
    by_package: dict[str, int] = {}
    for name, self_us, _ in rows:
        top = name.split(".")[0]
        by_package[top] = by_package.get(top, 0) + self_us
    total_us = sum(self_us for _, self_us, _ in rows)
    # A module imported again inside a circular import shows up twice; keep its larger figure.
    cumulative: dict[str, int] = {}
    for name, _, cumulative_us in rows:
        cumulative[name] = max(cumulative.get(name, 0), cumulative_us)
    slowest = sorted(cumulative.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_IMPORTS]
    return {
        "command": f'python -X importtime -c "import {module}"',
        "total_seconds": round(total_us / 1e6, 4),
        "by_package_seconds": {
            k: round(v / 1e6, 4) for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])[:TOP_IMPORTS]
        },
        "slowest_cumulative_seconds": [{"module": n, "seconds": round(c / 1e6, 4)} for n, c in slowest],
    }


def _summary(times: list[float]) -> dict[str, Any]:
    return {
        "median_seconds": round(statistics.median(times), 4),
        "min_seconds": round(min(times), 4),
        "max_seconds": round(max(times), 4),
        "runs_seconds": [round(t, 4) for t in times],
    }


def machine() -> dict[str, Any]:
    from importlib import metadata

    import mapsmith

    return {
        # What `nproc` prints: the CPUs this process may run on.
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "mapsmith_version": mapsmith.__version__,
        "mcp_sdk_version": metadata.version("mcp"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="cold starts to time (default 9)")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the import-time and phase breakdowns")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"where to write (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    load_before = os.getloadavg()[0]  # a busy neighbour on a shared machine shows here
    with tempfile.TemporaryDirectory(prefix="mapsmith-bench-") as tmp:
        workspace = Path(tmp).resolve()
        # One untimed start first, so every timed run sees the same warm OS file cache and .pyc files.
        cold_start(workspace)
        times, tools = measure(args.runs, workspace)
        server, floor, sdk = times["server"], times["interpreter_floor"], times["sdk_import"]
        load_after = os.getloadavg()[0]
        engines = engines_imported_before_a_tool_call(workspace)
        breakdown = None if args.no_breakdown else {"phases_seconds": phases(workspace), "imports": import_breakdown()}

    median = statistics.median(server)
    result: dict[str, Any] = {
        "benchmark": "startup",
        "description": "Seconds from spawning `python -m mapsmith` to the answer of tools/list, over stdio, "
        "with the MCP SDK's stdio client (initialize, then list_tools); a fresh process each run.",
        "command": COMMAND.format(runs=args.runs),
        "date": dt.date.today().isoformat(),
        "machine": {**machine(), "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)}},
        "runs": args.runs,
        "tools_listed": len(tools),
        "server": _summary(server),
        "interpreter_floor": {"command": "python -c pass", **_summary(floor)},
        "sdk_import": {"command": f'python -c "{SDK_IMPORT}"', **_summary(sdk)},
        "target": {
            "median_seconds": TARGET_MEDIAN_SECONDS,
            "met": median < TARGET_MEDIAN_SECONDS,
        },
        "engines_imported_before_a_tool_call": engines,
    }
    if breakdown is not None:
        result["breakdown"] = breakdown
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")

    print(
        f"tools/list cold start, {args.runs} runs: median {median:.3f} s "
        f"(min {min(server):.3f}, max {max(server):.3f}); python -c pass median {statistics.median(floor):.3f} s; "
        f"MCP SDK import median {statistics.median(sdk):.3f} s"
    )
    print(f"target median < {TARGET_MEDIAN_SECONDS} s: {'met' if result['target']['met'] else 'NOT met'}")
    print(f"engines imported before a tool call: {', '.join(engines) or 'none'}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
