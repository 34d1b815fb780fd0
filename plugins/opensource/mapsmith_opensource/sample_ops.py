"""Reading raster values at places: at points, along lines, between two points, and at the extreme cell.

The sampling on a grid itself is in ``grid_sampling``; the profiles along lines (elevation_profile,
registered here) in ``profile_ops``.

Every position is placed on the grid by the geotransform ``raster_io.open_grid`` checked, and
nothing else: a pixel-is-point raster's geotransform already carries GDAL's half-cell move (RFC 33),
so no half cell is added or taken here. Vector inputs in another CRS are moved to the raster's CRS
for sampling only; what is written keeps the caller's coordinates. A place off the grid or on a
nodata cell gets null and is counted, never dropped and never filled with a guess. Distances are
metres: geodesic on the line's own ellipsoid when its CRS is geographic (or distorts lengths),
planar times the CRS unit otherwise. Engines are imported inside functions only.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, linear_unit_metres
from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.common import (
    align_to,
    read_input,
    write_output,
)
from mapsmith_opensource.grid_sampling import (
    INDICES_SHOWN,
    NODATA,
    OUTSIDE,
    _band_choice,
    _given,
    _indices,
    sample_grid,
)
from mapsmith_opensource.profile_ops import elevation_profile as elevation_profile
from mapsmith_opensource.raster_io import BLOCK_ROWS, Grid, open_grid, require_projected, set_raster_engine
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    import numpy as np

    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration(
        "sample_raster_at_points",
        "sample_raster_at_points",
        engine="rasterio",
        requirement="raster",
        validate="validate_sample_raster_at_points",
    ),
    Registration("elevation_profile", "elevation_profile", engine="rasterio", requirement="raster"),  # profile_ops
    Registration("line_of_sight", "line_of_sight", engine="rasterio", requirement="raster"),
    Registration("locate_extreme_cell", "locate_extreme_cell", engine="rasterio", requirement="raster"),
)

MAX_TIES_LISTED = 100
EARTH_RADIUS_METERS = 6_371_000.0  # mean radius; the curvature term uses it
CURVATURE_FORMULA = "drop(d) = d^2 / (2 R) * (1 - k), R = 6,371,000 m, k = refraction_coefficient, d from the observer"


# -- sample_raster_at_points ----------------------------------------------------------------------


def validate_sample_raster_at_points(ctx: RunContext) -> None:
    info = ctx.inputs["raster_path"]
    count = (info.grid or {}).get("count", 1)
    if ctx.arguments.get("field_name") and ctx.arguments.get("band") is None and count > 1:
        raise ArgumentError(
            f"field_name names one field, but raster_path has {count} bands and all of them would be sampled",
            code="FIELD_NAME_NEEDS_ONE_BAND",
            evidence={"field_name": ctx.arguments["field_name"], "band_count": count},
            hint="pass band=<n> to sample one band into field_name, or leave field_name out to get one field per "
            "band, named after the bands",
        )


def _field_names(ctx: RunContext, grid: Grid, bands: list[int]) -> list[str]:
    if len(bands) == 1:
        given = ctx.arguments.get("field_name")
        if given:
            return [given]
        # A described band names its field ("elevation"); an undescribed one gets "value".
        name = grid.band_names[bands[0] - 1]
        return ["value" if name == f"band_{bands[0]}" else name]
    names = [grid.band_names[b - 1] for b in bands]
    if len({n.casefold() for n in names}) < len(names):
        ctx.notes.append(f"raster_path's band descriptions repeat ({names}); fields are named band_<n> instead")
        names = [f"band_{b}" for b in bands]
    return names


def sample_raster_at_points(ctx: RunContext) -> None:
    """One field per band sampled at each point; points off the grid or on nodata get null."""
    import numpy as np
    import pandas as pd
    import shapely

    set_raster_engine(ctx)
    grid = open_grid(ctx, "raster_path")
    gdf = read_input(ctx, "input_path")
    method = ctx.arguments["method"]
    bands = _band_choice(grid, ctx.arguments.get("band"))
    fields = _field_names(ctx, grid, bands)
    taken = {c.casefold(): c for c in gdf.columns if c != gdf.geometry.name}
    for name in fields:
        if name.casefold() in taken:
            raise InputError(
                f"input_path already has a field {taken[name.casefold()]!r}; MapSmith will not overwrite it with "
                f"the sampled values",
                code="FIELD_EXISTS",
                evidence={"field": taken[name.casefold()], "path": _given(ctx, "input_path"), "fields": fields},
                hint="pass field_name=<a new name> (one band), or rename the existing field first",
            )
    geoms = gdf.geometry.values
    multi = _indices(shapely.get_num_geometries(geoms) > 1)
    if multi:
        raise InputError(
            f"{len(multi)} features of input_path are multi-points; one field holds one value per feature, and "
            "which of a multi-point's points to sample is not for MapSmith to guess",
            code="MULTIPOINT_REFUSED",
            evidence={"path": _given(ctx, "input_path"), "count": len(multi), "feature_indices": multi[:INDICES_SHOWN]},
            hint="run explode_layer on input_path first (one point per feature), then sample that",
        )
    placed = align_to(ctx, gdf, grid.crs, "input_path")
    if "input_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {}):
        ctx.crs_decisions["x-mapsmith:alignment"]["input_path"]["reason"] = (
            f"the points were transformed to raster_path's CRS ({crs_label(grid.crs)}) only to find their cells; "
            "the output keeps input_path's own coordinates and CRS"
        )
    absent = shapely.is_missing(placed.geometry.values) | shapely.is_empty(placed.geometry.values)
    xy = np.full((len(gdf), 2), np.nan)
    if (~absent).any():
        xy[~absent] = shapely.get_coordinates(placed.geometry.values[~absent])[:, :2]
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(grid.crs))
    ctx.crs_decisions.setdefault(
        "reason", "values were read on raster_path's own grid, at each point's position in the raster's CRS"
    )
    out = gdf.copy()
    counts: dict[str, dict[str, int]] = {}
    for band, name in zip(bands, fields, strict=True):
        values, reason = sample_grid(grid, band, xy[:, 0], xy[:, 1], method)
        integer = method == "nearest" and np.issubdtype(np.dtype(grid.dtypes[band - 1]), np.integer)
        column = pd.array(np.where(np.isnan(values), None, values).tolist(), dtype="Int64" if integer else "Float64")
        out[name] = column
        counts[name] = {
            "sampled": int((reason == 0).sum()),
            "outside": int(((reason == OUTSIDE) & ~absent).sum()),
            "nodata": int((reason == NODATA).sum()),
            "no_geometry": int(absent.sum()),
        }
    first = counts[fields[0]]
    if first["no_geometry"]:
        ctx.notes.append(
            f"{first['no_geometry']} of {len(gdf)} features have no geometry (null or empty); their sampled fields "
            f"are null (feature indices {_indices(absent)[:INDICES_SHOWN]})"
        )
    for name in fields:
        c = counts[name]
        if c["outside"] or c["nodata"]:
            ctx.notes.append(
                f"{name}: {c['outside']} of {len(gdf)} points fall outside raster_path and {c['nodata']} on nodata "
                f"cells{' (or beside one, for bilinear)' if method == 'bilinear' else ''}; their values are null, "
                "the points are kept"
            )
    if all(counts[name]["sampled"] == 0 for name in fields) and len(gdf):
        ctx.warn(
            "NO_VALUES_SAMPLED",
            f"none of the {len(gdf)} points of input_path has a value in raster_path: all sampled fields are null",
            "check that the points and the raster cover the same place (describe_dataset gives both extents) and "
            "that their CRSs are declared correctly",
        )
    ctx.parameters["x-mapsmith:sampled_fields"] = {name: band for name, band in zip(fields, bands, strict=True)}
    ctx.answer = {"fields": dict(ctx.parameters["x-mapsmith:sampled_fields"]), "method": method, "counts": counts}
    write_output(ctx, out)


# -- line_of_sight --------------------------------------------------------------------------------


def _endpoint_value(grid: Grid, band: int, x: float, y: float, which: str) -> float:
    import numpy as np

    values, reason = sample_grid(grid, band, np.array([x]), np.array([y]), "bilinear")
    if reason[0]:
        why = "outside the raster" if reason[0] == OUTSIDE else "on (or beside) a nodata cell"
        raise InputError(
            f"the {which} ({x:g}, {y:g}) is {why}, so its ground elevation is unknown",
            code="LOS_POINT_NO_ELEVATION",
            evidence={which: [x, y], "raster_bounds": list(grid.bounds), "crs": crs_label(grid.crs)},
            hint=f"give {which}_x/{which}_y inside the DEM's valid cells, in its CRS ({crs_label(grid.crs)})",
        )
    return float(values[0])


def line_of_sight(ctx: RunContext) -> None:
    """Whether the target can be seen from the observer over the DEM, and the first cell in the way."""
    import numpy as np

    set_raster_engine(ctx)
    grid = open_grid(ctx, "input_path")
    require_projected(ctx, grid, "line of sight")
    band = grid.band_index(ctx.arguments["band"])
    a = ctx.arguments
    ox, oy, tx, ty = a["observer_x"], a["observer_y"], a["target_x"], a["target_y"]
    unit = linear_unit_metres(grid.crs)
    length_units = math.hypot(tx - ox, ty - oy)
    if length_units == 0:
        raise ArgumentError(
            "observer and target are the same position",
            code="LOS_SAME_POINT",
            evidence={"observer": [ox, oy], "target": [tx, ty]},
            hint="give a target away from the observer",
        )
    z_observer = _endpoint_value(grid, band, ox, oy, "observer") + a["observer_height_meters"]
    z_target_ground = _endpoint_value(grid, band, tx, ty, "target")
    length = length_units * unit
    k = a["refraction_coefficient"]
    curvature = a["earth_curvature"]

    def drop(d: np.ndarray | float) -> Any:
        return (np.asarray(d) ** 2) / (2 * EARTH_RADIUS_METERS) * (1 - k) if curvature else np.zeros_like(d)

    z_target = z_target_ground + a["target_height_meters"] - float(drop(length))
    step = min(grid.cell_size)
    n = max(int(math.ceil(length_units / step)), 1)
    t = np.arange(1, n) / n  # interior samples; the endpoints are the observer and target themselves
    sx, sy = ox + t * (tx - ox), oy + t * (ty - oy)
    ground, reason = sample_grid(grid, band, sx, sy, "bilinear")
    d = t * length
    effective = ground - drop(d)
    sight = z_observer + (z_target - z_observer) * t
    blocked = np.flatnonzero(~np.isnan(effective) & (effective > sight))
    unknown = np.flatnonzero(reason != 0)
    first_unknown = int(unknown[0]) if unknown.size else None
    obstruction = None
    if blocked.size:
        i = int(blocked[0])
        obstruction = {
            "distance_m": float(d[i]),
            "x": float(sx[i]),
            "y": float(sy[i]),
            "elevation": float(ground[i]),
            "effective_elevation": float(effective[i]),
            "sight_line_elevation": float(sight[i]),
        }
    if obstruction is not None and (first_unknown is None or first_unknown > int(blocked[0])):
        visible: bool | None = False
    elif unknown.size:
        visible = None if obstruction is None else False
        ctx.warn(
            "LOS_PATH_HAS_NODATA",
            f"{unknown.size} of {len(t)} samples between observer and target are nodata (first at "
            f"{float(d[first_unknown]):.1f} m); what stands there is unknown"
            + ("" if obstruction else ", so visibility cannot be decided (visible is null)"),
            "fill the DEM's gaps first, or move the observer or target so the line avoids them",
        )
    else:
        visible = obstruction is None
    ctx.notes.append(
        "DEM values are taken as metres above the same vertical datum as observer_height_meters and "
        "target_height_meters (a GeoTIFF rarely states its vertical units; this is assumed, not checked)"
    )
    if curvature:
        ctx.notes.append(f"earth curvature and refraction lower every point by {CURVATURE_FORMULA}")
    ctx.answer = {
        "visible": visible,
        "obstruction": obstruction,
        "sample_count": len(t),
        "spacing_m": length / n,
        "distance_m": length,
        "observer_elevation": z_observer,
        "target_elevation": z_target_ground + a["target_height_meters"],
        "target_curvature_drop_m": float(drop(length)),
        "curvature_formula": CURVATURE_FORMULA if curvature else None,
        "nodata_samples": int(unknown.size),
        "crs": crs_label(grid.crs),
        "method": "bilinear",
    }


# -- locate_extreme_cell --------------------------------------------------------------------------


def locate_extreme_cell(ctx: RunContext) -> None:
    """The lowest or highest valid cell, where it is, and every cell tying with it (up to 100 listed)."""
    import numpy as np
    from pyproj import Transformer
    from rasterio.windows import Window

    set_raster_engine(ctx)
    grid = open_grid(ctx, "input_path")
    band = grid.band_index(ctx.arguments["band"])
    want_max = ctx.arguments["extreme"] == "max"
    best: float | None = None
    count = 0
    valid = 0
    cells: list[tuple[int, int]] = []
    for row0 in range(0, grid.height, BLOCK_ROWS):
        rows = min(BLOCK_ROWS, grid.height - row0)
        data = grid.read(band, window=Window(0, row0, grid.width, rows))
        if data.count() == 0:
            continue
        valid += int(data.count())
        value = float(data.max() if want_max else data.min())
        if best is None or (value > best if want_max else value < best):
            best, count, cells = value, 0, []
        if value != best:
            continue
        hits = np.argwhere((np.ma.getdata(data) == best) & ~np.ma.getmaskarray(data))  # row-major order
        count += len(hits)
        room = MAX_TIES_LISTED - len(cells)
        cells += [(int(r) + row0, int(c)) for r, c in hits[:room]]
    if best is None:
        raise InputError(
            f"band {band} of input_path ({_given(ctx, 'input_path')}) has no valid cell: every cell is nodata",
            code="RASTER_ALL_NODATA",
            evidence={"argument": "input_path", "band": band, "nodata": grid.nodata},
            hint="check the band and the nodata value (describe_dataset shows both)",
        )
    rows_a, cols_a = np.array([c[0] for c in cells]), np.array([c[1] for c in cells])
    xs, ys = grid.cell_centres(rows_a, cols_a)
    geodetic = grid.crs.geodetic_crs
    lon, lat = Transformer.from_crs(grid.crs, geodetic, always_xy=True).transform(xs, ys)
    listed = [
        {"row": r, "col": c, "x": float(x), "y": float(y), "lon": float(lo), "lat": float(la)}
        for (r, c), x, y, lo, la in zip(cells, xs, ys, np.atleast_1d(lon), np.atleast_1d(lat), strict=True)
    ]
    rule = "the first in row-major order (top row first, then left to right) of the cells sharing the value"
    ctx.parameters["x-mapsmith:tie_rule"] = f"{rule}; {count} cell(s) share it"
    if count > 1:
        ctx.notes.append(f"{count} cells share the {ctx.arguments['extreme']} value {best:g}; the cell given is {rule}")
    ctx.answer = {
        "extreme": ctx.arguments["extreme"],
        "band": band,
        "value": best,
        "cell": listed[0],
        "crs": crs_label(grid.crs),
        "lonlat_crs": crs_label(geodetic),
        "position": "cell centre" if grid.area_or_point.lower() != "point" else "sample position (pixel is point)",
        "tie_count": count,
        "ties": listed,
        "ties_listed": len(listed),
        "tie_rule": rule,
        "valid_cell_count": valid,
    }
