"""The MapSmith the server holds when engines are sandboxed: catalogue here, data-touching calls in a worker.

``SandboxedMapSmith`` is a MapSmith (plugins, contracts, router, workspace policy: nothing that opens a
dataset), whose data-touching methods are forwarded to a pooled worker running the real MapSmith inside
bubblewrap. Results and errors cross as JSON. ``InProcessMapSmith`` is the fallback: the real thing,
saying in server_info why there is no sandbox. ``run_cancellable`` is what an async handler awaits so
that a cancelled MCP request kills the worker doing its work.

This module must never import an engine nor open a dataset in the server process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from mapsmith.app import MapSmith
from mapsmith.errors import MapSmithError
from mapsmith.runner import OperationResult
from mapsmith.sandbox.launcher import Limits, WorkerPool
from mapsmith.sandbox.policy import SandboxDecision

T = TypeVar("T")
Progress = Callable[[float, str], None] | None


class InProcessMapSmith(MapSmith):
    """The engines in the server process (no sandbox here); server_info says so and why."""

    def __init__(self, decision: SandboxDecision, environ: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(environ, **kwargs)
        self.sandbox = decision
        self._warming: threading.Thread | None = None
        self.warmed: dict[str, str] | None = None  # MapSmith.warm's answer, once warm_in_background's thread is done

    def warm_in_background(self) -> None:
        """``MapSmith.warm()`` in a thread of the server, as a sandboxed worker runs it on starting, so the first call
        does not pay for it. Calls do not wait for it: what it opens is shared safely (DuckDB's database is cached,
        and a run needing the Spark session the warm-up is starting waits at the session's lock)."""

        def body() -> None:
            self.warmed = self.warm()

        self._warming = threading.Thread(target=body, name="mapsmith-warm", daemon=True)
        self._warming.start()

    def server_info(self) -> dict[str, Any]:
        sandbox: dict[str, Any] = self.sandbox.to_dict()
        if self._warming is not None:  # per stack, "ready" or why it could not warm; "warming" until then
            sandbox["warm"] = self.warmed if self.warmed is not None else "warming"
        return {**super().server_info(), "sandbox": sandbox}


class SandboxedMapSmith(MapSmith):
    def __init__(
        self,
        decision: SandboxDecision,
        pool_factory: Callable[[MapSmith], tuple[WorkerPool, Limits]],
        environ: Mapping[str, str] | None = None,
        extra_plugins: Iterable[tuple[str, object]] = (),
        load_entry_points: bool = True,
        *,
        network_pool_factory: Callable[[MapSmith], WorkerPool] | None = None,
    ) -> None:
        super().__init__(environ, extra_plugins, load_entry_points)
        self.sandbox = decision
        self.pool, self.limits = pool_factory(self)
        # Calls that fetch (mapsmith.fetch.NETWORK_OPERATIONS, and plans with such a step) go to a worker
        # that shares the host's network; every other call keeps workers that have none. Started on the
        # first such call, and only when the operator allows fetching at all.
        self._network_pool_factory = network_pool_factory
        self._network_pool: WorkerPool | None = None
        self._network_lock = threading.Lock()

    def _pool_for(self, operations: Iterable[str]) -> WorkerPool:
        from mapsmith.fetch import NETWORK_OPERATIONS
        from mapsmith.fetch.policy import ALLOW_ENV

        if self._network_pool_factory is None or not self.environ.get(ALLOW_ENV, "").strip():
            return self.pool  # fetching is off: the operation refuses with FETCH_DISABLED in a plain worker
        if not NETWORK_OPERATIONS.intersection(operations):
            return self.pool
        with self._network_lock:
            if self._network_pool is None:
                self._network_pool = self._network_pool_factory(self)
            return self._network_pool

    # -- the forwarded methods -------------------------------------------------------------------

    def _call(
        self, method: str, args: dict[str, Any], progress: Progress = None, pool: WorkerPool | None = None
    ) -> Any:
        result = (pool or self.pool).call(method, args, progress, key=threading.get_ident())
        if not isinstance(result, dict):  # every forwarded method answers an object
            raise MapSmithError(
                f"the engine worker's reply to {method} is not an object",
                code="WORKER_PROTOCOL_ERROR",
                evidence={"method": method, "type": type(result).__name__},
                hint="this is a bug (or a compromised engine); call again",
            )
        return result

    def run(self, operation: str, arguments: Mapping[str, Any], progress: Progress = None) -> OperationResult:
        self._load_toolbox_for(operation)
        data = self._call(
            "run", {"operation": operation, "arguments": dict(arguments)}, progress, self._pool_for([operation])
        )
        try:
            return OperationResult(**data)
        except TypeError as exc:  # the worker's reply is not an operation result: never trust it as one
            raise MapSmithError(
                f"the engine worker's reply to {operation} is not an operation result",
                code="WORKER_PROTOCOL_ERROR",
                evidence={"operation": operation},
                hint="this is a bug (or a compromised engine); call again",
            ) from exc

    def execute_plan(self, plan: Mapping[str, Any], progress: Progress = None) -> dict[str, Any]:
        steps = plan.get("steps")
        operations = [
            step["operation"]
            for step in (steps if isinstance(steps, list) else [])
            if isinstance(step, Mapping) and isinstance(step.get("operation"), str)
        ]
        for operation in operations:
            self._load_toolbox_for(operation)
        # A plan that starts with a fetch runs whole in the network worker: a plan is one call in one worker.
        return dict(self._call("execute_plan", {"plan": dict(plan)}, progress, self._pool_for(operations)))

    def _load_toolbox_for(self, operation: str) -> None:
        """A toolbox operation (``qgis:*``) is loaded here first: the server process writes the toolbox's
        cache, which the workers then see read-only, so no worker asks QGIS for its catalogue again."""
        try:
            if self.host.toolbox_for(operation):
                self.host.contracts.get(operation)
        except Exception:  # noqa: BLE001 - the worker says what is wrong with the operation itself
            pass

    def validate_plan(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._call("validate_plan", {"plan": dict(plan)}))

    def explain_plan(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._call("explain_plan", {"plan": dict(plan)}))

    def get_provenance(self, path: str, layer: str | None = None) -> dict[str, Any]:
        return dict(self._call("get_provenance", {"path": path, "layer": layer}))

    def get_lineage(self, path: str, layer: str | None = None) -> dict[str, Any]:
        return dict(self._call("get_lineage", {"path": path, "layer": layer}))

    def replay(self, path: str, layer: str | None = None) -> dict[str, Any]:
        return dict(self._call("replay", {"path": path, "layer": layer}))

    def preview_map(self, paths: Any, **options: Any) -> dict[str, Any]:
        return dict(self._call("preview_map", {"paths": paths, "options": options}))

    def export_map(self, paths: Any, output_path: Any, overwrite: bool = False, **options: Any) -> dict[str, Any]:
        args = {"paths": paths, "output_path": output_path, "overwrite": overwrite, "options": options}
        return dict(self._call("export_map", args))

    def propose_operation(self, contract: Any, code: Any, examples: Any) -> dict[str, Any]:
        """Checked in a worker (the agent's code runs in a jail the worker starts); on success this process
        reads the workspace's store so its catalogue (list_operations, plans) has the operation too."""
        args = {"contract": contract, "code": code, "examples": examples}
        reply = dict(self._call("propose_operation", args))
        self.refresh_proposals()
        return reply

    # -- what stays here ----------------------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        info = super().server_info()
        info["sandbox"] = {**self.sandbox.to_dict(), **self.limits.to_dict(), **self.pool.warm_counts()}
        return info

    def cancel(self, key: Any) -> bool:
        """Stop the call a thread is waiting on (its worker is killed and replaced); True if one was running."""
        network = self._network_pool
        return self.pool.cancel(key) or (network is not None and network.cancel(key))

    def close(self) -> None:
        self.pool.close()
        if self._network_pool is not None:
            self._network_pool.close()


async def run_cancellable(app: MapSmith, fn: Callable[[], T]) -> T:
    """``anyio.to_thread.run_sync(fn)``, except that when the awaiting task is cancelled (an MCP
    ``notifications/cancelled``) the sandboxed worker running ``fn``'s call is killed, so the work stops
    instead of burning CPU until it ends. In-process there is nothing to kill: the thread runs to its end."""
    import anyio

    cancel = getattr(app, "cancel", None)
    if cancel is None:
        return await anyio.to_thread.run_sync(fn)
    ident: list[int] = []

    def body() -> T:
        ident.append(threading.get_ident())
        return fn()

    try:
        return await anyio.to_thread.run_sync(body, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        if ident:
            cancel(ident[0])
        raise


def workspace_of(app: MapSmith) -> Path:
    root = app.workspace.root
    assert root is not None, "the sandbox is only built under a workspace"
    return Path(root)
