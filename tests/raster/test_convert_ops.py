"""raster_to_polygons, rasterize_layer, euclidean_distance and idw_interpolation against answers
worked out by hand before the code ran.

The grids are tiny and sit in UTM 10N (EPSG:32610) with 10 m cells, so every expected polygon area,
burned cell, distance and interpolated value can be derived in the comment beside it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from shapely.geometry import LineString, Point, Polygon, box

from layers import read, write_layer
from mapsmith.errors import ArgumentError, CRSError, InputError, MapSmithError

X0, Y0 = 500_000.0, 5_000_000.0  # the south-west corner every test grid is laid from
UTM = "EPSG:32610"


def write_raster(
    path: Path, array, *, top: float, left: float = X0, cell: float = 10.0, crs: str = UTM, nodata=None
) -> Path:
    import rasterio
    from rasterio.transform import from_origin

    array = np.asarray(array)
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=array.shape[1],
        height=array.shape[0],
        count=1,
        dtype=array.dtype.name,
        crs=crs,
        transform=from_origin(left, top, cell, cell),
        nodata=nodata,
    ) as dst:
        dst.write(array, 1)
    return path


def read_raster(path: Path) -> tuple[np.ndarray, dict]:
    import rasterio

    with rasterio.open(path) as ds:
        return ds.read(1), {
            "nodata": ds.nodata,
            "dtype": ds.dtypes[0],
            "transform": ds.transform,
            "crs": ds.crs.to_epsg(),
            "shape": (ds.height, ds.width),
        }


def manifest(workspace: Path, name: str) -> dict:
    return json.loads((workspace / f"{name}.provenance.json").read_text("utf-8"))


def check(record: dict, name: str) -> dict:
    return next(c for c in record["verification"] if c["name"] == name)


def like_grid(workspace: Path, rows: int, cols: int, name: str = "like.tif", crs: str = UTM) -> str:
    """A float32 grid of 10 m cells whose south-west corner is (X0, Y0)."""
    write_raster(workspace / name, np.zeros((rows, cols), dtype="float32"), top=Y0 + 10 * rows, crs=crs)
    return name


# -- raster_to_polygons ----------------------------------------------------------------------------

DIAGONAL = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 2]], dtype="uint8")


@pytest.mark.parametrize(
    ("connectivity", "counts"),
    [
        # 4-connectivity: the two 1s meet only at a corner -> 2 polygons; the 0s split into the
        # upper-right L (3 cells) and the lower-left L (3 cells) -> 2; the single 2 -> 1.
        (4, {0: 2, 1: 2, 2: 1}),
        # 8-connectivity: corners join, so each value is one region.
        (8, {0: 1, 1: 1, 2: 1}),
    ],
)
def test_polygonize_diagonal_pattern_4_vs_8(app, workspace: Path, connectivity: int, counts: dict) -> None:
    write_raster(workspace / "classes.tif", DIAGONAL, top=Y0 + 30)
    result = app.run(
        "raster_to_polygons", {"input_path": "classes.tif", "connectivity": connectivity, "output_path": "p.gpkg"}
    )
    out = read(workspace / "p.gpkg")
    got = out.groupby("value").size().to_dict()
    assert got == counts
    # areas per value are the cells' areas whatever the connectivity: 6, 2 and 1 cells of 100 m2
    areas = out.assign(a=out.area).groupby("value")["a"].sum().to_dict()
    assert areas == pytest.approx({0: 600.0, 1: 200.0, 2: 100.0})
    assert out["value"].dtype.kind == "i"
    assert out.geometry.is_valid.all()
    record = manifest(workspace, "p.gpkg")
    assert record["parameters"]["connectivity"] == connectivity
    assert check(record, "x-mapsmith:cell_area_conserved")["passed"] is True
    assert record["output"]["crs"] == UTM
    if connectivity == 8:
        # the two diagonal 1s are one feature made of two squares
        (ones,) = out[out["value"] == 1].geometry
        assert ones.geom_type == "MultiPolygon" and len(ones.geoms) == 2
        assert any("multipolygons" in n for n in result.notes)
    assert not result.repairs  # written valid by the operation, not repaired afterwards by the runner


def test_polygonize_default_connectivity_is_4_and_recorded(app, workspace: Path) -> None:
    write_raster(workspace / "classes.tif", DIAGONAL, top=Y0 + 30)
    app.run("raster_to_polygons", {"input_path": "classes.tif", "output_path": "p.gpkg"})
    assert len(read(workspace / "p.gpkg")) == 5
    assert manifest(workspace, "p.gpkg")["parameters"]["connectivity"] == 4


def test_nodata_cells_make_no_polygon(app, workspace: Path) -> None:
    # [[5, 5], [5, nodata]]: one L-shaped polygon of 3 cells = 300 m2, nothing for the nodata cell
    write_raster(workspace / "c.tif", np.array([[5, 5], [5, 0]], dtype="int16"), top=Y0 + 20, nodata=0)
    result = app.run("raster_to_polygons", {"input_path": "c.tif", "output_path": "p.gpkg"})
    out = read(workspace / "p.gpkg")
    assert out["value"].tolist() == [5]
    assert out.area.iloc[0] == pytest.approx(300.0)
    assert out.total_bounds.tolist() == pytest.approx([X0, Y0, X0 + 20, Y0 + 20])
    assert any("1 nodata cell(s) produced no polygon" in n for n in result.notes)


def test_continuous_float_band_is_refused_but_a_categorical_one_is_not(app, workspace: Path) -> None:
    surface = (np.arange(9, dtype="float32") * 1.5).reshape(3, 3)  # 9 distinct values
    write_raster(workspace / "dem.tif", surface, top=Y0 + 30)
    with pytest.raises(InputError) as err:
        app.run("raster_to_polygons", {"input_path": "dem.tif", "max_distinct_values": 8, "output_path": "p.gpkg"})
    assert err.value.code == "RASTER_NOT_CATEGORICAL"
    assert err.value.evidence["distinct_values"] == 9
    assert "reclassify_raster" in err.value.hint
    assert not (workspace / "p.gpkg").exists()
    # the same 9 values as integers are class codes: never refused, 9 one-cell polygons
    write_raster(workspace / "ints.tif", np.arange(9, dtype="int32").reshape(3, 3), top=Y0 + 30)
    app.run("raster_to_polygons", {"input_path": "ints.tif", "max_distinct_values": 8, "output_path": "q.gpkg"})
    assert len(read(workspace / "q.gpkg")) == 9
    # a float band holding few values is categorical: values kept as written (2.5 stays 2.5)
    write_raster(workspace / "f.tif", np.array([[2.5, 2.5], [7.0, 2.5]], dtype="float32"), top=Y0 + 20)
    app.run("raster_to_polygons", {"input_path": "f.tif", "output_path": "r.gpkg"})
    out = read(workspace / "r.gpkg")
    assert sorted(out["value"].tolist()) == [2.5, 7.0]
    assert out.set_index("value").area.to_dict() == pytest.approx({2.5: 300.0, 7.0: 100.0})


def test_polygonize_a_named_band(app, workspace: Path) -> None:
    import rasterio

    path = write_raster(workspace / "c.tif", DIAGONAL, top=Y0 + 30)
    with rasterio.open(path, "r+") as ds:
        ds.set_band_description(1, "landcover")
    app.run("raster_to_polygons", {"input_path": "c.tif", "band": "landcover", "output_path": "p.gpkg"})
    assert len(read(workspace / "p.gpkg")) == 5
    with pytest.raises(InputError) as err:
        app.run("raster_to_polygons", {"input_path": "c.tif", "band": "2", "output_path": "q.gpkg"})
    assert err.value.code == "BAND_NOT_FOUND"


# -- rasterize_layer -------------------------------------------------------------------------------


def test_rasterize_box_centre_rule_and_all_touched(app, workspace: Path) -> None:
    # 10 x 10 cells of 10 m, top at Y0 + 100. The box x 12..44, y 12..44 (from the SW corner):
    # cell centres at 5, 15, 25 ... ; centres inside: x 15, 25, 35 -> columns 1..3; y 15, 25, 35 ->
    # rows 8, 7, 6 (row r has centre y 95 - 10 r). 9 cells. Touched: x 12..44 meets columns 1..4,
    # y 12..44 meets rows 5..8: 16 cells.
    like = like_grid(workspace, 10, 10)
    write_layer(workspace / "b.gpkg", [box(X0 + 12, Y0 + 12, X0 + 44, Y0 + 44)], UTM, id=[1])
    app.run("rasterize_layer", {"input_path": "b.gpkg", "like_path": like, "output_path": "centre.tif"})
    app.run(
        "rasterize_layer",
        {"input_path": "b.gpkg", "like_path": like, "all_touched": True, "output_path": "touched.tif"},
    )
    centre, meta = read_raster(workspace / "centre.tif")
    touched, _ = read_raster(workspace / "touched.tif")
    expected = np.zeros((10, 10), dtype="uint8")
    expected[6:9, 1:4] = 1
    assert (centre == expected).all()
    expected[5:9, 1:5] = 1
    assert (touched == expected).all()
    assert meta["dtype"] == "uint8" and meta["nodata"] == 0 and meta["crs"] == 32610
    record = manifest(workspace, "centre.tif")
    assert record["parameters"]["all_touched"] is False and record["parameters"]["merge_alg"] == "replace"
    assert record["parameters"]["nodata"] == 0
    assert record["parameters"]["x-mapsmith:output_grid"]["width"] == 10
    assert check(record, "values_in_expected_range")["passed"] is True
    assert manifest(workspace, "touched.tif")["parameters"]["all_touched"] is True


def test_rasterize_field_replace_and_add(app, workspace: Path) -> None:
    # A covers columns 0-1, rows 0-1 with 10; B (later) covers columns 1-2, rows 1-2 with 20.
    # They share cell (1, 1): replace -> 20 (the later feature), add -> 30.
    like = like_grid(workspace, 3, 3)
    a = box(X0, Y0 + 10, X0 + 20, Y0 + 30)
    b = box(X0 + 10, Y0, X0 + 30, Y0 + 20)
    write_layer(workspace / "ab.gpkg", [a, b], UTM, value=[10.0, 20.0])
    result = app.run(
        "rasterize_layer", {"input_path": "ab.gpkg", "like_path": like, "field": "value", "output_path": "replace.tif"}
    )
    app.run(
        "rasterize_layer",
        {"input_path": "ab.gpkg", "like_path": like, "field": "value", "merge_alg": "add", "output_path": "add.tif"},
    )
    n = -9999.0
    replace, meta = read_raster(workspace / "replace.tif")
    assert replace.tolist() == [[10, 10, n], [10, 20, 20], [n, 20, 20]]
    assert meta["nodata"] == n and meta["dtype"] == "float32"
    added, _ = read_raster(workspace / "add.tif")
    assert added.tolist() == [[10, 10, n], [10, 30, 20], [n, 20, 20]]
    assert any("later feature in the layer wins" in note for note in result.notes)
    assert check(manifest(workspace, "add.tif"), "values_in_expected_range")["passed"] is True


def test_rasterize_on_cell_size_snaps_the_layer_extent(app, workspace: Path) -> None:
    # The same two boxes span x 0..30, y 0..30 from (X0, Y0): already multiples of 10 m, polygons
    # only, so the grid is exactly 3 x 3 with its top-left corner at (X0, Y0 + 30).
    a = box(X0, Y0 + 10, X0 + 20, Y0 + 30)
    b = box(X0 + 10, Y0, X0 + 30, Y0 + 20)
    write_layer(workspace / "ab.gpkg", [a, b], UTM, value=[10.0, 20.0])
    app.run(
        "rasterize_layer", {"input_path": "ab.gpkg", "cell_size_meters": 10, "field": "value", "output_path": "r.tif"}
    )
    values, meta = read_raster(workspace / "r.tif")
    assert meta["shape"] == (3, 3)
    assert (meta["transform"].c, meta["transform"].f, meta["transform"].a) == (X0, Y0 + 30, 10.0)
    assert values.tolist() == [[10, 10, -9999], [10, 20, 20], [-9999, 20, 20]]
    # 25 m cells: x 0..30 snaps to 0..50 (2 columns), y to 0..50 (2 rows), top at Y0 + 50
    app.run("rasterize_layer", {"input_path": "ab.gpkg", "cell_size_meters": 25, "output_path": "c.tif"})
    _, meta = read_raster(workspace / "c.tif")
    assert meta["shape"] == (2, 2) and (meta["transform"].c, meta["transform"].f) == (X0, Y0 + 50)


def test_points_on_the_grid_edge_are_not_lost(app, workspace: Path) -> None:
    # Points at (0, 0) and (20, 10) from (X0, Y0), 10 m cells. GDAL gives a cell its west and north
    # edges, so the snapped extent x 0..20, y 0..10 is widened to x 0..30 and y -10..10: 3 x 2 cells.
    # (0, 0) falls in row 1 (y 0..-10 is row 1 counted from the top at 10), column 0; (20, 10) in
    # row 0, column 2.
    write_layer(workspace / "p.gpkg", [Point(X0, Y0), Point(X0 + 20, Y0 + 10)], UTM, id=[1, 2])
    app.run("rasterize_layer", {"input_path": "p.gpkg", "cell_size_meters": 10, "output_path": "r.tif"})
    values, meta = read_raster(workspace / "r.tif")
    assert meta["shape"] == (2, 3)
    assert (meta["transform"].c, meta["transform"].f) == (X0, Y0 + 10)
    assert values.tolist() == [[0, 0, 1], [1, 0, 0]]


def test_a_feature_that_burns_no_cell_is_named(app, workspace: Path) -> None:
    # A 2 x 2 m square at (1..3, 1..3) inside cell (row 2, col 0) misses its centre (5, 5).
    like = like_grid(workspace, 3, 3)
    write_layer(
        workspace / "t.gpkg", [box(X0 + 1, Y0 + 1, X0 + 3, Y0 + 3), box(X0 + 10, Y0, X0 + 30, Y0 + 30)], UTM, id=[1, 2]
    )
    result = app.run("rasterize_layer", {"input_path": "t.gpkg", "like_path": like, "output_path": "r.tif"})
    (warning,) = [w for w in result.warnings if w["code"] == "FEATURES_NOT_BURNED"]
    assert "[0]" in warning["message"] and "all_touched" in warning["hint"]
    result = app.run(
        "rasterize_layer", {"input_path": "t.gpkg", "like_path": like, "all_touched": True, "output_path": "s.tif"}
    )
    assert not [w for w in result.warnings if w["code"] == "FEATURES_NOT_BURNED"]
    values, _ = read_raster(workspace / "s.tif")
    assert values[2, 0] == 1


def test_rasterize_transforms_the_layer_to_like_paths_crs(app, workspace: Path) -> None:
    from pyproj import Transformer

    # The box of test_rasterize_box_centre_rule..., its corners given in lon/lat: the same 9 cells
    # (the box's edges lie 3-5 m from any cell centre; the transformation moves them by micrometres).
    like = like_grid(workspace, 10, 10)
    to_lonlat = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    corners = [(X0 + 12, Y0 + 12), (X0 + 44, Y0 + 12), (X0 + 44, Y0 + 44), (X0 + 12, Y0 + 44)]
    write_layer(workspace / "ll.gpkg", [Polygon([to_lonlat.transform(x, y) for x, y in corners])], "EPSG:4326", id=[1])
    app.run("rasterize_layer", {"input_path": "ll.gpkg", "like_path": like, "output_path": "r.tif"})
    values, meta = read_raster(workspace / "r.tif")
    expected = np.zeros((10, 10), dtype="uint8")
    expected[6:9, 1:4] = 1
    assert (values == expected).all() and meta["crs"] == 32610
    record = manifest(workspace, "r.tif")
    decisions = record["crs_decisions"]
    assert decisions["source_crs"] == "EPSG:4326" and decisions["target_crs"] == UTM
    assert "pipeline" in decisions["transformation"]
    assert check(record, "crs_matches")["passed"] is True


@pytest.mark.parametrize("operation", ["rasterize_layer", "euclidean_distance", "idw_interpolation"])
def test_exactly_one_grid_is_required(app, workspace: Path, operation: str) -> None:
    like = like_grid(workspace, 3, 3)
    write_layer(workspace / "p.gpkg", [Point(X0 + 5, Y0 + 5)], UTM, value=[1.0])
    base = {"input_path": "p.gpkg", "output_path": "o.tif"}
    if operation == "idw_interpolation":
        base["field"] = "value"
    with pytest.raises(ArgumentError) as err:
        app.run(operation, {**base, "like_path": like, "cell_size_meters": 10})
    assert err.value.code == "GRID_GIVEN_TWICE"
    with pytest.raises(ArgumentError) as err:
        app.run(operation, base)
    assert err.value.code == "GRID_NOT_GIVEN"
    # refused before the engine: no dataset, no failure record
    assert sorted(p.name for p in workspace.iterdir()) == ["like.tif", "p.gpkg"]


@pytest.mark.parametrize("operation", ["rasterize_layer", "euclidean_distance", "idw_interpolation"])
def test_cell_size_on_a_geographic_layer_is_refused(app, workspace: Path, operation: str) -> None:
    write_layer(workspace / "ll.gpkg", [Point(-122.0, 46.0), Point(-121.9, 46.1)], "EPSG:4326", value=[1.0, 2.0])
    args = {"input_path": "ll.gpkg", "cell_size_meters": 10, "output_path": "o.tif"}
    if operation == "idw_interpolation":
        args["field"] = "value"
    with pytest.raises(InputError) as err:
        app.run(operation, args)
    assert err.value.code == "RASTER_GEOGRAPHIC_CRS"
    assert "like_path" in err.value.hint and not (workspace / "o.tif").exists()


def test_rasterize_refuses_text_fields_and_nodata_collisions(app, workspace: Path) -> None:
    like = like_grid(workspace, 3, 3)
    write_layer(workspace / "b.gpkg", [box(X0, Y0, X0 + 30, Y0 + 30)], UTM, name=["a"], v=[-9999.0])
    with pytest.raises(InputError) as err:
        app.run("rasterize_layer", {"input_path": "b.gpkg", "like_path": like, "field": "name", "output_path": "o.tif"})
    assert err.value.code == "FIELD_NOT_NUMERIC"
    with pytest.raises(InputError) as err:
        app.run("rasterize_layer", {"input_path": "b.gpkg", "like_path": like, "field": "v", "output_path": "o.tif"})
    assert err.value.code == "NODATA_COLLIDES" and err.value.evidence["cells"] == 9
    app.run(
        "rasterize_layer",
        {"input_path": "b.gpkg", "like_path": like, "field": "v", "nodata": -1, "output_path": "o.tif"},
    )
    values, meta = read_raster(workspace / "o.tif")
    assert (values == -9999).all() and meta["nodata"] == -1


# -- euclidean_distance ----------------------------------------------------------------------------


def test_distance_from_a_point_at_a_cell_centre(app, workspace: Path) -> None:
    # 5 x 5 cells; the source sits on the centre of cell (2, 2), so cell (r, c) is
    # 10 * sqrt((r - 2)^2 + (c - 2)^2) m away: 0, 10, 14.142, 20, 22.361, 28.284.
    like = like_grid(workspace, 5, 5)
    write_layer(workspace / "s.gpkg", [Point(X0 + 25, Y0 + 25)], UTM, id=[1])
    app.run("euclidean_distance", {"input_path": "s.gpkg", "like_path": like, "output_path": "d.tif"})
    d, meta = read_raster(workspace / "d.tif")
    assert meta["dtype"] == "float32"
    assert d[2, 2] == 0 and d[2, 3] == pytest.approx(10) and d[1, 2] == pytest.approx(10)
    assert d[3, 3] == pytest.approx(10 * math.sqrt(2), abs=1e-4)
    assert d[0, 1] == pytest.approx(10 * math.sqrt(5), abs=1e-4)
    assert d[0, 0] == pytest.approx(20 * math.sqrt(2), abs=1e-4)
    rows, cols = np.mgrid[0:5, 0:5]
    assert d == pytest.approx(10 * np.hypot(rows - 2, cols - 2), abs=1e-4)
    record = manifest(workspace, "d.tif")
    assert check(record, "values_in_expected_range")["passed"] is True
    assert "cell centre" in record["parameters"]["x-mapsmith:distance_method"]
    assert record["crs_decisions"]["analysis_crs"] == UTM


def test_distance_is_to_the_line_itself_not_to_cells(app, workspace: Path) -> None:
    # A line along y = 25 from x = 0 to x = 25 (ending at the centre of cell (2, 2)). Cells left of
    # the end are |y - 25| away: (0, 0) at y 45 -> 20. Right of the end the distance is to the end
    # point: (2, 4) at (45, 25) -> 20; (0, 4) at (45, 45) -> sqrt(20^2 + 20^2) = 28.284.
    like = like_grid(workspace, 5, 5)
    write_layer(workspace / "l.gpkg", [LineString([(X0, Y0 + 25), (X0 + 25, Y0 + 25)])], UTM, id=[1])
    app.run("euclidean_distance", {"input_path": "l.gpkg", "like_path": like, "output_path": "d.tif"})
    d, _ = read_raster(workspace / "d.tif")
    assert d[0, 0] == pytest.approx(20) and d[1, 1] == pytest.approx(10) and d[2, 0] == 0
    assert d[2, 4] == pytest.approx(20) and d[2, 3] == pytest.approx(10)
    assert d[0, 4] == pytest.approx(20 * math.sqrt(2), abs=1e-4)
    assert d[1, 3] == pytest.approx(10 * math.sqrt(2), abs=1e-4)


def test_distance_inside_a_polygon_is_zero_and_outside_is_to_its_edge(app, workspace: Path) -> None:
    # Polygon x 0..20, y 30..50 covers cells rows 0-1, columns 0-1. Cell (0, 3) at (35, 45) is 15 m
    # from its east edge; cell (4, 4) at (45, 5) is sqrt(25^2 + 25^2) = 35.355 m from its corner (20, 30).
    like = like_grid(workspace, 5, 5)
    write_layer(workspace / "poly.gpkg", [box(X0, Y0 + 30, X0 + 20, Y0 + 50)], UTM, id=[1])
    app.run("euclidean_distance", {"input_path": "poly.gpkg", "like_path": like, "output_path": "d.tif"})
    d, _ = read_raster(workspace / "d.tif")
    assert (d[0:2, 0:2] == 0).all()
    assert d[0, 3] == pytest.approx(15) and d[4, 4] == pytest.approx(25 * math.sqrt(2), abs=1e-4)
    # A polygon covering the grid with a hole x 10..40, y 10..40: the centre cell (25, 25) lies in the
    # hole, 15 m from the hole's ring; the ring of cells around it (e.g. (1, 1) at (15, 35)) is 5 m from it.
    holed = Polygon(
        [(X0, Y0), (X0 + 50, Y0), (X0 + 50, Y0 + 50), (X0, Y0 + 50)],
        [[(X0 + 10, Y0 + 10), (X0 + 40, Y0 + 10), (X0 + 40, Y0 + 40), (X0 + 10, Y0 + 40)]],
    )
    write_layer(workspace / "holed.gpkg", [holed], UTM, id=[1])
    app.run("euclidean_distance", {"input_path": "holed.gpkg", "like_path": like, "output_path": "h.tif"})
    h, _ = read_raster(workspace / "h.tif")
    assert h[2, 2] == pytest.approx(15) and h[1, 1] == pytest.approx(5) and h[1, 2] == pytest.approx(5)
    assert (h[0, :] == 0).all() and (h[:, 4] == 0).all()


def test_distance_on_cell_size_and_the_size_cap(app, workspace: Path) -> None:
    # Sources at (10, 10) and (60, 60): the extent snaps to x 10..60, y 10..60, 5 x 5 cells of 10 m
    # with centres (15 + 10 c, 55 - 10 r). Cell (0, 4) at (55, 55) is sqrt(50) = 7.071 m from (60, 60);
    # cell (4, 0) at (15, 15) is sqrt(50) from (10, 10).
    write_layer(workspace / "s.gpkg", [Point(X0 + 10, Y0 + 10), Point(X0 + 60, Y0 + 60)], UTM, id=[1, 2])
    app.run("euclidean_distance", {"input_path": "s.gpkg", "cell_size_meters": 10, "output_path": "d.tif"})
    d, meta = read_raster(workspace / "d.tif")
    assert meta["shape"] == (5, 5) and (meta["transform"].c, meta["transform"].f) == (X0 + 10, Y0 + 60)
    assert d[0, 4] == pytest.approx(math.sqrt(50), abs=1e-4) and d[4, 0] == pytest.approx(math.sqrt(50), abs=1e-4)
    # 0.01 m cells over 50 m x 50 m: 5,000 x 5,000 = 25 million cells, over the 10 million cap
    with pytest.raises(InputError) as err:
        app.run("euclidean_distance", {"input_path": "s.gpkg", "cell_size_meters": 0.01, "output_path": "e.tif"})
    assert err.value.code == "RASTER_TOO_LARGE" and "coarser cell_size_meters" in err.value.hint


def test_distance_on_a_geographic_grid_is_refused(app, workspace: Path) -> None:
    write_raster(
        workspace / "ll.tif", np.zeros((3, 3), dtype="float32"), top=46.0, left=-122.0, cell=0.001, crs="EPSG:4326"
    )
    write_layer(workspace / "s.gpkg", [Point(-121.999, 45.999)], "EPSG:4326", id=[1])
    with pytest.raises(MapSmithError) as err:
        app.run("euclidean_distance", {"input_path": "s.gpkg", "like_path": "ll.tif", "output_path": "d.tif"})
    assert isinstance(err.value, (CRSError, InputError))
    assert err.value.code == "RASTER_GEOGRAPHIC_CRS"
    assert not (workspace / "d.tif").exists()


def test_distance_in_a_foot_crs_is_written_in_metres(app, workspace: Path) -> None:
    # EPSG:2272 (Pennsylvania South, US survey feet): a source 100 ft east of a cell centre is
    # 100 * 1200/3937 = 30.4801 m away.
    left, top = 2_600_000.0, 240_000.0
    write_raster(
        workspace / "ft.tif", np.zeros((1, 2), dtype="float32"), top=top, left=left, cell=100.0, crs="EPSG:2272"
    )
    write_layer(workspace / "s.gpkg", [Point(left + 50, top - 50)], "EPSG:2272", id=[1])
    app.run("euclidean_distance", {"input_path": "s.gpkg", "like_path": "ft.tif", "output_path": "d.tif"})
    d, _ = read_raster(workspace / "d.tif")
    assert d[0, 0] == 0 and d[0, 1] == pytest.approx(100 * 1200 / 3937, abs=1e-4)


# -- idw_interpolation -----------------------------------------------------------------------------


def _two_samples(workspace: Path, extra: bool = False) -> None:
    # 1 x 5 cells, centres x = 5, 15, 25, 35, 45; samples 10 at x = 5 and 20 at x = 45 (y = 5).
    points = [Point(X0 + 5, Y0 + 5), Point(X0 + 45, Y0 + 5)]
    values = [10.0, 20.0]
    if extra:  # a third point with no value: left out, counted
        points.append(Point(X0 + 25, Y0 + 5))
        values.append(None)
    write_layer(workspace / "s.gpkg", points, UTM, value=values, name=["a", "b", "c"][: len(points)])


@pytest.mark.parametrize(
    ("power", "expected"),
    [
        # power 2, cell at 15: weights 1/10^2 and 1/30^2 -> (10 * 9 + 20 * 1) / (9 + 1) = 11;
        # the midpoint (25) is 20 m from both: 15; the samples' own cells keep 10 and 20.
        (2, [10.0, 11.0, 15.0, 19.0, 20.0]),
        # power 1, cell at 15: (10 * 3 + 20 * 1) / (3 + 1) = 12.5
        (1, [10.0, 12.5, 15.0, 17.5, 20.0]),
    ],
)
def test_idw_two_samples(app, workspace: Path, power: float, expected: list) -> None:
    _two_samples(workspace, extra=True)
    like = like_grid(workspace, 1, 5)
    result = app.run(
        "idw_interpolation",
        {"input_path": "s.gpkg", "like_path": like, "field": "value", "power": power, "output_path": "i.tif"},
    )
    z, meta = read_raster(workspace / "i.tif")
    assert z[0].tolist() == pytest.approx(expected, abs=1e-5)
    assert meta["dtype"] == "float32"
    assert any("1 point(s) with a null 'value' were left out" in n for n in result.notes)
    record = manifest(workspace, "i.tif")
    assert record["parameters"]["power"] == power and record["parameters"]["max_points"] == 12
    range_check = check(record, "values_in_expected_range")
    assert range_check["passed"] is True and "10.0..20.0" in range_check["detail"]


def test_idw_on_cell_size_gives_the_same_grid(app, workspace: Path) -> None:
    # Samples at x 5 and 45, y 5: the extent snaps to x 0..50 (5 columns) and y 0..10 (1 row).
    _two_samples(workspace)
    app.run(
        "idw_interpolation", {"input_path": "s.gpkg", "cell_size_meters": 10, "field": "value", "output_path": "i.tif"}
    )
    z, meta = read_raster(workspace / "i.tif")
    assert meta["shape"] == (1, 5) and (meta["transform"].c, meta["transform"].f) == (X0, Y0 + 10)
    assert z[0].tolist() == pytest.approx([10.0, 11.0, 15.0, 19.0, 20.0], abs=1e-5)


def test_idw_search_radius_leaves_far_cells_empty(app, workspace: Path) -> None:
    # Within 15 m: the cell at 15 sees only the sample at 5 (10 m) -> 10; the midpoint sees none
    # (both 20 m away) -> nodata; the cells at 35 and 45 see only the 20.
    _two_samples(workspace)
    like = like_grid(workspace, 1, 5)
    result = app.run(
        "idw_interpolation",
        {
            "input_path": "s.gpkg",
            "like_path": like,
            "field": "value",
            "search_radius_meters": 15,
            "output_path": "i.tif",
        },
    )
    z, meta = read_raster(workspace / "i.tif")
    assert meta["nodata"] == -9999
    assert z[0].tolist() == pytest.approx([10.0, 10.0, -9999.0, 20.0, 20.0])
    (warning,) = [w for w in result.warnings if w["code"] == "CELLS_WITHOUT_SAMPLES"]
    assert warning["message"].startswith("1 of 5 cells")


def test_idw_nearest_one_is_nearest_neighbour(app, workspace: Path) -> None:
    _two_samples(workspace)
    like = like_grid(workspace, 1, 5)
    app.run(
        "idw_interpolation",
        {"input_path": "s.gpkg", "like_path": like, "field": "value", "max_points": 1, "output_path": "i.tif"},
    )
    z, _ = read_raster(workspace / "i.tif")
    assert z[0, [0, 1, 3, 4]].tolist() == [10.0, 10.0, 20.0, 20.0]


def test_idw_tiles_agree_with_a_brute_force_search(app, workspace: Path) -> None:
    # 150 x 140 cells span several 64-cell tiles; the tile pruning must pick the same 5 nearest
    # samples a full search picks. The reference below compares every cell with every sample.
    rng = np.random.default_rng(7)
    n = 40
    xs, ys = X0 + rng.uniform(-200, 1600, n), Y0 + rng.uniform(-200, 1700, n)
    zs = rng.uniform(0, 100, n)
    write_layer(workspace / "s.gpkg", [Point(x, y) for x, y in zip(xs, ys, strict=True)], UTM, value=zs)
    like = like_grid(workspace, 150, 140)
    app.run(
        "idw_interpolation",
        {"input_path": "s.gpkg", "like_path": like, "field": "value", "max_points": 5, "output_path": "i.tif"},
    )
    z, _ = read_raster(workspace / "i.tif")
    rows, cols = np.mgrid[0:150, 0:140]
    cx, cy = X0 + (cols.ravel() + 0.5) * 10, Y0 + 1500 - (rows.ravel() + 0.5) * 10
    d = np.hypot(cx[:, None] - xs[None, :], cy[:, None] - ys[None, :])
    nearest = np.argsort(d, axis=1)[:, :5]
    dk = np.take_along_axis(d, nearest, axis=1)
    w = 1 / dk**2
    reference = ((w * zs[nearest]).sum(axis=1) / w.sum(axis=1)).reshape(150, 140)
    assert z == pytest.approx(reference, rel=1e-5)
    assert z.min() >= zs.min() - 1e-4 and z.max() <= zs.max() + 1e-4


def test_idw_refuses_bad_fields(app, workspace: Path) -> None:
    _two_samples(workspace)
    like = like_grid(workspace, 1, 5)
    with pytest.raises(InputError) as err:
        app.run(
            "idw_interpolation", {"input_path": "s.gpkg", "like_path": like, "field": "name", "output_path": "i.tif"}
        )
    assert err.value.code == "FIELD_NOT_NUMERIC"
    with pytest.raises(InputError) as err:
        app.run(
            "idw_interpolation", {"input_path": "s.gpkg", "like_path": like, "field": "valu", "output_path": "j.tif"}
        )
    assert err.value.code == "FIELD_NOT_FOUND" and "did you mean 'value'" in err.value.message
    assert not list(workspace.glob("j.tif*"))  # refused before the engine: no failure record


def test_idw_on_a_geographic_grid_is_refused(app, workspace: Path) -> None:
    write_raster(
        workspace / "ll.tif", np.zeros((3, 3), dtype="float32"), top=46.0, left=-122.0, cell=0.001, crs="EPSG:4326"
    )
    write_layer(workspace / "s.gpkg", [Point(-121.999, 45.999)], "EPSG:4326", value=[1.0])
    with pytest.raises(MapSmithError) as err:
        app.run(
            "idw_interpolation",
            {"input_path": "s.gpkg", "like_path": "ll.tif", "field": "value", "output_path": "i.tif"},
        )
    assert err.value.code == "RASTER_GEOGRAPHIC_CRS"
