"""The worked example, end to end through a real MCP client over stdio.

Buffer a river by 1.5 km, clip parcels to the corridor, measure each clipped parcel's ground
area, then print the answer table and the manifest written beside every dataset. The server is a
separate ``python -m mapsmith`` process confined to a workspace; this script is only a client, so
every number printed came from the server's engines.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

DATA = Path(__file__).resolve().parent / "data"
RIVER_BUFFER_METERS = 1500


class ExampleFailed(RuntimeError):
    pass


async def _call(session: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    data = result.structured_content or json.loads(result.content[0].text)
    if result.is_error:
        raise ExampleFailed(f"{tool} failed: [{data.get('code')}] {data.get('message')} (hint: {data.get('hint')})")
    return data


async def run_example(workdir: Path) -> dict[str, Any]:
    """Run the example in ``workdir`` (its workspace) and return what the server answered."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    for name in ("river.geojson", "parcels.geojson"):
        shutil.copyfile(DATA / name, workdir / name)
    env = {k: v for k, v in os.environ.items() if k.startswith("MAPSMITH_")}
    env["MAPSMITH_WORKSPACE"] = str(workdir)
    params = StdioServerParameters(command=sys.executable, args=["-m", "mapsmith"], env=env, cwd=str(workdir))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        buffer = await _call(
            session,
            "buffer_layer",
            {"input_path": "river.geojson", "distance_meters": RIVER_BUFFER_METERS, "output_path": "river_buffer.gpkg"},
        )
        clip = await _call(
            session,
            "clip_layer",
            {
                "input_path": "parcels.geojson",
                "mask_path": "river_buffer.gpkg",
                "output_path": "parcels_near_river.gpkg",
            },
        )
        area = await _call(
            session, "measure_area", {"input_path": "parcels_near_river.gpkg", "output_path": "parcels_area.gpkg"}
        )
        provenance = await _call(session, "get_provenance", {"path": "parcels_area.gpkg"})
    return {"tools": tools, "buffer": buffer, "clip": clip, "area": area, "provenance": provenance}


def print_report(result: dict[str, Any], workdir: Path) -> None:
    area = result["area"]["answer"]
    print(f"MapSmith worked example (workspace: {workdir})")
    print(
        f"  river buffered by {RIVER_BUFFER_METERS} m in {result['buffer']['crs_decisions']['analysis_crs']}, "
        f"clipped parcels: {area['feature_count']}, method: {area['method']}"
    )
    print()
    print(f"  {'parcel_id':<10} {'land_use':<12} {'area_m2':>12}")
    for row in area["rows"]:
        print(f"  {row['parcel_id']:<10} {row['land_use']:<12} {row['area_m2']:>12,.1f}")
    print(f"  {'total':<23} {area['total_area_m2']:>12,.1f}")
    print()
    print("  manifests:")
    for step in ("buffer", "clip", "area"):
        print(f"    {result[step]['manifest_path']}")
    print("  lineage of parcels_area.gpkg, walked back by content digest:")
    _print_lineage(result["provenance"]["lineage"], "    ")


def _print_lineage(node: dict[str, Any], indent: str) -> None:
    name = Path(node["path"]).name if node.get("path") else node["digest"][:12]
    if not node["producers"]:
        print(f"{indent}{name} (original input, sha256 {node['digest'][:12]}...)")
    for hop in node["producers"]:
        state = "checks passed" if hop["sound"] else "NOT SOUND: " + ", ".join(c["name"] for c in hop["failed_checks"])
        print(f"{indent}{name} <- {hop['operation']} on {hop['engine']['name']} {hop['engine']['version']} ({state})")
        for child in hop["inputs"]:
            _print_lineage(child, indent + "    ")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="mapsmith example", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="folder to use as the workspace (default: a new temp folder)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mapsmith-example-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = anyio.run(run_example, workdir.resolve())
    except ExampleFailed as exc:
        print(f"mapsmith example: {exc}", file=sys.stderr)
        return 1
    print_report(result, workdir.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
