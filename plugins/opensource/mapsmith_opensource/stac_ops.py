"""stac_search and fetch_stac_asset: items of a STAC API catalogue, and the window of an asset a bbox needs.

``stac_search`` asks a STAC API (``/search``) through pystac-client and answers the items: id, collection,
date, bbox, cloud cover, their assets (key, media type, roles, href) and each item's self link, which
``fetch_stac_asset`` takes. ``fetch_stac_asset`` reads the item (its JSON digested: the manifest's input),
finds the asset, and with rasterio reads only the window of the asset that the bbox needs — GDAL's range
requests on a cloud-optimised GeoTIFF — writing it as a GeoTIFF with the asset's grid, CRS and nodata;
without a bbox the whole asset is read.

Both libraries make their own HTTP requests, so both are pointed at ``mapsmith.fetch.proxy.PolicyProxy``
for the call: every request, redirect and range they make is checked against the operator's allow-list
and address rules there, and no credential, netrc or proxy setting from the environment is used
(``requests``' ``trust_env`` off; GDAL's netrc off). A refusal inside either library surfaces as the
proxy's structured refusal. This module never writes anywhere but ``ctx.temp_output`` and the system's
temporary directory (the item's JSON, removed after the run).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from mapsmith.errors import ArgumentError, InputError
from mapsmith.fetch.policy import FetchPolicy
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.remote_raster import bbox_argument, refusal_or

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration("stac_search", "stac_search", engine="pystac-client", requirement="stac"),
    Registration("fetch_stac_asset", "fetch_stac_asset", engine="rasterio", requirement="stac"),
)
MAX_ITEMS = 100


_OPERATORS = {"<=": "lte", ">=": "gte", "!=": "neq", "<": "lt", ">": "gt", "=": "eq"}


def _query(text: str) -> dict[str, dict[str, Any]]:
    """``eo:cloud_cover<20, platform=sentinel-2b`` as the query extension's object, numbers as numbers."""
    out: dict[str, dict[str, Any]] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        for symbol, name in _OPERATORS.items():
            key, found, value = part.partition(symbol)
            if found and key.strip() and value.strip():
                raw = value.strip()
                try:
                    number: Any = int(raw)
                except ValueError:
                    try:
                        number = float(raw)
                    except ValueError:
                        number = raw
                out.setdefault(key.strip(), {})[name] = number
                break
        else:
            raise ArgumentError(
                f"query: {part!r} is not a property filter",
                code="STAC_QUERY_INVALID",
                evidence={"argument": "query", "filter": part},
                hint="write filters as property<value, <=, >, >=, = or !=, comma-separated, e.g. eo:cloud_cover<20",
            )
    return out


def stac_search(ctx: RunContext) -> None:
    import pystac_client  # the router has checked the [stac] extra (extras.stac)
    from pystac_client.stac_api_io import StacApiIO

    from mapsmith.fetch.policy import url_argument
    from mapsmith.fetch.proxy import PolicyProxy

    args = ctx.arguments
    url = url_argument(args.get("catalogue_url"), "catalogue_url")
    policy = FetchPolicy.from_environ(ctx.environ)
    policy.check(url)  # off, host or address: refused before any library runs
    limit = int(args.get("limit") or 20)
    search: dict[str, Any] = {"max_items": limit, "limit": min(limit, MAX_ITEMS)}
    if args.get("collections"):
        search["collections"] = [c.strip() for c in str(args["collections"]).split(",") if c.strip()]
    if args.get("bbox"):
        search["bbox"] = list(bbox_argument(args["bbox"], code="BBOX_INVALID"))
    if args.get("datetime"):
        search["datetime"] = str(args["datetime"])
    if args.get("query"):
        search["query"] = _query(str(args["query"]))
    ctx.set_engine("pystac-client", pystac_client.__version__)
    proxy = PolicyProxy(policy)
    with proxy as proxy_url:
        io = StacApiIO(max_retries=0, timeout=60)
        io.session.trust_env = False  # no netrc, no proxy variables, no credentials from the environment
        io.session.proxies = {"http": proxy_url, "https": proxy_url}
        try:
            client = pystac_client.Client.open(url, stac_io=io)
            items = list(client.search(method="GET", **search).items())
        except Exception as exc:  # noqa: BLE001 - refusals and library errors both become a structured error
            raise refusal_or(proxy, exc, "the STAC search at", url) from exc
    answered = []
    for item in items:
        self_link = item.get_self_href()
        answered.append(
            {
                "id": item.id,
                "collection": item.collection_id,
                "datetime": item.datetime.isoformat().replace("+00:00", "Z") if item.datetime else None,
                "bbox": item.bbox,
                "cloud_cover": item.properties.get("eo:cloud_cover"),
                "self_href": self_link,
                "assets": {
                    key: {"href": asset.href, "type": asset.media_type, "roles": asset.roles or []}
                    for key, asset in item.assets.items()
                },
            }
        )
    ctx.parameters["x-mapsmith:search"] = {"catalogue_url": url, **search}
    ctx.answer = {
        "catalogue_url": url,
        "items": answered,
        "returned": len(answered),
        "limit": limit,
        "complete": len(answered) < limit,
        "hint": "fetch_stac_asset takes an item's self_href and an asset key" if answered else None,
    }


def fetch_stac_asset(ctx: RunContext) -> None:
    from mapsmith.fetch.http import download
    from mapsmith.fetch.policy import url_argument
    from mapsmith_opensource.remote_raster import read_window

    assert ctx.temp_output is not None
    args = ctx.arguments
    item_url = url_argument(args.get("item"), "item")
    key = str(args.get("asset") or "")
    policy = FetchPolicy.from_environ(ctx.environ)
    policy.check(item_url)  # off, host or address: refused before anything is made on disk
    folder = Path(tempfile.mkdtemp(prefix="mapsmith-stac-"))
    try:
        record = download(policy, item_url, folder / "item.json")
        try:
            item = json.loads((folder / "item.json").read_text("utf-8"))
            assets = item["assets"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(
                f"{item_url} is not a STAC item (no assets)",
                code="STAC_ITEM_INVALID",
                evidence={"url": item_url},
                hint="pass an item's self_href from stac_search",
            ) from exc
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if key not in assets:
        raise ArgumentError(
            f"the item has no asset {key!r}",
            code="STAC_ASSET_NOT_FOUND",
            evidence={"item": item_url, "asset": key, "assets": sorted(assets)},
            hint=f"pass one of {sorted(assets)} as asset",
        )
    href = urljoin(record.final_url, str(assets[key].get("href", "")))
    policy.check(href)  # the asset's host too, before GDAL sees the URL
    window, relayed = read_window(ctx, policy, href, args.get("bbox"))
    ctx.remote_inputs.append(
        {"path": item_url, "sha256": record.sha256, "crs": None, "argument": "item", "x-mapsmith:fetched": True}
    )
    ctx.parameters.update(
        {
            "item": item_url,
            "asset": key,
            "x-mapsmith:asset_href": href,
            "x-mapsmith:window": window,
            "x-mapsmith:bytes_fetched": relayed,
            "x-mapsmith:item_fetch": record.to_dict(),
        }
    )
    ctx.notes.append(
        f"read a {window['width']} x {window['height']} window of asset {key!r} of {item_url} ({href}) with "
        f"range requests: {relayed:,} bytes fetched"
    )
    ctx.answer = {
        "item": item_url,
        "asset": key,
        "href": href,
        "window": ctx.parameters["x-mapsmith:window"],
        "bytes_fetched": relayed,
        "item_sha256": record.sha256,
    }
