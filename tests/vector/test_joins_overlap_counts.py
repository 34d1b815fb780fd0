"""count_in_polygons over polygons that overlap or share a boundary, on the GeoPandas and SedonaDB engines:
the note says which case each point counted more than once is in, and the total is given beside the
distinct points with a warning.

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), metres from it:

    A = 0..100 x 0..100 and B = 50..150 x 0..100 overlap in 50..100 x 0..100
    C = 200..300 x 0..100 and D = 300..400 x 0..100 share the edge x = 300
    P1 (75, 50)  inside A and inside B (their overlap)    -> counted in A and B
    P2 (300, 50) on the edge C and D share                 -> counted in C and D
    P3 (250, 50) inside C only                             -> counted in C
    P4 (600, 50) in no polygon

Counts: A 1, B 1, C 2, D 1; their total 5; distinct points counted 3 (P1, P2, P3): P1 is the one point
inside overlapping polygons, P2 the one on a shared boundary.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def sedonadb_missing() -> list[str]:
    return importlib.import_module("mapsmith_opensource.sedonadb_ops").missing_modules()


ENGINES = [
    pytest.param("geopandas", ".gpkg", id="geopandas"),
    pytest.param(
        "sedonadb",
        ".parquet",
        id="sedonadb-direct",
        marks=pytest.mark.skipif(bool(sedonadb_missing()), reason="no sedonadb"),
    ),
    pytest.param(
        "sedonadb", ".gpkg", id="sedonadb-wkb", marks=pytest.mark.skipif(bool(sedonadb_missing()), reason="no sedonadb")
    ),
]


def square(x1: float, x2: float):  # type: ignore[no-untyped-def]
    return box(X0 + x1, Y0, X0 + x2, Y0 + 100)


def points(workspace: Path, ext: str, xs: list[float]) -> str:
    write_layer(workspace / f"points{ext}", [Point(X0 + x, Y0 + 50) for x in xs], UTM, pid=list(range(1, len(xs) + 1)))
    return f"points{ext}"


def count(make_app, workspace: Path, engine: str, points_path: str):  # type: ignore[no-untyped-def]
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0") if engine == "sedonadb" else make_app()
    result = app.run(
        "count_in_polygons",
        {"input_path": "zones.gpkg", "points_path": points_path, "output_path": "counts.gpkg"},
    )
    assert result.engine["name"] == engine
    return result


@pytest.mark.parametrize(("engine", "ext"), ENGINES)
def test_overlap_and_shared_boundary_are_named_and_the_total_comes_with_the_distinct_points(
    make_app, workspace: Path, engine: str, ext: str
) -> None:
    write_layer(
        workspace / "zones.gpkg",
        [square(0, 100), square(50, 150), square(200, 300), square(300, 400)],
        UTM,
        name=["A", "B", "C", "D"],
    )
    result = count(make_app, workspace, engine, points(workspace, ext, [75, 300, 250, 600]))
    out = read(workspace / "counts.gpkg")
    assert dict(zip(out["name"], out["point_count"], strict=True)) == {"A": 1, "B": 1, "C": 2, "D": 1}
    answer = result.answer
    assert answer["total_point_count"] == 5 and answer["distinct_point_count"] == 3
    assert answer["points_in_several_polygons"] == 2
    assert answer["points_in_overlapping_polygons"] == 1 and answer["points_on_shared_boundaries"] == 1
    assert answer["points_in_no_polygon"] == 1
    note = next(n for n in result.notes if n.startswith("3 of 4 points lie in at least one polygon"))
    assert note.endswith(
        "2 are counted in several polygons, once in each: 1 lie inside polygons that overlap each other and "
        "1 lie on a boundary several polygons share"
    )
    (warning,) = [w for w in result.warnings if w["code"] == "TOTAL_COUNTS_OVERLAPS"]
    assert "add up to 5, but they hold 3 distinct points" in warning["message"]
    assert "1 points lie inside polygons that overlap each other and 1 on a boundary" in warning["message"]
    record = manifest(workspace / "counts.gpkg")
    assert record["parameters"]["x-mapsmith:join_counts"]["points_in_overlapping_polygons"] == 1


@pytest.mark.parametrize(("engine", "ext"), ENGINES)
def test_two_points_in_the_overlap_only(make_app, workspace: Path, engine: str, ext: str) -> None:
    # A and B overlap; P1 (75, 50) and P2 (100, 50) -- the latter on A's edge x = 100, inside B -- are both
    # in the overlap (B's interior holds A's edge there): two points inside overlapping polygons, none on a
    # shared boundary. Counts A 2, B 2; total 4, distinct 2.
    write_layer(workspace / "zones.gpkg", [square(0, 100), square(50, 150)], UTM, name=["A", "B"])
    result = count(make_app, workspace, engine, points(workspace, ext, [75, 100]))
    answer = result.answer
    assert [r["point_count"] for r in answer["rows"]] == [2, 2]
    assert answer["total_point_count"] == 4 and answer["distinct_point_count"] == 2
    assert answer["points_in_overlapping_polygons"] == 2 and answer["points_on_shared_boundaries"] == 0
    assert any(n.endswith("once in each: 2 lie inside polygons that overlap each other") for n in result.notes)


@pytest.mark.parametrize(("engine", "ext"), ENGINES)
def test_disjoint_polygons_have_no_such_note_and_no_warning(make_app, workspace: Path, engine: str, ext: str) -> None:
    # The clean twin: A = 0..100 and C = 200..300 do not meet; P (50, 50) in A, P3 (250, 50) in C.
    write_layer(workspace / "zones.gpkg", [square(0, 100), square(200, 300)], UTM, name=["A", "C"])
    result = count(make_app, workspace, engine, points(workspace, ext, [50, 250]))
    answer = result.answer
    assert [r["point_count"] for r in answer["rows"]] == [1, 1]
    assert answer["total_point_count"] == answer["distinct_point_count"] == 2
    assert answer["points_in_several_polygons"] == 0
    assert answer["points_in_overlapping_polygons"] == answer["points_on_shared_boundaries"] == 0
    assert "TOTAL_COUNTS_OVERLAPS" not in [w["code"] for w in result.warnings]
    note = next(n for n in result.notes if n.startswith("2 of 2 points lie in at least one polygon"))
    assert note.endswith("(not counted anywhere; 0 of them have no geometry)")
    assert not any("several polygons" in n or "overlap" in n for n in result.notes)
