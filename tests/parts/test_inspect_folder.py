"""inspect_folder describes a folder of GeoParquet parts from their footers; the expected values are worked
out by hand from the rows written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shapely.geometry import Point, Polygon

from mapsmith import parts
from mapsmith.errors import InputError


def _write(path: Path, geoms: list, crs: str = "EPSG:32633", **columns: list) -> Path:
    import geopandas as gpd

    path.parent.mkdir(parents=True, exist_ok=True)
    gpd.GeoDataFrame(dict(columns), geometry=geoms, crs=crs).to_parquet(path)
    return path


def _hive(root: Path) -> Path:
    # k=a: 2 points, k=b: 3, k=c: 4 -> 9 rows; x from 10 to 90, y from 5 to 400.
    _write(root / "k=a" / "part-0.parquet", [Point(10, 5), Point(20, 6)], id=[1, 2])
    _write(root / "k=b" / "part-0.parquet", [Point(30, 100), Point(40, 200), Point(50, 300)], id=[3, 4, 5])
    _write(
        root / "k=c" / "part-0.parquet",
        [Point(60, 50), Point(70, 60), Point(80, 70), Point(90, 400)],
        id=[6, 7, 8, 9],
    )
    (root / "_SUCCESS").write_bytes(b"")
    return root


def test_a_hive_folder_is_one_dataset_with_the_summed_row_count(tmp_path: Path) -> None:
    folder = _hive(tmp_path / "points.parquet")
    info = parts.inspect_folder(folder)
    assert info.kind == "vector"
    assert info.feature_count == 2 + 3 + 4
    assert info.crs_label == "EPSG:32633"
    assert info.crs_is_geographic is False
    assert info.bounds == (10.0, 5.0, 90.0, 400.0)  # the union of the three parts' bbox
    assert info.geometry_types == ("Point",)
    assert info.fields == ("id", "k")  # the partition key is a column of every row
    assert info.layers == ("points",)
    assert info.invalid_count is None  # not asked for: no geometry was read


def test_the_footers_are_read_and_the_rows_are_not(tmp_path: Path, monkeypatch) -> None:
    import pyarrow.parquet as pq

    folder = _hive(tmp_path / "points.parquet")

    def no_rows(*args, **kwargs):  # pragma: no cover - called only if inspect_folder loads rows
        raise AssertionError("inspect_folder read rows")

    monkeypatch.setattr(pq, "read_table", no_rows)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", no_rows)
    assert parts.inspect_folder(folder).feature_count == 9


def test_validity_streams_the_geometries_and_counts_the_invalid_one(tmp_path: Path) -> None:
    folder = tmp_path / "polys.parquet"
    square = Polygon([(0, 0), (10, 0), (10, 10), (0, 10)])
    bowtie = Polygon([(0, 0), (10, 10), (10, 0), (0, 10)])  # self-intersecting: invalid
    _write(folder / "part-0.parquet", [square, square], id=[1, 2])
    _write(folder / "part-1.parquet", [bowtie], id=[3])
    info = parts.inspect_folder(folder, validity=True)
    assert info.invalid_count == 1
    assert info.feature_count == 3
    # The clean twin: without the bowtie nothing is invalid.
    (folder / "part-1.parquet").unlink()
    assert parts.inspect_folder(folder, validity=True).invalid_count == 0


def test_a_part_without_bbox_is_scanned_for_its_bounds(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    folder = tmp_path / "p.parquet"
    _write(folder / "part-0.parquet", [Point(1, 2)], id=[1])
    source = _write(tmp_path / "src.parquet", [Point(-5, 7), Point(3, 40)], id=[2, 3])
    table = pq.read_table(source)
    geo = json.loads(table.schema.metadata[b"geo"])
    del geo["columns"]["geometry"]["bbox"]
    table = table.replace_schema_metadata({**table.schema.metadata, b"geo": json.dumps(geo).encode()})
    pq.write_table(table, folder / "part-1.parquet")
    assert parts.inspect_folder(folder).bounds == (-5.0, 2.0, 3.0, 40.0)


def test_a_covering_bbox_column_gives_the_bounds_from_its_footer_statistics(tmp_path: Path, monkeypatch) -> None:
    import geopandas as gpd
    import pyarrow.parquet as pq

    folder = tmp_path / "p.parquet"
    folder.mkdir()
    for n, points in enumerate([[Point(-5, 7), Point(3, 40)], [Point(10, -2)]]):
        source = tmp_path / f"src{n}.parquet"
        gpd.GeoDataFrame({"id": list(range(len(points)))}, geometry=points, crs="EPSG:32633").to_parquet(
            source, write_covering_bbox=True
        )
        table = pq.read_table(source)
        geo = json.loads(table.schema.metadata[b"geo"])
        del geo["columns"]["geometry"]["bbox"]  # only the covering column is left to bound the part
        table = table.replace_schema_metadata({**table.schema.metadata, b"geo": json.dumps(geo).encode()})
        pq.write_table(table, folder / f"part-{n}.parquet")

    def no_rows(*args, **kwargs):  # pragma: no cover - called only if the geometries are scanned
        raise AssertionError("scanned the geometries")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", no_rows)
    # x from -5 to 10, y from -2 to 40.
    assert parts.inspect_folder(folder).bounds == (-5.0, -2.0, 10.0, 40.0)


def test_parts_in_two_crs_are_refused_and_one_crs_is_described(tmp_path: Path) -> None:
    folder = tmp_path / "p.parquet"
    _write(folder / "part-0.parquet", [Point(1, 2)], id=[1])
    _write(folder / "part-1.parquet", [Point(1, 2)], crs="EPSG:32634", id=[2])
    with pytest.raises(InputError) as caught:
        parts.inspect_folder(folder)
    assert caught.value.code == "PARTS_CRS_MIXED"
    assert "reproject_layer" in (caught.value.hint or "")
    _write(folder / "part-1.parquet", [Point(1, 2)], id=[2])  # the clean twin
    assert parts.inspect_folder(folder).crs_label == "EPSG:32633"


def test_parts_with_different_columns_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "p.parquet"
    _write(folder / "part-0.parquet", [Point(1, 2)], id=[1])
    _write(folder / "part-1.parquet", [Point(1, 2)], name=["x"])
    with pytest.raises(InputError) as caught:
        parts.inspect_folder(folder)
    assert caught.value.code == "PARTS_SCHEMA_MIXED"


def test_a_folder_of_plain_parquet_parts_is_a_table(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "t.parquet"
    folder.mkdir()
    pq.write_table(pa.table({"a": [1, 2, 3]}), folder / "part-0.parquet")
    pq.write_table(pa.table({"a": [4]}), folder / "part-1.parquet")
    info = parts.inspect_folder(folder)
    assert (info.kind, info.feature_count, info.fields, info.crs_label) == ("table", 4, ("a",), None)


def test_a_part_that_is_not_parquet_is_refused_before_an_engine_opens_it(tmp_path: Path) -> None:
    folder = tmp_path / "p.parquet"
    _write(folder / "part-0.parquet", [Point(1, 2)], id=[1])
    assert parts.require_parquet_parts(folder) == [folder / "part-0.parquet"]
    (folder / "part-1.parquet").write_bytes(b"<VRTDataset>")
    with pytest.raises(InputError) as caught:
        parts.require_parquet_parts(folder)
    assert caught.value.code == "PARTS_NOT_PARQUET"


def test_duckdb_reads_exactly_the_members(tmp_path: Path) -> None:
    from mapsmith_opensource import duckdb_spatial

    folder = _hive(tmp_path / "points.parquet")
    (folder / "_metadata").write_bytes(b"not parquet at all")  # a summary no reader is given
    con = duckdb_spatial.connect()
    rows = con.sql(f"SELECT k, count(*) FROM {parts.duckdb_source(folder)} GROUP BY k ORDER BY k").fetchall()
    assert rows == [("a", 2), ("b", 3), ("c", 4)]
    # DuckDB reading the folder itself sees the same rows.
    assert con.sql(f"SELECT count(*) FROM read_parquet('{folder}')").fetchone() == (9,)


def test_the_opensource_reader_scans_the_parts_in_duckdb_with_the_streams_facts(tmp_path: Path) -> None:
    """io.inspect hands inspect_folder a DuckDB scan (verify.facts' query over the parts); it must give the shapely
    stream's facts: part-0 a square and a bow-tie (invalid), part-1 a point, a NaN point (invalid, left out of the
    extent), an empty point and a null, the parts declaring no types (so both are scanned). By hand: types
    Point and Polygon, 2 invalid, 2 missing, bounds (0, 0, 30, 40)."""
    import math

    import pyarrow.parquet as pq

    from mapsmith_opensource import io

    folder = tmp_path / "mixed.parquet"
    square = Polygon([(0, 0), (10, 0), (10, 10), (0, 10)])
    bowtie = Polygon([(0, 0), (10, 10), (10, 0), (0, 10)])
    _write(folder / "part-0.parquet", [square, bowtie], id=[1, 2])
    _write(folder / "part-1.parquet", [Point(30, 40), Point(5, math.nan), Point(), None], id=[3, 4, 5, 6])
    for part in folder.iterdir():  # declare no geometry types: the footers cannot say, a scan must
        table = pq.read_table(part)
        geo = json.loads(table.schema.metadata[b"geo"])
        geo["columns"]["geometry"]["geometry_types"] = []
        pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"geo": json.dumps(geo).encode()}), part)
    scanned = io.duckdb_parts_scan(parts.part_files(folder), "geometry", True)
    assert scanned == {"types": {"Point", "Polygon"}, "invalid": 2, "bounds": (0.0, 0.0, 30.0, 40.0)}
    engine, stream = io.inspect(folder, validity=True), parts.inspect_folder(folder, validity=True)
    assert engine == stream
    assert engine.invalid_count == 2 and set(engine.geometry_types) == {"Point", "Polygon"}
