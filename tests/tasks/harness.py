"""The harness for the analyst tasks: build every task's inputs, run every task's tool calls through one
real MCP session (``python -m mapsmith`` over stdio, sandbox left at its default), then grade each task.

It must never produce a deliverable itself: everything a grader reads was written by a MapSmith tool call.
Tests may build inputs and read outputs with geopandas, pyogrio, sqlite3 or csv; the solution path may not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from conftest import check_workspace_manifests, published_schema_errors
from mcp_client import Reply, call, mcp_session

# Tools the server lists by name; every other operation is reached through run_operation.


@dataclass
class Task:
    id: str
    request: str  # the analyst's words
    deliverable: str  # file, layers, columns, sort order
    checks: str  # what the grader asserts, in one sentence (listed in README.md)
    build: Callable[[Path], None]
    steps: list[tuple[str, dict[str, Any]]]
    grade: Callable[[Path, list[Reply]], None]
    replies: list[Reply] = field(default_factory=list)


async def _run(ws: Path, tasks: list[Task]) -> None:
    async with mcp_session(ws) as (session, _):
        listed = {tool.name for tool in (await session.list_tools()).tools}
        for task in tasks:
            for tool, arguments in task.steps:
                if tool in listed:
                    reply = await call(session, tool, arguments)
                else:
                    reply = await call(session, "run_operation", {"operation": tool, "arguments": arguments})
                task.replies.append(reply)
                if reply.is_error:
                    break  # the grader reports the refusal; later steps would only repeat it


def run_tasks(ws: Path, tasks: list[Task]) -> dict[str, Task]:
    for task in tasks:
        task.build(ws)
    anyio.run(_run, ws, tasks)
    return {task.id: task for task in tasks}


def check_manifests(ws: Path) -> None:
    """The root workspace fixture's teardown check, for a module-scoped workspace."""
    check_workspace_manifests(ws)


def written(steps: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str | None]]:
    """Every (output_path, output_layer) the task's calls write, plan steps included."""
    out: list[tuple[str, str | None]] = []
    for _, arguments in steps:
        if "plan" in arguments:
            out += written([(s["operation"], s["arguments"]) for s in arguments["plan"]["steps"]])
        elif "output_path" in arguments:
            out.append((arguments["output_path"], arguments.get("output_layer")))
    return out


def check_task_manifests(ws: Path, task: Task) -> None:
    """Each file the task wrote has its own record, naming that file (and layer), that validates."""
    for path, layer in written(task.steps):
        name = f"{path}.{layer}.provenance.json" if layer else f"{path}.provenance.json"
        manifest = ws / name
        assert manifest.exists(), f"{task.id}: no manifest {name}"
        record = json.loads(manifest.read_text("utf-8"))
        assert not published_schema_errors(record), f"{task.id}: {name} does not conform"
        assert record["output"]["path"] == path
        if layer:
            assert record["output"]["layer"] == layer


def succeeded(task: Task) -> list[Reply]:
    """Every step answered without a refusal; the refusal itself is the failure message otherwise."""
    assert len(task.replies) == len(task.steps), f"{task.id}: stopped early: {task.replies[-1].data}"
    for (tool, _), reply in zip(task.steps, task.replies, strict=True):
        assert not reply.is_error, f"{task.id}: {tool} refused: {reply.data}"
    return task.replies
