"""Cold start of the MCP server: process spawn to the answer of ``tools/list``, over stdio.

Each run starts a fresh ``python -m mapsmith`` through the MCP SDK's own stdio client -- the way a
real client starts it -- then ``initialize`` and ``list_tools``; the clock stops when the tool list
arrives. The same server with the qgis plugin left out (as without QGIS) is timed as often, interleaved.
In the same session, after that clock has stopped, ``server_info`` is called and timed (the
first call in a fresh process: every stack's detection is in it), then ``list_operations`` (the
first listing of the whole catalogue, which loads the ``qgis:`` toolbox when QGIS is installed). The
size of the ``tools/list`` result, as JSON text, is recorded in characters; one more session runs with
the qgis stack's cache folder empty, as on the first start after installing QGIS (a one-off cost); which stacks were
available is recorded from ``server_info``, so a run without QGIS or Spark cannot pass for one with
them. "Cold" means a new process, not a cold disk cache: one untimed start comes first. Two
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
# A finder first on sys.meta_path sees every import, and also every importlib.util.find_spec, which a stack's
# availability check calls to ask whether a package is installed without importing it; those are not imports, so
# a call from importlib.util is left out (the spy before 2026-12-07 counted them: engines listed as imported that
# were only looked for).
_ENGINE_SPY = """
import os, runpy, sys
ENGINES = set(os.environ["MAPSMITH_BENCH_ENGINES"].split(","))
LOG = os.environ["MAPSMITH_BENCH_ENGINE_LOG"]
def _looked_for_only():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "find_spec" and frame.f_globals.get("__name__") == "importlib.util":
            return True
        frame = frame.f_back
    return False
class _Spy:
    def find_spec(self, name, path=None, target=None):
        if name in ENGINES and not _looked_for_only():
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
try:  # what the CLI builds: the service behind the OS sandbox where one can be built
    from mapsmith.sandbox import build_app
except ImportError:
    build_app = None
t4 = time.perf_counter()
if build_app is not None:
    build_app()
t5 = time.perf_counter()
from mapsmith.server import build_server
t6 = time.perf_counter()
build_server(app)
t7 = time.perf_counter()
print(json.dumps({
    "import mapsmith.cli": t1 - t0,
    "import mapsmith.app": t2 - t1,
    "MapSmith()": t3 - t2,
    **({"build_app() (the sandbox decision and worker start the CLI makes, after MapSmith())": t5 - t4}
       if build_app is not None else {}),
    "import mapsmith.server": t6 - t5,
    "build_server(app)": t7 - t6,
}))
"""


def _server_env(workspace: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    # What river_parcels.py passes: the caller's MAPSMITH_* settings and a workspace. The SDK adds
    # its default environment (PATH, HOME, ...).
    env = {k: v for k, v in os.environ.items() if k.startswith("MAPSMITH_")}
    env["MAPSMITH_WORKSPACE"] = str(workspace)
    env.update(extra or {})
    return env


async def _one_cold_start(
    workspace: Path, args: list[str], env: dict[str, str], follow_up: bool = False
) -> tuple[float, list[str], dict[str, Any]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(workspace))
    after: dict[str, Any] = {}
    start = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        elapsed = time.perf_counter() - start
        after["tools_list_characters"] = len(listed.model_dump_json(by_alias=True, exclude_none=True))
        names = {t.name for t in listed.tools}
        if follow_up and "server_info" in names:
            t0 = time.perf_counter()
            info = await session.call_tool("server_info", {})
            after["server_info_seconds"] = time.perf_counter() - t0
            after["server_info"] = info.structured_content or json.loads(info.content[0].text)  # type: ignore[union-attr]
        if follow_up and "list_operations" in names:
            t0 = time.perf_counter()
            await session.call_tool("list_operations", {})
            after["list_operations_seconds"] = time.perf_counter() - t0
    return elapsed, sorted(names), after


# The same server with the qgis plugin left out, as on a machine without QGIS: timed alongside, so the
# difference is what QGIS being installed costs a start (it should cost nothing).
WITHOUT_QGIS = {"MAPSMITH_PLUGINS": "opensource,sedona,esri"}


def cold_start(
    workspace: Path, follow_up: bool = False, extra_env: dict[str, str] | None = None
) -> tuple[float, list[str], dict[str, Any]]:
    """Seconds from spawn to the ``tools/list`` answer of one fresh server, the tools listed, and what followed."""
    env = _server_env(workspace, extra_env)
    elapsed, tools, after = anyio.run(_one_cold_start, workspace, ["-m", "mapsmith"], env, follow_up)
    if not tools:
        raise SystemExit("bench_startup: the server listed no tools")
    return elapsed, tools, after


def time_python(code: str) -> float:
    """Seconds for ``python -c code`` in a fresh process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def measure(runs: int, workspace: Path) -> tuple[dict[str, list[float]], list[str], dict[str, Any]]:
    """Time the server and both floors ``runs`` times each, interleaved; also what the last run saw after start.

    Interleaving makes a burst of load from a neighbour on a shared machine fall on all three
    series alike, rather than on whichever happened to be running.
    """
    times: dict[str, list[float]] = {
        "server": [],
        "server_without_qgis": [],
        "interpreter_floor": [],
        "sdk_import": [],
        "server_info": [],
        "list_operations": [],
    }
    tools: list[str] = []
    last: dict[str, Any] = {}
    for _ in range(runs):
        elapsed, tools, last = cold_start(workspace, follow_up=True)
        times["server"].append(elapsed)
        for series in ("server_info", "list_operations"):
            if f"{series}_seconds" in last:
                times[series].append(last[f"{series}_seconds"])
        times["server_without_qgis"].append(cold_start(workspace, extra_env=WITHOUT_QGIS)[0])
        times["interpreter_floor"].append(time_python("pass"))
        times["sdk_import"].append(time_python(SDK_IMPORT))
    return times, tools, last


def engines_imported_before_a_tool_call(workspace: Path) -> list[str]:
    """Engine modules the server imported while starting and answering ``tools/list``."""
    log = workspace / "engines-imported.txt"
    log.unlink(missing_ok=True)
    env = _server_env(
        workspace, {"MAPSMITH_BENCH_ENGINES": ",".join(ENGINE_MODULES), "MAPSMITH_BENCH_ENGINE_LOG": str(log)}
    )
    anyio.run(_one_cold_start, workspace, ["-c", _ENGINE_SPY], env, False)
    return sorted(set(log.read_text().split())) if log.exists() else []


def qgis_cache_cold(workspace: Path, empty_cache: Path) -> dict[str, Any] | None:
    """One session as on the first start after installing QGIS: the qgis stack's cache folder empty.

    ``server_info`` then runs ``qgis_process --version`` and ``list_operations`` asks QGIS for every
    algorithm (one QGIS start); both are written to the cache, which every later start reads. One run,
    not a series: it is a one-off cost. None when QGIS is not installed (nothing to measure).
    """
    elapsed, _, after = cold_start(workspace, follow_up=True, extra_env={"MAPSMITH_QGIS_CACHE": str(empty_cache)})
    qgis = next((s for s in after.get("server_info", {}).get("stacks", []) if s.get("name") == "qgis"), None)
    if qgis is None or not qgis.get("available"):
        return None
    return {
        "command": "MAPSMITH_QGIS_CACHE=<an empty folder> python -m mapsmith; server_info; list_operations",
        "server_seconds": round(elapsed, 4),
        "server_info_seconds": round(after["server_info_seconds"], 4),
        "list_operations_seconds": round(after.get("list_operations_seconds", 0.0), 4),
        "cache_files_written": sorted(p.name.split("-")[0] for p in empty_cache.glob("*.json")),
    }


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


def stacks_measured(info: dict[str, Any]) -> dict[str, Any]:
    """Which stacks the measured server could use, and their engines' versions, from its own server_info."""
    return {
        "available": sorted(s["name"] for s in info.get("stacks", []) if s.get("available")),
        "unavailable": {s["name"]: s.get("reason") for s in info.get("stacks", []) if not s.get("available")},
        "engines": info.get("engines", {}),
        "extras_installed": sorted(k for k, v in info.get("extras", {}).items() if v.get("installed")),
        "toolboxes_after_start": [f"{t['prefix']} {t['state']}" for t in info.get("toolboxes", [])],
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
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import common

    common.keep_bytecode()  # the untimed first start below writes the caches every timed start then reads

    if args.runs < 1:
        parser.error("--runs must be at least 1")

    load_before = os.getloadavg()[0]  # a busy neighbour on a shared machine shows here
    with tempfile.TemporaryDirectory(prefix="mapsmith-bench-") as tmp:
        workspace = Path(tmp).resolve()
        # One untimed start first, so every timed run sees the same warm OS file cache and .pyc files.
        cold_start(workspace, follow_up=True)
        times, tools, last = measure(args.runs, workspace)
        server, floor, sdk = times["server"], times["interpreter_floor"], times["sdk_import"]
        tools_list_characters = int(last.get("tools_list_characters", 0))
        info: dict[str, Any] = last.get("server_info", {})
        load_after = os.getloadavg()[0]
        engines = engines_imported_before_a_tool_call(workspace)
        cold_qgis = qgis_cache_cold(workspace, Path(tmp) / "empty-qgis-cache")
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
        "tools_list_characters": tools_list_characters,
        "stacks": stacks_measured(info),
        "server": _summary(server),
        "server_without_qgis": {
            "command": f"MAPSMITH_PLUGINS={WITHOUT_QGIS['MAPSMITH_PLUGINS']} python -m mapsmith",
            **_summary(times["server_without_qgis"]),
        },
        "server_info": {
            "command": "tools/call server_info, the first call in each fresh server (after tools/list)",
            **_summary(times["server_info"]),
        },
        "interpreter_floor": {"command": "python -c pass", **_summary(floor)},
        "sdk_import": {"command": f'python -c "{SDK_IMPORT}"', **_summary(sdk)},
        "target": {
            "median_seconds": TARGET_MEDIAN_SECONDS,
            "met": median < TARGET_MEDIAN_SECONDS,
        },
        "engines_imported_before_a_tool_call": engines,
    }
    if times["list_operations"]:
        result["list_operations"] = {
            "command": "tools/call list_operations, the first in each fresh server (loads the qgis: toolbox)",
            **_summary(times["list_operations"]),
        }
    if cold_qgis is not None:
        result["qgis_cache_cold"] = cold_qgis
    if breakdown is not None:
        result["breakdown"] = breakdown
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")

    print(
        f"tools/list cold start, {args.runs} runs: median {median:.3f} s "
        f"(min {min(server):.3f}, max {max(server):.3f}); python -c pass median {statistics.median(floor):.3f} s; "
        f"MCP SDK import median {statistics.median(sdk):.3f} s"
    )
    print(
        f"server_info median {statistics.median(times['server_info']):.3f} s; "
        f"tools/list {tools_list_characters} characters; stacks available: {', '.join(result['stacks']['available'])}"
    )
    print(f"target median < {TARGET_MEDIAN_SECONDS} s: {'met' if result['target']['met'] else 'NOT met'}")
    print(f"engines imported before a tool call: {', '.join(engines) or 'none'}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
