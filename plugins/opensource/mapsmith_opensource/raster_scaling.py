"""Scale and offset: every raster value MapSmith computes on is the physical value a band declares.

A band may store integers that mean something else: reflectance 0..1 stored as 0..10000 with scale
0.0001, or temperatures in kelvin stored as ``stored x 0.02``. GDAL records that as the band's scale and
offset (physical = stored x scale + offset) and leaves applying it to the reader. This module is the one
place the opensource stack decides what to do with them:

- ``raster_io.Grid.read`` hands every operation physical values (float64) for a scaled band, and the
  band's ``dtypes`` entry says float64, so no operation mistakes them for the stored integers;
- an operation that copies cells unchanged (clip, reproject, resample, extract_band) may read the stored
  values instead, and then writes the same scale and offset on its output, so the output means what
  the input meant;
- an engine that reads files itself (Whitebox, exactextract on a flipped grid) is handed a copy holding
  physical values and no scale tags;
- a scale that cannot be applied (zero, not a number, infinite) is refused with ``RASTER_SCALE_INVALID``.

What was done is recorded per input and band in the manifest's ``parameters`` under
``x-mapsmith:physical_values``, together with whether the written values are physical or stored. This
module must never read a file or guess a scale a band does not declare; it imports numpy lazily.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext

RECORD = "x-mapsmith:physical_values"
PHYSICAL = "physical: stored x scale + offset"
STORED_CARRIED = "stored values copied unchanged; the output declares the same scale and offset"
NOT_READ = "not read: only the grid (cells, extent, CRS) was used"


def is_scaled(scale: float, offset: float) -> bool:
    return scale != 1.0 or offset != 0.0


def check_scaling(slot: str, given: str, scales: Sequence[float], offsets: Sequence[float]) -> None:
    """Refuse a band whose declared scale or offset cannot turn stored values into physical ones."""
    for band, (scale, offset) in enumerate(zip(scales, offsets, strict=True), start=1):
        if math.isfinite(scale) and math.isfinite(offset) and scale != 0.0:
            continue
        raise InputError(
            f"band {band} of {slot} ({given}) declares scale {scale!r} and offset {offset!r}; physical values "
            "(stored x scale + offset) cannot be computed from those, and the stored numbers are not what the "
            "band means",
            code="RASTER_SCALE_INVALID",
            evidence={"argument": slot, "path": given, "band": band, "scale": scale, "offset": offset},
            hint="describe_dataset shows each band's scale and offset; set the right ones on the file "
            "(gdal_edit.py -scale <s> -offset <o>, or -scale 1 -offset 0 when the stored numbers are the values) "
            "and run again",
        )


def start_record(ctx: RunContext, slot: str, scales: Sequence[float], offsets: Sequence[float]) -> dict | None:
    """The manifest entry of ``slot`` when any of its bands is scaled (None otherwise): every scaled band
    starts as not read; reading it changes that."""
    bands = {
        str(band): {"scale": scale, "offset": offset, "values": NOT_READ}
        for band, (scale, offset) in enumerate(zip(scales, offsets, strict=True), start=1)
        if is_scaled(scale, offset)
    }
    if not bands:
        return None
    entry: dict[str, Any] = {"bands": bands}
    ctx.parameters.setdefault(RECORD, {})[slot] = entry
    return entry


def mark_read(ctx: RunContext | None, record: dict | None, slot: str, band: int, how: str) -> None:
    """Say how band ``band`` of ``slot`` was read; the first physical read of a band is also a note."""
    if record is None or str(band) not in record["bands"]:
        return
    entry = record["bands"][str(band)]
    if entry["values"] == how:
        return
    if entry["values"] == PHYSICAL:
        return  # a band read physically anywhere in the run was computed on as physical
    entry["values"] = how
    if ctx is not None and how == PHYSICAL:
        ctx.notes.append(
            f"band {band} of {slot} declares scale {entry['scale']:g} and offset {entry['offset']:g}: computed on "
            "physical values (stored x scale + offset), not the stored numbers"
        )


def to_physical(data: np.ma.MaskedArray, scale: float, offset: float) -> np.ma.MaskedArray:
    """Physical values of stored ``data`` as float64, the same cells masked."""
    import numpy as np

    return np.ma.masked_array(np.ma.getdata(data).astype("float64") * scale + offset, mask=np.ma.getmaskarray(data))


def record_output(ctx: RunContext, scales: Sequence[float], offsets: Sequence[float]) -> None:
    """Say what the written raster's values are, when an input of this run declared a scale or offset."""
    record = ctx.parameters.get(RECORD)
    if record is None:
        return
    carried = [
        {"band": band, "scale": s, "offset": o}
        for band, (s, o) in enumerate(zip(scales, offsets, strict=False), start=1)
        if is_scaled(s, o)
    ]
    record["output"] = (
        {"values": "stored; physical = stored x scale + offset, as the output's bands declare", "bands": carried}
        if carried
        else {"values": "physical (no scale or offset declared on the output)"}
    )


def free_float_nodata(values: np.ndarray) -> float:
    """A nodata value for physical float values that no valid value equals: -9999, else NaN."""
    import numpy as np

    return -9999.0 if not bool((np.asarray(values) == -9999.0).any()) else float("nan")
