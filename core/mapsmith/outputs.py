"""Where an operation's output goes: the checks on its path, its temporary name, its size, its lock.

The runner computes into a temporary file beside the output and renames it into place; this module
holds the rules around that step. ``output_lock`` serialises the rename and the manifest write of one
output across threads and processes (``fcntl.flock`` on a lock file beside it, removed by its holder),
so a manifest always describes the bytes beside it even when two calls write the same output at
once; when a layer is added to a GeoPackage it covers the whole copy-add-verify-rename of the container
(``mapsmith.run_outputs``), so a layer another call added meanwhile is never lost.
``check_output_size`` refuses an output over ``MAPSMITH_MAX_OUTPUT_BYTES`` before it is
renamed. ``clean_stale_temps`` removes, at start, the temporary files a killed run left behind, and claims the
workspace for the server's life; the last server to leave removes the claim file (``release_workspace_claims``),
and a starting server removes the claim files no server holds, of any workspace (``remove_orphan_claims``).

This module must never follow a symbolic link when it creates a lock file or removes a temporary file,
never remove a file whose name is not one MapSmith's own temporary names take, and never remove the
temporary file of a run that may still be alive (another server on the same workspace).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from mapsmith.contracts import OperationContract
from mapsmith.errors import OutputError
from mapsmith.limits import call_timeout_s, max_output_bytes

if sys.platform == "win32":  # where ArcGIS Pro shops run the server: msvcrt byte-range locks instead of flock
    import msvcrt
else:
    import fcntl

# Not every platform has these flags (Windows has neither); where missing, the checks above still apply.
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _try_lock(fd: int, *, shared: bool = False) -> bool:
    """Take the lock on ``fd`` without waiting: True when taken. Shared locks exist only with flock."""
    if sys.platform == "win32":
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


NAME_MAX_BYTES = 255  # one file name, on the file systems MapSmith runs on
# Bytes an output's name must leave for the names written beside it: ".<stem>.tmp-<8 hex><suffix>"
# (14 more) and "<name>.failed.<n>.provenance.json" (26 more for n < 100).
OUTPUT_NAME_ROOM = 32
# A written dataset is never a shapefile: the format truncates field names to 10 characters and
# splits one dataset over several files, which breaks atomic replacement.
REFUSED_OUTPUT_FORMATS = {
    ".shp": "shapefile output truncates field names to 10 characters and spreads one "
    "dataset over several files; write .gpkg (or .parquet / .fgb) instead"
}
# The lock is held across a rename and a manifest write (milliseconds), or the copy of a GeoPackage and
# one added layer (seconds for hundreds of megabytes): a minute is plenty for either.
LOCK_WAIT_S = 60.0
# The temporary names MapSmith gives: ".<stem>.tmp-<8 hex><suffix>" for a dataset (and its repair rounds
# ".<stem>.tmp-<hex>.repair<n><suffix>", and the -journal/-wal/-shm/.aux.xml GDAL may put beside one), and
# ".<name>.<8 chars>.tmp" for a manifest written by write_json_atomic (tempfile.mkstemp's pattern).
_DATASET_TEMP = re.compile(
    r"\..+\.tmp-[0-9a-f]{8}(\.repair[0-9]+)?(\.[A-Za-z0-9]+)?(-journal|-wal|-shm|\.aux\.xml|\.ovr|\.msk)?"
)
_RECORD_TEMP = re.compile(r"\..+\.provenance\.json\.[a-z0-9_]{8}\.tmp")
# The claim a running server holds on its workspace (shared); kept open for the process's life.
_workspace_claim: dict[str, int] = {}
_CLAIM_NAME = re.compile(r"mapsmith-claim-[0-9a-f]{24}\.lock")


def workspace_claim_path(root: Path) -> Path:
    """The claim file of a workspace: ``mapsmith-claim-<sha256 of its resolved path>.lock`` in the system
    temporary folder, the same name for every server started on that workspace."""
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.fsencode(root.resolve())).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"mapsmith-claim-{digest}.lock"


def temp_path_for(output: Path) -> Path:
    """The temporary name an engine writes, in the output's own folder so the rename is atomic."""
    return output.with_name(f".{output.stem}.tmp-{uuid.uuid4().hex[:8]}{output.suffix}")


def lock_path_for(output: Path) -> Path:
    return output.with_name(f".{output.name}.lock")


@contextlib.contextmanager
def output_lock(output: Path, *, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the exclusive lock of ``output`` (threads and processes alike) for the ``with`` body.

    Each call opens the lock file anew: flock locks belong to an open file description, so two
    threads of one process exclude each other as two processes do. The holder removes the lock file
    before releasing it, so none is left in the workspace; a waiter that then gets the lock on the
    removed file sees that the name no longer leads to the file it locked, and starts again.
    """
    lock = lock_path_for(output)
    deadline = time.monotonic() + wait_s
    while True:
        fd = _open_lock(lock)
        try:
            while not _try_lock(fd):
                if time.monotonic() > deadline:
                    raise OutputError(
                        f"{output.name} is being written by another call and stayed locked for {wait_s:g} s",
                        code="OUTPUT_LOCKED",
                        evidence={"lock": lock.name, "waited_s": wait_s},
                        hint="wait for the other call to finish, or write to another output_path",
                    ) from None
                time.sleep(0.005)
            same = _names(lock, fd)
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)  # the previous holder removed this file after we opened it: lock the new one
    try:
        yield
    finally:
        try:
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)  # closing the last descriptor releases the lock


def _open_lock(lock: Path) -> int:
    try:
        return os.open(lock, _OPEN_FLAGS, 0o600)
    except OSError as exc:
        raise OutputError(
            f"cannot open the lock file beside {lock.name[1:-5]}: {exc.strerror}",
            code="OUTPUT_LOCK_FAILED",
            evidence={"lock": lock.name, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno))},
            hint=f"remove {lock.name} if it is a symbolic link or a folder, or write to another output_path",
        ) from exc


def path_bytes(path: Path) -> int:
    """Bytes a written output takes: a file's size, or the sum over a folder's files (links not followed)."""
    st = path.lstat()
    if not path.is_dir() or path.is_symlink():
        return st.st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_size
    return total


def check_output_size(temp: Path, given: str, environ: Mapping[str, str]) -> int:
    """Refuse an output larger than ``MAPSMITH_MAX_OUTPUT_BYTES``; the caller removes ``temp``."""
    limit = max_output_bytes(environ)
    size = path_bytes(temp)
    if size > limit:
        raise OutputError(
            f"{given}: the engine wrote {size} bytes, more than the {limit} bytes one output may take",
            code="OUTPUT_TOO_LARGE",
            evidence={"path": given, "bytes": size, "limit_bytes": limit, "variable": "MAPSMITH_MAX_OUTPUT_BYTES"},
            hint="work on a smaller extent or fewer features (clip_layer, select_features), or raise "
            "MAPSMITH_MAX_OUTPUT_BYTES; nothing was written at output_path",
        )
    return size


def is_stale_temp_name(name: str) -> bool:
    """Whether ``name`` is one of the temporary names MapSmith gives (and so may be removed at start)."""
    return bool(_DATASET_TEMP.fullmatch(name) or _RECORD_TEMP.fullmatch(name))


def clean_stale_temps(workspace_root: Path | str, environ: Mapping[str, str] | None = None) -> list[str]:
    """Remove the temporary files a killed run left in the workspace; return them, relative to the root.

    Called once when a server starts. The server then holds a shared lock for its whole life on a
    claim file named after the workspace, in the system temporary folder (``workspace_claim_path``):
    not in the workspace, which holds only what the analyst's calls wrote. When this call can take that
    lock exclusively, no other server is using the workspace and every MapSmith temporary name is
    stale; when it cannot, another server is alive and only temporary files older than twice the call
    time limit are removed (no run of that server can still be writing them). Symbolic links are
    removed as links, never followed.
    """
    root = Path(workspace_root)
    env = os.environ if environ is None else environ
    key = os.fspath(root.resolve())
    fd = _workspace_claim.get(key)
    claim = workspace_claim_path(root)
    alone = False
    if fd is None:
        try:
            fd, alone = _open_claim(claim)
        except OSError:
            fd = None  # another user's claim file (or none can be made): assume another server is alive
    oldest = time.time() - 2 * call_timeout_s(env)
    removed: list[str] = []
    try:
        for folder, dirs, files in os.walk(root):
            for name in [*files, *dirs]:
                if not is_stale_temp_name(name):
                    continue
                path = Path(folder, name)
                try:
                    st = path.lstat()
                    if not alone and st.st_mtime > oldest:
                        continue
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path)
                        dirs.remove(name)
                    else:
                        path.unlink()
                except (FileNotFoundError, ValueError):
                    continue  # gone meanwhile
                removed.append(path.relative_to(root).as_posix())
    finally:
        # Downgrade (or take) the shared claim: later starts see this server as alive.
        if fd is not None:
            if sys.platform != "win32":
                fd = _hold_shared(claim, fd)
            if not _workspace_claim:
                atexit.register(release_workspace_claims)
            _workspace_claim[key] = fd
        remove_orphan_claims(claim.parent)
    return sorted(removed)


def remove_orphan_claims(folder: Path) -> list[str]:
    """Remove the claim files in ``folder`` (the system temporary folder) that no server holds: left by a server
    that was killed, or by a version that never removed them. Each is removed only with its exclusive lock taken and
    while its name still leads to it, as the last server to leave removes its own (``release_workspace_claims``); a
    server starting on that workspace meanwhile opens the name again (``_open_claim``, ``_hold_shared``). Another
    user's files, and every file on Windows, are left alone. Returns the names removed."""
    if sys.platform == "win32":
        return []
    removed: list[str] = []
    try:
        names = [e.name for e in os.scandir(folder) if _CLAIM_NAME.fullmatch(e.name)]
    except OSError:
        return removed
    uid = os.getuid()
    for name in names:
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue  # gone meanwhile, a link, or not ours to read
        try:
            if os.fstat(fd).st_uid == uid and _unlink_unheld(path, fd):
                removed.append(name)
        except OSError:
            pass  # left for the next start
        finally:
            os.close(fd)
    return removed


def _unlink_unheld(path: Path, fd: int) -> bool:
    """Remove the claim ``path``, open as ``fd``, when no server holds it (its exclusive lock taken) and the name still
    leads to it; whether it was removed. The one removal rule of the last leaver and of the sweep at start."""
    if sys.platform == "win32" or not _try_lock(fd) or not _names(path, fd):
        return False
    path.unlink()
    return True


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (its holder, or a leaving server, may have removed it
    meanwhile): ``output_lock`` and the workspace claim both ask before trusting a lock they took."""
    held = os.fstat(fd)
    try:
        current = os.lstat(path)
    except FileNotFoundError:
        return False
    return (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)


def _open_claim(path: Path) -> tuple[int, bool]:
    """The workspace's claim file, open, and whether its exclusive lock was taken (no other server holds it).
    A file a leaving server removed between the open and the lock is closed and the name opened again."""
    while True:
        fd = os.open(path, _OPEN_FLAGS, 0o600)
        alone = _try_lock(fd)
        if sys.platform == "win32" or _names(path, fd):
            return fd, alone
        os.close(fd)


def _hold_shared(path: Path, fd: int) -> int:
    """Hold the claim shared (downgraded, or waited for while a leaving server removes the file), on the file the
    name leads to: a server holding a removed file would be invisible to the next one."""
    while True:
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _names(path, fd):
            return fd
        os.close(fd)
        fd = os.open(path, _OPEN_FLAGS, 0o600)


def release_workspace_claims() -> None:
    """Let go of this process's workspace claims, at exit: a claim no other server holds (its exclusive lock taken)
    has its file removed first, so the system temporary folder does not keep one file per workspace ever served.
    A server starting meanwhile either locks the removed file and opens the name again (``_open_claim``) or
    creates a new one; a server still holding the claim keeps its file. Safe to call twice."""
    while _workspace_claim:
        key, fd = _workspace_claim.popitem()
        try:
            _unlink_unheld(workspace_claim_path(Path(key)), fd)
        except OSError:
            pass  # the file stays; the next server reuses it
        finally:
            os.close(fd)


def raster_sidecars(path: Path) -> list[Path]:
    return [path.with_name(path.name + ".aux.xml"), path.with_suffix(".tfw"), path.with_name(path.name + ".ovr")]


INTERNAL_FOLDER = ".mapsmith"  # the workspace's own records: promotions, proposed operations' sources


def refuse_internal_folder(root: Path | str | None, output: Path, given: str) -> None:
    """Refuse an output inside ``<workspace>/.mapsmith``: MapSmith's promotions file and the stored sources of
    proposed operations live there, and an operation's output must never replace or add to them."""
    if root is None:
        return
    try:
        relative = output.resolve().relative_to(Path(root).resolve())
    except ValueError:
        return
    if relative.parts and relative.parts[0] == INTERNAL_FOLDER:
        raise OutputError(
            f"{given}: {INTERNAL_FOLDER}/ holds MapSmith's own records (promotions, proposed operations), "
            "never an operation's output",
            code="OUTPUT_IN_INTERNAL_FOLDER",
            evidence={"path": given, "folder": INTERNAL_FOLDER},
            hint=f"write the output anywhere else in the workspace (a path not under {INTERNAL_FOLDER}/)",
        )


def check_output_path(
    contract: OperationContract | Any,
    output: Path,
    inputs: dict[str, Path],
    overwrite: bool,
    given: str,
) -> None:
    """Refuse an output path before anything runs: format, sidecars, an input, name length, folder, existing."""
    suffix = output.suffix.lower()
    if suffix in REFUSED_OUTPUT_FORMATS:
        raise OutputError(
            f"{given}: {REFUSED_OUTPUT_FORMATS[suffix]}",
            code="OUTPUT_FORMAT_REFUSED",
            evidence={"path": given, "format": suffix},
            hint="choose an output ending in " + ", ".join(contract.output_formats),
        )
    # ".geoparquet" names the same format as ".parquet" (GeoParquet is Parquet): accepted wherever it is.
    accepted = set(contract.output_formats) | ({".geoparquet"} if ".parquet" in contract.output_formats else set())
    if contract.output_formats and suffix not in accepted:
        raise OutputError(
            f"{given}: {contract.name} writes {', '.join(contract.output_formats)}, not {suffix or '(no extension)'}",
            code="OUTPUT_FORMAT_UNSUPPORTED",
            evidence={"path": given, "format": suffix},
            hint="choose an output ending in " + ", ".join(contract.output_formats),
        )
    if contract.output_kind == "dataset:raster":
        # A sidecar left beside the output path would override the new file's georeferencing
        # (GDAL reads .aux.xml before the GeoTIFF's own tags): never let it, never delete it silently.
        stale = [p.name for p in raster_sidecars(output) if p.exists()]
        if stale:
            raise OutputError(
                f"{given}: {', '.join(stale)} beside it would override the new raster's georeferencing",
                code="OUTPUT_SIDECAR_EXISTS",
                evidence={"path": given, "sidecars": stale},
                hint="remove the sidecar file(s) first, or write to a new output_path",
            )
    for name, path in inputs.items():
        if path.resolve() == output.resolve():
            raise OutputError(
                f"output_path is the same file as {name}; an input is never overwritten",
                code="OUTPUT_IS_INPUT",
                evidence={"path": given, "argument": name},
                hint="write to a new path",
            )
    name_bytes = len(os.fsencode(output.name))
    if name_bytes > NAME_MAX_BYTES - OUTPUT_NAME_ROOM:
        # The temporary file and the records beside the output take longer names than the output.
        raise OutputError(
            f"{given}: the file name is {name_bytes} bytes; names beside it (its temporary file, its "
            f"manifest) would pass the file system's {NAME_MAX_BYTES}-byte limit",
            code="PATH_TOO_LONG",
            evidence={"path": given, "name_bytes": name_bytes, "limit": NAME_MAX_BYTES - OUTPUT_NAME_ROOM},
            hint=f"use an output file name of at most {NAME_MAX_BYTES - OUTPUT_NAME_ROOM} bytes",
        )
    if output.is_dir():
        # Never a dataset to replace: the temporary file would be written beside it, and for the
        # workspace root itself that is outside the workspace.
        raise OutputError(
            f"{given} is a directory",
            code="OUTPUT_IS_DIRECTORY",
            evidence={"path": given},
            hint="write to a file path inside the workspace, for example 'result.gpkg'",
        )
    if not output.parent.is_dir():
        raise OutputError(
            "the folder of output_path does not exist",
            code="OUTPUT_FOLDER_MISSING",
            evidence={"path": given},
            hint="write into an existing folder",
        )
    check_not_existing(output, overwrite, given)


def check_not_existing(output: Path, overwrite: bool, given: str) -> None:
    """OUTPUT_EXISTS unless overwriting; checked again under the output's lock, just before the rename."""
    if output.exists() and not overwrite:
        raise OutputError(
            f"{given} exists already",
            code="OUTPUT_EXISTS",
            evidence={"path": given},
            hint="choose a new output_path, or pass overwrite=true to replace it (its manifest is replaced too)",
        )


def commit_error(exc: OSError, given: str) -> OutputError:
    """The rename into place failed (the path became a folder meanwhile, the disk is full ...)."""
    if isinstance(exc, IsADirectoryError):
        return OutputError(
            f"{given} became a directory while the operation ran; nothing was written there",
            code="OUTPUT_IS_DIRECTORY",
            evidence={"path": given},
            hint="write to a file path inside the workspace that no folder occupies",
        )
    return OutputError(
        f"{given}: the finished output could not be moved into place ({exc.strerror or type(exc).__name__})",
        code="OUTPUT_WRITE_FAILED",
        evidence={"path": given, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno))},
        hint="check that the folder of output_path is writable and the disk has room, then run again",
    )
