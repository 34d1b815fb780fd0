"""count_in_polygons and summarize_points_in_polygons: points aggregated per polygon.

The pair finder may be another engine's (SedonaDB passes its own); reading, checks, counts, statistics
and writing stay here. It must never count a point twice without saying so, nor drop a null silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError
from mapsmith_opensource.common import (
    align_to,
    read_input,
    record_input_validity,
    require_valid,
    set_engine,
    write_output,
)
from mapsmith_opensource.join_ops.shared import (
    UNDEFINED_ON_INVALID,
    _numeric_field,
    _record_topological,
    _refuse_existing,
    _rows,
    refuse_self_weight,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

    # (polygon geometries, point geometries) -> (polygon rows, point rows) of the intersecting pairs
    PairFinder = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


STATISTICS = ("mean", "sum", "min", "max", "count")
# The mean of the field weighted by weight_field, sum(value*weight)/sum(weight) (aggregation.py): the
# mean a rate, share or density needs over points of unequal size.
WEIGHTED_MEAN = "weighted_mean"
ALL_STATISTICS = (*STATISTICS, WEIGHTED_MEAN)
BOUNDARY_RULE = (
    "intersects: a point on a polygon's boundary is counted in that polygon, so a point on a boundary "
    "shared by two polygons is counted in both, and a point inside two polygons that overlap is counted in "
    "each (the answer counts both kinds: points_on_shared_boundaries, points_in_overlapping_polygons)"
)


# Above GeoPandas' (0) and below SedonaDB's (40): DuckDB takes these operations from its own threshold
# (points_in_polygons_duckdb.DUCKDB_POINTS_MIN_ROWS, measured) where SedonaDB does not (not installed, below its
# threshold, or passed over), GeoPandas below.
DUCKDB_POINTS_PREFERENCE = 10
REGISTRATIONS = (
    Registration("count_in_polygons", "count_in_polygons"),
    Registration("summarize_points_in_polygons", "summarize_points_in_polygons", validate="validate_summarize_points"),
    # The DuckDB engine (points_in_polygons_duckdb) is registered here so that OPERATION_MODULES need not
    # change; its module is imported only when it runs or is considered.
    Registration(
        "count_in_polygons",
        "count_in_polygons_duckdb",
        engine="duckdb",
        preference=DUCKDB_POINTS_PREFERENCE,
        eligible="points_in_polygons_duckdb_eligible",
    ),
    Registration(
        "summarize_points_in_polygons",
        "summarize_points_in_polygons_duckdb",
        engine="duckdb",
        preference=DUCKDB_POINTS_PREFERENCE,
        eligible="points_in_polygons_duckdb_eligible",
        validate="validate_summarize_points",
    ),
)


def points_in_polygons_duckdb_eligible(ctx: RunContext) -> str | None:
    from mapsmith_opensource.join_ops import points_in_polygons_duckdb

    return points_in_polygons_duckdb.eligible(ctx)


def count_in_polygons_duckdb(ctx: RunContext) -> None:
    from mapsmith_opensource.join_ops import points_in_polygons_duckdb

    points_in_polygons_duckdb.count_in_polygons(ctx)


def summarize_points_in_polygons_duckdb(ctx: RunContext) -> None:
    from mapsmith_opensource.join_ops import points_in_polygons_duckdb

    points_in_polygons_duckdb.summarize_points_in_polygons(ctx)


# -- count_in_polygons / summarize_points_in_polygons -----------------------------------------


@dataclass
class _PointsInPolygons:
    polygons: gpd.GeoDataFrame
    points: gpd.GeoDataFrame  # in the polygons' CRS
    polygon_rows: np.ndarray  # one entry per (polygon, point) pair
    point_rows: np.ndarray
    counts: dict[str, int]


def intersecting_pairs(polygons: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(polygon row, point row) for every point that intersects a polygon, found with a GEOS STRtree.

    The GeoPandas engine's pair finder; another engine (sedonadb_ops) passes its own, and everything
    before and after the pairs (reading, checks, counts, statistics, writing) stays this module's.
    """
    import shapely

    tree = shapely.STRtree(points)
    return tree.query(polygons, predicate="intersects")


def _points_in_polygons(
    ctx: RunContext,
    new_fields: list[str],
    value_field: str | None = None,
    find_pairs: PairFinder = intersecting_pairs,
    weight_field: str | None = None,
) -> _PointsInPolygons:
    import numpy as np
    import shapely

    polygons = read_input(ctx)
    points = read_input(ctx, "points_path")
    if value_field is not None:
        _numeric_field(ctx, points, value_field, "points_path")
    if weight_field is not None:
        _numeric_field(ctx, points, weight_field, "points_path", argument="weight_field")
    _refuse_existing(ctx, polygons, new_fields)
    require_valid(ctx, polygons, "input_path", UNDEFINED_ON_INVALID)
    points = align_to(ctx, points, polygons.crs, "points_path")
    _record_topological(ctx, polygons.crs, "points_path", "points were tested against polygons")
    poly_rows, point_rows = find_pairs(polygons.geometry.values, points.geometry.values)
    times = np.bincount(point_rows, minlength=len(points))
    # Whether each pair's point lies in the polygon's interior, asked only of points in several polygons.
    shared = times[point_rows] > 1
    inside = np.zeros(len(point_rows), dtype=bool)
    inside[shared] = shapely.contains(
        polygons.geometry.values[poly_rows[shared]], points.geometry.values[point_rows[shared]]
    )
    no_geometry = int((shapely.is_missing(points.geometry.values) | shapely.is_empty(points.geometry.values)).sum())
    counts = pair_counts(len(polygons), len(points), no_geometry, poly_rows, point_rows, inside)
    record_pair_counts(ctx, counts)
    return _PointsInPolygons(polygons, points, poly_rows, point_rows, counts)


def pair_counts(
    polygons: int, points: int, no_geometry: int, poly_rows: np.ndarray, point_ids: np.ndarray, inside: np.ndarray
) -> dict[str, int]:
    """What the (polygon, point) pairs say, as every engine reports it. ``inside``: whether each pair's
    point lies in the polygon's interior (needed only where the point is in several polygons).

    A point counted in several polygons lies inside polygons that overlap when it is in the interior of at
    least one of them: a neighbourhood of the point lies in that polygon, and every other polygon the point
    is in reaches into that neighbourhood, so their interiors meet. Otherwise it lies on the boundary of
    each of its polygons: a boundary they share."""
    import numpy as np

    times = np.bincount(point_ids, minlength=points)
    interior = np.bincount(point_ids, weights=inside.astype(float), minlength=points)
    several = times > 1
    return {
        "polygons": polygons,
        "points": points,
        "points_counted": int((times > 0).sum()),
        "points_in_no_polygon": int((times == 0).sum()),
        "points_without_geometry": no_geometry,
        "points_in_several_polygons": int(several.sum()),
        "points_in_overlapping_polygons": int((several & (interior > 0)).sum()),
        "points_on_shared_boundaries": int((several & (interior == 0)).sum()),
        "polygons_with_no_points": int((np.bincount(poly_rows, minlength=polygons) == 0).sum()),
    }


def record_aggregated(ctx: RunContext, polygons_crs: Any, found: Any, path: Path, geometry: str, note: str) -> None:
    """What an engine that counted in SQL (DuckDB, SedonaDB) records from its one aggregate query: the points'
    validity (the first invalid ones read again by streaming, only when there are some), the topological
    predicate, the boundary rule and pair counts as every engine records them, and where the work ran."""
    from mapsmith_opensource.join_ops.points_in_polygons_sql import first_invalid_points

    facts = found.facts
    record_input_validity(
        ctx,
        "points_path",
        rows=facts.rows,
        invalid_count=facts.invalid,
        missing_count=facts.missing,
        invalid=first_invalid_points(path, geometry) if facts.invalid else [],
    )
    _record_topological(ctx, polygons_crs, "points_path", "points were tested against polygons")
    record_pair_counts(ctx, found.counts)
    ctx.notes.append(note)


def record_pair_counts(ctx: RunContext, counts: dict[str, int]) -> None:
    """The boundary rule and the note that says where the points fell, as every engine records them."""
    ctx.parameters["x-mapsmith:boundary_rule"] = BOUNDARY_RULE
    several = ""
    if counts["points_in_several_polygons"]:
        kinds = [
            f"{n} lie inside polygons that overlap each other"
            if key == "points_in_overlapping_polygons"
            else f"{n} lie on a boundary several polygons share"
            for key in ("points_in_overlapping_polygons", "points_on_shared_boundaries")
            if (n := counts[key])
        ]
        several = (
            f"; {counts['points_in_several_polygons']} are counted in several polygons, once in each: "
            + " and ".join(kinds)
        )
    ctx.notes.append(
        f"{counts['points_counted']} of {counts['points']} points lie in at least one polygon; "
        f"{counts['points_in_no_polygon']} lie in none (not counted anywhere; {counts['points_without_geometry']} "
        f"of them have no geometry)" + several
    )


def warn_total_counts_overlaps(ctx: RunContext, total: int, counts: dict[str, int]) -> None:
    """TOTAL_COUNTS_OVERLAPS when the polygons' counts add up to more than the distinct points they hold."""
    if total > counts["points_counted"]:
        ctx.warn(
            "TOTAL_COUNTS_OVERLAPS",
            f"the polygons' point counts add up to {total}, but they hold {counts['points_counted']} distinct "
            f"points: {counts['points_in_overlapping_polygons']} points lie inside polygons that overlap each "
            f"other and {counts['points_on_shared_boundaries']} on a boundary several polygons share, and each "
            "is counted in every one of its polygons",
            "use distinct_point_count for the points the polygons hold together; each polygon's own "
            "point_count stays right; dissolve_layer merges overlapping polygons if you need them as one",
        )


def finish_count(ctx: RunContext, polygons: gpd.GeoDataFrame, point_count: np.ndarray, counts: dict[str, int]) -> None:
    """count_in_polygons from each polygon's count of points, whichever engine counted them (from pairs:
    ``np.bincount(polygon_rows, minlength=len(polygons))``; in SQL: points_in_polygons_sql): the column,
    the total with the distinct points beside it (and a warning where the total counts a point twice)."""
    out = polygons.copy()
    out["point_count"] = point_count.astype("int64")
    total = int(out["point_count"].sum())
    ctx.parameters["x-mapsmith:join_counts"] = counts
    warn_total_counts_overlaps(ctx, total, counts)
    rows, window = _rows(out, ctx.arguments)
    ctx.answer = {
        **counts,
        "total_point_count": total,
        "distinct_point_count": counts["points_counted"],
        "boundary_rule": BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }
    write_output(ctx, out)


def count_in_polygons(ctx: RunContext, find_pairs: PairFinder = intersecting_pairs) -> None:

    if find_pairs is intersecting_pairs:
        set_engine(ctx)
    import numpy as np

    found = _points_in_polygons(ctx, ["point_count"], find_pairs=find_pairs)
    finish_count(ctx, found.polygons, np.bincount(found.polygon_rows, minlength=len(found.polygons)), found.counts)


def _parse_statistics(text: str) -> list[str]:
    wanted = [s.strip().lower() for s in text.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in ALL_STATISTICS]
    if unknown or not wanted:
        raise ArgumentError(
            f"summarize_points_in_polygons: statistics must list some of {list(ALL_STATISTICS)}, got {text!r}",
            code="ARGUMENT_NOT_IN_CHOICES",
            evidence={"argument": "statistics", "value": text, "unknown": unknown, "accepted": list(ALL_STATISTICS)},
            hint=f"pass a comma-separated list such as 'mean,sum' drawn from {', '.join(ALL_STATISTICS)}",
        )
    return list(dict.fromkeys(wanted))  # in the order given, once each


def validate_summarize_points(ctx: RunContext) -> None:
    """The statistics list names known statistics, and weight_field goes with weighted_mean, and only with
    it (before any file is read)."""
    statistics = _parse_statistics(ctx.arguments["statistics"])
    weight = ctx.arguments.get("weight_field")
    evidence = {"operation": "summarize_points_in_polygons", "argument": "weight_field", "statistics": statistics}
    if WEIGHTED_MEAN in statistics and weight is None:
        raise ArgumentError(
            "statistics asks for weighted_mean, which needs 'weight_field'",
            code="MISSING_ARGUMENT",
            evidence=evidence,
            hint="add weight_field: the numeric field of points_path each value is weighted by (e.g. the population "
            "a rate is per)",
        )
    if weight is not None and WEIGHTED_MEAN not in statistics:
        raise ArgumentError(
            "weight_field applies only to the statistic weighted_mean, which statistics does not list",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence=evidence,
            hint="add weighted_mean to statistics (e.g. 'weighted_mean,count'), or remove weight_field",
        )
    refuse_self_weight(weight, ctx.arguments["field"], evidence)


def validate_summarize_points_unweighted(ctx: RunContext) -> None:
    """validate_summarize_points for engines that compute only the plain statistics (join_ops exports it as
    validate_summarize_points to them): weighted_mean is refused there rather than left out."""
    validate_summarize_points(ctx)
    if WEIGHTED_MEAN in _parse_statistics(ctx.arguments["statistics"]):
        raise ArgumentError(
            "weighted_mean is not computed by this stack's summarize_points_in_polygons engine",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={"operation": "summarize_points_in_polygons", "argument": "statistics", "value": WEIGHTED_MEAN},
            hint="run it on the opensource stack (MAPSMITH_STACK=opensource), where weighted_mean is computed, or "
            "leave weighted_mean out",
        )


def summarize_points_in_polygons(ctx: RunContext, find_pairs: PairFinder = intersecting_pairs) -> None:
    import numpy as np

    if find_pairs is intersecting_pairs:
        set_engine(ctx)
    name, weight = ctx.arguments["field"], ctx.arguments.get("weight_field")
    statistics = _parse_statistics(ctx.arguments["statistics"])
    ctx.parameters["statistics"] = ",".join(statistics)
    columns = {s: f"{name}_{s}" for s in statistics}
    null_column = f"{name}_null_count"
    found = _points_in_polygons(
        ctx, [*columns.values(), null_column], value_field=name, find_pairs=find_pairs, weight_field=weight
    )
    values = found.points[name].to_numpy(dtype=float, na_value=np.nan)[found.point_rows]
    weights = found.points[weight].to_numpy(dtype=float, na_value=np.nan)[found.point_rows] if weight else None
    null_points = int(found.points[name].isna().sum())
    finish_summary(ctx, found.polygons, found.polygon_rows, values, null_points, found.counts, weights)


def _weighted_means(
    ctx: RunContext, polygon_rows: np.ndarray, values: np.ndarray, weights: np.ndarray, n: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """Each polygon's mean of the field weighted by weight_field over its (polygon, point) pairs where both
    are non-null (aggregation.weighted_mean_by_group): the column's values (NaN: undefined) and the answer's
    record of them (the note and the manifest's notes say the same)."""
    import numpy as np

    from mapsmith_opensource import aggregation

    name, weight = ctx.arguments["field"], ctx.arguments["weight_field"]
    found = aggregation.weighted_mean_by_group(values, weights, polygon_rows, n, value_field=name, weight_field=weight)
    column = np.array([np.nan if a.value is None else a.value for a in found], dtype=float)
    zero = [i for i, a in enumerate(found) if a.undefined == aggregation.ZERO_TOTAL]
    skipped = sum(a.rows_skipped for a in found)
    record = {
        "field": name,
        "weight_field": weight,
        "rule": f"sum({name} x {weight}) / sum({weight}) over each polygon's points where both are non-null",
        "pairs_skipped_for_a_null": skipped,
        "polygons_with_zero_total_weight": len(zero),
    }
    ctx.notes.append(
        f"{name}_weighted_mean is sum({name} x {weight}) / sum({weight}) over each polygon's points where both "
        f"have a value ({skipped} (polygon, point) pairs left out for a null); empty where the polygon has no such "
        f"point or its weights sum to 0 ({len(zero)} polygons)"
    )
    if zero:
        ctx.warn(
            "AGGREGATE_UNDEFINED",
            f"{name}_weighted_mean is empty in {len(zero)} polygons (first rows: {zero[:10]}) because "
            f"{aggregation.ZERO_TOTAL}: the mean of {name} weighted by {weight} is undefined there",
            f"inspect those polygons' points' {weight} values; if every point should count alike there, use mean",
        )
    return column, record


def _warn_plain_mean(ctx: RunContext, statistics: list[str]) -> None:
    """UNWEIGHTED_MEAN_OF_RATE when a plain mean is taken of a field whose name says rate, percent, share or
    density, naming the weighted alternative and the points' numeric fields that could be the weight."""
    from mapsmith_opensource import aggregation

    name = ctx.arguments["field"]
    if "mean" not in statistics or WEIGHTED_MEAN in statistics:
        return
    reason = aggregation.rate_like_reason(name)
    if reason is None:
        return
    candidates = [f for f in _numeric_fields(ctx) if f != name]
    weight = candidates[0] if len(candidates) == 1 else "<weight field>"
    ctx.warn(
        "UNWEIGHTED_MEAN_OF_RATE",
        f"the plain mean of {name!r} treats every point alike, but {name!r} looks like a rate, share or density "
        f"({reason}): over points of unequal size the mean of quotients is not the quotient of the whole",
        f"weight it by the size it is a quotient of: statistics={','.join([*statistics, WEIGHTED_MEAN])!r} with "
        f"weight_field={weight!r}"
        + (f" (numeric fields of points_path: {', '.join(candidates)})" if candidates else "")
        + "; keep the plain mean only if every point should count alike",
    )


def _numeric_fields(ctx: RunContext) -> list[str]:
    """points_path's numeric fields as its header declares them, in file order."""
    from mapsmith_opensource.layer_common import field_families

    return [f for f, family in field_families(ctx, "points_path").items() if family in ("integer", "real")]


def finish_summary(
    ctx: RunContext,
    polygons: gpd.GeoDataFrame,
    polygon_rows: np.ndarray,
    values: np.ndarray,
    null_points: int,
    counts: dict[str, int],
    weights: np.ndarray | None = None,
) -> None:
    """summarize_points_in_polygons from its (polygon row, value[, weight]) pairs, whichever engine found them:
    the per-polygon statistics (nulls left out and counted), then write_summary."""
    import numpy as np
    import pandas as pd

    statistics = _parse_statistics(ctx.arguments["statistics"])
    present = ~np.isnan(values)
    n = len(polygons)
    grouped = (
        pd.DataFrame({"polygon": polygon_rows[present], "value": values[present]})
        .groupby("polygon")["value"]
        .agg(list(STATISTICS))
        .reindex(range(n))
    )
    per_polygon = {s: grouped[s].to_numpy(dtype=float) for s in STATISTICS}
    weighted = None
    if WEIGHTED_MEAN in statistics:
        assert weights is not None  # validate_summarize_points: weighted_mean comes with weight_field
        weighted = _weighted_means(ctx, polygon_rows, values, weights, n)
    nulls = np.bincount(polygon_rows[~present], minlength=n).astype("int64")
    write_summary(ctx, polygons, per_polygon, nulls, null_points, counts, weighted)


def write_summary(
    ctx: RunContext,
    polygons: gpd.GeoDataFrame,
    per_polygon: dict[str, np.ndarray],
    null_count: np.ndarray,
    null_points: int,
    counts: dict[str, int],
    weighted: tuple[np.ndarray, dict[str, Any]] | None = None,
) -> None:
    """summarize_points_in_polygons from per-polygon statistics over non-null values (NaN where a polygon
    has none; ``null_count``: its pairs without a value), whichever engine aggregated them: the columns,
    the records, the answer, the output."""
    name = ctx.arguments["field"]
    statistics = _parse_statistics(ctx.arguments["statistics"])
    columns = {s: f"{name}_{s}" for s in statistics}
    null_column = f"{name}_null_count"
    out = polygons.copy()
    _warn_plain_mean(ctx, statistics)
    for statistic, column in columns.items():
        if statistic == WEIGHTED_MEAN:
            assert weighted is not None
            out[column] = weighted[0]
            continue
        series = per_polygon[statistic].copy()
        if statistic in ("sum", "count"):
            series[series != series] = 0  # over no values: the empty sum and count
        out[column] = series.astype("int64" if statistic == "count" else float)
    out[null_column] = null_count.astype("int64")
    counted_nulls = int(null_count.sum())
    counts = {**counts, "points_with_null_value": null_points, "null_values_in_polygons": counted_nulls}
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.notes.append(
        f"null values of {name!r} are left out of every statistic ({', '.join(statistics)}) and counted per "
        f"polygon in {null_column}; {null_points} points have no value; over no values sum and count are 0 "
        "and mean, min and max are empty"
        + ("; weighted_mean also leaves out points whose weight is null" if WEIGHTED_MEAN in statistics else "")
    )
    if counted_nulls:
        ctx.warn(
            "NULL_VALUES_EXCLUDED",
            f"{counted_nulls} (polygon, point) pairs had no value of {name!r} and were left out of the statistics",
            f"see {null_column} per polygon; fill the missing values first if they should count",
        )
    rows, window = _rows(out, ctx.arguments)
    ctx.answer = {
        **counts,
        "field": name,
        "statistics": statistics,
        **({"weighted_mean": weighted[1]} if weighted is not None else {}),
        "boundary_rule": BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }
    write_output(ctx, out)
