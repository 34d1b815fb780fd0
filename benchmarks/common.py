"""What every benchmark records about where it ran: the machine, the engines' versions, the commit.

Imported by the benchmark scripts (run as ``python benchmarks/<script>.py``, so this folder is on
``sys.path``); it measures nothing itself.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


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
