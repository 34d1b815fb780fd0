"""The sedona stack on a real Spark standalone cluster: a master and two one-core workers, separate JVMs.

Started by tests/spark_cluster.py when MAPSMITH_TEST_SPARK_CLUSTER=1 (the nox ``spark`` session sets it);
without it the cluster tests skip (and fail instead when MAPSMITH_SPARK_REQUIRED=1), while the tests of
the session's settings run everywhere. What is asserted is what a run on a cluster must show: the tasks
ran in executors on both workers (the driver's status store, the data Spark's monitoring REST API
serves; executors mapped to workers by their work folders), Sedona's jars reached the executors and its
functions ran there, the manifest names the cluster, and partitioned GeoParquet is read and written by the
executors.

Layout, in EPSG:32633 metres (as in test_spark_sedona.py)::

    A: square 0..10 x 0..10   B: square 10..20 x 0..10 (shares the edge x=10 with A)
    C: square 100..110 x 100..110 (no point near it)
    p1 (5,5) in A; p2 (15,5) in B; p3 (10,5) on the shared edge: in A and in B;
    p4 (50,50) in nothing; p5 (2,2) in A

count_in_polygons: A 3 (p1, p3, p5), B 2 (p2, p3), C 0 -- 5 pairs, 4 points counted.
spatial_join points -> polygons, intersects, how='left': p1-A, p2-B, p3-A, p3-B, p4-(none), p5-A (6 rows,
input order then join order).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import EngineError
from spark_cluster import CLUSTER_ENV, EXTERNAL_MASTER_ENV, Cluster, on_cluster

pytest_plugins = ["spark_cluster"]  # its session fixtures: spark_master, spark_cluster (one cluster per session)

HAS_PYSPARK = importlib.util.find_spec("pyspark") is not None
REQUIRED = os.environ.get("MAPSMITH_SPARK_REQUIRED") == "1"
if REQUIRED and not HAS_PYSPARK:
    raise RuntimeError("MAPSMITH_SPARK_REQUIRED=1 but pyspark is not installed (pip install '.[spark]')")
if REQUIRED and os.environ.get(CLUSTER_ENV) != "1" and not os.environ.get(EXTERNAL_MASTER_ENV):
    raise RuntimeError(f"MAPSMITH_SPARK_REQUIRED=1: set {CLUSTER_ENV}=1 so the cluster tests run (nox -s spark does)")
needs_cluster = pytest.mark.skipif(
    not HAS_PYSPARK or os.environ.get(CLUSTER_ENV) != "1",
    reason=f"no Spark standalone cluster: set {CLUSTER_ENV}=1 (nox -s spark) to start one for the session",
)

CRS = "EPSG:32633"
POLYGON_NAMES = ["A", "B", "C"]
EXPECTED_COUNTS = [3, 2, 0]
LEFT_INTERSECTS = [("p1", "A"), ("p2", "B"), ("p3", "A"), ("p3", "B"), ("p4", None), ("p5", "A")]
POINTS = [(5, 5), (15, 5), (10, 5), (50, 50), (2, 2)]


@pytest.fixture(scope="module", autouse=True)
def _stop_spark_after_module() -> Any:
    yield
    if HAS_PYSPARK:
        from mapsmith_sedona.spark_session import stop

        stop()  # the cluster's cores go back to the master for the next module's session


def _polygons() -> Any:
    import geopandas as gpd
    import numpy as np
    import shapely

    return gpd.GeoDataFrame(
        {"id": np.array([1, 2, 3], dtype="int32"), "name": POLYGON_NAMES},
        geometry=[shapely.box(0, 0, 10, 10), shapely.box(10, 0, 20, 10), shapely.box(100, 100, 110, 110)],
        crs=CRS,
    )


def _points(rows: slice = slice(None)) -> Any:
    import geopandas as gpd
    import numpy as np
    import shapely

    ids = np.arange(1, 6, dtype="int64")[rows]
    return gpd.GeoDataFrame(
        {"id": ids, "name": [f"p{i}" for i in ids]},
        geometry=[shapely.Point(*POINTS[i - 1]) for i in ids],
        crs=CRS,
    )


def _write_fixtures(ws: Path) -> None:
    _polygons().to_parquet(ws / "polygons.parquet", index=False)
    _points().to_parquet(ws / "points.parquet", index=False)


def _write_point_parts(folder: Path) -> list[Path]:
    """p1..p5 as three parts, the largest listed last: part-0 p1, part-1 p2, part-2 p3 p4 p5. Spark packs
    files into tasks largest first, so reading in Spark's order would start with p3."""
    folder.mkdir()
    files = []
    for n, rows in enumerate((slice(0, 1), slice(1, 2), slice(2, 5))):
        files.append(folder / f"part-{n}.parquet")
        _points(rows).to_parquet(files[-1], index=False)
    (folder / "_SUCCESS").write_bytes(b"")  # Spark's marker: not a member, and must not be read
    return files


def _sedona_app(make_app: Callable[..., Any], master: str) -> Any:
    return make_app(MAPSMITH_STACK="sedona", MAPSMITH_SPARK_MASTER=master, MAPSMITH_SPARK_MIN_EXECUTORS="2")


def _record(ws: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((ws / f"{name}.provenance.json").read_text("utf-8")))


def _tasks_by_worker(cluster: Cluster) -> dict[int, int]:
    """Completed tasks of this session's executors, summed per worker (0 and 1), from the driver's status store."""
    from mapsmith_sedona.spark_executors import executor_summaries
    from mapsmith_sedona.spark_session import running

    session = running()
    assert session is not None
    context = session.spark.sparkContext
    summaries = executor_summaries(context)
    assert summaries is not None
    where = cluster.executor_workers(context.applicationId)
    done = {n: 0 for n in range(len(cluster.work_dirs))}
    for summary in summaries:
        if summary["id"] != "driver":
            done[where[summary["id"]]] += summary["completedTasks"]
    return done


def _ran_on_both_workers(cluster: Cluster, before: dict[int, int] | None) -> dict[int, int]:
    after = _tasks_by_worker(cluster)
    gained = {n: after[n] - (before or {}).get(n, 0) for n in after}
    assert len(gained) == 2 and all(v > 0 for v in gained.values()), gained
    return after


def _start_session(make_app: Callable[..., Any], master: str, ws: Path) -> None:
    """Start the module's session on the cluster with a run that is not under test (the first run of a
    process pays for the session; the tests below count tasks from a known point)."""
    _write_fixtures(ws)
    _sedona_app(make_app, master).run(
        "count_in_polygons",
        {"input_path": "polygons.parquet", "points_path": "points.parquet", "output_path": "warm.parquet"},
    )


# -- the session's settings, everywhere -----------------------------------------------------------


def test_min_executors_setting_is_checked_before_anything_starts() -> None:
    from mapsmith_sedona.spark_executors import min_executors_of

    assert min_executors_of({}, "spark://127.0.0.1:7077") == 1
    assert min_executors_of({"MAPSMITH_SPARK_MIN_EXECUTORS": "2"}, "spark://127.0.0.1:7077") == 2
    assert min_executors_of({"MAPSMITH_SPARK_MIN_EXECUTORS": "2"}, "local[2]") == 0  # the driver runs the tasks
    with pytest.raises(EngineError) as err:
        min_executors_of({"MAPSMITH_SPARK_MIN_EXECUTORS": "two"}, "spark://127.0.0.1:7077")
    assert err.value.code == "SPARK_MIN_EXECUTORS_INVALID" and "MAPSMITH_SPARK_MIN_EXECUTORS" in err.value.hint


class _Registered:
    """A SparkContext's py4j chain down to getExecutorMemoryStatus().size(): ``block_managers`` of them."""

    def __init__(self, block_managers: int) -> None:
        self.block_managers = block_managers
        self._jsc = self

    def sc(self) -> _Registered:
        return self

    def getExecutorMemoryStatus(self) -> _Registered:  # noqa: N802 - Spark's name
        return self

    def size(self) -> int:
        return self.block_managers


def test_a_cluster_that_gives_no_executors_is_refused_not_waited_on_forever() -> None:
    from mapsmith_sedona.spark_executors import wait_for_executors

    # the driver's block manager alone: no executor registered
    with pytest.raises(EngineError) as err:
        wait_for_executors(_Registered(1), 2, "spark://127.0.0.1:7077", timeout_s=0.3)
    assert err.value.code == "SPARK_NO_EXECUTORS"
    assert err.value.evidence["executors"] == 0 and err.value.evidence["wanted"] == 2
    assert "MAPSMITH_SPARK_MIN_EXECUTORS" in err.value.hint
    # clean twin: the driver's and two executors' block managers -- no wait
    assert wait_for_executors(_Registered(3), 2, "spark://127.0.0.1:7077", timeout_s=0.3) < 0.3


def test_driver_binds_to_loopback_only_for_a_master_on_this_machine() -> None:
    from mapsmith_sedona.spark_session import master_on_loopback, ui_enabled_of

    assert master_on_loopback("spark://127.0.0.1:7077") and master_on_loopback("spark://localhost:7077")
    assert not master_on_loopback("spark://spark-master.internal:7077")
    assert not master_on_loopback("spark://127.0.0.1:7077,10.0.0.2:7077")  # an HA pair off this machine
    assert not master_on_loopback("k8s://https://10.0.0.1:6443")
    assert ui_enabled_of({}) is False and ui_enabled_of({"MAPSMITH_SPARK_UI": "1"}) is True
    with pytest.raises(EngineError) as err:
        ui_enabled_of({"MAPSMITH_SPARK_UI": "yes"})
    assert err.value.code == "SPARK_UI_SETTING_INVALID"


# -- on the cluster -------------------------------------------------------------------------------


@needs_cluster
def test_the_cluster_is_a_master_and_two_workers_started_from_spark_class(spark_cluster: Cluster) -> None:
    state = spark_cluster.state()
    assert state["status"] == "ALIVE" and state["url"] == spark_cluster.master_url
    workers = [(w["host"], w["state"], w["cores"], w["memory"]) for w in state["workers"]]
    assert workers == [("127.0.0.1", "ALIVE", 1, 1024)] * 2
    assert len({p.pid for p in spark_cluster.processes}) == 3  # three JVMs
    print(f"cluster up in {spark_cluster.start_seconds} s (master {spark_cluster.master_seconds} s)")


@needs_cluster
def test_spatial_join_and_count_run_in_executors_on_both_workers(
    make_app: Callable[..., Any], workspace: Path, spark_cluster: Cluster, spark_master: str
) -> None:
    import geopandas as gpd

    _start_session(make_app, spark_master, workspace)
    app = _sedona_app(make_app, spark_master)

    before = _tasks_by_worker(spark_cluster)
    join = app.run(
        "spatial_join",
        {"input_path": "points.parquet", "join_path": "polygons.parquet", "output_path": "joined.parquet"},
    )
    before = _ran_on_both_workers(spark_cluster, before)
    out = gpd.read_parquet(workspace / "joined.parquet")
    got = [(n, None if j is None or j != j else j) for n, j in zip(out["name"], out["name_join"], strict=True)]
    assert got == LEFT_INTERSECTS
    assert join.answer["output_features"] == 6 and join.answer["matched_pairs"] == 5

    count = app.run(
        "count_in_polygons",
        {"input_path": "polygons.parquet", "points_path": "points.parquet", "output_path": "counts.parquet"},
    )
    _ran_on_both_workers(spark_cluster, before)
    counted = gpd.read_parquet(workspace / "counts.parquet")
    assert list(counted["name"]) == POLYGON_NAMES and list(counted["point_count"]) == EXPECTED_COUNTS
    assert count.answer["total_point_count"] == 5 and count.answer["points_counted"] == 4

    application = spark_cluster.state()["activeapps"]
    assert len(application) == 1 and application[0]["cores"] == 2  # one core of each worker
    for name in ("joined.parquet", "counts.parquet"):
        record = _record(workspace, name)  # validated against the schema at teardown (conftest's workspace)
        cluster = record["parameters"]["x-mapsmith:spark_cluster"]
        assert cluster == {
            "master": spark_master,
            "application_id": application[0]["id"],
            "spark_version": cluster["spark_version"],
            "sedona_version": "1.8.0",
            "deploy": "spark",
            "executors": 2,
            "executor_cores": 1,
            "executor_hosts": ["127.0.0.1"],
            "executor_memory": "1g",
        }
        assert cluster["spark_version"].startswith("4.0.")
        components = record["engine"]["x-mapsmith:components"]
        assert components["spark_master"] == spark_master
        assert components["spark_application"] == application[0]["id"]
        assert record["parameters"]["x-mapsmith:spark_job"]["master"] == spark_master


@needs_cluster
def test_sedona_jars_reach_the_executors_and_st_functions_run_there(
    make_app: Callable[..., Any], workspace: Path, spark_cluster: Cluster, spark_master: str
) -> None:
    from mapsmith_sedona.spark_session import running

    _start_session(make_app, spark_master, workspace)
    session = running()
    assert session is not None
    application = session.spark.sparkContext.applicationId
    before = _tasks_by_worker(spark_cluster)
    # evaluated row by row in 4 tasks (not folded on the driver): sum of x for x in 0..999
    total = session.spark.range(0, 1000, 1, 4).selectExpr("ST_X(ST_Point(CAST(id AS DOUBLE), 0.0D)) AS x")
    assert total.agg({"x": "sum"}).collect()[0][0] == 499_500.0
    _ran_on_both_workers(spark_cluster, before)
    executors = spark_cluster.executor_workers(application)
    assert sorted(executors.values()) == [0, 1]
    for executor, worker in executors.items():
        folder = spark_cluster.work_dirs[worker] / application / executor
        assert (folder / "sedona-spark-shaded-4.0_2.13-1.8.0.jar").is_file()  # fetched from the driver
        log = (folder / "stderr").read_text("utf-8", errors="replace")
        assert "sedona-spark-shaded-4.0_2.13-1.8.0.jar to class loader" in log
        assert "Running task" in log


def _listing_digest(files: list[Path], folder: Path) -> str:
    """The manifest spec's listing rule (section 3.3), worked here from the files: one line per part,
    '<relative name>\\0<sha256>\\n', sorted by name."""
    lines = sorted(
        f.relative_to(folder).as_posix().encode() + b"\0" + hashlib.sha256(f.read_bytes()).hexdigest().encode() + b"\n"
        for f in files
    )
    return hashlib.sha256(b"".join(lines)).hexdigest()


@needs_cluster
def test_executors_read_a_folder_of_parts_in_listing_order(
    make_app: Callable[..., Any], workspace: Path, spark_cluster: Cluster, spark_master: str
) -> None:
    """spark_parts.read_folder on the cluster: three parts (the largest listed last, which Spark reads
    first) come back in listing order p1..p5, the scan's tasks run on both workers, Sedona counts the points
    of each polygon from the parts (A 3, B 2, C 0), and the folder digests by the listing of its parts."""
    from mapsmith.provenance.digests import dataset_digest
    from mapsmith_sedona.spark_parts import read_folder
    from mapsmith_sedona.spark_session import running

    _start_session(make_app, spark_master, workspace)
    folder = workspace / "points_parts.parquet"
    files = _write_point_parts(folder)
    session = running()
    assert session is not None
    spark = session.spark
    before = _tasks_by_worker(spark_cluster)
    points = read_folder(spark, folder, "__row")
    # the three members, _SUCCESS not among them (Spark may pack small parts into one task: not asserted)
    assert sorted(Path(f).name for f in points.inputFiles()) == [f.name for f in files]
    assert [r["name"] for r in points.orderBy("__row").select("name").collect()] == ["p1", "p2", "p3", "p4", "p5"]
    # without the listing rank, Spark's own order starts with the largest part
    assert [r["name"] for r in points.select("name").collect()][0] == "p3"
    points.createOrReplaceTempView("parts_points")
    spark.read.format("geoparquet").load(str(workspace / "polygons.parquet")).createOrReplaceTempView("parts_polys")
    counted = spark.sql(
        "SELECT p.name, COUNT(t.name) AS n FROM parts_polys p LEFT JOIN parts_points t "
        "ON ST_Intersects(p.geometry, t.geometry) GROUP BY p.name ORDER BY p.name"
    ).collect()
    assert [(r["name"], r["n"]) for r in counted] == list(zip(POLYGON_NAMES, EXPECTED_COUNTS, strict=True))
    _ran_on_both_workers(spark_cluster, before)
    assert dataset_digest(folder) == _listing_digest(files, folder)  # _SUCCESS is not a member


@needs_cluster
def test_hive_keys_are_typed_as_the_other_engines_type_them(
    make_app: Callable[..., Any], workspace: Path, spark_master: str
) -> None:
    """year=2023 is an int32 key, day=2024-01-0N and ratio=1.50 text (Spark would guess a date and the double 1.5,
    written back as 1.5), as pyarrow and GeoPandas read them (parts.hive_key_types); the GeoPandas engine reads the
    same rows and types."""
    from mapsmith_sedona.spark_parts import read_folder
    from mapsmith_sedona.spark_session import running

    _start_session(make_app, spark_master, workspace)
    folder = workspace / "keyed.parquet"
    for n, rows in enumerate((slice(0, 2), slice(2, 5))):
        sub = folder / "year=2023" / f"day=2024-01-0{n + 1}" / "ratio=1.50"
        sub.mkdir(parents=True)
        _points(rows).to_parquet(sub / "part-0.parquet", index=False)
    session = running()
    assert session is not None
    df = read_folder(session.spark, folder, "__row")
    types = dict(df.dtypes)
    assert (types["year"], types["day"], types["ratio"]) == ("int", "string", "string")
    rows = [(r["name"], r["year"], r["day"], r["ratio"]) for r in df.orderBy("__row").collect()]
    assert rows == [("p1", 2023, "2024-01-01", "1.50"), ("p2", 2023, "2024-01-01", "1.50")] + [
        (name, 2023, "2024-01-02", "1.50") for name in ("p3", "p4", "p5")
    ]
    from mapsmith_opensource.io import read_layer

    frame = read_layer(folder)
    assert str(frame["year"].dtype) == "int32" and frame["year"].tolist() == [2023] * 5
    assert frame["day"].tolist() == ["2024-01-01"] * 2 + ["2024-01-02"] * 3 and frame["ratio"].tolist() == ["1.50"] * 5


@needs_cluster
def test_executors_write_parts_whose_listing_is_the_row_order(
    make_app: Callable[..., Any], workspace: Path, spark_cluster: Cluster, spark_master: str
) -> None:
    """spark_parts.write_parts on the cluster: the five points, ordered by id descending (p5..p1), written
    as two parts by two tasks; reading the parts in listing order gives p5..p1; _SUCCESS and the .crc files
    are written by Spark but are not members; the folder digests by the listing of its two parts and is
    described from the footers as one dataset of 5 features in EPSG:32633."""
    import pyarrow.parquet as pq
    from pyproj import CRS as ProjCRS
    from pyspark.sql import functions as F

    from mapsmith import parts
    from mapsmith.provenance.digests import dataset_digest
    from mapsmith_sedona.spark_parts import write_parts
    from mapsmith_sedona.spark_session import running

    _start_session(make_app, spark_master, workspace)
    session = running()
    assert session is not None
    points = session.spark.read.format("geoparquet").load(str(workspace / "points.parquet"))
    points = points.withColumn("__o", -F.col("id"))
    target = workspace / ".spark-out.tmp"
    before = _tasks_by_worker(spark_cluster)
    written = write_parts(points, ["__o"], target, ProjCRS.from_user_input(CRS).to_json(), 2)
    _ran_on_both_workers(spark_cluster, before)
    assert written == 2
    members = parts.part_files(target)
    assert [f.name[:10] for f in members] == ["part-00000", "part-00001"]
    names = [n for f in members for n in pq.read_table(f, columns=["name"]).column("name").to_pylist()]
    assert names == ["p5", "p4", "p3", "p2", "p1"]
    assert "__o" not in pq.read_schema(members[0]).names
    on_disk = sorted(p.name for p in target.iterdir())
    assert "_SUCCESS" in on_disk and any(n.endswith(".crc") for n in on_disk)
    assert dataset_digest(target) == _listing_digest(members, target)
    info = parts.inspect_folder(target)
    assert (info.feature_count, info.crs_label, info.geometry_types) == (5, "EPSG:32633", ("Point",))


# -- the same through MapSmith's runner --


@needs_cluster
def test_partitioned_input_is_read_by_executors_in_listing_order(
    make_app: Callable[..., Any], workspace: Path, spark_cluster: Cluster, spark_master: str
) -> None:
    """The points as a folder of three parts (largest listed last): the join's rows follow the listing, and
    the manifest digests the folder by the listing of its parts (``_SUCCESS`` not among them)."""
    import geopandas as gpd

    _start_session(make_app, spark_master, workspace)
    files = _write_point_parts(workspace / "points_parts.parquet")
    before = _tasks_by_worker(spark_cluster)
    _sedona_app(make_app, spark_master).run(
        "spatial_join",
        {"input_path": "points_parts.parquet", "join_path": "polygons.parquet", "output_path": "joined.parquet"},
    )
    _ran_on_both_workers(spark_cluster, before)
    out = gpd.read_parquet(workspace / "joined.parquet")
    got = [(n, None if j is None or j != j else j) for n, j in zip(out["name"], out["name_join"], strict=True)]
    assert got == LEFT_INTERSECTS
    record = _record(workspace, "joined.parquet")
    (points_input,) = [i for i in record["inputs"] if i.get("argument") == "input_path"]
    assert points_input["sha256"] == _listing_digest(files, workspace / "points_parts.parquet")


@needs_cluster
def test_spatial_join_writes_a_folder_of_parts_through_mapsmith(
    make_app: Callable[..., Any], workspace: Path, spark_cluster: Cluster, spark_master: str
) -> None:
    """Partitioned in, partitioned out, through the runner: an output_path ending in '.parquet/' routes the run to
    the Spark engine (the only one of the stack that writes parts), the executors write the parts on the shared
    disk, the runner verifies the folder and commits it whole, and the manifest digests it by the listing of its
    parts (Spark's _SUCCESS and .crc files are not members)."""
    import pyarrow.parquet as pq

    from mapsmith import parts

    _start_session(make_app, spark_master, workspace)
    _write_point_parts(workspace / "points_parts.parquet")
    before = _tasks_by_worker(spark_cluster)
    result = _sedona_app(make_app, spark_master).run(
        "spatial_join",
        {"input_path": "points_parts.parquet", "join_path": "polygons.parquet", "output_path": "joined_parts.parquet/"},
    )
    _ran_on_both_workers(spark_cluster, before)
    folder = workspace / "joined_parts.parquet"
    assert folder.is_dir() and result.answer["output_features"] == 6
    members = parts.part_files(folder)
    assert len(members) >= 1 and all(m.suffix == ".parquet" and not m.name.startswith(".") for m in members)
    rows = [row for m in members for row in pq.read_table(m, columns=["name", "name_join"]).to_pylist()]
    assert [(r["name"], r["name_join"]) for r in rows] == LEFT_INTERSECTS  # the listing order is the row order
    record = _record(workspace, "joined_parts.parquet")
    assert record["output"]["path"] == "joined_parts.parquet/"
    assert record["output"]["sha256"] == _listing_digest(members, folder)
    assert record["engine"]["name"] == "apache-sedona"  # Spark with Sedona
    assert record["parameters"]["x-mapsmith:spark_job"]["output_partitions"] == len(members)
    assert record["parameters"]["x-mapsmith:spark_cluster"]["master"] == spark_master
    assert not [p for p in workspace.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_cluster_tests_run_on_a_cluster_master(spark_master: str) -> None:
    """The fixture's contract: a cluster's URL when one was started, local[2] otherwise."""
    wanted = os.environ.get(CLUSTER_ENV) == "1" or bool(os.environ.get(EXTERNAL_MASTER_ENV))
    assert on_cluster(spark_master) is wanted
    assert spark_master.startswith("spark://") if wanted else spark_master == "local[2]"
