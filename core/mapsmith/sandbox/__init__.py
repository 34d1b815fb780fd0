"""Engines in an OS sandbox: the server keeps the protocol, a bubblewrap worker touches the data.

On Linux under a workspace, every data-touching MapSmith call runs in a long-lived worker process
inside bubblewrap whose filesystem view is the workspace plus read-only software, with no network, a
private /tmp and no home directory. A file that tricks GDAL into following a path or URL finds nothing
outside to read. Where no sandbox can be built, the engines run in-process and server_info says why.

Chosen over namespaces + seccomp + Landlock written here: bubblewrap is a small, audited, packaged
setuid-free tool (Flatpak's) that builds exactly this view in one command, and Landlock is missing on
many kernels still in use; a hand-rolled namespace setup would be more code to get wrong.

Layout: ``policy`` (what the worker may see, and whether a sandbox is possible), ``launcher`` (worker
processes, limits, crashes, the pool), ``protocol`` (frames on the pipes), ``worker`` (the process
inside), ``proxy`` (the MapSmith the server holds), and the one stricter, one-shot sandbox for code MapSmith did
not write (``plugin check``'s plugins, ``propose_operation``'s code): ``jail`` (the bubblewrap profile and
the run), ``limits`` (rlimits and the pids cgroup), ``child`` (the one process inside) and ``witness`` (the
audit hook that names attempts). This package must never run an engine in the server process when the
sandbox is on.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from mapsmith.app import MapSmith
from mapsmith.sandbox.launcher import Limits, Worker, WorkerPool
from mapsmith.sandbox.policy import SANDBOX_ENV, SandboxDecision, build_plan, bwrap_path, decide
from mapsmith.sandbox.proxy import InProcessMapSmith, SandboxedMapSmith, run_cancellable, workspace_of

__all__ = ["build_app", "run_cancellable", "SandboxedMapSmith", "InProcessMapSmith", "SandboxDecision", "shut_down"]

# What a server leaving must undo, last first: workers to stop, identity folders to remove. Run at exit, or by
# shut_down when a signal ends the process (atexit handlers do not run then).
_undo: list[Callable[[], object]] = []
_undoing = threading.Lock()


def _on_leaving(action: Callable[[], object]) -> None:
    with _undoing:
        if not _undo:
            atexit.register(shut_down)
        _undo.append(action)


def shut_down() -> None:
    """Stop this process's workers and remove their identity folders; safe to call twice."""
    while True:
        with _undoing:
            if not _undo:
                return
            action = _undo.pop()
        try:
            action()
        except Exception:  # one failure must not keep the rest from running
            pass


def _network_pool_factory(environ: Mapping[str, str]) -> Callable[[MapSmith], WorkerPool]:
    """The one worker that may open connections: started on the first fetch, never before."""

    def factory(app: MapSmith) -> WorkerPool:
        limits = Limits(environ)
        workspace = workspace_of(app).resolve()
        identity = Path(tempfile.mkdtemp(prefix="mapsmith-sandbox-net-"))
        _on_leaving(lambda: shutil.rmtree(identity, True))
        worker_env = {**environ, "MAPSMITH_WORKER_MEMORY_MB": str(limits.memory_mb)}
        command = [sys.executable, "-m", "mapsmith.sandbox.worker"]
        plan = build_plan(worker_env, workspace, identity, command, bwrap_path() or "bwrap", network=True)
        pool = WorkerPool(lambda: Worker(plan.argv, workspace, limits.memory_mb), 1, limits.timeout_s)
        _on_leaving(pool.close)
        return pool

    return factory


def _pool_factory(environ: Mapping[str, str]) -> Callable[[MapSmith], tuple[WorkerPool, Limits]]:
    def factory(app: MapSmith) -> tuple[WorkerPool, Limits]:
        limits = Limits(environ)
        workspace = workspace_of(app).resolve()
        identity = Path(tempfile.mkdtemp(prefix="mapsmith-sandbox-"))
        _on_leaving(lambda: shutil.rmtree(identity, True))
        bwrap = bwrap_path() or "bwrap"
        worker_env = {**environ, "MAPSMITH_WORKER_MEMORY_MB": str(limits.memory_mb)}
        command = [sys.executable, "-m", "mapsmith.sandbox.worker"]

        # Built once: every worker gets the same view.
        plan = build_plan(worker_env, workspace, identity, command, bwrap)

        def start() -> Worker:
            return Worker(plan.argv, workspace, limits.memory_mb)

        pool = WorkerPool(start, limits.workers, limits.timeout_s)
        _on_leaving(pool.close)
        return pool, limits

    return factory


def build_app(environ: Mapping[str, str] | None = None, *, prestart: bool = True) -> MapSmith:
    """The MapSmith the server should hold: sandboxed when MAPSMITH_SANDBOX and the machine allow. ``prestart``: start
    the engine workers now (they warm up on starting), or, in-process, warm up in a thread of the server.

    Raises ConfigurationError when MAPSMITH_SANDBOX=on and no sandbox can be built (with the fix).
    Says once on stderr when the engines run in-process although the setting was auto.
    """
    env = dict(os.environ if environ is None else environ)
    decision = decide(env)
    if not decision.enabled:
        if decision.setting == "on":
            from mapsmith.errors import ConfigurationError

            raise ConfigurationError(
                f"{SANDBOX_ENV}=on but no sandbox can be built: {decision.reason}",
                code="SANDBOX_UNAVAILABLE",
                evidence=decision.to_dict(),
                hint=decision.fix or f"set {SANDBOX_ENV}=auto or off",
            )
        if decision.setting == "auto" and env.get("MAPSMITH_WORKSPACE"):
            print(f"mapsmith: engines run in-process, without the OS sandbox: {decision.reason}", file=sys.stderr)
        in_process = InProcessMapSmith(decision, env)
        if prestart:
            in_process.warm_in_background()
        return in_process
    app = SandboxedMapSmith(decision, _pool_factory(env), env, network_pool_factory=_network_pool_factory(env))
    if prestart:
        app.pool.prestart()
    return app
