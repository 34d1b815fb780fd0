"""One sandbox for code MapSmith did not write: ``plugin check`` and ``propose_operation`` share the jail, the
child and the witness, and the jail starts where the old plugin sandbox could not (inside the engine worker).

Each hostile case has its clean twin: the same request without the defect is answered.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

import mapsmith
from mapsmith.sandbox.jail import JailLimits, run_child
from mapsmith.sandbox.witness import Witness

CORE = Path(mapsmith.__file__).parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux only")


def _calls(tree: ast.AST, name: str) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Attribute) and n.func.attr == name)
            or (isinstance(n.func, ast.Name) and n.func.id == name)
        )
    ]


def test_one_audit_hook_and_one_bwrap_profile_for_untrusted_code() -> None:
    """Read from the source tree: exactly one module installs an audit hook, and neither caller of the jail
    builds a bubblewrap command of its own (the engine worker's profile, with /proc, cannot nest)."""
    hooks, plans = {}, {}
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        relative = path.relative_to(CORE).as_posix()
        if lines := _calls(tree, "addaudithook"):
            hooks[relative] = lines
        if relative.startswith(("pluginkit/", "proposals/")) and (lines := _calls(tree, "build_plan")):
            plans[relative] = lines
    assert list(hooks) == ["sandbox/witness.py"], hooks
    assert plans == {}
    # The two callers reach the jail through the one child.
    for caller in ("pluginkit/isolation.py", "proposals/jailrun.py"):
        assert _calls(ast.parse((CORE / caller).read_text("utf-8")), "run_child"), caller


def _witness(mode: str, **policy: Any) -> tuple[Witness, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    w = Witness(sent.append, mode=mode, **policy)
    w.armed = True
    return w, sent


WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def test_the_witness_observes_for_plugins_and_refuses_for_proposals() -> None:
    observe, seen = _witness("observe", writable=("/ws", "/tmp"), forbidden=("/tmp/plugin",))
    observe("socket.__new__", (None, 2, 1, 0))  # making a socket is not yet an attempt for a plugin
    observe("socket.connect", (None, ("192.0.2.1", 80)))
    observe("socket.getaddrinfo", ("localhost", 80, 0, 0, 0))  # this machine's own name: not an attempt
    observe("open", ("/tmp/plugin/evil.py", "w", WRITE))  # under /tmp, but the plugin's read-only folder
    observe("open", ("/ws/out.gpkg", "w", WRITE))  # clean twin: inside the workspace
    observe("open", ("/etc/hostname", "r", os.O_RDONLY))  # reads are the view's business in observe mode
    assert seen == [
        {"attempt": {"kind": "network", "target": "192.0.2.1:80", "event": "socket.connect"}},
        {"attempt": {"kind": "write", "target": "/tmp/plugin/evil.py", "event": "open"}},
    ]

    refuse, told = _witness("refuse", writable=("/scratch", "/tmp"), readable=("/scratch", "/inputs", "/usr"))
    for event, args in (
        ("socket.__new__", (None, 2, 1, 0)),
        ("import", ("ctypes", None, [], [], [])),
        ("open", ("/etc/hostname", "r", os.O_RDONLY)),
        ("os.remove", ("/inputs/0/a.gpkg", None)),
    ):
        with pytest.raises(PermissionError):
            refuse(event, args)
    assert [m["attempt"]["kind"] for m in told] == ["network", "native", "read", "write"]
    # Clean twins: the agent's own output and its inputs are fine.
    refuse("open", ("/scratch/out/h.gpkg", "wb", WRITE))
    refuse("open", ("/inputs/0/a.gpkg", "rb", os.O_RDONLY))
    assert len(told) == 4


@pytest.fixture
def target(tmp_path: Path) -> Path:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "caught.py").write_text(
        textwrap.dedent(
            """
            import socket

            def main(p):
                if p["what"] == "connect":
                    try:  # the code catches the refusal and carries on as if nothing happened
                        socket.create_connection(("192.0.2.7", 443), timeout=2)
                    except OSError:
                        pass
                return {"echo": p["what"]}
            """
        ),
        "utf-8",
    )
    return folder


def test_an_attempt_the_code_caught_still_reaches_the_caller(target: Path, tmp_path: Path) -> None:
    scratch = Path(tempfile.mkdtemp(dir=tmp_path))

    def run(what: str) -> Any:
        return run_child(
            {
                "target": "caught",
                "payload": {"what": what},
                "witness": {"mode": "refuse", "writable": ["/scratch", "/tmp", "/dev/null"]},
                "arm": "now",
            },
            scratch=scratch,
            inputs={str(target): target},
            limits=JailLimits(timeout_s=60),
            env={"PYTHONPATH": f"{target}:{os.environ.get('PYTHONPATH', '')}".rstrip(":")},
        )

    done = run("connect")
    assert done.outcome == {"outcome": "result", "result": {"echo": "connect"}, "import_s": done.outcome["import_s"]}
    # create_connection resolves first: refused there, before any socket exists; nothing after it is tried.
    assert done.attempts == [{"kind": "network", "target": "192.0.2.7", "event": "socket.getaddrinfo"}]
    clean = run("echo")
    assert clean.outcome is not None and clean.outcome["result"] == {"echo": "echo"} and clean.attempts == []


NESTED = """
import json, sys
from pathlib import Path
from mapsmith.pluginkit.isolation import run_isolated
folder, ws = Path(sys.argv[1]), Path(sys.argv[2])
out = {}
for what in ("echo", "connect"):
    r = run_isolated("probe", {"what": what}, workspace=ws / what, python_path=[folder])
    out[what] = {"ok": r.ok, "result": r.result, "attempts": r.attempts, "error": r.error, "tail": r.stderr_tail[-300:]}
print(json.dumps(out))
"""

PROBE = """
import socket

def main(p):
    if p["what"] == "connect":
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=2)
        except OSError as e:
            return {"errno": e.errno}
    return {"echo": p["what"]}
"""


def test_plugin_code_is_isolated_from_inside_the_engine_worker(tmp_path: Path) -> None:
    """The engine worker's own sandbox (with /proc) around a plugin run: the old plugin sandbox failed here
    with "Can't mount proc on /newroot/proc"; the one jail mounts no /proc, so it starts nested too."""
    from mapsmith.sandbox.policy import build_plan, bwrap_path

    bwrap = bwrap_path()
    assert bwrap is not None, "bubblewrap is required for these tests (see conftest)"
    workspace = tmp_path / "worker-ws"
    workspace.mkdir()
    folder = workspace / "modules"
    folder.mkdir()
    (folder / "probe.py").write_text(PROBE, "utf-8")
    (workspace / "nested.py").write_text(NESTED, "utf-8")
    identity = tmp_path / "id"
    identity.mkdir()
    environ = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    command = [sys.executable, "-s", str(workspace / "nested.py"), str(folder), str(workspace / "runs")]
    plan = build_plan(environ, workspace, identity, command, bwrap)
    done = subprocess.run(plan.argv, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = json.loads(done.stdout)
    assert out["echo"]["ok"] and out["echo"]["result"] == {"echo": "echo"}, out
    assert out["connect"]["result"] == {"errno": 101}  # ENETUNREACH: no route out of the nested jail either
    # create_connection resolves, then connects: the observing witness names both and lets the kernel refuse.
    assert out["connect"]["attempts"] == [
        {"kind": "network", "target": "192.0.2.1", "event": "socket.getaddrinfo"},
        {"kind": "network", "target": "192.0.2.1:80", "event": "socket.connect"},
    ]
