"""Workspace confinement: where a path written by a model becomes a path on this machine.

Every path argument of every tool goes through ``Workspace.resolve`` before an engine sees it. With
``MAPSMITH_WORKSPACE`` set, the path must resolve inside that directory once symlinks are followed,
and remote forms (URLs, GDAL ``/vsi*`` file systems) are refused. Some forms are refused everywhere:
UNC hosts, NTFS alternate data streams, Windows device names, control characters, and (on POSIX)
drive letters. With no workspace, local paths may point anywhere. Remote forms are let through only
when ``MAPSMITH_ALLOW_REMOTE=1`` and no workspace is set.

This module must never open, create, list or stat a file. The one filesystem access it needs is
reading symlinks while it resolves (``os.path.realpath`` calls ``lstat`` and ``readlink``), and form
checks run before that, so a refused path is never touched. It never expands ``~`` or environment
variables in a path, and never lets a remote form through while a workspace is set.

What this cannot do: a symlink swapped between ``resolve`` and the engine's ``open`` (a race), and
a hard link inside the workspace to a file outside it, both get past it. A check on path strings
cannot stop either one.
"""

from __future__ import annotations

import errno
import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from mapsmith.errors import ArgumentError, ConfigurationError, PathError

WORKSPACE_ENV = "MAPSMITH_WORKSPACE"
ALLOW_REMOTE_ENV = "MAPSMITH_ALLOW_REMOTE"

_IS_WINDOWS = os.name == "nt"

# GDAL honours a /vsi* prefix after a driver prefix too (``GPKG:/vsis3/...``,
# ``NETCDF:"/vsicurl/..."``), and prefixes can be chained (``/vsizip//vsicurl/...``), so we look for
# one after every separator. Each GDAL release can add handlers, so we match the whole family and
# keep no list. The price is that a local folder called ``vsi<something>`` is refused as well.
_VIRTUAL_FS = re.compile(r"[\\/]vsi[a-z0-9_]*(?=[\\/?]|$)", re.IGNORECASE)
# A scheme needs at least two characters, because ``C:/`` is a drive letter and not a URL. We search
# the whole string because a URL can follow a driver prefix (``NETCDF:"http://..."``).
_URL = re.compile(r"(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]+):/", re.IGNORECASE)
# Two leading separators in any mix of slashes: \\host\share, //host/share, \\?\C:\, \\.\pipe\.
_UNC = re.compile(r"^[\\/]{2}")
_DRIVE_LETTER = re.compile(r"^[a-z]:", re.IGNORECASE)
_SEPARATOR = re.compile(r"[\\/]")
# Linux limits, in bytes of the file system encoding: longer names fail in the kernel with ENAMETOOLONG,
# which would reach the agent as an OSError rather than a refusal.
_NAME_MAX_BYTES = 255
_PATH_MAX_BYTES = 4095

# Windows opens the device and not a file when one of these is the name before the first dot,
# whatever the case and the extension ("nul.tif", "Com1.gpkg"). Superscript digits count as well.
_DEVICE_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{port}{digit}" for port in ("COM", "LPT") for digit in "0123456789\u00b9\u00b2\u00b3"}
)


@dataclass(frozen=True)
class Workspace:
    """The path policy of one server process, read once from the environment.

    ``root`` is the resolved workspace directory, or ``None`` when the server is unconfined.
    ``allow_remote`` lets URLs and ``/vsi*`` paths through, but only when ``root`` is ``None``.
    """

    root: Path | None
    allow_remote: bool

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Workspace:
        """Build the policy from ``MAPSMITH_WORKSPACE`` and ``MAPSMITH_ALLOW_REMOTE``.

        ``environ`` defaults to ``os.environ``. Raises ``ConfigurationError`` with code
        ``WORKSPACE_INVALID`` when the workspace is set but is not an existing directory, and with
        code ``REMOTE_WITH_WORKSPACE`` when both variables are set.
        """
        env = os.environ if environ is None else environ
        allow_remote = _parse_allow_remote(env.get(ALLOW_REMOTE_ENV))
        raw_root = env.get(WORKSPACE_ENV)
        if raw_root is None:
            return cls(root=None, allow_remote=allow_remote)
        root = _resolve_workspace_root(raw_root)
        if allow_remote:
            raise ConfigurationError(
                f"{WORKSPACE_ENV} and {ALLOW_REMOTE_ENV}=1 are both set; a confined server never reads remote data.",
                code="REMOTE_WITH_WORKSPACE",
                evidence={"workspace": raw_root, "allow_remote": env.get(ALLOW_REMOTE_ENV)},
                hint=f"Unset {ALLOW_REMOTE_ENV} to keep the workspace, or unset {WORKSPACE_ENV} "
                "to read remote data without confinement.",
            )
        return cls(root=root, allow_remote=False)

    def resolve(self, path: str, *, argument: str) -> Path | str:
        """Check one path argument and return what the engine may open.

        ``argument`` is the tool parameter's name, so that the error names it. A local path comes
        back as an absolute ``Path`` with symlinks resolved. A relative path is taken against the
        workspace root, or against the current directory when there is no workspace. An allowed
        remote form comes back as the original string, unchanged. Anything else raises
        ``PathError`` with one of the ``PATH_*`` codes.
        """
        if not isinstance(path, str):
            # JSON null or a number reaching here is a bug in the caller's schema. Raise a
            # structured error anyway: an os.path TypeError would reach the agent as a crash.
            raise ArgumentError(
                f"Argument {argument!r} must be a path string, not {type(path).__name__}.",
                evidence={"argument": argument, "path": repr(path)},
                hint=f"Pass {argument!r} as a string path.",
            )
        _check_not_empty(path, argument)
        _check_characters(path, argument)
        remote_code = _remote_form_code(path)
        if remote_code is not None:
            return self._admit_remote(path, argument, remote_code)
        _check_local_form(path, argument)
        return self._confine(path, argument)

    def relative_label(self, path: Path) -> str:
        """How ``path`` is shown in manifests and results. It is a label, never a path to open.

        A path under the workspace is shown relative to the root with ``/`` separators (``.`` for
        the root itself). Any other path is shown in absolute POSIX form. A relative ``path`` is
        taken against the root, or against the current directory, as in ``resolve``.
        """
        base = self.root if self.root is not None else Path.cwd()
        # normpath and not realpath: a label must not touch the filesystem, and callers pass paths
        # that ``resolve`` has already resolved.
        absolute = Path(os.path.normpath(os.path.join(base, path)))
        if self.root is not None and absolute.is_relative_to(self.root):
            return absolute.relative_to(self.root).as_posix()
        return absolute.as_posix()

    def _admit_remote(self, path: str, argument: str, code: str) -> str:
        kind = "GDAL virtual file system path" if code == "PATH_VIRTUAL_FS" else "URL"
        evidence = {"argument": argument, "path": path}
        if self.root is not None:
            if self.allow_remote:
                # from_env refuses this combination. A Workspace built by hand can still have it,
                # and the workspace wins.
                raise PathError(
                    f"Argument {argument!r} is a {kind}, and remote data is never read while a "
                    "workspace is set, even with remote access allowed.",
                    code="PATH_REMOTE_UNDER_WORKSPACE",
                    evidence={**evidence, "workspace_root": str(self.root)},
                    hint=f"Copy the data into the workspace {self.root} and pass its path there.",
                )
            raise PathError(
                f"Argument {argument!r} is a {kind}; only paths inside the workspace are allowed.",
                code=code,
                evidence={**evidence, "workspace_root": str(self.root)},
                hint=f"Copy the data into the workspace {self.root} and pass its path there.",
            )
        if self.allow_remote:
            return path
        raise PathError(
            f"Argument {argument!r} is a {kind}, and this server does not read remote data.",
            code=code,
            evidence=evidence,
            hint="Pass a local file path. The server reads remote data only when it is started "
            f"with {ALLOW_REMOTE_ENV}=1 and without {WORKSPACE_ENV}.",
        )

    def _confine(self, path: str, argument: str) -> Path:
        joined = os.path.join(self.root, path) if self.root is not None else path
        lexical = Path(os.path.normpath(joined))
        through_symlink = self.root is not None and lexical.is_relative_to(self.root)
        # realpath follows symlinks in the parts that exist and normalises the rest, so an output
        # whose parent folder is a symlink out of the workspace resolves to where it would be
        # written. A lexical normpath would follow '..' differently from the OS after a symlink.
        try:
            resolved = Path(os.path.realpath(joined))
        except OSError as exc:  # a link that cannot be read (EACCES on /proc/1/root/...)
            if self.root is not None and not through_symlink:
                self._refuse_outside(path, argument, lexical, through_symlink)
            raise PathError(
                f"Argument {argument!r} cannot be resolved: {exc.strerror}.",
                code="PATH_UNRESOLVABLE",
                evidence={"argument": argument, "path": path, "error": str(exc)},
                hint="Use a plain path inside the workspace.",
            ) from exc
        if self.root is not None and not resolved.is_relative_to(self.root):
            self._refuse_outside(path, argument, resolved, through_symlink)
        _check_resolved(resolved, path, argument)
        return resolved

    def _refuse_outside(self, path: str, argument: str, resolved: Path, through_symlink: bool) -> NoReturn:
        assert self.root is not None
        how = "through a symlink" if through_symlink else "('..' or an absolute path outside it)"
        raise PathError(
            f"Argument {argument!r} resolves to {resolved}, outside the workspace {how}.",
            code="PATH_OUTSIDE_WORKSPACE",
            evidence={
                "argument": argument,
                "path": path,
                "resolved_path": str(resolved),
                "workspace_root": str(self.root),
                "through_symlink": through_symlink,
            },
            hint=f"Use a path inside the workspace {self.root}, for example a path relative to it. "
            "Symlinks that lead out of the workspace are not followed.",
        )


def _check_resolved(resolved: Path, path: str, argument: str) -> None:
    """Names the kernel would refuse, and symlink loops, as refusals rather than OSErrors later on."""
    evidence = {"argument": argument, "path": path}
    encoded = os.fsencode(resolved)
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if len(encoded) > _PATH_MAX_BYTES or longest > _NAME_MAX_BYTES:
        raise PathError(
            f"Argument {argument!r} is too long: {len(encoded)} bytes, the longest name {longest} bytes "
            f"(the limits are {_PATH_MAX_BYTES} and {_NAME_MAX_BYTES}).",
            code="PATH_TOO_LONG",
            evidence={**evidence, "path_bytes": len(encoded), "longest_name_bytes": longest},
            hint=f"Use a shorter path: names up to {_NAME_MAX_BYTES} bytes, the whole path up to {_PATH_MAX_BYTES}.",
        )
    try:
        os.path.realpath(resolved, strict=True)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathError(
                f"Argument {argument!r} goes through a symlink loop.",
                code="PATH_SYMLINK_LOOP",
                evidence=evidence,
                hint="Remove the looping symlink or pass the path of a real file.",
            ) from exc
        # Anything else (most often: the file does not exist yet) is for the caller to report.


def _check_not_empty(path: str, argument: str) -> None:
    # A blank path is refused along with the empty one, because otherwise " " would quietly name
    # a file called " " in the workspace.
    if path.strip() == "":
        raise PathError(
            f"Argument {argument!r} is empty.",
            code="PATH_EMPTY",
            evidence={"argument": argument, "path": path},
            hint=f"Give {argument!r} a file path, for example one relative to the workspace.",
        )


def _check_characters(path: str, argument: str) -> None:
    # Category Cc covers NUL, C0, DEL and C1. A NUL cuts the path short in C engines, and the others
    # make names that nobody can read back or type again.
    for position, character in enumerate(path):
        # Cs: a lone surrogate is valid JSON text ("\\ud800") but names no file: it cannot be encoded.
        if unicodedata.category(character) in ("Cc", "Cs"):
            raise PathError(
                f"Argument {argument!r} contains the control character U+{ord(character):04X} at position {position}.",
                code="PATH_INVALID_CHARACTERS",
                evidence={
                    "argument": argument,
                    "path": path,
                    "position": position,
                    "character": f"U+{ord(character):04X}",
                },
                hint="Remove the control characters (NUL, newline, tab ...) from the path.",
            )


def _remote_form_code(path: str) -> str | None:
    # /vsi* is checked first so that /vsicurl/https://... is reported as the GDAL form it is.
    if _VIRTUAL_FS.search(path):
        return "PATH_VIRTUAL_FS"
    if _URL.search(path):
        return "PATH_URL"
    return None


def _check_local_form(path: str, argument: str) -> None:
    evidence = {"argument": argument, "path": path}
    if _UNC.match(path):
        raise PathError(
            f"Argument {argument!r} is a UNC or device path naming another host or namespace.",
            code="PATH_UNC",
            evidence=evidence,
            hint="Use a path on this machine that starts with a single separator, or a relative path.",
        )
    rest = path
    if _DRIVE_LETTER.match(path):
        if not _IS_WINDOWS:
            raise PathError(
                f"Argument {argument!r} starts with the Windows drive letter {path[:2]!r}, which "
                "has no meaning on this server.",
                code="PATH_DRIVE_LETTER",
                evidence=evidence,
                hint="This server runs on POSIX: use a relative path or a path that starts with /.",
            )
        # The colon after the drive letter is the only one NTFS allows, so the stream check below
        # runs on the rest of the path.
        rest = path[2:]
    for component in _SEPARATOR.split(rest):
        # Windows drops trailing dots and spaces and looks at the name before the first dot (and
        # before a colon: "COM1:" is the device as well).
        stem = component.split(".", 1)[0].split(":", 1)[0].rstrip(" .")
        if stem.upper() in _DEVICE_NAMES:
            raise PathError(
                f"Argument {argument!r} has the component {component!r}, a reserved Windows device name.",
                code="PATH_DEVICE_NAME",
                evidence={**evidence, "component": component},
                hint="Rename the file or folder; CON, PRN, AUX, NUL, COM0-9 and LPT0-9 are not "
                "allowed as names, with or without an extension.",
            )
    if ":" in rest:
        raise PathError(
            f"Argument {argument!r} contains ':' outside a drive letter, which names an NTFS "
            "alternate data stream or a GDAL driver prefix.",
            code="PATH_ALTERNATE_STREAM",
            evidence=evidence,
            hint="Use a plain file path with no ':' in it. To choose a layer or a subdataset, pass "
            "it in its own argument and not inside the path.",
        )


def _parse_allow_remote(value: str | None) -> bool:
    if value in (None, "", "0"):
        return False
    if value == "1":
        return True
    # A value like "true" fails loudly. Read as off, it would leave the operator wondering why
    # remote reads are refused; read as on, it would open remote reads that nobody asked for.
    raise ConfigurationError(
        f"{ALLOW_REMOTE_ENV} must be 1 or 0, not {value!r}.",
        evidence={"allow_remote": value},
        hint=f"Set {ALLOW_REMOTE_ENV}=1 to allow remote data, or unset it.",
    )


def _resolve_workspace_root(raw_root: str) -> Path:
    evidence = {"workspace": raw_root}
    if raw_root == "":
        # Set but empty usually means a shell variable that expanded to nothing. Running unconfined
        # because of that would fail open, so it is an error.
        raise ConfigurationError(
            f"{WORKSPACE_ENV} is set but empty.",
            code="WORKSPACE_INVALID",
            evidence=evidence,
            hint=f"Set {WORKSPACE_ENV} to an existing directory, or unset it to run unconfined.",
        )
    try:
        root = os.path.realpath(raw_root, strict=True)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"{WORKSPACE_ENV} {raw_root!r} cannot be resolved: {exc}.",
            code="WORKSPACE_INVALID",
            evidence={**evidence, "error": str(exc)},
            hint=f"Set {WORKSPACE_ENV} to the absolute path of an existing directory (a leading ~ is not expanded).",
        ) from exc
    if not os.path.isdir(root):
        raise ConfigurationError(
            f"{WORKSPACE_ENV} {raw_root!r} is not a directory.",
            code="WORKSPACE_INVALID",
            evidence={**evidence, "resolved": root},
            hint=f"Set {WORKSPACE_ENV} to a directory, not a file.",
        )
    return Path(root)
