"""MAPSMITH_SPARK_WARM=1: the sedona stack's warm-up starts the process's Spark session before the first call.

``MapSmith.warm()`` (what the MCP server's engine worker runs on starting) then starts the session, waits for a
cluster's executors as a first run would, and the first Spark run finds it running: its manifest says who paid the
session's start (``x-mapsmith:spark_job.session_started_by``). Without the setting the warm-up starts nothing and
the first run starts the session; a value other than 1 or 0 is reported by the warm-up and refused by the first
Spark run. Who started the session is process state, so each test stops the session it finds first.

Layout, in EPSG:32633 metres: squares A (0..10 x 0..10) and B (10..20 x 0..10); points (5,5) and (2,2) in A,
(15,5) in B, (50,50) in neither: counts A 2, B 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import EngineError
from spark_cluster import on_cluster

pytest_plugins = ["spark_cluster"]  # its session fixtures: spark_master, spark_cluster (one cluster per session)

HAS_PYSPARK = importlib.util.find_spec("pyspark") is not None
if not HAS_PYSPARK and os.environ.get("MAPSMITH_SPARK_REQUIRED") == "1":  # CI's spark session: never skip there
    raise RuntimeError("MAPSMITH_SPARK_REQUIRED=1 but pyspark is not installed (pip install '.[spark]')")
pytestmark = pytest.mark.skipif(not HAS_PYSPARK, reason="pyspark is not installed (pip install 'mapsmith[spark]')")

COUNTS = {"A": 2, "B": 1}


@pytest.fixture
def sedona(make_app: Any, workspace: Path, spark_master: str) -> Any:
    """A sedona-stack MapSmith on the session's master, with no Spark session running in this process."""
    import geopandas as gpd
    import shapely

    from mapsmith_sedona.spark_session import stop

    stop()
    gpd.GeoDataFrame(
        {"name": ["A", "B"]}, geometry=[shapely.box(0, 0, 10, 10), shapely.box(10, 0, 20, 10)], crs="EPSG:32633"
    ).to_parquet(workspace / "polygons.parquet", index=False)
    gpd.GeoDataFrame(
        {"id": [1, 2, 3, 4]},
        geometry=[shapely.Point(5, 5), shapely.Point(2, 2), shapely.Point(15, 5), shapely.Point(50, 50)],
        crs="EPSG:32633",
    ).to_parquet(workspace / "points.parquet", index=False)

    def make(**env: str) -> Any:
        base = {"MAPSMITH_STACK": "sedona", "MAPSMITH_SPARK_MASTER": spark_master}
        if on_cluster(spark_master):
            base["MAPSMITH_SPARK_MIN_EXECUTORS"] = "2"  # both workers' executors before the first job
        return make_app(**base, **env)

    yield make
    stop()


def _count(app: Any, workspace: Path, output: str) -> dict[str, Any]:
    """Run count_in_polygons on Spark; its manifest's x-mapsmith:spark_job, after checking the hand counts."""
    import geopandas as gpd

    result = app.run(
        "count_in_polygons", {"input_path": "polygons.parquet", "points_path": "points.parquet", "output_path": output}
    )
    assert result.status == "ok", result.error
    assert result.engine["name"] == "apache-sedona"
    out = gpd.read_parquet(workspace / output)
    assert dict(zip(out["name"], out["point_count"], strict=True)) == COUNTS
    record = json.loads((workspace / f"{output}.provenance.json").read_text("utf-8"))
    return dict(record["parameters"]["x-mapsmith:spark_job"])


def test_without_the_setting_the_warm_up_starts_no_spark(sedona: Any, workspace: Path) -> None:
    from mapsmith_sedona.spark_session import running

    app = sedona()
    assert app.warm() == {"sedona": "ready", "opensource": "ready"}
    assert running() is None  # no JVM held for runs that may never come
    first = _count(app, workspace, "first.parquet")
    assert first["session_started_by"] == "this run"
    assert running() is not None and first["session_start_seconds"] == running().start_seconds
    assert _count(app, workspace, "second.parquet")["session_started_by"] == "an earlier run"


def test_the_warm_up_starts_the_session_and_the_first_run_uses_it(
    sedona: Any, workspace: Path, spark_master: str
) -> None:
    from mapsmith_sedona import spark_executors
    from mapsmith_sedona.spark_session import running

    app = sedona(MAPSMITH_SPARK_WARM="1")
    assert app.warm() == {"sedona": "ready", "opensource": "ready"}
    session = running()
    assert session is not None and session.started_by == "the warm-up" and session.master == spark_master
    if on_cluster(spark_master):  # the executors were waited for, as the first run would have
        assert spark_executors.executor_count(session.spark.sparkContext) == 2
    job = _count(app, workspace, "counts.parquet")
    assert job["session_started_by"] == "the warm-up"
    assert job["session_start_seconds"] == session.start_seconds
    assert running() is session  # the run started no session of its own


def test_a_bad_setting_is_reported_by_the_warm_up_and_refused_by_the_first_spark_run(
    sedona: Any, workspace: Path
) -> None:
    from mapsmith_sedona.spark_session import running

    app = sedona(MAPSMITH_SPARK_WARM="yes")
    warmed = app.warm()
    assert warmed == {
        "sedona": "EngineError: [SPARK_WARM_SETTING_INVALID] MAPSMITH_SPARK_WARM='yes' is neither 1 nor 0 Hint: set "
        "MAPSMITH_SPARK_WARM=1 to start Spark when the service starts, MAPSMITH_SPARK_WARM=0 or nothing to start it "
        "at the first Spark run",
        "opensource": "ready",
    }
    assert running() is None
    with pytest.raises(EngineError) as refused:
        app.run(
            "count_in_polygons",
            {"input_path": "polygons.parquet", "points_path": "points.parquet", "output_path": "counts.parquet"},
        )
    assert refused.value.code == "SPARK_WARM_SETTING_INVALID"
    assert refused.value.evidence == {"variable": "MAPSMITH_SPARK_WARM", "value": "yes"}
    assert "MAPSMITH_SPARK_WARM=1" in (refused.value.hint or "")
    assert running() is None and not (workspace / "counts.parquet").exists()


@pytest.mark.parametrize("sandbox_setting", ["auto", "off"])
def test_a_stdio_server_with_the_setting_starts_spark_before_the_first_call(
    sedona: Any, workspace: Path, sandbox_setting: str
) -> None:
    """Through a real MCP client: the server warms up on starting -- a sandboxed server's engine worker, or, without
    the sandbox, a thread of the server -- so once server_info says the warm-up is done, the first Spark call finds
    the session running and its manifest says so."""
    import anyio

    from mcp_client import call, mcp_session

    async def conversation() -> tuple[dict[str, Any], Any]:
        env = {
            "MAPSMITH_STACK": "sedona",
            "MAPSMITH_SPARK_MASTER": "local[1]",  # the sandbox has no network: a cluster is out of its reach
            "MAPSMITH_SPARK_DRIVER_MEMORY": "1g",
            "MAPSMITH_SPARK_WARM": "1",
            "MAPSMITH_WORKERS": "1",  # each engine worker would start a session of its own
            "MAPSMITH_SANDBOX": sandbox_setting,
        }
        async with mcp_session(workspace, **env) as (session, _):
            for _ in range(1200):  # at most 120 s for the warm-up, the JVM's start included
                sandbox = (await call(session, "server_info", {})).data["sandbox"]
                if sandbox.get("warm_workers", 0) > 0 or isinstance(sandbox.get("warm"), dict):
                    break
                await anyio.sleep(0.1)
            arguments = {
                "input_path": "polygons.parquet",
                "points_path": "points.parquet",
                "output_path": "counts.parquet",
            }
            counted = await call(session, "run_operation", {"operation": "count_in_polygons", "arguments": arguments})
            return sandbox, counted

    sandbox, counted = anyio.run(conversation)
    if sandbox_setting == "off":
        assert sandbox["enabled"] is False and sandbox["warm"] == {"sedona": "ready", "opensource": "ready"}
    elif sandbox["enabled"]:
        assert (sandbox["warm_workers"], sandbox["warming_workers"]) == (1, 0)
    assert not counted.is_error, counted.data
    assert counted.data["engine"]["name"] == "apache-sedona"
    assert [r["point_count"] for r in counted.data["answer"]["rows"]] == list(COUNTS.values())
    record = json.loads((workspace / "counts.parquet.provenance.json").read_text("utf-8"))
    assert record["parameters"]["x-mapsmith:spark_job"]["session_started_by"] == "the warm-up"
