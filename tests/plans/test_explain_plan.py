"""explain_plan: a narrative in which every sentence can be traced to a declared field.

Each narrative item names its sources (``from``). This test resolves every source itself -- in the
plan, in the operation's contract, in what validate_plan simulated -- and checks that every value a
sentence quotes is the value of one of its sources, so no sentence can carry an invented fact.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from shapely.geometry import LineString, box

from layers import write_layer
from mapsmith.plans import explain_plan, validate_plan

FIVE_STEPS: dict[str, Any] = {
    "goal": "parcels within 1.5 km of the river with mean elevation at most 120 m",
    "steps": [
        {
            "id": "buffer",
            "operation": "buffer_layer",
            "arguments": {"input_path": "river.gpkg", "distance_meters": 1500, "output_path": "river_buffer.gpkg"},
        },
        {
            "id": "near",
            "operation": "clip_layer",
            "arguments": {"input_path": "parcels.gpkg", "mask_path": "$buffer", "output_path": "near.gpkg"},
        },
        {
            "id": "elevation",
            "operation": "zonal_statistics",
            "arguments": {
                "input_path": "$near",
                "raster_path": "dem.tif",
                "statistics": "mean",
                "output_path": "elevation.gpkg",
            },
        },
        {"id": "area", "operation": "measure_area", "arguments": {"input_path": "$elevation", "output_path": "a.gpkg"}},
        {
            "id": "low",
            "operation": "select_features",
            "arguments": {"input_path": "$area", "field": "zonal_mean", "max_value": 120, "output_path": "low.gpkg"},
        },
    ],
}

RASTER_STEPS: dict[str, Any] = {
    "goal": "slope of the DEM",
    "steps": [
        {
            "id": "utm",
            "operation": "reproject_raster",
            "arguments": {
                "input_path": "dem.tif",
                "target_crs": "EPSG:32632",
                "resampling": "bilinear",
                "output_path": "dem_utm.tif",
            },
        },
        {
            "id": "slope",
            "operation": "slope",
            "arguments": {"input_path": "$utm", "units": "degrees", "output_path": "s.tif"},
        },
        {"id": "stats", "operation": "band_statistics", "arguments": {"input_path": "$slope"}},
    ],
}


@pytest.fixture
def data(workspace: Path) -> Path:
    parcels = [box(7 + i * 0.002, 46.2, 7 + i * 0.002 + 0.0015, 46.2015) for i in range(6)]
    write_layer(workspace / "parcels.gpkg", parcels, "EPSG:4326", pid=list(range(1, 7)))
    write_layer(workspace / "river.gpkg", [LineString([(6.99, 46.199), (7.02, 46.199)])], "EPSG:4326", name=["r"])
    with rasterio.open(
        workspace / "dem.tif",
        "w",
        driver="GTiff",
        width=20,
        height=10,
        count=1,
        dtype="float32",
        crs="EPSG:4326",
        transform=rasterio.Affine.from_gdal(6.99, 0.0015, 0.0, 46.21, 0.0, -0.0015),
        nodata=-9999.0,
    ) as dst:
        dst.write(np.tile(np.arange(20, dtype="float32") * 10, (10, 1)), 1)
    return workspace


# -- resolving a source, independently of explain.py ------------------------------------------------


def _walk(value: Any, parts: list[str]) -> Any:
    for part in parts:
        match = re.fullmatch(r"(.+)\[(\d+)\]", part)
        if match and isinstance(value, dict) and match.group(1) in value:
            value = value[match.group(1)][int(match.group(2))]
        else:
            assert isinstance(value, dict) and part in value, f"no field {part!r}"
            value = value[part]
    return value


def resolve(app: Any, plan_data: dict[str, Any], validation: Any, source: str) -> Any:
    """The value of a declared field named by a narrative source."""
    if source == "plan.goal":
        return plan_data["goal"]
    kind, _, rest = source.partition(":")
    if kind == "contract":
        name, _, field = rest.partition(".")
        contract = app.router.contract(name)
        if field.startswith("parameters."):
            _, pname, attr = field.split(".")
            param = next(p for p in contract.parameters if p.name == pname)
            value = getattr(param, attr)
            return list(value) if isinstance(value, tuple) else value
        attribute = {"output.kind": "output_kind", "output.geometry_types": "output_geometry_types"}.get(field, field)
        assert attribute in {"summary", "crs_effect", "needs_projected_crs", "checks", "output_kind",
                             "output_geometry_types"}, field  # fmt: skip
        value = getattr(contract, attribute)
        return list(value) if isinstance(value, tuple) else value
    assert kind == "step", source
    step_id, _, field = rest.partition(".")
    (simulated,) = [s for s in validation.steps if s["id"] == step_id]
    if field == "operation":
        (given,) = [s for s in plan_data["steps"] if s["id"] == step_id]
        return given["operation"]
    # arguments as validate_plan resolved them ("$id" replaced by that step's output_path)
    return _walk(simulated, field.split("."))


def quoted(value: Any) -> list[str]:
    if isinstance(value, list):
        return [q for v in value for q in quoted(v)]
    return [value if isinstance(value, str) else json.dumps(value)]


def assert_traceable(app: Any, plan_data: dict[str, Any], items: list[dict[str, Any]]) -> None:
    validation = validate_plan(app, plan_data)
    assert items
    for item in items:
        assert set(item) == {"text", "from", "step"}
        assert item["from"], item["text"]
        for source in item["from"]:
            value = resolve(app, plan_data, validation, source)
            assert value is not None, (source, item["text"])
            for q in quoted(value):
                assert q in item["text"], f"{source} = {q!r} is not quoted in {item['text']!r}"


# -- the tests ---------------------------------------------------------------------------------------


def test_every_sentence_of_the_five_step_narrative_is_traceable(app, data) -> None:
    result = explain_plan(app, FIVE_STEPS)
    assert result["valid"] is True and result["findings"] == []
    assert_traceable(app, FIVE_STEPS, result["narrative"])
    assert_traceable(app, FIVE_STEPS, result["decisions_left"])


def test_the_narrative_says_the_steps_in_order_what_they_read_and_write(app, data) -> None:
    texts = [item["text"] for item in explain_plan(app, FIVE_STEPS)["narrative"]]
    assert texts[0] == f"Goal: {FIVE_STEPS['goal']}"
    assert texts[1] == (
        "The plan runs 5 steps in this order: buffer (buffer_layer), near (clip_layer), elevation (zonal_statistics), "
        "area (measure_area), low (select_features)."
    )
    summary = app.router.contract("buffer_layer").summary
    assert f"Step 1, 'buffer', runs buffer_layer: {summary}" in texts
    assert "It reads input_path from river.gpkg: a vector dataset in EPSG:4326 holding line geometries." in texts
    assert "It is given distance_meters = 1500 (metre)." in texts
    assert (
        "It reads mask_path from the output of step 'buffer', river_buffer.gpkg: a vector dataset in EPSG:4326 "
        "holding polygon geometries." in texts
    )
    assert "crs_effect preserves: its output keeps the CRS of its main input, EPSG:4326." in texts
    assert texts[-1] == "The final output is low.gpkg, written by step 'low'."
    steps_in_order = [item["step"] for item in explain_plan(app, FIVE_STEPS)["narrative"] if item["step"]]
    assert list(dict.fromkeys(steps_in_order)) == ["buffer", "near", "elevation", "area", "low"]


def test_decisions_left_are_defaults_and_unset_choices_from_the_contracts(app, data) -> None:
    left = {item["text"] for item in explain_plan(app, FIVE_STEPS)["decisions_left"]}
    assert "Step 'buffer' leaves segments_per_quarter_circle of buffer_layer at its default, 16." in left
    assert (
        "Step 'area' leaves method of measure_area at its default, geodesic; its choices are geodesic, planar." in left
    )
    assert (
        "Step 'low' does not set relation of select_features; its choices are intersects, within, contains, "
        "touches, crosses, overlaps, within_distance." in left
    )
    # given arguments are not decisions left
    assert not any("statistics of zonal_statistics" in text for text in left)


def test_crs_decisions_of_a_raster_chain_are_traceable(app, data) -> None:
    result = explain_plan(app, RASTER_STEPS)
    assert result["valid"] is True
    texts = [item["text"] for item in result["narrative"]]
    assert "crs_effect transforms: its output is in target_crs EPSG:32632, that is EPSG:32632." in texts
    assert "needs_projected_crs = true: slope computes in metres, and input_path is in EPSG:32632." in texts
    assert "It writes no dataset: its result is answer, returned to the caller." in texts
    assert texts[-1] == "The final output is s.tif, written by step 'slope'."
    assert_traceable(app, RASTER_STEPS, result["narrative"])
    assert_traceable(app, RASTER_STEPS, result["decisions_left"])


def test_an_invalid_plan_gets_its_findings_instead_of_a_narrative(app, data) -> None:
    wrong = copy.deepcopy(FIVE_STEPS)
    wrong["steps"][0], wrong["steps"][1] = wrong["steps"][1], wrong["steps"][0]
    result = explain_plan(app, wrong)
    assert result["valid"] is False
    assert result["narrative"] == [] and result["decisions_left"] == []
    assert [(f["code"], f["step"], f["argument"]) for f in result["findings"]] == [
        ("FORWARD_REFERENCE", "near", "mask_path")
    ]


def test_a_structurally_invalid_plan_is_explained_by_its_findings(app, data) -> None:
    result = explain_plan(app, {"goal": "x", "steps": []})
    assert result == {
        "valid": False,
        "fingerprint": None,
        "findings": [
            {
                "code": "EMPTY_PLAN",
                "step": None,
                "argument": None,
                "message": "the plan has no steps",
                "hint": "add at least one step: {id, operation, arguments}",
                "evidence": {},
            }
        ],
        "narrative": [],
        "decisions_left": [],
    }
