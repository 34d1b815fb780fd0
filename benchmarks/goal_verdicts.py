"""The arithmetic of the goal benchmark: a variant's summary, the fastest raw engine, the ratios and the verdict.

Issue 22's goal, per operation and size: through MapSmith (checks, digests, manifest included) the time is
at most ``TIME_RATIO_MAX`` and the peak memory at most ``MEMORY_RATIO_MAX`` of the fastest raw engine doing
the same file-to-file work alone, in the same run. Both the work alone and the whole process (spawn to
exit) are judged. Only engines whose output agreed with the others' count as "doing the same work".

Pure functions over recorded runs: ``bench_goals.py`` stores their results, ``render_goals.py`` shows them
and the docs tests recompute them by hand. It must never measure or read files.
"""

from __future__ import annotations

import statistics
from typing import Any

TIME_RATIO_MAX = 1.25
MEMORY_RATIO_MAX = 1.5
LEVELS = {"work": "seconds", "process": "process_seconds"}  # what is timed -> the run's field
RAW_ROLES = ("geopandas", "duckdb", "sedonadb", "spark", "spark_cluster")


def is_raw(variant: str) -> bool:
    return variant in RAW_ROLES


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the finished runs' times, the largest of their peaks; the first failure, if any."""
    done = [r for r in runs if r["outcome"] == "finished"]
    out: dict[str, Any] = {"runs": len(runs), "finished": len(done)}
    failed = [r["outcome"] for r in runs if r["outcome"] != "finished"]
    if failed:
        out["outcome"] = failed[0]
    if done:
        out["median_seconds"] = round(statistics.median(r["seconds"] for r in done), 3)
        out["median_process_seconds"] = round(statistics.median(r["process_seconds"] for r in done), 3)
        out["peak_rss_mib"] = round(max(r["peak_rss_mib"] for r in done), 1)
    return out


def fastest_raw(summaries: dict[str, dict[str, Any]], agreeing: set[str], level: str) -> str | None:
    """The raw engine with the smallest median time at ``level`` among those that finished and agreed."""
    key = f"median_{LEVELS[level]}"
    candidates = [v for v, s in summaries.items() if is_raw(v) and v in agreeing and key in s]
    return min(candidates, key=lambda v: (summaries[v][key], v)) if candidates else None


def verdict(summaries: dict[str, dict[str, Any]], agreeing: set[str], variant: str, level: str) -> dict[str, Any]:
    """MapSmith ``variant`` against the fastest agreeing raw engine at ``level``: ratios and whether the goal holds."""
    key = f"median_{LEVELS[level]}"
    mine = summaries.get(variant, {})
    best = fastest_raw(summaries, agreeing, level)
    if key not in mine:
        return {"against": best, "met": False, "why": "MapSmith did not finish"}
    if variant not in agreeing:
        return {"against": best, "met": False, "why": "MapSmith's answer differed from the engines'"}
    if best is None:
        return {"against": None, "met": None, "why": "no raw engine finished with the same answer"}
    other = summaries[best]
    time_ratio = round(mine[key] / other[key], 3)
    memory_ratio = round(mine["peak_rss_mib"] / other["peak_rss_mib"], 3)
    return {
        "against": best,
        "time_ratio": time_ratio,
        "memory_ratio": memory_ratio,
        "met": time_ratio <= TIME_RATIO_MAX and memory_ratio <= MEMORY_RATIO_MAX,
    }


def agreeing_variants(answers: dict[str, dict[str, Any]], tolerance: float) -> tuple[set[str], bool | None]:
    """The variants whose answer matches the most common one (rows, key digest and parts equal, where the answers
    count parts, and measure within ``tolerance``).

    The reference is the answer most variants gave (ties broken by the raw engines first, then by name), so a
    single engine with a different answer is the one left out, not the majority.
    """
    if not answers:
        return set(), None
    exact: dict[tuple[Any, ...], list[str]] = {}
    for variant, a in answers.items():
        exact.setdefault((a["rows"], a["keys_sha256_16"], a.get("parts")), []).append(variant)
    groups = sorted(exact.values(), key=lambda g: (-len(g), not any(is_raw(v) for v in g), sorted(g)))
    reference = answers[groups[0][0]]
    same = set()
    for variant in groups[0]:
        m, ref = answers[variant].get("measure"), reference.get("measure")
        if m is None or ref is None or abs(m - ref) <= tolerance * max(abs(ref), 1.0):
            same.add(variant)
    return same, same == set(answers)
