"""dissolve_layer: the features that share key values unioned into one per group, attributes as declared.

The group count is proved from the input before the engine ran (the distinct key combinations, a null
key a value of its own). Attributes are carried only by a declared aggregation: the pandas reductions
(sum, mean, median, min, max, first, last, count), the weighted mean ``field:weighted_mean:weight`` and
the ratio of sums ``numerator:ratio:denominator`` (written as ``numerator_per_denominator``), the last two
computed by mapsmith_opensource.aggregation, which reports the rows a null removed and the groups whose
total weight is 0. A plain mean of a field that looks like a rate, share or density is warned about
(UNWEIGHTED_MEAN_OF_RATE) with the weighted alternative spelt out. The argument parsing and the refusals
(``dissolve_plan``) and the notes are shared with the SedonaDB and Spark engines. The GeoPandas engine groups and
aggregates as GeoDataFrame.dissolve does (``_dissolve_with``, which the SedonaDB engine uses too) and unions the
groups in threads (``group_union.union_groups_in_threads``): GeoPandas unions one group after another, on one
core. A group proved a polygon coverage is unioned by GEOS's coverage union, the same shape in half the time.

What it must never do: drop a group or a feature without counting it; carry an attribute without a
declared aggregation; give a group with no weight a value (it is null, with the reason); average a rate
plainly without saying so.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, InputError
from mapsmith.paging import page
from mapsmith_opensource import aggregation
from mapsmith_opensource.common import read_input, set_engine, write_output
from mapsmith_opensource.group_union import COVERAGE_MIN_MEMBERS, COVERAGE_NOTE, tally_label, union_groups_in_threads
from mapsmith_opensource.layer_common import (
    attribute_rows,
    check_count,
    field_families,
    field_not_found,
    refuse_name_clashes,
    require_one_family,
    restore_types,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

    # (geometries, group number of each, group count) -> the union of each group, as shapely.union_all gives it
    GroupUnion = Callable[[np.ndarray, np.ndarray, int], np.ndarray]

# Dissolve aggregations of one field: the pandas function each name runs (sum runs _sum instead, which
# keeps an all-null group null); the numeric ones refuse a field of another type.
AGGREGATIONS = {
    "sum": "sum",
    "mean": "mean",
    "median": "median",
    "min": "min",
    "max": "max",
    "first": "first",
    "last": "last",
    "count": "count",
}
# Aggregations of a field with a second one: field:function:other_field.
WEIGHTED_MEAN = "weighted_mean"
RATIO = "ratio"
PAIRED_AGGREGATIONS = (WEIGHTED_MEAN, RATIO)
ALL_FUNCTIONS = sorted([*AGGREGATIONS, *PAIRED_AGGREGATIONS])
# A ratio of sums a:ratio:b is written as the field a_per_b (the contract says so).
RATIO_JOINER = "_per_"
NUMERIC_AGGREGATIONS = frozenset({"sum", "mean", "median", WEIGHTED_MEAN, RATIO})
# The output type family of an aggregated field, where it is not the input field's own.
AGGREGATION_RESULT_FAMILY = {"mean": "real", "median": "real", "count": "integer", WEIGHTED_MEAN: "real", RATIO: "real"}
SYNTAX = (
    "field:function, e.g. 'value:sum,name:first', or field:weighted_mean:weight_field "
    "('density:weighted_mean:population'), or numerator:ratio:denominator ('cases:ratio:population')"
)


@dataclass(frozen=True)
class Aggregation:
    """One declared aggregation: ``field`` reduced by ``function``; ``other`` is weighted_mean's weight
    field or ratio's denominator field."""

    field: str
    function: str
    other: str | None = None

    @property
    def output(self) -> str:
        """The field written: the field's own name, or numerator_per_denominator for a ratio."""
        return f"{self.field}{RATIO_JOINER}{self.other}" if self.function == RATIO else self.field

    @property
    def label(self) -> str:
        """How the answer names it: the function, with the second field where there is one."""
        return f"{self.function}:{self.other}" if self.other else self.function

    def describe(self) -> str:
        if self.function == WEIGHTED_MEAN:
            return (
                f"{self.field} by its mean weighted by {self.other} (sum({self.field}*{self.other})/sum({self.other}))"
            )
        if self.function == RATIO:
            return f"{self.output} = sum({self.field})/sum({self.other}) (ratio of sums)"
        return f"{self.field} by {self.function}"


# -- arguments ----------------------------------------------------------------------------------


def _split_list(argument: str, text: str | None) -> list[str]:
    if text is None or not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    if "" in items:
        raise ArgumentError(
            f"{argument} has an empty item: {text!r}",
            code="FIELD_LIST_INVALID",
            evidence={"argument": argument, "value": text},
            hint=f"separate the names in {argument} with single commas, e.g. 'name,code'",
        )
    return items


def _parse_by_fields(text: str | None) -> list[str]:
    keys = _split_list("by_fields", text)
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ArgumentError(
            f"by_fields names {repeated[0]!r} more than once",
            code="FIELD_LIST_INVALID",
            evidence={"argument": "by_fields", "value": text, "repeated": repeated},
            hint="name each key field once",
        )
    return keys


def _invalid(message: str, item: str, hint: str, **evidence: Any) -> ArgumentError:
    return ArgumentError(
        message,
        code="AGGREGATION_INVALID",
        evidence={"argument": "aggregations", "item": item, **evidence},
        hint=hint,
    )


def _parse_item(item: str) -> Aggregation:
    """field:function, or field:weighted_mean:weight / numerator:ratio:denominator. A field name may hold
    ':' in the first form (the function is after the last one), not in the second."""
    parts = [s.strip() for s in item.split(":")]
    if len(parts) >= 3 and parts[-2] in PAIRED_AGGREGATIONS:
        field, function, other = ":".join(parts[:-2]), parts[-2], parts[-1]
        if not field or not other:
            raise _invalid(f"aggregations item {item!r} is not field:{function}:field", item, f"write it as {SYNTAX}")
        if other == field:
            raise _invalid(
                f"aggregations item {item!r} divides {field!r} by itself",
                item,
                f"name a different second field: {function} of a field over itself is "
                + ("1 wherever defined" if function == RATIO else "sum(x^2)/sum(x), not a mean"),
            )
        return Aggregation(field, function, other)
    field, function = ":".join(parts[:-1]), parts[-1]
    if len(parts) < 2 or not field or not function:
        raise _invalid(f"aggregations item {item!r} is not field:function", item, f"write each as {SYNTAX}")
    if function in PAIRED_AGGREGATIONS:
        example = "density:weighted_mean:population" if function == WEIGHTED_MEAN else "cases:ratio:population"
        raise _invalid(
            f"aggregations item {item!r}: {function} needs a second field "
            + ("(the weight)" if function == WEIGHTED_MEAN else "(the denominator)"),
            item,
            f"write it as {field}:{function}:<field>, e.g. {example!r}",
        )
    if function not in AGGREGATIONS and len(parts) >= 3:
        # field:functoin:field -- a misspelt weighted_mean or ratio, not a field name holding ':'
        close = difflib.get_close_matches(parts[-2], list(PAIRED_AGGREGATIONS), n=1)
        if close:
            raise _invalid(
                f"aggregations: {parts[-2]!r} is not an aggregation; did you mean {close[0]!r}?",
                item,
                f"use one of {ALL_FUNCTIONS} ({SYNTAX})",
                functions=ALL_FUNCTIONS,
            )
    if function not in AGGREGATIONS:
        close = difflib.get_close_matches(function, ALL_FUNCTIONS, n=1)
        raise _invalid(
            f"aggregations: {function!r} is not an aggregation" + (f"; did you mean {close[0]!r}?" if close else ""),
            item,
            f"use one of {ALL_FUNCTIONS} ({SYNTAX})",
            functions=ALL_FUNCTIONS,
        )
    return Aggregation(field, function)


def _parse_aggregations(text: str | None, keys: list[str]) -> dict[str, Aggregation]:
    """The declared aggregations by the name of the field each writes, in the order given."""
    declared: dict[str, Aggregation] = {}
    for item in _split_list("aggregations", text):
        agg = _parse_item(item)
        if agg.output in declared:
            raise _invalid(
                f"aggregations names the field {agg.output!r} twice ({declared[agg.output].label} and {agg.label})",
                item,
                "give each field one aggregation (a ratio writes its own field, numerator_per_denominator, and can "
                "sit beside its numerator's aggregation); copy the layer to aggregate a field two ways",
                field=agg.output,
            )
        if agg.field in keys:
            raise _invalid(
                f"{agg.field!r} is a key field (by_fields) and cannot also be aggregated",
                item,
                "a key field is carried as the group's value; remove it from aggregations",
                field=agg.field,
                by_fields=keys,
            )
        declared[agg.output] = agg
    return declared


def dissolve_plan(ctx: RunContext) -> tuple[list[str], dict[str, Aggregation]]:
    """The keys and the declared aggregations (by output field) of a dissolve, after every argument and field
    refusal, in the order the engines share (the Spark engine calls it too)."""
    given = ctx.arguments["input_path"]
    keys = _parse_by_fields(ctx.arguments.get("by_fields"))
    declared = _parse_aggregations(ctx.arguments.get("aggregations"), keys)
    fields = list(ctx.inputs["input_path"].fields)
    named = [("by_fields", k) for k in keys]
    for agg in declared.values():
        named += [("aggregations", agg.field)] + ([("aggregations", agg.other)] if agg.other else [])
    for argument, name in named:
        if name not in fields:
            raise field_not_found(argument, name, fields, given)
    refuse_name_clashes(
        [*keys, *declared],
        "the dissolved layer",
        {"by_fields": keys, "aggregations": ctx.arguments.get("aggregations")},
    )
    require_one_family(ctx, ["input_path"], "dissolve_layer")
    families = field_families(ctx, "input_path")
    for agg in declared.values():
        if agg.function not in NUMERIC_AGGREGATIONS:
            continue
        roles = [("value", agg.field)]
        if agg.other:
            roles.append(("weight" if agg.function == WEIGHTED_MEAN else "denominator", agg.other))
        for role, name in roles:
            if families.get(name) not in ("integer", "real"):
                raise InputError(
                    f"{agg.function} needs numbers; the field {name!r} of {given} (its {role}) holds "
                    f"{families.get(name)} values",
                    code="FIELD_NOT_NUMERIC",
                    evidence={
                        "argument": "aggregations",
                        "field": name,
                        "role": role,
                        "aggregation": agg.function,
                        "type": families.get(name),
                        "path": given,
                    },
                    hint="use first, last, min, max or count for a non-numeric field (a text field of digits is not "
                    "read as numbers); a weight or a denominator must be a numeric field",
                )
    return keys, declared


def warn_plain_means(ctx: RunContext, keys: list[str], declared: dict[str, Aggregation]) -> list[str]:
    """UNWEIGHTED_MEAN_OF_RATE for every plain mean of a rate-like field (every engine calls it); the fields
    warned about. The hint names this layer's other numeric fields as candidate weights."""
    families = field_families(ctx, "input_path")
    warned = []
    for agg in declared.values():
        if agg.function != "mean":
            continue
        candidates = [f for f, t in families.items() if t in ("integer", "real") and f != agg.field and f not in keys]
        weight = candidates[0] if len(candidates) == 1 else "<weight field>"
        if aggregation.warn_if_rate_like(
            ctx,
            agg.field,
            weighted_syntax=f"{agg.field}:weighted_mean:{weight}",
            ratio_syntax="<numerator field>:ratio:<denominator field>",
            argument="aggregations",
            weight_candidates=candidates,
        ):
            warned.append(agg.field)
    return warned


# -- the weighted aggregates --------------------------------------------------------------------


def _sum(values: Any) -> Any:
    # pandas sums an all-null group to 0; a group with no values has no sum.
    return values.sum(min_count=1)


def paired_aggregates(
    gdf: gpd.GeoDataFrame, keys: list[str], declared: dict[str, Aggregation], ngroups: int
) -> dict[str, list[aggregation.Aggregate]]:
    """Each weighted mean and ratio of sums, per group in the order dissolve writes the groups (sorted by the
    keys, a null key last: pandas' groupby(sort=True, dropna=False), which GeoPandas' dissolve uses)."""
    import numpy as np

    paired = [a for a in declared.values() if a.function in PAIRED_AGGREGATIONS]
    if not paired:
        return {}
    codes = (
        gdf.groupby(keys, sort=True, dropna=False).ngroup().to_numpy() if keys else np.zeros(len(gdf), dtype="int64")
    )
    out = {}
    for agg in paired:
        assert agg.other is not None
        if agg.function == WEIGHTED_MEAN:
            out[agg.output] = aggregation.weighted_mean_by_group(
                gdf[agg.field], gdf[agg.other], codes, ngroups, value_field=agg.field, weight_field=agg.other
            )
        else:
            out[agg.output] = aggregation.ratio_of_sums_by_group(
                gdf[agg.field], gdf[agg.other], codes, ngroups, numerator_field=agg.field, denominator_field=agg.other
            )
    return out


def report_paired(
    ctx: RunContext,
    declared: dict[str, Aggregation],
    skipped: dict[str, int],
    undefined: dict[str, dict[str, int]],
) -> dict[str, dict[str, Any]]:
    """Notes, warnings and the answer's record of the weighted means and ratios (every engine calls it).

    ``skipped``: output -> rows left out because the value or the weight (numerator or denominator) was null;
    ``undefined``: output -> {reason: groups} for the groups written null.
    """
    record: dict[str, dict[str, Any]] = {}
    for output, agg in declared.items():
        if agg.function not in PAIRED_AGGREGATIONS:
            continue
        second = "weight" if agg.function == WEIGHTED_MEAN else "denominator"
        reasons = undefined.get(output, {})
        record[output] = {
            "function": agg.function,
            "field": agg.field,
            second: agg.other,
            "rows_skipped_null": skipped.get(output, 0),
            "groups_null": reasons,
        }
        if skipped.get(output):
            ctx.notes.append(
                f"{output}: {skipped[output]} features left out because {agg.field} or {agg.other} is null there "
                f"(a {second} cannot be guessed)"
            )
        zero = {r: n for r, n in reasons.items() if r != aggregation.NO_ROWS}
        if zero:
            ctx.warn(
                "AGGREGATE_UNDEFINED",
                f"{output} is null in {sum(zero.values())} group(s) because "
                + "; ".join(f"{r} ({n} group(s))" for r, n in zero.items())
                + f": {agg.function} of {agg.field} over {agg.other} is undefined there",
                f"inspect those groups' {agg.other} values (select_features where {agg.other} = 0); if every "
                "feature should count alike there, use mean instead",
            )
        if reasons.get(aggregation.NO_ROWS):
            ctx.notes.append(
                f"{output}: {reasons[aggregation.NO_ROWS]} group(s) have no feature with both {agg.field} and "
                f"{agg.other}; written null"
            )
    return record


def _tally(aggs: list[aggregation.Aggregate]) -> tuple[int, dict[str, int]]:
    skipped = sum(a.rows_skipped for a in aggs)
    reasons: dict[str, int] = {}
    for a in aggs:
        if a.undefined:
            reasons[a.undefined] = reasons.get(a.undefined, 0) + 1
    return skipped, reasons


# -- the dissolve -------------------------------------------------------------------------------


def _dissolve_with(work: gpd.GeoDataFrame, keys: list[str], aggfunc: Any, union_groups: GroupUnion) -> gpd.GeoDataFrame:
    """GeoDataFrame.dissolve(as_index=False, dropna=False, sort=True) with the union per group from
    ``union_groups``: the attributes are grouped and aggregated as GeoPandas' dissolve does."""
    import geopandas as gpd
    import numpy as np

    geometry = work.geometry.name
    by: Any = keys or np.zeros(len(work), dtype="int64")
    data = work.drop(columns=geometry).groupby(by, sort=True, dropna=False).agg(aggfunc)
    data.columns = data.columns.to_flat_index()
    groups = work.groupby(by, sort=True, dropna=False)
    merged = union_groups(work.geometry.values, groups.ngroup().to_numpy(), groups.ngroups)
    out = gpd.GeoDataFrame({geometry: gpd.GeoSeries(merged, index=data.index, crs=work.crs)}, geometry=geometry)
    return out.join(data).reset_index()


def dissolve_notes(
    ctx: RunContext,
    keys: list[str],
    features: int,
    groups: int,
    union_label: str,
    declared: dict[str, Aggregation],
    dropped: list[str],
    null_count: int,
) -> None:
    """The notes of a dissolve, whichever engine unioned the groups (the Spark engine's too)."""
    ctx.notes.append(
        (f"grouped by {', '.join(keys)}" if keys else "every feature dissolved into one")
        + f": {features} features into {groups} (geometries unioned with {union_label}: overlaps count once, "
        "duplicate points collapse, lines are split where they cross)"
    )
    if declared:
        ctx.notes.append(
            "aggregated: "
            + ", ".join(a.describe() for a in declared.values())
            + " (nulls are skipped; first/last are the first/last non-null value in input order; a sum over only "
            "nulls is null, not 0"
            + (
                "; a weighted mean or ratio uses the features where both fields are non-null and is null where "
                "the weights or denominators sum to 0"
                if any(a.function in PAIRED_AGGREGATIONS for a in declared.values())
                else ""
            )
            + ")"
        )
    if dropped:
        ctx.notes.append(
            f"fields not aggregated and not written (no aggregation of their own declared): {', '.join(dropped)}"
        )
    if null_count:
        ctx.notes.append(f"{null_count} features have a null key; they form their own group (null_keys='group')")


def dissolve_layer(
    ctx: RunContext, union_groups: GroupUnion | None = None, union_label: str = "shapely.union_all"
) -> None:
    """``union_groups``: another engine's union per group (sedonadb_ops); everything else stays this code."""
    import pandas as pd
    import shapely

    if union_groups is None:
        set_engine(ctx)
    keys, declared = dissolve_plan(ctx)
    fields = list(ctx.inputs["input_path"].fields)
    families = field_families(ctx, "input_path")

    gdf = read_input(ctx)
    geometry = gdf.geometry.name
    null_keys = ctx.arguments["null_keys"]
    null_mask = gdf[keys].isna().any(axis=1) if keys else pd.Series(False, index=gdf.index)
    null_count = int(null_mask.sum())
    if null_count and null_keys == "refuse":
        by_field = {k: int(gdf[k].isna().sum()) for k in keys if gdf[k].isna().any()}
        raise InputError(
            f"{null_count} features have a null key ({', '.join(f'{k}: {n}' for k, n in by_field.items())}) "
            "and null_keys is 'refuse'",
            code="NULL_GROUP_KEY",
            evidence={
                "null_key_features": null_count,
                "by_field": by_field,
                "first_rows": null_mask.to_numpy().nonzero()[0][:10].tolist(),
            },
            hint="fill the null keys first, or pass null_keys='group' to dissolve them into a group of their own",
        )
    warn_plain_means(ctx, keys, declared)
    # The groups that must come out, counted on the input before the engine sees it: the distinct
    # key combinations (a null is one value of its own, as with null_keys='group').
    expected = len(gdf[keys].drop_duplicates()) if keys else min(len(gdf), 1)
    dropped = [f for f in fields if f not in keys and f not in declared]

    # Weighted means and ratios first: a negative weight is refused before any union is computed.
    paired = paired_aggregates(gdf, keys, declared, expected)
    plain = {a.field: a.function for a in declared.values() if a.function in AGGREGATIONS}
    work = gdf[[*keys, *plain, geometry]]
    aggfunc: dict[str, Any] = {name: _sum if f == "sum" else AGGREGATIONS[f] for name, f in plain.items()}
    sizes = work.groupby(keys, dropna=False, sort=True).size() if keys else None
    # GeoDataFrame.dissolve's grouping and aggregation (_dissolve_with), its unions spread over the cores
    tally: list[bool] = []
    # the coverage union only over geometries read_input found valid
    default = functools.partial(union_groups_in_threads, tally=tally, coverage=ctx.input_valid("input_path"))
    out = _dissolve_with(work, keys, aggfunc or "first", union_groups or default)
    for output, aggs in paired.items():
        # An engine that lost or split a group breaks the alignment: write nulls, and feature_count_exact
        # (expected groups against written) refuses the output below.
        values = [a.value for a in aggs] if len(aggs) == len(out) else [None] * len(out)
        out[output] = pd.array(values, dtype="Float64")
    out = out[[*keys, *declared, geometry]]
    empty = shapely.is_missing(out.geometry.values) | shapely.is_empty(out.geometry.values)
    if empty.any():
        out = out.set_geometry([None if e else g for g, e in zip(out.geometry.values, empty, strict=True)], crs=gdf.crs)
        ctx.notes.append(
            f"{int(empty.sum())} groups have no geometry (all their features had none): written without one"
        )
    out = restore_types(
        out,
        {
            **{k: families.get(k, "") for k in keys},
            **{n: AGGREGATION_RESULT_FAMILY.get(a.function, families.get(n, "")) for n, a in declared.items()},
        },
    )

    tallies = {output: _tally(aggs) for output, aggs in paired.items()}
    weighted = report_paired(
        ctx, declared, {o: t[0] for o, t in tallies.items()}, {o: t[1] for o, t in tallies.items()}
    )
    ctx.parameters["x-mapsmith:fields_dropped"] = dropped
    ctx.parameters["x-mapsmith:null_key_features"] = null_count
    label = union_label if union_groups is not None else tally_label(tally)
    if any(tally):
        ctx.notes.append(COVERAGE_NOTE.format(members=COVERAGE_MIN_MEMBERS))
    dissolve_notes(ctx, keys, len(gdf), len(out), label, declared, dropped, null_count)
    write_output(ctx, out)
    check_count(
        ctx,
        expected,
        f"the distinct combinations of {', '.join(keys)} in the input, counted before the dissolve"
        if keys
        else "one group for the whole layer",
    )
    counts = sizes.tolist() if sizes is not None else [len(gdf)] * len(out)
    chosen, window = page(range(len(out)), ctx.arguments)
    rows = attribute_rows(out.iloc[chosen[0] : chosen[-1] + 1]) if chosen else []
    for row, i in zip(rows, chosen, strict=True):
        row["feature_count"] = int(counts[i])
    ctx.answer = dissolve_answer(len(out), keys, declared, dropped, null_count, rows, window, weighted)


def dissolve_answer(
    groups: int,
    keys: Any,
    declared: dict[str, Any],
    dropped: Any,
    null_count: int,
    rows: list[dict[str, Any]],
    window: dict[str, Any],
    weighted: Any,
) -> dict[str, Any]:
    """dissolve_layer's answer, the same from every engine (GeoPandas, SedonaDB, Spark)."""
    return {
        "group_count": groups,
        "by_fields": keys,
        "aggregations": {n: a.label for n, a in declared.items()},
        "fields_dropped": dropped,
        "null_key_features": null_count,
        "groups": rows,
        "page": window,
        **({"weighted_aggregates": weighted} if weighted else {}),
    }
