"""Between grids and features, and surfaces from points: raster_to_polygons, rasterize_layer,
euclidean_distance and idw_interpolation (rasterio, shapely, numpy).

Every grid these operations write comes from exactly one place the caller named: the grid of a raster
(``like_path``) or a cell size in metres over the layer's own extent (``cell_size_meters``), never a
guess between the two. Distances are metres on a projected grid; a grid in degrees is refused, never
read as metres. A continuous surface is not polygonized unasked (one polygon per cell helps nobody),
features that burn no cell are named, and nothing is dropped without a count in the notes.
Engines are imported inside the functions: importing this module must stay cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, EngineError, InputError
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np
    from affine import Affine
    from pyproj import CRS

    from mapsmith.runner import RunContext

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
)

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


# -- raster_to_polygons --------------------------------------------------------------------------


def raster_to_polygons(ctx: RunContext) -> None:
    """One polygon per connected region of equal value (rasterio.features.shapes); nodata makes none."""
    import geopandas as gpd
    import numpy as np
    import rasterio
    import shapely
    from rasterio.features import shapes

    from mapsmith.crs import crs_label
    from mapsmith_opensource import common, raster_io

    raster_io.set_raster_engine(ctx, **_vector_components())
    grid = raster_io.open_grid(ctx, "input_path")
    given_band = str(ctx.arguments["band"]).strip()
    band = grid.band_index(int(given_band) if given_band.isdigit() else given_band)
    dtype = np.dtype(grid.dtypes[band - 1])
    connectivity = int(ctx.arguments["connectivity"])
    data = grid.read(band)
    valid = ~np.ma.getmaskarray(data)
    values = data.compressed()
    floating = np.issubdtype(dtype, np.floating)
    distinct = int(np.unique(values).size)
    limit = int(ctx.arguments["max_distinct_values"])
    if floating and distinct > limit:
        raise InputError(
            f"band {band} of {_given(ctx, 'input_path')} is floating-point with {distinct:,} distinct values: a "
            "continuous surface, which polygonizes into about one polygon per cell",
            code="RASTER_NOT_CATEGORICAL",
            evidence={
                "argument": "input_path",
                "band": band,
                "dtype": dtype.name,
                "distinct_values": distinct,
                "max_distinct_values": limit,
            },
            hint="reclassify_raster into classes first (elevation bands, say), then polygonize the classes; or raise "
            f"max_distinct_values above {distinct} if one polygon per value is really wanted",
        )
    source = np.ma.filled(data, 0)
    if dtype.name not in ("int8", "uint8", "int16", "uint16", "int32", "float32", "float64"):
        # GDAL polygonizes these types only; wider integers are carried in a type that holds them exactly.
        low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
        if -(2**31) <= low and high < 2**31:
            source = source.astype("int32")
        elif -(2**53) <= low and high <= 2**53:
            source = source.astype("float64")
        else:
            raise InputError(
                f"band {band} of {_given(ctx, 'input_path')} is {dtype.name} with values {low}..{high}, beyond what "
                "the polygonizer holds exactly (integers up to 2^53)",
                code="RASTER_DTYPE_UNSUPPORTED",
                evidence={"argument": "input_path", "band": band, "dtype": dtype.name, "min": low, "max": high},
                hint="reclassify_raster to smaller class codes first",
            )
    _progress(ctx, 0.1, "polygonizing")
    geoms, out_values = [], []
    with rasterio.Env():
        for geom, value in shapes(source, mask=valid, connectivity=connectivity, transform=grid.transform):
            geoms.append(shapely.geometry.shape(geom))
            out_values.append(value)
    geometries = np.array(geoms, dtype=object)
    invalid = ~shapely.is_valid(geometries) if len(geoms) else np.zeros(0, dtype=bool)
    if invalid.any():
        # 8-connected cells that meet only at a corner come back as one ring touching itself there;
        # make_valid splits it into the same squares as a multipolygon: same cells, same area.
        geometries[invalid] = shapely.make_valid(geometries[invalid])
        ctx.notes.append(
            f"{int(invalid.sum())} region(s) joined only through cell corners (8-connectivity) were written as "
            "multipolygons: GDAL returns them as rings touching themselves at the corner, which is not a valid "
            "polygon; the cells and areas are unchanged"
        )
    column = [int(v) for v in out_values] if not floating else [float(v) for v in out_values]
    gdf = gpd.GeoDataFrame(
        {"value": np.array(column, dtype="int64" if not floating else "float64")},
        geometry=list(geometries),
        crs=grid.crs,
    )
    # The polygons must tile exactly the valid cells: their planar areas sum to the cells' area.
    cell_area = abs(grid.transform.a * grid.transform.e)
    expected_area = float(valid.sum()) * cell_area
    got_area = float(shapely.area(geometries).sum()) if len(geoms) else 0.0
    ctx.check(
        "x-mapsmith:cell_area_conserved",
        abs(got_area - expected_area) <= 1e-9 * max(1.0, expected_area),
        f"polygons cover {got_area:.6g} square {_unit_name(grid.crs)}; the {int(valid.sum())} valid cells cover "
        f"{expected_area:.6g}",
    )
    nodata_cells = int((~valid).sum())
    ctx.notes.append(
        f"{len(gdf)} polygon(s) from {int(valid.sum())} valid cell(s) of band {band} with {distinct} distinct "
        f"value(s), regions joined by {connectivity}-connectivity ("
        + ("edges only" if connectivity == 4 else "edges and corners")
        + f"); {nodata_cells} nodata cell(s) produced no polygon"
    )
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(grid.crs))
    ctx.crs_decisions.setdefault("reason", "polygons are traced on the raster's own grid, in its CRS")
    common.write_output(ctx, gdf)


# -- rasterize_layer ------------------------------------------------------------------------------


def rasterize_layer(ctx: RunContext) -> None:
    """Burn features into a grid (rasterio.features.rasterize): a field's value, or 1 where no field."""
    import numpy as np
    import shapely
    from rasterio.enums import MergeAlg
    from rasterio.features import rasterize

    from mapsmith_opensource import common, raster_io

    raster_io.set_raster_engine(ctx, **_vector_components())
    gdf = common.read_input(ctx)
    field = ctx.arguments.get("field")
    add = ctx.arguments["merge_alg"] == "add"
    all_touched = bool(ctx.arguments["all_touched"])
    present = _present(gdf)
    if field is not None:
        values = _numeric_values(ctx, gdf, field)
        usable = present & ~np.isnan(values)
        nulls = int((present & np.isnan(values)).sum())
    else:
        values = np.ones(len(gdf))
        usable, nulls = present, 0
    families = set(shapely.get_type_id(gdf.geometry.values[present]).tolist())
    grid, gdf = _target_grid(
        ctx,
        gdf,
        purpose="rasterize_layer",
        needs_metres=False,
        open_edges_matter=bool(families - {3, 6}),  # anything but polygons
        max_cells=MAX_RASTERIZE_CELLS,
    )
    geoms = gdf.geometry.values[usable]
    burn = values[usable]
    n = len(geoms)
    shape = (grid.height, grid.width)
    _progress(ctx, 0.1, f"rasterizing {n} features")
    # Which feature each cell ended with (later features win, as GDAL burns in order): the coverage,
    # and for replace the values, from one pass.
    last = (
        rasterize(
            zip(geoms, range(1, n + 1), strict=True),
            out_shape=shape,
            transform=grid.transform,
            fill=0,
            all_touched=all_touched,
            dtype="int32",
        )
        if n
        else np.zeros(shape, dtype="int32")
    )
    covered = last > 0
    if field is None:
        base = np.dtype("int32") if add else np.dtype("uint8")
        value_range: tuple[float, float] = (1.0, float(n) if add else 1.0)
    elif add:
        base = np.dtype("float64")
        negatives, positives = burn[burn < 0].sum(), burn[burn > 0].sum()
        value_range = (float(min(burn.min(), negatives)), float(max(burn.max(), positives))) if n else (0.0, 0.0)
    else:
        exact32 = bool(np.all(burn.astype("float32").astype("float64") == burn))
        base = np.dtype("float32") if exact32 else np.dtype("float64")
        value_range = (float(burn.min()), float(burn.max())) if n else (0.0, 0.0)
    given_nodata = ctx.arguments.get("nodata")
    nodata = float(given_nodata) if given_nodata is not None else (0.0 if field is None else FLOAT_NODATA)
    out_dtype = _dtype_holding(base, nodata)
    if add and n:
        summed = rasterize(
            zip(geoms, burn, strict=True),
            out_shape=shape,
            transform=grid.transform,
            fill=0,
            all_touched=all_touched,
            merge_alg=MergeAlg.add,
            dtype="float64",
        )
        collisions = int((covered & (summed == nodata)).sum())
        out = np.where(covered, summed, nodata).astype(out_dtype)
        del summed
    else:
        # replace: each cell holds the value of the feature it ended with; index 0 (no feature) is nodata
        lookup = np.concatenate([[nodata], burn]).astype(out_dtype)
        bad = np.flatnonzero(burn == nodata) + 1
        collisions = int(np.isin(last, bad).sum()) if bad.size else 0
        out = lookup[last]
    if collisions:
        raise InputError(
            f"{collisions} burned cell(s) would hold {nodata:g}, the nodata value, and read back as empty",
            code="NODATA_COLLIDES",
            evidence={"nodata": nodata, "cells": collisions, "field": field},
            hint="pass a nodata value the burned values never take (e.g. -9999 or a value outside the field's range)",
        )
    ctx.parameters["nodata"] = nodata
    ctx.parameters["x-mapsmith:output_grid"]["dtype"] = out_dtype.name
    _disclose_unburned(ctx, geoms, np.flatnonzero(usable), last, grid, all_touched, add)
    ctx.notes.append(
        f"{n} feature(s) burned "
        + (f"with their {field!r} values" if field is not None else "as 1")
        + f" into {int(covered.sum())} of {grid.cells} cells ("
        + (
            "cells touched by a feature"
            if all_touched
            else "cells whose centre a polygon covers; lines and points burn the cells they pass through"
        )
        + "); "
        + ("overlapping features add up" if add else "where features overlap, the later feature in the layer wins")
        + f"; cells no feature reaches hold nodata {nodata:g}"
    )
    if nulls:
        ctx.notes.append(f"{nulls} feature(s) with a null {field!r} were not burned")
    if not present.all():
        ctx.notes.append(f"{int((~present).sum())} feature(s) with empty or missing geometry were not burned")
    raster_io.write_raster(
        ctx,
        out,
        transform=grid.transform,
        crs=grid.crs,
        nodata=nodata,
        dtype=out_dtype.name,
        band_names=[field or "burned"],
        value_range=_float32_safe(value_range, out_dtype),
    )


def _dtype_holding(base: np.dtype, nodata: float) -> np.dtype:
    """The narrowest GDAL type that holds both the values (``base``) and ``nodata`` exactly."""
    import numpy as np

    if float(nodata).is_integer():
        wanted = np.promote_types(base, np.min_scalar_type(int(nodata)))
    else:
        wanted = np.promote_types(base, np.float32)
    if wanted.kind == "f" and np.float32(nodata) != nodata:
        wanted = np.dtype("float64")
    if wanted.itemsize > 4 and wanted.kind in "iu":
        wanted = np.dtype("float64")
    return wanted


def _float32_safe(value_range: tuple[float, float], dtype: np.dtype) -> tuple[float, float]:
    """A guaranteed range stated as the written type rounds it (rounding keeps order)."""
    import numpy as np

    if dtype == np.dtype("float32"):
        return float(np.float32(value_range[0])), float(np.float32(value_range[1]))
    return value_range


def _disclose_unburned(
    ctx: RunContext, geoms: Any, ids: np.ndarray, last: np.ndarray, grid: TargetGrid, all_touched: bool, add: bool
) -> None:
    """Name the features that left no cell: too small for the cells, outside the grid, or (replace)
    covered wholly by later features. A feature is never lost without a count."""
    import numpy as np
    from affine import Affine
    from rasterio.features import rasterize

    n = len(geoms)
    if not n:
        return
    seen = np.zeros(n + 1, dtype=bool)
    seen[np.unique(last)] = True
    missing = np.flatnonzero(~seen[1:])
    nothing, covered_later = [], []
    t = grid.transform
    for i in missing.tolist():
        minx, miny, maxx, maxy = geoms[i].bounds
        col0 = max(math.floor((minx - t.c) / t.a) - 1, 0)
        col1 = min(math.ceil((maxx - t.c) / t.a) + 1, grid.width)
        row0 = max(math.floor((t.f - maxy) / -t.e) - 1, 0)
        row1 = min(math.ceil((t.f - miny) / -t.e) + 1, grid.height)
        burned = 0
        if col1 > col0 and row1 > row0:
            window = t @ Affine.translation(col0, row0)
            alone = rasterize(
                [(geoms[i], 1)],
                out_shape=(row1 - row0, col1 - col0),
                transform=window,
                fill=0,
                all_touched=all_touched,
                dtype="uint8",
            )
            burned = int(alone.sum())
        (covered_later if burned else nothing).append(int(ids[i]))
    if covered_later and not add:
        ctx.notes.append(
            f"{len(covered_later)} feature(s) were covered wholly by later features and show nowhere (replace: the "
            f"later feature wins); first feature indices {covered_later[:10]}"
        )
    if nothing:
        ctx.warn(
            "FEATURES_NOT_BURNED",
            f"{len(nothing)} feature(s) burned no cell: smaller than a cell and covering no cell centre, or outside "
            f"the grid (first feature indices {nothing[:10]})",
            "pass all_touched=true to burn every cell a feature touches, a smaller cell_size_meters, or a like_path "
            "grid that covers the features",
        )


# -- euclidean_distance ---------------------------------------------------------------------------


def euclidean_distance(ctx: RunContext) -> None:
    """Metres from every cell centre to the nearest source geometry, exactly (GEOS distances)."""
    import numpy as np
    import shapely

    from mapsmith.crs import crs_label, linear_unit_metres
    from mapsmith_opensource import common, raster_io

    raster_io.set_raster_engine(ctx, "shapely", shapely.__version__, GEOS=shapely.geos_version_string)
    gdf = common.read_input(ctx)
    present = _present(gdf)
    grid, gdf = _target_grid(
        ctx,
        gdf,
        purpose="euclidean_distance",
        needs_metres=True,
        open_edges_matter=False,
        max_cells=MAX_DISTANCE_CELLS,
    )
    sources = gdf.geometry.values[present]
    if len(sources) == 0:
        raise InputError(
            f"{_given(ctx, 'input_path')} has no source geometries to measure from",
            code="INPUT_EMPTY",
            evidence={"argument": "input_path", "path": _given(ctx, "input_path")},
            hint="pass a layer with at least one feature",
        )
    unit = linear_unit_metres(grid.crs)
    primitives, polygons = _primitives(np.asarray(sources), SEGMENT_CELLS * max(grid.cell_size))
    tree = shapely.STRtree(primitives)
    inside_tree = shapely.STRtree(polygons) if len(polygons) else None
    out = np.empty(grid.cells, dtype="float64")
    rows_per_chunk = max(1, CELLS_PER_CHUNK // grid.width)
    for row0 in range(0, grid.height, rows_per_chunk):
        row1 = min(row0 + rows_per_chunk, grid.height)
        x, y = grid.centres(row0, row1)
        centres = shapely.points(x, y)
        _, distance = tree.query_nearest(centres, return_distance=True, all_matches=False)
        if inside_tree is not None:
            distance[np.unique(inside_tree.query(centres, predicate="intersects")[0])] = 0.0
        out[row0 * grid.width : row1 * grid.width] = distance * unit
        _progress(ctx, row1 / grid.height, f"distances for {row1} of {grid.height} rows")
    high = _distance_bound(tree, primitives, grid) * unit
    ctx.parameters["x-mapsmith:distance_method"] = (
        f"planar in {crs_label(grid.crs)} ({unit:g} m per unit): the exact distance from each cell centre to the "
        "nearest point of the nearest source geometry (GEOS), not to the nearest source cell"
    )
    ctx.notes.append(
        f"distances in metres from each cell centre to the nearest of {len(sources)} source geometries (0 inside a "
        "source polygon); sources outside the grid count too"
    )
    if not present.all():
        ctx.notes.append(f"{int((~present).sum())} feature(s) with empty or missing geometry were not sources")
    raster_io.write_raster(
        ctx,
        out.reshape(grid.height, grid.width),
        transform=grid.transform,
        crs=grid.crs,
        nodata=FLOAT_NODATA,
        dtype="float32",
        band_names=["distance_m"],
        value_range=(0.0, float(np.float32(high * (1 + 1e-9)))),
    )


def _primitives(sources: np.ndarray, longest: float) -> tuple[np.ndarray, np.ndarray]:
    """The sources as points and short two-point segments (lines, and polygon rings), and the polygons.

    The distance to a line is the distance to its nearest segment, and to a polygon the distance to
    its boundary, or 0 inside it: the same distances, but small envelopes let the tree discard far
    candidates that a long line's envelope would keep. Segments longer than ``longest`` are split at
    points on them (shapely.segmentize), which changes no distance beyond the last bits of a double.
    """
    import numpy as np
    import shapely

    parts = shapely.get_parts(sources)
    while np.isin(shapely.get_type_id(parts), (4, 5, 6, 7)).any():
        parts = shapely.get_parts(parts)
    parts = parts[~shapely.is_empty(parts)]
    kinds = shapely.get_type_id(parts)
    polygons = parts[kinds == 3]
    linework = np.concatenate([parts[np.isin(kinds, (1, 2))], shapely.get_rings(polygons)])
    linework = shapely.segmentize(linework, longest) if len(linework) else linework
    coords, owner = shapely.get_coordinates(linework, return_index=True)
    joined = owner[1:] == owner[:-1]
    segments = shapely.linestrings(np.stack([coords[:-1][joined], coords[1:][joined]], axis=1))
    return np.concatenate([parts[kinds == 0], segments]), polygons


def _distance_bound(tree: Any, sources: np.ndarray, grid: TargetGrid) -> float:
    """No cell is farther from a source than the farthest grid corner is from the source point
    nearest the grid: the guaranteed top of the value range (the grid's diagonal when a source lies
    on the grid)."""
    import shapely

    frame = shapely.box(*grid.bounds)
    nearest = int(tree.nearest(frame))
    line = shapely.shortest_line(frame, sources[nearest])
    px, py = shapely.get_coordinates(line)[-1]
    xmin, ymin, xmax, ymax = grid.bounds
    return max(math.hypot(cx - px, cy - py) for cx in (xmin, xmax) for cy in (ymin, ymax))


# -- idw_interpolation ----------------------------------------------------------------------------


def idw_interpolation(ctx: RunContext) -> None:
    """Inverse-distance-weighted surface from sample points: each cell the weighted mean of its
    nearest samples (weights 1 / distance^power), the sample's own value at a sample."""
    import numpy as np
    import shapely

    from mapsmith.crs import crs_label, linear_unit_metres
    from mapsmith_opensource import common, raster_io

    raster_io.set_raster_engine(ctx, "numpy", np.__version__, **_vector_components())
    gdf = common.read_input(ctx)
    field = ctx.arguments["field"]
    values = _numeric_values(ctx, gdf, field)
    present = _present(gdf)
    usable = present & ~np.isnan(values)
    nulls = int((present & np.isnan(values)).sum())
    grid, gdf = _target_grid(
        ctx, gdf, purpose="idw_interpolation", needs_metres=True, open_edges_matter=False, max_cells=MAX_IDW_CELLS
    )
    parts, index = shapely.get_parts(gdf.geometry.values[usable], return_index=True)
    multipart = len(parts) - int(usable.sum())
    coords = shapely.get_coordinates(parts)
    xs, ys = coords[:, 0], coords[:, 1]
    zs = values[usable][index]
    if len(zs) == 0:
        raise InputError(
            f"{_given(ctx, 'input_path')} has no sample with a {field!r} value to interpolate from",
            code="NO_SAMPLES",
            evidence={"argument": "input_path", "field": field, "null_values": nulls},
            hint="name a field that has values, or pass a layer with sample points",
        )
    unit = linear_unit_metres(grid.crs)
    power = float(ctx.arguments["power"])
    k = min(int(ctx.arguments["max_points"]), len(zs))
    radius_m = ctx.arguments.get("search_radius_meters")
    radius = float(radius_m) / unit if radius_m is not None else math.inf
    cell = max(abs(grid.transform.a), abs(grid.transform.e))
    out, empty = _idw(
        grid,
        xs,
        ys,
        zs,
        k=k,
        power=power,
        radius=radius,
        eps=COINCIDENT_FRACTION * cell,
        progress=lambda f: _progress(ctx, f, "interpolating"),
    )
    low, high = float(zs.min()), float(zs.max())
    # IDW is a weighted mean: it never leaves the samples' range. Clamp only floating-point rounding
    # (a few units in the last place); anything larger is left for the range check to catch.
    slack = 1e-12 * max(1.0, abs(low), abs(high))
    finite = ~np.isnan(out)
    out[finite & (out < low) & (out >= low - slack)] = low
    out[finite & (out > high) & (out <= high + slack)] = high
    nodata = FLOAT_NODATA if not (low <= FLOAT_NODATA <= high) else float(np.finfo("float32").min)
    data = np.ma.masked_invalid(out.reshape(grid.height, grid.width))
    ctx.parameters["nodata"] = nodata
    ctx.parameters["x-mapsmith:distance_method"] = (
        f"planar in {crs_label(grid.crs)} ({unit:g} m per unit), from each cell centre to each sample point"
    )
    unique_locations = len(np.unique(coords, axis=0))
    ctx.notes.append(
        f"{len(zs)} sample point(s) of {field!r} ({low:g}..{high:g}); each cell is the mean of its {k} nearest "
        f"sample(s) weighted by 1/distance^{power:g}"
        + (f" within {radius_m:g} m" if radius_m is not None else "")
        + "; a cell centre at a sample takes the sample's value; samples tied at the last neighbour's distance are "
        "chosen between arbitrarily, the same way on every run"
    )
    if unique_locations < len(zs):
        ctx.notes.append(
            f"{len(zs) - unique_locations} sample(s) share a location with another; a cell centre at such a location "
            "takes their mean, and elsewhere each counts as its own neighbour"
        )
    if nulls:
        ctx.notes.append(f"{nulls} point(s) with a null {field!r} were left out")
    if not present.all():
        ctx.notes.append(f"{int((~present).sum())} feature(s) with empty or missing geometry were left out")
    if multipart:
        ctx.notes.append("multipoint features were split into their points, each with the feature's value")
    if empty:
        ctx.warn(
            "CELLS_WITHOUT_SAMPLES",
            f"{empty} of {grid.cells} cells have no sample within search_radius_meters ({radius_m:g} m) and hold "
            f"nodata ({nodata:g})",
            "raise search_radius_meters, or omit it to use the max_points nearest samples wherever they are",
        )
    raster_io.write_raster(
        ctx,
        data,
        transform=grid.transform,
        crs=grid.crs,
        nodata=nodata,
        dtype="float32",
        band_names=[field],
        value_range=(float(np.float32(low)), float(np.float32(high))),
    )


def _idw(
    grid: TargetGrid,
    xs: np.ndarray,
    ys: np.ndarray,
    zs: np.ndarray,
    *,
    k: int,
    power: float,
    radius: float,
    eps: float,
    progress: Any,
) -> tuple[np.ndarray, int]:
    """IDW on every cell centre (NaN where no sample is within ``radius``), exact k-nearest search.

    Cells are taken in square tiles. For a tile's centre c and half-diagonal h, any cell x of the tile
    has its k nearest samples within d_k(c) + 2h of c (d_k(x) <= d_k(c) + |x - c|), and its samples
    within ``radius`` within radius + h of c: only those candidates are compared, exactly.
    """
    import numpy as np

    t = grid.transform
    out = np.full(grid.cells, np.nan)
    tile = IDW_TILE
    tiles = [(r, c) for r in range(0, grid.height, tile) for c in range(0, grid.width, tile)]
    for done, (r0, c0) in enumerate(tiles):
        r1, c1 = min(r0 + tile, grid.height), min(c0 + tile, grid.width)
        rows, cols = np.mgrid[r0:r1, c0:c1]
        cx = t.c + (cols.ravel() + 0.5) * t.a
        cy = t.f + (rows.ravel() + 0.5) * t.e
        mx, my = (cx.min() + cx.max()) / 2, (cy.min() + cy.max()) / 2
        h = math.hypot(cx.max() - cx.min(), cy.max() - cy.min()) / 2
        d_centre = np.hypot(xs - mx, ys - my)
        kth = float(np.partition(d_centre, k - 1)[k - 1])
        reach = min(kth + 2 * h, radius + h)
        cand = np.flatnonzero(d_centre <= reach * (1 + 1e-12) + eps)
        flat = (rows * grid.width + cols).ravel()
        if cand.size == 0:
            continue
        block = max(1, IDW_PAIRS_PER_BLOCK // cand.size)
        for s in range(0, flat.size, block):
            bx, by = cx[s : s + block], cy[s : s + block]
            d = np.hypot(bx[:, None] - xs[cand][None, :], by[:, None] - ys[cand][None, :])
            d[d > radius] = np.inf
            if cand.size > k:
                pick = np.argpartition(d, k - 1, axis=1)[:, :k]
                d = np.take_along_axis(d, pick, axis=1)
                z = zs[cand][pick]
            else:
                z = np.broadcast_to(zs[cand], d.shape)
            at = d <= eps
            # (nearest / d)^power: the same ratios as 1 / d^power, without overflow for close samples.
            nearest = np.maximum(d.min(axis=1, keepdims=True), eps)
            with np.errstate(invalid="ignore"):
                w = np.where(np.isinf(d), 0.0, (nearest / np.maximum(d, eps)) ** power)
            w = np.where(at.any(axis=1)[:, None], at.astype("float64"), w)
            total = w.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                value = (w * z).sum(axis=1) / total
            value[total == 0] = np.nan
            out[flat[s : s + block]] = value
        progress((done + 1) / len(tiles))
    if np.isinf(radius):
        empty = 0
    else:
        empty = int(np.isnan(out).sum())
    if np.isinf(radius) and np.isnan(out).any():
        raise EngineError(
            "IDW left cells without a value although every cell has k neighbours",
            code="ENGINE_FAILED",
            hint="this is a bug in idw_interpolation",
        )
    return out, empty
