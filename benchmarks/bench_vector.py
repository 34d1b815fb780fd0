"""Vector operations at scale: what MapSmith's checks and manifests cost next to the engine alone.

Two benchmarks, each file to file on seeded random data in EPSG:32610 (UTM zone 10N), GeoParquet in
and GeoParquet out -- the format whose reading and writing cost least, so the comparison is not
buried under I/O (GDAL's GeoPackage writer would take longer than the work itself):

* ``buffer_layer`` on N points (default 1,000,000) against the same work without MapSmith:
  ``geopandas.read_parquet`` -> ``GeoSeries.buffer`` (same distance, same ``quad_segs``) ->
  ``GeoDataFrame.to_parquet``, the reader and writer MapSmith's opensource stack calls for
  GeoParquet (the pyogrio wheel's GDAL has no Parquet driver). Target: MapSmith at most 10 % slower.
* ``spatial_join`` of the N points with M polygons (default 10,000) against plain
  ``geopandas.sjoin`` and DuckDB Spatial (one ``COPY (SELECT ... JOIN ... ON ST_Intersects) TO``),
  each writing GeoParquet. Every engine must produce the same rows and matched pairs; target:
  MapSmith within 1.25x of the fastest raw engine.

Every run is a fresh process, so each peak RSS (``common.own_peak_rss_mib``) is that run's own; the things compared
run interleaved (A, B, A, B ...) so a neighbour's burst of load falls on all of them alike, and each
figure is a median. The clock runs around the work only: engine modules are imported, and the
``MapSmith`` object or DuckDB connection built, before it starts (those are timed and recorded
apart). One extra MapSmith run under cProfile (``perf_counter`` timer) says where its time goes.

Writes ``benchmarks/results/vector_buffer.json`` and ``vector_spatial_join.json``;
``benchmarks/render.py`` turns them into ``docs/benchmarks.md``. It measures only: it never edits
the code it measures and never asserts -- whether a target was met is recorded, not enforced.

    python benchmarks/bench_vector.py [--features 1000000] [--polygons 10000] [--runs 5] [--join-runs 5]
    python benchmarks/bench_vector.py --features 20000 --polygons 500 --runs 1 --join-runs 1 --output-dir /tmp/smoke
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import hashlib
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
from common import code_state, machine

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS_DIR = HERE / "results"
BUFFER_NAME = "vector_buffer"
JOIN_NAME = "vector_spatial_join"
BUFFER_TARGET_MAX_RATIO = 1.10
JOIN_TARGET_MAX_RATIO = 1.25
DEFAULT_FEATURES = 1_000_000
DEFAULT_POLYGONS = 10_000
# Five interleaved runs of each side: under ten minutes in all on two quiet cores, and a median that
# one neighbour's burst of load cannot move alone.
DEFAULT_RUNS = 5
SEED = 20261130
CRS = "EPSG:32610"
# A 200 km square in UTM zone 10N (northern California): true to scale within 0.04 %.
EXTENT = (400_000.0, 4_100_000.0, 600_000.0, 4_300_000.0)
DISTANCE_METERS = 50.0
SEGMENTS_PER_QUARTER_CIRCLE = 16  # the contract's default, and GEOS's
# Join polygons: 16-gons of radius 500-1500 m scattered over the extent, overlapping here and there,
# so some points match none, most one, and some several.
ZONE_RADIUS_METERS = (500.0, 1500.0)
ZONE_SEGMENTS_PER_QUARTER_CIRCLE = 4
PREDICATE = "intersects"
JOIN_HOW = "left"  # the contract's default: every point is kept
# What every child imports before its clock starts, MapSmith's included: the engines are a cost of
# any process that buffers or joins, not of MapSmith.
ENGINE_IMPORTS = ("geopandas", "shapely", "pyproj", "pyogrio", "pyarrow.parquet")
TOP_FUNCTIONS = 12


# -- data -----------------------------------------------------------------------------------------


def make_points(path: Path, count: int, seed: int = SEED) -> None:
    """``count`` random points over ``EXTENT`` with three attribute columns, as GeoParquet."""
    import geopandas as gpd
    import numpy as np
    import shapely

    rng = np.random.default_rng(seed)
    x = rng.uniform(EXTENT[0], EXTENT[2], count)
    y = rng.uniform(EXTENT[1], EXTENT[3], count)
    frame = gpd.GeoDataFrame(
        {
            "point_id": np.arange(count, dtype="int64"),
            "value": rng.normal(size=count),
            "kind": rng.choice(np.array(["well", "spring", "gauge"]), count),
        },
        geometry=shapely.points(x, y),
        crs=CRS,
    )
    frame.to_parquet(path, index=False)


def make_zones(path: Path, count: int, seed: int = SEED + 1) -> None:
    """``count`` overlapping 16-gons over ``EXTENT`` with an id and a name, as GeoParquet."""
    import geopandas as gpd
    import numpy as np
    import shapely

    rng = np.random.default_rng(seed)
    cx = rng.uniform(EXTENT[0], EXTENT[2], count)
    cy = rng.uniform(EXTENT[1], EXTENT[3], count)
    radius = rng.uniform(*ZONE_RADIUS_METERS, count)
    frame = gpd.GeoDataFrame(
        {"zone_id": np.arange(count, dtype="int64"), "zone_name": [f"zone {i}" for i in range(count)]},
        geometry=shapely.buffer(shapely.points(cx, cy), radius, quad_segs=ZONE_SEGMENTS_PER_QUARTER_CIRCLE),
        crs=CRS,
    )
    frame.to_parquet(path, index=False)


# -- what runs in each fresh process --------------------------------------------------------------


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
    if operation == "spatial_join":
        # Engine setup stays outside the clock on every side: the raw DuckDB run connects and loads
        # spatial before its clock starts, and a running MapSmith server loads it once, on its first
        # DuckDB join. So MapSmith's DuckDB database is opened here, before the clock, too.
        started = time.perf_counter()
        from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

        duckdb_database()
        setup += time.perf_counter() - started
    arguments = _buffer_arguments(spec) if operation == "buffer_layer" else _join_arguments(spec)
    profiler = cProfile.Profile(time.perf_counter) if profile else None
    t0 = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = app.run(operation, arguments)
    if profiler is not None:
        profiler.disable()
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {
        "seconds": seconds,
        "setup_seconds": setup,
        "status": result.status,
        "engine": result.engine.get("name"),
        "failed_checks": [c["name"] for c in result.checks if not c.get("passed", True)],
    }
    if profiler is not None:
        # The stack's implementations of the operation, by function name (spatial_join has one per engine).
        names = sorted({getattr(i.function, "__name__", operation) for i in app.host.implementations[operation]})
        out["breakdown"] = breakdown(pstats.Stats(profiler), names)
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
    "buffer_baseline": child_buffer_baseline,
    "buffer_mapsmith": lambda spec: _run_mapsmith(spec, "buffer_layer", profile=False),
    "buffer_profile": lambda spec: _run_mapsmith(spec, "buffer_layer", profile=True),
    "join_geopandas": child_join_geopandas,
    "join_duckdb": child_join_duckdb,
    "join_mapsmith": lambda spec: _run_mapsmith(spec, "spatial_join", profile=False),
    "join_profile": lambda spec: _run_mapsmith(spec, "spatial_join", profile=True),
}


def child_main(role: str, spec_json: str) -> int:
    return common.child_main(CHILDREN, role, spec_json)


def spawn(role: str, spec: dict[str, Any]) -> dict[str, Any]:
    return common.spawn(__file__, role, spec)


# -- the cProfile breakdown -----------------------------------------------------------------------


class Profile:
    """Cumulative seconds of named functions in one cProfile run, optionally along one call edge."""

    def __init__(self, stats: pstats.Stats) -> None:
        self.raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]

    def _keys(self, file: str, func: str) -> list[tuple[str, int, str]]:
        return [k for k in self.raw if k[2] == func and k[0].replace("\\", "/").endswith(file)]

    def cum(self, file: str, func: str, caller: str | None = None) -> float:
        total = 0.0
        for key in self._keys(file, func):
            if caller is None:
                total += self.raw[key][3]
            else:
                total += sum(v[3] for ck, v in self.raw[key][4].items() if ck[2] == caller)
        return total

    def own(self, file: str, func: str) -> float:
        return sum(self.raw[key][2] for key in self._keys(file, func))

    def top(self, count: int) -> list[dict[str, Any]]:
        rows = sorted(self.raw.items(), key=lambda kv: -kv[1][2])[:count]
        out = []
        for (file, line, func), value in rows:
            where = f"{Path(file).name}:{line}" if file != "~" else "(built-in)"
            out.append({"function": f"{where} {func}", "own_seconds": round(value[2], 3), "calls": value[1]})
        return out


def breakdown(stats: pstats.Stats, implementations: list[str]) -> dict[str, Any]:
    """Where one MapSmith run's time went, engine first, then each thing MapSmith adds.

    ``implementations`` names the functions that may implement the operation; the one the router
    chose is the one run_operation called.
    """
    p = Profile(stats)
    total = p.cum("mapsmith/runner.py", "run_operation")
    called = [name for name in implementations if p.cum(".py", name, caller="run_operation") > 0]
    impl = sum(p.cum(".py", name, caller="run_operation") for name in called)
    read_input = p.cum("mapsmith_opensource/common.py", "read_input")
    write_output = p.cum("mapsmith_opensource/common.py", "write_output")
    refusal_scan = p.cum(".py", "_require_valid")
    crs_moves = p.cum("mapsmith_opensource/common.py", "to_metric") + p.cum("mapsmith_opensource/common.py", "align_to")
    engine = {
        "read": p.cum("mapsmith_opensource/io.py", "read_layer", caller="read_input"),
        "compute": max(impl - read_input - write_output - crs_moves - refusal_scan, 0.0),
        "write": p.cum("mapsmith_opensource/io.py", "write_layer", caller="write_output"),
        # The implementation's frames are freed as it returns, which cProfile books to the caller's own
        # time: nearly all of run_operation's own time. The engine-alone runs free theirs in the clock too.
        "free": p.own("mapsmith/runner.py", "run_operation"),
    }
    input_digest = p.cum("mapsmith/app.py", "digest")
    output_digest = p.cum("mapsmith/provenance/digests.py", "dataset_digest", caller="_record")
    record = p.cum("mapsmith/run_records.py", "output_record")
    overhead = {
        # Every read input is scanned for validity (and spatial_join refuses invalid inputs: a second scan).
        "input validity scan": p.cum("mapsmith_opensource/common.py", "_report_input_validity") + refusal_scan,
        "output validity (engine's frame)": p.cum("mapsmith_opensource/common.py", "frame_stats"),
        "input digest (SHA-256)": input_digest,
        "output digest (SHA-256)": output_digest,
        "input header reads and layer choice": p.cum("mapsmith_opensource/io.py", "inspect", caller="run_operation")
        + p.cum("mapsmith/runner.py", "_choose_layer"),
        "output header read and checks": p.cum("mapsmith/runner.py", "_verify_and_repair"),
        "CRS decision": crs_moves,
        "engine choice": p.cum("mapsmith/router.py", "choose_engine"),
        "manifest (build, validate, write)": max(record - input_digest - output_digest, 0.0)
        + p.cum("mapsmith/provenance/validator.py", "validate_manifest")
        + p.cum("mapsmith/provenance/manifest.py", "write_manifest"),
    }
    engine_total = sum(engine.values())
    overhead["other (arguments, routing, paths, rename)"] = max(total - engine_total - sum(overhead.values()), 0.0)
    return {
        "method": "cProfile (perf_counter timer) around one extra MapSmith run: cumulative seconds of the "
        "runner's and the stack's functions; profiling inflates Python-heavy phases a little",
        "run_seconds": round(total, 3),
        "engine_seconds": {k: round(v, 3) for k, v in engine.items()},
        "overhead_seconds": {k: round(v, 3) for k, v in overhead.items()},
        "overhead_total_seconds": round(total - engine_total, 3),
        "implementation": called[0] if len(called) == 1 else called or None,
        "top_functions_by_own_time": p.top(TOP_FUNCTIONS),
    }


# -- the parent: interleave, summarise, write -----------------------------------------------------


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["seconds"] for r in runs]
    rss = [r["peak_rss_mib"] for r in runs]
    out: dict[str, Any] = {
        "median_seconds": round(statistics.median(times), 3),
        "min_seconds": round(min(times), 3),
        "max_seconds": round(max(times), 3),
        "runs_seconds": [round(t, 3) for t in times],
        "peak_rss_mib": round(max(rss)),
        "peak_rss_mib_runs": [round(m) for m in rss],
        "setup_seconds_median": round(statistics.median(r["setup_seconds"] for r in runs), 3),
        "process_seconds_median": round(statistics.median(r["process_seconds"] for r in runs), 3),
    }
    if "phases" in runs[0]:
        out["phases_median_seconds"] = {
            k: round(statistics.median(r["phases"][k] for r in runs), 3) for k in runs[0]["phases"]
        }
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _geos_version() -> str:
    import shapely

    return str(shapely.geos_version_string)


def _header(name: str, command: str, load_before: float) -> dict[str, Any]:
    return {
        "benchmark": name,
        "command": command,
        "date": dt.date.today().isoformat(),
        "machine": {
            **machine(
                ("geopandas", "shapely", "pyproj", "pyogrio", "pyarrow", "duckdb"),
                {"GEOS": _geos_version()},
            ),
            "load_average_1min": {"before": round(load_before, 2), "after": None},
        },
        "code": code_state(),
        "process": "a fresh Python process per run; engines imported (and, for joins, DuckDB connected with "
        "spatial loaded) before the clock starts on every side: a running server pays that once",
    }


def bench_buffer(work: Path, points: Path, features: int, runs: int, profile: bool, command: str) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    result = _header(BUFFER_NAME, command, load_before)
    baseline: list[dict[str, Any]] = []
    mapsmith: list[dict[str, Any]] = []
    order: list[str] = []
    identical: bool | None = None
    features_written: dict[str, int] = {}
    output_bytes = 0
    for i in range(runs):
        for role, bucket in (("buffer_baseline", baseline), ("buffer_mapsmith", mapsmith)):
            out = work / f"buffer-{role}-{i}.parquet"
            spec = {
                "workspace": str(work),
                "input": points.name if role == "buffer_mapsmith" else str(points),
                "output": out.name if role == "buffer_mapsmith" else str(out),
                "distance_meters": DISTANCE_METERS,
                "segments": SEGMENTS_PER_QUARTER_CIRCLE,
            }
            answer = spawn(role, spec)
            bucket.append(answer)
            order.append("baseline" if role == "buffer_baseline" else "mapsmith")
            print(f"  {order[-1]:9s} run {i + 1}: {answer['seconds']:.2f} s, peak {answer['peak_rss_mib']:.0f} MiB")
            if i == 0:
                import pyarrow.parquet as pq

                features_written[order[-1]] = pq.read_metadata(out).num_rows
                output_bytes = out.stat().st_size
            if i == 0 and role == "buffer_mapsmith":
                identical = sha256_file(out) == sha256_file(work / "buffer-buffer_baseline-0.parquet")
        for stale in work.glob("buffer-*"):
            stale.unlink()
    breakdown_result = None
    if profile:
        spec = {
            "workspace": str(work),
            "input": points.name,
            "output": "buffer-profile.parquet",
            "distance_meters": DISTANCE_METERS,
            "segments": SEGMENTS_PER_QUARTER_CIRCLE,
        }
        breakdown_result = spawn("buffer_profile", spec)["breakdown"]
        for stale in work.glob("buffer-*"):
            stale.unlink()
    result["machine"]["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    b, m = _summary(baseline), _summary(mapsmith)
    ratio = round(m["median_seconds"] / b["median_seconds"], 3)
    result.update(
        {
            "description": f"buffer_layer on {features:,} points, GeoParquet to GeoParquet, against the same read, "
            "buffer and write done with GeoPandas alone",
            "input": {
                "features": features,
                "format": "GeoParquet",
                "crs": CRS,
                "columns": ["point_id", "value", "kind"],
                "bytes": points.stat().st_size,
                "seed": SEED,
            },
            "output": {"format": "GeoParquet", "bytes": output_bytes, "features": features_written},
            "parameters": {
                "distance_meters": DISTANCE_METERS,
                "segments_per_quarter_circle": SEGMENTS_PER_QUARTER_CIRCLE,
            },
            "runs": runs,
            "order": order,
            "baseline": {
                "what": "geopandas.read_parquet -> GeoSeries.buffer(distance, quad_segs) -> GeoDataFrame.to_parquet",
                **b,
            },
            "mapsmith": {
                "what": "MapSmith(environ).run('buffer_layer', ...): checks, engine, output checks, digests, manifest",
                "engine": mapsmith[0]["engine"],
                "status": mapsmith[0]["status"],
                **m,
            },
            "outputs_identical": identical,
            "ratio": ratio,
            "target": {"max_ratio": BUFFER_TARGET_MAX_RATIO, "met": ratio <= BUFFER_TARGET_MAX_RATIO},
        }
    )
    if breakdown_result is not None:
        result["breakdown"] = breakdown_result
    return result


def pair_fingerprint(path: Path) -> dict[str, Any]:
    """Rows, matched pairs and a digest of the sorted (point_id, zone_id) pairs of a join's output."""
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["point_id", "zone_id"])
    point = table.column("point_id").to_numpy(zero_copy_only=False).astype("int64")
    zone_col = table.column("zone_id")
    matched = ~np.asarray(zone_col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    zone = np.where(matched, zone_col.fill_null(-1).to_numpy(zero_copy_only=False), -1).astype("int64")
    order = np.lexsort((zone, point))
    pairs = np.column_stack([point[order], zone[order]])
    return {
        "rows": int(len(point)),
        "matched_pairs": int(matched.sum()),
        "unmatched_rows": int((~matched).sum()),
        "pairs_sha256": hashlib.sha256(np.ascontiguousarray(pairs).tobytes()).hexdigest(),
    }


def spatial_join_available() -> bool:
    from mapsmith.app import MapSmith

    app = MapSmith({})
    return "spatial_join" in app.host.contracts and bool(app.host.implementations.get("spatial_join"))


def bench_join(
    work: Path, points: Path, zones: Path, features: int, polygons: int, runs: int, profile: bool, command: str
) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    result = _header(JOIN_NAME, command, load_before)
    engines = ("geopandas", "duckdb", "mapsmith")
    samples: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    fingerprints: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for i in range(runs):
        for engine in engines:
            out = work / f"join-{engine}-{i}.parquet"
            local = engine == "mapsmith"
            spec = {
                "workspace": str(work),
                "points": points.name if local else str(points),
                "zones": zones.name if local else str(zones),
                "output": out.name if local else str(out),
                "predicate": PREDICATE,
                "how": JOIN_HOW,
            }
            answer = spawn(f"join_{engine}", spec)
            samples[engine].append(answer)
            order.append(engine)
            print(f"  {engine:9s} run {i + 1}: {answer['seconds']:.2f} s, peak {answer['peak_rss_mib']:.0f} MiB")
            if i == 0:
                fingerprints[engine] = pair_fingerprint(out)
                fingerprints[engine]["bytes"] = out.stat().st_size
        for stale in work.glob("join-*"):
            stale.unlink()
    breakdown_result = None
    if profile:
        spec = {
            "workspace": str(work),
            "points": points.name,
            "zones": zones.name,
            "output": "join-profile.parquet",
            "predicate": PREDICATE,
            "how": JOIN_HOW,
        }
        breakdown_result = spawn("join_profile", spec)["breakdown"]
        for stale in work.glob("join-*"):
            stale.unlink()
    result["machine"]["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    summaries = {e: _summary(samples[e]) for e in engines}
    raw = ("geopandas", "duckdb")
    fastest = min(raw, key=lambda e: summaries[e]["median_seconds"])
    ratio = round(summaries["mapsmith"]["median_seconds"] / summaries[fastest]["median_seconds"], 3)
    keys = ("rows", "matched_pairs", "pairs_sha256")
    same = all(all(fingerprints[e][k] == fingerprints["geopandas"][k] for k in keys) for e in engines)
    result.update(
        {
            "description": f"spatial_join of {features:,} points with {polygons:,} polygons ({PREDICATE}, how="
            f"{JOIN_HOW}), GeoParquet to GeoParquet, against plain geopandas.sjoin and DuckDB Spatial",
            "inputs": {
                "points": {
                    "features": features,
                    "columns": ["point_id", "value", "kind"],
                    "bytes": points.stat().st_size,
                },
                "polygons": {
                    "features": polygons,
                    "columns": ["zone_id", "zone_name"],
                    "vertices_each": 4 * ZONE_SEGMENTS_PER_QUARTER_CIRCLE + 1,
                    "radius_meters": list(ZONE_RADIUS_METERS),
                    "bytes": zones.stat().st_size,
                },
                "format": "GeoParquet",
                "crs": CRS,
                "seed": SEED,
            },
            "parameters": {"predicate": PREDICATE, "how": JOIN_HOW},
            "runs": runs,
            "order": order,
            "engines": {
                "geopandas": {
                    "what": "geopandas.read_parquet x2 -> geopandas.sjoin -> drop index_right -> to_parquet",
                    **summaries["geopandas"],
                },
                "duckdb": {
                    "what": "DuckDB Spatial (mapsmith_opensource.duckdb_spatial.connect()): one COPY (SELECT ... "
                    "FROM read_parquet ... JOIN ... ON ST_Intersects) TO parquet",
                    "threads": samples["duckdb"][0]["threads"],
                    **summaries["duckdb"],
                },
                "mapsmith": {
                    "what": "MapSmith(environ).run('spatial_join', ...): checks, engine, output checks, digests, "
                    "manifest",
                    "engine": samples["mapsmith"][0]["engine"],
                    "status": samples["mapsmith"][0]["status"],
                    **summaries["mapsmith"],
                },
            },
            "result": {"same_result": same, "by_engine": fingerprints},
            "fastest_raw_engine": fastest,
            "ratio": ratio,
            "target": {"max_ratio": JOIN_TARGET_MAX_RATIO, "met": ratio <= JOIN_TARGET_MAX_RATIO},
        }
    )
    if breakdown_result is not None:
        result["breakdown"] = breakdown_result
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=DEFAULT_FEATURES, help="points (default 1,000,000)")
    parser.add_argument("--polygons", type=int, default=DEFAULT_POLYGONS, help="join polygons (default 10,000)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="buffer runs of each side (default 5)")
    parser.add_argument(
        "--join-runs", type=int, default=DEFAULT_RUNS, help="spatial_join runs of each engine (default 5)"
    )
    parser.add_argument("--only", choices=("buffer", "spatial_join"), help="run one benchmark")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the profiled MapSmith runs")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR, help=f"where to write (default {RESULTS_DIR})")
    parser.add_argument("--workdir", type=Path, default=None, help="where the data goes (default: a temp dir)")
    args = parser.parse_args(argv)
    if min(args.features, args.polygons, args.runs, args.join_runs) < 1:
        parser.error("--features, --polygons, --runs and --join-runs must be at least 1")

    command = "python benchmarks/bench_vector.py" + "".join(
        f" {flag} {value}"
        for flag, value, default in (
            ("--features", args.features, DEFAULT_FEATURES),
            ("--polygons", args.polygons, DEFAULT_POLYGONS),
            ("--runs", args.runs, DEFAULT_RUNS),
            ("--join-runs", args.join_runs, DEFAULT_RUNS),
        )
        if value != default
    )
    do_buffer = args.only in (None, "buffer")
    do_join = args.only in (None, "spatial_join")
    if do_join and not spatial_join_available():
        print("spatial_join: the operation has no implementation here yet; skipped", file=sys.stderr)
        if not do_buffer:
            return 2
        do_join = False

    args.output_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mapsmith-bench-vector-", dir=args.workdir)).resolve()
    try:
        points, zones = work / "points.parquet", work / "zones.parquet"
        started = time.perf_counter()
        make_points(points, args.features)
        if do_join:
            make_zones(zones, args.polygons)
        print(f"data written in {time.perf_counter() - started:.1f} s to {work}")
        if do_buffer:
            print(f"buffer_layer, {args.features:,} points, {args.runs} interleaved runs each:")
            r = bench_buffer(work, points, args.features, args.runs, not args.no_breakdown, command)
            path = args.output_dir / f"{BUFFER_NAME}.json"
            path.write_text(json.dumps(r, indent=2) + "\n")
            print(
                f"buffer: baseline median {r['baseline']['median_seconds']:.2f} s, MapSmith median "
                f"{r['mapsmith']['median_seconds']:.2f} s, ratio {r['ratio']:.3f} (target <= "
                f"{BUFFER_TARGET_MAX_RATIO}: {'met' if r['target']['met'] else 'NOT met'}); wrote {path}"
            )
        if do_join:
            print(f"spatial_join, {args.features:,} points x {args.polygons:,} polygons, {args.join_runs} runs each:")
            r = bench_join(
                work, points, zones, args.features, args.polygons, args.join_runs, not args.no_breakdown, command
            )
            path = args.output_dir / f"{JOIN_NAME}.json"
            path.write_text(json.dumps(r, indent=2) + "\n")
            medians = ", ".join(f"{e} {s['median_seconds']:.2f} s" for e, s in r["engines"].items())
            print(
                f"spatial_join: {medians}; ratio to {r['fastest_raw_engine']} {r['ratio']:.3f} (target <= "
                f"{JOIN_TARGET_MAX_RATIO}: {'met' if r['target']['met'] else 'NOT met'}); same result: "
                f"{r['result']['same_result']}; wrote {path}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
