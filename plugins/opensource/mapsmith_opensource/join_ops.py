"""The opensource stack's join operations: attributes moved between datasets by location, proximity,
area of overlap or key.

spatial_join and nearest_join (by location), count_in_polygons and summarize_points_in_polygons
(points aggregated per polygon), apportion_by_area (areal interpolation) and join_attributes (by
key, from a table). Each moves its second input into input_path's CRS with ``common.align_to``
(recorded), measures distances and areas on the ground (planar only in a projected CRS true to scale
at the data, otherwise geodesically on the ellipsoid; never in degrees), writes input_path's own
geometry and fields unchanged, and counts what it did not match or left out, in the answer and in
the manifest's parameters.

None of these functions renames a field, normalises a key, breaks a tie or counts a boundary point
without recording the rule it used, and none normalises a key unless the conversion is lossless.
spatial_join also runs inside DuckDB, file to file, where it can give the same rows and record the
same run as GeoPandas (see duckdb_join_eligible); tests compare the two engines' outputs and manifests.
Engines are imported inside functions: importing this module must stay cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith.crs import choose_transformer, crs_label, linear_unit_metres
from mapsmith.errors import ArgumentError, InputError
from mapsmith.paging import page
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    INVALID_ROWS_SHOWN,
    MAX_SCALE_DISTORTION,
    TYPE_NAMES,
    MetricFrame,
    align_to,
    invalid_input_error,
    read_input,
    record_input_validity,
    require_valid,
    scale_distortion,
    set_engine,
    to_metric,
    transform_frame,
    write_output,
)
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    import geopandas as gpd
    import numpy as np
    import pandas as pd
    from pyproj import CRS

    from mapsmith.runner import RunContext

    # (polygon geometries, point geometries) -> (polygon rows, point rows) of the intersecting pairs
    PairFinder = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    # (input geometries, join geometries, limit in their units or None) -> (input rows, join rows, distances)
    # of every join row at exactly the least planar distance from each input row
    PlanarNearest = Callable[[np.ndarray, np.ndarray, float | None], tuple[np.ndarray, np.ndarray, np.ndarray]]

# spatial_join has two engines. The DuckDB engine works file to file (GeoParquet in, GeoParquet out;
# both CRS equal; a predicate DuckDB Spatial evaluates as GEOS does); everything else goes to GeoPandas.
# Measured on this machine (2 shared cores) with benchmarks/bench_vector.py --only spatial_join:
# 1,000,000 random points x 10,000 polygons in EPSG:32610, intersects, how=left, fresh processes,
# interleaved, medians of 5, whole MapSmith runs with checks and manifest: raw DuckDB COPY 2.46 s, raw
# geopandas.sjoin 4.19 s, MapSmith on the DuckDB engine 3.40 s (1.38x the raw DuckDB run, whose import
# and extension load, 0.69 s, are outside its clock; MapSmith's, about 0.3 s, are inside), MapSmith on
# the GeoPandas engine 5.1-5.5 s. With 300,000 / 100,000 / 30,000 points (same polygons): DuckDB engine
# 1.42 / 0.77 / 0.55 s, GeoPandas engine 1.98 / 0.92 / 0.61 s. DuckDB is therefore preferred from
# DUCKDB_MIN_ROWS features in the larger input, the smallest size measured clearly faster; below it the
# gain is within the noise and GeoPandas, already loaded, takes the run.
DUCKDB_MIN_ROWS = 100_000
GEOPANDAS_PREFERENCE = 20
DUCKDB_PREFERENCE = 30

REGISTRATIONS = (
    Registration(
        "spatial_join",
        "spatial_join_geopandas",
        engine="geopandas",
        preference=GEOPANDAS_PREFERENCE,
        validate="validate_spatial_join",
    ),
    Registration(
        "spatial_join",
        "spatial_join_duckdb",
        engine="duckdb",
        preference=DUCKDB_PREFERENCE,
        eligible="duckdb_join_eligible",
        validate="validate_spatial_join",
    ),
    Registration("nearest_join", "nearest_join"),
    Registration("count_in_polygons", "count_in_polygons"),
    Registration("summarize_points_in_polygons", "summarize_points_in_polygons", validate="validate_summarize_points"),
    Registration("apportion_by_area", "apportion_by_area"),
    Registration("join_attributes", "join_attributes"),
)

# How many invalid rows a refusal names (with GEOS's reason for each).
UNDEFINED_ON_INVALID = "spatial predicates and areas computed on them are undefined"
# How many unmatched keys of each side join_attributes names in its answer and manifest.
UNMATCHED_KEYS_SHOWN = 20
JOIN_SUFFIX = "_join"
TABLE_SUFFIX = "_table"
# Where distances are geodesic, candidates are found in a UTM zone first, within this much more
# than the wanted distance: a UTM zone's scale differs from true by at most about 0.1 % inside the
# zone, so 1 % keeps every pair whose geodesic distance qualifies (wider layers are warned about).
GEODESIC_CANDIDATE_SLACK = 0.01
# Two candidates this close in distance are tied (a micrometre: below any survey's precision).
TIE_TOLERANCE_METRES = 1e-6
# A target zone whose covered share of area is within this of 1 counts as fully covered.
COVERAGE_TOLERANCE = 1e-6
# Areas are measured with a vertex at least this often along every edge (see _geodesic_areas).
AREA_VERTEX_SPACING_METRES = 1000.0
AREA_VERTEX_SPACING_DEGREES = 0.01
# Every whole number up to 2**53 is exactly representable as a double; beyond it 310101.0-style
# keys may already have lost digits, so they are not normalised to text.
MAX_EXACT_INTEGER = 2**53
STATISTICS = ("mean", "sum", "min", "max", "count")
SPATIAL_PREDICATES = {
    "intersects": "ST_Intersects",
    "within": "ST_Within",
    "contains": "ST_Contains",
    "touches": "ST_Touches",
    "crosses": "ST_Crosses",
    "overlaps": "ST_Overlaps",
    "dwithin": "ST_DWithin",
}
BOUNDARY_RULE = (
    "intersects: a point on a polygon's boundary is counted in that polygon, so a point on a boundary "
    "shared by two polygons is counted in both (such points are counted in the answer)"
)
TIE_RULE = (
    f"join features within {TIE_TOLERANCE_METRES} m of the nearest distance are tied; the one that comes "
    "first in join_path (lowest row position) is taken"
)


# -- shared helpers ---------------------------------------------------------------------------


def _rows(frame: pd.DataFrame, arguments: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page of attribute rows the call's offset/limit ask for, and its ``page`` record."""
    import json

    attrs = [c for c in frame.columns if c != getattr(frame, "_geometry_column_name", None)]
    _, window = page(range(len(frame)), arguments)
    start = window["offset"]
    # Through JSON so numpy and pandas scalars (and NA) become plain values.
    rows = json.loads(frame[attrs].iloc[start : start + window["returned"]].to_json(orient="records"))
    return rows, window


def _plain(value: Any) -> Any:
    """A key or number as a JSON value (numpy scalars become Python ones)."""
    return value.item() if hasattr(value, "item") else value


def _given(ctx: RunContext, key: str) -> str:
    return ctx.given_paths.get(key, str(ctx.arguments.get(key, key)))


def _field_not_found(ctx: RunContext, argument: str, dataset: str, name: str, available: list[str]) -> InputError:
    import difflib

    close = difflib.get_close_matches(name, available, n=1)
    return InputError(
        f"{argument} names the field {name!r}, which {_given(ctx, dataset)} does not have"
        + (f"; did you mean {close[0]!r}?" if close else ""),
        code="FIELD_NOT_FOUND",
        evidence={"argument": argument, "field": name, "fields": available, "path": _given(ctx, dataset)},
        hint=f"name one of the fields {available} (describe_dataset lists them)",
    )


def _refuse_existing(ctx: RunContext, frame: pd.DataFrame, names: list[str], dataset: str = "input_path") -> None:
    """Refuse to write a field the input already has (GeoPackage field names ignore case)."""
    taken = {str(c).casefold(): str(c) for c in frame.columns}
    for name in names:
        if name.casefold() in taken:
            raise InputError(
                f"{dataset} already has a field {taken[name.casefold()]!r}; MapSmith will not overwrite it "
                f"with {name!r}",
                code="FIELD_EXISTS",
                evidence={"field": taken[name.casefold()], "path": _given(ctx, dataset)},
                hint=f"rename or drop the existing {taken[name.casefold()]!r} field first",
            )


def _numeric_field(ctx: RunContext, frame: pd.DataFrame, name: str, dataset: str) -> pd.Series:
    """The values of a numeric field, or a refusal naming the field and the type it has."""
    from pandas.api import types

    if name not in frame.columns:
        fields = [str(c) for c in frame.columns if c != getattr(frame, "_geometry_column_name", None)]
        raise _field_not_found(ctx, "field", dataset, name, fields)
    values = frame[name]
    if not types.is_numeric_dtype(values) or types.is_bool_dtype(values):
        raise InputError(
            f"field {name!r} of {_given(ctx, dataset)} holds {values.dtype} values, not numbers",
            code="FIELD_NOT_NUMERIC",
            evidence={"argument": "field", "field": name, "type": str(values.dtype), "path": _given(ctx, dataset)},
            hint="name a numeric field, or convert this one to numbers first (a text field of digits is not "
            "read as numbers: MapSmith does not guess which texts are numbers)",
        )
    return values


def _rename_clashes(taken: list[str], incoming: list[str], suffix: str) -> dict[str, str]:
    """New names for incoming fields whose names (ignoring case, as GeoPackage does) are taken."""
    used = {str(t).casefold() for t in taken}
    renamed: dict[str, str] = {}
    for name in incoming:
        if str(name).casefold() not in used:
            used.add(str(name).casefold())
            continue
        candidate, n = f"{name}{suffix}", 2
        while candidate.casefold() in used or candidate in incoming:
            candidate, n = f"{name}{suffix}{n}", n + 1
        renamed[name] = candidate
        used.add(candidate.casefold())
    return renamed


def _take(frame: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    """Rows of ``frame`` by position, -1 giving an empty row; integers and booleans stay themselves."""
    from pandas.api import types

    out = frame.reset_index(drop=True)
    for col in out.columns:
        if types.is_bool_dtype(out[col]) and out[col].dtype == bool:
            out[col] = out[col].astype("boolean")
        elif types.is_integer_dtype(out[col]) and not types.is_extension_array_dtype(out[col]):
            out[col] = out[col].astype("Int64")
    return out.reindex(positions).reset_index(drop=True)


def _attach(
    base: gpd.GeoDataFrame, other: pd.DataFrame, left: np.ndarray, right: np.ndarray, suffix: str
) -> tuple[gpd.GeoDataFrame, dict[str, str]]:
    """``base`` rows ``left`` side by side with ``other`` rows ``right`` (-1: none); clashes renamed."""
    import geopandas as gpd
    import numpy as np
    import pandas as pd

    renamed = _rename_clashes([str(c) for c in base.columns], [str(c) for c in other.columns], suffix)
    extra = _take(other.rename(columns=renamed), right)
    identity = len(left) == len(base) and bool(np.all(left == np.arange(len(base))))
    kept = base.reset_index(drop=True) if identity else base.iloc[left].reset_index(drop=True)
    out = pd.concat([pd.DataFrame(kept), extra], axis=1)
    return gpd.GeoDataFrame(out, geometry=base.geometry.name, crs=base.crs), renamed


def _attributes(gdf: gpd.GeoDataFrame) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(gdf.drop(columns=gdf.geometry.name))


def _aligned(ctx: RunContext, key: str) -> str:
    return (
        f"; {key} was transformed to it first (see x-mapsmith:alignment)"
        if key in ctx.crs_decisions.get("x-mapsmith:alignment", {})
        else ""
    )


def _record_topological(ctx: RunContext, crs: CRS, key: str, what: str) -> None:
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs),
            "reason": f"{what} in input_path's CRS: a topological test, in which units and scale do not enter, "
            "and the input's coordinates are written unchanged" + _aligned(ctx, key),
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )


def _geodesic_areas(geoms: np.ndarray, crs: CRS) -> np.ndarray:
    """Ellipsoidal area (m2) of the polygonal parts of each geometry, on the CRS's own datum."""
    import numpy as np
    import shapely

    if len(geoms) == 0:
        return np.zeros(0)
    # Edges are straight in the layer's CRS; measured between vertices only they would be taken as
    # geodesics, and a piece cut from a zone would not add up to the zone (1e-4 apart for 300 km
    # zones). Vertices every ~1 km keep the two within 1e-9.
    step = AREA_VERTEX_SPACING_DEGREES if crs.is_geographic else AREA_VERTEX_SPACING_METRES / linear_unit_metres(crs)
    geoms = shapely.segmentize(geoms, step)
    if not crs.is_geographic:
        from pyproj import Transformer

        # The geodetic CRS of the same datum: an exact inverse projection, no datum shift.
        to_lonlat = Transformer.from_crs(crs, crs.geodetic_crs, always_xy=True)

        def fn(coords: Any) -> Any:
            x, y = to_lonlat.transform(coords[:, 0], coords[:, 1])
            return np.column_stack([x, y])

        geoms = shapely.transform(geoms, fn)
    geod = crs.get_geod()

    def ring(coords: Any) -> float:
        xy = np.asarray(coords)
        return abs(geod.polygon_area_perimeter(xy[:, 0], xy[:, 1])[0])

    areas = np.zeros(len(geoms))
    for i, geom in enumerate(geoms):
        if geom is None or geom.is_empty:
            continue
        total = 0.0
        for part in shapely.get_parts(shapely.get_parts(geom)):  # collections, then multi-parts
            if part.geom_type != "Polygon" or part.is_empty:
                continue  # lines and points where polygons only touch have no area
            total += ring(part.exterior.coords) - sum(ring(r.coords) for r in part.interiors)
        areas[i] = total
    return areas


# -- distances on the ground ------------------------------------------------------------------


@dataclass
class _Ground:
    """Where input_path and join_path are placed to measure distances in metres, and how."""

    metric: MetricFrame
    join: gpd.GeoDataFrame  # join_path in metric.crs
    geodesic: bool
    _back: Any = field(default=None, repr=False)

    def search_units(self, metres: float) -> float:
        """A search radius in analysis units, widened where the final measure is geodesic."""
        return self.metric.units(metres * (1 + GEODESIC_CANDIDATE_SLACK if self.geodesic else 1.0))

    def metres(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """The ground distance between input feature ``left[k]`` and join feature ``right[k]``."""
        import numpy as np
        import shapely

        a = self.metric.frame.geometry.values[left]
        b = self.join.geometry.values[right]
        if not self.geodesic:
            return np.asarray(shapely.distance(a, b), dtype=float) * self.metric.metres_per_unit
        if len(a) == 0:
            return np.zeros(0)
        # The nearest points are found in the UTM zone; the distance between them is measured on
        # the ellipsoid of the input's own datum, after mapping them back with the return leg.
        xy = shapely.get_coordinates(shapely.shortest_line(a, b))
        if self._back is None:
            self._back = choose_transformer(self.metric.crs, self.metric.source, self.metric.aoi)[0]
        x, y = self._back.transform(xy[:, 0], xy[:, 1])
        source = self.metric.source
        if not source.is_geographic:
            from pyproj import Transformer

            x, y = Transformer.from_crs(source, source.geodetic_crs, always_xy=True).transform(x, y)
        _, _, dist = source.get_geod().inv(x[0::2], y[0::2], x[1::2], y[1::2])
        return np.asarray(dist, dtype=float)


def _record_planar(ctx: RunContext, metric: MetricFrame, input_features: int) -> None:
    ctx.parameters["x-mapsmith:distance_method"] = (
        f"planar in {crs_label(metric.source)} ({metric.metres_per_unit} m per unit)"
        if input_features
        else "none: input_path is empty"
    )


def _ground(ctx: RunContext, left: gpd.GeoDataFrame, join: gpd.GeoDataFrame, purpose: str) -> _Ground:
    """Place both layers for measuring: planar in input_path's CRS when it is projected and true to
    scale at the data, else candidates in an estimated UTM zone measured geodesically. Recorded."""
    metric = to_metric(ctx, left, purpose)
    source = metric.source
    if not metric.transformed:
        _record_planar(ctx, metric, len(left))
        return _Ground(metric, join, geodesic=False)
    transformer, _ = choose_transformer(source, metric.crs, metric.aoi)
    join_metric = transform_frame(join, transformer, metric.crs)
    ellipsoid = source.ellipsoid.name if source.ellipsoid else "unknown"
    if source.is_geographic:
        why = f"{crs_label(source)} is geographic (degrees), so metres cannot be measured in it"
    else:
        distortion = scale_distortion(source, metric.aoi) or 0.0
        why = (
            f"{crs_label(source)} distorts distances by {distortion:.1%} at the data's centre (more than "
            f"{MAX_SCALE_DISTORTION:.0%})"
        )
    ctx.crs_decisions["reason"] = (
        f"{why}; both layers were placed in the UTM zone estimated from input_path's extent "
        f"({crs_label(metric.crs)}) only to find candidate pairs, and every distance was measured geodesically "
        f"on the {ellipsoid} ellipsoid between the pair's nearest points; the output keeps input_path's own "
        "coordinates" + _aligned(ctx, "join_path")
    )
    ctx.parameters["x-mapsmith:distance_method"] = (
        f"geodesic on the {ellipsoid} ellipsoid (candidates found in {crs_label(metric.crs)})"
    )
    return _Ground(metric, join_metric, geodesic=True)


# -- spatial_join -----------------------------------------------------------------------------


@dataclass
class _SpatialJoin:
    left: gpd.GeoDataFrame  # input_path as read
    join: gpd.GeoDataFrame  # join_path in input_path's CRS
    left_geoms: np.ndarray  # the geometries the predicate is evaluated on
    join_geoms: np.ndarray
    predicate: str  # the engine's name: intersects ... or dwithin
    search_units: float | None  # the dwithin distance in the geometries' units
    ground: _Ground | None


def validate_spatial_join(ctx: RunContext) -> None:
    """distance_meters goes with predicate within_distance, and only with it (before any file is read)."""
    predicate = ctx.arguments["predicate"]
    distance = ctx.arguments.get("distance_meters")
    if predicate == "within_distance" and distance is None:
        raise ArgumentError(
            "spatial_join with predicate 'within_distance' needs 'distance_meters'",
            code="MISSING_ARGUMENT",
            evidence={"operation": "spatial_join", "argument": "distance_meters", "predicate": predicate},
            hint="add distance_meters (the ground distance in metres within which features match)",
        )
    if predicate != "within_distance" and distance is not None:
        raise ArgumentError(
            f"distance_meters applies only to predicate 'within_distance', not {predicate!r}",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={"operation": "spatial_join", "argument": "distance_meters", "predicate": predicate},
            hint="remove distance_meters, or set predicate='within_distance' to match features within that distance",
        )


def _prepare_spatial_join(ctx: RunContext) -> _SpatialJoin:
    predicate = ctx.arguments["predicate"]
    distance = ctx.arguments.get("distance_meters")
    left = read_input(ctx)
    join = read_input(ctx, "join_path")
    require_valid(ctx, left, "input_path", UNDEFINED_ON_INVALID)
    require_valid(ctx, join, "join_path", UNDEFINED_ON_INVALID)
    join = align_to(ctx, join, left.crs, "join_path")
    if predicate != "within_distance":
        _record_topological(ctx, left.crs, "join_path", f"the predicate '{predicate}' was evaluated")
        return _SpatialJoin(left, join, left.geometry.values, join.geometry.values, predicate, None, None)
    ground = _ground(ctx, left, join, "measured for within_distance")
    ctx.parameters["x-mapsmith:distance_in_analysis_units"] = ground.metric.units(distance)
    return _SpatialJoin(
        left,
        join,
        ground.metric.frame.geometry.values,
        ground.join.geometry.values,
        "dwithin",
        ground.search_units(distance),
        ground,
    )


def spatial_join_geopandas(ctx: RunContext) -> None:
    import geopandas as gpd
    import numpy as np

    set_engine(ctx)
    prep = _prepare_spatial_join(ctx)
    if len(prep.left_geoms) == 0 or len(prep.join_geoms) == 0:
        _finish_spatial_join(ctx, prep, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        return
    crs = prep.ground.metric.crs if prep.ground else prep.left.crs
    left = gpd.GeoDataFrame(geometry=gpd.GeoSeries(prep.left_geoms, crs=crs))
    right = gpd.GeoDataFrame(geometry=gpd.GeoSeries(prep.join_geoms, crs=crs))
    kwargs = {"distance": prep.search_units} if prep.predicate == "dwithin" else {}
    # Geometries only: the rows are assembled once, in _finish_spatial_join.
    pairs = gpd.sjoin(left, right, how="inner", predicate=prep.predicate, **kwargs)
    _finish_spatial_join(ctx, prep, pairs.index.to_numpy(), pairs["index_right"].to_numpy())


def _finish_spatial_join(ctx: RunContext, prep: _SpatialJoin, left: np.ndarray, right: np.ndarray) -> None:
    """The GeoPandas engine's assembly: pairs in (input row, join row) order, counted, written."""
    import numpy as np

    left, right = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
    beyond = None
    if prep.ground is not None and prep.ground.geodesic:
        within = prep.ground.metres(left, right) <= ctx.arguments["distance_meters"]
        beyond = int((~within).sum())
        left, right = left[within], right[within]
    if len(left) > 1:
        step_left, step_right = np.diff(left), np.diff(right)
        if not np.all((step_left > 0) | ((step_left == 0) & (step_right > 0))):
            order = np.lexsort((right, left))
            left, right = left[order], right[order]
    n_left, n_join = len(prep.left), len(prep.join)
    per_input = np.bincount(left, minlength=n_left)
    n_matched = int((per_input > 0).sum())
    join_used = np.zeros(n_join, dtype=bool)
    join_used[right] = True
    if ctx.arguments["how"] == "left" and n_matched < n_left:
        # Each unmatched input feature gets one row with no join feature, at its input position.
        rows = np.maximum(per_input, 1)
        starts = np.cumsum(rows) - rows
        first_pair = np.cumsum(per_input) - per_input
        slots = starts[left] + (np.arange(len(left)) - first_pair[left])
        right_all = np.full(int(rows.sum()), -1, dtype=np.int64)
        right_all[slots] = right
        left, right = np.repeat(np.arange(n_left), rows), right_all
    out, renamed = _attach(prep.left, _attributes(prep.join), left, right, JOIN_SUFFIX)
    tally = _JoinTally(n_left, n_join, int((right >= 0).sum()), n_matched, int(join_used.sum()), beyond)
    _record_spatial_join(ctx, tally, renamed)
    write_output(ctx, out)
    _check_written(ctx, tally, io.inspect(ctx.temp_output, None).feature_count)


@dataclass(frozen=True)
class _JoinTally:
    """What a spatial join matched, as every engine reports it."""

    input_features: int
    join_features: int
    pairs: int
    input_matched: int
    join_matched: int
    beyond: int | None = None  # geodesic within_distance: candidate pairs the ellipsoid ruled out

    def output_features(self, how: str) -> int:
        return self.pairs + (self.input_features - self.input_matched if how == "left" else 0)


def _record_spatial_join(ctx: RunContext, tally: _JoinTally, renamed: dict[str, str]) -> None:
    how = ctx.arguments["how"]
    unmatched = tally.input_features - tally.input_matched
    counts = {
        "input_features": tally.input_features,
        "join_features": tally.join_features,
        "matched_pairs": tally.pairs,
        "input_features_matched": tally.input_matched,
        "input_features_unmatched": unmatched,
        "input_features_dropped": unmatched if how == "inner" else 0,
        "join_features_matched": tally.join_matched,
        "join_features_unmatched": tally.join_features - tally.join_matched,
        "output_features": tally.output_features(how),
    }
    if tally.beyond is not None:
        counts["candidate_pairs_beyond_distance"] = tally.beyond
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    kept = "kept with empty join fields" if how == "left" else "left out (how='inner')"
    ctx.notes.append(
        f"{tally.input_features} input features and {tally.join_features} join features gave {tally.pairs} "
        f"matching pairs; {unmatched} input features matched nothing and were {kept}; "
        f"{counts['join_features_unmatched']} join features matched nothing"
        + (f"; join fields renamed for clashing names: {renamed}" if renamed else "")
    )
    ctx.answer = {"predicate": ctx.arguments["predicate"], "how": how, **counts, "renamed_fields": renamed}


def _check_written(ctx: RunContext, tally: _JoinTally, written: int | None) -> None:
    how = ctx.arguments["how"]
    expected = tally.output_features(how)
    unmatched = tally.input_features - tally.input_matched
    ctx.check(
        "feature_count_exact",
        written == expected,
        f"expected {expected} features ({tally.pairs} matched pairs"
        + (f" + {unmatched} unmatched input features kept" if how == "left" else "")
        + f"), wrote {written}",
    )


# -- spatial_join on DuckDB, file to file -----------------------------------------------------

# How many invalid rows the x-mapsmith:input_geometry_valid check reads reasons from
# (as common.read_input does).
INVALID_REASONS_READ = 50
# DuckDB's name for the row position read_parquet adds with file_row_number=true.
ROW_NUMBER = "file_row_number"


@dataclass(frozen=True)
class _GeoParquet:
    """What the DuckDB engine reads of a GeoParquet file's footer, and why it cannot join it (or None)."""

    path: Path
    geometry: str  # the primary geometry column
    columns: tuple[str, ...]  # as GeoPandas reads them: file order, geometry in place, no bbox covering
    other_integers: frozenset[str]  # integer columns not int64: GeoPandas writes join_path's as int64
    crs_id: str | None  # "EPSG:32610" when the PROJJSON names one: DuckDB writes that code's definition
    crs: dict[str, Any]  # the geometry column's "crs" member as the file has it ({} when absent: OGC:CRS84)
    problem: str | None


def _carried_exactly(arrow_type: Any) -> bool:
    """Whether DuckDB reads and writes values of this Arrow type as the GeoPandas engine does."""
    import pyarrow.types as t

    if t.is_timestamp(arrow_type):
        return arrow_type.tz is None  # DuckDB writes zoned times as UTC, losing the zone's name
    return any(
        check(arrow_type)
        for check in (
            t.is_boolean,
            t.is_integer,
            t.is_float32,
            t.is_float64,
            t.is_string,
            t.is_large_string,
            t.is_binary,
            t.is_large_binary,
            t.is_date32,
        )
    )


def _geoparquet(path: Path, key: str) -> _GeoParquet:
    import json

    import pyarrow.parquet as pq
    import pyarrow.types as t

    schema = pq.read_schema(path)
    meta = schema.metadata or {}
    geo = json.loads(meta.get(b"geo") or b"{}")
    primary = str(geo.get("primary_column", ""))
    column = geo.get("columns", {}).get(primary, {})
    covering = {str(v[0]) for v in column.get("covering", {}).get("bbox", {}).values() if v}
    columns = tuple(n for n in schema.names if n not in covering)
    problem = None
    index = [i for i in json.loads(meta.get(b"pandas") or b"{}").get("index_columns", []) if isinstance(i, str)]
    crs = column.get("crs")
    folded: dict[str, str] = {}
    clash = next((n for n in columns if folded.setdefault(n.casefold(), n) != n), None)
    odd = next((f for f in schema if f.name in columns and f.name != primary and not _carried_exactly(f.type)), None)
    if len(geo.get("columns", {})) != 1:
        problem = f"{key} has {len(geo.get('columns', {}))} geometry columns; the DuckDB engine joins layers with one"
    elif column.get("encoding") != "WKB":
        problem = f"{key} stores its geometries as {column.get('encoding')!r}, not WKB, which the DuckDB engine reads"
    elif "crs" in column and not isinstance(crs, dict):
        problem = f"{key} gives its CRS as {type(crs).__name__}, not PROJJSON, which is all DuckDB reads"
    elif index:
        problem = (
            f"{key} stores a pandas index ({', '.join(index)}), which GeoPandas reads as the row index and DuckDB "
            "would read as a field"
        )
    elif any(n.casefold() == ROW_NUMBER for n in columns):
        problem = f"{key} has a field named {ROW_NUMBER!r}, which DuckDB reserves for row positions"
    elif clash is not None:
        problem = (
            f"{key} has the fields {folded[clash.casefold()]!r} and {clash!r}, which DuckDB does not tell apart "
            "(names ignore case)"
        )
    elif odd is not None:
        problem = (
            f"{key}'s field {odd.name!r} is of type {odd.type}; the DuckDB engine carries only booleans, integers, "
            "floats, text, binary, dates and timestamps without a time zone exactly as the GeoPandas engine does"
        )
    other = frozenset(f.name for f in schema if t.is_integer(f.type) and not t.is_int64(f.type))
    ident = crs.get("id") if isinstance(crs, dict) else None
    crs_id = f"{ident.get('authority')}:{ident.get('code')}" if isinstance(ident, dict) else None
    member = {"crs": column["crs"]} if "crs" in column else {}
    return _GeoParquet(path, primary, columns, other, crs_id, member, problem)


def _names_another_crs(crs_id: str | None, crs: CRS) -> bool:
    """Whether a PROJJSON's id stands for a CRS other than the one it defines (``crs``)."""
    if crs_id is None:
        return False
    from pyproj import CRS
    from pyproj.exceptions import CRSError

    try:
        return not CRS.from_user_input(crs_id).equals(crs, ignore_axis_order=True)
    except CRSError:
        return True


def duckdb_join_eligible(ctx: RunContext) -> str | None:
    """Why the DuckDB engine cannot take this spatial_join, or None when it can."""
    from pyproj import CRS

    for key in ("input_path", "join_path"):
        if not io.is_parquet(ctx.paths[key]):
            return (
                f"{key} is not GeoParquet ({ctx.inputs[key].driver}); the DuckDB engine joins GeoParquet files only, "
                "file to file"
            )
    if ctx.output_path is None or not io.is_parquet(ctx.output_path):
        suffix = ctx.output_path.suffix if ctx.output_path else None
        return f"output_path ends in {suffix}; the DuckDB engine writes GeoParquet (.parquet) only"
    first, second = ctx.inputs["input_path"], ctx.inputs["join_path"]
    if first.crs_wkt is None or second.crs_wkt is None:
        return "the DuckDB engine joins only layers whose CRS is known"
    crs = CRS.from_wkt(first.crs_wkt)
    if not crs.equals(CRS.from_wkt(second.crs_wkt), ignore_axis_order=True):
        return (
            f"input_path is in {first.crs_label} and join_path in {second.crs_label}; the DuckDB engine joins "
            "only layers in one CRS (GeoPandas aligns join_path first, recorded)"
        )
    if ctx.arguments["predicate"] == "within_distance":
        geodesic = "distances are then measured geodesically on the ellipsoid, which only the GeoPandas engine does"
        if crs.is_geographic:
            return f"within_distance in {first.crs_label}, which is geographic (degrees): {geodesic}"
        distortion = scale_distortion(crs, first.bounds_lonlat)
        if distortion is not None and distortion > MAX_SCALE_DISTORTION:
            return (
                f"within_distance in {first.crs_label}, which distorts distances by {distortion:.1%} at the data's "
                f"centre (more than {MAX_SCALE_DISTORTION:.0%}): {geodesic}"
            )
    rows = max(first.feature_count or 0, second.feature_count or 0)
    if rows < DUCKDB_MIN_ROWS:
        return (
            f"the larger input has {rows} features, fewer than the {DUCKDB_MIN_ROWS:,} for which the DuckDB "
            "engine is considered"
        )
    layers = {key: _geoparquet(ctx.paths[key], key) for key in ("input_path", "join_path")}
    problem = layers["input_path"].problem or layers["join_path"].problem
    if problem:
        return problem
    # The output's CRS is input_path's as DuckDB read it (join_path's is set aside: the two are equal).
    if _names_another_crs(layers["input_path"].crs_id, crs):
        return (
            f"input_path's PROJJSON CRS names {layers['input_path'].crs_id} but defines another CRS; DuckDB would "
            f"read it as {layers['input_path'].crs_id} and write that code's own definition"
        )
    return None


@cache
def duckdb_database() -> Any:
    """One DuckDB database per process with spatial loaded (loading the 80 MB extension takes 0.2-0.3 s);
    each run works on a cursor of its own, with its own temporary tables. A long-running server pays
    the load once, on its first DuckDB join."""
    from mapsmith_opensource import duckdb_spatial

    return duckdb_spatial.connect()


@cache
def _duckdb_versions() -> dict[str, str]:
    import duckdb

    with duckdb_database().cursor() as con:
        row = con.execute(
            "SELECT extension_version FROM duckdb_extensions() WHERE extension_name = 'spatial'"
        ).fetchone()
    return {"duckdb": duckdb.__version__, "duckdb-spatial": str(row[0]) if row else "unknown"}


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _name(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _rows_of(layer: _GeoParquet) -> str:
    """The file's geometry as ``g`` beside its row position ``n``, the CRS dropped (both are equal)."""
    return (
        f"(SELECT {ROW_NUMBER} AS n, {_name(layer.geometry)}::GEOMETRY AS g "
        f"FROM read_parquet({_text(str(layer.path))}, {ROW_NUMBER} = true))"
    )


@dataclass(frozen=True)
class _Scan:
    rows: int
    missing: int  # null or empty
    invalid: int
    types: tuple[str, ...]  # of the present geometries, named and ordered as common.frame_stats does


def _types(found: list[str] | None) -> tuple[str, ...]:
    """DuckDB's type names (POINT, MULTIPOLYGON ...) as common.frame_stats names and orders them."""
    return tuple(name for name in TYPE_NAMES.values() if name.upper() in set(found or ()))


def _scan(con: Any, layer: _GeoParquet) -> _Scan:
    rows, missing, invalid, types = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE g IS NULL OR ST_IsEmpty(g)), "
        "count(*) FILTER (WHERE NOT ST_IsEmpty(g) AND NOT ST_IsValid(g)), "
        f"list(DISTINCT ST_GeometryType(g)) FILTER (WHERE NOT ST_IsEmpty(g)) FROM {_rows_of(layer)}"
    ).fetchone()
    return _Scan(int(rows), int(missing), int(invalid), _types(types))


def _first_invalid(con: Any, layer: _GeoParquet) -> list[tuple[int, str]]:
    """The first invalid rows with GEOS's reason (read back in shapely: DuckDB gives no reason)."""
    import shapely

    found = con.execute(
        f"SELECT n, ST_AsWKB(g) FROM {_rows_of(layer)} WHERE NOT ST_IsEmpty(g) AND NOT ST_IsValid(g) "
        f"ORDER BY n LIMIT {INVALID_REASONS_READ}"
    ).fetchall()
    return [(int(n), str(shapely.is_valid_reason(shapely.from_wkb(bytes(wkb))))) for n, wkb in found]


def _declare_geoparquet(path: Path, source: _GeoParquet) -> int:
    """The rows DuckDB wrote to ``path``, after adding the GeoParquet metadata it leaves out when no
    row has a geometry (an empty join): the geometry column, WKB, no types, and the source's CRS."""
    import json

    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    if b"geo" in (meta.metadata or {}):
        return int(meta.num_rows)
    table = pq.read_table(path)
    column = {"encoding": "WKB", "geometry_types": [], **source.crs}
    geo = {"version": "1.0.0", "primary_column": source.geometry, "columns": {source.geometry: column}}
    pq.write_table(table.replace_schema_metadata({b"geo": json.dumps(geo).encode()}), path)
    return table.num_rows


@dataclass(frozen=True)
class _CrsOnly:
    """A layer known by its CRS alone: all that to_metric reads of a layer it leaves in place."""

    crs: CRS


def _inspect_inputs(con: Any, layers: dict[str, _GeoParquet]) -> dict[str, tuple[_Scan, list[tuple[int, str]]]]:
    """Each input's validity scan, with the first invalid rows and their reasons when there are any."""
    out = {}
    for key, layer in layers.items():
        scan = _scan(con, layer)
        out[key] = (scan, _first_invalid(con, layer) if scan.invalid else [])
    return out


def _spare_name(name: str, taken: list[str]) -> str:
    used = {t.casefold() for t in taken}
    candidate, n = name, 2
    while candidate.casefold() in used:
        candidate, n = f"{name}{n}", n + 1
    return candidate


def spatial_join_duckdb(ctx: RunContext) -> None:
    """spatial_join inside DuckDB, GeoParquet to GeoParquet: no feature passes through Python.

    The join is materialised once, sorted by (input row, join row) as the GeoPandas engine writes it,
    with the same fields, renaming and order; the counts are read from it and it is copied out.
    input_path's geometries are written as read (DuckDB copies WKB byte for byte) and every one was
    found valid, so the runner is told the output holds no invalid geometry instead of re-reading it.
    """
    from concurrent.futures import ThreadPoolExecutor

    import duckdb
    from pyproj import CRS

    from mapsmith.runner import OutputStats

    versions = _duckdb_versions()
    ctx.set_engine("duckdb", versions["duckdb"], **{"duckdb-spatial": versions["duckdb-spatial"]})
    how, predicate = ctx.arguments["how"], ctx.arguments["predicate"]
    layers = {key: _geoparquet(ctx.paths[key], key) for key in ("input_path", "join_path")}
    left, join = layers["input_path"], layers["join_path"]
    crs = CRS.from_wkt(ctx.inputs["input_path"].crs_wkt)
    incoming = [c for c in join.columns if c != join.geometry]
    renamed = _rename_clashes(list(left.columns), incoming, JOIN_SUFFIX)
    names = [*left.columns, *(renamed.get(c, c) for c in incoming)]
    fields = [f"l.{_name(c)}" for c in left.columns] + [
        (f"CAST(r.{_name(c)} AS BIGINT)" if c in join.other_integers else f"r.{_name(c)}")
        + f" AS {_name(renamed.get(c, c))}"
        for c in incoming
    ]
    i, j = (_name(_spare_name(n, names)) for n in ("__input_row", "__join_row"))
    geometries = f"l.{_name(left.geometry)}::GEOMETRY, r.{_name(join.geometry)}::GEOMETRY"
    values: list[float] = []
    if predicate == "within_distance":
        # Eligible only where input_path's CRS is projected and true to scale: planar, in its units.
        values = [ctx.arguments["distance_meters"] / linear_unit_metres(crs)]
        condition = f"{SPATIAL_PREDICATES['dwithin']}({geometries}, ?)"
    else:
        condition = f"{SPATIAL_PREDICATES[predicate]}({geometries})"
    assert ctx.temp_output is not None
    db = duckdb_database()
    con, scanner = db.cursor(), db.cursor()
    try:
        # The validity scans run beside the join, which scans input_path's row groups on its own
        # threads (one thread for a file of one row group); a refusal still comes before any output.
        with ThreadPoolExecutor(max_workers=1) as pool:
            scanning = pool.submit(_inspect_inputs, scanner, layers)
            failure: duckdb.Error | None = None
            try:
                con.execute(
                    f"CREATE TEMP TABLE joined AS SELECT l.{ROW_NUMBER} AS {i}, r.{ROW_NUMBER} AS {j}, "
                    f"{', '.join(fields)} FROM read_parquet({_text(str(left.path))}, {ROW_NUMBER} = true) AS l "
                    f"{'LEFT JOIN' if how == 'left' else 'JOIN'} "
                    f"read_parquet({_text(str(join.path))}, {ROW_NUMBER} = true) AS r ON {condition} "
                    f"ORDER BY {i}, {j}",
                    values,
                )
            except duckdb.Error as exc:  # invalid geometries may be why: their refusal says more
                failure = exc
            inspected = scanning.result()
        for key, (scan, invalid) in inspected.items():
            record_input_validity(
                ctx, key, rows=scan.rows, invalid_count=scan.invalid, missing_count=scan.missing, invalid=invalid
            )
        for key, (scan, invalid) in inspected.items():
            if scan.invalid:
                shown = invalid[:INVALID_ROWS_SHOWN]
                raise invalid_input_error(
                    ctx, key, scan.invalid, [n for n, _ in shown], [r for _, r in shown], UNDEFINED_ON_INVALID
                )
        if failure is not None:
            raise failure
        if predicate == "within_distance":
            metric = to_metric(ctx, _CrsOnly(crs), "measured for within_distance")
            _record_planar(ctx, metric, inspected["input_path"][0].rows)
            ctx.parameters["x-mapsmith:distance_in_analysis_units"] = metric.units(ctx.arguments["distance_meters"])
        else:
            _record_topological(ctx, crs, "join_path", f"the predicate '{predicate}' was evaluated")
        pairs, matched, join_matched = con.execute(
            f"SELECT count({j}), count(DISTINCT {i}) FILTER (WHERE {j} IS NOT NULL), count(DISTINCT {j}) FROM joined"
        ).fetchone()
        scans = {key: scan for key, (scan, _) in inspected.items()}
        tally = _JoinTally(scans["input_path"].rows, scans["join_path"].rows, pairs, matched, join_matched)
        _record_spatial_join(ctx, tally, renamed)
        # The table's rows are read in the order they were inserted: sorted (preserve_insertion_order).
        con.execute(
            f"COPY (SELECT {', '.join(_name(n) for n in names)} FROM joined) "
            f"TO {_text(str(ctx.temp_output))} (FORMAT parquet)"
        )
        types = scans["input_path"].types
        if how == "inner" and (pairs == 0 or len(types) > 1):
            # Only the matched input features are written: their types, not all of input_path's.
            (found,) = con.execute(
                f"SELECT list(DISTINCT ST_GeometryType({_name(left.geometry)})) FROM joined"
            ).fetchone()
            types = _types(found)
    finally:
        con.close()
        scanner.close()
    written = _declare_geoparquet(ctx.temp_output, left)
    _check_written(ctx, tally, written)
    ctx.output_stats = OutputStats(feature_count=written, invalid_count=0, geometry_types=types)


# -- nearest_join -----------------------------------------------------------------------------


def _nearest_candidates(
    ground: _Ground, max_metres: float | None, planar_nearest: PlanarNearest | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(input row, join row) pairs that may be nearest: the planar nearest, and in the geodesic
    case every join feature within GEODESIC_CANDIDATE_SLACK of it. ``planar_nearest`` replaces the
    search for the planar nearest (another engine's); it must give what STRtree.query_nearest gives
    with all_matches=True: every join row at exactly the least distance, within the limit if any."""
    import numpy as np
    import shapely

    geoms = ground.metric.frame.geometry.values
    tree = shapely.STRtree(ground.join.geometry.values)
    limit = ground.search_units(max_metres) if max_metres is not None else None
    if planar_nearest is not None:
        left, right, dist = planar_nearest(geoms, ground.join.geometry.values, limit)
    else:
        (left, right), dist = tree.query_nearest(geoms, max_distance=limit, return_distance=True, all_matches=True)
    if not ground.geodesic or len(left) == 0:
        return left, right
    firsts = np.unique(left)
    nearest = np.full(len(geoms), np.inf)
    np.minimum.at(nearest, left, dist)
    radius = nearest[firsts] * (1 + GEODESIC_CANDIDATE_SLACK) + ground.metric.units(TIE_TOLERANCE_METRES)
    q_left, right = tree.query(geoms[firsts], predicate="dwithin", distance=radius)
    return firsts[q_left], right


def nearest_join(ctx: RunContext, planar_nearest: PlanarNearest | None = None) -> None:
    """``planar_nearest``: another engine's search for the planar nearest (sedonadb_ops); the rest is this code."""
    import numpy as np

    if planar_nearest is None:
        set_engine(ctx)
    left = read_input(ctx)
    join = read_input(ctx, "join_path")
    _refuse_existing(ctx, left, ["distance_m"])
    join = align_to(ctx, join, left.crs, "join_path")
    max_m = ctx.arguments.get("max_distance_meters")
    ground = _ground(ctx, left, join, "measured for nearest neighbours")
    n_left, n_join = len(left), len(join)
    if n_left and n_join:
        cand_left, cand_right = _nearest_candidates(ground, max_m, planar_nearest)
        dist = ground.metres(cand_left, cand_right)
    else:
        cand_left = cand_right = np.zeros(0, dtype=np.int64)
        dist = np.zeros(0)
    # Ties: every candidate within TIE_TOLERANCE_METRES of the nearest; the first join row wins.
    nearest = np.full(n_left, np.inf)
    np.minimum.at(nearest, cand_left, dist)
    near = dist <= nearest[cand_left] + TIE_TOLERANCE_METRES
    cand_left, cand_right, dist = cand_left[near], cand_right[near], dist[near]
    tied = int((np.bincount(cand_left, minlength=n_left) > 1).sum())
    order = np.lexsort((cand_right, cand_left))
    chosen_left, first = np.unique(cand_left[order], return_index=True)
    chosen_right, chosen_dist = cand_right[order][first], dist[order][first]
    beyond = 0
    if max_m is not None:
        within = chosen_dist <= max_m
        beyond = int((~within).sum())  # geodesic: found within the widened search, but farther
        chosen_left, chosen_right, chosen_dist = chosen_left[within], chosen_right[within], chosen_dist[within]
    right = np.full(n_left, -1, dtype=np.int64)
    right[chosen_left] = chosen_right
    distance = np.full(n_left, np.nan)
    distance[chosen_left] = chosen_dist
    out, renamed = _attach(left, _attributes(join), np.arange(n_left), right, JOIN_SUFFIX)
    out["distance_m"] = distance
    unmatched = n_left - len(chosen_left)
    counts = {
        "input_features": n_left,
        "join_features": n_join,
        "input_features_matched": len(chosen_left),
        "input_features_unmatched": unmatched,
        "input_features_with_tied_nearest": tied,
        "join_features_used": len(np.unique(chosen_right)),
    }
    if max_m is not None:
        counts["nearest_beyond_max_distance"] = beyond
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    ctx.parameters["x-mapsmith:tie_rule"] = TIE_RULE
    why_unmatched = (
        f"no join feature within {max_m} m, or no geometry" if max_m is not None else "no geometry, or no join features"
    )
    ctx.notes.append(
        f"{len(chosen_left)} of {n_left} input features got their nearest join feature; {unmatched} got none "
        f"({why_unmatched}) and were kept with empty join fields and distance_m; {tied} had several equally "
        "near join features (" + TIE_RULE + ")" + (f"; join fields renamed: {renamed}" if renamed else "")
    )
    limit = max_m if max_m is not None else float("inf")
    ctx.check(
        "values_in_expected_range",
        bool(np.all((chosen_dist >= 0) & (chosen_dist <= limit))),
        f"{len(chosen_dist)} distances, between {chosen_dist.min() if len(chosen_dist) else 0:.3f} and "
        f"{chosen_dist.max() if len(chosen_dist) else 0:.3f} m; allowed 0 to {limit} m",
    )
    ctx.answer = {
        **counts,
        "distance_method": ctx.parameters["x-mapsmith:distance_method"],
        "tie_rule": TIE_RULE,
        "distance_m": {
            "min": float(chosen_dist.min()) if len(chosen_dist) else None,
            "max": float(chosen_dist.max()) if len(chosen_dist) else None,
            "mean": float(chosen_dist.mean()) if len(chosen_dist) else None,
        },
        "renamed_fields": renamed,
    }
    write_output(ctx, out)


# -- count_in_polygons / summarize_points_in_polygons -----------------------------------------


@dataclass
class _PointsInPolygons:
    polygons: gpd.GeoDataFrame
    points: gpd.GeoDataFrame  # in the polygons' CRS
    polygon_rows: np.ndarray  # one entry per (polygon, point) pair
    point_rows: np.ndarray
    counts: dict[str, int]


def intersecting_pairs(polygons: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(polygon row, point row) for every point that intersects a polygon, found with a GEOS STRtree.

    The GeoPandas engine's pair finder; another engine (sedonadb_ops) passes its own, and everything
    before and after the pairs (reading, checks, counts, statistics, writing) stays this module's.
    """
    import shapely

    tree = shapely.STRtree(points)
    return tree.query(polygons, predicate="intersects")


def _points_in_polygons(
    ctx: RunContext,
    new_fields: list[str],
    value_field: str | None = None,
    find_pairs: PairFinder = intersecting_pairs,
) -> _PointsInPolygons:
    import numpy as np
    import shapely

    polygons = read_input(ctx)
    points = read_input(ctx, "points_path")
    if value_field is not None:
        _numeric_field(ctx, points, value_field, "points_path")
    _refuse_existing(ctx, polygons, new_fields)
    require_valid(ctx, polygons, "input_path", UNDEFINED_ON_INVALID)
    points = align_to(ctx, points, polygons.crs, "points_path")
    _record_topological(ctx, polygons.crs, "points_path", "points were tested against polygons")
    poly_rows, point_rows = find_pairs(polygons.geometry.values, points.geometry.values)
    times = np.bincount(point_rows, minlength=len(points))
    no_geometry = int((shapely.is_missing(points.geometry.values) | shapely.is_empty(points.geometry.values)).sum())
    counts = {
        "polygons": len(polygons),
        "points": len(points),
        "points_counted": int((times > 0).sum()),
        "points_in_no_polygon": int((times == 0).sum()),
        "points_without_geometry": no_geometry,
        "points_in_several_polygons": int((times > 1).sum()),
        "polygons_with_no_points": int((np.bincount(poly_rows, minlength=len(polygons)) == 0).sum()),
    }
    ctx.parameters["x-mapsmith:boundary_rule"] = BOUNDARY_RULE
    ctx.notes.append(
        f"{counts['points_counted']} of {len(points)} points lie in at least one polygon; "
        f"{counts['points_in_no_polygon']} lie in none (not counted anywhere; {no_geometry} of them have no "
        f"geometry); {counts['points_in_several_polygons']} lie on a boundary several polygons share and "
        "are counted in each of them"
    )
    return _PointsInPolygons(polygons, points, poly_rows, point_rows, counts)


def count_in_polygons(ctx: RunContext, find_pairs: PairFinder = intersecting_pairs) -> None:
    import numpy as np

    if find_pairs is intersecting_pairs:
        set_engine(ctx)
    found = _points_in_polygons(ctx, ["point_count"], find_pairs=find_pairs)
    out = found.polygons.copy()
    out["point_count"] = np.bincount(found.polygon_rows, minlength=len(out)).astype("int64")
    ctx.parameters["x-mapsmith:join_counts"] = found.counts
    rows, window = _rows(out, ctx.arguments)
    ctx.answer = {
        **found.counts,
        "total_point_count": int(out["point_count"].sum()),
        "boundary_rule": BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }
    write_output(ctx, out)


def _parse_statistics(text: str) -> list[str]:
    wanted = [s.strip().lower() for s in text.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STATISTICS]
    if unknown or not wanted:
        raise ArgumentError(
            f"summarize_points_in_polygons: statistics must list some of {list(STATISTICS)}, got {text!r}",
            code="ARGUMENT_NOT_IN_CHOICES",
            evidence={"argument": "statistics", "value": text, "unknown": unknown, "accepted": list(STATISTICS)},
            hint=f"pass a comma-separated list such as 'mean,sum' drawn from {', '.join(STATISTICS)}",
        )
    return list(dict.fromkeys(wanted))  # in the order given, once each


def validate_summarize_points(ctx: RunContext) -> None:
    """The statistics list names known statistics (before any file is read)."""
    _parse_statistics(ctx.arguments["statistics"])


def summarize_points_in_polygons(ctx: RunContext, find_pairs: PairFinder = intersecting_pairs) -> None:
    import numpy as np

    if find_pairs is intersecting_pairs:
        set_engine(ctx)
    name = ctx.arguments["field"]
    statistics = _parse_statistics(ctx.arguments["statistics"])
    ctx.parameters["statistics"] = ",".join(statistics)
    columns = {s: f"{name}_{s}" for s in statistics}
    null_column = f"{name}_null_count"
    found = _points_in_polygons(ctx, [*columns.values(), null_column], value_field=name, find_pairs=find_pairs)
    values = found.points[name].to_numpy(dtype=float, na_value=np.nan)[found.point_rows]
    null_points = int(found.points[name].isna().sum())
    finish_summary(ctx, found.polygons, found.polygon_rows, values, null_points, found.counts)


def finish_summary(
    ctx: RunContext,
    polygons: gpd.GeoDataFrame,
    polygon_rows: np.ndarray,
    values: np.ndarray,
    null_points: int,
    counts: dict[str, int],
) -> None:
    """summarize_points_in_polygons from its (polygon row, value) pairs, whichever engine found them:
    the statistics per polygon, nulls left out and counted, the records, the answer, the output."""
    import numpy as np
    import pandas as pd

    name = ctx.arguments["field"]
    statistics = _parse_statistics(ctx.arguments["statistics"])
    columns = {s: f"{name}_{s}" for s in statistics}
    null_column = f"{name}_null_count"
    present = ~np.isnan(values)
    n = len(polygons)
    grouped = (
        pd.DataFrame({"polygon": polygon_rows[present], "value": values[present]})
        .groupby("polygon")["value"]
        .agg(list(STATISTICS))
        .reindex(range(n))
    )
    out = polygons.copy()
    for statistic, column in columns.items():
        series = grouped[statistic]
        if statistic in ("sum", "count"):
            series = series.fillna(0)  # over no values: the empty sum and count
        out[column] = series.astype("int64" if statistic == "count" else float).to_numpy()
    out[null_column] = np.bincount(polygon_rows[~present], minlength=n).astype("int64")
    counted_nulls = int((~present).sum())
    counts = {**counts, "points_with_null_value": null_points, "null_values_in_polygons": counted_nulls}
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.notes.append(
        f"null values of {name!r} are left out of every statistic ({', '.join(statistics)}) and counted per "
        f"polygon in {null_column}; {null_points} points have no value; over no values sum and count are 0 "
        "and mean, min and max are empty"
    )
    if counted_nulls:
        ctx.warn(
            "NULL_VALUES_EXCLUDED",
            f"{counted_nulls} (polygon, point) pairs had no value of {name!r} and were left out of the statistics",
            f"see {null_column} per polygon; fill the missing values first if they should count",
        )
    rows, window = _rows(out, ctx.arguments)
    ctx.answer = {
        **counts,
        "field": name,
        "statistics": statistics,
        "boundary_rule": BOUNDARY_RULE,
        "rows": rows,
        "page": window,
    }
    write_output(ctx, out)


# -- apportion_by_area ------------------------------------------------------------------------


def apportion_by_area(ctx: RunContext) -> None:
    import numpy as np
    import shapely

    set_engine(ctx)
    name = ctx.arguments["field"]
    kind = ctx.arguments["quantity_type"]
    targets = read_input(ctx)
    sources = read_input(ctx, "source_path")
    values = _numeric_field(ctx, sources, name, "source_path").to_numpy(dtype=float, na_value=np.nan)
    value_column, coverage_column = f"{name}_apportioned", "source_coverage"
    _refuse_existing(ctx, targets, [value_column, coverage_column])
    require_valid(ctx, targets, "input_path", UNDEFINED_ON_INVALID)
    require_valid(ctx, sources, "source_path", UNDEFINED_ON_INVALID)
    sources = align_to(ctx, sources, targets.crs, "source_path")
    crs = targets.crs
    ellipsoid = crs.ellipsoid.name if crs.ellipsoid else "unknown"
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs.geodetic_crs if not crs.is_geographic else crs),
            "reason": f"overlaps were cut in input_path's CRS ({crs_label(crs)}) and every area (targets, sources, "
            f"overlaps) measured geodesically on the {ellipsoid} ellipsoid of its datum, never as planar "
            "area" + _aligned(ctx, "source_path"),
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    source_area = _geodesic_areas(sources.geometry.values, crs)
    target_area = _geodesic_areas(targets.geometry.values, crs)
    usable = ~np.isnan(values) & (source_area > 0)
    tree = shapely.STRtree(sources.geometry.values)
    t_rows, s_rows = tree.query(targets.geometry.values, predicate="intersects")
    keep = usable[s_rows]
    t_rows, s_rows = t_rows[keep], s_rows[keep]
    overlap = _geodesic_areas(
        shapely.intersection(targets.geometry.values[t_rows], sources.geometry.values[s_rows]), crs
    )
    n = len(targets)
    covered = np.bincount(t_rows, weights=overlap, minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        coverage = np.where(target_area > 0, covered / target_area, np.nan)
        if kind == "extensive":
            share = values[s_rows] * overlap / source_area[s_rows]
            result = np.bincount(t_rows, weights=share, minlength=n)
        else:
            result = np.bincount(t_rows, weights=values[s_rows] * overlap, minlength=n) / covered
    result = np.where(covered > 0, result, np.nan)  # no source with a value overlaps: unknown, not zero
    out = targets.copy()
    out[value_column] = result
    out[coverage_column] = coverage
    full = coverage >= 1 - COVERAGE_TOLERANCE
    counts: dict[str, Any] = {
        "targets": n,
        "sources": len(sources),
        "sources_with_null_value": int(np.isnan(values).sum()),
        "sources_with_zero_area": int((~np.isnan(values) & (source_area <= 0)).sum()),
        "overlapping_pairs": int((overlap > 0).sum()),
        "targets_fully_covered": int(full.sum()),
        "targets_partly_covered": int(((covered > 0) & ~full).sum()),
        "targets_not_covered": int((covered <= 0).sum()),
    }
    ctx.notes.append(
        f"{kind} quantity: "
        + (
            "each source's value was spread evenly over its own ground area and each target received "
            "value x overlap area / source area, summed over sources"
            if kind == "extensive"
            else "each target received the mean of the sources' values weighted by overlap area, over the "
            "part of the target that sources with a value cover (source_coverage); the uncovered part does "
            "not enter the mean"
        )
        + f"; {counts['targets_not_covered']} targets overlap no source with a value and get an empty "
        f"{value_column}; {counts['sources_with_null_value']} sources with a null {name!r} and "
        f"{counts['sources_with_zero_area']} of zero area were left out"
    )
    if counts["sources_with_null_value"]:
        ctx.warn(
            "NULL_VALUES_EXCLUDED",
            f"{counts['sources_with_null_value']} source zones have no value of {name!r} and were left out; "
            "the target areas they cover count as uncovered",
            "fill the missing values first if they should count; source_coverage shows what was covered",
        )
    allocated_share = np.bincount(s_rows, weights=overlap, minlength=len(sources))
    with np.errstate(divide="ignore", invalid="ignore"):
        allocated_share = np.where(source_area > 0, allocated_share / source_area, 0.0)
    if kind == "extensive":
        total = float(values[usable].sum())
        allocated = float(np.nansum(result))
        not_allocated = float((values[usable] * (1 - np.minimum(allocated_share[usable], 1.0))).sum())
        over = int((allocated_share[usable] > 1 + COVERAGE_TOLERANCE).sum())
        counts.update(
            {"quantity_total": total, "quantity_allocated": allocated, "quantity_not_allocated": not_allocated}
        )
        ctx.check(
            "x-mapsmith:quantity_conserved",
            over == 0 and abs(allocated + not_allocated - total) <= 1e-9 * max(abs(total), 1.0),
            f"sources with a value hold {total:.6g}; {allocated:.6g} went to targets and {not_allocated:.6g} lies "
            f"outside every target; {over} sources gave out more than their total (overlapping targets)",
            critical=False,
        )
        if over:
            ctx.warn(
                "TARGETS_OVERLAP",
                f"target zones overlap each other inside {over} source zones, so those sources' quantity is "
                "counted in more than one target (each target's own value is still right)",
                "do not add the target values up; dissolve or clip the targets so they do not overlap first",
            )
    else:
        low, high = (float(values[usable].min()), float(values[usable].max())) if usable.any() else (0.0, 0.0)
        got = result[~np.isnan(result)]
        span = max(abs(low), abs(high), 1.0) * 1e-9
        ctx.check(
            "values_in_expected_range",
            bool(np.all((got >= low - span) & (got <= high + span))),
            f"{len(got)} area-weighted means between {got.min() if len(got) else 0:.6g} and "
            f"{got.max() if len(got) else 0:.6g}; a weighted mean must lie within the source values "
            f"{low:.6g} to {high:.6g}",
        )
        doubled = int((coverage > 1 + COVERAGE_TOLERANCE).sum())
        counts["targets_covered_more_than_once"] = doubled
        if doubled:
            ctx.warn(
                "SOURCES_OVERLAP",
                f"source zones overlap each other inside {doubled} targets, so the doubly covered area weighs "
                "twice in their means (source_coverage above 1)",
                "make the source zones a partition (no overlaps) first",
            )
    ctx.parameters["x-mapsmith:join_counts"] = counts
    rows, window = _rows(out, ctx.arguments)
    ctx.answer = {
        **counts,
        "field": name,
        "quantity_type": kind,
        "rows": rows,
        "page": window,
    }
    write_output(ctx, out)


# -- join_attributes --------------------------------------------------------------------------


def _read_table(ctx: RunContext) -> pd.DataFrame:
    import pandas as pd
    import pyogrio

    path, layer = ctx.paths["table_path"], ctx.layers.get("table_path")
    key = ctx.arguments["table_key"]
    if io.is_parquet(path):
        return _attributes(io.read_layer(path))
    try:
        table = pyogrio.read_dataframe(io.vector_source(path)[0], layer=layer, read_geometry=False)
        if key not in table.columns and path.suffix.lower() in (".xlsx", ".ods"):
            # GDAL takes the first row as a header only when its cells differ in type from the next
            # row's; a sheet of text cells reads as Field1, Field2 ... The first row naming the key
            # is the evidence that it is a header.
            forced = pyogrio.read_dataframe(
                io.vector_source(path)[0], layer=layer, read_geometry=False, HEADERS="FORCE"
            )
            if key in forced.columns:
                ctx.notes.append(
                    "GDAL did not detect the header row of table_path (its cells are all text); it was read "
                    f"with HEADERS=FORCE because the first row names table_key {key!r}"
                )
                table = forced
    except Exception as exc:
        raise InputError(
            f"cannot read {_given(ctx, 'table_path')} as a table: {exc}",
            code="INPUT_UNREADABLE",
            evidence={"argument": "table_path", "path": _given(ctx, "table_path"), "engine_message": str(exc)},
            hint="pass a CSV, XLSX, ODS or GeoPackage attribute table",
        ) from exc
    info = ctx.inputs.get("table_path")
    if info is not None and info.kind == "vector":
        ctx.notes.append("table_path has geometries; only its attributes were read")
    if info is not None and info.driver == "CSV":
        ctx.notes.append("GDAL reads every CSV column as text, so the table's columns are written as text")
    return pd.DataFrame(table)


def _key_type(values: pd.Series) -> str:
    from pandas.api import types

    if types.is_bool_dtype(values):
        return "other"
    if types.is_integer_dtype(values):
        return "integer"
    if types.is_float_dtype(values):
        return "decimal"
    present = values.dropna()
    if types.is_string_dtype(values) and all(isinstance(v, str) for v in present):
        return "text"
    return "other"


def _not_whole(values: pd.Series) -> list[Any]:
    """Values of a decimal key that are not whole numbers written exactly (empty: all are)."""
    import numpy as np

    present = values.dropna().to_numpy(dtype=float)
    bad = ~np.isfinite(present) | (present != np.floor(present)) | (np.abs(present) > MAX_EXACT_INTEGER)
    return [float(v) for v in present[bad]]


def _not_canonical(values: pd.Series) -> list[str]:
    """Text codes that are not a whole number's canonical digits ("0123", " 12", "12a")."""
    import re

    canonical = re.compile(r"0|-?[1-9][0-9]*")
    return [v for v in values.dropna() if not canonical.fullmatch(v)]


def _normalise_keys(ctx: RunContext, left: pd.Series, right: pd.Series) -> tuple[pd.Series, pd.Series, dict[str, Any]]:
    """The keys as compared, and the record of what was done to them: numbers against text are
    turned into text only when no two keys could become one and no digit is lost."""
    left_type, right_type = _key_type(left), _key_type(right)
    record: dict[str, Any] = {"applied": False, "input_key_type": left_type, "table_key_type": right_type}
    numeric = {"integer", "decimal"}
    if {left_type, right_type} & numeric and "text" in (left_type, right_type):
        number_side = "input_path" if left_type in numeric else "table_path"
        numbers, texts = (left, right) if number_side == "input_path" else (right, left)
        number_type = left_type if number_side == "input_path" else right_type
        fractional = _not_whole(numbers) if number_type == "decimal" else []
        odd_texts = _not_canonical(texts)
        if fractional or odd_texts:
            record["reason"] = (
                "numbers against text were not normalised, because it would not be lossless: "
                + "; ".join(
                    part
                    for part in (
                        f"{len(fractional)} numbers are not whole or not exact" if fractional else "",
                        f"{len(odd_texts)} text codes are not plain digits (leading zeros, spaces, letters), so "
                        "a number could not give them back"
                        if odd_texts
                        else "",
                    )
                    if part
                )
            )
            record["blocking_values"] = [_plain(v) for v in (fractional + odd_texts)[:5]]
            ctx.warn(
                "KEY_TYPES_DIFFER",
                f"input_key is {left_type} and table_key is {right_type}, and converting one to the other would "
                f"lose information ({record['blocking_values']}), so no key of one type matches the other",
                "store both keys as text with the same formatting (e.g. keep leading zeros in both), then join again",
            )
            return left, right, record
        as_text = numbers.map(lambda v: str(int(v)), na_action="ignore")
        record.update(
            {
                "applied": True,
                "converted": number_side,
                "rule": f"{number_type} keys of {number_side} were compared as the text of their whole number "
                "(310101.0 as '310101'): every one is whole and exact, and every text code is plain digits "
                "without a leading zero, so the conversion loses nothing and merges no two keys",
            }
        )
        ctx.notes.append(
            f"key normalisation: {record['rule']}; the output keeps input_key's own values and type unchanged"
        )
        return (as_text, right, record) if number_side == "input_path" else (left, as_text, record)
    record["reason"] = (
        f"keys compared as read ({left_type} against {right_type})"
        if left_type == right_type or {left_type, right_type} <= numeric
        else f"keys compared as read ({left_type} against {right_type}); no conversion between these types is attempted"
    )
    return left, right, record


def join_attributes(ctx: RunContext) -> None:
    import numpy as np
    import pandas as pd

    set_engine(ctx)
    left = read_input(ctx)
    table = _read_table(ctx)
    input_key, table_key = ctx.arguments["input_key"], ctx.arguments["table_key"]
    if input_key not in left.columns or input_key == left.geometry.name:
        raise _field_not_found(
            ctx, "input_key", "input_path", input_key, [str(c) for c in left.columns if c != left.geometry.name]
        )
    if table_key not in table.columns:
        raise _field_not_found(ctx, "table_key", "table_path", table_key, [str(c) for c in table.columns])
    left_keys, table_keys, normalisation = _normalise_keys(ctx, left[input_key], table[table_key])
    ctx.parameters["x-mapsmith:key_normalisation"] = normalisation
    present = table_keys.notna()
    repeated = table_keys[present].value_counts()
    repeated = repeated[repeated > 1]
    if len(repeated):
        raise InputError(
            f"table_key {table_key!r} is not unique in {_given(ctx, 'table_path')}: {len(repeated)} keys occur on "
            "several rows, so a feature would match several rows",
            code="TABLE_KEY_NOT_UNIQUE",
            evidence={
                "argument": "table_key",
                "field": table_key,
                "path": _given(ctx, "table_path"),
                "duplicate_keys": {str(k): int(v) for k, v in repeated.head(UNMATCHED_KEYS_SHOWN).items()},
            },
            hint="aggregate the table to one row per key (or remove the duplicate rows) first; join_attributes "
            "writes one row per input feature and will not pick one of several rows",
        )
    index = pd.Index(table_keys[present].to_numpy(dtype=object))
    positions = np.flatnonzero(present.to_numpy())
    found = index.get_indexer(left_keys.to_numpy(dtype=object))
    left_null = left_keys.isna().to_numpy()  # missing keys: the index holds none, so they match nothing
    right = np.where(found >= 0, positions[np.maximum(found, 0)], -1)
    attrs = table.drop(columns=[table_key])
    out, renamed = _attach(left, attrs, np.arange(len(left)), right, TABLE_SUFFIX)
    unmatched_left = (~left_null) & (right < 0)
    used = np.zeros(len(table), dtype=bool)
    used[right[right >= 0]] = True
    unmatched_table = present.to_numpy() & ~used
    counts: dict[str, Any] = {
        "input_features": len(left),
        "table_rows": len(table),
        "input_features_matched": int((right >= 0).sum()),
        "input_features_unmatched": int(unmatched_left.sum()),
        "input_features_without_key": int(left_null.sum()),
        "table_rows_matched": int(used.sum()),
        "table_rows_unmatched": int(unmatched_table.sum()),
        "table_rows_without_key": int((~present).sum()),
        "input_unmatched_keys": [
            _plain(v) for v in pd.unique(left[input_key][unmatched_left].to_numpy())[:UNMATCHED_KEYS_SHOWN]
        ],
        "table_unmatched_keys": [
            _plain(v) for v in pd.unique(table[table_key][unmatched_table].to_numpy())[:UNMATCHED_KEYS_SHOWN]
        ],
    }
    ctx.parameters["x-mapsmith:join_counts"] = counts
    ctx.parameters["x-mapsmith:renamed_fields"] = renamed
    summary = (
        f"{counts['input_features_matched']} of {len(left)} input features matched a table row; "
        f"{counts['input_features_unmatched']} have a key the table lacks (first: {counts['input_unmatched_keys']}) "
        f"and {counts['input_features_without_key']} have no key, all kept with empty table fields; "
        f"{counts['table_rows_unmatched']} of {len(table)} table rows matched no feature (first: "
        f"{counts['table_unmatched_keys']}) and {counts['table_rows_without_key']} have no key"
    )
    ctx.notes.append(summary + (f"; table fields renamed: {renamed}" if renamed else ""))
    ctx.check(
        "x-mapsmith:keys_matched",
        counts["input_features_unmatched"] + counts["input_features_without_key"] == 0,
        summary,
        critical=False,
    )
    if counts["input_features_unmatched"] or counts["input_features_without_key"]:
        ctx.warn(
            "UNMATCHED_KEYS",
            f"{counts['input_features_unmatched'] + counts['input_features_without_key']} of {len(left)} input "
            f"features found no table row (first keys: {counts['input_unmatched_keys']}); table keys that matched "
            f"nothing: {counts['table_unmatched_keys']}",
            "compare the unmatched keys of both sides: leading zeros, spaces, or numbers stored as text are the "
            "usual causes",
        )
    ctx.answer = {**counts, "key_normalisation": normalisation, "renamed_fields": renamed}
    write_output(ctx, out)
