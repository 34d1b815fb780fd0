"""buffer_layer of points on DuckDB, file to file (mapsmith_opensource.buffer_duckdb): the buffers, the fields, the
order and the record the GeoPandas engine gives (each case's clean twin), and GeoPandas where the answer needs it.

Worked out by hand:
- 10 m with 2 segments a quarter circle is a regular octagon inscribed in the 10 m circle: area 2 * sqrt(2) * r**2
  = 282.842712... m2, vertices at (x + 10, y), (x + 7.0710678, y - 7.0710678), (x, y - 10), ... (GEOS starts at
  east and turns clockwise), the first vertex again at the end: 9 coordinates.
- EPSG:32610's scale is 0.9996 on its central meridian (x = 500,000), an error of 0.0004, within buffer_ops'
  tolerance of 0.001; grows as k = 0.9996 (1 + d**2 / (2 R**2)) off it. At d = 400 km (x = 100,000):
  0.9996 * (1 + 0.00197) = 1.00157, an error of about 0.0016 > 0.001: such a layer is buffered in local planes
  by the GeoPandas engine, and the passed-over reason says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import DUCKDB_LIMIT_NOTE, manifest, read, shared_notes, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
OCTAGON_AREA = 2 * math.sqrt(2) * 10.0**2  # 282.842712...
AREA_REL = 1e-9  # the shoelace over coordinates of 5e6 m loses ~1e-11 of the area


@pytest.fixture
def duck(make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A service whose DuckDB buffer_layer is considered at any size."""
    from mapsmith_opensource import buffer_duckdb

    monkeypatch.setattr(buffer_duckdb, "BUFFER_MIN_ROWS", 0)
    return make_app()


def _reference(app: Any, monkeypatch: pytest.MonkeyPatch, arguments: dict[str, Any]) -> Any:
    from mapsmith_opensource import buffer_duckdb

    with monkeypatch.context() as patch:
        patch.setattr(buffer_duckdb, "BUFFER_MIN_ROWS", 10**12)
        return app.run("buffer_layer", arguments)


def _same(workspace: Path, got: str, ref: str) -> None:
    """The same rows, fields, types and buffers (WKB), and the same record, as the GeoPandas engine's."""
    import geopandas as gpd
    import pandas as pd
    import pyarrow.parquet as pq

    physical = [(c.name, c.physical_type) for c in pq.read_metadata(workspace / got).schema]
    assert physical == [(c.name, c.physical_type) for c in pq.read_metadata(workspace / ref).schema]
    mine, theirs = gpd.read_parquet(workspace / got), gpd.read_parquet(workspace / ref)
    assert mine.crs == theirs.crs
    pd.testing.assert_frame_equal(
        pd.DataFrame(mine.drop(columns="geometry")), pd.DataFrame(theirs.drop(columns="geometry"))
    )
    assert [g.wkb for g in mine.geometry] == [g.wkb for g in theirs.geometry]
    a, b = manifest(workspace / got), manifest(workspace / ref)
    timing = "x-mapsmith:engine_seconds"
    assert {k: v for k, v in a["parameters"].items() if k != timing} == {
        k: v for k, v in b["parameters"].items() if k != timing
    }
    assert a["crs_decisions"] == b["crs_decisions"]
    assert a["verification"] == b["verification"]
    assert a.get("warnings") == b.get("warnings")
    assert shared_notes(a) == shared_notes(b)  # and the DuckDB engine says its memory limit
    assert [n.startswith(DUCKDB_LIMIT_NOTE) for n in a["notes"]].count(True) == 1


def _passed_over(workspace: Path, name: str) -> str:
    (passed,) = manifest(workspace / name)["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "duckdb"
    return str(passed["reason"])


@pytest.mark.parametrize("one_thread", [False, True])
def test_points_are_buffered_in_duckdb_as_geopandas_buffers_them(
    duck, monkeypatch, workspace: Path, one_thread
) -> None:  # type: ignore[no-untyped-def]
    """Both databases: the shared one, and the one-thread one large layers are written with."""
    from mapsmith_opensource import buffer_duckdb

    monkeypatch.setattr(buffer_duckdb, "ONE_THREAD_FROM", 0 if one_thread else 10**12)
    used: list[bool] = []
    real = buffer_duckdb.one_thread_database

    def counted() -> Any:
        used.append(True)
        return real()

    monkeypatch.setattr(buffer_duckdb, "one_thread_database", counted)
    write_layer(
        workspace / "p.parquet",
        [Point(X0 + 100 * i, Y0 + 50 * i) for i in range(5)],
        UTM,
        pid=["A", "B", "C", "D", "E"],
        n=[5, 4, 3, 2, 1],
        name=["oak", "élan", "fir", "ash", "yew"],
    )
    arguments = {"input_path": "p.parquet", "distance_meters": 10, "segments_per_quarter_circle": 2, "overwrite": True}
    result = duck.run("buffer_layer", {**arguments, "output_path": "d.parquet"})
    assert result.engine["name"] == "duckdb"
    assert used == ([True] if one_thread else [])
    if one_thread:
        assert real().execute("SELECT current_setting('threads')").fetchone()[0] == 1
    out = read(workspace / "d.parquet")
    assert out["pid"].tolist() == ["A", "B", "C", "D", "E"]  # the file's order
    assert out.geometry.area.tolist() == pytest.approx([OCTAGON_AREA] * 5, rel=AREA_REL)
    first = list(out.geometry.iloc[0].exterior.coords)
    assert len(first) == 9
    assert first[0] == pytest.approx((X0 + 10, Y0)) and first[2] == pytest.approx((X0, Y0 - 10))
    assert first[1] == pytest.approx((X0 + 10 / math.sqrt(2), Y0 - 10 / math.sqrt(2)))
    decisions = manifest(workspace / "d.parquet")["crs_decisions"]
    assert decisions["analysis_crs"] == UTM and decisions["target_crs"] is None
    record = decisions["x-mapsmith:buffer_projection"]
    assert record["method"] == "single_projection"
    # 1 - 0.9996 on the central meridian; the sampled bins lie a little off it, where k is nearer 1
    assert 0.000399 < record["max_scale_error"] <= 0.0004
    ref = _reference(duck, monkeypatch, {**arguments, "output_path": "ref.parquet"})
    assert ref.engine["name"] == "geopandas"
    assert result.answer == ref.answer
    _same(workspace, "d.parquet", "ref.parquet")


def test_the_points_are_read_once_for_the_choice_and_the_run(duck, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    from mapsmith_opensource import buffer_duckdb

    write_layer(workspace / "p.parquet", [Point(X0, Y0), Point(X0 + 5, Y0)], UTM, k=[1, 2])
    buffer_duckdb._measure.cache_clear()
    reads: list[Path] = []
    real = buffer_duckdb._points

    def counted(path: Path, geometry: str) -> Any:
        reads.append(path)
        return real(path, geometry)

    monkeypatch.setattr(buffer_duckdb, "_points", counted)
    result = duck.run("buffer_layer", {"input_path": "p.parquet", "distance_meters": 3, "output_path": "o.parquet"})
    assert result.engine["name"] == "duckdb"
    assert len(reads) == 1
    # the file rewritten (other bytes, another size): measured again, not taken from the cache
    write_layer(workspace / "p.parquet", [Point(X0, Y0), Point(X0 + 5, Y0), Point(X0 + 9, Y0)], UTM, k=[1, 2, 3])
    again = duck.run("buffer_layer", {"input_path": "p.parquet", "distance_meters": 3, "output_path": "o2.parquet"})
    assert again.engine["name"] == "duckdb" and len(reads) == 2
    assert len(read(workspace / "o2.parquet")) == 3


def test_a_layer_beyond_the_scale_tolerance_is_buffered_by_geopandas(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    # x = 100,000 lies 400 km west of the central meridian: EPSG:32610 is off true scale by ~0.16% there
    write_layer(workspace / "wide.parquet", [Point(100_000, Y0), Point(X0, Y0), Point(520_000, Y0)], UTM, k=[1, 2, 3])
    arguments = {"input_path": "wide.parquet", "distance_meters": 100, "output_path": "w.parquet"}
    result = duck.run("buffer_layer", arguments)
    assert result.engine["name"] == "geopandas"
    reason = _passed_over(workspace, "w.parquet")
    assert "off true scale by up to 0.1" in reason and "local planes" in reason
    error = float(reason.split("up to ")[1].split("%")[0]) / 100
    assert 0.0015 < error < 0.0017
    assert manifest(workspace / "w.parquet")["crs_decisions"]["x-mapsmith:buffer_projection"]["method"] == (
        "local_azimuthal_equidistant"
    )


def test_what_duckdb_does_not_buffer_stays_with_geopandas(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    # polygons: GEOS builds may differ on their buffers
    write_layer(workspace / "poly.parquet", [box(X0, Y0, X0 + 10, Y0 + 10)], UTM, k=[1])
    poly = duck.run("buffer_layer", {"input_path": "poly.parquet", "distance_meters": 1, "output_path": "a.parquet"})
    assert poly.engine["name"] == "geopandas"
    assert "declares Polygon" in _passed_over(workspace, "a.parquet")
    # a layer in degrees: buffer_ops chooses a metric projection for it
    write_layer(workspace / "ll.parquet", [Point(-123.0, 45.0), Point(-123.001, 45.0)], "EPSG:4326", k=[1, 2])
    lonlat = duck.run("buffer_layer", {"input_path": "ll.parquet", "distance_meters": 5, "output_path": "b.parquet"})
    assert lonlat.engine["name"] == "geopandas"
    assert "not in a projected CRS" in _passed_over(workspace, "b.parquet")
    # a missing geometry among the points: the GeoPandas engine reads and records it
    write_layer(workspace / "gap.parquet", [Point(X0, Y0), None, Point(X0 + 1, Y0)], UTM, k=[1, 2, 3])
    gap = duck.run("buffer_layer", {"input_path": "gap.parquet", "distance_meters": 5, "output_path": "c.parquet"})
    assert gap.engine["name"] == "geopandas"
    assert "missing or empty geometries" in _passed_over(workspace, "c.parquet")
    assert read(workspace / "c.parquet").geometry.isna().tolist() == [False, True, False]


def test_below_the_threshold_geopandas_runs(make_app: Callable[..., Any], workspace: Path) -> None:
    from mapsmith_opensource import buffer_duckdb

    assert buffer_duckdb.BUFFER_MIN_ROWS > 2
    write_layer(workspace / "p.parquet", [Point(X0, Y0), Point(X0 + 5, Y0)], UTM, k=[1, 2])
    arguments = {"input_path": "p.parquet", "distance_meters": 3, "output_path": "t.parquet"}
    result = make_app().run("buffer_layer", arguments)
    assert result.engine["name"] == "geopandas"
    assert "fewer than the" in _passed_over(workspace, "t.parquet")


@pytest.mark.mcp
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_points_are_buffered_on_duckdb_over_mcp(workspace: Path, anyio_backend: str) -> None:
    """A real MCP stdio conversation (the Python SDK's client), the threshold at 0: the octagons of the first case."""
    from mcp_client import call, mcp_session

    write_layer(workspace / "p.parquet", [Point(X0, Y0), Point(X0 + 100, Y0)], UTM, pid=["A", "B"])
    arguments = {
        "input_path": "p.parquet",
        "distance_meters": 10,
        "segments_per_quarter_circle": 2,
        "output_path": "m.parquet",
    }
    async with mcp_session(workspace, MAPSMITH_DUCKDB_LAYER_MIN_FEATURES="0") as (session, _):
        buffered = await call(session, "run_operation", {"operation": "buffer_layer", "arguments": arguments})
    assert not buffered.is_error, buffered.data
    assert buffered.data["engine"]["name"] == "duckdb"
    out = read(workspace / "m.parquet")
    assert out["pid"].tolist() == ["A", "B"]
    assert out.geometry.area.tolist() == pytest.approx([OCTAGON_AREA] * 2, rel=AREA_REL)
    assert manifest(workspace / "m.parquet")["x-mapsmith:engine_choice"]["engine"] == "duckdb"


def test_points_duckdb_cannot_read_are_buffered_by_geopandas(duck, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """DuckDB's reader refusing the points while the engine is chosen is a reason to pass it over, not a crash."""
    import duckdb

    from mapsmith_opensource import buffer_duckdb

    class Refusing:
        def cursor(self) -> Any:
            return self

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def execute(self, sql: str) -> Any:
            raise duckdb.InvalidInputException("a geometry this reader refuses")

    buffer_duckdb._measure.cache_clear()
    monkeypatch.setattr(buffer_duckdb, "duckdb_database", lambda: Refusing())
    write_layer(workspace / "p.parquet", [Point(X0, Y0), Point(X0 + 5, Y0)], UTM, k=[1, 2])
    arguments = {"input_path": "p.parquet", "distance_meters": 3, "output_path": "r.parquet"}
    result = duck.run("buffer_layer", arguments)
    assert result.engine["name"] == "geopandas"
    assert "DuckDB could not read input_path's points (InvalidInputException)" in _passed_over(workspace, "r.parquet")
    assert read(workspace / "r.parquet").geometry.area.tolist() == pytest.approx([math.pi * 9] * 2, rel=0.01)
