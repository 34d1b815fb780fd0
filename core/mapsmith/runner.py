"""Run one operation: check, resolve, precondition, compute, verify, repair, write, record.

This is the single path every operation takes, alone or (later) inside a plan: arguments are
checked against the contract, paths against the workspace, the engine is chosen by the router,
inputs are checked before the engine sees them, the engine writes to a temporary path, the output
is checked (and, if mechanically broken, repaired in at most two disclosed rounds), and only then
is it renamed into place with its manifest. A run that fails after the engine started leaves a
``.failed.provenance.json`` record and never a half-written dataset at the output path.

The rules around the output (its path checks, temporary name, size limit and per-output lock) live in
``mapsmith.outputs``; the input side (slots, layers, header checks) in ``mapsmith.run_inputs``; a layer
added to a GeoPackage and GeoJSON options in ``mapsmith.run_outputs``; the manifest and failure records
in ``mapsmith.run_records``. Every error that
leaves ``run_operation`` is a MapSmithError with the host's absolute paths redacted.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith import crsguard, derived_fields
from mapsmith.contracts import OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT, OperationContract
from mapsmith.errors import (
    EngineError,
    InputError,
    MapSmithError,
    OutputError,
    VerificationFailed,
    redact_error,
    translate_engine_error,
)
from mapsmith.outputs import (
    NAME_MAX_BYTES,
    OUTPUT_NAME_ROOM,
    REFUSED_OUTPUT_FORMATS,
    check_not_existing,
    check_output_path,
    check_output_size,
    commit_error,
    output_lock,
    refuse_internal_folder,
)
from mapsmith.provenance.manifest import manifest_path, utc_now, write_manifest
from mapsmith.registry import DatasetInfo, DatasetIO
from mapsmith.run_inputs import check_inputs, choose_layer, dataset_slots, require_kind, slot_argument
from mapsmith.run_outputs import (
    OutputPlan,
    assemble_container,
    finish_geojson,
    no_parts_writer_takes,
    plan_output,
    require_folder_written,
    require_wgs84_for_geojson,
    route_to_parts_writers,
    warn_replaced_layers,
)
from mapsmith.run_records import (
    DigestsAhead,
    answer_record,
    engine_record,
    output_record,
    warn_if_experimental,
    write_failure,
)
from mapsmith.run_verify import crs_equal, main_input, verify_and_repair, verify_raster
from mapsmith.verify import INPUT_VALID_CHECK, Check, RunWarning

if TYPE_CHECKING:
    from mapsmith.app import MapSmith
    from mapsmith.workspace import Workspace

__all__ = [
    "NAME_MAX_BYTES",
    "OUTPUT_NAME_ROOM",
    "REFUSED_OUTPUT_FORMATS",
    "OperationResult",
    "OutputStats",
    "RunContext",
    "main_input",
    "run_operation",
    "slot_argument",
]
# plans.validate, plans.simulate and mapview import these under their old runner names.
_check_output_path = check_output_path
_choose_layer = choose_layer
_require_kind = require_kind
_dataset_slots = dataset_slots
_require_wgs84_for_geojson = require_wgs84_for_geojson


@dataclass(frozen=True)
class OutputStats:
    """Facts about the written features taken from the engine's frame just before a lossless write."""

    feature_count: int
    invalid_count: int
    geometry_types: tuple[str, ...]


@dataclass
class RunContext:
    """Everything an implementation reads and records. Implementations write ``temp_output``."""

    contract: OperationContract
    arguments: dict[str, Any]
    paths: dict[str, Path]
    inputs: dict[str, DatasetInfo]
    layers: dict[str, str | None]
    output_path: Path | None
    temp_output: Path | None
    io: DatasetIO
    parameters: dict[str, Any] = field(default_factory=dict)
    crs_decisions: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[RunWarning] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=dict)
    engine_name: str = ""
    engine_version: str = ""
    engine_components: dict[str, str] = field(default_factory=dict)
    given_paths: dict[str, str] = field(default_factory=dict)  # slot -> the path as the caller gave it
    input_repairs: list[dict[str, Any]] = field(default_factory=list)  # disclosed fixes made while reading
    output_stats: OutputStats | None = None  # what the writer saw in memory, for lossless formats
    expected_output_crs: str | None = None  # WKT, for operations whose crs_effect is "transforms"
    # Rasters: the grid the implementation meant to write (width, height, transform, nodata, and
    # optionally value_range), compared with the file read back; see verify.raster_output_checks.
    expected_grid: dict[str, Any] | None = None
    # Facts about how one input was read (a georeferencing source, a sidecar): inputs[].environment.
    input_environment: dict[str, dict[str, str]] = field(default_factory=dict)
    progress: Callable[[float, str], None] | None = None
    # The server's path policy and environment, for implementations that open paths named inside an
    # argument's text (run_sql's SQL) and add what they read to ``paths``/``given_paths``/``inputs``.
    workspace: Workspace | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    # Set by an implementation that wrote a table (no geometry; mapsmith_opensource.tables.deliver_table),
    # having read the bytes back and added its checks: the runner digests it instead of inspecting a layer.
    table_output: DatasetInfo | None = None
    # Inputs that are not files in the workspace (a fetched URL, with the digest of the bytes received):
    # recorded in the manifest's inputs beside the files, as the implementation states them.
    remote_inputs: list[dict[str, Any]] = field(default_factory=list)
    # Fields derived from geometry that must describe the geometry written (mapsmith.derived_fields):
    # the run's own measures and those its inputs' manifests record. None for outputs without geometry.
    derived: derived_fields.DerivedPlan | None = None
    digests_ahead: DigestsAhead | None = None  # the inputs' digests, hashed while the engine works

    def set_engine(self, name: str, version: str, **components: str) -> None:
        self.engine_name, self.engine_version = name, version
        self.engine_components = dict(components)

    def warn(self, code: str, message: str, hint: str) -> None:
        self.warnings.append(RunWarning(code, message, hint))

    def check(
        self, name: str, passed: bool, detail: str, *, critical: bool = True, argument: str | None = None
    ) -> None:
        self.checks.append(Check(name, passed, detail, critical, argument))

    def input_valid(self, key: str) -> bool:
        """Whether the engine counted the geometries of input ``key`` while reading it and found none invalid (False
        when it recorded no count)."""
        found = [c.passed for c in self.checks if c.name == INPUT_VALID_CHECK and c.argument == key]
        return bool(found) and all(found)


@dataclass
class OperationResult:
    operation: str
    status: str  # "ok" | "ok_with_warnings"
    output_path: str | None
    manifest_path: str | None
    answer: dict[str, Any]
    checks: list[dict[str, Any]]
    warnings: list[dict[str, str]]
    repairs: list[dict[str, Any]]
    engine: dict[str, Any]
    crs_decisions: dict[str, Any]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_operation(
    app: MapSmith,
    operation: str,
    arguments: Mapping[str, Any],
    progress: Callable[[float, str], None] | None = None,
) -> OperationResult:
    """Run ``operation`` on ``arguments``; every error leaving here is a MapSmithError without host paths.

    This is the runner's edge: an engine exception that escaped an adapter is translated through the
    table in ``mapsmith.errors`` (``raise ... from`` keeps the cause), and a MapSmithError quoting an
    engine's text has the host's absolute paths redacted.
    """
    root = app.workspace.root
    try:
        return _run_operation(app, operation, arguments, progress)
    except MapSmithError as exc:
        raise redact_error(exc, root) from exc.__cause__
    except Exception as exc:
        raise translate_engine_error(exc, engine="mapsmith", operation=operation, workspace_root=root) from exc


def _run_operation(
    app: MapSmith,
    operation: str,
    arguments: Mapping[str, Any],
    progress: Callable[[float, str], None] | None,
) -> OperationResult:
    started = utc_now()
    router = app.router
    contract = _answer_mode(router.contract(operation), arguments)
    args = contract.check_arguments(arguments)
    candidates = router.candidates(operation)  # refuses before any file is touched
    root = app.workspace.root
    if root is not None:
        # A CRS argument can name grid files for PROJ to read: refused before anything parses it.
        for name in crsguard.crs_parameters(contract.name, [p.name for p in contract.parameters]):
            if args.get(name) is not None:
                crsguard.check_crs_definition(args[name], argument=name, workspace_root=root)
    io = app.dataset_io(candidates.stack)

    # One slot per path read: "input_path", or "input_paths[0]", "input_paths[1]" ... for a list.
    slots = dataset_slots(contract, args)
    paths: dict[str, Path] = {}
    for key, _, given in slots:
        resolved = app.workspace.resolve(given, argument=key)
        if not isinstance(resolved, Path):
            raise InputError(
                f"{key}: remote datasets are not read by this operation yet",
                code="REMOTE_INPUT_UNSUPPORTED",
                evidence={"argument": key, "path": given},
                hint="copy the dataset into the workspace and pass its local path",
            )
        paths[key] = resolved
    output: Path | None = None
    plan: OutputPlan | None = None
    if contract.writes_dataset:
        resolved_out = app.workspace.resolve(args[OUTPUT_ARGUMENT], argument=OUTPUT_ARGUMENT)
        if not isinstance(resolved_out, Path):
            raise OutputError(
                "output_path must be a local path",
                code="OUTPUT_REMOTE",
                evidence={"path": args[OUTPUT_ARGUMENT]},
                hint="write inside the workspace",
            )
        output = resolved_out
        refuse_internal_folder(app.workspace.root, output, args[OUTPUT_ARGUMENT])
        plan = plan_output(contract, args, output, paths)  # the path checks, the layer, the GeoJSON options
    # '.parquet/' asks for parts: only engines that write them may run (refused here when none of the stack does)
    candidates, parts_passed_over = route_to_parts_writers(
        candidates, plan, app.host.implementations.get(operation, [])
    )

    # -- preconditions: headers only, before the engine runs ---------------------------------
    checks, warnings, inputs, layers = check_inputs(app, contract, args, io, slots, paths, crs_equal)
    # ".json" is a table of records (tables.py); GeoJSON is written as ".geojson".
    if output is not None and output.suffix.lower() == ".geojson":
        require_wgs84_for_geojson(contract, args, inputs.get("input_path"))

    temp = plan.engine_temp if plan else None
    ctx = RunContext(
        contract=contract,
        arguments=args,
        paths=paths,
        inputs=inputs,
        layers=layers,
        output_path=output,
        temp_output=temp,
        io=io,
        parameters={k: v for k, v in args.items() if contract.dataset(k) is None and k != OUTPUT_ARGUMENT},
        checks=checks,
        warnings=warnings,
        progress=progress,
        given_paths={key: given for key, _, given in slots},
        workspace=app.workspace,
        environ=app.environ,
    )
    if plan is not None:
        warn_replaced_layers(ctx, plan)
    if contract.output_kind == "dataset:vector":
        ctx.derived = _derived_plan(app, ctx)
    try:
        choice = router.choose_engine(candidates, ctx)
    except MapSmithError as refused:
        replaced = no_parts_writer_takes(refused, plan, parts_passed_over, operation)
        if replaced is refused:
            raise
        raise replaced from refused
    if parts_passed_over:
        choice = dataclasses.replace(choice, passed_over=(*parts_passed_over, *choice.passed_over))
    warn_if_experimental(ctx, choice.impl)  # EXPERIMENTAL_OPERATION: a plugin engine not yet promoted
    if choice.substitution:
        sub = choice.substitution
        ctx.warn(
            "SUBSTITUTED_ENGINE",
            f"{operation} ran on the {sub['substitute_stack']} stack because the {sub['preferred_stack']} "
            f"stack could not ({sub['outcome']}): {sub['reason']}",
            "the manifest names the engine that produced the values; unset MAPSMITH_FALLBACK_STACK to refuse instead",
        )

    if choice.impl.validate is not None:
        choice.impl.validate(ctx)  # refusals here come before the engine: no file is touched
    answers_with_record = not contract.writes_dataset and contract.output_table.get("optional")
    if contract.writes_dataset or answers_with_record:
        ctx.digests_ahead = DigestsAhead(app.digest, paths)  # every check before the engine has passed
    if not contract.writes_dataset:
        _compute(ctx, choice.impl.function, choice.impl.engine, operation)
        if answers_with_record:
            # An answer in place of an optional dataset records what a manifest would: inputs by digest.
            ctx.answer["provenance"] = answer_record(app, ctx, choice.record(), started)
        return _result(ctx, choice.record(), None, None, ctx.input_repairs)

    assert output is not None and temp is not None
    repairs: list[dict[str, Any]] = []
    leftovers: list[Path] = [temp]
    new_output: dict[str, Any] | None = None  # the output record, once its bytes are final
    given = args[OUTPUT_ARGUMENT]
    anchor = plan.record_anchor if plan is not None else output  # a layer's records: <container>.<layer>...
    try:
        t0 = time.perf_counter()
        _compute(ctx, choice.impl.function, choice.impl.engine, operation)
        if ctx.derived is not None:
            failed = {
                c.argument: c.detail for c in ctx.checks if c.name == INPUT_VALID_CHECK and not c.passed and c.argument
            }
            derived_fields.refuse_invalid_source(ctx.derived, operation, failed, ctx.given_paths)
        if not temp.exists():
            raise EngineError(
                f"{choice.impl.engine} reported success for {operation} but wrote no output",
                code="ENGINE_NO_OUTPUT",
                hint="this is a bug in the engine adapter",
            )
        require_folder_written(plan, temp, choice.impl.engine)  # '.parquet/' asked for parts; one file is refused
        ctx.parameters.setdefault("x-mapsmith:engine_seconds", round(time.perf_counter() - t0, 6))
        check_output_size(temp, given, app.environ)  # before reading it back: a huge file is not digested
        if ctx.table_output is not None:
            final_temp, repairs, out_info = temp, [], ctx.table_output  # checked by tables.verify_table
        elif contract.output_kind == "dataset:raster":
            final_temp, repairs, out_info = temp, [], verify_raster(ctx, io, temp)
        else:
            final_temp, repairs, out_info = verify_and_repair(ctx, io, temp, leftovers)
        if final_temp != temp:
            check_output_size(final_temp, given, app.environ)  # a repair round rewrote it
        repairs = ctx.input_repairs + repairs
        assert plan is not None
        if plan.geojson:  # written from the verified layer, then read back and checked
            final_temp, out_info = finish_geojson(ctx, io, plan, final_temp, out_info, leftovers)
            check_output_size(final_temp, given, app.environ)
        _refuse_failed_checks(ctx, operation)
        mpath = manifest_path(plan.record_anchor)

        def final_record(final: Path) -> dict[str, Any]:
            """The record of the bytes at ``final``, validated before they move: a bad record never
            leaves a dataset without one."""
            nonlocal new_output
            record = output_record(app, ctx, choice.record(), started, final, out_info, given, repairs)
            if plan is not None and plan.layer is not None:
                record["output"]["layer"] = plan.layer  # the digest covers the container (spec §3.3)
            new_output = record["output"]
            _refuse_failed_checks(ctx, operation)
            from mapsmith.provenance.validator import validate_manifest

            problems = validate_manifest(record)
            if problems:
                raise MapSmithError(f"manifest would not conform: {problems[0]}", code="MANIFEST_INVALID")
            return record

        if plan.layer is None:
            record = final_record(final_temp)
            # The rename and the manifest write happen under the output's lock, so two calls writing the
            # same output cannot interleave them: the manifest beside a dataset describes its bytes.
            with output_lock(output):
                check_not_existing(output, args[OVERWRITE_ARGUMENT], given)  # another call may have written it
                _commit(final_temp, output, given)
                write_manifest(mpath, record)
        else:
            # A layer of a container: the lock covers the whole read-copy-add-verify-rename, so a layer
            # another call adds meanwhile is never lost to this call's older copy of the container.
            with output_lock(output):
                assembled = assemble_container(ctx, plan, final_temp, leftovers)
                check_output_size(assembled, given, app.environ)
                record = final_record(assembled)
                _commit(assembled, output, given)
                write_manifest(mpath, record)
    except BaseException as exc:
        if isinstance(exc, Exception) and not isinstance(exc, MapSmithError):
            # Translated before the failure record is written: the record must not carry host paths.
            translated = translate_engine_error(
                exc, engine=choice.impl.engine, operation=operation, workspace_root=app.workspace.root
            )
            write_failure(app, ctx, choice.record(), started, output, given, translated, new_output, anchor)
            raise translated from exc
        if isinstance(exc, MapSmithError):
            redact_error(exc, app.workspace.root)
        write_failure(app, ctx, choice.record(), started, output, given, exc, new_output, anchor)
        raise
    finally:
        for p in leftovers:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    return _result(
        ctx, choice.record(), app.workspace.relative_label(output), app.workspace.relative_label(mpath), repairs
    )


def _answer_mode(contract: OperationContract, arguments: Mapping[str, Any]) -> OperationContract:
    """A contract whose dataset output is optional (``[output] optional = true``) answers in rows when
    output_path is left out: the same operation with an answer for output (run_sql)."""
    if contract.output_optional and isinstance(arguments, Mapping):
        if arguments.get(OUTPUT_ARGUMENT) is None:
            return dataclasses.replace(contract, output_kind="answer")
    return contract


def _compute(ctx: RunContext, function: Callable[[RunContext], Any], engine: str, operation: str) -> None:
    """Call the implementation; an exception it did not translate is translated here, cause kept."""
    try:
        function(ctx)
    except MapSmithError:
        raise
    except Exception as exc:
        root = ctx.workspace.root if ctx.workspace is not None else None
        raise translate_engine_error(exc, engine=engine, operation=operation, workspace_root=root) from exc


def _refuse_failed_checks(ctx: RunContext, operation: str) -> None:
    failed = [c for c in ctx.checks if not c.passed and c.critical]
    if failed:
        raise VerificationFailed(
            f"{operation}: critical check {failed[0].name} failed: {failed[0].detail}",
            evidence={"checks": [c.to_dict() for c in failed]},
            hint="the output was not written; the failure record beside output_path has the details",
        )


def _commit(source: Path, output: Path, given: str) -> None:
    try:
        _replace(source, output)
    except OSError as exc:
        raise commit_error(exc, given) from exc


def _replace(source: Path, target: Path) -> None:
    """The atomic step: a rename within one directory. Split out so tests can sabotage it."""
    if source.is_dir():
        from mapsmith import parts

        parts.replace_folder(source, target)  # an older folder of parts is swapped out whole
        return
    os.replace(source, target)


def _derived_plan(app: MapSmith, ctx: RunContext) -> derived_fields.DerivedPlan:
    """This run's derived fields: its own, and those the manifests beside its vector inputs record."""
    inherited: list[derived_fields.DerivedField] = []
    for key, info in ctx.inputs.items():
        if info.kind == "vector" and key in ctx.paths:
            inherited += derived_fields.inherited_fields(ctx.paths[key], ctx.layers.get(key), info.fields, app.digest)
    main = main_input(ctx)
    return derived_fields.plan(ctx.contract.name, ctx.arguments, inherited, main.crs_label if main else None)


def _result(
    ctx: RunContext, choice: dict[str, Any], output: str | None, manifest: str | None, repairs: list[dict[str, Any]]
) -> OperationResult:
    warnings = [w.to_dict() for w in ctx.warnings]
    if repairs:
        warnings.append(
            {
                "code": "OUTPUT_REPAIRED",
                "message": f"{len(repairs)} repair round(s) made output geometries valid; see repairs",
                "hint": "the manifest's repairs[] says what was changed; compare with the input if it matters",
            }
        )
    return OperationResult(
        operation=ctx.contract.name,
        status="ok_with_warnings" if warnings else "ok",
        output_path=output,
        manifest_path=manifest,
        answer=ctx.answer,
        checks=[c.to_dict() for c in ctx.checks],
        warnings=warnings,
        repairs=repairs,
        engine={**engine_record(ctx, choice), "stack": choice["stack"]},
        crs_decisions=ctx.crs_decisions,
        notes=ctx.notes,
    )
