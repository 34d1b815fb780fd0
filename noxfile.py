"""Developer and CI sessions. `nox` alone runs what CI runs: the sessions marked * in `nox --list`.

Every session installs MapSmith from this checkout into a fresh virtual environment, so a
dependency that is not declared in pyproject.toml fails here as it would for a user. What comes from
the OS (QGIS, Chromium, bubblewrap, Node.js) is installed with apt-get when it is missing and the
session runs as root on a Debian-family machine, as CI does.
"""

import os
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "qgis", "spark", "browser", "clients", "demo"]
nox.options.reuse_existing_virtualenvs = False
PYTHON = "3.11"
ROOT = Path(__file__).resolve().parent
CLIENTS_NODE = ROOT / "tests" / "clients" / "node"  # package.json + package-lock.json: the pinned npm clients
IMAGE = "mapsmith:nox"


def _apt_install(session: nox.Session, binary: str, *packages: str, required: bool = True) -> None:
    """Install OS packages with apt-get when ``binary`` is not in /usr/bin or /bin and we are root on Debian.

    Otherwise a required package fails the session with the command that installs it; an optional one
    only warns (the tests that need it skip and say why).
    """
    if shutil.which(binary, path="/usr/bin:/bin") is not None:
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        session.run("apt-get", "update", "-q", external=True, env=env)
        session.run("apt-get", "install", "-y", "-q", "--no-install-recommends", *packages, external=True, env=env)
        return
    message = f"{binary} is not installed: apt-get install --no-install-recommends {' '.join(packages)} (as root)"
    if required:
        session.error(message)
    session.warn(message)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite on the core and the opensource stack (stack detection included)."""
    # Engines run inside a bubblewrap sandbox where it is available.
    _apt_install(session, "bwrap", "bubblewrap", required=False)
    session.install(".[test]")
    # The real-QGIS and Spark tests run in the qgis and spark sessions; here they would only repeat or skip.
    # ... and the map panel's headless-Chromium tests in the browser session.
    ignored = [
        "--ignore-glob=tests/stacks/test_qgis_*.py",
        "--ignore-glob=tests/stacks/test_spark_*.py",
        "--ignore=tests/vector/test_dissolve_weighted_spark.py",
        "--ignore-glob=tests/mapview/test_browser*.py",
        # ... and the npm MCP clients and the install tests in the clients session.
        "--ignore=tests/clients",
    ]
    session.run("pytest", "-q", *ignored, *session.posargs)


@nox.session(python=PYTHON)
def qgis(session: nox.Session) -> None:
    """The qgis stack against a real QGIS: import, runs, manifests, and the two-stack comparison.

    QGIS comes from the OS. When ``qgis_process.bin`` is missing on a Debian-family machine and the
    session runs as root (as CI does), it is installed with apt-get (about 2 minutes); otherwise the
    session fails and says how to install it: these tests never skip here.
    """
    _apt_install(session, "qgis_process.bin", "qgis")
    session.install(".[test,qgis]")
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/stacks/test_qgis_algorithms.py",
        "tests/stacks/test_qgis_catalogue.py",
        "tests/stacks/test_qgis_destinations.py",
        "tests/stacks/test_qgis_dual_stack.py",
        "tests/stacks/test_qgis_mcp.py",
        *session.posargs,
        env={"MAPSMITH_QGIS_REQUIRED": "1"},
    )


@nox.session(python=PYTHON)
def spark(session: nox.Session) -> None:
    """The sedona stack's Spark engine on a Spark standalone cluster (a master, two workers) and in local mode.

    Java 17 and the pinned Sedona jars (plugins/sedona/mapsmith_sedona/jars.py, fetched once with Maven into
    ~/.m2/repository when they are not there yet) are needed; these tests never skip here. The cluster --
    three JVMs from pyspark's own bin/spark-class, on 127.0.0.1 -- is started, waited for and stopped by the
    tests' session fixture (tests/spark_cluster.py) when MAPSMITH_TEST_SPARK_CLUSTER=1, so plain pytest with
    that variable runs the same thing. Then a local-mode smoke: the hand-counted count_in_polygons and the
    spatial_join through a real MCP client.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        session.error("Java 17 is not installed: apt-get install -y openjdk-17-jre-headless")
    session.install(".[spark,test]")
    session.run("python", "-m", "mapsmith_sedona.jars", "fetch")
    spark_tests = [
        "tests/stacks/test_spark_sedona.py",
        "tests/stacks/test_spark_warm.py",
        "tests/vector/test_dissolve_weighted_spark.py",
    ]
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/stacks/test_spark_cluster.py",
        *spark_tests,
        *session.posargs,
        env={"MAPSMITH_SPARK_REQUIRED": "1", "MAPSMITH_TEST_SPARK_CLUSTER": "1"},
    )
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/stacks/test_spark_sedona.py",
        "-k",
        "count_in_polygons_on_spark_matches or real_mcp_client",
        env={"MAPSMITH_SPARK_REQUIRED": "1"},
    )


@nox.session(python=PYTHON)
def browser(session: nox.Session) -> None:
    """The map panel in a real headless Chromium: the exported page loads, layers and states, a click, a screenshot.

    Chromium comes from the OS (Debian's ``chromium``); when it is missing and the session runs as root
    on a Debian-family machine (as CI does), it is installed with apt-get; otherwise the session fails
    and says how. Screenshots are copied to $MAPSMITH_TEST_ARTIFACTS when it is set.
    """
    _apt_install(session, "chromium", "chromium")
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
def clients(session: nox.Session) -> None:
    """Real MCP clients from npm (Inspector CLI 0.15, 0.22, 2.12) over stdio and HTTP; installing by wheel, uvx, pipx.

    Node.js and npm come from the OS (installed with apt-get as root when missing); ``npm ci`` installs the
    clients pinned in tests/clients/node/package-lock.json, Node 22 for the 2.x line among them (the npm
    ``node`` package), into this session's folder. These tests never skip here.
    """
    _apt_install(session, "npm", "nodejs", "npm")
    session.install(".", "pytest", "uv", "pipx")
    node_dir = Path(session.virtualenv.location) / "node-clients"
    node_dir.mkdir(exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(CLIENTS_NODE / name, node_dir / name)
    session.run("npm", "ci", "--prefix", str(node_dir), "--no-audit", "--no-fund", external=True)
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/clients",
        "--ignore=tests/clients/test_container.py",  # the container session's
        # agent-written operations and plugin maturity, seen through the pinned Inspector CLI
        "tests/proposals/test_propose_inspector.py",
        "tests/maturity/test_maturity_clients.py",
        *session.posargs,
        env={"MAPSMITH_CLIENTS_REQUIRED": "1", "MAPSMITH_NODE_CLIENTS": str(node_dir)},
    )


def _container_engine() -> tuple[str | None, str]:
    """The first container engine whose daemon answers, or None and why none does (the engines' own words)."""
    reasons = []
    for engine in ("docker", "podman"):
        path = shutil.which(engine)
        if path is None:
            reasons.append(f"{engine}: not installed")
            continue
        done = subprocess.run([path, "info"], capture_output=True, text=True, timeout=60, check=False)
        if done.returncode == 0:
            return path, ""
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        reasons.append(f"{engine}: `{engine} info` exited {done.returncode}: {last[0]}")
    return None, "; ".join(reasons)


@nox.session(python=PYTHON)
def container(session: nox.Session) -> None:
    """Build the Dockerfile (every open stack) and smoke-test the image over stdio and HTTP; skips without an engine.

    Not in the default sessions: CI machines may have no container engine (and no registry to pull the
    base image from). Pass ``-- --no-cache`` style options to the build after ``--``.
    """
    engine, reason = _container_engine()
    if engine is None:
        session.skip(f"no container engine answers ({reason})")
    session.run(engine, "build", "--target", "runtime", "-t", IMAGE, *session.posargs, ".", external=True)
    session.install(".[test]")
    session.run(
        "pytest",
        "-q",
        "-rs",
        "tests/clients/test_container.py",
        env={"MAPSMITH_CONTAINER_IMAGE": IMAGE, "MAPSMITH_CONTAINER_ENGINE": engine},
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
