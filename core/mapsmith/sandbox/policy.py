"""What the engine worker may see: the bubblewrap command line, its mounts and its environment.

The sandbox's filesystem view is the workspace (read-write, at the same absolute path so manifests and
labels are identical inside and out), the read-only software the worker runs (this Python's prefix and
base prefix, every ``sys.path`` entry, ``/usr``, ``/lib*``, ``/bin``, ``/sbin``), a handful of ``/etc``
files the loader, fonts, Java and time zones need, a synthesized one-line ``passwd``/``group``, a private
``/tmp`` (memory) with the worker's ``TMPDIR`` in it bound to a private folder on the host's disk (``SANDBOX_TMPDIR``),
a fresh ``/proc`` and a minimal ``/dev``. No network namespace is shared (loopback only), the
home directory is not mounted, and the environment is cleared and rebuilt from an allow-list.

This module must never put ``MAPSMITH_HTTP_TOKEN`` (or any variable outside the allow-list) into the
worker's environment, and never bind a path that is not named here: every extra path widens what a
hostile file can make an engine read.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SANDBOX_ENV = "MAPSMITH_SANDBOX"
SANDBOX_SETTINGS = ("auto", "on", "off")
# Variables the worker receives, by prefix; everything else is dropped by --clearenv.
PASSED_PREFIXES = (
    "MAPSMITH_",
    "GDAL_",
    "CPL_",
    "OGR_",
    "GTIFF_",
    "PROJ_",
    "JAVA_",
    "SPARK_",
    "PYSPARK_",
    "QGIS_",
    "QT_QPA_",
)
PASSED_NAMES = ("PYTHONPATH", "VIRTUAL_ENV", "TZ", "LANG", "LC_ALL")
# Never passed even though the prefix matches: the HTTP bearer token is the server's, not the engines'.
NEVER_PASSED = frozenset({"MAPSMITH_HTTP_TOKEN"})
# Read-only system trees; missing ones are skipped (/lib64 is absent on some distributions).
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# The few /etc entries engines need: the dynamic loader's cache, fonts (map rendering, QGIS), the
# alternatives symlinks (/usr/bin/java points through them), Java's config, time zone, SSL is left out
# (no network), and nsswitch so getpwuid() reads the synthesized passwd below.
ETC_ENTRIES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/fonts",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/nsswitch.conf",
    "/etc/java-17-openjdk",
    "/etc/java-21-openjdk",
    "/etc/java-11-openjdk",
    "/etc/gdal",
    "/etc/proj",
    "/etc/qgis",
    "/etc/matplotlibrc",
)
# Only for the worker that fetches (mapsmith.fetch): name resolution and the TLS trust store.
NETWORK_ETC_ENTRIES = ("/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/ssl", "/etc/ca-certificates")
SANDBOX_HOME = "/tmp/home"
# The worker's temporary folder (TMPDIR): a private folder on the host's disk (in the server's identity folder for
# the worker, removed with it), not the private /tmp, which is memory: an engine that spills to disk beyond its
# memory limit (DuckDB, SedonaDB) would otherwise hold in memory what it spilled to free it.
SANDBOX_TMPDIR = "/tmp/spill"
SANDBOX_HOSTNAME = "mapsmith-sandbox"


@dataclass
class SandboxPlan:
    """The bubblewrap command that starts one worker, and why each path is visible."""

    argv: list[str]
    environment: dict[str, str]
    read_only: list[str] = field(default_factory=list)
    read_write: list[str] = field(default_factory=list)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=8)
def _interpreter_path(pythonpath: str | None) -> tuple[str, ...]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": SANDBOX_HOME,
        **({"PYTHONPATH": pythonpath} if pythonpath is not None else {}),
    }
    # As the worker will run: no user site (-s) and HOME set, so nothing looks up the user in /etc/passwd.
    done = subprocess.run(
        [sys.executable, "-s", "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        capture_output=True,
        env=env,
        timeout=60,
        cwd="/",
    )
    if done.returncode != 0:
        return tuple(p for p in sys.path[1:] if p)
    return tuple(str(p) for p in json.loads(done.stdout))


def worker_sys_path(environ: Mapping[str, str]) -> list[str]:
    """The import path the worker's interpreter will have, asked of that interpreter.

    Not this process's ``sys.path``: its first entry is the directory of whatever script or working
    directory started the server (a home directory, a checkout with secrets), which is not software.
    """
    return list(_interpreter_path(environ.get("PYTHONPATH")))


def software_paths(environ: Mapping[str, str]) -> list[Path]:
    """Every directory the worker's Python needs to import MapSmith, its plugins and their engines."""
    seen: list[Path] = []
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *worker_sys_path(environ)]
    # The editable checkout's trees: contracts/ is read from beside core/ (mapsmith.contracts.contracts_root).
    from mapsmith.contracts import contracts_root

    candidates.append(str(contracts_root()))
    # The interpreter may sit behind symlinks (a venv's bin/python -> pyenv's python3.11).
    candidates.append(str(Path(sys.executable).resolve().parent.parent))
    for raw in candidates:
        if not raw:
            continue  # '' is the current directory of whoever started the server: not software
        p = Path(raw).resolve()
        if p.suffix == ".zip" or not p.exists():
            continue
        if any(p == s or s in p.parents for s in seen):
            continue
        seen = [s for s in seen if p not in s.parents]
        seen.append(p)
    return sorted(seen)


def _refuse_wide(path: Path, workspace: Path) -> None:
    """A software path that would show the worker the host: the root, the home directory or one above
    it, or a folder holding the workspace (PYTHONPATH=/tmp with a workspace in /tmp)."""
    home = Path.home().resolve()
    if path == Path("/") or path == home or path in home.parents or path in workspace.parents:
        from mapsmith.errors import ConfigurationError

        raise ConfigurationError(
            f"the engine sandbox would have to show the worker {path} (an import path of this Python), "
            "which holds far more than software",
            code="SANDBOX_VIEW_TOO_WIDE",
            evidence={"path": str(path), "workspace": str(workspace)},
            hint="remove that folder from PYTHONPATH (or the .pth file that adds it) and point at the package "
            f"folders themselves, or set {SANDBOX_ENV}=off to run engines in the server process",
        )


def _covered(path: Path, trees: list[Path]) -> bool:
    return any(path == t or t in path.parents for t in trees)


def worker_environment(environ: Mapping[str, str], workspace: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in environ.items()
        if (k.startswith(PASSED_PREFIXES) or k in PASSED_NAMES) and k not in NEVER_PASSED
    }
    env.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": SANDBOX_HOME,
            "TMPDIR": "/tmp",
            "LANG": env.get("LANG", "C.UTF-8"),
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",  # the software is mounted read-only
            "PYTHONUNBUFFERED": "1",
            # glibc reserves 64 MB of address space per thread arena; under RLIMIT_AS that is memory lost.
            "MALLOC_ARENA_MAX": "2",
            "MAPSMITH_WORKSPACE": str(workspace),
            "MAPSMITH_IN_SANDBOX": "1",
            "PROJ_NETWORK": "OFF",
            "GDAL_HTTP_TIMEOUT": "1",  # belt and braces: no route exists anyway
            # Spark's driver binds its ports on loopback, the only interface there is.
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "localhost",
        }
    )
    return env


def identity_files(directory: Path) -> tuple[Path, Path, Path]:
    """A one-user passwd and group for the worker's uid (Java and getpass ask who they run as), and a
    hosts file naming only loopback (Spark's driver resolves its own host name to bind its JVM)."""
    uid, gid = os.getuid(), os.getgid()
    passwd = directory / "passwd"
    group = directory / "group"
    hosts = directory / "hosts"
    passwd.write_text(f"mapsmith:x:{uid}:{gid}:MapSmith engine worker:{SANDBOX_HOME}:/usr/sbin/nologin\n")
    group.write_text(f"mapsmith:x:{gid}:\n")
    hosts.write_text(f"127.0.0.1 localhost {SANDBOX_HOSTNAME}\n::1 localhost ip6-localhost\n")
    return passwd, group, hosts


def plugin_files(environ: Mapping[str, str]) -> dict[str, list[Path]]:
    """Files a plugin's engine reads from outside the software trees, by the variable that names them.

    The Spark engine's Sedona jars live in the Maven or Ivy cache under the home directory, which the
    worker does not see: each jar is bound on its own, read-only, and ``MAPSMITH_SEDONA_JARS`` names them
    so the worker does not search a home it cannot see. (A hook for this would let any plugin declare its
    files; today only this one needs it.) The core's own cache of validated contracts is bound the same way.
    """
    out: dict[str, list[Path]] = {}
    try:
        from mapsmith_sedona.jars import JARS_ENV, find_jars

        jars, _problem = find_jars(environ)
        if jars:
            out[JARS_ENV] = [Path(j) for j in jars]
    except Exception:  # noqa: BLE001 - a plugin's search must not stop the server; the engine will say
        pass
    try:
        # QGIS's algorithm catalogue, built once per QGIS version by the server process (which can write
        # it): the workers read it instead of asking QGIS again in a home they cannot see.
        from mapsmith_qgis.cache import CACHE_ENV, cache_dir

        folder = cache_dir(dict(environ))
        folder.mkdir(parents=True, exist_ok=True)
        out[CACHE_ENV] = [folder]
    except Exception:  # noqa: BLE001 - no QGIS plugin, or no cache folder: the worker asks QGIS itself
        pass
    # The built-in contracts, validated by the server process at its start (mapsmith.contract_cache): the
    # worker reads them instead of validating them again.
    from mapsmith.contract_cache import CACHE_ENV as CONTRACTS_ENV
    from mapsmith.contract_cache import cache_dir as contracts_dir

    try:
        folder = contracts_dir(dict(environ))
        folder.mkdir(parents=True, exist_ok=True)
        out[CONTRACTS_ENV] = [folder]
    except OSError:  # no cache folder: the worker validates the contracts itself
        pass
    return out


def build_plan(
    environ: Mapping[str, str],
    workspace: Path,
    identity_dir: Path,
    command: list[str],
    bwrap: str = "bwrap",
    *,
    network: bool = False,
) -> SandboxPlan:
    """The bwrap argv for ``command``. Order matters: bwrap applies mounts in sequence, so the private
    /tmp comes before the workspace (which may live under /tmp) and the software binds come last.

    ``network`` is for the fetch worker alone: the host's network namespace is shared (and resolv.conf
    and the TLS trust store are visible) so that ``mapsmith.fetch`` can reach the hosts the operator
    allows; the files it sees are the same as every worker's."""
    workspace = workspace.resolve()
    argv = [
        bwrap,
        "--unshare-all",  # user (when allowed), ipc, pid, net, uts, cgroup: loopback is the only network
        *(["--share-net"] if network else []),
        "--die-with-parent",  # the server's death takes the worker with it
        "--new-session",  # no TIOCSTI into the server's terminal
        "--clearenv",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/dev/shm",
        "--tmpfs",
        "/tmp",
        "--dir",
        SANDBOX_HOME,
        "--hostname",
        SANDBOX_HOSTNAME,  # not the host's name; resolvable through the synthesized hosts file
    ]
    read_only: list[str] = []
    for tree in SYSTEM_TREES:
        p = Path(tree)
        if p.is_symlink():  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(p), tree]
        elif p.is_dir():
            argv += ["--ro-bind", tree, tree]
            read_only.append(tree)
    for entry in ETC_ENTRIES + (NETWORK_ETC_ENTRIES if network else ()):
        if os.path.lexists(entry):
            argv += ["--ro-bind", entry, entry]
            read_only.append(entry)
    passwd, group, hosts = identity_files(identity_dir)
    for source, target in ((passwd, "/etc/passwd"), (group, "/etc/group"), (hosts, "/etc/hosts")):
        argv += ["--ro-bind", str(source), target]
    system = [Path(t) for t in read_only]
    for p in software_paths(environ):
        if _covered(p, system):
            continue
        _refuse_wide(p, workspace)
        argv += ["--ro-bind", str(p), str(p)]
        read_only.append(str(p))
    env = worker_environment(environ, workspace)
    for variable, files in plugin_files(environ).items():
        for f in files:
            resolved = f.resolve()
            if not _covered(resolved, [Path(p) for p in read_only]):
                argv += ["--ro-bind", str(resolved), str(resolved)]
                read_only.append(str(resolved))
        env[variable] = ",".join(str(f.resolve()) for f in files)
    spill = identity_dir / "spill"
    spill.mkdir(mode=0o700, exist_ok=True)
    argv += ["--bind", str(spill), SANDBOX_TMPDIR]
    env["TMPDIR"] = SANDBOX_TMPDIR
    # Last: the workspace wins over any read-only tree it sits inside.
    argv += ["--bind", str(workspace), str(workspace), "--chdir", str(workspace)]
    for k, v in sorted(env.items()):
        argv += ["--setenv", k, v]
    argv += ["--", *command]
    return SandboxPlan(argv, env, read_only, [SANDBOX_TMPDIR, str(workspace)])


@dataclass(frozen=True)
class SandboxDecision:
    """Whether engines run in the sandbox, and the reason (said at start and in server_info)."""

    enabled: bool
    setting: str
    reason: str
    fix: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"enabled": self.enabled, "setting": self.setting, "reason": self.reason}
        if self.fix:
            out["fix"] = self.fix
        return out


def probe(bwrap: str, workspace: Path) -> str | None:
    """None when bubblewrap can build the worker's view here, else what it said (user namespaces off ...)."""
    with tempfile.TemporaryDirectory(prefix="mapsmith-probe-") as tmp:
        plan = build_plan({}, workspace, Path(tmp), ["/bin/true"], bwrap)
        try:
            done = subprocess.run(plan.argv, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip()[-400:] or f"exit code {done.returncode}"
    return None


def decide(environ: Mapping[str, str]) -> SandboxDecision:
    """Read MAPSMITH_SANDBOX (auto by default) and check what this machine can do."""
    setting = (environ.get(SANDBOX_ENV) or "auto").strip().lower()
    if setting not in SANDBOX_SETTINGS:
        from mapsmith.errors import ConfigurationError

        raise ConfigurationError(
            f"{SANDBOX_ENV}={setting!r} is not one of {', '.join(SANDBOX_SETTINGS)}",
            code="SANDBOX_SETTING_INVALID",
            evidence={"variable": SANDBOX_ENV, "value": setting},
            hint=f"set {SANDBOX_ENV} to auto (the default), on or off",
        )
    if setting == "off":
        return SandboxDecision(False, setting, f"{SANDBOX_ENV}=off: engines run inside the server process")
    fallback = f"or set {SANDBOX_ENV}=off to run engines in the server process (parser walls only)"
    if not sys.platform.startswith("linux"):
        return SandboxDecision(
            False,
            setting,
            f"no OS sandbox on {sys.platform}: bubblewrap is Linux only",
            fix=f"run on Linux, {fallback}",
        )
    root = environ.get("MAPSMITH_WORKSPACE")
    if not root:
        return SandboxDecision(
            False,
            setting,
            "MAPSMITH_WORKSPACE is not set: the sandbox's view is the workspace, so without one there is none",
            fix=f"set MAPSMITH_WORKSPACE to the folder the server may read and write, {fallback}",
        )
    bwrap = bwrap_path()
    if bwrap is None:
        return SandboxDecision(
            False,
            setting,
            "bubblewrap (bwrap) is not installed",
            fix=f"install it (apt-get install bubblewrap, dnf install bubblewrap), {fallback}",
        )
    failure = probe(bwrap, Path(root))
    if failure is not None:
        return SandboxDecision(
            False,
            setting,
            f"bubblewrap cannot start a sandbox here: {failure}",
            fix="allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and "
            f"kernel.apparmor_restrict_unprivileged_userns=0), or run outside a container that forbids them, "
            f"{fallback}",
        )
    return SandboxDecision(True, setting, "engines run in a bubblewrap sandbox: workspace read-write, no network")
