"""The foundation's vector operations on the opensource stack, against values worked out by hand.

Each expected number is derived in the comment beside it, before the code ran: closed-form
polygon areas, meridian arc lengths, unit conversions. The workspace fixture validates every
manifest a test leaves behind against the published schema.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from shapely.geometry import LineString, Point, Polygon, box

from layers import manifest, read, write_layer
from mapsmith.errors import CRSError, CRSRequired, GeometryTypeRefused, InputError, OutputError, PathError

# A 64-gon (16 segments per quarter circle) of radius r has area 32 * sin(pi/32) * r^2.
POLYGON64_FACTOR = 32 * math.sin(math.pi / 32)  # 3.1365484905...
US_SURVEY_FOOT_M = 1200 / 3937


def test_measure_area_of_a_small_square_at_46n_is_its_ground_area(app, workspace: Path) -> None:
    # A 0.0015 x 0.0015 degree square at 46.2 N. On WGS 84 at the square's centre latitude
    # phi = 46.20075: N = a / sqrt(1 - e2 sin^2 phi) = 6,388,874 m, M = a (1 - e2) / (1 - e2 sin^2 phi)^1.5
    # = 6,367,930 m (a = 6378137, e2 = 0.00669438). Width = N cos(phi) * 0.0015 * pi/180 = 115.85 m,
    # height = M * 0.0015 * pi/180 = 166.71 m; area = 19,303 m2 (the figure).
    write_layer(workspace / "sq.geojson", [box(-122.0, 46.2, -121.9985, 46.2015)], "EPSG:4326", name=["a"])
    result = app.run("measure_area", {"input_path": "sq.geojson", "output_path": "sq_area.gpkg"})
    assert result.answer["total_area_m2"] == pytest.approx(19303, abs=1.0)
    assert result.answer["rows"] == [{"name": "a", "area_m2": pytest.approx(19303, abs=1.0)}]
    out = read(workspace / "sq_area.gpkg")
    assert out["area_m2"].iloc[0] == pytest.approx(19303, abs=1.0)
    record = manifest(workspace / "sq_area.gpkg")
    assert record["operation"] == "measure_area"
    assert record["parameters"]["method"] == "geodesic"
    assert "WGS 84" in record["crs_decisions"]["reason"]
    assert record["output"]["crs"] == "EPSG:4326"
    assert {c["name"] for c in record["verification"]} >= {"crs_present", "crs_matches", "feature_count_exact"}


def test_buffer_of_a_point_in_degrees_matches_the_same_buffer_in_its_utm_zone(app, workspace: Path) -> None:
    # In UTM 10N a 1,000 m buffer (64-gon) has planar area 3.1365485 * 1e6 m2 = 3,136,548 m2.
    # The EPSG:4326 buffer is computed in that zone and transformed back; its ground area must be
    # within 0.5 % of that (UTM's scale 0.9996..1.0004 near the point changes area by < 0.1 %).
    write_layer(workspace / "pt.geojson", [Point(-122.2, 46.2)], "EPSG:4326", id=[1])
    app.run("buffer_layer", {"input_path": "pt.geojson", "distance_meters": 1000, "output_path": "buf.gpkg"})
    measured = app.run("measure_area", {"input_path": "buf.gpkg", "output_path": "buf_area.gpkg"})
    assert measured.answer["total_area_m2"] == pytest.approx(POLYGON64_FACTOR * 1e6, rel=0.005)
    record = manifest(workspace / "buf.gpkg")
    decisions = record["crs_decisions"]
    assert decisions["analysis_crs"] == "EPSG:32610"
    assert decisions["source_crs"] == "EPSG:4326"
    # both legs measured separately: the return leg is the inverse projection, not a copy
    legs = decisions["round_trip"]
    assert "+zone=10" in legs["transformation"]["pipeline"]
    assert "+inv" in legs["return_transformation"]["pipeline"]
    assert legs["transformation"]["pipeline"] != legs["return_transformation"]["pipeline"]
    assert read(workspace / "buf.gpkg").crs.to_epsg() == 4326


def test_buffer_in_us_survey_feet_converts_metres_with_the_crs_unit(app, workspace: Path) -> None:
    # EPSG:2227 (California zone 3, US survey feet): 1,000 m = 1000 / (1200/3937) = 3,280.8333 ftUS.
    # The 64-gon's planar area is 3.1365485 * 3280.8333^2 = 33,761,250 ft2.
    from pyproj import Transformer

    x, y = Transformer.from_crs(4326, 2227, always_xy=True).transform(-122.0, 37.5)
    write_layer(workspace / "pt.gpkg", [Point(x, y)], "EPSG:2227", id=[1])
    result = app.run("buffer_layer", {"input_path": "pt.gpkg", "distance_meters": 1000, "output_path": "buf.gpkg"})
    radius_ft = 1000 / US_SURVEY_FOOT_M
    assert result.crs_decisions["analysis_crs"] == "EPSG:2227"
    out = read(workspace / "buf.gpkg")
    assert out.geometry.area.iloc[0] == pytest.approx(POLYGON64_FACTOR * radius_ft**2, rel=1e-9)
    assert manifest(workspace / "buf.gpkg")["parameters"]["x-mapsmith:distance_in_analysis_units"] == pytest.approx(
        radius_ft, rel=1e-12
    )


def test_buffer_in_web_mercator_is_computed_in_utm_not_in_stretched_metres(app, workspace: Path) -> None:
    # At 46.2 N Web Mercator's scale is 1/cos(46.2) = 1.444: a naive 1,000-unit buffer would cover
    # only 3.1365e6 / 1.444^2 = 1.50e6 m2 of ground. MapSmith must buffer 1,000 m of ground.
    from pyproj import Transformer

    x, y = Transformer.from_crs(4326, 3857, always_xy=True).transform(-122.2, 46.2)
    write_layer(workspace / "pt.gpkg", [Point(x, y)], "EPSG:3857", id=[1])
    result = app.run("buffer_layer", {"input_path": "pt.gpkg", "distance_meters": 1000, "output_path": "buf.gpkg"})
    assert result.crs_decisions["analysis_crs"] == "EPSG:32610"
    assert "distorts distances by 44" in result.crs_decisions["reason"]
    measured = app.run("measure_area", {"input_path": "buf.gpkg", "output_path": "area.gpkg"})
    assert measured.answer["total_area_m2"] == pytest.approx(POLYGON64_FACTOR * 1e6, rel=0.005)


def test_planar_area_only_in_an_equal_area_crs_and_with_its_own_unit(app, workspace: Path) -> None:
    # EPSG:6933 (EASE-Grid 2.0, equal-area on the ellipsoid): a 1,000 m square is 1,000,000 m2,
    # planar and geodesic alike (geodesic within 0.01 %).
    write_layer(workspace / "ease.gpkg", [box(1_000_000, 5_000_000, 1_001_000, 5_001_000)], "EPSG:6933", id=[1])
    planar = app.run("measure_area", {"input_path": "ease.gpkg", "output_path": "p.gpkg", "method": "planar"})
    assert planar.answer["total_area_m2"] == pytest.approx(1_000_000, abs=1e-6)
    geodesic = app.run("measure_area", {"input_path": "ease.gpkg", "output_path": "g.gpkg"})
    assert geodesic.answer["total_area_m2"] == pytest.approx(1_000_000, rel=1e-4)
    # Albers in US survey feet: a 1,000 ftUS square is 1e6 * (1200/3937)^2 = 92,903.41 m2
    # (international feet would give 92,903.04 m2: the test tells the two apart).
    albers_ftus = "+proj=aea +lat_1=29.5 +lat_2=45.5 +lat_0=23 +lon_0=-96 +datum=NAD83 +units=us-ft +no_defs"
    write_layer(workspace / "aea.gpkg", [box(0, 3_000_000, 1000, 3_001_000)], albers_ftus, id=[1])
    feet = app.run("measure_area", {"input_path": "aea.gpkg", "output_path": "f.gpkg", "method": "planar"})
    assert feet.answer["total_area_m2"] == pytest.approx(92_903.41, abs=0.01)
    # UTM is conformal, not equal-area: planar is answered, with its scale error at the data stated.
    # At the central meridian UTM's scale is k0 = 0.9996, so planar areas are k0^2 - 1 = -0.08 % off.
    write_layer(workspace / "utm.gpkg", [box(500_000, 5_000_000, 501_000, 5_001_000)], "EPSG:32610", id=[1])
    utm = app.run("measure_area", {"input_path": "utm.gpkg", "output_path": "u.gpkg", "method": "planar"})
    assert utm.answer["total_area_m2"] == pytest.approx(1_000_000, abs=1e-6)
    assert utm.answer["planar_scale_error"]["relative"] == pytest.approx(0.9996**2 - 1, abs=1e-6)


def test_measure_area_subtracts_holes(app, workspace: Path) -> None:
    # EPSG:6933 square 1,000 m with a 200 m x 300 m hole: 1,000,000 - 60,000 = 940,000 m2.
    shell = [(0, 0), (1000, 0), (1000, 1000), (0, 1000)]
    hole = [(100, 100), (300, 100), (300, 400), (100, 400)]
    write_layer(workspace / "holed.gpkg", [Polygon(shell, [hole])], "EPSG:6933", id=[1])
    result = app.run("measure_area", {"input_path": "holed.gpkg", "output_path": "a.gpkg"})
    assert result.answer["total_area_m2"] == pytest.approx(940_000, rel=1e-4)


@pytest.mark.parametrize(
    ("geometry", "family"),
    [(LineString([(0, 0), (1, 1)]), "line"), (Point(0, 0), "point")],
)
def test_measure_area_refuses_lines_and_points(app, workspace: Path, geometry, family) -> None:
    write_layer(workspace / "g.gpkg", [geometry], "EPSG:4326", id=[1])
    with pytest.raises(GeometryTypeRefused) as err:
        app.run("measure_area", {"input_path": "g.gpkg", "output_path": "a.gpkg"})
    assert err.value.code == "GEOMETRY_TYPE_REFUSED"
    assert family in err.value.message
    assert not (workspace / "a.gpkg").exists()


def test_reproject_puts_a_point_on_the_central_meridian_where_the_meridian_arc_says(app, workspace: Path) -> None:
    # UTM 10N's central meridian is 123 W. The WGS 84 meridian arc from the equator to 45 N is
    # 4,984,944.378 m; with k0 = 0.9996 the northing is 4,982,950.400 m, the easting 500,000 m.
    write_layer(workspace / "p.geojson", [Point(-123.0, 45.0)], "EPSG:4326", id=[1])
    result = app.run(
        "reproject_layer", {"input_path": "p.geojson", "target_crs": "EPSG:32610", "output_path": "p.gpkg"}
    )
    geom = read(workspace / "p.gpkg").geometry.iloc[0]
    assert geom.x == pytest.approx(500_000.0, abs=1e-3)
    assert geom.y == pytest.approx(4_982_950.400, abs=0.01)
    transformation = result.crs_decisions["transformation"]
    assert transformation["is_ballpark"] is False
    assert "+proj=utm" in transformation["pipeline"]
    assert manifest(workspace / "p.gpkg")["output"]["crs"] == "EPSG:32610"


def test_reproject_refuses_an_srid_without_authority(app, workspace: Path) -> None:
    write_layer(workspace / "p.geojson", [Point(-123.0, 45.0)], "EPSG:4326", id=[1])
    with pytest.raises(CRSError) as err:
        app.run("reproject_layer", {"input_path": "p.geojson", "target_crs": "srid:32610", "output_path": "p.gpkg"})
    assert err.value.code == "CRS_AMBIGUOUS_SRID"


def test_clip_keeps_what_is_inside_and_counts_what_it_drops(app, workspace: Path) -> None:
    # Mask: x -10..150, y -10..150 (EPSG:32610). Parcels: A 0..100 wholly inside (10,000 m2);
    # B 100..200 half inside (100..150 x 0..100 = 5,000 m2); C 300..400 outside; D 150..250 touches
    # the mask's edge only. Expected: 2 features, areas 10,000 and 5,000; 1 outside, 1 touching.
    parcels = [box(0, 0, 100, 100), box(100, 0, 200, 100), box(300, 0, 400, 100), box(150, 0, 250, 100)]
    write_layer(workspace / "parcels.gpkg", parcels, "EPSG:32610", pid=["A", "B", "C", "D"])
    write_layer(workspace / "mask.gpkg", [box(-10, -10, 150, 150)], "EPSG:32610", id=[1])
    result = app.run("clip_layer", {"input_path": "parcels.gpkg", "mask_path": "mask.gpkg", "output_path": "c.gpkg"})
    out = read(workspace / "c.gpkg").set_index("pid")
    assert sorted(out.index) == ["A", "B"]
    assert out.geometry.area.to_dict() == {"A": pytest.approx(10_000), "B": pytest.approx(5_000)}
    assert "1 lie wholly outside the mask, 1 only touch it" in result.notes[0]
    record = manifest(workspace / "c.gpkg")
    bounded = next(c for c in record["verification"] if c["name"] == "feature_count_bounded")
    assert bounded["passed"] and "at most 4" in bounded["detail"]
    assert {i["argument"] for i in record["inputs"]} == {"input_path", "mask_path"}


def test_clip_transforms_a_mask_in_another_crs_and_records_it(app, workspace: Path) -> None:
    # The mask is the UTM square -10..150 expressed in lon/lat; transformed back it is the same square
    # within millimetres, so parcel B is still clipped to 5,000 m2.
    from pyproj import Transformer

    to_ll = Transformer.from_crs(32610, 4326, always_xy=True)
    x0, y0, x1, y1 = 499_990, 5_000_000 - 10, 500_150, 5_000_150
    ring = [to_ll.transform(x, y) for x, y in [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]]
    write_layer(workspace / "mask.geojson", [Polygon(ring)], "EPSG:4326", id=[1])
    write_layer(workspace / "parcels.gpkg", [box(500_100, 5_000_000, 500_200, 5_000_100)], "EPSG:32610", pid=["B"])
    result = app.run("clip_layer", {"input_path": "parcels.gpkg", "mask_path": "mask.geojson", "output_path": "c.gpkg"})
    assert read(workspace / "c.gpkg").geometry.area.iloc[0] == pytest.approx(5_000, rel=1e-6)
    assert result.crs_decisions["analysis_crs"] == "EPSG:32610"
    aligned = result.crs_decisions["x-mapsmith:alignment"]["mask_path"]
    assert (aligned["source_crs"], aligned["target_crs"]) == ("EPSG:4326", "EPSG:32610")
    assert "+proj=utm" in aligned["transformation"]["pipeline"]
    share = next(c for c in result.checks if c["name"] == "inputs_share_crs")
    assert share["passed"] is False and "transformed" in share["detail"]


def test_clip_with_a_mask_elsewhere_warns_and_returns_an_empty_result(app, workspace: Path) -> None:
    write_layer(workspace / "parcels.gpkg", [box(0, 0, 100, 100)], "EPSG:32610", pid=["A"])
    write_layer(workspace / "mask.gpkg", [box(50_000, 50_000, 50_100, 50_100)], "EPSG:32610", id=[1])
    result = app.run("clip_layer", {"input_path": "parcels.gpkg", "mask_path": "mask.gpkg", "output_path": "c.gpkg"})
    assert result.status == "ok_with_warnings"
    assert [w["code"] for w in result.warnings] == ["EXTENTS_DO_NOT_OVERLAP"]
    assert result.warnings[0]["hint"]
    assert len(read(workspace / "c.gpkg")) == 0


def test_empty_input_warns_in_the_tool_result(app, workspace: Path) -> None:
    write_layer(workspace / "empty.gpkg", [], "EPSG:32610", id=[])
    result = app.run("buffer_layer", {"input_path": "empty.gpkg", "distance_meters": 10, "output_path": "b.gpkg"})
    assert "INPUT_EMPTY" in [w["code"] for w in result.warnings]
    assert len(read(workspace / "b.gpkg")) == 0


@pytest.mark.filterwarnings("ignore:'crs' was not provided")
def test_input_without_crs_is_refused(app, workspace: Path) -> None:
    write_layer(workspace / "nocrs.gpkg", [box(0, 0, 1, 1)], None, id=[1])
    with pytest.raises(CRSRequired) as err:
        app.run("buffer_layer", {"input_path": "nocrs.gpkg", "distance_meters": 10, "output_path": "b.gpkg"})
    assert err.value.code == "CRS_REQUIRED"
    assert err.value.evidence["argument"] == "input_path"
    assert not list(workspace.glob("b.gpkg*"))  # refused before anything was written


def test_multi_layer_container_needs_a_layer_name_and_extract_layer_copies_one(app, workspace: Path) -> None:
    path = workspace / "city.gpkg"
    write_layer(path, [box(0, 0, 10, 10)], "EPSG:32610", layer="parcels", id=[1])
    write_layer(
        path, [LineString([(0, 0), (5, 5)]), LineString([(1, 0), (1, 5)])], "EPSG:32610", layer="roads", id=[1, 2]
    )
    with pytest.raises(InputError) as err:
        app.run("buffer_layer", {"input_path": "city.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    assert err.value.code == "LAYER_REQUIRED"
    assert err.value.evidence["layers"] == ["parcels", "roads"]
    assert "extract_layer" in err.value.hint
    app.run("extract_layer", {"input_path": "city.gpkg", "layer": "roads", "output_path": "roads.gpkg"})
    assert len(read(workspace / "roads.gpkg")) == 2
    record = manifest(workspace / "roads.gpkg")
    assert record["inputs"][0]["layer"] == "roads"
    # naming the layer works directly too
    app.run(
        "buffer_layer", {"input_path": "city.gpkg", "layer": "roads", "distance_meters": 1, "output_path": "b.gpkg"}
    )
    with pytest.raises(InputError) as missing:
        app.run("extract_layer", {"input_path": "city.gpkg", "layer": "rivers", "output_path": "r.gpkg"})
    assert missing.value.code == "LAYER_NOT_FOUND"


@pytest.mark.parametrize("suffix", [".parquet", ".fgb", ".gpkg"])
def test_convert_format_round_trips_count_crs_and_fields(app, workspace: Path, suffix: str) -> None:
    write_layer(workspace / "in.gpkg", [box(0, 0, 1, 1), box(2, 2, 3, 3)], "EPSG:32610", long_field_name=["a", "b"])
    result = app.run("convert_format", {"input_path": "in.gpkg", "output_path": f"out{suffix}"})
    out = read(workspace / f"out{suffix}")
    assert len(out) == 2 and out.crs.to_epsg() == 32610
    # FlatGeobuf's spatial index reorders features; the manifest says so rather than hiding it
    assert sorted(out["long_field_name"]) == ["a", "b"]
    assert (suffix == ".fgb") == any("Hilbert" in n for n in result.notes)
    assert any(c["name"] == "x-mapsmith:fields_preserved" and c["passed"] for c in result.checks)


def test_convert_format_refuses_shapefile_and_non_wgs84_geojson(app, workspace: Path) -> None:
    write_layer(workspace / "in.gpkg", [box(0, 0, 1, 1)], "EPSG:32610", id=[1])
    with pytest.raises(OutputError) as shp:
        app.run("convert_format", {"input_path": "in.gpkg", "output_path": "out.shp"})
    assert shp.value.code == "OUTPUT_FORMAT_REFUSED" and "truncates field names" in shp.value.message
    with pytest.raises(OutputError) as geojson:
        app.run("convert_format", {"input_path": "in.gpkg", "output_path": "out.geojson"})
    assert geojson.value.code == "GEOJSON_REQUIRES_WGS84"
    assert "reproject_layer" in geojson.value.hint
    assert not list(workspace.glob("out.*"))


def test_invalid_output_geometry_is_repaired_and_disclosed(app, workspace: Path) -> None:
    # A bow-tie (self-intersecting) square: make_valid splits it into two triangles of 0.25 each.
    bowtie = Polygon([(0, 0), (1, 1), (1, 0), (0, 1), (0, 0)])
    write_layer(workspace / "bow.gpkg", [bowtie], "EPSG:32610", id=[1])
    result = app.run("convert_format", {"input_path": "bow.gpkg", "output_path": "fixed.gpkg"})
    assert result.repairs and result.repairs[0]["resolved"] is True
    assert "OUTPUT_REPAIRED" in [w["code"] for w in result.warnings]
    out = read(workspace / "fixed.gpkg").geometry.iloc[0]
    assert out.is_valid and out.area == pytest.approx(0.5)
    record = manifest(workspace / "fixed.gpkg")
    assert record["repairs"][0]["check"] == "geometry_valid"
    assert next(c for c in record["verification"] if c["name"] == "geometry_valid")["passed"]
    # the input is untouched
    assert not read(workspace / "bow.gpkg").geometry.iloc[0].is_valid


def test_outputs_never_overwrite_inputs_or_existing_results_unasked(app, workspace: Path) -> None:
    write_layer(workspace / "in.gpkg", [box(0, 0, 1, 1)], "EPSG:32610", id=[1])
    before = (workspace / "in.gpkg").read_bytes()
    with pytest.raises(OutputError) as same:
        app.run(
            "buffer_layer", {"input_path": "in.gpkg", "distance_meters": 1, "output_path": "in.gpkg", "overwrite": True}
        )
    assert same.value.code == "OUTPUT_IS_INPUT"
    assert (workspace / "in.gpkg").read_bytes() == before
    app.run("buffer_layer", {"input_path": "in.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    first = manifest(workspace / "b.gpkg")
    with pytest.raises(OutputError) as exists:
        app.run("buffer_layer", {"input_path": "in.gpkg", "distance_meters": 2, "output_path": "b.gpkg"})
    assert exists.value.code == "OUTPUT_EXISTS" and "overwrite" in exists.value.hint
    assert manifest(workspace / "b.gpkg") == first
    app.run("buffer_layer", {"input_path": "in.gpkg", "distance_meters": 2, "output_path": "b.gpkg", "overwrite": True})
    second = manifest(workspace / "b.gpkg")
    assert second["parameters"]["distance_meters"] == 2 and second["output"]["sha256"] != first["output"]["sha256"]
    assert not [p.name for p in workspace.iterdir() if p.name.startswith(".")]  # no temp files left


def test_paths_outside_the_workspace_are_refused_before_anything_is_read(app, workspace: Path) -> None:
    outside = workspace.parent / "outside.gpkg"
    write_layer(outside, [box(0, 0, 1, 1)], "EPSG:32610", id=[1])
    with pytest.raises(PathError) as err:
        app.run("buffer_layer", {"input_path": "../outside.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    assert err.value.code == "PATH_OUTSIDE_WORKSPACE"
    with pytest.raises(PathError):
        app.run("buffer_layer", {"input_path": str(outside), "distance_meters": 1, "output_path": "b.gpkg"})


def test_describe_dataset_lists_layers_without_refusing_a_container(app, workspace: Path) -> None:
    path = workspace / "city.gpkg"
    write_layer(path, [box(0, 0, 10, 10)], "EPSG:32610", layer="parcels", id=[1])
    write_layer(path, [Point(1, 1), Point(2, 2), Point(3, 3)], "EPSG:4326", layer="wells", id=[1, 2, 3])
    result = app.run("describe_dataset", {"input_path": "city.gpkg"})
    assert result.answer["layers"] == ["parcels", "wells"]
    by_layer = {d["layer"]: d for d in result.answer["described"]}
    assert by_layer["wells"]["feature_count"] == 3 and by_layer["wells"]["crs"] == "EPSG:4326"
    assert by_layer["parcels"]["bounds"] == [0.0, 0.0, 10.0, 10.0]
    assert result.manifest_path is None  # describing writes nothing, so no manifest
    json.dumps(result.to_dict())  # the answer is plain JSON


def test_a_shapefile_input_is_recorded_by_the_digest_of_its_member_listing(app, workspace: Path) -> None:
    # Spec §3.3: sha256 over "<ext>\0<sha256 of member>\n" lines, sorted, for .cpg .dbf .prj .shp .shx.
    import hashlib

    write_layer(workspace / "roads.shp", [box(0, 0, 1, 1)], "EPSG:32610", id=[1])
    members = sorted(p for p in workspace.iterdir() if p.stem == "roads")
    assert {p.suffix for p in members} >= {".shp", ".shx", ".dbf", ".prj"}
    listing = "".join(f"{p.suffix}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in members)
    app.run("buffer_layer", {"input_path": "roads.shp", "distance_meters": 1, "output_path": "b.gpkg"})
    (recorded,) = manifest(workspace / "b.gpkg")["inputs"]
    assert recorded["path"] == "roads.shp"
    assert recorded["sha256"] == hashlib.sha256(listing.encode()).hexdigest()


def test_geoparquet_input_keeps_its_crs_and_count(app, workspace: Path) -> None:
    write_layer(workspace / "in.parquet", [box(0, 0, 10, 10), box(20, 0, 30, 10)], "EPSG:32610", id=[1, 2])
    result = app.run("measure_area", {"input_path": "in.parquet", "output_path": "a.parquet"})
    # Eastings 0..30 in UTM 10N lie 500 km west of the central meridian, at the equator. There the
    # point scale is k = 0.9996 (1 + u^2 / 2), u = 500,000 / (0.9996 * 6,378,137) = 0.078424, so
    # k = 1.002674 and a 10 m x 10 m grid square covers 100 / k^2 = 99.467 m2 of ground.
    assert result.answer["feature_count"] == 2
    assert [r["area_m2"] for r in result.answer["rows"]] == [pytest.approx(99.467, rel=2e-4)] * 2
    assert read(workspace / "a.parquet").crs.to_epsg() == 32610
