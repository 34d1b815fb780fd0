"""Every hostile proposal (``hostile_proposals.HOSTILE``) is refused with its own code, the workspace is
untouched, and the same service then accepts an honest proposal (the clean twin) and still runs operations.

The attempts reach the jail (their names are spelt at run time), so what is tested is the sandbox's
witness and limits, not the advisory static check; ``test_the_jail_holds_without_the_witness`` runs raw
code in the jail with no audit hook at all to show the wall itself: no route out, read-only files.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proposals.hexagon import CELL_AREA_M2, CELLS, CODE, CONTRACT, examples, proposal_with, write_square
from security.hostile_proposals import HOSTILE, LIMITS_ENV

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux only")


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".mapsmith" not in p.parts
    }


@pytest.fixture(scope="module")
def hostile_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    from mapsmith.app import MapSmith

    ws = tmp_path_factory.mktemp("hostile") / "ws"
    ws.mkdir()
    write_square(ws)
    (ws / "secret.txt").write_text("the server's own file, not an input\n")
    yield MapSmith({"MAPSMITH_WORKSPACE": str(ws), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **LIMITS_ENV}), ws


@pytest.mark.parametrize(("entry", "body", "code"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_each_hostile_proposal_is_refused_with_its_code(
    hostile_app: tuple[Any, Path], entry: str, body: str, code: str
) -> None:
    from mapsmith.errors import MapSmithError

    app, ws = hostile_app
    before = _digests(ws)
    name = f"hostile_{entry}"
    contract, source = proposal_with(body.format(workspace=ws, home=Path.home()), name=name)
    with pytest.raises(MapSmithError) as refused:
        app.propose_operation(contract, source, examples("out.gpkg", cells=1, area=1.0))
    assert refused.value.code in code.split("|"), refused.value.to_dict()
    assert refused.value.hint and "propose_operation" in refused.value.hint
    assert refused.value.evidence.get("operation") == name
    # Nothing of it stays: not in the catalogue, not in the store, and the workspace is byte for byte as it was.
    assert app.host.contracts.get(name) is None
    assert not (ws / ".mapsmith" / "proposals" / name).exists()
    assert _digests(ws) == before
    assert not (ws / "planted.txt").exists()


def test_the_server_stays_healthy_and_accepts_the_clean_twin(hostile_app: tuple[Any, Path]) -> None:
    """After the whole corpus (this test runs last in the module): an honest proposal passes and runs."""
    app, ws = hostile_app
    report = app.propose_operation(CONTRACT, CODE, examples())
    assert report["status"] == "registered"
    done = app.run("hexagon_grid", {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "h.gpkg"})
    assert done.answer["cell_count"] == CELLS
    described = app.run("describe_dataset", {"input_path": "square.gpkg"})
    assert described.answer  # an ordinary operation still answers


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's loopback that records every connection it receives."""
    seen: list[str] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except OSError:
                continue
            seen.append(str(addr))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join(timeout=2)
    server.close()


def test_the_jail_holds_without_the_witness(listener: tuple[int, list[str]], tmp_path: Path) -> None:
    """Raw code, no audit hook: the host's loopback server is not reachable, names do not resolve, the
    root and /etc are read-only, the workspace is not there, and there is no /proc."""
    from mapsmith.sandbox.jail import JailLimits, jail_python, run_jailed

    port, seen = listener
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "secret.txt").write_text("not for the jail")
    probe = f"""
import json, os, socket, sys
out = {{}}
def attempt(key, fn):
    try:
        fn(); out[key] = "done"
    except OSError as exc:
        out[key] = exc.errno
attempt("loopback", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("dns", lambda: socket.getaddrinfo("example.com", 80))
attempt("etc_passwd", lambda: open("/etc/passwd", "a"))
attempt("root", lambda: open("/planted", "w"))
attempt("workspace", lambda: open({str(workspace / "secret.txt")!r}).read())
out["proc"] = os.path.exists("/proc/1")
out["scratch"] = open("/scratch/ok.txt", "w").write("fine")
print(json.dumps(out))
"""
    scratch = Path(tempfile.mkdtemp(dir=tmp_path))
    run = run_jailed([*jail_python(), "-c", probe], scratch=scratch, inputs={}, stdin=b"", limits=JailLimits())
    import errno
    import json

    out = json.loads(run.stdout)
    assert out["loopback"] in (errno.ECONNREFUSED, errno.ENETUNREACH)
    assert seen == []  # the host's listener never saw the jail
    assert out["dns"] != "done"
    assert out["etc_passwd"] in (errno.EROFS, errno.ENOENT)
    assert out["root"] == errno.EROFS
    assert out["workspace"] == errno.ENOENT
    assert out["proc"] is False
    # Clean twin: the one writable place is the scratch folder, and the write lands on the host's side of it.
    assert out["scratch"] == 4 and (scratch / "ok.txt").read_text() == "fine"


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel never applies RLIMIT_NPROC to real root (SECURITY.md)")
def test_the_process_limit_holds_without_the_witness(tmp_path: Path) -> None:
    from mapsmith.sandbox.jail import JailLimits, jail_python, run_jailed

    probe = """
import os, time
from mapsmith.sandbox.jail import apply_limits
apply_limits(os.environ)
made = 0
try:
    for _ in range(500):
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        made += 1
except OSError:
    pass
print(made)
"""
    run = run_jailed(
        [*jail_python(), "-c", probe], scratch=tmp_path, inputs={}, stdin=b"", limits=JailLimits(processes=32)
    )
    assert int(run.stdout) < 32


def test_the_cpu_limit_holds_without_the_witness(tmp_path: Path) -> None:
    """A busy loop with 2 CPU seconds and two minutes of wall time: the kernel's SIGXCPU ends it."""
    from mapsmith.sandbox.jail import JailLimits, jail_python, run_jailed

    probe = (
        "import os\nfrom mapsmith.sandbox.jail import apply_limits\napply_limits(os.environ)\nwhile True:\n    pass\n"
    )
    limits = JailLimits(timeout_s=120, cpu_limit_s=2)
    run = run_jailed([*jail_python(), "-c", probe], scratch=tmp_path, inputs={}, stdin=b"", limits=limits)
    assert run.signal == "SIGXCPU" and not run.timed_out
