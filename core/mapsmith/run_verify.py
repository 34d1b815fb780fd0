"""The checks of a run's output, after the engine wrote it: read back (a header, and a validity scan unless the
writer counted it: RunContext.output_stats), compared with the contract's checks and the main input, repaired in
at most MAX_REPAIR_ROUNDS rounds of make_valid where geometries are invalid, and the derived fields held to the
geometry written. Split from runner along the seam between running an operation and checking what it wrote.

What this module must never do: pass an output whose checks it did not run, or swap in a repaired file before it
is complete.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from mapsmith import derived_fields, verify

if TYPE_CHECKING:
    from pathlib import Path

    from mapsmith.registry import DatasetInfo, DatasetIO
    from mapsmith.runner import RunContext

MAX_REPAIR_ROUNDS = 2
__all__ = [
    "MAX_REPAIR_ROUNDS",
    "check_derived",
    "crs_equal",
    "label",
    "main_input",
    "verify_and_repair",
    "verify_raster",
]


def crs_equal(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    from pyproj import CRS

    return CRS.from_user_input(a).equals(CRS.from_user_input(b), ignore_axis_order=True)


def main_input(ctx: RunContext) -> DatasetInfo | None:
    """The input an output is compared with: input_path, else the first of a list (input_paths[0])."""
    return ctx.inputs.get("input_path") or next(
        (info for slot, info in ctx.inputs.items() if info.kind != "table" and slot.endswith("[0]")), None
    )


def verify_raster(ctx: RunContext, io: DatasetIO, temp: Path) -> DatasetInfo:
    """A raster is read back whole (header and per-band statistics) and compared with the grid the
    implementation meant to write; there is no geometry to repair."""
    main = main_input(ctx)
    out = io.inspect(temp, None, validity=True)
    if ctx.contract.crs_effect == "transforms":
        expected = ctx.expected_output_crs
    else:
        expected = main.crs_wkt if main else None
    ctx.checks.extend(
        verify.raster_output_checks(
            ctx.contract,
            out,
            ctx.expected_grid,
            expected_crs_label=label(expected),
            crs_equal=crs_equal(expected, out.crs_wkt) if expected else out.crs_wkt is not None,
            input_grid=main.grid if main is not None and main.kind == "raster" else None,
        )
    )
    return out


def verify_and_repair(
    ctx: RunContext, io: DatasetIO, temp: Path, leftovers: list[Path]
) -> tuple[Path, list[dict[str, Any]], DatasetInfo]:
    contract = ctx.contract
    main = main_input(ctx)
    expected = ctx.expected_output_crs if contract.crs_effect == "transforms" else (main.crs_wkt if main else None)
    expected_label = label(expected)
    repairs: list[dict[str, Any]] = []
    current = temp
    wants_validity = "geometry_valid" in contract.checks
    for round_no in range(MAX_REPAIR_ROUNDS + 1):
        # The header is always read back from the written file (count, CRS, declared types). The
        # validity scan is taken from the engine's own frame when the writer reported it for a
        # lossless format (see OutputStats): re-reading a million polygons would double the run.
        stats = ctx.output_stats if round_no == 0 else None
        out = io.inspect(current, None, validity=wants_validity and stats is None)
        if stats is not None:
            out = dataclasses.replace(
                out,
                invalid_count=stats.invalid_count,
                geometry_types=stats.geometry_types if stats.feature_count else out.geometry_types,
            )
        checks = verify.output_checks(
            contract,
            out,
            expected_crs_label=expected_label,
            crs_equal=crs_equal(expected, out.crs_wkt) if expected else out.crs_wkt is not None,
            input_count=main.feature_count if main else None,
            input_families=main.geometry_families if main else frozenset(),
        )
        if round_no == 0 and ctx.derived is not None:
            check_derived(ctx, ctx.derived, out)
        invalid = next((c for c in checks if c.name == "geometry_valid" and not c.passed), None)
        if invalid is None or round_no == MAX_REPAIR_ROUNDS:
            break
        if ctx.derived is not None:
            derived_fields.refuse_repair(ctx.derived, contract.name, out.fields, out.invalid_count or 0)
        repaired = current.with_name(f"{current.stem}.repair{round_no + 1}{current.suffix}")
        leftovers.append(repaired)
        report = io.repair_geometries(current, repaired, None)
        after = io.inspect(repaired, None, validity=True)
        repairs.append(
            {
                "check": "geometry_valid",
                "action": f"round {round_no + 1}: {report.get('action', 'make_valid')} on {out.invalid_count} "
                f"invalid geometries ({invalid.detail})",
                "resolved": after.invalid_count == 0,
                "x-mapsmith:report": report,
            }
        )
        current = repaired  # swapped in only now that the repaired file is complete
    ctx.checks.extend(checks)
    if ctx.derived is not None:
        recorded = derived_fields.manifest_record(ctx.derived, out.fields, out.geometry_families)
        if recorded:
            ctx.parameters["x-mapsmith:derived_fields"] = recorded
    return current, repairs, out


def check_derived(ctx: RunContext, plan: derived_fields.DerivedPlan, out: DatasetInfo) -> None:
    """Refuse stale derived fields no engine measured again; warn about measure-like fields carried."""
    derived_fields.check_written(plan, ctx.contract.name, out.fields)
    input_fields = [name for info in ctx.inputs.values() if info.kind == "vector" for name in info.fields]
    warning = derived_fields.carried_measure_warning(plan, ctx.contract.name, out.fields, input_fields)
    if warning is not None:
        ctx.warnings.append(warning)


def label(wkt: str | None) -> str | None:
    if wkt is None:
        return None
    from mapsmith.crs import crs_label

    return crs_label(wkt)
