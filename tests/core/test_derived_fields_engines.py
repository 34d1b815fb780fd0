"""An engine that writes file to file (as QGIS, ArcGIS and Spark do) cannot measure again through the opensource
writer: the runner refuses its output rather than write stale or unrepaired measures, and passes its clean twin.

Hand-worked in EPSG:3035 at its centre (4321000 E, 3210000 N; equal-area, planar = ground to 1e-5): a 100 m
square measured 10 000 m2 by measure_area, clipped to its left half by such an engine, would carry 10 000 beside
5 000 m2 of geometry; a bow-tie (0,0) (2,2) (2,0) (0,2) measured as drawn is 0 m2 (its lobes cancel), and the
runner's repair would write its two 1 m2 triangles beside that 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import shapely
from shapely.geometry import Polygon, box

from layers import read, write_layer
from mapsmith.app import MapSmith
from mapsmith.errors import VerificationFailed
from mapsmith.hookspecs import hookimpl
from mapsmith.registry import Availability, StackSpec

LAEA = "EPSG:3035"
X0, Y0 = 4_321_000.0, 3_210_000.0


def _write(ctx, gdf) -> None:
    from mapsmith_opensource import io

    ctx.set_engine("filewriter", "1")
    io.write_layer(gdf, ctx.temp_output, layer=ctx.output_path.stem)  # not common.write_output: no refresh


def _clip(ctx) -> None:
    from mapsmith_opensource import io

    gdf = io.read_layer(ctx.paths["input_path"], None)
    mask = io.read_layer(ctx.paths["mask_path"], None)
    out = gdf.copy()
    out = out.set_geometry(shapely.intersection(gdf.geometry.values, shapely.union_all(mask.geometry.values)))
    _write(ctx, out)


def _measure(ctx) -> None:
    from mapsmith_opensource import io

    gdf = io.read_layer(ctx.paths["input_path"], None)
    out = gdf.copy()
    out["area_m2"] = shapely.area(gdf.geometry.values)  # planar = ground here; as drawn, not repaired
    _write(ctx, out)


class FileWriter:
    @hookimpl
    def mapsmith_register_stacks(self, register) -> None:
        register(StackSpec(name="filewriter", summary="test", availability=lambda: Availability(True)))

    @hookimpl
    def mapsmith_register_operations(self, register) -> None:
        register(_clip, operation="clip_layer", stack="filewriter", engine="filewriter-clip")
        register(_measure, operation="measure_area", stack="filewriter", engine="filewriter-area")


def _apps(workspace: Path) -> tuple[MapSmith, MapSmith]:
    env = {"MAPSMITH_WORKSPACE": str(workspace)}
    return MapSmith(env), MapSmith({**env, "MAPSMITH_STACK": "filewriter"}, extra_plugins=[("f", FileWriter())])


def test_stale_measures_from_a_file_to_file_engine_are_refused(workspace: Path) -> None:
    opensource, filewriter = _apps(workspace)
    write_layer(workspace / "sq.gpkg", [box(X0, Y0, X0 + 100, Y0 + 100)], LAEA, id=[1])
    write_layer(workspace / "left.gpkg", [box(X0 - 10, Y0 - 10, X0 + 50, Y0 + 110)], LAEA, zone=["L"])
    opensource.run("measure_area", {"input_path": "sq.gpkg", "output_path": "m.gpkg"})
    with pytest.raises(VerificationFailed) as err:
        filewriter.run("clip_layer", {"input_path": "m.gpkg", "mask_path": "left.gpkg", "output_path": "c.gpkg"})
    assert err.value.code == "STALE_DERIVED_FIELDS"
    [field] = err.value.evidence["fields"]
    assert (field["field"], field["written_by"], field["action"]) == ("area_m2", "measure_area", "stale")
    assert "select_fields" in err.value.hint and "measure_area" in err.value.hint
    assert not (workspace / "c.gpkg").exists()
    failed = json.loads(next(workspace.glob("c.gpkg.failed*.json")).read_text("utf-8"))
    assert failed["x-mapsmith:error"]["code"] == "STALE_DERIVED_FIELDS"
    # clean twin: the same clip of the layer without MapSmith's measure is written, 5 000 m2
    filewriter.run("clip_layer", {"input_path": "sq.gpkg", "mask_path": "left.gpkg", "output_path": "c.gpkg"})
    assert read(workspace / "c.gpkg").geometry.area.tolist() == pytest.approx([5_000])


def test_an_engine_s_measure_of_an_invalid_geometry_is_not_repaired_under_it(workspace: Path) -> None:
    _, filewriter = _apps(workspace)
    bowtie = Polygon([(X0, Y0), (X0 + 2, Y0 + 2), (X0 + 2, Y0), (X0, Y0 + 2)])
    write_layer(workspace / "bow.gpkg", [bowtie], LAEA, id=[1])
    with pytest.raises(VerificationFailed) as err:
        filewriter.run("measure_area", {"input_path": "bow.gpkg", "output_path": "a.gpkg"})
    assert err.value.code == "MEASURED_GEOMETRY_REPAIRED"
    assert err.value.evidence["invalid_count"] == 1
    assert [f["field"] for f in err.value.evidence["fields"]] == ["area_m2"]
    assert "repair_geometries" in err.value.hint
    assert not (workspace / "a.gpkg").exists()
    # clean twin: a valid 10 m square is written with its 100 m2
    write_layer(workspace / "sq.gpkg", [box(X0, Y0, X0 + 10, Y0 + 10)], LAEA, id=[1])
    result = filewriter.run("measure_area", {"input_path": "sq.gpkg", "output_path": "a.gpkg"})
    assert read(workspace / "a.gpkg")["area_m2"].tolist() == pytest.approx([100.0])
    assert result.repairs == []
