"""Z in measures: 3-D lengths when asked, and never a 2-D measure of 3-D data without saying so.

Hand-worked: the line (0, 0, 0) -> (3, 0, 4) in a metric CRS is 3 m long horizontally and
sqrt(3^2 + 4^2) = 5 m along Z. In EPSG:32610 on the central meridian the planar 3 m is a ground
(geodesic) 3 / 0.9996 = 3.0012005 m, so the geodesic 3-D length is sqrt(3.0012005^2 + 4^2) =
5.0007204 m; the test recomputes that horizontal part with pyproj.Geod itself rather than trusting
the code. The catalogue-wide test at the end runs every operation that reads a vector layer on 3-D
copies of the catalogue's sample layers.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import shapely
from shapely.geometry import LineString, MultiLineString, box

import catalog_args
from layers import manifest, read, write_layer
from mapsmith.contracts import load_builtin_contracts
from mapsmith.errors import InputError

UTM10 = "EPSG:32610"
E0, N0 = 500_000.0, 5_000_000.0  # on UTM 10N's central meridian: scale exactly k0 = 0.9996
K0 = 0.9996


def geodesic_between(crs: str, a: tuple[float, float], b: tuple[float, float]) -> float:
    """The ground distance between two points of ``crs``, by pyproj.Geod on WGS 84 (the test's own figure)."""
    from pyproj import Geod, Transformer

    to_ll = Transformer.from_crs(crs, 4326, always_xy=True)
    (lon1, lat1), (lon2, lat2) = to_ll.transform(*a), to_ll.transform(*b)
    return Geod(ellps="WGS84").inv(lon1, lat1, lon2, lat2)[2]


def test_a_3d_line_is_5_m_along_z_and_3_m_flat_planar(app, workspace: Path) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(E0, N0, 0), (E0 + 3, N0, 4)])], UTM10, id=[1])
    flat = app.run("measure_length", {"input_path": "l.gpkg", "method": "planar", "output_path": "f.gpkg"})
    assert flat.answer["total_length_m"] == pytest.approx(3.0, abs=1e-12)
    assert flat.answer["dimensions"] == "2d"
    [warning] = [w for w in flat.warnings if w["code"] == "MEASURE_2D_ON_3D"]
    assert "1 of 1 features have Z" in warning["message"] and "use_z=true" in warning["hint"]
    assert manifest(workspace / "f.gpkg")["x-mapsmith:warnings"][0]["code"] == "MEASURE_2D_ON_3D"

    along = app.run(
        "measure_length", {"input_path": "l.gpkg", "method": "planar", "use_z": True, "output_path": "z.gpkg"}
    )
    assert along.answer["total_length_m"] == pytest.approx(5.0, abs=1e-12)
    assert along.answer["total_horizontal_length_m"] == pytest.approx(3.0, abs=1e-12)
    assert along.answer["dimensions"] == "3d" and along.answer["features_measured_with_z"] == 1
    assert "declares no vertical axis" in along.answer["z_unit"] and along.answer["z_unit_metres"] == 1.0
    assert not [w for w in along.warnings if w["code"] == "MEASURE_2D_ON_3D"]
    assert read(workspace / "z.gpkg")["length_m"].iloc[0] == pytest.approx(5.0, abs=1e-12)
    record = manifest(workspace / "z.gpkg")
    assert record["parameters"]["x-mapsmith:measure_dimensions"] == "3d"
    assert "sqrt(horizontal^2 + dz^2)" in record["crs_decisions"]["reason"]


def test_geodesic_3d_length_combines_the_geodesic_horizontal_with_dz(app, workspace: Path) -> None:
    horizontal = geodesic_between(UTM10, (E0, N0), (E0 + 3, N0))
    assert horizontal == pytest.approx(3 / K0, rel=1e-6)  # the test's own check of its figure
    write_layer(workspace / "l.gpkg", [LineString([(E0, N0, 0), (E0 + 3, N0, 4)])], UTM10, id=[1])
    flat = app.run("measure_length", {"input_path": "l.gpkg", "output_path": "f.gpkg"})
    assert flat.answer["total_length_m"] == pytest.approx(horizontal, rel=1e-9)
    assert any(w["code"] == "MEASURE_2D_ON_3D" for w in flat.warnings)
    along = app.run("measure_length", {"input_path": "l.gpkg", "use_z": True, "output_path": "z.gpkg"})
    assert along.answer["total_length_m"] == pytest.approx(math.hypot(horizontal, 4.0), rel=1e-9)
    assert along.answer["total_length_m"] == pytest.approx(5.0007204, abs=1e-6)
    assert "not at the segment's height" in along.answer["height_note"]


def test_geographic_3d_track_reads_heights_in_metres_and_keeps_parts_apart(app, workspace: Path) -> None:
    # Two parts, each a 0.01-degree meridian step at the equator (1,105.74 m on WGS 84) climbing 100 m:
    # sqrt(1105.7427^2 + 100^2) = 1110.2553 m each. Joining the parts would add the 1-degree gap
    # between them (~111 km), so a total near 2,220.5 m also shows the parts were kept apart.
    from pyproj import Geod

    step = Geod(ellps="WGS84").inv(0, 0, 0, 0.01)[2]
    track = MultiLineString([[(0, 0, 0), (0, 0.01, 100)], [(1, 0, 500), (1, 0.01, 600)]])
    write_layer(workspace / "t.gpkg", [track], "EPSG:4326", id=[1])
    result = app.run("measure_length", {"input_path": "t.gpkg", "use_z": True, "output_path": "o.gpkg"})
    assert result.answer["total_length_m"] == pytest.approx(2 * math.hypot(step, 100), rel=1e-9)
    assert "RFC 7946" in result.answer["z_unit"]


def test_z_in_feet_from_a_compound_crs_is_converted(app, workspace: Path) -> None:
    # UTM 10N + NAVD88 height (ftUS), EPSG:32610+6360: a 4 ftUS rise is 4 * 1200/3937 = 1.2192024 m,
    # so the 3 m line with that rise is sqrt(3^2 + 1.2192024^2) = 3.2382825 m long (planar).
    rise = 4 * 1200 / 3937
    write_layer(workspace / "l.gpkg", [LineString([(E0, N0, 0), (E0 + 3, N0, 4)])], "EPSG:32610+6360", id=[1])
    result = app.run(
        "measure_length", {"input_path": "l.gpkg", "method": "planar", "use_z": True, "output_path": "o.gpkg"}
    )
    assert result.answer["z_unit_metres"] == pytest.approx(1200 / 3937, rel=1e-12)
    assert result.answer["total_length_m"] == pytest.approx(math.hypot(3, rise), rel=1e-9)
    assert "vertical axis" in result.answer["z_unit"]


def test_clean_twin_2d_lines_need_no_warning_and_use_z_changes_nothing(app, workspace: Path) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(E0, N0), (E0 + 3, N0)])], UTM10, id=[1])
    flat = app.run("measure_length", {"input_path": "l.gpkg", "method": "planar", "output_path": "f.gpkg"})
    assert flat.answer["total_length_m"] == pytest.approx(3.0, abs=1e-12) and flat.warnings == []
    asked = app.run(
        "measure_length", {"input_path": "l.gpkg", "method": "planar", "use_z": True, "output_path": "z.gpkg"}
    )
    assert asked.answer["total_length_m"] == pytest.approx(3.0, abs=1e-12)
    assert asked.answer["features_measured_with_z"] == 0
    assert any("have no Z" in n for n in asked.notes)


def test_missing_z_values_are_refused_not_measured_flat(app, workspace: Path) -> None:
    line = LineString([(E0, N0, 0), (E0 + 3, N0, float("nan"))])
    write_layer(workspace / "l.parquet", [line], UTM10, id=[1])
    with pytest.raises(InputError) as err:
        app.run("measure_length", {"input_path": "l.parquet", "use_z": True, "output_path": "z.gpkg"})
    assert err.value.code == "Z_VALUES_MISSING" and err.value.evidence["feature_indices"] == [0]
    assert "use_z=false" in err.value.hint


def test_area_of_3d_polygons_is_horizontal_and_says_so(app, workspace: Path) -> None:
    import numpy as np

    # A 100 m square tilted (z = x - E0): its horizontal area is 10,000 m2 planar; the warning says 2-D.
    tilted = shapely.transform(
        shapely.force_3d(box(E0, N0, E0 + 100, N0 + 100)),
        lambda c: np.column_stack([c[:, 0], c[:, 1], c[:, 0] - E0]),
        include_z=True,
    )
    write_layer(workspace / "p.gpkg", [tilted], UTM10, id=[1])
    result = app.run("measure_area", {"input_path": "p.gpkg", "method": "planar", "output_path": "a.gpkg"})
    assert result.answer["total_area_m2"] == pytest.approx(10_000, abs=1e-9)
    [warning] = [w for w in result.warnings if w["code"] == "MEASURE_2D_ON_3D"]
    assert "areas are horizontal" in warning["message"]


def test_a_centroid_of_3d_features_says_z_was_dropped(app, workspace: Path) -> None:
    write_layer(workspace / "l.gpkg", [LineString([(E0, N0, 0), (E0 + 4, N0, 8)])], UTM10, id=[1])
    result = app.run("centroid_layer", {"input_path": "l.gpkg", "output_path": "c.gpkg"})
    assert read(workspace / "c.gpkg").geometry.iloc[0].coords[0][:2] == pytest.approx((E0 + 2, N0))
    assert [w["code"] for w in result.warnings] == ["Z_DROPPED"]
    # point_on_surface of a 3-D polygon: GEOS gives a 2-D point inside it, and that is said too
    write_layer(workspace / "p.gpkg", [shapely.force_3d(box(E0, N0, E0 + 10, N0 + 10), 7.0)], UTM10, id=[1])
    surface = app.run("point_on_surface", {"input_path": "p.gpkg", "output_path": "s.gpkg"})
    assert [w["code"] for w in surface.warnings] == ["Z_DROPPED"]
    assert "1 of 1 features had Z" in surface.warnings[0]["message"]
    # clean twin: the same line without Z loses nothing and is not warned about
    write_layer(workspace / "flat.gpkg", [LineString([(E0, N0), (E0 + 4, N0)])], UTM10, id=[1])
    clean = app.run("centroid_layer", {"input_path": "flat.gpkg", "output_path": "c2.gpkg"})
    assert clean.warnings == []


def test_simplify_keeps_z_in_its_own_crs_and_says_when_the_metric_detour_dropped_it(app, workspace: Path) -> None:
    # A straight 3-D line with a middle vertex: simplification at 1 m keeps the two ends. In UTM
    # (measured in its own CRS) the ends keep their Z, 0 and 10; in degrees the layer is simplified in
    # an estimated UTM zone and transformed back, Z carried both ways (common.transform_frame).
    line = LineString([(E0, N0, 0), (E0, N0 + 100, 5), (E0, N0 + 200, 10)])
    write_layer(workspace / "u.gpkg", [line], UTM10, id=[1])
    kept = app.run("simplify_layer", {"input_path": "u.gpkg", "tolerance_meters": 1, "output_path": "su.gpkg"})
    assert list(read(workspace / "su.gpkg").geometry.iloc[0].coords) == [(E0, N0, 0), (E0, N0 + 200, 10)]
    assert [w["code"] for w in kept.warnings] == ["MEASURE_2D_ON_3D"]

    degrees = LineString([(-123, 45, 0), (-123, 45.001, 5), (-123, 45.002, 10)])
    write_layer(workspace / "g.gpkg", [degrees], "EPSG:4326", id=[1])
    moved = app.run("simplify_layer", {"input_path": "g.gpkg", "tolerance_meters": 1, "output_path": "sg.gpkg"})
    written = read(workspace / "sg.gpkg").geometry.iloc[0]
    codes = [w["code"] for w in moved.warnings]
    # common.transform_frame carries Z through both legs of the detour: the ends keep 0 and 10, unwarned
    assert written.has_z and [c[2] for c in written.coords] == [0, 10]
    assert "Z_DROPPED" not in codes
    assert "MEASURE_2D_ON_3D" in codes


def test_repair_of_a_3d_bowtie_keeps_z_and_says_its_areas_are_2d(app, workspace: Path) -> None:
    # The 100 m bow-tie becomes two triangles of 2,500 m2 of grid each (5,000 / k0^2 of ground),
    # horizontal areas; make_valid keeps the vertices' Z (the crossing point gets an interpolated one).
    from shapely.geometry import Polygon

    bowtie = Polygon([(E0, N0, 1), (E0 + 100, N0 + 100, 1), (E0 + 100, N0, 1), (E0, N0 + 100, 1)])
    write_layer(workspace / "b.gpkg", [bowtie], UTM10, id=[1])
    result = app.run("repair_geometries", {"input_path": "b.gpkg", "output_path": "r.gpkg"})
    assert result.answer["repaired"][0]["area_m2_after"] == pytest.approx(5_000 / K0**2, rel=1e-7)
    assert "MEASURE_2D_ON_3D" in [w["code"] for w in result.warnings]
    assert read(workspace / "r.gpkg").geometry.iloc[0].has_z


# -- every operation that computes a measure, on 3-D data ----------------------------------------

CONTRACTS = load_builtin_contracts()
VECTOR_READERS = sorted(
    name for name, c in CONTRACTS.items() if c.status == "available" and any(d.kind == "vector" for d in c.datasets)
)
# A key of the answer, or a field the output gained, that holds a measure in metres.
MEASURE_NAME = re.compile(r"(^|_)(length|area|perimeter|distance)(_|$)|_(m|m2|km|km2)$")
NOT_MEASURES = {"distance_method", "area_measured", "overlapping_pairs", "page"}
# Operations that compute a measure in modules owned elsewhere, still silent about Z (issue 20):
# strict, so each one fails here the day it starts warning or honouring Z and must leave this list.
PENDING: dict[str, str] = {}


def _three_d(geometry: Any) -> Any:
    """The geometry with a Z that varies along it (z = easting - 500,000), so a 3-D measure differs."""
    import numpy as np

    return shapely.transform(
        shapely.force_3d(geometry, 0.0), lambda c: np.column_stack([c[:, 0], c[:, 1], c[:, 0] - E0]), include_z=True
    )


@pytest.fixture
def three_d_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = {family: [_three_d(g) for g in geoms] for family, geoms in catalog_args.SAMPLE_GEOMETRIES.items()}
    monkeypatch.setattr(catalog_args, "SAMPLE_GEOMETRIES", samples)


def _holds_float(value: Any) -> bool:
    """A measure is a real number (counts such as sources_with_zero_area are whole numbers)."""
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_float(v) for v in value.values())
    return isinstance(value, list) and any(_holds_float(v) for v in value[:5])


def _measure_names(answer: Any, arguments: dict[str, Any], prefix: str = "") -> set[str]:
    names: set[str] = set()
    if isinstance(answer, dict):
        for key, value in answer.items():
            if key in NOT_MEASURES or key in arguments:
                continue
            if MEASURE_NAME.search(key) and _holds_float(value):
                names.add(prefix + key)
            names |= _measure_names(value, arguments, prefix + key + ".")
    elif isinstance(answer, list):
        for item in answer[:5]:
            names |= _measure_names(item, arguments, prefix)
    return names


def test_the_catalogue_has_measuring_operations() -> None:
    # Guards the parametrized test below against covering nothing.
    assert {"measure_length", "measure_area", "simplify_layer", "convex_hull"} <= set(VECTOR_READERS)


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(op, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=PENDING[op]))
        if op in PENDING
        else op
        for op in VECTOR_READERS
    ],
)
def test_every_measure_of_3d_data_honours_z_or_says_it_is_2d(app, workspace, three_d_samples, operation) -> None:
    contract = app.host.contracts[operation]
    args = catalog_args.build_arguments(contract, workspace)
    result = app.run(operation, args)
    measures = _measure_names(result.answer, args)
    written = workspace / args["output_path"] if "output_path" in args else None
    if written is not None and written.suffix == ".gpkg" and written.exists():
        given_paths = [args[d.name] for d in contract.datasets if d.name in args]
        before: set[str] = set()
        for given in [p for g in given_paths for p in (g if isinstance(g, list) else [g])]:
            if isinstance(given, str) and given.endswith(".gpkg"):
                before |= set(read(workspace / given).columns)
        measures |= {f for f in read(written).columns if f not in before and MEASURE_NAME.search(f)}
    codes = {w["code"] for w in result.warnings}
    honoured = result.answer.get("dimensions") == "3d"
    assert not measures or honoured or "MEASURE_2D_ON_3D" in codes, (
        f"{operation} computed {sorted(measures)} from 3-D data without using Z or saying so"
    )
    if "use_z" in {p.name for p in contract.parameters}:
        # and the same operation honours Z when asked: no 2-D warning, the answer says 3-D
        asked = app.run(operation, {**args, "use_z": True, "output_path": "asked_" + args["output_path"]})
        assert asked.answer["dimensions"] == "3d"
        assert "MEASURE_2D_ON_3D" not in {w["code"] for w in asked.warnings}
