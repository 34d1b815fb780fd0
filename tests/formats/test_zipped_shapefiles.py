"""Shapefiles inside a .zip: read through a /vsizip/ path MapSmith builds after checking every member.

The shapefiles are written in the test (their coordinates, names and encodings chosen here); the
zips are built member by member, so each refusal names a member the test put there, and each has a
clean twin that is read.
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import geopandas as gpd
import pytest
from shapely.geometry import Point, box

from layers import manifest, read
from mapsmith import containers
from mapsmith.errors import InputError, MapSmithError, PathError

MEMBERS = ("shp", "shx", "dbf", "prj", "cpg")


def shapefile(folder: Path, stem: str, encoding: str = "UTF-8", **columns: list) -> Path:
    geoms = columns.pop("geometry")
    frame = gpd.GeoDataFrame(columns, geometry=geoms, crs="EPSG:2056")
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_file(folder / f"{stem}.shp", engine="pyogrio", encoding=encoding)
    return folder / f"{stem}.shp"


def zip_members(target: Path, files: dict[str, Path | bytes]) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            # a ZipInfo keeps the name as given: ZipFile.write would normalise '..' and leading '/' away
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content.read_bytes() if isinstance(content, Path) else content)
    return target


def shapefile_members(shp: Path, prefix: str = "") -> dict[str, Path | bytes]:
    return {
        f"{prefix}{shp.stem}.{ext}": shp.with_suffix(f".{ext}")
        for ext in MEMBERS
        if shp.with_suffix(f".{ext}").exists()
    }


def test_a_cp1252_shapefile_in_a_zip_is_read_with_its_cpg(app, workspace: Path, tmp_path: Path) -> None:
    shp = shapefile(
        tmp_path / "src",
        "towns",
        encoding="cp1252",
        name=["Zürich", "Île"],
        geometry=[Point(2683000, 1248000), Point(2500000, 1117000)],
    )
    # the .dbf holds CP1252 bytes (ü = 0xFC, Î = 0xCE), and the .cpg says so
    dbf = shp.with_suffix(".dbf").read_bytes()
    assert b"Z\xfcrich" in dbf and b"\xcele" in dbf
    assert shp.with_suffix(".cpg").read_text().strip().upper() in ("CP1252", "1252")
    zip_members(workspace / "towns.zip", shapefile_members(shp, "data/"))

    described = app.run("describe_dataset", {"input_path": "towns.zip"}).answer
    layer = described["described"][0]
    assert described["layers"] == ["towns"]
    assert layer["driver"] == "ESRI Shapefile" and layer["crs"] == "EPSG:2056"
    assert layer["feature_count"] == 2
    assert layer["bounds"] == [2500000.0, 1117000.0, 2683000.0, 1248000.0]
    name = next(f for f in layer["field_details"] if f["name"] == "name")
    assert name["samples"] == ["Zürich", "Île"]
    assert name["type"] == "String" and name["null_count"] == 0

    app.run("convert_format", {"input_path": "towns.zip", "output_path": "towns.gpkg"})
    assert list(read(workspace / "towns.gpkg")["name"]) == ["Zürich", "Île"]  # GeoPackage text is UTF-8
    record = manifest(workspace / "towns.gpkg")
    assert record["inputs"][0]["sha256"]  # the zip's bytes, as given


def test_two_shapefiles_in_a_zip_are_two_layers_and_one_must_be_named(app, workspace: Path, tmp_path: Path) -> None:
    a = shapefile(tmp_path / "src", "a", id=[1], geometry=[box(0, 0, 10, 10)])
    b = shapefile(tmp_path / "src", "b", id=[2, 3], geometry=[box(0, 0, 1, 1), box(5, 5, 7, 7)])
    zip_members(workspace / "both.zip", {**shapefile_members(a), **shapefile_members(b)})
    assert app.run("describe_dataset", {"input_path": "both.zip"}).answer["layers"] == ["a", "b"]
    with pytest.raises(MapSmithError) as err:
        app.run("measure_area", {"input_path": "both.zip", "output_path": "x.gpkg"})
    assert not (workspace / "x.gpkg").exists()
    assert "a" in err.value.evidence.get("layers", []) or "layer" in err.value.hint
    # b: squares of 1 x 1 m and 2 x 2 m in EPSG:2056 (not equal-area, so measured geodesically): ~1 and ~4 m2
    answer = app.run("measure_area", {"input_path": "both.zip", "layer": "b", "output_path": "b.gpkg"}).answer
    assert answer["feature_count"] == 2
    assert [r["id"] for r in answer["rows"]] == [2, 3]


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        ("../evil.shp", "'..'"),
        ("data/../../evil.shp", "'..'"),
        ("/tmp/evil.shp", "absolute"),
    ],
)
def test_a_member_that_climbs_out_is_refused_and_the_clean_twin_is_read(
    app, workspace: Path, tmp_path: Path, member: str, reason: str
) -> None:
    shp = shapefile(tmp_path / "src", "evil", id=[7], geometry=[Point(2600000, 1200000)])
    members = shapefile_members(shp)
    hostile = {(member if name.endswith(".shp") else name): content for name, content in members.items()}
    zip_members(workspace / "evil.zip", hostile)
    with pytest.raises(InputError) as err:
        app.run("describe_dataset", {"input_path": "evil.zip"})
    assert err.value.code == "ARCHIVE_MEMBER_UNSAFE"
    assert reason in err.value.evidence["reason"]
    if not member.startswith("/"):  # an absolute name is redacted from evidence like any host path
        assert err.value.evidence["member"] == member
    zip_members(workspace / "clean.zip", members)
    answer = app.run("describe_dataset", {"input_path": "clean.zip"}).answer
    assert answer["described"][0]["feature_count"] == 1


def test_a_symlink_member_is_refused(app, workspace: Path, tmp_path: Path) -> None:
    shp = shapefile(tmp_path / "src", "s", id=[1], geometry=[Point(2600000, 1200000)])
    zip_members(workspace / "link.zip", shapefile_members(shp))
    with zipfile.ZipFile(workspace / "link.zip", "a") as archive:
        info = zipfile.ZipInfo("s.shp.xml")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    with pytest.raises(InputError) as err:
        app.run("describe_dataset", {"input_path": "link.zip"})
    assert err.value.code == "ARCHIVE_MEMBER_UNSAFE" and err.value.evidence["reason"] == "a symbolic link"


def test_an_archive_past_the_size_limit_is_refused(monkeypatch, tmp_path: Path) -> None:
    # three members of 400 bytes each: 1,200 bytes uncompressed, refused at a 1,000-byte limit
    archive = zip_members(tmp_path / "big.zip", {f"m{i}.dbf": b" " * 400 for i in range(3)})
    monkeypatch.setattr(containers, "MAX_UNCOMPRESSED_BYTES", 1000)
    with pytest.raises(InputError) as err:
        containers.check_zip(archive)
    assert err.value.code == "ARCHIVE_TOO_LARGE"
    assert err.value.evidence["size"] == 1200 and err.value.evidence["limit"] == 1000
    monkeypatch.setattr(containers, "MAX_UNCOMPRESSED_BYTES", 1200)
    assert containers.check_zip(archive).uncompressed_bytes == 1200


def test_a_deflate_bomb_member_is_refused(tmp_path: Path) -> None:
    # 8 MiB of zeros deflate to about 8 KiB: a ratio of about 1,000:1, past MAX_COMPRESSION_RATIO
    archive = zip_members(tmp_path / "bomb.zip", {"a.dbf": bytes(8 << 20)})
    with zipfile.ZipFile(archive) as z:
        info = z.getinfo("a.dbf")
    if info.file_size / info.compress_size <= containers.MAX_COMPRESSION_RATIO:
        pytest.skip(f"this zlib compressed zeros only {info.file_size / info.compress_size:.0f}:1")
    with pytest.raises(InputError) as err:
        containers.check_zip(archive)
    assert err.value.code == "ARCHIVE_MEMBER_UNSAFE" and "inflates" in err.value.evidence["reason"]


def test_a_zip_without_a_shapefile_is_refused(app, workspace: Path) -> None:
    zip_members(workspace / "notes.zip", {"readme.txt": b"hello"})
    with pytest.raises(InputError) as err:
        app.run("describe_dataset", {"input_path": "notes.zip"})
    assert err.value.code == "ARCHIVE_NO_DATASET"


def test_a_caller_given_vsizip_path_is_still_refused(app, workspace: Path, tmp_path: Path) -> None:
    shp = shapefile(tmp_path / "src", "s", id=[1], geometry=[Point(2600000, 1200000)])
    zip_members(workspace / "s.zip", shapefile_members(shp))
    with pytest.raises(PathError):
        app.run("describe_dataset", {"input_path": f"/vsizip/{workspace / 's.zip'}/s.shp"})


def test_a_prj_inside_the_zip_that_names_a_grid_outside_is_refused(app, workspace: Path, tmp_path: Path) -> None:
    shp = shapefile(tmp_path / "src", "g", id=[1], geometry=[Point(2600000, 1200000)])
    members = shapefile_members(shp)
    members["g.prj"] = b'GEOGCS["x",DATUM["D_WGS_1984",SPHEROID["WGS_1984",6378137,298.257223563]],' + (
        b'PRIMEM["Greenwich",0],UNIT["Degree",0.0174532925199433],EXTENSION["PROJ4_GRIDS","/etc/evil.gsb"]]'
    )
    zip_members(workspace / "g.zip", members)
    with pytest.raises(MapSmithError) as err:
        app.run("describe_dataset", {"input_path": "g.zip"})
    assert err.value.code == "CRS_REFERENCES_FILE"
    assert err.value.evidence["source"] == "g.prj in g.zip"


def test_the_checks_hold_without_a_workspace_too(tmp_path: Path) -> None:
    from mapsmith import gdalpolicy
    from mapsmith_opensource import io

    zip_members(tmp_path / "evil.zip", {"../evil.shp": b"\x00\x00\x27\x0a"})
    (tmp_path / "linked.kml").write_text(
        '<kml xmlns="http://www.opengis.net/kml/2.2"><NetworkLink><Link><href>x.kml</href></Link></NetworkLink></kml>'
    )
    for name, code in (("evil.zip", "ARCHIVE_MEMBER_UNSAFE"), ("linked.kml", "KML_EXTERNAL_REFERENCE")):
        with pytest.raises(InputError) as err:
            gdalpolicy.vector_source(tmp_path / name)
        assert err.value.code == code
        with pytest.raises(InputError) as err:
            io.read_layer(tmp_path / name)
        assert err.value.code == code
