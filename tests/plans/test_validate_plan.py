"""validate_plan: every rejection code provoked by a plan built for it, and a valid plan simulated.

The data is the worked example's, small enough to reason about: six parcels that are 0.0015° squares
at 46.2°N and a river line, both in EPSG:4326; an elevation raster in EPSG:4326 (20 x 10 cells of
0.0015°) and one in EPSG:32632 (20 x 10 cells of 100 m). Each test asserts the code, the step and
argument the finding names, and the words an agent needs (the step to move, the accepted names).
Validation must not write anything, so the workspace is listed before and after.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from shapely.geometry import LineString, box

from layers import write_layer
from mapsmith.errors import ArgumentError
from mapsmith.plans import (
    FINDING_CODES,
    parse_plan,
    plan_fingerprint,
    references,
    substitute,
    validate_plan,
)

DEM_GEO_TRANSFORM = [6.99, 0.0015, 0.0, 46.21, 0.0, -0.0015]
DEM_UTM_TRANSFORM = [400_000.0, 100.0, 0.0, 5_120_000.0, 0.0, -100.0]
# The specification's example sidecar: 20 m cells 100 km away from the tags' position.
SIDECAR = "<PAMDataset><GeoTransform>600000, 20, 0, 5040000, 0, -20</GeoTransform></PAMDataset>"


def write_raster(path: Path, crs: str | None, transform: list[float], width: int = 20, height: int = 10) -> Path:
    values = np.tile(np.arange(width, dtype="float32") * 10, (height, 1))
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=width,
        height=height,
        count=1,
        dtype="float32",
        crs=crs,
        transform=rasterio.Affine.from_gdal(*transform),
        nodata=-9999.0,
    ) as dst:
        dst.write(values, 1)
    return path


@pytest.fixture
def data(workspace: Path) -> Path:
    parcels = [box(7 + i * 0.002, 46.2, 7 + i * 0.002 + 0.0015, 46.2015) for i in range(6)]
    write_layer(workspace / "parcels.gpkg", parcels, "EPSG:4326", pid=list(range(1, 7)))
    write_layer(workspace / "river.gpkg", [LineString([(6.99, 46.199), (7.02, 46.199)])], "EPSG:4326", name=["r"])
    write_raster(workspace / "dem.tif", "EPSG:4326", DEM_GEO_TRANSFORM)
    write_raster(workspace / "dem_utm.tif", "EPSG:32632", DEM_UTM_TRANSFORM)
    return workspace


def listing(root: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def step(step_id: str, operation: str, **arguments: Any) -> dict[str, Any]:
    return {"id": step_id, "operation": operation, "arguments": arguments}


def plan(*steps: dict[str, Any], goal: str = "a test plan") -> dict[str, Any]:
    return {"goal": goal, "steps": list(steps)}


FIVE_STEPS = plan(
    step("buffer", "buffer_layer", input_path="river.gpkg", distance_meters=1500, output_path="river_buffer.gpkg"),
    step("near", "clip_layer", input_path="parcels.gpkg", mask_path="$buffer", output_path="near.gpkg"),
    step(
        "elevation",
        "zonal_statistics",
        input_path="$near",
        raster_path="dem.tif",
        statistics="mean",
        output_path="elevation.gpkg",
    ),
    step("area", "measure_area", input_path="$elevation", output_path="area.gpkg"),
    step("low", "select_features", input_path="$area", field="zonal_mean", max_value=120, output_path="low.gpkg"),
    goal="parcels within 1.5 km of the river with mean elevation at most 120 m",
)


def only(result: Any, code: str) -> Any:
    """The one finding with ``code``; every finding's code must be a documented one."""
    assert all(f.code in FINDING_CODES for f in result.findings), [f.code for f in result.findings]
    hits = [f for f in result.findings if f.code == code]
    assert len(hits) == 1, [f.to_dict() for f in result.findings]
    return hits[0]


def codes(result: Any) -> list[str]:
    assert all(f.code in FINDING_CODES for f in result.findings)
    return [f.code for f in result.findings]


# -- the model ----------------------------------------------------------------------------------


def test_references_are_whole_strings_or_list_elements_and_double_dollar_is_literal() -> None:
    assert references("$buffer") == ["buffer"]
    assert references(["a.tif", "$slope", "$$price"]) == ["slope"]
    assert references("cost in $") == []
    assert references("$$buffer") == []
    assert references(1500) == []
    args = {"input_paths": ["$a", "b.tif"], "mask_path": "$b", "where": "$$x > 1", "n": 3}
    assert substitute(args, {"a": "a.gpkg", "b": "b.gpkg"}) == {
        "input_paths": ["a.gpkg", "b.tif"],
        "mask_path": "b.gpkg",
        "where": "$x > 1",
        "n": 3,
    }
    with pytest.raises(ArgumentError) as err:
        substitute({"input_path": "$nowhere"}, {"a": "a.gpkg"})
    assert err.value.code == "DANGLING_REFERENCE"


def test_the_fingerprint_is_of_the_canonical_json() -> None:
    parsed = parse_plan(FIVE_STEPS)
    reordered = json.loads(json.dumps(FIVE_STEPS, sort_keys=True, indent=4))
    assert plan_fingerprint(parse_plan(reordered)) == plan_fingerprint(parsed)
    import hashlib

    canonical = json.dumps(FIVE_STEPS, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert plan_fingerprint(parsed) == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    changed = copy.deepcopy(FIVE_STEPS)
    changed["steps"][0]["arguments"]["distance_meters"] = 1501
    assert plan_fingerprint(parse_plan(changed)) != plan_fingerprint(parsed)


def test_parse_plan_refuses_structure_with_plan_invalid_and_no_steps_with_empty_plan() -> None:
    with pytest.raises(ArgumentError) as err:
        parse_plan({"goal": "x", "steps": [{"id": "a", "operation": "buffer_layer"}]})
    assert err.value.code == "PLAN_INVALID"
    assert "'arguments' is a required property" in err.value.message
    with pytest.raises(ArgumentError) as err:
        parse_plan({"goal": "x", "steps": []})
    assert err.value.code == "EMPTY_PLAN"


# -- a valid plan -------------------------------------------------------------------------------


def test_the_five_step_plan_is_valid_and_simulated_without_writing(app, data) -> None:
    before = listing(data)
    result = validate_plan(app, FIVE_STEPS)
    assert listing(data) == before  # headers read, nothing written
    assert result.findings == []
    assert result.valid
    assert result.fingerprint == plan_fingerprint(parse_plan(FIVE_STEPS))
    steps = {s["id"]: s for s in result.steps}
    assert list(steps) == ["buffer", "near", "elevation", "area", "low"]
    # references are replaced by the output path of the step they name
    assert steps["near"]["arguments"]["mask_path"] == "river_buffer.gpkg"
    assert steps["low"]["arguments"]["input_path"] == "area.gpkg"
    assert steps["buffer"]["defaults"] == {"segments_per_quarter_circle": 16}
    # river lines in, polygons out; clip keeps the parcels' polygons; everything stays in EPSG:4326
    assert steps["buffer"]["inputs"]["input_path"]["geometry_types"] == ["line"]
    for sid in steps:
        out = steps[sid]["output"]
        assert (out["kind"], out["crs"], out["crs_is_geographic"], out["geometry_types"]) == (
            "vector",
            "EPSG:4326",
            True,
            ["polygon"],
        ), sid
        assert out["from_step"] == sid
    mask = steps["near"]["inputs"]["mask_path"]
    assert (mask["from_step"], mask["path"], mask["kind"]) == ("buffer", "river_buffer.gpkg", "vector")
    raster = steps["elevation"]["inputs"]["raster_path"]
    assert raster["from_step"] is None
    assert raster["grid"] == {
        "width": 20,
        "height": 10,
        "transform": DEM_GEO_TRANSFORM,
        "cell_size": [0.0015, 0.0015],
        "nodata": -9999.0,
    }
    assert result.to_dict()["valid"] is True


def test_a_raster_chain_keeps_its_grid_and_band_math_over_it_is_valid(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("slope", "slope", input_path="dem_utm.tif", units="degrees", output_path="slope.tif"),
            step(
                "steep",
                "band_math",
                input_paths=["$slope", "dem_utm.tif"],
                bands="s=0:1, z=1:1",
                expression="s * z",
                output_path="steep.tif",
            ),
        ),
    )
    assert result.findings == []
    out = result.steps[0]["output"]
    assert (out["kind"], out["crs"], out["crs_is_geographic"]) == ("raster", "EPSG:32632", False)
    # shape_preserved: the cells of the input, nodata the operation's own (not known before it runs)
    assert out["grid"] == {
        "width": 20,
        "height": 10,
        "transform": DEM_UTM_TRANSFORM,
        "cell_size": [100.0, 100.0],
        "nodata": None,
    }


# -- operations and arguments --------------------------------------------------------------------


def test_an_unknown_operation_gets_the_catalogs_suggestions(app, data) -> None:
    result = validate_plan(app, plan(step("z", "zonal_statistcs", input_path="parcels.gpkg")))
    finding = only(result, "UNKNOWN_OPERATION")
    assert (finding.step, finding.argument) == ("z", None)
    assert finding.evidence["suggestions"][0] == "zonal_statistics"
    assert "did you mean zonal_statistics" in finding.message
    assert "list_operations" in finding.hint
    assert not result.valid


def test_a_misspelt_argument_names_the_accepted_ones_closest_first(app, data) -> None:
    bad = copy.deepcopy(FIVE_STEPS)
    bad["steps"][0]["arguments"] = {"input_path": "river.gpkg", "distance_m": 1500, "output_path": "b.gpkg"}
    result = validate_plan(app, bad)
    finding = only(result, "UNKNOWN_ARGUMENT")
    assert (finding.step, finding.argument) == ("buffer", "distance_m")
    assert "did you mean 'distance_meters'?" in finding.message
    assert finding.evidence["accepted"][0] == "distance_meters"
    assert finding.hint.startswith("buffer_layer accepts: distance_meters, ")
    assert set(finding.evidence["accepted"]) == set(app.router.contract("buffer_layer").argument_names())
    # the required distance is then missing too: both are reported, not just the first
    missing = only(result, "MISSING_ARGUMENT")
    assert (missing.step, missing.argument) == ("buffer", "distance_meters")


@pytest.mark.parametrize(
    ("operation", "arguments", "code", "argument", "text"),
    [
        ("buffer_layer", {"distance_meters": "1500"}, "WRONG_ARGUMENT_TYPE", "distance_meters", "finite number"),
        ("buffer_layer", {"distance_meters": 0}, "ARGUMENT_OUT_OF_RANGE", "distance_meters", "must be > 0"),
        (
            "buffer_layer",
            {"distance_meters": 10, "segments_per_quarter_circle": 300},
            "ARGUMENT_OUT_OF_RANGE",
            "segments_per_quarter_circle",
            "must be <= 256",
        ),
        ("measure_area", {"method": "flat"}, "ARGUMENT_NOT_IN_CHOICES", "method", "one of ['geodesic', 'planar']"),
    ],
)
def test_wrong_values_get_the_contracts_own_codes(app, data, operation, arguments, code, argument, text) -> None:
    result = validate_plan(
        app, plan(step("s", operation, input_path="parcels.gpkg", output_path="out.gpkg", **arguments))
    )
    finding = only(result, code)
    assert (finding.step, finding.argument) == ("s", argument)
    assert text in finding.message
    assert codes(result) == [code]


def test_every_bad_argument_of_a_step_is_reported(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("b", "buffer_layer", input_path=7, distance_meters=-1, segments_per_quarter_circle=1.5, colour="red")
        ),
    )
    assert sorted((f.code, f.argument) for f in result.findings) == [
        ("ARGUMENT_OUT_OF_RANGE", "distance_meters"),
        ("MISSING_ARGUMENT", "output_path"),
        ("UNKNOWN_ARGUMENT", "colour"),
        ("WRONG_ARGUMENT_TYPE", "input_path"),
        ("WRONG_ARGUMENT_TYPE", "segments_per_quarter_circle"),
    ]


# -- references ----------------------------------------------------------------------------------


def test_a_forward_reference_names_the_step_to_move(app, data) -> None:
    wrong_order = plan(FIVE_STEPS["steps"][1], FIVE_STEPS["steps"][0])
    result = validate_plan(app, wrong_order)
    finding = only(result, "FORWARD_REFERENCE")
    assert (finding.step, finding.argument) == ("near", "mask_path")
    assert finding.message == "'mask_path' references '$buffer' which runs later — move step 'buffer' before 'near'"
    assert "move step 'buffer' before step 'near'" in finding.hint
    assert codes(result) == ["FORWARD_REFERENCE"]


def test_reading_a_later_steps_output_by_path_is_a_forward_reference_too(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("near", "clip_layer", input_path="parcels.gpkg", mask_path="river_buffer.gpkg", output_path="n.gpkg"),
            FIVE_STEPS["steps"][0],
        ),
    )
    finding = only(result, "FORWARD_REFERENCE")
    assert (finding.step, finding.argument) == ("near", "mask_path")
    assert "which step 'buffer' writes later — move step 'buffer' before 'near'" in finding.message
    assert codes(result) == ["FORWARD_REFERENCE"]


def test_an_earlier_steps_output_path_counts_as_its_output(app, data) -> None:
    by_path = copy.deepcopy(FIVE_STEPS)
    by_path["steps"][1]["arguments"]["mask_path"] = "river_buffer.gpkg"
    result = validate_plan(app, by_path)
    assert result.findings == []
    assert result.steps[1]["inputs"]["mask_path"]["from_step"] == "buffer"


def test_dangling_self_and_duplicate_references(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("buffer", "buffer_layer", input_path="river.gpkg", distance_meters=10, output_path="a.gpkg"),
            step("near", "clip_layer", input_path="parcels.gpkg", mask_path="$bufer", output_path="b.gpkg"),
            step("area", "measure_area", input_path="$area", output_path="c.gpkg"),
            step("buffer", "buffer_layer", input_path="river.gpkg", distance_meters=20, output_path="d.gpkg"),
        ),
    )
    dangling = only(result, "DANGLING_REFERENCE")
    assert (dangling.step, dangling.argument) == ("near", "mask_path")
    assert "no step is called 'bufer'; did you mean '$buffer'?" in dangling.message
    assert dangling.hint == "refer to one of the earlier steps: $buffer"
    self_ref = only(result, "SELF_REFERENCE")
    assert (self_ref.step, self_ref.argument) == ("area", "input_path")
    duplicate = only(result, "DUPLICATE_STEP_ID")
    assert duplicate.step == "buffer"
    assert "steps 1 and 4 are both called 'buffer'" in duplicate.message
    assert sorted(codes(result)) == ["DANGLING_REFERENCE", "DUPLICATE_STEP_ID", "SELF_REFERENCE"]


def test_a_reference_to_a_step_that_writes_no_dataset(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("stats", "band_statistics", input_path="dem_utm.tif"),
            step("slope", "slope", input_path="$stats", units="degrees", output_path="slope.tif"),
        ),
    )
    finding = only(result, "REFERENCE_TO_ANSWER")
    assert (finding.step, finding.argument) == ("slope", "input_path")
    assert "band_statistics returns an answer and writes no dataset" in finding.message
    assert codes(result) == ["REFERENCE_TO_ANSWER"]


def test_a_reference_in_a_parameter_is_refused_and_double_dollar_is_a_literal(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            FIVE_STEPS["steps"][0],
            step("sel", "select_features", input_path="parcels.gpkg", where="$buffer", output_path="s.gpkg"),
            step("lit", "select_features", input_path="parcels.gpkg", where="$$pid > 1", output_path="t.gpkg"),
        ),
    )
    finding = only(result, "REFERENCE_NOT_A_DATASET")
    assert (finding.step, finding.argument) == ("sel", "where")
    assert "'where' of select_features is not a dataset argument" in finding.message
    assert codes(result) == ["REFERENCE_NOT_A_DATASET"]
    assert result.steps[2]["arguments"]["where"] == "$pid > 1"


# -- paths -------------------------------------------------------------------------------------------


def test_missing_and_outside_inputs(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("a", "measure_area", input_path="nowhere.gpkg", output_path="a.gpkg"),
            step("b", "measure_area", input_path="../parcels.gpkg", output_path="b.gpkg"),
        ),
    )
    missing = only(result, "INPUT_NOT_FOUND")
    assert (missing.step, missing.argument) == ("a", "input_path")
    assert "nowhere.gpkg" in missing.message
    outside = only(result, "PATH_OUTSIDE_WORKSPACE")
    assert (outside.step, outside.argument) == ("b", "input_path")
    assert outside.evidence["path"] == "../parcels.gpkg"
    assert codes(result) == ["INPUT_NOT_FOUND", "PATH_OUTSIDE_WORKSPACE"]


def test_duplicate_outputs_and_outputs_over_inputs(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("a", "buffer_layer", input_path="river.gpkg", distance_meters=10, output_path="same.gpkg"),
            step("b", "buffer_layer", input_path="river.gpkg", distance_meters=20, output_path="same.gpkg"),
            step("c", "measure_area", input_path="$a", output_path="river.gpkg", overwrite=True),
        ),
    )
    duplicate = only(result, "DUPLICATE_OUTPUT")
    assert (duplicate.step, duplicate.argument) == ("b", "output_path")
    assert "which step 'a' writes already" in duplicate.message
    over = [f for f in result.findings if f.code == "OUTPUT_OVERWRITES_INPUT"]
    # river.gpkg is read by steps a and b; step c would replace it
    assert [(f.step, f.argument, f.evidence["input_step"]) for f in over] == [
        ("c", "output_path", "a"),
        ("c", "output_path", "b"),
    ]
    assert "step 'c' writes river.gpkg, which is step 'a's input_path" in over[0].message
    assert sorted(set(codes(result))) == ["DUPLICATE_OUTPUT", "OUTPUT_OVERWRITES_INPUT"]


def test_a_step_writing_its_own_input(app, data) -> None:
    result = validate_plan(
        app, plan(step("a", "measure_area", input_path="parcels.gpkg", output_path="parcels.gpkg", overwrite=True))
    )
    finding = only(result, "OUTPUT_OVERWRITES_INPUT")
    assert "which is its own input_path" in finding.message


def test_an_existing_output_is_refused_as_run_operation_would(app, data) -> None:
    result = validate_plan(app, plan(step("a", "measure_area", input_path="parcels.gpkg", output_path="river.gpkg")))
    assert codes(result) == ["OUTPUT_EXISTS"]
    finding = only(result, "OUTPUT_EXISTS")
    assert (finding.step, finding.argument) == ("a", "output_path")


# -- what flows between steps --------------------------------------------------------------------


def test_slope_on_a_geographic_dem_file(app, data) -> None:
    result = validate_plan(app, plan(step("s", "slope", input_path="dem.tif", units="degrees", output_path="s.tif")))
    finding = only(result, "RASTER_GEOGRAPHIC_CRS")
    assert (finding.step, finding.argument) == ("s", "input_path")
    assert "EPSG:4326, whose cells are 0.0015 x 0.0015 degrees" in finding.message
    assert codes(result) == ["RASTER_GEOGRAPHIC_CRS"]


def test_slope_on_a_dem_reprojected_to_degrees_by_an_earlier_step(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step(
                "wgs84",
                "reproject_raster",
                input_path="dem_utm.tif",
                target_crs="EPSG:4326",
                resampling="bilinear",
                output_path="dem_wgs84.tif",
            ),
            step("slope", "slope", input_path="$wgs84", units="degrees", output_path="slope.tif"),
        ),
    )
    assert result.steps[0]["output"]["crs"] == "EPSG:4326"
    assert result.steps[0]["output"]["grid"] is None  # a warp makes a new grid: not known before it runs
    finding = only(result, "RASTER_GEOGRAPHIC_CRS")
    assert (finding.step, finding.argument) == ("slope", "input_path")
    assert "the output of step 'wgs84', dem_wgs84.tif" in finding.message
    assert finding.evidence["from_step"] == "wgs84"
    assert "reproject_raster to a projected CRS first" in finding.hint
    assert codes(result) == ["RASTER_GEOGRAPHIC_CRS"]


def test_zonal_statistics_on_line_zones_from_a_step_and_from_a_file(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("lengths", "measure_length", input_path="river.gpkg", output_path="river_length.gpkg"),
            step("z1", "zonal_statistics", input_path="$lengths", raster_path="dem.tif", output_path="z1.gpkg"),
            step("z2", "zonal_statistics", input_path="river.gpkg", raster_path="dem.tif", output_path="z2.gpkg"),
        ),
    )
    assert result.steps[0]["output"]["geometry_types"] == ["line"]
    refused = [f for f in result.findings if f.code == "GEOMETRY_TYPE_REFUSED"]
    assert [(f.step, f.argument) for f in refused] == [("z1", "input_path"), ("z2", "input_path")]
    assert "zonal_statistics accepts polygon geometries in input_path" in refused[0].message
    assert "the output of step 'lengths'" in refused[0].message
    assert "buffer_layer the features into polygons first" in refused[0].hint
    assert codes(result) == ["GEOMETRY_TYPE_REFUSED", "GEOMETRY_TYPE_REFUSED"]


def test_band_math_over_two_grids(app, data) -> None:
    write_raster(data / "dem_utm_shifted.tif", "EPSG:32632", [400_050.0, 100.0, 0.0, 5_120_000.0, 0.0, -100.0])
    result = validate_plan(
        app,
        plan(
            step(
                "diff",
                "band_math",
                input_paths=["dem_utm.tif", "dem_utm_shifted.tif"],
                bands="a=0:1, b=1:1",
                expression="a - b",
                output_path="diff.tif",
            )
        ),
    )
    finding = only(result, "GRID_MISMATCH")
    assert (finding.step, finding.argument) == ("diff", "input_paths[1]")
    assert "are different grids; band_math combines cells by position" in finding.message
    assert finding.evidence["input_paths[1]"]["transform"][0] == 400_050.0
    assert codes(result) == ["GRID_MISMATCH"]


def test_band_math_over_a_reprojected_grid_is_not_judged(app, data) -> None:
    # the warped grid is unknown until it is written, so no GRID_MISMATCH is claimed either way
    result = validate_plan(
        app,
        plan(
            step(
                "w",
                "reproject_raster",
                input_path="dem.tif",
                target_crs="EPSG:32632",
                resampling="bilinear",
                output_path="w.tif",
            ),
            step("d", "band_math", input_paths=["$w", "dem_utm.tif"], expression="b1", output_path="d.tif"),
        ),
    )
    assert result.findings == []


def test_a_raster_where_a_vector_is_expected(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("clip", "clip_layer", input_path="dem_utm.tif", mask_path="parcels.gpkg", output_path="c.gpkg"),
            step("slope", "slope", input_path="dem_utm.tif", units="degrees", output_path="slope.tif"),
            step("buf", "buffer_layer", input_path="$slope", distance_meters=10, output_path="b.gpkg"),
            step("z", "zonal_statistics", input_path="parcels.gpkg", raster_path="$buf", output_path="z.gpkg"),
        ),
    )
    found = [(f.step, f.argument, f.evidence.get("from_step")) for f in result.findings]
    assert found == [("clip", "input_path", None), ("buf", "input_path", "slope"), ("z", "raster_path", "buf")]
    assert set(codes(result)) == {"KIND_MISMATCH"}
    assert "input_path must be a vector dataset; dem_utm.tif is a raster dataset" in result.findings[0].message
    assert "raster_to_polygons turns a grid into features" in result.findings[1].hint
    assert "rasterize_layer turns features into a grid" in result.findings[2].hint


def test_a_raster_whose_georeferencings_disagree(app, data) -> None:
    (data / "dem_utm.tif.aux.xml").write_text(SIDECAR)
    result = validate_plan(
        app, plan(step("s", "slope", input_path="dem_utm.tif", units="degrees", output_path="s.tif"))
    )
    finding = only(result, "GEOREF_CONFLICT")
    assert (finding.step, finding.argument) == ("s", "input_path")
    assert "GDAL_GEOREF_SOURCES" in finding.hint
    assert codes(result) == ["GEOREF_CONFLICT"]


@pytest.mark.filterwarnings("ignore:'crs' was not provided")
def test_an_input_without_a_crs(app, data) -> None:
    write_layer(data / "nocrs.gpkg", [box(0, 0, 1, 1)], None)
    result = validate_plan(app, plan(step("a", "measure_area", input_path="nocrs.gpkg", output_path="a.gpkg")))
    finding = only(result, "CRS_REQUIRED")
    assert (finding.step, finding.argument) == ("a", "input_path")
    assert "declares no coordinate reference system" in finding.message
    assert codes(result) == ["CRS_REQUIRED"]


# -- structure and collecting -----------------------------------------------------------------------


def test_structure_problems_are_plan_invalid_findings(app, data) -> None:
    result = validate_plan(app, {"steps": [{"id": "a", "operation": "buffer_layer", "arguments": []}]})
    assert not result.valid and result.plan is None and result.fingerprint is None
    assert sorted(f.evidence["where"] for f in result.findings) == ["(top level)", "steps/0/arguments"]
    assert set(codes(result)) == {"PLAN_INVALID"}
    assert [f.step for f in result.findings if f.evidence["where"] == "steps/0/arguments"] == ["a"]


def test_an_empty_plan(app, data) -> None:
    result = validate_plan(app, {"goal": "nothing", "steps": []})
    assert codes(result) == ["EMPTY_PLAN"]
    assert not result.valid


def test_every_finding_is_collected_in_one_pass_in_step_order(app, data) -> None:
    before = listing(data)
    result = validate_plan(
        app,
        plan(
            step("near", "clip_layer", input_path="parcels.gpkg", mask_path="$buffer", output_path="near.gpkg"),
            step("buffer", "buffer_layer", input_path="river.gpkg", distance_m=1500, output_path="b.gpkg"),
            step("s", "slope", input_path="dem.tif", units="degrees", output_path="s.tif"),
            step("x", "no_such_operation", input_path="parcels.gpkg"),
        ),
    )
    assert listing(data) == before
    assert [(f.code, f.step) for f in result.findings] == [
        ("FORWARD_REFERENCE", "near"),
        ("UNKNOWN_ARGUMENT", "buffer"),
        ("MISSING_ARGUMENT", "buffer"),
        ("RASTER_GEOGRAPHIC_CRS", "s"),
        ("UNKNOWN_OPERATION", "x"),
    ]
    as_dict = result.to_dict()
    assert as_dict["valid"] is False
    assert set(as_dict["findings"][0]) == {"code", "step", "argument", "message", "hint", "evidence"}
    assert all(f["hint"] for f in as_dict["findings"])


def test_every_code_validation_can_emit_is_documented() -> None:
    # The codes written literally in the plans package, and the ones the brief's list requires.
    import re

    package = Path(__file__).resolve().parents[2] / "core" / "mapsmith" / "plans"
    literal = set()
    # execute.py has its own errors
    for name in ("model.py", "findings.py", "validate.py", "flow.py", "simulate.py", "explain.py"):
        source = package / name
        literal |= set(re.findall(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"', source.read_text("utf-8")))
    literal -= {"FINDING_CODES", "OUTPUT_KINDS", "SAME_GRID_ARGUMENTS", "FAMILY_TYPE_NAMES"}
    assert literal <= set(FINDING_CODES), literal - set(FINDING_CODES)
    required = {
        "UNKNOWN_OPERATION", "UNKNOWN_ARGUMENT", "MISSING_ARGUMENT", "WRONG_ARGUMENT_TYPE", "ARGUMENT_OUT_OF_RANGE",
        "FORWARD_REFERENCE", "DANGLING_REFERENCE", "SELF_REFERENCE", "DUPLICATE_STEP_ID", "REFERENCE_TO_ANSWER",
        "INPUT_NOT_FOUND", "PATH_OUTSIDE_WORKSPACE", "DUPLICATE_OUTPUT", "OUTPUT_OVERWRITES_INPUT", "KIND_MISMATCH",
        "GEOMETRY_TYPE_REFUSED", "RASTER_GEOGRAPHIC_CRS", "GRID_MISMATCH", "GEOREF_CONFLICT", "CRS_REQUIRED",
        "PLAN_INVALID", "EMPTY_PLAN",
    }  # fmt: skip
    assert required <= set(FINDING_CODES)
    assert all(meaning.endswith(".") for meaning in FINDING_CODES.values())


def test_a_geojson_output_in_a_projected_crs_and_an_unreadable_target_crs(app, data) -> None:
    result = validate_plan(
        app,
        plan(
            step("utm", "reproject_layer", input_path="parcels.gpkg", target_crs="EPSG:32632", output_path="p.geojson"),
            step("bad", "reproject_layer", input_path="parcels.gpkg", target_crs="EPSG:999999", output_path="q.gpkg"),
            step("ok", "buffer_layer", input_path="river.gpkg", distance_meters=5, output_path="river.geojson"),
        ),
    )
    geojson = only(result, "GEOJSON_REQUIRES_WGS84")
    assert (geojson.step, geojson.argument) == ("utm", "output_path")
    assert "this output would be in EPSG:32632" in geojson.message
    crs = only(result, "CRS_INVALID")
    assert (crs.step, crs.argument) == ("bad", "target_crs")
    assert result.steps[0]["output"]["crs"] == "EPSG:32632"
    assert result.steps[1]["output"]["crs"] is None  # not known, so nothing downstream is judged on it
    assert codes(result) == ["GEOJSON_REQUIRES_WGS84", "CRS_INVALID"]
