"""join_attributes with a CSV table: numeric columns are read as numbers (GDAL's type detection), so the
lossless key normalisation can match a spreadsheet's 310101.0 to a layer's text "310101"; a column that a
number would change (leading zeros, digits beyond 64-bit integers) stays text, and the manifest says which.

Layers are small squares in EPSG:32610; every expected match is read off the rows written in each test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import box

from layers import manifest, read, write_layer

UTM = "EPSG:32610"


def squares(n: int) -> list:  # type: ignore[type-arg]
    return [box(500_000 + 10 * i, 5_000_000, 500_010 + 10 * i, 5_000_010) for i in range(n)]


def join(app, table: str):  # type: ignore[no-untyped-def]
    return app.run(
        "join_attributes",
        {
            "input_path": "districts.gpkg",
            "table_path": table,
            "input_key": "code",
            "table_key": "code",
            "output_path": "j.gpkg",
        },
    )


def test_spreadsheet_decimals_in_a_csv_match_text_codes(app, workspace: Path) -> None:
    # The trap: a spreadsheet saved the codes as 310101.0 and 310102.0. Read as text they would be
    # "310101.0", which never equals "310101". Read as numbers they are whole and exact, and the layer's
    # texts are plain digits, so the normalisation applies: both districts match their row.
    write_layer(workspace / "districts.gpkg", squares(2), UTM, code=["310101", "310102"])
    (workspace / "census.csv").write_text("code,pop,share\n310101.0,100,0.25\n310102.0,300,0.75\n")
    result = join(app, "census.csv")
    assert result.answer["input_features_matched"] == 2
    assert result.answer["input_features_unmatched"] == 0 and result.answer["table_rows_unmatched"] == 0
    norm = result.answer["key_normalisation"]
    assert norm["applied"] is True and norm["converted"] == "table_path" and norm["table_key_type"] == "decimal"
    out = read(workspace / "j.gpkg").set_index("code")
    assert out.loc["310101", "pop"] == 100 and out.loc["310102", "pop"] == 300  # numbers, not "100"
    assert out.loc["310102", "share"] == pytest.approx(0.75)
    assert out.index.tolist() == ["310101", "310102"]  # input_key written as it was: text
    types = manifest(workspace / "j.gpkg")["parameters"]["x-mapsmith:key_normalisation"]["csv_column_types"]
    assert types == {"read_as_numbers": {"code": "decimal", "pop": "integer", "share": "decimal"}, "kept_as_text": {}}
    assert "UNMATCHED_KEYS" not in [w["code"] for w in result.warnings]


def test_zero_padded_codes_in_a_csv_stay_text_and_match(app, workspace: Path) -> None:
    # The clean twin: "007" and "008" are codes, not numbers; read as 7 and 8 they would lose their zeros
    # and match nothing. They stay text (the column is not among those read as numbers) and match.
    write_layer(workspace / "districts.gpkg", squares(2), UTM, code=["007", "008"])
    (workspace / "codes.csv").write_text("code,label\n007,seven\n008,eight\n")
    result = join(app, "codes.csv")
    assert result.answer["input_features_matched"] == 2
    norm = result.answer["key_normalisation"]
    assert norm["applied"] is False and norm["input_key_type"] == norm["table_key_type"] == "text"
    out = read(workspace / "j.gpkg").set_index("code")
    assert out["label"].to_dict() == {"007": "seven", "008": "eight"}
    types = manifest(workspace / "j.gpkg")["parameters"]["x-mapsmith:key_normalisation"]["csv_column_types"]
    assert "code" not in types["read_as_numbers"]


def test_codes_beyond_64_bit_integers_stay_text(app, workspace: Path) -> None:
    # GDAL's detection reads 12345678901234567890 as the largest 64-bit integer, 9223372036854775807,
    # without a warning; checked cell by cell against the text, the column is kept as text (with why),
    # and the two long codes still match the layer's texts exactly.
    codes = ["12345678901234567890", "12345678901234567891"]
    write_layer(workspace / "districts.gpkg", squares(2), UTM, code=codes)
    (workspace / "long.csv").write_text(f"code,n\n{codes[0]},1\n{codes[1]},2\n")
    result = join(app, "long.csv")
    assert result.answer["input_features_matched"] == 2
    types = manifest(workspace / "j.gpkg")["parameters"]["x-mapsmith:key_normalisation"]["csv_column_types"]
    assert types["read_as_numbers"] == {"n": "integer"}
    assert types["kept_as_text"]["code"] == "'12345678901234567890' was read as 9223372036854775807"
    assert read(workspace / "j.gpkg").set_index("code")["n"].to_dict() == {codes[0]: 1, codes[1]: 2}


def test_a_leading_zero_is_a_reason_to_keep_text_whatever_the_detection_says() -> None:
    # GDAL keeps "007" as text today; the check does not rely on it.
    from mapsmith_opensource.tables import number_loses

    assert number_loses(["007", "8"], [7, 8], integers=True) == "'007' has a leading zero, which a number would drop"
    assert number_loses(["0.5", "", "1e3"], [0.5, float("nan"), 1000.0], integers=False) is None


def test_the_table_reader_keeps_as_text_what_a_number_would_change(workspace: Path) -> None:
    # tables.read_table (convert_format, table_to_points, run_sql's tables) types a CSV with pyarrow, which
    # reads "007" as 7 and 12345678901234567890 as the double 12345678901234567168. Those columns come back
    # as the text they are; 310101.0 and 100 stay numbers, and an empty cell stays null.
    import pyarrow as pa

    from mapsmith_opensource.tables import read_table

    path = workspace / "mixed.csv"
    path.write_text("zero,big,code,n\n007,12345678901234567890,310101.0,100\n008,12345678901234567891,,200\n")
    table = read_table(path)
    assert table.column("zero").to_pylist() == ["007", "008"]
    assert table.column("big").to_pylist() == ["12345678901234567890", "12345678901234567891"]
    assert table.column("code").type == pa.float64() and table.column("code").to_pylist() == [310101.0, None]
    assert pa.types.is_integer(table.column("n").type) and table.column("n").to_pylist() == [100, 200]
