"""Vector operations at scale: MapSmith against every raw engine that can do the same work alone.

Two benchmarks, each file to file on seeded random data in EPSG:32610 (UTM zone 10N), GeoParquet in
and GeoParquet out -- the format whose reading and writing cost least, so the comparison is not
buried under I/O (GDAL's GeoPackage writer would take longer than the work itself):

* ``buffer_layer`` on N points (default 1,000,000) against GeoPandas (``geopandas.read_parquet`` ->
  ``GeoSeries.buffer``, same distance and ``quad_segs`` -> ``GeoDataFrame.to_parquet``), DuckDB Spatial and
  SedonaDB (one ``ST_Buffer`` query each, the goal benchmark's SQL). Every output must agree (rows, the sorted
  point ids' digest, the summed area within a relative 1e-06). This benchmark's own target: MapSmith at most 10 %
  slower than the engine it ran, alone.
* ``spatial_join`` of the N points with M polygons (default 10,000) against plain ``geopandas.sjoin``, DuckDB
  Spatial and SedonaDB (one ``SELECT ... LEFT JOIN ... ON ST_Intersects`` each), each writing GeoParquet.
  Every engine must produce the same rows and matched pairs; target: MapSmith within 1.25x of the fastest raw
  engine.

Both also judge issue 22's goal (``goal_verdicts``: time at most 1.25x and peak memory at most 1.5x of the fastest
raw engine whose output agreed), on the work alone and on the whole process (spawn to exit, start-up included).
Every run is a fresh process (``vector_children.py``), so each peak RSS (``common.own_peak_rss_mib``) is that
run's own; the variants run interleaved (A, B, C, D, A ...) so a neighbour's burst of load falls on all of them
alike, and each figure is a median. The work's clock runs around the work only: engine modules are imported, and
the ``MapSmith`` object or the DuckDB or SedonaDB connection built, before it starts (those are timed and
recorded apart). One extra MapSmith run under cProfile (``vector_breakdown.py``) says where its time goes.

Writes ``benchmarks/results/vector_buffer.json`` and ``vector_spatial_join.json``;
``benchmarks/render.py`` turns them into ``docs/benchmarks.md``. It measures only: it never edits
the code it measures and never asserts -- whether a target was met is recorded, not enforced.

    python benchmarks/bench_vector.py [--features 1000000] [--polygons 10000] [--runs 5] [--join-runs 5]
    python benchmarks/bench_vector.py --features 20000 --polygons 500 --runs 1 --join-runs 1 --output-dir /tmp/smoke
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import goal_ops
import goal_verdicts
from common import code_state, machine
from vector_children import CHILDREN

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
ENGINES = ("geopandas", "duckdb", "sedonadb", "spark", "mapsmith")
SPARK_MEMORY = "4g"  # the Spark driver's heap, local mode
SPARK_SPEC = {"spark_master": f"local[{len(os.sched_getaffinity(0))}]", "spark_memory": SPARK_MEMORY}
# The raw buffers are the goal benchmark's SQL: the same distance and segments as this benchmark's.
assert (goal_ops.BUFFER_METERS, goal_ops.BUFFER_QUAD_SEGS) == (DISTANCE_METERS, SEGMENTS_PER_QUARTER_CIRCLE)


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


def child_main(role: str, spec_json: str) -> int:
    return common.child_main(CHILDREN, role, spec_json)


def spawn(role: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One child; its peak is its own plus that of the processes it started (a Spark JVM): a sum of peaks."""
    answer = common.spawn(__file__, role, spec)
    answer["peak_rss_mib"] += answer.get("descendants_peak_rss_mib", 0.0) + answer.get("executors_peak_rss_mib", 0.0)
    return answer


def engines_here() -> tuple[tuple[str, ...], dict[str, str]]:
    """The engines this machine can run, and each left out with why (bench_goals.available: pyspark, the Sedona
    jars and Java for Spark)."""
    from bench_goals import available  # bench_goals imports this module

    skipped = {e: why for e in ENGINES if e != "mapsmith" and (why := available(e, None))}
    return tuple(e for e in ENGINES if e not in skipped), skipped


# -- the parent: interleave, summarise, write -----------------------------------------------------


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["seconds"] for r in runs]
    rss = [r["peak_rss_mib"] for r in runs]
    out: dict[str, Any] = {
        "median_seconds": round(statistics.median(times), 3),
        "min_seconds": round(min(times), 3),
        "max_seconds": round(max(times), 3),
        "runs_seconds": [round(t, 3) for t in times],
        "median_process_seconds": round(statistics.median(r["process_seconds"] for r in runs), 3),
        "runs_process_seconds": [round(r["process_seconds"], 3) for r in runs],
        "peak_rss_mib": round(max(rss)),
        "peak_rss_mib_runs": [round(m) for m in rss],
        "setup_seconds_median": round(statistics.median(r["setup_seconds"] for r in runs), 3),
    }
    if "phases" in runs[0]:
        out["phases_median_seconds"] = {
            k: round(statistics.median(r["phases"][k] for r in runs), 3) for k in runs[0]["phases"]
        }
    return out


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
                ("geopandas", "shapely", "pyproj", "pyogrio", "pyarrow", "duckdb", "sedonadb"),
                {"GEOS": _geos_version()},
            ),
            "load_average_1min": {"before": round(load_before, 2), "after": None},
        },
        "code": code_state(),
        "process": "a fresh Python process per run; engines imported (and DuckDB connected with spatial loaded, "
        "SedonaDB connected) before the work's clock starts on every side: a running server pays that once; the "
        "whole process is timed from spawn to exit",
    }


def _interleave(
    work: Path, prefix: str, engines: tuple[str, ...], runs: int, spec_of: Any, answer_of: Any
) -> tuple[dict[str, list[dict[str, Any]]], list[str], dict[str, Any]]:
    """Each engine ``runs`` times, interleaved, a fresh process each: the runs by engine, their order, and each
    engine's first output as ``answer_of`` reads it."""
    samples: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    order: list[str] = []
    answers: dict[str, Any] = {}
    for i in range(runs):
        for engine in engines:
            out = work / f"{prefix}-{engine}-{i}.parquet"
            answer = spawn(f"{prefix}_{engine}", spec_of(engine, out))
            samples[engine].append(answer)
            order.append(engine)
            print(
                f"  {engine:9s} run {i + 1}: work {answer['seconds']:.2f} s, process {answer['process_seconds']:.2f} "
                f"s, peak {answer['peak_rss_mib']:.0f} MiB"
            )
            if i == 0:
                answers[engine] = answer_of(out)
        for stale in work.glob(f"{prefix}-*"):
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    return samples, order, answers


def _goal(summaries: dict[str, dict[str, Any]], agreeing: set[str]) -> dict[str, Any]:
    """Issue 22's goal for MapSmith, on the work alone and on the whole process (goal_verdicts: "mapsmith" is not a
    raw engine there, so it is never its own yardstick)."""
    return {level: goal_verdicts.verdict(summaries, agreeing, "mapsmith", level) for level in goal_verdicts.LEVELS}


def _profile(work: Path, role: str, spec: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = spawn(role, spec)["breakdown"]
    for stale in work.glob(f"{role.split('_')[0]}-*"):
        stale.unlink()
    return found


def bench_buffer(work: Path, points: Path, features: int, runs: int, profile: bool, command: str) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    result = _header(BUFFER_NAME, command, load_before)
    operation = goal_ops.OPERATIONS["buffer_layer"]
    output_facts: dict[str, Any] = {}

    def spec_of(engine: str, out: Path) -> dict[str, Any]:
        local = engine == "mapsmith"
        return {
            "workspace": str(work),
            "input": points.name if local else str(points),
            "output": out.name if local else str(out),
            "distance_meters": DISTANCE_METERS,
            "segments": SEGMENTS_PER_QUARTER_CIRCLE,
            **(SPARK_SPEC if engine == "spark" else {}),
        }

    def answer_of(out: Path) -> dict[str, Any]:
        from bench_goals import output_answer  # bench_goals imports this module

        output_facts.setdefault("bytes", _bytes(out))
        return output_answer(out, operation)

    engines, skipped = engines_here()
    samples, order, answers = _interleave(work, "buffer", engines, runs, spec_of, answer_of)
    breakdown_result = None
    if profile:
        spec = spec_of("mapsmith", work / "buffer-profile.parquet")
        breakdown_result = _profile(work, "buffer_profile", spec)
    result["machine"]["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    summaries = {e: _summary(samples[e]) for e in engines}
    agreeing, same = goal_verdicts.agreeing_variants(answers, goal_ops.MEASURE_RELATIVE_TOLERANCE)
    ran = samples["mapsmith"][0]["engine"]
    ratio = (
        round(summaries["mapsmith"]["median_seconds"] / summaries[ran]["median_seconds"], 3)
        if ran in summaries
        else None
    )
    whats = {
        "geopandas": "geopandas.read_parquet -> GeoSeries.buffer(distance, quad_segs) -> GeoDataFrame.to_parquet",
        "duckdb": "DuckDB Spatial: COPY (SELECT ..., ST_Buffer(geometry, distance, segments) ...) TO parquet",
        "sedonadb": "SedonaDB: SELECT ..., ST_Buffer(geometry, distance, 'quad_segs=...') ... -> to_parquet",
        "spark": f"Apache Sedona on Spark (local mode, {SPARK_MEMORY} driver): SELECT ..., ST_Buffer(...) -> "
        "GeoParquet (a folder of parts)",
        "mapsmith": "MapSmith(environ).run('buffer_layer', ...): checks, engine, output checks, digests, manifest",
    }
    result.update(
        {
            "description": f"buffer_layer on {features:,} points, GeoParquet to GeoParquet, against GeoPandas, "
            "DuckDB Spatial and SedonaDB doing the same buffer alone",
            "input": {
                "features": features,
                "format": "GeoParquet",
                "crs": CRS,
                "columns": ["point_id", "value", "kind"],
                "bytes": points.stat().st_size,
                "seed": SEED,
            },
            "output": {"format": "GeoParquet", "bytes": output_facts.get("bytes", 0)},
            "parameters": {
                "distance_meters": DISTANCE_METERS,
                "segments_per_quarter_circle": SEGMENTS_PER_QUARTER_CIRCLE,
            },
            "runs": runs,
            "order": order,
            "peak_rss_method": samples["mapsmith"][0]["peak_rss_method"],
            "engines": {
                e: {
                    "what": whats[e],
                    **summaries[e],
                    **({"engine": ran, "status": samples["mapsmith"][0]["status"]} if e == "mapsmith" else {}),
                }
                for e in engines
            },
            "not_run": skipped,
            "result": {"same_result": same, "by_engine": answers, "agreeing": sorted(agreeing)},
            "goal": _goal(summaries, agreeing),
            "against": ran,
            "ratio": ratio,
            "target": {
                "max_ratio": BUFFER_TARGET_MAX_RATIO,
                "met": ratio is not None and ratio <= BUFFER_TARGET_MAX_RATIO,
            },
        }
    )
    if breakdown_result is not None:
        result["breakdown"] = breakdown_result
    return result


def _bytes(path: Path) -> int:
    """A file's size, or a folder's (Spark writes parts)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


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

    def spec_of(engine: str, out: Path) -> dict[str, Any]:
        local = engine == "mapsmith"
        return {
            "workspace": str(work),
            "points": points.name if local else str(points),
            "zones": zones.name if local else str(zones),
            "output": out.name if local else str(out),
            "predicate": PREDICATE,
            "how": JOIN_HOW,
            **(SPARK_SPEC if engine == "spark" else {}),
        }

    def answer_of(out: Path) -> dict[str, Any]:
        return {**pair_fingerprint(out), "bytes": _bytes(out)}

    engines_run, skipped = engines_here()
    samples, order, fingerprints = _interleave(work, "join", engines_run, runs, spec_of, answer_of)
    breakdown_result = None
    if profile:
        breakdown_result = _profile(work, "join_profile", spec_of("mapsmith", work / "join-profile.parquet"))
    result["machine"]["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    summaries = {e: _summary(samples[e]) for e in engines_run}
    raw = [e for e in engines_run if e != "mapsmith"]
    fastest = min(raw, key=lambda e: summaries[e]["median_seconds"])
    ratio = round(summaries["mapsmith"]["median_seconds"] / summaries[fastest]["median_seconds"], 3)
    keys = ("rows", "matched_pairs", "pairs_sha256")
    agreeing = {e for e in engines_run if all(fingerprints[e][k] == fingerprints["geopandas"][k] for k in keys)}
    same = agreeing == set(engines_run)
    whats = {
        "geopandas": "geopandas.read_parquet x2 -> geopandas.sjoin -> drop index_right -> to_parquet",
        "duckdb": "DuckDB Spatial (mapsmith_opensource.duckdb_spatial.connect()): one COPY (SELECT ... FROM "
        "read_parquet ... LEFT JOIN ... ON ST_Intersects) TO parquet",
        "sedonadb": "SedonaDB (sedonadb.connect()): read_parquet x2 -> SELECT ... LEFT JOIN ... ON ST_Intersects "
        "-> to_parquet",
        "spark": f"Apache Sedona on Spark (local mode, {SPARK_MEMORY} driver): the inner ST_Intersects join in Spark "
        "SQL, left-joined back to every point by point_id (Sedona runs a left spatial join as a nested loop) -> "
        "GeoParquet (a folder of parts)",
        "mapsmith": "MapSmith(environ).run('spatial_join', ...): checks, engine, output checks, digests, manifest",
    }
    engines: dict[str, Any] = {e: {"what": whats[e], **summaries[e]} for e in engines_run}
    engines["duckdb"]["threads"] = samples["duckdb"][0]["threads"]
    engines["mapsmith"] |= {"engine": samples["mapsmith"][0]["engine"], "status": samples["mapsmith"][0]["status"]}
    result.update(
        {
            "description": f"spatial_join of {features:,} points with {polygons:,} polygons ({PREDICATE}, how="
            f"{JOIN_HOW}), GeoParquet to GeoParquet, against plain geopandas.sjoin, DuckDB Spatial and SedonaDB",
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
            "peak_rss_method": samples["mapsmith"][0]["peak_rss_method"],
            "engines": engines,
            "not_run": skipped,
            "result": {"same_result": same, "by_engine": fingerprints},
            "goal": _goal(summaries, agreeing),
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
            medians = ", ".join(f"{e} {s['median_seconds']:.2f} s" for e, s in r["engines"].items())
            print(
                f"buffer: {medians}; MapSmith / {r['against']} alone {r['ratio']} (target <= "
                f"{BUFFER_TARGET_MAX_RATIO}: {'met' if r['target']['met'] else 'NOT met'}); same result: "
                f"{r['result']['same_result']}; wrote {path}"
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
