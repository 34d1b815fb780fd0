"""The cold-start section of ``docs/benchmarks.md``, from ``results/startup.json`` (``bench_startup.py``).

Split out of ``render.py`` along the page's sections; the number formatting every section shares
(``seconds``, ``row``) lives here too. It must never measure, time or read the clock: every figure
comes from the results file.
"""

from __future__ import annotations

from typing import Any


def seconds(value: float) -> str:
    return f"{value:.3f}"


def yes(flag: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "not checked"}[flag]


def row(label: str, command: str, summary: dict[str, Any]) -> str:
    return (
        f"| {label} | `{command}` | {seconds(summary['median_seconds'])} | {seconds(summary['min_seconds'])} | "
        f"{seconds(summary['max_seconds'])} |"
    )


def startup_section(r: dict[str, Any]) -> list[str]:
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
        row("server start to `tools/list`", "python -m mapsmith", r["server"]),
        *(
            [row("the same, qgis plugin left out", r["server_without_qgis"]["command"], r["server_without_qgis"])]
            if "server_without_qgis" in r
            else []
        ),
        row("MCP SDK import (floor for any SDK server)", r["sdk_import"]["command"], r["sdk_import"]),
        row("interpreter start (floor)", r["interpreter_floor"]["command"], r["interpreter_floor"]),
        "",
        f"Target: median under {target['median_seconds']} s on this machine: "
        f"**{'met' if target['met'] else 'not met'}**.",
        "",
        f"Engine modules imported before any tool call: {', '.join(f'`{e}`' for e in engines) or 'none'}.",
        "",
        f"All runs (s): {', '.join(seconds(t) for t in r['server']['runs_seconds'])}.",
        "",
        *_startup_after(r),
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
            *(f"| `{name}` | {seconds(sec)} |" for name, sec in breakdown["phases_seconds"].items()),
            "",
            f"Import time by top-level package, from `{breakdown['imports']['command']}` "
            f"({seconds(breakdown['imports']['total_seconds'])} s in all, one run):",
            "",
            "| package | seconds |",
            "|---|---:|",
            *(f"| `{name}` | {seconds(sec)} |" for name, sec in breakdown["imports"]["by_package_seconds"].items()),
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


def _startup_after(r: dict[str, Any]) -> list[str]:
    """What the same sessions measured after tools/list: server_info, the first catalogue listing, the sizes."""
    stacks = r["stacks"]
    engines = stacks["engines"]
    lines = [
        "### After start: `server_info`, the tool list's size, the stacks measured",
        "",
        "Each timed session goes on after `tools/list` (its clock already stopped): the first `server_info` "
        "call, then the first `list_operations` (the whole catalogue, which loads the `qgis:` toolbox when "
        "QGIS is installed).",
        "",
        "| what | call | median (s) | min (s) | max (s) |",
        "|---|---|---:|---:|---:|",
        row("`server_info`, first call", "tools/call server_info", r["server_info"]),
    ]
    if "list_operations" in r:
        lines.append(row("`list_operations`, first call", "tools/call list_operations", r["list_operations"]))
    unavailable = "; ".join(f"{name}: {why}" for name, why in sorted(stacks["unavailable"].items()))
    versions = "; ".join(
        f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())) for name, found in sorted(engines.items())
    )
    cold = r.get("qgis_cache_cold")
    if cold:
        lines += [
            "",
            "Once, on the first start after installing QGIS (the qgis stack's cache folder empty: "
            f"`{cold['command']}`): start {seconds(cold['server_seconds'])} s, `server_info` "
            f"{seconds(cold['server_info_seconds'])} s (it runs `qgis_process --version`), `list_operations` "
            f"{seconds(cold['list_operations_seconds'])} s (it asks QGIS for every algorithm); it wrote the "
            f"{', '.join(cold['cache_files_written'])} cache files that every later start reads.",
        ]
    lines += [
        "",
        f"The `tools/list` result was {r['tools_list_characters']:,} characters of JSON ({r['tools_listed']} tools).",
        "",
        f"Stacks available to the measured server: {', '.join(stacks['available']) or 'none'}"
        + (f" (not available: {unavailable})" if unavailable else "")
        + f"; extras installed: {', '.join(stacks['extras_installed']) or 'none'}; toolboxes after start: "
        f"{', '.join(stacks['toolboxes_after_start']) or 'none'}.",
        "",
        f"Engine versions (from `server_info`): {versions}.",
        "",
    ]
    return lines


def sandbox_section(r: dict[str, Any]) -> list[str]:
    """``sandbox.json`` (``bench_sandbox.py``): what running the engines in the bubblewrap worker costs."""
    m = r["machine"]
    start, worker, calls = r["startup_to_tools_list"], r["worker_start"], r["per_call"]

    def row(label: str, inproc: dict[str, Any] | None, sandbox: dict[str, Any], overhead: float | None) -> str:
        cells = [f"{inproc['median_s'] * 1000:.1f}" if inproc else "—"]
        cells.append(f"{sandbox['median_s'] * 1000:.1f} ({sandbox['min_s'] * 1000:.1f}–{sandbox['max_s'] * 1000:.1f})")
        cells.append(f"{overhead * 1000:+.1f}" if overhead is not None else "—")
        return f"| {label} | " + " | ".join(cells) + " |"

    lines = [
        "## Engine sandbox: what the bubblewrap worker costs",
        "",
        _sentence(r["description"]),
        "",
        "| measure | in-process median (ms) | sandbox median (min–max) (ms) | difference (ms) |",
        "|---|---:|---:|---:|",
        row("start to `tools/list`", start["in_process"], start["sandbox"], start["overhead_median_s"]),
        row("one worker's start (in the background, after `tools/list`)", None, worker, None),
    ]
    for name, call in calls.items():
        lines.append(row(f"`{name}`, one call", call["in_process"], call["sandbox"], call["overhead_median_s"]))
    load = m["load_average_1min"]
    lines += [
        "",
        f"{m['nproc']} CPUs, {m['engines'].get('bubblewrap', 'bubblewrap')}, {r['date']}; 1-minute load average "
        f"{load['before']} before and {load['after']} after. Produced by `{r['command']}`.",
        "",
    ]
    return lines


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith(".") else text + "."
