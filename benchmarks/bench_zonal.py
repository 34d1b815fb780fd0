"""Zonal statistics at scale: 10,000 polygons over a 10,000 x 10,000 float32 raster.

The issue's target: peak memory under 1.5 GB, and at least 10x faster than a naive per-polygon
``rasterio.mask`` loop. Four things are measured, each in a fresh process so each peak RSS
(``common.own_peak_rss_mib`` of that process, imports included) is its own, and each timed twice: the work alone
and the whole process, spawn to exit:

* **MapSmith**: ``MapSmith(environ).run("zonal_statistics", ...)`` with mean, min, max and count,
  GeoParquet zones in and GeoParquet out: checks, engine, output checks, digests, manifest.
* **exactextract alone**: the same zones read with ``geopandas.read_parquet``, one
  ``exactextract.exact_extract(raster, zones, ["mean", "min", "max", "count"], output="pandas")``
  call (reading the raster through rasterio, windowed), the results joined to the zones and written
  with ``to_parquet``: the engine as a user would call it, for MapSmith's overhead ratio.
* **SedonaDB alone**: the zones read by SedonaDB, ``RS_ZonalStatsAll`` of each over the raster as ``RS_FromPath``
  opens it, written with ``to_parquet``: the other raw engine that does zonal statistics here. It counts the cells
  whose centre is inside (Apache Sedona's default), as the naive loop does, so its means are compared with the
  naive loop's and reported against MapSmith's, not required to equal them.
* **naive loop**: for each polygon, ``rasterio.mask.mask(src, [geom], crop=True)`` then numpy's
  masked mean, min and max (cells whose centre is inside). Timed on a deterministic subset (every
  k-th polygon) and extrapolated linearly to all of them unless ``--naive-polygons`` equals the
  polygon count; the results say which.

MapSmith, exactextract and SedonaDB run interleaved (A, B, C, A ...), the median of ``--runs`` each; the naive
loop runs once. Their means are compared: MapSmith and exactextract must agree to rounding; the
naive loop counts whole cells by their centres where the others weight partly covered cells by the
covered fraction, so its difference is reported, not required to vanish.

Writes ``benchmarks/results/raster_zonal.json`` (``benchmarks/render.py`` turns results into
``docs/benchmarks.md``). It measures only: it never asserts -- whether a target was met is recorded.

    python benchmarks/bench_zonal.py --workdir /tmp/zbench
    python benchmarks/bench_zonal.py --size 2000 --polygons 500 --runs 1 --output-dir /tmp/smoke
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
from common import code_state, machine

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS_DIR = HERE / "results"
NAME = "raster_zonal"
DEFAULT_SIZE = 10_000  # cells a side
DEFAULT_POLYGONS = 10_000
DEFAULT_RUNS = 3
DEFAULT_NAIVE_POLYGONS = DEFAULT_POLYGONS  # all of them: about a minute here, so no extrapolation
CELL_METRES = 10.0
ORIGIN = (400_000.0, 4_400_000.0)  # top-left corner, UTM zone 10N (northern California)
CRS = "EPSG:32610"
NODATA = -9999.0
BLOCK = 256
SEED = 0
# Each polygon spans this many cells across (a square, or a hexagon of that width).
SPAN_CELLS = (20, 100)
STATISTICS = "mean,min,max,count"
TARGET_PEAK_MIB = 1536
TARGET_SPEEDUP = 10
# The engines that could be asked for zonal statistics and are not, and why.
NOT_RUN = {
    "duckdb": "DuckDB Spatial has no raster type",
    "spark": "Apache Sedona on Spark has RS_ZonalStats, over the raster read whole into one row or as tiles whose "
    "per-zone statistics must then be combined; not written or measured yet",
}
ENGINE_IMPORTS = ("numpy", "rasterio", "rasterio.mask", "geopandas", "shapely", "pyproj", "pyogrio", "pyarrow.parquet")


# -- data -----------------------------------------------------------------------------------------


def make_raster(path: Path, size: int, seed: int = SEED) -> None:
    """``size`` x ``size`` float32 cells, tiled 256 x 256, DEFLATE: a smooth surface plus noise,
    written a strip of tiles at a time so the writer never holds the whole grid."""
    import numpy as np
    import rasterio
    from affine import Affine
    from rasterio.windows import Window

    rng = np.random.default_rng(seed)
    profile = {
        "driver": "GTiff",
        "width": size,
        "height": size,
        "count": 1,
        "dtype": "float32",
        "crs": CRS,
        "transform": Affine(CELL_METRES, 0, ORIGIN[0], 0, -CELL_METRES, ORIGIN[1]),
        "nodata": NODATA,
        "tiled": True,
        "blockxsize": BLOCK,
        "blockysize": BLOCK,
        "compress": "deflate",
        "BIGTIFF": "IF_SAFER",
    }
    cols = np.arange(size, dtype="float64")
    with rasterio.Env(GDAL_PAM_ENABLED="NO"), rasterio.open(path, "w", **profile) as dst:
        for row in range(0, size, BLOCK):
            rows = np.arange(row, min(row + BLOCK, size), dtype="float64")[:, None]
            surface = 500 + 300 * np.sin(rows / 700) * np.cos(cols / 900) + 0.01 * (rows + cols)
            noise = rng.normal(0, 5, (len(rows), size))
            dst.write((surface + noise).astype("float32"), 1, window=Window(0, row, size, len(rows)))


def make_zones(path: Path, count: int, size: int, seed: int = SEED + 1) -> None:
    """``count`` polygons scattered over the raster, alternately axis-aligned squares and hexagons,
    20 to 100 cells across, their edges off the cell boundaries; GeoParquet with ``zone_id``."""
    import geopandas as gpd
    import numpy as np
    import shapely

    rng = np.random.default_rng(seed)
    span = rng.uniform(*SPAN_CELLS, count) * CELL_METRES
    extent = size * CELL_METRES
    cx = ORIGIN[0] + rng.uniform(span / 2, extent - span / 2)
    cy = ORIGIN[1] - rng.uniform(span / 2, extent - span / 2)
    geoms = []
    angles = np.linspace(0, 2 * np.pi, 7)[:-1]
    for i in range(count):
        half = span[i] / 2
        if i % 2 == 0:
            geoms.append(shapely.box(cx[i] - half, cy[i] - half, cx[i] + half, cy[i] + half))
        else:
            geoms.append(
                shapely.Polygon(np.column_stack([cx[i] + half * np.cos(angles), cy[i] + half * np.sin(angles)]))
            )
    frame = gpd.GeoDataFrame({"zone_id": np.arange(count, dtype="int64")}, geometry=geoms, crs=CRS)
    frame.to_parquet(path, index=False)


# -- what runs in each fresh process --------------------------------------------------------------


def _import_engines() -> None:
    import importlib

    for name in ENGINE_IMPORTS:
        importlib.import_module(name)
    importlib.import_module("exactextract")


def child_mapsmith(spec: dict[str, Any]) -> dict[str, Any]:
    _import_engines()
    start = time.perf_counter()
    from mapsmith.app import MapSmith

    app = MapSmith({"MAPSMITH_WORKSPACE": spec["workspace"]})
    setup = time.perf_counter() - start
    arguments = {
        "input_path": spec["zones"],
        "raster_path": spec["raster"],
        "statistics": STATISTICS,
        "output_path": spec["output"],
    }
    return common.run_mapsmith(app, "zonal_statistics", arguments, setup)[0]


def child_exactextract(spec: dict[str, Any]) -> dict[str, Any]:
    """The engine called the way MapSmith's adapter calls it (WKB features in block order, plain reads, a
    64 MiB block cache), without MapSmith's checks, digests or manifest."""
    _import_engines()
    import geopandas as gpd
    import rasterio
    import shapely
    from exactextract import exact_extract

    from mapsmith_opensource import zonal_ops

    t0 = time.perf_counter()
    zones = gpd.read_parquet(spec["zones"])
    t1 = time.perf_counter()
    with rasterio.Env(GDAL_CACHEMAX=zonal_ops.GDAL_CACHE_BYTES), rasterio.open(spec["raster"]) as ds:
        order = zonal_ops._processing_order(zones, ds, 1)
        features = zonal_ops._feature_source(
            zones["zone_id"].to_numpy()[order].tolist(),
            shapely.to_wkb(zones.geometry.values[order]).tolist(),
            zones.crs.to_wkt(),
        )
        stats = exact_extract(
            zonal_ops._raster_source(ds, 1), features, STATISTICS.split(","), include_cols=["zone_id"], output="pandas"
        )
    t2 = time.perf_counter()
    out = zones.merge(stats, on="zone_id", how="left")
    out.to_parquet(spec["output"], index=False)
    t3 = time.perf_counter()
    return {"seconds": t3 - t0, "setup_seconds": 0.0, "phases": {"read": t1 - t0, "engine": t2 - t1, "write": t3 - t2}}


def child_exactextract_default(spec: dict[str, Any]) -> dict[str, Any]:
    """The engine's documented one-call form: a path and a GeoDataFrame, zones in file order."""
    _import_engines()
    import geopandas as gpd
    from exactextract import exact_extract

    t0 = time.perf_counter()
    zones = gpd.read_parquet(spec["zones"])
    t1 = time.perf_counter()
    stats = exact_extract(spec["raster"], zones, STATISTICS.split(","), include_cols=["zone_id"], output="pandas")
    t2 = time.perf_counter()
    out = zones.merge(stats, on="zone_id", how="left")
    out.to_parquet(spec["output"], index=False)
    t3 = time.perf_counter()
    return {"seconds": t3 - t0, "setup_seconds": 0.0, "phases": {"read": t1 - t0, "engine": t2 - t1, "write": t3 - t2}}


def child_naive(spec: dict[str, Any]) -> dict[str, Any]:
    _import_engines()
    import geopandas as gpd
    import pandas as pd
    import rasterio
    from rasterio.mask import mask

    zones = gpd.read_parquet(spec["zones"])
    subset = zones.iloc[:: spec["every"]]
    t0 = time.perf_counter()
    rows = []
    with rasterio.open(spec["raster"]) as src:
        for zone_id, geom in zip(subset["zone_id"], subset.geometry, strict=True):
            data, _ = mask(src, [geom], crop=True, filled=False)
            values = data[0]
            rows.append(
                (int(zone_id), float(values.mean()), float(values.min()), float(values.max()), int(values.count()))
            )
    seconds = time.perf_counter() - t0
    frame = pd.DataFrame(rows, columns=["zone_id", "mean", "min", "max", "count"])
    frame.to_parquet(spec["output"], index=False)
    return {"seconds": seconds, "setup_seconds": 0.0, "polygons_timed": len(subset)}


def sedonadb_zonal_sql(raster: str) -> str:
    """Every zone's statistics by SedonaDB's RS_ZonalStatsAll over the raster as RS_FromPath opens it (band 1, the
    cells whose centre is inside, nodata left out: Apache Sedona's defaults)."""
    path = raster.replace("'", "''")
    return (
        "SELECT zone_id, s['mean'] AS mean, s['min'] AS min, s['max'] AS max, s['count'] AS count, geometry FROM ("
        "SELECT z.zone_id AS zone_id, z.geometry AS geometry, RS_ZonalStatsAll(r.raster, z.geometry) AS s "
        f"FROM zones AS z CROSS JOIN (SELECT RS_FromPath('{path}') AS raster) AS r)"
    )


def child_sedonadb(spec: dict[str, Any]) -> dict[str, Any]:
    """SedonaDB alone: the zones read from GeoParquet, RS_ZonalStatsAll per zone, written as Parquet."""
    start = time.perf_counter()
    import sedonadb

    sd = sedonadb.connect()
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    sd.read_parquet(spec["zones"]).to_view("zones")
    sd.sql(sedonadb_zonal_sql(spec["raster"])).to_parquet(spec["output"])
    return {"seconds": time.perf_counter() - t0, "setup_seconds": setup}


CHILDREN = {
    "mapsmith": child_mapsmith,
    "sedonadb": child_sedonadb,
    "exactextract": child_exactextract,
    "exactextract_default": child_exactextract_default,
    "naive": child_naive,
}


def child_main(role: str, spec_json: str) -> int:
    return common.child_main(CHILDREN, role, spec_json)


def spawn(role: str, spec: dict[str, Any]) -> dict[str, Any]:
    return common.spawn(__file__, role, spec)


# -- the parent -----------------------------------------------------------------------------------


def _series(what: str, runs: list[dict[str, Any]], scale: float = 1.0) -> dict[str, Any]:
    times = [r["seconds"] * scale for r in runs]
    rss = [r["peak_rss_mib"] for r in runs]
    return {
        "what": what,
        "median_seconds": round(statistics.median(times), 3),
        "min_seconds": round(min(times), 3),
        "max_seconds": round(max(times), 3),
        "runs_seconds": [round(t, 3) for t in times],
        "peak_rss_mib": round(max(rss)),
        "peak_rss_mib_runs": [round(m) for m in rss],
        # spawn to exit; not scaled up with an extrapolated loop's work (start-up does not grow with the polygons)
        "median_process_seconds": (
            round(statistics.median(r["process_seconds"] for r in runs), 3) if scale == 1.0 else None
        ),
        "runs_process_seconds": [round(r["process_seconds"], 3) for r in runs],
    }


def machine_record(load_before: float) -> dict[str, Any]:
    import rasterio

    engines = ("exactextract", "sedonadb", "rasterio", "numpy", "geopandas", "shapely", "pyproj", "pyogrio", "pyarrow")
    record = machine(engines, {"GDAL": rasterio.__gdal_version__})
    return {**record, "load_average_1min": {"before": round(load_before, 2), "after": None}}


def _means(path: Path, column: str) -> Any:
    import pandas as pd

    frame = pd.read_parquet(path, columns=["zone_id", column])
    return frame.set_index("zone_id")[column].astype("float64")


def agreement(work: Path, naive_every: int) -> dict[str, Any]:
    import numpy as np

    mapsmith = _means(work / "zonal-mapsmith.parquet", "zonal_mean")
    engine = _means(work / "zonal-exactextract.parquet", "mean")
    default = _means(work / "zonal-exactextract_default.parquet", "mean")
    sedona = _means(work / "zonal-sedonadb.parquet", "mean")
    naive = _means(work / "zonal-naive.parquet", "mean")
    engine_diff = np.abs(mapsmith - engine.reindex(mapsmith.index))
    default_diff = np.abs(mapsmith - default.reindex(mapsmith.index))
    naive_diff = np.abs(mapsmith.reindex(naive.index) - naive)
    sedona_diff = np.abs(mapsmith - sedona.reindex(mapsmith.index))
    sedona_naive = np.abs(sedona.reindex(naive.index) - naive)
    return {
        "max_abs_mean_difference": {
            "mapsmith_vs_exactextract": float(np.nanmax(engine_diff.to_numpy())),
            "mapsmith_vs_exactextract_default_call": float(np.nanmax(default_diff.to_numpy())),
            "mapsmith_vs_naive": float(np.nanmax(naive_diff.to_numpy())),
            "mapsmith_vs_sedonadb": float(np.nanmax(sedona_diff.to_numpy())),
            "sedonadb_vs_naive": float(np.nanmax(sedona_naive.to_numpy())),
        },
        "mean_abs_mean_difference_vs_naive": float(np.nanmean(naive_diff.to_numpy())),
        "zones_compared": {"exactextract": int(engine_diff.notna().sum()), "naive": int(naive_diff.notna().sum())},
        "naive_subset": f"every {naive_every}th polygon",
        "why_naive_differs": "the naive loop averages whole cells whose centre lies inside the polygon; MapSmith and "
        "exactextract weight every touched cell by the fraction of it covered",
    }


def bench(work: Path, size: int, polygons: int, runs: int, naive_polygons: int, command: str) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    raster, zones = work / "raster.tif", work / "zones.parquet"
    samples: dict[str, list[dict[str, Any]]] = {"mapsmith": [], "exactextract": [], "sedonadb": []}
    order = []
    for i in range(runs):
        for role in samples:
            out = work / f"zonal-{role}.parquet"
            for stale in (out, out.with_name(out.name + ".provenance.json")):
                stale.unlink(missing_ok=True)
            local = role == "mapsmith"
            spec = {
                "workspace": str(work),
                "raster": raster.name if local else str(raster),
                "zones": zones.name if local else str(zones),
                "output": out.name if local else str(out),
            }
            answer = spawn(role, spec)
            samples[role].append(answer)
            order.append(role)
            print(
                f"  {role:12s} run {i + 1}: work {answer['seconds']:.2f} s, process {answer['process_seconds']:.2f} s, "
                f"peak {answer['peak_rss_mib']:.0f} MiB"
            )
    default_out = work / "zonal-exactextract_default.parquet"
    default = spawn(
        "exactextract_default",
        {"workspace": str(work), "raster": str(raster), "zones": str(zones), "output": str(default_out)},
    )
    print(f"  exactextract, default call: {default['seconds']:.2f} s, peak {default['peak_rss_mib']:.0f} MiB")
    every = max(polygons // max(naive_polygons, 1), 1)
    naive = spawn(
        "naive",
        {
            "workspace": str(work),
            "raster": str(raster),
            "zones": str(zones),
            "output": str(work / "zonal-naive.parquet"),
            "every": every,
        },
    )
    extrapolation = polygons / naive["polygons_timed"]
    print(
        f"  naive loop: {naive['seconds']:.2f} s for {naive['polygons_timed']} polygons "
        f"(x {extrapolation:g} = {naive['seconds'] * extrapolation:.1f} s), peak {naive['peak_rss_mib']:.0f} MiB"
    )
    agree = agreement(work, every)
    ms = _series(
        "MapSmith run('zonal_statistics', mean,min,max,count): checks, engine, output checks, digests, manifest",
        samples["mapsmith"],
    )
    ee = _series(
        "exactextract alone, called as MapSmith calls it (WKB zones in block order, plain reads, 64 MiB block "
        "cache): read_parquet -> exact_extract(mean,min,max,count) -> merge -> to_parquet",
        samples["exactextract"],
    )
    sd = _series(
        "SedonaDB alone: read_parquet -> RS_ZonalStatsAll(RS_FromPath(raster), zone) per zone (cells whose centre "
        "is inside) -> to_parquet",
        samples["sedonadb"],
    )
    ed = _series(
        "exactextract alone, its documented one-call form (raster path, GeoDataFrame in file order, GDAL's "
        "default cache), one run: read_parquet -> exact_extract -> merge -> to_parquet",
        [default],
    )
    nv = _series(
        f"naive loop: rasterio.mask.mask(crop=True) + numpy mean/min/max per polygon, timed on "
        f"{naive['polygons_timed']} polygons and extrapolated x {extrapolation:g}"
        if extrapolation != 1
        else "naive loop: rasterio.mask.mask(crop=True) + numpy mean/min/max per polygon, all polygons",
        [naive],
        scale=extrapolation,
    )
    speedup = round(nv["median_seconds"] / ms["median_seconds"], 2)
    overhead = round(ms["median_seconds"] / ee["median_seconds"], 3)
    process_overhead = round(ms["median_process_seconds"] / ee["median_process_seconds"], 3)
    vs_sedonadb = round(ms["median_seconds"] / sd["median_seconds"], 3)
    process_vs_sedonadb = round(ms["median_process_seconds"] / sd["median_process_seconds"], 3)
    peak = max(ms["peak_rss_mib"], 0)
    result = {
        "benchmark": NAME,
        "command": command,
        "date": dt.date.today().isoformat(),
        "machine": machine_record(load_before),
        "code": code_state(),
        "process": "a fresh Python process per run; engines imported (SedonaDB connected) before the work's clock "
        "starts on every side, the whole process timed from spawn to exit; MapSmith, exactextract and SedonaDB "
        "interleaved",
        "description": f"zonal_statistics ({STATISTICS}) of {polygons:,} polygons over a {size:,} x {size:,} float32 "
        "raster (tiled 256 x 256, DEFLATE), against exactextract alone, SedonaDB's RS_ZonalStatsAll and a naive "
        "per-polygon rasterio.mask loop",
        "input": {
            "raster_width": size,
            "raster_height": size,
            "dtype": "float32",
            "polygons": polygons,
            "raster_bytes": raster.stat().st_size,
            "cell_metres": CELL_METRES,
            "crs": CRS,
            "tiling": f"{BLOCK} x {BLOCK}, DEFLATE",
            "polygon_span_cells": list(SPAN_CELLS),
            "polygon_shapes": "alternately axis-aligned squares and hexagons",
            "seed": SEED,
        },
        "runs": runs,
        "order": order,
        "peak_rss_method": samples["mapsmith"][0]["peak_rss_method"],
        "series": [ms, ee, sd, ed, nv],
        "naive": {
            "polygons_timed": naive["polygons_timed"],
            "seconds_timed": round(naive["seconds"], 3),
            "extrapolation_factor": extrapolation,
            "extrapolated": extrapolation != 1,
        },
        "not_run": NOT_RUN,
        "mapsmith_status": samples["mapsmith"][0]["status"],
        "mapsmith_failed_checks": samples["mapsmith"][0]["failed_checks"],
        "ratios": {
            "speedup_vs_naive": speedup,
            "overhead_vs_engine": overhead,
            "process_overhead_vs_engine": process_overhead,
            "vs_sedonadb": vs_sedonadb,
            "process_vs_sedonadb": process_vs_sedonadb,
        },
        "targets": {
            "peak_memory_under_mib": TARGET_PEAK_MIB,
            "met_memory": peak < TARGET_PEAK_MIB,
            "speedup_at_least": TARGET_SPEEDUP,
            "met_speedup": speedup >= TARGET_SPEEDUP,
        },
        "agreement": agree,
    }
    result["machine"]["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="raster cells a side (default 10,000)")
    parser.add_argument("--polygons", type=int, default=DEFAULT_POLYGONS, help="zones (default 10,000)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs of MapSmith and exactextract (default 3)")
    parser.add_argument(
        "--naive-polygons",
        type=int,
        default=DEFAULT_NAIVE_POLYGONS,
        help="polygons the naive loop times (default: all)",
    )
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR, help=f"where to write (default {RESULTS_DIR})")
    parser.add_argument("--workdir", type=Path, default=None, help="where the data goes (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data in the workdir afterwards")
    args = parser.parse_args(argv)
    if min(args.size, args.polygons, args.runs, args.naive_polygons) < 1:
        parser.error("--size, --polygons, --runs and --naive-polygons must be at least 1")
    command = "python benchmarks/bench_zonal.py" + "".join(
        f" {flag} {value}"
        for flag, value, default in (
            ("--size", args.size, DEFAULT_SIZE),
            ("--polygons", args.polygons, DEFAULT_POLYGONS),
            ("--runs", args.runs, DEFAULT_RUNS),
            ("--naive-polygons", args.naive_polygons, DEFAULT_NAIVE_POLYGONS),
        )
        if value != default
    )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mapsmith-bench-zonal-", dir=args.workdir)).resolve()
    try:
        started = time.perf_counter()
        make_raster(work / "raster.tif", args.size)
        make_zones(work / "zones.parquet", args.polygons, args.size)
        print(f"data written in {time.perf_counter() - started:.1f} s to {work}")
        result = bench(work, args.size, args.polygons, args.runs, args.naive_polygons, command)
        path = args.output_dir / f"{NAME}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        ms, ee, sd, _, nv = result["series"]
        print(
            f"zonal: MapSmith median {ms['median_seconds']:.2f} s (peak {ms['peak_rss_mib']} MiB), exactextract "
            f"{ee['median_seconds']:.2f} s, SedonaDB {sd['median_seconds']:.2f} s, naive {nv['median_seconds']:.1f} s; "
            "speedup "
            f"{result['ratios']['speedup_vs_naive']}x (target >= {TARGET_SPEEDUP}: "
            f"{'met' if result['targets']['met_speedup'] else 'NOT met'}), memory target "
            f"{'met' if result['targets']['met_memory'] else 'NOT met'}; overhead "
            f"{result['ratios']['overhead_vs_engine']}x; wrote {path}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
