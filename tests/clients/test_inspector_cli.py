"""The official MCP Inspector CLI (TypeScript SDK, from npm, pinned in tests/clients/node) drives ``mapsmith``
as a user's client would, over stdio and over Streamable HTTP with a bearer token.

Three Inspector releases, each on the Node it supports: 0.15.0, the last one that runs on Node 20 (the OS's
Node), 0.22.0, the newest 0.x (Node 22 from the npm ``node`` package), and 2.12.0 (Node >= 22.19, the same
Node 22). 0.15.0's CLI cannot send an HTTP header (its transport takes no request options), so over HTTP
it meets a loopback server without a token, which MapSmith allows with a warning; the other two send the
bearer token. For every client and transport: tools/list, a successful call, a refused call whose code,
hint and evidence are read from the client's own output, and a plan (run, and one rejected before it runs).

Expected numbers are worked out by hand: a 100 m x 100 m square in EPSG:32610 on the zone's central
meridian (easting 500 000) has a ground (geodesic) area of 10 000 / 0.9996**2 = 10008.0048 m2, since UTM's
scale factor there is 0.9996; reprojected to EPSG:4326 it has the same four corners, so the same area.

The ``clients`` nox session installs the clients (``npm ci``) and sets MAPSMITH_CLIENTS_REQUIRED=1, so
nothing here skips there; elsewhere a missing Node or npm install skips with the command that fixes it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcp_client import stop_server

pytestmark = pytest.mark.mcp

GEODESIC_AREA_M2 = 10000 / 0.9996**2  # 10008.00480256...
HERE = Path(__file__).resolve().parent
REQUIRED = os.environ.get("MAPSMITH_CLIENTS_REQUIRED") == "1"
INSTALL_FIX = "run `nox -s clients`, or install the pinned clients with `npm ci --prefix tests/clients/node`"
# The tools every MapSmith build has; the full list is other tests' business.
CORE_TOOLS = {"server_info", "list_operations", "run_operation", "validate_plan", "execute_plan", "measure_area"}


def unavailable(reason: str) -> None:
    """Skip with the reason, or fail with it where the clients are required (the ``clients`` session)."""
    if REQUIRED:
        pytest.fail(f"{reason}; {INSTALL_FIX}", pytrace=False)
    pytest.skip(f"{reason}; {INSTALL_FIX}")


@dataclass(frozen=True)
class Inspector:
    version: str
    package_dir: str  # the npm alias under node_modules (tests/clients/node/package.json)
    launcher: str  # the package's `mcp-inspector` bin, relative to package_dir
    node: str  # "os": the Node on PATH; "npm": node_modules/.bin/node (the pinned `node` package)
    sends_headers: bool
    error_exit: int  # the exit code when the tool answered isError (0.x prints it and exits 0)

    @property
    def id(self) -> str:
        return f"inspector-{self.version}"


INSPECTORS = [
    Inspector("0.15.0", "inspector-0.15", "cli/build/cli.js", node="os", sends_headers=False, error_exit=0),
    Inspector("0.22.0", "inspector-0.22", "cli/build/cli.js", node="npm", sends_headers=True, error_exit=0),
    Inspector("2.12.0", "inspector-2", "clients/launcher/build/index.js", node="npm", sends_headers=True, error_exit=5),
]


@dataclass(frozen=True)
class Installed:
    modules: Path
    os_path: str  # PATH without node_modules/.bin: the OS's Node
    npm_path: str  # PATH with node_modules/.bin first: the 0.x launchers spawn `node` from PATH


@pytest.fixture(scope="module")
def installed() -> Installed:
    modules = Path(os.environ.get("MAPSMITH_NODE_CLIENTS", HERE / "node")) / "node_modules"
    if not (modules / ".bin" / "node").exists():
        unavailable(f"the pinned MCP clients are not installed in {modules}")
    bin_dir = str(modules / ".bin")
    os_path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    return Installed(modules=modules, os_path=os_path, npm_path=os.pathsep.join([bin_dir, os_path]))


def mapsmith_command() -> str:
    # The console script of the environment running the tests: the install under test.
    script = Path(sys.executable).with_name("mapsmith")
    if script.exists():
        return str(script)
    found = shutil.which("mapsmith")
    if found is None:
        pytest.fail("the `mapsmith` console script is not installed next to this Python or on PATH")
    return found


def client_env(path: str) -> dict[str, str]:
    """The test's environment for the client, without MAPSMITH_* settings of the shell running pytest:
    each endpoint passes the workspace itself, as a user's client configuration does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env["PATH"] = path
    return env


@dataclass(frozen=True)
class Endpoint:
    transport: str  # "stdio" or "http"
    workspace: Path
    url: str = ""
    token: str | None = None


@dataclass
class Reply:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        assert self.stdout.strip(), f"no output (exit {self.returncode}): {self.stderr[-2000:]}"
        return json.loads(self.stdout)  # type: ignore[no-any-return]


def run_client(installed: Installed, client: Inspector, endpoint: Endpoint, *method: str, header: bool = True) -> Reply:
    path = installed.npm_path if client.node == "npm" else installed.os_path
    node = str(installed.modules / ".bin" / "node") if client.node == "npm" else shutil.which("node", path=path)
    if node is None:
        unavailable("Node.js is not on PATH (apt-get install -y nodejs npm)")
    launcher = installed.modules / client.package_dir / client.launcher
    command = [str(node), str(launcher), "--cli"]
    if endpoint.transport == "stdio":
        # The 2.x CLI hands a stdio server only a minimal environment: the workspace must be passed with -e.
        command += ["-e", f"MAPSMITH_WORKSPACE={endpoint.workspace}", mapsmith_command()]
    else:
        command += [endpoint.url, "--transport", "http"]
        if header and endpoint.token is not None:
            command += ["--header", f"Authorization: Bearer {endpoint.token}"]
    done = subprocess.run(
        [*command, *method],
        env=client_env(path),
        cwd=endpoint.workspace,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return Reply(done.returncode, done.stdout, done.stderr)


def write_square(folder: Path) -> None:
    from shapely.geometry import box

    from layers import write_layer

    if not (folder / "square.gpkg").exists():
        write_layer(folder / "square.gpkg", [box(500000, 4000000, 500100, 4000100)], "EPSG:32610", name=["a"])


# --- servers ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    endpoint: Endpoint
    process: subprocess.Popen[bytes]
    log: Path


def start_server(root: Path, token: str | None) -> Server:
    workspace = root / "ws"
    workspace.mkdir()
    write_square(workspace)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env["MAPSMITH_WORKSPACE"] = str(workspace)
    if token is not None:
        env["MAPSMITH_HTTP_TOKEN"] = token
    log = root / "server.stderr"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [mapsmith_command(), "serve", "--http", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=workspace,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return Server(Endpoint("http", workspace, f"http://127.0.0.1:{port}/mcp", token), process, log)
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the server did not listen within 30 s: {log.read_text()}")


@pytest.fixture(scope="module")
def http_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, Server]]:
    """Two servers: with a token (for clients that send headers) and, on loopback, without one."""
    servers: dict[bool, Server] = {}
    try:
        servers[True] = start_server(tmp_path_factory.mktemp("http-token"), secrets.token_urlsafe(32))
        servers[False] = start_server(tmp_path_factory.mktemp("http-open"), None)
        yield servers
    finally:
        for server in servers.values():
            stop_server(server.process)


@pytest.fixture(params=["stdio", "http"])
def endpoint(request: pytest.FixtureRequest, tmp_path: Path) -> Endpoint:
    client: Inspector = request.getfixturevalue("client")
    if request.param == "stdio":
        write_square(tmp_path)
        return Endpoint("stdio", tmp_path)
    servers: dict[bool, Server] = request.getfixturevalue("http_servers")
    return servers[client.sends_headers].endpoint


@pytest.fixture(params=INSPECTORS, ids=[c.id for c in INSPECTORS])
def client(request: pytest.FixtureRequest, installed: Installed) -> Inspector:
    inspector: Inspector = request.param
    package = json.loads((installed.modules / inspector.package_dir / "package.json").read_text("utf-8"))
    assert package["version"] == inspector.version, "node_modules does not hold the pinned release: run npm ci"
    return inspector


def out_name(client: Inspector, endpoint: Endpoint, stem: str) -> str:
    # The HTTP servers' workspaces are shared by the module's tests: one output name per client and test.
    return f"{stem}_{client.version.replace('.', '_')}_{endpoint.transport}.gpkg"


def tool_text(result: dict[str, Any]) -> dict[str, Any]:
    texts = [block["text"] for block in result["content"] if block.get("type") == "text"]
    assert len(texts) == 1, result
    return json.loads(texts[0])  # type: ignore[no-any-return]


# --- the tests -------------------------------------------------------------------------------------------


def test_the_pinned_node_runs_the_2x_line(installed: Installed) -> None:
    done = subprocess.run(
        [str(installed.modules / ".bin" / "node"), "--version"], capture_output=True, text=True, check=True
    )
    # tests/clients/node/package.json pins node 22.23.3; Inspector 2.x needs >= 22.19.
    assert done.stdout.strip() == "v22.23.3"


def test_tools_list(installed: Installed, client: Inspector, endpoint: Endpoint) -> None:
    strict = ["--strict"] if client.version.startswith("2.") else []  # 2.x: exit 6 on unportable tool schemas
    reply = run_client(installed, client, endpoint, *strict, "--method", "tools/list")
    assert reply.returncode == 0, reply.stderr[-2000:]
    tools = reply.json()["tools"]
    names = [tool["name"] for tool in tools]
    assert CORE_TOOLS <= set(names), sorted(CORE_TOOLS - set(names))
    assert len(names) == len(set(names))
    assert all(tool["inputSchema"]["type"] == "object" for tool in tools)


def test_a_successful_call_reaches_the_client_with_its_structured_result(
    installed: Installed, client: Inspector, endpoint: Endpoint
) -> None:
    output = out_name(client, endpoint, "area")
    reply = run_client(
        installed,
        client,
        endpoint,
        *("--method", "tools/call", "--tool-name", "measure_area"),
        *("--tool-arg", "input_path=square.gpkg", f"output_path={output}"),
    )
    assert reply.returncode == 0, reply.stderr[-2000:]
    result = reply.json()
    assert result.get("isError") is not True, result
    answer = result["structuredContent"]["answer"]
    assert answer["feature_count"] == 1
    assert answer["total_area_m2"] == pytest.approx(GEODESIC_AREA_M2, abs=1e-3)
    assert answer["rows"] == [{"name": "a", "area_m2": pytest.approx(GEODESIC_AREA_M2, abs=1e-3)}]
    assert (endpoint.workspace / output).is_file()


def test_a_layer_of_a_container_is_written_and_its_provenance_read_by_name(
    installed: Installed, client: Inspector, endpoint: Endpoint
) -> None:
    container = out_name(client, endpoint, "layers")
    layer = "area"
    written = run_client(
        installed,
        client,
        endpoint,
        *("--method", "tools/call", "--tool-name", "measure_area"),
        *("--tool-arg", "input_path=square.gpkg", f"output_path={container}", f"output_layer={layer}"),
    )
    assert written.returncode == 0, written.stderr[-2000:]
    assert written.json().get("isError") is not True, written.json()
    asked = run_client(
        installed,
        client,
        endpoint,
        *("--method", "tools/call", "--tool-name", "get_provenance"),
        *("--tool-arg", f"path={container}", f"layer={layer}"),
    )
    assert asked.returncode == 0, asked.stderr[-2000:]
    provenance = asked.json()["structuredContent"]
    assert provenance["manifest_path"] == f"{container}.{layer}.provenance.json"
    assert provenance["manifest"]["output"]["layer"] == layer and provenance["output_matches"] is True
    # without the layer the client is told which layers have records
    unnamed = run_client(
        installed,
        client,
        endpoint,
        *("--method", "tools/call", "--tool-name", "get_provenance", "--tool-arg", f"path={container}"),
    )
    assert unnamed.returncode == client.error_exit, unnamed.stderr[-2000:]
    refusal = unnamed.json()
    assert refusal.get("isError") is True, refusal
    error = tool_text(refusal)
    assert error["code"] == "LAYER_REQUIRED" and error["evidence"]["layers_with_manifests"] == [layer]


def test_a_refusal_reaches_the_client_with_code_hint_and_evidence(
    installed: Installed, client: Inspector, endpoint: Endpoint
) -> None:
    # The same call as the successful one, reading from outside the workspace.
    output = out_name(client, endpoint, "refused")
    reply = run_client(
        installed,
        client,
        endpoint,
        *("--method", "tools/call", "--tool-name", "measure_area"),
        *("--tool-arg", "input_path=../square.gpkg", f"output_path={output}"),
    )
    # Before the fix the TypeScript SDK threw "MCP error -32602: Structured content does not match the
    # tool's output schema" here and the client printed only that.
    assert "-32602" not in reply.stderr
    assert reply.returncode == client.error_exit, reply.stderr[-2000:]
    result = reply.json()
    assert result["isError"] is True
    assert "structuredContent" not in result
    error = tool_text(result)
    assert error["code"] == "PATH_OUTSIDE_WORKSPACE"
    assert error["hint"].startswith("Use a path inside the workspace"), error["hint"]
    assert (error["evidence"]["argument"], error["evidence"]["path"]) == ("input_path", "../square.gpkg")
    assert not (endpoint.workspace / output).exists()


def plan(first_output: str, final_output: str, *, reversed_steps: bool = False) -> str:
    steps = [
        {
            "id": "wgs",
            "operation": "reproject_layer",
            "arguments": {"input_path": "square.gpkg", "target_crs": "EPSG:4326", "output_path": first_output},
        },
        {"id": "area", "operation": "measure_area", "arguments": {"input_path": "$wgs", "output_path": final_output}},
    ]
    if reversed_steps:
        steps.reverse()
    return json.dumps({"goal": "the square's ground area after reprojection to WGS 84", "steps": steps})


def test_a_plan_runs_through_the_client(installed: Installed, client: Inspector, endpoint: Endpoint) -> None:
    from layers import read

    first, final = out_name(client, endpoint, "wgs"), out_name(client, endpoint, "wgs_area")
    reply = run_client(
        installed,
        client,
        endpoint,
        *("--method", "tools/call", "--tool-name", "execute_plan", "--tool-arg", f"plan={plan(first, final)}"),
    )
    assert reply.returncode == 0, reply.stderr[-2000:]
    result = reply.json()
    assert result.get("isError") is not True, result
    run = result["structuredContent"]
    assert run["status"] == "ok"
    assert [(step["id"], step["status"]) for step in run["steps"]] == [("wgs", "ok"), ("area", "ok")]
    assert run["final_output"]["path"] == final
    areas = read(endpoint.workspace / final)
    assert areas.crs.to_epsg() == 4326
    assert list(areas["area_m2"]) == [pytest.approx(GEODESIC_AREA_M2, abs=1e-3)]


def test_a_plan_with_its_steps_in_the_wrong_order_is_rejected_through_the_client(
    installed: Installed, client: Inspector, endpoint: Endpoint
) -> None:
    first, final = out_name(client, endpoint, "never"), out_name(client, endpoint, "never_area")
    reply = run_client(
        installed,
        client,
        endpoint,
        *("--method", "tools/call", "--tool-name", "validate_plan"),
        *("--tool-arg", f"plan={plan(first, final, reversed_steps=True)}"),
    )
    assert reply.returncode == 0, reply.stderr[-2000:]
    report = reply.json()["structuredContent"]
    assert report["valid"] is False
    [finding] = report["findings"]
    assert (finding["code"], finding["step"], finding["argument"]) == ("FORWARD_REFERENCE", "area", "input_path")
    assert "move step 'wgs' before step 'area'" in finding["hint"]
    assert not (endpoint.workspace / first).exists()


def test_over_http_a_client_without_the_token_is_refused_with_the_fix(
    installed: Installed, http_servers: dict[bool, Server]
) -> None:
    # The twin of every HTTP test above: the same client and server, without the Authorization header.
    endpoint = http_servers[True].endpoint
    reply = run_client(installed, INSPECTORS[1], endpoint, "--method", "tools/list", header=False)
    assert reply.returncode == 1
    assert "send Authorization: Bearer <the token in the server's MAPSMITH_HTTP_TOKEN>" in reply.stderr
    assert reply.stdout.strip() == ""
    # 2.x reads the 401 as a request to sign in with OAuth, which it cannot do without a terminal: exit 3.
    reply = run_client(installed, INSPECTORS[2], endpoint, "--method", "tools/list", header=False)
    assert reply.returncode == 3
    assert reply.stdout.strip() == ""
    assert json.loads(reply.stderr)["error"]["code"] == "auth_required"
