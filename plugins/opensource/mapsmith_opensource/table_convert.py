"""convert_format to a table: a vector layer written as CSV, JSON records, plain Parquet or an Excel sheet.

The geometry goes where the caller says (``geometry_as``): nowhere (``none``), as WKT text at full
precision (``wkt``), or as two coordinate columns (``xy``: ``lon``/``lat`` in a geographic CRS, ``x``/``y``
in a projected one), always in the layer's own CRS, which the manifest records and a note states.
``xy`` is refused for anything but single points: GDAL's CSV writer (what QGIS's "Export as CSV" with
GEOMETRY=AS_XY uses) writes a polygon's X and Y as empty cells, measured here, and a centroid would be a
position nobody asked for; centroid_layer or point_on_surface make that choice explicit first.
A table input (CSV, a JSON array of records, Parquet without geometry, an .xlsx sheet) is read with
``tables.read_table`` and written as another table format: it has no geometry, so ``geometry_as`` is
not asked for (``none`` is accepted, ``wkt``/``xy`` refused), and a layer output is refused with the
way to make points first (table_to_points). Writing and checking the table is
``mapsmith_opensource.tables``'s work.

This module must never drop a geometry without the caller asking, never transform coordinates, and
never choose column names that overwrite the layer's own fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith.errors import ArgumentError, InputError
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

REGISTRATIONS = (
    Registration(
        "convert_format",
        "convert_to_table",
        engine="pyarrow",
        preference=10,
        eligible="table_output_eligible",
        validate="validate_table_output",
    ),
)
GEOMETRY_CHOICES = ("none", "wkt", "xy")
TABLE_OUTPUTS = (".csv", ".json", ".xlsx", ".parquet")  # what a table input may be written as


def _input_kind(ctx: RunContext) -> str | None:
    info = ctx.inputs.get("input_path")
    return info.kind if info is not None else None


def _is_table_run(ctx: RunContext) -> bool:
    from mapsmith_opensource.tables import is_table_suffix

    out = ctx.output_path
    if out is None:
        return False
    # A table or raster input is this engine's too: a table to convert, a raster to refuse (convert_format's
    # input kind is "any" so that tables reach it; a raster must not reach the layer converter).
    if _input_kind(ctx) in ("table", "raster"):
        return True
    return is_table_suffix(out) or ctx.arguments.get("geometry_as") is not None


def table_output_eligible(ctx: RunContext) -> str | None:
    """This engine takes table outputs (and any run naming geometry_as, to refuse it for a layer)."""
    return None if _is_table_run(ctx) else "the output is a layer, not a table"


def validate_table_output(ctx: RunContext) -> None:
    """geometry_as is required for a table and refused for a layer format; an .xlsx sheet takes the file's
    name, which must be one Excel accepts."""
    from mapsmith_opensource.tables import check_sheet_name, is_table_suffix

    assert ctx.output_path is not None
    suffix = ctx.output_path.suffix.lower()
    how = ctx.arguments.get("geometry_as")
    given = ctx.given_paths.get("input_path", "input_path")
    if _input_kind(ctx) == "raster":
        raise InputError(
            f"input_path must be a vector layer or a table; {given} is a raster",
            code="DATASET_KIND_MISMATCH",
            evidence={"argument": "input_path", "path": given, "expected": "vector or table", "found": "raster"},
            hint="convert_format copies layers and tables; raster_to_polygons turns a grid into features first",
        )
    if _input_kind(ctx) == "table":
        _validate_table_input(ctx, given, suffix, how)
        return
    if how is None and is_table_suffix(suffix):
        raise ArgumentError(
            f"a {suffix} table has no geometry column: say what becomes of the layer's geometries",
            code="TABLE_GEOMETRY_CHOICE_REQUIRED",
            evidence={"argument": "geometry_as", "format": suffix, "choices": list(GEOMETRY_CHOICES)},
            hint="pass geometry_as='wkt' (WKT text), 'xy' (coordinate columns, points only) or 'none' (drop it)",
        )
    if how is not None and suffix not in (".csv", ".json", ".xlsx", ".parquet"):
        raise ArgumentError(
            f"geometry_as applies to table outputs (.csv .json .xlsx .parquet); {suffix} keeps the geometry",
            code="GEOMETRY_AS_NOT_APPLICABLE",
            evidence={"argument": "geometry_as", "format": suffix},
            hint="leave geometry_as out for a layer output, or write a table format",
        )
    if suffix == ".xlsx":
        check_sheet_name(ctx.output_path.stem, "output_path")  # the sheet is named after the file


def _validate_table_input(ctx: RunContext, given: str, suffix: str, how: str | None) -> None:
    from mapsmith_opensource.tables import check_sheet_name

    if suffix not in TABLE_OUTPUTS:
        raise ArgumentError(
            f"{given} is a table (no geometry column), which cannot be written as a {suffix or 'file'} layer",
            code="TABLE_INPUT_LAYER_OUTPUT",
            evidence={
                "argument": "output_path",
                "input": given,
                "format": suffix,
                "table_formats": list(TABLE_OUTPUTS),
            },
            hint="write one of " + ", ".join(TABLE_OUTPUTS) + ", or make points from coordinate columns first "
            "with table_to_points",
        )
    if how not in (None, "none"):
        raise ArgumentError(
            f"geometry_as={how!r} writes a layer's geometries, and {given} is a table without any",
            code="GEOMETRY_AS_NOT_APPLICABLE",
            evidence={"argument": "geometry_as", "value": how, "input": given},
            hint="leave geometry_as out for a table input (table_to_points makes points from its columns)",
        )
    if suffix == ".xlsx":
        check_sheet_name(ctx.output_path.stem if ctx.output_path else "", "output_path")


def _convert_table(ctx: RunContext) -> None:
    """A table read with read_table and written as another table format, every row and column kept."""
    import pyarrow as pa

    from mapsmith_opensource.tables import deliver_table, read_table

    ctx.set_engine("pyarrow", pa.__version__)
    table = read_table(ctx.paths["input_path"], sheet=ctx.layers.get("input_path"))
    count = ctx.inputs["input_path"].feature_count
    if count is not None:
        ctx.check(
            "feature_count_exact",
            table.num_rows == count,
            f"expected {count} rows (as the input's header reports), got {table.num_rows}",
        )
    ctx.notes.append(f"a table in, a table out: {table.num_rows} rows, columns {', '.join(table.column_names)}")
    deliver_table(ctx, table)


def convert_to_table(ctx: RunContext) -> None:
    """The layer's attributes (and its geometry as chosen) written as a table and read back."""
    if _input_kind(ctx) == "table":
        _convert_table(ctx)
        return
    import geopandas as gpd
    import pyarrow as pa
    import pyogrio
    import shapely

    from mapsmith.crs import crs_label
    from mapsmith_opensource.common import read_input
    from mapsmith_opensource.tables import deliver_table

    assert ctx.output_path is not None
    ctx.set_engine("pyarrow", pa.__version__, pyogrio=pyogrio.__version__, GDAL=pyogrio.__gdal_version_string__)
    how = ctx.arguments.get("geometry_as") or "none"
    ctx.parameters["geometry_as"] = how
    gdf: gpd.GeoDataFrame = read_input(ctx)
    geoms = gdf.geometry.values
    attributes = gdf.drop(columns=[gdf.geometry.name])
    table = pa.Table.from_pandas(attributes, preserve_index=False)
    crs = gdf.crs
    label = crs_label(crs) if crs is not None else None
    missing = int((shapely.is_missing(geoms) | shapely.is_empty(geoms)).sum())
    added: list[tuple[str, pa.Array]] = []
    if how == "wkt":
        # Full precision: shapely's default rounds WKT to 6 decimals, which moves projected coordinates.
        added.append(("wkt", pa.array(shapely.to_wkt(geoms, rounding_precision=-1), type=pa.string())))
        ctx.notes.append(f"the wkt column holds each geometry at full precision, in {label} (not transformed)")
    elif how == "xy":
        kinds = {str(t) for t in gdf.geom_type.dropna().unique()}
        if kinds - {"Point"}:
            raise InputError(
                f"geometry_as='xy' writes one coordinate pair per feature; {ctx.given_paths.get('input_path')} "
                f"holds {', '.join(sorted(kinds))} geometries",
                code="TABLE_XY_NEEDS_POINTS",
                evidence={"argument": "geometry_as", "geometry_types": sorted(kinds)},
                hint="make points first (centroid_layer, or point_on_surface for a point inside each polygon; "
                "explode_layer for multipoints), or write geometry_as='wkt'",
            )
        names = ("lon", "lat") if crs is not None and crs.is_geographic else ("x", "y")
        present = shapely.is_missing(geoms) | shapely.is_empty(geoms)
        xs = shapely.get_x(geoms)
        ys = shapely.get_y(geoms)
        added.append((names[0], pa.array(xs, mask=present, type=pa.float64())))
        added.append((names[1], pa.array(ys, mask=present, type=pa.float64())))
        axis = "longitude and latitude in degrees" if names[0] == "lon" else "easting and northing"
        ctx.notes.append(f"{names[0]}/{names[1]} hold {axis} in {label} (the layer's CRS, not transformed)")
    else:
        ctx.notes.append(f"geometries were left out as asked (geometry_as='none'); the layer was in {label}")
    clash = [name for name, _ in added if name in table.column_names]
    if clash:
        raise InputError(
            f"the layer already has field(s) {clash}, the name(s) geometry_as={how!r} writes",
            code="TABLE_COLUMN_EXISTS",
            evidence={"argument": "geometry_as", "columns": clash},
            hint="rename the field first (rename_fields), or choose another geometry_as",
        )
    for position, (name, values) in enumerate(added):
        table = table.add_column(position, name, values)  # first, as GDAL's CSV writer places them
    if how != "none" and missing:
        ctx.notes.append(f"{missing} feature(s) without a geometry have empty {' and '.join(n for n, _ in added)}")
    count = ctx.inputs["input_path"].feature_count
    ctx.check(
        "feature_count_exact",
        table.num_rows == count,
        f"expected {count} rows (one per input feature), got {table.num_rows}",
    )
    ctx.crs_decisions["x-mapsmith:coordinates_crs"] = label if how != "none" else None
    deliver_table(ctx, table, crs=crs if how != "none" else None)
