"""Terrain operations on Whitebox Workflows, against answers worked out by hand before the code ran.

The fixtures are surfaces whose derivatives are known in closed form:

- the plane z = a*x + b*y (a = 0.1, b = 0.2; x east, y north, in metres): gradient (a, b) everywhere,
  so slope = atan(sqrt(a^2 + b^2)) = 12.604383 degrees (22.36068 %, 0.2199880 rad), the downslope
  direction is -(a, b), whose azimuth clockwise from north is atan2(-a, -b) = 206.565051 degrees,
  and every curvature is 0;
- the cylinder z = 0.001 x^2 + 0.1 y + 100, whose first derivatives are p = 0.002 x, q = 0.1 and
  second derivatives r = 0.002, s = t = 0, put into Florinsky's closed forms for profile, plan and
  mean curvature;
- flat ground with a low wall, where the shadow behind the wall follows from similar triangles.

The outer 2 rings of every window-based output are nodata: Whitebox's 5 x 5 window runs off the grid.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin
from shapely.geometry import Point

from layers import write_layer
from mapsmith.errors import ArgumentError, CRSError, InputError

pytest.importorskip("whitebox_workflows", reason="the [whitebox] extra is not installed")

A, B = 0.1, 0.2  # the plane's gradient: dz/dx (east), dz/dy (north)
WIDTH, HEIGHT, CELL = 50, 40, 10.0
X0, Y0 = 500_000.0, 5_100_000.0  # top-left corner, EPSG:32610
EDGE = 2
PLANE_SLOPE_DEGREES = math.degrees(math.atan(math.hypot(A, B)))  # 12.6043826...
PLANE_ASPECT_DEGREES = math.degrees(math.atan2(-A, -B)) % 360  # 206.5650512...
MSH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mount_st_helens_dem.tif"


def write_dem(path: Path, z: np.ndarray, *, crs: str = "EPSG:32610", south_up: bool = False, **extra) -> Path:
    """``z`` is north-up (row 0 = north); a south-up file stores the same cells bottom row first."""
    height, width = z.shape
    transform = from_origin(X0, Y0, CELL, CELL) if crs != "EPSG:4326" else from_origin(-122.0, 46.0, 1e-4, 1e-4)
    data = z
    if south_up:
        t = transform
        transform = rasterio.Affine(t.a, 0, t.c, 0, -t.e, t.f + t.e * height)
        data = z[::-1, :]
    profile = {
        "driver": "GTiff",
        "width": width,
        "height": height,
        "count": 1,
        "dtype": z.dtype.name,
        "crs": crs,
        "transform": transform,
        "nodata": -9999,
        **extra,
    }
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data, 1)
    return path


def local_xy(width: int = WIDTH, height: int = HEIGHT) -> tuple[np.ndarray, np.ndarray]:
    """Cell-centre coordinates in metres from the grid's south-west corner (x east, y north)."""
    rows, cols = np.mgrid[0:height, 0:width]
    return (cols + 0.5) * CELL, (height - rows - 0.5) * CELL


def plane(dtype: str = "float32") -> np.ndarray:
    x, y = local_xy()
    return (A * x + B * y).astype(dtype)


def read_out(path: Path) -> np.ma.MaskedArray:
    with rasterio.open(path) as ds:
        return ds.read(1, masked=True)


def interior(a: np.ndarray) -> np.ndarray:
    return a[EDGE:-EDGE, EDGE:-EDGE]


def manifest(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".provenance.json").read_text("utf-8"))


def check(record: dict, name: str) -> dict:
    (found,) = [c for c in record["verification"] if c["name"] == name]
    return found


# -- slope ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("units", "expected"),
    [
        ("degrees", 12.604383),  # atan(sqrt(0.05)) in degrees
        ("percent", 22.360680),  # 100 * sqrt(0.05)
        ("radians", 0.2199880),  # atan(0.2236068)
    ],
)
def test_slope_of_a_plane_in_each_unit(app, workspace, units, expected) -> None:
    write_dem(workspace / "plane.tif", plane())
    result = app.run("slope", {"input_path": "plane.tif", "units": units, "output_path": "slope.tif"})
    out = read_out(workspace / "slope.tif")
    assert interior(out).min() == pytest.approx(expected, rel=1e-5)
    assert interior(out).max() == pytest.approx(expected, rel=1e-5)
    assert not np.ma.getmaskarray(interior(out)).any()
    assert result.status == "ok"
    record = manifest(workspace / "slope.tif")
    assert record["parameters"]["units"] == units
    assert check(record, "values_in_expected_range")["passed"]
    assert record["crs_decisions"]["analysis_crs"] == "EPSG:32610"


def test_slope_z_factor_scales_the_gradient(app, workspace) -> None:
    # z_factor 2 doubles the gradient: atan(2 * sqrt(0.05)) = 24.094843 degrees
    write_dem(workspace / "plane.tif", plane())
    app.run("slope", {"input_path": "plane.tif", "units": "degrees", "z_factor": 2.0, "output_path": "s.tif"})
    assert interior(read_out(workspace / "s.tif")).mean() == pytest.approx(24.094843, rel=1e-5)


def test_the_edge_ring_is_nodata(app, workspace) -> None:
    write_dem(workspace / "plane.tif", plane())
    app.run("slope", {"input_path": "plane.tif", "units": "degrees", "output_path": "slope.tif"})
    mask = np.ma.getmaskarray(read_out(workspace / "slope.tif"))
    assert mask.sum() == WIDTH * HEIGHT - (WIDTH - 4) * (HEIGHT - 4) == 344
    assert mask[:EDGE].all() and mask[-EDGE:].all() and mask[:, :EDGE].all() and mask[:, -EDGE:].all()
    assert not mask[EDGE:-EDGE, EDGE:-EDGE].any()


def test_a_south_up_dem_gives_the_same_slope_as_north_up(app, workspace) -> None:
    write_dem(workspace / "north.tif", plane())
    write_dem(workspace / "south.tif", plane(), south_up=True)
    with rasterio.open(workspace / "south.tif") as ds:
        assert ds.transform.e > 0  # the fixture really is south-up
    app.run("slope", {"input_path": "north.tif", "units": "degrees", "output_path": "n.tif"})
    app.run("slope", {"input_path": "south.tif", "units": "degrees", "output_path": "s.tif"})
    north, south = read_out(workspace / "n.tif"), read_out(workspace / "s.tif")
    np.testing.assert_array_equal(np.ma.getmaskarray(north), np.ma.getmaskarray(south))
    np.testing.assert_array_equal(north.filled(-1), south.filled(-1))
    with rasterio.open(workspace / "s.tif") as ds:
        assert ds.transform == from_origin(X0, Y0, CELL, CELL)  # written north-up, same place
    assert "south-up" in manifest(workspace / "s.tif")["parameters"]["x-mapsmith:normalised_inputs"]["input_path"]


def test_flat_ground_has_zero_slope_and_aspect_minus_one(app, workspace) -> None:
    write_dem(workspace / "flat.tif", np.full((HEIGHT, WIDTH), 250.0, "float32"))
    app.run("slope", {"input_path": "flat.tif", "units": "degrees", "output_path": "s.tif"})
    app.run("aspect", {"input_path": "flat.tif", "output_path": "a.tif"})
    assert (interior(read_out(workspace / "s.tif")) == 0).all()
    aspect = interior(read_out(workspace / "a.tif"))
    assert not np.ma.getmaskarray(aspect).any()  # -1 is a value, not nodata
    assert (aspect == -1).all()
    record = manifest(workspace / "a.tif")
    assert record["parameters"]["x-mapsmith:flat_value"] == -1
    assert check(record, "values_in_expected_range")["passed"]


# -- aspect -----------------------------------------------------------------------------------------


def test_aspect_of_a_plane_faces_south_west(app, workspace) -> None:
    # downslope = -(0.1, 0.2): azimuth atan2(-0.1, -0.2) = 206.565051 degrees clockwise from north
    assert PLANE_ASPECT_DEGREES == pytest.approx(206.565051, abs=1e-6)
    write_dem(workspace / "plane.tif", plane())
    app.run("aspect", {"input_path": "plane.tif", "output_path": "aspect.tif"})
    aspect = interior(read_out(workspace / "aspect.tif"))
    assert aspect.min() == pytest.approx(206.565051, abs=1e-4)
    assert aspect.max() == pytest.approx(206.565051, abs=1e-4)


def test_aspect_of_an_integer_dem_is_not_rounded_to_whole_degrees(app, workspace) -> None:
    # z = 3x + 7y on 10 m cells, stored int16 (exact: whole metres at every cell centre).
    # Downslope azimuth = atan2(-3, -7) = 203.198591 degrees; Whitebox on the int16 file itself
    # computes in int16 and answers 203.
    x, y = local_xy()
    write_dem(workspace / "int.tif", (3 * (x - 5) / 10 + 7 * (y - 5) / 10).astype("int16"))
    app.run("aspect", {"input_path": "int.tif", "output_path": "aspect.tif"})
    aspect = interior(read_out(workspace / "aspect.tif"))
    assert aspect.mean() == pytest.approx(math.degrees(math.atan2(-3, -7)) % 360, abs=1e-4)
    what = manifest(workspace / "aspect.tif")["parameters"]["x-mapsmith:normalised_inputs"]["input_path"]
    assert "float32" in what and "int16" in what


# -- hillshade --------------------------------------------------------------------------------------


def shade(slope_deg: float, aspect_deg: float, azimuth: float, altitude: float) -> float:
    """The standard hillshade: brightness = cos(zenith) cos(slope) + sin(zenith) sin(slope) cos(azimuth -
    aspect), zenith = 90 - altitude, floored at 0; written as a byte 1 + 254 * brightness (0 = nodata)."""
    zen, s = math.radians(90 - altitude), math.radians(slope_deg)
    b = math.cos(zen) * math.cos(s) + math.sin(zen) * math.sin(s) * math.cos(math.radians(azimuth - aspect_deg))
    return 1 + 254 * max(b, 0.0)


@pytest.mark.parametrize(
    ("azimuth", "altitude"),
    [(None, None), (315, 30), (PLANE_ASPECT_DEGREES, 90), (PLANE_ASPECT_DEGREES, 10), (26.565051, 10)],
)
def test_hillshade_of_a_plane_follows_the_standard_formula(app, workspace, azimuth, altitude) -> None:
    # defaults 315 / 45: brightness = 0.707107 * 0.975900 + 0.707107 * 0.218218 * cos(108.435) = 0.641271
    # -> byte 163.88. Light from the downslope side at 10 degrees reaches the plane at 22.6 degrees,
    # light from the upslope side at 10 degrees grazes it from behind (brightness < 0 -> 1).
    write_dem(workspace / "plane.tif", plane())
    args = {"input_path": "plane.tif", "output_path": "hs.tif"}
    if azimuth is not None:
        args |= {"azimuth_degrees": azimuth, "altitude_degrees": altitude}
    app.run("hillshade", args)
    expected = shade(PLANE_SLOPE_DEGREES, PLANE_ASPECT_DEGREES, azimuth or 315, altitude or 45)
    if azimuth is None:
        assert expected == pytest.approx(163.88, abs=0.01)
    if azimuth == 26.565051:
        assert expected == 1  # facing away from the light
    with rasterio.open(workspace / "hs.tif") as ds:
        assert ds.dtypes[0] == "uint8" and ds.nodata == 0
        data = ds.read(1)
    assert np.abs(interior(data).astype(float) - expected).max() <= 0.51
    assert (data[:EDGE] == 0).all() and (data[:, -EDGE:] == 0).all()  # the edge ring is nodata
    record = manifest(workspace / "hs.tif")
    assert record["parameters"]["azimuth_degrees"] == (azimuth or 315)
    assert record["parameters"]["altitude_degrees"] == (altitude or 45)
    assert "32767" in record["parameters"]["x-mapsmith:hillshade_scale"]
    assert check(record, "values_in_expected_range")["passed"]


# -- curvature --------------------------------------------------------------------------------------


def test_every_curvature_of_a_plane_is_zero(app, workspace) -> None:
    write_dem(workspace / "plane.tif", plane())
    for kind in ("profile", "plan", "mean"):
        app.run("curvature", {"input_path": "plane.tif", "curvature_type": kind, "output_path": f"{kind}.tif"})
        values = interior(read_out(workspace / f"{kind}.tif"))
        assert not np.ma.getmaskarray(values).any()
        assert np.abs(values).max() < 1e-6, kind


def florinsky(x: float) -> dict[str, float]:
    """Closed forms on z = 0.001 x^2 + 0.1 y + 100: p = 0.002 x, q = 0.1, r = 0.002, s = t = 0."""
    p, q, r, s, t = 0.002 * x, 0.1, 0.002, 0.0, 0.0
    g = p * p + q * q
    return {
        "profile": -(p * p * r + 2 * p * q * s + q * q * t) / (g * (1 + g) ** 1.5),
        "plan": -(q * q * r - 2 * p * q * s + p * p * t) / g**1.5,
        "mean": -((1 + q * q) * r + (1 + p * p) * t - 2 * p * q * s) / (2 * (1 + g) ** 1.5),
    }


def test_curvatures_of_a_cylinder_match_florinskys_closed_forms(app, workspace) -> None:
    # x is measured from a line 100 m east of the west edge, so x = 5, 55, 105 m fall on columns
    # 10, 15, 20, well inside the grid. Hand values at x = 5: profile -1.95057e-5, plan -0.0197037.
    width, height = 40, 30
    x, y = local_xy(width, height)
    x = x - 100.0
    write_dem(workspace / "cyl.tif", 0.001 * x**2 + 0.1 * y + 100)  # float64
    assert florinsky(5.0)["profile"] == pytest.approx(-1.95057e-5, rel=1e-5)
    assert florinsky(5.0)["plan"] == pytest.approx(-0.0197037, rel=1e-5)
    for kind in ("profile", "plan", "mean"):
        app.run("curvature", {"input_path": "cyl.tif", "curvature_type": kind, "output_path": f"{kind}.tif"})
        out = read_out(workspace / f"{kind}.tif")
        for col, xm in ((10, 5.0), (15, 55.0), (20, 105.0)):
            for row in (5, 15, 25):
                assert out[row, col] == pytest.approx(florinsky(xm)[kind], rel=1e-4), (kind, row, col)
        # this valley (z lowest along x = 0) converges (plan < 0) and is concave (mean < 0)
        assert (interior(out) < 0).all()
        record = manifest(workspace / f"{kind}.tif")
        assert record["parameters"]["curvature_type"] == kind
        assert record["parameters"]["x-mapsmith:value_unit"] == "1/m"
        assert "negative" in record["parameters"]["x-mapsmith:sign_convention"]
        (call,) = record["parameters"]["x-mapsmith:whitebox_calls"]
        assert call["tool"] == f"terrain.{kind}_curvature" and call["arguments"]["log_transform"] is False


def test_curvature_type_is_required_and_tangential_is_not_offered(app, workspace) -> None:
    write_dem(workspace / "plane.tif", plane())
    with pytest.raises(ArgumentError):
        app.run("curvature", {"input_path": "plane.tif", "output_path": "c.tif"})
    with pytest.raises(ArgumentError):
        app.run("curvature", {"input_path": "plane.tif", "curvature_type": "tangential", "output_path": "c.tif"})


# -- refusals ---------------------------------------------------------------------------------------

DEM_OPERATIONS = {
    "slope": {"units": "degrees"},
    "aspect": {},
    "hillshade": {},
    "curvature": {"curvature_type": "plan"},
    "viewshed": {"observers_path": "obs.gpkg"},
}


@pytest.mark.parametrize("operation", sorted(DEM_OPERATIONS))
def test_a_geographic_dem_is_refused_before_anything_is_written(app, workspace, operation) -> None:
    write_dem(workspace / "geo.tif", np.full((20, 20), 100.0, "float32"), crs="EPSG:4326")
    write_layer(workspace / "obs.gpkg", [Point(-121.999, 45.999)], "EPSG:4326", id=[1])
    with pytest.raises((CRSError, InputError)) as err:
        app.run(operation, {"input_path": "geo.tif", **DEM_OPERATIONS[operation], "output_path": "out.tif"})
    assert err.value.code == "RASTER_GEOGRAPHIC_CRS"
    assert "reproject" in err.value.hint and "a degree is not a metre" in str(err.value)
    # refused by the runner (needs_projected_crs) before the engine: no output and no failure record
    assert not [p.name for p in workspace.iterdir() if p.name.startswith(("out", ".out", ".mapsmith"))]


def test_a_misspelt_whitebox_keyword_is_refused() -> None:
    from mapsmith_opensource import whitebox_engine as wb

    ctx = SimpleNamespace(parameters={})
    # 'unit' for 'units': Whitebox itself would ignore it and answer in degrees
    with pytest.raises(ArgumentError) as err:
        wb.call(ctx, "terrain", "slope", input=None, unit="percent")
    assert err.value.code == "ENGINE_PARAMETER_UNKNOWN"
    assert err.value.evidence["unknown"] == ["unit"]
    assert ctx.parameters == {}  # nothing recorded for a call that was not made


# -- Mount St. Helens -------------------------------------------------------------------------------


@pytest.mark.skipif(not MSH.exists(), reason=f"{MSH} is not there (shared test data)")
def test_mount_st_helens_predictor_encoded_dem(app, workspace) -> None:
    shutil.copy(MSH, workspace / "msh.tif")
    app.run("slope", {"input_path": "msh.tif", "units": "degrees", "output_path": "slope.tif"})
    app.run("hillshade", {"input_path": "msh.tif", "output_path": "hs.tif"})
    slope_values = read_out(workspace / "slope.tif")
    assert slope_values.min() >= 0 and slope_values.max() < 90
    assert slope_values.count() > 0.9 * (520 - 4) ** 2  # the crater rim and flanks, not a misread DEM
    for name in ("slope.tif", "hs.tif"):
        record = manifest(workspace / name)
        what = record["parameters"]["x-mapsmith:normalised_inputs"]["input_path"]
        assert "predictor 2" in what and "int16" in what
        assert check(record, "x-mapsmith:engine_read_matches")["passed"]
    hs = read_out(workspace / "hs.tif")
    assert hs.min() >= 1 and hs.max() <= 255 and hs.count() == slope_values.count()


# -- viewshed ---------------------------------------------------------------------------------------

VS_WIDTH, VS_HEIGHT, VS_ROW = 60, 21, 10
WALL_COL, WALL_HEIGHT, EYE = 21, 0.5, 2.0


def wall_dem(workspace: Path) -> None:
    z = np.full((VS_HEIGHT, VS_WIDTH), 100.0, "float32")
    z[:, WALL_COL] += WALL_HEIGHT
    write_dem(workspace / "wall.tif", z)


def centre(row: int, col: int) -> Point:
    return Point(X0 + (col + 0.5) * CELL, Y0 - (row + 0.5) * CELL)


def test_viewshed_behind_a_wall_follows_similar_triangles(app, workspace) -> None:
    # Ground at 100 m, a 0.5 m wall across column 21; eyes 2 m up. Behind a wall d metres away the
    # sight line over its top drops 1.5 m in d and reaches the ground (2 m down) at d * 2 / 1.5.
    # A at column 5: wall 160 m away, ground hidden until 213.3 m (column 26.3): columns 22..26 hidden.
    # B at column 50: wall 290 m away, ground hidden until 386.7 m (column 11.3): columns 12..20 hidden.
    wall_dem(workspace)
    write_layer(workspace / "obs.gpkg", [centre(VS_ROW, 5), centre(VS_ROW, 50)], "EPSG:32610", id=[1, 2])
    app.run(
        "viewshed",
        {"input_path": "wall.tif", "observers_path": "obs.gpkg", "observer_height_meters": EYE, "output_path": "v.tif"},
    )
    row = read_out(workspace / "v.tif")[VS_ROW]
    expected = np.full(VS_WIDTH, 2)
    expected[12:21] = 1  # seen by A only
    expected[22:27] = 1  # seen by B only
    np.testing.assert_array_equal(row.filled(-1), expected)
    record = manifest(workspace / "v.tif")
    assert record["parameters"]["observer_height_meters"] == EYE
    assert record["parameters"]["x-mapsmith:observer_count"] == 2
    assert check(record, "values_in_expected_range")["passed"]


def test_viewshed_one_observer_and_the_default_height(app, workspace) -> None:
    # Eye 1.7 m (the default): shadow ends at 160 * 1.7 / 1.2 = 226.7 m -> columns 22..27 hidden from A.
    wall_dem(workspace)
    write_layer(workspace / "obs.gpkg", [centre(VS_ROW, 5)], "EPSG:32610", id=[1])
    app.run("viewshed", {"input_path": "wall.tif", "observers_path": "obs.gpkg", "output_path": "v.tif"})
    row = read_out(workspace / "v.tif")[VS_ROW]
    expected = np.ones(VS_WIDTH, int)
    expected[22:28] = 0
    np.testing.assert_array_equal(row.filled(-1), expected)
    assert manifest(workspace / "v.tif")["parameters"]["observer_height_meters"] == 1.7


def test_viewshed_observers_in_another_crs_are_transformed_and_recorded(app, workspace) -> None:
    from pyproj import Transformer

    wall_dem(workspace)
    to_lonlat = Transformer.from_crs("EPSG:32610", "EPSG:4326", always_xy=True)
    points = [Point(*to_lonlat.transform(p.x, p.y)) for p in (centre(VS_ROW, 5), centre(VS_ROW, 50))]
    write_layer(workspace / "obs.gpkg", points, "EPSG:4326", id=[1, 2])
    app.run(
        "viewshed",
        {"input_path": "wall.tif", "observers_path": "obs.gpkg", "observer_height_meters": EYE, "output_path": "v.tif"},
    )
    row = read_out(workspace / "v.tif")[VS_ROW]
    assert row[:12].tolist() == [2] * 12 and row[12:21].tolist() == [1] * 9
    alignment = manifest(workspace / "v.tif")["crs_decisions"]["x-mapsmith:alignment"]["observers_path"]
    assert alignment["source_crs"] == "EPSG:4326" and alignment["target_crs"] == "EPSG:32610"


def test_an_observer_outside_the_dem_is_refused(app, workspace) -> None:
    wall_dem(workspace)
    write_layer(workspace / "obs.gpkg", [centre(VS_ROW, 5), centre(VS_ROW, VS_WIDTH + 3)], "EPSG:32610", id=[1, 2])
    with pytest.raises(InputError) as err:
        app.run("viewshed", {"input_path": "wall.tif", "observers_path": "obs.gpkg", "output_path": "v.tif"})
    assert err.value.code == "OBSERVER_OUTSIDE_DEM"
    assert err.value.evidence["feature_indexes"] == [1]
    assert not (workspace / "v.tif").exists()
