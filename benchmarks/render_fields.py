"""What each results file in ``benchmarks/results/`` must carry for ``render.py`` to draw its section.

Split out of ``render.py``: the field lists are the contract between the ``bench_*.py`` scripts that
write results and the page that reads them, and ``tests/docs/test_generated_docs.py`` checks every
committed results file against them. It must never measure or render anything.
"""

from __future__ import annotations

from typing import Any

# The fields of results/startup.json the page reads; the docs test checks a results file has them.
STARTUP_FIELDS: dict[str, tuple[str, ...]] = {
    "": (
        "command",
        "date",
        "machine",
        "runs",
        "tools_listed",
        "server",
        "interpreter_floor",
        "sdk_import",
        "target",
        "engines_imported_before_a_tool_call",
        "tools_list_characters",
        "server_info",
        "stacks",
    ),
    "machine": ("nproc", "python", "platform", "mapsmith_version", "mcp_sdk_version", "load_average_1min"),
    "server": ("median_seconds", "min_seconds", "max_seconds", "runs_seconds"),
    "server_info": ("command", "median_seconds", "min_seconds", "max_seconds", "runs_seconds"),
    "stacks": ("available", "unavailable", "engines", "extras_installed", "toolboxes_after_start"),
    "interpreter_floor": ("command", "median_seconds", "min_seconds", "max_seconds", "runs_seconds"),
    "sdk_import": ("command", "median_seconds", "min_seconds", "max_seconds", "runs_seconds"),
    "target": ("median_seconds", "met"),
}

_MACHINE = ("nproc", "memory_gib", "python", "platform", "mapsmith_version", "engines", "load_average_1min")
_SERIES = ("what", "median_seconds", "min_seconds", "max_seconds", "runs_seconds", "peak_rss_mib", "peak_rss_mib_runs")
_BREAKDOWN = ("method", "run_seconds", "engine_seconds", "overhead_seconds", "overhead_total_seconds")

# The fields of results/vector_buffer.json the page reads (a dotted section is a nested object).
_ENGINE = (*_SERIES, "median_process_seconds", "runs_process_seconds", "setup_seconds_median")
_GOAL = {"goal": ("work", "process")}
VECTOR_BUFFER_FIELDS: dict[str, tuple[str, ...]] = {
    "": (
        "command",
        "date",
        "machine",
        "code",
        "input",
        "output",
        "parameters",
        "runs",
        "order",
        "engines",
        "not_run",
        "result",
        "goal",
        "against",
        "ratio",
        "target",
    ),
    "machine": _MACHINE,
    "code": ("commit", "uncommitted_changes"),
    "input": ("features", "format", "crs", "bytes"),
    "output": ("format", "bytes"),
    "parameters": ("distance_meters", "segments_per_quarter_circle"),
    "engines": ("geopandas", "duckdb", "sedonadb", "mapsmith"),
    "engines.geopandas": (*_ENGINE, "phases_median_seconds"),
    "engines.duckdb": _ENGINE,
    "engines.sedonadb": _ENGINE,
    "engines.mapsmith": (*_ENGINE, "engine", "status"),
    "result": ("same_result", "by_engine", "agreeing"),
    **_GOAL,
    "target": ("max_ratio", "met"),
}
# ... and of results/vector_spatial_join.json.
VECTOR_SPATIAL_JOIN_FIELDS: dict[str, tuple[str, ...]] = {
    "": (
        "command",
        "date",
        "machine",
        "code",
        "inputs",
        "parameters",
        "runs",
        "order",
        "engines",
        "not_run",
        "result",
        "goal",
        "fastest_raw_engine",
        "ratio",
        "target",
    ),
    "machine": _MACHINE,
    "code": ("commit", "uncommitted_changes"),
    "inputs": ("points", "polygons", "format", "crs"),
    "inputs.points": ("features", "bytes"),
    "inputs.polygons": ("features", "vertices_each", "bytes"),
    "parameters": ("predicate", "how"),
    "engines": ("geopandas", "duckdb", "sedonadb", "mapsmith"),
    "engines.geopandas": _ENGINE,
    "engines.duckdb": (*_ENGINE, "threads"),
    "engines.sedonadb": _ENGINE,
    "engines.mapsmith": (*_ENGINE, "engine", "status"),
    "result": ("same_result", "by_engine"),
    **_GOAL,
    "target": ("max_ratio", "met"),
}
# ... of results/raster_zonal.json (from bench_zonal.py).
RASTER_ZONAL_FIELDS: dict[str, tuple[str, ...]] = {
    "": (
        "command",
        "date",
        "machine",
        "code",
        "process",
        "description",
        "input",
        "runs",
        "series",
        "naive",
        "not_run",
        "mapsmith_status",
        "ratios",
        "targets",
        "agreement",
    ),
    "machine": _MACHINE,
    "code": ("commit", "uncommitted_changes"),
    "input": (
        "raster_width",
        "raster_height",
        "dtype",
        "polygons",
        "cell_metres",
        "crs",
        "tiling",
        "polygon_span_cells",
    ),
    "naive": ("polygons_timed", "seconds_timed", "extrapolated"),
    "ratios": (
        "speedup_vs_naive",
        "overhead_vs_engine",
        "process_overhead_vs_engine",
        "vs_sedonadb",
        "process_vs_sedonadb",
    ),
    "targets": ("peak_memory_under_mib", "met_memory", "speedup_at_least", "met_speedup"),
    "agreement": ("max_abs_mean_difference", "mean_abs_mean_difference_vs_naive", "why_naive_differs"),
}
# ... of results/raster_slope.json (from bench_terrain.py).
RASTER_SLOPE_FIELDS: dict[str, tuple[str, ...]] = {
    "": (
        "command",
        "date",
        "machine",
        "code",
        "process",
        "description",
        "input",
        "runs",
        "series",
        "ratio_vs_engine",
        "process_ratio_vs_engine",
        "gdaldem",
        "not_run",
        "target",
        "agreement",
    ),
    "machine": _MACHINE,
    "code": ("commit", "uncommitted_changes"),
    "gdaldem": ("run",),
    "input": ("width", "height", "dtype", "cell_size_m", "crs", "encoding", "terrain"),
    "target": ("ratio_at_most", "met"),
    "agreement": ("max_abs_difference_interior", "same_valid_cells", "cells_compared"),
}
# ... of results/discovery.json (from bench_discovery.py).
DISCOVERY_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("command", "date", "machine", "code", "description", "searches", "passes", "series", "target"),
    "machine": ("nproc", "python", "platform", "mapsmith_version", "load_average_1min"),
    "code": ("commit", "uncommitted_changes"),
    "target": (
        "real_catalog_median_ms",
        "real_catalog_met",
        "synthetic_entries",
        "synthetic_median_ms",
        "synthetic_met",
    ),
}
# ... of results/sedona.json (from bench_sedona.py).
SEDONA_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("command", "measured_at", "machine", "code", "parameters", "pair_search", "mapsmith_spatial_join"),
    "machine": ("nproc", "python", "platform", "mapsmith_version", "engines"),
    "code": ("commit", "uncommitted_changes"),
    "parameters": ("features", "polygons", "runs", "how", "predicate"),
}
# ... of results/scale.json (from bench_scale.py).
SCALE_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("command", "measured_at", "machine", "code", "parameters", "sizes", "not_run"),
    "machine": ("nproc", "memory_gib", "python", "platform", "mapsmith_version", "engines"),
    "code": ("commit", "uncommitted_changes"),
    "parameters": ("polygons", "predicate", "how", "spark_driver_memory", "timeout_seconds"),
}
# Each results file the page shows, with the fields it needs.
FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "startup": STARTUP_FIELDS,
    "vector_buffer": VECTOR_BUFFER_FIELDS,
    "vector_spatial_join": VECTOR_SPATIAL_JOIN_FIELDS,
    "raster_zonal": RASTER_ZONAL_FIELDS,
    "raster_slope": RASTER_SLOPE_FIELDS,
    "discovery": DISCOVERY_FIELDS,
    "sedona": SEDONA_FIELDS,
    "scale": SCALE_FIELDS,
    "scale_capped": SCALE_FIELDS,
}


def missing_fields(result: dict[str, Any], fields: dict[str, tuple[str, ...]] = STARTUP_FIELDS) -> list[str]:
    """The dotted names of the fields the page needs that ``result`` lacks."""
    missing = []
    for section, names in fields.items():
        holder: Any = result
        for part in section.split(".") if section else ():
            holder = holder.get(part) if isinstance(holder, dict) else None
        for name in names:
            if not isinstance(holder, dict) or name not in holder:
                missing.append(f"{section}.{name}" if section else name)
    return missing
