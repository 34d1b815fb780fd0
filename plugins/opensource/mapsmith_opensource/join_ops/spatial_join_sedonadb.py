"""spatial_join on SedonaDB, GeoParquet file to GeoParquet file: SedonaDB reads both files, counts their
validity, joins, orders and writes the output itself; no feature passes through Python.

The engine registered here has two paths. File to file (this module) is taken under the DuckDB engine's
conditions (join_ops.spatial_join_duckdb.file_join_problem and layers_problem: GeoParquet in and out, one
CRS, a planar within_distance, fields carried exactly) from FILE_MIN_FEATURES features (None, as measured:
only when MAPSMITH_SEDONADB_MIN_FEATURES asks); otherwise the run takes sedonadb_ops' WKB path, and the
manifest's notes say why. The rows, fields, names, order, counts, checks and CRS record are the GeoPandas
engine's (tests/scale/test_spatial_join_sedonadb.py, tests/vector/test_engine_parity.py).

How the GeoPandas engine's order is kept without sorting the joined rows whole (one ORDER BY over the
joined rows took 2.7 GiB at 10M points): the pairs -- input row, join row and join_path's fields, not
input_path's fields or geometry -- are found and sorted into a temporary Parquet file declared sorted;
input_path is then merged onto them by row (a sort-merge join, streaming) and written in that order. Row
positions are ``row_number() OVER ()`` over a scan of one file in one partition (``repartition_file_scans``
off in this engine's own SedonaDB context), which reads row groups in file order. Invalid geometries are
counted (verify.facts' query) and refused before any predicate is evaluated. Written by hand because no
library does it: the output's GeoParquet ``geo`` metadata (SedonaDB writes no bbox or geometry types; the
output's are counted in SedonaDB first, so the runner reads them from the footer instead of scanning the
output again).

It must never join layers in two CRS, evaluate a predicate it then keeps on invalid geometries, write an
output whose rows are in another order than the GeoPandas engine's, or import sedonadb when imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith_opensource import sedonadb_ops
from mapsmith_opensource.join_ops import points_in_polygons_sql as sql
from mapsmith_opensource.join_ops import spatial_join_duckdb as files
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

    from mapsmith.runner import RunContext
    from mapsmith.verify.facts import OutputFacts

# From how many features in the larger input the file-to-file path is taken by default; None: never, only when
# MAPSMITH_SEDONADB_MIN_FEATURES sets a threshold (it overrides every SedonaDB threshold). Measured for issue 22:
# ``MapSmith(env).run("spatial_join", {how: "inner"})`` on benchmarks/scale_data.make_inputs' points x 10,000
# zones, GeoParquet to GeoParquet (checks, digests and manifest included), one fresh process per run, interleaved
# with the raw engines' runs (goal_ops' SQL in SedonaDB and DuckDB), CPU seconds and peak RSS of the whole process
# from os.wait4; the engine forced with MAPSMITH_SEDONADB_MIN_FEATURES=0 (SedonaDB) or =10**12 (DuckDB). The
# 2-core machine was shared (load average 9-19), so CPU seconds decide; medians of 3, one run at 10M:
#   points   SedonaDB file to file   DuckDB engine      raw SedonaDB     raw DuckDB
#   100k     2.41 s / 412 MiB        1.71 s / 220 MiB   0.61 s / 211     0.82 s / 111
#   300k     3.27 s / 456 MiB        2.15 s / 267 MiB   0.96 s / 228     1.80 s / 152
#   1M       5.86 s / 560 MiB        5.59 s / 398 MiB   2.41 s / 267     4.09 s / 277
#   10M      37.8 s / 1,759 MiB      29.3 s / 2,180 MiB 18.9 s / 551     19.1 s / 943
# SedonaDB alone is the fastest engine, but this path reads input_path three times (validity and facts, the
# pairs, the merge) and sorts the pairs with join_path's fields: at 10M its queries took 5.6 + 15.7-22.3 + 1.4 +
# 8.0 CPU seconds. It never measured fastest through MapSmith, so DuckDB keeps spatial_join from DUCKDB_MIN_ROWS;
# at 10M it used less memory than the DuckDB engine (1.7 against 2.1 GiB): set the variable where memory, not
# time, is short.
FILE_MIN_FEATURES: int | None = None
KEYS = ("input_path", "join_path")
FILE_PATH_NOTE = (
    "engine path: file to file -- SedonaDB read input_path and join_path itself (GeoParquet), counted their null, "
    "empty and invalid geometries, found the pairs, ordered them as the GeoPandas engine does (input row, then "
    "join row) and wrote the output itself; no feature passed through Python"
)

REGISTRATIONS = (
    Registration(
        "spatial_join",
        "spatial_join_sedonadb",
        engine=sedonadb_ops.ENGINE,
        preference=sedonadb_ops.SEDONADB_PREFERENCE,
        eligible="spatial_join_eligible",
        validate="validate_spatial_join",
    ),
)


# -- eligibility -------------------------------------------------------------------------------


def file_path_problem(ctx: RunContext) -> str | None:
    """Why the file-to-file path cannot take this run, or None: installed, one CRS, large enough, then the
    DuckDB engine's own file conditions (the two file-to-file engines carry the same layers)."""
    what = "SedonaDB's spatial_join file to file"
    problem = sedonadb_ops._eligible(ctx, KEYS, FILE_MIN_FEATURES, what, "whole MapSmith runs: FILE_MIN_FEATURES")
    if problem:
        return problem
    problem = files.file_join_problem(ctx, "SedonaDB")
    if problem:
        return problem
    for key in KEYS:
        if not ctx.paths[key].is_file():
            return f"{key} is a folder of parts; the SedonaDB engine joins one GeoParquet file, in its row order"
        if not ctx.inputs[key].feature_count:
            return f"{key} has no features; the GeoPandas engine writes the empty join"
    return files.layers_problem(ctx, "SedonaDB")[1]


def spatial_join_eligible(ctx: RunContext) -> str | None:
    """Why neither of SedonaDB's paths can take this spatial_join, or None when one can."""
    problem = file_path_problem(ctx)
    if problem is None:
        return None
    wkb = sedonadb_ops.wkb_join_eligible(ctx)
    if wkb is None:
        return None
    return problem if problem == wkb else f"file to file: {problem}; the WKB path: {wkb}"


# -- the run -----------------------------------------------------------------------------------


@cache
def _context() -> Any:
    """This engine's own SedonaDB context: its settings would slow or reorder the other engines' queries.

    One partition per file scan keeps ``row_number() OVER ()`` in file order; a sort-merge join merges the
    sorted pairs with input_path without holding either side."""
    sd = sedonadb_ops.new_context()
    sd.sql("SET datafusion.optimizer.repartition_file_scans = false").execute()
    sd.sql("SET datafusion.optimizer.prefer_hash_join = false").execute()
    return sd


@dataclass(frozen=True)
class _Names:
    """Names this run gives SedonaDB: views and the pairs table unique to it, and columns no field has."""

    input_view: str
    join_view: str
    pairs: str
    input_row: str
    join_row: str
    geometry: str
    corners: tuple[str, str, str, str]  # each pair's input geometry's xmin, ymin, xmax, ymax


def _names(taken: list[str]) -> _Names:
    import uuid

    suffix = uuid.uuid4().hex
    q = sql.quote
    row, join_row, geometry = (q(files._spare_name(n, taken)) for n in ("__input_row", "__join_row", "__geometry"))
    xmin, ymin, xmax, ymax = (q(files._spare_name(f"__{c}", taken)) for c in ("xmin", "ymin", "xmax", "ymax"))
    return _Names(
        f"mapsmith_in_{suffix}",
        f"mapsmith_join_{suffix}",
        f"mapsmith_pairs_{suffix}",
        row,
        join_row,
        geometry,
        (xmin, ymin, xmax, ymax),
    )


def _facts(sd: Any, source: str, geometry: str, validity: bool = True) -> OutputFacts:
    """verify.facts' query in SedonaDB (without ``validity`` the invalid count is 0, not counted)."""
    from mapsmith.verify.facts import facts_from_row, facts_sql

    return facts_from_row(sd.sql(facts_sql(source, geometry, validity)).to_arrow_table().to_pylist()[0])


def _inspect(sd: Any, views: dict[str, str], layers: dict[str, files._GeoParquet]) -> dict[str, Any]:
    """Each input's validity counted by SedonaDB (verify.facts' query), or taken from the facts the input's header
    read counted when the file is unchanged since (layer_facts.counted_facts: measured on 10,000,000 points, the
    query took 3.4 s of a 21.6 s run), with the first invalid rows and GEOS's reasons read back only when there are
    some (SedonaDB gives no reason)."""
    from mapsmith_opensource.layer_facts import counted_facts

    out: dict[str, Any] = {}
    for key, layer in layers.items():
        facts = counted_facts(layer.path) or _facts(sd, views[key], sql.quote(layer.geometry))
        scan = files._Scan(facts.rows, facts.missing, facts.invalid, facts.geometry_types)
        invalid = sql.first_invalid_points(layer.path, layer.geometry) if facts.invalid else []
        out[key] = ((scan, invalid), facts)
    return out


def _condition(ctx: RunContext, crs: Any, g: str) -> str:
    """The predicate on the geometries ``g`` of ``l`` (input_path) and ``r`` (join_path), as the GeoPandas
    engine evaluates it: within_distance planar, in input_path's units (eligibility)."""
    predicate = ctx.arguments["predicate"]
    if predicate == "within_distance":
        return f"{SPATIAL_PREDICATES['dwithin']}(l.{g}, r.{g}, {files.distance_in_crs_units(ctx, crs)!r})"
    return f"{SPATIAL_PREDICATES[predicate]}(l.{g}, r.{g})"


def _geo_metadata(layer: files._GeoParquet, facts: OutputFacts | None) -> str:
    """The output's GeoParquet metadata: input_path's geometry column and CRS as its file has them, with the
    types and extent SedonaDB counted (left out when not counted: the runner then reads them from the rows)."""
    column: dict[str, Any] = {"encoding": "WKB", "geometry_types": list(facts.geometry_types) if facts else []}
    if facts is not None and facts.bounds is not None:
        column["bbox"] = list(facts.bounds)
    geo = {"version": "1.0.0", "primary_column": layer.geometry, "columns": {layer.geometry: {**column, **layer.crs}}}
    return json.dumps(geo)


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _pairs_sql(
    ctx: RunContext,
    n: _Names,
    layers: dict[str, files._GeoParquet],
    columns: files.JoinColumns,
    crs: Any,
    extent: bool,
) -> str:
    """The pairs, sorted: (input row, join row) and join_path's fields as written (renamed, integers widened to
    int64 as the GeoPandas engine writes them); with how='left' an unmatched input row has one pair, no join row.
    ``extent``: each pair also carries its input geometry's corners, from which the output's extent is taken
    (cheaper than reading the matched geometries again)."""
    q, g = sql.quote, n.geometry
    corners = "".join(
        f", {f}(l.{g}) AS {name}"
        for f, name in zip(("ST_XMin", "ST_YMin", "ST_XMax", "ST_YMax"), n.corners, strict=True)
    )
    left, join = layers["input_path"], layers["join_path"]
    payload = "".join(
        ", "
        + (f"CAST(r.{q(c)} AS BIGINT)" if c in join.other_integers else f"r.{q(c)}")
        + f" AS {q(columns.output_name(c))}"
        for c in columns.incoming
    )
    carried = "".join(f", {q(c)}" for c in columns.incoming)
    return (
        f"SELECT l.{n.input_row} AS {n.input_row}, r.{n.join_row} AS {n.join_row}{payload}{corners if extent else ''} "
        f"FROM (SELECT row_number() OVER () AS {n.input_row}, {q(left.geometry)} AS {g} FROM {n.input_view}) AS l "
        f"{'LEFT JOIN' if ctx.arguments['how'] == 'left' else 'JOIN'} "
        f"(SELECT row_number() OVER () AS {n.join_row}, {q(join.geometry)} AS {g}{carried} FROM {n.join_view}) AS r "
        f"ON {_condition(ctx, crs, g)} ORDER BY {n.input_row}, {n.join_row}"
    )


def spatial_join_sedonadb(ctx: RunContext) -> None:
    """SedonaDB's spatial_join: file to file where file_path_problem allows, else sedonadb_ops' WKB path."""
    problem = file_path_problem(ctx)
    if problem is not None:
        sedonadb_ops.spatial_join_wkb(ctx, problem)
        return
    _file_to_file(ctx)


def _file_to_file(ctx: RunContext) -> None:
    import sedonadb
    from pyproj import CRS

    from mapsmith.runner import OutputStats
    from mapsmith.verify.facts import OutputFacts as FactsOf

    sedonadb_ops._record_choice(ctx, KEYS, FILE_MIN_FEATURES)
    ctx.set_engine(sedonadb_ops.ENGINE, sedonadb.__version__)
    ctx.notes.append(FILE_PATH_NOTE)
    how = ctx.arguments["how"]
    layers, _ = files.layers_problem(ctx, "SedonaDB")
    left, join = layers["input_path"], layers["join_path"]
    wkt = ctx.inputs["input_path"].crs_wkt
    assert wkt is not None  # eligible only with both CRS known
    crs = CRS.from_wkt(wkt)
    columns = files.join_columns(left, join)
    n = _names(columns.names)
    q = sql.quote
    assert ctx.temp_output is not None
    pairs_path = ctx.temp_output.with_name(ctx.temp_output.name + ".pairs.parquet")
    sd = _context()
    views = {"input_path": n.input_view, "join_path": n.join_view}
    try:
        for key, layer in layers.items():
            # Both CRS are equal (eligibility) and SedonaDB compares them by name: both are read without one,
            # and the output's is input_path's as its file gives it (_geo_metadata).
            nocrs = {layer.geometry: {"encoding": "WKB"}}
            sedonadb_ops.read_parquet(sd, [layer.path], geometry_columns=nocrs).to_view(views[key])
        inspected = _inspect(sd, views, layers)
        files.refuse_invalid_inputs(ctx, {k: v for k, (v, _) in inspected.items()})
        in_facts = inspected["input_path"][1]
        files.record_predicate(ctx, crs, in_facts.rows)
        # An inner join of a layer of one geometry type writes that type: only the extent is to be counted.
        extent = how == "inner" and len(in_facts.geometry_types) == 1
        pairs_sql = _pairs_sql(ctx, n, layers, columns, crs, extent)
        sd.sql(pairs_sql).to_parquet(str(pairs_path), geoparquet_version="none")
        sd.sql(
            f"CREATE EXTERNAL TABLE {n.pairs} STORED AS PARQUET LOCATION {_text(str(pairs_path))} "
            f"WITH ORDER ({n.input_row} ASC, {n.join_row} ASC)"
        ).execute()
        found = (
            sd.sql(
                f"SELECT count(*) AS written, count({n.join_row}) AS pairs, count(DISTINCT {n.input_row}) FILTER "
                f"(WHERE {n.join_row} IS NOT NULL) AS matched, count(DISTINCT {n.join_row}) AS join_matched"
                + (f", min({n.corners[0]}) AS xmin, min({n.corners[1]}) AS ymin, " if extent else "")
                + (f"max({n.corners[2]}) AS xmax, max({n.corners[3]}) AS ymax" if extent else "")
                + f" FROM {n.pairs}"
            )
            .to_arrow_table()
            .to_pylist()[0]
        )
        rows, pairs, matched, join_matched = (int(found[k]) for k in ("written", "pairs", "matched", "join_matched"))
        tally = _JoinTally(in_facts.rows, inspected["join_path"][1].rows, pairs, matched, join_matched)
        _record_spatial_join(ctx, tally, columns.renamed)
        numbered = f"(SELECT row_number() OVER () AS {n.input_row}, * FROM {n.input_view})"
        merged = f"{n.pairs} AS x JOIN {numbered} AS l ON x.{n.input_row} = l.{n.input_row}"
        if how == "left" or matched == in_facts.rows:
            out_facts: OutputFacts | None = in_facts  # every input feature is written, at least once
        elif rows == 0:
            out_facts = None
        elif extent:  # a predicate never holds for a missing geometry, and every input geometry was valid
            corners = [float(found[k]) for k in ("xmin", "ymin", "xmax", "ymax")]
            xmin, ymin, xmax, ymax = corners
            out_facts = FactsOf(rows, 0, 0, in_facts.geometry_types, (xmin, ymin, xmax, ymax))
        else:  # the matched input features only: their types and extent, counted where they are
            out_facts = _facts(sd, f"(SELECT l.{q(left.geometry)} AS {n.geometry} FROM {merged})", n.geometry)
        fields = [f"l.{q(c)} AS {q(c)}" for c in left.columns] + [
            f"x.{q(columns.output_name(c))} AS {q(columns.output_name(c))}" for c in columns.incoming
        ]
        sedonadb_ops.write_geoparquet(
            sd,
            f"SELECT {', '.join(fields)} FROM {merged} ORDER BY x.{n.input_row}, x.{n.join_row}",
            ctx.temp_output,
            _geo_metadata(left, out_facts),
        )
    finally:
        sedonadb_ops.drop_views(sd, (*views.values(), n.pairs))
        pairs_path.unlink(missing_ok=True)
    written = _rows_written(ctx.temp_output)
    _check_written(ctx, tally, written)
    types = out_facts.geometry_types if out_facts is not None else ()
    # input_path's geometries are written as read and every one was counted valid above.
    ctx.output_stats = OutputStats(feature_count=written, invalid_count=0, geometry_types=types)


def _rows_written(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)
