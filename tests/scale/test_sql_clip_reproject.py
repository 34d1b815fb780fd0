"""clip_layer and reproject_layer on DuckDB, file to file (mapsmith_opensource.sql_layer_ops): the answer, the
columns and the record the GeoPandas engine gives, and GeoPandas where they could differ, with the reason.

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre; the mask M = 0..100 x 0..100.

clip, points (DuckDB):
    P0 (50, 50) inside, P1 (100, 50) on M's edge, P2 (0, 0) on M's corner, P3 (150, 50) outside,
    P4 no geometry, P5 an empty point, P6 (100 + 2**-20, 50) a hair outside the edge, P7 (50, NaN) invalid.
    GEOS keeps a point that intersects the mask (its edge included): P0, P1, P2 written, in that order;
    P3..P7 (5) lie outside; P7 is input_path's 1 invalid geometry, P4 and P5 its 2 empty or missing.
clip, a line and a polygon (GeoPandas, with the reason DuckDB passed them over):
    L (-50, 50)->(150, 50) becomes (0, 50)->(100, 50), 100 m long; the square (50..150) x (-50..50) becomes
    (50..100) x (0..50), 2,500 m2.
reproject, UTM 10N to EPSG:4326 (DuckDB):
    E (500,000, NaN) is written empty (PROJ's NaN, NaN); None stays None.
    (500,000, 5,000,000) lies on zone 10's central meridian, 123 W: longitude -123 exactly (to rounding);
    its latitude, 45.153477183356 N, is pyproj's Transformer (EPSG:32610 -> EPSG:4326, always_xy) worked
    out on its own below, outside MapSmith; both engines agree with it and with each other to 1e-9 degrees.
reproject, NAD27 (EPSG:4267) to EPSG:4326 is a datum shift: GeoPandas, with the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point, box

from layers import DUCKDB_LIMIT_NOTE, manifest, read, shared_notes, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
TOLERANCE_DEGREES = 1e-9


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


@pytest.fixture
def duck(make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A service whose DuckDB engines of the two operations are considered at any size."""
    from mapsmith_opensource import reproject_duckdb, sql_layer_ops

    monkeypatch.setattr(sql_layer_ops, "CLIP_MIN_ROWS", 0)
    monkeypatch.setattr(reproject_duckdb, "REPROJECT_MIN_ROWS", 0)
    return make_app()


class _OnGeoPandas:
    """The same service with the DuckDB engines' thresholds out of reach for one run: GeoPandas runs."""

    def __init__(self, app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.app, self.monkeypatch = app, monkeypatch

    def run(self, operation: str, arguments: dict[str, Any]) -> Any:
        from mapsmith_opensource import reproject_duckdb, sql_layer_ops

        with self.monkeypatch.context() as patch:
            patch.setattr(sql_layer_ops, "CLIP_MIN_ROWS", 10**12)
            patch.setattr(reproject_duckdb, "REPROJECT_MIN_ROWS", 10**12)
            return self.app.run(operation, arguments)


@pytest.fixture
def reference(duck: Any, monkeypatch: pytest.MonkeyPatch) -> _OnGeoPandas:
    return _OnGeoPandas(duck, monkeypatch)


def _same_record(workspace: Path, got: str, ref: str) -> None:
    mine, theirs = manifest(workspace / got), manifest(workspace / ref)
    timing = "x-mapsmith:engine_seconds"
    assert {k: v for k, v in mine["parameters"].items() if k != timing} == {
        k: v for k, v in theirs["parameters"].items() if k != timing
    }
    assert mine["crs_decisions"] == theirs["crs_decisions"]
    assert mine["verification"] == theirs["verification"]
    assert mine.get("warnings") == theirs.get("warnings")
    assert shared_notes(mine) == shared_notes(theirs)  # and the DuckDB engine says its memory limit
    assert [n.startswith(DUCKDB_LIMIT_NOTE) for n in mine["notes"]].count(True) == 1


def _same_columns(workspace: Path, got: str, ref: str) -> None:
    """The same fields, in the same order, of the same Parquet types, read back as the same frame with the same
    WKB. (The Arrow schema each writer stores beside the data differs: pandas' string columns are large_string
    for pyarrow, DuckDB's are string, and DuckDB annotates its INT64 columns as signed 64-bit integers; both are
    the same Parquet physical types and read back as the same columns.)"""
    import geopandas as gpd
    import pandas as pd
    import pyarrow.parquet as pq

    def columns(name: str) -> list[tuple[str, str, str]]:
        physical = pq.read_metadata(workspace / name).schema
        arrow = pq.read_schema(workspace / name)
        # an extension type (geoarrow.wkb, once a module such as sedonadb registered it with pyarrow) is compared
        # by its storage type: which modules the process imported before is not a property of the file
        types = [arrow.field(c.name).type for c in physical]
        read_as = [str(getattr(t, "storage_type", t)).replace("large_string", "string") for t in types]
        return [(c.name, c.physical_type, t) for c, t in zip(physical, read_as, strict=True)]

    assert columns(got) == columns(ref)
    mine, theirs = gpd.read_parquet(workspace / got), gpd.read_parquet(workspace / ref)
    assert mine.crs == theirs.crs
    pd.testing.assert_frame_equal(
        pd.DataFrame(mine.drop(columns="geometry")), pd.DataFrame(theirs.drop(columns="geometry"))
    )
    assert [None if v is None else v.wkb for v in mine.geometry] == [
        None if v is None else v.wkb for v in theirs.geometry
    ]


def _points_case(workspace: Path) -> None:
    write_layer(workspace / "mask.parquet", [box(*g(0, 0), *g(100, 100))], UTM, mid=[1])
    write_layer(
        workspace / "points.parquet",
        [
            Point(g(50, 50)),
            Point(g(100, 50)),
            Point(g(0, 0)),
            Point(g(150, 50)),
            None,
            Point(),
            Point(X0 + 100 + 2**-20, Y0 + 50),
            Point(X0 + 50, math.nan),
        ],
        UTM,
        pid=["P0", "P1", "P2", "P3", "P4", "P5", "P6", "P7"],
        n=[0, 1, 2, 3, 4, 5, 6, 7],
        v=[0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5],
    )


def test_points_are_clipped_in_duckdb_as_geos_clips_them(duck, reference, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _points_case(workspace)
    arguments = {"input_path": "points.parquet", "mask_path": "mask.parquet"}
    result = duck.run("clip_layer", {**arguments, "output_path": "c.parquet"})
    assert result.engine["name"] == "duckdb"
    out = read(workspace / "c.parquet")
    assert out["pid"].tolist() == ["P0", "P1", "P2"]
    assert [(p.x, p.y) for p in out.geometry] == [g(50, 50), g(100, 50), g(0, 0)]
    record = manifest(workspace / "c.parquet")
    assert record["parameters"]["x-mapsmith:features_outside_mask"] == 5
    assert record["parameters"]["x-mapsmith:lower_dimension_fragments_dropped"] == 0
    (validity,) = [c for c in record["verification"] if c["name"] == "x-mapsmith:input_geometry_valid"][:1]
    assert validity["passed"] is False
    assert "input_path: 1 of 8 geometries invalid (first feature indices [7]; Invalid Coordinate)" in validity["detail"]
    assert "2 empty or missing" in validity["detail"]
    # the clean twin: GeoPandas gives the same rows, columns and record
    ref = reference.run("clip_layer", {**arguments, "output_path": "ref.parquet"})
    assert ref.engine["name"] == "geopandas"
    _same_columns(workspace, "c.parquet", "ref.parquet")
    _same_record(workspace, "c.parquet", "ref.parquet")


def test_a_mask_in_another_crs_is_aligned_by_the_geopandas_code(duck, reference, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    from pyproj import Transformer

    # M again, its corners moved to EPSG:4326; the points P0 (50, 50) and P3 (150, 50) as before.
    to_lonlat = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    corners = [to_lonlat.transform(*g(x, y)) for x, y in ((-10, -10), (110, -10), (110, 110), (-10, 110))]
    from shapely.geometry import Polygon

    write_layer(workspace / "mask84.parquet", [Polygon(corners)], "EPSG:4326", mid=[1])
    write_layer(workspace / "two.parquet", [Point(g(50, 50)), Point(g(150, 50))], UTM, pid=["P0", "P3"])
    arguments = {"input_path": "two.parquet", "mask_path": "mask84.parquet"}
    result = duck.run("clip_layer", {**arguments, "output_path": "c.parquet"})
    assert result.engine["name"] == "duckdb"
    assert read(workspace / "c.parquet")["pid"].tolist() == ["P0"]
    assert "mask_path" in manifest(workspace / "c.parquet")["crs_decisions"]["x-mapsmith:alignment"]
    reference.run("clip_layer", {**arguments, "output_path": "ref.parquet"})
    _same_columns(workspace, "c.parquet", "ref.parquet")
    _same_record(workspace, "c.parquet", "ref.parquet")


def test_points_on_and_near_a_round_mask_edge_match_the_geopandas_engine(duck, reference, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """Points drawn on the boundary of a 64-segment circle (interpolated: on it or a rounding away),
    on its vertices and at random around it: the two engines keep exactly the same points."""
    import numpy as np
    import shapely

    rng = np.random.default_rng(22)
    circle = Point(g(0, 0)).buffer(1000, 16)
    on_edge = shapely.line_interpolate_point(circle.exterior, rng.uniform(0, 1, 3000), normalized=True)
    around = shapely.points(rng.uniform(X0 - 1100, X0 + 1100, 3000), rng.uniform(Y0 - 1100, Y0 + 1100, 3000))
    vertices = shapely.points(shapely.get_coordinates(circle))
    points = list(np.concatenate([on_edge, around, vertices]))
    write_layer(workspace / "circle.parquet", [circle], UTM, mid=[1])
    write_layer(workspace / "many.parquet", points, UTM, n=list(range(len(points))))
    arguments = {"input_path": "many.parquet", "mask_path": "circle.parquet"}
    assert duck.run("clip_layer", {**arguments, "output_path": "c.parquet"}).engine["name"] == "duckdb"
    reference.run("clip_layer", {**arguments, "output_path": "ref.parquet"})
    kept = read(workspace / "c.parquet")["n"].tolist()
    assert kept == sorted(int(i) for i in np.flatnonzero(shapely.intersects(np.asarray(points), circle)))
    assert len(vertices) <= len(kept) < len(points)  # every vertex kept, and not every point
    _same_columns(workspace, "c.parquet", "ref.parquet")


def test_lines_and_polygons_are_cut_by_geopandas_with_the_reason(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    import shapely

    write_layer(workspace / "mask.parquet", [box(*g(0, 0), *g(100, 100))], UTM, mid=[1])
    write_layer(workspace / "lines.parquet", [LineString([g(-50, 50), g(150, 50)])], UTM, lid=["L"])
    write_layer(workspace / "polys.parquet", [box(*g(50, -50), *g(150, 50))], UTM, qid=["Q"])
    cut = duck.run(
        "clip_layer", {"input_path": "lines.parquet", "mask_path": "mask.parquet", "output_path": "l.parquet"}
    )
    assert cut.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "l.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "duckdb"
    assert "declares LineString; the DuckDB clip_layer takes single 2-D points only" in passed["reason"]
    (line,) = read(workspace / "l.parquet").geometry
    assert shapely.equals(line, LineString([g(0, 50), g(100, 50)]))
    assert line.length == 100.0
    half = duck.run(
        "clip_layer", {"input_path": "polys.parquet", "mask_path": "mask.parquet", "output_path": "q.parquet"}
    )
    assert half.engine["name"] == "geopandas"
    (polygon,) = read(workspace / "q.parquet").geometry
    assert shapely.equals(polygon, box(*g(50, 0), *g(100, 50)))
    assert polygon.area == 2500.0


def test_an_integer_field_with_nulls_stays_with_geopandas(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    import geopandas as gpd
    import pandas as pd
    import pyarrow.parquet as pq

    write_layer(workspace / "mask.parquet", [box(*g(0, 0), *g(100, 100))], UTM, mid=[1])
    frame = gpd.GeoDataFrame(
        {"k": pd.array([1, None], dtype="Int64")}, geometry=[Point(g(10, 10)), Point(g(20, 20))], crs=UTM
    )
    frame.to_parquet(workspace / "nullable.parquet")
    # As DuckDB, Spark or GDAL write it: no pandas metadata telling GeoPandas to read the field as Int64.
    table = pq.read_table(workspace / "nullable.parquet")
    meta = {k: v for k, v in table.schema.metadata.items() if k != b"pandas"}
    pq.write_table(table.replace_schema_metadata(meta), workspace / "nullable.parquet")
    result = duck.run(
        "clip_layer", {"input_path": "nullable.parquet", "mask_path": "mask.parquet", "output_path": "c.parquet"}
    )
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "c.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert "integer fields ['k'] hold nulls" in passed["reason"]
    # why: the GeoPandas engine wrote the field as doubles (1.0 and null); DuckDB would have kept int64
    assert str(pq.read_schema(workspace / "c.parquet").field("k").type) == "double"


# -- reproject_layer ---------------------------------------------------------------------------


def _independent_lonlat(x: float, y: float) -> tuple[float, float]:
    from pyproj import Transformer

    return Transformer.from_crs(UTM, "EPSG:4326", always_xy=True).transform(x, y)


def test_utm_points_are_reprojected_in_duckdb_as_pyproj_does(duck, reference, workspace: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    scanned = _output_scans(monkeypatch)
    write_layer(
        workspace / "utm.parquet",
        [Point(X0, Y0), Point(g(100, 100)), None, Point(), Point(X0, math.nan)],
        UTM,
        pid=["A", "B", "C", "D", "E"],
        n=[1, 2, 3, 4, 5],
    )
    arguments = {"input_path": "utm.parquet", "target_crs": "EPSG:4326"}
    result = duck.run("reproject_layer", {**arguments, "output_path": "r.parquet"})
    assert result.engine["name"] == "duckdb"
    out = read(workspace / "r.parquet")
    assert out.crs.to_epsg() == 4326
    a, b = out.geometry.iloc[0], out.geometry.iloc[1]
    assert a.x == pytest.approx(-123.0, abs=TOLERANCE_DEGREES)  # zone 10's central meridian
    assert a.y == pytest.approx(45.153477183356, abs=TOLERANCE_DEGREES)
    assert (b.x, b.y) == pytest.approx(_independent_lonlat(*g(100, 100)), abs=TOLERANCE_DEGREES)
    assert out.geometry.iloc[2] is None and out.geometry.iloc[3].is_empty
    # E (500,000, NaN): PROJ gives (NaN, NaN), which WKB can only spell as the empty point, in both engines
    assert out.geometry.iloc[4].is_empty
    # E's output is empty where its source is not, so the test in the COPY stopped it (reproject_duckdb.NOT_AS_READ):
    # the unchecked COPY wrote the layer and the runner counted the output in the file
    assert [name for name in scanned if name.startswith(".r.tmp-")]  # the engine's file, before it is renamed
    (validity,) = [
        c for c in manifest(workspace / "r.parquet")["verification"] if c["name"].endswith("input_geometry_valid")
    ]
    assert "input_path: 1 of 5 geometries invalid (first feature indices [4]; Invalid Coordinate)" in validity["detail"]
    ref = reference.run("reproject_layer", {**arguments, "output_path": "ref.parquet"})
    assert ref.engine["name"] == "geopandas"
    _same_columns(workspace, "r.parquet", "ref.parquet")
    _same_record(workspace, "r.parquet", "ref.parquet")


def test_reprojected_coordinates_agree_with_geopandas_to_1e_9(duck, reference, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """20,000 random points over zone 10, both ways, 4326 and 3857: the largest difference is measured
    and must stay within 1e-9 of the target's unit (it was 0.0: the same PROJ conversion, bit for bit)."""
    import numpy as np
    import shapely

    rng = np.random.default_rng(1)
    xs, ys = rng.uniform(200_000, 800_000, 20_000), rng.uniform(3_000_000, 6_000_000, 20_000)
    write_layer(workspace / "many.parquet", list(shapely.points(xs, ys)), UTM, n=list(range(len(xs))))
    for target, out in (("EPSG:4326", "w"), ("EPSG:3857", "m")):
        arguments = {"input_path": "many.parquet", "target_crs": target}
        assert duck.run("reproject_layer", {**arguments, "output_path": f"{out}.parquet"}).engine["name"] == "duckdb"
        reference.run("reproject_layer", {**arguments, "output_path": f"{out}_ref.parquet"})
        mine = shapely.get_coordinates(read(workspace / f"{out}.parquet").geometry.values)
        theirs = shapely.get_coordinates(read(workspace / f"{out}_ref.parquet").geometry.values)
        assert float(np.abs(mine - theirs).max()) <= 1e-9


def test_a_datum_shift_is_reprojected_by_geopandas_with_the_reason(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    write_layer(workspace / "nad27.parquet", [Point(-100.0, 40.0)], "EPSG:4267", pid=["A"])
    result = duck.run(
        "reproject_layer", {"input_path": "nad27.parquet", "target_crs": "EPSG:4326", "output_path": "r.parquet"}
    )
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "r.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "duckdb"
    assert "EPSG:4267 to EPSG:4326 is not a conversion alone" in passed["reason"]
    # the clean twin of the same request, a conversion (NAD27 geographic to its own UTM zone 14N, EPSG:26714)
    twin = duck.run(
        "reproject_layer", {"input_path": "nad27.parquet", "target_crs": "EPSG:26714", "output_path": "t.parquet"}
    )
    assert twin.engine["name"] == "duckdb"
    (p,) = read(workspace / "t.parquet").geometry
    from pyproj import Transformer

    expected = Transformer.from_crs("EPSG:4267", "EPSG:26714", always_xy=True).transform(-100.0, 40.0)
    assert (p.x, p.y) == pytest.approx(expected, abs=1e-9)


def test_z_coordinates_stay_with_geopandas(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    write_layer(workspace / "z.parquet", [Point(X0, Y0, 12.5)], UTM, pid=["A"])
    result = duck.run(
        "reproject_layer", {"input_path": "z.parquet", "target_crs": "EPSG:4326", "output_path": "r.parquet"}
    )
    assert result.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "r.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert "declares Point Z" in passed["reason"]
    (p,) = read(workspace / "r.parquet").geometry
    assert p.z == 12.5  # a conversion keeps the height


def test_no_point_in_the_mask_writes_an_empty_layer_as_geopandas_does(duck, reference, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    # P3 (150, 50) and (-1, -1): both outside M, so 0 written and 2 outside; DuckDB writes no GeoParquet
    # metadata for a file without a geometry, which the engine adds (spatial_join_duckdb._declare_geoparquet).
    write_layer(workspace / "mask.parquet", [box(*g(0, 0), *g(100, 100))], UTM, mid=[1])
    write_layer(workspace / "out.parquet", [Point(g(150, 50)), Point(g(-1, -1))], UTM, pid=["P3", "PX"])
    arguments = {"input_path": "out.parquet", "mask_path": "mask.parquet"}
    result = duck.run("clip_layer", {**arguments, "output_path": "c.parquet"})
    assert result.engine["name"] == "duckdb"
    assert len(read(workspace / "c.parquet")) == 0
    assert manifest(workspace / "c.parquet")["parameters"]["x-mapsmith:features_outside_mask"] == 2
    reference.run("clip_layer", {**arguments, "output_path": "ref.parquet"})
    _same_columns(workspace, "c.parquet", "ref.parquet")
    _same_record(workspace, "c.parquet", "ref.parquet")


def test_the_threshold_variable_is_read_and_a_bad_one_refused(make_app, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    from mapsmith.errors import ConfigurationError

    write_layer(workspace / "mask.parquet", [box(*g(0, 0), *g(100, 100))], UTM, mid=[1])
    write_layer(workspace / "p.parquet", [Point(g(50, 50)), Point(g(150, 50))], UTM, pid=["P0", "P3"])
    arguments = {"input_path": "p.parquet", "mask_path": "mask.parquet"}
    # 2 features: below the measured default, so GeoPandas, with the threshold named
    default = make_app().run("clip_layer", {**arguments, "output_path": "d.parquet"})
    assert default.engine["name"] == "geopandas"
    (passed,) = manifest(workspace / "d.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["reason"].startswith("input_path has 2 features, fewer than the ")
    # the variable at 2 lets DuckDB take the same 2 features
    forced = make_app(MAPSMITH_DUCKDB_LAYER_MIN_FEATURES="2").run(
        "clip_layer", {**arguments, "output_path": "f.parquet"}
    )
    assert forced.engine["name"] == "duckdb"
    assert read(workspace / "f.parquet")["pid"].tolist() == ["P0"]
    with pytest.raises(ConfigurationError) as refused:
        make_app(MAPSMITH_DUCKDB_LAYER_MIN_FEATURES="lots").run("clip_layer", {**arguments, "output_path": "x.parquet"})
    assert refused.value.code == "DUCKDB_MIN_FEATURES_INVALID"
    assert refused.value.evidence == {"variable": "MAPSMITH_DUCKDB_LAYER_MIN_FEATURES", "value": "lots"}


@pytest.mark.mcp
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_clip_and_reproject_run_on_duckdb_over_mcp(workspace: Path, anyio_backend: str) -> None:
    """A real MCP stdio conversation (the Python SDK's client): the server started with the threshold at 0
    routes both operations to DuckDB; the answer is the hand-worked one of the first tests."""
    import json

    from mcp_client import call, mcp_session

    _points_case(workspace)
    clip = {"input_path": "points.parquet", "mask_path": "mask.parquet", "output_path": "c.parquet"}
    move = {"input_path": "c.parquet", "target_crs": "EPSG:4326", "output_path": "r.parquet"}
    async with mcp_session(workspace, MAPSMITH_DUCKDB_LAYER_MIN_FEATURES="0") as (session, _):
        clipped = await call(session, "run_operation", {"operation": "clip_layer", "arguments": clip})
        moved = await call(session, "run_operation", {"operation": "reproject_layer", "arguments": move})
    assert not clipped.is_error and not moved.is_error, (clipped.data, moved.data)
    assert clipped.data["engine"]["name"] == "duckdb" and moved.data["engine"]["name"] == "duckdb"
    assert read(workspace / "c.parquet")["pid"].tolist() == ["P0", "P1", "P2"]
    lon, lat = _independent_lonlat(*g(0, 0))  # P2 (0, 0) is (500,000, 5,000,000): 123 W, 45.153477183356 N
    p2 = read(workspace / "r.parquet").geometry.iloc[2]
    assert (p2.x, p2.y) == pytest.approx((lon, lat), abs=TOLERANCE_DEGREES)
    record = json.loads((workspace / "r.parquet.provenance.json").read_text("utf-8"))
    assert record["x-mapsmith:engine_choice"]["engine"] == "duckdb"


def _output_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the runner's read-back scans (layer_facts.scan_facts, as io.inspect calls it)."""
    from mapsmith_opensource import io

    scanned: list[str] = []
    real = io.scan_facts

    def scan(path: Path, *args: Any, **kwargs: Any) -> Any:
        scanned.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(io, "scan_facts", scan)
    return scanned


def test_reprojected_points_are_counted_valid_in_the_copy_with_the_geopandas_record(  # type: ignore[no-untyped-def]
    duck, reference, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three finite points, one missing and one empty, UTM 10N to EPSG:4326: each point is tested in the COPY
    (reproject_duckdb._checked_points_sql), so the written file is not scanned again, and the record (checks
    included: 5 rows, 0 invalid) is the GeoPandas engine's, which scans its output."""
    write_layer(
        workspace / "clean.parquet",
        [Point(X0, Y0), Point(g(100, 100)), None, Point(), Point(g(-2_000, 7_000))],
        UTM,
        pid=["A", "B", "C", "D", "E"],
    )
    arguments = {"input_path": "clean.parquet", "target_crs": "EPSG:4326"}
    scanned = _output_scans(monkeypatch)
    result = duck.run("reproject_layer", {**arguments, "output_path": "r.parquet"})
    assert result.engine["name"] == "duckdb"
    # the output was not read again (the spy sees it when it is: test_utm_points_are_reprojected_in_duckdb_...)
    assert not [name for name in scanned if name.startswith(".r.tmp-")]
    out = read(workspace / "r.parquet")
    assert (out.geometry.iloc[4].x, out.geometry.iloc[4].y) == pytest.approx(
        _independent_lonlat(*g(-2_000, 7_000)), abs=TOLERANCE_DEGREES
    )
    checks = {c["name"]: c for c in manifest(workspace / "r.parquet")["verification"]}
    assert checks["geometry_valid"]["passed"]
    reference.run("reproject_layer", {**arguments, "output_path": "ref.parquet"})
    _same_columns(workspace, "r.parquet", "ref.parquet")
    _same_record(workspace, "r.parquet", "ref.parquet")


@pytest.mark.parametrize("output", ["o.parquet", "o.parquet/"])
def test_a_point_the_target_cannot_place_is_refused_by_both_engines_with_its_index(  # type: ignore[no-untyped-def]
    duck, reference, workspace: Path, output: str
) -> None:
    """(-33, 0) lies 90 degrees from UTM zone 10's central meridian (123 W) on the equator, where PROJ's transverse
    Mercator answers (inf, inf), as pyproj does (worked out below). Before, both engines wrote it and failed in the
    runner's repair with ENGINE_GEOMETRY_ERROR and a hint to repair the input, which is valid. Now both refuse with
    OUTSIDE_TARGET_CRS naming feature 1. The probe's 5 x 5 grid over the extent (-123..-20, -10..10) misses
    (-33, 0) and is finite, so DuckDB runs and its test in the COPY stops there."""
    from pyproj import Transformer

    from mapsmith.errors import InputError

    to_utm = Transformer.from_crs("EPSG:4326", UTM, always_xy=True)
    assert to_utm.transform(-33.0, 0.0) == (math.inf, math.inf)
    assert all(math.isfinite(v) for v in to_utm.transform(-20.0, 0.0))  # a probe node: finite
    points = [Point(-123.0, -10.0), Point(-33.0, 0.0), Point(-20.0, 10.0)]
    write_layer(workspace / "far.parquet", points, "EPSG:4326", pid=["A", "B", "C"])
    arguments = {"input_path": "far.parquet", "target_crs": UTM, "output_path": output}
    for service, engine in ((duck, "duckdb"), (reference, "geopandas")):
        with pytest.raises(InputError) as refused:
            service.run("reproject_layer", arguments)
        error = refused.value.to_dict()
        assert error["code"] == "OUTSIDE_TARGET_CRS"
        assert error["evidence"]["features"] == 1
        assert error["evidence"]["first_features"] == [{"index": 1, "x": -33.0, "y": 0.0}]
        assert "describe_dataset" in error["hint"] and "resolve_crs" in error["hint"]
        assert not (workspace / output.rstrip("/")).exists()
        (failed,) = workspace.glob("o.parquet.failed*.json")
        # a folder of parts has DuckDB's engine only (GeoPandas writes one file): it refuses twice
        assert manifest_engine(failed) == ("duckdb" if output.endswith("/") else engine)
        failed.unlink()
    # the clean twin: the same layer without (-33, 0) is reprojected on DuckDB, each point where pyproj puts it
    write_layer(workspace / "near.parquet", [points[0], points[2]], "EPSG:4326", pid=["A", "C"])
    result = duck.run("reproject_layer", {**arguments, "input_path": "near.parquet"})
    assert result.engine["name"] == "duckdb"
    out = read(workspace / output.rstrip("/"))
    got = [v for p in out.geometry for v in (p.x, p.y)]
    assert got == pytest.approx([*to_utm.transform(-123.0, -10.0), *to_utm.transform(-20.0, 10.0)], abs=1e-9)


def test_an_extent_reaching_where_the_target_cannot_place_points_goes_to_geopandas(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """Points at (-123, 45) and (-33, 0): the probe's grid has (-33, 0) as a node, PROJ answers it with infinity,
    so the DuckDB engine is passed over with the reason and the GeoPandas engine refuses feature 1."""
    from mapsmith.errors import InputError

    write_layer(workspace / "far.parquet", [Point(-123.0, 45.0), Point(-33.0, 0.0)], "EPSG:4326", pid=["A", "B"])
    with pytest.raises(InputError) as refused:
        duck.run("reproject_layer", {"input_path": "far.parquet", "target_crs": UTM, "output_path": "o.parquet"})
    assert refused.value.code == "OUTSIDE_TARGET_CRS"
    assert refused.value.to_dict()["evidence"]["first_features"] == [{"index": 1, "x": -33.0, "y": 0.0}]
    (failed,) = workspace.glob("o.parquet.failed*.json")
    record = json.loads(failed.read_text("utf-8"))
    assert record["engine"]["name"] == "geopandas"
    (passed,) = record["x-mapsmith:engine_choice"]["passed_over"]
    assert "the data's extent reaches where EPSG:32610 cannot place points" in passed["reason"]


def manifest_engine(path: Path) -> str:
    return str(json.loads(path.read_text("utf-8"))["engine"]["name"])
