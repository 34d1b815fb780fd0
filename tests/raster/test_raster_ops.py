"""Raster transformations on the opensource stack, against grids whose answers are worked out by hand.

The main fixture is a 4 x 4 float32 grid holding 1..16 row by row (1 at the top left), 10 m cells,
EPSG:32610, top-left corner (500000, 5000040): cell (row r, column c) holds 4r + c + 1 and its centre
is at (500005 + 10c, 5000035 - 10r). Every expected value below follows from that. The workspace
fixture validates every manifest a test leaves behind against the published schema.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from layers import manifest, write_layer
from mapsmith.errors import ArgumentError, InputError

X0, Y0 = 500_000.0, 5_000_040.0
GRID16 = [[4 * r + c + 1 for c in range(4)] for r in range(4)]
NODATA = -9999.0
DEM = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mount_st_helens_dem.tif"


def write_grid(
    path: Path,
    bands: list[list[list[float]]] | list[list[float]],
    *,
    x0: float = X0,
    y0: float = Y0,
    cell: float = 10.0,
    dtype: str = "float32",
    nodata: float | None = NODATA,
    crs: str = "EPSG:32610",
    names: list[str] | None = None,
    south_up: bool = False,
) -> Path:
    """A GeoTIFF from nested lists given north-up (row 0 = north). ``south_up`` stores the same cells
    bottom row first with a positive y cell size, the way some tools write them."""
    import numpy as np
    import rasterio
    from affine import Affine

    array = np.array(bands, dtype=dtype)
    if array.ndim == 2:
        array = array[np.newaxis]
    count, height, width = array.shape
    if south_up:
        transform = Affine(cell, 0, x0, 0, cell, y0 - cell * height)
        array = array[:, ::-1, :]
    else:
        transform = Affine(cell, 0, x0, 0, -cell, y0)
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=width,
        height=height,
        count=count,
        dtype=dtype,
        crs=crs,
        transform=transform,
        nodata=nodata,
    ) as dst:
        dst.write(array)
        for i, name in enumerate(names or ()):
            dst.set_band_description(i + 1, name)
    return path


def read_out(path: Path):
    import rasterio

    with rasterio.open(path) as ds:
        return ds.read(masked=True), ds.transform, ds.profile, ds


def assert_no_output(workspace: Path, name: str) -> None:
    assert not (workspace / name).exists()
    assert not list(workspace.glob(f"{name}*.provenance.json")), "a refusal before the engine leaves no record"


# -- clip_raster -------------------------------------------------------------------------------


def test_clip_by_bounds_keeps_the_top_left_four_cells_on_the_input_grid(app, workspace: Path) -> None:
    # Box x 500000..500020, y 5000020..5000040 is exactly columns 0-1 and rows 0-1: [[1, 2], [5, 6]],
    # top-left corner unchanged.
    write_grid(workspace / "g.tif", GRID16)
    result = app.run(
        "clip_raster",
        {
            "input_path": "g.tif",
            "min_x": 500_000,
            "min_y": 5_000_020,
            "max_x": 500_020,
            "max_y": 5_000_040,
            "output_path": "out.tif",
        },
    )
    data, transform, _, _ = read_out(workspace / "out.tif")
    assert data[0].tolist() == [[1, 2], [5, 6]]
    assert transform.to_gdal() == (X0, 10.0, 0.0, Y0, 0.0, -10.0)
    record = manifest(workspace / "out.tif")
    window = record["parameters"]["x-mapsmith:clip_window"]
    assert window == {
        "row_offset": 0,
        "column_offset": 0,
        "rows": 2,
        "columns": 2,
        "cells_kept": 4,
        "cells_outside_mask": 0,
    }
    assert {c["name"]: c["passed"] for c in result.checks}["values_in_expected_range"]


def test_clip_by_bounds_inside_cells_keeps_every_cell_the_box_overlaps(app, workspace: Path) -> None:
    # x 500015..500025 overlaps columns 1 and 2; y 5000005..5000015 overlaps rows 2 and 3 (y 5000000..5000020):
    # [[10, 11], [14, 15]], top-left corner moved to (500010, 5000020).
    write_grid(workspace / "g.tif", GRID16)
    app.run(
        "clip_raster",
        {
            "input_path": "g.tif",
            "min_x": 500_015,
            "min_y": 5_000_005,
            "max_x": 500_025,
            "max_y": 5_000_015,
            "output_path": "out.tif",
        },
    )
    data, transform, _, _ = read_out(workspace / "out.tif")
    assert data[0].tolist() == [[10, 11], [14, 15]]
    assert transform.to_gdal() == (500_010.0, 10.0, 0.0, 5_000_020.0, 0.0, -10.0)


# A triangle whose hypotenuse is the line y - 5000018 = x - 500000.5: it holds the centres of cells
# (0,0)=1, (0,1)=2 and (1,0)=5; the centre of (1,1)=6 at (500015, 5000025) lies below the line (which is
# at y 5000032.5 there).
TRIANGLE = [(500_000.5, 5_000_039.5), (500_022.0, 5_000_039.5), (500_000.5, 5_000_018.0)]


def test_clip_by_polygon_keeps_the_cells_whose_centre_is_inside(app, workspace: Path) -> None:
    from shapely.geometry import Polygon

    write_grid(workspace / "g.tif", GRID16)
    write_layer(workspace / "tri.gpkg", [Polygon(TRIANGLE)], "EPSG:32610", id=[1])
    app.run("clip_raster", {"input_path": "g.tif", "mask_path": "tri.gpkg", "output_path": "out.tif"})
    data, transform, profile, _ = read_out(workspace / "out.tif")
    # cropped to the kept cells' rows 0-1 and columns 0-1; cell 6 is in that window but outside the mask
    assert data[0].filled(NODATA).tolist() == [[1, 2], [5, NODATA]]
    assert profile["nodata"] == NODATA
    assert transform.to_gdal() == (X0, 10.0, 0.0, Y0, 0.0, -10.0)
    window = manifest(workspace / "out.tif")["parameters"]["x-mapsmith:clip_window"]
    assert (window["cells_kept"], window["cells_outside_mask"]) == (3, 1)


def test_clip_by_polygon_all_touched_keeps_every_cell_the_polygon_touches(app, workspace: Path) -> None:
    # Row 0 (y 30..40): the top edge spans x 0.5..22, columns 0-2. Row 1 (y 20..30): x reaches the
    # hypotenuse at most 12.5, columns 0-1. Row 2 (y 10..20): only y 18..20, x 0.5..2.5, column 0.
    from shapely.geometry import Polygon

    write_grid(workspace / "g.tif", GRID16)
    write_layer(workspace / "tri.gpkg", [Polygon(TRIANGLE)], "EPSG:32610", id=[1])
    app.run(
        "clip_raster", {"input_path": "g.tif", "mask_path": "tri.gpkg", "all_touched": True, "output_path": "out.tif"}
    )
    data, _, _, _ = read_out(workspace / "out.tif")
    n = NODATA
    assert data[0].filled(n).tolist() == [[1, 2, 3], [5, 6, n], [9, n, n]]
    assert manifest(workspace / "out.tif")["parameters"]["x-mapsmith:clip_window"]["cells_kept"] == 6


def test_clip_by_a_mask_in_another_crs_transforms_the_mask_and_records_it(app, workspace: Path) -> None:
    # The same triangle in longitude/latitude: over 22 m the projection bends its edges by far less than a
    # millimetre, so the same three centres are inside.
    from pyproj import Transformer
    from shapely.geometry import Polygon

    to_lonlat = Transformer.from_crs(32610, 4326, always_xy=True)
    write_grid(workspace / "g.tif", GRID16)
    write_layer(
        workspace / "tri.gpkg", [Polygon([to_lonlat.transform(x, y) for x, y in TRIANGLE])], "EPSG:4326", id=[1]
    )
    result = app.run("clip_raster", {"input_path": "g.tif", "mask_path": "tri.gpkg", "output_path": "out.tif"})
    data, _, _, _ = read_out(workspace / "out.tif")
    assert data[0].filled(NODATA).tolist() == [[1, 2], [5, NODATA]]
    alignment = result.crs_decisions["x-mapsmith:alignment"]["mask_path"]
    assert (alignment["source_crs"], alignment["target_crs"]) == ("EPSG:4326", "EPSG:32610")
    assert manifest(workspace / "out.tif")["crs_decisions"]["analysis_crs"] == "EPSG:32610"


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"mask_path": "tri.gpkg", "min_x": 0, "min_y": 0, "max_x": 1, "max_y": 1}, "CLIP_REGION_AMBIGUOUS"),
        ({}, "CLIP_REGION_REQUIRED"),
        ({"min_x": 500_000, "min_y": 5_000_000}, "BOUNDS_INCOMPLETE"),
        ({"min_x": 500_020, "min_y": 5_000_000, "max_x": 500_010, "max_y": 5_000_040}, "BOUNDS_INVERTED"),
    ],
)
def test_clip_region_must_be_one_mask_or_four_bounds(app, workspace: Path, extra: dict, code: str) -> None:
    from shapely.geometry import Polygon

    write_grid(workspace / "g.tif", GRID16)
    write_layer(workspace / "tri.gpkg", [Polygon(TRIANGLE)], "EPSG:32610", id=[1])
    with pytest.raises(ArgumentError) as err:
        app.run("clip_raster", {"input_path": "g.tif", **extra, "output_path": "out.tif"})
    assert err.value.code == code and err.value.hint
    assert_no_output(workspace, "out.tif")


def test_clip_outside_the_raster_is_refused_with_both_extents(app, workspace: Path) -> None:
    write_grid(workspace / "g.tif", GRID16)
    with pytest.raises(InputError) as err:
        app.run(
            "clip_raster",
            {
                "input_path": "g.tif",
                "min_x": 600_000,
                "min_y": 5_000_000,
                "max_x": 600_010,
                "max_y": 5_000_010,
                "output_path": "out.tif",
            },
        )
    assert err.value.code == "CLIP_OUTSIDE_RASTER"
    assert err.value.evidence["raster_bounds"] == [X0, 5_000_000.0, 500_040.0, Y0]
    assert not (workspace / "out.tif").exists()


# -- reproject_raster --------------------------------------------------------------------------


def test_reproject_to_the_next_utm_zone_puts_each_cell_where_pyproj_says(app, workspace: Path) -> None:
    # With nearest resampling each output cell holds the value of the input cell containing its centre
    # taken back to EPSG:32610. The centres are mapped back here with pyproj, independently of GDAL;
    # cells whose centre falls within 0.2 cell of an input cell edge are left out (GDAL's approximate
    # transformer may place them either side).
    import numpy as np
    from pyproj import Transformer

    write_grid(workspace / "g.tif", GRID16)
    result = app.run(
        "reproject_raster",
        {
            "input_path": "g.tif",
            "target_crs": "EPSG:32611",
            "resampling": "nearest",
            "cell_size": 5,
            "output_path": "out.tif",
        },
    )
    data, transform, _, ds = read_out(workspace / "out.tif")
    assert ds.crs.to_epsg() == 32611
    assert (abs(transform.a), abs(transform.e)) == (5.0, 5.0)
    back = Transformer.from_crs(32611, 32610, always_xy=True)
    checked = 0
    for r in range(data.shape[1]):
        for c in range(data.shape[2]):
            x, y = transform * (c + 0.5, r + 0.5)
            sx, sy = back.transform(x, y)
            col, row = (sx - X0) / 10, (Y0 - sy) / 10
            if not (0 <= col < 4 and 0 <= row < 4):
                continue
            if min(col % 1, 1 - col % 1, row % 1, 1 - row % 1) < 0.2:
                continue
            assert data[0, r, c] == GRID16[int(row)][int(col)], (r, c, row, col)
            checked += 1
    assert checked >= 20  # 16 input cells of 100 m2 hold about 64 output cells of 25 m2
    assert not np.ma.getmaskarray(data).all()
    record = manifest(workspace / "out.tif")
    assert record["parameters"]["resampling"] == "nearest"
    assert record["crs_decisions"]["x-mapsmith:resampling"] == "nearest"
    assert (record["crs_decisions"]["source_crs"], record["crs_decisions"]["target_crs"]) == (
        "EPSG:32610",
        "EPSG:32611",
    )
    assert "+zone=11" in record["crs_decisions"]["transformation"]["pipeline"]
    assert record["output"]["crs"] == "EPSG:32611"
    assert {c["name"]: c["passed"] for c in result.checks}["crs_matches"]


def test_reproject_without_resampling_is_refused(app, workspace: Path) -> None:
    write_grid(workspace / "g.tif", GRID16)
    with pytest.raises(ArgumentError) as err:
        app.run("reproject_raster", {"input_path": "g.tif", "target_crs": "EPSG:4326", "output_path": "out.tif"})
    assert err.value.code == "MISSING_ARGUMENT" and "resampling" in err.value.message


def test_reproject_with_a_cell_size_in_metres_for_a_degree_crs_is_refused(app, workspace: Path) -> None:
    # 10 "degrees" is larger than the whole 40 m raster in EPSG:4326: almost surely metres were meant.
    write_grid(workspace / "g.tif", GRID16)
    with pytest.raises(ArgumentError) as err:
        app.run(
            "reproject_raster",
            {
                "input_path": "g.tif",
                "target_crs": "EPSG:4326",
                "resampling": "bilinear",
                "cell_size": 10,
                "output_path": "out.tif",
            },
        )
    assert err.value.code == "CELL_SIZE_TOO_LARGE" and "degree" in err.value.message


def test_reproject_bilinear_stays_within_the_input_range(app, workspace: Path) -> None:
    # Bilinear weights are non-negative and sum to one, so every value lies in 1..16; the check is made.
    write_grid(workspace / "g.tif", GRID16)
    result = app.run(
        "reproject_raster",
        {"input_path": "g.tif", "target_crs": "EPSG:4326", "resampling": "bilinear", "output_path": "out.tif"},
    )
    data, _, _, ds = read_out(workspace / "out.tif")
    assert ds.crs.to_epsg() == 4326
    assert 1 <= data.min() and data.max() <= 16
    range_check = next(c for c in result.checks if c["name"] == "values_in_expected_range")
    assert range_check["passed"] and "1.0..16.0" in range_check["detail"]


# -- resample_raster ---------------------------------------------------------------------------


def test_resample_10_to_20_metres_by_average(app, workspace: Path) -> None:
    # Each 20 m cell averages a 2 x 2 block: (1+2+5+6)/4 = 3.5, (3+4+7+8)/4 = 5.5,
    # (9+10+13+14)/4 = 11.5, (11+12+15+16)/4 = 13.5. Top-left corner kept.
    write_grid(workspace / "g.tif", GRID16)
    app.run(
        "resample_raster", {"input_path": "g.tif", "cell_size": 20, "resampling": "average", "output_path": "out.tif"}
    )
    data, transform, _, _ = read_out(workspace / "out.tif")
    assert data[0].tolist() == [[3.5, 5.5], [11.5, 13.5]]
    assert transform.to_gdal() == (X0, 20.0, 0.0, Y0, 0.0, -20.0)
    record = manifest(workspace / "out.tif")
    assert record["parameters"]["resampling"] == "average"
    grid = record["parameters"]["x-mapsmith:output_grid"]
    assert grid["scale_factor"] == [2.0, 2.0] and (grid["width"], grid["height"]) == (2, 2)


def test_resample_to_a_size_that_does_not_divide_the_extent(app, workspace: Path) -> None:
    # 40 m / 30 m -> ceil(1.33) = 2 cells each way. Nearest takes the input cell under each new centre:
    # (0,0) centre at 15 m, 15 m from the corner -> input cell (1, 1) = 6; the others' centres (45 m) lie
    # outside the input -> nodata; the overhang is disclosed.
    write_grid(workspace / "g.tif", GRID16)
    result = app.run(
        "resample_raster", {"input_path": "g.tif", "cell_size": 30, "resampling": "nearest", "output_path": "out.tif"}
    )
    data, transform, _, _ = read_out(workspace / "out.tif")
    assert data[0].filled(NODATA).tolist() == [[6, NODATA], [NODATA, NODATA]]
    assert transform.to_gdal() == (X0, 30.0, 0.0, Y0, 0.0, -30.0)
    assert any("beyond the input" in n for n in result.notes)


# -- reclassify_raster -------------------------------------------------------------------------

TABLE = "1-5:10, 5-10:20, 12-inf:30, 11:nodata"


def test_reclassify_by_ranges_and_exact_values(app, workspace: Path) -> None:
    # 1..4 -> 10 (5 excluded); 5..9 -> 20; 10 matches nothing -> nodata (unmatched); 11 -> nodata (rule);
    # 12..16 -> 30. Outputs 10..30 fit uint8, whose nodata is then 255.
    write_grid(workspace / "g.tif", GRID16)
    result = app.run(
        "reclassify_raster", {"input_path": "g.tif", "table": TABLE, "unmatched": "nodata", "output_path": "out.tif"}
    )
    data, _, profile, _ = read_out(workspace / "out.tif")
    n = 255
    assert profile["dtype"] == "uint8" and profile["nodata"] == n
    assert data[0].filled(n).tolist() == [[10, 10, 10, 10], [20, 20, 20, 20], [20, n, n, 30], [30, 30, 30, 30]]
    counts = manifest(workspace / "out.tif")["parameters"]["x-mapsmith:reclass_counts"]
    assert [r["cells"] for r in counts["rules"]] == [4, 5, 5, 1]
    assert counts["unmatched_cells"] == 1 and result.answer["unmatched_cells"] == 1
    assert [w["code"] for w in result.warnings] == ["RECLASS_UNMATCHED_CELLS"]
    assert {c["name"]: c["passed"] for c in result.checks}["shape_preserved"]


def test_reclassify_keep_leaves_unmatched_values(app, workspace: Path) -> None:
    write_grid(workspace / "g.tif", GRID16)
    app.run("reclassify_raster", {"input_path": "g.tif", "table": TABLE, "unmatched": "keep", "output_path": "out.tif"})
    data, _, profile, _ = read_out(workspace / "out.tif")
    assert profile["dtype"] == "uint8"
    assert data[0].filled(255).tolist()[2] == [20, 10, 255, 30]


def test_reclassify_negative_outputs_choose_a_signed_type(app, workspace: Path) -> None:
    # Outputs -1 and 300 need int16; its nodata is -32768. The input nodata cell stays nodata.
    rows = [row[:] for row in GRID16]
    rows[0][0] = NODATA
    write_grid(workspace / "g.tif", rows)
    app.run(
        "reclassify_raster",
        {"input_path": "g.tif", "table": "-inf-8:-1, 8-inf:300", "unmatched": "nodata", "output_path": "out.tif"},
    )
    data, _, profile, _ = read_out(workspace / "out.tif")
    assert (profile["dtype"], profile["nodata"]) == ("int16", -32768)
    assert data[0].filled(0).tolist()[:2] == [[0, -1, -1, -1], [-1, -1, -1, 300]]


def test_reclassify_compares_a_float32_raster_in_its_own_precision(app, workspace: Path) -> None:
    # float32(0.1) = 0.10000000149 is not the double 0.1; the table's 0.1 means the stored 0.1. A range
    # starting at 0.2 includes the stored 0.2 and excludes the stored 0.1.
    write_grid(workspace / "f.tif", [[0.1, 0.2], [0.3, 0.4]])
    app.run(
        "reclassify_raster",
        {"input_path": "f.tif", "table": "0.1:5, 0.2-0.35:6", "unmatched": "nodata", "output_path": "out.tif"},
    )
    data, _, _, _ = read_out(workspace / "out.tif")
    assert data[0].filled(0).tolist() == [[5, 6], [6, 0]]


@pytest.mark.parametrize("table", ["0-10:1, 5-20:2", "3:1, 0-10:2", "1-5", "5-1:2", "1-5:1,,"])
def test_reclassify_refuses_a_bad_table_before_reading(app, workspace: Path, table: str) -> None:
    write_grid(workspace / "g.tif", GRID16)
    with pytest.raises(ArgumentError) as err:
        app.run(
            "reclassify_raster",
            {"input_path": "g.tif", "table": table, "unmatched": "nodata", "output_path": "out.tif"},
        )
    assert err.value.code == "RECLASS_TABLE_INVALID"
    assert_no_output(workspace, "out.tif")


# -- band_math ---------------------------------------------------------------------------------

NIR = [[0.5, 0.8], [0.3, 0.0]]
RED = [[0.1, 0.2], [0.3, 0.0]]


def test_ndvi_from_named_bands_with_a_division_by_zero(app, workspace: Path) -> None:
    # NDVI = (nir - red) / (nir + red): 0.4/0.6 = 0.6667, 0.6/1.0 = 0.6, 0/0.6 = 0, and 0/0 undefined ->
    # nodata, counted and warned about.
    write_grid(workspace / "s.tif", [NIR, RED], names=["nir", "red"])
    result = app.run(
        "band_math",
        {
            "input_paths": ["s.tif"],
            "bands": "nir=0:nir, red=input_paths[0]:2",
            "expression": "(nir - red) / (nir + red)",
            "output_path": "out.tif",
        },
    )
    data, _, profile, _ = read_out(workspace / "out.tif")
    assert (profile["dtype"], profile["nodata"]) == ("float32", NODATA)
    assert data[0].filled(NODATA).ravel().tolist() == pytest.approx([2 / 3, 0.6, 0.0, NODATA], abs=1e-6)
    record = manifest(workspace / "out.tif")
    assert record["parameters"]["x-mapsmith:cells_undefined"] == 1
    assert record["parameters"]["x-mapsmith:band_bindings"]["red"] == {
        "input": "input_paths[0]",
        "band": 2,
        "band_name": "red",
    }
    assert [w["code"] for w in result.warnings] == ["EXPRESSION_UNDEFINED_CELLS"]
    assert {c["name"]: c["passed"] for c in result.checks}["shape_preserved"]


def test_band_math_default_names_functions_and_comparisons(app, workspace: Path) -> None:
    # b1 = NIR, b2 = RED. where(b2 > 0.15, max(b1, b2), -1): red > 0.15 at (0,1) and (1,0) -> max 0.8, 0.3;
    # elsewhere -1. Plus (b1 >= 0.5) gives 1 at (0,0), (0,1): [[0, 1.8], [0.3, -1]].
    write_grid(workspace / "s.tif", [NIR, RED])
    app.run(
        "band_math",
        {
            "input_paths": ["s.tif"],
            "expression": "where(b2 > 0.15, max(b1, b2), -1) + (b1 >= 0.5)",
            "output_path": "out.tif",
        },
    )
    data, _, _, _ = read_out(workspace / "out.tif")
    assert data[0].ravel().tolist() == pytest.approx([0.0, 1.8, 0.3, -1.0], abs=1e-6)


def test_band_math_of_two_rasters_masks_nodata_of_either(app, workspace: Path) -> None:
    # a - b on the same grid; the cell that is nodata in b is nodata in the result.
    write_grid(workspace / "a.tif", [[10, 20], [30, 40]])
    write_grid(workspace / "b.tif", [[1, 2], [NODATA, 4]])
    app.run(
        "band_math",
        {"input_paths": ["a.tif", "b.tif"], "bands": "a=0:1, b=1:1", "expression": "a - b", "output_path": "out.tif"},
    )
    data, _, _, _ = read_out(workspace / "out.tif")
    assert data[0].filled(NODATA).tolist() == [[9, 18], [NODATA, 36]]


def test_band_math_refuses_inputs_on_different_grids(app, workspace: Path) -> None:
    # b is shifted one cell east: same CRS, size and cell size, different origin.
    write_grid(workspace / "a.tif", [[1, 2], [3, 4]])
    write_grid(workspace / "b.tif", [[1, 2], [3, 4]], x0=X0 + 10)
    with pytest.raises(InputError) as err:
        app.run(
            "band_math",
            {
                "input_paths": ["a.tif", "b.tif"],
                "bands": "a=0:1, b=1:1",
                "expression": "a + b",
                "output_path": "out.tif",
            },
        )
    assert err.value.code == "GRID_MISMATCH"
    assert err.value.evidence["input_paths[0]"]["transform"][0] == X0
    assert err.value.evidence["input_paths[1]"]["transform"][0] == X0 + 10
    assert "a.tif" in err.value.message and "b.tif" in err.value.message and "resample" in err.value.hint
    assert not (workspace / "out.tif").exists()


@pytest.mark.parametrize(
    ("expression", "token"),
    [
        ("__import__('os')", "__import__"),
        ("b1.real", "attribute access"),
        ("b1 if b1 else 0", "where(c, x, y)"),
        ("b1 and b2", "'and'/'or'"),
        ("(lambda: 1)()", "function"),
        ("b1[0]", "subscripting"),
        ("b1 % 2", "Mod"),
        ("'a'", "not a number"),
        ("nir + 1", "'nir' is not a band name"),
        ("sqrt(b1, b2)", "sqrt() takes 1"),
        ("b1 +", "not a valid expression"),
    ],
)
def test_band_math_refuses_anything_outside_the_whitelist(app, workspace: Path, expression: str, token: str) -> None:
    write_grid(workspace / "s.tif", [NIR, RED])
    with pytest.raises(ArgumentError) as err:
        app.run("band_math", {"input_paths": ["s.tif"], "expression": expression, "output_path": "out.tif"})
    assert err.value.code == "EXPRESSION_INVALID"
    assert token in err.value.message
    assert_no_output(workspace, "out.tif")


def test_band_math_power_of_constants_is_not_python_integer_arithmetic(app, workspace: Path) -> None:
    # 10 ** 10 ** 10 as Python integers would run for hours; as float64 it is inf in every cell: undefined.
    write_grid(workspace / "s.tif", [NIR, RED])
    result = app.run(
        "band_math", {"input_paths": ["s.tif"], "expression": "b1 * 0 + 10 ** 10 ** 10", "output_path": "out.tif"}
    )
    assert manifest(workspace / "out.tif")["parameters"]["x-mapsmith:cells_undefined"] == 4
    assert {c["name"]: c["passed"] for c in result.checks}["result_not_empty"] is False


def test_band_math_with_two_inputs_needs_names(app, workspace: Path) -> None:
    write_grid(workspace / "a.tif", [[1, 2], [3, 4]])
    with pytest.raises(ArgumentError) as err:
        app.run("band_math", {"input_paths": ["a.tif", "a.tif"], "expression": "b1", "output_path": "out.tif"})
    assert err.value.code == "BANDS_REQUIRED"


# -- extract_band ------------------------------------------------------------------------------


def test_extract_band_by_name_keeps_type_nodata_scale_and_offset(app, workspace: Path) -> None:
    import numpy as np
    import rasterio

    path = write_grid(
        workspace / "s.tif",
        [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[0, 100], [200, 300]]],
        dtype="uint16",
        nodata=0,
        names=["blue", "green", "nir"],
    )
    with rasterio.Env(GDAL_PAM_ENABLED="NO"), rasterio.open(path, "r+") as ds:
        ds.scales = (1.0, 1.0, 0.0001)
        ds.offsets = (0.0, 0.0, 0.1)
    result = app.run("extract_band", {"input_path": "s.tif", "band": "nir", "output_path": "out.tif"})
    with rasterio.open(workspace / "out.tif") as ds:
        assert (ds.count, ds.dtypes[0], ds.nodata) == (1, "uint16", 0)
        assert ds.read(1).tolist() == [[0, 100], [200, 300]]
        assert (ds.scales[0], ds.offsets[0], ds.descriptions[0]) == (0.0001, 0.1, "nir")
        assert np.array_equal(np.array(ds.transform.to_gdal()), np.array((X0, 10, 0, Y0, 0, -10)))
    assert not (workspace / "out.tif.aux.xml").exists()
    assert manifest(workspace / "out.tif")["parameters"]["band"] == 3
    assert {c["name"]: c["passed"] for c in result.checks}["shape_preserved"]


def test_extract_band_by_number_and_a_missing_band(app, workspace: Path) -> None:
    write_grid(workspace / "s.tif", [NIR, RED], names=["nir", "red"])
    app.run("extract_band", {"input_path": "s.tif", "band": "2", "output_path": "out.tif"})
    data, _, _, _ = read_out(workspace / "out.tif")
    assert data[0].ravel().tolist() == pytest.approx([0.1, 0.2, 0.3, 0.0])
    with pytest.raises(InputError) as err:
        app.run("extract_band", {"input_path": "s.tif", "band": "swir", "output_path": "out2.tif"})
    assert err.value.code == "BAND_NOT_FOUND" and err.value.evidence["bands"] == ["nir", "red"]


# -- band_statistics ---------------------------------------------------------------------------


def test_band_statistics_known_mean_stdev_and_percentiles(app, workspace: Path) -> None:
    # Cell 16 is nodata, so the values are 1..15: mean 8, population stdev sqrt((15^2 - 1) / 12) = sqrt(224/12).
    # Linear percentiles over 15 sorted values: rank p/100 * 14 -> 5th: 1 + 0.7 = 1.7; 50th: 8; 95th: 1 + 13.3.
    rows = [row[:] for row in GRID16]
    rows[3][3] = NODATA
    write_grid(workspace / "g.tif", rows)
    result = app.run("band_statistics", {"input_path": "g.tif", "percentiles": "5,50,95"})
    (band,) = result.answer["bands"]
    assert (band["valid_count"], band["nodata_count"], band["min"], band["max"]) == (15, 1, 1.0, 15.0)
    assert band["mean"] == pytest.approx(8.0)
    assert band["stdev"] == pytest.approx(math.sqrt(224 / 12))
    assert band["percentiles"] == pytest.approx({"5": 1.7, "50": 8.0, "95": 14.3})
    assert [p.name for p in workspace.iterdir()] == ["g.tif"]  # answers write nothing


def test_band_statistics_one_band_by_name_and_bad_percentiles(app, workspace: Path) -> None:
    write_grid(workspace / "s.tif", [NIR, RED], names=["nir", "red"])
    result = app.run("band_statistics", {"input_path": "s.tif", "band": "red"})
    (band,) = result.answer["bands"]
    assert (band["band"], band["name"], band["mean"]) == (2, "red", pytest.approx(0.15))
    with pytest.raises(ArgumentError) as err:
        app.run("band_statistics", {"input_path": "s.tif", "percentiles": "5,150"})
    assert err.value.code == "PERCENTILES_INVALID"


# -- south-up input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "arguments"),
    [
        ("clip_raster", {"min_x": 500_000, "min_y": 5_000_020, "max_x": 500_020, "max_y": 5_000_040}),
        ("resample_raster", {"cell_size": 20, "resampling": "average"}),
        ("reclassify_raster", {"table": TABLE, "unmatched": "nodata"}),
        ("band_math", {"expression": "b1 * 2"}),
        ("extract_band", {"band": "1"}),
        ("reproject_raster", {"target_crs": "EPSG:32611", "resampling": "bilinear"}),
    ],
)
def test_south_up_input_gives_the_north_up_result(app, workspace: Path, operation: str, arguments: dict) -> None:
    import numpy as np

    write_grid(workspace / "north.tif", GRID16)
    write_grid(workspace / "south.tif", GRID16, south_up=True)
    key = "input_paths" if operation == "band_math" else "input_path"
    outputs = []
    for name in ("north", "south"):
        given = [f"{name}.tif"] if operation == "band_math" else f"{name}.tif"
        app.run(operation, {key: given, **arguments, "output_path": f"{name}_out.tif"})
        data, transform, _, _ = read_out(workspace / f"{name}_out.tif")
        outputs.append((np.ma.filled(data.astype("float64"), -1).tolist(), transform.to_gdal()))
    assert outputs[0] == outputs[1]
    assert transform.e < 0
    record = manifest(workspace / "south_out.tif")
    assert json.dumps(record["parameters"]["x-mapsmith:normalised_inputs"]).count("south-up") == 1


def test_the_south_up_fixture_really_is_south_up(workspace: Path) -> None:
    import rasterio

    write_grid(workspace / "south.tif", GRID16, south_up=True)
    with rasterio.open(workspace / "south.tif") as ds:
        assert ds.transform.e == 10.0 and ds.read(1)[0].tolist() == [13, 14, 15, 16]


# -- the Mount St Helens DEM -------------------------------------------------------------------


@pytest.mark.skipif(not DEM.exists(), reason=f"{DEM} is not present")
def test_resample_the_real_dem_to_100_metres(app, workspace: Path) -> None:
    # 520 cells x 23.6997 m = 12,323.8 m -> ceil(123.24) = 124 cells of 100 m each way; averages of
    # elevations stay within the DEM's 652..2534 m.
    shutil.copy(DEM, workspace / "dem.tif")
    result = app.run(
        "resample_raster",
        {"input_path": "dem.tif", "cell_size": 100, "resampling": "average", "output_path": "out.tif"},
    )
    data, transform, profile, _ = read_out(workspace / "out.tif")
    assert data.shape == (1, 124, 124) and profile["dtype"] == "int16"
    assert 652 <= data.min() and data.max() <= 2534
    assert {c["name"]: c["passed"] for c in result.checks}["values_in_expected_range"]
    assert any("rounded" in n for n in result.notes)  # averages of int16 are rounded, and it says so
