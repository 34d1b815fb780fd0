"""The sandbox alone holds: a file inside the workspace that makes GDAL read outside, or connect, gets nothing.

Each case runs through a real MCP client over stdio twice: with ``MAPSMITH_SANDBOX=off`` (the contrast:
in-process, the same file leaks, which proves the file is a real attack) and with ``MAPSMITH_SANDBOX=on``
(nothing outside reaches any reply or output). The parser walls are switched off in both runs
(``MAPSMITH_PARSER_WALLS=off``), so what holds is the sandbox. The clean twin: an ordinary buffer through
the sandbox writes the same bytes as in-process.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from shapely.geometry import Point

from layers import write_layer
from mcp_client import Reply, call, mcp_session
from security.sandbox_helpers import CountingServer, env, require_sandbox, vrt_in_csv

pytestmark = pytest.mark.mcp


def _calls(workspace: Path, sandbox: str, calls: list[tuple[str, dict[str, Any]]], **extra: str) -> list[Reply]:
    async def conversation() -> list[Reply]:
        async with mcp_session(workspace, **env(sandbox, **extra)) as (session, _):
            return [await call(session, tool, arguments) for tool, arguments in calls]

    return anyio.run(conversation)


def _everything_written(workspace: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(workspace.rglob("*")) if p.is_file())


def test_a_vrt_hidden_in_a_csv_reads_outside_in_process_and_nothing_in_the_sandbox(
    workspace: Path, tmp_path: Path
) -> None:
    require_sandbox(workspace)
    marker = uuid.uuid4().hex
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.csv"
    secret.write_text(f"FIELD_{marker},wkt\nROW_{marker},POINT (1 2)\n", "utf-8")
    vrt_in_csv(workspace / "table.csv", str(secret))
    vrt_in_csv(workspace / "layer.csv", str(secret), wkt_field="wkt")
    calls = [
        ("describe_dataset", {"input_path": "table.csv"}),
        ("convert_format", {"input_path": "layer.csv", "output_path": "copied.gpkg"}),
        ("server_info", {}),
    ]

    described, converted, info = _calls(workspace, "off", calls)
    # The contrast: in-process, GDAL follows the VRT out of the workspace and the outside file's
    # header comes back as a field name, its row is written into the workspace.
    assert not described.is_error and f"FIELD_{marker}" in described.data["answer"]["described"][0]["fields"]
    assert not converted.is_error and f"ROW_{marker}".encode() in (workspace / "copied.gpkg").read_bytes()
    assert info.data["sandbox"]["enabled"] is False

    for p in workspace.glob("copied.gpkg*"):
        p.unlink()
    described, converted, info = _calls(workspace, "on", calls)
    assert info.data["sandbox"]["enabled"] is True
    for reply in (described, converted):
        # Inside, the outside folder does not exist: GDAL cannot open the VRT's source at all.
        assert reply.is_error and reply.data["code"] == "INPUT_UNREADABLE", reply.data
        assert marker not in json.dumps(reply.data)
    assert marker.encode() not in _everything_written(workspace)
    assert not (workspace / "copied.gpkg").exists()


def test_proc_self_environ_through_a_vrt_shows_only_the_worker_environment(workspace: Path) -> None:
    require_sandbox(workspace)
    token = "tok" + uuid.uuid4().hex + uuid.uuid4().hex
    vrt_in_csv(workspace / "env.csv", "CSV:/proc/self/environ", layer="environ")
    calls = [("describe_dataset", {"input_path": "env.csv"})]

    # GDAL's CSV reader stops at the first NUL: the header is the process's first environment variable.
    (leaked,) = _calls(workspace, "off", calls, MAPSMITH_HTTP_TOKEN=token)
    # The contrast: in-process, that is one of the variables the MCP client gave the server (its host values).
    inherited = {
        f"{k}={os.environ[k]}" for k in ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER") if k in os.environ
    }
    assert leaked.data["answer"]["described"][0]["fields"][0] in inherited

    (contained,) = _calls(workspace, "on", calls, MAPSMITH_HTTP_TOKEN=token)
    assert not contained.is_error, contained.data
    # Inside, the environment is the one the policy builds, sorted by name: GDAL_HTTP_TIMEOUT comes first.
    assert contained.data["answer"]["described"][0]["fields"] == ["GDAL_HTTP_TIMEOUT=1"]
    assert token not in json.dumps(contained.data)


def test_a_vrt_naming_a_vsicurl_url_makes_no_request_from_the_sandbox(workspace: Path) -> None:
    require_sandbox(workspace)
    server = CountingServer()
    try:
        vrt_in_csv(
            workspace / "net.csv", f"/vsicurl/http://127.0.0.1:{server.port}/x.csv", wkt_field="wkt", src_layer="x"
        )
        calls = [("describe_dataset", {"input_path": "net.csv"})]

        (fetched,) = _calls(workspace, "off", calls)
        assert server.requests, "in-process, GDAL fetched the URL the VRT names (the contrast)"
        # The network CSV's header became the layer's fields (a VRT with no <Field> passes every source field on).
        assert fetched.data["answer"]["described"][0]["fields"] == ["name", "wkt"]
        before = len(server.requests)

        (contained,) = _calls(workspace, "on", calls)
        assert len(server.requests) == before  # not one request reached the host's loopback
        # GDAL got no connection (HTTP code 0): the layer it describes has no fields from anywhere.
        assert contained.data["answer"]["described"][0]["fields"] == [], contained.data
    finally:
        server.close()


def test_clean_twin_a_buffer_through_the_sandbox_writes_the_same_bytes_as_in_process(workspace: Path) -> None:
    require_sandbox(workspace)
    # Two points 100 m apart in UTM 33N; a 10 m buffer makes two discs of area about pi * 10^2 each.
    write_layer(workspace / "pts.gpkg", [Point(500000, 4000000), Point(500100, 4000000)], "EPSG:32633", name=["a", "b"])
    digests = {}
    out = "buffered.fgb"  # the same name both times: FlatGeobuf stores the layer name (the file's stem)
    for mode in ("off", "on"):
        reply, info = _calls(
            workspace,
            mode,
            [
                ("buffer_layer", {"input_path": "pts.gpkg", "distance_meters": 10.0, "output_path": out}),
                ("server_info", {}),
            ],
        )
        assert not reply.is_error, reply.data
        assert info.data["sandbox"]["enabled"] is (mode == "on")
        assert reply.data["output_path"] == out
        digests[mode] = hashlib.sha256((workspace / out).read_bytes()).hexdigest()
        manifest_file = workspace / f"{out}.provenance.json"
        assert json.loads(manifest_file.read_text("utf-8"))["output"]["sha256"] == digests[mode]
        (workspace / out).unlink()
        manifest_file.unlink()
    assert digests["on"] == digests["off"]
