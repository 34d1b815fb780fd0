"""nearest_join's columns path (GeoParquet in and out, no DataFrame) against the GeoPandas engine's own path.

Layers on a local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N); every expected distance is a 3-4-5 or
6-8-10 triangle read off the drawing in the comment before the assertion. The same request runs twice: once as
MapSmith routes it (the columns path), once with the columns path refused (``columns_problem`` patched), and the two
outputs are read back with GeoPandas and compared value by value, with their records.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, Polygon

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def p(x: float, y: float, z: float | None = None) -> Point:
    return Point(X0 + x, Y0 + y) if z is None else Point(X0 + x, Y0 + y, z)


def hand_layers(workspace: Path) -> None:
    # Inputs: A (0,0) -> S1 (3,4) at 5; B (100,0) -> S2 (106,8) at 10; C (200,0) is 50 from both S4 (170,40) and
    # S3 (230,40), a tie that S4 wins (it comes first in the file); D (0,500): its nearest is S4 at hypot(170, 460) =
    # 490.4 m (S1 is 496.0 m away), beyond max_distance 60 when it is given; E has no geometry; F (400,0, z 9) has
    # Z (a 2-D warning) and its nearest is S3 at hypot(170, 40) = 174.6 m.
    write_layer(
        workspace / "in.parquet",
        [p(0, 0), p(100, 0), p(200, 0), p(0, 500), None, p(400, 0, 9)],
        UTM,
        name=["A", "B", "C", "D", "E", "F"],
        value=[1.5, float("nan"), 3.5, 4.5, 5.5, 6.5],
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_layer(
        workspace / "cand.parquet",
        [p(3, 4), p(106, 8), p(170, 40), p(230, 40)],
        UTM,
        name=["S1", "S2", "S4", "S3"],
        rank=[1, 2, 4, 3],
        open_=[True, False, True, False],
    )
    # join_path's rank as int32, which both paths write as int64
    table = pq.read_table(workspace / "cand.parquet")
    at = table.schema.get_field_index("rank")
    table = table.set_column(at, "rank", table.column("rank").cast(pa.int32()))
    pq.write_table(table, workspace / "cand.parquet")


def _values(frame: Any) -> dict[str, list[Any]]:
    """Each column's values with every kind of missing value (None, NaN, pandas' NA) as None."""
    out: dict[str, list[Any]] = {}
    for column in frame.columns:
        values = []
        for v in frame[column].tolist():
            missing = v is None or (isinstance(v, float) and math.isnan(v)) or str(v) == "<NA>"
            values.append(None if missing else (v.wkt if hasattr(v, "wkt") else v))
        out[column] = values
    return out


def _run_both(make_app, monkeypatch: pytest.MonkeyPatch, workspace: Path, **arguments: Any) -> dict[str, Any]:
    from mapsmith_opensource.join_ops import nearest_columns

    app = make_app()
    base = {"input_path": "in.parquet", "join_path": "cand.parquet", **arguments}
    runs = {}
    runs["columns"] = app.run("nearest_join", {**base, "output_path": "columns.parquet"})
    with monkeypatch.context() as patched:
        patched.setattr(nearest_columns, "columns_problem", lambda ctx: "refused by the test")
        runs["frame"] = app.run("nearest_join", {**base, "output_path": "frame.parquet"})
    return runs


@pytest.mark.parametrize("batch_rows", [None, 2])
@pytest.mark.parametrize("max_distance", [None, 60])
def test_the_columns_path_writes_the_geopandas_engine_s_rows_and_records(
    make_app, monkeypatch: pytest.MonkeyPatch, workspace: Path, max_distance: float | None, batch_rows: int | None
) -> None:
    """``batch_rows`` 2: the six inputs in three batches (A B, C D, E F), the tie in the second, the empty geometry
    and the Z in the third."""
    from mapsmith_opensource.join_ops import nearest_columns

    if batch_rows is not None:
        monkeypatch.setattr(nearest_columns, "BATCH_ROWS", batch_rows)
    hand_layers(workspace)
    extra = {} if max_distance is None else {"max_distance_meters": max_distance}
    runs = _run_both(make_app, monkeypatch, workspace, **extra)
    columns, frame = read(workspace / "columns.parquet"), read(workspace / "frame.parquet")
    # the hand figures, on the columns path
    by_name = columns.set_index("name")
    far = max_distance is not None
    assert by_name["name_join"].tolist()[:3] == ["S1", "S2", "S4"]
    assert by_name["distance_m"].tolist()[:3] == [5.0, 10.0, 50.0]
    values = _values(columns)  # missing values as None, rows in input order A..F
    unmatched = [i for i, joined in enumerate(values["name_join"]) if joined is None]
    assert [values["distance_m"][i] for i in unmatched] == [None] * len(unmatched)
    if far:  # D (490.4 m) and F (174.6 m) are beyond 60 m: empty join fields, as E (no geometry)
        assert [values["name"][i] for i in unmatched] == ["D", "E", "F"]
    else:
        assert by_name.loc["D", "name_join"] == "S4"
        assert by_name.loc["D", "distance_m"] == pytest.approx(math.hypot(170, 460))
        assert by_name.loc["F", "name_join"] == "S3"
        assert by_name.loc["F", "distance_m"] == pytest.approx(math.hypot(170, 40))
        assert [values["name"][i] for i in unmatched] == ["E"]
    answer = runs["columns"].answer
    assert answer["input_features_with_tied_nearest"] == 1
    assert answer["input_features_matched"] == (3 if far else 5)
    assert answer["join_features_used"] == (3 if far else 4)
    # the same rows and values as the GeoPandas engine's frame, and the same order of fields
    assert (
        list(columns.columns)
        == list(frame.columns)
        == ["name", "value", "geometry", "name_join", "rank", "open_", "distance_m"]
    )
    assert _values(columns) == _values(frame)
    import pyarrow as pa
    import pyarrow.parquet as pq

    for written in ("columns.parquet", "frame.parquet"):  # join_path's int32 widened by both paths, as pandas' Int64
        assert pq.read_schema(workspace / written).field("rank").type == pa.int64()
    assert columns.crs == frame.crs
    # the same records
    for key in ("answer", "crs_decisions"):
        assert getattr(runs["columns"], key) == getattr(runs["frame"], key), key
    assert (
        [w["code"] for w in runs["columns"].warnings]
        == [w["code"] for w in runs["frame"].warnings]
        == ["MEASURE_2D_ON_3D"]
    )
    a, b = manifest(workspace / "columns.parquet"), manifest(workspace / "frame.parquet")
    for key in (
        "x-mapsmith:join_counts",
        "x-mapsmith:renamed_fields",
        "x-mapsmith:tie_rule",
        "x-mapsmith:distance_method",
        "x-mapsmith:derived_fields",
    ):
        assert a["parameters"][key] == b["parameters"][key], key
    checks = lambda m: sorted((c["name"], c["passed"]) for c in m["verification"])  # noqa: E731
    assert checks(a) == checks(b)
    assert any(n.startswith("engine path: columns") for n in runs["columns"].notes)
    assert any("columns path was not taken: refused by the test" in n for n in runs["frame"].notes)
    assert a["engine"]["x-mapsmith:components"]["pyarrow"]
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(workspace / "columns.parquet").metadata
    assert meta.num_row_groups == (3 if batch_rows else 1)
    geo = json.loads(meta.metadata[b"geo"])["columns"]["geometry"]  # the written points' own extent and type
    assert geo["bbox"] == [X0, Y0, X0 + 400, Y0 + 500] and geo["geometry_types"] == ["Point"]


def test_what_the_columns_path_does_not_take_goes_to_the_geopandas_engine_with_the_reason(app, workspace: Path) -> None:
    # Degrees: geodesic distances. O (122.000 W, 46.000 N) and J (121.996 W, 46.000 N): 309 m by pyproj.Geod (the
    # hand figure: 0.004 degrees of longitude at 77.3 km a degree).
    from pyproj import Geod

    write_layer(workspace / "o.parquet", [Point(-122.0, 46.0)], "EPSG:4326", oid=["O"])
    write_layer(workspace / "j.parquet", [Point(-121.996, 46.0)], "EPSG:4326", jid=["J"])
    result = app.run("nearest_join", {"input_path": "o.parquet", "join_path": "j.parquet", "output_path": "g.parquet"})
    assert any("not taken: EPSG:4326 is geographic" in n for n in result.notes)
    expected = Geod(ellps="WGS84").inv(-122.0, 46.0, -121.996, 46.0)[2]
    assert expected == pytest.approx(309, abs=2)
    assert read(workspace / "g.parquet")["distance_m"].tolist() == [pytest.approx(expected, abs=1e-3)]
    # An invalid input geometry (a bow-tie) is made valid by the GeoPandas engine before it is measured.
    bowtie = Polygon([p(0, 0).coords[0], p(10, 10).coords[0], p(10, 0).coords[0], p(0, 10).coords[0]])
    write_layer(workspace / "bad.parquet", [bowtie], UTM, bid=["bowtie"])
    write_layer(workspace / "s.parquet", [p(30, 5)], UTM, sid=["S"])
    result = app.run(
        "nearest_join", {"input_path": "bad.parquet", "join_path": "s.parquet", "output_path": "b.parquet"}
    )
    assert any("not taken: input_path has invalid geometries" in n for n in result.notes)
    # the bow-tie's right triangle reaches x = 10, 20 m from S (30, 5)
    assert read(workspace / "b.parquet")["distance_m"].tolist() == [pytest.approx(20.0)]
    # A categorical field (Arrow's dictionary type) is not carried by the columns path; the frame path carries it.
    import pandas as pd

    write_layer(workspace / "cat.parquet", [p(30, 5)], UTM, kind=pd.Categorical(["shop"]))
    write_layer(workspace / "a.parquet", [p(0, 5)], UTM, aid=["A"])
    result = app.run(
        "nearest_join", {"input_path": "a.parquet", "join_path": "cat.parquet", "output_path": "c.parquet"}
    )
    assert any("not taken: join_path's field 'kind' is of type dictionary" in n for n in result.notes)
    written = read(workspace / "c.parquet")
    assert (written["kind"].astype(str).tolist(), written["distance_m"].tolist()) == (["shop"], [30.0])
    # A GeoPackage input is not GeoParquet: no note about the columns path at all.
    write_layer(workspace / "s.gpkg", [p(30, 5)], UTM, sid=["S"])
    result = app.run("nearest_join", {"input_path": "s.gpkg", "join_path": "s.parquet", "output_path": "k.parquet"})
    assert not any("columns path" in n for n in result.notes)


def test_an_invalid_geometry_in_a_later_batch_ends_the_pass_and_the_geopandas_engine_writes(
    app, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of 2: A and B are searched and written, then C is a bow-tie (its edges cross at (205,5)); the pass stops,
    # its partial output goes, and the GeoPandas engine repairs C and measures: C's right triangle reaches x = 210,
    # 20 m from S (230, 5). A (0,0) is hypot(230, 5) = 230.05 m from S and B (100,0) hypot(130, 5) = 130.1 m.
    from mapsmith_opensource.join_ops import nearest_columns

    monkeypatch.setattr(nearest_columns, "BATCH_ROWS", 2)
    bowtie = Polygon([p(200, 0).coords[0], p(210, 10).coords[0], p(210, 0).coords[0], p(200, 10).coords[0]])
    write_layer(workspace / "in.parquet", [p(0, 0), p(100, 0), bowtie], UTM, name=["A", "B", "C"])
    write_layer(workspace / "cand.parquet", [p(230, 5)], UTM, sid=["S"])
    result = app.run(
        "nearest_join", {"input_path": "in.parquet", "join_path": "cand.parquet", "output_path": "n.parquet"}
    )
    assert any("not taken: input_path has invalid geometries" in n for n in result.notes)
    assert not any(n.startswith("engine path: columns") for n in result.notes)
    assert read(workspace / "n.parquet")["distance_m"].tolist() == [
        pytest.approx(math.hypot(230, 5)),
        pytest.approx(math.hypot(130, 5)),
        pytest.approx(20.0),
    ]
    assert result.engine["name"] == "geopandas" and "pyogrio" in result.engine["x-mapsmith:components"]


@pytest.mark.parametrize("ext", [".parquet", ".gpkg"])
def test_a_join_field_named_distance_m_is_renamed_not_overwritten(app, workspace: Path, ext: str) -> None:
    # A (0,0) and its one candidate S (3,4) at 5 m; S carries its own distance_m, 123.0 (a survey's figure). Both
    # are written: the join's as distance_m_join, this run's as distance_m. (Before, GeoPandas' path overwrote the
    # join's with the distance, silently.) .parquet takes the columns path, .gpkg the frame path.
    write_layer(workspace / f"in{ext}", [p(0, 0)], UTM, name=["A"])
    write_layer(workspace / f"cand{ext}", [p(3, 4)], UTM, distance_m=[123.0])
    result = app.run("nearest_join", {"input_path": f"in{ext}", "join_path": f"cand{ext}", "output_path": f"n{ext}"})
    out = read(workspace / f"n{ext}")
    assert (out["distance_m_join"].tolist(), out["distance_m"].tolist()) == ([123.0], [5.0])
    assert result.answer["renamed_fields"] == {"distance_m": "distance_m_join"}
    assert any(n.startswith("engine path: columns") for n in result.notes) == (ext == ".parquet")
