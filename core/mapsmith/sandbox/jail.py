"""The one sandbox for code MapSmith did not write: bubblewrap, no network, no /proc, limits, a wall clock.

Both callers use it: ``plugin check`` (``mapsmith.pluginkit.isolation``: an installed plugin's examples
through the real runner) and ``propose_operation`` (``mapsmith.proposals.jailrun``: an agent's operation,
at check time and on every later run). The engine worker (``launcher``/``worker``) is a long-lived process
trusted with the workspace; this is stricter and short-lived. Its filesystem view is the read-only
software this Python needs (``/usr`` and friends, this Python's prefix and import paths), the loader's
few ``/etc`` files and a synthesized one-user ``passwd``/``group``/``hosts``, read-only binds of the inputs
the caller names (under ``/inputs``, or at their own path), ONE read-write folder (at ``/scratch`` or at its
own path: the caller says), a size-capped private ``/tmp`` and a minimal ``/dev``; the root is read-only.
Not the workspace unless it is the writable folder, not the home directory, and no ``/proc`` at all:
bubblewrap cannot mount a fresh procfs inside the engine worker's own sandbox (the kernel refuses a procfs
with covered parts), and binding the outer one would show the worker's ``/proc/<pid>/root``, so the jail
has none, nested or not, and behaves the same in both places. It always gets its own user namespace with
no capability, so root inside is nobody on the host's files it was not given.

Limits (``mapsmith.sandbox.limits``) are set on the command before exec and again by the child on itself;
the wall clock is enforced from outside by killing the jail's process group; processes are capped by a
``pids`` cgroup where one can be made, else by ``RLIMIT_NPROC`` inside the jail's user namespace. The
child (``mapsmith.sandbox.child``) reports on a private result channel (a pipe passed as an fd): what its
audit witness saw, and the outcome. ``JailRun`` says how the run ended as seen from outside.

Hand-written on top of ``policy`` because no library builds a bubblewrap view; the choice of bubblewrap
over seccomp or Landlock written here is argued in ``mapsmith.sandbox``'s docstring and SECURITY.md.
This module must never bind a home directory, never share the network namespace, and never run the
command without bubblewrap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapsmith.sandbox.limits import (
    CPU_ENV,
    MEMORY_ENV,
    OUTPUT_ENV,
    PROCESSES,
    TIMEOUT_ENV,
    JailLimits,
    PidsCgroup,
    apply_limits,
    preexec,
    processes_enforced_by,
)
from mapsmith.sandbox.policy import SYSTEM_TREES, bwrap_path, identity_files, software_paths

__all__ = [
    "CHILD_MODULE",
    "CPU_ENV",
    "INPUTS",
    "MEMORY_ENV",
    "OUTPUT_ENV",
    "PROCESSES",
    "SCRATCH",
    "TIMEOUT_ENV",
    "JailLimits",
    "JailRun",
    "apply_limits",
    "jail_argv",
    "jail_python",
    "run_child",
    "run_jailed",
]

SCRATCH = "/scratch"
INPUTS = "/inputs"
CHILD_MODULE = "mapsmith.sandbox.child"
RESULT_FD_ENV = "MAPSMITH_JAIL_RESULT_FD"
# The few /etc files a dynamically linked Python and GDAL need to start; nothing that names a user or a host
# (passwd, group and hosts are synthesized: one user, loopback only).
JAIL_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
HOSTNAME = "mapsmith-jail"
STDOUT_MAX_BYTES = 8 * 1024 * 1024  # the command's own output; more is an attack, not an answer
RESULT_MAX_BYTES = 16 * 1024 * 1024  # the result channel: one JSON document plus attempt lines
BASE_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONNOUSERSITE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",  # the software is mounted read-only
    "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MB of address space per arena: memory lost under RLIMIT_AS
    "PROJ_NETWORK": "OFF",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


@dataclass
class JailRun:
    """How a jailed run ended, as seen from outside (never from what the child claims), and the messages
    the child sent on its result channel (claims, to be read as such)."""

    returncode: int | None
    stdout: bytes
    stderr_tail: str
    seconds: float
    timed_out: bool = False
    stdout_overflow: bool = False
    signal: str | None = None
    argv: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    result_overflow: bool = False
    pids_hit: bool = False
    enforcement: dict[str, str] = field(default_factory=dict)

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return [m["attempt"] for m in self.messages if isinstance(m.get("attempt"), dict)]

    @property
    def outcome(self) -> dict[str, Any] | None:
        """The child's last ``{"outcome": ...}`` message, or None when it sent none."""
        return next((m for m in reversed(self.messages) if "outcome" in m), None)

    @property
    def limit_hit(self) -> str | None:
        """Which limit ended the run (one of ``LIMIT_NAMES``), judged from outside first: the clock, then
        what the child saw raised (MemoryError, EFBIG), the kernel's signal, the cgroup, a C allocator's cry."""
        from mapsmith.sandbox.child import LIMIT_NAMES
        from mapsmith.sandbox.launcher import _ALLOCATION_FAILED

        final = self.outcome or {}
        if self.timed_out:
            return "wall_time"
        if final.get("limit") in LIMIT_NAMES:
            return str(final["limit"])
        if self.signal == "SIGXCPU":
            return "cpu_time"
        if self.signal == "SIGXFSZ":
            return "file_size"
        if self.pids_hit:
            return "processes"
        if _ALLOCATION_FAILED.search(self.stderr_tail) or "MemoryError" in self.stderr_tail:
            return "memory"
        return None


def _bind_target(inside: str, host: Path) -> str:
    if inside.startswith(INPUTS + "/") or inside == str(host):
        return inside
    raise ValueError(f"an input is bound under {INPUTS} or at its own path, not at {inside}")


def jail_argv(
    command: list[str],
    scratch: Path,
    inputs: Mapping[str, Path],
    environ: Mapping[str, str],
    limits: JailLimits,
    bwrap: str,
    *,
    scratch_at: str = SCRATCH,
    identity: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """The bubblewrap command line.

    :param inputs: maps a path inside the jail (under /inputs, or the host path itself) to a host file or
        folder, bound read-only.
    :param scratch_at: where the one writable folder appears (``/scratch``, or its own host path).
    :param identity: a folder for the synthesized passwd/group/hosts (none bound when None).
    :param env: variables for the command on top of ``BASE_ENV`` (nothing is inherited but PYTHONPATH).
    """
    argv = [
        bwrap,
        "--unshare-all",  # ipc, pid, net, uts, cgroup: no interface but a loopback nobody listens on
        # A user namespace even when started as root (bwrap skips it then by default), and no capability in
        # it: the kernel then counts processes against RLIMIT_NPROC, which it never does for real root.
        "--unshare-user",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--dev",
        "/dev",
        "--size",
        str(limits.tmp_mb * 1024 * 1024),  # the private /tmp is memory: capped like the disk
        "--tmpfs",
        "/tmp",
        "--hostname",
        HOSTNAME,
    ]
    seen: list[Path] = []
    for tree in SYSTEM_TREES:
        p = Path(tree)
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), tree]
        elif p.is_dir():
            argv += ["--ro-bind", tree, tree]
            seen.append(p)
    for entry in JAIL_ETC:
        if os.path.lexists(entry):
            argv += ["--ro-bind", entry, entry]
    if identity is not None:
        passwd, group, hosts = identity_files(identity)
        for source, target in ((passwd, "/etc/passwd"), (group, "/etc/group"), (hosts, "/etc/hosts")):
            argv += ["--ro-bind", str(source), target]
    for p in software_paths(environ):
        if any(p == s or s in p.parents for s in seen):
            continue
        argv += ["--ro-bind", str(p), str(p)]
        seen.append(p)
    # Mounts apply in order: an input holding the writable folder goes before its read-write bind (or it would
    # hide it), an input inside the writable folder after it (so it stays read-only).
    scratch_path = Path(scratch_at)
    around: list[str] = []
    within: list[str] = []
    for inside, host in sorted(inputs.items()):
        target = _bind_target(inside, Path(host))
        nested = Path(target) == scratch_path or scratch_path in Path(target).parents
        (within if nested else around).extend(["--ro-bind", str(host), target])
    argv += [*around, "--bind", str(scratch), scratch_at, *within, "--chdir", scratch_at]
    # The root bwrap builds is a tmpfs: read-only, so a write to /etc/passwd or /planted fails instead of
    # landing in memory (a write outside the writable folder that "succeeded").
    argv += ["--remount-ro", "/"]
    full = {
        **BASE_ENV,
        **({"PYTHONPATH": environ["PYTHONPATH"]} if environ.get("PYTHONPATH") else {}),
        **dict(env or {}),
        **limits.as_env(),
    }
    for k, v in sorted(full.items()):
        argv += ["--setenv", k, v]
    return [*argv, "--", *command]


class _Reader:
    """Drains a pipe on a thread, keeping at most ``cap`` bytes (the head or the tail), so a chatty child
    never blocks on a full pipe and never fills this process's memory."""

    def __init__(self, fd: int, cap: int, keep: str = "head") -> None:
        self.data = bytearray()
        self.cap = cap
        self.keep = keep
        self.overflow = False
        self.thread = threading.Thread(target=self._read, args=(fd,), daemon=True)
        self.thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as stream:
            while chunk := stream.read(65536):
                if len(self.data) + len(chunk) > self.cap:
                    self.overflow = True
                    if self.keep == "head":
                        continue  # keep draining so the child is never blocked on us
                self.data.extend(chunk)
                if self.keep == "tail" and len(self.data) > self.cap:
                    del self.data[: len(self.data) - self.cap]

    def value(self) -> bytes:
        self.thread.join(timeout=5)
        return bytes(self.data)


def _messages(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for line in raw.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue  # the code under test wrote to our channel: not a message of ours
        if isinstance(message, dict):
            out.append(message)
    return out


def _unavailable() -> Exception:
    from mapsmith.errors import ConfigurationError

    return ConfigurationError(
        "bubblewrap (bwrap) is not installed, so code MapSmith did not write cannot be run here",
        code="SANDBOX_UNAVAILABLE",
        evidence={"needed": "bwrap"},
        hint="install bubblewrap (apt-get install bubblewrap) and restart the server",
    )


def run_jailed(
    command: list[str],
    *,
    scratch: Path,
    inputs: Mapping[str, Path],
    stdin: bytes,
    limits: JailLimits,
    environ: Mapping[str, str] | None = None,
    scratch_at: str = SCRATCH,
    env: Mapping[str, str] | None = None,
    identity: bool = True,
) -> JailRun:
    """Run ``command`` in the jail, feed it ``stdin``, and wait at most ``limits.timeout_s`` wall seconds.

    The command finds a private result channel's fd in ``MAPSMITH_JAIL_RESULT_FD``; what it writes there
    comes back as ``JailRun.messages``. Raises ConfigurationError (SANDBOX_UNAVAILABLE) when bubblewrap is
    not installed: there is no fallback that runs the command without it.
    """
    bwrap = bwrap_path()
    if bwrap is None or not sys.platform.startswith("linux"):
        raise _unavailable()
    host_env = dict(os.environ if environ is None else environ)
    identity_dir = Path(tempfile.mkdtemp(prefix="mapsmith-jail-id-")) if identity else None
    cgroup = PidsCgroup(limits.processes)
    read_fd, write_fd = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        argv = jail_argv(
            command,
            scratch,
            inputs,
            host_env,
            limits,
            bwrap,
            scratch_at=scratch_at,
            identity=identity_dir,
            env={**dict(env or {}), RESULT_FD_ENV: str(write_fd)},
        )
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=out_w,
            stderr=err_w,
            pass_fds=(write_fd,),
            preexec_fn=preexec(limits, cgroup),  # noqa: PLW1509 - rlimits must be set between fork and exec
            start_new_session=True,  # its own process group: the timeout kills all of it, never the server
            close_fds=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        for fd in (write_fd, out_w, err_w):
            os.close(fd)
        write_fd = out_w = err_w = -1
        results = _Reader(read_fd, RESULT_MAX_BYTES)
        out = _Reader(out_r, STDOUT_MAX_BYTES)
        err = _Reader(err_r, 4000, keep="tail")
        read_fd = out_r = err_r = -1
        assert proc.stdin is not None
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died before reading: the exit status says why
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        seconds = time.perf_counter() - started
        data, raw = out.value(), results.value()
        tail = err.value().decode("utf-8", "replace")
        pids_hit = cgroup.hit()
    finally:
        for fd in (read_fd, write_fd, out_r, out_w, err_r, err_w):
            if fd >= 0:
                os.close(fd)
        cgroup.remove()
        if identity_dir is not None:
            import shutil

            shutil.rmtree(identity_dir, ignore_errors=True)
    code = proc.returncode
    # bwrap exits 128+N when its child died of signal N; a negative status is bwrap itself killed (by us).
    number = -code if code is not None and code < 0 else (code - 128 if code is not None and code > 128 else None)
    name = None
    if number is not None:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
    return JailRun(
        returncode=code,
        stdout=data,
        stderr_tail=tail,
        seconds=seconds,
        timed_out=timed_out,
        stdout_overflow=out.overflow,
        signal=name,
        argv=argv,
        messages=_messages(raw),
        result_overflow=results.overflow,
        pids_hit=pids_hit,
        enforcement={
            "network": "network namespace with loopback only (bwrap --unshare-all)",
            "filesystem": f"read-only view; {scratch_at} and a private /tmp writable",
            "cpu_time": "RLIMIT_CPU",
            "memory": "RLIMIT_AS",
            "file_size": "RLIMIT_FSIZE",
            "wall_time": "process group killed by the caller",
            "processes": processes_enforced_by(cgroup),
        },
    )


def run_child(
    request: Mapping[str, Any],
    *,
    scratch: Path,
    inputs: Mapping[str, Path],
    limits: JailLimits,
    environ: Mapping[str, str] | None = None,
    scratch_at: str = SCRATCH,
    env: Mapping[str, str] | None = None,
) -> JailRun:
    """Run MapSmith's one in-jail child (``mapsmith.sandbox.child``) on ``request`` (its docstring says what
    a request holds): every caller's code runs through here."""
    return run_jailed(
        [*jail_python(), "-m", CHILD_MODULE],
        scratch=scratch,
        inputs=inputs,
        stdin=json.dumps(dict(request), default=str).encode("utf-8"),
        limits=limits,
        environ=environ,
        scratch_at=scratch_at,
        env=env,
    )


def jail_python() -> list[str]:
    """This interpreter, without the user site, as the jail runs it."""
    return [sys.executable, "-s"]
