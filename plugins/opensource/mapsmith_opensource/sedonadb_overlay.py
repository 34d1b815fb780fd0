"""dissolve_layer and overlay_layers (how='intersection') on SedonaDB: it unions each group, or finds
the intersecting pairs and their pieces; everything else is dissolve_ops' or overlay_ops' code. An intersection of
two GeoParquet files into one runs file to file instead (``sedonadb_overlay_files``), no layer read into Python. It must
never import sedonadb when imported, nor take a run with an argument it has not been checked to give as
the GeoPandas engine does (DISSOLVE_FUNCTIONS: the run goes to GeoPandas, with the reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith_opensource import dissolve_ops, overlay_ops
from mapsmith_opensource.common import engine_versions
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.sedonadb_ops import (
    DISSOLVE_MIN_FEATURES,
    ENGINE,
    OVERLAY_FILE_MIN_FEATURES,
    OVERLAY_MIN_FEATURES,
    SEDONADB_FIX,
    SEDONADB_PREFERENCE,
    WKB_PATH_NOTE,
    _connection,
    _eligible,
    _geometry_views,
    _set_engine,
    _too_small,
    missing_modules,
    size_reason,
)

if TYPE_CHECKING:
    import geopandas as gpd
    import numpy as np

    from mapsmith.runner import RunContext


REGISTRATIONS = (
    Registration(
        "dissolve_layer",
        "dissolve_layer_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="dissolve_layer_eligible",
    ),
    Registration(
        "overlay_layers",
        "overlay_layers_sedonadb",
        engine=ENGINE,
        preference=SEDONADB_PREFERENCE,
        eligible="overlay_layers_eligible",
    ),
)


# -- dissolve_layer, groups unioned by SedonaDB --------------------------------------------------

UNION_LABEL = "SedonaDB's ST_UnaryUnion (GEOS's unary union, as shapely.union_all)"
DISSOLVE_PATH_NOTE = (
    "engine path: WKB -- the GeoPandas engine's code read, checked, grouped, aggregated and wrote the layer; "
    "SedonaDB unioned each group's geometries, handed to it as one GEOMETRYCOLLECTION per group in input order, "
    "with ST_UnaryUnion (GEOS's unary union, the call shapely.union_all makes, so the vertices come out as "
    "GeoPandas gives them). ST_Union_Agg is not used: it is not GEOS, and it moves vertices by up to a few "
    "millimetres over a 1,000 km extent, drops collinear nodes and returns nothing for lines and points"
)


# The aggregation functions whose values this engine is known to give as the GeoPandas engine does:
# dissolve_ops' own code computes them on this path too (SedonaDB only unions the geometries), and
# tests/vector/test_engine_parity.py and test_joins_sedonadb_dissolve.py compare the two. A function
# dissolve_ops learns later is not assumed to work here: the run goes to GeoPandas, with the reason,
# until it is added to this list with a test.
DISSOLVE_FUNCTIONS = frozenset(
    {"sum", "mean", "median", "min", "max", "first", "last", "count", "weighted_mean", "ratio"}
)


def _unchecked_functions(ctx: RunContext) -> list[str]:
    """The aggregation functions of this run outside DISSOLVE_FUNCTIONS, as dissolve_ops parses them."""
    from mapsmith.errors import ArgumentError

    try:
        items = dissolve_ops._split_list("aggregations", ctx.arguments.get("aggregations"))
        functions = {dissolve_ops._parse_item(item).function for item in items}
    except ArgumentError:
        return []  # the operation's own code refuses the argument, on whichever engine runs
    return sorted(functions - DISSOLVE_FUNCTIONS)


def dissolve_layer_eligible(ctx: RunContext) -> str | None:
    """Why SedonaDB cannot take this dissolve (union hook? installed? CRS known? every aggregation
    known to this engine? big enough?), or None."""
    if not hasattr(dissolve_ops, "_dissolve_with"):  # a dissolve_ops without the union hook this engine calls
        return "this dissolve_ops has no union hook (dissolve_layer(union_groups=...)) for the SedonaDB engine to use"
    unchecked = _unchecked_functions(ctx)
    if unchecked:
        return (
            f"aggregations uses {', '.join(unchecked)}, which the SedonaDB dissolve engine has not been checked "
            f"against GeoPandas with (it takes {', '.join(sorted(DISSOLVE_FUNCTIONS))})"
        )
    missing = missing_modules()
    if missing:
        return f"SedonaDB is not installed here (missing: {', '.join(missing)}); fix: {SEDONADB_FIX}"
    info = ctx.inputs["input_path"]
    if info.crs_wkt is None:
        return "the CRS of input_path is unknown; the SedonaDB engine dissolves only layers whose CRS is known"
    if info.feature_count is None:
        return "the feature count is unknown from the input's header, so the size threshold cannot be applied"
    return _too_small(ctx, info.feature_count, DISSOLVE_MIN_FEATURES, "SedonaDB's dissolve")


def sedonadb_union_groups(geoms: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """The union of each group (0 .. count-1) of ``geoms``, by SedonaDB, as shapely.union_all gives it.

    Each group goes to SedonaDB as one collection of its geometries in input order (shapely.union_all
    unions such a collection; None is left out of it, and a group with none is an empty collection).
    """

    import numpy as np
    import shapely

    out = np.empty(count, dtype=object)
    if count == 0:
        return out
    geoms = np.asarray(geoms, dtype=object)
    order = np.argsort(groups, kind="stable")  # within a group, input order
    present = order[~shapely.is_missing(geoms[order])]
    collections = np.empty(count, dtype=object)
    if len(present):
        shapely.geometrycollections(geoms[present], indices=groups[present], out=collections)
    collections[shapely.is_missing(collections)] = shapely.GeometryCollection()
    with _geometry_views(collections) as (view,):
        found = _connection().sql(f"SELECT n, ST_AsBinary(ST_UnaryUnion(g)) AS u FROM {view}").to_arrow_table()
    out[found.column("n").to_numpy()] = shapely.from_wkb(found.column("u").to_numpy(zero_copy_only=False))
    return out


def dissolve_layer_sedonadb(ctx: RunContext) -> None:
    """dissolve_layer with each group's union done by SedonaDB; everything else is dissolve_ops' code."""
    from importlib import metadata

    import sedonadb

    info = ctx.inputs["input_path"]
    ctx.notes.append(
        f"engine: SedonaDB ran because it is installed, input_path's CRS ({info.crs_label}) is known, and it has "
        f"{info.feature_count or 0:,} features, {size_reason(ctx, DISSOLVE_MIN_FEATURES, 'GeoPandas')}"
    )
    ctx.set_engine(ENGINE, sedonadb.__version__, **{"geoarrow-pyarrow": metadata.version("geoarrow-pyarrow")})
    ctx.engine_components.update(engine_versions())
    ctx.notes.append(DISSOLVE_PATH_NOTE)
    dissolve_ops.dissolve_layer(ctx, union_groups=sedonadb_union_groups, union_label=UNION_LABEL)


# -- overlay_layers (how='intersection'): pairs and pieces by SedonaDB ---------------------------

OVERLAY_LABEL = "SedonaDB (ST_Intersects join, ST_Intersection per pair)"


def overlay_layers_eligible(ctx: RunContext) -> str | None:
    """Why SedonaDB cannot take this overlay (the intersection only; installed? one known CRS? asked for?)."""
    how = ctx.arguments.get("how")
    if how != "intersection":
        return (
            f"how={how!r}: SedonaDB's overlay engine does the intersection only; the other modes' pieces "
            "(differences of each polygon with everything it meets) are geopandas.overlay's"
        )
    if _file_path(ctx):
        return _eligible(
            ctx, ("input_path", "overlay_path"), OVERLAY_FILE_MIN_FEATURES, "SedonaDB's overlay file to file"
        )
    return _eligible(ctx, ("input_path", "overlay_path"), OVERLAY_MIN_FEATURES, "SedonaDB's overlay")


def _file_path(ctx: RunContext) -> bool:
    """Whether this run's intersection would take the file-to-file path (its own, lower threshold applies)."""
    from mapsmith_opensource.sedonadb_overlay_files import files_problem

    return files_problem(ctx)[1] is None


def sedonadb_intersections(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left row, right row, their intersection) for every intersecting pair, sorted by both rows."""

    import numpy as np
    import shapely

    if len(left) == 0 or len(right) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.empty(0, dtype=object)
    with _geometry_views(left, right) as (lv, rv):
        found = (
            _connection()
            .sql(
                f"SELECT l.n AS i, r.n AS j, ST_AsBinary(ST_Intersection(l.g, r.g)) AS x "
                f"FROM {lv} AS l JOIN {rv} AS r ON ST_Intersects(l.g, r.g)"
            )
            .to_arrow_table()
        )
    i = found.column("i").to_numpy().astype(np.int64)
    j = found.column("j").to_numpy().astype(np.int64)
    pieces = shapely.from_wkb(found.column("x").to_numpy(zero_copy_only=False))
    order = np.lexsort((j, i))  # the order of geopandas' sorted index query: input row, then overlay row
    return i[order], j[order], pieces[order]


def sedonadb_overlay_intersection(first: gpd.GeoDataFrame, second: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """geopandas.overlay(first, second, how="intersection", keep_geom_type=False) with the pair search and
    the intersections done by SedonaDB: the same pieces in the same order, fields suffixed _1/_2 where the
    layers share a name, the geometry column last. The inputs are valid (overlay_layers refuses others)."""
    import geopandas as gpd
    import numpy as np
    import pandas as pd
    import shapely

    a, b = first.total_bounds, second.total_bounds
    boxes_meet = a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]
    if boxes_meet:
        i, j, pieces = sedonadb_intersections(first.geometry.values, second.geometry.values)
    else:
        i, j, pieces = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.empty(0, dtype=object)
    polygonal = np.isin(shapely.get_type_id(pieces), (3, 6))  # Polygon, MultiPolygon
    pieces[polygonal] = shapely.make_valid(pieces[polygonal])  # as geopandas does to polygonal pieces
    left = first.drop(columns=first.geometry.name).reset_index(drop=True).take(i).reset_index(drop=True)
    right = second.drop(columns=second.geometry.name).reset_index(drop=True).take(j).reset_index(drop=True)
    shared = set(left.columns) & set(right.columns)
    left = left.rename(columns={c: f"{c}_1" for c in shared})
    right = right.rename(columns={c: f"{c}_2" for c in shared})
    frame = pd.concat([left, right], axis=1)
    frame["geometry"] = gpd.GeoSeries(pieces, crs=first.crs)
    return gpd.GeoDataFrame(frame, geometry="geometry", crs=first.crs)


def overlay_layers_sedonadb(ctx: RunContext) -> None:
    """overlay_layers(how='intersection') with the pairs and pieces from SedonaDB; everything else is overlay_ops'."""
    from mapsmith_opensource.sedonadb_overlay_files import overlay_files

    if overlay_files(ctx, OVERLAY_FILE_MIN_FEATURES):
        return
    keys = ("input_path", "overlay_path")
    _set_engine(ctx, keys, OVERLAY_MIN_FEATURES)
    ctx.notes.append(
        f"{WKB_PATH_NOTE}; SedonaDB also computed each pair's intersection (ST_Intersection, GEOS as in shapely)"
    )
    overlay_ops.overlay_layers(ctx, intersection=sedonadb_overlay_intersection, intersection_label=OVERLAY_LABEL)
