"""The wire between the server and its engine worker: length-prefixed JSON frames over two pipes.

Each frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Messages:
``{"id", "method", "args"}`` (a request), ``{"id", "progress": [fraction, message]}``,
``{"id", "result"}`` or ``{"id", "error": MapSmithError.to_dict()}``, the worker's first frame
``{"ready": {...}}``, and, once, ``{"warm": {stack: "ready" or why not}}`` when its warm-up is done (no id: it
answers no call). Hand-written because it is twenty lines and every RPC library either wants a
network socket (the worker has none it may use) or pickles, which would let a compromised worker run
code in the server. This module must never unpickle or eval anything it reads.
"""

from __future__ import annotations

import json
import struct
from typing import IO, Any

from mapsmith.errors import MapSmithError

HEADER = struct.Struct(">I")
# A reply bigger than this is a bug or an attack, not an answer: refuse it rather than buffer it.
MAX_FRAME_BYTES = 512 * 1024 * 1024


class ProtocolError(Exception):
    """The other side sent something that is not a frame (or closed the pipe mid-frame)."""


def write_frame(stream: IO[bytes], message: dict[str, Any]) -> None:
    # ensure_ascii keeps names with undecodable bytes (surrogate escapes) serialisable, as the server's replies do.
    body = json.dumps(message, default=str, ensure_ascii=True).encode("ascii")
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: IO[bytes]) -> dict[str, Any]:
    """The next message; EOFError when the pipe closed cleanly between frames."""
    (size,) = HEADER.unpack(_read_exact(stream, HEADER.size))
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    message = json.loads(_read_exact(stream, size))
    if not isinstance(message, dict):
        raise ProtocolError("a frame must hold a JSON object")
    return message


def error_from_dict(data: Any) -> MapSmithError:
    """A MapSmithError with the code, message, hint and evidence the worker sent."""
    if not isinstance(data, dict):
        return MapSmithError("the engine worker sent a malformed error", code="WORKER_PROTOCOL_ERROR")
    evidence = data.get("evidence")
    return MapSmithError(
        str(data.get("message", "")),
        code=str(data.get("code") or "MAPSMITH_ERROR"),
        hint=data.get("hint") if isinstance(data.get("hint"), str) else None,
        evidence=evidence if isinstance(evidence, dict) else None,
    )
