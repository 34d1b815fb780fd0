"""One point-in-polygon join at growing sizes on four engines: time and peak memory, same answer.

N seeded random points (1,000,000, then 10,000,000, then 30,000,000) joined with 10,000 polygons in
EPSG:32610 (``bench_vector``'s extent and polygons, same seed), predicate intersects, inner join,
GeoParquet in and GeoParquet out (every point's attributes, its polygon's attributes and the point
geometry), on each engine as a data engineer would write it without MapSmith:

* ``geopandas``: ``read_parquet`` both, ``geopandas.sjoin``, ``to_parquet``;
* ``duckdb``: one ``COPY (SELECT ... JOIN ... ON ST_Intersects) TO`` (DuckDB Spatial 1.5);
* ``sedonadb``: ``read_parquet`` both, the same SQL join, ``to_parquet`` (SedonaDB, one machine);
* ``spark``: Apache Sedona on Spark in local mode (``local[<nproc>]``), ``geoparquet`` in and out;
  the session's start (a JVM) is timed apart from the job, and the driver's heap is ``--spark-memory``.

Then the same data through MapSmith's ``spatial_join`` (inner) and ``count_in_polygons`` on each engine
MapSmith can route them to (``--mapsmith-ops``): checks, records and manifest included, which shows what
the router's choice costs at each size.

Every run is a fresh process. Peak memory is the process's own peak RSS (``VmHWM``, see
``common.own_peak_rss_mib``); for Spark the JVM is another process, so its peak (``VmHWM`` read from
/proc just before the session stops) is added to the Python driver's: the sum of two peaks, an upper
bound on their joint peak. A run that is killed,
runs out of memory or passes ``--timeout`` is recorded as such: that is the result, not an error.
The answer is checked outside the measured process: the number of (point, polygon) pairs and a digest
of the sorted pairs read back from each engine's output, which must be equal across engines.

Needs ``pip install '.[sedona,spark]'`` and the Sedona jars (``python -m mapsmith_sedona.jars fetch``);
an engine that is not installed is recorded as not run. Writes ``benchmarks/results/scale.json``;
``benchmarks/render.py`` turns it into ``docs/benchmarks.md``. It measures only and never asserts.

    python benchmarks/bench_scale.py [--points 1000000,10000000,30000000] [--runs 3] [--big-runs 1]
    python benchmarks/bench_scale.py --points 20000 --polygons 200 --runs 1 --output /tmp/scale.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_vector  # noqa: E402  (the extent, the polygons and the seed)
import common  # noqa: E402
import goal_children  # noqa: E402
import scale_data  # noqa: E402
import vector_children  # noqa: E402
from common import code_state, machine  # noqa: E402

RESULTS = HERE / "results" / "scale.json"
ENGINES = ("geopandas", "duckdb", "sedonadb", "spark")
# MapSmith's operations measured, with the engines that implement each (the DuckDB engine joins only)
MAPSMITH_RUNS = {
    "spatial_join": ("geopandas", "duckdb", "sedonadb", "spark"),
    "count_in_polygons": ("geopandas", "sedonadb", "spark"),
}
DEFAULT_POINTS = (1_000_000, 10_000_000, 30_000_000)
DEFAULT_RUNS = 3  # interleaved runs per engine at sizes up to BIG
BIG = 10_000_000  # from this size, --big-runs runs per engine (each costs minutes)
DEFAULT_BIG_RUNS = 1
DEFAULT_TIMEOUT_S = 1800
DEFAULT_SPARK_MEMORY = "12g"
SELECT_FIELDS = ("point_id", "value", "kind", "zone_id", "zone_name")


# -- data: scale_data.make_points (chunked, seeded per chunk) ----------------------------------------

make_points = scale_data.make_points


# -- what runs in each fresh process -------------------------------------------------------------


def _join_sql(points: str, zones: str, quote: str = '"') -> str:
    fields = ", ".join([f"p.{f}" for f in SELECT_FIELDS[:3]] + [f"z.{f}" for f in SELECT_FIELDS[3:]])
    return f"SELECT {fields}, p.geometry FROM {points} AS p JOIN {zones} AS z ON ST_Intersects(p.geometry, z.geometry)"


def child_geopandas(spec: dict[str, Any]) -> dict[str, Any]:
    spec = {**spec, "how": "inner", "predicate": "intersects"}
    return vector_children.child_join_geopandas(spec)


def child_duckdb(spec: dict[str, Any]) -> dict[str, Any]:
    spec = {**spec, "how": "inner"}
    return vector_children.child_join_duckdb(spec)


def child_sedonadb(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    import sedonadb

    sd = sedonadb.connect()
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    sd.read_parquet(spec["points"]).to_view("points")
    sd.read_parquet(spec["zones"]).to_view("zones")
    sd.sql(_join_sql("points", "zones")).to_parquet(spec["output"])
    return {"seconds": time.perf_counter() - t0, "setup_seconds": setup, "sedonadb": sedonadb.__version__}


_descendant_peaks_mib = goal_children.descendant_peaks_mib


def child_spark(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    cores = len(os.sched_getaffinity(0))
    spark = goal_children.spark_session(f"local[{cores}]", spec["spark_memory"], "bench_scale")
    spark.sql("SELECT ST_Point(0.0, 0.0)").collect()
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    spark.read.format("geoparquet").load(spec["points"]).createOrReplaceTempView("points")
    spark.read.format("geoparquet").load(spec["zones"]).createOrReplaceTempView("zones")
    joined = spark.sql(_join_sql("points", "zones"))
    partitions = joined.rdd.getNumPartitions()
    plan = joined._jdf.queryExecution().executedPlan().toString()  # which spatial join Sedona planned
    strategy = next((s for s in ("BroadcastIndexJoin", "RangeJoin", "DistanceJoin") if s in plan), "other")
    joined.write.format("geoparquet").mode("overwrite").save(spec["output"])
    seconds = time.perf_counter() - t0
    jvm = _descendant_peaks_mib()
    version = spark.version
    spark.stop()
    return {
        "seconds": seconds,
        "setup_seconds": setup,
        "spark": version,
        "master": f"local[{cores}]",
        "driver_memory": spec["spark_memory"],
        "output_partitions": partitions,
        "join_strategy": strategy,
        "jvm_peak_rss_mib": round(sum(jvm.values()), 1),
    }


def child_mapsmith(spec: dict[str, Any]) -> dict[str, Any]:
    """One MapSmith operation with one engine forced (the operation's other registrations removed)."""
    import importlib

    engine, operation = spec["engine"], spec["operation"]
    env = {"MAPSMITH_WORKSPACE": spec["workspace"], "MAPSMITH_SEDONADB_MIN_FEATURES": "0"}
    t_setup = time.perf_counter()
    from mapsmith.app import MapSmith
    from mapsmith_opensource import OPERATION_MODULES
    from mapsmith_opensource.join_ops import spatial_join_duckdb

    spatial_join_duckdb.DUCKDB_MIN_ROWS = 0
    if engine == "spark":
        env.update({"MAPSMITH_STACK": "sedona", "MAPSMITH_SPARK_MASTER": f"local[{len(os.sched_getaffinity(0))}]"})
        env["MAPSMITH_SPARK_DRIVER_MEMORY"] = spec["spark_memory"]
    else:
        for name in OPERATION_MODULES:
            module = importlib.import_module(f"mapsmith_opensource.{name}")
            module.REGISTRATIONS = tuple(
                r for r in module.REGISTRATIONS if r.operation != operation or r.engine == engine
            )
    app = MapSmith(env)
    setup = time.perf_counter() - t_setup
    arguments = {
        "spatial_join": {"input_path": "points.parquet", "join_path": "zones.parquet", "how": "inner"},
        "count_in_polygons": {"input_path": "zones.parquet", "points_path": "points.parquet"},
    }[operation]
    t0 = time.perf_counter()
    result = app.run(operation, {**arguments, "output_path": spec["output_name"]})
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"seconds": seconds, "setup_seconds": setup, "engine_ran": result.engine["name"]}
    out["answer"] = {k: v for k, v in result.answer.items() if isinstance(v, int | float)}
    if engine == "spark":
        out["jvm_peak_rss_mib"] = round(sum(_descendant_peaks_mib().values()), 1)
    return out


CHILDREN = {
    "geopandas": child_geopandas,
    "duckdb": child_duckdb,
    "sedonadb": child_sedonadb,
    "spark": child_spark,
    "mapsmith": child_mapsmith,
}


# -- the parent ----------------------------------------------------------------------------------


CGROUP_ROOT = Path("/sys/fs/cgroup/memory")  # cgroup v1's memory controller, as on this machine


class MemoryCap:
    """A memory cgroup every child (and the JVM it starts) runs in: the kernel kills what exceeds it.

    Peak RSS alone says how much an engine used on a machine that had room; a cap says what happens
    on a machine that has not. Needs root and cgroup v1's memory controller (``--memory-limit``).
    """

    def __init__(self, gib: float) -> None:
        self.gib = gib
        self.path = CGROUP_ROOT / f"mapsmith_bench_scale_{os.getpid()}"
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(int(gib * 2**30)))

    def enter(self) -> None:  # runs in the child between fork and exec
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def killed(self) -> bool:
        return int((self.path / "memory.failcnt").read_text()) > 0

    def close(self) -> None:
        self.path.rmdir()


def spawn(role: str, spec: dict[str, Any], timeout: float, cap: MemoryCap | None = None) -> dict[str, Any]:
    """One fresh process; its answer, or what stopped it (killed, out of memory, timed out)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", role, json.dumps(spec)],
            capture_output=True,
            text=True,
            cwd=spec["workspace"],
            timeout=timeout,
            preexec_fn=cap.enter if cap else None,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        killed = done.returncode < 0 or "MemoryError" in done.stderr or "OutOfMemory" in done.stderr
        what = "ran out of memory or was killed" if killed else "failed"
        if cap is not None and (done.returncode in (-9, 137) or "OutOfMemory" in done.stderr):
            what = f"ran out of memory: killed at the {cap.gib:g} GiB limit"
        return {"outcome": f"{what} (exit {done.returncode}): {' | '.join(tail)[-400:]}", "process_seconds": wall}
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    answer["process_seconds"] = wall
    answer["outcome"] = "finished"
    if "jvm_peak_rss_mib" in answer:
        answer["python_peak_rss_mib"] = answer["peak_rss_mib"]
        answer["peak_rss_mib"] = answer["peak_rss_mib"] + answer["jvm_peak_rss_mib"]
    return answer


def pairs_digest(output: Path) -> dict[str, Any]:
    """The (point_id, zone_id) pairs of a join's output (a file or Spark's folder of parts), counted and digested."""
    import numpy as np
    import pyarrow.dataset as ds

    files = sorted(output.glob("*.parquet")) if output.is_dir() else [output]
    table = ds.dataset([str(f) for f in files], format="parquet").to_table(columns=["point_id", "zone_id"])
    p = table.column("point_id").to_numpy().astype(np.int64)
    z = table.column("zone_id").to_numpy().astype(np.int64)
    order = np.lexsort((z, p))
    return {
        "pairs": int(len(p)),
        "pairs_sha256_16": hashlib.sha256(np.stack([p[order], z[order]]).tobytes()).hexdigest()[:16],
    }


def common_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in runs if r["outcome"] == "finished"]
    out: dict[str, Any] = {"runs": runs}
    if len(done) < len(runs):
        out["outcome"] = next(r["outcome"] for r in runs if r["outcome"] != "finished")
    if done:
        out["median_seconds"] = round(statistics.median(r["seconds"] for r in done), 3)
        out["median_peak_rss_mib"] = round(statistics.median(r["peak_rss_mib"] for r in done), 1)
    return out


def available(engine: str) -> str | None:
    """Why an engine cannot run in this environment, or None."""
    import importlib.util

    module = {"geopandas": "geopandas", "duckdb": "duckdb", "sedonadb": "sedonadb", "spark": "pyspark"}[engine]
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed in this Python"
    if engine == "spark":
        from mapsmith_sedona.jars import find_jars

        jars, problem = find_jars(os.environ)
        if jars is None:
            return problem
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            return "java is not installed"
    return None


def bench_size(work: Path, points: int, args: argparse.Namespace) -> dict[str, Any]:
    runs = args.runs if points < BIG else args.big_runs
    make_points(work / "points.parquet", points)
    record: dict[str, Any] = {"points": points, "runs_per_engine": runs, "engines": {}, "mapsmith": {}}
    record["points_file_bytes"] = (work / "points.parquet").stat().st_size
    t0 = time.perf_counter()  # what a manifest's input digest costs: sha256 of the file, one core
    common_digest(work / "points.parquet")
    record["points_file_sha256_seconds"] = round(time.perf_counter() - t0, 3)
    raw: dict[str, list[dict[str, Any]]] = {e: [] for e in args.engines}
    for n in range(runs if args.raw else 0):
        for engine in args.engines:
            output = work / f"joined_{engine}.parquet"
            spec = {
                "workspace": str(work),
                "points": str(work / "points.parquet"),
                "zones": str(work / "zones.parquet"),
                "output": str(output),
                "spark_memory": args.spark_memory,
            }
            result = spawn(engine, spec, args.timeout, args.cap)
            if result["outcome"] == "finished" and n == 0:
                result.update(pairs_digest(output))
                files = output.rglob("*") if output.is_dir() else [output]
                result["output_bytes"] = sum(f.stat().st_size for f in files if f.is_file())
            _remove(output)
            raw[engine].append(result)
            print(f"  {points:,} points, {engine}: {result['outcome']} {result.get('seconds', 0):.1f} s", flush=True)
    for engine, engine_runs in raw.items():
        if not engine_runs:
            continue
        record["engines"][engine] = _summary(engine_runs)
        first = engine_runs[0]
        for key in ("pairs", "pairs_sha256_16"):
            if key in first:
                record["engines"][engine][key] = first[key]
    digests = {e: r.get("pairs_sha256_16") for e, r in record["engines"].items() if r.get("pairs_sha256_16")}
    record["same_pairs"] = len(set(digests.values())) == 1 if digests else None
    for operation, engines in args.mapsmith_runs.items():
        results: dict[str, Any] = {}
        for engine in engines:
            spec = {
                "workspace": str(work),
                "engine": engine,
                "operation": operation,
                "output_name": f"{operation}_{engine}.parquet",
                "spark_memory": args.spark_memory,
            }
            result = spawn("mapsmith", spec, args.timeout, args.cap)
            for path in work.glob(f"{operation}_{engine}.parquet*"):
                _remove(path)
            results[engine] = result
            print(
                f"  {points:,} points, MapSmith {operation} on {engine}: {result['outcome'][:200]} "
                f"{result.get('seconds', 0):.1f} s",
                flush=True,
            )
        answers = {json.dumps(r.get("answer"), sort_keys=True) for r in results.values() if r["outcome"] == "finished"}
        record["mapsmith"][operation] = {"engines": results, "same_answers": len(answers) == 1 if answers else None}
    _remove(work / "points.parquet")
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return common.child_main(CHILDREN, argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default=",".join(str(p) for p in DEFAULT_POINTS))
    parser.add_argument("--polygons", type=int, default=bench_vector.DEFAULT_POLYGONS)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--big-runs", type=int, default=DEFAULT_BIG_RUNS)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--mapsmith-ops", default=",".join(MAPSMITH_RUNS), help="'' for none")
    parser.add_argument("--raw", action=argparse.BooleanOptionalAction, default=True, help="the engines alone")
    parser.add_argument("--spark-memory", default=DEFAULT_SPARK_MEMORY)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--memory-limit", type=float, default=None, help="GiB; every run in a memory cgroup")
    parser.add_argument("--workdir", type=Path, default=None, help="where the data goes (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = [int(p.replace("_", "")) for p in args.points.split(",")]
    wanted = [e for e in args.engines.split(",") if e]
    skipped = {e: r for e in wanted if (r := available(e))}
    args.engines = [e for e in wanted if e not in skipped]
    args.mapsmith_runs = {
        op: [e for e in MAPSMITH_RUNS[op] if e in args.engines] for op in args.mapsmith_ops.split(",") if op
    }
    load_before = os.getloadavg()[0]
    args.cap = MemoryCap(args.memory_limit) if args.memory_limit else None
    records = []
    with tempfile.TemporaryDirectory(prefix="bench_scale_", dir=args.workdir) as tmp:
        work = Path(tmp)
        bench_vector.make_zones(work / "zones.parquet", args.polygons)
        for points in sizes:
            print(f"{points:,} points x {args.polygons:,} polygons", flush=True)
            records.append(bench_size(work, points, args))
    if args.cap is not None:
        args.cap.close()
    record = {
        "name": "scale",
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_scale.py " + " ".join(argv),
        "machine": machine(("geopandas", "shapely", "duckdb", "sedonadb", "pyspark", "apache-sedona")),
        "code": code_state(),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "parameters": {
            "polygons": args.polygons,
            "crs": bench_vector.CRS,
            "predicate": "intersects",
            "how": "inner",
            "seed": bench_vector.SEED,
            "spark_driver_memory": args.spark_memory,
            "timeout_seconds": args.timeout,
            "memory_limit_gib": args.memory_limit,
        },
        "not_run": skipped,
        "sizes": records,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n", "utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
