"""dissolve_layer's union of a group: GEOS's coverage union only for a group proved a polygon coverage, else
shapely.union_all, with the same shape either way.

The grids are 10 m squares whose corners are whole metres (exact in binary), so every area below is exact:
a 40 x 40 grid is 1,600 squares of 100 m2, 160,000 m2, and its union is one 400 m square whose boundary keeps the
squares' corners, 40 edges a side, 160 vertices and the closing one. Each coverage case has its defect twin
(one square moved so that it overlaps a neighbour: no coverage, shapely.union_all to the last bit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import shapely

from layers import manifest, read, write_layer
from mapsmith_opensource import group_union
from mapsmith_opensource.group_union import COVERAGE_MIN_MEMBERS, union_group, union_groups_in_threads

X0, Y0 = 500_000.0, 5_000_000.0
UTM = "EPSG:32610"


def grid(per_row: int, rows: int, y_row: int = 0, x_col: int = 0) -> np.ndarray:
    """``per_row`` x ``rows`` squares of 10 m, row by row from (X0 + 10 * x_col, Y0 + 10 * y_row)."""
    i = np.arange(per_row * rows)
    x = X0 + (x_col + i % per_row) * 10.0
    y = Y0 + (y_row + i // per_row) * 10.0
    return shapely.box(x, y, x + 10.0, y + 10.0)


def overlapped(squares: np.ndarray, k: int) -> np.ndarray:
    """The squares with square ``k`` moved 5 m east, into the next one's interior (50 m2 shared)."""
    out = squares.copy()
    out[k] = shapely.affinity.translate(out[k], 5.0, 0.0)
    return out


def test_a_grid_coverage_is_unioned_by_the_coverage_union_to_the_same_shape() -> None:
    squares = grid(40, 40)
    assert COVERAGE_MIN_MEMBERS <= 1_600
    union, coverage = union_group(squares)
    reference = shapely.union_all(squares)
    assert coverage is True
    assert union.geom_type == "Polygon" and union.area == 160_000.0 and len(union.interiors) == 0
    assert shapely.get_num_coordinates(union) == 161 == shapely.get_num_coordinates(reference)
    assert union.equals(reference)
    assert shapely.normalize(union).equals_exact(shapely.normalize(reference), 0.0)


def test_one_overlapping_square_makes_it_no_coverage_and_the_union_is_union_all_exactly() -> None:
    """Square 820 (row 20, column 20) moved 5 m east overlaps square 821 (their shared 50 m2 counts once) and leaves
    a 5 m x 10 m hole where it was: 160,000 - 50 = 159,950 m2, one interior ring."""
    squares = overlapped(grid(40, 40), 820)
    union, coverage = union_group(squares)
    assert coverage is False
    assert shapely.to_wkb(union) == shapely.to_wkb(shapely.union_all(squares))
    assert union.area == 159_950.0 and len(union.interiors) == 1


def test_the_sample_rules_out_overlapping_squares_before_the_full_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 squares of 15 m placed at random on a 316 m field overlap each other everywhere: the sample finds it,
    and shapely.coverage_is_valid is never asked."""
    corners = np.random.default_rng(7).uniform(0.0, 316.0, (1_000, 2))
    squares = shapely.box(corners[:, 0], corners[:, 1], corners[:, 0] + 15.0, corners[:, 1] + 15.0)
    assert group_union._sample_overlaps(squares) is True

    def never(*_: Any) -> bool:
        raise AssertionError("the full check ran")

    monkeypatch.setattr(shapely, "coverage_is_valid", never)
    union, coverage = union_group(squares)
    assert coverage is False and shapely.to_wkb(union) == shapely.to_wkb(shapely.union_all(squares))


def test_an_overlap_the_sample_misses_is_caught_by_the_full_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a sample of one member (square 0, the corner), the overlap at square 820 is not among its neighbours:
    the sample passes and shapely.coverage_is_valid refuses the coverage."""
    monkeypatch.setattr(group_union, "SAMPLE_MEMBERS", 1)
    squares = overlapped(grid(40, 40), 820)
    assert group_union._sample_overlaps(squares) is False
    union, coverage = union_group(squares)
    assert coverage is False and shapely.to_wkb(union) == shapely.to_wkb(shapely.union_all(squares))


def test_gaps_and_missing_members_are_allowed_in_a_coverage() -> None:
    """Square 820 taken out and a None added: 1,599 squares, a 10 m x 10 m hole, 159,900 m2."""
    squares = np.concatenate([np.delete(grid(40, 40), 820), np.array([None], dtype=object)])
    union, coverage = union_group(squares)
    assert coverage is True and union.area == 159_900.0 and len(union.interiors) == 1
    assert union.equals(shapely.union_all(squares))


def test_small_groups_and_groups_with_lines_keep_union_all() -> None:
    """999 squares (27 rows of 37) are below COVERAGE_MIN_MEMBERS; a line among 1,600 squares is not polygonal."""
    small = grid(37, 27)
    assert len(small) == 999 < COVERAGE_MIN_MEMBERS
    assert union_group(small)[1] is False
    with_line = np.concatenate([grid(40, 40), [shapely.LineString([(X0, Y0 - 20.0), (X0 + 10.0, Y0 - 20.0)])]])
    union, coverage = union_group(with_line)
    assert coverage is False and shapely.to_wkb(union) == shapely.to_wkb(shapely.union_all(with_line))


@pytest.mark.parametrize("threads", [1, 2])
def test_union_groups_in_threads_flags_each_group(threads: int) -> None:
    """Group 0 the 40 x 40 grid, group 1 its overlapped twin beside it, group 2 ten squares: flags True, False,
    False, and each union has its area (160,000, 159,950 and 1,000 m2)."""
    a = grid(40, 40)
    b = overlapped(grid(40, 40, x_col=100), 820)
    c = grid(10, 1, y_row=100)
    geoms = np.concatenate([a, b, c])
    groups = np.repeat([0, 1, 2], [len(a), len(b), len(c)])
    tally: list[bool] = []
    out = union_groups_in_threads(geoms, groups, 3, threads, tally=tally, coverage=True)
    assert tally == [True, False, False]
    unasked: list[bool] = []
    plain = union_groups_in_threads(geoms, groups, 3, threads, tally=unasked)
    assert unasked == [False, False, False] and shapely.to_wkb(plain[0]) == shapely.to_wkb(shapely.union_all(a))
    assert shapely.area(out).tolist() == [160_000.0, 159_950.0, 1_000.0]
    assert (
        group_union.tally_label(tally)
        == "GEOS's coverage union for 1 of 3 groups and shapely.union_all for the other 2"
    )
    assert group_union.tally_label([False]) == "shapely.union_all"


def _parcels(workspace: Path, move: int | None = None) -> None:
    """A 40 x 40 grid of parcels, rows 0-19 band 'a' and rows 20-39 band 'b', and ten more in row 50, band 'c'."""
    squares = np.concatenate([grid(40, 40), grid(10, 1, y_row=50)])
    if move is not None:
        squares = overlapped(squares, move)
    bands = ["a"] * 800 + ["b"] * 800 + ["c"] * 10
    write_layer(workspace / "parcels.parquet", list(squares), UTM, band=bands)


def _notes(app: Any, workspace: Path, arguments: dict[str, Any]) -> str:
    """The run's notes, as the result and the manifest both hold them, joined."""
    result = app.run("dissolve_layer", {"input_path": "parcels.parquet", **arguments})
    recorded = manifest(workspace / arguments["output_path"])["notes"]
    assert recorded == result.notes
    return " ".join(result.notes)


def test_dissolve_layer_says_which_groups_took_the_coverage_union(app: Any, workspace: Path) -> None:
    """Bands a and b are 800 squares each, 80,000 m2 (below COVERAGE_MIN_MEMBERS: union_all); the clean run's
    whole-layer dissolve is 1,610 squares, 161,000 m2 in two parts (coverage union)."""
    _parcels(workspace)
    text = _notes(app, workspace, {"by_fields": "band", "output_path": "bands.parquet"})
    bands = read(workspace / "bands.parquet")
    assert bands["band"].tolist() == ["a", "b", "c"] and bands.geometry.area.tolist() == [80_000.0, 80_000.0, 1_000.0]
    assert "geometries unioned with shapely.union_all:" in text and "coverage union:" not in text

    text = _notes(app, workspace, {"output_path": "all.parquet"})
    (whole,) = read(workspace / "all.parquet").geometry
    assert whole.geom_type == "MultiPolygon" and whole.area == 161_000.0
    assert "geometries unioned with GEOS's coverage union for 1 of 1 groups:" in text
    assert "coverage union: a group of at least 1,000 valid polygons" in text


def test_dissolve_layer_with_an_overlap_keeps_union_all(app: Any, workspace: Path) -> None:
    """The defect twin: square 820 overlaps 821, so the whole layer is no coverage: 161,000 - 50 m2."""
    _parcels(workspace, move=820)
    text = _notes(app, workspace, {"output_path": "all.parquet"})
    (whole,) = read(workspace / "all.parquet").geometry
    assert whole.area == 160_950.0
    assert "geometries unioned with shapely.union_all:" in text and "coverage union:" not in text


def test_heights_are_kept_by_the_coverage_union() -> None:
    """The 40 x 40 grid with a height z = x - X0 at every corner (a plane rising 1 m per metre east): the union's
    boundary keeps each corner's height, from 0 m on the west edge to 400 m on the east."""
    rings = shapely.get_coordinates(grid(40, 40)).reshape(1_600, 5, 2)
    squares = shapely.polygons(np.dstack([rings, rings[:, :, 0] - X0]))
    union, coverage = union_group(squares)
    assert coverage is True and union.has_z
    xyz = shapely.get_coordinates(union, include_z=True)
    assert len(xyz) == 161 and (xyz[:, 2] == xyz[:, 0] - X0).all()
    assert xyz[:, 2].min() == 0.0 and xyz[:, 2].max() == 400.0


@pytest.mark.parametrize("invalid", [True, False])
def test_an_invalid_input_geometry_keeps_union_all_for_every_group(app: Any, workspace: Path, invalid: bool) -> None:
    """Band 'a' is the 40 x 40 grid (a coverage); band 'b' one feature 2 km away: a ring that touches itself at
    (5, 0), invalid by GEOS and 50 m2 (the triangles either side of the touch), or, in the clean twin, a valid 10 m
    square of 100 m2. With an invalid geometry anywhere in the layer the coverage union is not tried: the proof
    assumes valid polygons."""
    x, y = X0 + 2_000.0, Y0 + 2_000.0
    if invalid:
        other = shapely.Polygon([(x, y), (x + 10, y), (x + 10, y + 10), (x + 5, y), (x, y + 10)])
    else:
        other = shapely.box(x, y, x + 10.0, y + 10.0)
    assert other.is_valid is not invalid
    write_layer(workspace / "parcels.parquet", [*grid(40, 40), other], UTM, band=["a"] * 1_600 + ["b"])
    text = _notes(app, workspace, {"by_fields": "band", "output_path": "bands.parquet"})
    bands = read(workspace / "bands.parquet")
    assert bands["band"].tolist() == ["a", "b"]
    assert bands.geometry.area.tolist() == [160_000.0, 50.0 if invalid else 100.0]
    if invalid:
        assert "geometries unioned with shapely.union_all:" in text and "coverage union:" not in text
    else:
        assert (
            "geometries unioned with GEOS's coverage union for 1 of 2 groups and shapely.union_all for the other 1:"
            in text
        )
