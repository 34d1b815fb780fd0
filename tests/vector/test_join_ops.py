"""The join operations on the opensource stack, against values worked out by hand.

Layers are built here on a local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), so every
expected count, distance and share is read off the drawing in the comment before the assertion.
Where a layer is geographic the expected distance or area comes from pyproj.Geod, called here
independently of the code under test. spatial_join is run on both of its engines: the DuckDB
engine is made to win by raising its preference in REGISTRATIONS and lowering DUCKDB_MIN_ROWS
before the service is built (the registrations are read when the service starts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import LineString, Point, box

from layers import DUCKDB_LIMIT_NOTE, manifest, read, shared_notes, write_layer
from mapsmith.errors import ArgumentError, InputError

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def grid_box(x1: float, y1: float, x2: float, y2: float):  # type: ignore[no-untyped-def]
    return box(X0 + x1, Y0 + y1, X0 + x2, Y0 + y2)


def grid_point(x: float, y: float) -> Point:
    return Point(X0 + x, Y0 + y)


def engine_apps(make_app, monkeypatch: pytest.MonkeyPatch) -> dict:  # type: ignore[no-untyped-def]
    """A service per spatial_join engine: GeoPandas alone, and DuckDB (preferred) with no row threshold.

    The registrations are read when a service is built, so each service keeps the ones it was built with;
    the threshold is read at each run, and only the DuckDB service has a DuckDB engine to apply it to.
    """
    from mapsmith_opensource.join_ops import spatial_join_duckdb

    registrations = spatial_join_duckdb.REGISTRATIONS
    monkeypatch.setattr(spatial_join_duckdb, "REGISTRATIONS", ())
    geopandas = make_app()
    monkeypatch.setattr(spatial_join_duckdb, "REGISTRATIONS", registrations)
    monkeypatch.setattr(spatial_join_duckdb, "DUCKDB_MIN_ROWS", 0)
    return {"geopandas": geopandas, "duckdb": make_app()}


@pytest.fixture(params=["geopandas", "duckdb"])
def engine_app(request, make_app, monkeypatch):  # type: ignore[no-untyped-def]
    """(engine, service): the DuckDB engine reads GeoParquet only, so these tests write .parquet."""
    return request.param, engine_apps(make_app, monkeypatch)[request.param]


def zones_and_points(workspace: Path, ext: str = ".gpkg") -> None:
    # Z1 = 0..100 x 0..100, Z2 = 100..200 x 0..100 (they share the edge x = 100), Z3 far away.
    # P1 (50,50) inside Z1; P2 (100,50) on the shared edge; P3 (150,50) inside Z2; P4 (300,300) in none.
    write_layer(
        workspace / f"zones{ext}",
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), grid_box(500, 500, 600, 600)],
        UTM,
        zid=["Z1", "Z2", "Z3"],
        name=["north", "south", "far"],
    )
    write_layer(
        workspace / f"points{ext}",
        [grid_point(50, 50), grid_point(100, 50), grid_point(150, 50), grid_point(300, 300)],
        UTM,
        pid=["P1", "P2", "P3", "P4"],
        name=["a", "b", "c", "d"],
    )


def pairs(path: Path, left: str, right: str) -> list[tuple]:
    out = read(path)
    return sorted((a, None if b != b or b is None else b) for a, b in zip(out[left], out[right], strict=True))


def passed_over(path: Path, engine: str = "duckdb") -> list[dict]:
    """The engine choice's passed-over entries for ``engine`` (SedonaDB, where installed, is passed over too)."""
    return [p for p in manifest(path)["x-mapsmith:engine_choice"].get("passed_over", []) if p["engine"] == engine]


# -- spatial_join -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "expected", "dropped"),
    [
        # intersects: P1-Z1, P2 on the shared edge meets both Z1 and Z2, P3-Z2, P4 nothing.
        ("left", [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2"), ("P4", None)], 0),
        ("inner", [("P1", "Z1"), ("P2", "Z1"), ("P2", "Z2"), ("P3", "Z2")], 1),
    ],
)
def test_spatial_join_intersects_one_row_per_pair_on_both_engines(
    engine_app, workspace: Path, how: str, expected: list, dropped: int
) -> None:
    engine, app = engine_app
    zones_and_points(workspace, ".parquet")
    result = app.run(
        "spatial_join",
        {"input_path": "points.parquet", "join_path": "zones.parquet", "how": how, "output_path": "j.parquet"},
    )
    assert result.engine["name"] == engine
    assert pairs(workspace / "j.parquet", "pid", "zid") == expected
    # both layers have 'name': the join's is renamed and the renaming listed
    out = read(workspace / "j.parquet")
    assert list(out.columns) == ["pid", "name", "geometry", "zid", "name_join"]
    assert result.answer["renamed_fields"] == {"name": "name_join"}
    assert result.answer["input_features_dropped"] == dropped
    assert result.answer["matched_pairs"] == 4
    assert result.answer["join_features_unmatched"] == 1  # Z3
    record = manifest(workspace / "j.parquet")
    assert record["x-mapsmith:engine_choice"]["engine"] == engine
    assert record["parameters"]["x-mapsmith:join_counts"]["input_features_unmatched"] == 1
    assert next(c for c in record["verification"] if c["name"] == "feature_count_exact")["passed"]


# Zones Z1 = 0..100 x 0..100 and Z2 = 100..200 x 0..100 are the input; the join features are
# L1 a line (50,50)-(150,50) running through both zones, L2 the line x = 0 from y = -10 to 110
# (along Z1's west edge and beyond it), Q1 the square 50..150 x 50..150 straddling both zones,
# Q2 the square 10..20 x 10..20 inside Z1. Read as "zone <predicate> feature":
PREDICATE_CASES = {
    "intersects": [("Z1", "L1"), ("Z1", "L2"), ("Z1", "Q1"), ("Z1", "Q2"), ("Z2", "L1"), ("Z2", "Q1")],
    "contains": [("Z1", "Q2")],  # L2 reaches outside Z1, so Z1 does not contain it
    "within": [],  # no zone lies inside a join feature
    "touches": [("Z1", "L2")],  # L2 meets Z1's boundary only
    "crosses": [("Z1", "L1"), ("Z2", "L1")],  # L1 runs through each zone's interior and out of it
    "overlaps": [("Z1", "Q1"), ("Z2", "Q1")],  # same dimension, part shared, neither inside the other
}


def zones_and_features(workspace: Path, **zone_fields: list) -> None:
    write_layer(
        workspace / "zones.parquet",
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), *zone_fields.pop("extra", [])],
        UTM,
        **zone_fields,
    )


def features(workspace: Path, **fields: list) -> None:
    write_layer(
        workspace / "features.parquet",
        [
            LineString([(X0 + 50, Y0 + 50), (X0 + 150, Y0 + 50)]),
            LineString([(X0, Y0 - 10), (X0, Y0 + 110)]),
            grid_box(50, 50, 150, 150),
            grid_box(10, 10, 20, 20),
        ],
        UTM,
        fid_name=["L1", "L2", "Q1", "Q2"],
        **fields,
    )


@pytest.mark.parametrize("predicate", sorted(PREDICATE_CASES))
def test_every_predicate_gives_the_hand_worked_pairs_on_both_engines(engine_app, workspace: Path, predicate) -> None:
    engine, app = engine_app
    zones_and_features(workspace, zid=["Z1", "Z2"])
    features(workspace)
    result = app.run(
        "spatial_join",
        {
            "input_path": "zones.parquet",
            "join_path": "features.parquet",
            "predicate": predicate,
            "how": "inner",
            "output_path": "j.parquet",
        },
    )
    assert result.engine["name"] == engine
    assert pairs(workspace / "j.parquet", "zid", "fid_name") == PREDICATE_CASES[predicate]


def test_within_distance_in_utm_is_planar_in_metres_on_both_engines(engine_app, workspace: Path) -> None:
    # P5 (230,50) is 30 m east of Z2 (x = 200) and 130 m from Z1; P4 (300,300) is 223.6 m from Z2's
    # corner (200,100). Within 60 m: P5-Z2 only. EPSG:32610 is true to scale here (k = 0.9997), so
    # both engines measure in its metres: 60 m is 60 units.
    engine, app = engine_app
    zones_and_points(workspace, ".parquet")
    write_layer(workspace / "p.parquet", [grid_point(230, 50), grid_point(300, 300)], UTM, pid=["P5", "P4"])
    result = app.run(
        "spatial_join",
        {
            "input_path": "p.parquet",
            "join_path": "zones.parquet",
            "predicate": "within_distance",
            "distance_meters": 60,
            "how": "inner",
            "output_path": "j.parquet",
        },
    )
    assert result.engine["name"] == engine
    assert pairs(workspace / "j.parquet", "pid", "zid") == [("P5", "Z2")]
    assert result.answer["input_features_dropped"] == 1
    parameters = manifest(workspace / "j.parquet")["parameters"]
    assert parameters["x-mapsmith:distance_method"] == "planar in EPSG:32610 (1.0 m per unit)"
    assert parameters["x-mapsmith:distance_in_analysis_units"] == 60.0
    assert result.crs_decisions["analysis_crs"] == "EPSG:32610" and result.crs_decisions["target_crs"] is None


def test_within_distance_in_degrees_is_decided_on_the_ellipsoid_by_geopandas(
    make_app, workspace: Path, monkeypatch
) -> None:
    # From O (122 W, 46 N) two points due east, placed with pyproj.Geod.fwd at 99 m and 101 m on the
    # WGS 84 ellipsoid. Within 100 m: only the 99 m one. The 101 m one lies inside the widened UTM
    # search (101 m x 0.9997 scale < 101 m), so it is a candidate removed by the geodesic measure.
    # DuckDB, preferred and with no row threshold, measures planar only: it passes the run on.
    from pyproj import Geod

    app = engine_apps(make_app, monkeypatch)["duckdb"]
    geod = Geod(ellps="WGS84")
    near = geod.fwd(-122.0, 46.0, 90, 99.0)
    far = geod.fwd(-122.0, 46.0, 90, 101.0)
    write_layer(workspace / "o.parquet", [Point(-122.0, 46.0)], "EPSG:4326", oid=["O"])
    write_layer(
        workspace / "t.parquet", [Point(near[0], near[1]), Point(far[0], far[1])], "EPSG:4326", tid=["99", "101"]
    )
    result = app.run(
        "spatial_join",
        {
            "input_path": "o.parquet",
            "join_path": "t.parquet",
            "predicate": "within_distance",
            "distance_meters": 100,
            "output_path": "j.parquet",
        },
    )
    assert result.engine["name"] == "geopandas"
    (passed,) = passed_over(workspace / "j.parquet")
    assert passed["engine"] == "duckdb"
    assert passed["reason"].startswith("within_distance in EPSG:4326, which is geographic (degrees)")
    assert pairs(workspace / "j.parquet", "oid", "tid") == [("O", "99")]
    assert result.answer["candidate_pairs_beyond_distance"] == 1
    record = manifest(workspace / "j.parquet")
    assert record["parameters"]["x-mapsmith:distance_method"].startswith("geodesic on the WGS 84 ellipsoid")
    assert record["crs_decisions"]["analysis_crs"] == "EPSG:32610"
    assert "output keeps input_path's own coordinates" in record["crs_decisions"]["reason"]


def typed_comparison_layers(workspace: Path) -> None:
    # input_path: Z1, Z2 (the zones above), a point K at (50,50) and N without a geometry (it matches
    # nothing, is kept by how=left, and is counted as missing), with fields of three types;
    # join_path: L1, L2, Q1, Q2 above with a 32-bit integer, a 32-bit float with a gap, a boolean,
    # text with a gap, a timestamp, and two names that clash: 'name' (input_path has one) must become
    # 'name_join2', because 'name_join' is taken by join_path's own field, which keeps its name.
    import datetime as dt

    import numpy as np
    import pandas as pd

    zones_and_features(
        workspace,
        extra=[grid_point(50, 50), None],
        zid=["Z1", "Z2", "K", "N"],
        name=["west", "east", "pin", "nowhere"],
        size=np.array([1, 2, 3, 4], dtype="int32"),
    )
    features(
        workspace,
        name=["line", "edge", None, "small"],
        name_join=["a", "b", "c", "d"],
        code=np.array([10, 20, 30, 40], dtype="int32"),
        share=np.array([0.5, np.nan, 0.25, 1.0], dtype="float32"),
        flag=[True, False, True, False],
        seen=pd.to_datetime(["2024-01-01", "2024-02-01", "2024-03-01", "2024-04-01"]),
        day=[dt.date(2024, 1, d) for d in (1, 2, 3, 4)],
    )


def _storage(table: Any) -> Any:
    """The table with extension types read as their storage. GeoPandas annotates its geometry field
    as ``geoarrow.wkb``, DuckDB does not (both write the same WKB and the same GeoParquet ``geo``
    metadata); once geoarrow-pyarrow is imported (the SedonaDB engine imports it) pyarrow reads the
    annotation back as an extension type, so the comparison is on the bytes either way."""
    import pyarrow as pa

    columns = [
        pa.chunked_array([c.storage for c in col.chunks], type=col.type.storage_type)
        if isinstance(col.type, pa.BaseExtensionType)
        else col
        for col in table.columns
    ]
    return pa.table(columns, names=table.column_names)


@pytest.mark.parametrize("how", ["left", "inner"])
@pytest.mark.parametrize("predicate", [*sorted(PREDICATE_CASES), "within_distance"])
def test_both_engines_write_the_same_rows_and_record_the_same_run(
    make_app, workspace: Path, monkeypatch, predicate: str, how: str
) -> None:
    # Every predicate the DuckDB engine accepts, on the layers above: the same columns in the same
    # order and of the same types, the same rows in the same order (input row, then join row; the
    # geometry WKB byte for byte), the same answer, and the same manifest apart from the engine. The
    # inner joins of mixed input (polygons and a point) write only the matched features' types.
    import pyarrow as pa
    import pyarrow.parquet as pq

    apps = engine_apps(make_app, monkeypatch)
    typed_comparison_layers(workspace)
    args = {"input_path": "zones.parquet", "join_path": "features.parquet", "predicate": predicate, "how": how}
    if predicate == "within_distance":
        args["distance_meters"] = 5.0  # K (50,50) is on L1; Q2 is 30 m from K, Z1 holds it
    results = {
        engine: app.run("spatial_join", {**args, "output_path": f"{engine}.parquet"}) for engine, app in apps.items()
    }
    assert {engine: r.engine["name"] for engine, r in results.items()} == {"geopandas": "geopandas", "duckdb": "duckdb"}
    tables = {engine: _storage(pq.read_table(workspace / f"{engine}.parquet")) for engine in apps}
    assert tables["duckdb"].column_names == tables["geopandas"].column_names
    assert tables["duckdb"].column_names == [
        "zid", "name", "size", "geometry", "fid_name", "name_join2", "name_join", "code", "share", "flag", "seen",
        "day",
    ]  # fmt: skip
    # pandas' text reads back as Arrow large_string, DuckDB's as string: the same UTF-8 in Parquet. A
    # date column that no row fills (nothing matched) is written by GeoPandas as Arrow's null type
    # (pandas holds dates as objects, so the type is guessed from the values); DuckDB keeps date32.
    types = {e: [pa.string() if t == pa.large_string() else t for t in tables[e].schema.types] for e in apps}
    empty_dates = [
        n for n, t in zip(tables["geopandas"].column_names, types["geopandas"], strict=True) if t == pa.null()
    ]
    assert empty_dates == ([] if tables["geopandas"].column("day").null_count < len(tables["geopandas"]) else ["day"])
    for name in empty_dates:
        types["geopandas"][tables["geopandas"].column_names.index(name)] = pa.date32()
    assert types["duckdb"] == types["geopandas"]
    assert tables["duckdb"].to_pylist() == tables["geopandas"].to_pylist()
    assert results["duckdb"].answer == results["geopandas"].answer
    assert results["duckdb"].answer["renamed_fields"] == {"name": "name_join2"}
    records = {engine: manifest(workspace / f"{engine}.parquet") for engine in apps}
    for record in records.values():
        record["parameters"].pop("x-mapsmith:engine_seconds")
    for key in ("parameters", "crs_decisions", "verification"):
        assert records["duckdb"].get(key) == records["geopandas"].get(key), key
    # the same notes, and the DuckDB engine's memory limit besides
    assert shared_notes(records["duckdb"]) == shared_notes(records["geopandas"]) == records["geopandas"]["notes"]
    assert [n.startswith(DUCKDB_LIMIT_NOTE) for n in records["duckdb"]["notes"]].count(True) == 1


def test_duckdb_is_preferred_but_passed_over_for_geopackage_and_below_its_row_threshold(
    make_app, workspace: Path
) -> None:
    from mapsmith_opensource.join_ops import spatial_join, spatial_join_duckdb

    # Measured faster file to file on a million points (see spatial_join_duckdb), DuckDB is tried first.
    assert spatial_join_duckdb.DUCKDB_PREFERENCE > spatial_join.GEOPANDAS_PREFERENCE
    app = make_app()
    zones_and_points(workspace)
    zones_and_points(workspace, ".parquet")
    result = app.run("spatial_join", {"input_path": "points.gpkg", "join_path": "zones.gpkg", "output_path": "a.gpkg"})
    assert result.engine["name"] == "geopandas"
    (passed,) = passed_over(workspace / "a.gpkg")
    assert passed == {
        "engine": "duckdb",
        "reason": "input_path is not GeoParquet (GPKG); the DuckDB engine joins GeoParquet files only, file to file",
    }
    # GeoParquet in and out, but 4 points and 3 zones are far below the row threshold.
    result = app.run(
        "spatial_join", {"input_path": "points.parquet", "join_path": "zones.parquet", "output_path": "b.parquet"}
    )
    assert result.engine["name"] == "geopandas"
    (passed,) = passed_over(workspace / "b.parquet")
    assert passed["reason"].startswith(
        f"the larger input has 4 features, fewer than the {spatial_join_duckdb.DUCKDB_MIN_ROWS:,}"
    )


def test_duckdb_engine_says_why_it_cannot_take_a_run(make_app, workspace: Path, monkeypatch) -> None:
    import pandas as pd
    from pyproj import Transformer

    app = engine_apps(make_app, monkeypatch)["duckdb"]
    zones_and_points(workspace, ".parquet")
    zones_and_points(workspace, ".gpkg")
    to_ll = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    write_layer(workspace / "zones_ll.parquet", [Point(*to_ll.transform(X0 + 50, Y0 + 50)).buffer(1e-4)], "EPSG:4326")
    write_layer(
        workspace / "kinds.parquet",
        [grid_box(0, 0, 100, 100)],
        UTM,
        kind=pd.Categorical(["flood"]),  # a categorical is written back by DuckDB as plain text
    )
    base = {"input_path": "points.parquet", "join_path": "zones.parquet"}
    cases = {
        "a.parquet": (
            {"join_path": "zones.gpkg"},
            "join_path is not GeoParquet (GPKG); the DuckDB engine joins GeoParquet",
        ),
        "b.gpkg": ({}, "output_path ends in .gpkg; the DuckDB engine writes GeoParquet (.parquet) only"),
        "c.parquet": (
            {"join_path": "zones_ll.parquet"},
            "input_path is in EPSG:32610 and join_path in EPSG:4326; the DuckDB engine joins only layers in one CRS",
        ),
        "d.parquet": (
            {"join_path": "kinds.parquet"},
            "join_path's field 'kind' is of type dictionary<values=string, indices=int8, ordered=0>; the DuckDB "
            "engine carries only",
        ),
    }
    for output, (change, reason) in cases.items():
        result = app.run("spatial_join", {**base, **change, "output_path": output})
        assert result.engine["name"] == "geopandas", output
        (passed,) = passed_over(workspace / output)
        assert passed["engine"] == "duckdb" and passed["reason"].startswith(reason), output
    # GeoPandas aligned the join layer it was given in another CRS, and recorded it.
    assert "join_path" in manifest(workspace / "c.parquet")["crs_decisions"]["x-mapsmith:alignment"]


def test_duckdb_engine_refuses_a_projjson_whose_code_names_another_crs(make_app, workspace: Path, monkeypatch) -> None:
    # Both layers carry a PROJJSON that says EPSG:32610 but puts the central meridian at 120 W
    # instead of 123 W. DuckDB would read the code and write EPSG:32610's own definition: the output
    # would claim a CRS 3 degrees away from the input's, so the DuckDB engine does not take the run.
    import json

    import pyarrow.parquet as pq
    from pyproj import CRS

    app = engine_apps(make_app, monkeypatch)["duckdb"]
    zones_and_points(workspace, ".parquet")
    projjson = json.loads(CRS(UTM).to_json())
    meridian = next(p for p in projjson["conversion"]["parameters"] if p["name"] == "Longitude of natural origin")
    meridian["value"] = -120
    for name in ("points.parquet", "zones.parquet"):
        table = pq.read_table(workspace / name)
        metadata = dict(table.schema.metadata)
        geo = json.loads(metadata[b"geo"])
        geo["columns"]["geometry"]["crs"] = projjson
        metadata[b"geo"] = json.dumps(geo).encode()
        pq.write_table(table.replace_schema_metadata(metadata), workspace / name)
    result = app.run(
        "spatial_join", {"input_path": "points.parquet", "join_path": "zones.parquet", "output_path": "j.parquet"}
    )
    assert result.engine["name"] == "geopandas"
    (passed,) = passed_over(workspace / "j.parquet")
    assert passed["reason"].startswith("input_path's PROJJSON CRS names EPSG:32610 but defines another CRS")
    assert read(workspace / "j.parquet").crs.equals(CRS.from_json_dict(projjson))


@pytest.mark.parametrize(
    "crs",
    [UTM, "+proj=tmerc +lat_0=0 +lon_0=-121 +k=0.9996 +x_0=500000 +y_0=0 +ellps=GRS80 +units=m +no_defs"],
    ids=["epsg", "custom"],
)
def test_duckdb_output_keeps_the_input_crs_and_names_its_engine(make_app, workspace: Path, monkeypatch, crs) -> None:
    # DuckDB writes the CRS its GEOMETRY type carries: EPSG:32610 as that code's PROJJSON, a CRS
    # without a code as the input's own PROJJSON. Either reads back equal to input_path's.
    import duckdb
    from pyproj import CRS

    from mapsmith_opensource import duckdb_spatial, io

    app = engine_apps(make_app, monkeypatch)["duckdb"]
    write_layer(workspace / "zones.parquet", [grid_box(0, 0, 100, 100)], crs, zid=["Z1"])
    write_layer(workspace / "points.parquet", [grid_point(50, 50), grid_point(300, 300)], crs, pid=["P1", "P4"])
    result = app.run(
        "spatial_join", {"input_path": "points.parquet", "join_path": "zones.parquet", "output_path": "j.parquet"}
    )
    assert pairs(workspace / "j.parquet", "pid", "zid") == [("P1", "Z1"), ("P4", None)]
    assert read(workspace / "j.parquet").crs.equals(CRS.from_user_input(crs))
    written = io.inspect(workspace / "j.parquet")
    assert CRS.from_wkt(written.crs_wkt).equals(CRS.from_user_input(crs))
    record = manifest(workspace / "j.parquet")
    assert record["output"]["crs"] == record["inputs"][0]["crs"] == written.crs_label
    assert next(c for c in record["verification"] if c["name"] == "crs_matches")["passed"]
    assert result.engine["name"] == record["engine"]["name"] == "duckdb"
    assert record["engine"]["version"] == duckdb.__version__
    assert record["engine"]["x-mapsmith:components"] == {"duckdb-spatial": duckdb_spatial.versions()["duckdb-spatial"]}


def test_duckdb_engine_failing_after_its_copy_leaves_no_output_and_a_failure_record(
    make_app, workspace: Path, monkeypatch
) -> None:
    # DuckDB writes the temporary output itself (not through io.write_layer): a failure after its COPY
    # must still leave nothing at output_path, no temporary file, and a record naming the engine.
    from mapsmith_opensource.join_ops import spatial_join_duckdb

    app = engine_apps(make_app, monkeypatch)["duckdb"]
    zones_and_points(workspace, ".parquet")
    fired = []

    def fail(path: Path, source: object) -> int:
        assert path.exists()  # the COPY wrote it
        fired.append(path)
        raise OSError("sabotage: disk failed after the COPY")

    monkeypatch.setattr(spatial_join_duckdb, "_declare_geoparquet", fail)
    with pytest.raises(Exception, match="sabotage"):
        app.run(
            "spatial_join", {"input_path": "points.parquet", "join_path": "zones.parquet", "output_path": "j.parquet"}
        )
    assert fired, "the sabotage never fired"
    assert not (workspace / "j.parquet").exists() and not fired[0].exists()
    (failed,) = workspace.glob("j.parquet.failed*.json")
    record = json.loads(failed.read_text("utf-8"))
    assert record["engine"]["name"] == "duckdb"
    assert record["verification"][-1]["name"] == "x-mapsmith:run_completed"


def test_distance_meters_only_with_within_distance(app, workspace: Path) -> None:
    zones_and_points(workspace)
    base = {"input_path": "points.gpkg", "join_path": "zones.gpkg", "output_path": "j.gpkg"}
    with pytest.raises(ArgumentError) as missing:
        app.run("spatial_join", {**base, "predicate": "within_distance"})
    assert missing.value.code == "MISSING_ARGUMENT" and missing.value.evidence["argument"] == "distance_meters"
    with pytest.raises(ArgumentError) as stray:
        app.run("spatial_join", {**base, "predicate": "intersects", "distance_meters": 10})
    assert stray.value.code == "ARGUMENT_NOT_APPLICABLE" and "within_distance" in stray.value.hint
    # refused before the engine started: no output and no failure record
    assert not list(workspace.glob("j.gpkg*"))


def test_spatial_join_refuses_invalid_polygons_with_the_rows_on_both_engines(engine_app, workspace: Path) -> None:
    # bad.parquet: row 0 a valid 5 m square, row 1 a bow-tie (its edges cross at (5,5)). Both engines
    # count it, name row 1 with GEOS's reason, record the same input-validity checks, and refuse.
    from shapely.geometry import Polygon

    engine, app = engine_app
    bowtie = Polygon([(X0, Y0), (X0 + 10, Y0 + 10), (X0 + 10, Y0), (X0, Y0 + 10)])
    write_layer(workspace / "bad.parquet", [grid_box(0, 0, 5, 5), bowtie], UTM, zid=["ok", "bowtie"])
    zones_and_points(workspace, ".parquet")
    with pytest.raises(InputError) as err:
        app.run(
            "spatial_join", {"input_path": "points.parquet", "join_path": "bad.parquet", "output_path": "j.parquet"}
        )
    assert err.value.code == "INPUT_GEOMETRY_INVALID"
    assert err.value.evidence["argument"] == "join_path" and err.value.evidence["first_rows"] == [1]
    assert err.value.evidence["invalid_count"] == 1
    assert err.value.evidence["reasons"] == [f"Self-intersection[{X0 + 5} {Y0 + 5}]"]
    assert "repair_geometries" in err.value.hint
    (failed,) = workspace.glob("j.parquet.failed*.json")
    record = json.loads(failed.read_text("utf-8"))
    assert record["engine"]["name"] == engine
    validity = [c for c in record["verification"] if c["name"] == "x-mapsmith:input_geometry_valid"]
    assert [(c["argument"], c["passed"], c["detail"]) for c in validity] == [
        ("input_path", True, "input_path: 0 of 4 geometries invalid"),
        ("join_path", False, "join_path: 1 of 2 geometries invalid (first feature indices [1]; Self-intersection)"),
    ]


# -- nearest_join -----------------------------------------------------------------------------


def nearest_layers(workspace: Path) -> None:
    # Inputs A (0,0), B (100,0), C (200,0). Join rows, in file order: S1 (3,4), S2 (106,8),
    # S4 (170,40), S3 (230,40). A-S1 = 5 (3-4-5); B-S2 = 10 (6-8-10); C-S4 = C-S3 = 50 (30-40-50),
    # a tie broken by file order: S4 comes first. Every other pair is farther (B-S4 = 80.6, A-S2 = 106.3).
    write_layer(
        workspace / "in.gpkg", [grid_point(0, 0), grid_point(100, 0), grid_point(200, 0)], UTM, name=["A", "B", "C"]
    )
    write_layer(
        workspace / "cand.gpkg",
        [grid_point(3, 4), grid_point(106, 8), grid_point(170, 40), grid_point(230, 40)],
        UTM,
        name=["S1", "S2", "S4", "S3"],
    )


def test_nearest_join_distances_are_hand_triangles_and_ties_go_to_the_first_row(app, workspace: Path) -> None:
    nearest_layers(workspace)
    result = app.run("nearest_join", {"input_path": "in.gpkg", "join_path": "cand.gpkg", "output_path": "n.gpkg"})
    out = read(workspace / "n.gpkg").set_index("name")
    assert out["name_join"].to_dict() == {"A": "S1", "B": "S2", "C": "S4"}
    assert out["distance_m"].to_dict() == {"A": pytest.approx(5.0), "B": pytest.approx(10.0), "C": pytest.approx(50.0)}
    assert result.answer["input_features_with_tied_nearest"] == 1
    record = manifest(workspace / "n.gpkg")
    assert "first in join_path" in record["parameters"]["x-mapsmith:tie_rule"]
    assert record["parameters"]["x-mapsmith:distance_method"].startswith("planar in EPSG:32610")
    assert record["parameters"]["x-mapsmith:renamed_fields"] == {"name": "name_join"}
    assert next(c for c in record["verification"] if c["name"] == "values_in_expected_range")["passed"]


def test_nearest_join_beyond_max_distance_keeps_the_feature_empty_and_counts_it(app, workspace: Path) -> None:
    # Within 8 m: A-S1 (5 m) only; B (10 m) and C (50 m) keep empty join fields.
    nearest_layers(workspace)
    result = app.run(
        "nearest_join",
        {"input_path": "in.gpkg", "join_path": "cand.gpkg", "max_distance_meters": 8, "output_path": "n.gpkg"},
    )
    out = read(workspace / "n.gpkg").set_index("name")
    assert len(out) == 3
    assert out.loc["A", "distance_m"] == pytest.approx(5.0)
    assert out.loc[["B", "C"], "distance_m"].isna().all() and out.loc[["B", "C"], "name_join"].isna().all()
    assert result.answer["input_features_unmatched"] == 2


def test_nearest_join_in_degrees_is_geodesic_at_46n(app, workspace: Path) -> None:
    # Inputs O1 (122.000 W, 46.0000 N) and O2 (121.995 W, 46.0025 N); candidates J1 (121.996 W,
    # 46.000 N) and J2 (122.000 W, 46.003 N). By hand (1 deg lat = 111.1 km, 1 deg lon = 77.3 km here):
    # O1-J1 = 309 m, O1-J2 = 333 m -> J1; O2-J1 = hypot(77, 278) = 289 m, O2-J2 = hypot(387, 56) = 391 m -> J1.
    # The exact figures come from pyproj.Geod on WGS 84 here. A planar distance in UTM zone 10 would
    # be off by about 0.03 % (0.1 m) this far from the central meridian; the tolerance is 1 mm.
    from pyproj import Geod

    origins = [(-122.0, 46.0), (-121.995, 46.0025)]
    candidates = [(-121.996, 46.0), (-122.0, 46.003)]
    write_layer(workspace / "o.gpkg", [Point(*p) for p in origins], "EPSG:4326", oid=["O1", "O2"])
    write_layer(workspace / "j.gpkg", [Point(*p) for p in candidates], "EPSG:4326", jid=["J1", "J2"])
    result = app.run("nearest_join", {"input_path": "o.gpkg", "join_path": "j.gpkg", "output_path": "n.gpkg"})
    geod = Geod(ellps="WGS84")
    expected = [geod.inv(*origin, *candidates[0])[2] for origin in origins]
    assert expected == [pytest.approx(309, abs=2), pytest.approx(289, abs=2)]  # the hand figures
    out = read(workspace / "n.gpkg").set_index("oid")
    assert out["jid"].to_dict() == {"O1": "J1", "O2": "J1"}
    assert out.loc["O1", "distance_m"] == pytest.approx(expected[0], abs=1e-3)
    assert out.loc["O2", "distance_m"] == pytest.approx(expected[1], abs=1e-3)
    assert result.crs_decisions["analysis_crs"] == "EPSG:32610"
    assert "geodesically on the WGS 84 ellipsoid" in result.crs_decisions["reason"]
    assert read(workspace / "n.gpkg").crs.to_epsg() == 4326


@pytest.mark.parametrize("ext", [".gpkg", ".parquet"])  # .parquet: join_ops.nearest_columns hands it on unread
def test_nearest_join_refuses_an_input_that_already_has_distance_m(app, workspace: Path, ext: str) -> None:
    write_layer(workspace / f"in{ext}", [grid_point(0, 0)], UTM, distance_m=[1.0])
    write_layer(workspace / f"cand{ext}", [grid_point(3, 4)], UTM, name=["S1"])
    with pytest.raises(InputError) as err:
        app.run("nearest_join", {"input_path": f"in{ext}", "join_path": f"cand{ext}", "output_path": f"n{ext}"})
    assert err.value.code == "FIELD_EXISTS" and err.value.evidence["field"] == "distance_m"


# -- count_in_polygons ------------------------------------------------------------------------


def districts(workspace: Path, **fields: list) -> None:
    # A = 0..100 x 0..100, B = 100..200 x 0..100 (shared edge x = 100), C = 300..400 x 0..100.
    write_layer(
        workspace / "districts.gpkg",
        [grid_box(0, 0, 100, 100), grid_box(100, 0, 200, 100), grid_box(300, 0, 400, 100)],
        UTM,
        did=["A", "B", "C"],
        **fields,
    )


def test_count_in_polygons_keeps_zero_polygons_and_counts_a_shared_boundary_point_in_both(app, workspace: Path) -> None:
    # Points: (10,10), (20,20), (50,50) inside A; (100,50) on the A|B edge; (150,50) inside B;
    # (1000,1000) in nothing. Counts: A = 3 + 1 = 4, B = 1 + 1 = 2, C = 0. Of 6 points 5 are counted,
    # one of them twice, so the counts add up to 6; 1 point is in no polygon.
    districts(workspace)
    pts = [grid_point(10, 10), grid_point(20, 20), grid_point(50, 50), grid_point(100, 50), grid_point(150, 50)]
    write_layer(workspace / "pts.gpkg", [*pts, grid_point(1000, 1000)], UTM, pid=[1, 2, 3, 4, 5, 6])
    result = app.run(
        "count_in_polygons", {"input_path": "districts.gpkg", "points_path": "pts.gpkg", "output_path": "c.gpkg"}
    )
    out = read(workspace / "c.gpkg").set_index("did")
    assert out["point_count"].to_dict() == {"A": 4, "B": 2, "C": 0}
    assert result.answer["total_point_count"] == 6
    assert result.answer["points_in_no_polygon"] == 1
    assert result.answer["points_in_several_polygons"] == 1
    assert result.answer["polygons_with_no_points"] == 1
    record = manifest(workspace / "c.gpkg")
    assert record["parameters"]["x-mapsmith:boundary_rule"].startswith("intersects")
    assert next(c for c in record["verification"] if c["name"] == "feature_count_exact")["passed"]


def test_count_in_polygons_moves_points_in_another_crs_and_records_it(app, workspace: Path) -> None:
    # The three interior points of A and the one of B, given in lon/lat: A = 3, B = 1, C = 0.
    from pyproj import Transformer

    districts(workspace)
    to_ll = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    pts = [Point(*to_ll.transform(X0 + x, Y0 + y)) for x, y in [(10, 10), (20, 20), (50, 50), (150, 50)]]
    write_layer(workspace / "pts.geojson", pts, "EPSG:4326", pid=[1, 2, 3, 4])
    result = app.run(
        "count_in_polygons", {"input_path": "districts.gpkg", "points_path": "pts.geojson", "output_path": "c.gpkg"}
    )
    assert read(workspace / "c.gpkg").set_index("did")["point_count"].to_dict() == {"A": 3, "B": 1, "C": 0}
    aligned = result.crs_decisions["x-mapsmith:alignment"]["points_path"]
    assert (aligned["source_crs"], aligned["target_crs"]) == ("EPSG:4326", "EPSG:32610")


def test_count_in_polygons_will_not_overwrite_point_count(app, workspace: Path) -> None:
    districts(workspace, point_count=[1, 2, 3])
    write_layer(workspace / "pts.gpkg", [grid_point(10, 10)], UTM, pid=[1])
    with pytest.raises(InputError) as err:
        app.run(
            "count_in_polygons", {"input_path": "districts.gpkg", "points_path": "pts.gpkg", "output_path": "c.gpkg"}
        )
    assert err.value.code == "FIELD_EXISTS"


# -- summarize_points_in_polygons -------------------------------------------------------------


def valued_points(workspace: Path) -> None:
    # In A: 10, 20, (null), 40; in B: 5, 7; on the A|B edge: 100 (counted in both); C gets nothing.
    geoms = [grid_point(10, 10), grid_point(20, 20), grid_point(30, 30), grid_point(40, 40)]
    geoms += [grid_point(150, 10), grid_point(150, 20), grid_point(100, 50)]
    values = [10.0, 20.0, None, 40.0, 5.0, 7.0, 100.0]
    write_layer(workspace / "pts.gpkg", geoms, UTM, value=values, name=list("abcdefg"))


def test_summarize_gives_hand_means_and_counts_nulls_apart(app, workspace: Path) -> None:
    # A: values 10, 20, 40, 100 -> mean 170 / 4 = 42.5, sum 170, min 10, max 100, count 4, 1 null.
    # B: values 5, 7, 100 -> mean 112 / 3 = 37.333, sum 112, min 5, max 100, count 3, 0 null.
    # C: no values -> mean, min, max empty; sum 0; count 0; 0 null.
    districts(workspace)
    valued_points(workspace)
    result = app.run(
        "summarize_points_in_polygons",
        {"input_path": "districts.gpkg", "points_path": "pts.gpkg", "field": "value", "output_path": "s.gpkg"},
    )
    out = read(workspace / "s.gpkg").set_index("did")
    assert out.loc["A", ["value_mean", "value_sum", "value_min", "value_max"]].tolist() == [42.5, 170, 10, 100]
    assert out.loc["B", "value_mean"] == pytest.approx(112 / 3)
    assert out.loc["B", ["value_sum", "value_min", "value_max"]].tolist() == [112, 5, 100]
    assert out["value_count"].to_dict() == {"A": 4, "B": 3, "C": 0}
    assert out["value_null_count"].to_dict() == {"A": 1, "B": 0, "C": 0}
    assert out.loc["C", ["value_mean", "value_min", "value_max"]].isna().all() and out.loc["C", "value_sum"] == 0
    assert [w["code"] for w in result.warnings] == ["NULL_VALUES_EXCLUDED"]
    assert result.answer["points_with_null_value"] == 1
    assert manifest(workspace / "s.gpkg")["parameters"]["statistics"] == "mean,sum,min,max,count"


def test_summarize_writes_only_the_statistics_asked_for(app, workspace: Path) -> None:
    districts(workspace)
    valued_points(workspace)
    app.run(
        "summarize_points_in_polygons",
        {
            "input_path": "districts.gpkg",
            "points_path": "pts.gpkg",
            "field": "value",
            "statistics": " max, mean ,max",
            "output_path": "s.gpkg",
        },
    )
    out = read(workspace / "s.gpkg")
    assert [c for c in out.columns if c.startswith("value_")] == ["value_max", "value_mean", "value_null_count"]
    assert manifest(workspace / "s.gpkg")["parameters"]["statistics"] == "max,mean"


@pytest.mark.parametrize(
    ("field", "statistics", "error", "code"),
    [
        ("name", "mean", InputError, "FIELD_NOT_NUMERIC"),
        ("valu", "mean", InputError, "FIELD_NOT_FOUND"),
        ("value", "mean,median", ArgumentError, "ARGUMENT_NOT_IN_CHOICES"),
    ],
)
def test_summarize_refuses_what_it_cannot_compute(app, workspace: Path, field, statistics, error, code) -> None:
    districts(workspace)
    valued_points(workspace)
    with pytest.raises(error) as err:
        app.run(
            "summarize_points_in_polygons",
            {
                "input_path": "districts.gpkg",
                "points_path": "pts.gpkg",
                "field": field,
                "statistics": statistics,
                "output_path": "s.gpkg",
            },
        )
    assert err.value.code == code
    if code == "FIELD_NOT_NUMERIC":
        assert err.value.evidence["field"] == "name" and err.value.evidence["type"] in ("str", "object")
    if code == "FIELD_NOT_FOUND":
        assert "did you mean 'value'" in err.value.message
    assert not (workspace / "s.gpkg").exists()
    # an unknown statistic is refused before the engine starts, so it leaves no failure record either
    assert (code == "ARGUMENT_NOT_IN_CHOICES") == (not list(workspace.glob("s.gpkg*")))


# -- apportion_by_area ------------------------------------------------------------------------


def test_apportion_extensive_splits_a_total_by_overlap_area(app, workspace: Path) -> None:
    # One source square 0..200 x 0..200 holding 100 people. T1 = 0..50 x 0..200 covers a quarter of
    # it -> 25; T2 = 50..200 x 0..200 three quarters -> 75; T3 lies outside every source -> empty.
    # Nothing lies outside the targets, so 25 + 75 = 100 is all of it.
    write_layer(workspace / "src.gpkg", [grid_box(0, 0, 200, 200)], UTM, value=[100.0])
    targets = [grid_box(0, 0, 50, 200), grid_box(50, 0, 200, 200), grid_box(1000, 0, 1100, 100)]
    write_layer(workspace / "tgt.gpkg", targets, UTM, tid=["T1", "T2", "T3"])
    result = app.run(
        "apportion_by_area",
        {
            "input_path": "tgt.gpkg",
            "source_path": "src.gpkg",
            "field": "value",
            "quantity_type": "extensive",
            "output_path": "a.gpkg",
        },
    )
    out = read(workspace / "a.gpkg").set_index("tid")
    assert out.loc["T1", "value_apportioned"] == pytest.approx(25, rel=1e-6)
    assert out.loc["T2", "value_apportioned"] == pytest.approx(75, rel=1e-6)
    assert out["value_apportioned"].isna().tolist() == [False, False, True]
    assert out["source_coverage"].tolist()[:2] == [pytest.approx(1, rel=1e-6)] * 2
    assert result.answer["targets_not_covered"] == 1
    assert result.answer["quantity_not_allocated"] == pytest.approx(0, abs=1e-6)
    record = manifest(workspace / "a.gpkg")
    assert next(c for c in record["verification"] if c["name"] == "x-mapsmith:quantity_conserved")["passed"]
    assert "geodesically on the WGS 84 ellipsoid" in record["crs_decisions"]["reason"]


def test_apportion_intensive_is_an_area_weighted_mean_over_the_covered_part(app, workspace: Path) -> None:
    # Sources: left half 0..100 x 0..200 with density 10, right half 100..200 x 0..200 with 30.
    # T1 = 50..150 x 0..200 spans both equally -> (10 + 30) / 2 = 20. T2 = 0..50 x 0..100 in the
    # left half only -> 10. T3 = 150..250 x 100..200: half of it over the right half -> 30, coverage 0.5.
    write_layer(workspace / "src.gpkg", [grid_box(0, 0, 100, 200), grid_box(100, 0, 200, 200)], UTM, value=[10.0, 30.0])
    targets = [grid_box(50, 0, 150, 200), grid_box(0, 0, 50, 100), grid_box(150, 100, 250, 200)]
    write_layer(workspace / "tgt.gpkg", targets, UTM, tid=["T1", "T2", "T3"])
    result = app.run(
        "apportion_by_area",
        {
            "input_path": "tgt.gpkg",
            "source_path": "src.gpkg",
            "field": "value",
            "quantity_type": "intensive",
            "output_path": "a.gpkg",
        },
    )
    out = read(workspace / "a.gpkg").set_index("tid")
    assert out["value_apportioned"].to_dict() == {
        "T1": pytest.approx(20, rel=1e-6),
        "T2": pytest.approx(10, rel=1e-9),
        "T3": pytest.approx(30, rel=1e-9),
    }
    assert out.loc["T3", "source_coverage"] == pytest.approx(0.5, rel=1e-6)
    assert result.answer["targets_partly_covered"] == 1
    assert next(c for c in result.checks if c["name"] == "values_in_expected_range")["passed"]


def test_apportion_in_degrees_uses_ellipsoidal_not_degree_areas(app, workspace: Path) -> None:
    # A 1 x 1 degree source (122-121 W, 46-47 N) holding 1000, cut at 46.5 N. In square degrees the
    # halves are equal (500 each); on the ground the southern half is larger. On a sphere the share
    # is (sin 46.5 - sin 46) / (sin 47 - sin 46) = 0.006031 / 0.012012 = 0.5021 -> about 502.1.
    # The exact expectation is the ratio of the two ellipsoidal areas from pyproj.Geod here, with a
    # vertex every 0.001 degree so the edges follow the parallels as drawn.
    import shapely
    from pyproj import Geod

    source = box(-122, 46, -121, 47)
    south, north = box(-122, 46, -121, 46.5), box(-122, 46.5, -121, 47)
    write_layer(workspace / "src.gpkg", [source], "EPSG:4326", value=[1000.0])
    write_layer(workspace / "tgt.gpkg", [south, north], "EPSG:4326", tid=["S", "N"])
    app.run(
        "apportion_by_area",
        {
            "input_path": "tgt.gpkg",
            "source_path": "src.gpkg",
            "field": "value",
            "quantity_type": "extensive",
            "output_path": "a.gpkg",
        },
    )
    geod = Geod(ellps="WGS84")
    area = {
        k: abs(geod.geometry_area_perimeter(shapely.segmentize(g, 0.001))[0])
        for k, g in {"S": south, "N": north, "all": source}.items()
    }
    out = read(workspace / "a.gpkg").set_index("tid")["value_apportioned"]
    assert out["S"] == pytest.approx(1000 * area["S"] / area["all"], rel=1e-7)
    assert out["S"] == pytest.approx(502.1, abs=0.3) and out["N"] == pytest.approx(497.9, abs=0.3)


def test_apportion_requires_the_quantity_type_and_says_why(app, workspace: Path) -> None:
    write_layer(workspace / "src.gpkg", [grid_box(0, 0, 200, 200)], UTM, value=[100.0])
    write_layer(workspace / "tgt.gpkg", [grid_box(0, 0, 50, 200)], UTM, tid=["T1"])
    with pytest.raises(ArgumentError) as err:
        app.run(
            "apportion_by_area",
            {"input_path": "tgt.gpkg", "source_path": "src.gpkg", "field": "value", "output_path": "a.gpkg"},
        )
    assert err.value.code == "MISSING_ARGUMENT" and err.value.evidence["argument"] == "quantity_type"
    assert "never guessed" in err.value.message


# -- join_attributes --------------------------------------------------------------------------


def write_table(path: Path, **columns: list) -> Path:
    import pandas as pd
    import pyogrio

    pyogrio.write_dataframe(pd.DataFrame(columns), path, driver="XLSX")
    return path


@pytest.mark.parametrize(
    ("codes", "read_as"),
    [
        # a blank key cell makes GDAL read the column as decimals: 310101.0
        ([310101.0, 310102.0, None], "decimal"),
        # whole numbers only: GDAL reads them as integers
        ([310101.0, 310102.0, 310104.0], "integer"),
    ],
)
def test_join_attributes_matches_spreadsheet_numbers_to_text_codes_after_recorded_normalisation(
    app, workspace: Path, codes: list, read_as: str
) -> None:
    # Districts carry text codes "310101" and "310103". The sheet's keys 310101, 310102 (and a blank
    # or 310104): 310101 matches; district 310103 has no row; 310102 (and 310104) match no district.
    write_layer(
        workspace / "districts.gpkg", [grid_box(0, 0, 10, 10), grid_box(10, 0, 20, 10)], UTM, code=["310101", "310103"]
    )
    write_table(workspace / "census.xlsx", code=codes, pop=[100, 200, 300])
    result = app.run(
        "join_attributes",
        {
            "input_path": "districts.gpkg",
            "table_path": "census.xlsx",
            "input_key": "code",
            "table_key": "code",
            "output_path": "j.gpkg",
        },
    )
    out = read(workspace / "j.gpkg").set_index("code")
    assert out.loc["310101", "pop"] == 100
    assert out["pop"].isna().tolist() == [False, True]
    assert out.index.tolist() == ["310101", "310103"]  # input_key written as it was: text
    norm = result.answer["key_normalisation"]
    assert norm["applied"] is True and norm["converted"] == "table_path" and norm["table_key_type"] == read_as
    assert result.answer["input_unmatched_keys"] == ["310103"]
    assert result.answer["table_unmatched_keys"][0] == 310102
    assert result.answer["table_rows_without_key"] == (1 if read_as == "decimal" else 0)
    assert "UNMATCHED_KEYS" in [w["code"] for w in result.warnings]
    record = manifest(workspace / "j.gpkg")
    assert record["parameters"]["x-mapsmith:key_normalisation"]["applied"] is True
    assert any("key normalisation" in n for n in record["notes"])
    check = next(c for c in record["verification"] if c["name"] == "x-mapsmith:keys_matched")
    assert check["passed"] is False and check["critical"] is False and "310103" in check["detail"]


def test_join_attributes_never_matches_a_leading_zero_code_to_a_number(app, workspace: Path) -> None:
    # The layer's key is the number 123.0; the CSV code is "0123". Turning 123.0 into text gives
    # "123", not "0123", and "0123" read as a number loses its zero: no normalisation, no match,
    # and both sides are reported unmatched.
    write_layer(workspace / "sites.gpkg", [grid_point(0, 0)], UTM, site=[123.0])
    (workspace / "codes.csv").write_text("code,label\n0123,first\n")
    result = app.run(
        "join_attributes",
        {
            "input_path": "sites.gpkg",
            "table_path": "codes.csv",
            "input_key": "site",
            "table_key": "code",
            "output_path": "j.gpkg",
        },
    )
    assert read(workspace / "j.gpkg")["label"].isna().all()
    norm = result.answer["key_normalisation"]
    assert norm["applied"] is False and "0123" in norm["blocking_values"]
    assert result.answer["input_unmatched_keys"] == [123.0]
    assert result.answer["table_unmatched_keys"] == ["0123"]
    assert {"KEY_TYPES_DIFFER", "UNMATCHED_KEYS"} <= {w["code"] for w in result.warnings}


def test_join_attributes_refuses_duplicate_table_keys(app, workspace: Path) -> None:
    write_layer(workspace / "d.gpkg", [grid_box(0, 0, 10, 10)], UTM, code=["A"])
    (workspace / "t.csv").write_text("code,v\nA,1\nA,2\nB,3\n")
    with pytest.raises(InputError) as err:
        app.run(
            "join_attributes",
            {
                "input_path": "d.gpkg",
                "table_path": "t.csv",
                "input_key": "code",
                "table_key": "code",
                "output_path": "j.gpkg",
            },
        )
    assert err.value.code == "TABLE_KEY_NOT_UNIQUE"
    assert err.value.evidence["duplicate_keys"] == {"A": 2}


def test_join_attributes_reads_a_text_only_sheet_with_its_header_and_renames_clashes(app, workspace: Path) -> None:
    # Every cell text: GDAL would name the columns Field1, Field2 ... The first row names the key,
    # so the sheet is read with its header (noted). Both sides have 'name': the table's is renamed.
    write_layer(workspace / "d.gpkg", [grid_box(0, 0, 10, 10)], UTM, code=["0042"], name=["district"])
    write_table(workspace / "t.xlsx", code=["0042"], name=["from table"])
    result = app.run(
        "join_attributes",
        {
            "input_path": "d.gpkg",
            "table_path": "t.xlsx",
            "input_key": "code",
            "table_key": "code",
            "output_path": "j.gpkg",
        },
    )
    out = read(workspace / "j.gpkg")
    assert out.loc[0, ["code", "name", "name_table"]].tolist() == ["0042", "district", "from table"]
    assert result.answer["renamed_fields"] == {"name": "name_table"}
    assert result.answer["input_features_unmatched"] == 0 and result.status == "ok"
    assert any("HEADERS=FORCE" in n for n in result.notes)


def test_join_attributes_names_a_missing_key_field(app, workspace: Path) -> None:
    write_layer(workspace / "d.gpkg", [grid_box(0, 0, 10, 10)], UTM, code=["A"])
    (workspace / "t.csv").write_text("kode,v\nA,1\n")
    with pytest.raises(InputError) as err:
        app.run(
            "join_attributes",
            {
                "input_path": "d.gpkg",
                "table_path": "t.csv",
                "input_key": "code",
                "table_key": "code",
                "output_path": "j.gpkg",
            },
        )
    assert err.value.code == "FIELD_NOT_FOUND" and err.value.evidence["argument"] == "table_key"
    assert err.value.evidence["fields"] == ["kode", "v"]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_planar_search_in_threads_gives_shapely_s_answer(threads: int) -> None:
    """nearest_in_threads splits the input in consecutive slices over threads; the pairs, their order and the
    distances are one query_nearest's. By hand first: sites at (0,0) and (10,0); (5,0) is 5 from both (a tie, both
    kept, in tree order), (1,0) is 1 from the first, (12,0) 2 from the second, (100,0) beyond the 50 limit."""
    import numpy as np
    import shapely

    from mapsmith_opensource.join_ops.nearest import nearest_in_threads

    tree = shapely.STRtree([shapely.Point(0, 0), shapely.Point(10, 0)])
    probes = np.array([shapely.Point(5, 0), shapely.Point(1, 0), shapely.Point(12, 0), shapely.Point(100, 0)])
    left, right, dist = nearest_in_threads(tree, probes, 50.0, threads)
    assert (left.tolist(), right.tolist(), dist.tolist()) == ([0, 0, 1, 2], [0, 1, 0, 1], [5.0, 5.0, 1.0, 2.0])
    # 2,000 random points against 50 random sites, no limit: one query's arrays, element for element
    rng = np.random.default_rng(7)
    sites = shapely.points(rng.integers(0, 100, (50, 2)))
    points = shapely.points(rng.integers(0, 100, (2_000, 2)))  # integer grid: many ties
    big = shapely.STRtree(sites)
    (one_left, one_right), one_dist = big.query_nearest(points, return_distance=True, all_matches=True)
    found = nearest_in_threads(big, points, None, threads)
    assert len(one_left) > len(points)  # ties were found
    for got, want in zip(found, (one_left, one_right, one_dist), strict=True):
        np.testing.assert_array_equal(got, want)


def _ties_by_sorting(left, right, dist, n_left):
    """The tie rule as nearest_join applied it before _break_ties took the unsorted path: every pair sorted."""
    import numpy as np

    from mapsmith_opensource.join_ops.nearest import TIE_TOLERANCE_METRES

    nearest = np.full(n_left, np.inf)
    np.minimum.at(nearest, left, dist)
    near = dist <= nearest[left] + TIE_TOLERANCE_METRES
    left, right, dist = left[near], right[near], dist[near]
    tied = int((np.bincount(left, minlength=n_left) > 1).sum())
    order = np.lexsort((right, left))
    chosen, first = np.unique(left[order], return_index=True)
    return chosen, right[order][first], dist[order][first], tied


def test_ties_are_broken_by_hand_with_and_without_sorting() -> None:
    """One pair per input row in input order takes _break_ties' path without sorting; several pairs for a row take
    the sorted one. By hand: rows 0 and 2 have one candidate each (row 2's distance NaN: never chosen), row 1 none.
    Then row 0 has join rows 2 and 1 at 5 and 5 + 5e-7 m (within the micrometre: tied, join row 1 wins, with its own
    distance), row 1 join row 0 at 7 m, and join row 3 at 5 + 2e-6 m is not tied."""
    import numpy as np
    import shapely

    from mapsmith_opensource.join_ops.nearest import _break_ties

    i = np.int64
    left, right, dist, tied = _break_ties(np.array([0, 2], i), np.array([1, 0], i), np.array([3.0, np.nan]), 3)
    assert (left.tolist(), right.tolist(), dist.tolist(), tied) == ([0], [1], [3.0], 0)
    left, right, dist, tied = _break_ties(
        np.array([0, 0, 1, 0], i), np.array([2, 1, 0, 3], i), np.array([5.0, 5.0 + 5e-7, 7.0, 5.0 + 2e-6]), 2
    )
    assert (left.tolist(), right.tolist(), dist.tolist(), tied) == ([0, 1], [1, 0], [5.0 + 5e-7, 7.0], 1)
    # query_nearest's own pairs, with ties (an integer grid) and without (random doubles): the sorted rule's answer
    rng = np.random.default_rng(11)
    tied_counts = []
    for coordinates in (rng.integers(0, 100, (3_000, 2)), rng.random((3_000, 2)) * 100):
        sites = shapely.points(coordinates[:40])
        points = shapely.points(coordinates[40:])
        (pl, pr), pd = shapely.STRtree(sites).query_nearest(points, return_distance=True, all_matches=True)
        got = _break_ties(pl, pr, pd, len(points))
        want = _ties_by_sorting(pl, pr, pd, len(points))
        for a, b in zip(got[:3], want[:3], strict=True):
            np.testing.assert_array_equal(a, b)
        assert got[3] == want[3]
        tied_counts.append(got[3])
    assert tied_counts[0] > 0 and tied_counts[1] == 0  # the grid had ties (sorted), the doubles none (unsorted)
