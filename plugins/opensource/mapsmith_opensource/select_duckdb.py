"""select_features inside DuckDB, GeoParquet file to GeoParquet file, for the attribute criteria (``where``, and
``field`` with ``min_value`` / ``max_value``): no feature of input_path passes through Python. A folder of plain
parts is read as sql_layer_ops reads it (listing order; a field is all-null only when it is in every part).

The condition is parsed and bound by ``mapsmith.expressions`` exactly as the GeoPandas engine parses and binds it
(select_ops.select_features), against the kinds the file's Arrow schema gives each field. The SQL DuckDB runs is
then generated here from the parsed tree, node by node: a field is a double-quoted identifier, a value a typed
literal (text quoted with its quotes doubled, a number typed BIGINT or DOUBLE as the parser read it), so the caller's
text never reaches DuckDB, only values the parser read out of it. Written by hand because no library renders
this tree as SQL, and because each node must keep the GeoPandas evaluator's three-valued meaning:

- a missing value makes a comparison unknown, as in SQL; a float NaN counts as missing, as pandas counts it,
  so NaN is turned into NULL before it is compared (DuckDB would order NaN above every number);
- ``BETWEEN`` is unknown when any of its three values is missing (SQL's ``x >= lo AND x <= hi`` can be false
  with a missing bound), so it is written out with that case first;
- ``AND``, ``OR`` and ``NOT`` are SQL's own Kleene logic, the evaluator's too.

Where the two could differ the run stays with GeoPandas, and the router's record says why: a spatial relation
(shapely's STRtree tests it); a field of a kind DuckDB compares otherwise (dates and times, decimals, lists,
and float32 or uint64, which numpy compares with a Python number in their own precision); a field with no
value in any row that pandas reads as of no kind (GeoPandas binds it to anything); a date literal; an integer
literal beyond int64; a LIKE pattern ending in its escape character (DuckDB refuses it; the evaluator reads it
as that character). Counts per criterion (matched, not matched, unknown because
null) are one aggregate query over the referenced fields; the rows are written by one COPY in file order; the
validity scan of input_path runs beside them, as reproject_layer's does.

What this module must never do: splice the caller's text into SQL, select a row the GeoPandas engine would not
select, or write a field, a row order or a CRS other than the GeoPandas engine's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mapsmith import expressions as ex
from mapsmith import parts
from mapsmith.errors import ArgumentError
from mapsmith_opensource.join_ops.spatial_join_duckdb import (
    DUCKDB_PREFERENCE,
    _GeoParquet,
    _geoparquet,
    _name,
    _text,
    duckdb_database,
)
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.sql_layer_ops import (
    ENGINE,
    _inspect_input,
    _layer_problem,
    _record_input_validity,
    _set_engine,
    copy_out,
)

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

# From how many input features the router prefers this engine; below, GeoPandas runs: the smallest size
# benchmarks/bench_thresholds.py measured (docs/benchmarks.md, "Router thresholds"; whole MapSmith runs, a fresh
# process each, warmed as the server's worker is and GeoPandas imported, medians of 5): DuckDB 0.08-0.09 s against
# GeoPandas' 0.14-0.15 s from 10 to 10,000 features, 0.11 s against 0.32 s at 100,000. An earlier measurement, with
# DuckDB's start on every run's clock, had measured nothing below 1,000; tests/docs/test_thresholds_doc.py holds
# the constant to the committed measurement.
SELECT_MIN_ROWS = 10
INT64 = (-(2**63), 2**63 - 1)

REGISTRATIONS = (
    Registration(
        "select_features",
        "select_features_duckdb",
        engine=ENGINE,
        preference=DUCKDB_PREFERENCE,
        eligible="select_eligible",
        writes_parts=True,  # sql_layer_ops.copy_out
    ),
)


# -- the fields' kinds -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Kinds:
    """Each non-geometry field's kind as expressions.field_kinds gives it for the frame GeoPandas reads, or why
    this engine does not compare it (``unsupported``), and the float fields (whose NaN is missing)."""

    kinds: dict[str, str]
    unsupported: dict[str, str]
    floats: frozenset[str]


def _all_null(metas: list[Any], index: int) -> bool | None:
    """Whether a column has no value in any row of any part (footer statistics), or None when a row group has
    none."""
    nulls = rows = 0
    for meta in metas:
        for group in range(meta.num_row_groups):
            column = meta.row_group(group).column(index)
            stats = column.statistics
            if stats is None or not stats.has_null_count:
                return None
            nulls += stats.null_count
        rows += meta.num_rows
    return nulls == rows


def _kinds(layer: _GeoParquet) -> _Kinds:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pyarrow.types as t

    metas = [pq.read_metadata(file) for file in parts.dataset_files(layer.path)]  # a folder's parts share a schema
    schema = metas[0].schema.to_arrow_schema()
    keys = parts.hive_key_types(layer.path) if parts.is_parts_folder(layer.path) else {}
    kinds: dict[str, str] = {}
    unsupported: dict[str, str] = {}
    floats: set[str] = set()
    for name in layer.columns:
        if name == layer.geometry:
            continue
        if name in keys:  # a hive key: int32 or text, with a value in at least one subfolder (pyarrow typed it)
            kinds[name] = "number" if keys[name] == "int32" else "text"
            continue
        arrow = schema.field(name).type
        if (t.is_integer(arrow) and not t.is_uint64(arrow)) or t.is_float64(arrow):
            kinds[name] = "number"  # pandas reads an all-null number column as floats: still a number
            if t.is_float64(arrow):
                floats.add(name)
            continue
        if t.is_floating(arrow) or t.is_uint64(arrow):
            # numpy compares a float32 column with a Python number in single precision (NEP 50): 0.1 there is
            # float32's 0.1, where DuckDB would widen the column and compare with the double 0.1
            unsupported[name] = f"of type {arrow}, which pandas and DuckDB compare with a number differently"
            continue
        if not (t.is_boolean(arrow) or t.is_string(arrow) or t.is_large_string(arrow)):
            unsupported[name] = f"of type {arrow}"
            continue
        empty = _all_null(metas, schema.get_field_index(name))
        if empty is None:
            unsupported[name] = "without null counts in its footer statistics"
            continue
        kind = "boolean" if t.is_boolean(arrow) else "text"
        if empty:  # the kind pandas gives a column of this type with no value (its version decides)
            kind = ex.field_kinds(pa.table({name: pa.nulls(1, arrow)}).to_pandas())[name]
        if kind == "unknown":
            unsupported[name] = "empty in every row (GeoPandas binds it as of no kind)"
        else:
            kinds[name] = kind
    return _Kinds(kinds, unsupported, frozenset(floats))


# -- the tree as SQL ---------------------------------------------------------------------------


class _NotHere(Exception):
    """A condition this engine would not evaluate as the GeoPandas engine does: the reason."""


class _SQL:
    """One bound condition rendered as DuckDB SQL that is NULL exactly where the evaluator says unknown."""

    def __init__(self, kinds: _Kinds) -> None:
        self.kinds = kinds

    def operand(self, operand: ex.Operand) -> str:
        if isinstance(operand, ex.Field):
            name = _name(operand.name)
            if operand.name in self.kinds.floats:
                return f"(CASE WHEN isnan({name}) THEN NULL ELSE {name} END)"
            return name
        value, kind = operand.value, operand.kind
        if kind == "text":
            return _text(str(value))
        if kind == "boolean":
            return "TRUE" if value else "FALSE"
        if kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _NotHere(f"the value {value!r} is not a plain number")
            if isinstance(value, int):
                if not INT64[0] <= value <= INT64[1]:
                    raise _NotHere(f"the integer {value} lies beyond 64-bit integers")
                return f"CAST({value} AS BIGINT)"
            return f"CAST({value!r} AS DOUBLE)"
        raise _NotHere(f"a {kind} value is compared (dates and times stay with GeoPandas)")

    def node(self, node: ex.Node) -> str:
        if isinstance(node, ex.And | ex.Or):
            word = " AND " if isinstance(node, ex.And) else " OR "
            return "(" + word.join(self.node(term) for term in node.operands) + ")"
        if isinstance(node, ex.Not):
            return f"(NOT {self.node(node.operand)})"
        if isinstance(node, ex.Compare):
            op = "<>" if node.op == "!=" else node.op
            return f"({self.operand(node.left)} {op} {self.operand(node.right)})"
        if isinstance(node, ex.IsNull):
            return f"({self.operand(node.operand)} IS {'NOT ' if node.negated else ''}NULL)"
        if isinstance(node, ex.InList):
            values = ", ".join(self.operand(v) for v in node.values)
            return f"({self.operand(node.operand)} {'NOT ' if node.negated else ''}IN ({values}))"
        if isinstance(node, ex.Between):
            x, lo, hi = (self.operand(o) for o in (node.operand, node.low, node.high))
            missing = f"{x} IS NULL OR {lo} IS NULL OR {hi} IS NULL"
            inside = f"CASE WHEN {missing} THEN NULL ELSE ({x} >= {lo} AND {x} <= {hi}) END"
            return f"({'NOT ' if node.negated else ''}({inside}))"
        if isinstance(node, ex.Like):
            pattern = str(node.pattern.value)
            if node.escape is not None and _ends_in_escape(pattern, node.escape):
                raise _NotHere("the LIKE pattern ends in its escape character")
            escape = "" if node.escape is None else f" ESCAPE {_text(node.escape)}"
            negation = "NOT " if node.negated else ""
            return f"({self.operand(node.operand)} {negation}LIKE {_text(pattern)}{escape})"
        if isinstance(node, ex.Truthy):
            return f"({self.operand(node.operand)} = TRUE)"
        raise _NotHere(f"the condition holds a {type(node).__name__}")


def _ends_in_escape(pattern: str, escape: str) -> bool:
    """Whether the pattern's last character is an escape escaping nothing (read as in expressions._like_regex)."""
    i = 0
    while i < len(pattern):
        if pattern[i] == escape:
            if i + 1 == len(pattern):
                return True
            i += 2
        else:
            i += 1
    return False


def _conditions(arguments: dict[str, Any]) -> list[tuple[str, ex.Expression]]:
    """The attribute criteria as the GeoPandas engine builds them, in its order: ("where" | "range", tree)."""
    out: list[tuple[str, ex.Expression]] = []
    if arguments.get("where") is not None:
        out.append(("where", ex.parse(arguments["where"], argument="where")))
    if arguments.get("field") is not None:
        condition = ex.range_condition(arguments["field"], arguments.get("min_value"), arguments.get("max_value"))
        out.append(("range", condition))
    return out


def _compiled(ctx: RunContext, layer: _GeoParquet) -> list[tuple[str, ex.Expression, str]]:
    """Each criterion with its SQL; raises _NotHere with the reason this engine leaves the run to GeoPandas."""
    from mapsmith_opensource.select_ops import _check_criteria

    try:
        _check_criteria(ctx.arguments)
        conditions = _conditions(ctx.arguments)
    except ArgumentError as exc:
        raise _NotHere(f"the criteria are refused ({exc.code}); the GeoPandas engine says why") from exc
    kinds = _kinds(layer)
    out = []
    for mode, expression in conditions:
        for field in expression.fields:
            if field in kinds.unsupported:
                raise _NotHere(f"{mode} reads the field {field!r}, {kinds.unsupported[field]}")
        try:
            ex.bind(expression, kinds.kinds)
        except ex.ExpressionError as exc:
            raise _NotHere(f"{mode} does not bind ({exc.code}); the GeoPandas engine says why") from exc
        out.append((mode, expression, _SQL(kinds).node(expression.root)))
    return out


def select_eligible(ctx: RunContext) -> str | None:
    """Why DuckDB cannot take this select_features, or None when it can."""
    if ctx.arguments.get("relation") is not None or ctx.arguments.get("relation_path") is not None:
        return "a spatial relation is tested by the GeoPandas engine (shapely's STRtree); DuckDB selects by attribute"
    problem, layer = _layer_problem(ctx, "select_features", SELECT_MIN_ROWS)
    if problem is not None:
        return problem
    assert layer is not None
    try:
        if not _compiled(ctx, layer):
            return "no attribute criterion is given; the GeoPandas engine says what select_features needs"
    except _NotHere as exc:
        return f"{exc}; the GeoPandas engine evaluates it"
    return None


# -- the run -----------------------------------------------------------------------------------


def _report(mode: str, expression: ex.Expression, true: int, false: int, total: int, args: dict[str, Any]) -> Any:
    """select_ops' criterion report, from the counts DuckDB made."""
    from mapsmith_opensource.select_ops import attribute_report

    if mode == "where":
        return attribute_report(mode, true, false, total, expression=expression.canonical())
    return attribute_report(
        mode,
        true,
        false,
        total,
        field=args["field"],
        min_value=args.get("min_value"),
        max_value=args.get("max_value"),
        condition=expression.canonical(),
    )


def select_features_duckdb(ctx: RunContext) -> None:
    """select_features by attribute inside DuckDB: one aggregate for the counts, one COPY for the rows."""
    from concurrent.futures import ThreadPoolExecutor

    from mapsmith.runner import OutputStats
    from mapsmith_opensource.select_ops import _check_written, announce, answer, note_unknown

    _set_engine(ctx)
    args = ctx.arguments
    layer = _geoparquet(ctx.paths["input_path"], "input_path")
    compiled = _compiled(ctx, layer)
    source = parts.parquet_source(layer.path)
    selected = " AND ".join(f"({sql})" for _, _, sql in compiled)
    counts = ", ".join(
        f"count(*) FILTER (WHERE ({sql}) IS TRUE), count(*) FILTER (WHERE ({sql}) IS FALSE)" for _, _, sql in compiled
    )
    assert ctx.temp_output is not None
    db = duckdb_database()
    con, scanner = db.cursor(), db.cursor()
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            scanning = pool.submit(_inspect_input, scanner, layer)
            found = con.execute(f"SELECT count(*), {counts} FROM {source}").fetchone()
            written = copy_out(
                ctx, con, f"SELECT {', '.join(_name(c) for c in layer.columns)} FROM {source} WHERE {selected}", layer
            )
            inspected = scanning.result()
    finally:
        con.close()
        scanner.close()
    scan = _record_input_validity(ctx, inspected)
    count, total = int(written), int(found[0])
    criteria = []
    for i, (mode, expression, _) in enumerate(compiled):
        true, false = int(found[1 + 2 * i]), int(found[2 + 2 * i])
        if mode == "where":
            ctx.parameters["x-mapsmith:where_canonical"] = expression.canonical()
        criteria.append(_report(mode, expression, true, false, total, args))
        note_unknown(ctx, "where" if mode == "where" else "field", total - true - false, expression.fields)
    announce(ctx, count, total, criteria)
    _check_written(ctx, count)
    ctx.answer = answer(count, total, criteria)
    # Selected features are written as read: with no missing or invalid input geometry and one type, so is the
    # output. Otherwise the runner counts the written file itself.
    if scan.invalid == 0 and scan.missing == 0 and len(scan.types) == 1:
        ctx.output_stats = OutputStats(feature_count=count, invalid_count=0, geometry_types=scan.types if count else ())
