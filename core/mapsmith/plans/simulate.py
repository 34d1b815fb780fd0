"""The output side of plan validation: what each step would write (simulated), and the checks on
output paths across the plan (duplicates, an input overwritten, GeoJSON outside WGS 84).

A mixin of ``validate._Validator``, split from it along this seam. Like the validator, it must never
read a dataset beyond its header, write a file or run an engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.contracts import OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT, OperationContract
from mapsmith.errors import MapSmithError
from mapsmith.plans.flow import Flow, StepState, dataset_slots
from mapsmith.plans.model import reference_of
from mapsmith.run_inputs import layer_argument
from mapsmith.run_outputs import plan_output
from mapsmith.runner import _check_output_path, _require_wgs84_for_geojson

if TYPE_CHECKING:
    from mapsmith.app import MapSmith
    from mapsmith.plans.findings import Finding

OUTPUT_KINDS = {"dataset:vector": "vector", "dataset:raster": "raster"}
# Table formats: a step writing one hands on a table, whatever its operation's output kind.
TABLE_OUTPUT_SUFFIXES = (".csv", ".json", ".xlsx")


class OutputSimulation:
    """Methods of the validator about outputs; the validator provides the attributes declared here."""

    app: MapSmith
    states: list[StepState]
    findings: list[Finding]

    if TYPE_CHECKING:  # provided by the validator

        def add(
            self, code: str, message: str, hint: str, step: str | None, argument: str | None, **evidence: Any
        ) -> None: ...

        def add_error(self, error: MapSmithError, step: str, argument: str | None = None) -> None: ...

    def _plan_outputs(self) -> None:
        for k, state in enumerate(self.states):
            out = state.output_resolved
            if out is None:
                continue
            # Adding a layer to a container another step writes is no clash; writing the same layer
            # twice, or a whole file after it (which replaces every layer), is.
            first = next(
                (
                    w
                    for w in self.states[:k]
                    if w.output_resolved == out
                    and (state.output_layer is None or w.written_layer() == state.written_layer())
                ),
                None,
            )
            if first is not None:
                self.add(
                    "DUPLICATE_OUTPUT",
                    f"step '{state.step.id}' writes {self._written(state)}, which step '{first.step.id}' writes "
                    "already; the second write would replace the first step's output",
                    "give every step its own output_path (or, in one GeoPackage, its own output_layer)",
                    state.step.id,
                    OUTPUT_ARGUMENT,
                    path=state.output_given,
                    output_layer=state.output_layer,
                    first_step=first.step.id,
                )
            for reader in self.states:
                for slot, (_, resolved) in reader.file_inputs.items():
                    if resolved != out:
                        continue
                    if state.output_layer is not None and reader.input_layers.get(slot) != state.output_layer:
                        continue  # a layer added beside the one read: the input stays as it was
                    whose = "its own" if reader is state else f"step '{reader.step.id}'s"
                    self.add(
                        "OUTPUT_OVERWRITES_INPUT",
                        f"step '{state.step.id}' writes {self._written(state)}, which is {whose} {slot}; "
                        "an input of the plan is never overwritten",
                        "write to a new path (or a new output_layer), so the data the plan starts from stays as it was",
                        state.step.id,
                        OUTPUT_ARGUMENT,
                        path=state.output_given,
                        output_layer=state.output_layer,
                        input_step=reader.step.id,
                        input_argument=slot,
                    )

    @staticmethod
    def _written(state: StepState) -> str:
        given = state.output_given or ""
        return f"layer '{state.output_layer}' of {given}" if state.output_layer is not None else given

    def _check_reference_layer(self, state: StepState, slot: str, producer: StepState) -> None:
        """A "$step" reference to a step that adds a layer reads that layer: execute_plan names it in the
        slot's <role>_layer. Refused when the slot cannot name a layer or names another one, since the
        container may hold several layers and MapSmith never picks one."""
        layer = producer.output_layer
        contract = state.contract
        if layer is None or contract is None:
            return
        named = layer_argument(slot)
        given = state.step.arguments.get(named) if named else None
        evidence = {"reference": f"${producer.step.id}", "path": producer.output_given, "output_layer": layer}
        if named is None or named not in contract.argument_names():
            problem = f"{slot} of {contract.name} cannot name a layer"
        elif given is not None and given != layer:
            problem = f"{named} names {given!r}"
        else:
            return
        self.add(
            "REFERENCE_LAYER_CONFLICT",
            f"'{slot}' of step '{state.step.id}' references '${producer.step.id}', which writes layer {layer!r} "
            f"of {producer.output_given}; {problem}",
            f"leave {named} out (the reference reads layer {layer!r})"
            if named is not None and given is not None and named in contract.argument_names()
            else f"copy the layer out first with extract_layer(input_path={producer.output_given!r}, "
            f"layer={layer!r}, output_path=...) and reference that step",
            state.step.id,
            slot,
            **evidence,
        )

    def _check_output_path(self, state: StepState, contract: OperationContract) -> None:
        given = state.checked.get(OUTPUT_ARGUMENT)
        if not isinstance(given, str) or reference_of(given) is not None:
            return  # missing, mistyped or a reference: reported already
        step = state.step
        try:
            resolved = self.app.workspace.resolve(given, argument=OUTPUT_ARGUMENT)
        except MapSmithError as exc:
            self.add_error(exc, step.id, OUTPUT_ARGUMENT)
            return
        if not isinstance(resolved, Path):
            self.add(
                "OUTPUT_REMOTE",
                "output_path must be a local path",
                "write inside the workspace",
                step.id,
                OUTPUT_ARGUMENT,
                path=given,
            )
            return
        try:
            # Inputs are compared over the whole plan in _plan_outputs (OUTPUT_OVERWRITES_INPUT).
            if state.checked.get("output_layer") is not None:
                # A layer added to a container: the same path checks, and the layer-name clash
                plan_output(contract, dict(state.checked), resolved, {})
            else:
                _check_output_path(contract, resolved, {}, bool(state.checked.get(OVERWRITE_ARGUMENT)), given)
        except MapSmithError as exc:
            self.add_error(exc, step.id, OUTPUT_ARGUMENT)

    def _main_input(self, state: StepState, contract: OperationContract) -> Flow | None:
        """The input whose CRS and geometry an output keeps: input_path, else the first dataset read."""
        given = {slot for slot, _, _ in dataset_slots(state.step, contract)}
        for d in contract.datasets:
            slot = f"{d.name}[0]" if d.multiple else d.name
            if d.kind != "table" and slot in given:
                # None when it was given but is not known (a missing file, a reference to an unknown step)
                return state.inputs.get(slot)
        return None

    def _simulate_output(self, state: StepState, contract: OperationContract) -> Flow:
        main = self._main_input(state, contract)
        crs_label: str | None = None
        geographic: bool | None = None
        if contract.crs_effect == "preserves" and main is not None:
            crs_label, geographic = main.crs_label, main.crs_is_geographic
        elif contract.crs_effect == "transforms":
            target = state.checked.get("target_crs")
            like = state.inputs.get("like_path")
            if isinstance(target, str):
                from mapsmith.crs import crs_label as label_of
                from mapsmith.crs import parse_crs

                try:
                    parsed = parse_crs(target)
                    crs_label, geographic = label_of(parsed), bool(parsed.is_geographic)
                except MapSmithError as exc:
                    self.add_error(exc, state.step.id, "target_crs")
            elif like is not None:
                crs_label, geographic = like.crs_label, like.crs_is_geographic
        kind = OUTPUT_KINDS[contract.output_kind]
        families: frozenset[str] | None = None
        deferred = None
        if (state.output_given or "").lower().endswith(TABLE_OUTPUT_SUFFIXES):
            kind = "table"  # rows without geometry: no CRS or geometry flows on
            crs_label, geographic = None, None
        elif kind == "vector" and contract.datasets_named_in is not None:
            # The SQL decides the geometry: known now only when the step declares it.
            declared_type = state.checked.get("geometry_type")
            if isinstance(declared_type, str):
                families = frozenset({declared_type})
            else:
                deferred = contract.name
        elif kind == "vector" and contract.output_geometry_types:
            declared = set(contract.output_geometry_types)
            if "same" in declared:
                same = main.geometry_families if main is not None and main.kind == "vector" else None
                families = None if same is None else frozenset((declared - {"same"}) | same)
            else:
                families = frozenset(declared)
        grid = None
        if kind == "raster" and "shape_preserved" in contract.checks and main is not None and main.grid is not None:
            # Same cells as the input; the nodata value is the operation's own, so not known here.
            grid = {**main.grid, "nodata": None}
        return Flow(
            path=state.output_given or "",
            kind=kind,
            crs_label=crs_label,
            crs_is_geographic=geographic,
            geometry_families=families,
            grid=grid,
            from_step=state.step.id,
            geometry_deferred_by=deferred,
        )

    def _check_geojson(self, state: StepState, contract: OperationContract) -> None:
        out = state.output
        given = state.checked.get(OUTPUT_ARGUMENT)
        if out is None or out.crs_label is None or not isinstance(given, str):
            return
        if Path(given).suffix.lower() != ".geojson":  # ".json" is a table of records
            return
        try:
            _require_wgs84_for_geojson(contract, state.checked, out.as_info())
        except MapSmithError as exc:
            self.add_error(exc, state.step.id, OUTPUT_ARGUMENT)
