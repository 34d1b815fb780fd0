"""KML documents and zip archives (KMZ, zipped shapefiles), checked before GDAL opens them.

A KML can make GDAL (LIBKML) or a viewer read other files and URLs: ``<NetworkLink>``, any
``<href>`` (``Link``, ``Icon`` of a ``GroundOverlay``, ``Model``), an external ``styleUrl`` or
``schemaUrl``, ``targetHref``. A zip can hold members whose names climb out of the archive
(``../evil.shp``), absolute names, symlinks, or a few kilobytes that inflate to gigabytes. So:

- ``check_kml_bytes`` parses the document with expat (the standard library's XML parser) with
  every DTD refused before it is read (``<!DOCTYPE``, ``<!ENTITY``: ``KML_DOCTYPE_REFUSED``), so no
  entity is ever expanded and no external subset fetched; the root must be ``<kml>``; every external
  reference is refused (``KML_EXTERNAL_REFERENCE``), and so is text that GDAL's XML drivers sniff
  before LIBKML's (an ``<OGRVRTDataSource>`` hidden in a description: ``KML_FOREIGN_CONTENT``).
  defusedxml is not installed here; expat with the DTD handlers raising is what it would do for us.
- ``check_zip`` reads the central directory with :mod:`zipfile` and refuses unsafe members
  (``ARCHIVE_MEMBER_UNSAFE``) and archives past the size limits (``ARCHIVE_TOO_LARGE``).
- ``gdal_path`` is the ``/vsizip/`` path MapSmith builds itself after those checks (a caller's own
  ``/vsi`` path is still refused by ``workspace``): ``doc.kml`` of a KMZ, the shapefile (or the folder
  of shapefiles, each a layer) of a zip.

The XML walk and the member-name rules are hand-written because no installed library states them
for GDAL's readers; zip and XML parsing themselves are the standard library's.

What this module must never do: import GDAL, extract a member to disk, follow a reference to check
it, or expand an entity.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from xml.parsers import expat

from mapsmith.errors import InputError

__all__ = [
    "KML_SUFFIXES",
    "MAX_ARCHIVE_MEMBERS",
    "MAX_COMPRESSION_RATIO",
    "MAX_KML_BYTES",
    "MAX_UNCOMPRESSED_BYTES",
    "ZipListing",
    "check_container",
    "check_kml_bytes",
    "check_kml_file",
    "check_zip",
    "gdal_path",
    "is_container",
    "kmz_document",
    "zip_prj_texts",
    "zip_shapefiles",
]

KML_SUFFIXES = (".kml", ".kmz")
MAX_KML_BYTES = 256 << 20  # a KML is parsed whole here and by LIBKML: bigger ones are refused
MAX_UNCOMPRESSED_BYTES = 4 << 30  # the sum of the members' declared sizes
MAX_ARCHIVE_MEMBERS = 10_000
# Deflate cannot exceed about 1032:1, so a one-level bomb sits right at this ratio; the real wall is
# MAX_UNCOMPRESSED_BYTES (a .dbf of blank text fields compresses several hundred to one legitimately).
MAX_COMPRESSION_RATIO = 1000
_RATIO_FLOOR_BYTES = 1 << 20
_MAX_PRJ_BYTES = 1 << 20
_SHP_MAGIC = b"\x00\x00\x27\x0a"

# Text that makes a GDAL driver registered before LIBKML claim the file (VRT, GML, NAS, GPX).
_FOREIGN_MARKERS = (b"<ogrvrtdatasource", b"<vrtdataset", b"opengis.net/gml", b"<gpx")
_REFERENCE_ELEMENTS = {"href", "targethref"}
_REFERENCE_ATTRIBUTES = {"href", "targethref", "schemaurl"}
_LOCAL_FRAGMENT = re.compile(r"^#[^#/\\:]*$")
_REFERENCES_LISTED = 10


def is_container(path: Path) -> bool:
    """True for the inputs this module checks: ``.kml``, ``.kmz`` and ``.zip``."""
    return path.suffix.lower() in (*KML_SUFFIXES, ".zip")


# -- KML --------------------------------------------------------------------------------------


class _KMLWalk:
    def __init__(self, name: str, argument: str) -> None:
        self.name, self.argument = name, argument
        self.stack: list[str] = []
        self.text: list[str] = []
        self.root: str | None = None
        self.references: list[dict[str, str]] = []

    @staticmethod
    def _local(tag: str) -> str:
        return tag.rsplit(" ", 1)[-1].rsplit(":", 1)[-1].lower()

    def doctype(self, *_: Any) -> None:
        raise InputError(
            f"{self.argument}: {self.name} declares a DTD (<!DOCTYPE ...>); its entities could expand without "
            "bound or name other files, so it is not read",
            code="KML_DOCTYPE_REFUSED",
            evidence={"argument": self.argument, "path": self.name},
            hint="remove the <!DOCTYPE ...> declaration (KML never needs one) and pass the file again",
        )

    def start(self, tag: str, attributes: dict[str, str]) -> None:
        local = self._local(tag)
        if self.root is None:
            self.root = local
        self.stack.append(local)
        self.text = []
        where = "/".join(self.stack)
        if local == "networklink":
            self.references.append({"element": where, "reference": "(a NetworkLink loads another document)"})
        for key, value in attributes.items():
            value = value.strip()
            if self._local(key) in _REFERENCE_ATTRIBUTES and value and not _LOCAL_FRAGMENT.match(value):
                self.references.append({"element": f"{where}@{self._local(key)}", "reference": value})

    def data(self, text: str) -> None:
        self.text.append(text)

    def end(self, tag: str) -> None:
        local = self.stack.pop() if self.stack else self._local(tag)
        value = "".join(self.text).strip()
        self.text = []
        where = "/".join([*self.stack, local])
        if value and (
            local in _REFERENCE_ELEMENTS or (local in ("styleurl", "schemaurl") and not _LOCAL_FRAGMENT.match(value))
        ):
            self.references.append({"element": where, "reference": value})


def check_kml_bytes(data: bytes, *, name: str, argument: str = "input_path") -> None:
    """Refuse a KML document that is not plain KML or that references anything outside itself.

    Raises ``InputError``: ``KML_DOCTYPE_REFUSED``, ``KML_UNREADABLE`` (not XML, or the root is not
    ``<kml>``), ``KML_FOREIGN_CONTENT`` or ``KML_EXTERNAL_REFERENCE`` (evidence lists the first
    references with the element path where each was found).
    """
    low = data.lower()
    for marker in _FOREIGN_MARKERS:
        if marker in low:
            raise InputError(
                f"{argument}: {name} contains {marker.decode()!r}, which makes GDAL read it with another driver "
                "than KML's",
                code="KML_FOREIGN_CONTENT",
                evidence={"argument": argument, "path": name, "marker": marker.decode()},
                hint="remove that text from the document (it is no part of KML) and pass the file again",
            )
    walk = _KMLWalk(name, argument)
    parser = expat.ParserCreate(namespace_separator=" ")
    # A DTD is refused at its first byte, so no entity is declared, expanded or fetched.
    parser.StartDoctypeDeclHandler = walk.doctype
    parser.EntityDeclHandler = walk.doctype
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartElementHandler = walk.start
    parser.EndElementHandler = walk.end
    parser.CharacterDataHandler = walk.data
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise InputError(
            f"{argument}: {name} is not well-formed XML ({exc})",
            code="KML_UNREADABLE",
            evidence={"argument": argument, "path": name, "error": str(exc)},
            hint="check the file is a complete KML document",
        ) from exc
    if walk.root != "kml":
        raise InputError(
            f"{argument}: {name} is XML whose root is <{walk.root}>, not <kml>",
            code="KML_UNREADABLE",
            evidence={"argument": argument, "path": name, "root_element": walk.root},
            hint="pass a KML document (root element <kml>), or give the file the extension of its real format",
        )
    if walk.references:
        found = walk.references
        raise InputError(
            f"{argument}: {name} references {len(found)} thing(s) outside itself (first: {found[0]['reference']!r} "
            f"at {found[0]['element']}); GDAL or a viewer would read them, so the document is not opened",
            code="KML_EXTERNAL_REFERENCE",
            evidence={
                "argument": argument,
                "path": name,
                "reference_count": len(found),
                "references": found[:_REFERENCES_LISTED],
            },
            hint="remove the NetworkLink, overlay and href elements (or save the layers as plain placemarks) and "
            "pass the document again; MapSmith reads only what is inside the file",
        )


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def check_kml_file(path: Path, *, argument: str = "input_path") -> None:
    """``check_kml_bytes`` on a ``.kml`` file, refused past ``MAX_KML_BYTES`` (``KML_TOO_LARGE``)."""
    _check_kml_file_cached(str(path), *_identity(path), argument)


@functools.lru_cache(maxsize=64)
def _check_kml_file_cached(path: str, _ino: int, size: int, _mtime: int, argument: str) -> None:
    # Cached by identity: one request opens a KML several times (layers, header, features). A
    # refusal raises and is never cached.
    if size > MAX_KML_BYTES:
        raise _too_large(Path(path).name, argument, size, MAX_KML_BYTES, "KML_TOO_LARGE", "the KML document")
    check_kml_bytes(Path(path).read_bytes(), name=Path(path).name, argument=argument)


def _too_large(name: str, argument: str, size: int, limit: int, code: str, what: str) -> InputError:
    return InputError(
        f"{argument}: {what} in {name} is {size:,}, more than the {limit:,} MapSmith reads",
        code=code,
        evidence={"argument": argument, "path": name, "size": size, "limit": limit},
        hint="split the data into smaller files, or convert it to GeoPackage outside MapSmith",
    )


# -- zip archives -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ZipListing:
    """The checked members of one archive (file names, no directories) and their total size."""

    members: tuple[str, ...]
    uncompressed_bytes: int


def _unsafe(argument: str, name: str, member: str, reason: str) -> InputError:
    return InputError(
        f"{argument}: {name} has a member {member!r} that is refused ({reason})",
        code="ARCHIVE_MEMBER_UNSAFE",
        evidence={"argument": argument, "path": name, "member": member, "reason": reason},
        hint="re-create the archive with plain relative member names (no '..', no absolute paths, no links, "
        "no encryption) and pass it again",
    )


def check_zip(path: Path, *, argument: str = "input_path") -> ZipListing:
    """Every member of the zip at ``path`` checked by name, kind and size; raises ``InputError``
    (``ARCHIVE_UNREADABLE``, ``ARCHIVE_MEMBER_UNSAFE``, ``ARCHIVE_TOO_LARGE``)."""
    return _check_zip_cached(str(path), *_identity(path), argument, MAX_UNCOMPRESSED_BYTES)


@functools.lru_cache(maxsize=64)
def _check_zip_cached(path: str, _ino: int, _size: int, _mtime: int, argument: str, limit: int) -> ZipListing:
    name = Path(path).name
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InputError(
            f"{argument}: {name} is not a readable zip archive ({exc})",
            code="ARCHIVE_UNREADABLE",
            evidence={"argument": argument, "path": name, "error": str(exc)},
            hint="check the archive is complete; re-create it with a standard zip tool",
        ) from exc
    if len(infos) > MAX_ARCHIVE_MEMBERS:
        raise _too_large(name, argument, len(infos), MAX_ARCHIVE_MEMBERS, "ARCHIVE_TOO_LARGE", "the member count")
    total, seen, members = 0, set(), []
    for info in infos:
        member = info.filename
        if "\x00" in member or "\\" in member:
            raise _unsafe(argument, name, member, "a NUL or backslash in the name")
        if member.startswith("/") or re.match(r"^[A-Za-z]:", member):
            raise _unsafe(argument, name, member, "an absolute path")
        if ".." in PurePosixPath(member).parts:
            raise _unsafe(argument, name, member, "a '..' component climbs out of the archive")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise _unsafe(argument, name, member, "a symbolic link")
        if info.flag_bits & 0x1:
            raise _unsafe(argument, name, member, "encrypted")
        if info.is_dir():
            continue
        folded = member.lower()
        if folded in seen:
            raise _unsafe(argument, name, member, "a second member with the same name (case-blind)")
        seen.add(folded)
        total += info.file_size
        if total > limit:
            raise _too_large(name, argument, total, limit, "ARCHIVE_TOO_LARGE", "the uncompressed bytes")
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size >= _RATIO_FLOOR_BYTES and ratio > MAX_COMPRESSION_RATIO:
            raise _unsafe(argument, name, member, f"it inflates {ratio:,.0f} times (limit {MAX_COMPRESSION_RATIO})")
        members.append(member)
    return ZipListing(tuple(members), total)


def _read_member(path: Path, member: str, limit: int, argument: str) -> bytes:
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
        if info.file_size > limit:
            raise _too_large(f"{path.name}/{member}", argument, info.file_size, limit, "ARCHIVE_TOO_LARGE", member)
        with archive.open(info) as fh:
            data = fh.read(limit + 1)  # a header that lies about the size inflates no further than the limit
    if len(data) > limit:
        raise _too_large(f"{path.name}/{member}", argument, len(data), limit, "ARCHIVE_TOO_LARGE", member)
    return data


def kmz_document(path: Path, *, argument: str = "input_path") -> str:
    """The KML member of a KMZ (``doc.kml``, or its only ``.kml``), checked like a ``.kml`` file."""
    listing = check_zip(path, argument=argument)
    kmls = [m for m in listing.members if m.lower().endswith(".kml")]
    chosen = next((m for m in kmls if m.lower() == "doc.kml"), kmls[0] if len(kmls) == 1 else None)
    if chosen is None:
        raise InputError(
            f"{argument}: {path.name} holds {len(kmls)} KML documents and none is doc.kml",
            code="ARCHIVE_NO_DATASET" if not kmls else "ARCHIVE_AMBIGUOUS",
            evidence={"argument": argument, "path": path.name, "kml_members": kmls[:_REFERENCES_LISTED]},
            hint="a KMZ holds its document as doc.kml; re-create the archive with one",
        )
    data = _read_member(path, chosen, MAX_KML_BYTES, argument)
    check_kml_bytes(data, name=f"{path.name}/{chosen}", argument=argument)
    return chosen


def zip_shapefiles(path: Path, *, argument: str = "input_path") -> tuple[str, ...]:
    """The ``.shp`` members of a zip, checked; each is a layer named by its stem. All must lie in one
    folder of the archive (GDAL reads one folder as a multi-layer dataset)."""
    listing = check_zip(path, argument=argument)
    shps = tuple(m for m in listing.members if m.lower().endswith(".shp"))
    if not shps:
        raise InputError(
            f"{argument}: {path.name} holds no shapefile (.shp member)",
            code="ARCHIVE_NO_DATASET",
            evidence={"argument": argument, "path": path.name, "members": list(listing.members[:_REFERENCES_LISTED])},
            hint="a zip is read as zipped shapefiles; pass the archive of a shapefile, or unzip other formats first",
        )
    folders = sorted({str(PurePosixPath(m).parent) for m in shps})
    if len(folders) > 1:
        raise InputError(
            f"{argument}: {path.name} holds shapefiles in {len(folders)} folders ({', '.join(folders)})",
            code="ARCHIVE_AMBIGUOUS",
            evidence={"argument": argument, "path": path.name, "folders": folders, "shapefiles": list(shps)},
            hint="re-create the archive with the shapefiles in one folder, or one archive per folder",
        )
    return shps


def zip_prj_texts(path: Path, *, argument: str = "input_path") -> list[tuple[str, str]]:
    """``(member, text)`` of every ``.prj`` in a checked zip: the CRS declarations GDAL may read."""
    listing = check_zip(path, argument=argument)
    return [
        (m, _read_member(path, m, _MAX_PRJ_BYTES, argument).decode("utf-8", errors="replace"))
        for m in listing.members
        if m.lower().endswith(".prj")
    ]


def _member_head(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as archive, archive.open(member) as fh:
        return fh.read(4)


def check_container(path: Path, *, argument: str = "input_path") -> None:
    """Every check of this module that applies to ``path`` by its extension (none for other files)."""
    suffix = path.suffix.lower()
    if suffix == ".kml":
        check_kml_file(path, argument=argument)
    elif suffix == ".kmz":
        kmz_document(path, argument=argument)
    elif suffix == ".zip":
        for shp in zip_shapefiles(path, argument=argument):
            head = _member_head(path, shp)
            if head != _SHP_MAGIC:
                raise InputError(
                    f"{argument}: {path.name}/{shp} is not a shapefile, whatever its extension says",
                    code="INPUT_UNREADABLE",
                    evidence={"argument": argument, "path": f"{path.name}/{shp}", "first_bytes": head.hex()},
                    hint="re-create the archive from the shapefile's own files",
                )


def gdal_path(path: Path, *, argument: str = "input_path") -> str:
    """What GDAL is handed for a checked container: the ``.kml`` itself, ``/vsizip/<kmz>/doc.kml``,
    ``/vsizip/<zip>/<a.shp>`` for one shapefile or ``/vsizip/<zip>/<folder>`` for several (layers)."""
    check_container(path, argument=argument)
    absolute = os.path.abspath(path)
    suffix = path.suffix.lower()
    if suffix == ".kmz":
        return f"/vsizip/{absolute}/{kmz_document(path, argument=argument)}"
    if suffix == ".zip":
        shps = zip_shapefiles(path, argument=argument)
        if len(shps) == 1:
            return f"/vsizip/{absolute}/{shps[0]}"
        folder = str(PurePosixPath(shps[0]).parent)
        return f"/vsizip/{absolute}" + ("" if folder == "." else f"/{folder}")
    return str(path)
