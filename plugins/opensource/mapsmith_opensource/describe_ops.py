"""describe_dataset: what a vector layer or a raster holds, read by GDAL, answered without writing.

Answers fields with types, null counts and samples (paged), every layer of a container, and a raster's
grid, bands and georeferencing readings. It never writes a file and never picks one reading of a
raster's georeferencing when the file's tags and a sidecar disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError
from mapsmith.paging import page
from mapsmith_opensource import io
from mapsmith_opensource.common import set_engine
from mapsmith_opensource.field_profile import SAMPLE_CHARS, SAMPLE_VALUES, field_profiles
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("describe_dataset", "describe_dataset"),)


# -- describe_dataset -------------------------------------------------------------------------


def describe_dataset(ctx: RunContext) -> None:
    path = ctx.paths["input_path"]
    if io.is_raster(path):
        _describe_raster(ctx, path)
        return
    set_engine(ctx)
    layers = io.list_layers(path)
    wanted = [ctx.arguments["layer"]] if ctx.arguments.get("layer") else layers
    described = []
    for name in wanted:
        info = ctx.io.inspect(path, name if not io.is_parquet(path) else None)
        item = info.to_dict()
        item["path"] = ctx.arguments["input_path"]
        item["field_details"], item["field_details_page"] = page(
            field_profiles(path, name if not io.is_parquet(path) else None), ctx.arguments
        )
        if info.crs_wkt is None:
            item["crs_warning"] = "no CRS declared: operations that measure or overlay will refuse this layer"
        described.append(item)
    ctx.answer = {
        "path": ctx.arguments["input_path"],
        "layers": layers,
        "described": described,
        "multi_layer": len(layers) > 1,
    }
    ctx.answer["field_details_read"] = (
        f"each field's type as the engine reads it, its null count over every feature, and up to {SAMPLE_VALUES} "
        f"distinct non-null sample values in file order, text shortened past {SAMPLE_CHARS} characters"
    )
    if len(layers) > 1 and not ctx.arguments.get("layer"):
        ctx.answer["hint"] = "a multi-layer container: name a layer with 'layer', or copy one out with extract_layer"


def _describe_raster(ctx: RunContext, path: Path) -> None:
    from mapsmith_opensource.raster_io import inspect_raster, set_raster_engine

    set_raster_engine(ctx)
    if ctx.arguments.get("layer"):
        raise InputError(
            "a raster has bands, not layers",
            code="LAYER_NOT_APPLICABLE",
            evidence={"path": ctx.arguments["input_path"], "layer": ctx.arguments["layer"]},
            hint="omit 'layer' when describing a raster",
        )
    info = inspect_raster(path, statistics=True)
    grid = dict(info.grid or {})
    georef = grid.pop("georeferencing")
    described = info.to_dict()
    described.pop("grid", None)
    described["path"] = ctx.arguments["input_path"]
    bands = []
    for i, stats in enumerate(grid.pop("statistics")):
        bands.append(
            {
                "band": i + 1,
                "name": grid["band_names"][i],
                "dtype": grid["dtypes"][i],
                "nodata": grid["nodata"],
                "scale": grid["scales"][i],
                "offset": grid["offsets"][i],
                "statistics": {k: v for k, v in stats.items() if k != "band"},
            }
        )
    ctx.answer = {
        "path": ctx.arguments["input_path"],
        "kind": "raster",
        "described": described,
        "grid": {
            k: grid[k]
            for k in (
                "width",
                "height",
                "count",
                "transform",
                "res",
                "north_up",
                "south_up",
                "rotated",
                "area_or_point",
                "compression",
                "predictor",
            )
        },
        "bands": bands,
        "georeferencing": georef,
    }
    if georef["conflict"] and not georef["GDAL_GEOREF_SOURCES"]:
        _withhold_position(ctx.answer, georef)
        ctx.answer["georeferencing_warning"] = (
            "the file's own tags and a sidecar disagree on where this raster lies (see georeferencing.readings); "
            "operations that compute on it will refuse until one is chosen: remove the sidecar, or run with "
            "GDAL_GEOREF_SOURCES=INTERNAL"
        )
    if info.crs_wkt is None:
        ctx.answer["crs_warning"] = "no CRS declared: operations that compute on this raster will refuse it"
    if grid["rotated"] and ctx.answer["grid"]["rotated"] is not None:
        ctx.answer["grid_warning"] = "rotated geotransform: operations will refuse it until it is resampled north-up"


# What a raster's position decides: withheld at the top level when its readings disagree.
POSITION_KEYS = ("transform", "res", "north_up", "south_up", "rotated")
CRS_KEYS = ("crs", "crs_is_geographic")


def _withhold_position(answer: dict[str, Any], georef: dict[str, Any]) -> None:
    """Two georeferencings and no choice made: the top level names neither reading. The grid's position
    (and the CRS, when the readings disagree on it too) is null, pointing at georeferencing.readings,
    where every reading is listed with its source; picking GDAL's own order would be picking one."""
    pointer = "georeferencing.readings (the readings disagree; none is chosen here)"
    for key in POSITION_KEYS:
        answer["grid"][key] = None
    answer["grid"]["position_from"] = pointer
    described = answer["described"]
    described["bounds"] = described["bounds_lonlat"] = None
    crss = {r["crs"] for r in georef["readings"] if r["crs"] is not None}
    if len(crss) > 1:
        for key in CRS_KEYS:
            described[key] = None
    described["position_from"] = pointer
