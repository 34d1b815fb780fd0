"""The unions of dissolve_layer's groups, spread over the cores (``union_groups_in_threads``), each by GEOS's coverage
union when the group is proved a polygon coverage, else by ``shapely.union_all`` (``union_group``).

Parcels, districts, counties and land-cover polygons, the layers most often dissolved, are coverages: polygons
that do not overlap and whose shared edges have the same vertices. GEOS unions a coverage by dropping the shared
edges (``shapely.coverage_union_all``) instead of overlaying every polygon (``shapely.union_all``), and the shape is
the same; only the vertex a ring starts from and the rings' order may differ. On an input that is not a coverage
its answer is undefined, so it is taken only when ``shapely.coverage_is_valid`` has proved the group one (no
overlaps, edges matched; gaps are allowed, they stay gaps), and only over an input whose every geometry read as
valid (dissolve_layer asks read_input's check): the proof assumes valid polygons. GeoPandas has this method too
(``dissolve(method="coverage")``), but only on the caller's word; the proof and the fallback are written here
because no library chooses between the two.

Measured for issue 22 (shapely 2.2, GEOS 3.14, one core, best of 5, load 0.4; /tmp scratch script), a grid of
10 m squares and randomly placed overlapping 15 m squares, ``shapely.union_all`` against ``union_group``:

    members   grid (a coverage)             overlapping squares
    1,000     0.0246 s -> 0.0141 s (1.7x)   0.0364 s -> 0.0373 s (+3 %)
    20,000    0.4923 s -> 0.2148 s (2.3x)   0.6580 s -> 0.6302 s (within noise)

The full check on an input that is not a coverage costs a third of the union it then does anyway (+34 to +37 % on
the overlapping squares, 1,000 to 20,000 members), so a cheap sample goes first (``_sample_overlaps``): a few
members spread over the group are tested against every member they meet, and one pair whose interiors meet rules the
coverage out. A group that passes the sample but not the full check pays the full check (an input that is a coverage
but for a few slivers). Below ``COVERAGE_MIN_MEMBERS`` the union is cheap whichever way, and union_all is kept: its
output is GeoPandas' ``dissolve()`` to the last bit. Edges that differ in the last bit of a coordinate are no
coverage to GEOS: benchmarks/scale_data's parcels at 100,000 and 3,000,000 (a cell's side inexact in binary) keep
union_all, those at 1,000,000 (a side of 200 m) take the coverage union.

What this module must never do: take the coverage union of a group it has not proved a coverage, or change the
shape of any union.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = [
    "COVERAGE_MIN_MEMBERS",
    "COVERAGE_NOTE",
    "SAMPLE_MEMBERS",
    "tally_label",
    "union_group",
    "union_groups_in_threads",
]

# The fewest present members for which the coverage union is tried (the table above: 1.7x at 1,000).
COVERAGE_MIN_MEMBERS = 1_000
# How many members, spread over the group in input order, the sample tests against the members they meet.
SAMPLE_MEMBERS = 64


def union_group(members: Any, coverage: bool = True) -> tuple[Any, bool]:
    """The union of ``members`` (an object array of shapely geometries, None allowed) and whether it was GEOS's
    coverage union (True) rather than ``shapely.union_all`` (False). ``coverage``: whether the coverage union may be
    tried at all; the caller must know every member valid (coverage_is_valid judges how valid polygons meet, and
    the coverage union of an invalid polygon is not union_all's answer)."""
    import numpy as np
    import shapely

    members = np.asarray(members, dtype=object)
    present = members[~shapely.is_missing(members)]
    if (
        coverage
        and len(present) >= COVERAGE_MIN_MEMBERS
        and _polygonal(present)
        and not _sample_overlaps(present)
        and shapely.coverage_is_valid(present)
    ):
        return shapely.coverage_union_all(present), True
    return shapely.union_all(members), False


def _polygonal(geoms: Any) -> bool:
    import numpy as np
    import shapely

    kinds = shapely.get_type_id(geoms)
    areal = np.isin(kinds, (shapely.GeometryType.POLYGON, shapely.GeometryType.MULTIPOLYGON))
    return bool(areal.all() and not shapely.is_empty(geoms).any())


def _sample_overlaps(geoms: Any) -> bool:
    """True when one of ``SAMPLE_MEMBERS`` members spread over ``geoms`` shares interior with a member it meets:
    then the group is no coverage (a coverage's members only touch)."""
    import numpy as np
    import shapely

    tree = shapely.STRtree(geoms)
    picked = np.unique(np.linspace(0, len(geoms) - 1, min(SAMPLE_MEMBERS, len(geoms))).astype(np.int64))
    found, met = tree.query(geoms[picked], predicate="intersects")
    sample = picked[found]
    other = sample != met
    return bool((~shapely.touches(geoms[sample[other]], geoms[met[other]])).any())


def union_groups_in_threads(
    geoms: Any,
    groups: Any,
    count: int,
    threads: int | None = None,
    tally: list[bool] | None = None,
    coverage: bool = False,
) -> Any:
    """The union of each group (0 .. count-1) of ``geoms``, in input order within a group, the groups spread over
    the cores (chunked.map_each; ``threads``: how many; GEOS unions with Python's lock released). Each is
    group_union.union_group's: shapely.union_all, the union GeoDataFrame.dissolve makes, to the last bit, or GEOS's
    coverage union of a group proved a polygon coverage (the same shape), tried only with ``coverage`` (every
    geometry known valid); ``tally`` gets one flag per group, True where the coverage union was taken. Measured for
    issue 22 on benchmarks/scale_data's 100,000 parcels in 46 bands, two cores: the unions alone 2.19 s one after
    another, 1.13 s in two threads, every geometry equal to the last bit; whole MapSmith runs 2.0-2.5 s against
    2.8-3.1 s (four interleaved pairs), the output file byte for byte the same."""
    import numpy as np

    from mapsmith_opensource import chunked

    geoms = np.asarray(geoms, dtype=object)
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(np.asarray(groups)[order], np.arange(count + 1))
    members = [geoms[order[bounds[k] : bounds[k + 1]]] for k in range(count)]
    found = chunked.map_each(functools.partial(union_group, coverage=coverage), members, threads)
    out = np.empty(count, dtype=object)
    out[:] = [union for union, _ in found]
    if tally is not None:
        tally.extend(taken for _, taken in found)
    return out


def tally_label(tally: list[bool]) -> str:
    """How union_groups_in_threads unioned the groups it flagged in ``tally``, for the dissolve's note."""
    taken = sum(tally)
    if not taken:
        return "shapely.union_all"
    rest = len(tally) - taken
    return f"GEOS's coverage union for {taken} of {len(tally)} groups" + (
        f" and shapely.union_all for the other {rest}" if rest else ""
    )


COVERAGE_NOTE = (
    "coverage union: a group of at least {members:,} valid polygons that shapely.coverage_is_valid proved a "
    "coverage (no overlaps, shared edges with the same vertices) was unioned by shapely.coverage_union_all, which "
    "gives the shape shapely.union_all gives in about half the time; a ring may start from another of its vertices"
)
