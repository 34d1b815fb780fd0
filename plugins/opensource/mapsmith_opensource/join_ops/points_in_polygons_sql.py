"""count_in_polygons and summarize_points_in_polygons aggregated inside a SQL engine (SedonaDB or DuckDB).

The engine reads the points from their GeoParquet file, matches them with the polygons and aggregates the matches
in SQL, so what comes back is one row per polygon (its count and statistics) and one row of facts about the points
(how many, how many without geometry, invalid or without a value, how many counted, in several polygons, inside
polygons that overlap). No (polygon, point) pair and no point reaches Python. The SQL is the dialect DuckDB and
SedonaDB (DataFusion) share; each engine supplies its own relations (``points``, ``light`` and ``zones`` below).

The statistics are points_in_polygons.write_summary's, from per-polygon aggregates instead of pairs:
this module must never compute one differently from the GeoPandas engine (nulls and NaN left out and
counted, sum and count 0 over no values, mean/min/max empty), nor count a point twice without saying so.
weighted_mean is not computed here (its refusals of negative or infinite weights live in
aggregation.weighted_mean_by_group, which works on pairs): a run asking for it takes the pairs path.

Three paths (``aggregate``), each two queries ("first" a third, for points on a boundary): the matches aggregated,
and a scan of the points' facts (points_scan_sql: counts only, and no geometry read at all when the header read
kept them, kept_point_facts).
- "plain": when the layer holds single points (a multipoint's members can lie in two polygons' interiors) and the
  polygons' interiors are pairwise disjoint (tested here, in GEOS, on the polygons already read), a point in two
  polygons lies on the boundary of one of them, so the per-polygon query (polygon_rows_sql) also counts the pairs
  whose point is not in its polygon's interior. With none, no point is in two polygons and its rows are the answer.
- "grouped" (grouped_sql): the matched pairs are aggregated twice in one pass, ``GROUP BY GROUPING SETS
  ((polygon), (point))``; the point grouping gives each matched point's number of polygons and whether one holds
  it in its interior. Only matched pairs are grouped. Fast, but it holds a group per matched point.
- "first" (SedonaDB, single points, more than GROUPED_MAX_POINTS of them): no point is grouped; each is counted
  once, at its first polygon (points_in_polygons_first, which says how). DuckDB always groups: the first-polygon
  query made whole runs slower there (1,000,000 points, warm, two runs each: 3.93 and 4.18 s against 2.97 and
  3.22 s grouped).

Measured for issue 22 on benchmarks/scale_data.make_inputs' points and 10,000 overlapping zones (3.2 neighbours per
zone), SedonaDB, the aggregating query alone, in one process (/tmp/s28/loc.py, not in the repo). At 1,000,000
points, medians of 4 interleaved runs, load 1.2-1.6: grouped_sql 0.88 s, the first-polygon query 1.46 s, the
grouping it replaced (a LEFT join of every point, with its validity flags, in the same grouping) 1.43 s; a bare join
and count 0.45-0.54 s. With the zones scaled about their centres to meet more (scale 2 and 4: 3.3 and 13.1 million
pairs) grouped_sql still beat the replaced grouping: 2.06-2.58 s and 6.2 s against 1.96-3.48 s and 7.1 s. At
10,000,000 points, one run each in its own process: grouped_sql 10.0 s at a peak of 2.4 GiB, 7.7 s and 1.9 GiB
without the value statistics (count_in_polygons), the first-polygon query 10.7 s and 0.60 GiB, a bare join and
count 4.4 s and 0.56 GiB. Whole count_in_polygons runs through MapSmith (warm, fresh processes, two each,
interleaved, load 0.8-1.7): at 1,000,000 points grouped 1.73, 1.61 s against 2.35, 2.19 s first, peak RSS 0.57
GiB both ways; at 10,000,000 grouped 11.5, 10.5 s at 2.1 GiB against 11.9, 12.3 s at 0.74 GiB: hence
GROUPED_MAX_POINTS. On DuckDB (three runs) grouped_sql took 2.03-2.07 s and the scan 0.10-0.11 s, against 2.26-2.51
s for the replaced grouping. Grouping by the points' coordinates instead of an id needs count(DISTINCT polygon) for
duplicate points, and was slower. The plain query (1,000,000 points in 100,000 parcels) took 0.86-1.06 s against
1.29-1.94 s grouped. Each query reads the points once: SedonaDB 0.5 loses a geometry column's type when a plan
reads the same relation twice ("st_setsrid(binary, int64): No kernel").
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

# The key of the one row of facts about the points (polygon rows are numbered from 0).
POINT_FACTS = -1


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def as_double(name: str | None) -> str:
    """A field as DOUBLE with NaN as null (pandas' isna counts both), or NULL when there is no field."""
    if name is None:
        return "CAST(NULL AS DOUBLE)"
    return f"CASE WHEN isnan(CAST({quote(name)} AS DOUBLE)) THEN NULL ELSE CAST({quote(name)} AS DOUBLE) END"


def grouped_sql(points: str, zones: str, values: bool = True) -> str:
    """Per polygon (k its row) the polygon_rows_sql columns but ``edge``, and one more row (k = POINT_FACTS) with
    ``counted`` (the points that met a polygon), ``several`` (in more than one) and ``overlapping`` (of those, the
    ones some polygon holds in its interior). ``points`` has id (distinct per point), g and v; ``zones`` n and g.
    ``values``: False when v is null throughout (count_in_polygons): its statistics are then constants, and each
    group holds two aggregates instead of eight (the grouping holds a group per matched point).

    In the (polygon) grouping set the point key is null and in the (point) set the polygon row is: point keys are
    never null, so ``j IS NULL`` tells the two sets apart without GROUPING(), which DataFusion and DuckDB name
    differently. ``inside`` (the point in the polygon's interior) tells a point inside polygons that overlap from
    one on a boundary they share (points_in_polygons.pair_counts gives the rule).
    """
    key = f"CASE WHEN j IS NULL THEN i ELSE {POINT_FACTS} END"
    if values:
        carried, held = (
            "p.v AS v, ",
            (
                "count(v) AS nv, sum(v) AS sv, min(v) AS mn, max(v) AS mx, avg(v) AS av, "
                "count(*) FILTER (WHERE v IS NULL) AS nulls, "
            ),
        )
        stats = "sum(nv) AS nv, sum(sv) AS sv, min(mn) AS mn, max(mx) AS mx, max(av) AS av, sum(nulls) AS nulls, "
    else:  # count(v) 0, sum, min, max and mean null, every pair's value null: what the values case gives
        carried, held = "", ""
        stats = (
            "CAST(0 AS BIGINT) AS nv, CAST(NULL AS DOUBLE) AS sv, CAST(NULL AS DOUBLE) AS mn, "
            "CAST(NULL AS DOUBLE) AS mx, CAST(NULL AS DOUBLE) AS av, sum(times) AS nulls, "
        )
    return (
        "WITH pairs AS ("
        f"SELECT t.n AS i, p.id AS j, {carried}ST_Contains(t.g, p.g) AS inside "
        f"FROM {points} AS p JOIN {zones} AS t ON ST_Intersects(t.g, p.g)"
        "), g AS ("
        f"SELECT i, j, count(*) AS times, {held}bool_or(inside) AS interior "
        "FROM pairs GROUP BY GROUPING SETS ((i), (j))"
        ") "
        f"SELECT {key} AS k, sum(times) AS times, {stats}count(*) AS counted, "
        "count(*) FILTER (WHERE times > 1) AS several, "
        f"count(*) FILTER (WHERE times > 1 AND interior) AS overlapping FROM g GROUP BY {key}"
    )


def polygon_rows_sql(points: str, zones: str) -> str:
    """Per polygon, from an inner join: the grouped_sql columns a polygon row has, and ``edge``, the pairs
    whose point is not in the polygon's interior (on its boundary). ``points`` has g and v, ``zones`` n and g."""
    return (
        "SELECT t.n AS k, count(*) AS times, count(p.v) AS nv, sum(p.v) AS sv, min(p.v) AS mn, max(p.v) AS mx, "
        "avg(p.v) AS av, count(*) FILTER (WHERE p.v IS NULL) AS nulls, "
        "count(*) FILTER (WHERE NOT ST_Contains(t.g, p.g)) AS edge "
        f"FROM {points} AS p JOIN {zones} AS t ON ST_Intersects(t.g, p.g) GROUP BY t.n"
    )


# interiors_disjoint tests the polygons in blocks of this many, doubling: overlapping polygons are usually found in
# the first block, while disjoint ones are all tested, in as few calls as one pass would take. Measured on the
# benchmark inputs, which overlap: the whole test in one pass took 0.16 s on 10,000 zones and 1.2 s on 100,000 parcels,
# in blocks 0.017-0.018 s and 0.030-0.039 s (three calls each, one process).
FIRST_BLOCK = 256


def interiors_disjoint(geometries: Any) -> bool:
    """Whether no two of the polygons share interior points (touching along an edge or at a corner is fine)."""
    import numpy as np
    import shapely

    geoms = np.asarray(geometries, dtype=object)
    if len(geoms) < 2:
        return True
    tree = shapely.STRtree(geoms)
    start, block = 0, FIRST_BLOCK
    while start < len(geoms):
        stop = min(start + block, len(geoms))
        left, right = tree.query(geoms[start:stop], predicate="intersects")
        left = left + start
        keep = left < right
        if keep.any() and shapely.relate_pattern(geoms[left[keep]], geoms[right[keep]], "T********").any():
            return False
        start, block = stop, block * 2
    return True


def single_points(geometry_types: Any) -> bool:
    """Whether a points layer's declared types are single points only: a multipoint's members may lie in the
    interiors of two disjoint polygons, so only single points let ``aggregate`` skip the grouping by point."""
    types = tuple(geometry_types or ())
    return bool(types) and all(str(t).split(" ")[0] == "Point" for t in types)


# Up to this many points, SedonaDB groups them by point (grouped_sql) rather than counting each at its first polygon:
# faster, but count_in_polygons' grouping holds about 250 bytes per matched point (measured above: 1.4 GiB more at
# 10,000,000 points, 5,660,347 of them matched), summarize_points_in_polygons' more (six more aggregates), so beyond
# this the first-polygon path keeps memory flat. At 1,000,000 points (566,479 matched) count_in_polygons' peak did
# not move (0.56 GiB) and summarize_points_in_polygons' rose from 0.57 to 0.64-0.71 GiB (bench_goals.py, 554d824).
# At this limit (2,000,000 points, about 57 % of them in a zone; MAPSMITH_ENGINE=sedonadb, warm, two interleaved pairs,
# load 2.4-5.7): count_in_polygons grouped 2.74, 2.70 s at 734-749 MiB against 3.01, 2.99 s at 597-601 MiB by first
# polygon; summarize_points_in_polygons 2.52, 2.92 s at 835-866 MiB against 3.12, 3.06 s at 618-623 MiB.
GROUPED_MAX_POINTS = 2_000_000


def aggregate(
    run: Callable[[str], Any],
    points: str,
    light: str,
    register: Callable[[tuple[np.ndarray, np.ndarray] | None], str],
    scan: str,
    polygons: Any,
    points_are_single: bool,
    by_first_polygon: bool,
    values: bool = True,
) -> tuple[Aggregated, str]:
    """The aggregate of ``polygons`` (a GeoSeries, the zones' rows) and how it was found: "plain", "first" or
    "grouped" (the module's docstring). ``run`` executes a query and returns an Arrow table; ``points`` is
    grouped_sql's points relation (id, g, v), ``light`` the points as g and v, ``register`` makes the polygons a
    relation (n, g, and lower and higher from the neighbours given: points_in_polygons_first.neighbours) and
    returns its name, ``scan`` is
    points_scan_sql's query; ``points_are_single``: single_points of the points layer's types; ``by_first_polygon``:
    whether the engine may take the "first" path (SedonaDB beyond GROUPED_MAX_POINTS); ``values``: grouped_sql's."""
    import pyarrow.compute as pc

    count = len(polygons)
    zones = None
    if points_are_single and interiors_disjoint(polygons.values):
        zones = register(None)
        found = run(polygon_rows_sql(light, zones))
        if column_total(found, "edge") == 0:
            counted = column_total(found, "times")  # each counted point in exactly one polygon
            return _with_facts(run, scan, found.drop_columns(["edge"]), count, counted, 0, 0), "plain"
    if points_are_single and by_first_polygon:
        from mapsmith_opensource.join_ops import points_in_polygons_first as first

        counted_first, registered = first.count(run, light, register, polygons.values)
        zones = registered or zones
        if counted_first is not None:
            rows, counted, several, overlapping = counted_first
            return _with_facts(run, scan, rows, count, counted, several, overlapping), "first"
    found = run(grouped_sql(points, zones or register(None), values))
    is_facts = pc.equal(found.column("k"), POINT_FACTS)
    facts = found.filter(is_facts).to_pylist()
    counted, several, overlapping = (_int(facts[0][c]) if facts else 0 for c in ("counted", "several", "overlapping"))
    rows = found.filter(pc.invert(is_facts)).drop_columns(["counted", "several", "overlapping"])
    return _with_facts(run, scan, rows, count, counted, several, overlapping), "grouped"


def column_total(table: Any, column: str) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(table.column(column)).as_py() or 0)


def _with_facts(
    run: Callable[[str], Any], scan: str, rows: Any, count: int, counted: int, several: int, overlapping: int
) -> Aggregated:
    """The per-polygon rows with the one row of point facts: the scan's, and the counts given."""
    import pyarrow as pa

    facts = read_point_facts(run(scan), count).facts
    facts_row = {"k": [POINT_FACTS], "points": [facts.rows], "missing": [facts.missing]}
    facts_row |= {"bad": [facts.invalid], "vnull": [facts.null_values], "counted": [counted]}
    facts_row |= {"several": [several], "overlapping": [overlapping]}
    return read_aggregated(pa.concat_tables([rows, pa.table(facts_row)], promote_options="permissive"), count)


def path_note(engine: str, path: str) -> str:
    """The manifest's note of where the counting ran, for ``aggregate``'s path."""
    if path == "plain":
        how = (
            f"{engine} read points_path itself (GeoParquet), matched the points with the polygons and aggregated "
            "the matches per polygon in one query, and counted its null, empty and invalid geometries in a second: "
            "the polygons' interiors being pairwise disjoint and no point on a polygon's boundary, no point can be "
            "in two polygons, so none was grouped by point (points_in_polygons_sql.aggregate)"
        )
    elif path == "first":
        how = (
            f"{engine} read points_path itself (GeoParquet), matched the points with the polygons and aggregated "
            "the matches per polygon in one query, counting each point once at its first polygon (the lowest-numbered "
            "it meets: the point meets none of that polygon's lower-numbered neighbours) and as in several polygons "
            "when it meets a higher-numbered neighbour too, and counted its null, empty and invalid geometries in a "
            "second; no point was grouped, and only a point in several polygons on its first one's boundary came "
            "back, to be asked whether another polygon holds it in its interior (points_in_polygons_sql.aggregate)"
        )
    else:
        how = (
            f"{engine} read points_path itself (GeoParquet), matched the points with the polygons and aggregated "
            "the matches per polygon and per point in one query (GROUP BY GROUPING SETS), and counted its null, "
            "empty and invalid geometries in a second"
        )
    return (
        f"engine path: direct, aggregated -- {how}; one row per polygon came back, no (polygon, point) pair; the "
        "polygons were read, checked and written by the GeoPandas engine's code"
    )


def kept_point_facts(path: Path) -> OutputFacts | None:
    """points_path's facts as its header read counted them, validity included, when it is one GeoParquet file
    unchanged since, or a folder of parts scanned whole (layer_facts.counted_facts); None otherwise (a header read
    that counted no validity ...). With them the engine counts no point's validity again: measured in SedonaDB on
    10,000,000 points (load 5), points_scan_sql took 6.5-9.0 s with ST_IsValid, 0.2-0.3 s reading the values alone."""
    from mapsmith_opensource.layer_facts import counted_facts

    return counted_facts(path)


def points_scan_sql(
    table: str, geometry: str, value: str, valid: str | None = None, kept: OutputFacts | None = None
) -> str:
    """The point facts, read from the table as the engine opened it: ``missing`` (null or empty geometries),
    ``bad`` (present but not valid: an empty geometry is valid, a null one is not counted) and ``vnull`` (no value).
    ``valid``: the engine's faster expression for ``ST_IsValid(geometry)`` where it has one (DuckDB:
    duckdb_spatial.valid_sql). Each geometry function appears once: SedonaDB 0.5 (DataFusion) pulls a repeated call
    out as a common subexpression and loses the column's geometry type on the way ("st_isempty(binary): No kernel
    matching arguments").
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
