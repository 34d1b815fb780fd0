"""Distances on the ground for spatial_join (within_distance) and nearest_join: planar in input_path's
CRS where it is projected and true to scale at the data, else candidates found in a UTM zone and every
distance measured geodesically on the input's own ellipsoid.

It must never measure a distance in degrees, nor write the UTM coordinates it searches in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mapsmith.crs import choose_transformer, crs_label
from mapsmith_opensource.common import (
    MAX_SCALE_DISTORTION,
    MetricFrame,
    scale_distortion,
    to_metric,
    transform_frame,
)
from mapsmith_opensource.join_ops.shared import _aligned

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np
    from pyproj import CRS

    from mapsmith.runner import RunContext


# Where distances are geodesic, candidates are found in a UTM zone first, within this much more
# than the wanted distance: a UTM zone's scale differs from true by at most about 0.1 % inside the
# zone, so 1 % keeps every pair whose geodesic distance qualifies (wider layers are warned about).
GEODESIC_CANDIDATE_SLACK = 0.01


# -- distances on the ground ------------------------------------------------------------------


@dataclass
class _Ground:
    """Where input_path and join_path are placed to measure distances in metres, and how."""

    metric: MetricFrame
    join: gpd.GeoDataFrame  # join_path in metric.crs
    geodesic: bool
    _back: Any = field(default=None, repr=False)

    def search_units(self, metres: float) -> float:
        """A search radius in analysis units, widened where the final measure is geodesic."""
        return self.metric.units(metres * (1 + GEODESIC_CANDIDATE_SLACK if self.geodesic else 1.0))

    def metres(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """The ground distance between input feature ``left[k]`` and join feature ``right[k]``."""
        import numpy as np
        import shapely

        a = self.metric.frame.geometry.values[left]
        b = self.join.geometry.values[right]
        if not self.geodesic:
            return np.asarray(shapely.distance(a, b), dtype=float) * self.metric.metres_per_unit
        if len(a) == 0:
            return np.zeros(0)
        # The nearest points are found in the UTM zone; the distance between them is measured on
        # the ellipsoid of the input's own datum, after mapping them back with the return leg.
        xy = shapely.get_coordinates(shapely.shortest_line(a, b))
        if self._back is None:
            self._back = choose_transformer(self.metric.crs, self.metric.source, self.metric.aoi)[0]
        x, y = self._back.transform(xy[:, 0], xy[:, 1])
        source = self.metric.source
        if not source.is_geographic:
            from pyproj import Transformer

            x, y = Transformer.from_crs(source, source.geodetic_crs, always_xy=True).transform(x, y)
        _, _, dist = source.get_geod().inv(x[0::2], y[0::2], x[1::2], y[1::2])
        return np.asarray(dist, dtype=float)


def _record_planar(ctx: RunContext, metric: MetricFrame, input_features: int) -> None:
    ctx.parameters["x-mapsmith:distance_method"] = (
        f"planar in {crs_label(metric.source)} ({metric.metres_per_unit} m per unit)"
        if input_features
        else "none: input_path is empty"
    )


def _ground(ctx: RunContext, left: gpd.GeoDataFrame, join: gpd.GeoDataFrame, purpose: str) -> _Ground:
    """Place both layers for measuring: planar in input_path's CRS when it is projected and true to
    scale at the data, else candidates in an estimated UTM zone measured geodesically. Recorded."""
    metric = to_metric(ctx, left, purpose)
    source = metric.source
    if not metric.transformed:
        _record_planar(ctx, metric, len(left))
        return _Ground(metric, join, geodesic=False)
    transformer, _ = choose_transformer(source, metric.crs, metric.aoi)
    join_metric = transform_frame(join, transformer, metric.crs)
    ellipsoid = source.ellipsoid.name if source.ellipsoid else "unknown"
    if source.is_geographic:
        why = f"{crs_label(source)} is geographic (degrees), so metres cannot be measured in it"
    else:
        distortion = scale_distortion(source, metric.aoi) or 0.0
        why = (
            f"{crs_label(source)} distorts distances by {distortion:.1%} at the data's centre (more than "
            f"{MAX_SCALE_DISTORTION:.0%})"
        )
    ctx.crs_decisions["reason"] = (
        f"{why}; both layers were placed in the UTM zone estimated from input_path's extent "
        f"({crs_label(metric.crs)}) only to find candidate pairs, and every distance was measured geodesically "
        f"on the {ellipsoid} ellipsoid between the pair's nearest points; the output keeps input_path's own "
        "coordinates" + _aligned(ctx, "join_path")
    )
    ctx.parameters["x-mapsmith:distance_method"] = (
        f"geodesic on the {ellipsoid} ellipsoid (candidates found in {crs_label(metric.crs)})"
    )
    return _Ground(metric, join_metric, geodesic=True)


@dataclass(frozen=True)
class _CrsOnly:
    """A layer known by its CRS alone: all that to_metric reads of a layer it leaves in place."""

    crs: CRS
