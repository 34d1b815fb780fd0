"""The facts the checks read about a vector layer (count, missing, invalid, types, extent), without loading it.

Two ways answer the same question (``mapsmith.verify.facts``): a query in DuckDB over WKB GeoParquet, and a
streaming pass over any format in Arrow batches with shapely. tests/scale/test_check_parity.py holds both to
the same facts on hand cases.

A GeoParquet file's facts, validity counted, are kept for this process with the file's identity (path, inode, size,
modification and change times, and its last 64 KiB, where the footer lies), so that a DuckDB or SedonaDB engine
which then reads the same unchanged file takes its input scan from them instead of scanning the geometries a
second time (``counted_facts``). A header read of a file whose footer declares points only counts their validity
too: DuckDB tells a point's from its coordinates (``duckdb_spatial.valid_sql``), a small share of the scan. Other
header reads count no validity (a polygon's is GEOS's work), so nothing is kept from them; a read that asks for
validity (an output check) is kept whatever the types. A folder of parts scanned whole is kept the same way, by the
identities of all its parts in listing order: a part changed, added or removed is another folder. Spark takes its
inputs' validity from them too (mapsmith_sedona.spark_job.check_validity). Written by hand because the reuse is
MapSmith's own: no library knows which of its scans answer which check.

What this module must never do: answer from kept facts for a file that changed since they were counted, or
count a validity the caller did not ask for into the facts it returns.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.crsdeclared import strict_json_loads
from mapsmith.errors import InputError
from mapsmith.gdalpolicy import vector_source
from mapsmith.verify.facts import OutputFacts

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "CHEAP_VALIDITY",
    "FactsTally",
    "SCAN_BATCH",
    "counted_facts",
    "duckdb_parts_scan",
    "read_geometries",
    "scan_facts",
    "stream_facts",
]

# Features per batch of the streaming scan: a batch of 64k polygons is tens of megabytes at most, and
# GEOS's per-call overhead is lost in it.
SCAN_BATCH = 65_536


def _geometry_batches(path: Path, layer: str | None) -> Iterator[Any]:
    """The layer's geometries as arrays of shapely objects, a batch at a time: GeoParquet through
    pyarrow's ``iter_batches`` (the geometry column only), OGR formats through pyogrio's Arrow stream
    with no attribute columns. A shapefile is read whole through read_layer: its rings are re-nested
    there (_organise_shapefile_rings), and the checks must see the geometries MapSmith reads."""
    import shapely

    from mapsmith_opensource.io import is_parquet, read_layer

    if path.suffix.lower() in (".shp", ".zip"):
        yield read_layer(path, layer).geometry.values
        return
    if is_parquet(path):
        import pyarrow.parquet as pq

        geo = strict_json_loads((pq.read_metadata(path).metadata or {}).get(b"geo", b"{}") or b"{}")
        column = geo["primary_column"]
        if geo["columns"][column].get("encoding", "WKB") != "WKB":  # geoarrow-encoded: GeoPandas reads it
            yield read_layer(path, layer).geometry.values
            return
        for batch in pq.ParquetFile(path).iter_batches(columns=[column], batch_size=SCAN_BATCH):
            yield shapely.from_wkb(_objects(batch.column(0)))
        return
    import pyogrio

    source, _ = vector_source(path)
    with pyogrio.open_arrow(source, layer=layer, columns=[], batch_size=SCAN_BATCH, use_pyarrow=True) as (
        meta,
        reader,
    ):
        name = meta.get("geometry_name") or "wkb_geometry"
        for batch in reader:
            yield shapely.from_wkb(batch.column(batch.schema.get_field_index(name)).to_numpy(zero_copy_only=False))


def _objects(column: Any) -> Any:
    """A binary Arrow column as a numpy array of bytes (None for a null), without pandas: pyarrow's ``to_numpy`` of a
    binary column imports it (0.25 s of a fresh process); the same cost per value (1,000,000 points: 0.56 s against
    0.54 s, shapely's decoding included)."""
    import numpy as np

    out = np.empty(len(column), dtype=object)
    out[:] = column.to_pylist()
    return out


def read_geometries(path: Path, layer: str | None = None) -> Any:
    """Every geometry of a layer, in file order, as one array of shapely objects, by the batches ``scan_facts``'
    streaming pass reads (a GeoParquet file of WKB geometries without pandas)."""
    import numpy as np

    batches = list(_geometry_batches(path, layer))
    return np.concatenate(batches) if batches else np.empty(0, dtype=object)


def scan_facts(path: Path, layer: str | None = None, *, validity: bool = True) -> OutputFacts:
    """The facts the output checks read (count, missing, invalid, types, extent), never loading the layer.

    GeoParquet with WKB geometries is asked in DuckDB (duckdb_spatial.facts_sql): on benchmarks/bench_scale.py's
    1,000,000 points it took 0.75 s of CPU against 2.75 s for the streaming pass, with the same facts.
    Every other format, and a file DuckDB cannot read, takes the streaming pass.
    tests/scale/test_check_parity.py holds both ways to the same facts and checks. Without ``validity``
    (a header read that wants the types and extent only) the invalid count is 0, not counted.
    """
    from mapsmith_opensource.io import is_parquet

    if is_parquet(path) and path.suffix.lower() != ".zip":
        found = _duckdb_facts(path, validity)
        if found is not None:
            return found
    return stream_facts(path, layer, validity=validity)


# The footer types whose validity the header read counts anyway: DuckDB answers a point's from its coordinates.
CHEAP_VALIDITY = frozenset({"Point", "Point Z"})
# Files whose facts are kept: an operation reads two or three inputs, a plan a few more.
_KEPT = 16
# The tail of the file read into its identity: a Parquet footer (row groups' offsets, sizes and statistics) lies
# there, so a rewrite inside one tick of the file system's clock, to the same size, still changes the identity.
_TAIL = 65_536
_Identity = tuple[str, int, int, int, int, str]
_kept: dict[Any, OutputFacts] = {}  # by a file's _Identity, or a folder's ("parts", identity of each part ...)
_keeping = threading.Lock()  # runs in an HTTP server's threads share it


def _identity(path: Path) -> _Identity | None:
    """The file as it is now: a rewrite in place changes its times, size or footer, a replacement its inode."""
    import hashlib

    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            f.seek(max(0, st.st_size - _TAIL))
            tail = hashlib.sha256(f.read(_TAIL)).hexdigest()
    except OSError:
        return None
    return (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, tail)


def _parts_identity(files: list[Path]) -> tuple[Any, ...] | None:
    """A folder's parts as they are now, in listing order (None when one cannot be read)."""
    found = [_identity(f) for f in files]
    return None if not found or None in found else ("parts", *found)


def counted_facts(path: Path) -> OutputFacts | None:
    """The facts, validity counted, of the GeoParquet file ``path`` (or folder of GeoParquet parts) as this process
    last scanned it, when it is unchanged since; else None (then the caller scans)."""
    if path.is_dir():
        from mapsmith import parts

        try:
            key = _parts_identity(parts.part_files(path))
        except InputError:  # not a folder of parts
            return None
    else:
        key = _identity(path)
    return _kept.get(key) if key is not None else None


def _keep(key: Any, facts: OutputFacts) -> None:
    with _keeping:
        _kept.pop(key, None)
        _kept[key] = facts
        while len(_kept) > _KEPT:
            del _kept[next(iter(_kept))]


def _duckdb_facts(path: Path, validity: bool = True) -> OutputFacts | None:
    """verify.facts' query in DuckDB over a WKB GeoParquet file, or None where DuckDB cannot answer it
    (another encoding, a geometry its reader refuses): the streaming pass then answers the same question.
    A footer declaring points only has its validity counted even when ``validity`` is not asked, and the
    facts are kept (``counted_facts``); the answer still counts no invalid geometry then."""
    geo = strict_json_loads((_parquet_metadata(path).metadata or {}).get(b"geo", b"{}") or b"{}")
    column = geo.get("primary_column")
    declared = geo.get("columns", {}).get(column, {})
    if not column or declared.get("encoding", "WKB") != "WKB":
        return None
    types = declared.get("geometry_types") or []
    counting = validity or (bool(types) and set(types) <= CHEAP_VALIDITY)
    key = _identity(path) if counting else None  # only counted facts are kept
    facts = _facts_in_duckdb("read_parquet('" + str(path).replace("'", "''") + "')", str(column), counting)
    if facts is None:
        return None
    if key is not None and key == _identity(path):  # unchanged while it was scanned
        _keep(key, facts)
    return facts if validity else dataclasses.replace(facts, invalid=0)


def _facts_in_duckdb(source: str, column: str, validity: bool) -> OutputFacts | None:
    """verify.facts' query over ``source`` (a read_parquet(...)) in DuckDB, or None where DuckDB refuses it."""
    import duckdb

    from mapsmith.verify.facts import facts_from_row
    from mapsmith_opensource.duckdb_spatial import facts_sql
    from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

    g = '"' + column.replace('"', '""') + '"::GEOMETRY'
    try:
        with duckdb_database().cursor() as con:
            cursor = con.execute(facts_sql(source, g, validity))
            row = cursor.fetchone()
            names = [d[0] for d in cursor.description]
    except duckdb.Error:
        return None
    return facts_from_row(dict(zip(names, row, strict=True)))


def duckdb_parts_scan(files: list[Path], column: str, validity: bool) -> dict[str, Any] | None:
    """parts.inspect_folder's geometry pass as verify.facts' query in DuckDB over the parts (WKB GeoParquet), or
    None where DuckDB cannot answer it: the stream then does. Measured on 10,000,000 points in 10 parts declaring
    no geometry types: a MapSmith select_features took 21.6 s with the shapely stream, most of it here.
    As for one file, parts whose every footer declares points only have their validity counted anyway, and the
    facts are kept (``counted_facts``; only when ``files`` are all the folder's parts can a lookup find them)."""
    declared = []
    for file in files:
        geo = strict_json_loads((_parquet_metadata(file).metadata or {}).get(b"geo", b"{}") or b"{}")
        if geo.get("columns", {}).get(column, {}).get("encoding", "WKB") != "WKB":
            return None
        declared.append(set(geo.get("columns", {}).get(column, {}).get("geometry_types") or ()))
    counting = validity or all(kinds and kinds <= CHEAP_VALIDITY for kinds in declared)
    key = _parts_identity(files) if counting else None
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    facts = _facts_in_duckdb(f"read_parquet([{listed}], hive_partitioning = false)", column, counting)
    if facts is None:
        return None
    if key is not None and key == _parts_identity(files):  # unchanged while they were scanned
        _keep(key, facts)
    return {"types": set(facts.geometry_types), "invalid": facts.invalid if validity else 0, "bounds": facts.bounds}


def _parquet_metadata(path: Path) -> Any:
    import pyarrow.parquet as pq

    return pq.read_metadata(path)


@dataclasses.dataclass
class FactsTally:
    """The facts of a layer gathered batch by batch of shapely geometries (``add``), as ``stream_facts`` reads a file
    and nearest_join's columns path its input: rows, missing (null or empty), invalid (counted when ``validity``),
    types and extent of the present geometries."""

    validity: bool = True
    rows: int = 0
    missing: int = 0
    invalid: int = 0
    type_ids: set[int] = dataclasses.field(default_factory=set)
    lows: list[float] = dataclasses.field(default_factory=lambda: [float("inf")] * 2)
    highs: list[float] = dataclasses.field(default_factory=lambda: [float("-inf")] * 2)

    def add(self, geoms: Any) -> int:
        """Count one batch in; how many of its present geometries are invalid (0 without ``validity``)."""
        import numpy as np
        import shapely

        self.rows += len(geoms)
        absent = shapely.is_missing(geoms) | shapely.is_empty(geoms)
        self.missing += int(absent.sum())
        present = geoms[~absent]
        invalid = int((~shapely.is_valid(present)).sum()) if self.validity else 0
        self.invalid += invalid
        self.type_ids.update(shapely.get_type_id(present).tolist())
        if not len(present):
            return invalid
        if self.validity and not invalid:
            # Valid geometries have finite coordinates: their extent is their coordinates' (the same doubles as
            # their boxes; 0.06 s against shapely.bounds' 0.25 s on 1,000,000 points).
            xy = shapely.get_coordinates(present)
            box_low, box_high = xy.min(axis=0), xy.max(axis=0)
        else:
            box = shapely.bounds(present)
            # NaN coordinates (an invalid point) are left out of the extent, as the engines' ST_XMin do
            box_low = np.array([np.nanmin(box[:, 0]), np.nanmin(box[:, 1])])
            box_high = np.array([np.nanmax(box[:, 2]), np.nanmax(box[:, 3])])
        self.lows = [min(self.lows[0], float(box_low[0])), min(self.lows[1], float(box_low[1]))]
        self.highs = [max(self.highs[0], float(box_high[0])), max(self.highs[1], float(box_high[1]))]
        return invalid

    def facts(self) -> OutputFacts:
        import numpy as np

        from mapsmith_opensource.common import TYPE_NAMES

        types = tuple(sorted(TYPE_NAMES[t] for t in self.type_ids))
        finite = self.type_ids and np.isfinite(self.lows + self.highs).all()
        bounds = (self.lows[0], self.lows[1], self.highs[0], self.highs[1]) if finite else None
        return OutputFacts(self.rows, self.missing, self.invalid, types, bounds)


def stream_facts(path: Path, layer: str | None = None, *, validity: bool = True) -> OutputFacts:
    """The same facts in one streaming pass over the file in Arrow batches (shapely on each batch),
    never holding more than a batch: verify.facts' other way, beside the engine's query."""
    tally = FactsTally(validity)
    try:
        for geoms in _geometry_batches(path, layer):
            tally.add(geoms)
    except InputError:
        raise
    except Exception as exc:
        from mapsmith_opensource.io import _unreadable

        raise _unreadable(path, exc) from exc
    return tally.facts()
