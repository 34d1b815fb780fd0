"""Workspace confinement: where a path written by a model becomes a path on this machine.

Every path argument of every tool goes through ``Workspace.resolve`` before an engine sees it. With
``MAPSMITH_WORKSPACE`` set, the path must resolve inside that directory once symlinks are followed,
and remote forms (URLs, GDAL ``/vsi*`` file systems) are refused. Some forms are refused everywhere:
UNC hosts (except, with ``MAPSMITH_ALLOW_UNC=1``, paths inside a workspace that is itself on that
Windows share), NTFS alternate data streams, Windows device names, control characters, and (on
POSIX) drive letters. With no workspace, local paths may point anywhere. Remote forms are let through only
when ``MAPSMITH_ALLOW_REMOTE=1`` and no workspace is set.

This module must never open, create or list a file. The filesystem access it needs is reading
symlinks while it resolves (``os.path.realpath`` calls ``lstat`` and ``readlink``) and, in
``check_sidecar``, ``lstat``/``stat`` of a file an engine opens beside an input; form checks run
before either, so a refused path is never touched. It never expands ``~`` or environment
variables in a path, and never lets a remote form through while a workspace is set.

What this cannot do: a symlink swapped between ``resolve`` and the engine's ``open`` (a race) gets
past it; a check on paths cannot stop that (the engine sandbox does). A hard link cannot be told
apart from its outside twin, so ``check_sidecar`` refuses every file with more than one link.
"""

from __future__ import annotations

import errno
import ntpath
import os
import re
import stat
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from mapsmith.errors import ArgumentError, ConfigurationError, PathError

WORKSPACE_ENV = "MAPSMITH_WORKSPACE"
ALLOW_REMOTE_ENV = "MAPSMITH_ALLOW_REMOTE"
ALLOW_UNC_ENV = "MAPSMITH_ALLOW_UNC"

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
# A network share: server and share names, neither "?" nor "." (those are Win32 device namespaces).
_UNC_SHARE = re.compile(r"^[\\/]{2}(?P<server>[^\\/?.][^\\/]*)[\\/](?P<share>[^\\/]+)(?P<rest>(?:[\\/].*)?)$")
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
    ``allow_unc`` lets UNC paths (``\\\\server\\share\\...``) through, but only inside a ``root`` that is
    itself on that share (``MAPSMITH_ALLOW_UNC=1``, where ArcGIS shops keep their data).
    """

    root: Path | None
    allow_remote: bool
    allow_unc: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Workspace:
        """Build the policy from ``MAPSMITH_WORKSPACE`` and ``MAPSMITH_ALLOW_REMOTE``.

        ``environ`` defaults to ``os.environ``. Raises ``ConfigurationError`` with code
        ``WORKSPACE_INVALID`` when the workspace is set but is not an existing directory, and with
        code ``REMOTE_WITH_WORKSPACE`` when both variables are set.
        """
        env = os.environ if environ is None else environ
        allow_remote = _parse_allow_remote(env.get(ALLOW_REMOTE_ENV))
        allow_unc = _parse_flag(env.get(ALLOW_UNC_ENV), ALLOW_UNC_ENV, "UNC paths inside a UNC workspace")
        raw_root = env.get(WORKSPACE_ENV)
        if raw_root is None:
            return cls(root=None, allow_remote=allow_remote)
        if _UNC.match(raw_root):
            root = _resolve_unc_root(raw_root, allow_unc)
        else:
            root = _resolve_workspace_root(raw_root)
            allow_unc = False  # UNC paths only ever inside a workspace that is itself a UNC path
        if allow_remote:
            raise ConfigurationError(
                f"{WORKSPACE_ENV} and {ALLOW_REMOTE_ENV}=1 are both set; a confined server never reads remote data.",
                code="REMOTE_WITH_WORKSPACE",
                evidence={"workspace": raw_root, "allow_remote": env.get(ALLOW_REMOTE_ENV)},
                hint=f"Unset {ALLOW_REMOTE_ENV} to keep the workspace, or unset {WORKSPACE_ENV} "
                "to read remote data without confinement.",
            )
        return cls(root=root, allow_remote=False, allow_unc=allow_unc)

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
        unc_root = self.allow_unc and self.root is not None and unc_share(str(self.root)) is not None
        if unc_root and _UNC.match(path):
            _check_local_form(path, argument, unc=True)
            return self._confine_unc(path, argument, path)
        _check_local_form(path, argument)
        if unc_root and not os.path.isabs(path):
            # Relative to a share root: joined as Windows joins, never through POSIX realpath ("//" -> "/").
            return self._confine_unc(path, argument, ntpath.join(str(self.root), path))
        return self._confine(path, argument)

    def _confine_unc(self, path: str, argument: str, unc_path: str) -> Path:
        """A UNC path under a UNC workspace: same server and share (case-blind, as SMB compares them)
        and, with ``..`` taken lexically as Windows does, inside the root; on Windows, symlinks on the
        share are then followed and the result checked again."""
        assert self.root is not None
        if unc_share(unc_path) is None:
            raise PathError(
                f"Argument {argument!r} is a UNC device path, not a network share path.",
                code="PATH_UNC",
                evidence={"argument": argument, "path": path},
                hint=f"Use a path on the workspace's share, {self.root}, or a path relative to it.",
            )
        candidate = unc_normalise(unc_path)
        if not unc_within(str(self.root), candidate):
            raise PathError(
                f"Argument {argument!r} is a UNC path outside the workspace share folder {self.root}.",
                code="PATH_OUTSIDE_WORKSPACE",
                evidence={
                    "argument": argument,
                    "path": path,
                    "workspace_root": str(self.root),
                    "through_symlink": False,
                },
                hint=f"Use a path inside {self.root}, for example a path relative to it.",
            )
        if _IS_WINDOWS:  # pragma: no cover - this test machine is POSIX
            return self._confine(candidate, argument)
        # On POSIX a UNC root only exists in tests of this logic: nothing to resolve on disk.
        return Path(candidate.replace("\\", "/"))

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

    def check_sidecar(self, path: Path, *, argument: str, member_of: str | None = None) -> None:
        """Refuse a file an engine would open beside an input (or the input itself) that leads outside.

        ``path`` is a file in a directory the workspace already admitted: a sidecar GDAL opens
        (``.ovr``, ``.aux.xml``, ``.prj``, ``.dbf`` ...), a ``*.provenance.json`` MapSmith reads, or the
        input itself. It is judged by ``lstat`` and ``realpath`` only, never opened. Refused:

        - a symlink (or a path through one) resolving outside the workspace: ``SIDECAR_OUTSIDE_WORKSPACE``;
        - a regular file with more than one hard link: ``PATH_HARD_LINK``. A hard link is the same file
          under a second name, and nothing on this side tells whether the other name lies outside the
          workspace (``/etc/shadow`` linked in on the same file system), so every one is refused.
          MapSmith never makes hard links; copy the file instead;
        - a FIFO, socket or device (a FIFO blocks the engine for ever): ``PATH_NOT_REGULAR_FILE``.

        A missing file passes (there is nothing to open) and so does a directory inside the workspace.
        Without a workspace nothing is checked. ``member_of`` names the input a sidecar belongs to.
        """
        if self.root is None:
            return
        evidence: dict[str, object] = {"argument": argument, "file": path.name}
        if member_of is not None:
            evidence["member_of"] = member_of
        what = f"{path.name} (beside {member_of})" if member_of else path.name
        try:
            info = os.lstat(path)
        except OSError:
            return
        try:
            resolved = Path(os.path.realpath(path, strict=True))
        except OSError:
            resolved = None  # a dangling or looping link: judged by where its text points
        if resolved is None or not resolved.is_relative_to(self.root):
            raise PathError(
                f"Argument {argument!r}: {what} leads outside the workspace"
                + (" through a symlink" if stat.S_ISLNK(info.st_mode) else "")
                + "; engines open it along with the input.",
                code="SIDECAR_OUTSIDE_WORKSPACE",
                evidence={
                    **evidence,
                    "resolved_path": str(resolved)
                    if resolved
                    else os.readlink(path)
                    if stat.S_ISLNK(info.st_mode)
                    else "",
                },
                hint=f"Replace {path.name} with a copy of the file inside the workspace {self.root}, or delete it.",
            )
        target = os.stat(resolved)
        if stat.S_ISREG(target.st_mode) and target.st_nlink > 1:
            raise PathError(
                f"Argument {argument!r}: {what} has {target.st_nlink} hard links; a hard link may be a file "
                "outside the workspace under a second name, so it is not opened.",
                code="PATH_HARD_LINK",
                evidence={**evidence, "hard_links": target.st_nlink},
                hint=f"Replace {path.name} with a plain copy (cp, not ln) inside the workspace.",
            )
        if not (stat.S_ISREG(target.st_mode) or stat.S_ISDIR(target.st_mode)):
            raise PathError(
                f"Argument {argument!r}: {what} is not a regular file (a FIFO, socket or device).",
                code="PATH_NOT_REGULAR_FILE",
                evidence=evidence,
                hint=f"Delete {path.name}; datasets and their sidecars are regular files.",
            )

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


def _check_local_form(path: str, argument: str, *, unc: bool = False) -> None:
    """``unc``: ``path`` is an admitted UNC path; its other parts are checked like any path's."""
    evidence = {"argument": argument, "path": path}
    if _UNC.match(path) and not unc:
        raise PathError(
            f"Argument {argument!r} is a UNC or device path naming another host or namespace.",
            code="PATH_UNC",
            evidence=evidence,
            hint="Use a path on this machine that starts with a single separator, or a relative path. UNC "
            f"paths to a network share are read only with {ALLOW_UNC_ENV}=1 and a {WORKSPACE_ENV} on that share.",
        )
    rest = path[2:] if unc else path
    if not unc and _DRIVE_LETTER.match(path):
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


def unc_share(path: str) -> tuple[str, str, str] | None:
    """``(server, share, rest)`` of a UNC network path, or ``None`` for anything else (device paths
    ``\\\\?\\`` and ``\\\\.\\`` included). Pure string logic: testable on any platform."""
    match = _UNC_SHARE.match(path)
    if match is None:
        return None
    return match.group("server"), match.group("share"), match.group("rest")


def unc_normalise(path: str) -> str:
    """A UNC path in Windows form: backslashes, ``.``/``..`` folded as Windows folds them (never above the share)."""
    return ntpath.normpath(path.replace("/", "\\"))


def unc_within(root: str, path: str) -> bool:
    """Whether UNC ``path`` is ``root`` or inside it, compared case-blind after normalising both."""
    root_parts, path_parts = unc_share(root), unc_share(path)
    if root_parts is None or path_parts is None:
        return False
    base = ntpath.normcase(unc_normalise(root)).rstrip("\\")
    candidate = ntpath.normcase(unc_normalise(path))
    return candidate == base or candidate.startswith(base + "\\")


def _resolve_unc_root(raw_root: str, allow_unc: bool) -> Path:
    evidence = {"workspace": raw_root}
    if not allow_unc:
        raise ConfigurationError(
            f"{WORKSPACE_ENV} {raw_root!r} is a UNC path, and UNC paths are not allowed.",
            code="WORKSPACE_INVALID",
            evidence=evidence,
            hint=f"Set {ALLOW_UNC_ENV}=1 to keep the workspace on a network share, or use a local folder.",
        )
    if unc_share(raw_root) is None:
        raise ConfigurationError(
            f"{WORKSPACE_ENV} {raw_root!r} is a device path, not a network share (\\\\server\\share\\folder).",
            code="WORKSPACE_INVALID",
            evidence=evidence,
            hint="Set the workspace to a folder on a share, such as \\\\server\\gis\\project.",
        )
    if not _IS_WINDOWS:
        # On POSIX "//server/share" is the local folder /server/share: it names no network share.
        raise ConfigurationError(
            f"{WORKSPACE_ENV} {raw_root!r} is a Windows network share path, which names no share on this system.",
            code="WORKSPACE_INVALID",
            evidence=evidence,
            hint=f"Mount the share (mount -t cifs //server/share /mnt/share) and set {WORKSPACE_ENV} to the "
            f"folder under the mount point; {ALLOW_UNC_ENV} is for Windows servers.",
        )
    return _resolve_workspace_root(raw_root)  # pragma: no cover - Windows only


def _parse_flag(value: str | None, name: str, what: str) -> bool:
    if value in (None, "", "0"):
        return False
    if value == "1":
        return True
    raise ConfigurationError(
        f"{name} must be 1 or 0, not {value!r}.",
        evidence={name.lower(): value},
        hint=f"Set {name}=1 to allow {what}, or unset it.",
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
