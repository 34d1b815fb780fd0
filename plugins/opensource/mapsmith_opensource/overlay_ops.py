"""Operations that cut, join, stack or split whole layers: overlay, dissolve, merge, explode.

Each one changes the number of features, so each one proves its count: the output is read back
and compared with a number derived from the inputs before the engine ran (the distinct key
combinations of a dissolve, the summed counts of a merge, the summed part counts of an explode),
or, for an overlay, every piece it did not keep is counted. What these operations must never do:
drop a feature, a fragment or a field without counting it and saying so; carry an attribute into a
group without an aggregation the caller declared; coerce a field's type in a way that loses values;
compute in another CRS than the main input's without recording it.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label
from mapsmith.errors import ArgumentError, InputError
from mapsmith.paging import page
from mapsmith_opensource import io
from mapsmith_opensource.common import align_to, read_input, require_valid, set_engine, write_output
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from collections.abc import Callable

    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext

    # (geometries, group number of each, group count) -> the union of each group, as shapely.union_all gives it
    GroupUnion = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
    # (input layer, overlay layer) -> geopandas.overlay(how="intersection", keep_geom_type=False)'s frame
    Intersection = Callable[[gpd.GeoDataFrame, gpd.GeoDataFrame], gpd.GeoDataFrame]

REGISTRATIONS = (
    Registration("overlay_layers", "overlay_layers"),
    Registration("dissolve_layer", "dissolve_layer"),
    Registration("merge_layers", "merge_layers"),
    Registration("explode_layer", "explode_layer"),
)

# The suffixes GeoPandas gives a field both overlay inputs carry (input_path's, overlay_path's).
OVERLAY_SUFFIXES = ("_1", "_2")
SOURCE_FIELD = "source"
PART_INDEX_FIELD = "part_index"
# Integers above this are not all representable as a 64-bit float: widening them would round.
MAX_EXACT_FLOAT_INTEGER = 2**53

# Dissolve aggregations: the pandas function each name runs (sum runs _sum instead, which keeps an
# all-null group null); the numeric ones refuse a field of another type.
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
NUMERIC_AGGREGATIONS = frozenset({"sum", "mean", "median"})
# The output type family of an aggregated field, where it is not the input field's own.
AGGREGATION_RESULT_FAMILY = {"mean": "real", "median": "real", "count": "integer"}


# -- shared helpers -----------------------------------------------------------------------------


def _written_count(ctx: RunContext) -> int:
    """The feature count of the written temporary output, read back from the file itself."""
    assert ctx.temp_output is not None
    return int(ctx.io.inspect(ctx.temp_output, None).feature_count or 0)


def _check_count(ctx: RunContext, expected: int, derivation: str) -> int:
    written = _written_count(ctx)
    ctx.check(
        "feature_count_exact",
        written == expected,
        f"expected {expected} features ({derivation}), the output holds {written}",
    )
    return written


def _no_geometry(gdf: gpd.GeoDataFrame) -> np.ndarray:
    """True where a feature has no geometry to compute with (null or empty)."""
    import shapely

    geoms = gdf.geometry.values
    return shapely.is_missing(geoms) | shapely.is_empty(geoms)


def _family(dtype: str) -> str:
    """A field's type family from a header's type name (numpy, pandas or Arrow spelling)."""
    name = dtype.lower()
    if name.startswith(("int", "uint")):
        return "integer"
    if name.startswith(("float", "double", "halffloat")):
        return "real"
    if name.startswith("bool"):
        return "boolean"
    if name in ("object", "str", "string", "large_string", "utf8", "large_utf8"):
        return "string"
    if name.startswith(("datetime", "timestamp")):
        return "datetime"
    if name.startswith("date"):
        return "date"
    return name


def _field_families(ctx: RunContext, key: str) -> dict[str, str]:
    """Each field's declared type family, from the file's header rather than the loaded frame.

    The header is the truth: pyogrio loads an integer field that holds a null as float64, so the
    frame alone would report 'real' for a field the file declares as integer.
    """
    path = ctx.paths[key]
    fields = ctx.inputs[key].fields
    if io.is_parquet(path):
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        return {n: _family(str(schema.field(n).type)) for n in fields if n in schema.names}
    import pyogrio

    info = pyogrio.read_info(io.vector_source(path)[0], layer=ctx.layers.get(key))
    return {str(n): _family(str(t)) for n, t in zip(info["fields"], info["dtypes"], strict=True)}


def _restore_types(gdf: gpd.GeoDataFrame, families: dict[str, str]) -> gpd.GeoDataFrame:
    """Give integer and boolean fields that picked up nulls their declared type back.

    pandas holds such a column as float64 (NaN for null); written as it is, an integer field of
    the input would become a real field of the output. Nullable dtypes keep the declared type.
    """
    import pandas as pd

    out = gdf.copy()
    for name, family in families.items():
        if name not in out.columns or name == out.geometry.name:
            continue
        column = out[name]
        if family == "integer" and not pd.api.types.is_integer_dtype(column.dtype):
            values = column.dropna()
            if len(values) == 0 or (pd.api.types.is_numeric_dtype(values) and (values % 1 == 0).all()):
                out[name] = column.astype("Int64")
        elif family == "boolean" and not pd.api.types.is_bool_dtype(column.dtype):
            out[name] = column.astype("boolean")
    return out


def _require_one_family(ctx: RunContext, keys: list[str], operation: str) -> str | None:
    """The one geometry family (point, line or polygon) the inputs share, or a refusal."""
    by_input = {k: sorted(ctx.inputs[k].geometry_families - {"unknown"}) for k in keys}
    families = sorted({f for fams in by_input.values() for f in fams})
    if len(families) > 1:
        raise InputError(
            f"{operation} needs one geometry family; the input holds {', '.join(families)}",
            code="MIXED_GEOMETRY_TYPES",
            evidence={"geometry_families": by_input},
            hint="split the layer by geometry type first (select the points, lines and polygons separately) "
            "and run the operation on each",
        )
    return families[0] if families else None


def _taken(name: str, fields: Any) -> str | None:
    """The existing field ``name`` would collide with: GeoPackage field names ignore case."""
    return next((f for f in fields if f.casefold() == name.casefold()), None)


def _refuse_name_clashes(names: list[str], where: str, evidence: dict[str, Any]) -> None:
    """Two output fields whose names differ only in case are one field to GeoPackage: refuse."""
    seen: dict[str, str] = {}
    for name in names:
        first = seen.setdefault(name.casefold(), name)
        if first != name:
            raise InputError(
                f"{where} would hold the fields {first!r} and {name!r}, which differ only in case; GeoPackage "
                "field names ignore case, so they would be one field",
                code="FIELD_NAME_CLASH",
                evidence={"fields": [first, name], **evidence},
                hint=f"rename {name!r} (or {first!r}) in its input first",
            )


def _field_not_found(argument: str, field: str, available: list[str], path: str) -> InputError:
    close = difflib.get_close_matches(field, available, n=1)
    return InputError(
        f"{argument} names the field {field!r}, which {path} does not have"
        + (f"; did you mean {close[0]!r}?" if close else ""),
        code="FIELD_NOT_FOUND",
        evidence={"argument": argument, "field": field, "fields": available, "path": path},
        hint=f"name one of the fields {available} (describe_dataset lists them)",
    )


def _rows(gdf: gpd.GeoDataFrame) -> list[dict[str, Any]]:
    import json

    attrs = [c for c in gdf.columns if c != gdf.geometry.name]
    if not attrs:
        return [{} for _ in range(len(gdf))]  # pandas writes a frame without columns as [], whatever its rows
    # Through JSON so numpy and pandas scalars (and NA) become plain values.
    return json.loads(gdf[attrs].to_json(orient="records"))  # callers hand in one page (mapsmith.paging)


def _crs_equal(a: Any, b: Any) -> bool:
    from pyproj import CRS

    return CRS.from_user_input(a).equals(CRS.from_user_input(b), ignore_axis_order=True)


# -- overlay_layers -----------------------------------------------------------------------------


def _flat_parts(geom: Any) -> list[Any]:
    """Every single-part geometry inside ``geom``, through nested collections."""
    import shapely

    parts = list(shapely.get_parts(geom))
    flat = []
    while parts:
        part = parts.pop()
        if shapely.get_type_id(part) in (4, 5, 6, 7):  # Multi* and GeometryCollection
            parts.extend(shapely.get_parts(part))
        else:
            flat.append(part)
    return flat


def overlay_fields(how: str, left_fields: list[str], right_fields: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The fields an overlay writes, and those both layers carry with their suffixed names; refused before any
    engine runs when a suffixed name is taken or two output fields would share a name (every engine calls it)."""
    shared = [c for c in left_fields if c in right_fields]
    renamed: dict[str, list[str]] = {}
    if how != "difference":  # difference carries input_path's fields only
        for name in shared:
            taken = [t for s in OVERLAY_SUFFIXES if (t := _taken(name + s, left_fields + right_fields))]
            if taken:
                raise InputError(
                    f"both layers have a field {name!r}, which the overlay renames to {name}_1 and {name}_2, "
                    f"but {taken[0]!r} exists already",
                    code="FIELD_NAME_CLASH",
                    evidence={
                        "field": name,
                        "taken": taken,
                        "input_fields": left_fields,
                        "overlay_fields": right_fields,
                    },
                    hint=f"rename {name!r} or {taken[0]!r} in one of the layers first",
                )
            renamed[name] = [name + s for s in OVERLAY_SUFFIXES]
    output_fields = [f"{n}{OVERLAY_SUFFIXES[0]}" if n in renamed else n for n in left_fields]
    if how != "difference":
        output_fields += [f"{n}{OVERLAY_SUFFIXES[1]}" if n in renamed else n for n in right_fields]
    _refuse_name_clashes(
        output_fields, f"the {how} of the two layers", {"input_fields": left_fields, "overlay_fields": right_fields}
    )
    return renamed, output_fields


def overlay_layers(
    ctx: RunContext, intersection: Intersection | None = None, intersection_label: str = "geopandas.overlay"
) -> None:
    """``intersection``: another engine's pieces for how='intersection' (sedonadb_ops); the rest is this code."""
    import geopandas as gpd
    import shapely

    if intersection is None:
        set_engine(ctx)
    how = ctx.arguments["how"]
    left = read_input(ctx)
    right = align_to(ctx, read_input(ctx, "overlay_path"), left.crs, "overlay_path")
    aligned = "overlay_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {})
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(left.crs),
            "reason": "overlaid in input_path's CRS (planar: edges are straight lines in its coordinates), so the "
            "input's coordinates are written unchanged"
            + ("; overlay_path was transformed to it (see x-mapsmith:alignment)" if aligned else ""),
        }
    )
    left = left.rename_geometry("geometry") if left.geometry.name != "geometry" else left
    right = right.rename_geometry("geometry") if right.geometry.name != "geometry" else right

    # Fields both layers carry are renamed by GeoPandas with suffixes; a suffixed name that is
    # already taken would make two fields of one name, so that is refused before the engine runs.
    left_fields = [c for c in left.columns if c != "geometry"]
    right_fields = [c for c in right.columns if c != "geometry"]
    renamed, output_fields = overlay_fields(how, left_fields, right_fields)

    without_geometry = {}
    frames = {}
    for key, frame in (("input_path", left), ("overlay_path", right)):
        # GeoPandas would make invalid polygons valid itself and drop what the repair turned into lines
        # or points; repair_geometries does that as its own recorded step and says what it changed.
        require_valid(ctx, frame, key, "an overlay of them is undefined")
        missing = _no_geometry(frame)
        if missing.any():
            without_geometry[key] = int(missing.sum())
            ctx.notes.append(
                f"{key}: {int(missing.sum())} features have no geometry (null or empty) and take no part in the overlay"
            )
        frames[key] = frame[~missing]

    if intersection is not None and how == "intersection":
        result = intersection(frames["input_path"], frames["overlay_path"])
    else:
        intersection_label = "geopandas.overlay"
        result = gpd.overlay(frames["input_path"], frames["overlay_path"], how=how, keep_geom_type=False)

    # keep_geom_type made explicit: polygons only, and every lower-dimension piece counted.
    kept: list[Any] = []
    fragments = 0
    for geom in result.geometry.values:
        type_id = shapely.get_type_id(geom)
        if type_id in (3, 6):  # Polygon, MultiPolygon: kept exactly as the engine made it
            kept.append(geom)
            continue
        parts = _flat_parts(geom)
        polygons = [p for p in parts if shapely.get_dimensions(p) == 2 and not p.is_empty]
        fragments += len(parts) - len(polygons)
        kept.append(shapely.union_all(polygons) if polygons else None)
    result = result.set_geometry(kept, crs=left.crs)
    no_area = result.geometry.isna()
    out = result[~no_area].reset_index(drop=True)
    families = {}
    carried = [("input_path", left_fields)] + ([("overlay_path", right_fields)] if how != "difference" else [])
    for key, fields in carried:
        declared = _field_families(ctx, key)
        suffix = OVERLAY_SUFFIXES[0] if key == "input_path" else OVERLAY_SUFFIXES[1]
        for name in fields:
            families[name + suffix if name in renamed else name] = declared.get(name, "")
    out = _restore_types(out, families)

    ctx.parameters["x-mapsmith:lower_dimension_fragments_dropped"] = fragments
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    ctx.notes.append(
        f"{intersection_label}(how={how!r}, keep_geom_type=False) gave {len(result)} pieces; MapSmith kept the "
        f"polygonal part of each: {len(out)} written, {int(no_area.sum())} had no area at all (where the layers "
        f"only touch), {fragments} lower-dimension fragments (lines along shared edges, points at touching "
        "corners) were dropped"
    )
    if renamed:
        ctx.notes.append(
            "fields in both layers were renamed: "
            + ", ".join(f"{k} -> {v[0]} (input_path), {v[1]} (overlay_path)" for k, v in renamed.items())
        )
    write_output(ctx, out)
    ctx.answer = {
        "how": how,
        "feature_count": len(out),
        "lower_dimension_fragments_dropped": fragments,
        "pieces_without_area_dropped": int(no_area.sum()),
        "renamed_fields": renamed,
        "input_features_without_geometry": without_geometry,
    }


# -- dissolve_layer -----------------------------------------------------------------------------


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


def _parse_aggregations(text: str | None, keys: list[str]) -> dict[str, str]:
    declared: dict[str, str] = {}
    for item in _split_list("aggregations", text):
        field, sep, function = (s.strip() for s in item.rpartition(":"))
        if not sep or not field or not function:
            raise ArgumentError(
                f"aggregations item {item!r} is not field:function",
                code="AGGREGATION_INVALID",
                evidence={"argument": "aggregations", "item": item},
                hint=f"write each as field:function, e.g. 'value:sum,name:first'; functions: {sorted(AGGREGATIONS)}",
            )
        if function not in AGGREGATIONS:
            close = difflib.get_close_matches(function, list(AGGREGATIONS), n=1)
            raise ArgumentError(
                f"aggregations: {function!r} is not an aggregation"
                + (f"; did you mean {close[0]!r}?" if close else ""),
                code="AGGREGATION_INVALID",
                evidence={"argument": "aggregations", "item": item, "functions": sorted(AGGREGATIONS)},
                hint=f"use one of {sorted(AGGREGATIONS)}",
            )
        if field in declared:
            raise ArgumentError(
                f"aggregations names the field {field!r} twice ({declared[field]} and {function})",
                code="AGGREGATION_INVALID",
                evidence={"argument": "aggregations", "field": field},
                hint="give each field one aggregation; copy the layer to aggregate a field two ways",
            )
        if field in keys:
            raise ArgumentError(
                f"{field!r} is a key field (by_fields) and cannot also be aggregated",
                code="AGGREGATION_INVALID",
                evidence={"argument": "aggregations", "field": field, "by_fields": keys},
                hint="a key field is carried as the group's value; remove it from aggregations",
            )
        declared[field] = function
    return declared


def _sum(values: Any) -> Any:
    # pandas sums an all-null group to 0; a group with no values has no sum.
    return values.sum(min_count=1)


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


def dissolve_plan(ctx: RunContext) -> tuple[list[str], dict[str, str]]:
    """The keys and the declared aggregations of a dissolve, after every argument and field refusal, in
    the order the engines share (the Spark engine calls it too)."""
    given = ctx.arguments["input_path"]
    keys = _parse_by_fields(ctx.arguments.get("by_fields"))
    declared = _parse_aggregations(ctx.arguments.get("aggregations"), keys)
    fields = list(ctx.inputs["input_path"].fields)
    for argument, names in (("by_fields", keys), ("aggregations", list(declared))):
        for name in names:
            if name not in fields:
                raise _field_not_found(argument, name, fields, given)
    _require_one_family(ctx, ["input_path"], "dissolve_layer")
    families = _field_families(ctx, "input_path")
    for name, function in declared.items():
        if function in NUMERIC_AGGREGATIONS and families.get(name) not in ("integer", "real"):
            raise InputError(
                f"{function} needs numbers; the field {name!r} of {given} holds {families.get(name)} values",
                code="FIELD_NOT_NUMERIC",
                evidence={
                    "argument": "aggregations",
                    "field": name,
                    "aggregation": function,
                    "type": families.get(name),
                    "path": given,
                },
                hint="use first, last, min, max or count for a non-numeric field (a text field of digits is not "
                "read as numbers)",
            )
    return keys, declared


def dissolve_notes(
    ctx: RunContext,
    keys: list[str],
    features: int,
    groups: int,
    union_label: str,
    declared: dict[str, str],
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
            + ", ".join(f"{n} by {f}" for n, f in declared.items())
            + " (nulls are skipped; first/last are the first/last non-null value in input order; a sum over only "
            "nulls is null, not 0)"
        )
    if dropped:
        ctx.notes.append(f"fields not aggregated and not written (no aggregation declared): {', '.join(dropped)}")
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
    families = _field_families(ctx, "input_path")

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
    # The groups that must come out, counted on the input before the engine sees it: the distinct
    # key combinations (a null is one value of its own, as with null_keys='group').
    expected = len(gdf[keys].drop_duplicates()) if keys else min(len(gdf), 1)
    dropped = [f for f in fields if f not in keys and f not in declared]

    work = gdf[[*keys, *declared, geometry]]
    aggfunc: dict[str, Any] = {
        name: _sum if function == "sum" else AGGREGATIONS[function] for name, function in declared.items()
    }
    sizes = work.groupby(keys, dropna=False, sort=True).size() if keys else None
    if union_groups is None:
        out = work.dissolve(by=keys or None, aggfunc=aggfunc or "first", dropna=False, as_index=False, sort=True)
    else:
        out = _dissolve_with(work, keys, aggfunc or "first", union_groups)
    out = out[[*keys, *declared, geometry]]
    empty = shapely.is_missing(out.geometry.values) | shapely.is_empty(out.geometry.values)
    if empty.any():
        out = out.set_geometry([None if e else g for g, e in zip(out.geometry.values, empty, strict=True)], crs=gdf.crs)
        ctx.notes.append(
            f"{int(empty.sum())} groups have no geometry (all their features had none): written without one"
        )
    out = _restore_types(
        out,
        {
            **{k: families.get(k, "") for k in keys},
            **{n: AGGREGATION_RESULT_FAMILY.get(f, families.get(n, "")) for n, f in declared.items()},
        },
    )

    ctx.parameters["x-mapsmith:fields_dropped"] = dropped
    ctx.parameters["x-mapsmith:null_key_features"] = null_count
    dissolve_notes(ctx, keys, len(gdf), len(out), union_label, declared, dropped, null_count)
    write_output(ctx, out)
    _check_count(
        ctx,
        expected,
        f"the distinct combinations of {', '.join(keys)} in the input, counted before the dissolve"
        if keys
        else "one group for the whole layer",
    )
    counts = sizes.tolist() if sizes is not None else [len(gdf)] * len(out)
    chosen, window = page(range(len(out)), ctx.arguments)
    rows = _rows(out.iloc[chosen[0] : chosen[-1] + 1]) if chosen else []
    for row, i in zip(rows, chosen, strict=True):
        row["feature_count"] = int(counts[i])
    ctx.answer = {
        "group_count": len(out),
        "by_fields": keys,
        "aggregations": declared,
        "fields_dropped": dropped,
        "null_key_features": null_count,
        "groups": rows,
        "page": window,
    }


# -- merge_layers -------------------------------------------------------------------------------


def merge_layers(ctx: RunContext) -> None:
    import geopandas as gpd
    import pandas as pd

    set_engine(ctx)
    slots = [f"input_paths[{i}]" for i in range(len(ctx.arguments["input_paths"]))]
    family = _require_one_family(ctx, slots, "merge_layers")
    add_source = ctx.arguments["add_source_field"]
    declared = {s: _field_families(ctx, s) for s in slots}
    if add_source:
        having = [s for s in slots if _taken(SOURCE_FIELD, declared[s])]
        if having:
            raise InputError(
                f"{having[0]} already has a field {_taken(SOURCE_FIELD, declared[having[0]])!r}, which the "
                f"{SOURCE_FIELD!r} field add_source_field writes would collide with",
                code="FIELD_EXISTS",
                evidence={"field": SOURCE_FIELD, "inputs": having},
                hint=f"pass add_source_field=false, or rename the existing {SOURCE_FIELD!r} field first",
            )

    # The union of the schemas, in order of first appearance, and one type per field.
    order: list[str] = []
    for s in slots:
        order += [f for f in declared[s] if f not in order]
    _refuse_name_clashes(order, "the merged layer", {"fields_by_input": {s: list(declared[s]) for s in slots}})
    widened: list[str] = []
    types: dict[str, str] = {}
    for name in order:
        seen = {s: declared[s][name] for s in slots if name in declared[s]}
        kinds = set(seen.values())
        if len(kinds) == 1:
            types[name] = kinds.pop()
        elif kinds == {"integer", "real"}:
            widened.append(name)
            types[name] = "real"
        else:
            raise InputError(
                f"the field {name!r} has different types in the inputs: "
                + ", ".join(f"{s} {t}" for s, t in seen.items()),
                code="FIELD_TYPE_CONFLICT",
                evidence={"field": name, "types": seen},
                hint=f"convert {name!r} to one type in every input first, or rename it in the inputs where it "
                "means something else",
            )

    frames = []
    target = None
    for s in slots:
        frame = read_input(ctx, s)
        if target is None:
            target = frame.crs
        else:
            frame = align_to(ctx, frame, target, s)
        if frame.geometry.name != "geometry":
            frame = frame.rename_geometry("geometry")
        for name in widened:
            if declared[s].get(name) == "integer":
                values = frame[name].dropna()
                if (values.abs() > MAX_EXACT_FLOAT_INTEGER).any():
                    raise InputError(
                        f"the field {name!r} is integer in {s} and real elsewhere, and {s} holds integers beyond "
                        f"2^53 that a real field cannot hold exactly",
                        code="FIELD_TYPE_CONFLICT",
                        evidence={"field": name, "types": {t: declared[t].get(name) for t in slots}, "input": s},
                        hint=f"convert {name!r} to one type in every input first",
                    )
                frame[name] = frame[name].astype("float64")
        if add_source:
            frame[SOURCE_FIELD] = ctx.given_paths[s].replace("\\", "/")
        frames.append(frame)
    assert target is not None
    aligned = sorted(ctx.crs_decisions.get("x-mapsmith:alignment", {}))
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(target),
            "reason": "merged in the CRS of the first input (input_paths[0]), so its coordinates are written unchanged"
            + (f"; {', '.join(aligned)} transformed to it (see x-mapsmith:alignment)" if aligned else ""),
        }
    )
    columns = [*order, *([SOURCE_FIELD] if add_source else []), "geometry"]
    merged = pd.concat([f.reindex(columns=columns) for f in frames], ignore_index=True, sort=False)
    out = gpd.GeoDataFrame(merged, geometry="geometry", crs=target)
    out = _restore_types(out, types)

    lacking = {s: [f for f in order if f not in declared[s]] for s in slots}
    lacking = {s: f for s, f in lacking.items() if f}
    ctx.parameters["x-mapsmith:fields_filled_with_null"] = lacking
    for s, names in lacking.items():
        ctx.notes.append(f"{s} has no field {', '.join(names)}: its features carry null there")
    if widened:
        ctx.parameters["x-mapsmith:fields_widened"] = widened
        ctx.notes.append(
            f"integer and real in different inputs, written as real (every integer is within 2^53, so exactly): "
            f"{', '.join(widened)}"
        )
    if add_source:
        ctx.notes.append(f"the field {SOURCE_FIELD!r} holds each feature's input path, as given")
    seen_paths: dict[str, str] = {}
    for s in slots:
        resolved = str(ctx.paths[s].resolve())
        if resolved in seen_paths:
            ctx.warn(
                "DUPLICATE_INPUT",
                f"{s} is the same dataset as {seen_paths[resolved]}: its features are written twice",
                "pass each dataset once unless the duplication is intended",
            )
        seen_paths.setdefault(resolved, s)
    write_output(ctx, out)

    counts = {s: int(ctx.inputs[s].feature_count or 0) for s in slots}
    expected = sum(counts.values())
    _check_count(ctx, expected, "the sum of the inputs' counts, " + " + ".join(str(n) for n in counts.values()))
    assert ctx.temp_output is not None
    written = ctx.io.inspect(ctx.temp_output, None)
    ctx.check(
        "crs_matches",
        written.crs_wkt is not None and _crs_equal(written.crs_wkt, target),
        f"expected the first input's CRS {crs_label(target)}, got {written.crs_label}",
    )
    present = set(written.geometry_families)
    ctx.check(
        "geometry_types",
        present <= ({family} if family else set()),
        f"output holds {', '.join(sorted(present)) or 'no geometries'}; the inputs hold {family or 'no geometries'}",
    )
    ctx.answer = {
        "feature_count": len(out),
        "features_by_input": counts,
        "fields": columns[:-1],
        "fields_filled_with_null": lacking,
        "fields_widened_to_real": widened,
        "crs": crs_label(target),
        "inputs_transformed": aligned,
    }


# -- explode_layer ------------------------------------------------------------------------------


def explode_layer(ctx: RunContext) -> None:
    import numpy as np
    import pandas as pd
    import shapely

    set_engine(ctx)
    add_index = ctx.arguments["add_part_index"]
    existing = _taken(PART_INDEX_FIELD, ctx.inputs["input_path"].fields)
    if add_index and existing:
        raise InputError(
            f"the input already has a field {existing!r}; MapSmith will not overwrite it with {PART_INDEX_FIELD!r}",
            code="FIELD_EXISTS",
            evidence={"field": PART_INDEX_FIELD, "path": ctx.arguments["input_path"]},
            hint=f"pass add_part_index=false, or rename the existing {PART_INDEX_FIELD!r} field first",
        )
    gdf = read_input(ctx)
    geoms = gdf.geometry.values
    # Counted before the split: each feature gives one feature per part, and a feature with no
    # part at all (null geometry, empty multi-geometry) is carried unchanged as one feature.
    num_parts = shapely.get_num_geometries(geoms)
    expected = int(np.maximum(num_parts, 1).sum())
    parts, owner = shapely.get_parts(geoms, return_index=True)
    carried = (num_parts == 0).nonzero()[0]
    rows = np.concatenate([owner, carried])
    new_geoms = np.concatenate([parts, geoms[carried]])
    order = np.argsort(rows, kind="stable")  # features stay in input order, parts in part order
    rows, new_geoms = rows[order], new_geoms[order]
    out = gdf.iloc[rows].reset_index(drop=True)
    out = out.set_geometry(list(new_geoms), crs=gdf.crs)
    if add_index:
        index = pd.Series(rows).groupby(rows).cumcount().astype("Int64")
        index[np.isin(rows, carried)] = pd.NA
        attrs = [c for c in out.columns if c != out.geometry.name]
        out[PART_INDEX_FIELD] = pd.array(index, dtype="Int64")
        out = out[[*attrs, PART_INDEX_FIELD, out.geometry.name]]
    out = _restore_types(out, _field_families(ctx, "input_path"))

    multi = int((num_parts > 1).sum())
    ctx.notes.append(
        f"{len(gdf)} features, {multi} of them multi-part, split into {len(out)} single-part features; "
        "attributes are copied to every part"
        + (f"; {PART_INDEX_FIELD} numbers the parts of each feature from 0" if add_index else "")
    )
    if len(carried):
        ctx.notes.append(
            f"{len(carried)} features have no geometry parts (null or empty multi-geometry) and are carried "
            "unchanged as one feature each" + (f", with a null {PART_INDEX_FIELD}" if add_index else "")
        )
    write_output(ctx, out)
    _check_count(ctx, expected, "the sum over input features of their part counts, 1 for a feature with none")
    ctx.answer = {
        "input_features": len(gdf),
        "multi_part_features": multi,
        "feature_count": len(out),
        "features_without_parts": len(carried),
    }
