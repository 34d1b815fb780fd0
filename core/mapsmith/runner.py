"""Run one operation: check, resolve, precondition, compute, verify, repair, write, record.

This is the single path every operation takes, alone or (later) inside a plan: arguments are
checked against the contract, paths against the workspace, the engine is chosen by the router,
inputs are checked before the engine sees them, the engine writes to a temporary path, the output
is checked (and, if mechanically broken, repaired in at most two disclosed rounds), and only then
is it renamed into place with its manifest. A run that fails after the engine started leaves a
``.failed.provenance.json`` record and never a half-written dataset at the output path.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith import crsguard, verify
from mapsmith.contracts import OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT, DatasetArgument, OperationContract
from mapsmith.errors import EngineError, InputError, MapSmithError, OutputError, VerificationFailed
from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.manifest import (
    base_record,
    failed_manifest_path,
    manifest_path,
    posix_label,
    utc_now,
    write_manifest,
)
from mapsmith.registry import DatasetInfo, DatasetIO
from mapsmith.verify import Check, RunWarning

if TYPE_CHECKING:
    from mapsmith.app import MapSmith
    from mapsmith.workspace import Workspace

MAX_REPAIR_ROUNDS = 2
NAME_MAX_BYTES = 255  # one file name, on the file systems MapSmith runs on
# Bytes an output's name must leave for the names written beside it: ".<stem>.tmp-<8 hex><suffix>"
# (14 more) and "<name>.failed.<n>.provenance.json" (26 more for n < 100).
OUTPUT_NAME_ROOM = 32
# A written dataset is never a shapefile: the format truncates field names to 10 characters and
# splits one dataset over several files, which breaks atomic replacement.
REFUSED_OUTPUT_FORMATS = {
    ".shp": "shapefile output truncates field names to 10 characters and spreads one "
    "dataset over several files; write .gpkg (or .parquet / .fgb) instead"
}


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

    def set_engine(self, name: str, version: str, **components: str) -> None:
        self.engine_name, self.engine_version = name, version
        self.engine_components = dict(components)

    def warn(self, code: str, message: str, hint: str) -> None:
        self.warnings.append(RunWarning(code, message, hint))

    def check(
        self, name: str, passed: bool, detail: str, *, critical: bool = True, argument: str | None = None
    ) -> None:
        self.checks.append(Check(name, passed, detail, critical, argument))


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


def _crs_equal(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    from pyproj import CRS

    return CRS.from_user_input(a).equals(CRS.from_user_input(b), ignore_axis_order=True)


def run_operation(
    app: MapSmith,
    operation: str,
    arguments: Mapping[str, Any],
    progress: Callable[[float, str], None] | None = None,
) -> OperationResult:
    started = utc_now()
    router = app.router
    contract = router.contract(operation)
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
    slots = _dataset_slots(contract, args)
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
        _check_output_path(contract, output, paths, args[OVERWRITE_ARGUMENT], args[OUTPUT_ARGUMENT])

    # -- preconditions: headers only, before the engine runs ---------------------------------
    checks: list[Check] = []
    warnings: list[RunWarning] = []
    inputs: dict[str, DatasetInfo] = {}
    layers: dict[str, str | None] = {}
    for key, d, given in slots:
        path = paths[key]
        if not path.exists():
            raise InputError(
                f"{key} does not exist: {given}",
                code="INPUT_NOT_FOUND",
                evidence={"argument": key, "path": given},
                hint="check the path; relative paths are resolved against the workspace",
            )
        # The CRS a file declares is read from its bytes before GDAL opens it (io.inspect below).
        crsguard.check_declared_crs(path, argument=key, workspace_root=app.workspace.root)
        layer = args.get("layer") if key == "input_path" else None
        if contract.output_kind == "description" and layer is None:
            layers[key] = None  # describing a container is how its layers are found: no refusal
            continue
        layer = _choose_layer(io, path, layer, key, given)
        layers[key] = layer
        # Messages and evidence name the path as the caller gave it, never the host's absolute path.
        info = dataclasses.replace(io.inspect(path, layer), path=given)
        inputs[key] = info
        if contract.output_kind == "description" or d.kind == "table":
            continue  # a table has no CRS or geometry to require
        _require_kind(d, info, key)
        if info.kind == "raster":
            checks.append(verify.require_one_georeferencing(info, key))
            if contract.needs_projected_crs:
                checks.append(verify.require_projected_grid(info, key, contract.name))
        checks.append(verify.require_crs(info, key))
        geom_check = verify.require_geometry_types(info, d, contract.name, argument=key)
        if geom_check:
            checks.append(geom_check)
        check, warning = verify.input_not_empty(info, key)
        checks.append(check)
        if warning:
            warnings.append(warning)
    if output is not None and output.suffix.lower() in (".geojson", ".json"):
        _require_wgs84_for_geojson(contract, args, inputs.get("input_path"))
    # Two datasets in different roles (input and mask, input and join ...) are compared; the members
    # of one list (tiles to merge) are not expected to overlap, and each is aligned by the operation.
    names: list[str] = []
    for key, d, _ in slots:
        if key in inputs and d.kind != "table" and all(slot_argument(n) != d.name for n in names):
            names.append(key)
    if len(names) >= 2:
        first, second = inputs[names[0]], inputs[names[1]]
        checks.append(
            verify.inputs_share_crs(first, second, names[0], names[1], _crs_equal(first.crs_wkt, second.crs_wkt))
        )
        check, warning = verify.inputs_may_intersect(first, second, names[0], names[1])
        checks.append(check)
        if warning:
            warnings.append(warning)

    temp = output.with_name(f".{output.stem}.tmp-{uuid.uuid4().hex[:8]}{output.suffix}") if output else None
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
    choice = router.choose_engine(candidates, ctx)
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
    if not contract.writes_dataset:
        choice.impl.function(ctx)
        return _result(ctx, choice.record(), None, None, ctx.input_repairs)

    assert output is not None and temp is not None
    repairs: list[dict[str, Any]] = []
    leftovers: list[Path] = [temp]
    new_output: dict[str, Any] | None = None  # the output record, once its bytes are final
    try:
        t0 = time.perf_counter()
        try:
            choice.impl.function(ctx)
        except MapSmithError:
            raise
        except Exception as exc:
            raise EngineError(
                f"{choice.impl.engine} failed in {operation}: {type(exc).__name__}: {exc}",
                evidence={"engine": choice.impl.engine, "exception": type(exc).__name__},
                hint="the engine's message is above; check the inputs it names",
            ) from exc
        if not temp.exists():
            raise EngineError(
                f"{choice.impl.engine} reported success for {operation} but wrote no output",
                code="ENGINE_NO_OUTPUT",
                hint="this is a bug in the engine adapter",
            )
        ctx.parameters.setdefault("x-mapsmith:engine_seconds", round(time.perf_counter() - t0, 6))
        if contract.output_kind == "dataset:raster":
            final_temp, repairs, out_info = temp, [], _verify_raster(ctx, io, temp)
        else:
            final_temp, repairs, out_info = _verify_and_repair(ctx, io, temp, leftovers)
        repairs = ctx.input_repairs + repairs
        record = _record(app, ctx, choice.record(), started, final_temp, out_info, args[OUTPUT_ARGUMENT], repairs)
        new_output = record["output"]
        failed = [c for c in ctx.checks if not c.passed and c.critical]
        if failed:
            raise VerificationFailed(
                f"{operation}: critical check {failed[0].name} failed: {failed[0].detail}",
                evidence={"checks": [c.to_dict() for c in failed]},
                hint="the output was not written; the failure record beside output_path has the details",
            )
        mpath = manifest_path(output)
        # Validate the record before the dataset moves, so a bad record never leaves a dataset without one.
        from mapsmith.provenance.validator import validate_manifest

        problems = validate_manifest(record)
        if problems:
            raise MapSmithError(f"manifest would not conform: {problems[0]}", code="MANIFEST_INVALID")
        _replace(final_temp, output)
        write_manifest(mpath, record)
    except BaseException as exc:
        _write_failure(app, ctx, choice.record(), started, output, args[OUTPUT_ARGUMENT], exc, new_output)
        raise
    finally:
        for p in leftovers:
            p.unlink(missing_ok=True)
    return _result(
        ctx, choice.record(), app.workspace.relative_label(output), app.workspace.relative_label(mpath), repairs
    )


def _require_wgs84_for_geojson(contract: OperationContract, args: dict[str, Any], main: DatasetInfo | None) -> None:
    """RFC 7946 GeoJSON is WGS 84; refuse before the engine runs rather than write a mislabelled file."""
    if contract.crs_effect == "transforms" and "target_crs" in args:
        from mapsmith.crs import crs_label, parse_crs

        label = crs_label(parse_crs(args["target_crs"]))
    elif main is not None:
        label = main.crs_label
    else:
        return
    if label not in ("EPSG:4326", "OGC:CRS84"):
        raise OutputError(
            f"GeoJSON output must be in WGS 84 (RFC 7946); this output would be in {label}",
            code="GEOJSON_REQUIRES_WGS84",
            evidence={"crs": label, "path": args[OUTPUT_ARGUMENT]},
            hint="reproject_layer to EPSG:4326 first, or write .gpkg / .parquet / .fgb, which keep any CRS",
        )


def _require_kind(d: DatasetArgument, info: DatasetInfo, key: str) -> None:
    if d.kind in ("vector", "raster") and info.kind != d.kind:
        raise InputError(
            f"{key} must be a {d.kind} dataset; {info.path} is a {info.kind} dataset",
            code="DATASET_KIND_MISMATCH",
            evidence={"argument": key, "path": info.path, "expected": d.kind, "found": info.kind},
            hint=(
                "pass a raster (GeoTIFF ...) here; rasterize_layer turns features into a grid"
                if d.kind == "raster"
                else "pass a vector layer here; raster_to_polygons turns a grid into features"
            ),
        )


def slot_argument(slot: str) -> str:
    """The argument a slot belongs to: "input_paths[2]" -> "input_paths"."""
    return slot.split("[", 1)[0]


def main_input(ctx: RunContext) -> DatasetInfo | None:
    """The input an output is compared with: input_path, else the first of a list (input_paths[0])."""
    return ctx.inputs.get("input_path") or next(
        (info for slot, info in ctx.inputs.items() if info.kind != "table" and slot.endswith("[0]")), None
    )


def _dataset_slots(contract: OperationContract, args: dict[str, Any]) -> list[tuple[str, DatasetArgument, str]]:
    slots = []
    for d in contract.datasets:
        if d.name not in args:
            continue
        if d.multiple:
            slots += [(f"{d.name}[{i}]", d, given) for i, given in enumerate(args[d.name])]
        else:
            slots.append((d.name, d, args[d.name]))
    return slots


def _replace(source: Path, target: Path) -> None:
    """The atomic step: a rename within one directory. Split out so tests can sabotage it."""
    os.replace(source, target)


def _choose_layer(io: DatasetIO, path: Path, layer: str | None, argument: str, given: str) -> str | None:
    if path.is_dir() and not path.name.lower().endswith(".gdb"):
        raise InputError(
            f"{argument} is a directory, not a dataset: {given}",
            code="INPUT_IS_DIRECTORY",
            evidence={"argument": argument, "path": given},
            hint="pass the path of a dataset file",
        )
    layers = io.list_layers(path)
    if layer is not None:
        if layer not in layers:
            raise InputError(
                f"{given} has no layer {layer!r}; its layers are {layers}",
                code="LAYER_NOT_FOUND",
                evidence={"argument": argument, "path": given, "layers": layers},
                hint=f"pass one of {layers} as layer",
            )
        return layer
    if len(layers) > 1:
        raise InputError(
            f"{given} holds {len(layers)} layers ({', '.join(layers)}) and none was named; MapSmith will not pick one",
            code="LAYER_REQUIRED",
            evidence={"argument": argument, "path": given, "layers": layers},
            hint="name the layer with the 'layer' argument, or copy it out first with extract_layer "
            f"(e.g. extract_layer(input_path={given!r}, layer={layers[0]!r}, output_path=...))",
        )
    return layers[0] if layers else None


def _check_output_path(
    contract: OperationContract, output: Path, inputs: dict[str, Path], overwrite: bool, given: str
) -> None:
    suffix = output.suffix.lower()
    if suffix in REFUSED_OUTPUT_FORMATS:
        raise OutputError(
            f"{given}: {REFUSED_OUTPUT_FORMATS[suffix]}",
            code="OUTPUT_FORMAT_REFUSED",
            evidence={"path": given, "format": suffix},
            hint="choose an output ending in " + ", ".join(contract.output_formats),
        )
    if contract.output_formats and suffix not in contract.output_formats:
        raise OutputError(
            f"{given}: {contract.name} writes {', '.join(contract.output_formats)}, not {suffix or '(no extension)'}",
            code="OUTPUT_FORMAT_UNSUPPORTED",
            evidence={"path": given, "format": suffix},
            hint="choose an output ending in " + ", ".join(contract.output_formats),
        )
    if contract.output_kind == "dataset:raster":
        # A sidecar left beside the output path would override the new file's georeferencing
        # (GDAL reads .aux.xml before the GeoTIFF's own tags): never let it, never delete it silently.
        stale = [p.name for p in _raster_sidecars(output) if p.exists()]
        if stale:
            raise OutputError(
                f"{given}: {', '.join(stale)} beside it would override the new raster's georeferencing",
                code="OUTPUT_SIDECAR_EXISTS",
                evidence={"path": given, "sidecars": stale},
                hint="remove the sidecar file(s) first, or write to a new output_path",
            )
    for name, path in inputs.items():
        if path.resolve() == output.resolve():
            raise OutputError(
                f"output_path is the same file as {name}; an input is never overwritten",
                code="OUTPUT_IS_INPUT",
                evidence={"path": given, "argument": name},
                hint="write to a new path",
            )
    name_bytes = len(os.fsencode(output.name))
    if name_bytes > NAME_MAX_BYTES - OUTPUT_NAME_ROOM:
        # The temporary file and the records beside the output take longer names than the output.
        raise OutputError(
            f"{given}: the file name is {name_bytes} bytes; names beside it (its temporary file, its "
            f"manifest) would pass the file system's {NAME_MAX_BYTES}-byte limit",
            code="PATH_TOO_LONG",
            evidence={"path": given, "name_bytes": name_bytes, "limit": NAME_MAX_BYTES - OUTPUT_NAME_ROOM},
            hint=f"use an output file name of at most {NAME_MAX_BYTES - OUTPUT_NAME_ROOM} bytes",
        )
    if output.is_dir():
        # Never a dataset to replace: the temporary file would be written beside it, and for the
        # workspace root itself that is outside the workspace.
        raise OutputError(
            f"{given} is a directory",
            code="OUTPUT_IS_DIRECTORY",
            evidence={"path": given},
            hint="write to a file path inside the workspace, for example 'result.gpkg'",
        )
    if not output.parent.is_dir():
        raise OutputError(
            f"the folder of output_path does not exist: {output.parent}",
            code="OUTPUT_FOLDER_MISSING",
            evidence={"path": given},
            hint="write into an existing folder",
        )
    if output.exists() and not overwrite:
        raise OutputError(
            f"{given} exists already",
            code="OUTPUT_EXISTS",
            evidence={"path": given},
            hint="choose a new output_path, or pass overwrite=true to replace it (its manifest is replaced too)",
        )


def _raster_sidecars(path: Path) -> list[Path]:
    return [path.with_name(path.name + ".aux.xml"), path.with_suffix(".tfw"), path.with_name(path.name + ".ovr")]


def _verify_raster(ctx: RunContext, io: DatasetIO, temp: Path) -> DatasetInfo:
    """A raster is read back whole (header and per-band statistics) and compared with the grid the
    implementation meant to write; there is no geometry to repair."""
    main = main_input(ctx)
    out = io.inspect(temp, None, validity=True)
    if ctx.contract.crs_effect == "transforms":
        expected = ctx.expected_output_crs
    else:
        expected = main.crs_wkt if main else None
    ctx.checks.extend(
        verify.raster_output_checks(
            ctx.contract,
            out,
            ctx.expected_grid,
            expected_crs_label=_label(expected),
            crs_equal=_crs_equal(expected, out.crs_wkt) if expected else out.crs_wkt is not None,
            input_grid=main.grid if main is not None and main.kind == "raster" else None,
        )
    )
    return out


def _verify_and_repair(
    ctx: RunContext, io: DatasetIO, temp: Path, leftovers: list[Path]
) -> tuple[Path, list[dict[str, Any]], DatasetInfo]:
    contract = ctx.contract
    main = main_input(ctx)
    expected = ctx.expected_output_crs if contract.crs_effect == "transforms" else (main.crs_wkt if main else None)
    expected_label = _label(expected)
    repairs: list[dict[str, Any]] = []
    current = temp
    wants_validity = "geometry_valid" in contract.checks
    for round_no in range(MAX_REPAIR_ROUNDS + 1):
        # The header is always read back from the written file (count, CRS, declared types). The
        # validity scan is taken from the engine's own frame when the writer reported it for a
        # lossless format (see OutputStats): re-reading a million polygons would double the run.
        stats = ctx.output_stats if round_no == 0 else None
        out = io.inspect(current, None, validity=wants_validity and stats is None)
        if stats is not None:
            out = dataclasses.replace(
                out,
                invalid_count=stats.invalid_count,
                geometry_types=stats.geometry_types if stats.feature_count else out.geometry_types,
            )
        checks = verify.output_checks(
            contract,
            out,
            expected_crs_label=expected_label,
            crs_equal=_crs_equal(expected, out.crs_wkt) if expected else out.crs_wkt is not None,
            input_count=main.feature_count if main else None,
            input_families=main.geometry_families if main else frozenset(),
        )
        invalid = next((c for c in checks if c.name == "geometry_valid" and not c.passed), None)
        if invalid is None or round_no == MAX_REPAIR_ROUNDS:
            break
        repaired = current.with_name(f"{current.stem}.repair{round_no + 1}{current.suffix}")
        leftovers.append(repaired)
        report = io.repair_geometries(current, repaired, None)
        after = io.inspect(repaired, None, validity=True)
        repairs.append(
            {
                "check": "geometry_valid",
                "action": f"round {round_no + 1}: {report.get('action', 'make_valid')} on {out.invalid_count} "
                f"invalid geometries ({invalid.detail})",
                "resolved": after.invalid_count == 0,
                "x-mapsmith:report": report,
            }
        )
        current = repaired  # swapped in only now that the repaired file is complete
    ctx.checks.extend(checks)
    return current, repairs, out


def _label(wkt: str | None) -> str | None:
    if wkt is None:
        return None
    from mapsmith.crs import crs_label

    return crs_label(wkt)


def _input_records(app: MapSmith, ctx: RunContext) -> list[dict[str, Any]]:
    records = []
    for name, path in ctx.paths.items():
        info = ctx.inputs.get(name)
        rec: dict[str, Any] = {
            "path": posix_label(ctx.given_paths[name]),
            "sha256": app.digest(path),
            "crs": info.crs_label if info else None,
            "argument": name,
        }
        if ctx.layers.get(name) is not None:
            rec["layer"] = ctx.layers[name]
        if ctx.input_environment.get(name):
            rec["environment"] = dict(ctx.input_environment[name])
        records.append(rec)
    return records


def _engine_record(ctx: RunContext, choice: dict[str, Any]) -> dict[str, Any]:
    engine: dict[str, Any] = {"name": ctx.engine_name or choice["engine"], "version": ctx.engine_version or "unknown"}
    if ctx.engine_components:
        engine["x-mapsmith:components"] = ctx.engine_components
    return engine


def _common(app: MapSmith, ctx: RunContext, choice: dict[str, Any], started: str) -> dict[str, Any]:
    record = base_record(ctx.contract.name, started)
    record["parameters"] = ctx.parameters
    record["inputs"] = _input_records(app, ctx)
    record["engine"] = _engine_record(ctx, choice)
    if ctx.crs_decisions:
        record["crs_decisions"] = ctx.crs_decisions
    if ctx.notes:
        record["notes"] = list(ctx.notes)
    record["environment"] = {**app.environment_record(), **ctx.environment}
    record["x-mapsmith:engine_choice"] = choice
    if ctx.warnings:
        record["x-mapsmith:warnings"] = [w.to_dict() for w in ctx.warnings]
    return record


def _record(
    app: MapSmith,
    ctx: RunContext,
    choice: dict[str, Any],
    started: str,
    final_temp: Path,
    out_info: DatasetInfo,
    given: str,
    repairs: list[dict[str, Any]],
) -> dict[str, Any]:
    record = _common(app, ctx, choice, started)
    record["output"] = {"path": posix_label(given), "sha256": dataset_digest(final_temp), "crs": out_info.crs_label}
    record["verification"] = [c.to_dict() for c in ctx.checks]
    if repairs:
        record["repairs"] = repairs
    record["finished_at"] = utc_now()
    return record


def _write_failure(
    app: MapSmith,
    ctx: RunContext,
    choice: dict[str, Any],
    started: str,
    output: Path,
    given: str,
    exc: BaseException,
    new_output: dict[str, Any] | None,
) -> None:
    """A failed run's record: what ran, what was checked, and that it did not complete.

    When the failure came after the new bytes reached ``output`` (the rename happened, the record
    did not), the record carries ``output`` with their digest, so a lineage walk finds this failed
    run as the producer of those bytes instead of an earlier record describing other bytes.
    """
    try:
        # Implementations add round_trip only once coordinates are back in the caller's CRS (spec
        # §3.7), so whatever crs_decisions holds here is true of this failed run too.
        record = _common(app, ctx, choice, started)
        error = exc.to_dict() if isinstance(exc, MapSmithError) else {"code": "INTERRUPTED", "message": repr(exc)}
        record["verification"] = [c.to_dict() for c in ctx.checks] + [
            {
                "name": "x-mapsmith:run_completed",
                "passed": False,
                "detail": f"the run did not complete: [{error['code']}] {error['message']}",
                "critical": True,
            }
        ]
        if new_output is not None and output.exists() and dataset_digest(output) == new_output["sha256"]:
            record["output"] = new_output
        record["x-mapsmith:error"] = error
        record["x-mapsmith:intended_output"] = posix_label(given)
        record["finished_at"] = utc_now()
        write_manifest(failed_manifest_path(output), record)
    except Exception as inner:  # the original error matters more; say the record could not be made
        import sys

        print(f"mapsmith: could not write the failure record for {given}: {inner!r}", file=sys.stderr)


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
        engine={**_engine_record(ctx, choice), "stack": choice["stack"]},
        crs_decisions=ctx.crs_decisions,
        notes=ctx.notes,
    )
