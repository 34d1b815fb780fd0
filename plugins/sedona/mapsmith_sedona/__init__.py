"""The sedona stack: SedonaDB on one machine, Apache Sedona on Spark beyond one machine.

For now it only registers the stack and detects, for real, which of its two engines can run here:
SedonaDB needs the ``sedonadb`` and ``geoarrow-pyarrow`` packages; Apache Sedona on Spark needs
``pyspark``, ``apache-sedona`` and a Java runtime. Operations come later.

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

from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, RegisterStack, StackSpec

STACK = "sedona"
# import name -> the distribution that provides it, so a reason names what to install
SEDONADB_MODULES = {"sedonadb": "sedonadb", "geoarrow.pyarrow": "geoarrow-pyarrow"}
SPARK_MODULES = {"pyspark": "pyspark", "sedona": "apache-sedona"}
VERSIONED_DISTRIBUTIONS = ("sedonadb", "geoarrow-pyarrow", "apache-sedona", "pyspark")
SEDONADB_FIX = "pip install 'mapsmith[sedona]'"
SPARK_FIX = "pip install 'mapsmith[spark]' and install Java 17 (e.g. apt-get install -y openjdk-17-jre-headless)"
MIN_JAVA_MAJOR = 17  # Spark 4, which the [spark] extra pins, runs on Java 17 or later
JAVA_PROBE_TIMEOUT_S = 10


def _missing(modules: Mapping[str, str]) -> list[str]:
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


def _spark_problem() -> str | None:
    """None when Apache Sedona on Spark can start here, else why not."""
    missing = _missing(SPARK_MODULES)
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
    return None


def availability() -> Availability:
    try:
        missing = _missing(SEDONADB_MODULES)
        sedonadb_problem = f"Python packages not installed: {', '.join(missing)}" if missing else None
        spark_problem = _spark_problem()
    except Exception as exc:  # detection must report, never raise
        return Availability(False, reason=f"detection failed: {type(exc).__name__}: {exc}", fix=SEDONADB_FIX)
    details = {
        "sedonadb": "usable" if sedonadb_problem is None else f"not usable: {sedonadb_problem}; fix: {SEDONADB_FIX}",
        "spark": "usable" if spark_problem is None else f"not usable: {spark_problem}; fix: {SPARK_FIX}",
    }
    if sedonadb_problem is None or spark_problem is None:
        return Availability(True, details=details)
    return Availability(
        False,
        reason=f"no engine of the sedona stack is usable: SedonaDB: {sedonadb_problem}; Spark: {spark_problem}",
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


@hookimpl
def mapsmith_register_stacks(register: RegisterStack) -> None:
    register(
        StackSpec(
            name=STACK,
            summary="SedonaDB on one machine; Apache Sedona on Spark beyond one machine",
            availability=availability,
            engine_versions=engine_versions,
            licence="Apache-2.0 (SedonaDB, Apache Sedona, Apache Spark)",
        )
    )
