"""The launcher's side of the wire, against small stand-in workers (plain Python, no bwrap): frames,
progress, structured errors, a malformed frame, a crash and a timeout each become what the server sends."""

from __future__ import annotations

import io
import shutil
import signal
import sys
from pathlib import Path

import pytest

from mapsmith.errors import MapSmithError
from mapsmith.sandbox.launcher import TIMEOUT_GRACE_S, Worker
from mapsmith.sandbox.protocol import HEADER, MAX_FRAME_BYTES, ProtocolError, error_from_dict, read_frame, write_frame

# A stand-in worker: says it is ready, then answers each request as its method names.
STAND_IN = r"""
import os, sys, time
sys.path[:0] = {paths!r}
from mapsmith.sandbox.protocol import read_frame, write_frame
out = os.fdopen(os.dup(1), "wb"); os.dup2(2, 1)
inp = os.fdopen(os.dup(0), "rb", buffering=0)
write_frame(out, {{"ready": True, "pid": os.getpid()}})
while True:
    req = read_frame(inp)
    m = req["method"]
    if m == "echo":
        write_frame(out, {{"id": req["id"] - 1, "progress": [0.1, "a late frame of an earlier call"]}})
        write_frame(out, {{"id": req["id"], "progress": [0.5, "half"]}})
        write_frame(out, {{"id": req["id"], "result": req["args"]}})
    elif m == "refuse":
        error = {{"code": "X_CODE", "message": "no", "hint": "h", "evidence": {{"k": 1}}}}
        write_frame(out, {{"id": req["id"], "error": error}})
    elif m == "garbage":
        write_frame(out, {{"id": req["id"], "progress": ["not a number"]}})
    elif m == "abort":
        print("about to abort in /secret/host/dir", file=sys.stderr, flush=True)
        os.abort()
    elif m == "sleep":
        time.sleep(60)
"""


def _worker(tmp_path: Path) -> Worker:
    script = STAND_IN.format(paths=[p for p in sys.path if p])
    return Worker([sys.executable, "-c", script], tmp_path, memory_mb=0, forward_stderr=False)


def test_frames_round_trip_and_refuse_what_is_not_a_frame() -> None:
    buf = io.BytesIO()
    write_frame(buf, {"id": 1, "result": {"name": "caf\u00e9 \udcff"}})  # a surrogate escape survives
    buf.seek(0)
    assert read_frame(buf) == {"id": 1, "result": {"name": "caf\u00e9 \udcff"}}
    with pytest.raises(ProtocolError):
        read_frame(io.BytesIO(HEADER.pack(MAX_FRAME_BYTES + 1)))
    with pytest.raises(ProtocolError):
        read_frame(io.BytesIO(HEADER.pack(2) + b"[]"))
    with pytest.raises(EOFError):
        read_frame(io.BytesIO(HEADER.pack(10) + b"{}"))  # cut mid-frame
    rebuilt = error_from_dict({"code": "C", "message": "m", "hint": "h", "evidence": {"a": [1]}})
    assert rebuilt.to_dict() == {"code": "C", "message": "m", "hint": "h", "evidence": {"a": [1]}}


def test_results_progress_and_errors_cross_the_pipe(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    try:
        seen: list[tuple[float, str]] = []
        assert worker.call(7, "echo", {"a": [1, 2]}, lambda f, m: seen.append((f, m)), 10) == {"a": [1, 2]}
        assert seen == [(0.5, "half")]  # the stale frame of call 6 was not passed on
        with pytest.raises(MapSmithError) as info:
            worker.call(8, "refuse", {}, None, 10)
        assert info.value.to_dict() == {"code": "X_CODE", "message": "no", "hint": "h", "evidence": {"k": 1}}
        assert worker.alive()  # a refusal is an answer: the worker stays
        with pytest.raises(MapSmithError) as info:
            worker.call(9, "garbage", {}, None, 10)
        assert info.value.code == "WORKER_PROTOCOL_ERROR" and not worker.alive()
    finally:
        worker.kill("test over")


def test_an_abort_is_engine_crashed_with_the_signal_and_a_redacted_tail(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    with pytest.raises(MapSmithError) as info:
        worker.call(1, "abort", {}, None, 10)
    data = info.value.to_dict()
    assert data["code"] == "ENGINE_CRASHED"
    # Without bwrap in between, the child's own status: killed by SIGABRT.
    assert data["evidence"]["signal"] == "SIGABRT" and data["evidence"]["exit_code"] == -signal.SIGABRT
    assert "about to abort in <outside the workspace>" in data["evidence"]["stderr_tail"] and "/secret" not in str(data)


def test_a_call_past_its_time_is_call_timeout_and_the_worker_is_gone(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    import time

    t0 = time.monotonic()
    with pytest.raises(MapSmithError) as info:
        worker.call(1, "sleep", {}, None, 0.5)
    assert info.value.code == "CALL_TIMEOUT" and info.value.evidence == {"method": "sleep", "timeout_s": 0.5}
    assert 0.5 + TIMEOUT_GRACE_S <= time.monotonic() - t0 < 0.5 + TIMEOUT_GRACE_S + 10
    assert not worker.alive() and worker.proc.returncode == -signal.SIGKILL


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")
def test_a_worker_outlives_the_short_lived_thread_that_asked_for_it() -> None:
    """--die-with-parent fires when the forking *thread* ends: before the pool started every worker from one
    long-lived thread, a worker asked for from a thread that then ended (the pre-start thread, a pruned anyio
    worker thread) was SIGKILLed mid-life, and a call on it came back ENGINE_CRASHED."""
    import subprocess
    import threading
    import time

    from mapsmith.sandbox.launcher import WorkerPool

    started: list[subprocess.Popen[bytes]] = []
    pool = WorkerPool(
        lambda: subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "--die-with-parent", "--", "sleep", "30"]),  # type: ignore[arg-type,return-value]
        1,
        5.0,
    )
    caller = threading.Thread(target=lambda: started.append(pool._start_worker()))  # type: ignore[arg-type]
    caller.start()
    caller.join()
    time.sleep(1.0)
    try:
        assert started[0].poll() is None  # still running after the asking thread ended (it was -9 before)
    finally:
        started[0].kill()
        started[0].wait()
