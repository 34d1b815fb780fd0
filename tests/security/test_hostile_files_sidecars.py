"""Files GDAL opens beside the one named are held to the same path policy as the named file.

An overview (``.ovr``) or mask (``.msk``) that is a VRT, a symlinked ``.prj``/``.dbf``/``.aux.xml``/world
file/SQLite journal leading out of the workspace, a hard link, a FIFO: each made by the test next to
an ordinary input, with the file it reaches in ``outside/`` beside the workspace. Before these walls,
MapSmith read through them (the outside CRS, the outside attributes). Each is now refused with a
code naming the sidecar; the clean twins (real overviews, world files, shapefile members, a symlink
that stays inside) are still read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError
from security.hostile_files import write_tif as _tif


def _shapefile(path: Path, crs: str = "EPSG:4326") -> Path:
    import geopandas as gpd
    from shapely.geometry import Point

    gpd.GeoDataFrame({"name": ["inside"]}, geometry=[Point(1, 2)], crs=crs).to_file(path)
    return path


@pytest.fixture
def outside(workspace: Path) -> Path:
    folder = workspace.parent / "outside"
    folder.mkdir()
    _tif(folder / "secret.tif", value=77, size=4)
    from pyproj import CRS

    (folder / "secret.prj").write_text(CRS("EPSG:32633").to_wkt("WKT1_ESRI"), "utf-8")
    _shapefile(folder / "secret.shp")
    return folder


def _vrt(source: Path) -> str:
    return (
        '<VRTDataset rasterXSize="4" rasterYSize="4"><VRTRasterBand dataType="Byte" band="1"><SimpleSource>'
        f"<SourceFilename>{source}</SourceFilename><SourceBand>1</SourceBand></SimpleSource></VRTRasterBand>"
        "</VRTDataset>"
    )


def _refused(app: Any, name: str, code: str, operation: str = "describe_dataset") -> MapSmithError:
    with pytest.raises(MapSmithError) as info:
        app.run(operation, {"input_path": name})
    assert info.value.code == code, info.value.to_dict()
    assert info.value.hint
    return info.value


# -- overviews and masks that are VRTs ---------------------------------------------------------


@pytest.mark.parametrize("sidecar", ["a.tif.ovr", "a.tif.msk"])
def test_overview_or_mask_that_is_a_vrt_is_refused(app: Any, workspace: Path, outside: Path, sidecar: str) -> None:
    import rasterio

    _tif(workspace / "a.tif")
    (workspace / sidecar).write_text(_vrt(outside / "secret.tif"), "utf-8")
    if sidecar.endswith(".ovr"):
        # Why this matters: GDAL opens the .ovr with any driver, even when the .tif was opened as GTiff
        # only, and a decimated read returns the outside file's cells (77) instead of the input's (5).
        with rasterio.open(workspace / "a.tif", driver="GTiff") as ds:
            assert ds.read(1, out_shape=(4, 4))[0, 0] == 77
    error = _refused(app, "a.tif", "SIDECAR_FORMAT_UNEXPECTED", "band_statistics")
    assert error.evidence["sidecar"] == sidecar


# -- symlinks out of the workspace -----------------------------------------------------------------


def test_shapefile_prj_symlinked_outside_is_refused(app: Any, workspace: Path, outside: Path) -> None:
    _shapefile(workspace / "p.shp")
    (workspace / "p.prj").unlink()
    (workspace / "p.prj").symlink_to(outside / "secret.prj")  # main read EPSG:32633 from outside
    error = _refused(app, "p.shp", "SIDECAR_OUTSIDE_WORKSPACE")
    assert (error.evidence["file"], error.evidence["member_of"]) == ("p.prj", "p.shp")


def test_shapefile_dbf_symlinked_outside_is_refused(app: Any, workspace: Path, outside: Path) -> None:
    _shapefile(workspace / "p.shp")
    (workspace / "p.dbf").unlink()
    (workspace / "p.dbf").symlink_to(outside / "secret.dbf")
    assert _refused(app, "p.shp", "SIDECAR_OUTSIDE_WORKSPACE").evidence["file"] == "p.dbf"


@pytest.mark.parametrize(
    ("sidecar", "target"),
    [
        ("a.tif.aux.xml", "secret.prj"),
        ("a.tfw", "secret.prj"),
        ("A.TFW", "secret.prj"),  # GDAL finds sidecars case-blind
        ("a.tif.ovr", "secret.tif"),  # a real TIFF, but outside
        ("a.tif.msk", "secret.tif"),
        ("a_rpc.txt", "secret.prj"),
    ],
)
def test_raster_sidecar_symlinked_outside_is_refused(
    app: Any, workspace: Path, outside: Path, sidecar: str, target: str
) -> None:
    _tif(workspace / "a.tif")
    (workspace / sidecar).symlink_to(outside / target)
    assert _refused(app, "a.tif", "SIDECAR_OUTSIDE_WORKSPACE").evidence["file"] == sidecar


def test_dangling_symlink_sidecar_pointing_outside_is_refused(app: Any, workspace: Path, outside: Path) -> None:
    _tif(workspace / "a.tif")
    (workspace / "a.tif.aux.xml").symlink_to(outside / "not-there-yet.xml")
    assert _refused(app, "a.tif", "SIDECAR_OUTSIDE_WORKSPACE").evidence["file"] == "a.tif.aux.xml"


def test_geopackage_journal_symlinked_outside_is_refused(app: Any, workspace: Path, outside: Path) -> None:
    import geopandas as gpd
    from shapely.geometry import Point

    gpd.GeoDataFrame({"n": [1]}, geometry=[Point(0, 0)], crs="EPSG:4326").to_file(workspace / "g.gpkg")
    (workspace / "g.gpkg-wal").symlink_to(outside / "secret.prj")  # SQLite opens it beside the database
    assert _refused(app, "g.gpkg", "SIDECAR_OUTSIDE_WORKSPACE").evidence["file"] == "g.gpkg-wal"


# -- hard links and special files ----------------------------------------------------------------


def test_hard_linked_sidecar_is_refused(app: Any, workspace: Path, outside: Path) -> None:
    _shapefile(workspace / "p.shp")
    (workspace / "p.prj").unlink()
    os.link(outside / "secret.prj", workspace / "p.prj")  # the outside .prj under an inside name
    error = _refused(app, "p.shp", "PATH_HARD_LINK")
    assert (error.evidence["file"], error.evidence["hard_links"]) == ("p.prj", 2)


def test_hard_linked_input_is_refused(app: Any, workspace: Path, outside: Path) -> None:
    os.link(outside / "secret.tif", workspace / "a.tif")
    error = _refused(app, "a.tif", "PATH_HARD_LINK")
    assert error.evidence["file"] == "a.tif"
    assert "member_of" not in error.evidence


def test_fifo_sidecar_is_refused(app: Any, workspace: Path) -> None:
    _tif(workspace / "a.tif")
    os.mkfifo(workspace / "a.tif.aux.xml")  # GDAL would block reading it
    assert _refused(app, "a.tif", "PATH_NOT_REGULAR_FILE").evidence["file"] == "a.tif.aux.xml"


def test_provenance_sidecar_policy(tmp_path: Path, outside: Path) -> None:
    """``Workspace.check_sidecar`` is the check get_provenance makes on ``<dataset>.provenance.json``."""
    from mapsmith.workspace import Workspace

    # Not the fixture's workspace: its teardown validates every manifest in it, and these are bait.
    workspace = tmp_path / "records"
    workspace.mkdir()
    ws = Workspace(root=workspace, allow_remote=False)
    (workspace / "inside.json").write_text("{}", "utf-8")
    (workspace / "a.gpkg.provenance.json").symlink_to(outside / "secret.prj")
    (workspace / "b.gpkg.provenance.json").symlink_to(workspace / "inside.json")
    with pytest.raises(MapSmithError) as info:
        ws.check_sidecar(workspace / "a.gpkg.provenance.json", argument="path")
    assert info.value.code == "SIDECAR_OUTSIDE_WORKSPACE"
    assert info.value.evidence["resolved_path"] == str(outside / "secret.prj")
    ws.check_sidecar(workspace / "b.gpkg.provenance.json", argument="path")  # a symlink that stays inside
    ws.check_sidecar(workspace / "missing.provenance.json", argument="path")  # nothing to open
    Workspace(root=None, allow_remote=False).check_sidecar(workspace / "a.gpkg.provenance.json", argument="path")


# -- clean twins ---------------------------------------------------------------------------------


def test_geotiff_with_real_sidecars_inside_is_read(app: Any, workspace: Path) -> None:
    import rasterio
    from rasterio.enums import Resampling

    _tif(workspace / "a.tif", value=9, size=16)
    # TIFF_USE_OVR: GDAL writes the overviews to an external a.tif.ovr, not into a.tif.
    with rasterio.Env(TIFF_USE_OVR=True), rasterio.open(workspace / "a.tif", "r+") as ds:
        ds.build_overviews([2], Resampling.nearest)
    assert (workspace / "a.tif.ovr").read_bytes()[:4] == b"II*\x00"
    (workspace / "a.tfw").write_text("10\n0\n0\n-10\n500005\n3999995\n", "utf-8")
    (workspace / "a.tif.aux.xml").write_text("<PAMDataset><Metadata><MDI key='k'>v</MDI></Metadata></PAMDataset>")
    assert app.run("band_statistics", {"input_path": "a.tif"}).status == "ok"
    answer = app.run("describe_dataset", {"input_path": "a.tif"}).answer
    assert answer["described"]["driver"] == "GTiff"
    assert answer["grid"]["width"] == 16


def test_shapefile_with_members_inside_and_an_inside_symlink_is_read(app: Any, workspace: Path) -> None:
    _shapefile(workspace / "p.shp", crs="EPSG:32633")
    (workspace / "p.cpg").write_text("UTF-8", "ascii")
    (workspace / "keep").mkdir()
    (workspace / "p.prj").rename(workspace / "keep" / "real.prj")
    (workspace / "p.prj").symlink_to(workspace / "keep" / "real.prj")  # stays inside: allowed
    (described,) = app.run("describe_dataset", {"input_path": "p.shp"}).answer["described"]
    assert (described["crs"], described["fields"], described["feature_count"]) == ("EPSG:32633", ["name"], 1)


def test_walls_off_skips_the_member_checks(workspace: Path, outside: Path, monkeypatch: Any) -> None:
    from mapsmith import gdalpolicy
    from mapsmith.workspace import Workspace

    _tif(workspace / "a.tif")
    (workspace / "a.tfw").symlink_to(outside / "secret.prj")
    ws = Workspace(root=workspace, allow_remote=False)
    with pytest.raises(MapSmithError):
        gdalpolicy.check_members(workspace / "a.tif", ws, argument="input_path")
    monkeypatch.setenv(gdalpolicy.PARSER_WALLS_ENV, "off")
    gdalpolicy.check_members(workspace / "a.tif", ws, argument="input_path")


def test_member_names_match_gdal_sidecar_forms() -> None:
    from mapsmith.gdalpolicy import member_names

    names = ["a.tif", "a.tif.ovr", "A.TFW", "a_rpc.txt", "a.tif.aux.xml", "ab.tif", "a", "b.tfw", "a.gpkg-wal"]
    names += ["METADATA.DIM", "DIM_X.XML", "other.xml"]
    assert member_names(Path("/w/a.tif"), names) == [
        "A.TFW",
        "DIM_X.XML",
        "METADATA.DIM",
        "a.gpkg-wal",
        "a.tif.aux.xml",
        "a.tif.ovr",
        "a_rpc.txt",
    ]
