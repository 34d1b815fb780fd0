"""Between grids and features, and surfaces from points: raster_to_polygons, rasterize_layer,
euclidean_distance and idw_interpolation (rasterio, shapely, numpy).

Every grid these operations write comes from exactly one place the caller named: the grid of a raster
(``like_path``) or a cell size in metres over the layer's own extent (``cell_size_meters``), never a
guess between the two. Distances are metres on a projected grid; a grid in degrees is refused, never
read as metres. A continuous surface is not polygonized unasked (one polygon per cell helps nobody),
features that burn no cell are named, and nothing is dropped without a count in the notes.
Engines are imported inside the functions: importing this module must stay cheap.

The code lives in modules split along those seams: ``grid_common`` (the grid choice and shared
helpers), ``features_grid_ops`` (raster_to_polygons, rasterize_layer), ``surface_ops``
(euclidean_distance, idw_interpolation) and ``table_convert`` (convert_format's table outputs). This
module declares what the stack registers from them, so the stack's list of modules stays as it was.
"""

from __future__ import annotations

from mapsmith_opensource.features_grid_ops import raster_to_polygons, rasterize_layer
from mapsmith_opensource.grid_common import validate_grid_choice, validate_idw
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.surface_ops import euclidean_distance, idw_interpolation
from mapsmith_opensource.table_convert import REGISTRATIONS as TABLE_REGISTRATIONS
from mapsmith_opensource.table_convert import convert_to_table, table_output_eligible, validate_table_output

REGISTRATIONS = (
    Registration("raster_to_polygons", "raster_to_polygons", engine="rasterio", requirement="raster"),
    Registration(
        "rasterize_layer", "rasterize_layer", engine="rasterio", validate="validate_grid_choice", requirement="raster"
    ),
    Registration(
        "euclidean_distance",
        "euclidean_distance",
        engine="shapely",
        validate="validate_grid_choice",
        requirement="raster",
    ),
    Registration(
        "idw_interpolation", "idw_interpolation", engine="numpy", validate="validate_idw", requirement="raster"
    ),
    *TABLE_REGISTRATIONS,  # convert_format to a table (table_convert.py)
)
__all__ = [
    "REGISTRATIONS",
    "convert_to_table",
    "euclidean_distance",
    "idw_interpolation",
    "raster_to_polygons",
    "rasterize_layer",
    "table_output_eligible",
    "validate_grid_choice",
    "validate_idw",
    "validate_table_output",
]
