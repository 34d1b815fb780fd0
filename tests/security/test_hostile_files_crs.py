"""The CRS guard reads the bytes the engine reads, or refuses the file.

Three ways a CRS reached PROJ without the guard seeing it, each built by the test: a GeoPackage
whose ``gpkg_spatial_ref_sys`` is a view (or carries a trigger) that answers one SQLite version
differently from another; GeoParquet ``geo`` metadata with the ``crs`` key twice (Python keeps the
last, the Parquet readers the first); and a CRS inside a SQL type modifier (``::GEOMETRY('...')``),
which the SQL walker never visited. The clean twins still run.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError

OUTSIDE_GRID = "/tmp/outside-mapsmith-test/grid.gsb"
HOSTILE_PROJ = f"+proj=longlat +datum=NAD27 +nadgrids={OUTSIDE_GRID} +type=crs"


def _points(path: Path) -> Path:
    import geopandas as gpd
    from shapely.geometry import Point

    gdf = gpd.GeoDataFrame({"a": [1, 2]}, geometry=[Point(1, 2), Point(2, 3)], crs="EPSG:4326")
    if path.suffix == ".parquet":
        gdf.to_parquet(path)
    else:
        gdf.to_file(path)
    return path


def _describe(app: Any, name: str) -> Any:
    return app.run("describe_dataset", {"input_path": name})


def _refused(app: Any, name: str, code: str) -> MapSmithError:
    with pytest.raises(MapSmithError) as info:
        _describe(app, name)
    assert info.value.code == code, info.value.to_dict()
    assert info.value.hint
    return info.value


# -- GeoPackage: gpkg_spatial_ref_sys must be stored rows --------------------------------------


def _hostile_wkt() -> str:
    from pyproj import CRS

    return CRS(HOSTILE_PROJ).to_wkt("WKT1_GDAL")


def test_gpkg_srs_table_replaced_by_a_version_dependent_view_is_refused(app: Any, workspace: Path) -> None:
    path = _points(workspace / "v.gpkg")
    con = sqlite3.connect(path)
    # The guard's SQLite (Python's) sees the honest rows; any other SQLite (GDAL's own) the hostile one.
    con.executescript(
        f"""
        ALTER TABLE gpkg_spatial_ref_sys RENAME TO srs_rows;
        CREATE VIEW gpkg_spatial_ref_sys AS
          SELECT srs_name, srs_id, organization, organization_coordsys_id,
                 CASE WHEN sqlite_version() = '{sqlite3.sqlite_version}' THEN definition
                      ELSE '{_hostile_wkt().replace("'", "''")}' END AS definition,
                 description
          FROM srs_rows;
        """
    )
    con.close()
    error = _refused(app, "v.gpkg", "GPKG_SRS_NOT_A_TABLE")
    assert error.evidence["gpkg_spatial_ref_sys"] == "a view"


def test_gpkg_srs_table_with_a_trigger_is_refused(app: Any, workspace: Path) -> None:
    path = _points(workspace / "t.gpkg")
    con = sqlite3.connect(path)
    con.executescript("CREATE TRIGGER srs_touch AFTER UPDATE ON gpkg_spatial_ref_sys BEGIN SELECT 1; END;")
    con.close()
    error = _refused(app, "t.gpkg", "GPKG_SRS_NOT_A_TABLE")
    assert error.evidence["gpkg_spatial_ref_sys"] == "a table with triggers (srs_touch)"


def test_clean_gpkg_with_a_view_elsewhere_is_read(app: Any, workspace: Path) -> None:
    path = _points(workspace / "c.gpkg")
    con = sqlite3.connect(path)
    con.execute("CREATE VIEW srs_names AS SELECT srs_name FROM gpkg_spatial_ref_sys")  # harmless
    con.commit()
    con.close()
    described = {d["layer"]: d for d in _describe(app, "c.gpkg").answer["described"]}
    assert (described["c"]["crs"], described["c"]["feature_count"]) == ("EPSG:4326", 2)
    assert described["srs_names"]["kind"] == "table"  # GDAL lists the view as a table; it holds no CRS


# -- GeoParquet: a key twice is two readings ----------------------------------------------------


def _parquet_with_geo(path: Path, geo_text: str) -> Path:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {})
    metadata[b"geo"] = geo_text.encode()
    pq.write_table(table.replace_schema_metadata(metadata), path)
    return path


def _duplicated_crs_geo(path: Path) -> str:
    """The file's own ``geo`` text with a hostile ``crs`` first and the honest one last."""
    import pyarrow.parquet as pq
    from pyproj import CRS

    geo = json.loads(pq.read_metadata(path).metadata[b"geo"])
    column = geo["columns"]["geometry"]
    honest = column.pop("crs")
    hostile = CRS(HOSTILE_PROJ).to_json_dict()
    body = json.dumps({"crs": hostile, **column})[:-1] + f', "crs": {json.dumps(honest)}}}'
    assert json.loads(body)["crs"] == honest  # what a last-wins parser (the old guard) saw
    geo_text = json.dumps({**geo, "columns": {"geometry": "@"}}).replace('"@"', body)
    return geo_text


def test_geoparquet_with_a_duplicated_crs_key_is_refused(app: Any, workspace: Path) -> None:
    path = _points(workspace / "d.parquet")
    _parquet_with_geo(path, _duplicated_crs_geo(path))
    error = _refused(app, "d.parquet", "CRS_DECLARATION_UNREADABLE")
    assert "'crs' appears twice" in error.evidence["problem"]


def test_geoparquet_reader_refuses_a_duplicated_key_unconfined(tmp_path: Path) -> None:
    from mapsmith_opensource import io

    path = _points(tmp_path / "d.parquet")
    _parquet_with_geo(path, _duplicated_crs_geo(path))
    with pytest.raises(MapSmithError) as info:
        io.inspect(path)
    assert info.value.code == "INPUT_UNREADABLE"


def test_clean_geoparquet_with_rewritten_metadata_is_read(app: Any, workspace: Path) -> None:
    import pyarrow.parquet as pq

    path = _points(workspace / "c.parquet")
    _parquet_with_geo(path, pq.read_metadata(path).metadata[b"geo"].decode())  # same text, written again
    (described,) = _describe(app, "c.parquet").answer["described"]
    assert (described["crs"], described["feature_count"]) == ("EPSG:4326", 2)


def test_strict_json_refuses_duplicates_at_any_depth() -> None:
    from mapsmith.crsdeclared import DuplicateKeyError, strict_json_loads

    assert strict_json_loads('{"a": {"b": 1, "c": 2}}') == {"a": {"b": 1, "c": 2}}
    with pytest.raises(DuplicateKeyError, match="'b' appears twice"):
        strict_json_loads('{"a": [{"b": 1, "b": 2}]}')


# -- SQL: CRS definitions in type modifiers ------------------------------------------------------


def _tree(sql: str) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect(":memory:", config={"enable_external_access": False, "autoload_known_extensions": False})
    try:
        (raw,) = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()
    finally:
        con.close()
    tree = json.loads(raw)
    assert tree["error"] is False, tree
    return dict(tree["statements"][0])


def test_type_modifier_crs_strings_are_all_found() -> None:
    from mapsmith.crsguard import type_modifier_crs_strings

    sql = (
        f"WITH c AS (SELECT g::GEOMETRY('{HOSTILE_PROJ}') AS g FROM t) "
        "SELECT CAST(g AS GEOMETRY('EPSG:32633')), x::VARCHAR, "
        "(SELECT y::GEOMETRY('+proj=utm +zone=33 +geoidgrids=../up.gtx') FROM u) FROM c"
    )
    found = sorted(type_modifier_crs_strings(_tree(sql)))
    assert found == sorted(
        [
            ("GEOMETRY", HOSTILE_PROJ),
            ("GEOMETRY", "EPSG:32633"),
            ("GEOMETRY", "+proj=utm +zone=33 +geoidgrids=../up.gtx"),
        ]
    )
    assert type_modifier_crs_strings(_tree("SELECT x::DECIMAL(3, 1), y::VARCHAR FROM t")) == []


def test_type_modifier_crs_is_judged_by_the_crs_guard(workspace: Path) -> None:
    from mapsmith.crsguard import check_crs_definition, type_modifier_crs_strings

    found = dict(
        (text, name) for name, text in type_modifier_crs_strings(_tree(f"SELECT g::GEOMETRY('{HOSTILE_PROJ}') FROM t"))
    )
    with pytest.raises(MapSmithError) as info:
        check_crs_definition(next(iter(found)), argument="sql", workspace_root=workspace)
    assert (info.value.code, info.value.evidence["reason"]) == ("CRS_REFERENCES_FILE", "PATH_OUTSIDE_WORKSPACE")
    # The clean twin: an authority code in the modifier passes.
    (clean,) = type_modifier_crs_strings(_tree("SELECT g::GEOMETRY('EPSG:4326') FROM t"))
    check_crs_definition(clean[1], argument="sql", workspace_root=workspace)
