"""The opensource stack's vector operations: GeoPandas, Shapely, pyproj, pyogrio.

Each function takes a ``RunContext`` whose inputs have already passed the preconditions, computes
with a real engine, writes ``ctx.temp_output`` and records what it decided: the engine and its
version, the parameters it ran with, every CRS decision with its reason and PROJ pipelines. None of
them picks a CRS, a layer or a unit silently, and none writes anywhere but ``ctx.temp_output``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mapsmith.crs import choose_transformer, crs_label, is_equal_area, linear_unit_metres, parse_crs
from mapsmith.errors import CRSError, InputError
from mapsmith.paging import page
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    align_to,
    geodesic_areas,
    read_input,
    set_engine,
    to_metric,
    transform_frame,
    warn_about_transformation,
    write_output,
)
from mapsmith_opensource.field_ops import calculate_field as calculate_field
from mapsmith_opensource.field_ops import rename_fields as rename_fields
from mapsmith_opensource.field_ops import select_fields as select_fields
from mapsmith_opensource.field_profile import SAMPLE_CHARS, SAMPLE_VALUES, field_profiles
from mapsmith_opensource.measures import claim_output_field
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.table_points import table_to_points as table_to_points

if TYPE_CHECKING:
    import geopandas as gpd

    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration("describe_dataset", "describe_dataset"),
    Registration("reproject_layer", "reproject_layer"),
    Registration("buffer_layer", "buffer_layer"),
    Registration("clip_layer", "clip_layer"),
    Registration("measure_area", "measure_area"),
    Registration("convert_format", "convert_format"),
    Registration("extract_layer", "extract_layer"),
    # Implemented in their own modules, registered here so the stack's module list is unchanged.
    Registration("table_to_points", "table_to_points"),
    Registration("calculate_field", "calculate_field"),
    Registration("select_fields", "select_fields"),
    Registration("rename_fields", "rename_fields"),
)


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
    if georef["conflict"]:
        ctx.answer["georeferencing_warning"] = (
            "the file's own tags and a sidecar disagree on where this raster lies (see georeferencing.readings); "
            "operations that compute on it will refuse until one is chosen: remove the sidecar, or run with "
            "GDAL_GEOREF_SOURCES=INTERNAL"
        )
    if info.crs_wkt is None:
        ctx.answer["crs_warning"] = "no CRS declared: operations that compute on this raster will refuse it"
    if grid["rotated"]:
        ctx.answer["grid_warning"] = "rotated geotransform: operations will refuse it until it is resampled north-up"


# -- reproject_layer --------------------------------------------------------------------------


def reproject_layer(ctx: RunContext) -> None:
    set_engine(ctx)
    info = ctx.inputs["input_path"]
    target = parse_crs(ctx.arguments["target_crs"])
    gdf = read_input(ctx)
    source = gdf.crs
    transformer, record = choose_transformer(source, target, info.bounds_lonlat)
    out = transform_frame(gdf, transformer, target)
    ctx.expected_output_crs = target.to_wkt()
    ctx.parameters["target_crs"] = crs_label(target)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(target),
            "reason": f"reprojection requested from {crs_label(source)} to {crs_label(target)}",
            "source_crs": crs_label(source),
            "target_crs": crs_label(target),
            "transformation": record,
        }
    )
    warn_about_transformation(ctx, record, f"{crs_label(source)} to {crs_label(target)}")
    write_output(ctx, out)


# -- buffer_layer -----------------------------------------------------------------------------


def buffer_layer(ctx: RunContext) -> None:
    set_engine(ctx)
    distance = ctx.arguments["distance_meters"]
    segments = ctx.arguments["segments_per_quarter_circle"]
    gdf = read_input(ctx)
    metric = to_metric(ctx, gdf, "buffered")
    units = metric.units(distance)
    work = metric.frame.set_geometry(metric.frame.geometry.buffer(units, quad_segs=segments))
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
    write_output(ctx, metric.back(ctx, work))


# -- clip_layer -------------------------------------------------------------------------------


def clip_layer(ctx: RunContext) -> None:
    import shapely

    set_engine(ctx)
    gdf = read_input(ctx)
    mask = read_input(ctx, "mask_path")
    info = ctx.inputs["input_path"]
    mask = align_to(ctx, mask, gdf.crs, "mask_path")
    aligned = "mask_path" in ctx.crs_decisions.get("x-mapsmith:alignment", {})
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(gdf.crs),
            "reason": "clipped in input_path's CRS, so the input's coordinates are written unchanged"
            + ("; the mask was transformed to it (see x-mapsmith:alignment)" if aligned else ""),
        }
    )
    region = shapely.union_all(mask.geometry.values)
    geoms = gdf.geometry.values
    hits = shapely.intersects(geoms, region)
    clipped = shapely.intersection(geoms[hits], region)
    dims = shapely.get_dimensions(geoms[hits])
    kept_geoms, dropped_parts = [], 0
    for geom, dim in zip(clipped, dims, strict=True):
        parts = shapely.get_parts(geom)
        same = [p for p in parts if shapely.get_dimensions(p) == dim and not p.is_empty]
        dropped_parts += len(parts) - len(same)
        kept_geoms.append(shapely.union_all(same) if same else None)
    out = gdf[hits].copy()
    out = out.set_geometry(kept_geoms, crs=gdf.crs)
    touching_only = out.geometry.isna()
    out = out[~touching_only]
    outside = int((~hits).sum())
    ctx.notes.append(
        f"{info.feature_count} input features: {len(out)} written (clipped to the mask), {outside} lie wholly "
        f"outside the mask, {int(touching_only.sum())} only touch it (their intersection has a lower dimension)"
    )
    if dropped_parts:
        ctx.notes.append(
            f"{dropped_parts} lower-dimension fragments (points or lines on the mask's edge) were not kept"
        )
    ctx.parameters["x-mapsmith:features_outside_mask"] = outside
    ctx.parameters["x-mapsmith:lower_dimension_fragments_dropped"] = dropped_parts
    write_output(ctx, out)


# -- measure_area -----------------------------------------------------------------------------


def _require_true_planar_area(gdf: gpd.GeoDataFrame, unit: float) -> None:
    """Measure, rather than trust the projection's name: a projection that is equal-area only on a
    sphere (PROJ's Mollweide on WGS 84) overstates ellipsoidal areas by about 0.5 %."""
    import geopandas as gpd
    from shapely.geometry import box

    if len(gdf) == 0:
        return
    x0, y0, x1, y1 = gdf.total_bounds
    cx, cy, half = (x0 + x1) / 2, (y0 + y1) / 2, 500.0 / unit
    probe = gpd.GeoDataFrame(geometry=[box(cx - half, cy - half, cx + half, cy + half)], crs=gdf.crs)
    planar = float(probe.geometry.area.iloc[0]) * unit * unit
    geodesic = geodesic_areas(probe)[0]
    if abs(planar / geodesic - 1) > 1e-4:
        raise CRSError(
            f"planar areas in {crs_label(gdf.crs)} are not ground areas here: a 1 km square at the data's "
            f"centre measures {planar:,.1f} m2 planar and {geodesic:,.1f} m2 on the ellipsoid",
            code="CRS_NOT_EQUAL_AREA",
            evidence={"crs": crs_label(gdf.crs), "planar_m2": planar, "geodesic_m2": geodesic},
            hint="use method='geodesic' (the default), or an ellipsoidal equal-area CRS such as EPSG:6933",
        )


def measure_area(ctx: RunContext) -> None:
    set_engine(ctx)
    method = ctx.arguments["method"]
    gdf = read_input(ctx)
    field = ctx.arguments.get("output_field") or "area_m2"
    replaced = claim_output_field(ctx, gdf, field, overwrite=bool(ctx.arguments.get("overwrite_field")))
    crs = gdf.crs
    if method == "geodesic":
        areas = geodesic_areas(gdf)
        ellipsoid = crs.ellipsoid.name if crs.ellipsoid else "unknown"
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
                "reason": f"geodesic area on the {ellipsoid} ellipsoid of the layer's own datum (the default); "
                "no planar projection's distortion enters the number",
                "source_crs": crs_label(crs),
                "target_crs": None,
            }
        )
    else:
        if crs.is_geographic or not is_equal_area(crs):
            raise CRSError(
                f"a planar area in {crs_label(crs)} is not a ground area: "
                + ("it is geographic (degrees)" if crs.is_geographic else "it is not an equal-area projection"),
                code="CRS_NOT_EQUAL_AREA",
                evidence={"crs": crs_label(crs), "method": method},
                hint="use method='geodesic' (the default), or reproject_layer to an equal-area CRS first",
            )
        unit = linear_unit_metres(crs)
        _require_true_planar_area(gdf, unit)
        areas = list(gdf.geometry.area * unit * unit)
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(crs),
                "reason": f"planar area requested; {crs_label(crs)} is an equal-area projection; its unit is "
                f"{unit} m, so areas are multiplied by {unit * unit}",
                "source_crs": crs_label(crs),
                "target_crs": None,
            }
        )
    out = gdf.copy()
    out[field] = areas
    total = float(sum(areas))
    attrs = [c for c in out.columns if c != out.geometry.name]
    chosen, window = page(range(len(out)), ctx.arguments)
    rows = out[attrs].iloc[chosen[0] : chosen[-1] + 1].to_dict(orient="records") if chosen else []
    ctx.answer = {
        "total_area_m2": total,
        "feature_count": len(out),
        "method": method,
        "output_field": field,
        "field_replaced": replaced,
        "rows": rows,
        "page": window,
    }
    ctx.check(
        "x-mapsmith:areas_non_negative",
        all(a >= 0 for a in areas),
        f"{len(areas)} areas, minimum {min(areas) if areas else 0:.3f} m2",
    )
    write_output(ctx, out)


# -- convert_format / extract_layer -----------------------------------------------------------


def _copy(ctx: RunContext) -> None:
    set_engine(ctx)
    gdf = read_input(ctx)
    write_output(ctx, gdf)
    written = io.inspect(ctx.temp_output, None)
    missing = [f for f in ctx.inputs["input_path"].fields if f not in written.fields]
    ctx.check(
        "x-mapsmith:fields_preserved",
        not missing,
        f"{len(ctx.inputs['input_path'].fields)} input fields; missing after the write: {missing or 'none'}",
    )


def convert_format(ctx: RunContext) -> None:
    target = Path(ctx.arguments["output_path"]).suffix.lower()
    ctx.parameters["x-mapsmith:output_format"] = io.WRITE_DRIVERS.get(target, target)
    _copy(ctx)


def extract_layer(ctx: RunContext) -> None:
    ctx.parameters["layer"] = ctx.layers["input_path"]
    _copy(ctx)
