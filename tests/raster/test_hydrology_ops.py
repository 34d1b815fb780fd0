"""Hydrology on Whitebox Workflows, checked against flow paths worked out by hand.

The fixtures are tiny DEMs whose drainage can be traced with a pencil:

- a cone (z = 100 - distance from the apex in metres): every neighbour of the apex drains straight
  away from it, so its D8 code is the code of its own direction from the apex;
- a plane falling one metre per row to the south: every cell drains south, the south row has no
  lower neighbour, so accumulation in row r is r + 1 cells;
- a V-valley, 11 columns x 12 rows of 10 m cells, z = 10 |c - 5| + (11 - r): side cells drain
  east/west along their row to the channel in column 5, the channel drains south. So a side cell
  (r, c) west of the channel accumulates c + 1 cells, and channel cell (r, 5) accumulates
  11 (r + 1) cells (whole rows 0..r); the outlet (11, 5) drains all 132.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin
from shapely.geometry import Point

from layers import write_layer
from mapsmith.errors import ArgumentError, InputError, MapSmithError

pytest.importorskip("whitebox_workflows", reason="the [whitebox] extra is not installed")

CELL = 10.0
X0, Y0 = 500_000.0, 5_000_120.0  # the north-west corner of every fixture
WHITEBOX = {"N": 128, "NE": 1, "E": 2, "SE": 4, "S": 8, "SW": 16, "W": 32, "NW": 64}
ESRI = {"N": 64, "NE": 128, "E": 1, "SE": 2, "S": 4, "SW": 8, "W": 16, "NW": 32}
STEPS = {
    "N": (-1, 0),
    "NE": (-1, 1),
    "E": (0, 1),
    "SE": (1, 1),
    "S": (1, 0),
    "SW": (1, -1),
    "W": (0, -1),
    "NW": (-1, -1),
}
HYDROLOGY_OPS = ["fill_depressions", "flow_direction", "flow_accumulation", "extract_streams", "watershed"]


def write_dem(path: Path, z: np.ndarray, crs: str = "EPSG:32610", cell: float = CELL) -> Path:
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=z.shape[1],
        height=z.shape[0],
        count=1,
        dtype=z.dtype.name,
        crs=crs,
        transform=from_origin(X0, Y0, cell, cell) if crs != "EPSG:4326" else from_origin(-122.3, 46.3, 1e-4, 1e-4),
        nodata=-9999,
    ) as dst:
        dst.write(z, 1)
    return path


def read(path: Path) -> np.ndarray:
    with rasterio.open(path) as ds:
        return ds.read(1)


def manifest(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".provenance.json").read_text("utf-8"))


def centre(row: int, col: int) -> tuple[float, float]:
    return X0 + (col + 0.5) * CELL, Y0 - (row + 0.5) * CELL


def cone() -> np.ndarray:
    r, c = np.mgrid[0:9, 0:9]
    return (100.0 - CELL * np.hypot(r - 4, c - 4)).astype("float64")


def plane(rows: int = 5, cols: int = 5) -> np.ndarray:
    r, _ = np.mgrid[0:rows, 0:cols]
    return (100.0 - r).astype("float64")


def valley() -> np.ndarray:
    r, c = np.mgrid[0:12, 0:11]
    return (10.0 * np.abs(c - 5) + (11 - r)).astype("float64")


@pytest.fixture
def valley_dem(workspace: Path) -> Path:
    return write_dem(workspace / "valley.tif", valley())


# -- fill_depressions --------------------------------------------------------------------------


def _pit(workspace: Path) -> Path:
    z = plane()
    z[2, 2] = 90.0  # the plane is 98 there; its lowest neighbours (row 3) are 97: the spill level
    return write_dem(workspace / "pit.tif", z)


def test_a_single_pit_is_raised_exactly_to_its_spill_level_when_flats_are_left_level(app, workspace: Path) -> None:
    _pit(workspace)
    app.run("fill_depressions", {"input_path": "pit.tif", "fix_flats": False, "output_path": "filled.tif"})
    out = read(workspace / "filled.tif")
    expected = plane()
    expected[2, 2] = 97.0
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, expected)
    fill = manifest(workspace / "filled.tif")["parameters"]["x-mapsmith:depression_fill"]
    assert fill["cells_raised"] == 1
    assert fill["max_raise"] == pytest.approx(7.0)
    assert fill["fix_flats"] is False


def test_a_pit_drains_one_increment_above_its_spill_level(app, workspace: Path) -> None:
    _pit(workspace)
    app.run("fill_depressions", {"input_path": "pit.tif", "flat_increment": 0.01, "output_path": "filled.tif"})
    assert read(workspace / "filled.tif")[2, 2] == pytest.approx(97.01, abs=1e-9)
    app.run("fill_depressions", {"input_path": "pit.tif", "output_path": "auto.tif"})
    auto = read(workspace / "auto.tif")
    # Whitebox's automatic step is ~1.5e-11: above 97, far below a millimetre, and kept by float64.
    assert auto.dtype == np.float64
    assert 97.0 < auto[2, 2] < 97.0 + 1e-6
    record = manifest(workspace / "auto.tif")
    assert record["parameters"]["x-mapsmith:depression_fill"]["flat_increment_requested"] is None
    assert "automatic" in record["parameters"]["x-mapsmith:depression_fill"]["flat_increment"]


def test_a_depression_deeper_than_max_depth_is_left_entirely_unfilled(app, workspace: Path) -> None:
    _pit(workspace)
    app.run("fill_depressions", {"input_path": "pit.tif", "max_depth_meters": 5, "output_path": "shallow.tif"})
    assert read(workspace / "shallow.tif")[2, 2] == 90.0  # 7 m deep > 5 m: untouched, not filled to 95
    record = manifest(workspace / "shallow.tif")
    assert record["parameters"]["x-mapsmith:depression_fill"]["cells_raised"] == 0
    assert any("entirely unfilled" in n for n in record["notes"])
    app.run("fill_depressions", {"input_path": "pit.tif", "max_depth_meters": 8, "output_path": "deep.tif"})
    assert read(workspace / "deep.tif")[2, 2] > 97.0


# -- flow_direction ----------------------------------------------------------------------------


@pytest.mark.parametrize(("table", "codes"), [("whitebox", WHITEBOX), ("esri", ESRI)])
def test_each_neighbour_of_a_cone_apex_drains_straight_away_from_it(app, workspace: Path, table, codes) -> None:
    write_dem(workspace / "cone.tif", cone())
    app.run("flow_direction", {"input_path": "cone.tif", "method": "d8", "code_table": table, "output_path": "d8.tif"})
    out = read(workspace / "d8.tif")
    for direction, (dr, dc) in STEPS.items():
        assert out[4 + dr, 4 + dc] == codes[direction], direction
    params = manifest(workspace / "d8.tif")["parameters"]
    assert params["x-mapsmith:direction_codes"] == codes
    assert params["x-mapsmith:no_flow_value"] == 0


def test_dinf_and_fd8_on_a_south_facing_plane(app, workspace: Path) -> None:
    write_dem(workspace / "plane.tif", plane())
    app.run("flow_direction", {"input_path": "plane.tif", "method": "dinf", "output_path": "dinf.tif"})
    app.run("flow_direction", {"input_path": "plane.tif", "method": "fd8", "output_path": "fd8.tif"})
    # Interior: the downslope azimuth is due south; the lower neighbours are SW, S and SE: 16 | 8 | 4.
    assert read(workspace / "dinf.tif")[1:4, 1:4] == pytest.approx(180.0)
    assert (read(workspace / "fd8.tif")[1:4, 1:4] == 28).all()
    dinf = manifest(workspace / "dinf.tif")["parameters"]
    assert "degrees clockwise from north" in dinf["x-mapsmith:direction_codes"]
    assert dinf["x-mapsmith:no_flow_value"] == -1
    assert manifest(workspace / "fd8.tif")["parameters"]["x-mapsmith:direction_codes"] == WHITEBOX


def test_an_unfilled_pit_has_no_direction_and_is_warned_about(app, workspace: Path) -> None:
    _pit(workspace)
    result = app.run(
        "flow_direction", {"input_path": "pit.tif", "method": "d8", "fill_first": False, "output_path": "raw.tif"}
    )
    assert read(workspace / "raw.tif")[2, 2] == 0
    assert any(w["code"] == "UNFILLED_DEM" and "1 interior" in w["message"] for w in result.warnings)
    app.run("flow_direction", {"input_path": "pit.tif", "method": "d8", "output_path": "filled.tif"})
    # Filled, the pit spills to one of its three lowest neighbours, in row 3.
    assert read(workspace / "filled.tif")[2, 2] in (WHITEBOX["SW"], WHITEBOX["S"], WHITEBOX["SE"])
    assert manifest(workspace / "filled.tif")["parameters"]["x-mapsmith:depression_fill"]["cells_raised"] == 1


def test_rho8_says_it_is_not_reproducible(app, workspace: Path) -> None:
    write_dem(workspace / "plane.tif", plane())
    result = app.run("flow_direction", {"input_path": "plane.tif", "method": "rho8", "output_path": "rho8.tif"})
    assert any(w["code"] == "NON_DETERMINISTIC" for w in result.warnings)
    # Whatever it drew, an interior cell of a south-facing plane drains to a lower neighbour.
    assert set(np.unique(read(workspace / "rho8.tif")[1:4, 1:4])) <= {4, 8, 16}


def test_esri_codes_are_refused_for_dinf(app, workspace: Path) -> None:
    write_dem(workspace / "plane.tif", plane())
    with pytest.raises(ArgumentError) as err:
        app.run(
            "flow_direction",
            {"input_path": "plane.tif", "method": "dinf", "code_table": "esri", "output_path": "o.tif"},
        )
    assert err.value.code == "ARGUMENT_NOT_APPLICABLE"


def test_an_unknown_method_is_refused(app, workspace: Path) -> None:
    write_dem(workspace / "plane.tif", plane())
    with pytest.raises(ArgumentError) as err:
        app.run("flow_direction", {"input_path": "plane.tif", "method": "mfd", "output_path": "o.tif"})
    assert err.value.code == "ARGUMENT_NOT_IN_CHOICES"


# -- flow_accumulation -------------------------------------------------------------------------


def test_accumulation_on_a_plane_counts_the_cells_above_and_the_cell_itself(app, workspace: Path) -> None:
    write_dem(workspace / "plane.tif", plane())
    app.run("flow_accumulation", {"input_path": "plane.tif", "units": "cells", "output_path": "cells.tif"})
    app.run("flow_accumulation", {"input_path": "plane.tif", "units": "area_m2", "output_path": "ca.tif"})
    app.run("flow_accumulation", {"input_path": "plane.tif", "units": "specific_area_m", "output_path": "sca.tif"})
    rows = np.arange(1, 6, dtype="float64")[:, None] * np.ones((1, 5))  # row r: r + 1 cells
    np.testing.assert_array_equal(read(workspace / "cells.tif"), rows)
    np.testing.assert_allclose(read(workspace / "ca.tif"), rows * 100.0)  # 10 m x 10 m cells
    np.testing.assert_allclose(read(workspace / "sca.tif"), rows * 10.0)  # x the 10 m cell width
    calls = manifest(workspace / "ca.tif")["parameters"]["x-mapsmith:whitebox_calls"]
    assert [c["arguments"]["out_type"] for c in calls if c["tool"] == "hydrology.d8_flow_accum"] == ["ca"]
    assert "x-mapsmith:depression_fill" in manifest(workspace / "cells.tif")["parameters"]


def test_accumulation_in_a_v_valley(app, valley_dem: Path, workspace: Path) -> None:
    app.run("flow_accumulation", {"input_path": valley_dem.name, "units": "cells", "output_path": "acc.tif"})
    acc = read(workspace / "acc.tif")
    for r in range(12):
        assert acc[r, 5] == 11 * (r + 1)
        for c in range(5):
            assert acc[r, c] == c + 1  # west side: itself and the cells west of it
            assert acc[r, 10 - c] == c + 1  # east side, mirrored
    assert acc.max() == 132


# -- extract_streams ---------------------------------------------------------------------------


def test_thresholds_in_cells_and_in_km2_give_the_same_streams(app, valley_dem: Path, workspace: Path) -> None:
    # Channel cells (r, 5) hold 11 (r + 1) cells: 33 and more from row 2, so rows 2..11 (10 cells).
    app.run("extract_streams", {"input_path": valley_dem.name, "threshold_cells": 33, "output_path": "by_cells.tif"})
    # 0.0033 km² = 3300 m² = 33 cells of 100 m²
    app.run("extract_streams", {"input_path": valley_dem.name, "threshold_km2": 0.0033, "output_path": "by_km2.tif"})
    by_cells, by_km2 = read(workspace / "by_cells.tif"), read(workspace / "by_km2.tif")
    expected = np.zeros((12, 11), dtype=by_cells.dtype)
    expected[2:, 5] = 1
    np.testing.assert_array_equal(by_cells, expected)
    np.testing.assert_array_equal(by_km2, expected)
    threshold = manifest(workspace / "by_km2.tif")["parameters"]["x-mapsmith:stream_threshold"]
    assert threshold["threshold_cells"] == 33.0
    assert threshold["cell_area_m2"] == pytest.approx(100.0)
    assert threshold["given_as"] == "threshold_km2"
    # ">=": 33.5 cells drops row 2 (33 cells).
    app.run("extract_streams", {"input_path": valley_dem.name, "threshold_cells": 33.5, "output_path": "higher.tif"})
    assert int(read(workspace / "higher.tif").sum()) == 9


def test_streams_keep_cells_without_elevation_as_nodata(app, workspace: Path) -> None:
    z = valley()
    z[0, 0] = -9999
    write_dem(workspace / "holed.tif", z)
    app.run("extract_streams", {"input_path": "holed.tif", "threshold_cells": 32, "output_path": "s.tif"})
    with rasterio.open(workspace / "s.tif") as ds:
        out, nodata = ds.read(1), ds.nodata
    assert out[0, 0] == nodata
    # Without (0, 0) the channel holds 11 (r + 1) - 1: 32 from row 2.
    assert sorted(np.unique(out[out != nodata]).tolist()) == [0, 1]
    assert int((out == 1).sum()) == 10


@pytest.mark.parametrize(
    ("arguments", "code"),
    [({"threshold_cells": 30, "threshold_km2": 0.003}, "THRESHOLD_AMBIGUOUS"), ({}, "THRESHOLD_MISSING")],
)
def test_exactly_one_threshold_is_required(app, valley_dem: Path, workspace: Path, arguments, code) -> None:
    with pytest.raises(ArgumentError) as err:
        app.run("extract_streams", {"input_path": valley_dem.name, **arguments, "output_path": "s.tif"})
    assert err.value.code == code
    assert not list(workspace.glob("s.tif*"))  # refused before the engine: no failure record either


# -- watershed ---------------------------------------------------------------------------------


def _points(workspace: Path, cells: list[tuple[float, float]], name: str = "pp.gpkg", **fields) -> str:
    write_layer(workspace / name, [Point(x, y) for x, y in cells], "EPSG:32610", **fields)
    return name


def test_the_valley_outlet_drains_every_cell_and_a_midpoint_drains_the_rows_above(
    app, valley_dem: Path, workspace: Path
) -> None:
    pp = _points(workspace, [centre(5, 5), centre(11, 5)])
    result = app.run("watershed", {"input_path": valley_dem.name, "pour_points_path": pp, "output_path": "ws.tif"})
    ws = read(workspace / "ws.tif")
    # The upstream outlet (5, 5) keeps rows 0..5 (66 cells); the valley outlet gets the other 66.
    assert (ws[:6] == 1).all()
    assert (ws[6:] == 2).all()
    params = manifest(workspace / "ws.tif")["parameters"]
    records = params["x-mapsmith:pour_points"]
    assert [r["watershed_cells"] for r in records] == [66, 66]
    assert [r["accumulation_cells"] for r in records] == [66.0, 132.0]
    assert [r["nested_in"] for r in records] == [2, None]
    assert params["x-mapsmith:watershed_labels"] == {
        "1": {"order": 1, "label_field": None},
        "2": {"order": 2, "label_field": None},
    }
    assert next(c for c in result.checks if c["name"] == "x-mapsmith:flow_conserved")["passed"]


def test_a_point_off_the_channel_is_snapped_onto_it_within_the_stated_distance(
    app, valley_dem: Path, workspace: Path
) -> None:
    # Centre of (5, 3), 20 m west of the channel. Within 25 m: channel cells (4, 5), (5, 5), (6, 5)
    # at 22.36, 20 and 22.36 m holding 55, 66 and 77 cells; (7, 5) is 28.28 m away. So (6, 5).
    pp = _points(workspace, [centre(5, 3)])
    app.run(
        "watershed",
        {"input_path": valley_dem.name, "pour_points_path": pp, "snap_distance_meters": 25, "output_path": "ws.tif"},
    )
    (record,) = manifest(workspace / "ws.tif")["parameters"]["x-mapsmith:pour_points"]
    assert record["cell"] == [6, 5]
    assert record["moved"] is True
    assert record["distance_m"] == pytest.approx(math.sqrt(20**2 + 10**2))
    assert record["to"] == list(centre(6, 5))
    assert int((read(workspace / "ws.tif") == 1).sum()) == 77
    # Not snapped, the point drains only its own row west of it: (5, 0) .. (5, 3).
    app.run("watershed", {"input_path": valley_dem.name, "pour_points_path": pp, "output_path": "raw.tif"})
    raw = read(workspace / "raw.tif")
    assert int((raw == 1).sum()) == 4 and (raw[5, :4] == 1).all()
    # Within 15 m the best is 5 cells, at (4, 4), (5, 4) and (6, 4); the nearest, (5, 4), 10 m away, wins.
    app.run(
        "watershed",
        {"input_path": valley_dem.name, "pour_points_path": pp, "snap_distance_meters": 15, "output_path": "near.tif"},
    )
    (near,) = manifest(workspace / "near.tif")["parameters"]["x-mapsmith:pour_points"]
    assert near["cell"] == [5, 4] and near["distance_m"] == pytest.approx(10.0)


def test_watersheds_take_their_labels_from_a_field(app, valley_dem: Path, workspace: Path) -> None:
    pp = _points(workspace, [centre(5, 5), centre(11, 5)], id=[40, 7])
    app.run(
        "watershed",
        {"input_path": valley_dem.name, "pour_points_path": pp, "label_field": "id", "output_path": "ws.tif"},
    )
    ws = read(workspace / "ws.tif")
    assert (ws[:6] == 40).all() and (ws[6:] == 7).all()
    labels = manifest(workspace / "ws.tif")["parameters"]["x-mapsmith:watershed_labels"]
    assert labels == {"40": {"order": 1, "label_field": "id"}, "7": {"order": 2, "label_field": "id"}}


def test_pour_points_in_another_crs_are_transformed_to_the_dem(app, valley_dem: Path, workspace: Path) -> None:
    from pyproj import Transformer

    to_lonlat = Transformer.from_crs("EPSG:32610", "EPSG:4326", always_xy=True)
    write_layer(workspace / "pp_ll.gpkg", [Point(*to_lonlat.transform(*centre(5, 5)))], "EPSG:4326")
    result = app.run(
        "watershed", {"input_path": valley_dem.name, "pour_points_path": "pp_ll.gpkg", "output_path": "ws.tif"}
    )
    assert "pour_points_path" in result.crs_decisions["x-mapsmith:alignment"]
    assert int((read(workspace / "ws.tif") == 1).sum()) == 66


def test_a_pour_point_outside_the_dem_is_refused(app, valley_dem: Path, workspace: Path) -> None:
    pp = _points(workspace, [centre(5, 5), (X0 - 50, Y0 - 50)])
    with pytest.raises(InputError) as err:
        app.run("watershed", {"input_path": valley_dem.name, "pour_points_path": pp, "output_path": "ws.tif"})
    assert err.value.code == "POUR_POINT_OUTSIDE_DEM"
    assert not (workspace / "ws.tif").exists()


# -- refusals common to every operation ---------------------------------------------------------


@pytest.mark.parametrize("operation", HYDROLOGY_OPS)
def test_a_dem_in_degrees_is_refused_before_the_engine(app, workspace: Path, operation: str) -> None:
    write_dem(workspace / "geo.tif", plane(), crs="EPSG:4326")
    _points(workspace, [(-122.29995, 46.29995)])
    args = {
        "fill_depressions": {},
        "flow_direction": {"method": "d8"},
        "flow_accumulation": {"units": "cells"},
        "extract_streams": {"threshold_cells": 3},
        "watershed": {"pour_points_path": "pp.gpkg"},
    }[operation]
    with pytest.raises(MapSmithError) as err:  # the runner's precondition, or this module's validate
        app.run(operation, {"input_path": "geo.tif", **args, "output_path": "o.tif"})
    assert err.value.code == "RASTER_GEOGRAPHIC_CRS"
    assert not list(workspace.glob("o.tif*"))
