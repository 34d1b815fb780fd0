"""The goal benchmark's sections of ``docs/benchmarks.md`` and ``docs/scaling.md``, from ``results/goals*.json``.

Split out of ``render.py`` and ``scaling_report.py`` along the results file they read. Every figure and
every verdict shown is read from a results file (``bench_goals.py`` wrote them with ``goal_verdicts``);
nothing is measured, timed or recomputed here, so the page and the results cannot disagree. It must never
read the clock or the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import goal_verdicts

GOAL_FIELDS: dict[str, tuple[str, ...]] = {
    "": (
        "command",
        "measured_at",
        "finished",
        "machine",
        "code",
        "parameters",
        "sizes",
        "not_run",
        "load_average_before",
        "load_average_after",
    ),
    "machine": ("nproc", "memory_gib", "python", "platform", "mapsmith_version", "engines"),
    "code": ("commit", "uncommitted_changes"),
    "parameters": ("operations", "polygons", "runs", "big_runs", "timeout_seconds", "memory_cap", "goal"),
    "parameters.goal": ("time_ratio_max", "memory_ratio_max"),
}
VARIANT_LABELS = {
    "geopandas": "GeoPandas",
    "duckdb": "DuckDB Spatial",
    "sedonadb": "SedonaDB",
    "spark": "Spark local",
    "spark_cluster": "Spark cluster",
    "mapsmith_api": "MapSmith, Python API",
    "mapsmith_mcp": "MapSmith, MCP stdio",
    "mapsmith_api_sedona": "MapSmith on Spark, Python API",
    "mapsmith_mcp_sedona": "MapSmith on Spark, MCP stdio",
}
LEVEL_LABELS = {"work": "work alone", "process": "whole process"}


def label(variant: str) -> str:
    """A variant's name in the pages; ``mapsmith_api@duckdb`` is MapSmith with MAPSMITH_ENGINE=duckdb."""
    base, _, engine = variant.partition("@")
    text = VARIANT_LABELS.get(base, base)
    return f"{text}, {VARIANT_LABELS.get(engine, engine)} named" if engine else text


def _s(seconds: float) -> str:
    return f"{seconds:,.2f}"


def _gib(mib: float) -> str:
    return f"{mib / 1024:,.2f}"


def _load(values: list[float] | None) -> str:
    return " / ".join(f"{v:g}" for v in values) if values else "not recorded"


def _outcome(text: str) -> str:
    return text.split(" (exit")[0][:120].replace("|", "/")


def _goal_cell(v: dict[str, Any], goal: dict[str, float]) -> str:
    if v.get("met") is None and "time_ratio" not in v:
        return v.get("why", "not judged")
    if "time_ratio" not in v:
        return f"**not met**: {v.get('why', '')}"
    verdict = "met" if v["met"] else "**not met**"
    return f"{v['time_ratio']:.2f}x time, {v['memory_ratio']:.2f}x memory: {verdict}"


def _state(code: dict[str, Any]) -> str:
    state = f"commit {code['commit']}" if code["commit"] else "an unknown commit"
    return state + (" with uncommitted changes to the measured code" if code["uncommitted_changes"] else "")


def _size_tables(size: dict[str, Any], goal: dict[str, float]) -> list[str]:
    n = f"{size['points']:,}"
    verdict_rows, detail_rows = [], []
    for operation, op in size["operations"].items():
        summaries = op["variants"]
        for variant, levels in op["verdicts"].items():
            mine = summaries[variant]
            for level, v in levels.items():
                field = f"median_{goal_verdicts.LEVELS[level]}"
                against = v.get("against")
                other = summaries.get(against, {}) if against else {}
                verdict_rows.append(
                    f"| `{operation}` | {label(variant)} | {LEVEL_LABELS[level]} | "
                    + (_s(mine[field]) if field in mine else _outcome(mine.get("outcome", "not run")))
                    + f" | {label(against) if against else 'none'} | "
                    + (_s(other[field]) if field in other else "")
                    + f" | {_goal_cell(v, goal)} |"
                )
        for variant, s in summaries.items():
            first = s["runs_detail"][0] if s["runs_detail"] else {}
            answer = op["answers"].get(variant)
            same = "yes" if variant in op["agreeing"] else ("**no**" if answer else "not read")
            if "median_seconds" in s:
                figures = f"{_s(s['median_seconds'])} | {_s(s['median_process_seconds'])} | {_gib(s['peak_rss_mib'])}"
            else:
                figures = f"{_outcome(s.get('outcome', 'not run'))} | | "
            engine = f" (ran {first['engine_ran']})" if first.get("engine_ran") else ""
            detail_rows.append(
                f"| `{operation}` | {op['features']:,} | {label(variant)}{engine} | {s['finished']}/{s['runs']} | "
                f"{figures} | {answer['rows'] if answer else '':,} | {same} | {_load(first.get('load_average'))} |"
                if answer
                else f"| `{operation}` | {op['features']:,} | {label(variant)}{engine} | {s['finished']}/{s['runs']} | "
                f"{figures} | | {same} | {_load(first.get('load_average'))} |"
            )
    inputs = ", ".join(f"{stem} {count:,}" for stem, count in size["inputs"].items())
    return [
        f"### {n} points",
        "",
        f"Inputs (features): {inputs}; generated in {size['generate_seconds']:,.1f} s. Load average at the size's "
        f"start {_load(size['load_average_at_start'])}.",
        "",
        "| operation | MapSmith | timed | MapSmith (s) | fastest raw engine | its time (s) | goal |",
        "|---|---|---|---:|---|---:|---|",
        *verdict_rows,
        "",
        "| operation | features | who | runs finished | work median (s) | whole process median (s) | peak memory "
        "(GiB) | rows out | same answer | load average 1/5/15 at the first run's start |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---|",
        *detail_rows,
        "",
        *_kept_lines(size),
        *_manifest_lines(size),
    ]


def _kept_lines(size: dict[str, Any]) -> list[str]:
    """Which operations came from an earlier run (``bench_goals.py --merge``), and from which: their ratios
    compare engines of that run only, never across runs."""
    lines = []
    for operation, op in size["operations"].items():
        origin = op.get("measured_in")
        if origin:
            lines.append(
                f"`{operation}` was measured in an earlier run, kept in this file by `--merge`: measured "
                f"{origin['measured_at']}, {_state(origin['code'])}, by `{origin['command']}`; its ratios compare "
                "the engines of that run."
            )
    return [" ".join(lines), ""] if lines else []


def _manifest_lines(size: dict[str, Any]) -> list[str]:
    """Whether each MapSmith output had its provenance manifest beside it when it was read back."""
    missing = [
        f"`{operation}` ({label(variant)})"
        for operation, op in size["operations"].items()
        for variant, written in op.get("manifests_written", {}).items()
        if not written
    ]
    checked = sum(len(op.get("manifests_written", {})) for op in size["operations"].values())
    if not checked:
        return []
    if missing:
        return [f"MapSmith outputs without a provenance manifest beside them: {', '.join(missing)}.", ""]
    return [f"Every MapSmith output read back ({checked}) had its provenance manifest beside it.", ""]


def _variant_runs(r: dict[str, Any], *variants: str) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Per operation and size that one of ``variants`` ran (with any engine named: ``mapsmith_api@duckdb`` is a
    ``mapsmith_api``): where (for the page) and those variants' runs' records."""
    for size in r["sizes"]:
        for operation, op in size["operations"].items():
            runs = [
                run
                for name, variant in op.get("variants", {}).items()
                if name.partition("@")[0] in variants
                for run in variant.get("runs_detail", [])
            ]
            if runs:
                yield f"`{operation}` at {size['points']:,}", runs


def _mapsmith_setup(r: dict[str, Any]) -> str:
    """What MapSmith's Python API did before its clock, from its runs' records: warmed (``MapSmith.warm``, recorded
    as ``warmed`` from 2026-12-05) or not, and on the sedona stack whether the warm-up started Spark."""
    warm, cold = _split(r, "warmed", "mapsmith_api", "mapsmith_api_sedona")
    cold_text = (
        "MapSmith loads the engine a run takes (pyarrow, DuckDB and its spatial extension, SedonaDB) on first use, "
        "so on its clock."
    )
    warm_text = (
        "MapSmith's API is then warmed (`MapSmith.warm()`, what the MCP server's worker does on starting: the engines "
        "imported and DuckDB's database opened with spatial loaded, as a raw DuckDB run is connected before its "
        "clock); "
        "SedonaDB's module (0.3-0.6 s to import) still loads on its clock."
    )
    said = _either(warm, cold, warm_text, cold_text, "`warm`", f"there {cold_text}")
    return " ".join(filter(None, (said, _spark_setup(r))))


def _split(r: dict[str, Any], key: str, *variants: str) -> tuple[list[str], list[str]]:
    """The operations (and sizes) whose runs of ``variants`` all recorded ``key`` true, and the others."""
    yes: list[str] = []
    no: list[str] = []
    for where, runs in _variant_runs(r, *variants):
        (yes if all(run.get(key) for run in runs) else no).append(where)
    return yes, no


def _either(yes: list[str], no: list[str], yes_text: str, no_text: str, what: str, there: str) -> str:
    """``yes_text`` when every operation's runs did it, ``no_text`` when none did, else ``yes_text`` followed by the
    operations measured before ``what`` existed and what held ``there``."""
    if not yes:
        return no_text
    if not no:
        return yes_text
    return f"{yes_text} Not so in the runs measured before {what} existed ({', '.join(no)}): {there}"


def _spark_setup(r: dict[str, Any]) -> str:
    """Whether MapSmith on the sedona stack started its Spark session before its clock (``MAPSMITH_SPARK_WARM=1``,
    recorded as ``spark_session_warmed`` from 2026-12-07) or at its run's start, on its clock; empty without such a
    run."""
    warmed, cold = _split(r, "spark_session_warmed", "mapsmith_api_sedona")
    on_clock = (
        "MapSmith on Spark started its Spark session on its clock (at the run's start, as a service's first Spark "
        "run does), where a raw Spark run's session is started before its clock."
    )
    before = (
        "On the sedona stack the warm-up also started MapSmith's Spark session (`MAPSMITH_SPARK_WARM=1`: what the MCP "
        "server's worker then does on starting), as a raw Spark run's session is started before its clock."
    )
    if not warmed and not cold:
        return ""
    there = "there MapSmith's Spark session started on its clock."
    return _either(warmed, cold, before, on_clock, "`MAPSMITH_SPARK_WARM`", there)


def _mcp_setup(r: dict[str, Any]) -> str:
    """When the MCP variant's clock started, from its runs' records: after the server's worker said it was warm
    (``warm_wait_seconds``, recorded from 2026-12-05) or right after ``initialize``."""
    waits: list[float] = []
    before: list[str] = []
    for where, runs in _variant_runs(r, "mapsmith_mcp"):
        if all(run.get("warm_wait_seconds") is not None for run in runs):
            waits += [float(run["warm_wait_seconds"]) for run in runs]
        else:
            before.append(where)
    right_after = (
        "Over MCP the work's clock starts when `initialize` is answered, while the server's engine worker may still "
        "be warming up, so a call may wait for the rest of it on the clock."
    )
    if not waits:
        return right_after if before else ""  # "": no run over MCP (a preset of the Python API alone)
    text = (
        "Over MCP the work's clock starts once the server's engine worker has said its warm-up is done "
        "(`server_info`'s `sandbox.warm_workers`, asked every 0.05 s from `initialize`'s answer: "
        f"{min(waits):.2f}-{max(waits):.2f} s of waiting, on the whole process's clock only), as the Python API is "
        "warmed before its clock."
    )
    if before:
        text += (
            f" Not so in the runs measured before the server said so ({', '.join(before)}): there the clock started "
            "when `initialize` was answered, while the worker may still have been warming up."
        )
    return text


def _counts_parts(op: dict[str, Any]) -> bool:
    """Whether the operation's answers were compared by their number of polygons too (goal_ops.GoalOp.parts)."""
    return any("parts" in a for a in (op.get("answers") or {}).values())


def goals_section(
    r: dict[str, Any], title: str = "Goals: each operation through MapSmith against the engines"
) -> list[str]:
    p, m, goal = r["parameters"], r["machine"], r["parameters"]["goal"]
    cap = p.get("memory_cap")
    counted = sorted({name for size in r["sizes"] for name, op in size["operations"].items() if _counts_parts(op)})
    parts = f"the same number of polygons ({', '.join(counted)}), " if counted else ""
    lines = [
        f"## {title}",
        "",
        f"Issue 22's goal: through MapSmith, checks, digests and manifest included, an operation takes at most "
        f"{goal['time_ratio_max']:g}x the time and {goal['memory_ratio_max']:g}x the peak memory of the fastest raw "
        "engine doing the same file-to-file work alone (GeoParquet in and out), in the same run. Every engine and "
        "MapSmith (the Python API, and `python -m mapsmith` over stdio through the MCP SDK's client) ran each "
        f"operation in fresh processes, interleaved: {p['runs']} runs per variant below "
        f"{p.get('big_from_points', 10_000_000):,} points, {p['big_runs']} from there. Each is timed twice: the work "
        "alone (inputs read to output written) and the whole process (spawn to exit, start-up included). Before "
        "the work's clock, a raw engine is imported and connected (a Spark session started), and MapSmith's own "
        f"modules are imported and `MapSmith()` built; {' '.join(filter(None, (_mapsmith_setup(r), _mcp_setup(r))))} "
        "Peak memory is the "
        "process's peak RSS plus that of every process it started (a Spark JVM, the MCP server and its sandbox "
        "worker; for MCP the client's own is left out) and "
        "of the application's Spark executors on a cluster: a sum of peaks. The fastest engine is the fastest "
        f"whose output agreed: the same rows, the same digest of the sorted key columns, {parts}and the same "
        f"measure (an area or coordinate sum) within a relative {p.get('measure_relative_tolerance', 1e-6):g}. "
        "Times are medians; memory is the largest peak.",
        "",
        "The machine was shared with other work while this ran, so the figures are noisy and the ratios can "
        "swing either way: the load average at each variant's first run is in the second table of each size. "
        f"Load average (1/5/15 min) before the whole run {_load(r['load_average_before'])}, after "
        f"{_load(r['load_average_after'])}.",
        "",
    ]
    if p.get("partitioned_points"):
        output = (
            "MapSmith was asked for a folder of parts too (`output_path` ending in `.parquet/`), as Spark alone "
            "writes one; DuckDB and SedonaDB alone wrote one file each."
            if p.get("mapsmith_output_folder")
            else "MapSmith wrote one file, as DuckDB and SedonaDB alone did; Spark alone wrote a folder of parts."
        )
        lines += [f"The points were a folder of GeoParquet parts, read as one dataset by every variant. {output}", ""]
    if cap:
        lines += [
            f"Every run was started under a {cap['size']} memory cap ({cap['method']}: {cap['enforces']}). A run the "
            "cap stopped is recorded as such. Peak RSS counts shared-library pages another process brought into "
            "memory first, which the kernel charges to that process's group, so a run can show a peak above the "
            "cap and still finish.",
            "",
        ]
    if not r["finished"]:
        lines += ["This run did not finish every size and operation; what it measured is shown.", ""]
    for size in r["sizes"]:
        lines += _size_tables(size, goal)
    notes = [f"{label(e)}: {why}" for e, why in r["not_run"].items()]
    if notes:
        lines += ["Not run: " + "; ".join(notes) + ".", ""]
    lines += [
        f"Machine: {m['nproc']} CPUs, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["engines"].items())
        + f". MapSmith {m['mapsmith_version']}, {_state(r['code'])}; measured {r['measured_at']}.",
        "",
        f"Produced by `{r['command']}`. To measure the whole set on a quiet machine: "
        "`python benchmarks/bench_goals.py --preset all --spark-master spark://127.0.0.1:7077` (1, 10 and 30 million "
        "points, then 30 million under an 8 GiB cap, MapSmith's sedona stack on a standalone Spark cluster, which "
        "`tests/spark_cluster.py`'s `start_cluster()` starts; `--eta` prints what each size will take first).",
        "",
    ]
    probe = r.get("memory_cap_probe")
    if probe:
        lines += [
            "Memory caps tried on this machine: "
            + "; ".join(
                f"{method} {'works' if v['works'] else 'does not work'} ({v['why']})" for method, v in probe.items()
            )
            + ". `systemd-run` needs systemd as PID 1 and is not tried.",
            "",
        ]
    return lines


def goals_scaling_section(
    r: dict[str, Any] | None, cluster: dict[str, Any] | None, more: tuple[dict[str, Any], ...] = ()
) -> list[str]:
    """docs/scaling.md's tables: MapSmith against the fastest engine per size (``r``, then the runs in
    ``more``, each at other sizes), and the 100M cluster run."""
    lines = ["## MapSmith against the engines at each size", ""]
    if r is None:
        lines += ["No goal run is committed yet: `python benchmarks/bench_goals.py --preset all`.", ""]
    else:
        lines += _scaling_rows(r)
    for extra in more:
        lines += _scaling_rows(extra)
    lines += ["## 100 million points on a Spark standalone cluster", ""]
    if cluster is None:
        lines += [
            "Not run yet. The command generates the points as a partitioned GeoParquet folder (one part of "
            "1,000,000 rows at a time, so the generator holds one part in memory), then runs `spatial_join` and "
            "`count_in_polygons` through MapSmith's sedona stack on the cluster named by "
            "`MAPSMITH_SPARK_MASTER`, beside DuckDB, SedonaDB and Spark alone on the same parts:",
            "",
            "    MAPSMITH_SPARK_MASTER=spark://127.0.0.1:7077 python benchmarks/bench_goals.py --preset cluster-100m",
            "",
            "Its time, memory and the projected cluster cost below are then redone from "
            "`benchmarks/results/goals_cluster.json`.",
            "",
        ]
        return lines
    return [*lines, *goals_section(cluster, title="The 100-million-point run")[2:]]


def _scaling_rows(r: dict[str, Any]) -> list[str]:
    lines = [
        f"From the goal run measured {r['measured_at']} (`bench_goals.py`; `docs/benchmarks.md` shows every "
        "variant): for each operation and size, the fastest raw engine and MapSmith's Python API, the work alone.",
        "",
        "| points | operation | fastest engine | its time (s) | its peak (GiB) | MapSmith (s) | MapSmith peak (GiB) | "
        "goal |",
        "|---:|---|---|---:|---:|---:|---:|---|",
    ]
    goal = r["parameters"]["goal"]
    for size in r["sizes"]:
        for operation, op in size["operations"].items():
            v = op["verdicts"].get("mapsmith_api", {}).get("work")
            if v is None:
                continue
            mine = op["variants"]["mapsmith_api"]
            other = op["variants"].get(v.get("against") or "", {})
            lines.append(
                f"| {size['points']:,} | `{operation}` | {label(v['against']) if v.get('against') else 'none'} | "
                + (f"{_s(other['median_seconds'])} | {_gib(other['peak_rss_mib'])} | " if other else " | | ")
                + (
                    f"{_s(mine['median_seconds'])} | {_gib(mine['peak_rss_mib'])} | "
                    if "median_seconds" in mine
                    else f"{_outcome(mine.get('outcome', 'not run'))} | | "
                )
                + f"{_goal_cell(v, goal)} |"
            )
    kept: dict[str, list[str]] = {}
    for size in r["sizes"]:
        for operation, op in size["operations"].items():
            if origin := op.get("measured_in"):
                when = f"{origin['measured_at']}, {_state(origin['code'])}"
                kept.setdefault(when, []).append(f"`{operation}` at {size['points']:,}")
    earlier = [
        f"{', '.join(where)} {'was' if len(where) == 1 else 'were'} measured {when} (kept by `--merge`)"
        for when, where in kept.items()
    ]
    return [
        *lines,
        "",
        f"Measured {r['measured_at']}, {_state(r['code'])}, on a shared machine (load average "
        f"{_load(r['load_average_before'])} before the run)" + (f"; {'; '.join(earlier)}." if earlier else "."),
        "",
    ]
