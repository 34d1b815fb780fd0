"""validate_plan reports the refusals the runner, the router and the workspace would make, as findings.

test_validate_plan.py provokes the plan's own codes; this file provokes every code validation takes
over from elsewhere (paths, layers, outputs, grids, stacks), each with a plan built for it, and checks
the finding names the step and the argument. A guard test fails when FINDING_CODES gains a code that
no test in tests/plans provokes.
"""

from __future__ import annotations

import re
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from affine import Affine
from shapely.geometry import Point

from layers import write_layer
from mapsmith.app import MapSmith
from mapsmith.hookspecs import hookimpl
from mapsmith.plans import FINDING_CODES, validate_plan
from mapsmith.registry import Availability, StackSpec, Unavailable

HERE = Path(__file__).resolve().parent


def _buffer(input_path: str = "pts.gpkg", output_path: str = "out.gpkg", **extra: Any) -> dict[str, Any]:
    arguments = {"input_path": input_path, "distance_meters": 10, "output_path": output_path, **extra}
    return {"goal": "provoke one code", "steps": [{"id": "b", "operation": "buffer_layer", "arguments": arguments}]}


def _slope(input_path: str, output_path: str = "slope.tif") -> dict[str, Any]:
    arguments = {"input_path": input_path, "units": "degrees", "output_path": output_path}
    return {"goal": "provoke one code", "steps": [{"id": "s", "operation": "slope", "arguments": arguments}]}


NORTH_UP = Affine(10, 0, 500_000, 0, -10, 5_000_000)


def _dem(path: Path, transform: Affine | None = NORTH_UP) -> None:
    profile: dict[str, Any] = dict(driver="GTiff", width=4, height=3, count=1, dtype="float32", nodata=-9999)
    if transform is not None:
        profile.update(crs="EPSG:32610", transform=transform)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)  # the point of floating.tif
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(np.arange(12, dtype="float32").reshape(3, 4), 1)


@pytest.fixture
def ws(workspace: Path) -> Path:
    write_layer(workspace / "pts.gpkg", [Point(500_000, 5_000_000)], "EPSG:32610", id=[1])
    write_layer(workspace / "two.gpkg", [Point(500_000, 5_000_000)], "EPSG:32610", layer="a", id=[1])
    write_layer(workspace / "two.gpkg", [Point(500_010, 5_000_000)], "EPSG:32610", layer="b", id=[2])
    # labelled degrees, holding metres
    write_layer(workspace / "metres_as_degrees.gpkg", [Point(500_000, 5_000_000)], "EPSG:4326", id=[1])
    (workspace / "folder").mkdir()
    (workspace / "garbage.gpkg").write_bytes(b"this is not a GeoPackage")
    _dem(workspace / "dem.tif")
    _dem(workspace / "rotated.tif", Affine(10, 2, 500_000, 2, -10, 5_000_000))
    _dem(workspace / "floating.tif", None)
    (workspace / "sidecar_out.tif.aux.xml").write_text("<PAMDataset/>")
    (workspace / "dir_out.gpkg").mkdir()
    (workspace / "loop1").symlink_to("loop2")
    (workspace / "loop2").symlink_to("loop1")
    return workspace


CASES: dict[str, tuple[dict[str, Any], str]] = {
    # code: (plan, the argument the finding must name)
    "INPUT_IS_DIRECTORY": (_buffer(input_path="folder"), "input_path"),
    "INPUT_UNREADABLE": (_buffer(input_path="garbage.gpkg"), "input_path"),
    "LAYER_REQUIRED": (_buffer(input_path="two.gpkg"), "input_path"),
    "LAYER_NOT_FOUND": (_buffer(input_path="two.gpkg", layer="c"), "input_path"),
    "PATH_URL": (_buffer(input_path="https://example.org/pts.gpkg"), "input_path"),
    "PATH_VIRTUAL_FS": (_buffer(input_path="/vsicurl/https://example.org/pts.gpkg"), "input_path"),
    "PATH_UNC": (_buffer(input_path="\\\\server\\share\\pts.gpkg"), "input_path"),
    "PATH_DEVICE_NAME": (_buffer(output_path="CON.gpkg"), "output_path"),
    "PATH_ALTERNATE_STREAM": (_buffer(output_path="out.gpkg:hidden"), "output_path"),
    "PATH_EMPTY": (_buffer(input_path="   "), "input_path"),
    "PATH_DRIVE_LETTER": (_buffer(input_path="C:\\data\\pts.gpkg"), "input_path"),
    "PATH_INVALID_CHARACTERS": (_buffer(output_path="out\x00.gpkg"), "output_path"),
    "PATH_TOO_LONG": (_buffer(output_path="n" * 300 + ".gpkg"), "output_path"),
    "PATH_SYMLINK_LOOP": (_buffer(input_path="loop1"), "input_path"),
    "OUTPUT_IS_DIRECTORY": (_buffer(output_path="dir_out.gpkg"), "output_path"),
    "OUTPUT_FORMAT_REFUSED": (_buffer(output_path="out.shp"), "output_path"),
    "OUTPUT_FORMAT_UNSUPPORTED": (_buffer(output_path="out.xyz"), "output_path"),
    "OUTPUT_FOLDER_MISSING": (_buffer(output_path="no/such/folder/out.gpkg"), "output_path"),
    "OUTPUT_SIDECAR_EXISTS": (_slope("dem.tif", output_path="sidecar_out.tif"), "output_path"),
    "RASTER_ROTATED": (_slope("rotated.tif"), "input_path"),
    "RASTER_NOT_GEOREFERENCED": (_slope("floating.tif"), "input_path"),
    "CRS_COORDINATES_IMPOSSIBLE": (_buffer(input_path="metres_as_degrees.gpkg"), "input_path"),
    "CRS_AMBIGUOUS_SRID": (
        {
            "goal": "provoke one code",
            "steps": [
                {
                    "id": "r",
                    "operation": "reproject_layer",
                    "arguments": {"input_path": "pts.gpkg", "target_crs": "srid:4326", "output_path": "r.gpkg"},
                }
            ],
        },
        "target_crs",
    ),
}


@pytest.mark.parametrize("code", sorted(CASES))
def test_validation_reports_the_refusal_the_run_would_make(app, ws: Path, code: str) -> None:
    plan, argument = CASES[code]
    before = sorted(p.name for p in ws.iterdir())
    result = validate_plan(app, plan)
    hits = [f for f in result.findings if f.code == code]
    assert hits, [f.to_dict() for f in result.findings]
    assert hits[0].argument == argument and hits[0].step == plan["steps"][0]["id"]
    assert hits[0].hint, hits[0].to_dict()
    assert not result.valid
    assert sorted(p.name for p in ws.iterdir()) == before


def test_a_link_that_cannot_be_read_is_reported_not_raised(app, ws: Path, monkeypatch) -> None:
    # readlink can fail with EACCES (/proc/1/root/... outside the process's rights); root cannot
    # provoke that portably, so realpath is made to fail as the kernel would.
    import os

    real = os.path.realpath

    def denied(path, *args, **kwargs):
        if "unreadable_link" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", denied)
    result = validate_plan(app, _buffer(input_path="unreadable_link/pts.gpkg"))
    hits = [f for f in result.findings if f.code == "PATH_UNRESOLVABLE"]
    assert hits and hits[0].argument == "input_path" and "Permission denied" in hits[0].message


# -- operations a stack cannot run, and planned ones ----------------------------------------------


class ToyStack:
    """buffer_layer behind a licence tier, clip_layer online only, measure_area planned, nothing else."""

    @hookimpl
    def mapsmith_register_stacks(self, register) -> None:
        register(StackSpec(name="toy", summary="a test stack", availability=lambda: Availability(True)))

    @hookimpl
    def mapsmith_register_operations(self, register) -> None:
        def never(ctx) -> None:
            raise AssertionError("validation must not run an engine")

        register(
            never,
            operation="buffer_layer",
            stack="toy",
            engine="toy-buffer",
            requirement=lambda: Unavailable("licence_tier", "needs the Advanced tier", "ask for Advanced"),
        )
        register(
            never,
            operation="clip_layer",
            stack="toy",
            engine="toy-clip",
            requirement=lambda: Unavailable("online_only", "runs only online", "sign in"),
        )
        register(
            never,
            operation="measure_area",
            stack="toy",
            engine="toy-area",
            requirement=lambda: Unavailable("stack_unavailable", "the toy engine is not installed", "install it"),
        )


def _one(operation: str, **arguments: Any) -> dict[str, Any]:
    return {"goal": "g", "steps": [{"id": "x", "operation": operation, "arguments": arguments}]}


@pytest.mark.parametrize(
    ("operation", "arguments", "code"),
    [
        ("buffer_layer", {"input_path": "pts.gpkg", "distance_meters": 1, "output_path": "o.gpkg"}, "LICENCE_TIER"),
        ("clip_layer", {"input_path": "pts.gpkg", "mask_path": "pts.gpkg", "output_path": "o.gpkg"}, "ONLINE_ONLY"),
        ("measure_area", {"input_path": "pts.gpkg", "output_path": "o.gpkg"}, "STACK_UNAVAILABLE"),
        ("convert_format", {"input_path": "pts.gpkg", "output_path": "o.parquet"}, "OPERATION_MISSING"),
    ],
)
def test_an_operation_the_stack_cannot_run_is_a_finding(ws: Path, operation, arguments, code) -> None:
    app = MapSmith({"MAPSMITH_WORKSPACE": str(ws), "MAPSMITH_STACK": "toy"}, extra_plugins=[("toy", ToyStack())])
    result = validate_plan(app, _one(operation, **arguments))
    assert [f.code for f in result.findings if f.step == "x"][:1] == [code]


class PlannedOperation:
    @hookimpl
    def mapsmith_register_operations(self, register) -> None:
        contract = {
            "name": "future_operation",
            "summary": "An operation whose contract is published before its implementation.",
            "category": "other",
            "status": "planned",
            "distinguishes": "Exists only to be refused as planned in this test.",
            "crs_effect": "none",
            "needs_projected_crs": False,
            "checks": [],
            "output": {"kind": "answer"},
            "examples": [{"description": "nothing", "arguments": {}}],
        }
        register(lambda ctx: None, operation="future_operation", stack="opensource", engine="none", contract=contract)


def test_a_planned_operation_is_a_finding(ws: Path) -> None:
    app = MapSmith({"MAPSMITH_WORKSPACE": str(ws)}, extra_plugins=[("planned", PlannedOperation())])
    result = validate_plan(app, _one("future_operation"))
    assert [f.code for f in result.findings] == ["OPERATION_PLANNED"]


def test_remote_paths_allowed_without_a_workspace_are_still_refused_where_nothing_reads_them(tmp_path: Path) -> None:
    app = MapSmith({"MAPSMITH_ALLOW_REMOTE": "1"})
    remote_input = _buffer(input_path="https://example.org/pts.gpkg", output_path=str(tmp_path / "o.gpkg"))
    assert "REMOTE_INPUT_UNSUPPORTED" in [f.code for f in validate_plan(app, remote_input).findings]
    remote_output = _buffer(input_path=str(tmp_path / "pts.gpkg"), output_path="https://example.org/o.gpkg")
    assert "OUTPUT_REMOTE" in [f.code for f in validate_plan(app, remote_output).findings]


def test_remote_data_is_refused_under_a_workspace_even_when_allowed(ws: Path) -> None:
    # from_env refuses this combination at start; a Workspace built by hand can still carry it
    from mapsmith.workspace import Workspace

    app = MapSmith({"MAPSMITH_WORKSPACE": str(ws)})
    app.workspace = Workspace(root=app.workspace.root, allow_remote=True)
    result = validate_plan(app, _buffer(input_path="https://example.org/pts.gpkg"))
    assert [f.code for f in result.findings] == ["PATH_REMOTE_UNDER_WORKSPACE"]


def test_every_finding_code_is_provoked_by_some_test() -> None:
    text = "".join(p.read_text("utf-8") for p in HERE.glob("test_*.py"))
    quoted = set(re.findall(r'"([A-Z][A-Z0-9_]+)"', text))
    unprovoked = sorted(set(FINDING_CODES) - quoted)
    assert unprovoked == [], f"no test in tests/plans names these codes: {unprovoked}"


def test_sqlite_is_what_geopackage_is(ws: Path) -> None:
    # the INPUT_UNREADABLE case above relies on this file not being a database at all
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(ws / "garbage.gpkg").execute("select * from gpkg_contents").fetchall()
