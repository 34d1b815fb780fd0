"""The parser wall of run_sql: DuckDB's own parser turns the SQL into an AST, and the AST is checked.

The SQL is written by a model, so it is treated as hostile. Before anything runs, ``analyse`` checks:
exactly one SELECT; every table function on an allow list; every dataset path a string literal that
passes ``Workspace.resolve`` (the same checks as a tool's path argument), naming one existing file of
a format whose bytes cannot point GDAL at other files; every ``layer`` a string literal; no function
that reads the environment or the settings; every CRS argument of ST_Transform / ST_SetCRS a string
literal passed to the CRS guard. ``mapsmith_opensource.sql_ops`` runs what passed.

This module must never accept a construct it does not understand: anything not on an allow list is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith import crsguard, gdalpolicy, parts
from mapsmith.errors import InputError, MapSmithError
from mapsmith_opensource.duckdb_spatial import text_literal
from mapsmith_opensource.sql_encodings import (
    encoding_option_node,
    is_encoding_option,
    shapefile_encoding,
    string_constant,
)

if TYPE_CHECKING:
    from mapsmith.workspace import Workspace


SQL_ARGUMENT = "sql"
SLOT = "sql_paths"  # manifest inputs[].argument: the files the SQL reads, sql_paths[0], sql_paths[1] ...

# Table functions that read one dataset: name -> the named parameters accepted (anything else, such
# as ST_Read's sibling_files or open_options, or read_csv's rejects_table, is refused).
_CSV_OPTIONS = frozenset(
    {"header", "delim", "sep", "quote", "escape", "columns", "auto_detect", "types", "dtypes", "names", "skip"}
    | {"all_varchar", "dateformat", "timestampformat", "nullstr", "decimal_separator", "sample_size"}
    | {"normalize_names", "new_line", "comment", "max_line_size"}
)
READERS: dict[str, frozenset[str]] = {
    # allowed_drivers: whatever is given is replaced by the one driver the file's extension names
    "st_read": frozenset(
        {"layer", "keep_wkb", "max_batch_size", "sequential_layer_scan", "spatial_filter_box", "allowed_drivers"}
    ),
    "st_readshp": frozenset({"encoding"}),
    "st_readosm": frozenset(),
    "read_parquet": frozenset({"binary_as_string", "file_row_number"}),
    "parquet_scan": frozenset({"binary_as_string", "file_row_number"}),
    "read_csv": _CSV_OPTIONS,
    "read_csv_auto": _CSV_OPTIONS,
    "read_json": frozenset({"format", "records", "columns", "maximum_object_size"}),
    "read_json_auto": frozenset({"format", "records", "columns", "maximum_object_size"}),
    "read_ndjson": frozenset({"columns", "maximum_object_size"}),
    "read_ndjson_auto": frozenset({"columns", "maximum_object_size"}),
}
# Table functions that read nothing: generators.
GENERATORS = frozenset({"range", "generate_series", "unnest", "st_generatepoints"})
# Scalar functions refused wherever they appear: they read the process's environment or settings, or
# run SQL text the checks never saw. (Table functions not in READERS or GENERATORS are refused anyway.)
REFUSED_FUNCTIONS = frozenset(
    {"getenv", "current_setting", "json_execute_serialized_sql", "json_deserialize_sql", "query", "query_table"}
    | {"read_text", "read_blob", "glob", "sniff_csv", "set_variable", "getvariable", "current_user"}
)
REFUSED_PREFIXES = ("duckdb_", "pragma_", "parquet_", "st_read_meta", "which_secret", "enable_", "disable_")
# Functions whose CRS arguments (by position) must be string literals passed to the CRS guard.
CRS_ARGUMENTS = {"st_transform": (1, 2), "st_setcrs": (1,)}
# The formats a dataset path may name, each with how its first bytes must look. GDAL chooses its
# driver from the bytes, not the name: a ".csv" holding a VRT would make GDAL open any file it names
# (measured: a VRT inside the workspace read a file outside it), so XML is refused in every text format.
MAGIC: dict[str, Callable[[bytes], bool]] = {
    ".gpkg": lambda b: b.startswith(b"SQLite format 3\x00"),
    ".parquet": lambda b: b.startswith(b"PAR1"),
    ".geoparquet": lambda b: b.startswith(b"PAR1"),
    ".fgb": lambda b: b.startswith(b"fgb\x03"),
    ".shp": lambda b: b.startswith(b"\x00\x00\x27\x0a"),
    ".geojson": lambda b: _first_char(b) in (b"{", b"["),
    ".json": lambda b: _first_char(b) in (b"{", b"["),
    ".ndjson": lambda b: _first_char(b) in (b"{", b""),
    ".geojsonl": lambda b: _first_char(b) in (b"{", b""),
    ".csv": lambda b: _first_char(b) not in (b"<", b"\x00") and b"<" not in b[:1].strip(),
    ".tsv": lambda b: _first_char(b) not in (b"<", b"\x00"),
    ".pbf": lambda b: not b.lstrip().startswith(b"<"),
}
GLOB_CHARACTERS = frozenset("*?[]{}")

HINT_SINGLE_SELECT = "send one SELECT statement; write the result with output_path, not COPY or CREATE"
HINT_LITERAL = (
    "name each dataset as a plain string literal inside the function call, e.g. "
    "ST_Read('parcels.gpkg') or read_parquet('points.parquet'); no expressions, variables or lists built at run time"
)


class SQLRefused(InputError):
    """The SQL of run_sql was refused before it ran; ``code`` names the rule (SQL_*)."""

    code = "SQL_REFUSED"


def _first_char(head: bytes) -> bytes:
    body = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return body[:1]


def _no_crs_guard(text: str, argument: str) -> None:
    """Stand-in for the CRS-definition guard; the integrator wires in ``check_crs_argument``."""


@dataclass
class Analysis:
    """What the checks found in one statement."""

    statement: str
    reads: list[tuple[str, str, Path, str | None]] = field(default_factory=list)  # (function, given, path, layer)
    crs_literals: list[str] = field(default_factory=list)
    transforms: bool = False  # ST_Transform / ST_SetCRS / ST_FlipCoordinates appear
    encodings: dict[str, str] = field(default_factory=dict)  # shapefile path as given -> its .cpg encoding


# -- the parser wall ------------------------------------------------------------------------------


def parse_statement(sql: str) -> tuple[str, dict[str, Any]]:
    """The one statement of ``sql`` and its AST as DuckDB's parser builds it; refusals are SQL_*."""
    import duckdb

    if not isinstance(sql, str) or not sql.strip():
        raise SQLRefused(
            "sql is empty", code="SQL_PARSE_ERROR", evidence={"argument": SQL_ARGUMENT}, hint=HINT_SINGLE_SELECT
        )
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise SQLRefused(
            f"DuckDB cannot parse the SQL: {exc}",
            code="SQL_PARSE_ERROR",
            evidence={"argument": SQL_ARGUMENT, "error": str(exc)[:300]},
            hint="fix the syntax (DuckDB dialect) and send one SELECT",
        ) from exc
    if len(statements) != 1:
        raise SQLRefused(
            f"sql holds {len(statements)} statements; run_sql runs exactly one SELECT",
            code="SQL_MULTIPLE_STATEMENTS",
            evidence={"argument": SQL_ARGUMENT, "statements": len(statements)},
            hint=HINT_SINGLE_SELECT,
        )
    kind = statements[0].type.name
    if kind != "SELECT":
        raise SQLRefused(
            f"sql is a {kind} statement; run_sql runs only a SELECT",
            code="SQL_NOT_SELECT",
            evidence={"argument": SQL_ARGUMENT, "statement_type": kind},
            hint=HINT_SINGLE_SELECT,
        )
    # The text run later is this statement's own text; PRAGMA arrives here rewritten as a SELECT over
    # pragma_* functions, which the function checks refuse.
    text = statements[0].query
    con = duckdb.connect(":memory:", config={"enable_external_access": False, "autoload_known_extensions": False})
    try:
        (raw,) = con.execute(f"SELECT json_serialize_sql({text_literal(text)})").fetchone()
    finally:
        con.close()
    tree = json.loads(raw)
    if tree.get("error") or len(tree.get("statements", [])) != 1:
        raise SQLRefused(
            f"DuckDB cannot serialise the statement: {tree.get('error_message', 'not one SELECT')}",
            code="SQL_NOT_SELECT",
            evidence={"argument": SQL_ARGUMENT, "error": str(tree.get("error_message"))[:300]},
            hint=HINT_SINGLE_SELECT,
        )
    return text, tree["statements"][0]


def analyse(
    sql: str,
    workspace: Workspace,
    check_crs_argument: Callable[[str, str], None] = _no_crs_guard,
) -> Analysis:
    """Check one statement against every rule of this module; the files it reads, resolved."""
    text, tree = parse_statement(sql)
    found = Analysis(text)
    # A CRS can hide in a cast's type modifier (x::GEOMETRY('+proj=... +nadgrids=/outside')), where the
    # expression walk below never looks: every such string is judged like a CRS argument.
    for _type_name, modifier in crsguard.type_modifier_crs_strings(tree):
        check_crs_argument(modifier, SQL_ARGUMENT)
        found.crs_literals.append(modifier)
    _walk_statement(tree, found, workspace, check_crs_argument, scope=frozenset())
    found.statement = _deparse(tree)
    return found


def _deparse(tree: dict[str, Any]) -> str:
    """SQL text for a checked AST (with its paths resolved); run_sql checks that text once more."""
    import duckdb

    con = duckdb.connect(":memory:", config={"enable_external_access": False, "autoload_known_extensions": False})
    try:
        tree_json = json.dumps({"error": False, "statements": [tree]})
        (text,) = con.execute(f"SELECT json_deserialize_sql({text_literal(tree_json)}::JSON)").fetchone()
    finally:
        con.close()
    return str(text)


def _refuse(code: str, message: str, hint: str, **evidence: Any) -> SQLRefused:
    return SQLRefused(message, code=code, evidence={"argument": SQL_ARGUMENT, **evidence}, hint=hint)


def _walk_statement(
    node: dict[str, Any], found: Analysis, ws: Workspace, guard: Callable[[str, str], None], scope: frozenset[str]
) -> None:
    """A SelectStatement ({"node": ...}) or a query node."""
    _walk_query(node["node"] if "node" in node and isinstance(node["node"], dict) else node, found, ws, guard, scope)


def _walk_query(
    node: dict[str, Any], found: Analysis, ws: Workspace, guard: Callable[[str, str], None], scope: frozenset[str]
) -> None:
    kind = node.get("type")
    visible = set(scope)
    for entry in (node.get("cte_map") or {}).get("map", []):
        # A CTE sees the ones before it and itself (recursive); the body sees them all.
        visible.add(str(entry["key"]).lower())
        _walk_statement(entry["value"]["query"], found, ws, guard, frozenset(visible))
    inner = frozenset(visible)
    if kind == "SELECT_NODE":
        _walk_table(node.get("from_table"), found, ws, guard, inner)
        for key in ("select_list", "group_expressions"):
            for expr in node.get(key) or []:
                _walk_expr(expr, found, ws, guard, inner)
        for key in ("where_clause", "having", "qualify"):
            _walk_expr(node.get(key), found, ws, guard, inner)
        if node.get("sample"):
            pass  # a sample clause holds numbers only
    elif kind in ("SET_OPERATION_NODE",):
        for child in ("left", "right"):
            if node.get(child):
                _walk_query(node[child], found, ws, guard, inner)
        for child in node.get("children") or []:
            _walk_query(child, found, ws, guard, inner)
    elif kind == "RECURSIVE_CTE_NODE":
        for child in ("left", "right"):
            _walk_query(node[child], found, ws, guard, inner | {str(node.get("ctename", "")).lower()})
    elif kind == "CTE_NODE":
        for child in ("query", "child"):
            if node.get(child):
                _walk_query(node[child], found, ws, guard, inner | {str(node.get("ctename", "")).lower()})
    else:
        raise _refuse(
            "SQL_CONSTRUCT_REFUSED",
            f"the query uses a construct run_sql does not check ({kind})",
            "rewrite it as a plain SELECT with joins, subqueries and CTEs",
            construct=kind,
        )
    for modifier in node.get("modifiers") or []:
        for value in _values(modifier):
            _walk_expr(value, found, ws, guard, inner)


def _values(obj: Any) -> Iterator[dict[str, Any]]:
    """Every expression dict inside a modifier (ORDER BY, LIMIT ...)."""
    if isinstance(obj, dict):
        if "class" in obj:
            yield obj
            return
        for value in obj.values():
            yield from _values(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _values(value)


def _walk_table(
    ref: dict[str, Any] | None,
    found: Analysis,
    ws: Workspace,
    guard: Callable[[str, str], None],
    scope: frozenset[str],
) -> None:
    if not ref:
        return
    kind = ref.get("type")
    if kind == "EMPTY":
        return
    if kind == "BASE_TABLE":
        name = str(ref.get("table_name", ""))
        qualified = ref.get("schema_name") or ref.get("catalog_name")
        if qualified or name.lower() not in scope:
            # Not a CTE of this query: DuckDB would look for a catalog table, a system view or, for a
            # name like 'x.csv', a file (a replacement scan nobody named as a dataset).
            raise _refuse(
                "SQL_TABLE_REFUSED",
                f"the query reads the table {name!r}, which is not a CTE of the query",
                HINT_LITERAL,
                table=name,
                schema=ref.get("schema_name") or None,
            )
        return
    if kind == "JOIN":
        _walk_table(ref.get("left"), found, ws, guard, scope)
        _walk_table(ref.get("right"), found, ws, guard, scope)
        _walk_expr(ref.get("condition"), found, ws, guard, scope)
        return
    if kind == "SUBQUERY":
        _walk_statement(ref["subquery"], found, ws, guard, scope)
        return
    if kind == "EXPRESSION_LIST":  # VALUES (...), (...)
        _walk_expr(ref.get("values"), found, ws, guard, scope)
        return
    if kind == "TABLE_FUNCTION":
        _table_function(ref["function"], found, ws, guard, scope)
        return
    raise _refuse(
        "SQL_CONSTRUCT_REFUSED",
        f"the query reads from a {kind} source, which run_sql does not allow",
        "read datasets with ST_Read / read_parquet / read_csv and combine them with joins",
        construct=kind,
    )


def _table_function(
    fn: dict[str, Any], found: Analysis, ws: Workspace, guard: Callable[[str, str], None], scope: frozenset[str]
) -> None:
    if fn.get("class") != "FUNCTION":
        raise _refuse(
            "SQL_CONSTRUCT_REFUSED",
            f"the query reads from a {fn.get('class')} expression",
            "read datasets with ST_Read / read_parquet / read_csv",
            construct=fn.get("class"),
        )
    name = str(fn.get("function_name", "")).lower()
    if name in GENERATORS:
        for child in fn.get("children") or []:
            _walk_expr(child, found, ws, guard, scope)
        return
    if name not in READERS or fn.get("schema") or fn.get("catalog"):
        raise _refuse(
            "SQL_FUNCTION_REFUSED",
            f"the table function {name} is not one run_sql allows",
            "read datasets with " + ", ".join(sorted(READERS)) + "; nothing else reads files or settings",
            function=name,
        )
    children = fn.get("children") or []
    positional = [c for c in children if c.get("class") != "COMPARISON"]
    named = [c for c in children if c.get("class") == "COMPARISON"]
    if len(positional) != 1:
        raise _refuse(
            "SQL_PATH_NOT_LITERAL",
            f"{name} takes exactly one dataset path here, given {len(positional)} positional arguments",
            HINT_LITERAL,
            function=name,
        )
    given = _string_literal(positional[0])
    if given is None:
        raise _refuse(
            "SQL_PATH_NOT_LITERAL",
            f"the dataset path of {name} is not a string literal",
            HINT_LITERAL,
            function=name,
            expression=positional[0].get("class"),
        )
    layer = None
    encoding_option = None
    for option in named:
        left = option.get("left") or {}
        key = ".".join(left.get("column_names") or []).lower()
        if name == "st_read" and key == "open_options" and is_encoding_option(option.get("right") or {}):
            encoding_option = option  # the one open option this module adds itself (see sql_encodings)
            continue
        if left.get("class") != "COLUMN_REF" or key not in READERS[name]:
            raise _refuse(
                "SQL_OPTION_REFUSED",
                f"{name} option {key or '?'} is not one run_sql allows",
                f"{name} accepts {', '.join(sorted(READERS[name])) or 'no options'} here",
                function=name,
                option=key,
            )
        value = option.get("right") or {}
        if _contains_function_or_query(value):
            raise _refuse(
                "SQL_OPTION_REFUSED",
                f"{name} option {key} must be a constant",
                "give option values as literals",
                function=name,
                option=key,
            )
        if key == "layer":
            layer = _string_literal(value)
            if layer is None:
                # The layer is checked against the file before DuckDB runs (a missing one crashes
                # duckdb-spatial), so it must be a value the check can read.
                raise _refuse(
                    "SQL_OPTION_REFUSED",
                    f"{name} option layer must be a string literal",
                    "name the layer as a string, e.g. ST_Read('parcels.gpkg', layer='parcels')",
                    function=name,
                    option=key,
                )
    path = _resolve_dataset(name, given, ws)
    if name in ("st_read", "st_readshp") and path.suffix.lower() == ".shp":
        declared = shapefile_encoding(path, given)
        named_keys = {".".join((o.get("left") or {}).get("column_names") or []).lower() for o in named}
        if declared is not None and not (name == "st_readshp" and "encoding" in named_keys):
            found.encodings[given] = declared
            if name == "st_read" and encoding_option is None:
                children.append(encoding_option_node())
            elif name == "st_readshp":
                # ST_ReadSHP has its own reader: encoding='iso-8859-1' is its spelling of the same recoding.
                children.append(encoding_option_node("encoding", string_constant("iso-8859-1")))
    found.reads.append((name, given, path, layer))
    # The statement that runs names the resolved file: DuckDB and GDAL would take a relative path
    # against the process's directory, not the workspace.
    positional[0]["value"]["value"] = str(path)
    if name == "st_read":
        # DuckDB spatial's GDAL sniffs content like any other: it opens the file with the one driver its
        # extension names (mapsmith.gdalpolicy), never a VRT hidden in a .csv. A given list is replaced.
        fn["children"] = [c for c in children if not _is_option(c, "allowed_drivers")]
        drivers = gdalpolicy.duckdb_allowed_drivers_argument(path)
        if drivers is not None:
            fn["children"].append(drivers)


def _is_option(node: dict[str, Any], key: str) -> bool:
    left = node.get("left") or {}
    return node.get("class") == "COMPARISON" and ".".join(left.get("column_names") or []).lower() == key


def _contains_function_or_query(expr: Any) -> bool:
    if isinstance(expr, dict):
        if expr.get("class") in ("FUNCTION", "SUBQUERY") and expr.get("function_name") != "list_value":
            return True
        return any(_contains_function_or_query(v) for v in expr.values())
    if isinstance(expr, list):
        return any(_contains_function_or_query(v) for v in expr)
    return False


def _string_literal(expr: dict[str, Any]) -> str | None:
    if expr.get("class") == "CONSTANT":
        value = expr.get("value") or {}
        if (value.get("type") or {}).get("id") == "VARCHAR" and not value.get("is_null"):
            return str(value.get("value"))
    return None


def _resolve_dataset(function: str, given: str, ws: Workspace) -> Path:
    if GLOB_CHARACTERS & set(given):
        raise _refuse(
            "SQL_PATH_PATTERN",
            f"the path {given!r} of {function} is a pattern; run_sql reads named files so each one is recorded",
            "name every file in its own call and combine them with UNION ALL BY NAME",
            function=function,
            path=given,
        )
    try:
        resolved = ws.resolve(given, argument=SQL_ARGUMENT)
    except MapSmithError as exc:
        exc.evidence.setdefault("function", function)
        raise
    if not isinstance(resolved, Path):
        raise _refuse(
            "REMOTE_INPUT_UNSUPPORTED",
            f"{function} names a remote dataset ({given}); run_sql reads local files only",
            "copy the dataset into the workspace and name its local path",
            function=function,
            path=given,
        )
    if function in ("read_parquet", "parquet_scan") and parts.is_parts_folder(resolved):
        # A folder of Parquet parts is one dataset (mapsmith.parts): DuckDB reads the folder itself, and
        # the parts it reads are the members the digest lists; a stray or hidden file is refused here.
        parts.require_parquet_parts(resolved)
        return resolved
    if not resolved.is_file():
        raise _refuse(
            "INPUT_NOT_FOUND",
            f"{function} names {given}, which is not a file",
            "check the path; relative paths are resolved against the workspace",
            function=function,
            path=given,
        )
    suffix = ".osm.pbf" if resolved.name.lower().endswith(".osm.pbf") else resolved.suffix.lower()
    check = MAGIC.get(suffix if suffix != ".osm.pbf" else ".pbf")
    if check is None:
        raise _refuse(
            "SQL_FORMAT_REFUSED",
            f"{function} names a {suffix or 'suffix-less'} file; run_sql reads "
            + ", ".join(sorted(MAGIC))
            + " files only",
            "convert the dataset with convert_format first (VRT, GML and other formats that can name "
            "further files are never read from SQL)",
            function=function,
            path=given,
            format=suffix,
        )
    with open(resolved, "rb") as handle:
        head = handle.read(4096)
    if not check(head):
        raise _refuse(
            "SQL_FORMAT_REFUSED",
            f"{given} does not hold what a {suffix} file holds (its first bytes say otherwise)",
            "GDAL picks a driver from the bytes, not the name: rename or convert the file to what it really is",
            function=function,
            path=given,
            format=suffix,
        )
    return resolved


def _walk_expr(
    expr: Any, found: Analysis, ws: Workspace, guard: Callable[[str, str], None], scope: frozenset[str]
) -> None:
    if isinstance(expr, list):
        for item in expr:
            _walk_expr(item, found, ws, guard, scope)
        return
    if not isinstance(expr, dict):
        return
    cls = expr.get("class")
    if cls == "SUBQUERY":
        _walk_statement(expr["subquery"], found, ws, guard, scope)
        _walk_expr(expr.get("child"), found, ws, guard, scope)
        return
    if cls == "FUNCTION":
        name = str(expr.get("function_name", "")).lower()
        if name in REFUSED_FUNCTIONS or name.startswith(REFUSED_PREFIXES) or name in READERS:
            raise _refuse(
                "SQL_FUNCTION_REFUSED",
                f"the function {name} is refused in run_sql",
                "it reads files, the environment or settings; name datasets with ST_Read / read_parquet / read_csv",
                function=name,
            )
        if name in ("st_transform", "st_setcrs", "st_flipcoordinates"):
            found.transforms = True
        for position in CRS_ARGUMENTS.get(name, ()):
            children = expr.get("children") or []
            if position >= len(children):
                continue
            literal = _string_literal(children[position])
            if literal is None:
                raise _refuse(
                    "SQL_CRS_NOT_LITERAL",
                    f"argument {position + 1} of {name} is not a string literal CRS",
                    "write the CRS as a literal, such as 'EPSG:32633'",
                    function=name,
                )
            guard(literal, SQL_ARGUMENT)
            found.crs_literals.append(literal)
    for key, value in expr.items():
        if key not in ("value", "type") and isinstance(value, (dict, list)):
            _walk_expr(value, found, ws, guard, scope)


# -- the operation --------------------------------------------------------------------------------


def _crs_guard(root: Path | None) -> Callable[[str, str], None]:
    """The CRS-definition guard (mapsmith.crsguard) under a workspace; nothing to check without one."""
    if root is None:
        return _no_crs_guard
    try:
        from mapsmith import crsguard
    except ImportError:  # the guard is not in this build
        return _no_crs_guard

    def check_crs_argument(text: str, argument: str) -> None:
        crsguard.check_crs_definition(text, argument=argument, workspace_root=root)

    return check_crs_argument


def _check_declared_crs(path: Path, root: Path | None) -> None:
    if root is None:
        return
    try:
        from mapsmith import crsguard
    except ImportError:
        return
    crsguard.check_declared_crs(path, argument=SQL_ARGUMENT, workspace_root=root)
