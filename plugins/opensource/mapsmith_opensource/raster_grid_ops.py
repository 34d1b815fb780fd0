"""clip_raster, reproject_raster and resample_raster: cells moved or cut, never recomputed.

Split from ``raster_ops`` along its seams. These operations copy a band's stored numbers (and write the
same scale and offset on the output, so it means what the input meant) unless the resampling method
computes new values (they would be rounded to the stored integers) or ranks values under a negative
scale: then they work on physical values and write them as float64 without scale tags
(``raster_shared._cell_copy``). They must never move values to another grid without
the resampling method the caller named (there is no default).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.raster_shared import (
    CELL_SNAP,
    RANGE_KEEPING,
    _ceil_cells,
    _cell_copy,
    _engine,
    _floor_cells,
    _free_nodata,
    _grid_record,
    _read_all,
    _resample_notes,
    _resampling,
    _too_coarse,
    _unit_name,
    _valid_range,
)

if TYPE_CHECKING:
    import numpy as np
    from pyproj import CRS

    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid


# -- clip_raster -----------------------------------------------------------------------------

BOUNDS_ARGS = ("min_x", "min_y", "max_x", "max_y")


def validate_clip_raster(ctx: RunContext) -> None:
    given = [name for name in BOUNDS_ARGS if ctx.arguments.get(name) is not None]
    has_mask = ctx.arguments.get("mask_path") is not None
    if has_mask and given:
        raise ArgumentError(
            f"clip_raster takes a mask_path or bounds, not both (got mask_path and {', '.join(given)})",
            code="CLIP_REGION_AMBIGUOUS",
            evidence={"mask_path": ctx.arguments["mask_path"], "bounds_given": given},
            hint="pass either mask_path (polygons) or all four of min_x, min_y, max_x, max_y",
        )
    if not has_mask and not given:
        raise ArgumentError(
            "clip_raster needs the region to keep: a mask_path or min_x, min_y, max_x, max_y",
            code="CLIP_REGION_REQUIRED",
            hint="pass mask_path (polygons) or all four of min_x, min_y, max_x, max_y in the raster's CRS",
        )
    if given and len(given) < 4:
        missing = [n for n in BOUNDS_ARGS if n not in given]
        raise ArgumentError(
            f"bounds need all four of {', '.join(BOUNDS_ARGS)}; missing {', '.join(missing)}",
            code="BOUNDS_INCOMPLETE",
            evidence={"given": given, "missing": missing},
            hint="pass min_x, min_y, max_x and max_y, in the raster's CRS",
        )
    if given:
        a = ctx.arguments
        if not (a["min_x"] < a["max_x"] and a["min_y"] < a["max_y"]):
            raise ArgumentError(
                f"bounds are inverted or empty: x {a['min_x']}..{a['max_x']}, y {a['min_y']}..{a['max_y']}",
                code="BOUNDS_INVERTED",
                evidence={name: a[name] for name in BOUNDS_ARGS},
                hint="min_x must be less than max_x and min_y less than max_y",
            )


def _window_of(grid: Grid, bounds: tuple[float, float, float, float]) -> tuple[int, int, int, int] | None:
    """(row0, row1, col0, col1): the cells of ``grid`` that overlap ``bounds`` with positive area."""
    t = grid.transform
    minx, miny, maxx, maxy = bounds
    col0 = max(0, _floor_cells((minx - t.c) / t.a))
    col1 = min(grid.width, _ceil_cells((maxx - t.c) / t.a))
    row0 = max(0, _floor_cells((t.f - maxy) / -t.e))
    row1 = min(grid.height, _ceil_cells((t.f - miny) / -t.e))
    if col1 <= col0 or row1 <= row0:
        return None
    return row0, row1, col0, col1


def clip_raster(ctx: RunContext) -> None:
    import numpy as np
    from affine import Affine
    from rasterio.windows import Window

    from mapsmith.crs import crs_label
    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    grid = open_grid(ctx)
    all_touched = bool(ctx.arguments.get("all_touched", False))
    inside = None
    if ctx.arguments.get("mask_path") is not None:
        import shapely
        from rasterio.features import geometry_mask

        from mapsmith_opensource.common import align_to, read_input

        mask = align_to(ctx, read_input(ctx, "mask_path"), grid.crs, "mask_path")
        aligned = "mask_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {})
        region = shapely.union_all(mask.geometry.values)
        if region.is_empty:
            raise InputError(
                "mask_path holds no geometry",
                code="MASK_EMPTY",
                evidence={"argument": "mask_path"},
                hint="pass a layer with polygons",
            )
        bounds = tuple(region.bounds)
        how = f"polygons of mask_path{' (transformed to the raster CRS)' if aligned else ''}"
        window = _window_of(grid, bounds)
        if window is not None:
            row0, row1, col0, col1 = window
            t = grid.transform @ Affine.translation(col0, row0)
            inside = geometry_mask(
                [region], out_shape=(row1 - row0, col1 - col0), transform=t, all_touched=all_touched, invert=True
            )
            rows, cols = np.nonzero(inside)
            if rows.size == 0:
                raise InputError(
                    f"the mask covers no cell {'' if all_touched else 'centre '}of input_path: nothing to keep",
                    code="CLIP_EMPTY",
                    evidence={
                        "mask_bounds": list(bounds),
                        "raster_bounds": list(grid.bounds),
                        "all_touched": all_touched,
                    },
                    hint="pass all_touched=true to keep every cell the polygons touch, or check the mask lies "
                    "over the raster",
                )
            # crop to the cells kept, not to the mask's bounding box
            inside = inside[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
            window = (
                row0 + int(rows.min()),
                row0 + int(rows.max()) + 1,
                col0 + int(cols.min()),
                col0 + int(cols.max()) + 1,
            )
    else:
        a = ctx.arguments
        bounds = (a["min_x"], a["min_y"], a["max_x"], a["max_y"])
        how = f"bounds {list(bounds)} in {crs_label(grid.crs)}"
        window = _window_of(grid, bounds)
    if window is None:
        raise InputError(
            f"the clip region ({how}) does not overlap input_path, whose bounds are {list(grid.bounds)} "
            f"in {crs_label(grid.crs)}",
            code="CLIP_OUTSIDE_RASTER",
            evidence={"region_bounds": list(bounds), "raster_bounds": list(grid.bounds), "crs": crs_label(grid.crs)},
            hint="give the region in the raster's CRS (describe_dataset shows its bounds)",
        )
    row0, row1, col0, col1 = window
    copy = _cell_copy(grid)
    data = _read_all(grid, Window(col0, row0, col1 - col0, row1 - row0), stored=copy.stored)
    source_range = _valid_range(data)
    masked_out = 0
    if inside is not None:
        outside = np.broadcast_to(~inside, data.shape)
        masked_out = int((~inside & ~np.ma.getmaskarray(data[0])).sum())
        data = np.ma.masked_where(outside | np.ma.getmaskarray(data), data)
    dtype = copy.dtype
    nodata = _free_nodata(dtype, data, copy.nodata, "input_path")
    if grid.nodata is None and np.ma.getmaskarray(data).any():
        ctx.notes.append(
            f"input_path declares no nodata value; cells outside the mask are written as {nodata} and declared nodata"
        )
    transform = grid.transform @ Affine.translation(col0, row0)
    kept = int((~np.ma.getmaskarray(data[0])).sum())
    ctx.parameters["x-mapsmith:clip_window"] = {
        "row_offset": row0,
        "column_offset": col0,
        "rows": row1 - row0,
        "columns": col1 - col0,
        "cells_kept": kept,
        "cells_outside_mask": masked_out,
    }
    rule = "every cell the polygons touch" if all_touched else "cells whose centre lies inside the polygons"
    ctx.notes.append(
        f"clipped to {how}: kept rows {row0}..{row1 - 1}, columns {col0}..{col1 - 1} of input_path's own grid "
        f"(no resampling); {kept} valid cells kept"
        + (f"; {rule} kept, {masked_out} other cells in the window set to nodata" if inside is not None else "")
    )
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(grid.crs))
    ctx.crs_decisions.setdefault(
        "reason",
        "clipped on input_path's own grid, so its cells are written unchanged"
        + (
            "; the mask was transformed to it (see x-mapsmith:alignment)"
            if "mask_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {})
            else ""
        ),
    )
    write_raster(
        ctx,
        data,
        transform=transform,
        crs=grid.crs,
        nodata=nodata,
        dtype=dtype,
        band_names=grid.band_names,
        value_range=source_range,
        scales=copy.scales,
        offsets=copy.offsets,
    )


# -- reproject_raster ------------------------------------------------------------------------


def _gdal_operation(source: CRS, target: CRS, lonlat: Any, record: dict[str, Any]) -> str | None:
    """The operation ``choose_transformer`` chose, as GDAL's COORDINATE_OPERATION wants it (in the
    CRSs' own axis order, not the x/y order of the recorded pipeline); None when it cannot be matched."""
    from pyproj.transformer import AreaOfInterest, TransformerGroup

    aoi = AreaOfInterest(*lonlat) if lonlat is not None else None
    group = TransformerGroup(source, target, always_xy=False, area_of_interest=aoi)
    if not group.transformers:
        return None
    first = group.transformers[0]
    if not str(record.get("x-mapsmith:description", "")).startswith(first.description):
        return None
    try:
        return first.to_proj4()
    except Exception:
        return None


def _warp(
    grid: Grid,
    data: np.ma.MaskedArray,
    *,
    dst_crs: CRS,
    dst_transform: Any,
    width: int,
    height: int,
    nodata: float,
    method: str,
    dtype: str,
    **options: str,
) -> np.ndarray:
    import numpy as np
    from rasterio.warp import reproject

    source = np.ma.filled(data.astype(dtype), nodata)
    destination = np.full((grid.count, height, width), nodata, dtype=dtype)
    reproject(
        source,
        destination,
        src_transform=grid.transform,
        src_crs=grid.crs.to_wkt(),
        src_nodata=nodata,
        dst_transform=dst_transform,
        dst_crs=dst_crs.to_wkt(),
        dst_nodata=nodata,
        resampling=_resampling(method),
        **options,
    )
    return destination


def _valid_out(array: np.ndarray, nodata: float) -> int:
    import numpy as np

    if math.isnan(nodata):
        return int((~np.isnan(array[0])).sum())
    return int((array[0] != nodata).sum())


def reproject_raster(ctx: RunContext) -> None:
    from rasterio.warp import calculate_default_transform

    from mapsmith.crs import choose_transformer, crs_label, parse_crs
    from mapsmith_opensource.common import warn_about_transformation
    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    grid = open_grid(ctx)
    target = parse_crs(ctx.arguments["target_crs"])
    method = ctx.arguments["resampling"]
    cell_size = ctx.arguments.get("cell_size")
    info = ctx.inputs["input_path"]
    source_label, target_label = crs_label(grid.crs), crs_label(target)
    _, record = choose_transformer(grid.crs, target, info.bounds_lonlat)
    operation = _gdal_operation(grid.crs, target, info.bounds_lonlat, record)
    options = {"COORDINATE_OPERATION": operation} if operation else {}
    left, bottom, right, top = grid.bounds
    dst_transform, width, height = calculate_default_transform(
        grid.crs.to_wkt(),
        target.to_wkt(),
        grid.width,
        grid.height,
        left,
        bottom,
        right,
        top,
        **options,
    )
    unit = _unit_name(target)
    if cell_size is not None:
        _too_coarse(cell_size, (width * abs(dst_transform.a), height * abs(dst_transform.e)), unit, target_label)
        dst_transform, width, height = calculate_default_transform(
            grid.crs.to_wkt(),
            target.to_wkt(),
            grid.width,
            grid.height,
            left,
            bottom,
            right,
            top,
            resolution=cell_size,
            **options,
        )
    copy = _cell_copy(grid, method)
    data = _read_all(grid, stored=copy.stored)
    nodata = _free_nodata(copy.dtype, data, copy.nodata, "input_path")
    out = _warp(
        grid,
        data,
        dst_crs=target,
        dst_transform=dst_transform,
        width=width,
        height=height,
        nodata=nodata,
        method=method,
        dtype=copy.dtype,
        **options,
    )
    ctx.expected_output_crs = target.to_wkt()
    ctx.parameters["target_crs"] = target_label
    ctx.parameters["x-mapsmith:output_grid"] = _grid_record(
        dst_transform,
        width,
        height,
        unit=unit,
        cell_size_from="cell_size"
        if cell_size is not None
        else "GDAL's suggested warp output (about the source cell size, moved to the target CRS)",
    )
    ctx.crs_decisions.update(
        {
            "analysis_crs": target_label,
            "reason": f"reprojection requested from {source_label} to {target_label}; cell values moved to the "
            f"new grid by {method} resampling",
            "source_crs": source_label,
            "target_crs": target_label,
            "transformation": record,
            "x-mapsmith:resampling": method,
        }
    )
    if operation:
        ctx.notes.append(
            "GDAL warped with the recorded PROJ operation (given as COORDINATE_OPERATION, in the CRSs' "
            "own axis order), not one of its own choosing"
        )
    else:
        ctx.notes.append("the recorded PROJ operation could not be handed to GDAL; GDAL chose its own for the warp")
    if grid.nodata is None:
        ctx.notes.append(
            f"input_path declares no nodata value; cells outside its footprint are written as {nodata} "
            "and declared nodata"
        )
    _resample_notes(ctx, method, copy.dtype)
    warn_about_transformation(ctx, record, f"{source_label} to {target_label}")
    source_range = _valid_range(data)
    write_raster(
        ctx,
        out,
        transform=dst_transform,
        crs=target,
        nodata=nodata,
        dtype=copy.dtype,
        band_names=grid.band_names,
        value_range=source_range if method in RANGE_KEEPING and source_range else None,
        scales=copy.scales,
        offsets=copy.offsets,
    )
    if _valid_out(out, nodata) == 0:
        ctx.warn(
            "RASTER_OUTPUT_EMPTY",
            "every cell of the reprojected raster is nodata",
            "check target_crs covers the data's area and cell_size is in the target CRS's unit",
        )


# -- resample_raster -------------------------------------------------------------------------


def resample_raster(ctx: RunContext) -> None:
    from affine import Affine

    from mapsmith.crs import crs_label
    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    grid = open_grid(ctx)
    size = float(ctx.arguments["cell_size"])
    method = ctx.arguments["resampling"]
    t = grid.transform
    extent = (grid.width * abs(t.a), grid.height * abs(t.e))
    unit = _unit_name(grid.crs)
    _too_coarse(size, extent, unit, crs_label(grid.crs))
    width, height = _ceil_cells(extent[0] / size), _ceil_cells(extent[1] / size)
    dst_transform = Affine(size, 0.0, t.c, 0.0, -size, t.f)  # the top-left corner stays where it is
    copy = _cell_copy(grid, method)
    data = _read_all(grid, stored=copy.stored)
    nodata = _free_nodata(copy.dtype, data, copy.nodata, "input_path")
    out = _warp(
        grid,
        data,
        dst_crs=grid.crs,
        dst_transform=dst_transform,
        width=width,
        height=height,
        nodata=nodata,
        method=method,
        dtype=copy.dtype,
    )
    scale = [size / abs(t.a), size / abs(t.e)]
    ctx.parameters["x-mapsmith:output_grid"] = _grid_record(dst_transform, width, height, unit=unit, scale_factor=scale)
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(grid.crs))
    ctx.crs_decisions.setdefault(
        "reason", f"resampled in input_path's own CRS ({unit} cells), top-left corner kept, by {method} resampling"
    )
    ctx.notes.append(
        f"cells {abs(t.a):g} x {abs(t.e):g} -> {size:g} x {size:g} {unit} (scale {scale[0]:g} x {scale[1]:g}) by "
        f"{method}; grid {grid.width} x {grid.height} -> {width} x {height}, top-left corner ({t.c:g}, {t.f:g}) kept"
    )
    over = (width * size - extent[0], height * size - extent[1])
    if over[0] > CELL_SNAP * size or over[1] > CELL_SNAP * size:
        ctx.notes.append(
            f"the extent is not a whole number of {size:g} {unit} cells: the last column/row reaches "
            f"{over[0]:g} / {over[1]:g} {unit} beyond the input; its parts outside the input are nodata"
        )
    if grid.nodata is None:
        ctx.notes.append(
            f"input_path declares no nodata value; cells without data are written as {nodata} and declared nodata"
        )
    _resample_notes(ctx, method, copy.dtype)
    source_range = _valid_range(data)
    write_raster(
        ctx,
        out,
        transform=dst_transform,
        crs=grid.crs,
        nodata=nodata,
        dtype=copy.dtype,
        band_names=grid.band_names,
        value_range=source_range if method in RANGE_KEEPING and source_range else None,
        scales=copy.scales,
        offsets=copy.offsets,
    )
