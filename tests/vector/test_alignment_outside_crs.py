"""A second input moved into the main input's CRS (common.align_to) with a feature that CRS cannot place is refused.

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
