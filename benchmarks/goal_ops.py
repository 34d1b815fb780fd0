"""The work each goal benchmark times: one operation, as each raw engine would do it and as MapSmith is asked.

For every operation of issue 22 this names its inputs, the SQL a data engineer would hand DuckDB, SedonaDB
and Apache Sedona on Spark (tables ``points``, ``zones``, ``sites``, ``parcels``, ``mask``), the GeoPandas
calls, MapSmith's arguments, and how an output is checked: the integer key columns that are sorted and
digested and one float measure compared with a tolerance. It must never time, spawn or write anything:
``goal_children.py`` runs these, ``bench_goals.py`` orders and records the runs.

The engines' SQL differs only where their function names or signatures do (``ST_Union_Agg`` against
``ST_Union_Aggr``, ``ST_Transform``'s arguments, a k-nearest join); everything else is one text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RAW_ENGINES = ("geopandas", "duckdb", "sedonadb", "spark")
BUFFER_METERS = 50.0
BUFFER_QUAD_SEGS = 16
NEAREST_MAX_METERS = 10_000.0
TARGET_CRS = "EPSG:4326"
SELECT_WHERE = "value > 1.0 AND kind = 'well'"
# A measure is a float sum; engines differ in the last bits of GEOS/PROJ arithmetic and summation order
MEASURE_RELATIVE_TOLERANCE = 1e-6

_POINT_PAIRS = "p.point_id, p.value, p.kind, z.zone_id, z.zone_name, p.geometry"
_JOIN = "points AS p JOIN zones AS z ON ST_Intersects(p.geometry, z.geometry)"
_COUNTS = (
    "SELECT z.zone_id, z.zone_name, COALESCE(c.point_count, 0) AS point_count{extra}, z.geometry FROM zones AS z "
    "LEFT JOIN (SELECT z2.zone_id, count(*) AS point_count{inner} FROM points AS p JOIN zones AS z2 "
    "ON ST_Intersects(p.geometry, z2.geometry) GROUP BY z2.zone_id) AS c ON c.zone_id = z.zone_id"
)


@dataclass(frozen=True)
class GoalOp:
    """One operation's work, the same file-to-file job for every engine."""

    name: str
    inputs: tuple[str, ...]  # stems of the input files (``<stem>.parquet``)
    mapsmith_arguments: dict[str, Any]
    sql: dict[str, str]  # engine -> one SELECT; absent: the engine is not measured for this operation
    geopandas: Callable[[dict[str, Any]], Any]  # frames by stem -> the output frame
    keys: tuple[str, ...]  # integer columns digested (sorted) to compare outputs; NULL reads as -1
    measure: str | None  # a DuckDB aggregate over the output table ``t`` (geometry decoded), or None
    # An integer DuckDB aggregate over ``t`` that must be equal, not close: how many polygons the output holds, where
    # an engine may give the same area as other geometry (dissolve_layer: SedonaDB's ST_Union_Agg gives 81 polygons
    # over the 46 bands of the 100,000 benchmark parcels where GEOS gives 5,047; band 0 one polygon of 95 coordinates
    # against 146 polygons and 2,524 coordinates, at an area 7e-9 smaller overall)
    parts: str | None = None
    output_suffix: str = ".parquet"
    table_output: bool = False  # the output has no geometry column
    features_from: str = "points"  # the input whose size is the row's "features"
    notes: str = ""
    extra_sql: dict[str, str] = field(default_factory=dict)


def _sjoin(f: dict[str, Any]) -> Any:
    import geopandas as gpd

    out = gpd.sjoin(f["points"], f["zones"], how="inner", predicate="intersects")
    return out[["point_id", "value", "kind", "zone_id", "zone_name", "geometry"]]


def _counts(f: dict[str, Any], summarize: bool) -> Any:
    import geopandas as gpd

    pairs = gpd.sjoin(f["points"], f["zones"], how="inner", predicate="intersects")
    grouped = pairs.groupby("zone_id")
    zones = f["zones"].set_index("zone_id", drop=False)
    zones["point_count"] = grouped.size().reindex(zones.index, fill_value=0).astype("int64")
    if summarize:
        zones["value_sum"] = grouped["value"].sum().reindex(zones.index, fill_value=0.0)
        zones["value_mean"] = grouped["value"].mean().reindex(zones.index)
    return zones.reset_index(drop=True)


def _nearest(f: dict[str, Any]) -> Any:
    import geopandas as gpd

    out = gpd.sjoin_nearest(
        f["points"], f["sites"], how="left", max_distance=NEAREST_MAX_METERS, distance_col="distance_m"
    )
    return out.drop(columns="index_right")


def _dissolve(f: dict[str, Any]) -> Any:
    return f["parcels"].dissolve(by="band", as_index=False)[["band", "geometry"]]


def _overlay(f: dict[str, Any]) -> Any:
    import geopandas as gpd

    return gpd.overlay(f["parcels"], f["zones"], how="intersection", keep_geom_type=True)


def _buffer(f: dict[str, Any]) -> Any:
    out = f["points"].copy()
    out["geometry"] = out.geometry.buffer(BUFFER_METERS, quad_segs=BUFFER_QUAD_SEGS)
    return out


def _select(f: dict[str, Any]) -> Any:
    p = f["points"]
    return p[(p["value"] > 1.0) & (p["kind"] == "well")]


def _clip(f: dict[str, Any]) -> Any:
    import geopandas as gpd

    return gpd.clip(f["points"], f["mask"])


def _count_table(f: dict[str, Any]) -> Any:
    import geopandas as gpd

    pairs = gpd.sjoin(f["points"], f["zones"], how="inner", predicate="intersects")
    return pairs.groupby("zone_id").size().rename("n").reset_index()


_RUN_SQL = (
    "SELECT z.zone_id, count(*) AS n FROM read_parquet('points.parquet') AS p "
    "JOIN read_parquet('zones.parquet') AS z ON ST_Intersects(p.geometry, z.geometry) GROUP BY z.zone_id"
)
_RUN_SQL_TABLES = "SELECT z.zone_id, count(*) AS n FROM " + _JOIN + " GROUP BY z.zone_id"


def _same(sql: str, engines: tuple[str, ...] = ("duckdb", "sedonadb", "spark")) -> dict[str, str]:
    return dict.fromkeys(engines, sql)


OPERATIONS: dict[str, GoalOp] = {
    op.name: op
    for op in (
        GoalOp(
            "spatial_join",
            ("points", "zones"),
            {"input_path": "points.parquet", "join_path": "zones.parquet", "how": "inner"},
            _same(f"SELECT {_POINT_PAIRS} FROM {_JOIN}"),
            _sjoin,
            keys=("point_id", "zone_id"),
            measure=None,
        ),
        GoalOp(
            "count_in_polygons",
            ("points", "zones"),
            {"input_path": "zones.parquet", "points_path": "points.parquet"},
            _same(_COUNTS.format(extra="", inner="")),
            lambda f: _counts(f, summarize=False),
            keys=("zone_id", "point_count"),
            measure=None,
        ),
        GoalOp(
            "summarize_points_in_polygons",
            ("points", "zones"),
            {
                "input_path": "zones.parquet",
                "points_path": "points.parquet",
                "field": "value",
                "statistics": "count,sum,mean",
            },
            _same(
                _COUNTS.format(
                    extra=", COALESCE(c.value_sum, 0.0) AS value_sum, c.value_mean AS value_mean",
                    inner=", sum(p.value) AS value_sum, avg(p.value) AS value_mean",
                )
            ),
            lambda f: _counts(f, summarize=True),
            keys=("zone_id",),
            measure="sum(value_sum)",
        ),
        GoalOp(
            "nearest_join",
            ("points", "sites"),
            {
                "input_path": "points.parquet",
                "join_path": "sites.parquet",
                "max_distance_meters": NEAREST_MAX_METERS,
            },
            {
                # DuckDB Spatial has no k-nearest join: candidates within the distance, the closest kept
                "duckdb": "SELECT p.point_id, p.value, p.kind, n.site_id, n.distance_m, p.geometry FROM points AS p "
                "LEFT JOIN (SELECT p.point_id, s.site_id, ST_Distance(p.geometry, s.geometry) AS distance_m "
                "FROM points AS p JOIN sites AS s ON ST_DWithin(p.geometry, s.geometry, "
                f"{NEAREST_MAX_METERS}) QUALIFY row_number() OVER (PARTITION BY p.point_id "
                "ORDER BY distance_m, s.site_id) = 1) AS n ON n.point_id = p.point_id",
                "sedonadb": "SELECT p.point_id, p.value, p.kind, "
                f"CASE WHEN ST_Distance(p.geometry, s.geometry) <= {NEAREST_MAX_METERS} THEN s.site_id END "
                "AS site_id, ST_Distance(p.geometry, s.geometry) AS distance_m, p.geometry FROM points AS p "
                "JOIN sites AS s ON ST_KNN(p.geometry, s.geometry, 1, false)",
                "spark": "SELECT p.point_id, p.value, p.kind, "
                f"CASE WHEN ST_Distance(p.geometry, s.geometry) <= {NEAREST_MAX_METERS} THEN s.site_id END "
                "AS site_id, ST_Distance(p.geometry, s.geometry) AS distance_m, p.geometry FROM points AS p "
                "JOIN sites AS s ON ST_KNN(p.geometry, s.geometry, 1, false)",
            },
            _nearest,
            keys=("point_id", "site_id"),
            measure=None,
        ),
        GoalOp(
            "dissolve_layer",
            ("parcels",),
            {"input_path": "parcels.parquet", "by_fields": "band"},
            {
                "duckdb": "SELECT band, ST_Union_Agg(geometry) AS geometry FROM parcels GROUP BY band",
                "sedonadb": "SELECT band, ST_Union_Agg(geometry) AS geometry FROM parcels GROUP BY band",
                "spark": "SELECT band, ST_Union_Aggr(geometry) AS geometry FROM parcels GROUP BY band",
            },
            _dissolve,
            keys=("band",),
            measure="sum(ST_Area(geometry))",
            features_from="parcels",
            parts="sum(ST_NumGeometries(geometry))",
        ),
        GoalOp(
            "overlay_layers",
            ("parcels", "zones"),
            {"input_path": "parcels.parquet", "overlay_path": "zones.parquet", "how": "intersection"},
            _same(
                "SELECT a.parcel_id, a.band, b.zone_id, b.zone_name, ST_Intersection(a.geometry, b.geometry) "
                "AS geometry FROM parcels AS a JOIN zones AS b ON ST_Intersects(a.geometry, b.geometry) "
                "WHERE ST_Area(ST_Intersection(a.geometry, b.geometry)) > 0"
            ),
            _overlay,
            keys=("parcel_id", "zone_id"),
            measure="sum(ST_Area(geometry))",
            features_from="parcels",
            notes="pairs that only touch (no area in common) are left out, as a polygon overlay leaves them out",
        ),
        GoalOp(
            "buffer_layer",
            ("points",),
            {"input_path": "points.parquet", "distance_meters": BUFFER_METERS},
            {
                "duckdb": "SELECT point_id, value, kind, "
                f"ST_Buffer(geometry, {BUFFER_METERS}, {BUFFER_QUAD_SEGS}) AS geometry FROM points",
                "sedonadb": "SELECT point_id, value, kind, "
                f"ST_Buffer(geometry, {BUFFER_METERS}, 'quad_segs={BUFFER_QUAD_SEGS}') AS geometry FROM points",
                "spark": "SELECT point_id, value, kind, "
                f"ST_Buffer(geometry, {BUFFER_METERS}, false, 'quad_segs={BUFFER_QUAD_SEGS}') AS geometry FROM points",
            },
            _buffer,
            keys=("point_id",),
            measure="sum(ST_Area(geometry))",
        ),
        GoalOp(
            "reproject_layer",
            ("points",),
            {"input_path": "points.parquet", "target_crs": TARGET_CRS},
            {
                "duckdb": "SELECT point_id, value, kind, "
                f"ST_Transform(geometry, 'EPSG:32610', '{TARGET_CRS}', always_xy := true) AS geometry FROM points",
                "sedonadb": f"SELECT point_id, value, kind, ST_Transform(geometry, '{TARGET_CRS}') AS geometry "
                "FROM points",
                "spark": "SELECT point_id, value, kind, "
                f"ST_Transform(geometry, 'EPSG:32610', '{TARGET_CRS}') AS geometry FROM points",
            },
            lambda f: f["points"].to_crs(TARGET_CRS),
            keys=("point_id",),
            measure="sum(ST_X(geometry))",
        ),
        GoalOp(
            "select_features",
            ("points",),
            {"input_path": "points.parquet", "where": SELECT_WHERE},
            _same(f"SELECT * FROM points WHERE {SELECT_WHERE}"),
            _select,
            keys=("point_id",),
            measure=None,
        ),
        GoalOp(
            "clip_layer",
            ("points", "mask"),
            {"input_path": "points.parquet", "mask_path": "mask.parquet"},
            _same(
                "SELECT p.point_id, p.value, p.kind, p.geometry FROM points AS p JOIN mask AS m "
                "ON ST_Intersects(p.geometry, m.geometry)"
            ),
            _clip,
            keys=("point_id",),
            measure=None,
        ),
        GoalOp(
            "run_sql",
            ("points", "zones"),
            {"sql": _RUN_SQL},
            _same(_RUN_SQL_TABLES),
            _count_table,
            keys=("zone_id", "n"),
            measure=None,
            table_output=True,
            notes="a table (no geometry): points per zone, from the SQL MapSmith is handed",
        ),
    )
}


def mapsmith_arguments(op: GoalOp, output_name: str) -> dict[str, Any]:
    """The arguments MapSmith is called with, the output path included."""
    return {**op.mapsmith_arguments, "output_path": output_name}
