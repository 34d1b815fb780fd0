"""Slope on a large DEM: what MapSmith's checks and manifests cost next to Whitebox Workflows and GDAL alone.

The issue's target: slope on a 10,000 x 10,000 float32 raster within 1.5x of calling Whitebox
directly. Both sides read the same file, a deterministic smooth terrain (a sum of sines) in
EPSG:32610 with 10 m cells, written tiled DEFLATE *without* a predictor -- an encoding Whitebox
decodes correctly, so MapSmith hands it over as it is and no re-encoding is timed:

* MapSmith: ``MapSmith(environ).run("slope", {..., "units": "degrees"})`` with
  ``MAPSMITH_WORKSPACE`` set to the work directory: header checks, the read check against GDAL, the
  engine, the edge rings blanked, the output read back for its statistics, digests, the manifest.
* Whitebox alone: ``wbe.read_raster`` -> ``wbe.terrain.slope(input=..., units="degrees")`` ->
  ``wbe.write_raster`` with the options MapSmith's adapter passes (tiled 256, DEFLATE).
* GDAL alone: ``gdaldem slope`` (degrees, Horn's 3 x 3 stencil, GDAL's own default; tiled 256, DEFLATE), the other
  raw engine that computes a slope raster here. Its stencil is not Whitebox's 5 x 5 one, so its values differ a
  little on the same DEM: the largest difference is recorded beside it, and the issue's target stays against
  Whitebox, the engine MapSmith runs. Left out, and named so, where no ``gdaldem`` is on the PATH.

Every run is a fresh process (its peak RSS, ``common.own_peak_rss_mib``, is its own; gdaldem's is the larger of its
Python parent's and the gdaldem process's own); the sides run interleaved (A, B, C, A ...) so a neighbour's burst of
load falls on all alike, and each figure is a median. Each run is timed twice: the work alone (modules are imported
and the ``WbEnvironment`` and the ``MapSmith`` object built before its clock, as a running server does once) and the
whole process, spawn to exit. The two outputs must
hold the same values inside the edge rings MapSmith blanks. One extra MapSmith run under cProfile
says where its time goes.

Writes ``benchmarks/results/raster_slope.json``. It measures only: it never edits the code it
measures and never asserts -- whether the target was met is recorded, not enforced.

    python benchmarks/bench_terrain.py [--size 10000] [--runs 3] [--workdir DIR]
    python benchmarks/bench_terrain.py --size 1000 --runs 1 --output-dir /tmp/smoke
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
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
NAME = "raster_slope"
TARGET_MAX_RATIO = 1.5
DEFAULT_SIZE = 10_000
# Three interleaved runs of each side: a median one burst of load cannot move alone, in about ten
# minutes on two cores at full size.
DEFAULT_RUNS = 3
CRS = "EPSG:32610"
CELL_SIZE_M = 10.0
ORIGIN = (400_000.0, 4_300_000.0)  # top-left corner, northern California in UTM zone 10N
EDGE_CELLS = 2  # the rings MapSmith blanks: Whitebox's 5 x 5 window runs off the grid there
UNITS = "degrees"
WRITE_OPTIONS = {"geotiff": {"compression": "deflate", "layout": "tiled", "tile_size": 256}}
BLOCK_ROWS = 1024
TOP_FUNCTIONS = 12
# The engines that could be asked for a slope and are not, and why.
NOT_RUN = {
    "duckdb": "DuckDB Spatial has no raster type",
    "sedonadb": "SedonaDB 0.5's raster functions (RS_*) have no slope",
    "spark": "Apache Sedona on Spark's raster functions have no slope",
}


# -- data -----------------------------------------------------------------------------------------


def terrain_block(row0: int, rows: int, width: int) -> Any:
    """Elevations of rows ``row0 .. row0 + rows`` : ridges and valleys kilometres long, hills of a few
    hundred metres and ripples of tens, all smooth, so every slope is finite and none is trivial."""
    import numpy as np

    y = (np.arange(row0, row0 + rows, dtype="float64")[:, None] + 0.5) * CELL_SIZE_M
    x = (np.arange(width, dtype="float64")[None, :] + 0.5) * CELL_SIZE_M
    z = (
        800.0
        + 300.0 * np.sin(x / 9_000.0) * np.cos(y / 11_000.0)
        + 60.0 * np.sin(x / 1_300.0 + y / 1_700.0)
        + 8.0 * np.sin(x / 170.0) * np.sin(y / 230.0)
    )
    return z.astype("float32")


def make_dem(path: Path, size: int) -> None:
    """A ``size`` x ``size`` float32 DEM, tiled DEFLATE without a predictor, written in row blocks."""
    import rasterio
    from rasterio.transform import from_origin
    from rasterio.windows import Window

    tmp = path.with_name(path.name + ".part")
    profile = {
        "driver": "GTiff",
        "width": size,
        "height": size,
        "count": 1,
        "dtype": "float32",
        "crs": CRS,
        "transform": from_origin(*ORIGIN, CELL_SIZE_M, CELL_SIZE_M),
        "nodata": -9999.0,
        "compress": "deflate",
        "predictor": 1,
        "tiled": True,
        "blockxsize": 256,
        "blockysize": 256,
        "BIGTIFF": "IF_SAFER",
    }
    with rasterio.Env(GDAL_PAM_ENABLED="NO"), rasterio.open(tmp, "w", **profile) as dst:
        for row in range(0, size, BLOCK_ROWS):
            rows = min(BLOCK_ROWS, size - row)
            dst.write(terrain_block(row, rows, size), 1, window=Window(0, row, size, rows))
    os.replace(tmp, path)


def dem_is_usable(path: Path, size: int) -> bool:
    """A DEM left by an earlier run in ``--workdir`` is reused when it is the one this run would write."""
    if not path.exists():
        return False
    import rasterio

    with rasterio.open(path) as ds:
        return (
            (ds.width, ds.height) == (size, size)
            and ds.dtypes[0] == "float32"
            and (ds.profile.get("compress") or "").lower() == "deflate"
            and ds.tags(ns="IMAGE_STRUCTURE").get("PREDICTOR", "1") == "1"
        )


# -- what runs in each fresh process --------------------------------------------------------------


def _import_engines() -> Any:
    """What every child imports before its clock starts, MapSmith's included: the engines (and the
    libraries MapSmith's checks import on first use) are a cost of any process, paid once by a server."""
    import numpy.random  # noqa: F401
    import pyproj  # noqa: F401
    import rasterio  # noqa: F401
    import whitebox_workflows

    return whitebox_workflows


def child_whitebox(spec: dict[str, Any]) -> dict[str, Any]:
    wbw = _import_engines()
    start = time.perf_counter()
    wbe = wbw.WbEnvironment()
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    dem = wbe.read_raster(spec["input"])
    t1 = time.perf_counter()
    out = wbe.terrain.slope(input=dem, units=UNITS)  # the read is lazy: the decode is timed here
    t2 = time.perf_counter()
    wbe.write_raster(out, spec["output"], options=WRITE_OPTIONS)
    t3 = time.perf_counter()
    del out, dem
    t4 = time.perf_counter()
    phases = {"read": t1 - t0, "read_and_slope": t2 - t1, "write": t3 - t2, "free": t4 - t3}
    return {"seconds": t4 - t0, "setup_seconds": setup, "phases": phases}


def gdaldem_command(source: str, target: str) -> list[str]:
    """``gdaldem slope`` in degrees (its default unit and algorithm), written as MapSmith's adapter writes."""
    tool = shutil.which("gdaldem") or "gdaldem"
    options = ["TILED=YES", "BLOCKXSIZE=256", "BLOCKYSIZE=256", "COMPRESS=DEFLATE"]
    return [tool, "slope", source, target, "-of", "GTiff", "-q", *(x for o in options for x in ("-co", o))]


@functools.cache
def gdaldem_version() -> str | None:
    tool = shutil.which("gdaldem")
    if tool is None:
        return None
    done = subprocess.run([tool, "--version"], capture_output=True, text=True)
    first = (done.stdout.strip().splitlines() or [""])[0]  # "GDAL 3.6.2, released 2023/01/02" (usage follows)
    return first.split(",")[0].strip() or None


def child_gdaldem(spec: dict[str, Any]) -> dict[str, Any]:
    command = gdaldem_command(spec["input"], spec["output"])
    t0 = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - t0
    # The gdaldem process's own peak (KiB): an upper bound, as Linux starts a child's count at its parent's
    tool_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": seconds, "setup_seconds": 0.0, "tool_peak_rss_mib": tool_peak}


def child_mapsmith(spec: dict[str, Any], profile: bool = False) -> dict[str, Any]:
    _import_engines()
    start = time.perf_counter()
    from mapsmith.app import MapSmith
    from mapsmith_opensource import whitebox_engine

    app = MapSmith({"MAPSMITH_WORKSPACE": spec["workspace"]})
    whitebox_engine.environment()  # a running server builds it once, on its first Whitebox call
    setup = time.perf_counter() - start
    arguments = {"input_path": spec["input"], "units": UNITS, "output_path": spec["output"]}
    out, stats = common.run_mapsmith(app, "slope", arguments, setup, profile)
    if stats is not None:
        out["breakdown"] = breakdown(stats)
    return out


CHILDREN = {
    "whitebox": child_whitebox,
    "gdaldem": child_gdaldem,
    "mapsmith": child_mapsmith,
    "mapsmith_profile": lambda spec: child_mapsmith(spec, profile=True),
}


def child_main(role: str, spec_json: str) -> int:
    return common.child_main(CHILDREN, role, spec_json)


def spawn(role: str, spec: dict[str, Any]) -> dict[str, Any]:
    answer = common.spawn(__file__, role, spec)
    answer["peak_rss_mib"] = max(answer["peak_rss_mib"], answer.pop("tool_peak_rss_mib", 0.0))
    return answer


# -- the cProfile breakdown -----------------------------------------------------------------------


def breakdown(stats: pstats.Stats) -> dict[str, Any]:
    """Where one MapSmith slope run's time went: the engine's own work, then what MapSmith adds."""
    raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]

    def cum(file: str, func: str, caller: str | None = None) -> float:
        total = 0.0
        for key, value in raw.items():
            if key[2] != func or not key[0].replace("\\", "/").endswith(file):
                continue
            total += value[3] if caller is None else sum(v[3] for ck, v in value[4].items() if ck[2] == caller)
        return total

    def builtin(name: str, caller: str | None = None) -> float:
        total = 0.0
        for key, value in raw.items():
            if key[0] == "~" and name in key[2]:
                total += value[3] if caller is None else sum(v[3] for ck, v in value[4].items() if ck[2] == caller)
        return total

    run = cum("mapsmith/runner.py", "run_operation")
    read_input = cum("mapsmith_opensource/whitebox_engine.py", "read_input")
    grid_read = cum("mapsmith_opensource/raster_io.py", "read", caller="read_input")
    wbe_read = builtin("read_raster", caller="read_input")
    probes = builtin("get_value", caller="read_input") + builtin("is_cell_nodata", caller="read_input")
    compute = cum("mapsmith_opensource/whitebox_engine.py", "call")
    write_output = cum("mapsmith_opensource/whitebox_engine.py", "write_output")
    wbe_write = builtin("write_raster", caller="produce_file")
    adopt = cum("mapsmith_opensource/raster_io.py", "adopt_engine_output")
    verify = cum("mapsmith/runner.py", "_verify_raster")
    input_digest = cum("mapsmith/app.py", "digest")
    output_digest = cum("mapsmith/provenance/digests.py", "dataset_digest", caller="_record")
    record = cum("mapsmith/runner.py", "_record")
    engine = {
        # Whitebox decodes the file lazily, on the first cell asked for: here the read check's probes.
        "Whitebox read (lazy decode, triggered by the read check's probes)": wbe_read + probes,
        "Whitebox slope": compute,
        "Whitebox write (tiled DEFLATE)": wbe_write,
    }
    overhead = {
        "read check: 97 cells read one by one by GDAL": grid_read,
        "read check: other": max(read_input - grid_read - wbe_read - probes, 0.0),
        "edge rings blanked and grid compared (rasterio r+)": max(write_output - wbe_write - adopt, 0.0),
        "output moved into place": adopt,
        "output read back for statistics and checks": verify,
        "input digest (SHA-256)": input_digest,
        "output digest (SHA-256)": output_digest,
        "manifest (build, validate, write)": max(record - input_digest - output_digest, 0.0)
        + cum("mapsmith/provenance/validator.py", "validate_manifest")
        + cum("mapsmith/provenance/manifest.py", "write_manifest"),
        # The runner's own header read of the input (its output read-back is counted above).
        "input headers, georeferencing readings, open_grid": cum(
            "mapsmith_opensource/io.py", "inspect", "run_operation"
        )
        + cum("mapsmith_opensource/raster_io.py", "open_grid"),
    }
    engine_total = sum(engine.values())
    overhead["other"] = max(run - engine_total - sum(overhead.values()), 0.0)
    rows = sorted(raw.items(), key=lambda kv: -kv[1][2])[:TOP_FUNCTIONS]
    top = [
        {
            "function": (f"{Path(f).name}:{line} {func}" if f != "~" else f"(built-in) {func}"),
            "own_seconds": round(v[2], 3),
            "calls": v[1],
        }
        for (f, line, func), v in rows
    ]
    return {
        "method": "cProfile (perf_counter timer) around one extra MapSmith run: cumulative seconds of the "
        "runner's, the adapter's and Whitebox's entry points",
        "run_seconds": round(run, 3),
        "engine_seconds": {k: round(v, 3) for k, v in engine.items()},
        "overhead_seconds": {k: round(v, 3) for k, v in overhead.items()},
        "overhead_total_seconds": round(run - engine_total, 3),
        "top_functions_by_own_time": top,
    }


# -- the parent: interleave, compare, summarise, write --------------------------------------------


def _series(what: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["seconds"] for r in runs]
    rss = [r["peak_rss_mib"] for r in runs]
    out: dict[str, Any] = {
        "what": what,
        "median_seconds": round(statistics.median(times), 3),
        "min_seconds": round(min(times), 3),
        "max_seconds": round(max(times), 3),
        "runs_seconds": [round(t, 3) for t in times],
        "peak_rss_mib": round(max(rss)),
        "peak_rss_mib_runs": [round(m) for m in rss],
        "setup_seconds_median": round(statistics.median(r["setup_seconds"] for r in runs), 3),
        "median_process_seconds": round(statistics.median(r["process_seconds"] for r in runs), 3),
        "runs_process_seconds": [round(r["process_seconds"], 3) for r in runs],
    }
    if "phases" in runs[0]:
        out["phases_median_seconds"] = {
            k: round(statistics.median(r["phases"][k] for r in runs), 3) for k in runs[0]["phases"]
        }
    return out


def interior_difference(a: Path, b: Path) -> dict[str, Any]:
    """Largest absolute difference between two slope rasters inside the edge rings, in row blocks;
    also whether the cells valid in one are exactly those valid in the other there."""
    import numpy as np
    import rasterio
    from rasterio.windows import Window

    worst, same_mask, compared = 0.0, True, 0
    with rasterio.open(a) as da, rasterio.open(b) as db:
        width, height = da.width, da.height
        for row in range(EDGE_CELLS, height - EDGE_CELLS, BLOCK_ROWS):
            rows = min(BLOCK_ROWS, height - EDGE_CELLS - row)
            window = Window(EDGE_CELLS, row, width - 2 * EDGE_CELLS, rows)
            xa, xb = da.read(1, window=window, masked=True), db.read(1, window=window, masked=True)
            ma, mb = np.ma.getmaskarray(xa), np.ma.getmaskarray(xb)
            same_mask = same_mask and bool((ma == mb).all())
            both = ~ma & ~mb
            compared += int(both.sum())
            if both.any():
                diff = np.abs(xa.data[both].astype("float64") - xb.data[both].astype("float64"))
                worst = max(worst, float(diff.max()))
    return {"max_abs_difference_interior": worst, "same_valid_cells": same_mask, "cells_compared": compared}


def machine_record(load_before: float) -> dict[str, Any]:
    import rasterio

    extra = {"GDAL": rasterio.__gdal_version__}
    if version := gdaldem_version():
        extra["gdaldem"] = version
    record = machine(("whitebox-workflows", "rasterio", "numpy"), extra)
    return {**record, "load_average_1min": {"before": round(load_before, 2), "after": None}}


def bench(work: Path, dem: Path, size: int, runs: int, profile: bool, command: str) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    roles = ("whitebox", "gdaldem", "mapsmith") if shutil.which("gdaldem") else ("whitebox", "mapsmith")
    samples: dict[str, list[dict[str, Any]]] = {role: [] for role in roles}
    order: list[str] = []
    agreement: dict[str, Any] | None = None
    gdal_agreement: dict[str, Any] | None = None
    for i in range(runs):
        for role in roles:
            out = work / f"slope-{role}-{i}.tif"
            local = role == "mapsmith"
            spec = {
                "workspace": str(work),
                "input": dem.name if local else str(dem),
                "output": out.name if local else str(out),
            }
            answer = spawn(role, spec)
            samples[role].append(answer)
            order.append(role)
            print(
                f"  {role:9s} run {i + 1}: work {answer['seconds']:.2f} s, process {answer['process_seconds']:.2f} s, "
                f"peak {answer['peak_rss_mib']:.0f} MiB"
            )
        if i == 0:
            agreement = interior_difference(work / "slope-mapsmith-0.tif", work / "slope-whitebox-0.tif")
            if "gdaldem" in samples:
                gdal_agreement = interior_difference(work / "slope-mapsmith-0.tif", work / "slope-gdaldem-0.tif")
        for stale in work.glob("slope-*"):
            stale.unlink()
    breakdown_result = None
    if profile:
        spec = {"workspace": str(work), "input": dem.name, "output": "slope-profile.tif"}
        breakdown_result = spawn("mapsmith_profile", spec)["breakdown"]
        for stale in work.glob("slope-*"):
            stale.unlink()
    result_machine = machine_record(load_before)
    result_machine["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    mapsmith = _series(
        "MapSmith(environ).run('slope', units='degrees'): header checks, read check, Whitebox, edge rings "
        "blanked, output statistics and checks, digests, manifest",
        samples["mapsmith"],
    )
    mapsmith["status"] = samples["mapsmith"][0]["status"]
    mapsmith["failed_checks"] = samples["mapsmith"][0]["failed_checks"]
    whitebox = _series(
        "whitebox_workflows alone: wbe.read_raster -> wbe.terrain.slope(units='degrees') -> wbe.write_raster "
        "(tiled 256, DEFLATE, as MapSmith's adapter writes)",
        samples["whitebox"],
    )
    series = [mapsmith, whitebox]
    gdal: dict[str, Any] = {"run": False, "why": "no gdaldem on the PATH"}
    if "gdaldem" in samples:
        series.append(
            _series(
                f"gdaldem slope alone ({gdaldem_version()}; degrees, Horn's 3 x 3 stencil; tiled 256, DEFLATE)",
                samples["gdaldem"],
            )
        )
        gdal = {
            "run": True,
            "ratio_vs_gdaldem": round(mapsmith["median_seconds"] / series[-1]["median_seconds"], 3),
            "process_ratio_vs_gdaldem": round(
                mapsmith["median_process_seconds"] / series[-1]["median_process_seconds"], 3
            ),
            "agreement": gdal_agreement,
        }
    ratio = round(mapsmith["median_seconds"] / whitebox["median_seconds"], 3)
    result: dict[str, Any] = {
        "benchmark": NAME,
        "command": command,
        "date": dt.date.today().isoformat(),
        "machine": result_machine,
        "code": code_state(),
        "process": "a fresh Python process per run; numpy, rasterio and whitebox_workflows imported and the "
        "WbEnvironment (and MapSmith object) built before the work's clock starts on every side; the whole process "
        "timed from spawn to exit",
        "description": f"slope in degrees of a {size:,} x {size:,} float32 DEM, GeoTIFF to GeoTIFF, MapSmith "
        "against Whitebox Workflows called directly and GDAL's gdaldem",
        "input": {
            "width": size,
            "height": size,
            "dtype": "float32",
            "cell_size_m": CELL_SIZE_M,
            "crs": CRS,
            "encoding": "GeoTIFF, tiled 256 x 256, DEFLATE, no predictor",
            "terrain": "800 + 300 sin(x/9000) cos(y/11000) + 60 sin(x/1300 + y/1700) + 8 sin(x/170) sin(y/230), metres",
            "bytes": dem.stat().st_size,
        },
        "runs": runs,
        "order": order,
        "peak_rss_method": samples["mapsmith"][0]["peak_rss_method"],
        "series": series,
        "ratio_vs_engine": ratio,
        "process_ratio_vs_engine": round(mapsmith["median_process_seconds"] / whitebox["median_process_seconds"], 3),
        "gdaldem": gdal,
        "not_run": NOT_RUN,
        "target": {"ratio_at_most": TARGET_MAX_RATIO, "met": ratio <= TARGET_MAX_RATIO},
        "agreement": agreement,
    }
    if breakdown_result is not None:
        result["breakdown"] = breakdown_result
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="DEM width and height (default 10,000)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="interleaved runs of each side (default 3)")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the profiled MapSmith run")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR, help=f"where to write (default {RESULTS_DIR})")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the DEM and outputs go; kept, and the DEM reused (default: a temporary directory, removed)",
    )
    args = parser.parse_args(argv)
    if args.size < 2 * EDGE_CELLS + 1 or args.runs < 1:
        parser.error(f"--size must be at least {2 * EDGE_CELLS + 1} and --runs at least 1")
    command = "python benchmarks/bench_terrain.py" + "".join(
        f" {flag} {value}"
        for flag, value, default in (("--size", args.size, DEFAULT_SIZE), ("--runs", args.runs, DEFAULT_RUNS))
        if value != default
    )
    keep = args.workdir is not None
    if keep:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = (args.workdir if keep else Path(tempfile.mkdtemp(prefix="mapsmith-bench-terrain-"))).resolve()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    try:
        dem = work / f"dem_{args.size}.tif"
        if dem_is_usable(dem, args.size):
            print(f"reusing {dem}")
        else:
            started = time.perf_counter()
            make_dem(dem, args.size)
            print(f"DEM written in {time.perf_counter() - started:.1f} s to {dem}")
        print(f"slope, {args.size:,} x {args.size:,} float32, {args.runs} interleaved runs each:")
        r = bench(work, dem, args.size, args.runs, not args.no_breakdown, command)
        path = args.output_dir / f"{NAME}.json"
        path.write_text(json.dumps(r, indent=2) + "\n")
        m, w = r["series"][:2]
        print(
            f"slope: Whitebox median {w['median_seconds']:.2f} s ({w['peak_rss_mib']} MiB), MapSmith median "
            f"{m['median_seconds']:.2f} s ({m['peak_rss_mib']} MiB), ratio {r['ratio_vs_engine']:.3f} (target <= "
            f"{TARGET_MAX_RATIO}: {'met' if r['target']['met'] else 'NOT met'}); interior max |diff| "
            f"{r['agreement']['max_abs_difference_interior']}; wrote {path}"
        )
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
