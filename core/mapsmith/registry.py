"""What plugins hand the core: stack specs, operation implementations, dataset readers.

These are plain typed records. The core validates them on registration (see ``plugins.py``) and
the router reads them; nothing here imports an engine or touches a file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

GeometryFamily = Literal["point", "line", "polygon"]
UnavailableKind = Literal["missing", "licence_tier", "online_only", "stack_unavailable"]


@dataclass(frozen=True)
class Availability:
    """Whether a stack (or one engine of it) can run here, and if not, the fix."""

    available: bool
    reason: str | None = None
    fix: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "fix": self.fix,
            "details": dict(self.details),
        }


@dataclass(frozen=True)
class Unavailable:
    """Why an operation cannot run on a stack: one of the four kinds, each its own decision.

    ``missing``: the stack has no such tool. ``licence_tier``: it has it, this machine's licence
    level does not include it. ``online_only``: it needs an online service. ``stack_unavailable``:
    the stack itself is not installed or not usable here.
    """

    kind: UnavailableKind
    reason: str
    hint: str


@dataclass(frozen=True)
class DatasetInfo:
    """What a header read tells about a dataset; enough for preconditions and output checks."""

    path: str
    kind: Literal["vector", "raster", "table"]
    driver: str | None
    layer: str | None
    layers: tuple[str, ...]
    crs_wkt: str | None
    crs_label: str | None
    crs_is_geographic: bool | None
    feature_count: int | None
    geometry_types: tuple[str, ...]  # as the engine names them, e.g. ("Polygon", "MultiPolygon")
    bounds: tuple[float, float, float, float] | None  # in the dataset's CRS
    bounds_lonlat: tuple[float, float, float, float] | None  # the same extent in WGS 84, if known
    invalid_count: int | None = None  # only when asked for: it reads every geometry
    fields: tuple[str, ...] = ()
    # Rasters only: width, height, count, dtypes, nodata, transform (GDAL order), res, north_up,
    # area_or_point, georeferencing (every reading and the source used) and, when asked for with
    # ``validity``, per-band statistics. A plain mapping so the core reads it without an engine.
    grid: Mapping[str, Any] | None = None

    @property
    def geometry_families(self) -> frozenset[str]:
        return frozenset(geometry_family(t) for t in self.geometry_types if t)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "driver": self.driver,
            "layer": self.layer,
            "layers": list(self.layers),
            "crs": self.crs_label,
            "crs_is_geographic": self.crs_is_geographic,
            "feature_count": self.feature_count,
            "geometry_types": list(self.geometry_types),
            "bounds": list(self.bounds) if self.bounds else None,
            "bounds_lonlat": list(self.bounds_lonlat) if self.bounds_lonlat else None,
            "fields": list(self.fields),
            **({"grid": dict(self.grid)} if self.grid is not None else {}),
        }


def geometry_family(geometry_type: str) -> str:
    """Map an engine's geometry type name to point/line/polygon (or 'collection'/'unknown')."""
    name = geometry_type.replace(" ", "").replace("25D", "").rstrip("ZM").lower()
    if name.startswith("multi"):
        name = name[len("multi") :]
    return {
        "point": "point",
        "linestring": "line",
        "linearring": "line",
        "polygon": "polygon",
        "geometrycollection": "collection",
    }.get(name, "unknown")


class DatasetIO(Protocol):
    """The reader/repairer a stack provides so the core can check inputs and outputs."""

    def inspect(self, path: Path, layer: str | None = None, *, validity: bool = False) -> DatasetInfo:
        """Read the header (and, with ``validity``, count invalid geometries) of one layer."""
        ...

    def list_layers(self, path: Path) -> list[str]:
        """The layer names of a (possibly multi-layer) container."""
        ...

    def repair_geometries(self, source: Path, target: Path, layer: str | None) -> dict[str, Any]:
        """Write ``source`` to ``target`` with invalid geometries made valid; report counts."""
        ...


@dataclass(frozen=True)
class StackSpec:
    """A stack: a family of engines selected as a whole with ``MAPSMITH_STACK``."""

    name: str
    summary: str
    availability: Callable[[], Availability]
    engine_versions: Callable[[], Mapping[str, str]] = dict
    dataset_io: Callable[[], DatasetIO] | None = None
    licence: str = ""
    # Imports the stack's engines and opens the connections it keeps for the process (DuckDB's database with
    # spatial loaded), so that the first run does not pay them: ``MapSmith.warm`` calls it with the service's
    # environment, which the server runs on starting (in each sandboxed engine worker, or in a thread of its own).
    # Must not start anything that holds resources a run might not need (a JVM, a cluster's cores) unless that
    # environment asks for it (the sedona stack's MAPSMITH_SPARK_WARM=1).
    warm: Callable[[Mapping[str, str]], None] | None = None


Implementation = Callable[["RunContext"], None]


@dataclass(frozen=True)
class OperationImpl:
    """One engine's implementation of one operation on one stack."""

    operation: str
    stack: str
    engine: str
    function: Implementation
    preference: int = 0
    # Returns None when this engine can take the run, else the reason it cannot.
    eligible: Callable[[RunContext], str | None] | None = None
    # Returns None when usable on this machine, else why not (licence tier, online only ...).
    requirement: Callable[[], Unavailable | None] | None = None
    # Raises a MapSmithError when the arguments cannot work together (checks the contract cannot
    # express, such as "distance_meters only with within_distance"); called before the engine
    # starts, so a refusal leaves no failure record.
    validate: Callable[[RunContext], None] | None = None
    # Decided by the plugin host from the distribution the plugin came from and the promotion records,
    # never by the plugin: "stable" (MapSmith's own, or promoted) or "experimental".
    maturity: str = "stable"
    # The plugin's identity for the manifest (distribution, version, code_sha256, plugin), when not MapSmith's.
    origin: Mapping[str, str] | None = None
    # The promotion record that made this plugin's operation stable, when one did.
    promotion: Mapping[str, Any] | None = None
    # Whether this engine writes a folder of Parquet parts when output_path ends in ".parquet/" (the runner
    # routes such a request to these engines only, and checks after the run that a folder was written).
    writes_parts: bool = False


class RegisterStack(Protocol):
    def __call__(self, spec: StackSpec) -> None: ...


class RegisterOperation(Protocol):
    def __call__(
        self,
        implementation: Implementation,
        *,
        operation: str,
        stack: str,
        engine: str,
        preference: int = 0,
        eligible: Callable[[RunContext], str | None] | None = None,
        requirement: Callable[[], Unavailable | None] | None = None,
        contract: Path | Mapping[str, Any] | None = None,
        validate: Callable[[RunContext], None] | None = None,
        writes_parts: bool = False,
    ) -> None: ...


@dataclass(frozen=True)
class Toolbox:
    """Every operation named ``<prefix>…`` of one stack, registered by ``load`` when first needed.

    ``load(register)`` registers the operations through the same validating callback as
    ``mapsmith_register_operations``; it may register nothing (the stack is not installed here:
    the router then answers with the stack's own reason and fix). An exception from it is reported
    once and the toolbox stays empty for the life of the process.
    """

    stack: str
    prefix: str
    summary: str
    load: Callable[[RegisterOperation], None]


class RegisterToolbox(Protocol):
    def __call__(self, toolbox: Toolbox) -> None: ...
