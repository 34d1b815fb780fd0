"""Two stacks, one answer: run buffer, clip, dissolve and reproject on opensource and qgis, and compare.

``measure(workspace)`` builds small fixtures, runs each case on both stacks through MapSmith (so each
output has its manifest), and returns what differs: geometry (symmetric difference over area, or the
Hausdorff distance in metres), feature counts, CRS, geometry types, layer names, and every field with
its type. ``render(measured)`` writes ``docs/stacks.md`` from it, with an esri section rendered from
``mapsmith_esri.mapping`` (nothing has run on a real ArcGIS Pro); only deterministic content (no
timings, no paths), so tests/stacks/test_qgis_dual_stack.py can fail when the page is stale.

    python benchmarks/stacks_report.py            # prints the page
    python benchmarks/stacks_report.py --write    # rewrites docs/stacks.md
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "stacks.md"
STACKS = ("opensource", "qgis")
UTM = "EPSG:32633"
X0, Y0, SIDE_M = 500000.0, 5000000.0, 100.0
DISTANCE_M, SEGMENTS = 10.0, 8
# Geometry agrees when |A xor B| / |A| is below this (polygons), or points are within HAUSDORFF_M.
AREA_TOLERANCE, HAUSDORFF_M = 1e-3, 0.01


def build_fixtures(workspace: Path) -> None:
    """Three 100 m squares (two touching ones named 'a', one 'b'), a mask, and a square in degrees."""
    import geopandas as gpd
    from shapely.geometry import box

    squares = [
        box(X0, Y0, X0 + SIDE_M, Y0 + SIDE_M),
        box(X0 + SIDE_M, Y0, X0 + 2 * SIDE_M, Y0 + SIDE_M),
        box(X0 + 400, Y0, X0 + 400 + SIDE_M, Y0 + SIDE_M),
    ]
    gpd.GeoDataFrame(
        {"name": ["a", "a", "b"], "count": [1, 2, 3], "ratio": [0.5, 1.5, 2.5]}, geometry=squares, crs=UTM
    ).to_file(workspace / "squares.gpkg")
    # Covers the right half of the first square, all of the second, none of the third.
    gpd.GeoDataFrame({"zone": ["z"]}, geometry=[box(X0 + 50, Y0 - 50, X0 + 250, Y0 + 150)], crs=UTM).to_file(
        workspace / "mask.gpkg"
    )
    gpd.GeoDataFrame({"name": ["d"]}, geometry=[box(15.0, 45.0, 15.01, 45.01)], crs="EPSG:4326").to_file(
        workspace / "degrees.gpkg"
    )


# (case, operation, arguments without output_path)
CASES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "buffer",
        "buffer_layer",
        {"input_path": "squares.gpkg", "distance_meters": DISTANCE_M, "segments_per_quarter_circle": SEGMENTS},
    ),
    (
        "buffer_degrees",
        "buffer_layer",
        {"input_path": "degrees.gpkg", "distance_meters": DISTANCE_M, "segments_per_quarter_circle": SEGMENTS},
    ),
    ("clip", "clip_layer", {"input_path": "squares.gpkg", "mask_path": "mask.gpkg"}),
    ("dissolve", "dissolve_layer", {"input_path": "squares.gpkg", "by_fields": "name"}),
    ("reproject", "reproject_layer", {"input_path": "squares.gpkg", "target_crs": "EPSG:4326"}),
)


def _read(path: Path) -> dict[str, Any]:
    import geopandas as gpd
    import pyogrio

    info = pyogrio.read_info(path)
    frame = gpd.read_file(path)
    return {
        "frame": frame,
        "layer": pyogrio.list_layers(path)[0][0],
        "fields": [f"{n}:{t}" for n, t in zip(info["fields"], info["dtypes"], strict=True)],
        "geometry_type": info["geometry_type"],
        "features": int(info["features"]),
        "crs": frame.crs.to_string() if frame.crs else None,
        "fid_column": info.get("fid_column") or "",
        "geometry_column": info.get("geometry_name") or "",
    }


def _geometry(a: Any, b: Any, case: str) -> dict[str, Any]:
    """How far apart the geometries of two outputs are, feature by feature in file order."""
    import shapely

    if len(a) != len(b):
        return {"comparable": False}
    if a.crs.is_geographic:  # measure in metres
        a, b = a.to_crs(UTM), b.to_crs(UTM)
    xor = sum(float(shapely.symmetric_difference(g, h).area) for g, h in zip(a.geometry, b.geometry, strict=True))
    area = float(a.geometry.area.sum())
    hausdorff = max(
        (float(shapely.hausdorff_distance(g, h)) for g, h in zip(a.geometry, b.geometry, strict=True)), default=0.0
    )
    return {
        "comparable": True,
        "area_m2": {"opensource": area, "qgis": float(b.geometry.area.sum())},
        "xor_ratio": xor / area if area else 0.0,
        "hausdorff_m": hausdorff,
    }


def measure(workspace: Path) -> dict[str, Any]:
    """Run every case on both stacks in ``workspace`` and return the comparison (outputs stay there)."""
    from mapsmith.app import MapSmith

    build_fixtures(workspace)
    apps = {s: MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_STACK": s}) for s in STACKS}
    cases: dict[str, Any] = {}
    for case, operation, arguments in CASES:
        read: dict[str, dict[str, Any]] = {}
        algorithm: list[str] = []
        for stack in STACKS:
            output = f"{case}_{stack}.gpkg"
            apps[stack].run(operation, {**arguments, "output_path": output})
            read[stack] = _read(workspace / output)
            if stack == "qgis":
                manifest = json.loads((workspace / f"{output}.provenance.json").read_text("utf-8"))
                algorithm = [s["algorithm"] for s in manifest["parameters"].get("x-mapsmith:qgis_steps", [])]
        os_, qg = read["opensource"], read["qgis"]
        differences = []
        for key, what in (
            ("features", "feature count"),
            ("crs", "CRS"),
            ("geometry_type", "geometry type"),
            ("fields", "fields (name:type, in order)"),
            ("fid_column", "FID column"),
            ("geometry_column", "geometry column"),
        ):
            if os_[key] != qg[key]:
                differences.append({"what": what, "opensource": os_[key], "qgis": qg[key]})
        if os_["layer"].removesuffix("_opensource") != qg["layer"].removesuffix("_qgis"):
            differences.append({"what": "layer name", "opensource": os_["layer"], "qgis": qg["layer"]})
        shared = [f.split(":")[0] for f in os_["fields"] if f in qg["fields"]]
        values_differ = [
            name for name in shared if os_["frame"][name].astype(str).tolist() != qg["frame"][name].astype(str).tolist()
        ]
        if values_differ:
            differences.append({"what": "attribute values", "opensource": values_differ, "qgis": values_differ})
        cases[case] = {
            "operation": operation,
            "arguments": arguments,
            "qgis_algorithms": algorithm,
            "geometry": _geometry(os_["frame"], qg["frame"], case),
            "differences": differences,
            "same": {k: os_[k] for k in ("features", "crs", "geometry_type", "fields") if os_[k] == qg[k]},
        }
    return {"cases": cases}


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(f"`{v}`" for v in value) or "(none)"
    return f"`{value}`" if value not in ("", None) else "(none)"


def render(measured: dict[str, Any]) -> str:
    """The page; geometry figures rounded so that the last bits of floating point never change it."""
    lines = [
        "# Two stacks, one answer: opensource and qgis",
        "",
        "<!-- generated by benchmarks/stacks_report.py; tests/stacks/test_qgis_dual_stack.py fails when it is stale."
        " Rewrite with: python benchmarks/stacks_report.py --write -->",
        "",
        "With `MAPSMITH_STACK=qgis`, `buffer_layer`, `centroid_layer`, `clip_layer`, `dissolve_layer` and "
        "`reproject_layer` run as QGIS Processing algorithms (`plugins/qgis-sidecar/mapsmith_qgis/mapping.py`) "
        "under the same contracts; every other MapSmith operation is `missing` on the qgis stack (the router "
        "says so, and `MAPSMITH_FALLBACK_STACK=opensource` allows a disclosed substitute).",
        "",
        "Each case below ran on both stacks over the same fixtures: three 100 m squares in EPSG:32633 "
        "(`name` a, a, b; `count` 1, 2, 3; `ratio` 0.5, 1.5, 2.5), the first two touching; a mask over the "
        "right half of the first and all of the second; and a 0.01 degree square in EPSG:4326 at 15 E, 45 N. "
        f"Geometry agrees when the symmetric difference is below {AREA_TOLERANCE:g} of the area "
        f"(polygons) or the Hausdorff distance is below {HAUSDORFF_M} m.",
        "",
        "| case | operation | QGIS algorithms | features | area m² (opensource / qgis) | xor / area | Hausdorff m |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, c in measured["cases"].items():
        g = c["geometry"]
        features = c["same"].get("features", "differ")
        if g["comparable"]:
            areas = f"{g['area_m2']['opensource']:.2f} / {g['area_m2']['qgis']:.2f}"
            figures = f"{areas} | {g['xor_ratio']:.1e} | {g['hausdorff_m']:.3f}"
        else:
            figures = "not comparable | | "
        algorithms = " → ".join(f"`{a}`" for a in c["qgis_algorithms"])
        lines.append(f"| {case} | `{c['operation']}` | {algorithms} | {features} | {figures} |")
    lines += ["", "## Every difference in what was written", ""]
    for case, c in measured["cases"].items():
        lines.append(f"### {case} (`{c['operation']}`)")
        lines.append("")
        if not c["differences"]:
            lines.append("No difference in feature count, CRS, geometry type, fields, field types or values.")
        for d in c["differences"]:
            lines.append(f"- {d['what']}: opensource {_fmt(d['opensource'])}; qgis {_fmt(d['qgis'])}")
        lines.append("")
    lines += [
        "## What the mapping does so that the contracts hold",
        "",
        "- `buffer_layer`: `distance_meters` is metres on both stacks. A projected layer whose scale is within "
        "1 % of true is buffered in its own units; a geographic one is reprojected by QGIS "
        "(`native:reprojectlayer`) to the UTM zone MapSmith estimates, buffered, and reprojected back, "
        "each leg along the PROJ operation MapSmith chose (QGIS's `OPERATION`), recorded in "
        "`crs_decisions.round_trip`. Degrees are never buffered by metres.",
        "- `dissolve_layer`: `native:dissolve` keeps every field with the first feature's values; the contract "
        "writes only the key fields, so `native:retainfields` removes the rest. `aggregations` is refused on the "
        "qgis stack with `QGIS_UNMAPPED_ARGUMENT` (use the opensource stack or `qgis:native:aggregate`).",
        "- `reproject_layer`: QGIS is given the PROJ pipeline MapSmith chose, so both stacks apply one operation.",
        "- Outputs: QGIS 3.22's GDAL writes `.gpkg`, `.fgb` and `.geojson`; a `.parquet` output on the qgis "
        "stack is refused before QGIS starts (`NO_ELIGIBLE_ENGINE`).",
        "- Manifests: engine `qgis` with its version, `x-mapsmith:qgis_algorithm` and `x-mapsmith:qgis_parameters` "
        "for the main algorithm, and `x-mapsmith:qgis_steps` for every `qgis_process run` of the operation.",
        "",
        *render_esri(),
    ]
    return "\n".join(lines)


def render_esri() -> list[str]:
    """The esri section, from the mapping table itself: what is mapped and what has really run."""
    from mapsmith_esri.mapping import MAPPINGS

    lines = [
        "## The esri stack (ArcPy through ArcGIS Pro's own Python)",
        "",
        "**Nothing on this page, and nothing in the test suite, has run against a real ArcGIS Pro.** "
        "This machine has no ArcGIS and no Windows. Everything below ran against a *simulated* Pro Python: "
        "MapSmith's real worker script (`plugins/esri/mapsmith_esri/worker.py`) and the real subprocess "
        "protocol (UTF-8 JSON request/result files, `MAPSMITH-PROGRESS` lines on stdout, timeouts), with a "
        "fake `arcpy` package (`tests/stacks/fake_arcgis_pro/`) that computes results with geopandas and "
        "writes a real File Geodatabase. Its failure messages follow ArcPy's documented format (`ERROR "
        "000732: ...`, `Failed to execute (Buffer).`) but were written from Esri's error reference, not "
        "recorded from ArcGIS Pro; the licence levels in the table are those of Esri's tool reference pages as "
        "remembered when the mapping was written, not re-checked here (this machine cannot reach Esri's site). "
        "The qgis comparison above has no esri column for that reason.",
        "",
        "Checked against the simulated Pro (`tests/stacks/test_esri_stack.py`): buffer area of a 100 m "
        "square buffered 10 m, geodesic area of a 100 m UTM square, dissolve by a key, spatial join with a "
        "clashing field, reprojection to EPSG:4326, interior points (an Advanced tool), clip in a workspace "
        "folder named `Zürich_数据`, progress forwarding; GP errors "
        "000732, 000728, 000800 and 000824 with their whole message queues; a licence level too low decided "
        "before any process starts and reported by the worker; a missing tool; arcpy refusing to start; a "
        "worker that crashes, writes no result, or hangs. Without Pro, `MAPSMITH_STACK=esri` starts and "
        "answers every operation `STACK_UNAVAILABLE` with the reason.",
        "",
        "| operation | ArcPy tools | licence level | what the mapping does |",
        "|---|---|---|---|",
    ]
    for m in MAPPINGS:
        tools = " → ".join(f"`{t}`" for t in m.tools)
        level = m.level + (f" + {', '.join(m.extensions)}" if m.extensions else "") + (" (online)" if m.online else "")
        lines.append(f"| `{m.operation}` | {tools} | {level} | {m.how} |")
    lines += [
        "",
        "Every other operation is `missing` on the esri stack (`MAPSMITH_FALLBACK_STACK=opensource` allows a "
        "disclosed substitute, recorded under `x-mapsmith:engine_choice.substitution` with the outcome and "
        "reason). The licence level is read as metadata from Pro's licensing settings in the registry "
        "(`AUTHORIZATION_TYPE`, `SOFTWARE_CLASS`); with a Named User licence it is decided by the portal at "
        "sign-in and reported as not recorded locally, and the worker then asks ArcPy (`ProductInfo`, "
        "`CheckExtension`) before running a tool.",
        "",
    ]
    return lines


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        page = render(measure(Path(tmp)))
    if "--write" in argv:
        PAGE.write_text(page, "utf-8")
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
