"""reproject_layer: a layer's coordinates transformed to another CRS by PROJ, with the pipeline recorded.

The transformation is chosen by ``mapsmith.crs.choose_transformer`` (never the first candidate
blindly) and recorded in the manifest's CRS decisions; nothing else about the features changes.

What this module must never do: move coordinates between two different datums by a ballpark
(datums treated as equal) unless the caller said ``allow_ballpark=true``; without it the chooser
refuses with ``CRS_BALLPARK_REFUSED`` and the error expected at the data in metres. Nor write a
feature the target CRS cannot place: where PROJ answers a finite coordinate with an infinite one
(a transverse Mercator 90 degrees from its meridian, a Mercator beyond the pole), the run is refused
with ``OUTSIDE_TARGET_CRS`` (``common.check_placed``); a NaN coordinate read is already invalid and
written empty, as PROJ answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.crs import choose_transformer, crs_label, parse_crs
from mapsmith_opensource.common import (
    check_placed,
    read_input,
    set_engine,
    transform_frame,
    warn_about_transformation,
    write_output,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from pyproj import CRS

    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("reproject_layer", "reproject_layer"),)
# The hint of a reprojection refused for a feature the target CRS cannot place (both engines).
REPROJECT_HINT = (
    "choose a target_crs whose area of use covers the data: describe_dataset gives input_path's extent in lon/lat, "
    "and resolve_crs a CRS's area of use (a UTM zone reaches about 3 degrees either side of its meridian; EPSG:4326 "
    "places every point)"
)


# -- reproject_layer --------------------------------------------------------------------------


def reproject_layer(ctx: RunContext) -> None:
    set_engine(ctx)
    info = ctx.inputs["input_path"]
    target = parse_crs(ctx.arguments["target_crs"])
    gdf = read_input(ctx)
    source = gdf.crs
    allow_ballpark = bool(ctx.arguments.get("allow_ballpark", False))
    transformer, record = choose_transformer(source, target, info.bounds_lonlat, allow_ballpark=allow_ballpark)
    out = transform_frame(gdf, transformer, target)
    check_placed(gdf.geometry.values, out.geometry.values, "input_path", crs_label(target), REPROJECT_HINT)
    record_reprojection(ctx, source, target, record)
    write_output(ctx, out)


def record_reprojection(ctx: RunContext, source: CRS, target: CRS, record: dict[str, Any]) -> None:
    """What a reprojection records, on either engine: the target and allow_ballpark among the parameters, the CRS
    decision with the chosen transformation, and a warning about it (an accepted ballpark with its size at the data)."""
    ctx.expected_output_crs = target.to_wkt()
    ctx.parameters["target_crs"] = crs_label(target)
    ctx.parameters["allow_ballpark"] = bool(ctx.arguments.get("allow_ballpark", False))
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(target),
            "reason": f"reprojection requested from {crs_label(source)} to {crs_label(target)}",
            "source_crs": crs_label(source),
            "target_crs": crs_label(target),
            "transformation": record,
        }
    )
    pair = f"{crs_label(source)} to {crs_label(target)}"
    accepted = record["x-mapsmith:chosen_by"].get("ballpark")
    if accepted is not None:
        # The caller accepted the ballpark knowingly; the warning still carries its size at the data.
        error_m = accepted.get("expected_error_m")
        size = f"about {error_m:g} m at the data" if error_m is not None else "of unknown size"
        ctx.warn(
            "BALLPARK_TRANSFORMATION",
            f"{pair}: accepted ballpark (allow_ballpark=true): PROJ treated two different datums as equal, "
            f"an error {size}",
            "install the PROJ grid named in the manifest's crs_decisions, or keep the data on its own datum",
        )
    else:
        warn_about_transformation(ctx, record, pair)
