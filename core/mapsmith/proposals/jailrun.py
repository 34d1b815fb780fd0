"""The implementation MapSmith registers for a proposed operation: the agent's code, run in the jail, every time.

``jailed_implementation(record)`` returns an ordinary implementation (``RunContext -> None``), so the
runner treats a proposed operation like any other: it checks arguments and inputs, hands over a temporary
output path, verifies what comes back and writes the manifest. Inside, each call binds the inputs
read-only into a fresh jail (``mapsmith.sandbox.jail``, the one sandbox ``plugin check`` uses too), has
MapSmith's in-jail child call ``mapsmith.proposals.inside.run_proposal`` there with the witness in
``refuse`` mode, and copies the output file back to the runner's temporary path. Whatever went wrong
becomes one refusal with a stable code, judged from outside (timeout, signal, sizes) or from the witness
(what the code tried). Before every run the stored source is digested again: a changed file is refused,
never run.

This module must never run the agent's code in this process, and never copy back a file the runner did
not ask for.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import MapSmithError
from mapsmith.proposals.store import ProposalRecord
from mapsmith.sandbox.jail import INPUTS, SCRATCH, JailLimits, JailRun, run_child
from mapsmith.sandbox.policy import software_paths
from mapsmith.verify import RunWarning

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

ENGINE_PREFIX = "proposed:"
EXPERIMENTAL_WARNING = "EXPERIMENTAL_OPERATION"
# The witness's kinds, each a refusal of its own: each leads the agent to a different fix.
_WITNESS_FIX = {
    "network": "the sandbox has no network: read only the input datasets named in the arguments",
    "process": "the sandbox runs no other program: compute in Python with the engines MapSmith ships",
    "native": "ctypes and foreign libraries are refused: use shapely, pyproj, numpy, geopandas or pyogrio",
    "write": "write only ctx.temp_output (and scratch files under /scratch or /tmp)",
    "read": "read only ctx.paths[...] (the input datasets named in the arguments)",
}
# Imported by the child before the witness is installed: MapSmith's engines, trusted, so the agent's
# ``import shapely`` is a lookup in sys.modules, not a file read the witness would have to judge.
WARM = ("numpy", "shapely", "pyproj", "pyogrio", "geopandas", "pandas", "mapsmith.runner", "mapsmith_opensource")
# Agent code may write here and nowhere else; read here, in the inputs and in the software trees.
WRITABLE = (SCRATCH, "/tmp", "/dev/null")
READABLE = (SCRATCH, INPUTS, "/tmp", "/usr", "/lib", "/lib64", "/bin", "/etc/ld.so", "/etc/localtime")
READABLE_DEVICES = ("/dev/null", "/dev/urandom", "/dev/zero")
# Fixed so the determinism check's two runs (and every later run) see the same set order and GeoPackage date.
DETERMINISM_ENV = {"PYTHONHASHSEED": "0", "OGR_CURRENT_DATE": "2000-01-01T00:00:00.000Z", "HOME": SCRATCH}


def _refuse_witness(name: str, violation: dict[str, Any], evidence: dict[str, Any]) -> MapSmithError:
    kind = violation.get("kind")
    hint = _WITNESS_FIX.get(str(kind), "") + "; fix the code and call propose_operation again"
    message = (
        f"the proposed operation {name} tried {violation.get('event')} ({kind}: {str(violation.get('target'))[:120]}), "
        "which the sandbox refuses"
    )
    ev = {**evidence, "attempt": violation}
    if kind == "network":
        return MapSmithError(message, code="PROPOSAL_NETWORK_ATTEMPT", evidence=ev, hint=hint)
    if kind == "process":
        return MapSmithError(message, code="PROPOSAL_PROCESS_ATTEMPT", evidence=ev, hint=hint)
    if kind == "native":
        return MapSmithError(message, code="PROPOSAL_NATIVE_CODE_ATTEMPT", evidence=ev, hint=hint)
    if kind == "read":
        return MapSmithError(message, code="PROPOSAL_READ_OUTSIDE", evidence=ev, hint=hint)
    return MapSmithError(message, code="PROPOSAL_WROTE_OUTSIDE", evidence=ev, hint=hint)


def _bind_inputs(paths: dict[str, Path]) -> tuple[dict[str, Path], dict[str, str]]:
    """Jail path -> host file for every file an input needs (a shapefile's members travel with it)."""
    binds: dict[str, Path] = {}
    inside: dict[str, str] = {}
    for i, (slot, host) in enumerate(sorted(paths.items())):
        folder = f"{INPUTS}/{i}"
        inside[slot] = f"{folder}/{host.name}"
        binds[inside[slot]] = host
        if host.is_file():
            for sibling in host.parent.glob(host.stem + ".*"):
                if sibling != host and sibling.is_file():
                    binds[f"{folder}/{sibling.name}"] = sibling
    return binds, inside


def _scratch_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def run_in_jail(record: ProposalRecord, ctx: RunContext, limits: JailLimits, environ: dict[str, str]) -> dict[str, Any]:
    """Run the proposal's code on ``ctx`` in a fresh jail; the child's reply, or a PROPOSAL_* refusal."""
    source = record.verified_source()
    binds, inside = _bind_inputs(ctx.paths)
    scratch = Path(tempfile.mkdtemp(prefix="mapsmith-proposal-"))
    try:
        (scratch / "out").mkdir()
        out_inside = f"{SCRATCH}/out/{ctx.output_path.name}" if ctx.output_path else None
        temp_inside = f"{SCRATCH}/out/{ctx.temp_output.name}" if ctx.temp_output else None
        request = {
            "entry": record.name,
            "source": source,
            "contract": record.contract,
            "arguments": {k: (inside.get(k, v)) for k, v in ctx.arguments.items()},
            "paths": inside,
            "layers": ctx.layers,
            "parameters": ctx.parameters,
            "given_paths": ctx.given_paths,
            "output_path": out_inside,
            "temp_output": temp_inside,
        }
        software = [str(p) for p in software_paths(environ)]
        witness = {
            "mode": "refuse",
            "writable": list(WRITABLE),
            "readable": [*READABLE, *READABLE_DEVICES, *software],
            "software": software,
            # Host folders the jail does not show, named as what they are even under a root it has.
            "forbidden": [str(ctx.workspace.root) if ctx.workspace and ctx.workspace.root else "", str(Path.home())],
        }
        run = run_child(
            {
                "target": "mapsmith.proposals.inside:run_proposal",
                "payload": request,
                "witness": witness,
                "warm": list(WARM),
                "arm": "by_target",
            },
            scratch=scratch,
            inputs=binds,
            limits=limits,
            environ=environ,
            env=DETERMINISM_ENV,
        )
        evidence: dict[str, Any] = {
            "operation": record.name,
            "source_sha256": record.source_sha256,
            "seconds": round(run.seconds, 3),
            "limits": limits.to_dict(),
        }
        reply = _judge(record.name, run, evidence, limits, scratch)
        if ctx.temp_output is not None:
            produced = scratch / "out" / ctx.temp_output.name
            if not produced.exists():
                raise MapSmithError(
                    f"the proposed operation {record.name} returned without writing ctx.temp_output",
                    code="PROPOSAL_NO_OUTPUT",
                    evidence=evidence,
                    hint="write the result to ctx.temp_output (a GeoPackage path); fix the code and call "
                    "propose_operation again",
                )
            stem = ctx.temp_output.name
            for f in sorted((scratch / "out").iterdir()):
                # Only the file the runner asked for and its own sidecars (-wal, .aux.xml): nothing else lands.
                if f.is_file() and not f.is_symlink() and f.name.startswith(stem):
                    shutil.copyfile(f, ctx.temp_output.parent / f.name)
        return reply
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _judge(name: str, run: JailRun, evidence: dict[str, Any], limits: JailLimits, scratch: Path) -> dict[str, Any]:
    """The refusal a jailed run earned, judged from outside first; else the child's reply."""
    limit = run.limit_hit
    if limit == "wall_time":
        raise MapSmithError(
            f"the proposed operation {name} ran longer than {limits.timeout_s:g} s and was stopped",
            code="PROPOSAL_TIME_LIMIT",
            evidence=evidence,
            hint="make it finish sooner on the example inputs (no endless loop, no sleep); fix the code and "
            "call propose_operation again",
        )
    if limit == "cpu_time":
        raise MapSmithError(
            f"the proposed operation {name} used more than {limits.cpu_s} CPU seconds and was killed",
            code="PROPOSAL_CPU_LIMIT",
            evidence={**evidence, "signal": run.signal},
            hint="make it cheaper on the example inputs; fix the code and call propose_operation again",
        )
    size = _scratch_bytes(scratch)
    if size > limits.output_mb * 1024 * 1024:
        raise MapSmithError(
            f"the proposed operation {name} wrote {size} bytes, over the {limits.output_mb} MB limit",
            code="PROPOSAL_OUTPUT_LIMIT",
            evidence={**evidence, "bytes_written": size},
            hint="write less (only ctx.temp_output); fix the code and call propose_operation again",
        )
    attempts = run.attempts
    if attempts:
        # Sent the moment the witness saw it: code that caught the PermissionError cannot hide it.
        raise _refuse_witness(name, attempts[0], evidence)
    outcome = run.outcome or {}
    reply = outcome.get("result") if outcome.get("outcome") == "result" and not run.result_overflow else None
    if not isinstance(reply, dict):
        tail = run.stderr_tail[-1500:]
        if limit == "memory":
            raise MapSmithError(
                f"the proposed operation {name} ran out of its {limits.memory_mb} MB of memory",
                code="PROPOSAL_MEMORY_LIMIT",
                evidence={**evidence, "stderr_tail": tail},
                hint="allocate less on the example inputs; fix the code and call propose_operation again",
            )
        raise MapSmithError(
            f"the proposed operation {name} died without a reply"
            + (f" ({run.signal})" if run.signal else f" (exit code {run.returncode})"),
            code="PROPOSAL_CRASHED",
            evidence={**evidence, "signal": run.signal, "exit_code": run.returncode, "stderr_tail": tail},
            hint="run the code on the example inputs yourself and fix the crash; then call propose_operation again",
        )
    if reply.get("ok") is True:
        return reply
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    assert isinstance(error, dict)
    if error.get("kind") == "entry_missing":
        raise MapSmithError(
            f"the code defines no function named {name} (the entry MapSmith calls with the RunContext)",
            code="PROPOSAL_ENTRY_MISSING",
            evidence=evidence,
            hint=f"define `def {name}(ctx):` at the top level of the code and call propose_operation again",
        )
    if error.get("kind") == "limit" and error.get("limit") == "memory":
        raise MapSmithError(
            f"the proposed operation {name} ran out of its {limits.memory_mb} MB of memory",
            code="PROPOSAL_MEMORY_LIMIT",
            evidence={**evidence, "exception": error.get("type")},
            hint="allocate less on the example inputs; fix the code and call propose_operation again",
        )
    if error.get("kind") == "limit" and error.get("limit") in ("file_size", "tmp_size"):
        raise MapSmithError(
            f"the proposed operation {name} tried to write a file over the {limits.output_mb} MB limit",
            code="PROPOSAL_OUTPUT_LIMIT",
            evidence={**evidence, "exception": error.get("type"), "message": error.get("message")},
            hint="write less (only ctx.temp_output); fix the code and call propose_operation again",
        )
    raised = error.get("mapsmith_error")
    if isinstance(raised, dict) and isinstance(raised.get("code"), str):
        # The code's own refusal of its input: passed on with its code, and said to come from the proposal.
        raised_evidence: dict[str, Any] = raised["evidence"] if isinstance(raised.get("evidence"), dict) else {}
        raise MapSmithError(
            str(raised.get("message", ""))[:1000],
            code=str(raised["code"])[:64],
            # MapSmith's own evidence last: the code cannot overwrite which source ran.
            evidence={**raised_evidence, **evidence, "raised_by": f"proposed operation {name}"},
            hint=str(raised.get("hint") or "")[:500] or None,
        )
    raise MapSmithError(
        f"the proposed operation {name} raised {error.get('type')}: {error.get('message')}",
        code="PROPOSAL_CODE_FAILED",
        evidence={**evidence, "traceback_tail": error.get("traceback_tail")},
        hint="fix the code (the traceback's last lines are in the evidence) and call propose_operation again",
    )


def jailed_implementation(record: ProposalRecord, environ: dict[str, str]) -> Callable[[RunContext], None]:
    """The function registered for ``record.name``: the runner calls it like any engine."""

    def implementation(ctx: RunContext) -> None:
        limits = JailLimits.from_env(environ)
        reply = run_in_jail(record, ctx, limits, environ)
        engine = reply.get("engine") if isinstance(reply.get("engine"), dict) else {}
        assert isinstance(engine, dict)
        claimed = {
            f"claimed_{k}": str(v)[:200]
            for k, v in (("engine", engine.get("name")), ("version", engine.get("version")))
        }
        ctx.set_engine(
            f"{ENGINE_PREFIX}{record.name}",
            record.source_sha256,
            maturity="experimental",
            origin="proposed by an agent through propose_operation",
            source_sha256=record.source_sha256,
            contract_sha256=record.contract_sha256,
            source_record=record.source_label,
            sandbox="bubblewrap jail (no network, read-only inputs, rlimits)",
            **{k: v for k, v in claimed.items() if v and v != "None"},
        )
        answer = reply.get("answer")
        if isinstance(answer, dict):
            ctx.answer.update(answer)
        for note in reply.get("notes") or []:
            ctx.notes.append(str(note)[:500])
        for w in reply.get("warnings") or []:
            if isinstance(w, dict):
                ctx.warnings.append(RunWarning(str(w.get("code")), str(w.get("message")), str(w.get("hint"))))
        for c in reply.get("checks") or []:
            if isinstance(c, dict):
                # Prefixed: the code's own checks are claims, never mistaken for the runner's verification.
                ctx.check(f"proposal:{c.get('name')}", bool(c.get("passed")), str(c.get("detail")), critical=False)
        if isinstance(reply.get("crs_decisions"), dict):
            ctx.crs_decisions.update(reply["crs_decisions"])
        if isinstance(reply.get("expected_output_crs"), str):
            ctx.expected_output_crs = reply["expected_output_crs"]
        if not any(w.code == EXPERIMENTAL_WARNING for w in ctx.warnings):
            ctx.warn(
                EXPERIMENTAL_WARNING,
                f"{record.name} is an operation an agent proposed: experimental, run in a sandbox, checked only "
                f"on its {record.example_count} example(s)",
                "check the values against a stable operation where one exists; the manifest names the source "
                "by its sha256",
            )

    return implementation
