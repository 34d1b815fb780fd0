"""``PluginHost.register_experimental``: an operation added at run time (an agent's proposal) is experimental.

It is validated like any plugin contract, may not take a name in use, records the origin it was given in
every manifest, and can be taken out again; nothing else can be taken out that way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point, Polygon

from conftest import published_schema_errors
from layers import manifest, read, write_layer
from mapsmith.app import MapSmith
from mapsmith.errors import ContractError, PluginError

NAME = "count_coordinates"
CODE = b"def count_coordinates(ctx): ...\n"
ORIGIN = {
    "name": "proposal-count-coordinates",
    "version": "1",
    "code_sha256": hashlib.sha256(CODE).hexdigest(),
    "source": "proposals/count_coordinates/operation.py",
}
CONTRACT: dict[str, Any] = {
    "name": NAME,
    "summary": "Add a coordinate_count field with the number of stored coordinates of each feature.",
    "category": "measurement",
    "status": "available",
    "distinguishes": "Counts stored coordinates and measures nothing on the ground, unlike measure_length.",
    "crs_effect": "preserves",
    "needs_projected_crs": False,
    "checks": ["crs_present", "crs_matches", "feature_count_exact"],
    "datasets": [{"name": "input_path", "kind": "vector", "description": "The features to count."}],
    "output": {
        "kind": "dataset:vector",
        "argument": "output_path",
        "geometry_types": ["same"],
        "feature_count": "equal",
        "formats": [".gpkg"],
    },
    "examples": [
        {"description": "Coordinates of roads", "arguments": {"input_path": "r.gpkg", "output_path": "c.gpkg"}}
    ],
}


def count_coordinates(ctx: Any) -> None:
    import geopandas as gpd
    import shapely

    gdf = gpd.read_file(ctx.paths["input_path"])
    ctx.set_engine("shapely", shapely.__version__)
    gdf["coordinate_count"] = shapely.get_num_coordinates(gdf.geometry.values).astype("int64")
    gdf.to_file(ctx.temp_output, layer=ctx.output_path.stem, driver="GPKG")


@pytest.fixture
def app(workspace: Path) -> MapSmith:
    return MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_QGIS_ALGORITHMS": "0"})


def test_a_registered_proposal_is_experimental_listed_run_and_recorded(workspace: Path, app: MapSmith) -> None:
    before = len(app.host.contracts.loaded())
    contract = app.host.register_experimental(count_coordinates, CONTRACT, ORIGIN)

    assert contract.maturity == "experimental" and contract.name == NAME
    assert len(app.host.contracts.loaded()) == before + 1
    listed = {e["operation"]: e for e in app.list_operations()}
    assert listed[NAME]["maturity"] == "experimental"
    assert listed[NAME]["plugin"] == {
        "distribution": "proposal-count-coordinates",
        "version": "1",
        "code_sha256": ORIGIN["code_sha256"],
    }

    # by hand: a point has 1 coordinate, a 3-vertex line 3, a triangle's closed ring 4
    triangle = Polygon([(0, 0), (10, 0), (0, 10)])
    write_layer(workspace / "a.gpkg", [Point(1, 1), LineString([(0, 0), (5, 0), (5, 5)]), triangle], "EPSG:32633")
    result = app.run(NAME, {"input_path": "a.gpkg", "output_path": "counted.gpkg"})

    assert read(workspace / "counted.gpkg")["coordinate_count"].tolist() == [1, 3, 4]
    assert [w["code"] for w in result.warnings] == ["EXPERIMENTAL_OPERATION"]
    record = manifest(workspace / "counted.gpkg")
    assert published_schema_errors(record) == []
    assert record["x-mapsmith:plugin"] == {
        "plugin": "proposal-count-coordinates",
        "distribution": "proposal-count-coordinates",
        "version": "1",
        "code_sha256": ORIGIN["code_sha256"],
        "source": "proposals/count_coordinates/operation.py",
        "maturity": "experimental",
    }


def test_a_proposal_never_replaces_an_operation(app: MapSmith) -> None:
    for taken in ("buffer_layer", "measure_area"):
        with pytest.raises(PluginError) as refused:
            app.host.register_experimental(count_coordinates, {**CONTRACT, "name": taken}, ORIGIN)
        assert refused.value.code == "PLUGIN_NAME_TAKEN"
        assert refused.value.evidence == {"operation": taken, "existing": "stable"}
        assert "list_operations" in (refused.value.hint or "")
    assert app.host.contracts["buffer_layer"].maturity == "stable"  # untouched
    assert all(i.maturity == "stable" for i in app.host.implementations["buffer_layer"])

    # clean twin: a free name is taken, once; the second time it is in use
    app.host.register_experimental(count_coordinates, CONTRACT, ORIGIN)
    with pytest.raises(PluginError) as again:
        app.host.register_experimental(count_coordinates, CONTRACT, ORIGIN)
    assert again.value.code == "PLUGIN_NAME_TAKEN" and again.value.evidence["existing"] == "experimental"


def test_a_proposal_contract_is_validated_like_a_plugin_contract(app: MapSmith) -> None:
    broken = {k: v for k, v in CONTRACT.items() if k != "summary"}
    with pytest.raises(ContractError) as refused:
        app.host.register_experimental(count_coordinates, broken, ORIGIN)
    assert refused.value.code == "CONTRACT_INVALID" and "summary" in refused.value.message

    unitless = {
        **CONTRACT,
        "parameters": [{"name": "tolerance", "type": "number", "unit": "metre", "description": "x"}],
    }
    with pytest.raises(ContractError):
        app.host.register_experimental(count_coordinates, unitless, ORIGIN)  # unit but no _meters suffix

    with pytest.raises(ContractError) as claims:
        app.host.register_experimental(count_coordinates, {**CONTRACT, "maturity": "stable"}, ORIGIN)
    assert claims.value.code == "CONTRACT_DECLARES_MATURITY"
    assert NAME not in app.host.contracts  # nothing half-registered


@pytest.mark.parametrize(
    ("origin", "problem"),
    [
        ({k: v for k, v in ORIGIN.items() if k != "version"}, "version must be a non-empty string"),
        ({**ORIGIN, "code_sha256": "ABC"}, "code_sha256 must be 64 lowercase hexadecimal characters"),
        ({**ORIGIN, "source": "/home/agent/op.py"}, "source must be a path relative to the workspace"),
        ({**ORIGIN, "source": "../elsewhere/op.py"}, "source must be a path relative to the workspace"),
        ({**ORIGIN, "maturity": "stable"}, "unknown keys ['maturity']"),
    ],
)
def test_a_proposal_origin_is_checked(app: MapSmith, origin: dict[str, Any], problem: str) -> None:
    with pytest.raises(PluginError) as refused:
        app.host.register_experimental(count_coordinates, CONTRACT, origin)
    assert refused.value.code == "PLUGIN_ORIGIN_INVALID"
    assert any(p.startswith(problem) for p in refused.value.evidence["problems"])
    assert NAME not in app.host.contracts


def test_only_a_run_time_registration_can_be_removed(app: MapSmith) -> None:
    with pytest.raises(PluginError) as refused:
        app.host.remove_experimental("buffer_layer")
    assert refused.value.code == "PLUGIN_NOT_REMOVABLE"
    assert "buffer_layer" in app.host.contracts

    app.host.register_experimental(count_coordinates, CONTRACT, ORIGIN)
    app.host.remove_experimental(NAME)
    assert NAME not in app.host.contracts and NAME not in app.host.implementations
    # and the name is free again: a corrected proposal can take it
    assert app.host.register_experimental(count_coordinates, CONTRACT, {**ORIGIN, "version": "2"}).maturity == (
        "experimental"
    )
