"""The one process inside the jail: set limits, install the witness, call the target once, report.

Started by ``mapsmith.sandbox.jail.run_jailed`` as ``python -s -m mapsmith.sandbox.child`` for both callers
(``plugin check`` through ``mapsmith.pluginkit.isolation``, ``propose_operation`` through
``mapsmith.proposals.jailrun``). It reads one JSON request on stdin::

    {"target": "pkg.mod[:function]", "payload": {...},
     "witness": {"mode": "observe" | "refuse", "writable": [...], "forbidden": [...], ...},
     "warm": ["numpy", ...], "arm": "now" | "by_target"}

applies the limits on itself (``apply_limits``, again: the caller set them before exec too), imports the
``warm`` modules (MapSmith's engines, trusted), installs the witness (``mapsmith.sandbox.witness``), and only
then imports the target and calls ``function(payload)``. With ``arm = "by_target"`` the witness watches only
where the target arms it (``witness.current()``): the proposals target arms it around the agent's code alone.

On the file descriptor named by ``MAPSMITH_JAIL_RESULT_FD`` it writes JSON lines: each attempt the witness
saw, ``{"imported": true, "import_s": s}``, then one ``{"outcome": "result" | "error", ...}`` (an error
carries the limit it shows, when it shows one). Everything on it is a claim the caller checks against what
it saw from outside (exit status, signal, clock, files). This module must never import the target before
the limits and the witness are in place, and never swallow an attempt.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import sys
import time
import traceback
from typing import Any

RESULT_FD_ENV = "MAPSMITH_JAIL_RESULT_FD"
LIMIT_NAMES = ("wall_time", "cpu_time", "memory", "file_size", "processes", "tmp_size")


def _from_fork(exc: BaseException) -> bool:
    """EAGAIN raised while starting a process: the process limit, not a busy resource."""
    return "fork" in "".join(traceback.format_tb(exc.__traceback__))


def limit_of(exc: BaseException) -> str | None:
    """The limit an exception shows, following its causes (the runner wraps what an engine raised)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, MemoryError):
            return "memory"
        if isinstance(cur, OSError) and cur.errno == errno.EFBIG:
            return "file_size"
        if isinstance(cur, OSError) and cur.errno == errno.EAGAIN and _from_fork(cur):
            return "processes"
        if isinstance(cur, OSError) and cur.errno == errno.ENOSPC:
            return "tmp_size"
        text = str(cur)
        if "File too large" in text:  # GDAL's message for EFBIG from a C write
            return "file_size"
        if "std::bad_alloc" in text or "Cannot allocate memory" in text:
            return "memory"
        cur = cur.__cause__ or cur.__context__
    return None


def error_of(exc: BaseException) -> dict[str, Any]:
    """The structured form of what the target raised."""
    kind = type(exc)
    info: dict[str, Any] = {"class": f"{kind.__module__}.{kind.__qualname__}", "type": kind.__name__}
    if hasattr(exc, "to_dict") and hasattr(exc, "code"):
        info.update(exc.to_dict())
        info["mapsmith_error"] = True
    else:
        info.update({"message": str(exc)[:1000], "mapsmith_error": False})
    info["traceback_tail"] = "".join(traceback.format_exception(exc))[-2000:]
    return info


def main() -> int:
    fd = int(os.environ[RESULT_FD_ENV])
    os.set_inheritable(fd, False)  # what the target starts does not get our channel
    from mapsmith.sandbox.limits import apply_limits
    from mapsmith.sandbox.witness import Witness, channel, install

    apply_limits(os.environ)
    send = channel(fd)
    request = json.loads(sys.stdin.buffer.read())
    for name in request.get("warm") or ():
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - an engine missing here is the code's own import error, said later
            pass
    witness = Witness.from_request(send, dict(request.get("witness") or {}))
    install(witness)
    witness.armed = request.get("arm", "now") == "now"
    module_name, _, function_name = str(request["target"]).partition(":")
    started = time.perf_counter()
    import_s = None
    try:
        module = importlib.import_module(module_name)
        import_s = time.perf_counter() - started
        send({"imported": True, "import_s": import_s})  # known even if the call never returns
        value = getattr(module, function_name or "main")(request.get("payload") or {})
        witness.armed = False
        text = json.dumps({"outcome": "result", "result": value, "import_s": import_s}, default=str)
    except BaseException as exc:  # noqa: BLE001 - everything the target raises is reported, nothing escapes
        witness.armed = False
        send({"outcome": "error", "error": error_of(exc), "limit": limit_of(exc), "import_s": import_s})
        return 0 if not isinstance(exc, SystemExit) else 3
    try:
        data = memoryview((text + "\n").encode())
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
