"""describe_dataset's field details: the type the engine reads, null counts, a few sample values.

The layers are built here, so every expected type, count and sample is known before the code ran:
GDAL's types for a GeoPackage (Integer64, String, Integer(Boolean), Real), Arrow's for GeoParquet
with a struct and a list (spelled out, with each leaf by its full path).
"""

from __future__ import annotations

from pathlib import Path

import geopandas as gpd
from shapely.geometry import Point

from mapsmith_opensource.field_profile import SAMPLE_CHARS, SAMPLE_VALUES


def details(answer: dict, layer: int = 0) -> dict[str, dict]:
    return {f["name"]: f for f in answer["described"][layer]["field_details"]}


def test_geopackage_fields_types_nulls_and_samples(app, workspace: Path) -> None:
    long_text = "x" * 100
    frame = gpd.GeoDataFrame(
        {
            "id": [1, 2, 3, 4, 5, 6, 7, 8],
            # one null; eight values, seven distinct non-null ones: the first five in file order are shown
            "name": ["a", None, "a", "b", "c", "d", "e", "f"],
            "flag": [True, False, True, True, False, True, True, True],
            "note": [long_text, "short", None, None, "short", None, None, None],
            "depth_m": [1.5, 2.25, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5],
        },
        geometry=[Point(i, i) for i in range(8)],
        crs="EPSG:32632",
    )
    frame.to_file(workspace / "wells.gpkg", layer="wells", engine="pyogrio")
    answer = app.run("describe_dataset", {"input_path": "wells.gpkg"}).answer
    fields = details(answer)
    assert list(fields) == ["id", "name", "flag", "note", "depth_m"]
    assert fields["id"]["type"] == "Integer64"
    assert fields["id"]["null_count"] == 0 and fields["id"]["samples"] == [1, 2, 3, 4, 5]
    assert fields["name"]["type"] == "String"
    assert fields["name"]["null_count"] == 1
    assert fields["name"]["samples"] == ["a", "b", "c", "d", "e"]
    assert fields["flag"]["type"] == "Integer(Boolean)"
    assert fields["flag"]["samples"] == [True, False]
    assert fields["note"]["null_count"] == 5
    # 100 characters shortened to 79 and an ellipsis (80 in all)
    assert fields["note"]["samples"] == ["x" * (SAMPLE_CHARS - 1) + "…", "short"]
    assert fields["note"]["samples_shortened"] is True
    assert fields["depth_m"]["type"] == "Real" and fields["depth_m"]["samples"] == [1.5, 2.25]
    assert str(SAMPLE_VALUES) in answer["field_details_read"] and str(SAMPLE_CHARS) in answer["field_details_read"]


def test_geoparquet_nested_types_are_spelled_out_with_unique_leaf_paths(app, workspace: Path) -> None:
    frame = gpd.GeoDataFrame(
        {
            "id": [10, 20, 30],
            "address": [{"city": "Bern", "id": 1}, {"city": "Chur", "id": 2}, None],
            "tags": [["well", "deep"], [], None],
        },
        geometry=[Point(0, 0), Point(1, 1), Point(2, 2)],
        crs="EPSG:2056",
    )
    frame.to_parquet(workspace / "nested.parquet")
    fields = details(app.run("describe_dataset", {"input_path": "nested.parquet"}).answer)
    assert list(fields) == ["id", "address", "tags"]
    assert fields["id"]["type"] == "int64"
    assert fields["address"]["type"] == "struct<city: string, id: int64>"
    # the struct's "id" leaf is address.id, never a second "id"
    assert fields["address"]["nested_fields"] == [
        {"path": "address.city", "type": "string"},
        {"path": "address.id", "type": "int64"},
    ]
    assert fields["address"]["null_count"] == 1
    assert fields["address"]["samples"] == ['{"city": "Bern", "id": 1}', '{"city": "Chur", "id": 2}']
    assert fields["tags"]["type"] == "list<element: string>"
    assert fields["tags"]["nested_fields"] == [{"path": "tags[]", "type": "string"}]
    assert fields["tags"]["null_count"] == 1
    assert fields["tags"]["samples"] == ['["well", "deep"]', "[]"]
