"""Field operations on the opensource stack: calculate_field, select_fields, rename_fields.

They change a layer's attribute columns and never its geometries, its CRS or its row order. Names
are exact (case-sensitive): an unknown name is refused with the names that exist, a clash is
refused with both names, and an existing column is replaced only when ``overwrite_field=true``
says so. calculate_field reads its expression through ``mapsmith.calculations`` (a parser built
on ``mapsmith.expressions``' tokens, never ``eval``); the geometry measures it offers are geodesic
metres on the layer's ellipsoid (``measures``). Engines are imported inside functions only.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from mapsmith import calculations, derived_fields
from mapsmith.crs import crs_label
from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.common import read_input, set_engine, write_output
from mapsmith_opensource.derived import measurable
from mapsmith_opensource.measure_lengths import warn_measured_in_2d
from mapsmith_opensource.measures import claim_output_field, ellipsoid_name, geodesic_measures

if TYPE_CHECKING:
    import geopandas as gpd
    import pandas as pd

    from mapsmith.runner import RunContext

# Values of the new column shown in the answer (the manifest keeps the count, the file keeps all).
SAMPLE_ROWS = 10


def _attribute_names(gdf: gpd.GeoDataFrame) -> list[str]:
    return [str(c) for c in gdf.columns if c != gdf.geometry.name]


def _unknown_fields(argument: str, unknown: list[str], existing: list[str]) -> InputError:
    close = {name: difflib.get_close_matches(name, existing, n=2, cutoff=0.6) for name in unknown}
    suggestions = "; ".join(f"{n!r}: did you mean {' or '.join(map(repr, c))}?" for n, c in close.items() if c)
    return InputError(
        f"{argument}: the layer has no field {', '.join(map(repr, unknown))}"
        + (f" ({suggestions})" if suggestions else "")
        + f". Its fields: {', '.join(existing) or '(none)'}",
        code="FIELD_NOT_FOUND",
        evidence={"argument": argument, "unknown": unknown, "fields": existing, "did_you_mean": close},
        hint="field names are case-sensitive; describe_dataset lists them",
    )


# GDAL names a GeoPackage's geometry column "geom"; SQLite compares column names without case, so an
# attribute of that name cannot be written beside it (GDAL fails with "Error adding field").
GPKG_GEOMETRY_COLUMN = "geom"


def refuse_reserved_names(ctx: RunContext, names: list[str], argument: str) -> None:
    """Refuse, before writing, a field name the output format keeps for its geometry column."""
    if ctx.temp_output is None or ctx.temp_output.suffix.lower() != ".gpkg":
        return
    taken = [n for n in names if n.lower() == GPKG_GEOMETRY_COLUMN]
    if taken:
        raise InputError(
            f"a field named {taken[0]!r} cannot be written to a GeoPackage: GDAL names the geometry column "
            f"{GPKG_GEOMETRY_COLUMN!r} (column names compare without case)",
            code="FIELD_NAME_RESERVED",
            evidence={"argument": argument, "field": taken[0], "format": ".gpkg"},
            hint="rename the field (rename_fields, or in the table), or write .parquet or .fgb",
        )


def _check_written_fields(
    ctx: RunContext, expected: list[str], count: int, typed: tuple[str, str] | None = None
) -> None:
    """The written file has exactly the fields meant, in that order, and every row; with ``typed``
    (field, integer|real|text), that field's type as stored in the file is that type's family."""
    from mapsmith_opensource import io

    assert ctx.temp_output is not None
    written = io.inspect(ctx.temp_output, None)
    detail = f"fields written: {list(written.fields)}; expected {expected}"
    same_type = True
    if typed is not None:
        stored = _stored_type(ctx.temp_output, typed[0])
        same_type = stored.startswith(TYPE_FAMILIES[typed[1]])
        detail += f"; {typed[0]} is stored as {stored} for field_type {typed[1]}"
    ctx.check("x-mapsmith:fields_as_requested", list(written.fields) == expected and same_type, detail)
    ctx.check("feature_count_exact", written.feature_count == count, f"{count} rows in, {written.feature_count} out")


# The stored type's name (pyarrow's for Parquet, pyogrio's numpy name otherwise) starts with these.
TYPE_FAMILIES: dict[str, str | tuple[str, ...]] = {
    "integer": "int",
    "real": ("float", "double"),
    "text": ("object", "str", "string", "large_string"),
}


def _stored_type(path: Any, field: str) -> str:
    """A field's type as the file declares it (not as pandas reads it back: NULLs widen ints to floats)."""
    from mapsmith_opensource import io

    if io.is_parquet(path):
        return str(io.parquet_schema(path).field(field).type)
    import pyogrio

    info = pyogrio.read_info(path)
    return str(dict(zip(info["fields"], info["dtypes"], strict=True))[field])


# -- select_fields ----------------------------------------------------------------------------


def select_fields(ctx: RunContext) -> None:
    set_engine(ctx)
    args = ctx.arguments
    keep, drop = args.get("keep_fields"), args.get("drop_fields")
    if (keep is None) == (drop is None):
        raise ArgumentError(
            "select_fields needs exactly one of keep_fields and drop_fields",
            code="ARGUMENT_NOT_APPLICABLE" if keep is not None else "FIELD_LIST_REQUIRED",
            evidence={"keep_fields": keep, "drop_fields": drop},
            hint="keep_fields='id,name' keeps those (in the layer's order); drop_fields='tmp' removes those",
        )
    argument = "keep_fields" if keep is not None else "drop_fields"
    names = _name_list(argument, str(keep if keep is not None else drop))
    gdf = read_input(ctx)
    existing = _attribute_names(gdf)
    unknown = [n for n in names if n not in existing]
    if unknown:
        raise _unknown_fields(argument, unknown, existing)
    chosen = set(names)
    # The layer's own order is kept either way: a list given out of order does not reorder columns.
    result = [f for f in existing if (f in chosen) == (keep is not None)]
    out = gdf[[*result, gdf.geometry.name]]
    dropped = [f for f in existing if f not in result]
    ctx.parameters["x-mapsmith:fields_written"] = result
    ctx.notes.append(
        f"{len(result)} of {len(existing)} fields written ({', '.join(result) or 'none'}); dropped: "
        f"{', '.join(dropped) or 'none'}; the layer's field order is kept"
    )
    write_output(ctx, out)
    _check_written_fields(ctx, result, len(gdf))
    ctx.answer = {"fields": result, "dropped": dropped, "feature_count": len(gdf)}


def _name_list(argument: str, value: str) -> list[str]:
    """Comma-separated names, each stripped; an empty name or a repeated one is refused."""
    names = [n.strip() for n in value.split(",")]
    if any(not n for n in names):
        raise ArgumentError(
            f"{argument} has an empty name: {value!r}",
            code="FIELD_LIST_INVALID",
            evidence={"argument": argument, "value": value},
            hint="separate field names with single commas, e.g. 'id,name'",
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ArgumentError(
            f"{argument} names {', '.join(map(repr, repeated))} more than once",
            code="FIELD_LIST_INVALID",
            evidence={"argument": argument, "repeated": repeated},
            hint="name each field once",
        )
    return names


# -- rename_fields ----------------------------------------------------------------------------


def rename_fields(ctx: RunContext) -> None:
    set_engine(ctx)
    mapping = _mapping(ctx.arguments["renames"])
    gdf = read_input(ctx)
    existing = _attribute_names(gdf)
    unknown = [old for old in mapping if old not in existing]
    if unknown:
        raise _unknown_fields("renames", unknown, existing)
    result = [mapping.get(f, f) for f in existing]
    # A clash: two fields would end with one name (a new name equal to a field that stays, or to
    # another new name), or a new name is the geometry column's. Swaps (a->b, b->a) are fine.
    clashes = sorted({n for n in result if result.count(n) > 1})
    if gdf.geometry.name in result:
        clashes.append(gdf.geometry.name)
    if clashes:
        sources = {n: [f for f in existing if mapping.get(f, f) == n] for n in clashes}
        raise InputError(
            f"renames would give two columns the same name: {', '.join(map(repr, clashes))}",
            code="FIELD_NAME_CLASH",
            evidence={"clashes": sources, "fields": existing, "geometry_column": gdf.geometry.name},
            hint="choose new names that no other field keeps (drop a field first with select_fields if it should go)",
        )
    refuse_reserved_names(ctx, list(mapping.values()), "renames")
    out = gdf.rename(columns=mapping)
    ctx.parameters["renames"] = mapping
    ctx.notes.append(
        "renamed " + ", ".join(f"{old} -> {new}" for old, new in mapping.items()) + "; values and order unchanged"
    )
    write_output(ctx, out)
    _check_written_fields(ctx, result, len(gdf))
    ctx.answer = {"fields": result, "renamed": mapping, "feature_count": len(gdf)}


def _mapping(text: str) -> dict[str, str]:
    """'old:new, old2:new2' as a mapping; malformed pairs and a name renamed twice are refused."""
    mapping: dict[str, str] = {}
    for pair in text.split(","):
        old, sep, new = pair.partition(":")
        old, new = old.strip(), new.strip()
        if not sep or not old or not new:
            raise ArgumentError(
                f"renames: {pair.strip()!r} is not old:new",
                code="FIELD_LIST_INVALID",
                evidence={"argument": "renames", "value": text, "pair": pair.strip()},
                hint="write renames='old_name:new_name, other:better'",
            )
        if old in mapping:
            raise ArgumentError(
                f"renames: {old!r} is renamed twice",
                code="FIELD_LIST_INVALID",
                evidence={"argument": "renames", "field": old},
                hint="rename each field once",
            )
        mapping[old] = new
    return mapping


# -- calculate_field --------------------------------------------------------------------------


def calculate_field(ctx: RunContext) -> None:
    set_engine(ctx)
    args = ctx.arguments
    # Parse before reading anything: a malformed expression is refused at once, with its position.
    expression = calculations.parse(args["expression"], argument="expression")
    gdf = read_input(ctx)
    if derived_fields.own_fields("calculate_field", ctx.arguments):
        gdf = measurable(ctx, gdf)  # a value of the geometry written, never of an invalid ring
    field = args["output_field"]
    replaced = claim_output_field(ctx, gdf, field, overwrite=bool(args["overwrite_field"]))
    refuse_reserved_names(ctx, [field], "output_field")
    kinds = calculations.field_kinds(gdf)
    inferred = calculations.bind(expression, kinds)
    measures = _measures(ctx, gdf, expression.measures)
    result = calculations.evaluate(expression, gdf, measures)
    declared = args.get("field_type")
    field_type = calculations.settle_type(expression, result, declared)
    out = gdf.copy()
    out[field] = calculations.as_column(result, field_type)
    ctx.parameters["x-mapsmith:expression_canonical"] = expression.canonical()
    ctx.parameters["x-mapsmith:field_type"] = field_type
    ctx.parameters["x-mapsmith:field_type_source"] = "declared" if declared else "inferred"
    null_count = int(result.missing.sum())
    if null_count:
        ctx.notes.append(
            f"{null_count} features get a NULL {field}: "
            + "; ".join(f"{n} because {why}" for why, n in result.null_reasons.items() if n)
        )
    write_output(ctx, out)
    _check_written_fields(
        ctx, [*_attribute_names(gdf), *([] if replaced else [field])], len(gdf), typed=(field, field_type)
    )
    ctx.answer = {
        "output_field": field,
        "field_type": field_type,
        "field_type_source": "declared" if declared else "inferred",
        "inferred_type": inferred,
        "field_replaced": replaced,
        "expression": expression.canonical(),
        "feature_count": len(gdf),
        "null_count": null_count,
        "null_reasons": {k: v for k, v in result.null_reasons.items() if v},
        "sample": _sample(out, field),
    }


def _measures(ctx: RunContext, gdf: gpd.GeoDataFrame, wanted: tuple[str, ...]) -> dict[str, list[float | None]]:
    """The geometry measures the expression reads, per feature; a measure the layer's geometry
    type does not have ($area of a line) is refused, never answered with zeros."""
    import shapely

    if not wanted:
        return {}
    families = set(ctx.inputs["input_path"].geometry_families) if "input_path" in ctx.inputs else set()
    applies = {"area": "polygon", "perimeter": "polygon", "length": "line", "x": "point", "y": "point"}
    for name in wanted:
        if families and families != {applies[name]}:
            raise InputError(
                f"${name} is defined for {applies[name]} layers; this layer holds {', '.join(sorted(families))}",
                code="MEASURE_NOT_APPLICABLE",
                evidence={"measure": f"${name}", "geometry_types": sorted(families), "applies_to": applies[name]},
                hint={
                    "area": "measure lines with $length; make polygons first (buffer_layer) for an area",
                    "perimeter": "a line's length is $length",
                    "length": "a polygon's boundary length is $perimeter",
                    "x": "make points first (centroid_layer or point_on_surface)",
                    "y": "make points first (centroid_layer or point_on_surface)",
                }[name],
            )
    values: dict[str, list[float | None]] = {}
    crs = gdf.crs
    if {"area", "length", "perimeter"} & set(wanted):
        lengths, areas = geodesic_measures(gdf)
        warn_measured_in_2d(
            ctx,
            gdf,
            "$area, $length and $perimeter",
            "they are horizontal; measure_length with use_z=true gives lengths along the slope",
        )
        values.update({"area": areas, "length": lengths, "perimeter": lengths})
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
                "reason": f"$area, $length and $perimeter are geodesic on the {ellipsoid_name(gdf)} ellipsoid of "
                "the layer's own datum, in metres and square metres; geometries are written unchanged",
                "source_crs": crs_label(crs),
                "target_crs": None,
            }
        )
    if {"x", "y"} & set(wanted):
        geoms = gdf.geometry.values
        absent = shapely.is_missing(geoms) | shapely.is_empty(geoms)
        xs = shapely.get_x(geoms)
        ys = shapely.get_y(geoms)
        values["x"] = [None if a else float(v) for a, v in zip(absent, xs, strict=True)]
        values["y"] = [None if a else float(v) for a, v in zip(absent, ys, strict=True)]
        unit = "degrees" if crs.is_geographic else (crs.axis_info[0].unit_name if crs.axis_info else "unknown")
        ctx.parameters["x-mapsmith:xy_unit"] = unit
        ctx.notes.append(f"$x and $y are the points' coordinates in {crs_label(crs)}, in {unit}")
        ctx.crs_decisions.setdefault("analysis_crs", crs_label(crs))
        ctx.crs_decisions.setdefault("reason", f"$x and $y are read in the layer's own CRS, {crs_label(crs)}")
    return values


def _sample(out: pd.DataFrame, field: str) -> list[Any]:
    import math

    return [
        None if v is None or (isinstance(v, float) and math.isnan(v)) else (v.item() if hasattr(v, "item") else v)
        for v in out[field].head(SAMPLE_ROWS).tolist()
    ]
