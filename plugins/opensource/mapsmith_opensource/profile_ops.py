"""elevation_profile: raster values sampled along lines, at distances measured on the ground.

Split from ``sample_ops`` (which registers it and holds the sampling on a grid it uses). Distances are
metres: geodesic on the line's own ellipsoid when its CRS is geographic (or distorts lengths), planar
times the CRS unit otherwise; a place off the grid or on a nodata cell gets null and is counted. Engines
are imported inside functions only; nothing is written but ``ctx.temp_output``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mapsmith.crs import choose_transformer, crs_label, linear_unit_metres
from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.common import (
    MAX_SCALE_DISTORTION,
    read_input,
    scale_distortion,
    warn_about_transformation,
)
from mapsmith_opensource.grid_sampling import INDICES_SHOWN, MAX_PROFILE_SAMPLES, _given, _indices, sample_grid
from mapsmith_opensource.measure_lengths import warn_measured_in_2d
from mapsmith_opensource.raster_io import Grid, open_grid, set_raster_engine

if TYPE_CHECKING:
    import numpy as np
    from pyproj import CRS

    from mapsmith.runner import RunContext


# -- distances along lines ------------------------------------------------------------------------


def _distances_along(cumulative: np.ndarray, spacing: float) -> np.ndarray:
    """0, spacing, 2 spacing ... and the line's end."""
    import numpy as np

    length = float(cumulative[-1])
    steps = np.arange(0, int(math.floor(length / spacing)) + 1) * spacing
    if length - steps[-1] > 1e-9 * max(length, 1.0):
        steps = np.append(steps, length)
    return steps


def _geodesic_samples(geod: Any, lon: np.ndarray, lat: np.ndarray, spacing_m: float) -> tuple[np.ndarray, ...]:
    """Positions every ``spacing_m`` metres along the geodesics between successive vertices."""
    import numpy as np

    az, _, seg = geod.inv(lon[:-1], lat[:-1], lon[1:], lat[1:])
    seg, az = np.atleast_1d(seg), np.atleast_1d(az)
    cumulative = np.concatenate([[0.0], np.cumsum(seg)])
    d = _distances_along(cumulative, spacing_m)
    i = np.clip(np.searchsorted(cumulative, d, side="right") - 1, 0, len(seg) - 1)
    x, y, _ = geod.fwd(lon[i], lat[i], az[i], d - cumulative[i])
    return d, np.atleast_1d(x), np.atleast_1d(y)


def _planar_samples(x: np.ndarray, y: np.ndarray, spacing_units: float) -> tuple[np.ndarray, ...]:
    import numpy as np

    seg = np.hypot(np.diff(x), np.diff(y))
    cumulative = np.concatenate([[0.0], np.cumsum(seg)])
    d = _distances_along(cumulative, spacing_units)
    i = np.clip(np.searchsorted(cumulative, d, side="right") - 1, 0, len(seg) - 1)
    f = np.where(seg[i] > 0, (d - cumulative[i]) / np.where(seg[i] > 0, seg[i], 1.0), 0.0)
    return d, x[i] + f * (x[i + 1] - x[i]), y[i] + f * (y[i + 1] - y[i])


def _grid_spacing_metres(grid: Grid) -> float:
    """The ground size of one cell (the smaller side), in metres."""
    if not grid.crs.is_geographic:
        return min(grid.cell_size) * linear_unit_metres(grid.crs)
    west, south, east, north = grid.bounds
    lon, lat = (west + east) / 2, (south + north) / 2
    geod = grid.crs.get_geod()
    dx, dy = grid.cell_size
    return min(geod.inv(lon, lat, lon + dx, lat)[2], geod.inv(lon, lat, lon, lat + dy)[2])


def _to_raster(ctx: RunContext, source: CRS, grid: Grid, aoi: Any) -> Any:
    """A function moving (x, y) arrays from ``source`` to the raster's CRS, the move recorded."""
    if source.equals(grid.crs, ignore_axis_order=True):
        return lambda x, y: (x, y)
    transformer, record = choose_transformer(source, grid.crs, aoi)
    ctx.crs_decisions.setdefault("x-mapsmith:alignment", {})["input_path"] = {
        "source_crs": crs_label(source),
        "target_crs": crs_label(grid.crs),
        "reason": f"the profile's sample positions were transformed to raster_path's CRS ({crs_label(grid.crs)}) "
        "only to read the raster; distances and the reported x, y are input_path's",
        "transformation": record,
    }
    warn_about_transformation(ctx, record, f"input_path samples: {crs_label(source)} to {crs_label(grid.crs)}")
    return transformer.transform


def elevation_profile(ctx: RunContext) -> None:
    """One profile per line feature: samples every spacing_meters with distance, position and value."""
    import numpy as np
    import shapely
    from pyproj import Transformer

    set_raster_engine(ctx)
    grid = open_grid(ctx, "raster_path")
    band = grid.band_index(ctx.arguments["band"])
    gdf = read_input(ctx, "input_path")
    warn_measured_in_2d(
        ctx, gdf, "profile distances", "distances along the profile are horizontal; heights come from the DEM"
    )
    method = ctx.arguments["method"]
    line_crs = gdf.crs
    label = crs_label(line_crs)
    geoms = gdf.geometry.values
    multi = _indices(shapely.get_num_geometries(geoms) > 1)
    if multi:
        raise InputError(
            f"{len(multi)} features of input_path are multi-part lines; the distance along a profile has no meaning "
            "across the gap between parts",
            code="MULTILINE_REFUSED",
            evidence={"path": _given(ctx, "input_path"), "count": len(multi), "feature_indices": multi[:INDICES_SHOWN]},
            hint="run explode_layer on input_path first (one line per feature), then profile that",
        )
    spacing_m = ctx.arguments.get("spacing_meters")
    if spacing_m is None:
        spacing_m = _grid_spacing_metres(grid)
        ctx.parameters["spacing_meters"] = spacing_m
        ctx.notes.append(f"spacing_meters was not given: samples are {spacing_m:g} m apart, raster_path's cell size")
    aoi = ctx.inputs["input_path"].bounds_lonlat
    geodesic = line_crs.is_geographic
    distortion = None if geodesic else scale_distortion(line_crs, aoi)
    if distortion is not None and distortion > MAX_SCALE_DISTORTION:
        geodesic = True
    if geodesic:
        geodetic = line_crs.geodetic_crs
        geod = line_crs.get_geod()
        ellipsoid = line_crs.ellipsoid.name if line_crs.ellipsoid else "the CRS's ellipsoid"
        why = (
            f"{label} is geographic"
            if line_crs.is_geographic
            else f"{label} distorts lengths by {distortion:.1%} at the data"
        )
        method_text = f"geodesic on the {ellipsoid} ellipsoid ({why})"
        to_lonlat = Transformer.from_crs(line_crs, geodetic, always_xy=True)
        from_lonlat = Transformer.from_crs(geodetic, line_crs, always_xy=True)
        sample_crs = geodetic
    else:
        unit = linear_unit_metres(line_crs)
        method_text = f"planar in {label} ({unit:g} m per unit; its scale is within {MAX_SCALE_DISTORTION:.0%} of true)"
        sample_crs = line_crs
    ctx.parameters["x-mapsmith:distance_method"] = method_text
    ctx.crs_decisions.update(
        {
            "analysis_crs": label,
            "reason": f"distances along each line were measured {method_text}; values were read on raster_path's "
            f"grid ({crs_label(grid.crs)}) at the sample positions",
        }
    )
    lines: list[tuple[int, Any]] = []
    empty: list[int] = []
    for index, geom in enumerate(geoms):
        if geom is None or geom.is_empty:
            empty.append(index)
            continue
        line = shapely.get_geometry(geom, 0) if geom.geom_type.startswith("Multi") else geom
        coords = shapely.get_coordinates(line)
        if geodesic:
            lon, lat = to_lonlat.transform(coords[:, 0], coords[:, 1])
            d, sx, sy = _geodesic_samples(geod, np.asarray(lon), np.asarray(lat), spacing_m)
        else:
            d, sx, sy = _planar_samples(coords[:, 0], coords[:, 1], spacing_m / unit)
            d = d * unit
        lines.append((index, (d, sx, sy)))
    total = sum(len(s[0]) for _, s in lines)
    if total > MAX_PROFILE_SAMPLES:
        longest = max(float(s[0][-1]) for _, s in lines)
        total_length = sum(float(s[0][-1]) for _, s in lines)
        needed = total_length / max(MAX_PROFILE_SAMPLES - 2 * len(lines), 1)
        raise ArgumentError(
            f"the profiles would hold {total} samples at {spacing_m:g} m spacing; an answer holds at most "
            f"{MAX_PROFILE_SAMPLES}",
            code="PROFILE_TOO_MANY_SAMPLES",
            evidence={
                "samples": total,
                "spacing_meters": spacing_m,
                "lines": len(lines),
                "total_length_m": total_length,
                "longest_m": longest,
            },
            hint=f"pass spacing_meters={math.ceil(needed):d} or more, or profile fewer lines (select_features)",
        )
    to_raster = _to_raster(ctx, sample_crs, grid, aoi)
    profiles = []
    nulls = 0
    for index, (d, sx, sy) in lines:
        rx, ry = to_raster(sx, sy)
        values, reason = sample_grid(grid, band, np.asarray(rx), np.asarray(ry), method)
        ox, oy = from_lonlat.transform(sx, sy) if geodesic else (sx, sy)
        profile = _profile_summary(index, d, values)
        profile["samples"] = [
            {"distance_m": float(di), "x": float(xi), "y": float(yi), "value": None if math.isnan(v) else float(v)}
            for di, xi, yi, v in zip(d, np.atleast_1d(ox), np.atleast_1d(oy), values, strict=True)
        ]
        nulls += int((reason != 0).sum())
        profiles.append(profile)
    for index in empty:
        profiles.append({"feature_index": index, "length_m": None, "sample_count": 0, "samples": []})
    profiles.sort(key=lambda p: p["feature_index"])
    if empty:
        ctx.notes.append(f"{len(empty)} features have no geometry; their profiles are empty (indices {empty[:20]})")
    if nulls:
        ctx.notes.append(
            f"{nulls} samples fall outside raster_path or on nodata; their values are null and ascent/descent skip them"
        )
    ctx.answer = {
        "profiles": profiles,
        "crs": label,
        "spacing_meters": spacing_m,
        "method": method,
        "distance_method": method_text,
        "value_units": "raster_path's values (ascent and descent are in the same units)",
    }


def _profile_summary(index: int, d: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    import numpy as np

    valid = values[~np.isnan(values)]
    steps = np.diff(valid)
    return {
        "feature_index": index,
        "length_m": float(d[-1]),
        "sample_count": len(d),
        "null_count": int(np.isnan(values).sum()),
        "min": float(valid.min()) if valid.size else None,
        "max": float(valid.max()) if valid.size else None,
        "total_ascent": float(steps[steps > 0].sum()) if valid.size else None,
        "total_descent": float(-steps[steps < 0].sum()) if valid.size else None,
    }
