"""Planar measures in any projected CRS, with the scale error at the data stated; degrees refused.

Every expected error is computed here twice, independently of the code: from the ground figure of
the same shape by pyproj.Geod (on the CRS's own ellipsoid), and from the projection's scale factor
at the shape's centre (pyproj's get_factors: the areal scale for an area, the parallel scale for an
east-west line). Hand-worked anchors: in UTM the scale is k0 = 0.9996 on the central meridian
(areas k0^2 - 1 = -0.08 %) and grows with the distance x from it roughly as k0 (1 + x^2 / 2R^2): at
x = 200 km, k = 1.00009 and planar areas are about 0.018 % above ground areas.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import LineString, box

from layers import manifest, write_layer
from mapsmith.errors import CRSError


def ground_area(crs: str, ellps: str, corners: list[tuple[float, float]]) -> float:
    from pyproj import Geod, Transformer

    to_ll = Transformer.from_crs(crs, 4326 if ellps == "WGS84" else "EPSG:4171", always_xy=True)
    lonlat = [to_ll.transform(x, y) for x, y in corners]
    area, _ = Geod(ellps=ellps).polygon_area_perimeter([p[0] for p in lonlat], [p[1] for p in lonlat])
    return abs(area)


def factors_at(crs: str, x: float, y: float):  # type: ignore[no-untyped-def]
    from pyproj import Proj, Transformer

    lon, lat = Transformer.from_crs(crs, 4326, always_xy=True).transform(x, y)
    return Proj(crs).get_factors(lon, lat)


def test_planar_area_in_utm_32632_is_answered_with_its_scale_error(app, workspace: Path) -> None:
    # A 1 km square 200 km east of zone 32's central meridian: planar 1,000,000 m2 exactly.
    x0, y0 = 700_000.0, 5_000_000.0
    corners = [(x0, y0), (x0 + 1000, y0), (x0 + 1000, y0 + 1000), (x0, y0 + 1000)]
    ground = ground_area("EPSG:32632", "WGS84", corners)
    expected = 1_000_000 / ground - 1
    scale = factors_at("EPSG:32632", x0 + 500, y0 + 500)
    assert expected == pytest.approx(scale.areal_scale - 1, abs=1e-6)  # the two hand checks agree
    assert 0.00017 < expected < 0.00019  # k = 1.00009 at x = 200 km: +0.018 %

    write_layer(workspace / "sq.gpkg", [box(x0, y0, x0 + 1000, y0 + 1000)], "EPSG:32632", id=[1])
    result = app.run("measure_area", {"input_path": "sq.gpkg", "method": "planar", "output_path": "a.gpkg"})
    assert result.answer["total_area_m2"] == pytest.approx(1_000_000, abs=1e-6)
    error = result.answer["planar_scale_error"]
    assert error["relative"] == pytest.approx(expected, abs=1e-10)  # 1e-4 m2 in 1 km2
    assert error["ground_m2"] == pytest.approx(ground, rel=1e-9)
    assert error["equal_area"] is False and error["features_compared"] == 1
    assert "0.02% above the ground (geodesic) area" in error["statement"]
    assert result.warnings == []  # within 1 %: recorded, not warned
    record = manifest(workspace / "a.gpkg")
    assert record["parameters"]["x-mapsmith:planar_scale_error"] == error
    assert error["statement"] in record["notes"]
    assert error["statement"] in record["crs_decisions"]["reason"]
    assert record["crs_decisions"]["analysis_crs"] == "EPSG:32632"


def test_on_the_central_meridian_planar_area_is_0_08_percent_below(app, workspace: Path) -> None:
    # k0^2 = 0.99920016: planar = ground * 0.9992, i.e. 0.08 % below (the issue's own example)
    write_layer(workspace / "sq.gpkg", [box(500_000, 5_000_000, 500_100, 5_000_100)], "EPSG:32610", id=[1])
    result = app.run("measure_area", {"input_path": "sq.gpkg", "method": "planar", "output_path": "a.gpkg"})
    assert result.answer["planar_scale_error"]["relative"] == pytest.approx(0.9996**2 - 1, abs=1e-8)
    assert "0.08% below" in result.answer["planar_scale_error"]["statement"]


def test_planar_length_in_lambert_93_is_answered_with_its_scale_error(app, workspace: Path) -> None:
    # RGF93 / Lambert-93 (conformal conic, GRS 1980): a 10 km east-west line at its latitude of
    # origin (46.5 N, between the standard parallels 44 N and 49 N) where the scale is below 1.
    from pyproj import Geod, Transformer

    a, b = (700_000.0, 6_600_000.0), (710_000.0, 6_600_000.0)
    to_ll = Transformer.from_crs("EPSG:2154", "EPSG:4171", always_xy=True)
    (lon1, lat1), (lon2, lat2) = to_ll.transform(*a), to_ll.transform(*b)
    ground = Geod(ellps="GRS80").inv(lon1, lat1, lon2, lat2)[2]
    expected = 10_000 / ground - 1
    assert expected == pytest.approx(factors_at("EPSG:2154", 705_000, 6_600_000).parallel_scale - 1, abs=1e-6)
    assert -0.0010 < expected < -0.0009

    write_layer(workspace / "l.gpkg", [LineString([a, b])], "EPSG:2154", id=[1])
    result = app.run("measure_length", {"input_path": "l.gpkg", "method": "planar", "output_path": "o.gpkg"})
    assert result.answer["total_length_m"] == pytest.approx(10_000, abs=1e-9)
    assert result.answer["method"] == "planar"
    error = result.answer["planar_scale_error"]
    assert error["relative"] == pytest.approx(expected, rel=1e-9)
    assert "0.09% below the ground (geodesic) length" in error["statement"]
    assert "GRS 1980" in error["compared_with"]
    # the default is still geodesic: the ground figure itself
    default = app.run("measure_length", {"input_path": "l.gpkg", "output_path": "g.gpkg"})
    assert default.answer["method"] == "geodesic"
    assert default.answer["total_length_m"] == pytest.approx(ground, rel=1e-9)
    assert "planar_scale_error" not in default.answer


def test_clean_twin_an_equal_area_crs_measures_about_zero_error(app, workspace: Path) -> None:
    # EPSG:6933 (EASE-Grid 2.0, equal-area on the ellipsoid): a 1,000 m square, ~0 % error.
    write_layer(workspace / "ease.gpkg", [box(1_000_000, 5_000_000, 1_001_000, 5_001_000)], "EPSG:6933", id=[1])
    result = app.run("measure_area", {"input_path": "ease.gpkg", "method": "planar", "output_path": "p.gpkg"})
    assert result.answer["total_area_m2"] == pytest.approx(1_000_000, abs=1e-6)
    error = result.answer["planar_scale_error"]
    assert abs(error["relative"]) < 1e-5 and error["equal_area"] is True
    assert "(equal-area) is 0.00%" in error["statement"]
    assert result.warnings == []


def test_a_spherical_equal_area_projection_is_answered_with_its_half_percent(app, workspace: Path) -> None:
    # PROJ's Mollweide on WGS 84 is equal-area for a sphere: its planar areas are ~0.5 % above the
    # ellipsoid's at 21 N. Answered (was refused), the error stated; below 1 %, so no warning.
    corners = [(1_000_000, 2_500_000), (1_010_000, 2_500_000), (1_010_000, 2_510_000), (1_000_000, 2_510_000)]
    expected = 1e8 / ground_area("ESRI:54009", "WGS84", corners) - 1
    write_layer(workspace / "moll.gpkg", [box(1_000_000, 2_500_000, 1_010_000, 2_510_000)], "ESRI:54009", id=[1])
    result = app.run("measure_area", {"input_path": "moll.gpkg", "method": "planar", "output_path": "m.gpkg"})
    error = result.answer["planar_scale_error"]
    assert error["relative"] == pytest.approx(expected, rel=1e-9) and 0.004 < expected < 0.006
    assert "equal-area on a sphere, not on this ellipsoid" in error["statement"]


def test_web_mercator_is_answered_but_warned(app, workspace: Path) -> None:
    # At 46.2 N Web Mercator's areal scale is about sec^2(46.2) = 2.09: planar areas ~108 % too big.
    from pyproj import Transformer

    x, y = Transformer.from_crs(4326, 3857, always_xy=True).transform(-122.2, 46.2)
    corners = [(x, y), (x + 1000, y), (x + 1000, y + 1000), (x, y + 1000)]
    expected = 1e6 / ground_area("EPSG:3857", "WGS84", corners) - 1
    assert 1.0 < expected < 1.2
    write_layer(workspace / "wm.gpkg", [box(x, y, x + 1000, y + 1000)], "EPSG:3857", id=[1])
    result = app.run("measure_area", {"input_path": "wm.gpkg", "method": "planar", "output_path": "w.gpkg"})
    assert result.answer["planar_scale_error"]["relative"] == pytest.approx(expected, rel=1e-9)
    [warning] = result.warnings
    assert warning["code"] == "PLANAR_SCALE_ERROR" and "geodesic" in warning["hint"]
    assert manifest(workspace / "w.gpkg")["x-mapsmith:warnings"][0]["code"] == "PLANAR_SCALE_ERROR"


@pytest.mark.parametrize("operation", ["measure_area", "measure_length"])
def test_planar_in_degrees_stays_refused(app, workspace: Path, operation: str) -> None:
    geometry = box(-122.0, 46.2, -121.99, 46.21) if operation == "measure_area" else LineString([(0, 0), (0, 0.01)])
    write_layer(workspace / "g.gpkg", [geometry], "EPSG:4326", id=[1])
    with pytest.raises(CRSError) as err:
        app.run(operation, {"input_path": "g.gpkg", "method": "planar", "output_path": "o.gpkg"})
    assert err.value.code == "CRS_NOT_PROJECTED"
    assert "method='geodesic'" in err.value.hint and "reproject_layer" in err.value.hint
    assert not (workspace / "o.gpkg").exists()


def test_a_large_layer_is_compared_on_an_even_sample() -> None:
    from mapsmith_opensource.planar_scale import SCALE_SAMPLE, sample_rows

    assert sample_rows(3) == [0, 1, 2]
    rows = sample_rows(5_000)
    assert len(rows) == SCALE_SAMPLE and rows[0] == 0 and rows[-1] == 4_999
    assert max(b - a for a, b in zip(rows, rows[1:], strict=False)) <= 6  # 4,999 / 999 = 5.004
