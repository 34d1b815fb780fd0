"""clip_layer and reproject_layer inside DuckDB (reproject_layer's engine is reproject_duckdb, built on the
copy_out and the checks here), GeoParquet file to GeoParquet file: no feature of input_path
passes through Python. input_path may be a folder of plain GeoParquet parts (mapsmith.parts): DuckDB reads them
in listing order, the order GeoPandas reads the folder in, and a row's position is counted across them.

Eligible only where the answer and the record are the GeoPandas engine's (vector_ops.clip_layer,
reproject_ops.reproject_layer), byte for byte in the coordinates:

- clip_layer takes layers of single 2-D points only. For a point GEOS's intersection with the mask is the
  point itself or nothing, so the clip is a filter: a point is kept when it intersects the mask's union
  (inside or on its edge, as GEOS decides), with its coordinates as stored. DuckDB Spatial's ST_Intersects
  was measured to agree with shapely's on 2.8 million points, 0.9 million of them on or a rounding away from
  mask edges and vertices (a circle, a skewed quadrilateral, a union of overlapping shapes, a polygon with a
  hole, a multipolygon); tests/scale/test_sql_clip_reproject.py repeats a smaller draw. SedonaDB 0.5's
  ST_Intersects, asked the same of 1.6 million such points, disagreed on 32,935, so it has no clip engine.
  Lines and polygons are cut by an overlay whose new vertices, and whose re-noding by union_all, DuckDB's
  GEOS build would have to reproduce bit for bit; that was not shown, so they stay with GeoPandas. The mask
  is read, checked, aligned and unioned by the GeoPandas engine's own code (it is the small input).
- reproject_layer takes a change of CRS that is a conversion only (no datum shift, no grid: every step of
  the operation mapsmith.crs chose is a PROJ Conversion), so DuckDB's PROJ has no other operation to pick,
  and only after a probe: the data's extent, sampled on a grid, is written by the engine's own SQL and read
  back, and its coordinates must equal the chosen pyproj transformer's within ``PROBE_TOLERANCE`` units and
  its CRS the target's. Coordinates with Z are left to GeoPandas, which transforms Z too. Measured: on
  200,000 random UTM 10N points to EPSG:4326 DuckDB's coordinates equalled pyproj's bit for bit (largest
  difference 0.0; SedonaDB's too, but SedonaDB has no file-to-file reproject engine here yet).

Both refuse (as the spatial_join DuckDB engine does: join_ops.spatial_join_duckdb._geoparquet) a field
type DuckDB would write differently, a pandas index, a CRS named by a code it does not define, an integer
field holding nulls (pandas reads it as floats), and any field an earlier MapSmith run derived from the
geometry (derived.refresh keeps those true, in GeoPandas). Nothing here is hand-written geometry: DuckDB
Spatial computes, GEOS (through shapely) unions the mask, PROJ (through pyproj) chooses the operation.

What this module must never do: cut a line or polygon, move coordinates between datums, write a CRS other
than the one the GeoPandas engine writes, or report a count it did not read from the data.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith import parts
from mapsmith.crs import crs_label, parse_crs
from mapsmith_opensource import io
from mapsmith_opensource.common import align_to, engine_versions, read_input
from mapsmith_opensource.join_ops.spatial_join_duckdb import (
    DUCKDB_PREFERENCE,
    _declare_geoparquet,
    _first_invalid,
    _GeoParquet,
    _geoparquet,
    _name,
    _names_another_crs,
    _scan,
    _text,
    duckdb_database,
    set_duckdb_engine,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from pathlib import Path

    from pyproj import CRS

    from mapsmith.runner import RunContext

ENGINE = "duckdb"
# From how many input features the router prefers these engines; below, GeoPandas runs. Measured for issue 22 by
# benchmarks/bench_thresholds.py (docs/benchmarks.md, "Router thresholds"): whole MapSmith runs, a fresh process
# each, warmed as the server's engine worker is before a call (DuckDB open with spatial loaded) and GeoPandas
# imported too, the engine forced with MAPSMITH_ENGINE, interleaved, medians of 5. clip_layer on DuckDB took
# 0.08-0.09 s against GeoPandas' 0.17-0.20 s from 10 to 10,000 features and 0.14 s against 0.40 s at 100,000, with
# less peak memory; reproject_layer's figures are beside REPROJECT_MIN_ROWS. Each threshold is the smallest size
# measured; tests/docs/test_thresholds_doc.py holds it to the committed measurement. The table before (whole
# processes, CPU seconds, DuckDB's import and extension load on every run's clock, which the worker's warm-up now
# pays once) had put clip_layer's at 30,000 and reproject_layer's at 100,000.
CLIP_MIN_ROWS = 10
# Overrides both thresholds, select_duckdb's and buffer_duckdb's (benchmarks force an engine with it).
MIN_FEATURES_ENV = "MAPSMITH_DUCKDB_LAYER_MIN_FEATURES"
# A folder of parts (output_path ending in ".parquet/") is cut into parts of about this size (docs/scaling.md:
# big enough to amortise a task, small enough to retry); tests make them smaller.
PART_OPTIONS = "FILE_SIZE_BYTES '256MB'"


def part_name(number: int) -> str:
    """A written part's file name: zero-padded, so that listing order is row order (part-00002 before part-00010)."""
    return f"part-{number:05d}.parquet"


REGISTRATIONS = (
    Registration(
        "clip_layer",
        "clip_layer_duckdb",
        engine=ENGINE,
        preference=DUCKDB_PREFERENCE,
        eligible="clip_eligible",
        writes_parts=True,  # copy_out
    ),
)


# -- eligibility shared by both -----------------------------------------------------------------


def _footer_types(path: Path, geometry: str) -> list[str]:
    """The geometry types input_path's GeoParquet footer declares, over every part of a folder, sorted ([] when
    one declares none: the types are then unknown)."""
    import json

    import pyarrow.parquet as pq

    found: set[str] = set()
    for file in parts.dataset_files(path):
        geo = json.loads((pq.read_schema(file).metadata or {}).get(b"geo") or b"{}")
        declared = [str(t) for t in geo.get("columns", {}).get(geometry, {}).get("geometry_types", [])]
        if not declared:
            return []
        found.update(declared)
    return sorted(found)


def _nullable_integers(path: Path, columns: tuple[str, ...]) -> list[str]:
    """Integer fields with a null in some row group (footer statistics; unknown counts as a null): pandas
    reads them as floats, so the GeoPandas engine writes doubles where DuckDB would keep integers."""
    import pyarrow.parquet as pq
    import pyarrow.types as t

    found: list[str] = []
    keys = parts.hive_key_types(path) if parts.is_parts_folder(path) else {}
    for key, arrow in keys.items():  # an integer key is null in a __HIVE_DEFAULT_PARTITION__ subfolder
        if arrow == "int32" and key in columns:
            null = f"{key}={parts.HIVE_NULL}"
            if any(null in name.split("/") for name, _ in parts.part_members(path)):
                found.append(key)
    for meta in (pq.read_metadata(file) for file in parts.dataset_files(path)):  # every part of a folder
        schema = meta.schema.to_arrow_schema()
        for name in columns:
            if name in found or name in keys or not t.is_integer(schema.field(name).type):
                continue
            index = schema.get_field_index(name)
            for group in range(meta.num_row_groups):
                stats = meta.row_group(group).column(index).statistics
                if stats is None or not stats.has_null_count or stats.null_count:
                    found.append(name)
                    break
    return [name for name in columns if name in found]


def min_features(ctx: RunContext, default: int) -> int:
    """The size threshold of this run: MAPSMITH_DUCKDB_LAYER_MIN_FEATURES when set (a whole number >= 0), else
    ``default``."""
    from mapsmith.errors import ConfigurationError

    text = (ctx.environ.get(MIN_FEATURES_ENV) or "").strip()  # the service's environment, as MAPSMITH_STACK
    if not text:
        return default
    value = int(text.replace("_", "")) if text.replace("_", "").isdigit() else -1
    if value < 0:
        raise ConfigurationError(
            f"{MIN_FEATURES_ENV}={text!r} is not a whole number of features",
            code="DUCKDB_MIN_FEATURES_INVALID",
            evidence={"variable": MIN_FEATURES_ENV, "value": text},
            hint=f"set {MIN_FEATURES_ENV} to a whole number such as 500000, or unset it for the measured defaults",
        )
    return value


def _layer_problem(ctx: RunContext, operation: str, min_rows: int) -> tuple[str | None, _GeoParquet | None]:
    """Why the DuckDB engine cannot take input_path for ``operation`` (or None), and the layer as read."""
    path = ctx.paths["input_path"]
    info = ctx.inputs["input_path"]
    if not parts.is_parts_folder(path) and (not io.is_parquet(path) or not path.is_file()):
        return f"input_path is not one GeoParquet file ({info.driver}); the DuckDB {operation} works file to file", None
    given = str(ctx.arguments.get("output_path"))
    folder_out = parts.is_folder_output(given)
    if ctx.output_path is None or not io.is_parquet(ctx.output_path) or (given.endswith("/") and not folder_out):
        writes = "GeoParquet (.parquet, or parts: .parquet/)"
        return f"output_path is {given!r}; the DuckDB {operation} writes {writes}", None
    if info.crs_wkt is None:
        return f"the DuckDB {operation} takes only layers whose CRS is known", None
    from mapsmith.router import named_by_operator

    rows = info.feature_count or 0
    min_rows = min_features(ctx, min_rows)
    # a folder of parts is written by this engine alone on the stack (route_to_parts_writers): no size to weigh
    if rows < min_rows and not named_by_operator(ctx, "duckdb") and not folder_out:
        return f"input_path has {rows:,} features, fewer than the {min_rows:,} from which DuckDB is preferred", None
    derived = getattr(ctx, "derived", None)
    carried = [f.name for f in derived.in_output(info.fields)] if derived is not None else []
    if carried:
        return (
            f"input_path carries fields an earlier MapSmith run derived from the geometry ({', '.join(carried)}); the "
            "GeoPandas engine keeps them true of the geometry written",
            None,
        )
    layer = _geoparquet(path, "input_path")
    if layer.problem:
        return layer.problem, layer
    crs = parse_crs(info.crs_wkt)
    if _names_another_crs(layer.crs_id, crs):
        return (
            f"input_path's PROJJSON CRS names {layer.crs_id} but defines another CRS; DuckDB would read it as "
            f"{layer.crs_id}",
            layer,
        )
    nullable = _nullable_integers(path, tuple(c for c in layer.columns if c != layer.geometry))
    if nullable:
        return (
            f"input_path's integer fields {nullable} hold nulls, which the GeoPandas engine reads and writes as "
            "floats and DuckDB would keep as integers",
            layer,
        )
    return None, layer


@cache
def one_thread_database() -> Any:
    """A DuckDB database of this process with one thread: for buffer_duckdb's large COPYs, and for every folder of
    parts these engines write (``copy_out``)."""
    import os

    from mapsmith_opensource import duckdb_spatial

    database = duckdb_spatial.engine_connect(os.environ)
    database.execute("SET threads = 1")
    return database


def copy_out(ctx: RunContext, con: Any, select: str, layer: _GeoParquet, tables: dict[str, Any] | None = None) -> int:
    """COPY ``select`` to the run's output, the rows written: one GeoParquet file on ``con``, or, for an
    output_path ending in ``.parquet/``, a folder of parts of the size PART_OPTIONS sets, written by one DuckDB thread
    (with two, DuckDB rotated the files out of row order: measured on 5,000,000 rows) and named part-00000 ...
    so that listing order is row order. A file or part written without rows gets the GeoParquet metadata DuckDB
    leaves out then, from ``layer`` (the geometry column and the CRS the output declares). ``tables``: the Arrow
    tables ``select`` reads, registered on ``con`` by the caller and here on the writer's own cursor."""
    target = ctx.temp_output
    assert target is not None
    if not parts.is_folder_output(str(ctx.arguments.get("output_path"))):
        (written,) = con.execute(f"COPY ({select}) TO {_text(str(target))} (FORMAT parquet)").fetchone()
        return _declare_geoparquet(target, layer) if not written else int(written)
    with one_thread_database().cursor() as writer:
        for name, table in (tables or {}).items():
            writer.register(name, table)
        (written,) = writer.execute(
            f"COPY ({select}) TO {_text(str(target))} (FORMAT parquet, {PART_OPTIONS}, FILENAME_PATTERN 'part-{{i}}')"
        ).fetchone()
    numbered = sorted((int(f.stem.split("-", 1)[1]), f) for f in target.glob("part-*.parquet"))
    for n, file in numbered:
        renamed = file.with_name(part_name(n))
        file.rename(renamed)
        if not written:
            _declare_geoparquet(renamed, layer)
    ctx.parameters["x-mapsmith:output_parts"] = len(numbered)
    return int(written)


def _set_engine(ctx: RunContext) -> None:
    set_duckdb_engine(ctx, ENGINE)


def _inspect_input(con: Any, layer: _GeoParquet) -> tuple[Any, list[tuple[int, str]]]:
    """input_path's validity scan in DuckDB, with the first invalid rows and GEOS's reasons when there are any."""
    scan = _scan(con, layer)
    return scan, _first_invalid(con, layer) if scan.invalid else []


def _record_input_validity(ctx: RunContext, inspected: tuple[Any, list[tuple[int, str]]]) -> Any:
    """input_path's x-mapsmith:input_geometry_valid check, as read_input records it; the scan."""
    from mapsmith_opensource.common import record_input_validity

    scan, invalid = inspected
    record_input_validity(
        ctx, "input_path", rows=scan.rows, invalid_count=scan.invalid, missing_count=scan.missing, invalid=invalid
    )
    return scan


# -- clip_layer ---------------------------------------------------------------------------------


def points_layer_problem(ctx: RunContext, operation: str, min_rows: int, why: str) -> str | None:
    """_layer_problem, then a footer declaring single 2-D points only; ``why`` ends the reason given for others."""
    problem, layer = _layer_problem(ctx, operation, min_rows)
    if problem is not None:
        return problem
    assert layer is not None
    types = _footer_types(layer.path, layer.geometry)
    if types != ["Point"]:
        declared = ", ".join(types) if types else "no geometry types"
        return f"input_path's footer declares {declared}; the DuckDB {operation} takes single 2-D points only {why}"
    return None


def clip_eligible(ctx: RunContext) -> str | None:
    """Why DuckDB cannot take this clip_layer, or None when it can."""
    return points_layer_problem(
        ctx,
        "clip_layer",
        CLIP_MIN_ROWS,
        "(a point is kept or not, never cut); lines and polygons are cut by the GeoPandas engine",
    )


# The mask's union goes into the SQL as hex WKB up to this many bytes of WKB: DuckDB imports pandas to register an
# Arrow table (0.25 s of a fresh process, tests/scale/test_engines_without_pandas.py). A larger union is registered.
MASK_LITERAL_MAX_BYTES = 16 * 1024 * 1024


def _mask_region(ctx: RunContext, crs: CRS) -> bytes:
    """mask_path's union, as WKB: read, checked and aligned by the GeoPandas engine's code and unioned as it unions
    it, or, for one WKB GeoParquet file already in input_path's CRS, the same read by pyarrow (``_mask_geoparquet``).
    """
    import shapely

    geoms = _mask_geoparquet(ctx, crs)
    if geoms is None:
        ctx.engine_components.update(engine_versions())  # the GeoPandas stack reads, aligns and unions the mask
        geoms = align_to(ctx, read_input(ctx, "mask_path"), crs, "mask_path").geometry.values
    return bytes(shapely.to_wkb(shapely.union_all(geoms)))


def _mask_geoparquet(ctx: RunContext, crs: CRS) -> Any:
    """mask_path's geometries read without GeoPandas (``layer_facts.read_geometries``: pyarrow and shapely) when it is
    one GeoParquet file whose CRS is input_path's (so nothing is aligned): the geometries gpd.read_parquet gives, in
    file order, their validity recorded as read_input records it. None for anything else: read_input reads it.
    tests/scale/test_clip_mask_reads.py holds the two reads to the same output and records."""
    import pyarrow as pa
    import shapely

    from mapsmith_opensource.common import report_geometry_validity
    from mapsmith_opensource.layer_facts import read_geometries

    path, info = ctx.paths["mask_path"], ctx.inputs["mask_path"]
    if path.is_dir() or not io.is_parquet(path) or info.crs_wkt is None:
        return None
    if not parse_crs(info.crs_wkt).equals(crs, ignore_axis_order=True):
        return None  # align_to moves it, with its checks and record
    geoms = read_geometries(path)
    report_geometry_validity(ctx, geoms, "mask_path")
    ctx.engine_components.update(
        {"pyarrow": pa.__version__, "shapely": shapely.__version__, "GEOS": shapely.geos_version_string}
    )
    return geoms


def clip_layer_duckdb(ctx: RunContext) -> None:
    """clip_layer of points inside DuckDB: a filter on ST_Intersects with the mask's union, file to file."""
    import uuid

    from mapsmith.runner import OutputStats

    _set_engine(ctx)
    layer = _geoparquet(ctx.paths["input_path"], "input_path")
    info = ctx.inputs["input_path"]
    crs = parse_crs(info.crs_wkt)
    assert ctx.temp_output is not None
    con = duckdb_database().cursor()  # a cursor of its own: its registered table is seen by no other run
    try:
        # Sequential: the GeoPandas engine records input_path's validity before mask_path's (read next).
        scan = _record_input_validity(ctx, _inspect_input(con, layer))
        region = _mask_region(ctx, crs)
        aligned = "mask_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {})
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs),
                "reason": "clipped in input_path's CRS, so the input's coordinates are written unchanged"
                + ("; the mask was transformed to it (see x-mapsmith:alignment)" if aligned else ""),
            }
        )
        tables: dict[str, Any] | None = None
        if len(region) <= MASK_LITERAL_MAX_BYTES:
            mask = f"ST_GeomFromHEXWKB('{region.hex()}')"
        else:
            import pyarrow as pa

            table = f"mapsmith_mask_{uuid.uuid4().hex}"
            tables = {table: pa.table({"region": pa.array([region], type=pa.binary())})}
            con.register(table, tables[table])
            mask = f"(SELECT ST_GeomFromWKB(region) FROM {table})"
        g = f"{_name(layer.geometry)}::GEOMETRY"  # the CRS dropped for the test only: the mask is aligned
        # The geometry column is written as read (its CRS with it); DuckDB keeps the file's row order.
        written = copy_out(
            ctx,
            con,
            f"SELECT {', '.join(_name(c) for c in layer.columns)} FROM {parts.parquet_source(layer.path)} "
            f"WHERE ST_Intersects({g}, {mask})",
            layer,
            tables,
        )
    finally:
        con.close()
    outside = scan.rows - written
    ctx.notes.append(
        f"{info.feature_count} input features: {written} written (clipped to the mask), {outside} lie wholly "
        "outside the mask, 0 only touch it (their intersection has a lower dimension)"
    )
    ctx.parameters["x-mapsmith:features_outside_mask"] = outside
    ctx.parameters["x-mapsmith:lower_dimension_fragments_dropped"] = 0
    # A point kept intersects the mask, so its coordinates are finite: valid. With invalid points in the
    # input the runner counts the output itself rather than rely on that.
    if scan.invalid == 0:
        ctx.output_stats = OutputStats(
            feature_count=written, invalid_count=0, geometry_types=("Point",) if written else ()
        )
