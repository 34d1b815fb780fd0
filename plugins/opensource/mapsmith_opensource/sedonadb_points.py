"""count_in_polygons and summarize_points_in_polygons on SedonaDB.

The direct path (points_path in GeoParquet) has SedonaDB read the points itself, so they never become a
GeoDataFrame; otherwise the WKB path hands the GeoPandas engine's code SedonaDB's pair finder. Either
way the counts, statistics and records are join_ops.points_in_polygons' own. It must never import
sedonadb when imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith import parts
from mapsmith_opensource.common import read_input, record_input_validity, require_valid
from mapsmith_opensource.join_ops import points_in_polygons as points_ops
from mapsmith_opensource.join_ops import points_in_polygons_sql as sql
from mapsmith_opensource.join_ops import shared
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.sedonadb_ops import (
    DIRECT_MIN_FEATURES,
    DIRECT_PATH_NOTE,
    ENGINE,
    SEDONADB_PREFERENCE,
    WKB_MIN_FEATURES,
    WKB_PATH_NOTE,
    _connection,
    _eligible,
    _intersecting,
    _points_file_problem,
    _set_engine,
    _table,
    read_parquet,
)

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext


# the validator is points_in_polygons' own: a module-level name here because a registration names it
validate_summarize_points = points_ops.validate_summarize_points

REGISTRATIONS = (
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


def points_in_polygons_eligible(ctx: RunContext) -> str | None:
    if not hasattr(points_ops, "intersecting_pairs"):  # a module without the pair hook this engine calls
        return (
            "this join_ops.points_in_polygons has no pair-finder hook (intersecting_pairs) for the SedonaDB "
            "engine to use"
        )
    problem = _points_file_problem(ctx, ctx.arguments.get("field"))
    if problem is None:
        return _eligible(ctx, ("input_path", "points_path"), DIRECT_MIN_FEATURES, "SedonaDB's direct path")
    reason = _eligible(ctx, ("input_path", "points_path"), WKB_MIN_FEATURES, "SedonaDB's WKB path")
    return None if reason is None else f"{reason}; its direct path is not taken: {problem}"


_quote = sql.quote


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
    weights: np.ndarray | None  # the weight_field of each pair's point (NaN: none), when weighted_mean is asked
    scan: _PointScan
    counts: dict[str, int]


_first_invalid_points = sql.first_invalid_points


def _as_double(name: str | None) -> str:
    """A field as DOUBLE with NaN as null, or NULL when there is no field (the pairs path's form)."""
    return "NULL" if name is None else sql.as_double(name)


def _direct_points_in_polygons(
    ctx: RunContext, new_fields: list[str], value_field: str | None, weight_field: str | None = None
) -> _DirectFound:
    """join_ops.points_in_polygons._points_in_polygons with points_path read, checked and matched inside SedonaDB."""
    import uuid

    import numpy as np

    polygons = read_input(ctx)
    path = ctx.paths["points_path"]
    geometry = sql.points_geometry(path)
    sd = _connection()
    suffix = uuid.uuid4().hex
    points, zones = f"mapsmith_points_{suffix}", f"mapsmith_polygons_{suffix}"
    g = _quote(geometry)
    value, weight = _as_double(value_field), _as_double(weight_field)
    try:
        read_parquet(sd, parts.dataset_files(path)).to_view(points)
        facts = sql.read_point_facts(
            sd.sql(sql.points_scan_sql(points, g, value, kept=sql.kept_point_facts(path))).to_arrow_table(), 0
        ).facts
        nulls = facts.null_values if value_field is not None else 0
        scan = _PointScan(facts.rows, facts.missing, facts.invalid, nulls)
        record_input_validity(
            ctx,
            "points_path",
            rows=scan.rows,
            invalid_count=scan.invalid,
            missing_count=scan.missing,
            invalid=_first_invalid_points(path, geometry) if scan.invalid else [],
        )
        shared._refuse_existing(ctx, polygons, new_fields)
        require_valid(ctx, polygons, "input_path", shared.UNDEFINED_ON_INVALID)
        shared._record_topological(ctx, polygons.crs, "points_path", "points were tested against polygons")
        # Both layers' CRS are equal (eligibility); SedonaDB compares CRS by name, so both sides go without one.
        # The point ids number the points only to tell them apart (a point in several polygons), not by position.
        if len(polygons) == 0 or scan.rows == 0:  # nothing to match (and SedonaDB cannot type an empty WKB column)
            found = None
        else:
            sd.create_data_frame(_table(polygons.geometry.values)).to_view(zones)
            found = sd.sql(
                # inside: whether the point is in the polygon's interior, which tells a point inside polygons
                # that overlap from one on a boundary they share. Its cost, measured on 1M points x 10,000
                # squares (medians of 7, 2 shared cores): 4.26 s without it, 4.90 s with it. Returning the
                # points' x, y instead (4.56 s) and testing only the points in several polygons in Python
                # would be cheaper, but ST_X refuses the multipoints a points layer may hold.
                f"SELECT t.n AS i, p.id AS j, p.v AS v, p.w AS w, ST_Contains(t.g, p.g) AS inside FROM {zones} AS t "
                "JOIN (SELECT row_number() OVER () - 1 AS id, "
                f"ST_SetSRID({g}, 0) AS g, {value} AS v, {weight} AS w FROM {points}) AS p ON ST_Intersects(t.g, p.g)"
            ).to_arrow_table()
    finally:
        for name in (points, zones):
            try:
                sd.drop_view(name)
            except Exception:  # never registered (the failure above is the one to report)
                pass
    # copy=False: at 10M points every copy of the pairs is tens of megabytes
    poly_rows = point_ids = np.zeros(0, dtype=np.int64)
    inside = np.zeros(0, dtype=bool)
    values = np.zeros(0) if value_field is not None else None
    weights = np.zeros(0) if weight_field is not None else None
    if found is not None:
        poly_rows = found.column("i").to_numpy().astype(np.int64, copy=False)
        point_ids = found.column("j").to_numpy().astype(np.int64, copy=False)
        inside = found.column("inside").to_numpy(zero_copy_only=False).astype(bool, copy=False)
        values = (
            found.column("v").to_numpy(zero_copy_only=False).astype(float, copy=False)
            if value_field is not None
            else None
        )
        if weight_field is not None:
            weights = found.column("w").to_numpy(zero_copy_only=False).astype(float, copy=False)
        del found
    counts = points_ops.pair_counts(len(polygons), scan.rows, scan.missing, poly_rows, point_ids, inside)
    del point_ids, inside
    points_ops.record_pair_counts(ctx, counts)  # from here on as the GeoPandas engine records it
    ctx.notes.append(DIRECT_PATH_NOTE.format(values=f" with the {value_field!r} of each" if value_field else ""))
    return _DirectFound(polygons, poly_rows, values, weights, scan, counts)


def _direct_or_note(ctx: RunContext, value_field: str | None) -> bool:
    """Whether the direct path takes this run; when not, the manifest says why the WKB path did."""
    problem = _points_file_problem(ctx, value_field)
    if problem is not None:
        ctx.notes.append(f"{WKB_PATH_NOTE}; the direct path was not taken because {problem}")
    return problem is None


def _aggregated_in_sedonadb(ctx: RunContext, new_fields: list[str], value_field: str | None) -> tuple[Any, Any]:
    """The polygons (read and checked by the GeoPandas engine's code) and points_in_polygons_sql's aggregate,
    run in SedonaDB on points_path as read from its file: one row per polygon and one of point facts back."""
    import uuid

    polygons = read_input(ctx)
    path = ctx.paths["points_path"]
    geometry = sql.points_geometry(path)
    shared._refuse_existing(ctx, polygons, new_fields)
    require_valid(ctx, polygons, "input_path", shared.UNDEFINED_ON_INVALID)
    sd = _connection()
    suffix = uuid.uuid4().hex
    points, zones = f"mapsmith_points_{suffix}", f"mapsmith_polygons_{suffix}"
    g = sql.quote(geometry)
    how = "grouped"
    kept = sql.kept_point_facts(path)
    # Both layers' CRS are equal (eligibility); SedonaDB compares CRS by name, so both sides go without one.
    try:
        read_parquet(sd, parts.dataset_files(path)).to_view(points)
        scan = sql.points_scan_sql(points, g, sql.as_double(value_field), kept=kept)
        if len(polygons) == 0:  # nothing to match (and SedonaDB cannot type an empty WKB column)
            found = sql.read_point_facts(sd.sql(scan).to_arrow_table(), 0)
        else:
            # WHERE: a null geometry meets no polygon anyway, and without a filter SedonaDB 0.5 plans a one-row
            # file's projection with the column's type lost ("st_setsrid(binary, int64): No kernel"). The point
            # ids number the points only to tell them apart (a point in several polygons), not by position.
            light = (
                f"(SELECT ST_SetSRID({g}, 0) AS g, {sql.as_double(value_field)} AS v FROM {points} "
                f"WHERE {g} IS NOT NULL)"
            )
            relation = (
                f"(SELECT row_number() OVER () - 1 AS id, ST_SetSRID({g}, 0) AS g, {sql.as_double(value_field)} AS v "
                f"FROM {points} WHERE {g} IS NOT NULL)"
            )
            rows = ctx.inputs["points_path"].feature_count
            found, how = sql.aggregate(
                lambda q: sd.sql(q).to_arrow_table(),
                relation,
                light,
                lambda near: _register_zones(sd, zones, polygons.geometry.values, near),
                scan,
                polygons.geometry,
                sql.single_points(ctx.inputs["points_path"].geometry_types),
                by_first_polygon=rows is None or rows > sql.GROUPED_MAX_POINTS,
                values=value_field is not None,
            )
    finally:
        for name in (points, zones):
            try:
                sd.drop_view(name)
            except Exception:  # never registered (the failure above is the one to report)
                pass
    points_ops.record_aggregated(ctx, polygons.crs, found, path, geometry, sql.path_note("SedonaDB", how))
    return polygons, found


def _register_zones(sd: Any, name: str, geoms: Any, near: tuple[Any, Any] | None) -> str:
    """The polygons as the view ``name`` (n, g, and lower and higher: points_in_polygons_sql.neighbours' collections,
    when given), replacing the view a first query of the same run made."""
    import geoarrow.pyarrow as ga
    import pyarrow as pa
    import shapely

    table = _table(geoms)
    for column, collections in zip(("lower", "higher"), near or (), strict=False):
        wkb = pa.array(shapely.to_wkb(collections), type=pa.binary())
        table = table.append_column(column, ga.wkb().wrap_array(wkb))
    sd.create_data_frame(table).to_view(name, overwrite=True)
    return name


def count_in_polygons_sedonadb(ctx: RunContext) -> None:
    _set_engine(ctx, ("input_path", "points_path"))
    if not _direct_or_note(ctx, None):
        points_ops.count_in_polygons(ctx, find_pairs=_intersecting)
        return
    polygons, found = _aggregated_in_sedonadb(ctx, ["point_count"], None)
    points_ops.finish_count(ctx, polygons, found.point_count, found.counts)


def summarize_points_in_polygons_sedonadb(ctx: RunContext) -> None:
    """points_ops.summarize_points_in_polygons on the direct path: the same statistics, aggregated in SedonaDB
    (or, for weighted_mean, from the pairs it returns: aggregation.weighted_mean_by_group's refusals work on
    pairs)."""

    _set_engine(ctx, ("input_path", "points_path"))
    name = ctx.arguments["field"]
    if not _direct_or_note(ctx, name):
        points_ops.summarize_points_in_polygons(ctx, find_pairs=_intersecting)
        return
    statistics = points_ops._parse_statistics(ctx.arguments["statistics"])
    ctx.parameters["statistics"] = ",".join(statistics)
    columns = {s: f"{name}_{s}" for s in statistics}
    null_column = f"{name}_null_count"
    if points_ops.WEIGHTED_MEAN not in statistics:
        polygons, agg = _aggregated_in_sedonadb(ctx, [*columns.values(), null_column], name)
        points_ops.write_summary(ctx, polygons, agg.statistics, agg.null_count, agg.facts.null_values, agg.counts)
        return
    found = _direct_points_in_polygons(ctx, [*columns.values(), null_column], name, ctx.arguments.get("weight_field"))
    assert found.values is not None
    points_ops.finish_summary(
        ctx, found.polygons, found.polygon_rows, found.values, found.scan.null_values, found.counts, found.weights
    )
