"""get_lineage and replay on real chains run through MapSmith, with answers worked out beforehand.

The chain: one well at (500000, 5100000) in EPSG:32610 is buffered by 100 m (a 64-gon: 16 segments
per quarter circle), the buffer clips three 200 m x 400 m parcels (west and east share the line
x = 500000 through the well, so each keeps exactly half the 64-gon; "far" lies 900 m away and is
dropped), and measure_area adds the ground area. So the last file has 3 hops behind it and 2
originals (parcels, read first by clip_layer as its input_path, then wells).

A 64-gon of radius r has area 32 sin(pi/32) r^2, so a 101 m buffer exceeds a 100 m one by
32 sin(pi/32) (101^2 - 100^2) = 3.1365485 * 201 = 630.446 m^2, planar in UTM, where the buffer is
computed. (A true circle would differ by pi * 201 = 631.46 m^2; the polygon is 0.16 % smaller.)
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import write_layer
from mapsmith.errors import ConfigurationError, InputError, PathError
from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.replay import get_lineage, replay

POLYGON64_FACTOR = 32 * math.sin(math.pi / 32)  # 3.1365484905...
WELL = (500_000.0, 5_100_000.0)
RECORDS = ["buffer.gpkg.provenance.json", "near.gpkg.provenance.json", "near_area.gpkg.provenance.json"]


def _originals(workspace: Path, *, parcels_crs: str = "EPSG:32610", suffix: str = ".gpkg") -> None:
    write_layer(workspace / f"wells{suffix}", [Point(*WELL)], "EPSG:32610", well=["w1"])
    x, y = WELL
    parcels = [
        box(x - 200, y - 200, x, y + 200),
        box(x, y - 200, x + 200, y + 200),
        box(x + 1000, y, x + 1200, y + 400),
    ]
    if parcels_crs != "EPSG:32610":
        import geopandas as gpd

        parcels = list(gpd.GeoSeries(parcels, crs="EPSG:32610").to_crs(parcels_crs))
    write_layer(workspace / f"parcels{suffix}", parcels, parcels_crs, parcel=["west", "east", "far"])


def _chain(app: Any, workspace: Path, suffix: str = ".gpkg", **kw: str) -> None:
    _originals(workspace, suffix=suffix, **kw)
    app.run("buffer_layer", {"input_path": f"wells{suffix}", "distance_meters": 100, "output_path": f"buffer{suffix}"})
    app.run(
        "clip_layer",
        {"input_path": f"parcels{suffix}", "mask_path": f"buffer{suffix}", "output_path": f"near{suffix}"},
    )
    app.run("measure_area", {"input_path": f"near{suffix}", "output_path": f"near_area{suffix}"})


def _snapshot(workspace: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(workspace).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in workspace.rglob("*")}


# -- get_lineage --------------------------------------------------------------------------------


def test_lineage_of_the_last_file_lists_three_hops_from_the_originals(app, workspace: Path) -> None:
    _chain(app, workspace)

    lineage = get_lineage(app, "near_area.gpkg")

    assert lineage["path"] == "near_area.gpkg" and lineage["sha256"] == dataset_digest(workspace / "near_area.gpkg")
    assert [(h["position"], h["operation"], h["output_path"], h["record"]) for h in lineage["hops"]] == [
        (1, "buffer_layer", "buffer.gpkg", RECORDS[0]),
        (2, "clip_layer", "near.gpkg", RECORDS[1]),
        (3, "measure_area", "near_area.gpkg", RECORDS[2]),
    ]
    assert [h["output_at_recorded_path"] for h in lineage["hops"]] == ["matches"] * 3
    clip = lineage["hops"][1]
    assert [(i["argument"], i["path"], i["produced_by"]) for i in clip["inputs"]] == [
        ("input_path", "parcels.gpkg", None),
        ("mask_path", "buffer.gpkg", RECORDS[0]),
    ]
    assert [(o["path"], o["status"]) for o in lineage["originals"]] == [
        ("parcels.gpkg", "present"),
        ("wells.gpkg", "present"),
    ]
    assert [(s["path"], s["kind"], s["read_by"]["operation"]) for s in lineage["stops"]] == [
        ("parcels.gpkg", "original", "clip_layer"),
        ("wells.gpkg", "original", "buffer_layer"),
    ]
    assert lineage["found"] and lineage["complete"] and lineage["history_sound"]
    assert lineage["failed_checks"] == []
    # the tree is the walk itself, with workspace-relative paths
    assert lineage["tree"]["path"] == "near_area.gpkg"
    assert lineage["tree"]["producers"][0]["record"] == RECORDS[2]


def test_renaming_an_intermediate_does_not_break_the_walk(app, workspace: Path) -> None:
    _chain(app, workspace)
    # the buffer and its record move together; the clip record still names buffer.gpkg
    (workspace / "buffer.gpkg").rename(workspace / "corridor.gpkg")
    (workspace / RECORDS[0]).rename(workspace / "corridor.gpkg.provenance.json")

    lineage = get_lineage(app, "near_area.gpkg")

    assert [h["operation"] for h in lineage["hops"]] == ["buffer_layer", "clip_layer", "measure_area"]
    buffer = lineage["hops"][0]
    assert buffer["record"] == "corridor.gpkg.provenance.json"
    assert (buffer["output_path"], buffer["output_at_recorded_path"], buffer["found_at"]) == (
        "buffer.gpkg",
        "missing",
        "corridor.gpkg",
    )
    assert lineage["complete"] and [o["path"] for o in lineage["originals"]] == ["parcels.gpkg", "wells.gpkg"]


def test_a_changed_original_stops_the_walk_there_with_the_reason(app, workspace: Path) -> None:
    _chain(app, workspace)
    recorded = dataset_digest(workspace / "wells.gpkg")
    (workspace / "wells.gpkg").unlink()
    write_layer(workspace / "wells.gpkg", [Point(WELL[0] + 1, WELL[1])], "EPSG:32610", well=["w1"])
    now = dataset_digest(workspace / "wells.gpkg")

    lineage = get_lineage(app, "near_area.gpkg")

    assert len(lineage["hops"]) == 3 and not lineage["complete"]
    (stop,) = [s for s in lineage["stops"] if s["path"] == "wells.gpkg"]
    assert (stop["kind"], stop["sha256"], stop["sha256_now"]) == ("original_changed", recorded, now)
    assert "changed after the chain ran" in stop["reason"]
    assert [(o["path"], o["status"]) for o in lineage["originals"]] == [
        ("parcels.gpkg", "present"),
        ("wells.gpkg", "changed"),
    ]
    with pytest.raises(InputError) as info:
        replay(app, "near_area.gpkg")
    assert info.value.code == "REPLAY_ORIGINAL_CHANGED"
    assert [o["path"] for o in info.value.evidence["originals"]] == ["wells.gpkg"]


def test_a_missing_original_is_named_and_replay_refuses(app, workspace: Path) -> None:
    _chain(app, workspace)
    (workspace / "parcels.gpkg").unlink()

    (stop,) = [s for s in get_lineage(app, "near_area.gpkg")["stops"] if s["path"] == "parcels.gpkg"]
    assert stop["kind"] == "original_missing" and "no dataset at parcels.gpkg" in stop["reason"]
    with pytest.raises(InputError) as info:
        replay(app, "near_area.gpkg")
    assert info.value.code == "REPLAY_ORIGINAL_MISSING"


def test_a_failed_non_critical_check_on_the_way_is_reported(app, workspace: Path) -> None:
    # Parcels in EPSG:4326, buffer in EPSG:32610: clip_layer records inputs_share_crs as failed,
    # critical false (it transforms the mask and says so), so that hop is reported and not sound.
    _chain(app, workspace, parcels_crs="EPSG:4326")

    lineage = get_lineage(app, "near_area.gpkg")

    assert [(c["operation"], c["record"], c["name"], c["severity"]) for c in lineage["failed_checks"]] == [
        ("clip_layer", RECORDS[1], "inputs_share_crs", "non-critical")
    ]
    assert "EPSG:4326" in lineage["failed_checks"][0]["detail"]
    assert [h["sound"] for h in lineage["hops"]] == [True, False, True]
    assert lineage["complete"] and not lineage["history_sound"]


def test_a_file_no_record_claims_is_an_original_and_cannot_be_replayed(app, workspace: Path) -> None:
    _originals(workspace)

    lineage = get_lineage(app, "wells.gpkg")

    assert (lineage["found"], lineage["hops"]) == (False, [])
    assert [s["kind"] for s in lineage["stops"]] == ["no_record"]
    with pytest.raises(InputError) as info:
        replay(app, "wells.gpkg")
    assert info.value.code == "REPLAY_NO_RECORD"


def test_a_file_changed_after_its_record_is_reported_as_such(app, workspace: Path) -> None:
    _chain(app, workspace)
    target = workspace / "near_area.gpkg"
    kept = target.read_bytes()
    target.write_bytes(kept + b"\0")
    try:
        lineage = get_lineage(app, "near_area.gpkg")
    finally:
        target.write_bytes(kept)  # the workspace fixture checks every record against its bytes
    (stop,) = lineage["stops"]
    assert (stop["kind"], stop["record"]) == ("record_no_longer_matches", RECORDS[2])
    assert stop["record_claims_sha256"] == dataset_digest(target) and not lineage["found"]


@pytest.mark.parametrize("function", [get_lineage, replay])
def test_paths_outside_the_workspace_are_refused_with_the_workspace_error(app, workspace: Path, function) -> None:
    (workspace.parent / "outside.gpkg").write_bytes(b"x")
    with pytest.raises(PathError) as info:
        function(app, "../outside.gpkg")
    assert info.value.code == "PATH_OUTSIDE_WORKSPACE"


# -- replay ---------------------------------------------------------------------------------------


def test_replay_of_a_geopackage_chain_is_byte_identical(app, workspace: Path) -> None:
    # io.write_layer pins gpkg_contents.last_change (GDAL's OGR_CURRENT_DATE); without it every
    # re-run GeoPackage would differ in those bytes and this verdict would be "content_identical".
    _chain(app, workspace)
    before = _snapshot(workspace)

    result = replay(app, "near_area.gpkg")

    assert _snapshot(workspace) == before  # nothing written, touched or left in the real workspace
    assert (result["identical"], result["verdict"], result["first_difference"], result["scratch"]) == (
        True,
        "identical",
        None,
        None,
    )
    assert [(s["operation"], s["result"]) for s in result["steps"]] == [
        ("buffer_layer", "identical"),
        ("clip_layer", "identical"),
        ("measure_area", "identical"),
    ]
    assert result["steps"][0]["arguments"] == {
        "input_path": "wells.gpkg",
        "distance_meters": 100,
        "segments_per_quarter_circle": 16,
        "output_path": "buffer.gpkg",
    }
    assert result["steps"][1]["arguments"] == {
        "input_path": "parcels.gpkg",
        "mask_path": "buffer.gpkg",
        "output_path": "near.gpkg",
    }


@pytest.mark.parametrize("suffix", [".fgb", ".geojson"])
def test_a_flatgeobuf_or_geojson_hop_replays_to_identical_bytes(app, workspace: Path, suffix: str) -> None:
    # io.write_layer names the layer after the final output for every OGR format, so these files no
    # longer carry the runner's random temporary name (".out.tmp-<8 hex>") and nothing else varies.
    write_layer(workspace / "pt.gpkg", [Point(-122.2, 46.2)], "EPSG:4326", id=[1])
    app.run("buffer_layer", {"input_path": "pt.gpkg", "distance_meters": 100, "output_path": f"out{suffix}"})

    result = replay(app, f"out{suffix}")

    assert (result["identical"], result["verdict"]) == (True, "identical")
    assert result["summary"] == "all 1 step(s) re-ran to byte-identical outputs"


def test_byte_differences_are_explained_only_when_a_known_cause_covers_every_byte(tmp_path: Path) -> None:
    from mapsmith.provenance.replay import _byte_difference

    def pair(first: bytes, second: bytes) -> dict[str, Any]:
        (tmp_path / "a.fgb").write_bytes(first)
        (tmp_path / "b.fgb").write_bytes(second)
        return _byte_difference(tmp_path / "a.fgb", tmp_path / "b.fgb")

    # two runs' temporary names: 8 hex digits, of which these differ in 3
    named = pair(b"fgb\x03name.out.tmp-0123abcd\x00rest", b"fgb\x03name.out.tmp-0923ab0e\x00rest")
    assert (named["explained"], named["causes"], named["bytes_differing"]) == (True, ["temporary_layer_name"], 3)
    # the same name difference plus one byte elsewhere: not explained, whatever else matches
    other = pair(b"fgb\x03name.out.tmp-0123abcd\x00rest", b"fgb\x03name.out.tmp-0923ab0e\x00resT")
    assert (other["explained"], other["causes"], other["bytes_differing"]) == (False, [], 4)
    assert "no known cause" in other["explanation"]


def test_replay_of_a_geoparquet_chain_is_byte_identical(app, workspace: Path) -> None:
    _chain(app, workspace, suffix=".parquet")

    result = replay(app, "near_area.parquet")

    assert (result["identical"], result["verdict"]) == (True, "identical")
    assert [s["result"] for s in result["steps"]] == ["identical"] * 3
    assert all(s["replayed_sha256"] == s["recorded_sha256"] for s in result["steps"])


def test_replay_after_a_rename_still_compares_with_the_recorded_bytes(app, workspace: Path) -> None:
    _chain(app, workspace)
    (workspace / "buffer.gpkg").rename(workspace / "corridor.gpkg")
    (workspace / RECORDS[0]).rename(workspace / "corridor.gpkg.provenance.json")

    result = replay(app, "near_area.gpkg")

    assert result["verdict"] == "identical"
    assert result["steps"][0]["output_path"] == "buffer.gpkg" and result["steps"][0]["result"] == "identical"


def test_a_tampered_parameter_makes_the_buffer_the_first_step_that_differs(app, workspace: Path) -> None:
    _chain(app, workspace)
    record_path = workspace / RECORDS[0]
    record = json.loads(record_path.read_text("utf-8"))
    assert record["parameters"]["distance_meters"] == 100
    # The record still claims the same output digest: the walk finds it, the replay runs 101 m.
    record["parameters"]["distance_meters"] = 101
    record_path.write_text(json.dumps(record), "utf-8")

    result = replay(app, "near_area.gpkg")

    assert (result["identical"], result["verdict"]) == (False, "different")
    first = result["first_difference"]
    assert (first["position"], first["operation"], first["record"]) == (1, "buffer_layer", RECORDS[0])
    assert first["arguments"]["distance_meters"] == 101
    comparison = first["comparison"]
    assert comparison["feature_count"] == {"recorded": 1, "replayed": 1, "difference": 0}
    assert comparison["geometries_differing"] == 1
    area = comparison["total_area"]
    assert area["recorded"] == pytest.approx(POLYGON64_FACTOR * 100**2, rel=1e-9)  # 31,365.48 m2
    assert area["difference"] == pytest.approx(POLYGON64_FACTOR * (101**2 - 100**2), rel=1e-6)  # 630.446 m2
    assert area["unit"] == "square metre" and area["planar_in_dataset_crs"]
    assert comparison["fields"]["changed"] == {}
    # downstream, the clip carries the same 630.446 m2 (both halves lie well inside their parcels)
    clip = result["steps"][1]
    assert clip["result"] == "content_differs"
    assert clip["comparison"]["total_area"]["difference"] == pytest.approx(POLYGON64_FACTOR * 201, rel=1e-6)
    # measure_area's area_m2 field grows by the same amount on the ground, within UTM's scale error
    changed = result["steps"][2]["comparison"]["fields"]["changed"]["area_m2"]
    assert changed["rows_differing"] == 2
    assert changed["sum"]["difference"] == pytest.approx(POLYGON64_FACTOR * 201, rel=2e-3)


def test_keep_returns_the_scratch_folder_with_the_replayed_chain(app, workspace: Path) -> None:
    _chain(app, workspace, suffix=".parquet")

    result = replay(app, "near_area.parquet", keep=True)

    scratch = Path(result["scratch"])
    try:
        assert not scratch.is_relative_to(workspace)
        replayed = scratch / "workspace"
        assert {p.name for p in replayed.glob("*.parquet")} == {
            "wells.parquet",
            "parcels.parquet",
            "buffer.parquet",
            "near.parquet",
            "near_area.parquet",
        }
        assert dataset_digest(replayed / "near_area.parquet") == dataset_digest(workspace / "near_area.parquet")
    finally:
        shutil.rmtree(scratch)


def test_a_slope_hop_replays_to_identical_digests(app, workspace: Path) -> None:
    pytest.importorskip("whitebox_workflows", reason="the [whitebox] extra is not installed")
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    # the plane z = 0.1 x + 0.2 y on a 50 x 40 grid of 10 m cells
    rows, cols = np.mgrid[0:40, 0:50]
    z = (0.1 * (cols + 0.5) * 10 + 0.2 * (40 - rows - 0.5) * 10).astype("float32")
    profile = {"driver": "GTiff", "width": 50, "height": 40, "count": 1, "dtype": "float32", "nodata": -9999}
    with rasterio.open(
        workspace / "plane.tif", "w", crs="EPSG:32610", transform=from_origin(*WELL, 10, 10), **profile
    ) as dst:
        dst.write(z, 1)
    app.run("slope", {"input_path": "plane.tif", "units": "degrees", "output_path": "slope.tif"})

    result = replay(app, "slope.tif")

    assert (result["identical"], result["verdict"]) == (True, "identical")
    (step,) = result["steps"]
    assert (step["operation"], step["result"], step["replayed_sha256"]) == (
        "slope",
        "identical",
        dataset_digest(workspace / "slope.tif"),
    )
    assert step["arguments"]["input_path"] == "plane.tif" and step["arguments"]["units"] == "degrees"


def test_replay_refuses_a_scratch_folder_inside_the_workspace(app, workspace: Path, monkeypatch) -> None:
    import tempfile

    _chain(app, workspace, suffix=".parquet")
    before = _snapshot(workspace)
    monkeypatch.setattr(tempfile, "tempdir", str(workspace))

    with pytest.raises(ConfigurationError) as info:
        replay(app, "near_area.parquet")

    assert info.value.code == "REPLAY_SCRATCH_IN_WORKSPACE"
    assert _snapshot(workspace) == before


# -- determinism of each writer (the finding behind the replay verdicts above) --------------------


@pytest.mark.parametrize(
    ("suffix", "reproducible"),
    [
        (".parquet", True),
        # gpkg_contents.last_change is pinned by io.write_layer (otherwise GDAL's clock)
        (".gpkg", True),
        # reproducible since io.write_layer names their layer (before, the runner's random temp name)
        (".fgb", True),
        (".geojson", True),
    ],
)
def test_writing_the_same_buffer_twice_gives_the_same_bytes(
    app, workspace: Path, suffix: str, reproducible: bool
) -> None:
    crs = "EPSG:4326" if suffix == ".geojson" else "EPSG:32610"  # RFC 7946 GeoJSON is WGS 84
    write_layer(workspace / "pt.gpkg", [Point(-122.2, 46.2) if suffix == ".geojson" else Point(*WELL)], crs, id=[1])
    for folder in ("a", "b"):  # same file name, so a GeoPackage gets the same layer name
        (workspace / folder).mkdir()
        app.run(
            "buffer_layer", {"input_path": "pt.gpkg", "distance_meters": 100, "output_path": f"{folder}/out{suffix}"}
        )
    first, second = (workspace / f / f"out{suffix}" for f in ("a", "b"))
    assert (first.read_bytes() == second.read_bytes()) is reproducible
