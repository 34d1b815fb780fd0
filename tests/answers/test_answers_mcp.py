"""KMZ in, a refused KML, a zipped shapefile and a paged answer, through a real MCP client over stdio.

The same hand-built inputs as tests/formats and tests/answers; here the values are read from what a
client receives (structured content on success, the error's code on a refusal).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import anyio
import geopandas as gpd
import pytest
from shapely.geometry import Point, box

from layers import write_layer
from mcp_client import Reply, call, mcp_session

pytestmark = pytest.mark.mcp

DOC = (
    '<?xml version="1.0" encoding="UTF-8"?><kml xmlns="http://www.opengis.net/kml/2.2"><Document>'
    "<Folder><name>wells</name>"
    "<Placemark><name>W1</name><Point><coordinates>10.5,46.25</coordinates></Point></Placemark>"
    "<Placemark><name>W2</name><Point><coordinates>11,47</coordinates></Point></Placemark>"
    "</Folder>{extra}</Document></kml>"
)
LINK = "<NetworkLink><Link><href>http://127.0.0.1:9/more.kml</href></Link></NetworkLink>"


def test_formats_and_pages_through_a_real_client(workspace: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(workspace / "sites.kmz", "w") as kmz:
        kmz.writestr("doc.kml", DOC.format(extra=""))
    (workspace / "linked.kml").write_text(DOC.format(extra=LINK), "utf-8")
    towns = gpd.GeoDataFrame(
        {"name": ["Zürich", "Île"]}, geometry=[Point(2683000, 1248000), Point(2500000, 1117000)], crs="EPSG:2056"
    )
    towns.to_file(tmp_path / "towns.shp", engine="pyogrio", encoding="cp1252")
    with zipfile.ZipFile(workspace / "towns.zip", "w") as archive:
        for ext in ("shp", "shx", "dbf", "prj", "cpg"):
            archive.write(tmp_path / f"towns.{ext}", f"towns.{ext}")
    # 25 squares of 100 m x 100 m in EPSG:3035: 10,000 m2 each
    squares = [box(4321000 + 200 * i, 3210000, 4321100 + 200 * i, 3210100) for i in range(25)]
    write_layer(workspace / "squares.gpkg", squares, "EPSG:3035", id=list(range(1, 26)))

    async def talk() -> dict[str, Reply]:
        async with mcp_session(workspace) as (session, _):
            return {
                "kmz": await call(session, "describe_dataset", {"input_path": "sites.kmz"}),
                "linked": await call(session, "describe_dataset", {"input_path": "linked.kml"}),
                "towns": await call(session, "describe_dataset", {"input_path": "towns.zip", "limit": 1}),
                "areas": await call(
                    session,
                    "measure_area",
                    {
                        "input_path": "squares.gpkg",
                        "method": "planar",
                        "output_path": "a.gpkg",
                        "offset": 20,
                        "limit": 10,
                    },
                ),
            }

    replies = anyio.run(talk)
    kmz = replies["kmz"]
    assert not kmz.is_error, kmz.data
    layer = kmz.data["answer"]["described"][0]
    assert layer["layer"] == "wells" and layer["feature_count"] == 2 and layer["bounds"] == [10.5, 46.25, 11.0, 47.0]

    linked = replies["linked"]
    assert linked.is_error and linked.data["code"] == "KML_EXTERNAL_REFERENCE"

    towns = replies["towns"]
    assert not towns.is_error, towns.data
    detail = towns.data["answer"]["described"][0]
    assert detail["field_details"] == [
        {"name": "name", "type": "String", "null_count": 0, "samples": ["Zürich", "Île"], "samples_shortened": False}
    ]

    areas = replies["areas"]
    assert not areas.is_error, areas.data
    answer = areas.data["answer"]
    assert [r["id"] for r in answer["rows"]] == [21, 22, 23, 24, 25]
    assert answer["page"]["total"] == 25 and answer["page"]["next_offset"] is None
