"""reproject_layer inside DuckDB, file to file: ST_Transform on every row, the CRS written as the target's. What it
takes, what it must never do and how it was measured: sql_layer_ops' docstring, whose copy_out writes the output.

Points are tested in the COPY's own pass (``_checked_points_sql``): a point written where its source is and with
finite coordinates is valid, so the runner need not read the file again to count validity. A point PROJ cannot place
in the target CRS (a finite coordinate answered with an infinite one) refuses the run with the GeoPandas engine's
OUTSIDE_TARGET_CRS (common.outside_target). Split from sql_layer_ops along the operation's seam.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from mapsmith import parts
from mapsmith.crs import choose_transformer, crs_label, parse_crs
from mapsmith.errors import MapSmithError
from mapsmith_opensource.join_ops.spatial_join_duckdb import (
    DUCKDB_PREFERENCE,
    _GeoParquet,
    _geoparquet,
    _name,
    _rows_of,
    _text,
    duckdb_database,
)
from mapsmith_opensource.registration import Registration
from mapsmith_opensource.reproject_ops import REPROJECT_HINT, record_reprojection
from mapsmith_opensource.sql_layer_ops import (
    ENGINE,
    _footer_types,
    _inspect_input,
    _layer_problem,
    _record_input_validity,
    _set_engine,
    copy_out,
)

if TYPE_CHECKING:
    from pyproj import CRS

    from mapsmith.runner import RunContext

# From how many input features the router prefers this engine: the smallest size benchmarks/bench_thresholds.py
# measured (docs/benchmarks.md, "Router thresholds"; MapSmith warmed as the server's worker is, GeoPandas imported,
# medians of 5): 0.09-0.11 s against GeoPandas' 0.14-0.20 s from 10 to 10,000 features, 0.23 s against 0.53 s at
# 100,000. sql_layer_ops' older table, with DuckDB's start on every run's clock, had put it at 100,000.
REPROJECT_MIN_ROWS = 10
# The probe: DuckDB's coordinates must equal pyproj's to this many units of the target CRS.
PROBE_TOLERANCE = 1e-9
PROBE_GRID = 5  # the probe samples PROBE_GRID x PROBE_GRID points over the extent

REGISTRATIONS = (
    Registration(
        "reproject_layer",
        "reproject_layer_duckdb",
        engine=ENGINE,
        preference=DUCKDB_PREFERENCE,
        eligible="reproject_eligible",
        writes_parts=True,  # sql_layer_ops.copy_out
    ),
)


def _conversion_only(transformer: Any) -> bool:
    """Whether every step of the chosen operation is a PROJ Conversion (no datum shift, no grid)."""
    operation = transformer.to_json_dict()
    steps = operation.get("steps") if operation.get("type") == "ConcatenatedOperation" else [operation]
    return bool(steps) and all(step.get("type") == "Conversion" for step in steps)


def _moved(geometry: str, source_id: str, target_id: str) -> str:
    """``geometry`` (an expression) transformed and typed with the target CRS, which DuckDB writes as PROJJSON."""
    return (
        f"ST_Transform({geometry}, {_text(source_id)}, {_text(target_id)}, always_xy := true)"
        f"::GEOMETRY({_text(target_id)})"
    )


def _transform_sql(layer: _GeoParquet, source_id: str, target_id: str) -> str:
    """Every field in file order, the geometry transformed in place."""
    moved = _moved(f"{_name(layer.geometry)}::GEOMETRY", source_id, target_id)
    return ", ".join(f"{moved} AS {_name(c)}" if c == layer.geometry else _name(c) for c in layer.columns)


# What DuckDB's error() says when a point fails _checked_points_sql's test: the COPY stops, then the run is refused (a
# point the target cannot place) or the COPY runs again unchecked (a point read with a NaN coordinate, written empty).
NOT_AS_READ = "mapsmith: a reprojected point is not finite, or not present where its source is"


def _checked_points_sql(layer: _GeoParquet, transformed: str, source: str) -> str:
    """``transformed`` (_transform_sql's fields, read from ``source``) with every point tested in the same pass: it must
    be present exactly where its source point is (not null, not empty) and then have finite coordinates, else
    DuckDB's error() stops the query with NOT_AS_READ. A COPY of it that finishes has written as many points as it
    read, each valid: the output's validity, counted without reading the file again (the runner's scan of ten
    million points took 0.69 s, this test 0.1 s of the COPY's 2.9 s). A point is valid exactly when its coordinates
    are finite (duckdb_spatial.valid_sql); the Parquet writer's own statistics cannot say it: DuckDB wrote a finite
    bbox over a point whose y was NaN."""
    import uuid

    g, before = _name(layer.geometry), _name(f"mapsmith_source_{uuid.uuid4().hex}")
    gone, was = f"({g} IS NULL OR ST_IsEmpty({g}))", f"({before} IS NULL OR ST_IsEmpty({before}))"
    tested = (
        f"CASE WHEN {gone} = {was} AND ({gone} OR (isfinite(ST_X({g})) AND isfinite(ST_Y({g})))) THEN {g} "
        f"ELSE error({_text(NOT_AS_READ)}) END AS {g}"
    )
    fields = ", ".join(tested if c == layer.geometry else _name(c) for c in layer.columns)
    return f"SELECT {fields} FROM (SELECT {transformed}, {g}::GEOMETRY AS {before} FROM {source})"


def _probe(source_id: str, target: CRS, target_id: str, transformer: Any, bounds: Any) -> str | None:
    """Run the engine's own SQL on a grid over the extent, write it, read it back: why it differs, or None."""
    import json
    import tempfile
    from pathlib import Path

    import duckdb
    import numpy as np
    import pyarrow.parquet as pq
    import shapely
    from pyproj import CRS

    xmin, ymin, xmax, ymax = bounds
    xs, ys = np.meshgrid(np.linspace(xmin, xmax, PROBE_GRID), np.linspace(ymin, ymax, PROBE_GRID))
    points = shapely.points(xs.ravel(), ys.ravel())
    grid_xy = (xs.ravel().tolist(), ys.ravel().tolist())  # Python floats: repr gives the digits that read back exactly
    want_x, want_y = transformer.transform(xs.ravel(), ys.ravel())
    with tempfile.TemporaryDirectory(prefix="mapsmith-probe-") as scratch, duckdb_database().cursor() as con:
        out = Path(scratch) / "probe.parquet"
        # The grid is written into the SQL (each coordinate as text, which DuckDB parses to the same double), not
        # registered as an Arrow table or written by pyarrow: both import pandas, 0.23 s of a 1,000,000-point run
        grid = ", ".join(f"(CAST('{x!r}' AS DOUBLE), CAST('{y!r}' AS DOUBLE))" for x, y in zip(*grid_xy, strict=True))
        select = _moved("ST_Point(x, y)", source_id, target_id) + " AS geometry"
        try:
            con.execute(
                f"COPY (SELECT {select} FROM (VALUES {grid}) AS grid(x, y)) TO {_text(str(out))} (FORMAT parquet)"
            )
        except duckdb.Error as exc:
            return f"DuckDB's ST_Transform from {source_id} to {target_id} failed on the data's extent ({exc})"
        table = pq.ParquetFile(out).read()  # read_table goes through pyarrow.dataset, which imports pandas
        geo = json.loads((table.schema.metadata or {}).get(b"geo") or b"{}")
    written = geo.get("columns", {}).get("geometry", {}).get("crs")
    if written is None or not CRS.from_json_dict(written).equals(target):
        return f"DuckDB writes {target_id} with a definition other than the target CRS's"
    if not (np.isfinite(want_x).all() and np.isfinite(want_y).all()):
        return (
            f"the data's extent reaches where {target_id} cannot place points (PROJ answers infinite coordinates "
            "there); the GeoPandas engine checks each feature"
        )
    got = shapely.get_coordinates(shapely.from_wkb(table.column("geometry").to_pylist()))  # to_numpy imports pandas
    error = float(np.nanmax(np.abs(got - np.column_stack([want_x, want_y])))) if len(got) == len(points) else None
    if error is None or not error <= PROBE_TOLERANCE:
        return (
            f"DuckDB's ST_Transform from {source_id} to {target_id} differs from the chosen PROJ pipeline by "
            f"{error if error is not None else 'a dropped point'} units on the data's extent (more than "
            f"{PROBE_TOLERANCE:g})"
        )
    return None


def reproject_eligible(ctx: RunContext) -> str | None:
    """Why DuckDB cannot take this reproject_layer, or None when it can."""
    problem, layer = _layer_problem(ctx, "reproject_layer", REPROJECT_MIN_ROWS)
    if problem is not None:
        return problem
    assert layer is not None
    types = _footer_types(layer.path, layer.geometry)
    if not types or any(t.endswith((" Z", " M", " ZM")) for t in types):
        declared = ", ".join(types) if types else "no geometry types"
        return (
            f"input_path's footer declares {declared}; the DuckDB reproject_layer takes declared 2-D geometries "
            "only (the GeoPandas engine transforms Z too)"
        )
    info = ctx.inputs["input_path"]
    source = parse_crs(info.crs_wkt)
    try:
        target = parse_crs(ctx.arguments["target_crs"])
        transformer, record = choose_transformer(
            source, target, info.bounds_lonlat, allow_ballpark=bool(ctx.arguments.get("allow_ballpark", False))
        )
    except MapSmithError as exc:
        return f"the transformation could not be chosen ({exc.code}); the GeoPandas engine reports why"
    if not _conversion_only(transformer) or record.get("is_ballpark"):
        return (
            f"{crs_label(source)} to {crs_label(target)} is not a conversion alone (a datum shift or a grid): DuckDB's "
            "PROJ could choose another operation than the one recorded"
        )
    target_id = crs_label(target)
    if target_id is None or ":" not in target_id:
        return f"the target CRS ({target_id}) has no authority code, which is how DuckDB names a CRS"
    source_id = layer.crs_id or ("OGC:CRS84" if not layer.crs else None)
    if source_id is None:
        return "input_path's PROJJSON CRS has no id, which is how DuckDB names a CRS"
    if info.bounds is None:
        return "input_path's extent is unknown, so the DuckDB probe has nothing to sample"
    return _probe(source_id, target, target_id, transformer, info.bounds)


def reproject_layer_duckdb(ctx: RunContext) -> None:
    """reproject_layer inside DuckDB: ST_Transform on every row, file to file, the CRS written as the target's.

    The output's validity is not assumed: a transformation can make a valid polygon invalid or a point
    infinite. Points are tested in the COPY (``_checked_points_sql``); other layers, and points whose test stopped
    the COPY without a refusal, are counted by the runner in the written file (verify.facts, in DuckDB).
    """
    from concurrent.futures import ThreadPoolExecutor

    _set_engine(ctx)
    info = ctx.inputs["input_path"]
    layer = _geoparquet(ctx.paths["input_path"], "input_path")
    source = parse_crs(info.crs_wkt)
    target = parse_crs(ctx.arguments["target_crs"])
    _, record = choose_transformer(
        source, target, info.bounds_lonlat, allow_ballpark=bool(ctx.arguments.get("allow_ballpark", False))
    )
    source_id, target_id = layer.crs_id or "OGC:CRS84", crs_label(target)
    assert ctx.temp_output is not None and target_id is not None  # both checked by reproject_eligible
    db = duckdb_database()
    con, scanner = db.cursor(), db.cursor()
    reading, transformed = parts.parquet_source(layer.path), _transform_sql(layer, source_id, target_id)
    declared = dataclasses.replace(layer, crs={"crs": target.to_json_dict()})
    checked = _footer_types(layer.path, layer.geometry) == ["Point"]
    try:
        # The validity scan runs beside the transformation (neither reads the other's result); both are
        # recorded afterwards, in the GeoPandas engine's order.
        with ThreadPoolExecutor(max_workers=1) as pool:
            scanning = pool.submit(_inspect_input, scanner, layer)
            # DuckDB leaves out the GeoParquet metadata when no row has a geometry: the target's CRS is declared
            if checked:
                checked = _copy_checked(ctx, con, _checked_points_sql(layer, transformed, reading), declared)
                if not checked:  # a point failed the test: the GeoPandas engine's refusal, or one read NaN
                    _refuse_outside_target(con, layer, source_id, target_id)
            if not checked:
                copy_out(ctx, con, f"SELECT {transformed} FROM {reading}", declared)
            inspected = scanning.result()
    finally:
        con.close()
        scanner.close()
    scan = _record_input_validity(ctx, inspected)
    record_reprojection(ctx, source, target, record)  # as the GeoPandas engine records it
    if checked:  # every point read was written, present where its source is and finite: the runner need not count
        from mapsmith.runner import OutputStats

        present = ("Point",) if scan.rows > scan.missing else ()
        ctx.output_stats = OutputStats(feature_count=scan.rows, invalid_count=0, geometry_types=present)


def _copy_checked(ctx: RunContext, con: Any, select: str, layer: _GeoParquet) -> bool:
    """copy_out of _checked_points_sql's ``select``: whether it finished (False: a point failed the test, and what
    the COPY had written is removed, for the unchecked COPY to write and the runner to count)."""
    import shutil

    import duckdb

    target = ctx.temp_output
    assert target is not None
    existed = target.is_dir()  # a folder of parts made ready for the COPY is made ready again
    try:
        copy_out(ctx, con, select, layer)
        return True
    except duckdb.Error as exc:
        if NOT_AS_READ not in str(exc):
            raise
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)
    if existed:
        target.mkdir()
    return False


def _refuse_outside_target(con: Any, layer: _GeoParquet, source_id: str, target_id: str) -> None:
    """common.outside_target for the points read with finite coordinates and transformed to non-finite or no
    coordinates, as the GeoPandas engine refuses them (common.check_placed); nothing when there are none (a
    point read with a NaN coordinate, which PROJ answers with the empty point, failed the test)."""
    from mapsmith_opensource.common import OUTSIDE_NAMED, outside_target

    finite = "isfinite(ST_X({0})) AND isfinite(ST_Y({0}))"
    lost = f"NOT ST_IsEmpty(g) AND {finite.format('g')} AND NOT coalesce({finite.format('t')}, false)"  # t empty: NULL
    found = con.execute(
        f"SELECT n, ST_X(g), ST_Y(g), count(*) OVER () FROM (SELECT n, g, {_moved('g', source_id, target_id)} AS t "
        f"FROM {_rows_of(layer)}) WHERE {lost} ORDER BY n LIMIT {OUTSIDE_NAMED}"
    ).fetchall()
    if found:
        first = [(int(n), float(x), float(y)) for n, x, y, _ in found]
        raise outside_target("input_path", target_id, int(found[0][3]), first, REPROJECT_HINT)
