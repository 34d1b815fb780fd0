"""Output checks asked where the data is, two ways, with the same results: a query in the engine that
wrote the file (DuckDB, SedonaDB: verify.facts.facts_sql) and a streaming pass in Arrow batches
(mapsmith_opensource.layer_facts.scan_facts). Each trap has its clean twin, and every expected value was worked out
by hand from the geometries below (EPSG:32610, metres):

    A = box(0, 0, 1, 1), B = box(2, 0, 3, 1), C = box(0, 2, 1, 3)        -> 3 valid polygons, extent 0..3 x 0..3
    bow-tie = (0,0) (2,2) (2,0) (0,2), self-intersecting at (1,1)        -> invalid (GEOS: Self-intersection)
    P = Point(5, 5)                                                     -> a point among polygons
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, Polygon, box

from layers import write_layer

UTM, OTHER = "EPSG:32610", "EPSG:32611"
A, B, C = box(0, 0, 1, 1), box(2, 0, 3, 1), box(0, 2, 1, 3)
BOW = Polygon([(0, 0), (2, 2), (2, 0), (0, 2)])
HAS_SEDONADB = importlib.util.find_spec("sedonadb") is not None


def streaming(path: Path) -> Any:
    from mapsmith_opensource.layer_facts import stream_facts

    return stream_facts(path)


def in_duckdb(path: Path) -> Any:
    from mapsmith.verify.facts import facts_from_row, facts_sql
    from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

    source = "read_parquet('" + str(path).replace("'", "''") + "')"
    with duckdb_database().cursor() as con:
        cur = con.execute(facts_sql(source, '"geometry"::GEOMETRY'))
        row = cur.fetchone()
        return facts_from_row(dict(zip([d[0] for d in cur.description], row, strict=True)))


def in_sedonadb(path: Path) -> Any:
    import uuid

    from mapsmith.verify.facts import facts_from_row, facts_sql
    from mapsmith_opensource.sedonadb_ops import _connection

    sd, name = _connection(), f"facts_{uuid.uuid4().hex}"
    sd.read_parquet(str(path)).to_view(name)
    try:
        return facts_from_row(sd.sql(facts_sql(name, '"geometry"')).to_arrow_table().to_pylist()[0])
    finally:
        sd.drop_view(name)


def in_duckdb_as_io_asks(path: Path) -> Any:
    """layer_facts.scan_facts' own query: DuckDB's faster validity (duckdb_spatial.valid_sql)."""
    from mapsmith_opensource.layer_facts import _duckdb_facts

    return _duckdb_facts(path)


WAYS = {
    "streaming": streaming,
    "duckdb": in_duckdb,
    "duckdb as io asks": in_duckdb_as_io_asks,
    **({"sedonadb": in_sedonadb} if HAS_SEDONADB else {}),
}


def checks_for(path: Path, facts: Any, *, input_count: int, expected_crs: str) -> list[dict[str, Any]]:
    """verify.output_checks on the header of ``path`` with ``facts`` in place of any geometry scan."""
    from pyproj import CRS

    from mapsmith import verify
    from mapsmith.app import MapSmith
    from mapsmith.crs import crs_label
    from mapsmith_opensource import io

    contract = MapSmith({"MAPSMITH_WORKSPACE": str(path.parent)}).router.contract("buffer_layer")
    info = facts.apply(io.inspect(path))  # the header: CRS and fields; no validity scan asked
    expected = CRS.from_user_input(expected_crs)
    checks = verify.output_checks(
        contract,
        info,
        expected_crs_label=crs_label(expected),
        crs_equal=CRS.from_wkt(info.crs_wkt).equals(expected),
        input_count=input_count,
        input_families=frozenset({"polygon"}),
    )
    return [c.to_dict() for c in checks]


def _by_name(checks: list[dict[str, Any]]) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in checks}


CASES = {
    # name: (geometries, crs, input count, expected facts (rows, missing, invalid, types, bounds), failing checks)
    "clean": ([A, B, C], UTM, 3, (3, 0, 0, ("Polygon",), (0.0, 0.0, 3.0, 3.0)), set()),
    "invalid_polygon": ([A, BOW, C], UTM, 3, (3, 0, 1, ("Polygon",), (0.0, 0.0, 2.0, 3.0)), {"geometry_valid"}),
    "wrong_count": ([A, B], UTM, 3, (2, 0, 0, ("Polygon",), (0.0, 0.0, 3.0, 1.0)), {"feature_count_exact"}),
    "wrong_crs": ([A, B, C], OTHER, 3, (3, 0, 0, ("Polygon",), (0.0, 0.0, 3.0, 3.0)), {"crs_matches"}),
    "a_point_among_polygons": (
        [A, Point(5, 5), C],
        UTM,
        3,
        (3, 0, 0, ("Point", "Polygon"), (0.0, 0.0, 5.0, 5.0)),
        {"geometry_types"},
    ),
    # a point whose y is NaN: invalid (GEOS: Invalid Coordinate); its NaN is left out of the extent
    "nan_point": (
        [A, Point(5, math.nan), C],
        UTM,
        3,
        (3, 0, 1, ("Point", "Polygon"), (0.0, 0.0, 5.0, 3.0)),
        {"geometry_valid", "geometry_types"},
    ),
    "missing_geometry": ([A, None, Polygon()], UTM, 3, (3, 2, 0, ("Polygon",), (0.0, 0.0, 1.0, 1.0)), set()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_way_gives_the_hand_facts_and_the_same_checks(tmp_path: Path, case: str) -> None:
    geometries, crs, input_count, want, failing = CASES[case]
    path = write_layer(tmp_path / f"{case}.parquet", geometries, crs, fid=list(range(len(geometries))))
    results = {}
    for way, ask in WAYS.items():
        facts = ask(path)
        assert (facts.rows, facts.missing, facts.invalid, facts.geometry_types, facts.bounds) == want, way
        results[way] = checks_for(path, facts, input_count=input_count, expected_crs=UTM)
    first = results["streaming"]
    for way, checks in results.items():
        assert checks == first, f"{way} disagrees with the streaming pass"
    assert {name for name, passed in _by_name(first).items() if not passed} == failing


def test_the_hand_details_of_the_invalid_trap(tmp_path: Path) -> None:
    path = write_layer(tmp_path / "bow.parquet", [A, BOW, C], UTM, fid=[0, 1, 2])
    (valid,) = [
        c for c in checks_for(path, streaming(path), input_count=3, expected_crs=UTM) if c["name"] == "geometry_valid"
    ]
    assert valid == {
        "name": "geometry_valid",
        "passed": False,
        "detail": "1 of 3 output geometries are invalid",
        "critical": True,
    }


def test_streaming_also_reads_ogr_formats_in_batches(tmp_path: Path) -> None:
    """The same facts from a GeoPackage (pyogrio's Arrow stream) as from GeoParquet."""
    gpkg = write_layer(tmp_path / "bow.gpkg", [A, BOW, None], UTM, fid_=[0, 1, 2])
    facts = streaming(gpkg)
    assert (facts.rows, facts.missing, facts.invalid, facts.geometry_types, facts.bounds) == (
        3,
        1,
        1,
        ("Polygon",),
        (0.0, 0.0, 2.0, 2.0),
    )


@pytest.mark.parametrize("suffix", [".parquet", ".gpkg"])
def test_inspect_with_validity_never_loads_a_geodataframe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """The validity scan of io.inspect streams: read_layer (the whole layer as a GeoDataFrame) is never
    called for GeoParquet or GeoPackage, and it still finds the bow-tie (its clean twin: 0 invalid)."""
    from mapsmith_opensource import io

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read_layer was called: the check loaded the whole layer")

    trap = write_layer(tmp_path / f"trap{suffix}", [A, BOW, C], UTM, fid_=[0, 1, 2])
    twin = write_layer(tmp_path / f"twin{suffix}", [A, B, C], UTM, fid_=[0, 1, 2])
    monkeypatch.setattr(io, "read_layer", refuse)
    found = io.inspect(trap, validity=True)
    assert (found.feature_count, found.invalid_count, found.geometry_types) == (3, 1, ("Polygon",))
    assert found.bounds == (0.0, 0.0, 2.0, 3.0)  # the bow-tie reaches x = 2; C reaches y = 3
    clean = io.inspect(twin, validity=True)
    assert (clean.feature_count, clean.invalid_count, clean.bounds) == (3, 0, (0.0, 0.0, 3.0, 3.0))


@pytest.mark.parametrize("suffix", [".parquet", ".gpkg"])
def test_a_header_read_without_validity_scans_types_and_extent_but_not_validity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """A file with no bbox in its header is scanned for its extent and types only: the bow-tie's extent
    (0..2 x 0..3 with C) and types are found, validity is neither counted nor reported, and nothing asks
    GEOS whether a geometry is valid. The same file with validity asked finds the one invalid (the twin)."""
    import shapely

    from mapsmith_opensource import duckdb_spatial, layer_facts

    path = write_layer(tmp_path / f"bow{suffix}", [A, BOW, C], UTM, fid_=[0, 1, 2])
    sql: list[bool] = []
    real_sql = duckdb_spatial.facts_sql
    monkeypatch.setattr(duckdb_spatial, "facts_sql", lambda s, g, v=True: sql.append(v) or real_sql(s, g, v))
    for way in ("duckdb", "streaming"):
        if way == "streaming":
            monkeypatch.setattr(layer_facts, "_duckdb_facts", lambda *a, **k: None)
            monkeypatch.setattr(shapely, "is_valid", lambda *a, **k: (_ for _ in ()).throw(AssertionError("asked")))
        found = layer_facts.scan_facts(path, validity=False)
        assert (found.rows, found.invalid, found.geometry_types, found.bounds) == (
            3,
            0,
            ("Polygon",),
            (0.0, 0.0, 2.0, 3.0),
        ), way
    if suffix == ".parquet":
        assert sql == [False]  # the DuckDB way was asked without ST_IsValid
    monkeypatch.undo()
    assert layer_facts.scan_facts(path).invalid == 1


def test_duckdb_valid_sql_answers_as_geos_row_by_row() -> None:
    """duckdb_spatial.valid_sql answers points from their coordinates and everything else with ST_IsValid: row by
    row it is GEOS's answer (shapely.is_valid), worked by hand: finite points valid (a NaN z is not looked at), a
    NaN or infinite x or y invalid, an empty point valid, a multipoint with a NaN member invalid, the bow-tie and
    the zero-length line invalid, the triangle valid; a null geometry's validity is null, as ST_IsValid's."""
    import math

    import pyarrow as pa
    import shapely
    from shapely.geometry import LineString, MultiPoint, Point, Polygon

    from mapsmith_opensource.duckdb_spatial import valid_sql
    from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

    cases = [
        (Point(1, 2), True),
        (Point(1, 2, math.nan), True),
        (Point(math.nan, 2), False),
        (Point(3, math.inf), False),
        (Point(-math.inf, 0), False),
        (Point(), True),
        (MultiPoint([(0, 0), (math.nan, 1)]), False),
        (Polygon([(0, 0), (1, 1), (1, 0), (0, 1)]), False),
        (LineString([(0, 0), (0, 0)]), False),
        (Polygon([(0, 0), (1, 0), (1, 1)]), True),
        (None, None),
    ]
    assert [shapely.is_valid(g) if g is not None else None for g, _ in cases] == [v for _, v in cases]
    wkb = pa.array([None if g is None else shapely.to_wkb(g) for g, _ in cases], pa.binary())
    with duckdb_database().cursor() as con:
        con.register("shapes", pa.table({"i": list(range(len(cases))), "w": wkb}))
        rows = con.execute(f"SELECT {valid_sql('g')} FROM (SELECT i, ST_GeomFromWKB(w) AS g FROM shapes) ORDER BY i")
        assert [r[0] for r in rows.fetchall()] == [v for _, v in cases]
