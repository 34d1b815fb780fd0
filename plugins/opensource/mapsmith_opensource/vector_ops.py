"""The opensource stack's vector operations: GeoPandas, Shapely, pyproj, pyogrio.

Each function takes a ``RunContext`` whose inputs have already passed the preconditions, computes
with a real engine, writes ``ctx.temp_output`` and records what it decided: the engine and its
version, the parameters it ran with, every CRS decision with its reason and PROJ pipelines. None of
them picks a CRS, a layer or a unit silently, and none writes anywhere but ``ctx.temp_output``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.crs import choose_transformer, crs_label, estimate_utm_crs, is_equal_area, linear_unit_metres, parse_crs
from mapsmith.errors import CRSError, InputError, OutputError
from mapsmith_opensource import io

if TYPE_CHECKING:
    import geopandas as gpd
    from pyproj import CRS, Transformer

    from mapsmith.runner import RunContext

MAX_ANSWER_ROWS = 200
# A projected CRS whose scale at the data differs from 1 by more than this is not used for
# distances (Web Mercator at 46 N stretches by 1.44): MapSmith computes in a UTM zone instead.
MAX_SCALE_DISTORTION = 0.01
WGS84_LABELS = {"EPSG:4326", "OGC:CRS84"}


@cache
def engine_versions() -> dict[str, str]:
    import geopandas
    import pyogrio
    import pyproj
    import shapely

    return {
        "geopandas": geopandas.__version__,
        "shapely": shapely.__version__,
        "GEOS": shapely.geos_version_string,
        "pyproj": pyproj.__version__,
        "PROJ": pyproj.proj_version_str,
        "pyogrio": pyogrio.__version__,
        "GDAL": pyogrio.__gdal_version_string__,
    }


def _set_engine(ctx: RunContext) -> None:
    versions = engine_versions()
    ctx.set_engine("geopandas", versions["geopandas"], **{k: v for k, v in versions.items() if k != "geopandas"})


def _read(ctx: RunContext, argument: str = "input_path") -> gpd.GeoDataFrame:
    return io.read_layer(ctx.paths[argument], ctx.layers.get(argument))


def _write(ctx: RunContext, gdf: gpd.GeoDataFrame) -> None:
    assert ctx.temp_output is not None
    if ctx.temp_output.suffix.lower() in (".geojson", ".json"):
        label = crs_label(gdf.crs) if gdf.crs is not None else None
        if label not in WGS84_LABELS:
            raise OutputError(
                f"GeoJSON output must be in WGS 84 (RFC 7946); this result is in {label}",
                code="GEOJSON_REQUIRES_WGS84",
                evidence={"crs": label, "path": ctx.arguments.get("output_path")},
                hint="reproject_layer to EPSG:4326 first, or write .gpkg / .parquet / .fgb, which keep any CRS",
            )
    if ctx.temp_output.suffix.lower() == ".fgb" and len(gdf) > 1:
        ctx.notes.append(
            "FlatGeobuf's spatial index stores features in packed Hilbert R-tree order: the feature order "
            "of the output differs from the input's (the features and their attributes do not)"
        )
    io.write_layer(gdf, ctx.temp_output, layer=ctx.output_path.stem if ctx.output_path else None)


def _transform(gdf: gpd.GeoDataFrame, transformer: Transformer, target: CRS) -> gpd.GeoDataFrame:
    import shapely

    def fn(coords: Any) -> Any:
        import numpy as np

        x, y = transformer.transform(coords[:, 0], coords[:, 1])
        return np.column_stack([x, y])

    geoms = shapely.transform(gdf.geometry.values, fn)
    out = gdf.copy()
    out = out.set_geometry(geoms, crs=target)
    return out


def _scale_distortion(crs: CRS, lonlat: tuple[float, ...] | None) -> float | None:
    """How far the projection's scale at the data's centre is from 1 (0.0 = true distances)."""
    if lonlat is None:
        return None
    from pyproj import Proj

    lon, lat = (lonlat[0] + lonlat[2]) / 2, (lonlat[1] + lonlat[3]) / 2
    factors = Proj(crs).get_factors(lon, lat)
    return max(abs(factors.meridional_scale - 1), abs(factors.parallel_scale - 1))


# -- describe_dataset -------------------------------------------------------------------------


def describe_dataset(ctx: RunContext) -> None:
    _set_engine(ctx)
    path = ctx.paths["input_path"]
    layers = io.list_layers(path)
    wanted = [ctx.arguments["layer"]] if ctx.arguments.get("layer") else layers
    described = []
    for name in wanted:
        info = ctx.io.inspect(path, name if not io.is_parquet(path) else None)
        item = info.to_dict()
        item["path"] = ctx.arguments["input_path"]
        if info.crs_wkt is None:
            item["crs_warning"] = "no CRS declared: operations that measure or overlay will refuse this layer"
        described.append(item)
    ctx.answer = {
        "path": ctx.arguments["input_path"],
        "layers": layers,
        "described": described,
        "multi_layer": len(layers) > 1,
    }
    if len(layers) > 1 and not ctx.arguments.get("layer"):
        ctx.answer["hint"] = "a multi-layer container: name a layer with 'layer', or copy one out with extract_layer"


# -- reproject_layer --------------------------------------------------------------------------


def reproject_layer(ctx: RunContext) -> None:
    _set_engine(ctx)
    info = ctx.inputs["input_path"]
    target = parse_crs(ctx.arguments["target_crs"])
    gdf = _read(ctx)
    source = gdf.crs
    transformer, record = choose_transformer(source, target, info.bounds_lonlat)
    out = _transform(gdf, transformer, target)
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
    missing = record.get("x-mapsmith:better_unavailable")
    if missing and not record.get("is_ballpark"):
        ctx.warn(
            "BETTER_TRANSFORMATION_MISSING",
            f"a more accurate transformation ({missing.get('operation')}, {missing.get('accuracy_m')} m) exists "
            f"but needs grids not installed here: {', '.join(missing.get('missing_grids') or [])}; "
            f"used one accurate to {record.get('accuracy_m')} m",
            "install the named PROJ grid files (projsync or the proj-data package) and run again",
        )
    if record.get("is_ballpark"):
        ctx.warn(
            "BALLPARK_TRANSFORMATION",
            f"no datum transformation was available from {crs_label(source)} to {crs_label(target)}; "
            "PROJ treated the datums as equivalent (errors can reach 100 m or more)",
            "install the PROJ grid named in the manifest's crs_decisions, or accept the ballpark result knowingly",
        )
    _write(ctx, out)


# -- buffer_layer -----------------------------------------------------------------------------


def buffer_layer(ctx: RunContext) -> None:
    _set_engine(ctx)
    info = ctx.inputs["input_path"]
    distance = ctx.arguments["distance_meters"]
    segments = ctx.arguments["segments_per_quarter_circle"]
    gdf = _read(ctx)
    source = gdf.crs
    distortion = None if source.is_geographic else _scale_distortion(source, info.bounds_lonlat)
    if len(gdf) == 0:
        # Nothing to buffer: an empty result, with the INPUT_EMPTY warning the preconditions gave.
        ctx.crs_decisions.update({"analysis_crs": crs_label(source), "reason": "empty input: nothing was buffered"})
        _write(ctx, gdf)
        return
    if source.is_geographic or (distortion is not None and distortion > MAX_SCALE_DISTORTION):
        assert info.bounds_lonlat is not None
        analysis = estimate_utm_crs(info.bounds_lonlat)
        t_out, leg_out = choose_transformer(source, analysis, info.bounds_lonlat)
        work = _transform(gdf, t_out, analysis)
        work = work.set_geometry(work.geometry.buffer(distance, quad_segs=segments))
        t_back, leg_back = choose_transformer(analysis, source, info.bounds_lonlat)
        out = _transform(work, t_back, source)
        why = (
            f"{crs_label(source)} is geographic (degrees), so {distance} m cannot be applied in it"
            if source.is_geographic
            else f"{crs_label(source)} distorts distances by {distortion:.1%} at the data's centre"
        )
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(analysis),
                "reason": f"{why}; buffered in the UTM zone estimated from the layer's extent "
                f"({crs_label(analysis)}) and transformed back, rather than buffering in "
                f"{crs_label(source)} units",
                "source_crs": crs_label(source),
                "target_crs": crs_label(source),
                "transformation": leg_out,
                # Added only now that the output is back in the caller's CRS (spec §3.7).
                "round_trip": {"transformation": leg_out, "return_transformation": leg_back},
            }
        )
        span = info.bounds_lonlat[2] - info.bounds_lonlat[0]
        if span > 6:
            ctx.warn(
                "WIDE_LAYER_FOR_UTM",
                f"the layer spans {span:.1f} degrees of longitude, wider than one UTM zone; distances far "
                "from the zone's centre are distorted",
                "reproject to a projected CRS suited to the whole area (e.g. an equidistant one) and buffer that",
            )
        ctx.parameters["x-mapsmith:distance_in_analysis_units"] = distance
    else:
        unit = linear_unit_metres(source)
        units = distance / unit
        out = gdf.copy()
        out = out.set_geometry(gdf.geometry.buffer(units, quad_segs=segments))
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(source),
                "reason": f"{crs_label(source)} is projected with a scale within {MAX_SCALE_DISTORTION:.0%} of "
                f"true at the data; {distance} m = {units:.6f} of its units ({unit} m each)",
                "source_crs": crs_label(source),
                "target_crs": None,
            }
        )
        ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
    _write(ctx, out)


# -- clip_layer -------------------------------------------------------------------------------


def clip_layer(ctx: RunContext) -> None:
    import shapely

    _set_engine(ctx)
    gdf = _read(ctx)
    mask = _read(ctx, "mask_path")
    info, mask_info = ctx.inputs["input_path"], ctx.inputs["mask_path"]
    if not mask.crs.equals(gdf.crs, ignore_axis_order=True):
        transformer, record = choose_transformer(mask.crs, gdf.crs, mask_info.bounds_lonlat)
        mask = _transform(mask, transformer, gdf.crs)
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(gdf.crs),
                "reason": f"the mask ({mask_info.crs_label}) was transformed to the input's CRS so "
                "the input's coordinates are written unchanged",
                "source_crs": mask_info.crs_label,
                "target_crs": crs_label(gdf.crs),
                "transformation": record,
            }
        )
    else:
        ctx.crs_decisions.update(
            {"analysis_crs": crs_label(gdf.crs), "reason": "input and mask share this CRS; nothing transformed"}
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
    _write(ctx, out)


# -- measure_area -----------------------------------------------------------------------------


def _geodesic_areas(gdf: gpd.GeoDataFrame) -> list[float]:
    """Ellipsoidal area of each polygon, on the ellipsoid of the layer's own datum."""
    import shapely

    crs = gdf.crs
    geod = crs.get_geod()
    lonlat = gdf
    if not crs.is_geographic:
        from pyproj import Transformer

        geographic = crs.geodetic_crs  # same datum: no datum shift enters the measurement
        lonlat = _transform(gdf, Transformer.from_crs(crs, geographic, always_xy=True), geographic)
    areas = []
    for geom in lonlat.geometry.values:
        total = 0.0
        for poly in shapely.get_parts(geom):
            ext = poly.exterior.coords
            total += abs(geod.polygon_area_perimeter([c[0] for c in ext], [c[1] for c in ext])[0])
            for ring in poly.interiors:
                total -= abs(geod.polygon_area_perimeter([c[0] for c in ring.coords], [c[1] for c in ring.coords])[0])
        areas.append(total)
    return areas


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
    geodesic = _geodesic_areas(probe)[0]
    if abs(planar / geodesic - 1) > 1e-4:
        raise CRSError(
            f"planar areas in {crs_label(gdf.crs)} are not ground areas here: a 1 km square at the data's "
            f"centre measures {planar:,.1f} m2 planar and {geodesic:,.1f} m2 on the ellipsoid",
            code="CRS_NOT_EQUAL_AREA",
            evidence={"crs": crs_label(gdf.crs), "planar_m2": planar, "geodesic_m2": geodesic},
            hint="use method='geodesic' (the default), or an ellipsoidal equal-area CRS such as EPSG:6933",
        )


def measure_area(ctx: RunContext) -> None:
    _set_engine(ctx)
    method = ctx.arguments["method"]
    gdf = _read(ctx)
    if "area_m2" in gdf.columns:
        raise InputError(
            "the input already has a field 'area_m2'; MapSmith will not overwrite it",
            code="FIELD_EXISTS",
            evidence={"field": "area_m2", "path": ctx.arguments["input_path"]},
            hint="rename or drop the existing area_m2 field first",
        )
    crs = gdf.crs
    if method == "geodesic":
        areas = _geodesic_areas(gdf)
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
    out["area_m2"] = areas
    total = float(sum(areas))
    attrs = [c for c in out.columns if c != out.geometry.name]
    rows = out[attrs].head(MAX_ANSWER_ROWS).to_dict(orient="records")
    ctx.answer = {
        "total_area_m2": total,
        "feature_count": len(out),
        "method": method,
        "rows": rows,
        "rows_truncated": len(out) > MAX_ANSWER_ROWS,
    }
    ctx.check(
        "x-mapsmith:areas_non_negative",
        all(a >= 0 for a in areas),
        f"{len(areas)} areas, minimum {min(areas) if areas else 0:.3f} m2",
    )
    _write(ctx, out)


# -- convert_format / extract_layer -----------------------------------------------------------


def _copy(ctx: RunContext) -> None:
    _set_engine(ctx)
    gdf = _read(ctx)
    _write(ctx, gdf)
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
