"""The audit hook (PEP 578) inside the jail: the one place that names what sandboxed code tried.

Installed by ``mapsmith.sandbox.child`` in every jailed run, for both callers: ``plugin check`` (mode
``observe``: an installed plugin's code is run as it is, and each network, write, process or native-library
attempt is reported so the check can fail the rule named for it) and ``propose_operation`` (mode
``refuse``: an agent's code gets ``PermissionError`` on the first attempt, reads outside its inputs and
imports of ``REFUSED_MODULES`` included, so the refusal can say what it tried). Every attempt is sent to
the caller at once, one JSON line ``{"attempt": {"kind", "target", "event"}}`` on the result channel, so
code that catches the error cannot hide that it tried.

The hook is a witness, not the wall: code that gets past it (a C extension, an exploit) still meets the
jail (no network namespace, a read-only view, rlimits, a clock). Hand-written because the events to watch
and how to judge a path are MapSmith's policy; the mechanism is ``sys.addaudithook``. This module must
never make a system call while judging an event (that would raise another event inside the hook) and
never drop an attempt it saw before its cap.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Callable
from typing import Any

MAX_ATTEMPTS = 50
# Reaching another machine or a name: an attempt in either mode.
NETWORK_EVENTS = frozenset(
    {
        "socket.connect",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
        "urllib.Request",
        "http.client.connect",
        "ftplib.connect",
        "smtplib.connect",
    }
)
# Preparing to (a socket, a bound port, the host's name): harmless in an installed plugin whose libraries
# may make a socketpair, refused in agent code, which has no reason to.
STRICT_NETWORK_EVENTS = frozenset({"socket.__new__", "socket.bind", "socket.gethostname"})
LOCAL_NAMES = frozenset({None, "localhost", "127.0.0.1", "::1"})
# Matched as prefixes: "os.fork" covers os.forkpty, "os.kill" covers os.killpg, "os.exec" every exec*.
PROCESS_EVENTS = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "pty.spawn",
    "os.kill",
    "os.startfile",
)
# Mutations that do not go through open(), and which of their arguments are paths they change.
MUTATING_EVENTS: dict[str, tuple[int, ...]] = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.rmtree": (0,),
    "os.rename": (0, 1),
    "os.replace": (0, 1),
    "os.symlink": (0, 1),  # a link made in the scratch folder that points out is refused too
    "os.link": (0, 1),
    "shutil.move": (0, 1),
    "shutil.copyfile": (1,),  # reading the source is judged by its open()
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# A module whose import means one of the above is coming (refuse mode only); reported under the same kind.
REFUSED_MODULES = {
    "ctypes": "native",
    "_ctypes": "native",
    "cffi": "native",
    "subprocess": "process",
    "_posixsubprocess": "process",
    "multiprocessing": "process",
    "pty": "process",
    "socket": "network",
    "_socket": "network",
    "ssl": "network",
    "http.client": "network",
    "urllib.request": "network",
    "ftplib": "network",
    "smtplib": "network",
}
MODES = ("observe", "refuse")


def _path(value: Any) -> str | None:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    if not isinstance(value, str):
        return None  # an open descriptor: its open() was judged
    # normpath/join make no system call; getcwd raises no audit event.
    return os.path.normpath(os.path.join(os.getcwd() if not value.startswith("/") else "/", value))


def under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class Witness:
    """What the code tried that the jail forbids, sent as it happens; in ``refuse`` mode also stopped.

    :param writable: the only places a write is not an attempt (the scratch workspace, /tmp, /dev ...).
    :param forbidden: places that are never written (nor, in refuse mode, read) even under a writable
        root: the read-only inputs, or host folders the jail does not show (the workspace, the home).
    :param readable: refuse mode: where reads are allowed; None: reads are not judged (the view is the limit).
    :param software: read-only software trees: readable even inside a forbidden folder (~/.pyenv).
    """

    def __init__(
        self,
        send: Callable[[dict[str, Any]], None],
        *,
        mode: str = "observe",
        writable: tuple[str, ...] = ("/tmp",),
        forbidden: tuple[str, ...] = (),
        readable: tuple[str, ...] | None = None,
        software: tuple[str, ...] = (),
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"witness mode {mode!r} is not one of {MODES}")
        self.send = send
        self.strict = mode == "refuse"
        self.writable = tuple(os.path.normpath(p) for p in writable)
        self.forbidden = tuple(os.path.normpath(p) for p in forbidden if p)
        self.readable = readable
        self.software = software
        self.attempts: list[dict[str, str]] = []
        self.seen: set[tuple[str, str]] = set()
        self.armed = False
        self.busy = False

    @classmethod
    def from_request(cls, send: Callable[[dict[str, Any]], None], policy: dict[str, Any]) -> Witness:
        readable = policy.get("readable")
        return cls(
            send,
            mode=str(policy.get("mode", "observe")),
            writable=tuple(str(p) for p in policy.get("writable") or ("/tmp",)),
            forbidden=tuple(str(p) for p in policy.get("forbidden") or ()),
            readable=tuple(str(p) for p in readable) if readable is not None else None,
            software=tuple(str(p) for p in policy.get("software") or ()),
        )

    def _attempt(self, kind: str, target: str, event: str) -> None:
        key = (kind, target)
        if key not in self.seen and len(self.seen) < MAX_ATTEMPTS:
            self.seen.add(key)
            attempt = {"kind": kind, "target": target[:300], "event": event}
            self.attempts.append(attempt)
            self.send({"attempt": attempt})
        if self.strict:
            raise PermissionError(errno.EPERM, f"refused by the MapSmith sandbox: {event} ({kind})")

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed or self.busy:
            return
        self.busy = True  # sending the attempt writes to a pipe: no judging of our own events
        try:
            self._judge(event, args)
        finally:
            self.busy = False

    def _judge(self, event: str, args: tuple[Any, ...]) -> None:
        if event in NETWORK_EVENTS:
            target = _network_target(event, args)
            if target is not None or self.strict:
                self._attempt("network", target or str(args[0] if args else ""), event)
        elif event in STRICT_NETWORK_EVENTS:
            if self.strict:
                self._attempt("network", repr(args[1:])[:200], event)
        elif event.startswith(PROCESS_EVENTS):
            self._attempt("process", str(args[0] if args else "")[:200], event)
        elif event in ("ctypes.dlopen", "cffi.dlopen"):
            self._attempt("native", str(args[0] if args else "")[:200], event)
        elif event.startswith("ctypes."):
            if self.strict:  # the library's own use of ctypes (uuid, numpy) is no plugin's attempt
                self._attempt("native", repr(args)[:200], event)
        elif event == "import":
            kind = REFUSED_MODULES.get(str(args[0]))
            if kind is not None and self.strict:
                self._attempt(kind, f"import {args[0]}", "import")
        elif event == "open" and args:
            self._open(args)
        elif event in MUTATING_EVENTS:
            for i in MUTATING_EVENTS[event]:
                path = _path(args[i]) if len(args) > i else None
                if path is not None and not self._may_write(path):
                    self._attempt("write", path, event)

    def _may_write(self, path: str) -> bool:
        return under(path, self.writable) and not under(path, self.forbidden)

    def _open(self, args: tuple[Any, ...]) -> None:
        path = _path(args[0])
        if path is None:
            return
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        writes = bool(flags & WRITE_FLAGS) or (isinstance(mode, str) and any(c in mode for c in "wax+"))
        if writes:
            if not self._may_write(path):
                self._attempt("write", path, "open")
        elif self.readable is None or under(path, self.software):
            return
        elif under(path, self.forbidden) or not under(path, self.readable):
            self._attempt("read", path, "open")


def _network_target(event: str, args: tuple[Any, ...]) -> str | None:
    """``host:port`` or the name looked up; None for a lookup of this machine's own names."""
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg") and len(args) >= 2:
        address = args[-1] if event != "socket.connect" else args[1]
        if isinstance(address, tuple) and address:
            return f"{address[0]}:{address[1] if len(address) > 1 else ''}"
        return str(address)[:200]
    if event.startswith("socket.get"):
        host = args[0] if args else None
        return None if host is None or (isinstance(host, str) and host in LOCAL_NAMES) else str(host)[:200]
    return repr(args)[:200]


_CURRENT: list[Witness | None] = [None]


def install(witness: Witness) -> None:
    """Make ``witness`` this process's audit hook (for good: an audit hook cannot be removed)."""
    if _CURRENT[0] is not None:
        raise RuntimeError("a witness is already installed in this process")
    _CURRENT[0] = witness
    sys.addaudithook(witness)


def current() -> Witness | None:
    """The witness installed in this process (a target arms it around the code it runs), or None."""
    return _CURRENT[0]


def channel(fd: int) -> Callable[[dict[str, Any]], None]:
    """A sender of JSON lines on ``fd``; a closed channel (the code closed it) drops quietly: the caller
    then sees no outcome, which is itself a failure."""

    def send(message: dict[str, Any]) -> None:
        data = memoryview((json.dumps(message, default=str) + "\n").encode())
        try:
            while data:
                data = data[os.write(fd, data) :]  # a pipe takes big writes in pieces
        except OSError:
            pass

    return send
