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
    return "select the features of an accepted type first (or split the layer by geometry type)"


def input_not_empty(info: DatasetInfo, argument: str) -> tuple[Check, RunWarning | None]:
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
    first: DatasetInfo, second: DatasetInfo, arg1: str, arg2: str
) -> tuple[Check, RunWarning | None]:
    a, b = first.bounds_lonlat, second.bounds_lonlat
    if a is None or b is None:
        return Check("inputs_may_intersect", True, "extent unknown for one input; not compared", critical=False), None
    overlap = a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]
    detail = f"{arg1} lon/lat extent {_fmt_bounds(a)} and {arg2} extent {_fmt_bounds(b)} " + (
        "overlap" if overlap else "do not overlap"
    )
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
        + ("" if same else f"; {arg2} is transformed to {arg1}'s CRS (recorded in crs_decisions)"),
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
