"""The sedona stack: SedonaDB on one machine, Apache Sedona on Spark beyond one machine.

It registers the stack and detects, for real, which of its two engines can run here: SedonaDB
needs the ``sedonadb`` and ``geoarrow-pyarrow`` packages; Apache Sedona on Spark needs ``pyspark`` of
the Spark line the pinned Sedona jars are built for, ``apache-sedona``, a Java runtime and the jars
themselves on this machine (``jars.py``). With ``MAPSMITH_STACK=sedona`` MapSmith's own
``spatial_join``, ``nearest_join``, ``count_in_polygons``, ``summarize_points_in_polygons``,
``dissolve_layer`` and ``overlay_layers`` run as Spark jobs (``spark_ops.SPARK_OPERATIONS``);
SedonaDB's engines live in the opensource stack's router (``mapsmith_opensource.sedonadb_ops``).

It must never import an engine when this module is imported (the server's start-up must stay fast
and must not fail because an optional stack is half installed), and detection must never raise:
whatever goes wrong is reported as the reason an engine is not usable.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata

from mapsmith._compat import install_command
from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, RegisterOperation, RegisterStack, StackSpec, Unavailable

STACK = "sedona"
# import name -> the distribution that provides it, so a reason names what to install
SEDONADB_MODULES = {"sedonadb": "sedonadb", "geoarrow.pyarrow": "geoarrow-pyarrow"}
SPARK_MODULES = {"pyspark": "pyspark", "sedona": "apache-sedona"}
VERSIONED_DISTRIBUTIONS = ("sedonadb", "geoarrow-pyarrow", "apache-sedona", "pyspark")
# The install commands name where this MapSmith came from (a checkout or a wheel): PyPI's 'mapsmith' is
# another project.
SEDONADB_FIX = install_command("sedona")
SPARK_FIX = (
    f"{install_command('spark')}, install Java 17 (e.g. apt-get install -y openjdk-17-jre-headless), "
    "and fetch the Sedona jars once with `python -m mapsmith_sedona.jars fetch` (needs Maven)"
)
MIN_JAVA_MAJOR = 17  # Spark 4, which the [spark] extra pins, runs on Java 17 or later
JAVA_PROBE_TIMEOUT_S = 10


def missing_distributions(modules: Mapping[str, str]) -> list[str]:
    """The distributions whose module cannot be found; find_spec of a dotted name imports its parent."""
    missing = []
    for module, distribution in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # parent package absent, or a broken half-install
            found = False
        if not found:
            missing.append(distribution)
    return missing


def find_java() -> tuple[str | None, str | None]:
    """The java Spark would run, or why there is none.

    Spark's launcher uses ``$JAVA_HOME/bin/java`` whenever JAVA_HOME is set and only otherwise
    looks on PATH, so this does the same: a JAVA_HOME that points nowhere breaks Spark even when
    another java is on PATH.
    """
    java_home = os.environ.get("JAVA_HOME", "").strip()
    if java_home:
        candidate = os.path.join(java_home, "bin", "java.exe" if os.name == "nt" else "java")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, None
        return None, f"JAVA_HOME={java_home} has no executable bin/java (Spark uses JAVA_HOME when it is set)"
    found = shutil.which("java")
    if found:
        return found, None
    return None, "no java executable on PATH and JAVA_HOME is not set"


@functools.cache
def java_version(java: str) -> tuple[str | None, str | None]:
    """``(version, None)`` from ``java -version``, or ``(None, why not)``; asked once per executable."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, timeout=JAVA_PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"`{java} -version` did not finish within {JAVA_PROBE_TIMEOUT_S} s"
    except OSError as exc:
        return None, f"`{java} -version` could not start: {exc}"
    text = (done.stderr + done.stdout).decode("utf-8", errors="replace")  # java prints to stderr
    if done.returncode != 0:
        return None, f"`{java} -version` exited with status {done.returncode}: {text.strip()[-300:]}"
    match = re.search(r'version "([^"]+)"', text)
    return (match.group(1), None) if match else (None, f"could not read a version from `{java} -version`")


def java_major(version: str) -> int | None:
    """17 for "17.0.15", 8 for the old "1.8.0_401" form; None if it is neither."""
    parts = re.findall(r"\d+", version)
    if not parts:
        return None
    major = int(parts[0])
    return int(parts[1]) if major == 1 and len(parts) > 1 else major


def spark_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """None when Apache Sedona on Spark can start here, else why not (never raises for a missing piece).

    Checked in the order a user fixes them: packages, Java, pyspark's Spark line against the pinned
    jar, then the jars themselves (``jars.find_jars``, which never downloads).
    """
    from mapsmith_sedona.jars import PYSPARK_REQUIREMENT, SPARK_LINE, find_jars

    missing = missing_distributions(SPARK_MODULES)
    if missing:
        return f"Python packages not installed: {', '.join(missing)}"
    java, problem = find_java()
    if java is None:
        return problem
    version, problem = java_version(java)
    if version is None:
        return problem
    major = java_major(version)
    if major is not None and major < MIN_JAVA_MAJOR:
        return f"Java {version} at {java} is too old; Spark 4 needs Java {MIN_JAVA_MAJOR} or later"
    try:
        pyspark_version: str | None = metadata.version("pyspark")
    except metadata.PackageNotFoundError:  # importable without install metadata: the line cannot be checked
        pyspark_version = None
    if pyspark_version is not None and ".".join(pyspark_version.split(".")[:2]) != SPARK_LINE:
        return (
            f"pyspark {pyspark_version} is installed, but the pinned Sedona jar is built for Spark {SPARK_LINE} "
            f"(pip install '{PYSPARK_REQUIREMENT}')"
        )
    jars, problem = find_jars(environ)
    if jars is None:
        return problem
    return None


def availability() -> Availability:
    try:
        missing = missing_distributions(SEDONADB_MODULES)
        sedonadb_problem = f"Python packages not installed: {', '.join(missing)}" if missing else None
        spark = spark_problem()
    except Exception as exc:  # detection must report, never raise
        return Availability(False, reason=f"detection failed: {type(exc).__name__}: {exc}", fix=SEDONADB_FIX)
    details = {
        "sedonadb": "usable" if sedonadb_problem is None else f"not usable: {sedonadb_problem}; fix: {SEDONADB_FIX}",
        "spark": "usable" if spark is None else f"not usable: {spark}; fix: {SPARK_FIX}",
    }
    if sedonadb_problem is None or spark is None:
        return Availability(True, details=details)
    return Availability(
        False,
        reason=f"no engine of the sedona stack is usable: SedonaDB: {sedonadb_problem}; Spark: {spark}",
        fix=f"{SEDONADB_FIX} (SedonaDB, one machine), or {SPARK_FIX} (Apache Sedona on Spark)",
        details=details,
    )


def engine_versions() -> Mapping[str, str]:
    versions: dict[str, str] = {}
    for distribution in VERSIONED_DISTRIBUTIONS:
        try:
            versions[distribution] = metadata.version(distribution)
        except Exception:  # not installed, or broken metadata: simply not reported
            continue
    try:
        java, _ = find_java()
        if java is not None:
            version, _ = java_version(java)
            if version is not None:
                versions["java"] = version
    except Exception:
        pass
    return versions


def warm(environ: Mapping[str, str]) -> None:
    """With ``MAPSMITH_SPARK_WARM=1``, start the process's Spark session now, not at the first Spark run
    (``spark_session.warm``); otherwise nothing. SedonaDB is not imported: its 0.3-0.6 s and 88 MB are paid by the
    runs the router gives it."""
    from mapsmith_sedona import spark_session

    spark_session.warm(environ)


@hookimpl
def mapsmith_register_stacks(register: RegisterStack) -> None:
    register(
        StackSpec(
            name=STACK,
            summary="SedonaDB on one machine; Apache Sedona on Spark beyond one machine",
            availability=availability,
            engine_versions=engine_versions,
            warm=warm,
            licence="Apache-2.0 (SedonaDB, Apache Sedona, Apache Spark)",
        )
    )


def _spark_requirement() -> Unavailable | None:
    """The stack may be available through SedonaDB alone: the Spark operations then say why they cannot run."""
    try:
        problem = spark_problem()
    except Exception as exc:  # detection must report, never raise
        problem = f"detection failed: {type(exc).__name__}: {exc}"
    if problem is None:
        return None
    return Unavailable("stack_unavailable", f"Apache Sedona on Spark is not usable here: {problem}", SPARK_FIX)


@hookimpl
def mapsmith_register_operations(register: RegisterOperation) -> None:
    """MapSmith's own operations that run as Spark jobs with ``MAPSMITH_STACK=sedona``.

    Registered always (they add no contract); pyspark is imported only when one runs, and the router
    reports the Spark engine unusable, with the fix, when Java, pyspark or the jars are missing.
    """
    from mapsmith_sedona import spark_ops

    spark_ops.register_operations(register, _spark_requirement)
