"""Local stand-ins for the services MapSmith fetches from, on real sockets: an Overpass API answering
in the formats its documentation gives (``out count`` as JSON, areas with ``out tags``, OSM XML with
``<meta osm_base>``), and a STAC API (landing page, ``/search``, items) with a tiled GeoTIFF served by
HTTP ranges. Each records what it was asked. Used by tests/fetch and the MCP tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[str, ThreadingHTTPServer]:
    """The handler served on 127.0.0.1 in a daemon thread: its base URL and the server (to shut down)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", httpd


# -- Overpass ------------------------------------------------------------------------------------------

OSM_NOW = """<?xml version="1.0" encoding="UTF-8"?>
<osm version="0.6" generator="Overpass API 0.7.62">
<note>The data included in this document is from www.openstreetmap.org. The data is made available under ODbL.</note>
<meta osm_base="2026-11-30T08:00:00Z"/>
  <node id="1" lat="51.5000" lon="-0.1000"/>
  <node id="2" lat="51.5000" lon="-0.0900"/>
  <node id="3" lat="51.5050" lon="-0.0900"/>
  <node id="4" lat="51.5050" lon="-0.1000"/>
  <way id="10"><nd ref="1"/><nd ref="2"/>
    <tag k="highway" v="cycleway"/><tag k="name" v="Quietway 1"/><tag k="surface" v="asphalt"/></way>
  <way id="12"><nd ref="2"/><nd ref="3"/>
    <tag k="highway" v="cycleway"/><tag k="segregated" v="yes"/></way>
</osm>
"""
# The 2014 snapshot: only way 10 existed, without its surface.
OSM_2014 = (
    OSM_NOW.replace('osm_base="2026-11-30T08:00:00Z"', 'osm_base="2014-06-01T00:00:00Z"')
    .replace('<tag k="surface" v="asphalt"/>', "")
    .split('  <way id="12">')[0]
    + "</osm>\n"
)
DOCTYPE = '<?xml version="1.0"?><!DOCTYPE osm [<!ENTITY a "aaaa">]><osm>&a;</osm>'
AREAS = {
    "Camden": [
        {"type": "area", "id": 3600000001, "tags": {"name": "Camden", "admin_level": "8", "boundary": "administrative"}}
    ],
    "Springfield": [
        {"type": "area", "id": 3600000002, "tags": {"name": "Springfield", "admin_level": "8"}},
        {"type": "area", "id": 3600000003, "tags": {"name": "Springfield", "place": "town"}},
    ],
}


class Overpass(BaseHTTPRequestHandler):
    queries: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: str, kind: str) -> None:
        data = body.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        query = parse_qs(urlsplit(self.path).query)["data"][0]
        Overpass.queries.append(query)
        if "out tags;" in query:
            name = query.split('"name"="')[1].split('"')[0]
            self._send(json.dumps({"elements": AREAS.get(name, [])}), "application/json")
        elif "out count;" in query:
            total = 9_000_000 if "(0.0," in query else 3
            tags = {"nodes": "0", "ways": str(total), "relations": "0", "areas": "0", "total": str(total)}
            self._send(json.dumps({"elements": [{"type": "count", "id": 0, "tags": tags}]}), "application/json")
        elif "51.9" in query:
            self._send(DOCTYPE, "application/osm3s+xml")
        else:
            self._send(OSM_2014 if "[date:" in query else OSM_NOW, "application/osm3s+xml")


# -- STAC ----------------------------------------------------------------------------------------------

SIZE = 512
ORIGIN = (600_000.0, 5_700_000.0)  # EPSG:32630, 10 m cells
CELL = 10.0


class Stac(BaseHTTPRequestHandler):
    base = ""
    cog = b""
    seen: list[str] = []
    served_bytes = 0

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802
        if self.path == "/data/moved.tif":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/cog.tif")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(Stac.cog)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        Stac.seen.append(self.path)
        path = urlsplit(self.path).path
        if path == "/":
            self._json(landing(Stac.base))
        elif path == "/search":
            self._json(
                {
                    "type": "FeatureCollection",
                    "features": [item(Stac.base, "a", 12.5), item(Stac.base, "b", 3.0)],
                    "links": [],
                }
            )
        elif path == "/collections/s2/items/moved":  # its asset redirects to the metadata service
            moved = item(Stac.base, "moved", 1.0)
            moved["assets"]["red"]["href"] = f"{Stac.base}/data/moved.tif"
            self._json(moved)
        elif path.startswith("/collections/s2/items/"):
            self._json(item(Stac.base, path.rsplit("/", 1)[1], 12.5))
        elif path == "/data/moved.tif":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/cog.tif")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/data/cog.tif":
            start, end = 0, len(Stac.cog) - 1
            header = self.headers.get("Range")
            if header and header.startswith("bytes="):
                first, _, last = header[6:].partition("-")
                start, end = int(first), min(int(last) if last else end, end)
            body = Stac.cog[start : end + 1]
            Stac.served_bytes += len(body)
            self.send_response(206 if header else 200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            if header:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(Stac.cog)}")
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


def landing(base: str) -> dict[str, Any]:
    return {
        "type": "Catalog",
        "id": "local",
        "description": "a STAC API on loopback",
        "stac_version": "1.0.0",
        "conformsTo": [
            "https://api.stacspec.org/v1.0.0/core",
            "https://api.stacspec.org/v1.0.0/item-search",
            "https://api.stacspec.org/v1.0.0/item-search#query",
        ],
        "links": [
            {"rel": "self", "href": f"{base}/", "type": "application/json"},
            {"rel": "root", "href": f"{base}/", "type": "application/json"},
            {"rel": "search", "href": f"{base}/search", "type": "application/geo+json", "method": "GET"},
        ],
    }


def item(base: str, name: str, cloud: float) -> dict[str, Any]:
    return {
        "type": "Feature",
        "stac_version": "1.0.0",
        "id": name,
        "collection": "s2",
        "geometry": {
            "type": "Polygon",
            "coordinates": [[[-1.6, 51.4], [-1.5, 51.4], [-1.5, 51.5], [-1.6, 51.5], [-1.6, 51.4]]],
        },
        "bbox": [-1.6, 51.4, -1.5, 51.5],
        "properties": {"datetime": "2024-06-15T11:00:00Z", "eo:cloud_cover": cloud},
        "links": [{"rel": "self", "href": f"{base}/collections/s2/items/{name}"}],
        "assets": {
            "red": {
                "href": f"{base}/data/cog.tif",
                "type": "image/tiff; application=geotiff; profile=cloud-optimized",
                "roles": ["data"],
            }
        },
    }


def write_cog(path: Path) -> bytes:
    """A 512 x 512 uint16 GeoTIFF in EPSG:32630 (10 m cells, 128 x 128 tiles), v(row, col) = 2 * row + col,
    scale 0.0001, nodata 0; its bytes."""
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    rows, cols = np.indices((SIZE, SIZE))
    values = (2 * rows + cols).astype("uint16")
    profile = {
        "driver": "GTiff", "width": SIZE, "height": SIZE, "count": 1, "dtype": "uint16", "crs": "EPSG:32630",
        "transform": from_origin(*ORIGIN, CELL, CELL), "tiled": True, "blockxsize": 128, "blockysize": 128, "nodata": 0,
    }  # fmt: skip
    with rasterio.open(path, "w", **profile) as out:
        out.write(values, 1)
        out.scales, out.offsets = (0.0001,), (0.0,)
    return path.read_bytes()
