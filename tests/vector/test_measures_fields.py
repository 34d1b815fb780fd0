"""measure_area and measure_length write an existing column only when asked, end to end through the
runner and through a plan: refused with FIELD_EXISTS otherwise, replaced (and said so) with
overwrite_field=true.

Hand-worked, in EPSG:6933 (equal-area on the ellipsoid): a 30 x 40 m rectangle is 1,200 m2 planar;
its diagonal line from one corner to the other is sqrt(30^2 + 40^2) = 50 m planar. The stale values
written into the input beforehand (1.0 and -7.0) are what a careless overwrite would leave behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import LineString, box

from layers import manifest, read, write_layer
from mapsmith.errors import InputError
from mapsmith.plans.execute import execute_plan

EASE = "EPSG:6933"
X0, Y0 = 1_000_000.0, 5_000_000.0


def test_measure_area_refuses_then_replaces_an_existing_field(app, workspace: Path) -> None:
    write_layer(workspace / "r.gpkg", [box(X0, Y0, X0 + 30, Y0 + 40)], EASE, area_m2=[1.0], name=["a"])
    args = {"input_path": "r.gpkg", "method": "planar", "output_path": "o.gpkg"}
    with pytest.raises(InputError) as err:
        app.run("measure_area", args)
    assert err.value.code == "FIELD_EXISTS" and err.value.evidence["field"] == "area_m2"
    assert "overwrite_field=true" in err.value.hint and "output_field" in err.value.hint
    assert not (workspace / "o.gpkg").exists()

    result = app.run("measure_area", {**args, "overwrite_field": True})
    assert result.answer["field_replaced"] is True and result.answer["output_field"] == "area_m2"
    assert any("'area_m2' was replaced" in n for n in result.notes)
    out = read(workspace / "o.gpkg")
    assert list(out.columns) == ["area_m2", "name", "geometry"]  # replaced in place, not duplicated
    assert out["area_m2"].tolist() == pytest.approx([1_200.0], abs=1e-9)
    assert manifest(workspace / "o.gpkg")["parameters"]["x-mapsmith:field_replaced"] is True

    # clean twin: a new name beside the old field is not a replacement, and the old value stays
    named = app.run("measure_area", {**args, "output_field": "surface_m2", "output_path": "n.gpkg"})
    assert named.answer["field_replaced"] is False
    kept = read(workspace / "n.gpkg")
    assert kept["area_m2"].tolist() == [1.0] and kept["surface_m2"].tolist() == pytest.approx([1_200.0])


def test_measure_length_refuses_then_replaces_a_named_field(app, workspace: Path) -> None:
    diagonal = LineString([(X0, Y0), (X0 + 30, Y0 + 40)])
    write_layer(workspace / "l.gpkg", [diagonal], EASE, run_m=[-7.0])
    args = {"input_path": "l.gpkg", "method": "planar", "output_field": "run_m", "output_path": "o.gpkg"}
    with pytest.raises(InputError) as err:
        app.run("measure_length", args)
    assert err.value.code == "FIELD_EXISTS" and err.value.evidence["field"] == "run_m"

    result = app.run("measure_length", {**args, "overwrite_field": True})
    assert result.answer["field_replaced"] is True and result.answer["rows"] == [{"run_m": pytest.approx(50.0)}]
    assert read(workspace / "o.gpkg")["run_m"].tolist() == pytest.approx([50.0], abs=1e-9)
    record = manifest(workspace / "o.gpkg")
    assert record["parameters"]["x-mapsmith:field_replaced"] is True
    assert record["parameters"]["output_field"] == "run_m" and record["parameters"]["overwrite_field"] is True


def test_a_plan_that_measures_twice_needs_overwrite_field_on_the_second_step(app, workspace: Path) -> None:
    # Step two measures step one's output again, into the same field: a plan that says nothing is
    # stopped at that step with FIELD_EXISTS; the same plan with overwrite_field=true runs through.
    write_layer(workspace / "r.gpkg", [box(X0, Y0, X0 + 30, Y0 + 40)], EASE, name=["a"])

    def plan(overwrite: bool, suffix: str) -> dict:
        second = {"input_path": "$first", "output_path": f"second{suffix}.gpkg"}
        if overwrite:
            second["overwrite_field"] = True
        return {
            "goal": "area, measured twice",
            "steps": [
                {
                    "id": "first",
                    "operation": "measure_area",
                    "arguments": {"input_path": "r.gpkg", "method": "planar", "output_path": f"first{suffix}.gpkg"},
                },
                {"id": "second", "operation": "measure_area", "arguments": second},
            ],
        }

    stopped = execute_plan(app, plan(False, "_a"))
    assert stopped.failed_step == "second" and stopped.error["code"] == "FIELD_EXISTS"
    assert not (workspace / "second_a.gpkg").exists()

    done = execute_plan(app, plan(True, "_b"))
    assert done.status == "ok" and done.failed_step is None
    assert read(workspace / "second_b.gpkg")["area_m2"].tolist() == pytest.approx([1_200.0], rel=1e-4)
