"""The router's outcomes, substitution and engine choice, with throwaway plugins registered per test.

Each test builds its own ``MapSmith`` with ``extra_plugins``, so nothing registered here outlives
the test.
"""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest
from shapely.geometry import box

from layers import manifest, write_layer
from mapsmith import hookspecs
from mapsmith.app import MapSmith
from mapsmith.errors import ConfigurationError, ContractError, OperationUnavailable, PluginError
from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, StackSpec, Unavailable


def _measure_then_name(engine: str):
    def impl(ctx) -> None:
        from mapsmith_opensource import measures

        measures.measure_area(ctx)
        ctx.set_engine(engine, "9.9")

    return impl


class ToyStack:
    """A stack with one operation missing, one behind a licence tier, one online only, and two
    engines for measure_area of which the preferred one refuses geographic input."""

    @hookimpl
    def mapsmith_register_stacks(self, register) -> None:
        register(StackSpec(name="toy", summary="a test stack", availability=lambda: Availability(True)))

    @hookimpl
    def mapsmith_register_operations(self, register) -> None:
        register(
            _measure_then_name("never"),
            operation="buffer_layer",
            stack="toy",
            engine="toy-buffer",
            requirement=lambda: Unavailable(
                "licence_tier",
                "toy-buffer needs the Advanced tier; this machine has Basic",
                "ask for an Advanced licence or use the opensource stack",
            ),
        )
        register(
            _measure_then_name("never"),
            operation="clip_layer",
            stack="toy",
            engine="toy-clip",
            requirement=lambda: Unavailable(
                "online_only",
                "toy-clip runs only as an online service",
                "sign in to the service, or use the opensource stack",
            ),
        )
        register(
            _measure_then_name("toy-fast"),
            operation="measure_area",
            stack="toy",
            engine="toy-fast",
            preference=10,
            eligible=lambda ctx: (
                "toy-fast needs a projected CRS" if ctx.inputs["input_path"].crs_is_geographic else None
            ),
        )
        register(_measure_then_name("toy-slow"), operation="measure_area", stack="toy", engine="toy-slow")


def make(workspace: Path, **env: str) -> MapSmith:
    return MapSmith({"MAPSMITH_WORKSPACE": str(workspace), **env}, extra_plugins=[("toy", ToyStack())])


def test_an_unknown_stack_is_a_startup_error_listing_the_known_ones(workspace: Path) -> None:
    with pytest.raises(ConfigurationError) as err:
        make(workspace, MAPSMITH_STACK="arcgis")
    assert err.value.code == "UNKNOWN_STACK"
    assert err.value.evidence["known"] == ["esri", "opensource", "qgis", "sedona", "toy"]


@pytest.mark.parametrize(
    ("operation", "code", "fragment"),
    [
        ("measure_length_of_coastline", None, None),  # not in the catalog at all: see below
        ("convert_format", "OPERATION_MISSING", "has no implementation"),
        ("buffer_layer", "LICENCE_TIER", "Advanced"),
        ("clip_layer", "ONLINE_ONLY", "online service"),
    ],
)
def test_each_reason_an_operation_cannot_run_has_its_own_code(workspace: Path, operation, code, fragment) -> None:
    app = make(workspace, MAPSMITH_STACK="toy")
    if code is None:
        with pytest.raises(Exception) as unknown:
            app.run(operation, {})
        assert getattr(unknown.value, "code", None) == "UNKNOWN_OPERATION"
        return
    # the input does not even exist: availability is decided before any file is touched
    with pytest.raises(OperationUnavailable) as err:
        app.run(operation, app.host.contracts[operation].examples[0]["arguments"])
    assert err.value.code == code
    assert fragment in err.value.message
    assert err.value.hint


def test_a_stack_missing_on_this_machine_says_so_with_its_fix(workspace: Path) -> None:
    app = make(workspace, MAPSMITH_STACK="qgis")
    avail = app.router.availability("qgis")
    if avail.available:
        pytest.skip("QGIS is installed here")
    with pytest.raises(OperationUnavailable) as err:
        app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    assert err.value.code == "STACK_UNAVAILABLE"
    assert err.value.hint == avail.fix


def test_a_substitute_runs_only_when_allowed_and_is_disclosed(workspace: Path) -> None:
    write_layer(workspace / "sq.gpkg", [box(0, 0, 1000, 1000)], "EPSG:6933", id=[1])
    args = {"input_path": "sq.gpkg", "output_path": "sq.parquet"}
    with pytest.raises(OperationUnavailable):
        make(workspace, MAPSMITH_STACK="toy").run("convert_format", args)
    result = make(workspace, MAPSMITH_STACK="toy", MAPSMITH_FALLBACK_STACK="opensource").run("convert_format", args)
    assert result.engine["stack"] == "opensource" and result.engine["name"] == "geopandas"
    assert result.warnings[0]["code"] == "SUBSTITUTED_ENGINE"
    record = manifest(workspace / "sq.parquet")
    substitution = record["x-mapsmith:engine_choice"]["substitution"]
    assert substitution == {
        "preferred_stack": "toy",
        "outcome": "missing",
        "code": "OPERATION_MISSING",
        "reason": "the toy stack has no implementation of convert_format",
        "substitute_stack": "opensource",
    }
    assert record["engine"]["name"] == "geopandas"


def test_engine_choice_follows_eligibility_and_is_recorded(workspace: Path) -> None:
    # 1 km square in EASE-Grid 2.0 (projected): the preferred engine takes it. The same square in
    # lon/lat is not eligible for it, so the other engine runs and the record says why.
    write_layer(workspace / "proj.gpkg", [box(0, 0, 1000, 1000)], "EPSG:6933", id=[1])
    write_layer(workspace / "geo.gpkg", [box(10, 45, 10.01, 45.01)], "EPSG:4326", id=[1])
    app = make(workspace, MAPSMITH_STACK="toy")
    fast = app.run("measure_area", {"input_path": "proj.gpkg", "output_path": "a.gpkg"})
    assert fast.engine["name"] == "toy-fast"
    assert fast.answer["total_area_m2"] == pytest.approx(1_000_000, rel=1e-4)
    slow = app.run("measure_area", {"input_path": "geo.gpkg", "output_path": "b.gpkg"})
    assert slow.engine["name"] == "toy-slow"
    choice = manifest(workspace / "b.gpkg")["x-mapsmith:engine_choice"]
    assert choice["passed_over"] == [{"engine": "toy-fast", "reason": "toy-fast needs a projected CRS"}]


class Misspelt:
    @hookimpl
    def mapsmith_register_operation(self, register) -> None:  # missing the final s
        raise AssertionError("never called")


def test_a_misspelt_hook_fails_loudly(workspace: Path) -> None:
    with pytest.raises(PluginError) as err:
        MapSmith({"MAPSMITH_WORKSPACE": str(workspace)}, extra_plugins=[("bad", Misspelt())])
    assert err.value.code == "PLUGIN_UNKNOWN_HOOK"


def _plugin(register_operations):
    class Plugin:
        @hookimpl
        def mapsmith_register_operations(self, register) -> None:
            register_operations(register)

    return Plugin()


@pytest.mark.parametrize(
    ("registration", "error", "code"),
    [
        (
            lambda r: r(print, operation="buffer_layer", stack="nowhere", engine="x"),
            PluginError,
            "PLUGIN_UNKNOWN_STACK",
        ),
        (lambda r: r(print, operation="brand_new", stack="opensource", engine="x"), PluginError, "PLUGIN_NO_CONTRACT"),
        (
            lambda r: r(print, operation="buffer_layer", stack="opensource", engine="geopandas"),
            PluginError,
            "PLUGIN_DUPLICATE",
        ),
        (
            lambda r: r(print, operation="brand_new", stack="opensource", engine="x", contract={"name": "brand_new"}),
            ContractError,
            "CONTRACT_INVALID",
        ),
    ],
)
def test_bad_registrations_are_refused(workspace: Path, registration, error, code) -> None:
    with pytest.raises(error) as err:
        MapSmith({"MAPSMITH_WORKSPACE": str(workspace)}, extra_plugins=[("bad", _plugin(registration))])
    assert err.value.code == code


def test_the_plugin_allow_list_limits_what_loads(workspace: Path) -> None:
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_PLUGINS": "opensource"})
    assert set(app.host.stacks) == {"opensource"}
    assert app.host.plugin_names() == ["opensource"]


def test_every_hook_spec_is_typed_and_documented() -> None:
    specs = [f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("mapsmith_")]
    assert {f.__name__ for f in specs} == {
        "mapsmith_register_stacks",
        "mapsmith_register_operations",
        "mapsmith_register_toolboxes",
    }
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        assert "Called" in doc and ":param register:" in doc and ":return:" in doc, spec.__name__
        hints = typing.get_type_hints(spec, globalns=vars(hookspecs) | _registry_names())
        assert set(hints) == {"register", "return"}, spec.__name__


def _registry_names() -> dict:
    from mapsmith import registry

    return vars(registry)


def test_the_operators_engine_order_goes_first_and_is_recorded(workspace: Path) -> None:
    # The same projected 1 km square: toy-fast by measured preference, toy-slow when MAPSMITH_ENGINE names it.
    write_layer(workspace / "proj.gpkg", [box(0, 0, 1000, 1000)], "EPSG:6933", id=[1])
    app = make(workspace, MAPSMITH_STACK="toy", MAPSMITH_ENGINE="toy-slow")
    slow = app.run("measure_area", {"input_path": "proj.gpkg", "output_path": "a.gpkg"})
    assert slow.engine["name"] == "toy-slow"
    assert slow.answer["total_area_m2"] == pytest.approx(1_000_000, rel=1e-4)
    choice = manifest(workspace / "a.gpkg")["x-mapsmith:engine_choice"]
    assert choice == {"stack": "toy", "engine": "toy-slow", "preferred_by": "MAPSMITH_ENGINE=toy-slow"}
    # the clean twin: without the variable the measured order stands and nothing is claimed
    fast = make(workspace, MAPSMITH_STACK="toy").run(
        "measure_area", {"input_path": "proj.gpkg", "output_path": "b.gpkg"}
    )
    assert fast.engine["name"] == "toy-fast"
    assert manifest(workspace / "b.gpkg")["x-mapsmith:engine_choice"] == {"stack": "toy", "engine": "toy-fast"}


def test_a_named_engine_that_cannot_take_the_input_is_passed_over_with_its_reason(workspace: Path) -> None:
    write_layer(workspace / "geo.gpkg", [box(10, 45, 10.01, 45.01)], "EPSG:4326", id=[1])
    app = make(workspace, MAPSMITH_STACK="toy", MAPSMITH_ENGINE="toy-fast")
    result = app.run("measure_area", {"input_path": "geo.gpkg", "output_path": "c.gpkg"})
    assert result.engine["name"] == "toy-slow"
    choice = manifest(workspace / "c.gpkg")["x-mapsmith:engine_choice"]
    assert choice["passed_over"] == [{"engine": "toy-fast", "reason": "toy-fast needs a projected CRS"}]
    assert "preferred_by" not in choice  # toy-slow was not the variable's choice


def test_an_unknown_engine_name_is_a_startup_error_listing_the_known_ones(workspace: Path) -> None:
    with pytest.raises(ConfigurationError) as err:
        make(workspace, MAPSMITH_ENGINE="duckdb, postgis")
    assert err.value.code == "UNKNOWN_ENGINE"
    assert err.value.evidence["unknown"] == ["postgis"]
    assert {"duckdb", "geopandas", "sedonadb", "toy-fast", "toy-slow"} <= set(err.value.evidence["known"])
    assert "duckdb" in err.value.hint
    # the clean twin: known names in any spacing start the service
    assert make(workspace, MAPSMITH_ENGINE=" duckdb , geopandas").router.preferred_engines == ("duckdb", "geopandas")
