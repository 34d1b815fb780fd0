"""exactextract as zonal_statistics' engine: the zones and raster handed over, the results read back.

Split from ``zonal_ops`` along its seams (``zonal_ops`` re-exports these names; the zonal benchmark
reads them there). exactextract applies a band's scale and offset itself (its rasterio source reads
physical values); a grid it cannot read as stored (south-up) is handed over as ``Grid.plain_copy``,
which holds physical values already and no scale tags. This module must never resample a raster or
hand exactextract a file it would read as different values from GDAL's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid
    from mapsmith_opensource.zonal_ops import _Request

# GDAL's block cache while the engine reads (bytes): zones are visited in block order, so this holds
# the blocks neighbours share many times over; GDAL's default (5 % of RAM) would let one large raster
# take gigabytes.
GDAL_CACHE_BYTES = 64 * 2**20
HIDDEN_COUNT = "__mapsmith_count"
ZONE_KEY = "__mapsmith_zone"


def _run_engine(
    ctx: RunContext,
    zones: gpd.GeoDataFrame,
    rows: np.ndarray,
    value_file: Path,
    band: int,
    weight_file: Path | None,
    request: _Request,
) -> Any:
    """exactextract over the zones (already on the raster's grid), one result row per zone, keyed by
    its position in input_path."""
    import warnings

    import pandas as pd
    import rasterio
    import shapely
    from exactextract import exact_extract
    from exactextract.operation import Operation

    from mapsmith_opensource import raster_io

    names = [ZONE_KEY, HIDDEN_COUNT, *request.fields.values()]
    if not len(zones):
        return pd.DataFrame({name: [] for name in names})
    # Zones are visited in block order, so a small block cache serves neighbours; it also bounds the
    # memory a large raster can take (GDAL's default is 5 % of the machine's RAM).
    with rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_BYTES), raster_io.open_raster(value_file) as values_ds:
        weights_ds = raster_io.open_raster(weight_file) if weight_file is not None else None
        try:
            values = _raster_source(values_ds, band)
            weights = _raster_source(weights_ds, 1) if weights_ds is not None else None
            ops = [Operation("count", HIDDEN_COUNT, values, weights, {})]
            quantile_fields: dict[str, str] = {}
            for statistic, field in request.fields.items():
                if statistic.startswith("quantile_"):
                    q = request.quantiles[len(quantile_fields)]
                    # exactextract appends "_<int(percent)>" to a quantile's name: a private name,
                    # renamed below, so 0.025 and 0.02 cannot meet in one field.
                    private = f"__mapsmith_q{len(quantile_fields)}x"
                    quantile_fields[private] = field
                    ops.append(Operation("quantile", private, values, weights, {"q": repr(q)}))
                else:
                    ops.append(Operation(statistic, field, values, weights, {}))
            order = _processing_order(zones, values_ds, band)
            features = _feature_source(
                rows[order].tolist(), shapely.to_wkb(zones.geometry.values[order]).tolist(), zones.crs.to_wkt()
            )
            with warnings.catch_warnings():
                # Both sides are in the raster's CRS already (aligned and recorded); exactextract's check
                # compares WKT spellings.
                warnings.filterwarnings("ignore", message="Spatial reference system of input features")
                result = exact_extract(
                    values,
                    features,
                    ops,
                    include_cols=[ZONE_KEY],
                    output="pandas",
                    strategy="feature-sequential",
                    progress=(lambda fraction, message: ctx.progress(fraction, message)) if ctx.progress else False,
                )
        finally:
            if weights_ds is not None:
                weights_ds.close()
    for private, field in quantile_fields.items():
        (column,) = [c for c in result.columns if str(c).startswith(private)]
        result = result.rename(columns={column: field})
    return result


def _raster_source(ds: Any, band: int) -> Any:
    """exactextract's rasterio source; where nodata is the band's only mask and no scale applies, it
    reads plain arrays and leaves nodata (and NaN) to the engine's own test, which skips building
    numpy masked arrays window by window (measured under cProfile on the benchmark's 10,000 zones: masked
    reads took 2.4 times as long as plain ones)."""
    from exactextract.raster import RasterioRasterSource
    from rasterio.enums import MaskFlags
    from rasterio.windows import Window

    class PlainRasterSource(RasterioRasterSource):
        def read_window(self, x0: int, y0: int, nx: int, ny: int) -> Any:
            return self.ds.read(self.band_idx, window=Window(x0, y0, nx, ny))

    flags = set(ds.mask_flag_enums[band - 1])
    scaled = ds.scales[band - 1] != 1.0 or ds.offsets[band - 1] != 0.0
    plain = not scaled and (flags == {MaskFlags.all_valid} or flags == {MaskFlags.nodata})
    return (PlainRasterSource if plain else RasterioRasterSource)(ds, band)


def _feature_source(keys: list[int], wkbs: list[bytes], crs_wkt: str) -> Any:
    """Zones handed to exactextract as WKB with one key each: no GeoJSON round trip per zone (measured:
    half of the engine's time on 10,000 polygons when they went through GeoPandas' GeoJSON features)."""
    from exactextract._exactextract import Feature
    from exactextract.feature import FeatureSource

    class WkbFeature(Feature):
        def __init__(self, key: int, wkb: bytes) -> None:
            Feature.__init__(self)
            self.key, self.wkb = key, wkb

        def geometry(self) -> bytes:
            return self.wkb

        def set_geometry_format(self) -> str:
            return "wkb"

        def get(self, name: str) -> int:
            return self.key

        def fields(self) -> list[str]:
            return [ZONE_KEY]

    class WkbFeatureSource(FeatureSource):
        def count(self) -> int:
            return len(keys)

        def __iter__(self) -> Any:
            for key, wkb in zip(keys, wkbs, strict=True):
                yield WkbFeature(key, wkb)

        def srs_wkt(self) -> str:
            return crs_wkt

    return WkbFeatureSource()


def _processing_order(zones: gpd.GeoDataFrame, ds: Any, band: int) -> np.ndarray:
    """Zones sorted by the raster block row, then column, their bounding box centre falls in: the
    engine reads each zone's window, and neighbours in this order share decompressed blocks."""
    import numpy as np

    block_rows = max(int(ds.block_shapes[band - 1][0]), 1)
    bounds = zones.geometry.bounds.to_numpy()
    t = ds.transform  # north-up: no rotation terms
    cols = ((bounds[:, 0] + bounds[:, 2]) / 2 - t.c) / t.a
    rows = ((bounds[:, 1] + bounds[:, 3]) / 2 - t.f) / t.e
    return np.lexsort((cols, np.floor(rows / block_rows)))


def _readable_file(
    ctx: RunContext, grid: Grid | None, band: int, scale: float, offset: float, scratch: str
) -> tuple[Path, int]:
    """The file exactextract reads and the band in it: the raster itself when GDAL reads it north-up
    (exactextract applies its scale and offset), else a plain north-up copy of the one band holding
    the physical values and no scale. Either way the band is recorded as read in physical values."""
    from pathlib import Path

    from mapsmith_opensource import raster_scaling

    assert grid is not None
    raster_scaling.mark_read(ctx, grid.scaling_record, grid.slot, band, raster_scaling.PHYSICAL)
    if not grid.flipped:
        return grid.path, band
    copy = grid.plain_copy(Path(scratch), band=band)
    ctx.notes.append(
        f"{grid.slot} is stored south-up; exactextract read a north-up copy of band {band} (the same cells, "
        + ("physical values" if raster_scaling.is_scaled(scale, offset) else "values")
        + " and nodata), which no engine misreads"
    )
    return copy, 1


def _scale_offset(ctx: RunContext, slot: str, band: int) -> tuple[float, float]:
    grid = ctx.inputs[slot].grid or {}
    scales, offsets = grid.get("scales") or [], grid.get("offsets") or []
    scale = float(scales[band - 1]) if len(scales) >= band else 1.0
    offset = float(offsets[band - 1]) if len(offsets) >= band else 0.0
    return scale, offset
