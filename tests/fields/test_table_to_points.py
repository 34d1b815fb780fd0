"""table_to_points: a table's rows as points, the CRS required, unreadable rows listed, never dropped unseen.

Expected coordinates are worked by hand in the comments (degrees + minutes/60 + seconds/3600). The
workspace fixture validates every manifest a test leaves behind against the published schema.
"""

from __future__ import annotations

import pytest

from layers import manifest, read
from mapsmith.errors import ArgumentError, InputError

# Paris written in DMS: 48°51'24"N = 48.8566667, 2°21'03"E = 2.3508333.
# Sydney with decimal minutes: -33 52.1 = -33.8683333, 151°12.5'E = 151.2083333.
DMS_CSV = (
    "id,name,lon,lat\n"
    '1,Paris,"2°21\'03""E","48°51\'24""N"\n'
    "2,Sydney,151°12.5'E,-33 52.1\n"
    "3,Greenwich,-0.0015,51.4778\n"
)


def _write(workspace, name: str, text: str, encoding: str = "utf-8") -> None:
    (workspace / name).write_bytes(text.encode(encoding))


def test_dms_and_decimal_rows_become_points_at_the_hand_worked_positions(app, workspace) -> None:
    _write(workspace, "cities.csv", DMS_CSV)
    result = app.run(
        "table_to_points",
        {"input_path": "cities.csv", "x_field": "lon", "y_field": "lat", "crs": "EPSG:4326", "output_path": "c.gpkg"},
    )
    assert result.answer["point_count"] == 3
    assert result.answer["skipped_count"] == 0
    out = read(workspace / "c.gpkg")
    assert list(out["name"]) == ["Paris", "Sydney", "Greenwich"]  # table order kept
    xs, ys = list(out.geometry.x), list(out.geometry.y)
    assert xs == pytest.approx([2.3508333333, 151.2083333333, -0.0015], abs=1e-9)
    assert ys == pytest.approx([48.8566666667, -33.8683333333, 51.4778], abs=1e-9)
    # the columns are kept as read, the DMS text included
    assert list(out["lat"])[0] == "48°51'24\"N"
    record = manifest(workspace / "c.gpkg")
    assert record["output"]["crs"] == "EPSG:4326"
    assert record["parameters"]["crs"] == "EPSG:4326"
    assert record["parameters"]["x-mapsmith:skipped_row_count"] == 0
    checks = {c["name"]: c for c in record["verification"]}
    assert checks["feature_count_exact"]["passed"]
    assert checks["x-mapsmith:rows_accounted"]["passed"]


def test_unreadable_rows_refuse_the_run_with_each_row_listed(app, workspace) -> None:
    _write(workspace, "bad.csv", DMS_CSV + "4,Nowhere,abc,10\n5,Swapped,48°51'N,2°21'E\n6,Empty,,\n")
    with pytest.raises(InputError) as info:
        app.run(
            "table_to_points",
            {"input_path": "bad.csv", "x_field": "lon", "y_field": "lat", "crs": "EPSG:4326", "output_path": "b.gpkg"},
        )
    err = info.value
    assert err.code == "TABLE_ROWS_UNPARSEABLE"
    assert err.evidence["row_count"] == 6
    assert err.evidence["unparseable_count"] == 3  # rows 4, 5 and 6; row 5 and 6 fail on both cells
    rows = err.evidence["rows"]
    assert [(r["row"], r["field"]) for r in rows] == [(4, "lon"), (5, "lon"), (5, "lat"), (6, "lon"), (6, "lat")]
    assert rows[0]["value"] == "abc"
    assert "swapped" in rows[1]["reason"]
    assert rows[3]["reason"] == "the cell is empty"
    assert "skip_invalid_rows" in err.hint
    assert not (workspace / "b.gpkg").exists()


def test_skip_invalid_rows_writes_the_rest_and_records_the_skipped(app, workspace) -> None:
    # The twin of the refusal: the same table, skipping allowed.
    _write(workspace, "bad.csv", DMS_CSV + "4,Nowhere,abc,10\n")
    result = app.run(
        "table_to_points",
        {
            "input_path": "bad.csv",
            "x_field": "lon",
            "y_field": "lat",
            "crs": "EPSG:4326",
            "skip_invalid_rows": True,
            "output_path": "b.gpkg",
        },
    )
    assert result.answer["point_count"] == 3
    assert result.answer["skipped_count"] == 1
    assert result.answer["skipped_rows"][0]["row"] == 4
    assert any(w["code"] == "TABLE_ROWS_SKIPPED" for w in result.warnings)
    assert len(read(workspace / "b.gpkg")) == 3
    record = manifest(workspace / "b.gpkg")
    assert record["parameters"]["x-mapsmith:skipped_row_count"] == 1
    assert record["parameters"]["x-mapsmith:skipped_rows"][0]["value"] == "abc"


def test_the_crs_is_required_and_never_guessed(app, workspace) -> None:
    _write(workspace, "cities.csv", DMS_CSV)
    args = {"input_path": "cities.csv", "x_field": "lon", "y_field": "lat", "output_path": "c.gpkg"}
    with pytest.raises(ArgumentError) as info:
        app.run("table_to_points", args)
    assert info.value.code == "MISSING_ARGUMENT"
    assert info.value.evidence["argument"] == "crs"
    assert "never guessed" in str(info.value)
    assert not (workspace / "c.gpkg").exists()
    app.run("table_to_points", {**args, "crs": "EPSG:4326"})  # the twin
    assert (workspace / "c.gpkg").exists()


def test_a_projected_crs_takes_eastings_and_northings_and_refuses_dms(app, workspace) -> None:
    # British National Grid: the Greenwich observatory at about E 538,874 N 177,344.
    _write(workspace, "bng.csv", "id,e,n\n1,538874.0,177344.0\n2,530000,180000\n")
    result = app.run(
        "table_to_points",
        {"input_path": "bng.csv", "x_field": "e", "y_field": "n", "crs": "EPSG:27700", "output_path": "g.gpkg"},
    )
    assert result.answer["point_count"] == 2
    out = read(workspace / "g.gpkg")
    assert list(out.geometry.x) == [538874.0, 530000.0]
    assert out.crs.to_epsg() == 27700
    _write(workspace, "mixed.csv", "id,e,n\n1,538874.0,51°28'N\n")
    with pytest.raises(InputError) as info:
        app.run(
            "table_to_points",
            {"input_path": "mixed.csv", "x_field": "e", "y_field": "n", "crs": "EPSG:27700", "output_path": "m.gpkg"},
        )
    assert info.value.code == "TABLE_ROWS_UNPARSEABLE"
    assert "projected" in info.value.evidence["rows"][0]["reason"]


def test_wkt_points_are_read_and_other_geometries_are_listed(app, workspace) -> None:
    _write(workspace, "w.csv", 'id,shape\n1,POINT (2.5 48.5)\n2,"LINESTRING (0 0, 1 1)"\n3,POINT (\n')
    args = {"input_path": "w.csv", "wkt_field": "shape", "crs": "EPSG:4326", "output_path": "w.gpkg"}
    with pytest.raises(InputError) as info:
        app.run("table_to_points", args)
    rows = info.value.evidence["rows"]
    assert [r["row"] for r in rows] == [2, 3]
    assert "LineString, not a POINT" in rows[0]["reason"]
    assert "WKT" in rows[1]["reason"]
    result = app.run("table_to_points", {**args, "skip_invalid_rows": True})
    assert result.answer["point_count"] == 1
    out = read(workspace / "w.gpkg")
    assert (out.geometry.x[0], out.geometry.y[0]) == (2.5, 48.5)


def test_coordinate_columns_are_checked_against_the_table(app, workspace) -> None:
    _write(workspace, "cities.csv", DMS_CSV)
    base = {"input_path": "cities.csv", "crs": "EPSG:4326", "output_path": "c.gpkg"}
    with pytest.raises(InputError) as info:
        app.run("table_to_points", {**base, "x_field": "Lon", "y_field": "lat"})
    assert info.value.code == "FIELD_NOT_FOUND"
    assert info.value.evidence["fields"] == ["id", "name", "lon", "lat"]
    with pytest.raises(ArgumentError) as info:
        app.run("table_to_points", {**base, "x_field": "lon"})
    assert info.value.code == "COORDINATE_FIELDS_REQUIRED"
    with pytest.raises(ArgumentError) as info:
        app.run("table_to_points", {**base, "x_field": "lon", "y_field": "lat", "wkt_field": "name"})
    assert info.value.code == "ARGUMENT_NOT_APPLICABLE"


def test_a_cp1252_table_is_read_with_its_encoding_named(app, workspace) -> None:
    # "Café" in CP1252 is the byte 0xE9 for é; named, it reads back as the same four letters.
    _write(workspace, "cafe.csv", "id,name,lon,lat\n1,Café,2.35,48.85\n", encoding="cp1252")
    app.run(
        "table_to_points",
        {
            "input_path": "cafe.csv",
            "x_field": "lon",
            "y_field": "lat",
            "crs": "EPSG:4326",
            "encoding": "cp1252",
            "output_path": "cafe.gpkg",
        },
    )
    assert list(read(workspace / "cafe.gpkg")["name"]) == ["Café"]


def test_a_cp1252_table_read_as_utf8_is_refused_not_garbled(app, workspace) -> None:
    # The twin of the test above: without encoding, the byte 0xE9 is not UTF-8 and nothing is written.
    _write(workspace, "cafe.csv", "id,name,lon,lat\n1,Café,2.35,48.85\n", encoding="cp1252")
    with pytest.raises(InputError) as info:
        app.run(
            "table_to_points",
            {"input_path": "cafe.csv", "x_field": "lon", "y_field": "lat", "crs": "EPSG:4326", "output_path": "c.gpkg"},
        )
    assert info.value.code == "TABLE_ENCODING_INVALID"
    assert not (workspace / "c.gpkg").exists()


def test_a_column_named_geom_is_refused_for_a_geopackage_and_written_to_parquet(app, workspace) -> None:
    # GDAL names a GeoPackage's geometry column "geom": a table column of that name cannot sit beside it.
    _write(workspace, "g.csv", "id,GEOM\n1,POINT (2.5 48.5)\n")
    args = {"input_path": "g.csv", "wkt_field": "GEOM", "crs": "EPSG:4326"}
    with pytest.raises(InputError) as info:
        app.run("table_to_points", {**args, "output_path": "g.gpkg"})
    assert info.value.code == "FIELD_NAME_RESERVED"
    app.run("table_to_points", {**args, "output_path": "g.parquet"})  # the twin: another format
    out = read(workspace / "g.parquet")
    assert list(out["GEOM"]) == ["POINT (2.5 48.5)"]


def test_an_xlsx_sheet_with_number_and_dms_cells(app, workspace) -> None:
    # GDAL's XLSX driver types the lon cells as numbers and the lat cells as text; both are read.
    import pandas as pd
    import pyogrio

    frame = pd.DataFrame({"id": [1, 2], "lon": [2.35, 151.2], "lat": ["48°51'24\"N", "-33 52.1"]})
    pyogrio.write_dataframe(frame, workspace / "t.xlsx", driver="XLSX")
    result = app.run(
        "table_to_points",
        {"input_path": "t.xlsx", "x_field": "lon", "y_field": "lat", "crs": "EPSG:4326", "output_path": "x.gpkg"},
    )
    assert result.answer["point_count"] == 2
    out = read(workspace / "x.gpkg")
    assert list(out.geometry.x) == [2.35, 151.2]
    assert list(out.geometry.y) == pytest.approx([48.8566666667, -33.8683333333], abs=1e-9)
