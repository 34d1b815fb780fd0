"""The isolation runner stops what it promises to stop, says which limit ended a run, and refuses without bwrap.

Each hostile case has a clean twin: the same module doing the harmless thing is answered normally.
"""

from __future__ import annotations

import errno
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from mapsmith.errors import MapSmithError
from mapsmith.pluginkit import isolation
from mapsmith.pluginkit.isolation import Limits, run_isolated

PROBE = """
import errno, os, socket, subprocess, time

def main(p):
    what = p["what"]
    if what == "echo":
        return {"echo": p, "cwd": os.getcwd()}
    if what == "connect":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect((p["host"], p["port"]))
            return "connected"
        except OSError as e:
            return {"errno": e.errno}
    if what == "write":
        try:
            with open(p["path"], "w") as f:
                f.write("x")
            return "wrote"
        except OSError as e:
            return {"errno": e.errno}
    if what == "look":
        return {path: os.path.exists(path) for path in p["paths"]}
    if what == "allocate":
        block = bytearray(p["mb"] * 1024 * 1024)
        return len(block)
    if what == "spin":
        while True:
            pass
    if what == "sleep":
        time.sleep(p["seconds"])
        return "slept"
    if what == "spawn":
        kids = [subprocess.Popen(["sleep", "3"]) for _ in range(p["count"])]
        return len(kids)
    if what == "big_file":
        with open("big.bin", "wb") as f:
            f.write(b"0" * (p["mb"] * 1024 * 1024))
        return "written"
"""


@pytest.fixture
def probe(modules: Callable[[str, str], Path], tmp_path: Path) -> Callable[..., isolation.IsolatedResult]:
    folder = modules("probe", PROBE)
    workspace = tmp_path / "ws"

    def run(limits: Limits | None = None, **payload: object) -> isolation.IsolatedResult:
        return run_isolated("probe", dict(payload), workspace=workspace, python_path=[folder], limits=limits)

    return run


def test_a_harmless_call_is_answered_in_the_workspace(
    probe: Callable[..., isolation.IsolatedResult], tmp_path: Path
) -> None:
    result = probe(what="echo", n=3)
    assert result.ok, result.to_dict()
    assert result.result == {"echo": {"what": "echo", "n": 3}, "cwd": str((tmp_path / "ws").resolve())}
    assert result.limit_hit is None and result.attempts == [] and result.exit_status == 0
    assert result.import_s is not None and result.import_s < 5


def test_the_network_is_unreachable_and_the_attempt_is_named(probe: Callable[..., isolation.IsolatedResult]) -> None:
    result = probe(what="connect", host="192.0.2.1", port=80)  # TEST-NET-1: never a real host either way
    assert result.result == {"errno": errno.ENETUNREACH}
    assert result.attempts_of("network") == [{"kind": "network", "target": "192.0.2.1:80", "event": "socket.connect"}]


def test_loopback_is_the_only_interface(probe: Callable[..., isolation.IsolatedResult]) -> None:
    # Clean twin of the network case: loopback exists (nothing listens, so the refusal is ECONNREFUSED,
    # not "no route"), which shows the failure above is the missing route, not a broken socket layer.
    result = probe(what="connect", host="127.0.0.1", port=9)
    assert result.result == {"errno": errno.ECONNREFUSED}


def test_a_write_outside_the_workspace_is_refused_and_named(
    probe: Callable[..., isolation.IsolatedResult], tmp_path: Path
) -> None:
    outside = tmp_path / "modules" / "evil.py"  # a real folder on the host, shown read-only (it holds the modules)
    result = probe(what="write", path=str(outside))
    assert result.result == {"errno": errno.EROFS}
    assert not outside.exists()
    assert [a["target"] for a in result.attempts_of("write")] == [str(outside)]
    # The sandbox's own root is read-only too, and so are the software trees: a made-up path is no loophole.
    # (Paths that exist in every sandbox: where the checkout lives differs between machines.)
    assert probe(what="write", path="/made-up.txt").result == {"errno": errno.EROFS}
    assert probe(what="write", path="/usr/made-up.txt").result == {"errno": errno.EROFS}


def test_writes_in_the_workspace_and_private_tmp_succeed(
    probe: Callable[..., isolation.IsolatedResult], tmp_path: Path
) -> None:
    inside = tmp_path / "ws" / "inside.txt"
    assert probe(what="write", path=str(inside)).result == "wrote"
    assert inside.read_text() == "x"
    private = f"/tmp/mapsmith-private-{uuid.uuid4().hex}.txt"
    result = probe(what="write", path=private)
    assert result.result == "wrote" and result.attempts == []
    assert not Path(private).exists()  # the sandbox's /tmp is its own, gone with it


def test_the_host_is_not_visible(probe: Callable[..., isolation.IsolatedResult]) -> None:
    home = str(Path.home())
    result = probe(what="look", paths=["/etc/shadow", "/etc/passwd", f"{home}/.bashrc", "/usr/bin", "/var/log"])
    # /etc/passwd is the synthesized one-user file; the rest of /etc, the home folder and /var are absent.
    assert result.result == {
        "/etc/shadow": False,
        "/etc/passwd": True,
        f"{home}/.bashrc": False,
        "/usr/bin": True,
        "/var/log": False,
    }
    assert "/" not in result.view["read_only"]


def test_the_memory_limit_is_reported_as_memory(probe: Callable[..., isolation.IsolatedResult]) -> None:
    result = probe(Limits(memory_mb=1024), what="allocate", mb=2048)
    assert result.limit_hit == "memory"
    assert not result.ok and result.error is not None and result.error["class"] == "builtins.MemoryError"
    # Clean twin: 64 MB fits under the same limit.
    assert probe(Limits(memory_mb=1024), what="allocate", mb=64).result == 64 * 1024 * 1024


def test_the_cpu_limit_is_reported_as_cpu_time(probe: Callable[..., isolation.IsolatedResult]) -> None:
    result = probe(Limits(cpu_seconds=1, wall_seconds=60), what="spin")
    assert result.limit_hit == "cpu_time" and result.signal == "SIGXCPU"
    assert result.duration_s < 30


def test_the_wall_clock_limit_kills_a_sleeper(probe: Callable[..., isolation.IsolatedResult]) -> None:
    result = probe(Limits(wall_seconds=3), what="sleep", seconds=60)
    assert result.limit_hit == "wall_time" and not result.ok
    assert 3 <= result.duration_s < 15
    assert probe(Limits(wall_seconds=30), what="sleep", seconds=0.1).result == "slept"


def test_the_process_limit_stops_a_spawner(probe: Callable[..., isolation.IsolatedResult]) -> None:
    result = probe(Limits(processes=12), what="spawn", count=40)
    assert result.limit_hit == "processes", result.to_dict()
    assert result.attempts_of("process")
    assert probe(Limits(processes=12), what="spawn", count=2).result == 2


def test_the_file_size_limit_is_reported(probe: Callable[..., isolation.IsolatedResult]) -> None:
    result = probe(Limits(file_size_mb=1), what="big_file", mb=3)
    assert result.limit_hit == "file_size"
    assert probe(Limits(file_size_mb=4), what="big_file", mb=3).result == "written"


def test_without_bubblewrap_nothing_runs(
    probe: Callable[..., isolation.IsolatedResult], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(isolation, "bwrap_path", lambda: None)
    with pytest.raises(MapSmithError) as refused:
        probe(what="write", path=str(tmp_path / "ws" / "ran.txt"))
    assert refused.value.code == "ISOLATION_UNAVAILABLE" and "bubblewrap" in (refused.value.hint or "")
    assert not (tmp_path / "ws" / "ran.txt").exists()


def test_a_missing_read_only_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MapSmithError) as refused:
        run_isolated("probe", {}, workspace=tmp_path / "ws", read_only=[tmp_path / "absent.gpkg"])
    assert refused.value.code == "ISOLATION_INPUT_MISSING"


def test_limits_must_be_positive() -> None:
    with pytest.raises(MapSmithError) as refused:
        Limits(memory_mb=0)
    assert refused.value.code == "ISOLATION_LIMIT_INVALID" and refused.value.evidence["limit"] == "memory_mb"
