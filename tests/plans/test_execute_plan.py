"""execute_plan against a three-step plan whose answers are worked out by hand.

Two points in EPSG:3035 (LAEA Europe, an ellipsoidal equal-area projection) 9 km apart near its
natural origin, named "a" and "b". The plan buffers them by 100 m with 16 segments per quarter circle,
so each buffer is a regular 64-gon inscribed in a 100 m circle, whose area is exactly
0.5 * 64 * 100**2 * sin(2 * pi / 64) = 31,365.48 m2 (pi * 100**2 = 31,415.93 m2 is the circle it
approximates); measure_area(method="planar") in an equal-area CRS gives that polygon's area; and
select_features keeps the one named "a". The workspace fixture validates every provenance manifest
a test leaves behind, including the runner's failure records.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from layers import read, write_layer
from mapsmith.errors import ArgumentError, InputError
from mapsmith.plans.execute import PlanRejected, execute_plan
from mapsmith.plans.model import parse_plan, plan_fingerprint
from mapsmith.provenance.digests import dataset_digest

SEGMENTS_PER_QUARTER = 16
RADIUS_M = 100.0
N_SIDES = 4 * SEGMENTS_PER_QUARTER
POLYGON_AREA_M2 = 0.5 * N_SIDES * RADIUS_M**2 * math.sin(2 * math.pi / N_SIDES)  # 31,365.484...
UTC_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def points(workspace: Path, name: str = "points.gpkg", **extra: list[Any]) -> Path:
    from shapely.geometry import Point

    geoms = [Point(4_321_000, 3_210_000), Point(4_330_000, 3_210_000)]
    return write_layer(workspace / name, geoms, "EPSG:3035", name=["a", "b"], **extra)


def three_steps(folder: str = "out", ext: str = ".gpkg", **overwrite: bool) -> dict[str, Any]:
    flag = {"overwrite": True} if overwrite.get("all") else {}
    return {
        "goal": "the 100 m zone around point a, with its ground area",
        "steps": [
            {
                "id": "buffer",
                "operation": "buffer_layer",
                "arguments": {
                    "input_path": "points.gpkg",
                    "distance_meters": RADIUS_M,
                    "segments_per_quarter_circle": SEGMENTS_PER_QUARTER,
                    "output_path": f"{folder}/zones{ext}",
                    **flag,
                },
            },
            {
                "id": "area",
                "operation": "measure_area",
                "arguments": {
                    "input_path": "$buffer",
                    "method": "planar",
                    "output_path": f"{folder}/area{ext}",
                    **flag,
                },
            },
            {
                "id": "pick",
                "operation": "select_features",
                "arguments": {
                    "input_path": "$area",
                    "where": "name = 'a'",
                    "output_path": f"{folder}/picked{ext}",
                    **flag,
                },
            },
        ],
    }


def files(workspace: Path) -> set[str]:
    return {p.relative_to(workspace).as_posix() for p in workspace.rglob("*")}


@pytest.fixture
def ready(workspace: Path) -> Path:
    points(workspace)
    (workspace / "out").mkdir()
    return workspace


# -- a plan that runs through -----------------------------------------------------------------------


def test_every_step_runs_in_order_and_the_answer_is_the_hand_computed_one(app: Any, ready: Path) -> None:
    result = execute_plan(app, three_steps())

    assert result.status == "ok"
    assert [(s.id, s.operation, s.status) for s in result.steps] == [
        ("buffer", "buffer_layer", "ok"),
        ("area", "measure_area", "ok"),
        ("pick", "select_features", "ok"),
    ]
    assert [s.output_path for s in result.steps] == ["out/zones.gpkg", "out/area.gpkg", "out/picked.gpkg"]
    for step in result.steps:
        assert step.manifest_path == f"{step.output_path}.provenance.json"
        assert (ready / step.manifest_path).exists()  # and the conftest validates each at teardown
        assert step.warnings == [] and step.failed_checks == []
    zones, area, picked = (read(ready / "out" / n) for n in ("zones.gpkg", "area.gpkg", "picked.gpkg"))
    assert (len(zones), len(area), len(picked)) == (2, 2, 1)
    assert picked["name"].tolist() == ["a"]
    assert picked["area_m2"].iloc[0] == pytest.approx(POLYGON_AREA_M2, rel=1e-9)
    assert picked["area_m2"].iloc[0] == pytest.approx(31_365.484, abs=1e-3)
    assert picked["area_m2"].iloc[0] == pytest.approx(math.pi * RADIUS_M**2, rel=2e-3)  # the circle it approximates
    assert result.answers == {}
    assert result.plan_manifest_path == "out/picked.gpkg.plan.json"
    assert result.failed_step is None and result.error is None and result.failure_record_path is None


def test_references_run_as_the_output_path_of_the_referenced_step(app: Any, ready: Path) -> None:
    result = execute_plan(app, three_steps())

    assert result.steps[1].arguments == {
        "input_path": "out/zones.gpkg",
        "method": "planar",
        "output_path": "out/area.gpkg",
    }
    assert result.steps[2].arguments["input_path"] == "out/area.gpkg"
    # each step's own manifest names the file the previous step wrote, by the same digest
    step2 = json.loads((ready / "out/area.gpkg.provenance.json").read_text("utf-8"))
    assert step2["inputs"][0]["path"] == "out/zones.gpkg"
    assert step2["inputs"][0]["sha256"] == dataset_digest(ready / "out/zones.gpkg")


def test_the_plan_manifest_records_the_plan_its_fingerprint_and_the_final_bytes(app: Any, ready: Path) -> None:
    from mapsmith import __version__

    plan = three_steps()
    result = execute_plan(app, plan)
    record = json.loads((ready / "out/picked.gpkg.plan.json").read_text("utf-8"))

    assert record["mapsmith_plan_manifest"] == "1"
    assert record["status"] == "ok"
    assert record["goal"] == plan["goal"]
    assert record["plan"] == plan  # as submitted, references and all
    assert record["fingerprint"] == plan_fingerprint(parse_plan(plan)) == result.fingerprint
    assert record["fingerprint"].startswith("sha256:") and len(record["fingerprint"]) == len("sha256:") + 64
    assert [s["id"] for s in record["steps"]] == ["buffer", "area", "pick"]
    assert record["steps"] == [s.to_dict() for s in result.steps]
    assert record["steps"][2] == {
        "id": "pick",
        "operation": "select_features",
        "arguments": {"input_path": "out/area.gpkg", "where": "name = 'a'", "output_path": "out/picked.gpkg"},
        "output_path": "out/picked.gpkg",
        "manifest_path": "out/picked.gpkg.provenance.json",
        "status": "ok",
        "warnings": [],
        "failed_checks": [],
    }
    assert record["final_output"] == {"path": "out/picked.gpkg", "sha256": dataset_digest(ready / "out/picked.gpkg")}
    # the plan manifest and the final file's own manifest claim the same bytes
    own = json.loads((ready / "out/picked.gpkg.provenance.json").read_text("utf-8"))
    assert own["output"]["sha256"] == record["final_output"]["sha256"]
    assert record["mapsmith_version"] == __version__
    assert UTC_Z.match(record["started_at"]) and UTC_Z.match(record["finished_at"])
    assert record["started_at"] <= record["finished_at"]
    assert record["answers"] == {}
    assert "failed_step" not in record and "error" not in record
    # written atomically: no temporary file is left beside it
    assert sorted(p.name for p in (ready / "out").iterdir() if p.name.startswith(".")) == []
    assert result.to_dict()["final_output"] == record["final_output"]


def test_a_step_that_only_answers_contributes_its_answer(app: Any, ready: Path) -> None:
    plan = {
        "goal": "buffer the points and describe what was written",
        "steps": [
            three_steps()["steps"][0],
            {"id": "look", "operation": "describe_dataset", "arguments": {"input_path": "$buffer"}},
        ],
    }
    result = execute_plan(app, plan)

    assert result.status == "ok"
    look = result.steps[1]
    assert (look.output_path, look.manifest_path, look.status) == (None, None, "ok")
    assert look.arguments == {"input_path": "out/zones.gpkg"}
    assert set(result.answers) == {"look"}
    assert result.answers["look"]["layers"] == ["zones"]
    assert result.answers["look"]["described"][0]["feature_count"] == 2
    # the final output is the last step that writes a dataset, even when an answer comes after it
    assert result.plan_manifest_path == "out/zones.gpkg.plan.json"
    record = json.loads((ready / "out/zones.gpkg.plan.json").read_text("utf-8"))
    assert record["answers"] == result.answers


def test_a_plan_that_writes_no_dataset_answers_and_leaves_no_plan_manifest(app: Any, ready: Path) -> None:
    before = files(ready)
    plan = {
        "goal": "what is in points.gpkg",
        "steps": [{"id": "look", "operation": "describe_dataset", "arguments": {"input_path": "points.gpkg"}}],
    }
    result = execute_plan(app, plan)

    assert result.status == "ok"
    assert result.answers["look"]["layers"] == ["points"]
    assert result.final_output is None and result.plan_manifest_path is None
    assert files(ready) == before


# -- progress -----------------------------------------------------------------------------------------


def test_progress_is_reported_before_and_after_each_step_in_order(app: Any, ready: Path) -> None:
    calls: list[tuple[float, str]] = []
    execute_plan(app, three_steps(), progress=lambda fraction, message: calls.append((fraction, message)))

    # buffer_layer, measure_area and select_features report nothing of their own: two calls per step
    assert [m for _, m in calls] == [
        "step 1/3 buffer: buffer_layer",
        "step 1/3 buffer: buffer_layer ok",
        "step 2/3 area: measure_area",
        "step 2/3 area: measure_area ok",
        "step 3/3 pick: select_features",
        "step 3/3 pick: select_features ok",
    ]
    fractions = [f for f, _ in calls]
    assert all(a < b for a, b in zip(fractions, fractions[1:], strict=False))  # MCP: progress must increase
    assert fractions[1::2] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert fractions[0] == pytest.approx(0.01 / 3)


def test_a_steps_own_progress_is_scaled_into_its_share(app: Any, ready: Path, monkeypatch: Any) -> None:
    real = app.run

    def chatty(operation: str, arguments: Any, progress: Any = None) -> Any:
        progress(0.0, "starting")
        progress(1.0, "writing")
        return real(operation, arguments, progress)

    monkeypatch.setattr(app, "run", chatty)
    calls: list[tuple[float, str]] = []
    execute_plan(app, three_steps(), progress=lambda fraction, message: calls.append((fraction, message)))

    assert [m for _, m in calls][:4] == [
        "step 1/3 buffer: buffer_layer",
        "step 1/3 buffer: buffer_layer: starting",
        "step 1/3 buffer: buffer_layer: writing",
        "step 1/3 buffer: buffer_layer ok",
    ]
    fractions = [f for f, _ in calls]
    assert len(calls) == 12
    assert all(a < b for a, b in zip(fractions, fractions[1:], strict=False))
    assert fractions[-1] == 1.0


# -- one operation behaves the same alone or in a plan -------------------------------------------------


def _run_alone(app: Any, plan: dict[str, Any]) -> None:
    """The plan's steps through app.run one by one, references replaced by hand."""
    outputs: dict[str, str] = {}
    for step in plan["steps"]:
        args = {
            k: outputs[v[1:]] if isinstance(v, str) and v.startswith("$") else v for k, v in step["arguments"].items()
        }
        outputs[step["id"]] = app.run(step["operation"], args).output_path


def test_geoparquet_outputs_are_byte_identical_alone_and_in_a_plan(app: Any, ready: Path) -> None:
    (ready / "alone").mkdir()
    execute_plan(app, three_steps("out", ".parquet"))
    _run_alone(app, three_steps("alone", ".parquet"))

    for name in ("zones", "area", "picked"):
        assert dataset_digest(ready / f"out/{name}.parquet") == dataset_digest(ready / f"alone/{name}.parquet"), name


def last_change(gpkg: Path) -> str:
    import sqlite3

    db = sqlite3.connect(gpkg)
    try:
        return str(db.execute("select last_change from gpkg_contents").fetchone()[0])
    finally:
        db.close()


def test_geopackage_outputs_differ_only_in_their_write_time(app: Any, ready: Path, monkeypatch: Any) -> None:
    """A GeoPackage records when each table last changed (gpkg_contents.last_change), so two runs are not
    byte-identical; the features are. With GDAL's OGR_CURRENT_DATE fixed, the bytes are identical too."""
    (ready / "alone").mkdir()
    execute_plan(app, three_steps("out", ".gpkg"))
    _run_alone(app, three_steps("alone", ".gpkg"))
    for name in ("zones", "area", "picked"):
        plan_frame, alone_frame = read(ready / f"out/{name}.gpkg"), read(ready / f"alone/{name}.gpkg")
        assert plan_frame.columns.tolist() == alone_frame.columns.tolist()
        assert plan_frame.drop(columns="geometry").equals(alone_frame.drop(columns="geometry"))
        assert plan_frame.geometry.to_wkb().tolist() == alone_frame.geometry.to_wkb().tolist()
        same_bytes = dataset_digest(ready / f"out/{name}.gpkg") == dataset_digest(ready / f"alone/{name}.gpkg")
        assert same_bytes == (last_change(ready / f"out/{name}.gpkg") == last_change(ready / f"alone/{name}.gpkg"))

    monkeypatch.setenv("OGR_CURRENT_DATE", "2000-01-01T00:00:00Z")
    (ready / "fixed1").mkdir()
    (ready / "fixed2").mkdir()
    execute_plan(app, three_steps("fixed1", ".gpkg"))
    _run_alone(app, three_steps("fixed2", ".gpkg"))
    for name in ("zones", "area", "picked"):
        assert dataset_digest(ready / f"fixed1/{name}.gpkg") == dataset_digest(ready / f"fixed2/{name}.gpkg"), name


# -- a step that fails stops the plan ---------------------------------------------------------------------


def test_a_step_refused_at_run_time_stops_the_plan_and_leaves_the_earlier_manifests(
    app: Any, ready: Path, monkeypatch: Any
) -> None:
    real = app.run

    def refuse_step_2(operation: str, arguments: Any, progress: Any = None) -> Any:
        if operation == "measure_area":
            raise InputError("the disk went away", code="INPUT_NOT_FOUND", evidence={"path": "x"}, hint="retry")
        return real(operation, arguments, progress)

    monkeypatch.setattr(app, "run", refuse_step_2)
    calls: list[tuple[float, str]] = []
    result = execute_plan(app, three_steps(), progress=lambda f, m: calls.append((f, m)))

    assert result.status == "failed"
    assert result.failed_step == "area"
    assert result.error == {
        "code": "INPUT_NOT_FOUND",
        "message": "the disk went away",
        "hint": "retry",
        "evidence": {"path": "x"},
    }
    assert [(s.id, s.status) for s in result.steps] == [("buffer", "ok"), ("area", "failed"), ("pick", "not_run")]
    assert (ready / "out/zones.gpkg.provenance.json").exists()
    assert result.steps[0].manifest_path == "out/zones.gpkg.provenance.json"
    assert result.steps[2].manifest_path is None
    assert result.steps[2].arguments["input_path"] == "out/area.gpkg"  # as it would have run
    assert not (ready / "out/area.gpkg").exists() and not (ready / "out/picked.gpkg").exists()
    assert not (ready / "out/picked.gpkg.plan.json").exists()
    assert result.plan_manifest_path is None
    assert result.final_output == {"path": "out/picked.gpkg", "sha256": None}
    assert [m for _, m in calls] == [
        "step 1/3 buffer: buffer_layer",
        "step 1/3 buffer: buffer_layer ok",
        "step 2/3 area: measure_area",
        "step 2/3 area: measure_area failed [INPUT_NOT_FOUND]",
    ]
    # the failure is on disk too, with the same content as the reply
    assert result.failure_record_path == "out/picked.gpkg.plan.failed.json"
    record = json.loads((ready / result.failure_record_path).read_text("utf-8"))
    reply = result.to_dict()
    assert record["status"] == "failed"
    assert record["failed_step"] == "area"
    assert record["error"] == reply["error"]
    assert record["steps"] == reply["steps"]
    assert record["fingerprint"] == plan_fingerprint(parse_plan(three_steps()))
    assert record["final_output"] == {"path": "out/picked.gpkg", "sha256": None}


def test_an_engine_refusal_mid_plan_names_the_step_and_the_runners_failure_record(app: Any, workspace: Path) -> None:
    # The points already carry an area_m2 field, which only measure_area's engine finds (headers do not say
    # what a field means): validation passes, step 2 is refused after the engine started.
    points(workspace, area_m2=[1.0, 2.0])
    (workspace / "out").mkdir()
    result = execute_plan(app, three_steps())

    assert result.status == "failed"
    assert result.failed_step == "area"
    assert result.error is not None and result.error["code"] == "FIELD_EXISTS"
    assert [(s.id, s.status) for s in result.steps] == [
        ("buffer", "ok_with_warnings"),
        ("area", "failed"),
        ("pick", "not_run"),
    ]
    assert result.steps[1].failure_record == "out/area.gpkg.failed.provenance.json"
    assert (workspace / "out/area.gpkg.failed.provenance.json").exists()
    assert (workspace / "out/zones.gpkg.provenance.json").exists()
    assert (workspace / "out/picked.gpkg.plan.failed.json").exists()


def test_an_input_deleted_after_validation_stops_the_plan_at_its_step(app: Any, ready: Path, monkeypatch: Any) -> None:
    from shapely.geometry import box

    import mapsmith.plans.validate as validate

    write_layer(ready / "mask.gpkg", [box(4_320_000, 3_209_000, 4_322_000, 3_211_000)], "EPSG:3035")
    real = validate.validate_plan

    def validate_then_lose_the_mask(app: Any, plan: Any) -> Any:
        outcome = real(app, plan)
        (ready / "mask.gpkg").unlink()
        return outcome

    monkeypatch.setattr(validate, "validate_plan", validate_then_lose_the_mask)
    plan = three_steps()
    plan["steps"][1] = {
        "id": "near",
        "operation": "select_features",
        "arguments": {
            "input_path": "$buffer",
            "relation": "intersects",
            "relation_path": "mask.gpkg",
            "output_path": "out/near.gpkg",
        },
    }
    plan["steps"][2]["arguments"]["input_path"] = "$near"
    plan["steps"][2]["operation"] = "measure_area"
    plan["steps"][2]["arguments"] = {"input_path": "$near", "output_path": "out/picked.gpkg"}
    result = execute_plan(app, plan)

    assert result.failed_step == "near"
    assert result.error is not None and result.error["code"] == "INPUT_NOT_FOUND"
    assert result.error["evidence"] == {"argument": "relation_path", "path": "mask.gpkg"}
    assert [s.status for s in result.steps] == ["ok", "failed", "not_run"]
    assert result.steps[1].failure_record is None  # refused before its engine ran: the runner wrote nothing
    assert (ready / "out/picked.gpkg.plan.failed.json").exists()


def test_a_crash_mid_plan_is_recorded_and_raised(app: Any, ready: Path, monkeypatch: Any) -> None:
    real = app.run

    def crash_step_3(operation: str, arguments: Any, progress: Any = None) -> Any:
        if operation == "select_features":
            raise RuntimeError("bug in an adapter")
        return real(operation, arguments, progress)

    monkeypatch.setattr(app, "run", crash_step_3)
    with pytest.raises(RuntimeError, match="bug in an adapter"):
        execute_plan(app, three_steps())

    record = json.loads((ready / "out/picked.gpkg.plan.failed.json").read_text("utf-8"))
    assert record["failed_step"] == "pick"
    assert record["error"]["code"] == "INTERRUPTED"
    assert [s["status"] for s in record["steps"]] == ["ok", "ok", "failed"]


def test_a_failure_record_never_replaces_an_earlier_one(app: Any, ready: Path, monkeypatch: Any) -> None:
    real = app.run

    def refuse_step_3(operation: str, arguments: Any, progress: Any = None) -> Any:
        if operation == "select_features":
            raise InputError("no", code="INPUT_NOT_FOUND", hint="retry")
        return real(operation, arguments, progress)

    monkeypatch.setattr(app, "run", refuse_step_3)
    first = execute_plan(app, three_steps(all=True))
    second = execute_plan(app, three_steps(all=True))

    assert first.failure_record_path == "out/picked.gpkg.plan.failed.json"
    assert second.failure_record_path == "out/picked.gpkg.plan.failed.2.json"
    records = [
        json.loads((ready / p).read_text("utf-8"))
        for p in ("out/picked.gpkg.plan.failed.json", "out/picked.gpkg.plan.failed.2.json")
    ]
    assert records[0]["started_at"] < records[1]["started_at"]


# -- refused before anything runs --------------------------------------------------------------------------


def test_an_invalid_plan_is_rejected_with_its_findings_and_nothing_is_written(app: Any, ready: Path) -> None:
    plan = three_steps()
    plan["steps"][0]["arguments"]["distance_m"] = plan["steps"][0]["arguments"].pop("distance_meters")
    before = files(ready)

    with pytest.raises(PlanRejected) as caught:
        execute_plan(app, plan)

    err = caught.value
    assert isinstance(err, ArgumentError)
    assert err.code == "PLAN_REJECTED"
    findings = err.evidence["findings"]
    codes = [(f["code"], f["step"], f["argument"]) for f in findings]
    assert ("UNKNOWN_ARGUMENT", "buffer", "distance_m") in codes
    unknown = next(f for f in findings if f["code"] == "UNKNOWN_ARGUMENT")
    assert "distance_meters" in unknown["message"] + unknown["hint"]
    assert err.hint is not None and findings[0]["hint"] in err.hint
    assert findings[0]["code"] in err.message
    assert files(ready) == before


def test_a_wrong_order_plan_is_rejected_before_any_step_runs(app: Any, ready: Path) -> None:
    plan = three_steps()
    plan["steps"] = [plan["steps"][1], plan["steps"][0], plan["steps"][2]]
    before = files(ready)

    with pytest.raises(PlanRejected) as caught:
        execute_plan(app, plan)

    assert "FORWARD_REFERENCE" in [f["code"] for f in caught.value.evidence["findings"]]
    assert files(ready) == before


def test_an_existing_plan_manifest_is_replaced_only_when_every_writing_step_overwrites(app: Any, ready: Path) -> None:
    execute_plan(app, three_steps())
    manifest = ready / "out/picked.gpkg.plan.json"
    first = manifest.read_bytes()

    # every output exists and no step overwrites: refused before step 1 (validation or execution says so)
    with pytest.raises(PlanRejected) as caught:
        execute_plan(app, three_steps())
    assert {f["code"] for f in caught.value.evidence["findings"]} >= {"OUTPUT_EXISTS"}
    assert manifest.read_bytes() == first

    # the final step overwrites and the first two write elsewhere, without overwrite: the outputs would be
    # allowed, the plan manifest is not, since not every writing step said overwrite=true
    plan = three_steps(all=True)
    for step, name in zip(plan["steps"][:2], ("zones2.gpkg", "area2.gpkg"), strict=True):
        step["arguments"]["output_path"] = f"out/{name}"
        del step["arguments"]["overwrite"]
    with pytest.raises(PlanRejected) as caught:
        execute_plan(app, plan)
    (finding,) = caught.value.evidence["findings"]
    assert finding["code"] == "PLAN_MANIFEST_EXISTS"
    assert finding["step"] == "pick"
    assert finding["evidence"] == {
        "plan_manifest": "out/picked.gpkg.plan.json",
        "steps_without_overwrite": ["buffer", "area"],
    }
    assert manifest.read_bytes() == first
    assert not (ready / "out/zones2.gpkg").exists()

    # every writing step overwrites: the plan runs again and its manifest is replaced
    again = execute_plan(app, three_steps(all=True))
    assert again.status == "ok"
    record = json.loads(manifest.read_text("utf-8"))
    assert record["fingerprint"] == plan_fingerprint(parse_plan(three_steps(all=True)))
    assert record["fingerprint"] != json.loads(first)["fingerprint"]
    assert record["final_output"]["sha256"] == dataset_digest(ready / "out/picked.gpkg")


def test_a_failed_rerun_leaves_the_earlier_plan_manifest_as_it_was(app: Any, ready: Path, monkeypatch: Any) -> None:
    execute_plan(app, three_steps(all=True))
    manifest = ready / "out/picked.gpkg.plan.json"
    first = manifest.read_bytes()
    real = app.run

    def refuse_step_2(operation: str, arguments: Any, progress: Any = None) -> Any:
        if operation == "measure_area":
            raise InputError("no", code="INPUT_NOT_FOUND", hint="retry")
        return real(operation, arguments, progress)

    monkeypatch.setattr(app, "run", refuse_step_2)
    result = execute_plan(app, three_steps(all=True))

    assert result.status == "failed"
    assert manifest.read_bytes() == first  # the final output was not rewritten, and its record stays
    assert json.loads(first)["final_output"]["sha256"] == dataset_digest(ready / "out/picked.gpkg")
    assert result.failure_record_path == "out/picked.gpkg.plan.failed.json"
