"""A feature a CRS cannot place is refused: a second input moved into the main input's CRS (common.align_to), and a
layer moved into the UTM zone MapSmith measures in (common.to_metric; the last test).

input_path: two points in UTM zone 10N (EPSG:32610): A (500,000, 5,000,000), which is (-123, 45.1535) in lon/lat,
and B (600,000, 5,000,000), about (-121.73, 45.14).
mask_path, in EPSG:4326: the triangle (-124, 44), (-33, 0), (-122, 46). Its vertex (-33, 0) is 90 degrees from
the zone's meridian (123 W) on the equator, where PROJ's transverse Mercator answers (inf, inf).
Before, the mask was moved with that infinite vertex and GEOS answered anyway: both points were kept, and the run
passed. But A lies north-west of the edge (-124, 44)-(-122, 46), the line lat = lon + 168 (45.15 > 45), so it is
outside the triangle; B is farther outside. Now the run is refused (OUTSIDE_TARGET_CRS, mask_path's feature 0, at the
vertex (-33, 0)).
The clean twin: the triangle (-124, 44), (-122, 44), (-123, 46) holds A (on its axis, below the apex) and not B (at
latitude 45.14 it spans lon -123 +- 0.43), so A alone is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, Polygon

from layers import read, write_layer
from mapsmith.errors import InputError


def _points(workspace: Path) -> None:
    write_layer(
        workspace / "pts.parquet", [Point(500_000, 5_000_000), Point(600_000, 5_000_000)], "EPSG:32610", pid=["A", "B"]
    )


def test_a_mask_vertex_the_input_crs_cannot_place_is_refused_not_clipped_against(app: Any, workspace: Path) -> None:
    from pyproj import Transformer

    to_utm = Transformer.from_crs("EPSG:4326", "EPSG:32610", always_xy=True)
    assert to_utm.transform(-33.0, 0.0) == (float("inf"), float("inf"))
    _points(workspace)
    write_layer(workspace / "far.parquet", [Polygon([(-124, 44), (-33, 0), (-122, 46)])], "EPSG:4326", m=[1])
    with pytest.raises(InputError) as refused:
        app.run("clip_layer", {"input_path": "pts.parquet", "mask_path": "far.parquet", "output_path": "c.parquet"})
    error = refused.value.to_dict()
    assert error["code"] == "OUTSIDE_TARGET_CRS"
    assert error["evidence"] == {
        "argument": "mask_path",
        "target_crs": "EPSG:32610",
        "features": 1,
        "first_features": [{"index": 0, "x": -33.0, "y": 0.0}],
    }
    assert "reproject_layer input_path" in error["hint"]
    assert not (workspace / "c.parquet").exists()


def test_a_mask_the_input_crs_can_place_is_clipped_against(app: Any, workspace: Path) -> None:
    _points(workspace)
    write_layer(workspace / "near.parquet", [Polygon([(-124, 44), (-122, 44), (-123, 46)])], "EPSG:4326", m=[1])
    result = app.run(
        "clip_layer", {"input_path": "pts.parquet", "mask_path": "near.parquet", "output_path": "c.parquet"}
    )
    assert result.status in ("ok", "ok_with_warnings")
    assert list(read(workspace / "c.parquet")["pid"]) == ["A"]


def test_a_layer_too_wide_for_the_measuring_zone_is_refused_not_clustered(app: Any, workspace: Path) -> None:
    """A (-123, 0), B (-122.9, 0.1) and C (57, 0) in EPSG:4326: the extent's centre, -33, gives UTM zone 25 (EPSG:32625)
    to measure in, where PROJ answers all three with infinity (worked out below: A and C lie 90 degrees from its
    meridian, B 89.9). Before, each became its own cluster although A and B lie 15.7 km apart (pyproj's geodesic),
    within 20 km, and the run passed with WIDE_LAYER_FOR_UTM only. Now it is refused. The clean twin, A and B alone,
    is measured in zone 10 and clusters them together."""
    from pyproj import Geod, Transformer

    to_zone_25 = Transformer.from_crs("EPSG:4326", "EPSG:32625", always_xy=True)
    assert all(to_zone_25.transform(x, y) == (float("inf"),) * 2 for x, y in ((-123, 0), (-122.9, 0.1), (57, 0)))
    assert Geod(ellps="WGS84").inv(-123, 0, -122.9, 0.1)[2] == pytest.approx(15_690.3, abs=0.1)
    wide = [Point(-123, 0), Point(-122.9, 0.1), Point(57, 0)]
    write_layer(workspace / "wide.parquet", wide, "EPSG:4326", n=[0, 1, 2])
    arguments = {"input_path": "wide.parquet", "distance_meters": 20_000, "output_path": "c.parquet"}
    with pytest.raises(InputError) as refused:
        app.run("cluster_points_by_distance", arguments)
    error = refused.value.to_dict()
    assert error["code"] == "OUTSIDE_TARGET_CRS"
    assert error["evidence"]["target_crs"] == "EPSG:32625" and error["evidence"]["features"] == 3
    assert "spans 180.0 degrees of longitude" in error["hint"]
    write_layer(workspace / "near.parquet", [Point(-123, 0), Point(-122.9, 0.1)], "EPSG:4326", n=[0, 1])
    result = app.run("cluster_points_by_distance", {**arguments, "input_path": "near.parquet"})
    assert result.answer["cluster_count"] == 1 and result.answer["largest_cluster_size"] == 2
