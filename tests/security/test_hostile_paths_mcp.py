"""A sample of the hostile path corpus over the wire: a real MCP client, ``python -m mapsmith`` over stdio.

The in-process run (test_hostile_paths.py) calls the functions the tools call; this shows the wire
gives the same answer: for each sampled entry and tool, the codes in the MCP reply equal the codes
the same call gets in process, and the reply is a structured error (or plan findings). Where strace
is installed the server runs under ``strace -f``, so a file the server's C libraries open outside the
workspace is seen as well; the bait snapshot and the loopback request count are checked either way.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_client import call, server_env

pytestmark = pytest.mark.mcp

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "data" / "hostile_paths.json").read_text("utf-8"))
PER_CATEGORY = 2


def _sample() -> list[dict[str, Any]]:
    """The first entries of each category that JSON text can carry and that have no known gap."""
    picked: dict[str, list[dict[str, Any]]] = {}
    for entry in CORPUS["entries"]:
        if re.search("[\ud800-\udfff]", entry["path"]):
            continue
        group = picked.setdefault(entry["category"], [])
        if len(group) < PER_CATEGORY:
            group.append(entry)
    return [e for group in picked.values() for e in group]


SAMPLE = _sample()
BUFFER = {"input_path": "missing_input.gpkg", "distance_meters": 10.0, "output_path": "out.gpkg"}
CLIP = {"input_path": "missing_input.tif", "mask_path": "missing_mask.gpkg", "output_path": "out.tif"}


def _plan(path: str) -> dict[str, Any]:
    return {
        "goal": "hostile",
        "steps": [{"id": "a", "operation": "buffer_layer", "arguments": {**BUFFER, "input_path": path}}],
    }


# (tool, arguments over the wire, the same call in process)
TOOLS: list[tuple[str, Callable[[str], dict[str, Any]], Callable[[Any, str], Any]]] = [
    (
        "buffer_layer",
        lambda p: {**BUFFER, "input_path": p},
        lambda app, p: app.run("buffer_layer", {**BUFFER, "input_path": p}),
    ),
    (
        "buffer_layer",
        lambda p: {**BUFFER, "output_path": p},
        lambda app, p: app.run("buffer_layer", {**BUFFER, "output_path": p}),
    ),
    (
        "run_operation",
        lambda p: {"operation": "clip_raster", "arguments": {**CLIP, "mask_path": p}},
        lambda app, p: app.run("clip_raster", {**CLIP, "mask_path": p}),
    ),
    ("describe_dataset", lambda p: {"input_path": p}, lambda app, p: app.run("describe_dataset", {"input_path": p})),
    ("get_provenance", lambda p: {"path": p}, lambda app, p: app.get_provenance(p)),
    ("get_lineage", lambda p: {"path": p}, lambda app, p: app.get_lineage(p)),
    ("replay", lambda p: {"path": p}, lambda app, p: app.replay(p)),
    ("validate_plan", lambda p: {"plan": _plan(p)}, lambda app, p: app.validate_plan(_plan(p))),
    ("execute_plan", lambda p: {"plan": _plan(p)}, lambda app, p: app.execute_plan(_plan(p))),
]


def _wire_codes(is_error: bool, data: dict[str, Any]) -> frozenset[str]:
    if is_error:
        findings = data.get("evidence", {}).get("findings", [])
        return frozenset({data.get("code", "")} | {f.get("code", "") for f in findings if isinstance(f, dict)})
    return frozenset(f["code"] for f in data.get("findings", []))


def _in_process_codes(run: Callable[[], Any]) -> frozenset[str]:
    """The codes of the same call made in process, read as the server shapes them."""
    from mapsmith.errors import MapSmithError

    try:
        data = run()
    except MapSmithError as exc:
        return _wire_codes(True, exc.to_dict())
    data = data.to_dict() if hasattr(data, "to_dict") else data
    return _wire_codes(False, data)


@asynccontextmanager
async def _session(workspace: Path, strace_log: Path | None) -> AsyncIterator[Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    command, args = sys.executable, ["-m", "mapsmith"]
    if strace_log is not None:
        command = "strace"
        args = ["-f", "-qq", "-o", str(strace_log), "-e", "trace=%file,%network", sys.executable, *args]
    params = StdioServerParameters(command=command, args=args, env=server_env(workspace), cwd=str(workspace))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def test_sample_over_stdio_matches_in_process(tmp_path: Path, path_arena_factory: Any, path_loopback: Any) -> None:
    from catalog_args import sample_dem
    from mapsmith.app import MapSmith

    arena = path_arena_factory(tmp_path / "arena")
    sample_dem(arena.ws / "control.tif")
    app = MapSmith({"MAPSMITH_WORKSPACE": str(arena.ws)})
    baseline = arena.outside_snapshot()
    strace_log = tmp_path / "strace.log" if shutil.which("strace") else None
    replies: list[tuple[dict[str, Any], str, frozenset[str], bool]] = []

    async def run() -> None:
        async with _session(arena.ws, strace_log) as session:
            for entry in SAMPLE:
                path = arena.expand(entry["path"])
                for tool, wire_args, _ in TOOLS:
                    reply = await call(session, tool, wire_args(path))
                    replies.append((entry, tool, _wire_codes(reply.is_error, reply.data), reply.is_error))
            # The positive control: a real read inside the workspace, which strace must see.
            control = await call(session, "describe_dataset", {"input_path": "control.tif"})
            assert not control.is_error, control.data

    anyio.run(run)
    assert len(replies) == len(SAMPLE) * len(TOOLS)
    assert len(SAMPLE) >= 30

    mismatches = []
    for (entry, tool, codes, is_error), (_, _, in_process) in zip(
        replies, [t for _ in SAMPLE for t in TOOLS], strict=True
    ):
        path = arena.expand(entry["path"])
        expected = _in_process_codes(lambda: in_process(app, path))  # noqa: B023 - called at once
        if codes != expected:
            mismatches.append(f"{entry['id']} {tool}: wire {sorted(codes)} != in process {sorted(expected)}")
        if entry["expect"] == "refuse" and not (
            codes & set(entry["codes"]) or (path.startswith("$") and "DANGLING_REFERENCE" in codes)
        ):
            mismatches.append(f"{entry['id']} {tool}: wire {sorted(codes)}, expected one of {entry['codes']}")
        if entry["expect"] == "refuse" and tool not in ("validate_plan",) and not is_error:
            mismatches.append(f"{entry['id']} {tool}: not an isError reply")
    assert not mismatches, mismatches[:10]

    assert arena.outside_snapshot() == baseline
    assert path_loopback.requests == []
    if strace_log is not None:
        lines = [line for line in strace_log.read_text(errors="replace").splitlines() if "execve(" not in line]
        assert any(f'"{arena.ws}/control.tif"' in line and "open" in line for line in lines), "strace saw no open"
        acting = re.compile(
            r"\b(open|openat|openat2|creat|mkdir|unlink|unlinkat|rename|renameat2?|truncate|link|symlink)\("
        )
        outside = [str(arena.bait), "/etc/passwd", "/etc/shadow", "/tmp/outside"]
        # A path as a call's argument starts right after the quote; bubblewrap's own set-up names
        # "/newroot/etc/passwd" (the synthesized file inside the sandbox), which is not the host's.
        touching = [line for line in lines if any(f'"{o}' in line for o in outside) and acting.search(line)]
        connects = [line for line in lines if "connect(" in line and "AF_INET" in line]
        assert not touching, touching[:10]
        assert not connects, connects[:10]
