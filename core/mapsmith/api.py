"""The public, stable API of MapSmith for operation plugins: every name a plugin may import, and nothing else.

A plugin imports from here (``from mapsmith.api import hookimpl, InputError``) and from nowhere else in
``mapsmith``: every other module is private and may change in any release. The names below keep their
meaning and signature within a major version; a name that must change is first kept beside its successor
for one minor release with a ``DeprecationWarning``. ``docs/plugins.md`` documents each name, and
``tests/pluginkit/test_api.py`` fails when this list and the page disagree.

This module must never import an engine (the server imports every plugin at start, and plugins import
this), and never grow a name that is not documented in ``docs/plugins.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith.app import MapSmith
from mapsmith.contracts import UNIT_SUFFIXES, OperationContract
from mapsmith.crs import crs_label, linear_unit_metres, parse_crs
from mapsmith.errors import (
    ArgumentError,
    ContractError,
    CRSError,
    CRSRequired,
    EngineError,
    GeometryTypeRefused,
    InputError,
    MapSmithError,
    OutputError,
    PluginError,
    VerificationFailed,
)
from mapsmith.hookspecs import hookimpl
from mapsmith.provenance.validator import validate_manifest
from mapsmith.registry import (
    Availability,
    DatasetInfo,
    RegisterOperation,
    RegisterStack,
    RegisterToolbox,
    StackSpec,
    Toolbox,
    Unavailable,
)
from mapsmith.runner import OperationResult, RunContext
from mapsmith.verify import Check

if TYPE_CHECKING:
    from pathlib import Path

    import geopandas


def read_layer(path: Path, layer: str | None = None) -> geopandas.GeoDataFrame:
    """One vector layer (GeoPackage, GeoJSON, shapefile, FlatGeobuf, GeoParquet …) as MapSmith's own operations
    read it: the same CRS checks and shapefile ring handling, and a structured ``InputError`` when unreadable."""
    from mapsmith_opensource.io import read_layer as read  # the opensource stack ships with every install

    return read(path, layer)


def write_layer(gdf: geopandas.GeoDataFrame, path: Path, layer: str | None = None) -> None:
    """Write ``gdf`` as MapSmith's own operations do: byte-identical for identical data (the GeoPackage clock is
    pinned, the layer is named after the final output rather than the temporary file), so ``plugin check``'s
    determinism rule and replay can compare runs. Write to ``ctx.temp_output``; the runner renames it."""
    from mapsmith_opensource.io import write_layer as write

    write(gdf, path, layer)


__all__ = [
    # hooks (the specs are in mapsmith.hookspecs; implement them with this marker)
    "hookimpl",
    # what a hook is handed and registers
    "RegisterOperation",
    "RegisterStack",
    "RegisterToolbox",
    "StackSpec",
    "Availability",
    "Unavailable",
    "Toolbox",
    "OperationContract",
    "UNIT_SUFFIXES",
    # what an implementation reads and writes
    "RunContext",
    "DatasetInfo",
    "Check",
    "crs_label",
    "parse_crs",
    "linear_unit_metres",
    "read_layer",
    "write_layer",
    # refusals
    "MapSmithError",
    "ArgumentError",
    "InputError",
    "CRSRequired",
    "CRSError",
    "GeometryTypeRefused",
    "OutputError",
    "EngineError",
    "VerificationFailed",
    "ContractError",
    "PluginError",
    # testing a plugin the way the server runs it
    "MapSmith",
    "OperationResult",
    "validate_manifest",
]
