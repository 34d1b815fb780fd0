"""The proposals target inside the jail: build the RunContext, run the agent's code once, return the reply.

``mapsmith.proposals.jailrun`` asks MapSmith's one in-jail child (``mapsmith.sandbox.child``) to call
``run_proposal`` with the contract, the source, the arguments and the paths as the jail shows them. The
child has already set the limits, imported the engines MapSmith ships and installed the witness in
``refuse`` mode, unarmed; this module builds the context with MapSmith's own code, arms the witness
(``mapsmith.sandbox.witness.current()``) for exactly the agent's code, and turns how it ended into one
JSON-able reply. What the witness saw travels on the child's result channel, not in the reply.

This module must never compile the agent's code before the witness is armed, and never let an exception
of the agent's code escape as anything but a reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mapsmith.sandbox.child import error_of, limit_of
from mapsmith.sandbox.witness import current


def _build_context(request: dict[str, Any]) -> Any:
    from mapsmith.contracts import parse_contract
    from mapsmith.runner import RunContext
    from mapsmith_opensource import dataset_io

    io: Any = dataset_io()
    contract = parse_contract(request["contract"], source=f"proposal {request['contract'].get('name')}")
    paths = {k: Path(v) for k, v in request["paths"].items()}
    layers = dict(request.get("layers") or {})
    inputs = {}
    for slot, path in paths.items():
        try:
            inputs[slot] = io.inspect(path, layers.get(slot))
        except Exception:  # noqa: BLE001 - a header the opensource reader cannot read: the code may still
            pass
    out = request.get("output_path")
    temp = request.get("temp_output")
    return RunContext(
        contract=contract,
        arguments=dict(request["arguments"]),
        paths=paths,
        inputs=inputs,
        layers=layers,
        output_path=Path(out) if out else None,
        temp_output=Path(temp) if temp else None,
        io=io,
        parameters=dict(request.get("parameters") or {}),
        given_paths=dict(request.get("given_paths") or {}),
    )


def _reply_of(ctx: Any) -> dict[str, Any]:
    return {
        "ok": True,
        "answer": ctx.answer,
        "engine": {"name": ctx.engine_name, "version": ctx.engine_version, "components": ctx.engine_components},
        "notes": [str(n) for n in ctx.notes][:50],
        "warnings": [w.to_dict() for w in ctx.warnings][:50],
        "checks": [
            {"name": c.name, "passed": bool(c.passed), "detail": str(c.detail), "critical": bool(c.critical)}
            for c in ctx.checks
        ][:100],
        "crs_decisions": ctx.crs_decisions,
        "expected_output_crs": ctx.expected_output_crs,
    }


def run_proposal(request: dict[str, Any]) -> dict[str, Any]:
    """Called by the child with the witness installed and unarmed; returns the reply for ``jailrun``."""
    witness = current()
    if witness is None:
        raise RuntimeError("run_proposal runs only inside mapsmith.sandbox.child, which installs the witness")
    reply: dict[str, Any]
    try:
        ctx = _build_context(request)
        witness.armed = True
        namespace: dict[str, Any] = {"__name__": f"mapsmith_proposal_{request['entry']}"}
        code = compile(request["source"], f"<proposal {request['entry']}>", "exec")
        exec(code, namespace)  # noqa: S102 - this is the point: the agent's code, inside the jail
        entry = namespace.get(request["entry"])
        if not callable(entry):
            reply = {"ok": False, "error": {"kind": "entry_missing", "entry": request["entry"]}}
        else:
            entry(ctx)
            witness.armed = False
            reply = _reply_of(ctx)
    except BaseException as exc:  # noqa: BLE001 - every ending becomes a reply; the outer process judges it
        witness.armed = False
        info = error_of(exc)
        error: dict[str, Any] = {
            "kind": "exception",
            "type": info["type"],
            "message": str(exc)[:1000],
            "traceback_tail": info["traceback_tail"],
        }
        if limit := limit_of(exc):
            error["kind"] = "limit"
            error["limit"] = limit
        if info.get("mapsmith_error"):
            error["mapsmith_error"] = exc.to_dict()  # type: ignore[attr-defined]
        reply = {"ok": False, "error": error}
    witness.armed = False
    return reply
