"""Fixtures of the hostile path corpus (``path_*``, for test_hostile_paths*.py): a workspace with bait
beside it, and the instruments that see escapes.

The arena is ``<tmp>/ws`` (the workspace) beside ``<tmp>/bait`` (real datasets an escaped path would
reach). Symlinks out of the workspace are made at run time, as the corpus lists them. Three
instruments watch: a snapshot of everything outside the workspace in the arena, a loopback HTTP
server that counts requests, and a Python audit hook that records file and socket events outside
the allowed locations. None of them ever lets a call through: they only observe.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import box

CORPUS_FILE = Path(__file__).resolve().parents[1] / "data" / "hostile_paths.json"
_REPEAT = re.compile(r"\{REPEAT:(.*?):(\d+)\}", re.DOTALL)


def load_corpus() -> dict[str, Any]:
    return json.loads(CORPUS_FILE.read_text("utf-8"))


# -- the loopback server ---------------------------------------------------------------------


class _CountingHandler(BaseHTTPRequestHandler):
    def _count(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")  # type: ignore[attr-defined]
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = _count

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class LoopbackCounter:
    """A loopback HTTP server that answers 404 to everything and remembers every request."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
        self.server.requests = []  # type: ignore[attr-defined]
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def requests(self) -> list[str]:
        return list(self.server.requests)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- the audit hook ----------------------------------------------------------------------------

# Events that name a path MapSmith would read, write, list or delete, and events that reach the network.
_PATH_EVENTS = frozenset(
    {
        "open",
        "os.listdir",
        "os.scandir",
        "os.mkdir",
        "os.remove",
        "os.rmdir",
        "os.rename",
        "os.symlink",
        "os.link",
        "os.truncate",
        "os.utime",
        "os.chmod",
        "os.chown",
        "os.chdir",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "shutil.copytree",
        "shutil.rmtree",
        "shutil.move",
        "shutil.make_archive",
        "shutil.unpack_archive",
        "sqlite3.connect",
        "glob.glob",
        "tempfile.mkstemp",
        "tempfile.mkdtemp",
    }
)
# Events whose second argument is a path too (the first's is a mode, flags or a function).
_TWO_PATH_EVENTS = frozenset(
    {"os.rename", "os.symlink", "os.link", "shutil.copyfile", "shutil.copytree", "shutil.move"}
)
_NETWORK_EVENTS = frozenset(
    {"socket.connect", "socket.getaddrinfo", "socket.sendto", "urllib.Request", "ftplib.connect"}
)
_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork"})


@dataclass
class AuditRecorder:
    """Records, while active, every path event outside ``allowed`` and every network or process event.

    ``allowed`` is the workspace plus where Python and MapSmith's own code live (imports open their
    files). Paths are compared after ``realpath``, so an open through a symlink is judged by where it lands.
    """

    allowed: tuple[str, ...] = ()
    active: bool = False
    events: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event in _NETWORK_EVENTS or event in _PROCESS_EVENTS:
            self.events.append((event, repr(args)[:200]))
            return
        if event not in _PATH_EVENTS:
            return
        if event in ("os.remove", "os.rmdir") and len(args) > 1 and isinstance(args[1], int):
            return  # a name relative to a directory descriptor (shutil.rmtree), judged when that was opened
        for arg in args[: 2 if event in _TWO_PATH_EVENTS else 1]:
            if isinstance(arg, (str, bytes, os.PathLike)):
                self._judge(event, arg)

    def _judge(self, event: str, arg: Any) -> None:
        # Never raise from a hook: a refused path can be undecodable or too long to resolve.
        try:
            path = os.fsdecode(arg)
            if event == "sqlite3.connect" and path.startswith("file:"):
                path = path[len("file:") :].split("?", 1)[0]  # a URI filename (GDAL's GeoPackage reads)
            real = os.path.realpath(os.path.abspath(path))
        except (ValueError, OSError, UnicodeError):
            self.events.append((event, repr(arg)[:200]))
            return
        if not any(real == root or real.startswith(root + os.sep) for root in self.allowed):
            if not real.startswith(_SCRATCH_PREFIXES):
                self.events.append((event, real[:300]))


# The scratch folders SECURITY.md lists in the system temporary folder, each created fresh and removed
# after use: run_sql's private DuckDB folders, replay's scratch workspace, zonal and repair scratch.
# They are the one place outside the workspace MapSmith writes; only these name prefixes pass.
_SCRATCH_PREFIXES = tuple(
    os.path.join(os.path.realpath(tempfile.gettempdir()), prefix)
    for prefix in ("mapsmith-duckdb-tmp-", "mapsmith-duckdb-ext-", "mapsmith-replay-", "mapsmith-zonal-")
    + ("mapsmith-repair-",)
)


_RECORDER = AuditRecorder()


def _install_hook() -> AuditRecorder:
    # An audit hook cannot be removed; one inert recorder per process, switched on by the tests.
    if not getattr(sys, "_mapsmith_hostile_hook", False):
        sys.addaudithook(_RECORDER)
        sys._mapsmith_hostile_hook = True  # type: ignore[attr-defined]
    return _RECORDER


def code_locations() -> tuple[str, ...]:
    """Where Python, the venv and MapSmith's code live: imports and contract files (and their cache) are read
    from here."""
    import mapsmith
    import mapsmith_opensource

    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr/lib", "/usr/share/zoneinfo", "/usr/share/proj"}
    places.add(str(Path(mapsmith.__file__).resolve().parent))
    places.add(str(Path(mapsmith_opensource.__file__).resolve().parent))
    from mapsmith.contracts import contracts_root

    places.add(str(Path(str(contracts_root())).resolve()))
    # ... and MapSmith's cache of those contracts, validated (mapsmith.contract_cache): a host built during a
    # call (replay's scratch service) reads it as it reads the contract files.
    from mapsmith.contract_cache import cache_dir

    places.add(str(cache_dir()))
    return tuple(sorted(os.path.realpath(p) for p in places))


# -- the arena ---------------------------------------------------------------------------------


@dataclass
class Arena:
    root: Path
    ws: Path
    bait: Path
    http: LoopbackCounter
    symlinks: list[tuple[str, str]]

    def expand(self, text: str) -> str:
        text = _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), text)
        return (
            text.replace("{WS}", str(self.ws)).replace("{BAIT}", str(self.bait)).replace("{PORT}", str(self.http.port))
        )

    def outside_snapshot(self) -> dict[str, tuple[Any, ...]]:
        """Every entry of the arena outside the workspace: name, type, size, mtime and sha256 of files."""
        out: dict[str, tuple[Any, ...]] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = Path(dirpath)
            if here == self.ws:
                dirnames[:] = []
                continue
            for name in dirnames + filenames:
                path = here / name
                if path == self.ws:
                    continue
                st = path.lstat()
                digest = (
                    hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
                )
                out[str(path.relative_to(self.root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
        return out


def _write_bait(bait: Path) -> None:
    from catalog_args import SAMPLE_FIELDS, sample_dem
    from layers import write_layer

    (bait / "sub").mkdir(parents=True)
    polygons = [box(500_000, 5_000_000, 500_100, 5_000_100), box(500_050, 5_000_050, 500_150, 5_000_150)]
    write_layer(bait / "secret.gpkg", polygons, "EPSG:32610", layer="secret", **SAMPLE_FIELDS)
    shutil.copy(bait / "secret.gpkg", bait / "sub" / "deeper.gpkg")
    sample_dem(bait / "dem.tif")
    (bait / "passwd").write_text("root:x:0:0:bait:/root:/bin/sh\n")
    with zipfile.ZipFile(bait / "arch.zip", "w") as archive:
        archive.write(bait / "secret.gpkg", "secret.gpkg")
    (bait / "secret.gpkg.gz").write_bytes(gzip.compress((bait / "secret.gpkg").read_bytes()))


def build_arena(root: Path, corpus: dict[str, Any], http: LoopbackCounter) -> Arena:
    ws, bait = root / "ws", root / "bait"
    (ws / "sub").mkdir(parents=True)
    _write_bait(bait)
    arena = Arena(root=root.resolve(), ws=ws.resolve(), bait=bait.resolve(), http=http, symlinks=[])
    for link, target in corpus["symlinks"]:
        (arena.ws / link).symlink_to(arena.expand(target))
        arena.symlinks.append((link, arena.expand(target)))
    return arena


@pytest.fixture(scope="module")
def path_corpus() -> dict[str, Any]:
    return load_corpus()


@pytest.fixture(scope="module")
def path_loopback() -> Iterator[LoopbackCounter]:
    server = LoopbackCounter()
    yield server
    server.close()


@pytest.fixture(scope="module")
def path_arena(
    tmp_path_factory: pytest.TempPathFactory, path_corpus: dict[str, Any], path_loopback: LoopbackCounter
) -> Arena:
    return build_arena(tmp_path_factory.mktemp("hostile"), path_corpus, path_loopback)


@pytest.fixture(scope="module")
def path_arena_factory(path_corpus: dict[str, Any], path_loopback: LoopbackCounter) -> Any:
    """Build another arena under a given folder (for a child process that must not see the setup)."""
    return lambda root: build_arena(root, path_corpus, path_loopback)


@pytest.fixture(scope="module")
def path_audit(path_arena: Arena) -> Iterator[AuditRecorder]:
    recorder = _install_hook()
    recorder.allowed = (str(path_arena.ws), *code_locations())
    recorder.events = []
    # The "open" audit event does not say when its path is relative to a directory descriptor
    # (shutil.rmtree opens entries that way), so relative names are judged against the workspace:
    # a relative escape ("../bait/x") still lands outside it and is recorded.
    cwd = os.getcwd()
    os.chdir(path_arena.ws)
    try:
        yield recorder
    finally:
        os.chdir(cwd)
        recorder.active = False
        recorder.allowed = ()
