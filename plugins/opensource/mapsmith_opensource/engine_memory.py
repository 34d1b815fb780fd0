"""How much memory an engine of this process may hold before it spills to disk: the operator's setting, or a
share of what the process may use (the smaller of the machine's memory and its memory cgroup's limit).

SedonaDB (DataFusion) holds everything in memory unless it is given a limit; with one it spills its
aggregates and sorts to disk. Measured for issue 22 (count_in_polygons through MapSmith on SedonaDB, 30M
points in 10,000 overlapping zones, whose GROUPING SETS aggregate has a group per point): under an 8 GiB
cgroup cap the process was killed at the cap after 169 s with no limit; with a 4 GiB limit it finished in
106 s at a peak RSS of 4.4 GiB. Hence half of what the process may use, leaving the other half to the
Python side and to what the engine does not account for. DuckDB's file-to-file engines take the same share with a
cap of 1 GiB (``engine_limit``'s ``cap``; the measurements are in duckdb_spatial.engine_connect).

Written by hand because no dependency reads a cgroup's limit: psutil (not a dependency) reports the
machine's memory only, and the limit is a file named by ``/proc/self/cgroup`` (v1: ``memory.limit_in_bytes``
under the memory controller's hierarchy; v2: ``memory.max``), inherited from every ancestor group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mapsmith.errors import ConfigurationError

CGROUP_ROOT = Path("/sys/fs/cgroup")
UNLIMITED = "unlimited"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


@dataclass(frozen=True)
class Limit:
    """An engine's memory limit in bytes (None: none), and how it was set, for the manifest's notes."""

    bytes: int | None
    how: str


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def machine_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_limit(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """The smallest memory limit over this process's memory cgroup and its ancestors, v1 or v2; None when
    no limit is set or none can be read. A v1 "no limit" is a huge number, left to the caller's minimum."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        ident, controllers, path = parts
        if "memory" in controllers.split(","):
            places = [(root / "memory", "memory.limit_in_bytes")]
        elif ident == "0" and controllers == "":
            places = [(root, "memory.max"), (root / "unified", "memory.max")]
        else:
            continue
        group = Path(path.strip() or "/")
        for base, name in places:
            for level in (group, *group.parents):
                try:
                    text = (base / str(level).lstrip("/") / name).read_text().strip()
                except OSError:
                    continue
                if text.isdigit():
                    found.append(int(text))
    return min(found) if found else None


def process_memory() -> tuple[int | None, str]:
    """What this process may use, in bytes, and where that figure comes from."""
    machine, group = machine_memory(), cgroup_limit()
    if group is not None and (machine is None or group < machine):
        return group, f"its memory cgroup's {gib(group)} limit"
    if machine is not None:
        return machine, f"the machine's {gib(machine)}"
    return None, "nothing: neither /proc/meminfo nor a cgroup limit could be read"


def parse_size(raw: str) -> int | None:
    match = _SIZE.match(raw)
    if not match or float(match.group(1)) <= 0:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)[0].lower()])


def engine_limit(environ: Mapping[str, str], variable: str, share: float, engine: str, cap: int | None = None) -> Limit:
    """``variable``'s size (``4GB``, ``512MiB``) or ``unlimited`` when the operator set it, else ``share`` of
    process_memory(), or ``cap`` bytes when that is less (``cap`` alone when the process's memory is unknown); no
    limit when none of these can be had. A setting that is neither stops the run."""
    raw = (environ.get(variable) or "").strip()
    default = f"{share:.0%} of the memory this process may use" + (f", at most {gib(cap)}" if cap else "")
    if raw.lower() == UNLIMITED:
        return Limit(None, f"none ({variable}={raw})")
    if raw:
        size = parse_size(raw)
        if size is None:
            raise ConfigurationError(
                f"{variable}={raw!r} is not a memory size {engine} can be limited to",
                code="ENGINE_MEMORY_INVALID",
                evidence={"variable": variable, "value": raw},
                hint=f"set {variable} to a positive size with a unit, such as 4GB or 512MiB, or to {UNLIMITED}, "
                f"or unset it (default: {default})",
            )
        return Limit(size, f"{gib(size)} ({variable}={raw}); beyond it {engine} spills to disk")
    spills = f"({variable} overrides); beyond it {engine} spills to disk"
    total, source = process_memory()
    if total is None:
        if cap is not None:
            return Limit(cap, f"{gib(cap)}, the memory this process may use being unknown ({source}) {spills}")
        return Limit(None, f"none: the memory this process may use is unknown ({source})")
    size = int(total * share)
    if cap is not None and cap < size:
        return Limit(cap, f"{gib(cap)}, less than {share:.0%} of {source} {spills}")
    return Limit(size, f"{gib(size)}, {share:.0%} of {source} {spills}")
