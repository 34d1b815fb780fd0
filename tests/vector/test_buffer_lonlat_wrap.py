"""lonlat_wrap on hand-made rings: split at 180 degrees, closed over a pole, untouched otherwise.

Areas here are planar areas in degrees squared, worked out as rectangles: the rings are drawn with
horizontal and vertical edges in lon/lat so the expected values are exact.
"""

from __future__ import annotations

import numpy as np
import pytest
from shapely.geometry import Point, Polygon, box

from mapsmith.errors import EngineError
from mapsmith_opensource.lonlat_wrap import ambiguous_edges, crossing_mask, wrap_polygon


def as_lonlat(ring_unwrapped: list[tuple[float, float]]) -> Polygon:
    """The ring as a vertex-by-vertex transform would give it: every longitude folded into -180..180."""
    return Polygon([(((x + 180) % 360) - 180, y) for x, y in ring_unwrapped])


def test_a_rectangle_across_180_becomes_two_rectangles_cut_exactly_there() -> None:
    # 170..190 E x 10..20 N (a 20 x 10 rectangle, 200 deg2), folded: 170..180 and -180..-170, 100 deg2 each.
    ring = [(170, 10), (190, 10), (190, 20), (170, 20)]
    lonlat = as_lonlat(ring)
    assert crossing_mask(np.array([lonlat], dtype=object)).tolist() == [True]
    out = wrap_polygon(lonlat, Polygon(ring), None, None)
    assert out.geom_type == "MultiPolygon" and out.is_valid
    parts = sorted(out.geoms, key=lambda g: g.bounds[0])
    assert [p.bounds for p in parts] == [(-180, 10, -170, 20), (170, 10, 180, 20)]
    assert [p.area for p in parts] == [pytest.approx(100), pytest.approx(100)]


def test_a_rectangle_short_of_180_is_not_touched() -> None:
    # The clean twin: 160..179 E never jumps, so it is not flagged (and would come back as it was).
    lonlat = box(160, 10, 179, 20)
    assert crossing_mask(np.array([lonlat], dtype=object)).tolist() == [False]


def test_a_ring_round_the_north_pole_becomes_the_cap_above_it() -> None:
    # A ring at 80 N every 10 degrees of longitude, starting at 5 E: in lon/lat it is closed over the
    # pole as the strip -180..180 x 80..90, 3,600 deg2. The plane it came from (a polar one, here the
    # ring drawn round the origin) holds the north pole at (0, 0), inside the ring.
    lons = np.arange(5, 365, 10.0)
    ring_ll = Polygon([(((x + 180) % 360) - 180, 80.0) for x in lons])
    ring_plane = Polygon([(np.cos(np.radians(x)), np.sin(np.radians(x))) for x in lons])
    out = wrap_polygon(ring_ll, ring_plane, (0.0, 0.0), (1e9, 1e9))
    assert out.geom_type == "Polygon" and out.is_valid
    assert out.bounds == (-180, 80, 180, 90)
    assert out.area == pytest.approx(3600)
    assert out.covers(Point(123, 90)) and out.covers(Point(-180, 85))


def test_a_ring_round_a_pole_that_neither_pole_is_inside_is_an_error_not_a_guess() -> None:
    lons = np.arange(5, 365, 10.0)
    ring_ll = Polygon([(((x + 180) % 360) - 180, 80.0) for x in lons])
    ring_plane = Polygon([(np.cos(np.radians(x)), np.sin(np.radians(x))) for x in lons])
    with pytest.raises(ValueError, match="neither pole"):
        wrap_polygon(ring_ll, ring_plane, (5.0, 5.0), (-5.0, -5.0))


def test_buffer_ops_turns_that_into_a_structured_error() -> None:
    from mapsmith_opensource.buffer_ops import _wrap_crossings

    lons = np.arange(5, 365, 10.0)
    ring_ll = Polygon([(((x + 180) % 360) - 180, 80.0) for x in lons])
    ring_plane = Polygon([(np.cos(np.radians(x)), np.sin(np.radians(x))) for x in lons])
    with pytest.raises(EngineError) as err:
        _wrap_crossings([ring_ll], [ring_plane], np.array([[5.0, 5.0]]), np.array([[-5.0, -5.0]]))
    assert err.value.code == "BUFFER_WRAP_FAILED" and err.value.evidence["feature_index"] == 0


def test_edges_over_180_degrees_are_found_but_edges_to_a_pole_are_not() -> None:
    # (179.5, 10) -> (-179.5, 10) spans 359 degrees: ambiguous. A cap like buffer_layer writes (its rim in
    # 10-degree steps, its sides on the 180 meridian, its top on 90 N from 180 to -180, one point either
    # way) has none. box(-180, 85, 180, 90)'s bottom edge, 360 degrees along 85 N, is ambiguous again:
    # the parallel, or nothing at all.
    from shapely.geometry import LineString

    geoms = np.array(
        [
            LineString([(179.5, 10), (-179.5, 10)]),
            Polygon([(-180, 85), (-180, 90), (180, 90), *[(x, 85) for x in range(180, -180, -10)]]),
            LineString([(180, 10), (180, 20)]),
            box(-180, 85, 180, 90),
        ],
        dtype=object,
    )
    owners, edges = ambiguous_edges(geoms)
    found = dict(zip(owners.tolist(), edges.tolist(), strict=True))
    assert sorted(found) == [0, 3]
    assert found[0] == [179.5, 10, -179.5, 10]
    assert sorted(found[3][0::2]) == [-180, 180] and found[3][1::2] == [85, 85]
