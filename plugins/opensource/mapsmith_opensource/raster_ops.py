"""Raster transformations on the opensource stack (rasterio, numpy): clip, reproject, resample,
reclassify, band arithmetic, band extraction and band statistics.

Every raster is read through ``raster_io.open_grid`` (so grids with two georeferencings, rotated grids
and grids without a CRS are refused here as everywhere) and written with ``raster_io.write_raster``.

What this module must never do:

* move values to another grid without the resampling method the caller named (there is no default);
* hand any part of a band_math expression to ``eval``/``exec``/``compile``: the text is parsed with
  ``ast.parse`` and only a whitelisted tree is evaluated, with numpy, on arrays;
* pick a nodata value that is also a data value, or drop cells without counting them;
* import rasterio or numpy at module level (a start-up test checks this).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import numpy as np
    from pyproj import CRS

    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid

REGISTRATIONS = (
    Registration(
        "clip_raster", "clip_raster", engine="rasterio", validate="validate_clip_raster", requirement="raster"
    ),
    Registration("reproject_raster", "reproject_raster", engine="rasterio", requirement="raster"),
    Registration("resample_raster", "resample_raster", engine="rasterio", requirement="raster"),
    Registration(
        "reclassify_raster",
        "reclassify_raster",
        engine="rasterio",
        validate="validate_reclassify_raster",
        requirement="raster",
    ),
    Registration("band_math", "band_math", engine="rasterio", validate="validate_band_math", requirement="raster"),
    Registration("extract_band", "extract_band", engine="rasterio", requirement="raster"),
    Registration(
        "band_statistics",
        "band_statistics",
        engine="rasterio",
        validate="validate_band_statistics",
        requirement="raster",
    ),
)

# A grid edge computed from coordinates is taken as a whole number of cells when it is this close
# to one (in cells): 0.1 / 0.1 is 0.9999999999999999, and one cell more would be wrong.
CELL_SNAP = 1e-6
# Resampling methods whose every output value lies between the lowest and highest input value they
# read (non-negative weights, or a value picked from the inputs). cubic and lanczos overshoot.
RANGE_KEEPING = frozenset({"nearest", "bilinear", "cubic_spline", "average", "mode", "min", "max", "med"})
INTERPOLATING = frozenset({"bilinear", "cubic", "cubic_spline", "lanczos", "average"})
BAND_MATH_NODATA = -9999.0
FLOAT32_MAX = 3.4028234663852886e38


# -- shared helpers --------------------------------------------------------------------------


def _floor_cells(value: float) -> int:
    nearest = round(value)
    return int(nearest) if abs(value - nearest) < CELL_SNAP else math.floor(value)


def _ceil_cells(value: float) -> int:
    nearest = round(value)
    return int(nearest) if abs(value - nearest) < CELL_SNAP else math.ceil(value)


def _engine(ctx: RunContext) -> None:
    from mapsmith_opensource.raster_io import set_raster_engine

    set_raster_engine(ctx)


def _read_all(grid: Grid, window: Any = None) -> np.ma.MaskedArray:
    """Every band, bands first, north-up, nodata and NaN masked."""
    import numpy as np

    return np.ma.stack([grid.read(b, window=window) for b in range(1, grid.count + 1)])


def _valid_range(data: np.ma.MaskedArray) -> tuple[float, float] | None:
    import numpy as np

    values = np.ma.compressed(data)
    if values.size == 0:
        return None
    return float(values.min()), float(values.max())


def _free_nodata(dtype: str, data: Any, declared: float | None, what: str) -> float:
    """``declared`` when there is one; else a value of ``dtype`` that no valid cell holds. Refuses when
    every candidate is a data value, rather than writing a nodata that hides real cells."""
    import numpy as np

    if declared is not None:
        return declared
    kind = np.dtype(dtype)
    if np.issubdtype(kind, np.floating):
        candidates = [BAND_MATH_NODATA, float("nan")]
    else:
        info = np.iinfo(kind)
        candidates = [float(info.min), float(info.max)] if info.min < 0 else [float(info.max), float(info.min)]
    values = np.ma.compressed(data) if np.ma.isMaskedArray(data) else np.asarray(data).ravel()
    for value in candidates:
        if math.isnan(value) or not bool((values == value).any()):
            return value
    raise InputError(
        f"{what} declares no nodata value and its cells use every candidate ({candidates}), so cells left "
        "empty could not be told from data",
        code="NODATA_UNAVAILABLE",
        evidence={"dtype": dtype, "candidates": candidates},
        hint="declare the raster's nodata value first (gdal_edit.py -a_nodata), then run again",
    )


def _resolve_band(grid: Grid, text: str, argument: str) -> int:
    """A band number from text naming a band by number ("3") or by name ("nir"); refuses a number that
    is also another band's name."""
    text = str(text).strip()
    if text.isdigit():
        number = int(text)
        if text in grid.band_names and grid.band_names.index(text) + 1 != number:
            raise ArgumentError(
                f"{argument}={text!r} is ambiguous in {grid.slot}: band {number}, or the band named {text!r} "
                f"(band {grid.band_names.index(text) + 1})",
                code="BAND_AMBIGUOUS",
                evidence={"argument": argument, "band": text, "bands": grid.band_names},
                hint=f"pass band_{number} for band number {number}, or rename the band called {text!r}",
            )
        return grid.band_index(number)
    return grid.band_index(text)


def _only_band(ctx: RunContext, grid: Grid, argument: str = "band") -> int:
    given = ctx.arguments.get(argument)
    if given is not None:
        return _resolve_band(grid, given, argument)
    if grid.count > 1:
        raise ArgumentError(
            f"{grid.slot} has {grid.count} bands ({', '.join(grid.band_names)}) and no {argument} was named; "
            "MapSmith will not pick one",
            code="BAND_REQUIRED",
            evidence={"argument": argument, "bands": grid.band_names},
            hint=f"pass {argument} as a number 1..{grid.count} or one of {grid.band_names}",
        )
    return 1


def _unit_name(crs: CRS) -> str:
    axes = crs.axis_info
    return axes[0].unit_name if axes else "unknown unit"


def _resampling(name: str) -> Any:
    from rasterio.enums import Resampling

    return Resampling[name]


def _grid_record(transform: Any, width: int, height: int, **extra: Any) -> dict[str, Any]:
    return {
        "width": width,
        "height": height,
        "cell_size": [abs(transform.a), abs(transform.e)],
        "transform": [float(v) for v in transform.to_gdal()],
        **extra,
    }


def _too_coarse(cell_size: float, extent: tuple[float, float], unit: str, crs_label: str | None) -> None:
    """Refuse a cell size wider than the whole extent both ways: usually metres given to a degree CRS."""
    if cell_size > extent[0] and cell_size > extent[1]:
        raise ArgumentError(
            f"cell_size {cell_size:g} is larger than the whole raster ({extent[0]:g} x {extent[1]:g} {unit} in "
            f"{crs_label}); the output would be a single cell",
            code="CELL_SIZE_TOO_LARGE",
            evidence={"cell_size": cell_size, "extent": list(extent), "unit": unit, "crs": crs_label},
            hint=f"cell_size is in the CRS's own unit ({unit}); give it in that unit",
        )


def _resample_notes(ctx: RunContext, method: str, dtype: str) -> None:
    import numpy as np

    if method in INTERPOLATING and not np.issubdtype(np.dtype(dtype), np.floating):
        ctx.notes.append(
            f"{method} resampling computed new values on an integer ({dtype}) raster; GDAL rounded them to {dtype}. "
            "If the values are classes (land cover, zones), nearest or mode keeps them classes"
        )


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
    data = _read_all(grid, Window(col0, row0, col1 - col0, row1 - row0))
    source_range = _valid_range(data)
    masked_out = 0
    if inside is not None:
        outside = np.broadcast_to(~inside, data.shape)
        masked_out = int((~inside & ~np.ma.getmaskarray(data[0])).sum())
        data = np.ma.masked_where(outside | np.ma.getmaskarray(data), data)
    dtype = grid.dtypes[0]
    nodata = _free_nodata(dtype, data, grid.nodata, "input_path")
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
    **options: str,
) -> np.ndarray:
    import numpy as np
    from rasterio.warp import reproject

    dtype = grid.dtypes[0]
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
    data = _read_all(grid)
    nodata = _free_nodata(grid.dtypes[0], data, grid.nodata, "input_path")
    out = _warp(
        grid,
        data,
        dst_crs=target,
        dst_transform=dst_transform,
        width=width,
        height=height,
        nodata=nodata,
        method=method,
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
    _resample_notes(ctx, method, grid.dtypes[0])
    warn_about_transformation(ctx, record, f"{source_label} to {target_label}")
    source_range = _valid_range(data)
    write_raster(
        ctx,
        out,
        transform=dst_transform,
        crs=target,
        nodata=nodata,
        dtype=grid.dtypes[0],
        band_names=grid.band_names,
        value_range=source_range if method in RANGE_KEEPING and source_range else None,
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
    data = _read_all(grid)
    nodata = _free_nodata(grid.dtypes[0], data, grid.nodata, "input_path")
    out = _warp(
        grid,
        data,
        dst_crs=grid.crs,
        dst_transform=dst_transform,
        width=width,
        height=height,
        nodata=nodata,
        method=method,
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
    _resample_notes(ctx, method, grid.dtypes[0])
    source_range = _valid_range(data)
    write_raster(
        ctx,
        out,
        transform=dst_transform,
        crs=grid.crs,
        nodata=nodata,
        dtype=grid.dtypes[0],
        band_names=grid.band_names,
        value_range=source_range if method in RANGE_KEEPING and source_range else None,
    )


# -- reclassify_raster -----------------------------------------------------------------------

_NUM = r"[-+]?(?:inf|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_RANGE_RULE = re.compile(rf"^\s*({_NUM})\s*(?:-|\.\.)\s*({_NUM})\s*:\s*({_NUM}|nodata)\s*$", re.IGNORECASE)
_VALUE_RULE = re.compile(rf"^\s*({_NUM})\s*:\s*({_NUM}|nodata)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Rule:
    text: str
    low: float
    high: float | None  # None: an exact value rule (low is the value)
    out: float | None  # None: the cells become nodata

    def overlaps(self, other: Rule) -> bool:
        a_low, a_high = self.low, self.high
        b_low, b_high = other.low, other.high
        if a_high is None and b_high is None:
            return a_low == b_low
        if a_high is None:
            return b_low <= a_low < b_high  # type: ignore[operator]
        if b_high is None:
            return a_low <= b_low < a_high
        return a_low < b_high and b_low < a_high


def _table_error(text: str, problem: str, **evidence: Any) -> ArgumentError:
    return ArgumentError(
        f"table: {problem}",
        code="RECLASS_TABLE_INVALID",
        evidence={"argument": "table", "table": text, **evidence},
        hint="write rules separated by commas: 'low-high:new' for the range low <= v < high (inf allowed), "
        "'value:new' for one exact value, 'new' may be 'nodata'; e.g. '0-500:1, 500-1000:2, 1000-inf:3'",
    )


def parse_table(text: str) -> list[Rule]:
    """Rules from "0-500:1, 500-1000:2, 1000-inf:3, -9999:nodata"; overlapping rules are refused."""
    rules: list[Rule] = []
    parts = [p for p in re.split(r"[,;]", text)]
    for part in parts:
        if not part.strip():
            raise _table_error(text, "an empty rule (two separators in a row, or a trailing one)")
        m = _RANGE_RULE.match(part)
        if m:
            low, high = float(m.group(1)), float(m.group(2))
            if not low < high:
                raise _table_error(
                    text, f"rule {part.strip()!r}: the range {low:g}..{high:g} is empty", rule=part.strip()
                )
            out = None if m.group(3).lower() == "nodata" else float(m.group(3))
            rules.append(Rule(part.strip(), low, high, out))
            continue
        m = _VALUE_RULE.match(part)
        if m:
            value = float(m.group(1))
            if math.isinf(value):
                raise _table_error(text, f"rule {part.strip()!r}: an exact value cannot be infinite", rule=part.strip())
            out = None if m.group(2).lower() == "nodata" else float(m.group(2))
            rules.append(Rule(part.strip(), value, None, out))
            continue
        raise _table_error(text, f"cannot read the rule {part.strip()!r}", rule=part.strip())
    for i, a in enumerate(rules):
        if a.out is not None and math.isinf(a.out):
            raise _table_error(text, f"rule {a.text!r}: the new value cannot be infinite", rule=a.text)
        for b in rules[i + 1 :]:
            if a.overlaps(b):
                raise _table_error(
                    text,
                    f"rules {a.text!r} and {b.text!r} overlap; which applies would be a guess",
                    rules=[a.text, b.text],
                )
    return rules


def validate_reclassify_raster(ctx: RunContext) -> None:
    parse_table(ctx.arguments["table"])


def _output_dtype(values: Sequence[float], kept: Any = None) -> tuple[str, float]:
    """The smallest dtype holding ``values`` (and the ``kept`` input values) exactly, with a nodata value
    none of them uses."""
    import numpy as np

    extremes = list(values) + ([float(kept.min()), float(kept.max())] if kept is not None and kept.size else [])
    low, high = min(extremes), max(extremes)

    def taken(v: float) -> bool:
        return v in values or (kept is not None and bool((kept == v).any()))

    integral = all(float(v).is_integer() for v in values) and (kept is None or bool(np.all(np.mod(kept, 1) == 0)))
    if integral:
        for name in ("uint8", "int8", "uint16", "int16", "uint32", "int32", "int64"):
            info = np.iinfo(name)
            if info.min <= low and high <= info.max:
                # the type's extremes are the only candidates: a nodata inside the data's span would hide it
                for nodata in (
                    (float(info.max), float(info.min)) if info.min == 0 else (float(info.min), float(info.max))
                ):
                    if not taken(nodata):
                        return name, nodata
    exact32 = all(float(np.float32(v)) == v for v in values) and (
        kept is None or bool(np.all(kept.astype("float32").astype("float64") == kept))
    )
    return ("float32" if exact32 else "float64"), (BAND_MATH_NODATA if not taken(BAND_MATH_NODATA) else float("nan"))


def reclassify_raster(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    rules = parse_table(ctx.arguments["table"])
    unmatched_rule = ctx.arguments["unmatched"]
    grid = open_grid(ctx)
    band = _only_band(ctx, grid)
    data = grid.read(band)
    valid = ~np.ma.getmaskarray(data)
    values = np.ma.getdata(data).astype("float64")
    stored = np.ma.getdata(data)
    # A float raster is compared in its own precision: "0.1:5" must match the float32 cells that hold 0.1.
    # An integer raster is compared in float64, so a bound of 2.5 is not truncated to 2.
    floating = np.issubdtype(stored.dtype, np.floating)
    compared = stored if floating else values

    def bound(v: float) -> Any:
        return stored.dtype.type(v) if floating else v

    out = np.zeros(values.shape, dtype="float64")
    out_mask = ~valid
    matched = np.zeros(values.shape, dtype=bool)
    counts = []
    for rule in rules:
        if rule.high is None:
            hit = valid & (compared == bound(rule.low))
        else:
            hit = valid & (compared >= bound(rule.low)) & (compared < bound(rule.high))
        counts.append({"rule": rule.text, "cells": int(hit.sum())})
        matched |= hit
        if rule.out is None:
            out_mask = out_mask | hit
        else:
            out[hit] = rule.out
    unmatched = valid & ~matched
    n_unmatched = int(unmatched.sum())
    written = [r.out for r in rules if r.out is not None]
    kept = None
    if unmatched_rule == "keep":
        kept = values[unmatched]
        out[unmatched] = kept
    else:
        out_mask = out_mask | unmatched
    dtype, nodata = _output_dtype(written or [0.0], kept)
    result = np.ma.masked_array(out, mask=out_mask)
    extremes = written + ([float(kept.min()), float(kept.max())] if kept is not None and kept.size else [])
    value_range = (min(extremes), max(extremes)) if extremes else None
    report = {
        "rules": counts,
        "unmatched_cells": n_unmatched,
        "unmatched_became": "nodata" if unmatched_rule == "nodata" else "kept their input value",
        "input_nodata_cells": int((~valid).sum()),
        "output_dtype": dtype,
        "output_nodata": None if math.isnan(nodata) else nodata,
    }
    ctx.parameters["x-mapsmith:reclass_counts"] = report
    ctx.parameters["band"] = band
    ctx.answer.update(report)
    ctx.notes.append(
        f"band {band} reclassified by {len(rules)} rule(s) (ranges include their low end and exclude their high "
        f"end); {n_unmatched} valid cells matched no rule and "
        + ("became nodata" if unmatched_rule == "nodata" else "kept their value")
        + f"; written as {dtype} with nodata {nodata}"
    )
    if n_unmatched and unmatched_rule == "nodata":
        ctx.warn(
            "RECLASS_UNMATCHED_CELLS",
            f"{n_unmatched} valid cells matched no rule of the table and were written as nodata",
            "extend the table (a range ending in inf closes the top) or pass unmatched='keep' if that is not meant",
        )
    write_raster(
        ctx,
        result,
        transform=grid.transform,
        crs=grid.crs,
        nodata=nodata,
        dtype=dtype,
        band_names=[grid.band_names[band - 1]],
        value_range=value_range,
    )


# -- band_math: a whitelisted expression language ----------------------------------------------

MAX_EXPRESSION_CHARS = 2000
MAX_DEPTH = 60
FUNCTIONS: dict[str, tuple[int, int | None]] = {  # name: (fewest, most arguments)
    "abs": (1, 1),
    "sqrt": (1, 1),
    "log": (1, 1),
    "exp": (1, 1),
    "min": (2, None),
    "max": (2, None),
    "where": (3, 3),
}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_UNARY = {ast.USub: "-", ast.UAdd: "+"}


def _expression_error(text: str, problem: str, node: ast.AST | None = None, **evidence: Any) -> ArgumentError:
    where = {}
    if node is not None and hasattr(node, "col_offset"):
        where = {"position": node.col_offset, "token": ast.get_source_segment(text, node)}
    return ArgumentError(
        f"expression: {problem}",
        code="EXPRESSION_INVALID",
        evidence={"argument": "expression", "expression": text[:200], **where, **evidence},
        hint="use band names, numbers, + - * / **, comparisons (giving 1 or 0) and the functions "
        f"{', '.join(FUNCTIONS)}; where(condition, a, b) picks a where condition is non-zero",
    )


def parse_expression(text: str, names: Sequence[str] | None) -> tuple[ast.expr, set[str]]:
    """The checked tree of ``text`` and the band names it uses. ``names`` None accepts any name
    (checked later against the inputs' bands). Never evaluates anything."""
    if not text.strip():
        raise _expression_error(text, "the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise _expression_error(text, f"longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise _expression_error(
            text, f"not a valid expression ({exc.msg} at column {exc.offset})", position=exc.offset
        ) from exc
    except (RecursionError, MemoryError, ValueError) as exc:
        raise _expression_error(text, "too deeply nested") from exc
    used: set[str] = set()
    source = text.strip()

    def check(node: ast.AST, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _expression_error(source, f"nested deeper than {MAX_DEPTH} levels", node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise _expression_error(source, f"{ast.get_source_segment(source, node)!r} is not a number", node)
        elif isinstance(node, ast.Name):
            if names is not None and node.id not in names:
                raise _expression_error(
                    source,
                    f"{node.id!r} is not a band name here; the names are {', '.join(names) or '(none)'}",
                    node,
                    names=list(names),
                )
            used.add(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            check(node.left, depth + 1)
            check(node.right, depth + 1)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            check(node.operand, depth + 1)
        elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            check(node.left, depth + 1)
            for comparator in node.comparators:
                check(comparator, depth + 1)
        elif isinstance(node, ast.Call):
            func = node.func
            if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
                label = func.id if isinstance(func, ast.Name) else ast.get_source_segment(source, func)
                raise _expression_error(source, f"function {label!r} is not allowed", func)
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                raise _expression_error(source, f"{func.id}() takes plain positional arguments only", node)
            fewest, most = FUNCTIONS[func.id]
            if len(node.args) < fewest or (most is not None and len(node.args) > most):
                want = f"{fewest}" if fewest == most else f"at least {fewest}"
                raise _expression_error(source, f"{func.id}() takes {want} argument(s), got {len(node.args)}", node)
            for arg in node.args:
                check(arg, depth + 1)
        else:
            what = {
                ast.Attribute: "attribute access",
                ast.Subscript: "subscripting",
                ast.BoolOp: "'and'/'or' (use where(), or multiply comparisons)",
                ast.Lambda: "lambda",
                ast.IfExp: "'x if c else y' (use where(c, x, y))",
            }.get(type(node), type(node).__name__)
            if isinstance(node, ast.BinOp):
                what = f"operator {type(node.op).__name__}"
            elif isinstance(node, ast.UnaryOp):
                what = f"operator {type(node.op).__name__}"
            elif isinstance(node, ast.Compare):
                what = "comparison " + ", ".join(type(op).__name__ for op in node.ops if type(op) not in _COMPARE)
            raise _expression_error(source, f"{what} is not allowed: {ast.get_source_segment(source, node)!r}", node)

    try:
        check(tree.body, 0)
    except RecursionError as exc:
        raise _expression_error(text, "too deeply nested") from exc
    return tree.body, used


def evaluate_expression(node: ast.expr, bands: dict[str, np.ndarray]) -> Any:
    """Evaluate a tree from ``parse_expression`` on float64 arrays. Numbers become float64 first, so
    no power of constants runs as Python integer arithmetic."""
    import numpy as np

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return np.float64(n.value)
        if isinstance(n, ast.Name):
            return bands[n.id]
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            op = type(n.op)
            if op is ast.Add:
                return np.add(a, b)
            if op is ast.Sub:
                return np.subtract(a, b)
            if op is ast.Mult:
                return np.multiply(a, b)
            if op is ast.Div:
                return np.divide(a, b)
            return np.power(a, b)
        if isinstance(n, ast.UnaryOp):
            value = ev(n.operand)
            return np.negative(value) if isinstance(n.op, ast.USub) else value
        if isinstance(n, ast.Compare):
            compare: dict[type, Callable[[Any, Any], Any]] = {
                ast.Lt: np.less,
                ast.LtE: np.less_equal,
                ast.Gt: np.greater,
                ast.GtE: np.greater_equal,
                ast.Eq: np.equal,
                ast.NotEq: np.not_equal,
            }
            left, result = ev(n.left), None
            for op, right_node in zip(n.ops, n.comparators, strict=True):
                right = ev(right_node)
                part = compare[type(op)](left, right)
                result = part if result is None else np.logical_and(result, part)
                left = right
            return np.asarray(result, dtype="float64")
        if isinstance(n, ast.Call):
            name = n.func.id  # type: ignore[attr-defined]
            args = [ev(a) for a in n.args]
            if name == "abs":
                return np.abs(args[0])
            if name == "sqrt":
                return np.sqrt(args[0])
            if name == "log":
                return np.log(args[0])
            if name == "exp":
                return np.exp(args[0])
            if name == "where":
                return np.where(np.not_equal(args[0], 0), args[1], args[2])
            combine = np.minimum if name == "min" else np.maximum
            value = args[0]
            for other in args[1:]:
                value = combine(value, other)
            return value
        raise AssertionError(f"unchecked node {type(n).__name__}")  # parse_expression let it through

    with np.errstate(all="ignore"):
        return ev(node)


_BINDING = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*(?:input_paths\[(\d+)\]|(\d+))\s*:\s*(.+?)\s*$")


def parse_bindings(text: str, n_inputs: int) -> dict[str, tuple[int, str]]:
    """{"nir": (0, "4"), ...} from "nir=0:4, red=input_paths[0]:red"."""
    import keyword

    bindings: dict[str, tuple[int, str]] = {}
    for part in text.split(","):
        m = _BINDING.match(part)
        problem = None
        if not m:
            problem = f"cannot read {part.strip()!r}"
        else:
            name, index = m.group(1), int(m.group(2) or m.group(3))
            if keyword.iskeyword(name) or name in FUNCTIONS:
                problem = f"{name!r} is a reserved word or a function name"
            elif name in bindings:
                problem = f"{name!r} is bound twice"
            elif index >= n_inputs:
                problem = f"{part.strip()!r} refers to input_paths[{index}], but {n_inputs} input(s) were given"
        if problem:
            raise ArgumentError(
                f"bands: {problem}",
                code="BANDS_INVALID",
                evidence={"argument": "bands", "bands": text, "inputs": n_inputs},
                hint="write name=<input index>:<band number or band name>, comma-separated, e.g. "
                "'nir=0:4, red=0:3' (input index counts from 0 in input_paths)",
            )
        assert m is not None
        bindings[m.group(1)] = (int(m.group(2) or m.group(3)), m.group(4))
    return bindings


def validate_band_math(ctx: RunContext) -> None:
    n_inputs = len(ctx.arguments["input_paths"])
    text = ctx.arguments.get("bands")
    if text is None:
        if n_inputs > 1:
            raise ArgumentError(
                f"band_math has {n_inputs} inputs and no bands mapping; b1, b2 ... would not say whose bands",
                code="BANDS_REQUIRED",
                evidence={"inputs": n_inputs},
                hint="name each band used, e.g. bands='a=0:1, b=1:1' (input index:band), then use a and b",
            )
        _, used = parse_expression(ctx.arguments["expression"], None)
        bad = sorted(n for n in used if not re.fullmatch(r"b[1-9][0-9]*", n))
        if bad:
            raise ArgumentError(
                f"expression: {bad[0]!r} is not a band name here; without bands the names are b1, b2 ...",
                code="EXPRESSION_INVALID",
                evidence={"argument": "expression", "token": bad[0]},
                hint="use b1, b2 ... (band numbers of input_paths[0]), or name bands with the bands argument",
            )
        return
    bindings = parse_bindings(text, n_inputs)
    parse_expression(ctx.arguments["expression"], list(bindings))


def _same_grid(a: Grid, b: Grid) -> bool:
    if (a.width, a.height) != (b.width, b.height) or not a.crs.equals(b.crs, ignore_axis_order=True):
        return False
    return all(abs(x - y) <= 1e-9 * max(1.0, abs(y)) for x, y in zip(a.transform, b.transform, strict=True))


def _describe(grid: Grid, given: str) -> dict[str, Any]:
    from mapsmith.crs import crs_label

    return {
        "path": given,
        "crs": crs_label(grid.crs),
        "width": grid.width,
        "height": grid.height,
        "transform": [float(v) for v in grid.transform.to_gdal()],
    }


def band_math(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith.crs import crs_label
    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    n_inputs = len(ctx.arguments["input_paths"])
    grids = [open_grid(ctx, f"input_paths[{i}]") for i in range(n_inputs)]
    first = grids[0]
    for i, other in enumerate(grids[1:], start=1):
        if not _same_grid(first, other):
            a = _describe(first, ctx.given_paths["input_paths[0]"])
            b = _describe(other, ctx.given_paths[f"input_paths[{i}]"])
            raise InputError(
                f"input_paths[0] ({a['path']}: {a['crs']}, {a['width']} x {a['height']}, transform "
                f"{a['transform']}) and input_paths[{i}] ({b['path']}: {b['crs']}, {b['width']} x {b['height']}, "
                f"transform {b['transform']}) are different grids; band_math combines cells by position and "
                "never resamples silently",
                code="GRID_MISMATCH",
                evidence={"input_paths[0]": a, f"input_paths[{i}]": b},
                hint="put the inputs on one grid first: reproject_raster / resample_raster to the same CRS and "
                "cell size, then clip_raster to the same bounds, and pass those",
            )
    text = ctx.arguments.get("bands")
    if text is None:
        bindings = {f"b{k}": (0, str(k)) for k in range(1, first.count + 1)}
    else:
        bindings = parse_bindings(text, n_inputs)
    node, used = parse_expression(ctx.arguments["expression"], list(bindings))
    resolved: dict[str, dict[str, Any]] = {}
    arrays: dict[str, np.ndarray] = {}
    mask = np.zeros((first.height, first.width), dtype=bool)
    for name in sorted(used):
        index, ref = bindings[name]
        grid = grids[index]
        number = _resolve_band(grid, ref, "bands")
        data = grid.read(number)
        mask |= np.ma.getmaskarray(data)
        arrays[name] = np.ma.filled(data.astype("float64"), np.nan)
        resolved[name] = {"input": f"input_paths[{index}]", "band": number, "band_name": grid.band_names[number - 1]}
    unused = [
        f"input_paths[{i}]"
        for i in range(n_inputs)
        if all(r["input"] != f"input_paths[{i}]" for r in resolved.values())
    ]
    with np.errstate(all="ignore"):
        result = np.broadcast_to(evaluate_expression(node, arrays), mask.shape).astype("float32")
    undefined = ~mask & ~np.isfinite(result)
    n_undefined = int(undefined.sum())
    out_mask = mask | undefined
    valid_values = result[~out_mask]
    nodata = BAND_MATH_NODATA
    if bool((valid_values == nodata).any()):
        nodata = float("nan")
        ctx.notes.append(f"the result holds the value {BAND_MATH_NODATA:g} itself, so nodata is NaN in this output")
    ctx.parameters["x-mapsmith:band_bindings"] = resolved
    ctx.parameters["x-mapsmith:cells_undefined"] = n_undefined
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(first.crs))
    ctx.crs_decisions.setdefault("reason", "computed cell by cell on the inputs' one shared grid")
    ctx.notes.append(
        f"{ctx.arguments['expression']!r} evaluated in float64 and written as float32; {int(mask.sum())} cells "
        f"nodata because a band used was nodata there; {n_undefined} cells had no finite value (division by zero, "
        f"log or sqrt out of domain, overflow) and were written as nodata ({nodata})"
    )
    if unused:
        ctx.notes.append(f"{', '.join(unused)} given but not used by the expression")
    if n_undefined:
        ctx.warn(
            "EXPRESSION_UNDEFINED_CELLS",
            f"{n_undefined} cells had no finite result (division by zero, log/sqrt out of domain or overflow) and "
            "were written as nodata",
            "guard the expression with where(), e.g. where(nir + red == 0, 0, (nir - red) / (nir + red)), if a value "
            "is wanted there",
        )
    write_raster(
        ctx,
        np.ma.masked_array(result, mask=out_mask),
        transform=first.transform,
        crs=first.crs,
        nodata=nodata,
        dtype="float32",
        band_names=[ctx.arguments["expression"][:200]],
        value_range=(-FLOAT32_MAX, FLOAT32_MAX),
    )


# -- extract_band ----------------------------------------------------------------------------


def extract_band(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith.crs import crs_label
    from mapsmith_opensource.raster_io import open_grid, write_raster

    _engine(ctx)
    grid = open_grid(ctx)
    number = _resolve_band(grid, ctx.arguments["band"], "band")
    data = grid.read(number)
    dtype = grid.dtypes[number - 1]
    fill = grid.nodata if grid.nodata is not None else (np.nan if np.issubdtype(np.dtype(dtype), np.floating) else 0)
    array = np.ma.filled(data, fill).astype(dtype)
    header = ctx.inputs["input_path"].grid or {}
    scale = (header.get("scales") or [1.0] * grid.count)[number - 1]
    offset = (header.get("offsets") or [0.0] * grid.count)[number - 1]
    name = grid.band_names[number - 1]
    ctx.parameters["band"] = number
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(grid.crs))
    ctx.crs_decisions.setdefault("reason", "a band copied on input_path's own grid")
    ctx.notes.append(
        f"band {number} ({name!r}) of {grid.count} copied unchanged: {dtype}, nodata {grid.nodata}, "
        f"scale {scale:g}, offset {offset:g}"
    )
    write_raster(
        ctx,
        array,
        transform=grid.transform,
        crs=grid.crs,
        nodata=grid.nodata,
        dtype=dtype,
        band_names=[name],
        value_range=_valid_range(data),
        scales=[scale],
        offsets=[offset],
    )


# -- band_statistics -------------------------------------------------------------------------


def parse_percentiles(text: str) -> list[float]:
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            value = float("nan")
        if not 0 <= value <= 100:
            raise ArgumentError(
                f"percentiles: {part.strip()!r} is not a number from 0 to 100",
                code="PERCENTILES_INVALID",
                evidence={"argument": "percentiles", "percentiles": text},
                hint="give comma-separated numbers from 0 to 100, e.g. '5,50,95'",
            )
        values.append(value)
    return values


def validate_band_statistics(ctx: RunContext) -> None:
    if ctx.arguments.get("percentiles") is not None:
        parse_percentiles(ctx.arguments["percentiles"])


def _key(p: float) -> str:
    return f"{p:g}"


def band_statistics(ctx: RunContext) -> None:
    import numpy as np

    from mapsmith_opensource.raster_io import open_grid

    _engine(ctx)
    grid = open_grid(ctx)
    percentiles = parse_percentiles(ctx.arguments["percentiles"]) if ctx.arguments.get("percentiles") else []
    if ctx.arguments.get("band") is not None:
        numbers = [_resolve_band(grid, ctx.arguments["band"], "band")]
    else:
        numbers = list(range(1, grid.count + 1))
    header = ctx.inputs["input_path"].grid or {}
    rows = []
    for number in numbers:
        data = grid.read(number)
        values = np.ma.compressed(data).astype("float64")
        row: dict[str, Any] = {
            "band": number,
            "name": grid.band_names[number - 1],
            "valid_count": int(values.size),
            "nodata_count": int(data.size - values.size),
            "min": float(values.min()) if values.size else None,
            "max": float(values.max()) if values.size else None,
            "mean": float(values.mean()) if values.size else None,
            "stdev": float(values.std()) if values.size else None,
        }
        if percentiles:
            found = np.percentile(values, percentiles) if values.size else [None] * len(percentiles)
            row["percentiles"] = {
                _key(p): (None if v is None else float(v)) for p, v in zip(percentiles, found, strict=True)
            }
        scales, offsets = header.get("scales") or [], header.get("offsets") or []
        if scales and offsets and (scales[number - 1] != 1.0 or offsets[number - 1] != 0.0):
            row["scale"], row["offset"] = scales[number - 1], offsets[number - 1]
        rows.append(row)
    ctx.answer.update(
        {
            "bands": rows,
            "nodata": grid.nodata,
            "cells": grid.width * grid.height,
            "method": "stored values (scale and offset not applied); nodata and NaN cells excluded; stdev is the "
            "population standard deviation; percentiles interpolate linearly between the two nearest ranks",
        }
    )
