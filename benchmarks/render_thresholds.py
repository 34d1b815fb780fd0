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
        f"{summary['cpu_seconds_median']:.3f} | {summary['peak_rss_mib']:,.0f}"
    )


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
        "CPU: median CPU seconds of the work (DuckDB's threads included); peak RSS of the process.",
        "",
        "| operation | features | GeoPandas work (s) | GeoPandas CPU (s) | GeoPandas peak (MiB) "
        "| DuckDB work (s) | DuckDB CPU (s) | DuckDB peak (MiB) | DuckDB / GeoPandas |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, entry in r["operations"].items():
        for row in entry["series"]:
            g, d = row["geopandas"], row["duckdb"]
            ratio = d["seconds_median"] / g["seconds_median"]
            lines.append(f"| `{name}` | {row['points']:,} | {_cell(g)} | {_cell(d)} | {ratio:.2f}x |")
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
