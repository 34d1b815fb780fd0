"""The seeded data the scale and goal benchmarks run on: points, zones, sites, parcels and a mask, as GeoParquet.

Everything is generated in chunks of ``CHUNK`` rows with one seed per chunk, so the same size always gives
the same bytes and the generator's memory stays that of one chunk however many points are asked for (the
100-million-point cluster run writes a partitioned folder, one part per chunk). It must never time
anything or call MapSmith: the benchmarks measure, this only writes their inputs.

The extent, CRS, seed and the 10,000 zones are ``bench_vector``'s, so every page's figures share one data set.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bench_vector

CHUNK = 1_000_000  # rows generated and written at a time
SITES = 2_000  # candidate points for nearest_join: about one per 20 km², so ties are practically impossible
PARCELS_PER_POINT = 0.1  # dissolve and overlay run on a square grid of points/10 parcels
PARCEL_BANDS = 50  # dissolve groups: horizontal bands of grid rows
MASK_RADIUS_METERS = 60_000.0  # clip_layer's mask: one circle around the extent's centre
MASK_SEGMENTS_PER_QUARTER_CIRCLE = 8


def _geo_schema(frame: Any) -> Any:
    """The Arrow schema of ``frame`` with GeoPandas' GeoParquet metadata, minus the bbox of its first rows.

    GeoPandas writes the ``geo`` key (CRS, encoding) that every engine reads; the bbox it records would be
    the first chunk's only, so it is dropped rather than be wrong for the whole file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    one_row = io.BytesIO()
    frame.iloc[:1].to_parquet(one_row, index=False)
    meta = json.loads(pq.read_schema(pa.BufferReader(one_row.getvalue())).metadata[b"geo"])
    meta["columns"]["geometry"].pop("bbox", None)
    table = pa.table(frame.iloc[:1].to_arrow(index=False, geometry_encoding="WKB"))
    return table.schema.with_metadata({b"geo": json.dumps(meta).encode()})


def point_chunks(count: int) -> Iterator[Any]:
    """``count`` points over bench_vector's extent as GeoDataFrames of at most ``CHUNK`` rows (seed per chunk)."""
    import geopandas as gpd
    import numpy as np
    import shapely

    ext = bench_vector.EXTENT
    for start in range(0, count, CHUNK):
        n = min(CHUNK, count - start)
        rng = np.random.default_rng([bench_vector.SEED, start // CHUNK])
        yield gpd.GeoDataFrame(
            {
                "point_id": np.arange(start, start + n, dtype="int64"),
                "value": rng.normal(size=n),
                "kind": rng.choice(np.array(["well", "spring", "gauge"]), n),
            },
            geometry=shapely.points(rng.uniform(ext[0], ext[2], n), rng.uniform(ext[1], ext[3], n)),
            crs=bench_vector.CRS,
        )


def _write_chunks(path: Path, chunks: Iterator[Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    try:
        for frame in chunks:
            if writer is None:
                schema = _geo_schema(frame)
                writer = pq.ParquetWriter(path, schema)
            table = pa.table(frame.to_arrow(index=False, geometry_encoding="WKB"))
            writer.write_table(table.replace_schema_metadata(schema.metadata))
    finally:
        if writer is not None:
            writer.close()


def make_points(path: Path, count: int) -> None:
    """``count`` points in one GeoParquet file, written a chunk at a time."""
    _write_chunks(path, point_chunks(count))


def make_points_parts(folder: Path, count: int) -> list[Path]:
    """``count`` points as a partitioned GeoParquet folder, one part of ``CHUNK`` rows per chunk.

    The parts are the same rows as ``make_points`` would write (same seeds), so a folder and a file of the
    same size hold the same points. Each part is written to a temporary name and renamed when complete,
    so an interrupted run never leaves a truncated part that looks finished.
    """
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for index, frame in enumerate(point_chunks(count)):
        part = folder / f"part-{index:05d}.parquet"
        partial = folder / f".part-{index:05d}.parquet.partial"
        _write_chunks(partial, iter([frame]))
        partial.rename(part)
        parts.append(part)
    return parts


def make_sites(path: Path, count: int = SITES) -> None:
    """``count`` candidate points with a ``site_id``, for nearest_join."""
    import geopandas as gpd
    import numpy as np
    import shapely

    rng = np.random.default_rng([bench_vector.SEED, 7])
    ext = bench_vector.EXTENT
    gpd.GeoDataFrame(
        {"site_id": np.arange(count, dtype="int64")},
        geometry=shapely.points(rng.uniform(ext[0], ext[2], count), rng.uniform(ext[1], ext[3], count)),
        crs=bench_vector.CRS,
    ).to_parquet(path, index=False)


def parcel_grid(count: int) -> tuple[int, float]:
    """Cells per grid row and the cell's side in metres for ``count`` square parcels over the extent."""
    ext = bench_vector.EXTENT
    per_row = max(1, math.ceil(math.sqrt(count)))
    return per_row, (ext[2] - ext[0]) / per_row


def make_parcels(path: Path, count: int) -> None:
    """``count`` edge-sharing square parcels (row by row from the extent's corner) with a ``band`` per row group."""
    import geopandas as gpd
    import numpy as np
    import shapely

    per_row, side = parcel_grid(count)
    ext = bench_vector.EXTENT
    ids = np.arange(count, dtype="int64")
    col, row = ids % per_row, ids // per_row
    rows_per_band = max(1, math.ceil(per_row / PARCEL_BANDS))
    x0, y0 = ext[0] + col * side, ext[1] + row * side
    gpd.GeoDataFrame(
        {"parcel_id": ids, "band": (row // rows_per_band).astype("int64")},
        geometry=shapely.box(x0, y0, x0 + side, y0 + side),
        crs=bench_vector.CRS,
    ).to_parquet(path, index=False)


def make_mask(path: Path) -> None:
    """One circular polygon around the extent's centre, for clip_layer."""
    import geopandas as gpd
    import shapely

    ext = bench_vector.EXTENT
    centre = shapely.Point((ext[0] + ext[2]) / 2, (ext[1] + ext[3]) / 2)
    gpd.GeoDataFrame(
        {"mask_id": [1]},
        geometry=[centre.buffer(MASK_RADIUS_METERS, quad_segs=MASK_SEGMENTS_PER_QUARTER_CIRCLE)],
        crs=bench_vector.CRS,
    ).to_parquet(path, index=False)


def make_inputs(work: Path, points: int, polygons: int, needed: set[str]) -> dict[str, int]:
    """Write the inputs ``needed`` (by stem) into ``work``; their feature counts."""
    counts: dict[str, int] = {}
    if "points" in needed:
        make_points(work / "points.parquet", points)
        counts["points"] = points
    if "zones" in needed and not (work / "zones.parquet").exists():
        bench_vector.make_zones(work / "zones.parquet", polygons)
    if "zones" in needed:
        counts["zones"] = polygons
    if "sites" in needed:
        make_sites(work / "sites.parquet")
        counts["sites"] = SITES
    if "parcels" in needed:
        n = max(1, int(points * PARCELS_PER_POINT))
        make_parcels(work / "parcels.parquet", n)
        counts["parcels"] = n
    if "mask" in needed:
        make_mask(work / "mask.parquet")
        counts["mask"] = 1
    return counts
