"""Reading and writing vector datasets for the opensource stack (pyogrio, GeoPandas, pyarrow).

One place decides how each format is read and written: GDAL through pyogrio for GeoPackage,
GeoJSON, FlatGeobuf and shapefiles; GeoParquet through pyarrow (the pyogrio wheel's GDAL has no
Parquet driver). Headers are read without loading features wherever the format allows. Every
open goes through ``vector_source`` (``mapsmith.gdalpolicy``): GDAL reads a file with the driver its
extension names, never the one its content suggests. This module never chooses a CRS, never drops a
feature, and never writes anywhere but the path it is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.crsdeclared import strict_json_loads
from mapsmith.errors import InputError, OutputError
from mapsmith.gdalpolicy import check_vector_driver, vector_source
from mapsmith.registry import DatasetInfo
from mapsmith_opensource.layer_facts import duckdb_parts_scan, scan_facts

if TYPE_CHECKING:
    import geopandas as gpd

# Output formats by extension; the GDAL driver name, or "parquet" for GeoParquet via pyarrow.
WRITE_DRIVERS = {
    ".gpkg": "GPKG",
    ".geojson": "GeoJSON",
    ".json": "GeoJSON",
    ".fgb": "FlatGeobuf",
    ".parquet": "parquet",
    ".geoparquet": "parquet",
}
GENERIC_TYPES = {"Unknown", "Geometry", "GeometryCollection", None, ""}
# Drivers whose layer extent is not the extent of the layer's features: LIBKML's extent of a folder
# includes the placemarks of its sub-folders, which are layers of their own.
HEADER_BOUNDS_UNTRUSTED = frozenset({"LIBKML", "KML"})


def is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".geoparquet")


def _hive_keys_plain(path: Path) -> dict[str, Any]:
    """For a hive-partitioned folder, pyarrow's partitioning with each key typed plainly (``parts.hive_key_types``:
    int32 or string) rather than as a dictionary, which pandas would hold as a category and write back as a
    dictionary column: a key is then the same field on every engine. Nothing for a file or plain parts."""
    from mapsmith import parts

    if not parts.is_parts_folder(path) or not parts.hive_columns(path):
        return {}
    import pyarrow.dataset as ds

    return {"partitioning": ds.HivePartitioning.discover()}


def parquet_schema(path: Path) -> Any:
    """The Arrow schema of a GeoParquet file, or of a folder of parts as the GeoPandas engine reads it: the first
    part's columns, then each hive key of the type pyarrow infers from its values (``parts.hive_key_types``:
    ``year=2024`` is ``int32``)."""
    from mapsmith import parts

    if parts.is_parts_folder(path):
        return parts.arrow_dataset(path).schema
    import pyarrow.parquet as pq

    return pq.read_schema(path)


def is_raster(path: Path) -> bool:
    from mapsmith_opensource.raster_io import is_raster as raster_suffix

    return raster_suffix(path)


def list_layers(path: Path) -> list[str]:
    if is_raster(path):
        return []  # a raster's bands are not layers
    if is_parquet(path) or _is_json_array(path):
        return [path.stem]  # one dataset: a GeoParquet layer, or a table
    import pyogrio

    source, _ = vector_source(path)
    try:
        return [str(row[0]) for row in pyogrio.list_layers(source)]
    except Exception as exc:
        raise _unreadable(path, exc) from exc


def _unreadable(path: Path, exc: Exception) -> InputError:
    return InputError(
        f"cannot read {path.name} as a vector dataset: {exc}",
        code="INPUT_UNREADABLE",
        evidence={"path": str(path), "engine_message": str(exc)},
        hint="check the file is a complete GeoPackage, GeoJSON, FlatGeobuf, GeoParquet or shapefile",
    )


def read_layer(path: Path, layer: str | None = None) -> gpd.GeoDataFrame:
    """Read one layer. A shapefile's polygon rings are organised by nesting, not orientation alone:
    ``gdf.attrs["mapsmith_ring_repairs"]`` then lists the features whose rings were re-nested."""
    import geopandas as gpd

    try:
        if is_parquet(path):
            return gpd.read_parquet(path, **_hive_keys_plain(path))
        source, _ = vector_source(path)
        gdf = gpd.read_file(source, layer=layer, engine="pyogrio")
    except InputError:
        raise
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    if path.suffix.lower() in (".shp", ".zip"):  # a zip is read as zipped shapefiles only
        gdf = _organise_shapefile_rings(gdf)
    return gdf


def _organise_shapefile_rings(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """Re-nest rings that GDAL, trusting orientation, read as extra shells.

    A shapefile marks holes by winding (counter-clockwise) alone. A hole wound like a shell comes
    back from GDAL as a second part of a MultiPolygon lying inside the first, which doubles the area
    it should subtract (an easement inside a parcel inflates the parcel). Here a part lying inside
    another part of the same feature becomes a hole of it (islands inside holes become shells again),
    and every such feature is listed so the change is disclosed, never silent.
    """
    from shapely.geometry import MultiPolygon, Polygon

    repaired: list[dict[str, Any]] = []
    values = list(gdf.geometry.values)
    for i, geom in enumerate(values):
        if geom is None or geom.geom_type != "MultiPolygon" or len(geom.geoms) < 2:
            continue
        parts = list(geom.geoms)
        outlines = [Polygon(p.exterior) for p in parts]
        containers = [
            [j for j, o in enumerate(outlines) if j != k and o.contains(outlines[k])] for k in range(len(parts))
        ]
        if not any(containers):
            continue
        depth = [len(c) for c in containers]
        shells: dict[int, list[Any]] = {k: list(p.interiors) for k, p in enumerate(parts) if depth[k] % 2 == 0}
        for k, part in enumerate(parts):
            if depth[k] % 2 == 1:  # a hole: attach it to the innermost shell around it
                parent = max((j for j in containers[k] if depth[j] == depth[k] - 1), key=lambda j: depth[j])
                shells[parent].append(part.exterior)
        rebuilt = [Polygon(parts[k].exterior, holes) for k, holes in shells.items()]
        new = rebuilt[0] if len(rebuilt) == 1 else MultiPolygon(rebuilt)
        repaired.append(
            {
                "feature_index": i,
                "rings_renested": sum(1 for d in depth if d % 2 == 1),
                "area_before": float(geom.area),
                "area_after": float(new.area),
            }
        )
        values[i] = new
    if repaired:
        gdf = gdf.set_geometry(values, crs=gdf.crs)
        gdf.attrs["mapsmith_ring_repairs"] = repaired
    return gdf


def geojson_declared_crs(path: Path) -> str | None:
    """The name in a GeoJSON file's ``crs`` member, read before GDAL does.

    GDAL replaces a ``crs`` it cannot parse (``srid:32610``) with WGS 84 without a word, which reads
    metres as degrees; MapSmith reads the member itself so it can refuse instead.
    """
    import re

    with open(path, "rb") as fh:
        head = fh.read(1 << 20).decode("utf-8", errors="replace")
    match = re.search(r'"crs"\s*:\s*\{', head)
    if match is None:
        return None
    try:
        member, _ = json.JSONDecoder().raw_decode(head, match.end() - 1)
    except json.JSONDecodeError:
        return None
    name = member.get("properties", {}).get("name") if isinstance(member, dict) else None
    return name if isinstance(name, str) else None


def _check_geojson_crs(path: Path, gdal_crs: Any) -> None:
    declared = geojson_declared_crs(path)
    if declared is None:
        return
    from pyproj import CRS

    from mapsmith.crs import parse_crs
    from mapsmith.errors import CRSError, MapSmithError

    try:
        crs = parse_crs(declared)
    except MapSmithError as exc:
        raise CRSError(
            f"{path.name} declares its CRS as {declared!r}, which is not a CRS MapSmith can read "
            f"({exc.message}); GDAL would silently read it as WGS 84",
            code=exc.code if exc.code == "CRS_AMBIGUOUS_SRID" else "CRS_UNREADABLE_DECLARATION",
            evidence={"path": path.name, "declared": declared},
            hint="fix the file's crs member (e.g. EPSG:32610, or urn:ogc:def:crs:EPSG::32610), or remove it if "
            "the coordinates really are WGS 84 longitudes and latitudes",
        ) from exc
    if gdal_crs is None or not crs.equals(CRS.from_user_input(gdal_crs), ignore_axis_order=True):
        raise CRSError(
            f"{path.name} declares {declared!r} but GDAL read {gdal_crs!r}",
            code="CRS_READ_MISMATCH",
            evidence={"path": path.name, "declared": declared, "read": str(gdal_crs)},
            hint="rewrite the file with a standard crs member, or convert it with a tool you trust first",
        )


def write_layer(gdf: gpd.GeoDataFrame, path: Path, layer: str | None = None) -> None:
    driver = WRITE_DRIVERS.get(path.suffix.lower())
    if driver is None:
        raise OutputError(
            f"no writer for {path.suffix!r}",
            code="OUTPUT_FORMAT_UNSUPPORTED",
            evidence={"path": str(path)},
            hint=f"use one of {sorted(WRITE_DRIVERS)}",
        )
    if driver == "parquet":
        from mapsmith_opensource.layer_common import write_geoparquet

        write_geoparquet(gdf, path)  # gdf.to_parquet's bytes, without its slow WKB column
        return
    kwargs: dict[str, Any] = {}
    # Every OGR format stores a layer name (GeoJSON "name", the FlatGeobuf header); left to GDAL it
    # would be the temporary file's random name, and identical runs would write different bytes.
    kwargs["layer"] = layer or path.stem.lstrip(".").split(".tmp-")[0]
    if driver == "GPKG":
        _pin_gpkg_clock()
    gdf.to_file(path, driver=driver, engine="pyogrio", **kwargs)


# GDAL writes the wall clock into gpkg_contents.last_change unless OGR_CURRENT_DATE is set, so two
# identical runs would differ in those bytes and replay could never find them identical. The time of
# a run is in its manifest (started_at, finished_at); the file carries this fixed instant. An
# operator's own OGR_CURRENT_DATE is respected.
GPKG_LAST_CHANGE = "2000-01-01T00:00:00.000Z"


def _pin_gpkg_clock() -> None:
    import pyogrio

    # Process-wide and never unset: every writer sets the same value, so threads cannot race on it.
    if pyogrio.get_gdal_config_option("OGR_CURRENT_DATE") is None:
        pyogrio.set_gdal_config_options({"OGR_CURRENT_DATE": GPKG_LAST_CHANGE})


def _crs_fields(crs_input: Any) -> tuple[str | None, str | None, bool | None, Any]:
    if crs_input in (None, ""):
        return None, None, None, None
    from mapsmith.crs import crs_label, parse_crs

    # parse_crs refuses an authority-less "srid:<n>" and turns an unreadable definition into a
    # CRSError with a hint, whatever metadata (GeoParquet PROJJSON, a GDAL string) it came from.
    crs = parse_crs(crs_input)
    return crs.to_wkt(), crs_label(crs), crs.is_geographic, crs


def _lonlat_bounds(crs: Any, bounds: tuple[float, float, float, float] | None) -> tuple[float, ...] | None:
    if crs is None or bounds is None or any(b != b for b in bounds):  # NaN bounds: empty layer
        return None
    from mapsmith.crs import to_lonlat

    return tuple(float(v) for v in to_lonlat(crs).transform_bounds(*bounds, densify_pts=21))


def _parquet_info(path: Path) -> tuple[Any, int, tuple[str, ...], tuple[float, ...] | None, tuple[str, ...]]:
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    try:
        # Strict: with a key twice (two "crs"), readers disagree on which one is the CRS.
        geo = strict_json_loads((meta.metadata or {}).get(b"geo", b"{}") or b"{}")
    except ValueError as exc:
        raise InputError(
            f"{path.name}: the GeoParquet 'geo' metadata is not strict JSON: {exc}",
            code="INPUT_UNREADABLE",
            evidence={"path": str(path), "problem": str(exc)},
            hint="rewrite the file with geopandas to_parquet, which writes each key once",
        ) from exc
    if not geo:
        raise InputError(
            f"{path.name} is a Parquet file without GeoParquet metadata",
            code="INPUT_NOT_GEOPARQUET",
            evidence={"path": str(path)},
            hint="write it as GeoParquet (geopandas to_parquet)",
        )
    column = geo["columns"][geo["primary_column"]]
    # GeoParquet: a missing "crs" key means OGC:CRS84; an explicit null means no CRS.
    crs = column.get("crs", "OGC:CRS84")
    bbox = tuple(column["bbox"]) if "bbox" in column else None
    fields = tuple(n for n in meta.schema.names if n != geo["primary_column"])
    return crs, meta.num_rows, tuple(column.get("geometry_types", ())), bbox, fields


def _is_json_array(path: Path) -> bool:
    """A .json whose first non-blank byte opens an array: records (a table), not GeoJSON (an object)."""
    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    with path.open("rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def _plain_table(path: Path) -> DatasetInfo | None:
    """A Parquet file without GeoParquet metadata, or a JSON array of records: a table, described from
    its schema and row count. None for anything else. The JSON is parsed whole (``tables.read_table``,
    which also refuses what is not an array of flat records): JSON has no header to read instead."""
    if is_parquet(path):
        import pyarrow.parquet as pq

        try:
            meta = pq.read_metadata(path)
        except Exception as exc:
            raise _unreadable(path, exc) from exc
        if (meta.metadata or {}).get(b"geo"):
            return None
        count, fields, driver = meta.num_rows, tuple(meta.schema.names), "Parquet"
    elif _is_json_array(path):
        from mapsmith_opensource.tables import read_table

        table = read_table(path)
        count, fields, driver = table.num_rows, tuple(table.column_names), "JSON"
    else:
        return None
    return _table_info(path, driver, None, (path.stem,), count, fields)


def _table_info(
    path: Path, driver: str | None, layer: str | None, layers: tuple[str, ...], count: int, fields: tuple[str, ...]
) -> DatasetInfo:
    """A dataset without geometry: no CRS, no extent, rows counted as features."""
    return DatasetInfo(
        path=str(path),
        kind="table",
        driver=driver,
        layer=layer,
        layers=layers,
        crs_wkt=None,
        crs_label=None,
        crs_is_geographic=None,
        feature_count=count,
        geometry_types=(),
        bounds=None,
        bounds_lonlat=None,
        fields=fields,
    )


def inspect(path: Path, layer: str | None = None, *, validity: bool = False) -> DatasetInfo:
    """A header read (plus, with ``validity`` or a generic declared type, a geometry scan)."""
    if is_raster(path):
        from mapsmith_opensource.raster_io import inspect_raster

        # For a raster, ``validity`` means reading every cell for per-band statistics.
        return inspect_raster(path, statistics=validity)
    from mapsmith import parts

    if parts.is_parts_folder(path):  # a folder of Parquet parts is one dataset (mapsmith.parts)
        return parts.inspect_folder(path, layer, validity=validity, scan=duckdb_parts_scan)
    plain = _plain_table(path)
    if plain is not None:
        return plain
    if is_parquet(path):
        crs_input, count, types, bounds, fields = _parquet_info(path)
        driver = "GeoParquet"
        layers: tuple[str, ...] = (path.stem,)
    else:
        import pyogrio

        source, driver_expected = vector_source(path)
        try:
            info = pyogrio.read_info(source, layer=layer, force_feature_count=True, force_total_bounds=True)
        except Exception as exc:
            raise _unreadable(path, exc) from exc
        check_vector_driver(path, info.get("driver"), driver_expected)
        crs_input = info.get("crs")
        if path.suffix.lower() in (".geojson", ".json"):
            _check_geojson_crs(path, crs_input)
        count = int(info["features"])
        types = (info.get("geometry_type"),) if info.get("geometry_type") else ()
        tb = info.get("total_bounds")
        bounds = tuple(float(v) for v in tb) if tb is not None else None
        if info.get("driver") in HEADER_BOUNDS_UNTRUSTED:
            bounds = None  # computed from the features below
        fields = tuple(str(f) for f in info.get("fields", ()))
        driver = info.get("driver")
        layers = tuple(list_layers(path))
        layer = (
            layer
            or (info.get("layer_name") if isinstance(info.get("layer_name"), str) else None)
            or (layers[0] if len(layers) == 1 else None)
        )
    invalid = None
    if not is_parquet(path) and not types:
        # No geometry column at all (a CSV or spreadsheet): a table, described without a geometry scan.
        return _table_info(path, driver, layer, layers, count, fields)
    if validity or not types or set(types) & GENERIC_TYPES or bounds is None:
        facts = scan_facts(path, layer, validity=validity)
        # An empty layer's declared 'Unknown' is not a geometry type: it holds none.
        types = (
            facts.geometry_types if facts.rows - facts.missing else tuple(t for t in types if t not in GENERIC_TYPES)
        )
        if validity:
            invalid = facts.invalid
        if bounds is None and facts.bounds is not None:
            bounds = facts.bounds
    wkt, label, geographic, crs = _crs_fields(crs_input)
    return DatasetInfo(
        path=str(path),
        kind="vector",
        driver=driver,
        layer=layer,
        layers=layers,
        crs_wkt=wkt,
        crs_label=label,
        crs_is_geographic=geographic,
        feature_count=count,
        geometry_types=tuple(t for t in types if t),
        bounds=bounds if bounds and count else None,
        bounds_lonlat=_lonlat_bounds(crs, bounds if count else None),
        invalid_count=invalid,
        fields=fields,
    )


def make_valid_keeping_dimension(geoms: Any) -> tuple[Any, int]:
    """``shapely.make_valid`` keeping each geometry's own dimension (a bow-tie polygon stays polygons,
    its stray lines are counted, not kept): the rule repair_geometries applies to a written file and
    derived.measurable to what an operation reads."""
    import shapely

    fixed = shapely.make_valid(geoms)
    dims = shapely.get_dimensions(geoms)
    kept, dropped = [], 0
    for geom, dim in zip(fixed, dims, strict=True):
        parts = shapely.get_parts(geom)
        same = [p for p in parts if shapely.get_dimensions(p) == dim]
        dropped += len(parts) - len(same)
        kept.append(shapely.union_all(same) if same else shapely.from_wkt("GEOMETRYCOLLECTION EMPTY"))
    return kept, dropped


def repair_geometries(source: Path, target: Path, layer: str | None) -> dict[str, Any]:
    """make_valid on the invalid geometries only, keeping each layer's own dimension."""
    import shapely

    gdf = read_layer(source, layer)
    geoms = gdf.geometry.values
    invalid = ~shapely.is_valid(geoms) & ~shapely.is_missing(geoms)
    # make_valid may return a collection mixing a polygon with stray lines; keep the parts of the
    # original dimension so a polygon layer stays a polygon layer, and count what was dropped.
    kept, dropped = make_valid_keeping_dimension(geoms[invalid])
    out = gdf.copy()
    values = out.geometry.values.copy()
    values[invalid] = kept
    out = out.set_geometry(values)
    write_layer(out, target)
    return {
        "action": "shapely.make_valid",
        "invalid_before": int(invalid.sum()),
        "lower_dimension_parts_dropped": dropped,
    }


class OpenSourceIO:
    """The ``DatasetIO`` of this stack (and the core's default reader)."""

    def inspect(self, path: Path, layer: str | None = None, *, validity: bool = False) -> DatasetInfo:
        return inspect(path, layer, validity=validity)

    def list_layers(self, path: Path) -> list[str]:
        return list_layers(path)

    def repair_geometries(self, source: Path, target: Path, layer: str | None) -> dict[str, Any]:
        return repair_geometries(source, target, layer)
