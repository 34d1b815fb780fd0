"""Shapely on every core (mapsmith_opensource.chunked) gives the single call's results, element for element.

The chunks are forced small here (MIN_CHUNK 2, four workers) so that a 13-element array of every kind of
geometry, nulls and empties included, is split into four threads' work; each result must equal the single
call's WKB at its own position. buffer_layer and the GeoParquet writer, run with chunks that small, must write
the same file as with one thread (the clean twin is the same run with chunking off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import shapely
from shapely.geometry import LineString, MultiPoint, Point, Polygon, box

from layers import write_layer
from mapsmith_opensource import chunked

MIXED = [
    Point(0, 0),
    None,
    box(0, 0, 3, 4),
    LineString([(0, 0), (10, 0), (10, 5)]),
    Point(),
    MultiPoint([(1, 1), (5, 5)]),
    Polygon([(0, 0), (4, 0), (4, 4), (2, 1), (0, 4)]),
    Point(7, 7),
    box(10, 10, 11, 12),
    LineString(),
    Point(-3, 2),
    Polygon(),
    Point(1e6, 1e6),
]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Chunks of 2 on 4 workers; the list records each thread pool's size."""
    from concurrent import futures

    pools: list[int] = []
    real = futures.ThreadPoolExecutor

    class Counted(real):  # type: ignore[misc,valid-type]
        def __init__(self, max_workers: int, **kwargs: Any) -> None:
            pools.append(max_workers)
            super().__init__(max_workers=max_workers, **kwargs)

    monkeypatch.setattr(chunked, "MIN_CHUNK", 2)
    monkeypatch.setattr(chunked, "workers", lambda: 4)
    monkeypatch.setattr(chunked, "ThreadPoolExecutor", Counted)
    return pools


def test_chunks_give_the_single_calls_results_in_order(small_chunks: list[int]) -> None:
    geoms = np.array(MIXED, dtype=object)
    whole = shapely.to_wkb(shapely.buffer(geoms, 2.5, quad_segs=5), flavor="iso")
    parts = chunked.apply(shapely.to_wkb, chunked.apply(shapely.buffer, geoms, 2.5, quad_segs=5), flavor="iso")
    assert small_chunks == [4, 4]  # both calls ran on four threads
    assert len(parts) == len(whole) == 13
    assert [a == b for a, b in zip(parts, whole, strict=True)] == [True] * 13
    assert parts[1] is None  # the null stays a null, in its place


def test_a_small_array_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a thread pool was started for 13 elements")

    monkeypatch.setattr(chunked, "ThreadPoolExecutor", refuse)
    geoms = np.array(MIXED, dtype=object)
    np.testing.assert_array_equal(chunked.apply(shapely.area, geoms), shapely.area(geoms))  # NaN for the null


def _run_buffer(workspace: Path, make_app: Any, out: str) -> bytes:
    make_app().run("buffer_layer", {"input_path": "in.parquet", "distance_meters": 30, "output_path": out})
    table = pq.read_table(workspace / out)
    return b"".join(v or b"" for v in table.column("geometry").to_pylist())


def test_buffer_layer_writes_the_same_file_chunked(
    make_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 points and squares in UTM 10N buffered by 30 m: the same geometries, one thread or four."""
    rng = np.random.default_rng(7)
    xs, ys = 500_000 + rng.uniform(0, 5_000, 40), 5_000_000 + rng.uniform(0, 5_000, 40)
    shapes = [Point(x, y) if i % 2 else box(x, y, x + 20, y + 10) for i, (x, y) in enumerate(zip(xs, ys, strict=True))]
    write_layer(workspace / "in.parquet", shapes, "EPSG:32610", fid=list(range(40)))
    single = _run_buffer(workspace, make_app, "one.parquet")
    monkeypatch.setattr(chunked, "MIN_CHUNK", 2)
    monkeypatch.setattr(chunked, "workers", lambda: 4)
    assert _run_buffer(workspace, make_app, "four.parquet") == single
    # and the 30 m buffer of a point is the 64-gon's area, 4 x 16 segments: 0.5 x 64 x 30^2 x sin(2 pi / 64)
    area = pq.read_table(workspace / "four.parquet").to_pandas()
    got = shapely.area(shapely.from_wkb(area.loc[area["fid"] == 1, "geometry"].iloc[0]))
    assert got == pytest.approx(0.5 * 64 * 900 * np.sin(2 * np.pi / 64), rel=1e-9)
