"""Issue 22's goals, measured: each scale operation on every raw engine and through MapSmith, in one run.

For each operation of ``goal_ops.OPERATIONS`` and each size, interleaved and each run a fresh process:

* the raw engines doing the same file-to-file work alone (GeoPandas, DuckDB Spatial, SedonaDB, Apache Sedona
  on Spark in local mode, and on a standalone cluster when ``--spark-master``/``MAPSMITH_SPARK_MASTER`` names
  one), and
* MapSmith doing it: the Python API (``MapSmith(env).run``) and the MCP path (``python -m mapsmith`` over
  stdio through the MCP SDK's client, one ``run_operation`` call), checks, digests and manifest included;

each timed as the work alone and as the whole process (spawn to exit, start-up included), with its peak RSS
(the JVM, the MCP server and Spark executors added; see ``goal_children``) and the load average (1, 5,
15 minutes) when it started. Every output is read back outside the measured processes: rows, a digest of
its sorted key columns and one float measure, which must agree across engines. Ratios and verdicts
(``goal_verdicts``) compare MapSmith with the fastest agreeing raw engine of the same run. A run that is
killed, runs out of memory or times out is a result, recorded as such. It measures only and never asserts.

    python benchmarks/bench_goals.py --preset all --spark-master spark://127.0.0.1:7077
        # the whole set: 1M, 10M, 30M, then 30M capped (on a standalone cluster: tests/spark_cluster.start_cluster)
    python benchmarks/bench_goals.py --preset cluster-100m --spark-master spark://127.0.0.1:7077   # 100M points
    python benchmarks/bench_goals.py --points 1000000 --runs 1          # one size
    python benchmarks/bench_goals.py --eta --preset all       # what it would take, without running

``python benchmarks/render.py`` and ``python benchmarks/scaling_report.py`` turn the results into pages.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_vector  # noqa: E402
import common  # noqa: E402
import goal_children  # noqa: E402
import goal_ops  # noqa: E402
import goal_verdicts  # noqa: E402
import memory_cap  # noqa: E402
import scale_data  # noqa: E402

RESULTS = HERE / "results" / "goals.json"
CAPPED = HERE / "results" / "goals_capped.json"
CLUSTER = HERE / "results" / "goals_cluster.json"
DEFAULT_POINTS = (1_000_000, 10_000_000, 30_000_000)
BIG = 10_000_000  # from this size, --big-runs runs per variant
DEFAULT_TIMEOUT_S = 3600
DEFAULT_SPARK_MEMORY = "12g"
CAPPED_OPERATIONS = ("spatial_join", "count_in_polygons")
# Used by --eta when no earlier results exist: seconds per run = start-up + per-million x millions (measured
# at 1M on this 2-CPU machine under load, rounded up; an earlier results file replaces them).
ETA_DEFAULT = {"startup": 4.0, "per_million": 12.0, "spark_startup": 15.0}
PRESETS: dict[str, list[str]] = {
    "full": ["--points", "1000000,10000000,30000000"],
    "capped": [
        "--points",
        "30000000",
        "--operations",
        ",".join(CAPPED_OPERATIONS),
        "--engines",
        "duckdb,sedonadb,spark_cluster",
        "--mapsmith-stacks",
        "opensource,sedona",
        "--mapsmith-engines",
        "duckdb,sedonadb",
        "--mapsmith-paths",
        "api",
        "--memory-cap",
        "8G",
        "--output",
        str(CAPPED.relative_to(HERE.parent)),
    ],
    "cluster-100m": [
        "--points",
        "100000000",
        "--partitioned",
        "--operations",
        ",".join(CAPPED_OPERATIONS),
        "--engines",
        "duckdb,sedonadb,spark_cluster",
        "--mapsmith-stacks",
        "sedona",
        "--mapsmith-paths",
        "api",
        "--output",
        str(CLUSTER.relative_to(HERE.parent)),
    ],
}
# Presets whose pages compare MapSmith on a standalone Spark cluster: they refuse to run without one.
CLUSTER_PRESETS = ("capped", "cluster-100m")


def _cluster_named(args: argparse.Namespace) -> None:
    """Refuse a CLUSTER_PRESETS run that names no standalone cluster: without one MapSmith's sedona stack runs Spark
    in local mode, which those pages do not describe (at 30M under the 8 GiB cap local mode was killed at the cap
    where the cluster run finished)."""
    if args.preset in CLUSTER_PRESETS and not args.spark_master and not args.eta:
        raise SystemExit(
            f"--preset {args.preset} measures a standalone Spark cluster: pass --spark-master spark://host:7077 or set "
            "MAPSMITH_SPARK_MASTER (tests/spark_cluster.py's start_cluster() starts one on this machine)"
        )


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- one run -------------------------------------------------------------------------------------


# How long a run's leftovers (its process group after the child exited) may take to end before they are killed.
LEFTOVERS_TIMEOUT = 60.0


def group_members(pgid: int) -> list[int]:
    """The live processes (zombies left out: they hold no CPU or memory) of the process group ``pgid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_for_group(pgid: int, timeout: float = LEFTOVERS_TIMEOUT) -> float:
    """Wait until no live process of the group ``pgid`` is left, killing what is still there after ``timeout``; the
    seconds waited. A Spark child's JVM outlives its Python by seconds and loaded the runs after it (load 5-11 at the
    MapSmith runs following a Spark run of bench_goals' 1,000,000 points, 2026-12-05)."""
    start = time.perf_counter()
    killed = False
    while group_members(pgid):
        waited = time.perf_counter() - start
        if waited > timeout and not killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            killed = True
        elif waited > timeout + 10:  # killed and still listed: not ours to wait for any longer
            break
        time.sleep(0.1)
    return round(time.perf_counter() - start, 3)


def spawn(role: str, spec: dict[str, Any], timeout: float, cap: memory_cap.MemoryCap | None) -> dict[str, Any]:
    """One fresh process doing one run; what it measured, or what stopped it."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", role, json.dumps(spec)]
    record: dict[str, Any] = {"load_average": load_average()}
    if cap is not None:
        cap.prepare()
    start = time.perf_counter()
    # its own session, so a timeout ends the whole tree (a Spark child's JVM would outlive its Python)
    child = subprocess.Popen(
        cap.command(argv) if cap else argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=spec["workspace"],
        preexec_fn=cap.enter if cap else None,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        if cap is not None:
            cap.release()
        return {**record, "outcome": f"timed out after {timeout:.0f} s"}
    done = subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
    record["process_seconds"] = round(time.perf_counter() - start, 3)
    # off the clock: what the child left running (a Spark JVM shutting down) ends before the next run starts
    record["leftovers_wait_seconds"] = wait_for_group(child.pid)
    killed = cap.oom_killed() if cap else False
    if cap is not None:
        cap.release()
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])[-400:]
        if killed or (cap is not None and done.returncode in (-9, 137)):
            what = f"ran out of memory: killed at the {cap.size if cap else ''} cap"
        elif done.returncode < 0 or "MemoryError" in done.stderr or "OutOfMemory" in done.stderr:
            what = "ran out of memory or was killed"
        else:
            what = "failed"
        return {**record, "outcome": f"{what} (exit {done.returncode}): {tail}"}
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    own = answer.pop("peak_rss_mib")
    others = answer.get("descendants_peak_rss_mib", 0.0) + answer.get("executors_peak_rss_mib", 0.0)
    if role == "mapsmith_mcp":
        # the client stands in for the agent: MapSmith's memory is the server's and its worker's
        answer["client_peak_rss_mib"] = own
        answer["peak_rss_mib"] = round(others, 1)
    else:
        answer["own_peak_rss_mib"] = own
        answer["peak_rss_mib"] = round(own + others, 1)
    answer["seconds"] = round(answer["seconds"], 3)
    answer["setup_seconds"] = round(answer["setup_seconds"], 3)
    return {**record, **answer, "outcome": "finished"}


# -- reading an output back ----------------------------------------------------------------------


def output_answer(path: Path, op: goal_ops.GoalOp) -> dict[str, Any]:
    """Rows, a digest of the sorted integer keys (NULL as -1), the op's measure and its parts, read with DuckDB."""
    import numpy as np

    from mapsmith_opensource.duckdb_spatial import connect

    source = f"{path}/**/*.parquet" if path.is_dir() else str(path)
    con = connect()
    try:
        con.execute(f"CREATE VIEW raw AS SELECT * FROM read_parquet('{source}')")
        types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE raw)").fetchall())
        if types.get("geometry") in ("BLOB", "BINARY"):
            con.execute("CREATE VIEW t AS SELECT * REPLACE (ST_GeomFromWKB(geometry) AS geometry) FROM raw")
        else:
            con.execute("CREATE VIEW t AS SELECT * FROM raw")
        keys = ", ".join(f"COALESCE(CAST({k} AS BIGINT), -1) AS k{i}" for i, k in enumerate(op.keys))
        order = ", ".join(f"k{i}" for i in range(len(op.keys)))
        columns = con.execute(f"SELECT {keys} FROM t ORDER BY {order}").fetchnumpy()
        array = np.column_stack([np.asarray(columns[f"k{i}"]) for i in range(len(op.keys))])
        measure = con.execute(f"SELECT {op.measure} FROM t").fetchone()[0] if op.measure else None
        parts = con.execute(f"SELECT {op.parts} FROM t").fetchone()[0] if op.parts else None
    finally:
        con.close()
    array = array.astype(np.int64).reshape(-1, len(op.keys))
    return {
        "rows": int(array.shape[0]),
        "keys_sha256_16": hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16],
        "measure": None if measure is None else float(measure),
        **({} if parts is None else {"parts": int(parts)}),
    }


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


# -- the variants of one operation ---------------------------------------------------------------


def variants(op: goal_ops.GoalOp, args: argparse.Namespace) -> list[tuple[str, str, str, dict[str, str]]]:
    """(variant name, child role, MapSmith stack, MapSmith's extra environment) for one operation, in the order
    they run. ``--mapsmith-engines`` adds a MapSmith variant per named engine of the opensource stack
    (``mapsmith_api@duckdb``: ``MAPSMITH_ENGINE=duckdb``); ``auto`` is the router's own choice. The variants that
    start a JVM (Spark, MapSmith on the sedona stack) run last: a Spark run's JVM was still loading the machine
    when the next variant, MapSmith's, started (load average 6.2 at a 1,000,000-point buffer_layer run)."""
    out: list[tuple[str, str, str, dict[str, str]]] = [
        (e, e, "", {})
        for e in args.engines
        if (e == "geopandas" or e.removesuffix("_cluster") in op.sql)
        and (not e.startswith("spark") or op.name in args.spark_operations)
    ]
    for stack in args.mapsmith_stacks:
        engines = getattr(args, "mapsmith_engines", None) or ["auto"]
        for engine in engines if stack == "opensource" else ["auto"]:
            for path in args.mapsmith_paths:
                name = f"mapsmith_{path}" + ("" if stack == "opensource" else f"_{stack}")
                env = {}
                if engine != "auto":
                    name += f"@{engine}"
                    env = {"MAPSMITH_ENGINE": engine}
                out.append((name, f"mapsmith_{path}", stack, env))
    return sorted(out, key=lambda v: v[1].startswith("spark") or v[2] == "sedona")  # stable: the order kept within


def folder_output(args: argparse.Namespace, role: str, op: goal_ops.GoalOp) -> bool:
    """Whether MapSmith is asked for a folder of parts (``output_path`` ending in ``.parquet/``): with the points as
    a folder (``--partitioned``), as Spark alone writes its output, so that MapSmith on a cluster is not the one
    variant writing one file by one task. DuckDB and SedonaDB alone write one file, as they do at every size."""
    return bool(args.partitioned) and role.startswith("mapsmith") and op.output_suffix == ".parquet"


def bench_operation(work: Path, points: int, op: goal_ops.GoalOp, args: argparse.Namespace) -> dict[str, Any]:
    runs = args.runs if points < BIG else args.big_runs
    todo = variants(op, args)
    runs_by: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _, _ in todo}
    answers: dict[str, dict[str, Any]] = {}
    manifests: dict[str, bool] = {}
    for _n in range(runs):
        for name, role, stack, engine_env in todo:
            output = work / f"out_{op.name}_{name}{op.output_suffix}"
            spec = {
                "workspace": str(work),
                "operation": op.name,
                "output": str(output),
                "output_name": output.name + ("/" if folder_output(args, role, op) else ""),
                "stack": stack,
                "spark_master": args.spark_master if role == "spark_cluster" or stack == "sedona" else args.local,
                "spark_memory": args.spark_memory,
                "mapsmith_env": {**dict(args.mapsmith_env), **engine_env},
            }
            if role == "spark":
                spec["spark_master"] = args.local
            result = spawn(role, spec, args.timeout, args.cap)
            if result["outcome"] == "finished" and name not in answers:
                try:
                    answers[name] = output_answer(output, op)
                except Exception as exc:  # an unreadable output is that run's finding, not the benchmark's end
                    result["answer_error"] = f"output unreadable: {type(exc).__name__}: {str(exc)[:300]}"
                if name.startswith("mapsmith"):
                    manifests[name] = Path(f"{output}.provenance.json").exists()
            runs_by[name].append(result)
            for leftover in work.glob(f"{output.name}*"):
                _remove(leftover)
            print(
                f"  {points:,} {op.name} {name}: {result['outcome'][:160]} "
                f"work {result.get('seconds', 0):.1f} s, process {result.get('process_seconds', 0):.1f} s, "
                f"{result.get('peak_rss_mib', 0):,.0f} MiB, load {result['load_average']}",
                flush=True,
            )
    summaries = {name: {**goal_verdicts.summarize(r), "runs_detail": r} for name, r in runs_by.items()}
    agreeing, same = goal_verdicts.agreeing_variants(answers, goal_ops.MEASURE_RELATIVE_TOLERANCE)
    verdicts = {
        name: {level: goal_verdicts.verdict(summaries, agreeing, name, level) for level in goal_verdicts.LEVELS}
        for name in summaries
        if not goal_verdicts.is_raw(name)
    }
    return {
        "variants": summaries,
        "answers": answers,
        "agreeing": sorted(agreeing),
        "same_answer": same,
        "manifests_written": manifests,
        "verdicts": verdicts,
        "runs_per_variant": runs,
    }


def bench_size(work: Path, points: int, args: argparse.Namespace) -> dict[str, Any]:
    needed = {stem for name in args.operations for stem in goal_ops.OPERATIONS[name].inputs}
    t0 = time.perf_counter()
    if args.partitioned:
        scale_data.make_points_parts(work / "points.parquet", points)
        needed.discard("points")
    inputs = scale_data.make_inputs(work, points, args.polygons, needed)
    if args.partitioned:
        inputs["points"] = points
    record: dict[str, Any] = {
        "points": points,
        "inputs": inputs,
        "generate_seconds": round(time.perf_counter() - t0, 1),
        "load_average_at_start": load_average(),
        "operations": {},
    }
    for name in args.operations:
        op = goal_ops.OPERATIONS[name]
        result = bench_operation(work, points, op, args)
        result["features"] = inputs.get(op.features_from, points)
        record["operations"][name] = result
        write_results(args, partial_sizes=[*args.done_sizes, record])  # a long run keeps what it measured
    for stem in ("points", "parcels"):
        _remove(work / f"{stem}.parquet")
    return record


# -- ETA and the run as a whole ------------------------------------------------------------------


def eta_seconds(points: int, args: argparse.Namespace, previous: dict[str, Any] | None) -> float:
    """Seconds one size will take: per run, start-up plus a per-million rate (from ``previous`` when given)."""
    runs = args.runs if points < BIG else args.big_runs
    millions = points / 1e6
    total = 0.0
    for name in args.operations:
        op = goal_ops.OPERATIONS[name]
        for variant, role, stack, _env in variants(op, args):
            rate = _previous_rate(previous, name, variant)
            startup = ETA_DEFAULT["spark_startup"] if "spark" in role or stack == "sedona" else ETA_DEFAULT["startup"]
            total += runs * (startup + (rate if rate is not None else ETA_DEFAULT["per_million"]) * millions)
    return total + 20 * millions  # the data generator, about 20 s per million points here


def _previous_rate(previous: dict[str, Any] | None, operation: str, variant: str) -> float | None:
    if not previous:
        return None
    rates = []
    for size in previous.get("sizes", []):
        s = size["operations"].get(operation, {}).get("variants", {}).get(variant, {})
        if "median_process_seconds" in s:
            rates.append(s["median_process_seconds"] / (size["points"] / 1e6))
    return max(rates) if rates else None


def kept_operations(previous: dict[str, Any] | None, sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """--merge: each size with the operations this run did not measure kept from the results file it replaces,
    first, each marked ``measured_in`` with the run that measured it (its time, commit and command). The inputs they
    read and this run did not make (clip_layer's mask) stay in the size's inputs."""
    if not previous:
        return sizes
    earlier = {s["points"]: s for s in previous.get("sizes", [])}
    origin = {k: previous[k] for k in ("measured_at", "code", "command")}
    out = []
    for size in sizes:
        kept = {
            name: {"measured_in": origin, **op}  # an operation kept by an earlier merge keeps its own origin
            for name, op in earlier.get(size["points"], {}).get("operations", {}).items()
            if name not in size["operations"]
        }
        merged = {**size, "operations": {**kept, **size["operations"]}}
        if kept:
            merged["inputs"] = {**earlier[size["points"]].get("inputs", {}), **size.get("inputs", {})}
        out.append(merged)
    return out


def write_results(args: argparse.Namespace, partial_sizes: list[dict[str, Any]]) -> None:
    measured = partial_sizes
    if args.merge:
        partial_sizes = kept_operations(args.previous, partial_sizes)
    record = {
        "name": "goals",
        "measured_at": args.started,
        "finished": len(measured) == len(args.sizes)
        and all(len(s["operations"]) == len(args.operations) for s in measured),
        "command": "python benchmarks/bench_goals.py " + " ".join(args.argv),
        "machine": common.machine(("geopandas", "shapely", "duckdb", "sedonadb", "pyspark", "apache-sedona")),
        "code": args.code,
        "load_average_before": args.load_before,
        "load_average_after": load_average(),
        "parameters": {
            "operations": args.operations,
            "polygons": args.polygons,
            "crs": bench_vector.CRS,
            "seed": bench_vector.SEED,
            "runs": args.runs,
            "big_runs": args.big_runs,
            "big_from_points": BIG,
            "timeout_seconds": args.timeout,
            "partitioned_points": args.partitioned,
            "mapsmith_output_folder": args.partitioned,
            "spark_local_master": args.local,
            "spark_cluster_master": args.spark_master,
            "spark_driver_memory": args.spark_memory,
            "spark_operations": args.spark_operations,
            "memory_cap": args.cap.describe() if args.cap else None,
            "goal": {
                "time_ratio_max": goal_verdicts.TIME_RATIO_MAX,
                "memory_ratio_max": goal_verdicts.MEMORY_RATIO_MAX,
            },
            "measure_relative_tolerance": goal_ops.MEASURE_RELATIVE_TOLERANCE,
        },
        "memory_cap_probe": args.cap_probe,
        "not_run": merged_not_run(args.skipped, args.previous if args.merge else None, partial_sizes),
        "sizes": partial_sizes,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    partial = args.output.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n", "utf-8")
    partial.replace(args.output)  # atomic: a reader never sees half a file


# Every raw engine a run can time: --engines' default. One a run leaves out is named under "Not run" on its page.
ALL_ENGINES = ("geopandas", "duckdb", "sedonadb", "spark", "spark_cluster")
LEFT_OUT = "left out of this run by --engines (or its preset)"


def merged_not_run(
    skipped: dict[str, str], previous: dict[str, Any] | None, sizes: list[dict[str, Any]]
) -> dict[str, str]:
    """The page's "Not run" after --merge: this run's, and every other raw engine missing from an operation kept from
    an earlier run, with the earlier run's reason and the operations it was not run for (a merge would otherwise
    drop that an engine this run did time was not timed for the operations it kept)."""
    out = dict(skipped)
    earlier = (previous or {}).get("not_run", {})
    for engine in ALL_ENGINES:
        if engine in out:
            continue
        missing = [
            f"{name} at {size['points']:,} points"
            for size in sizes
            for name, op in size["operations"].items()
            if engine not in op["variants"]
        ]
        if missing:  # without an earlier reason (--spark-operations, a run that did not finish ...) none is guessed
            out[engine] = f"{earlier.get(engine, 'not run')} (for {', '.join(missing)})"
    return out


def not_run(wanted: list[str], spark_master: str | None) -> dict[str, str]:
    """Each raw engine this run does not time, and why: left out by --engines, or unable to run here (``available``).
    A page comparing with "the fastest raw engine" must say which engines it did not ask."""
    left = {e: LEFT_OUT for e in ALL_ENGINES if e not in wanted}
    return {**left, **{e: why for e in wanted if (why := available(e, spark_master))}}


def available(engine: str, spark_master: str | None) -> str | None:
    """Why a raw engine cannot run here, or None."""
    import importlib.util

    module = {"geopandas": "geopandas", "duckdb": "duckdb", "sedonadb": "sedonadb"}.get(engine, "pyspark")
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed in this Python"
    if engine == "spark_cluster" and not spark_master:
        return "no standalone cluster named: pass --spark-master spark://host:7077 or set MAPSMITH_SPARK_MASTER"
    if engine.startswith("spark"):
        from mapsmith_sedona.jars import find_jars

        jars, problem = find_jars(os.environ)
        if jars is None:
            return problem
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            return "java is not installed"
    return None


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--preset", choices=[*sorted(PRESETS), "all"], help="a named set of the options below; all = full, then capped"
    )
    parser.add_argument("--points", default=",".join(str(p) for p in DEFAULT_POINTS))
    parser.add_argument("--operations", default=",".join(goal_ops.OPERATIONS))
    parser.add_argument("--engines", default=",".join(ALL_ENGINES))
    parser.add_argument("--mapsmith-paths", default="api,mcp", help="api, mcp or both")
    parser.add_argument("--mapsmith-stacks", default="opensource", help="opensource and/or sedona (Spark)")
    parser.add_argument(
        "--mapsmith-engines",
        default="auto",
        help="on the opensource stack: auto (the router's choice) and/or engine names, each its own MapSmith "
        "variant run with MAPSMITH_ENGINE=<name> (e.g. auto,duckdb,sedonadb)",
    )
    parser.add_argument(
        "--mapsmith-env",
        action="append",
        default=[],
        type=lambda kv: tuple(kv.split("=", 1)) if "=" in kv else parser.error(f"--mapsmith-env {kv}: KEY=VALUE"),
        help="KEY=VALUE set in MapSmith's environment (repeatable), e.g. MAPSMITH_DUCKDB_LAYER_MIN_FEATURES=0 to "
        "force an engine when measuring a threshold",
    )
    parser.add_argument("--spark-master", default=os.environ.get("MAPSMITH_SPARK_MASTER"))
    parser.add_argument("--spark-memory", default=DEFAULT_SPARK_MEMORY)
    parser.add_argument(
        "--spark-operations", default=None, help="the operations Spark alone runs (default: all); a JVM per run is slow"
    )
    parser.add_argument("--polygons", type=int, default=bench_vector.DEFAULT_POLYGONS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--big-runs", type=int, default=1)
    parser.add_argument("--partitioned", action="store_true", help="points as a folder of parts (100M)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--memory-cap", default=None, help="e.g. 8G: every run under this cap")
    parser.add_argument("--memory-cap-method", choices=memory_cap.METHODS, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="where the data goes (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the operations of --output's sizes that this run does not measure (each marked with the run "
        "that measured it), e.g. to add count_in_polygons to a cluster run without redoing spatial_join",
    )
    parser.add_argument("--eta", action="store_true", help="print the ETA per size and stop")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.preset:
        preset = args.preset
        explicit = [a for a in argv if a not in ("--preset", preset)]
        args = parser.parse_args([*PRESETS[preset], *explicit])
        args.argv, args.preset = argv, preset
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return common.child_main(goal_children.CHILDREN, argv[1], argv[2])
    if "--preset" in argv and "all" in argv:  # the whole set is two runs: uncapped, then the capped one
        rest = [a for a in argv if a not in ("--preset", "all")]
        _cluster_named(parse(["--preset", "capped", *rest]))  # before the hours of the first run, not after
        return main(["--preset", "full", *rest]) or main(["--preset", "capped", *rest])
    args = parse(argv)
    _cluster_named(args)
    args.sizes = [int(p.replace("_", "")) for p in args.points.split(",")]
    args.operations = [o for o in args.operations.split(",") if o]
    unknown = [o for o in args.operations if o not in goal_ops.OPERATIONS]
    if unknown:
        raise SystemExit(f"unknown operations {unknown}; known: {', '.join(goal_ops.OPERATIONS)}")
    wanted = [e for e in args.engines.split(",") if e]
    args.skipped = not_run(wanted, args.spark_master)
    args.engines = [e for e in wanted if e not in args.skipped]
    args.spark_operations = (
        args.operations if args.spark_operations is None else [o for o in args.spark_operations.split(",") if o]
    )
    args.mapsmith_paths = [p for p in args.mapsmith_paths.split(",") if p]
    args.mapsmith_stacks = [s for s in args.mapsmith_stacks.split(",") if s]
    args.mapsmith_engines = [e for e in args.mapsmith_engines.split(",") if e]
    args.local = f"local[{len(os.sched_getaffinity(0))}]"
    previous = json.loads(args.output.read_text("utf-8")) if args.output.exists() else None
    args.previous = previous
    total = 0.0
    for points in args.sizes:
        eta = eta_seconds(points, args, previous)
        total += eta
        print(f"ETA {points:,} points: about {eta / 60:,.0f} min", flush=True)
    print(f"ETA in all: about {total / 3600:,.1f} h ({'from ' + str(args.output) if previous else 'default rates'})")
    if args.eta:
        return 0
    args.cap_probe = None
    args.cap = None
    if args.memory_cap:
        method, args.cap_probe = memory_cap.best(args.memory_cap_method)
        args.cap = memory_cap.MemoryCap(args.memory_cap, method)
    args.started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    args.code = common.code_state()
    args.load_before = load_average()
    args.done_sizes = []
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)  # a --workdir not made yet is made, not refused
    with tempfile.TemporaryDirectory(prefix="bench_goals_", dir=args.workdir) as tmp:
        for points in args.sizes:
            print(f"{points:,} points: {', '.join(args.operations)}", flush=True)
            args.done_sizes.append(bench_size(Path(tmp), points, args))
    write_results(args, args.done_sizes)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
