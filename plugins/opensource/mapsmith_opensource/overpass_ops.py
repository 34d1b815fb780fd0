"""query_overpass: OpenStreetMap features through an Overpass API, as a layer with the OSM tags as fields.

The query is built here from a tag filter (never free Overpass QL, so an agent's text cannot become
statements), a bbox or a named area, and an optional ``date`` for a historical snapshot (Overpass's
``[date:…]``). It is sent to the endpoint the operator names (``MAPSMITH_OVERPASS_URL``, default the main
public instance) through ``mapsmith.fetch`` — so the endpoint must be allowed in ``MAPSMITH_FETCH_ALLOW``
like any host — first as a count (``out count``) to refuse a query that is too large with its estimate
instead of timing out, then for the data as OSM XML.

Ways and relations are assembled into lines and (multi)polygons by GDAL's OSM driver (read through
pyogrio), chosen over osmnx (a street-network tool that pulls in networkx and its own HTTP client) and
osm2geojson (thin maintenance): GDAL is already every reader's engine here, and its driver's rules for
which closed ways are areas and how multipolygon relations are built are OpenStreetMap's own convention
(``closed_ways_are_polygons``). The configuration given to it is generated per response so that every
tag key present becomes a field (GDAL's default keeps a few and packs the rest in ``other_tags``).

Before GDAL reads it the response is parsed once with expat with every DTD refused (no entity is ever
expanded), which also yields the tag keys, the ``osm_base`` timestamp and the element counts. The
manifest records the endpoint, the query, the digest of the response, ``osm_base``, the element counts
and OpenStreetMap's attribution (ODbL). Nothing is written but ``ctx.temp_output`` and a temporary
folder in the system's temporary directory, removed after the run.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.remote_raster import bbox_argument

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("query_overpass", "query_overpass", engine="overpass"),)

ENDPOINT_ENV = "MAPSMITH_OVERPASS_URL"
DEFAULT_ENDPOINT = "https://overpass-api.de/api/interpreter"
MAX_ELEMENTS_ENV = "MAPSMITH_OVERPASS_MAX_ELEMENTS"
DEFAULT_MAX_ELEMENTS = 200_000
QUERY_TIMEOUT_S = 180  # Overpass's own [timeout:], seconds
ATTRIBUTION = "© OpenStreetMap contributors, available under the Open Database Licence (ODbL 1.0)"
# Which GDAL OSM layer holds each geometry asked for.
LAYERS = {"points": "points", "lines": "lines", "polygons": "multipolygons"}
# OSM's convention (GDAL's default osmconf.ini): closed ways with these keys are areas.
CLOSED_WAYS_ARE_POLYGONS = (
    "aeroway,amenity,boundary,building,craft,geological,historic,landuse,leisure,military,natural,office,"
    "place,shop,sport,tourism,highway=platform,public_transport=platform"
)
_KEY = r"[A-Za-z_][A-Za-z0-9_:.\-]*"
_VALUE = r"[^\"\\\[\];]+"
_FILTER = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?:(?P<op>!=|=|~)\s*(?P<value>{_VALUE}?))?\s*$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}Z)?$")


@dataclass
class OsmResponse:
    """What expat read from an OSM XML response."""

    osm_base: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"node": 0, "way": 0, "relation": 0})
    keys: list[str] = field(default_factory=list)


def _filters(text: str) -> list[str]:
    """``highway=cycleway, surface~asphalt|paved, !access``-style filters as Overpass tag selectors."""
    selectors = []
    for part in [p for p in text.split(",") if p.strip()]:
        negated = part.strip().startswith("!")
        m = _FILTER.match(part.strip().lstrip("!"))
        if m is None or (negated and m.group("op")):
            raise ArgumentError(
                f"tags: {part.strip()!r} is not a tag filter",
                code="OVERPASS_FILTER_INVALID",
                evidence={"argument": "tags", "filter": part.strip()},
                hint="write filters as key=value, key!=value, key~regex, key (has the tag) or !key, "
                "comma-separated; quotes, brackets and semicolons are not accepted",
            )
        key, op, value = m.group("key"), m.group("op"), m.group("value")
        if negated:
            selectors.append(f'[!"{key}"]')
        elif op is None:
            selectors.append(f'["{key}"]')
        else:
            selectors.append(f'["{key}"{op}"{value.strip()}"]')
    if not selectors:
        raise ArgumentError(
            "tags names no filter",
            code="OVERPASS_FILTER_INVALID",
            evidence={"argument": "tags"},
            hint="pass at least one filter, e.g. highway=cycleway",
        )
    return selectors


def build_query(arguments: dict[str, Any], *, count: bool, area_id: int | None = None) -> str:
    """The Overpass QL for the arguments: a count, or the data as XML."""
    geometry = arguments["geometry"]
    selectors = "".join(_filters(arguments["tags"]))
    settings = f"[out:{'json' if count else 'xml'}][timeout:{QUERY_TIMEOUT_S}]"
    date = arguments.get("date")
    if date:
        if not _DATE.match(str(date)):
            raise ArgumentError(
                f"date {date!r} is not YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ",
                code="OVERPASS_DATE_INVALID",
                evidence={"argument": "date", "value": date},
                hint="pass the snapshot's date as 2014-06-01 (midnight UTC) or 2014-06-01T12:00:00Z",
            )
        stamp = date if "T" in str(date) else f"{date}T00:00:00Z"
        settings += f'[date:"{stamp}"]'
    if area_id is not None:
        prefix, scope = f"area({area_id})->.a;", "(area.a)"
    else:
        west, south, east, north = bbox_argument(arguments["bbox"], code="OVERPASS_BBOX_INVALID")
        prefix, scope = "", f"({south},{west},{north},{east})"
    if geometry == "points":
        body = f"node{selectors}{scope};"
    elif geometry == "lines":
        body = f"way{selectors}{scope};"
    else:
        body = f'(way{selectors}{scope};relation{selectors}["type"="multipolygon"]{scope};);'
    tail = "out count;" if count else "(._;>;);out body;"
    return f"{settings};{prefix}{body}{tail}"


def parse_osm_xml(path: Path) -> OsmResponse:
    """Walk the response with expat, refusing any DTD; the tag keys, counts and osm_base."""
    import xml.parsers.expat

    found = OsmResponse()
    keys: dict[str, None] = {}
    root: list[str] = []

    def doctype(*_args: Any) -> None:
        raise InputError(
            "the Overpass response declares a DTD: refused before any entity is read",
            code="OVERPASS_RESPONSE_INVALID",
            evidence={"reason": "DOCTYPE"},
            hint="check that MAPSMITH_OVERPASS_URL names a real Overpass API endpoint",
        )

    def start(name: str, attrs: dict[str, str]) -> None:
        if not root:
            root.append(name)
        if name in found.counts:
            found.counts[name] += 1
        elif name == "tag" and "k" in attrs:
            keys.setdefault(attrs["k"], None)
        elif name == "meta" and "osm_base" in attrs:
            found.osm_base = attrs["osm_base"]

    parser = xml.parsers.expat.ParserCreate()
    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = doctype
    parser.StartElementHandler = start
    try:
        with path.open("rb") as f:
            parser.ParseFile(f)
    except xml.parsers.expat.ExpatError as exc:
        raise InputError(
            f"the Overpass response is not well-formed XML: {exc}",
            code="OVERPASS_RESPONSE_INVALID",
            evidence={"reason": str(exc)},
            hint="try again; if it persists, check MAPSMITH_OVERPASS_URL",
        ) from exc
    if root != ["osm"]:
        raise InputError(
            f"the Overpass response is not OSM XML (root element {root[:1] or 'none'})",
            code="OVERPASS_RESPONSE_INVALID",
            evidence={"root": root[:1]},
            hint="check that MAPSMITH_OVERPASS_URL names a real Overpass API endpoint",
        )
    found.keys = list(keys)
    return found


def _osmconf(keys: list[str]) -> str:
    attributes = ",".join(k for k in keys if "," not in k)
    sections = "".join(
        f"[{layer}]\nosm_id=yes\nattributes={attributes}\nignore=\n"
        for layer in ("points", "lines", "multipolygons", "multilinestrings", "other_relations")
    )
    return f"[general]\nclosed_ways_are_polygons={CLOSED_WAYS_ARE_POLYGONS}\n{sections}"


def _read_layer(osm: Path, conf: Path, layer: str) -> Any:
    import pyogrio

    previous = pyogrio.get_gdal_config_option("OSM_CONFIG_FILE")
    pyogrio.set_gdal_config_options({"OSM_CONFIG_FILE": str(conf)})
    try:
        return pyogrio.read_dataframe(osm, layer=layer)
    finally:
        pyogrio.set_gdal_config_options({"OSM_CONFIG_FILE": previous})


def _counted(ctx: RunContext, policy: Any, endpoint: str, query: str, folder: Path) -> dict[str, int]:
    from mapsmith.fetch.http import download

    target = folder / "count.json"
    download(policy, f"{endpoint}?data={quote(query)}", target)
    try:
        tags = json.loads(target.read_text("utf-8"))["elements"][0]["tags"]
        return {k: int(tags.get(k, 0)) for k in ("nodes", "ways", "relations", "areas", "total")}
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise InputError(
            "the Overpass count answer is not what Overpass sends",
            code="OVERPASS_RESPONSE_INVALID",
            evidence={"endpoint": endpoint},
            hint=f"check that {ENDPOINT_ENV} names a real Overpass API endpoint",
        ) from exc


def _area_id(ctx: RunContext, policy: Any, endpoint: str, name: str, folder: Path) -> int:
    """The one Overpass area named ``name``; refused when none or several are (never guessed)."""
    from mapsmith.fetch.http import download

    if not re.fullmatch(r"[^\"\\\[\];]{1,200}", name):
        raise ArgumentError(
            f"area_name {name!r} holds characters an area name cannot",
            code="OVERPASS_FILTER_INVALID",
            evidence={"argument": "area_name"},
            hint="pass the area's name as OpenStreetMap spells it, without quotes, brackets or semicolons",
        )
    query = f'[out:json][timeout:60];area["name"="{name}"];out tags;'
    target = folder / "areas.json"
    download(policy, f"{endpoint}?data={quote(query)}", target)
    try:
        areas = json.loads(target.read_text("utf-8"))["elements"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            "the Overpass answer about areas is not what Overpass sends",
            code="OVERPASS_RESPONSE_INVALID",
            evidence={"endpoint": endpoint},
            hint=f"check that {ENDPOINT_ENV} names a real Overpass API endpoint",
        ) from exc
    if len(areas) != 1:
        candidates = [
            {
                "area_id": a.get("id"),
                **{k: a.get("tags", {}).get(k) for k in ("name", "admin_level", "boundary", "place", "is_in")},
            }
            for a in areas[:20]
        ]
        raise InputError(
            f"{len(areas)} areas are named {name!r}" if areas else f"no area is named {name!r}",
            code="OVERPASS_AREA_AMBIGUOUS" if areas else "OVERPASS_AREA_NOT_FOUND",
            evidence={"area_name": name, "candidates": candidates},
            hint="pass bbox instead, or the exact area name as OpenStreetMap spells it"
            + ("; the candidates are in evidence: pass bbox around the one you mean" if areas else ""),
        )
    return int(areas[0]["id"])


def query_overpass(ctx: RunContext) -> None:
    import geopandas as gpd

    from mapsmith import __version__
    from mapsmith.fetch.http import download
    from mapsmith.fetch.policy import FetchPolicy
    from mapsmith_opensource.common import write_output

    args = ctx.arguments
    if (args.get("bbox") is None) == (args.get("area_name") is None):
        raise ArgumentError(
            "query_overpass takes exactly one of bbox and area_name",
            code="OVERPASS_EXTENT_REQUIRED",
            evidence={"bbox": args.get("bbox"), "area_name": args.get("area_name")},
            hint="pass bbox='west,south,east,north' (WGS 84 degrees) or area_name='Camden'",
        )
    build_query(args, count=True, area_id=0 if args.get("area_name") else None)  # argument errors first
    policy = FetchPolicy.from_environ(ctx.environ)
    endpoint = ctx.environ.get(ENDPOINT_ENV, "").strip() or DEFAULT_ENDPOINT
    from mapsmith.limits import _positive

    limit = int(_positive(ctx.environ, MAX_ELEMENTS_ENV, DEFAULT_MAX_ELEMENTS, "elements"))
    ctx.set_engine("overpass", __version__)
    policy.check(endpoint)  # off, host or address: refused before anything is made on disk
    folder = Path(tempfile.mkdtemp(prefix="mapsmith-overpass-"))
    try:
        area_id = _area_id(ctx, policy, endpoint, args["area_name"], folder) if args.get("area_name") else None
        counted = _counted(ctx, policy, endpoint, build_query(args, count=True, area_id=area_id), folder)
        if counted["total"] > limit:
            raise InputError(
                f"the query matches {counted['total']:,} OpenStreetMap elements, more than the {limit:,} this "
                f"server fetches in one query (roughly {counted['total'] * 250 / 1e6:,.0f} MB of XML)",
                code="OVERPASS_QUERY_TOO_LARGE",
                evidence={"counted": counted, "limit": limit},
                hint="narrow the bbox or the tag filter, or split the area into tiles and merge_layers them",
            )
        query = build_query(args, count=False, area_id=area_id)
        osm = folder / "response.osm"
        record = download(
            policy, f"{endpoint}?data={quote(query)}", osm, ctx.progress, user_agent=f"MapSmith/{__version__}"
        )
        response = parse_osm_xml(osm)
        conf = folder / "osmconf.ini"
        conf.write_text(_osmconf(response.keys), "utf-8")
        frame = _read_layer(osm, conf, LAYERS[args["geometry"]])
        if "osm_id" in frame.columns and "osm_way_id" in frame.columns:  # a multipolygon from a way or a relation
            frame["osm_type"] = ["relation" if v is not None else "way" for v in frame["osm_id"]]
            frame["osm_id"] = frame["osm_id"].where(frame["osm_id"].notna(), frame["osm_way_id"])
            frame = frame.drop(columns=["osm_way_id"])
        frame = frame.drop(columns=[c for c in ("other_tags",) if c in frame.columns and frame[c].isna().all()])
        empty = [c for c in frame.columns if c != "geometry" and frame[c].isna().all()]
        frame = gpd.GeoDataFrame(frame.drop(columns=empty), geometry="geometry", crs="EPSG:4326")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ctx.remote_inputs.append(
        {
            "path": record.final_url,
            "sha256": record.sha256,
            "crs": "EPSG:4326",
            "argument": "query",
            "x-mapsmith:fetched": True,
        }
    )
    ctx.parameters.update(
        {
            "x-mapsmith:endpoint": endpoint,
            "x-mapsmith:overpass_query": query,
            "x-mapsmith:osm_base": response.osm_base,
            "x-mapsmith:elements_received": response.counts,
            "x-mapsmith:attribution": ATTRIBUTION,
            "x-mapsmith:fetch": record.to_dict(),
        }
    )
    ctx.notes.append(
        f"OpenStreetMap data as of {response.osm_base} ({ATTRIBUTION}); {len(frame)} {args['geometry']} built by "
        f"GDAL's OSM driver from {response.counts['node']} nodes, {response.counts['way']} ways and "
        f"{response.counts['relation']} relations"
    )
    ctx.check(
        "x-mapsmith:osm_ids_unique",
        not frame["osm_id"].duplicated().any() if "osm_type" not in frame.columns else True,
        f"{len(frame)} features, one per OSM element",
    )
    ctx.answer = {
        "features": len(frame),
        "osm_base": response.osm_base,
        "elements_received": response.counts,
        "fields": [c for c in frame.columns if c != "geometry"],
        "attribution": ATTRIBUTION,
    }
    write_output(ctx, frame)
