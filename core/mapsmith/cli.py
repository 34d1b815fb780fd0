"""The ``mapsmith`` command: with no arguments, serve MCP over stdio; ``serve --http`` serves it over HTTP.

``mapsmith plugin new|check|promote`` are the plugin author's commands (``mapsmith.pluginkit``).

The engines run in a sandboxed worker when ``MAPSMITH_SANDBOX`` and the machine allow it
(``mapsmith.sandbox``). Configuration errors (an unknown ``MAPSMITH_STACK``, a workspace that does not
exist, an HTTP address that would be exposed without a token, ``MAPSMITH_SANDBOX=on`` where no sandbox
can be built) end the process at start with exit code 2 and the message and
the fix on stderr, before any client connects.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from mapsmith import __version__
from mapsmith.errors import MapSmithError

if TYPE_CHECKING:
    from mapsmith.app import MapSmith


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    if args_in[:1] == ["plugin"]:
        return plugin_main(args_in[1:])
    parser = argparse.ArgumentParser(prog="mapsmith", description="MapSmith geoprocessing server (MCP).")
    parser.add_argument("--version", action="version", version=f"mapsmith {__version__}")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve MCP over stdio (the default), or over HTTP with --http")
    serve.add_argument("--http", action="store_true", help="serve MCP over streamable HTTP at /mcp")
    serve.add_argument("--host", help="with --http: the address to listen on (default 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int, help="with --http: the port (default 8765; 0 picks a free one)")
    sub.add_parser("info", help="print server_info as JSON and exit")
    sub.add_parser("plugin", help="for plugin authors: plugin new|check|promote (see `mapsmith plugin --help`)")
    example = sub.add_parser("example", help="run the worked example through a real MCP client over stdio")
    example.add_argument("--workdir", help="folder to use as the example's workspace")
    example.add_argument("--write-docs", metavar="PATH", help="also write the worked-example page to PATH")
    args = parser.parse_args(argv)

    if args.command == "example":
        from mapsmith.examples.worked_example import main as example_main

        forwarded = ["--workdir", args.workdir] if args.workdir else []
        return example_main(forwarded + (["--write-docs", args.write_docs] if args.write_docs else []))

    if args.command == "serve" and not args.http and (args.host is not None or args.port is not None):
        parser.error("--host and --port apply to --http only")
    if args.command == "serve" and args.http:
        return _serve_http(args.host, args.port)

    if args.command != "info":
        _exit_on_terminate()
    try:
        from mapsmith.sandbox import build_app

        # `info` answers from the server process alone: no worker is started for it.
        app = build_app(prestart=args.command != "info")
    except MapSmithError as exc:
        print(f"mapsmith: cannot start: {exc}", file=sys.stderr)
        return 2
    if args.command == "info":
        print(json.dumps(app.server_info(), indent=2))
        return 0
    import anyio

    from mapsmith.server import serve_stdio

    _at_start(app)
    anyio.run(serve_stdio, app)
    return 0


# How long a terminated server waits for its workers to stop and its folders to go (a busy worker gets 3 s each).
LEAVING_S = 10.0


def _exit_on_terminate() -> None:
    """SIGTERM, how MCP clients and process managers stop a server that does not leave on its own, ends the stdio
    server at once, after what it would undo at exit: the sandbox's workers stopped and its identity folder in the
    temporary directory removed (a terminated server used to leave it behind). Not by raising SystemExit: the
    thread reading stdin would hold the exit until the client closed it. The HTTP server's uvicorn puts its own
    handler in place while it serves; it shuts down gracefully, puts this one back and raises the signal again."""
    import signal
    import threading

    def stop(signum: int, _frame: object) -> None:
        from mapsmith.outputs import release_workspace_claims
        from mapsmith.sandbox import shut_down

        # In a thread of its own, waited for LEAVING_S at most: the handler runs in the main thread, which may hold
        # a lock shut_down needs (the worker pool's). Workers left running die with this process (bubblewrap's
        # --die-with-parent).
        def leave() -> None:
            shut_down()
            release_workspace_claims()

        leaving = threading.Thread(target=leave, name="mapsmith-leaving", daemon=True)
        leaving.start()
        leaving.join(LEAVING_S)
        sys.stderr.flush()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


PLUGIN_USAGE = """usage: mapsmith plugin {new,check,promote} ...

  new NAME [--dir D] [--operation OP]   write a working operation plugin package that passes the check
  check PACKAGE-OR-PATH [--json]        run MapSmith's conformance rules on a plugin, examples in a sandbox
  promote ...                           record the evidence that makes a plugin's operation stable
"""


def plugin_main(argv: list[str]) -> int:
    """``mapsmith plugin ...``: each command is imported only when asked for (promote may be absent)."""
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "new":
        from mapsmith.pluginkit.new import main as new_main

        return new_main(rest)
    if command == "check":
        from mapsmith.pluginkit.cli import check_main

        return check_main(rest)
    if command == "promote":
        try:
            from mapsmith.pluginkit.promote import main as promote_main
        except ImportError as exc:
            print(f"mapsmith plugin promote is not available in this install: {exc}", file=sys.stderr)
            return 2
        return promote_main(rest)
    print(PLUGIN_USAGE, file=sys.stdout if command in ("-h", "--help") else sys.stderr, end="")
    return 0 if command in ("-h", "--help") else 2


def _at_start(app: MapSmith) -> None:
    """Once per server start, before any client is answered: a selected stack that cannot run is said
    with its fix, and temporary files a killed run left in the workspace are removed (both on stderr;
    stdout is the protocol on stdio)."""
    from mapsmith.app import announce_startup

    announce_startup(app)
    root = os.environ.get("MAPSMITH_WORKSPACE")
    if root:
        from pathlib import Path

        from mapsmith.outputs import clean_stale_temps

        removed = clean_stale_temps(Path(root).resolve(), os.environ)
        if removed:
            shown = ", ".join(removed[:5]) + (f" and {len(removed) - 5} more" if len(removed) > 5 else "")
            print(f"mapsmith: removed {len(removed)} temporary file(s) a stopped run left: {shown}", file=sys.stderr)


def _serve_http(host: str | None, port: int | None) -> int:
    from mapsmith.server import http

    host = http.DEFAULT_HOST if host is None else host
    port = http.DEFAULT_PORT if port is None else port
    try:
        if not 0 <= port <= 65535:
            raise http.HTTPTransportError(
                f"--port {port} is not a TCP port", code="HTTP_BIND_FAILED", hint="pass a port from 0 to 65535"
            )
        # Read, then removed from os.environ and zeroed in the process's own environment block: nothing
        # after this point (engines, plugins, their subprocesses, /proc/<pid>/environ) holds the token.
        token = http.take_token(os.environ)
        binding = http.resolve_binding(host, port)
        warning = http.check_exposure(binding, token, workspace_set="MAPSMITH_WORKSPACE" in os.environ)
        from mapsmith.sandbox import build_app

        _exit_on_terminate()  # uvicorn shuts down on SIGTERM, then re-raises it to this handler
        app = build_app()
        _at_start(app)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        http.serve_http(app, binding, token)
    except MapSmithError as exc:
        print(f"mapsmith: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
