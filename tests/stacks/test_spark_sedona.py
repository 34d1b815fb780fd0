"""Apache Sedona on Spark (MAPSMITH_STACK=sedona), run for real, against hand-worked answers.

The fixtures are small enough to count by hand (below), and every Spark result is also compared
with the GeoPandas engine's output for the same call. One SparkSession serves the whole module
(about 12 s to start). It runs on the master the ``spark_master`` fixture names (tests/spark_cluster.py):
local[2], or with MAPSMITH_TEST_SPARK_CLUSTER=1 (CI's spark session) a standalone cluster of two workers
started for the test session, so every test below then runs its jobs on executors. The Spark tests skip
only when pyspark is not importable, and not even then when MAPSMITH_SPARK_REQUIRED=1. The detection
tests run everywhere.

Layout, in EPSG:32633 metres::

    A: square 0..10 x 0..10   B: square 10..20 x 0..10 (shares the edge x=10 with A)
    C: square 100..110 x 100..110 (no point near it)
    p1 (5,5) in A; p2 (15,5) in B; p3 (10,5) on the shared edge: in A and in B;
    p4 (50,50) in nothing; p5 (2,2) in A

count_in_polygons: A 3 (p1, p3, p5), B 2 (p2, p3), C 0; 5 pairs, 4 points counted, 1 in none,
1 in several polygons, 1 polygon without points.
spatial_join points -> polygons, intersects, how='left': p1-A, p2-B, p3-A, p3-B, p4-(none), p5-A
(6 rows, input order then join order); 'inner' drops p4 (5 rows); 'within' matches p3 nowhere (a
point on a boundary is not within), so 'left' gives p1-A, p2-B, p3-(none), p4-(none), p5-A.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

import mapsmith_sedona
from mapsmith.errors import CRSError, EngineError, OperationUnavailable
from spark_cluster import on_cluster

pytest_plugins = ["spark_cluster"]  # its session fixtures: spark_master, spark_cluster (one cluster per session)

HAS_PYSPARK = importlib.util.find_spec("pyspark") is not None
if not HAS_PYSPARK and os.environ.get("MAPSMITH_SPARK_REQUIRED") == "1":  # CI's spark session: never skip there
    raise RuntimeError("MAPSMITH_SPARK_REQUIRED=1 but pyspark is not installed (pip install '.[spark]')")
needs_spark = pytest.mark.skipif(not HAS_PYSPARK, reason="pyspark is not installed (pip install 'mapsmith[spark]')")

CRS = "EPSG:32633"
POLYGON_NAMES = ["A", "B", "C"]
EXPECTED_COUNTS = [3, 2, 0]
LEFT_INTERSECTS = [("p1", "A"), ("p2", "B"), ("p3", "A"), ("p3", "B"), ("p4", None), ("p5", "A")]
LEFT_WITHIN = [("p1", "A"), ("p2", "B"), ("p3", None), ("p4", None), ("p5", "A")]


def _square(x0: float, y0: float, side: float) -> Any:
    import shapely

    return shapely.box(x0, y0, x0 + side, y0 + side)


def _write_fixtures(ws: Path, crs: str = CRS, scale: float = 1.0) -> None:
    """The layout above, its coordinates multiplied by ``scale`` (0.1 puts it in range for degrees)."""
    import geopandas as gpd
    import numpy as np
    import shapely

    polygons = gpd.GeoDataFrame(
        {"id": np.array([1, 2, 3], dtype="int32"), "name": POLYGON_NAMES},
        geometry=[
            _square(0, 0, 10 * scale),
            _square(10 * scale, 0, 10 * scale),
            _square(100 * scale, 100 * scale, 10 * scale),
        ],
        crs=crs,
    )
    points = gpd.GeoDataFrame(
        {"id": np.arange(1, 6, dtype="int64"), "name": [f"p{i}" for i in range(1, 6)]},
        geometry=[shapely.Point(x * scale, y * scale) for x, y in [(5, 5), (15, 5), (10, 5), (50, 50), (2, 2)]],
        crs=crs,
    )
    polygons.to_parquet(ws / "polygons.parquet", index=False)
    points.to_parquet(ws / "points.parquet", index=False)


def _read(path: Path) -> Any:
    import geopandas as gpd

    return gpd.read_parquet(path)


def _same_frames(spark: Any, geopandas: Any) -> None:
    import pandas as pd

    assert list(spark.columns) == list(geopandas.columns)
    assert spark.crs.equals(geopandas.crs)
    pd.testing.assert_frame_equal(
        pd.DataFrame(spark.drop(columns="geometry")),
        pd.DataFrame(geopandas.drop(columns="geometry")),
        check_dtype=False,  # pyarrow reads Spark's nullable bigint as float64 when nulls occur, GeoPandas' as Int64
    )
    assert list(spark.geometry.to_wkt()) == list(geopandas.geometry.to_wkt())


def sedona_environment(master: str) -> dict[str, str]:
    """What a sedona-stack MapSmith is given here: the stack, the master, and on a cluster to wait for both
    workers' executors (so the first job already has both)."""
    env = {"MAPSMITH_STACK": "sedona", "MAPSMITH_SPARK_MASTER": master}
    if on_cluster(master):
        env["MAPSMITH_SPARK_MIN_EXECUTORS"] = "2"
    return env


@pytest.fixture
def make_app(make_app: Any, spark_master: str) -> Any:
    """conftest's make_app, with the session's Spark master added to every sedona-stack app."""

    def make(**env: str) -> Any:
        if env.get("MAPSMITH_STACK") == "sedona":
            env = {**sedona_environment(spark_master), **env}
        return make_app(**env)

    return make


@pytest.fixture(scope="module", autouse=True)
def _stop_spark_after_module() -> Any:
    yield
    if HAS_PYSPARK:
        from mapsmith_sedona.spark_session import stop

        stop()


# -- detection, everywhere -----------------------------------------------------------------------


def test_java_home_pointing_nowhere_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    java, reason = mapsmith_sedona.find_java()
    assert java is None and reason is not None and "no-jdk" in reason
    avail = mapsmith_sedona.availability()
    assert avail.details["spark"].startswith("not usable: ")
    assert "fix: " in avail.details["spark"]


def test_no_java_on_path_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert mapsmith_sedona.find_java() == (None, "no java executable on PATH and JAVA_HOME is not set")


def test_missing_jar_is_reported_with_the_fetch_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mapsmith_sedona import jars

    monkeypatch.delenv(jars.JARS_ENV, raising=False)
    monkeypatch.setenv(jars.MAVEN_REPO_ENV, str(tmp_path / "empty-repo"))
    monkeypatch.setattr(jars, "_ivy_dirs", lambda: [tmp_path / "no-ivy"])
    found, reason = jars.find_jars()
    assert found is None and reason is not None
    assert "sedona-spark-shaded-4.0_2.13:1.8.0" in reason and "geotools-wrapper:1.8.0-33.1" in reason
    if HAS_PYSPARK:
        assert mapsmith_sedona.spark_problem() == reason
        assert "python -m mapsmith_sedona.jars fetch" in mapsmith_sedona.SPARK_FIX


@needs_spark
def test_spark_operation_refused_with_reason_when_java_is_missing(
    make_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _write_fixtures(workspace)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    app = make_app(MAPSMITH_STACK="sedona")
    with pytest.raises(OperationUnavailable) as err:
        app.run("count_in_polygons", _count_args())
    assert err.value.code == "STACK_UNAVAILABLE"
    # JAVA_HOME is outside the workspace: the refusal names the problem with that host path redacted
    assert "JAVA_HOME=<outside the workspace> has no executable bin/java" in str(err.value)
    assert "openjdk-17" in err.value.hint
    assert list(workspace.glob("*.provenance.json")) == []


# -- refusals before Spark starts -----------------------------------------------------------------


def _count_args(output: str = "counts.parquet") -> dict[str, Any]:
    return {"input_path": "polygons.parquet", "points_path": "points.parquet", "output_path": output}


def _join_args(output: str = "joined.parquet", **extra: Any) -> dict[str, Any]:
    return {"input_path": "points.parquet", "join_path": "polygons.parquet", "output_path": output, **extra}


@needs_spark
def test_output_other_than_geoparquet_is_refused_before_spark(make_app: Any, workspace: Path) -> None:
    _write_fixtures(workspace)
    with pytest.raises(EngineError) as err:
        make_app(MAPSMITH_STACK="sedona").run("count_in_polygons", _count_args("counts.gpkg"))
    assert err.value.code == "NO_ELIGIBLE_ENGINE"
    assert "GeoParquet" in err.value.hint
    assert sorted(p.name for p in workspace.iterdir()) == ["points.parquet", "polygons.parquet"]


@needs_spark
def test_inputs_in_different_crs_are_refused(make_app: Any, workspace: Path) -> None:
    import geopandas as gpd

    _write_fixtures(workspace)
    gpd.read_parquet(workspace / "points.parquet").set_crs("EPSG:32634", allow_override=True).to_parquet(
        workspace / "points.parquet"
    )
    with pytest.raises(EngineError) as err:
        make_app(MAPSMITH_STACK="sedona").run("spatial_join", _join_args())
    assert err.value.code == "NO_ELIGIBLE_ENGINE"
    assert "reproject_layer" in err.value.hint


@needs_spark
def test_within_distance_in_a_geographic_crs_is_refused(make_app: Any, workspace: Path) -> None:
    _write_fixtures(workspace, crs="EPSG:4326", scale=0.1)
    with pytest.raises(CRSError) as err:
        make_app(MAPSMITH_STACK="sedona").run(
            "spatial_join", _join_args(predicate="within_distance", distance_meters=5)
        )
    assert err.value.code == "CRS_NOT_PROJECTED"


# -- the Spark jobs, for real ---------------------------------------------------------------------


@needs_spark
def test_count_in_polygons_on_spark_matches_hand_counts_and_geopandas(
    make_app: Any, workspace: Path, spark_master: str
) -> None:
    _write_fixtures(workspace)
    progress: list[tuple[float, str]] = []
    result = make_app(MAPSMITH_STACK="sedona").run(
        "count_in_polygons", _count_args(), progress=lambda f, m: progress.append((f, m))
    )
    out = _read(workspace / "counts.parquet")
    assert list(out["name"]) == POLYGON_NAMES
    assert list(out["point_count"]) == EXPECTED_COUNTS
    assert out.crs.to_epsg() == 32633
    assert result.answer["total_point_count"] == 5
    assert result.answer["points_counted"] == 4
    assert result.answer["points_in_no_polygon"] == 1
    assert result.answer["points_in_several_polygons"] == 1
    assert result.answer["polygons_with_no_points"] == 1
    assert [r["point_count"] for r in result.answer["rows"]] == EXPECTED_COUNTS
    assert progress[-1][0] == 1.0 and all(a[0] <= b[0] for a, b in zip(progress, progress[1:], strict=False))

    record = json.loads((workspace / "counts.parquet.provenance.json").read_text("utf-8"))
    assert record["engine"]["name"] == "apache-sedona"
    assert record["engine"]["version"] == "1.8.0"
    components = record["engine"]["x-mapsmith:components"]
    assert components["spark"].startswith("4.0.") and components["spark_master"] == spark_master
    assert int(components["partitions"]) >= 1
    job = record["parameters"]["x-mapsmith:spark_job"]
    assert job["master"] == spark_master and job["output_partitions"] == 1
    cluster = record["parameters"]["x-mapsmith:spark_cluster"]
    assert cluster["master"] == spark_master and cluster["sedona_version"] == "1.8.0"
    # local[2]: the driver's two task slots; a cluster of two one-core workers: two executors of one core
    expected = (2, 1) if on_cluster(spark_master) else (0, 2)
    assert (cluster["executors"], cluster["executor_cores"]) == expected
    assert set(job["input_partitions"]) == {"input_path", "points_path"}
    assert record["x-mapsmith:engine_choice"] == {"stack": "sedona", "engine": "apache-sedona-spark"}

    geopandas = make_app().run("count_in_polygons", _count_args("counts_gpd.parquet"))
    _same_frames(out, _read(workspace / "counts_gpd.parquet"))
    # where the point counted twice lies (inside overlapping polygons or on a shared boundary), said alike
    keys = ("points_in_overlapping_polygons", "points_on_shared_boundaries", "distinct_point_count")
    assert {k: result.answer[k] for k in keys} == {k: geopandas.answer[k] for k in keys}
    assert result.answer["points_in_overlapping_polygons"] + result.answer["points_on_shared_boundaries"] == 1
    assert [w["code"] for w in result.warnings] == [w["code"] for w in geopandas.warnings]
    spark_note = next(n for n in record["notes"] if "points lie in at least one polygon" in n)
    assert spark_note in json.loads((workspace / "counts_gpd.parquet.provenance.json").read_text("utf-8"))["notes"]


@needs_spark
def test_count_in_polygons_on_spark_tells_overlaps_from_shared_boundaries(make_app: Any, workspace: Path) -> None:
    """Drawn in grid metres: A 0..10 and D 5..15 overlap (x 5..10, y 0..10); E 20..30 and F 30..40 share the edge
    x = 30. q1 (7, 5) lies inside A and D; q2 (10, 5) on A's edge and inside D; q3 (2, 2) inside A only; q4 (30, 5)
    on the edge E and F share, inside neither; q5 (50, 50) in nothing. Pairs 7 (A 3, D 2, E 1, F 1); points
    counted 4; in several polygons 3, of them inside overlapping polygons 2 (q1, q2: each in some interior) and on
    shared boundaries 1 (q4). Spark tests whether a point is inside only for the points in several polygons."""
    import shapely

    _write_grid(
        workspace,
        "zones.parquet",
        [_grid_box(0, 0, 10, 10), _grid_box(5, 0, 15, 10), _grid_box(20, 0, 30, 10), _grid_box(30, 0, 40, 10)],
        name=["A", "D", "E", "F"],
    )
    _write_grid(
        workspace,
        "spots.parquet",
        [shapely.Point(_g(x, y)) for x, y in ((7, 5), (10, 5), (2, 2), (30, 5), (50, 50))],
        pid=[1, 2, 3, 4, 5],
    )
    args = {"input_path": "zones.parquet", "points_path": "spots.parquet"}
    result = make_app(MAPSMITH_STACK="sedona").run("count_in_polygons", {**args, "output_path": "c.parquet"})
    assert list(_read(workspace / "c.parquet")["point_count"]) == [3, 2, 1, 1]
    expected = {
        "total_point_count": 7,
        "points_counted": 4,
        "points_in_no_polygon": 1,
        "points_in_several_polygons": 3,
        "points_in_overlapping_polygons": 2,
        "points_on_shared_boundaries": 1,
    }
    assert {k: result.answer[k] for k in expected} == expected
    geopandas = make_app().run("count_in_polygons", {**args, "output_path": "c_gpd.parquet"})
    assert {k: geopandas.answer[k] for k in expected} == expected
    _same_frames(_read(workspace / "c.parquet"), _read(workspace / "c_gpd.parquet"))
    # The clean twin: with D gone nothing overlaps, and only q4 lies in several polygons, on their shared edge.
    _write_grid(
        workspace,
        "zones.parquet",
        [_grid_box(0, 0, 10, 10), _grid_box(20, 0, 30, 10), _grid_box(30, 0, 40, 10)],
        name=["A", "E", "F"],
    )
    twin = make_app(MAPSMITH_STACK="sedona").run("count_in_polygons", {**args, "output_path": "c2.parquet"})
    assert list(_read(workspace / "c2.parquet")["point_count"]) == [3, 1, 1]
    assert (twin.answer["points_in_several_polygons"], twin.answer["points_in_overlapping_polygons"]) == (1, 0)
    assert twin.answer["points_on_shared_boundaries"] == 1


@needs_spark
def test_count_in_polygons_on_spark_with_no_point_in_any_polygon(make_app: Any, workspace: Path) -> None:
    """The fixtures' three squares and two points far from all of them, (500, 500) and (600, 600): no pair, so every
    count is 0 and all three polygons have no points, as the GeoPandas engine says."""
    import geopandas as gpd
    import shapely

    _write_fixtures(workspace)
    far = gpd.GeoDataFrame({"name": ["f1", "f2"]}, geometry=[shapely.Point(500, 500), shapely.Point(600, 600)], crs=CRS)
    far.to_parquet(workspace / "points.parquet", index=False)
    result = make_app(MAPSMITH_STACK="sedona").run("count_in_polygons", _count_args())
    assert list(_read(workspace / "counts.parquet")["point_count"]) == [0, 0, 0]
    keys = ("total_point_count", "points_counted", "points_in_no_polygon", "polygons_with_no_points")
    assert {k: result.answer[k] for k in keys} == dict(zip(keys, (0, 0, 2, 3), strict=True))
    geopandas = make_app().run("count_in_polygons", _count_args("counts_gpd.parquet"))
    assert {k: geopandas.answer[k] for k in keys} == {k: result.answer[k] for k in keys}


FACTS_NOTE = "counted over the same unchanged files by layer_facts (DuckDB, or shapely where DuckDB cannot read them)"


@needs_spark
@pytest.mark.parametrize("trap", [False, True])
def test_spark_counts_points_validity_as_geos_does(make_app: Any, workspace: Path, trap: bool) -> None:
    """A's square, and points: q1 (5,5) in A, q2 (50,50) in nothing, q3 no geometry, q4 an empty point; the trap
    adds q5 (5, NaN), which GEOS calls invalid and Sedona reads as an empty point. Clean: 4 points, 2 without
    geometry, 0 invalid, 1 counted, A 1. Trap: 5 points, still 2 without geometry, 1 invalid (row 4, with GEOS's
    reason) and the INPUT_GEOMETRY_INVALID warning, A 1 (a NaN point meets nothing): the GeoPandas engine's
    record. Before, Spark's own count gave the trap 3 without geometry and 0 invalid, and no warning. The points
    are written with no bbox in their footer, so the header read scans them and Spark takes its counts."""
    import math

    import shapely

    from layers import drop_bbox, write_layer

    points = [shapely.Point(5, 5), shapely.Point(50, 50), None, shapely.Point()]
    points += [shapely.Point(5, math.nan)] if trap else []
    drop_bbox(write_layer(workspace / "points.parquet", points, CRS))
    write_layer(workspace / "polygons.parquet", [_square(0, 0, 10)], CRS, name=["A"])
    result = make_app(MAPSMITH_STACK="sedona").run("count_in_polygons", _count_args())
    assert result.engine["name"] == "apache-sedona"
    assert list(_read(workspace / "counts.parquet")["point_count"]) == [1]
    assert (result.answer["points"], result.answer["points_without_geometry"]) == (5 if trap else 4, 2)
    assert result.answer["points_counted"] == 1
    record = json.loads((workspace / "counts.parquet.provenance.json").read_text("utf-8"))
    check = next(
        c
        for c in record["verification"]
        if c["name"] == "x-mapsmith:input_geometry_valid" and c.get("argument") == "points_path"
    )
    assert any(n.startswith("points_path: its points' validity") and FACTS_NOTE in n for n in record["notes"])
    if trap:
        assert check["detail"] == (
            "points_path: 1 of 5 geometries invalid (first feature indices [4]; Invalid Coordinate); 2 empty or missing"
        )
        assert "INPUT_GEOMETRY_INVALID" in [w["code"] for w in result.warnings]
    else:
        assert check["detail"] == "points_path: 0 of 4 geometries invalid; 2 empty or missing"
    geopandas = make_app().run("count_in_polygons", _count_args("counts_gpd.parquet"))
    twin = json.loads((workspace / "counts_gpd.parquet.provenance.json").read_text("utf-8"))
    assert check in twin["verification"]  # the same record, word for word
    keys = ("points", "points_without_geometry", "points_counted")
    assert {k: geopandas.answer[k] for k in keys} == {k: result.answer[k] for k in keys}


@needs_spark
@pytest.mark.parametrize(
    ("predicate", "how", "expected"),
    [
        ("intersects", "left", LEFT_INTERSECTS),
        ("intersects", "inner", [pair for pair in LEFT_INTERSECTS if pair[1] is not None]),
        ("within", "left", LEFT_WITHIN),
    ],
)
def test_spatial_join_on_spark_matches_hand_rows_and_geopandas(
    make_app: Any, workspace: Path, predicate: str, how: str, expected: list[tuple[str, str | None]]
) -> None:
    _write_fixtures(workspace)
    args = _join_args(predicate=predicate, how=how)
    result = make_app(MAPSMITH_STACK="sedona").run("spatial_join", args)
    out = _read(workspace / "joined.parquet")
    assert list(out.columns) == ["id", "name", "geometry", "id_join", "name_join"]
    got = [(n, None if j is None or j != j else j) for n, j in zip(out["name"], out["name_join"], strict=True)]
    assert got == expected
    assert out.crs.to_epsg() == 32633
    assert result.answer["renamed_fields"] == {"id": "id_join", "name": "name_join"}
    assert result.answer["output_features"] == len(expected)

    make_app().run("spatial_join", {**args, "output_path": "joined_gpd.parquet"})
    _same_frames(out, _read(workspace / "joined_gpd.parquet"))
    spark_record = json.loads((workspace / "joined.parquet.provenance.json").read_text("utf-8"))
    gpd_record = json.loads((workspace / "joined_gpd.parquet.provenance.json").read_text("utf-8"))
    assert spark_record["parameters"]["x-mapsmith:join_counts"] == gpd_record["parameters"]["x-mapsmith:join_counts"]


@needs_spark
def test_within_distance_in_a_projected_crs_matches_geopandas(make_app: Any, workspace: Path) -> None:
    # 6 m from p4 (50,50) reaches no polygon; C's nearest corner (100,100) is 70.7 m away. From p2 (15,5),
    # A's edge x=10 is 5 m away: within 6 m p2 meets A and B.
    _write_fixtures(workspace)
    args = _join_args(predicate="within_distance", distance_meters=6, how="left")
    make_app(MAPSMITH_STACK="sedona").run("spatial_join", args)
    out = _read(workspace / "joined.parquet")
    got = [(n, None if j is None or j != j else j) for n, j in zip(out["name"], out["name_join"], strict=True)]
    assert got == [
        ("p1", "A"),
        ("p1", "B"),
        ("p2", "A"),
        ("p2", "B"),
        ("p3", "A"),
        ("p3", "B"),
        ("p4", None),
        ("p5", "A"),
    ]
    make_app().run("spatial_join", {**args, "output_path": "joined_gpd.parquet"})
    _same_frames(out, _read(workspace / "joined_gpd.parquet"))


@needs_spark
def test_invalid_polygon_is_refused_like_geopandas(make_app: Any, workspace: Path) -> None:
    import geopandas as gpd
    import shapely

    _write_fixtures(workspace)
    polygons = gpd.read_parquet(workspace / "polygons.parquet")
    polygons.loc[1, "geometry"] = shapely.from_wkt("POLYGON ((10 0, 20 10, 20 0, 10 10, 10 0))")  # a bow-tie
    polygons.to_parquet(workspace / "polygons.parquet", index=False)
    assert _refusals(make_app, "count_in_polygons", _count_args) == [("INPUT_GEOMETRY_INVALID", 1, [1])] * 2


def _refusals(make_app: Any, operation: str, arguments: Any) -> list[tuple[str, int, list[int]]]:
    """The refusal's code, invalid count and first rows on Spark (the sedona stack), then on the GeoPandas engine."""
    found = []
    for env, out in (({"MAPSMITH_STACK": "sedona"}, "r1.parquet"), ({}, "r2.parquet")):
        with pytest.raises(Exception) as err:
            make_app(**env).run(operation, arguments(out))
        found.append((err.value.code, err.value.evidence["invalid_count"], err.value.evidence["first_rows"]))
    return found


@needs_spark
def test_a_point_with_a_nan_coordinate_is_refused_by_spatial_join_like_geopandas(
    make_app: Any, workspace: Path
) -> None:
    """The fixtures' points with p4 at (50, NaN): GEOS calls it invalid, so spatial_join refuses input_path on both
    engines, naming row 3. Spark alone read it as an empty point and joined the rest."""
    import math

    import geopandas as gpd
    import shapely

    _write_fixtures(workspace)
    points = gpd.read_parquet(workspace / "points.parquet")
    points.loc[3, "geometry"] = shapely.Point(50, math.nan)
    points.to_parquet(workspace / "points.parquet", index=False)
    assert _refusals(make_app, "spatial_join", _join_args) == [("INPUT_GEOMETRY_INVALID", 1, [3])] * 2


@needs_spark
def test_summarize_points_on_spark_matches_hand_statistics_and_geopandas(make_app: Any, workspace: Path) -> None:
    # value: p1 1, p2 2, p3 null, p4 4, p5 5. A holds p1, p3, p5 -> 1 and 5 (one null); B holds p2, p3 -> 2
    # (one null); C holds nothing: sum and count 0, mean/min/max empty.
    import geopandas as gpd

    _write_fixtures(workspace)
    points = gpd.read_parquet(workspace / "points.parquet")
    points["value"] = [1.0, 2.0, None, 4.0, 5.0]
    points.to_parquet(workspace / "valued.parquet", index=False)
    args = {"input_path": "polygons.parquet", "points_path": "valued.parquet", "field": "value"}
    result = make_app(MAPSMITH_STACK="sedona").run("summarize_points_in_polygons", {**args, "output_path": "s.parquet"})
    out = _read(workspace / "s.parquet")
    assert list(out["value_mean"].fillna(-1)) == [3.0, 2.0, -1]
    assert list(out["value_sum"]) == [6.0, 2.0, 0.0]
    assert list(out["value_min"].fillna(-1)) == [1.0, 2.0, -1]
    assert list(out["value_max"].fillna(-1)) == [5.0, 2.0, -1]
    assert list(out["value_count"]) == [2, 1, 0]
    assert list(out["value_null_count"]) == [1, 1, 0]
    assert result.answer["points_with_null_value"] == 1 and result.answer["null_values_in_polygons"] == 2
    assert [w["code"] for w in result.warnings] == ["NULL_VALUES_EXCLUDED"]

    make_app().run("summarize_points_in_polygons", {**args, "output_path": "s_gpd.parquet"})
    _same_frames(out, _read(workspace / "s_gpd.parquet"))


# -- nearest_join, dissolve_layer, overlay_layers on Spark -----------------------------------------
#
# The vector issue's drawing (tests/vector/test_engine_parity.py), shifted to a local grid in EPSG:32610
# (x0 = 500,000 E, y0 = 5,000,000 N, scale within 0.04 % of true, so distances are planar metres):
#
#   lines  L1 (0,200)-(200,200), L2 x = 400 from y 0 to 400
#   probes A (50,150): 50 m below L1; B (380,100): 20 m left of L2 (L1's end is 205.9 m);
#          C (300,250): 100 m from L2, 111.8 m from L1's end (200,200);
#          T (300,200): 100 m from L1's end and 100 m from L2 -- a tie, which L1 (first in lines) wins;
#          N: no geometry -- never matched
#   zones  Z1 0..100 x 0..100 (grp A), Z2 100..200 x 0..100 (grp A), Z3 500..600 x 500..600 (grp B),
#          Z4 300..400 x 0..50 (grp null)
#   cutters K 50..150 x 0..100 (half of Z1, half of Z2); K2 200..250 x 0..100 (touches Z2 along x = 200)

GRID_CRS = "EPSG:32610"
X0, Y0 = 500_000, 5_000_000
NEW_SPARK_OPERATIONS = ("nearest_join", "dissolve_layer", "overlay_layers")
GEOMETRY_TOLERANCE = 1e-6


def _g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


def _grid_box(x1: float, y1: float, x2: float, y2: float) -> Any:
    import shapely

    return shapely.box(*_g(x1, y1), *_g(x2, y2))


def _write_grid(ws: Path, path: str, geometries: list[Any], crs: str = GRID_CRS, **columns: list[Any]) -> None:
    import geopandas as gpd

    gpd.GeoDataFrame(dict(columns), geometry=geometries, crs=crs).to_parquet(ws / path, index=False)


def _write_drawing(ws: Path) -> None:
    import shapely

    _write_grid(
        ws,
        "lines.parquet",
        [shapely.LineString([_g(0, 200), _g(200, 200)]), shapely.LineString([_g(400, 0), _g(400, 400)])],
        lid=["L1", "L2"],
        name=["top", "east"],
    )
    _write_grid(
        ws,
        "probes.parquet",
        [shapely.Point(_g(*xy)) for xy in [(50, 150), (380, 100), (300, 250), (300, 200)]] + [None],
        qid=["A", "B", "C", "T", "N"],
        name=["a", "b", "c", "t", "n"],
    )
    _write_grid(
        ws,
        "zones.parquet",
        [_grid_box(0, 0, 100, 100), _grid_box(100, 0, 200, 100), _grid_box(500, 500, 600, 600)]
        + [_grid_box(300, 0, 400, 50)],
        zid=["Z1", "Z2", "Z3", "Z4"],
        grp=["A", "A", "B", None],
        name=["north", "south", "far", "nul"],
        v=[1.0, None, 4.0, 8.0],
        code=[11, 12, 13, 14],
    )
    _write_grid(
        ws,
        "cutters.parquet",
        [_grid_box(50, 0, 150, 100), _grid_box(200, 0, 250, 100)],
        cid=["K", "K2"],
        name=["k", "k2"],
    )


@pytest.fixture
def sedona_app(workspace: Path, spark_master: str) -> Any:
    from mapsmith.app import MapSmith

    def make(**env: str) -> Any:
        environ = {"MAPSMITH_WORKSPACE": str(workspace), **sedona_environment(spark_master), **env}
        app = MapSmith(environ)
        missing = [op for op in NEW_SPARK_OPERATIONS if not app.host.implementations_for(op, "sedona")]
        assert not missing, f"the sedona stack does not register {missing}"
        return app

    return make


def _plain(value: Any) -> Any:
    import pandas as pd

    return None if pd.isna(value) else value


def _values(frame: Any, name: str) -> list[Any]:
    return [_plain(v) for v in frame[name].tolist()]


def _close(got: list[Any], want: list[Any], tolerance: float = 1e-9) -> bool:
    """Equal lists where numbers may differ by ``tolerance`` (relative and absolute) and None is None."""
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        if a is None or b is None or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            if a != b:
                return False
        elif abs(a - b) > tolerance * max(1.0, abs(b)):
            return False
    return True


def _same_rows(spark: Any, geopandas: Any) -> None:
    """Same columns in the same order, the same values row by row (floats to 1e-9), the same CRS, and
    geometries of the same type within GEOMETRY_TOLERANCE of each other (Hausdorff distance: JTS and GEOS may
    start a ring at another vertex)."""
    import shapely

    assert list(spark.columns) == list(geopandas.columns)
    assert len(spark) == len(geopandas)
    assert spark.crs.equals(geopandas.crs)
    for name in (c for c in geopandas.columns if c != geopandas.geometry.name):
        got, want = _values(spark, name), _values(geopandas, name)
        if any(isinstance(v, float) for v in got + want):
            assert _close(got, want), (name, got, want)
        else:
            assert got == want, name
    a, b = spark.geometry.values, geopandas.geometry.values
    assert list(shapely.get_type_id(a)) == list(shapely.get_type_id(b))
    present = ~shapely.is_missing(b)
    assert list(shapely.is_missing(a)) == list(~present)
    assert float(shapely.hausdorff_distance(a[present], b[present]).max(initial=0.0)) <= GEOMETRY_TOLERANCE


def _same_files(ws: Path, spark: str, geopandas: str) -> None:
    """_same_rows, and the same Parquet type for every attribute field (pandas reads a 64-bit integer field
    holding nulls as floats from one file and as Int64 from the other: the files are what is compared)."""
    import pyarrow.parquet as pq

    _same_rows(_read(ws / spark), _read(ws / geopandas))
    # pandas 3 writes text as large_string, Spark as string: one logical type, two offset widths.
    types = [
        {
            f.name: str(f.type).replace("large_string", "string")
            for f in pq.read_schema(ws / name)
            if f.name != "geometry"
        }
        for name in (spark, geopandas)
    ]
    assert types[0] == types[1]


def _record(ws: Path, name: str) -> dict[str, Any]:
    return json.loads((ws / f"{name}.provenance.json").read_text("utf-8"))


def _spark_engine_recorded(record: dict[str, Any], *inputs: str) -> None:
    assert record["engine"]["name"] == "apache-sedona"
    assert record["x-mapsmith:engine_choice"] == {"stack": "sedona", "engine": "apache-sedona-spark"}
    from mapsmith_sedona.spark_session import running

    session = running()
    assert session is not None
    components = record["engine"]["x-mapsmith:components"]
    assert components["spark"].startswith("4.0.") and components["spark_master"] == session.master
    assert record["parameters"]["x-mapsmith:spark_cluster"]["master"] == session.master
    assert int(components["partitions"]) >= 1
    assert set(record["parameters"]["x-mapsmith:spark_job"]["input_partitions"]) == set(inputs)


@needs_spark
def test_nearest_join_on_spark_matches_the_drawing_and_geopandas(
    sedona_app: Any, make_app: Any, workspace: Path
) -> None:
    _write_drawing(workspace)
    args = {"input_path": "probes.parquet", "join_path": "lines.parquet"}
    progress: list[float] = []
    result = sedona_app().run(
        "nearest_join", {**args, "output_path": "near.parquet"}, progress=lambda f, m: progress.append(f)
    )
    out = _read(workspace / "near.parquet")
    assert list(out.columns) == ["qid", "name", "geometry", "lid", "name_join", "distance_m"]
    assert _values(out, "lid") == ["L1", "L2", "L2", "L1", None]
    assert _close(_values(out, "distance_m"), [50.0, 20.0, 100.0, 100.0, None], 1e-9)
    answer = result.answer
    assert (answer["input_features_matched"], answer["input_features_unmatched"]) == (4, 1)
    assert answer["input_features_with_tied_nearest"] == 1  # T
    assert answer["join_features_used"] == 2
    assert answer["renamed_fields"] == {"name": "name_join"}
    assert answer["distance_m"]["min"] == pytest.approx(20.0) and answer["distance_m"]["max"] == pytest.approx(100.0)
    assert progress[-1] == 1.0 and progress == sorted(progress)
    record = _record(workspace, "near.parquet")
    _spark_engine_recorded(record, "input_path", "join_path")

    make_app().run("nearest_join", {**args, "output_path": "near_gpd.parquet"})
    _same_files(workspace, "near.parquet", "near_gpd.parquet")
    gpd_record = _record(workspace, "near_gpd.parquet")
    for key in (
        "x-mapsmith:join_counts",
        "x-mapsmith:renamed_fields",
        "x-mapsmith:tie_rule",
        "x-mapsmith:distance_method",
    ):
        assert record["parameters"][key] == gpd_record["parameters"][key], key
    assert record["crs_decisions"] == gpd_record["crs_decisions"]


@needs_spark
def test_nearest_join_within_a_maximum_distance_on_spark(sedona_app: Any, make_app: Any, workspace: Path) -> None:
    # 60 m: A (50 m) and B (20 m) are matched; C and T (100 m) are not, nor is N.
    _write_drawing(workspace)
    args = {"input_path": "probes.parquet", "join_path": "lines.parquet", "max_distance_meters": 60}
    result = sedona_app().run("nearest_join", {**args, "output_path": "near60.parquet"})
    out = _read(workspace / "near60.parquet")
    assert _values(out, "lid") == ["L1", "L2", None, None, None]
    assert _close(_values(out, "distance_m"), [50.0, 20.0, None, None, None], 1e-9)
    assert result.answer["nearest_beyond_max_distance"] == 0 and result.answer["input_features_unmatched"] == 3
    make_app().run("nearest_join", {**args, "output_path": "near60_gpd.parquet"})
    _same_files(workspace, "near60.parquet", "near60_gpd.parquet")
    assert (
        _record(workspace, "near60.parquet")["parameters"]["x-mapsmith:join_counts"]
        == _record(workspace, "near60_gpd.parquet")["parameters"]["x-mapsmith:join_counts"]
    )


@needs_spark
def test_nearest_join_widens_its_search_round_by_round(
    sedona_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From 1 m, growing 4x: 1, 4, 16, 64 (A 50 m and B 20 m settle), 256 (C and T, 100 m: 100 + 1e-6 <= 256),
    # and no sixth round, as every probe with a geometry is then matched.
    from mapsmith_sedona import spark_nearest

    _write_drawing(workspace)
    monkeypatch.setattr(spark_nearest, "_search_radii", lambda ctx, n: (1.0, 565.685))
    sedona_app().run(
        "nearest_join", {"input_path": "probes.parquet", "join_path": "lines.parquet", "output_path": "n.parquet"}
    )
    out = _read(workspace / "n.parquet")
    assert _values(out, "lid") == ["L1", "L2", "L2", "L1", None]
    search = _record(workspace, "n.parquet")["parameters"]["x-mapsmith:spark_job"]["nearest_search"]
    assert search["distance_join_rounds"] == 5 and search["last_radius_crs_units"] == 256.0


@needs_spark
def test_nearest_join_in_degrees_is_refused_on_spark(sedona_app: Any, workspace: Path) -> None:
    _write_fixtures(workspace, crs="EPSG:4326", scale=0.1)
    with pytest.raises(CRSError) as err:
        sedona_app().run(
            "nearest_join",
            {"input_path": "points.parquet", "join_path": "polygons.parquet", "output_path": "n.parquet"},
        )
    assert err.value.code == "CRS_NOT_PROJECTED" and "MAPSMITH_STACK=opensource" in err.value.hint
    assert sorted(p.name for p in workspace.iterdir()) == ["points.parquet", "polygons.parquet"]


@needs_spark
def test_dissolve_on_spark_matches_hand_areas_aggregations_and_geopandas(
    sedona_app: Any, make_app: Any, workspace: Path
) -> None:
    # Groups sorted by grp, the null key last: A = Z1 + Z2 (200 x 100 m), v 1 + null = 1, last name 'south',
    # 2 zid; B = Z3 (100 x 100 m), v 4, 'far', 1; null = Z4 (100 x 50 m), v 8, 'nul', 1. code is dropped.
    _write_drawing(workspace)
    args = {"input_path": "zones.parquet", "by_fields": "grp", "aggregations": "v:sum,name:last,zid:count"}
    result = sedona_app().run("dissolve_layer", {**args, "output_path": "d.parquet"})
    out = _read(workspace / "d.parquet")
    assert list(out.columns) == ["grp", "v", "name", "zid", "geometry"]
    assert _values(out, "grp") == ["A", "B", None]
    assert [round(a, 6) for a in out.geometry.area] == [20_000.0, 10_000.0, 5_000.0]
    assert _values(out, "v") == [1.0, 4.0, 8.0]
    assert _values(out, "name") == ["south", "far", "nul"]
    assert _values(out, "zid") == [2, 1, 1]
    assert result.answer["group_count"] == 3 and result.answer["null_key_features"] == 1
    assert result.answer["fields_dropped"] == ["code"]
    assert [g["feature_count"] for g in result.answer["groups"]] == [2, 1, 1]
    record = _record(workspace, "d.parquet")
    _spark_engine_recorded(record, "input_path")
    (exact,) = [c for c in record["verification"] if c["name"] == "feature_count_exact"]
    assert exact["passed"] is True and "expected 3 features" in exact["detail"]

    make_app().run("dissolve_layer", {**args, "output_path": "d_gpd.parquet"})
    _same_files(workspace, "d.parquet", "d_gpd.parquet")
    gpd_record = _record(workspace, "d_gpd.parquet")
    for key in ("x-mapsmith:fields_dropped", "x-mapsmith:null_key_features"):
        assert record["parameters"][key] == gpd_record["parameters"][key]


@needs_spark
def test_dissolve_everything_on_spark_with_median_and_min(sedona_app: Any, make_app: Any, workspace: Path) -> None:
    # One group: Z1 + Z2 + Z3 + Z4 = 20,000 + 10,000 + 5,000 m2; median of v (1, 4, 8; the null skipped) 4;
    # the least name 'far'; first code 11.
    _write_drawing(workspace)
    args = {"input_path": "zones.parquet", "aggregations": "v:median,name:min,code:first"}
    sedona_app().run("dissolve_layer", {**args, "output_path": "all.parquet"})
    out = _read(workspace / "all.parquet")
    assert [round(a, 6) for a in out.geometry.area] == [35_000.0]
    assert (_values(out, "v"), _values(out, "name"), _values(out, "code")) == ([4.0], ["far"], [11])
    make_app().run("dissolve_layer", {**args, "output_path": "all_gpd.parquet"})
    _same_files(workspace, "all.parquet", "all_gpd.parquet")


@needs_spark
def test_dissolve_null_keys_refused_on_spark_as_on_geopandas(sedona_app: Any, make_app: Any, workspace: Path) -> None:
    _write_drawing(workspace)
    args = {"input_path": "zones.parquet", "by_fields": "grp", "null_keys": "refuse"}
    refusals = []
    for app, out in ((sedona_app(), "r1.parquet"), (make_app(), "r2.parquet")):
        with pytest.raises(Exception) as err:
            app.run("dissolve_layer", {**args, "output_path": out})
        refusals.append((err.value.code, err.value.evidence["by_field"], err.value.evidence["first_rows"]))
    assert refusals == [("NULL_GROUP_KEY", {"grp": 1}, [3])] * 2


OVERLAY_EXPECTED = {
    # intersection: Z1 x K and Z2 x K, 5,000 m2 each; Z2 x K2 is the line x = 200 (no area: dropped, counted).
    "intersection": ([("Z1", "K"), ("Z2", "K")], [5_000.0, 5_000.0], 1),
    # difference: Z1 west half, Z2 east half (K2 takes nothing), Z3 and Z4 whole.
    "difference": ([("Z1", None), ("Z2", None), ("Z3", None), ("Z4", None)], [5_000.0, 5_000.0, 10_000.0, 5_000.0], 0),
    # identity: the intersection's pieces, then the difference's.
    "identity": (
        [("Z1", "K"), ("Z2", "K"), ("Z1", None), ("Z2", None), ("Z3", None), ("Z4", None)],
        [5_000.0, 5_000.0, 5_000.0, 5_000.0, 10_000.0, 5_000.0],
        1,
    ),
    # symmetric_difference: the difference's pieces, then overlay_path's: K minus Z1 and Z2 is empty (dropped
    # by geopandas too); K2 only touches Z2, so it stays whole (50 x 100 m).
    "symmetric_difference": (
        [("Z1", None), ("Z2", None), ("Z3", None), ("Z4", None), (None, "K2")],
        [5_000.0, 5_000.0, 10_000.0, 5_000.0, 5_000.0],
        0,
    ),
    # union: the intersection's pieces, then the symmetric difference's.
    "union": (
        [("Z1", "K"), ("Z2", "K"), ("Z1", None), ("Z2", None), ("Z3", None), ("Z4", None), (None, "K2")],
        [5_000.0, 5_000.0, 5_000.0, 5_000.0, 10_000.0, 5_000.0, 5_000.0],
        1,
    ),
}


@needs_spark
@pytest.mark.parametrize("how", list(OVERLAY_EXPECTED))
def test_overlay_on_spark_matches_hand_areas_and_geopandas(
    sedona_app: Any, make_app: Any, workspace: Path, how: str
) -> None:
    _write_drawing(workspace)
    pieces, areas, no_area = OVERLAY_EXPECTED[how]
    args = {"input_path": "zones.parquet", "overlay_path": "cutters.parquet", "how": how}
    result = sedona_app().run("overlay_layers", {**args, "output_path": "o.parquet"})
    out = _read(workspace / "o.parquet")
    cid = _values(out, "cid") if "cid" in out.columns else [None] * len(out)
    assert list(zip(_values(out, "zid"), cid, strict=True)) == pieces
    assert [round(a, 6) for a in out.geometry.area] == areas
    assert result.answer["pieces_without_area_dropped"] == no_area
    assert result.answer["lower_dimension_fragments_dropped"] == no_area  # the one line piece
    if how != "difference":
        assert result.answer["renamed_fields"] == {"name": ["name_1", "name_2"]}
    record = _record(workspace, "o.parquet")
    _spark_engine_recorded(record, "input_path", "overlay_path")

    make_app().run("overlay_layers", {**args, "output_path": "o_gpd.parquet"})
    _same_files(workspace, "o.parquet", "o_gpd.parquet")
    gpd_record = _record(workspace, "o_gpd.parquet")
    for key in ("x-mapsmith:lower_dimension_fragments_dropped", "x-mapsmith:renamed_fields"):
        assert record["parameters"][key] == gpd_record["parameters"][key]
    assert record["crs_decisions"]["analysis_crs"] == gpd_record["crs_decisions"]["analysis_crs"]


def _write_scatter(ws: Path) -> None:
    """A seeded scatter on the grid, too big to draw: 400 points on whole metres (so exact ties occur),
    60 overlapping squares in 5 groups, 30 short lines; for comparing with GeoPandas row by row."""
    import numpy as np
    import shapely

    rng = np.random.default_rng(8)
    xy = rng.integers(0, 2_000, size=(400, 2))
    _write_grid(ws, "scatter_points.parquet", [shapely.Point(_g(x, y)) for x, y in xy], pid=list(range(400)))
    corners = rng.integers(0, 1_900, size=(60, 2))
    sides = rng.integers(20, 300, size=60)
    _write_grid(
        ws,
        "scatter_squares.parquet",
        [_grid_box(x, y, x + s, y + s) for (x, y), s in zip(corners, sides, strict=True)],
        sid=list(range(60)),
        grp=[f"g{i % 5}" for i in range(60)],
        area_m2=[float(s) ** 2 for s in sides],
    )
    starts = rng.integers(0, 2_000, size=(30, 2))
    ends = starts + rng.integers(-100, 100, size=(30, 2))
    _write_grid(
        ws,
        "scatter_lines.parquet",
        [shapely.LineString([_g(*a), _g(*b)]) for a, b in zip(starts, ends, strict=True)],
        lid=list(range(30)),
    )


@needs_spark
def test_spark_engines_give_the_geopandas_rows_on_a_seeded_scatter(
    sedona_app: Any, make_app: Any, workspace: Path
) -> None:
    _write_scatter(workspace)
    spark, reference = sedona_app(), make_app()
    runs = [
        ("nearest_join", {"input_path": "scatter_points.parquet", "join_path": "scatter_lines.parquet"}),
        ("nearest_join", {"input_path": "scatter_lines.parquet", "join_path": "scatter_squares.parquet"}),
        (
            "dissolve_layer",
            {"input_path": "scatter_squares.parquet", "by_fields": "grp", "aggregations": "area_m2:sum"},
        ),
        (
            "overlay_layers",
            {"input_path": "scatter_squares.parquet", "overlay_path": "scatter_squares.parquet", "how": "union"},
        ),
    ]
    for n, (operation, args) in enumerate(runs):
        spark.run(operation, {**args, "output_path": f"s{n}.parquet"})
        reference.run(operation, {**args, "output_path": f"s{n}_gpd.parquet"})
        _same_files(workspace, f"s{n}.parquet", f"s{n}_gpd.parquet")
    # A line lying inside overlapping squares is 0 m from each of them: a tie, which the lowest sid wins.
    counts = [_record(workspace, f"s1{e}.parquet")["parameters"]["x-mapsmith:join_counts"] for e in ("", "_gpd")]
    assert counts[0] == counts[1] and counts[0]["input_features_with_tied_nearest"] > 0


# -- through MCP ---------------------------------------------------------------------------------


@needs_spark
def test_spatial_join_on_spark_through_a_real_mcp_client(workspace: Path) -> None:
    """A stdio server started with MAPSMITH_STACK=sedona runs the join in its own Spark (its own JVM) and
    answers with the hand rows' counts; its manifest is validated at teardown like every other."""
    import anyio

    from mcp_client import call, mcp_session

    _write_fixtures(workspace)

    async def conversation() -> Any:
        env = {"MAPSMITH_STACK": "sedona", "MAPSMITH_SPARK_MASTER": "local[1]", "MAPSMITH_SPARK_DRIVER_MEMORY": "1g"}
        async with mcp_session(workspace, **env) as (session, _):
            return await call(session, "spatial_join", _join_args(predicate="intersects", how="left"))

    reply = anyio.run(conversation)
    assert not reply.is_error, reply.data
    assert reply.data["engine"]["name"] == "apache-sedona"
    assert reply.data["engine"]["x-mapsmith:components"]["spark_master"] == "local[1]"
    # LEFT_INTERSECTS: p3 on the shared edge meets A and B, p4 meets nothing and keeps one empty row
    assert reply.data["answer"]["output_features"] == len(LEFT_INTERSECTS) == 6
    assert reply.data["answer"]["matched_pairs"] == 5
    record = json.loads((workspace / "joined.parquet.provenance.json").read_text("utf-8"))
    assert record["engine"]["name"] == "apache-sedona"
