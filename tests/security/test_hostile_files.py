"""Driver confusion: a file inside the workspace must be read with the driver its extension names.

GDAL picks a driver by content. Each hostile file here is written by the test: an OGR VRT hidden in
a CSV after its header line or after a form feed, in a TSV, in a dBASE file, inside a JSON string of
a GeoJSON file, and a GDAL raster VRT named ``.tif``. Their sources are a marker file in a folder
beside the workspace (``outside/``). Before the parser walls, describing such a file showed the
marker's fields and values. Now the file is read as what its extension says (its own columns, the
marker nowhere in the answer) or refused with a code. Each class has its clean twin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError
from security.hostile_files import MARKER
from security.hostile_files import write_tif as _tif


@pytest.fixture
def outside(workspace: Path) -> Path:
    """A folder beside the workspace holding a CSV and a GeoTIFF no input may reach."""
    folder = workspace.parent / "outside"
    folder.mkdir()
    (folder / "secret.csv").write_text(f"SECRET,VALUE\n{MARKER},42\n", "utf-8")
    _tif(folder / "secret.tif", value=77)
    return folder


def _ogr_vrt(source: Path | str) -> str:
    return (
        f'<OGRVRTDataSource><OGRVRTLayer name="secret"><SrcDataSource>{source}</SrcDataSource>'
        "<SrcLayer>secret</SrcLayer></OGRVRTLayer></OGRVRTDataSource>"
    )


def _raster_vrt(source: Path) -> str:
    return (
        '<VRTDataset rasterXSize="4" rasterYSize="4"><VRTRasterBand dataType="Byte" band="1"><SimpleSource>'
        f"<SourceFilename>{source}</SourceFilename><SourceBand>1</SourceBand></SimpleSource></VRTRasterBand>"
        "</VRTDataset>"
    )


def _describe(app: Any, name: str) -> dict[str, Any]:
    """The describe answer, or the refusal as a dict; the marker must be in neither."""
    try:
        outcome: dict[str, Any] = {"answer": app.run("describe_dataset", {"input_path": name}).answer}
    except MapSmithError as exc:
        outcome = {"error": exc.to_dict()}
    assert MARKER not in json.dumps(outcome, default=str)
    assert "SECRET" not in json.dumps(outcome, default=str)
    return outcome


def _only(outcome: dict[str, Any]) -> dict[str, Any]:
    assert "answer" in outcome, outcome
    (described,) = outcome["answer"]["described"]
    return described


# -- an OGR VRT inside text formats -------------------------------------------------------------


def test_csv_with_a_vrt_after_its_header_line_is_read_as_csv(app: Any, workspace: Path, outside: Path) -> None:
    (workspace / "t.csv").write_text("a,b\n" + _ogr_vrt(outside / "secret.csv") + "\n", "utf-8")
    described = _only(_describe(app, "t.csv"))
    # The CSV driver's reading: the header's two columns and one row (the VRT text is a value of "a").
    assert (described["driver"], described["fields"], described["feature_count"]) == ("CSV", ["a", "b"], 1)


def test_csv_source_as_a_connection_string_is_never_followed(app: Any, workspace: Path, outside: Path) -> None:
    # "CSV:/path" in a VRT opens any text file as a table (/proc/self/environ among them).
    (workspace / "t.csv").write_text("a,b\n" + _ogr_vrt(f"CSV:{outside / 'secret.csv'}") + "\n", "utf-8")
    described = _only(_describe(app, "t.csv"))
    assert (described["driver"], described["fields"]) == ("CSV", ["a", "b"])


def test_csv_with_a_vrt_after_a_form_feed_is_read_as_csv(app: Any, workspace: Path, outside: Path) -> None:
    (workspace / "t.csv").write_text("\f" + _ogr_vrt(outside / "secret.csv") + "\n", "utf-8")
    described = _only(_describe(app, "t.csv"))
    assert described["driver"] == "CSV"
    assert described["feature_count"] == 0  # one header line, no rows


def test_tsv_with_a_vrt_is_read_as_tsv(app: Any, workspace: Path, outside: Path) -> None:
    (workspace / "t.tsv").write_text("a\tb\n" + _ogr_vrt(outside / "secret.csv") + "\n", "utf-8")
    described = _only(_describe(app, "t.tsv"))
    assert (described["driver"], described["fields"], described["feature_count"]) == ("CSV", ["a", "b"], 1)


def test_dbf_that_is_a_vrt_is_refused(app: Any, workspace: Path, outside: Path) -> None:
    # A dBASE version byte, then the VRT: GDAL's content sniffing found the VRT first.
    (workspace / "t.dbf").write_bytes(b"\x03" + _ogr_vrt(outside / "secret.csv").encode())
    outcome = _describe(app, "t.dbf")
    assert outcome["error"]["code"] == "INPUT_UNREADABLE"
    assert outcome["error"]["evidence"]["expected"] == "dBASE"


def test_geojson_with_a_vrt_in_a_json_string_is_read_as_geojson(app: Any, workspace: Path, outside: Path) -> None:
    document = {
        "type": "FeatureCollection",
        "name": _ogr_vrt(outside / "secret.csv"),
        "features": [{"type": "Feature", "properties": {"a": 1}, "geometry": {"type": "Point", "coordinates": [1, 2]}}],
    }
    (workspace / "t.geojson").write_text(json.dumps(document), "utf-8")
    described = _only(_describe(app, "t.geojson"))
    assert (described["driver"], described["fields"], described["feature_count"]) == ("GeoJSON", ["a"], 1)


# -- clean twins ---------------------------------------------------------------------------------


def test_clean_csv_tsv_and_geojson_are_described(app: Any, workspace: Path) -> None:
    (workspace / "c.csv").write_text("x,y,name\n1,2,a\n3,4,b\n", "utf-8")
    (workspace / "c.tsv").write_text("x\ty\n1\t2\n", "utf-8")
    feature = {"type": "Feature", "properties": {"n": 1}, "geometry": {"type": "Point", "coordinates": [10, 50]}}
    (workspace / "c.geojson").write_text(json.dumps({"type": "FeatureCollection", "features": [feature]}), "utf-8")
    csv, tsv, geojson = (_only(_describe(app, n)) for n in ("c.csv", "c.tsv", "c.geojson"))
    assert (csv["fields"], csv["feature_count"]) == (["x", "y", "name"], 2)
    assert (tsv["fields"], tsv["feature_count"]) == (["x", "y"], 1)
    assert (geojson["driver"], geojson["feature_count"], geojson["bounds"]) == ("GeoJSON", 1, [10.0, 50.0, 10.0, 50.0])


def test_json_is_read_by_one_of_gdals_json_drivers(app: Any, workspace: Path, outside: Path) -> None:
    esri = {
        "geometryType": "esriGeometryPoint",
        "spatialReference": {"wkid": 4326},
        "fields": [{"name": "n", "type": "esriFieldTypeInteger"}],
        "features": [{"attributes": {"n": 7}, "geometry": {"x": 1.5, "y": 2.5}}],
    }
    topo = {
        "type": "Topology",
        "objects": {"pts": {"type": "GeometryCollection", "geometries": [{"type": "Point", "coordinates": [3, 4]}]}},
        "arcs": [],
    }
    hostile = {"type": "FeatureCollection", "name": _ogr_vrt(outside / "secret.csv"), "features": []}
    for name, document in (("e.json", esri), ("t.json", topo), ("h.json", hostile)):
        (workspace / name).write_text(json.dumps(document), "utf-8")
    e, t, h = (_only(_describe(app, n)) for n in ("e.json", "t.json", "h.json"))
    assert (e["driver"], e["fields"], e["bounds"]) == ("ESRIJSON", ["n"], [1.5, 2.5, 1.5, 2.5])
    assert (t["driver"], t["feature_count"]) == ("TopoJSON", 1)
    assert (h["driver"], h["feature_count"]) == ("GeoJSON", 0)


def test_clean_dbf_table_is_described(app: Any, workspace: Path) -> None:
    import geopandas as gpd
    from shapely.geometry import Point

    gpd.GeoDataFrame({"name": ["a", "b"]}, geometry=[Point(0, 0), Point(1, 1)], crs="EPSG:4326").to_file(
        workspace / "s.shp"
    )
    described = _only(_describe(app, "s.dbf"))
    assert (described["driver"], described["fields"], described["feature_count"]) == ("ESRI Shapefile", ["name"], 2)


# -- the engine layer, with no workspace at all ------------------------------------------------


def test_reader_opens_a_csv_with_the_csv_driver_even_unconfined(tmp_path: Path, outside: Path) -> None:
    from mapsmith_opensource import io

    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + _ogr_vrt(outside / "secret.csv") + "\n", "utf-8")
    info = io.inspect(path)
    assert (info.driver, info.fields) == ("CSV", ("a", "b"))
    frame = io.read_layer(path)
    assert list(frame.columns) == ["a", "b"]
    assert MARKER not in frame.to_json()


def test_tif_that_is_a_raster_vrt_is_refused_before_gdal(tmp_path: Path, outside: Path) -> None:
    from mapsmith_opensource import raster_io

    path = tmp_path / "v.tif"
    path.write_text(_raster_vrt(outside / "secret.tif"), "utf-8")
    with pytest.raises(MapSmithError) as info:
        raster_io.inspect_raster(path)
    assert info.value.code == "INPUT_UNREADABLE"
    assert info.value.evidence["expected"] == "GeoTIFF"


def test_gpkg_whose_bytes_are_not_sqlite_is_refused(tmp_path: Path, outside: Path) -> None:
    from mapsmith_opensource import io

    path = tmp_path / "v.gpkg"
    path.write_text(_ogr_vrt(outside / "secret.csv"), "utf-8")
    with pytest.raises(MapSmithError) as info:
        io.inspect(path)
    assert (info.value.code, info.value.evidence["expected"]) == ("INPUT_UNREADABLE", "GeoPackage")


# -- the test-only switch -----------------------------------------------------------------------


def test_parser_walls_off_lets_gdal_choose_again(tmp_path: Path, outside: Path, monkeypatch: Any) -> None:
    """MAPSMITH_PARSER_WALLS=off (for the sandbox's own tests) really turns the driver wall off."""
    from mapsmith import gdalpolicy
    from mapsmith_opensource import io

    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + _ogr_vrt(outside / "secret.csv") + "\n", "utf-8")
    monkeypatch.setenv(gdalpolicy.PARSER_WALLS_ENV, "off")
    assert gdalpolicy.vector_source(path) == (str(path), None)
    assert io.inspect(path).fields == ("SECRET", "VALUE")  # what GDAL does with the walls down
    monkeypatch.setenv(gdalpolicy.PARSER_WALLS_ENV, "on")
    assert gdalpolicy.vector_source(path) == (f"CSV:{path}", "CSV")


def test_parser_walls_switch_refuses_other_values(monkeypatch: Any) -> None:
    from mapsmith import gdalpolicy

    monkeypatch.setenv(gdalpolicy.PARSER_WALLS_ENV, "false")
    with pytest.raises(MapSmithError) as info:
        gdalpolicy.parser_walls_enabled()
    assert info.value.code == "CONFIGURATION_ERROR"
    assert gdalpolicy.parser_walls_enabled({}) is True
    assert gdalpolicy.parser_walls_enabled({gdalpolicy.PARSER_WALLS_ENV: "off"}) is False


# -- DuckDB spatial's own GDAL ------------------------------------------------------------------


def test_st_read_with_the_allowed_drivers_argument_reads_the_csv_as_csv(tmp_path: Path, outside: Path) -> None:
    """The mechanism run_sql uses: the argument node appended to ST_Read's tree, deparsed, then run."""
    import duckdb

    from mapsmith import gdalpolicy
    from mapsmith_opensource import duckdb_spatial

    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + _ogr_vrt(outside / "secret.csv") + "\n", "utf-8")
    sql = f"SELECT * FROM ST_Read('{path}')"
    con = duckdb_spatial.connect()
    try:
        assert con.execute(sql).fetchall() == [(1, MARKER, "42")]  # the confusion, in DuckDB's GDAL
        plain = duckdb.connect()
        tree = json.loads(plain.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()[0])
        tree["statements"][0]["node"]["from_table"]["function"]["children"].append(
            gdalpolicy.duckdb_allowed_drivers_argument(path)
        )
        (walled,) = plain.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(tree)]).fetchone()
        plain.close()
        assert "allowed_drivers" in walled
        rows = con.execute(walled).fetchall()
    finally:
        con.close()
    assert rows == [(1, _ogr_vrt(outside / "secret.csv"), None)]  # the CSV's own row: column a holds the text
    assert gdalpolicy.duckdb_allowed_drivers_argument(tmp_path / "x.unknown") is None


# -- no network from inside a file ---------------------------------------------------------------


def test_a_vrt_source_on_the_network_is_never_fetched(
    app: Any, workspace: Path, path_loopback: Any, monkeypatch: Any
) -> None:
    from mapsmith import gdalpolicy
    from mapsmith_opensource import io

    url = f"/vsicurl/http://127.0.0.1:{path_loopback.port}/secret.csv"
    (workspace / "n.csv").write_text("a,b\n" + _ogr_vrt(url) + "\n", "utf-8")
    document = {"type": "FeatureCollection", "name": _ogr_vrt(url), "features": []}
    (workspace / "n.geojson").write_text(json.dumps(document), "utf-8")
    before = len(path_loopback.requests)
    assert _only(_describe(app, "n.csv"))["driver"] == "CSV"
    assert _only(_describe(app, "n.geojson"))["driver"] == "GeoJSON"
    assert path_loopback.requests[before:] == []
    # The instrument's positive control: with the walls down, GDAL's VRT driver does fetch the URL.
    monkeypatch.setenv(gdalpolicy.PARSER_WALLS_ENV, "off")
    with pytest.raises(MapSmithError):
        io.inspect(workspace / "n.csv")  # the server answers 404
    assert any("/secret.csv" in request for request in path_loopback.requests[before:])
