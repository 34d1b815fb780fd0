"""The per-zone, per-polygon and per-feature answers page like measure_area's (issue 19).

Hand-worked layouts:

* zonal_statistics: a 5 x 5 raster of 1 m cells in EPSG:32610, top-left corner (0, 5), whose cell in
  row r (from the top) and column c holds r * 5 + c + 1; zone i (0..24) is exactly the cell of row
  i // 5, column i % 5, so its sum is i + 1. Offset 20 is zones 20..24: sums 21..25, and the last page.
* count_in_polygons: three 10 m squares at x = 0, 20, 40 (ids 1, 2, 3) in EPSG:32610; points at
  (25, 5) and (27, 5) fall in square 2 and (45, 5) in square 3, none in square 1.
* measure_length: five lines along the equator in EPSG:4326; line k (k = 1..5) spans 0.01 * k degrees
  of longitude, so its geodesic length is k * a * 0.01 * pi / 180 = k * 1113.194907932736 m
  (a = 6,378,137 m, WGS 84's equatorial radius: along the equator the geodesic is the equator's arc).
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rasterio
from affine import Affine
from shapely.geometry import LineString, Point, box

from layers import write_layer

UTM = "EPSG:32610"
X0, Y0 = 500_000.0, 5_000_000.0
EQUATOR_CENTIDEGREE_M = 6_378_137.0 * 0.01 * math.pi / 180  # 1113.194907932736


def _zones_and_grid(ws: Path) -> dict[str, Any]:
    values = np.arange(1, 26, dtype="float32").reshape(5, 5)
    with rasterio.open(
        ws / "grid.tif",
        "w",
        driver="GTiff",
        width=5,
        height=5,
        count=1,
        dtype="float32",
        crs=UTM,
        transform=Affine(1.0, 0, 0.0, 0, -1.0, 5.0),
        nodata=-9999.0,
    ) as dst:
        dst.write(values[np.newaxis])
    cells = [box(i % 5, 4 - i // 5, i % 5 + 1, 5 - i // 5) for i in range(25)]
    write_layer(ws / "zones.gpkg", cells, UTM, zone=list(range(25)))
    return {"input_path": "zones.gpkg", "raster_path": "grid.tif", "statistics": "sum"}


def test_zonal_statistics_pages_its_zones(app, workspace: Path) -> None:
    base = _zones_and_grid(workspace)
    last = app.run("zonal_statistics", {**base, "output_path": "z1.gpkg", "offset": 20}).answer
    assert [r["zone"] for r in last["rows"]] == [20, 21, 22, 23, 24]
    assert [r["zonal_sum"] for r in last["rows"]] == pytest.approx([21.0, 22.0, 23.0, 24.0, 25.0], abs=1e-9)
    assert last["page"] == {
        "offset": 20,
        "limit": 100,
        "returned": 5,
        "total": 25,
        "complete": True,
        "next_offset": None,
    }
    assert last["zones"] == 25 and "rows_truncated" not in last  # the counts still cover every zone

    middle = app.run("zonal_statistics", {**base, "output_path": "z2.gpkg", "offset": 5, "limit": 3}).answer
    assert [r["zonal_sum"] for r in middle["rows"]] == pytest.approx([6.0, 7.0, 8.0], abs=1e-9)
    assert middle["page"]["next_offset"] == 8 and middle["page"]["complete"] is False


def test_zonal_statistics_without_a_page_lists_every_zone(app, workspace: Path) -> None:
    base = _zones_and_grid(workspace)
    whole = app.run("zonal_statistics", {**base, "output_path": "z3.gpkg"}).answer
    assert [r["zonal_sum"] for r in whole["rows"]] == pytest.approx([float(i) for i in range(1, 26)], abs=1e-9)
    assert whole["page"]["total"] == 25 and whole["page"]["complete"] is True


def _squares_and_points(ws: Path, suffix: str) -> dict[str, str]:
    squares = [box(X0 + x, Y0, X0 + x + 10, Y0 + 10) for x in (0, 20, 40)]
    points = [Point(X0 + 25, Y0 + 5), Point(X0 + 27, Y0 + 5), Point(X0 + 45, Y0 + 5)]
    write_layer(ws / f"squares{suffix}", squares, UTM, id=[1, 2, 3])
    write_layer(ws / f"points{suffix}", points, UTM, pid=[1, 2, 3])
    return {"input_path": f"squares{suffix}", "points_path": f"points{suffix}"}


def test_count_in_polygons_pages_its_polygons(app, workspace: Path) -> None:
    base = _squares_and_points(workspace, ".gpkg")
    one = app.run("count_in_polygons", {**base, "output_path": "c1.gpkg", "offset": 1, "limit": 1}).answer
    assert one["rows"] == [{"id": 2, "point_count": 2}]
    assert one["page"] == {"offset": 1, "limit": 1, "returned": 1, "total": 3, "complete": False, "next_offset": 2}
    assert one["total_point_count"] == 3  # every polygon's points, whatever the page
    whole = app.run("count_in_polygons", {**base, "output_path": "c2.gpkg"}).answer
    assert [(r["id"], r["point_count"]) for r in whole["rows"]] == [(1, 0), (2, 2), (3, 1)]
    assert whole["page"]["complete"] is True and "rows_truncated" not in whole


def test_count_in_polygons_pages_the_same_on_sedonadb(make_app, workspace: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mapsmith_opensource import OPERATION_MODULES, sedonadb_ops

    if sedonadb_ops.missing_modules():
        pytest.skip(f"SedonaDB not installed: {sedonadb_ops.missing_modules()}")
    for name in OPERATION_MODULES:
        module = importlib.import_module(f"mapsmith_opensource.{name}")
        kept = tuple(r for r in module.REGISTRATIONS if r.operation != "count_in_polygons" or r.engine == "sedonadb")
        monkeypatch.setattr(module, "REGISTRATIONS", kept)
    app = make_app(MAPSMITH_SEDONADB_MIN_FEATURES="0")
    monkeypatch.undo()
    base = _squares_and_points(workspace, ".parquet")
    result = app.run("count_in_polygons", {**base, "output_path": "c3.parquet", "offset": 2, "limit": 5})
    assert result.engine["name"] == "sedonadb"
    assert result.answer["rows"] == [{"id": 3, "point_count": 1}]
    assert result.answer["page"]["total"] == 3 and result.answer["page"]["complete"] is True


def test_measure_length_pages_its_features(app, workspace: Path) -> None:
    lines = [LineString([(k, 0), (k + 0.01 * k, 0)]) for k in range(1, 6)]
    write_layer(workspace / "lines.gpkg", lines, "EPSG:4326", id=[1, 2, 3, 4, 5])
    answer = app.run("measure_length", {"input_path": "lines.gpkg", "output_path": "l1.gpkg", "offset": 3}).answer
    assert [r["id"] for r in answer["rows"]] == [4, 5]
    assert [r["length_m"] for r in answer["rows"]] == pytest.approx(
        [4 * EQUATOR_CENTIDEGREE_M, 5 * EQUATOR_CENTIDEGREE_M], rel=1e-9
    )
    assert answer["page"] == {
        "offset": 3,
        "limit": 100,
        "returned": 2,
        "total": 5,
        "complete": True,
        "next_offset": None,
    }
    assert answer["total_length_m"] == pytest.approx(15 * EQUATOR_CENTIDEGREE_M, rel=1e-9)
    first = app.run("measure_length", {"input_path": "lines.gpkg", "output_path": "l2.gpkg", "limit": 2}).answer
    assert [r["id"] for r in first["rows"]] == [1, 2] and first["page"]["next_offset"] == 2


def test_cluster_sizes_page_and_the_count_covers_every_cluster(app, workspace: Path) -> None:
    # points at x = 0, 5, 10 chain (5 m <= 6 m) into cluster 1 of 3; x = 100 is cluster 2 of 1.
    points = [Point(X0 + x, Y0) for x in (0, 5, 10, 100)]
    write_layer(workspace / "pts.gpkg", points, UTM, id=[1, 2, 3, 4])
    base = {"input_path": "pts.gpkg", "distance_meters": 6}
    second = app.run("cluster_points_by_distance", {**base, "output_path": "k1.gpkg", "offset": 1, "limit": 1}).answer
    assert second["cluster_sizes"] == [{"cluster_id": 2, "size": 1}]
    assert second["page"] == {"offset": 1, "limit": 1, "returned": 1, "total": 2, "complete": True, "next_offset": None}
    assert second["cluster_count"] == 2 and second["largest_cluster_size"] == 3 and "clusters_truncated" not in second


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="pyspark is not installed")
def test_dissolve_on_spark_pages_its_groups_with_their_own_feature_counts(workspace: Path) -> None:
    # six 10 m squares keyed a, b, a, c, c, c: groups sorted by key are a (2 features), b (1), c (3);
    # offset 1, limit 2 is b and c, each with its own count (Spark sends back only that page's sizes).
    from mapsmith.app import MapSmith

    squares = [box(X0 + 20 * i, Y0, X0 + 20 * i + 10, Y0 + 10) for i in range(6)]
    write_layer(workspace / "keyed.parquet", squares, UTM, key=["a", "b", "a", "c", "c", "c"])
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_STACK": "sedona"})
    arguments = {"input_path": "keyed.parquet", "by_fields": "key", "output_path": "d.parquet", "offset": 1, "limit": 2}
    result = app.run("dissolve_layer", arguments)
    assert result.engine["name"] == "apache-sedona"
    assert [(g["key"], g["feature_count"]) for g in result.answer["groups"]] == [("b", 1), ("c", 3)]
    assert result.answer["page"] == {
        "offset": 1,
        "limit": 2,
        "returned": 2,
        "total": 3,
        "complete": True,
        "next_offset": None,
    }
    assert result.answer["group_count"] == 3 and "groups_truncated" not in result.answer


def test_summarize_points_pages_its_polygons(app, workspace: Path) -> None:
    # values 3 and 4 fall in square 2 (sum 7), 10 in square 3 (sum 10); the last page is square 3 alone.
    squares = [box(X0 + x, Y0, X0 + x + 10, Y0 + 10) for x in (0, 20, 40)]
    points = [Point(X0 + 25, Y0 + 5), Point(X0 + 27, Y0 + 5), Point(X0 + 45, Y0 + 5)]
    write_layer(workspace / "sq.gpkg", squares, UTM, id=[1, 2, 3])
    write_layer(workspace / "pv.gpkg", points, UTM, v=[3.0, 4.0, 10.0])
    base = {"input_path": "sq.gpkg", "points_path": "pv.gpkg", "field": "v", "statistics": "sum"}
    last = app.run("summarize_points_in_polygons", {**base, "output_path": "s1.gpkg", "offset": 2}).answer
    assert [(r["id"], r["v_sum"]) for r in last["rows"]] == [(3, 10.0)]
    assert last["page"]["total"] == 3 and last["page"]["returned"] == 1 and last["page"]["complete"] is True
    whole = app.run("summarize_points_in_polygons", {**base, "output_path": "s2.gpkg"}).answer
    assert [r["v_sum"] for r in whole["rows"]][1:] == [7.0, 10.0]


def test_simplify_layer_pages_its_per_feature_rows(app, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    # Three straight two-vertex lines in UTM: nothing to remove, 2 vertices before and after each.
    lines = [LineString([(X0, Y0 + 10 * k), (X0 + 100, Y0 + 10 * k)]) for k in range(3)]
    write_layer(workspace / "straight.gpkg", lines, UTM, id=[1, 2, 3])
    args = {"input_path": "straight.gpkg", "tolerance_meters": 1, "output_path": "s.gpkg", "offset": 1, "limit": 1}
    answer = app.run("simplify_layer", args).answer
    assert [(r["feature_index"], r["vertices_before"], r["vertices_after"]) for r in answer["rows"]] == [(1, 2, 2)]
    assert answer["page"] == {"offset": 1, "limit": 1, "returned": 1, "total": 3, "complete": False, "next_offset": 2}
    # the totals still cover every feature: 3 lines x 2 vertices
    assert (answer["feature_count"], answer["vertices_before"]) == (3, 6)
