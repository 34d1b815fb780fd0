"""A folder of Parquet parts is ONE dataset: which files it is made of, how it is described, read and written.

The interface other modules call (signatures are stable):

    is_parts_folder(path: Path) -> bool
    part_members(folder: Path) -> list[tuple[str, Path]]     # (relative /-name, file), sorted by UTF-8 name
    part_files(folder: Path) -> list[Path]
    require_parquet_parts(folder: Path) -> list[Path]         # part_files, each checked to start with PAR1
    hive_columns(folder: Path) -> tuple[str, ...]
    hive_key_types(folder: Path) -> dict[str, str]            # each key's Arrow type, as GeoPandas reads it
    arrow_dataset(folder: Path) -> pyarrow.dataset.Dataset    # the parts in listing order, keys typed so
    read_glob(folder: Path) -> str                            # '<folder>/**/*.parquet', for readers taking a glob
    duckdb_source(folder: Path) -> str                        # read_parquet([...], hive_partitioning=...) as SQL
    inspect_folder(path: Path, layer: str | None = None, *, validity: bool = False) -> DatasetInfo
    is_folder_output(given: str) -> bool                      # output_path 'name.parquet/' names a folder
    check_folder_output(output: Path, overwrite: bool, given: str) -> None
    temp_folder_for(output: Path) -> Path
    writing_folder(output: Path, *, overwrite: bool = False) -> ContextManager[Path]  # temp folder, renamed in
    replace_folder(source: Path, target: Path) -> None        # the commit step, also over an older folder

The convention, decided here once (docs/scaling.md, "Provenance for partitioned GeoParquet"):

- **Members.** Every regular file under the folder, recursively, whose name ends in ``.parquet``
  (case-insensitive), listed under its path relative to the folder with ``/``. Hive-style
  ``key=value/`` subfolders and plain ``part-*.parquet`` / ``data_0.parquet`` files are both parts.
- **Not members, skipped:** names beginning with ``_`` or ``.`` (Hadoop's hidden-file rule, which Spark
  and Hive apply: ``_SUCCESS``, ``_metadata``, ``_common_metadata``, ``.part-0.parquet.crc``), other
  ``*.crc`` checksum files, and symbolic links (neither members nor followed, as for a ``.gdb``).
  ``_metadata`` and ``_common_metadata`` are summaries derived from the parts; the engines are given the
  member list, never the summary, so the digest covers exactly the bytes an engine reads.
- **Refused, never guessed:** a ``_temporary`` subfolder (a Spark/Hadoop write still running or
  crashed: PARTS_WRITE_INCOMPLETE); a hidden name ending ``.parquet`` (DuckDB's glob reads it, Spark
  skips it: PARTS_HIDDEN_PART); any other file (PARTS_UNEXPECTED_FILE); parts at different depths or
  under different ``key=`` names (PARTS_LAYOUT_MIXED); parts that disagree on schema, geometry column,
  encoding or CRS (PARTS_SCHEMA_MIXED, PARTS_CRS_MIXED).
- **Naming a folder as an output:** an ``output_path`` ending in ``.parquet/`` (the slash is the
  request; the ``.parquet`` name is the format). Without the slash, ``.parquet`` is one file.
- **Atomic writes:** the engine writes into a hidden temporary folder beside the output
  (``.<name>.tmp-<hex>.parquet``), which is renamed into place only when complete; an older folder
  at the path is first renamed aside and removed after. A failure at any point leaves nothing
  at the final path but what was there before (``replace_folder`` says where the older folder is during
  the swap).

This module must never load a part's rows to describe the folder (footers and GeoParquet metadata
only; ``validity`` streams geometries batch by batch), never import an engine, and never present a
folder whose parts disagree as one dataset. Hand-written because no library defines "the files of a
partitioned dataset" the way the manifest's listing rule needs it: pyarrow.dataset discovers parts
but skips unexpected files silently, which is the one thing a digest must not do.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mapsmith.errors import InputError, OutputError
from mapsmith.registry import DatasetInfo

__all__ = [
    "arrow_dataset",
    "FOLDER_DRIVER",
    "PART_SUFFIX",
    "dataset_files",
    "duckdb_row_position",
    "duckdb_source",
    "hive_columns",
    "hive_key_types",
    "HIVE_NULL",
    "inspect_folder",
    "is_folder_output",
    "is_parts_folder",
    "part_files",
    "part_members",
    "parquet_source",
    "read_glob",
    "replace_folder",
    "require_parquet_parts",
    "temp_folder_for",
    "writing_folder",
]

PART_SUFFIX = ".parquet"
FOLDER_DRIVER = "GeoParquet parts"
TABLE_FOLDER_DRIVER = "Parquet parts"
# Spark's and Hadoop's committers write here first; its presence means the write has not finished.
_INCOMPLETE = "_temporary"
_VALIDITY_BATCH_ROWS = 65_536


def _hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def _scan(folder: Path) -> tuple[list[tuple[str, Path]], list[str], list[str], bool]:
    """(members, unexpected files, hidden parquet files, incomplete) under ``folder``; links skipped."""
    members: list[tuple[str, Path]] = []
    unexpected: list[str] = []
    hidden_parts: list[str] = []
    incomplete = False

    def descend(directory: Path, prefix: str) -> None:
        nonlocal incomplete
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_symlink():
                    continue
                name = f"{prefix}{entry.name}"
                lowered = entry.name.lower()
                if entry.is_dir(follow_symlinks=False):
                    if entry.name == _INCOMPLETE:
                        incomplete = True
                    elif not _hidden(entry.name):
                        descend(Path(entry.path), f"{name}/")
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue  # a FIFO or device is not data, and opening it could block
                if _hidden(entry.name):
                    if lowered.endswith(PART_SUFFIX):
                        hidden_parts.append(name)
                    continue
                if lowered.endswith(PART_SUFFIX):
                    members.append((name, Path(entry.path)))
                elif not lowered.endswith(".crc"):
                    unexpected.append(name)

    descend(folder, "")
    members.sort(key=lambda member: member[0].encode("utf-8", "surrogateescape"))
    return members, sorted(unexpected), sorted(hidden_parts), incomplete


def is_parts_folder(path: Path) -> bool:
    """True for a directory (not a ``.gdb``) holding at least one part; does not check the parts agree."""
    path = Path(path)
    if not path.is_dir() or path.name.lower().endswith(".gdb"):
        return False
    members, _unexpected, hidden, incomplete = _scan(path)
    return bool(members or hidden or incomplete)


def part_members(folder: Path) -> list[tuple[str, Path]]:
    """``(relative /-name, file)`` for every part of ``folder``, sorted by the UTF-8 bytes of the name.

    Raises ``InputError`` PARTS_NOT_A_FOLDER, PARTS_WRITE_INCOMPLETE, PARTS_HIDDEN_PART,
    PARTS_UNEXPECTED_FILE, PARTS_LAYOUT_MIXED or PARTS_EMPTY (the module docstring says why each is refused).
    """
    folder = Path(folder)
    label = folder.as_posix()
    if not folder.is_dir() or folder.is_symlink():
        raise InputError(
            f"{folder.name} is not a folder, so it has no parts",
            code="PARTS_NOT_A_FOLDER",
            evidence={"dataset": label, "exists": folder.exists()},
            hint="pass the folder that holds the *.parquet parts; one .parquet file is read as a file",
        )
    members, unexpected, hidden, incomplete = _scan(folder)
    if incomplete:
        raise InputError(
            f"{folder.name} has a {_INCOMPLETE} subfolder: a write into it has not finished (or crashed)",
            code="PARTS_WRITE_INCOMPLETE",
            evidence={"dataset": label, "subfolder": _INCOMPLETE},
            hint="wait for the writer to finish, or write the dataset again; a half-written folder is not a dataset",
        )
    if hidden:
        raise InputError(
            f"{folder.name} holds Parquet files with hidden names ({', '.join(hidden[:5])}); DuckDB reads them, "
            "Spark skips them, so the dataset would depend on the engine",
            code="PARTS_HIDDEN_PART",
            evidence={"dataset": label, "hidden_parts": hidden[:50]},
            hint="rename them without a leading '_' or '.', or move them out of the folder",
        )
    if unexpected:
        raise InputError(
            f"{folder.name} holds files that are not Parquet parts: {', '.join(unexpected[:5])}",
            code="PARTS_UNEXPECTED_FILE",
            evidence={"dataset": label, "files": unexpected[:50], "count": len(unexpected)},
            hint="a folder dataset holds only *.parquet parts (and _SUCCESS/_metadata/.crc markers); move the "
            "other files out of it",
        )
    if not members:
        raise InputError(
            f"{folder.name} holds no Parquet part",
            code="PARTS_EMPTY",
            evidence={"dataset": label},
            hint="a folder dataset holds *.parquet parts; pass a folder that has some, or a file",
        )
    _layout(folder, members)
    return members


def require_parquet_parts(folder: Path) -> list[Path]:
    """``part_files``, each checked to begin with Parquet's magic bytes (``PAR1``): a reader picks its
    decoder from the name, so a part that is something else is refused before any engine opens it."""
    files = part_files(folder)
    for file in files:
        with open(file, "rb") as handle:
            if handle.read(4) != b"PAR1":
                name = file.relative_to(folder).as_posix()
                raise InputError(
                    f"part {name} of {Path(folder).name} is not a Parquet file (its first bytes say otherwise)",
                    code="PARTS_NOT_PARQUET",
                    evidence={"dataset": Path(folder).as_posix(), "part": name},
                    hint="remove or rewrite that part; every part of a folder dataset is a Parquet file",
                )
    return files


def part_files(folder: Path) -> list[Path]:
    """The part files of ``folder`` in listing order (what an engine is given to read)."""
    return [file for _name, file in part_members(folder)]


def _layout(folder: Path, members: list[tuple[str, Path]]) -> tuple[str, ...]:
    """The hive keys every part lies under (``()`` for plain parts); PARTS_LAYOUT_MIXED otherwise."""
    layouts: dict[tuple[str, ...], str] = {}
    for name, _file in members:
        dirs = name.split("/")[:-1]
        keys = tuple(d.split("=", 1)[0] if "=" in d else f"<{d}>" for d in dirs)
        layouts.setdefault(keys, name)
    if len(layouts) > 1 or any(k.startswith("<") for keys in layouts for k in keys):
        raise InputError(
            f"the parts of {folder.name} do not share one layout: "
            + "; ".join(f"{example} ({'/'.join(keys) or 'top level'})" for keys, example in list(layouts.items())[:4]),
            code="PARTS_LAYOUT_MIXED",
            evidence={"dataset": folder.as_posix(), "examples": sorted(layouts.values())[:10]},
            hint="parts lie either all at the top of the folder or all under the same key=value/ subfolders; "
            "move stray files or subfolders out",
        )
    return next(iter(layouts))


def hive_columns(folder: Path) -> tuple[str, ...]:
    """The partition columns the ``key=value/`` subfolders add to every row (``()`` for plain parts)."""
    return _layout(Path(folder), part_members(folder))


# The value of a key=value/ subfolder that stands for a null key (Hive's, which pyarrow and DuckDB read as null).
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Where a folder's keys cannot be read as fields, its rows still can: each part is a GeoParquet file of its own.
_WITHOUT_KEYS = (
    "read the parts as files of their own, without the key=value/ keys: merge_layers with the parts' paths as "
    "input_paths writes their rows as one file (convert_format for a single part)"
)
# How DuckDB is told each type hive_key_types gives (pyarrow infers no other).
_DUCKDB_KEY_TYPES = {"int32": "INTEGER", "string": "VARCHAR"}


def hive_key_types(folder: Path) -> dict[str, str]:
    """Each ``key=value/`` key, in path order, with the Arrow type pyarrow infers from its values and the GeoPandas
    engine reads it as (``int32`` when every value is a 32-bit integer, else ``string``; ``{}`` for plain parts).
    The other engines are told these types (``duckdb_source``), so a key is the same field whichever engine runs.
    pyarrow is asked rather than its rule copied: its parsing of a value (a sign, leading zeros, an escaped
    character) is the one GeoPandas applies."""
    keys = hive_columns(folder)
    if not keys:
        return {}
    import pyarrow as pa

    try:
        dataset = arrow_dataset(folder)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # a key with no value but nulls has no type to read
        raise InputError(
            f"{Path(folder).name}: the partition keys {list(keys)} cannot be typed from the subfolder names: {exc}",
            code="PARTS_KEYS_UNTYPED",
            evidence={"dataset": Path(folder).as_posix(), "keys": list(keys), "reason": str(exc)},
            hint=_WITHOUT_KEYS,
        ) from exc
    return {key: str(dataset.schema.field(key).type) for key in keys}


def arrow_dataset(folder: Path) -> Any:
    """A pyarrow dataset over the parts of ``folder`` in listing order, hive keys (if any) typed plainly as pyarrow
    infers them: int32 or string, never a dictionary (``hive_key_types``)."""
    import pyarrow.dataset as ds

    files = [file.as_posix() for file in part_files(folder)]
    hive = ds.HivePartitioning.discover() if hive_columns(folder) else None
    return ds.dataset(files, format="parquet", partitioning=hive, partition_base_dir=Path(folder).as_posix())


def read_glob(folder: Path) -> str:
    """A glob naming exactly the members (``part_members`` refuses the hidden parts a glob would add)."""
    part_members(folder)
    return f"{Path(folder).as_posix()}/**/*{PART_SUFFIX}"


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def duckdb_source(folder: Path, *, row_numbers: bool = False) -> str:
    """``read_parquet([...], hive_partitioning = ...)`` over the member list, for a FROM clause; ``row_numbers``
    adds DuckDB's ``file_row_number`` (a row's position in its part; ``file_index`` says which part).

    The explicit list rather than a glob: what DuckDB reads is what the digest covered, by construction.
    """
    members = part_members(folder)
    hive = bool(_layout(Path(folder), members))
    files = ", ".join(_sql_string(file.as_posix()) for _name, file in members)
    extra = ", file_row_number = true" if row_numbers else ""
    if hive:  # the keys typed as GeoPandas reads them, not as DuckDB would guess (a date, a BIGINT)
        keys = hive_key_types(folder).items()
        types = ", ".join(f"{_sql_string(key)}: {_DUCKDB_KEY_TYPES.get(arrow, 'VARCHAR')}" for key, arrow in keys)
        extra = f", hive_types = {{{types}}}{extra}"
    return f"read_parquet([{files}], hive_partitioning = {'true' if hive else 'false'}{extra})"


def dataset_files(path: Path) -> list[Path]:
    """The files a reader reads for a dataset path, in order: the file itself, or a folder's parts in listing
    order (the order GeoPandas reads them in and the manifest's digest lists them)."""
    return part_files(path) if is_parts_folder(path) else [Path(path)]


def duckdb_row_position(path: Path, alias: str | None = None) -> str:
    """Over ``parquet_source(path, row_numbers=True)``: a row's position in the dataset, from 0 -- its
    ``file_row_number``, plus for a folder the rows of the parts listed before its own (their footers' counts).
    ``alias`` qualifies the columns (``l`` gives ``l.file_row_number``) where two sources are joined."""
    import pyarrow.parquet as pq

    at = f"{alias}." if alias else ""
    if not is_parts_folder(path):
        return f"{at}file_row_number"
    offsets, total = [], 0
    for file in part_files(path):
        offsets.append(total)
        total += pq.read_metadata(file).num_rows
    listed = ", ".join(f"{o}::BIGINT" for o in offsets)
    return f"([{listed}])[CAST({at}file_index AS BIGINT) + 1] + {at}file_row_number"


def duckdb_reserved_field(path: Path, names: Iterable[str]) -> str | None:
    """The first of ``names`` (a layer's fields) that ``parquet_source(path, row_numbers=True)`` gives DuckDB's
    row-position columns, in any case, or None: such a field is read in their place (a real column shadows DuckDB's
    virtual one), so the positions built on them would be the field's values. A folder adds ``file_index``."""
    reserved = ("file_row_number", "file_index") if is_parts_folder(path) else ("file_row_number",)
    return next((n for n in names if n.casefold() in reserved), None)


def parquet_source(path: Path, *, row_numbers: bool = False) -> str:
    """DuckDB's ``read_parquet`` over a GeoParquet file or a folder of parts (``duckdb_source``), rows in the
    order GeoPandas reads them."""
    if is_parts_folder(path):
        return duckdb_source(path, row_numbers=row_numbers)
    return f"read_parquet({_sql_string(str(path))}{', file_row_number = true' if row_numbers else ''})"


# -- describing a folder without reading its rows ----------------------------------------------------


def _footer(folder: Path, name: str, file: Path) -> tuple[Any, dict[str, Any] | None]:
    """The footer of one part and its GeoParquet ``geo`` metadata (None when the part has none)."""
    import pyarrow.parquet as pq

    from mapsmith.crsdeclared import strict_json_loads

    try:
        meta = pq.read_metadata(file)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... on a damaged footer
        raise InputError(
            f"part {name} of {folder.name} is not a readable Parquet file: {exc}",
            code="INPUT_UNREADABLE",
            evidence={"dataset": folder.as_posix(), "part": name, "error": str(exc)[:300]},
            hint="rewrite the part, or remove it from the folder (the folder's digest changes either way)",
        ) from exc
    raw = (meta.metadata or {}).get(b"geo")
    if not raw:
        return meta, None
    try:
        geo = strict_json_loads(raw)
    except ValueError as exc:
        raise InputError(
            f"part {name} of {folder.name}: the GeoParquet 'geo' metadata is not strict JSON: {exc}",
            code="INPUT_UNREADABLE",
            evidence={"dataset": folder.as_posix(), "part": name, "problem": str(exc)},
            hint="rewrite the part with a GeoParquet writer, which writes each key once",
        ) from exc
    return meta, geo


def _mixed(folder: Path, code: str, what: str, first: str, other: str, hint: str) -> InputError:
    return InputError(
        f"the parts of {folder.name} disagree on {what}: {first} and {other}",
        code=code,
        evidence={"dataset": folder.as_posix(), "parts": [first, other], "differs": what},
        hint=hint,
    )


def inspect_folder(
    path: Path,
    layer: str | None = None,
    *,
    validity: bool = False,
    scan: Callable[[list[Path], str, bool], dict[str, Any] | None] | None = None,
) -> DatasetInfo:
    """Describe a folder of (Geo)Parquet parts as one dataset, from the parts' footers.

    Schema and CRS come from the first part and must be the same in every part; the feature count is
    the sum of the footers' row counts; the bounds are the union of the parts' GeoParquet ``bbox``, else
    of their ``covering`` bbox column's footer statistics (a streaming pass over the geometries only when
    a part has neither, or when ``validity`` asks for the invalid count). ``layer`` may name the folder's
    one layer (its stem) or be None. ``scan`` (the parts, the geometry column, whether to count the invalid),
    when given, answers that pass in an engine, with _scan_geometries' keys (None: it could not, and the
    stream answers). Hive partition keys are listed among the fields. Raises the
    ``part_members`` refusals, PARTS_SCHEMA_MIXED, PARTS_CRS_MIXED, LAYER_NOT_FOUND, and
    INPUT_UNREADABLE for a damaged footer.
    """
    folder = Path(path)
    members = part_members(folder)
    keys = _layout(folder, members)
    stem = folder.stem
    if layer is not None and layer != stem:
        raise InputError(
            f"{folder.name} is one dataset, layer {stem!r}; it has no layer {layer!r}",
            code="LAYER_NOT_FOUND",
            evidence={"path": folder.as_posix(), "layers": [stem], "layer": layer},
            hint=f"leave the layer out, or pass {stem!r}",
        )
    count = 0
    schema = None
    geo_ref: dict[str, Any] | None = None
    first = members[0][0]
    bboxes: list[tuple[float, ...]] = []
    need_scan: list[Path] = []
    types: set[str] = set()
    for name, file in members:
        meta, geo = _footer(folder, name, file)
        count += meta.num_rows
        part_schema = meta.schema.to_arrow_schema().remove_metadata()
        if schema is None:
            schema, geo_ref = part_schema, geo
        elif not part_schema.equals(schema):
            raise _mixed(
                folder, "PARTS_SCHEMA_MIXED", "their columns", first, name,
                "rewrite the parts with one schema (same column names and types in every part)",
            )  # fmt: skip
        if (geo is None) != (geo_ref is None):
            raise _mixed(
                folder, "PARTS_SCHEMA_MIXED", "whether they are GeoParquet", first, name,
                "rewrite the plain Parquet parts as GeoParquet, or the GeoParquet parts as plain tables",
            )  # fmt: skip
        if geo is None or geo_ref is None:
            continue
        column, ref_column = _primary(geo), _primary(geo_ref)
        if geo.get("primary_column") != geo_ref.get("primary_column") or column.get("encoding") != ref_column.get(
            "encoding"
        ):
            raise _mixed(
                folder, "PARTS_SCHEMA_MIXED", "the geometry column or its encoding", first, name,
                "rewrite the parts with one geometry column and one encoding",
            )  # fmt: skip
        # GeoParquet: a missing "crs" means OGC:CRS84, an explicit null means none; compared as written.
        if json.dumps(column.get("crs", "OGC:CRS84"), sort_keys=True) != json.dumps(
            ref_column.get("crs", "OGC:CRS84"), sort_keys=True
        ):
            raise _mixed(
                folder, "PARTS_CRS_MIXED", "their CRS", first, name,
                "reproject the parts to one CRS (reproject_layer) and write the folder again",
            )  # fmt: skip
        types.update(str(t) for t in column.get("geometry_types") or ())
        bbox = column.get("bbox")
        covered = _covering_bounds(meta, column)
        if isinstance(bbox, list) and len(bbox) in (4, 6):
            half = len(bbox) // 2
            bboxes.append((bbox[0], bbox[1], bbox[half], bbox[half + 1]))
        elif covered is not None:
            bboxes.append(covered)  # GeoParquet 1.1's bbox covering column: its footer statistics bound it
        elif meta.num_rows:
            need_scan.append(file)
    assert schema is not None
    if twice := next((key for key in keys if key in schema.names), None):
        raise InputError(
            f"{folder.name}: the partition key {twice!r} (its {twice}=value/ subfolders) is also a field of the "
            "parts; which value a row has would depend on the reader",
            code="PARTS_KEY_IS_FIELD",
            evidence={"dataset": folder.as_posix(), "key": twice, "part": members[0][0]},
            hint=_WITHOUT_KEYS + f" (the parts' own {twice!r} kept)",
        )
    if keys:
        hive_key_types(folder)  # every key can be typed (PARTS_KEYS_UNTYPED), before any engine reads the rows
    fields = tuple(n for n in schema.names if geo_ref is None or n != geo_ref.get("primary_column")) + keys
    if geo_ref is None:
        return DatasetInfo(
            path=str(folder), kind="table", driver=TABLE_FOLDER_DRIVER, layer=stem, layers=(stem,),
            crs_wkt=None, crs_label=None, crs_is_geographic=None, feature_count=count,
            geometry_types=(), bounds=None, bounds_lonlat=None, fields=fields,
        )  # fmt: skip
    column_name = str(geo_ref.get("primary_column"))
    invalid = None
    generic = not types or bool(types & {"Geometry", "GeometryCollection", "Unknown"})
    if validity or need_scan or generic:
        files = part_files(folder) if (validity or generic) else need_scan
        scanned = (scan(files, column_name, validity) if scan else None) or _scan_geometries(files, column_name)
        if validity:
            invalid = scanned["invalid"]
        if generic or validity:
            types = set(scanned["types"]) or types
        if scanned["bounds"] is not None:
            bboxes.append(scanned["bounds"])
    bounds = (
        (min(b[0] for b in bboxes), min(b[1] for b in bboxes), max(b[2] for b in bboxes), max(b[3] for b in bboxes))
        if bboxes and count
        else None
    )
    wkt, label, geographic, lonlat = _crs_facts(_primary(geo_ref).get("crs", "OGC:CRS84"), bounds)
    return DatasetInfo(
        path=str(folder), kind="vector", driver=FOLDER_DRIVER, layer=stem, layers=(stem,), crs_wkt=wkt,
        crs_label=label, crs_is_geographic=geographic, feature_count=count,
        geometry_types=tuple(sorted(types - {"Unknown"})), bounds=bounds, bounds_lonlat=lonlat,
        invalid_count=invalid, fields=fields,
    )  # fmt: skip


def _covering_bounds(meta: Any, column: dict[str, Any]) -> tuple[float, float, float, float] | None:
    """The extent from the statistics of a GeoParquet 1.1 ``covering.bbox`` column, or None when a row
    group lacks them (then the geometries are scanned instead)."""
    covering = column.get("covering")
    spec = covering.get("bbox") if isinstance(covering, dict) else None
    if not isinstance(spec, dict) or not meta.num_row_groups:
        return None
    paths = {key: ".".join(spec[key]) for key in ("xmin", "ymin", "xmax", "ymax") if isinstance(spec.get(key), list)}
    if len(paths) != 4:
        return None
    lows: dict[str, list[float]] = {key: [] for key in paths}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        by_path = {group.column(i).path_in_schema: group.column(i).statistics for i in range(group.num_columns)}
        for key, path in paths.items():
            stats = by_path.get(path)
            if stats is None or not stats.has_min_max:
                return None
            # The smallest xmin/ymin and the largest xmax/ymax of the row group's boxes.
            lows[key].append(float(stats.min if key in ("xmin", "ymin") else stats.max))
    if not lows["xmin"]:
        return None
    return min(lows["xmin"]), min(lows["ymin"]), max(lows["xmax"]), max(lows["ymax"])


def _primary(geo: dict[str, Any]) -> dict[str, Any]:
    columns = geo.get("columns") if isinstance(geo.get("columns"), dict) else {}
    column = columns.get(geo.get("primary_column")) if columns else None
    return column if isinstance(column, dict) else {}


def _crs_facts(
    crs_input: Any, bounds: tuple[float, float, float, float] | None
) -> tuple[str | None, str | None, bool | None, tuple[float, float, float, float] | None]:
    if crs_input in (None, ""):
        return None, None, None, None
    from mapsmith.crs import crs_label, parse_crs, to_lonlat

    crs = parse_crs(crs_input if isinstance(crs_input, str) else json.dumps(crs_input))
    lonlat = None
    if bounds is not None:
        lonlat = tuple(float(v) for v in to_lonlat(crs).transform_bounds(*bounds, densify_pts=21))
    return crs.to_wkt(), crs_label(crs), crs.is_geographic, lonlat  # type: ignore[return-value]


def _scan_geometries(files: list[Path], column: str) -> dict[str, Any]:
    """Geometry types, invalid count and bounds, streamed in batches of one column (rows never all in memory)."""
    import pyarrow.parquet as pq
    import shapely

    names = {0: "Point", 1: "LineString", 2: "LineString", 3: "Polygon", 4: "MultiPoint", 5: "MultiLineString"}
    names.update({6: "MultiPolygon", 7: "GeometryCollection"})
    types: set[str] = set()
    invalid = 0
    box: list[float] | None = None
    for file in files:
        handle = pq.ParquetFile(file)
        for batch in handle.iter_batches(batch_size=_VALIDITY_BATCH_ROWS, columns=[column]):
            geoms = shapely.from_wkb(batch.column(0).to_numpy(zero_copy_only=False))
            present = geoms[~(shapely.is_missing(geoms) | shapely.is_empty(geoms))]
            if not len(present):
                continue
            types.update(names.get(int(t), "Unknown") for t in set(shapely.get_type_id(present).tolist()))
            invalid += int((~shapely.is_valid(present)).sum())
            b = shapely.total_bounds(present).tolist()
            box = b if box is None else [min(box[0], b[0]), min(box[1], b[1]), max(box[2], b[2]), max(box[3], b[3])]
    return {"types": types, "invalid": invalid, "bounds": tuple(box) if box is not None else None}


# -- writing a folder atomically ---------------------------------------------------------------------


def is_folder_output(given: str) -> bool:
    """Whether ``output_path`` as given asks for a folder of parts: it ends in ``.parquet/`` (or ``\\``)."""
    stripped = given.rstrip("/\\")
    return stripped != given and stripped.lower().endswith(PART_SUFFIX)


def temp_folder_for(output: Path) -> Path:
    """A hidden folder beside ``output``, in the same directory so the rename into place is atomic."""
    return output.with_name(f".{output.stem}.tmp-{uuid.uuid4().hex[:8]}{output.suffix}")


def replace_folder(source: Path, target: Path) -> None:
    """Move the finished folder ``source`` to ``target``; an older folder there is swapped out, then removed.

    ``rename(2)`` replaces only an empty directory, so an older folder is first renamed aside (one
    atomic step), the new one renamed in (another), and the old one removed last: at every instant the
    final path holds either the whole old dataset or the whole new one, but for the instant between
    the two renames, when it holds nothing. If the second rename fails, the old folder is put back; a
    process killed in that instant leaves the old folder as ``.<name>.old-<hex>``, a name the start-up
    clean-up does not remove, because it is then the last good copy.
    """
    if not (target.is_dir() and not target.is_symlink()):
        os.replace(source, target)
        return
    aside = target.with_name(f".{target.stem}.old-{uuid.uuid4().hex[:8]}{target.suffix}")
    os.replace(target, aside)
    try:
        os.replace(source, target)
    except BaseException:
        os.replace(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def writing_folder(output: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``output`` to write parts into; on success rename it into
    place (``replace_folder``), on any exception remove it and leave ``output`` as it was.

    Raises ``OutputError`` OUTPUT_EXISTS when ``output`` exists and ``overwrite`` is false, and
    OUTPUT_NOT_PARTS_FOLDER when what is there is a file, or a folder that is not a dataset of parts (never removed).
    """
    check_folder_output(output, overwrite, output.name)
    temp = temp_folder_for(output)
    temp.mkdir()
    try:
        yield temp
        part_members(temp)  # a folder with no part, or a stray file, is not committed as a dataset
        check_folder_output(output, overwrite, output.name)
        replace_folder(temp, output)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def check_folder_output(output: Path, overwrite: bool, given: str) -> None:
    """Refuse a folder output over something it may not replace: anything without overwrite, a file, or
    a folder that is not a dataset of parts (a workspace's own folder must never be swapped away)."""
    if not output.exists() and not output.is_symlink():
        return
    if not overwrite:
        raise OutputError(
            f"{given} exists already",
            code="OUTPUT_EXISTS",
            evidence={"path": given},
            hint="choose a new output_path, or pass overwrite=true to replace it (its manifest is replaced too)",
        )
    if output.is_symlink() or not output.is_dir() or not is_parts_folder(output):
        raise OutputError(
            f"{given} exists and is not a folder of Parquet parts, so writing parts there would destroy it",
            code="OUTPUT_NOT_PARTS_FOLDER",
            evidence={"path": given, "is_dir": output.is_dir()},
            hint="write the parts to a new path ending in .parquet/",
        )
