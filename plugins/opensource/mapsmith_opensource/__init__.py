"""The opensource stack: GeoPandas, Shapely, pyogrio, pyproj and DuckDB Spatial.

The default stack, and the dataset reader every other stack falls back on. Registered through the
``mapsmith`` entry-point group like any third-party plugin. Engines are imported only when an
operation runs or availability is asked, never when this module is imported.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, RegisterOperation, RegisterStack, StackSpec

STACK = "opensource"
REQUIRED_MODULES = ("geopandas", "shapely", "pyproj", "pyogrio", "pyarrow", "duckdb", "duckdb_extension_spatial")


def availability() -> Availability:
    missing = [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return Availability(
            False,
            reason=f"missing Python packages: {', '.join(missing)}",
            fix="pip install --force-reinstall mapsmith",
        )
    return Availability(True)


def engine_versions() -> Mapping[str, str]:
    from mapsmith_opensource import duckdb_spatial
    from mapsmith_opensource.common import engine_versions as vector_versions

    return {**vector_versions(), **duckdb_spatial.versions()}


def dataset_io() -> object:
    from mapsmith_opensource.io import OpenSourceIO

    return OpenSourceIO()


@hookimpl
def mapsmith_register_stacks(register: RegisterStack) -> None:
    register(
        StackSpec(
            name=STACK,
            summary="GeoPandas, Shapely, pyogrio (GDAL), pyproj (PROJ) and DuckDB Spatial, in process",
            availability=availability,
            engine_versions=engine_versions,
            dataset_io=dataset_io,  # type: ignore[arg-type]
            licence="BSD-3-Clause / MIT / LGPL (GEOS) / MIT (GDAL, PROJ, DuckDB)",
        )
    )


# The modules whose REGISTRATIONS this stack registers. Each is cheap to import: engines are
# imported inside the operation functions, never at module level (a test checks start-up imports).
OPERATION_MODULES = (
    "vector_ops",
    "overlay_ops",
    "join_ops",
    "geometry_ops",
    "select_ops",
    "crs_ops",
    "raster_ops",
    "zonal_ops",
    "sample_ops",
    "convert_ops",
    "terrain_ops",
    "hydrology_ops",
    "sql_ops",
    "sedonadb_ops",  # SedonaDB engines, preferred when installed and eligible (see its eligibility rules)
)


@hookimpl
def mapsmith_register_operations(register: RegisterOperation) -> None:
    import importlib

    from mapsmith_opensource import extras

    for module_name in OPERATION_MODULES:
        module = importlib.import_module(f"mapsmith_opensource.{module_name}")
        for reg in module.REGISTRATIONS:
            register(
                getattr(module, reg.function),
                operation=reg.operation,
                stack=STACK,
                engine=reg.engine,
                preference=reg.preference,
                eligible=getattr(module, reg.eligible) if reg.eligible else None,
                validate=getattr(module, reg.validate) if reg.validate else None,
                requirement=getattr(extras, reg.requirement) if reg.requirement else None,
            )
