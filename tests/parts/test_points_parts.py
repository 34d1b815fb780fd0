"""count_in_polygons and summarize_points_in_polygons with points_path a folder of GeoParquet parts: DuckDB and
SedonaDB read the parts themselves (no point passes through Python), GeoPandas reads the folder whole, and all
three give the same hand-worked answer and record.

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre:

    A = 0..20 x 0..20, B = 10..30 x 0..20 (they overlap on 10..20 x 0..20)
    part-0: P0 (15,10) v 1 in A and B;  P1 (5,5) v 2 in A
    part-1: P2 (15,5) v 3 in A and B;   P3 (25,5) v 4 in B
    part-2: P4 (50,50) v 5 in neither

Worked by hand: A holds P0, P1, P2 and B holds P0, P2, P3, so the counts are [3, 3], the total 6, the distinct
points counted 4, two of them inside polygons that overlap; sums A 1+2+3 = 6, B 1+3+4 = 8, means 2 and 8/3.
The trap: P0 and P2 are both row 0 of their part, so an engine telling points apart by the row's position in
its file alone would take them for one point in four polygons (several 1, distinct 3).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
ENGINES = ("geopandas", "duckdb", "sedonadb")
COUNTS = {
    "polygons": 2,
    "points": 5,
    "points_counted": 4,
    "points_in_no_polygon": 1,
    "points_without_geometry": 0,
    "points_in_several_polygons": 2,
    "points_in_overlapping_polygons": 2,
    "points_on_shared_boundaries": 0,
    "polygons_with_no_points": 0,
    "total_point_count": 6,
    "distinct_point_count": 4,
}


def g(x: float, y: float) -> Point:
    return Point(X0 + x, Y0 + y)


def write_case(workspace: Path, hive: bool = False) -> str:
    write_layer(
        workspace / "zones.parquet",
        [box(X0, Y0, X0 + 20, Y0 + 20), box(X0 + 10, Y0, X0 + 30, Y0 + 20)],
        UTM,
        zid=["A", "B"],
    )
    folder = workspace / ("hive.parquet" if hive else "points.parquet")
    rows = [([g(15, 10), g(5, 5)], [1.0, 2.0]), ([g(15, 5), g(25, 5)], [3.0, 4.0]), ([g(50, 50)], [5.0])]
    for n, (points, values) in enumerate(rows):
        where = folder / f"batch={n}" if hive else folder
        where.mkdir(parents=True, exist_ok=True)
        write_layer(where / f"part-{n}.parquet", points, UTM, v=values)
    return folder.name


@pytest.mark.parametrize("engine", ENGINES)
def test_count_reads_the_parts_with_the_hand_counts(engine: str, make_app: Callable[..., Any], workspace: Path) -> None:
    folder = write_case(workspace)
    arguments = {"input_path": "zones.parquet", "points_path": folder, "output_path": f"c_{engine}.parquet"}
    result = make_app(MAPSMITH_ENGINE=engine).run("count_in_polygons", arguments)
    assert result.engine["name"] == engine
    paths = [n for n in manifest(workspace / f"c_{engine}.parquet")["notes"] if n.startswith("engine path:")]
    if engine != "geopandas":  # the engine read the parts itself and aggregated there
        assert paths and paths[0].startswith("engine path: direct, aggregated")
    assert read(workspace / f"c_{engine}.parquet")["point_count"].tolist() == [3, 3]
    assert {k: result.answer[k] for k in COUNTS} == COUNTS
    assert [w["code"] for w in result.warnings] == ["TOTAL_COUNTS_OVERLAPS"]


@pytest.mark.parametrize("engine", ("duckdb", "sedonadb"))
def test_summary_of_the_parts_is_geopandas_record(engine: str, make_app: Callable[..., Any], workspace: Path) -> None:
    import pandas as pd

    folder = write_case(workspace)
    arguments = {"input_path": "zones.parquet", "points_path": folder, "field": "v", "statistics": "count,sum,mean,max"}
    for name in (engine, "geopandas"):
        result = make_app(MAPSMITH_ENGINE=name).run(
            "summarize_points_in_polygons", {**arguments, "output_path": f"s_{name}.parquet"}
        )
        assert result.engine["name"] == name
    out = read(workspace / f"s_{engine}.parquet")
    assert out["v_count"].tolist() == [3, 3]
    assert out["v_sum"].tolist() == [6.0, 8.0]
    assert out["v_mean"].tolist() == pytest.approx([2.0, 8 / 3], rel=1e-15)
    assert out["v_max"].tolist() == [3.0, 4.0]
    pd.testing.assert_frame_equal(out, read(workspace / "s_geopandas.parquet"), rtol=1e-15)
    mine, theirs = manifest(workspace / f"s_{engine}.parquet"), manifest(workspace / "s_geopandas.parquet")
    timing = "x-mapsmith:engine_seconds"
    assert {k: v for k, v in mine["parameters"].items() if k != timing} == {
        k: v for k, v in theirs["parameters"].items() if k != timing
    }
    assert mine["verification"] == theirs["verification"]
    assert mine["inputs"] == theirs["inputs"]  # the folder digested by the listing rule either way


@pytest.mark.parametrize("engine", ("duckdb", "sedonadb"))
def test_a_hive_folder_is_read_by_the_engine_with_the_hand_counts(
    engine: str, make_app: Callable[..., Any], workspace: Path
) -> None:
    """key=value/ subfolders add a field (batch) the counts never read: the engine reads the parts itself and
    gives the hand counts and the GeoPandas engine's record (this request crashed in SedonaDB's eligibility
    once: 'path is a directory'; then it went to GeoPandas)."""
    folder = write_case(workspace, hive=True)
    arguments = {"input_path": "zones.parquet", "points_path": folder}
    result = make_app(MAPSMITH_ENGINE=engine).run("count_in_polygons", {**arguments, "output_path": "h.parquet"})
    assert result.engine["name"] == engine
    (path,) = [n for n in manifest(workspace / "h.parquet")["notes"] if n.startswith("engine path:")]
    assert path.startswith("engine path: direct, aggregated")
    assert read(workspace / "h.parquet")["point_count"].tolist() == [3, 3]
    assert {k: result.answer[k] for k in COUNTS} == COUNTS
    make_app(MAPSMITH_ENGINE="geopandas").run("count_in_polygons", {**arguments, "output_path": "r.parquet"})
    mine, theirs = manifest(workspace / "h.parquet"), manifest(workspace / "r.parquet")
    assert mine["verification"] == theirs["verification"]
    assert mine["inputs"] == theirs["inputs"]


def test_a_value_field_that_is_a_hive_key_goes_to_geopandas_with_the_reason(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    """Trap: summarising batch, the folder's key, which the direct path does not read: the GeoPandas engine takes
    the run, the reason recorded, and sums the key as the int32 every engine reads it as (parts.hive_key_types;
    it was a category before, refused FIELD_NOT_NUMERIC): A holds P0, P1 (batch 0) and P2 (batch 1), sum 1; B holds
    P0 (0), P2 and P3 (1), sum 2. The clean twin (v, a field of the parts) is SedonaDB's when named, with the hand
    sums."""
    folder = write_case(workspace, hive=True)
    arguments = {"input_path": "zones.parquet", "points_path": folder, "statistics": "count,sum"}
    keyed = make_app().run("summarize_points_in_polygons", {**arguments, "field": "batch", "output_path": "k.parquet"})
    assert keyed.engine["name"] == "geopandas"
    out = read(workspace / "k.parquet")
    assert (out["batch_count"].tolist(), out["batch_sum"].tolist()) == ([3, 3], [1.0, 2.0])
    choice = manifest(workspace / "k.parquet")["x-mapsmith:engine_choice"]
    (sedona,) = [p for p in choice["passed_over"] if p["engine"] == "sedonadb"]
    assert "field 'batch' is points_path's partition key (key=value/ subfolders)" in sedona["reason"]
    twin = make_app(MAPSMITH_ENGINE="sedonadb")
    result = twin.run("summarize_points_in_polygons", {**arguments, "field": "v", "output_path": "v.parquet"})
    assert result.engine["name"] == "sedonadb"
    assert read(workspace / "v.parquet")["v_sum"].tolist() == [6.0, 8.0]


@pytest.mark.parametrize("field", ["file_index", "FILE_ROW_NUMBER", "batch"])
def test_a_field_named_as_duckdbs_row_positions_keeps_the_points_from_duckdb(
    field: str, make_app: Callable[..., Any], workspace: Path
) -> None:
    """DuckDB tells points apart by its row-position columns (file_row_number, and file_index in a folder); a field
    of either name, in any case, would be read in their place. Such points are counted by another engine with the
    hand counts and the reason recorded; the clean twin (a field named ``batch``) is counted by DuckDB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = write_case(workspace)
    for n, part in enumerate(sorted((workspace / folder).iterdir())):
        table = pq.read_table(part)
        pq.write_table(table.append_column(field, pa.array([10 + n] * table.num_rows)), part)
    arguments = {"input_path": "zones.parquet", "points_path": folder, "output_path": "c.parquet"}
    result = make_app(MAPSMITH_ENGINE="duckdb").run("count_in_polygons", arguments)
    assert read(workspace / "c.parquet")["point_count"].tolist() == [3, 3]
    assert {k: result.answer[k] for k in COUNTS} == COUNTS
    if field == "batch":
        assert result.engine["name"] == "duckdb"
        return
    assert result.engine["name"] != "duckdb"
    passed = manifest(workspace / "c.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    (duck,) = [p for p in passed if p["engine"] == "duckdb"]
    assert duck["reason"] == f"points_path has a field named {field!r}, which DuckDB reserves for row positions"
