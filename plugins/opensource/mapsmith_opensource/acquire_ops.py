"""fetch_dataset and fetch_raster: data brought into the workspace from a URL, with the record of where it
came from. fetch_raster reads a GeoTIFF's window by ranges (``remote_raster``); the rest of this
docstring is about fetch_dataset.

The download is ``mapsmith.fetch.http.download`` under the operator's ``mapsmith.fetch.policy`` (off
until hosts are listed in ``MAPSMITH_FETCH_ALLOW``). The bytes written are the bytes served: nothing is
converted, reprojected or repaired, so the output is an *original* — its manifest's one input is the URL,
with the digest of the bytes received, and its parameters carry the final URL after redirects, the
retrieval time and the HTTP validators (ETag, Last-Modified). Replay therefore never fetches again: it
asks for the bytes by that digest.

Before the file is accepted, its format is read from its first bytes and must be the one the output
path's extension names (an HTML error page saved as ``.gpkg`` is refused); a KML, a KMZ or a zip is
checked like any input container (``mapsmith.containers``: no unsafe member, one shapefile folder),
and a GeoJSON must declare no CRS other than WGS 84 unless it names one. This module never writes
anywhere but ``ctx.temp_output`` and never opens a connection itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mapsmith.errors import InputError
from mapsmith.fetch.policy import FetchPolicy, url_argument
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration("fetch_dataset", "fetch_dataset", engine="http"),
    Registration("fetch_raster", "fetch_raster", engine="rasterio", requirement="raster"),
)

# What the first bytes of each accepted output format are (text formats after a BOM and blanks).
_SIGNATURES: dict[str, tuple[str, tuple[bytes, ...]]] = {
    ".gpkg": ("GeoPackage (SQLite)", (b"SQLite format 3\x00",)),
    ".parquet": ("Parquet", (b"PAR1",)),
    ".geoparquet": ("Parquet", (b"PAR1",)),
    ".fgb": ("FlatGeobuf", (b"fgb\x03",)),
    ".zip": ("zip archive", (b"PK\x03\x04",)),
    ".kmz": ("KMZ (zip)", (b"PK\x03\x04",)),
    ".xlsx": ("Excel workbook (zip)", (b"PK\x03\x04",)),
    ".geojson": ("GeoJSON", (b"{",)),
    ".json": ("JSON", (b"{", b"[")),
    ".kml": ("KML (XML)", (b"<?xml", b"<kml")),
}
_TEXT_FORMATS = (".csv", ".tsv")


def _looks_like(head: bytes) -> str:
    """A short name for what the bytes are, for the refusal's evidence."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html")):
        return "an HTML page"
    for name, prefixes in _SIGNATURES.values():
        if any(text.startswith(p.lower()) for p in prefixes):
            return name
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "a TIFF"
    return "unrecognised bytes"


def check_format(path: Path, suffix: str, url: str) -> None:
    """FETCH_FORMAT_MISMATCH unless the bytes at ``path`` are what ``suffix`` names."""
    with path.open("rb") as f:
        head = f.read(4096)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if suffix in _TEXT_FORMATS:
        ok = b"\x00" not in head and not text.lower().startswith((b"<", b"{", b"["))
        expected = "CSV text"
    else:
        expected, prefixes = _SIGNATURES[suffix]
        ok = any((text if p[:1] in b"{[<" else head).startswith(p) for p in prefixes)
    if not ok:
        raise InputError(
            f"{url} did not return {expected}: the bytes received are {_looks_like(head)}",
            code="FETCH_FORMAT_MISMATCH",
            evidence={"url": url, "expected": expected, "found": _looks_like(head), "first_bytes": head[:16].hex()},
            hint="check the URL names the file itself (not a web page about it), or name output_path with the "
            "extension of what the URL serves",
        )


def fetch_dataset(ctx: RunContext) -> None:
    from mapsmith import __version__, containers
    from mapsmith.fetch.http import download

    assert ctx.temp_output is not None and ctx.output_path is not None
    url = url_argument(ctx.arguments.get("url"))
    policy = FetchPolicy.from_environ(ctx.environ)
    suffix = ctx.output_path.suffix.lower()
    ctx.set_engine("http", __version__)
    record = download(policy, url, ctx.temp_output, ctx.progress, user_agent=f"MapSmith/{__version__}")
    unpacked, unpacked_size = None, 0
    if suffix not in (".zip", ".kmz", ".xlsx") and _is_zip(ctx.temp_output):
        unpacked, unpacked_size = _unpack_one(ctx.temp_output, suffix, record.final_url, policy.max_bytes)
    check_format(ctx.temp_output, suffix, record.final_url)
    if suffix in (".kml", ".kmz", ".zip"):
        checked = ctx.temp_output.with_name("fetched" + suffix)  # the container checks read the extension
        ctx.temp_output.rename(checked)
        try:
            containers.check_container(checked, argument="url")
        finally:
            checked.rename(ctx.temp_output)
    if suffix in _TEXT_FORMATS or (suffix == ".json" and _is_records(ctx.temp_output)) or suffix == ".xlsx":
        from mapsmith_opensource import io

        info = io.inspect(ctx.temp_output, None)
        ctx.table_output = info
        ctx.check("x-mapsmith:table_readable", True, f"{info.feature_count} rows, columns {list(info.fields)}")
    ctx.remote_inputs.append(
        {"path": url, "sha256": record.sha256, "crs": None, "argument": "url", "x-mapsmith:fetched": True}
    )
    ctx.parameters["url"] = url
    ctx.parameters["x-mapsmith:fetch"] = record.to_dict()
    if unpacked is not None:
        ctx.parameters["x-mapsmith:unpacked_member"] = unpacked
        ctx.notes.append(
            f"the URL served a zip archive holding one {suffix} dataset, {unpacked!r}: that member was unpacked "
            "(the input's digest is the archive's)"
        )
    ctx.notes.append(
        f"fetched {record.bytes:,} bytes from {record.final_url}"
        + (f" (after {len(record.redirects)} redirect(s) from {record.fetched_url})" if record.redirects else "")
        + f" at {record.retrieved_at}; written unchanged (sha256 {record.sha256})"
    )
    if unpacked is not None:
        ctx.check(
            "x-mapsmith:member_as_archived",
            ctx.temp_output.stat().st_size == unpacked_size,
            f"{unpacked!r} unpacked to {ctx.temp_output.stat().st_size:,} bytes; "
            f"the archive declares {unpacked_size:,}",
        )
    else:
        ctx.check(
            "x-mapsmith:bytes_as_received",
            _sha256(ctx.temp_output) == record.sha256,
            f"the file digests to the sha256 of the {record.bytes:,} bytes received",
        )
    ctx.answer = {
        "url": url,
        "final_url": record.final_url,
        "bytes": record.bytes,
        "sha256": record.sha256,
        "etag": record.etag,
        "last_modified": record.last_modified,
        "retrieved_at": record.retrieved_at,
    }


def _is_zip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"PK\x03\x04"


def _unpack_one(path: Path, suffix: str, url: str, limit: int) -> tuple[str, int]:
    """Replace the zip at ``path`` by its one member ending in ``suffix``; refused unless there is exactly
    one dataset in it. Every member is checked first (``containers.check_zip``: names, links, sizes)."""
    import shutil
    import zipfile

    from mapsmith import containers

    checked = path.with_name(path.name + ".zip")  # check_zip reads the archive by its own name
    path.rename(checked)
    try:
        listing = containers.check_zip(checked, argument="url")
        datasets = [m for m in listing.members if Path(m).suffix.lower() in _DATASET_SUFFIXES]
        wanted = [m for m in datasets if Path(m).suffix.lower() == suffix]
        if len(wanted) != 1 or len(datasets) != 1:
            raise InputError(
                f"{url} served a zip archive holding {len(datasets)} datasets ({len(wanted)} ending in {suffix}); "
                "an archive is unpacked only when it holds one",
                code="ARCHIVE_NO_DATASET" if not wanted else "ARCHIVE_AMBIGUOUS",
                evidence={"url": url, "datasets": datasets[:50], "members": list(listing.members[:50])},
                hint="name output_path with .zip to keep the archive whole (zipped shapefiles are read as they "
                "are), or fetch the one dataset's own URL",
            )
        with zipfile.ZipFile(checked) as archive, archive.open(wanted[0]) as member, path.open("wb") as out:
            declared = archive.getinfo(wanted[0]).file_size
            shutil.copyfileobj(member, out, 1 << 20)  # its size was checked by check_zip
        if path.stat().st_size > limit:
            raise InputError(
                f"{wanted[0]} in {url} unpacks to more than {limit:,} bytes",
                code="ARCHIVE_TOO_LARGE",
                evidence={"url": url, "member": wanted[0], "limit": limit},
                hint="fetch a smaller dataset, or ask the operator to raise MAPSMITH_FETCH_MAX_BYTES",
            )
        return wanted[0], declared
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    finally:
        checked.unlink(missing_ok=True)


# What counts as a dataset inside an archive (a shapefile's sidecars do not count twice).
_DATASET_SUFFIXES = (".gpkg", ".geojson", ".json", ".parquet", ".geoparquet", ".fgb", ".kml", ".csv", ".shp", ".tif")


def _is_records(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def _sha256(path: Path) -> str:
    import hashlib

    sha = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def fetch_raster(ctx: RunContext) -> None:
    """A GeoTIFF's URL: the window a bbox needs (or the whole grid), read by ranges under the policy."""
    from mapsmith.fetch.policy import FetchPolicy, url_argument
    from mapsmith_opensource.remote_raster import read_window

    url = url_argument(ctx.arguments.get("url"))
    policy = FetchPolicy.from_environ(ctx.environ)
    href = policy.https_form(url)
    window, relayed = read_window(ctx, policy, href, ctx.arguments.get("bbox"))
    digest = _sha256(ctx.temp_output) if ctx.temp_output is not None else ""
    # The source was read by ranges, never whole: its own digest is unknown, so the input is recorded with
    # the digest of the cells taken from it (the window written), and the URL and window say which.
    ctx.remote_inputs.append(
        {
            "path": url,
            "sha256": digest,
            "crs": None,
            "argument": "url",
            "x-mapsmith:fetched": True,
            "x-mapsmith:digest_of": "the window written: the source was read by ranges, never whole",
        }
    )
    ctx.parameters.update(
        {"url": url, "x-mapsmith:fetched_url": href, "x-mapsmith:window": window, "x-mapsmith:bytes_fetched": relayed}
    )
    ctx.notes.append(
        f"read a {window['width']} x {window['height']} window of {href} with range requests: {relayed:,} bytes "
        "fetched; the input's digest is that of the window written, the source having never been read whole"
    )
    ctx.answer = {"url": url, "window": window, "bytes_fetched": relayed}
