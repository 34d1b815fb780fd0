"""Plans through a real MCP client over stdio: validate, explain, execute with progress, lineage, replay.

Two points in EPSG:3035 (an ellipsoidal equal-area projection); the plan buffers them by 100 m with
16 segments per quarter circle and measures the buffers' planar area, so each area is the regular
64-gon's 0.5 * 64 * 100**2 * sin(2 pi / 64) = 31,365.48 m2, known before anything runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import Point

from conftest import published_schema_errors
from layers import read, write_layer
from mcp_client import Reply, call, mcp_session

pytestmark = pytest.mark.mcp

POLYGON_AREA_M2 = 0.5 * 64 * 100.0**2 * math.sin(2 * math.pi / 64)


def _plan(buffer_first: bool = True, input_path: str = "points.gpkg") -> dict[str, Any]:
    buffer = {
        "id": "buffer",
        "operation": "buffer_layer",
        "arguments": {"input_path": input_path, "distance_meters": 100, "output_path": "zones.parquet"},
    }
    area = {
        "id": "area",
        "operation": "measure_area",
        "arguments": {"input_path": "$buffer", "method": "planar", "output_path": "zones_area.parquet"},
    }
    return {"goal": "100 m zones and their areas", "steps": [buffer, area] if buffer_first else [area, buffer]}


@pytest.fixture(scope="module")
def replies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ws = tmp_path_factory.mktemp("plans") / "ws"
    ws.mkdir()
    write_layer(ws / "points.gpkg", [Point(4_321_000, 3_210_000), Point(4_330_000, 3_210_000)], "EPSG:3035", id=[1, 2])
    progress: list[tuple[float, str | None]] = []

    async def talk() -> dict[str, Reply]:
        out: dict[str, Reply] = {}
        async with mcp_session(ws) as (session, _):
            out["wrong_order"] = await call(session, "validate_plan", {"plan": _plan(buffer_first=False)})
            out["explain"] = await call(session, "explain_plan", {"plan": _plan()})
            out["rejected"] = await call(session, "execute_plan", {"plan": _plan(buffer_first=False)})

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append((done, message))

            out["executed"] = await call(session, "execute_plan", {"plan": _plan()}, progress_callback=on_progress)
            out["lineage"] = await call(session, "get_lineage", {"path": "zones_area.parquet"})
            out["replay"] = await call(session, "replay", {"path": "zones_area.parquet"})
            # A plan that validates but whose first step refuses at run time: measure_area will not
            # overwrite the area_m2 field the executed plan already wrote (FIELD_EXISTS).
            failing = {
                "goal": "measure again",
                "steps": [
                    {
                        "id": "again",
                        "operation": "measure_area",
                        "arguments": {
                            "input_path": "zones_area.parquet",
                            "method": "planar",
                            "output_path": "again.parquet",
                        },
                    },
                    {
                        "id": "buffer",
                        "operation": "buffer_layer",
                        "arguments": {"input_path": "$again", "distance_meters": 5, "output_path": "again_5m.parquet"},
                    },
                ],
            }
            out["failed"] = await call(session, "execute_plan", {"plan": failing})
        return out

    result = anyio.run(talk)
    for manifest in ws.rglob("*.provenance.json"):
        errors = published_schema_errors(json.loads(manifest.read_text("utf-8")))
        assert not errors, f"{manifest.name} does not conform: {errors}"
    return {"ws": ws, "progress": progress, **result}


def test_validate_plan_names_the_step_to_move(replies: dict[str, Any]) -> None:
    reply = replies["wrong_order"]
    assert not reply.is_error and reply.data["valid"] is False
    (finding,) = [f for f in reply.data["findings"] if f["code"] == "FORWARD_REFERENCE"]
    assert finding["step"] == "area" and finding["argument"] == "input_path"
    assert "move step 'buffer' before 'area'" in finding["message"]


def test_an_invalid_plan_is_refused_by_execute_plan_and_nothing_is_written(replies: dict[str, Any]) -> None:
    reply = replies["rejected"]
    assert reply.is_error and reply.data["code"] == "PLAN_REJECTED"
    assert [f["code"] for f in reply.data["evidence"]["findings"]] == ["FORWARD_REFERENCE"]


def test_explain_plan_sources_every_sentence(replies: dict[str, Any]) -> None:
    data = replies["explain"].data
    assert data["valid"] is True and data["narrative"]
    assert all(item["from"] for item in data["narrative"])


def test_execute_plan_runs_the_steps_reports_progress_and_writes_the_plan_manifest(replies: dict[str, Any]) -> None:
    ws, reply = replies["ws"], replies["executed"]
    assert not reply.is_error, reply.data
    assert [(s["id"], s["status"]) for s in reply.data["steps"]] == [("buffer", "ok"), ("area", "ok")]
    areas = read(ws / "zones_area.parquet")["area_m2"].tolist()
    assert areas == pytest.approx([POLYGON_AREA_M2] * 2, rel=1e-9)
    plan_manifest = json.loads((ws / "zones_area.parquet.plan.json").read_text("utf-8"))
    assert [s["id"] for s in plan_manifest["steps"]] == ["buffer", "area"]
    assert plan_manifest["fingerprint"] == reply.data["fingerprint"]
    messages = [m or "" for _, m in replies["progress"]]
    assert any("step 1/2" in m for m in messages) and any("step 2/2" in m for m in messages)
    fractions = [f for f, _ in replies["progress"]]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_lineage_and_replay_over_mcp(replies: dict[str, Any]) -> None:
    lineage = replies["lineage"].data
    assert [h["operation"] for h in lineage["hops"]] == ["buffer_layer", "measure_area"]
    assert [o["path"] for o in lineage["originals"]] == ["points.gpkg"]
    replay = replies["replay"].data
    assert replay["identical"] is True and replay["verdict"] == "identical"


def test_a_step_failing_at_run_time_stops_the_plan_and_is_named(replies: dict[str, Any]) -> None:
    reply = replies["failed"]
    assert reply.is_error and reply.data["code"] == "PLAN_STEP_FAILED"
    evidence = reply.data["evidence"]
    assert evidence["failed_step"] == "again" and evidence["error"]["code"] == "FIELD_EXISTS"
    assert [s["status"] for s in evidence["steps"]] == ["failed", "not_run"]
    assert not (replies["ws"] / "again.parquet").exists() and not (replies["ws"] / "again_5m.parquet").exists()


def test_the_workspace_holds_no_stray_files(replies: dict[str, Any]) -> None:
    leftovers = [p.name for p in Path(replies["ws"]).iterdir() if p.name.startswith(".")]
    assert leftovers == []
