"""Sampling a grid at places, shared by sample_ops (points, line of sight, extreme cell) and profile_ops
(profiles along lines): positions placed by the checked geotransform only, nearest or bilinear, a place off
the grid or on a nodata cell null with its reason. Nothing here reads a file or writes one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith_opensource.raster_io import Grid

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext

OUTSIDE, NODATA = 1, 2  # why a sample is null
# A position this close (in cells) to a sample position is that sample: coordinates in degrees carry
# ~1e-11 of a one-arc-second cell in rounding alone, which must not leak a neighbour into bilinear.
SNAP_CELLS = 1e-9
MAX_PROFILE_SAMPLES = 2000  # over all profiles of one answer
INDICES_SHOWN = 20


# -- sampling on a grid ---------------------------------------------------------------------------


def _fractional(grid: Grid, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column and row of each position in cell units from the grid's corner (0.5 = a cell's centre)."""
    t = grid.transform
    return (xs - t.c) / t.a, (ys - t.f) / t.e


def _snap(values: np.ndarray) -> np.ndarray:
    import numpy as np

    nearest = np.round(values)
    return np.where(np.abs(values - nearest) < SNAP_CELLS, nearest, values)


def sample_grid(grid: Grid, band: int, xs: np.ndarray, ys: np.ndarray, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Values of ``band`` at map positions (the grid's CRS): float64 with NaN where null, and why each
    null is null (``OUTSIDE`` or ``NODATA``; 0 for a value).

    nearest: the cell the position falls in (a position on a cell edge, to within ``SNAP_CELLS``,
    belongs to the cell right of / below it, as in GDAL). bilinear: the four cell centres around the
    position, weighted by distance; in the outer half cell of the grid the edge cells are extended
    outward (no cell beyond the edge is invented), and a position whose weighted cells include a nodata
    cell is null.
    """
    import numpy as np
    from rasterio.windows import Window

    xs, ys = np.asarray(xs, dtype="float64"), np.asarray(ys, dtype="float64")
    values = np.full(xs.shape, np.nan)
    reason = np.zeros(xs.shape, dtype="int8")
    fc, fr = _fractional(grid, xs, ys)
    with np.errstate(invalid="ignore"):
        fc, fr = _snap(fc), _snap(fr)
        inside = np.isfinite(fc) & np.isfinite(fr) & (fc >= 0) & (fc < grid.width) & (fr >= 0) & (fr < grid.height)
    reason[~inside] = OUTSIDE
    if not inside.any():
        return values, reason
    fc, fr = fc[inside], fr[inside]
    if method == "nearest":
        cols = [np.floor(fc).astype("int64")]
        rows = [np.floor(fr).astype("int64")]
        weights = [np.ones(fc.shape)]
    else:
        u, v = _snap(fc - 0.5), _snap(fr - 0.5)
        c0, r0 = np.floor(u).astype("int64"), np.floor(v).astype("int64")
        wu, wv = u - c0, v - r0
        c1 = np.clip(c0 + 1, 0, grid.width - 1)
        r1 = np.clip(r0 + 1, 0, grid.height - 1)
        c0, r0 = np.clip(c0, 0, grid.width - 1), np.clip(r0, 0, grid.height - 1)
        cols, rows = [c0, c1, c0, c1], [r0, r0, r1, r1]
        weights = [(1 - wu) * (1 - wv), wu * (1 - wv), (1 - wu) * wv, wu * wv]
    # Read only the window the positions touch.
    row_lo, row_hi = min(int(r.min()) for r in rows), max(int(r.max()) for r in rows)
    col_lo, col_hi = min(int(c.min()) for c in cols), max(int(c.max()) for c in cols)
    data = grid.read(band, window=Window(col_lo, row_lo, col_hi - col_lo + 1, row_hi - row_lo + 1))
    array = np.ma.getdata(data).astype("float64")
    mask = np.ma.getmaskarray(data)
    total = np.zeros(fc.shape)
    bad = np.zeros(fc.shape, dtype=bool)
    for r, c, w in zip(rows, cols, weights, strict=True):
        cell = array[r - row_lo, c - col_lo]
        masked = mask[r - row_lo, c - col_lo]
        bad |= masked & (w > 0)
        total += np.where(masked | (w == 0), 0.0, w * cell)
    values[inside] = np.where(bad, np.nan, total)
    sub = reason[inside]
    sub[bad] = NODATA
    reason[inside] = sub
    return values, reason


def _band_choice(grid: Grid, band: int | None) -> list[int]:
    return list(range(1, grid.count + 1)) if band is None else [grid.band_index(band)]


def _indices(mask: np.ndarray) -> list[int]:
    import numpy as np

    return [int(i) for i in np.flatnonzero(mask)]


def _given(ctx: RunContext, slot: str) -> str:
    return ctx.given_paths.get(slot, slot)
