"""``mapsmith.crs.to_lonlat``: the transformation to longitude and latitude is searched from the CRS as read back
from its own WKT (faster for a GeoPandas-written PROJJSON); it must stay the transformation PROJ finds from the CRS
as read, and give the coordinates worked out by hand. Nothing is timed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyproj import CRS, Transformer

from mapsmith import crs as mcrs


def _geopandas_projjson(code: str) -> str:
    """The CRS's PROJJSON as GeoPandas writes it into GeoParquet: the datum ensemble's members without their ids."""

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            for member in node.get("datum_ensemble", {}).get("members", []):
                member.pop("id", None)
            for value in node.values():
                strip(value)
        elif isinstance(node, list):
            for value in node:
                strip(value)

    document = CRS.from_user_input(code).to_json_dict()
    strip(document)
    text = json.dumps(document)
    assert '"members": [{"name"' in text or "datum_ensemble" not in text  # really without ids
    return text


def test_utm_zone_10n_central_meridian_and_equator_by_hand() -> None:
    to_lonlat = mcrs.to_lonlat(_geopandas_projjson("EPSG:32610"))
    lon, lat = to_lonlat.transform(500_000.0, 0.0)
    # the zone's central meridian is 123 degrees west; northing 0 is the equator
    assert lon == pytest.approx(-123.0, abs=1e-9)
    assert lat == pytest.approx(0.0, abs=1e-9)


def test_pseudo_mercator_origin_and_antimeridian_by_hand() -> None:
    to_lonlat = mcrs.to_lonlat(_geopandas_projjson("EPSG:3857"))
    assert to_lonlat.transform(0.0, 0.0) == pytest.approx((0.0, 0.0), abs=1e-12)
    # x = pi * 6378137 m is longitude 180
    lon, _ = to_lonlat.transform(20_037_508.342789244, 0.0)
    assert lon == pytest.approx(180.0, abs=1e-9)


@pytest.mark.parametrize("code", ["EPSG:32610", "EPSG:3857", "EPSG:27700", "EPSG:26710", "EPSG:2056", "EPSG:4267"])
def test_the_same_transformation_as_from_the_crs_as_read(code: str) -> None:
    text = _geopandas_projjson(code)
    ours = mcrs.to_lonlat(text)
    as_read = Transformer.from_crs(CRS.from_user_input(text), "EPSG:4326", always_xy=True)
    bounds = CRS.from_user_input(code).area_of_use.bounds  # type: ignore[union-attr]
    lon = [bounds[0] + (bounds[2] - bounds[0]) * k / 4 for k in range(5)]
    lat = [bounds[1] + (bounds[3] - bounds[1]) * k / 4 for k in range(5)]
    x, y = Transformer.from_crs("EPSG:4326", CRS.from_user_input(code), always_xy=True).transform(lon, lat)
    assert ours.description == as_read.description
    assert ours.transform(x, y) == as_read.transform(x, y)  # the very same doubles
