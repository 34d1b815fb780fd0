"""zonal_statistics: raster cells summarised under polygon zones, by exactextract.

Every cell counts in proportion to the fraction of it a zone covers (exactextract's coverage
fractions), so ``count`` is a sum of fractions, not a number of cell centres. The raster is read
through ``raster_io.open_grid`` (grids that lie are refused there) and never resampled: zones in
another CRS are moved onto the raster's grid for the computation, recorded, and written back with
their own geometry. A weights raster must sit on the value raster's grid exactly; one that does
not is refused, not resampled. Engines are imported inside functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, InputError
from mapsmith.paging import page
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.zonal_engine import GDAL_CACHE_BYTES as GDAL_CACHE_BYTES
from mapsmith_opensource.zonal_engine import HIDDEN_COUNT as HIDDEN_COUNT
from mapsmith_opensource.zonal_engine import ZONE_KEY as ZONE_KEY
from mapsmith_opensource.zonal_engine import _feature_source as _feature_source
from mapsmith_opensource.zonal_engine import _processing_order as _processing_order
from mapsmith_opensource.zonal_engine import _raster_source as _raster_source
from mapsmith_opensource.zonal_engine import _readable_file, _run_engine, _scale_offset

if TYPE_CHECKING:
    from collections.abc import Mapping

    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid

REGISTRATIONS = (
    Registration(
        "zonal_statistics", "zonal_statistics", engine="exactextract", validate="validate_zonal", requirement="raster"
    ),
)

PREFIX = "zonal_"
# Statistic asked for -> exactextract's operation of the same meaning.
UNWEIGHTED = ("mean", "min", "max", "sum", "count", "majority", "minority", "stdev", "variance", "median")
WEIGHTED = ("weighted_mean", "weighted_sum", "weighted_stdev", "weighted_variance")
QUANTILES = "quantiles"
STATISTICS = (*UNWEIGHTED, QUANTILES, *WEIGHTED)
COVERAGE_RULE = (
    "fractional coverage: every cell counts in proportion to the fraction of it inside the zone (exactextract); "
    "count is the sum of those fractions, sum the sum of value x fraction, mean their ratio; nodata and NaN cells "
    "are left out of every statistic"
)
# Coverage fractions summed over a zone, times the cell area, cannot exceed the zone's area; this much
# (relative) is allowed for floating-point rounding in the engine's clipping.
COVERAGE_AREA_TOLERANCE = 1e-6
SNAP_FRACTION_OF_CELL = 1e-6  # the vertex grid for zones recomputed after a coverage breach


@dataclass(frozen=True)
class _Request:
    statistics: list[str]  # normalised, in the order asked, once each
    quantiles: list[float]
    fields: dict[str, str]  # statistic (quantile_<label> for each quantile) -> output field name


# -- arguments ------------------------------------------------------------------------------------


def _quantile_label(q: float) -> str:
    """0.1 -> "10", 0.025 -> "2_5": the percent, as a field-name-safe string."""
    return f"{round(q * 100, 6):g}".replace(".", "_")


def _parse_statistics(text: str) -> list[str]:
    import difflib

    wanted = [s.strip().lower() for s in text.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STATISTICS]
    if unknown or not wanted:
        close = difflib.get_close_matches(unknown[0], STATISTICS, n=1) if unknown else []
        raise ArgumentError(
            f"zonal_statistics: statistics must list some of {', '.join(STATISTICS)}; got {text!r}"
            + (f" ({unknown[0]!r}: did you mean {close[0]!r}?)" if close else ""),
            code="ARGUMENT_NOT_IN_CHOICES",
            evidence={"argument": "statistics", "value": text, "unknown": unknown, "accepted": list(STATISTICS)},
            hint="pass a comma-separated list such as 'mean,min,max,count'",
        )
    return list(dict.fromkeys(wanted))


def _parse_quantiles(text: str) -> list[float]:
    values = []
    for part in (p.strip() for p in text.split(",")):
        try:
            q = float(part)
        except ValueError:
            q = math.nan
        if not 0 <= q <= 1:  # NaN fails too
            raise ArgumentError(
                f"zonal_statistics: quantiles must be numbers from 0 to 1, comma-separated; got {part!r} in {text!r}",
                code="ARGUMENT_OUT_OF_RANGE",
                evidence={"argument": "quantiles", "value": text, "item": part},
                hint="pass fractions, e.g. '0.1,0.5,0.9' for the 10th, 50th and 90th percentiles",
            )
        values.append(q)
    # Two quantiles that would share a field name are one quantile asked twice.
    by_label = {_quantile_label(q): q for q in values}
    return sorted(by_label.values())


def _request(ctx: RunContext) -> _Request:
    args = ctx.arguments
    statistics = _parse_statistics(args["statistics"])
    text = args.get("quantiles")
    if QUANTILES in statistics and text is None:
        raise ArgumentError(
            "zonal_statistics: statistics lists quantiles but no quantiles were given",
            code="MISSING_ARGUMENT",
            evidence={"operation": "zonal_statistics", "argument": "quantiles", "statistics": args["statistics"]},
            hint="add quantiles, e.g. quantiles='0.1,0.9' for the 10th and 90th percentiles",
        )
    if text is not None and QUANTILES not in statistics:
        raise ArgumentError(
            "zonal_statistics: quantiles were given but statistics does not list quantiles, so they would be ignored",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={"operation": "zonal_statistics", "argument": "quantiles", "statistics": args["statistics"]},
            hint="add 'quantiles' to statistics, or drop the quantiles argument",
        )
    weighted = [s for s in statistics if s in WEIGHTED]
    if weighted and args.get("weights_path") is None:
        raise ArgumentError(
            f"zonal_statistics: {', '.join(weighted)} need a weights raster, and weights_path was not given",
            code="MISSING_ARGUMENT",
            evidence={"operation": "zonal_statistics", "argument": "weights_path", "statistics": weighted},
            hint="add weights_path (a raster on raster_path's grid), or ask for the unweighted statistics",
        )
    if args.get("weights_path") is not None and not weighted:
        raise ArgumentError(
            "zonal_statistics: weights_path was given but no weighted statistic was asked for, so it would be ignored",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={"operation": "zonal_statistics", "argument": "weights_path", "statistics": statistics},
            hint=f"add one of {', '.join(WEIGHTED)} to statistics, or drop weights_path",
        )
    quantiles = _parse_quantiles(text) if text is not None else []
    fields: dict[str, str] = {}
    for statistic in statistics:
        if statistic == QUANTILES:
            for q in quantiles:
                fields[f"quantile_{_quantile_label(q)}"] = f"{PREFIX}quantile_{_quantile_label(q)}"
        else:
            fields[statistic] = PREFIX + statistic
    return _Request(statistics, quantiles, fields)


def _band(text: str) -> int | str:
    """A band number ("2") or a band name; digits are always a number."""
    text = text.strip()
    return int(text) if text.isdigit() else text


def validate_zonal(ctx: RunContext) -> None:
    """Refused before the engine (no failure record): statistics, quantiles and weights that cannot work
    together, a band the raster does not have, and a weights raster off the value raster's grid. Only the
    headers the runner read are consulted."""
    _request(ctx)
    raster = ctx.inputs["raster_path"]
    _band_index(ctx, raster.grid or {}, _band(ctx.arguments["band"]))
    if "weights_path" in ctx.inputs:
        _require_same_grid(ctx, raster, ctx.inputs["weights_path"])


def _band_index(ctx: RunContext, grid: dict[str, Any], band: int | str) -> int:
    names, count = list(grid.get("band_names") or []), int(grid.get("count") or 0)
    if isinstance(band, str) and band in names:
        return names.index(band) + 1
    if isinstance(band, int) and 1 <= band <= count:
        return band
    raise InputError(
        f"raster_path ({ctx.given_paths.get('raster_path')}) has no band {band!r}; it has {count} band(s) named "
        f"{names}",
        code="BAND_NOT_FOUND",
        evidence={"argument": "band", "band": band, "bands": names},
        hint=f"pass a band number 1..{count} or one of {names}",
    )


# -- the operation --------------------------------------------------------------------------------


def zonal_statistics(ctx: RunContext) -> None:
    import tempfile
    from importlib import metadata

    import numpy as np
    import shapely

    from mapsmith.crs import crs_label
    from mapsmith_opensource import common
    from mapsmith_opensource.raster_io import open_grid, set_raster_engine

    request = _request(ctx)
    grid = open_grid(ctx, "raster_path")
    band = grid.band_index(_band(ctx.arguments["band"]))
    weights = open_grid(ctx, "weights_path") if ctx.arguments.get("weights_path") is not None else None
    vector = common.engine_versions()
    set_raster_engine(
        ctx,
        "exactextract",
        metadata.version("exactextract"),
        **{k: vector[k] for k in ("geopandas", "shapely", "GEOS", "pyproj", "PROJ")},
    )
    ctx.parameters["statistics"] = ",".join(request.statistics)
    ctx.parameters["x-mapsmith:zonal_fields"] = dict(request.fields)
    ctx.parameters["x-mapsmith:coverage_rule"] = COVERAGE_RULE

    zones = common.read_input(ctx)
    _refuse_existing(ctx, zones, list(request.fields.values()))
    common.require_valid(ctx, zones, "input_path", "the fraction of a cell an invalid polygon covers is undefined")
    on_grid = common.align_to(ctx, zones, grid.crs, "input_path")
    _record_crs(ctx, zones, grid, moved=on_grid is not zones)

    geoms = on_grid.geometry.values
    present = ~(shapely.is_missing(geoms) | shapely.is_empty(geoms))
    bbox = shapely.box(*grid.bounds)
    inside = present & shapely.within(geoms, bbox)
    overlap = np.zeros(len(geoms))
    rest = present & ~inside
    overlap[rest] = shapely.area(shapely.intersection(geoms[rest], bbox))
    outside = present & ~inside & (overlap <= 0)
    partly = rest & (overlap > 0)
    computed = present & ~outside

    scale, offset = _scale_offset(ctx, "raster_path", band)
    with tempfile.TemporaryDirectory(prefix="mapsmith-zonal-") as scratch:
        value_file, file_band = _readable_file(ctx, grid, band, scale, offset, scratch)
        weight_file = (
            _readable_file(ctx, weights, 1, *_scale_offset(ctx, "weights_path", 1), scratch)[0] if weights else None
        )
        results = _run_engine(
            ctx, on_grid[computed], np.flatnonzero(computed), value_file, file_band, weight_file, request
        )
        n = len(zones)
        columns = {field: np.full(n, np.nan) for field in request.fields.values()}
        coverage = np.full(n, np.nan)
        _collect(results, columns, coverage)
        over = _over_covered(geoms, coverage, grid)
        if over.size:
            # exactextract can give a whole cell to a zone whose boundary runs exactly through that
            # cell's corner (polygons traced from the same grid, as raster_to_polygons makes them): a
            # floating-point coincidence. Those zones alone are computed again with their vertices on a
            # grid a millionth of a cell wide, which breaks the coincidence and moves no vertex by more
            # than half of that; the bound below is then checked again on the zones as given.
            size = grid.cell_size[0] * SNAP_FRACTION_OF_CELL
            retry = on_grid.iloc[over].copy()
            retry = retry.set_geometry(shapely.set_precision(retry.geometry.values, size))
            _collect(_run_engine(ctx, retry, over, value_file, file_band, weight_file, request), columns, coverage)
            ctx.parameters["x-mapsmith:zones_recomputed"] = {
                "zones": over.tolist(),
                "vertex_grid": size,
                "reason": "the engine covered more cells than the zone's area allows: its boundary passes "
                "exactly through cell corners",
            }
            ctx.notes.append(
                f"{over.size} zone(s) covered more cells than their area allows (exactextract on a boundary "
                f"running exactly through cell corners); recomputed with vertices rounded to {size:.3g} map "
                "units, then checked again"
            )
    _check_coverage(ctx, geoms, coverage, grid)

    out = zones.copy()
    for field, values in columns.items():
        out[field] = values
    no_valid = computed & (coverage == 0)
    weighted_fields = [request.fields[s] for s in request.statistics if s in WEIGHTED]
    weights_empty = (
        computed & (coverage > 0) & np.isnan(columns[weighted_fields[0]]) if weighted_fields else np.zeros(n, bool)
    )
    counts = {
        "zones": n,
        "zones_computed": int(computed.sum()),
        "zones_outside_raster": int(outside.sum()),
        "zones_partly_outside_raster": int(partly.sum()),
        "zones_without_valid_cells": int(no_valid.sum()),
        "zones_without_geometry": int((~present).sum()),
        "zones_with_empty_weighted_statistics": int(weights_empty.sum()),
    }
    ctx.parameters["x-mapsmith:zonal_counts"] = counts
    _notes(ctx, request, grid, band, scale, offset, counts, weights is not None)
    rows, window = _rows(out, ctx.arguments)
    ctx.answer = {
        **counts,
        "statistics": request.statistics,
        "fields": dict(request.fields),
        "band": band,
        "raster_crs": crs_label(grid.crs),
        "coverage_rule": COVERAGE_RULE,
        "rows": rows,
        "page": window,
    }
    common.write_output(ctx, out)


def _north_up(info: Any) -> tuple[float, float, float, float]:
    """(x origin, cell width, y origin, cell height) of a raster header, read north-up."""
    grid = info.grid or {}
    x0, dx, _, y0, _, dy = (float(v) for v in grid["transform"])
    if dy > 0:  # stored south-up: the same cells, counted from the top
        y0, dy = y0 + dy * int(grid["height"]), -dy
    return x0, dx, y0, dy


def _size(info: Any) -> tuple[int, int]:
    return int(info.grid["width"]), int(info.grid["height"])


def _require_same_grid(ctx: RunContext, raster: Any, weights: Any) -> None:
    """The weights raster must have the value raster's cells exactly: same CRS, size and geotransform."""
    from mapsmith.crs import parse_crs

    a, b = _north_up(raster), _north_up(weights)
    tolerance = 1e-6 * min(abs(a[1]), abs(a[3]))
    same_crs = (
        raster.crs_wkt is not None
        and weights.crs_wkt is not None
        and parse_crs(raster.crs_wkt).equals(parse_crs(weights.crs_wkt), ignore_axis_order=True)
    )
    if same_crs and _size(raster) == _size(weights) and all(abs(x - y) <= tolerance for x, y in zip(a, b, strict=True)):
        return

    def describe(info: Any) -> dict[str, Any]:
        x0, dx, y0, dy = _north_up(info)
        width, height = _size(info)
        return {"crs": info.crs_label, "width": width, "height": height, "origin": [x0, y0], "cell_size": [dx, -dy]}

    raise InputError(
        f"weights_path ({ctx.given_paths.get('weights_path')}) is not on raster_path's grid: {describe(weights)} "
        f"against {describe(raster)}; weighting one grid's cells by another's would need resampling, which "
        "MapSmith does not do silently",
        code="GRID_MISMATCH",
        evidence={"argument": "weights_path", "weights": describe(weights), "raster": describe(raster)},
        hint="resample the weights onto raster_path's grid first (same CRS, origin, cell size and extent: "
        "gdalwarp -t_srs/-tr/-te, choosing 'sum' for counts such as population, 'average' for densities), "
        "then pass that",
    )


def _refuse_existing(ctx: RunContext, frame: Any, names: list[str]) -> None:
    """Refuse to write a field the zones already have (GeoPackage field names ignore case)."""
    taken = {str(c).casefold(): str(c) for c in frame.columns}
    for name in names:
        if name.casefold() in taken:
            raise InputError(
                f"input_path already has a field {taken[name.casefold()]!r}; MapSmith will not overwrite it with "
                f"the statistic {name!r}",
                code="FIELD_EXISTS",
                evidence={"field": taken[name.casefold()], "path": ctx.given_paths.get("input_path")},
                hint=f"rename or drop the existing {taken[name.casefold()]!r} field first, or ask for other statistics",
            )


def _record_crs(ctx: RunContext, zones: gpd.GeoDataFrame, grid: Grid, moved: bool) -> None:
    from mapsmith.crs import crs_label

    raster = crs_label(grid.crs)
    source = crs_label(zones.crs)
    decisions = ctx.crs_decisions
    if not moved:
        decisions.update(
            {
                "analysis_crs": raster,
                "reason": f"coverage computed on raster_path's own grid in its CRS ({raster}), the zones' CRS too; "
                "no cell was resampled and no coordinate transformed",
                "source_crs": source,
                "target_crs": None,
            }
        )
        return
    alignment = decisions["x-mapsmith:alignment"]["input_path"]
    alignment["reason"] = (
        f"the zones were transformed from {source} to raster_path's CRS ({raster}) to compute coverage on the "
        "raster's own grid, so no cell was resampled; the output keeps the zones' original geometry and CRS"
    )
    decisions.update(
        {
            "analysis_crs": raster,
            "reason": alignment["reason"],
            "source_crs": source,
            "target_crs": raster,
            "transformation": alignment["transformation"],
        }
    )


def _collect(results: Any, columns: dict[str, np.ndarray], coverage: np.ndarray) -> None:
    if len(results):
        rows = results[ZONE_KEY].to_numpy()
        for field in columns:
            columns[field][rows] = results[field].to_numpy(dtype=float)
        coverage[rows] = results[HIDDEN_COUNT].to_numpy(dtype=float)


def _excess(geoms: Any, coverage: np.ndarray, grid: Grid) -> np.ndarray:
    """Per zone: covered cells beyond what its area allows, relative to the tolerance (> 0 is a breach)."""
    import numpy as np
    import shapely

    cell_area = grid.cell_size[0] * grid.cell_size[1]
    known = ~np.isnan(coverage)
    limit = np.zeros(len(coverage))
    limit[known] = shapely.area(geoms[known]) / cell_area
    excess = np.where(known, coverage - limit, 0.0)
    return excess - COVERAGE_AREA_TOLERANCE * np.maximum(limit, 1.0)


def _over_covered(geoms: Any, coverage: np.ndarray, grid: Grid) -> np.ndarray:
    import numpy as np

    return np.flatnonzero(_excess(geoms, coverage, grid) > 0)


def _check_coverage(ctx: RunContext, geoms: Any, coverage: np.ndarray, grid: Grid) -> None:
    """Covered fractions times the cell area cannot exceed a zone's area (an independent bound on the engine)."""
    import numpy as np
    import shapely

    cell_area = grid.cell_size[0] * grid.cell_size[1]
    known = ~np.isnan(coverage)
    limit = shapely.area(geoms[known]) / cell_area
    excess = coverage[known] - limit
    worst = float(excess.max()) if excess.size else 0.0
    bad = int((excess > COVERAGE_AREA_TOLERANCE * np.maximum(limit, 1.0)).sum())
    ctx.check(
        "x-mapsmith:coverage_within_zone_area",
        bad == 0,
        f"{int(known.sum())} zones: covered cells x cell area within each zone's area in {bad} exceptions "
        f"(largest excess {max(worst, 0.0):.3g} cells)",
    )


def _notes(
    ctx: RunContext,
    request: _Request,
    grid: Grid,
    band: int,
    scale: float,
    offset: float,
    counts: dict[str, int],
    weighted: bool,
) -> None:
    name = grid.band_names[band - 1]
    ctx.notes.append(
        f"statistics of band {band} ({name!r}) of raster_path by fractional coverage: every cell counts in proportion "
        "to the fraction of it inside the zone, so zonal_count is a sum of fractions (cells a zone only partly "
        "covers count partly), not a number of cells; nodata and NaN cells are left out of every statistic"
    )
    if any(s in request.statistics for s in ("stdev", "variance", "weighted_stdev", "weighted_variance")):
        ctx.notes.append("stdev and variance are population statistics (divided by the covered total, not n - 1)")
    if scale != 1 or offset != 0:
        ctx.notes.append(
            f"band {band} declares scale {scale:g} and offset {offset:g}: statistics are of the scaled "
            "values (stored x scale + offset), as GDAL reads them"
        )
    if counts["zones_outside_raster"] or counts["zones_without_geometry"]:
        ctx.notes.append(
            f"{counts['zones_outside_raster']} zone(s) lie wholly outside the raster and "
            f"{counts['zones_without_geometry']} have no geometry: their statistics are empty (null), not zero"
        )
    if counts["zones_partly_outside_raster"]:
        ctx.notes.append(
            f"{counts['zones_partly_outside_raster']} zone(s) lie partly outside the raster: their statistics describe "
            "the covered part only"
        )
        ctx.warn(
            "ZONES_PARTLY_OUTSIDE_RASTER",
            f"{counts['zones_partly_outside_raster']} zone(s) extend beyond raster_path; statistics cover only the "
            "part over the raster",
            "compare zonal_count with each zone's area in cells, or use a raster that covers every zone",
        )
    if counts["zones_without_valid_cells"]:
        ctx.notes.append(
            f"{counts['zones_without_valid_cells']} zone(s) over the raster cover only nodata cells: their count and "
            "sum are 0 and the other statistics empty"
        )
    if weighted:
        ctx.notes.append(
            "weighted statistics multiply each cell's coverage fraction by its weight from weights_path (band 1, on "
            "the same grid); a covered cell whose weight is nodata makes that zone's weighted statistics empty"
        )
        if counts["zones_with_empty_weighted_statistics"]:
            ctx.warn(
                "WEIGHTS_NODATA",
                f"{counts['zones_with_empty_weighted_statistics']} zone(s) with valid cells have empty weighted "
                "statistics: they cover a cell whose weight is nodata, or their weights sum to 0",
                "fill the weights raster's nodata (with 0 where no weight is meant) and run again",
            )


def _rows(frame: Any, arguments: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page of zone rows the call's offset/limit ask for, and its ``page`` record."""
    import json

    attrs = [c for c in frame.columns if c != getattr(frame, "_geometry_column_name", None)]
    _, window = page(range(len(frame)), arguments)
    start = window["offset"]
    return json.loads(frame[attrs].iloc[start : start + window["returned"]].to_json(orient="records")), window
