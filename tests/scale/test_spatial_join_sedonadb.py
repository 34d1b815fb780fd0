"""spatial_join on SedonaDB file to file gives the hand answer and the GeoPandas engine's rows, field for field.

On a local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N; a unit is a metre, true to 0.04 %):

    Z1 = 0..100 x 0..100 (code 1, "north"), Z2 = 100..200 x 0..100 (code 2, "south"), Z3 = 500..600 x 500..600
    P1 (50,50) in Z1; P2 (100,50) on the edge Z1 and Z2 share; P3 (150,50) in Z2; P4 (300,300) in none;
    P5 (120,80) in Z2, 20 m from Z1; P6 has no geometry.

Both layers have a field ``name`` and a field ``g`` (the join's own subquery names must not take them):
join_path's are written as ``name_join`` and ``g_join``. join_path's ``code`` is int32 and is written as
int64, as the GeoPandas engine writes it. The trap is an input with a self-crossing polygon (refused, as
every engine refuses it); the clean twins are the same request on valid input, and an ineligible one
(join_path in another CRS, output in GeoPackage) answered by another engine or path with the reason.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shapely.geometry import Point, Polygon, box

from layers import manifest, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
SEDONA_ENV = {"MAPSMITH_SEDONADB_MIN_FEATURES": "0"}

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sedonadb") is None, reason="SedonaDB not installed")


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


def grid_box(x1: float, y1: float, x2: float, y2: float) -> Polygon:
    return box(*g(x1, y1), *g(x2, y2))


def write_zones(path: Path, crs: str = UTM, bad: bool = False) -> None:
    polygons = [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), grid_box(500, 500, 600, 600)]
    if bad:  # a bow tie: its two triangles cross at (550, 550)
        polygons[2] = Polygon([g(500, 500), g(600, 600), g(600, 500), g(500, 600)])
    write_layer(
        path,
        polygons,
        UTM,
        zid=["Z1", "Z2", "Z3"],
        code=np.array([1, 2, 3], dtype="int32"),
        name=["north", "south", "far"],
        g=["zg1", "zg2", "zg3"],
    )
    if crs != UTM:
        import geopandas as gpd

        gpd.read_parquet(path).to_crs(crs).to_parquet(path)


def write_points(path: Path) -> None:
    write_layer(
        path,
        [Point(g(50, 50)), Point(g(100, 50)), Point(g(150, 50)), Point(g(300, 300)), Point(g(120, 80)), None],
        UTM,
        pid=["P1", "P2", "P3", "P4", "P5", "P6"],
        name=["a", "b", "c", "d", "e", "f"],
        g=["pg1", "pg2", "pg3", "pg4", "pg5", "pg6"],
        v=[1.0, 2.0, 4.0, 8.0, None, 16.0],
    )


@pytest.fixture
def data(workspace: Path) -> Path:
    write_zones(workspace / "zones.parquet")
    write_points(workspace / "points.parquet")
    return workspace


def _table(path: Path) -> Any:
    import pyarrow.parquet as pq

    return pq.read_table(path)


def _pairs(table: Any) -> list[tuple[str, str | None]]:
    return list(zip(table.column("pid").to_pylist(), table.column("zid").to_pylist(), strict=True))


def _same_rows(got: Any, ref: Any) -> None:
    """The GeoPandas engine's fields, names, order, types and values; geometries byte for byte."""
    import pyarrow.types as t

    assert got.column_names == ref.column_names
    for name in ref.column_names:
        a, b = got.schema.field(name).type, ref.schema.field(name).type
        if name == "geometry":
            continue
        if t.is_string(b) or t.is_large_string(b):  # one logical type, however the writer sized its offsets
            assert t.is_string(a) or t.is_large_string(a), name
        else:
            assert a == b, name
        assert got.column(name).to_pylist() == ref.column(name).to_pylist(), name
    assert _wkb(got) == _wkb(ref)


def _wkb(table: Any) -> list[bytes | None]:
    column = table.column("geometry")
    storage = column.combine_chunks()
    storage = getattr(storage, "storage", storage)  # a geoarrow extension array wraps the binary one
    return storage.to_pylist()


def _run(make_app: Callable[..., Any], arguments: dict[str, Any], out: str, **env: str) -> Any:
    return make_app(**env).run("spatial_join", {**arguments, "output_path": out})


JOIN = {"input_path": "points.parquet", "join_path": "zones.parquet"}
# Each case read off the drawing: (arguments, the (pid, zid) rows in order, matched pairs, input features
# unmatched, join features matched).
CASES: dict[str, tuple[dict[str, Any], list[tuple[str, str | None]], int, int, int]] = {
    # P2 on the shared edge meets both; P4 and P6 (no geometry) meet nothing and keep one row each.
    "intersects_left": (
        {"how": "left"},
        [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2"), ("P4", None), ("P5", "Z2"), ("P6", None)],
        5,
        2,
        2,
    ),
    "intersects_inner": (
        {"how": "inner"},
        [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2"), ("P5", "Z2")],
        5,
        2,
        2,
    ),
    # A point on a boundary is not within the polygon: P2 is within neither.
    "within_inner": (
        {"how": "inner", "predicate": "within"},
        [("P1", "Z1"), ("P3", "Z2"), ("P5", "Z2")],
        3,
        3,
        2,
    ),
    # 30 m: P5 is 20 m from Z1; P1 and P3 are 50 m from the zone beside theirs; P4 is 223.6 m from Z2.
    "within_distance_inner": (
        {"how": "inner", "predicate": "within_distance", "distance_meters": 30},
        [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2"), ("P5", "Z1"), ("P5", "Z2")],
        6,
        2,
        2,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sedonadb_file_to_file_gives_the_hand_answer_and_the_geopandas_rows(
    make_app: Callable[..., Any], data: Path, case: str
) -> None:
    arguments, rows, pairs, unmatched, join_matched = CASES[case]
    arguments = {**JOIN, **arguments}
    result = _run(make_app, arguments, "s.parquet", **SEDONA_ENV)
    record = manifest(data / "s.parquet")
    assert record["x-mapsmith:engine_choice"] == {"stack": "opensource", "engine": "sedonadb"}
    assert any(n.startswith("engine path: file to file") for n in record["notes"])
    out = _table(data / "s.parquet")
    assert _pairs(out) == rows
    assert (result.answer["matched_pairs"], result.answer["input_features_unmatched"]) == (pairs, unmatched)
    assert result.answer["join_features_matched"] == join_matched
    assert result.answer["output_features"] == len(rows)
    assert out.column_names == ["pid", "name", "g", "v", "geometry", "zid", "code", "name_join", "g_join"]
    assert result.answer["renamed_fields"] == {"name": "name_join", "g": "g_join"}
    assert str(out.schema.field("code").type) == "int64"  # int32 in zones.parquet, widened as GeoPandas does

    reference = _run(make_app, arguments, "r.parquet")
    ref_record = manifest(data / "r.parquet")
    assert reference.engine["name"] == "geopandas"
    _same_rows(out, _table(data / "r.parquet"))
    assert result.answer == reference.answer
    timing = "x-mapsmith:engine_seconds"  # the one parameter that may differ
    assert {k: v for k, v in record["parameters"].items() if k != timing} == {
        k: v for k, v in ref_record["parameters"].items() if k != timing
    }
    assert record["crs_decisions"] == ref_record["crs_decisions"]
    assert record["verification"] == ref_record["verification"]  # the same checks, names, details and outcomes
    # The input's geometries are written as the file holds them.
    points = _table(data / "points.parquet")
    by_pid = dict(zip(points.column("pid").to_pylist(), _wkb(points), strict=True))
    assert _wkb(out) == [by_pid[p] for p, _ in rows]


def test_the_output_footer_holds_the_types_extent_and_crs_counted_in_the_engine(
    make_app: Callable[..., Any], data: Path
) -> None:
    """inner keeps P1, P2, P3, P5: x 50..150, y 50..80; left keeps every point with a geometry: x 50..300, y 50..300."""
    import pyarrow.parquet as pq
    from pyproj import CRS

    for how, extent in (("inner", (50, 50, 150, 80)), ("left", (50, 50, 300, 300))):
        _run(make_app, {**JOIN, "how": how}, f"{how}.parquet", **SEDONA_ENV)
        geo = json.loads(pq.read_schema(data / f"{how}.parquet").metadata[b"geo"])
        column = geo["columns"]["geometry"]
        assert geo["primary_column"] == "geometry"
        assert column["encoding"] == "WKB" and column["geometry_types"] == ["Point"]
        assert column["bbox"] == [*g(*extent[:2]), *g(*extent[2:])]
        assert CRS.from_json_dict(column["crs"]).equals(CRS.from_user_input(UTM))
        written = [c for c in manifest(data / f"{how}.parquet")["verification"] if c["name"] == "feature_count_exact"]
        assert [c["passed"] for c in written] == [True]
        assert pq.read_metadata(data / f"{how}.parquet").num_rows == (5 if how == "inner" else 7)


def test_the_manifest_validates_against_the_published_schema(make_app: Callable[..., Any], data: Path) -> None:
    from conftest import published_schema_errors

    _run(make_app, {**JOIN, "how": "left"}, "s.parquet", **SEDONA_ENV)
    assert published_schema_errors(manifest(data / "s.parquet")) == []


def test_row_order_is_the_input_files_over_many_row_groups(make_app: Callable[..., Any], workspace: Path) -> None:
    """40 points on y = 50 at x = 5, 10, ... 200, written in reverse in row groups of 3 rows: the output
    follows the file's rows, and a point at x = 100 (the shared edge) meets Z1 then Z2; x = 200 is on Z2's
    east edge only."""
    import geopandas as gpd

    write_zones(workspace / "zones.parquet")
    xs = [5 * k for k in range(40, 0, -1)]
    frame = gpd.GeoDataFrame({"pid": [f"X{x}" for x in xs]}, geometry=[Point(g(x, 50)) for x in xs], crs=UTM)
    frame.to_parquet(workspace / "line.parquet", row_group_size=3)
    expected = [(f"X{x}", zone) for x in xs for zone in (["Z1"] if x <= 100 else []) + (["Z2"] if x >= 100 else [])]
    arguments = {"input_path": "line.parquet", "join_path": "zones.parquet", "how": "inner"}
    _run(make_app, arguments, "s.parquet", **SEDONA_ENV)
    assert manifest(workspace / "s.parquet")["x-mapsmith:engine_choice"]["engine"] == "sedonadb"
    assert _pairs(_table(workspace / "s.parquet")) == expected
    _run(make_app, arguments, "r.parquet")
    _same_rows(_table(workspace / "s.parquet"), _table(workspace / "r.parquet"))


def test_an_invalid_input_geometry_is_counted_and_refused_as_the_geopandas_engine_refuses_it(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    from mapsmith.errors import MapSmithError

    write_zones(workspace / "zones.parquet", bad=True)
    write_points(workspace / "points.parquet")
    refusals = []
    for name, env in (("s.parquet", SEDONA_ENV), ("r.parquet", {})):
        with pytest.raises(MapSmithError) as caught:
            _run(make_app, {**JOIN, "how": "left"}, name, **env)
        refusals.append(caught.value)
        assert not (workspace / name).exists()
    ours, theirs = refusals
    assert ours.code == theirs.code == "INPUT_GEOMETRY_INVALID"
    assert ours.evidence == theirs.evidence
    assert ours.evidence["invalid_count"] == 1 and ours.evidence["first_rows"] == [2]  # Z3, the bow tie
    failed = json.loads((workspace / "s.parquet.failed.provenance.json").read_text("utf-8"))
    assert failed["x-mapsmith:engine_choice"]["engine"] == "sedonadb"


def test_clean_twin_of_the_refusal_valid_zones_are_joined(make_app: Callable[..., Any], data: Path) -> None:
    result = _run(make_app, {**JOIN, "how": "left"}, "s.parquet", **SEDONA_ENV)
    valid = [c for c in manifest(data / "s.parquet")["verification"] if c["name"] == "x-mapsmith:input_geometry_valid"]
    assert [c["passed"] for c in valid] == [True, True]
    assert "join_path: 0 of 3 geometries invalid" in [c["detail"] for c in valid]
    assert "input_path: 0 of 6 geometries invalid; 1 empty or missing" in [c["detail"] for c in valid]
    assert result.answer["input_features"] == 6


def test_another_crs_passes_sedonadb_over_with_the_reason(make_app: Callable[..., Any], workspace: Path) -> None:
    write_zones(workspace / "zones.parquet", crs="EPSG:3857")
    write_points(workspace / "points.parquet")
    result = _run(make_app, {**JOIN, "how": "left"}, "s.parquet", **SEDONA_ENV)
    choice = manifest(workspace / "s.parquet")["x-mapsmith:engine_choice"]
    assert result.engine["name"] == "geopandas"
    sedona = next(p for p in choice["passed_over"] if p["engine"] == "sedonadb")
    assert sedona["reason"].startswith("input_path is in EPSG:32610 and join_path in EPSG:3857")
    # (P2, on the shared edge before the zones were moved to EPSG:3857 and back, is left out of the answer.)
    assert {("P1", "Z1"), ("P3", "Z2"), ("P4", None)} <= set(_pairs(_table(workspace / "s.parquet")))


def test_an_output_that_is_not_geoparquet_takes_the_wkb_path_and_says_why(
    make_app: Callable[..., Any], data: Path
) -> None:
    result = _run(make_app, {**JOIN, "how": "inner"}, "s.gpkg", **SEDONA_ENV)
    assert result.engine["name"] == "sedonadb"
    notes = manifest(data / "s.gpkg")["notes"]
    assert any(
        n.startswith("engine path: WKB")
        and n.endswith(
            "the file-to-file path was not taken because output_path ends in .gpkg; the SedonaDB engine "
            "writes GeoParquet (.parquet) only"
        )
        for n in notes
    )


def test_the_threshold_decides_between_sedonadb_and_the_engines_below(
    make_app: Callable[..., Any], data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """6 points: from a threshold of 6 SedonaDB takes the run; at 7 it is passed over for size (the WKB path,
    off by default, too) and, DuckDB's own threshold being higher, GeoPandas runs."""
    from mapsmith_opensource.join_ops import spatial_join_sedonadb

    monkeypatch.setattr(spatial_join_sedonadb, "FILE_MIN_FEATURES", 6)
    assert _run(make_app, {**JOIN, "how": "left"}, "a.parquet").engine["name"] == "sedonadb"
    monkeypatch.setattr(spatial_join_sedonadb, "FILE_MIN_FEATURES", 7)
    assert _run(make_app, {**JOIN, "how": "left"}, "b.parquet").engine["name"] == "geopandas"
    passed = manifest(data / "b.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed[0]["engine"] == "sedonadb"
    assert passed[0]["reason"].startswith(
        "file to file: the larger input has 6 features, fewer than the 7 from which SedonaDB's spatial_join file "
        "to file is considered"
    )
    assert "the WKB path: SedonaDB's spatial_join (the WKB path) was never measured faster" in passed[0]["reason"]


def test_by_default_duckdb_keeps_spatial_join_and_the_manifest_says_why_sedonadb_did_not_run(
    make_app: Callable[..., Any], data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FILE_MIN_FEATURES is None (SedonaDB file to file never measured fastest through MapSmith): with DuckDB's own
    threshold lowered to these 6 points, DuckDB runs and the SedonaDB engine is passed over with both paths'
    reasons; the forced runs above are this request's twin."""
    from mapsmith_opensource.join_ops import spatial_join_duckdb, spatial_join_sedonadb

    assert spatial_join_sedonadb.FILE_MIN_FEATURES is None
    monkeypatch.setattr(spatial_join_duckdb, "DUCKDB_MIN_ROWS", 0)
    result = _run(make_app, {**JOIN, "how": "left"}, "d.parquet")
    assert result.engine["name"] == "duckdb"
    (passed,) = manifest(data / "d.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "sedonadb"
    assert passed["reason"].startswith(
        "file to file: SedonaDB's spatial_join file to file was never measured faster than DuckDB or GeoPandas "
        "(whole MapSmith runs: FILE_MIN_FEATURES), so it runs only when MAPSMITH_SEDONADB_MIN_FEATURES sets a threshold"
    )
    assert "; the WKB path: SedonaDB's spatial_join (the WKB path) was never measured faster" in passed["reason"]
    assert _pairs(_table(data / "d.parquet")) == CASES["intersects_left"][1]


def test_the_operator_can_name_sedonadb_and_its_size_threshold_gives_way(
    make_app: Callable[..., Any], data: Path
) -> None:
    """MAPSMITH_ENGINE=sedonadb with no threshold variable: SedonaDB file to file (threshold None) takes the 6
    points, gives the hand rows, and the note says why it ran; the same request without it runs GeoPandas."""
    result = _run(make_app, {**JOIN, "how": "left"}, "o.parquet", MAPSMITH_ENGINE="sedonadb")
    assert result.engine["name"] == "sedonadb"
    record = manifest(data / "o.parquet")
    assert record["x-mapsmith:engine_choice"] == {
        "stack": "opensource",
        "engine": "sedonadb",
        "preferred_by": "MAPSMITH_ENGINE=sedonadb",
    }
    assert any("MAPSMITH_ENGINE names sedonadb, which sets its size threshold aside" in n for n in record["notes"])
    assert _pairs(_table(data / "o.parquet")) == CASES["intersects_left"][1]
    assert _run(make_app, {**JOIN, "how": "left"}, "p.parquet").engine["name"] == "geopandas"


@pytest.mark.parametrize("invalid", [False, True], ids=["clean twin", "with an invalid point"])
def test_points_whose_header_read_counted_validity_are_not_scanned_again(
    make_app: Callable[..., Any], workspace: Path, monkeypatch: pytest.MonkeyPatch, invalid: bool
) -> None:
    """A points footer with no bbox makes the header read scan the points, validity included (layer_facts), and
    the file-to-file path takes input_path's facts from it: SedonaDB counts only join_path's. The rows and record
    are the GeoPandas engine's; with P7 (150, NaN) added (GEOS: Invalid Coordinate, feature 6) the run is refused
    as GeoPandas refuses it."""
    import math

    from layers import drop_bbox
    from mapsmith.errors import MapSmithError
    from mapsmith_opensource import layer_facts
    from mapsmith_opensource.join_ops import spatial_join_sedonadb as engine

    write_zones(workspace / "zones.parquet")
    points = [Point(g(50, 50)), Point(g(100, 50)), Point(g(150, 50)), Point(g(300, 300)), Point(g(120, 80)), None]
    points += [Point(g(150, math.nan))] if invalid else []
    write_layer(workspace / "points.parquet", points, UTM, pid=[f"P{k + 1}" for k in range(len(points))])
    drop_bbox(workspace / "points.parquet")
    counted: list[str] = []
    facts = engine._facts
    monkeypatch.setattr(
        engine, "_facts", lambda sd, source, geometry: counted.append(source) or facts(sd, source, geometry)
    )
    layer_facts._kept.clear()
    runs: list[Any] = []
    for name, env in (("s.parquet", SEDONA_ENV), ("r.parquet", {})):
        try:
            runs.append(_run(make_app, {**JOIN, "how": "left"}, name, **env))
        except MapSmithError as refused:
            runs.append(refused)
    assert len(counted) == 1 and counted[0].startswith("mapsmith_join_")  # join_path's facts alone
    ours, theirs = runs
    if invalid:
        assert isinstance(ours, MapSmithError) and isinstance(theirs, MapSmithError)
        assert ours.code == theirs.code == "INPUT_GEOMETRY_INVALID"
        assert ours.evidence == theirs.evidence
        assert ours.evidence["invalid_count"] == 1 and ours.evidence["first_rows"] == [6]
        return
    assert ours.engine["name"] == "sedonadb" and theirs.engine["name"] == "geopandas"
    expected = [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2"), ("P4", None), ("P5", "Z2"), ("P6", None)]
    assert _pairs(_table(workspace / "s.parquet")) == expected
    _same_rows(_table(workspace / "s.parquet"), _table(workspace / "r.parquet"))
    assert ours.answer == theirs.answer
    assert manifest(workspace / "s.parquet")["verification"] == manifest(workspace / "r.parquet")["verification"]


@pytest.mark.parametrize("points", [["P1"], ["P1", "P1"]], ids=["one row", "the same point twice"])
def test_a_file_whose_geometries_are_all_the_same_is_joined_on_sedonadb(
    make_app: Callable[..., Any], workspace: Path, points: list[str]
) -> None:
    """Trap: P1 (50,50) alone in its file, or twice: the geometry column's Parquet statistics give one value, which
    SedonaDB 0.5 folds into a constant of no geometry type ("st_isempty(binary): No kernel matching arguments",
    ENGINE_FAILED before). Read with the statistics off, it is joined: each P1 row meets Z1 only, as GeoPandas says."""
    write_zones(workspace / "zones.parquet")
    write_layer(workspace / "points.parquet", [Point(g(50, 50))] * len(points), UTM, pid=points, v=[1.0] * len(points))
    result = _run(make_app, {**JOIN, "how": "left"}, "s.parquet", **SEDONA_ENV)
    assert manifest(workspace / "s.parquet")["x-mapsmith:engine_choice"]["engine"] == "sedonadb"
    out = _table(workspace / "s.parquet")
    assert _pairs(out) == [("P1", "Z1")] * len(points)
    reference = _run(make_app, {**JOIN, "how": "left"}, "r.parquet")
    assert reference.engine["name"] == "geopandas"
    _same_rows(out, _table(workspace / "r.parquet"))
    assert result.answer == reference.answer


def test_constant_geometry_reads_the_statistics_by_hand(workspace: Path) -> None:
    """One row, or two equal points: one value. Two points, a file without statistics, or row groups of different
    points (each constant alone): not. The clean twin of the trap above, two different points, is joined with the
    statistics on (test_sedonadb_file_to_file_gives_the_hand_answer_and_the_geopandas_rows)."""
    import geopandas as gpd

    from mapsmith_opensource.sedonadb_ops import constant_geometry

    a, b = Point(g(50, 50)), Point(g(150, 50))

    def written(name: str, geoms: list[Point], **options: Any) -> Path:
        path = workspace / name
        gpd.GeoDataFrame({"i": range(len(geoms))}, geometry=geoms, crs=UTM).to_parquet(path, **options)
        return path

    assert constant_geometry([written("one.parquet", [a])])
    assert constant_geometry([written("same.parquet", [a, a])])
    assert not constant_geometry([written("two.parquet", [a, b])])
    assert not constant_geometry([written("nostats.parquet", [a], write_statistics=False)])
    assert not constant_geometry([written("groups.parquet", [a, a, b, b], row_group_size=2)])
    assert constant_geometry([workspace / "two.parquet", workspace / "one.parquet"])  # any one of the files
