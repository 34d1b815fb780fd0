"""A raster's cells are counted from its header before any is read: a small file can declare a huge grid.

The hostile file is built by the test the way the issue found it: a 60000 x 60000 tiled GeoTIFF with
no tile written (GDAL's SPARSE_OK), well under a megabyte on disk. Slope on it tried to allocate
13-27 GB and the kernel killed the server; now it is refused with ``RASTER_TOO_LARGE`` before a cell
is read. The limit is ``MAPSMITH_MAX_RASTER_CELLS``; its clean twin runs under the same limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError


def _dem(path: Path, size: int, *, sparse: bool = False, bigtiff: bool = False) -> Path:
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    profile: dict[str, Any] = {
        "driver": "GTiff",
        "width": size,
        "height": size,
        "count": 1,
        "dtype": "float32",
        "crs": "EPSG:32610",
        "transform": from_origin(500000, 4000000, 10, 10),
        "nodata": -9999.0,
    }
    if sparse:
        profile.update(tiled=True, blockxsize=256, blockysize=256, compress="deflate", SPARSE_OK=True)
        profile["BIGTIFF"] = "YES" if bigtiff else "NO"
    with rasterio.open(path, "w", **profile) as dst:
        if not sparse:
            # A plane rising 1 m per 10 m cell eastwards: slope atan(0.1) = 5.71 degrees everywhere inside.
            cols = np.arange(size, dtype="float32")
            dst.write(np.tile(cols, (size, 1))[np.newaxis, ...])
    return path


@pytest.mark.parametrize("bigtiff", [False, True], ids=["classic-tiff", "bigtiff"])
def test_sparse_huge_geotiff_is_refused_before_reading(app: Any, workspace: Path, bigtiff: bool) -> None:
    path = _dem(workspace / "huge.tif", 60000, sparse=True, bigtiff=bigtiff)
    assert path.stat().st_size < 1_000_000  # the whole threat fits in a small upload
    with pytest.raises(MapSmithError) as info:
        app.run("slope", {"input_path": "huge.tif", "units": "degrees", "output_path": "slope.tif"})
    error = info.value
    assert error.code == "RASTER_TOO_LARGE"
    assert (error.evidence["width"], error.evidence["height"]) == (60000, 60000)
    assert error.evidence["cells"] == 3_600_000_000
    assert error.evidence["max_cells"] == 250_000_000
    assert "MAPSMITH_MAX_RASTER_CELLS" in error.hint
    assert not (workspace / "slope.tif").exists()


def test_limit_is_configurable_and_its_clean_twin_runs(app: Any, workspace: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("MAPSMITH_MAX_RASTER_CELLS", "1000")
    _dem(workspace / "big.tif", 40)  # 1600 cells
    _dem(workspace / "small.tif", 30)  # 900 cells
    with pytest.raises(MapSmithError) as info:
        app.run("slope", {"input_path": "big.tif", "units": "degrees", "output_path": "big_slope.tif"})
    assert (info.value.code, info.value.evidence["cells"], info.value.evidence["max_cells"]) == (
        "RASTER_TOO_LARGE",
        1600,
        1000,
    )
    result = app.run("slope", {"input_path": "small.tif", "units": "degrees", "output_path": "small_slope.tif"})
    assert result.status == "ok"
    import rasterio

    with rasterio.open(workspace / "small_slope.tif") as ds:
        assert ds.read(1, masked=True)[10, 10] == pytest.approx(5.7106, abs=1e-3)  # degrees(atan(1/10))


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1e9"])
def test_limit_setting_must_be_a_positive_whole_number(monkeypatch: Any, value: str) -> None:
    from mapsmith_opensource.raster_io import max_raster_cells

    monkeypatch.setenv("MAPSMITH_MAX_RASTER_CELLS", value)
    with pytest.raises(MapSmithError) as info:
        max_raster_cells()
    assert info.value.code == "LIMIT_SETTING_INVALID"
