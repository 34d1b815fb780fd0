"""What the raster operations of ``raster_ops`` share: grid-edge snapping, reading every band, the
valid range of what was read, a nodata value no valid cell uses, and naming a band.

Split from ``raster_ops`` along its seams. It must never import rasterio or numpy at module level, and
never pick a nodata value that is also a data value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, InputError

if TYPE_CHECKING:
    import numpy as np
    from pyproj import CRS

    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid


# A grid edge computed from coordinates is taken as a whole number of cells when it is this close
# to one (in cells): 0.1 / 0.1 is 0.9999999999999999, and one cell more would be wrong.
CELL_SNAP = 1e-6
# Resampling methods whose every output value lies between the lowest and highest input value they
# read (non-negative weights, or a value picked from the inputs). cubic and lanczos overshoot.
RANGE_KEEPING = frozenset({"nearest", "bilinear", "cubic_spline", "average", "mode", "min", "max", "med"})
INTERPOLATING = frozenset({"bilinear", "cubic", "cubic_spline", "lanczos", "average"})
BAND_MATH_NODATA = -9999.0
FLOAT32_MAX = 3.4028234663852886e38


# -- shared helpers --------------------------------------------------------------------------


def _floor_cells(value: float) -> int:
    nearest = round(value)
    return int(nearest) if abs(value - nearest) < CELL_SNAP else math.floor(value)


def _ceil_cells(value: float) -> int:
    nearest = round(value)
    return int(nearest) if abs(value - nearest) < CELL_SNAP else math.ceil(value)


def _engine(ctx: RunContext) -> None:
    from mapsmith_opensource.raster_io import set_raster_engine

    set_raster_engine(ctx)


def _read_all(grid: Grid, window: Any = None, *, stored: bool = False) -> np.ma.MaskedArray:
    """Every band, bands first, north-up, nodata and NaN masked; physical values unless ``stored``."""
    import numpy as np

    return np.ma.stack([grid.read(b, window=window, stored=stored) for b in range(1, grid.count + 1)])


# Resampling methods that pick a value by its rank: under a negative scale the lowest stored number is
# the highest physical value, so they do not commute with the scale and run on physical values.
RANK_METHODS = frozenset({"min", "max", "med", "q1", "q3", "mode"})


@dataclass(frozen=True)
class CellCopy:
    """How an operation that moves cells without recomputing them reads and writes a scaled grid:
    the stored numbers with the band's scale and offset written on the output (``stored``), or
    physical values as float64 and no scale on the output."""

    stored: bool
    dtype: str
    nodata: float | None  # the declared nodata, in the numbers that are copied
    scales: tuple[float, ...] | None
    offsets: tuple[float, ...] | None


def _cell_copy(grid: Grid, method: str | None = None) -> CellCopy:
    """Stored numbers and the same scale and offset where that gives the same physical values: a copy,
    or a resampling that picks one input cell (nearest; a rank under a positive scale). A method that
    computes new values (bilinear, average ...) would round them to the stored integer type, and a rank
    under a negative scale picks the wrong cell: those run on physical values, written as float64."""
    if not grid.scaled:
        return CellCopy(True, grid.stored_dtypes[0], grid.nodata, None, None)
    if method in INTERPOLATING or (method in RANK_METHODS and any(s < 0 for s in grid.scales)):
        return CellCopy(False, "float64", None, None, None)
    return CellCopy(True, grid.stored_dtypes[0], grid.nodata, tuple(grid.scales), tuple(grid.offsets))


def _valid_range(data: np.ma.MaskedArray) -> tuple[float, float] | None:
    import numpy as np

    values = np.ma.compressed(data)
    if values.size == 0:
        return None
    return float(values.min()), float(values.max())


def _free_nodata(dtype: str, data: Any, declared: float | None, what: str) -> float:
    """``declared`` when there is one; else a value of ``dtype`` that no valid cell holds. Refuses when
    every candidate is a data value, rather than writing a nodata that hides real cells."""
    import numpy as np

    if declared is not None:
        return declared
    kind = np.dtype(dtype)
    if np.issubdtype(kind, np.floating):
        candidates = [BAND_MATH_NODATA, float("nan")]
    else:
        info = np.iinfo(kind)
        candidates = [float(info.min), float(info.max)] if info.min < 0 else [float(info.max), float(info.min)]
    values = np.ma.compressed(data) if np.ma.isMaskedArray(data) else np.asarray(data).ravel()
    for value in candidates:
        if math.isnan(value) or not bool((values == value).any()):
            return value
    raise InputError(
        f"{what} declares no nodata value and its cells use every candidate ({candidates}), so cells left "
        "empty could not be told from data",
        code="NODATA_UNAVAILABLE",
        evidence={"dtype": dtype, "candidates": candidates},
        hint="declare the raster's nodata value first (gdal_edit.py -a_nodata), then run again",
    )


def _resolve_band(grid: Grid, text: str, argument: str) -> int:
    """A band number from text naming a band by number ("3") or by name ("nir"); refuses a number that
    is also another band's name."""
    text = str(text).strip()
    if text.isdigit():
        number = int(text)
        if text in grid.band_names and grid.band_names.index(text) + 1 != number:
            raise ArgumentError(
                f"{argument}={text!r} is ambiguous in {grid.slot}: band {number}, or the band named {text!r} "
                f"(band {grid.band_names.index(text) + 1})",
                code="BAND_AMBIGUOUS",
                evidence={"argument": argument, "band": text, "bands": grid.band_names},
                hint=f"pass band_{number} for band number {number}, or rename the band called {text!r}",
            )
        return grid.band_index(number)
    return grid.band_index(text)


def _only_band(ctx: RunContext, grid: Grid, argument: str = "band") -> int:
    given = ctx.arguments.get(argument)
    if given is not None:
        return _resolve_band(grid, given, argument)
    if grid.count > 1:
        raise ArgumentError(
            f"{grid.slot} has {grid.count} bands ({', '.join(grid.band_names)}) and no {argument} was named; "
            "MapSmith will not pick one",
            code="BAND_REQUIRED",
            evidence={"argument": argument, "bands": grid.band_names},
            hint=f"pass {argument} as a number 1..{grid.count} or one of {grid.band_names}",
        )
    return 1


def _unit_name(crs: CRS) -> str:
    axes = crs.axis_info
    return axes[0].unit_name if axes else "unknown unit"


def _resampling(name: str) -> Any:
    from rasterio.enums import Resampling

    return Resampling[name]


def _grid_record(transform: Any, width: int, height: int, **extra: Any) -> dict[str, Any]:
    return {
        "width": width,
        "height": height,
        "cell_size": [abs(transform.a), abs(transform.e)],
        "transform": [float(v) for v in transform.to_gdal()],
        **extra,
    }


def _too_coarse(cell_size: float, extent: tuple[float, float], unit: str, crs_label: str | None) -> None:
    """Refuse a cell size wider than the whole extent both ways: usually metres given to a degree CRS."""
    if cell_size > extent[0] and cell_size > extent[1]:
        raise ArgumentError(
            f"cell_size {cell_size:g} is larger than the whole raster ({extent[0]:g} x {extent[1]:g} {unit} in "
            f"{crs_label}); the output would be a single cell",
            code="CELL_SIZE_TOO_LARGE",
            evidence={"cell_size": cell_size, "extent": list(extent), "unit": unit, "crs": crs_label},
            hint=f"cell_size is in the CRS's own unit ({unit}); give it in that unit",
        )


def _resample_notes(ctx: RunContext, method: str, dtype: str) -> None:
    import numpy as np

    if method in INTERPOLATING and not np.issubdtype(np.dtype(dtype), np.floating):
        ctx.notes.append(
            f"{method} resampling computed new values on an integer ({dtype}) raster; GDAL rounded them to {dtype}. "
            "If the values are classes (land cover, zones), nearest or mode keeps them classes"
        )
