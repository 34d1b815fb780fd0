"""mapsmith_opensource.tables: each table format written, read back byte by byte or value by value,
and the refusals with their codes. Every expected value is written out by hand below."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from mapsmith.errors import InputError, OutputError
from mapsmith_opensource import tables

# Three wells, ids out of order, one depth missing: sorted ids 1, 2, 3; depths sum 30 + 7.5 = 37.5.
WELLS = pa.table(
    {
        "id": pa.array([3, 1, 2], pa.int64()),
        "name": ["Zürich", "Île", "Ağrı"],
        "depth_m": pa.array([None, 30.0, 7.5], pa.float64()),
    }
)


def test_csv_is_written_with_bare_numbers_and_empty_nulls(tmp_path: Path) -> None:
    path = tmp_path / "wells.csv"
    assert tables.write_table(WELLS, path) == []
    assert path.read_bytes() == '"id","name","depth_m"\n3,"Zürich",\n1,"Île",30\n2,"Ağrı",7.5\n'.encode()
    checks = {c.name: c for c in tables.verify_table(path, WELLS)}
    assert all(c.passed for c in checks.values()), checks
    assert checks["x-mapsmith:row_count"].detail == "expected 3 rows, read back 3"


def test_json_is_one_array_of_records_and_nan_becomes_null_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "wells.json"
    with_nan = WELLS.set_column(2, "depth_m", pa.array([float("nan"), 30.0, 7.5]))
    notes = tables.write_table(with_nan, path)
    assert notes == ["1 NaN or infinite value(s) were written as JSON null (JSON has no NaN)"]
    assert json.loads(path.read_text("utf-8")) == [
        {"id": 3, "name": "Zürich", "depth_m": None},
        {"id": 1, "name": "Île", "depth_m": 30.0},
        {"id": 2, "name": "Ağrı", "depth_m": 7.5},
    ]
    assert "Zürich" in path.read_text("utf-8")  # UTF-8 text, not \u escapes
    assert all(c.passed for c in tables.verify_table(path, with_nan))


def test_parquet_keeps_the_exact_schema(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "wells.parquet"
    tables.write_table(WELLS, path)
    back = pq.read_table(path)
    assert back.schema.types == [pa.int64(), pa.string(), pa.float64()]
    assert back.to_pylist() == WELLS.to_pylist()


def test_xlsx_is_one_sheet_named_as_asked(tmp_path: Path) -> None:
    path = tmp_path / "wells.xlsx"
    tables.write_table(WELLS, path, sheet_name="Wells 2026")
    with zipfile.ZipFile(path) as book:
        workbook = book.read("xl/workbook.xml").decode()
        assert workbook.count("<sheet ") == 1 and 'name="Wells 2026"' in workbook
    back = tables.read_table(path)
    assert back.column("id").to_pylist() == [3, 1, 2]
    assert back.column("name").to_pylist() == ["Zürich", "Île", "Ağrı"]
    assert back.column("depth_m").to_pylist() == [None, 30.0, 7.5]
    assert all(c.passed for c in tables.verify_table(path, WELLS, sheet_name="Wells 2026"))


@pytest.mark.parametrize("name", ["x" * 32, "a/b", "q?", "'quoted'"])
def test_a_sheet_name_excel_refuses_is_refused_before_writing(tmp_path: Path, name: str) -> None:
    path = tmp_path / "wells.xlsx"
    with pytest.raises(OutputError) as caught:
        tables.write_table(WELLS, path, sheet_name=name)
    assert caught.value.code == "TABLE_SHEET_NAME_INVALID"
    assert not path.exists()


def test_a_31_character_sheet_name_is_written(tmp_path: Path) -> None:
    # the clean twin: 31 characters is Excel's own limit
    path = tmp_path / "wells.xlsx"
    tables.write_table(WELLS, path, sheet_name="x" * 31)
    assert tables.read_table(path, sheet="x" * 31).num_rows == 3


def test_nested_columns_are_refused_for_text_formats_and_kept_in_parquet(tmp_path: Path) -> None:
    nested = pa.table({"id": [1], "tags": [["a", "b"]]})
    with pytest.raises(OutputError) as caught:
        tables.write_table(nested, tmp_path / "n.csv")
    assert caught.value.code == "TABLE_TYPE_UNSUPPORTED"
    tables.write_table(nested, tmp_path / "n.parquet")
    assert tables.read_table(tmp_path / "n.parquet").to_pylist() == [{"id": 1, "tags": ["a", "b"]}]


def test_a_cp1252_csv_is_refused_as_utf8_and_read_when_its_encoding_is_named(tmp_path: Path) -> None:
    path = tmp_path / "towns.csv"
    path.write_bytes("id,name\n1,Zürich\n2,Île\n".encode("cp1252"))
    with pytest.raises(InputError) as caught:
        tables.read_table(path)
    assert caught.value.code == "TABLE_ENCODING_INVALID"
    assert tables.read_table(path, encoding="cp1252").column("name").to_pylist() == ["Zürich", "Île"]


def test_a_json_that_is_not_records_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"id": 1}')
    with pytest.raises(InputError) as caught:
        tables.read_table(path)
    assert caught.value.code == "TABLE_JSON_NOT_RECORDS"
    path.write_text('[{"id": 1}, {"id": 2}]')
    assert tables.read_table(path).column("id").to_pylist() == [1, 2]


def test_a_changed_file_fails_verification(tmp_path: Path) -> None:
    path = tmp_path / "wells.csv"
    tables.write_table(WELLS, path)
    path.write_bytes(path.read_bytes().replace(b"\n2,", b"\nx,"))  # an id is no longer an integer
    checks = {c.name: c for c in tables.verify_table(path, WELLS)}
    assert not checks["x-mapsmith:table_readable"].passed


def test_write_table_atomic_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "wells.parquet"
    tables.write_table_atomic(WELLS, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wells.parquet"]
