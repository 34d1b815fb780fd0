"""A contract that does not need its inputs to overlap (``needs_overlapping_inputs = false``) is not warned
that its result will be empty when they lie apart; every other two-input operation still is."""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import Point

from layers import read, write_layer
from mapsmith.contracts import load_builtin_contracts


def _apart(workspace: Path) -> None:
    # Two points 100 km apart along a UTM easting: 500 000 and 600 000 m, same northing.
    write_layer(workspace / "homes.gpkg", [Point(500_000, 5_000_000)], "EPSG:32610", hid=[1])
    write_layer(workspace / "stations.gpkg", [Point(600_000, 5_000_000)], "EPSG:32610", sid=[7])


def test_nearest_join_on_layers_100_km_apart_answers_without_an_extent_warning(app, workspace: Path) -> None:
    _apart(workspace)
    result = app.run(
        "nearest_join", {"input_path": "homes.gpkg", "join_path": "stations.gpkg", "output_path": "near.gpkg"}
    )
    assert "EXTENTS_DO_NOT_OVERLAP" not in [w["code"] for w in result.warnings]
    check = next(c for c in result.checks if c["name"] == "inputs_may_intersect")
    # the extents are still recorded, and the reason they do not matter is named
    assert check["passed"] is True and "do not overlap" in check["detail"]
    assert "needs_overlapping_inputs = false" in check["detail"]
    out = read(workspace / "near.gpkg")
    # the nearest station is the only one, 100 000 m away on the ground (UTM scale ~0.9996 at the
    # central meridian is corrected by a geodesic distance: within 0.1 %)
    assert out["sid"].tolist() == [7]
    assert out["distance_m"].iloc[0] == pytest.approx(100_000, rel=1e-3)


def test_spatial_join_on_the_same_layers_still_warns(app, workspace: Path) -> None:
    _apart(workspace)
    result = app.run(
        "spatial_join", {"input_path": "homes.gpkg", "join_path": "stations.gpkg", "output_path": "sj.gpkg"}
    )
    assert "EXTENTS_DO_NOT_OVERLAP" in [w["code"] for w in result.warnings]
    check = next(c for c in result.checks if c["name"] == "inputs_may_intersect")
    assert check["passed"] is False


def test_only_operations_whose_answer_survives_distance_waive_the_overlap() -> None:
    waived = sorted(name for name, c in load_builtin_contracts().items() if not c.needs_overlapping_inputs)
    assert waived == ["nearest_join"]
