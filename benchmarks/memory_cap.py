"""A memory cap a benchmark run is started under, and which kind of cap this machine can enforce.

Peak RSS says how much an engine used on a machine that had room; a cap says what happens on one that has
not. Three mechanisms, tried in this order, each measured by ``probe()`` (a child that touches more than
the cap must be stopped):

* ``cgroup-v1``: a memory cgroup under ``/sys/fs/cgroup/memory`` per run; the kernel's OOM killer ends the
  process tree (the JVM a Spark child starts included) when resident memory plus page cache the group
  charged passes the limit. Needs root. This is what "killed at 8 GiB" means on this page.
* ``cgroup-v2``: the same with ``memory.max`` in the unified hierarchy, where its memory controller is enabled.
* ``prlimit``: ``RLIMIT_AS`` on each process (inherited, not shared): it caps *virtual* address space, so
  an allocation fails with MemoryError instead of a kill, and a JVM, which reserves address space it never
  touches, fails at start far below the cap. It is a fallback that is recorded as such, never silently.

``systemd-run --scope -p MemoryMax=`` needs systemd as PID 1, which containers rarely have. This module
must never lift or change a limit it did not create, and removes each cgroup it made.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup/unified")
METHODS = ("cgroup-v1", "cgroup-v2", "prlimit")


def parse_size(text: str) -> int:
    """Bytes from ``8G``, ``512M``, ``8GiB`` or a plain number of bytes (powers of 1024)."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


class MemoryCap:
    """One cap, applied to each run separately (a fresh cgroup per run, so an earlier kill cannot leak)."""

    def __init__(self, size: str, method: str) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown memory cap method {method!r}; one of {', '.join(METHODS)}")
        self.size = size
        self.bytes = parse_size(size)
        self.method = method
        self._group: Path | None = None

    @property
    def gib(self) -> float:
        return self.bytes / 2**30

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` as it is started under this cap (prlimit wraps it; cgroups join in ``enter``)."""
        if self.method == "prlimit":
            return ["prlimit", f"--as={self.bytes}", "--", *argv]
        return argv

    def prepare(self) -> None:
        """Make this run's cgroup (no-op for prlimit)."""
        if self.method == "prlimit":
            return
        root = V1_ROOT if self.method == "cgroup-v1" else V2_ROOT
        self._group = root / f"mapsmith_bench_{os.getpid()}_{len(list(root.glob('mapsmith_bench_*')))}"
        self._group.mkdir()
        limit = "memory.limit_in_bytes" if self.method == "cgroup-v1" else "memory.max"
        try:
            (self._group / limit).write_text(str(self.bytes))
        except OSError:
            self.release()  # a group without its limit must not be left behind, nor used
            raise

    def enter(self) -> None:
        """Runs in the child between fork and exec: join this run's cgroup."""
        if self._group is not None:
            (self._group / "cgroup.procs").write_text(str(os.getpid()))

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer ended a process of this run's cgroup."""
        if self._group is None:
            return False
        name = "memory.oom_control" if self.method == "cgroup-v1" else "memory.events"
        try:
            for line in (self._group / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except OSError:
            return False
        return False

    def release(self) -> None:
        if self._group is not None:
            try:
                self._group.rmdir()
            except OSError:
                pass  # a process still in it: the group goes when the kernel frees it
            self._group = None

    def describe(self) -> dict[str, Any]:
        return {"size": self.size, "bytes": self.bytes, "method": self.method, "enforces": ENFORCES[self.method]}


ENFORCES = {
    "cgroup-v1": "resident memory and page cache of the whole process tree; the kernel kills it at the limit",
    "cgroup-v2": "resident memory and page cache of the whole process tree; the kernel kills it at the limit",
    "prlimit": "virtual address space of each process separately; allocations past it fail, a JVM may not start",
}

_TOUCH = "b = bytearray({n}); b[::4096] = b'x' * (len(b) // 4096 + (len(b) % 4096 > 0)); print('survived')"


def _try(method: str) -> dict[str, Any]:
    """Start a child that touches 256 MiB under a 128 MiB cap of ``method``: does the cap stop it?"""
    cap = MemoryCap("128M", method)
    try:
        cap.prepare()
    except OSError as exc:
        return {"works": False, "why": f"could not create the cgroup: {exc}"}
    try:
        argv = cap.command([sys.executable, "-c", _TOUCH.format(n=256 * 2**20)])
        done = subprocess.run(argv, capture_output=True, text=True, preexec_fn=cap.enter, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"works": False, "why": f"the probe did not start: {exc}"}
    finally:
        killed = cap.oom_killed()
        cap.release()
    stopped = "survived" not in done.stdout
    how = "killed by the OOM killer" if killed else f"exit {done.returncode}"
    return {"works": stopped, "why": f"a 256 MiB child under a 128 MiB cap: {how}"}


def probe() -> dict[str, dict[str, Any]]:
    """Each mechanism tried on this machine, with what happened."""
    return {method: _try(method) for method in METHODS}


def best(requested: str | None = None) -> tuple[str, dict[str, dict[str, Any]]]:
    """The first mechanism that works here (or ``requested``, refused if it does not), and the probe."""
    found = probe()
    if requested:
        if not found[requested]["works"]:
            raise SystemExit(f"memory cap {requested} does not work here: {found[requested]['why']}")
        return requested, found
    for method in METHODS:
        if found[method]["works"]:
            return method, found
    raise SystemExit(f"no memory cap works here: {found}")


if __name__ == "__main__":
    import json

    print(json.dumps(probe(), indent=2))
