"""The qgis stack against a real QGIS: every listed algorithm imported, and runs through the runner.

Skipped only when no qgis_process is installed (CI installs QGIS, so there they run for real). The
tests select the qgis stack with MAPSMITH_STACK=qgis, which routes the ``qgis:`` operations today.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import mapsmith_qgis
from mapsmith.catalog.search import discover
from mapsmith.errors import ArgumentError, EngineError, MapSmithError

SYSTEM_PATH = "/usr/bin:/bin"
QGIS = next((p for n in mapsmith_qgis.EXECUTABLE_NAMES if (p := shutil.which(n, path=SYSTEM_PATH))), None)
pytestmark = pytest.mark.skipif(
    QGIS is None, reason="qgis_process is not installed (apt-get install -y --no-install-recommends qgis)"
)

SIDE_M = 100.0
DISTANCE_M = 10.0
SEGMENTS = 8  # per quarter circle


if QGIS is None and os.environ.get("MAPSMITH_QGIS_REQUIRED") == "1":  # CI's qgis session: never skip there
    raise RuntimeError("MAPSMITH_QGIS_REQUIRED=1 but no qgis_process is installed")


@pytest.fixture
def qgis_app(make_app: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(mapsmith_qgis.ALGORITHMS_ENV, "1")
    return make_app(MAPSMITH_STACK="qgis")


@pytest.fixture
def square(workspace: Path) -> str:
    import geopandas as gpd
    from shapely.geometry import box

    gpd.GeoDataFrame(
        {"name": ["a"]}, geometry=[box(500000, 5000000, 500000 + SIDE_M, 5000000 + SIDE_M)], crs="EPSG:32633"
    ).to_file(workspace / "square.gpkg")
    return "square.gpkg"


def test_every_listed_algorithm_is_an_operation(qgis_app: Any) -> None:
    done = subprocess.run([QGIS, "--json", "list"], capture_output=True, env=mapsmith_qgis.subprocess_env(), check=True)
    listed = {a for p in json.loads(done.stdout)["providers"].values() for a in p["algorithms"]}
    imported = {n.removeprefix("qgis:") for n in qgis_app.host.contracts if n.startswith("qgis:")}
    assert len(listed) > 300
    assert imported == listed
    buffer = qgis_app.host.contracts["qgis:native:buffer"]
    assert buffer.status == "available" and buffer.output_kind == "dataset:vector"
    assert [d.name for d in buffer.datasets] == ["input_path"]
    params = {p.name: p for p in buffer.parameters}
    assert params["end_cap_style"].choices == ("Round", "Flat", "Square") and params["end_cap_style"].default == "Round"
    assert params["segments"].type == "integer" and params["segments"].minimum == 1
    assert params["dissolve"].type == "boolean" and params["dissolve"].default is False
    clip = qgis_app.host.contracts["qgis:native:clip"]
    assert [(d.name, d.geometry_types) for d in clip.datasets] == [("input_path", None), ("overlay_path", ("polygon",))]


def test_buffer_of_a_square_has_the_area_worked_out_by_hand(qgis_app: Any, workspace: Path, square: str) -> None:
    import geopandas as gpd

    result = qgis_app.run(
        "qgis:native:buffer",
        {"input_path": square, "distance": DISTANCE_M, "segments": SEGMENTS, "output_path": "buffered.gpkg"},
    )
    # The square, four 100 x 10 strips, and four quarter arcs of SEGMENTS chords each: one regular
    # polygon of 4 * SEGMENTS sides inscribed in a circle of radius 10 m.
    n = 4 * SEGMENTS
    expected = SIDE_M**2 + 4 * SIDE_M * DISTANCE_M + 0.5 * n * DISTANCE_M**2 * math.sin(2 * math.pi / n)
    assert expected == pytest.approx(14312.14, abs=0.01)
    area = gpd.read_file(workspace / "buffered.gpkg").geometry.area.sum()
    assert area == pytest.approx(expected, rel=1e-9)
    manifest = json.loads((workspace / "buffered.gpkg.provenance.json").read_text("utf-8"))
    assert manifest["operation"] == "qgis:native:buffer"
    assert manifest["engine"]["name"] == "qgis" and manifest["engine"]["version"].startswith("3.")
    assert manifest["engine"]["x-mapsmith:components"]["algorithm"] == "native:buffer"
    assert manifest["parameters"]["x-mapsmith:qgis_parameters"] == [
        ["INPUT", "square.gpkg|layername=square"],
        ["DISTANCE", "10.0"],
        ["SEGMENTS", "8"],
        ["END_CAP_STYLE", "0"],
        ["JOIN_STYLE", "0"],
        ["MITER_LIMIT", "2.0"],
        ["DISSOLVE", "false"],
        ["OUTPUT", "(output_path)"],
    ]
    assert manifest["inputs"][0]["path"] == "square.gpkg" and len(manifest["inputs"][0]["sha256"]) == 64
    assert {c["name"] for c in manifest["verification"]} >= {"crs_present", "result_not_empty"}
    assert result.engine["stack"] == "qgis"


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"distance": 10, "segmnts": 8}, "UNKNOWN_ARGUMENT"),
        ({"distance": 10, "end_cap_style": "Rounded"}, "ARGUMENT_NOT_IN_CHOICES"),
        ({"distance": "ten"}, "WRONG_ARGUMENT_TYPE"),
        ({"distance": 10, "segments": 0}, "ARGUMENT_OUT_OF_RANGE"),
    ],
)
def test_arguments_are_refused_before_qgis_starts(
    qgis_app: Any, square: str, monkeypatch: pytest.MonkeyPatch, arguments: dict[str, Any], code: str
) -> None:
    import mapsmith_qgis.run

    def no_qgis(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("qgis_process was started")

    monkeypatch.setattr(mapsmith_qgis.run.subprocess, "run", no_qgis)
    with pytest.raises(ArgumentError) as err:
        qgis_app.run("qgis:native:buffer", {"input_path": square, "output_path": "b.gpkg", **arguments})
    assert err.value.code == code


def test_a_failing_algorithm_brings_back_qgis_own_message(qgis_app: Any, workspace: Path, square: str) -> None:
    with pytest.raises(EngineError) as err:
        qgis_app.run(
            "qgis:native:creategrid",
            {
                "type": "Hexagon (Polygon)",
                "extent": "0,10,0,10 [EPSG:32633]",
                "hspacing": 0,
                "vspacing": 0,
                "crs": "EPSG:32633",
                "output_path": "grid.gpkg",
            },
        )
    assert err.value.code == "QGIS_ALGORITHM_FAILED"
    assert "Invalid grid spacing. horizontal: '0', vertical: '0'" in str(err.value)
    assert err.value.evidence["exit_status"] == 1
    assert not (workspace / "grid.gpkg").exists()
    assert (workspace / "grid.gpkg.failed.provenance.json").exists()


@pytest.mark.parametrize(
    ("query", "operation"),
    [
        ("voronoi polygons", "qgis:qgis:voronoipolygons"),
        ("hexagon grid", "qgis:native:creategrid"),
        ("buffer", "qgis:native:buffer"),
    ],
)
def test_list_operations_finds_qgis_algorithms_by_description(qgis_app: Any, query: str, operation: str) -> None:
    answer = discover(qgis_app, query, engine="lexical")
    assert operation in [c["operation"] for c in answer["candidates"]][:5]
    assert operation in {o["operation"] for o in qgis_app.list_operations()}


@pytest.mark.parametrize(
    ("operation", "arguments", "code"),
    [
        # a URL in a string parameter: QGIS would download it
        (
            "qgis:native:filedownloader",
            {"url": "http://127.0.0.1:9/x.tif", "output_path": "x.tif"},
            "QGIS_PARAMETER_NOT_CONTAINED",
        ),
        # a grid outside the workspace in a CRS parameter: PROJ would read it
        (
            "qgis:native:creategrid",
            {
                "type": "Rectangle (Polygon)",
                "extent": "0,10,0,10",
                "hspacing": 1,
                "vspacing": 1,
                "crs": "+proj=longlat +datum=NAD27 +nadgrids=/etc/passwd +type=crs",
                "output_path": "g.gpkg",
            },
            "CRS_REFERENCES_FILE",
        ),
        # an extent given as a layer path instead of numbers
        (
            "qgis:native:creategrid",
            {
                "type": "Rectangle (Polygon)",
                "extent": "/etc/passwd",
                "hspacing": 1,
                "vspacing": 1,
                "crs": "EPSG:32633",
                "output_path": "g.gpkg",
            },
            "QGIS_PARAMETER_NOT_CONTAINED",
        ),
    ],
)
def test_values_that_reach_outside_the_workspace_are_refused_before_qgis_starts(
    qgis_app: Any, monkeypatch: pytest.MonkeyPatch, operation: str, arguments: dict[str, Any], code: str
) -> None:
    import mapsmith_qgis.run

    def no_qgis(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("qgis_process was started")

    monkeypatch.setattr(mapsmith_qgis.run.subprocess, "run", no_qgis)
    with pytest.raises(MapSmithError) as err:
        qgis_app.run(operation, arguments)
    assert err.value.code == code


def test_gdal_command_line_options_are_refused_under_a_workspace(
    qgis_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mapsmith_qgis.run
    from catalog_args import sample_dem

    sample_dem(workspace / "dem.tif")
    monkeypatch.setattr(mapsmith_qgis.run.subprocess, "run", lambda *a, **k: pytest.fail("qgis_process started"))
    arguments = {"input_path": "dem.tif", "projwin": "499900,500300,4999900,5000200", "extra": "-cutline x.shp"}
    with pytest.raises(MapSmithError) as err:
        qgis_app.run("qgis:gdal:cliprasterbyextent", {**arguments, "output_path": "c.tif"})
    assert err.value.code == "QGIS_PARAMETER_NOT_CONTAINED" and err.value.evidence["qgis_parameter"] == "EXTRA"
