"""SedonaDB engines for the point-heavy joins: spatial_join, count_in_polygons, summarize_points_in_polygons.

SedonaDB (Apache Sedona's single-machine engine, ``pip install 'mapsmith[sedona]'``) finds the
matching (row, row) pairs with its spatial join; everything before and after the pairs -- reading,
validity checks, CRS alignment and its record, distances in metres, renaming, null handling, row
order, counts and writing -- is the GeoPandas engine's own code in join_ops, called here, so the two
engines cannot drift apart in anything but the pair search (tests/vector/test_engine_parity.py).

The router tries SedonaDB before DuckDB and GeoPandas (preference 40 > 30 > 20), and this module's
``sedonadb_eligible`` passes it over -- with the reason, which the manifest's
``x-mapsmith:engine_choice.passed_over`` keeps -- when sedonadb is not installed, when a CRS is
unknown or the two differ, or when the inputs are too small to gain from it (see
SEDONADB_MIN_FEATURES). This is an ``eligible`` check, not an extras ``requirement``: a missing
requirement drops an engine silently, and a data engineer asking "why did GeoPandas run?" should
find "sedonadb is not installed" in the manifest.

It must never import sedonadb when imported (start-up stays fast and sedonadb is optional).
nearest_join, dissolve_layer and overlay_layers have no SedonaDB engine yet: their tie rules and
geodesic measures are GEOS/pyproj code the pair-search pattern does not cover.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import mapsmith_sedona
from mapsmith_opensource import join_ops
from mapsmith_opensource.common import engine_versions
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext

ENGINE = "sedonadb"
SEDONADB_PREFERENCE = 40  # above DuckDB (join_ops.DUCKDB_PREFERENCE, 30) and GeoPandas (20 or default 0)
# import name -> the distribution that provides it (the sedona stack's own table: one list of what
# SedonaDB needs), so the reason names what to install
SEDONADB_MODULES = mapsmith_sedona.SEDONADB_MODULES
SEDONADB_FIX = mapsmith_sedona.SEDONADB_FIX
# SedonaDB is considered from this many features in the larger input. The issue measured raw SedonaDB
# at 0.85 s against geopandas.sjoin at 1.21 s (1,000,000 points x 10,000 polygons, 2 cores); this engine
# is not that raw run: it hands GeoPandas' geometries to SedonaDB as WKB (0.7-0.95 s per million points)
# and GeoPandas code does the rest. benchmarks/bench_sedona.py, same data, in-process, medians of 3 on 2
# shared cores (load average 4-14): pair search SedonaDB 2.95 s against shapely's STRtree 1.69 s; whole
# MapSmith spatial_join SedonaDB 8.38 s, GeoPandas 7.85 s, DuckDB 9.31 s; at 3,000,000 points the pair
# search took 9.2 s against 6.0 s. No size measured here is faster on SedonaDB, so the threshold lies
# above every size measured, at the next scale point, where it must be measured (not yet done).
SEDONADB_MIN_FEATURES = 10_000_000
MIN_FEATURES_ENV = "MAPSMITH_SEDONADB_MIN_FEATURES"  # overrides the threshold (tests set it to 0)
# join_ops' predicate names (the GeoPandas engine's) -> the SQL functions SedonaDB shares with DuckDB
PREDICATES = join_ops.SPATIAL_PREDICATES

# the validators are join_ops' own: module-level names here because registrations name them
validate_spatial_join = join_ops.validate_spatial_join
validate_summarize_points = join_ops.validate_summarize_points

REGISTRATIONS = (
    Registration(
        "spatial_join",
        "spatial_join_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="spatial_join_eligible",
        validate="validate_spatial_join",
    ),
    Registration(
        "count_in_polygons",
        "count_in_polygons_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="points_in_polygons_eligible",
    ),
    Registration(
        "summarize_points_in_polygons",
        "summarize_points_in_polygons_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="points_in_polygons_eligible",
        validate="validate_summarize_points",
    ),
)


# -- eligibility -------------------------------------------------------------------------------


def missing_modules() -> list[str]:
    """The distributions SedonaDB needs that are not installed here (empty: it can run)."""
    return mapsmith_sedona.missing_distributions(SEDONADB_MODULES)


def min_features(ctx: RunContext) -> int:
    """The size threshold of this run: MAPSMITH_SEDONADB_MIN_FEATURES when set (a whole number >= 0)."""
    from mapsmith.errors import ConfigurationError

    text = (ctx.environ.get(MIN_FEATURES_ENV) or "").strip()  # the service's environment, as MAPSMITH_STACK
    if not text:
        return SEDONADB_MIN_FEATURES
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(
            f"{MIN_FEATURES_ENV}={text!r} is not a whole number of features",
            code="SEDONADB_MIN_FEATURES_INVALID",
            evidence={"variable": MIN_FEATURES_ENV, "value": text},
            hint=f"set {MIN_FEATURES_ENV} to a whole number such as 500000, or unset it for the default "
            f"{SEDONADB_MIN_FEATURES}",
        )
    return value


def _eligible(ctx: RunContext, keys: tuple[str, str]) -> str | None:
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
    rows, threshold = max(counts), min_features(ctx)  # type: ignore[type-var]
    if rows < threshold:
        return (
            f"the larger input has {rows:,} features, fewer than the {threshold:,} from which the SedonaDB engine "
            f"is considered (it was measured slower than GeoPandas below it; {MIN_FEATURES_ENV} overrides)"
        )
    return None


def _record_choice(ctx: RunContext, keys: tuple[str, str]) -> None:
    """Why SedonaDB ran, in the manifest's notes (the engine choice records only those passed over)."""
    first, second = (ctx.inputs[k] for k in keys)
    rows = max(first.feature_count or 0, second.feature_count or 0)
    ctx.notes.append(
        f"engine: SedonaDB ran because it is installed, both inputs are in {first.crs_label}, and the larger input "
        f"has {rows:,} features, at least the {min_features(ctx):,} from which it is preferred to DuckDB and "
        f"GeoPandas ({MIN_FEATURES_ENV} overrides); SedonaDB found the matching pairs and the GeoPandas engine's "
        "code did everything else"
    )


def spatial_join_eligible(ctx: RunContext) -> str | None:
    return _eligible(ctx, ("input_path", "join_path"))


def points_in_polygons_eligible(ctx: RunContext) -> str | None:
    if not hasattr(join_ops, "intersecting_pairs"):  # a join_ops without the pair hook this engine calls
        return "this join_ops has no pair-finder hook (intersecting_pairs) for the SedonaDB engine to use"
    return _eligible(ctx, ("input_path", "points_path"))


# -- the pair search ---------------------------------------------------------------------------


@cache
def _connection() -> Any:
    """One SedonaDB context per process (importing sedonadb takes about 0.9 s); each run registers
    views of its own names, so concurrent runs do not see each other's tables."""
    import sedonadb

    return sedonadb.connect()


def _set_engine(ctx: RunContext, keys: tuple[str, str]) -> None:
    from importlib import metadata

    import sedonadb

    _record_choice(ctx, keys)
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


def sedonadb_pairs(
    left: np.ndarray, right: np.ndarray, predicate: str, distance: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(left row, right row) of every pair for which ``predicate(left, right)`` holds, sorted by both.

    The geometries are passed without a CRS: the callers have put both in one CRS, and every
    predicate here is planar in it (dwithin's distance is in that CRS's units, as in GeoPandas).
    """
    import uuid

    import numpy as np

    if len(left) == 0 or len(right) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sd = _connection()
    suffix = uuid.uuid4().hex
    names = (f"mapsmith_left_{suffix}", f"mapsmith_right_{suffix}")
    args = "l.g, r.g" + (f", {float(distance)!r}" if predicate == "dwithin" else "")
    try:
        sd.create_data_frame(_table(left)).to_view(names[0])
        sd.create_data_frame(_table(right)).to_view(names[1])
        found = sd.sql(
            f"SELECT l.n AS i, r.n AS j FROM {names[0]} AS l JOIN {names[1]} AS r ON {PREDICATES[predicate]}({args})"
        ).to_arrow_table()
    finally:
        for name in names:
            try:
                sd.drop_view(name)
            except Exception:  # never registered (the failure above is the one to report)
                pass
    i = found.column("i").to_numpy().astype(np.int64)
    j = found.column("j").to_numpy().astype(np.int64)
    order = np.lexsort((j, i))  # SedonaDB returns pairs in no promised order
    return i[order], j[order]


def _intersecting(polygons: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return sedonadb_pairs(polygons, points, "intersects")


# -- the operations ----------------------------------------------------------------------------


def spatial_join_sedonadb(ctx: RunContext) -> None:
    """spatial_join with SedonaDB's join: join_ops prepares (reads, checks, aligns, goes metric for
    within_distance) and finishes (geodesic filter, order, how='left' rows, renaming, counts, writing)."""
    _set_engine(ctx, ("input_path", "join_path"))
    prep = join_ops._prepare_spatial_join(ctx)
    left, right = sedonadb_pairs(prep.left_geoms, prep.join_geoms, prep.predicate, prep.search_units)
    join_ops._finish_spatial_join(ctx, prep, left, right)


def count_in_polygons_sedonadb(ctx: RunContext) -> None:
    _set_engine(ctx, ("input_path", "points_path"))
    join_ops.count_in_polygons(ctx, find_pairs=_intersecting)


def summarize_points_in_polygons_sedonadb(ctx: RunContext) -> None:
    _set_engine(ctx, ("input_path", "points_path"))
    join_ops.summarize_points_in_polygons(ctx, find_pairs=_intersecting)
