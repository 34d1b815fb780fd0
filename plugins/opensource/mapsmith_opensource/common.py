"""What every opensource operation shares: engine versions, reading and writing, CRS moves.

The CRS helpers here are the only way an operation of this stack computes in metres or aligns a
second input: each records its decision (which CRS, why, the PROJ pipeline each way) into
``ctx.crs_decisions`` as it happens, so no operation can compute in another CRS without saying so.
Engines are imported inside functions: importing this module must stay cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith.crs import choose_transformer, crs_label, estimate_utm_crs, linear_unit_metres
from mapsmith.errors import InputError, OutputError
from mapsmith.verify import INPUT_VALID_CHECK
from mapsmith_opensource import io

if TYPE_CHECKING:
    import geopandas as gpd
    from pyproj import CRS, Transformer

    from mapsmith.runner import OutputStats, RunContext

# A projected CRS whose scale at the data differs from 1 by more than this is not used for
# distances (Web Mercator at 46 N stretches by 1.44): the operation computes in a UTM zone instead.
MAX_SCALE_DISTORTION = 0.01
WGS84_LABELS = {"EPSG:4326", "OGC:CRS84"}
# Formats that store coordinates as the same doubles the engine held, so the frame's validity is
# the file's. GeoJSON rounds coordinates to a precision and is re-read instead.
LOSSLESS_FORMATS = {".gpkg", ".parquet", ".geoparquet", ".fgb"}
TYPE_NAMES = {
    0: "Point",
    1: "LineString",
    2: "LinearRing",
    3: "Polygon",
    4: "MultiPoint",
    5: "MultiLineString",
    6: "MultiPolygon",
    7: "GeometryCollection",
}
# A layer wider than this (degrees of longitude) does not fit one UTM zone without distortion.
UTM_ZONE_SPAN_DEGREES = 6


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


def set_engine(ctx: RunContext) -> None:
    """Record GeoPandas (and the libraries under it) as the engine of this run."""
    versions = engine_versions()
    ctx.set_engine("geopandas", versions["geopandas"], **{k: v for k, v in versions.items() if k != "geopandas"})


def read_input(ctx: RunContext, key: str = "input_path") -> gpd.GeoDataFrame:
    """The dataset of one input slot ("input_path", "join_path", "input_paths[1]" ...).

    Fixes made while reading (a shapefile's rings re-nested) are disclosed as repairs and warnings.
    """
    gdf = io.read_layer(ctx.paths[key], ctx.layers.get(key))
    _report_input_validity(ctx, gdf, key)
    renested = gdf.attrs.pop("mapsmith_ring_repairs", None)
    if renested:
        for fix in renested:
            ctx.input_repairs.append(
                {
                    "check": "geometry_valid",
                    "action": f"{key}: feature {fix['feature_index']}: {fix['rings_renested']} ring(s) wound like "
                    "shells but lying inside another ring of the same feature were made holes (rings organised "
                    "by nesting, not orientation alone)",
                    "resolved": True,
                    "x-mapsmith:report": fix,
                }
            )
        ctx.warn(
            "SHAPEFILE_RINGS_RENESTED",
            f"{key}: {len(renested)} feature(s) had hole rings wound like shells; read as holes by nesting "
            "(GDAL's orientation-only reading would have counted them as extra area)",
            "the manifest's repairs[] lists each feature with its area before and after; fix the source "
            "shapefile's ring orientation to silence this",
        )
    return gdf


INVALID_ROWS_SHOWN = 10


def _report_input_validity(ctx: RunContext, gdf: gpd.GeoDataFrame, key: str) -> None:
    """Count invalid and missing input geometries: reported, never dropped or fixed silently."""
    report_geometry_validity(ctx, gdf.geometry.values, key)


def report_geometry_validity(ctx: RunContext, geoms: Any, key: str) -> None:
    """``_report_input_validity`` over an array of shapely geometries (None for a missing one), as a reader without
    GeoPandas has them. GEOS's validity test, the costly part, runs in threads over chunks of a large array
    (chunked.apply): on benchmarks' 1,000,000 parcels, 0.62-1.18 s in one call, 0.49-0.61 s in two threads (five of
    each, interleaved)."""
    import numpy as np
    import shapely

    from mapsmith_opensource import chunked

    geoms = np.asarray(geoms, dtype=object)
    missing = shapely.is_missing(geoms) | shapely.is_empty(geoms)
    invalid = ~missing & ~chunked.apply(shapely.is_valid, geoms)
    rows = [int(i) for i in invalid.nonzero()[0][:50]]
    record_input_validity(
        ctx,
        key,
        rows=len(geoms),
        invalid_count=int(invalid.sum()),
        missing_count=int(missing.sum()),
        invalid=[(i, str(shapely.is_valid_reason(geoms[i]))) for i in rows],
    )


def record_input_validity(
    ctx: RunContext, key: str, *, rows: int, invalid_count: int, missing_count: int, invalid: list[tuple[int, str]]
) -> None:
    """The ``x-mapsmith:input_geometry_valid`` check (and warning) for one input, whichever engine counted.

    ``invalid`` holds (feature index, GEOS reason) for the first invalid features found.
    """
    detail = f"{key}: {invalid_count} of {rows} geometries invalid"
    if invalid_count:
        reasons = sorted({reason.split("[")[0].strip() for _, reason in invalid})
        detail += f" (first feature indices {[n for n, _ in invalid[:5]]}; {', '.join(reasons)})"
    if missing_count:
        detail += f"; {missing_count} empty or missing"
    ctx.check(INPUT_VALID_CHECK, invalid_count == 0, detail, critical=False, argument=key)
    if invalid_count:
        ctx.warn(
            "INPUT_GEOMETRY_INVALID",
            detail,
            "results on invalid geometries are undefined: run repair_geometries on the input first (it reports "
            "what it changes), then use its output",
        )


def require_valid(ctx: RunContext, gdf: gpd.GeoDataFrame, key: str, consequence: str) -> None:
    """Refuse an input with invalid geometries where the operation's result on them is undefined.

    ``consequence`` completes "<key> has N invalid geometries; ...", e.g. "an overlay of them is undefined".
    """
    import numpy as np
    import shapely

    geoms = gdf.geometry.values
    bad = ~shapely.is_valid(geoms) & ~shapely.is_missing(geoms)
    if bad.any():
        first = np.flatnonzero(bad)[:INVALID_ROWS_SHOWN]
        raise invalid_input_error(
            ctx,
            key,
            int(bad.sum()),
            [int(i) for i in first],
            [str(r) for r in shapely.is_valid_reason(geoms[first])],
            consequence,
        )


def invalid_input_error(
    ctx: RunContext, key: str, count: int, first_rows: list[int], reasons: list[str], consequence: str
) -> InputError:
    """The refusal for invalid input geometries, with the first rows and GEOS's reasons as evidence."""
    given = ctx.given_paths.get(key, key)
    return InputError(
        f"{key} ({given}) has {count} invalid geometries; {consequence}",
        code="INPUT_GEOMETRY_INVALID",
        evidence={"argument": key, "path": given, "invalid_count": count, "first_rows": first_rows, "reasons": reasons},
        hint="run repair_geometries on it first (it reports what it changes), then use its output",
    )


def write_output(ctx: RunContext, gdf: gpd.GeoDataFrame) -> None:
    """Write the result to the run's temporary output, refusing what the format cannot hold.

    Derived fields (a measure this run took, or one an earlier run wrote that this run's reshaping made
    stale) are first made true of the geometries written: ``derived.refresh``.
    """
    from mapsmith_opensource.derived import refresh

    assert ctx.temp_output is not None
    gdf = refresh(ctx, gdf)
    suffix = ctx.temp_output.suffix.lower()
    if suffix in (".geojson", ".json"):
        label = crs_label(gdf.crs) if gdf.crs is not None else None
        if label not in WGS84_LABELS:
            raise OutputError(
                f"GeoJSON output must be in WGS 84 (RFC 7946); this result is in {label}",
                code="GEOJSON_REQUIRES_WGS84",
                evidence={"crs": label, "path": ctx.arguments.get("output_path")},
                hint="reproject_layer to EPSG:4326 first, or write .gpkg / .parquet / .fgb, which keep any CRS",
            )
    if suffix == ".fgb" and len(gdf) > 1:
        ctx.notes.append(
            "FlatGeobuf's spatial index stores features in packed Hilbert R-tree order: the feature order "
            "of the output differs from the input's (the features and their attributes do not)"
        )
    io.write_layer(gdf, ctx.temp_output, layer=ctx.output_path.stem if ctx.output_path else None)
    if suffix in LOSSLESS_FORMATS:
        ctx.output_stats = frame_stats(gdf)


def _count_invalid(geoms: Any) -> int:
    """Invalid geometries, counted on every core: GEOS releases the GIL, and on a million buffered
    polygons this check is most of what verification costs (docs/benchmarks.md)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import shapely

    workers = min(os.cpu_count() or 1, 8)
    if workers == 1 or len(geoms) < 50_000:
        return int((~shapely.is_valid(geoms)).sum())
    chunks = np.array_split(geoms, workers)
    with ThreadPoolExecutor(workers) as pool:
        return sum(int((~valid).sum()) for valid in pool.map(shapely.is_valid, chunks))


def frame_stats(gdf: gpd.GeoDataFrame) -> OutputStats:
    """Count, validity and geometry types of the frame as written (doubles stored as doubles)."""
    import shapely

    from mapsmith.runner import OutputStats

    geoms = gdf.geometry.values
    present = ~(shapely.is_missing(geoms) | shapely.is_empty(geoms))
    invalid = _count_invalid(geoms[present])
    types = tuple(sorted(set(shapely.get_type_id(geoms[present]).tolist())))
    names = tuple(TYPE_NAMES[t] for t in types)
    return OutputStats(feature_count=len(gdf), invalid_count=invalid, geometry_types=names)


def transform_frame(gdf: gpd.GeoDataFrame, transformer: Transformer, target: CRS) -> gpd.GeoDataFrame:
    """Apply one chosen transformer to every coordinate (the one the record names)."""
    import numpy as np
    import shapely

    def fn(coords: Any) -> Any:
        x, y = transformer.transform(coords[:, 0], coords[:, 1])
        return np.column_stack([x, y])

    def fn_z(coords: Any) -> Any:
        x, y, z = transformer.transform(coords[:, 0], coords[:, 1], coords[:, 2])
        return np.column_stack([x, y, z])

    geoms = gdf.geometry.values
    moved = shapely.transform(geoms, fn)
    has_z = shapely.has_z(geoms)
    if has_z.any():  # Z kept where there is one: a 2-D transform would drop it silently
        moved[has_z] = shapely.transform(geoms[has_z], fn_z, include_z=True)
    return gdf.set_geometry(moved, crs=target)  # a new frame: set_geometry copies, the input stays as it was


def scale_distortion(crs: CRS, lonlat: tuple[float, ...] | None) -> float | None:
    """How far the projection's scale at the data's centre is from 1 (0.0 = true distances)."""
    if lonlat is None:
        return None
    from pyproj import Proj

    lon, lat = (lonlat[0] + lonlat[2]) / 2, (lonlat[1] + lonlat[3]) / 2
    factors = Proj(crs).get_factors(lon, lat)
    return max(abs(factors.meridional_scale - 1), abs(factors.parallel_scale - 1))


@dataclass
class MetricFrame:
    """A layer placed where distances are metres (or a known number of metres per unit)."""

    frame: gpd.GeoDataFrame
    crs: CRS
    metres_per_unit: float
    source: CRS
    aoi: tuple[float, float, float, float] | None
    transformed: bool
    leg_out: dict[str, Any] | None

    def units(self, metres: float) -> float:
        """A distance in metres expressed in this frame's units."""
        return metres / self.metres_per_unit

    def back(self, ctx: RunContext, frame: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
        """Return a result to the caller's CRS, measuring the return leg in its own direction."""
        if not self.transformed:
            return frame
        transformer, leg_back = choose_transformer(self.crs, self.source, self.aoi)
        out = transform_frame(frame, transformer, self.source)
        # Written only now that the coordinates are back in the caller's CRS (spec §3.7).
        ctx.crs_decisions["round_trip"] = {"transformation": self.leg_out, "return_transformation": leg_back}
        return out


def true_to_scale(source: CRS, lonlat: tuple[float, ...] | None) -> bool:
    """Whether distances are measured in ``source``'s own units: projected, and its scale at the data's centre within
    MAX_SCALE_DISTORTION of true (unknown away from an extent, as for an empty layer: taken as true)."""
    if source.is_geographic:
        return False
    distortion = scale_distortion(source, lonlat)
    return distortion is None or distortion <= MAX_SCALE_DISTORTION


def own_metric_unit(ctx: RunContext, source: CRS, purpose: str, key: str = "input_path") -> float | None:
    """When ``to_metric`` keeps a layer in ``source`` (projected, its scale at the data within MAX_SCALE_DISTORTION
    of true): the decision recorded as to_metric records it, and the CRS's unit in metres. None, with nothing
    recorded, when to_metric would compute elsewhere."""
    if not true_to_scale(source, ctx.inputs[key].bounds_lonlat):
        return None
    unit = linear_unit_metres(source)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(source),
            "reason": f"{crs_label(source)} is projected with a scale within {MAX_SCALE_DISTORTION:.0%} of true "
            f"at the data, so it was {purpose} in its own units ({unit} m each)",
            "source_crs": crs_label(source),
            "target_crs": None,
        }
    )
    return unit


def to_metric(ctx: RunContext, gdf: gpd.GeoDataFrame, purpose: str, key: str = "input_path") -> MetricFrame:
    """``gdf`` in a CRS where a metre means a metre at the data, with the decision recorded.

    The layer's own CRS when it is projected and its scale at the data is within 1 % of true;
    otherwise (degrees, or a distorting projection such as Web Mercator) the UTM zone estimated
    from the layer's extent. ``purpose`` completes the reason: "buffered", "simplified" ...
    """
    source = gdf.crs
    aoi = ctx.inputs[key].bounds_lonlat
    unit = own_metric_unit(ctx, source, purpose, key)
    if unit is not None:
        return MetricFrame(gdf, source, unit, source, aoi, False, None)
    distortion = None if source.is_geographic else scale_distortion(source, aoi)
    if aoi is None:
        # An empty layer: there is nothing to place, and nothing to compute.
        ctx.crs_decisions.update({"analysis_crs": crs_label(source), "reason": f"empty input: nothing was {purpose}"})
        return MetricFrame(gdf, source, 1.0, source, aoi, False, None)
    analysis = estimate_utm_crs(aoi)
    transformer, leg_out = choose_transformer(source, analysis, aoi)
    why = (
        f"{crs_label(source)} is geographic (degrees), so metres cannot be measured in it"
        if source.is_geographic
        else f"{crs_label(source)} distorts distances by {distortion:.1%} at the data's centre"
    )
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(analysis),
            "reason": f"{why}; {purpose} in the UTM zone estimated from the layer's extent "
            f"({crs_label(analysis)}) and transformed back, rather than in {crs_label(source)} units",
            "source_crs": crs_label(source),
            "target_crs": crs_label(source),
            "transformation": leg_out,
        }
    )
    span = aoi[2] - aoi[0]
    if span > UTM_ZONE_SPAN_DEGREES:
        ctx.warn(
            "WIDE_LAYER_FOR_UTM",
            f"the layer spans {span:.1f} degrees of longitude, wider than one UTM zone; distances far from the "
            "zone's centre are distorted",
            "reproject to a projected CRS suited to the whole area (e.g. an equidistant one) first",
        )
    moved = transform_frame(gdf, transformer, analysis)
    # A zone cannot place a feature 90 degrees of longitude from its meridian (PROJ answers infinity there), and GEOS
    # answers anything on such coordinates: two points 16 km apart came out as two clusters of 20 km, and passed.
    hint = (
        f"{key} spans {span:.1f} degrees of longitude, too wide for the UTM zone measured in ({crs_label(analysis)}): "
        f"reproject_layer {key} to a projected CRS that covers the whole area (resolve_crs gives a CRS's area of "
        "use; describe_dataset the layer's extent), or run the operation on parts of the layer (select_features)"
    )
    check_placed(gdf.geometry.values, moved.geometry.values, key, crs_label(analysis), hint)
    return MetricFrame(moved, analysis, 1.0, source, aoi, True, leg_out)


def align_to(ctx: RunContext, gdf: gpd.GeoDataFrame, target: CRS, key: str) -> gpd.GeoDataFrame:
    """A second input moved into the main input's CRS, recorded under ``x-mapsmith:alignment``."""
    if gdf.crs.equals(target, ignore_axis_order=True):
        return gdf
    transformer, record = choose_transformer(gdf.crs, target, ctx.inputs[key].bounds_lonlat)
    ctx.crs_decisions.setdefault("x-mapsmith:alignment", {})[key] = {
        "source_crs": crs_label(gdf.crs),
        "target_crs": crs_label(target),
        "reason": f"{key} was transformed to the main input's CRS ({crs_label(target)}) so the main input's "
        "coordinates are written unchanged",
        "transformation": record,
    }
    warn_about_transformation(ctx, record, f"{key}: {crs_label(gdf.crs)} to {crs_label(target)}")
    moved = transform_frame(gdf, transformer, target)
    # A feature PROJ cannot place in the main input's CRS has infinite coordinates there, on which GEOS answers
    # anything: a clip mask with one such vertex kept points 17 km outside it, and the run passed.
    label = crs_label(target)
    hint = (
        f"{key} is moved into input_path's CRS ({label}) for this operation, and that CRS cannot hold the features "
        "named: reproject_layer input_path to a CRS whose area of use covers both layers (describe_dataset gives "
        "each layer's extent in lon/lat, resolve_crs a CRS's area of use; EPSG:4326 places every point), then run "
        "this operation on that"
    )
    check_placed(gdf.geometry.values, moved.geometry.values, key, label, hint)
    return moved


# How many of the features a CRS cannot place a refusal names.
OUTSIDE_NAMED = 5


def outside_target(
    argument: str, target: str | None, count: int, first: list[tuple[int, float, float]], hint: str
) -> InputError:
    """The refusal of ``count`` features of ``argument`` whose finite coordinates PROJ answers with infinite ones in
    ``target``; ``first``: the first few as (feature index, x, y in the argument's own CRS), by either engine."""
    where = ", ".join(f"feature {n} at ({x:.6g}, {y:.6g})" for n, x, y in first)
    return InputError(
        f"{count} feature(s) of {argument} lie where {target} cannot place them: PROJ answers their coordinates "
        f"with infinite ones ({where}{', ...' if count > len(first) else ''})",
        code="OUTSIDE_TARGET_CRS",
        evidence={
            "argument": argument,
            "target_crs": target,
            "features": count,
            "first_features": [{"index": n, "x": x, "y": y} for n, x, y in first],
        },
        hint=hint,
    )


def check_placed(before: Any, after: Any, argument: str, target: str | None, hint: str) -> None:
    """Refuse (outside_target) when a feature of ``before`` with finite x and y has an infinite or NaN one in
    ``after``, the same geometries transformed."""
    import numpy as np
    import shapely

    old, owner = shapely.get_coordinates(before, return_index=True)
    new = shapely.get_coordinates(after)
    lost = np.isfinite(old[:, :2]).all(axis=1) & ~np.isfinite(new[:, :2]).all(axis=1)
    if lost.any():
        features = np.unique(owner[lost])
        first = []
        for n in features[:OUTSIDE_NAMED]:
            x, y = old[np.flatnonzero(lost & (owner == n))[0], :2]
            first.append((int(n), float(x), float(y)))
        raise outside_target(argument, target, len(features), first, hint)


def warn_about_transformation(ctx: RunContext, record: dict[str, Any], pair: str) -> None:
    """Tell the agent, not only the manifest, when a datum shift was approximate or a better one is missing."""
    if record.get("is_ballpark"):
        ctx.warn(
            "BALLPARK_TRANSFORMATION",
            f"{pair}: no datum transformation was available; PROJ treated the datums as equivalent "
            "(errors can reach 100 m or more)",
            "install the PROJ grid named in the manifest's crs_decisions, or accept the ballpark result knowingly",
        )
        return
    missing = record.get("x-mapsmith:better_unavailable")
    if missing:
        ctx.warn(
            "BETTER_TRANSFORMATION_MISSING",
            f"{pair}: a more accurate transformation ({missing.get('operation')}, {missing.get('accuracy_m')} m) "
            f"exists but needs grids not installed here ({', '.join(missing.get('missing_grids') or [])}); the "
            f"one used is accurate to {record.get('accuracy_m')} m",
            "install the named PROJ grid files (the proj-data package, or projsync) and run again",
        )


def geodesic_areas(gdf: gpd.GeoDataFrame) -> list[float]:
    """Ellipsoidal area of each polygon, on the ellipsoid of the layer's own datum."""
    import shapely

    crs = gdf.crs
    geod = crs.get_geod()
    lonlat = gdf
    if not crs.is_geographic:
        from pyproj import Transformer

        geographic = crs.geodetic_crs  # same datum: no datum shift enters the measurement
        lonlat = transform_frame(gdf, Transformer.from_crs(crs, geographic, always_xy=True), geographic)
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
