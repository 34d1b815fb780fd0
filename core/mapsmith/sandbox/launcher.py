"""Start, call, time out, cancel and replace sandboxed engine workers; a small pool for concurrent clients.

A ``Worker`` is one bubblewrap process running ``mapsmith.sandbox.worker``; it answers one call at a
time. Anything that ends a worker mid-call (a segfault, an abort, the kernel's OOM killer, the wall-time
limit, a cancellation) becomes a structured MapSmithError here, and the pool replaces the worker on the
next call: the server process itself never runs an engine, so it lives on.

This module must never let a worker's stderr reach a reply unredacted (absolute host paths outside the
workspace are replaced), and never reuse a worker that was killed or whose call did not finish cleanly.
"""

from __future__ import annotations

import collections
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, NoReturn

from mapsmith.errors import ConfigurationError, MapSmithError, redact_paths
from mapsmith.limits import CALL_TIMEOUT_ENV
from mapsmith.sandbox.protocol import ProtocolError, error_from_dict, read_frame, write_frame

TIMEOUT_ENV = CALL_TIMEOUT_ENV  # read, with its checks, by mapsmith.limits.call_timeout_s
WORKERS_ENV = "MAPSMITH_WORKERS"
MEMORY_ENV = "MAPSMITH_WORKER_MEMORY_MB"
# Engines that can stop themselves at the limit (DuckDB's interrupt) get this long to say so with their
# own code before the worker is killed from outside.
TIMEOUT_GRACE_S = 2.0
DEFAULT_WORKERS = 2
START_TIMEOUT_S = 120.0
STDERR_TAIL_LINES = 40
_EOF = object()
_FATAL = re.compile(r"Fatal Python error|terminate called|panicked at|Segmentation fault|Aborted|SIGSEGV|SIGBUS")
# What allocators print when an allocation fails (Rust's default handler, C++'s bad_alloc, glibc, GDAL):
# a worker that aborts after one of these ran out of memory, whatever signal it died of.
_ALLOCATION_FAILED = re.compile(
    r"memory allocation of \d+ bytes failed|std::bad_alloc|out of memory|cannot allocate memory", re.IGNORECASE
)


def redact(text: str, workspace: Path) -> str:
    """A worker's stderr as a reply may carry it: the same redaction as every error (``errors.redact_paths``),
    workspace paths relative, every other absolute path ``<outside the workspace>``."""
    return redact_paths(text, workspace)


def _positive(environ: Mapping[str, str], name: str, default: float, kind: type, minimum: float) -> Any:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ConfigurationError(
            f"{name}={raw!r} is not a number of at least {minimum}",
            code="SANDBOX_SETTING_INVALID",
            evidence={"variable": name, "value": raw},
            hint=f"set {name} to a number ≥ {minimum}, or leave it unset (default {default})",
        )
    return value


def default_memory_mb() -> int:
    """Three quarters of physical memory: a runaway worker fails with MEMORY_LIMIT before the kernel
    picks a victim (which could be the server)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0
    return int(total * 0.75) // (1024 * 1024)


class Limits:
    def __init__(self, environ: Mapping[str, str]) -> None:
        from mapsmith.limits import call_timeout_s

        # One reading of MAPSMITH_CALL_TIMEOUT_S for the whole server (engines that can stop themselves use it too).
        self.timeout_s: float = call_timeout_s(environ)
        self.workers: int = _positive(environ, WORKERS_ENV, DEFAULT_WORKERS, int, 1)
        self.memory_mb: int = _positive(environ, MEMORY_ENV, default_memory_mb(), int, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"call_timeout_s": self.timeout_s, "workers": self.workers, "worker_memory_mb": self.memory_mb or None}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Worker:
    """One sandboxed worker process and the threads that read its two output pipes."""

    def __init__(self, argv: list[str], workspace: Path, memory_mb: int, forward_stderr: bool = True) -> None:
        self.workspace = workspace
        self.memory_mb = memory_mb
        self.killed_for: str | None = None
        self.frames: queue.Queue[Any] = queue.Queue()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        # The worker's "warm" frame, sent once after its ready frame when MapSmith.warm is done: per stack, "ready"
        # or why not (None until then). Read off the frame stream, never queued for a call.
        self.warmed: dict[str, str] | None = None
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: killing it never reaches the server
            close_fds=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},  # bwrap itself needs nothing else
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self._stdin: IO[bytes] = self.proc.stdin
        threading.Thread(target=self._read_frames, args=(self.proc.stdout,), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(self.proc.stderr, forward_stderr), daemon=True).start()
        ready = self._next(START_TIMEOUT_S)
        if ready is None or ready is _EOF or not ready.get("ready"):
            self.kill("start failed")
            detail = ready.get("error") if isinstance(ready, dict) else None
            raise MapSmithError(
                "the sandboxed engine worker did not start",
                code="WORKER_START_FAILED",
                evidence={"worker_error": detail, "stderr_tail": self.tail()},
                hint="run `mapsmith info` to see the sandbox settings; MAPSMITH_SANDBOX=off runs engines in-process",
            )
        self.pid = ready.get("pid")
        self.start_seconds = time.perf_counter() - started

    # -- pipes -----------------------------------------------------------------------------------

    def _read_frames(self, stream: IO[bytes]) -> None:
        try:
            while True:
                frame = read_frame(stream)
                if isinstance(frame, dict) and "warm" in frame and "id" not in frame:
                    warmed = frame["warm"]
                    self.warmed = {str(k): str(v) for k, v in warmed.items()} if isinstance(warmed, dict) else {}
                    continue
                self.frames.put(frame)
        except (EOFError, ProtocolError, ValueError, OSError):
            self.frames.put(_EOF)
        finally:
            stream.close()  # a replaced worker leaves no descriptor behind

    def _read_stderr(self, stream: IO[bytes], forward: bool) -> None:
        try:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.stderr_tail.append(line)
                if forward:
                    print(f"mapsmith worker: {line}", file=sys.stderr, flush=True)
        finally:
            stream.close()

    def _next(self, timeout: float | None) -> Any:
        try:
            return self.frames.get(timeout=timeout)
        except queue.Empty:
            return None

    def tail(self) -> str:
        # Lines are cut, not the whole: one long line (faulthandler's list of extension modules) must
        # not push the lines that say what happened out of the tail.
        return redact("\n".join(line[:300] for line in self.stderr_tail), self.workspace)

    def fatal_line(self) -> str | None:
        """The line in which the runtime named the crash, when one did."""
        for line in reversed(self.stderr_tail):
            if _FATAL.search(line):
                return redact(line[:300], self.workspace)
        return None

    # -- life --------------------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.killed_for is None and self.proc.poll() is None

    def kill(self, reason: str) -> None:
        if self.killed_for is None:
            self.killed_for = reason
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            self._stdin.close()
        except OSError:
            pass

    def close(self) -> None:
        try:
            self._stdin.close()  # the worker's loop ends on EOF
            self.proc.wait(timeout=3)
        except (OSError, subprocess.TimeoutExpired):
            self.kill("closed")

    # -- one call ----------------------------------------------------------------------------------

    def call(
        self,
        call_id: int,
        method: str,
        args: dict[str, Any],
        progress: Callable[[float, str], None] | None,
        timeout_s: float,
    ) -> Any:
        try:
            write_frame(self._stdin, {"id": call_id, "method": method, "args": args})
        except (BrokenPipeError, OSError):
            return self._ended(method, timeout_s)
        deadline = time.monotonic() + timeout_s + TIMEOUT_GRACE_S
        while True:
            frame = self._next(max(0.0, deadline - time.monotonic()))
            if frame is None:  # the wall-time limit
                self.kill("timeout")
                return self._ended(method, timeout_s)
            if frame is _EOF:
                return self._ended(method, timeout_s)
            if frame.get("id") != call_id:
                continue  # a late progress frame of an earlier call: harmless
            if "progress" in frame:
                try:
                    fraction, message = float(frame["progress"][0]), str(frame["progress"][1])
                except (TypeError, ValueError, IndexError, KeyError):
                    self.protocol_broken(method, "a malformed progress frame")
                if progress is not None:
                    progress(fraction, message)
                continue
            if "error" in frame:
                raise error_from_dict(frame["error"])
            return frame.get("result")

    def protocol_broken(self, method: str, what: str) -> NoReturn:
        """The worker said something the protocol does not allow: it is not trusted again."""
        self.kill("protocol")
        raise MapSmithError(
            f"the engine worker sent {what} during {method}; it was stopped",
            code="WORKER_PROTOCOL_ERROR",
            evidence={"method": method},
            hint="this is a bug (or a compromised engine); the next call gets a new worker",
        )

    def _ended(self, method: str, timeout_s: float) -> Any:
        """The worker is gone mid-call: say why, as a structured error."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill("unresponsive")
            code = self.proc.returncode
        time.sleep(0.05)  # let the stderr reader drain the last lines
        if self.killed_for == "timeout":
            raise MapSmithError(
                f"{method} ran longer than {TIMEOUT_ENV}={timeout_s:g} seconds and was stopped",
                code="CALL_TIMEOUT",
                evidence={"method": method, "timeout_s": timeout_s},
                hint=f"use less data or a smaller extent, or raise {TIMEOUT_ENV}; the next call gets a new worker",
            )
        if self.killed_for == "cancelled":
            raise MapSmithError(
                f"{method} was cancelled; its worker was stopped",
                code="CALL_CANCELLED",
                evidence={"method": method},
                hint="nothing was written for the cancelled call; call again to run it",
            )
        # bwrap reports a child killed by signal N as exit status 128+N.
        number = -code if code is not None and code < 0 else (code - 128 if code is not None and code > 128 else None)
        evidence: dict[str, Any] = {"method": method, "exit_code": code, "stderr_tail": self.tail()}
        if fatal := self.fatal_line():
            evidence["fatal_error"] = fatal
        if number is not None:
            evidence["signal"] = _signal_name(number)
        if self.memory_mb:
            evidence["memory_limit_mb"] = self.memory_mb
        if self.memory_mb and _ALLOCATION_FAILED.search(evidence["stderr_tail"]):
            raise MapSmithError(
                f"the engine ran out of memory during {method} (the {self.memory_mb} MB worker limit) and "
                f"died of {evidence.get('signal', f'exit code {code}')}; the server is still running",
                code="MEMORY_LIMIT",
                evidence=evidence,
                hint=f"run it on a smaller extent or coarser data, or raise {MEMORY_ENV}",
            )
        if number == signal.SIGKILL:
            cause = "was killed (SIGKILL) — most likely out of memory: the kernel's OOM killer" + (
                f" or the {self.memory_mb} MB worker memory limit ({MEMORY_ENV})" if self.memory_mb else ""
            )
        elif number is not None:
            cause = f"crashed with {_signal_name(number)}"
        else:
            cause = f"exited with code {code}"
        raise MapSmithError(
            f"the engine {cause} during {method}; the server is still running",
            code="ENGINE_CRASHED",
            evidence=evidence,
            hint="the input probably triggers an engine bug: check it with describe_dataset, try another format "
            "or stack; the next call gets a fresh worker",
        )


class WorkerPool:
    """Up to ``size`` workers, each running one call at a time; dead ones are replaced on demand."""

    def __init__(self, start_worker: Callable[[], Worker], size: int, timeout_s: float) -> None:
        # bwrap's --die-with-parent is PR_SET_PDEATHSIG, which fires when the *thread* that forked it ends:
        # a worker started from the pre-start thread or from one of anyio's worker threads (pruned when
        # idle) was SIGKILLed mid-life. Every worker is therefore started from this one thread, which
        # lives as long as the process.
        spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mapsmith-spawner")
        self._start_worker = lambda: spawner.submit(start_worker).result()
        self.size = size
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._idle: list[Worker] = []
        self._count = 0  # workers alive or starting
        self._busy: dict[Any, Worker] = {}
        self._next_id = 0
        self._closed = False
        self.last_start_seconds: float | None = None

    def spawn(self) -> Worker:
        """A new worker outside the pool (for measuring its start; the caller closes it)."""
        return self._start_worker()

    def _acquire(self) -> Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise MapSmithError("the server is shutting down", code="SERVER_STOPPING")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        return worker
                    self._count -= 1
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            worker = self._start_worker()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        self.last_start_seconds = worker.start_seconds
        return worker

    def _release(self, worker: Worker) -> None:
        with self._cond:
            if worker.alive() and not self._closed:
                self._idle.append(worker)
            else:
                self._count -= 1
                if worker.proc.poll() is None:
                    threading.Thread(target=worker.kill, args=("retired",), daemon=True).start()
            self._cond.notify()

    def prestart(self) -> None:
        """Start one worker in the background so the first call does not wait for it."""

        def start() -> None:
            try:
                self._release(self._acquire())
            except MapSmithError as exc:
                print(f"mapsmith: the engine worker did not pre-start: {exc}", file=sys.stderr, flush=True)

        threading.Thread(target=start, name="mapsmith-prestart", daemon=True).start()

    def call(self, method: str, args: dict[str, Any], progress: Callable[[float, str], None] | None, key: Any) -> Any:
        worker = self._acquire()
        with self._cond:
            self._next_id += 1
            call_id = self._next_id
            self._busy[key] = worker
        try:
            return worker.call(call_id, method, args, progress, self.timeout_s)
        finally:
            with self._cond:
                self._busy.pop(key, None)
            self._release(worker)

    def cancel(self, key: Any) -> bool:
        """Kill the worker running the call under ``key``; True when there was one."""
        with self._cond:
            worker = self._busy.get(key)
        if worker is None:
            return False
        worker.kill("cancelled")
        return True

    def calls_running(self) -> int:
        with self._cond:
            return len(self._busy)

    def warm_counts(self) -> dict[str, int]:
        """How many workers finished their warm-up (their "warm" frame came) and how many are starting or warming."""
        with self._cond:
            listed = [*self._idle, *self._busy.values()]
            count = self._count  # alive or starting, and a dead idle one not yet pruned
        alive = [w for w in listed if w.alive()]
        warm = sum(1 for w in alive if w.warmed is not None)
        return {"warm_workers": warm, "warming_workers": max(0, count - warm - (len(listed) - len(alive)))}

    def worker_pids(self) -> list[int]:
        with self._cond:
            workers = list(self._idle) + list(self._busy.values())
        return [w.proc.pid for w in workers if w.alive()]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers = list(self._idle) + list(self._busy.values())
            self._idle.clear()
            self._cond.notify_all()
        for w in workers:
            w.close()
