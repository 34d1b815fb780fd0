"""overlay_layers, and the registrations of the whole-layer operations (overlay, dissolve, merge, explode).

An overlay cuts two polygon layers against each other by one of geopandas.overlay's rules and proves what
it kept: every piece it did not keep (lower-dimension fragments along shared edges, pieces without area)
is counted and reported. What it must never do: drop a fragment or a field without counting it and
saying so; repair an invalid input silently; compute in another CRS than the main input's without
recording it. dissolve_layer lives in dissolve_ops, merge_layers and explode_layer in merge_explode_ops;
their registrations stay here, where the stack's module list (``OPERATION_MODULES``) finds them, and the
names other engines import from this module (sedonadb_ops, spark_ops, the qgis and esri mappings) are
re-exported below until they import from the new modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label
from mapsmith.errors import InputError
from mapsmith_opensource.common import align_to, read_input, require_valid, set_engine, write_output
from mapsmith_opensource.dissolve_ops import (  # noqa: F401  (re-exported: see the docstring)
    _dissolve_with,
    _parse_by_fields,
    dissolve_layer,
    dissolve_notes,
    dissolve_plan,
)
from mapsmith_opensource.layer_common import (
    check_count,
    field_families,
    field_not_found,
    no_geometry,
    refuse_name_clashes,
    restore_types,
    taken_name,
)
from mapsmith_opensource.merge_explode_ops import explode_layer, merge_layers  # noqa: F401
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from collections.abc import Callable

    import geopandas as gpd

    from mapsmith.runner import RunContext

    # (input layer, overlay layer) -> geopandas.overlay(how="intersection", keep_geom_type=False)'s frame
    Intersection = Callable[[gpd.GeoDataFrame, gpd.GeoDataFrame], gpd.GeoDataFrame]

REGISTRATIONS = (
    Registration("overlay_layers", "overlay_layers"),
    Registration("dissolve_layer", "dissolve_layer"),
    Registration("merge_layers", "merge_layers"),
    Registration("explode_layer", "explode_layer"),
)

# The old private names other stacks' modules import from here (qgis and esri mappings, spark_ops).
_check_count = check_count
_field_not_found = field_not_found

# The suffixes GeoPandas gives a field both overlay inputs carry (input_path's, overlay_path's).
OVERLAY_SUFFIXES = ("_1", "_2")


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


def polygonal_parts(pieces: Any) -> tuple[Any, int]:
    """keep_geom_type made explicit: each piece's polygonal part (None where it has none) and how many
    lower-dimension fragments were dropped. Polygons and multipolygons are kept exactly as the engine made them
    (every engine's pieces pass here: sedonadb_overlay_files hands over the others only)."""
    import numpy as np
    import shapely

    kept = np.array(pieces, dtype=object)
    fragments = 0
    for i in np.flatnonzero(~np.isin(shapely.get_type_id(kept), (3, 6))):
        parts = _flat_parts(kept[i])
        polygons = [p for p in parts if shapely.get_dimensions(p) == 2 and not p.is_empty]
        fragments += len(parts) - len(polygons)
        kept[i] = shapely.union_all(polygons) if polygons else None
    return kept, fragments


def overlay_fields(how: str, left_fields: list[str], right_fields: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The fields an overlay writes, and those both layers carry with their suffixed names; refused before any
    engine runs when a suffixed name is taken or two output fields would share a name (every engine calls it)."""
    shared = [c for c in left_fields if c in right_fields]
    renamed: dict[str, list[str]] = {}
    if how != "difference":  # difference carries input_path's fields only
        for name in shared:
            taken = [t for s in OVERLAY_SUFFIXES if (t := taken_name(name + s, left_fields + right_fields))]
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
    refuse_name_clashes(
        output_fields, f"the {how} of the two layers", {"input_fields": left_fields, "overlay_fields": right_fields}
    )
    return renamed, output_fields


def overlay_layers(
    ctx: RunContext, intersection: Intersection | None = None, intersection_label: str = "geopandas.overlay"
) -> None:
    """``intersection``: another engine's pieces for how='intersection' (sedonadb_ops); the rest is this code."""
    import geopandas as gpd

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
        missing = no_geometry(frame)
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
    # Polygons and multipolygons (nearly every piece) are kept exactly as the engine made them, found in one
    # vectorised call: a loop over every piece took 0.4 s of a 3.5 s run at 156,202 pieces.
    kept, fragments = polygonal_parts(result.geometry.values)
    result = result.set_geometry(list(kept), crs=left.crs)
    no_area = result.geometry.isna()
    out = result[~no_area].reset_index(drop=True)
    families = {}
    carried = [("input_path", left_fields)] + ([("overlay_path", right_fields)] if how != "difference" else [])
    for key, fields in carried:
        declared = field_families(ctx, key)
        suffix = OVERLAY_SUFFIXES[0] if key == "input_path" else OVERLAY_SUFFIXES[1]
        for name in fields:
            families[name + suffix if name in renamed else name] = declared.get(name, "")
    out = restore_types(out, families)

    tally = OverlayTally(len(result), len(out), int(no_area.sum()), fragments)
    record_overlay(ctx, f"{intersection_label}(how={how!r}, keep_geom_type=False)", tally, renamed, without_geometry)
    write_output(ctx, out)


@dataclass(frozen=True)
class OverlayTally:
    """What an overlay's engine gave and what MapSmith kept of it."""

    pieces: int  # the engine's pieces
    written: int  # those with a polygonal part
    no_area: int  # those without (the layers only touch there)
    fragments: int  # lower-dimension fragments dropped from the pieces


def record_overlay(
    ctx: RunContext, made_by: str, tally: OverlayTally, renamed: dict[str, list[str]], without_geometry: dict[str, int]
) -> None:
    """The overlay's parameters, notes and answer, whichever engine cut the pieces (``made_by`` names it)."""
    how = ctx.arguments["how"]
    ctx.parameters["x-mapsmith:lower_dimension_fragments_dropped"] = tally.fragments
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    ctx.notes.append(
        f"{made_by} gave {tally.pieces} pieces; MapSmith kept the polygonal part of each: {tally.written} written, "
        f"{tally.no_area} had no area at all (where the layers only touch), {tally.fragments} lower-dimension "
        "fragments (lines along shared edges, points at touching corners) were dropped"
    )
    if renamed:
        ctx.notes.append(
            "fields in both layers were renamed: "
            + ", ".join(f"{k} -> {v[0]} (input_path), {v[1]} (overlay_path)" for k, v in renamed.items())
        )
    ctx.answer = {
        "how": how,
        "feature_count": tally.written,
        "lower_dimension_fragments_dropped": tally.fragments,
        "pieces_without_area_dropped": tally.no_area,
        "renamed_fields": renamed,
        "input_features_without_geometry": without_geometry,
    }
