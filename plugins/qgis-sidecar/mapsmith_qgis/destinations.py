"""QGIS destinations that are not the run's one output: checked, written beside, moved in, recorded.

An imported algorithm's main destination is the runner's ``output_path``; every other destination
QGIS declares (a second layer, a report file, a folder of files) is an argument ``<name>_destination``.
This module resolves those paths inside the workspace before QGIS starts, hands QGIS a temporary
name beside each, and after a successful run moves each into place and records its digest in the
run's parameters (so the manifest names every file the run wrote). It also describes a main output
that is a file rather than one layer (``native:package``'s GeoPackage, an HTML report) for the runner.

It must never let QGIS write outside the workspace, never replace an existing path without
``overwrite``, and never leave a temporary file behind after a failure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import EngineError, OutputError

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

_CONTAINERS = (".gpkg", ".sqlite")
_DRIVERS = {".html": "HTML", ".csv": "CSV", ".txt": "text", ".json": "JSON", ".pdf": "PDF", ".gpkg": "GPKG"}


@dataclass(frozen=True)
class Destination:
    argument: str
    qgis: str
    kind: str  # QGIS's type id: fileDestination, folderDestination, sink, vectorDestination, rasterDestination
    given: str
    final: Path
    temp: Path


def _invalid(message: str, argument: str, given: str, hint: str, **evidence: Any) -> OutputError:
    return OutputError(
        f"{argument}: {message}",
        code="QGIS_DESTINATION_INVALID",
        evidence={"argument": argument, "path": given, **evidence},
        hint=hint,
    )


def plan_destinations(ctx: RunContext, mapping: dict[str, dict[str, Any]]) -> list[Destination]:
    """Every destination argument given, resolved in the workspace and checked, with its temporary path."""
    from mapsmith.outputs import check_not_existing, temp_path_for

    overwrite = bool(ctx.arguments.get("overwrite"))
    taken = {p.resolve() for p in ctx.paths.values()}
    if ctx.output_path is not None:
        taken.add(ctx.output_path.resolve())
    planned: list[Destination] = []
    for argument, target in mapping.items():
        value = ctx.arguments.get(argument)
        if target.get("as") != "destination" or value is None:
            continue
        given = str(value)
        if ctx.workspace is None:
            raise _invalid("no path policy to check it against", argument, given, "run through the MapSmith app")
        resolved = ctx.workspace.resolve(given, argument=argument)  # PATH_* errors outside the workspace
        if not isinstance(resolved, Path):
            raise _invalid("QGIS writes local files only", argument, given, "give a path inside the workspace")
        formats = list(target.get("formats") or [])
        if formats and resolved.suffix.lower() not in formats:
            raise _invalid(
                f"QGIS writes {', '.join(formats)} here, not {resolved.suffix or 'a name without extension'}",
                argument,
                given,
                f"end the path with {formats[0]}",
                formats=formats,
            )
        if not resolved.parent.is_dir():
            raise _invalid("its folder does not exist", argument, given, "write into an existing folder")
        if resolved.resolve() in taken:
            raise _invalid(
                "it names an input, the output_path or another destination",
                argument,
                given,
                "give each destination a path of its own",
            )
        taken.add(resolved.resolve())
        check_not_existing(resolved, overwrite, given)
        temp = temp_path_for(resolved)
        planned.append(Destination(argument, str(target["qgis"]), str(target["destination"]), given, resolved, temp))
    for d in planned:
        if d.kind == "folderDestination":
            d.temp.mkdir()  # QGIS writes into a folder destination but does not create it (pointstopath)
    return planned


def discard(planned: list[Destination]) -> None:
    for d in planned:
        if d.temp.is_dir() and not d.temp.is_symlink():
            shutil.rmtree(d.temp, ignore_errors=True)
        else:
            d.temp.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _layers(path: Path) -> dict[str, int]:
    """Each layer of a GeoPackage and its feature count, as GDAL reads them back."""
    import pyogrio

    return {
        str(name): int(pyogrio.read_info(path, layer=str(name))["features"]) for name, _ in pyogrio.list_layers(path)
    }


def _record(path: Path) -> dict[str, Any]:
    if path.is_dir():
        # A folder's digest covers every file's relative name and digest, in sorted order.
        files = sorted(p for p in path.rglob("*") if p.is_file())
        listing = [(p.relative_to(path).as_posix(), _sha256(p), p.stat().st_size) for p in files]
        digest = hashlib.sha256("\n".join(f"{n} {h}" for n, h, _ in listing).encode()).hexdigest()
        return {
            "sha256": digest,
            "bytes": sum(b for _, _, b in listing),
            "files": [{"name": n, "sha256": h, "bytes": b} for n, h, b in listing],
        }
    out: dict[str, Any] = {"sha256": _sha256(path), "bytes": path.stat().st_size}
    if path.suffix.lower() in _CONTAINERS:
        out["layers"] = _layers(path)
    return out


def commit_destinations(ctx: RunContext, planned: list[Destination], algorithm: str) -> None:
    """Move each written destination into place (atomically, under its lock) and record it."""
    from mapsmith.outputs import check_not_existing, output_lock

    missing = [d for d in planned if not d.temp.exists()]
    if missing:
        discard(planned)
        raise EngineError(
            f"QGIS {algorithm} reported success but wrote nothing at {missing[0].argument}",
            code="QGIS_NO_OUTPUT",
            evidence={"algorithm": algorithm, "destinations": [d.argument for d in missing]},
            hint="the algorithm may write nothing for these inputs; check the parameters",
        )
    records = []
    try:
        for d in planned:
            record = {"argument": d.argument, "qgis_parameter": d.qgis, "qgis_type": d.kind, "path": d.given}
            record.update(_record(d.temp))
            with output_lock(d.final):
                check_not_existing(d.final, bool(ctx.arguments.get("overwrite")), d.given)
                if d.final.is_dir() and not d.final.is_symlink():
                    shutil.rmtree(d.final)  # overwrite=true of a folder: os.replace cannot replace a full one
                os.replace(d.temp, d.final)
            records.append(record)
    finally:
        discard(planned)
    if records:
        ctx.parameters["x-mapsmith:qgis_destinations"] = records
        ctx.answer["destinations"] = records


def describe_file_output(ctx: RunContext) -> None:
    """The runner's description of a main output that is a file: its layers when it is a GeoPackage."""
    from mapsmith.registry import DatasetInfo

    assert ctx.temp_output is not None and ctx.output_path is not None
    suffix = ctx.output_path.suffix.lower()
    layers = _layers(ctx.temp_output) if suffix in _CONTAINERS else {}
    if layers:
        ctx.parameters["x-mapsmith:layers_written"] = layers
        ctx.check(
            "x-mapsmith:layers_written",
            True,
            "read back: " + ", ".join(f"{name} ({count} features)" for name, count in layers.items()),
        )
    ctx.table_output = DatasetInfo(
        path=str(ctx.arguments.get("output_path")),
        kind="vector" if layers else "table",
        driver=_DRIVERS.get(suffix, suffix.lstrip(".").upper() or None),
        layer=None,
        layers=tuple(layers),
        crs_wkt=None,
        crs_label=None,
        crs_is_geographic=None,
        feature_count=sum(layers.values()) if layers else None,
        geometry_types=(),
        bounds=None,
        bounds_lonlat=None,
    )
