"""Bad input gets counted, reported and refused where it must be; nothing is dropped or fixed silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import LineString, Polygon, box

from layers import manifest, write_layer
from mapsmith.errors import GeometryTypeRefused


def test_invalid_input_geometries_are_counted_with_their_reason(app, workspace: Path) -> None:
    # two valid squares and one bow-tie: 1 of 3 invalid, feature index 2, a self-intersection
    bowtie = Polygon([(0, 0), (1, 1), (1, 0), (0, 1), (0, 0)])
    write_layer(workspace / "in.gpkg", [box(0, 0, 1, 1), box(2, 2, 3, 3), bowtie], "EPSG:32610", id=[1, 2, 3])
    result = app.run("buffer_layer", {"input_path": "in.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    warning = next(w for w in result.warnings if w["code"] == "INPUT_GEOMETRY_INVALID")
    assert "1 of 3 geometries invalid" in warning["message"]
    assert "[2]" in warning["message"] and "Self-intersection" in warning["message"]
    assert "repair_geometries" in warning["hint"]
    check = next(
        c for c in manifest(workspace / "b.gpkg")["verification"] if c["name"] == "x-mapsmith:input_geometry_valid"
    )
    assert check["passed"] is False and check["critical"] is False and check["argument"] == "input_path"
    # the input is reported, not changed, and no feature is dropped
    assert len(__import__("geopandas").read_file(workspace / "b.gpkg")) == 3


def test_a_mixed_line_and_polygon_layer_is_not_measured_as_one_kind(app, workspace: Path) -> None:
    write_layer(workspace / "mixed.gpkg", [box(0, 0, 10, 10), LineString([(0, 0), (10, 10)])], "EPSG:6933", id=[1, 2])
    with pytest.raises(GeometryTypeRefused) as err:
        app.run("measure_area", {"input_path": "mixed.gpkg", "output_path": "a.gpkg"})
    assert set(err.value.evidence["geometry_types"]) == {"LineString", "Polygon"}
    assert "line" in err.value.message
