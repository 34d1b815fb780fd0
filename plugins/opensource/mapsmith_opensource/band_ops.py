"""extract_band and band_statistics: one band copied, or every band summarised.

Split from ``raster_ops`` along its seams. extract_band copies the stored numbers and the band's scale
and offset together (the output means what the input meant); band_statistics summarises physical
values (stored x scale + offset) and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError
from mapsmith_opensource.raster_shared import _engine, _resolve_band, _valid_range

if TYPE_CHECKING:
    from mapsmith.runner import RunContext


# -- extract_band ----------------------------------------------------------------------------


def extract_band(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith.crs import crs_label
    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    grid = open_grid(ctx)
    number = _resolve_band(grid, ctx.arguments["band"], "band")
    data = grid.read(number, stored=True)  # the stored numbers, with their scale and offset below
    dtype = grid.stored_dtypes[number - 1]
    fill = grid.nodata if grid.nodata is not None else (np.nan if np.issubdtype(np.dtype(dtype), np.floating) else 0)
    array = np.ma.filled(data, fill).astype(dtype)
    scale, offset = grid.scaling(number)
    name = grid.band_names[number - 1]
    ctx.parameters["band"] = number
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(grid.crs))
    ctx.crs_decisions.setdefault("reason", "a band copied on input_path's own grid")
    ctx.notes.append(
        f"band {number} ({name!r}) of {grid.count} copied unchanged: {dtype}, nodata {grid.nodata}, "
        f"scale {scale:g}, offset {offset:g}"
    )
    write_raster(
        ctx,
        array,
        transform=grid.transform,
        crs=grid.crs,
        nodata=grid.nodata,
        dtype=dtype,
        band_names=[name],
        value_range=_valid_range(data),
        scales=[scale] if (scale, offset) != (1.0, 0.0) else None,
        offsets=[offset] if (scale, offset) != (1.0, 0.0) else None,
    )


# -- band_statistics -------------------------------------------------------------------------


def parse_percentiles(text: str) -> list[float]:
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            value = float("nan")
        if not 0 <= value <= 100:
            raise ArgumentError(
                f"percentiles: {part.strip()!r} is not a number from 0 to 100",
                code="PERCENTILES_INVALID",
                evidence={"argument": "percentiles", "percentiles": text},
                hint="give comma-separated numbers from 0 to 100, e.g. '5,50,95'",
            )
        values.append(value)
    return values


def validate_band_statistics(ctx: RunContext) -> None:
    if ctx.arguments.get("percentiles") is not None:
        parse_percentiles(ctx.arguments["percentiles"])


def _key(p: float) -> str:
    return f"{p:g}"


def band_statistics(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith_opensource.raster_io import open_grid

    _engine(ctx)
    grid = open_grid(ctx)
    percentiles = parse_percentiles(ctx.arguments["percentiles"]) if ctx.arguments.get("percentiles") else []
    if ctx.arguments.get("band") is not None:
        numbers = [_resolve_band(grid, ctx.arguments["band"], "band")]
    else:
        numbers = list(range(1, grid.count + 1))
    rows = []
    for number in numbers:
        data = grid.read(number)
        values = np.ma.compressed(data).astype("float64")
        row: dict[str, Any] = {
            "band": number,
            "name": grid.band_names[number - 1],
            "valid_count": int(values.size),
            "nodata_count": int(data.size - values.size),
            "min": float(values.min()) if values.size else None,
            "max": float(values.max()) if values.size else None,
            "mean": float(values.mean()) if values.size else None,
            "stdev": float(values.std()) if values.size else None,
        }
        if percentiles:
            found = np.percentile(values, percentiles) if values.size else [None] * len(percentiles)
            row["percentiles"] = {
                _key(p): (None if v is None else float(v)) for p, v in zip(percentiles, found, strict=True)
            }
        scale, offset = grid.scaling(number)
        if (scale, offset) != (1.0, 0.0):
            row["scale"], row["offset"] = scale, offset  # already applied: the numbers above are physical
        rows.append(row)
    ctx.answer.update(
        {
            "bands": rows,
            "nodata": grid.nodata,
            "cells": grid.width * grid.height,
            "method": "physical values (a band's scale and offset applied: stored x scale + offset); nodata and NaN "
            "cells excluded; stdev is the "
            "population standard deviation; percentiles interpolate linearly between the two nearest ranks",
        }
    )
