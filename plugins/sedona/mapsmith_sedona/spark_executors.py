"""The running SparkSession's executors: waited for, proven to run Sedona, and described for the manifest.

On a cluster (``MAPSMITH_SPARK_MASTER=spark://...``, ``k8s://...``) the SparkContext is ready before any
executor is: executors register with the driver afterwards, and a job submitted before one has registered
waits without end ("Initial job has not accepted any resources"). So the session waits, measured, for
``MAPSMITH_SPARK_MIN_EXECUTORS`` of them (1 unless set), and refuses with SPARK_NO_EXECUTORS when they do
not come. It then runs one ``ST_*`` expression in tasks on the executors: the Sedona jars are shipped by the
driver (``spark.jars``), and an executor that cannot load them fails here, at start, not in the middle of
an analyst's run.

The manifest names the cluster (``x-mapsmith:spark_cluster``): master URL (``local[N]`` in local mode, with
the number of cores resolved), application id, executors with their cores and memory each, Spark and
Sedona versions. Executor cores come from the driver's status store (what Spark's monitoring REST API
serves), memory from the configuration. A description that cannot be had is recorded as unknown (null),
never guessed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from mapsmith.errors import EngineError

MIN_EXECUTORS_ENV = "MAPSMITH_SPARK_MIN_EXECUTORS"
EXECUTOR_WAIT_S = 120.0  # a cluster without free cores or memory for us is refused after this long
_POLL_S = 0.1
# sum of ST_X(ST_Point(id, 0)) for id in 0..999: 999 * 1000 / 2
SEDONA_PROBE_ROWS = 1000
SEDONA_PROBE_SUM = 499_500.0


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def min_executors_of(environ: Mapping[str, str], master: str) -> int:
    """How many executors a cluster session waits for; 0 in local mode, where the driver runs the tasks."""
    if is_local(master):
        return 0
    value = (environ.get(MIN_EXECUTORS_ENV) or "").strip()
    if not value:
        return 1
    if not re.fullmatch(r"[1-9][0-9]{0,3}", value):
        raise EngineError(
            f"{MIN_EXECUTORS_ENV}={value!r} is not a whole number of executors",
            code="SPARK_MIN_EXECUTORS_INVALID",
            evidence={"variable": MIN_EXECUTORS_ENV, "value": value},
            hint=f"set {MIN_EXECUTORS_ENV} to the number of executors to wait for (e.g. 2), or unset it for 1",
        )
    return int(value)


def executor_count(context: Any) -> int:
    """Executors registered now: block managers other than the driver's (``getExecutorMemoryStatus``)."""
    return max(int(context._jsc.sc().getExecutorMemoryStatus().size()) - 1, 0)


def wait_for_executors(context: Any, wanted: int, master: str, timeout_s: float = EXECUTOR_WAIT_S) -> float:
    """Block until ``wanted`` executors have registered; the seconds it took. SPARK_NO_EXECUTORS after the timeout."""
    t0 = time.perf_counter()
    while True:
        have = executor_count(context)
        if have >= wanted:
            return round(time.perf_counter() - t0, 3)
        if time.perf_counter() - t0 > timeout_s:
            raise EngineError(
                f"the Spark cluster at {master} gave this application {have} executor(s) in {timeout_s:.0f} s; "
                f"{wanted} were asked for",
                code="SPARK_NO_EXECUTORS",
                evidence={"master": master, "executors": have, "wanted": wanted, "waited_seconds": timeout_s},
                hint="check on the master's web UI that workers are ALIVE with free cores and memory (another "
                "application may hold them all; spark.cores.max limits one), or lower "
                f"{MIN_EXECUTORS_ENV}",
            )
        time.sleep(_POLL_S)


def check_sedona_on_executors(spark: Any, executors: int, master: str) -> None:
    """Run an ST_ expression in tasks (one slice per executor at least) and check its hand-known sum.

    A constant expression would be folded on the driver; over ``spark.range`` it is evaluated row by row in
    the tasks, so every executor that gets a slice loads Sedona's classes from the shipped jars.
    """
    slices = max(2 * executors, 2)
    try:
        got = (
            spark.range(0, SEDONA_PROBE_ROWS, 1, slices)
            .selectExpr("ST_X(ST_Point(CAST(id AS DOUBLE), 0.0D)) AS x")
            .agg({"x": "sum"})
            .collect()[0][0]
        )
    except Exception as exc:
        raise EngineError(
            f"Sedona's functions did not run on the executors of {master}: {type(exc).__name__}: {str(exc)[:400]}",
            code="SPARK_EXECUTORS_WITHOUT_SEDONA",
            evidence={"master": master, "executors": executors, "exception": type(exc).__name__},
            hint="the driver ships the jars in spark.jars to the executors; check that the executors can reach "
            "the driver (spark.driver.host) and run the same Spark line as pyspark, or set MAPSMITH_SEDONA_JARS "
            "to jars installed on every worker",
        ) from exc
    if got != SEDONA_PROBE_SUM:
        raise EngineError(
            f"Sedona's probe on the executors of {master} summed to {got}, not {SEDONA_PROBE_SUM}",
            code="SPARK_EXECUTORS_WITHOUT_SEDONA",
            evidence={"master": master, "got": got, "expected": SEDONA_PROBE_SUM},
            hint="the executors do not run the Sedona the driver does: check the jars on the workers",
        )


def executor_summaries(context: Any) -> list[dict[str, Any]] | None:
    """Every executor the driver knows (its own entry ``driver`` included), as Spark's monitoring API
    describes them: id, hostPort, totalCores, maxMemory, totalTasks, completedTasks, isActive. None when
    they cannot be read.

    Read from the driver's status store, the same data the REST API ``/api/v1/applications/<id>/executors``
    serves, without needing the web UI (off by default) or an HTTP round trip (tens of seconds on a loaded
    machine). ``statusStore`` is ``private[spark]`` in Scala, public in the JVM: pinned Spark 4.0.
    """
    try:
        listed = context._jsc.sc().statusStore().executorList(False)  # False: the dead ones too
        summaries = []
        for n in range(listed.size()):
            e = listed.apply(n)
            summaries.append(
                {
                    "id": str(e.id()),
                    "hostPort": str(e.hostPort()),
                    "totalCores": int(e.totalCores()),
                    "maxMemory": int(e.maxMemory()),
                    "totalTasks": int(e.totalTasks()),
                    "completedTasks": int(e.completedTasks()),
                    "isActive": bool(e.isActive()),
                }
            )
        return summaries
    except Exception:  # a Spark whose internals moved: described as unknown, never guessed
        return None


def _memory_setting(conf: Any, key: str) -> str | None:
    value = conf.get(key, None)
    return str(value) if value else None


def describe(spark: Any, master: str, sedona_version: str) -> dict[str, Any]:
    """The ``x-mapsmith:spark_cluster`` record: what ran the job, as the driver sees it now."""
    context = spark.sparkContext
    conf = context.getConf()
    record: dict[str, Any] = {
        "master": master,
        "application_id": context.applicationId,
        "spark_version": spark.version,
        "sedona_version": sedona_version,
    }
    if is_local(master):
        cores = int(context.defaultParallelism)
        record.update(
            master=f"local[{cores}]",
            deploy="local",
            executors=0,  # the driver runs the tasks
            executor_cores=cores,
            executor_memory=_memory_setting(conf, "spark.driver.memory") or "1g",
        )
        return record
    record["deploy"] = master.split("://", 1)[0] if "://" in master else "cluster"
    listed = executor_summaries(context)
    if listed is not None:
        executors = [e for e in listed if e["id"] != "driver" and e["isActive"]]
        per_executor = sorted({int(e["totalCores"]) for e in executors})
        record.update(
            executors=len(executors),
            # one number when every executor has as many cores (the usual case), else each distinct count
            executor_cores=per_executor[0] if len(per_executor) == 1 else per_executor,
            executor_hosts=sorted({e["hostPort"].rsplit(":", 1)[0] for e in executors}),
        )
    else:
        configured = conf.get("spark.executor.cores", None)
        record.update(executors=executor_count(context), executor_cores=int(configured) if configured else None)
    # Spark's default executor heap is 1g when spark.executor.memory is not set (SparkConf docs).
    record["executor_memory"] = _memory_setting(conf, "spark.executor.memory") or "1g"
    return record
