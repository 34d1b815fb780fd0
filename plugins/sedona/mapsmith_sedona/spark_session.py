"""The one SparkSession of this process, with Apache Sedona's SQL functions, started on first use.

Starting Spark takes seconds (a JVM, then Sedona's registrations), so the session is started once,
lazily, reused by every run, and stopped when the process exits. The master is
``MAPSMITH_SPARK_MASTER`` (``local[*]`` by default; ``spark://host:7077`` or ``k8s://...`` for a
cluster), read from the service's environment on the first run; later runs get the same session.
With ``MAPSMITH_SPARK_WARM=1`` the stack's warm-up (``MapSmith.warm``, which the MCP server's engine
worker runs on starting) starts it instead, before the first call, as a raw Spark caller starts its
session before its first query; off by default, because the session holds a JVM and, on a standalone
cluster, its executors' cores, whether or not a Spark run ever comes.

On a cluster the session also waits for its executors and proves they run Sedona's functions
(``spark_executors``) before the first run; the driver binds to 127.0.0.1 when the master is on this
machine's loopback. Spark's web UI (with its monitoring REST API) is off unless ``MAPSMITH_SPARK_UI=1``:
MapSmith reads what it records from the driver, and a server must not open ports nobody asked for.

Only pyspark and Sedona's jars are used: Sedona's SQL extension registers every ``ST_*`` function
and the ``geoparquet`` data source inside the JVM, so the ``sedona`` Python package is not imported.
The JVM's standard output is sent to standard error, because the MCP server speaks on standard output.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mapsmith.errors import EngineError

MASTER_ENV = "MAPSMITH_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
# The driver's JVM heap (Spark's spark.driver.memory, e.g. "8g"). Spark's default, 1g, is too small for
# tens of millions of points in local mode, where the driver does all the work; unset keeps Spark's.
DRIVER_MEMORY_ENV = "MAPSMITH_SPARK_DRIVER_MEMORY"
UI_ENV = "MAPSMITH_SPARK_UI"
WARM_ENV = "MAPSMITH_SPARK_WARM"
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class Session:
    spark: Any  # pyspark.sql.SparkSession
    master: str
    jars: tuple[str, ...]
    start_seconds: float
    executor_wait_seconds: float = 0.0  # part of start_seconds: waiting for a cluster's executors
    started_by: str = "a run"  # or "the warm-up" (MAPSMITH_SPARK_WARM=1)


_lock = threading.Lock()
_session: Session | None = None


def master_of(environ: Mapping[str, str]) -> str:
    return (environ.get(MASTER_ENV) or "").strip() or DEFAULT_MASTER


def get_session(environ: Mapping[str, str], started_by: str = "a run") -> Session:
    """The process's session, started now if it is not running yet (``started_by`` says who asked first)."""
    global _session
    with _lock:
        if _session is not None:
            return _session
        _session = _start(master_of(environ), environ, started_by)
        atexit.register(stop)
        return _session


def warm(environ: Mapping[str, str]) -> bool:
    """Start the session now when ``MAPSMITH_SPARK_WARM=1`` (a cluster's executors waited for and checked, as for a
    run); whether it was asked. A setting that is neither 1 nor 0, or a Spark that cannot start, raises the
    EngineError the first Spark run would."""
    if not warm_of(environ):
        return False
    get_session(environ, started_by="the warm-up")
    return True


def running() -> Session | None:
    return _session


def stop() -> None:
    """Stop the session (at exit, or when a test asks); the next run starts a new one."""
    global _session
    with _lock:
        if _session is None:
            return
        try:
            _session.spark.stop()
        finally:
            _session = None


def driver_memory_of(environ: Mapping[str, str]) -> str | None:
    """MAPSMITH_SPARK_DRIVER_MEMORY when set, checked to be a JVM memory size; None keeps Spark's default."""
    value = (environ.get(DRIVER_MEMORY_ENV) or "").strip()
    if not value:
        return None
    if not re.fullmatch(r"[1-9][0-9]*[kmgt]?", value.lower()):
        raise EngineError(
            f"{DRIVER_MEMORY_ENV}={value!r} is not a JVM memory size",
            code="SPARK_DRIVER_MEMORY_INVALID",
            evidence={"variable": DRIVER_MEMORY_ENV, "value": value},
            hint=f"set {DRIVER_MEMORY_ENV} to a size such as 4g or 16384m, or unset it for Spark's default",
        )
    return value


def _switch(environ: Mapping[str, str], variable: str, code: str, on: str, off: str) -> bool:
    """A 0/1 setting: True only for 1; unset or 0 is False; anything else is refused with ``code``. ``on`` and ``off``
    finish the hint's "set <variable>=1 to ..." and "<variable>=0 or nothing to ..."."""
    value = (environ.get(variable) or "").strip()
    if value in ("0", "1"):
        return value == "1"
    if value:
        raise EngineError(
            f"{variable}={value!r} is neither 1 nor 0",
            code=code,
            evidence={"variable": variable, "value": value},
            hint=f"set {variable}=1 to {on}, {variable}=0 or nothing to {off}",
        )
    return False


def ui_enabled_of(environ: Mapping[str, str]) -> bool:
    """Spark's web UI (port 4040 and up): on only when MAPSMITH_SPARK_UI=1."""
    return _switch(environ, UI_ENV, "SPARK_UI_SETTING_INVALID", "start Spark's web UI", "not start it")


def warm_of(environ: Mapping[str, str]) -> bool:
    """Whether the warm-up starts the session: MAPSMITH_SPARK_WARM=1 (unset or 0: the first Spark run does)."""
    return _switch(
        environ,
        WARM_ENV,
        "SPARK_WARM_SETTING_INVALID",
        "start Spark when the service starts",
        "start it at the first Spark run",
    )


def master_on_loopback(master: str) -> bool:
    """spark://127.0.0.1:7077 or spark://localhost:7077 (every host of an HA list on this machine)."""
    if not master.startswith("spark://"):
        return False
    hosts = [h.strip().rsplit(":", 1)[0] for h in master[len("spark://") :].split(",")]
    return all(h in _LOOPBACK_HOSTS for h in hosts)


def _start(master: str, environ: Mapping[str, str], started_by: str = "a run") -> Session:
    from mapsmith_sedona import SPARK_FIX, spark_executors, spark_problem
    from mapsmith_sedona.jars import find_jars

    driver_memory = driver_memory_of(environ)  # a bad setting is refused before anything starts
    ui = ui_enabled_of(environ)
    warm_of(environ)  # as is a bad warm-up setting, by the first run when no warm-up ran
    wanted_executors = spark_executors.min_executors_of(environ, master)

    problem = spark_problem(environ)
    if problem is not None:
        raise EngineError(
            f"Apache Sedona on Spark cannot start here: {problem}",
            code="SPARK_UNAVAILABLE",
            evidence={"master": master},
            hint=SPARK_FIX,
        )
    jars, _ = find_jars(environ)
    assert jars is not None  # spark_problem checked them
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    conf = (
        SparkConf()
        .setMaster(master)
        .setAppName("mapsmith")
        .set("spark.jars", ",".join(jars))
        .set("spark.sql.extensions", "org.apache.sedona.sql.SedonaSqlExtensions")
        .set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .set("spark.kryo.registrator", "org.apache.sedona.core.serde.SedonaKryoRegistrator")
        .set("spark.ui.enabled", "true" if ui else "false")
        .set("spark.ui.showConsoleProgress", "false")  # its progress bar is for terminals; MCP gets ctx.progress
        .set("spark.sql.session.timeZone", "UTC")
    )
    if driver_memory:
        conf.set("spark.driver.memory", driver_memory)  # read by spark-submit when the JVM starts
    if spark_executors.is_local(master) or master_on_loopback(master):
        # A laptop's host name may not resolve; local mode, and executors on this machine's loopback, never
        # need another host to reach the driver.
        conf.set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
    if spark_executors.is_local(master):
        # Spark's 200 shuffle partitions are sized for clusters; on one machine they are mostly empty tasks.
        conf.set("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 2)))
    t0 = time.perf_counter()
    context: Any = None
    spark: Any = None
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": 2})  # the JVM's stdout onto our stderr
        context = SparkContext(conf=conf, gateway=gateway)
        context.setLogLevel("ERROR")
        spark = SparkSession(context)
        spark.sql("SELECT ST_Point(0.0, 0.0)").collect()  # fails here, not mid-run, if the jars do not load
    except Exception as exc:
        _stop_quietly(spark, context)
        raise EngineError(
            f"Spark with Apache Sedona did not start (master {master}): {type(exc).__name__}: {str(exc)[:500]}",
            code="SPARK_START_FAILED",
            evidence={"master": master, "jars": jars, "exception": type(exc).__name__},
            hint=f"check that {master} is reachable and that the jars match pyspark's Spark version "
            "(server_info lists the sedona stack's state); `python -m mapsmith_sedona.jars show` prints the jars",
        ) from exc
    waited = 0.0
    if wanted_executors:
        try:
            waited = spark_executors.wait_for_executors(context, wanted_executors, master)
            spark_executors.check_sedona_on_executors(spark, spark_executors.executor_count(context), master)
        except BaseException:
            _stop_quietly(spark, context)  # a half-started session must not hold the cluster's cores
            raise
    return Session(spark, master, tuple(jars), round(time.perf_counter() - t0, 3), waited, started_by)


def _stop_quietly(spark: Any, context: Any) -> None:
    try:
        if spark is not None:
            spark.stop()
        elif context is not None:
            context.stop()
    except Exception:  # the start already failed; its error is the one to report
        pass
