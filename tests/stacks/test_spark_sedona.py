"""Apache Sedona on Spark (MAPSMITH_STACK=sedona), run for real in local mode, against hand-worked answers.

The fixtures are small enough to count by hand (below), and every Spark result is also compared
with the GeoPandas engine's output for the same call. One SparkSession serves the whole module
(about 12 s to start). The Spark tests skip only when pyspark is not importable, and not even then
when MAPSMITH_SPARK_REQUIRED=1 (CI's spark session). The detection tests run everywhere.

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
    assert "no-jdk" in str(err.value) and "openjdk-17" in err.value.hint
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
def test_count_in_polygons_on_spark_matches_hand_counts_and_geopandas(make_app: Any, workspace: Path) -> None:
    _write_fixtures(workspace)
    progress: list[tuple[float, str]] = []
    result = make_app(MAPSMITH_STACK="sedona", MAPSMITH_SPARK_MASTER="local[2]").run(
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
    assert components["spark"].startswith("4.0.") and components["spark_master"] == "local[2]"
    assert int(components["partitions"]) >= 1
    job = record["parameters"]["x-mapsmith:spark_job"]
    assert job["master"] == "local[2]" and job["output_partitions"] == 1
    assert set(job["input_partitions"]) == {"input_path", "points_path"}
    assert record["x-mapsmith:engine_choice"] == {"stack": "sedona", "engine": "apache-sedona-spark"}

    make_app().run("count_in_polygons", _count_args("counts_gpd.parquet"))
    _same_frames(out, _read(workspace / "counts_gpd.parquet"))


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
    codes = []
    for env, out in (({"MAPSMITH_STACK": "sedona"}, "c1.parquet"), ({}, "c2.parquet")):
        with pytest.raises(Exception) as err:
            make_app(**env).run("count_in_polygons", _count_args(out))
        codes.append((err.value.code, err.value.evidence["invalid_count"], err.value.evidence["first_rows"]))
    assert codes == [("INPUT_GEOMETRY_INVALID", 1, [1])] * 2


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
