"""Folders of GeoParquet parts on Spark: read as one dataset in listing order, written as parts in row order.

MapSmith's convention for a partitioned dataset is ``mapsmith.parts``': its members are the ``*.parquet``
files under the folder, in the order of their relative names; ``_SUCCESS``, ``.crc`` and other hidden
files are not members; an ``output_path`` ending in ``.parquet/`` asks for a folder. Here:

- **Reading.** Spark is given exactly the member list (``parts.part_files``), so the executors read the
  bytes the manifest's listing digest covers, with ``basePath`` set so ``key=value/`` subfolders become
  columns, typed as the other engines type them (``parts.hive_key_types``: int32 or text, never Spark's own
  guess). The order key is ``(rank of the part in the listing, row within the part)``: Spark packs
  files into tasks by size, not by name, so ``monotonically_increasing_id`` alone would order rows by the
  packing; within one part it still increases in file order (its splits keep their order).
- **Writing.** The rows are range-partitioned on the contract's order and sorted within each task, and
  each task writes its own part: ``part-00000-...``, ``part-00001-...`` list in task order, so the
  folder's listing order is the output's row order, with no single task holding all rows.

It must never hand Spark a glob or the bare folder (Spark would then read what it finds, not what was
digested), and never write anywhere but the runner's temporary path.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from mapsmith.errors import EngineError

PART_RANK = "__mapsmith_part"  # the part's place in the folder's listing


def is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def first_part(path: Path) -> Path:
    """The file whose footer describes ``path``: itself, or a folder's first part."""
    if not is_folder(path):
        return path
    from mapsmith import parts

    return parts.part_files(path)[0]


def wants_folder(arguments: Any) -> bool:
    """Whether output_path, as given, names a folder of parts (it ends in ``.parquet/``)."""
    from mapsmith import parts

    given = arguments.get("output_path") if hasattr(arguments, "get") else None
    return isinstance(given, str) and parts.is_folder_output(given)


def _spark_key(uri: str) -> str:
    """Spark names a file ``file:/x`` in ``_metadata.file_path`` and ``file:///x`` in ``inputFiles()``; this
    drops the scheme and leading slashes so both spellings of one file compare equal (the %-escapes are
    Spark's own in both)."""
    return uri.split(":", 1)[1].lstrip("/") if uri.startswith("file:") else uri.lstrip("/")


def read_folder(spark: Any, folder: Path, row_column: str) -> Any:
    """The parts of ``folder`` as one DataFrame with ``row_column`` = (part rank, row within part)."""
    from pyspark.sql import functions as F

    from mapsmith import parts

    files = parts.part_files(folder)
    keys = parts.hive_key_types(folder)
    # Spark would type a key by its own guess (2024-01-01 a date, 1.50 the double 1.5, 9999999999 a bigint):
    # the keys are read as the text of their subfolders and only the int32 keys cast, as pyarrow and GeoPandas
    # type them (parts.hive_key_types). The setting is read when the files are listed, here.
    inference, previous = "spark.sql.sources.partitionColumnTypeInference.enabled", None
    if keys:
        previous = spark.conf.get(inference, "true")
        spark.conf.set(inference, "false")
    try:
        df = spark.read.format("geoparquet").option("basePath", str(folder)).load([str(f) for f in files])
    finally:
        if previous is not None:
            spark.conf.set(inference, previous)
    for key, arrow in keys.items():
        if arrow == "int32":
            df = df.withColumn(key, F.col(f"`{key}`").cast("int"))
    rank_of = {f.resolve(): n for n, f in enumerate(files)}
    ranks: list[tuple[str, int]] = []
    for uri in df.inputFiles():
        local = Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path)).resolve()
        if local not in rank_of:
            raise EngineError(
                f"Spark listed a file of {folder.name} that is not one of its parts: {local.name}",
                code="SPARK_PARTS_MISMATCH",
                evidence={"dataset": folder.name, "file": local.name},
                hint="this is a bug in the Spark engine adapter; run with MAPSMITH_STACK=opensource meanwhile",
            )
        ranks.append((_spark_key(uri), rank_of[local]))
    if len(ranks) != len(files):
        raise EngineError(
            f"Spark read {len(ranks)} files of {folder.name}, which has {len(files)} parts",
            code="SPARK_PARTS_MISMATCH",
            evidence={"dataset": folder.name, "read": len(ranks), "parts": len(files)},
            hint="this is a bug in the Spark engine adapter; run with MAPSMITH_STACK=opensource meanwhile",
        )
    listing = spark.createDataFrame(ranks, f"__file string, {PART_RANK} int")
    # The id is taken before the join: a broadcast join keeps each task's rows in their order, but the id
    # must describe the scan, not whatever plan comes after it.
    # One projection straight on the scan, where the hidden _metadata column resolves.
    df = df.select(
        "*",
        F.monotonically_increasing_id().alias("__in_part"),
        F.regexp_replace(F.col("_metadata.file_path"), r"^file:/+", "").alias("__file"),
    )
    df = df.join(F.broadcast(listing), "__file", "left")
    columns = [c for c in df.columns if c not in ("__file", "__in_part", PART_RANK)]
    return df.select(*[F.col(f"`{c}`") for c in columns], F.struct(PART_RANK, "__in_part").alias(row_column))


def write_parts(df: Any, order: list[str], target: Path, crs_json: str, parts_wanted: int) -> int:
    """Write ``df`` as parts into the folder ``target`` (which must not exist yet, or be empty), rows in
    ``order`` across the listing; returns how many parts were written."""
    from mapsmith import parts

    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()  # Spark's errorifexists refuses even an empty folder
    out = df.repartitionByRange(max(parts_wanted, 1), *order).sortWithinPartitions(*order).drop(*order)
    out.write.format("geoparquet").option("geoparquet.crs", crs_json).mode("errorifexists").save(str(target))
    return len(parts.part_files(target))
