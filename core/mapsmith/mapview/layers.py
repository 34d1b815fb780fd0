"""Turn one dataset into what a web map can draw, losing detail on purpose and saying how much.

Vectors: the first ``max_features`` features in file order, simplified in a local UTM zone to a
tolerance in metres, then reprojected to EPSG:4326 (what GeoJSON and Leaflet expect). Rasters: one
band, read decimated to at most ``MAX_RASTER_PIXELS`` on its longer side, warped to Web Mercator
(the background map's grid, so cells line up with it), coloured on a fixed ramp between the shown
cells' minimum and maximum, and encoded as a PNG with nodata transparent. The dataset on disk stays
the record: nothing here writes beside it. Engines are imported inside the functions.
"""

from __future__ import annotations

import base64
import math
import warnings
from datetime import date, datetime
from pathlib import Path
from typing import Any

from mapsmith.errors import InputError
from mapsmith.gdalpolicy import allowed_driver, vector_source

DISPLAY_CRS = "EPSG:4326"
DEFAULT_MAX_FEATURES = 2000
MAX_RASTER_PIXELS = 1024
COORDINATE_DECIMALS = 6  # about 0.1 m at the equator: finer than any simplification tolerance used here
# A perceptually ordered ramp (dark blue -> teal -> green -> yellow), written as stops from 0 to 1.
RAMP = ("#30123b", "#2a7b8e", "#22a884", "#7ad151", "#fde725")
RASTER_SUFFIXES = (".tif", ".tiff", ".vrt", ".img", ".asc", ".nc")


def is_raster(path: Path) -> bool:
    return path.suffix.lower() in RASTER_SUFFIXES


def auto_tolerance_meters(width_m: float, height_m: float) -> float:
    """One thousandth of the extent's diagonal, to one significant figure (0 for a point-sized extent)."""
    diagonal = math.hypot(width_m, height_m)
    if diagonal <= 0:
        return 0.0
    raw = diagonal / 1000
    magnitude = 10 ** math.floor(math.log10(raw))
    return float(round(raw / magnitude) * magnitude)


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime | date):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return _json_value(value.item())
    return str(value)


def _rounded(coords: Any) -> Any:
    if isinstance(coords, float | int):
        return round(float(coords), COORDINATE_DECIMALS)
    return [_rounded(c) for c in coords]


def vector_layer(path: Path, given: str, max_features: int, simplify_meters: float | None) -> dict[str, Any]:
    import geopandas as gpd
    import pyogrio
    import shapely

    total: int | None
    if path.suffix.lower() == ".parquet":
        # GeoParquet through pyarrow (GDAL's Parquet driver is not in every build); the count is in its footer.
        import pyarrow.parquet as pq

        from mapsmith import parts

        total = sum(pq.read_metadata(f).num_rows for f in parts.dataset_files(path))  # a folder: its parts'
        frame = gpd.read_parquet(path).iloc[:max_features]
    else:
        # The driver the file's extension names and no other (mapsmith.gdalpolicy): never a VRT in disguise
        source = vector_source(path)[0]
        info = pyogrio.read_info(source)
        total = int(info["features"]) if info.get("features", -1) >= 0 else None
        frame = gpd.read_file(source, engine="pyogrio", max_features=max_features)
    if total is None:
        total = len(frame)
    if frame.crs is None:
        raise InputError(
            f"{given} declares no CRS, so it cannot be placed on a map",
            code="MAP_LAYER_NO_CRS",
            evidence={"path": given},
            hint="assign its CRS first (resolve_crs or reproject_layer), then preview the result",
        )
    from mapsmith.crs import crs_label

    source_crs = crs_label(frame.crs.to_wkt())
    frame = frame[frame.geometry.notna() & ~frame.geometry.is_empty]
    vertices_before = int(shapely.get_num_coordinates(frame.geometry.values).sum())
    tolerance = 0.0
    if len(frame):
        metric = frame.to_crs(frame.estimate_utm_crs())
        minx, miny, maxx, maxy = metric.total_bounds
        tolerance = auto_tolerance_meters(maxx - minx, maxy - miny) if simplify_meters is None else simplify_meters
        if tolerance > 0:
            metric = metric.set_geometry(metric.geometry.simplify(tolerance, preserve_topology=True))
        frame = metric.to_crs(DISPLAY_CRS)
    vertices_after = int(shapely.get_num_coordinates(frame.geometry.values).sum())
    fields = [c for c in frame.columns if c != frame.geometry.name]
    features = []
    for row_index, (geometry, values) in enumerate(
        zip(frame.geometry, frame[fields].itertuples(index=False), strict=True)
    ):
        mapped: dict[str, Any] = geometry.__geo_interface__
        features.append(
            {
                "type": "Feature",
                "id": row_index,
                "geometry": {"type": mapped["type"], "coordinates": _rounded(mapped["coordinates"])},
                "properties": {f: _json_value(v) for f, v in zip(fields, values, strict=True)},
            }
        )
    shown = len(features)
    bounds = [float(b) for b in frame.total_bounds] if shown else None
    summary = f"showing {shown} of {total} features, simplified to {tolerance:g} m, reprojected to {DISPLAY_CRS}"
    return {
        "kind": "vector",
        "bounds": bounds,
        "vector": {
            "feature_count_total": total,
            "feature_count_shown": shown,
            "capped": shown < total,
            "simplified_to_meters": tolerance,
            "vertex_count_before": vertices_before,
            "vertex_count_after": vertices_after,
            "source_crs": source_crs,
            "display_crs": DISPLAY_CRS,
            "fields": fields,
            "geometry_types": sorted({str(g.geom_type) for g in frame.geometry}),
            "geojson": {"type": "FeatureCollection", "features": features},
        },
        "lossy": summary,
    }


def _ramp_rgb(fraction: Any) -> Any:
    import numpy as np

    stops = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in RAMP], dtype="float64")
    positions = np.linspace(0.0, 1.0, len(RAMP))
    return np.stack([np.interp(fraction, positions, stops[:, k]) for k in range(3)]).round().astype("uint8")


def raster_layer(path: Path, given: str, band: int = 1) -> dict[str, Any]:
    import numpy as np
    import rasterio
    from rasterio.enums import Resampling
    from rasterio.io import MemoryFile
    from rasterio.warp import calculate_default_transform, reproject, transform_bounds

    from mapsmith.crs import crs_label

    with rasterio.open(path, driver=allowed_driver(path)) as src:
        if src.crs is None:
            raise InputError(
                f"{given} declares no CRS, so it cannot be placed on a map",
                code="MAP_LAYER_NO_CRS",
                evidence={"path": given},
                hint="assign its CRS first, then preview the result",
            )
        scale = max(src.width, src.height) / MAX_RASTER_PIXELS
        width, height = src.width, src.height
        if scale > 1:
            width, height = max(1, round(src.width / scale)), max(1, round(src.height / scale))
        data = src.read(band, out_shape=(height, width), resampling=Resampling.nearest, masked=True)
        read_transform = src.transform * src.transform.scale(src.width / width, src.height / height)
        target_crs = "EPSG:3857"
        dst_transform, dst_width, dst_height = calculate_default_transform(
            src.crs, target_crs, width, height, *src.bounds
        )
        filled = data.filled(np.nan).astype("float64")
        warped = np.full((dst_height, dst_width), np.nan, dtype="float64")
        reproject(
            filled,
            warped,
            src_transform=read_transform,
            src_crs=src.crs,
            src_nodata=np.nan,
            dst_transform=dst_transform,
            dst_crs=target_crs,
            dst_nodata=np.nan,
            resampling=Resampling.nearest,
        )
        west, south, east, north = transform_bounds(src.crs, DISPLAY_CRS, *src.bounds)
        source = {"width": src.width, "height": src.height, "crs": crs_label(src.crs.to_wkt()), "bands": src.count}
        nodata = src.nodata
    valid = np.isfinite(warped)
    low = float(np.nanmin(warped)) if valid.any() else None
    high = float(np.nanmax(warped)) if valid.any() else None
    rgba = np.zeros((4, dst_height, dst_width), dtype="uint8")
    if low is not None and high is not None:
        span = high - low
        fraction = np.where(valid, (warped - low) / span if span > 0 else 0.5, 0.0)
        rgba[:3] = _ramp_rgb(fraction)
        rgba[3] = np.where(valid, 255, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a PNG has no georeferencing by design: the bounds travel beside it
        with MemoryFile() as memory:
            with memory.open(driver="PNG", width=dst_width, height=dst_height, count=4, dtype="uint8") as dst:
                dst.write(rgba)
            png = memory.read()
    decimated = (width, height) != (source["width"], source["height"])
    summary = (
        f"band {band} rendered as a {dst_width}x{dst_height} PNG"
        + (f" (read at {width}x{height} from {source['width']}x{source['height']} cells)" if decimated else "")
        + f", warped to EPSG:3857, coloured between the shown cells' min {low:g} and max {high:g}"
        if low is not None and high is not None
        else f"band {band}: no valid cells to show"
    )
    return {
        "kind": "raster",
        "bounds": [west, south, east, north],
        "raster": {
            "band": band,
            "source": source,
            "read_size": [width, height],
            "decimated": decimated,
            "png_size": [dst_width, dst_height],
            "png_data_uri": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
            "nodata": _json_value(nodata),
            "legend": {"min": low, "max": high, "ramp": list(RAMP), "scope": "cells shown"},
        },
        "lossy": summary,
    }
