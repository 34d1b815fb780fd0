"""table_to_points: a table's rows as a point layer, from x/y (lon/lat) columns or a WKT column.

The CRS of the coordinates is an argument the caller must give: it is never guessed from the
numbers (a lon/lat table and a table of metres in a national grid can hold the same digits). Every
row becomes one point, in the table's order, with every column kept as read. A row whose
coordinates cannot be read (empty, not a number, minutes past 59, outside ±90°, a hemisphere on
the wrong axis, WKT that is not a point) is listed with its row number, its value and why; the run
is refused unless the caller passed ``skip_invalid_rows=true``, and then the skipped rows are
recorded in the manifest (``x-mapsmith:skipped_rows``) and the answer. No row is dropped unseen.

Cells are parsed by ``coordinates.parse_coordinate`` (decimal numbers and degrees-minutes-seconds).
The table is read by ``read_table`` alone, so the reader can be swapped for the shared table reader
without touching the rest. Nothing here writes anywhere but ``ctx.temp_output``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, parse_crs
from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource import io
from mapsmith_opensource.common import set_engine, write_output
from mapsmith_opensource.coordinates import CoordinateError, parse_coordinate
from mapsmith_opensource.field_ops import refuse_reserved_names

if TYPE_CHECKING:
    import pandas as pd

    from mapsmith.runner import RunContext

# Rows listed in a refusal's evidence, the answer and the manifest; the count is always complete.
ROWS_LISTED = 100


def read_table(ctx: RunContext, key: str = "input_path") -> pd.DataFrame:
    """The table's rows and columns, read by the shared table reader (``tables.read_table``: CSV
    decoded from ``encoding`` with undecodable bytes refused, JSON records, Parquet, one XLSX sheet);
    other formats GDAL reads as tables (ODS) through pyogrio. Columns keep the reader's types: a
    column of decimal text arrives as numbers, a column with DMS text as text, an empty cell as null.
    """
    import pandas as pd

    from mapsmith_opensource import tables

    path, layer = ctx.paths[key], ctx.layers.get(key)
    given = ctx.given_paths.get(key, key)
    encoding = ctx.arguments.get("encoding") or "utf-8"
    if path.suffix.lower() in tables.READABLE_SUFFIXES:
        sheet = layer if path.suffix.lower() == ".xlsx" else None
        return pd.DataFrame(tables.read_table(path, encoding=encoding, sheet=sheet).to_pandas())
    import pyogrio

    try:
        table = pyogrio.read_dataframe(
            io.vector_source(path)[0], layer=layer, read_geometry=False, encoding=ctx.arguments.get("encoding")
        )
    except Exception as exc:
        raise InputError(
            f"cannot read {given} as a table: {exc}",
            code="INPUT_UNREADABLE",
            evidence={"argument": key, "path": given, "engine_message": str(exc)},
            hint="pass a CSV, XLSX or ODS table; name its text encoding with encoding='cp1252' if it is not UTF-8",
        ) from exc
    return pd.DataFrame(table)


def table_to_points(ctx: RunContext) -> None:
    import geopandas as gpd
    import shapely

    set_engine(ctx)
    args = ctx.arguments
    crs = parse_crs(args["crs"])
    degrees = bool(crs.is_geographic)
    table = read_table(ctx)
    columns = [str(c) for c in table.columns]
    mode = _mode(args, columns)
    refuse_reserved_names(ctx, columns, "input_path")

    xs: list[float] = []
    ys: list[float] = []
    kept: list[int] = []
    bad: list[dict[str, Any]] = []
    forms: dict[str, int] = {"decimal": 0, "dms": 0, "wkt": 0}
    if mode == "wkt":
        for i, cell in enumerate(table[args["wkt_field"]].tolist()):
            try:
                x, y = _wkt_point(cell, degrees)
            except CoordinateError as exc:
                bad.append({"row": i + 1, "field": args["wkt_field"], "value": _shown(cell), "reason": str(exc)})
                continue
            xs.append(x)
            ys.append(y)
            kept.append(i)
            forms["wkt"] += 1
    else:
        xf, yf = args["x_field"], args["y_field"]
        for i, (xc, yc) in enumerate(zip(table[xf].tolist(), table[yf].tolist(), strict=True)):
            problems = []
            parsed = {}
            for axis, field, cell in (("x", xf, xc), ("y", yf, yc)):
                try:
                    parsed[axis] = parse_coordinate(cell, axis, degrees=degrees)
                except CoordinateError as exc:
                    problems.append({"row": i + 1, "field": field, "value": _shown(cell), "reason": str(exc)})
            if problems:
                bad.extend(problems)
                continue
            xs.append(parsed["x"].value)
            ys.append(parsed["y"].value)
            kept.append(i)
            for p in parsed.values():
                forms[p.form] += 1
    bad_rows = sorted({b["row"] for b in bad})
    total = len(table)
    given = ctx.given_paths.get("input_path", "input_path")
    if bad_rows and not args["skip_invalid_rows"]:
        raise InputError(
            f"{len(bad_rows)} of {total} rows of {given} have coordinates that cannot be read; no layer was written",
            code="TABLE_ROWS_UNPARSEABLE",
            evidence={"path": given, "row_count": total, "unparseable_count": len(bad_rows), "rows": bad[:ROWS_LISTED]},
            hint="fix those cells in the table, or pass skip_invalid_rows=true to write the other rows (the skipped "
            "rows are listed in the manifest); row 1 is the first row after the header",
        )
    out = table.iloc[kept].reset_index(drop=True)
    gdf = gpd.GeoDataFrame(out, geometry=shapely.points(xs, ys) if kept else [], crs=crs)
    ctx.expected_output_crs = crs.to_wkt()
    ctx.parameters["crs"] = crs_label(crs)
    ctx.parameters["x-mapsmith:coordinate_mode"] = mode
    ctx.parameters["x-mapsmith:skipped_row_count"] = len(bad_rows)
    ctx.parameters["x-mapsmith:skipped_rows"] = bad[:ROWS_LISTED]
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs),
            "reason": f"the coordinates were declared to be in {crs_label(crs)} by the crs argument; they are written "
            "as read, untransformed",
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )
    if bad_rows:
        ctx.warn(
            "TABLE_ROWS_SKIPPED",
            f"{len(bad_rows)} of {total} rows were skipped (skip_invalid_rows=true): their coordinates cannot be read",
            "the answer and the manifest's x-mapsmith:skipped_rows list each row, its value and why",
        )
    if forms["dms"]:
        ctx.notes.append(
            f"{forms['dms']} coordinates were read from degrees-minutes-seconds text (degrees + minutes/60 + "
            "seconds/3600, negative for S and W)"
        )
    write_output(ctx, gdf)
    written = io.inspect(ctx.temp_output, None) if ctx.temp_output is not None else None
    ctx.check(
        "feature_count_exact",
        written is not None and written.feature_count == len(kept),
        f"{total} rows: {len(kept)} points built, {len(bad_rows)} skipped; "
        f"{written.feature_count if written else 0} written",
    )
    ctx.check(
        "x-mapsmith:rows_accounted",
        len(kept) + len(bad_rows) == total,
        f"{len(kept)} written + {len(bad_rows)} skipped = {len(kept) + len(bad_rows)} of {total} rows",
    )
    ctx.answer = {
        "row_count": total,
        "point_count": len(kept),
        "skipped_count": len(bad_rows),
        "skipped_rows": bad[:ROWS_LISTED],
        "skipped_rows_truncated": len(bad) > ROWS_LISTED,
        "coordinate_mode": mode,
        "crs": crs_label(crs),
        "summary": f"{len(kept)} points from {total} rows" + (f"; {len(bad_rows)} row(s) skipped" if bad_rows else ""),
    }


def _mode(args: dict[str, Any], columns: list[str]) -> str:
    """xy or wkt, from the columns named; both, neither or half a pair is refused."""
    has_xy = args.get("x_field") is not None or args.get("y_field") is not None
    has_wkt = args.get("wkt_field") is not None
    if has_xy and has_wkt:
        raise ArgumentError(
            "give x_field and y_field, or wkt_field, not both",
            code="ARGUMENT_NOT_APPLICABLE",
            evidence={
                "x_field": args.get("x_field"),
                "y_field": args.get("y_field"),
                "wkt_field": args.get("wkt_field"),
            },
            hint="drop wkt_field to read coordinates from two columns, or drop x_field and y_field",
        )
    if not has_xy and not has_wkt:
        raise ArgumentError(
            "table_to_points needs the columns holding the coordinates: x_field and y_field, or wkt_field",
            code="COORDINATE_FIELDS_REQUIRED",
            evidence={"fields": columns},
            hint="name them, e.g. x_field='lon', y_field='lat' (x is longitude or easting)",
        )
    if has_xy and (args.get("x_field") is None or args.get("y_field") is None):
        missing = "x_field" if args.get("x_field") is None else "y_field"
        raise ArgumentError(
            f"{missing} is missing: a point needs both coordinates",
            code="COORDINATE_FIELDS_REQUIRED",
            evidence={"missing": missing, "fields": columns},
            hint=f"add {missing} (x is longitude or easting, y is latitude or northing)",
        )
    named = [args[k] for k in ("x_field", "y_field", "wkt_field") if args.get(k) is not None]
    unknown = [n for n in named if n not in columns]
    if unknown:
        raise InputError(
            f"the table has no column {unknown[0]!r}; its columns: {', '.join(columns)}",
            code="FIELD_NOT_FOUND",
            evidence={"missing": unknown, "fields": columns},
            hint="column names are case-sensitive; describe_dataset lists them",
        )
    return "wkt" if has_wkt else "xy"


def _wkt_point(cell: object, degrees: bool) -> tuple[float, float]:
    import shapely

    if cell is None or (isinstance(cell, float) and cell != cell) or not str(cell).strip():
        raise CoordinateError("the cell is empty")
    try:
        geom = shapely.from_wkt(str(cell))
    except shapely.errors.GEOSException as exc:
        raise CoordinateError(f"not readable as WKT: {exc}") from None
    if geom is None or geom.is_empty:
        raise CoordinateError("the WKT is an empty geometry")
    if geom.geom_type != "Point":
        raise CoordinateError(f"the WKT is a {geom.geom_type}, not a POINT; table_to_points writes points")
    x, y = float(geom.x), float(geom.y)
    for axis, value in (("x", x), ("y", y)):
        parse_coordinate(value, axis, degrees=degrees)  # the same range rules as two columns
    return x, y


def _shown(cell: object) -> object:
    """A cell as it can be put in JSON evidence: text shortened, NaN as None."""
    if cell is None or (isinstance(cell, float) and cell != cell):
        return None
    if isinstance(cell, int | float):
        return cell
    text = str(cell)
    return text if len(text) <= 80 else text[:77] + "..."
