"""nearest_join: each input feature gets its nearest join feature and the ground distance to it.

Ties within TIE_TOLERANCE_METRES are broken by the rule recorded in the manifest (TIE_RULE); the planar
search may be another engine's (SedonaDB passes its own), the tie rule and the measures stay here. The GeoPandas
engine offers a run between two GeoParquet files to ``nearest_columns`` first, which searches, breaks ties and
records with this module's functions on Arrow columns instead of DataFrames. It must never measure a distance in
degrees nor break a tie without recording the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith_opensource.common import (
    align_to,
    read_input,
    set_engine,
    write_output,
)
from mapsmith_opensource.derived import measurable
from mapsmith_opensource.join_ops.ground import GEODESIC_CANDIDATE_SLACK, _Ground, _ground
from mapsmith_opensource.join_ops.shared import JOIN_SUFFIX, _attach, _attributes, _refuse_existing
from mapsmith_opensource.measure_lengths import warn_measured_in_2d
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from mapsmith.runner import RunContext

    # (input geometries, join geometries, limit in their units or None) -> (input rows, join rows, distances)
    # of every join row at exactly the least planar distance from each input row
    PlanarNearest = Callable[[np.ndarray, np.ndarray, float | None], tuple[np.ndarray, np.ndarray, np.ndarray]]


# Two candidates this close in distance are tied (a micrometre: below any survey's precision).
TIE_TOLERANCE_METRES = 1e-6
TIE_RULE = (
    f"join features within {TIE_TOLERANCE_METRES} m of the nearest distance are tied; the one that comes "
    "first in join_path (lowest row position) is taken"
)


REGISTRATIONS = (Registration("nearest_join", "nearest_join"),)
# -- nearest_join -----------------------------------------------------------------------------


def _nearest_candidates(
    ground: _Ground, max_metres: float | None, planar_nearest: PlanarNearest | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(input row, join row) pairs that may be nearest: the planar nearest, and in the geodesic
    case every join feature within GEODESIC_CANDIDATE_SLACK of it. ``planar_nearest`` replaces the
    search for the planar nearest (another engine's); it must give what STRtree.query_nearest gives
    with all_matches=True: every join row at exactly the least distance, within the limit if any.

    The third array is each pair's planar distance in analysis units when it is the ground distance's own
    measure: the planar case searched here, where STRtree.query_nearest measures with GEOS's distance, the call
    ``_Ground.metres`` makes (the same doubles: measured equal to the last bit on benchmarks/goal_ops' 1,000,000
    points and 2,000 sites, and asking again took 0.05-0.13 s). None otherwise: a geodesic measure, or another
    engine's distances, which are measured again here."""
    import numpy as np
    import shapely

    geoms = ground.metric.frame.geometry.values
    tree = shapely.STRtree(ground.join.geometry.values)
    limit = ground.search_units(max_metres) if max_metres is not None else None
    if planar_nearest is not None:
        left, right, dist = planar_nearest(geoms, ground.join.geometry.values, limit)
    else:
        left, right, dist = nearest_in_threads(tree, np.asarray(geoms, dtype=object), limit)
    if not ground.geodesic:
        return left, right, (dist if planar_nearest is None else None)
    if len(left) == 0:
        return left, right, None
    firsts = np.unique(left)
    nearest = np.full(len(geoms), np.inf)
    np.minimum.at(nearest, left, dist)
    radius = nearest[firsts] * (1 + GEODESIC_CANDIDATE_SLACK) + ground.metric.units(TIE_TOLERANCE_METRES)
    q_left, right = tree.query(geoms[firsts], predicate="dwithin", distance=radius)
    return firsts[q_left], right, None


def nearest_in_threads(
    tree: Any, geoms: np.ndarray, limit: float | None, threads: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``tree.query_nearest(geoms, max_distance=limit, return_distance=True, all_matches=True)`` as (input rows,
    tree rows, distances), the same arrays in the same order, the input split over the cores (chunked.apply_indexed;
    ``threads``: how many). The tree is built by a first one-feature query, before any thread asks it. Measured for
    issue 22 on 1,000,000 points and 2,000 sites, two cores, the query alone: 1.24 / 1.51 s in one call, 0.89 /
    0.78 s in two threads, the same pairs and distances; whole runs, 9 interleaved pairs, median 5.34 s against
    5.95 s."""
    from mapsmith_opensource import chunked

    def query(part: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        (found, right), dist = tree.query_nearest(part, max_distance=limit, return_distance=True, all_matches=True)
        return found, right, dist

    if len(geoms):
        query(geoms[:1])  # builds the tree in this thread
    return chunked.apply_indexed(query, geoms, threads)  # type: ignore[return-value]


def _break_ties(
    left: np.ndarray, right: np.ndarray, dist: np.ndarray, n_left: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Each input row's chosen pair -- (input rows, join rows, distances), by input row -- and how many input rows
    had several: every candidate within TIE_TOLERANCE_METRES of the row's nearest is tied, and the first join row
    wins. When the candidates already hold one pair per input row in input order (no tie; the searches give them
    in that order), nothing is sorted: at 1,000,000 points the sort and the grouping took 0.06-0.49 s."""
    import numpy as np

    one_each = len(left) < 2 or bool(np.all(left[1:] > left[:-1]))
    if one_each:
        nearest_of = dist  # a row's only candidate is its nearest
    else:
        nearest = np.full(n_left, np.inf)
        np.minimum.at(nearest, left, dist)
        nearest_of = nearest[left]
    near = dist <= nearest_of + TIE_TOLERANCE_METRES  # False for a NaN distance: never chosen
    left, right, dist = left[near], right[near], dist[near]
    if one_each:
        return left, right, dist, 0
    tied = int((np.bincount(left, minlength=n_left) > 1).sum())
    order = np.lexsort((right, left))
    chosen_left, first = np.unique(left[order], return_index=True)
    return chosen_left, right[order][first], dist[order][first], tied


@dataclass(frozen=True)
class Chosen:
    """Each input row's nearest join row, as written: (input rows, join rows, distances in metres), by input row,
    and the tallies the record gives."""

    left: np.ndarray
    right: np.ndarray
    metres: np.ndarray
    tied: int
    beyond: int  # found by a geodesic search widened beyond max_distance_meters, but farther

    def columns(self, n_left: int) -> tuple[np.ndarray, np.ndarray]:
        """Per input row: the chosen join row (-1: none) and its distance (NaN: none)."""
        import numpy as np

        right = np.full(n_left, -1, dtype=np.int64)
        right[self.left] = self.right
        distance = np.full(n_left, np.nan)
        distance[self.left] = self.metres
        return right, distance


def choose(left: np.ndarray, right: np.ndarray, metres: np.ndarray, n_left: int, max_m: float | None) -> Chosen:
    """The candidates' ties broken (``_break_ties``) and the pairs farther than ``max_m`` dropped."""
    chosen_left, chosen_right, chosen_dist, tied = _break_ties(left, right, metres, n_left)
    beyond = 0
    if max_m is not None:
        within = chosen_dist <= max_m
        beyond = int((~within).sum())  # geodesic: found within the widened search, but farther
        chosen_left, chosen_right, chosen_dist = chosen_left[within], chosen_right[within], chosen_dist[within]
    return Chosen(chosen_left, chosen_right, chosen_dist, tied, beyond)


@dataclass(frozen=True)
class Tally:
    """What the record needs of the choices: counts, the join rows used, and every chosen distance (in input order:
    its mean is numpy's pairwise sum over them, the same double on every path)."""

    matched: int
    tied: int
    beyond: int
    join_used: int
    metres: np.ndarray

    @classmethod
    def of(cls, chosen: Chosen, n_join: int) -> Tally:
        import numpy as np

        used = int(np.count_nonzero(np.bincount(chosen.right, minlength=n_join)))
        return cls(len(chosen.left), chosen.tied, chosen.beyond, used, chosen.metres)


def record_nearest(
    ctx: RunContext, tally: Tally, n_left: int, n_join: int, renamed: dict[str, str], max_m: float | None
) -> None:
    """What every nearest_join path records: the counts, the renamed fields, the tie rule, the note, the range
    check and the answer."""
    import numpy as np

    dist = tally.metres
    unmatched = n_left - tally.matched
    counts = {
        "input_features": n_left,
        "join_features": n_join,
        "input_features_matched": tally.matched,
        "input_features_unmatched": unmatched,
        "input_features_with_tied_nearest": tally.tied,
        "join_features_used": tally.join_used,
    }
    if max_m is not None:
        counts["nearest_beyond_max_distance"] = tally.beyond
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    ctx.parameters["x-mapsmith:tie_rule"] = TIE_RULE
    why_unmatched = (
        f"no join feature within {max_m} m, or no geometry" if max_m is not None else "no geometry, or no join features"
    )
    ctx.notes.append(
        f"{tally.matched} of {n_left} input features got their nearest join feature; {unmatched} got none "
        f"({why_unmatched}) and were kept with empty join fields and distance_m; {tally.tied} had several equally "
        "near join features (" + TIE_RULE + ")" + (f"; join fields renamed: {renamed}" if renamed else "")
    )
    limit = max_m if max_m is not None else float("inf")
    ctx.check(
        "values_in_expected_range",
        bool(np.all((dist >= 0) & (dist <= limit))),
        f"{len(dist)} distances, between {dist.min() if len(dist) else 0:.3f} and "
        f"{dist.max() if len(dist) else 0:.3f} m; allowed 0 to {limit} m",
    )
    ctx.answer = {
        **counts,
        "distance_method": ctx.parameters["x-mapsmith:distance_method"],
        "tie_rule": TIE_RULE,
        "distance_m": {
            "min": float(dist.min()) if len(dist) else None,
            "max": float(dist.max()) if len(dist) else None,
            "mean": float(dist.mean()) if len(dist) else None,
        },
        "renamed_fields": renamed,
    }


def nearest_join(ctx: RunContext, planar_nearest: PlanarNearest | None = None) -> None:
    """``planar_nearest``: another engine's search for the planar nearest (sedonadb_ops); the rest is this code.
    The GeoPandas engine first offers the run to ``nearest_columns`` (GeoParquet in and out, planar: no DataFrame)."""
    import numpy as np

    if planar_nearest is None:
        from mapsmith_opensource.join_ops import nearest_columns

        if nearest_columns.nearest_join_columns(ctx):
            return
        set_engine(ctx)
    left = measurable(ctx, read_input(ctx))  # distances of the geometry written, never of an invalid ring
    warn_measured_in_2d(ctx, left, "distance_m", "distance_m is the horizontal distance")
    join = read_input(ctx, "join_path")
    _refuse_existing(ctx, left, ["distance_m"])
    join = align_to(ctx, join, left.crs, "join_path")
    max_m = ctx.arguments.get("max_distance_meters")
    ground = _ground(ctx, left, join, "measured for nearest neighbours")
    n_left, n_join = len(left), len(join)
    if n_left and n_join:
        cand_left, cand_right, planar = _nearest_candidates(ground, max_m, planar_nearest)
        dist = ground.metres(cand_left, cand_right) if planar is None else planar * ground.metric.metres_per_unit
    else:
        cand_left = cand_right = np.zeros(0, dtype=np.int64)
        dist = np.zeros(0)
    chosen = choose(cand_left, cand_right, dist, n_left, max_m)
    right, distance = chosen.columns(n_left)
    # a join field named distance_m is renamed like any clash, never overwritten by the distance
    out, renamed = _attach(left, _attributes(join), np.arange(n_left), right, JOIN_SUFFIX, ("distance_m",))
    out["distance_m"] = distance
    record_nearest(ctx, Tally.of(chosen, n_join), n_left, n_join, renamed, max_m)
    write_output(ctx, out)
