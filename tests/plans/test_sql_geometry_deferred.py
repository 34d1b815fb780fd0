"""A run_sql step's output geometry is known only when it runs: validate_plan moves the check to run
time with a note (never an error), unless the step declares geometry_type; the runner then checks it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, Polygon

from layers import write_layer
from mapsmith.plans import FINDING_CODES


@pytest.fixture
def ws(workspace: Path) -> Path:
    write_layer(workspace / "sites.gpkg", [Point(0, 0), Point(100, 0)], "EPSG:32633", id=[1, 2])
    write_layer(
        workspace / "parcels.gpkg",
        # 10 m x 10 m of grid on UTM 33N's central meridian, where the scale factor is 0.9996: the
        # ellipsoidal area is 100 / 0.9996**2 = 100.0800 m2.
        [Polygon([(500000, 5000000), (500000, 5000010), (500010, 5000010), (500010, 5000000)])],
        "EPSG:32633",
        id=[1],
    )
    return workspace


def plan(sql: str, **declared: str) -> dict[str, Any]:
    return {
        "goal": "areas of what the SQL selects",
        "steps": [
            {"id": "q", "operation": "run_sql", "arguments": {"sql": sql, "output_path": "q.gpkg", **declared}},
            {"id": "area", "operation": "measure_area", "arguments": {"input_path": "$q", "output_path": "a.gpkg"}},
        ],
    }


def test_after_run_sql_the_geometry_check_is_a_note_not_an_error(app: Any, ws: Path) -> None:
    result = app.validate_plan(plan("SELECT id, geom FROM ST_Read('parcels.gpkg')"))
    assert result["valid"] is True, result["findings"]
    assert result["findings"] == []
    (note,) = result["notes"]
    assert (note["code"], note["step"], note["argument"]) == ("GEOMETRY_CHECK_AT_RUN_TIME", "area", "input_path")
    assert note["evidence"] == {"from_step": "q", "accepted": ["polygon"]}
    assert "GEOMETRY_CHECK_AT_RUN_TIME" in FINDING_CODES


def test_a_declared_geometry_type_is_simulated(app: Any, ws: Path) -> None:
    refused = app.validate_plan(plan("SELECT id, geom FROM ST_Read('sites.gpkg')", geometry_type="point"))
    assert refused["valid"] is False
    assert [(f["code"], f["step"]) for f in refused["findings"]] == [("GEOMETRY_TYPE_REFUSED", "area")]
    accepted = app.validate_plan(plan("SELECT id, geom FROM ST_Read('parcels.gpkg')", geometry_type="polygon"))
    assert accepted["valid"] is True and accepted["notes"] == []
    assert accepted["steps"][0]["output"]["geometry_types"] == ["polygon"]


def test_the_runner_checks_the_geometry_type_when_the_plan_runs(app: Any, ws: Path) -> None:
    points = plan("SELECT id, geom FROM ST_Read('sites.gpkg')")
    assert app.validate_plan(points)["valid"] is True  # not refused on a guess
    ran = app.execute_plan(points)
    assert (ran["status"], ran["failed_step"]) == ("failed", "area")
    assert ran["error"]["code"] == "GEOMETRY_TYPE_REFUSED"
    assert ran["error"]["evidence"]["geometry_types"] == ["Point"]
    assert not (ws / "a.gpkg").exists()


def test_the_clean_twin_runs_and_measures(app: Any, ws: Path) -> None:
    done = app.execute_plan(plan("SELECT id, geom FROM ST_Read('parcels.gpkg')"))
    assert done["status"] in ("ok", "ok_with_warnings")
    import geopandas as gpd

    assert list(gpd.read_file(ws / "a.gpkg")["area_m2"]) == [pytest.approx(100 / 0.9996**2, rel=1e-5)]


def test_a_run_sql_answer_step_needs_no_output_path(app: Any, ws: Path) -> None:
    answer_plan = {
        "goal": "how many parcels",
        "steps": [{"id": "n", "operation": "run_sql", "arguments": {"sql": "SELECT 1 AS one"}}],
    }
    result = app.validate_plan(answer_plan)
    assert result["valid"] is True, result["findings"]
    assert result["steps"][0]["output"] == {"kind": "answer"}


def test_a_table_output_flows_on_as_a_table(app: Any, ws: Path) -> None:
    table_plan = plan("SELECT id FROM ST_Read('parcels.gpkg')")
    table_plan["steps"][0]["arguments"]["output_path"] = "q.csv"
    result = app.validate_plan(table_plan)
    assert [(f["code"], f["step"]) for f in result["findings"]] == [("KIND_MISMATCH", "area")]


def test_a_json_table_of_projected_coordinates_is_not_held_to_geojson_rules(app: Any, ws: Path) -> None:
    # .json is an array of records (a table); only .geojson must be WGS 84
    steps = [
        {
            "id": "t",
            "operation": "convert_format",
            "arguments": {"input_path": "sites.gpkg", "geometry_as": "xy", "output_path": "sites.json"},
        }
    ]
    assert app.validate_plan({"goal": "a table", "steps": steps})["valid"] is True
    steps[0]["arguments"] = {"input_path": "sites.gpkg", "output_path": "sites.geojson"}
    refused = app.validate_plan({"goal": "a layer", "steps": steps})
    assert [f["code"] for f in refused["findings"]] == ["GEOJSON_REQUIRES_WGS84"]
