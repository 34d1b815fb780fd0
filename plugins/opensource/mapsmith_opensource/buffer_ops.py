"""buffer_layer: buffers at a distance in metres, computed where metres are metres.

The distance is never applied in degrees; the layer is buffered in a metric CRS chosen for it and
the result written back in the input's CRS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith_opensource.common import read_input, set_engine, to_metric, write_output
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("buffer_layer", "buffer_layer"),)


# -- buffer_layer -----------------------------------------------------------------------------


def buffer_layer(ctx: RunContext) -> None:
    set_engine(ctx)
    distance = ctx.arguments["distance_meters"]
    segments = ctx.arguments["segments_per_quarter_circle"]
    gdf = read_input(ctx)
    metric = to_metric(ctx, gdf, "buffered")
    units = metric.units(distance)
    work = metric.frame.set_geometry(metric.frame.geometry.buffer(units, quad_segs=segments))
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
    write_output(ctx, metric.back(ctx, work))
