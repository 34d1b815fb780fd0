"""Write ``docs/benchmarks.md`` from the committed results in ``benchmarks/results/*.json``.

The page holds no number a script did not measure: every figure comes from a results file, and
``tests/docs/test_generated_docs.py`` fails when the page and ``render()`` disagree. Rendering is
deterministic (same JSON, same bytes) and never measures, times or reads the clock itself.

    python benchmarks/render.py            # rewrite docs/benchmarks.md
    python benchmarks/render.py --check    # exit 1 if the page is out of date

Sections: the MCP server's cold start (``startup.json``, from ``bench_startup.py``), then buffer and
spatial join at scale (``vector_buffer.json``, ``vector_spatial_join.json``, from ``bench_vector.py``),
zonal statistics (``raster_zonal.json``, ``bench_zonal.py``) and slope (``raster_slope.json``,
``bench_terrain.py``), the router's DuckDB thresholds (``thresholds.json``, ``bench_thresholds.py``, drawn
by ``render_thresholds.py``), then issue 22's goals per operation (``goals.json``, ``goals_capped.json``, from
``bench_goals.py``, drawn by ``render_goals.py``); a section whose results file is absent is left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The page's parts sit beside this file; the docs test loads this file by path, as a script would run it.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from render_fields import (  # noqa: E402
    DISCOVERY_FIELDS,
    FIELDS,
    RASTER_SLOPE_FIELDS,
    RASTER_ZONAL_FIELDS,
    SCALE_FIELDS,
    SEDONA_FIELDS,
    STARTUP_FIELDS,
    VECTOR_BUFFER_FIELDS,
    VECTOR_SPATIAL_JOIN_FIELDS,
    missing_fields,
)
from render_goals import GOAL_FIELDS, goals_section  # noqa: E402
from render_scale import scale_section, sedona_section  # noqa: E402
from render_startup import sandbox_section, startup_section  # noqa: E402
from render_startup import seconds as _s  # noqa: E402
from render_startup import yes as _yes  # noqa: E402
from render_thresholds import THRESHOLD_FIELDS, thresholds_section  # noqa: E402

__all__ = [
    "DISCOVERY_FIELDS",
    "FIELDS",
    "GOAL_FIELDS",
    "RASTER_SLOPE_FIELDS",
    "RASTER_ZONAL_FIELDS",
    "SCALE_FIELDS",
    "SEDONA_FIELDS",
    "STARTUP_FIELDS",
    "THRESHOLD_FIELDS",
    "VECTOR_BUFFER_FIELDS",
    "VECTOR_SPATIAL_JOIN_FIELDS",
    "load_results",
    "missing_fields",
    "render",
]

RESULTS_DIR = HERE / "results"
PAGE = HERE.parent / "docs" / "benchmarks.md"


def load_results(results_dir: Path = RESULTS_DIR) -> dict[str, dict[str, Any]]:
    """Every results file, by name without ``.json``."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(results_dir.glob("*.json"))}


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:,.1f} MB"


def _engine_row(label: str, what: str, summary: dict[str, Any]) -> str:
    return (
        f"| {label} | {what} | {_s(summary['median_seconds'])} | {_s(summary['min_seconds'])} | "
        f"{_s(summary['max_seconds'])} | {_s(summary['median_process_seconds'])} | {summary['peak_rss_mib']:,} |"
    )


ENGINE_TABLE_HEAD = [
    "| engine | how | work median (s) | work min (s) | work max (s) | whole process median (s) | peak RSS (MiB) |",
    "|---|---|---:|---:|---:|---:|---:|",
]
ENGINE_LABELS = {
    "geopandas": "GeoPandas",
    "duckdb": "DuckDB Spatial",
    "sedonadb": "SedonaDB",
    "spark": "Apache Sedona on Spark",
}


def _not_run_lines(r: dict[str, Any]) -> list[str]:
    skipped = r.get("not_run") or {}
    if not skipped:
        return []
    return ["Not run here: " + "; ".join(f"{ENGINE_LABELS.get(e, e)} ({why})" for e, why in skipped.items()) + ".", ""]


def _verdict(r: dict[str, Any], against: str) -> str:
    target = r["target"]
    return (
        f"MapSmith / {against}, work medians: **{r['ratio']:.3f}**. Target: at most {target['max_ratio']:.2f}: "
        f"**{'met' if target['met'] else 'not met'}**."
    )


def _goal_lines(r: dict[str, Any]) -> list[str]:
    """Issue 22's goal (goal_verdicts), work alone and whole process, against the fastest agreeing raw engine."""
    levels = {"work": "the work alone", "process": "the whole process (spawn to exit)"}
    parts = []
    for level, label in levels.items():
        v = r["goal"][level]
        if v.get("against") is None or "time_ratio" not in v:
            parts.append(f"{label}: {v.get('why', 'no verdict')}")
            continue
        met = "met" if v["met"] else "**not met**"
        parts.append(
            f"{label}, against {ENGINE_LABELS.get(v['against'], v['against'])}: {v['time_ratio']:.2f}x time, "
            f"{v['memory_ratio']:.2f}x peak memory: {met}"
        )
    return [
        "Issue 22's goal (at most 1.25x the time and 1.5x the peak memory of the fastest raw engine whose output "
        f"agreed, same run): {'; '.join(parts)}.",
        "",
    ]


def _breakdown(b: dict[str, Any], title: str) -> list[str]:
    engine, overhead = b["engine_seconds"], b["overhead_seconds"]
    return [
        f"### {title}",
        "",
        f"From {b['method']}. That run took {_s(b['run_seconds'])} s in all:",
        "",
        "| phase | seconds |",
        "|---|---:|",
        *(f"| engine: {name} | {_s(sec)} |" for name, sec in engine.items()),
        *(f"| MapSmith: {name} | {_s(sec)} |" for name, sec in overhead.items()),
        f"| **MapSmith's additions in all** | **{_s(b['overhead_total_seconds'])}** |",
        "",
    ]


def _vector_footer(r: dict[str, Any]) -> list[str]:
    m, code = r["machine"], r["code"]
    engines = ", ".join(f"{name} {version}" for name, version in m["engines"].items())
    state = "unknown commit" if code["commit"] is None else f"commit {code['commit']}"
    if code["uncommitted_changes"]:
        state += " with uncommitted changes to the measured code"
    return [
        *_rss_caveat(r),
        f"Machine: {m['nproc']} CPUs, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}; mapsmith "
        f"{m['mapsmith_version']} ({state}); {engines}. Measured {r['date']}; 1-minute load average "
        f"{m['load_average_1min']['before']} before the runs, {m['load_average_1min']['after']} after.",
        "",
        f"Produced by `{r['command']}`.",
        "",
    ]


def _vector_buffer(r: dict[str, Any]) -> list[str]:
    i, o, p = r["input"], r["output"], r["parameters"]
    engines, result = r["engines"], r["result"]
    ms = engines["mapsmith"]
    phases = ", ".join(f"{name} {_s(sec)} s" for name, sec in engines["geopandas"]["phases_median_seconds"].items())
    counts = ", ".join(
        f"{ENGINE_LABELS.get(name, 'MapSmith')} {a['rows']:,}" for name, a in result["by_engine"].items()
    )
    against = ENGINE_LABELS.get(r["against"], r["against"])
    lines = [
        f"## Buffer {i['features']:,} points: MapSmith against the engines alone",
        "",
        f"`buffer_layer` on {i['features']:,} seeded random points in {i['crs']} ({i['format']}, {_mb(i['bytes'])}), "
        f"{p['distance_meters']} m with {p['segments_per_quarter_circle']} segments per quarter circle, written as "
        f"{o['format']} ({_mb(o['bytes'])} from the first engine), against each raw engine doing the same buffer "
        f"alone. Each ran {r['runs']} times, interleaved, each run in a fresh process, timed twice: the work alone "
        "(engines imported and connected, and `MapSmith()` built, before the clock: a median "
        f"{_s(ms['setup_seconds_median'])} s for MapSmith) and the whole process, spawn to exit. Peak RSS is the "
        "largest of the runs' own peaks.",
        "",
        *ENGINE_TABLE_HEAD,
        *(_engine_row(ENGINE_LABELS.get(name, "MapSmith `buffer_layer`"), s["what"], s) for name, s in engines.items()),
        "",
        *_not_run_lines(r),
        *_goal_lines(r),
        _verdict(r, f"{against} alone (the engine it ran: `{ms['engine']}`, status `{ms['status']}`)"),
        "",
        f"GeoPandas alone, median by step: {phases}. Features written: {counts}; every output agreed (rows, the "
        f"sorted point ids, the summed area within a relative 1e-06): {_yes(result['same_result'])}.",
        "",
        "All runs, work (s): "
        + "; ".join(
            f"{ENGINE_LABELS.get(name, 'MapSmith')} {', '.join(_s(t) for t in s['runs_seconds'])}"
            for name, s in engines.items()
        )
        + ".",
        "",
    ]
    if r.get("breakdown"):
        lines += _breakdown(r["breakdown"], "Where MapSmith's time goes: buffer")
    return lines + _vector_footer(r)


JOIN_ENGINE_LABELS = {**ENGINE_LABELS, "geopandas": "`geopandas.sjoin`", "mapsmith": "MapSmith `spatial_join`"}


def _pairs_row(label: str, f: dict[str, Any]) -> str:
    return f"| {label} | {f['rows']:,} | {f['matched_pairs']:,} | {f['unmatched_rows']:,} |"


def _vector_spatial_join(r: dict[str, Any]) -> list[str]:
    pts, polys, p = r["inputs"]["points"], r["inputs"]["polygons"], r["parameters"]
    engines, result = r["engines"], r["result"]
    lines = [
        f"## Spatial join: {pts['features']:,} points with {polys['features']:,} polygons",
        "",
        f"`spatial_join` (predicate `{p['predicate']}`, how `{p['how']}`) of {pts['features']:,} seeded random points "
        f"({_mb(pts['bytes'])}) with {polys['features']:,} overlapping {polys['vertices_each']}-vertex polygons "
        f"({_mb(polys['bytes'])}), {r['inputs']['format']} in {r['inputs']['crs']}, written as GeoParquet, against "
        f"every raw engine doing the same file-to-file work. Each engine ran {r['runs']} times, interleaved, each run "
        "in a fresh process, timed twice: the work alone (engines imported and connected before the clock) and the "
        "whole process, spawn to exit.",
        "",
        *ENGINE_TABLE_HEAD,
        *(_engine_row(JOIN_ENGINE_LABELS.get(name, name), s["what"], s) for name, s in engines.items()),
        "",
        *_not_run_lines(r),
        *_goal_lines(r),
        _verdict(r, f"fastest raw engine ({JOIN_ENGINE_LABELS.get(r['fastest_raw_engine'], r['fastest_raw_engine'])})"),
        "",
        f"DuckDB ran with {engines['duckdb']['threads']} threads; MapSmith ran on the engine "
        f"`{engines['mapsmith']['engine']}`, status `{engines['mapsmith']['status']}`.",
        "",
        "| engine | rows written | matched pairs | unmatched rows |",
        "|---|---:|---:|---:|",
        *(_pairs_row(JOIN_ENGINE_LABELS.get(name, name), f) for name, f in result["by_engine"].items()),
        "",
        f"Same rows and the same (point, polygon) pairs from every engine: {_yes(result['same_result'])}.",
        "",
    ]
    if r.get("breakdown"):
        lines += _breakdown(r["breakdown"], "Where MapSmith's time goes: spatial join")
    return lines + _vector_footer(r)


def _series_table(series: list[dict[str, Any]]) -> list[str]:
    def process(s: dict[str, Any]) -> str:
        value = s.get("median_process_seconds")
        return "not measured" if value is None else _s(value)

    return [
        "| what | work median (s) | work min (s) | work max (s) | whole process median (s) | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {s['what']} | {_s(s['median_seconds'])} | {_s(s['min_seconds'])} | {_s(s['max_seconds'])} | "
            f"{process(s)} | {s['peak_rss_mib']:,} |"
            for s in series
        ),
    ]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _met(flag: bool) -> str:
    return "met" if flag else "**not met**"


def _raster_zonal(r: dict[str, Any]) -> list[str]:
    i, ratios, targets, agree, naive = r["input"], r["ratios"], r["targets"], r["agreement"], r["naive"]
    mapsmith_peak = max(s["peak_rss_mib"] for s in r["series"] if s["what"].startswith("MapSmith"))
    differences = ", ".join(f"{k.replace('_', ' ')} {v:.3g}" for k, v in agree["max_abs_mean_difference"].items())
    lines = [
        f"## Zonal statistics: {i['polygons']:,} polygons over a {i['raster_width']:,} x {i['raster_height']:,} "
        f"{i['dtype']} raster",
        "",
        f"{r['description']}. The raster is {i['tiling']} in {i['crs']} with {i['cell_metres']:g} m cells; the "
        f"polygons span {i['polygon_span_cells'][0]} to {i['polygon_span_cells'][1]} cells. {_sentence(r['process'])}; "
        f"{r['runs']} runs of each timed series. The naive loop timed {naive['polygons_timed']:,} polygons"
        + (" and was extrapolated linearly" if naive["extrapolated"] else "")
        + ".",
        "",
        *_series_table(r["series"]),
        "",
        f"Speed-up over the naive loop: **{ratios['speedup_vs_naive']:.2f}x**; target at least "
        f"{targets['speedup_at_least']}x: {_met(targets['met_speedup'])}. MapSmith's peak memory "
        f"{mapsmith_peak:,} MiB; target under {targets['peak_memory_under_mib']:,} MiB: "
        f"{_met(targets['met_memory'])}. MapSmith / exactextract called the same way, medians: "
        f"{ratios['overhead_vs_engine']:.3f} (whole process {ratios['process_overhead_vs_engine']:.3f}); MapSmith / "
        f"SedonaDB alone: {ratios['vs_sedonadb']:.3f} (whole process {ratios['process_vs_sedonadb']:.3f}). MapSmith's "
        f"status: `{r['mapsmith_status']}`.",
        "",
        f"Largest difference in a zone's mean: {differences}; mean difference against the naive loop "
        f"{agree['mean_abs_mean_difference_vs_naive']:.3g} ({agree['why_naive_differs']}; SedonaDB counts cells as "
        "the naive loop does).",
        "",
        *_not_run_lines(r),
    ]
    return lines + _vector_footer(r)


def _raster_slope(r: dict[str, Any]) -> list[str]:
    i, target, agree = r["input"], r["target"], r["agreement"]
    lines = [
        f"## Slope of a {i['width']:,} x {i['height']:,} {i['dtype']} DEM: MapSmith against the engines alone",
        "",
        f"{r['description']}. The DEM ({i['encoding']}, {i['crs']}, {i['cell_size_m']:g} m cells) is "
        f"{i['terrain']}. {_sentence(r['process'])}; {r['runs']} runs of each, interleaved.",
        "",
        *_series_table(r["series"]),
        "",
        f"MapSmith / Whitebox alone, work medians: **{r['ratio_vs_engine']:.3f}**. Target: at most "
        f"{target['ratio_at_most']}: {_met(target['met'])}. Whole process: {r['process_ratio_vs_engine']:.3f}.",
        "",
        f"MapSmith's and Whitebox's outputs compared on {agree['cells_compared']:,} interior cells: largest difference "
        f"{agree['max_abs_difference_interior']:g}; the same cells valid: {_yes(agree['same_valid_cells'])}.",
        "",
        *_gdaldem_lines(r["gdaldem"]),
        *_not_run_lines(r),
    ]
    breakdown = r.get("breakdown")
    if breakdown:
        lines += _breakdown(breakdown, "Where MapSmith's time goes: slope")
    return lines + _vector_footer(r)


def _gdaldem_lines(g: dict[str, Any]) -> list[str]:
    """GDAL's gdaldem beside Whitebox (bench_terrain.py): its ratios and how far its stencil's values lie."""
    if not g["run"]:
        return [f"GDAL's `gdaldem slope` was not run: {g['why']}.", ""]
    a = g["agreement"]
    return [
        f"MapSmith / `gdaldem slope` alone, work medians: {g['ratio_vs_gdaldem']:.3f} (whole process "
        f"{g['process_ratio_vs_gdaldem']:.3f}). gdaldem's Horn stencil (3 x 3) is not Whitebox's (5 x 5): on "
        f"{a['cells_compared']:,} interior cells its slope differs from MapSmith's by at most "
        f"{a['max_abs_difference_interior']:.3g} degrees; the same cells valid: {_yes(a['same_valid_cells'])}.",
        "",
    ]


def _discovery(r: dict[str, Any]) -> list[str]:
    target, m = r["target"], r["machine"]
    rows = []
    for s in r["series"]:
        if s.get("unavailable"):
            rows.append(f"| {s['catalog']} | `{s['engine']}` | unavailable here | | | | |")
            continue
        rows.append(
            f"| {s['catalog']} ({s['entries']:,} entries) | `{s['engine']}` (ran `{s['engine_used']}`) | "
            f"{s['median_ms']:.3f} | {s['p90_ms']:.3f} | {s['min_ms']:.3f} | {s['max_ms']:.3f} | "
            f"{s['cold_first_call_ms']:.1f} |"
        )
    return [
        "## Discovery: one catalog search",
        "",
        f"{_sentence(r['description'])} {r['searches']} searches, {r['passes']} passes each; milliseconds per search.",
        "",
        "| catalog | engine | median (ms) | p90 (ms) | min (ms) | max (ms) | first call (ms) |",
        "|---|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Targets: median under {target['real_catalog_median_ms']:g} ms with the real catalog: "
        f"{_met(target['real_catalog_met'])}; under {target['synthetic_median_ms']:g} ms with "
        f"{target['synthetic_entries']:,} synthetic entries: {_met(target['synthetic_met'])}.",
        "",
        f"Machine: {m['nproc']} CPUs, {m['platform']}, Python {m['python']}; mapsmith {m['mapsmith_version']}. "
        f"Measured {r['date']}; 1-minute load average {m['load_average_1min']['before']} before, "
        f"{m['load_average_1min']['after']} after.",
        "",
        f"Produced by `{r['command']}`.",
        "",
    ]


def _rss_caveat(r: dict[str, Any]) -> list[str]:
    """A sentence for results measured before peak memory was read as VmHWM (benchmarks/common.py)."""
    if "peak_rss_method" in json.dumps(r):
        return []
    return [
        "Peak memory in this section was read as `ru_maxrss`, which Linux carries over from the parent process "
        "when a child is started: each figure is an upper bound that includes the benchmark driver's own memory "
        "at that moment. Later runs read `VmHWM`, the child's own peak; rerun the command to replace these.",
        "",
    ]


def render(results: dict[str, dict[str, Any]] | None = None) -> str:
    """The text of ``docs/benchmarks.md`` for ``results`` (default: the committed results files)."""
    results = load_results() if results is None else results
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python benchmarks/render.py` from benchmarks/results/*.json; do not edit by hand. -->",
        "",
        "Timings on a shared machine are noisy: each figure is the median of several runs, with the "
        "minimum and maximum beside it. Rerun the command under a table to measure your own machine, "
        "then `python benchmarks/render.py`.",
        "",
    ]
    if "startup" in results:
        lines += startup_section(results["startup"])
    if "sandbox" in results:
        lines += sandbox_section(results["sandbox"])
    if "vector_buffer" in results:
        lines += _vector_buffer(results["vector_buffer"])
    if "vector_spatial_join" in results:
        lines += _vector_spatial_join(results["vector_spatial_join"])
    if "raster_zonal" in results:
        lines += _raster_zonal(results["raster_zonal"])
    if "raster_slope" in results:
        lines += _raster_slope(results["raster_slope"])
    if "discovery" in results:
        lines += _discovery(results["discovery"])
    if "sedona" in results:
        lines += sedona_section(results["sedona"])
    if "scale" in results:
        lines += scale_section(results["scale"])
    if "scale_capped" in results:
        lines += scale_section(results["scale_capped"])
    if "thresholds" in results:
        lines += thresholds_section(results["thresholds"])
    if "goals" in results:
        lines += goals_section(results["goals"])
    for name in sorted(n for n in results if n.startswith("goals_") and n not in ("goals_capped", "goals_cluster")):
        sizes = ", ".join(f"{s['points']:,}" for s in results[name]["sizes"])
        lines += goals_section(results[name], title=f"Goals at {sizes} points (`{name}.json`)")
    if "goals_capped" in results:
        lines += goals_section(results["goals_capped"], title="Goals under a memory cap")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what render() gives")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is out of date: run python benchmarks/render.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
