"""run_sql delivers tables (CSV, JSON, Parquet, Excel), answers with rows when output_path is left out,
and reads shapefile text in the code page its .cpg names. Expected values are worked out by hand."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point

from layers import manifest, write_layer
from mapsmith.errors import MapSmithError
from mapsmith.provenance.validator import validate_manifest

# Five wells in three parishes: A has ids 1, 4 (depths 30, 10 -> 40), B has 2 (7.5), C has 3, 5
# (12.5 and a missing depth -> 12.5). Sorted by parish: A 2 40.0, B 1 7.5, C 2 12.5.
WELLS_CSV = "id,parish,depth_m\n3,C,12.5\n1,A,30\n2,B,7.5\n5,C,\n4,A,10\n"
PER_PARISH = (
    "SELECT parish, count(*) AS wells, sum(depth_m) AS depth_total_m, list_sort(list(id))[1] AS first_id "
    "FROM read_csv('wells.csv') GROUP BY parish ORDER BY parish"
)
ROWS = [
    {"parish": "A", "wells": 2, "depth_total_m": 40.0, "first_id": 1},
    {"parish": "B", "wells": 1, "depth_total_m": 7.5, "first_id": 2},
    {"parish": "C", "wells": 2, "depth_total_m": 12.5, "first_id": 3},
]


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "wells.csv").write_text(WELLS_CSV)
    return workspace


def _valid(path: Path) -> dict[str, Any]:
    record = manifest(path)
    assert validate_manifest(record) == []
    from mapsmith.provenance.digests import dataset_digest

    assert record["output"]["sha256"] == dataset_digest(path)
    assert record["inputs"][0]["path"] == "wells.csv"
    checks = {c["name"]: c for c in record["verification"]}
    assert checks["x-mapsmith:row_count"] == {
        "name": "x-mapsmith:row_count",
        "passed": True,
        "detail": "expected 3 rows, read back 3",
        "critical": True,
    }
    assert checks["x-mapsmith:columns_present"]["passed"] and checks["x-mapsmith:column_types"]["passed"]
    return record


def test_a_select_without_geometry_is_a_csv_table(app: Any, ws: Path) -> None:
    result = app.run("run_sql", {"sql": PER_PARISH, "output_path": "per_parish.csv"})
    assert (ws / "per_parish.csv").read_text() == (
        '"parish","wells","depth_total_m","first_id"\n"A",2,40,1\n"B",1,7.5,2\n"C",2,12.5,3\n'
    )
    assert result.answer["row_count"] == 3
    record = _valid(ws / "per_parish.csv")
    assert record["output"]["crs"] is None
    assert record["parameters"]["x-mapsmith:sql_result_types"] == {
        "parish": "VARCHAR",
        "wells": "BIGINT",
        "depth_total_m": "DOUBLE",
        "first_id": "BIGINT",
    }


def test_the_same_rows_as_json_parquet_and_xlsx(app: Any, ws: Path) -> None:
    import pyarrow.parquet as pq

    from mapsmith_opensource.tables import read_table

    for name in ("per_parish.json", "per_parish.parquet", "per_parish.xlsx"):
        app.run("run_sql", {"sql": PER_PARISH, "output_path": name})
        _valid(ws / name)
    assert json.loads((ws / "per_parish.json").read_text()) == ROWS
    assert pq.read_table(ws / "per_parish.parquet").to_pylist() == ROWS
    with zipfile.ZipFile(ws / "per_parish.xlsx") as book:
        assert 'name="per_parish"' in book.read("xl/workbook.xml").decode()
    assert read_table(ws / "per_parish.xlsx").to_pylist() == ROWS
    assert manifest(ws / "per_parish.xlsx")["output"]["layer"] == "per_parish"


def test_geoparquet_is_accepted_where_parquet_is(app: Any, ws: Path) -> None:
    import geopandas as gpd

    write_layer(ws / "sites.gpkg", [Point(1, 2), Point(3, 4)], "EPSG:32633", id=[1, 2])
    app.run("run_sql", {"sql": "SELECT id, geom FROM ST_Read('sites.gpkg')", "output_path": "sites.geoparquet"})
    back = gpd.read_parquet(ws / "sites.geoparquet")
    assert back.crs.to_epsg() == 32633 and list(back.geometry.x) == [1.0, 3.0]
    # and on an operation whose contract lists only .parquet
    app.run("buffer_layer", {"input_path": "sites.gpkg", "distance_meters": 1, "output_path": "b.geoparquet"})
    assert len(gpd.read_parquet(ws / "b.geoparquet")) == 2


def test_a_geometry_in_a_csv_is_refused_and_its_wkt_is_written(app: Any, ws: Path) -> None:
    write_layer(ws / "sites.gpkg", [Point(1, 2), Point(3, 4)], "EPSG:32633", id=[1, 2])
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": "SELECT id, geom FROM ST_Read('sites.gpkg')", "output_path": "s.csv"})
    assert caught.value.code == "SQL_GEOMETRY_IN_TABLE"
    assert not (ws / "s.csv").exists()
    app.run("run_sql", {"sql": "SELECT id, ST_AsText(geom) AS wkt FROM ST_Read('sites.gpkg')", "output_path": "s.csv"})
    assert (ws / "s.csv").read_text() == '"id","wkt"\n1,"POINT (1 2)"\n2,"POINT (3 4)"\n'


def test_a_table_into_a_layer_format_is_refused_with_the_table_formats_named(app: Any, ws: Path) -> None:
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": PER_PARISH, "output_path": "p.gpkg"})
    assert caught.value.code == "SQL_GEOMETRY_COLUMN"
    assert ".csv" in caught.value.hint


def test_an_answer_without_output_path(app: Any, ws: Path) -> None:
    result = app.run("run_sql", {"sql": PER_PARISH})
    answer = result.answer
    assert result.output_path is None and not list(ws.glob("*.provenance.json"))
    assert answer["rows"] == ROWS
    assert answer["columns"] == [
        {"name": "parish", "type": "VARCHAR"},
        {"name": "wells", "type": "BIGINT"},
        {"name": "depth_total_m", "type": "DOUBLE"},
        {"name": "first_id", "type": "BIGINT"},
    ]
    assert (answer["row_count"], answer["total_rows"], answer["complete"], answer["max_rows"]) == (3, 3, True, 1000)
    record = answer["provenance"]
    assert record["parameters"]["sql"] == PER_PARISH
    import hashlib

    assert record["inputs"] == [
        {
            "path": "wells.csv",
            "sha256": hashlib.sha256(WELLS_CSV.encode()).hexdigest(),
            "crs": None,
            "argument": "sql_paths[0]",
        }
    ]
    assert record["engine"]["name"] == "duckdb"


def test_an_answer_is_capped_and_counts_every_row(app: Any, ws: Path) -> None:
    # range(2500) holds 0..2499: 2500 rows, the first two returned
    answer = app.run("run_sql", {"sql": "SELECT range AS n FROM range(2500)", "max_rows": 2}).answer
    assert answer["rows"] == [{"n": 0}, {"n": 1}]
    assert (answer["row_count"], answer["total_rows"], answer["complete"]) == (2, 2500, False)
    assert "2498 more rows" in answer["hint"]
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": "SELECT 1 AS n", "max_rows": 10001})
    assert caught.value.code == "ARGUMENT_OUT_OF_RANGE"


def test_geometries_in_an_answer_are_wkt_shortened_past_the_stated_length(app: Any, ws: Path) -> None:
    # A 100 m square and a polygon of 60 vertices (its WKT far longer than 200 characters).
    ring = [(i * 1.123456, (i % 2) * 7.654321) for i in range(59)] + [(0.0, 0.0)]
    from shapely.geometry import Polygon

    square = Polygon([(0, 0), (0, 100), (100, 100), (100, 0)])
    write_layer(ws / "zones.gpkg", [square, Polygon(ring)], "EPSG:32633", id=[1, 2])
    answer = app.run("run_sql", {"sql": "SELECT id, geom FROM ST_Read('zones.gpkg') ORDER BY id"}).answer
    assert answer["geometry_wkt_max_chars"] == 200
    first, second = answer["rows"]
    assert first["geom"] == "POLYGON ((0 0, 0 100, 100 100, 100 0, 0 0))"
    assert len(second["geom"]) == 203 and second["geom"].endswith("...")
    assert answer["geometries_shortened"] == 1


def _shapefile(ws: Path, names: list[str], encoding: str, cpg: str | None) -> None:
    import geopandas as gpd

    gdf = gpd.GeoDataFrame(
        {"id": list(range(1, len(names) + 1)), "name": names},
        geometry=[Point(i, i) for i in range(len(names))],
        crs="EPSG:4326",
    )
    gdf.to_file(ws / "towns.shp", encoding=encoding)
    (ws / "towns.cpg").unlink(missing_ok=True)
    if cpg is not None:
        (ws / "towns.cpg").write_text(cpg)


@pytest.mark.parametrize("cpg", ["CP1252", "1252", "ISO-8859-1", "LATIN1"])
def test_shapefile_text_is_decoded_as_its_cpg_says(app: Any, ws: Path, cpg: str) -> None:
    import pyarrow.parquet as pq

    _shapefile(ws, ["Zürich", "Île"], "cp1252", cpg)
    assert b"Z\xfcrich" in (ws / "towns.dbf").read_bytes()  # the bytes on disk are CP1252
    app.run("run_sql", {"sql": "SELECT id, name FROM ST_Read('towns.shp') ORDER BY id", "output_path": "t.parquet"})
    column = pq.read_table(ws / "t.parquet").column("name")
    assert [v.as_buffer().to_pybytes() for v in column.chunks[0]] == ["Zürich".encode(), "Île".encode()]
    assert b"Z\xc3\xbcrich" == "Zürich".encode()
    record = manifest(ws / "t.parquet")
    assert list(record["parameters"]["x-mapsmith:sql_encodings"]) == ["towns.shp"]
    answer = app.run("run_sql", {"sql": "SELECT name FROM ST_Read('towns.shp') ORDER BY id"}).answer
    assert [r["name"] for r in answer["rows"]] == ["Zürich", "Île"]


def test_cp1252_bytes_latin1_cannot_stand_for_are_refused(app: Any, ws: Path) -> None:
    _shapefile(ws, ["5 €", "Île"], "cp1252", "CP1252")  # the euro sign is 0x80 in CP1252
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": "SELECT name FROM ST_Read('towns.shp')"})
    assert caught.value.code == "SQL_ENCODING_UNSUPPORTED"
    assert "convert_format" in caught.value.hint


def test_text_that_is_not_utf8_without_a_cpg_is_refused(app: Any, ws: Path) -> None:
    _shapefile(ws, ["Zürich"], "cp1252", None)
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": "SELECT name FROM ST_Read('towns.shp')", "output_path": "t.parquet"})
    assert caught.value.code == "SQL_TEXT_NOT_UTF8"
    assert not (ws / "t.parquet").exists()


def test_a_utf8_shapefile_is_read_as_it_is(app: Any, ws: Path) -> None:
    _shapefile(ws, ["Zürich", "Ağrı"], "utf-8", "UTF-8")
    answer = app.run("run_sql", {"sql": "SELECT name FROM ST_Read('towns.shp') ORDER BY id"}).answer
    assert [r["name"] for r in answer["rows"]] == ["Zürich", "Ağrı"]
    assert "x-mapsmith:sql_encodings" not in answer["provenance"]["parameters"]


def test_a_declared_geometry_type_is_checked_when_the_step_runs(app: Any, ws: Path) -> None:
    write_layer(ws / "sites.gpkg", [Point(1, 2), Point(3, 4)], "EPSG:32633", id=[1, 2])
    sql = "SELECT id, geom FROM ST_Read('sites.gpkg')"
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": sql, "geometry_type": "polygon", "output_path": "s.gpkg"})
    assert caught.value.code == "VERIFICATION_FAILED"
    assert not (ws / "s.gpkg").exists()
    app.run("run_sql", {"sql": sql, "geometry_type": "point", "output_path": "s.gpkg"})
    checks = {c["name"]: c for c in manifest(ws / "s.gpkg")["verification"]}
    assert checks["x-mapsmith:declared_geometry_type"]["detail"] == "declared point; the result holds point"


def test_a_geometry_type_declared_for_a_table_fails_its_check_and_leaves_a_failure_record(app: Any, ws: Path) -> None:
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": PER_PARISH, "geometry_type": "point", "output_path": "p.csv"})
    assert caught.value.code == "VERIFICATION_FAILED"
    assert not (ws / "p.csv").exists()
    (failed,) = ws.glob("p.csv.failed*.provenance.json")
    record = json.loads(failed.read_text())
    assert validate_manifest(record) == []
    check = next(c for c in record["verification"] if c["name"] == "x-mapsmith:declared_geometry_type")
    assert (check["passed"], check["detail"]) == (False, "declared point; the result holds no geometry column")


def test_a_table_is_not_written_as_geoparquet(app: Any, ws: Path) -> None:
    with pytest.raises(MapSmithError) as caught:
        app.run("run_sql", {"sql": PER_PARISH, "output_path": "p.geoparquet"})
    assert caught.value.code == "SQL_GEOMETRY_COLUMN"


def test_dates_and_decimals_in_an_answer_are_plain_json(app: Any, ws: Path) -> None:
    sql = "SELECT DATE '2026-12-01' AS day, 12.50::DECIMAL(5, 2) AS price, NULL AS nothing"
    (row,) = app.run("run_sql", {"sql": sql}).answer["rows"]
    assert row == {"day": "2026-12-01", "price": "12.50", "nothing": None}
    json.dumps(row)  # nothing an MCP reply cannot carry


def test_blobs_and_nested_values_in_an_answer_are_plain_json(app: Any, ws: Path) -> None:
    sql = "SELECT '\\xAB\\x01'::BLOB AS raw, [DATE '2026-01-02'] AS days, {'n': 1.5::DOUBLE} AS s"
    (row,) = app.run("run_sql", {"sql": sql}).answer["rows"]
    assert row == {"raw": "\\xab01", "days": ["2026-01-02"], "s": {"n": 1.5}}


def test_st_readshp_honours_the_cpg_too(app: Any, ws: Path) -> None:
    _shapefile(ws, ["Zürich", "Île"], "cp1252", "CP1252")
    answer = app.run("run_sql", {"sql": "SELECT name FROM ST_ReadSHP('towns.shp') ORDER BY name"}).answer
    assert answer["rows"] == [{"name": "Zürich"}, {"name": "Île"}]  # "Z" (0x5A) sorts before "Î" (U+00CE)
    assert answer["columns"] == [{"name": "name", "type": "VARCHAR"}]


def test_the_refusals_way_round_works(app: Any, ws: Path) -> None:
    # SQL_ENCODING_UNSUPPORTED's hint: convert_format the shapefile to .gpkg (pyogrio's GDAL recodes
    # CP1252), then query the GeoPackage. The euro sign is U+20AC, 0x80 in CP1252.
    _shapefile(ws, ["5 €", "Île"], "cp1252", "CP1252")
    app.run("convert_format", {"input_path": "towns.shp", "output_path": "towns.gpkg"})
    answer = app.run("run_sql", {"sql": "SELECT name FROM ST_Read('towns.gpkg') ORDER BY id"}).answer
    assert [r["name"] for r in answer["rows"]] == ["5 €", "Île"]
