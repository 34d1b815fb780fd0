"""run_sql: one spatial SELECT (DuckDB dialect) written to a dataset with a manifest.

The SQL is written by a model, so it is treated as hostile. ``sql_analysis`` (the parser wall) checks
the statement before anything runs; each file it reads is added to the run's inputs, so the manifest
lists it with its digest; a ``layer`` it names must exist in the file (``ST_Read`` of a missing layer
crashes duckdb-spatial 1.5.5 and the whole process with it). The query then runs on a connection that
is sandboxed on its own (``duckdb_spatial.sandboxed_connect``): memory, threads and temporary disk
capped by DuckDB's own settings, and a timer that interrupts the statement after
``MAPSMITH_CALL_TIMEOUT_S``. The parser is one wall, the connection the second, and a test feeds the
connection hostile SQL directly.

A folder of Parquet parts (``mapsmith.parts``) is one dataset both ways: ``read_parquet('d.parquet')``
reads every part (DuckDB reads a folder itself, and the parts it reads are the digest's members), and an
``output_path`` ending in ``.parquet/`` is written file to file by DuckDB's ``COPY ... TO`` the run's
temporary folder, one part per thread, then described from the parts' footers and verified there,
never pulled into Python.

This module must never run SQL that the checks did not see, never let DuckDB open a layer that is
not there, and never guess a result's CRS.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import CRSError, MapSmithError
from mapsmith.limits import CALL_TIMEOUT_ENV, call_timeout_s
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.sql_analysis import (
    SLOT,
    SQL_ARGUMENT,
    Analysis,
    SQLRefused,
    _check_declared_crs,
    _crs_guard,
    _refuse,
    analyse,
)

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("run_sql", "run_sql", engine="duckdb", validate="validate_run_sql", writes_parts=True),)
__all__ = ["REGISTRATIONS", "SQLRefused", "analyse", "run_sql", "validate_run_sql"]


def validate_run_sql(ctx: RunContext) -> None:
    """Parse and check the SQL before the engine runs, and add every file it reads to the inputs."""
    from mapsmith.workspace import Workspace

    workspace = ctx.workspace if ctx.workspace is not None else Workspace(root=None, allow_remote=False)
    found = analyse(ctx.arguments[SQL_ARGUMENT], workspace, _crs_guard(workspace.root))
    given_crs = ctx.arguments.get("output_crs")
    if isinstance(given_crs, str):
        _crs_guard(workspace.root)(given_crs, "output_crs")
    seen: dict[Path, str] = {}
    for function, given, path, layer in found.reads:
        if layer is not None:
            _require_layer(ctx, given, path, layer)  # every read, not once per file: layers may differ
        if path in seen:
            continue
        if ctx.output_path is not None and path == ctx.output_path:
            raise _refuse(
                "OUTPUT_IS_INPUT",
                f"the SQL reads {given}, which is output_path; an input is never overwritten",
                "write to a new path",
                path=given,
            )
        if path.is_dir():
            from mapsmith import parts

            for part in parts.part_files(path):  # a folder's CRS is declared in each of its parts
                _check_declared_crs(part, workspace.root)
        else:
            _check_declared_crs(path, workspace.root)  # before GDAL opens it, as for a dataset argument
        slot = f"{SLOT}[{len(seen)}]"
        seen[path] = slot
        ctx.paths[slot] = path
        ctx.given_paths[slot] = given
        ctx.layers[slot] = layer
        if path.is_dir():
            from mapsmith import parts

            ctx.inputs[slot] = parts.inspect_folder(path)  # the parts' footers; their refusals apply
            continue
        if function in ("st_read", "st_readshp", "read_parquet", "parquet_scan") and path.suffix.lower() not in (
            ".csv",
            ".tsv",
            ".json",
        ):
            try:
                ctx.inputs[slot] = ctx.io.inspect(path, layer)
            except MapSmithError:
                pass  # a file GDAL cannot describe (plain Parquet): its CRS is not known, and recorded as such
    ctx.parameters["x-mapsmith:sql_datasets"] = [ctx.given_paths[s] for s in seen.values()]


def _require_layer(ctx: RunContext, given: str, path: Path, layer: str) -> None:
    """Refuse a layer the file does not hold, before DuckDB opens it.

    duckdb-spatial 1.5.5 dereferences a null layer handle when ST_Read names a layer that is not
    there: the process dies with SIGSEGV, and every client of the server with it. The layers are
    listed by the stack's own reader (pyogrio), which reports a missing layer as an error.
    """
    from mapsmith.errors import InputError

    try:
        layers = ctx.io.list_layers(path)
    except MapSmithError as exc:
        raise InputError(
            f"the SQL reads {given} with layer {layer!r}, but its layers cannot be listed: {exc.message}",
            code="LAYER_NOT_FOUND",
            evidence={"argument": SQL_ARGUMENT, "path": given, "layer": layer},
            hint="read the file without layer=, or check it with describe_dataset",
        ) from exc
    if layer not in layers:
        raise InputError(
            f"{given} has no layer {layer!r}; its layers are {layers}",
            code="LAYER_NOT_FOUND",
            evidence={"argument": SQL_ARGUMENT, "path": given, "layer": layer, "layers": layers},
            hint=f"name one of {layers} in ST_Read(..., layer=...)" if layers else "this file holds no vector layers",
        )


def _declared_crs(type_text: str) -> str | None:
    """The CRS in a DuckDB 1.5 column type such as GEOMETRY('EPSG:4326'), or None."""
    if "(" not in type_text:
        return None
    inner = type_text[type_text.index("(") + 1 : type_text.rindex(")")].strip()
    return inner[1:-1].replace("''", "'") if inner.startswith("'") and inner.endswith("'") else inner or None


def _result_crs(ctx: RunContext, found: Analysis, column_crs: str | None) -> Any:
    """The CRS of the result: the column's own, else output_crs, else the one CRS every input shares."""
    from pyproj import CRS

    from mapsmith.crs import crs_label, parse_crs

    stated = ctx.arguments.get("output_crs")
    stated_crs = parse_crs(stated) if isinstance(stated, str) else None
    if column_crs is not None:
        own = CRS.from_user_input(column_crs)
        if stated_crs is not None and not own.equals(stated_crs, ignore_axis_order=True):
            raise CRSError(
                f"the result's geometry column is declared {crs_label(own)}, but output_crs is {crs_label(stated_crs)}",
                code="SQL_CRS_CONFLICT",
                evidence={"column_crs": crs_label(own), "output_crs": stated},
                hint="drop output_crs, or make the SQL produce geometries in it (ST_Transform)",
            )
        ctx.crs_decisions["x-mapsmith:output_crs_source"] = "the result column's declared CRS"
        return own
    if stated_crs is not None:
        ctx.crs_decisions["x-mapsmith:output_crs_source"] = "output_crs (stated by the caller)"
        return stated_crs
    labels = {
        slot: (info.crs_label if info is not None else None) for slot in ctx.paths for info in [ctx.inputs.get(slot)]
    }
    known = {info.crs_wkt for info in ctx.inputs.values() if info.crs_wkt}
    if found.transforms or not labels or None in labels.values() or len(known) != 1:
        reason = (
            "the SQL changes or sets CRSs (ST_Transform / ST_SetCRS)"
            if found.transforms
            else "the SQL reads no dataset"
            if not labels
            else "inputs disagree or declare none: "
            + ", ".join(f"{ctx.given_paths[s]}: {c}" for s, c in labels.items())
        )
        raise CRSError(
            f"the CRS of the SQL's result is not known: {reason}; MapSmith does not guess it",
            code="SQL_CRS_REQUIRED",
            evidence={"inputs": {ctx.given_paths[s]: c for s, c in labels.items()}, "transforms": found.transforms},
            hint="pass output_crs (such as 'EPSG:32633'), the CRS the SQL's geometry column is in",
        )
    ctx.crs_decisions["x-mapsmith:output_crs_source"] = "carried from the inputs, which all share it"
    return CRS.from_wkt(known.pop())


def run_sql(ctx: RunContext) -> None:
    """Run the checked statement on the sandboxed connection; write its rows as a layer or a table, or
    (without output_path) answer with them."""
    import duckdb

    from mapsmith import parts
    from mapsmith.workspace import Workspace
    from mapsmith_opensource import duckdb_spatial

    # Checked again here, and the regenerated text (absolute paths) checked once more: what runs is
    # exactly what the checks saw.
    workspace = ctx.workspace if ctx.workspace is not None else Workspace(root=None, allow_remote=False)
    found = analyse(ctx.arguments[SQL_ARGUMENT], workspace, _crs_guard(workspace.root))
    rechecked = analyse(found.statement, workspace, _crs_guard(workspace.root))
    if [r[2] for r in rechecked.reads] != [r[2] for r in found.reads]:
        raise _refuse(
            "SQL_CONSTRUCT_REFUSED",
            "the statement reads different files once regenerated from its parse tree",
            "simplify the SQL; this should not happen and is worth reporting",
        )
    found.statement = rechecked.statement
    if found.encodings:
        ctx.parameters["x-mapsmith:sql_encodings"] = dict(found.encodings)
        ctx.notes.append(
            "shapefile text decoded as its .cpg says: "
            + "; ".join(f"{path}: {enc}" for path, enc in found.encodings.items())
        )
    root = ctx.workspace.root if ctx.workspace is not None else None
    sandbox = duckdb_spatial.sandboxed_connect(root, ctx.environ)
    try:
        versions = sandbox.versions
        ctx.set_engine("duckdb", versions["duckdb"], **{"duckdb-spatial": versions["duckdb-spatial"]})
        # The connection's locks (the private temp and extension directories are left out: they are
        # gone when the run ends; the allowed directory is the workspace, labelled "." as paths are).
        ctx.parameters["x-mapsmith:duckdb_sandbox"] = {
            k: ("." if k == "allowed_directories" else v) for k, v in sandbox.settings.items() if "directory" not in k
        }
        # The statement is interrupted from a timer thread after MAPSMITH_CALL_TIMEOUT_S: DuckDB checks
        # for the interrupt between vectors, so a runaway CTE or generator stops there.
        timeout_s = call_timeout_s(ctx.environ)
        timer = threading.Timer(timeout_s, sandbox.connection.interrupt)
        timer.daemon = True
        timer.start()
        try:
            relation = sandbox.connection.sql(found.statement)
            types = [str(t) for t in relation.types]
            columns = list(relation.columns)
            geometry = [c for c, t in zip(columns, types, strict=True) if t.upper().startswith("GEOMETRY")]
            if ctx.output_path is None:
                _answer(ctx, relation, columns, types, geometry)
                return
            shape = _output_shape(ctx, columns, types, geometry)
            if parts.is_folder_output(str(ctx.arguments.get("output_path"))):
                _copy_parts(ctx, sandbox.connection, found, columns, types, geometry)
                return
            table = relation.to_arrow_table()
            _require_utf8(table)
        except duckdb.Error as exc:
            raise _translate(exc, timeout_s, sandbox.settings) from exc
        finally:
            timer.cancel()
    finally:
        sandbox.close()
    if shape == "table":
        _write_table(ctx, table, columns, types)
    else:
        _write_layer(ctx, found, table, columns, types, geometry[0])


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _copy_parts(
    ctx: RunContext, connection: Any, found: Analysis, columns: list[str], types: list[str], geometry: list[str]
) -> None:
    """Write the result as Parquet parts into the run's temporary folder with DuckDB's COPY, then verify the
    folder from its footers (and a streamed validity pass): the rows never pass through Python.

    A geometry column without a declared CRS gets the one ``_result_crs`` decided (ST_SetCRS), so the parts'
    GeoParquet metadata names it; the runner commits the folder only after these checks pass.
    """
    import dataclasses

    from mapsmith import parts, verify
    from mapsmith.crs import crs_label

    assert ctx.temp_output is not None
    statement = found.statement
    crs = None
    if geometry:
        geom = geometry[0]
        column_crs = _declared_crs(types[columns.index(geom)])
        crs = _result_crs(ctx, found, column_crs)
        ctx.expected_output_crs = crs.to_wkt()
        ctx.crs_decisions["x-mapsmith:output_crs"] = crs_label(crs)
        if column_crs is None:
            label = crs_label(crs)
            text = label if label and ":" in label and " " not in label else crs.to_json()
            statement = (
                f"SELECT * REPLACE (ST_SetCRS({_quote(geom)}, {_sql_text(text)}) AS {_quote(geom)}) FROM ({statement})"
            )
    # One part per thread: DuckDB writes in parallel, and the part count follows MAPSMITH_DUCKDB_THREADS.
    row = connection.execute(
        f"COPY ({statement}) TO {_sql_text(str(ctx.temp_output))} (FORMAT parquet, PER_THREAD_OUTPUT true)"
    ).fetchone()
    written = int(row[0]) if row else -1
    if geometry and written == 0:
        _empty_geoparquet(ctx.temp_output, connection.sql(statement).limit(0).to_arrow_table(), geometry[0], crs)
    wants_validity = "geometry_valid" in ctx.contract.checks and bool(geometry)
    info = parts.inspect_folder(ctx.temp_output, validity=wants_validity)
    members = parts.part_files(ctx.temp_output)
    ctx.check(
        "x-mapsmith:parts_rows",
        info.feature_count == written,
        f"DuckDB reported {written} rows written; the {len(members)} part footers hold {info.feature_count}",
    )
    ctx.parameters["x-mapsmith:output_parts"] = len(members)
    ctx.parameters["x-mapsmith:sql_result_types"] = dict(zip(columns, types, strict=True))
    given = str(ctx.arguments.get("output_path"))
    if not geometry:
        _declared_type_check(ctx, {"no geometry column"}, "the result")
        ctx.answer.update({"row_count": info.feature_count, "columns": columns, "parts": len(members)})
    else:
        assert crs is not None
        _declared_type_check(ctx, set(info.geometry_families), "the result")
        ctx.checks.extend(
            verify.output_checks(
                ctx.contract,
                info,
                expected_crs_label=crs_label(crs),
                crs_equal=info.crs_wkt is not None and crs.equals(info.crs_wkt, ignore_axis_order=True),
                input_count=None,
                input_families=frozenset(),
            )
        )
        ctx.answer.update({"feature_count": info.feature_count, "columns": columns, "parts": len(members)})
    # Described and checked here, so the runner digests the folder instead of reading it back as one file.
    # layer=None: a folder is one dataset, and output.layer would claim a container it is not.
    ctx.table_output = dataclasses.replace(info, path=given, layer=None)


def _empty_geoparquet(folder: Path, empty: Any, geom: str, crs: Any) -> None:
    """Replace the parts of an empty result with one empty GeoParquet part that names its CRS.

    DuckDB 1.5 writes a part without its ``geo`` metadata when no row was written, which would make
    the folder a plain table with no CRS; zero rows cost nothing to write again with geopandas.
    """
    import shutil

    import geopandas as gpd
    import shapely

    shutil.rmtree(folder)
    folder.mkdir()
    frame = empty.drop_columns([geom]).to_pandas()
    geoms = gpd.GeoSeries(shapely.from_wkb(empty.column(geom).to_numpy(zero_copy_only=False)), crs=crs)
    gdf = gpd.GeoDataFrame(frame, geometry=geoms, crs=crs)
    if geom != "geometry":
        gdf = gdf.rename_geometry(geom)
    gdf.to_parquet(folder / "data_0.parquet")


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _output_shape(ctx: RunContext, columns: list[str], types: list[str], geometry: list[str]) -> str:
    """ "table" or "layer", from output_path's format and the result's geometry columns; refuses a mix."""
    from mapsmith_opensource.tables import is_table_suffix

    assert ctx.output_path is not None
    suffix = ctx.output_path.suffix.lower()
    described = dict(zip(columns, types, strict=True))
    if is_table_suffix(ctx.output_path):
        if geometry:
            raise SQLRefused(
                f"the result has the geometry column(s) {geometry}, and a {suffix} table holds no geometry",
                code="SQL_GEOMETRY_IN_TABLE",
                evidence={"columns": described, "format": suffix},
                hint="select ST_AsText(geom) AS wkt, or ST_X(geom) AS x, ST_Y(geom) AS y, instead of the geometry; "
                "or write .gpkg / .parquet / .fgb to keep it as a layer",
            )
        return "table"
    if suffix == ".parquet" and not geometry:
        return "table"  # a plain Parquet table; GeoParquet when the result has its geometry column
    if len(geometry) != 1:
        raise SQLRefused(
            f"the result has {len(geometry)} geometry columns; a {suffix} layer holds exactly one",
            code="SQL_GEOMETRY_COLUMN",
            evidence={"columns": described, "format": suffix},
            hint="select exactly one GEOMETRY column (ST_GeomFromWKB / ST_Point make one; drop or ST_AsText the "
            "others); a result without geometry is a table: write .csv, .json, .xlsx or .parquet",
        )
    return "layer"


def _require_utf8(table: Any) -> None:
    """Text that is not UTF-8 is refused: it would be written into string columns as if it were."""
    import pyarrow as pa

    try:
        table.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise SQLRefused(
            f"the result holds text that is not UTF-8 ({exc}); a file read without a .cpg naming its code page "
            "is the usual cause",
            code="SQL_TEXT_NOT_UTF8",
            evidence={"argument": SQL_ARGUMENT, "error": str(exc)[:300]},
            hint="add a .cpg naming the shapefile's code page (such as CP1252), or convert_format the file to "
            ".gpkg first and query that",
        ) from exc


def _declared_type_check(ctx: RunContext, families: set[str], detail_subject: str) -> None:
    declared = ctx.arguments.get("geometry_type")
    if declared is None:
        return
    ok = families <= {declared}
    ctx.check(
        "x-mapsmith:declared_geometry_type",
        ok,
        f"declared {declared}; {detail_subject} holds {', '.join(sorted(families)) or 'no geometries'}",
        argument="geometry_type",
    )


def _write_table(ctx: RunContext, table: Any, columns: list[str], types: list[str]) -> None:
    from mapsmith_opensource.tables import deliver_table

    _declared_type_check(ctx, {"no geometry column"}, "the result")
    ctx.parameters["x-mapsmith:sql_result_types"] = dict(zip(columns, types, strict=True))
    ctx.answer.update({"row_count": table.num_rows, "columns": columns})
    deliver_table(ctx, table)


def _write_layer(ctx: RunContext, found: Analysis, table: Any, columns: list[str], types: list[str], geom: str) -> None:
    import geopandas as gpd
    import shapely

    from mapsmith.crs import crs_label
    from mapsmith.registry import geometry_family
    from mapsmith_opensource.common import write_output

    column_crs = _declared_crs(types[columns.index(geom)])
    crs = _result_crs(ctx, found, column_crs)
    frame = table.drop_columns([geom]).to_pandas()
    geoms = shapely.from_wkb(table.column(geom).to_numpy(zero_copy_only=False))
    gdf = gpd.GeoDataFrame(frame, geometry=gpd.GeoSeries(geoms, crs=crs), crs=crs)
    if geom != "geometry" and geom not in frame.columns:
        gdf = gdf.rename_geometry(geom)
    ctx.expected_output_crs = crs.to_wkt()
    ctx.crs_decisions["x-mapsmith:output_crs"] = crs_label(crs)
    present = {geometry_family(t) for t in set(gdf.geom_type.dropna())}
    _declared_type_check(ctx, present, "the result")
    ctx.answer.update({"feature_count": len(gdf), "columns": columns})
    write_output(ctx, gdf)


WKT_MAX_CHARS = 200  # a geometry's WKT in an answer is cut here (and says so): answers are read, not parsed


def _answer(ctx: RunContext, relation: Any, columns: list[str], types: list[str], geometry: list[str]) -> None:
    """The rows as the answer: the first max_rows of them, every row counted, geometries as WKT."""
    import pyarrow as pa
    import shapely

    from mapsmith_opensource.tables import _json_value

    max_rows = int(ctx.arguments.get("max_rows") or 1000)
    reader = relation.to_arrow_reader(batch_size=4096)
    kept: list[Any] = []
    held = total = 0
    for batch in reader:
        _require_utf8(pa.Table.from_batches([batch]))
        total += batch.num_rows
        if held < max_rows:
            part = batch.slice(0, max_rows - held)
            kept.append(part)
            held += part.num_rows
    table = pa.Table.from_batches(kept, schema=reader.schema) if kept else reader.schema.empty_table()
    shortened = 0
    wkt: dict[str, list[str | None]] = {}
    for name in geometry:
        values = shapely.to_wkt(shapely.from_wkb(table.column(name).to_numpy(zero_copy_only=False)))
        cut: list[str | None] = []
        for text in values:
            if text is not None and len(text) > WKT_MAX_CHARS:
                text = text[:WKT_MAX_CHARS] + "..."
                shortened += 1
            cut.append(text)
        wkt[name] = cut
    plain = table.drop_columns(geometry) if geometry else table
    rows = []
    for i, row in enumerate(plain.to_pylist()):
        record = {}
        for name in columns:
            record[name] = wkt[name][i] if name in wkt else _json_value(row[name])[0]
        rows.append(record)
    if ctx.arguments.get("geometry_type") and geometry:
        present = {
            geometry_family_of(t)
            for name in geometry
            for t in set(shapely.get_type_id(shapely.from_wkb(table.column(name).to_numpy(zero_copy_only=False))))
        }
        _declared_type_check(ctx, present - {"unknown"}, "the rows returned")
    ctx.parameters["x-mapsmith:sql_result_types"] = dict(zip(columns, types, strict=True))
    ctx.answer.update(
        {
            "columns": [{"name": n, "type": t} for n, t in zip(columns, types, strict=True)],
            "rows": rows,
            "row_count": len(rows),
            "total_rows": total,
            "complete": len(rows) == total,
            "max_rows": max_rows,
            "geometry_columns": geometry,
            "geometry_wkt_max_chars": WKT_MAX_CHARS,
            "geometries_shortened": shortened,
            "sql": ctx.arguments[SQL_ARGUMENT],
        }
    )
    if len(rows) < total:
        ctx.answer["hint"] = (
            f"{total - len(rows)} more rows were not returned: raise max_rows (up to 10000), aggregate in the SQL, "
            "or write them with output_path"
        )


def geometry_family_of(type_id: int) -> str:
    """point/line/polygon for a shapely geometry type id (0 Point ... 6 MultiPolygon)."""
    return {0: "point", 1: "line", 2: "line", 3: "polygon", 4: "point", 5: "line", 6: "polygon"}.get(
        int(type_id), "unknown"
    )


def _translate(exc: Exception, timeout_s: float, settings: dict[str, str]) -> MapSmithError:
    import duckdb

    from mapsmith.errors import EngineError

    if isinstance(exc, duckdb.PermissionException):
        return SQLRefused(
            f"the sandboxed connection refused the query: {exc}",
            code="SQL_SANDBOX_REFUSED",
            evidence={"argument": SQL_ARGUMENT, "error": str(exc)[:300]},
            hint="read only datasets inside the workspace, named as string literals",
        )
    if isinstance(exc, duckdb.InterruptException):
        return EngineError(
            f"the query ran longer than {timeout_s:g} s and was stopped",
            code="SQL_TIME_LIMIT",
            evidence={"argument": SQL_ARGUMENT, "limit_s": timeout_s, "variable": CALL_TIMEOUT_ENV},
            hint="make the query end sooner: bound recursive CTEs (WHERE n < ...), generate fewer rows, "
            "filter before joining; or raise MAPSMITH_CALL_TIMEOUT_S",
        )
    if isinstance(exc, duckdb.OutOfMemoryException):
        return EngineError(
            f"the query needed more memory than the {settings.get('memory_limit')} DuckDB may use",
            code="SQL_MEMORY_LIMIT",
            evidence={
                "argument": SQL_ARGUMENT,
                "memory_limit": settings.get("memory_limit"),
                "max_temp_directory_size": settings.get("max_temp_directory_size"),
                "error": str(exc)[:300],
            },
            hint="select fewer rows or columns, aggregate earlier, or raise MAPSMITH_DUCKDB_MEMORY",
        )
    return EngineError(
        f"DuckDB could not run the query: {exc}",
        code="SQL_EXECUTION_FAILED",
        evidence={"argument": SQL_ARGUMENT, "exception": type(exc).__name__, "error": str(exc)[:300]},
        hint="fix the SQL (DuckDB dialect); the message above names the problem",
    )
