"""convert_format to a table: a layer written as CSV/JSON/Parquet/Excel with its geometry as chosen
(none, WKT, x/y), the CRS recorded and stated. Expected values are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point, Polygon

from layers import manifest, write_layer
from mapsmith.errors import MapSmithError
from mapsmith.provenance.validator import validate_manifest


@pytest.fixture
def ws(workspace: Path) -> Path:
    # Two wells in UTM 33N (metres) and the same two in WGS 84 (degrees).
    write_layer(
        workspace / "wells.gpkg",
        [Point(500000.25, 5200000.5), Point(500100, 5200200)],
        "EPSG:32633",
        id=[7, 3],
        name=["Zürich", "Île"],
    )
    write_layer(workspace / "wells_ll.gpkg", [Point(8.5, 47.375), Point(2.25, 48.875)], "EPSG:4326", id=[7, 3])
    write_layer(workspace / "parcels.gpkg", [Polygon([(0, 0), (0, 10), (10, 10), (10, 0)])], "EPSG:32633", id=[1])
    return workspace


def test_xy_columns_in_a_projected_crs_are_x_and_y_first(app: Any, ws: Path) -> None:
    result = app.run("convert_format", {"input_path": "wells.gpkg", "geometry_as": "xy", "output_path": "w.csv"})
    assert (ws / "w.csv").read_text() == '"x","y","id","name"\n500000.25,5200000.5,7,"Zürich"\n500100,5200200,3,"Île"\n'
    record = manifest(ws / "w.csv")
    assert validate_manifest(record) == []
    assert record["output"]["crs"] == "EPSG:32633"
    assert result.notes[-1] == "x/y hold easting and northing in EPSG:32633 (the layer's CRS, not transformed)"
    checks = {c["name"]: c["passed"] for c in record["verification"]}
    assert checks["feature_count_exact"] and checks["x-mapsmith:row_count"] and checks["x-mapsmith:column_types"]
    assert record["engine"]["name"] == "pyarrow"


def test_xy_in_degrees_are_lon_and_lat(app: Any, ws: Path) -> None:
    app.run("convert_format", {"input_path": "wells_ll.gpkg", "geometry_as": "xy", "output_path": "w.json"})
    assert json.loads((ws / "w.json").read_text()) == [
        {"lon": 8.5, "lat": 47.375, "id": 7},
        {"lon": 2.25, "lat": 48.875, "id": 3},
    ]
    assert manifest(ws / "w.json")["output"]["crs"] == "EPSG:4326"


def test_wkt_keeps_full_precision(app: Any, ws: Path) -> None:
    app.run("convert_format", {"input_path": "wells.gpkg", "geometry_as": "wkt", "output_path": "w.csv"})
    lines = (ws / "w.csv").read_text().splitlines()
    assert lines == [
        '"wkt","id","name"',
        '"POINT (500000.25 5200000.5)",7,"Zürich"',
        '"POINT (500100 5200200)",3,"Île"',
    ]


def test_none_drops_the_geometry_and_records_no_crs(app: Any, ws: Path) -> None:
    from mapsmith_opensource.tables import read_table

    result = app.run(
        "convert_format",
        {"input_path": "wells.gpkg", "geometry_as": "none", "output_path": "Wells.xlsx"},
    )
    assert read_table(ws / "Wells.xlsx").to_pylist() == [{"id": 7, "name": "Zürich"}, {"id": 3, "name": "Île"}]
    record = manifest(ws / "Wells.xlsx")
    assert record["output"]["crs"] is None and record["output"]["layer"] == "Wells"
    assert "the layer was in EPSG:32633" in result.notes[-1]


def test_a_plain_parquet_table_when_geometry_as_is_given(app: Any, ws: Path) -> None:
    import pyarrow.parquet as pq

    app.run("convert_format", {"input_path": "wells.gpkg", "geometry_as": "wkt", "output_path": "w.parquet"})
    table = pq.read_table(ws / "w.parquet")
    assert b"geo" not in (table.schema.metadata or {})  # not GeoParquet: a table
    assert table.column("wkt").to_pylist() == ["POINT (500000.25 5200000.5)", "POINT (500100 5200200)"]


def test_xy_from_polygons_is_refused_and_wkt_is_the_clean_twin(app: Any, ws: Path) -> None:
    # GDAL's CSV writer (QGIS's Export as CSV with GEOMETRY=AS_XY) writes a polygon's X and Y as empty
    # cells; MapSmith refuses instead of dropping the position or inventing a centroid.
    with pytest.raises(MapSmithError) as caught:
        app.run("convert_format", {"input_path": "parcels.gpkg", "geometry_as": "xy", "output_path": "p.csv"})
    assert caught.value.code == "TABLE_XY_NEEDS_POINTS"
    assert "centroid_layer" in caught.value.hint
    assert not (ws / "p.csv").exists()
    app.run("convert_format", {"input_path": "parcels.gpkg", "geometry_as": "wkt", "output_path": "p.csv"})
    assert (ws / "p.csv").read_text().splitlines()[1] == '"POLYGON ((0 0, 0 10, 10 10, 10 0, 0 0))",1'


def test_a_table_output_needs_a_geometry_choice(app: Any, ws: Path) -> None:
    with pytest.raises(MapSmithError) as caught:
        app.run("convert_format", {"input_path": "wells.gpkg", "output_path": "w.csv"})
    assert caught.value.code == "TABLE_GEOMETRY_CHOICE_REQUIRED"


def test_geometry_as_on_a_layer_output_is_refused(app: Any, ws: Path) -> None:
    with pytest.raises(MapSmithError) as caught:
        app.run("convert_format", {"input_path": "wells.gpkg", "geometry_as": "wkt", "output_path": "w.fgb"})
    assert caught.value.code == "GEOMETRY_AS_NOT_APPLICABLE"
    # the clean twin: a layer output without it is the GeoPandas copy it always was
    result = app.run("convert_format", {"input_path": "wells.gpkg", "output_path": "w.fgb"})
    assert result.engine["name"] != "pyarrow"


def test_a_file_name_too_long_for_an_excel_sheet_is_refused(app: Any, ws: Path) -> None:
    # the sheet takes the file's name; Excel refuses sheet names over 31 characters
    with pytest.raises(MapSmithError) as caught:
        app.run(
            "convert_format", {"input_path": "wells.gpkg", "geometry_as": "none", "output_path": "w" * 32 + ".xlsx"}
        )
    assert caught.value.code == "TABLE_SHEET_NAME_INVALID"
    assert not (ws / ("w" * 32 + ".xlsx")).exists()
    app.run("convert_format", {"input_path": "wells.gpkg", "geometry_as": "none", "output_path": "w" * 31 + ".xlsx"})
    assert manifest(ws / ("w" * 31 + ".xlsx"))["output"]["layer"] == "w" * 31


def test_a_field_named_like_the_coordinate_columns_is_refused(app: Any, ws: Path) -> None:
    write_layer(ws / "xy.gpkg", [Point(1, 2)], "EPSG:32633", x=[99])
    with pytest.raises(MapSmithError) as caught:
        app.run("convert_format", {"input_path": "xy.gpkg", "geometry_as": "xy", "output_path": "xy.csv"})
    assert caught.value.code == "TABLE_COLUMN_EXISTS"


def test_lines_as_wkt(app: Any, ws: Path) -> None:
    write_layer(ws / "roads.gpkg", [LineString([(0, 0), (3, 4)])], "EPSG:32633", id=[1])
    app.run("convert_format", {"input_path": "roads.gpkg", "geometry_as": "wkt", "output_path": "r.json"})
    assert json.loads((ws / "r.json").read_text()) == [{"wkt": "LINESTRING (0 0, 3 4)", "id": 1}]
