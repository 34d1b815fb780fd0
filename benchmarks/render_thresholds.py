"""The router-thresholds section of ``docs/benchmarks.md``, from ``results/thresholds.json`` (``bench_thresholds.py``).

Split out of ``render.py`` along the page's sections. It must never measure, time or read the clock:
every figure comes from the results file.
"""

from __future__ import annotations

from typing import Any

# The fields of results/thresholds.json the page reads; the docs test checks the committed file has them.
THRESHOLD_FIELDS: dict[str, tuple[str, ...]] = {
    "": (
        "command",
        "runs",
        "zones",
        "geopandas_preloaded",
        "raw_engines",
        "operations",
        "measured_at",
        "load_average_before",
        "load_average_after",
        "code",
        "machine",
    ),
    "code": ("commit", "uncommitted_changes"),
    "machine": ("nproc", "memory_gib", "python", "platform", "engines"),
}
ENGINES = ("geopandas", "duckdb")
RAW_LABELS = {"raw_geopandas": "GeoPandas", "raw_duckdb": "DuckDB Spatial", "raw_sedonadb": "SedonaDB"}


def supported_threshold(series: list[dict[str, Any]]) -> int | None:
    """The smallest size from which DuckDB's median work time is at most GeoPandas's at it and at every larger
    size measured; None when DuckDB lost at the largest. A size series, one row per size."""
    found = None
    for row in sorted(series, key=lambda r: r["points"], reverse=True):
        if row["duckdb"]["seconds_median"] > row["geopandas"]["seconds_median"]:
            break
        found = row["points"]
    return found


def _cell(summary: dict[str, Any]) -> str:
    return (
        f"{summary['seconds_median']:.3f} ({summary['seconds_min']:.3f}–{summary['seconds_max']:.3f}) | "
        f"{summary['process_seconds_median']:.2f} | {summary['cpu_seconds_median']:.3f} | "
        f"{summary['peak_rss_mib']:,.0f}"
    )


def routed_engine(points: int, threshold: int | None) -> str:
    """The engine MapSmith's router gives a run of ``points`` features under ``threshold`` (DuckDB from it on)."""
    return "duckdb" if threshold is not None and points >= threshold else "geopandas"


def fastest_raw(row: dict[str, Any], raw: list[str], key: str) -> str:
    """The raw engine with the smallest median ``key`` (work or whole process) in a size row."""
    return min(raw, key=lambda engine: row[engine][key])


def rows_agree(row: dict[str, Any], variants: list[str]) -> bool:
    """Whether every run of every variant in the row wrote the same number of rows."""
    return len({n for v in variants for n in row[v]["rows_out"]}) == 1


def _threshold(value: int | None) -> str:
    return "none (GeoPandas was faster at the largest size)" if value is None else f"{value:,} features"


def thresholds_section(r: dict[str, Any]) -> list[str]:
    m, code = r["machine"], r["code"]
    versions = ", ".join(f"{k} {v}" for k, v in m["engines"].items())
    state = f"Commit {code['commit']}" + (" with uncommitted changes" if code["uncommitted_changes"] else "")
    load_before = " / ".join(f"{x:.2f}" for x in r["load_average_before"])
    load_after = " / ".join(f"{x:.2f}" for x in r["load_average_after"])
    lines = [
        "## Router thresholds: DuckDB against GeoPandas through MapSmith",
        "",
        "Five operations have a DuckDB engine beside the GeoPandas one, preferred from a number of input "
        "features kept in the code. Each ran through `MapSmith(env).run` on both engines (forced with "
        "`MAPSMITH_ENGINE`), checks, digests and manifest included, a fresh process per run, the engines "
        f"interleaved, {r['runs']} runs each. Before the clock each process was what the MCP server's engine "
        "worker is before a call (`MapSmith.warm()`: DuckDB open with spatial loaded), with GeoPandas "
        "imported too, as in a worker that has already run a GeoPandas operation: the case most favourable "
        f"to GeoPandas. Points from `scale_data`; zones {r['zones']}. Work time: median (min–max) seconds; "
        "whole process: median seconds from spawn to exit (start-up, warm-up and GeoPandas' import included, the "
        "same for both engines); CPU: median CPU seconds of the work (DuckDB's threads included); peak RSS of "
        "the process. The threshold is read off the work alone: the router chooses for a server's worker that is "
        "already running, where start-up is not paid per call.",
        "",
        "| operation | features | GeoPandas work (s) | GeoPandas whole process (s) | GeoPandas CPU (s) "
        "| GeoPandas peak (MiB) | DuckDB work (s) | DuckDB whole process (s) | DuckDB CPU (s) | DuckDB peak (MiB) "
        "| DuckDB / GeoPandas, work | DuckDB / GeoPandas, whole process |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, entry in r["operations"].items():
        for row in entry["series"]:
            g, d = row["geopandas"], row["duckdb"]
            ratio = d["seconds_median"] / g["seconds_median"]
            whole = d["process_seconds_median"] / g["process_seconds_median"]
            lines.append(f"| `{name}` | {row['points']:,} | {_cell(g)} | {_cell(d)} | {ratio:.2f}x | {whole:.2f}x |")
    lines += [
        "",
        "The threshold each series supports is the smallest size measured from which DuckDB's median work "
        "time was at most GeoPandas's there and at every larger size; the code's constant must equal it "
        "(`tests/docs/test_thresholds_doc.py`):",
        "",
        "| operation | constant | supported threshold |",
        "|---|---|---|",
    ]
    for name, entry in r["operations"].items():
        lines.append(f"| `{name}` | `{entry['threshold_constant']}` | {_threshold(entry['supported_threshold'])} |")
    lines += _raw_table(r)
    lines += [
        "",
        f"Machine: {m['nproc']} CPUs, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}; {versions}. "
        f"{state}; measured {r['measured_at']}; load average (1 / 5 / 15 min) {load_before} before, "
        f"{load_after} after.",
        "",
        f"Produced by `{r['command'].strip()}`.",
        "",
    ]
    return lines


def _raw_table(r: dict[str, Any]) -> list[str]:
    """MapSmith on the engine its router chooses at each size against the raw engines of the same run."""
    raw = list(r["raw_engines"])
    labels = " | ".join(f"{RAW_LABELS[e]} work / whole (s)" for e in raw)
    lines = [
        "",
        "The raw engines doing the same file-to-file work alone (`goal_children`: GeoPandas, DuckDB Spatial and "
        "SedonaDB, each imported and connected before its work's clock) ran in the same loop, interleaved with "
        "MapSmith's runs. Below, MapSmith on the engine its router gives each size (the supported threshold above) "
        "against them: the work alone and the whole process (spawn to exit; MapSmith's start-up, warm-up and "
        "GeoPandas' import included), each ratio against the raw engine fastest that way. *Rows agree*: every run "
        "of the five wrote the same number of rows (read back from the outputs' footers, outside the measured "
        "processes). Spark is left out of this benchmark: its session starts in about 10 s, which no size here "
        "comes near; it is measured beside these engines from 10,000 points in the goal tables below.",
        "",
        f"| operation | features | MapSmith's engine | MapSmith work / whole (s) | {labels} | work: MapSmith / fastest "
        "raw | whole process: MapSmith / fastest raw | rows agree |",
        "|---|---:|---|---:|" + "---:|" * len(raw) + "---:|---:|---|",
    ]
    for name, entry in r["operations"].items():
        for row in entry["series"]:
            engine = routed_engine(row["points"], entry["supported_threshold"])
            m = row[engine]
            fast_work = row[fastest_raw(row, raw, "seconds_median")]
            fast_whole = row[fastest_raw(row, raw, "process_seconds_median")]
            cells = " | ".join(f"{row[e]['seconds_median']:.3f} / {row[e]['process_seconds_median']:.2f}" for e in raw)
            agree = "yes" if rows_agree(row, ["geopandas", "duckdb", *raw]) else "**no**"
            lines.append(
                f"| `{name}` | {row['points']:,} | {'DuckDB' if engine == 'duckdb' else 'GeoPandas'} | "
                f"{m['seconds_median']:.3f} / {m['process_seconds_median']:.2f} | {cells} | "
                f"{m['seconds_median'] / fast_work['seconds_median']:.1f}x | "
                f"{m['process_seconds_median'] / fast_whole['process_seconds_median']:.1f}x | {agree} |"
            )
    return lines
