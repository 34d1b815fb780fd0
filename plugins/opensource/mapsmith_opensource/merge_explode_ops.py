"""merge_layers and explode_layer: many layers side by side into one, and multi-part features into parts.

Both prove their count from the inputs before the engine ran (the summed feature counts of a merge, the
summed part counts of an explode) by reading the written file back. What they must never do: drop a
feature or a field without counting it and saying so; coerce a field's type in a way that loses values
(an integer beyond 2^53 is never widened to real); transform an input without recording it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith.crs import crs_label
from mapsmith.errors import InputError
from mapsmith_opensource.common import align_to, read_input, set_engine, write_output
from mapsmith_opensource.layer_common import (
    check_count,
    crs_equal,
    field_families,
    refuse_name_clashes,
    require_one_family,
    restore_types,
    taken_name,
)

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

SOURCE_FIELD = "source"
PART_INDEX_FIELD = "part_index"
# Integers above this are not all representable as a 64-bit float: widening them would round.
MAX_EXACT_FLOAT_INTEGER = 2**53

# -- merge_layers -------------------------------------------------------------------------------


def merge_layers(ctx: RunContext) -> None:
    import geopandas as gpd
    import pandas as pd

    set_engine(ctx)
    slots = [f"input_paths[{i}]" for i in range(len(ctx.arguments["input_paths"]))]
    family = require_one_family(ctx, slots, "merge_layers")
    add_source = ctx.arguments["add_source_field"]
    declared = {s: field_families(ctx, s) for s in slots}
    if add_source:
        having = [s for s in slots if taken_name(SOURCE_FIELD, declared[s])]
        if having:
            raise InputError(
                f"{having[0]} already has a field {taken_name(SOURCE_FIELD, declared[having[0]])!r}, which the "
                f"{SOURCE_FIELD!r} field add_source_field writes would collide with",
                code="FIELD_EXISTS",
                evidence={"field": SOURCE_FIELD, "inputs": having},
                hint=f"pass add_source_field=false, or rename the existing {SOURCE_FIELD!r} field first",
            )

    # The union of the schemas, in order of first appearance, and one type per field.
    order: list[str] = []
    for s in slots:
        order += [f for f in declared[s] if f not in order]
    refuse_name_clashes(order, "the merged layer", {"fields_by_input": {s: list(declared[s]) for s in slots}})
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
    out = restore_types(out, types)

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
    check_count(ctx, expected, "the sum of the inputs' counts, " + " + ".join(str(n) for n in counts.values()))
    assert ctx.temp_output is not None
    written = ctx.io.inspect(ctx.temp_output, None)
    ctx.check(
        "crs_matches",
        written.crs_wkt is not None and crs_equal(written.crs_wkt, target),
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
    existing = taken_name(PART_INDEX_FIELD, ctx.inputs["input_path"].fields)
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
    out = restore_types(out, field_families(ctx, "input_path"))

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
    check_count(ctx, expected, "the sum over input features of their part counts, 1 for a feature with none")
    ctx.answer = {
        "input_features": len(gdf),
        "multi_part_features": multi,
        "feature_count": len(out),
        "features_without_parts": len(carried),
    }
