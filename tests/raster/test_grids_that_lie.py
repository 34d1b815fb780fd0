"""Grids that lie: two georeferencings, rotated and south-up grids, stale sidecars, wrong kinds.

Every operation that reads a grid is covered by the catalogue-wide tests here (built from the
contracts, so an operation is covered the day its contract lands): a GeoTIFF whose ``.aux.xml``
sidecar puts it elsewhere is refused before any engine runs, and so is a rotated grid. Describing
such a file is allowed and lists every reading.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.transform import from_origin

from catalog_args import build_arguments
from mapsmith.contracts import load_builtin_contracts
from mapsmith.errors import InputError, OperationUnavailable, OutputError
from mapsmith.registry import DatasetInfo
from mapsmith.verify import raster_output_checks

CONTRACTS = load_builtin_contracts()
GRID_READERS = sorted(
    name
    for name, c in CONTRACTS.items()
    if c.status == "available" and c.output_kind != "description" and any(d.kind == "raster" for d in c.datasets)
)
# The sidecar of the specification's own example (§3.8): 20 m cells 100 km away from the tags' 10 m.
SIDECAR = "<PAMDataset><GeoTransform>600000, 20, 0, 5040000, 0, -20</GeoTransform></PAMDataset>"


def write_grid(path: Path, values: np.ndarray, transform: Affine, crs: str = "EPSG:32610", **tags: str) -> None:
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=values.shape[1],
        height=values.shape[0],
        count=1,
        dtype=values.dtype.name,
        crs=crs,
        transform=transform,
        nodata=-9999 if values.dtype.kind == "f" else None,
    ) as dst:
        dst.write(values, 1)
        if tags:
            dst.update_tags(**tags)


def _raster_inputs(contract, args: dict, workspace: Path) -> list[Path]:
    paths = []
    for d in contract.datasets:
        if d.kind == "raster" and d.name in args:
            given = args[d.name] if isinstance(args[d.name], list) else [args[d.name]]
            paths += [workspace / g for g in given]
    return paths


def test_the_catalogue_has_grid_readers() -> None:
    # Guards the parametrized tests below: an empty list would make them pass vacuously.
    assert {"zonal_statistics", "slope", "watershed", "sample_raster_at_points", "band_math"} <= set(GRID_READERS)
    assert "describe_dataset" not in GRID_READERS  # describing a lying grid is allowed


@pytest.mark.parametrize("operation", GRID_READERS)
def test_two_georeferencings_are_refused_before_the_engine(app, workspace, operation) -> None:
    contract = app.host.contracts[operation]
    args = build_arguments(contract, workspace)
    rasters = _raster_inputs(contract, args, workspace)
    assert rasters
    for path in rasters:
        path.with_name(path.name + ".aux.xml").write_text(SIDECAR)
    with pytest.raises(InputError) as err:
        app.run(operation, args)
    assert err.value.code == "GEOREF_CONFLICT"
    readings = {r["source"]: r for r in err.value.evidence["readings"]}
    assert readings["PAM"]["transform"] == [600000.0, 20.0, 0.0, 5040000.0, 0.0, -20.0]
    assert readings["INTERNAL"]["transform"] == [499900.0, 10.0, 0.0, 5000200.0, 0.0, -10.0]
    assert "GDAL_GEOREF_SOURCES=INTERNAL" in err.value.hint and "sidecar" in err.value.hint
    # refused before the engine: nothing written, not even a failure record
    assert not [p for p in workspace.iterdir() if p.name.startswith("out")]


@pytest.mark.parametrize("operation", GRID_READERS)
def test_a_rotated_grid_is_refused(app, workspace, operation) -> None:
    contract = app.host.contracts[operation]
    args = build_arguments(contract, workspace)
    for path in _raster_inputs(contract, args, workspace):
        with rasterio.open(path) as src:
            data, profile = src.read(1), src.profile
        profile["transform"] = Affine(10, 2, 499_900, 2, -10, 5_000_200)
        path.unlink()
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(data, 1)
    with pytest.raises(InputError) as err:
        app.run(operation, args)
    assert err.value.code == "RASTER_ROTATED"
    assert not [p for p in workspace.iterdir() if p.name.startswith("out")]


def test_describe_lists_both_readings_and_warns(app, workspace) -> None:
    write_grid(workspace / "a.tif", np.ones((2, 2), "float32"), from_origin(500_000, 5_030_000, 10, 10))
    (workspace / "a.tif.aux.xml").write_text(SIDECAR)
    answer = app.run("describe_dataset", {"input_path": "a.tif"}).answer
    georef = answer["georeferencing"]
    assert georef["conflict"] is True
    assert georef["source_used"] == "PAM"  # what GDAL would silently use
    by_source = {r["source"]: r for r in georef["readings"]}
    assert by_source["INTERNAL"]["transform"] == [500000.0, 10.0, 0.0, 5030000.0, 0.0, -10.0]
    assert by_source["INTERNAL"]["crs"] == "EPSG:32610"
    assert by_source["PAM"]["transform"] == [600000.0, 20.0, 0.0, 5040000.0, 0.0, -20.0]
    assert "GDAL_GEOREF_SOURCES=INTERNAL" in answer["georeferencing_warning"]


def test_describe_picks_no_reading_at_the_top_level_when_they_conflict(app, workspace) -> None:
    # tags: 10 m cells from (500000, 5030000); sidecar: 20 m cells from (600000, 5040000). Neither is the grid.
    write_grid(workspace / "a.tif", np.ones((2, 2), "float32"), from_origin(500_000, 5_030_000, 10, 10))
    (workspace / "a.tif.aux.xml").write_text(SIDECAR)
    answer = app.run("describe_dataset", {"input_path": "a.tif"}).answer
    grid = answer["grid"]
    for key in ("transform", "res", "north_up", "south_up", "rotated"):
        assert grid[key] is None, key
    assert grid["position_from"].startswith("georeferencing.readings")
    assert answer["described"]["bounds"] is None and answer["described"]["bounds_lonlat"] is None
    assert answer["described"]["crs"] == "EPSG:32610"  # both readings agree on the CRS: kept
    # what does not depend on the position is still described
    assert (grid["width"], grid["height"]) == (2, 2)
    assert answer["bands"][0]["statistics"]["valid_count"] == 4
    assert len(answer["georeferencing"]["readings"]) == 2


def test_describe_clean_twins_a_single_reading_or_a_chosen_one_is_at_the_top_level(
    make_app, workspace, monkeypatch
) -> None:
    write_grid(workspace / "one.tif", np.ones((2, 2), "float32"), from_origin(500_000, 5_030_000, 10, 10))
    answer = make_app().run("describe_dataset", {"input_path": "one.tif"}).answer
    assert answer["grid"]["transform"] == [500000.0, 10.0, 0.0, 5030000.0, 0.0, -10.0]
    assert answer["described"]["bounds"] == [500000.0, 5029980.0, 500020.0, 5030000.0]
    assert "position_from" not in answer["grid"]
    # two readings, but the caller chose the tags: their reading is the description
    write_grid(workspace / "a.tif", np.ones((2, 2), "float32"), from_origin(500_000, 5_030_000, 10, 10))
    (workspace / "a.tif.aux.xml").write_text(SIDECAR)
    monkeypatch.setenv("GDAL_GEOREF_SOURCES", "INTERNAL")
    chosen = make_app(GDAL_GEOREF_SOURCES="INTERNAL").run("describe_dataset", {"input_path": "a.tif"}).answer
    assert chosen["grid"]["transform"] == [500000.0, 10.0, 0.0, 5030000.0, 0.0, -10.0]
    assert chosen["grid"]["res"] == [10.0, 10.0]


def test_describe_a_raster_reports_bands_statistics_and_grid(app, workspace) -> None:
    values = np.arange(1, 13, dtype="float32").reshape(3, 4)
    values[2, 3] = -9999  # nodata: excluded from the statistics
    write_grid(workspace / "g.tif", values, from_origin(1000, 2000, 5, 5), AREA_OR_POINT="Point")
    answer = app.run("describe_dataset", {"input_path": "g.tif"}).answer
    (band,) = answer["bands"]
    stats = band["statistics"]
    # 1..11: mean 6, population stdev sqrt((11^2 - 1) / 12) = sqrt(10)
    assert stats["valid_count"] == 11 and stats["min"] == 1 and stats["max"] == 11
    assert stats["mean"] == pytest.approx(6.0)
    assert stats["stdev"] == pytest.approx(10**0.5)
    assert band["nodata"] == -9999 and band["dtype"] == "float32"
    grid = answer["grid"]
    assert (grid["width"], grid["height"], grid["res"]) == (4, 3, [5.0, 5.0])
    assert grid["area_or_point"] == "Point" and grid["north_up"] is True
    assert answer["described"]["crs"] == "EPSG:32610"
    assert answer["described"]["bounds"] == [1000.0, 1985.0, 1020.0, 2000.0]


def test_a_chosen_georeferencing_source_is_accepted_and_recorded(make_app, workspace, monkeypatch) -> None:
    pytest.importorskip("mapsmith_opensource.raster_ops")
    if "extract_band" not in CONTRACTS:
        pytest.skip("extract_band not in the catalogue")
    values = np.arange(4, dtype="float32").reshape(2, 2)
    write_grid(workspace / "a.tif", values, from_origin(500_000, 5_030_000, 10, 10))
    (workspace / "a.tif.aux.xml").write_text(SIDECAR)
    monkeypatch.setenv("GDAL_GEOREF_SOURCES", "INTERNAL")
    app = make_app(GDAL_GEOREF_SOURCES="INTERNAL")
    app.run("extract_band", {"input_path": "a.tif", "band": "1", "output_path": "b.tif"})
    record = json.loads((workspace / "b.tif.provenance.json").read_text("utf-8"))
    (source,) = record["inputs"]
    assert source["environment"] == {"GDAL_GEOREF_SOURCES": "INTERNAL"}
    assert record["environment"]["GDAL_GEOREF_SOURCES"] == "INTERNAL"
    monkeypatch.delenv("GDAL_GEOREF_SOURCES")
    with rasterio.open(workspace / "b.tif") as out:  # the tags' position, not the sidecar's
        assert out.transform == from_origin(500_000, 5_030_000, 10, 10)


def test_a_south_up_grid_is_read_north_up(app, workspace) -> None:
    if "extract_band" not in CONTRACTS:
        pytest.skip("extract_band not in the catalogue")
    north = np.arange(12, dtype="float32").reshape(3, 4)
    write_grid(workspace / "south.tif", north[::-1].copy(), Affine(10, 0, 1000, 0, 10, 1970))
    answer = app.run("describe_dataset", {"input_path": "south.tif"}).answer
    assert answer["grid"]["south_up"] is True
    result = app.run("extract_band", {"input_path": "south.tif", "band": "1", "output_path": "n.tif"})
    with rasterio.open(workspace / "n.tif") as out:
        assert out.transform == from_origin(1000, 2000, 10, 10)
        np.testing.assert_array_equal(out.read(1), north)
    assert any("south-up" in n for n in result.notes)


def test_a_stale_sidecar_beside_the_output_is_refused(app, workspace) -> None:
    if "extract_band" not in CONTRACTS:
        pytest.skip("extract_band not in the catalogue")
    write_grid(workspace / "a.tif", np.ones((2, 2), "float32"), from_origin(500_000, 5_030_000, 10, 10))
    (workspace / "b.tif.aux.xml").write_text(SIDECAR)
    with pytest.raises(OutputError) as err:
        app.run("extract_band", {"input_path": "a.tif", "band": "1", "output_path": "b.tif"})
    assert err.value.code == "OUTPUT_SIDECAR_EXISTS"
    assert err.value.evidence["sidecars"] == ["b.tif.aux.xml"]


def test_a_vector_where_a_raster_belongs_is_refused(app, workspace) -> None:
    if not GRID_READERS:
        pytest.skip("no grid reader in the catalogue")
    operation = GRID_READERS[0]
    contract = app.host.contracts[operation]
    args = build_arguments(contract, workspace)
    name = next(d.name for d in contract.datasets if d.kind == "raster" and not d.multiple)
    vector = build_arguments(app.host.contracts["buffer_layer"], workspace)["input_path"]
    with pytest.raises(InputError) as err:
        app.run(operation, {**args, name: vector})
    assert err.value.code == "DATASET_KIND_MISMATCH"
    assert err.value.evidence == {
        "argument": name,
        "path": vector,
        "expected": "raster",
        "found": "vector",
    }


def test_a_missing_extra_is_refused_with_the_install_command(app, workspace, monkeypatch) -> None:
    from mapsmith_opensource import extras

    if not GRID_READERS:
        pytest.skip("no grid reader in the catalogue")
    monkeypatch.setitem(extras.EXTRAS, "raster", ("rasterio", "no_such_engine_module"))
    monkeypatch.setitem(extras.EXTRAS, "whitebox", ("rasterio", "no_such_engine_module"))
    operation = GRID_READERS[0]
    with pytest.raises(OperationUnavailable) as err:
        app.run(operation, build_arguments(app.host.contracts[operation], workspace))
    assert err.value.code == "STACK_UNAVAILABLE"
    # the fix installs the extra from this MapSmith's own source, never PyPI's unrelated 'mapsmith'
    # Under a workspace, host paths in a refusal are redacted (the install folder too); server_info, which
    # the operator reads, carries the whole command.
    assert "-m pip install" in err.value.hint and "[whitebox]'" in err.value.hint
    assert "no_such_engine_module" in str(err.value)


# -- the output checks themselves --------------------------------------------------------------


def _written(**grid: object) -> DatasetInfo:
    base = {"width": 4, "height": 3, "transform": [0.0, 1.0, 0.0, 3.0, 0.0, -1.0], "nodata": -9999.0}
    return DatasetInfo(
        path="out.tif",
        kind="raster",
        driver="GTiff",
        layer=None,
        layers=(),
        crs_wkt="x",
        crs_label="EPSG:32610",
        crs_is_geographic=False,
        feature_count=None,
        geometry_types=(),
        bounds=None,
        bounds_lonlat=None,
        grid={**base, **grid},
    )


def test_raster_output_checks_catch_a_moved_grid_a_lost_nodata_and_values_out_of_range() -> None:
    # a contract promising the range check
    contract = dataclasses.replace(
        CONTRACTS["describe_dataset"], checks=("values_in_expected_range", "result_not_empty")
    )
    expected = {
        "width": 4,
        "height": 3,
        "transform": [0.0, 1.0, 0.0, 3.0, 0.0, -1.0],
        "nodata": -9999.0,
        "value_range": [0.0, 90.0],
    }
    stats = [{"band": 1, "valid_count": 12, "min": 0.0, "max": 90.0}]
    good = raster_output_checks(
        contract, _written(statistics=stats), expected, expected_crs_label=None, crs_equal=True, input_grid=None
    )
    assert all(c.passed for c in good), [c.to_dict() for c in good]
    moved = raster_output_checks(
        contract,
        _written(statistics=stats, transform=[0.5, 1.0, 0.0, 3.0, 0.0, -1.0], nodata=None),
        expected,
        expected_crs_label=None,
        crs_equal=True,
        input_grid=None,
    )
    failed = {c.name for c in moved if not c.passed}
    assert failed == {"x-mapsmith:grid_matches", "x-mapsmith:nodata_declared"}
    high = [{"band": 1, "valid_count": 12, "min": 0.0, "max": 90.5}]
    out_of_range = raster_output_checks(
        contract, _written(statistics=high), expected, expected_crs_label=None, crs_equal=True, input_grid=None
    )
    assert {c.name for c in out_of_range if not c.passed} == {"values_in_expected_range"}
    empty = [{"band": 1, "valid_count": 0, "min": None, "max": None}]
    checks = raster_output_checks(
        contract, _written(statistics=empty), expected, expected_crs_label=None, crs_equal=True, input_grid=None
    )
    not_empty = next(c for c in checks if c.name == "result_not_empty")
    assert not not_empty.passed and not not_empty.critical
