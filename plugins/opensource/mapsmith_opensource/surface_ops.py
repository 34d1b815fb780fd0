"""Surfaces: euclidean_distance and idw_interpolation onto a grid the caller named (shapely, numpy).

Split from ``convert_ops`` along its seams. Distances are metres on a projected grid; a grid in
degrees is refused, never read as metres. Engines are imported inside the functions. This module
must never interpolate or measure on a grid other than the one the caller named.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.errors import EngineError, InputError

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext

from mapsmith_opensource.grid_common import (
    CELLS_PER_CHUNK,
    COINCIDENT_FRACTION,
    FLOAT_NODATA,
    IDW_PAIRS_PER_BLOCK,
    IDW_TILE,
    MAX_DISTANCE_CELLS,
    MAX_IDW_CELLS,
    SEGMENT_CELLS,
    TargetGrid,
    _given,
    _numeric_values,
    _present,
    _progress,
    _target_grid,
    _vector_components,
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
