"""reclassify_raster: cell values mapped to classes by a table of ranges and values.

Split from ``raster_ops`` along its seams. The table's bounds are physical values (a band's scale and
offset applied: a reflectance band stored x 10000 is classed by reflectance). Overlapping rules are
refused, never resolved by order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError
from mapsmith_opensource.raster_shared import BAND_MATH_NODATA, _engine, _only_band

if TYPE_CHECKING:
    from mapsmith.runner import RunContext


# -- reclassify_raster -----------------------------------------------------------------------

_NUM = r"[-+]?(?:inf|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_RANGE_RULE = re.compile(rf"^\s*({_NUM})\s*(?:-|\.\.)\s*({_NUM})\s*:\s*({_NUM}|nodata)\s*$", re.IGNORECASE)
_VALUE_RULE = re.compile(rf"^\s*({_NUM})\s*:\s*({_NUM}|nodata)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Rule:
    text: str
    low: float
    high: float | None  # None: an exact value rule (low is the value)
    out: float | None  # None: the cells become nodata

    def overlaps(self, other: Rule) -> bool:
        a_low, a_high = self.low, self.high
        b_low, b_high = other.low, other.high
        if a_high is None and b_high is None:
            return a_low == b_low
        if a_high is None:
            return b_low <= a_low < b_high  # type: ignore[operator]
        if b_high is None:
            return a_low <= b_low < a_high
        return a_low < b_high and b_low < a_high


def _table_error(text: str, problem: str, **evidence: Any) -> ArgumentError:
    return ArgumentError(
        f"table: {problem}",
        code="RECLASS_TABLE_INVALID",
        evidence={"argument": "table", "table": text, **evidence},
        hint="write rules separated by commas: 'low-high:new' for the range low <= v < high (inf allowed), "
        "'value:new' for one exact value, 'new' may be 'nodata'; e.g. '0-500:1, 500-1000:2, 1000-inf:3'",
    )


def parse_table(text: str) -> list[Rule]:
    """Rules from "0-500:1, 500-1000:2, 1000-inf:3, -9999:nodata"; overlapping rules are refused."""
    rules: list[Rule] = []
    parts = [p for p in re.split(r"[,;]", text)]
    for part in parts:
        if not part.strip():
            raise _table_error(text, "an empty rule (two separators in a row, or a trailing one)")
        m = _RANGE_RULE.match(part)
        if m:
            low, high = float(m.group(1)), float(m.group(2))
            if not low < high:
                raise _table_error(
                    text, f"rule {part.strip()!r}: the range {low:g}..{high:g} is empty", rule=part.strip()
                )
            out = None if m.group(3).lower() == "nodata" else float(m.group(3))
            rules.append(Rule(part.strip(), low, high, out))
            continue
        m = _VALUE_RULE.match(part)
        if m:
            value = float(m.group(1))
            if math.isinf(value):
                raise _table_error(text, f"rule {part.strip()!r}: an exact value cannot be infinite", rule=part.strip())
            out = None if m.group(2).lower() == "nodata" else float(m.group(2))
            rules.append(Rule(part.strip(), value, None, out))
            continue
        raise _table_error(text, f"cannot read the rule {part.strip()!r}", rule=part.strip())
    for i, a in enumerate(rules):
        if a.out is not None and math.isinf(a.out):
            raise _table_error(text, f"rule {a.text!r}: the new value cannot be infinite", rule=a.text)
        for b in rules[i + 1 :]:
            if a.overlaps(b):
                raise _table_error(
                    text,
                    f"rules {a.text!r} and {b.text!r} overlap; which applies would be a guess",
                    rules=[a.text, b.text],
                )
    return rules


def validate_reclassify_raster(ctx: RunContext) -> None:
    parse_table(ctx.arguments["table"])


def _output_dtype(values: Sequence[float], kept: Any = None) -> tuple[str, float]:
    """The smallest dtype holding ``values`` (and the ``kept`` input values) exactly, with a nodata value
    none of them uses."""
    import numpy as np

    extremes = list(values) + ([float(kept.min()), float(kept.max())] if kept is not None and kept.size else [])
    low, high = min(extremes), max(extremes)

    def taken(v: float) -> bool:
        return v in values or (kept is not None and bool((kept == v).any()))

    integral = all(float(v).is_integer() for v in values) and (kept is None or bool(np.all(np.mod(kept, 1) == 0)))
    if integral:
        for name in ("uint8", "int8", "uint16", "int16", "uint32", "int32", "int64"):
            info = np.iinfo(name)
            if info.min <= low and high <= info.max:
                # the type's extremes are the only candidates: a nodata inside the data's span would hide it
                for nodata in (
                    (float(info.max), float(info.min)) if info.min == 0 else (float(info.min), float(info.max))
                ):
                    if not taken(nodata):
                        return name, nodata
    exact32 = all(float(np.float32(v)) == v for v in values) and (
        kept is None or bool(np.all(kept.astype("float32").astype("float64") == kept))
    )
    return ("float32" if exact32 else "float64"), (BAND_MATH_NODATA if not taken(BAND_MATH_NODATA) else float("nan"))


def reclassify_raster(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    rules = parse_table(ctx.arguments["table"])
    unmatched_rule = ctx.arguments["unmatched"]
    grid = open_grid(ctx)
    band = _only_band(ctx, grid)
    data = grid.read(band)
    valid = ~np.ma.getmaskarray(data)
    values = np.ma.getdata(data).astype("float64")
    stored = np.ma.getdata(data)
    # A float raster is compared in its own precision: "0.1:5" must match the float32 cells that hold 0.1.
    # An integer raster is compared in float64, so a bound of 2.5 is not truncated to 2.
    floating = np.issubdtype(stored.dtype, np.floating)
    compared = stored if floating else values

    def bound(v: float) -> Any:
        return stored.dtype.type(v) if floating else v

    out = np.zeros(values.shape, dtype="float64")
    out_mask = ~valid
    matched = np.zeros(values.shape, dtype=bool)
    counts = []
    for rule in rules:
        if rule.high is None:
            hit = valid & (compared == bound(rule.low))
        else:
            hit = valid & (compared >= bound(rule.low)) & (compared < bound(rule.high))
        counts.append({"rule": rule.text, "cells": int(hit.sum())})
        matched |= hit
        if rule.out is None:
            out_mask = out_mask | hit
        else:
            out[hit] = rule.out
    unmatched = valid & ~matched
    n_unmatched = int(unmatched.sum())
    written = [r.out for r in rules if r.out is not None]
    kept = None
    if unmatched_rule == "keep":
        kept = values[unmatched]
        out[unmatched] = kept
    else:
        out_mask = out_mask | unmatched
    dtype, nodata = _output_dtype(written or [0.0], kept)
    result = np.ma.masked_array(out, mask=out_mask)
    extremes = written + ([float(kept.min()), float(kept.max())] if kept is not None and kept.size else [])
    value_range = (min(extremes), max(extremes)) if extremes else None
    report = {
        "rules": counts,
        "unmatched_cells": n_unmatched,
        "unmatched_became": "nodata" if unmatched_rule == "nodata" else "kept their input value",
        "input_nodata_cells": int((~valid).sum()),
        "output_dtype": dtype,
        "output_nodata": None if math.isnan(nodata) else nodata,
    }
    ctx.parameters["x-mapsmith:reclass_counts"] = report
    ctx.parameters["band"] = band
    ctx.answer.update(report)
    ctx.notes.append(
        f"band {band} reclassified by {len(rules)} rule(s) (ranges include their low end and exclude their high "
        f"end); {n_unmatched} valid cells matched no rule and "
        + ("became nodata" if unmatched_rule == "nodata" else "kept their value")
        + f"; written as {dtype} with nodata {nodata}"
    )
    if n_unmatched and unmatched_rule == "nodata":
        ctx.warn(
            "RECLASS_UNMATCHED_CELLS",
            f"{n_unmatched} valid cells matched no rule of the table and were written as nodata",
            "extend the table (a range ending in inf closes the top) or pass unmatched='keep' if that is not meant",
        )
    write_raster(
        ctx,
        result,
        transform=grid.transform,
        crs=grid.crs,
        nodata=nodata,
        dtype=dtype,
        band_names=[grid.band_names[band - 1]],
        value_range=value_range,
    )
