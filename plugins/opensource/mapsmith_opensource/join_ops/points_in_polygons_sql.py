"""count_in_polygons and summarize_points_in_polygons aggregated inside a SQL engine (SedonaDB or DuckDB).

One query per run reads the points from their GeoParquet file, matches them with the polygons and
aggregates the matches twice in one pass -- ``GROUP BY GROUPING SETS ((polygon), (point))`` -- so what
comes back is one row per polygon (its count and statistics) and one row of facts about the points (how
many, how many without geometry, invalid or without a value, how many counted, in several polygons,
inside polygons that overlap). No (polygon, point) pair and no point reaches Python, and the points'
validity is counted by the same query that matches them. The SQL is the dialect DuckDB and SedonaDB
(DataFusion) share; each engine supplies its own two relations (``points`` and ``zones`` below).

The statistics are points_in_polygons.write_summary's, from per-polygon aggregates instead of pairs:
this module must never compute one differently from the GeoPandas engine (nulls and NaN left out and
counted, sum and count 0 over no values, mean/min/max empty), nor count a point twice without saying so.
weighted_mean is not computed here (its refusals of negative or infinite weights live in
aggregation.weighted_mean_by_group, which works on pairs): a run asking for it takes the pairs path.

The grouping by point is there only to find the points that fall in several polygons, and it is costly.
Measured for issue 22 on 1,000,000 points and benchmarks/scale_data.make_parcels' 10,000 edge-sharing squares,
whole MapSmith runs, CPU seconds of the process (medians of 3, interleaved, load average 7-14 from a benchmark
beside them): SedonaDB 5.15 s by the two plain queries against 6.11 s by the GROUPING SETS one, DuckDB 7.57 s
against 10.09 s; the same answers.
So ``aggregate`` first asks whether any point can be in two polygons. When the layer holds single points
(a multipoint's members can lie in two polygons' interiors) and the polygons' interiors are pairwise
disjoint (tested here, in GEOS, on the polygons already read), a point in two polygons lies on the boundary
of one of them, and the per-polygon query counts the pairs whose point is not in the polygon's interior.
With none, no point is in two polygons, the per-polygon rows are the whole answer and a second, plain scan
counts the points' facts.

Otherwise, for single points, only the points that may be in two polygons are grouped one by one: a point in
polygon i is in another polygon only if it meets ``s``, i's shared region (shared_regions: the union of i's
intersections with the polygons it meets, computed here in GEOS, or below SHARED_UNION_MIN_POINTS points the
polygons it meets as one geometry collection, which needs no overlay). The query gives a pair whose point meets its
polygon's ``s`` the point's own group and puts every other pair in one common group, which is right only if each
point in that common group has a single pair there. That is checked, not assumed: every point yields at least one
pair (the LEFT JOIN), so the common group's pairs plus the points grouped alone equal the number of points exactly
when no point has two pairs in the common group and none is split between the two; the number of points is the
files' footers' count, as the header read took it. A miss (a point the computed ``s`` leaves out by rounding, or a
collection's test answered wrongly) fails the check and the plain GROUPING SETS query
runs instead. Measured on 10,000,000 points and bench_vector's 10,000 overlapping zones (2,034,849 points in two or
more), SedonaDB, the query alone, one quiet run each: 14.5 s grouping every point, 9.5 s grouping those in a shared
region (1.3 s more in GEOS for the regions), 5.2 s for the per-polygon counts alone. On DuckDB the same change made
whole runs slower (15.8 s -> 19.7 s, against 19.4 s -> 16.0 s on SedonaDB; two interleaved runs each, load
0.9-1.8): DuckDB tests each pair against the region unprepared, and its grouping by point is cheaper, so DuckDB
groups every point. Multipoints take the plain GROUPING SETS query. Grouping the points in a shared region by
location (x, y) instead of by number was tried (a location's pairs over its distinct polygons is its number of
points): the query alone took 10.6/11.4 s against 14.0/13.6 s, but whole runs 15.9/16.7/16.5 s against
17.2/17.3/16.4 s (interleaved, load 2.0-2.5) with a peak of 1.87 GB against 1.52 GB, so it was not kept.
Each query reads the points once: SedonaDB 0.5 loses a geometry column's type when a plan reads the same
relation twice ("st_setsrid(binary, int64): No kernel").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import numpy as np

    from mapsmith.runner import RunContext
    from mapsmith.verify.facts import OutputFacts

# The key of the one row of facts about the points (polygon rows are numbered from 0), and of the
# group of points that met no polygon in the (polygon) grouping set, which is not a polygon.
POINT_FACTS = -1
NO_POLYGON = -2


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def as_double(name: str | None) -> str:
    """A field as DOUBLE with NaN as null (pandas' isna counts both), or NULL when there is no field."""
    if name is None:
        return "CAST(NULL AS DOUBLE)"
    return f"CASE WHEN isnan(CAST({quote(name)} AS DOUBLE)) THEN NULL ELSE CAST({quote(name)} AS DOUBLE) END"


def point_flags(geometry: str, valid: str | None = None) -> str:
    """The per-point columns the aggregate reads, from a geometry expression: ``missing`` (null or
    empty) and ``bad`` (present but not valid), each 0 or 1. ``valid``: the engine's faster expression for
    ``ST_IsValid(geometry)`` where it has one (DuckDB: duckdb_spatial.valid_sql)."""
    g = geometry
    # Each geometry function appears once: SedonaDB 0.5 (DataFusion) pulls a repeated call out as a common
    # subexpression and loses the column's geometry type on the way ("st_isempty(binary): No kernel
    # matching arguments"). An empty geometry is valid and a null one's validity is null, counted as 0.
    return (
        f"CASE WHEN {g} IS NULL OR ST_IsEmpty({g}) THEN 1 ELSE 0 END AS missing, "
        f"CASE WHEN NOT {valid or f'ST_IsValid({g})'} THEN 1 ELSE 0 END AS bad"
    )


def aggregate_sql(points_relation: str, zones: str, shared: bool = False) -> str:
    """The one query. ``points_relation`` has columns id (distinct per point, from 0), g, v (the value or null), missing
    and bad (0/1, see point_flags); ``zones`` has n (the polygon's row, from 0) and g, and with ``shared`` s (the
    polygon's shared region, null where it meets no other polygon; ``aggregate`` says what it is for).

    In the (polygon) grouping set the point key is null and in the (point) set the polygon row is: point keys
    are never null, so ``j IS NULL`` tells the two sets apart without GROUPING(), which DataFusion and DuckDB
    name differently. Without ``shared`` each point is its own group; with it, a pair whose point does not meet
    its polygon's s goes to the one group ``j = -1``, whose rows are counted per pair (``aggregate`` checks
    that each of its points has one). ``inside`` (the point in the polygon's interior) tells a point inside
    polygons that overlap from one on a boundary they share (points_in_polygons.pair_counts gives the rule).
    """
    key = f"CASE WHEN j IS NULL THEN coalesce(i, {NO_POLYGON}) ELSE {POINT_FACTS} END"
    if shared:  # the one group j = -1 counts its rows, not its groups
        j = "CASE WHEN t.s IS NOT NULL AND ST_Intersects(t.s, p.g) THEN p.id ELSE -1 END"
        per_pair = "count(*) AS rows, sum(missing) AS all_missing, sum(bad) AS all_bad, sum(vnull) AS all_vnull, "
        points = (
            "sum(CASE WHEN j = -1 THEN rows ELSE 1 END) AS points, "
            "sum(CASE WHEN j = -1 THEN times WHEN times > 0 THEN 1 ELSE 0 END) AS counted, "
            "count(*) FILTER (WHERE j <> -1 AND times > 1) AS several, "
            "count(*) FILTER (WHERE j <> -1 AND times > 1 AND interior) AS overlapping, "
            "sum(CASE WHEN j = -1 THEN all_missing ELSE missing END) AS missing, "
            "sum(CASE WHEN j = -1 THEN all_bad ELSE bad END) AS bad, "
            "sum(CASE WHEN j = -1 THEN all_vnull ELSE vnull END) AS vnull "
        )
    else:
        j, per_pair = "p.id", ""
        points = (
            "count(*) AS points, count(*) FILTER (WHERE times > 0) AS counted, "
            "count(*) FILTER (WHERE times > 1) AS several, count(*) FILTER (WHERE times > 1 AND interior) AS "
            "overlapping, sum(missing) AS missing, sum(bad) AS bad, sum(vnull) AS vnull "
        )
    return (
        "WITH pairs AS ("
        f"SELECT {j} AS j, t.n AS i, p.v AS v, p.missing AS missing, p.bad AS bad, "
        "CASE WHEN p.v IS NULL THEN 1 ELSE 0 END AS vnull, "
        "CASE WHEN t.n IS NULL THEN false ELSE ST_Contains(t.g, p.g) END AS inside "
        f"FROM {points_relation} AS p LEFT JOIN {zones} AS t ON ST_Intersects(t.g, p.g)"
        "), g AS ("
        f"SELECT i, j, {per_pair}count(i) AS times, bool_or(inside) AS interior, max(missing) AS missing, "
        "max(bad) AS bad, max(vnull) AS vnull, count(v) AS nv, sum(v) AS sv, min(v) AS mn, max(v) AS mx, "
        "avg(v) AS av, count(i) FILTER (WHERE v IS NULL) AS nulls "
        "FROM pairs GROUP BY GROUPING SETS ((i), (j))"
        ") "
        f"SELECT {key} AS k, sum(times) AS times, sum(nv) AS nv, sum(sv) AS sv, min(mn) AS mn, max(mx) AS mx, "
        f"max(av) AS av, sum(nulls) AS nulls, {points}"
        f"FROM g GROUP BY {key}"
    )


def polygon_rows_sql(points: str, zones: str) -> str:
    """Per polygon, from an inner join: the aggregate_sql columns a polygon row has, and ``edge``, the pairs
    whose point is not in the polygon's interior (on its boundary). ``points`` has g and v, ``zones`` n and g."""
    return (
        "SELECT t.n AS k, count(*) AS times, count(p.v) AS nv, sum(p.v) AS sv, min(p.v) AS mn, max(p.v) AS mx, "
        "avg(p.v) AS av, count(*) FILTER (WHERE p.v IS NULL) AS nulls, "
        "count(*) FILTER (WHERE NOT ST_Contains(t.g, p.g)) AS edge "
        f"FROM {points} AS p JOIN {zones} AS t ON ST_Intersects(t.g, p.g) GROUP BY t.n"
    )


def meeting_pairs(geometries: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The polygons as an array, and the pairs (left < right) of them that intersect (touching included)."""
    import numpy as np
    import shapely

    geoms = np.asarray(geometries, dtype=object)
    if len(geoms) < 2:
        return geoms, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    left, right = shapely.STRtree(geoms).query(geoms, predicate="intersects")
    keep = left < right
    return geoms, left[keep], right[keep]


def interiors_disjoint(geometries: Any, pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> bool:
    """Whether no two of the polygons share interior points (touching along an edge or at a corner is fine);
    ``pairs``: meeting_pairs' answer for them, when already found."""
    import shapely

    geoms, left, right = pairs if pairs is not None else meeting_pairs(geometries)
    return not bool(shapely.relate_pattern(geoms[left], geoms[right], "T********").any()) if len(left) else True


# From how many points ``aggregate`` gives each polygon the union of its intersections as its shared region rather
# than the polygons it meets as one geometry collection. The union costs GEOS overlays per pair of polygons, the
# collection a slower test per (polygon, point) pair. Measured for issue 22, whole MapSmith count_in_polygons runs
# on SedonaDB over benchmarks/scale_data.make_inputs' 10,000 overlapping zones, one fresh process each, load 1.1-1.7
# (/tmp scratch script, not in the repo): 1M points 3.55 s (0.97 s of it the union) against 2.42 s; 3M 5.39/5.19 s
# against 4.89/5.21 s; 10M 13.42 s against 13.68 s (the query 10.9 s against 12.0 s).
SHARED_UNION_MIN_POINTS = 3_000_000


def shared_regions(geoms: np.ndarray, left: np.ndarray, right: np.ndarray, union: bool = True) -> np.ndarray:
    """Per polygon, the union of its intersections with the polygons it meets (meeting_pairs' pairs), or None
    where it meets none: a point of the polygon lies in another only if it meets this region. Without ``union``,
    the polygons it meets as one geometry collection (a point of the polygon meets it exactly when it meets the
    union; no overlay is computed)."""
    import numpy as np
    import shapely

    out = np.full(len(geoms), None, dtype=object)
    if not len(left):
        return out
    owner = np.concatenate([left, right])
    if not union:
        other = np.concatenate([right, left])
        order = np.argsort(owner, kind="stable")
        owner, other = owner[order], other[order]
        owners = np.unique(owner)
        out[owners] = shapely.geometrycollections(geoms[other], indices=np.searchsorted(owners, owner))
        return out
    pieces = shapely.intersection(geoms[left], geoms[right])  # each pair once, for both of its polygons
    pieces = np.concatenate([pieces, pieces])
    order = np.argsort(owner, kind="stable")
    owner, pieces = owner[order], pieces[order]
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    for start, end in zip(starts, np.r_[starts[1:], len(owner)], strict=True):
        out[owner[start]] = shapely.union_all(pieces[start:end])
    return out


def single_points(geometry_types: Any) -> bool:
    """Whether a points layer's declared types are single points only: a multipoint's members may lie in the
    interiors of two disjoint polygons, so only single points let ``aggregate`` skip the grouping by point."""
    types = tuple(geometry_types or ())
    return bool(types) and all(str(t).split(" ")[0] == "Point" for t in types)


def aggregate(
    run: Callable[[str], Any],
    points: str,
    light: str,
    register: Callable[[np.ndarray | None], str],
    scan: str,
    polygons: Any,
    points_are_single: bool,
    rows: int | None,
    group_shared: bool,
) -> tuple[Aggregated, str]:
    """The aggregate of ``polygons`` (a GeoSeries, the zones' rows) and how it was found: "plain" (two plain
    queries, no point can be in two polygons), "shared" (only the points in a shared region grouped one by one)
    or "grouped" (every point grouped, aggregate_sql). ``run`` executes a query and returns an Arrow table;
    ``points`` is aggregate_sql's points relation, ``light`` the points as g and v, ``register`` makes the
    polygons a relation (n, g, and s from the regions given: shared_regions) and returns its name, ``scan`` is
    points_scan_sql's query; ``points_are_single``: single_points of the points layer's types; ``rows``: the
    number of points, as points_path's header read counted them from its footers (None: unknown, and no
    "shared" path); ``group_shared``: whether the engine takes the "shared" path (faster on
    SedonaDB, slower on DuckDB: see the module's docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(polygons)
    if not points_are_single:
        return read_aggregated(run(aggregate_sql(points, register(None))), count), "grouped"
    geoms, left, right = pairs = meeting_pairs(polygons.values)
    zones = None
    if interiors_disjoint(geoms, pairs):
        zones = register(None)
        found = run(polygon_rows_sql(light, zones))
        if pc.sum(found.column("edge")).as_py() in (None, 0):
            facts = read_point_facts(run(scan), count).facts
            counted = pc.sum(found.column("times")).as_py() or 0  # each counted point in exactly one polygon
            facts_row = {"k": [POINT_FACTS], "points": [facts.rows], "missing": [facts.missing]}
            facts_row |= {"bad": [facts.invalid], "vnull": [facts.null_values], "counted": [counted]}
            facts_row |= {"several": [0], "overlapping": [0]}
            table = pa.concat_tables([found.drop_columns(["edge"]), pa.table(facts_row)], promote_options="permissive")
            return read_aggregated(table, count), "plain"
    if not group_shared or rows is None:
        return read_aggregated(run(aggregate_sql(points, zones or register(None))), count), "grouped"
    zones = register(shared_regions(geoms, left, right, union=rows >= SHARED_UNION_MIN_POINTS))
    found_shared = read_aggregated(run(aggregate_sql(points, zones, shared=True)), count)
    if found_shared.facts.rows == rows:
        return found_shared, "shared"
    return read_aggregated(run(aggregate_sql(points, zones)), count), "grouped"


def path_note(engine: str, path: str) -> str:
    """The manifest's note of where the counting ran, for ``aggregate``'s path."""
    if path == "plain":
        how = (
            f"{engine} read points_path itself (GeoParquet), matched the points with the polygons and aggregated "
            "the matches per polygon in one query, and counted its null, empty and invalid geometries in a second: "
            "the polygons' interiors being pairwise disjoint and no point on a polygon's boundary, no point can be "
            "in two polygons, so none was grouped by point (points_in_polygons_sql.aggregate)"
        )
    else:
        grouped = (
            "per polygon and per point (GROUP BY GROUPING SETS)"
            if path == "grouped"
            else "per polygon and, for the points in the region a polygon shares with another, per point (GROUP BY "
            "GROUPING SETS; the points grouped together were checked to lie in one polygon at most: "
            "points_in_polygons_sql.aggregate)"
        )
        how = (
            f"{engine} read points_path itself (GeoParquet) and, in one query, counted its null, empty and invalid "
            f"geometries, matched the points with the polygons and aggregated the matches {grouped}"
        )
    return (
        f"engine path: direct, aggregated -- {how}; one row per polygon came back, no point and no (polygon, "
        "point) pair; the polygons were read, checked and written by the GeoPandas engine's code"
    )


def kept_point_facts(path: Path) -> OutputFacts | None:
    """points_path's facts as its header read counted them, validity included, when it is one GeoParquet file
    unchanged since, or a folder of parts scanned whole (layer_facts.counted_facts); None otherwise (a header read
    that counted no validity ...). With them the engine counts no point's validity again: measured in SedonaDB on
    10,000,000 points (load 5), points_scan_sql took 6.5-9.0 s with ST_IsValid, 0.2-0.3 s reading the values alone."""
    from mapsmith_opensource.layer_facts import counted_facts

    return counted_facts(path)


def kept_valid(kept: OutputFacts | None, valid: str | None = None) -> str | None:
    """point_flags' ``valid``: TRUE when the kept facts found no invalid point, else ``valid`` as given."""
    return "TRUE" if kept is not None and kept.invalid == 0 else valid


def points_scan_sql(
    table: str, geometry: str, value: str, valid: str | None = None, kept: OutputFacts | None = None
) -> str:
    """The point facts alone, for a run with no polygon to match (an empty polygons layer), read from the
    table as the engine opened it (point_flags' rules, ``valid`` as there; each geometry function once).
    ``kept`` (kept_point_facts): the missing and invalid counts are taken from it and no geometry is read."""
    g = geometry
    if kept is not None:
        return (
            f"SELECT count(*) AS points, CAST({int(kept.missing)} AS BIGINT) AS missing, "
            f"CAST({int(kept.invalid)} AS BIGINT) AS bad, count(*) FILTER (WHERE ({value}) IS NULL) AS vnull "
            f"FROM {table}"
        )
    return (
        f"SELECT count(*) AS points, count(*) FILTER (WHERE {g} IS NULL OR ST_IsEmpty({g})) AS missing, "
        f"count(*) FILTER (WHERE NOT {valid or f'ST_IsValid({g})'}) AS bad, "
        f"count(*) FILTER (WHERE ({value}) IS NULL) AS vnull FROM {table}"
    )


@dataclass
class PointFacts:
    rows: int
    missing: int  # null or empty geometries
    invalid: int
    null_values: int  # points whose value is null (or NaN)


@dataclass
class Aggregated:
    """What the query returned: per polygon (arrays of the polygons' length, NaN where a polygon has no
    value), the point facts and the counts every engine reports (points_in_polygons.pair_counts' keys)."""

    point_count: np.ndarray  # int64
    statistics: dict[str, np.ndarray]  # "count", "sum", "min", "max", "mean" over non-null values
    null_count: np.ndarray  # int64: pairs whose point has no value
    facts: PointFacts
    counts: dict[str, int]


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def read_aggregated(table: Any, polygons: int) -> Aggregated:
    """The query's Arrow table (polygon rows and the facts row) as per-polygon arrays and counts."""
    import numpy as np

    data = table.to_pydict()
    keys = [int(k) for k in data["k"]]
    point_count = np.zeros(polygons, dtype=np.int64)
    null_count = np.zeros(polygons, dtype=np.int64)
    stats = {name: np.full(polygons, np.nan) for name in ("count", "sum", "min", "max", "mean")}
    facts_row: int | None = None
    for row, k in enumerate(keys):
        if k == POINT_FACTS:
            facts_row = row
            continue
        if k < 0:  # the points that met no polygon, grouped by a null polygon row
            continue
        point_count[k] = _int(data["times"][row])
        null_count[k] = _int(data["nulls"][row])
        for name, column in (("count", "nv"), ("sum", "sv"), ("min", "mn"), ("max", "mx"), ("mean", "av")):
            value = data[column][row]
            stats[name][k] = np.nan if value is None else float(value)
    if facts_row is None:  # no point at all
        facts = PointFacts(0, 0, 0, 0)
        counted = several = overlapping = 0
    else:
        r = facts_row
        facts = PointFacts(
            _int(data["points"][r]), _int(data["missing"][r]), _int(data["bad"][r]), _int(data["vnull"][r])
        )
        counted, several, overlapping = (_int(data[c][r]) for c in ("counted", "several", "overlapping"))
    counts = {
        "polygons": polygons,
        "points": facts.rows,
        "points_counted": counted,
        "points_in_no_polygon": facts.rows - counted,
        "points_without_geometry": facts.missing,
        "points_in_several_polygons": several,
        "points_in_overlapping_polygons": overlapping,
        "points_on_shared_boundaries": several - overlapping,
        "polygons_with_no_points": int((point_count == 0).sum()),
    }
    return Aggregated(point_count, stats, null_count, facts, counts)


def read_point_facts(table: Any, polygons: int) -> Aggregated:
    """points_scan_sql's one row, for a run with no polygon: nothing counted anywhere."""
    import numpy as np

    row = {k: v[0] for k, v in table.to_pydict().items()}
    facts = PointFacts(_int(row["points"]), _int(row["missing"]), _int(row["bad"]), _int(row["vnull"]))
    counts = {
        "polygons": polygons,
        "points": facts.rows,
        "points_counted": 0,
        "points_in_no_polygon": facts.rows,
        "points_without_geometry": facts.missing,
        "points_in_several_polygons": 0,
        "points_in_overlapping_polygons": 0,
        "points_on_shared_boundaries": 0,
        "polygons_with_no_points": polygons,
    }
    stats = {name: np.full(polygons, np.nan) for name in ("count", "sum", "min", "max", "mean")}
    zeros = np.zeros(polygons, dtype=np.int64)
    return Aggregated(zeros, stats, zeros.copy(), facts, counts)


def points_geometry(path: Path) -> str:
    """points_path's primary geometry column, from its footer (a folder's first part: the parts share a schema)."""
    import json

    import pyarrow.parquet as pq

    from mapsmith import parts

    return str(json.loads(pq.read_schema(parts.dataset_files(path)[0]).metadata[b"geo"])["primary_column"])


def duckdb_points_source(path: Path) -> tuple[str, str]:
    """DuckDB's FROM clause for points_path and the expression of a BIGINT that tells its rows apart: the row's
    position in the layer (file_row_number restarts in each of a folder's parts: mapsmith.parts gives the
    position across them)."""
    from mapsmith import parts

    return parts.parquet_source(path, row_numbers=True), parts.duckdb_row_position(path)


def points_file_problem(ctx: RunContext, value_field: str | None, engine: str) -> str | None:
    """Why ``engine`` cannot read points_path itself and give the GeoPandas engine's answer (None: it can)."""
    import json

    import pyarrow.parquet as pq
    import pyarrow.types as t

    from mapsmith import parts
    from mapsmith_opensource import io

    path = ctx.paths["points_path"]
    # A hive folder's keys (key=value/ subfolders) are fields the GeoPandas engine reads and the direct path does
    # not: the counts never depend on them, but a value or weight field that is a key takes the GeoPandas engine.
    folder = parts.is_parts_folder(path)
    keys = parts.hive_columns(path) if folder else ()
    if not folder and not io.is_parquet(path):
        return f"points_path is {ctx.inputs['points_path'].driver}, not GeoParquet, which {engine} reads directly"
    # a folder's parts share one schema and CRS (mapsmith.parts.inspect_folder refused the run otherwise)
    schema = pq.read_schema(parts.dataset_files(path)[0])
    meta = schema.metadata or {}
    geo = json.loads(meta.get(b"geo") or b"{}")
    columns = geo.get("columns", {})
    if clash := [k for k in keys if k in schema.names]:
        return f"points_path's partition key {clash[0]!r} is also a field of its parts"
    reserved = parts.duckdb_reserved_field(path, [*schema.names, *keys])
    if engine == "DuckDB" and reserved is not None:  # the points' ids are DuckDB's row positions
        return f"points_path has a field named {reserved!r}, which DuckDB reserves for row positions"
    if len(columns) != 1:
        return f"points_path has {len(columns)} geometry columns; the direct path reads layers with one"
    primary = str(geo.get("primary_column", ""))
    if columns.get(primary, {}).get("encoding") != "WKB":
        return f"points_path stores its geometries as {columns.get(primary, {}).get('encoding')!r}, not WKB"
    if value_field is None:
        return None
    index = {str(i) for i in json.loads(meta.get(b"pandas") or b"{}").get("index_columns", []) if isinstance(i, str)}
    # summarize_points_in_polygons' weight_field is read beside the value, and must pass the same tests
    for name in (value_field, ctx.arguments.get("weight_field")):
        if name is None:
            continue
        if name in keys:
            return (
                f"field {name!r} is points_path's partition key (key=value/ subfolders), which the direct path "
                "does not read"
            )
        where = schema.get_field_index(name)
        if where < 0 or name == primary or name in index:
            return f"points_path has no field {name!r} (the GeoPandas engine's code gives the refusal)"
        kind = schema.field(where).type
        if not (t.is_integer(kind) or t.is_floating(kind)):
            return f"field {name!r} is {kind}, not integers or floats (the GeoPandas engine's code decides)"
    return None


def first_invalid_points(path: Path, geometry: str, limit: int = 50) -> list[tuple[int, str]]:
    """The first invalid points with GEOS's reason, by position in the layer (a folder's parts in listing order),
    read in batches (only when the query counted some invalid: neither engine gives GEOS's reason)."""
    import numpy as np
    import pyarrow.parquet as pq
    import shapely

    from mapsmith import parts

    found: list[tuple[int, str]] = []
    offset = 0
    files = parts.dataset_files(path)
    for batch in (b for f in files for b in pq.ParquetFile(f).iter_batches(columns=[geometry], batch_size=65_536)):
        geoms = shapely.from_wkb(batch.column(0).to_numpy(zero_copy_only=False))
        bad = ~(shapely.is_missing(geoms) | shapely.is_empty(geoms)) & ~shapely.is_valid(geoms)
        for i in np.flatnonzero(bad):
            found.append((offset + int(i), str(shapely.is_valid_reason(geoms[i]))))
            if len(found) == limit:
                return found
        offset += batch.num_rows
    return found
