"""Scale and offset: every grid is computed on in physical values (stored x scale + offset), or refused.

Hand-worked fixtures (values chosen so the arithmetic is done on paper before the code ran):

- reflectance stored as integers with scale 0.0001 and offset 0: NIR 4000 -> 0.4, RED 1000 -> 0.1, so
  NDVI = (0.4 - 0.1) / (0.4 + 0.1) = 0.6, and NIR alone is 0.4 (the stored 4000 would be the trap);
- the same with offset -0.1: NIR 5000 -> 0.4, RED 2000 -> 0.1, NDVI 0.6 again, where the stored numbers
  would give (5000 - 2000) / (5000 + 2000) = 3/7 = 0.428571;
- a negative scale (-1, offset 10): stored 1, 2, 3, 4 are physical 9, 8, 7, 6, so the maximum of the four
  is 9, where the maximum stored number (4) with the scale applied afterwards would say 6;
- a DEM stored in decimetres (scale 0.1): z = 10 m per 10 m cell eastward, slope atan(1) = 45 degrees,
  where the stored numbers (100 per cell) would give atan(10) = 84.289407 degrees.

The catalogue-wide test runs every contract that reads a grid twice: on a grid holding physical values
and on the same values stored as int16 with scale 0.25 and offset -50. Both must give the same answer
(or be refused with the same code), and a scaled input band is recorded as read physically (or copied
stored with the same scale carried to the output). A band whose scale cannot be applied (zero) is
refused by every one of them with RASTER_SCALE_INVALID.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from catalog_args import build_arguments
from mapsmith.contracts import load_builtin_contracts
from mapsmith.errors import InputError, MapSmithError

CONTRACTS = load_builtin_contracts()
GRID_READERS = sorted(
    name
    for name, c in CONTRACTS.items()
    if c.status == "available" and c.output_kind != "description" and any(d.kind == "raster" for d in c.datasets)
)
RECORD = "x-mapsmith:physical_values"
PHYSICAL = "physical: stored x scale + offset"
CARRIED = "stored values copied unchanged; the output declares the same scale and offset"
NOT_READ = "not read: only the grid (cells, extent, CRS) was used"
# The catalogue-wide fixture: stored int16 = (physical + 50) * 4, exact both ways.
SCALE, OFFSET = 0.25, -50.0
STORED_NODATA = -32768


def write_bands(
    path: Path,
    bands: list[np.ndarray],
    *,
    scales: list[float] | None = None,
    offsets: list[float] | None = None,
    nodata: float | None = None,
    names: list[str] | None = None,
) -> None:
    height, width = bands[0].shape
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=width,
        height=height,
        count=len(bands),
        dtype=bands[0].dtype.name,
        crs="EPSG:32610",
        transform=from_origin(500_000, 5_000_020, 10, 10),
        nodata=nodata,
    ) as dst:
        for i, band in enumerate(bands, start=1):
            dst.write(band, i)
        if scales is not None:
            dst.scales = scales
        if offsets is not None:
            dst.offsets = offsets
        for i, name in enumerate(names or [], start=1):
            dst.set_band_description(i, name)


def manifest(path: Path) -> dict[str, Any]:
    return json.loads(path.with_name(path.name + ".provenance.json").read_text("utf-8"))


def read_physical(path: Path) -> np.ma.MaskedArray:
    with rasterio.open(path) as ds:
        data = ds.read(masked=True).astype("float64")
        scales, offsets = ds.scales, ds.offsets
    return np.ma.stack([data[i] * scales[i] + offsets[i] for i in range(data.shape[0])])


# -- band_math -----------------------------------------------------------------------------------


def _ndvi(app, workspace, name: str) -> tuple[np.ndarray, dict, list[str]]:
    result = app.run(
        "band_math",
        {
            "input_paths": [name],
            "bands": "red=0:1, nir=0:2",
            "expression": "(nir - red) / (nir + red)",
            "output_path": f"ndvi_{name}",
        },
    )
    with rasterio.open(workspace / f"ndvi_{name}") as out:
        assert out.scales == (1.0,) and out.offsets == (0.0,)  # written values are physical
        return out.read(1), manifest(workspace / f"ndvi_{name}"), result.notes


def test_ndvi_of_reflectance_stored_with_a_scale(app, workspace) -> None:
    red, nir = np.full((2, 2), 1000, "int16"), np.full((2, 2), 4000, "int16")
    write_bands(workspace / "s.tif", [red, nir], scales=[0.0001, 0.0001], offsets=[0.0, 0.0])
    ndvi, record, _ = _ndvi(app, workspace, "s.tif")
    np.testing.assert_allclose(ndvi, 0.6, rtol=1e-6)
    # NIR alone: 0.4, not the stored 4000
    app.run("band_math", {"input_paths": ["s.tif"], "expression": "b2", "output_path": "nir.tif"})
    with rasterio.open(workspace / "nir.tif") as out:
        np.testing.assert_allclose(out.read(1), 0.4, rtol=1e-6)
    bands = record["parameters"][RECORD]["input_paths[0]"]["bands"]
    assert bands == {
        "1": {"scale": 0.0001, "offset": 0.0, "values": PHYSICAL},
        "2": {"scale": 0.0001, "offset": 0.0, "values": PHYSICAL},
    }
    assert record["parameters"][RECORD]["output"] == {"values": "physical (no scale or offset declared on the output)"}


def test_ndvi_with_an_offset_is_the_ndvi_of_the_physical_values(app, workspace) -> None:
    red, nir = np.full((2, 2), 2000, "int16"), np.full((2, 2), 5000, "int16")
    write_bands(workspace / "o.tif", [red, nir], scales=[0.0001, 0.0001], offsets=[-0.1, -0.1])
    ndvi, record, notes = _ndvi(app, workspace, "o.tif")
    np.testing.assert_allclose(ndvi, 0.6, rtol=1e-6)
    assert not np.allclose(ndvi, 3 / 7, rtol=1e-3)  # what the stored numbers would have given
    assert record["parameters"][RECORD]["input_paths[0]"]["bands"]["1"]["offset"] == -0.1
    assert "band 2 of input_paths[0] declares scale 0.0001 and offset -0.1: computed on physical values" in " ".join(
        notes
    )


def test_clean_twin_unscaled_reflectance_gives_the_same_ndvi_and_no_record(app, workspace) -> None:
    red, nir = np.full((2, 2), 0.1, "float32"), np.full((2, 2), 0.4, "float32")
    write_bands(workspace / "p.tif", [red, nir])
    ndvi, record, notes = _ndvi(app, workspace, "p.tif")
    np.testing.assert_allclose(ndvi, 0.6, rtol=1e-6)
    assert RECORD not in record["parameters"]
    assert not [n for n in notes if "physical values" in n]


# -- operations that copy cells ------------------------------------------------------------------


def test_extract_band_and_clip_copy_stored_numbers_and_carry_the_scale(app, workspace) -> None:
    red = np.array([[1000, 2000], [3000, 4000]], "int16")
    write_bands(workspace / "r.tif", [red], scales=[0.0001], offsets=[-0.1], nodata=-1)
    app.run("extract_band", {"input_path": "r.tif", "band": "1", "output_path": "e.tif"})
    app.run(
        "clip_raster",
        {
            "input_path": "r.tif",
            "min_x": 500_000,
            "min_y": 5_000_000,
            "max_x": 500_010,
            "max_y": 5_000_020,
            "output_path": "c.tif",
        },
    )
    for name, expected in (("e.tif", red), ("c.tif", red[:, :1])):
        with rasterio.open(workspace / name) as out:
            assert out.dtypes[0] == "int16"
            np.testing.assert_array_equal(out.read(1), expected)
            assert out.scales == (0.0001,) and out.offsets == (-0.1,)
        record = manifest(workspace / name)["parameters"][RECORD]
        assert record["input_path"]["bands"]["1"]["values"] == CARRIED
        assert record["output"]["bands"] == [{"band": 1, "scale": 0.0001, "offset": -0.1}]
    # physical values of the copy: 0.0, 0.1 / 0.2, 0.3 (first column 0.0, 0.2)
    np.testing.assert_allclose(read_physical(workspace / "c.tif")[0], [[0.0], [0.2]], atol=1e-12)


def test_resampling_by_maximum_under_a_negative_scale_takes_the_highest_physical_value(app, workspace) -> None:
    stored = np.array([[1, 2], [3, 4]], "int16")  # physical 9, 8 / 7, 6
    write_bands(workspace / "n.tif", [stored], scales=[-1.0], offsets=[10.0], nodata=-1)
    app.run("resample_raster", {"input_path": "n.tif", "cell_size": 20, "resampling": "max", "output_path": "m.tif"})
    with rasterio.open(workspace / "m.tif") as out:
        assert out.scales == (1.0,) and out.offsets == (0.0,)
        assert out.read(1).tolist() == [[9.0]]
    assert manifest(workspace / "m.tif")["parameters"][RECORD]["input_path"]["bands"]["1"]["values"] == PHYSICAL


def test_clean_twin_resampling_by_maximum_without_a_scale(app, workspace) -> None:
    write_bands(workspace / "u.tif", [np.array([[9, 8], [7, 6]], "int16")], nodata=-1)
    app.run("resample_raster", {"input_path": "u.tif", "cell_size": 20, "resampling": "max", "output_path": "m.tif"})
    with rasterio.open(workspace / "m.tif") as out:
        assert out.read(1).tolist() == [[9]]
    assert RECORD not in manifest(workspace / "m.tif")["parameters"]


# -- answers -------------------------------------------------------------------------------------


def test_band_statistics_are_of_physical_values(app, workspace) -> None:
    write_bands(workspace / "r.tif", [np.array([[1000, 2000], [3000, 4000]], "int16")], scales=[0.0001], offsets=[-0.1])
    result = app.run("band_statistics", {"input_path": "r.tif"})
    (row,) = result.answer["bands"]
    # physical 0.0, 0.1, 0.2, 0.3: mean 0.15, population stdev sqrt(0.0125) = 0.1118034
    assert row["min"] == pytest.approx(0.0, abs=1e-12) and row["max"] == pytest.approx(0.3)
    assert row["mean"] == pytest.approx(0.15) and row["stdev"] == pytest.approx(math.sqrt(0.0125))
    assert (row["scale"], row["offset"]) == (0.0001, -0.1)
    assert result.answer["method"].startswith("physical values")
    assert any("band 1 of input_path declares scale 0.0001 and offset -0.1" in n for n in result.notes)


def test_a_zero_scale_is_refused(app, workspace) -> None:
    write_bands(workspace / "z.tif", [np.ones((2, 2), "int16")], scales=[0.0], offsets=[0.0])
    with pytest.raises(InputError) as err:
        app.run("band_statistics", {"input_path": "z.tif"})
    assert err.value.code == "RASTER_SCALE_INVALID"
    assert err.value.evidence == {"argument": "input_path", "path": "z.tif", "band": 1, "scale": 0.0, "offset": 0.0}
    assert "gdal_edit.py" in err.value.hint


def test_slope_of_a_dem_stored_in_decimetres(app, workspace) -> None:
    pytest.importorskip("whitebox_workflows", reason="the [whitebox] extra is not installed")
    cols = np.tile(np.arange(12), (10, 1))
    write_bands(workspace / "dm.tif", [(100 * cols).astype("int16")], scales=[0.1], offsets=[0.0], nodata=-32768)
    result = app.run("slope", {"input_path": "dm.tif", "units": "degrees", "output_path": "s.tif"})
    with rasterio.open(workspace / "s.tif") as out:
        inner = out.read(1, masked=True)[2:-2, 2:-2]
    assert inner.min() == pytest.approx(45.0, rel=1e-5) and inner.max() == pytest.approx(45.0, rel=1e-5)
    record = manifest(workspace / "s.tif")["parameters"]
    assert record[RECORD]["input_path"]["bands"]["1"]["values"] == PHYSICAL
    assert "scale" in record["x-mapsmith:normalised_inputs"]["input_path"]
    assert result.status == "ok"


# -- the whole catalogue -------------------------------------------------------------------------


def test_the_catalogue_has_grid_readers() -> None:
    assert {"band_math", "zonal_statistics", "slope", "watershed", "sample_raster_at_points"} <= set(GRID_READERS)


def _raster_paths(contract: Any, args: dict, workspace: Path) -> dict[str, Path]:
    paths = {}
    for d in contract.datasets:
        if d.kind == "raster" and d.name in args:
            given = args[d.name]
            if isinstance(given, list):
                paths.update({f"{d.name}[{i}]": workspace / g for i, g in enumerate(given)})
            else:
                paths[d.name] = workspace / given
    return paths


def _rewrite(path: Path, *, scaled: bool, scale: float = SCALE) -> None:
    """The sample DEM quantised to quarter metres: as physical float64, or as int16 with a scale."""
    with rasterio.open(path) as src:
        data, profile = src.read(1, masked=True), src.profile
    stored = np.ma.round((data.astype("float64") - OFFSET) / SCALE).astype("int16")
    physical = stored.astype("float64") * SCALE + OFFSET
    path.unlink()
    if scaled:
        profile.update(dtype="int16", nodata=STORED_NODATA)
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(np.ma.filled(stored, STORED_NODATA), 1)
            dst.scales, dst.offsets = (scale,), (OFFSET,)
    else:
        profile.update(dtype="float64", nodata=-9999.0)
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(np.ma.filled(physical, -9999.0), 1)


def _run(app, operation: str, args: dict) -> tuple[Any, MapSmithError | None]:
    try:
        return app.run(operation, args), None
    except MapSmithError as exc:
        return None, exc


# band_statistics says which scale it applied, and the file's declared nodata (a stored number)
IGNORED_KEYS = {"scale", "offset", "nodata"}


def _same(a: Any, b: Any, where: str = "answer") -> None:
    if isinstance(a, dict):
        assert set(a) - IGNORED_KEYS == set(b) - IGNORED_KEYS, where
        for key in set(a) - IGNORED_KEYS:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, int | float):
        assert b == pytest.approx(a, rel=1e-6, abs=1e-9, nan_ok=True), where
    else:
        assert a == b, where


def _same_output(kind: str, a: Path, b: Path) -> None:
    if kind == "dataset:raster":
        pa, pb = read_physical(a), read_physical(b)
        np.testing.assert_array_equal(np.ma.getmaskarray(pa), np.ma.getmaskarray(pb))
        np.testing.assert_allclose(pa.compressed(), pb.compressed(), rtol=1e-6, atol=1e-9)
    else:
        import geopandas as gpd
        from pandas.api.types import is_numeric_dtype

        fa, fb = gpd.read_file(a), gpd.read_file(b)
        assert list(fa.columns) == list(fb.columns) and len(fa) == len(fb)
        for column in fa.columns:
            if column == fa.geometry.name:
                assert fa.geometry.geom_equals_exact(fb.geometry, 1e-9).all()
            elif is_numeric_dtype(fa[column].dtype):
                np.testing.assert_allclose(fa[column].to_numpy(float), fb[column].to_numpy(float), rtol=1e-6)
            else:
                assert fa[column].tolist() == fb[column].tolist(), column


@pytest.mark.parametrize("operation", GRID_READERS)
def test_a_scaled_grid_gives_the_answer_of_its_physical_twin(app, make_app, workspace, tmp_path, operation) -> None:
    from mapsmith.app import MapSmith

    contract = app.host.contracts[operation]
    twin_args = build_arguments(contract, workspace)
    for path in _raster_paths(contract, twin_args, workspace).values():
        _rewrite(path, scaled=False)
    twin, twin_error = _run(app, operation, twin_args)

    scaled_ws = tmp_path / "scaled"
    scaled_ws.mkdir()
    scaled_app = MapSmith({"MAPSMITH_WORKSPACE": str(scaled_ws)})
    args = build_arguments(contract, scaled_ws)
    rasters = _raster_paths(contract, args, scaled_ws)
    for path in rasters.values():
        _rewrite(path, scaled=True)
    result, error = _run(scaled_app, operation, args)

    if twin_error is not None or error is not None:
        # refused alike, for the same reason; never answered on one side only
        assert twin_error is not None and error is not None, (twin_error, error)
        assert error.code == twin_error.code, (error.code, twin_error.code)
        return
    _same(twin.answer, result.answer)
    if contract.writes_dataset:
        _same_output(contract.output_kind, workspace / args["output_path"], scaled_ws / args["output_path"])
        record = manifest(scaled_ws / args["output_path"])["parameters"][RECORD]
        for slot in rasters:
            how = record[slot]["bands"]["1"]["values"]
            if how == CARRIED:
                assert record["output"]["bands"] == [{"band": 1, "scale": SCALE, "offset": OFFSET}]
            else:
                assert how == PHYSICAL or (how == NOT_READ and slot == "like_path"), (slot, how)
    else:
        assert any(f"of {slot} declares scale 0.25 and offset -50" in n for n in result.notes for slot in rasters)


@pytest.mark.parametrize("operation", GRID_READERS)
def test_a_scale_of_zero_is_refused_everywhere(app, workspace, operation) -> None:
    contract = app.host.contracts[operation]
    args = build_arguments(contract, workspace)
    rasters = _raster_paths(contract, args, workspace)
    for path in rasters.values():
        _rewrite(path, scaled=True, scale=0.0)
    with pytest.raises(InputError) as err:
        app.run(operation, args)
    assert err.value.code == "RASTER_SCALE_INVALID"
    assert err.value.evidence["argument"] in rasters
    if contract.writes_dataset:  # refused inside the step: a failure record, never a dataset
        assert not (workspace / args["output_path"]).exists()
        assert (workspace / (args["output_path"] + ".failed.provenance.json")).exists()
