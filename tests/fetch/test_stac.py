"""stac_search and fetch_stac_asset against a local STAC API on a real socket: a landing page, /search,
an item, and a tiled GeoTIFF served with HTTP range requests, so GDAL reads only the window a bbox
needs. Every request the server receives is recorded; the cell values follow a formula written here,
v(row, col) = 2 * row + col, so any window's expected values are known without reading the file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from fetch_servers import CELL, ORIGIN, Stac, serve, write_cog
from mapsmith.errors import MapSmithError
from mapsmith.provenance.validator import validate_manifest

pytest.importorskip("pystac_client")
rasterio = pytest.importorskip("rasterio")


@pytest.fixture(scope="module")
def stac(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    Stac.cog = write_cog(tmp_path_factory.mktemp("cog") / "cog.tif")
    Stac.base, httpd = serve(Stac)
    try:
        yield Stac.base
    finally:
        httpd.shutdown()


@pytest.fixture
def app(make_app: Any, stac: str) -> Any:
    Stac.seen.clear()
    Stac.served_bytes = 0
    return make_app(MAPSMITH_FETCH_ALLOW="127.0.0.1")


def test_a_search_answers_items_with_their_assets(app: Any, stac: str) -> None:
    result = app.run(
        "stac_search",
        {
            "catalogue_url": f"{stac}/",
            "collections": "s2",
            "bbox": "-1.6,51.4,-1.5,51.5",
            "datetime": "2024-06-01/2024-06-30",
            "query": "eo:cloud_cover<20",
        },
    )
    answer = result.answer
    assert [i["id"] for i in answer["items"]] == ["a", "b"]
    assert [i["cloud_cover"] for i in answer["items"]] == [12.5, 3.0]
    assert answer["items"][0]["self_href"] == f"{stac}/collections/s2/items/a"
    assert answer["items"][0]["assets"]["red"]["href"] == f"{stac}/data/cog.tif"
    assert answer["items"][0]["datetime"] == "2024-06-15T11:00:00Z"
    search = next(parse_qs(urlsplit(p).query) for p in Stac.seen if p.startswith("/search"))
    assert search["collections"] == ["s2"] and search["bbox"] == ["-1.6,51.4,-1.5,51.5"]
    assert search["datetime"] == ["2024-06-01T00:00:00Z/2024-06-30T23:59:59Z"]
    assert json.loads(search["query"][0]) == {"eo:cloud_cover": {"lt": 20}}


def test_an_asset_window_is_read_with_range_requests(app: Any, stac: str, workspace: Path) -> None:
    from pyproj import Transformer

    # The UTM rectangle of rows 100..149 and columns 200..259, as a lon/lat bbox slightly inside it.
    west_x, north_y = ORIGIN[0] + 200 * CELL, ORIGIN[1] - 100 * CELL
    east_x, south_y = ORIGIN[0] + 260 * CELL, ORIGIN[1] - 150 * CELL
    to_lonlat = Transformer.from_crs("EPSG:32630", "EPSG:4326", always_xy=True)
    corners = [to_lonlat.transform(x, y) for x in (west_x + 1, east_x - 1) for y in (south_y + 1, north_y - 1)]
    bbox = ",".join(
        f"{v:.8f}"
        for v in (
            max(c[0] for c in corners[:2]),
            max(c[1] for c in corners[::2]),
            min(c[0] for c in corners[2:]),
            min(c[1] for c in corners[1::2]),
        )
    )
    result = app.run(
        "fetch_stac_asset",
        {"item": f"{stac}/collections/s2/items/a", "asset": "red", "bbox": bbox, "output_path": "red.tif"},
    )
    window = result.answer["window"]
    with rasterio.open(workspace / "red.tif") as out:
        data = out.read(1)
        assert out.crs.to_epsg() == 32630 and out.scales == (0.0001,) and out.nodata == 0
        assert (
            out.transform.c == ORIGIN[0] + window["col_off"] * CELL
            and out.transform.f == ORIGIN[1] - window["row_off"] * CELL
        )
    rows, cols = np.indices(data.shape)
    assert np.array_equal(data, 2 * (rows + window["row_off"]) + cols + window["col_off"])
    # the window holds the rectangle and is not much larger (the bbox is a lon/lat box around it)
    assert window["row_off"] <= 100 and window["col_off"] <= 200
    assert window["row_off"] + window["height"] >= 150 and window["col_off"] + window["width"] >= 260
    assert window["height"] <= 56 and window["width"] <= 66
    assert 0 < Stac.served_bytes < len(Stac.cog) / 2  # ranges, not the whole file
    record = json.loads((workspace / "red.tif.provenance.json").read_text("utf-8"))
    assert validate_manifest(record) == []
    (source,) = record["inputs"]
    assert source["path"] == f"{stac}/collections/s2/items/a" and source["x-mapsmith:fetched"] is True
    assert record["parameters"]["x-mapsmith:asset_href"] == f"{stac}/data/cog.tif"


def test_refusals(app: Any, make_app: Any, stac: str, workspace: Path) -> None:
    with pytest.raises(MapSmithError) as missing:
        app.run("fetch_stac_asset", {"item": f"{stac}/collections/s2/items/a", "asset": "nir", "output_path": "n.tif"})
    assert missing.value.code == "STAC_ASSET_NOT_FOUND" and missing.value.evidence["assets"] == ["red"]
    off = make_app()
    with pytest.raises(MapSmithError) as disabled:
        off.run("stac_search", {"catalogue_url": f"{stac}/"})
    assert disabled.value.code == "FETCH_DISABLED"
    elsewhere = make_app(MAPSMITH_FETCH_ALLOW="stac.example.org")
    with pytest.raises(MapSmithError) as host:
        elsewhere.run("stac_search", {"catalogue_url": f"{stac}/"})
    assert host.value.code == "FETCH_HOST_NOT_ALLOWED"
    assert not (workspace / "n.tif").exists()
    # GDAL follows the asset's redirect itself: through the policy proxy, where it is refused
    with pytest.raises(MapSmithError) as redirected:
        app.run(
            "fetch_stac_asset", {"item": f"{stac}/collections/s2/items/moved", "asset": "red", "output_path": "m.tif"}
        )
    assert redirected.value.code == "FETCH_HOST_NOT_ALLOWED"
    assert redirected.value.evidence["host"] == "169.254.169.254"
    assert not (workspace / "m.tif").exists()


def test_fetch_raster_reads_a_geotiffs_window_by_url(app: Any, stac: str, workspace: Path) -> None:
    # The UTM rectangle of rows 0..49 and columns 0..49 (the grid's north-west corner), as lon/lat.
    from pyproj import Transformer

    to_lonlat = Transformer.from_crs("EPSG:32630", "EPSG:4326", always_xy=True)
    (west, north), (east, south) = (
        to_lonlat.transform(ORIGIN[0] + 1, ORIGIN[1] - 1),
        to_lonlat.transform(ORIGIN[0] + 499, ORIGIN[1] - 499),
    )
    bbox = f"{west:.8f},{south:.8f},{east:.8f},{north:.8f}"
    result = app.run("fetch_raster", {"url": f"{stac}/data/cog.tif", "bbox": bbox, "output_path": "corner.tif"})
    window = result.answer["window"]
    assert (
        (window["col_off"], window["row_off"]) == (0, 0)
        and 50 <= window["width"] <= 56
        and 50 <= window["height"] <= 56
    )
    with rasterio.open(workspace / "corner.tif") as out:
        data = out.read(1)
        assert out.scales == (0.0001,) and out.transform.c == ORIGIN[0] and out.transform.f == ORIGIN[1]
    rows, cols = np.indices(data.shape)
    assert np.array_equal(data, 2 * rows + cols)
    assert 0 < result.answer["bytes_fetched"] < len(Stac.cog) / 2
    record = json.loads((workspace / "corner.tif.provenance.json").read_text("utf-8"))
    assert validate_manifest(record) == [] and record["inputs"][0]["path"] == f"{stac}/data/cog.tif"
    # the clean twin without a bbox: the whole grid
    whole = app.run("fetch_raster", {"url": f"{stac}/data/cog.tif", "output_path": "whole.tif"}).answer["window"]
    assert whole == {"col_off": 0, "row_off": 0, "width": 512, "height": 512}
