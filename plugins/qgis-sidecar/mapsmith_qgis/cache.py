"""The qgis stack's on-disk cache: what ``qgis_process`` said, kept so a start-up does not ask again.

Three kinds of file, all JSON in one folder (``$MAPSMITH_QGIS_CACHE``, else
``$XDG_CACHE_HOME/mapsmith/qgis``, else ``~/.cache/mapsmith/qgis``):

- ``probe-<exe>.json``: the raw output of ``<exe> --version`` and the executable's size, mtime and
  inode when it was run. Reused only while all three are unchanged (an upgrade replaces the file),
  and re-parsed on every read, so a better parser applies to old probes too.
- ``algorithms-<qgis version>-<exe>.json``: QGIS's own algorithm listing and definitions (slow to
  ask for: one QGIS start), independent of MapSmith's version (``algorithms.load_import``).
- ``catalogue-<qgis version>-<mapsmith version>-<exe>.json``: the MapSmith contracts derived from
  that listing; also keyed by a digest of the deriving code, so a changed ``algorithms.py`` in a
  development checkout rebuilds it (``algorithms.load_catalogue``).

Every file is written atomically (a temporary file renamed into place) and a file that cannot be
read or does not match its key is rebuilt, never trusted. It must never import QGIS, and a cache
that cannot be written only costs time (said once on the ``mapsmith.qgis`` logger), never a failure.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mapsmith.user_cache import user_cache_dir

CACHE_ENV = "MAPSMITH_QGIS_CACHE"
log = logging.getLogger("mapsmith.qgis")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    return user_cache_dir("qgis", CACHE_ENV, environ)


def executable_tag(executable: str) -> str:
    """A short, filename-safe name for one qgis_process (two QGIS installs never share a file)."""
    return hashlib.sha256(os.path.realpath(executable).encode()).hexdigest()[:12]


def safe(text: str) -> str:
    """A version string as a file-name part: ``0.1.0+g1a2b`` stays readable, ``/`` cannot escape."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60] or "unknown"


def fingerprint(executable: str) -> dict[str, Any] | None:
    """What changes when an executable is replaced: its real path, size, mtime and inode."""
    try:
        real = os.path.realpath(executable)
        st = os.stat(real)
    except OSError:
        return None
    return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def read_json(path: Path, expect: dict[str, Any]) -> dict[str, Any] | None:
    """The file's content when it parses and every ``expect`` key has that value, else None."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in expect.items()):
        return None
    return data


def write_json(path: Path, data: dict[str, Any]) -> bool:
    """Write atomically; False (logged) when the folder is not writable: the caller just goes on."""
    from mapsmith.provenance.manifest import write_json_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, data)
    except OSError as exc:
        log.warning("could not write the QGIS cache file %s (the next start asks QGIS again): %s", path, exc)
        return False
    return True


def remove_stale(folder: Path, pattern: str, keep: Path) -> None:
    """Delete the files ``pattern`` matches except ``keep`` (entries for versions no longer installed)."""
    for old in folder.glob(pattern):
        if old != keep:
            try:
                old.unlink()
            except OSError:
                pass
