"""Between grids and features: raster_to_polygons and rasterize_layer (rasterio, shapely, numpy).

Split from ``convert_ops`` along its seams. A continuous surface is not polygonized unasked, features
that burn no cell are named, and nothing is dropped without a count in the notes. Engines are imported
inside the functions. This module must never write a grid other than the one the caller named.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext

from mapsmith_opensource.grid_common import (
    FLOAT_NODATA,
    MAX_RASTERIZE_CELLS,
    TargetGrid,
    _given,
    _numeric_values,
    _present,
    _progress,
    _target_grid,
    _unit_name,
    _vector_components,
)

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
