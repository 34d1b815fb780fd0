"""count_in_polygons and summarize_points_in_polygons on DuckDB: points_path read, checked, matched and
aggregated in one DuckDB query (points_in_polygons_sql), so the points never reach Python.

The polygons are read, checked (validity, field clashes) and written by the GeoPandas engine's code, as
on SedonaDB's direct path: at scale the points are the many rows, the polygons a few thousand. Eligible
only where the answer and record are the GeoPandas engine's: points in GeoParquet, both CRS known and
equal, no weighted_mean (computed on pairs, points_in_polygons_sql says why). It must never join layers
in two CRS or count a point the GeoPandas engine would not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith_opensource.common import read_input, require_valid
from mapsmith_opensource.duckdb_spatial import valid_sql
from mapsmith_opensource.join_ops import points_in_polygons as points_ops
from mapsmith_opensource.join_ops import points_in_polygons_sql as sql
from mapsmith_opensource.join_ops import shared

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

ENGINE = "duckdb"
# From how many points the router prefers this engine to GeoPandas (points_in_polygons.DUCKDB_POINTS_PREFERENCE;
# SedonaDB, where installed, is preferred to both from its own threshold). It was once never chosen by default:
# whole MapSmith runs, fresh processes, benchmarks/bench_scale.py's points x 10,000 overlapping polygons, CPU seconds
# of the whole process (load average 10-12): at 300,000 points DuckDB 4.4 s, GeoPandas 3.6 s, SedonaDB 3.5 s; at
# 1,000,000 DuckDB 11.4 s, GeoPandas 6.7 s, SedonaDB 6.1 s; inside DuckDB's query then, the LEFT join of every
# point, the per-point grouping set and validity took 2.5 s and ST_Contains on every pair 3.4 s. Since it groups the
# matched points only (points_in_polygons_sql.grouped_sql), measured again for issue 22: MapSmith(env).run, work after
# warm(), the engine named by MAPSMITH_ENGINE, 10,000 overlapping zones, interleaved pairs, load 1.4-7.5 (the
# machine was shared), work / CPU seconds of the process / peak RSS (/usr/bin/time): at 1,000,000 points
# count_in_polygons DuckDB 2.66-3.10 s, 4.2-5.0 s, 366-383 MiB against GeoPandas 3.47-4.40 s, 5.1-6.8 s, 777-778 MiB
# (three pairs); summarize_points_in_polygons DuckDB 3.12-4.51 s, 5.0-6.9 s, 447-466 MiB against GeoPandas
# 4.14-4.59 s, 5.9-7.1 s, 775-777 MiB (three pairs); at 300,000 points count_in_polygons 1.27, 1.27 s against 1.45,
# 1.44 s, but summarize_points_in_polygons 1.38, 1.23 s against 1.31, 1.45 s; at 100,000 count_in_polygons 0.79,
# 0.81 s against 1.01, 0.80 s. Preferred from 1,000,000 points, where it was faster and used half the memory.
DUCKDB_POINTS_MIN_ROWS = 1_000_000


def eligible(ctx: RunContext) -> str | None:
    """Why DuckDB cannot take this points-in-polygons run, or None when it can."""
    from pyproj import CRS

    field = ctx.arguments.get("field")
    problem = sql.points_file_problem(ctx, field, "DuckDB")
    if problem is not None:
        return problem
    if points_ops.WEIGHTED_MEAN in points_ops._parse_statistics(ctx.arguments.get("statistics") or "count"):
        return "weighted_mean is computed from (polygon, point) pairs, which the DuckDB engine does not return"
    first, second = ctx.inputs["input_path"], ctx.inputs["points_path"]
    if first.crs_wkt is None or second.crs_wkt is None:
        return "the DuckDB engine matches only layers whose CRS is known"
    if not CRS.from_wkt(first.crs_wkt).equals(CRS.from_wkt(second.crs_wkt), ignore_axis_order=True):
        return (
            f"input_path is in {first.crs_label} and points_path in {second.crs_label}; the DuckDB engine matches only "
            "layers in one CRS (GeoPandas aligns points_path first, recorded)"
        )
    from mapsmith.router import named_by_operator

    rows = second.feature_count or 0
    if rows < DUCKDB_POINTS_MIN_ROWS and not named_by_operator(ctx, "duckdb"):
        return (
            f"points_path has {rows:,} features, fewer than the {DUCKDB_POINTS_MIN_ROWS:,} from which DuckDB is "
            "preferred to GeoPandas (DUCKDB_POINTS_MIN_ROWS, measured)"
        )
    return None


def _set_engine(ctx: RunContext) -> None:
    from mapsmith_opensource.common import engine_versions
    from mapsmith_opensource.join_ops.spatial_join_duckdb import set_duckdb_engine

    set_duckdb_engine(ctx, ENGINE)
    ctx.engine_components.update(engine_versions())  # the GeoPandas stack reads, checks and writes the polygons


def _aggregated(ctx: RunContext, new_fields: list[str], value_field: str | None) -> tuple[Any, sql.Aggregated]:
    """The polygons (read and checked by the GeoPandas engine's code) and the aggregate, run in DuckDB."""
    import uuid

    import numpy as np
    import pyarrow as pa
    import shapely

    from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

    polygons = read_input(ctx)
    path = ctx.paths["points_path"]
    geometry = sql.points_geometry(path)
    shared._refuse_existing(ctx, polygons, new_fields)
    require_valid(ctx, polygons, "input_path", shared.UNDEFINED_ON_INVALID)
    source, row_id = sql.duckdb_points_source(path)
    g = f"{sql.quote(geometry)}::GEOMETRY"  # the CRS dropped: both layers' are equal (eligibility)
    value = sql.as_double(value_field)
    scan = sql.points_scan_sql(source, g, value, valid_sql(g), sql.kept_point_facts(path))
    zones = f"mapsmith_polygons_{uuid.uuid4().hex}"
    con = duckdb_database().cursor()  # a cursor of its own: its registered table is seen by no other run
    how = "grouped"

    def register(near: tuple[Any, Any] | None) -> str:
        """The polygons as a relation (n, g). ``near`` is always None: DuckDB never counts by first polygon
        (aggregate's by_first_polygon), so no neighbours are registered."""
        assert near is None
        geoms = np.asarray(polygons.geometry.values, dtype=object)
        wkb = pa.array(shapely.to_wkb(geoms), type=pa.binary())
        con.register(zones, pa.table({"n": pa.array(np.arange(len(polygons), dtype=np.int64)), "wkb": wkb}))
        return f"(SELECT n, ST_GeomFromWKB(wkb) AS g FROM {zones})"

    try:
        if len(polygons) == 0:
            found = sql.read_point_facts(con.execute(scan).to_arrow_table(), 0)
        else:
            found, how = sql.aggregate(
                lambda q: con.execute(q).to_arrow_table(),
                f"(SELECT {row_id} AS id, {g} AS g, {value} AS v FROM {source})",
                f"(SELECT {g} AS g, {value} AS v FROM {source})",
                register,
                scan,
                polygons.geometry,
                sql.single_points(ctx.inputs["points_path"].geometry_types),
                by_first_polygon=False,
                values=value_field is not None,
            )
    finally:
        con.close()
    points_ops.record_aggregated(ctx, polygons.crs, found, path, geometry, sql.path_note("DuckDB", how))
    return polygons, found


def count_in_polygons(ctx: RunContext) -> None:
    _set_engine(ctx)
    polygons, found = _aggregated(ctx, ["point_count"], None)
    points_ops.finish_count(ctx, polygons, found.point_count, found.counts)


def summarize_points_in_polygons(ctx: RunContext) -> None:
    _set_engine(ctx)
    name = ctx.arguments["field"]
    statistics = points_ops._parse_statistics(ctx.arguments["statistics"])
    ctx.parameters["statistics"] = ",".join(statistics)
    new_fields = [*(f"{name}_{s}" for s in statistics), f"{name}_null_count"]
    polygons, found = _aggregated(ctx, new_fields, name)
    points_ops.write_summary(ctx, polygons, found.statistics, found.null_count, found.facts.null_values, found.counts)
