"""The runner's output side for deliverables beyond one file: a layer of a GeoPackage, GeoJSON options.

``plan_output`` decides, before any engine runs, what a writing call will deliver: the file
(``output_path``), the layer inside it (``output_layer``, GeoPackage only), and the GeoJSON options
(``geojson_keep_crs``, ``feature_collection_members``), refusing what cannot be honoured. The engine
still writes one plain dataset to a temporary file (a GeoPackage when the GeoJSON is finished here),
the runner verifies it, and then:

- ``finish_geojson`` writes that verified layer as the GeoJSON asked for and reads it back (count,
  CRS with its ``crs`` member, the members);
- ``assemble_container`` — called by the runner while it holds the output's lock, so the read of the
  container, the copy, the added layer and the rename are one step to any other MapSmith call — copies
  the existing GeoPackage beside it, adds the layer, and checks that every other layer's stored rows
  are unchanged (``mapsmith.deliverables.layer_digests``) and that the new layer holds exactly the
  verified rows.

An ``output_path`` ending in ``.parquet/`` asks for a folder of Parquet parts (``mapsmith.parts``): only
engines registered with ``writes_parts`` write one (DuckDB's run_sql, select_features, clip_layer,
reproject_layer, buffer_layer and spatial_join, the Spark engines of the sedona stack), so
``route_to_parts_writers`` passes the others over before anything runs, and refuses when none is left (any other
engine would write one file and drop the slash's meaning silently), or, through ``no_parts_writer_takes``, when
every writer passed on the input; the engine writes a hidden temporary folder beside the output, which the runner
renames into place like a file (``parts.replace_folder`` over an older folder of parts).

A layer's manifest sits beside the container as ``<container>.<layer>.provenance.json`` (the manifest
spec's §3.1 name for a dataset inside a container): a GeoPackage of three layers holds three datasets,
each with its own record, and its ``output.layer`` names it (§3.3). This module never writes the output
path itself (the runner renames) and never leaves a temporary file it made outside ``leftovers``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith import deliverables, parts
from mapsmith.contracts import (
    GEOJSON_CRS_ARGUMENT,
    GEOJSON_MEMBERS_ARGUMENT,
    OUTPUT_ARGUMENT,
    OUTPUT_LAYER_ARGUMENT,
    OVERWRITE_ARGUMENT,
    OperationContract,
)
from mapsmith.errors import OutputError
from mapsmith.outputs import check_output_path, temp_path_for
from mapsmith.registry import DatasetInfo, DatasetIO, OperationImpl

if TYPE_CHECKING:
    from mapsmith.router import Candidates
    from mapsmith.runner import RunContext

WGS84_LABELS = ("EPSG:4326", "OGC:CRS84")
# Why an engine that writes one file is passed over for a folder request (the manifest's engine_choice keeps it).
PARTS_PASSED_OVER = "writes one file; output_path ends in '/', which asks for a folder of Parquet parts"
# Readers that implement RFC 7946 alone take every coordinate as WGS 84 longitude/latitude.
IGNORING_READERS = "Leaflet, Mapbox GL / MapLibre, geojson.io and GitHub's map preview"


@dataclass
class OutputPlan:
    """What one writing call delivers, decided before the engine runs."""

    output: Path
    given: str
    engine_temp: Path  # where the engine writes
    layer: str | None = None  # output_layer: the layer of a GeoPackage
    overwrite: bool = False
    geojson: bool = False  # the GeoJSON is written here from the engine's GeoPackage
    keep_crs: bool = False
    members: dict[str, Any] = field(default_factory=dict)
    # The layers an overwrite without output_layer removes with the old file (said in a warning).
    replaced_layers: list[str] = field(default_factory=list)
    # Inputs read from another layer of the container the new layer goes into (said in a warning).
    shared_inputs: list[str] = field(default_factory=list)
    folder: bool = False  # output_path ends in ".parquet/": a folder of parts, engine_temp a folder too

    @property
    def record_anchor(self) -> Path:
        """The name a manifest is formed from: the output, or ``<container>.<layer>`` for a layer."""
        if self.layer is None:
            return self.output
        return self.output.with_name(f"{self.output.name}.{self.layer}")


def plan_output(contract: OperationContract, args: dict[str, Any], output: Path, inputs: dict[str, Path]) -> OutputPlan:
    given = args[OUTPUT_ARGUMENT]
    suffix = output.suffix.lower()
    layer = args.get(OUTPUT_LAYER_ARGUMENT)
    overwrite = bool(args.get(OVERWRITE_ARGUMENT))
    if layer is not None and suffix != ".gpkg":
        raise OutputError(
            f"{given}: output_layer names a layer of a GeoPackage; a {suffix or 'file without extension'} "
            "holds one dataset",
            code="OUTPUT_LAYER_UNSUPPORTED",
            evidence={"path": given, "format": suffix, "output_layer": layer},
            hint="write to a .gpkg to deliver several layers in one file, or leave output_layer out",
        )
    keep_crs = bool(args.get(GEOJSON_CRS_ARGUMENT))
    members = args.get(GEOJSON_MEMBERS_ARGUMENT) or {}
    if (keep_crs or members) and suffix != ".geojson":
        given_options = [n for n in (GEOJSON_CRS_ARGUMENT, GEOJSON_MEMBERS_ARGUMENT) if args.get(n)]
        raise OutputError(
            f"{given}: {', '.join(given_options)} shape a GeoJSON file; this output is {suffix or 'not GeoJSON'}",
            code="GEOJSON_OPTION_UNSUPPORTED",
            evidence={"path": given, "format": suffix, "arguments": given_options},
            hint="write to a .geojson, or leave the GeoJSON options out",
        )
    if parts.is_folder_output(given):
        return _plan_folder(contract, given, output, inputs, overwrite)
    # An existing container is what a new layer goes into: only the layer's name can clash.
    adding = layer is not None and output.is_file()
    at_risk = _inputs_at_risk(contract, args, output, inputs, layer)
    check_output_path(contract, output, at_risk, overwrite or adding, given)
    if adding:
        assert layer is not None
        _check_layer_free(output, layer, overwrite, given)
    replaced: list[str] = []
    if layer is None and overwrite and suffix == ".gpkg" and output.is_file():
        replaced = [n for n in deliverables.gpkg_layers(output) if n != output.stem]
    geojson = keep_crs or bool(members)
    # The GeoJSON is written from a verified GeoPackage: GDAL's GeoJSON options apply at that write.
    engine_temp = temp_path_for(output.with_suffix(".gpkg") if geojson else output)
    plan = OutputPlan(output, given, engine_temp, layer, overwrite, geojson, keep_crs, dict(members), replaced)
    plan.shared_inputs = [name for name in inputs if name not in at_risk]
    return plan


def _plan_folder(
    contract: OperationContract, given: str, output: Path, inputs: dict[str, Path], overwrite: bool
) -> OutputPlan:
    """The plan for a folder of parts (which engine may write one is ``route_to_parts_writers``' to say); an
    older folder of parts at the path is replaced only with overwrite, anything else there never."""
    if output.is_dir() and not output.is_symlink():
        for name, path in inputs.items():
            if path.resolve() == output.resolve():
                raise OutputError(
                    f"output_path is the same folder as {name}; an input is never overwritten",
                    code="OUTPUT_IS_INPUT",
                    evidence={"path": given, "argument": name},
                    hint="write to a new path",
                )
        parts.check_folder_output(output, overwrite, given)
    else:
        check_output_path(contract, output, inputs, overwrite, given)  # format, inputs, name, parent, existing
        parts.check_folder_output(output, overwrite, given)  # a file there is never swapped for a folder
    return OutputPlan(output, given, parts.temp_folder_for(output), overwrite=overwrite, folder=True)


def no_parts_writer_takes(
    refused: Exception, plan: OutputPlan | None, passed: tuple[dict[str, str], ...], operation: str
) -> Exception:
    """For a folder request whose parts writers all passed on the input (NO_ELIGIBLE_ENGINE from the router): the
    refusal as OUTPUT_PARTS_UNSUPPORTED, naming the engines passed over for writing one file beside the writers'
    own reasons, with the way out those engines give (one file). Any other error is returned as it is."""
    from mapsmith.errors import MapSmithError

    if plan is None or not plan.folder or not passed or getattr(refused, "code", None) != "NO_ELIGIBLE_ENGINE":
        return refused
    assert isinstance(refused, MapSmithError)
    writers = list(refused.evidence.get("passed_over", []))
    one_file = ", ".join(p["engine"] for p in passed)
    return OutputError(
        f"{plan.given}: no engine that writes {operation}'s output as a folder of Parquet parts can take this "
        f"input ({'; '.join(p['reason'] for p in writers)})",
        code="OUTPUT_PARTS_UNSUPPORTED",
        evidence={"path": plan.given, "operation": operation, "passed_over": [*writers, *passed]},
        hint=f"drop the trailing '/' to write one {plan.output.suffix} file, which {one_file} can write; run_sql "
        "(output_path ending in .parquet/) then writes that file's rows as parts",
    )


def route_to_parts_writers(
    candidates: Candidates, plan: OutputPlan | None, registered: Iterable[OperationImpl]
) -> tuple[Candidates, tuple[dict[str, str], ...]]:
    """For a folder request, the candidate engines that write parts and the others as passed over; refused with
    OUTPUT_PARTS_UNSUPPORTED, before any input is read, when no engine of the stack writes parts.

    ``registered`` is every engine of the operation on every stack, to name the stacks that would write parts.
    A plan for one file (or no plan) leaves the candidates as they are."""
    if plan is None or not plan.folder:
        return candidates, ()
    writers = tuple(impl for impl in candidates.impls if impl.writes_parts)
    passed = tuple(
        {"engine": impl.engine, "reason": PARTS_PASSED_OVER} for impl in candidates.impls if not impl.writes_parts
    )
    if writers:
        return dataclasses.replace(candidates, impls=writers), passed
    elsewhere = sorted({impl.stack for impl in registered if impl.writes_parts})
    operation = candidates.operation
    if elsewhere:
        hint = (
            f"drop the trailing '/' to write one {plan.output.suffix} file, or run {operation} on a stack whose "
            f"engine writes parts (MAPSMITH_STACK={elsewhere[0]}; server_info lists the stacks and whether each "
            "is available)"
        )
    else:
        hint = (
            f"drop the trailing '/' to write one {plan.output.suffix} file, or write the parts with run_sql "
            "(output_path ending in .parquet/)"
        )
    raise OutputError(
        f"{plan.given}: no engine of the {candidates.stack} stack writes {operation}'s output as a folder of "
        "Parquet parts (a path ending in '/' asks for one)",
        code="OUTPUT_PARTS_UNSUPPORTED",
        evidence={
            "path": plan.given,
            "operation": operation,
            "stack": candidates.stack,
            "engines": [impl.engine for impl in candidates.impls],
            "stacks_writing_parts": elsewhere,
        },
        hint=hint,
    )


def require_folder_written(plan: OutputPlan | None, temp: Path, engine: str) -> None:
    """After the engine ran: a plan for a folder of parts must find a folder at ``temp``, never one file.

    The second guard behind ``route_to_parts_writers``: an engine registered with ``writes_parts`` that wrote
    one file after all is refused here, before anything is committed, instead of the trailing '/' being
    ignored.
    """
    if plan is None or not plan.folder or (temp.is_dir() and not temp.is_symlink()):
        return
    raise OutputError(
        f"{plan.given}: the {engine} engine wrote one file, not a folder of parts",
        code="OUTPUT_PARTS_UNSUPPORTED",
        evidence={"path": plan.given, "engine": engine},
        hint=f"drop the trailing '/' to write one {plan.output.suffix} file, or choose a stack whose engine writes "
        "parts (MAPSMITH_STACK=sedona with Spark, or run_sql)",
    )


def _inputs_at_risk(
    contract: OperationContract, args: dict[str, Any], output: Path, inputs: dict[str, Path], layer: str | None
) -> dict[str, Path]:
    """The inputs an output could overwrite: all of them, but for an input that is another layer of the
    container a new ``output_layer`` goes into.

    Reading layer ``roads`` of ``city.gpkg`` and adding layer ``roads_buffered`` to it is safe: the engine
    reads the file as it is, the container is copied, the layer added to the copy and the copy renamed
    over the file under the output's lock, and ``assemble_container`` checks that every other layer's rows
    (the input's among them) read back unchanged. The layer read is the one named (``layer`` for
    input_path, ``<role>_layer`` for the others); when none is named every layer of the file counts as
    read, so the exemption is never guessed.
    """
    if layer is None or not output.is_file():
        return inputs
    from mapsmith.contracts import MAIN_INPUT, MAIN_LAYER

    layer_arguments = {path_arg: layer_arg for layer_arg, path_arg in contract.dataset_layer_arguments().items()}
    layer_arguments[MAIN_INPUT] = MAIN_LAYER
    at_risk = {}
    for name, path in inputs.items():
        if path.resolve() != output.resolve():
            at_risk[name] = path
            continue
        named = args.get(layer_arguments.get(name, ""))
        read = [named] if isinstance(named, str) else deliverables.gpkg_layers(output)
        if layer in read:
            at_risk[name] = path
    return at_risk


def warn_replaced_layers(ctx: RunContext, plan: OutputPlan) -> None:
    """overwrite without output_layer replaces the whole GeoPackage: never drop its other layers unsaid."""
    if plan.replaced_layers:
        ctx.warn(
            "OUTPUT_LAYERS_REPLACED",
            f"overwrite replaced the whole of {plan.given}, and with it its layers {plan.replaced_layers}",
            "to replace one layer and keep the others, pass output_layer with overwrite=true",
        )


def _check_layer_free(output: Path, layer: str, overwrite: bool, given: str) -> list[str]:
    """The container's layers; OUTPUT_LAYER_EXISTS when ``layer`` is one of them and overwrite is false."""
    layers = deliverables.gpkg_layers(output)
    if layer in layers and not overwrite:
        raise OutputError(
            f"{given} already has a layer {layer!r}",
            code="OUTPUT_LAYER_EXISTS",
            evidence={"path": given, "output_layer": layer, "layers": layers},
            hint="choose another output_layer, or pass overwrite=true to replace that layer alone "
            "(the other layers are kept as they are)",
        )
    return layers


def require_wgs84_for_geojson(contract: OperationContract, args: dict[str, Any], main: DatasetInfo | None) -> None:
    """RFC 7946 GeoJSON is WGS 84: refuse another CRS before the engine runs, unless the caller asked
    for it with geojson_keep_crs (the file then names its CRS in the legacy ``crs`` member)."""
    if args.get(GEOJSON_CRS_ARGUMENT):
        return
    label = _expected_label(contract, args, main)
    if label is not None and label not in WGS84_LABELS:
        raise OutputError(
            f"GeoJSON output must be in WGS 84 (RFC 7946); this output would be in {label}",
            code="GEOJSON_REQUIRES_WGS84",
            evidence={"crs": label, "path": args[OUTPUT_ARGUMENT]},
            hint="reproject_layer to EPSG:4326 first; or pass geojson_keep_crs=true to keep "
            f"{label} (named in the legacy crs member, which many web readers ignore); "
            "or write .gpkg / .parquet / .fgb, which keep any CRS",
        )


def _expected_label(contract: OperationContract, args: dict[str, Any], main: DatasetInfo | None) -> str | None:
    if contract.crs_effect == "transforms" and "target_crs" in args:
        from mapsmith.crs import crs_label, parse_crs

        return crs_label(parse_crs(args["target_crs"]))
    return main.crs_label if main is not None else None


def finish_geojson(
    ctx: RunContext, io: DatasetIO, plan: OutputPlan, source: Path, verified: DatasetInfo, leftovers: list[Path]
) -> tuple[Path, DatasetInfo]:
    """Write the verified layer at ``source`` as the GeoJSON asked for; read it back and check it."""
    target = temp_path_for(plan.output)
    leftovers.append(target)
    name = plan.output.stem
    wgs84 = verified.crs_label in WGS84_LABELS
    # A WGS 84 layer stays RFC 7946 even with geojson_keep_crs: there is nothing to keep.
    deliverables.write_geojson(source, target, layer=name, keep_crs=not wgs84, members=plan.members or None)
    written = io.inspect(target, None)
    ctx.check(
        "x-mapsmith:geojson_rows",
        written.feature_count == verified.feature_count,
        f"the GeoJSON holds {written.feature_count} features; the verified layer held {verified.feature_count}",
    )
    if not wgs84:
        # io.inspect has already compared the crs member with what GDAL read (CRS_READ_MISMATCH otherwise).
        member = deliverables.top_level_members(target).get("crs")
        ctx.check(
            "x-mapsmith:geojson_crs_member",
            written.crs_label == verified.crs_label and isinstance(member, dict),
            f"the file's crs member names {written.crs_label}; the verified layer is in {verified.crs_label}",
        )
        ctx.warn(
            "GEOJSON_LEGACY_CRS",
            f"{plan.given} is GeoJSON in {verified.crs_label}, named in the legacy 'crs' member (GeoJSON 2008, "
            f"not RFC 7946); readers that follow RFC 7946 alone ({IGNORING_READERS}) ignore it and read the "
            "coordinates as longitude/latitude; GDAL-based readers (QGIS, ogr2ogr, GeoPandas) honour it",
            "for web maps write EPSG:4326 GeoJSON (reproject_layer target_crs='EPSG:4326'); to keep "
            f"{verified.crs_label} for any reader deliver .gpkg",
        )
    if plan.members:
        back = deliverables.top_level_members(target)
        got = {k: back.get(k) for k in plan.members}
        ctx.check(
            "x-mapsmith:geojson_members_written",
            got == plan.members,
            f"top-level members read back: {sorted(plan.members)}",
        )
    return target, written


def assemble_container(ctx: RunContext, plan: OutputPlan, source: Path, leftovers: list[Path]) -> Path:
    """Under the output's lock: a copy of the container (or a new one) with ``source``'s layer added.

    Returns the temporary file to rename over the output; its checks are added to ``ctx``.
    """
    assert plan.layer is not None
    if plan.shared_inputs:
        ctx.warn(
            "INPUT_CONTAINER_UPDATED",
            f"{', '.join(plan.shared_inputs)} read another layer of {plan.given}, which now holds layer "
            f"{plan.layer!r} too: that layer's rows are unchanged (x-mapsmith:container_layers_intact), but the "
            "container's bytes the manifest records as the input are no longer at that path, so get_lineage "
            "reports the original as changed and replay cannot re-read it",
            "for a chain that replays, write the new layer to another .gpkg (or convert_format the input layer "
            "to its own file first and read that)",
        )
    target = temp_path_for(plan.output)
    leftovers.append(target)
    existing = plan.output.is_file()
    before: dict[str, str] = {}
    if existing:
        # Checked again here: another call may have added the layer since plan_output looked.
        _check_layer_free(plan.output, plan.layer, plan.overwrite, plan.given)
        before = deliverables.layer_digests(plan.output, skip=plan.layer)
    deliverables.add_layer(plan.output if existing else None, source, plan.layer, target)
    after = deliverables.layer_digests(target, skip=plan.layer)
    changed = sorted(n for n in before if after.get(n) != before[n])
    ctx.check(
        "x-mapsmith:container_layers_intact",
        not changed and set(after) == set(before),
        (
            f"the other layers {sorted(before)} read back with the same rows (sha256 of each layer's stored rows "
            "and metadata, before and after)"
            if before
            else "the container is new: no other layer"
        )
        if not changed
        else f"layers changed while adding {plan.layer!r}: {changed}",
    )
    source_layers = deliverables.gpkg_layers(source)
    same = len(source_layers) == 1 and deliverables.layer_rows_digest(
        source, source_layers[0]
    ) == deliverables.layer_rows_digest(target, plan.layer)
    ctx.check(
        "x-mapsmith:container_layer_written",
        same,
        f"layer {plan.layer!r} holds exactly the verified rows (sha256 of the stored rows)"
        if same
        else f"layer {plan.layer!r} differs from the verified output",
    )
    return target
