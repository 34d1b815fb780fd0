"""What flows between the steps of a plan: ``Flow`` (a dataset argument's kind, CRS, geometry families
and grid, read from a header or simulated from the step that writes it) and ``StepState`` (one step as
validation sees it).

Split from ``validate.py`` so the validator reads as the sequence of checks it makes. This module must
never read a file or run an engine: a ``Flow`` is built from a header someone else read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapsmith.contracts import DatasetArgument, OperationContract
from mapsmith.plans.model import ESCAPED_PREFIX, Step, reference_of
from mapsmith.registry import DatasetInfo

# The engine names of each family, so a simulated input can go through the runner's own checks.
FAMILY_TYPE_NAMES = {"point": "Point", "line": "LineString", "polygon": "Polygon", "collection": "GeometryCollection"}


@dataclass
class Flow:
    """What a dataset argument would receive: read from a file's header, or simulated from a step.

    ``None`` in a field means "not known before the plan runs" (a reprojected grid, the CRS of an
    unknown operation's output); checks that need a fact that is not known are skipped, never guessed.
    """

    path: str  # as the plan gives it (for a step's output: that step's output_path)
    kind: str | None  # vector | raster | table | None
    crs_label: str | None
    crs_is_geographic: bool | None
    geometry_families: frozenset[str] | None
    grid: dict[str, Any] | None
    from_step: str | None = None  # the step that writes it; None for a file that exists now
    info: DatasetInfo | None = None  # the header, for a file
    # The operation whose output geometry is known only once it runs (run_sql without geometry_type):
    # checks on geometry move to run time, and validation says so in a note.
    geometry_deferred_by: str | None = None

    @classmethod
    def from_info(cls, info: DatasetInfo) -> Flow:
        grid = None
        if info.kind == "raster" and info.grid is not None:
            g = info.grid
            grid = {
                "width": g.get("width"),
                "height": g.get("height"),
                "transform": list(g.get("transform") or []),
                "cell_size": list(g.get("res") or []),
                "nodata": g.get("nodata"),
            }
        return cls(
            path=info.path,
            kind=info.kind,
            crs_label=info.crs_label,
            crs_is_geographic=info.crs_is_geographic,
            geometry_families=info.geometry_families if info.kind == "vector" else None,
            grid=grid,
            info=info,
        )

    def described(self) -> str:
        return f"the output of step '{self.from_step}', {self.path}" if self.from_step else self.path

    def as_info(self) -> DatasetInfo:
        """The header a real file would have, so the runner's own checks judge a simulated input."""
        if self.info is not None:
            return self.info
        families = sorted(self.geometry_families or ())
        grid = None
        if self.grid is not None:
            grid = {**self.grid, "res": self.grid.get("cell_size") or [None, None]}
        return DatasetInfo(
            path=self.described(),
            kind="raster" if self.kind == "raster" else "table" if self.kind == "table" else "vector",
            driver=None,
            layer=None,
            layers=(),
            crs_wkt=None,
            crs_label=self.crs_label,
            crs_is_geographic=self.crs_is_geographic,
            feature_count=None,
            geometry_types=tuple(FAMILY_TYPE_NAMES.get(f, f) for f in families),
            bounds=None,
            bounds_lonlat=None,
            grid=grid,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "from_step": self.from_step,
            "kind": self.kind,
            "crs": self.crs_label,
            "crs_is_geographic": self.crs_is_geographic,
            "geometry_types": sorted(self.geometry_families) if self.geometry_families is not None else None,
            "grid": self.grid,
        }


@dataclass
class StepState:
    step: Step
    index: int
    contract: OperationContract | None
    output_given: str | None = None
    output_resolved: Path | None = None
    output_layer: str | None = None  # output_layer: a layer added to a GeoPackage
    output: Flow | None = None
    checked: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Flow] = field(default_factory=dict)
    file_inputs: dict[str, tuple[str, Path]] = field(default_factory=dict)  # slot -> (given, resolved)
    input_layers: dict[str, str | None] = field(default_factory=dict)  # slot -> the layer of a file input

    def written_layer(self) -> str | None:
        """The layer this step leaves in its output: output_layer, else the one layer named after the file
        (GDAL names a new GeoPackage's single layer after the file's stem)."""
        if self.output_layer is not None or self.output_resolved is None:
            return self.output_layer
        return self.output_resolved.stem

    def writes(self, path: Path, layer: str | None) -> bool:
        """Whether this step writes ``layer`` of ``path`` (``None``: any of it). A step writing a whole file
        is taken to write whatever layer of it is read; a step adding a layer writes that layer only."""
        if self.output_resolved != path:
            return False
        return layer is None or self.output_layer is None or self.output_layer == layer


def _resolve_lenient(value: Any, outputs: Mapping[str, str]) -> Any:
    """``substitute`` for display: a reference that cannot be resolved is left as written."""
    if isinstance(value, list):
        return [_resolve_lenient(v, outputs) for v in value]
    if isinstance(value, str) and value.startswith(ESCAPED_PREFIX):
        return value[1:]
    ref = reference_of(value)
    return outputs.get(ref, value) if ref is not None else value


def _grid_facts(flow: Flow) -> dict[str, Any]:
    grid = flow.grid or {}
    return {
        "path": flow.path,
        "from_step": flow.from_step,
        "crs": flow.crs_label,
        "width": grid.get("width"),
        "height": grid.get("height"),
        "transform": grid.get("transform"),
    }


def _same_grid(a: Flow, b: Flow) -> bool:
    ga, gb = a.grid or {}, b.grid or {}
    if (ga.get("width"), ga.get("height")) != (gb.get("width"), gb.get("height")):
        return False
    if a.crs_label is not None and b.crs_label is not None and a.crs_label != b.crs_label:
        return False
    ta, tb = ga.get("transform") or [], gb.get("transform") or []
    if len(ta) != len(tb):
        return False
    return all(abs(float(x) - float(y)) <= 1e-9 * max(1.0, abs(float(y))) for x, y in zip(ta, tb, strict=True))


def dataset_slots(step: Step, contract: OperationContract) -> list[tuple[str, DatasetArgument, str]]:
    """(slot, dataset argument, path as given) for each path a step names: "input_paths[1]" for a list."""
    slots = []
    for d in contract.datasets:
        value = step.arguments.get(d.name)
        if d.multiple and isinstance(value, list):
            slots += [(f"{d.name}[{i}]", d, v) for i, v in enumerate(value) if isinstance(v, str) and v]
        elif not d.multiple and isinstance(value, str) and value:
            slots.append((d.name, d, value))
    return slots


__all__ = ["FAMILY_TYPE_NAMES", "Flow", "StepState", "dataset_slots"]
