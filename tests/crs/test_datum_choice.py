"""Which datum transformation MapSmith applies, and when it refuses a ballpark.

Expectations are computed in each test from PROJ's own candidate lists (``TransformerGroup``)
and the EPSG registry's stated accuracies, independently of the chooser under test, and checked
against magnitudes known from geodesy (NAD27 to WGS 84 is tens of metres in Kansas; OSGB36 to
ETRS89 about 100 m in England). They describe this machine: PROJ data without the NADCON and
OSTN15 grids, network off.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyproj
import pytest
from pyproj.transformer import AreaOfInterest, TransformerGroup
from shapely.geometry import Point

from layers import manifest, read, write_layer
from mapsmith import crs as mcrs
from mapsmith.crs_transform import _is_ballpark
from mapsmith.errors import CRSError

pytestmark = pytest.mark.filterwarnings("ignore:Best transformation is not available:UserWarning")

KANSAS = (-100.0, 38.0, -98.0, 40.0)  # around Meades Ranch, NAD27's origin (98.54 W, 39.22 N)
ENGLAND_MIDLANDS = (-2.0, 52.0, -1.0, 53.0)
PARIS = (2.2, 48.8, 2.45, 48.9)


def _on_disk(name: str) -> bool:
    dirs = pyproj.datadir.get_data_dir().split(os.pathsep) + [pyproj.datadir.get_user_data_dir()]
    return any((Path(d) / name).exists() for d in dirs)


needs_no_grids = pytest.mark.skipif(
    any(_on_disk(g) for g in ("us_noaa_conus.tif", "uk_os_OSTN15_NTv2_OSGBtoETRS.tif", "ntf_r93.gsb"))
    or pyproj.network.is_network_enabled(),
    reason="expectations describe a machine without NADCON, OSTN15 and the NTF grid",
)


def _contains(area: tuple[float, float, float, float], aoi: tuple[float, float, float, float]) -> bool:
    return area[0] <= aoi[0] and area[1] <= aoi[1] and aoi[2] <= area[2] and aoi[3] <= area[3]


def _best_leg(src: str, dst: str, aoi: tuple[float, float, float, float] | None) -> pyproj.Transformer:
    group = TransformerGroup(src, dst, always_xy=True, area_of_interest=None if aoi is None else AreaOfInterest(*aoi))
    return next(t for t in group.transformers if not _is_ballpark(t))


@needs_no_grids
def test_nad27_to_wgs84_over_kansas_takes_the_most_accurate_operation_covering_it() -> None:
    group = TransformerGroup("EPSG:4267", "EPSG:4326", always_xy=True, area_of_interest=AreaOfInterest(*KANSAS))
    # By hand from PROJ's list: of the operations that shift the datum and whose area of use holds
    # the whole of Kansas, the one with the smallest stated error.
    covering = [t for t in group.transformers if not _is_ballpark(t) and _contains(t.area_of_use.bounds, KANSAS)]
    expected = min(covering, key=lambda t: t.accuracy)
    # EPSG:1175 "NAD27 to WGS 84 (6)", CONUS west of the Mississippi, (-8, 159, 175) m, 7 m.
    assert "NAD27 to WGS 84 (6)" in expected.description and expected.accuracy == 7.0

    transformer, record = mcrs.choose_transformer("EPSG:4267", "EPSG:4326", KANSAS, allow_ballpark=False)
    assert record["x-mapsmith:description"] == expected.description
    assert record["accuracy_m"] == 7.0 and record["is_ballpark"] is False
    chosen_by = record["x-mapsmith:chosen_by"]
    assert chosen_by["intermediate_crs"] is None
    # Every candidate PROJ offered, runnable or not, is recorded with a verdict.
    considered = {c["operation"]: c for c in chosen_by["considered"]}
    assert set(considered) == {t.description for t in group.transformers} | {
        op.name for op in group.unavailable_operations
    }
    assert considered[expected.description]["verdict"] == "chosen"
    for t in covering:
        if t is not expected:
            assert considered[t.description]["verdict"] == f"less accurate ({t.accuracy:g} m against 7 m)"
    for op in group.unavailable_operations:
        assert considered[op.name]["verdict"].startswith("not runnable here: needs grid files not installed")
    # The shift is the NAD27 one: tens of metres at Meades Ranch, not zero and not hundreds.
    lon, lat = transformer.transform(-98.54, 39.22)
    assert 10.0 < pyproj.Geod(ellps="WGS84").inv(-98.54, 39.22, lon, lat)[2] < 100.0


@needs_no_grids
def test_osgb36_to_etrs89_without_ostn15_goes_through_wgs84_rather_than_a_ballpark() -> None:
    # PROJ's direct list is the ballpark alone (OSTN15, 0.03 m, needs a missing grid).
    direct = TransformerGroup(
        "EPSG:4277", "EPSG:4258", always_xy=True, area_of_interest=AreaOfInterest(*ENGLAND_MIDLANDS)
    )
    assert [_is_ballpark(t) for t in direct.transformers] == [True]
    # Through WGS 84: EPSG "OSGB36 to WGS 84 (6)" (2 m) and "ETRS89 to WGS 84 (1)" inverted (1 m).
    leg1 = _best_leg("EPSG:4277", "EPSG:4326", ENGLAND_MIDLANDS)
    leg2 = _best_leg("EPSG:4326", "EPSG:4258", ENGLAND_MIDLANDS)
    assert (leg1.accuracy, leg2.accuracy) == (2.0, 1.0)

    transformer, record = mcrs.choose_transformer("EPSG:4277", "EPSG:4258", ENGLAND_MIDLANDS, allow_ballpark=False)
    assert record["is_ballpark"] is False
    assert record["accuracy_m"] == 3.0  # accuracies of concatenated legs add
    assert record["x-mapsmith:chosen_by"]["intermediate_crs"] == "EPSG:4326"
    assert record["x-mapsmith:description"] == "OSGB36 to WGS 84 (6) + Inverse of ETRS89 to WGS 84 (1)"
    x, y = leg2.transform(*leg1.transform(-1.5, 52.5))
    got = transformer.transform(-1.5, 52.5)
    assert got == pytest.approx((x, y), abs=1e-9)
    # OSGB36 sits about 100 m from ETRS89 in the Midlands: the ballpark would have dropped it.
    assert 80.0 < pyproj.Geod(ellps="GRS80").inv(-1.5, 52.5, *got)[2] < 150.0
    verdicts = {c["operation"]: c["verdict"] for c in record["x-mapsmith:chosen_by"]["considered"]}
    assert verdicts[direct.transformers[0].description].startswith("ballpark")
    assert verdicts["OSGB36 to ETRS89 (2)"].startswith("not runnable here")
    assert record["x-mapsmith:better_unavailable"]["missing_grids"] == ["uk_os_OSTN15_NTv2_OSGBtoETRS.tif"]


def _ballpark_error_by_hand(points: list[tuple[float, float]]) -> float:
    """NAD27 -> ED50 as a datum shift would do it, against the ballpark (coordinates unchanged:
    both are Greenwich geographic CRSs), the largest distance on ED50's International 1924 ellipsoid.
    The shift: PROJ's widest NAD27 -> WGS 84 operation, then its widest WGS 84 -> ED50 one."""
    leg1, leg2 = _best_leg("EPSG:4267", "EPSG:4326", None), _best_leg("EPSG:4326", "EPSG:4230", None)
    geod = pyproj.Geod(ellps="intl")
    return max(geod.inv(lon, lat, *leg2.transform(*leg1.transform(lon, lat)))[2] for lon, lat in points)


@needs_no_grids
def test_a_ballpark_between_different_datums_is_refused_with_the_error_in_metres() -> None:
    # EPSG has no NAD27 -> ED50 operation, and none from WGS 84 to ED50 covers Kansas.
    with pytest.raises(CRSError) as info:
        mcrs.choose_transformer("EPSG:4267", "EPSG:4230", KANSAS, allow_ballpark=False)
    err = info.value
    assert err.code == "CRS_BALLPARK_REFUSED"
    corners = [(-99.0, 39.0), (-100.0, 38.0), (-98.0, 38.0), (-100.0, 40.0), (-98.0, 40.0)]
    expected = _ballpark_error_by_hand(corners)
    # ED50 lies ~100-200 m from WGS 84, NAD27 tens of metres: hundreds of metres in all.
    assert 100.0 < expected < 500.0
    assert err.evidence["expected_error_m"] == pytest.approx(expected, abs=0.05)
    assert f"about {err.evidence['expected_error_m']:g} m" in err.message
    assert "allow_ballpark=true" in err.hint and "resolve_crs" in err.hint


@needs_no_grids
def test_an_accepted_ballpark_is_applied_and_recorded_with_its_expected_error() -> None:
    transformer, record = mcrs.choose_transformer("EPSG:4267", "EPSG:4230", KANSAS, allow_ballpark=True)
    assert record["is_ballpark"] is True and record["accuracy_m"] is None
    assert transformer.transform(-98.54, 39.22) == pytest.approx((-98.54, 39.22), abs=1e-12)
    ballpark = record["x-mapsmith:chosen_by"]["ballpark"]
    assert ballpark["accepted_by"] == "allow_ballpark=true"
    corners = [(-99.0, 39.0), (-100.0, 38.0), (-98.0, 38.0), (-100.0, 40.0), (-98.0, 40.0)]
    assert ballpark["expected_error_m"] == pytest.approx(_ballpark_error_by_hand(corners), abs=0.05)


@needs_no_grids
def test_a_step_that_only_warns_gets_the_ballpark_with_its_error_recorded() -> None:
    # No allow_ballpark given (a second input aligned, a round trip): applied, never called the caller's choice.
    _, record = mcrs.choose_transformer("EPSG:4267", "EPSG:4230", KANSAS)
    ballpark = record["x-mapsmith:chosen_by"]["ballpark"]
    assert record["is_ballpark"] is True
    assert ballpark["accepted_by"].startswith("not refused: the calling step warns instead")
    corners = [(-99.0, 39.0), (-100.0, 38.0), (-98.0, 38.0), (-100.0, 40.0), (-98.0, 40.0)]
    assert ballpark["expected_error_m"] == pytest.approx(_ballpark_error_by_hand(corners), abs=0.05)


def test_a_ballpark_with_no_known_shift_is_refused_saying_the_error_is_unknown() -> None:
    # A datum known only by its ellipsoid: no operation anywhere to size the error with.
    with pytest.raises(CRSError) as info:
        mcrs.choose_transformer("+proj=longlat +ellps=clrk66 +type=crs", "EPSG:4326", KANSAS, allow_ballpark=False)
    assert info.value.code == "CRS_BALLPARK_REFUSED"
    assert info.value.evidence["expected_error_m"] is None
    assert "cannot be estimated" in info.value.message


def test_same_datum_projection_is_answered_without_ballpark_or_alternatives() -> None:
    # Clean twin: WGS 84 to its own UTM zone is a projection, exact, nothing to refuse.
    transformer, record = mcrs.choose_transformer(
        "EPSG:4326", "EPSG:32610", (-123.0, 45.0, -122.0, 46.0), allow_ballpark=False
    )
    assert record["is_ballpark"] is False and record["accuracy_m"] == 0.0
    assert "ballpark" not in record["x-mapsmith:chosen_by"]
    assert [c["verdict"] for c in record["x-mapsmith:chosen_by"]["considered"]] == ["chosen"]
    assert transformer.transform(-123.0, 45.0) == pytest.approx((500_000.0, 4_982_950.400), abs=0.01)


@pytest.mark.skipif(not Path("/usr/share/proj/ntf_r93.gsb").exists(), reason="needs the NTF grid file ntf_r93.gsb")
def test_an_installed_grid_beats_the_path_through_wgs84(tmp_path: Path) -> None:
    # NTF -> RGF93 v1 over Paris: without IGN's grid, WGS 84 is the pivot (NTF to WGS 84 (1), then
    # RGF93 to WGS 84 (1)); with ntf_r93.gsb on PROJ's path, EPSG "RGF93 v1 to NTF (2)" inverted, 1 m.
    original = pyproj.datadir.get_data_dir()
    if _on_disk("ntf_r93.gsb") or _on_disk("fr_ign_ntf_r93.tif"):
        pytest.skip("the grid is already on PROJ's path")
    _, without = mcrs.choose_transformer("EPSG:4275", "EPSG:4171", PARIS, allow_ballpark=False)
    leg1, leg2 = _best_leg("EPSG:4275", "EPSG:4326", PARIS), _best_leg("EPSG:4326", "EPSG:4171", PARIS)
    assert without["x-mapsmith:chosen_by"]["intermediate_crs"] == "EPSG:4326"
    assert without["accuracy_m"] == leg1.accuracy + leg2.accuracy
    shutil.copy("/usr/share/proj/ntf_r93.gsb", tmp_path / "ntf_r93.gsb")
    pyproj.datadir.append_data_dir(str(tmp_path))
    try:
        transformer, record = mcrs.choose_transformer("EPSG:4275", "EPSG:4171", PARIS, allow_ballpark=False)
    finally:
        pyproj.datadir.set_data_dir(original)
    assert record["x-mapsmith:description"].endswith("Inverse of RGF93 v1 to NTF (2) + axis order change (2D)")
    assert record["accuracy_m"] == 1.0 < without["accuracy_m"]
    assert record["x-mapsmith:chosen_by"]["intermediate_crs"] is None


# -- through reproject_layer ------------------------------------------------------------------


@needs_no_grids
def test_reproject_layer_refuses_a_ballpark_and_writes_nothing(app, workspace: Path) -> None:
    write_layer(workspace / "k.geojson", [Point(-98.54, 39.22)], "EPSG:4267", id=[1])
    with pytest.raises(CRSError) as info:
        app.run("reproject_layer", {"input_path": "k.geojson", "target_crs": "EPSG:4230", "output_path": "k.gpkg"})
    assert info.value.code == "CRS_BALLPARK_REFUSED"
    assert info.value.evidence["expected_error_m"] == pytest.approx(
        _ballpark_error_by_hand([(-98.54, 39.22)]), abs=0.05
    )
    assert not (workspace / "k.gpkg").exists()


@needs_no_grids
def test_reproject_layer_with_allow_ballpark_answers_and_records_it(app, workspace: Path) -> None:
    write_layer(workspace / "k.geojson", [Point(-98.54, 39.22)], "EPSG:4267", id=[1])
    result = app.run(
        "reproject_layer",
        {"input_path": "k.geojson", "target_crs": "EPSG:4230", "allow_ballpark": True, "output_path": "k.gpkg"},
    )
    geom = read(workspace / "k.gpkg").geometry.iloc[0]
    assert (geom.x, geom.y) == pytest.approx((-98.54, 39.22), abs=1e-9)  # a ballpark moves nothing
    expected = _ballpark_error_by_hand([(-98.54, 39.22)])
    (warning,) = [w for w in result.warnings if w["code"] == "BALLPARK_TRANSFORMATION"]
    assert f"about {round(expected, 1):g} m" in warning["message"]
    transformation = manifest(workspace / "k.gpkg")["crs_decisions"]["transformation"]
    assert transformation["is_ballpark"] is True
    assert transformation["x-mapsmith:chosen_by"]["ballpark"]["expected_error_m"] == pytest.approx(expected, abs=0.05)


def test_reproject_layer_same_datum_has_no_warning(app, workspace: Path) -> None:
    write_layer(workspace / "p.geojson", [Point(-123.0, 45.0)], "EPSG:4326", id=[1])
    result = app.run(
        "reproject_layer", {"input_path": "p.geojson", "target_crs": "EPSG:32610", "output_path": "p.gpkg"}
    )
    assert result.warnings == []
    geom = read(workspace / "p.gpkg").geometry.iloc[0]
    assert (geom.x, geom.y) == pytest.approx((500_000.0, 4_982_950.400), abs=0.01)


@needs_no_grids
def test_reproject_layer_osgb36_to_etrs89_moves_points_by_the_datum_shift(app, workspace: Path) -> None:
    write_layer(workspace / "uk.geojson", [Point(-1.5, 52.5)], "EPSG:4277", id=[1])
    result = app.run(
        "reproject_layer", {"input_path": "uk.geojson", "target_crs": "EPSG:4258", "output_path": "uk.gpkg"}
    )
    geom = read(workspace / "uk.gpkg").geometry.iloc[0]
    leg1 = _best_leg("EPSG:4277", "EPSG:4326", (-1.5, 52.5, -1.5, 52.5))
    leg2 = _best_leg("EPSG:4326", "EPSG:4258", (-1.5, 52.5, -1.5, 52.5))
    assert (geom.x, geom.y) == pytest.approx(leg2.transform(*leg1.transform(-1.5, 52.5)), abs=1e-9)
    assert not [w for w in result.warnings if w["code"] == "BALLPARK_TRANSFORMATION"]
    assert result.crs_decisions["transformation"]["x-mapsmith:chosen_by"]["intermediate_crs"] == "EPSG:4326"
