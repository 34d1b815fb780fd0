"""The qgis stack: QGIS Processing run through the ``qgis_process`` command, a separate process.

It detects, for real, whether ``qgis_process`` starts here and which QGIS it is, and declares the
``qgis:`` toolbox: every algorithm QGIS lists as an operation ``qgis:<algorithm id>``
(``algorithms.py`` derives the contracts, ``run.py`` runs them). Neither happens at start-up: the
probe runs when the stack's availability is first asked for, and is reused from disk while the
executable is unchanged (``cache.py``); the toolbox loads when a ``qgis:`` name or the whole
catalogue is first asked for, from a catalogue cached per QGIS and MapSmith version.

It must never import QGIS (``qgis.core`` and friends): QGIS is GPL, and MapSmith talks to it only
across a process boundary, with arguments and files. Detection must never raise; a missing,
crashing or hanging ``qgis_process`` is reported as the reason the stack is unavailable.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, RegisterOperation, RegisterStack, StackSpec
from mapsmith.toolboxes import RegisterToolbox, Toolbox

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

STACK = "qgis"
ENV_VAR = "MAPSMITH_QGIS_PROCESS"
ALGORITHMS_ENV = "MAPSMITH_QGIS_ALGORITHMS"
# Debian's `qgis_process` is a wrapper that adds --noversioncheck, an option QGIS 3.22 rejects,
# so the real binary beside it comes first.
EXECUTABLE_NAMES = ("qgis_process.bin", "qgis_process")
NOT_FOUND_REASON = f"qgis_process not on PATH (and {ENV_VAR} not set)"
INSTALL_FIX = (
    f"apt-get install -y --no-install-recommends qgis (Debian/Ubuntu), or set {ENV_VAR} to the qgis_process executable"
)
PROBE_TIMEOUT_S = 60
# The libraries `qgis_process --version` reports, by the label it prints, under our names.
_LIBRARY_LABELS = {"Qt": "Qt", "Python": "Python", "GDAL/OGR": "GDAL", "PROJ": "PROJ", "GEOS": "GEOS"}


def subprocess_env() -> dict[str, str]:
    """The environment every ``qgis_process`` call gets.

    Headless Qt; the system's directories first on PATH, because with a virtualenv's python first
    QGIS's embedded Python segfaults at start-up; and no PYTHONHOME/PYTHONPATH of ours, which would
    point QGIS's Python at our packages instead of its own.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}
    env["QT_QPA_PLATFORM"] = "offscreen"
    if os.name == "posix":
        env["PATH"] = os.pathsep.join(p for p in ("/usr/bin", "/bin", env.get("PATH", "")) if p)
    return env


def find_qgis_process() -> tuple[str | None, str | None]:
    """``(path, None)`` for the qgis_process to use, or ``(None, why not)``."""
    configured = os.environ.get(ENV_VAR, "").strip()
    if configured:
        path = os.path.abspath(os.path.expanduser(configured))
        if not os.path.exists(path):
            return None, f"{ENV_VAR}={configured} does not exist"
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            return None, f"{ENV_VAR}={configured} is not an executable file"
        return path, None
    for name in EXECUTABLE_NAMES:
        found = shutil.which(name)
        if found:
            return found, None
    return None, NOT_FOUND_REASON


@dataclass(frozen=True)
class QgisProbe:
    """What ``<exe> --version`` told: the versions, or why it could not be used."""

    executable: str
    versions: Mapping[str, str] = field(default_factory=dict)
    problem: str | None = None


def parse_version_output(text: str) -> dict[str, str]:
    """Versions from ``qgis_process --version`` output; {} when no QGIS version line is in it.

    The first line is ``QGIS <version> '<release name>' (<revision>)``, for instance
    ``QGIS 3.22.16-Białowieża 'Białowieża' (6f08e4d4f4)``; a ``QGIS version: 3.22.16`` form is
    accepted too. Library lines read ``GDAL/OGR version 3.6.2`` or, when the compiled and running
    versions differ, ``Running against GDAL/OGR 3.6.2`` (the running one is reported).
    Anything else is ignored rather than guessed at.
    """
    versions: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        qgis = re.match(r"QGIS(?: version)?:?\s+(\d+\.\d+(?:\.\d+)?)\S*(?:\s+'([^']*)')?", line)
        if qgis and "qgis" not in versions:
            versions["qgis"] = qgis.group(1)
            if qgis.group(2):
                versions["qgis_release"] = qgis.group(2)
            continue
        library = re.match(r"(?:Running against )?(Qt|Python|GDAL/OGR|PROJ|GEOS)(?: version)? (\S+)$", line)
        if library:
            versions[_LIBRARY_LABELS[library.group(1)]] = library.group(2)
    return versions if "qgis" in versions else {}


def _tail(text: str, lines: int = 10, chars: int = 800) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n".join(kept)[-chars:]


PROBE_FORMAT = 1


def _probe_cache_file(executable: str) -> Path:
    from mapsmith_qgis.cache import cache_dir, executable_tag

    return cache_dir() / f"probe-{executable_tag(executable)}.json"


@functools.cache
def probe(executable: str) -> QgisProbe:
    """What ``<executable> --version`` says, asked once per process and executable path.

    A successful answer is kept on disk with the executable's size, mtime and inode, and reused
    while they are unchanged: the same file prints the same versions, and starting QGIS to ask
    costs about a second. A failure is never kept: it is asked again next time.
    """
    from mapsmith_qgis.cache import fingerprint, read_json, write_json

    where = _probe_cache_file(executable)
    stamp = fingerprint(executable)
    if stamp is not None:
        cached = read_json(where, {"format": PROBE_FORMAT, "fingerprint": stamp})
        if cached is not None:
            versions = parse_version_output(str(cached.get("stdout", "")))
            if versions:
                return QgisProbe(executable, versions=versions)
    result, stdout = _run_probe(executable)
    if result.problem is None and stamp is not None:
        write_json(where, {"format": PROBE_FORMAT, "fingerprint": stamp, "stdout": stdout})
    return result


def _run_probe(executable: str) -> tuple[QgisProbe, str]:
    """Run ``<executable> --version`` now: the probe and what it printed."""
    try:
        done = subprocess.run(
            [executable, "--version"],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            env=subprocess_env(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = _tail((exc.stderr or b"").decode("utf-8", errors="replace"))
        return QgisProbe(
            executable,
            problem=f"`{executable} --version` did not finish within {PROBE_TIMEOUT_S} s"
            + (f": {stderr}" if stderr else ""),
        ), ""
    except OSError as exc:
        return QgisProbe(executable, problem=f"`{executable} --version` could not start: {exc}"), ""
    stdout = done.stdout.decode("utf-8", errors="replace")
    stderr = done.stderr.decode("utf-8", errors="replace")
    said = _tail(stderr) or _tail(stdout)
    if done.returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-done.returncode).name}"
        except ValueError:
            how = f"was killed by signal {-done.returncode}"
        return QgisProbe(executable, problem=f"`{executable} --version` {how}" + (f": {said}" if said else "")), stdout
    if done.returncode != 0:
        return QgisProbe(
            executable,
            problem=f"`{executable} --version` exited with status {done.returncode}" + (f": {said}" if said else ""),
        ), stdout
    versions = parse_version_output(stdout)
    if not versions:
        return QgisProbe(
            executable,
            problem=f"`{executable} --version` printed no QGIS version line"
            + (f"; it printed: {_tail(stdout, lines=3, chars=300)}" if stdout.strip() else ""),
        ), stdout
    return QgisProbe(executable, versions=versions), stdout


def availability() -> Availability:
    try:
        executable, problem = find_qgis_process()
        if executable is None:
            if problem == NOT_FOUND_REASON:
                return Availability(False, reason=problem, fix=INSTALL_FIX)
            return Availability(False, reason=problem, fix=f"point {ENV_VAR} at an existing qgis_process, or unset it")
        result = probe(executable)
    except Exception as exc:  # detection must report, never raise
        return Availability(False, reason=f"detection failed: {type(exc).__name__}: {exc}", fix=INSTALL_FIX)
    if result.problem is not None:
        return Availability(
            False,
            reason=result.problem,
            fix=f"run `{executable} --version` by hand to see why it fails, or set {ENV_VAR} to a working qgis_process",
            details={"executable": executable},
        )
    return Availability(True, details={"executable": executable, **result.versions})


def engine_versions() -> Mapping[str, str]:
    try:
        executable, _ = find_qgis_process()
        return dict(probe(executable).versions) if executable else {}
    except Exception:
        return {}


@hookimpl
def mapsmith_register_stacks(register: RegisterStack) -> None:
    register(
        StackSpec(
            name=STACK,
            summary="QGIS Processing through the qgis_process command, in a separate process",
            availability=availability,
            engine_versions=engine_versions,
            licence="GPL-2.0-or-later (QGIS; run as a separate process, never imported or linked)",
        )
    )


def _implementation(algorithm: str, imported: dict[str, object]):  # noqa: ANN202 - a closure per algorithm
    def run(ctx: RunContext) -> None:
        from mapsmith_qgis.run import run_algorithm

        executable, _ = find_qgis_process()
        if executable is None:
            from mapsmith.errors import EngineError

            raise EngineError(f"qgis_process is gone: {NOT_FOUND_REASON}", code="QGIS_UNAVAILABLE", hint=INSTALL_FIX)
        run_algorithm(ctx, executable, algorithm, imported, dict(probe(executable).versions))

    return run


def load_algorithms(register: RegisterOperation) -> None:
    """Register every QGIS algorithm as ``qgis:<id>`` (the ``qgis:`` toolbox's load); nothing without QGIS.

    Called by the host the first time a ``qgis:`` name or the whole catalogue is asked for. Without
    a working qgis_process it registers nothing, and the router answers a ``qgis:`` name with the
    stack's reason and fix. A failed import raises to the host, which reports it once.
    """
    from mapsmith import __version__
    from mapsmith_qgis.algorithms import load_catalogue

    avail = availability()
    if not avail.available:
        return
    executable, version = avail.details["executable"], avail.details["qgis"]
    for alg_id, imported in load_catalogue(executable, version, __version__).items():
        register(
            _implementation(alg_id, imported),
            operation=imported["contract"]["name"],
            stack=STACK,
            engine="qgis_process",
            contract=imported["contract"],
        )


@hookimpl
def mapsmith_register_operations(register: RegisterOperation) -> None:
    """MapSmith's own operations that QGIS can carry out (``mapping.MAPPINGS``), registered always.

    They add no contract, and the router reports the stack unavailable when qgis_process is not
    here. QGIS's own algorithms are the ``qgis:`` toolbox (:func:`mapsmith_register_toolboxes`).
    """
    from mapsmith_qgis.mapping import ENGINE, MAPPINGS, VALIDATORS, writable

    for mapped in MAPPINGS:
        register(
            mapped.function,
            operation=mapped.operation,
            stack=STACK,
            engine=ENGINE,
            eligible=writable,
            validate=VALIDATORS.get(mapped.operation),
        )


@hookimpl
def mapsmith_register_toolboxes(register: RegisterToolbox) -> None:
    """Declare the ``qgis:`` toolbox; no detection and no subprocess happen here.

    ``MAPSMITH_QGIS_ALGORITHMS=0`` keeps QGIS's algorithms out of the catalog (the stack is still
    detected): the test suite uses it so that tests about MapSmith's own catalog do not depend on
    QGIS being installed.
    """
    if os.environ.get(ALGORITHMS_ENV, "1").strip() == "0":
        return
    register(
        Toolbox(
            stack=STACK,
            prefix="qgis:",
            summary="every QGIS Processing algorithm, as qgis:<provider>:<algorithm>",
            load=load_algorithms,
        )
    )
