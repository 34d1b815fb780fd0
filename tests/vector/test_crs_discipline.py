"""CRS discipline and honest geometry reading: the silent failures, caught or refused.

A hole ring wound like a shell, a GeoJSON ``crs`` that GDAL would silently replace with WGS 84,
metres labelled as degrees, a datum shift done with less accuracy than exists: each either gets
the right answer with the fix disclosed, or a refusal that says what to do.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from shapely.geometry import Point, box

from layers import manifest, write_layer
from mapsmith.errors import CRSError

OUTER_CW = [(0, 0), (0, 100), (100, 100), (100, 0), (0, 0)]  # clockwise: a shell in shapefile terms
HOLE_CW = [(40, 40), (40, 60), (60, 60), (60, 40), (40, 40)]  # clockwise too: a hole wound like a shell


def write_polygon_shapefile(stem: Path, rings: list[list[tuple[float, float]]], crs: str) -> Path:
    """One polygon record with exactly these rings, written byte by byte, so no library can re-orient
    them on the way to disk (ESRI Shapefile Technical Description, 1998)."""
    import pyproj

    points = [p for ring in rings for p in ring]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    bbox = (min(xs), min(ys), max(xs), max(ys))
    starts, n = [], 0
    for ring in rings:
        starts.append(n)
        n += len(ring)
    content = struct.pack("<i4d2i", 5, *bbox, len(rings), len(points)) + struct.pack(f"<{len(starts)}i", *starts)
    content += b"".join(struct.pack("<2d", *p) for p in points)
    record = struct.pack(">2i", 1, len(content) // 2) + content

    def header(total_bytes: int) -> bytes:
        return struct.pack(">7i", 9994, 0, 0, 0, 0, 0, total_bytes // 2) + struct.pack(
            "<2i8d", 1000, 5, *bbox, 0, 0, 0, 0
        )

    stem.with_suffix(".shp").write_bytes(header(100 + len(record)) + record)
    stem.with_suffix(".shx").write_bytes(header(108) + struct.pack(">2i", 50, len(content) // 2))
    # a dBase III table with one numeric field "id" and one record
    dbf = struct.pack("<4BI2H20x", 3, 126, 1, 1, 1, 32 + 32 + 1, 1 + 10)
    dbf += b"id".ljust(11, b"\0") + b"N" + b"\0" * 4 + bytes([10, 0]) + b"\0" * 14 + b"\r"
    dbf += b" " + b"1".rjust(10) + b"\x1a"
    stem.with_suffix(".dbf").write_bytes(dbf)
    stem.with_suffix(".prj").write_text(pyproj.CRS(crs).to_wkt("WKT1_ESRI"))
    return stem.with_suffix(".shp")


def test_a_hole_wound_like_a_shell_is_read_as_a_hole_and_disclosed(app, workspace: Path) -> None:
    # EPSG:6933 is equal-area, so planar area is ground area: 100 x 100 minus the 20 x 20 hole is
    # 10,000 - 400 = 9,600 m2. Read by orientation alone, the hole becomes a second shell: 10,400.
    write_polygon_shapefile(workspace / "parcel", [OUTER_CW, HOLE_CW], "EPSG:6933")
    result = app.run("measure_area", {"input_path": "parcel.shp", "output_path": "area.gpkg", "method": "planar"})
    assert result.answer["total_area_m2"] == pytest.approx(9_600)
    assert "SHAPEFILE_RINGS_RENESTED" in [w["code"] for w in result.warnings]
    (repair,) = manifest(workspace / "area.gpkg")["repairs"]
    assert repair["resolved"] is True and "nesting" in repair["action"]
    report = repair["x-mapsmith:report"]
    assert (report["area_before"], report["area_after"], report["rings_renested"]) == (10_400, 9_600, 1)


def test_a_correctly_wound_shapefile_is_read_without_any_repair(app, workspace: Path) -> None:
    write_polygon_shapefile(workspace / "parcel", [OUTER_CW, list(reversed(HOLE_CW))], "EPSG:6933")
    result = app.run("measure_area", {"input_path": "parcel.shp", "output_path": "area.gpkg", "method": "planar"})
    assert result.answer["total_area_m2"] == pytest.approx(9_600)
    assert result.warnings == [] and "repairs" not in manifest(workspace / "area.gpkg")


def test_an_island_inside_a_hole_stays_land(app, workspace: Path) -> None:
    # shell 100 x 100 (10,000), hole 60 x 60 (3,600), island 20 x 20 inside the hole (400), all wound
    # clockwise: 10,000 - 3,600 + 400 = 6,800 m2.
    hole = [(20, 20), (20, 80), (80, 80), (80, 20), (20, 20)]
    island = [(40, 40), (40, 60), (60, 60), (60, 40), (40, 40)]
    write_polygon_shapefile(workspace / "ring", [OUTER_CW, hole, island], "EPSG:6933")
    result = app.run("measure_area", {"input_path": "ring.shp", "output_path": "area.gpkg", "method": "planar"})
    assert result.answer["total_area_m2"] == pytest.approx(6_800)


def test_a_geojson_crs_that_gdal_would_replace_with_wgs84_is_refused(app, workspace: Path) -> None:
    # GDAL reads this file as EPSG:4326: UTM metres would be taken for degrees.
    doc = {
        "type": "FeatureCollection",
        "crs": {"type": "name", "properties": {"name": "srid:32610"}},
        "features": [
            {"type": "Feature", "properties": {"id": 1}, "geometry": {"type": "Point", "coordinates": [5e5, 5e6]}}
        ],
    }
    (workspace / "pt.geojson").write_text(json.dumps(doc))
    with pytest.raises(CRSError) as err:
        app.run("buffer_layer", {"input_path": "pt.geojson", "distance_meters": 10, "output_path": "b.gpkg"})
    assert err.value.code == "CRS_AMBIGUOUS_SRID"
    assert err.value.evidence["declared"] == "srid:32610"
    assert "EPSG:32610" in err.value.hint


def test_metres_labelled_as_degrees_are_refused(app, workspace: Path) -> None:
    write_layer(workspace / "utm_as_wgs84.gpkg", [Point(500_000, 5_000_000)], "EPSG:4326", id=[1])
    with pytest.raises(CRSError) as err:
        app.run("buffer_layer", {"input_path": "utm_as_wgs84.gpkg", "distance_meters": 10, "output_path": "b.gpkg"})
    assert err.value.code == "CRS_COORDINATES_IMPOSSIBLE"
    assert err.value.evidence["bounds"] == [500_000, 5_000_000, 500_000, 5_000_000]


@pytest.mark.filterwarnings("ignore:Best transformation is not available:UserWarning")
def test_a_mask_on_another_datum_is_aligned_with_the_best_available_shift_and_says_what_is_missing(
    app, workspace: Path
) -> None:
    # NAD27 parcels near San Francisco, a WGS 84 mask: PROJ's best operation needs the NADCON grid,
    # which this machine lacks, so a Helmert shift (stated accuracy in metres, not a ballpark) is
    # used and the missing better one is named in the warning and the record.
    from pyproj import Transformer

    to_wgs84 = Transformer.from_crs(4267, 4326, always_xy=True)
    write_layer(workspace / "parcels.gpkg", [box(-122.30, 37.80, -122.29, 37.81)], "EPSG:4267", id=[1])
    corners = [to_wgs84.transform(x, y) for x, y in [(-122.31, 37.79), (-122.28, 37.82)]]
    write_layer(workspace / "mask.gpkg", [box(*corners[0], *corners[1])], "EPSG:4326", id=[1])
    result = app.run("clip_layer", {"input_path": "parcels.gpkg", "mask_path": "mask.gpkg", "output_path": "c.gpkg"})
    leg = result.crs_decisions["x-mapsmith:alignment"]["mask_path"]["transformation"]
    assert leg["is_ballpark"] is False and leg["accuracy_m"] is not None and leg["accuracy_m"] > 0
    if _grid_installed("us_noaa_conus.tif"):
        pytest.skip("the NADCON grid is installed here: the better operation is available")
    # EPSG's NAD27 to WGS 84 (6), 7 m, is used; the NADCON-based (40), 1.5 m, needs grids
    assert leg["accuracy_m"] == 7.0
    assert leg["x-mapsmith:better_unavailable"]["accuracy_m"] == 1.5
    assert "BETTER_TRANSFORMATION_MISSING" in [w["code"] for w in result.warnings]


def _grid_installed(name: str) -> bool:
    import os

    import pyproj

    dirs = pyproj.datadir.get_data_dir().split(os.pathsep) + [pyproj.datadir.get_user_data_dir()]
    return any((Path(d) / name).exists() for d in dirs)
