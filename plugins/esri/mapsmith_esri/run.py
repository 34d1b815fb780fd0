"""The MapSmith side of the worker protocol: start Pro's Python on ``worker.py``, read what it says.

The request and the result are UTF-8 JSON files passed by path; stdout carries progress lines
(``MAPSMITH-PROGRESS <fraction> <message>``), forwarded to the run's progress callback. A worker
that crashes, hangs or writes no result, and every outcome it reports, becomes a MapSmithError with
a stable code, the evidence (ArcPy's whole message queue, the stderr tail) and a hint.
It never imports arcpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mapsmith.errors import EngineError, OperationUnavailable

WORKER = Path(__file__).with_name("worker.py")
PROTOCOL = 1
PROGRESS_TAG = "MAPSMITH-PROGRESS"
DEFAULT_TIMEOUT_S = 3600
TIMEOUT_ENV = "MAPSMITH_ARCGIS_TIMEOUT_S"

# ArcGIS geoprocessing error codes MapSmith knows, to its own codes and a hint. Codes and meanings
# from Esri's "Geoprocessing tool errors and warnings" reference; any other code is ESRI_GP_FAILED.
GP_ERROR_CODES: dict[str, str] = {
    "000732": "ESRI_INPUT_NOT_FOUND",
    "000728": "ESRI_FIELD_NOT_FOUND",
    "000800": "ESRI_VALUE_NOT_IN_LIST",
    "000735": "ESRI_VALUE_REQUIRED",
    "000725": "ESRI_OUTPUT_EXISTS",
    "000258": "ESRI_OUTPUT_EXISTS",
    "000210": "ESRI_OUTPUT_NOT_CREATED",
    "000824": "LICENCE_TIER",
    "999999": "ESRI_GP_FAILED",
}
UNKNOWN_GP_ERROR = "999999"  # ArcGIS's own "failed without a specific reason", and ours for any code not above
GP_ERROR_HINTS: dict[str, str] = {
    "000732": "the input named in ArcPy's message does not exist or ArcGIS cannot read it",
    "000728": "the field named in ArcPy's message is not in the table; check its spelling",
    "000800": "a parameter value is not one the tool accepts; the message lists them",
    "000735": "a required parameter was empty",
    "000725": "the output exists and overwriting is off",
    "000258": "the output exists and overwriting is off",
    "000210": "ArcGIS could not create the output; check the folder and free space",
    "000824": "the tool is not licensed at this licence level",
    "999999": "ArcGIS failed without a reason MapSmith knows; ArcPy's message queue is in the evidence",
}


def timeout_s(environ: dict[str, str] | None = None) -> float:
    value = (environ if environ is not None else os.environ).get(TIMEOUT_ENV, "").strip()
    try:
        return float(value) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S


def subprocess_env() -> dict[str, str]:
    """Our Python's settings must not leak into Pro's: no PYTHONHOME/PYTHONPATH; UTF-8 streams."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}
    env["PYTHONIOENCODING"] = "utf-8"
    env["PYTHONUTF8"] = "1"
    return env


def _tail(text: str, lines: int = 20, chars: int = 4000) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n".join(kept)[-chars:]


def parse_progress(line: str) -> tuple[float, str] | None:
    """``(fraction, message)`` from a tagged progress line; None for any other line."""
    if not line.startswith(PROGRESS_TAG + " "):
        return None
    _, _, rest = line.partition(" ")
    number, _, message = rest.partition(" ")
    try:
        fraction = float(number)
    except ValueError:
        return None
    return min(max(fraction, 0.0), 1.0), message.strip()


def run_worker(
    python: str,
    request: dict[str, Any],
    folder: Path,
    progress: Callable[[float, str], None] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> tuple[dict[str, Any], list[str]]:
    """Run one request in Pro's Python; ``(result, stray stdout lines)``. Raises on a broken worker.

    ``folder`` holds the request and result files (and the scratch geodatabase) and may contain any
    characters: only its path travels, inside the request file and as two arguments.
    """
    request = {"protocol": PROTOCOL, **request}
    request_file, result_file = folder / "request.json", folder / "result.json"
    request_file.write_text(json.dumps(request, ensure_ascii=False, indent=1), "utf-8")
    result_file.unlink(missing_ok=True)
    argv = [python, str(WORKER), "--request", str(request_file), "--result", str(result_file)]
    stray: list[str] = []
    with tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, env=subprocess_env()
            )
        except OSError as exc:
            raise EngineError(
                f"ArcGIS Pro's Python could not start: {exc}",
                code="ESRI_WORKER_NOT_STARTED",
                evidence={"python": python},
                hint="check MAPSMITH_ARCGIS_PYTHON / the Pro installation (server_info shows the esri stack's state)",
            ) from exc
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                parsed = parse_progress(line)
                if parsed is None:
                    if line.strip():
                        stray.append(line)
                elif progress is not None:
                    progress(*parsed)
            returncode = proc.wait()
        finally:
            timer.cancel()
        stderr.seek(0)
        said = _tail(stderr.read().decode("utf-8", "replace"))
    evidence = {"python": python, "exit_status": returncode, "stderr_tail": said, "stdout_tail": stray[-20:]}
    if timed_out.is_set():
        raise EngineError(
            f"ArcGIS Pro's Python did not finish within {timeout:g} s and was stopped",
            code="ESRI_WORKER_TIMEOUT",
            evidence={**evidence, "timeout_s": timeout},
            hint=f"raise {TIMEOUT_ENV} for long runs, or check that Pro's Python starts by hand",
        )
    if not result_file.exists():
        raise EngineError(
            f"ArcGIS Pro's Python exited with status {returncode} without writing a result"
            + (f": {said.splitlines()[-1]}" if said else ""),
            code="ESRI_WORKER_CRASHED",
            evidence=evidence,
            hint="the stderr tail in the evidence says why; run the worker by hand with the request file to see more",
        )
    try:
        result = json.loads(result_file.read_text("utf-8"))
    except ValueError as exc:
        raise EngineError(
            f"the worker's result file is not JSON: {exc}",
            code="ESRI_WORKER_CRASHED",
            evidence=evidence,
            hint="this is a bug in the worker",
        ) from exc
    return result, stray


def raise_for_outcome(result: dict[str, Any], operation: str, tool: str) -> None:
    """Turn a worker result that is not ``ok`` into the MapSmithError an agent can act on."""
    if result.get("status") == "ok":
        return
    outcome = result.get("outcome")
    message = str(result.get("message") or "")
    queue = result.get("messages") or []
    evidence: dict[str, Any] = {
        "operation": operation,
        "tool": result.get("tool", tool),
        "product": result.get("product"),
    }
    if outcome == "licence_tier":
        raise OperationUnavailable(
            f"ArcGIS Pro cannot run {tool} for {operation} with this licence: {message}",
            code="LICENCE_TIER",
            evidence={**evidence, "outcome": "licence_tier"},
            hint="run it on a Standard/Advanced licence (or with the extension), or with MAPSMITH_STACK=opensource "
            "(or MAPSMITH_FALLBACK_STACK=opensource for a disclosed substitute)",
        )
    if outcome == "missing":
        raise OperationUnavailable(
            f"this ArcGIS Pro has no tool {tool} ({message})",
            code="OPERATION_MISSING",
            evidence={**evidence, "outcome": "missing"},
            hint="update ArcGIS Pro, or run the operation with MAPSMITH_STACK=opensource",
        )
    if outcome == "gp_error":
        codes = [m["code"] for m in queue if m.get("severity") == "error" and m.get("code")]
        known = next((c for c in codes if c in GP_ERROR_CODES), UNKNOWN_GP_ERROR)
        text = "\n".join(m["text"] for m in queue)
        evidence = {**evidence, "gp_codes": codes, "messages": queue}
        if GP_ERROR_CODES[known] == "LICENCE_TIER":
            raise OperationUnavailable(
                f"ArcGIS Pro refused {evidence['tool']}: the tool is not licensed here. ArcPy said:\n{text}",
                code="LICENCE_TIER",
                evidence={**evidence, "outcome": "licence_tier"},
                hint="run it on a licence level that includes the tool, or with MAPSMITH_STACK=opensource",
            )
        raise EngineError(
            f"ArcGIS Pro's {evidence['tool']} failed in {operation}. ArcPy said:\n{text}",
            code=GP_ERROR_CODES[known],
            evidence=evidence,
            hint=GP_ERROR_HINTS[known],
        )
    raise EngineError(
        f"the ArcGIS Pro worker failed: {message}",
        code="ESRI_WORKER_FAILED",
        evidence={**evidence, "traceback": result.get("traceback", "")[-2000:]},
        hint="the worker's traceback is in the evidence",
    )
