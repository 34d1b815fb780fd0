"""Toolboxes: an operation family a plugin declares at start and the host loads on first use.

A throwaway stack declares the ``demo:`` toolbox whose load counts its calls, so each test can say
exactly when the load ran: never for an operation outside the toolbox, once for a ``demo:`` name
or a listing of the catalogue, and never twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mapsmith.app import MapSmith
from mapsmith.contracts import load_builtin_contracts
from mapsmith.errors import OperationUnavailable, UnknownOperation
from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, StackSpec
from mapsmith.toolboxes import Toolbox

BUILT_IN = len(load_builtin_contracts())


def demo_contract(name: str) -> dict[str, Any]:
    """measure_area's contract under another name: a schema-valid contract without writing one out."""
    return {**load_builtin_contracts()["measure_area"].raw, "name": name}


class DemoStack:
    def __init__(self, available: bool = True, names: tuple[str, ...] = ("demo:area",), stack: str = "demo") -> None:
        self.available = available
        self.names = names
        self.stack = stack
        self.loads = 0

    def load(self, register: Callable[..., None]) -> None:
        self.loads += 1
        if not self.available:
            return  # what the qgis toolbox does without qgis_process: nothing to register
        for name in self.names:
            register(lambda ctx: None, operation=name, stack=self.stack, engine="demo", contract=demo_contract(name))

    @hookimpl
    def mapsmith_register_stacks(self, register) -> None:
        availability = Availability(True) if self.available else Availability(False, "demo is absent", "install demo")
        register(StackSpec(name="demo", summary="a test stack", availability=lambda: availability))

    @hookimpl
    def mapsmith_register_toolboxes(self, register) -> None:
        register(Toolbox(stack="demo", prefix="demo:", summary="demo operations", load=self.load))


def make(workspace: Path, plugin: DemoStack) -> MapSmith:
    return MapSmith({"MAPSMITH_WORKSPACE": str(workspace)}, extra_plugins=[("demo", plugin)])


def test_building_the_service_and_using_other_operations_never_loads_the_toolbox(workspace: Path) -> None:
    demo = DemoStack()
    app = make(workspace, demo)

    assert app.router.contract("buffer_layer").name == "buffer_layer"
    assert app.router.candidates("measure_area").stack == "opensource"
    assert "buffer_layer" in app.host.contracts
    info = app.server_info()

    assert demo.loads == 0
    assert info["operations"] == BUILT_IN
    assert info["toolboxes"] == [{"stack": "demo", "prefix": "demo:", "summary": "demo operations", "state": "pending"}]


def test_a_toolbox_name_loads_it_once(workspace: Path) -> None:
    demo = DemoStack(names=("demo:area", "demo:area_again"))
    app = make(workspace, demo)

    assert app.host.contracts["demo:area"].name == "demo:area"
    assert app.router.candidates("demo:area_again").impls[0].engine == "demo"
    assert "demo:area" in app.host.contracts

    assert demo.loads == 1
    info = app.server_info()
    assert info["operations"] == BUILT_IN + 2
    (box,) = info["toolboxes"]
    assert box["state"] == "loaded" and box["operations"] == 2


def test_listing_the_catalogue_loads_the_toolbox_and_lists_its_operations(workspace: Path) -> None:
    demo = DemoStack()
    app = make(workspace, demo)

    listed = [entry["operation"] for entry in app.list_operations()]

    assert demo.loads == 1
    assert "demo:area" in listed and "buffer_layer" in listed
    assert len(listed) == BUILT_IN + 1
    assert len(app.host.contracts) == BUILT_IN + 1
    assert demo.loads == 1


def test_threads_asking_at_once_load_it_once(workspace: Path) -> None:
    demo = DemoStack()
    app = make(workspace, demo)
    found: list[str] = []

    def ask() -> None:
        found.append(app.host.contracts["demo:area"].name)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert demo.loads == 1
    assert found == ["demo:area"] * 8


def test_a_toolbox_of_an_unavailable_stack_answers_with_the_stacks_fix(workspace: Path) -> None:
    app = make(workspace, DemoStack(available=False))

    with pytest.raises(OperationUnavailable) as refused:
        app.router.contract("demo:area")

    assert refused.value.code == "STACK_UNAVAILABLE"
    assert refused.value.message == "the demo stack is not available here: demo is absent"
    assert refused.value.hint == "install demo"
    assert refused.value.evidence == {"operation": "demo:area", "stack": "demo", "outcome": "stack_unavailable"}


def test_an_unknown_name_in_a_loaded_toolbox_is_an_unknown_operation_with_suggestions(workspace: Path) -> None:
    app = make(workspace, DemoStack())

    with pytest.raises(UnknownOperation) as refused:
        app.router.contract("demo:arae")

    assert refused.value.evidence["suggestions"][0] == "demo:area"


def test_a_toolbox_registering_outside_its_prefix_is_refused_and_left_empty(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    demo = DemoStack(names=("demo:area", "sneaky_area"))
    app = make(workspace, demo)

    with caplog.at_level("WARNING", logger="mapsmith.plugins"):
        with pytest.raises(OperationUnavailable) as refused:
            app.router.contract("demo:area")

    assert refused.value.code == "STACK_UNAVAILABLE"
    assert "could not be loaded" in refused.value.message and "'sneaky_area'" in refused.value.message
    assert "demo:area" not in app.host.contracts.loaded()  # what it registered before the bad name is rolled back
    assert "sneaky_area" not in app.host.contracts
    (box,) = app.server_info()["toolboxes"]
    assert box["state"] == "failed" and "sneaky_area" in box["problem"]
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "could not be loaded" in caplog.records[0].message
    assert demo.loads == 1
