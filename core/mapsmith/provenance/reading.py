"""Read a provenance manifest from disk within limits, and make any reply safe to serialise.

Every place that reads a ``*.provenance.json`` goes through ``load_manifest``: a manifest is data
anyone with write access to the workspace can put there, so it is read as hostile. The file must be
a regular file (a FIFO would block the reader), at most ``MAX_MANIFEST_BYTES``, strict UTF-8, one
JSON object without duplicate keys or NaN/Infinity, nested at most ``MAX_MANIFEST_DEPTH`` deep
(the validator, the lineage walk and the MCP encoder all recurse). Anything else is a
``ManifestUnreadable`` with a stable code, which callers report for that one record and go on.

``json_safe`` turns a reply into values every JSON encoder accepts: a file name with bytes that are
not UTF-8 reaches Python as lone surrogates (``os.fsdecode``), which no UTF-8 encoder can write, so
such characters are shown as backslash escapes (``\\xff``). The result is a label to read, never a
path to open. This module must never raise anything but ``ManifestUnreadable`` for a bad file.

Hand-written because no maintained JSON library bounds nesting depth on input.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from mapsmith.errors import MapSmithError

MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # the largest record MapSmith writes is well under 1 MiB
MAX_MANIFEST_DEPTH = 64  # spec records nest about 8 deep; 64 leaves room for x- fields


class ManifestUnreadable(MapSmithError, ValueError):
    """A provenance manifest cannot be used: not a regular file, too large, too deep, or not one JSON object."""

    code = "MANIFEST_UNREADABLE"


def _refuse(path: Path, reason: str, code: str | None = None, **evidence: Any) -> ManifestUnreadable:
    return ManifestUnreadable(
        f"{display_name(path.name)}: {reason}",
        code=code,
        evidence={"manifest": display_name(path.name), "reason": reason, **evidence},
        hint="this record is skipped; remove or rewrite it (MapSmith writes manifests itself, beside each output)",
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # Two readers could keep different values; neither reading is taken.
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def depth_of(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value, walked without recursion; stops counting past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def load_manifest(path: Path | str, *, max_bytes: int = MAX_MANIFEST_BYTES) -> dict[str, Any]:
    """The JSON object in the manifest at ``path``, or ``ManifestUnreadable`` saying why not."""
    path = Path(path)
    # MapSmith writes manifests as plain files: a symbolic link (which may lead out of the workspace)
    # is never followed, and a file with a second hard link may be an outside file under a workspace name.
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | nofollow)
    except OSError as exc:
        if path.is_symlink():
            raise _refuse(path, "is a symbolic link; manifests are read only as plain files") from exc
        raise _refuse(path, f"cannot be opened ({exc.strerror})") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "is not a regular file")
        if st.st_nlink > 1:
            raise _refuse(path, f"has {st.st_nlink} hard links; manifests are read only as files of their own")
        if st.st_size > max_bytes:
            raise _refuse(path, f"is {st.st_size} bytes, over the {max_bytes}-byte limit", "MANIFEST_TOO_LARGE")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise _refuse(path, f"grew over the {max_bytes}-byte limit while read", "MANIFEST_TOO_LARGE")
    try:
        text = raw.decode("utf-8")
        record = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError as exc:
        raise _refuse(path, "nests deeper than a JSON parser can follow", "MANIFEST_TOO_DEEP") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise _refuse(path, f"is not valid JSON: {exc}") from exc
    if not isinstance(record, dict):
        raise _refuse(path, f"holds a JSON {type(record).__name__}, not an object")
    depth = depth_of(record, MAX_MANIFEST_DEPTH)
    if depth > MAX_MANIFEST_DEPTH:
        raise _refuse(path, f"nests more than {MAX_MANIFEST_DEPTH} levels deep", "MANIFEST_TOO_DEEP")
    return record


def display_name(text: str) -> str:
    """``text`` with every character no UTF-8 encoder accepts written as a backslash escape.

    Surrogates U+DC80..U+DCFF are the undecodable bytes of a file name (``os.fsdecode``) and become
    ``\\xNN``; any other lone surrogate becomes ``\\uNNNN``. Text without them is returned unchanged.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def json_safe(value: Any) -> Any:
    """A copy of ``value`` (dicts, lists, tuples, strings, paths) that any JSON encoder can write as UTF-8."""
    if isinstance(value, str):
        return display_name(value)
    if isinstance(value, os.PathLike):
        return display_name(os.fspath(value) if isinstance(os.fspath(value), str) else os.fsdecode(value))
    if isinstance(value, dict):
        return {display_name(k) if isinstance(k, str) else k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
