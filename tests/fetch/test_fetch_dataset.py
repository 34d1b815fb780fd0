"""fetch_dataset: a dataset brought in from a URL served by a real local HTTP server, recorded as an
original, refused when the bytes or the host are wrong, and usable as a plan's first step; through the
Python API and through a real MCP client whose engines run in the bubblewrap sandbox (the fetch in the
one worker that shares the network, every other step in workers that have none)."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import Point

from layers import read, write_layer
from mapsmith.errors import MapSmithError
from mapsmith.provenance.validator import validate_manifest
from mcp_client import call, mcp_session


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A folder served over HTTP on loopback: two wells in British National Grid, a CSV, an HTML page."""
    folder = tmp_path_factory.mktemp("served")
    write_layer(folder / "wells.gpkg", [Point(500, 500), Point(530, 540)], "EPSG:27700", well=[7, 8])
    (folder / "levels.csv").write_text("well,level_m\n7,12.5\n8,30.0\n", "utf-8")
    (folder / "page.gpkg").write_text("<!DOCTYPE html><html><body>Sign in</body></html>", "utf-8")
    import zipfile

    with zipfile.ZipFile(folder / "climb.zip", "w") as archive:  # a member that climbs out of the archive
        archive.writestr("../evil.shp", b"\x00\x00\x27\x0a" + bytes(96))
    with zipfile.ZipFile(folder / "one.zip", "w") as archive:  # one dataset and a readme: unpacked
        archive.write(folder / "wells.gpkg", "data/wells.gpkg")
        archive.writestr("README.txt", "wells of the survey")
    with zipfile.ZipFile(folder / "two.zip", "w") as archive:  # two datasets: which one is never guessed
        archive.write(folder / "wells.gpkg", "a.gpkg")
        archive.write(folder / "levels.csv", "b.csv")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(folder)))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", folder
    finally:
        httpd.shutdown()


def test_a_layer_is_fetched_byte_for_byte_with_its_record(
    make_app: Any, workspace: Path, served: tuple[str, Path]
) -> None:
    base, folder = served
    app = make_app(MAPSMITH_FETCH_ALLOW="127.0.0.1")
    result = app.run("fetch_dataset", {"url": f"{base}/wells.gpkg", "output_path": "wells.gpkg"})
    served_bytes = (folder / "wells.gpkg").read_bytes()
    digest = hashlib.sha256(served_bytes).hexdigest()
    assert (workspace / "wells.gpkg").read_bytes() == served_bytes
    assert result.answer["sha256"] == digest and result.answer["bytes"] == len(served_bytes)
    assert result.answer["last_modified"]  # http.server sends the file's mtime
    record = json.loads((workspace / "wells.gpkg.provenance.json").read_text("utf-8"))
    assert validate_manifest(record) == []
    assert record["inputs"] == [
        {"path": f"{base}/wells.gpkg", "sha256": digest, "crs": None, "argument": "url", "x-mapsmith:fetched": True}
    ]
    assert record["output"]["sha256"] == digest and record["output"]["crs"] == "EPSG:27700"
    fetch = record["parameters"]["x-mapsmith:fetch"]
    assert fetch["final_url"] == f"{base}/wells.gpkg" and fetch["status"] == 200 and fetch["address"] == "127.0.0.1"
    # the table twin: a CSV is a table output with its own checks
    app.run("fetch_dataset", {"url": f"{base}/levels.csv", "output_path": "levels.csv"})
    assert (workspace / "levels.csv").read_bytes() == (folder / "levels.csv").read_bytes()


def test_an_archive_holding_one_dataset_is_unpacked(make_app: Any, workspace: Path, served: tuple[str, Path]) -> None:
    base, folder = served
    app = make_app(MAPSMITH_FETCH_ALLOW="127.0.0.1")
    result = app.run("fetch_dataset", {"url": f"{base}/one.zip", "output_path": "wells.gpkg"})
    assert (workspace / "wells.gpkg").read_bytes() == (folder / "wells.gpkg").read_bytes()
    assert result.answer["sha256"] == hashlib.sha256((folder / "one.zip").read_bytes()).hexdigest()  # the archive's
    record = json.loads((workspace / "wells.gpkg.provenance.json").read_text("utf-8"))
    assert record["parameters"]["x-mapsmith:unpacked_member"] == "data/wells.gpkg"
    assert record["inputs"][0]["sha256"] == result.answer["sha256"]


def test_a_failure_after_the_rename_leaves_a_failure_record_of_the_fetched_bytes(
    make_app: Any, workspace: Path, served: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mapsmith import runner
    from mapsmith.provenance.digests import dataset_digest

    real_replace = runner._replace

    def replace_then_fail(source: Path, target: Path) -> None:
        real_replace(source, target)
        raise OSError("sabotage: crashed after the rename")

    monkeypatch.setattr(runner, "_replace", replace_then_fail)
    base, folder = served
    with pytest.raises(MapSmithError) as failed:
        make_app(MAPSMITH_FETCH_ALLOW="127.0.0.1").run(
            "fetch_dataset", {"url": f"{base}/wells.gpkg", "output_path": "wells.gpkg"}
        )
    assert failed.value.code == "OUTPUT_WRITE_FAILED"
    assert not (workspace / "wells.gpkg.provenance.json").exists()
    record = json.loads((workspace / "wells.gpkg.failed.provenance.json").read_text("utf-8"))
    assert record["output"]["sha256"] == dataset_digest(workspace / "wells.gpkg")
    assert record["inputs"][0]["path"] == f"{base}/wells.gpkg"
    assert record["verification"][-1]["name"] == "x-mapsmith:run_completed"


def test_lineage_ends_at_the_url_and_replay_never_fetches(
    make_app: Any, workspace: Path, served: tuple[str, Path]
) -> None:
    base, _ = served
    app = make_app(MAPSMITH_FETCH_ALLOW="127.0.0.1")
    app.run("fetch_dataset", {"url": f"{base}/wells.gpkg", "output_path": "wells.gpkg"})
    app.run("buffer_layer", {"input_path": "wells.gpkg", "distance_meters": 10, "output_path": "buffers.gpkg"})
    lineage = app.get_lineage("buffers.gpkg")
    assert [hop["operation"] for hop in lineage["hops"]] == ["buffer_layer"]
    (stop,) = lineage["stops"]
    assert (stop["path"], stop["kind"], stop["fetched_from"]) == ("wells.gpkg", "original", f"{base}/wells.gpkg")
    assert lineage["complete"] is True
    # replay re-runs the buffer on the fetched bytes; with the server gone it would still work
    assert app.replay("buffers.gpkg")["verdict"] == "identical"
    aside = workspace.parent / "aside.gpkg"
    (workspace / "wells.gpkg").rename(aside)
    with pytest.raises(MapSmithError) as gone:
        app.replay("buffers.gpkg")
    aside.rename(workspace / "wells.gpkg")
    assert gone.value.code == "REPLAY_ORIGINAL_MISSING"
    (original,) = gone.value.evidence["originals"]
    assert original["fetched_from"] == f"{base}/wells.gpkg" and len(original["sha256"]) == 64


@pytest.mark.parametrize(
    ("allow", "url", "output", "code"),
    [
        (None, "{base}/wells.gpkg", "a.gpkg", "FETCH_DISABLED"),
        ("data.example.org", "{base}/wells.gpkg", "a.gpkg", "FETCH_HOST_NOT_ALLOWED"),
        ("localhost", "{local}/wells.gpkg", "a.gpkg", "FETCH_ADDRESS_NOT_ALLOWED"),
        ("127.0.0.1", "{base}/page.gpkg", "a.gpkg", "FETCH_FORMAT_MISMATCH"),
        ("127.0.0.1", "{base}/nothing.gpkg", "a.gpkg", "FETCH_HTTP_STATUS"),
        ("127.0.0.1", "{base}/climb.zip", "a.zip", "ARCHIVE_MEMBER_UNSAFE"),
        ("127.0.0.1", "{base}/two.zip", "a.gpkg", "ARCHIVE_AMBIGUOUS"),
        ("127.0.0.1", "file:///etc/passwd", "a.gpkg", "FETCH_SCHEME_UNSUPPORTED"),
    ],
)
def test_refusals_leave_nothing_in_the_workspace(
    make_app: Any, workspace: Path, served: tuple[str, Path], allow: str | None, url: str, output: str, code: str
) -> None:
    base, _ = served
    env = {} if allow is None else {"MAPSMITH_FETCH_ALLOW": allow}
    with pytest.raises(MapSmithError) as refused:
        make_app(**env).run(
            "fetch_dataset",
            {"url": url.format(base=base, local=base.replace("127.0.0.1", "localhost")), "output_path": output},
        )
    assert refused.value.code == code and refused.value.hint
    assert not (workspace / output).exists()
    assert not [p for p in workspace.iterdir() if ".tmp-" in p.name]


def test_every_fetching_operation_runs_over_mcp_in_the_sandbox(
    workspace: Path, served: tuple[str, Path], tmp_path: Path
) -> None:
    """A plan that starts with a fetch; OpenStreetMap through Overpass; a STAC search and an asset's window:
    each through a real MCP client, the engines in the bubblewrap sandbox (the fetches in its one networked
    worker), each output with a manifest that validates."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: the sandboxed path cannot run here")
    pytest.importorskip("pystac_client")
    from fetch_servers import Overpass, Stac, serve, write_cog

    base, _ = served
    overpass, overpass_server = serve(Overpass)
    Stac.cog = write_cog(tmp_path / "cog.tif")
    Stac.base, stac_server = serve(Stac)
    plan = {
        "goal": "10 m around each well fetched from the data server",
        "steps": [
            {
                "id": "get",
                "operation": "fetch_dataset",
                "arguments": {"url": f"{base}/wells.gpkg", "output_path": "wells.gpkg"},
            },
            {
                "id": "ring",
                "operation": "buffer_layer",
                "arguments": {"input_path": "$get", "distance_meters": 10, "output_path": "rings.gpkg"},
            },
        ],
    }
    env = {
        "MAPSMITH_SANDBOX": "on",
        "MAPSMITH_FETCH_ALLOW": "127.0.0.1",
        "MAPSMITH_OVERPASS_URL": f"{overpass}/api/interpreter",
    }

    async def talk() -> dict[str, Any]:
        replies: dict[str, Any] = {}
        async with mcp_session(workspace, **env) as (session, _):
            replies["info"] = await call(session, "server_info", {})
            replies["plan"] = await call(session, "execute_plan", {"plan": plan})
            replies["refused"] = await call(
                session,
                "run_operation",
                {
                    "operation": "fetch_dataset",
                    "arguments": {"url": "http://169.254.169.254/latest/", "output_path": "m.gpkg"},
                },
            )
            replies["lineage"] = await call(session, "get_lineage", {"path": "rings.gpkg"})
            replies["osm"] = await call(
                session,
                "run_operation",
                {
                    "operation": "query_overpass",
                    "arguments": {
                        "tags": "highway=cycleway",
                        "geometry": "lines",
                        "bbox": "-0.11,51.49,-0.08,51.51",
                        "output_path": "cycleways.gpkg",
                    },
                },
            )
            replies["search"] = await call(
                session, "run_operation", {"operation": "stac_search", "arguments": {"catalogue_url": f"{Stac.base}/"}}
            )
            item = replies["search"].data["answer"]["items"][0]["self_href"]
            replies["asset"] = await call(
                session,
                "run_operation",
                {
                    "operation": "fetch_stac_asset",
                    "arguments": {"item": item, "asset": "red", "output_path": "red.tif"},
                },
            )
        return replies

    try:
        replies = anyio.run(talk)
    finally:
        overpass_server.shutdown()
        stac_server.shutdown()
    assert replies["info"].data["sandbox"]["enabled"] is True
    assert not replies["plan"].is_error, replies["plan"].data
    rings = read(workspace / "rings.gpkg")
    assert list(rings["well"]) == [7, 8]
    # A 64-gon inscribed in a 10 m circle on the ground, 32 r^2 sin(2 pi / 64), drawn in British National Grid
    # where (500, 500) lies 400 km west of the central meridian: its area in grid units is the ground area
    # times the grid's areal scale there (h * k from PROJ's own factors), about 1.0031.
    from pyproj import Proj, Transformer

    to_lonlat = Transformer.from_crs("EPSG:27700", "EPSG:4326", always_xy=True)
    expected = []
    for x, y in ((500, 500), (530, 540)):
        factors = Proj("EPSG:27700").get_factors(*to_lonlat.transform(x, y))
        expected.append(32 * 100 * 0.0980171403295606 * factors.meridional_scale * factors.parallel_scale)
    assert list(rings.geometry.area) == pytest.approx(expected, rel=1e-5)
    refused = replies["refused"]
    assert refused.is_error and refused.data["code"] == "FETCH_HOST_NOT_ALLOWED"
    (stop,) = replies["lineage"].data["stops"]
    assert stop["fetched_from"] == f"{base}/wells.gpkg"
    assert not replies["osm"].is_error, replies["osm"].data
    assert sorted(read(workspace / "cycleways.gpkg")["osm_id"]) == ["10", "12"]
    assert [i["id"] for i in replies["search"].data["answer"]["items"]] == ["a", "b"]
    assert not replies["asset"].is_error, replies["asset"].data
    assert replies["asset"].data["answer"]["window"] == {"col_off": 0, "row_off": 0, "width": 512, "height": 512}
    for name in ("wells.gpkg", "rings.gpkg", "cycleways.gpkg", "red.tif"):
        record = json.loads((workspace / f"{name}.provenance.json").read_text("utf-8"))
        assert validate_manifest(record) == [], name


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3-compatible server (moto[server]) on loopback, with one public object put by boto3."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    client.create_bucket(Bucket="open-data")
    folder = tmp_path_factory.mktemp("s3")
    write_layer(folder / "sites.gpkg", [Point(1, 2)], "EPSG:4326", site=["a"])
    client.put_object(
        Bucket="open-data", Key="uk/sites.gpkg", Body=(folder / "sites.gpkg").read_bytes(), ACL="public-read"
    )
    try:
        yield endpoint
    finally:
        server.stop()


def test_an_s3_object_is_read_anonymously_from_an_s3_compatible_server(
    make_app: Any, workspace: Path, s3: str, tmp_path: Path
) -> None:
    app = make_app(MAPSMITH_FETCH_ALLOW="127.0.0.1", MAPSMITH_S3_ENDPOINT=s3)
    result = app.run("fetch_dataset", {"url": "s3://open-data/uk/sites.gpkg", "output_path": "sites.gpkg"})
    sites = read(workspace / "sites.gpkg")
    assert list(sites["site"]) == ["a"] and sites.crs.to_epsg() == 4326
    record = json.loads((workspace / "sites.gpkg.provenance.json").read_text("utf-8"))
    assert record["inputs"][0]["path"] == "s3://open-data/uk/sites.gpkg"
    fetch = record["parameters"]["x-mapsmith:fetch"]
    assert fetch["fetched_url"] == f"{s3}/open-data/uk/sites.gpkg" and fetch["etag"]  # S3 always sends an ETag
    assert result.answer["sha256"] == hashlib.sha256((workspace / "sites.gpkg").read_bytes()).hexdigest()
    with pytest.raises(MapSmithError) as absent:
        app.run("fetch_dataset", {"url": "s3://open-data/uk/none.gpkg", "output_path": "none.gpkg"})
    assert absent.value.code == "FETCH_HTTP_STATUS" and absent.value.evidence["status"] == 404
