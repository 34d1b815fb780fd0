"""What a raster file says about itself, read from its header before any cell is computed on.

Split from ``raster_io`` (which re-exports every name here): the open policy (``open_raster``: only the
driver a file's extension names), the cell limit (``check_raster_size``), every georeferencing reading
of a GeoTIFF (tags, ``.aux.xml`` sidecar, tab and world files) and ``inspect_raster``, the header and,
when asked, band statistics. It must never choose between two georeferencings (it lists them) and never
compute on cell values beyond those statistics.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ConfigurationError, InputError
from mapsmith.gdalpolicy import raster_drivers
from mapsmith.registry import DatasetInfo
from mapsmith.verify import GEOREF_SOURCE_NAMES as SOURCE_FILES
from mapsmith_opensource.raster_stats import band_statistics

if TYPE_CHECKING:
    from affine import Affine

RASTER_SUFFIXES = frozenset({".tif", ".tiff", ".vrt", ".img", ".asc", ".bil", ".jp2", ".nc", ".dem"})
# Where GDAL can find a GeoTIFF's georeferencing, in the order it consults them by default.
GEOREF_SOURCES = ("PAM", "INTERNAL", "TABFILE", "WORLDFILE")


def is_raster(path: Path) -> bool:
    return path.suffix.lower() in RASTER_SUFFIXES


def _unreadable(path: Path, exc: Exception) -> InputError:
    return InputError(
        f"cannot read {path.name} as a raster: {exc}",
        code="INPUT_UNREADABLE",
        evidence={"path": str(path), "engine_message": str(exc)},
        hint="check the file is a complete GeoTIFF (or another GDAL raster format)",
    )


def open_raster(path: Path, **env: str) -> Any:
    """``rasterio.open`` for reading, with only the driver ``path``'s extension names allowed.

    ``env`` holds GDAL config options for the open. Raises ``InputError`` (``INPUT_UNREADABLE``)
    before GDAL runs when a ``.tif`` does not start like a TIFF.
    """
    import warnings

    import rasterio
    from rasterio.errors import NotGeoreferencedWarning

    drivers = raster_drivers(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.Env(**env):
            # rasterio takes one name (its docs say a list too; 1.4 raises TypeError): every rule has one.
            return rasterio.open(path, driver=drivers[0]) if drivers else rasterio.open(path)


_quiet_open = open_raster  # the name the rest of this module grew up with


MAX_RASTER_CELLS_ENV = "MAPSMITH_MAX_RASTER_CELLS"
DEFAULT_MAX_RASTER_CELLS = 250_000_000


def max_raster_cells(environ: Any = None) -> int:
    """The cell limit per grid an operation reads (``MAPSMITH_MAX_RASTER_CELLS``, a positive integer)."""
    raw = (os.environ if environ is None else environ).get(MAX_RASTER_CELLS_ENV)
    if raw in (None, ""):
        return DEFAULT_MAX_RASTER_CELLS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(
            f"{MAX_RASTER_CELLS_ENV} must be a positive whole number of cells, not {raw!r}",
            code="LIMIT_SETTING_INVALID",
            evidence={"variable": MAX_RASTER_CELLS_ENV, "value": raw},
            hint=f"set {MAX_RASTER_CELLS_ENV} to e.g. {DEFAULT_MAX_RASTER_CELLS}, or unset it for that default",
        )
    return value


def check_raster_size(slot: str, given: str, width: int, height: int, bands: int = 1) -> None:
    """Refuse a grid whose ``bands`` x height x width cells exceed the limit, from the header alone.

    The size on disk says nothing: a sparse or well-compressed GeoTIFF of a few hundred KB can
    declare 60000 x 60000 cells, and an operation holding it as float64 needs ~29 GB.
    """
    cells = int(width) * int(height) * int(bands)
    limit = max_raster_cells()
    if cells > limit:
        raise InputError(
            f"{slot} ({given}) is {width} x {height} cells x {bands} band(s) = {cells:,} cells, more than the "
            f"{limit:,} one operation may read",
            code="RASTER_TOO_LARGE",
            evidence={"argument": slot, "path": given, "width": width, "height": height, "bands": bands}
            | {"cells": cells, "max_cells": limit, "limit_variable": MAX_RASTER_CELLS_ENV},
            hint="MapSmith's raster operations hold whole grids in memory: cut the raster to the area and cell "
            "size the question needs outside MapSmith first (gdal_translate -projwin ... -tr ...), or restart the "
            f"server with a larger {MAX_RASTER_CELLS_ENV} if this machine has the memory (about 8 bytes a cell)",
        )


def _transform_list(t: Affine) -> list[float]:
    """GDAL order: x origin, x cell width, row rotation, y origin, column rotation, y cell height."""
    return [float(v) for v in t.to_gdal()]


def georef_readings(path: Path) -> list[dict[str, Any]]:
    """Each source's own reading of where ``path`` lies; sources that say nothing are left out."""
    from affine import Affine

    from mapsmith.crs import crs_label

    readings = []
    for source in GEOREF_SOURCES:
        try:
            with _quiet_open(path, GDAL_GEOREF_SOURCES=source) as ds:
                transform, crs = ds.transform, ds.crs
        except Exception:
            continue
        if transform == Affine.identity() and crs is None:
            continue
        readings.append(
            {
                "source": source,
                "from": SOURCE_FILES[source],
                "transform": _transform_list(transform) if transform != Affine.identity() else None,
                "crs": crs_label(crs.to_wkt()) if crs is not None else None,
            }
        )
    return readings


def readings_disagree(readings: Sequence[dict[str, Any]]) -> bool:
    transforms = [r["transform"] for r in readings if r["transform"] is not None]
    crss = {r["crs"] for r in readings if r["crs"] is not None}
    differ = any(
        any(abs(a - b) > 1e-9 * max(1.0, abs(b)) for a, b in zip(t, transforms[0], strict=True)) for t in transforms[1:]
    )
    return differ or len(crss) > 1


def inspect_raster(path: Path, *, statistics: bool = False) -> DatasetInfo:
    """The header of a raster, every georeferencing reading of it, and (when asked) band statistics."""
    from mapsmith.crs import crs_label
    from mapsmith_opensource.io import _lonlat_bounds

    try:
        # Statistics decode every block: on every core (GDAL reads the option when the file is opened).
        ds = _quiet_open(path, **({"GDAL_NUM_THREADS": "ALL_CPUS"} if statistics else {}))
    except InputError:
        raise  # the open policy's own refusal, with its evidence
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    with ds:
        t = ds.transform
        readings = georef_readings(path)
        chosen = os.environ.get("GDAL_GEOREF_SOURCES")
        crs = ds.crs
        from pyproj import CRS as PyprojCRS

        pcrs = PyprojCRS.from_wkt(crs.to_wkt()) if crs is not None else None
        corners = [t @ (c, r) for c, r in ((0, 0), (ds.width, 0), (0, ds.height), (ds.width, ds.height))]
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        bounds = (min(xs), min(ys), max(xs), max(ys))
        grid: dict[str, Any] = {
            "width": ds.width,
            "height": ds.height,
            "count": ds.count,
            "dtypes": list(ds.dtypes),
            "nodata": _nodata_value(ds.nodata),
            "transform": _transform_list(t),
            "res": [abs(t.a), abs(t.e)] if t.b == 0 and t.d == 0 else [math.hypot(t.a, t.d), math.hypot(t.b, t.e)],
            "north_up": t.b == 0 and t.d == 0 and t.e < 0,
            "south_up": t.b == 0 and t.d == 0 and t.e > 0,
            "rotated": t.b != 0 or t.d != 0,
            "area_or_point": ds.tags().get("AREA_OR_POINT", "Area"),
            "band_names": [d or f"band_{i + 1}" for i, d in enumerate(ds.descriptions)],
            "scales": [float(v) for v in ds.scales],
            "offsets": [float(v) for v in ds.offsets],
            "compression": ds.profile.get("compress"),
            "predictor": int(ds.tags(ns="IMAGE_STRUCTURE").get("PREDICTOR", 1)),
            "georeferencing": {
                "source_used": _source_used(readings, chosen),
                "readings": readings,
                "conflict": readings_disagree(readings),
                "GDAL_GEOREF_SOURCES": chosen,
            },
        }
        if statistics:
            import rasterio

            with rasterio.Env(GDAL_NUM_THREADS="ALL_CPUS"):
                grid["statistics"] = band_statistics(ds)
    return DatasetInfo(
        path=str(path),
        kind="raster",
        driver=ds.driver,
        layer=None,
        layers=(),
        crs_wkt=pcrs.to_wkt() if pcrs is not None else None,
        crs_label=crs_label(pcrs) if pcrs is not None else None,
        crs_is_geographic=pcrs.is_geographic if pcrs is not None else None,
        feature_count=None,
        geometry_types=(),
        bounds=bounds,
        bounds_lonlat=_lonlat_bounds(pcrs, bounds) if pcrs is not None else None,
        grid=grid,
    )


def _nodata_value(value: float | None) -> float | None:
    return None if value is None else float(value)


def _source_used(readings: Sequence[dict[str, Any]], chosen: str | None) -> str | None:
    order = [s.strip().upper() for s in chosen.split(",")] if chosen else list(GEOREF_SOURCES)
    present = {r["source"] for r in readings if r["transform"] is not None}
    return next((s for s in order if s in present), None)
