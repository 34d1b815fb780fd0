"""mapsmith.derived_fields on its own: which fields a record says MapSmith derived, and what a run must do with them.

No engine runs here; the records are the shapes the runner writes (and, for measure_area and measure_length,
the shape of a manifest written before the runner recorded derived fields: only their arguments).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mapsmith.derived_fields import (
    DerivedField,
    inherited_fields,
    manifest_record,
    own_fields,
    plan,
    recorded_fields,
)


def test_an_older_measure_area_record_is_read_from_its_arguments() -> None:
    record = {"operation": "measure_area", "parameters": {"method": "planar", "output_field": "surface_m2"}}
    record["output"] = {"crs": "EPSG:3035", "sha256": "0" * 64}
    [field] = recorded_fields(record)
    assert (field.name, field.measure, field.method, field.crs, field.written_by) == (
        "surface_m2",
        "area",
        "planar",
        "EPSG:3035",
        "measure_area",
    )
    assert field.recomputable and not field.own


def test_a_3d_length_is_recorded_as_one_the_writer_cannot_take_again() -> None:
    [flat] = own_fields("measure_length", {})
    [along] = own_fields("measure_length", {"use_z": True})
    assert (flat.name, flat.method, flat.recomputable) == ("length_m", "geodesic", True)
    assert (along.method, along.recomputable) == ("geodesic_3d", False)


def test_calculate_field_derives_from_geometry_only_when_its_expression_measures() -> None:
    assert [f.name for f in own_fields("calculate_field", {"output_field": "d", "expression": "pop / $area"})] == ["d"]
    assert own_fields("calculate_field", {"output_field": "d", "expression": "pop / 2"}) == []


def test_a_dropped_field_is_not_inherited() -> None:
    listed = [
        DerivedField("area_m2", "area", "geodesic", "measure_area").to_record("recomputed"),
        DerivedField("distance_m", "distance", "", "nearest_join").to_record("dropped"),
    ]
    names = [
        f.name
        for f in recorded_fields({"operation": "clip_layer", "parameters": {"x-mapsmith:derived_fields": listed}})
    ]
    assert names == ["area_m2"]


def test_inherited_fields_trust_only_a_record_of_these_bytes(tmp_path: Path) -> None:
    data = tmp_path / "m.gpkg"
    data.write_bytes(b"not really a geopackage")
    record = {
        "operation": "measure_area",
        "parameters": {"method": "geodesic"},
        "output": {"path": "m.gpkg", "sha256": "a" * 64, "crs": "EPSG:3035"},
    }
    (tmp_path / "m.gpkg.provenance.json").write_text(json.dumps(record), "utf-8")
    digests: list[Path] = []

    def digest(path: Path) -> str:
        digests.append(path)
        return "a" * 64

    [field] = inherited_fields(data, None, ["id", "area_m2"], digest)
    assert field.name == "area_m2"
    assert inherited_fields(data, None, ["id", "area_m2"], lambda p: "b" * 64) == []  # other bytes
    digests.clear()
    assert inherited_fields(data, None, ["id"], digest) == []  # the field is gone: no digest taken
    assert digests == []


def test_a_reshaping_run_marks_inherited_measures_stale_and_its_own_field_wins() -> None:
    inherited = [DerivedField("area_m2", "area", "geodesic", "measure_area")]
    clip = plan("clip_layer", {}, inherited, "EPSG:3035")
    assert [f.name for f in clip.stale] == ["area_m2"] and not clip.derives
    select = plan("select_features", {}, inherited, "EPSG:3035")
    assert select.stale == []
    again = plan("measure_area", {"overwrite_field": True}, inherited, "EPSG:3035")
    assert again.stale == [] and again.fields["area_m2"].own and again.derives


@pytest.mark.parametrize(("families", "recorded"), [(["polygon"], ["area_m2"]), (["point"], [])])
def test_an_area_is_recorded_only_beside_polygons(families: list[str], recorded: list[str]) -> None:
    carried = plan("centroid_layer", {}, [DerivedField("area_m2", "area", "geodesic", "measure_area")], None)
    assert [r["field"] for r in manifest_record(carried, ["id", "area_m2"], families)] == recorded
