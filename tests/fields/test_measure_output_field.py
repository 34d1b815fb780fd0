"""measure_area and measure_length write to the field the caller names, and replace one only when asked.

The figures are the hand-worked ones of tests/vector/test_foundation_ops.py: the 0.0015-degree
square at 46.2 N is 19,303 m2; 0.01 degree of meridian at the equator is 1,105.74 m.
"""

from __future__ import annotations

import pytest
from shapely.geometry import LineString, box

from layers import manifest, read, write_layer
from mapsmith.errors import InputError


def test_measure_area_writes_the_named_field(app, workspace) -> None:
    write_layer(workspace / "sq.gpkg", [box(-122.0, 46.2, -121.9985, 46.2015)], "EPSG:4326", name=["a"])
    result = app.run("measure_area", {"input_path": "sq.gpkg", "output_field": "surface_m2", "output_path": "o.gpkg"})
    assert result.answer["output_field"] == "surface_m2"
    assert result.answer["field_replaced"] is False
    assert result.answer["rows"] == [{"name": "a", "surface_m2": pytest.approx(19303, abs=1.0)}]
    assert "area_m2" not in read(workspace / "o.gpkg").columns


def test_measure_area_replaces_an_existing_field_only_with_overwrite_field(app, workspace) -> None:
    write_layer(workspace / "sq.gpkg", [box(-122.0, 46.2, -121.9985, 46.2015)], "EPSG:4326", area_m2=[1.0])
    args = {"input_path": "sq.gpkg", "output_path": "o.gpkg"}
    with pytest.raises(InputError) as info:
        app.run("measure_area", args)
    assert info.value.code == "FIELD_EXISTS"
    assert "overwrite_field=true" in info.value.hint
    result = app.run("measure_area", {**args, "overwrite_field": True})
    assert result.answer["field_replaced"] is True
    assert any("was replaced" in n for n in result.notes)
    assert read(workspace / "o.gpkg")["area_m2"].iloc[0] == pytest.approx(19303, abs=1.0)
    assert manifest(workspace / "o.gpkg")["parameters"]["x-mapsmith:field_replaced"] is True


def test_measure_length_writes_the_named_field_and_refuses_a_clash(app, workspace) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(0, 0), (0, 0.01)])], "EPSG:4326", len_m=[0.0])
    args = {"input_path": "l.gpkg", "output_field": "len_m", "output_path": "o.gpkg"}
    with pytest.raises(InputError) as info:
        app.run("measure_length", args)
    assert info.value.code == "FIELD_EXISTS"
    result = app.run("measure_length", {**args, "overwrite_field": True})
    assert result.answer["field_replaced"] is True
    assert read(workspace / "o.gpkg")["len_m"].iloc[0] == pytest.approx(1105.74, abs=0.01)
    # the default name is still length_m, beside the existing field
    app.run("measure_length", {"input_path": "l.gpkg", "output_path": "d.gpkg"})
    out = read(workspace / "d.gpkg")
    assert out["length_m"].iloc[0] == pytest.approx(1105.74, abs=0.01) and out["len_m"].iloc[0] == 0.0
