"""SedonaDB against GeoPandas and DuckDB on one spatial_join, in one process: the number behind the router's threshold.

1,000,000 seeded random points x 10,000 polygons in EPSG:32610 (bench_vector's data, same seed),
GeoParquet in and out, predicate intersects, how=left. Two levels, each the median of ``--runs``
timed runs (default 3) after one untimed warm-up run that pays the imports and engine start-up
(recorded apart as ``warmup_seconds``):

* ``mapsmith``: the whole MapSmith ``spatial_join`` run -- checks, manifest and all -- with each
  engine forced in turn (the other engines' registrations removed, as tests/vector/test_engine_parity.py
  does, and SedonaDB's threshold set to 0). The runs are interleaved (A, B, C, A, B, C ...).
* ``pair_search``: only the search for matching (point, polygon) pairs, on geometries already in
  memory: shapely's STRtree (the GeoPandas engine's count_in_polygons), ``sedonadb_ops.sedonadb_pairs``
  (the SedonaDB engine's), and DuckDB Spatial's join on the same two GeoParquet files.

Every engine must give the same pairs (a digest of the sorted pairs is recorded per engine). In-process
timings share one heap, so no peak memory is reported here (bench_vector.py measures it per process).
Writes ``benchmarks/results/sedona.json``; measures only, never asserts.

    python benchmarks/bench_sedona.py [--features 1000000] [--polygons 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_vector  # noqa: E402  (the data generators, beside this script)
from common import code_state, machine  # noqa: E402

RESULTS = HERE / "results" / "sedona.json"
ENGINES = ("geopandas", "duckdb", "sedonadb")
DEFAULT_RUNS = 3


def _digest(left: Any, right: Any) -> str:
    import numpy as np

    order = np.lexsort((right, left))
    pairs = np.stack([np.asarray(left)[order], np.asarray(right)[order]]).astype(np.int64)
    return hashlib.sha256(pairs.tobytes()).hexdigest()[:16]


def _forced_app(workspace: Path, engine: str) -> Any:
    """A service whose only spatial_join engine is ``engine`` (registrations are read when it is built)."""
    from mapsmith.app import MapSmith
    from mapsmith_opensource import OPERATION_MODULES

    modules = [importlib.import_module(f"mapsmith_opensource.{m}") for m in OPERATION_MODULES]
    saved = {m: m.REGISTRATIONS for m in modules}
    try:
        for m in modules:
            m.REGISTRATIONS = tuple(r for r in m.REGISTRATIONS if r.operation != "spatial_join" or r.engine == engine)
        return MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_SEDONADB_MIN_FEATURES": "0"})
    finally:
        for m, regs in saved.items():
            m.REGISTRATIONS = regs


def _mapsmith_run(app: Any, engine: str, n: int) -> tuple[float, dict[str, Any]]:
    output = f"joined_{engine}_{n}.parquet"
    start = time.perf_counter()
    result = app.run(
        "spatial_join",
        {"input_path": "points.parquet", "join_path": "zones.parquet", "how": "left", "output_path": output},
    )
    seconds = time.perf_counter() - start
    assert result.engine["name"] == engine, result.engine
    answer = {k: result.answer[k] for k in ("matched_pairs", "output_features", "input_features_unmatched")}
    for path in app.workspace.root.glob(f"{output}*"):
        path.unlink()  # keep the disk small; each run writes afresh
    return seconds, answer


def bench_mapsmith(workspace: Path, runs: int) -> dict[str, Any]:
    from mapsmith_opensource.join_ops import spatial_join_duckdb

    spatial_join_duckdb.DUCKDB_MIN_ROWS = 0  # forced, as SedonaDB is: matters only for small smoke runs
    apps = {engine: _forced_app(workspace, engine) for engine in ENGINES}
    out: dict[str, Any] = {}
    for engine in ENGINES:
        seconds, answer = _mapsmith_run(apps[engine], engine, 0)
        out[engine] = {"warmup_seconds": round(seconds, 3), "answer": answer, "runs_seconds": []}
    for n in range(1, runs + 1):
        for engine in ENGINES:
            seconds, answer = _mapsmith_run(apps[engine], engine, n)
            assert answer == out[engine]["answer"], (engine, answer)
            out[engine]["runs_seconds"].append(round(seconds, 3))
    for engine in ENGINES:
        out[engine]["median_seconds"] = statistics.median(out[engine]["runs_seconds"])
    return out


def bench_pair_search(workspace: Path, runs: int) -> dict[str, Any]:
    import geopandas as gpd
    import numpy as np
    import shapely

    from mapsmith_opensource import sedonadb_ops
    from mapsmith_opensource.join_ops import spatial_join_duckdb

    points = gpd.read_parquet(workspace / "points.parquet").geometry.values
    zones = gpd.read_parquet(workspace / "zones.parquet").geometry.values
    con = spatial_join_duckdb.duckdb_database().cursor()
    sql = (
        "SELECT p.file_row_number AS i, z.file_row_number AS j "
        f"FROM read_parquet('{workspace / 'points.parquet'}', file_row_number = true) AS p "
        f"JOIN read_parquet('{workspace / 'zones.parquet'}', file_row_number = true) AS z "
        "ON ST_Intersects(p.geometry, z.geometry)"
    )

    def strtree() -> tuple[Any, Any]:
        poly, point = shapely.STRtree(points).query(zones, predicate="intersects")
        return point, poly

    def sedona() -> tuple[Any, Any]:
        poly, point = sedonadb_ops.sedonadb_pairs(zones, points, "intersects")
        return point, poly

    def duckdb() -> tuple[Any, Any]:
        table = con.execute(sql).arrow().read_all()
        return np.asarray(table.column("i")), np.asarray(table.column("j"))

    searches = {"geopandas": strtree, "duckdb": duckdb, "sedonadb": sedona}
    out: dict[str, Any] = {}
    for engine, search in searches.items():
        start = time.perf_counter()
        left, right = search()
        out[engine] = {"warmup_seconds": round(time.perf_counter() - start, 3), "pairs": int(len(left))}
        out[engine]["pairs_sha256_16"] = _digest(left, right)
        out[engine]["runs_seconds"] = []
    for _ in range(runs):
        for engine, search in searches.items():
            start = time.perf_counter()
            search()
            out[engine]["runs_seconds"].append(round(time.perf_counter() - start, 3))
    for engine in searches:
        out[engine]["median_seconds"] = statistics.median(out[engine]["runs_seconds"])
    con.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=bench_vector.DEFAULT_FEATURES)
    parser.add_argument("--polygons", type=int, default=bench_vector.DEFAULT_POLYGONS)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from mapsmith_opensource import sedonadb_ops

    missing = sedonadb_ops.missing_modules()
    if missing:
        raise SystemExit(f"bench_sedona: SedonaDB is not installed ({', '.join(missing)}): {sedonadb_ops.SEDONADB_FIX}")
    with tempfile.TemporaryDirectory(prefix="bench_sedona_") as tmp:
        work = Path(tmp)
        bench_vector.make_points(work / "points.parquet", args.features)
        bench_vector.make_zones(work / "zones.parquet", args.polygons)
        pair_search = bench_pair_search(work, args.runs)
        mapsmith = bench_mapsmith(work, args.runs)
    digests = {e: r["pairs_sha256_16"] for e, r in pair_search.items()}
    answers = {e: r["answer"] for e, r in mapsmith.items()}
    record = {
        "name": "sedona",
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_sedona.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(("geopandas", "shapely", "duckdb", "sedonadb", "geoarrow-pyarrow")),
        "code": code_state(),
        "parameters": {
            "features": args.features,
            "polygons": args.polygons,
            "runs": args.runs,
            "crs": bench_vector.CRS,
            "predicate": bench_vector.PREDICATE,
            "how": bench_vector.JOIN_HOW,
            "seed": bench_vector.SEED,
            "sedonadb_min_features_default": sedonadb_ops.SEDONADB_MIN_FEATURES,
        },
        "pair_search": pair_search,
        "mapsmith_spatial_join": mapsmith,
        "same_pairs": len(set(digests.values())) == 1,
        "same_answers": len({json.dumps(a, sort_keys=True) for a in answers.values()}) == 1,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n", "utf-8")
    for level in ("pair_search", "mapsmith_spatial_join"):
        line = ", ".join(f"{e} {record[level][e]['median_seconds']:.2f} s" for e in ENGINES)
        print(f"{level} (median of {args.runs}): {line}")
    print(f"same pairs: {record['same_pairs']}; same answers: {record['same_answers']}; wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
