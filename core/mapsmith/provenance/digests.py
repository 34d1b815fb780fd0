"""The SHA-256 a manifest records for a dataset: of its bytes, or of the listing of its files.

Spec section 3.3 (since ``1.0.0-draft.9``): one file is digested as its bytes; a shapefile and
a ``.gdb`` directory as the UTF-8 text ``<name>\\0<sha256>\\n``, one line per member file, sorted
by the bytes of the name. The digest identifies content, not names, so that section 6 can walk
lineage by content: renaming a shapefile must not change its digest.

A folder of Parquet parts (``mapsmith.parts``) is digested by the same listing, its members being
the part files under their relative paths. The specification has no rule for such folders (§3.3,
"What the rule does not cover"), so a record names the rule it applied: ``digest_rule`` returns
``PARQUET_PARTS_RULE`` for it, recorded as ``x-mapsmith:digest_rule``.

Digests stream at hashing speed: each file is read in ``CHUNK_BYTES`` blocks into one reused
buffer (no allocation per block), and the members of a listing are hashed in parallel threads (hashlib releases the GIL
while it hashes a block larger than 2 KiB, so threads use every core; one file is one sequential
SHA-256 and cannot be split). Hand-written over ``hashlib.file_digest`` because that has no parallel
form for the members of a listing.

This module must never open a lock file (a file geodatabase's ``*.lock`` cannot be read while it
exists, and its name carries a host name), never follow a symbolic link inside a container, never
pick one of two files that both claim to be the same member, and never invent a rule for a kind of
directory the specification does not cover: each of those is refused with an ``InputError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mapsmith import parts
from mapsmith.errors import InputError

__all__ = [
    "CHUNK_BYTES",
    "PARQUET_PARTS_RULE",
    "SHAPEFILE_MEMBERS",
    "dataset_digest",
    "dataset_files",
    "digest_rule",
    "digest_workers",
    "listing_digest",
    "sha256_file",
]

# 1 MiB: the block must stay in the CPU's cache between the read that fills it and the hash that reads it.
# Measured here in CPU seconds per byte (tests/parts/bench_digests.py, and the same loop at other sizes):
# 256 KiB and 1 MiB blocks hash at about 1,100-1,160 MB per CPU second, 4 MiB blocks at about 800.
CHUNK_BYTES = 1024 * 1024
# The rule a record names for a folder of Parquet parts (not a rule of the specification).
PARQUET_PARTS_RULE = "parquet-parts-listing"
# The members of a shapefile, in the spelling they are listed under. Spatial indexes (.sbn, .sbx,
# .qix) and metadata (.shp.xml) are left out on purpose: rebuilding an index edits no data.
SHAPEFILE_MEMBERS: tuple[str, ...] = (".shp", ".shx", ".dbf", ".prj", ".cpg")
# Names operating systems drop into any folder they display; no geodatabase file is named so.
_DESKTOP_LITTER = frozenset({"thumbs.db", "desktop.ini"})


def sha256_file(path: Path | str) -> str:
    """SHA-256 of one file's bytes as 64 lowercase hex characters, read in ``CHUNK_BYTES`` blocks.

    Raises ``OSError`` as ``open`` does; ``dataset_digest`` turns that into an ``InputError``.
    """
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    # Unbuffered: readinto fills the reused block straight from the kernel, no second copy.
    with open(path, "rb", buffering=0) as handle:
        with contextlib.suppress(AttributeError, OSError):  # a hint to the kernel; absent on some systems
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while n := handle.readinto(view):
            digest.update(view[:n])
    return digest.hexdigest()


def digest_workers() -> int:
    """Threads hashing members at once: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _is_shapefile(path: Path) -> bool:
    return path.suffix.lower() == ".shp"


def _is_gdb(path: Path) -> bool:
    return path.name.lower().endswith(".gdb")


def _shapefile_members(shp: Path) -> list[tuple[str, Path]]:
    """``(listed name, file)`` for each member of the shapefile ``shp`` names; refuses clashes."""
    stem = shp.name[: -len(".shp")]
    # ``str.lower`` rather than ``casefold``: it is closer to how case-insensitive filesystems
    # compare names, and those are the filesystems this rule has to agree with.
    wanted = {(stem + ext).lower(): ext for ext in SHAPEFILE_MEMBERS}
    found: dict[str, list[Path]] = {ext: [] for ext in SHAPEFILE_MEMBERS}
    with os.scandir(shp.parent) as entries:
        for entry in entries:
            ext = wanted.get(entry.name.lower())
            # Links are followed here, unlike inside a container: the caller named this
            # shapefile, and its members are whatever files its sibling names lead to.
            if ext is not None and entry.is_file():
                found[ext].append(Path(entry.path))
    clashes = {ext: sorted(p.as_posix() for p in files) for ext, files in found.items() if len(files) > 1}
    if clashes:
        raise InputError(
            f"shapefile {shp.name} has more than one file for "
            f"{', '.join(sorted(clashes))}, so it has no well-defined digest",
            code="DIGEST_AMBIGUOUS",
            evidence={"dataset": shp.as_posix(), "clashing_files": clashes},
            hint="keep exactly one file per member (names differing only in case count as one "
            "member); which one is the data is a decision for a person, not for a digest",
        )
    return [(ext, files[0]) for ext, files in found.items() if files]


def _container_members(container: Path) -> list[tuple[str, Path]]:
    """``(relative /-path, file)`` for every member file of a ``.gdb`` directory, recursively."""
    members: list[tuple[str, Path]] = []

    def descend(directory: Path, prefix: str) -> None:
        with os.scandir(directory) as entries:
            for entry in entries:
                # Symbolic links are neither members nor followed (section 3.3).
                if entry.is_symlink():
                    continue
                name = f"{prefix}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    descend(Path(entry.path), f"{name}/")
                    continue
                # Only regular files: opening a FIFO or a device would block or read forever.
                if not entry.is_file(follow_symlinks=False):
                    continue
                lowered = entry.name.lower()
                if lowered.endswith(".lock") or lowered.startswith(".") or lowered in _DESKTOP_LITTER:
                    continue
                members.append((name, Path(entry.path)))

    descend(container, "")
    return members


def _listing_digest(dataset: Path, members: list[tuple[str, Path]]) -> str:
    encoded: list[bytes] = []
    for name, file in members:
        try:
            encoded.append(name.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a name the filesystem holds as bytes that are not UTF-8
            raise InputError(
                f"a file in {dataset.name} has a name that is not valid UTF-8, and the listing "
                "digest is defined over UTF-8 names",
                code="DIGEST_NAME_NOT_UTF8",
                evidence={
                    "dataset": dataset.as_posix(),
                    "file": os.fsencode(file).decode("utf-8", "replace"),
                },
                hint="rename the file to a UTF-8 name",
            ) from exc
    hexdigests = _member_digests(dataset, [file for _name, file in members])
    return listing_digest(zip(encoded, hexdigests, strict=True))


def listing_digest(lines: Iterable[tuple[bytes | str, str]]) -> str:
    """SHA-256 of the listing ``<name>\\0<sha256>\\n`` of ``(name, member sha256)`` pairs, sorted by name bytes.

    For callers that hashed the members elsewhere (a Spark executor per part): the combination is the
    same as ``dataset_digest`` makes, so the two agree on the same files.
    """
    encoded = sorted(
        ((name.encode("utf-8") if isinstance(name, str) else name), hexdigest.encode("ascii"))
        for name, hexdigest in lines
    )
    return hashlib.sha256(b"".join(name + b"\0" + hexdigest + b"\n" for name, hexdigest in encoded)).hexdigest()


def _member_digests(dataset: Path, files: list[Path]) -> list[str]:
    """Each file's SHA-256, in order; several files are hashed in parallel threads."""
    workers = min(len(files), digest_workers())
    if workers <= 1:
        return [_member_digest(dataset, file) for file in files]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mapsmith-digest") as pool:
        return list(pool.map(lambda file: _member_digest(dataset, file), files))


def _member_digest(dataset: Path, file: Path) -> str:
    try:
        return sha256_file(file)
    except OSError as exc:
        raise InputError(
            f"cannot read {file.name} to digest {dataset.name}: {exc.strerror or exc}",
            code="DIGEST_UNREADABLE",
            evidence={"dataset": dataset.as_posix(), "file": file.as_posix(), "error": str(exc)},
            hint="make the file readable, or close the program that holds it open",
        ) from exc


def _classify(path: Path) -> tuple[str, list[tuple[str, Path]]]:
    """Which rule of section 3.3 applies to ``path``, and the member files it covers."""
    if path.is_dir():
        if _is_gdb(path):
            return "listing", _container_members(path)
        if parts.is_parts_folder(path):
            return "listing", parts.part_members(path)  # its refusals (a stray file ...) are InputErrors
        raise InputError(
            f"{path.name} is a directory, and a digest is defined only for directories named *.gdb "
            "(manifest-v1) and folders of Parquet parts (MapSmith's reading of the same listing rule)",
            code="DIGEST_NO_RULE",
            evidence={"dataset": path.as_posix()},
            hint="pass a file, a .shp, a file geodatabase (*.gdb) or a folder of *.parquet parts; a Zarr "
            "store or an ArcInfo grid has no digest rule, and inventing one would misstate the record",
        )
    if path.is_file():
        if _is_shapefile(path):
            return "listing", _shapefile_members(path)
        return "bytes", [(path.name, path)]
    raise InputError(
        f"{path} does not exist (or is neither a file nor a directory), so it has no digest",
        code="DATASET_NOT_FOUND",
        evidence={"dataset": path.as_posix()},
        hint="check the path; a dataset is digested where it lies, after it was written",
    )


def dataset_digest(path: Path | str) -> str:
    """The ``sha256`` a manifest records for the dataset at ``path`` (spec section 3.3).

    A ``.shp`` path is digested as the listing of its members (``.shp .shx .dbf .prj .cpg``,
    listed under the lowercased extension, so the stem does not count); a directory named
    ``*.gdb`` as the listing of its files, by relative ``/`` path; a folder of Parquet parts as the
    listing of its parts (``mapsmith.parts``; ``digest_rule`` names that rule); any other file as its
    bytes. Members are hashed in parallel threads.
    Raises ``InputError`` with code ``DIGEST_AMBIGUOUS`` (two files claim one shapefile member),
    ``DIGEST_NO_RULE`` (another kind of directory), ``DIGEST_UNREADABLE``,
    ``DIGEST_NAME_NOT_UTF8`` or ``DATASET_NOT_FOUND``.
    """
    dataset = Path(path)
    kind, members = _classify(dataset)
    if kind == "bytes":
        return _member_digest(dataset, dataset)
    return _listing_digest(dataset, members)


def digest_rule(path: Path | str) -> str | None:
    """The extension rule a record must name for the dataset at ``path`` (``x-mapsmith:digest_rule``),
    or None when the specification's own rule applies (a file, a ``.shp``, a ``.gdb``)."""
    dataset = Path(path)
    if dataset.is_dir() and not _is_gdb(dataset) and parts.is_parts_folder(dataset):
        return PARQUET_PARTS_RULE
    return None


def dataset_files(path: Path | str) -> list[Path]:
    """The files the digest of the dataset at ``path`` covers, ordered by their listed name.

    These are the digest members, not every file that travels with the dataset: a shapefile's
    spatial index and ``.shp.xml`` are not listed, so code that moves a shapefile must gather
    those siblings itself. Raises the same ``InputError``s as ``dataset_digest``.
    """
    _kind, members = _classify(Path(path))
    # surrogateescape: listing files must not fail on a name the digest itself would refuse.
    ordered = sorted(members, key=lambda member: member[0].encode("utf-8", "surrogateescape"))
    return [file for _name, file in ordered]
