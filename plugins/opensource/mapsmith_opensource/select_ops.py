"""Selection on the opensource stack: keep whole features by attribute, by range, by spatial relation.

A selection writes the chosen input features exactly as they were, every field and every vertex:
it never cuts, moves or repairs a geometry (that is clip_layer's job, or a repair's), and it never
adds a field (that is a join's). Attribute conditions are parsed by ``mapsmith.expressions``, by
hand, and never reach ``eval``, ``DataFrame.query`` or SQL. Every criterion given must hold; rows
left out because a condition read a missing value are counted and reported, not dropped unseen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith import expressions
from mapsmith.crs import choose_transformer, crs_label
from mapsmith.errors import ArgumentError
from mapsmith_opensource import io
from mapsmith_opensource.common import align_to, read_input, set_engine, to_metric, transform_frame, write_output
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("select_features", "select_features"),)

# The OGC predicates as shapely's STRtree names them; each is tested as predicate(input, other).
TOPOLOGICAL_RELATIONS = ("intersects", "within", "contains", "touches", "crosses", "overlaps")
DISTANCE_RELATION = "within_distance"
# The strict predicates leave out a feature lying on the other's boundary (a point on a polygon's
# edge is not `within` it); their inclusive twins say which features that was, so it is counted.
INCLUSIVE_TWIN = {"within": "covered_by", "contains": "covers"}
# Written bounds may differ from the input's in the last bits after a text format's round trip.
EXTENT_TOLERANCE_RELATIVE = 1e-9


def select_features(ctx: RunContext) -> None:
    import numpy as np

    set_engine(ctx)
    args = ctx.arguments
    _check_criteria(args)
    # Parse before reading anything: a malformed condition is refused at once, with its position.
    where = expressions.parse(args["where"], argument="where") if args.get("where") is not None else None

    gdf = read_input(ctx)
    total = len(gdf)
    selected = np.ones(total, dtype=bool)
    criteria: list[dict[str, Any]] = []

    if where is not None:
        truth = expressions.evaluate(where, gdf)
        selected &= truth.true
        ctx.parameters["x-mapsmith:where_canonical"] = where.canonical()
        criteria.append(_attribute_report("where", truth, expression=where.canonical()))
        note_unknown(ctx, "where", int(truth.unknown.sum()), where.fields)

    if args.get("field") is not None:
        condition = expressions.range_condition(args["field"], args.get("min_value"), args.get("max_value"))
        truth = expressions.evaluate(condition, gdf)
        selected &= truth.true
        criteria.append(
            _attribute_report(
                "range",
                truth,
                field=args["field"],
                min_value=args.get("min_value"),
                max_value=args.get("max_value"),
                condition=condition.canonical(),
            )
        )
        note_unknown(ctx, "field", int(truth.unknown.sum()), (args["field"],))

    if args.get("relation") is not None:
        hits, report = _relation_hits(ctx, gdf, args["relation"], args.get("distance_meters"))
        selected &= hits
        criteria.append(report)

    out = gdf[selected]
    count = int(selected.sum())
    announce(ctx, count, total, criteria)
    write_output(ctx, out)
    _check_written(ctx, count)
    ctx.answer = answer(count, total, criteria)


def announce(ctx: RunContext, count: int, total: int, criteria: list[dict[str, Any]]) -> None:
    """The note saying how many features were selected, and the warning when none was (every engine's)."""
    ctx.notes.append(
        f"{count} of {total} input features selected"
        + (" (every criterion given holds for each)" if len(criteria) > 1 else "")
        + "; the selected features are written unchanged"
    )
    if count == 0 and total > 0:
        ctx.warn(
            "SELECTION_EMPTY",
            f"no feature of {total} meets the selection; the output is an empty layer",
            "check the condition against the field values (describe_dataset lists the fields), and the "
            "relation layer's extent",
        )


def answer(count: int, total: int, criteria: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "selected_count": count,
        "total_count": total,
        "summary": f"{count} of {total} features selected",
        "criteria": criteria,
    }


# -- arguments ---------------------------------------------------------------------------------


def _check_criteria(args: dict[str, Any]) -> None:
    """The arguments that only make sense together: refuse a half-given criterion, never ignore it."""
    has_range = args.get("min_value") is not None or args.get("max_value") is not None
    if args.get("field") is not None and not has_range:
        raise _incomplete("field", "min_value and/or max_value", "the range to select")
    if has_range and args.get("field") is None:
        given = "min_value" if args.get("min_value") is not None else "max_value"
        raise _incomplete(given, "field", "the numeric field the range applies to")
    low, high = args.get("min_value"), args.get("max_value")
    if low is not None and high is not None and low > high:
        raise ArgumentError(
            f"min_value {low} is above max_value {high}: the range is empty",
            code="ARGUMENT_OUT_OF_RANGE",
            evidence={"argument": "min_value", "min_value": low, "max_value": high},
            hint="swap the two bounds",
        )
    if args.get("relation") is not None and args.get("relation_path") is None:
        raise _incomplete("relation", "relation_path", "the layer to test the relation against")
    if args.get("relation_path") is not None and args.get("relation") is None:
        raise _incomplete("relation_path", "relation", "which relation to test (intersects, within, ...)")
    if args.get("relation") == DISTANCE_RELATION and args.get("distance_meters") is None:
        raise _incomplete("relation", "distance_meters", "the ground distance within_distance means")
    if args.get("distance_meters") is not None and args.get("relation") != DISTANCE_RELATION:
        raise ArgumentError(
            f"distance_meters applies only to relation='within_distance', not to relation={args.get('relation')!r}",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={"argument": "distance_meters", "relation": args.get("relation")},
            hint="drop distance_meters, or set relation='within_distance'",
        )
    # Checked last: a half-given criterion (max_value without field) deserves the more precise answer.
    if args.get("where") is None and args.get("field") is None and args.get("relation") is None:
        raise ArgumentError(
            "select_features needs a criterion: where, field with min_value/max_value, or relation with relation_path",
            code="SELECTION_CRITERION_REQUIRED",
            evidence={"given": sorted(k for k, v in args.items() if v is not None)},
            hint="e.g. where=\"value >= 10\", or field='value' with min_value=10, or relation='intersects' "
            "with relation_path='zones.gpkg'",
        )


def _incomplete(given: str, missing: str, what: str) -> ArgumentError:
    return ArgumentError(
        f"{given} was given without {missing} ({what})",
        code="SELECTION_CRITERION_INCOMPLETE",
        evidence={"argument": given, "missing": missing},
        hint=f"add {missing}, or drop {given}",
    )


# -- attribute criteria ------------------------------------------------------------------------


def _attribute_report(mode: str, truth: expressions.Truth, **details: Any) -> dict[str, Any]:
    return attribute_report(mode, int(truth.true.sum()), int(truth.false.sum()), len(truth.true), **details)


def attribute_report(mode: str, matched: int, not_matched: int, total: int, **details: Any) -> dict[str, Any]:
    """One attribute criterion's report: how many rows it holds for, fails for, and cannot say (a NULL read)."""
    return {
        "mode": mode,
        **details,
        "matched": matched,
        "not_matched": not_matched,
        "unknown_because_null": total - matched - not_matched,
    }


def note_unknown(ctx: RunContext, argument: str, count: int, fields: tuple[str, ...]) -> None:
    """Say how many features a criterion left out because a field it reads is NULL there."""
    if count:
        one = count == 1
        ctx.notes.append(
            f"{count} feature{'' if one else 's'} {'was' if one else 'were'} not selected because {argument} is "
            f"unknown for {'it' if one else 'them'}: a field it reads ({', '.join(fields)}) is NULL there; "
            "add 'OR <field> IS NULL' to select such features"
        )


# -- spatial relation --------------------------------------------------------------------------


def _relation_hits(
    ctx: RunContext, gdf: gpd.GeoDataFrame, relation: str, distance: float | None
) -> tuple[np.ndarray, dict[str, Any]]:
    """Which input features have ``relation`` with at least one relation_path feature."""
    import numpy as np
    import shapely

    # Invalid geometries were counted and warned about when read (common.read_input); they are
    # tested as they are, like every other operation of this stack does, and never fixed here.
    other = align_to(ctx, read_input(ctx, "relation_path"), gdf.crs, "relation_path")
    aligned = "relation_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {})
    report: dict[str, Any] = {"mode": "relation", "relation": relation}

    if relation == DISTANCE_RELATION:
        assert distance is not None
        metric = to_metric(ctx, gdf, "tested for distance")
        if metric.transformed:
            # The same operation the record names for input_path, applied to the aligned layer.
            transformer, _ = choose_transformer(metric.source, metric.crs, metric.aoi)
            other = transform_frame(other, transformer, metric.crs)
            ctx.crs_decisions["reason"] = (
                f"{crs_label(metric.source)} "
                + ("is geographic (degrees)" if metric.source.is_geographic else "distorts distances at the data")
                + f", so the distance test ran in {crs_label(metric.crs)}, the UTM zone estimated from input_path's "
                "extent; only the test used the transformed coordinates, and the selected features are written "
                f"in {crs_label(metric.source)} unchanged"
            )
            ctx.crs_decisions["target_crs"] = crs_label(metric.crs)
        units = metric.units(distance)
        ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
        report["distance_meters"] = distance
        geoms = np.asarray(metric.frame.geometry.values, dtype=object)
        tree_geoms = np.asarray(other.geometry.values, dtype=object)
        pairs = shapely.STRtree(tree_geoms).query(geoms, predicate="dwithin", distance=units)
    else:
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(gdf.crs),
                "reason": f"the {relation} test ran in input_path's CRS ({crs_label(gdf.crs)}); a topological "
                "relation needs no distance, and the features are written with their coordinates unchanged"
                + ("; relation_path was transformed to it (see x-mapsmith:alignment)" if aligned else ""),
            }
        )
        geoms = np.asarray(gdf.geometry.values, dtype=object)
        tree_geoms = np.asarray(other.geometry.values, dtype=object)
        pairs = shapely.STRtree(tree_geoms).query(geoms, predicate=relation)

    hits = np.zeros(len(gdf), dtype=bool)
    hits[pairs[0]] = True
    if relation in INCLUSIVE_TWIN:
        report["on_boundary_not_selected"] = _on_boundary(ctx, relation, geoms, tree_geoms, hits)
    no_geometry = int((shapely.is_missing(geoms) | shapely.is_empty(geoms)).sum())
    other_empty = int((shapely.is_missing(tree_geoms) | shapely.is_empty(tree_geoms)).sum())
    report.update(
        {
            "matched": int(hits.sum()),
            "not_matched": int((~hits).sum()),
            "relation_feature_count": len(other),
            "input_features_without_geometry": no_geometry,
            "relation_features_without_geometry": other_empty,
        }
    )
    if no_geometry:
        ctx.notes.append(f"{no_geometry} input features have no geometry (NULL or empty) and cannot meet {relation}")
    if other_empty:
        ctx.notes.append(f"{other_empty} relation_path features have no geometry and were not tested against")
    return hits, report


def _on_boundary(ctx: RunContext, relation: str, geoms: np.ndarray, tree_geoms: np.ndarray, hits: np.ndarray) -> int:
    """Count, and say, the features the strict predicate left out only because they touch a boundary.

    For ``within``: covered by some relation feature (inside or on its boundary) but within none,
    i.e. lying on the boundary; for a point, exactly on a polygon's edge or a line's end point.
    """
    import numpy as np
    import shapely

    pairs = shapely.STRtree(tree_geoms).query(geoms, predicate=INCLUSIVE_TWIN[relation])
    covered = np.zeros(len(geoms), dtype=bool)
    covered[pairs[0]] = True
    boundary = int((covered & ~hits).sum())
    if boundary:
        whose = "relation_path's" if relation == "within" else "the input feature's"
        ctx.warn(
            "ON_BOUNDARY_NOT_SELECTED",
            f"{boundary} input feature{'s' if boundary != 1 else ''} lie{'' if boundary != 1 else 's'} exactly on "
            f"the boundary of {whose} features and {'were' if boundary != 1 else 'was'} not selected: "
            f"'{relation}' excludes geometries that only touch the boundary",
            "use relation='intersects' to include features on the boundary (it also includes features that "
            "cross it), or keep "
            f"'{relation}' if boundary features must be left out",
        )
    return boundary


# -- verification ------------------------------------------------------------------------------


def _check_written(ctx: RunContext, count: int) -> None:
    """What a selection promises beyond the runner's checks: the count chosen is the count written,
    the output lies inside the input's extent, and every field came through."""
    assert ctx.temp_output is not None
    written = io.inspect(ctx.temp_output, None)
    source = ctx.inputs["input_path"]
    ctx.check(
        "feature_count_exact",
        written.feature_count == count,
        f"{count} features selected before writing, {written.feature_count} in the written output",
    )
    ctx.check(
        "extent_within_expected",
        _inside(written.bounds, source.bounds),
        f"output extent {_fmt(written.bounds)} within input_path's extent {_fmt(source.bounds)}",
    )
    missing = [f for f in source.fields if f not in written.fields]
    # GeoJSON declares fields only on its features: an empty selection written as GeoJSON has no
    # field list to keep. Said, and not critical, because no value was lost.
    schemaless = not count and ctx.temp_output.suffix.lower() in (".geojson", ".json")
    ctx.check(
        "x-mapsmith:fields_preserved",
        not missing,
        f"{len(source.fields)} input fields; missing after the write: {missing or 'none'}"
        + (
            "; an empty GeoJSON carries no field list (write .gpkg to keep the schema of an empty result)"
            if schemaless and missing
            else ""
        ),
        critical=not schemaless,
    )


def _inside(inner: tuple[float, ...] | None, outer: tuple[float, ...] | None) -> bool:
    if inner is None:
        return True  # nothing written lies anywhere
    if outer is None:
        return False
    span = max(abs(v) for v in outer) or 1.0
    tol = span * EXTENT_TOLERANCE_RELATIVE
    return (
        inner[0] >= outer[0] - tol
        and inner[1] >= outer[1] - tol
        and inner[2] <= outer[2] + tol
        and inner[3] <= outer[3] + tol
    )


def _fmt(bounds: tuple[float, ...] | None) -> str:
    return "(none)" if bounds is None else "(" + ", ".join(f"{v:.6f}" for v in bounds) + ")"
