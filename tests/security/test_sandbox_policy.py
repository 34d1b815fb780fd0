"""What the sandboxed worker can see and reach, and how MAPSMITH_SANDBOX is decided and said.

The view is checked from inside: the plan's own bwrap command runs a small Python probe that tries the
home directory, a file beside the workspace, /etc, the network and the workspace itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mapsmith.errors import ConfigurationError
from mapsmith.sandbox.launcher import Limits, redact
from mapsmith.sandbox.policy import build_plan, decide, plugin_files, worker_environment
from security.sandbox_helpers import CountingServer, require_sandbox

PROBE = r"""
import json, os, socket, sys
ws, beside, port, home = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
out = {
    "home": sorted(os.listdir(home)) if os.path.isdir(home) else None,
    "beside": os.path.exists(beside),
    "etc": sorted(os.listdir("/etc")),
    "shadow": os.path.exists("/etc/shadow"),
    "tmp": sorted(os.listdir("/tmp")),
    "environ": dict(os.environ),
}
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    out["connect"] = "connected"
except OSError as exc:
    out["connect"] = type(exc).__name__
with open(os.path.join(ws, "written_inside.txt"), "w") as f:
    f.write("hello")
try:
    open(os.path.join(sys.prefix, "written_inside.txt"), "w")
    out["software_writable"] = True
except OSError:
    out["software_writable"] = False
print(json.dumps(out))
"""


def test_the_worker_sees_the_workspace_and_software_only_and_reaches_no_network(
    workspace: Path, tmp_path: Path
) -> None:
    require_sandbox(workspace)
    beside = tmp_path / "beside.txt"
    beside.write_text("outside the workspace")
    server = CountingServer()
    identity = tmp_path / "identity"
    identity.mkdir()
    environ = {"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_HTTP_TOKEN": "x" * 40, "MAPSMITH_STACK": "opensource"}
    try:
        plan = build_plan(
            environ,
            workspace,
            identity,
            [sys.executable, "-c", PROBE, str(workspace), str(beside), str(server.port), str(Path.home())],
            shutil.which("bwrap") or "bwrap",
        )
        done = subprocess.run(plan.argv, capture_output=True, text=True, timeout=120)
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["beside"] is False  # the workspace's neighbour (and all of the host's /tmp) is not there
    # No home directory: what shows of it is only the way down to a bound prefix (pyenv's Python).
    home = Path.home()
    under_home = {Path(p).relative_to(home).parts[0] for p in plan.read_only if Path(p).is_relative_to(home)}
    assert seen["home"] == (sorted(under_home) if under_home else None)
    assert len(os.listdir(home)) > len(under_home)  # the host's home has more than that
    assert seen["shadow"] is False
    # Only the few /etc entries the engines need (which exist on this host), and the synthesized identity.
    assert set(seen["etc"]) <= {Path(e).name for e in _etc_allowed()} | {"passwd", "group", "hosts"}
    assert {"passwd", "group", "hosts", "ld.so.cache"} <= set(seen["etc"])
    # A private /tmp: the worker's home and the mount points of what is bound under the host's /tmp.
    assert seen["tmp"] == sorted({"home"} | _tmp_tops(plan.read_only + plan.read_write))
    assert seen["connect"] == "ConnectionRefusedError"  # loopback exists inside, the host's server does not
    assert server.requests == []
    assert (workspace / "written_inside.txt").read_text() == "hello"  # the workspace is read-write
    assert seen["software_writable"] is False
    assert "MAPSMITH_HTTP_TOKEN" not in seen["environ"]
    assert seen["environ"]["MAPSMITH_STACK"] == "opensource" and seen["environ"]["HOME"] == "/tmp/home"


def _etc_allowed() -> tuple[str, ...]:
    from mapsmith.sandbox.policy import ETC_ENTRIES

    return ETC_ENTRIES


def _tmp_tops(paths: list[str]) -> set[str]:
    return {Path(p).parts[2] for p in paths if Path(p).is_relative_to("/tmp")}


def test_the_worker_environment_is_an_allow_list_and_never_has_the_token() -> None:
    env = worker_environment(
        {
            "MAPSMITH_HTTP_TOKEN": "secret-token-value-0123456789abcdef",
            "MAPSMITH_STACK": "sedona",
            "GDAL_CACHEMAX": "64",
            "AWS_SECRET_ACCESS_KEY": "nope",
            "HOME": "/root",
            "SSH_AUTH_SOCK": "/tmp/ssh-agent",
        },
        Path("/data/ws"),
    )
    assert "MAPSMITH_HTTP_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env and "SSH_AUTH_SOCK" not in env
    assert env["MAPSMITH_STACK"] == "sedona" and env["GDAL_CACHEMAX"] == "64"
    assert env["HOME"] == "/tmp/home" and env["MAPSMITH_WORKSPACE"] == "/data/ws" and env["PROJ_NETWORK"] == "OFF"


def test_the_plan_binds_the_workspace_read_write_at_its_own_path_and_nothing_of_home(
    workspace: Path, tmp_path: Path
) -> None:
    plan = build_plan({}, workspace, tmp_path, ["/bin/true"])
    argv = plan.argv
    ws = str(workspace.resolve())
    binds = [argv[i + 1 : i + 3] for i, a in enumerate(argv) if a == "--bind"]
    # the temporary folder on the host's disk, in the identity folder; then the workspace, last
    assert binds == [[str(tmp_path / "spill"), "/tmp/spill"], [ws, ws]] and plan.read_write == ["/tmp/spill", ws]
    assert plan.environment["TMPDIR"] == "/tmp/spill" and (tmp_path / "spill").is_dir()
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert "--share-net" not in argv
    home = Path.home()
    assert str(home) not in plan.read_only and "/etc" not in plan.read_only
    # pyenv's Python lives under the home directory: only the interpreter prefixes may be bound there,
    # single files a plugin declares (the Spark engine's jars in ~/.m2), never a folder of them, and
    # MapSmith's own cache folders (…/mapsmith/qgis for the QGIS catalogue, …/mapsmith/contracts for the
    # validated contracts; read-only: nothing else lives there).
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    declared = {f.resolve() for files in plugin_files({}).values() for f in files}
    assert all(f.is_file() or f.parts[-2:] in {("mapsmith", "qgis"), ("mapsmith", "contracts")} for f in declared)
    assert {Path(p) for p in plan.read_only if Path(p).is_relative_to(home)} <= prefixes | declared


@pytest.mark.parametrize(
    ("environ", "enabled", "says"),
    [
        ({"MAPSMITH_SANDBOX": "off", "MAPSMITH_WORKSPACE": "/x"}, False, "MAPSMITH_SANDBOX=off"),
        ({"MAPSMITH_SANDBOX": "auto"}, False, "MAPSMITH_WORKSPACE is not set"),
        ({"MAPSMITH_SANDBOX": "on"}, False, "MAPSMITH_WORKSPACE is not set"),
    ],
)
def test_the_setting_is_decided_and_the_reason_said(environ: dict[str, str], enabled: bool, says: str) -> None:
    decision = decide(environ)
    assert decision.enabled is enabled and says in decision.reason


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ConfigurationError) as info:
        decide({"MAPSMITH_SANDBOX": "yes"})
    assert info.value.code == "SANDBOX_SETTING_INVALID" and info.value.evidence["value"] == "yes"


@pytest.mark.parametrize(
    ("variable", "value", "code"),
    [
        ("MAPSMITH_CALL_TIMEOUT_S", "0", "LIMIT_SETTING_INVALID"),  # read by mapsmith.limits, for every engine
        ("MAPSMITH_WORKERS", "two", "SANDBOX_SETTING_INVALID"),
        ("MAPSMITH_WORKERS", "0", "SANDBOX_SETTING_INVALID"),
        ("MAPSMITH_WORKER_MEMORY_MB", "-1", "SANDBOX_SETTING_INVALID"),
    ],
)
def test_bad_limits_are_refused_and_good_ones_read(variable: str, value: str, code: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Limits({variable: value})
    assert info.value.code == code and info.value.evidence == {
        "variable": variable,
        "value": value,
    }
    limits = Limits({"MAPSMITH_CALL_TIMEOUT_S": "2.5", "MAPSMITH_WORKERS": "3", "MAPSMITH_WORKER_MEMORY_MB": "0"})
    assert limits.to_dict() == {"call_timeout_s": 2.5, "workers": 3, "worker_memory_mb": None}


def test_on_without_bubblewrap_refuses_to_start_with_the_fix(workspace: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with python but no bwrap
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {
        "PATH": str(bin_dir),
        "MAPSMITH_WORKSPACE": str(workspace),
        "MAPSMITH_SANDBOX": "on",
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "mapsmith", "info"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "SANDBOX_UNAVAILABLE" in done.stderr and "bubblewrap (bwrap) is not installed" in done.stderr
    assert "apt-get install bubblewrap" in done.stderr and "MAPSMITH_SANDBOX=off" in done.stderr
    # auto falls back and says why, once, and info says so too
    env["MAPSMITH_SANDBOX"] = "auto"
    done = subprocess.run(
        [sys.executable, "-m", "mapsmith", "info"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("without the OS sandbox") == 1
    sandbox = json.loads(done.stdout)["sandbox"]
    assert sandbox["enabled"] is False and sandbox["reason"] == "bubblewrap (bwrap) is not installed"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_bubblewrap_also_works_for_a_normal_user() -> None:
    """CI runs as root; a deployment runs as a normal user, for whom bwrap needs user namespaces."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap is not installed")
    ws = Path(tempfile.mkdtemp(prefix="mapsmith-nobody-"))  # pytest's tmp is root-only (0700)
    ws.chmod(0o777)
    argv = [
        "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",  # fmt: skip
        bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for tree in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(tree):
            argv += ["--symlink", os.readlink(tree), tree]
        elif os.path.isdir(tree):
            argv += ["--ro-bind", tree, tree]
    argv += ["--bind", str(ws), str(ws), "/bin/sh", "-c", f"id -u; echo inside > {ws}/mark"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "65534" and (ws / "mark").read_text() == "inside\n"
    finally:
        shutil.rmtree(ws)


def test_redaction_keeps_workspace_paths_and_hides_the_host() -> None:
    text = 'File "/work/main/core/mapsmith/runner.py", line 3\nread /data/ws/a.gpkg and /data/ws2/b; ratio 1/2'
    assert redact(text, Path("/data/ws")) == (
        'File "<outside the workspace>", line 3\nread a.gpkg and <outside the workspace>; ratio 1/2'
    )


@pytest.mark.parametrize("wide", ["/", "parent_of_workspace", "home"])
def test_an_import_path_that_would_show_the_host_is_refused(workspace: Path, tmp_path: Path, wide: str) -> None:
    path = {"/": "/", "parent_of_workspace": str(workspace.parent), "home": str(Path.home())}[wide]
    if not Path(path).is_dir():
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(ConfigurationError) as info:
        build_plan({"PYTHONPATH": path}, workspace, tmp_path, ["/bin/true"])
    assert info.value.code == "SANDBOX_VIEW_TOO_WIDE" and info.value.evidence["path"] == str(Path(path).resolve())
    # the clean twin: a package folder on PYTHONPATH is bound read-only, on its own
    package = tmp_path / "pkgs"
    package.mkdir()
    plan = build_plan({"PYTHONPATH": str(package)}, workspace, tmp_path, ["/bin/true"])
    assert str(package.resolve()) in plan.read_only
