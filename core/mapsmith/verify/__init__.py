"""Deterministic checks: input preconditions before an engine runs, output checks after.

Preconditions refuse what cannot be computed honestly (no CRS, an unnamed layer of a multi-layer
container, a geometry type the operation does not accept) and warn about what is probably a
mistake (empty input, extents that cannot meet). Output checks compare the written dataset with
what the operation's contract guarantees. Check names follow the manifest spec's core vocabulary
(§3.6); anything else is ``x-mapsmith:``. This module reads ``DatasetInfo`` records only: it never
opens a file or imports an engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mapsmith.contracts import DatasetArgument, OperationContract
from mapsmith.errors import CRSError, CRSRequired, GeometryTypeRefused
from mapsmith.registry import DatasetInfo

# The check an engine records for each input whose geometries it counted while reading (argument: the input slot).
INPUT_VALID_CHECK = "x-mapsmith:input_geometry_valid"


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    critical: bool = True
    argument: str | None = None
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "passed": self.passed,
            "detail": self.detail,
            "critical": self.critical,
        }
        if self.argument is not None:
            out["argument"] = self.argument
        if self.hint is not None:
            out["hint"] = self.hint
        return out


@dataclass
class RunWarning:
    code: str
    message: str
    hint: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


def require_crs(info: DatasetInfo, argument: str) -> Check:
    if info.crs_wkt is None:
        raise CRSRequired(
            f"{argument} ({info.path}) declares no coordinate reference system, so no distance, area "
            "or overlay computed on it would mean anything",
            evidence={"argument": argument, "path": info.path, "layer": info.layer},
            hint="assign the CRS the data was captured in (e.g. with a .prj, or in the source GIS) and "
            "try again; MapSmith will not guess one",
        )
    if info.crs_is_geographic and info.bounds is not None:
        west, south, east, north = info.bounds
        # Longitudes up to 360 occur (0..360 conventions); beyond that, or latitudes beyond the
        # poles, the numbers cannot be degrees: most often metres under a wrong or default label.
        if min(west, east) < -180 or max(west, east) > 360 or min(south, north) < -90 or max(south, north) > 90:
            raise CRSError(
                f"{argument} ({info.path}) is labelled {info.crs_label} (degrees) but its coordinates span "
                f"x {west:g}..{east:g}, y {south:g}..{north:g}, which cannot be longitudes and latitudes",
                code="CRS_COORDINATES_IMPOSSIBLE",
                evidence={"argument": argument, "path": info.path, "crs": info.crs_label, "bounds": list(info.bounds)},
                hint="the coordinates look projected (metres or feet): declare the CRS they were captured in; "
                "MapSmith will not reinterpret them",
            )
    return Check("input_crs_present", True, f"{argument} declares {info.crs_label}", argument=argument)


GEOREF_SOURCE_NAMES = {
    "PAM": ".aux.xml sidecar",
    "INTERNAL": "the file's own tags",
    "TABFILE": ".tab file",
    "WORLDFILE": "world file (.tfw/.wld)",
}


def require_one_georeferencing(info: DatasetInfo, argument: str) -> Check:
    """Refuse a raster whose sources (tags, sidecar, world file) disagree about where it lies, unless
    the caller chose one with ``GDAL_GEOREF_SOURCES``; refuse a rotated or ungeoreferenced grid."""
    from mapsmith.errors import InputError

    grid = info.grid or {}
    georef = grid.get("georeferencing") or {}
    readings = georef.get("readings") or []
    chosen = georef.get("GDAL_GEOREF_SOURCES")
    if georef.get("conflict") and not chosen:
        described = "; ".join(
            f"{GEOREF_SOURCE_NAMES.get(r['source'], r['source'])} ({r['source']}): transform {r['transform']}, "
            f"CRS {r['crs'] or 'not stated'}"
            for r in readings
        )
        used = GEOREF_SOURCE_NAMES.get(georef.get("source_used") or "", "first")
        raise InputError(
            f"{argument} ({info.path}) has georeferencings that disagree -- {described}. GDAL would silently use "
            f"the {used} one; MapSmith will not compute on a grid whose position depends on which file is read",
            code="GEOREF_CONFLICT",
            evidence={
                "argument": argument,
                "path": info.path,
                "readings": readings,
                "gdal_default": georef.get("source_used"),
            },
            hint="remove (or fix) the sidecar if the GeoTIFF's own tags are right, or run the server with "
            "GDAL_GEOREF_SOURCES=INTERNAL to use the tags (GDAL_GEOREF_SOURCES=PAM,INTERNAL to let the sidecar "
            "win); the manifest records the choice. describe_dataset lists every reading",
        )
    if georef.get("source_used") is None:
        raise InputError(
            f"{argument} ({info.path}) has no geotransform (it may be positioned by ground control points only)",
            code="RASTER_NOT_GEOREFERENCED",
            evidence={"argument": argument, "path": info.path},
            hint="warp it to a regular grid first (gdalwarp), then pass the result",
        )
    if grid.get("rotated"):
        raise InputError(
            f"{argument} ({info.path}) has a rotated geotransform {grid.get('transform')}: rows and columns are "
            "not aligned with the CRS axes, so cell sizes, slopes and distances computed on the array would be wrong",
            code="RASTER_ROTATED",
            evidence={"argument": argument, "path": info.path, "transform": grid.get("transform")},
            hint="resample it onto a north-up grid first (gdalwarp with the same CRS), then pass that",
        )
    source = GEOREF_SOURCE_NAMES.get(georef.get("source_used") or "", "?")
    detail = f"{argument} is positioned by {source}" + (
        f" (GDAL_GEOREF_SOURCES={chosen})" if chosen else f"; {len(readings)} reading(s), none disagreeing"
    )
    return Check("x-mapsmith:georeferencing_unambiguous", True, detail, argument=argument)


def require_projected_grid(info: DatasetInfo, argument: str, operation: str) -> Check:
    """A raster whose cells are degrees cannot feed an operation that needs metres (slope, distance,
    flow): refused before the engine, with the reprojection to do first."""
    if info.crs_is_geographic:
        res = (info.grid or {}).get("res") or [None, None]
        raise CRSError(
            f"{operation} needs cells measured in metres; {argument} ({info.path}) is in {info.crs_label}, whose "
            f"cells are {res[0]:g} x {res[1]:g} degrees, and a degree is not a metre"
            if res[0] is not None
            else f"{operation} needs a projected CRS; {argument} ({info.path}) is in {info.crs_label}",
            code="RASTER_GEOGRAPHIC_CRS",
            evidence={"argument": argument, "path": info.path, "crs": info.crs_label, "cell_size": res},
            hint="reproject_raster to a projected CRS first (the UTM zone of the data, EPSG:326xx or 327xx), "
            "choosing the resampling method (bilinear for elevation)",
        )
    return Check("x-mapsmith:projected_grid", True, f"{argument} is in {info.crs_label}", argument=argument)


def require_geometry_types(
    info: DatasetInfo, dataset: DatasetArgument, operation: str, argument: str | None = None
) -> Check | None:
    argument = argument or dataset.name
    if dataset.geometry_types is None:
        return None
    present = set(info.geometry_families) - {"unknown"}
    refused = sorted(present - set(dataset.geometry_types))
    if refused:
        raise GeometryTypeRefused(
            f"{operation} accepts {', '.join(dataset.geometry_types)} geometries in {argument}; "
            f"{info.path} holds {', '.join(refused)} ({', '.join(info.geometry_types)})",
            evidence={
                "argument": argument,
                "path": info.path,
                "geometry_types": list(info.geometry_types),
                "accepted": list(dataset.geometry_types),
            },
            hint=_geometry_hint(operation, refused),
        )
    return Check(
        "x-mapsmith:input_geometry_types",
        True,
        f"{argument} holds {', '.join(sorted(present)) or 'no geometries'}; accepted: "
        f"{', '.join(dataset.geometry_types)}",
        argument=argument,
    )


def _geometry_hint(operation: str, refused: list[str]) -> str:
    if operation == "measure_area":
        return "area is defined for polygons only; measure lines with measure_length, or buffer points first"
    if operation == "measure_length":
        return (
            "length is defined for lines only; a polygon's perimeter is another question (no operation measures "
            "it yet), and points have no length"
        )
    if operation == "zonal_statistics":
        return (
            "zonal statistics weight each raster cell by the fraction of it a polygon covers; a line covers no area "
            "(its length is not a pixel count) and a point none: buffer_layer the features into polygons first "
            "(half a cell width takes the cells along a line), or sample_raster_at_points for points"
        )
    return "select the features of an accepted type first (or split the layer by geometry type)"


def input_not_empty(info: DatasetInfo, argument: str) -> tuple[Check, RunWarning | None]:
    if info.kind == "raster" and info.grid is not None:
        cells = int(info.grid["width"]) * int(info.grid["height"])
        return Check(
            "input_not_empty", cells > 0, f"{argument} has {cells} cells", critical=False, argument=argument
        ), None
    empty = info.feature_count == 0
    check = Check(
        "input_not_empty",
        not empty,
        f"{argument} has {info.feature_count} features",
        critical=False,
        argument=argument,
    )
    warning = (
        RunWarning(
            "INPUT_EMPTY",
            f"{argument} ({info.path}) has no features; the result will be empty",
            "check the layer name and any filter that produced this input",
        )
        if empty
        else None
    )
    return check, warning


def inputs_may_intersect(
    first: DatasetInfo,
    second: DatasetInfo,
    arg1: str,
    arg2: str,
    *,
    needed: bool = True,
    operation: str = "this operation",
) -> tuple[Check, RunWarning | None]:
    """Whether two inputs' extents meet. ``needed=False`` (the contract's ``needs_overlapping_inputs``)
    is for an operation whose answer does not depend on overlap (a nearest search): the extents are
    still recorded, but inputs lying apart pass and raise no warning, since nothing will be empty."""
    a, b = first.bounds_lonlat, second.bounds_lonlat
    if a is None or b is None:
        return Check("inputs_may_intersect", True, "extent unknown for one input; not compared", critical=False), None
    overlap = a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]
    detail = f"{arg1} lon/lat extent {_fmt_bounds(a)} and {arg2} extent {_fmt_bounds(b)} " + (
        "overlap" if overlap else "do not overlap"
    )
    if not needed:
        detail += f"; {operation} does not need them to (its contract: needs_overlapping_inputs = false)"
        return Check("inputs_may_intersect", True, detail, critical=False), None
    check = Check("inputs_may_intersect", overlap, detail, critical=False)
    warning = (
        None
        if overlap
        else RunWarning(
            "EXTENTS_DO_NOT_OVERLAP",
            f"{arg1} and {arg2} do not overlap ({detail}); the result will be empty",
            "check that both inputs cover the same area and that their CRS are declared correctly",
        )
    )
    return check, warning


def inputs_share_crs(first: DatasetInfo, second: DatasetInfo, arg1: str, arg2: str, same: bool) -> Check:
    return Check(
        "inputs_share_crs",
        same,
        f"{arg1} is {first.crs_label}, {arg2} is {second.crs_label}"
        + ("" if same else "; one is transformed to the other's CRS (which way is recorded in crs_decisions)"),
        critical=False,
    )


def _fmt_bounds(b: tuple[float, float, float, float]) -> str:
    return "(" + ", ".join(f"{v:.6f}" for v in b) + ")"


# -- output checks ----------------------------------------------------------------------------


def output_checks(
    contract: OperationContract,
    out: DatasetInfo,
    *,
    expected_crs_label: str | None,
    crs_equal: bool | None,
    input_count: int | None,
    input_families: frozenset[str],
) -> list[Check]:
    """The checks the contract promises, evaluated on the written output."""
    checks: list[Check] = []
    wanted = set(contract.checks)
    if "crs_present" in wanted:
        checks.append(Check("crs_present", out.crs_wkt is not None, f"output declares {out.crs_label}"))
    if "crs_matches" in wanted:
        checks.append(
            Check(
                "crs_matches",
                bool(crs_equal),
                f"expected {expected_crs_label}, got {out.crs_label}",
            )
        )
    if "geometry_valid" in wanted:
        n = out.invalid_count
        checks.append(Check("geometry_valid", n == 0, f"{n} of {out.feature_count} output geometries are invalid"))
    if input_count is not None and contract.output_feature_count == "equal" and "feature_count_exact" in wanted:
        checks.append(
            Check(
                "feature_count_exact",
                out.feature_count == input_count,
                f"expected {input_count} features (one per input feature), got {out.feature_count}",
            )
        )
    if input_count is not None and contract.output_feature_count == "at_most" and "feature_count_bounded" in wanted:
        checks.append(
            Check(
                "feature_count_bounded",
                out.feature_count is not None and out.feature_count <= input_count,
                f"expected at most {input_count} features (the input count), got {out.feature_count}",
            )
        )
    if "geometry_types" in wanted:
        allowed = set(contract.output_geometry_types)
        if "same" in allowed:
            allowed = (allowed - {"same"}) | set(input_families)
        present = set(out.geometry_families)
        ok = present <= allowed
        checks.append(
            Check(
                "geometry_types",
                ok,
                f"output holds {', '.join(sorted(present)) or 'no geometries'}; allowed: {', '.join(sorted(allowed))}",
            )
        )
    if "result_not_empty" in wanted:
        checks.append(
            Check(
                "result_not_empty",
                (out.feature_count or 0) > 0,
                f"output has {out.feature_count} features",
                critical=False,
                hint=None if (out.feature_count or 0) > 0 else "an empty result: check the inputs overlap",
            )
        )
    return checks


def raster_output_checks(
    contract: OperationContract,
    out: DatasetInfo,
    expected: dict[str, Any] | None,
    *,
    expected_crs_label: str | None,
    crs_equal: bool | None,
    input_grid: Any | None,
) -> list[Check]:
    """A written raster compared with the grid its implementation meant to write.

    ``expected`` holds ``width``, ``height``, ``transform`` (GDAL order), ``nodata`` and optionally
    ``value_range`` ([low, high], either may be None). ``out.grid`` carries the statistics read back
    from the file. The grid check is always made: a raster whose size or position is not the one the
    operation computed is wrong whatever the contract lists.
    """
    checks: list[Check] = []
    wanted = set(contract.checks)
    grid = dict(out.grid or {})
    if "crs_present" in wanted:
        checks.append(Check("crs_present", out.crs_wkt is not None, f"output declares {out.crs_label}"))
    if "crs_matches" in wanted:
        checks.append(Check("crs_matches", bool(crs_equal), f"expected {expected_crs_label}, got {out.crs_label}"))
    if expected is not None:
        got = (grid.get("width"), grid.get("height"))
        want = (expected["width"], expected["height"])
        transform_ok = all(
            abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
            for a, b in zip(grid.get("transform", ()), expected["transform"], strict=True)
        )
        checks.append(
            Check(
                "x-mapsmith:grid_matches",
                got == want and transform_ok,
                f"written {got[0]} x {got[1]} cells, transform {list(grid.get('transform', ()))}; "
                f"computed {want[0]} x {want[1]}, transform {list(expected['transform'])}",
            )
        )
        if "nodata" in expected:
            checks.append(
                Check(
                    "x-mapsmith:nodata_declared",
                    _same_nodata(grid.get("nodata"), expected["nodata"]),
                    f"written nodata {grid.get('nodata')}, meant {expected['nodata']}",
                )
            )
    if "shape_preserved" in wanted and input_grid is not None:
        same = (grid.get("width"), grid.get("height")) == (input_grid["width"], input_grid["height"])
        checks.append(
            Check(
                "shape_preserved",
                same,
                f"input {input_grid['width']} x {input_grid['height']}, "
                f"output {grid.get('width')} x {grid.get('height')}",
            )
        )
    stats = grid.get("statistics") or []
    valid = sum(int(b.get("valid_count") or 0) for b in stats)
    if "values_in_expected_range" in wanted and expected is not None and expected.get("value_range") is not None:
        low, high = expected["value_range"]
        bad = [
            b
            for b in stats
            if b.get("valid_count")
            and ((low is not None and b["min"] < low - 1e-9) or (high is not None and b["max"] > high + 1e-9))
        ]
        span = ", ".join(f"band {b['band']}: {b.get('min')}..{b.get('max')}" for b in stats)
        checks.append(
            Check(
                "values_in_expected_range",
                not bad,
                f"values {span}; guaranteed range {low if low is not None else '-inf'}.."
                f"{high if high is not None else 'inf'}",
            )
        )
    if "result_not_empty" in wanted:
        checks.append(
            Check(
                "result_not_empty",
                valid > 0,
                f"output has {valid} valid cells",
                critical=False,
                hint=None if valid else "every cell is nodata: check the inputs overlap and the nodata value",
            )
        )
    return checks


def _same_nodata(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = float(a), float(b)
    return (a != a and b != b) or a == b
