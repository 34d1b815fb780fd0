"""What one jailed run may use, and the kernel mechanisms that hold it: rlimits and a ``pids`` cgroup.

``JailLimits`` is the one description of a run's allowance (wall and CPU seconds, address space, bytes per
written file, processes, the private /tmp); ``plugin check`` and ``propose_operation`` both express theirs
in it. The limits are set twice: by the caller between fork and exec (``preexec``), so even a command
that is not MapSmith's child runs under them, and by the child on itself (``apply_limits``) inside the
jail's own user namespace, where ``RLIMIT_NPROC`` counts only the jail's processes. Soft = hard (CPU: one
second apart, so SIGXCPU names the cause before the kernel's SIGKILL), so nothing inside can raise them.
As real root the kernel ignores ``RLIMIT_NPROC``; a throwaway ``pids`` cgroup caps processes there when
this process may create one (``PidsCgroup``).

Hand-written because no library sets rlimits across bubblewrap and reads back which one ended a run. This
module must never raise a limit it was given, and never leave a cgroup behind.
"""

from __future__ import annotations

import os
import resource
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mapsmith.limits import _positive  # one reading of a limit variable: LIMIT_SETTING_INVALID

TIMEOUT_ENV = "MAPSMITH_PROPOSAL_TIMEOUT_S"
CPU_ENV = "MAPSMITH_PROPOSAL_CPU_S"
MEMORY_ENV = "MAPSMITH_PROPOSAL_MEMORY_MB"
OUTPUT_ENV = "MAPSMITH_PROPOSAL_OUTPUT_MB"
PROCESSES = 64  # threads count too: GDAL, numpy's BLAS and pyogrio start a few
OPEN_FILES = 256
PIDS_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


@dataclass(frozen=True)
class JailLimits:
    """What one jailed run may use: wall and CPU seconds, address space, bytes per written file, processes,
    and the size of the private /tmp (a tmpfs, so memory)."""

    timeout_s: float = 60.0
    memory_mb: int = 2048
    output_mb: int = 512
    processes: int = PROCESSES
    cpu_limit_s: float | None = None  # CPU seconds; None: as many as wall seconds
    tmp_mb: int = 256

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> JailLimits:
        cpu = (environ.get(CPU_ENV) or "").strip()
        return cls(
            timeout_s=_positive(environ, TIMEOUT_ENV, 60.0, "seconds"),
            cpu_limit_s=_positive(environ, CPU_ENV, 60.0, "seconds") if cpu else None,
            memory_mb=int(_positive(environ, MEMORY_ENV, 2048, "MB")),
            output_mb=int(_positive(environ, OUTPUT_ENV, 512, "MB")),
        )

    def to_dict(self) -> dict[str, float | int]:
        return {
            "timeout_s": self.timeout_s,
            "cpu_s": self.cpu_s,
            "memory_mb": self.memory_mb,
            "output_mb": self.output_mb,
            "processes": self.processes,
        }

    @property
    def cpu_s(self) -> int:
        return max(1, int(self.cpu_limit_s if self.cpu_limit_s is not None else self.timeout_s))

    def as_env(self) -> dict[str, str]:
        return {
            "MAPSMITH_JAIL_CPU_S": str(self.cpu_s),
            "MAPSMITH_JAIL_MEMORY_MB": str(self.memory_mb),
            "MAPSMITH_JAIL_OUTPUT_MB": str(self.output_mb),
            "MAPSMITH_JAIL_PROCESSES": str(self.processes),
        }


def _set(which: int, value: int) -> None:
    # Never raise: a limit already lower (a caller's own) stays.
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    top = value + 1 if which == resource.RLIMIT_CPU else value
    if hard != resource.RLIM_INFINITY:
        top = min(top, hard)
    resource.setrlimit(which, (value, top))


def apply_limits(environ: Mapping[str, str]) -> None:
    """Called by the jailed child on itself, before it reads any code it did not ship with.

    RLIMIT_FSIZE makes a write past the size fail with EFBIG (SIGXFSZ is ignored so the write returns an
    error instead of killing the process without a word); RLIMIT_CPU sends SIGXCPU, which kills.
    """
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    pairs = (
        (resource.RLIMIT_CPU, int(environ.get("MAPSMITH_JAIL_CPU_S", "60"))),
        (resource.RLIMIT_AS, int(environ.get("MAPSMITH_JAIL_MEMORY_MB", "2048")) * 1024 * 1024),
        (resource.RLIMIT_FSIZE, int(environ.get("MAPSMITH_JAIL_OUTPUT_MB", "512")) * 1024 * 1024),
        (resource.RLIMIT_NPROC, int(environ.get("MAPSMITH_JAIL_PROCESSES", str(PROCESSES)))),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
        (resource.RLIMIT_CORE, 0),
    )
    for which, value in pairs:
        _set(which, value)


def preexec(limits: JailLimits, cgroup: PidsCgroup) -> Callable[[], None]:
    """What the caller runs between fork and exec of bubblewrap: every limit but the process count (which,
    outside the jail's user namespace, would count every process of this uid), and the cgroup."""

    def limit_child() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # ignored stays ignored across exec: EFBIG, not a kill
        _set(resource.RLIMIT_CPU, limits.cpu_s)
        _set(resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024)
        _set(resource.RLIMIT_FSIZE, limits.output_mb * 1024 * 1024)
        _set(resource.RLIMIT_CORE, 0)
        cgroup.enter()

    return limit_child


def processes_enforced_by(cgroup: PidsCgroup) -> str:
    if cgroup.path is not None:
        return "pids cgroup"
    if os.geteuid() != 0:
        return "RLIMIT_NPROC in the jail's own user namespace"
    return "not enforced (root without a pids cgroup: the kernel exempts uid 0 from RLIMIT_NPROC)"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class PidsCgroup:
    """A throwaway v1/v2 ``pids`` cgroup capping the process count, when this process may create one."""

    def __init__(self, maximum: int) -> None:
        self.path: Path | None = None
        for root in PIDS_CGROUP_ROOTS:
            if not (root / "cgroup.procs").exists():
                continue
            if root == Path("/sys/fs/cgroup") and "pids" not in _read(root / "cgroup.subtree_control"):
                continue  # cgroup v2 without the pids controller delegated here
            candidate = root / f"mapsmith-jail-{uuid.uuid4().hex[:12]}"
            try:
                candidate.mkdir()
                (candidate / "pids.max").write_text(str(maximum))
            except OSError:
                try:
                    candidate.rmdir()
                except OSError:
                    pass
                continue
            self.path = candidate
            break

    def enter(self) -> None:
        """Called in the child between fork and exec: the child and all it starts are counted here."""
        if self.path is not None:
            with open(self.path / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def hit(self) -> bool:
        if self.path is None:
            return False
        events = _read(self.path / "pids.events")
        return any(line.startswith("max ") and line.split()[1] != "0" for line in events.splitlines())

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(50):  # the pid namespace's processes may take a moment to be reaped
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.05)
