"""overlay_layers, dissolve_layer, merge_layers and explode_layer against values worked out by hand.

Squares are drawn on a 100 m grid in EPSG:32610 (``sq(0, 0, 2, 2)`` is 200 m x 200 m), so one grid
cell is 10,000 m2 and every expected area and count below is read off a sketch before the code ran.
The workspace fixture validates every manifest a test leaves behind against the published schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shapely.geometry import LineString, MultiLineString, MultiPoint, MultiPolygon, Point, Polygon, box

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError, InputError, VerificationFailed

CELL = 100.0  # metres per grid unit
CELL_M2 = CELL * CELL  # 10,000 m2
X0, Y0 = 500_000.0, 5_000_000.0
UTM = "EPSG:32610"


def sq(x0: float, y0: float, x1: float, y1: float) -> Polygon:
    return box(X0 + x0 * CELL, Y0 + y0 * CELL, X0 + x1 * CELL, Y0 + y1 * CELL)


def cells(gdf) -> list[float]:
    """Each feature's area in grid cells, sorted, rounded off float noise."""
    return sorted(round(a / CELL_M2, 6) for a in gdf.geometry.area)


def check(record_or_result, name: str) -> dict:
    checks = record_or_result["verification"] if isinstance(record_or_result, dict) else record_or_result.checks
    (found,) = [c for c in checks if c["name"] == name]
    return found


def text(value: object) -> str | None:
    """A string field's value, or None for null (read back as NaN)."""
    return value if isinstance(value, str) else None


def field_types(path: Path) -> dict[str, str]:
    import pyogrio

    info = pyogrio.read_info(path)
    return dict(zip(info["fields"], info["dtypes"], strict=True))


# -- overlay_layers -----------------------------------------------------------------------------

# A = [0,2]x[0,2] (4 cells), B = [1,3]x[1,3] (4 cells), overlapping in [1,2]x[1,2] (1 cell).
# intersection: the overlap only -> 1 feature, 1 cell.
# union: overlap (1) + A only (4 - 1 = 3) + B only (3) -> 3 features, 7 cells.
# difference: A only -> 1 feature, 3 cells.
# symmetric_difference: A only + B only -> 2 features, 6 cells.
# identity: A cut by B: overlap (1) + A only (3) -> 2 features, 4 cells (all of A).
OVERLAY_CASES = [
    ("intersection", [1.0]),
    ("union", [1.0, 3.0, 3.0]),
    ("difference", [3.0]),
    ("symmetric_difference", [3.0, 3.0]),
    ("identity", [1.0, 3.0]),
]


@pytest.fixture
def two_squares(workspace: Path) -> None:
    write_layer(workspace / "a.gpkg", [sq(0, 0, 2, 2)], UTM, name=["A"], id=[1])
    write_layer(workspace / "b.gpkg", [sq(1, 1, 3, 3)], UTM, name=["B"], value=[2.5])


@pytest.mark.parametrize(("how", "expected_cells"), OVERLAY_CASES)
def test_overlay_of_two_overlapping_squares_by_each_rule(app, workspace, two_squares, how, expected_cells) -> None:
    result = app.run(
        "overlay_layers", {"input_path": "a.gpkg", "overlay_path": "b.gpkg", "how": how, "output_path": "o.gpkg"}
    )
    out = read(workspace / "o.gpkg")
    assert cells(out) == expected_cells
    assert result.answer["feature_count"] == len(expected_cells)
    assert result.answer["lower_dimension_fragments_dropped"] == 0
    record = manifest(workspace / "o.gpkg")
    assert record["parameters"]["how"] == how
    assert record["parameters"]["x-mapsmith:lower_dimension_fragments_dropped"] == 0
    if how == "difference":
        # input_path's fields only: nothing to rename
        assert sorted(c for c in out.columns if c != "geometry") == ["id", "name"]
        assert record["parameters"]["x-mapsmith:renamed_fields"] == {}
        return
    # both layers have 'name': GeoPandas suffixes it, and the record lists the renaming
    assert record["parameters"]["x-mapsmith:renamed_fields"] == {"name": ["name_1", "name_2"]}
    assert any("name -> name_1 (input_path), name_2 (overlay_path)" in n for n in result.notes)
    assert set(out.columns) == {"name_1", "id", "name_2", "value", "geometry"}
    by_origin = {(text(r.name_1), text(r.name_2)): round(r.geometry.area / CELL_M2, 6) for r in out.itertuples()}
    expected_origin = {
        "intersection": {("A", "B"): 1.0},
        "union": {("A", "B"): 1.0, ("A", None): 3.0, (None, "B"): 3.0},
        "symmetric_difference": {("A", None): 3.0, (None, "B"): 3.0},
        "identity": {("A", "B"): 1.0, ("A", None): 3.0},
    }[how]
    assert by_origin == expected_origin
    # 'id' is an integer field of A; pieces outside A have no id, and the field stays integer
    assert field_types(workspace / "o.gpkg")["id"] == "int64"


def test_overlay_of_squares_sharing_an_edge_counts_the_line_it_drops(app, workspace) -> None:
    # A = [0,1]x[0,1], B = [1,2]x[0,1]: they meet along x = 1, so A n B is the line (1,0)-(1,1).
    # intersection: no polygon -> 0 features, 1 fragment, 1 piece without area.
    # union: the line dropped again (1 fragment), A only and B only kept -> 2 features of 1 cell each.
    write_layer(workspace / "a.gpkg", [sq(0, 0, 1, 1)], UTM, name=["A"])
    write_layer(workspace / "b.gpkg", [sq(1, 0, 2, 1)], UTM, name=["B"])
    inter = app.run(
        "overlay_layers",
        {"input_path": "a.gpkg", "overlay_path": "b.gpkg", "how": "intersection", "output_path": "i.gpkg"},
    )
    assert len(read(workspace / "i.gpkg")) == 0
    assert inter.answer["lower_dimension_fragments_dropped"] == 1
    assert inter.answer["pieces_without_area_dropped"] == 1
    record = manifest(workspace / "i.gpkg")
    assert record["parameters"]["x-mapsmith:lower_dimension_fragments_dropped"] == 1
    assert any("1 lower-dimension fragments" in n and "1 had no area" in n for n in record["notes"])
    empty = check(record, "result_not_empty")
    assert empty["passed"] is False and empty["critical"] is False
    union = app.run(
        "overlay_layers", {"input_path": "a.gpkg", "overlay_path": "b.gpkg", "how": "union", "output_path": "u.gpkg"}
    )
    assert cells(read(workspace / "u.gpkg")) == [1.0, 1.0]
    assert union.answer["lower_dimension_fragments_dropped"] == 1


def test_overlay_of_squares_touching_at_a_corner_counts_the_point(app, workspace) -> None:
    # A = [0,1]x[0,1], C = [1,2]x[1,2] meet only at (1,1): the intersection is one point.
    write_layer(workspace / "a.gpkg", [sq(0, 0, 1, 1)], UTM, name=["A"])
    write_layer(workspace / "c.gpkg", [sq(1, 1, 2, 2)], UTM, name=["C"])
    result = app.run(
        "overlay_layers",
        {"input_path": "a.gpkg", "overlay_path": "c.gpkg", "how": "intersection", "output_path": "i.gpkg"},
    )
    assert len(read(workspace / "i.gpkg")) == 0
    assert result.answer["lower_dimension_fragments_dropped"] == 1


def test_overlay_keeps_the_area_of_a_mixed_piece_and_counts_its_line(app, workspace) -> None:
    # A = [0,3]x[0,1]. B is one feature of two parts: [0,1]x[0,1] (inside A) and [2,3]x[1,2] (touching
    # A's top edge along y = 1, x 2..3). A n B = a 1-cell square plus a 1-cell-long line: one feature
    # of 1 cell written, 1 fragment dropped, no piece dropped whole.
    write_layer(workspace / "a.gpkg", [sq(0, 0, 3, 1)], UTM, name=["A"])
    write_layer(workspace / "b.gpkg", [MultiPolygon([sq(0, 0, 1, 1), sq(2, 1, 3, 2)])], UTM, kind=["B"])
    result = app.run(
        "overlay_layers",
        {"input_path": "a.gpkg", "overlay_path": "b.gpkg", "how": "intersection", "output_path": "i.gpkg"},
    )
    out = read(workspace / "i.gpkg")
    assert cells(out) == [1.0]
    assert out.geometry.iloc[0].geom_type == "Polygon"
    assert result.answer["lower_dimension_fragments_dropped"] == 1
    assert result.answer["pieces_without_area_dropped"] == 0
    assert result.answer["renamed_fields"] == {}  # no shared field names


def test_overlay_transforms_an_overlay_in_another_crs_and_records_it(app, workspace) -> None:
    # B is the square [1,3]x[1,3] expressed in lon/lat; transformed back it is the same square within
    # millimetres, so the intersection with A = [0,2]x[0,2] is still 1 cell = 10,000 m2.
    from pyproj import Transformer

    to_ll = Transformer.from_crs(32610, 4326, always_xy=True)
    b = sq(1, 1, 3, 3)
    write_layer(workspace / "a.gpkg", [sq(0, 0, 2, 2)], UTM, name=["A"])
    write_layer(workspace / "b.gpkg", [Polygon([to_ll.transform(x, y) for x, y in b.exterior.coords])], "EPSG:4326")
    result = app.run(
        "overlay_layers",
        {"input_path": "a.gpkg", "overlay_path": "b.gpkg", "how": "intersection", "output_path": "i.gpkg"},
    )
    out = read(workspace / "i.gpkg")
    assert out.crs.to_epsg() == 32610
    assert out.geometry.area.iloc[0] == pytest.approx(CELL_M2, rel=1e-6)
    aligned = result.crs_decisions["x-mapsmith:alignment"]["overlay_path"]
    assert (aligned["source_crs"], aligned["target_crs"]) == ("EPSG:4326", "EPSG:32610")
    assert "overlay_path was transformed" in result.crs_decisions["reason"]


def test_overlay_refuses_an_invalid_input_rather_than_repair_it_silently(app, workspace) -> None:
    # A bow-tie (0,0)-(2,2)-(2,0)-(0,2) crosses itself at (1,1): its area is undefined (GeoPandas
    # would repair it unasked). Refused, pointing at repair_geometries; nothing is written.
    def g(x: float, y: float) -> tuple[float, float]:
        return (X0 + x * CELL, Y0 + y * CELL)

    bowtie = Polygon([g(0, 0), g(2, 2), g(2, 0), g(0, 2), g(0, 0)])
    write_layer(workspace / "a.gpkg", [sq(4, 4, 5, 5)], UTM, name=["A"])
    write_layer(workspace / "b.gpkg", [sq(0, 0, 2, 2), bowtie], UTM, kind=["ok", "bowtie"])
    with pytest.raises(InputError) as err:
        app.run(
            "overlay_layers",
            {"input_path": "a.gpkg", "overlay_path": "b.gpkg", "how": "union", "output_path": "u.gpkg"},
        )
    assert err.value.code == "INPUT_GEOMETRY_INVALID"
    assert (err.value.evidence["argument"], err.value.evidence["first_rows"]) == ("overlay_path", [1])
    assert "Self-intersection" in err.value.evidence["reasons"][0]
    assert "repair_geometries" in err.value.hint
    assert not (workspace / "u.gpkg").exists()


def test_overlay_refuses_a_suffixed_name_that_is_already_taken(app, workspace, two_squares) -> None:
    write_layer(workspace / "a2.gpkg", [sq(0, 0, 2, 2)], UTM, name=["A"], name_1=["taken"])
    with pytest.raises(InputError) as err:
        app.run(
            "overlay_layers",
            {"input_path": "a2.gpkg", "overlay_path": "b.gpkg", "how": "union", "output_path": "u.gpkg"},
        )
    assert err.value.code == "FIELD_NAME_CLASH"
    assert err.value.evidence["taken"] == ["name_1"]
    assert not (workspace / "u.gpkg").exists()
    failed = json.loads((workspace / "u.gpkg.failed.provenance.json").read_text("utf-8"))
    assert failed["x-mapsmith:error"]["code"] == "FIELD_NAME_CLASH"
    # 'Value' and 'value' are different names to GeoPandas and one field to GeoPackage
    write_layer(workspace / "a3.gpkg", [sq(0, 0, 2, 2)], UTM, Value=[1.0])
    with pytest.raises(InputError) as case:
        app.run(
            "overlay_layers",
            {"input_path": "a3.gpkg", "overlay_path": "b.gpkg", "how": "intersection", "output_path": "i.gpkg"},
        )
    assert case.value.code == "FIELD_NAME_CLASH" and case.value.evidence["fields"] == ["Value", "value"]


def test_overlay_needs_how_spelled_out(app) -> None:
    contract = app.host.contracts["overlay_layers"]
    with pytest.raises(ArgumentError) as missing:
        contract.check_arguments({"input_path": "a.gpkg", "overlay_path": "b.gpkg", "output_path": "o.gpkg"})
    assert missing.value.code == "MISSING_ARGUMENT" and "how" in missing.value.message
    with pytest.raises(ArgumentError) as wrong:
        contract.check_arguments(
            {"input_path": "a.gpkg", "overlay_path": "b.gpkg", "how": "erase", "output_path": "o.gpkg"}
        )
    assert wrong.value.code == "ARGUMENT_NOT_IN_CHOICES"


# -- dissolve_layer -----------------------------------------------------------------------------

# Four disjoint 1-cell squares with keys a, a, b, null and values 1, 2, 3, 4.
# By name: a -> 2 features, 2 cells, value 1 + 2 = 3; b -> 1 feature, 1 cell, 3; null -> 1, 1 cell, 4.
# Three groups, the distinct keys {a, b, null} counted before the dissolve.


@pytest.fixture
def four_squares(workspace: Path) -> None:
    write_layer(
        workspace / "sq.gpkg",
        [sq(0, 0, 1, 1), sq(2, 0, 3, 1), sq(4, 0, 5, 1), sq(6, 0, 7, 1)],
        UTM,
        id=[1, 2, 3, 4],
        name=["a", "a", "b", None],
        value=[1.0, 2.0, 3.0, 4.0],
        code=["x", "y", "z", "w"],
    )


def test_dissolve_by_a_key_with_a_null_group(app, workspace, four_squares) -> None:
    result = app.run(
        "dissolve_layer",
        {"input_path": "sq.gpkg", "by_fields": "name", "aggregations": "value:sum", "output_path": "d.gpkg"},
    )
    out = read(workspace / "d.gpkg")
    rows = {text(r.name): (r.value, round(r.geometry.area / CELL_M2, 6)) for r in out.itertuples()}
    assert rows == {"a": (3.0, 2.0), "b": (3.0, 1.0), None: (4.0, 1.0)}
    assert list(out.columns) == ["name", "value", "geometry"]
    answer = result.answer
    assert answer["group_count"] == 3 and answer["null_key_features"] == 1
    assert answer["fields_dropped"] == ["id", "code"]
    assert {(g["name"], g["feature_count"]) for g in answer["groups"]} == {("a", 2), ("b", 1), (None, 1)}
    record = manifest(workspace / "d.gpkg")
    exact = check(record, "feature_count_exact")
    assert exact["passed"] and "expected 3 features" in exact["detail"] and "before the dissolve" in exact["detail"]
    assert record["parameters"]["aggregations"] == "value:sum"
    assert record["parameters"]["null_keys"] == "group"
    assert record["parameters"]["x-mapsmith:fields_dropped"] == ["id", "code"]
    assert record["parameters"]["x-mapsmith:null_key_features"] == 1
    assert any("not written" in n and "id, code" in n for n in record["notes"])


def test_dissolve_refuses_null_keys_when_asked_to(app, workspace, four_squares) -> None:
    with pytest.raises(InputError) as err:
        app.run(
            "dissolve_layer",
            {"input_path": "sq.gpkg", "by_fields": "name", "null_keys": "refuse", "output_path": "d.gpkg"},
        )
    assert err.value.code == "NULL_GROUP_KEY"
    assert err.value.evidence["by_field"] == {"name": 1} and err.value.evidence["first_rows"] == [3]
    assert not (workspace / "d.gpkg").exists()


def test_dissolve_everything_into_one_area_is_the_sum_of_disjoint_parts(app, workspace, four_squares) -> None:
    # No key: one feature; four disjoint 1-cell squares -> 4 cells; value sum 1+2+3+4 = 10;
    # id counted: 4 non-null values.
    result = app.run(
        "dissolve_layer", {"input_path": "sq.gpkg", "aggregations": "value:sum,id:count", "output_path": "all.gpkg"}
    )
    out = read(workspace / "all.gpkg")
    assert len(out) == 1 and cells(out) == [4.0]
    assert (out["value"].iloc[0], out["id"].iloc[0]) == (10.0, 4)
    assert result.answer["fields_dropped"] == ["name", "code"]
    assert "one group for the whole layer" in check(result, "feature_count_exact")["detail"]


def test_dissolve_counts_an_overlap_once(app, workspace) -> None:
    # [0,2]x[0,2] and [1,3]x[1,3]: 4 + 4 cells with 1 in common -> the dissolved area is 7 cells.
    write_layer(workspace / "o.gpkg", [sq(0, 0, 2, 2), sq(1, 1, 3, 3)], UTM, name=["k", "k"])
    app.run("dissolve_layer", {"input_path": "o.gpkg", "by_fields": "name", "output_path": "d.gpkg"})
    assert cells(read(workspace / "d.gpkg")) == [7.0]


def test_dissolve_aggregations_skip_nulls_and_a_sum_of_nulls_is_null(app, workspace) -> None:
    # Group p: values (null, 5) -> sum 5, first non-null label "second"; group q: values (null, null)
    # -> sum null (pandas alone would say 0), mean null, max of labels "u" (u > t).
    write_layer(
        workspace / "n.gpkg",
        [sq(0, 0, 1, 1), sq(2, 0, 3, 1), sq(4, 0, 5, 1), sq(6, 0, 7, 1)],
        UTM,
        key=["p", "p", "q", "q"],
        value=[None, 5.0, None, None],
        label=[None, "second", "t", "u"],
    )
    app.run(
        "dissolve_layer",
        {"input_path": "n.gpkg", "by_fields": "key", "aggregations": "value:sum,label:first", "output_path": "s.gpkg"},
    )
    out = read(workspace / "s.gpkg").set_index("key")
    assert out.loc["p", "value"] == 5.0 and out.loc["p", "label"] == "second"
    assert out["value"].isna().to_dict() == {"p": False, "q": True}
    app.run(
        "dissolve_layer",
        {"input_path": "n.gpkg", "by_fields": "key", "aggregations": "value:mean,label:max", "output_path": "m.gpkg"},
    )
    means = read(workspace / "m.gpkg").set_index("key")
    assert means.loc["p", "value"] == 5.0 and means["value"].isna()["q"] and means.loc["q", "label"] == "u"


@pytest.mark.parametrize(
    ("arguments", "error", "code", "fragment"),
    [
        ({"by_fields": "nmae"}, InputError, "FIELD_NOT_FOUND", "did you mean 'name'"),
        ({"by_fields": "name", "aggregations": "valeu:sum"}, InputError, "FIELD_NOT_FOUND", "valeu"),
        ({"by_fields": "name", "aggregations": "value:total"}, ArgumentError, "AGGREGATION_INVALID", "total"),
        ({"by_fields": "name", "aggregations": "value"}, ArgumentError, "AGGREGATION_INVALID", "field:function"),
        ({"by_fields": "name", "aggregations": "name:first"}, ArgumentError, "AGGREGATION_INVALID", "key field"),
        ({"by_fields": "name", "aggregations": "value:sum,value:max"}, ArgumentError, "AGGREGATION_INVALID", "twice"),
        ({"by_fields": "id", "aggregations": "code:sum"}, InputError, "FIELD_NOT_NUMERIC", "needs numbers"),
        ({"by_fields": "name,,id"}, ArgumentError, "FIELD_LIST_INVALID", "empty item"),
    ],
)
def test_dissolve_refuses_what_it_cannot_aggregate_honestly(
    app, workspace, four_squares, arguments, error, code, fragment
) -> None:
    with pytest.raises(error) as err:
        app.run("dissolve_layer", {"input_path": "sq.gpkg", "output_path": "d.gpkg", **arguments})
    assert err.value.code == code and fragment in err.value.message
    assert err.value.hint
    assert not (workspace / "d.gpkg").exists()


def test_dissolve_refuses_a_layer_mixing_geometry_families(app, workspace) -> None:
    write_layer(workspace / "mix.gpkg", [sq(0, 0, 1, 1), Point(X0, Y0)], UTM, name=["a", "a"])
    with pytest.raises(InputError) as err:
        app.run("dissolve_layer", {"input_path": "mix.gpkg", "by_fields": "name", "output_path": "d.gpkg"})
    assert err.value.code == "MIXED_GEOMETRY_TYPES"
    assert err.value.evidence["geometry_families"] == {"input_path": ["point", "polygon"]}


def test_dissolve_fails_verification_when_a_group_goes_missing(app, workspace, four_squares, monkeypatch) -> None:
    # Sabotage: an engine that silently drops null keys (GeoPandas' own default, dropna=True). The
    # count derived before the dissolve (3 groups) catches it: nothing is written at the output path.
    from mapsmith_opensource import dissolve_ops

    real = dissolve_ops._dissolve_with

    def dropping(work, keys, aggfunc, union_groups):
        return real(work.dropna(subset=keys), keys, aggfunc, union_groups)

    monkeypatch.setattr(dissolve_ops, "_dissolve_with", dropping)
    with pytest.raises(VerificationFailed) as err:
        app.run("dissolve_layer", {"input_path": "sq.gpkg", "by_fields": "name", "output_path": "d.gpkg"})
    assert "feature_count_exact" in err.value.message and "expected 3 features" in err.value.message
    assert not (workspace / "d.gpkg").exists()
    assert (workspace / "d.gpkg.failed.provenance.json").exists()


# -- merge_layers -------------------------------------------------------------------------------


def test_merge_unions_the_schemas_and_lists_what_each_input_lacked(app, workspace) -> None:
    # north: 2 features with id, name, value; south: 3 features with id, name, code.
    # Merged: 2 + 3 = 5 features; fields id, name, value, code, source; north lacks code, south value.
    write_layer(
        workspace / "north.gpkg", [sq(0, 1, 1, 2), sq(1, 1, 2, 2)], UTM, id=[1, 2], name=["n1", "n2"], value=[1.5, 2.5]
    )
    write_layer(
        workspace / "south.gpkg",
        [sq(0, 0, 1, 1), sq(1, 0, 2, 1), sq(2, 0, 3, 1)],
        UTM,
        id=[3, 4, 5],
        name=["s1", "s2", "s3"],
        code=["c3", "c4", "c5"],
    )
    result = app.run("merge_layers", {"input_paths": ["north.gpkg", "south.gpkg"], "output_path": "m.gpkg"})
    out = read(workspace / "m.gpkg")
    assert len(out) == 5
    assert list(out.columns) == ["id", "name", "value", "code", "source", "geometry"]
    assert out["source"].tolist() == ["north.gpkg"] * 2 + ["south.gpkg"] * 3
    assert out["value"].isna().tolist() == [False, False, True, True, True]
    assert out["code"].isna().tolist() == [True, True, False, False, False]
    lacking = {"input_paths[0]": ["code"], "input_paths[1]": ["value"]}
    assert result.answer["fields_filled_with_null"] == lacking
    record = manifest(workspace / "m.gpkg")
    assert record["parameters"]["x-mapsmith:fields_filled_with_null"] == lacking
    assert "input_paths[1] has no field value: its features carry null there" in record["notes"]
    exact = check(record, "feature_count_exact")
    assert exact["passed"] and "expected 5 features" in exact["detail"] and "2 + 3" in exact["detail"]
    assert check(record, "crs_matches")["passed"] and check(record, "geometry_types")["passed"]
    assert {i["argument"] for i in record["inputs"]} == {"input_paths[0]", "input_paths[1]"}
    assert field_types(workspace / "m.gpkg")["id"] == "int64"


def test_merge_transforms_later_inputs_to_the_first_ones_crs(app, workspace) -> None:
    # The second input is the cell [1,2]x[0,1] in lon/lat; back in UTM it is 10,000 m2 within 1e-6.
    from pyproj import Transformer

    to_ll = Transformer.from_crs(32610, 4326, always_xy=True)
    cell = sq(1, 0, 2, 1)
    write_layer(workspace / "utm.gpkg", [sq(0, 0, 1, 1)], UTM, id=[1])
    write_layer(
        workspace / "ll.gpkg", [Polygon([to_ll.transform(x, y) for x, y in cell.exterior.coords])], "EPSG:4326", id=[2]
    )
    result = app.run(
        "merge_layers", {"input_paths": ["utm.gpkg", "ll.gpkg"], "output_path": "m.gpkg", "add_source_field": False}
    )
    out = read(workspace / "m.gpkg")
    assert out.crs.to_epsg() == 32610 and "source" not in out.columns
    assert out.geometry.area.tolist() == [pytest.approx(CELL_M2, rel=1e-9), pytest.approx(CELL_M2, rel=1e-6)]
    aligned = result.crs_decisions["x-mapsmith:alignment"]["input_paths[1]"]
    assert (aligned["source_crs"], aligned["target_crs"]) == ("EPSG:4326", "EPSG:32610")
    assert result.answer["inputs_transformed"] == ["input_paths[1]"]
    assert "expected the first input's CRS EPSG:32610" in check(result, "crs_matches")["detail"]


def test_merge_refuses_a_field_whose_types_conflict(app, workspace) -> None:
    write_layer(workspace / "a.gpkg", [sq(0, 0, 1, 1)], UTM, code=[310101])
    write_layer(workspace / "b.gpkg", [sq(1, 0, 2, 1)], UTM, code=["310102"])
    with pytest.raises(InputError) as err:
        app.run("merge_layers", {"input_paths": ["a.gpkg", "b.gpkg"], "output_path": "m.gpkg"})
    assert err.value.code == "FIELD_TYPE_CONFLICT"
    assert err.value.evidence == {"field": "code", "types": {"input_paths[0]": "integer", "input_paths[1]": "string"}}
    assert not (workspace / "m.gpkg").exists()


def test_merge_widens_integer_to_real_exactly_and_records_it(app, workspace) -> None:
    # value: integer 7 in a, real 2.5 in b -> a real field holding 7.0 and 2.5, nothing rounded.
    write_layer(workspace / "a.gpkg", [sq(0, 0, 1, 1)], UTM, value=[7])
    write_layer(workspace / "b.gpkg", [sq(1, 0, 2, 1)], UTM, value=[2.5])
    result = app.run("merge_layers", {"input_paths": ["a.gpkg", "b.gpkg"], "output_path": "m.gpkg"})
    assert read(workspace / "m.gpkg")["value"].tolist() == [7.0, 2.5]
    assert field_types(workspace / "m.gpkg")["value"] == "float64"
    assert manifest(workspace / "m.gpkg")["parameters"]["x-mapsmith:fields_widened"] == ["value"]
    assert result.answer["fields_widened_to_real"] == ["value"]


def test_merge_refuses_mixed_geometry_families_and_a_taken_source_field(app, workspace) -> None:
    write_layer(workspace / "poly.gpkg", [sq(0, 0, 1, 1)], UTM, id=[1])
    write_layer(workspace / "pts.gpkg", [Point(X0, Y0)], UTM, id=[2])
    with pytest.raises(InputError) as mixed:
        app.run("merge_layers", {"input_paths": ["poly.gpkg", "pts.gpkg"], "output_path": "m.gpkg"})
    assert mixed.value.code == "MIXED_GEOMETRY_TYPES"
    assert mixed.value.evidence["geometry_families"] == {"input_paths[0]": ["polygon"], "input_paths[1]": ["point"]}
    write_layer(workspace / "src.gpkg", [sq(1, 0, 2, 1)], UTM, source=["survey"])
    with pytest.raises(InputError) as taken:
        app.run("merge_layers", {"input_paths": ["poly.gpkg", "src.gpkg"], "output_path": "m.gpkg"})
    assert taken.value.code == "FIELD_EXISTS" and taken.value.evidence["inputs"] == ["input_paths[1]"]
    assert "add_source_field=false" in taken.value.hint
    write_layer(workspace / "upper.gpkg", [sq(2, 0, 3, 1)], UTM, ID=[3])
    with pytest.raises(InputError) as case:
        app.run(
            "merge_layers",
            {"input_paths": ["poly.gpkg", "upper.gpkg"], "output_path": "m.gpkg", "add_source_field": False},
        )
    assert case.value.code == "FIELD_NAME_CLASH" and case.value.evidence["fields"] == ["id", "ID"]
    assert not (workspace / "m.gpkg").exists()


def test_merge_of_three_counts_every_input(app, workspace) -> None:
    # 1 + 2 + 3 = 6 features; the same file passed twice is merged twice and warned about.
    write_layer(workspace / "one.gpkg", [sq(0, 0, 1, 1)], UTM, id=[1])
    write_layer(workspace / "two.gpkg", [sq(1, 0, 2, 1), sq(2, 0, 3, 1)], UTM, id=[2, 3])
    result = app.run("merge_layers", {"input_paths": ["one.gpkg", "two.gpkg", "two.gpkg"], "output_path": "m.gpkg"})
    assert len(read(workspace / "m.gpkg")) == 5
    assert result.answer["features_by_input"] == {"input_paths[0]": 1, "input_paths[1]": 2, "input_paths[2]": 2}
    assert "expected 5 features" in check(result, "feature_count_exact")["detail"]
    assert "DUPLICATE_INPUT" in [w["code"] for w in result.warnings]


# -- explode_layer ------------------------------------------------------------------------------


def test_explode_a_three_part_multipolygon_and_a_polygon_into_four(app, workspace) -> None:
    # Feature 1: MultiPolygon of 1-, 2- and 3-cell rectangles (3 parts); feature 2: one 4-cell square.
    # Parts: 3 + 1 = 4 features, areas 1, 2, 3, 4 cells, part_index 0, 1, 2, 0, attributes copied.
    multi = MultiPolygon([sq(0, 0, 1, 1), sq(2, 0, 4, 1), sq(5, 0, 8, 1)])
    write_layer(workspace / "m.gpkg", [multi, sq(0, 2, 2, 4)], UTM, id=[1, 2], name=["multi", "single"])
    result = app.run("explode_layer", {"input_path": "m.gpkg", "output_path": "e.gpkg"})
    out = read(workspace / "e.gpkg")
    assert len(out) == 4
    assert [round(a / CELL_M2, 6) for a in out.geometry.area] == [1.0, 2.0, 3.0, 4.0]
    assert out["name"].tolist() == ["multi", "multi", "multi", "single"]
    assert out["id"].tolist() == [1, 1, 1, 2]
    assert out["part_index"].tolist() == [0, 1, 2, 0]
    assert set(out.geom_type) == {"Polygon"}
    assert result.answer == {
        "input_features": 2,
        "multi_part_features": 1,
        "feature_count": 4,
        "features_without_parts": 0,
    }
    exact = check(manifest(workspace / "e.gpkg"), "feature_count_exact")
    assert exact["passed"] and "expected 4 features" in exact["detail"]


def test_explode_lines_and_points_and_carries_a_feature_without_geometry(app, workspace) -> None:
    # Lines: a 2-part MultiLineString and a LineString -> 3 lines.
    lines = [
        MultiLineString([[(X0, Y0), (X0 + 10, Y0)], [(X0, Y0 + 5), (X0 + 10, Y0 + 5)]]),
        LineString([(X0, Y0 + 9), (X0 + 1, Y0 + 9)]),
    ]
    write_layer(workspace / "l.gpkg", lines, UTM, id=[1, 2])
    app.run("explode_layer", {"input_path": "l.gpkg", "output_path": "le.gpkg"})
    assert read(workspace / "le.gpkg")["part_index"].tolist() == [0, 1, 0]
    # Points: a 2-point MultiPoint and a feature with no geometry -> 2 points + 1 carried = 3.
    write_layer(workspace / "p.gpkg", [MultiPoint([(X0, Y0), (X0 + 1, Y0)]), None], UTM, id=[1, 2])
    result = app.run("explode_layer", {"input_path": "p.gpkg", "output_path": "pe.gpkg"})
    out = read(workspace / "pe.gpkg")
    assert len(out) == 3 and out["id"].tolist() == [1, 1, 2]
    assert out.geometry.isna().tolist() == [False, False, True]
    assert out["part_index"].isna().tolist() == [False, False, True]
    assert field_types(workspace / "pe.gpkg")["part_index"] == "int64"
    assert result.answer["features_without_parts"] == 1
    assert any("carried unchanged" in n for n in result.notes)


def test_explode_refuses_to_overwrite_part_index_unless_told_not_to_add_it(app, workspace) -> None:
    write_layer(workspace / "m.gpkg", [MultiPolygon([sq(0, 0, 1, 1), sq(2, 0, 3, 1)])], UTM, Part_Index=[9])
    with pytest.raises(InputError) as err:
        app.run("explode_layer", {"input_path": "m.gpkg", "output_path": "e.gpkg"})
    assert err.value.code == "FIELD_EXISTS" and "add_part_index=false" in err.value.hint
    app.run("explode_layer", {"input_path": "m.gpkg", "output_path": "e.gpkg", "add_part_index": False})
    assert read(workspace / "e.gpkg")["Part_Index"].tolist() == [9, 9]


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_union_groups_in_threads_is_union_all_per_group(threads: int) -> None:
    """By hand: group 0 is two overlapping squares (0..2 and 1..3, one polygon of area 8 - 1 = 7), group 1 a square
    and a missing geometry (the square), group 2 has no member (an empty collection, as union_all of nothing), group
    3 two disjoint squares (a multipolygon of area 2). Then 300 random squares in 7 groups: each union is
    shapely.union_all of the group in input order, to the last bit."""
    import numpy as np
    import shapely
    from shapely.geometry import box

    from mapsmith_opensource.group_union import union_groups_in_threads

    geoms = np.array([box(0, 0, 2, 2), box(5, 5, 6, 6), None, box(1, 1, 3, 3), box(10, 0, 11, 1), box(20, 0, 21, 1)])
    groups = np.array([0, 1, 1, 0, 3, 3])
    out = union_groups_in_threads(geoms, groups, 4, threads)
    assert [g.geom_type for g in out] == ["Polygon", "Polygon", "GeometryCollection", "MultiPolygon"]
    assert shapely.area(out).tolist() == [7.0, 1.0, 0.0, 2.0] and out[2].is_empty
    rng = np.random.default_rng(3)
    corners = rng.uniform(0, 100, (300, 2))
    squares = shapely.box(corners[:, 0], corners[:, 1], corners[:, 0] + 8, corners[:, 1] + 8)
    labels = rng.integers(0, 7, 300)
    found = union_groups_in_threads(squares, labels, 7, threads)
    for k in range(7):
        assert shapely.equals_exact(found[k], shapely.union_all(squares[labels == k]), 0)
