"""The loader adds the layer and GeoJSON arguments by format and by dataset role, never per operation."""

from __future__ import annotations

from typing import Any

import pytest

from mapsmith.contracts import load_builtin_contracts, parse_contract
from mapsmith.errors import ArgumentError, ContractError


@pytest.fixture(scope="module")
def contracts() -> dict[str, Any]:
    return load_builtin_contracts()


def test_options_follow_the_output_formats(contracts: dict[str, Any]) -> None:
    buffer = contracts["buffer_layer"].argument_names()  # formats .gpkg .parquet .fgb .geojson
    assert buffer[-3:] == ["output_layer", "geojson_keep_crs", "feature_collection_members"]
    clip_raster = contracts["clip_raster"]  # formats .tif: no layer, no GeoJSON; its vector mask keeps a layer
    assert clip_raster.output_formats == (".tif",)
    names = clip_raster.argument_names()
    assert "output_layer" not in names and "geojson_keep_crs" not in names and "mask_layer" in names


def test_each_second_dataset_gets_its_role_layer(contracts: dict[str, Any]) -> None:
    assert contracts["clip_layer"].dataset_layer_arguments() == {"mask_layer": "mask_path"}
    assert contracts["count_in_polygons"].dataset_layer_arguments() == {"points_layer": "points_path"}
    assert contracts["spatial_join"].dataset_layer_arguments() == {"join_layer": "join_path"}
    assert contracts["merge_layers"].dataset_layer_arguments() == {}  # a list: input_paths, no layers one by one
    assert contracts["buffer_layer"].dataset_layer_arguments() == {}  # input_path keeps its declared `layer`
    assert "like_layer" not in contracts["euclidean_distance"].argument_names()  # a raster has no layers


def test_the_arguments_are_checked(contracts: dict[str, Any]) -> None:
    clip = contracts["clip_layer"]
    base = {"input_path": "a.gpkg", "mask_path": "m.gpkg", "output_path": "o.gpkg"}
    checked = clip.check_arguments({**base, "mask_layer": "north", "output_layer": "clipped_2024"})
    assert (checked["mask_layer"], checked["output_layer"]) == ("north", "clipped_2024")
    assert "geojson_keep_crs" not in clip.check_arguments(base)  # absent stays absent: records unchanged
    with pytest.raises(ArgumentError) as wrong:
        clip.check_arguments({**base, "geojson_keep_crs": "yes"})
    assert wrong.value.code == "WRONG_ARGUMENT_TYPE"
    with pytest.raises(ArgumentError) as long_name:
        clip.check_arguments({**base, "output_layer": "x" * 64})
    assert long_name.value.code == "OUTPUT_LAYER_NAME_INVALID"
    assert clip.check_arguments({**base, "output_layer": "x" * 63})["output_layer"] == "x" * 63


def test_a_contract_declaring_a_loader_argument_is_refused(contracts: dict[str, Any]) -> None:
    raw = dict(contracts["clip_layer"].raw)
    raw["parameters"] = [*raw.get("parameters", []), {"name": "mask_layer", "type": "string", "description": "x"}]
    with pytest.raises(ContractError) as clash:
        parse_contract(raw, source="clip_layer.toml")
    assert "mask_layer" in clash.value.message
