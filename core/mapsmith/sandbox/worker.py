"""The engine worker: the real MapSmith, run inside the sandbox, answering one request at a time.

Started as ``python -m mapsmith.sandbox.worker`` by the launcher (inside bubblewrap). It keeps a private
copy of fd 1 for the protocol and points fd 1 at stderr, so that an engine printing to stdout cannot
corrupt a frame; stdin is likewise kept private and fd 0 becomes /dev/null. The memory limit is set
here, before any engine is imported, as RLIMIT_AS (soft and hard, so nothing inside can raise it).

This module must never answer anything but the methods in ``METHODS``, never run a request before the
previous one has been answered, and never write anything but frames to the protocol stream.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import traceback
from typing import IO, Any

from mapsmith.errors import MapSmithError
from mapsmith.sandbox.protocol import read_frame, write_frame

# The data-touching MapSmith methods the proxy forwards. Everything else stays in the server.
METHODS = (
    "run",
    "execute_plan",
    "validate_plan",
    "explain_plan",
    "get_provenance",
    "get_lineage",
    "replay",
    "preview_map",
    "export_map",
    "propose_operation",
)
WITH_PROGRESS = ("run", "execute_plan")
# Imported before the worker says it is ready, so the first call does not pay for them; the stacks' own warm-up
# (``MapSmith.warm``: the engines and DuckDB's database) follows the ready frame.
WARM_IMPORTS = ("pyproj", "shapely", "pyogrio", "geopandas")
MEMORY_ENV = "MAPSMITH_WORKER_MEMORY_MB"


def take_protocol_streams() -> tuple[IO[bytes], IO[bytes]]:
    """Private duplicates of stdin/stdout for frames; fd 0 becomes /dev/null and fd 1 becomes stderr."""
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout.flush()
    os.dup2(2, 1)
    return proto_in, proto_out


def set_memory_limit(environ: dict[str, str]) -> int | None:
    raw = environ.get(MEMORY_ENV, "")
    try:
        mb = int(raw) if raw else 0
    except ValueError:
        mb = 0  # the launcher validated it; a worker started by hand gets no limit rather than a crash
    if mb <= 0:
        return None
    limit = mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return mb


def memory_error_in(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, MemoryError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def structured(exc: BaseException, memory_mb: int | None) -> dict[str, Any]:
    """Any failure as the dict the server rebuilds into a MapSmithError."""
    if memory_error_in(exc):
        return MapSmithError(
            "the engine ran out of memory: the worker's memory limit stopped the operation",
            code="MEMORY_LIMIT",
            evidence={"memory_limit_mb": memory_mb, "exception": type(exc).__name__},
            hint=f"run it on a smaller extent or coarser data, or raise {MEMORY_ENV}",
        ).to_dict()
    if isinstance(exc, MapSmithError):
        return exc.to_dict()
    return MapSmithError(
        f"unexpected {type(exc).__name__} in the engine worker: {exc}",
        code="INTERNAL_ERROR",
        evidence={"exception": type(exc).__name__, "traceback_tail": traceback.format_exc(limit=-3)[-2000:]},
        hint="this is a bug in MapSmith; the server is still running, other calls are unaffected",
    ).to_dict()


def dispatch(app: Any, method: str, args: dict[str, Any], progress: Any) -> Any:
    if method not in METHODS:
        raise MapSmithError(f"the worker has no method {method!r}", code="WORKER_PROTOCOL_ERROR")
    if method == "run":
        return app.run(args["operation"], args["arguments"], progress).to_dict()
    if method == "execute_plan":
        return app.execute_plan(args["plan"], progress)
    if method in ("preview_map", "export_map"):
        options = dict(args.get("options") or {})
        if method == "preview_map":
            return app.preview_map(args["paths"], **options)
        return app.export_map(args["paths"], args["output_path"], bool(args.get("overwrite")), **options)
    if method == "propose_operation":
        return app.propose_operation(args.get("contract"), args.get("code"), args.get("examples"))
    if method in ("validate_plan", "explain_plan"):
        return getattr(app, method)(args["plan"])
    return getattr(app, method)(args["path"], args.get("layer"))  # get_provenance, get_lineage, replay


def serve(app: Any, proto_in: IO[bytes], proto_out: IO[bytes], memory_mb: int | None) -> None:
    lock = threading.Lock()  # progress may be reported from an engine's own thread

    def send(message: dict[str, Any]) -> None:
        with lock:
            write_frame(proto_out, message)

    while True:
        try:
            request = read_frame(proto_in)
        except EOFError:
            return  # the server closed the pipe: it is done with this worker
        call_id = request.get("id")

        def progress(fraction: float, message: str, _id: Any = call_id) -> None:
            send({"id": _id, "progress": [float(fraction), str(message)]})

        try:
            method = str(request.get("method"))
            result = dispatch(app, method, dict(request.get("args") or {}), progress)
            send({"id": call_id, "result": result})
        except BaseException as exc:  # noqa: BLE001 - everything becomes a structured reply; the worker lives on
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            send({"id": call_id, "error": structured(exc, memory_mb)})


def main() -> int:
    proto_in, proto_out = take_protocol_streams()
    import faulthandler

    faulthandler.enable()  # a segfault's Python stack lands in the stderr tail the crash error carries
    memory_mb = set_memory_limit(dict(os.environ))
    try:
        from mapsmith.app import MapSmith

        app = MapSmith()
    except BaseException as exc:  # noqa: BLE001 - the launcher turns this into a start-up error
        write_frame(proto_out, {"ready": False, "error": structured(exc, memory_mb)})
        return 1
    for name in WARM_IMPORTS:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - an engine missing here is reported by the operation that needs it
            pass
    write_frame(proto_out, {"ready": True, "pid": os.getpid(), "memory_limit_mb": memory_mb})
    # After "ready", so that the server's start does not wait for it; a request that comes meanwhile waits at most
    # for the rest of it, which it would otherwise pay in full (DuckDB's spatial extension: 0.2-0.3 s, about 150 MB
    # resident and 1.1 GB of address space, which the memory limit counts; a warm-up the limit stops is not an error).
    # The "warm" frame (no call id) tells the server it is done: server_info's sandbox.warm_workers.
    write_frame(proto_out, {"warm": app.warm()})
    serve(app, proto_in, proto_out, memory_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
