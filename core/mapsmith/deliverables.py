"""Format work on a finished output: a layer added to a GeoPackage, a GeoJSON written with options.

The engine of any stack writes one dataset to a temporary file; the runner verifies it and then,
when the caller asked for it, this module turns it into the deliverable:

- ``add_layer`` copies an existing GeoPackage to a temporary file beside it and adds (or, with
  overwrite, replaces) one layer there with GDAL (pyogrio), so the container at the output path is
  replaced by one rename, never edited in place. ``layer_digests`` is how the other layers are shown
  to be untouched: a sha256 over each layer's stored rows (every column's SQLite value, geometry
  blobs as bytes, in rowid order) plus its ``gpkg_contents`` and ``gpkg_geometry_columns`` rows,
  read with the standard library's sqlite3 (a GeoPackage is an SQLite database by definition), not
  through GDAL, so nothing is decoded and re-encoded on the way. SQLite's page layout may move; the
  bytes of every row may not.
- ``write_geojson`` writes a verified layer as GeoJSON with GDAL's own options: ``RFC7946=NO`` keeps
  a CRS other than WGS 84 and names it in the legacy ``crs`` member, ``FOREIGN_MEMBERS_COLLECTION``
  adds the caller's top-level members. Nothing here is hand-written GeoJSON.

GDAL is the one library that writes both formats; the step is the same whichever stack computed the
layer (an ArcPy or QGIS result reaches the runner as a file too), so it lives with the output rules in
core, imported lazily like ``mapsmith.mapview``. This module must never write anywhere but the
temporary path it is given, never modify the container it reads, and never choose a CRS.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from mapsmith.errors import OutputError

# GDAL writes the wall clock into gpkg_contents.last_change unless this is set; the same fixed instant
# the opensource writer pins (mapsmith_opensource.io.GPKG_LAST_CHANGE), so identical runs give identical bytes.
_GPKG_LAST_CHANGE = "2000-01-01T00:00:00.000Z"


def _connect(path: Path) -> sqlite3.Connection:
    # Read-only and immutable: reading never creates a journal or changes a byte of the file.
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)


def gpkg_layers(path: Path) -> list[str]:
    """The feature and attribute tables a GeoPackage declares, in gpkg_contents order."""
    try:
        with _connect(path) as db:
            return [str(r[0]) for r in db.execute("SELECT table_name FROM gpkg_contents ORDER BY rowid")]
    except sqlite3.DatabaseError as exc:
        raise OutputError(
            f"{path.name} is not a GeoPackage a layer can be added to: {exc}",
            code="OUTPUT_CONTAINER_UNREADABLE",
            evidence={"path": path.name, "engine_message": str(exc)},
            hint="write the layer to a new .gpkg, or pass overwrite=true without output_layer to replace the file",
        ) from exc


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _rows_digest(db: sqlite3.Connection, table: str, *, with_metadata: bool) -> str:
    sha = hashlib.sha256()
    for row in db.execute(f"SELECT * FROM {_quote(table)} ORDER BY rowid"):  # noqa: S608 - a quoted identifier
        for value in row:
            # Type-tagged so 1, 1.0, '1' and b'1' cannot collide.
            data = value if isinstance(value, bytes) else repr(value).encode()
            sha.update(type(value).__name__.encode() + b":" + data)
            sha.update(b"\x1f")
        sha.update(b"\x1e")
    if with_metadata:
        for meta in ("gpkg_contents", "gpkg_geometry_columns"):
            for row in db.execute(f"SELECT * FROM {meta} WHERE table_name = ?", (table,)):  # noqa: S608
                sha.update(repr(row).encode())
    return sha.hexdigest()


def layer_digests(path: Path, *, skip: str | None = None) -> dict[str, str]:
    """sha256 of every layer's stored rows and metadata rows, by layer name (``skip`` left out)."""
    names = [n for n in gpkg_layers(path) if n != skip]
    with _connect(path) as db:
        return {n: _rows_digest(db, n, with_metadata=True) for n in names}


def layer_rows_digest(path: Path, layer: str) -> str:
    """sha256 of one layer's stored rows only: equal for the same features written under another name."""
    with _connect(path) as db:
        return _rows_digest(db, layer, with_metadata=False)


def add_layer(container: Path | None, source: Path, layer: str, target: Path) -> None:
    """Write ``target``: a copy of ``container`` (or a new GeoPackage) with ``source``'s one layer as ``layer``.

    An existing layer of that name is replaced (GDAL drops and recreates it); the caller has decided
    that overwriting is allowed. ``container`` itself is only read.
    """
    import pyogrio

    if container is not None:
        shutil.copyfile(container, target)
    if pyogrio.get_gdal_config_option("OGR_CURRENT_DATE") is None:
        pyogrio.set_gdal_config_options({"OGR_CURRENT_DATE": _GPKG_LAST_CHANGE})
    meta, table = pyogrio.read_arrow(source)
    options: dict[str, Any] = {"layer": layer, "driver": "GPKG", "encoding": "UTF-8", "crs": meta.get("crs")}
    if meta.get("geometry_type"):
        # pyogrio names the geometry column as the source does ("geom"), or "wkb_geometry" when it has no name.
        geometry = meta.get("geometry_name") or "wkb_geometry"
        options.update(
            geometry_name=geometry,
            geometry_type=meta["geometry_type"],
            # The source's own name for its geometry column, so the rows compare equal column for column.
            layer_options={"GEOMETRY_NAME": meta.get("geometry_name") or "geom"},
        )
    pyogrio.write_arrow(table, target, **options)


def write_geojson(source: Path, target: Path, *, layer: str, keep_crs: bool, members: dict[str, Any] | None) -> None:
    """Write ``source``'s one layer as GeoJSON at ``target`` with GDAL's GeoJSON options."""
    import pyogrio

    options: dict[str, str] = {"RFC7946": "NO" if keep_crs else "YES", "WRITE_NAME": "YES"}
    if members:
        options["FOREIGN_MEMBERS_COLLECTION"] = json.dumps(members, ensure_ascii=False, allow_nan=False)
    frame = pyogrio.read_dataframe(source)
    pyogrio.write_dataframe(frame, target, layer=layer, driver="GeoJSON", layer_options=options)


def top_level_members(path: Path) -> dict[str, Any]:
    """The members of a GeoJSON file's top-level object other than its features (read back to check)."""
    with open(path, encoding="utf-8") as fh:
        document = json.load(fh)
    return {k: v for k, v in document.items() if k != "features"}
