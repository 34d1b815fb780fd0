"""MapSmith's operations on the esri stack: each one an ArcPy tool (or two), declared in a table.

Each row names the tools, the licence level and extensions they need (from Esri's tool reference
pages, "Licensing information"), whether they need an online service, and how the contract's
arguments become the tool's parameters. The router asks ``requirement`` before anything starts, so
``licence_tier`` and ``online_only`` are answered from this table and the detected licence; an
operation not in the table is ``missing`` on this stack.

ArcPy writes into a scratch file geodatabase; MapSmith reads that back and writes the requested
format itself, dropping only the bookkeeping fields the tool adds (named per row, listed in the
manifest). Never imports arcpy.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError
from mapsmith.registry import Unavailable

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

ENGINE = "arcpy"
ENGINE_NAME = "arcgis-pro"
LEVEL_RANK = {"Basic": 1, "Standard": 2, "Advanced": 3}
# Formats ArcGIS Pro reads as feature classes without a conversion tool.
READABLE_SUFFIXES = (".gpkg", ".shp", ".gdb")
# File geodatabase feature classes carry these; they are not the operation's fields.
GDB_FIELDS = ("Shape_Length", "Shape_Area")
FALLBACK_HINT = (
    "run it with MAPSMITH_STACK=opensource, or start the server with MAPSMITH_FALLBACK_STACK=opensource "
    "to allow a disclosed substitute"
)

Build = Callable[["RunContext"], list[dict[str, Any]]]


@dataclass(frozen=True)
class Mapped:
    """One MapSmith operation, the ArcPy tools that carry it out and what they need."""

    operation: str
    tools: tuple[str, ...]
    level: str  # the lowest ArcGIS Pro licence level that includes every tool
    build: Build  # the worker's steps for this run
    how: str  # one line for docs/stacks.md
    extensions: tuple[str, ...] = ()
    online: bool = False  # needs ArcGIS Online or another service
    added_fields: tuple[str, ...] = ()  # fields the tool adds that the contract does not write
    validate: Callable[[RunContext], None] | None = None
    finish: Callable[[RunContext, Any], Any] | None = None  # adjusts the frame read back, before writing
    notes: tuple[str, ...] = field(default_factory=tuple)


def _ds(slot: str) -> dict[str, str]:
    return {"$dataset": slot}


def _out() -> dict[str, str]:
    return {"$scratch": "out"}


def _crs_value(crs: Any) -> dict[str, Any]:
    authority = crs.to_authority()
    wkid = int(authority[1]) if authority and authority[0] in ("EPSG", "ESRI") else None
    return {"$crs": {"wkid": wkid, "wkt": crs.to_wkt("WKT1_ESRI")}}


def _refuse(operation: str, argument: str, why: str, hint: str) -> ArgumentError:
    return ArgumentError(
        f"the esri stack's {operation} cannot honour {argument}: {why}",
        code="ESRI_UNMAPPED_ARGUMENT",
        evidence={"operation": operation, "argument": argument, "stack": "esri"},
        hint=hint,
    )


# -- the rows ------------------------------------------------------------------------------------


def _buffer(ctx: RunContext) -> list[dict[str, Any]]:
    from mapsmith.crs import crs_label, parse_crs
    from mapsmith_opensource.common import MAX_SCALE_DISTORTION, scale_distortion

    info = ctx.inputs["input_path"]
    crs = parse_crs(info.crs_wkt)
    distortion = None if crs.is_geographic else scale_distortion(crs, info.bounds_lonlat)
    planar = not crs.is_geographic and (distortion is None or distortion <= MAX_SCALE_DISTORTION)
    method = "PLANAR" if planar else "GEODESIC"
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs),
            "reason": (
                f"{crs_label(crs)} is projected with a scale within {MAX_SCALE_DISTORTION:.0%} of true at the data, "
                "so ArcGIS buffered in it (method PLANAR), the distance given in Meters"
                if planar
                else f"{crs_label(crs)} is "
                + ("geographic" if crs.is_geographic else f"distorted by {distortion:.1%} at the data")
                + ", so ArcGIS buffered on the ellipsoid (method GEODESIC), the distance given in Meters"
            ),
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    ctx.notes.append(
        "segments_per_quarter_circle is not an ArcGIS Buffer parameter: ArcGIS writes true curves, densified "
        "when read back, so the vertex count is ArcGIS's own"
    )
    distance = float(ctx.arguments["distance_meters"])
    return [
        {
            "tool": "analysis.Buffer",
            "parameters": {
                "in_features": _ds("input_path"),
                "out_feature_class": _out(),
                "buffer_distance_or_field": f"{distance!r} Meters",
                "line_side": "FULL",
                "line_end_type": "ROUND",
                "dissolve_option": "NONE",
                "method": method,
            },
        }
    ]


def _clip(ctx: RunContext) -> list[dict[str, Any]]:
    from mapsmith.crs import crs_label, parse_crs

    source, mask = ctx.inputs["input_path"], ctx.inputs["mask_path"]
    reason = "clipped in input_path's CRS (ArcGIS writes the input's coordinate system)"
    if source.crs_wkt and mask.crs_wkt and not parse_crs(source.crs_wkt).equals(parse_crs(mask.crs_wkt)):
        reason += "; ArcGIS projected the mask on the fly with its default transformation"
    ctx.crs_decisions.update({"analysis_crs": crs_label(parse_crs(source.crs_wkt)), "reason": reason})
    return [
        {
            "tool": "analysis.Clip",
            "parameters": {
                "in_features": _ds("input_path"),
                "clip_features": _ds("mask_path"),
                "out_feature_class": _out(),
            },
        }
    ]


def _dissolve_validate(ctx: RunContext) -> None:
    if (ctx.arguments.get("aggregations") or "").strip():
        raise _refuse(
            "dissolve_layer",
            "aggregations",
            "ArcGIS Dissolve names its statistics fields SUM_<field> etc.; the mapping to the contract's names "
            "is not built yet",
            f"leave out aggregations, or {FALLBACK_HINT}",
        )


def _by_fields(ctx: RunContext) -> list[str]:
    from mapsmith_opensource.overlay_ops import _parse_by_fields

    return list(_parse_by_fields(ctx.arguments.get("by_fields")))


def _dissolve(ctx: RunContext) -> list[dict[str, Any]]:
    import pyogrio

    from mapsmith.errors import InputError

    keys = _by_fields(ctx)
    if keys and ctx.arguments["null_keys"] == "refuse":
        present = [k for k in keys if k in ctx.inputs["input_path"].fields]
        table = pyogrio.read_dataframe(ctx.paths["input_path"], layer=ctx.layers.get("input_path"), read_geometry=False)
        nulls = int(table[present].isna().any(axis=1).sum()) if present else 0
        if nulls:
            raise InputError(
                f"{nulls} features have a null key and null_keys is 'refuse'",
                code="NULL_GROUP_KEY",
                evidence={"null_key_features": nulls},
                hint="fill the null keys first, or pass null_keys='group'",
            )
    dropped = [f for f in ctx.inputs["input_path"].fields if f not in keys]
    ctx.parameters["x-mapsmith:fields_dropped"] = dropped
    return [
        {
            "tool": "management.Dissolve",
            "parameters": {
                "in_features": _ds("input_path"),
                "out_feature_class": _out(),
                "dissolve_field": keys,
                "statistics_fields": [],
                "multi_part": "MULTI_PART",
            },
        }
    ]


def _reproject(ctx: RunContext) -> list[dict[str, Any]]:
    from mapsmith.crs import choose_transformer, crs_label, parse_crs

    info = ctx.inputs["input_path"]
    source, target = parse_crs(info.crs_wkt), parse_crs(ctx.arguments["target_crs"])
    _, record = choose_transformer(source, target, info.bounds_lonlat)
    ctx.expected_output_crs = target.to_wkt()
    ctx.parameters["target_crs"] = crs_label(target)
    same_datum = source.datum is not None and target.datum is not None and source.datum == target.datum
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(target),
            "reason": f"reprojection requested from {crs_label(source)} to {crs_label(target)} by ArcGIS Project; "
            + (
                "both share one datum, so no geographic transformation was needed"
                if same_datum
                else "the datums differ: ArcGIS applied its own default geographic transformation, not the PROJ "
                "operation recorded here for comparison"
            ),
            "source_crs": crs_label(source),
            "target_crs": crs_label(target),
            "transformation": record,
        }
    )
    if not same_datum:
        ctx.warn(
            "ESRI_OWN_TRANSFORMATION",
            "ArcGIS chose the datum transformation itself; coordinates may differ from the opensource stack's",
            "compare with the PROJ operation in crs_decisions, or reproject on the opensource stack",
        )
    return [
        {
            "tool": "management.Project",
            "parameters": {
                "in_dataset": _ds("input_path"),
                "out_dataset": _out(),
                "out_coor_system": _crs_value(target),
            },
        }
    ]


def _measure_validate(ctx: RunContext) -> None:
    if ctx.arguments.get("output_field", "area_m2") != "area_m2" or ctx.arguments.get("overwrite_field"):
        # The ArcPy steps write area_m2 and never replace a field: say so rather than ignore the arguments
        raise _refuse(
            "measure_area",
            "output_field/overwrite_field",
            "writing another field, or replacing one, is not mapped to ArcGIS yet",
            f"omit them, or {FALLBACK_HINT}",
        )
    if ctx.arguments["method"] != "geodesic":
        raise _refuse(
            "measure_area",
            "method='planar'",
            "the planar scale error the contract records at the data is not mapped to ArcGIS yet",
            f"use method='geodesic' (the default), or {FALLBACK_HINT}",
        )
    if "area_m2" in ctx.inputs["input_path"].fields:
        from mapsmith.errors import InputError

        raise InputError(
            "the input already has a field 'area_m2'; MapSmith will not overwrite it",
            code="FIELD_EXISTS",
            evidence={"field": "area_m2", "path": ctx.arguments["input_path"]},
            hint="rename or drop the existing area_m2 field first",
        )


def _measure(ctx: RunContext) -> list[dict[str, Any]]:
    from mapsmith.crs import crs_label, parse_crs

    crs = parse_crs(ctx.inputs["input_path"].crs_wkt)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
            "reason": "geodesic area on the ellipsoid of the layer's datum, by ArcGIS (AREA_GEODESIC)",
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    return [
        {
            "tool": "management.CopyFeatures",
            "parameters": {"in_features": _ds("input_path"), "out_feature_class": _out()},
        },
        {
            "tool": "management.CalculateGeometryAttributes",
            "parameters": {
                "in_features": _out(),
                "geometry_property": [["area_m2", "AREA_GEODESIC"]],
                "area_unit": "SQUARE_METERS",
            },
        },
    ]


def _measure_finish(ctx: RunContext, frame: Any) -> Any:
    areas = [float(a) for a in frame["area_m2"]]
    ctx.answer = {"total_area_m2": sum(areas), "feature_count": len(areas), "method": "geodesic"}
    ctx.check("x-mapsmith:areas_non_negative", all(a >= 0 for a in areas), f"{len(areas)} areas")
    return frame


MATCH_OPTIONS = {
    "intersects": "INTERSECT",
    "within": "WITHIN",
    "contains": "CONTAINS",
    "touches": "BOUNDARY_TOUCHES",
    "within_distance": "WITHIN_A_DISTANCE_GEODESIC",
}


def _join_validate(ctx: RunContext) -> None:
    predicate = ctx.arguments["predicate"]
    if predicate not in MATCH_OPTIONS:
        raise _refuse(
            "spatial_join",
            f"predicate={predicate!r}",
            "ArcGIS's match options have no exact equivalent (CROSSED_BY_THE_OUTLINE_OF is not 'crosses', and "
            "there is no 'overlaps')",
            f"use one of {', '.join(MATCH_OPTIONS)}, or {FALLBACK_HINT}",
        )
    distance = ctx.arguments.get("distance_meters")
    if (predicate == "within_distance") != (distance is not None):
        raise ArgumentError(
            "distance_meters is required with predicate within_distance and refused with any other",
            code="INVALID_ARGUMENT",
            evidence={"predicate": predicate, "distance_meters": distance},
            hint="pass distance_meters only with predicate='within_distance'",
        )


def _join(ctx: RunContext) -> list[dict[str, Any]]:
    from mapsmith.crs import crs_label, parse_crs

    predicate = ctx.arguments["predicate"]
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(parse_crs(ctx.inputs["input_path"].crs_wkt)),
            "reason": "joined in input_path's CRS; ArcGIS projected join_path on the fly"
            + ("; the distance is geodesic (WITHIN_A_DISTANCE_GEODESIC)" if predicate == "within_distance" else ""),
        }
    )
    parameters: dict[str, Any] = {
        "target_features": _ds("input_path"),
        "join_features": _ds("join_path"),
        "out_feature_class": _out(),
        "join_operation": "JOIN_ONE_TO_MANY",
        "join_type": "KEEP_ALL" if ctx.arguments["how"] == "left" else "KEEP_COMMON",
        "match_option": MATCH_OPTIONS[predicate],
    }
    if predicate == "within_distance":
        parameters["search_radius"] = f"{float(ctx.arguments['distance_meters'])!r} Meters"
    return [{"tool": "analysis.SpatialJoin", "parameters": parameters}]


def _join_finish(ctx: RunContext, frame: Any) -> Any:
    # ArcGIS suffixes a join field whose name clashes with an input field _1; the contract says _join.
    own = set(ctx.inputs["input_path"].fields)
    renames = {c: c[: -len("_1")] + "_join" for c in frame.columns if c.endswith("_1") and c[: -len("_1")] in own}
    if renames:
        ctx.parameters["x-mapsmith:esri_fields_renamed"] = renames
    return frame.rename(columns=renames)


def _point_on_surface(ctx: RunContext) -> list[dict[str, Any]]:
    from mapsmith.crs import crs_label, parse_crs

    crs = crs_label(parse_crs(ctx.inputs["input_path"].crs_wkt))
    ctx.crs_decisions.update({"analysis_crs": crs, "reason": "points chosen in input_path's own CRS"})
    return [
        {
            "tool": "management.FeatureToPoint",
            "parameters": {"in_features": _ds("input_path"), "out_feature_class": _out(), "point_location": "INSIDE"},
        }
    ]


MAPPINGS: tuple[Mapped, ...] = (
    Mapped(
        "buffer_layer",
        ("analysis.Buffer",),
        "Basic",
        _buffer,
        "distance in Meters; PLANAR in a true-to-scale projected CRS, else GEODESIC; no segment count",
        added_fields=("BUFF_DIST", "ORIG_FID"),
    ),
    Mapped("clip_layer", ("analysis.Clip",), "Basic", _clip, "ArcGIS projects a mask in another CRS on the fly"),
    Mapped(
        "dissolve_layer",
        ("management.Dissolve",),
        "Basic",
        _dissolve,
        "multipart, keys only; aggregations refused (ESRI_UNMAPPED_ARGUMENT); null keys form a group",
        validate=_dissolve_validate,
    ),
    Mapped(
        "reproject_layer",
        ("management.Project",),
        "Basic",
        _reproject,
        "ArcGIS picks its own datum transformation when the datums differ (warned)",
    ),
    Mapped(
        "measure_area",
        ("management.CopyFeatures", "management.CalculateGeometryAttributes"),
        "Basic",
        _measure,
        "AREA_GEODESIC in SQUARE_METERS into area_m2; method='planar' refused (ESRI_UNMAPPED_ARGUMENT)",
        validate=_measure_validate,
        finish=_measure_finish,
    ),
    Mapped(
        "spatial_join",
        ("analysis.SpatialJoin",),
        "Basic",
        _join,
        "JOIN_ONE_TO_MANY; crosses/overlaps refused; within_distance geodesic; clashing fields _1 -> _join",
        added_fields=("Join_Count", "TARGET_FID", "JOIN_FID"),
        validate=_join_validate,
        finish=_join_finish,
    ),
    Mapped(
        "point_on_surface",
        ("management.FeatureToPoint",),
        "Advanced",  # Feature To Point: Basic No, Standard No, Advanced Yes
        _point_on_surface,
        "FeatureToPoint INSIDE; needs an Advanced licence",
        added_fields=("ORIG_FID",),
    ),
)
BY_OPERATION = {m.operation: m for m in MAPPINGS}


# -- what the router asks ------------------------------------------------------------------------


def licence_refusal(mapped: Mapped, level: str | None, extensions: frozenset[str] | None) -> Unavailable | None:
    """``licence_tier`` or ``online_only`` from the table and a known licence; None when allowed or unknown.

    ``level`` None or ``extensions`` None mean "not recorded": the run goes ahead and the worker asks
    ArcPy itself, which reports a licence failure as ``licence_tier`` too.
    """
    if mapped.online:
        return Unavailable(
            "online_only",
            f"{mapped.operation} on the esri stack runs {', '.join(mapped.tools)}, which needs ArcGIS Online "
            "or another service",
            f"sign in to a portal with the service, or {FALLBACK_HINT}",
        )
    if level is not None and LEVEL_RANK[level] < LEVEL_RANK[mapped.level]:
        return Unavailable(
            "licence_tier",
            f"{mapped.operation} on the esri stack runs {', '.join(mapped.tools)}, which needs an ArcGIS Pro "
            f"{mapped.level} licence; this machine's licence is {level}",
            f"use a Pro {mapped.level} licence, or {FALLBACK_HINT}",
        )
    lacking = [e for e in mapped.extensions if extensions is not None and e not in extensions]
    if lacking:
        return Unavailable(
            "licence_tier",
            f"{mapped.operation} on the esri stack needs the {', '.join(lacking)} extension(s), not licensed here",
            f"license the extension, or {FALLBACK_HINT}",
        )
    return None


def requirement(mapped: Mapped) -> Callable[[], Unavailable | None]:
    def check() -> Unavailable | None:
        from mapsmith_esri import licence_level

        return licence_refusal(mapped, licence_level(), None)  # extensions are never recorded locally

    return check


def usable_input(ctx: RunContext) -> str | None:
    """Eligibility: None when ArcGIS Pro reads every input as it is, else why not."""
    for slot, path in ctx.paths.items():
        if path.suffix.lower() not in READABLE_SUFFIXES:
            return (
                f"{slot}: ArcGIS Pro reads {path.suffix or 'this format'} only through a conversion tool; "
                f"convert_format it to .gpkg first (ArcGIS reads {', '.join(READABLE_SUFFIXES)})"
            )
    return None


# -- running a row -------------------------------------------------------------------------------


def implementation(mapped: Mapped) -> Callable[[RunContext], None]:
    def run(ctx: RunContext) -> None:
        run_mapped(ctx, mapped)

    run.__name__ = f"esri_{mapped.operation}"
    return run


def run_mapped(ctx: RunContext, mapped: Mapped) -> None:
    import geopandas as gpd

    from mapsmith.errors import EngineError
    from mapsmith_esri import pro_python
    from mapsmith_esri.run import raise_for_outcome, run_worker, timeout_s
    from mapsmith_opensource.common import write_output

    python, details, why = pro_python()
    if python is None:
        raise EngineError(f"ArcGIS Pro is gone: {why}", code="STACK_UNAVAILABLE", hint="see server_info's esri stack")
    assert ctx.temp_output is not None and ctx.output_path is not None
    steps = mapped.build(ctx)
    labels = {str(ctx.paths[s]): ctx.given_paths.get(s, s) for s in ctx.paths}
    folder = ctx.temp_output.parent / f".{ctx.output_path.stem}.arcgis-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        request = {
            "operation": mapped.operation,
            "scratch": str(folder),
            "datasets": {s: {"path": str(p), "layer": ctx.layers.get(s)} for s, p in ctx.paths.items()},
            "requires": {"level": mapped.level, "extensions": list(mapped.extensions)},
            "steps": steps,
            "output": "out",
        }
        result, stray = run_worker(python, request, folder, ctx.progress, timeout_s(ctx.environ or None))
        version = result.get("pro_version") or details.get("pro_version", "unknown")
        ctx.set_engine(
            ENGINE_NAME,
            str(version),
            tool=mapped.tools[-1],
            product=str(result.get("product") or "unknown"),
            licence_level=details.get("licence_level", "unknown"),
        )
        ctx.parameters["x-mapsmith:esri_tool"] = mapped.tools[-1]
        ctx.parameters["x-mapsmith:esri_steps"] = [
            {"tool": s["tool"], "parameters": _labelled(s["parameters"], ctx, labels)} for s in steps
        ]
        if stray:
            ctx.notes.append(f"Pro's Python printed {len(stray)} line(s) outside the protocol: {stray[-3:]}")
        raise_for_outcome(result, mapped.operation, mapped.tools[-1])
        for step in result.get("steps", []):
            warnings = [m["text"] for m in step.get("messages", []) if m.get("severity") == "warning"]
            if warnings:
                ctx.notes.append(f"ArcGIS {step['tool']} warned: {' | '.join(warnings)}")
        gdb = folder / "mapsmith_scratch.gdb"
        frame = gpd.read_file(gdb, layer="out")
        inputs_fields = set(ctx.inputs["input_path"].fields)
        dropped = [c for c in (*mapped.added_fields, *GDB_FIELDS) if c in frame.columns and c not in inputs_fields]
        frame = frame.drop(columns=dropped)
        if dropped:
            ctx.parameters["x-mapsmith:esri_fields_dropped"] = dropped
        if mapped.finish is not None:
            frame = mapped.finish(ctx, frame)
        write_output(ctx, frame)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _labelled(value: Any, ctx: RunContext, labels: dict[str, str]) -> Any:
    """Parameters as recorded: datasets by the path the caller gave, scratch outputs as (scratch)/name."""
    if isinstance(value, dict):
        if "$dataset" in value:
            return labels.get(str(ctx.paths[value["$dataset"]]), value["$dataset"])
        if "$scratch" in value:
            return f"(scratch)/{value['$scratch']}"
        if "$crs" in value:
            crs = value["$crs"]
            return f"WKID {crs['wkid']}" if crs.get("wkid") else crs["wkt"]
        return {k: _labelled(v, ctx, labels) for k, v in value.items()}
    if isinstance(value, list):
        return [_labelled(v, ctx, labels) for v in value]
    return value
