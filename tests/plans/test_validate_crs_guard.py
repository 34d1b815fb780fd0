"""Plan validation refuses what run_operation's CRS guard refuses, with the same codes and arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shapely.geometry import Point

from layers import write_layer

HOSTILE = "+proj=longlat +datum=NAD27 +nadgrids=/etc/passwd +type=crs"


def _step(step_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": step_id, "operation": "reproject_layer", "arguments": arguments}


def _codes(app: Any, *steps: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    result = app.validate_plan({"goal": "reproject", "steps": list(steps)})
    return [(f["code"], f.get("step"), f.get("argument")) for f in result["findings"]]


def test_crs_argument_and_declared_crs_are_checked(app: Any, workspace: Path) -> None:
    write_layer(workspace / "ok.gpkg", [Point(1, 2)], "EPSG:4326", v=[1])
    write_layer(workspace / "bad.gpkg", [Point(1, 2)], HOSTILE, v=[1])
    (workspace / "grid.nc").write_bytes(b"CDF\x01" + b"\x00" * 60)
    (workspace / "broken.gpkg").write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    codes = _codes(
        app,
        _step("a", input_path="ok.gpkg", target_crs=HOSTILE, output_path="a.gpkg"),
        _step("b", input_path="bad.gpkg", target_crs="EPSG:3857", output_path="b.gpkg"),
        _step("c", input_path="grid.nc", target_crs="EPSG:3857", output_path="c.gpkg"),
        _step("d", input_path="broken.gpkg", target_crs="EPSG:3857", output_path="d.gpkg"),
    )
    assert ("CRS_REFERENCES_FILE", "a", "target_crs") in codes
    assert ("CRS_REFERENCES_FILE", "b", "input_path") in codes
    assert ("CRS_FORMAT_UNCHECKED", "c", "input_path") in codes
    assert ("CRS_DECLARATION_UNREADABLE", "d", "input_path") in codes


def test_clean_plan_has_no_crs_findings(app: Any, workspace: Path) -> None:
    write_layer(workspace / "ok.gpkg", [Point(1, 2)], "EPSG:4326", v=[1])
    assert _codes(app, _step("a", input_path="ok.gpkg", target_crs="EPSG:3857", output_path="a.gpkg")) == []
