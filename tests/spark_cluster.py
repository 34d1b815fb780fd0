"""A Spark standalone cluster on this machine for the sedona tests: a master and two workers, each its own JVM.

Set ``MAPSMITH_TEST_SPARK_CLUSTER=1`` (the nox ``spark`` session does) and the ``spark_master`` fixture
starts, once per test session, the processes the pyspark distribution's own ``bin/spark-class`` runs:

    org.apache.spark.deploy.master.Master --host 127.0.0.1 --port 7077 --webui-port 8080
    org.apache.spark.deploy.worker.Worker spark://127.0.0.1:7077 --cores 1 --memory 1g   (twice)

each worker with its own work folder and web UI port, waits until the master's JSON
(``http://127.0.0.1:8080/json/``) lists both workers ALIVE -- polled, not slept -- and yields the master
URL, which the tests pass to MapSmith as ``MAPSMITH_SPARK_MASTER``. Without the variable the fixture yields
``local[2]`` and nothing is started; a developer with a cluster of their own sets
``MAPSMITH_TEST_SPARK_MASTER=spark://host:port`` instead. When 7077 or 8080 is taken (another cluster on
this machine), free ports are used and the master URL says which.

What it must never do: leave a JVM running after the session (each process is stopped in a ``finally``
and at exit, by the id it was started with), stop a process it did not start, or listen beyond
127.0.0.1 (``SPARK_LOCAL_IP``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CLUSTER_ENV = "MAPSMITH_TEST_SPARK_CLUSTER"  # "1": start a standalone cluster for the session
EXTERNAL_MASTER_ENV = "MAPSMITH_TEST_SPARK_MASTER"  # a cluster already running elsewhere
LOCAL_MASTER = "local[2]"
HOST = "127.0.0.1"
WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1g"
START_TIMEOUT_S = 180.0  # a JVM per process on a loaded 2-core machine: a master alone took 3 to 30 s here
STOP_TIMEOUT_S = 20.0
_POLL_S = 0.1


@dataclass
class Cluster:
    """A running standalone cluster started by this module (or an external one: no processes, no folders)."""

    master_url: str
    ui_url: str | None
    folder: Path | None
    work_dirs: list[Path] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    start_seconds: float = 0.0
    master_seconds: float = 0.0

    def state(self) -> dict[str, Any]:
        """The master's JSON: its workers, the applications and the cores they hold."""
        assert self.ui_url is not None, "an external cluster's master UI is not known here"
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as reply:
            return dict(json.load(reply))

    def executor_workers(self, application_id: str) -> dict[str, int]:
        """executor id -> index of the worker whose work folder holds it (each executor gets a folder
        ``<work dir>/<application id>/<executor id>`` on the worker that launched it)."""
        found: dict[str, int] = {}
        for n, work in enumerate(self.work_dirs):
            app = work / application_id
            if app.is_dir():
                for executor in app.iterdir():
                    found[executor.name] = n
        return found

    def stop(self) -> None:
        for process in reversed(self.processes):  # workers first, then the master
            _stop_process(process)
        self.processes.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # Spark's daemons shut down on TERM (their stop scripts send it)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


def spark_home() -> Path:
    """The pyspark distribution: its bin/spark-class and jars/ are a complete Spark for the daemons."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _any_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _port(preferred: int) -> int:
    return preferred if _free(preferred) else _any_port()


def _json(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return dict(json.load(reply))
    except (OSError, ValueError):
        return None


def _launch(cluster: Cluster, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    assert cluster.folder is not None
    log = open(cluster.folder / f"{name}.log", "wb")  # noqa: SIM115 - the child writes it until it stops
    try:
        # spark-class execs java, so this id is the JVM's; a session of its own keeps ^C to pytest alone.
        process = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    finally:
        log.close()
    cluster.processes.append(process)
    return process


def _log_tail(cluster: Cluster) -> str:
    assert cluster.folder is not None
    tails = []
    for log in sorted(cluster.folder.glob("*.log")):
        lines = log.read_text("utf-8", errors="replace").splitlines()[-8:]
        tails.append(f"--- {log.name}\n" + "\n".join(lines))
    return "\n".join(tails)


def _wait(cluster: Cluster, what: str, ready: Any, deadline: float) -> None:
    while not ready():
        dead = [p.args[1] for p in cluster.processes if p.poll() is not None]
        if dead or time.perf_counter() > deadline:
            reason = f"exited: {dead}" if dead else f"not within {START_TIMEOUT_S:.0f} s"
            cluster.stop()
            raise RuntimeError(f"the Spark cluster's {what} did not come up ({reason})\n{_log_tail(cluster)}")
        time.sleep(_POLL_S)


def start_cluster(workers: int = WORKERS) -> Cluster:
    """Start a master and ``workers`` workers; return once the master lists them all ALIVE."""
    home = spark_home()
    port, ui_port = _port(7077), _port(8080)
    folder = Path(tempfile.mkdtemp(prefix="mapsmith-spark-cluster-"))
    cluster = Cluster(f"spark://{HOST}:{port}", f"http://{HOST}:{ui_port}", folder)
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": HOST,  # every daemon binds and advertises 127.0.0.1, web UIs included
        "SPARK_NO_DAEMONIZE": "1",
    }
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    t0 = time.perf_counter()
    deadline = t0 + START_TIMEOUT_S
    try:
        master_class = "org.apache.spark.deploy.master.Master"
        _launch(
            cluster, "master", [master_class, "--host", HOST, "--port", str(port), "--webui-port", str(ui_port)], env
        )
        _wait(cluster, "master", lambda: _json(f"{cluster.ui_url}/json/") is not None, deadline)
        cluster.master_seconds = round(time.perf_counter() - t0, 3)
        for n in range(workers):
            work = folder / f"worker-{n + 1}"
            work.mkdir()
            cluster.work_dirs.append(work)
            argv = ["org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", HOST]
            argv += ["--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--work-dir", str(work)]
            argv += ["--webui-port", str(_any_port())]
            _launch(cluster, f"worker-{n + 1}", argv, env)

        def all_alive() -> bool:
            state = _json(f"{cluster.ui_url}/json/")
            return state is not None and sum(w.get("state") == "ALIVE" for w in state.get("workers", [])) >= workers

        _wait(cluster, f"{workers} workers", all_alive, deadline)
    except BaseException:
        cluster.stop()
        raise
    cluster.start_seconds = round(time.perf_counter() - t0, 3)
    return cluster


_cluster: Cluster | None = None
_users = 0


def _stop_shared() -> None:
    global _cluster
    if _cluster is not None:
        _cluster.stop()
        _cluster = None


atexit.register(_stop_shared)  # a session killed between fixtures still stops its JVMs


def cluster_wanted() -> bool:
    return os.environ.get(CLUSTER_ENV, "").strip() == "1"


def shared_cluster() -> Cluster | None:
    """The session's cluster, started on first use when MAPSMITH_TEST_SPARK_CLUSTER=1; None otherwise."""
    global _cluster
    if _cluster is None and cluster_wanted():
        _cluster = start_cluster()
    return _cluster


@contextlib.contextmanager
def _using_cluster() -> Iterator[Cluster | None]:
    """Counted use of the shared cluster: each test module that imports the fixture gets its own fixture
    definition, so the last one to finish stops the processes."""
    global _users
    cluster = shared_cluster()
    _users += 1
    try:
        yield cluster
    finally:
        _users -= 1
        if _users == 0:
            _stop_shared()


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[Cluster | None]:
    """The standalone cluster of this session, or None when the tests run in local mode."""
    with _using_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_master(spark_cluster: Cluster | None) -> str:
    """The MAPSMITH_SPARK_MASTER the sedona tests run on: the session's cluster, an external one, or local[2]."""
    if spark_cluster is not None:
        return spark_cluster.master_url
    return os.environ.get(EXTERNAL_MASTER_ENV, "").strip() or LOCAL_MASTER


def on_cluster(master: str) -> bool:
    return not master.startswith("local")
