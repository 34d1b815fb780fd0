"""Terrain operations on Whitebox Workflows: slope, aspect, hillshade, curvature, viewshed.

Every DEM goes through ``raster_io.open_grid`` (one georeferencing, north-up) and
``whitebox_engine.read_input`` (a copy Whitebox reads as GDAL does, read-checked), and must be in a
projected CRS: a slope computed on degrees of longitude against metres of elevation is meaningless.
The contracts say ``needs_projected_crs = true``, so the runner refuses a geographic DEM before the
engine runs (no file, not even a failure record); ``require_projected`` here records the analysis CRS.

Two things Whitebox does silently are undone here rather than passed on:

- It computes aspect, hillshade and the curvatures in the DEM's own number type, so an integer DEM
  gives aspect in whole degrees and curvatures truncated to 0 (verified on the Mount St. Helens
  int16 DEM: aspect 78 where the float answer is 78.11). Integer DEMs are handed over as float32.
- Its window-based derivatives (5 x 5 cells) are computed, wrongly, on the outer two rings of cells;
  those rings are written as nodata. Viewshed has no window and keeps its edges.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError
from mapsmith_opensource import raster_io
from mapsmith_opensource import whitebox_engine as wb
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid

ENGINE = "whitebox_workflows"
REGISTRATIONS = tuple(
    Registration(name, name, engine=ENGINE, requirement="whitebox")
    for name in ("slope", "aspect", "hillshade", "curvature", "viewshed")
)

# Whitebox's terrain derivatives use a window two cells wide on each side; at the grid's edge the
# window runs off the grid and the values it computes there are not the terrain's.
EDGE_CELLS = 2
SLOPE_RANGE = {"degrees": (0.0, 90.0), "percent": (0.0, None), "radians": (0.0, math.pi / 2)}
# Whitebox's aspect for a cell with no slope: a value outside 0..360, not nodata.
FLAT_ASPECT = -1.0
# Whitebox writes hillshade as round(32767 * cos(angle of incidence)), 0 where the cell faces away.
WHITEBOX_HILLSHADE_MAX = 32767
# Written like gdaldem hillshade: 1 + 254 * brightness, byte, 0 = nodata.
HILLSHADE_NODATA = 0
HILLSHADE_RANGE = (1, 255)
CURVATURE_TOOLS = {"profile": "profile_curvature", "plan": "plan_curvature", "mean": "mean_curvature"}
CURVATURE_SIGNS = {
    "profile": "measured along the line of steepest descent: negative = concave along the flow (water slows, "
    "deposition), positive = convex along the flow (water speeds up, erosion); 0 on a straight slope",
    "plan": "measured across the slope, along the contour: negative = convergent (hollows, valleys: water "
    "gathers), positive = divergent (spurs, ridges: water spreads); 0 where contours are straight",
    "mean": "the average of the two principal curvatures of the surface: negative = concave (bowl- or "
    "valley-like), positive = convex (dome- or ridge-like); 0 on a plane",
}


# -- shared steps -------------------------------------------------------------------------------


def _read_dem(ctx: RunContext, grid: Grid, directory: Path, tool: str) -> Any:
    """The DEM band as a Whitebox raster; an integer DEM is handed over as float32 because Whitebox
    computes aspect, hillshade and curvatures in the input's number type (aspect in whole degrees,
    curvatures truncated to integers), disclosed in ``x-mapsmith:normalised_inputs``."""
    return wb.read_input(ctx, grid, directory, grid.band_index(ctx.arguments.get("band", "1")), float_copy=True)


def _z_factor(ctx: RunContext) -> float:
    return float(ctx.arguments["z_factor"])


def _per_length_unit(grid: Grid) -> str:
    from mapsmith.crs import linear_unit_metres

    unit = linear_unit_metres(grid.crs)
    return "1/m" if unit == 1.0 else f"1/(CRS unit of {unit:g} m)"


# -- operations ---------------------------------------------------------------------------------


def slope(ctx: RunContext) -> None:
    grid = wb.open_dem(ctx, "slope")
    units = ctx.arguments["units"]
    with wb.workdir(ctx) as directory:
        dem = _read_dem(ctx, grid, directory, "slope")
        out = wb.call(ctx, "terrain", "slope", input=dem, units=units, z_factor=_z_factor(ctx))
        wb.write_output(ctx, out, grid, directory, value_range=SLOPE_RANGE[units], edge_cells=EDGE_CELLS)


def aspect(ctx: RunContext) -> None:
    grid = wb.open_dem(ctx, "aspect")
    with wb.workdir(ctx) as directory:
        dem = _read_dem(ctx, grid, directory, "aspect")
        out = wb.call(ctx, "terrain", "aspect", input=dem, z_factor=_z_factor(ctx))
        wb.write_output(ctx, out, grid, directory, value_range=(FLAT_ASPECT, 360.0), edge_cells=EDGE_CELLS)
    ctx.parameters["x-mapsmith:value_unit"] = "degrees clockwise from north of the downslope direction"
    ctx.parameters["x-mapsmith:flat_value"] = FLAT_ASPECT
    ctx.notes.append(
        f"cells with no slope (flat) are {FLAT_ASPECT:g}, a value, not nodata: they have no downslope direction"
    )


def hillshade(ctx: RunContext) -> None:
    import numpy as np
    import rasterio

    grid = wb.open_dem(ctx, "hillshade")
    azimuth, altitude = float(ctx.arguments["azimuth_degrees"]), float(ctx.arguments["altitude_degrees"])
    with wb.workdir(ctx) as directory:
        dem = _read_dem(ctx, grid, directory, "hillshade")
        out = wb.call(
            ctx, "terrain", "hillshade", input=dem, azimuth=azimuth, altitude=altitude, z_factor=_z_factor(ctx)
        )
        produced = wb.produce_file(ctx, out, grid, directory, edge_cells=EDGE_CELLS)
        # Whitebox's 0..32767 becomes the byte scale of gdaldem (0 is kept for nodata).
        with rasterio.open(produced) as ds:
            shade = ds.read(1, masked=True)
    brightness = np.clip(shade.astype("float64") / WHITEBOX_HILLSHADE_MAX, 0.0, 1.0)
    scaled = np.ma.round(1.0 + 254.0 * brightness)
    raster_io.write_raster(
        ctx,
        scaled,
        transform=grid.transform,
        crs=grid.crs,
        nodata=HILLSHADE_NODATA,
        dtype="uint8",
        band_names=["hillshade"],
        value_range=HILLSHADE_RANGE,
    )
    ctx.parameters["x-mapsmith:hillshade_scale"] = (
        "byte = round(1 + 254 * max(0, cos(zenith) cos(slope) + sin(zenith) sin(slope) cos(azimuth - aspect))), "
        "computed as round(1 + 254 * w / 32767) from Whitebox's w = 0..32767; 1 = unlit, 255 = facing the light, "
        "0 = nodata (as gdaldem hillshade)"
    )
    ctx.notes.append(
        f"light from {azimuth:g} degrees (clockwise from north) at {altitude:g} degrees above the horizon; "
        "Whitebox's 0..32767 shading rescaled to 1..255 bytes, 0 = nodata"
    )


def curvature(ctx: RunContext) -> None:
    grid = wb.open_dem(ctx, "curvature")
    kind = ctx.arguments["curvature_type"]
    tool = CURVATURE_TOOLS[kind]
    with wb.workdir(ctx) as directory:
        dem = _read_dem(ctx, grid, directory, tool)
        out = wb.call(ctx, "terrain", tool, input=dem, z_factor=_z_factor(ctx), log_transform=False)
        wb.write_output(ctx, out, grid, directory, value_range=None, edge_cells=EDGE_CELLS)
    ctx.parameters["x-mapsmith:value_unit"] = _per_length_unit(grid)
    ctx.parameters["x-mapsmith:sign_convention"] = f"{kind} curvature (Florinsky), {CURVATURE_SIGNS[kind]}"


def viewshed(ctx: RunContext) -> None:
    import geopandas as gpd

    from mapsmith_opensource import common

    grid = wb.open_dem(ctx, "viewshed")
    height = float(ctx.arguments["observer_height_meters"])
    observers = common.align_to(ctx, common.read_input(ctx, "observers_path"), grid.crs, "observers_path")
    points = _observer_cells(ctx, grid, observers)
    with wb.workdir(ctx) as directory:
        dem = _read_dem(ctx, grid, directory, "viewshed")
        path = directory / "observers.gpkg"
        gpd.GeoDataFrame({"observer": list(range(1, len(points) + 1))}, geometry=points, crs=grid.crs).to_file(
            path, driver="GPKG", engine="pyogrio"
        )
        stations = wb.environment().read_vector(str(path))
        if stations.feature_count() != len(points):
            raise InputError(
                f"Whitebox read {stations.feature_count()} observers from the {len(points)} written",
                code="ENGINE_MISREAD_INPUT",
                evidence={"argument": "observers_path", "written": len(points), "read": stations.feature_count()},
                hint="this is an engine defect; report it with the observers file",
            )
        out = wb.call(ctx, "terrain", "viewshed", input=dem, stations=stations, height=height)
        # No window: every cell's visibility is computed along its own line of sight, edges included.
        wb.write_output(ctx, out, grid, directory, value_range=(0, len(points)), edge_cells=0)
    ctx.parameters["x-mapsmith:observer_count"] = len(points)
    ctx.parameters["x-mapsmith:value_unit"] = "number of observers that see the cell"
    ctx.notes.append(
        f"each cell holds how many of the {len(points)} observers see it (0..{len(points)}); observers stand "
        f"{height:g} elevation units above the ground at their point"
    )


def _observer_cells(ctx: RunContext, grid: Grid, observers: Any) -> list[Any]:
    """The observer points, each on a cell of the DEM with an elevation; refuses the others."""
    import numpy as np

    geoms = list(observers.geometry)
    if not geoms:
        raise InputError(
            "observers_path has no observers",
            code="OBSERVERS_EMPTY",
            evidence={"argument": "observers_path"},
            hint="pass a point layer with at least one point",
        )
    bad_types = sorted({g.geom_type for g in geoms if g is None or g.is_empty or g.geom_type != "Point"} - {None})
    if bad_types or any(g is None or g.is_empty for g in geoms):
        raise InputError(
            "observers_path must hold one non-empty Point per observer",
            code="OBSERVERS_NOT_POINTS",
            evidence={"argument": "observers_path", "found": bad_types or ["empty geometry"]},
            hint="explode multipoints into single points (one observer each) and drop empty geometries",
        )
    inverse = ~grid.transform
    cols, rows = zip(*(inverse @ (g.x, g.y) for g in geoms), strict=True)
    col_i = np.floor(np.array(cols)).astype(int)
    row_i = np.floor(np.array(rows)).astype(int)
    outside = np.flatnonzero((col_i < 0) | (col_i >= grid.width) | (row_i < 0) | (row_i >= grid.height))
    if outside.size:
        raise InputError(
            f"{outside.size} of {len(geoms)} observers lie outside the DEM, where the ground has no elevation",
            code="OBSERVER_OUTSIDE_DEM",
            evidence={
                "argument": "observers_path",
                "feature_indexes": outside[:20].tolist(),
                "dem_bounds": list(grid.bounds),
            },
            hint="drop or move those observers (clip_layer to the DEM's extent), or use a DEM that covers them",
        )
    from rasterio.windows import Window

    band = ctx.arguments.get("band", "1")
    masked = [
        bool(np.ma.getmaskarray(grid.read(band, window=Window(int(c), int(r), 1, 1)))[0, 0])
        for r, c in zip(row_i, col_i, strict=True)
    ]
    on_nodata = np.flatnonzero(masked)
    if on_nodata.size:
        raise InputError(
            f"{on_nodata.size} of {len(geoms)} observers stand on nodata cells of the DEM",
            code="OBSERVER_ON_NODATA",
            evidence={"argument": "observers_path", "feature_indexes": on_nodata[:20].tolist()},
            hint="move those observers onto cells with an elevation, or fill the DEM's gaps first",
        )
    return geoms
