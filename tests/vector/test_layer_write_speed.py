"""The faster paths under buffer_layer, select_features, clip_layer and reproject_layer write the same answers.

Issue 22: MapSmith's own time around GeoPandas was cut without changing any answer. Each fast path is held
here to what it replaced: the GeoParquet writer to GeoPandas' own ``to_parquet`` byte for byte, and to
metadata worked out by hand; clip's dimension rule to hand-drawn clips and to the per-feature rule it
replaced; buffer_layer's sampling cells to ``np.unique`` by rows and to hand-binned positions; and a
point layer with and without Z, which buffer_layer now places without copying or densifying it, to the
area of the 64-gon.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import shapely
from shapely.geometry import LineString, MultiPolygon, Point, Polygon, box

from layers import manifest
from mapsmith_opensource import layer_common
from mapsmith_opensource.buffer_ops import SAMPLE_BIN_DEGREES, _sample_cells
from mapsmith_opensource.layer_common import keep_own_dimension, write_geoparquet

ORIGINAL_TO_PARQUET = gpd.GeoDataFrame.to_parquet


@pytest.fixture
def calls(monkeypatch) -> list[int]:
    """The row count of every frame GeoPandas' to_parquet writes during the test, in order."""
    seen: list[int] = []

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(len(self))
        return ORIGINAL_TO_PARQUET(self, *args, **kwargs)

    monkeypatch.setattr(gpd.GeoDataFrame, "to_parquet", counted)
    return seen


def _registered_wkb_type() -> object | None:
    """geoarrow's WKB extension type as pyarrow has it registered in this process (sedonadb and geoarrow-pyarrow
    register it when imported, so it depends on which tests ran before), or None."""
    import io

    import pyarrow as pa

    buffer = io.BytesIO()
    gpd.GeoDataFrame(geometry=[Point(0, 0)], crs="EPSG:4326").to_parquet(buffer, index=False)
    kind = pq.read_schema(pa.BufferReader(buffer.getvalue())).field("geometry").type
    return kind if isinstance(kind, pa.ExtensionType) else None


@pytest.fixture(autouse=True)
def without_registered_geoarrow() -> object:
    """Each test sees pyarrow without geoarrow's extension types, as a fresh process does; the registration is
    put back afterwards. (With it, the writer leaves the frame to GeoPandas: the last test here.)"""
    import pyarrow as pa

    kind = _registered_wkb_type()
    if kind is not None:
        pa.unregister_extension_type(kind.extension_name)  # type: ignore[attr-defined]
    yield
    if kind is not None:
        pa.register_extension_type(kind)  # type: ignore[arg-type]


def test_with_geoarrow_registered_geopandas_writes_the_frame(tmp_path: Path, monkeypatch, calls: list[int]) -> None:
    # sedonadb registers geoarrow's types when imported (a server that ran a SedonaDB engine): GeoPandas then writes
    # the column's extension metadata its own way, so the whole frame goes to GeoPandas, the same bytes.
    import geoarrow.pyarrow as ga
    import pyarrow as pa

    # the first import registers it, as sedonadb's does; after the fixture took an earlier registration away, again
    registered_here = _registered_wkb_type() is None
    if registered_here:
        pa.register_extension_type(ga.wkb())
    monkeypatch.setattr(layer_common, "FAST_MIN_BYTES", 0)
    monkeypatch.setattr(layer_common, "FAST_MIN_MEAN_BYTES", 0)
    gdf = gpd.GeoDataFrame({"n": [1, 2]}, geometry=[Point(1, 2), box(0, 0, 3, 4)], crs="EPSG:32633")
    try:
        assert _registered_wkb_type() is not None
        write_geoparquet(gdf, tmp_path / "ours.parquet")
        assert calls[-2:] == [0, 2]  # the frame without rows, then GeoPandas writes the whole frame
        ORIGINAL_TO_PARQUET(gdf, tmp_path / "theirs.parquet", index=False)
    finally:
        if registered_here:
            pa.unregister_extension_type("geoarrow.wkb")
    assert (tmp_path / "ours.parquet").read_bytes() == (tmp_path / "theirs.parquet").read_bytes()


@pytest.fixture
def every_size(monkeypatch) -> None:
    """The writer's own column for frames of any size (it leaves frames under FAST_MIN_BYTES to GeoPandas)."""
    monkeypatch.setattr(layer_common, "FAST_MIN_BYTES", 0)
    monkeypatch.setattr(layer_common, "FAST_MIN_MEAN_BYTES", 0)


def _both(gdf: gpd.GeoDataFrame, tmp_path: Path) -> tuple[bytes, bytes]:
    gdf.to_parquet(tmp_path / "geopandas.parquet", index=False)
    write_geoparquet(gdf, tmp_path / "mapsmith.parquet")
    return (tmp_path / "geopandas.parquet").read_bytes(), (tmp_path / "mapsmith.parquet").read_bytes()


def _geo(path: Path) -> dict:
    return json.loads(pq.read_schema(path).metadata[b"geo"])


# -- the GeoParquet writer --------------------------------------------------------------------------


def test_mixed_types_nulls_and_empties_are_written_as_geopandas_writes_them(tmp_path: Path, every_size: None) -> None:
    # Point (1 2), a null, the box 0..3 x 0..4 and an empty point: bbox over the present, non-empty
    # geometries is [0, 0, 3, 4]; the types present are Point and Polygon (the empty point is a Point).
    gdf = gpd.GeoDataFrame(
        {"n": pd.array([1, None, 3, 4], dtype="Int64"), "s": ["a", None, "c", "d"]},
        geometry=[Point(1, 2), None, box(0, 0, 3, 4), Point()],
        crs="EPSG:4326",
    )
    ours, theirs = _both(gdf, tmp_path)
    assert ours == theirs
    column = _geo(tmp_path / "mapsmith.parquet")["columns"]["geometry"]
    assert column["bbox"] == [0.0, 0.0, 3.0, 4.0]
    assert column["geometry_types"] == ["Point", "Polygon"]
    back = gpd.read_parquet(tmp_path / "mapsmith.parquet")
    assert back.geometry.iloc[1] is None
    assert back.geometry.iloc[2].area == 12.0


def test_z_points_are_named_point_z(tmp_path: Path, every_size: None) -> None:
    gdf = gpd.GeoDataFrame({"id": [1, 2]}, geometry=[Point(500_000, 4_200_000, 12.5), Point(1, 2, 3)], crs=32610)
    ours, theirs = _both(gdf, tmp_path)
    assert ours == theirs
    column = _geo(tmp_path / "mapsmith.parquet")["columns"]["geometry"]
    assert column["geometry_types"] == ["Point Z"]
    assert column["bbox"] == [1.0, 2.0, 500_000.0, 4_200_000.0]
    assert gpd.read_parquet(tmp_path / "mapsmith.parquet").geometry.iloc[0].z == 12.5


def test_an_empty_layer_has_no_bbox(tmp_path: Path, every_size: None) -> None:
    gdf = gpd.GeoDataFrame({"id": pd.Series([], dtype="int64")}, geometry=[], crs=32610)
    ours, theirs = _both(gdf, tmp_path)
    assert ours == theirs
    column = _geo(tmp_path / "mapsmith.parquet")["columns"]["geometry"]
    assert "bbox" not in column and column["geometry_types"] == []


def test_all_null_geometries_and_no_crs(tmp_path: Path, every_size: None) -> None:
    gdf = gpd.GeoDataFrame({"id": [1, 2]}, geometry=[None, None])
    ours, theirs = _both(gdf, tmp_path)
    assert ours == theirs
    assert gpd.read_parquet(tmp_path / "mapsmith.parquet").geometry.isna().tolist() == [True, True]


def test_a_renamed_geometry_column_attrs_and_an_index_are_written_as_geopandas_writes_them(
    tmp_path: Path, every_size: None
) -> None:
    gdf = gpd.GeoDataFrame(
        {"v": [0.5, 1.5, 2.5], "geom": [LineString([(0, 0), (1, 1)]), Point(5, 5), box(1, 1, 2, 2)]},
        geometry="geom",
        crs="EPSG:3857",
        index=[10, 20, 30],
    )
    gdf.attrs["note"] = "kept"
    ours, theirs = _both(gdf.iloc[[2, 0]], tmp_path)  # a selection: a gappy index, dropped by index=False
    assert ours == theirs
    column = _geo(tmp_path / "mapsmith.parquet")["columns"]["geom"]
    assert column["geometry_types"] == ["LineString", "Polygon"]
    assert column["bbox"] == [0.0, 0.0, 2.0, 2.0]


def test_the_benchmark_points_buffered_are_the_same_bytes(tmp_path: Path, every_size: None) -> None:
    rng = np.random.default_rng(22)
    points = shapely.points(rng.uniform(400_000, 600_000, 2_000), rng.uniform(4_100_000, 4_300_000, 2_000))
    gdf = gpd.GeoDataFrame(
        {"point_id": np.arange(2_000), "kind": rng.choice(["well", "spring"], 2_000)},
        geometry=shapely.buffer(points, 50.0, quad_segs=16),
        crs=32610,
    )
    ours, theirs = _both(gdf, tmp_path)
    assert ours == theirs


def test_two_geometry_columns_go_through_geopandas(tmp_path: Path, every_size: None) -> None:
    gdf = gpd.GeoDataFrame({"other": gpd.GeoSeries([Point(9, 9)])}, geometry=[Point(1, 1)], crs=32610)
    ours, theirs = _both(gdf, tmp_path)
    assert ours == theirs


def test_a_geometry_column_over_the_binary_limit_goes_through_geopandas(
    tmp_path: Path, monkeypatch, every_size: None, calls: list[int]
) -> None:
    # Two 21-byte WKB points are 42 bytes: over a 30-byte limit, under the real one (the clean twin).
    gdf = gpd.GeoDataFrame({"id": [1, 2]}, geometry=[Point(1, 1), Point(2, 2)], crs=32610)
    write_geoparquet(gdf, tmp_path / "under.parquet")
    assert calls == [0]  # only the metadata of the frame without rows came from GeoPandas
    monkeypatch.setattr(layer_common, "BINARY_ARRAY_LIMIT_BYTES", 30)
    write_geoparquet(gdf, tmp_path / "over.parquet")
    assert calls == [0, 0, 2]  # the frame without rows (the metadata), then GeoPandas writes the whole frame
    assert (tmp_path / "under.parquet").read_bytes() == (tmp_path / "over.parquet").read_bytes()


def test_a_small_column_goes_through_geopandas_and_a_large_one_does_not(
    tmp_path: Path, monkeypatch, calls: list[int]
) -> None:
    # Two points are 2 vertices, 32 bytes by the 16-bytes-a-vertex bound: under a 33-byte threshold GeoPandas
    # writes the whole frame; at 32 (the clean twin) only the frame without rows goes through it.
    gdf = gpd.GeoDataFrame({"id": [1, 2]}, geometry=[Point(1, 1), Point(2, 2)], crs=32610)
    monkeypatch.setattr(layer_common, "FAST_MIN_MEAN_BYTES", 0)
    monkeypatch.setattr(layer_common, "FAST_MIN_BYTES", 33)
    write_geoparquet(gdf, tmp_path / "small.parquet")
    monkeypatch.setattr(layer_common, "FAST_MIN_BYTES", 32)
    write_geoparquet(gdf, tmp_path / "large.parquet")
    assert calls == [2, 0]
    assert (tmp_path / "small.parquet").read_bytes() == (tmp_path / "large.parquet").read_bytes()


def test_small_values_go_through_geopandas_and_large_ones_do_not(tmp_path: Path, monkeypatch, calls: list[int]) -> None:
    # A point and a 5-vertex box: 6 vertices, 96 bytes by the bound, 48 a value. A 49-byte mean sends the
    # frame to GeoPandas; a 48-byte mean (the clean twin) builds the column here.
    gdf = gpd.GeoDataFrame({"id": [1, 2]}, geometry=[Point(1, 1), box(0, 0, 1, 1)], crs=32610)
    monkeypatch.setattr(layer_common, "FAST_MIN_BYTES", 0)
    monkeypatch.setattr(layer_common, "FAST_MIN_MEAN_BYTES", 49)
    write_geoparquet(gdf, tmp_path / "small.parquet")
    monkeypatch.setattr(layer_common, "FAST_MIN_MEAN_BYTES", 48)
    write_geoparquet(gdf, tmp_path / "large.parquet")
    assert calls == [2, 0]
    assert (tmp_path / "small.parquet").read_bytes() == (tmp_path / "large.parquet").read_bytes()


# -- clip_layer's dimension rule ----------------------------------------------------------------------


def _per_feature(results: np.ndarray, dims: np.ndarray) -> tuple[list, int]:
    """The rule as clip_layer applied it feature by feature before issue 22."""
    kept, dropped = [], 0
    for geom, dim in zip(results, dims, strict=True):
        parts = shapely.get_parts(geom)
        same = [p for p in parts if shapely.get_dimensions(p) == dim and not p.is_empty]
        dropped += len(parts) - len(same)
        kept.append(shapely.union_all(same) if same else None)
    return kept, dropped


def test_clipped_features_keep_their_own_dimension() -> None:
    mask = box(0, 0, 10, 10)
    features = np.array(
        [
            box(5, 5, 15, 15),  # a polygon half inside: the square 5..10, area 25
            box(10, 0, 12, 10),  # touches along x = 10 only: a line, dropped, nothing left
            MultiPolygon([box(-2, 2, 0, 4), box(8, 8, 12, 12)]),  # an edge on x = 0 (dropped) and 8..10: area 4
            MultiPolygon([box(1, 1, 2, 2), box(3, 3, 4, 4)]),  # two squares inside: both kept, area 2
            Point(5, 5),  # a point inside: itself
            LineString([(-5, 5), (5, 5)]),  # a line crossing the edge: (0 5)-(5 5), length 5
        ],
        dtype=object,
    )
    results = shapely.intersection(features, mask)
    kept, dropped = keep_own_dimension(results, shapely.get_dimensions(features))
    assert dropped == 2
    assert kept[1] is None
    assert [kept[i].area for i in (0, 2, 3)] == [25.0, 4.0, 2.0]
    assert kept[0].geom_type == "Polygon" and kept[3].geom_type == "MultiPolygon"
    assert kept[4].equals(Point(5, 5))
    assert kept[5].length == 5.0 and kept[5].geom_type == "LineString"


def test_the_array_rule_gives_the_per_feature_rule_s_bytes() -> None:
    rng = np.random.default_rng(7)
    mask = Point(0, 0).buffer(10, quad_segs=8)
    features = np.concatenate(
        [
            shapely.points(rng.uniform(-12, 12, 400), rng.uniform(-12, 12, 400)),
            shapely.box(*(rng.uniform(-12, 12, (2, 200))), *(rng.uniform(-12, 12, (2, 200)) + 3)),
            shapely.linestrings(rng.uniform(-15, 15, (200, 5, 2))),
            np.array([Polygon([(10, 0), (12, 0), (12, 1)]), shapely.MultiPoint([(0, 0), (20, 20)])], dtype=object),
        ]
    )
    hits = shapely.intersects(features, mask)
    results = shapely.intersection(features[hits], mask)
    dims = shapely.get_dimensions(features[hits])
    expected, expected_dropped = _per_feature(results, dims)
    kept, dropped = keep_own_dimension(results, dims)
    assert dropped == expected_dropped
    assert [None if g is None else g.wkb for g in kept] == [None if g is None else g.wkb for g in expected]
    assert sum(g is None for g in kept) >= 1  # the triangle touching the mask at (10 0) leaves nothing


def test_batches_of_features_give_the_same_answer(monkeypatch) -> None:
    # Batches of 2 over the hand-drawn clips above split a multi-part result from its neighbours.
    mask = box(0, 0, 10, 10)
    features = np.array(
        [box(5, 5, 15, 15), box(10, 0, 12, 10), MultiPolygon([box(-2, 2, 0, 4), box(8, 8, 12, 12)]), Point(5, 5)],
        dtype=object,
    )
    results = shapely.intersection(features, mask)
    whole, whole_dropped = keep_own_dimension(results, shapely.get_dimensions(features))
    monkeypatch.setattr(layer_common, "DIMENSION_BATCH", 2)
    kept, dropped = keep_own_dimension(results, shapely.get_dimensions(features))
    assert dropped == whole_dropped == 2
    assert [None if g is None else g.wkb for g in kept] == [None if g is None else g.wkb for g in whole]
    assert [None if g is None else g.area for g in kept] == [25.0, None, 4.0, 0.0]


def test_clip_to_region_by_hand_and_against_the_per_feature_cut() -> None:
    # The square 0..10: a point inside and one on its edge are kept as they are, one outside is not met;
    # a 3-D point is cut as before; a half-inside square leaves 25; a multipoint keeps its point inside.
    region = box(0, 0, 10, 10)
    features = np.array(
        [
            Point(5, 5),
            Point(10, 5),
            Point(20, 20),
            Point(5, 5, 1),
            box(5, 5, 15, 15),
            shapely.MultiPoint([(1, 1), (20, 20)]),
            box(10, 0, 12, 10),
        ],
        dtype=object,
    )
    hits, kept, dropped = layer_common.clip_to_region(features, region)
    assert hits.tolist() == [True, True, False, True, True, True, True]
    assert kept[0] is features[0] and kept[1] is features[1]
    assert kept[2].has_z and kept[3].area == 25.0 and kept[4].equals(Point(1, 1)) and kept[5] is None
    assert dropped == 1
    expected, expected_dropped = _per_feature(
        shapely.intersection(features[hits], region), shapely.get_dimensions(features[hits])
    )
    assert dropped == expected_dropped
    assert [None if g is None else g.wkb for g in kept] == [None if g is None else g.wkb for g in expected]


def test_clipped_random_points_are_the_per_feature_cut_s_bytes() -> None:
    rng = np.random.default_rng(11)
    points = shapely.points(rng.uniform(-12, 12, 3_000), rng.uniform(-12, 12, 3_000))
    region = Point(0, 0).buffer(10, quad_segs=8)
    hits, kept, dropped = layer_common.clip_to_region(points, region)
    expected, expected_dropped = _per_feature(
        shapely.intersection(points[hits], region), shapely.get_dimensions(points[hits])
    )
    assert dropped == expected_dropped == 0
    assert shapely.to_wkb(kept).tolist() == shapely.to_wkb(np.array(expected, dtype=object)).tolist()
    assert 0 < hits.sum() < 3_000


def test_no_features_no_parts() -> None:
    kept, dropped = keep_own_dimension(np.array([], dtype=object), np.array([], dtype=int))
    assert len(kept) == 0 and dropped == 0


# -- buffer_layer ---------------------------------------------------------------------------------------


def test_sampling_cells_by_hand() -> None:
    # 0.05-degree bins: (0.01, 0.01) and (0.04, 0.02) share cell (0, 0); (0.06, 0.01) is (1, 0);
    # (-0.01, 0) is (-1, 0). Sorted by lon bin then lat bin: (-1,0), (0,0), (1,0).
    assert SAMPLE_BIN_DEGREES == 0.05
    cells, which = _sample_cells(np.array([0.01, 0.04, 0.06, -0.01]), np.array([0.01, 0.02, 0.01, 0.0]))
    assert cells.tolist() == [[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]
    assert which.tolist() == [1, 1, 2, 0]


def test_sampling_cells_match_the_row_unique() -> None:
    rng = np.random.default_rng(3)
    lon, lat = rng.uniform(-180, 180, 50_000), rng.uniform(-90, 90, 50_000)
    lon[:3], lat[:3] = [180.0, -180.0, 0.0], [90.0, -90.0, 0.0]
    expected_cells, expected_which = np.unique(
        np.floor(np.column_stack([lon, lat]) / SAMPLE_BIN_DEGREES), axis=0, return_inverse=True
    )
    cells, which = _sample_cells(lon, lat)
    assert np.array_equal(cells, expected_cells)
    assert np.array_equal(which, expected_which.reshape(-1))


# The default 64-gon inscribed in a 50 m circle: (64/2) sin(2 pi/64) 50^2 = 7,841.371 m^2.
GON64_50M = 32 * math.sin(2 * math.pi / 64) * 50.0**2


@pytest.mark.parametrize("z", [False, True], ids=["flat", "with-z"])
def test_points_in_a_utm_zone_buffer_to_the_64_gon(app, workspace: Path, z: bool) -> None:
    # Two points in zone 10N near its central meridian (scale ~0.9996-0.9997, inside the 0.1 % tolerance):
    # one projection for the layer, and each buffer is the planar 64-gon of 50 m: 7,841.37 m^2. A Z value
    # (the layer that is still flattened before it is placed) gives the same disc.
    coords = [(500_000.0, 4_200_000.0), (501_000.0, 4_201_000.0)]
    geoms = [Point(x, y, 7.0) if z else Point(x, y) for x, y in coords]
    gpd.GeoDataFrame({"id": [1, 2]}, geometry=geoms, crs=32610).to_parquet(workspace / "p.parquet", index=False)
    app.run("buffer_layer", {"input_path": "p.parquet", "distance_meters": 50, "output_path": "b.parquet"})
    out = gpd.read_parquet(workspace / "b.parquet")
    assert out["id"].tolist() == [1, 2]
    assert out.geometry.area.tolist() == pytest.approx([GON64_50M, GON64_50M], rel=1e-9)
    assert out.geometry.centroid.x.tolist() == pytest.approx([500_000.0, 501_000.0], abs=1e-6)
    assert manifest(workspace / "b.parquet")["crs_decisions"]["x-mapsmith:buffer_projection"]["method"] == (
        "single_projection"
    )
