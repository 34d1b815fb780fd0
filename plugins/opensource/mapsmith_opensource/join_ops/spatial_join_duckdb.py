"""spatial_join inside DuckDB, GeoParquet file to GeoParquet file: no feature passes through Python.

Either input may be a folder of plain GeoParquet parts, read by DuckDB in listing order (the order GeoPandas reads
it in); a row's position is counted across the parts (parts.duckdb_row_position), never by its part alone.

Eligible only where it gives the same rows and record as the GeoPandas engine (see
duckdb_join_eligible); the counts and checks are spatial_join's own. It must never join layers in two
CRS, measure geodesically, or write a field type the GeoPandas engine would write differently.

What makes a file-to-file join give the GeoPandas engine's rows is shared with SedonaDB's file-to-file
path (join_ops.spatial_join_sedonadb), which calls it here rather than keep a copy: the file and CRS
conditions (file_join_problem), the footer and field-type rules (layers_problem), the output's fields and
renaming (join_columns), the validity record and refusal (refuse_invalid_inputs) and the predicate's CRS
record (record_predicate, distance_in_crs_units).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith import parts
from mapsmith.crs import linear_unit_metres
from mapsmith.router import named_by_operator
from mapsmith_opensource import io
from mapsmith_opensource.common import (
    INVALID_ROWS_SHOWN,
    MAX_SCALE_DISTORTION,
    TYPE_NAMES,
    invalid_input_error,
    record_input_validity,
    scale_distortion,
    to_metric,
)
from mapsmith_opensource.duckdb_spatial import text_literal as _text
from mapsmith_opensource.duckdb_spatial import valid_sql
from mapsmith_opensource.join_ops.ground import _CrsOnly, _record_planar
from mapsmith_opensource.join_ops.shared import JOIN_SUFFIX, UNDEFINED_ON_INVALID, _record_topological, _rename_clashes
from mapsmith_opensource.join_ops.spatial_join import (
    SPATIAL_PREDICATES,
    _check_written,
    _JoinTally,
    _record_spatial_join,
)
from mapsmith_opensource.join_ops.spatial_join import validate_spatial_join as validate_spatial_join  # registered
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from pathlib import Path

    from pyproj import CRS

    from mapsmith.runner import RunContext


# spatial_join has two engines. The DuckDB engine works file to file (GeoParquet in, GeoParquet out;
# both CRS equal; a predicate DuckDB Spatial evaluates as GEOS does); everything else goes to GeoPandas.
# Measured again for issue 22 by benchmarks/bench_thresholds.py (docs/benchmarks.md, "Router thresholds"): whole
# MapSmith runs, a fresh process each, warmed as the server's engine worker is before a call (DuckDB open with
# spatial loaded) and GeoPandas imported too, the engine forced with MAPSMITH_ENGINE, interleaved, medians of 5.
# DuckDB took 0.084-0.109 s against GeoPandas' 0.185-0.210 s from 10 to 10,000 points, 0.39 s against 0.80 s at
# 100,000, with less peak memory at every size. The measurement before (bench_vector.py's whole runs) had DuckDB's
# import and extension load, about 0.7 s, on every run's clock and put the threshold at 100,000; the worker's
# warm-up now pays that once. The constant is the smallest size measured (the features of the larger input);
# tests/docs/test_thresholds_doc.py holds it to the committed measurement. count_in_polygons' DuckDB engine reads
# it too; that engine's preference (points_in_polygons.DUCKDB_POINTS_PREFERENCE) keeps it forced-only.
DUCKDB_MIN_ROWS = 10
DUCKDB_PREFERENCE = 30
# A folder of parts (output_path ending in ".parquet/") is cut into parts of about this many bytes, as
# sql_layer_ops.PART_OPTIONS cuts the layer engines' (256 MB): the first part holds FIRST_PART_ROWS rows, and its size
# sets how many rows each further part holds (tests make both smaller).
PART_BYTES = 256 * 2**20
FIRST_PART_ROWS = 1_000_000

REGISTRATIONS = (
    Registration(
        "spatial_join",
        "spatial_join_duckdb",
        engine="duckdb",
        preference=DUCKDB_PREFERENCE,
        eligible="duckdb_join_eligible",
        validate="validate_spatial_join",
        writes_parts=True,  # _copy_joined
    ),
)

# -- spatial_join on DuckDB, file to file -----------------------------------------------------

# How many invalid rows the x-mapsmith:input_geometry_valid check reads reasons from
# (as common.read_input does).
INVALID_REASONS_READ = 50


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

    @property
    def fields(self) -> list[str]:
        """The columns other than the geometry, in file order."""
        return [c for c in self.columns if c != self.geometry]


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


def _geoparquet(path: Path, key: str, engine: str = "DuckDB") -> _GeoParquet:
    """The footer facts of one input, and why ``engine`` cannot join it (the SedonaDB engine asks too: the
    two file-to-file engines carry the same layers; the reserved row-position name and the case-blind field
    names are DuckDB's own). A folder of plain parts is read from its first part's footer for DuckDB, which reads
    the parts itself (parts.parquet_source); SedonaDB's file path reads one file, so there it is refused with the
    reason."""
    import json

    import pyarrow.parquet as pq
    import pyarrow.types as t

    folder = parts.is_parts_folder(path)
    # a folder's parts share one schema and CRS (parts.inspect_folder refused the run otherwise): the first speaks
    schema = pq.read_schema(parts.part_files(path)[0] if folder else path)
    meta = schema.metadata or {}
    geo = json.loads(meta.get(b"geo") or b"{}")
    primary = str(geo.get("primary_column", ""))
    column = geo.get("columns", {}).get(primary, {})
    covering = {str(v[0]) for v in column.get("covering", {}).get("bbox", {}).values() if v}
    # a hive folder's keys are fields of every row, after the parts' own, typed as GeoPandas reads them
    keys = parts.hive_key_types(path) if folder else {}
    columns = tuple(n for n in schema.names if n not in covering) + tuple(keys)
    problem = None
    index = [i for i in json.loads(meta.get(b"pandas") or b"{}").get("index_columns", []) if isinstance(i, str)]
    crs = column.get("crs")
    folded: dict[str, str] = {}
    clash = next((n for n in columns if folded.setdefault(n.casefold(), n) != n), None)
    reserved = parts.duckdb_reserved_field(path, columns)
    odd = next((f for f in schema if f.name in columns and f.name != primary and not _carried_exactly(f.type)), None)
    if folder and engine != "DuckDB":
        problem = (
            f"{key} is a folder of GeoParquet parts; the {engine} engine's file-to-file path reads one file "
            "(the GeoPandas engine reads the folder whole)"
        )
    elif len(geo.get("columns", {})) != 1:
        problem = f"{key} has {len(geo.get('columns', {}))} geometry columns; the {engine} engine joins layers with one"
    elif column.get("encoding") != "WKB":
        problem = f"{key} stores its geometries as {column.get('encoding')!r}, not WKB, which the {engine} engine reads"
    elif "crs" in column and not isinstance(crs, dict):
        problem = f"{key} gives its CRS as {type(crs).__name__}, not PROJJSON, which is all {engine} reads"
    elif index:
        problem = (
            f"{key} stores a pandas index ({', '.join(index)}), which GeoPandas reads as the row index and {engine} "
            "would read as a field"
        )
    elif engine == "DuckDB" and reserved is not None:
        problem = f"{key} has a field named {reserved!r}, which DuckDB reserves for row positions"
    elif engine == "DuckDB" and clash is not None:
        problem = (
            f"{key} has the fields {folded[clash.casefold()]!r} and {clash!r}, which DuckDB does not tell apart "
            "(names ignore case)"
        )
    elif odd is not None:
        problem = (
            f"{key}'s field {odd.name!r} is of type {odd.type}; the {engine} engine carries only booleans, integers, "
            "floats, text, binary, dates and timestamps without a time zone exactly as the GeoPandas engine does"
        )
    other = frozenset(f.name for f in schema if t.is_integer(f.type) and not t.is_int64(f.type)) | {
        k for k, arrow in keys.items() if arrow == "int32"
    }
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


def file_join_problem(ctx: RunContext, engine: str = "DuckDB") -> str | None:
    """Why a file-to-file engine (``engine``: DuckDB or SedonaDB) cannot give this spatial_join the GeoPandas
    engine's rows, before any size or footer is looked at, or None: GeoParquet in and out, both CRS known and
    equal, and a within_distance that is planar (a projected CRS true to scale at the data)."""
    from pyproj import CRS

    for key in ("input_path", "join_path"):
        if not io.is_parquet(ctx.paths[key]):
            return (
                f"{key} is not GeoParquet ({ctx.inputs[key].driver}); the {engine} engine joins GeoParquet files "
                "only, file to file"
            )
    if ctx.output_path is None or not io.is_parquet(ctx.output_path):
        suffix = ctx.output_path.suffix if ctx.output_path else None
        return f"output_path ends in {suffix}; the {engine} engine writes GeoParquet (.parquet) only"
    first, second = ctx.inputs["input_path"], ctx.inputs["join_path"]
    if first.crs_wkt is None or second.crs_wkt is None:
        return f"the {engine} engine joins only layers whose CRS is known"
    crs = CRS.from_wkt(first.crs_wkt)
    if not crs.equals(CRS.from_wkt(second.crs_wkt), ignore_axis_order=True):
        return (
            f"input_path is in {first.crs_label} and join_path in {second.crs_label}; the {engine} engine joins "
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
    return None


def layers_problem(ctx: RunContext, engine: str = "DuckDB") -> tuple[dict[str, _GeoParquet], str | None]:
    """Both inputs' footers, and why ``engine`` cannot carry their fields as the GeoPandas engine does (or None)."""
    layers = {key: _geoparquet(ctx.paths[key], key, engine) for key in ("input_path", "join_path")}
    return layers, layers["input_path"].problem or layers["join_path"].problem


def duckdb_join_eligible(ctx: RunContext) -> str | None:
    """Why the DuckDB engine cannot take this spatial_join, or None when it can."""
    from pyproj import CRS

    problem = file_join_problem(ctx)
    if problem:
        return problem
    first, second = ctx.inputs["input_path"], ctx.inputs["join_path"]
    rows = max(first.feature_count or 0, second.feature_count or 0)
    # a folder of parts is written by this engine alone on the stack (route_to_parts_writers): no size to weigh
    folder_out = parts.is_folder_output(str(ctx.arguments.get("output_path")))
    if rows < DUCKDB_MIN_ROWS and not named_by_operator(ctx, "duckdb") and not folder_out:
        return (
            f"the larger input has {rows} features, fewer than the {DUCKDB_MIN_ROWS:,} for which the DuckDB "
            "engine is considered"
        )
    layers, problem = layers_problem(ctx)
    if problem:
        return problem
    # The output's CRS is input_path's as DuckDB read it (join_path's is set aside: the two are equal).
    if _names_another_crs(layers["input_path"].crs_id, CRS.from_wkt(first.crs_wkt)):
        return (
            f"input_path's PROJJSON CRS names {layers['input_path'].crs_id} but defines another CRS; DuckDB would "
            f"read it as {layers['input_path'].crs_id} and write that code's own definition"
        )
    return None


@cache
def duckdb_database() -> Any:
    """One DuckDB database per process with spatial loaded (loading the 80 MB extension takes 0.2-0.3 s);
    each run works on a cursor of its own, with its own temporary tables. A long-running server pays
    the load once, on its first DuckDB join. Its memory is limited and it spills to a private folder
    (duckdb_spatial.engine_connect)."""
    import os

    from mapsmith_opensource import duckdb_spatial

    return duckdb_spatial.engine_connect(os.environ)


@cache
def _duckdb_versions() -> dict[str, str]:
    import duckdb

    with duckdb_database().cursor() as con:
        row = con.execute(
            "SELECT extension_version FROM duckdb_extensions() WHERE extension_name = 'spatial'"
        ).fetchone()
    return {"duckdb": duckdb.__version__, "duckdb-spatial": str(row[0]) if row else "unknown"}


def set_duckdb_engine(ctx: RunContext, name: str = "duckdb") -> None:
    """A DuckDB engine's record for the run (DuckDB's and spatial's versions) and the memory limit its databases
    work under for it (duckdb_spatial.apply_engine_limit), said in the manifest's notes."""
    from mapsmith_opensource import duckdb_spatial

    versions = _duckdb_versions()
    ctx.set_engine(name, versions["duckdb"], **{"duckdb-spatial": versions["duckdb-spatial"]})
    ctx.notes.append(f"DuckDB's memory limit: {duckdb_spatial.apply_engine_limit(ctx.environ).how}")


def _name(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _rows_of(layer: _GeoParquet) -> str:
    """The layer's geometry as ``g`` beside its row position ``n`` (over a folder's parts in listing order), the
    CRS dropped (both are equal)."""

    return (
        f"(SELECT {parts.duckdb_row_position(layer.path)} AS n, {_name(layer.geometry)}::GEOMETRY AS g "
        f"FROM {parts.parquet_source(layer.path, row_numbers=True)})"
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
    """The input's rows, missing, invalid and types: from the facts its header read counted, when that read counted
    validity and the file is unchanged since (layer_facts.counted_facts), else from one scan here."""
    from mapsmith_opensource.layer_facts import counted_facts

    kept = counted_facts(layer.path)
    if kept is not None:
        return _Scan(kept.rows, kept.missing, kept.invalid, _types([t.upper() for t in kept.geometry_types]))
    rows, missing, invalid, types = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE g IS NULL OR ST_IsEmpty(g)), "
        f"count(*) FILTER (WHERE NOT ST_IsEmpty(g) AND NOT {valid_sql('g')}), "
        f"list(DISTINCT ST_GeometryType(g)) FILTER (WHERE NOT ST_IsEmpty(g)) FROM {_rows_of(layer)}"
    ).fetchone()
    return _Scan(int(rows), int(missing), int(invalid), _types(types))


def _first_invalid(con: Any, layer: _GeoParquet) -> list[tuple[int, str]]:
    """The first invalid rows with GEOS's reason (read back in shapely: DuckDB gives no reason)."""
    import shapely

    found = con.execute(
        f"SELECT n, ST_AsWKB(g) FROM {_rows_of(layer)} WHERE NOT ST_IsEmpty(g) AND NOT {valid_sql('g')} "
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
    with pq.ParquetFile(path) as written:  # not pq.read_table: its dataset layer imports pandas (0.3 s)
        table = written.read()
    column = {"encoding": "WKB", "geometry_types": [], **source.crs}
    geo = {"version": "1.0.0", "primary_column": source.geometry, "columns": {source.geometry: column}}
    pq.write_table(table.replace_schema_metadata({b"geo": json.dumps(geo).encode()}), path)
    return table.num_rows


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


@dataclass(frozen=True)
class JoinColumns:
    """The output's fields as the GeoPandas engine writes them: input_path's in file order (geometry in place),
    then join_path's, clashing names renamed (shared._rename_clashes)."""

    incoming: list[str]  # join_path's fields as the file names them, in file order
    renamed: dict[str, str]  # join_path field -> its output name, for the clashing ones
    names: list[str]  # every output column, in order

    def output_name(self, incoming: str) -> str:
        return self.renamed.get(incoming, incoming)


def join_columns(left: _GeoParquet, join: _GeoParquet) -> JoinColumns:
    incoming = [c for c in join.columns if c != join.geometry]
    renamed = _rename_clashes(list(left.columns), incoming, JOIN_SUFFIX)
    return JoinColumns(incoming, renamed, [*left.columns, *(renamed.get(c, c) for c in incoming)])


def refuse_invalid_inputs(ctx: RunContext, inspected: dict[str, tuple[_Scan, list[tuple[int, str]]]]) -> None:
    """Record each input's validity as every engine does, then refuse the first input with invalid geometries."""
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


def distance_in_crs_units(ctx: RunContext, crs: CRS) -> float:
    """within_distance's distance in input_path's units (eligible only where that CRS is projected and true
    to scale at the data: planar)."""
    return float(ctx.arguments["distance_meters"]) / linear_unit_metres(crs)


def record_predicate(ctx: RunContext, crs: CRS, input_rows: int) -> None:
    """The CRS record of the predicate's evaluation, as the GeoPandas engine writes it."""
    predicate = ctx.arguments["predicate"]
    if predicate == "within_distance":
        metric = to_metric(ctx, _CrsOnly(crs), "measured for within_distance")
        _record_planar(ctx, metric, input_rows)
        ctx.parameters["x-mapsmith:distance_in_analysis_units"] = metric.units(ctx.arguments["distance_meters"])
    else:
        _record_topological(ctx, crs, "join_path", f"the predicate '{predicate}' was evaluated")


def spatial_join_duckdb(ctx: RunContext) -> None:
    """spatial_join inside DuckDB, GeoParquet to GeoParquet: no feature passes through Python.

    The join is materialised once, sorted by (input row, join row) as the GeoPandas engine writes it,
    with the same fields, renaming and order; the counts are read from it and it is copied out. The order
    is kept because it is part of what a run promises: replay (provenance.compare) compares outputs row by
    row, and a parallel join's own order differs from run to run. Its cost, measured for issue 22 on
    bench_scale's 10,000,000 points x 10,000 polygons (inner, this SQL alone, CPU seconds on a loaded
    machine): 50.7 s and 1.8 GiB peak sorted against 38.4 s and 1.3 GiB unsorted; at 1,000,000 points the
    difference was within the noise.
    input_path's geometries are written as read (DuckDB copies WKB byte for byte) and every one was
    found valid, so the runner is told the output holds no invalid geometry instead of re-reading it.
    """
    from concurrent.futures import ThreadPoolExecutor

    import duckdb
    from pyproj import CRS

    from mapsmith.runner import OutputStats

    set_duckdb_engine(ctx)
    how, predicate = ctx.arguments["how"], ctx.arguments["predicate"]
    layers, _ = layers_problem(ctx)
    left, join = layers["input_path"], layers["join_path"]
    crs = CRS.from_wkt(ctx.inputs["input_path"].crs_wkt)
    columns = join_columns(left, join)
    renamed, names = columns.renamed, columns.names
    fields = [f"l.{_name(c)}" for c in left.columns] + [
        (f"CAST(r.{_name(c)} AS BIGINT)" if c in join.other_integers else f"r.{_name(c)}")
        + f" AS {_name(columns.output_name(c))}"
        for c in columns.incoming
    ]
    i, j = (_name(_spare_name(n, names)) for n in ("__input_row", "__join_row"))
    geometries = f"l.{_name(left.geometry)}::GEOMETRY, r.{_name(join.geometry)}::GEOMETRY"
    values: list[float] = []
    if predicate == "within_distance":
        # Eligible only where input_path's CRS is projected and true to scale: planar, in its units.
        values = [distance_in_crs_units(ctx, crs)]
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
                # a row's position across a folder's parts, not its part's row number alone: row 0 of two
                # parts are two rows (the order and the distinct counts below depend on it)
                con.execute(
                    f"CREATE TEMP TABLE joined AS SELECT {parts.duckdb_row_position(left.path, 'l')} AS {i}, "
                    f"{parts.duckdb_row_position(join.path, 'r')} AS {j}, {', '.join(fields)} "
                    f"FROM {parts.parquet_source(left.path, row_numbers=True)} AS l "
                    f"{'LEFT JOIN' if how == 'left' else 'JOIN'} "
                    f"{parts.parquet_source(join.path, row_numbers=True)} AS r ON {condition} "
                    f"ORDER BY {i}, {j}",
                    values,
                )
            except duckdb.Error as exc:  # invalid geometries may be why: their refusal says more
                failure = exc
            inspected = scanning.result()
        refuse_invalid_inputs(ctx, inspected)
        if failure is not None:
            raise failure
        record_predicate(ctx, crs, inspected["input_path"][0].rows)
        pairs, matched, join_matched, rows = con.execute(
            f"SELECT count({j}), count(DISTINCT {i}) FILTER (WHERE {j} IS NOT NULL), count(DISTINCT {j}), count(*) "
            "FROM joined"
        ).fetchone()
        scans = {key: scan for key, (scan, _) in inspected.items()}
        tally = _JoinTally(scans["input_path"].rows, scans["join_path"].rows, pairs, matched, join_matched)
        _record_spatial_join(ctx, tally, renamed)
        written = _copy_joined(ctx, con, names, rows, left)
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
    _check_written(ctx, tally, written)
    ctx.output_stats = OutputStats(feature_count=written, invalid_count=0, geometry_types=types)


def _copy_joined(ctx: RunContext, con: Any, names: list[str], rows: int, left: _GeoParquet) -> int:
    """COPY the sorted ``joined`` table (``rows`` rows) to the run's output, the rows written: one GeoParquet file,
    or, for an output_path ending in ``.parquet/``, parts part-00000 ... of about PART_BYTES, each one COPY of a
    range of the table's row ids. The table's rows are read in the order they were inserted, sorted
    (preserve_insertion_order), within each COPY, so the parts in listing order are the file's rows in its order.
    Parts are cut by row ids rather than by DuckDB's own file rotation, which a parallel COPY does out of row order
    (sql_layer_ops.copy_out writes its parts with one thread instead; the join's table lives on this connection)."""

    from mapsmith_opensource.sql_layer_ops import part_name  # sql_layer_ops imports this module

    target = ctx.temp_output
    assert target is not None
    select = f"SELECT {', '.join(_name(n) for n in names)} FROM joined"
    if not parts.is_folder_output(str(ctx.arguments.get("output_path"))):
        con.execute(f"COPY ({select}) TO {_text(str(target))} (FORMAT parquet)")
        return _declare_geoparquet(target, left)
    target.mkdir(exist_ok=True)
    start, size, written, number = 0, min(rows, FIRST_PART_ROWS), 0, 0
    while True:
        part = target / part_name(number)
        con.execute(
            f"COPY ({select} WHERE rowid >= {start} AND rowid < {start + size}) TO {_text(str(part))} (FORMAT parquet)"
        )
        written += _declare_geoparquet(part, left)
        start, number = start + size, number + 1
        if start >= rows:
            break
        if number == 1:  # the first part's bytes per row set the rows of the others
            size = max(1, int(PART_BYTES * size / max(part.stat().st_size, 1)))
    ctx.parameters["x-mapsmith:output_parts"] = number
    return written
