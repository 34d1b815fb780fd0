"""The runner's input side: which paths an operation reads, which layer of each, and what is checked
on their headers before any engine runs.

``dataset_slots`` names one slot per path read ("input_path", "input_paths[0]" ...); ``choose_layer``
picks the layer of a slot the caller named (``layer`` for input_path, ``<role>_layer`` for another
``<role>_path``) and refuses to pick one of several itself; ``check_inputs`` reads every input's
header and returns the precondition checks. This module never opens an output and never runs an engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith import crsguard, parts, verify
from mapsmith.contracts import MAIN_INPUT, MAIN_LAYER, DatasetArgument, OperationContract
from mapsmith.errors import InputError
from mapsmith.registry import DatasetInfo, DatasetIO
from mapsmith.verify import Check, RunWarning

if TYPE_CHECKING:
    from mapsmith.app import MapSmith


def slot_argument(slot: str) -> str:
    """The argument a slot belongs to: "input_paths[2]" -> "input_paths"."""
    return slot.split("[", 1)[0]


def layer_argument(slot: str) -> str | None:
    """The argument naming a slot's layer: ``layer`` for input_path, ``mask_layer`` for mask_path;
    None for a member of a list (input_paths[0]), whose layers are not named one by one."""
    if slot == MAIN_INPUT:
        return MAIN_LAYER
    if "[" in slot or not slot.endswith("_path"):
        return None
    return slot[: -len("_path")] + "_layer"


def dataset_slots(contract: OperationContract, args: dict[str, Any]) -> list[tuple[str, DatasetArgument, str]]:
    slots = []
    for d in contract.datasets:
        if d.name not in args:
            continue
        if d.multiple:
            slots += [(f"{d.name}[{i}]", d, given) for i, given in enumerate(args[d.name])]
        else:
            slots.append((d.name, d, args[d.name]))
    return slots


def require_kind(d: DatasetArgument, info: DatasetInfo, key: str) -> None:
    if d.kind in ("vector", "raster") and info.kind != d.kind:
        raise InputError(
            f"{key} must be a {d.kind} dataset; {info.path} is a {info.kind} dataset",
            code="DATASET_KIND_MISMATCH",
            evidence={"argument": key, "path": info.path, "expected": d.kind, "found": info.kind},
            hint=(
                "pass a raster (GeoTIFF ...) here; rasterize_layer turns features into a grid"
                if d.kind == "raster"
                else "pass a vector layer here; table_to_points makes points from a table's coordinate columns"
                if info.kind == "table"
                else "pass a vector layer here; raster_to_polygons turns a grid into features"
            ),
        )


def choose_layer(io: DatasetIO, path: Path, layer: str | None, argument: str, given: str) -> str | None:
    # A file geodatabase and a folder of Parquet parts (mapsmith.parts) are datasets; any other folder is not.
    if path.is_dir() and not path.name.lower().endswith(".gdb") and not parts.is_parts_folder(path):
        raise InputError(
            f"{argument} is a directory, not a dataset: {given}",
            code="INPUT_IS_DIRECTORY",
            evidence={"argument": argument, "path": given},
            hint="pass the path of a dataset file, a file geodatabase (*.gdb) or a folder of *.parquet parts",
        )
    layers = io.list_layers(path)
    name = layer_argument(argument) or MAIN_LAYER
    if layer is not None:
        if layer not in layers:
            raise InputError(
                f"{given} has no layer {layer!r}; its layers are {layers}",
                code="LAYER_NOT_FOUND",
                evidence={"argument": argument, "path": given, "layers": layers},
                hint=f"pass one of {layers} as {name}",
            )
        return layer
    if len(layers) > 1:
        raise InputError(
            f"{given} holds {len(layers)} layers ({', '.join(layers)}) and none was named; MapSmith will not pick one",
            code="LAYER_REQUIRED",
            evidence={"argument": argument, "path": given, "layers": layers},
            hint=f"name the layer with the '{name}' argument, or copy it out first with extract_layer "
            f"(e.g. extract_layer(input_path={given!r}, layer={layers[0]!r}, output_path=...))",
        )
    return layers[0] if layers else None


def check_inputs(
    app: MapSmith,
    contract: OperationContract,
    args: dict[str, Any],
    io: DatasetIO,
    slots: list[tuple[str, DatasetArgument, str]],
    paths: dict[str, Path],
    crs_equal: Callable[[str | None, str | None], bool],
) -> tuple[list[Check], list[RunWarning], dict[str, DatasetInfo], dict[str, str | None]]:
    """Read every input's header; return the precondition checks, warnings, infos and chosen layers."""
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
        # A folder of parts declares its CRS in each part: each is checked as a file would be.
        for declaring in parts.part_files(path) if parts.is_parts_folder(path) else [path]:
            crsguard.check_declared_crs(declaring, argument=key, workspace_root=app.workspace.root)
        named = layer_argument(key)
        layer = args.get(named) if named else None
        if contract.output_kind == "description" and layer is None:
            layers[key] = None  # describing a container is how its layers are found: no refusal
            continue
        layer = choose_layer(io, path, layer, key, given)
        layers[key] = layer
        # Messages and evidence name the path as the caller gave it, never the host's absolute path.
        info = dataclasses.replace(io.inspect(path, layer), path=given)
        inputs[key] = info
        if contract.output_kind == "description" or d.kind == "table" or (d.kind == "any" and info.kind == "table"):
            continue  # a table has no CRS or geometry to require
        require_kind(d, info, key)
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
    # Two datasets in different roles (input and mask, input and join ...) are compared; the members
    # of one list (tiles to merge) are not expected to overlap, and each is aligned by the operation.
    names: list[str] = []
    for key, d, _ in slots:
        if key in inputs and d.kind != "table" and all(slot_argument(n) != d.name for n in names):
            names.append(key)
    if len(names) >= 2:
        first, second = inputs[names[0]], inputs[names[1]]
        checks.append(
            verify.inputs_share_crs(first, second, names[0], names[1], crs_equal(first.crs_wkt, second.crs_wkt))
        )
        check, warning = verify.inputs_may_intersect(
            first, second, names[0], names[1], needed=contract.needs_overlapping_inputs, operation=contract.name
        )
        checks.append(check)
        if warning:
            warnings.append(warning)
    return checks, warnings, inputs, layers
