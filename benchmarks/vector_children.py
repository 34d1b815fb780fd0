"""What runs inside each fresh process of ``bench_vector.py``: one engine, or MapSmith, buffering or joining once.

A child imports its engines (and connects DuckDB or SedonaDB) before its clock starts, does the work on the clock
("seconds") and reports it; the parent times the whole process from spawn to exit around it
(``common.spawn``), so every run gives the work alone and the whole process. The raw DuckDB and SedonaDB buffers
are the goal benchmark's (``goal_children.raw_duckdb`` / ``raw_sedonadb`` running ``goal_ops``' buffer_layer SQL
over the same ``points.parquet``, and ``raw_spark`` for Apache Sedona on Spark in local mode); the joins are written
here, as ``how='left'`` is this benchmark's and the goal benchmark's join is inner. A Spark run's peak memory adds
its JVM's (``goal_children._others_peak``; the parent sums them). Split out of ``bench_vector.py``. It must never
check an answer or decide a verdict.
"""

from __future__ import annotations

import time
from typing import Any

import common
import goal_children
from vector_breakdown import breakdown

# What every child imports before its clock starts, MapSmith's included: the engines are a cost of
# any process that buffers or joins, not of MapSmith.
ENGINE_IMPORTS = ("geopandas", "shapely", "pyproj", "pyogrio", "pyarrow.parquet")


def _import_engines() -> None:
    import importlib

    for name in ENGINE_IMPORTS:
        importlib.import_module(name)


def _mapsmith_app(workspace: str) -> tuple[Any, float]:
    start = time.perf_counter()
    from mapsmith.app import MapSmith

    app = MapSmith({"MAPSMITH_WORKSPACE": workspace})
    return app, time.perf_counter() - start


def child_buffer_baseline(spec: dict[str, Any]) -> dict[str, Any]:
    _import_engines()
    import geopandas as gpd

    t0 = time.perf_counter()
    frame = gpd.read_parquet(spec["input"])
    t1 = time.perf_counter()
    frame = frame.set_geometry(frame.geometry.buffer(spec["distance_meters"], quad_segs=spec["segments"]))
    t2 = time.perf_counter()
    frame.to_parquet(spec["output"], index=False)
    t3 = time.perf_counter()
    # Freeing a million GEOS polygons takes a second or more; MapSmith pays it inside run(), so this does too.
    del frame
    t4 = time.perf_counter()
    phases = {"read": t1 - t0, "buffer": t2 - t1, "write": t3 - t2, "free": t4 - t3}
    return {"seconds": t4 - t0, "setup_seconds": 0.0, "phases": phases}


def _buffer_arguments(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "input_path": spec["input"],
        "distance_meters": spec["distance_meters"],
        "segments_per_quarter_circle": spec["segments"],
        "output_path": spec["output"],
    }


def _join_arguments(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "input_path": spec["points"],
        "join_path": spec["zones"],
        "predicate": spec["predicate"],
        "how": spec["how"],
        "output_path": spec["output"],
    }


def _run_mapsmith(spec: dict[str, Any], operation: str, profile: bool) -> dict[str, Any]:
    _import_engines()
    app, setup = _mapsmith_app(spec["workspace"])
    # Engine setup stays outside the clock on every side: the raw DuckDB and SedonaDB runs connect (and DuckDB
    # loads spatial) before their clocks start, and a running MapSmith server's worker warms its engines once,
    # on starting (MapSmith.warm, as the goal benchmark's API runs do).
    started = time.perf_counter()
    app.warm()
    setup += time.perf_counter() - started
    arguments = _buffer_arguments(spec) if operation == "buffer_layer" else _join_arguments(spec)
    out, stats = common.run_mapsmith(app, operation, arguments, setup, profile)
    if stats is not None:
        # The stack's implementations of the operation, by function name (spatial_join has one per engine).
        names = sorted({getattr(i.function, "__name__", operation) for i in app.host.implementations[operation]})
        out["breakdown"] = breakdown(stats, names)
    return out


def child_join_geopandas(spec: dict[str, Any]) -> dict[str, Any]:
    _import_engines()
    import geopandas as gpd

    t0 = time.perf_counter()
    points = gpd.read_parquet(spec["points"])
    zones = gpd.read_parquet(spec["zones"])
    t1 = time.perf_counter()
    joined = gpd.sjoin(points, zones, how=spec["how"], predicate=spec["predicate"])
    joined = joined.drop(columns="index_right")  # sjoin's bookkeeping, not a field of either input
    t2 = time.perf_counter()
    joined.to_parquet(spec["output"], index=False)
    t3 = time.perf_counter()
    del points, zones, joined  # freed inside the clock, as MapSmith frees its frames inside run()
    t4 = time.perf_counter()
    phases = {"read": t1 - t0, "join": t2 - t1, "write": t3 - t2, "free": t4 - t3}
    return {"seconds": t4 - t0, "setup_seconds": 0.0, "phases": phases}


def duckdb_join_sql(con: Any, points: str, zones: str, output: str, how: str) -> str:
    """One statement: read both GeoParquet files, join on ST_Intersects, write GeoParquet."""

    def columns(path: str) -> list[tuple[str, str]]:
        return [(row[0], row[1]) for row in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [path]).fetchall()]

    def geometry(alias: str, name: str, kind: str) -> str:
        # DuckDB 1.5 decodes GeoParquet's WKB column to GEOMETRY itself; older versions hand back a BLOB.
        return f"ST_GeomFromWKB({alias}.{name})" if kind.upper() == "BLOB" else f"{alias}.{name}"

    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    p_cols, z_cols = columns(points), columns(zones)
    p_geom = next(kind for name, kind in p_cols if name == "geometry")
    z_geom = next(kind for name, kind in z_cols if name == "geometry")
    fields = [f"p.{quote(n)}" for n, _ in p_cols if n != "geometry"] + [
        f"z.{quote(n)}" for n, _ in z_cols if n != "geometry"
    ]
    join = {"left": "LEFT JOIN", "inner": "JOIN"}[how]
    return (
        f"COPY (SELECT {', '.join(fields)}, {geometry('p', 'geometry', p_geom)} AS geometry "
        f"FROM read_parquet('{points}') AS p {join} read_parquet('{zones}') AS z "
        f"ON ST_Intersects({geometry('p', 'geometry', p_geom)}, {geometry('z', 'geometry', z_geom)})) "
        f"TO '{output}' (FORMAT parquet)"
    )


def _fields(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return [name for name in pq.read_schema(path).names if name != "geometry"]


def sedonadb_join_sql(points: str, zones: str, how: str) -> str:
    """The same join as ``duckdb_join_sql`` in SedonaDB's SQL over the views ``p`` and ``z``."""

    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    fields = [f"p.{quote(n)}" for n in _fields(points)] + [f"z.{quote(n)}" for n in _fields(zones)]
    join = {"left": "LEFT JOIN", "inner": "JOIN"}[how]
    return (
        f"SELECT {', '.join(fields)}, p.geometry AS geometry FROM p {join} z ON ST_Intersects(p.geometry, z.geometry)"
    )


def child_join_sedonadb(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    import sedonadb

    sd = sedonadb.connect()
    sql = sedonadb_join_sql(spec["points"], spec["zones"], spec["how"])
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    sd.read_parquet(spec["points"]).to_view("p")
    sd.read_parquet(spec["zones"]).to_view("z")
    sd.sql(sql).to_parquet(spec["output"])
    return {"seconds": time.perf_counter() - t0, "setup_seconds": setup}


def _goal_child(run: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """A goal benchmark's raw engine child on this benchmark's points (``<workspace>/points.parquet``)."""
    keys = ("workspace", "output", "spark_master", "spark_memory")
    return run({"operation": "buffer_layer", **{k: spec[k] for k in keys if k in spec}})


def spark_join_sql(points: str, zones: str, how: str) -> str:
    """The same join in Spark SQL over the views ``p`` and ``z``. Apache Sedona plans an inner ST_Intersects join as a
    spatial join and a left one as a nested loop over every pair (1,000,000 x 10,000 here ran for more than seven
    minutes), so the left join is written as a data engineer would: the inner spatial join's matches, joined back to
    every point by its ``point_id`` (a unique key of this benchmark's points)."""
    fields = [f"p.`{n}`" for n in _fields(points)] + [f"m.`{n}`" for n in _fields(zones)]
    zone_fields = ", ".join(f"z.`{n}`" for n in _fields(zones))
    matches = f"SELECT p.point_id AS point_key, {zone_fields} FROM p JOIN z ON ST_Intersects(p.geometry, z.geometry)"
    join = {"left": "LEFT JOIN", "inner": "JOIN"}[how]
    return (
        f"SELECT {', '.join(fields)}, p.geometry AS geometry FROM p {join} ({matches}) AS m ON p.point_id = m.point_key"
    )


def child_join_spark(spec: dict[str, Any]) -> dict[str, Any]:
    """Apache Sedona on Spark (local mode): the same left join in Spark SQL, written as GeoParquet (a folder)."""
    start = time.perf_counter()
    spark = goal_children.spark_session(spec["spark_master"], spec["spark_memory"], "bench_vector_join")
    spark.sql("SELECT ST_Point(0.0, 0.0)").collect()
    sql = spark_join_sql(spec["points"], spec["zones"], spec["how"])
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    spark.read.format("geoparquet").load(spec["points"]).createOrReplaceTempView("p")
    spark.read.format("geoparquet").load(spec["zones"]).createOrReplaceTempView("z")
    spark.sql(sql).write.format("geoparquet").mode("overwrite").save(spec["output"])
    seconds = time.perf_counter() - t0
    others = goal_children._others_peak(spark.sparkContext.applicationId)
    spark.stop()
    return {"seconds": seconds, "setup_seconds": setup, **others}


def child_join_duckdb(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    from mapsmith_opensource.duckdb_spatial import connect

    con = connect()
    sql = duckdb_join_sql(con, spec["points"], spec["zones"], spec["output"], spec["how"])
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    con.execute(sql)
    seconds = time.perf_counter() - t0
    con.close()
    return {"seconds": seconds, "setup_seconds": setup, "threads": int(threads)}


CHILDREN = {
    "buffer_geopandas": child_buffer_baseline,
    "buffer_duckdb": lambda spec: _goal_child(goal_children.raw_duckdb, spec),
    "buffer_sedonadb": lambda spec: _goal_child(goal_children.raw_sedonadb, spec),
    "buffer_spark": lambda spec: _goal_child(goal_children.raw_spark, spec),
    "buffer_mapsmith": lambda spec: _run_mapsmith(spec, "buffer_layer", profile=False),
    "buffer_profile": lambda spec: _run_mapsmith(spec, "buffer_layer", profile=True),
    "join_geopandas": child_join_geopandas,
    "join_duckdb": child_join_duckdb,
    "join_sedonadb": child_join_sedonadb,
    "join_spark": child_join_spark,
    "join_mapsmith": lambda spec: _run_mapsmith(spec, "spatial_join", profile=False),
    "join_profile": lambda spec: _run_mapsmith(spec, "spatial_join", profile=True),
}
