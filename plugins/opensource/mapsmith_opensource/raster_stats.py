"""Statistics of every band of a raster, read in row blocks so that a large grid is never held whole.

Split from ``raster_io`` (which re-exports both names): this is the only code that scans every cell of
an input for a description. It never opens a file itself; the caller hands it an open dataset, opened
through ``raster_io.open_raster`` so the driver policy has already been applied.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

BLOCK_ROWS = 1024  # rows per window when a whole raster is scanned for statistics


def _windows(ds: Any) -> Iterator[Any]:
    from rasterio.windows import Window

    for row in range(0, ds.height, BLOCK_ROWS):
        yield Window(0, row, ds.width, min(BLOCK_ROWS, ds.height - row))


def band_statistics(ds: Any) -> list[dict[str, Any]]:
    """min, max, mean, standard deviation and valid-cell count of every band, read in row blocks
    (nodata, NaN and any mask band excluded), so a large raster is never held whole. A band masked by
    nodata alone is read as a plain array (masked arrays cost twice the time on a large grid). Run it
    with ``GDAL_NUM_THREADS`` set, from the open on, to decode blocks on every core."""
    import numpy as np
    from rasterio.enums import MaskFlags

    out = []
    for band in range(1, ds.count + 1):
        flags = set(ds.mask_flag_enums[band - 1])
        plain = not flags & {MaskFlags.per_dataset, MaskFlags.alpha}
        nodata = ds.nodatavals[band - 1]
        n, total, total_sq = 0, 0.0, 0.0
        low, high = math.inf, -math.inf
        for window in _windows(ds):
            if plain:
                data = ds.read(band, window=window)
                keep = np.ones(data.shape, bool) if nodata is None else data != nodata
                if data.dtype.kind == "f":
                    keep &= ~np.isnan(data)
                values = data[keep].astype("float64")
            else:
                values = ds.read(band, window=window, masked=True).compressed().astype("float64")
                values = values[~np.isnan(values)]
            if values.size == 0:
                continue
            n += values.size
            total += float(values.sum())
            total_sq += float(np.dot(values, values))
            low, high = min(low, float(values.min())), max(high, float(values.max()))
        mean = total / n if n else None
        stdev = math.sqrt(max(total_sq / n - mean * mean, 0.0)) if n and mean is not None else None
        out.append(
            {
                "band": band,
                "valid_count": n,
                "min": low if n else None,
                "max": high if n else None,
                "mean": mean,
                "stdev": stdev,
            }
        )
    return out
