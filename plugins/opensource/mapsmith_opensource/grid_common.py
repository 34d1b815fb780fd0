"""What the grid operations share (raster_to_polygons, rasterize_layer, euclidean_distance,
idw_interpolation): the choice of the output grid (like_path or cell_size_meters, never a guess between
them), its limits, and the small helpers each of them uses.

Split from ``convert_ops`` along its seams. Engines are imported inside the functions: importing this
module must stay cheap. It must never choose a grid the caller did not name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mapsmith.errors import ArgumentError, InputError

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np
    from affine import Affine
    from pyproj import CRS

    from mapsmith.runner import RunContext

# Cells a written grid may have. Rasterizing is two GDAL passes and about 14 bytes a cell. Exact
# distances are a GEOS nearest query per cell and IDW a neighbour search per cell: measured here, a
# million cells took 5 s against 2,000 points (either operation) and 15 s against 200 long lines and
# 50 polygons, so ten million is minutes, not hours.
MAX_RASTERIZE_CELLS = 50_000_000
MAX_DISTANCE_CELLS = 10_000_000
MAX_IDW_CELLS = 10_000_000
CELLS_PER_CHUNK = 262_144
SEGMENT_CELLS = 8  # source segments are split to at most this many cells long (see _primitives)
IDW_TILE = 64  # cells on a side of the tiles whose neighbour candidates are found together
IDW_PAIRS_PER_BLOCK = 4_000_000  # cell-sample distances held at once
# A sample this close to a cell centre (as a fraction of the cell size) is taken as at it.
COINCIDENT_FRACTION = 1e-6
FLOAT_NODATA = -9999.0


# -- validation ----------------------------------------------------------------------------------


def validate_grid_choice(ctx: RunContext) -> None:
    """Exactly one of like_path and cell_size_meters says where the output grid is."""
    like = ctx.arguments.get("like_path") is not None
    cell = ctx.arguments.get("cell_size_meters") is not None
    if like and cell:
        raise ArgumentError(
            f"{ctx.contract.name} was given both like_path and cell_size_meters: two grids, and MapSmith will "
            "not choose between them",
            code="GRID_GIVEN_TWICE",
            evidence={"like_path": ctx.arguments["like_path"], "cell_size_meters": ctx.arguments["cell_size_meters"]},
            hint="pass like_path to write onto that raster's grid, or cell_size_meters to cover the layer's extent "
            "with square cells of that size; not both",
        )
    if not like and not cell:
        raise ArgumentError(
            f"{ctx.contract.name} needs an output grid: pass like_path or cell_size_meters",
            code="GRID_NOT_GIVEN",
            evidence={"operation": ctx.contract.name},
            hint="pass like_path (a raster whose cells, extent and CRS to copy) or cell_size_meters (square cells "
            "over the layer's extent, in its projected CRS)",
        )


def validate_idw(ctx: RunContext) -> None:
    """The grid choice, and the sample field named in the layer's header."""
    validate_grid_choice(ctx)
    name = ctx.arguments["field"]
    fields = list(ctx.inputs["input_path"].fields)
    if name not in fields:
        raise _field_not_found(ctx, name, fields)


# -- shared pieces -------------------------------------------------------------------------------


def _given(ctx: RunContext, key: str) -> str:
    return ctx.given_paths.get(key, str(ctx.arguments.get(key, key)))


def _progress(ctx: RunContext, fraction: float, message: str) -> None:
    if ctx.progress is not None:
        ctx.progress(fraction, message)


def _field_not_found(ctx: RunContext, name: str, fields: list[str]) -> InputError:
    import difflib

    close = difflib.get_close_matches(name, fields, n=1)
    return InputError(
        f"field names {name!r}, which {_given(ctx, 'input_path')} does not have"
        + (f"; did you mean {close[0]!r}?" if close else ""),
        code="FIELD_NOT_FOUND",
        evidence={"argument": "field", "field": name, "fields": fields, "path": _given(ctx, "input_path")},
        hint=f"name one of the fields {fields} (describe_dataset lists them)",
    )


def _numeric_values(ctx: RunContext, gdf: gpd.GeoDataFrame, name: str) -> np.ndarray:
    """The field as float64 (NaN where null), or a refusal naming the type it has."""
    import numpy as np
    from pandas.api import types

    fields = [str(c) for c in gdf.columns if c != gdf.geometry.name]
    if name not in fields:
        raise _field_not_found(ctx, name, fields)
    values = gdf[name]
    if not types.is_numeric_dtype(values) or types.is_bool_dtype(values):
        raise InputError(
            f"field {name!r} of {_given(ctx, 'input_path')} holds {values.dtype} values, not numbers",
            code="FIELD_NOT_NUMERIC",
            evidence={"argument": "field", "field": name, "type": str(values.dtype), "path": _given(ctx, "input_path")},
            hint="name a numeric field, or convert this one to numbers first (a text field of digits is not read "
            "as numbers: MapSmith does not guess which texts are numbers)",
        )
    return values.to_numpy(dtype="float64", na_value=np.nan)


def _present(gdf: gpd.GeoDataFrame) -> np.ndarray:
    """Which rows have a geometry to use (not missing, not empty)."""
    import shapely

    geoms = gdf.geometry.values
    return ~(shapely.is_missing(geoms) | shapely.is_empty(geoms))


@dataclass
class TargetGrid:
    """The grid an operation writes: north-up, square or rectangular cells, one CRS."""

    crs: CRS
    transform: Affine
    width: int
    height: int
    source: str  # "like_path" or "cell_size_meters"

    @property
    def cell_size(self) -> tuple[float, float]:
        return abs(self.transform.a), abs(self.transform.e)

    @property
    def cells(self) -> int:
        return self.width * self.height

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        t = self.transform
        return t.c, t.f + t.e * self.height, t.c + t.a * self.width, t.f

    def centres(self, row0: int, row1: int) -> tuple[np.ndarray, np.ndarray]:
        """Cell-centre coordinates of rows row0..row1-1, flattened row by row."""
        import numpy as np

        t = self.transform
        rows, cols = np.mgrid[row0:row1, 0 : self.width]
        return (t.c + (cols.ravel() + 0.5) * t.a), (t.f + (rows.ravel() + 0.5) * t.e)


def _snap(value: float, size: float, up: bool) -> int:
    """How many cells from 0 the snapped edge lies: floor (or ceil) of value/size, forgiving the last
    bits of a division that should have been whole (500100 / 0.1)."""
    k = value / size
    nearest = round(k)
    if abs(k - nearest) <= 1e-9 * max(1.0, abs(k)):
        return int(nearest)
    return math.ceil(k) if up else math.floor(k)


def _target_grid(
    ctx: RunContext,
    gdf: gpd.GeoDataFrame,
    *,
    purpose: str,
    needs_metres: bool,
    open_edges_matter: bool,
    max_cells: int,
) -> tuple[TargetGrid, gpd.GeoDataFrame]:
    """The output grid (like_path's, or cell_size_meters over the layer) and the layer in its CRS.

    ``open_edges_matter``: GDAL gives a cell the points on its west and north edges, so a point or
    line lying exactly on the grid's east or south edge would burn nothing; such a grid is widened
    by one cell.
    """
    from affine import Affine

    from mapsmith.crs import crs_label, linear_unit_metres
    from mapsmith_opensource import raster_io

    present = _present(gdf)
    if ctx.arguments.get("like_path") is not None:
        grid = raster_io.open_grid(ctx, "like_path")
        if needs_metres:
            raster_io.require_projected(ctx, grid, purpose)
        target = TargetGrid(grid.crs, grid.transform, grid.width, grid.height, "like_path")
        gdf = _to_grid_crs(ctx, gdf, grid.crs)
        described = (
            f"like_path's grid ({_given(ctx, 'like_path')}): {grid.width} x {grid.height} cells of "
            f"{grid.cell_size[0]:g} x {grid.cell_size[1]:g} {_unit_name(grid.crs)}"
        )
    else:
        crs = gdf.crs
        if crs.is_geographic:
            raise InputError(
                f"cell_size_meters needs a layer in a projected CRS; {_given(ctx, 'input_path')} is in "
                f"{crs_label(crs)}, whose cells would be degrees, and a degree is not a metre",
                code="RASTER_GEOGRAPHIC_CRS",
                evidence={"argument": "input_path", "crs": crs_label(crs)},
                hint="reproject_layer to a projected CRS first (the UTM zone of the data, EPSG:326xx), or pass "
                "like_path to write onto an existing raster's grid",
            )
        if not present.any():
            raise InputError(
                f"{_given(ctx, 'input_path')} has no geometries, so it has no extent to cover with cells",
                code="INPUT_EMPTY",
                evidence={"argument": "input_path", "path": _given(ctx, "input_path")},
                hint="pass a layer with features, or like_path to name the grid",
            )
        unit = linear_unit_metres(crs)
        size = float(ctx.arguments["cell_size_meters"]) / unit
        xmin, ymin, xmax, ymax = (float(v) for v in gdf.geometry.values[present].total_bounds)
        kx0, kx1 = _snap(xmin, size, up=False), _snap(xmax, size, up=True)
        ky0, ky1 = _snap(ymin, size, up=False), _snap(ymax, size, up=True)
        if open_edges_matter:
            if kx1 * size <= xmax:
                kx1 += 1
            if ky0 * size >= ymin:
                ky0 -= 1
        kx1 = max(kx1, kx0 + 1)
        ky1 = max(ky1, ky0 + 1)
        width, height = kx1 - kx0, ky1 - ky0
        target = TargetGrid(
            crs, Affine(size, 0.0, kx0 * size, 0.0, -size, ky1 * size), width, height, "cell_size_meters"
        )
        described = (
            f"cell_size_meters: the layer's extent in {crs_label(crs)} snapped outward to multiples of "
            f"{size:g} {_unit_name(crs)} ({ctx.arguments['cell_size_meters']:g} m): {width} x {height} cells"
        )
        ctx.crs_decisions.setdefault("analysis_crs", crs_label(crs))
        ctx.crs_decisions.setdefault(
            "reason",
            f"{purpose} on a grid in input_path's own projected CRS ({crs_label(crs)}, {unit:g} m per unit), so "
            "cell_size_meters is a true size on the map",
        )
    if target.cells > max_cells:
        raise InputError(
            f"the output grid would have {target.width} x {target.height} = {target.cells:,} cells; "
            f"{ctx.contract.name} computes at most {max_cells:,}",
            code="RASTER_TOO_LARGE",
            evidence={"width": target.width, "height": target.height, "max_cells": max_cells},
            hint="pass a coarser cell_size_meters (twice the size is a quarter of the cells), or a like_path grid "
            "covering a smaller area",
        )
    ctx.expected_output_crs = target.crs.to_wkt()
    ctx.parameters["x-mapsmith:output_grid"] = {
        "width": target.width,
        "height": target.height,
        "cell_size": list(target.cell_size),
        "transform": [float(v) for v in target.transform.to_gdal()],
        "unit": _unit_name(target.crs),
        "crs": crs_label(target.crs),
        "from": described,
    }
    return target, gdf


def _unit_name(crs: CRS) -> str:
    axes = crs.axis_info
    return axes[0].unit_name if axes else "units"


def _to_grid_crs(ctx: RunContext, gdf: gpd.GeoDataFrame, target: CRS) -> gpd.GeoDataFrame:
    """The layer moved onto like_path's CRS, recorded as the run's transformation."""
    from mapsmith.crs import choose_transformer, crs_label
    from mapsmith_opensource import common

    if gdf.crs.equals(target, ignore_axis_order=True):
        return gdf
    transformer, record = choose_transformer(gdf.crs, target, ctx.inputs["input_path"].bounds_lonlat)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(target),
            "reason": f"the output is written on like_path's grid, so input_path ({crs_label(gdf.crs)}) was "
            f"transformed to like_path's CRS ({crs_label(target)}); the grid is never resampled",
            "source_crs": crs_label(gdf.crs),
            "target_crs": crs_label(target),
            "transformation": record,
        }
    )
    common.warn_about_transformation(ctx, record, f"input_path: {crs_label(gdf.crs)} to {crs_label(target)}")
    return common.transform_frame(gdf, transformer, target)


def _vector_components() -> dict[str, str]:
    import shapely

    return {"shapely": shapely.__version__, "GEOS": shapely.geos_version_string}
