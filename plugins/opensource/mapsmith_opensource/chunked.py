"""Shapely's vectorised functions on every core: a large array split into chunks, a thread for each.

Shapely 2 releases the GIL inside its vectorised functions (GEOS does the work in C), so threads run them
side by side; each element's result depends on that element alone, so the chunks' results put back in
order are the single call's, element for element (tests/vector/test_chunked.py holds that to identical
WKB). Written here because shapely has no parallel map of its own; ``concurrent.futures`` does the
threading. Used where a million-feature call dominates a run: buffer_layer's buffers and the GeoParquet
writer's WKB (``apply``), nearest_join's planar search (``apply_indexed``, whose answer holds positions in the
array) and dissolve_layer's unions, one per group (``map_each``). Measured for issue 22: buffer_layer on
benchmarks/scale_data.py's 1,000,000 points, 50 m, whole MapSmith runs on 2 cores, load average 1.1-1.2, two runs
each, interleaved: 37.9 and 37.6 s of wall time on two threads against 49.4 and 49.9 s on one (54 against 51 CPU
seconds).

What this module must never do: change a result, reorder elements, or start threads for a small array.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# One thread per core this process may use: the same count the digests use.
from mapsmith.provenance.digests import digest_workers as workers

# Below this many elements a chunk's thread costs more than it saves.
MIN_CHUNK = 50_000


def apply(func: Callable[..., Any], geoms: Any, *args: Any, **kwargs: Any) -> Any:
    """``func(geoms, *args, **kwargs)`` for a shapely vectorised ``func`` whose result has one element per
    element of ``geoms`` (a 1-D object array), computed in chunks on ``workers()`` threads."""
    import numpy as np

    geoms = np.asarray(geoms, dtype=object)
    count = min(workers(), len(geoms) // MIN_CHUNK)
    if count < 2:
        return func(geoms, *args, **kwargs)
    chunks = np.array_split(geoms, count)
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="mapsmith-shapely") as pool:
        parts = list(pool.map(lambda chunk: func(chunk, *args, **kwargs), chunks))
    return np.concatenate(parts)


def apply_indexed(func: Callable[..., Any], geoms: Any, threads: int | None = None) -> tuple[Any, ...]:
    """``func(geoms)`` for a ``func`` that answers a tuple of arrays of equal length whose first holds positions in
    ``geoms`` in increasing order (an STRtree query's input rows): computed on consecutive chunks on ``workers()``
    threads (``threads``: how many), each chunk's positions moved back to the whole array's, the arrays put back
    in order, so the answer is the single call's, element for element."""
    import numpy as np

    geoms = np.asarray(geoms, dtype=object)
    count = min(workers(), len(geoms) // MIN_CHUNK) if threads is None else min(threads, len(geoms))
    if count < 2:
        return tuple(func(geoms))
    starts = [int(c[0]) for c in np.array_split(np.arange(len(geoms)), count)]
    bounds = [*starts, len(geoms)]

    def run(k: int) -> tuple[Any, ...]:
        found = tuple(func(geoms[bounds[k] : bounds[k + 1]]))
        return (found[0] + bounds[k], *found[1:])

    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="mapsmith-shapely") as pool:
        parts = list(pool.map(run, range(count)))
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(len(parts[0])))


def map_each(func: Callable[[Any], Any], items: list[Any], threads: int | None = None) -> list[Any]:
    """``[func(item) for item in items]`` on ``workers()`` threads (``threads``: how many), in the items' order: for a
    few large independent shapely calls, such as one union per group."""
    count = min(threads or workers(), len(items))
    if count < 2:
        return [func(item) for item in items]
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="mapsmith-shapely") as pool:
        return list(pool.map(func, items))
