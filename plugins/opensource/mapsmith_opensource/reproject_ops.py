"""reproject_layer: a layer's coordinates transformed to another CRS by PROJ, with the pipeline recorded.

The transformation is chosen by ``mapsmith.crs.choose_transformer`` (never the first candidate
blindly) and recorded in the manifest's CRS decisions; nothing else about the features changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith.crs import choose_transformer, crs_label, parse_crs
from mapsmith_opensource.common import read_input, set_engine, transform_frame, warn_about_transformation, write_output
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("reproject_layer", "reproject_layer"),)


# -- reproject_layer --------------------------------------------------------------------------


def reproject_layer(ctx: RunContext) -> None:
    set_engine(ctx)
    info = ctx.inputs["input_path"]
    target = parse_crs(ctx.arguments["target_crs"])
    gdf = read_input(ctx)
    source = gdf.crs
    transformer, record = choose_transformer(source, target, info.bounds_lonlat)
    out = transform_frame(gdf, transformer, target)
    ctx.expected_output_crs = target.to_wkt()
    ctx.parameters["target_crs"] = crs_label(target)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(target),
            "reason": f"reprojection requested from {crs_label(source)} to {crs_label(target)}",
            "source_crs": crs_label(source),
            "target_crs": crs_label(target),
            "transformation": record,
        }
    )
    warn_about_transformation(ctx, record, f"{crs_label(source)} to {crs_label(target)}")
    write_output(ctx, out)
