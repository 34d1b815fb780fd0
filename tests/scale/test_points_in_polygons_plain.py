"""count_in_polygons and summarize_points_in_polygons on DuckDB and SedonaDB when no point can be in two
polygons: one per-polygon query and one scan of the points' facts, no grouping by point
(points_in_polygons_sql.aggregate), with the GeoPandas engine's answer and record.

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre:

    Z1 = 0..100 x 0..100, Z2 = 100..200 x 0..100 (they share the edge x = 100: interiors disjoint)
    points: Q0 (50,50) in Z1, v 1; Q1 (150,50) in Z2, v NaN; Q2 (160,60) in Z2, v 5; Q3 no geometry, v 7;
            Q4 (900,900) in no zone, v 9; Q5 (150, NaN), invalid (GEOS: Invalid Coordinate), meets no zone, v 2

Worked by hand: Z1 holds Q0, Z2 holds Q1 and Q2: counts [1, 2], 3 points counted, 3 in no polygon (one of
them without geometry), none in several. Z2's values are NaN (left out, counted as null) and 5. The traps are
the same layers with a point on the shared edge (R (100,20)) and with overlapping zones: then a point may be
in two polygons and the engines group the matched points by point (points_in_polygons_sql.grouped_sql), or, on
SedonaDB beyond GROUPED_MAX_POINTS points (``sedonadb-first`` below: the limit set to 0), count each point at its
first polygon, with the counts worked out below.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
SEDONADB = pytest.mark.skipif(importlib.util.find_spec("sedonadb") is None, reason="SedonaDB not installed")
ENGINES = ["duckdb", pytest.param("sedonadb", marks=SEDONADB), pytest.param("sedonadb-first", marks=SEDONADB)]
NAME = {"duckdb": "duckdb", "sedonadb": "sedonadb", "sedonadb-first": "sedonadb"}


@pytest.fixture(autouse=True)
def first_polygon_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sedonadb-first``: SedonaDB with GROUPED_MAX_POINTS at 0, so that it counts each point at its first polygon."""
    from mapsmith_opensource.join_ops import points_in_polygons_sql as sql

    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("engine") == "sedonadb-first":
        monkeypatch.setattr(sql, "GROUPED_MAX_POINTS", 0)


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


def write_case(workspace: Path, zones: list[Any] | None = None, extra: list[tuple[Any, float]] = ()) -> None:  # type: ignore[assignment]
    zones = zones or [box(*g(0, 0), *g(100, 100)), box(*g(100, 0), *g(200, 100))]
    write_layer(workspace / "zones.parquet", zones, UTM, zid=[f"Z{n + 1}" for n in range(len(zones))])
    points = [
        (Point(g(50, 50)), 1.0),
        (Point(g(150, 50)), float("nan")),
        (Point(g(160, 60)), 5.0),
        (None, 7.0),
        (Point(g(900, 900)), 9.0),
        (Point(g(150, math.nan)), 2.0),
        *extra,
    ]
    write_layer(
        workspace / "points.parquet",
        [p for p, _ in points],
        UTM,
        pid=[f"Q{n}" for n in range(len(points))],
        v=[v for _, v in points],
    )


ARGS = {"input_path": "zones.parquet", "points_path": "points.parquet"}
TIMING = "x-mapsmith:engine_seconds"


def _path_note(workspace: Path, name: str) -> str:
    (note,) = [n for n in manifest(workspace / name)["notes"] if n.startswith("engine path:")]
    return note


def _same_record(workspace: Path, got: str, ref: str) -> None:
    mine, theirs = manifest(workspace / got), manifest(workspace / ref)
    assert {k: v for k, v in mine["parameters"].items() if k != TIMING} == {
        k: v for k, v in theirs["parameters"].items() if k != TIMING
    }
    assert mine["crs_decisions"] == theirs["crs_decisions"]
    assert mine["verification"] == theirs["verification"]
    assert [n for n in mine["notes"] if "points lie" in n or "lie in at least" in n] == [
        n for n in theirs["notes"] if "points lie" in n or "lie in at least" in n
    ]


def _geopandas_agrees(make_app: Callable[..., Any], workspace: Path, got: str, expected: dict[str, int]) -> None:
    """The GeoPandas engine on the same count request gives the same answer and records the same."""
    ref = make_app(MAPSMITH_SEDONADB_MIN_FEATURES=str(10**12)).run(
        "count_in_polygons", {**ARGS, "output_path": "ref.parquet"}
    )
    assert ref.engine["name"] == "geopandas"
    assert {k: ref.answer[k] for k in expected} == expected
    _same_record(workspace, got, "ref.parquet")


@pytest.mark.parametrize("engine", ENGINES)
def test_count_without_grouping_by_point_gives_the_hand_counts(
    make_app: Callable[..., Any], workspace: Path, engine: str
) -> None:
    write_case(workspace)
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "c.parquet"})
    assert result.engine["name"] == NAME[engine]
    assert "no point can be in two polygons, so none was grouped by point" in _path_note(workspace, "c.parquet")
    assert read(workspace / "c.parquet")["point_count"].tolist() == [1, 2]
    expected = {
        "polygons": 2,
        "points": 6,
        "points_counted": 3,
        "points_in_no_polygon": 3,
        "points_without_geometry": 1,
        "points_in_several_polygons": 0,
        "points_in_overlapping_polygons": 0,
        "points_on_shared_boundaries": 0,
        "polygons_with_no_points": 0,
        "total_point_count": 3,
        "distinct_point_count": 3,
    }
    assert {k: result.answer[k] for k in expected} == expected
    (validity,) = [
        c
        for c in manifest(workspace / "c.parquet")["verification"]
        if c["name"] == "x-mapsmith:input_geometry_valid" and c.get("argument") == "points_path"
    ]
    assert "1 of 6 geometries invalid (first feature indices [5]; Invalid Coordinate)" in validity["detail"]
    _geopandas_agrees(make_app, workspace, "c.parquet", expected)


@pytest.mark.parametrize("engine", ENGINES)
def test_summary_without_grouping_by_point_leaves_out_nan(
    make_app: Callable[..., Any], workspace: Path, engine: str
) -> None:
    import pandas as pd

    write_case(workspace)
    args = {**ARGS, "field": "v", "statistics": "mean,sum,min,max,count"}
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run(
        "summarize_points_in_polygons", {**args, "output_path": "s.parquet"}
    )
    assert result.engine["name"] == NAME[engine]
    assert "none was grouped by point" in _path_note(workspace, "s.parquet")
    out = read(workspace / "s.parquet")
    assert out["v_count"].tolist() == [1, 1]  # Z2: Q1's NaN left out
    assert out["v_sum"].tolist() == [1.0, 5.0]
    assert out["v_mean"].tolist() == [1.0, 5.0]
    assert out["v_null_count"].tolist() == [0, 1]
    assert result.answer["points_with_null_value"] == 1  # Q1 (NaN)
    ref = make_app(MAPSMITH_SEDONADB_MIN_FEATURES=str(10**12))
    ref.run("summarize_points_in_polygons", {**args, "output_path": "ref.parquet"})
    _same_record(workspace, "s.parquet", "ref.parquet")
    pd.testing.assert_frame_equal(out, read(workspace / "ref.parquet"))


FIRST_PATH = "counting each point once at its first polygon"
GROUPED_PATH = "per polygon and per point in one query (GROUP BY GROUPING SETS)"
PATH = {"sedonadb-first": FIRST_PATH, "sedonadb": GROUPED_PATH, "duckdb": GROUPED_PATH}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_point_on_a_shared_edge(make_app: Callable[..., Any], workspace: Path, engine: str) -> None:
    """Trap: R (100,20) on the edge Z1 and Z2 share is in both: counts [2, 3], R counted twice, once in each. The
    per-polygon query finds a point on a boundary, so the points are grouped, or counted at their first polygon
    (R at Z1, in neither interior: on a shared boundary)."""
    write_case(workspace, extra=[(Point(g(100, 20)), 4.0)])
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "e.parquet"})
    assert result.engine["name"] == NAME[engine]
    assert PATH[engine] in _path_note(workspace, "e.parquet")
    assert read(workspace / "e.parquet")["point_count"].tolist() == [2, 3]
    assert result.answer["points_in_several_polygons"] == 1
    assert result.answer["points_on_shared_boundaries"] == 1
    assert (result.answer["total_point_count"], result.answer["distinct_point_count"]) == (5, 4)


# Z2 widened to 90..200 overlaps Z1 in 90..100 x 0..100. A (95,50) is inside both; B (100,20) on Z1's edge
# inside Z2; C (90,30) on Z2's edge inside Z1; D (95,0) on the bottom edge of both (inside neither).
OVERLAP_ZONES = [box(*g(0, 0), *g(100, 100)), box(*g(90, 0), *g(200, 100))]
IN_OVERLAP = [(Point(g(95, 50)), 3.0), (Point(g(100, 20)), 4.0), (Point(g(90, 30)), 6.0), (Point(g(95, 0)), 8.0)]
# By hand: Z1 holds Q0, A, B, C, D (5), Z2 Q1, Q2, A, B, C, D (6); 7 points counted, 4 of them in both zones,
# 3 inside one of them (A, B, C), D on a boundary they share; Q3 (no geometry), Q4 and Q5 in none.
OVERLAP_ANSWER = {
    "points": 10,
    "points_counted": 7,
    "points_in_no_polygon": 3,
    "points_without_geometry": 1,
    "points_in_several_polygons": 4,
    "points_in_overlapping_polygons": 3,
    "points_on_shared_boundaries": 1,
    "total_point_count": 11,
    "distinct_point_count": 7,
}


@pytest.mark.parametrize("engine", ENGINES)
def test_overlapping_zones_group_only_the_points_in_the_overlap(
    make_app: Callable[..., Any], workspace: Path, engine: str
) -> None:
    write_case(workspace, zones=OVERLAP_ZONES, extra=IN_OVERLAP)
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "o.parquet"})
    assert result.engine["name"] == NAME[engine]
    assert PATH[engine] in _path_note(workspace, "o.parquet")
    assert read(workspace / "o.parquet")["point_count"].tolist() == [5, 6]
    assert {k: result.answer[k] for k in OVERLAP_ANSWER} == OVERLAP_ANSWER
    _geopandas_agrees(make_app, workspace, "o.parquet", OVERLAP_ANSWER)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_shared_region_of_an_area_and_a_line(make_app: Callable[..., Any], workspace: Path, engine: str) -> None:
    """A = 0..100 x 0..100, B = 80..200 x 0..100 (they overlap in 80..100), C = 100..120 x 100..120 (it meets A at
    the corner (100,100) and B along y = 100, x 100..120): B's shared region is an area and a line (a geometry
    collection). F (90,50) is inside A and B; E (110,100) on B's and C's boundaries. By hand: counts A 2 (Q0, F),
    B 4 (Q1, Q2, E, F), C 1 (E); 5 points counted, 2 in several polygons, F inside overlapping ones, E on a
    boundary they share."""
    zones = [box(*g(0, 0), *g(100, 100)), box(*g(80, 0), *g(200, 100)), box(*g(100, 100), *g(120, 120))]
    write_case(workspace, zones=zones, extra=[(Point(g(90, 50)), 3.0), (Point(g(110, 100)), 4.0)])
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "c.parquet"})
    assert result.engine["name"] == NAME[engine]
    assert PATH[engine] in _path_note(workspace, "c.parquet")
    assert read(workspace / "c.parquet")["point_count"].tolist() == [2, 4, 1]
    expected = {
        "points": 8,
        "points_counted": 5,
        "points_in_several_polygons": 2,
        "points_in_overlapping_polygons": 1,
        "points_on_shared_boundaries": 1,
        "total_point_count": 7,
        "distinct_point_count": 5,
    }
    assert {k: result.answer[k] for k in expected} == expected


@pytest.mark.parametrize("engine", ENGINES)
def test_summary_over_overlapping_zones(make_app: Callable[..., Any], workspace: Path, engine: str) -> None:
    """A2, a second point at A (95,50) with no value (NaN), shares A's location and polygons. Z1's values: Q0 1,
    A 3, A2 NaN (left out), B 4, C 6, D 8 (count 5, sum 22, mean 4.4, one null); Z2's: Q1 NaN, Q2 5, A 3, A2 NaN,
    B 4, C 6, D 8 (count 5, sum 26, mean 5.2, two nulls). Five points in both zones, two without a value."""
    import pandas as pd

    write_case(workspace, zones=OVERLAP_ZONES, extra=[*IN_OVERLAP, (Point(g(95, 50)), math.nan)])
    args = {**ARGS, "field": "v", "statistics": "mean,sum,min,max,count"}
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run(
        "summarize_points_in_polygons", {**args, "output_path": "s.parquet"}
    )
    assert PATH[engine] in _path_note(workspace, "s.parquet")
    out = read(workspace / "s.parquet")
    assert out["v_count"].tolist() == [5, 5]
    assert out["v_sum"].tolist() == [22.0, 26.0]
    assert out["v_mean"].tolist() == pytest.approx([4.4, 5.2])
    assert (out["v_min"].tolist(), out["v_max"].tolist()) == ([1.0, 3.0], [8.0, 8.0])
    assert out["v_null_count"].tolist() == [1, 2]
    assert result.answer["points_with_null_value"] == 2
    assert (result.answer["points_in_several_polygons"], result.answer["points_counted"]) == (5, 8)
    ref = make_app(MAPSMITH_SEDONADB_MIN_FEATURES=str(10**12))
    ref.run("summarize_points_in_polygons", {**args, "output_path": "ref.parquet"})
    _same_record(workspace, "s.parquet", "ref.parquet")
    pd.testing.assert_frame_equal(out, read(workspace / "ref.parquet"))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_one_row_points_file_over_overlapping_zones(
    make_app: Callable[..., Any], workspace: Path, engine: str
) -> None:
    """A (95,50), alone in its file, inside both zones: counts [1, 1], one point in two polygons (SedonaDB 0.5
    mistypes some plans over a one-row file: 'st_setsrid(binary, int64): No kernel')."""
    write_case(workspace, zones=OVERLAP_ZONES)
    write_layer(workspace / "points.parquet", [Point(g(95, 50))], UTM, pid=["A"], v=[3.0])
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "one.parquet"})
    assert result.engine["name"] == NAME[engine]
    assert "engine path: direct, aggregated" in _path_note(workspace, "one.parquet")
    assert read(workspace / "one.parquet")["point_count"].tolist() == [1, 1]
    expected = {"points": 1, "points_counted": 1, "points_in_several_polygons": 1, "points_in_overlapping_polygons": 1}
    assert {k: result.answer[k] for k in expected} == expected


@SEDONADB
@pytest.mark.parametrize(("limit", "path"), [(10, GROUPED_PATH), (9, FIRST_PATH)])
def test_sedonadb_groups_up_to_grouped_max_points(
    make_app: Callable[..., Any], workspace: Path, monkeypatch: pytest.MonkeyPatch, limit: int, path: str
) -> None:
    """OVERLAP_ZONES with their ten points: with GROUPED_MAX_POINTS at 10 SedonaDB groups them by point, at 9 it
    counts each at its first polygon; the same hand counts either way."""
    from mapsmith_opensource.join_ops import points_in_polygons_sql as sql

    monkeypatch.setattr(sql, "GROUPED_MAX_POINTS", limit)
    write_case(workspace, zones=OVERLAP_ZONES, extra=IN_OVERLAP)
    result = make_app(MAPSMITH_ENGINE="sedonadb").run("count_in_polygons", {**ARGS, "output_path": "t.parquet"})
    assert path in _path_note(workspace, "t.parquet")
    assert read(workspace / "t.parquet")["point_count"].tolist() == [5, 6]
    assert {k: result.answer[k] for k in OVERLAP_ANSWER} == OVERLAP_ANSWER


@SEDONADB
def test_inconsistent_neighbour_tests_fall_back_to_grouping_every_point(
    make_app: Callable[..., Any], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trap, on SedonaDB: neighbours that leave out Z1 as Z2's lower neighbour (as tests that disagree with the join
    would) make every pair a first one: 11 points counted of 11 pairs, 4 of them in several polygons, which cannot
    be (each has two pairs at least). The check catches it and every point is grouped, with the hand counts."""
    from mapsmith_opensource.join_ops import points_in_polygons_first as first
    from mapsmith_opensource.join_ops import points_in_polygons_sql as sql

    monkeypatch.setattr(sql, "GROUPED_MAX_POINTS", 0)  # the first-polygon path
    real = first.neighbours
    monkeypatch.setattr(first, "neighbours", lambda *a: (np.full(2, None, dtype=object), real(*a)[1]))
    write_case(workspace, zones=OVERLAP_ZONES, extra=IN_OVERLAP)
    result = make_app(MAPSMITH_ENGINE="sedonadb").run("count_in_polygons", {**ARGS, "output_path": "m.parquet"})
    assert GROUPED_PATH in _path_note(workspace, "m.parquet")
    assert read(workspace / "m.parquet")["point_count"].tolist() == [5, 6]
    assert {k: result.answer[k] for k in OVERLAP_ANSWER} == OVERLAP_ANSWER


@SEDONADB
@pytest.mark.parametrize(("setting", "value"), [("FIRST_POLYGON_MAX_COORDINATES", 4), ("ASIDE_MAX_POINTS", 1)])
def test_past_the_first_polygon_limits_every_point_is_grouped(
    make_app: Callable[..., Any], workspace: Path, monkeypatch: pytest.MonkeyPatch, setting: str, value: int
) -> None:
    """Polygons whose neighbours have more coordinates than the limit (Z1 and Z2 meet: each pair's point is tested
    against one box, 5 coordinates), or more points on their first polygon's boundary than the limit (B and D: two),
    send the run to the grouping of every point: the same hand counts."""
    from mapsmith_opensource.join_ops import points_in_polygons_first as first
    from mapsmith_opensource.join_ops import points_in_polygons_sql as sql

    monkeypatch.setattr(sql, "GROUPED_MAX_POINTS", 0)  # the first-polygon path
    monkeypatch.setattr(first, setting, value)
    write_case(workspace, zones=OVERLAP_ZONES, extra=IN_OVERLAP)
    result = make_app(MAPSMITH_ENGINE="sedonadb").run("count_in_polygons", {**ARGS, "output_path": "l.parquet"})
    assert GROUPED_PATH in _path_note(workspace, "l.parquet")
    assert {k: result.answer[k] for k in OVERLAP_ANSWER} == OVERLAP_ANSWER


@SEDONADB
def test_only_the_points_on_their_first_polygons_boundary_are_asked_again(
    make_app: Callable[..., Any], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In OVERLAP_ZONES, B (100,20) and D (95,0) are in both zones and on the boundary of Z1, their first: they are
    the two points asked again (B inside Z2, D inside neither); A and C are inside Z1 and are not."""
    from mapsmith_opensource.join_ops import points_in_polygons_first as first
    from mapsmith_opensource.join_ops import points_in_polygons_sql as sql

    monkeypatch.setattr(sql, "GROUPED_MAX_POINTS", 0)  # the first-polygon path
    asked: list[list[tuple[float, float]]] = []
    real = first.interior_sql
    monkeypatch.setattr(
        first, "interior_sql", lambda xs, ys, z: asked.append(sorted(zip(xs, ys, strict=True))) or real(xs, ys, z)
    )
    write_case(workspace, zones=OVERLAP_ZONES, extra=IN_OVERLAP)
    result = make_app(MAPSMITH_ENGINE="sedonadb").run("count_in_polygons", {**ARGS, "output_path": "a.parquet"})
    assert asked == [sorted([g(100, 20), g(95, 0)])]
    assert (result.answer["points_in_overlapping_polygons"], result.answer["points_on_shared_boundaries"]) == (3, 1)


@pytest.mark.parametrize("engine", ENGINES)
def test_interior_sql_reads_the_coordinates_back_exactly(engine: str) -> None:
    """A box whose left edge is x = 0.1 + 0.2 (0.30000000000000004, one double above 0.3): the point given at that x
    is on the edge (it meets the box, not its interior), the point at 0.3 is outside, and one at 0.5 inside. A
    coordinate read one double off would move the first point inside or out."""
    import pyarrow as pa
    import shapely

    from mapsmith_opensource.join_ops.points_in_polygons_first import interior_sql

    edge = 0.1 + 0.2
    wkb = shapely.to_wkb(box(edge, 0, 1, 1))
    query = interior_sql([edge, 0.3, 0.5], [0.5, 0.5, 0.5], "zones")
    if engine == "duckdb":
        from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

        con = duckdb_database().cursor()
        con.register("raw", pa.table({"n": [0], "wkb": pa.array([wkb], type=pa.binary())}))
        con.execute("CREATE TEMP VIEW zones AS SELECT n, ST_GeomFromWKB(wkb) AS g FROM raw")
        found = con.execute(query).to_arrow_table()
        con.close()
    else:
        from mapsmith_opensource.sedonadb_ops import _connection, _table

        sd = _connection()
        sd.create_data_frame(_table(np.array([box(edge, 0, 1, 1)], dtype=object))).to_view("zones", overwrite=True)
        try:
            found = sd.sql(query).to_arrow_table()
        finally:
            sd.drop_view("zones")
    assert sorted(zip(*found.to_pydict().values(), strict=True)) == [(0, False), (2, True)]


def test_neighbours_by_hand() -> None:
    from mapsmith_opensource.join_ops.points_in_polygons_first import meeting_pairs, neighbour_coordinates, neighbours

    a, b, c, far = box(0, 0, 10, 10), box(8, 0, 20, 10), box(10, 10, 12, 12), box(50, 50, 51, 51)
    geoms, left, right = meeting_pairs([a, b, c, far])
    assert sorted(zip(left.tolist(), right.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 2)]
    lower, higher = neighbours(geoms, left, right)
    # a meets b and c (at the corner (10,10)); b meets c along y = 10; far meets none
    members = [[sorted(m.wkt for m in r.geoms) if r is not None else None for r in side] for side in (lower, higher)]
    assert members[0] == [None, [a.wkt], sorted([a.wkt, b.wkt]), None]
    assert members[1] == [sorted([b.wkt, c.wkt]), [c.wkt], None, None]
    # a, b and c each meet two boxes of 5 coordinates: 10 each, far 0; weighted by the areas 100, 120, 4 and 1
    assert neighbour_coordinates(geoms, left, right) == pytest.approx((10 * 100 + 10 * 120 + 10 * 4) / 225)
    # a polygon without geometry weighs nothing (its area is NaN): a and b meet one box each, 5 coordinates
    assert neighbour_coordinates(*meeting_pairs([a, b, None])) == pytest.approx(5.0)


@pytest.mark.parametrize("engine", ENGINES)
def test_overlapping_multipolygon_zones(make_app: Callable[..., Any], workspace: Path, engine: str) -> None:
    """OVERLAP_ZONES with Z2 a multipolygon: the box 90..200 and a far one, 300..400 x 0..100, which holds F (350,50).
    By hand: Z1 holds Q0, A, B, C, D (5), Z2 Q1, Q2, A, B, C, D, F (7); 8 points counted, A-D in both zones, A, B
    and C inside one of them, D on a boundary they share. The GeoPandas engine agrees."""
    from shapely.geometry import MultiPolygon

    zones = [OVERLAP_ZONES[0], MultiPolygon([OVERLAP_ZONES[1], box(*g(300, 0), *g(400, 100))])]
    write_case(workspace, zones=zones, extra=[*IN_OVERLAP, (Point(g(350, 50)), 2.0)])
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "mp.parquet"})
    assert PATH[engine] in _path_note(workspace, "mp.parquet")
    assert read(workspace / "mp.parquet")["point_count"].tolist() == [5, 7]
    expected = {
        "points": 11,
        "points_counted": 8,
        "points_in_no_polygon": 3,
        "points_in_several_polygons": 4,
        "points_in_overlapping_polygons": 3,
        "points_on_shared_boundaries": 1,
        "total_point_count": 12,
        "distinct_point_count": 8,
    }
    assert {k: result.answer[k] for k in expected} == expected
    _geopandas_agrees(make_app, workspace, "mp.parquet", expected)


def test_interiors_disjoint_by_hand() -> None:
    from mapsmith_opensource.join_ops.points_in_polygons_sql import interiors_disjoint

    a, edge, corner = box(0, 0, 1, 1), box(1, 0, 2, 1), box(1, 1, 2, 2)
    assert interiors_disjoint([a, edge, corner])  # sharing an edge or a corner only
    assert interiors_disjoint([a])
    assert not interiors_disjoint([a, box(0.5, 0.5, 1.5, 1.5)])  # overlap
    assert not interiors_disjoint([box(0, 0, 4, 4), box(1, 1, 2, 2), box(10, 10, 11, 11)])  # one inside another
    assert not interiors_disjoint([a, box(0, 0, 1, 1)])  # the same square twice
    assert interiors_disjoint([a, None, edge])  # a polygon without geometry meets none


@pytest.mark.parametrize("first_block", [1, 2, 256])
def test_interiors_disjoint_in_blocks(monkeypatch: pytest.MonkeyPatch, first_block: int) -> None:
    """Eight unit squares in a row, each sharing an edge with the next: interiors disjoint across every block. With
    the last one moved half a unit left it overlaps the seventh: the pair (6, 7) is tested in the block holding 6,
    the last block whatever its first size (blocks from 1: 0, 1-2, 3-6, 7; from 2: 0-1, 2-5, 6-7)."""
    from mapsmith_opensource.join_ops import points_in_polygons_sql as sql

    monkeypatch.setattr(sql, "FIRST_BLOCK", first_block)
    row = [box(n, 0, n + 1, 1) for n in range(8)]
    assert sql.interiors_disjoint(row)
    assert not sql.interiors_disjoint([*row[:7], box(6.5, 0, 7.5, 1)])
    assert not sql.interiors_disjoint([box(0.5, 0, 1.5, 1), *row[1:]])  # the pair (0, 1), in the first block


@pytest.mark.parametrize("engine", ENGINES)
def test_a_multipoint_across_two_zones_takes_the_grouping_sets_query(
    make_app: Callable[..., Any], workspace: Path, engine: str
) -> None:
    """Trap: M, a multipoint with one member in Z1 (20,20) and one in Z2 (180,20), both in the interiors of
    disjoint zones, is one feature in two polygons: counts [2, 3], 4 points counted (Q0, Q1, Q2, M), M in
    several. The plain queries would count it as two points; the layer's types (MultiPoint) send the run to the
    per-point grouping, and the GeoPandas engine gives the same."""
    from shapely.geometry import MultiPoint

    write_case(workspace, extra=[(MultiPoint([g(20, 20), g(180, 20)]), 3.0)])
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "m.parquet"})
    assert result.engine["name"] == NAME[engine]
    assert "GROUP BY GROUPING SETS" in _path_note(workspace, "m.parquet")
    assert read(workspace / "m.parquet")["point_count"].tolist() == [2, 3]
    assert (result.answer["points_counted"], result.answer["points_in_several_polygons"]) == (4, 1)
    assert (result.answer["total_point_count"], result.answer["distinct_point_count"]) == (5, 4)
    ref = make_app(MAPSMITH_SEDONADB_MIN_FEATURES=str(10**12)).run(
        "count_in_polygons", {**ARGS, "output_path": "mref.parquet"}
    )
    keys = ("points_counted", "points_in_several_polygons", "total_point_count", "distinct_point_count")
    assert {k: ref.answer[k] for k in keys} == {k: result.answer[k] for k in keys}


def test_only_single_points_allow_the_plain_queries() -> None:
    from mapsmith_opensource.join_ops.points_in_polygons_sql import single_points

    assert single_points(("Point",)) and single_points(("Point Z",))
    assert not single_points(("MultiPoint",)) and not single_points(("Point", "MultiPoint"))
    assert not single_points(()) and not single_points(None)  # unknown types: the safe query


@pytest.mark.parametrize("engine", ENGINES)
def test_no_point_in_overlapping_zones(make_app: Callable[..., Any], workspace: Path, engine: str) -> None:
    """OVERLAP_ZONES and points none of which meets a zone: Q4 (900,900) far away, Q3 without geometry, Q5 invalid
    (a NaN coordinate). The grouping (or the first-polygon query) then has no pair at all: counts [0, 0], 3 points,
    none counted, one without geometry, both zones without points; summarized, each zone's v has count and sum 0,
    no mean and no null."""
    write_layer(workspace / "zones.parquet", OVERLAP_ZONES, UTM, zid=["Z1", "Z2"])
    points = [Point(g(900, 900)), None, Point(g(150, math.nan))]
    write_layer(workspace / "points.parquet", points, UTM, pid=["Q4", "Q3", "Q5"], v=[9.0, 7.0, 2.0])
    result = make_app(MAPSMITH_ENGINE=NAME[engine]).run("count_in_polygons", {**ARGS, "output_path": "n.parquet"})
    assert result.engine["name"] == NAME[engine]
    assert PATH[engine] in _path_note(workspace, "n.parquet")
    assert read(workspace / "n.parquet")["point_count"].tolist() == [0, 0]
    expected = {
        "points": 3,
        "points_counted": 0,
        "points_in_no_polygon": 3,
        "points_without_geometry": 1,
        "points_in_several_polygons": 0,
        "polygons_with_no_points": 2,
    }
    assert {k: result.answer[k] for k in expected} == expected
    args = {**ARGS, "field": "v", "statistics": "mean,sum,count", "output_path": "ns.parquet"}
    make_app(MAPSMITH_ENGINE=NAME[engine]).run("summarize_points_in_polygons", args)
    out = read(workspace / "ns.parquet")
    assert (out["v_count"].tolist(), out["v_sum"].tolist()) == ([0, 0], [0.0, 0.0])  # no value: count and sum 0
    assert out["v_mean"].isna().all() and out["v_null_count"].tolist() == [0, 0]
