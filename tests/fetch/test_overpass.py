"""query_overpass against a local Overpass stand-in on a real socket: it answers the count, area and
data queries in the formats the Overpass API documents (``out count`` as JSON, ``out tags`` for areas,
OSM XML with ``<meta osm_base>``), and records every query it receives so the QL can be checked
against what is written here by hand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fetch_servers import Overpass, serve
from layers import read
from mapsmith.errors import MapSmithError
from mapsmith.provenance.validator import validate_manifest


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    base, httpd = serve(Overpass)
    try:
        yield f"{base}/api/interpreter"
    finally:
        httpd.shutdown()


@pytest.fixture
def app(make_app: Any, endpoint: str) -> Any:
    Overpass.queries.clear()
    return make_app(MAPSMITH_FETCH_ALLOW="127.0.0.1", MAPSMITH_OVERPASS_URL=endpoint)


BBOX = "-0.11,51.49,-0.08,51.51"


def test_cycleways_in_a_bbox_with_every_tag_as_a_field(app: Any, workspace: Path) -> None:
    result = app.run(
        "query_overpass",
        {"tags": "highway=cycleway", "geometry": "lines", "bbox": BBOX, "output_path": "cycleways.gpkg"},
    )
    # The QL, written out by hand: the count first, then the data with the ways' nodes.
    assert Overpass.queries == [
        '[out:json][timeout:180];way["highway"="cycleway"](51.49,-0.11,51.51,-0.08);out count;',
        '[out:xml][timeout:180];way["highway"="cycleway"](51.49,-0.11,51.51,-0.08);(._;>;);out body;',
    ]
    written = read(workspace / "cycleways.gpkg").sort_values("osm_id")
    assert written.crs.to_epsg() == 4326
    lines = written.astype(object).where(written.notna(), None)
    assert list(lines["osm_id"]) == ["10", "12"]
    assert list(lines["name"]) == ["Quietway 1", None] and list(lines["surface"]) == ["asphalt", None]
    assert list(lines["segregated"]) == [None, "yes"]  # a tag GDAL's default configuration would hide
    assert [list(g.coords) for g in lines.geometry] == [[(-0.1, 51.5), (-0.09, 51.5)], [(-0.09, 51.5), (-0.09, 51.505)]]
    assert result.answer["osm_base"] == "2026-11-30T08:00:00Z" and result.answer["features"] == 2
    record = json.loads((workspace / "cycleways.gpkg.provenance.json").read_text("utf-8"))
    assert validate_manifest(record) == []
    assert record["parameters"]["x-mapsmith:osm_base"] == "2026-11-30T08:00:00Z"
    assert "ODbL" in record["parameters"]["x-mapsmith:attribution"]
    (source,) = record["inputs"]
    assert source["x-mapsmith:fetched"] is True and source["path"].startswith("http://127.0.0.1:")
    assert record["parameters"]["x-mapsmith:elements_received"] == {"node": 4, "way": 2, "relation": 0}


def test_a_past_snapshot_by_date(app: Any, workspace: Path) -> None:
    app.run(
        "query_overpass",
        {
            "tags": "highway=cycleway",
            "geometry": "lines",
            "bbox": BBOX,
            "date": "2014-06-01",
            "output_path": "old.gpkg",
        },
    )
    assert Overpass.queries[-1].startswith('[out:xml][timeout:180][date:"2014-06-01T00:00:00Z"];')
    old = read(workspace / "old.gpkg")
    assert list(old["osm_id"]) == ["10"] and "surface" not in old.columns


def test_a_named_area_is_resolved_once_and_never_guessed(app: Any, workspace: Path) -> None:
    app.run(
        "query_overpass",
        {"tags": "highway=cycleway", "geometry": "lines", "area_name": "Camden", "output_path": "c.gpkg"},
    )
    assert Overpass.queries[0] == '[out:json][timeout:60];area["name"="Camden"];out tags;'
    assert (
        Overpass.queries[2]
        == '[out:xml][timeout:180];area(3600000001)->.a;way["highway"="cycleway"](area.a);(._;>;);out body;'
    )
    with pytest.raises(MapSmithError) as two:
        app.run(
            "query_overpass",
            {"tags": "highway", "geometry": "lines", "area_name": "Springfield", "output_path": "s.gpkg"},
        )
    assert two.value.code == "OVERPASS_AREA_AMBIGUOUS"
    assert [c["area_id"] for c in two.value.evidence["candidates"]] == [3600000002, 3600000003]
    with pytest.raises(MapSmithError) as none:
        app.run(
            "query_overpass", {"tags": "highway", "geometry": "lines", "area_name": "Nowhere", "output_path": "n.gpkg"}
        )
    assert none.value.code == "OVERPASS_AREA_NOT_FOUND"


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"tags": 'highway"];node(1);out;["x', "bbox": BBOX}, "OVERPASS_FILTER_INVALID"),  # QL injection
        ({"tags": "highway", "bbox": "10,5,0,6"}, "OVERPASS_BBOX_INVALID"),  # west > east
        ({"tags": "highway", "bbox": BBOX, "date": "last year"}, "OVERPASS_DATE_INVALID"),
        ({"tags": "highway"}, "OVERPASS_EXTENT_REQUIRED"),
        ({"tags": "highway", "bbox": "0.0,0.0,1.0,1.0"}, "OVERPASS_QUERY_TOO_LARGE"),  # counted first
        ({"tags": "highway", "bbox": "-0.1,51.9,0.0,52.0"}, "OVERPASS_RESPONSE_INVALID"),  # a DTD in the reply
    ],
)
def test_refusals(app: Any, workspace: Path, arguments: dict[str, Any], code: str) -> None:
    with pytest.raises(MapSmithError) as refused:
        app.run("query_overpass", {"geometry": "lines", "output_path": "x.gpkg", **arguments})
    assert refused.value.code == code and refused.value.hint
    assert not (workspace / "x.gpkg").exists()
    if code == "OVERPASS_QUERY_TOO_LARGE":
        assert refused.value.evidence["counted"]["total"] == 9_000_000
        assert len(Overpass.queries) == 1  # the data was never asked for
    if code.endswith(("INVALID", "REQUIRED")) and code != "OVERPASS_RESPONSE_INVALID":
        assert Overpass.queries == []  # refused before any request


def test_the_endpoint_must_be_allowed_like_any_host(make_app: Any, endpoint: str, workspace: Path) -> None:
    app = make_app(MAPSMITH_FETCH_ALLOW="overpass.example.org", MAPSMITH_OVERPASS_URL=endpoint)
    with pytest.raises(MapSmithError) as refused:
        app.run("query_overpass", {"tags": "highway", "geometry": "lines", "bbox": BBOX, "output_path": "x.gpkg"})
    assert refused.value.code == "FETCH_HOST_NOT_ALLOWED"
