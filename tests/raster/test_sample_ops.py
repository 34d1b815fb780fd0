"""Raster sampling on the opensource stack: at points, along lines, between two points, at the extreme cell.

Every expected value is worked out in the comment beside it before the code ran: planes whose
bilinear interpolation is exact, a point-registered arc-second grid whose samples fall on whole
arc-seconds, sight lines over flat ground and walls of known height, the curvature term
d^2 / (2R) (1 - k) on a 20 km flat line, and a hand grid with ties.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shapely.geometry import LineString, MultiPoint, Point

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError, InputError, MapSmithError

ARCSEC = 1 / 3600
R_EARTH = 6_371_000.0


def write_grid(
    path: Path,
    data: np.ndarray,
    transform: Any,
    crs: str = "EPSG:32610",
    nodata: float | None = None,
    tags: dict[str, str] | None = None,
    descriptions: list[str] | None = None,
) -> Path:
    import rasterio

    array = data if data.ndim == 3 else data[np.newaxis]
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=array.shape[2],
        height=array.shape[1],
        count=array.shape[0],
        dtype=array.dtype.name,
        crs=crs,
        transform=transform,
        nodata=nodata,
    ) as dst:
        dst.write(array)
        for i, name in enumerate(descriptions or ()):
            dst.set_band_description(i + 1, name)
        if tags:
            dst.update_tags(**tags)  # AREA_OR_POINT must be a dataset tag, not a creation option
    return path


def plane_dem(workspace: Path, name: str = "plane.tif") -> Path:
    """100 x 100 cells of 10 m from (500000, 5001000), EPSG:32610: z = 0.1 x' + 0.2 y' at each cell centre
    (x' = x - 500000, y' = y - 5000000). Centre of (row r, col c): x' = 10c + 5, y' = 995 - 10r, so
    z = 199.5 + c - 2r (half-integers: exact in float32). Cell (50, 50) is nodata (-9999)."""
    from rasterio.transform import from_origin

    rows, cols = np.mgrid[0:100, 0:100]
    z = (199.5 + cols - 2 * rows).astype("float32")
    z[50, 50] = -9999
    return write_grid(
        workspace / name, z, from_origin(500_000, 5_001_000, 10, 10), nodata=-9999, descriptions=["elevation"]
    )


# -- sample_raster_at_points ----------------------------------------------------------------------


def test_points_on_a_plane_get_the_cell_value_nearest_and_the_plane_value_bilinear(app, workspace: Path) -> None:
    plane_dem(workspace)
    points = [
        Point(500_012, 5_000_987),  # col floor(1.2)=1, row floor(1.3)=1 -> 199.5+1-2 = 198.5; plane 1.2+197.4 = 198.6
        Point(500_555, 5_000_555),  # a cell centre (col 55, row 44): 199.5+55-88 = 166.5 either way
        Point(499_990, 5_000_500),  # 10 m west of the grid: null, kept
        Point(500_505, 5_000_495),  # centre of the nodata cell (50, 50): null
        Point(500_512, 5_000_495),  # in cell (50, 51) = 199.5+51-100 = 150.5; bilinear needs (50, 50): null
    ]
    write_layer(workspace / "pts.gpkg", points, "EPSG:32610", id=[1, 2, 3, 4, 5])
    near = app.run(
        "sample_raster_at_points", {"input_path": "pts.gpkg", "raster_path": "plane.tif", "output_path": "near.gpkg"}
    )
    out = read(workspace / "near.gpkg")
    assert list(out["id"]) == [1, 2, 3, 4, 5]  # nothing dropped, order kept
    values = out["elevation"].tolist()  # the band's description names the field
    assert values[:2] == [198.5, 166.5]
    assert math.isnan(values[2]) and math.isnan(values[3])
    assert values[4] == 150.5
    assert near.answer["counts"]["elevation"] == {"sampled": 3, "outside": 1, "nodata": 1, "no_geometry": 0}
    assert any("1 of 5 points fall outside" in n and "1 on nodata" in n for n in near.notes)
    record = manifest(workspace / "near.gpkg")
    assert record["parameters"]["method"] == "nearest"
    assert record["parameters"]["x-mapsmith:sampled_fields"] == {"elevation": 1}
    assert {c["name"] for c in record["verification"]} >= {"feature_count_exact", "crs_matches"}

    app.run(
        "sample_raster_at_points",
        {
            "input_path": "pts.gpkg",
            "raster_path": "plane.tif",
            "method": "bilinear",
            "field_name": "z",
            "output_path": "bil.gpkg",
        },
    )
    z = read(workspace / "bil.gpkg")["z"].tolist()
    assert z[0] == pytest.approx(198.6, abs=1e-9)  # bilinear is exact on a plane
    assert z[1] == 166.5
    assert math.isnan(z[2]) and math.isnan(z[3]) and math.isnan(z[4])
    assert manifest(workspace / "bil.gpkg")["parameters"]["method"] == "bilinear"


def test_points_in_another_crs_are_sampled_in_the_rasters_and_written_in_their_own(app, workspace: Path) -> None:
    from pyproj import Transformer

    plane_dem(workspace)
    lon, lat = Transformer.from_crs(32610, 4326, always_xy=True).transform(500_012, 5_000_987)
    write_layer(workspace / "ll.gpkg", [Point(lon, lat)], "EPSG:4326", id=[1])
    result = app.run(
        "sample_raster_at_points",
        {"input_path": "ll.gpkg", "raster_path": "plane.tif", "method": "bilinear", "output_path": "ll_z.gpkg"},
    )
    out = read(workspace / "ll_z.gpkg")
    assert out.crs.to_epsg() == 4326
    assert out.geometry.iloc[0].x == pytest.approx(lon, abs=1e-12)
    assert out["elevation"].iloc[0] == pytest.approx(198.6, abs=1e-6)  # the same place as above
    alignment = result.crs_decisions["x-mapsmith:alignment"]["input_path"]
    assert alignment["source_crs"] == "EPSG:4326" and alignment["target_crs"] == "EPSG:32610"
    assert "keeps input_path's own coordinates" in alignment["reason"]


def test_a_point_registered_arc_second_dem_is_sampled_at_whole_arc_seconds_without_a_second_shift(
    app, workspace: Path
) -> None:
    import rasterio
    from rasterio.transform import from_origin

    # Samples on whole arc-seconds: row 0 / col 0 at exactly (-122, 46). GDAL represents a
    # point-registered grid by a geotransform whose origin is half a cell up-left of that sample.
    transform = from_origin(-122 - 0.5 * ARCSEC, 46 + 0.5 * ARCSEC, ARCSEC, ARCSEC)
    rows, cols = np.mgrid[0:6, 0:8]
    z = (100.0 * rows + cols).astype("float64")  # value(row, col) = 100 row + col
    path = write_grid(workspace / "pt.tif", z, transform, crs="EPSG:4326", tags={"AREA_OR_POINT": "Point"})

    # What GDAL makes of the file: read back, the geotransform is the one written (GDAL moved the
    # PixelIsPoint tiepoint half a cell on writing and moves it back on reading, RFC 33) ...
    with rasterio.open(path) as ds:
        assert ds.tags()["AREA_OR_POINT"] == "Point"
        assert ds.transform.almost_equals(transform, precision=1e-15)
    # ... and the file itself stores the tiepoint on the sample, (-122, 46): reading it with the
    # half-cell move switched off shows it. So the default reading already holds the shift, once.
    with rasterio.Env(GTIFF_POINT_GEO_IGNORE="TRUE"), rasterio.open(path) as ds:
        assert (ds.transform.c, ds.transform.f) == pytest.approx((-122.0, 46.0), abs=1e-12)

    positions = [
        Point(-122 + 3 * ARCSEC, 46 - 2 * ARCSEC),  # the sample at row 2, col 3: 203
        Point(-122.0, 46.0),  # the first sample: 0
        Point(-122 + 3.5 * ARCSEC, 46 - 2 * ARCSEC),  # half-way between (2, 3) and (2, 4): 203 or 204 / 203.5
    ]
    write_layer(workspace / "arc.gpkg", positions, "EPSG:4326", id=[1, 2, 3])
    for method in ("nearest", "bilinear"):
        app.run(
            "sample_raster_at_points",
            {"input_path": "arc.gpkg", "raster_path": "pt.tif", "method": method, "output_path": f"arc_{method}.gpkg"},
        )
    nearest = read(workspace / "arc_nearest.gpkg")["value"].tolist()  # an undescribed band writes "value"
    bilinear = read(workspace / "arc_bilinear.gpkg")["value"].tolist()
    # Shifted twice, the sample at (2, 3) would read as 253.5 bilinear (half a cell right and down).
    assert nearest[:2] == [203.0, 0.0]
    assert bilinear[:2] == [203.0, 0.0]  # exactly the sample: bilinear at a sample position is the sample
    assert nearest[2] == 204.0  # on the edge between two cells: the cell to the right, as in GDAL
    assert bilinear[2] == 203.5
    record = manifest(workspace / "arc_bilinear.gpkg")
    assert record["crs_decisions"]["x-mapsmith:pixel_registration"]["raster_path"].startswith("Point")


def test_field_collisions_multipoints_and_multiband_names(app, workspace: Path) -> None:
    from rasterio.transform import from_origin

    plane_dem(workspace)
    write_layer(workspace / "has.gpkg", [Point(500_012, 5_000_987)], "EPSG:32610", Elevation=[1.0])
    with pytest.raises(InputError) as err:
        app.run(
            "sample_raster_at_points", {"input_path": "has.gpkg", "raster_path": "plane.tif", "output_path": "x.gpkg"}
        )
    assert err.value.code == "FIELD_EXISTS" and err.value.evidence["field"] == "Elevation"
    assert "field_name" in err.value.hint

    write_layer(workspace / "mp.gpkg", [MultiPoint([(500_012, 5_000_987), (500_555, 5_000_555)])], "EPSG:32610", id=[1])
    with pytest.raises(InputError) as err:
        app.run(
            "sample_raster_at_points", {"input_path": "mp.gpkg", "raster_path": "plane.tif", "output_path": "x.gpkg"}
        )
    assert err.value.code == "MULTIPOINT_REFUSED" and "explode_layer" in err.value.hint

    # Two undescribed int16 bands: band 1 = 7 everywhere, band 2 = -3; fields band_1 and band_2, integers.
    two = np.stack([np.full((4, 4), 7, "int16"), np.full((4, 4), -3, "int16")])
    write_grid(workspace / "two.tif", two, from_origin(500_000, 5_001_000, 10, 10))
    write_layer(workspace / "one.gpkg", [Point(500_015, 5_000_985)], "EPSG:32610", id=[1])
    result = app.run(
        "sample_raster_at_points", {"input_path": "one.gpkg", "raster_path": "two.tif", "output_path": "both.gpkg"}
    )
    out = read(workspace / "both.gpkg")
    assert (out["band_1"].iloc[0], out["band_2"].iloc[0]) == (7, -3)
    assert result.answer["fields"] == {"band_1": 1, "band_2": 2}
    app.run(
        "sample_raster_at_points",
        {"input_path": "one.gpkg", "raster_path": "two.tif", "band": 2, "field_name": "b2", "output_path": "b2.gpkg"},
    )
    assert read(workspace / "b2.gpkg")["b2"].iloc[0] == -3
    with pytest.raises(ArgumentError) as err:
        app.run(
            "sample_raster_at_points",
            {"input_path": "one.gpkg", "raster_path": "two.tif", "field_name": "b", "output_path": "x.gpkg"},
        )
    assert err.value.code == "FIELD_NAME_NEEDS_ONE_BAND"
    with pytest.raises(InputError) as err:
        app.run(
            "sample_raster_at_points",
            {"input_path": "one.gpkg", "raster_path": "two.tif", "band": 3, "output_path": "x.gpkg"},
        )
    assert err.value.code == "BAND_NOT_FOUND"
    assert not (workspace / "x.gpkg").exists()


def test_points_all_off_the_raster_are_kept_null_with_a_warning(app, workspace: Path) -> None:
    plane_dem(workspace)
    write_layer(workspace / "far.gpkg", [Point(600_000, 5_000_500)], "EPSG:32610", id=[1])
    result = app.run(
        "sample_raster_at_points", {"input_path": "far.gpkg", "raster_path": "plane.tif", "output_path": "far_z.gpkg"}
    )
    assert math.isnan(read(workspace / "far_z.gpkg")["elevation"].iloc[0])
    assert "NO_VALUES_SAMPLED" in [w["code"] for w in result.warnings]


# -- elevation_profile ----------------------------------------------------------------------------


def test_profile_across_a_plane_is_linear_in_distance_with_ascent_by_hand(app, workspace: Path) -> None:
    plane_dem(workspace)
    # Line A from (500105, 5000905) to (500405, 5000505): 300 east, 400 south, 500 m. Along it
    # x' = 105 + 0.6 d, y' = 905 - 0.8 d, so z = 10.5 + 0.06 d + 181 - 0.16 d = 191.5 - 0.1 d:
    # 191.5 down to 141.5, descent 50, ascent 0. Line B is A reversed: ascent 50.
    a = LineString([(500_105, 5_000_905), (500_405, 5_000_505)])
    b = LineString([(500_405, 5_000_505), (500_105, 5_000_905)])
    write_layer(workspace / "lines.gpkg", [a, b], "EPSG:32610", id=[1, 2])
    result = app.run(
        "elevation_profile", {"input_path": "lines.gpkg", "raster_path": "plane.tif", "spacing_meters": 50}
    )
    first, second = result.answer["profiles"]
    assert first["feature_index"] == 0 and first["length_m"] == pytest.approx(500, abs=1e-9)
    assert first["sample_count"] == 11
    samples = first["samples"]
    assert [s["distance_m"] for s in samples] == pytest.approx([50.0 * i for i in range(11)])
    assert [s["value"] for s in samples] == pytest.approx([191.5 - 5.0 * i for i in range(11)], abs=1e-9)
    assert (samples[1]["x"], samples[1]["y"]) == pytest.approx((500_135, 5_000_865))
    assert (first["min"], first["max"]) == pytest.approx((141.5, 191.5))
    assert (first["total_ascent"], first["total_descent"]) == pytest.approx((0.0, 50.0), abs=1e-9)
    assert (second["total_ascent"], second["total_descent"]) == pytest.approx((50.0, 0.0), abs=1e-9)
    assert "planar in EPSG:32610" in result.crs_decisions["reason"]

    # Default spacing: the raster's 10 m cell, recorded; 0..500 m every 10 m is 51 samples.
    default = app.run("elevation_profile", {"input_path": "lines.gpkg", "raster_path": "plane.tif"})
    assert default.answer["spacing_meters"] == 10
    assert [p["sample_count"] for p in default.answer["profiles"]] == [51, 51]
    assert any("spacing_meters was not given" in n for n in default.notes)

    # 0.1 m spacing: 5,001 samples per line, over the 2,000 an answer holds.
    with pytest.raises(ArgumentError) as err:
        app.run("elevation_profile", {"input_path": "lines.gpkg", "raster_path": "plane.tif", "spacing_meters": 0.1})
    assert err.value.code == "PROFILE_TOO_MANY_SAMPLES" and "spacing_meters=" in err.value.hint


def test_profile_on_a_geographic_line_measures_geodesic_metres(app, workspace: Path) -> None:
    from pyproj import Geod
    from rasterio.transform import from_origin

    # A lon/lat DEM, 0.001 degree cells from (-122.1, 46.1): value = 1000 + 1000 (lon + 122) at each
    # cell centre, a plane in lon, so bilinear reads 950 at lon -122.05 and 1050 at lon -121.95.
    rows, cols = np.mgrid[0:200, 0:200]
    lon_centre = -122.1 + (cols + 0.5) * 0.001
    write_grid(
        workspace / "ll_dem.tif",
        1000 + 1000 * (lon_centre + 122),
        from_origin(-122.1, 46.1, 0.001, 0.001),
        crs="EPSG:4326",
    )
    write_layer(workspace / "ll_line.gpkg", [LineString([(-122.05, 46.0), (-121.95, 46.02)])], "EPSG:4326", id=[1])
    result = app.run(
        "elevation_profile", {"input_path": "ll_line.gpkg", "raster_path": "ll_dem.tif", "spacing_meters": 250}
    )
    expected = Geod(ellps="WGS84").inv(-122.05, 46.0, -121.95, 46.02)[2]  # ~8,000 m
    profile = result.answer["profiles"][0]
    assert profile["length_m"] == pytest.approx(expected, abs=1e-6)
    assert profile["samples"][-1]["distance_m"] == pytest.approx(expected, abs=1e-6)
    assert profile["sample_count"] == math.floor(expected / 250) + 2  # every 250 m, and the end
    assert (profile["samples"][-1]["x"], profile["samples"][-1]["y"]) == pytest.approx((-121.95, 46.02))
    assert profile["samples"][0]["value"] == pytest.approx(950, abs=1e-6)
    assert profile["samples"][-1]["value"] == pytest.approx(1050, abs=1e-6)
    assert profile["total_ascent"] == pytest.approx(100, abs=1e-6)  # lon only grows along this geodesic
    assert "geodesic" in result.crs_decisions["reason"]
    assert result.answer["distance_method"].startswith("geodesic on the WGS 84 ellipsoid")


# -- line_of_sight --------------------------------------------------------------------------------


def flat_strip(workspace: Path, name: str, wall: float | None = None) -> Path:
    """50 x 5 cells of 10 m from (500000, 5000050) at z = 100; optionally column 25 (x centre 500255)
    raised to ``wall``."""
    from rasterio.transform import from_origin

    z = np.full((5, 50), 100.0)
    if wall is not None:
        z[:, 25] = wall
    return write_grid(workspace / name, z, from_origin(500_000, 5_000_050, 10, 10))


# Observer at column 5's centre, target at column 45's, both on row 2 (y 5000025): 400 m apart,
# sampled every 10 m at cell centres, 39 samples between them. The sight line runs from 101.7
# (1.7 m eye) to 100 (target on the ground): at the wall (d = 200) it is 101.7 - 1.7/2 = 100.85.
LOS = {
    "observer_x": 500_055,
    "observer_y": 5_000_025,
    "target_x": 500_455,
    "target_y": 5_000_025,
    "earth_curvature": False,
}


@pytest.mark.parametrize(("wall", "visible"), [(None, True), (100.8, True), (100.9, False), (150.0, False)])
def test_line_of_sight_over_flat_ground_and_walls_of_known_height(app, workspace: Path, wall, visible) -> None:
    flat_strip(workspace, "strip.tif", wall)
    result = app.run("line_of_sight", {"input_path": "strip.tif", **LOS})
    answer = result.answer
    assert answer["visible"] is visible
    assert answer["sample_count"] == 39
    assert answer["distance_m"] == pytest.approx(400)
    if visible:
        assert answer["obstruction"] is None
    else:
        block = answer["obstruction"]
        assert block["distance_m"] == pytest.approx(200)
        assert (block["x"], block["y"]) == pytest.approx((500_255, 5_000_025))
        assert block["elevation"] == pytest.approx(wall)
        assert block["sight_line_elevation"] == pytest.approx(100.85)
    assert any("assumed, not checked" in n for n in result.notes)


def test_earth_curvature_hides_a_target_20_km_away_over_flat_ground(app, workspace: Path) -> None:
    from rasterio.transform import from_origin

    # Flat ground at 0, 100 m cells; observer (1.7 m eye) and target (on the ground) 20,000 m apart.
    # With a = (1 - 0.13) / (2 R) = 6.82781e-8 per metre, the ground at d drops a d^2 and the target
    # 27.3113 m (a * 20000^2). The ground rises above the sight line where
    # a d (D - d) > 1.7 (1 - d/D), i.e. d > 1.7 / (a D) = 1244.9 m: first obstruction at the 1,300 m sample.
    write_grid(workspace / "flat.tif", np.zeros((3, 202)), from_origin(400_000, 5_000_300, 100, 100))
    args = {
        "input_path": "flat.tif",
        "observer_x": 400_050,
        "observer_y": 5_000_150,
        "target_x": 420_050,
        "target_y": 5_000_150,
    }
    curved = app.run("line_of_sight", args).answer
    a = 0.87 / (2 * R_EARTH)
    assert curved["target_curvature_drop_m"] == pytest.approx(a * 20_000**2, rel=1e-12)
    assert curved["target_curvature_drop_m"] == pytest.approx(27.3113, abs=1e-4)
    assert curved["visible"] is False
    assert curved["obstruction"]["distance_m"] == pytest.approx(1300)
    assert curved["obstruction"]["effective_elevation"] == pytest.approx(-a * 1300**2, rel=1e-9)
    assert curved["sample_count"] == 199
    flat = app.run("line_of_sight", {**args, "earth_curvature": False}).answer
    assert flat["visible"] is True and flat["target_curvature_drop_m"] == 0


def test_line_of_sight_refuses_degrees_and_points_off_the_dem(app, workspace: Path) -> None:
    from rasterio.transform import from_origin

    write_grid(workspace / "deg.tif", np.zeros((10, 10)), from_origin(-122, 46, 0.001, 0.001), crs="EPSG:4326")
    with pytest.raises(MapSmithError) as err:
        app.run(
            "line_of_sight",
            {
                "input_path": "deg.tif",
                "observer_x": -121.9995,
                "observer_y": 45.9995,
                "target_x": -121.9915,
                "target_y": 45.9995,
            },
        )
    assert err.value.code == "RASTER_GEOGRAPHIC_CRS"
    flat_strip(workspace, "strip.tif")
    with pytest.raises(InputError) as err:
        app.run("line_of_sight", {"input_path": "strip.tif", **LOS, "target_x": 501_000})
    assert err.value.code == "LOS_POINT_NO_ELEVATION" and "target" in err.value.message


# -- locate_extreme_cell --------------------------------------------------------------------------

# 3 x 4 int16, nodata -32768 at (1, 0) (lower than any value: it must not be the minimum):
#   5   9   1   9
#   ND  1   7   2
#   3   9   1   4
HAND = np.array([[5, 9, 1, 9], [-32768, 1, 7, 2], [3, 9, 1, 4]], dtype="int16")


@pytest.mark.parametrize("block_rows", [1024, 1])  # one block, and one block per row (ties across blocks)
def test_extreme_cells_with_ties_take_the_first_in_row_major_order(app, workspace, monkeypatch, block_rows) -> None:
    from pyproj import Transformer
    from rasterio.transform import from_origin

    from mapsmith_opensource import sample_ops

    monkeypatch.setattr(sample_ops, "BLOCK_ROWS", block_rows)
    write_grid(workspace / "hand.tif", HAND, from_origin(500_000, 5_000_030, 10, 10), nodata=-32768)
    high = app.run("locate_extreme_cell", {"input_path": "hand.tif", "extreme": "max"}).answer
    # 9 at (0, 1), (0, 3), (2, 1); the first, (0, 1), has its centre at (500015, 5000025).
    assert high["value"] == 9 and high["tie_count"] == 3
    assert [(t["row"], t["col"]) for t in high["ties"]] == [(0, 1), (0, 3), (2, 1)]
    cell = high["cell"]
    assert (cell["row"], cell["col"], cell["x"], cell["y"]) == (0, 1, 500_015, 5_000_025)
    lon, lat = Transformer.from_crs(32610, 4326, always_xy=True).transform(500_015, 5_000_025)
    assert (cell["lon"], cell["lat"]) == pytest.approx((lon, lat), abs=1e-12)
    assert high["valid_cell_count"] == 11
    low = app.run("locate_extreme_cell", {"input_path": "hand.tif", "extreme": "min"}).answer
    # 1 at (0, 2), (1, 1), (2, 2); the nodata cell is skipped.
    assert low["value"] == 1 and low["tie_count"] == 3
    assert [(t["row"], t["col"]) for t in low["ties"]] == [(0, 2), (1, 1), (2, 2)]


def test_extreme_ties_are_listed_up_to_100_and_all_nodata_is_refused(app, workspace: Path) -> None:
    from rasterio.transform import from_origin

    write_grid(workspace / "flat.tif", np.full((20, 10), 4.0), from_origin(500_000, 5_000_200, 10, 10))
    answer = app.run("locate_extreme_cell", {"input_path": "flat.tif", "extreme": "min"}).answer
    assert (answer["tie_count"], answer["ties_listed"]) == (200, 100)
    assert (answer["ties"][-1]["row"], answer["ties"][-1]["col"]) == (9, 9)  # the 100th in row-major order
    write_grid(workspace / "none.tif", np.full((2, 2), -1.0), from_origin(500_000, 5_000_020, 10, 10), nodata=-1)
    with pytest.raises(InputError) as err:
        app.run("locate_extreme_cell", {"input_path": "none.tif", "extreme": "max"})
    assert err.value.code == "RASTER_ALL_NODATA"


def test_the_mount_st_helens_summit_is_where_its_statistics_say(app, workspace: Path) -> None:
    import shutil

    source = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mount_st_helens_dem.tif"
    if not source.exists():
        pytest.skip(f"{source} is not present")
    shutil.copy(source, workspace / "msh.tif")
    answer = app.run("locate_extreme_cell", {"input_path": "msh.tif", "extreme": "max"}).answer
    assert answer["value"] == 2534  # the brief's stated range: 652..2534 m
    low = app.run("locate_extreme_cell", {"input_path": "msh.tif", "extreme": "min"}).answer
    assert low["value"] == 652
    # Sampling the summit cell's centre, nearest, returns the summit value.
    write_layer(workspace / "summit.gpkg", [Point(answer["cell"]["x"], answer["cell"]["y"])], "EPSG:32610", id=[1])
    app.run(
        "sample_raster_at_points",
        {"input_path": "summit.gpkg", "raster_path": "msh.tif", "field_name": "z", "output_path": "summit_z.gpkg"},
    )
    assert read(workspace / "summit_z.gpkg")["z"].iloc[0] == 2534
    json.dumps(answer)  # the answer is JSON-able


def test_profile_on_a_web_mercator_line_is_measured_geodesically_not_in_stretched_metres(app, workspace) -> None:
    from pyproj import Geod, Transformer
    from shapely.geometry import MultiLineString

    plane_dem(workspace)
    # Line A of the plane test, written in EPSG:3857 (which stretches lengths by ~1.44 at 45 N). Its
    # length must be the geodesic between its ends (~500 m, not ~720 Mercator metres), and its end
    # values those of line A: 191.5 and 141.5.
    to_3857 = Transformer.from_crs(32610, 3857, always_xy=True)
    ends = [to_3857.transform(500_105, 5_000_905), to_3857.transform(500_405, 5_000_505)]
    write_layer(workspace / "merc.gpkg", [LineString(ends)], "EPSG:3857", id=[1])
    result = app.run(
        "elevation_profile", {"input_path": "merc.gpkg", "raster_path": "plane.tif", "spacing_meters": 100}
    )
    lonlat = Transformer.from_crs(3857, 4326, always_xy=True)
    (lon0, lat0), (lon1, lat1) = (lonlat.transform(*e) for e in ends)
    profile = result.answer["profiles"][0]
    assert profile["length_m"] == pytest.approx(Geod(ellps="WGS84").inv(lon0, lat0, lon1, lat1)[2], abs=1e-6)
    assert profile["length_m"] == pytest.approx(500, rel=1e-3)
    assert (profile["samples"][0]["value"], profile["samples"][-1]["value"]) == pytest.approx((191.5, 141.5), abs=1e-5)
    assert (profile["samples"][-1]["x"], profile["samples"][-1]["y"]) == pytest.approx(ends[-1], abs=1e-6)
    assert "distorts lengths" in result.answer["distance_method"]
    assert result.crs_decisions["x-mapsmith:alignment"]["input_path"]["target_crs"] == "EPSG:32610"

    write_layer(
        workspace / "multi.gpkg",
        [MultiLineString([[(500_105, 5_000_905), (500_205, 5_000_905)], [(500_305, 5_000_905), (500_405, 5_000_905)]])],
        "EPSG:32610",
        id=[1],
    )
    with pytest.raises(InputError) as err:
        app.run("elevation_profile", {"input_path": "multi.gpkg", "raster_path": "plane.tif"})
    assert err.value.code == "MULTILINE_REFUSED" and "explode_layer" in err.value.hint
