"""SedonaDB engines for the heavy vector work, and what they share: eligibility, the size thresholds,
one SedonaDB context per process, geometries handed over as WKB views, and the pair search.

SedonaDB (Apache Sedona's single-machine engine, the ``[sedona]`` extra) runs on one of two paths,
named in the manifest's notes:

- direct (count_in_polygons and summarize_points_in_polygons with points_path in GeoParquet): SedonaDB
  reads points_path itself, counts its null, empty and invalid geometries and finds the (polygon,
  point) pairs, so the points never become a GeoDataFrame -- only the pairs (and a field's value per
  pair) come back, as Arrow. The polygons are read, checked and written by the GeoPandas engine's code;
  the statistics are computed from the pairs with the same arithmetic as join_ops.points_in_polygons.
- file to file (spatial_join with both inputs and the output in GeoParquet, join_ops.spatial_join_sedonadb):
  SedonaDB reads both files, counts their validity, joins, orders and writes the output itself.
- WKB (everything else): the GeoPandas engine's code in join_ops reads, checks, aligns, measures,
  renames, orders, counts and writes; SedonaDB only finds the matching pairs of geometries handed to it
  as WKB.

Either way the results equal the GeoPandas engine's (tests/vector/test_engine_parity.py). The engines:

- this module: spatial_join's WKB path; ``join_ops.spatial_join_sedonadb`` registers spatial_join and runs
  its file-to-file path
- ``sedonadb_points``: count_in_polygons and summarize_points_in_polygons (direct or WKB path)
- ``sedonadb_overlay``: dissolve_layer (SedonaDB unions each group with ST_UnaryUnion, not
  ST_Union_Agg) and overlay_layers with how='intersection' (pairs and ST_Intersection; the other modes
  are geopandas.overlay's own piecing, not built here); overlay_ops' code does the rest. The intersection
  of two GeoParquet files runs file to file (``sedonadb_overlay_files``: SedonaDB reads, cuts and writes)
- ``sedonadb_nearest``: nearest_join (the planar nearest from exact distance joins over a widening
  radius; ST_KNN measures from centroids where a geometry is not a point, so it is not used)

The router tries SedonaDB before DuckDB and GeoPandas (preference 40 > 30 > 20), and each engine's
``*_eligible`` passes it over -- with the reason, which the manifest's
``x-mapsmith:engine_choice.passed_over`` keeps -- when sedonadb is not installed, when a CRS is
unknown or the two differ, or when the inputs are too small to gain from it (DIRECT_MIN_FEATURES,
join_ops.spatial_join_sedonadb.FILE_MIN_FEATURES; the WKB path, never measured to gain, runs only when
MAPSMITH_SEDONADB_MIN_FEATURES asks). This is an
``eligible`` check, not an extras ``requirement``: a missing requirement drops an engine silently, and
a data engineer asking "why did GeoPandas run?" should find "sedonadb is not installed" in the manifest.

None of these modules may import sedonadb when imported (start-up stays fast and sedonadb is optional).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mapsmith_sedona
from mapsmith.crsdeclared import strict_json_loads
from mapsmith_opensource import engine_memory
from mapsmith_opensource.common import engine_versions
from mapsmith_opensource.join_ops import spatial_join as spatial_join_ops
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    import numpy as np

    from mapsmith.runner import RunContext


ENGINE = "sedonadb"
SEDONADB_PREFERENCE = (
    40  # above DuckDB (join_ops.spatial_join_duckdb.DUCKDB_PREFERENCE, 30) and GeoPandas (20 or default 0)
)
# import name -> the distribution that provides it (the sedona stack's own table: one list of what
# SedonaDB needs), so the reason names what to install
SEDONADB_MODULES = mapsmith_sedona.SEDONADB_MODULES
SEDONADB_FIX = mapsmith_sedona.SEDONADB_FIX
# From how many features in the larger input SedonaDB is preferred, by path; None: never by default.
# benchmarks/bench_scale.py (docs/benchmarks.md, "The same data through MapSmith's operations"): whole
# MapSmith runs, one fresh process each, 10,000 polygons, 2 shared cores.
# - The direct path (count_in_polygons and summarize_points_in_polygons with points in GeoParquet) was
#   faster than GeoPandas at every size measured and used less memory (count_in_polygons: 5.1 s against
#   7.2 s at 1M points, 18.3 s / 2.2 GiB against 30.0 s / 4.3 GiB at 10M, 43.7 s / 5.6 GiB against
#   76.6 s / 12.6 GiB at 30M), so it was preferred from 1,000,000 features. Once it grouped the matched points
#   in one inner join (points_in_polygons_sql.grouped_sql), measured again for issue 22: MapSmith(env).run, work
#   after warm(), the engine named by MAPSMITH_ENGINE, 10,000 overlapping zones, three interleaved pairs, load
#   0.7-5.6, work / process wall / peak RSS (/usr/bin/time): count_in_polygons at 100,000 points GeoPandas
#   0.71-0.79 s, 1.76-1.92 s, 365-367 MiB against SedonaDB 0.78-0.87 s, 1.92-2.17 s, 478-484 MiB; at 300,000
#   GeoPandas 1.15-1.40 s, 2.14-2.72 s, 438-450 MiB against SedonaDB 0.92-1.02 s, 2.02-2.27 s, 504-509 MiB;
#   summarize_points_in_polygons at 300,000 GeoPandas 1.22-1.33 s, 2.23-2.43 s, 441-452 MiB against SedonaDB
#   0.93-0.97 s, 2.01-2.10 s, 544-567 MiB: preferred from 300,000 features.
# - The WKB path (spatial_join not file to file; points not in GeoParquet) and dissolve_layer's union were
#   never measured to gain: spatial_join took 6.7 s against GeoPandas' 6.0 s and DuckDB's 4.5 s at 1M, 44.3 s
#   against 44.9 s and 16.0 s at 10M, 135.4 s against 133.1 s and 51.9 s at 30M. dissolve_layer on
#   benchmarks/goal_ops' 100,000 parcels by band (46 groups), whole MapSmith runs through the Python API, two
#   interleaved pairs, load average 4.7-5.1: SedonaDB 3.95 / 4.17 CPU s and 429 MiB against GeoPandas 3.88 /
#   3.92 CPU s and 290 MiB.
#   They run only when MAPSMITH_SEDONADB_MIN_FEATURES sets a threshold. spatial_join's file-to-file path has
#   its own threshold, measured: join_ops.spatial_join_sedonadb.FILE_MIN_FEATURES.
# - overlay_layers' intersection and nearest_join's planar search, measured for issue 22: MapSmith(env).run on
#   benchmarks/goal_ops' inputs (scale_data.make_inputs: parcels, 10,000 zones; points, 2,000 sites), one fresh
#   process per run, the engine named by MAPSMITH_ENGINE, two interleaved pairs, load average 0.6-1.1, run time and
#   peak RSS (/usr/bin/time). overlay_layers (how=intersection), parcels x zones: 10,000 parcels GeoPandas 1.43 /
#   1.38 s, 309 MiB against SedonaDB 1.45 / 1.51 s, 427 MiB; 100,000 GeoPandas 3.66 / 3.68 s, 480 MiB against
#   3.08 / 3.27 s, 605 MiB; 300,000 GeoPandas 7.53 / 7.20 s, 834 MiB against 5.87 / 6.26 s, 977 MiB: preferred
#   from 100,000 features. nearest_join, 1,000,000 points to 2,000 sites: GeoPandas 6.34 / 5.37 s, 795 MiB against
#   SedonaDB 8.96 / 8.67 s, 1,692 MiB: never by default.
# - overlay_layers' intersection file to file (sedonadb_overlay_files: both layers and the output single GeoParquet
#   files), measured the same way (warm work time and the process's wall time and peak RSS, /usr/bin/time, three
#   interleaved pairs, MAPSMITH_ENGINE naming each, load average 2.4-3.9): 10,000 parcels GeoPandas 2.61-2.68 s work,
#   4.44-4.52 s process, 349-365 MiB against SedonaDB 2.65-2.70 s, 4.54-4.58 s, 417-433 MiB; 30,000 parcels GeoPandas
#   4.02-4.12 s, 5.86-5.93 s, 404-412 MiB against SedonaDB 3.27-3.34 s, 5.12-5.21 s, 435-442 MiB: preferred from
#   30,000 features; the WKB path keeps its 100,000.
DIRECT_MIN_FEATURES = 300_000
WKB_MIN_FEATURES: int | None = None
DISSOLVE_MIN_FEATURES: int | None = None
OVERLAY_MIN_FEATURES: int | None = 100_000
OVERLAY_FILE_MIN_FEATURES: int | None = 30_000
NEAREST_MIN_FEATURES: int | None = None
# the smallest default threshold (what `server_info` readers see)
_DEFAULTS = (
    DIRECT_MIN_FEATURES,
    WKB_MIN_FEATURES,
    DISSOLVE_MIN_FEATURES,
    OVERLAY_MIN_FEATURES,
    OVERLAY_FILE_MIN_FEATURES,
    NEAREST_MIN_FEATURES,
)
SEDONADB_MIN_FEATURES = min(t for t in _DEFAULTS if t is not None)
# What a SedonaDB context may hold before it spills (engine_memory: measured at 30M points under an 8 GiB cap).
MEMORY_ENV = "MAPSMITH_SEDONADB_MEMORY"
MEMORY_SHARE = 0.5
MIN_FEATURES_ENV = "MAPSMITH_SEDONADB_MIN_FEATURES"  # overrides the threshold (tests set it to 0)
# join_ops' predicate names (the GeoPandas engine's) -> the SQL functions SedonaDB shares with DuckDB
PREDICATES = spatial_join_ops.SPATIAL_PREDICATES

# spatial_join's SedonaDB engine (file to file, or this module's WKB path) is registered by
# join_ops.spatial_join_sedonadb; the other operations by sedonadb_points, sedonadb_overlay, sedonadb_nearest.
REGISTRATIONS: tuple[Registration, ...] = ()


# -- eligibility -------------------------------------------------------------------------------


def missing_modules() -> list[str]:
    """The distributions SedonaDB needs that are not installed here (empty: it can run)."""
    return mapsmith_sedona.missing_distributions(SEDONADB_MODULES)


def min_features(ctx: RunContext, default: int | None = SEDONADB_MIN_FEATURES) -> int | None:
    """The size threshold of this run: MAPSMITH_SEDONADB_MIN_FEATURES when set (a whole number >= 0),
    else ``default`` (None: SedonaDB is not considered for this path unless the variable is set)."""
    from mapsmith.errors import ConfigurationError

    text = (ctx.environ.get(MIN_FEATURES_ENV) or "").strip()  # the service's environment, as MAPSMITH_STACK
    if not text:
        return default
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(
            f"{MIN_FEATURES_ENV}={text!r} is not a whole number of features",
            code="SEDONADB_MIN_FEATURES_INVALID",
            evidence={"variable": MIN_FEATURES_ENV, "value": text},
            hint=f"set {MIN_FEATURES_ENV} to a whole number such as 500000, or unset it for the measured defaults",
        )
    return value


def _too_small(
    ctx: RunContext, rows: int, default: int | None, what: str, measured_by: str = "benchmarks/bench_scale.py"
) -> str | None:
    """Why ``rows`` features are too few for SedonaDB on this path, or None (``measured_by``: where the
    measurement behind a threshold of None is). None as well when MAPSMITH_ENGINE names sedonadb."""
    from mapsmith.router import named_by_operator

    threshold = min_features(ctx, default)
    if named_by_operator(ctx, "sedonadb"):
        return None
    if threshold is None:
        return (
            f"{what} was never measured faster than DuckDB or GeoPandas ({measured_by}), so it runs only "
            f"when {MIN_FEATURES_ENV} sets a threshold"
        )
    if rows < threshold:
        return (
            f"the larger input has {rows:,} features, fewer than the {threshold:,} from which {what} is considered "
            f"(it was measured no faster below it; {MIN_FEATURES_ENV} overrides)"
        )
    return None


def _eligible(
    ctx: RunContext,
    keys: tuple[str, str],
    default: int | None,
    what: str,
    measured_by: str = "benchmarks/bench_scale.py",
) -> str | None:
    """Why SedonaDB cannot take this run (installed? both CRS known and equal? big enough?), or None."""
    from pyproj import CRS

    missing = missing_modules()
    if missing:
        return f"SedonaDB is not installed here (missing: {', '.join(missing)}); fix: {SEDONADB_FIX}"
    first, second = (ctx.inputs[k] for k in keys)
    if first.crs_wkt is None or second.crs_wkt is None:
        unknown = [k for k in keys if ctx.inputs[k].crs_wkt is None]
        return (
            f"the CRS of {' and '.join(unknown)} is unknown; the SedonaDB engine joins only layers whose CRS is known"
        )
    if not CRS.from_wkt(first.crs_wkt).equals(CRS.from_wkt(second.crs_wkt), ignore_axis_order=True):
        return (
            f"{keys[0]} is in {first.crs_label} and {keys[1]} in {second.crs_label}; the SedonaDB engine joins only "
            f"layers in one CRS (GeoPandas aligns {keys[1]} first, recorded)"
        )
    counts = (first.feature_count, second.feature_count)
    if None in counts:
        return "a feature count is unknown from the input's header, so the size threshold cannot be applied"
    return _too_small(ctx, max(counts), default, what, measured_by)  # type: ignore[type-var]


def _record_choice(ctx: RunContext, keys: tuple[str, str], default: int | None = None) -> None:
    """Why SedonaDB ran, in the manifest's notes (the engine choice records only those passed over);
    ``default``: the path's own threshold (None: the points-in-polygons paths', told apart here)."""
    first, second = (ctx.inputs[k] for k in keys)
    rows = max(first.feature_count or 0, second.feature_count or 0)
    if default is None:
        default = DIRECT_MIN_FEATURES if _direct_path(ctx) else WKB_MIN_FEATURES
    ctx.notes.append(
        f"engine: SedonaDB ran because it is installed, both inputs are in {first.crs_label}, and the larger input "
        f"has {rows:,} features, {size_reason(ctx, default, 'DuckDB and GeoPandas')}"
    )
    ctx.notes.append(f"SedonaDB's memory limit: {memory_limit(ctx.environ).how}")


def size_reason(ctx: RunContext, default: int | None, others: str) -> str:
    """The size half of a "why SedonaDB ran" note: the threshold it met, or MAPSMITH_ENGINE naming it."""
    from mapsmith.router import ENGINE_ENV, named_by_operator

    threshold = min_features(ctx, default)
    if named_by_operator(ctx, "sedonadb") and (threshold is None or threshold > 0):
        return f"and {ENGINE_ENV} names sedonadb, which sets its size threshold aside"
    return f"at least the {threshold or 0:,} from which it is preferred to {others} ({MIN_FEATURES_ENV} overrides)"


def _direct_path(ctx: RunContext) -> bool:
    """Whether this run is a points-in-polygons run whose points SedonaDB can read itself."""
    return "points_path" in ctx.paths and _points_file_problem(ctx, ctx.arguments.get("field")) is None


def wkb_join_eligible(ctx: RunContext) -> str | None:
    """Why spatial_join's WKB path cannot take this run (join_ops.spatial_join_sedonadb asks it when the file-to-file
    path cannot), or None."""
    return _eligible(ctx, ("input_path", "join_path"), WKB_MIN_FEATURES, "SedonaDB's spatial_join (the WKB path)")


# -- the pair search ---------------------------------------------------------------------------


_LIMIT: dict[str, engine_memory.Limit] = {}


def memory_limit(environ: Mapping[str, str]) -> engine_memory.Limit:
    """The memory limit of this process's SedonaDB contexts: worked out once, from the settings of the first
    run that asks (``_record_choice``, before any context is made), as the contexts live as long as the process."""
    if "limit" not in _LIMIT:
        _LIMIT["limit"] = engine_memory.engine_limit(environ, MEMORY_ENV, MEMORY_SHARE, "SedonaDB")
    return _LIMIT["limit"]


def new_context() -> Any:
    """A SedonaDB context with this process's memory limit (spilling to disk beyond it)."""
    import os

    import sedonadb

    sd = sedonadb.connect()
    limit = memory_limit(os.environ)
    if limit.bytes is not None:
        sd.options.memory_limit = limit.bytes
    return sd


# SedonaDB 0.5 (DataFusion) turns a column whose Parquet statistics give the same minimum and maximum into a
# constant, and a geometry column so folded loses its type: every geometry function then fails ("st_isempty(binary):
# No kernel matching arguments"). That happens when all of a file's geometries are the same bytes -- a one-row file
# is the common case. Such a file is read with the statistics off (the setting is taken when the file is read, so
# only that table goes without them); the lock keeps another run's read out of the window.
_STATISTICS = "datafusion.execution.collect_statistics"
_READING = threading.Lock()


def constant_geometry(files: Sequence[Path]) -> bool:
    """Whether the Parquet statistics of any of ``files`` give one value for a GeoParquet geometry column (every
    row group with statistics, each minimum and maximum the same bytes): the files SedonaDB 0.5 mistypes."""
    import pyarrow.parquet as pq

    for file in files:
        meta = pq.read_metadata(file)
        geo = strict_json_loads((meta.metadata or {}).get(b"geo", b"{}") or b"{}")
        names = set(geo.get("columns") or ())
        for column in range(meta.num_columns):
            if meta.schema.column(column).path not in names or not meta.num_row_groups:
                continue
            values = set()
            for group in range(meta.num_row_groups):
                stats = meta.row_group(group).column(column).statistics
                if stats is None or not stats.has_min_max:
                    values = {None, b""}  # a row group without statistics: nothing to fold
                    break
                values |= {stats.min, stats.max}
            if len(values) == 1:
                return True
    return False


def read_parquet(sd: Any, files: Sequence[Path], **options: Any) -> Any:
    """``sd.read_parquet`` over ``files``, with the statistics off for a file ``constant_geometry`` finds."""
    names = [str(f) for f in files]
    if not constant_geometry(files):
        return sd.read_parquet(names, **options)
    with _READING:
        sd.sql(f"SET {_STATISTICS} = false").execute()
        try:
            return sd.read_parquet(names, **options)
        finally:
            sd.sql(f"SET {_STATISTICS} = true").execute()


def write_geoparquet(sd: Any, query: str, path: Path, geo: str) -> None:
    """``query``'s rows as one GeoParquet file at ``path`` with ``geo`` as its metadata (the file-to-file paths count
    the types and extent themselves; SedonaDB's own GeoParquet writer needs a CRS on the column and writes no types)."""
    sd.sql(query).to_parquet(
        str(path), geoparquet_version="none", single_file_output=True, options={"metadata::geo": geo}
    )


def drop_views(sd: Any, names: Iterable[str]) -> None:
    """Drop a run's views (those never registered are passed over: the failure that stopped the run is the one to
    report)."""
    for name in names:
        try:
            sd.drop_view(name)
        except Exception:
            pass


@cache
def _connection() -> Any:
    """One SedonaDB context per process (importing sedonadb takes about 0.9 s); each run registers
    views of its own names, so concurrent runs do not see each other's tables."""
    return new_context()


def _set_engine(ctx: RunContext, keys: tuple[str, str], default: int | None = None) -> None:
    from importlib import metadata

    import sedonadb

    _record_choice(ctx, keys, default)
    ctx.set_engine(ENGINE, sedonadb.__version__, **{"geoarrow-pyarrow": metadata.version("geoarrow-pyarrow")})
    ctx.engine_components.update(engine_versions())  # the GeoPandas stack reads, checks and writes


def _table(geoms: np.ndarray) -> Any:
    """Row positions beside the geometries as WKB (None stays null), as an Arrow table with a geoarrow type."""
    import geoarrow.pyarrow as ga
    import numpy as np
    import pyarrow as pa
    import shapely

    wkb = pa.array(shapely.to_wkb(np.asarray(geoms, dtype=object)), type=pa.binary())
    return pa.table({"n": pa.array(np.arange(len(geoms), dtype=np.int64)), "g": ga.wkb().wrap_array(wkb)})


@contextmanager
def _geometry_views(*layers: np.ndarray) -> Iterator[list[str]]:
    """Each array of geometries as a SedonaDB view (row position ``n``, geometry ``g``) under a name of
    its own, dropped afterwards: concurrent runs never see each other's views."""
    import uuid

    sd = _connection()
    names: list[str] = []
    try:
        for layer in layers:
            name = f"mapsmith_{uuid.uuid4().hex}"
            sd.create_data_frame(_table(layer)).to_view(name)
            names.append(name)
        yield names
    finally:
        for name in names:
            try:
                sd.drop_view(name)
            except Exception:  # a failure inside is the one to report
                pass


def sedonadb_pairs(
    left: np.ndarray, right: np.ndarray, predicate: str, distance: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(left row, right row) of every pair for which ``predicate(left, right)`` holds, sorted by both.

    The geometries are passed without a CRS: the callers have put both in one CRS, and every
    predicate here is planar in it (dwithin's distance is in that CRS's units, as in GeoPandas).
    """
    import numpy as np

    if len(left) == 0 or len(right) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    args = "l.g, r.g" + (f", {float(distance)!r}" if predicate == "dwithin" else "")
    with _geometry_views(left, right) as (lv, rv):
        found = (
            _connection()
            .sql(f"SELECT l.n AS i, r.n AS j FROM {lv} AS l JOIN {rv} AS r ON {PREDICATES[predicate]}({args})")
            .to_arrow_table()
        )
    i = found.column("i").to_numpy().astype(np.int64)
    j = found.column("j").to_numpy().astype(np.int64)
    order = np.lexsort((j, i))  # SedonaDB returns pairs in no promised order
    return i[order], j[order]


def _intersecting(polygons: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return sedonadb_pairs(polygons, points, "intersects")


# -- count_in_polygons / summarize_points_in_polygons, points read by SedonaDB ------------------

WKB_PATH_NOTE = (
    "engine path: WKB -- the GeoPandas engine's code read, checked and wrote both layers and SedonaDB found the "
    "matching pairs of the geometries handed to it as WKB"
)
DIRECT_PATH_NOTE = (
    "engine path: direct -- SedonaDB read points_path itself (GeoParquet), counted its null, empty and invalid "
    "geometries and found the (polygon, point) pairs; only the pairs{values} came back, so the points never "
    "became a GeoDataFrame; the polygons were read, checked and written by the GeoPandas engine's code"
)


def _points_file_problem(ctx: RunContext, value_field: str | None) -> str | None:
    """Why SedonaDB cannot read points_path itself and give the GeoPandas engine's answer (None: it can)."""
    from mapsmith_opensource.join_ops.points_in_polygons_sql import points_file_problem

    return points_file_problem(ctx, value_field, "SedonaDB")


# -- the operations ----------------------------------------------------------------------------


def spatial_join_wkb(ctx: RunContext, why_not_file: str) -> None:
    """spatial_join with SedonaDB's join on the WKB path: join_ops prepares (reads, checks, aligns, goes metric
    for within_distance) and finishes (geodesic filter, order, how='left' rows, renaming, counts, writing).
    join_ops.spatial_join_sedonadb calls it when its file-to-file path cannot take the run (``why_not_file``)."""
    _set_engine(ctx, ("input_path", "join_path"), WKB_MIN_FEATURES)
    ctx.notes.append(f"{WKB_PATH_NOTE}; the file-to-file path was not taken because {why_not_file}")
    prep = spatial_join_ops._prepare_spatial_join(ctx)
    left, right = sedonadb_pairs(prep.left_geoms, prep.join_geoms, prep.predicate, prep.search_units)
    spatial_join_ops._finish_spatial_join(ctx, prep, left, right)
