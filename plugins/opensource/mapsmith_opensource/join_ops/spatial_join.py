"""spatial_join on the GeoPandas engine, and what every spatial_join engine shares: the argument rule,
the preparation (read, check, align, go metric for within_distance), the assembly of the pairs in
(input row, join row) order, the counts and the feature-count check.

Other engines (DuckDB in spatial_join_duckdb, SedonaDB, Spark) find the pairs their own way and hand
them to this module's assembly or record, so the rows and the record are the same whichever ran. It must
never evaluate a predicate on invalid geometries, nor drop an unmatched feature without counting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mapsmith.errors import ArgumentError
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    align_to,
    read_input,
    require_valid,
    set_engine,
    write_output,
)
from mapsmith_opensource.join_ops.ground import _Ground, _ground
from mapsmith_opensource.join_ops.shared import (
    JOIN_SUFFIX,
    UNDEFINED_ON_INVALID,
    _attach,
    _attributes,
    _record_topological,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext


GEOPANDAS_PREFERENCE = 20

REGISTRATIONS = (
    Registration(
        "spatial_join",
        "spatial_join_geopandas",
        engine="geopandas",
        preference=GEOPANDAS_PREFERENCE,
        validate="validate_spatial_join",
    ),
)
SPATIAL_PREDICATES = {
    "intersects": "ST_Intersects",
    "within": "ST_Within",
    "contains": "ST_Contains",
    "touches": "ST_Touches",
    "crosses": "ST_Crosses",
    "overlaps": "ST_Overlaps",
    "dwithin": "ST_DWithin",
}


# -- spatial_join -----------------------------------------------------------------------------


@dataclass
class _SpatialJoin:
    left: gpd.GeoDataFrame  # input_path as read
    join: gpd.GeoDataFrame  # join_path in input_path's CRS
    left_geoms: np.ndarray  # the geometries the predicate is evaluated on
    join_geoms: np.ndarray
    predicate: str  # the engine's name: intersects ... or dwithin
    search_units: float | None  # the dwithin distance in the geometries' units
    ground: _Ground | None


def validate_spatial_join(ctx: RunContext) -> None:
    """distance_meters goes with predicate within_distance, and only with it (before any file is read)."""
    predicate = ctx.arguments["predicate"]
    distance = ctx.arguments.get("distance_meters")
    if predicate == "within_distance" and distance is None:
        raise ArgumentError(
            "spatial_join with predicate 'within_distance' needs 'distance_meters'",
            code="MISSING_ARGUMENT",
            evidence={"operation": "spatial_join", "argument": "distance_meters", "predicate": predicate},
            hint="add distance_meters (the ground distance in metres within which features match)",
        )
    if predicate != "within_distance" and distance is not None:
        raise ArgumentError(
            f"distance_meters applies only to predicate 'within_distance', not {predicate!r}",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={"operation": "spatial_join", "argument": "distance_meters", "predicate": predicate},
            hint="remove distance_meters, or set predicate='within_distance' to match features within that distance",
        )


def _prepare_spatial_join(ctx: RunContext) -> _SpatialJoin:
    predicate = ctx.arguments["predicate"]
    distance = ctx.arguments.get("distance_meters")
    left = read_input(ctx)
    join = read_input(ctx, "join_path")
    require_valid(ctx, left, "input_path", UNDEFINED_ON_INVALID)
    require_valid(ctx, join, "join_path", UNDEFINED_ON_INVALID)
    join = align_to(ctx, join, left.crs, "join_path")
    if predicate != "within_distance":
        _record_topological(ctx, left.crs, "join_path", f"the predicate '{predicate}' was evaluated")
        return _SpatialJoin(left, join, left.geometry.values, join.geometry.values, predicate, None, None)
    ground = _ground(ctx, left, join, "measured for within_distance")
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = ground.metric.units(distance)
    return _SpatialJoin(
        left,
        join,
        ground.metric.frame.geometry.values,
        ground.join.geometry.values,
        "dwithin",
        ground.search_units(distance),
        ground,
    )


def spatial_join_geopandas(ctx: RunContext) -> None:
    import geopandas as gpd
    import numpy as np

    set_engine(ctx)
    prep = _prepare_spatial_join(ctx)
    if len(prep.left_geoms) == 0 or len(prep.join_geoms) == 0:
        _finish_spatial_join(ctx, prep, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        return
    crs = prep.ground.metric.crs if prep.ground else prep.left.crs
    left = gpd.GeoDataFrame(geometry=gpd.GeoSeries(prep.left_geoms, crs=crs))
    right = gpd.GeoDataFrame(geometry=gpd.GeoSeries(prep.join_geoms, crs=crs))
    kwargs = {"distance": prep.search_units} if prep.predicate == "dwithin" else {}
    # Geometries only: the rows are assembled once, in _finish_spatial_join.
    pairs = gpd.sjoin(left, right, how="inner", predicate=prep.predicate, **kwargs)
    _finish_spatial_join(ctx, prep, pairs.index.to_numpy(), pairs["index_right"].to_numpy())


def _finish_spatial_join(ctx: RunContext, prep: _SpatialJoin, left: np.ndarray, right: np.ndarray) -> None:
    """The GeoPandas engine's assembly: pairs in (input row, join row) order, counted, written."""
    import numpy as np

    left, right = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
    beyond = None
    if prep.ground is not None and prep.ground.geodesic:
        within = prep.ground.metres(left, right) <= ctx.arguments["distance_meters"]
        beyond = int((~within).sum())
        left, right = left[within], right[within]
    if len(left) > 1:
        step_left, step_right = np.diff(left), np.diff(right)
        if not np.all((step_left > 0) | ((step_left == 0) & (step_right > 0))):
            order = np.lexsort((right, left))
            left, right = left[order], right[order]
    n_left, n_join = len(prep.left), len(prep.join)
    per_input = np.bincount(left, minlength=n_left)
    n_matched = int((per_input > 0).sum())
    join_used = np.zeros(n_join, dtype=bool)
    join_used[right] = True
    if ctx.arguments["how"] == "left" and n_matched < n_left:
        # Each unmatched input feature gets one row with no join feature, at its input position.
        rows = np.maximum(per_input, 1)
        starts = np.cumsum(rows) - rows
        first_pair = np.cumsum(per_input) - per_input
        slots = starts[left] + (np.arange(len(left)) - first_pair[left])
        right_all = np.full(int(rows.sum()), -1, dtype=np.int64)
        right_all[slots] = right
        left, right = np.repeat(np.arange(n_left), rows), right_all
    out, renamed = _attach(prep.left, _attributes(prep.join), left, right, JOIN_SUFFIX)
    tally = _JoinTally(n_left, n_join, int((right >= 0).sum()), n_matched, int(join_used.sum()), beyond)
    _record_spatial_join(ctx, tally, renamed)
    write_output(ctx, out)
    _check_written(ctx, tally, io.inspect(ctx.temp_output, None).feature_count)


@dataclass(frozen=True)
class _JoinTally:
    """What a spatial join matched, as every engine reports it."""

    input_features: int
    join_features: int
    pairs: int
    input_matched: int
    join_matched: int
    beyond: int | None = None  # geodesic within_distance: candidate pairs the ellipsoid ruled out

    def output_features(self, how: str) -> int:
        return self.pairs + (self.input_features - self.input_matched if how == "left" else 0)


def _record_spatial_join(ctx: RunContext, tally: _JoinTally, renamed: dict[str, str]) -> None:
    how = ctx.arguments["how"]
    unmatched = tally.input_features - tally.input_matched
    counts = {
        "input_features": tally.input_features,
        "join_features": tally.join_features,
        "matched_pairs": tally.pairs,
        "input_features_matched": tally.input_matched,
        "input_features_unmatched": unmatched,
        "input_features_dropped": unmatched if how == "inner" else 0,
        "join_features_matched": tally.join_matched,
        "join_features_unmatched": tally.join_features - tally.join_matched,
        "output_features": tally.output_features(how),
    }
    if tally.beyond is not None:
        counts["candidate_pairs_beyond_distance"] = tally.beyond
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    kept = "kept with empty join fields" if how == "left" else "left out (how='inner')"
    ctx.notes.append(
        f"{tally.input_features} input features and {tally.join_features} join features gave {tally.pairs} "
        f"matching pairs; {unmatched} input features matched nothing and were {kept}; "
        f"{counts['join_features_unmatched']} join features matched nothing"
        + (f"; join fields renamed for clashing names: {renamed}" if renamed else "")
    )
    ctx.answer = {"predicate": ctx.arguments["predicate"], "how": how, **counts, "renamed_fields": renamed}


def _check_written(ctx: RunContext, tally: _JoinTally, written: int | None) -> None:
    how = ctx.arguments["how"]
    expected = tally.output_features(how)
    unmatched = tally.input_features - tally.input_matched
    ctx.check(
        "feature_count_exact",
        written == expected,
        f"expected {expected} features ({tally.pairs} matched pairs"
        + (f" + {unmatched} unmatched input features kept" if how == "left" else "")
        + f"), wrote {written}",
    )
