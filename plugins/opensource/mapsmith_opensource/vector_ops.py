"""The opensource stack's vector operations: GeoPandas, Shapely, pyproj, pyogrio.

Each function takes a ``RunContext`` whose inputs have already passed the preconditions, computes
with a real engine, writes ``ctx.temp_output`` and records what it decided: the engine and its
version, the parameters it ran with, every CRS decision with its reason and PROJ pipelines. None of
them picks a CRS, a layer or a unit silently, and none writes anywhere but ``ctx.temp_output``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mapsmith.crs import crs_label
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    align_to,
    read_input,
    set_engine,
    write_output,
)
from mapsmith_opensource.field_ops import calculate_field as calculate_field
from mapsmith_opensource.field_ops import rename_fields as rename_fields
from mapsmith_opensource.field_ops import select_fields as select_fields
from mapsmith_opensource.layer_common import clip_to_region
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.table_points import table_to_points as table_to_points

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration("clip_layer", "clip_layer"),
    Registration("convert_format", "convert_format"),
    Registration("extract_layer", "extract_layer"),
    # Implemented in their own modules, registered here so the stack's module list is unchanged.
    Registration("table_to_points", "table_to_points"),
    Registration("calculate_field", "calculate_field"),
    Registration("select_fields", "select_fields"),
    Registration("rename_fields", "rename_fields"),
)


# -- clip_layer -------------------------------------------------------------------------------


def clip_layer(ctx: RunContext) -> None:
    import shapely

    set_engine(ctx)
    gdf = read_input(ctx)
    mask = read_input(ctx, "mask_path")
    info = ctx.inputs["input_path"]
    mask = align_to(ctx, mask, gdf.crs, "mask_path")
    aligned = "mask_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {})
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(gdf.crs),
            "reason": "clipped in input_path's CRS, so the input's coordinates are written unchanged"
            + ("; the mask was transformed to it (see x-mapsmith:alignment)" if aligned else ""),
        }
    )
    region = shapely.union_all(mask.geometry.values)
    hits, kept_geoms, dropped_parts = clip_to_region(gdf.geometry.values, region)
    out = gdf[hits].copy()
    out = out.set_geometry(kept_geoms, crs=gdf.crs)
    touching_only = out.geometry.isna()
    out = out[~touching_only]
    outside = int((~hits).sum())
    ctx.notes.append(
        f"{info.feature_count} input features: {len(out)} written (clipped to the mask), {outside} lie wholly "
        f"outside the mask, {int(touching_only.sum())} only touch it (their intersection has a lower dimension)"
    )
    if dropped_parts:
        ctx.notes.append(
            f"{dropped_parts} lower-dimension fragments (points or lines on the mask's edge) were not kept"
        )
    ctx.parameters["x-mapsmith:features_outside_mask"] = outside
    ctx.parameters["x-mapsmith:lower_dimension_fragments_dropped"] = dropped_parts
    write_output(ctx, out)


# -- convert_format / extract_layer -----------------------------------------------------------


def _copy(ctx: RunContext) -> None:
    set_engine(ctx)
    gdf = read_input(ctx)
    write_output(ctx, gdf)
    written = io.inspect(ctx.temp_output, None)
    missing = [f for f in ctx.inputs["input_path"].fields if f not in written.fields]
    ctx.check(
        "x-mapsmith:fields_preserved",
        not missing,
        f"{len(ctx.inputs['input_path'].fields)} input fields; missing after the write: {missing or 'none'}",
    )


def convert_format(ctx: RunContext) -> None:
    target = Path(ctx.arguments["output_path"]).suffix.lower()
    ctx.parameters["x-mapsmith:output_format"] = io.WRITE_DRIVERS.get(target, target)
    _copy(ctx)


def extract_layer(ctx: RunContext) -> None:
    ctx.parameters["layer"] = ctx.layers["input_path"]
    _copy(ctx)
