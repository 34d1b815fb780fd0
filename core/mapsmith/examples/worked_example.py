"""The worked example: one analysis as a plan, validated, run and traced back, through a real MCP client.

The question: which parcels lie within 1.5 km of the river with mean ground elevation at most 120 m,
with the elevation and ground area of each? The data is built here, in code, so that the answer can
be worked out by hand (``expected_answer``), and the server's answer is compared with it:

* six parcels, 0.0015 degree squares whose south edge lies on 46.2 N (EPSG:4326), in a row west to east;
* a river running due north along 122.2 W;
* an elevation raster (EPSG:4326, 0.00025 degree cells) rising west to east, linear in longitude:
  ``z(lon) = 120 m + 1000 m per degree x (lon - (-122.2))``. Every parcel covers six whole columns of
  cells, symmetric about its centre, so its mean elevation is ``z`` at its centre's longitude.

The script is only a client: the server is a separate ``python -m mapsmith`` process confined to the
example's folder. It shows a plan with its steps in the wrong order rejected (``FORWARD_REFERENCE``),
a misspelt argument rejected with the accepted names, then runs the five-step plan (buffer_layer,
clip_layer, zonal_statistics, measure_area, select_features), prints the answer read from the final
file, walks that file's lineage back by content and replays the chain. ``--write-docs PATH`` writes
``docs/worked-example.md`` from what the server answered; it must never hold a number this script
did not produce, nor anything that changes from run to run (times, absolute paths, output digests).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mapsmith._compat import install_command

# -- the data, and the question ---------------------------------------------------------------------

PARCEL_SIZE_DEG = 0.0015
PARCEL_SOUTH_LAT = 46.2
PARCEL_CENTRES_LON = {"P1": -122.230, "P2": -122.215, "P3": -122.205, "P4": -122.195, "P5": -122.185, "P6": -122.170}
RIVER_NAME = "Example Creek"
RIVER_LON = -122.2
RIVER_LATS = (46.17, 46.23)
CORRIDOR_METERS = 1500
MAX_MEAN_ELEVATION_M = 120
# The elevation raster: z = ELEVATION_AT_RIVER_M + RISE_M_PER_DEGREE * (lon - RIVER_LON), sampled at cell centres.
ELEVATION_AT_RIVER_M = 120
RISE_M_PER_DEGREE = 1000
CELL_DEG = 0.00025
RASTER_WEST, RASTER_NORTH = -122.25, 46.21
RASTER_COLUMNS, RASTER_ROWS = 400, 80
NODATA = -9999.0
# A parcel this close to the corridor's edge would make the hand answer depend on how the buffer is drawn.
MIN_MARGIN_M = 100.0

INPUTS = ("river.geojson", "parcels.geojson", "elevation.tif")
FINAL_OUTPUT = "low_parcels_near_river.parquet"
REQUIRED_TOOLS = ("validate_plan", "execute_plan", "get_lineage", "replay", "get_provenance")
ANSWER_FIELDS = ("parcel_id", "zonal_mean", "area_m2")


class ExampleFailed(RuntimeError):
    """The example cannot run here, or the server answered something it should not have."""


def plan() -> dict[str, Any]:
    """The five-step plan; ``"$id"`` is the output of the step ``id``."""
    # GeoParquet outputs: the same inputs give the same bytes, so a replay can find them identical.
    return {
        "goal": f"Parcels within {CORRIDOR_METERS / 1000:g} km of {RIVER_NAME} whose mean ground elevation is at "
        f"most {MAX_MEAN_ELEVATION_M} m, with the elevation and ground area of each",
        "steps": [
            {
                "id": "corridor",
                "operation": "buffer_layer",
                "arguments": {
                    "input_path": "river.geojson",
                    "distance_meters": CORRIDOR_METERS,
                    "output_path": "corridor.parquet",
                },
            },
            {
                "id": "near_river",
                "operation": "clip_layer",
                "arguments": {
                    "input_path": "parcels.geojson",
                    "mask_path": "$corridor",
                    "output_path": "parcels_near_river.parquet",
                },
            },
            {
                "id": "elevation",
                "operation": "zonal_statistics",
                "arguments": {
                    "input_path": "$near_river",
                    "raster_path": "elevation.tif",
                    "statistics": "mean",
                    "output_path": "parcels_elevation.parquet",
                },
            },
            {
                "id": "area",
                "operation": "measure_area",
                "arguments": {"input_path": "$elevation", "method": "geodesic", "output_path": "parcels_area.parquet"},
            },
            {
                "id": "low",
                "operation": "select_features",
                "arguments": {
                    "input_path": "$area",
                    "where": f"zonal_mean <= {MAX_MEAN_ELEVATION_M}",
                    "output_path": FINAL_OUTPUT,
                },
            },
        ],
    }


def wrong_order_plan() -> dict[str, Any]:
    """The clip step placed before the buffer whose output it clips to."""
    good = plan()
    steps = good["steps"]
    return {"goal": good["goal"], "steps": [steps[1], steps[0], *steps[2:]]}


def misspelt_plan() -> dict[str, Any]:
    """``distance_m`` where buffer_layer takes ``distance_meters``."""
    good = plan()
    arguments = dict(good["steps"][0]["arguments"])
    arguments["distance_m"] = arguments.pop("distance_meters")
    first = {**good["steps"][0], "arguments": arguments}
    return {"goal": good["goal"], "steps": [first, *good["steps"][1:]]}


def parcel_box(parcel_id: str) -> tuple[float, float, float, float]:
    """(west, south, east, north) of a parcel in degrees."""
    half = PARCEL_SIZE_DEG / 2
    centre = PARCEL_CENTRES_LON[parcel_id]
    return (centre - half, PARCEL_SOUTH_LAT, centre + half, PARCEL_SOUTH_LAT + PARCEL_SIZE_DEG)


def elevation_at(lon: float) -> float:
    return ELEVATION_AT_RIVER_M + RISE_M_PER_DEGREE * (lon - RIVER_LON)


def elevation_columns() -> Any:
    """One row of the raster (every row is the same): ``elevation_at`` each column's centre, computed
    from whole cell counts so that every value is exact in float32 (multiples of 0.25 m)."""
    import numpy as np

    river_col = round((RIVER_LON - RASTER_WEST) / CELL_DEG)  # the cell edge the river runs along
    offsets_cells = np.arange(RASTER_COLUMNS) + 0.5 - river_col
    return (ELEVATION_AT_RIVER_M + RISE_M_PER_DEGREE * CELL_DEG * offsets_cells).astype("float32")


def write_inputs(workdir: Path) -> None:
    """river.geojson, parcels.geojson (GeoJSON is WGS 84 by definition) and elevation.tif."""
    import numpy as np

    try:
        import rasterio
        from affine import Affine
    except ImportError as exc:
        raise ExampleFailed(
            "the worked example needs the raster extra (zonal statistics): " + install_command("raster")
        ) from exc

    features = []
    for parcel_id in PARCEL_CENTRES_LON:
        w, s, e, n = parcel_box(parcel_id)
        ring = [[w, s], [e, s], [e, n], [w, n], [w, s]]
        geometry = {"type": "Polygon", "coordinates": [ring]}
        features.append({"type": "Feature", "properties": {"parcel_id": parcel_id}, "geometry": geometry})
    (workdir / "parcels.geojson").write_text(
        json.dumps({"type": "FeatureCollection", "features": features}, indent=1) + "\n", encoding="utf-8"
    )
    river = {
        "type": "Feature",
        "properties": {"name": RIVER_NAME},
        "geometry": {"type": "LineString", "coordinates": [[RIVER_LON, lat] for lat in RIVER_LATS]},
    }
    (workdir / "river.geojson").write_text(
        json.dumps({"type": "FeatureCollection", "features": [river]}, indent=1) + "\n", encoding="utf-8"
    )
    grid = np.tile(elevation_columns(), (RASTER_ROWS, 1))
    profile = {
        "driver": "GTiff",
        "width": RASTER_COLUMNS,
        "height": RASTER_ROWS,
        "count": 1,
        "dtype": "float32",
        "crs": "EPSG:4326",
        "transform": Affine(CELL_DEG, 0.0, RASTER_WEST, 0.0, -CELL_DEG, RASTER_NORTH),
        "nodata": NODATA,
    }
    with rasterio.open(workdir / "elevation.tif", "w", **profile) as dst:
        dst.write(grid, 1)


# -- the answer worked out by hand ------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedParcel:
    parcel_id: str
    centre_lon: float
    nearest_m: float  # ground distance from the river to the parcel's nearest corner
    farthest_m: float  # ... and to its farthest corner
    in_corridor: bool
    mean_elevation_m: float
    area_m2: float
    in_answer: bool


def expected_answer() -> list[ExpectedParcel]:
    """Every parcel's distance, mean elevation and area, computed without MapSmith.

    Distance: the river is a meridian, so a corner's distance to it is the geodesic to the river's
    point at the corner's latitude (pyproj ``Geod.inv``). Elevation: the mean of the raster's cells
    under the parcel (numpy), which must equal ``elevation_at`` its centre. Area: the geodesic area on
    the WGS 84 ellipsoid (pyproj ``Geod.geometry_area_perimeter``).
    """
    from pyproj import Geod
    from shapely.geometry import box

    geod = Geod(ellps="WGS84")
    columns = elevation_columns()
    rows = []
    for parcel_id, centre in PARCEL_CENTRES_LON.items():
        w, s, e, n = parcel_box(parcel_id)
        distances = [geod.inv(lon, lat, RIVER_LON, lat)[2] for lon in (w, e) for lat in (s, n)]
        nearest, farthest = min(distances), max(distances)
        if nearest - MIN_MARGIN_M < CORRIDOR_METERS < farthest + MIN_MARGIN_M:
            raise AssertionError(f"{parcel_id} lies within {MIN_MARGIN_M} m of the corridor's edge: move it")
        first = round((w - RASTER_WEST) / CELL_DEG)
        last = round((e - RASTER_WEST) / CELL_DEG)
        mean = float(columns[first:last].astype("float64").mean())
        if abs(mean - elevation_at(centre)) > 1e-9:
            raise AssertionError(f"{parcel_id}: cell mean {mean} is not the elevation at the centre")
        area = abs(geod.geometry_area_perimeter(box(w, s, e, n))[0])
        in_corridor = farthest < CORRIDOR_METERS
        in_answer = in_corridor and mean <= MAX_MEAN_ELEVATION_M
        rows.append(ExpectedParcel(parcel_id, centre, nearest, farthest, in_corridor, mean, area, in_answer))
    return rows


# -- the client -------------------------------------------------------------------------------------


async def _call(session: Any, tool: str, arguments: dict[str, Any], progress: Any = None) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments, progress_callback=progress)
    data: dict[str, Any] = result.structured_content or json.loads(result.content[0].text)
    if result.is_error:
        raise ExampleFailed(f"{tool} failed: [{data.get('code')}] {data.get('message')} (hint: {data.get('hint')})")
    return data


def _finding(validation: dict[str, Any], code: str, what: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [f for f in validation.get("findings", []) if f.get("code") == code]
    if validation.get("valid") or not found:
        codes = [f.get("code") for f in validation.get("findings", [])]
        raise ExampleFailed(
            f"validate_plan should reject {what} with {code}; it answered valid={validation.get('valid')} "
            f"with findings {codes}"
        )
    return found[0]


def read_answer(path: Path) -> list[dict[str, Any]]:
    """The answer table: the final file's rows, as the server wrote them."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=list(ANSWER_FIELDS))
    return sorted(table.to_pylist(), key=lambda row: str(row["parcel_id"]))


async def _conversation(session: Any, out: dict[str, Any], say: Callable[[str], None]) -> None:
    """Every call the example makes, in order; each reply is stored in ``out``."""
    await session.initialize()
    tools = {t.name for t in (await session.list_tools()).tools}
    missing = [t for t in REQUIRED_TOOLS if t not in tools]
    if missing:
        raise ExampleFailed(
            f"the server offers no {', '.join(missing)} tool: this MapSmith predates analysis plans "
            "(install the version this example came with)"
        )
    wrong_order = await _call(session, "validate_plan", {"plan": wrong_order_plan()})
    out["wrong_order"] = {
        "validation": wrong_order,
        "finding": _finding(wrong_order, "FORWARD_REFERENCE", "a plan in the wrong order"),
    }
    misspelt = await _call(session, "validate_plan", {"plan": misspelt_plan()})
    out["misspelt"] = {
        "validation": misspelt,
        "finding": _finding(misspelt, "UNKNOWN_ARGUMENT", "a misspelt argument"),
    }
    for key, what in (("wrong_order", "steps in the wrong order"), ("misspelt", "a misspelt argument")):
        finding = out[key]["finding"]
        say(f"rejected before any file was touched ({what}): [{finding['code']}] {finding['message']}")
        say(f"  hint: {finding['hint']}")
    validation = await _call(session, "validate_plan", {"plan": plan()})
    if not validation.get("valid"):
        raise ExampleFailed(f"validate_plan rejected the worked example's plan: {validation.get('findings')}")
    out["validation"] = validation

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        say(f"  {done:>4.0%} {message or ''}")

    say("running the plan:")
    out["execution"] = await _call(session, "execute_plan", {"plan": plan()}, progress=on_progress)
    if out["execution"].get("status") not in ("ok", "ok_with_warnings"):
        raise ExampleFailed(f"execute_plan did not finish: {out['execution']}")
    out["provenance"] = {}
    for step in out["execution"]["steps"]:
        if step.get("output_path"):
            out["provenance"][step["id"]] = await _call(session, "get_provenance", {"path": step["output_path"]})
    out["lineage"] = await _call(session, "get_lineage", {"path": FINAL_OUTPUT})
    say("replaying the recorded chain in a scratch folder ...")
    out["replay"] = await _call(session, "replay", {"path": FINAL_OUTPUT})


async def run_example(workdir: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the data in ``workdir`` (the server's workspace), then ask the server; returns its replies."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    write_inputs(workdir)
    env = {k: v for k, v in os.environ.items() if k.startswith("MAPSMITH_")}
    env["MAPSMITH_WORKSPACE"] = str(workdir)
    params = StdioServerParameters(command=sys.executable, args=["-m", "mapsmith"], env=env, cwd=str(workdir))
    out: dict[str, Any] = {}
    failure: ExampleFailed | None = None
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        try:
            await _conversation(session, out, say)
        except ExampleFailed as exc:
            # Raised outside the session, or the SDK's task group would wrap it in an ExceptionGroup.
            failure = exc
    if failure is not None:
        raise failure
    out["answer"] = read_answer(workdir / FINAL_OUTPUT)
    out["expected"] = expected_answer()
    return out


def check_answer(result: dict[str, Any]) -> list[str]:
    """Where the server's answer and the hand-computed one disagree (empty when they agree)."""
    expected = {p.parcel_id: p for p in result["expected"] if p.in_answer}
    got = {row["parcel_id"]: row for row in result["answer"]}
    problems = []
    if set(got) != set(expected):
        problems.append(f"parcels {sorted(got)} selected; worked out by hand: {sorted(expected)}")
    for pid in sorted(set(got) & set(expected)):
        if abs(got[pid]["zonal_mean"] - expected[pid].mean_elevation_m) > 1e-6:
            problems.append(
                f"{pid}: mean elevation {got[pid]['zonal_mean']} m, by hand {expected[pid].mean_elevation_m}"
            )
        if abs(got[pid]["area_m2"] - expected[pid].area_m2) > 0.005:
            problems.append(f"{pid}: area {got[pid]['area_m2']} m², by hand {expected[pid].area_m2}")
    return problems


# -- what the result looks like -----------------------------------------------------------------------


def _checks(manifest: dict[str, Any]) -> tuple[int, int]:
    verification = manifest.get("verification", [])
    return sum(1 for c in verification if c.get("passed")), len(verification)


def _crs_decision(manifest: dict[str, Any]) -> str:
    decisions = manifest.get("crs_decisions") or {}
    if not decisions.get("analysis_crs"):
        return "none recorded"
    return f"{decisions['analysis_crs']}: {decisions.get('reason', '')}"


def _lineage_lines(node: dict[str, Any], indent: str = "") -> list[str]:
    """The lineage tree (``lineage_to_dict`` form) as indented lines: file, operation, engine name, checks."""
    name = Path(node["path"]).name if node.get("path") else "(unnamed dataset)"
    producers = node.get("producers") or []
    if not producers:
        return [
            f"{indent}{name}: {'original data' if node.get('origin') else 'walk stopped'} "
            f"({node.get('stopped_because')})"
        ]
    lines = []
    for hop in producers:
        failed = [c["name"] for c in hop.get("failed_checks", [])]
        state = "every check passed" if not failed else "failed checks: " + ", ".join(failed)
        lines.append(f"{indent}{name} <- {hop['operation']} ({state})")
        for child in hop.get("inputs", []):
            lines.extend(_lineage_lines(child, indent + "    "))
    return lines


def _lineage_summary(lineage: dict[str, Any]) -> str:
    hops, stops = lineage.get("hops", []), lineage.get("stops", [])
    kinds = sorted({stop.get("kind", "?") for stop in stops})
    return (
        f"{len(hops)} operations walked back, {len(stops)} branches stopped ({', '.join(kinds)}); "
        f"walk complete: {'yes' if lineage.get('complete') else 'no'}, "
        f"every step sound: {'yes' if lineage.get('history_sound') else 'no'}"
    )


def answer_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["parcel_id"], f"{r['zonal_mean']:,.2f}", f"{r['area_m2']:,.2f}") for r in result["answer"]]


def print_report(result: dict[str, Any], workdir: Path) -> None:
    print()
    print(f"MapSmith worked example (workspace: {workdir})")
    print(f"  question: {plan()['goal']}")
    print(f"  plan status: {result['execution']['status']}, plan manifest: {result['execution']['plan_manifest_path']}")
    print()
    print(f"  {'parcel_id':<10} {'mean elevation m':>17} {'ground area m²':>15}")
    for pid, mean, area in answer_rows(result):
        print(f"  {pid:<10} {mean:>17} {area:>15}")
    problems = check_answer(result)
    print("  agrees with the answer worked out by hand" if not problems else "  DISAGREES: " + "; ".join(problems))
    print()
    print(f"  lineage of {FINAL_OUTPUT}, walked back by content digest:")
    for line in _lineage_lines(result["lineage"]["tree"], "    "):
        print(line)
    print(f"  {_lineage_summary(result['lineage'])}")
    print()
    print(f"  replay of {FINAL_OUTPUT}: {result['replay']['verdict']} ({result['replay']['summary']})")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(result: dict[str, Any]) -> str:
    """``docs/worked-example.md``: every number on it comes from ``result`` or this module's constants."""
    the_plan = plan()
    steps = the_plan["steps"]
    lines = [
        "# The worked example",
        "",
        "<!-- Generated by `python benchmarks/worked_example.py` (or `mapsmith example --write-docs "
        "docs/worked-example.md`) from core/mapsmith/examples/worked_example.py; do not edit by hand. "
        "tests/docs/test_worked_example.py fails when this page and the script disagree. -->",
        "",
        f"**Question.** {the_plan['goal']}.",
        "",
        f"**Data** (built by the script, no download): six parcels, {PARCEL_SIZE_DEG}° squares with their south "
        f"edge on {PARCEL_SOUTH_LAT}°N in EPSG:4326; a river, {RIVER_NAME}, running due north along "
        f"{abs(RIVER_LON)}°W; an elevation raster in EPSG:4326 ({CELL_DEG}° cells) rising west to east, "
        f"z = {ELEVATION_AT_RIVER_M} m at the river's longitude plus {RISE_M_PER_DEGREE} m per degree of longitude "
        "east of it (each cell holds z at its centre).",
        "",
        "Every call below went through a real MCP client over stdio to `python -m mapsmith`.",
        "",
        "## Rejected before any file is touched",
        "",
        "| plan | code | step | argument | message | hint |",
        "|---|---|---|---|---|---|",
    ]
    for key, what in (("wrong_order", "`near_river` placed before `corridor`"), ("misspelt", "`distance_m`")):
        for f in result[key]["validation"]["findings"]:
            lines.append(
                f"| {what} | `{f['code']}` | {f.get('step') or ''} | {f.get('argument') or ''} "
                f"| {_cell(f['message'])} | {_cell(f.get('hint') or '')} |"
            )
    lines += ["", "## The plan", "", "```mermaid", "flowchart LR"]
    for name in INPUTS:
        lines.append(f'    {name.split(".")[0]}_in[("{name}")]')
    ids = {s["id"] for s in steps}
    for s in steps:
        lines.append(f'    {s["id"]}["{s["id"]}: {s["operation"]}<br/>{s["arguments"]["output_path"]}"]')
    for s in steps:
        for arg, value in s["arguments"].items():
            if arg == "output_path" or not isinstance(value, str):
                continue
            if value.startswith("$") and value[1:] in ids:
                lines.append(f"    {value[1:]} -->|{arg}| {s['id']}")
            elif value in INPUTS:
                lines.append(f"    {value.split('.')[0]}_in -->|{arg}| {s['id']}")
    lines += ["```", "", "```json", json.dumps(the_plan, indent=2), "```", ""]
    lines += [
        "| step | operation | output | CRS decision (from the manifest) | checks passed |",
        "|---|---|---|---|---|",
    ]
    for s in result["execution"]["steps"]:
        manifest = result["provenance"][s["id"]]["manifest"]
        passed, total = _checks(manifest)
        lines.append(
            f"| `{s['id']}` | `{s['operation']}` | `{Path(s['output_path']).name}` | {_cell(_crs_decision(manifest))} "
            f"| {passed}/{total} |"
        )
    lines += [
        "",
        f"Plan status: `{result['execution']['status']}`; the plan manifest is written beside the final output "
        f"(`{FINAL_OUTPUT}.plan.json`).",
        "",
        "## The answer",
        "",
        "| parcel | mean ground elevation (m) | ground area (m²) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {pid} | {mean} | {area} |" for pid, mean, area in answer_rows(result)]
    problems = check_answer(result)
    lines += [
        "",
        "## The same answer worked out by hand",
        "",
        "Distances are geodesics from each parcel's corners to the river at the same latitude; a parcel is in the "
        f"corridor when its farthest corner is within {CORRIDOR_METERS} m (none lies within {MIN_MARGIN_M:g} m of "
        "the corridor's edge, so the buffer's construction cannot change the answer). Each parcel covers whole "
        "raster columns symmetric about its centre and z is linear, so its mean elevation is z at its centre. "
        "Areas are geodesic on the WGS 84 ellipsoid.",
        "",
        "| parcel | centre longitude | nearest / farthest corner from the river (m) | in corridor "
        "| mean elevation (m) | ground area (m²) | in the answer |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    for p in result["expected"]:
        lines.append(
            f"| {p.parcel_id} | {p.centre_lon:.4f}° | {p.nearest_m:,.1f} / {p.farthest_m:,.1f} "
            f"| {'yes' if p.in_corridor else 'no'} | {p.mean_elevation_m:,.2f} | {p.area_m2:,.2f} "
            f"| {'yes' if p.in_answer else 'no'} |"
        )
    lines += [
        "",
        "The server's answer " + ("agrees with it." if not problems else "DISAGREES: " + "; ".join(problems)),
        "",
        "## Lineage of the final file",
        "",
        f"`get_lineage` hashes `{FINAL_OUTPUT}`, finds the manifest claiming those bytes, and walks every "
        "input digest back to the original data:",
        "",
        "```text",
        *_lineage_lines(result["lineage"]["tree"]),
        "```",
        "",
        _lineage_summary(result["lineage"]) + ".",
        "",
        "## Replay",
        "",
        f"`replay` re-runs the chain recorded for `{FINAL_OUTPUT}` in a scratch folder and compares each "
        "step's output digest with the recorded one (GeoParquet outputs: the same inputs give the same bytes).",
        "",
        "| step | operation | output | result |",
        "|---|---|---|---|",
        *[
            f"| {s.get('position')} | `{s.get('operation')}` | `{s.get('output_path')}` | {s.get('result')} |"
            for s in result["replay"].get("steps", [])
        ],
        "",
        f"Verdict: **{result['replay']['verdict']}**: {result['replay']['summary']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="mapsmith example", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="folder to use as the workspace (default: a new temp folder)")
    parser.add_argument("--write-docs", type=Path, metavar="PATH", help="also write the worked-example page to PATH")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mapsmith-example-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = anyio.run(run_example, workdir.resolve())
    except ExampleFailed as exc:
        print(f"mapsmith example: {exc}", file=sys.stderr)
        return 1
    print_report(result, workdir.resolve())
    if args.write_docs is not None:
        args.write_docs.write_text(render_markdown(result), encoding="utf-8")
        print(f"\nwrote {args.write_docs}")
    return 0 if not check_answer(result) else 1


if __name__ == "__main__":
    sys.exit(main())
