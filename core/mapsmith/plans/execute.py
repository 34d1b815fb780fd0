"""Execute a validated plan: each step through ``app.run``, one plan manifest beside the final output.

A plan runs only once ``validate_plan`` has found nothing wrong with it; an invalid plan is refused
with ``PlanRejected`` before any step runs or any file is written. Every step then takes the one
path every operation takes (``app.run`` -> ``run_operation``), so an operation behaves the same alone
or in a plan and writes its own provenance manifest. ``"$id"`` references are replaced by the
``output_path`` of step ``id`` exactly as the plan wrote it (``model.substitute``).

What lands on disk besides the steps' own datasets and manifests:

- ``<final output>.plan.json``: the plan manifest, written atomically once every step succeeded. The
  final output is the ``output_path`` of the last step that writes a dataset. A plan whose steps only
  answer (describe, count ...) has no final output, so it leaves no plan manifest; its answers are in
  the reply.
- ``<final output>.plan.failed.json`` (``.plan.failed.2.json`` ... when one exists): the same record
  for a plan a step stopped, naming the step and its error. The manifests of the steps that ran stay,
  and so does an earlier plan manifest: its ``final_output.sha256`` still says which bytes it describes.

This module must never run a step of a plan that did not validate, never overwrite an existing plan
manifest unless every step that writes a dataset has ``overwrite=true`` (nor an existing failure
record, ever), and never leave a half-written plan manifest.
"""

from __future__ import annotations

import copy
import glob
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.contracts import OUTPUT_ARGUMENT, OUTPUT_LAYER_ARGUMENT, OVERWRITE_ARGUMENT
from mapsmith.errors import ArgumentError, MapSmithError, OutputError
from mapsmith.plans.findings import Finding
from mapsmith.plans.model import Plan, plan_fingerprint, reference_of, substitute
from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.manifest import MANIFEST_SUFFIX, utc_now, write_json_atomic
from mapsmith.run_inputs import layer_argument

if TYPE_CHECKING:
    from mapsmith.app import MapSmith
    from mapsmith.runner import OperationResult

Progress = Callable[[float, str], None]

PLAN_MANIFEST_VERSION = "1"
PLAN_MANIFEST_SUFFIX = ".plan.json"
PLAN_FAILED_SUFFIX = ".plan.failed.json"
# The finding execute_plan adds to validate_plan's (it is about the plan's own record, which only
# execution writes), in the form of findings.FINDING_CODES, for docs/errors.md.
EXECUTION_FINDING_CODES: dict[str, str] = {
    "PLAN_MANIFEST_EXISTS": "A plan manifest exists beside the final output and not every step that writes a "
    "dataset passes overwrite=true.",
}
# Each step owns an equal slice of [0, 1]. Its start is reported a little into the slice so that the
# fractions strictly increase from one report to the next (MCP requires it), and its end at the end
# of the slice, so the last report of a plan that ran through is exactly 1.0.
_START_SHARE = 0.01


class PlanRejected(ArgumentError):
    """The plan did not validate (or would overwrite what it must not): nothing ran, nothing was written.

    ``evidence["findings"]`` lists every finding, as ``validate_plan`` reports them."""

    code = "PLAN_REJECTED"


@dataclass
class StepRun:
    """What one step did, as the reply and the plan manifest show it."""

    id: str
    operation: str
    arguments: dict[str, Any]  # as passed to app.run: references replaced by output paths
    output_path: str | None  # workspace label; None for a step that only answers
    status: str = "not_run"  # "ok" | "ok_with_warnings" | "failed" | "not_run"
    manifest_path: str | None = None
    warnings: list[str] = field(default_factory=list)  # warning codes
    failed_checks: list[str] = field(default_factory=list)  # names of checks that did not pass
    failure_record: str | None = None  # the runner's .failed.provenance.json, when it wrote one

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "operation": self.operation,
            "arguments": copy.deepcopy(self.arguments),
            "output_path": self.output_path,
            "manifest_path": self.manifest_path,
            "status": self.status,
            "warnings": list(self.warnings),
            "failed_checks": list(self.failed_checks),
        }
        if self.failure_record is not None:
            out["failure_record"] = self.failure_record
        return out


@dataclass
class PlanExecution:
    """The outcome of ``execute_plan``: ``status`` is "ok", "ok_with_warnings" or "failed".

    A failed plan is returned, not raised: ``failed_step`` and ``error`` (the step's
    ``MapSmithError.to_dict()``) say what stopped it; the caller decides whether that is an error
    reply (the MCP tool marks it ``isError``)."""

    status: str
    goal: str
    fingerprint: str
    steps: list[StepRun]
    answers: dict[str, dict[str, Any]]
    started_at: str
    finished_at: str
    final_output: dict[str, Any] | None = None  # {"path", "sha256"}; sha256 is None when the plan failed
    plan_manifest_path: str | None = None
    failure_record_path: str | None = None
    failed_step: str | None = None
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "goal": self.goal,
            "fingerprint": self.fingerprint,
            "steps": [s.to_dict() for s in self.steps],
            "answers": copy.deepcopy(self.answers),
            "final_output": dict(self.final_output) if self.final_output else None,
            "plan_manifest_path": self.plan_manifest_path,
            "failure_record_path": self.failure_record_path,
            "failed_step": self.failed_step,
            "error": self.error,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


def plan_manifest_path(final_output: Path) -> Path:
    return final_output.with_name(final_output.name + PLAN_MANIFEST_SUFFIX)


def plan_failed_path(final_output: Path) -> Path:
    """A fresh name for a failed plan's record: an earlier one is never replaced."""
    candidate = final_output.with_name(final_output.name + PLAN_FAILED_SUFFIX)
    n = 2
    while candidate.exists():
        candidate = final_output.with_name(f"{final_output.name}.plan.failed.{n}.json")
        n += 1
    return candidate


def execute_plan(app: MapSmith, plan_data: Mapping[str, Any], progress: Progress | None = None) -> PlanExecution:
    """Validate ``plan_data``, run its steps in order and record the run.

    Raises ``PlanRejected`` (nothing run, nothing written) when the plan does not validate, or when a
    plan manifest exists beside the final output and not every writing step passes ``overwrite=true``. A step that
    fails with a ``MapSmithError`` stops the plan: the steps after it are "not_run", and the returned
    ``PlanExecution`` has status "failed". Any other exception (a bug, an interrupt) is recorded in
    the failure record and re-raised. ``progress(fraction, message)`` is called before and after each
    step ("step 2/5 clip: clip_layer"), and with the step's own reports scaled into its share.
    """
    plan, fingerprint = _validated(app, plan_data)
    steps = _prepare(app, plan)
    writers = [s for s in steps if s.output_path is not None]
    final = _resolve(app, writers[-1]) if writers else None
    _refuse_overwrites(app, writers, final)

    submitted = copy.deepcopy(dict(plan_data))
    answers: dict[str, dict[str, Any]] = {}
    started = utc_now()
    n = len(steps)
    failure: tuple[StepRun, dict[str, Any]] | None = None
    for i, step in enumerate(steps):
        label = f"step {i + 1}/{n} {step.id}: {step.operation}"
        _report(progress, (i + _START_SHARE) / n, label)
        output = _resolve(app, step) if step.output_path is not None else None
        records_before = _failure_records(output)
        try:
            result = app.run(step.operation, step.arguments, _scaled(progress, i, n, label))
        except MapSmithError as exc:
            step.status = "failed"
            step.failure_record = _new_failure_record(app, output, records_before)
            failure = (step, exc.to_dict())
            _report(progress, (i + 1) / n, f"{label} failed [{exc.code}]")
            break
        except BaseException as exc:
            # Not a refusal but a crash or an interrupt: put it on disk too, then let it through.
            step.status = "failed"
            step.failure_record = _new_failure_record(app, output, records_before)
            error = {"code": "INTERRUPTED", "message": f"{type(exc).__name__}: {exc}", "hint": None}
            execution = _outcome(plan, fingerprint, steps, answers, started, (step, error), final)
            try:
                _write_failure(app, final, submitted, execution)
            except Exception as inner:  # the original exception matters more
                import sys

                print(f"mapsmith: could not write the plan failure record: {inner!r}", file=sys.stderr)
            raise
        _record_result(step, result)
        if result.output_path is None:
            answers[step.id] = copy.deepcopy(result.answer)
        _report(progress, (i + 1) / n, f"{label} {result.status}")

    execution = _outcome(plan, fingerprint, steps, answers, started, failure, final)
    if failure is not None:
        execution.failure_record_path = _write_failure(app, final, submitted, execution)
    elif final is not None:
        mpath = plan_manifest_path(final)
        _write(mpath, _manifest(submitted, execution))
        execution.plan_manifest_path = app.workspace.relative_label(mpath)
    return execution


def _outcome(
    plan: Plan,
    fingerprint: str,
    steps: list[StepRun],
    answers: dict[str, dict[str, Any]],
    started: str,
    failure: tuple[StepRun, dict[str, Any]] | None,
    final: Path | None,
) -> PlanExecution:
    """The execution as it stands; the final output's digest is taken only when every step ran."""
    if failure is not None:
        status = "failed"
    else:
        status = "ok_with_warnings" if any(s.status == "ok_with_warnings" for s in steps) else "ok"
    execution = PlanExecution(
        status=status,
        goal=plan.goal,
        fingerprint=fingerprint,
        steps=steps,
        answers=answers,
        started_at=started,
        finished_at=started,
        failed_step=failure[0].id if failure else None,
        error=failure[1] if failure else None,
    )
    if final is not None:
        label = next(s.output_path for s in reversed(steps) if s.output_path is not None)
        execution.final_output = {"path": label, "sha256": None if failure else dataset_digest(final)}
    execution.finished_at = utc_now()
    return execution


# -- before anything runs -------------------------------------------------------------------------


def _validated(app: MapSmith, plan_data: Mapping[str, Any]) -> tuple[Plan, str]:
    from mapsmith.plans.validate import validate_plan

    try:
        validation = validate_plan(app, plan_data)
    except PlanRejected:
        raise
    except ArgumentError as exc:  # a structural refusal raised rather than reported is still a finding
        raise _rejected([Finding.from_error(exc, step=None).to_dict()]) from exc
    if not validation.valid or validation.plan is None:
        raise _rejected([f.to_dict() for f in validation.findings])
    return validation.plan, validation.fingerprint or plan_fingerprint(validation.plan)


def _rejected(findings: list[dict[str, Any]]) -> PlanRejected:
    first = findings[0] if findings else {"code": "PLAN_INVALID", "message": "the plan did not validate"}
    hint = first.get("hint") or "fix the findings and submit the plan again"
    where = f" (step {first['step']!r})" if first.get("step") else ""
    return PlanRejected(
        f"the plan was not run: {len(findings)} finding(s); the first{where} is [{first['code']}] {first['message']}",
        evidence={"findings": findings},
        hint=f"{hint}; validate_plan lists every finding",
    )


def _prepare(app: MapSmith, plan: Plan) -> list[StepRun]:
    """Every step's arguments as they will run: each reference replaced by the output_path of an earlier
    step. Done for the whole plan first, so steps that will not run are listed with their arguments too."""
    outputs: dict[str, str] = {}
    layers: dict[str, str] = {}  # step id -> the output_layer it adds to a GeoPackage
    runs = []
    for step in plan.steps:
        run = StepRun(
            id=step.id, operation=step.operation, arguments=substitute(step.arguments, outputs), output_path=None
        )
        for name, value in step.arguments.items():
            # "$a" of a step that added a layer reads that layer (validate_plan refused any other layer
            # named, and slots that cannot name one): the container may hold several.
            ref = reference_of(value)
            named = layer_argument(name)
            if ref in layers and named is not None:
                run.arguments.setdefault(named, layers[ref])
        given = run.arguments.get(OUTPUT_ARGUMENT)
        if app.router.contract(step.operation).writes_dataset and isinstance(given, str):
            outputs[step.id] = given  # as the plan wrote it: the next step's argument reads the same text
            run.output_path = app.workspace.relative_label(_resolve(app, run))
            layer = run.arguments.get(OUTPUT_LAYER_ARGUMENT)
            if isinstance(layer, str):
                layers[step.id] = layer
        runs.append(run)
    return runs


def _resolve(app: MapSmith, step: StepRun) -> Path:
    """The local path a writing step's output_path names (validate_plan has accepted it)."""
    given = step.arguments[OUTPUT_ARGUMENT]
    resolved = app.workspace.resolve(given, argument=OUTPUT_ARGUMENT)
    if not isinstance(resolved, Path):
        raise OutputError(
            f"step {step.id!r}: output_path must be a local path",
            code="OUTPUT_REMOTE",
            evidence={"step": step.id, "path": given},
            hint="write inside the workspace",
        )
    return resolved


def _refuse_overwrites(app: MapSmith, writers: list[StepRun], final: Path | None) -> None:
    """Refuse to replace a plan manifest unless every step that writes a dataset says overwrite=true.

    The plan manifest is the record of a whole chain: if one step writes a new file while the others
    replace theirs, the old record would be swapped for one describing a different chain, on a decision
    the caller made for one step only. (An existing step output without overwrite is validate_plan's
    OUTPUT_EXISTS, with the runner's own check.)"""
    if final is None or not plan_manifest_path(final).exists():
        return
    keeping = [s.id for s in writers if s.arguments.get(OVERWRITE_ARGUMENT) is not True]
    if not keeping:
        return
    label = app.workspace.relative_label(plan_manifest_path(final))
    finding = Finding(
        "PLAN_MANIFEST_EXISTS",
        f"a plan manifest exists already at {label}; a plan replaces it only when every step that writes a "
        f"dataset passes overwrite=true, and {', '.join(map(repr, keeping))} do(es) not",
        "write the final output to a new path, or pass overwrite=true in every step that writes a dataset",
        step=writers[-1].id,
        argument=OUTPUT_ARGUMENT,
        evidence={"plan_manifest": label, "steps_without_overwrite": keeping},
    )
    raise _rejected([finding.to_dict()])


# -- while the steps run ----------------------------------------------------------------------------


def _report(progress: Progress | None, fraction: float, message: str) -> None:
    if progress is not None:
        progress(min(max(fraction, 0.0), 1.0), message)


def _scaled(progress: Progress | None, index: int, total: int, label: str) -> Progress | None:
    """The step's own progress, mapped into the open interval between its start and end reports."""
    if progress is None:
        return None
    start, end = (index + _START_SHARE) / total, (index + 1) / total
    margin = (end - start) * _START_SHARE

    def report(fraction: float, message: str) -> None:
        inner = min(max(fraction, 0.0), 1.0)
        progress(start + margin + inner * (end - start - 2 * margin), f"{label}: {message}")

    return report


def _failure_records(output: Path | None) -> set[Path]:
    if output is None or not output.parent.is_dir():
        return set()
    return set(output.parent.glob(glob.escape(output.name) + ".failed*" + MANIFEST_SUFFIX))


def _new_failure_record(app: MapSmith, output: Path | None, before: set[Path]) -> str | None:
    new = sorted(_failure_records(output) - before)
    return app.workspace.relative_label(new[-1]) if new else None


def _record_result(step: StepRun, result: OperationResult) -> None:
    step.status = result.status
    step.manifest_path = result.manifest_path
    if result.output_path is not None:
        step.output_path = result.output_path
    step.warnings = [w["code"] for w in result.warnings]
    step.failed_checks = [c["name"] for c in result.checks if not c.get("passed", True)]


# -- records on disk ------------------------------------------------------------------------------


def _manifest(submitted: dict[str, Any], execution: PlanExecution) -> dict[str, Any]:
    from mapsmith import __version__

    record: dict[str, Any] = {
        "mapsmith_plan_manifest": PLAN_MANIFEST_VERSION,
        "status": execution.status,
        "goal": execution.goal,
        "fingerprint": execution.fingerprint,
        "plan": submitted,
        "steps": [s.to_dict() for s in execution.steps],
        "answers": copy.deepcopy(execution.answers),
        "started_at": execution.started_at,
        "finished_at": execution.finished_at,
        "mapsmith_version": __version__,
        "final_output": dict(execution.final_output) if execution.final_output else None,
    }
    if execution.status == "failed":
        record["failed_step"] = execution.failed_step
        record["error"] = execution.error
    return record


def _write_failure(
    app: MapSmith, final: Path | None, submitted: dict[str, Any], execution: PlanExecution
) -> str | None:
    """The failure record beside the final output; None for a plan that writes no dataset."""
    if final is None:
        return None
    path = plan_failed_path(final)
    _write(path, _manifest(submitted, execution))
    return app.workspace.relative_label(path)


def _write(path: Path, record: dict[str, Any]) -> None:
    try:
        write_json_atomic(path, record)
    except OSError as exc:
        raise OutputError(
            f"the plan record could not be written to {path.name}: {exc}",
            code="PLAN_RECORD_UNWRITABLE",
            evidence={"path": path.name, "error": type(exc).__name__},
            hint="check that the folder of the final output is writable; the steps' own manifests are written",
        ) from exc
