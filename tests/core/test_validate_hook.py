"""An implementation's ``validate`` refuses argument combinations before the engine starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import box

from layers import write_layer
from mapsmith.app import MapSmith
from mapsmith.errors import ArgumentError
from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, StackSpec

CALLS: list[str] = []


def _refuse_big(ctx) -> None:
    CALLS.append("validate")
    if ctx.arguments["distance_meters"] > 100:
        raise ArgumentError("too far for this engine", code="DISTANCE_TOO_LARGE", hint="use 100 m or less")


def _engine(ctx) -> None:
    CALLS.append("engine")
    from mapsmith_opensource import buffer_ops

    buffer_ops.buffer_layer(ctx)


class Strict:
    @hookimpl
    def mapsmith_register_stacks(self, register) -> None:
        register(StackSpec(name="strict", summary="test", availability=lambda: Availability(True)))

    @hookimpl
    def mapsmith_register_operations(self, register) -> None:
        register(_engine, operation="buffer_layer", stack="strict", engine="strict-buffer", validate=_refuse_big)


def test_validate_runs_before_the_engine_and_leaves_no_record(workspace: Path) -> None:
    CALLS.clear()
    write_layer(workspace / "in.gpkg", [box(0, 0, 1, 1)], "EPSG:32610", id=[1])
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_STACK": "strict"}, extra_plugins=[("s", Strict())])
    with pytest.raises(ArgumentError) as err:
        app.run("buffer_layer", {"input_path": "in.gpkg", "distance_meters": 500, "output_path": "b.gpkg"})
    assert err.value.code == "DISTANCE_TOO_LARGE"
    assert CALLS == ["validate"]
    assert sorted(p.name for p in workspace.iterdir()) == ["in.gpkg"]  # no dataset, no failure record
    app.run("buffer_layer", {"input_path": "in.gpkg", "distance_meters": 50, "output_path": "b.gpkg"})
    assert CALLS == ["validate", "validate", "engine"]
