"""buffer_layer of points inside DuckDB, GeoParquet file to GeoParquet file: no buffer passes through Python.
A folder of plain parts is read as sql_layer_ops reads it; the measure is then keyed to every part's bytes.

buffer_ops decides where a metre is a metre; this engine takes the case whose answer is DuckDB's ST_Buffer on the
file as it lies: single 2-D points in a projected CRS that buffer_ops would keep (``single_candidate``), whose scale,
measured where every buffer will lie (buffer_ops' ``scale_error`` over the same footprints), is within
BUFFER_TOLERANCE of true. The points are read once, as coordinates only, for that measure (while choosing the
engine, so that a layer out of tolerance goes to the GeoPandas engine with the reason in the router's record); the
buffers are then made and written by one COPY in file order: ST_Buffer is GEOS's buffer, as shapely's, and for a
point it gives the same polygon, byte for byte (tests/scale/test_buffer_duckdb.py compares the WKB).

Everything else stays with the GeoPandas engine: lines and polygons (their buffers are GEOS's longest computation,
and DuckDB's GEOS and shapely's are different builds that need not agree to the last bit), a layer in lon/lat or
beyond tolerance (local planes, the antimeridian), and missing, empty, 3-D or non-finite points (buffer_ops records
and words those). Written by hand because no library chooses between these engines; the buffering is DuckDB's.

What this module must never do: buffer in a CRS other than buffer_ops would, write a buffer whose distance error
buffer_ops' measure has not bounded, or write a field, a row order or a CRS other than the GeoPandas engine's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from mapsmith import parts
from mapsmith.crs import parse_crs
from mapsmith_opensource.join_ops.spatial_join_duckdb import (
    DUCKDB_PREFERENCE,
    _geoparquet,
    _name,
    duckdb_database,
)
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.sql_layer_ops import ENGINE, _set_engine, copy_out, one_thread_database, points_layer_problem

if TYPE_CHECKING:
    from pathlib import Path

    from mapsmith.runner import RunContext

# From how many input points the router prefers this engine; below, GeoPandas runs. Measured for issue 22 on this
# machine while a test suite ran beside it (load average 3-9, so CPU seconds decide): whole MapSmith runs, a fresh
# process each (spawn to exit, start-up, checks, digests and manifest included), benchmarks/scale_data.py's points
# (EPSG:32610 GeoParquet), distance_meters=50 with the default 16 segments, the engine forced with
# MAPSMITH_DUCKDB_LAYER_MIN_FEATURES (0 or 10**12), interleaved, medians of 3 (2 at 1M), CPU seconds and peak RSS
# of the process, DuckDB / GeoPandas:
#   1,000     2.03 / 2.46 s,   205 /   284 MiB      100,000     6.62 / 6.18 s,   696 /   712 MiB
#   10,000    2.13 / 2.89 s,   234 /   361 MiB      1,000,000  44.79 / 44.33 s, 2,903 / 4,521 MiB
# GEOS's buffer is most of the work on either engine; DuckDB saves GeoPandas' import on small layers and holds no
# buffer in Python on large ones (a third less memory at 1M; with the one-thread COPY below, bench_goals at 1M
# measured 0.77 GiB against the GeoPandas path's 4.40), so it is preferred from the smallest size measured.
# benchmarks/bench_thresholds.py measured smaller sizes since (docs/benchmarks.md, "Router thresholds": MapSmith
# warmed as the server's worker is, GeoPandas imported, medians of 5): DuckDB 0.09-0.11 s against GeoPandas'
# 0.17-0.20 s from 10 to 1,000 points, 0.26 s against 0.38 s at 10,000, even at 100,000 (1.78 s against 1.83 s);
# tests/docs/test_thresholds_doc.py holds the constant to that measurement.
BUFFER_MIN_ROWS = 10
# From how many points the COPY runs on a database of its own with one thread. DuckDB keeps a parallel COPY in file
# order by holding finished batches until their turn: on 1,000,000 points (50 m, 16 segments, 706 MB written) two
# threads took 18.8-20.1 s and 2.6 GiB, one thread 20.0-20.7 s and 0.57 GiB (the raw COPY alone, quiet machine, two
# runs each). Below this size the shared database serves (a second one costs 0.3 s to load spatial into).
ONE_THREAD_FROM = 100_000

REGISTRATIONS = (
    Registration(
        "buffer_layer",
        "buffer_layer_duckdb",
        engine=ENGINE,
        preference=DUCKDB_PREFERENCE,
        eligible="buffer_eligible",
        writes_parts=True,  # sql_layer_ops.copy_out
    ),
)


@dataclass(frozen=True)
class _Measured:
    """The points of input_path as buffer_ops would measure them: how many, and the largest scale error over
    their buffers, or why DuckDB does not buffer them."""

    rows: int
    error: float | None
    problem: str | None


def _points(path: Path, geometry: str) -> tuple[Any, str | None]:
    """The points' coordinates (n x 2) in file order, read by DuckDB (no geometry is built in Python), or why they
    are not all finite single 2-D points."""
    import duckdb
    import numpy as np

    g = f"{_name(geometry)}::GEOMETRY"
    source = parts.parquet_source(path)
    with duckdb_database().cursor() as con:
        try:
            missing, other = con.execute(
                f"SELECT count(*) FILTER (WHERE {g} IS NULL OR ST_IsEmpty({g})), "
                f"count(*) FILTER (WHERE ST_GeometryType({g}) <> 'POINT' OR ST_HasZ({g}) OR ST_HasM({g})) "
                f"FROM {source}"
            ).fetchone()
            if missing:
                return None, "input_path has missing or empty geometries, which the GeoPandas engine reads and records"
            if other:
                return None, "input_path holds geometries other than single 2-D points, despite its footer"
            found = con.execute(f"SELECT ST_X({g}) AS x, ST_Y({g}) AS y FROM {source}").fetchnumpy()
        except duckdb.Error as exc:  # a geometry DuckDB's reader refuses: the GeoPandas engine reads it, or says why
            return None, f"DuckDB could not read input_path's points ({type(exc).__name__})"
    coords = np.column_stack([np.asarray(found["x"], dtype=float), np.asarray(found["y"], dtype=float)])
    if not np.isfinite(coords).all():
        return None, "input_path has points with non-finite coordinates (invalid), which the GeoPandas engine names"
    return coords, None


@lru_cache(maxsize=4)
def _measure(
    path: str, stamp: tuple[tuple[str, int, int], ...], geometry: str, crs_wkt: str, distance: float
) -> _Measured:
    """The measure behind both eligibility and the run (kept for the run: reading a million points costs a
    second); ``stamp`` (each file's name, size and mtime_ns: the file, or a folder's parts) keys it to the bytes."""
    from pathlib import Path

    import numpy as np
    from pyproj import Transformer

    from mapsmith_opensource.buffer_local import footprints_of
    from mapsmith_opensource.buffer_ops import scale_error

    coords, problem = _points(Path(path), geometry)
    if problem is not None:
        return _Measured(0, None, problem)
    source = parse_crs(crs_wkt)
    geodetic = source.geodetic_crs
    geod = geodetic.get_geod()
    # as buffer_ops._locate places a projected layer's points: converted to its own geodetic CRS, one per feature
    x, y = Transformer.from_crs(source, geodetic, always_xy=True).transform(coords[:, 0], coords[:, 1])
    n = len(coords)
    footprints = footprints_of(np.column_stack([x, y]), np.arange(n), n, geod)
    return _Measured(n, scale_error(source, footprints, geod, distance), None)


def _measured(ctx: RunContext) -> _Measured:
    path = ctx.paths["input_path"]
    stamp = tuple((str(f), (s := f.stat()).st_size, s.st_mtime_ns) for f in parts.dataset_files(path))
    layer = _geoparquet(path, "input_path")
    crs_wkt = ctx.inputs["input_path"].crs_wkt
    assert crs_wkt is not None  # _layer_problem refuses a layer without one
    distance = float(ctx.arguments["distance_meters"])
    return _measure(str(path), stamp, layer.geometry, crs_wkt, distance)


def buffer_eligible(ctx: RunContext) -> str | None:
    """Why DuckDB cannot take this buffer_layer, or None when it can."""
    from mapsmith_opensource.buffer_ops import BUFFER_TOLERANCE, single_candidate

    why = "(GEOS builds differ on the buffers of lines and polygons, which the GeoPandas engine makes)"
    problem = points_layer_problem(ctx, "buffer_layer", BUFFER_MIN_ROWS, why)
    if problem is not None:
        return problem
    info = ctx.inputs["input_path"]
    source = parse_crs(info.crs_wkt)
    if info.bounds_lonlat is None or source.geodetic_crs is None or source.is_geographic:
        return "input_path is not in a projected CRS placed on the Earth; the GeoPandas engine chooses where to buffer"
    candidate = single_candidate(ctx, source)
    if candidate is None or not candidate.equals(source):
        return (
            "input_path's CRS is not true enough to scale at the data to buffer in its own units; the GeoPandas "
            "engine buffers it in another projection"
        )
    measured = _measured(ctx)
    if measured.problem is not None:
        return measured.problem
    assert measured.error is not None
    if not measured.error <= BUFFER_TOLERANCE:
        return (
            f"input_path's CRS is off true scale by up to {measured.error:.3%} where the buffers lie (tolerance "
            f"{BUFFER_TOLERANCE:.1%}); the GeoPandas engine buffers those features in local planes"
        )
    return None


def buffer_layer_duckdb(ctx: RunContext) -> None:
    """buffer_layer of points inside DuckDB: ST_Buffer on every row, file to file, in the layer's own units."""
    from mapsmith_opensource.buffer_ops import single_projection_record
    from mapsmith_opensource.common import own_metric_unit, record_input_validity

    _set_engine(ctx)
    distance = float(ctx.arguments["distance_meters"])
    segments = int(ctx.arguments["segments_per_quarter_circle"])
    layer = _geoparquet(ctx.paths["input_path"], "input_path")
    measured = _measured(ctx)
    assert measured.problem is None and measured.error is not None  # buffer_eligible took the run on it
    # Every point was read and found present, 2-D and finite: valid, as the GeoPandas engine's read records it.
    record_input_validity(ctx, "input_path", rows=measured.rows, invalid_count=0, missing_count=0, invalid=[])
    source = parse_crs(ctx.inputs["input_path"].crs_wkt)
    unit = own_metric_unit(ctx, source, "buffered")
    assert unit is not None  # buffer_eligible checked that to_metric keeps the layer's CRS
    units = distance / unit
    buffered = f"ST_Buffer({_name(layer.geometry)}, CAST({units!r} AS DOUBLE), {segments})"
    columns = ", ".join(f"{buffered} AS {_name(c)}" if c == layer.geometry else _name(c) for c in layer.columns)
    assert ctx.temp_output is not None
    database = one_thread_database() if measured.rows >= ONE_THREAD_FROM else duckdb_database()
    with database.cursor() as con:
        # DuckDB keeps the file's row order (preserve_insertion_order) and the column's CRS through ST_Buffer.
        written = copy_out(ctx, con, f"SELECT {columns} FROM {parts.parquet_source(layer.path)}", layer)
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
    ctx.crs_decisions["x-mapsmith:buffer_projection"] = single_projection_record(measured.error)
    # The runner counts the written buffers' validity and types itself (verify.facts, in DuckDB): a buffer of a
    # valid point is one polygon, but that is checked, not assumed. ``written`` is at least 1: an empty layer has
    # no extent, and buffer_eligible leaves it to the GeoPandas engine.
    assert written
