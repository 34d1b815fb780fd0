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
        from mapsmith._compat import install_command

        # From where this MapSmith was installed: the 'mapsmith' on PyPI is another project.
        return Availability(False, reason=f"missing Python packages: {', '.join(missing)}", fix=install_command())
    return Availability(True)


# Engine distributions, and the name server_info reports each under.
VERSIONED_DISTRIBUTIONS = {
    "geopandas": "geopandas",
    "shapely": "shapely",
    "pyproj": "pyproj",
    "pyogrio": "pyogrio",
    "pyarrow": "pyarrow",
    "duckdb": "duckdb",
    "duckdb-extension-spatial": "duckdb-spatial",
    # the [raster] and [whitebox] extras' engines, when installed
    "rasterio": "rasterio",
    "exactextract": "exactextract",
    "whitebox-workflows": "whitebox-workflows",
}


def engine_versions() -> Mapping[str, str]:
    """Versions from install metadata and the wheels' data files: no engine is imported to read them.

    A manifest records the versions the engine itself reports when it runs; this is what is installed.
    """
    from mapsmith import _compat

    versions = {
        label: version
        for distribution, label in VERSIONED_DISTRIBUTIONS.items()
        if (version := _compat.version_of(distribution)) is not None
    }
    for library, read in (
        ("GEOS", _compat.geos_version),
        ("PROJ", _compat.proj_version),
        ("GDAL", _compat.gdal_version),
    ):
        found = read()
        if found is not None:
            versions[library] = found
    return versions


# What ``warm`` imports: the DuckDB paths' modules. Not GeoPandas, nor pyogrio (which imports it): with pandas that is
# 0.25 s and about 50 MB the DuckDB paths never need; the sandbox worker imports them besides, for the small-data
# calls. Not SedonaDB either (0.3-0.6 s and 88 MB, for the runs the router gives it).
WARM_MODULES = ("numpy", "pyproj", "shapely", "pyarrow.parquet", "duckdb")


def warm(environ: Mapping[str, str]) -> None:
    """Import the engines, open this process's DuckDB database with spatial loaded, and open run_sql's first
    database for the service's workspace and settings (``duckdb_spatial.prepare_spare``): 0.2-0.3 s each, paid
    once instead of in the first calls. Without a usable workspace setting, no spare: the call says why."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    from mapsmith.errors import MapSmithError
    from mapsmith.workspace import Workspace
    from mapsmith_opensource import duckdb_spatial
    from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

    duckdb_database()
    try:
        root = Workspace.from_env(environ).root
    except MapSmithError:
        return
    duckdb_spatial.prepare_spare(root, environ)
    duckdb_spatial.wait_for_spare()


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
            warm=warm,
            licence="BSD-3-Clause / MIT / LGPL (GEOS) / MIT (GDAL, PROJ, DuckDB)",
        )
    )


# The modules whose REGISTRATIONS this stack registers. Each is cheap to import: engines are
# imported inside the operation functions, never at module level (a test checks start-up imports).
OPERATION_MODULES = (
    "vector_ops",
    "describe_ops",
    "reproject_ops",
    "buffer_ops",
    "measures",
    "overlay_ops",
    "join_ops.spatial_join",
    "join_ops.spatial_join_duckdb",
    "join_ops.spatial_join_sedonadb",  # SedonaDB: file to file, or sedonadb_ops' WKB path
    "join_ops.nearest",
    "join_ops.points_in_polygons",
    "join_ops.apportion",
    "join_ops.attributes",
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
    "sql_layer_ops",  # clip_layer (points) on DuckDB, file to file
    "reproject_duckdb",  # reproject_layer (conversions) on DuckDB, file to file
    "select_duckdb",  # select_features by attribute on DuckDB, file to file
    "buffer_duckdb",  # buffer_layer of points in their own projected CRS on DuckDB, file to file
    "acquire_ops",  # fetch_dataset: in the sandbox, the one worker with a network (mapsmith.fetch)
    "overpass_ops",  # query_overpass: the same
    "stac_ops",  # stac_search, fetch_stac_asset: the same
    # SedonaDB engines, preferred when installed and eligible (see sedonadb_ops' eligibility rules)
    "sedonadb_ops",
    "sedonadb_points",
    "sedonadb_overlay",
    "sedonadb_nearest",
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
                writes_parts=reg.writes_parts,
            )
