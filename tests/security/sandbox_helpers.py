"""Shared pieces of the sandbox tests: the server environments, hostile files, a counting HTTP server,
and finding the worker process of one test's server (by its working directory, the test's workspace)."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mapsmith.sandbox.policy import decide

# The parser walls another change adds also stop these files; switched off so the sandbox alone is tested.
WALLS_OFF = {"MAPSMITH_PARSER_WALLS": "off"}


def env(sandbox: str, **extra: str) -> dict[str, str]:
    out = {"MAPSMITH_SANDBOX": sandbox, **WALLS_OFF, **extra}
    if "PYTHONPATH" in os.environ:  # a test run against another checkout reaches the server the same way
        out["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return out


def require_sandbox(workspace: Path) -> None:
    decision = decide({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_SANDBOX": "auto"})
    if not decision.enabled:
        pytest.skip(f"no sandbox on this machine: {decision.reason}")


def vrt_in_csv(
    path: Path, source: str, layer: str = "secret", wkt_field: str | None = None, src_layer: str | None = None
) -> Path:
    """A ``.csv`` whose second line is an OGR VRT: GDAL identifies the VRT by content, not extension."""
    geometry = (
        f'<GeometryType>wkbPoint</GeometryType><LayerSRS>EPSG:4326</LayerSRS><GeometryField encoding="WKT" '
        f'field="{wkt_field}"/>'
        if wkt_field
        else ""
    )
    path.write_text(
        "id,wkt\n"
        f'<OGRVRTDataSource><OGRVRTLayer name="{layer}"><SrcDataSource>{source}</SrcDataSource>'
        + (f"<SrcLayer>{src_layer}</SrcLayer>" if src_layer else "")
        + f"{geometry}</OGRVRTLayer></OGRVRTDataSource>\n",
        "utf-8",
    )
    return path


class CountingServer:
    """A loopback HTTP server that counts every request (and answers a tiny CSV)."""

    def __init__(self) -> None:
        requests: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                requests.append(f"GET {self.path}")
                body = b"name,wkt\nfrom_the_network,POINT (1 2)\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self) -> None:  # noqa: N802
                requests.append(f"HEAD {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "38")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.requests = requests
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def worker_pids(workspace: Path) -> list[int]:
    """The sandboxed workers of the server serving ``workspace``: python processes running
    ``mapsmith.sandbox.worker`` whose working directory is that workspace."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if b"mapsmith.sandbox.worker" in cmdline and b"bwrap" not in cmdline[0] and cwd == str(workspace.resolve()):
            found.append(int(entry.name))
    return found
