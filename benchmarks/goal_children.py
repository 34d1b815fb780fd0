"""What runs inside each fresh process of the goal benchmark: one engine, or MapSmith, doing one operation once.

A child imports what it needs (that is "setup"), then does the work on the clock ("seconds"), and reports
what it ran. The parent (``bench_goals.py``) times the process from spawn to exit around it, so each run
gives the work alone and the whole process. It must never check an answer or decide a verdict: outputs are
read back by the parent, outside every measured process.

Peak memory is the child's own ``VmHWM`` plus that of every process it started and is still running when
the work ends (the JVM of a Spark session, the ``python -m mapsmith`` server of the MCP path and its
sandbox worker), and, on a Spark standalone cluster, the executors of this application (found by its
application id in their command lines): a sum of peaks, an upper bound on their joint peak.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import goal_ops

SPARK_EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def _proc_status_peak_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def descendant_peaks_mib() -> dict[int, float]:
    """Peak RSS (VmHWM) of every live descendant of this process, by pid (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    peaks: dict[int, float] = {}
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        peak = _proc_status_peak_mib(pid)
        if peak is not None:
            peaks[pid] = peak
    return peaks


def executor_peaks_mib(app_id: str) -> dict[int, float]:
    """Peak RSS of the Spark executors serving ``app_id`` (a standalone cluster starts them under its workers)."""
    peaks: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if SPARK_EXECUTOR_CLASS in cmdline and app_id in cmdline:
            peak = _proc_status_peak_mib(int(entry.name))
            if peak is not None:
                peaks[int(entry.name)] = peak
    return peaks


def _others_peak(app_id: str | None = None) -> dict[str, Any]:
    descendants = descendant_peaks_mib()
    executors = executor_peaks_mib(app_id) if app_id and not app_id.startswith("local") else {}
    executors = {pid: mib for pid, mib in executors.items() if pid not in descendants}
    return {
        "descendants_peak_rss_mib": round(sum(descendants.values()), 1),
        "executors_peak_rss_mib": round(sum(executors.values()), 1),
        "executors": len(executors),
    }


def _path(spec: dict[str, Any], stem: str) -> str:
    return str(Path(spec["workspace"]) / f"{stem}.parquet")


def _glob(spec: dict[str, Any], stem: str) -> str:
    """A partitioned input (a folder of parts, ``--partitioned``) as the glob DuckDB and SedonaDB read."""
    path = Path(_path(spec, stem))
    return f"{path}/*.parquet" if path.is_dir() else str(path)


# -- the raw engines -----------------------------------------------------------------------------


def raw_geopandas(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    import geopandas as gpd

    op = goal_ops.OPERATIONS[spec["operation"]]
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    frames = {stem: gpd.read_parquet(_path(spec, stem)) for stem in op.inputs}
    out = op.geopandas(frames)
    out.to_parquet(spec["output"], index=False)
    return {"seconds": time.perf_counter() - t0, "setup_seconds": setup, **_others_peak()}


def raw_duckdb(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    from mapsmith_opensource.duckdb_spatial import connect

    op = goal_ops.OPERATIONS[spec["operation"]]
    con = connect()
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    for stem in op.inputs:
        con.execute(f"CREATE VIEW {stem} AS SELECT * FROM read_parquet('{_glob(spec, stem)}')")
    con.execute(f"COPY ({op.sql['duckdb']}) TO '{spec['output']}' (FORMAT parquet)")
    seconds = time.perf_counter() - t0
    con.close()
    return {"seconds": seconds, "setup_seconds": setup, "threads": int(threads), **_others_peak()}


def raw_sedonadb(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    import sedonadb

    op = goal_ops.OPERATIONS[spec["operation"]]
    sd = sedonadb.connect()
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    for stem in op.inputs:
        sd.read_parquet(_glob(spec, stem)).to_view(stem)
    sd.sql(op.sql["sedonadb"]).to_parquet(spec["output"])
    return {"seconds": time.perf_counter() - t0, "setup_seconds": setup, **_others_peak()}


def spark_session(master: str, memory: str, app_name: str) -> Any:
    """A Spark session with Sedona, in local mode or on a standalone cluster's ``master`` URL."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    from mapsmith_sedona.jars import find_jars

    jars, problem = find_jars(os.environ)
    if jars is None:
        raise SystemExit(f"the Sedona jars are missing: {problem}")
    cores = len(os.sched_getaffinity(0))
    conf = (
        SparkConf()
        .setMaster(master)
        .setAppName(app_name)
        .set("spark.jars", ",".join(jars))
        .set("spark.driver.memory", memory)
        .set("spark.sql.extensions", "org.apache.sedona.sql.SedonaSqlExtensions")
        .set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .set("spark.kryo.registrator", "org.apache.sedona.core.serde.SedonaKryoRegistrator")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.driver.bindAddress", "127.0.0.1")
        .set("spark.sql.shuffle.partitions", str(max(2, cores)))
    )
    gateway = launch_gateway(conf, popen_kwargs={"stdout": 2})
    context = SparkContext(conf=conf, gateway=gateway)
    context.setLogLevel("ERROR")
    return SparkSession(context)


def raw_spark(spec: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    op = goal_ops.OPERATIONS[spec["operation"]]
    spark = spark_session(spec["spark_master"], spec["spark_memory"], f"bench_goals_{op.name}")
    spark.sql("SELECT ST_Point(0.0, 0.0)").collect()
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    for stem in op.inputs:
        spark.read.format("geoparquet").load(_path(spec, stem)).createOrReplaceTempView(stem)
    result = spark.sql(op.sql["spark"])
    (result.write.format("parquet" if op.table_output else "geoparquet").mode("overwrite").save(spec["output"]))
    seconds = time.perf_counter() - t0
    app_id = spark.sparkContext.applicationId
    others = _others_peak(app_id)
    version = spark.version
    spark.stop()
    return {"seconds": seconds, "setup_seconds": setup, "spark": version, "master": spec["spark_master"], **others}


# -- MapSmith ------------------------------------------------------------------------------------


def _mapsmith_env(spec: dict[str, Any]) -> dict[str, str]:
    env = {"MAPSMITH_WORKSPACE": spec["workspace"], "MAPSMITH_QGIS_ALGORITHMS": "0"}
    if spec.get("stack") == "sedona":
        env.update(
            {
                "MAPSMITH_STACK": "sedona",
                "MAPSMITH_SPARK_MASTER": spec["spark_master"],
                "MAPSMITH_SPARK_DRIVER_MEMORY": spec["spark_memory"],
                # the session started by MapSmith.warm(), before the work's clock, as raw Spark's is before its own
                "MAPSMITH_SPARK_WARM": "1",
            }
        )
    env.update(spec.get("mapsmith_env") or {})  # --mapsmith-env: e.g. a threshold forced while measuring it
    return env


def _spark_app_id() -> str | None:
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    return None if context is None else str(context.applicationId)


def _spark_running() -> bool:
    """Whether MapSmith's Spark session is running (read right after ``MapSmith.warm()``: whether it started it)."""
    if "pyspark" not in sys.modules:
        return False
    from mapsmith_sedona.spark_session import running

    return running() is not None


def mapsmith_api(spec: dict[str, Any]) -> dict[str, Any]:
    """``MapSmith(env).run(operation, arguments)``: the Python API, checks, digests and manifest included."""
    start = time.perf_counter()
    from mapsmith.app import MapSmith

    op = goal_ops.OPERATIONS[spec["operation"]]
    app = MapSmith(_mapsmith_env(spec))
    # Ready as a raw engine's caller is before its clock (imported, connected, spatial loaded), and as the MCP
    # server's worker is before a call: the engines imported and DuckDB's database opened.
    warmed = app.warm()
    spark_warmed = _spark_running()  # before the run, which would start it
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    result = app.run(op.name, goal_ops.mapsmith_arguments(op, spec["output_name"]))
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "setup_seconds": setup,
        "warmed": ", ".join(sorted(name for name, state in warmed.items() if state == "ready")),
        "spark_session_warmed": spark_warmed,
        "engine_ran": result.engine.get("name"),
        "status": result.status,
        **_others_peak(_spark_app_id()),
    }


WARM_WAIT_MAX_S = 60.0


async def _wait_until_warm(session: Any) -> float | None:
    """Seconds from ``initialize``'s answer until the server's engine worker reported its warm-up done (server_info's
    ``sandbox.warm_workers``), off the work's clock as the Python API's ``MapSmith.warm()`` is; None when the server
    runs its engines in-process (no worker, nothing to wait for). At most WARM_WAIT_MAX_S, then the clock starts
    anyway."""
    start = time.perf_counter()
    while True:
        reply = await session.call_tool("server_info", {})
        first = reply.content[0]
        sandbox = json.loads(first.text if hasattr(first, "text") else "{}").get("sandbox") or {}
        if "warm_workers" not in sandbox:
            return None
        if sandbox["warm_workers"] > 0 or time.perf_counter() - start > WARM_WAIT_MAX_S:
            return time.perf_counter() - start
        await asyncio.sleep(0.05)


async def _mcp_call(spec: dict[str, Any]) -> dict[str, Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    op = goal_ops.OPERATIONS[spec["operation"]]
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mapsmith"], env=_mapsmith_env(spec), cwd=spec["workspace"]
    )
    t_start = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        warm_wait = await _wait_until_warm(session)
        setup = time.perf_counter() - t_start
        t0 = time.perf_counter()
        reply = await session.call_tool(
            "run_operation",
            {"operation": op.name, "arguments": goal_ops.mapsmith_arguments(op, spec["output_name"])},
        )
        seconds = time.perf_counter() - t0
        others = _others_peak()  # the server and its worker are still alive: their peaks are readable
    first = reply.content[0]
    text = json.loads(first.text if hasattr(first, "text") else "{}")  # MapSmith replies with one text block
    if getattr(reply, "is_error", None) or getattr(reply, "isError", None):
        raise SystemExit(f"MapSmith refused over MCP: {json.dumps(text)[:600]}")
    engine = text.get("engine") or {}
    return {
        "seconds": seconds,
        "setup_seconds": setup,
        "engine_ran": engine.get("name") if isinstance(engine, dict) else engine,
        "status": text.get("status"),
        "warm_wait_seconds": warm_wait,
        **others,
    }


def mapsmith_mcp(spec: dict[str, Any]) -> dict[str, Any]:
    """``python -m mapsmith`` over stdio through the MCP SDK's client: one ``run_operation`` call."""
    return asyncio.run(_mcp_call(spec))


CHILDREN = {
    "geopandas": raw_geopandas,
    "duckdb": raw_duckdb,
    "sedonadb": raw_sedonadb,
    "spark": raw_spark,
    "spark_cluster": raw_spark,
    "mapsmith_api": mapsmith_api,
    "mapsmith_mcp": mapsmith_mcp,
}
