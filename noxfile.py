"""Developer and CI sessions. `nox` alone runs what CI runs: lint, typecheck, tests, qgis, spark, browser, demo.

Every session installs MapSmith from this checkout into a fresh virtual environment, so a
dependency that is not declared in pyproject.toml fails here as it would for a user.
"""

import os
import shutil

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "qgis", "spark", "browser", "demo"]
nox.options.reuse_existing_virtualenvs = False
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite on the core and the opensource stack (stack detection included)."""
    session.install(".[test]")
    # The real-QGIS and Spark tests run in the qgis and spark sessions; here they would only repeat or skip.
    # ... and the map panel's headless-Chromium tests in the browser session.
    ignored = [
        "--ignore-glob=tests/stacks/test_qgis_*.py",
        "--ignore=tests/stacks/test_spark_sedona.py",
        "--ignore-glob=tests/mapview/test_browser*.py",
    ]
    session.run("pytest", "-q", *ignored, *session.posargs)


@nox.session(python=PYTHON)
def qgis(session: nox.Session) -> None:
    """The qgis stack against a real QGIS: import, runs, manifests, and the two-stack comparison.

    QGIS comes from the OS. When ``qgis_process.bin`` is missing on a Debian-family machine and the
    session runs as root (as CI does), it is installed with apt-get (about 2 minutes); otherwise the
    session fails and says how to install it: these tests never skip here.
    """
    if shutil.which("qgis_process.bin", path="/usr/bin:/bin") is None:
        if os.geteuid() == 0 and shutil.which("apt-get"):
            env = {"DEBIAN_FRONTEND": "noninteractive"}
            session.run("apt-get", "update", "-q", external=True, env=env)
            session.run("apt-get", "install", "-y", "-q", "--no-install-recommends", "qgis", external=True, env=env)
        else:
            session.error("QGIS is not installed: apt-get install --no-install-recommends qgis (as root)")
    session.install(".[test,qgis]")
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/stacks/test_qgis_algorithms.py",
        "tests/stacks/test_qgis_dual_stack.py",
        "tests/stacks/test_qgis_mcp.py",
        *session.posargs,
        env={"MAPSMITH_QGIS_REQUIRED": "1"},
    )


@nox.session(python=PYTHON)
def spark(session: nox.Session) -> None:
    """The sedona stack's Spark engine for real in local mode (Java 17, pyspark, Sedona jars from Maven Central).

    The pinned jars (plugins/sedona/mapsmith_sedona/jars.py) are fetched once with Maven into
    ~/.m2/repository when they are not there yet; these tests never skip here.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        session.error("Java 17 is not installed: apt-get install -y openjdk-17-jre-headless")
    session.install(".[spark,test]")
    session.run("python", "-m", "mapsmith_sedona.jars", "fetch")
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/stacks/test_spark_sedona.py",
        *session.posargs,
        env={"MAPSMITH_SPARK_REQUIRED": "1"},
    )


@nox.session(python=PYTHON)
def browser(session: nox.Session) -> None:
    """The map panel in a real headless Chromium: the exported page loads, layers and states, a click, a screenshot.

    Chromium comes from the OS (Debian's ``chromium``); when it is missing and the session runs as root
    on a Debian-family machine (as CI does), it is installed with apt-get; otherwise the session fails
    and says how. Screenshots are copied to $MAPSMITH_TEST_ARTIFACTS when it is set.
    """
    if shutil.which("chromium", path="/usr/bin:/bin") is None:
        if os.geteuid() == 0 and shutil.which("apt-get"):
            env = {"DEBIAN_FRONTEND": "noninteractive"}
            session.run("apt-get", "update", "-q", external=True, env=env)
            session.run("apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium", external=True, env=env)
        else:
            session.error("Chromium is not installed: apt-get install --no-install-recommends chromium (as root)")
    session.install(".[test,browser]")
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/mapview/test_browser_map_panel.py",
        *session.posargs,
        env={"MAPSMITH_BROWSER_REQUIRED": "1"},
    )


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README's worked example, through a real MCP client over stdio, on data it builds."""
    session.install(".[raster]")
    session.run("mapsmith", "example")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint and format check, configured in pyproject.toml."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy on the core package, configured in pyproject.toml."""
    session.install(".", "mypy")
    session.run("mypy")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: measure, then write docs/benchmarks.md from the results."""
    session.install(".[raster,whitebox]")
    session.run("python", "benchmarks/bench_startup.py")
    session.run("python", "benchmarks/bench_vector.py", *session.posargs)
    session.run("python", "benchmarks/bench_zonal.py")
    session.run("python", "benchmarks/bench_terrain.py")
    session.run("python", "benchmarks/render.py")
