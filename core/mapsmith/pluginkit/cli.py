"""``mapsmith plugin check PACKAGE-OR-PATH [--json]``: print the conformance report; exit 0 only when it passed.

Exit codes: 0 every rule passed, 1 a rule failed (the report says which), 2 the check could not run (no
sandbox on this machine: the plugin's code is never run unsandboxed). This module must never run plugin
code itself; ``check.check_plugin`` does that, in the sandbox.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mapsmith.errors import MapSmithError


def check_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="mapsmith plugin check", description="Check a plugin against MapSmith's rules, examples in a sandbox."
    )
    parser.add_argument("target", help="the plugin's folder, or an installed plugin's distribution or entry point")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--workspace", type=Path, help="keep the scratch workspaces of every run in this folder")
    args = parser.parse_args(argv)
    from mapsmith.pluginkit.check import check_plugin

    try:
        report = check_plugin(args.target, workspace=args.workspace)
    except MapSmithError as exc:
        if args.json:
            print(json.dumps({"target": args.target, "passed": False, "error": exc.to_dict()}, indent=2))
        else:
            print(f"mapsmith plugin check: {exc}", file=sys.stderr)
        return 2
    print(report.to_json() if args.json else report.to_text())
    return 0 if report.passed else 1
