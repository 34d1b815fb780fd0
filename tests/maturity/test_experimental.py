"""A plugin's operation is experimental: the catalogue says so, its results warn, its manifests name its code.

MapSmith's own operations are stable and carry none of it (the clean twin of every check here). The hello
fixture plugin is installed for real (``conftest.hello_site``) and found through the entry-point group.
"""

from __future__ import annotations

import json
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Polygon

from conftest import published_schema_errors
from layers import manifest, read, write_layer
from mapsmith.app import MapSmith
from mapsmith.contracts import parse_contract
from mapsmith.errors import ContractError, MapSmithError
from mapsmith.hookspecs import hookimpl

OPERATION = "count_vertices"
DISTRIBUTION = "mapsmith-plugin-hello"
TRIANGLE = Polygon([(500_000, 5_000_000), (500_100, 5_000_000), (500_000, 5_000_100)])
HOLED = Polygon(
    [(500_200, 5_000_000), (500_300, 5_000_000), (500_300, 5_000_100), (500_200, 5_000_100)],
    [[(500_225, 5_000_025), (500_275, 5_000_025), (500_275, 5_000_075), (500_225, 5_000_075)]],
)


def _app(workspace: Path, **env: str) -> MapSmith:
    return MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_QGIS_ALGORITHMS": "0", **env})


def _warning_codes(result: Any) -> list[str]:
    return [w["code"] for w in result.warnings]


def test_the_plugin_operation_is_experimental_with_its_identity(
    workspace: Path, hello: Path, hello_digest: str
) -> None:
    app = _app(workspace)

    contract = app.host.contracts[OPERATION]
    assert contract.maturity == "experimental"
    assert contract.origin is not None
    assert contract.origin["distribution"].replace("_", "-").lower() == DISTRIBUTION
    assert contract.origin["version"] == "0.1.0"
    assert contract.origin["code_sha256"] == hello_digest
    assert contract.promotion is None
    # the plugin's engine carries the same decision; server_info names the code too
    (impl,) = app.host.implementations_for(OPERATION, "opensource")
    assert impl.maturity == "experimental" and impl.origin == contract.origin
    plugins = {p["plugin"]: p for p in app.server_info()["plugins"]}
    assert plugins["hello"]["code_sha256"] == hello_digest
    assert "code_sha256" not in plugins["opensource"]  # MapSmith's own: stable, no identity to record

    # clean twin: every operation MapSmith ships is stable, and so is every engine of it
    own = [c for name, c in app.host.contracts.loaded().items() if name != OPERATION]
    assert own and {c.maturity for c in own} == {"stable"}
    assert all(c.origin is None for c in own)
    engines = [i for name, impls in app.host.implementations.loaded().items() if name != OPERATION for i in impls]
    assert {i.maturity for i in engines} == {"stable"}

    listed = {entry["operation"]: entry for entry in app.list_operations()}
    assert listed[OPERATION]["maturity"] == "experimental"
    assert listed[OPERATION]["plugin"] == {
        "distribution": contract.origin["distribution"],
        "version": "0.1.0",
        "code_sha256": hello_digest,
    }
    assert listed["buffer_layer"]["maturity"] == "stable" and "plugin" not in listed["buffer_layer"]
    assert {e["maturity"] for name, e in listed.items() if name != OPERATION} == {"stable"}


def test_a_result_of_the_plugin_warns_and_its_manifest_names_the_code(
    workspace: Path, hello: Path, hello_digest: str
) -> None:
    write_layer(workspace / "shapes.gpkg", [TRIANGLE, HOLED], "EPSG:32610", name=["triangle", "holed"])
    app = _app(workspace)

    result = app.run(OPERATION, {"input_path": "shapes.gpkg", "output_path": "shapes_vertices.gpkg"})

    # the plugin's answer is still the right one: 3 corners + closing point; 5 + 5 for the holed square
    assert result.answer == {"feature_count": 2, "total_vertex_count": 14}
    assert read(workspace / "shapes_vertices.gpkg").set_index("name")["vertex_count"].to_dict() == {
        "triangle": 4,
        "holed": 10,
    }
    assert result.status == "ok_with_warnings"
    (warning,) = [w for w in result.warnings if w["code"] == "EXPERIMENTAL_OPERATION"]
    assert OPERATION in warning["message"] and "experimental" in warning["message"]
    # the hint names only what an agent can do with MapSmith's own tools
    assert "list_operations" in warning["hint"] and "get_provenance" in warning["hint"]

    record = manifest(workspace / "shapes_vertices.gpkg")
    assert published_schema_errors(record) == []
    assert record["x-mapsmith:plugin"] == {
        "plugin": "hello",
        "distribution": app.host.contracts[OPERATION].origin["distribution"],  # type: ignore[index]
        "version": "0.1.0",
        "code_sha256": hello_digest,
        "maturity": "experimental",
    }
    assert [w["code"] for w in record["x-mapsmith:warnings"]] == ["EXPERIMENTAL_OPERATION"]


def test_a_failed_run_of_the_plugin_records_its_identity_too(workspace: Path, hello: Path, hello_digest: str) -> None:
    write_layer(workspace / "marked.gpkg", [TRIANGLE], "EPSG:32610", vertex_count=[99])
    app = _app(workspace)

    with pytest.raises(MapSmithError) as refused:
        app.run(OPERATION, {"input_path": "marked.gpkg", "output_path": "out.gpkg"})

    assert refused.value.code == "FIELD_EXISTS"
    failure = json.loads((workspace / "out.gpkg.failed.provenance.json").read_text("utf-8"))
    assert published_schema_errors(failure) == []
    assert failure["x-mapsmith:plugin"]["code_sha256"] == hello_digest
    assert failure["x-mapsmith:plugin"]["maturity"] == "experimental"


def test_a_builtin_result_carries_no_warning_and_no_plugin_identity(workspace: Path, hello: Path) -> None:
    # Clean twin of the test above, with the plugin installed: a stable operation on the same data.
    write_layer(workspace / "shapes.gpkg", [TRIANGLE, HOLED], "EPSG:32610", name=["triangle", "holed"])
    app = _app(workspace)

    result = app.run("measure_area", {"input_path": "shapes.gpkg", "output_path": "areas.gpkg"})

    assert "EXPERIMENTAL_OPERATION" not in _warning_codes(result)
    record = manifest(workspace / "areas.gpkg")
    assert "x-mapsmith:plugin" not in record
    assert published_schema_errors(record) == []


def test_a_contract_cannot_declare_its_own_maturity(hello: Path) -> None:
    raw = tomllib.loads((hello / "count_vertices.toml").read_text("utf-8"))
    for key, value in (("maturity", "stable"), ("origin", {"distribution": "mapsmith"}), ("promotion", {})):
        with pytest.raises(ContractError) as refused:
            parse_contract({**raw, key: value}, source="count_vertices.toml")
        assert refused.value.code == "CONTRACT_DECLARES_MATURITY"
        assert refused.value.evidence["keys"] == [key]
        assert "mapsmith plugin promote" in (refused.value.hint or "")
    # clean twin: the same contract without the key parses, and the host's default is what it gets
    assert parse_contract(raw, source="count_vertices.toml").maturity == "stable"


class _InProcess:
    """A plugin handed to MapSmith in process: it adds one operation and an engine for buffer_layer."""

    def __init__(self, contract: dict[str, Any]) -> None:
        self.contract = contract

    @hookimpl
    def mapsmith_register_operations(self, register: Any) -> None:
        register(lambda ctx: None, operation="copy_of_hello", stack="opensource", engine="e", contract=self.contract)
        # A very high preference: it must still not displace MapSmith's own engine for buffer_layer.
        register(lambda ctx: None, operation="buffer_layer", stack="opensource", engine="sneaky", preference=10_000)


def test_maturity_is_decided_by_the_host_not_by_the_plugin(workspace: Path, hello: Path) -> None:
    raw = tomllib.loads((hello / "count_vertices.toml").read_text("utf-8"))
    plugin = _InProcess({**raw, "name": "copy_of_hello"})
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace)}, extra_plugins=[("opensource_lookalike", plugin)])

    assert app.host.contracts["copy_of_hello"].maturity == "experimental"
    engines = app.host.implementations_for("buffer_layer", "opensource")
    # MapSmith's own engines (GeoPandas, and DuckDB for points) first, whatever the preference
    assert [(i.engine, i.maturity) for i in engines] == [
        ("duckdb", "stable"),
        ("geopandas", "stable"),
        ("sneaky", "experimental"),
    ]
    assert engines[-1].preference == 10_000

    # The callback a plugin is handed cannot be told where the registration came from.
    class Spoof:
        @hookimpl
        def mapsmith_register_operations(self, register: Any) -> None:
            register(lambda ctx: None, operation="buffer_layer", stack="opensource", engine="x", provenance=None)

    with pytest.raises(TypeError):
        MapSmith({"MAPSMITH_WORKSPACE": str(workspace)}, extra_plugins=[("spoof", Spoof())])

    # A module that merely has the name of one of MapSmith's own stacks is not MapSmith's own.
    import mapsmith_opensource

    fake = types.ModuleType("mapsmith_opensource")
    fake.mapsmith_register_operations = plugin.mapsmith_register_operations  # type: ignore[attr-defined]
    assert sys.modules["mapsmith_opensource"] is mapsmith_opensource and fake is not mapsmith_opensource
    app = MapSmith(
        {"MAPSMITH_WORKSPACE": str(workspace)},
        extra_plugins=[("opensource", mapsmith_opensource), ("lookalike", fake)],
        load_entry_points=False,
    )
    assert app.host.contracts["copy_of_hello"].maturity == "experimental"


def test_mapsmiths_own_stack_module_is_stable_in_process_too(workspace: Path) -> None:
    # Clean twin of the lookalike: the very module the mapsmith distribution declares.
    import mapsmith_opensource

    app = MapSmith(
        {"MAPSMITH_WORKSPACE": str(workspace)},
        extra_plugins=[("opensource", mapsmith_opensource)],
        load_entry_points=False,
    )
    engines = [i for impls in app.host.implementations.loaded().values() for i in impls]
    assert engines and {i.maturity for i in engines} == {"stable"}
