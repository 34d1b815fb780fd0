"""Keep derived fields true of the geometry written: the opensource half of ``mapsmith.derived_fields``.

Two entry points. ``measurable`` is for an operation about to derive values from its input (measure_area,
measure_length ...): invalid geometries are made valid in memory first, disclosed in ``repairs[]`` with
each feature's area or length before and after, so the values, the answer and the written geometry all
describe the same valid geometry. ``refresh`` runs inside ``common.write_output`` on every frame written,
so every GeoPandas operation obeys the rule without knowing it: a measure an earlier MapSmith run wrote
and this run's reshaping made stale is taken again on the geometry written (invalid geometries made valid
first, disclosed), or dropped and said so when it cannot be (a distance, a count, an area on a line); and
a value of the run's own taken of an invalid geometry refuses the run, since the answer built from it
cannot be mended here (the operation should have called ``measurable``).

Measures are taken the way measure_area and measure_length take them (geodesic on the layer's
ellipsoid through ``common.geodesic_areas`` and ``measures.geodesic_measures``; planar areas in the CRS
they were measured in), never written here by other rules. This module must never write a file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.derived_fields import DerivedField, DerivedPlan
from mapsmith.errors import VerificationFailed
from mapsmith_opensource.io import make_valid_keeping_dimension

if TYPE_CHECKING:
    from collections.abc import Iterable

    import geopandas as gpd

    from mapsmith.runner import RunContext

SHOWN = 10  # features listed in a repair's evidence


def measurable(ctx: RunContext, frame: gpd.GeoDataFrame, key: str = "input_path") -> gpd.GeoDataFrame:
    """``frame`` with its invalid geometries made valid (dimension kept), disclosed in ``repairs[]`` with each
    changed feature's planar area (polygons) or length (lines) in the layer's units before and after.

    For an operation that derives values from geometry: call it on the input before measuring, so the value
    taken is the value of the geometry written (a bow-tie's ring encloses 0 by the shoelace formula; the two
    triangles make_valid writes enclose their sum).
    """
    import numpy as np
    import shapely

    geoms = frame.geometry.values
    invalid = ~shapely.is_valid(geoms) & ~shapely.is_missing(geoms)
    rows = np.flatnonzero(invalid)
    if not len(rows):
        return frame
    kept, dropped = make_valid_keeping_dimension(geoms[invalid])
    values = geoms.copy()
    values[invalid] = kept
    out = frame.set_geometry(values, crs=frame.crs)
    plan: DerivedPlan | None = getattr(ctx, "derived", None)
    if plan is not None and plan.repaired_inputs is not None:
        plan.repaired_inputs.add(key)
    dims = shapely.get_dimensions(geoms[invalid])
    changes = []
    for n, i in enumerate(rows[:SHOWN]):
        size = shapely.area if dims[n] == 2 else shapely.length
        changes.append(
            {
                "feature_index": int(i),
                "reason": str(shapely.is_valid_reason(geoms[i])),
                "measure": "area" if dims[n] == 2 else "length",
                "before": float(size(geoms[i])),
                "after": float(size(values[i])),
            }
        )
    listed = "; ".join(
        f"feature {c['feature_index']}: {c['measure']} {c['before']:g} -> {c['after']:g}" for c in changes
    )
    ctx.input_repairs.append(
        {
            "check": "geometry_valid",
            "action": f"{key}: {len(rows)} invalid geometries made valid (shapely.make_valid, dimension kept) before "
            f"they were measured, so the values describe the geometry written (planar, in the layer's units: {listed})",
            "resolved": True,
            "x-mapsmith:report": {
                "action": "shapely.make_valid",
                "argument": key,
                "invalid_before": int(len(rows)),
                "lower_dimension_parts_dropped": dropped,
                "changes": changes,
            },
        }
    )
    return out


def measure(frame: gpd.GeoDataFrame, field: DerivedField) -> list[float | None]:
    """The measure ``field`` names, taken of each geometry of ``frame`` (None where there is none)."""
    import shapely

    from mapsmith_opensource.common import geodesic_areas

    geoms = frame.geometry.values
    absent = shapely.is_missing(geoms) | shapely.is_empty(geoms)
    if field.measure == "area" and field.method == "geodesic":
        values: list[float | None] = [float(v) for v in geodesic_areas(frame)]
    elif field.measure == "area":  # planar, in the CRS it was measured in (checked by the caller)
        from mapsmith.crs import linear_unit_metres

        unit = linear_unit_metres(frame.crs)
        values = [float(v) * unit * unit for v in shapely.area(geoms)]
    else:
        from mapsmith_opensource.measures import geodesic_measures

        values = list(geodesic_measures(frame)[0])
    return [None if absent[i] else v for i, v in enumerate(values)]


def _can_measure_again(frame: gpd.GeoDataFrame, field: DerivedField, dims: set[int]) -> bool:
    if not field.recomputable:
        return False
    if field.measure == "area" and dims != {2}:
        return False
    if field.measure == "length" and dims != {1}:
        return False
    if field.method == "planar":
        from mapsmith.crs import crs_label

        return frame.crs is not None and not frame.crs.is_geographic and crs_label(frame.crs) == field.crs
    return True


def _present(plan: DerivedPlan, names: Iterable[str]) -> tuple[list[DerivedField], dict[str, str]] | None:
    """The plan's derived fields among ``names`` and its actions (started if none), the plan marked refreshed; None
    when no derived field is written."""
    present = plan.in_output(names)
    plan.refreshed = True
    if not present:
        return None
    actions = plan.actions if plan.actions is not None else {}
    plan.actions = actions
    return present, actions


def _keep(actions: dict[str, str], field: DerivedField) -> None:
    """A field true of the geometries written: this run's own is written, an input's kept."""
    actions.setdefault(field.name, "written" if field.own else "kept")


def record_unchanged(ctx: RunContext, names: Iterable[str]) -> None:
    """What ``refresh`` records for a layer written without a frame (nearest_join's columns path): its geometries as
    read, every one valid, and no derived field stale (the caller's conditions); ``names``: the fields written."""
    plan: DerivedPlan | None = getattr(ctx, "derived", None)
    if plan is None or not plan.fields:
        return
    found = _present(plan, names)
    if found is not None:
        present, actions = found
        for field in present:
            _keep(actions, field)


def refresh(ctx: RunContext, frame: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """The frame with every derived field true of its geometry; see the module docstring."""
    import numpy as np
    import shapely

    plan: DerivedPlan | None = getattr(ctx, "derived", None)
    if plan is None or not plan.fields:
        return frame
    found = _present(plan, frame.columns)
    if found is None:
        return frame
    present, actions = found
    geoms = frame.geometry.values
    invalid = ~shapely.is_valid(geoms) & ~shapely.is_missing(geoms)
    out = frame
    repaired_rows = np.flatnonzero(invalid)
    if len(repaired_rows):
        blocked = [f for f in present if f.own]
        if blocked:
            raise _refusal(ctx, frame, blocked, repaired_rows)
        kept, dropped = make_valid_keeping_dimension(geoms[invalid])
        values = geoms.copy()
        values[invalid] = kept
        out = frame.copy()
        out = out.set_geometry(values, crs=frame.crs)
    dims = set(np.unique(shapely.get_dimensions(out.geometry.values[~shapely.is_empty(out.geometry.values)])).tolist())
    for field in present:
        if not field.stale:
            _keep(actions, field)
            continue
        if out is frame:
            out = frame.copy()
        if _can_measure_again(out, field, dims):
            before = out[field.name].tolist()
            after = measure(out, field)
            out[field.name] = after
            actions[field.name] = "recomputed"
            if len(repaired_rows):
                _disclose_repair(ctx, field, repaired_rows, before, after, dropped)
            if field.stale:
                ctx.notes.append(
                    f"{field.name} was written by {field.written_by} for the input geometries; {ctx.contract.name} "
                    f"changed them, so it was measured again ({field.measure}, {field.method}) on the geometries "
                    "written"
                )
        else:
            out = out.drop(columns=[field.name])
            actions[field.name] = "dropped"
            ctx.warn(
                "DERIVED_FIELD_DROPPED",
                f"{field.name} ({field.measure}, written by {field.written_by}) described the input geometries; "
                f"{ctx.contract.name} changed them and this {field.measure} cannot be taken again here, so the field "
                "was dropped rather than carried with values that no longer hold",
                f"run {field.written_by} again on this output to add it back",
            )
    return out


def _disclose_repair(
    ctx: RunContext,
    field: DerivedField,
    rows: Any,
    before: list[Any],
    after: list[float | None],
    dropped: int,
) -> None:
    changes = [{"feature_index": int(i), "before": before[int(i)], "after": after[int(i)]} for i in rows[:SHOWN]]
    listed = "; ".join(f"feature {c['feature_index']}: {c['before']} -> {c['after']}" for c in changes)
    ctx.input_repairs.append(
        {
            "check": "geometry_valid",
            "action": f"{len(rows)} invalid geometries made valid (shapely.make_valid, dimension kept) before "
            f"{field.name} was measured, so it describes the geometry written ({listed})",
            "resolved": True,
            "x-mapsmith:report": {
                "action": "shapely.make_valid",
                "field": field.name,
                "invalid_before": int(len(rows)),
                "lower_dimension_parts_dropped": dropped,
                "changes": changes,
            },
        }
    )


def _refusal(ctx: RunContext, frame: gpd.GeoDataFrame, fields: list[DerivedField], rows: Any) -> VerificationFailed:
    names = [f.name for f in fields]
    shown = [int(i) for i in rows[:SHOWN]]
    return VerificationFailed(
        f"{ctx.contract.name}: {', '.join(names)} was derived from {len(rows)} invalid geometries (first feature "
        f"indices {shown}); repairing them would change the geometry after the value (and any answer built from "
        "it) was taken, so the run is refused rather than written with values of another geometry",
        code="MEASURED_GEOMETRY_INVALID",
        evidence={
            "fields": names,
            "invalid_count": int(len(rows)),
            "first_rows": shown,
            "values": {n: frame[n].iloc[shown].tolist() for n in names},
        },
        hint="run repair_geometries on the input first (it reports what it changes), then this operation on its output",
    )
