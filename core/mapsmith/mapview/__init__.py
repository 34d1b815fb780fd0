"""The map panel: MapSmith datasets on an interactive map, each with its provenance card.

``preview_map`` returns the panel's data (layers in EPSG:4326, provenance states, bounds, the lossy
preview as data); the MCP server sends it as the structured result of a tool whose ``_meta.ui``
names the ``ui://`` resource ``panel_html()`` serves (the MCP Apps extension), so a client without
the extension still gets every number. ``export_map`` writes the same panel, data and map library
inlined, as one standalone HTML file with a manifest. The map code is Leaflet's pinned release
(``static/leaflet``, checked by ``scripts/fetch_map_library.py``); nothing here loads from a CDN.
The one outbound request a page makes is for OpenStreetMap background tiles, and only when asked.
Engines are imported inside the functions that use them; this module never writes beside an input.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import uuid
from functools import cache
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from mapsmith import __version__
from mapsmith.errors import ArgumentError, InputError, OutputError

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

UI_RESOURCE_URI = "ui://mapsmith/map-panel.html"
UI_MIME_TYPE = "text/html;profile=mcp-app"
OSM_TILES = "https://tile.openstreetmap.org/{z}/{x}/{y}.png"
OSM_ATTRIBUTION = "&copy; OpenStreetMap contributors"
BACKGROUNDS = ("osm", "none")
MAX_LAYERS = 20
EXPORT_SUFFIXES = (".html", ".htm")
# The panel's only remote origin, declared so an MCP Apps host may allow it (CSP img-src); without it
# the host blocks the tiles and the panel shows a plain background.
UI_RESOURCE_META = {"ui": {"csp": {"resourceDomains": ["https://tile.openstreetmap.org"]}, "prefersBorder": True}}
_MARKER = re.compile(r"/\*MAPSMITH:([A-Z_]+)\*/")
_REMOTE_LOAD = re.compile(
    r"""<(?:script|img|iframe|source|video|audio)\b[^>]*\ssrc\s*=\s*["']?(?:https?:)?//[^"'\s>]+"""
    r"""|<link\b[^>]*\shref\s*=\s*["']?(?:https?:)?//[^"'\s>]+"""
    r"""|url\(\s*["']?(?:https?:)?//[^)"']+|@import\s+["']?(?:url\()?["']?(?:https?:)?//[^"')]+""",
    re.IGNORECASE,
)


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


@cache
def library() -> dict[str, Any]:
    """The pinned map library's record (version, tarball digests, per-file sha256)."""
    pin: dict[str, Any] = json.loads(_static("leaflet/library.json"))
    return pin


def library_problems() -> list[str]:
    """Shipped library files whose bytes differ from the sha256 recorded for the pinned release."""
    problems = []
    for name, digest in library()["files"].items():
        if hashlib.sha256(_static(f"leaflet/{name}")).hexdigest() != digest:
            problems.append(f"static/leaflet/{name} differs from leaflet {library()['version']} (sha256)")
    return problems


def _leaflet_css() -> str:
    css = _static("leaflet/leaflet.css").decode("utf-8")

    def inline(match: re.Match[str]) -> str:
        data = base64.b64encode(_static(f"leaflet/images/{match.group(1)}")).decode("ascii")
        return f"url(data:image/png;base64,{data})"

    # Leaflet's own control icons, inlined so the page asks nothing of its origin.
    return re.sub(r"url\(images/([a-z0-9-]+\.png)\)", inline, css)


def _json_for_script(data: Any) -> str:
    # Inside <script type="application/json">, "</" could close the element; "<\/" is the same JSON string.
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")


def panel_html(data: dict[str, Any] | None = None) -> str:
    """The panel page. Without ``data`` it waits for an MCP Apps host's tool result; with it, it is standalone."""
    parts = {
        "LEAFLET_CSS": _leaflet_css(),
        "PANEL_CSS": _static("panel.css").decode("utf-8"),
        "LEAFLET_JS": _static("leaflet/leaflet.js").decode("utf-8"),
        "PANEL_JS": _static("panel.js").decode("utf-8"),
        "DATA": _json_for_script(data) if data is not None else "null",
        "LIBRARY": f"Leaflet {library()['version']} (BSD-2-Clause)",
    }
    template = _static("panel.html").decode("utf-8")
    return _MARKER.sub(lambda m: parts[m.group(1)], template)  # one pass: inserted text is never re-scanned


def _resolve_inputs(app: MapSmith, paths: Any) -> list[tuple[str, str, Path]]:
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise ArgumentError(
            "paths must be a non-empty list of dataset paths",
            code="MISSING_ARGUMENT",
            evidence={"argument": "paths"},
            hint='pass paths=["result.parquet", "elevation.tif"]',
        )
    if len(paths) > MAX_LAYERS:
        raise ArgumentError(
            f"{len(paths)} layers asked; a map panel shows at most {MAX_LAYERS}",
            code="MAP_TOO_MANY_LAYERS",
            evidence={"argument": "paths", "count": len(paths), "limit": MAX_LAYERS},
            hint="merge layers first (merge_layers) or preview them in several maps",
        )
    from mapsmith import crsguard, parts

    out = []
    for index, given in enumerate(paths):
        key = f"paths[{index}]"
        resolved = app.workspace.resolve(given, argument=key)
        if not isinstance(resolved, Path):
            raise InputError(
                f"{key}: remote datasets are not shown on a map yet",
                code="REMOTE_INPUT_UNSUPPORTED",
                evidence={"argument": key, "path": given},
                hint="copy the dataset into the workspace and pass its local path",
            )
        if not resolved.exists():
            raise InputError(
                f"{key} does not exist: {given}",
                code="INPUT_NOT_FOUND",
                evidence={"argument": key, "path": given},
                hint="check the path; relative paths are resolved against the workspace",
            )
        folder = parts.is_parts_folder(resolved)  # a folder of GeoParquet parts is one dataset
        if resolved.is_dir() and not folder and not resolved.name.lower().endswith(".gdb"):
            raise InputError(
                f"{given} is a directory, not a dataset",
                code="INPUT_IS_DIRECTORY",
                evidence={"argument": key, "path": given},
                hint="pass the output_path a MapSmith operation wrote (a folder of parts ends in .parquet)",
            )
        # As in the runner: the CRS a file declares is checked from its bytes before GDAL opens it, each part's
        # as a file's.
        for declaring in parts.require_parquet_parts(resolved) if folder else [resolved]:
            crsguard.check_declared_crs(declaring, argument=key, workspace_root=app.workspace.root)
        out.append((key, given, resolved))
    return out


def _check_options(max_features: Any, simplify_meters: Any, background: Any) -> None:
    if isinstance(max_features, bool) or not isinstance(max_features, int) or max_features < 1:
        raise ArgumentError(
            f"max_features_per_layer must be a whole number of at least 1, not {max_features!r}",
            code="INVALID_ARGUMENT",
            evidence={"argument": "max_features_per_layer", "value": max_features},
            hint="pass for example max_features_per_layer=2000",
        )
    if simplify_meters is not None and (
        isinstance(simplify_meters, bool) or not isinstance(simplify_meters, int | float) or simplify_meters < 0
    ):
        raise ArgumentError(
            f"simplify_meters must be a distance of at least 0 m, not {simplify_meters!r}",
            code="INVALID_ARGUMENT",
            evidence={"argument": "simplify_meters", "value": simplify_meters},
            hint="pass 0 to draw geometries unsimplified, or leave it out for an automatic tolerance",
        )
    if background not in BACKGROUNDS:
        raise ArgumentError(
            f"background must be one of {list(BACKGROUNDS)}, not {background!r}",
            code="INVALID_ARGUMENT",
            evidence={"argument": "background", "value": background},
            hint="'osm' asks tile.openstreetmap.org for the background; 'none' makes no request at all",
        )


def preview_map(
    app: MapSmith,
    paths: Any,
    max_features_per_layer: int = 0,
    simplify_meters: float | None = None,
    background: str = "osm",
) -> dict[str, Any]:
    """The panel's data for ``paths``: one entry per layer with its provenance card and its lossy preview."""
    from mapsmith.mapview.cards import provenance_card
    from mapsmith.mapview.layers import DEFAULT_MAX_FEATURES, DISPLAY_CRS, is_raster, raster_layer, vector_layer

    max_features = max_features_per_layer or DEFAULT_MAX_FEATURES
    _check_options(max_features, simplify_meters, background)
    layers = []
    for key, given, path in _resolve_inputs(app, paths):
        if is_raster(path):
            layer = raster_layer(path, given)
        else:
            layer = vector_layer(path, given, max_features, simplify_meters)
        layer = {"name": path.name, "path": given, "argument": key, **layer}
        layer["provenance"] = provenance_card(path, app.workspace.relative_label)
        layers.append(layer)
    boxes = [layer["bounds"] for layer in layers if layer["bounds"]]
    bounds = (
        [min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes)]
        if boxes
        else None
    )
    states = [layer["provenance"]["state"] for layer in layers]
    return {
        "layers": layers,
        "bounds": bounds,
        "display_crs": DISPLAY_CRS,
        "states": {s: states.count(s) for s in ("verified", "verification_failed", "not_verifiable")},
        "background": (
            {"kind": "osm", "tiles": OSM_TILES, "attribution": OSM_ATTRIBUTION}
            if background == "osm"
            else {"kind": "none"}
        ),
        "ui_resource": UI_RESOURCE_URI,
        "notes": [
            "a preview, lossy on purpose: vectors capped, simplified and reprojected to EPSG:4326, rasters "
            "rendered to a coloured PNG; the datasets on disk stay the record",
            *[f"{layer['name']}: {layer['lossy']}" for layer in layers],
        ],
    }


def _html_checks(html: str, data: dict[str, Any], asked: int) -> list[dict[str, Any]]:
    leaflet_ok = not library_problems() and _static("leaflet/leaflet.js").decode("utf-8") in html
    # Elements and rules that load something: a remote origin in any of them is a request the page
    # makes on its own. (A plain link, like Leaflet's attribution, loads nothing until clicked.)
    remote = sorted(set(_REMOTE_LOAD.findall(html)))
    shown = len(data["layers"])
    return [
        {
            "name": "x-mapsmith:map_library_intact",
            "passed": leaflet_ok,
            "detail": f"Leaflet {library()['version']} inlined byte for byte as pinned (sha256 per file)"
            if leaflet_ok
            else "the inlined map library differs from the pinned release",
            "critical": True,
        },
        {
            "name": "x-mapsmith:no_remote_resources",
            "passed": not remote,
            "detail": "no script, style, font or image is loaded from another origin"
            if not remote
            else f"remote references in the page: {remote[:3]}",
            "critical": True,
        },
        {
            "name": "x-mapsmith:layers_rendered",
            "passed": shown == asked,
            "detail": f"{shown} of {asked} datasets rendered as layers",
            "critical": True,
        },
    ]


def export_map(
    app: MapSmith,
    paths: Any,
    output_path: Any,
    overwrite: bool = False,
    max_features_per_layer: int = 0,
    simplify_meters: float | None = None,
    background: str = "osm",
) -> dict[str, Any]:
    """Write the panel for ``paths`` as one standalone HTML file, atomically, with its manifest."""
    from mapsmith.outputs import output_lock
    from mapsmith.provenance.manifest import base_record, manifest_path, posix_label, utc_now, write_manifest
    from mapsmith.provenance.validator import validate_manifest

    started = utc_now()
    if not isinstance(output_path, str):  # '' goes on to the path policy, which refuses it as PATH_EMPTY
        raise ArgumentError(
            "export_map needs 'output_path', an .html file in the workspace",
            code="MISSING_ARGUMENT",
            evidence={"argument": "output_path"},
            hint="pass output_path='map.html'",
        )
    resolved = app.workspace.resolve(output_path, argument="output_path")
    if not isinstance(resolved, Path):
        raise OutputError(
            "output_path must be a local path",
            code="OUTPUT_REMOTE",
            evidence={"path": output_path},
            hint="write inside the workspace",
        )
    inputs = _resolve_inputs(app, paths)
    # The runner's own output checks (format, an input, a folder, a missing folder, an existing file,
    # a name too long for what is written beside it), with export_map as the operation.
    from mapsmith.runner import _check_output_path

    export = SimpleNamespace(name="export_map", output_formats=EXPORT_SUFFIXES, output_kind="document:html")
    _check_output_path(export, resolved, {key: path for key, _, path in inputs}, overwrite, output_path)
    data = preview_map(app, [given for _, given, _ in inputs], max_features_per_layer, simplify_meters, background)
    html = panel_html(data)
    checks = _html_checks(html, data, len(inputs))
    failed = [c for c in checks if not c["passed"]]
    if failed:
        raise OutputError(
            f"export_map: critical check {failed[0]['name']} failed: {failed[0]['detail']}",
            code="MAP_EXPORT_CHECK_FAILED",
            evidence={"checks": failed},
            hint="re-fetch the map library (scripts/fetch_map_library.py --write) or report the bug",
        )
    body = html.encode("utf-8")
    record = base_record("export_map", started)
    record["parameters"] = {
        "max_features_per_layer": max_features_per_layer or None,
        "simplify_meters": simplify_meters,
        "background": background,
        "overwrite": overwrite,
    }
    record["inputs"] = [
        {"path": posix_label(given), "sha256": layer["provenance"]["sha256"], "crs": _crs_of(layer), "argument": key}
        for (key, given, _), layer in zip(inputs, data["layers"], strict=True)
    ]
    record["engine"] = {
        "name": "mapsmith.mapview",
        "version": __version__,
        "x-mapsmith:components": {"leaflet": library()["version"], **_engine_versions()},
    }
    record["output"] = {
        "path": posix_label(output_path),
        "sha256": hashlib.sha256(body).hexdigest(),
        "crs": None,
        "x-mapsmith:media_type": "text/html",
    }
    record["verification"] = checks
    record["notes"] = list(data["notes"])
    if background == "osm":
        record["notes"].append("the page asks tile.openstreetmap.org for background tiles when opened")
    record["x-mapsmith:map_layers"] = [
        {
            "path": posix_label(layer["path"]),
            "kind": layer["kind"],
            "state": layer["provenance"]["state"],
            "lossy": layer["lossy"],
        }
        for layer in data["layers"]
    ]
    record["finished_at"] = utc_now()
    problems = validate_manifest(record)
    if problems:
        raise OutputError(
            f"manifest would not conform: {problems[0]}",
            code="MANIFEST_INVALID",
            evidence={"problems": problems},
            hint="this is a bug in export_map; report it",
        )
    temp = resolved.with_name(f".{resolved.stem}.tmp-{uuid.uuid4().hex[:8]}{resolved.suffix}")
    # The same per-output lock as every operation's output: the manifest always describes the bytes beside it.
    with output_lock(resolved):
        try:
            temp.write_bytes(body)
            os.replace(temp, resolved)
        finally:
            temp.unlink(missing_ok=True)
        mpath = write_manifest(manifest_path(resolved), record)
    return {
        "operation": "export_map",
        "status": "ok",
        "output_path": app.workspace.relative_label(resolved),
        "manifest_path": app.workspace.relative_label(mpath),
        "bytes": len(body),
        "checks": checks,
        "layers": record["x-mapsmith:map_layers"],
        "states": data["states"],
        "notes": record["notes"],
    }


def _crs_of(layer: dict[str, Any]) -> str | None:
    if layer["kind"] == "raster":
        crs: str | None = layer["raster"]["source"]["crs"]
    else:
        crs = layer["vector"]["source_crs"]
    return crs


def _engine_versions() -> dict[str, str]:
    import geopandas
    import rasterio
    import shapely

    return {"geopandas": geopandas.__version__, "shapely": shapely.__version__, "gdal": rasterio.__gdal_version__}
