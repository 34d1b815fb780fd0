"""apportion_by_area: areal interpolation of a source layer's quantity onto target zones.

Every area is geodesic on the layer's own ellipsoid. It must never spread an intensive quantity as if it
were extensive, nor hide what fell outside every target, nor leave unsaid what an intensive quantity's mean
is weighted by: overlap area by default (right for a density per unit of area), or weight_field spread
over each source's area (right for a rate per person, per household: the size it is a quotient of).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label
from mapsmith.errors import ArgumentError
from mapsmith_opensource.common import (
    align_to,
    read_input,
    require_valid,
    set_engine,
    write_output,
)
from mapsmith_opensource.join_ops.shared import (
    UNDEFINED_ON_INVALID,
    _aligned,
    _geodesic_areas,
    _numeric_field,
    _refuse_existing,
    _rows,
    refuse_self_weight,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext


# A target zone whose covered share of area is within this of 1 counts as fully covered.
COVERAGE_TOLERANCE = 1e-6


REGISTRATIONS = (Registration("apportion_by_area", "apportion_by_area", validate="validate_apportion"),)

AREA_WEIGHTING = (
    "each target received the mean of the sources' values weighted by overlap area, over the part of the "
    "target that sources with a value cover (source_coverage); the uncovered part does not enter the mean. "
    "Area is the right weight for a density per unit of area; for a rate or share of something else (per "
    "person, per household) pass weight_field, the field of source_path holding that size"
)


def validate_apportion(ctx: RunContext) -> None:
    """weight_field goes with quantity_type 'intensive' only, and is not field itself (before any file is read)."""
    weight = ctx.arguments.get("weight_field")
    if weight is None:
        return
    evidence = {
        "operation": "apportion_by_area",
        "argument": "weight_field",
        "quantity_type": ctx.arguments["quantity_type"],
    }
    if ctx.arguments["quantity_type"] != "intensive":
        raise ArgumentError(
            "weight_field applies only to quantity_type 'intensive': an extensive quantity is split by area share",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence=evidence,
            hint="remove weight_field, or set quantity_type='intensive' if field is a rate, share or density",
        )
    refuse_self_weight(weight, ctx.arguments["field"], evidence)


# -- apportion_by_area ------------------------------------------------------------------------


def apportion_by_area(ctx: RunContext) -> None:
    import numpy as np
    import shapely

    set_engine(ctx)
    name = ctx.arguments["field"]
    kind = ctx.arguments["quantity_type"]
    targets = read_input(ctx)
    sources = read_input(ctx, "source_path")
    values = _numeric_field(ctx, sources, name, "source_path").to_numpy(dtype=float, na_value=np.nan)
    weight = ctx.arguments.get("weight_field")
    weights = (
        _numeric_field(ctx, sources, weight, "source_path", argument="weight_field").to_numpy(
            dtype=float, na_value=np.nan
        )
        if weight is not None
        else None
    )
    value_column, coverage_column = f"{name}_apportioned", "source_coverage"
    _refuse_existing(ctx, targets, [value_column, coverage_column])
    require_valid(ctx, targets, "input_path", UNDEFINED_ON_INVALID)
    require_valid(ctx, sources, "source_path", UNDEFINED_ON_INVALID)
    sources = align_to(ctx, sources, targets.crs, "source_path")
    crs = targets.crs
    ellipsoid = crs.ellipsoid.name if crs.ellipsoid else "unknown"
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
            "reason": f"overlaps were cut in input_path's CRS ({crs_label(crs)}) and every area (targets, sources, "
            f"overlaps) measured geodesically on the {ellipsoid} ellipsoid of its datum, never as planar "
            "area" + _aligned(ctx, "source_path"),
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    source_area = _geodesic_areas(sources.geometry.values, crs)
    target_area = _geodesic_areas(targets.geometry.values, crs)
    usable = ~np.isnan(values) & (source_area > 0)
    null_weight = ~np.isnan(values) & np.isnan(weights) if weights is not None else np.zeros(len(values), dtype=bool)
    usable &= ~null_weight  # with weight_field, a source without a weight cannot enter a weighted mean
    tree = shapely.STRtree(sources.geometry.values)
    t_rows, s_rows = tree.query(targets.geometry.values, predicate="intersects")
    keep = usable[s_rows]
    t_rows, s_rows = t_rows[keep], s_rows[keep]
    overlap = _geodesic_areas(
        shapely.intersection(targets.geometry.values[t_rows], sources.geometry.values[s_rows]), crs
    )
    n = len(targets)
    covered = np.bincount(t_rows, weights=overlap, minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        coverage = np.where(target_area > 0, covered / target_area, np.nan)
        result: np.ndarray
        if kind == "extensive":
            share = values[s_rows] * overlap / source_area[s_rows]
            result = np.bincount(t_rows, weights=share, minlength=n)
        elif weights is None:
            result = np.bincount(t_rows, weights=values[s_rows] * overlap, minlength=n) / covered
        else:
            result = _weight_field_means(ctx, values, weights, source_area, t_rows, s_rows, overlap, n)
    result = np.where(covered > 0, result, np.nan)  # no source with a value overlaps: unknown, not zero
    out = targets.copy()
    out[value_column] = result
    out[coverage_column] = coverage
    full = coverage >= 1 - COVERAGE_TOLERANCE
    counts: dict[str, Any] = {
        "targets": n,
        "sources": len(sources),
        "sources_with_null_value": int(np.isnan(values).sum()),
        "sources_with_zero_area": int((~np.isnan(values) & (source_area <= 0)).sum()),
        **({"sources_with_null_weight": int(null_weight.sum())} if weights is not None else {}),
        "overlapping_pairs": int((overlap > 0).sum()),
        "targets_fully_covered": int(full.sum()),
        "targets_partly_covered": int(((covered > 0) & ~full).sum()),
        "targets_not_covered": int((covered <= 0).sum()),
    }
    ctx.notes.append(
        f"{kind} quantity: "
        + (
            "each source's value was spread evenly over its own ground area and each target received "
            "value x overlap area / source area, summed over sources"
            if kind == "extensive"
            else AREA_WEIGHTING
            if weights is None
            else f"each target received the mean of the sources' values weighted by {weight!r}, each source's "
            f"{weight!r} spread evenly over its ground area (weight in the target = {weight} x overlap area / "
            "source area)"
        )
        + f"; {counts['targets_not_covered']} targets overlap no source with a value and get an empty "
        f"{value_column}; {counts['sources_with_null_value']} sources with a null {name!r} and "
        f"{counts['sources_with_zero_area']} of zero area were left out"
    )
    if counts.get("sources_with_null_weight"):
        ctx.warn(
            "NULL_VALUES_EXCLUDED",
            f"{counts['sources_with_null_weight']} source zones have no value of weight_field {weight!r} and were "
            "left out of the weighted means; the target areas they cover count as uncovered",
            f"fill the missing {weight!r} values first if they should count",
        )
    if counts["sources_with_null_value"]:
        ctx.warn(
            "NULL_VALUES_EXCLUDED",
            f"{counts['sources_with_null_value']} source zones have no value of {name!r} and were left out; "
            "the target areas they cover count as uncovered",
            "fill the missing values first if they should count; source_coverage shows what was covered",
        )
    allocated_share = np.bincount(s_rows, weights=overlap, minlength=len(sources))
    with np.errstate(divide="ignore", invalid="ignore"):
        allocated_share = np.where(source_area > 0, allocated_share / source_area, 0.0)
    if kind == "extensive":
        total = float(values[usable].sum())
        allocated = float(np.nansum(result))
        not_allocated = float((values[usable] * (1 - np.minimum(allocated_share[usable], 1.0))).sum())
        over = int((allocated_share[usable] > 1 + COVERAGE_TOLERANCE).sum())
        counts.update(
            {"quantity_total": total, "quantity_allocated": allocated, "quantity_not_allocated": not_allocated}
        )
        ctx.check(
            "x-mapsmith:quantity_conserved",
            over == 0 and abs(allocated + not_allocated - total) <= 1e-9 * max(abs(total), 1.0),
            f"sources with a value hold {total:.6g}; {allocated:.6g} went to targets and {not_allocated:.6g} lies "
            f"outside every target; {over} sources gave out more than their total (overlapping targets)",
            critical=False,
        )
        if over:
            ctx.warn(
                "TARGETS_OVERLAP",
                f"target zones overlap each other inside {over} source zones, so those sources' quantity is "
                "counted in more than one target (each target's own value is still right)",
                "do not add the target values up; dissolve or clip the targets so they do not overlap first",
            )
    else:
        low, high = (float(values[usable].min()), float(values[usable].max())) if usable.any() else (0.0, 0.0)
        got = result[~np.isnan(result)]
        span = max(abs(low), abs(high), 1.0) * 1e-9
        ctx.check(
            "values_in_expected_range",
            bool(np.all((got >= low - span) & (got <= high + span))),
            f"{len(got)} {'area' if weights is None else weight}-weighted means between "
            f"{got.min() if len(got) else 0:.6g} and "
            f"{got.max() if len(got) else 0:.6g}; a weighted mean must lie within the source values "
            f"{low:.6g} to {high:.6g}",
        )
        doubled = int((coverage > 1 + COVERAGE_TOLERANCE).sum())
        counts["targets_covered_more_than_once"] = doubled
        if doubled:
            ctx.warn(
                "SOURCES_OVERLAP",
                f"source zones overlap each other inside {doubled} targets, so the doubly covered area weighs "
                "twice in their means (source_coverage above 1)",
                "make the source zones a partition (no overlaps) first",
            )
    ctx.parameters["x-mapsmith:join_counts"] = counts
    rows, window = _rows(out, ctx.arguments)
    ctx.answer = {
        **counts,
        "field": name,
        "quantity_type": kind,
        **({"weighted_by": "overlap area" if weights is None else weight} if kind == "intensive" else {}),
        "rows": rows,
        "page": window,
    }
    write_output(ctx, out)


def _weight_field_means(
    ctx: RunContext,
    values: np.ndarray,
    weights: np.ndarray,
    source_area: np.ndarray,
    t_rows: np.ndarray,
    s_rows: np.ndarray,
    overlap: np.ndarray,
    n: int,
) -> np.ndarray:
    """Each target's mean of the sources' values weighted by weight_field, each source's weight spread
    evenly over its area (aggregation.weighted_mean_by_group over the overlapping pairs); NaN: undefined."""
    import numpy as np

    from mapsmith_opensource import aggregation

    name, weight = ctx.arguments["field"], ctx.arguments["weight_field"]
    pair_weights = weights[s_rows] * overlap / source_area[s_rows]
    found = aggregation.weighted_mean_by_group(
        values[s_rows], pair_weights, t_rows, n, value_field=name, weight_field=weight
    )
    zero = [i for i, a in enumerate(found) if a.undefined == aggregation.ZERO_TOTAL]
    if zero:
        ctx.warn(
            "AGGREGATE_UNDEFINED",
            f"{name}_apportioned is empty in {len(zero)} targets (first rows: {zero[:10]}) because "
            f"{aggregation.ZERO_TOTAL}: the {weight!r} of the sources they overlap sums to 0 there",
            f"inspect those sources' {weight!r} values; drop weight_field to weight them by overlap area instead",
        )
    return np.array([np.nan if a.value is None else a.value for a in found], dtype=float)
