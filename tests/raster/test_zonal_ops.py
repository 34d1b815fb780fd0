"""zonal_statistics on hand-made grids, against values worked out before the code ran.

The main grid is 3 x 3 cells of 1 m in EPSG:32610 with its top-left corner at (0, 3); cell (row r,
column c) holds 3r + c + 1:

    y 3 +---+---+---+
        | 1 | 2 | 3 |
    y 2 +---+---+---+
        | 4 | 5 | 6 |
    y 1 +---+---+---+
        | 7 | 8 | 9 |
    y 0 +---+---+---+
        x0  1   2   3

The box (0.5, 0.5)-(2.5, 2.5) covers a quarter of each corner cell, half of each edge cell and the
whole centre: coverage fractions 0.25 (values 1, 3, 7, 9), 0.5 (2, 4, 6, 8) and 1 (5). Every
statistic below is derived from those fractions in the comment beside it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine
from shapely.geometry import LineString, box

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError, GeometryTypeRefused, InputError

UTM = "EPSG:32610"
NINE = np.arange(1, 10, dtype="float32").reshape(3, 3)
QUARTERS_BOX = box(0.5, 0.5, 2.5, 2.5)


def write_grid(
    path: Path,
    values: np.ndarray,
    *,
    origin: tuple[float, float] = (0.0, 3.0),
    cell: float = 1.0,
    crs: str = UTM,
    nodata: float | None = -9999.0,
    south_up: bool = False,
    scale: float | None = None,
    band_names: list[str] | None = None,
) -> Path:
    """A GeoTIFF of ``values`` (2-D, or bands-first 3-D) whose top-left corner is ``origin``."""
    data = values if values.ndim == 3 else values[np.newaxis]
    count, height, width = data.shape
    transform = Affine(cell, 0, origin[0], 0, -cell, origin[1])
    if south_up:  # the same cells, stored bottom row first with a positive y cell size
        data = data[:, ::-1, :]
        transform = Affine(cell, 0, origin[0], 0, cell, origin[1] - cell * height)
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=width,
        height=height,
        count=count,
        dtype=data.dtype.name,
        crs=crs,
        transform=transform,
        nodata=nodata,
    ) as dst:
        dst.write(data)
        if scale is not None:
            dst.scales = (scale,) * count
        for i, name in enumerate(band_names or []):
            dst.set_band_description(i + 1, name)
    return path


def zones(workspace: Path, *geometries, crs: str = UTM, name: str = "zones.gpkg", **fields) -> str:
    fields = fields or {"zone": [f"z{i}" for i in range(len(geometries))]}
    write_layer(workspace / name, list(geometries), crs, **fields)
    return name


def run(app, workspace: Path, statistics: str, *geometries, raster: str = "grid.tif", **extra):
    args = {
        "input_path": zones(workspace, *geometries),
        "raster_path": raster,
        "statistics": statistics,
        "output_path": "out.gpkg",
        **extra,
    }
    result = app.run("zonal_statistics", args)
    return result, read(workspace / "out.gpkg")


def no_output(workspace: Path) -> bool:
    return not [p for p in workspace.iterdir() if p.name.startswith("out")]


# -- fractional coverage ----------------------------------------------------------------------------


def test_fractional_coverage_of_a_box_over_nine_cells(app, workspace: Path) -> None:
    # count = 4 x 0.25 + 4 x 0.5 + 1 = 4.0 (the box's area, 2 x 2 m, in 1 m cells)
    # sum = 0.25 (1 + 3 + 7 + 9) + 0.5 (2 + 4 + 6 + 8) + 5 = 5 + 10 + 5 = 20; mean = 20 / 4 = 5
    # min and max: every touched cell counts, however little of it is covered: 1 and 9
    write_grid(workspace / "grid.tif", NINE)
    result, out = run(app, workspace, "mean,min,max,count,sum", QUARTERS_BOX)
    row = out.iloc[0]
    assert row["zonal_mean"] == pytest.approx(5.0, abs=1e-12)
    assert row["zonal_min"] == 1.0 and row["zonal_max"] == 9.0
    assert row["zonal_count"] == pytest.approx(4.0, abs=1e-12)
    assert row["zonal_sum"] == pytest.approx(20.0, abs=1e-12)
    # the zone comes back whole: its field, its geometry, its CRS
    assert row["zone"] == "z0" and row.geometry.equals(QUARTERS_BOX) and out.crs.to_epsg() == 32610
    assert result.answer["rows"][0]["zonal_sum"] == pytest.approx(20.0)
    record = manifest(workspace / "out.gpkg")
    assert record["engine"]["name"] == "exactextract"
    from importlib.metadata import version

    assert record["engine"]["version"] == version("exactextract")
    components = record["engine"]["x-mapsmith:components"]
    assert {"rasterio", "GDAL", "numpy"} <= set(components)
    params = record["parameters"]
    assert params["statistics"] == "mean,min,max,count,sum"
    assert params["x-mapsmith:zonal_fields"]["count"] == "zonal_count"
    assert "sum of those fractions" in params["x-mapsmith:coverage_rule"]
    assert any("sum of fractions" in n for n in record["notes"])
    checks = {c["name"]: c for c in record["verification"]}
    for name in ("crs_present", "crs_matches", "feature_count_exact", "geometry_types"):
        assert checks[name]["passed"], name
    assert checks["x-mapsmith:coverage_within_zone_area"]["passed"]
    assert record["crs_decisions"]["analysis_crs"] == "EPSG:32610"


def test_a_polygon_exactly_covering_two_cells(app, workspace: Path) -> None:
    # box (1, 1)-(3, 2) is the middle row's columns 1 and 2: values 5 and 6, each wholly covered
    write_grid(workspace / "grid.tif", NINE)
    _, out = run(app, workspace, "mean,min,max,count,sum", box(1, 1, 3, 2))
    row = out.iloc[0]
    assert (row["zonal_mean"], row["zonal_min"], row["zonal_max"]) == (5.5, 5.0, 6.0)
    assert row["zonal_count"] == pytest.approx(2.0, abs=1e-12)
    assert row["zonal_sum"] == pytest.approx(11.0, abs=1e-12)


def test_weighted_mean_multiplies_coverage_by_weight(app, workspace: Path) -> None:
    # weights 1 everywhere but 4 on the top-left cell (value 1, covered 0.25):
    # sum(c w v) = 20 + 0.25 x (4 - 1) x 1 = 20.75; sum(c w) = 4 + 0.25 x 3 = 4.75
    # weighted_mean = 20.75 / 4.75 = 83 / 19 = 4.368421...; the plain mean stays 5
    write_grid(workspace / "grid.tif", NINE)
    weights = np.ones((3, 3), "float32")
    weights[0, 0] = 4
    write_grid(workspace / "weights.tif", weights)
    result, out = run(app, workspace, "mean,weighted_mean,weighted_sum", QUARTERS_BOX, weights_path="weights.tif")
    row = out.iloc[0]
    assert row["zonal_weighted_mean"] == pytest.approx(83 / 19, rel=1e-12)
    assert row["zonal_weighted_sum"] == pytest.approx(20.75, rel=1e-12)
    assert row["zonal_mean"] == pytest.approx(5.0, abs=1e-12)
    assert any("weights_path" in n for n in result.notes)


def test_a_covered_weight_of_nodata_empties_the_weighted_statistics_and_warns(app, workspace: Path) -> None:
    write_grid(workspace / "grid.tif", NINE)
    weights = np.ones((3, 3), "float32")
    weights[2, 2] = -9999  # the bottom-right cell, a quarter covered by the box
    write_grid(workspace / "weights.tif", weights)
    result, out = run(app, workspace, "mean,weighted_mean", QUARTERS_BOX, weights_path="weights.tif")
    assert math.isnan(out.iloc[0]["zonal_weighted_mean"])
    assert out.iloc[0]["zonal_mean"] == pytest.approx(5.0)
    assert "WEIGHTS_NODATA" in {w["code"] for w in result.warnings}


def test_weights_off_the_value_grid_are_refused_not_resampled(app, workspace: Path) -> None:
    write_grid(workspace / "grid.tif", NINE)
    write_grid(workspace / "weights.tif", np.ones((3, 3), "float32"), origin=(0.5, 3.0))  # half a cell east
    with pytest.raises(InputError) as err:
        run(app, workspace, "weighted_mean", QUARTERS_BOX, weights_path="weights.tif")
    assert err.value.code == "GRID_MISMATCH"
    assert err.value.evidence["weights"]["origin"] == [0.5, 3.0]
    assert err.value.evidence["raster"]["origin"] == [0.0, 3.0]
    assert "resample" in err.value.hint
    assert no_output(workspace)  # refused before the engine: not even a failure record


# -- nodata, outside, south-up, scale, bands --------------------------------------------------------


@pytest.mark.parametrize("missing", [-9999.0, np.nan], ids=["nodata", "nan"])
def test_nodata_and_nan_cells_are_left_out(app, workspace: Path, missing: float) -> None:
    # the top-left cell (value 1, covered 0.25) is missing: sum = 20 - 0.25 = 19.75,
    # count = 4 - 0.25 = 3.75, mean = 19.75 / 3.75 = 79 / 15 = 5.2666..., min = 2
    values = NINE.copy()
    values[0, 0] = missing
    write_grid(workspace / "grid.tif", values, nodata=-9999.0 if not np.isnan(missing) else None)
    result, out = run(app, workspace, "mean,min,count,sum", QUARTERS_BOX)
    row = out.iloc[0]
    assert row["zonal_sum"] == pytest.approx(19.75, abs=1e-12)
    assert row["zonal_count"] == pytest.approx(3.75, abs=1e-12)
    assert row["zonal_mean"] == pytest.approx(79 / 15, rel=1e-12)
    assert row["zonal_min"] == 2.0
    assert any("nodata and NaN cells are left out" in n for n in result.notes)


def test_a_zone_over_nodata_only_has_count_zero_and_empty_statistics(app, workspace: Path) -> None:
    values = NINE.copy()
    values[1, 1] = -9999
    write_grid(workspace / "grid.tif", values)
    result, out = run(app, workspace, "mean,count,sum", box(1, 1, 2, 2))  # exactly the centre cell
    row = out.iloc[0]
    assert row["zonal_count"] == 0.0 and row["zonal_sum"] == 0.0 and math.isnan(row["zonal_mean"])
    assert result.answer["zones_without_valid_cells"] == 1


def test_zones_outside_or_partly_outside_the_raster(app, workspace: Path) -> None:
    # z0 lies wholly east of the raster: every statistic empty, not zero.
    # z1 = (2, 2)-(4, 4) overlaps only the top-right cell (value 3), wholly: mean 3, count 1, not 4
    write_grid(workspace / "grid.tif", NINE)
    result, out = run(app, workspace, "mean,count,sum", box(10, 10, 11, 11), box(2, 2, 4, 4))
    outside, partly = out.iloc[0], out.iloc[1]
    assert all(math.isnan(outside[f]) for f in ("zonal_mean", "zonal_count", "zonal_sum"))
    assert partly["zonal_mean"] == 3.0 and partly["zonal_count"] == pytest.approx(1.0)
    assert result.answer["zones_outside_raster"] == 1 and result.answer["zones_partly_outside_raster"] == 1
    assert any("wholly outside the raster" in n for n in result.notes)
    assert "ZONES_PARTLY_OUTSIDE_RASTER" in {w["code"] for w in result.warnings}
    assert manifest(workspace / "out.gpkg")["parameters"]["x-mapsmith:zonal_counts"]["zones_outside_raster"] == 1


def test_a_south_up_raster_gives_the_north_up_answer(app, workspace: Path) -> None:
    # the same cells stored bottom row first: the box over values 5 and 6 still averages 5.5
    # (shifted 100 m east: a south-up transform at the origin would be GDAL's "no geotransform")
    write_grid(workspace / "grid.tif", NINE, origin=(100.0, 3.0), south_up=True)
    result, out = run(app, workspace, "mean,count", box(101, 1, 103, 2))
    assert out.iloc[0]["zonal_mean"] == 5.5 and out.iloc[0]["zonal_count"] == pytest.approx(2.0)
    assert any("south-up" in n for n in result.notes)


def test_the_second_band_of_a_south_up_raster(app, workspace: Path) -> None:
    # the north-up copy holds the one band asked for: band 2 (ten times band 1) over 5 and 6 -> 55
    write_grid(workspace / "grid.tif", np.stack([NINE, NINE * 10]), origin=(100.0, 3.0), south_up=True)
    _, out = run(app, workspace, "mean", box(101, 1, 103, 2), band="2")
    assert out.iloc[0]["zonal_mean"] == pytest.approx(55.0)


def test_scaled_values_are_summarised_as_gdal_reads_them(app, workspace: Path) -> None:
    # stored 5 and 6 with scale 0.5: values 2.5 and 3, mean 2.75
    write_grid(workspace / "grid.tif", NINE.astype("int16"), nodata=-1, scale=0.5)
    result, out = run(app, workspace, "mean", box(1, 1, 3, 2))
    assert out.iloc[0]["zonal_mean"] == pytest.approx(2.75, abs=1e-12)
    assert any("scale 0.5" in n for n in result.notes)


def test_band_by_name_and_a_missing_band_refused(app, workspace: Path) -> None:
    # band 2 ("tenfold") holds 10 x band 1: the two cells 5 and 6 average 55
    write_grid(workspace / "grid.tif", np.stack([NINE, NINE * 10]), band_names=["base", "tenfold"])
    _, out = run(app, workspace, "mean", box(1, 1, 3, 2), band="tenfold")
    assert out.iloc[0]["zonal_mean"] == pytest.approx(55.0)
    (workspace / "out.gpkg").unlink()
    (workspace / "out.gpkg.provenance.json").unlink()
    with pytest.raises(InputError) as err:
        run(app, workspace, "mean", box(1, 1, 3, 2), band="3")
    assert err.value.code == "BAND_NOT_FOUND" and err.value.evidence["bands"] == ["base", "tenfold"]
    assert no_output(workspace)


# -- other statistics ---------------------------------------------------------------------------------


def test_majority_minority_median_stdev_and_quantiles_on_whole_cells(app, workspace: Path) -> None:
    # The whole grid (0, 0)-(3, 3), every cell wholly covered, values 1..9:
    # median 5; population variance of 1..9 = (9^2 - 1) / 12 = 20/3, stdev = 2.5819889;
    # quantiles (type 7, as numpy's default): q 0.1 -> 1 + 0.1 x 8 = 1.8, q 0.9 -> 1 + 0.9 x 8 = 8.2,
    # returned by exactextract in the raster's own type (float32 here: 1.8 to 7 digits)
    write_grid(workspace / "grid.tif", NINE)
    _, out = run(app, workspace, "median,stdev,variance,quantiles", box(0, 0, 3, 3), quantiles="0.1,0.9")
    row = out.iloc[0]
    assert row["zonal_median"] == pytest.approx(5.0)
    assert row["zonal_variance"] == pytest.approx(20 / 3, rel=1e-12)
    assert row["zonal_stdev"] == pytest.approx(math.sqrt(20 / 3), rel=1e-12)
    assert row["zonal_quantile_10"] == pytest.approx(1.8, rel=1e-7)
    assert row["zonal_quantile_90"] == pytest.approx(8.2, rel=1e-7)


def test_stdev_and_quantile_weighted_by_coverage(app, workspace: Path) -> None:
    # On the quarters box (mean 5): variance = sum c (v - 5)^2 / sum c
    #   = (0.25 (16 + 4 + 4 + 16) + 0.5 (9 + 1 + 1 + 9) + 1 x 0) / 4 = (10 + 10) / 4 = 5; stdev = sqrt 5.
    # Coverage-weighted quantile (exactextract's weighted form of type 7): values x_i sorted with weights
    # w_i, n = 9, W = 4; s_0 = 0, s_k = k w_k + (n - 1) sum_{i<k} w_i; the quantile q sits at q (n - 1) W.
    # Sorted: 1 (0.25), 2 (0.5), 3 (0.25) ...: s_1 = 1 x 0.5 + 8 x 0.25 = 2.5; s_2 = 2 x 0.25 + 8 x 0.75 = 6.5.
    # q = 0.1: 0.1 x 8 x 4 = 3.2, between s_1 and s_2: 2 + (3.2 - 2.5) / (6.5 - 2.5) = 2.175
    write_grid(workspace / "grid.tif", NINE)
    _, out = run(app, workspace, "stdev,variance,quantiles", QUARTERS_BOX, quantiles="0.1")
    row = out.iloc[0]
    assert row["zonal_variance"] == pytest.approx(5.0, rel=1e-12)
    assert row["zonal_stdev"] == pytest.approx(math.sqrt(5), rel=1e-12)
    assert row["zonal_quantile_10"] == pytest.approx(2.175, rel=1e-7)  # float32, as the raster


def test_majority_is_by_covered_fraction_not_by_cells_touched(app, workspace: Path) -> None:
    # classes    1 1 3      the quarters box covers class 1: 0.25 + 0.5 = 0.75,
    #            2 2 2      class 2: 0.5 + 1 + 0.5 = 2.0, class 3: 0.25 + 0.25 + 0.5 + 0.25 = 1.25.
    #            3 3 3      Majority 2, minority 1 -- though class 3 touches the most cells (4).
    classes = np.array([[1, 1, 3], [2, 2, 2], [3, 3, 3]], dtype="uint8")
    write_grid(workspace / "grid.tif", classes, nodata=0)
    _, out = run(app, workspace, "majority,minority", QUARTERS_BOX)
    assert out.iloc[0]["zonal_majority"] == 2 and out.iloc[0]["zonal_minority"] == 1


# -- CRS ----------------------------------------------------------------------------------------------


def test_zones_in_wgs84_over_a_utm_raster_match_the_same_zones_in_utm(app, workspace: Path) -> None:
    # 100 x 100 cells of 10 m near (500000, 5000000) in UTM 10N, value = 100 row + column.
    # Boxes whose corners are taken to EPSG:4326 come back to the same corners (to well under a
    # micrometre), so both runs must agree to floating-point noise. No edge lies on a cell boundary,
    # where a micrometre would decide whether a neighbouring cell is touched at all.
    from pyproj import Transformer

    rows, cols = np.mgrid[0:100, 0:100]
    write_grid(workspace / "big.tif", (100 * rows + cols).astype("float32"), origin=(500_000, 5_001_000), cell=10)
    utm_boxes = [box(500_013, 5_000_107, 500_377, 5_000_522), box(500_603, 5_000_304, 500_955.5, 5_000_996)]
    to_ll = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    from shapely.geometry import Polygon

    ll_boxes = [Polygon([to_ll.transform(x, y) for x, y in b.exterior.coords]) for b in utm_boxes]
    write_layer(workspace / "utm.gpkg", utm_boxes, UTM, zone=["a", "b"])
    write_layer(workspace / "ll.gpkg", ll_boxes, "EPSG:4326", zone=["a", "b"])
    stats = "mean,min,max,count,sum"
    for name in ("utm", "ll"):
        app.run(
            "zonal_statistics",
            {
                "input_path": f"{name}.gpkg",
                "raster_path": "big.tif",
                "statistics": stats,
                "output_path": f"{name}_z.gpkg",
            },
        )
    utm, ll = read(workspace / "utm_z.gpkg"), read(workspace / "ll_z.gpkg")
    for field in ("zonal_mean", "zonal_min", "zonal_max", "zonal_count", "zonal_sum"):
        assert ll[field].to_numpy() == pytest.approx(utm[field].to_numpy(), rel=1e-6), field
    # box a's count is its area in cells: 364 x 415 m / 100 m2 = 1510.6
    assert utm["zonal_count"].iloc[0] == pytest.approx(364 * 415 / 100, rel=1e-9)
    assert ll.crs.to_epsg() == 4326
    assert ll.geometry.iloc[0].equals_exact(ll_boxes[0], tolerance=0)  # the zones' own geometry, untouched
    decisions = manifest(workspace / "ll_z.gpkg")["crs_decisions"]
    assert decisions["analysis_crs"] == "EPSG:32610"
    assert decisions["source_crs"] == "EPSG:4326" and decisions["target_crs"] == "EPSG:32610"
    alignment = decisions["x-mapsmith:alignment"]["input_path"]
    assert alignment["target_crs"] == "EPSG:32610" and "original geometry" in alignment["reason"]
    assert decisions["transformation"]["pipeline"]
    assert manifest(workspace / "utm_z.gpkg")["crs_decisions"]["target_crs"] is None


# -- refusals -------------------------------------------------------------------------------------------


def test_line_zones_are_refused_before_any_file_is_written(app, workspace: Path) -> None:
    write_grid(workspace / "grid.tif", NINE)
    write_layer(workspace / "lines.gpkg", [LineString([(0.5, 0.5), (2.5, 2.5)])], UTM, id=[1])
    with pytest.raises(GeometryTypeRefused) as err:
        app.run("zonal_statistics", {"input_path": "lines.gpkg", "raster_path": "grid.tif", "output_path": "out.gpkg"})
    assert err.value.evidence["argument"] == "input_path" and "line" in err.value.message
    assert no_output(workspace)  # no output and no failure record


def test_the_line_refusal_says_a_length_is_not_a_pixel_count(app, workspace: Path) -> None:
    # Needs the zonal_statistics case of mapsmith.verify._geometry_hint (core, not this module).
    write_grid(workspace / "grid.tif", NINE)
    write_layer(workspace / "lines.gpkg", [LineString([(0.5, 0.5), (2.5, 2.5)])], UTM, id=[1])
    with pytest.raises(GeometryTypeRefused) as err:
        app.run("zonal_statistics", {"input_path": "lines.gpkg", "raster_path": "grid.tif", "output_path": "out.gpkg"})
    assert "length" in err.value.hint and "pixel count" in err.value.hint and "buffer_layer" in err.value.hint


def test_a_conflicting_sidecar_is_refused(app, workspace: Path) -> None:
    write_grid(workspace / "grid.tif", NINE)
    sidecar = "<PAMDataset><GeoTransform>100, 2, 0, 300, 0, -2</GeoTransform></PAMDataset>"
    (workspace / "grid.tif.aux.xml").write_text(sidecar)
    with pytest.raises(InputError) as err:
        run(app, workspace, "mean", QUARTERS_BOX)
    assert err.value.code == "GEOREF_CONFLICT"
    assert {r["source"] for r in err.value.evidence["readings"]} >= {"PAM", "INTERNAL"}
    assert no_output(workspace)


def test_an_existing_statistic_field_is_not_overwritten(app, workspace: Path) -> None:
    write_grid(workspace / "grid.tif", NINE)
    args = {
        "input_path": zones(workspace, QUARTERS_BOX, Zonal_Mean=[1.0]),
        "raster_path": "grid.tif",
        "statistics": "mean",
        "output_path": "out.gpkg",
    }
    with pytest.raises(InputError) as err:
        app.run("zonal_statistics", args)
    assert err.value.code == "FIELD_EXISTS" and err.value.evidence["field"] == "Zonal_Mean"


@pytest.mark.parametrize(
    ("extra", "code", "fragment"),
    [
        ({"statistics": "mean,quantiles"}, "MISSING_ARGUMENT", "quantiles"),
        ({"statistics": "mean", "quantiles": "0.5"}, "ARGUMENT_NOT_APPLICABLE", "quantiles"),
        ({"statistics": "quantiles", "quantiles": "0.5,1.5"}, "ARGUMENT_OUT_OF_RANGE", "1.5"),
        ({"statistics": "mean,stddev"}, "ARGUMENT_NOT_IN_CHOICES", "stdev"),
        ({"statistics": "weighted_mean"}, "MISSING_ARGUMENT", "weights_path"),
        ({"statistics": "mean", "weights_path": "grid.tif"}, "ARGUMENT_NOT_APPLICABLE", "weights_path"),
    ],
)
def test_arguments_that_cannot_work_together_are_refused_first(app, workspace, extra, code, fragment) -> None:
    write_grid(workspace / "grid.tif", NINE)
    args = {"input_path": zones(workspace, QUARTERS_BOX), "raster_path": "grid.tif", "output_path": "out.gpkg"}
    with pytest.raises(ArgumentError) as err:
        app.run("zonal_statistics", {**args, **extra})
    assert err.value.code == code and fragment in err.value.message
    assert no_output(workspace)


def test_quantile_fields_are_named_by_percent(app, workspace: Path) -> None:
    # 0.025 and 0.02 must not share exactextract's "_2": they become quantile_2_5 and quantile_2
    write_grid(workspace / "grid.tif", NINE)
    result, out = run(app, workspace, "quantiles", box(0, 0, 3, 3), quantiles="0.025,0.02,0.5")
    assert {"zonal_quantile_2_5", "zonal_quantile_2", "zonal_quantile_50"} <= set(out.columns)
    # type 7 on 1..9: 1 + 0.025 x 8 = 1.2, 1 + 0.02 x 8 = 1.16, median 5
    assert out.iloc[0]["zonal_quantile_2_5"] == pytest.approx(1.2, rel=1e-7)
    assert out.iloc[0]["zonal_quantile_2"] == pytest.approx(1.16, rel=1e-7)
    assert out.iloc[0]["zonal_quantile_50"] == pytest.approx(5.0)
    assert json.dumps(result.answer)  # the answer is plain JSON
