"""The opensource stack's join operations: attributes moved between datasets by location, proximity,
area of overlap or key.

spatial_join and nearest_join (by location), count_in_polygons and summarize_points_in_polygons
(points aggregated per polygon), apportion_by_area (areal interpolation) and join_attributes (by
key, from a table). Each moves its second input into input_path's CRS with ``common.align_to``
(recorded), measures distances and areas on the ground (planar only in a projected CRS true to scale
at the data, otherwise geodesically on the ellipsoid; never in degrees), writes input_path's own
geometry and fields unchanged, and counts what it did not match or left out, in the answer and in
the manifest's parameters.

None of these functions renames a field, normalises a key, breaks a tie or counts a boundary point
without recording the rule it used, and none normalises a key unless the conversion is lossless.
Engines are imported inside functions: importing this package must stay cheap.

One module per operation, each with its own REGISTRATIONS (listed in OPERATION_MODULES):

- ``shared``: field lookups and refusals, attaching rows, the CRS record, geodesic areas
- ``ground``: where distances are measured (planar or geodesic), for spatial_join and nearest_join
- ``spatial_join``: the GeoPandas engine, and the preparation, assembly and record every engine shares
- ``spatial_join_duckdb``: the DuckDB engine, file to file (its threshold is DUCKDB_MIN_ROWS there)
- ``spatial_join_sedonadb``: the SedonaDB engine, file to file (sedonadb_ops' WKB path otherwise; its threshold
  is FILE_MIN_FEATURES there)
- ``points_in_polygons_sql``, ``points_in_polygons_duckdb``: count_in_polygons and summarize_points_in_polygons
  aggregated in SQL, and the DuckDB engine that runs it; ``points_in_polygons_first``: the same by first polygon,
  no point grouped (SedonaDB on many points)
- ``nearest``: nearest_join
- ``points_in_polygons``: count_in_polygons and summarize_points_in_polygons
- ``apportion``: apportion_by_area
- ``attributes``: join_attributes

The names below are the ones other engines (mapsmith_sedona.spark_ops, sedonadb_ops) reuse, kept here
so they can say ``join_ops.<name>``. A setting is not among them: assign it in the module that reads it.
"""

from __future__ import annotations

from mapsmith_opensource.join_ops.ground import _CrsOnly, _record_planar
from mapsmith_opensource.join_ops.nearest import TIE_RULE, TIE_TOLERANCE_METRES
from mapsmith_opensource.join_ops.points_in_polygons import (
    BOUNDARY_RULE,
    _parse_statistics,
)

# Other engines that reuse this validator compute the plain statistics only (Spark's summarize does): for
# them weighted_mean is refused, not dropped. The opensource engines register points_in_polygons' own.
from mapsmith_opensource.join_ops.points_in_polygons import (
    validate_summarize_points_unweighted as validate_summarize_points,
)
from mapsmith_opensource.join_ops.shared import (
    JOIN_SUFFIX,
    UNDEFINED_ON_INVALID,
    _numeric_field,
    _record_topological,
    _refuse_existing,
    _rename_clashes,
)
from mapsmith_opensource.join_ops.spatial_join import (
    _check_written,
    _JoinTally,
    _record_spatial_join,
    validate_spatial_join,
)

__all__ = [
    "BOUNDARY_RULE",
    "JOIN_SUFFIX",
    "TIE_RULE",
    "TIE_TOLERANCE_METRES",
    "UNDEFINED_ON_INVALID",
    "_CrsOnly",
    "_JoinTally",
    "_check_written",
    "_numeric_field",
    "_parse_statistics",
    "_record_planar",
    "_record_spatial_join",
    "_record_topological",
    "_refuse_existing",
    "_rename_clashes",
    "validate_spatial_join",
    "validate_summarize_points",
]
