"""What every benchmark records about where it ran: the machine, the engines' versions, the commit.

Imported by the benchmark scripts (run as ``python benchmarks/<script>.py``, so this folder is on
``sys.path``); it measures nothing itself.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def keep_bytecode() -> None:
    """Let this process and every child it starts write and reuse Python's bytecode caches (``__pycache__``).

    An installed MapSmith runs from compiled bytecode (pip compiles it at install). With ``PYTHONDONTWRITEBYTECODE``
    set, as in some shells and CI images, no cache is written, so every fresh child recompiles each module changed
    since its last cache on its own clock: measured 2026-12-07 in a fresh checkout, ``MapSmith()`` took 0.28-0.31 s
    against 0.11-0.13 s with the caches, and the goal benchmark's whole-process times of MapSmith rose by 0.3-0.5 s
    while the raw engines' (compiled in site-packages) did not. Called when this module is imported, which every
    benchmark that starts processes does."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


keep_bytecode()


def machine(distributions: Iterable[str] = (), extra_versions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """CPUs this process may use (what ``nproc`` prints), memory, Python, platform, MapSmith, and the
    installed version of each named distribution ("not installed" when absent)."""
    from importlib import metadata

    import mapsmith

    versions = {}
    for dist in distributions:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    versions.update(extra_versions or {})
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(pages / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "mapsmith_version": mapsmith.__version__,
        "engines": versions,
    }


def code_state() -> dict[str, Any]:
    """The commit measured, and whether the code under it (core, plugins, contracts) had uncommitted edits."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "core", "plugins", "contracts"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "uncommitted_changes": None}
    return {"commit": commit, "uncommitted_changes": bool(dirty)}


def run_mapsmith(
    app: Any, operation: str, arguments: dict[str, Any], setup: float, profile: bool = False
) -> tuple[dict[str, Any], Any]:
    """In a child: ``app.run(operation, arguments)`` on the clock (under cProfile, perf_counter timer, when
    ``profile``), and the answer every benchmark records of it; the profile's ``pstats.Stats``, or None."""
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.perf_counter) if profile else None
    t0 = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = app.run(operation, arguments)
    if profiler is not None:
        profiler.disable()
    seconds = time.perf_counter() - t0
    answer = {
        "seconds": seconds,
        "setup_seconds": setup,
        "status": result.status,
        "engine": result.engine.get("name"),
        "failed_checks": [c["name"] for c in result.checks if not c.get("passed", True)],
    }
    return answer, (pstats.Stats(profiler) if profiler is not None else None)


def child_main(children: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]], role: str, spec_json: str) -> int:
    """In a child process: run ``children[role]`` and print its JSON answer with this process's peak RSS."""
    out = children[role](json.loads(spec_json))
    out["peak_rss_mib"] = own_peak_rss_mib()
    out["peak_rss_method"] = "VmHWM" if Path("/proc/self/status").exists() else "ru_maxrss"
    print(json.dumps(out))
    return 0


def own_peak_rss_mib() -> float:
    """This process's peak resident memory since it was exec'd, the imports included.

    Linux's ``VmHWM`` belongs to the address space, which exec replaces, so it is this program's own.
    ``ru_maxrss`` is not: Linux carries it across fork and exec, so a child started by a parent holding
    2 GiB reports at least 2 GiB however little it used. It is the fallback where /proc is absent.
    """
    import resource

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def spawn(script: str | Path, role: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run one child of ``script`` in a fresh process; its JSON answer plus the process's own wall time."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(Path(script).resolve()), "--child", role, json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=spec.get("workspace"),
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"{Path(script).stem}: {role} failed (exit {done.returncode})")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    answer["process_seconds"] = wall
    return answer
