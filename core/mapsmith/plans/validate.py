"""Validate a plan before any file is touched: every problem found, each tied to a step and argument.

``validate_plan`` checks each step as ``run_operation`` would before its engine starts (contract,
arguments, workspace paths, input headers, output path) and, for inputs that do not exist yet
because an earlier step writes them, *simulates* what that step would hand over: dataset kind,
CRS, geometry families and, for rasters, the grid. It then asks of the simulated input what the
runner asks of a real one (a raster in degrees for an operation that needs metres, lines as zones,
a raster where a vector is expected, two grids combined cell by cell).

It collects findings instead of stopping at the first. It must never read a dataset beyond its
header (``DatasetIO.inspect`` without ``validity``), never create, write or delete a file, and
never run an engine: it can be called on every draft of a plan an agent writes.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith import verify
from mapsmith.contracts import (
    OUTPUT_ARGUMENT,
    OUTPUT_LAYER_ARGUMENT,
    OVERWRITE_ARGUMENT,
    DatasetArgument,
    OperationContract,
    suggest,
)
from mapsmith.errors import ArgumentError, MapSmithError
from mapsmith.plans.findings import Finding
from mapsmith.plans.flow import Flow, StepState, _grid_facts, _resolve_lenient, _same_grid, dataset_slots
from mapsmith.plans.model import (
    ESCAPED_PREFIX,
    Plan,
    Step,
    is_empty_plan_problem,
    parse_plan,
    plan_fingerprint,
    reference_of,
    structure_problems,
)
from mapsmith.plans.simulate import OutputSimulation
from mapsmith.run_inputs import layer_argument
from mapsmith.runner import _answer_mode, _choose_layer, _require_kind, slot_argument

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

# Rasters an operation combines cell by cell, so they must be on one grid. Operations with a list of
# rasters whose output keeps the input's shape (band_math) are found from their contracts; this
# table adds pairs a contract states only in prose (zonal_statistics' weights must match its raster).
SAME_GRID_ARGUMENTS: dict[str, tuple[str, ...]] = {"zonal_statistics": ("raster_path", "weights_path")}


@dataclass
class PlanValidation:
    """The verdict on a plan: ``valid`` when there are no findings; ``steps`` says what each step
    would read and write, with references replaced by the referenced output path."""

    valid: bool
    plan: Plan | None
    findings: list[Finding]
    steps: list[dict[str, Any]]
    fingerprint: str | None
    notes: list[Finding] = dataclasses.field(default_factory=list)  # never errors: checks moved to run time

    def to_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "fingerprint": self.fingerprint,
            "goal": self.plan.goal if self.plan else None,
            "findings": [f.to_dict() for f in self.findings],
            "notes": [n.to_dict() for n in self.notes],
            "steps": self.steps,
        }


def validate_plan(app: MapSmith, plan_data: Mapping[str, Any]) -> PlanValidation:
    """Check a plan against the catalog, the workspace and the headers of its inputs.

    Returns every finding (not only the first); ``valid`` is True when there is none. Structure is
    checked first: a plan that does not match the plan schema gets PLAN_INVALID (or EMPTY_PLAN)
    findings only, since nothing else can be read from it.
    """
    try:
        plan = parse_plan(plan_data)
    except ArgumentError:
        return PlanValidation(False, None, _structure_findings(plan_data), [], None)
    return _Validator(app, plan).run()


def _structure_findings(data: Any) -> list[Finding]:
    findings = []
    for problem in structure_problems(data):
        if is_empty_plan_problem(problem):
            findings.append(
                Finding("EMPTY_PLAN", "the plan has no steps", "add at least one step: {id, operation, arguments}")
            )
            continue
        step: str | None = None
        parts = problem["where"].split("/")
        if len(parts) >= 2 and parts[0] == "steps" and parts[1].isdigit() and isinstance(data, Mapping):
            steps = data.get("steps")
            item = steps[int(parts[1])] if isinstance(steps, list) and int(parts[1]) < len(steps) else None
            step_id = item.get("id") if isinstance(item, Mapping) else None
            step = step_id if isinstance(step_id, str) else None
        findings.append(
            Finding(
                "PLAN_INVALID",
                f"the plan does not match the plan schema at {problem['where']}: {problem['message']}",
                "a plan is {goal: string, steps: [{id, operation, arguments: {...}}]}; "
                "see contracts/schemas/plan.schema.json",
                step=step,
                evidence={"where": problem["where"]},
            )
        )
    return findings


# Operations whose arguments hold code (SQL) that is only contained when a workspace is set.
SANDBOXED_OPERATIONS = frozenset({"run_sql"})


class _Validator(OutputSimulation):
    def __init__(self, app: MapSmith, plan: Plan) -> None:
        self.app = app
        self.plan = plan
        self.io = app.dataset_io("opensource")
        self.findings: list[Finding] = []
        self.notes: list[Finding] = []
        self.first_index: dict[str, int] = {}
        self.states: list[StepState] = []

    def add(self, code: str, message: str, hint: str, step: str | None, argument: str | None, **evidence: Any) -> None:
        self.findings.append(Finding(code, message, hint, step, argument, dict(evidence)))

    def add_error(self, error: MapSmithError, step: str, argument: str | None = None) -> None:
        self.findings.append(Finding.from_error(error, step, argument))

    # -- the whole plan ------------------------------------------------------------------------

    def run(self) -> PlanValidation:
        for index, step in enumerate(self.plan.steps):
            if step.id in self.first_index:
                first = self.first_index[step.id]
                self.add(
                    "DUPLICATE_STEP_ID",
                    f"steps {first + 1} and {index + 1} are both called '{step.id}'; a reference to it would be "
                    "ambiguous",
                    f"rename step {index + 1} (every step id must be unique)",
                    step.id,
                    None,
                    first_index=first,
                    duplicate_index=index,
                )
            else:
                self.first_index[step.id] = index
            self.states.append(self._first_look(step, index))
        for state in self.states:
            self._step(state)
        self._plan_outputs()
        # Plan-wide findings first, then each step's in the order the steps run.
        order = {s.step.id: s.index for s in reversed(self.states)}
        self.findings.sort(key=lambda f: -1 if f.step is None else order.get(f.step, -1))
        return PlanValidation(
            valid=not self.findings,
            plan=self.plan,
            findings=self.findings,
            steps=[self._describe(s) for s in self.states],
            fingerprint=plan_fingerprint(self.plan),
            notes=self.notes,
        )

    def _first_look(self, step: Step, index: int) -> StepState:
        """The contract and the output path of a step, needed before any step is checked because a
        later step's output can be named by an earlier one (a forward reference)."""
        try:
            # An optional output left out makes the step an answer (run_sql without output_path).
            contract: OperationContract | None = _answer_mode(self.app.router.contract(step.operation), step.arguments)
        except MapSmithError as exc:
            contract = None
            self.add_error(exc, step.id)  # UNKNOWN_OPERATION, with the catalog's closest names
        state = StepState(step, index, contract)
        given = step.arguments.get(OUTPUT_ARGUMENT)
        if isinstance(given, str) and reference_of(given) is None and (contract is None or contract.writes_dataset):
            state.output_given = given
            try:
                resolved = self.app.workspace.resolve(given, argument=OUTPUT_ARGUMENT)
            except MapSmithError:
                resolved = None  # reported when the step is checked
            state.output_resolved = resolved if isinstance(resolved, Path) else None
            layer = step.arguments.get(OUTPUT_LAYER_ARGUMENT)
            state.output_layer = layer if isinstance(layer, str) else None
        return state

    # -- one step --------------------------------------------------------------------------------

    def _check_crs_arguments(self, state: StepState, contract: OperationContract) -> None:
        """The check run_operation makes: a CRS argument naming files outside the workspace is refused."""
        from mapsmith import crsguard

        root = self.app.workspace.root
        if root is None:
            return
        for name in crsguard.crs_parameters(contract.name, [p.name for p in contract.parameters]):
            value = state.step.arguments.get(name)
            if value is None:
                continue
            try:
                crsguard.check_crs_definition(value, argument=name, workspace_root=root)
            except MapSmithError as exc:
                self.add_error(exc, state.step.id, name)
                state.checked.pop(name, None)  # never parsed below (_simulate_output)

    def _step(self, state: StepState) -> None:
        self._check_references(state)
        contract = state.contract
        if contract is None:
            return
        try:
            self.app.router.candidates(contract.name)
        except MapSmithError as exc:
            self.add_error(exc, state.step.id)
        state.checked = self._check_arguments(state.step, contract)
        self._check_crs_arguments(state, contract)
        if contract.name in SANDBOXED_OPERATIONS and self.app.workspace.root is None:
            self.add(
                "SQL_NOT_SANDBOXED",
                f"step '{state.step.id}' runs {contract.name} with no workspace set: its SQL may read any file "
                "this server can read",
                "start the server with MAPSMITH_WORKSPACE set to the folder holding the data, or use the "
                "catalog's operations instead of SQL",
                state.step.id,
                "sql",
                operation=contract.name,
            )
        for slot, d, given in self._slots(state.step, contract):
            flow = self._input_flow(state, slot, d, given)
            if flow is not None:
                state.inputs[slot] = flow
                self._check_flow(state, slot, d, flow)
        self._check_grids(state, contract)
        if contract.writes_dataset:
            self._check_output_path(state, contract)
            state.output = self._simulate_output(state, contract)
            self._check_geojson(state, contract)

    def _check_references(self, state: StepState) -> None:
        step, contract = state.step, state.contract
        for name, value in step.arguments.items():
            values = value if isinstance(value, list) else [value]
            found = False
            for k, item in enumerate(values):
                ref = reference_of(item)
                if ref is None:
                    continue
                found = True
                slot = f"{name}[{k}]" if isinstance(value, list) else name
                self._check_reference(state, slot, ref)
            if found and contract is not None and contract.dataset(name) is None:
                datasets = [d.name for d in contract.datasets]
                self.add(
                    "REFERENCE_NOT_A_DATASET",
                    f"'{name}' of {contract.name} is not a dataset argument, so it cannot take a step's output "
                    f"({value!r})",
                    f"pass step outputs to {', '.join(datasets) or 'no argument of this operation'}; "
                    'write "$$text" for a literal text starting with "$"',
                    step.id,
                    name,
                    value=value,
                    dataset_arguments=datasets,
                )

    def _check_reference(self, state: StepState, slot: str, ref: str) -> None:
        step = state.step
        target = self.first_index.get(ref)
        evidence = {"reference": f"${ref}"}
        if target == state.index:
            self.add(
                "SELF_REFERENCE",
                f"'{slot}' of step '{step.id}' references '${ref}', the step's own output",
                "a step cannot read what it writes: refer to an earlier step, or pass a file path",
                step.id,
                slot,
                **evidence,
            )
        elif target is not None and target > state.index:
            self.add(
                "FORWARD_REFERENCE",
                f"'{slot}' references '${ref}' which runs later — move step '{ref}' before '{step.id}'",
                f"move step '{ref}' before step '{step.id}'; a step can only read the outputs of the steps above it",
                step.id,
                slot,
                **evidence,
                referenced_index=target,
                index=state.index,
            )
        elif target is None:
            close = suggest(ref, self.first_index)
            self.add(
                "DANGLING_REFERENCE",
                f"'{slot}' of step '{step.id}' references '${ref}', but no step is called '{ref}'"
                + (f"; did you mean '${close[0]}'?" if close else ""),
                f"refer to one of the earlier steps: {', '.join('$' + s for s in self._ids_before(state.index))}"
                if state.index
                else "the first step can only read files; pass a path",
                step.id,
                slot,
                **evidence,
                step_ids=list(self.first_index),
                suggestions=close,
            )
        else:
            producer = self.states[target].contract
            if producer is not None and not producer.writes_dataset:
                self.add(
                    "REFERENCE_TO_ANSWER",
                    f"'{slot}' of step '{step.id}' references '${ref}', but {producer.name} returns an answer "
                    "and writes no dataset",
                    f"refer to a step whose operation writes a dataset ({producer.name}'s output kind is "
                    f"{producer.output_kind})",
                    step.id,
                    slot,
                    **evidence,
                    referenced_operation=producer.name,
                    output_kind=producer.output_kind,
                )

    def _ids_before(self, index: int) -> list[str]:
        return [s.id for s in self.plan.steps[:index]]

    def _check_arguments(self, step: Step, contract: OperationContract) -> dict[str, Any]:
        """``check_arguments`` one argument at a time, so every bad argument is found; the codes,
        messages and hints are the contract's own."""
        args = step.arguments
        accepted = contract.argument_names()
        for key in args:
            if key in accepted:
                continue
            try:
                contract.check_arguments({key: args[key]})
            except ArgumentError as exc:
                finding = Finding.from_error(exc, step.id, key)
                ranked = sorted(accepted, key=lambda n: -difflib.SequenceMatcher(None, key, n).ratio())
                finding.hint = f"{contract.name} accepts: {', '.join(ranked)}"
                finding.evidence["accepted"] = ranked
                self.findings.append(finding)
        pieces: list[tuple[OperationContract, list[str]]] = [
            (dataclasses.replace(contract, datasets=(d,), parameters=(), output_kind="answer"), [d.name])
            for d in contract.datasets
        ]
        if contract.writes_dataset:
            # output_layer and the GeoJSON options too: simulate.py decides with their checked values
            writer = [OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT, *contract.writer_options()]
            pieces.append((dataclasses.replace(contract, datasets=(), parameters=()), writer))
        pieces += [
            (dataclasses.replace(contract, datasets=(), parameters=(p,), output_kind="answer"), [p.name])
            for p in contract.parameters
        ]
        checked: dict[str, Any] = {}
        for piece, names in pieces:
            try:
                checked.update(piece.check_arguments({n: args[n] for n in names if n in args}))
            except ArgumentError as exc:
                self.add_error(exc, step.id)
        return checked

    @staticmethod
    def _slots(step: Step, contract: OperationContract) -> list[tuple[str, DatasetArgument, str]]:
        return dataset_slots(step, contract)

    def _producer(
        self, path: Path, layer: str | None, before: int | None = None, after: int | None = None
    ) -> StepState | None:
        """The step that writes ``layer`` of ``path`` (any layer when None): the last one before
        ``before``, or the first after ``after``."""
        if before is not None:
            earlier = [s for s in self.states[:before] if s.writes(path, layer)]
            return earlier[-1] if earlier else None
        assert after is not None
        return next((s for s in self.states[after + 1 :] if s.writes(path, layer)), None)

    def _input_flow(self, state: StepState, slot: str, d: DatasetArgument, given: str) -> Flow | None:
        step = state.step
        ref = reference_of(given)
        if ref is not None:
            target = self.first_index.get(ref)
            if target is None or target >= state.index:
                return None  # reported by _check_references
            referenced = self.states[target]
            self._check_reference_layer(state, slot, referenced)
            return referenced.output
        if given.startswith(ESCAPED_PREFIX):
            given = given[1:]
        try:
            resolved = self.app.workspace.resolve(given, argument=slot)
        except MapSmithError as exc:
            self.add_error(exc, step.id, slot)
            return None
        if not isinstance(resolved, Path):
            self.add(
                "REMOTE_INPUT_UNSUPPORTED",
                f"{slot}: remote datasets are not read by this operation yet",
                "copy the dataset into the workspace and pass its local path",
                step.id,
                slot,
                path=given,
            )
            return None
        named = layer_argument(slot)  # layer for input_path, mask_layer for mask_path ...
        layer_arg = step.arguments.get(named) if named else None
        layer = layer_arg if isinstance(layer_arg, str) else None
        # A path (and layer) an earlier step writes is that step's output, whether or not a file is there now.
        producer = self._producer(resolved, layer, before=state.index)
        if producer is not None:
            return producer.output
        if not resolved.exists():
            later = self._producer(resolved, layer, after=state.index)
            if later is not None:
                self.add(
                    "FORWARD_REFERENCE",
                    f"'{slot}' reads {given}, which step '{later.step.id}' writes later — move step "
                    f"'{later.step.id}' before '{step.id}'",
                    f"move step '{later.step.id}' before step '{step.id}', and refer to its output as "
                    f'"${later.step.id}"',
                    step.id,
                    slot,
                    path=given,
                    referenced_index=later.index,
                    index=state.index,
                )
            else:
                self.add(
                    "INPUT_NOT_FOUND",
                    f"{slot} of step '{step.id}' does not exist: {given}",
                    "check the path (relative paths are resolved against the workspace), or refer to an "
                    'earlier step\'s output as "$<step id>"',
                    step.id,
                    slot,
                    path=given,
                )
            return None
        state.file_inputs[slot] = (given, resolved)
        state.input_layers[slot] = layer
        assert state.contract is not None
        if state.contract.output_kind == "description" and layer is None:
            return None  # describing a container is how its layers are found
        try:
            from mapsmith import crsguard

            # Before GDAL opens it, as in run_operation: its declared CRS may name files outside.
            crsguard.check_declared_crs(resolved, argument=slot, workspace_root=self.app.workspace.root)
            layer = _choose_layer(self.io, resolved, layer, slot, given)
            state.input_layers[slot] = layer
            info = dataclasses.replace(self.io.inspect(resolved, layer), path=given)
        except MapSmithError as exc:
            self.add_error(exc, step.id, slot)
            return None
        except Exception as exc:  # an engine that cannot read the header: say so, keep validating
            self.add(
                "INPUT_UNREADABLE",
                f"{slot} of step '{step.id}' ({given}) cannot be read as a dataset: {type(exc).__name__}: {exc}",
                "check that the file is a complete vector or raster dataset (describe_dataset reads its header)",
                step.id,
                slot,
                path=given,
                exception=type(exc).__name__,
            )
            return None
        return Flow.from_info(info)

    def _check_flow(self, state: StepState, slot: str, d: DatasetArgument, flow: Flow) -> None:
        """The runner's preconditions, asked of what the argument would receive."""
        contract, step = state.contract, state.step
        assert contract is not None
        if contract.output_kind == "description" or d.kind == "table" or flow.kind is None:
            return
        if d.kind == "any" and flow.kind == "table":
            return  # a table has no CRS or geometry to require; a layer given to "any" is checked below
        info = flow.as_info()
        try:
            _require_kind(d, info, slot)
        except MapSmithError as exc:
            finding = Finding.from_error(exc, step.id, slot)
            finding.code = "KIND_MISMATCH"
            finding.evidence["from_step"] = flow.from_step
            self.findings.append(finding)
            return
        checks: list[Callable[[], object]] = []
        if flow.info is not None:  # a file: its header is there to judge
            if flow.kind == "raster":
                checks.append(lambda: verify.require_one_georeferencing(info, slot))
            checks.append(lambda: verify.require_crs(info, slot))
        if flow.kind == "raster" and contract.needs_projected_crs:
            checks.append(lambda: verify.require_projected_grid(info, slot, contract.name))
        if flow.geometry_families is not None:
            checks.append(lambda: verify.require_geometry_types(info, d, contract.name, argument=slot))
        elif flow.geometry_deferred_by is not None and d.geometry_types is not None:
            self.notes.append(
                Finding(
                    "GEOMETRY_CHECK_AT_RUN_TIME",
                    f"{slot} of step '{step.id}' reads the output of {flow.geometry_deferred_by} step "
                    f"'{flow.from_step}', whose geometry type is known only when it runs; {contract.name} accepts "
                    f"{', '.join(d.geometry_types)}, checked then",
                    f"declare geometry_type on step '{flow.from_step}' to have it checked now",
                    step.id,
                    slot,
                    {"from_step": flow.from_step, "accepted": list(d.geometry_types)},
                )
            )
        for check in checks:
            try:
                check()
            except MapSmithError as exc:
                finding = Finding.from_error(exc, step.id, slot)
                if flow.from_step is not None:
                    finding.evidence["from_step"] = flow.from_step
                self.findings.append(finding)

    def _check_grids(self, state: StepState, contract: OperationContract) -> None:
        names = set(SAME_GRID_ARGUMENTS.get(contract.name, ()))
        if "shape_preserved" in contract.checks:
            names |= {d.name for d in contract.datasets if d.kind == "raster" and d.multiple}
        rasters = [
            (slot, flow)
            for slot, flow in state.inputs.items()
            if slot_argument(slot) in names and flow.kind == "raster" and flow.grid is not None
        ]
        if len(rasters) < 2:
            return
        first_slot, first = rasters[0]
        for slot, other in rasters[1:]:
            if _same_grid(first, other):
                continue
            a, b = _grid_facts(first), _grid_facts(other)
            self.add(
                "GRID_MISMATCH",
                f"{first_slot} ({first.described()}: {a['crs']}, {a['width']} x {a['height']}, transform "
                f"{a['transform']}) and {slot} ({other.described()}: {b['crs']}, {b['width']} x {b['height']}, "
                f"transform {b['transform']}) are different grids; {contract.name} combines cells by position "
                "and never resamples silently",
                "put the inputs on one grid first: reproject_raster / resample_raster to the same CRS and cell "
                "size, then clip_raster to the same bounds, and pass those",
                state.step.id,
                slot,
                **{first_slot: a, slot: b},
            )

    # -- the report --------------------------------------------------------------------------------

    def _describe(self, state: StepState) -> dict[str, Any]:
        outputs = {
            s.step.id: s.output_given
            for s in self.states[: state.index]
            if s.output_given is not None and self.first_index.get(s.step.id) == s.index
        }
        contract = state.contract
        defaults = {}
        if contract is not None:
            defaults = {
                p.name: p.default for p in contract.parameters if p.has_default and p.name not in state.step.arguments
            }
        if state.output is not None:
            output: dict[str, Any] = state.output.to_dict()
        else:
            output = {"kind": "answer" if contract is not None and not contract.writes_dataset else None}
        return {
            "id": state.step.id,
            "operation": state.step.operation,
            "arguments": {k: _resolve_lenient(v, outputs) for k, v in state.step.arguments.items()},
            "defaults": defaults,
            "output_path": state.output_given,
            "inputs": {slot: flow.to_dict() for slot, flow in state.inputs.items()},
            "output": output,
        }


__all__ = ["Flow", "PlanValidation", "validate_plan"]
