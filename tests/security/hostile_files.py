"""What the hostile-file tests share: the marker a file outside the workspace carries, and a small GeoTIFF."""

from __future__ import annotations

from pathlib import Path

MARKER = "MARKER_7F3A_OUTSIDE"


def write_tif(path: Path, *, value: int = 5, size: int = 8) -> Path:
    """A ``size`` x ``size`` uint8 GeoTIFF in EPSG:32610 with 10 m cells, every cell ``value``."""
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    profile = {
        "driver": "GTiff",
        "width": size,
        "height": size,
        "count": 1,
        "dtype": "uint8",
        "crs": "EPSG:32610",
        "transform": from_origin(500000, 4000000, 10, 10),
    }
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(np.full((1, size, size), value, dtype="uint8"))
    return path
