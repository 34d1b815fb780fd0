"""Terrain and hydrology on a real DEM: Mount St. Helens (520 x 520, 23.70 m cells, EPSG:32610,
int16, DEFLATE with PREDICTOR=2, which Whitebox's own decoder misreads).

What is checked needs no reference software: every Whitebox run discloses that the predictor-encoded
file was re-encoded for it; flow is conserved (the accumulation at each outlet is, as an exact
integer, the number of cells of its watershed); streams are exactly the cells at or above the
threshold; and each watershed's lowest cell is its outlet's elevation (at most lower by the depth of
a filled depression).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import rasterio
from shapely.geometry import Point

from conftest import published_schema_errors
from layers import read, write_layer

pytest.importorskip("whitebox_workflows", reason="the [whitebox] extra is not installed")

DEM = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mount_st_helens_dem.tif"
OUTLETS = 6
SEPARATION_CELLS = 10  # chosen outlets are at least this many cells apart (Chebyshev)


def manifest(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".provenance.json").read_text("utf-8"))


def band(path: Path) -> np.ndarray:
    with rasterio.open(path) as ds:
        return ds.read(1)


def discloses_predictor(path: Path) -> bool:
    normalised = manifest(path)["parameters"].get("x-mapsmith:normalised_inputs", {})
    return "predictor 2" in normalised.get("input_path", "")


@pytest.fixture(scope="module")
def helens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Slope, flow directions, accumulation, streams and six watersheds, computed once."""
    if not DEM.exists():
        pytest.skip(f"the Mount St. Helens DEM is not at {DEM}")
    from mapsmith.app import MapSmith

    ws = tmp_path_factory.mktemp("helens")
    shutil.copy(DEM, ws / "helens.tif")
    app = MapSmith({"MAPSMITH_WORKSPACE": str(ws)})
    app.run("slope", {"input_path": "helens.tif", "units": "degrees", "output_path": "slope.tif"})
    app.run("flow_direction", {"input_path": "helens.tif", "method": "d8", "output_path": "d8.tif"})
    app.run("flow_accumulation", {"input_path": "helens.tif", "units": "cells", "output_path": "acc.tif"})
    app.run("extract_streams", {"input_path": "helens.tif", "threshold_km2": 1.0, "output_path": "streams.tif"})
    pointer, acc = band(ws / "d8.tif"), band(ws / "acc.tif")
    # Outlets: cells where flow leaves the DEM (no lower neighbour, code 0), largest accumulation first
    # (ties by row, then column), skipping any within SEPARATION_CELLS of one already chosen. Flow ends
    # only at such cells, so their watersheds cannot be nested.
    rows, cols = np.nonzero(pointer == 0)
    order = np.lexsort((cols, rows, -acc[rows, cols]))
    outlets: list[tuple[int, int]] = []
    for i in order:
        r, c = int(rows[i]), int(cols[i])
        if all(max(abs(r - r2), abs(c - c2)) >= SEPARATION_CELLS for r2, c2 in outlets):
            outlets.append((r, c))
        if len(outlets) == OUTLETS:
            break
    with rasterio.open(ws / "helens.tif") as ds:
        t = ds.transform
    points = [Point(t.c + (c + 0.5) * t.a, t.f + (r + 0.5) * t.e) for r, c in outlets]
    write_layer(ws / "outlets.gpkg", points, "EPSG:32610", id=list(range(1, OUTLETS + 1)))
    result = app.run(
        "watershed",
        {"input_path": "helens.tif", "pour_points_path": "outlets.gpkg", "label_field": "id", "output_path": "ws.tif"},
    )
    yield {"app": app, "ws": ws, "outlets": outlets, "pointer": pointer, "acc": acc, "watershed": result}
    # The module's workspace gets the same check as the per-test `workspace` fixture.
    for record in ws.glob("*.provenance.json"):
        errors = published_schema_errors(json.loads(record.read_text("utf-8")))
        assert not errors, f"{record.name} does not conform: {errors}"


def test_every_whitebox_run_discloses_that_the_predictor_file_was_re_encoded(helens) -> None:
    ws = helens["ws"]
    for name in ("slope.tif", "d8.tif", "acc.tif", "streams.tif", "ws.tif"):
        assert discloses_predictor(ws / name), name
        assert any("predictor" in n for n in manifest(ws / name)["notes"]), name


def test_slope_is_in_degrees_and_dem_is_read_as_gdal_reads_it(helens) -> None:
    slope = band(helens["ws"] / "slope.tif")
    with rasterio.open(helens["ws"] / "slope.tif") as ds:
        valid = slope[slope != ds.nodata]
    assert valid.size == (520 - 4) ** 2  # the outer 2 rings are nodata
    assert 0.0 <= valid.min() and valid.max() <= 90.0
    check = next(
        c for c in manifest(helens["ws"] / "slope.tif")["verification"] if c["name"] == "x-mapsmith:engine_read_matches"
    )
    assert check["passed"]


def test_hillshade_of_the_same_dem(helens) -> None:
    app, ws = helens["app"], helens["ws"]
    app.run("hillshade", {"input_path": "helens.tif", "output_path": "hillshade.tif"})
    assert discloses_predictor(ws / "hillshade.tif")
    shade = band(ws / "hillshade.tif")
    assert shade[2:-2, 2:-2].min() >= 1  # 0 is nodata; every interior cell is lit or unlit (1..255)


def test_accumulation_is_a_count_of_cells_bounded_by_the_grid(helens) -> None:
    acc = helens["acc"]
    assert acc.min() == 1.0 and acc.max() <= 520 * 520
    assert (acc == np.round(acc)).all()
    # Every cell drains to exactly one outlet (code 0); the outlets' accumulations add up to the grid.
    assert acc[helens["pointer"] == 0].sum() == 520 * 520


def test_each_outlet_accumulation_equals_its_watershed_cell_count(helens) -> None:
    labels, acc = band(helens["ws"] / "ws.tif"), helens["acc"]
    params = manifest(helens["ws"] / "ws.tif")["parameters"]
    records = params["x-mapsmith:pour_points"]
    assert len(helens["outlets"]) == OUTLETS
    for i, (r, c) in enumerate(helens["outlets"], start=1):
        count = int((labels == i).sum())
        assert count == int(acc[r, c]), f"outlet {i} at {(r, c)}"
        assert records[i - 1]["watershed_cells"] == count
        assert records[i - 1]["moved"] is False and records[i - 1]["nested_in"] is None
        assert labels[r, c] == i
    assert set(params["x-mapsmith:watershed_labels"]) == {str(i) for i in range(1, OUTLETS + 1)}
    check = next(c for c in helens["watershed"].checks if c["name"] == "x-mapsmith:flow_conserved")
    assert check["passed"]


def test_streams_are_exactly_the_cells_at_or_above_the_threshold(helens) -> None:
    streams = band(helens["ws"] / "streams.tif")
    threshold = manifest(helens["ws"] / "streams.tif")["parameters"]["x-mapsmith:stream_threshold"]
    cell_area = 23.699693822798032**2
    assert threshold["threshold_cells"] == pytest.approx(1e6 / cell_area, rel=1e-9)
    np.testing.assert_array_equal(streams, (helens["acc"] >= threshold["threshold_cells"]).astype(streams.dtype))
    assert 0 < streams.sum() < streams.size


def test_watershed_elevations_start_at_their_outlets(helens) -> None:
    elevation = band(helens["ws"] / "helens.tif")
    labels = band(helens["ws"] / "ws.tif")
    max_raise = manifest(helens["ws"] / "ws.tif")["parameters"]["x-mapsmith:depression_fill"]["max_raise"]
    for i, (r, c) in enumerate(helens["outlets"], start=1):
        outlet, cells = float(elevation[r, c]), elevation[labels == i]
        # Filled, every cell drains downhill to the outlet, an edge cell the fill never raises; so the
        # lowest original cell is the outlet's elevation, or below it by at most the deepest fill.
        assert outlet - max_raise - 1e-6 <= cells.min() <= outlet
        assert cells.max() <= 2534


def test_zonal_statistics_per_watershed(helens) -> None:
    app, ws = helens["app"], helens["ws"]
    app.run("raster_to_polygons", {"input_path": "ws.tif", "connectivity": 8, "output_path": "ws.gpkg"})
    app.run(
        "zonal_statistics",
        {
            "input_path": "ws.gpkg",
            "raster_path": "helens.tif",
            "statistics": "mean,min,max,count",
            "output_path": "z.gpkg",
        },
    )
    # Polygons traced from the grid put vertices exactly on cell corners, where exactextract 0.3 gives a
    # few corner-touching cells whole (11,396 cells for a watershed of 11,391); the operation's own
    # area bound catches that, recomputes those zones with vertices rounded to a millionth of a cell,
    # and says so. Counts are then exact to that rounding.
    recomputed = manifest(ws / "z.gpkg")["parameters"].get("x-mapsmith:zones_recomputed")
    if recomputed is not None:
        assert recomputed["vertex_grid"] == pytest.approx(23.6997 * 1e-6, rel=1e-4)
    zones = read(ws / "z.gpkg")
    assert sorted(zones["value"].tolist()) == list(range(1, OUTLETS + 1))  # one region per watershed
    elevation, labels = band(ws / "helens.tif"), band(ws / "ws.tif")
    for _, zone in zones.iterrows():
        i = int(zone["value"])
        r, c = helens["outlets"][i - 1]
        assert zone["zonal_min"] == float(elevation[labels == i].min()) <= float(elevation[r, c])
        assert zone["zonal_min"] <= zone["zonal_mean"] <= zone["zonal_max"] <= 2534
        assert zone["zonal_count"] == pytest.approx(int((labels == i).sum()), abs=1e-4)
