"""Plans over GeoPackage layers: a second dataset's <role>_layer, steps adding output_layers to one
container, a layer that exists already, and a later step reading a layer the plan itself adds.

Fixtures by hand, British National Grid (metres):
- parcels.gpkg: points id 1 (5, 5), id 2 (15, 5), id 3 (50, 50).
- masks.gpkg: layer zone_a = box(0, 0, 10, 10) (holds parcel 1), zone_b = box(0, 0, 20, 20) (parcels 1, 2).
So clip to zone_a keeps 1 feature (id 1), clip to zone_b keeps 2 (ids 1, 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import read, write_layer
from mapsmith.plans.execute import PlanRejected, execute_plan
from mapsmith.plans.validate import validate_plan

BNG = "EPSG:27700"


@pytest.fixture
def ready(workspace: Path) -> Path:
    write_layer(workspace / "parcels.gpkg", [Point(5, 5), Point(15, 5), Point(50, 50)], BNG, id=[1, 2, 3])
    write_layer(workspace / "masks.gpkg", [box(0, 0, 10, 10)], BNG, "zone_a", zone=["a"])
    write_layer(workspace / "masks.gpkg", [box(0, 0, 20, 20)], BNG, "zone_b", zone=["b"])
    return workspace


def clip(step: str, mask_layer: str, **out: Any) -> dict[str, Any]:
    args = {"input_path": "parcels.gpkg", "mask_path": "masks.gpkg", "mask_layer": mask_layer, **out}
    return {"id": step, "operation": "clip_layer", "arguments": args}


def plan(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "parcels per zone", "steps": list(steps)}


def codes(validation: Any) -> list[str]:
    return [f.code for f in validation.findings]


def layers_of(path: Path) -> list[str]:
    import pyogrio

    return [str(name) for name, _ in pyogrio.list_layers(path)]


# -- (1) a second dataset's layer -----------------------------------------------------------------


def test_mask_layer_of_a_two_layer_geopackage_validates(app: Any, ready: Path) -> None:
    v = validate_plan(app, plan(clip("c", "zone_b", output_path="out.gpkg")))
    assert v.valid, [f.to_dict() for f in v.findings]
    assert v.steps[0]["inputs"]["mask_path"]["geometry_types"] == ["polygon"]


def test_a_mask_layer_that_does_not_exist_is_refused_naming_the_layers(app: Any, ready: Path) -> None:
    v = validate_plan(app, plan(clip("c", "zone_c", output_path="out.gpkg")))
    assert codes(v) == ["LAYER_NOT_FOUND"]
    finding = v.findings[0]
    assert finding.argument == "mask_path" and finding.step == "c"
    assert finding.evidence["layers"] == ["zone_a", "zone_b"]
    assert "mask_layer" in (finding.hint or "")


def test_no_mask_layer_on_a_two_layer_geopackage_is_refused_not_guessed(app: Any, ready: Path) -> None:
    step = clip("c", "zone_a", output_path="out.gpkg")
    del step["arguments"]["mask_layer"]
    v = validate_plan(app, plan(step))
    assert codes(v) == ["LAYER_REQUIRED"]
    assert v.findings[0].evidence["layers"] == ["zone_a", "zone_b"]


# -- (2) two steps, two output_layers, one GeoPackage --------------------------------------------


def test_two_steps_add_two_layers_to_one_geopackage(app: Any, ready: Path) -> None:
    p = plan(
        clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a"),
        clip("b", "zone_b", output_path="deliver.gpkg", output_layer="in_b"),
    )
    v = validate_plan(app, p)
    assert v.valid, [f.to_dict() for f in v.findings]
    result = execute_plan(app, p)
    assert result.status in ("ok", "ok_with_warnings"), result.error
    out = ready / "deliver.gpkg"
    assert layers_of(out) == ["in_a", "in_b"]
    assert sorted(read(out, "in_a")["id"]) == [1]
    assert sorted(read(out, "in_b")["id"]) == [1, 2]
    assert [s.manifest_path for s in result.steps] == [
        "deliver.gpkg.in_a.provenance.json",
        "deliver.gpkg.in_b.provenance.json",
    ]


def test_two_steps_writing_the_same_output_layer_are_a_duplicate_output(app: Any, ready: Path) -> None:
    p = plan(
        clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a"),
        clip("b", "zone_b", output_path="deliver.gpkg", output_layer="in_a"),
    )
    v = validate_plan(app, p)
    assert codes(v) == ["DUPLICATE_OUTPUT"]
    assert v.findings[0].step == "b" and v.findings[0].evidence["first_step"] == "a"


def test_an_output_layer_that_exists_is_refused_and_overwrite_validates(app: Any, ready: Path) -> None:
    write_layer(ready / "deliver.gpkg", [Point(1, 1)], BNG, "in_a", id=[9])
    refused = validate_plan(app, plan(clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a")))
    assert codes(refused) == ["OUTPUT_LAYER_EXISTS"]
    assert refused.findings[0].evidence["layers"] == ["in_a"]
    with pytest.raises(PlanRejected):
        execute_plan(app, plan(clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a")))
    assert sorted(read(ready / "deliver.gpkg", "in_a")["id"]) == [9]  # nothing was written
    # clean twins: another layer name, or the same one with overwrite
    other = validate_plan(app, plan(clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_b")))
    assert other.valid, [f.to_dict() for f in other.findings]
    replace = plan(clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a", overwrite=True))
    assert validate_plan(app, replace).valid
    execute_plan(app, replace)
    assert sorted(read(ready / "deliver.gpkg", "in_a")["id"]) == [1]


def test_a_step_adding_a_layer_to_a_container_another_step_reads_is_not_overwriting_it(app: Any, ready: Path) -> None:
    # step b reads masks.gpkg (zone_b) and step a adds a layer to that same file: no input is replaced.
    p = plan(
        clip("a", "zone_a", output_path="masks.gpkg", output_layer="in_a"),
        clip("b", "zone_b", output_path="out.gpkg"),
    )
    v = validate_plan(app, p)
    assert v.valid, [f.to_dict() for f in v.findings]


# -- (3) a later step reads a layer the plan adds -------------------------------------------------


def buffer(step: str, source: str, **more: Any) -> dict[str, Any]:
    args = {"input_path": source, "distance_meters": 1, "output_path": f"{step}.gpkg", **more}
    return {"id": step, "operation": "buffer_layer", "arguments": args}


def test_a_reference_to_a_step_that_added_a_layer_reads_that_layer(app: Any, ready: Path) -> None:
    # deliver.gpkg will hold in_a (1 point) and in_b (2 points): "$a" must be in_a, not refused as ambiguous.
    p = plan(
        clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a"),
        clip("b", "zone_b", output_path="deliver.gpkg", output_layer="in_b"),
        buffer("c", "$a"),
    )
    v = validate_plan(app, p)
    assert v.valid, [f.to_dict() for f in v.findings]
    assert v.steps[2]["inputs"]["input_path"]["from_step"] == "a"
    result = execute_plan(app, p)
    assert result.status in ("ok", "ok_with_warnings"), result.error
    assert result.steps[2].arguments["layer"] == "in_a"
    assert sorted(read(ready / "c.gpkg")["id"]) == [1]


def test_a_path_and_layer_the_plan_adds_read_that_steps_output(app: Any, ready: Path) -> None:
    p = plan(
        clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a"),
        clip("b", "zone_b", output_path="deliver.gpkg", output_layer="in_b"),
        buffer("c", "deliver.gpkg", layer="in_b"),
    )
    v = validate_plan(app, p)
    assert v.valid, [f.to_dict() for f in v.findings]
    assert v.steps[2]["inputs"]["input_path"]["from_step"] == "b"
    execute_plan(app, p)
    assert sorted(read(ready / "c.gpkg")["id"]) == [1, 2]


def test_a_reference_naming_another_layer_than_the_step_wrote_is_refused(app: Any, ready: Path) -> None:
    p = plan(
        clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a"),
        buffer("c", "$a", layer="in_b"),
    )
    v = validate_plan(app, p)
    assert codes(v) == ["REFERENCE_LAYER_CONFLICT"]
    assert v.findings[0].evidence["output_layer"] == "in_a" and v.findings[0].argument == "input_path"


def test_a_reference_to_an_added_layer_in_a_list_is_refused_and_a_whole_file_reference_is_not(
    app: Any, ready: Path
) -> None:
    # input_paths[0] has no <role>_layer to carry "in_a": refused, pointing at extract_layer.
    merge = {"id": "m", "operation": "merge_layers", "arguments": {"output_path": "m.gpkg"}}
    merge["arguments"]["input_paths"] = ["$a", "parcels.gpkg"]
    v = validate_plan(app, plan(clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a"), merge))
    assert codes(v) == ["REFERENCE_LAYER_CONFLICT"]
    assert v.findings[0].argument == "input_paths[0]" and "extract_layer" in (v.findings[0].hint or "")
    # clean twin: step a writes a whole file, so "$a" is that file's one layer
    twin = validate_plan(app, plan(clip("a", "zone_a", output_path="a.gpkg"), merge))
    assert twin.valid, [f.to_dict() for f in twin.findings]


def test_a_whole_file_written_after_a_layer_was_added_to_it_is_a_duplicate_output(app: Any, ready: Path) -> None:
    v = validate_plan(
        app,
        plan(
            clip("a", "zone_a", output_path="deliver.gpkg", output_layer="in_a"),
            clip("b", "zone_b", output_path="deliver.gpkg"),
        ),
    )
    assert codes(v) == ["DUPLICATE_OUTPUT"]
    # clean twin: the whole file first, then a layer added beside it
    twin = validate_plan(
        app,
        plan(
            clip("a", "zone_a", output_path="deliver.gpkg"),
            clip("b", "zone_b", output_path="deliver.gpkg", output_layer="in_b"),
        ),
    )
    assert twin.valid, [f.to_dict() for f in twin.findings]
