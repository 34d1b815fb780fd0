"""A CRS declared inside an input file is read from its bytes before GDAL opens the file.

Every format MapSmith's tests use gets a clean file that runs and a hostile one (a CRS naming a
datum grid outside the workspace, written by GDAL itself where GDAL will write it) that is refused
through ``app.run`` with nothing written beside the output path, not even a failure record: the
refusal comes before the engine starts. Formats whose CRS MapSmith cannot read first are refused by
extension and by magic bytes.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError

# GDAL writes these grids into the definition: the NTv2 "Latitude and longitude difference file".
OUTSIDE = "/etc/passwd"
# NAD27 and not a bare ellipsoid: PROJ would name an ad hoc datum "... using nadgrids=/etc/passwd",
# and the tests below must show the structural reference is found, not that text.
HOSTILE_PROJ = f"+proj=longlat +datum=NAD27 +nadgrids={OUTSIDE} +type=crs"


def _points(path: Path, crs: Any) -> Path:
    import geopandas as gpd
    from shapely.geometry import Point

    gdf = gpd.GeoDataFrame({"a": [1, 2]}, geometry=[Point(1, 2), Point(2, 3)], crs=crs)
    if path.suffix == ".parquet":
        gdf.to_parquet(path)
    else:
        gdf.to_file(path)
    return path


def _raster(path: Path, crs: Any = "EPSG:32610") -> Path:
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    profile = {
        "driver": "GTiff",
        "width": 4,
        "height": 4,
        "count": 1,
        "dtype": "uint8",
        "crs": crs,
        "transform": from_origin(500000, 4000000, 10, 10),
    }
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(np.arange(16, dtype="uint8").reshape(1, 4, 4))
    return path


def _bound_wkt(grid: str = OUTSIDE) -> str:
    from pyproj import CRS

    return CRS(f"+proj=longlat +datum=NAD27 +nadgrids={grid} +type=crs").to_wkt()


def _refused(app: Any, workspace: Path, operation: str, arguments: dict[str, Any], code: str) -> MapSmithError:
    before = sorted(p.name for p in workspace.iterdir())
    with pytest.raises(MapSmithError) as info:
        app.run(operation, arguments)
    assert info.value.code == code, info.value.to_dict()
    # Nothing written: no output, no manifest, no failure record claiming a run.
    assert sorted(p.name for p in workspace.iterdir()) == before
    return info.value


def _reproject(name: str) -> dict[str, Any]:
    return {"input_path": name, "target_crs": "EPSG:3857", "output_path": "out.gpkg"}


# -- vector formats: clean passes, hostile refused ---------------------------------------------


@pytest.mark.parametrize("name", ["clean.gpkg", "clean.parquet", "clean.fgb", "clean.shp", "clean.geojson"])
def test_clean_vector_inputs_run(app: Any, workspace: Path, name: str) -> None:
    _points(workspace / name, "EPSG:4326")
    result = app.run("reproject_layer", _reproject(name))
    assert result.output_path == "out.gpkg"
    assert (workspace / "out.gpkg").exists()


@pytest.mark.parametrize(
    ("name", "key"),
    [
        # gpkg_spatial_ref_sys.definition and the .prj: GDAL's WKT1 with EXTENSION["PROJ4_GRIDS", ...]
        ("bad.gpkg", 'EXTENSION["PROJ4_GRIDS"]'),
        ("bad.shp", 'EXTENSION["PROJ4_GRIDS"]'),
        # geo.columns.geometry.crs: PROJJSON, where a file is a string parameters[].value
        ("bad.parquet", "parameters[Latitude and longitude difference file].value"),
        ("bad.fgb", "PARAMETERFILE"),  # the FlatGeobuf header's crs.wkt: WKT2 BOUNDCRS
    ],
)
def test_vector_declaring_a_grid_outside_is_refused(app: Any, workspace: Path, name: str, key: str) -> None:
    _points(workspace / name, HOSTILE_PROJ)  # GDAL / GeoPandas write the grid reference themselves
    error = _refused(app, workspace, "reproject_layer", _reproject(name), "CRS_REFERENCES_FILE")
    assert error.evidence["argument"] == "input_path"
    # the runner redacts absolute paths outside the workspace from every error it sends
    assert error.evidence["reference"] == "<outside the workspace>"
    assert error.evidence["reason"] == "PATH_OUTSIDE_WORKSPACE"
    assert error.evidence["key"] == key
    assert error.hint


def test_geopackage_definition_patched_to_a_parameterfile_is_refused(app: Any, workspace: Path) -> None:
    gpkg = _points(workspace / "p.gpkg", "EPSG:4326")
    with sqlite3.connect(gpkg) as con:
        con.execute("UPDATE gpkg_spatial_ref_sys SET definition = ? WHERE srs_id = 4326", (_bound_wkt(),))
    error = _refused(app, workspace, "reproject_layer", _reproject("p.gpkg"), "CRS_REFERENCES_FILE")
    assert error.evidence["key"] == "PARAMETERFILE"
    assert error.evidence["source"] == "gpkg_spatial_ref_sys srs_id=4326 definition"


def test_geopackage_grid_inside_the_workspace_is_allowed(app: Any, workspace: Path) -> None:
    gpkg = _points(workspace / "p.gpkg", "EPSG:4326")
    grid = workspace / "grids" / "mine.gsb"
    with sqlite3.connect(gpkg) as con:
        con.execute(
            "INSERT INTO gpkg_spatial_ref_sys (srs_name, srs_id, organization, organization_coordsys_id, definition)"
            " VALUES ('unused', 99999, 'NONE', 99999, ?)",
            (_bound_wkt(str(grid)),),
        )
    from mapsmith.crsguard import check_declared_crs

    check_declared_crs(gpkg, argument="input_path", workspace_root=workspace)  # no exception


def test_geoparquet_projjson_parameter_file_is_refused(app: Any, workspace: Path) -> None:
    import pyarrow.parquet as pq
    from pyproj import CRS

    path = _points(workspace / "g.parquet", "EPSG:4326")
    table = pq.read_table(path)
    geo = json.loads(table.schema.metadata[b"geo"])
    projjson = CRS(HOSTILE_PROJ).to_json_dict()
    # The file reference lives only in parameters[].value: no "+nadgrids=" text anywhere.
    assert "nadgrids" not in json.dumps(projjson)
    geo["columns"]["geometry"]["crs"] = projjson
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"geo": json.dumps(geo).encode()}), path)
    error = _refused(app, workspace, "reproject_layer", _reproject("g.parquet"), "CRS_REFERENCES_FILE")
    assert error.evidence["key"] == "parameters[Latitude and longitude difference file].value"
    assert error.evidence["source"] == "GeoParquet geo.columns['geometry'].crs"


def _geojson(path: Path, crs: dict[str, Any] | None, *, extra_crs: dict[str, Any] | None = None) -> Path:
    head = '{"type": "FeatureCollection", '
    if crs is not None:
        head += f'"crs": {json.dumps(crs)}, '
    feature = {"type": "Feature", "properties": {"a": 1}, "geometry": {"type": "Point", "coordinates": [1, 2]}}
    body = f'"features": [{json.dumps(feature)}]'
    if extra_crs is not None:
        body += f', "crs": {json.dumps(extra_crs)}'
    path.write_text(head + body + "}", "utf-8")
    return path


@pytest.mark.parametrize(
    ("crs", "key"),
    [
        ({"type": "name", "properties": {"name": HOSTILE_PROJ}}, "+nadgrids"),
        ({"type": "name", "properties": {"name": "<BOUNDCRS WKT>"}}, "PARAMETERFILE"),
        ({"type": "link", "properties": {"href": "http://127.0.0.1:9/crs.wkt", "type": "ogcwkt"}}, None),
        ({"type": "link", "properties": {"href": "../outside.prj", "type": "esriwkt"}}, None),
        ({"type": "name", "properties": {"name": "/etc/hosts"}}, "(the whole definition)"),
    ],
    ids=["proj-string", "wkt-parameterfile", "link-url", "link-file", "file-name"],
)
def test_geojson_crs_member_referencing_files_is_refused(
    app: Any, workspace: Path, crs: dict[str, Any], key: str | None
) -> None:
    if crs["properties"].get("name") == "<BOUNDCRS WKT>":
        crs = {"type": "name", "properties": {"name": _bound_wkt()}}  # built here: pyproj is imported lazily
    _geojson(workspace / "g.geojson", crs)
    error = _refused(app, workspace, "reproject_layer", _reproject("g.geojson"), "CRS_REFERENCES_FILE")
    if key is not None:
        assert error.evidence["key"] == key


def test_esri_json_spatial_reference_wkt_is_checked(app: Any, workspace: Path) -> None:
    esri = {
        "geometryType": "esriGeometryPoint",
        "spatialReference": {"wkt": _bound_wkt()},
        "fields": [],
        "features": [{"attributes": {}, "geometry": {"x": 1, "y": 2}}],
    }
    (workspace / "e.json").write_text(json.dumps(esri), "utf-8")
    error = _refused(app, workspace, "describe_dataset", {"input_path": "e.json"}, "CRS_REFERENCES_FILE")
    assert error.evidence["source"] == "ESRI JSON spatialReference.wkt"


def test_geojson_second_top_level_crs_member_is_read_too(app: Any, workspace: Path) -> None:
    crs84 = {"type": "name", "properties": {"name": "urn:ogc:def:crs:OGC:1.3:CRS84"}}
    hostile = {"type": "name", "properties": {"name": HOSTILE_PROJ}}
    _geojson(workspace / "g.geojson", crs84, extra_crs=hostile)
    _refused(app, workspace, "reproject_layer", _reproject("g.geojson"), "CRS_REFERENCES_FILE")


def test_geojson_crs_inside_features_is_not_a_declaration() -> None:
    from mapsmith.crsguard import read_declared_crs

    nested = '{"type": "FeatureCollection", "features": [{"type": "Feature", "crs": {"type": "name", '
    nested += '"properties": {"name": "+nadgrids=/etc/passwd"}}, "properties": {}, "geometry": null}]}'
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "n.geojson"
        path.write_text(nested, "utf-8")
        assert read_declared_crs(path) == []


# -- rasters -----------------------------------------------------------------------------------


def _warp(name: str) -> dict[str, Any]:
    return {"input_path": name, "target_crs": "EPSG:4326", "resampling": "nearest", "output_path": "out.tif"}


def test_clean_geotiff_with_world_file_runs(app: Any, workspace: Path) -> None:
    _raster(workspace / "dem.tif")
    result = app.run("reproject_raster", _warp("dem.tif"))
    assert result.output_path == "out.tif"


def _citation_tiff(path: Path, citation: str) -> Path:
    """A GeoTIFF whose PCS citation (GeoAsciiParamsTag) is ``citation``, patched in place over a
    placeholder name of the same length, as a hostile producer could write it."""
    from pyproj import CRS

    placeholder = "P" * 240
    assert len(citation) <= len(placeholder)
    wkt = CRS("EPSG:32610").to_wkt().replace('"WGS 84 / UTM zone 10N"', f'"{placeholder}"', 1)
    _raster(path, wkt)
    data = path.read_bytes()
    assert data.count(placeholder.encode()) == 1
    path.write_bytes(data.replace(placeholder.encode(), citation.ljust(len(placeholder)).encode()))
    return path


@pytest.mark.parametrize(
    "citation",
    [
        'ESRI PE String = PROJCS["x",GEOGCS["y",DATUM["D",SPHEROID["S",6378137,298.257223563],'
        'EXTENSION["PROJ4_GRIDS","/etc/passwd"]],PRIMEM["G",0],UNIT["Degree",0.0174532925199433]]]',
        "+proj=utm +zone=10 +ellps=clrk66 +nadgrids=@null,/etc/passwd",
        "+proj=utm +zone=10 +geoidgrids=../../outside.gtx",
    ],
    ids=["esri-pe-extension", "proj-nadgrids", "proj-geoidgrids-dotdot"],
)
def test_geotiff_citation_referencing_files_is_refused(app: Any, workspace: Path, citation: str) -> None:
    _citation_tiff(workspace / "c.tif", citation)
    error = _refused(app, workspace, "reproject_raster", _warp("c.tif"), "CRS_REFERENCES_FILE")
    assert error.evidence["source"] == "GeoTIFF IFD 0 GeoAsciiParamsTag (citations)"


def test_geotiff_citation_placeholder_alone_is_clean(app: Any, workspace: Path) -> None:
    # The control for the test above: the same file with a harmless citation runs.
    _citation_tiff(workspace / "c.tif", "UTM zone 10 as a producer named it")
    assert app.run("reproject_raster", _warp("c.tif")).output_path == "out.tif"


def test_geotiff_aux_xml_srs_with_a_parameter_file_is_refused(app: Any, workspace: Path) -> None:
    from xml.sax.saxutils import escape

    _raster(workspace / "a.tif")
    (workspace / "a.tif.aux.xml").write_text(f"<PAMDataset><SRS>{escape(_bound_wkt())}</SRS></PAMDataset>", "utf-8")
    error = _refused(app, workspace, "reproject_raster", _warp("a.tif"), "CRS_REFERENCES_FILE")
    assert error.evidence["source"] == "a.tif.aux.xml <SRS>"
    assert error.evidence["key"] == "PARAMETERFILE"


@pytest.mark.parametrize("sidecar", ["a.tfw", "a.tab"])
def test_geotiff_with_harmless_sidecars_runs(app: Any, workspace: Path, sidecar: str) -> None:
    _raster(workspace / "a.tif")
    text = {
        "a.tfw": "10\n0\n0\n-10\n500005\n3999995\n",
        "a.tab": '!table\n!version 300\nDefinition Table\n  File "a.tif"\n',
    }
    (workspace / sidecar).write_text(text[sidecar], "utf-8")
    assert app.run("reproject_raster", _warp("a.tif")).output_path == "out.tif"


def test_geotiff_with_an_erdas_aux_sidecar_is_refused(app: Any, workspace: Path) -> None:
    _raster(workspace / "a.tif")
    (workspace / "a.aux").write_bytes(b"EHFA_HEADER_TAG\x00")
    error = _refused(app, workspace, "reproject_raster", _warp("a.tif"), "CRS_FORMAT_UNCHECKED")
    assert "a.aux" in error.evidence["format"]


# -- formats whose CRS MapSmith cannot read first ------------------------------------------------

UNCHECKED = [
    ("data.nc", b"CDF\x01" + b"\x00" * 60, "netCDF"),
    ("renamed.tif", b"CDF\x02" + b"\x00" * 60, "netCDF"),  # netCDF classic renamed .tif
    ("renamed4.tif", b"\x89HDF\r\n\x1a\n" + b"\x00" * 60, "HDF5"),  # netCDF-4 / HDF5 renamed .tif
    ("data.hdf", b"\x0e\x03\x13\x01" + b"\x00" * 60, "HDF4"),
    ("data.he5", b"\x00" * 64, "HDF-EOS5"),
    ("data.jp2", b"\x00\x00\x00\x0cjP  \r\n\x87\n" + b"\x00" * 60, "JPEG 2000"),
    ("stream.tif", b"\xff\x4f\xff\x51" + b"\x00" * 60, "JPEG 2000"),
    ("data.img", b"EHFA_HEADER_TAG\x00" + b"\x00" * 48, "ERDAS IMG"),
    ("data.grb2", b"GRIB" + b"\x00" * 60, "GRIB"),
    ("weather.tif", b"GRIB" + b"\x00" * 60, "GRIB"),
    ("points.xyz", b"1 2 3\n", "'.xyz' files"),
    ("mosaic.vrt", b"<VRTDataset/>", "'.vrt' files"),
]


@pytest.mark.parametrize(("name", "content", "format_name"), UNCHECKED, ids=[u[0] for u in UNCHECKED])
def test_formats_whose_crs_cannot_be_read_first_are_refused(
    app: Any, workspace: Path, name: str, content: bytes, format_name: str
) -> None:
    (workspace / name).write_bytes(content)
    error = _refused(app, workspace, "reproject_raster", _warp(name), "CRS_FORMAT_UNCHECKED")
    assert error.evidence["format"] == format_name
    assert "cannot read the CRS" in error.message
    assert "GeoTIFF or GeoPackage" in (error.hint or "")
    assert "GeoPackage (.gpkg)" in error.evidence["checked"]


MISNAMED = [
    ("garbage.gpkg", b"this is not a GeoPackage", "INPUT_UNREADABLE"),
    ("garbage.tif", b"not a TIFF at all", "INPUT_UNREADABLE"),
    ("vrt.csv", b"<VRTDataset rasterXSize='1'/>", "INPUT_UNREADABLE"),  # GDAL would open it as a VRT
    ("vrt.geojson", b"<VRTDataset/>", "INPUT_UNREADABLE"),
    ("zip.xlsx", b"not a zip", "INPUT_UNREADABLE"),
    ("no_extension", b"whatever", "CRS_FORMAT_UNCHECKED"),
]


@pytest.mark.parametrize(("name", "content", "code"), MISNAMED, ids=[m[0] for m in MISNAMED])
def test_files_that_are_not_what_their_extension_says_are_refused(
    app: Any, workspace: Path, name: str, content: bytes, code: str
) -> None:
    (workspace / name).write_bytes(content)
    _refused(app, workspace, "describe_dataset", {"input_path": name}, code)


def test_directories_are_never_handed_to_gdal(app: Any, workspace: Path) -> None:
    (workspace / "folder").mkdir()
    _points(workspace / "folder" / "bad.shp", HOSTILE_PROJ)  # a folder of shapefiles GDAL would open whole
    _refused(app, workspace, "describe_dataset", {"input_path": "folder"}, "INPUT_IS_DIRECTORY")
    (workspace / "city.gdb").mkdir()
    _refused(app, workspace, "describe_dataset", {"input_path": "city.gdb"}, "CRS_FORMAT_UNCHECKED")


def test_refusal_comes_before_gdal_opens_the_file(app: Any, workspace: Path, monkeypatch: Any) -> None:
    import mapsmith_opensource.io as osio

    opened: list[str] = []
    monkeypatch.setattr(osio, "list_layers", lambda path: opened.append(str(path)) or ["bad"])
    monkeypatch.setattr(osio, "inspect", lambda path, *a, **k: opened.append(str(path)))
    _points(workspace / "bad.gpkg", HOSTILE_PROJ)
    _refused(app, workspace, "reproject_layer", _reproject("bad.gpkg"), "CRS_REFERENCES_FILE")
    assert opened == []


def test_csv_table_has_no_crs_to_check(workspace: Path) -> None:
    from mapsmith.crsguard import check_declared_crs, read_declared_crs

    (workspace / "t.csv").write_text("code,value\n1,2\n", "utf-8")
    assert read_declared_crs(workspace / "t.csv") == []
    check_declared_crs(workspace / "t.csv", argument="table_path", workspace_root=workspace)


def test_shapefile_without_prj_declares_nothing(workspace: Path) -> None:
    from mapsmith.crsguard import read_declared_crs

    shp = _points(workspace / "n.shp", "EPSG:4326")
    shp.with_suffix(".prj").unlink()
    assert read_declared_crs(shp) == []


def test_damaged_geopackage_is_refused_not_passed(workspace: Path) -> None:
    from mapsmith.crsguard import check_declared_crs

    (workspace / "d.gpkg").write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(MapSmithError) as info:
        check_declared_crs(workspace / "d.gpkg", argument="input_path", workspace_root=workspace)
    assert info.value.code == "CRS_DECLARATION_UNREADABLE"


def test_without_a_workspace_nothing_is_checked(tmp_path: Path) -> None:
    from mapsmith.crsguard import check_declared_crs

    (tmp_path / "x.nc").write_bytes(b"CDF\x01")
    check_declared_crs(tmp_path / "x.nc", argument="input_path", workspace_root=None)  # unconfined: no refusal
