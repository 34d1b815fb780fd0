"""convert_format with a table in: CSV, JSON records, Parquet or an Excel sheet written as another table.

A table has no geometry, so geometry_as is not asked for; a layer output or geometry_as='wkt'/'xy' is
refused with the way round (table_to_points). A vector input keeps every layer precondition (its CRS).
Expected values are worked out by hand from the three rows below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point

from layers import manifest, write_layer
from mapsmith.errors import MapSmithError
from mapsmith.provenance.validator import validate_manifest

CSV = "id,name,depth\n1,Alpha,12.5\n2,Bravo,30.0\n3,Charlie,7.25\n"


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "wells.csv").write_text(CSV, "utf-8")
    return workspace


def test_csv_to_xlsx_keeps_values_and_types(app: Any, ws: Path) -> None:
    import pyogrio

    result = app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.xlsx"})
    # Read back by GDAL, not by the writer: one sheet named after the file, integers, text, decimals.
    assert [name for name, _ in pyogrio.list_layers(ws / "wells.xlsx")] == ["wells"]
    frame = pyogrio.read_dataframe(ws / "wells.xlsx", layer="wells", read_geometry=False)
    assert frame["id"].tolist() == [1, 2, 3] and str(frame["id"].dtype).startswith("int")
    assert frame["name"].tolist() == ["Alpha", "Bravo", "Charlie"]
    assert frame["depth"].tolist() == [12.5, 30.0, 7.25] and str(frame["depth"].dtype) == "float64"
    record = manifest(ws / "wells.xlsx")
    assert validate_manifest(record) == []
    assert record["output"]["crs"] is None
    assert record["parameters"]["x-mapsmith:table_columns"] == [
        {"name": "id", "type": "int64"},
        {"name": "name", "type": "string"},
        {"name": "depth", "type": "double"},
    ]
    checks = {c["name"]: c["passed"] for c in record["verification"]}
    assert checks["feature_count_exact"] and checks["x-mapsmith:row_count"]
    assert result.engine["name"] == "pyarrow"


def test_csv_to_json_is_an_array_of_records(app: Any, ws: Path) -> None:
    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.json"})
    assert json.loads((ws / "wells.json").read_text("utf-8")) == [
        {"id": 1, "name": "Alpha", "depth": 12.5},
        {"id": 2, "name": "Bravo", "depth": 30.0},
        {"id": 3, "name": "Charlie", "depth": 7.25},
    ]
    assert validate_manifest(manifest(ws / "wells.json")) == []


def test_xlsx_back_to_csv_and_to_parquet(app: Any, ws: Path) -> None:
    import pyarrow.parquet as pq

    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.xlsx"})
    app.run("convert_format", {"input_path": "wells.xlsx", "output_path": "again.csv"})
    assert (ws / "again.csv").read_text("utf-8").splitlines() == [
        '"id","name","depth"',
        '1,"Alpha",12.5',
        '2,"Bravo",30',
        '3,"Charlie",7.25',
    ]
    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.parquet"})
    table = pq.read_table(ws / "wells.parquet")
    assert table.to_pylist()[2] == {"id": 3, "name": "Charlie", "depth": 7.25}
    assert b"geo" not in (table.schema.metadata or {})  # a plain Parquet table, not GeoParquet


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"output_path": "wells.gpkg"}, "TABLE_INPUT_LAYER_OUTPUT"),
        ({"output_path": "wells.xlsx", "geometry_as": "wkt"}, "GEOMETRY_AS_NOT_APPLICABLE"),
        ({"output_path": "wells.csv.xlsx", "geometry_as": "xy"}, "GEOMETRY_AS_NOT_APPLICABLE"),
    ],
)
def test_a_table_has_no_geometry_to_write(app: Any, ws: Path, extra: dict[str, Any], code: str) -> None:
    with pytest.raises(MapSmithError) as err:
        app.run("convert_format", {"input_path": "wells.csv", **extra})
    assert err.value.code == code and "table_to_points" in (err.value.hint or "")
    assert not (ws / extra["output_path"]).exists()
    # The clean twin: geometry_as='none' (or left out) into a table format is answered.
    app.run("convert_format", {"input_path": "wells.csv", "geometry_as": "none", "output_path": "ok.xlsx"})
    assert (ws / "ok.xlsx").exists()


def test_a_layer_without_a_crs_is_still_refused(app: Any, workspace: Path) -> None:
    # Taking tables must not loosen the layer preconditions: a layer with no CRS stays CRS_REQUIRED.
    write_layer(workspace / "nocrs.gpkg", [Point(1, 2)], None, id=[1])
    with pytest.raises(MapSmithError) as err:
        app.run("convert_format", {"input_path": "nocrs.gpkg", "geometry_as": "wkt", "output_path": "n.csv"})
    assert err.value.code == "CRS_REQUIRED"
    write_layer(workspace / "crs.gpkg", [Point(1, 2)], "EPSG:32633", id=[1])
    app.run("convert_format", {"input_path": "crs.gpkg", "geometry_as": "wkt", "output_path": "c.csv"})
    assert (workspace / "c.csv").read_text("utf-8").splitlines()[1] == '"POINT (1 2)",1'


def test_a_plain_parquet_and_a_json_array_are_table_inputs(app: Any, ws: Path) -> None:
    # Both written by MapSmith from the CSV above, then read back as inputs: the three rows by hand.
    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.parquet"})
    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.json"})
    app.run("convert_format", {"input_path": "wells.parquet", "output_path": "from_parquet.csv"})
    app.run("convert_format", {"input_path": "wells.json", "output_path": "from_json.csv"})
    expected = ['"id","name","depth"', '1,"Alpha",12.5', '2,"Bravo",30', '3,"Charlie",7.25']
    assert (ws / "from_parquet.csv").read_text("utf-8").splitlines() == expected
    assert (ws / "from_json.csv").read_text("utf-8").splitlines() == expected
    for name, source in (("from_parquet.csv", "wells.parquet"), ("from_json.csv", "wells.json")):
        record = manifest(ws / name)
        assert validate_manifest(record) == []
        assert record["inputs"][0]["path"] == source and record["inputs"][0]["crs"] is None
    # table_to_points takes them too: x/y columns by name
    (ws / "sites.json").write_text(json.dumps([{"id": 1, "x": 500.0, "y": 600.0}, {"id": 2, "x": 7.0, "y": 8.0}]))
    app.run(
        "table_to_points",
        {"input_path": "sites.json", "x_field": "x", "y_field": "y", "crs": "EPSG:27700", "output_path": "sites.gpkg"},
    )
    import geopandas as gpd

    points = gpd.read_file(ws / "sites.gpkg")
    assert [(p.x, p.y) for p in points.geometry] == [(500.0, 600.0), (7.0, 8.0)]


def test_a_table_where_a_layer_belongs_is_refused_and_geojson_stays_a_layer(app: Any, ws: Path) -> None:
    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.parquet"})
    with pytest.raises(MapSmithError) as table:
        app.run("buffer_layer", {"input_path": "wells.parquet", "distance_meters": 5, "output_path": "b.gpkg"})
    assert table.value.code == "DATASET_KIND_MISMATCH" and "table_to_points" in (table.value.hint or "")
    # the clean twin: a GeoJSON object in a .json file is still a layer
    collection = {
        "type": "FeatureCollection",
        "features": [
            {"type": "Feature", "properties": {"id": 1}, "geometry": {"type": "Point", "coordinates": [1, 2]}}
        ],
    }
    (ws / "one.json").write_text(json.dumps(collection), "utf-8")
    app.run("convert_format", {"input_path": "one.json", "output_path": "one.gpkg"})
    assert app.run("describe_dataset", {"input_path": "one.gpkg"}).answer["described"][0]["feature_count"] == 1


def test_describe_types_a_table_as_the_operations_read_it(app: Any, ws: Path) -> None:
    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.parquet"})
    app.run("convert_format", {"input_path": "wells.csv", "output_path": "wells.json"})
    for name in ("wells.csv", "wells.parquet", "wells.json"):
        described = app.run("describe_dataset", {"input_path": name}).answer["described"][0]
        assert described["kind"] == "table" and described["feature_count"] == 3
        details = {d["name"]: (d["type"], d["samples"]) for d in described["field_details"]}
        assert details == {
            "id": ("int64", [1, 2, 3]),
            "name": ("string", ["Alpha", "Bravo", "Charlie"]),
            "depth": ("double", [12.5, 30.0, 7.25]),
        }, name
