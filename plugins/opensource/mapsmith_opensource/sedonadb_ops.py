"""SedonaDB engines for the heavy vector work: spatial_join, count_in_polygons, summarize_points_in_polygons,
dissolve_layer and overlay_layers (intersection).

SedonaDB (Apache Sedona's single-machine engine, the ``[sedona]`` extra) runs them on
one of two paths, named in the manifest's notes:

- direct (count_in_polygons and summarize_points_in_polygons with points_path in GeoParquet): SedonaDB
  reads points_path itself, counts its null, empty and invalid geometries and finds the (polygon,
  point) pairs, so the points never become a GeoDataFrame -- only the pairs (and a field's value per
  pair) come back, as Arrow. The polygons are read, checked and written by the GeoPandas engine's code;
  the statistics are computed from the pairs with the same arithmetic as join_ops.
- WKB (everything else, spatial_join always): the GeoPandas engine's code in join_ops reads, checks,
  aligns, measures, renames, orders, counts and writes; SedonaDB only finds the matching pairs of
  geometries handed to it as WKB.

Either way the results equal the GeoPandas engine's (tests/vector/test_engine_parity.py).

The router tries SedonaDB before DuckDB and GeoPandas (preference 40 > 30 > 20), and this module's
``sedonadb_eligible`` passes it over -- with the reason, which the manifest's
``x-mapsmith:engine_choice.passed_over`` keeps -- when sedonadb is not installed, when a CRS is
unknown or the two differ, or when the inputs are too small to gain from it (DIRECT_MIN_FEATURES; the
WKB path, never measured to gain, runs only when MAPSMITH_SEDONADB_MIN_FEATURES asks). This is an
``eligible`` check, not an extras ``requirement``: a missing
requirement drops an engine silently, and a data engineer asking "why did GeoPandas run?" should
find "sedonadb is not installed" in the manifest.

It must never import sedonadb when imported (start-up stays fast and sedonadb is optional).
dissolve_layer runs on the WKB path too: overlay_ops' code groups, aggregates, checks and writes, and
SedonaDB unions each group's geometries (see dissolve_layer_sedonadb for why with ST_UnaryUnion, not
ST_Union_Agg). overlay_layers with how='intersection' too: SedonaDB finds the pairs and computes each
pair's ST_Intersection (GEOS, as shapely), and overlay_ops' code does the rest; the other modes are
geopandas.overlay's own piecing, not built here. nearest_join too: SedonaDB finds the planar nearest
with exact distance joins over a widening radius (its ST_KNN measures from centroids where a geometry
is not a point, so it is not used), and join_ops' code applies the tie rule and the geodesic measures.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import mapsmith_sedona
from mapsmith_opensource import io, join_ops, overlay_ops
from mapsmith_opensource.common import engine_versions, read_input, record_input_validity, require_valid
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

ENGINE = "sedonadb"
SEDONADB_PREFERENCE = 40  # above DuckDB (join_ops.DUCKDB_PREFERENCE, 30) and GeoPandas (20 or default 0)
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
#   76.6 s / 12.6 GiB at 30M), so it is preferred from 1,000,000 features.
# - The WKB path (spatial_join; points not in GeoParquet) and dissolve_layer's union were never measured
#   to gain: spatial_join took 6.7 s against GeoPandas' 6.0 s and DuckDB's 4.5 s at 1M, 44.3 s against
#   44.9 s and 16.0 s at 10M, 135.4 s against 133.1 s and 51.9 s at 30M (dissolve was not measured).
#   They run only when MAPSMITH_SEDONADB_MIN_FEATURES sets a threshold.
DIRECT_MIN_FEATURES = 1_000_000
WKB_MIN_FEATURES: int | None = None
DISSOLVE_MIN_FEATURES: int | None = None
OVERLAY_MIN_FEATURES: int | None = None  # overlay_layers' intersection on SedonaDB: not measured either
NEAREST_MIN_FEATURES: int | None = None  # nearest_join's planar search on SedonaDB: not measured either
SEDONADB_MIN_FEATURES = DIRECT_MIN_FEATURES  # the smallest default threshold (what `server_info` readers see)
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
    Registration(
        "dissolve_layer",
        "dissolve_layer_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="dissolve_layer_eligible",
    ),
    Registration(
        "nearest_join",
        "nearest_join_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="nearest_join_eligible",
    ),
    Registration(
        "overlay_layers",
        "overlay_layers_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="overlay_layers_eligible",
    ),
)


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


def _too_small(ctx: RunContext, rows: int, default: int | None, what: str) -> str | None:
    """Why ``rows`` features are too few for SedonaDB on this path, or None."""
    threshold = min_features(ctx, default)
    if threshold is None:
        return (
            f"{what} was never measured faster than DuckDB or GeoPandas (benchmarks/bench_scale.py), so it runs only "
            f"when {MIN_FEATURES_ENV} sets a threshold"
        )
    if rows < threshold:
        return (
            f"the larger input has {rows:,} features, fewer than the {threshold:,} from which {what} is considered "
            f"(it was measured no faster below it; {MIN_FEATURES_ENV} overrides)"
        )
    return None


def _eligible(ctx: RunContext, keys: tuple[str, str], default: int | None, what: str) -> str | None:
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
    return _too_small(ctx, max(counts), default, what)  # type: ignore[type-var]


def _record_choice(ctx: RunContext, keys: tuple[str, str]) -> None:
    """Why SedonaDB ran, in the manifest's notes (the engine choice records only those passed over)."""
    first, second = (ctx.inputs[k] for k in keys)
    rows = max(first.feature_count or 0, second.feature_count or 0)
    default = DIRECT_MIN_FEATURES if _direct_path(ctx) else WKB_MIN_FEATURES
    ctx.notes.append(
        f"engine: SedonaDB ran because it is installed, both inputs are in {first.crs_label}, and the larger input "
        f"has {rows:,} features, at least the {min_features(ctx, default):,} from which it is preferred to DuckDB "
        f"and GeoPandas ({MIN_FEATURES_ENV} overrides)"
    )


def _direct_path(ctx: RunContext) -> bool:
    """Whether this run is a points-in-polygons run whose points SedonaDB can read itself."""
    return "points_path" in ctx.paths and _points_file_problem(ctx, ctx.arguments.get("field")) is None


def spatial_join_eligible(ctx: RunContext) -> str | None:
    return _eligible(ctx, ("input_path", "join_path"), WKB_MIN_FEATURES, "SedonaDB's spatial_join (the WKB path)")


def points_in_polygons_eligible(ctx: RunContext) -> str | None:
    if not hasattr(join_ops, "intersecting_pairs"):  # a join_ops without the pair hook this engine calls
        return "this join_ops has no pair-finder hook (intersecting_pairs) for the SedonaDB engine to use"
    if _direct_path(ctx):
        return _eligible(ctx, ("input_path", "points_path"), DIRECT_MIN_FEATURES, "SedonaDB's direct path")
    return _eligible(ctx, ("input_path", "points_path"), WKB_MIN_FEATURES, "SedonaDB's WKB path")


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


# -- the operations ----------------------------------------------------------------------------


def spatial_join_sedonadb(ctx: RunContext) -> None:
    """spatial_join with SedonaDB's join: join_ops prepares (reads, checks, aligns, goes metric for
    within_distance) and finishes (geodesic filter, order, how='left' rows, renaming, counts, writing)."""
    _set_engine(ctx, ("input_path", "join_path"))
    ctx.notes.append(
        f"{WKB_PATH_NOTE}; spatial_join has no direct path yet (SedonaDB would have to write the joined rows in "
        "input order with the GeoPandas engine's field types, which is not built)"
    )
    prep = join_ops._prepare_spatial_join(ctx)
    left, right = sedonadb_pairs(prep.left_geoms, prep.join_geoms, prep.predicate, prep.search_units)
    join_ops._finish_spatial_join(ctx, prep, left, right)


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
    import json

    import pyarrow.parquet as pq
    import pyarrow.types as t

    path = ctx.paths["points_path"]
    if not io.is_parquet(path):
        return f"points_path is {ctx.inputs['points_path'].driver}, not GeoParquet, which SedonaDB reads directly"
    schema = pq.read_schema(path)
    meta = schema.metadata or {}
    geo = json.loads(meta.get(b"geo") or b"{}")
    columns = geo.get("columns", {})
    if len(columns) != 1:
        return f"points_path has {len(columns)} geometry columns; the direct path reads layers with one"
    primary = str(geo.get("primary_column", ""))
    if columns.get(primary, {}).get("encoding") != "WKB":
        return f"points_path stores its geometries as {columns.get(primary, {}).get('encoding')!r}, not WKB"
    if value_field is None:
        return None
    index = {str(i) for i in json.loads(meta.get(b"pandas") or b"{}").get("index_columns", []) if isinstance(i, str)}
    where = schema.get_field_index(value_field)
    if where < 0 or value_field == primary or value_field in index:
        return f"points_path has no field {value_field!r} (the GeoPandas engine's code gives the refusal)"
    kind = schema.field(where).type
    if not (t.is_integer(kind) or t.is_floating(kind)):
        return f"field {value_field!r} is {kind}, not integers or floats (the GeoPandas engine's code decides)"
    return None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class _PointScan:
    rows: int
    missing: int  # null or empty geometries
    invalid: int
    null_values: int  # points whose value is null (or NaN): as pandas' isna counts them


@dataclass
class _DirectFound:
    polygons: gpd.GeoDataFrame
    polygon_rows: np.ndarray  # one entry per (polygon, point) pair
    values: np.ndarray | None  # the value of each pair's point (NaN: none)
    scan: _PointScan
    counts: dict[str, int]


def _first_invalid_points(path: Path, geometry: str) -> list[tuple[int, str]]:
    """The first invalid points with GEOS's reason, by file position (read only when some are invalid)."""
    import numpy as np
    import pyarrow.parquet as pq
    import shapely

    found: list[tuple[int, str]] = []
    offset = 0
    for batch in pq.ParquetFile(path).iter_batches(columns=[geometry], batch_size=65_536):
        geoms = shapely.from_wkb(batch.column(0).to_numpy(zero_copy_only=False))
        bad = ~(shapely.is_missing(geoms) | shapely.is_empty(geoms)) & ~shapely.is_valid(geoms)
        for i in np.flatnonzero(bad):
            found.append((offset + int(i), str(shapely.is_valid_reason(geoms[i]))))
            if len(found) == join_ops.INVALID_REASONS_READ:
                return found
        offset += batch.num_rows
    return found


def _direct_points_in_polygons(ctx: RunContext, new_fields: list[str], value_field: str | None) -> _DirectFound:
    """join_ops._points_in_polygons with points_path read, checked and matched inside SedonaDB."""
    import json
    import uuid

    import numpy as np
    import pyarrow.parquet as pq

    polygons = read_input(ctx)
    path = ctx.paths["points_path"]
    geometry = json.loads(pq.read_schema(path).metadata[b"geo"])["primary_column"]
    sd = _connection()
    suffix = uuid.uuid4().hex
    points, zones = f"mapsmith_points_{suffix}", f"mapsmith_polygons_{suffix}"
    g = _quote(geometry)
    value = (
        f"CASE WHEN isnan(CAST({_quote(value_field)} AS DOUBLE)) THEN NULL ELSE CAST({_quote(value_field)} AS DOUBLE) "
        "END"
        if value_field is not None
        else "NULL"
    )
    try:
        sd.read_parquet(str(path)).to_view(points)
        rows, missing, invalid, nulls = (
            sd.sql(
                f"SELECT count(*), count(*) FILTER (WHERE {g} IS NULL OR ST_IsEmpty({g})), "
                f"count(*) FILTER (WHERE NOT ST_IsValid({g})), "
                f"count(*) FILTER (WHERE ({value}) IS NULL) FROM {points}"
            )
            .to_pandas()
            .iloc[0]
        )
        scan = _PointScan(int(rows), int(missing), int(invalid), int(nulls) if value_field is not None else 0)
        record_input_validity(
            ctx,
            "points_path",
            rows=scan.rows,
            invalid_count=scan.invalid,
            missing_count=scan.missing,
            invalid=_first_invalid_points(path, geometry) if scan.invalid else [],
        )
        join_ops._refuse_existing(ctx, polygons, new_fields)
        require_valid(ctx, polygons, "input_path", join_ops.UNDEFINED_ON_INVALID)
        join_ops._record_topological(ctx, polygons.crs, "points_path", "points were tested against polygons")
        # Both layers' CRS are equal (eligibility); SedonaDB compares CRS by name, so both sides go without one.
        # The point ids number the points only to tell them apart (a point in several polygons), not by position.
        if len(polygons) == 0 or scan.rows == 0:  # nothing to match (and SedonaDB cannot type an empty WKB column)
            found = None
        else:
            sd.create_data_frame(_table(polygons.geometry.values)).to_view(zones)
            found = sd.sql(
                f"SELECT t.n AS i, p.id AS j, p.v AS v FROM {zones} AS t JOIN (SELECT row_number() OVER () - 1 AS id, "
                f"ST_SetSRID({g}, 0) AS g, {value} AS v FROM {points}) AS p ON ST_Intersects(t.g, p.g)"
            ).to_arrow_table()
    finally:
        for name in (points, zones):
            try:
                sd.drop_view(name)
            except Exception:  # never registered (the failure above is the one to report)
                pass
    # copy=False: at 10M points every copy of the pairs is tens of megabytes
    poly_rows = point_ids = np.zeros(0, dtype=np.int64)
    values = np.zeros(0) if value_field is not None else None
    if found is not None:
        poly_rows = found.column("i").to_numpy().astype(np.int64, copy=False)
        point_ids = found.column("j").to_numpy().astype(np.int64, copy=False)
        values = (
            found.column("v").to_numpy(zero_copy_only=False).astype(float, copy=False)
            if value_field is not None
            else None
        )
        del found
    times = np.bincount(point_ids, minlength=scan.rows)
    del point_ids
    counts = {
        "polygons": len(polygons),
        "points": scan.rows,
        "points_counted": int((times > 0).sum()),
        "points_in_no_polygon": int((times == 0).sum()),
        "points_without_geometry": scan.missing,
        "points_in_several_polygons": int((times > 1).sum()),
        "polygons_with_no_points": int((np.bincount(poly_rows, minlength=len(polygons)) == 0).sum()),
    }
    # From here on as join_ops._points_in_polygons records it.
    ctx.parameters["x-mapsmith:boundary_rule"] = join_ops.BOUNDARY_RULE
    ctx.notes.append(
        f"{counts['points_counted']} of {scan.rows} points lie in at least one polygon; "
        f"{counts['points_in_no_polygon']} lie in none (not counted anywhere; {scan.missing} of them have no "
        f"geometry); {counts['points_in_several_polygons']} lie on a boundary several polygons share and "
        "are counted in each of them"
    )
    ctx.notes.append(DIRECT_PATH_NOTE.format(values=f" with the {value_field!r} of each" if value_field else ""))
    return _DirectFound(polygons, poly_rows, values, scan, counts)


def _direct_or_note(ctx: RunContext, value_field: str | None) -> bool:
    """Whether the direct path takes this run; when not, the manifest says why the WKB path did."""
    problem = _points_file_problem(ctx, value_field)
    if problem is not None:
        ctx.notes.append(f"{WKB_PATH_NOTE}; the direct path was not taken because {problem}")
    return problem is None


def count_in_polygons_sedonadb(ctx: RunContext) -> None:
    import numpy as np

    _set_engine(ctx, ("input_path", "points_path"))
    if not _direct_or_note(ctx, None):
        join_ops.count_in_polygons(ctx, find_pairs=_intersecting)
        return
    found = _direct_points_in_polygons(ctx, ["point_count"], None)
    out = found.polygons.copy()
    out["point_count"] = np.bincount(found.polygon_rows, minlength=len(out)).astype("int64")
    ctx.parameters["x-mapsmith:join_counts"] = found.counts
    rows, window = join_ops._rows(out, ctx.arguments)
    ctx.answer = {
        **found.counts,
        "total_point_count": int(out["point_count"].sum()),
        "boundary_rule": join_ops.BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }
    join_ops.write_output(ctx, out)


def summarize_points_in_polygons_sedonadb(ctx: RunContext) -> None:
    """join_ops.summarize_points_in_polygons on the direct path: the same statistics, from the pairs."""

    _set_engine(ctx, ("input_path", "points_path"))
    name = ctx.arguments["field"]
    if not _direct_or_note(ctx, name):
        join_ops.summarize_points_in_polygons(ctx, find_pairs=_intersecting)
        return
    statistics = join_ops._parse_statistics(ctx.arguments["statistics"])
    ctx.parameters["statistics"] = ",".join(statistics)
    columns = {s: f"{name}_{s}" for s in statistics}
    null_column = f"{name}_null_count"
    found = _direct_points_in_polygons(ctx, [*columns.values(), null_column], name)
    assert found.values is not None
    join_ops.finish_summary(ctx, found.polygons, found.polygon_rows, found.values, found.scan.null_values, found.counts)


# -- dissolve_layer, groups unioned by SedonaDB --------------------------------------------------

UNION_LABEL = "SedonaDB's ST_UnaryUnion (GEOS's unary union, as shapely.union_all)"
DISSOLVE_PATH_NOTE = (
    "engine path: WKB -- the GeoPandas engine's code read, checked, grouped, aggregated and wrote the layer; "
    "SedonaDB unioned each group's geometries, handed to it as one GEOMETRYCOLLECTION per group in input order, "
    "with ST_UnaryUnion (GEOS's unary union, the call shapely.union_all makes, so the vertices come out as "
    "GeoPandas gives them). ST_Union_Agg is not used: it is not GEOS, and it moves vertices by up to a few "
    "millimetres over a 1,000 km extent, drops collinear nodes and returns nothing for lines and points"
)


def dissolve_layer_eligible(ctx: RunContext) -> str | None:
    """Why SedonaDB cannot take this dissolve (installed? CRS known? big enough?), or None."""
    if not hasattr(overlay_ops, "_dissolve_with"):  # an overlay_ops without the union hook this engine calls
        return "this overlay_ops has no union hook (dissolve_layer(union_groups=...)) for the SedonaDB engine to use"
    missing = missing_modules()
    if missing:
        return f"SedonaDB is not installed here (missing: {', '.join(missing)}); fix: {SEDONADB_FIX}"
    info = ctx.inputs["input_path"]
    if info.crs_wkt is None:
        return "the CRS of input_path is unknown; the SedonaDB engine dissolves only layers whose CRS is known"
    if info.feature_count is None:
        return "the feature count is unknown from the input's header, so the size threshold cannot be applied"
    return _too_small(ctx, info.feature_count, DISSOLVE_MIN_FEATURES, "SedonaDB's dissolve")


def sedonadb_union_groups(geoms: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """The union of each group (0 .. count-1) of ``geoms``, by SedonaDB, as shapely.union_all gives it.

    Each group goes to SedonaDB as one collection of its geometries in input order (shapely.union_all
    unions such a collection; None is left out of it, and a group with none is an empty collection).
    """

    import numpy as np
    import shapely

    out = np.empty(count, dtype=object)
    if count == 0:
        return out
    geoms = np.asarray(geoms, dtype=object)
    order = np.argsort(groups, kind="stable")  # within a group, input order
    present = order[~shapely.is_missing(geoms[order])]
    collections = np.empty(count, dtype=object)
    if len(present):
        shapely.geometrycollections(geoms[present], indices=groups[present], out=collections)
    collections[shapely.is_missing(collections)] = shapely.GeometryCollection()
    with _geometry_views(collections) as (view,):
        found = _connection().sql(f"SELECT n, ST_AsBinary(ST_UnaryUnion(g)) AS u FROM {view}").to_arrow_table()
    out[found.column("n").to_numpy()] = shapely.from_wkb(found.column("u").to_numpy(zero_copy_only=False))
    return out


def dissolve_layer_sedonadb(ctx: RunContext) -> None:
    """dissolve_layer with each group's union done by SedonaDB; everything else is overlay_ops' code."""
    from importlib import metadata

    import sedonadb

    info = ctx.inputs["input_path"]
    ctx.notes.append(
        f"engine: SedonaDB ran because it is installed, input_path's CRS ({info.crs_label}) is known, and it has "
        f"{info.feature_count or 0:,} features, at least the {min_features(ctx, DISSOLVE_MIN_FEATURES):,} from "
        f"which it is preferred to GeoPandas ({MIN_FEATURES_ENV} set it)"
    )
    ctx.set_engine(ENGINE, sedonadb.__version__, **{"geoarrow-pyarrow": metadata.version("geoarrow-pyarrow")})
    ctx.engine_components.update(engine_versions())
    ctx.notes.append(DISSOLVE_PATH_NOTE)
    overlay_ops.dissolve_layer(ctx, union_groups=sedonadb_union_groups, union_label=UNION_LABEL)


# -- overlay_layers (how='intersection'): pairs and pieces by SedonaDB ---------------------------

OVERLAY_LABEL = "SedonaDB (ST_Intersects join, ST_Intersection per pair)"


def overlay_layers_eligible(ctx: RunContext) -> str | None:
    """Why SedonaDB cannot take this overlay (the intersection only; installed? one known CRS? asked for?)."""
    how = ctx.arguments.get("how")
    if how != "intersection":
        return (
            f"how={how!r}: SedonaDB's overlay engine does the intersection only; the other modes' pieces "
            "(differences of each polygon with everything it meets) are geopandas.overlay's"
        )
    return _eligible(ctx, ("input_path", "overlay_path"), OVERLAY_MIN_FEATURES, "SedonaDB's overlay")


def sedonadb_intersections(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left row, right row, their intersection) for every intersecting pair, sorted by both rows."""

    import numpy as np
    import shapely

    if len(left) == 0 or len(right) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.empty(0, dtype=object)
    with _geometry_views(left, right) as (lv, rv):
        found = (
            _connection()
            .sql(
                f"SELECT l.n AS i, r.n AS j, ST_AsBinary(ST_Intersection(l.g, r.g)) AS x "
                f"FROM {lv} AS l JOIN {rv} AS r ON ST_Intersects(l.g, r.g)"
            )
            .to_arrow_table()
        )
    i = found.column("i").to_numpy().astype(np.int64)
    j = found.column("j").to_numpy().astype(np.int64)
    pieces = shapely.from_wkb(found.column("x").to_numpy(zero_copy_only=False))
    order = np.lexsort((j, i))  # the order of geopandas' sorted index query: input row, then overlay row
    return i[order], j[order], pieces[order]


def sedonadb_overlay_intersection(first: gpd.GeoDataFrame, second: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """geopandas.overlay(first, second, how="intersection", keep_geom_type=False) with the pair search and
    the intersections done by SedonaDB: the same pieces in the same order, fields suffixed _1/_2 where the
    layers share a name, the geometry column last. The inputs are valid (overlay_layers refuses others)."""
    import geopandas as gpd
    import numpy as np
    import pandas as pd
    import shapely

    a, b = first.total_bounds, second.total_bounds
    boxes_meet = a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]
    if boxes_meet:
        i, j, pieces = sedonadb_intersections(first.geometry.values, second.geometry.values)
    else:
        i, j, pieces = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.empty(0, dtype=object)
    polygonal = np.isin(shapely.get_type_id(pieces), (3, 6))  # Polygon, MultiPolygon
    pieces[polygonal] = shapely.make_valid(pieces[polygonal])  # as geopandas does to polygonal pieces
    left = first.drop(columns=first.geometry.name).reset_index(drop=True).take(i).reset_index(drop=True)
    right = second.drop(columns=second.geometry.name).reset_index(drop=True).take(j).reset_index(drop=True)
    shared = set(left.columns) & set(right.columns)
    left = left.rename(columns={c: f"{c}_1" for c in shared})
    right = right.rename(columns={c: f"{c}_2" for c in shared})
    frame = pd.concat([left, right], axis=1)
    frame["geometry"] = gpd.GeoSeries(pieces, crs=first.crs)
    return gpd.GeoDataFrame(frame, geometry="geometry", crs=first.crs)


def overlay_layers_sedonadb(ctx: RunContext) -> None:
    """overlay_layers(how='intersection') with the pairs and pieces from SedonaDB; everything else is overlay_ops'."""
    keys = ("input_path", "overlay_path")
    _set_engine(ctx, keys)
    ctx.notes.append(
        f"{WKB_PATH_NOTE}; SedonaDB also computed each pair's intersection (ST_Intersection, GEOS as in shapely)"
    )
    overlay_ops.overlay_layers(ctx, intersection=sedonadb_overlay_intersection, intersection_label=OVERLAY_LABEL)


# -- nearest_join: the planar nearest by SedonaDB's distance join ---------------------------------

NEAREST_ROUND_FACTOR = 4.0  # each search round widens the radius this much


def nearest_join_eligible(ctx: RunContext) -> str | None:
    return _eligible(ctx, ("input_path", "join_path"), NEAREST_MIN_FEATURES, "SedonaDB's nearest search")


def _extent_diagonal(*geoms: np.ndarray) -> float:
    import numpy as np
    import shapely

    boxes = np.array([shapely.total_bounds(g) for g in geoms if len(g)])
    if not len(boxes) or np.isnan(boxes).all():
        return 0.0
    x0, y0 = np.nanmin(boxes[:, 0]), np.nanmin(boxes[:, 1])
    x1, y1 = np.nanmax(boxes[:, 2]), np.nanmax(boxes[:, 3])
    return float(np.hypot(x1 - x0, y1 - y0))


def sedonadb_planar_nearest(
    left: np.ndarray, right: np.ndarray, limit: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What shapely's STRtree.query_nearest(all_matches=True, max_distance=limit) gives, from SedonaDB.

    SedonaDB's KNN join measures from centroids where a geometry is not a point, so this uses exact
    distance joins (ST_DWithin, ST_Distance: GEOS, as shapely) over a radius that widens each round.
    An input row is settled in the first round that finds any join row within the radius: its nearest
    lies within that radius too, so every row at the least distance has been found. The last round's
    radius is the diagonal of both layers' extent, which holds every pair.
    """

    import numpy as np
    import shapely

    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))
    usable_left = ~(shapely.is_missing(left) | shapely.is_empty(left))
    usable_right = ~(shapely.is_missing(right) | shapely.is_empty(right))
    if not usable_left.any() or not usable_right.any():
        return none
    diagonal = _extent_diagonal(left[usable_left], right[usable_right])
    if limit is not None:
        radii = [float(limit)]
    else:
        minx, miny, maxx, maxy = shapely.total_bounds(right[usable_right])
        spacing = max(float(np.sqrt(max((maxx - minx) * (maxy - miny), 0.0) / usable_right.sum())), diagonal * 1e-6)
        radii = []
        radius = spacing
        while radius < diagonal:
            radii.append(radius)
            radius *= NEAREST_ROUND_FACTOR
        radii.append(max(diagonal, spacing))
    found_i, found_j, found_d = [], [], []
    pending = np.flatnonzero(usable_left)
    with _geometry_views(right) as (rv,):
        for radius in radii:
            if not len(pending):
                break
            subset = np.full(len(left), None, dtype=object)
            subset[pending] = left[pending]
            with _geometry_views(subset) as (lv,):
                got = (
                    _connection()
                    .sql(
                        f"SELECT l.n AS i, r.n AS j, ST_Distance(l.g, r.g) AS d FROM {lv} AS l "
                        f"JOIN {rv} AS r ON ST_DWithin(l.g, r.g, {radius!r})"
                    )
                    .to_arrow_table()
                )
            i = got.column("i").to_numpy().astype(np.int64)
            j = got.column("j").to_numpy().astype(np.int64)
            d = got.column("d").to_numpy().astype(float)
            if len(i):
                least = np.full(len(left), np.inf)
                np.minimum.at(least, i, d)
                keep = d == least[i]  # every join row at exactly the least distance, as all_matches=True
                found_i.append(i[keep])
                found_j.append(j[keep])
                found_d.append(d[keep])
            pending = np.setdiff1d(pending, i)
    if not found_i:
        return none
    i, j, d = np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_d)
    order = np.lexsort((j, i))  # STRtree's order: input row, then tree row
    return i[order], j[order], d[order]


def nearest_join_sedonadb(ctx: RunContext) -> None:
    """nearest_join with the planar nearest found by SedonaDB; tie rule, geodesic measures and the rest are
    join_ops' code."""
    _set_engine(ctx, ("input_path", "join_path"))
    ctx.notes.append(
        f"{WKB_PATH_NOTE}; the planar nearest was found with exact distance joins (ST_DWithin over a radius "
        f"widened {NEAREST_ROUND_FACTOR:g}x a round, ST_Distance), not ST_KNN, which measures from centroids"
    )
    join_ops.nearest_join(ctx, planar_nearest=sedonadb_planar_nearest)
