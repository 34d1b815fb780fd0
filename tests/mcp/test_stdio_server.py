"""The MCP server as a client meets it: ``python -m mapsmith`` driven over stdio by the SDK's client.

Nothing here calls the service in process except to read the contracts the tool schemas must
equal. One server session answers a scripted conversation (catalog, server_info, refusals,
progress) that the tests below read; the worked example runs in its own session and is checked
against numbers computed here from the example's GeoJSON with pyproj and shapely alone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import box

from conftest import published_schema_errors
from layers import write_layer
from mcp_client import Reply, call, mcp_session, server_env

pytestmark = pytest.mark.mcp

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DATA = REPO / "core" / "mapsmith" / "examples" / "data"
SERVICE_TOOLS = {
    "server_info",
    "list_operations",
    "run_operation",
    "get_provenance",
    "validate_plan",
    "explain_plan",
    "execute_plan",
    "get_lineage",
    "replay",
    "preview_map",
    "export_map",
    "propose_operation",
}
DEDICATED_TOOLS = {
    "run_sql",
    "describe_dataset",
    "reproject_layer",
    "buffer_layer",
    "clip_layer",
    "measure_area",
    "convert_format",
    "extract_layer",
    "overlay_layers",
    "dissolve_layer",
    "spatial_join",
    "nearest_join",
    "merge_layers",
    "simplify_layer",
    "centroid_layer",
    "select_features",
}
OTHER_STACKS = {"sedona", "qgis", "esri"}
# What each other stack needs on this machine, checked independently of the plugin's own detection:
# the sedona stack its Python package, qgis the qgis_process binary (CI installs QGIS), esri ArcGIS Pro.
EXPECTED_AVAILABLE = {
    "sedona": importlib.util.find_spec("sedonadb") is not None,
    "qgis": bool(shutil.which("qgis_process.bin", path="/usr/bin:/bin") or shutil.which("qgis_process")),
    "esri": False,
}


@dataclass
class Transcript:
    workspace: Path
    init: Any = None
    tools: dict[str, Any] = field(default_factory=dict)
    replies: dict[str, Reply] = field(default_factory=dict)
    progress: list[tuple[float, float | None, str | None]] = field(default_factory=list)


# The conversation: every call one server session answers, keyed by what each call is for.
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "server_info": ("server_info", {}),
    "catalog": ("list_operations", {}),
    "raster_to_raster": ("list_operations", {"input_kind": "raster", "produces": "dataset:raster"}),
    "buffer_query": (
        "list_operations",
        {"query": "a zone 1.5 km wide around the river", "input_kind": "vector", "produces": "dataset:vector"},
    ),
    "describes": ("list_operations", {"produces": "description"}),
    "vector_to_description": ("list_operations", {"input_kind": "vector", "output_kind": "description"}),
    "nothing_left": ("list_operations", {"input_kind": "raster", "produces": "description", "dataset_count": 3}),
    "misspelt_kind": ("list_operations", {"input_kind": "vectr"}),
    "crs_required": (
        "buffer_layer",
        {"input_path": "no_crs.gpkg", "distance_meters": 100, "output_path": "no_crs_buffer.gpkg"},
    ),
    "unknown_argument": (
        "buffer_layer",
        {"input_path": "river.geojson", "distance_m": 1500, "output_path": "river_buffer.gpkg"},
    ),
    "zero_distance": (
        "buffer_layer",
        {"input_path": "river.geojson", "distance_meters": 0, "output_path": "river_buffer.gpkg"},
    ),
    "unknown_operation": (
        "run_operation",
        {"operation": "bufer_layer", "arguments": {"input_path": "river.geojson", "distance_meters": 10}},
    ),
    "input_outside": (
        "buffer_layer",
        {"input_path": "../outside.geojson", "distance_meters": 10, "output_path": "b.gpkg"},
    ),
    "output_outside": (
        "run_operation",
        {
            "operation": "buffer_layer",
            "arguments": {"input_path": "river.geojson", "distance_meters": 10, "output_path": "../escaped.gpkg"},
        },
    ),
    "provenance_outside": ("get_provenance", {"path": "/etc/hostname"}),
    "unknown_tool": ("buffer", {"input_path": "river.geojson"}),
}


async def converse(workspace: Path) -> Transcript:
    t = Transcript(workspace)
    async with mcp_session(workspace) as (session, init):
        t.init = init
        t.tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        for key, (tool, arguments) in CALLS.items():
            t.replies[key] = await call(session, tool, arguments)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            t.progress.append((progress, total, message))

        t.replies["with_progress"] = await call(
            session,
            "buffer_layer",
            {"input_path": "river.geojson", "distance_meters": 100, "output_path": "river_100m.gpkg"},
            progress_callback=on_progress,
        )
    return t


@pytest.fixture(scope="module")
def transcript(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Transcript]:
    ws = tmp_path_factory.mktemp("stdio") / "ws"
    ws.mkdir()
    shutil.copyfile(EXAMPLE_DATA / "river.geojson", ws / "river.geojson")
    (ws.parent / "outside.geojson").write_bytes((ws / "river.geojson").read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pyogrio warns that no CRS is written: that is the point
        write_layer(ws / "no_crs.gpkg", [box(0, 0, 10, 10)], None, id=[1])
    yield anyio.run(converse, ws)
    # The module-scoped workspace gets the same check as the per-test `workspace` fixture.
    for manifest in ws.rglob("*.provenance.json"):
        errors = published_schema_errors(json.loads(manifest.read_text("utf-8")))
        assert not errors, f"{manifest.name} does not conform: {errors}"


# -- the catalog the client sees ------------------------------------------------------------------


def test_tools_list_has_the_service_tools_and_one_tool_per_dedicated_operation(transcript: Transcript) -> None:
    assert set(transcript.tools) == SERVICE_TOOLS | DEDICATED_TOOLS
    assert transcript.init.server_info.name == "mapsmith"
    assert "describe_dataset" in (transcript.init.instructions or "")


def test_dedicated_tool_schemas_are_the_contracts_own(transcript: Transcript) -> None:
    from mapsmith.app import MapSmith
    from mapsmith.server.tools import ABRIDGED_NOTE_CHARS

    # The contracts are the single source: what tools/list publishes is what input_schema() builds.
    app = MapSmith({"MAPSMITH_WORKSPACE": str(transcript.workspace)})
    for name in DEDICATED_TOOLS:
        contract = app.host.contracts[name]
        tool = transcript.tools[name]
        assert tool.input_schema == contract.input_schema(note_chars=ABRIDGED_NOTE_CHARS), name
        assert tool.description.startswith(contract.summary)
        assert tool.annotations.read_only_hint is (not contract.writes_dataset)
        # One operation reply schema, published once on run_operation (server/tools.py says why)
        assert tool.output_schema is None, name
    reply_schema = transcript.tools["run_operation"].output_schema
    assert set(reply_schema["required"]) >= {"operation", "status", "checks", "warnings", "engine"}
    buffer = transcript.tools["buffer_layer"].input_schema
    assert buffer["required"] == ["input_path", "distance_meters", "output_path"]
    assert buffer["properties"]["distance_meters"]["type"] == "number"
    assert buffer["properties"]["distance_meters"]["exclusiveMinimum"] == 0
    assert buffer["additionalProperties"] is False
    # ... and the server enforces the bound it publishes
    zero = transcript.replies["zero_distance"]
    assert zero.is_error and zero.data["code"] == "ARGUMENT_OUT_OF_RANGE"
    assert not (transcript.workspace / "river_buffer.gpkg").exists()


def test_server_info_reports_version_licence_stacks_and_engines(transcript: Transcript) -> None:
    import mapsmith

    info = transcript.replies["server_info"]
    assert not info.is_error
    data = info.data
    assert data["version"] == mapsmith.__version__ == transcript.init.server_info.version
    assert data["licence"] == "MIT"
    assert data["stack"] == "opensource"
    assert data["workspace"] == str(transcript.workspace)
    stacks = {s["name"]: s for s in data["stacks"]}
    assert set(stacks) == {"opensource"} | OTHER_STACKS
    assert stacks["opensource"]["available"] is True and stacks["opensource"]["selected"] is True
    fixes = {"sedona": "[sedona]", "qgis": "qgis", "esri": "ArcGIS Pro"}
    for name in OTHER_STACKS:
        assert stacks[name]["available"] is EXPECTED_AVAILABLE[name], name
        if not EXPECTED_AVAILABLE[name]:
            assert stacks[name]["reason"] and fixes[name] in stacks[name]["fix"], name
    engines = data["engines"]
    # versions are asked only of stacks that can run
    assert set(engines) <= {"opensource"} | {n for n in OTHER_STACKS if EXPECTED_AVAILABLE[n]}
    assert "opensource" in engines
    for engine in ("GDAL", "PROJ", "GEOS", "geopandas", "shapely", "pyproj", "pyogrio", "duckdb"):
        assert engines["opensource"][engine][:1].isdigit(), (engine, engines["opensource"].get(engine))
    assert data["operations"] == len(list((REPO / "contracts" / "operations").glob("*.toml")))
    assert {p["plugin"] for p in data["plugins"]} >= {"opensource"} | OTHER_STACKS
    assert info.text == data


# -- refusals: isError with a stable code, a message and a hint -----------------------------------


def _refusal(transcript: Transcript, key: str, code: str) -> dict[str, Any]:
    reply = transcript.replies[key]
    assert reply.is_error, key
    assert reply.data["code"] == code, reply.data
    assert reply.data["message"] and reply.data["hint"], reply.data
    assert reply.text == reply.data
    return reply.data


def test_input_without_crs_is_refused_with_crs_required(transcript: Transcript) -> None:
    data = _refusal(transcript, "crs_required", "CRS_REQUIRED")
    assert data["evidence"]["argument"] == "input_path"
    # the path as the caller gave it, never the host's absolute path
    assert data["evidence"]["path"] == "no_crs.gpkg"
    assert str(transcript.workspace) not in data["message"]
    assert not list(transcript.workspace.glob("no_crs_buffer*"))  # refused before anything was written


def test_misspelt_argument_names_the_right_one_and_every_accepted_one(transcript: Transcript) -> None:
    data = _refusal(transcript, "unknown_argument", "UNKNOWN_ARGUMENT")
    assert "did you mean 'distance_meters'" in data["message"]
    assert data["evidence"]["argument"] == "distance_m"
    assert data["evidence"]["accepted"] == [
        "input_path",
        "distance_meters",
        "segments_per_quarter_circle",
        "layer",
        "output_path",
        "overwrite",
        "output_layer",
        "geojson_keep_crs",
        "feature_collection_members",
    ]
    assert "distance_meters" in data["hint"]


def test_misspelt_operation_is_answered_with_the_closest_names(transcript: Transcript) -> None:
    data = _refusal(transcript, "unknown_operation", "UNKNOWN_OPERATION")
    assert data["evidence"]["suggestions"][0] == "buffer_layer"
    assert "buffer_layer" in data["hint"]


def test_paths_leaving_the_workspace_are_refused_for_inputs_outputs_and_provenance(transcript: Transcript) -> None:
    for key, argument in (
        ("input_outside", "input_path"),
        ("output_outside", "output_path"),
        ("provenance_outside", "path"),
    ):
        data = _refusal(transcript, key, "PATH_OUTSIDE_WORKSPACE")
        assert data["evidence"]["argument"] == argument
        # Under a workspace no host path leaves the server: the root itself is said as "."
        assert data["evidence"]["workspace_root"] == "."
    assert not (transcript.workspace.parent / "escaped.gpkg").exists()


def test_unknown_tool_suggests_the_close_one(transcript: Transcript) -> None:
    data = _refusal(transcript, "unknown_tool", "UNKNOWN_TOOL")
    assert "buffer_layer" in data["hint"]


# -- list_operations filters ----------------------------------------------------------------------


def _names(reply: Reply) -> list[str]:
    assert not reply.is_error, reply.data
    assert reply.data["count"] == len(reply.data["candidates"])
    return [op["operation"] for op in reply.data["candidates"]]


def test_list_operations_narrows_by_declared_facets_and_delivers_small_sets_whole(transcript: Transcript) -> None:
    # The expected sets are read from the contract files themselves (tomllib, not MapSmith).
    import tomllib

    contracts = [tomllib.loads(p.read_text("utf-8")) for p in (REPO / "contracts" / "operations").glob("*.toml")]
    assert {c["name"] for c in contracts} >= DEDICATED_TOOLS
    everything = transcript.replies["catalog"].data
    # nothing declared: the whole catalog remains, ranked, and the reply says how many more there are
    assert everything["status"] == "ranked" and everything["remaining"] == len(contracts)
    assert everything["more"] == len(contracts) - len(everything["candidates"])
    raster_to_raster = sorted(
        c["name"]
        for c in contracts
        if c["output"]["kind"] == "dataset:raster"
        and any(d["kind"] in ("raster", "any") for d in c.get("datasets", []))
    )
    reply = transcript.replies["raster_to_raster"]
    assert reply.data["status"] == "choose"  # at most 30 remain: every one delivered
    assert sorted(_names(reply)) == raster_to_raster
    assert all(c["distinguishes"] for c in reply.data["candidates"])
    assert _names(transcript.replies["describes"]) == ["describe_dataset"]
    assert _names(transcript.replies["vector_to_description"]) == ["describe_dataset"]
    assert "buffer_layer" in _names(transcript.replies["buffer_query"])[:3]
    assert transcript.replies["buffer_query"].data["engine"] in ("lexical", "vector", "fusion")
    empty = transcript.replies["nothing_left"].data
    assert empty["status"] == "empty" and empty["candidates"] == []
    assert set(empty["removed_by"]) == {"input_kind", "produces", "dataset_count"}


def test_list_operations_refuses_a_kind_outside_its_enum(transcript: Transcript) -> None:
    reply = transcript.replies["misspelt_kind"]
    assert reply.is_error and "vector" in reply.data["hint"]
    assert reply.data["code"] == "INVALID_FILTER"


# -- progress -------------------------------------------------------------------------------------


def test_a_run_reports_progress_when_the_client_asks(transcript: Transcript) -> None:
    reply = transcript.replies["with_progress"]
    assert not reply.is_error, reply.data
    assert reply.data["output_path"] == "river_100m.gpkg"
    assert [(p, total) for p, total, _ in transcript.progress] == [(0.0, 1.0), (1.0, 1.0)]
    assert transcript.progress[-1][2] == "buffer_layer: ok"


# -- configuration errors end the process at start ------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "code"),
    [("MAPSMITH_STACK", "nosuch", "UNKNOWN_STACK"), ("MAPSMITH_FALLBACK_STACK", "nosuch", "UNKNOWN_STACK")],
)
def test_unknown_stack_ends_the_server_at_start_naming_the_known_stacks(
    workspace: Path, variable: str, value: str, code: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env.update(server_env(workspace, **{variable: value}))
    done = subprocess.run(
        [sys.executable, "-m", "mapsmith"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""  # nothing reaches the MCP channel
    assert done.stderr.startswith("mapsmith: cannot start:")
    assert code in done.stderr and f"{variable}={value!r}" in done.stderr
    assert "known stacks: esri, opensource, qgis, sedona" in done.stderr


def test_missing_workspace_ends_the_server_at_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env.update(server_env(tmp_path / "not-there"))
    done = subprocess.run(
        [sys.executable, "-m", "mapsmith"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert "WORKSPACE_INVALID" in done.stderr and "not-there" in done.stderr


# -- the worked example, checked against an independent computation -------------------------------

RIVER_BUFFER_M = 1500
QUAD_SEGS = 16
WGS84_A = 6378137.0
WGS84_F = 1 / 298.257223563


def _quadrangle_area_m2(lat0: float, lat1: float, dlon_degrees: float) -> float:
    """Closed form for the area between two parallels and two meridians on the WGS 84 ellipsoid:
    A = b^2 * dlon / 2 * [q(lat1) - q(lat0)], q(phi) = sin phi / (1 - e^2 sin^2 phi)
    + ln((1 + e sin phi) / (1 - e sin phi)) / (2e). (The geodesic edges of a 0.003 degree parcel bow
    from the parallels by about a millimetre; north and south edges nearly cancel, far below 1 m2.)"""
    e = math.sqrt(WGS84_F * (2 - WGS84_F))
    b = WGS84_A * (1 - WGS84_F)

    def q(lat: float) -> float:
        s = math.sin(math.radians(lat))
        return s / (1 - e * e * s * s) + math.log((1 + e * s) / (1 - e * s)) / (2 * e)

    return b * b * math.radians(dlon_degrees) / 2 * (q(lat1) - q(lat0))


def _expected_clipped_areas() -> dict[str, float]:
    """The example, redone without MapSmith: read the GeoJSON as JSON, buffer the river by 1,500 m
    in UTM 10N (the zone of -122.2) with 16 segments per quarter circle, bring the corridor back to
    lon/lat (MapSmith clips in the parcels' CRS, EPSG:4326), intersect each parcel with it and take
    the geodesic area on WGS 84 of what has area."""
    import numpy as np
    import shapely
    from pyproj import Geod, Transformer
    from shapely.geometry import shape

    def features(name: str) -> list[dict[str, Any]]:
        return json.loads((EXAMPLE_DATA / name).read_text("utf-8"))["features"]

    def transform(geom: Any, transformer: Any) -> Any:
        return shapely.transform(geom, lambda xy: np.column_stack(transformer.transform(xy[:, 0], xy[:, 1])))

    (river,) = [shape(f["geometry"]) for f in features("river.geojson")]
    to_utm = Transformer.from_crs("EPSG:4326", "EPSG:32610", always_xy=True)
    to_lonlat = Transformer.from_crs("EPSG:32610", "EPSG:4326", always_xy=True)
    corridor = transform(transform(river, to_utm).buffer(RIVER_BUFFER_M, quad_segs=QUAD_SEGS), to_lonlat)
    geod = Geod(ellps="WGS84")
    areas = {}
    for f in features("parcels.geojson"):
        part = shape(f["geometry"]).intersection(corridor)
        polygons = [p for p in shapely.get_parts(part) if p.geom_type == "Polygon" and p.area > 0]
        if not polygons:
            continue
        area = 0.0
        for p in polygons:
            area += abs(geod.polygon_area_perimeter(*p.exterior.xy)[0])
            area -= sum(abs(geod.polygon_area_perimeter(*ring.xy)[0]) for ring in p.interiors)
        areas[f["properties"]["parcel_id"]] = area
    return areas


def test_worked_example_over_stdio_matches_an_independent_computation(workspace: Path) -> None:
    from mapsmith.examples.river_parcels import RIVER_BUFFER_METERS, run_example

    assert RIVER_BUFFER_METERS == RIVER_BUFFER_M
    result = anyio.run(run_example, workspace)
    expected = _expected_clipped_areas()

    assert SERVICE_TOOLS | DEDICATED_TOOLS <= set(result["tools"])
    assert result["buffer"]["crs_decisions"]["analysis_crs"] == "EPSG:32610"
    # The parcels are a 5 x 6 grid of 0.003 degree squares, 46.176..46.194 N; the river runs at
    # 46.200 N west of -122.212 and bends north east of it, so the 1.5 km (0.0135 degree) corridor
    # reaches down to about 46.1865 N only in the west: the top two rows (10 parcels) are all in it,
    # whole or cut, and 4 of the row 46.185..46.188 are cut (P-20, furthest east, misses): 14.
    answer = result["area"]["answer"]
    assert answer["method"] == "geodesic"
    assert answer["feature_count"] == len(expected) == 14
    measured = {row["parcel_id"]: row["area_m2"] for row in answer["rows"]}
    assert set(measured) == set(expected)
    for pid, area in expected.items():
        assert measured[pid] == pytest.approx(area, abs=0.1), pid
    assert answer["total_area_m2"] == pytest.approx(sum(expected.values()), abs=0.1)
    # P-21 (-122.214..-122.211, 46.188..46.191) lies wholly inside the corridor: its area is the
    # closed-form quadrangle, 77,228.9 m2.
    assert measured["P-21"] == pytest.approx(_quadrangle_area_m2(46.188, 46.191, 0.003), abs=1.0)
    assert measured["P-21"] == pytest.approx(77_228.9, abs=0.1)

    provenance = result["provenance"]
    assert provenance["output_matches"] is True
    assert provenance["conforms"] is True and provenance["problems"] == []
    assert provenance["manifest"]["operation"] == "measure_area"

    def sha256(name: str) -> str:
        return hashlib.sha256((workspace / name).read_bytes()).hexdigest()

    def only_producer(node: dict[str, Any], operation: str) -> dict[str, Any]:
        assert [hop["operation"] for hop in node["producers"]] == [operation]
        hop = node["producers"][0]
        assert hop["sound"] is True and hop["failed_checks"] == []
        return hop

    root = provenance["lineage"]
    assert root["digest"] == sha256("parcels_area.gpkg")
    assert root["history_sound"] is True
    (clipped,) = only_producer(root, "measure_area")["inputs"]
    assert clipped["digest"] == sha256("parcels_near_river.gpkg")
    parcels, corridor = only_producer(clipped, "clip_layer")["inputs"]
    assert parcels["origin"] is True and parcels["digest"] == sha256("parcels.geojson")
    assert parcels["digest"] == hashlib.sha256((EXAMPLE_DATA / "parcels.geojson").read_bytes()).hexdigest()
    assert corridor["digest"] == sha256("river_buffer.gpkg")
    (river,) = only_producer(corridor, "buffer_layer")["inputs"]
    assert river["origin"] is True
    assert river["digest"] == hashlib.sha256((EXAMPLE_DATA / "river.geojson").read_bytes()).hexdigest()


def test_the_readme_lists_exactly_the_tools_the_server_offers(transcript: Transcript) -> None:
    import re

    readme = (REPO / "README.md").read_text("utf-8")
    table = {m.group(1) for m in re.finditer(r"^\| `([a-z_]+)` \|", readme, flags=re.M)}
    assert table == set(transcript.tools)
    # and every other catalog operation is named in the paragraph after the table
    import tomllib

    names = {tomllib.loads(p.read_text("utf-8"))["name"] for p in (REPO / "contracts" / "operations").glob("*.toml")}
    for name in names - table:
        assert f"`{name}`" in readme, name


# -- rasters over MCP ------------------------------------------------------------------------------


def test_a_raster_operation_runs_and_refuses_over_stdio(workspace: Path) -> None:
    """slope on a plane DEM through run_operation: the value is atan(0.5) everywhere inside the edge
    rings; the same DEM with a disagreeing .aux.xml sidecar is refused with GEOREF_CONFLICT."""
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    rows, cols = np.mgrid[0:12, 0:10]
    z = (0.3 * (cols * 10.0) + 0.4 * ((11 - rows) * 10.0)).astype("float32")  # gradient 0.5 up to the north-east
    profile = dict(driver="GTiff", width=10, height=12, count=1, dtype="float32", crs="EPSG:32610", nodata=-9999)
    for name in ("plane.tif", "lying.tif"):
        with rasterio.open(workspace / name, "w", transform=from_origin(600_000, 5_100_000, 10, 10), **profile) as d:
            d.write(z, 1)
    (workspace / "lying.tif.aux.xml").write_text(
        "<PAMDataset><GeoTransform>700000, 20, 0, 5200000, 0, -20</GeoTransform></PAMDataset>"
    )

    async def talk() -> dict[str, Reply]:
        replies = {}
        async with mcp_session(workspace) as (session, _):
            replies["describe"] = await call(session, "describe_dataset", {"input_path": "lying.tif"})
            replies["slope"] = await call(
                session,
                "run_operation",
                {
                    "operation": "slope",
                    "arguments": {"input_path": "plane.tif", "units": "degrees", "output_path": "slope.tif"},
                },
            )
            replies["refused"] = await call(
                session,
                "run_operation",
                {
                    "operation": "slope",
                    "arguments": {"input_path": "lying.tif", "units": "degrees", "output_path": "lying_slope.tif"},
                },
            )
            replies["provenance"] = await call(session, "get_provenance", {"path": "slope.tif"})
        return replies

    replies = anyio.run(talk)
    described = replies["describe"]
    assert not described.is_error
    assert described.data["answer"]["georeferencing"]["conflict"] is True
    slope = replies["slope"]
    assert not slope.is_error, slope.data
    assert slope.data["engine"]["name"] == "whitebox_workflows"
    with rasterio.open(workspace / "slope.tif") as out:
        values = out.read(1, masked=True)
    inner = values[2:-2, 2:-2]
    assert values.count() == inner.size == 6 * 8  # the two edge rings are nodata
    np.testing.assert_allclose(inner.filled(np.nan), math.degrees(math.atan(0.5)), atol=1e-4)
    refused = replies["refused"]
    assert refused.is_error and refused.data["code"] == "GEOREF_CONFLICT"
    assert not list(workspace.glob("lying_slope*"))
    provenance = replies["provenance"].data
    assert provenance["conforms"] and provenance["output_matches"]
    checks = {c["name"]: c["passed"] for c in provenance["manifest"]["verification"]}
    assert checks["x-mapsmith:grid_matches"] and checks["values_in_expected_range"] and checks["shape_preserved"]
