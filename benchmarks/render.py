"""Write ``docs/benchmarks.md`` from the committed results in ``benchmarks/results/*.json``.

The page holds no number a script did not measure: every figure comes from a results file, and
``tests/docs/test_generated_docs.py`` fails when the page and ``render()`` disagree. Rendering is
deterministic (same JSON, same bytes) and never measures, times or reads the clock itself.

    python benchmarks/render.py            # rewrite docs/benchmarks.md
    python benchmarks/render.py --check    # exit 1 if the page is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
PAGE = HERE.parent / "docs" / "benchmarks.md"

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
    ),
    "machine": ("nproc", "python", "platform", "mapsmith_version", "mcp_sdk_version", "load_average_1min"),
    "server": ("median_seconds", "min_seconds", "max_seconds", "runs_seconds"),
    "interpreter_floor": ("command", "median_seconds", "min_seconds", "max_seconds", "runs_seconds"),
    "sdk_import": ("command", "median_seconds", "min_seconds", "max_seconds", "runs_seconds"),
    "target": ("median_seconds", "met"),
}


def load_results(results_dir: Path = RESULTS_DIR) -> dict[str, dict[str, Any]]:
    """Every results file, by name without ``.json``."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(results_dir.glob("*.json"))}


def missing_fields(result: dict[str, Any], fields: dict[str, tuple[str, ...]] = STARTUP_FIELDS) -> list[str]:
    """The dotted names of the fields the page needs that ``result`` lacks."""
    missing = []
    for section, names in fields.items():
        holder = result if not section else result.get(section)
        for name in names:
            if not isinstance(holder, dict) or name not in holder:
                missing.append(f"{section}.{name}" if section else name)
    return missing


def _s(seconds: float) -> str:
    return f"{seconds:.3f}"


def _row(label: str, command: str, summary: dict[str, Any]) -> str:
    return (
        f"| {label} | `{command}` | {_s(summary['median_seconds'])} | {_s(summary['min_seconds'])} | "
        f"{_s(summary['max_seconds'])} |"
    )


def _startup(r: dict[str, Any]) -> list[str]:
    m, target = r["machine"], r["target"]
    engines = r["engines_imported_before_a_tool_call"]
    lines = [
        "## Cold start: spawn to `tools/list`",
        "",
        f"Seconds from spawning `python -m mapsmith` to the answer of `tools/list` over stdio, through the MCP "
        f"SDK's own stdio client (`initialize`, then `list_tools`), a fresh server process for each of "
        f"{r['runs']} runs; the server listed {r['tools_listed']} tools. The two floors below it are timed "
        "the same number of times in fresh processes.",
        "",
        "| what | command | median (s) | min (s) | max (s) |",
        "|---|---|---:|---:|---:|",
        _row("server start to `tools/list`", "python -m mapsmith", r["server"]),
        _row("MCP SDK import (floor for any SDK server)", r["sdk_import"]["command"], r["sdk_import"]),
        _row("interpreter start (floor)", r["interpreter_floor"]["command"], r["interpreter_floor"]),
        "",
        f"Target: median under {target['median_seconds']} s on this machine: "
        f"**{'met' if target['met'] else 'not met'}**.",
        "",
        f"Engine modules imported before any tool call: {', '.join(f'`{e}`' for e in engines) or 'none'}.",
        "",
        f"All runs (s): {', '.join(_s(t) for t in r['server']['runs_seconds'])}.",
        "",
    ]
    breakdown = r.get("breakdown")
    if breakdown:
        lines += [
            "### Where the time goes",
            "",
            "The phases of `python -m mapsmith` before it serves, timed once in one fresh process:",
            "",
            "| phase | seconds |",
            "|---|---:|",
            *(f"| `{name}` | {_s(sec)} |" for name, sec in breakdown["phases_seconds"].items()),
            "",
            f"Import time by top-level package, from `{breakdown['imports']['command']}` "
            f"({_s(breakdown['imports']['total_seconds'])} s in all, one run):",
            "",
            "| package | seconds |",
            "|---|---:|",
            *(f"| `{name}` | {_s(sec)} |" for name, sec in breakdown["imports"]["by_package_seconds"].items()),
            "",
        ]
    lines += [
        f"Machine: {m['nproc']} CPUs, {m['platform']}, Python {m['python']}; mapsmith {m['mapsmith_version']}, "
        f"MCP SDK {m['mcp_sdk_version']}. Measured {r['date']}; 1-minute load average "
        f"{m['load_average_1min']['before']} before the timed runs, {m['load_average_1min']['after']} after.",
        "",
        f"Produced by `{r['command']}`.",
        "",
    ]
    return lines


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
        lines += _startup(results["startup"])
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
