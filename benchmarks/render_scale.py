"""The one-process SedonaDB section (``results/sedona.json``, ``bench_sedona.py``) and the scale sections
(``results/scale.json``, ``scale_capped.json``, ``bench_scale.py``) of ``docs/benchmarks.md``.

Split out of ``render.py`` along the page's sections. It must never measure, time or read the clock:
every figure comes from the results file.
"""

from __future__ import annotations

from typing import Any

from render_startup import seconds as _s
from render_startup import yes as _yes


def _engines_line(m: dict[str, Any]) -> str:
    return ", ".join(f"{name} {version}" for name, version in m["engines"].items())


def sedona_section(r: dict[str, Any]) -> list[str]:
    p, m, code = r["parameters"], r["machine"], r["code"]
    levels = (("pair_search", "the pair search only, geometries in memory"), ("mapsmith_spatial_join", "MapSmith"))
    rows = []
    for level, label in levels:
        for engine, e in r[level].items():
            runs = ", ".join(_s(t) for t in e["runs_seconds"])
            rows.append(f"| {label} | {engine} | {_s(e['median_seconds'])} | {runs} | {_s(e['warmup_seconds'])} |")
    return [
        "## SedonaDB, DuckDB and GeoPandas in one process",
        "",
        f"`spatial_join` of {p['features']:,} points with {p['polygons']:,} polygons (predicate {p['predicate']}, "
        f"how {p['how']}), in one process: the pair search alone, then the whole MapSmith run with each engine "
        f"forced; {p['runs']} interleaved runs after one warm-up. In-process runs share one heap, so no memory "
        "is reported here (see the next section).",
        "",
        "| level | engine | median (s) | runs (s) | warm-up (s) |",
        "|---|---|---:|---|---:|",
        *rows,
        "",
        f"Same pairs on every engine: {_yes(r.get('same_pairs'))}; same MapSmith answers: "
        f"{_yes(r.get('same_answers'))}.",
        "",
        f"Machine: {m['nproc']} CPUs, {m['platform']}, Python {m['python']}; {_engines_line(m)}. Commit "
        f"{code['commit']}{' with uncommitted changes' if code['uncommitted_changes'] else ''}; measured "
        f"{r['measured_at']}.",
        "",
        f"Produced by `{r['command']}`.",
        "",
    ]


def _gib(mib: float) -> str:
    return f"{mib / 1024:,.2f}"


def _outcome(text: str) -> str:
    """A run's outcome for a table cell: what stopped it, without the exit status and stderr tail
    (those stay in the results file)."""
    return text.split(" (exit")[0][:160].replace("|", "/")


def _process_median(runs: list[dict[str, Any]]) -> str:
    """The median whole-process time (spawn to exit) of the finished runs that recorded one."""
    import statistics

    done = [r for r in runs if r.get("outcome", "finished") == "finished"]
    found = [r["process_seconds"] for r in done if "process_seconds" in r]
    return _s(round(statistics.median(found), 3)) if found else "not recorded"


def _scale_cell(e: dict[str, Any]) -> str:
    if "median_seconds" not in e:
        return f"{_outcome(e.get('outcome', 'not run'))} | | | | |"
    note = f" ({e['outcome']} in another run)" if "outcome" in e else ""
    return (
        f"{_s(e['median_seconds'])}{note} | {_process_median(e.get('runs', []))} | {_gib(e['median_peak_rss_mib'])} | "
        f"{e.get('pairs', 0):,} | " + (f"`{e['pairs_sha256_16']}`" if e.get("pairs_sha256_16") else "") + " |"
    )


SEDONADB_TARGET_POINTS = 10_000_000  # the issue's target: here SedonaDB's peak memory <= 1/3 GeoPandas', time no worse
SEDONADB_TARGET_MEMORY_RATIO = 1 / 3


def _ratio_cell(sedona: dict[str, Any] | None, geopandas: dict[str, Any] | None, seconds: str, peak: str) -> str | None:
    if not sedona or not geopandas or seconds not in sedona or seconds not in geopandas:
        return None
    memory, time = sedona[peak] / geopandas[peak], sedona[seconds] / geopandas[seconds]
    met = memory <= SEDONADB_TARGET_MEMORY_RATIO and time <= 1
    return f"memory {memory:.2f}, time {time:.2f} ({'met' if met else 'not met'})"


def _sedonadb_target(r: dict[str, Any]) -> list[str]:
    """SedonaDB against GeoPandas at the target size: the engines alone, and each MapSmith operation."""
    size = next((s for s in r["sizes"] if s["points"] == SEDONADB_TARGET_POINTS), None)
    if size is None:
        return []
    e = size["engines"]
    found = []
    alone = _ratio_cell(e.get("sedonadb"), e.get("geopandas"), "median_seconds", "median_peak_rss_mib")
    if alone:
        found.append(f"the engines alone, {alone}")
    for operation, op in size.get("mapsmith", {}).items():
        cell = _ratio_cell(op["engines"].get("sedonadb"), op["engines"].get("geopandas"), "seconds", "peak_rss_mib")
        if cell:
            found.append(f"MapSmith's `{operation}`, {cell}")
    if not found:
        return []
    return [
        f"Target at {SEDONADB_TARGET_POINTS:,} points: SedonaDB's peak memory at most a third of GeoPandas', with no "
        "worse time. SedonaDB / GeoPandas: " + "; ".join(found) + ".",
        "",
    ]


def scale_section(r: dict[str, Any]) -> list[str]:
    p, m, code = r["parameters"], r["machine"], r["code"]
    raw_rows, ms_rows = [], []
    for size in r["sizes"]:
        n = f"{size['points']:,}"
        for engine, e in size["engines"].items():
            raw_rows.append(f"| {n} | {engine} | {size['runs_per_engine']} | {_scale_cell(e)}")
        if size["engines"]:
            raw_rows.append(f"| {n} | *same pairs on every engine* | | {_yes(size.get('same_pairs'))} | | | | |")
        for operation, op in size.get("mapsmith", {}).items():
            for engine, e in op["engines"].items():
                if e["outcome"] != "finished":
                    outcome = _outcome(e["outcome"])
                    ms_rows.append(f"| {n} | `{operation}` | {engine} | {outcome} | | | |")
                    continue
                ms_rows.append(
                    f"| {n} | `{operation}` | {engine} (ran {e['engine_ran']}) | {_s(e['seconds'])} | "
                    f"{_process_median([e])} | {_gib(e['peak_rss_mib'])} | {_yes(op.get('same_answers'))} |"
                )
    spark = (
        f"Spark runs in local mode on this machine's {m['nproc']} CPUs with a {p['spark_driver_memory']} driver "
        "heap; its session start (a JVM) is not in the time."
    )
    lines: list[str] = []
    cap = p.get("memory_limit_gib")
    if cap:
        sizes = " and ".join(f"{s['points']:,}" for s in r["sizes"])
        lines += [
            f"## The same join at {sizes} points on {cap:g} GiB of memory",
            "",
            f"The runs below were each started in a memory cgroup limited to {cap:g} GiB (`--memory-limit`): the "
            "kernel kills a process, and the JVM it started, that needs more, as on a machine with that much memory. "
            "Everything else as above.",
            "",
        ]
    if raw_rows:
        lines += [] if cap else ["## One join at 1, 10 and 30 million points: time and peak memory per engine", ""]
        lines += [
            f"Points joined with {p['polygons']:,} polygons (predicate {p['predicate']}, {p['how']} join), GeoParquet "
            "in and out, each engine as one would call it without MapSmith, each run a fresh process. Peak memory "
            "is the process's peak RSS; for Spark, the Python driver's plus the JVM's (two peaks added: an upper "
            f"bound). {spark} The pairs are counted and digested from each output after the run.",
            "",
            "| points | engine | runs | work median (s) | whole process median (s) | peak memory (GiB) | pairs | "
            "pairs digest |",
            "|---:|---|---:|---:|---:|---:|---:|---|",
            *raw_rows,
            "",
        ]
    if ms_rows:
        if not raw_rows and not cap:
            lines += ["## The same data through MapSmith's operations", ""]
        lines += [
            f"The same points and {p['polygons']:,} polygons through MapSmith's `spatial_join` (inner) and "
            "`count_in_polygons`: checks, records and manifest included, one engine forced per run (the "
            "operation's other engines unregistered; SedonaDB's size threshold set to 0), one run each in a "
            f"fresh process. Peak memory as above. {spark}",
            "",
        ]
        lines += [
            "| points | operation | engine | work (s) | whole process (s) | peak memory (GiB) | same answer on every "
            "engine |",
            "|---:|---|---|---:|---:|---:|---|",
            *ms_rows,
            "",
        ]
    lines += _sedonadb_target(r)
    if r["not_run"]:
        lines += ["Not run: " + "; ".join(f"{e}: {why}" for e, why in r["not_run"].items()) + ".", ""]
    lines += [
        f"Machine: {m['nproc']} CPUs, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}; "
        f"{_engines_line(m)}. Commit {code['commit']}"
        f"{' with uncommitted changes' if code['uncommitted_changes'] else ''}; measured {r['measured_at']}; "
        f"1-minute load average {r.get('load_average_before')} before, {r.get('load_average_after')} after "
        "(other work shared the machine).",
        "",
        f"Produced by `{r['command']}`.",
        "",
    ]
    return lines
