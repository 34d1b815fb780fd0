"""calculate_field, select_fields and rename_fields, against values worked out by hand.

Areas and lengths are the hand-worked figures of tests/vector/test_foundation_ops.py: a
0.0015 x 0.0015 degree square at 46.2 N is 19,303 m2 on WGS 84; 0.01 degree of meridian at the
equator is a(1 - e2) * 0.01 * pi/180 = 6,335,439 m * 1.74533e-4 = 1,105.74 m. Each refusal has a
clean twin: the same request without the defect is answered.
"""

from __future__ import annotations

import pytest
from shapely.geometry import LineString, Point, box

from layers import manifest, read, write_layer
from mapsmith.errors import ArgumentError, InputError
from mapsmith.expressions import ExpressionError


def _stored(path, field: str) -> str:
    import pyogrio

    info = pyogrio.read_info(path)
    return str(dict(zip(info["fields"], info["dtypes"], strict=True))[field])


SQUARE_M2 = 19303  # +-1, see the module docstring
MERIDIAN_0_01_DEG_M = 1105.74


@pytest.fixture
def squares(workspace):
    # Two equal squares; a is an integer field, b has a zero and a NULL.
    geoms = [box(-122.0, 46.2, -121.9985, 46.2015), box(-122.0, 46.2, -121.9985, 46.2015)]
    write_layer(workspace / "sq.gpkg", geoms, "EPSG:4326", name=["x", "y"], a=[5, 7], b=[2.0, 0.0], pop=[193, None])
    return "sq.gpkg"


def _calc(app, source: str, expression: str, field: str = "v", out: str = "out.gpkg", **more):
    args = {"input_path": source, "output_field": field, "expression": expression, "output_path": out, **more}
    return app.run("calculate_field", args)


def test_density_from_a_field_and_the_geodesic_area(app, workspace, squares) -> None:
    # 193 people / (19,303 m2 / 1e6) = 9,998.4 per km2; the second square's NULL population gives NULL.
    result = _calc(app, squares, "pop / ($area / 1000000)", field="density_km2")
    assert result.answer["field_type"] == "real"
    assert result.answer["null_count"] == 1
    assert result.answer["null_reasons"] == {"a field it reads is NULL": 1}
    out = read(workspace / "out.gpkg")
    assert out["density_km2"].iloc[0] == pytest.approx(193 / (SQUARE_M2 / 1e6), rel=1e-4)
    assert out["density_km2"].isna().iloc[1]
    record = manifest(workspace / "out.gpkg")
    assert record["parameters"]["x-mapsmith:expression_canonical"] == "(pop / ($area / 1000000))"
    assert record["parameters"]["x-mapsmith:field_type"] == "real"
    assert record["parameters"]["x-mapsmith:field_type_source"] == "inferred"
    assert "geodesic" in record["crs_decisions"]["reason"]


def test_integer_arithmetic_stays_whole_and_division_is_real(app, workspace, squares) -> None:
    # a * 3 + 1: 5*3+1 = 16, 7*3+1 = 22, integers. a / 2: 2.5, 3.5. round(a / 2) half away from zero: 3, 4.
    assert _calc(app, squares, "a * 3 + 1", out="i.gpkg").answer["field_type"] == "integer"
    assert list(read(workspace / "i.gpkg")["v"]) == [16, 22]
    assert _calc(app, squares, "a / 2", out="r.gpkg").answer["field_type"] == "real"
    assert list(read(workspace / "r.gpkg")["v"]) == [2.5, 3.5]
    assert _calc(app, squares, "round(a / 2)", out="h.gpkg").answer["field_type"] == "integer"
    assert list(read(workspace / "h.gpkg")["v"]) == [3, 4]
    assert _stored(workspace / "h.gpkg", "v") == "int64"  # the file's own column type, not a float
    # unary minus binds tighter than *, and * before +: -a * 2 + 1 = -9, -13
    assert list(read(workspace / "h.gpkg")["v"]) == [3, 4]
    _calc(app, squares, "-a * 2 + 1", out="n.gpkg")
    assert list(read(workspace / "n.gpkg")["v"]) == [-9, -13]


def test_division_by_zero_is_null_and_counted(app, workspace, squares) -> None:
    # a / b: 5 / 2 = 2.5; 7 / 0 has no value.
    result = _calc(app, squares, "a / b")
    assert result.answer["null_reasons"] == {"a division by zero": 1}
    assert any("division by zero" in n for n in result.notes)
    out = read(workspace / "out.gpkg")
    assert out["v"].iloc[0] == 2.5 and out["v"].isna().iloc[1]
    # a whole-number result with a NULL stays an integer column in the file (pandas reads it back as float)
    _calc(app, squares, "round(a / b)", out="n.gpkg")
    assert _stored(workspace / "n.gpkg", "v") == "int64"
    checks = {c["name"]: c for c in manifest(workspace / "n.gpkg")["verification"]}
    assert "stored as int64 for field_type integer" in checks["x-mapsmith:fields_as_requested"]["detail"]


def test_a_declared_type_is_checked_not_forced(app, workspace, squares) -> None:
    with pytest.raises(ExpressionError) as info:
        _calc(app, squares, "a / 2", field_type="integer")
    assert info.value.code == "FIELD_TYPE_MISMATCH"
    assert info.value.evidence["not_whole_count"] == 2
    assert "round" in info.value.hint
    # the twins: whole values declared integer (10 / 2 = 5, 14 / 2 = 7), and a real declared real
    result = _calc(app, squares, "a * 2 / 2", field_type="integer", out="w.gpkg")
    assert result.answer["field_type"] == "integer" and result.answer["field_type_source"] == "declared"
    assert list(read(workspace / "w.gpkg")["v"]) == [5, 7]
    with pytest.raises(ExpressionError) as info:
        _calc(app, squares, "name || '!'", field_type="real")
    assert info.value.code == "FIELD_TYPE_MISMATCH"


def test_text_is_joined_and_never_mixed_with_numbers(app, workspace, squares) -> None:
    result = _calc(app, squares, "name || '-' || name", field="label")
    assert result.answer["field_type"] == "text"
    assert list(read(workspace / "out.gpkg")["label"]) == ["x-x", "y-y"]
    for bad in ("name + 1", "name || a", "-name"):
        with pytest.raises(ExpressionError) as info:
            _calc(app, squares, bad, out="bad.gpkg")
        assert info.value.code == "EXPRESSION_TYPE_MISMATCH", bad


def test_unknown_fields_and_syntax_are_refused_with_positions(app, workspace, squares) -> None:
    with pytest.raises(ExpressionError) as info:
        _calc(app, squares, "Pop * 2")
    assert info.value.code == "FIELD_NOT_FOUND"
    assert info.value.evidence["did_you_mean"] == ["pop"]
    for text, position in (("a = 1", 2), ("a +", 3), ("__import__('os')", 0), ("$volume * 2", 0), ("a.b", 1)):
        with pytest.raises(ExpressionError) as info:
            _calc(app, squares, text)
        assert info.value.code == "EXPRESSION_SYNTAX", text
        assert info.value.evidence["position"] == position, text
    assert not (workspace / "out.gpkg").exists()


def test_an_existing_field_is_replaced_only_when_asked(app, workspace, squares) -> None:
    with pytest.raises(InputError) as info:
        _calc(app, squares, "a + 1", field="a")
    assert info.value.code == "FIELD_EXISTS"
    assert "overwrite_field" in info.value.hint
    result = _calc(app, squares, "a + 1", field="a", overwrite_field=True)
    assert result.answer["field_replaced"] is True
    out = read(workspace / "out.gpkg")
    assert list(out["a"]) == [6, 8]
    assert [c for c in out.columns if c != "geometry"] == ["name", "a", "b", "pop"]  # replaced in place
    assert manifest(workspace / "out.gpkg")["parameters"]["x-mapsmith:field_replaced"] is True


def test_line_length_and_point_coordinates(app, workspace) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(0, 0), (0, 0.01)])], "EPSG:4326", id=[1])
    result = _calc(app, "l.gpkg", "round($length)", field="len_m")
    assert result.answer["field_type"] == "integer"
    assert list(read(workspace / "out.gpkg")["len_m"]) == [round(MERIDIAN_0_01_DEG_M)]  # 1106
    write_layer(workspace / "p.gpkg", [Point(530000, 180000)], "EPSG:27700", id=[1])
    # $x / 1000 in British National Grid metres: 530 km; $y - 180000 = 0
    _calc(app, "p.gpkg", "$x / 1000", field="e_km", out="p_out.gpkg")
    assert list(read(workspace / "p_out.gpkg")["e_km"]) == [530.0]


def test_a_measure_the_geometry_does_not_have_is_refused(app, workspace) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(0, 0), (0, 0.01)])], "EPSG:4326", id=[1])
    with pytest.raises(InputError) as info:
        _calc(app, "l.gpkg", "$area")
    assert info.value.code == "MEASURE_NOT_APPLICABLE"
    assert "$length" in info.value.hint


# -- select_fields ----------------------------------------------------------------------------


def test_select_fields_keeps_the_layer_order_and_refuses_unknown_names(app, workspace, squares) -> None:
    # asked out of order: the layer's order (name, a, b, pop) is kept
    result = app.run("select_fields", {"input_path": squares, "keep_fields": "pop, name", "output_path": "k.gpkg"})
    assert result.answer["fields"] == ["name", "pop"]
    assert [c for c in read(workspace / "k.gpkg").columns if c != "geometry"] == ["name", "pop"]
    app.run("select_fields", {"input_path": squares, "drop_fields": "b", "output_path": "d.gpkg"})
    assert [c for c in read(workspace / "d.gpkg").columns if c != "geometry"] == ["name", "a", "pop"]
    with pytest.raises(InputError) as info:
        app.run("select_fields", {"input_path": squares, "keep_fields": "name,Pop", "output_path": "x.gpkg"})
    assert info.value.code == "FIELD_NOT_FOUND"
    assert info.value.evidence["unknown"] == ["Pop"]
    assert info.value.evidence["fields"] == ["name", "a", "b", "pop"]
    with pytest.raises(ArgumentError) as info:
        app.run(
            "select_fields", {"input_path": squares, "keep_fields": "a", "drop_fields": "b", "output_path": "x.gpkg"}
        )
    assert info.value.code == "ARGUMENT_NOT_APPLICABLE"
    with pytest.raises(ArgumentError) as info:
        app.run("select_fields", {"input_path": squares, "output_path": "x.gpkg"})
    assert info.value.code == "FIELD_LIST_REQUIRED"


# -- rename_fields ----------------------------------------------------------------------------


def test_rename_fields_renames_swaps_and_refuses_clashes(app, workspace, squares) -> None:
    result = app.run(
        "rename_fields", {"input_path": squares, "renames": "name:label, a:b, b:a", "output_path": "r.gpkg"}
    )
    assert result.answer["fields"] == ["label", "b", "a", "pop"]
    out = read(workspace / "r.gpkg")
    assert list(out["b"]) == [5, 7] and list(out["a"]) == [2.0, 0.0]  # a swap moves names, not values
    with pytest.raises(InputError) as info:
        app.run("rename_fields", {"input_path": squares, "renames": "a:pop", "output_path": "c.gpkg"})
    assert info.value.code == "FIELD_NAME_CLASH"
    assert info.value.evidence["clashes"] == {"pop": ["a", "pop"]}
    with pytest.raises(InputError) as info:
        app.run("rename_fields", {"input_path": squares, "renames": "nom:label", "output_path": "c.gpkg"})
    assert info.value.code == "FIELD_NOT_FOUND"
    with pytest.raises(ArgumentError) as info:
        app.run("rename_fields", {"input_path": squares, "renames": "a=b", "output_path": "c.gpkg"})
    assert info.value.code == "FIELD_LIST_INVALID"
    assert not (workspace / "c.gpkg").exists()


def test_a_plan_from_a_table_to_a_renamed_deliverable(app, workspace) -> None:
    # Two points, 100 m buffers (64-gons: 3.1365485 * 100^2 m2 = 31,365 m2 in their UTM zone; the
    # ground area is within 0.5 %), measured, converted to hectares, columns chosen and renamed.
    (workspace / "t.csv").write_text("id,lon,lat\n1,2.35,48.85\n2,2.36,48.86\n", encoding="utf-8")
    plan = {
        "goal": "hectares of 100 m circles round CSV points",
        "steps": [
            {
                "id": "pts",
                "operation": "table_to_points",
                "arguments": {"input_path": "t.csv", "x_field": "lon", "y_field": "lat", "crs": "EPSG:4326"},
            },
            {"id": "buf", "operation": "buffer_layer", "arguments": {"input_path": "$pts", "distance_meters": 100}},
            {"id": "area", "operation": "measure_area", "arguments": {"input_path": "$buf", "output_field": "a_m2"}},
            {
                "id": "calc",
                "operation": "calculate_field",
                "arguments": {"input_path": "$area", "output_field": "ha", "expression": "a_m2 / 10000"},
            },
            {"id": "sel", "operation": "select_fields", "arguments": {"input_path": "$calc", "keep_fields": "id,ha"}},
            {"id": "ren", "operation": "rename_fields", "arguments": {"input_path": "$sel", "renames": "ha:hectares"}},
        ],
    }
    for i, step in enumerate(plan["steps"]):
        step["arguments"]["output_path"] = f"s{i}.gpkg"
    assert app.validate_plan(plan)["valid"]
    assert app.execute_plan(plan)["status"] == "ok"
    out = read(workspace / "s5.gpkg")
    assert [c for c in out.columns if c != "geometry"] == ["id", "hectares"]
    assert list(out["hectares"]) == pytest.approx([3.1365485] * 2, rel=0.005)
