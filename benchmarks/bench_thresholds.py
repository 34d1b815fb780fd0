"""The router's size thresholds measured: from how many features each DuckDB engine beats GeoPandas.

Five operations have a DuckDB engine beside the GeoPandas one, preferred from a number of input features
kept in the code (``join_ops.spatial_join_duckdb.DUCKDB_MIN_ROWS``, ``reproject_duckdb.REPROJECT_MIN_ROWS``,
``sql_layer_ops.CLIP_MIN_ROWS``, ``select_duckdb.SELECT_MIN_ROWS``, ``buffer_duckdb.BUFFER_MIN_ROWS``).
This runs each of them through ``MapSmith(env).run`` on both engines (forced with ``MAPSMITH_ENGINE``) at
growing sizes of ``scale_data``'s points: a fresh process per run, the engines interleaved, checks, digests
and manifest included. Before the clock each process is what the MCP server's engine worker is before a
call (``MapSmith.warm()``: DuckDB's database open with spatial loaded) and GeoPandas is imported too, as
in a worker that has already run a GeoPandas operation: the case most favourable to GeoPandas (a worker
that has not pays its import, about 0.3 s, on the first GeoPandas run). Each run reports the work's wall
time, its CPU seconds (user and system, DuckDB's threads included), the whole process's wall time (spawn to
exit: start-up, the warm-up and GeoPandas' import included) and the process's peak RSS.

The raw engines that can do the same file-to-file work (``goal_children``' GeoPandas, DuckDB and SedonaDB,
``goal_ops``' code and SQL) run in the same loop, interleaved with MapSmith's runs, timed the same two ways;
each output's row count is read back by this parent, outside every measured process, so that the page can
say whether they agree. They do not enter the threshold: it compares MapSmith's two engines.

For spatial_join the zones (``bench_vector``'s polygons) number a tenth of the points, at least ten, so
the larger input, which the threshold counts, is the points.

The threshold a size series supports (``render_thresholds.supported_threshold``) is the smallest size
measured from which DuckDB's median work time was at most GeoPandas's at that size and every larger one;
tests check the constants in the code against it. The thresholds are read off the work alone: the
router chooses for a server's worker that is already running, where start-up is not paid per call.
Writes ``benchmarks/results/thresholds.json``;
``benchmarks/render.py`` puts it into ``docs/benchmarks.md``. It measures only and never asserts.

    python benchmarks/bench_thresholds.py [--sizes 10,100,1000,10000,100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402
import goal_children  # noqa: E402
import goal_ops  # noqa: E402
import scale_data  # noqa: E402
from render_thresholds import supported_threshold  # noqa: E402

RESULTS = HERE / "results" / "thresholds.json"
DEFAULT_SIZES = (10, 100, 1_000, 10_000, 100_000)
ENGINES = ("geopandas", "duckdb")
# The raw engines run beside MapSmith's two (goal_children's functions, file to file).
RAW_ENGINES = ("raw_geopandas", "raw_duckdb", "raw_sedonadb")
VARIANTS = ENGINES + RAW_ENGINES
# operation -> the module and constant holding its threshold
OPERATIONS = {
    "spatial_join": "mapsmith_opensource.join_ops.spatial_join_duckdb.DUCKDB_MIN_ROWS",
    "reproject_layer": "mapsmith_opensource.reproject_duckdb.REPROJECT_MIN_ROWS",
    "clip_layer": "mapsmith_opensource.sql_layer_ops.CLIP_MIN_ROWS",
    "select_features": "mapsmith_opensource.select_duckdb.SELECT_MIN_ROWS",
    "buffer_layer": "mapsmith_opensource.buffer_duckdb.BUFFER_MIN_ROWS",
}


def zones_for(points: int) -> int:
    return max(10, points // 10)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One run: MapSmith warmed and GeoPandas imported, then the operation on the clock."""
    from mapsmith.app import MapSmith

    env = {"MAPSMITH_WORKSPACE": spec["workspace"], "MAPSMITH_QGIS_ALGORITHMS": "0", "MAPSMITH_ENGINE": spec["engine"]}
    app = MapSmith(env)
    app.warm()
    import geopandas  # noqa: F401  (loaded before the clock: see the module docstring)

    op = goal_ops.OPERATIONS[spec["operation"]]
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    result = app.run(op.name, goal_ops.mapsmith_arguments(op, spec["output_name"]))
    seconds = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    return {"seconds": seconds, "cpu_seconds": cpu, "status": result.status, "engine_ran": result.engine.get("name")}


def raw(spec: dict[str, Any]) -> dict[str, Any]:
    """One raw engine's run (goal_children's, which imports and connects the engine before its clock). A raw engine
    reports no status of its own: "ok" says only that the child returned its answer (``common.spawn`` stops the
    benchmark on any other exit); whether its output agrees is the rows read back by the parent."""
    name = spec["engine"].removeprefix("raw_")
    out = getattr(goal_children, f"raw_{name}")(spec)
    return {"seconds": out["seconds"], "setup_seconds": out["setup_seconds"], "engine_ran": name, "status": "ok"}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary = {
        "seconds_median": round(statistics.median(r["seconds"] for r in runs), 4),
        "seconds_min": round(min(r["seconds"] for r in runs), 4),
        "seconds_max": round(max(r["seconds"] for r in runs), 4),
        "process_seconds_median": round(statistics.median(r["process_seconds"] for r in runs), 4),
        "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs), 1),
        "engines_ran": sorted({r["engine_ran"] for r in runs}),
        "statuses": sorted({r["status"] for r in runs}),
        "rows_out": sorted({r["rows_out"] for r in runs}),
    }
    if all("cpu_seconds" in r for r in runs):
        summary["cpu_seconds_median"] = round(statistics.median(r["cpu_seconds"] for r in runs), 4)
    return summary


def _rows_out(path: Path) -> int:
    """The rows of an output file, or of a folder of parts, from their Parquet footers."""
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    return sum(pq.read_metadata(f).num_rows for f in files)


def _remove_outputs(work: Path) -> None:
    import shutil

    for path in work.glob("out_*"):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    operations: dict[str, Any] = {}
    for name in args.operations:
        operations[name] = {"threshold_constant": OPERATIONS[name], "series": []}
    for points in args.sizes:
        size_dir = work / f"n{points}"
        size_dir.mkdir(parents=True, exist_ok=True)
        needed = {stem for name in args.operations for stem in goal_ops.OPERATIONS[name].inputs}
        scale_data.make_inputs(size_dir, points, zones_for(points), needed)
        for name in args.operations:
            runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in VARIANTS}
            load = list(os.getloadavg())
            for i in range(args.runs):
                for engine in VARIANTS[i % len(VARIANTS) :] + VARIANTS[: i % len(VARIANTS)]:  # rotated per run
                    output = size_dir / f"out_{engine}_{i}.parquet"
                    spec = {
                        "workspace": str(size_dir),
                        "operation": name,
                        "engine": engine,
                        "output_name": output.name,
                        "output": str(output),
                    }
                    answer = common.spawn(__file__, "raw" if engine in RAW_ENGINES else "run", spec)
                    answer["rows_out"] = _rows_out(output)
                    runs[engine].append(answer)
                    _remove_outputs(size_dir)
            row = {"points": points, "load_average": load}
            row.update({engine: _summary(runs[engine]) for engine in VARIANTS})
            operations[name]["series"].append(row)
            print(
                f"{name} {points:,}: geopandas {row['geopandas']['seconds_median']:.3f} s, "
                f"duckdb {row['duckdb']['seconds_median']:.3f} s",
                flush=True,
            )
    for entry in operations.values():
        entry["supported_threshold"] = supported_threshold(entry["series"])
    return operations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("ROLE", "SPEC"), help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--operations", default=",".join(OPERATIONS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.child:
        return common.child_main({"run": child, "raw": raw}, *args.child)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.operations = [s for s in args.operations.split(",") if s]
    load_before = list(os.getloadavg())
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with tempfile.TemporaryDirectory(prefix="mapsmith-thresholds-") as tmp:
        work = args.workdir or Path(tmp)
        operations = bench(args, work)
    result = {
        "benchmark": "router thresholds: DuckDB against GeoPandas through MapSmith",
        "command": "python benchmarks/bench_thresholds.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "runs": args.runs,
        "zones": "a tenth of the points, at least 10 (bench_vector's polygons)",
        "geopandas_preloaded": True,
        "raw_engines": list(RAW_ENGINES),
        "operations": operations,
        "measured_at": started.isoformat(),
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "code": common.code_state(),
        "machine": common.machine(["geopandas", "duckdb", "shapely", "pyarrow"]),
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
