"""The ``mapsmith`` command: with no arguments, serve MCP over stdio.

Configuration errors (an unknown ``MAPSMITH_STACK``, a workspace that does not exist) end the
process at start with the message and the fix on stderr, before any client connects.
"""

from __future__ import annotations

import argparse
import json
import sys

from mapsmith import __version__
from mapsmith.errors import MapSmithError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mapsmith", description="MapSmith geoprocessing server (MCP).")
    parser.add_argument("--version", action="version", version=f"mapsmith {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="serve MCP over stdio (the default)")
    sub.add_parser("info", help="print server_info as JSON and exit")
    example = sub.add_parser("example", help="run the worked example through a real MCP client over stdio")
    example.add_argument("--workdir", help="folder to use as the example's workspace")
    example.add_argument("--write-docs", metavar="PATH", help="also write the worked-example page to PATH")
    args = parser.parse_args(argv)

    if args.command == "example":
        from mapsmith.examples.worked_example import main as example_main

        forwarded = ["--workdir", args.workdir] if args.workdir else []
        return example_main(forwarded + (["--write-docs", args.write_docs] if args.write_docs else []))

    try:
        from mapsmith.app import MapSmith

        app = MapSmith()
    except MapSmithError as exc:
        print(f"mapsmith: cannot start: {exc}", file=sys.stderr)
        return 2
    if args.command == "info":
        print(json.dumps(app.server_info(), indent=2))
        return 0
    import anyio

    from mapsmith.server import serve_stdio

    anyio.run(serve_stdio, app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
