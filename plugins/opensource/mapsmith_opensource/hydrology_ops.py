"""Hydrology operations on Whitebox Workflows: fill_depressions, flow_direction, flow_accumulation,
extract_streams, watershed.

Every DEM goes through ``raster_io.open_grid`` and ``whitebox_engine.read_input`` (the terrain
pattern), and must be in a projected CRS: flow follows the steepest drop per metre, and a degree
of longitude is not a metre. Flow is routed on a depression-filled DEM; what the fill did (its
parameters, how many cells it raised and by how much) is written into every manifest, because a
flow path through a filled pit is the fill's, not the terrain's.

This module never writes a direction raster without its code table in the manifest, never passes
Whitebox an ``out_type`` other than exactly ``cells``/``ca``/``sca`` (any other string silently
means catchment area), and snaps pour points itself, within a circle of the stated radius, because
Whitebox's ``snap_dist`` is the width of a square window.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, GeometryTypeRefused, InputError
from mapsmith_opensource import raster_io
from mapsmith_opensource import whitebox_engine as wb
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid

REGISTRATIONS = (
    Registration(
        "fill_depressions", "fill_depressions", engine="whitebox_workflows", requirement="whitebox", validate="validate"
    ),
    Registration(
        "flow_direction",
        "flow_direction",
        engine="whitebox_workflows",
        requirement="whitebox",
        validate="validate_flow_direction",
    ),
    Registration(
        "flow_accumulation",
        "flow_accumulation",
        engine="whitebox_workflows",
        requirement="whitebox",
        validate="validate",
    ),
    Registration(
        "extract_streams",
        "extract_streams",
        engine="whitebox_workflows",
        requirement="whitebox",
        validate="validate_extract_streams",
    ),
    Registration(
        "watershed", "watershed", engine="whitebox_workflows", requirement="whitebox", validate="validate_watershed"
    ),
)

# Whitebox's D8 codes (verified on a cone): clockwise powers of two from NE; ESRI's start at E.
WHITEBOX_D8 = {"N": 128, "NE": 1, "E": 2, "SE": 4, "S": 8, "SW": 16, "W": 32, "NW": 64}
ESRI_D8 = {"N": 64, "NE": 128, "E": 1, "SE": 2, "S": 4, "SW": 8, "W": 16, "NW": 32}
# Row and column step of each direction (rows grow southwards on a north-up grid).
STEPS = {
    "N": (-1, 0),
    "NE": (-1, 1),
    "E": (0, 1),
    "SE": (1, 1),
    "S": (1, 0),
    "SW": (1, -1),
    "W": (0, -1),
    "NW": (-1, -1),
}
DINF_CODES = (
    "degrees clockwise from north (0 = N, 90 = E, 180 = S, 270 = W) of the steepest downslope facet; -1 = flat or pit"
)
FD8_CODES = "bit-mask: the sum (bitwise OR) of the Whitebox D8 codes of every lower neighbour that receives flow"
NO_FLOW = {"d8": 0, "rho8": 0, "dinf": -1, "fd8": 0}
POINTER_RANGE = {"d8": (0, 128), "rho8": (0, 128), "dinf": (-1, 360), "fd8": (0, 255)}
# The contract's names for accumulation units, and the exact strings Whitebox takes for them.
OUT_TYPES = {"cells": "cells", "area_m2": "ca", "specific_area_m": "sca"}
FLOAT32_EXACT_INTEGERS = 2**24
WATERSHED_NODATA = -32768
INT32 = (-(2**31), 2**31 - 1)


# -- refusals before the engine -----------------------------------------------------------------


def validate(ctx: RunContext) -> None:
    """A DEM in a geographic CRS is refused before Whitebox reads it."""
    info = ctx.inputs.get("input_path")
    if info is not None and info.crs_is_geographic:
        res = list((info.grid or {}).get("res") or [])
        raise InputError(
            f"{ctx.contract.name} routes flow by the drop per metre between cells; input_path is in "
            f"{info.crs_label}, whose cells are degrees, and a degree is not a metre",
            code="RASTER_GEOGRAPHIC_CRS",
            evidence={"argument": "input_path", "crs": info.crs_label, "cell_size": res},
            hint="reproject_raster to a projected CRS first (e.g. the UTM zone of the data, EPSG:326xx), "
            "choosing bilinear resampling for elevation",
        )


def validate_flow_direction(ctx: RunContext) -> None:
    validate(ctx)
    method, table = ctx.arguments["method"], ctx.arguments["code_table"]
    if table == "esri" and method not in ("d8", "rho8"):
        raise ArgumentError(
            f"code_table 'esri' is a D8 encoding; method {method!r} writes "
            + ("azimuths in degrees" if method == "dinf" else "a bit-mask of Whitebox D8 codes"),
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={"method": method, "code_table": table},
            hint="use code_table 'whitebox' (or leave it out) with dinf and fd8, or method d8/rho8 for ESRI codes",
        )


def validate_extract_streams(ctx: RunContext) -> None:
    validate(ctx)
    given = [k for k in ("threshold_cells", "threshold_km2") if ctx.arguments.get(k) is not None]
    if len(given) != 1:
        raise ArgumentError(
            "extract_streams needs exactly one threshold: threshold_cells or threshold_km2"
            + (
                f"; both were given ({ctx.arguments['threshold_cells']} cells, {ctx.arguments['threshold_km2']} km²)"
                if given
                else "; neither was given"
            ),
            code="THRESHOLD_AMBIGUOUS" if given else "THRESHOLD_MISSING",
            evidence={"given": given},
            hint="pass threshold_cells (a count of cells, the cell itself included) or threshold_km2 "
            "(a contributing area, converted with the DEM's cell area), not both",
        )


def validate_watershed(ctx: RunContext) -> None:
    validate(ctx)
    field_name = ctx.arguments.get("label_field")
    info = ctx.inputs.get("pour_points_path")
    if field_name and info is not None and info.fields and field_name not in info.fields:
        raise ArgumentError(
            f"pour_points_path has no field {field_name!r}",
            code="FIELD_NOT_FOUND",
            evidence={"argument": "label_field", "field": field_name, "fields": list(info.fields)},
            hint=f"pass one of {list(info.fields)}, or leave label_field out to label by feature order (1, 2, ...)",
        )


# -- shared steps --------------------------------------------------------------------------------


def _cell_area_m2(grid: Grid) -> float:
    from mapsmith.crs import linear_unit_metres

    unit = linear_unit_metres(grid.crs)
    return grid.cell_size[0] * unit * grid.cell_size[1] * unit


def _fill(
    ctx: RunContext,
    grid: Grid,
    dem: Any,
    original: np.ma.MaskedArray,
    *,
    fix_flats: bool = True,
    flat_increment: float | None = None,
    max_depth: float | None = None,
    purpose: str,
) -> tuple[Any, np.ndarray]:
    """Whitebox's priority-flood fill of ``dem``; what it did is recorded as ``x-mapsmith:depression_fill``.
    Returns the filled raster and its values (float64, NaN where the DEM has no data)."""
    import numpy as np

    kwargs: dict[str, Any] = {"dem": dem, "fix_flats": fix_flats}
    if flat_increment is not None:
        kwargs["flat_increment"] = float(flat_increment)
    if max_depth is not None:
        kwargs["max_depth"] = float(max_depth)
    filled = wb.call(ctx, "hydrology", "fill_depressions", **kwargs)
    values = filled.to_numpy()
    nodata = filled.metadata().nodata
    values = np.where(np.ma.getmaskarray(original) | (values == nodata), np.nan, values)
    before = np.ma.filled(original.astype("float64"), np.nan)
    raise_by = values - before
    raised = np.nan_to_num(raise_by, nan=0.0) > 0
    n_raised = int(raised.sum())
    max_raise = float(np.nanmax(np.where(raised, raise_by, np.nan))) if n_raised else 0.0
    # The smallest rise between two side-by-side raised cells: the flat increment actually applied.
    steps = []
    for a, b, ra, rb in (
        (values[:, 1:], values[:, :-1], raised[:, 1:], raised[:, :-1]),
        (values[1:, :], values[:-1, :], raised[1:, :], raised[:-1, :]),
    ):
        d = np.abs(a - b)[ra & rb]
        d = d[d > 0]
        if d.size:
            steps.append(float(d.min()))
    record = {
        "purpose": purpose,
        "method": "priority-flood fill (Whitebox fill_depressions)",
        "fix_flats": fix_flats,
        "flat_resolution": "garbrecht_martz" if fix_flats else None,
        "flat_increment_requested": flat_increment,
        "flat_increment": (
            flat_increment
            if flat_increment is not None
            else ("Whitebox automatic (steps of about 1.5e-11 elevation units, float64)" if fix_flats else None)
        ),
        "smallest_step_between_raised_cells": min(steps) if steps else None,
        "max_depth": max_depth,
        "cells_raised": n_raised,
        "max_raise": max_raise,
    }
    ctx.parameters["x-mapsmith:depression_fill"] = record
    ctx.notes.append(
        f"depressions filled first ({purpose}): {n_raised} cell(s) raised, at most by {max_raise:.6g} elevation "
        "units" + ("; flats given a tiny gradient so they drain" if fix_flats else "; filled flats left level")
    )
    if max_depth is not None:
        ctx.notes.append(
            f"depressions deeper than {max_depth:g} were left entirely unfilled (not filled to that depth): "
            "their cells are still pits"
        )
    return filled, values


def _pointer_offsets(codes: dict[str, int]) -> dict[int, tuple[int, int]]:
    return {code: STEPS[d] for d, code in codes.items()}


def _no_flow_interior(values: np.ndarray, valid: np.ndarray, no_flow: float) -> int:
    """Interior cells (not on the grid's edge) with no downslope neighbour: pits and flats."""
    inner = (values == no_flow) & valid
    return int(inner[1:-1, 1:-1].sum())


# -- operations ---------------------------------------------------------------------------------


def fill_depressions(ctx: RunContext) -> None:
    grid = wb.open_dem(ctx, "fill_depressions")
    fix_flats = bool(ctx.arguments["fix_flats"])
    increment = ctx.arguments.get("flat_increment")
    max_depth = ctx.arguments.get("max_depth_meters")
    with wb.workdir(ctx) as directory:
        band = grid.band_index(ctx.arguments.get("band", "1"))
        dem = wb.read_input(ctx, grid, directory, band)
        original = grid.read(band)
        filled, _ = _fill(
            ctx,
            grid,
            dem,
            original,
            fix_flats=fix_flats,
            flat_increment=increment,
            max_depth=max_depth,
            purpose="the output",
        )
        ctx.notes.append(
            "the output is float64: Whitebox's automatic flat increments are about 1.5e-11 elevation units and "
            "would vanish in float32, leaving filled flats level again"
        )
        if max_depth is not None:
            ctx.notes.append(
                "max_depth_meters is compared with the DEM's elevation values as they are; they are taken to be metres"
            )
        low = float(original.min()) if original.count() else None
        wb.write_output(ctx, filled, grid, directory, value_range=(low, None))


def flow_direction(ctx: RunContext) -> None:
    import numpy as np

    grid = wb.open_dem(ctx, "flow_direction")
    method, table = ctx.arguments["method"], ctx.arguments["code_table"]
    with wb.workdir(ctx) as directory:
        band = grid.band_index(ctx.arguments.get("band", "1"))
        dem = wb.read_input(ctx, grid, directory, band)
        original = grid.read(band)
        if ctx.arguments["fill_first"]:
            dem, _ = _fill(ctx, grid, dem, original, purpose="flow directions are taken on the filled DEM")
        kwargs: dict[str, Any] = {"dem": dem}
        if method in ("d8", "rho8"):
            kwargs["esri_pntr"] = table == "esri"
        pointer = wb.call(ctx, "hydrology", f"{method}_pointer", **kwargs)
        no_flow = NO_FLOW[method]
        if method in ("d8", "rho8"):
            codes: Any = dict(ESRI_D8 if table == "esri" else WHITEBOX_D8)
            encoding = f"{table} D8 codes: one direction per cell, towards the steepest drop"
        elif method == "dinf":
            codes, encoding = DINF_CODES, "D-infinity azimuth"
        else:
            codes, encoding = dict(WHITEBOX_D8), FD8_CODES
        ctx.parameters["x-mapsmith:direction_codes"] = codes
        ctx.parameters["x-mapsmith:no_flow_value"] = no_flow
        ctx.notes.append(
            f"direction encoding: {encoding}; cells with no lower neighbour (pits, flats, the outlets at the "
            f"grid's edge) are {no_flow}; cells without elevation are nodata"
        )
        if method == "rho8":
            ctx.warn(
                "NON_DETERMINISTIC",
                "rho8 picks among downslope neighbours at random and Whitebox takes no seed: running it again on "
                "the same DEM gives a different raster",
                "use method d8 when the result must be reproducible",
            )
        if not ctx.arguments["fill_first"]:
            values = pointer.to_numpy()
            valid = ~np.ma.getmaskarray(original)
            pits = _no_flow_interior(values, valid, no_flow)
            ctx.notes.append(f"the DEM was not filled first; {pits} interior cell(s) have no downslope neighbour")
            if pits:
                ctx.warn(
                    "UNFILLED_DEM",
                    f"{pits} interior cell(s) are pits or flats with no flow direction ({no_flow}); flow stops there",
                    "run with fill_first true (the default), or fill_depressions first",
                )
        wb.write_output(ctx, pointer, grid, directory, value_range=POINTER_RANGE[method])


def _d8_accumulation(ctx: RunContext, grid: Grid, dem: Any, original: np.ma.MaskedArray, purpose: str) -> tuple:
    """Fill, D8 pointer (Whitebox codes), accumulation in cells: the rasters and their values."""
    import numpy as np

    filled, _ = _fill(ctx, grid, dem, original, purpose=purpose)
    pointer = wb.call(ctx, "hydrology", "d8_pointer", dem=filled, esri_pntr=False)
    accumulation = wb.call(
        ctx, "hydrology", "d8_flow_accum", input=pointer, input_is_pointer=True, out_type=OUT_TYPES["cells"]
    )
    valid = ~np.ma.getmaskarray(original)
    return pointer, accumulation, valid


def flow_accumulation(ctx: RunContext) -> None:
    grid = wb.open_dem(ctx, "flow_accumulation")
    units = ctx.arguments["units"]
    out_type = OUT_TYPES[units]
    n = grid.width * grid.height
    area = _cell_area_m2(grid)
    from mapsmith.crs import linear_unit_metres

    width_m = grid.cell_size[0] * linear_unit_metres(grid.crs)
    with wb.workdir(ctx) as directory:
        band = grid.band_index(ctx.arguments.get("band", "1"))
        dem = wb.read_input(ctx, grid, directory, band)
        original = grid.read(band)
        filled, _ = _fill(ctx, grid, dem, original, purpose="flow is routed on the filled DEM")
        pointer = wb.call(ctx, "hydrology", "d8_pointer", dem=filled, esri_pntr=False)
        accumulation = wb.call(
            ctx, "hydrology", "d8_flow_accum", input=pointer, input_is_pointer=True, out_type=out_type
        )
        meaning = {
            "cells": "the number of cells draining through each cell, the cell itself included (at least 1)",
            "area_m2": f"the catchment area in m²: cells (the cell itself included) x the cell area {area:g} m²",
            "specific_area_m": "the specific contributing area in metres: cells (the cell itself included) x the "
            f"cell width {width_m:g} m",
        }[units]
        ctx.notes.append(f"D8 flow accumulation on the filled DEM; values are {meaning}")
        if grid.cell_size[0] != grid.cell_size[1] and units != "cells":
            ctx.notes.append(
                f"the cells are not square ({grid.cell_size[0]:g} x {grid.cell_size[1]:g}); Whitebox multiplies by "
                "its own cell size"
            )
        if n > FLOAT32_EXACT_INTEGERS:
            ctx.warn(
                "FLOAT32_COUNTS_INEXACT",
                f"the grid has {n} cells; Whitebox writes accumulation as float32, exact only up to "
                f"{FLOAT32_EXACT_INTEGERS} cells",
                "clip the DEM to the catchment of interest if exact counts matter",
            )
        low, high = {"cells": (1.0, n), "area_m2": (area, n * area), "specific_area_m": (width_m, n * width_m)}[units]
        # A hair of tolerance for the float32 products of cell size.
        wb.write_output(ctx, accumulation, grid, directory, value_range=(low * (1 - 1e-6), high * (1 + 1e-6)))


def extract_streams(ctx: RunContext) -> None:

    grid = wb.open_dem(ctx, "extract_streams")
    area = _cell_area_m2(grid)
    cells, km2 = ctx.arguments.get("threshold_cells"), ctx.arguments.get("threshold_km2")
    if km2 is not None:
        # Rounded to 12 significant digits so that float noise (0.0033 km² / 100 m² = 33.000000000000004)
        # does not push an exact cell count just out of reach of ">=".
        threshold = float(f"{float(km2) * 1e6 / area:.12g}")
        conversion = f"{km2:g} km² x 1e6 / {area:g} m² per cell = {threshold:.12g} cells"
    else:
        threshold = float(cells)
        conversion = f"{threshold:g} cells = {threshold * area / 1e6:g} km² at {area:g} m² per cell"
    ctx.parameters["x-mapsmith:stream_threshold"] = {
        "threshold_cells": threshold,
        "threshold_km2": threshold * area / 1e6,
        "cell_area_m2": area,
        "given_as": "threshold_km2" if km2 is not None else "threshold_cells",
        "conversion": conversion,
        "rule": "a cell is a stream when its D8 accumulation in cells (the cell itself included) >= threshold_cells",
    }
    with wb.workdir(ctx) as directory:
        band = grid.band_index(ctx.arguments.get("band", "1"))
        dem = wb.read_input(ctx, grid, directory, band)
        original = grid.read(band)
        _, accumulation, valid = _d8_accumulation(
            ctx, grid, dem, original, "streams are traced on the filled DEM's D8 accumulation"
        )
        streams = wb.call(
            ctx, "streams", "extract_streams", flow_accumulation=accumulation, threshold=threshold, zero_background=True
        )
        n_streams = int(((streams.to_numpy() == 1) & valid).sum())
        ctx.notes.append(
            f"stream cells are 1 where the accumulation is >= {threshold:g} cells ({conversion}); other cells with "
            f"elevation are 0; cells without elevation are nodata. {n_streams} stream cell(s)"
        )
        if n_streams == 0:
            ctx.warn(
                "NO_STREAMS",
                f"no cell reaches {threshold:g} cells of accumulation; the raster is all 0",
                f"lower the threshold (the grid has {int(valid.sum())} cells with elevation)",
            )
        wb.write_output(ctx, streams, grid, directory, value_range=(0, 1))


# -- watershed ----------------------------------------------------------------------------------


def _pour_points(ctx: RunContext, grid: Grid) -> tuple[list[tuple[float, float]], list[Any]]:
    """The pour points in the DEM's CRS (transformed and recorded when needed) and their labels."""
    import shapely

    from mapsmith_opensource import common

    gdf = common.read_input(ctx, "pour_points_path")
    if len(gdf) == 0:
        raise InputError(
            "pour_points_path has no features",
            code="INPUT_EMPTY",
            evidence={"argument": "pour_points_path"},
            hint="pass a layer with at least one pour point",
        )
    gdf = common.align_to(ctx, gdf, grid.crs, "pour_points_path")
    points = []
    for i, geom in enumerate(gdf.geometry.values):
        parts = shapely.get_parts(geom) if geom is not None else []
        if len(parts) != 1 or parts[0].geom_type != "Point":
            raise GeometryTypeRefused(
                f"pour point {i + 1} is {'empty' if geom is None or len(parts) == 0 else geom.geom_type} with "
                f"{len(parts)} part(s); each pour point must be one point",
                code="POUR_POINT_NOT_A_POINT",
                evidence={"argument": "pour_points_path", "feature_index": i, "parts": len(parts)},
                hint="explode multipoints so each outlet is its own feature, and drop empty geometries",
            )
        points.append((float(parts[0].x), float(parts[0].y)))
    field_name = ctx.arguments.get("label_field")
    if not field_name:
        return points, list(range(1, len(points) + 1))
    if field_name not in gdf.columns:
        raise ArgumentError(
            f"pour_points_path has no field {field_name!r}",
            code="FIELD_NOT_FOUND",
            evidence={"argument": "label_field", "field": field_name, "fields": [str(c) for c in gdf.columns]},
            hint="pass an integer field of the pour points, or leave label_field out to label by feature order",
        )
    labels = []
    for i, value in enumerate(gdf[field_name].tolist()):
        ok = value is not None and not (isinstance(value, float) and math.isnan(value))
        ok = ok and float(value) == int(value) and INT32[0] < int(value) <= INT32[1]
        ok = ok and int(value) != WATERSHED_NODATA
        if not ok:
            raise ArgumentError(
                f"pour point {i + 1}: {field_name} = {value!r} cannot label a watershed (labels are 32-bit integers "
                f"other than the nodata value {WATERSHED_NODATA})",
                code="LABEL_NOT_INTEGER",
                evidence={"field": field_name, "feature_index": i, "value": repr(value)},
                hint="choose an integer id field, or leave label_field out to label by feature order",
            )
        labels.append(int(value))
    if len(set(labels)) != len(labels):
        dupes = sorted({v for v in labels if labels.count(v) > 1})
        raise ArgumentError(
            f"{field_name} repeats {dupes}; two watersheds would share a label",
            code="LABEL_NOT_UNIQUE",
            evidence={"field": field_name, "repeated": dupes},
            hint="choose a field whose values are unique, or leave label_field out to label by feature order",
        )
    return points, labels


def _snap(
    grid: Grid, acc: np.ndarray, valid: np.ndarray, x: float, y: float, radius: float, unit: float
) -> tuple[int, int]:
    """The cell, among those whose centres are within ``radius`` metres of (x, y) and the cell holding
    the point, with the highest accumulation; ties go to the centre nearest the point, then the
    northernmost, then the westernmost."""
    import numpy as np

    t = grid.transform
    col0, row0 = int(math.floor((x - t.c) / t.a)), int(math.floor((y - t.f) / t.e))
    reach_c = int(math.ceil(radius / (abs(t.a) * unit))) + 1
    reach_r = int(math.ceil(radius / (abs(t.e) * unit))) + 1
    r_lo, r_hi = max(0, row0 - reach_r), min(grid.height, row0 + reach_r + 1)
    c_lo, c_hi = max(0, col0 - reach_c), min(grid.width, col0 + reach_c + 1)
    rows, cols = np.mgrid[r_lo:r_hi, c_lo:c_hi]
    cx, cy = grid.cell_centres(rows, cols)
    dist = np.hypot(cx - x, cy - y) * unit
    candidate = ((dist <= radius) | ((rows == row0) & (cols == col0))) & valid[r_lo:r_hi, c_lo:c_hi]
    order = np.lexsort((cols[candidate], rows[candidate], dist[candidate], -acc[r_lo:r_hi, c_lo:c_hi][candidate]))
    best = order[0]
    return int(rows[candidate][best]), int(cols[candidate][best])


def _downstream_label(
    pointer: np.ndarray, labels: np.ndarray, start: tuple[int, int], own: int, offsets: dict[int, tuple[int, int]]
) -> int | None:
    """The first other watershed label met following the D8 pointer down from ``start``."""
    h, w = pointer.shape
    r, c = start
    for _ in range(h * w):
        step = offsets.get(int(pointer[r, c]))
        if step is None:
            return None
        r, c = r + step[0], c + step[1]
        if not (0 <= r < h and 0 <= c < w):
            return None
        if labels[r, c] != own and labels[r, c] > 0:
            return int(labels[r, c])
    return None


def watershed(ctx: RunContext) -> None:
    import geopandas as gpd
    import numpy as np
    from shapely.geometry import Point

    from mapsmith.crs import linear_unit_metres

    grid = wb.open_dem(ctx, "watershed")
    unit = linear_unit_metres(grid.crs)
    radius = float(ctx.arguments["snap_distance_meters"])
    points, labels = _pour_points(ctx, grid)
    t = grid.transform
    left, bottom, right, top = grid.bounds
    with wb.workdir(ctx) as directory:
        band = grid.band_index(ctx.arguments.get("band", "1"))
        dem = wb.read_input(ctx, grid, directory, band)
        original = grid.read(band)
        pointer_r, accumulation_r, valid = _d8_accumulation(
            ctx, grid, dem, original, "watersheds are traced on the filled DEM's D8 pointer"
        )
        acc = np.where(valid, accumulation_r.to_numpy(), -1.0)
        outside = [
            {"label": lab, "x": x, "y": y}
            for (x, y), lab in zip(points, labels, strict=True)
            if not (left <= x < right and bottom < y <= top) or not valid[int((y - t.f) // t.e), int((x - t.c) // t.a)]
        ]
        if outside:
            raise InputError(
                f"{len(outside)} pour point(s) lie outside the DEM or on cells without elevation: "
                + ", ".join(f"{o['label']} at ({o['x']:.3f}, {o['y']:.3f})" for o in outside[:5]),
                code="POUR_POINT_OUTSIDE_DEM",
                evidence={"points": outside[:20], "dem_bounds": [left, bottom, right, top]},
                hint="move or drop those points; every pour point must fall on a DEM cell with an elevation",
            )
        records, cells = [], []
        for (x, y), lab in zip(points, labels, strict=True):
            held = (int((y - t.f) // t.e), int((x - t.c) // t.a))
            r, c = _snap(grid, acc, valid, x, y, radius, unit)
            cx, cy = grid.cell_centres(np.array(r), np.array(c))
            records.append(
                {
                    "label": lab,
                    "from": [x, y],
                    "to": [float(cx), float(cy)],
                    "cell": [r, c],
                    "moved": (r, c) != held,
                    "distance_m": float(math.hypot(float(cx) - x, float(cy) - y) * unit),
                    "accumulation_cells": float(acc[r, c]),
                }
            )
            cells.append((r, c))
        shared = {cell for cell in cells if cells.count(cell) > 1}
        if shared:
            clash = [rec["label"] for rec in records if tuple(rec["cell"]) in shared]
            raise InputError(
                f"pour points {clash} land on the same cell after snapping; one watershed would swallow the other",
                code="POUR_POINTS_SHARE_CELL",
                evidence={"labels": clash, "cells": sorted([list(s) for s in shared])},
                hint="drop duplicate outlets or reduce snap_distance_meters",
            )
        ctx.parameters["x-mapsmith:pour_points"] = records
        moved = [rec for rec in records if rec["moved"]]
        ctx.notes.append(
            f"pour points snapped to the highest D8 accumulation among cells whose centres lie within {radius:g} m "
            f"(and the cell holding the point; ties to the nearest): {len(moved)} of {len(records)} moved to another "
            "cell"
            + (
                ", e.g. "
                + "; ".join(
                    f"{m['label']} by {m['distance_m']:.2f} m to {m['accumulation_cells']:g} cells" for m in moved[:5]
                )
                if moved
                else ""
            )
        )
        # Whitebox labels watersheds 1, 2, ... by feature order; the points go in at their cells' centres.
        frame = gpd.GeoDataFrame(
            {"order": list(range(1, len(records) + 1))},
            geometry=[Point(*rec["to"]) for rec in records],
            crs=grid.crs.to_wkt(),
        )
        pp_path = directory / "pour_points.gpkg"
        frame.to_file(pp_path, driver="GPKG")
        result = wb.call(
            ctx, "hydrology", "watershed", d8_pntr=pointer_r, pour_pts=wb.environment().read_vector(str(pp_path))
        )
        order = result.to_numpy()
        if order.shape != (grid.height, grid.width):
            from mapsmith.errors import EngineError

            raise EngineError(
                f"Whitebox returned a {order.shape} watershed grid for a {grid.height} x {grid.width} DEM",
                code="ENGINE_MOVED_GRID",
                hint="this is an engine defect; report it with the input file",
            )
        in_order = np.where((order >= 1) & (order <= len(records)) & valid, order, 0).astype("int64")
        out = np.full(in_order.shape, WATERSHED_NODATA, dtype="int32")
        for k, lab in enumerate(labels, start=1):
            out[in_order == k] = lab
        ctx.parameters["x-mapsmith:watershed_labels"] = {
            str(lab): {"order": k, "label_field": ctx.arguments.get("label_field")}
            for k, lab in enumerate(labels, start=1)
        }
        # Flow conservation: an outlet's accumulation = its own watershed + the watersheds nested upstream.
        counts = {k: int((in_order == k).sum()) for k in range(1, len(records) + 1)}
        pointer = pointer_r.to_numpy()
        offsets = _pointer_offsets(WHITEBOX_D8)
        parent = {k: _downstream_label(pointer, in_order, cells[k - 1], k, offsets) for k in counts}
        total = dict(counts)
        for k in counts:  # add each watershed to every outlet downstream of it
            seen, p = {k}, parent[k]
            while p is not None and p not in seen:
                total[p] += counts[k]
                seen.add(p)
                p = parent[p]
        mismatch = [
            (labels[k - 1], total[k], records[k - 1]["accumulation_cells"])
            for k in counts
            if total[k] != records[k - 1]["accumulation_cells"]
        ]
        for k in counts:
            records[k - 1]["watershed_cells"] = counts[k]
            records[k - 1]["nested_in"] = labels[parent[k] - 1] if parent[k] else None
        ctx.check(
            "x-mapsmith:flow_conserved",
            not mismatch,
            f"{len(counts)} outlet(s): accumulation at each outlet equals the cells of its watershed plus those "
            "nested upstream of it" + (f"; differ: {mismatch[:5]}" if mismatch else ""),
        )
        ctx.notes.append(
            "watershed cells carry their pour point's label ("
            + (f"field {ctx.arguments['label_field']}" if ctx.arguments.get("label_field") else "1-based feature order")
            + f"); cells that drain to no pour point, or have no elevation, are nodata ({WATERSHED_NODATA}); a "
            "pour point upstream of another takes its own watershed out of the downstream one"
        )
        raster_io.write_raster(
            ctx,
            np.ma.masked_equal(out, WATERSHED_NODATA),
            transform=grid.transform,
            crs=grid.crs,
            nodata=WATERSHED_NODATA,
            dtype="int32",
            value_range=(min(labels), max(labels)),
        )
