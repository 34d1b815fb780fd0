"""Hostile CRS definitions given as tool arguments are refused under a workspace; benign ones are not.

Each hostile definition would make PROJ (or GDAL, which hands definitions to PROJ) open a file or a
URL outside the workspace: grid lists, init files, tinshift/defmodel inputs, WKT PARAMETERFILE and
EXTENSION, PROJJSON parameter files, and definitions that are themselves a file name or a URL. A
loopback HTTP server counts requests: PROJ must send none, also for a grid name it would otherwise
fetch from its CDN endpoint.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError

OUT = "/etc/passwd"


def _wkt(proj: str, version: str = "WKT2_2019") -> str:
    from pyproj import CRS

    return CRS(proj).to_wkt(version)


def _projjson(proj: str) -> str:
    from pyproj import CRS

    return CRS(proj).to_json()


NAD27_OUT = f"+proj=longlat +datum=NAD27 +nadgrids={OUT} +type=crs"
GEOID_OUT = f"+proj=longlat +datum=WGS84 +geoidgrids={OUT} +type=crs"
PROJ_BASED = (
    'BOUNDCRS[SOURCECRS[GEOGCRS["a",DATUM["North American Datum 1927",ELLIPSOID["Clarke 1866",6378206.4,'
    '294.978698213898]],CS[ellipsoidal,2],AXIS["lon",east],AXIS["lat",north],ANGLEUNIT["degree",0.0174532925199433]]],'
    'TARGETCRS[GEOGCRS["WGS 84",DATUM["World Geodetic System 1984",ELLIPSOID["WGS 84",6378137,298.257223563]],'
    'CS[ellipsoidal,2],AXIS["lat",north],AXIS["lon",east],ANGLEUNIT["degree",0.0174532925199433]]],'
    'ABRIDGEDTRANSFORMATION["t",METHOD["PROJ-based operation method: +proj=hgridshift +grids=/etc/passwd"]]]'
)

# Built lazily (pyproj is imported inside the test process, not at collection): name -> factory.
# "{ws}" is replaced by the workspace root, "{port}" by the loopback server's port.
HOSTILE: dict[str, Any] = {
    "nadgrids-absolute": f"+proj=longlat +datum=NAD27 +nadgrids={OUT}",
    "nadgrids-optional-at": f"+proj=longlat +ellps=clrk66 +nadgrids=@{OUT}",
    "nadgrids-list-second": f"+proj=longlat +ellps=clrk66 +nadgrids=@null,{OUT}",
    "nadgrids-spaces-around": f"+proj=longlat +ellps=clrk66 +nadgrids = @null , @{OUT}",
    "nadgrids-quoted": f'+proj=longlat +ellps=clrk66 +nadgrids="{OUT}"',
    "nadgrids-uppercase-key": f"+proj=longlat +ellps=clrk66 +NADGRIDS={OUT}",
    "nadgrids-semicolon": f"+proj=longlat +ellps=clrk66;+nadgrids={OUT}",
    "nadgrids-tab-newline": f"+proj=longlat\t+ellps=clrk66\n+nadgrids={OUT}",
    "nadgrids-no-plus": f"proj=longlat ellps=clrk66 nadgrids={OUT}",
    "nadgrids-dotdot": "+proj=longlat +ellps=clrk66 +nadgrids=../../../../../../etc/passwd",
    "nadgrids-dot-slash": "+proj=longlat +ellps=clrk66 +nadgrids=./../../../../../../etc/passwd",
    "nadgrids-home": "+proj=longlat +ellps=clrk66 +nadgrids=~/grid.gsb",
    "nadgrids-http": "+proj=longlat +ellps=clrk66 +nadgrids=http://127.0.0.1:{port}/x.tif",
    "nadgrids-https-cdn": "+proj=longlat +ellps=clrk66 +nadgrids=https://cdn.proj.org/us_noaa_conus.tif",
    "nadgrids-file-url": f"+proj=longlat +ellps=clrk66 +nadgrids=file://{OUT}",
    "nadgrids-vsicurl": "+proj=longlat +ellps=clrk66 +nadgrids=/vsicurl/http://127.0.0.1:{port}/x.tif",
    "nadgrids-unc": "+proj=longlat +ellps=clrk66 +nadgrids=\\\\host\\share\\x.gsb",
    "nadgrids-drive-letter": "+proj=longlat +ellps=clrk66 +nadgrids=C:/grids/x.gsb",
    "nadgrids-workspace-then-dotdot": "+proj=longlat +ellps=clrk66 +nadgrids={ws}/../outside.gsb",
    "nadgrids-symlink-out": "+proj=longlat +ellps=clrk66 +nadgrids={ws}/link_out/passwd",
    "geoidgrids-absolute": f"+proj=longlat +datum=WGS84 +geoidgrids={OUT}",
    "geoidgrids-optional-dotdot": "+proj=utm +zone=10 +datum=WGS84 +geoidgrids=@../../../../x.gtx",
    "hgridshift": f"+proj=pipeline +step +proj=hgridshift +grids={OUT}",
    "vgridshift": f"+proj=pipeline +step +proj=vgridshift +grids={OUT} +multiplier=1",
    "deformation": "+proj=pipeline +step +proj=deformation +xy_grids=/etc/a.tif +z_grids=/etc/b.tif +t_epoch=2000",
    "xyzgridshift": f"+proj=pipeline +step +proj=xyzgridshift +grids={OUT}",
    "gridshift": f"+proj=pipeline +step +proj=gridshift +grids={OUT}",
    "tinshift": f"+proj=pipeline +step +proj=tinshift +file={OUT}",
    "defmodel": f"+proj=pipeline +step +proj=defmodel +model={OUT}",
    "init-absolute": f"+init={OUT}:root",
    "init-no-plus": f"init={OUT}:1",
    "init-dotdot": "+init=../../../../etc/passwd:1",
    "wkt2-boundcrs-parameterfile": lambda: _wkt(NAD27_OUT),
    "wkt2-geoid-parameterfile": lambda: _wkt(GEOID_OUT),
    "wkt2-parentheses-lowercase": lambda: _wkt(NAD27_OUT).replace("[", "(").replace("]", ")").lower(),
    "wkt2-curly-quotes": lambda: _wkt(NAD27_OUT).replace(f'"{OUT}"', f"\u201c{OUT}\u201d"),
    "wkt1-proj4-grids-extension": lambda: _wkt(NAD27_OUT, "WKT1_GDAL"),
    "wkt1-proj4-extension": (
        'GEOGCS["x",DATUM["D",SPHEROID["Clarke 1866",6378206.4,294.9786982]],PRIMEM["Greenwich",0],'
        f'UNIT["degree",0.0174532925199433],EXTENSION["PROJ4","+proj=longlat +ellps=clrk66 +nadgrids={OUT} +wktext"]]'
    ),
    "wkt2-proj-based-method": PROJ_BASED,
    "projjson-parameter-file": lambda: _projjson(NAD27_OUT),
    "projjson-geoid-parameter-file": lambda: _projjson(GEOID_OUT),
    "projjson-escaped-slashes": lambda: _projjson(NAD27_OUT).replace("/etc/passwd", "\\/etc\\/passwd"),
    "projjson-unicode-escaped": lambda: _projjson(NAD27_OUT).replace("/etc/passwd", "\\u002fetc\\u002fpasswd"),
    "projjson-list-value": lambda: _projjson(NAD27_OUT).replace('"/etc/passwd"', '"@null,/etc/passwd"'),
    "projjson-proj-based-method": lambda: json.dumps(
        {
            **json.loads(_projjson(NAD27_OUT)),
            "transformation": {
                "name": "t",
                "method": {"name": f"PROJ-based operation method: +proj=hgridshift +grids={OUT}"},
            },
        }
    ),
    "projjson-compound-with-bound": lambda: json.dumps(
        {
            "type": "CompoundCRS",
            "name": "c",
            "components": [json.loads(_projjson(NAD27_OUT)), json.loads(_projjson("EPSG:5703"))],
        }
    ),
    "definition-is-a-file": OUT,
    "definition-is-a-file-url": f"file://{OUT}",
    "definition-is-a-url": "http://127.0.0.1:{port}/crs.wkt",
    "definition-is-home": "~/crs.prj",
    "definition-is-relative-up": "../../../../../../etc/passwd",
}

BENIGN: dict[str, Any] = {
    "epsg-utm": "EPSG:32610",
    "epsg-wgs84": "EPSG:4326",
    "epsg-lowercase": "epsg:3857",
    "ogc-urn": "urn:ogc:def:crs:EPSG::32610",
    "ogc-url": "http://www.opengis.net/def/crs/EPSG/0/4326",
    "proj-utm": "+proj=utm +zone=10 +datum=WGS84 +units=m +no_defs",
    "proj-web-mercator-null-grid": "+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0 +x_0=0 +y_0=0 +k=1 "
    "+units=m +nadgrids=@null +wktext +no_defs",
    "proj-installed-grid-name": "+proj=longlat +datum=NAD27 +nadgrids=@us_noaa_conus.tif +type=crs",
    "proj-towgs84": "+proj=utm +zone=33 +ellps=GRS80 +towgs84=0,0,0,0,0,0,0 +units=m +no_defs +type=crs",
    "proj-laea": "+proj=laea +lat_0=52 +lon_0=10 +x_0=4321000 +y_0=3210000 +ellps=GRS80 +units=m +type=crs",
    "proj-grid-inside-workspace": "+proj=longlat +datum=NAD27 +nadgrids={ws}/grids/local.gsb +type=crs",
    "wkt2-utm": lambda: _wkt("EPSG:32610"),
    "wkt2-bound-installed-grid": lambda: _wkt("+proj=longlat +datum=NAD27 +nadgrids=us_noaa_conus.tif +type=crs"),
    "wkt1-web-mercator": lambda: _wkt("EPSG:3857", "WKT1_GDAL"),
    "wkt1-esri-utm": lambda: _wkt("EPSG:32610", "WKT1_ESRI"),
    "projjson-utm": lambda: _projjson("EPSG:32610"),
    "projjson-null-grid": lambda: _projjson("+proj=longlat +datum=NAD27 +nadgrids=@null +type=crs"),
    "name-with-slash": "NAD27 / UTM zone 10N",
}


def _value(table: dict[str, Any], name: str, workspace: Path, port: int = 9) -> str:
    raw = table[name]
    text = raw() if callable(raw) else raw
    return text.replace("{ws}", str(workspace)).replace("{port}", str(port))


@pytest.fixture
def layer(workspace: Path) -> str:
    from shapely.geometry import Point

    from layers import write_layer

    write_layer(workspace / "pts.gpkg", [Point(-122.4, 37.8), Point(-122.3, 37.7)], "EPSG:4326", v=[1, 2])
    # A symlink out of the workspace, made at run time, for "nadgrids-symlink-out".
    (workspace / "link_out").symlink_to("/etc")
    return "pts.gpkg"


def test_corpus_sizes() -> None:
    assert len(HOSTILE) >= 40
    assert len(BENIGN) >= 15


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_target_crs_is_refused(app: Any, workspace: Path, layer: str, name: str) -> None:
    before = sorted(p.name for p in workspace.iterdir())
    with pytest.raises(MapSmithError) as info:
        app.run(
            "reproject_layer",
            {"input_path": layer, "target_crs": _value(HOSTILE, name, workspace), "output_path": "out.gpkg"},
        )
    error = info.value
    assert error.code == "CRS_REFERENCES_FILE", error.to_dict()
    assert error.evidence["argument"] == "target_crs"
    assert error.evidence["reference"]
    assert sorted(p.name for p in workspace.iterdir()) == before  # no output, no failure record


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_description_for_resolve_crs_is_refused(app: Any, workspace: Path, layer: str, name: str) -> None:
    with pytest.raises(MapSmithError) as info:
        app.run("resolve_crs", {"description": _value(HOSTILE, name, workspace)})
    assert info.value.code == "CRS_REFERENCES_FILE"
    assert info.value.evidence["argument"] == "description"


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_benign_definitions_pass_the_guard(app: Any, workspace: Path, name: str) -> None:
    from mapsmith.crsguard import check_crs_definition

    value = _value(BENIGN, name, workspace)
    check_crs_definition(value, argument="target_crs", workspace_root=workspace)  # no exception
    # resolve_crs takes every one of them through the runner's own check: an answer, not a refusal.
    answer = app.run("resolve_crs", {"description": value}).answer
    assert answer["status"] in ("resolved", "needs_clarification", "not_found")


@pytest.mark.parametrize("name", ["epsg-utm", "proj-utm", "wkt2-utm", "projjson-utm", "proj-web-mercator-null-grid"])
def test_benign_target_crs_reprojects(app: Any, workspace: Path, layer: str, name: str) -> None:
    result = app.run(
        "reproject_layer", {"input_path": layer, "target_crs": _value(BENIGN, name, workspace), "output_path": "o.gpkg"}
    )
    assert result.output_path == "o.gpkg"
    assert (workspace / "o.gpkg").exists()


def test_hostile_definitions_pass_when_unconfined(tmp_path: Path) -> None:
    # Without a workspace the operator chose no confinement: the guard says nothing.
    from mapsmith.crsguard import check_crs_definition

    for name in HOSTILE:
        check_crs_definition(_value(HOSTILE, name, tmp_path), argument="target_crs", workspace_root=None)


def test_evidence_names_key_and_path(workspace: Path) -> None:
    from mapsmith.crsguard import check_crs_definition

    with pytest.raises(MapSmithError) as info:
        check_crs_definition(
            "+proj=longlat +ellps=clrk66 +geoidgrids=@null,@/etc/hosts", argument="target_crs", workspace_root=workspace
        )
    assert info.value.evidence == {
        "argument": "target_crs",
        "key": "+geoidgrids",
        "reference": "/etc/hosts",
        "reason": "PATH_OUTSIDE_WORKSPACE",
        "resolved_path": "/etc/hosts",
    }
    assert "PROJ's data directory" in (info.value.hint or "")


# -- PROJ's network stays off --------------------------------------------------------------------


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[str]]]:
    import pyproj.network

    hits: list[str] = []
    handler = type("Handler", (_Counter,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # PROJ's CDN endpoint points here, and the network is on as an operator's proj.ini could set it.
    monkeypatch.setenv("PROJ_NETWORK_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("PROJ_NETWORK", "ON")
    was_enabled = pyproj.network.is_network_enabled()
    pyproj.network.set_network_enabled(True)
    try:
        yield server.server_port, hits
    finally:
        pyproj.network.set_network_enabled(was_enabled)
        server.shutdown()
        server.server_close()


def test_grid_url_in_target_crs_is_refused_without_a_request(
    app: Any, workspace: Path, layer: str, loopback: tuple[int, list[str]]
) -> None:
    port, hits = loopback
    with pytest.raises(MapSmithError) as info:
        app.run(
            "reproject_layer",
            {
                "input_path": layer,
                "target_crs": f"+proj=longlat +datum=WGS84 +nadgrids=http://127.0.0.1:{port}/x.tif +type=crs",
                "output_path": "out.gpkg",
            },
        )
    assert info.value.code == "CRS_REFERENCES_FILE"
    assert info.value.evidence["reason"] == "url"
    assert hits == []


def test_app_start_turns_proj_network_off(
    make_app: Any, workspace: Path, loopback: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grid name PROJ would fetch from its CDN endpoint: allowed by the guard (a bare name), and
    never fetched, because the service turned PROJ's network off when it started."""
    import os

    import pyproj.network
    from shapely.geometry import Point

    from layers import write_layer

    port, hits = loopback
    absent = "+proj=longlat +datum=NAD27 +nadgrids=@mapsmith_absent_grid.tif +type=crs"
    outcome: dict[str, Any] = {}

    def scenario() -> None:
        # PROJ reads PROJ_NETWORK_ENDPOINT once per context, and pyproj keeps one context per thread:
        # a fresh thread is the only way to be sure this test talks to the loopback endpoint.
        from pyproj import CRS, Transformer

        # The control: with the network on, PROJ does ask the endpoint for the grid.
        Transformer.from_crs(CRS(absent), "EPSG:4326", always_xy=True).transform(-100.0, 40.0)
        outcome["control_hits"] = list(hits)
        hits.clear()
        monkeypatch.delenv("PROJ_NETWORK")  # restored by monkeypatch after the app sets it
        app = make_app()
        outcome["enabled_after_start"] = pyproj.network.is_network_enabled()
        outcome["env_after_start"] = os.environ.get("PROJ_NETWORK")
        # Reading the input's header computes its WGS 84 bounds through the grid: no request either.
        write_layer(workspace / "nad27.gpkg", [Point(-100.0, 40.0)], absent, v=[1])
        app.run("describe_dataset", {"input_path": "nad27.gpkg"})
        app.run("reproject_layer", {"input_path": "nad27.gpkg", "target_crs": "EPSG:4326", "output_path": "out.gpkg"})

    def guarded() -> None:
        try:
            scenario()
        except BaseException as exc:  # re-raised in the test's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=guarded)
    thread.start()
    thread.join(timeout=120)
    if "error" in outcome:
        raise outcome["error"]
    assert outcome["control_hits"], "PROJ did not use the loopback endpoint; the test would prove nothing"
    assert outcome["enabled_after_start"] is False
    assert outcome["env_after_start"] == "OFF"
    assert hits == []
