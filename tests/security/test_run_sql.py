"""run_sql on data whose answers are known before it runs: areas, counts, the manifest's inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError


def _squares(path: Path, sizes: list[float], crs: str = "EPSG:32633") -> None:
    import geopandas as gpd
    from shapely.geometry import box

    gdf = gpd.GeoDataFrame(
        {"id": list(range(1, len(sizes) + 1)), "size": sizes},
        geometry=[box(i * 1000.0, 0.0, i * 1000.0 + s, s) for i, s in enumerate(sizes)],
        crs=crs,
    )
    gdf.to_file(path, driver="GPKG", layer=path.stem)


def _points(path: Path, xy: list[tuple[float, float]], crs: str = "EPSG:32633") -> None:
    import geopandas as gpd
    from shapely.geometry import Point

    gpd.GeoDataFrame({"n": list(range(len(xy)))}, geometry=[Point(x, y) for x, y in xy], crs=crs).to_file(
        path, driver="GPKG", layer=path.stem
    )


@pytest.fixture
def data(workspace: Path) -> Path:
    _squares(workspace / "squares.gpkg", [10.0, 20.0, 30.0])  # areas 100, 400, 900
    # two points in the 10 m square, one in the 30 m square, one outside all
    _points(workspace / "points.gpkg", [(1, 1), (5, 5), (2010, 10), (9000, 9000)])
    return workspace


def _manifest(workspace: Path, name: str) -> dict[str, Any]:
    return json.loads((workspace / f"{name}.provenance.json").read_text("utf-8"))


def test_area_of_known_squares(app: Any, data: Path) -> None:
    result = app.run(
        "run_sql",
        {
            "sql": "SELECT id, ST_Area(geom) AS area_m2, geom FROM ST_Read('squares.gpkg') ORDER BY id",
            "output_path": "areas.gpkg",
        },
    )
    import geopandas as gpd

    out = gpd.read_file(data / "areas.gpkg")
    assert list(out["area_m2"]) == [100.0, 400.0, 900.0]
    assert out.crs.to_epsg() == 32633
    assert result.answer["feature_count"] == 3
    record = _manifest(data, "areas.gpkg")
    from mapsmith.provenance.digests import dataset_digest

    assert [(i["path"], i["argument"], i["sha256"]) for i in record["inputs"]] == [
        ("squares.gpkg", "sql_paths[0]", dataset_digest(data / "squares.gpkg"))
    ]
    assert record["inputs"][0]["crs"] == "EPSG:32633"
    assert record["parameters"]["sql"].startswith("SELECT id")
    assert record["output"]["crs"] == "EPSG:32633"


def test_join_count_and_both_inputs_recorded(app: Any, data: Path) -> None:
    app.run(
        "run_sql",
        {
            "sql": "SELECT s.id, count(p.n) AS points, s.geom FROM ST_Read('squares.gpkg') s "
            "LEFT JOIN ST_Read('points.gpkg') p ON ST_Contains(s.geom, p.geom) GROUP BY s.id, s.geom ORDER BY s.id",
            "output_path": "counts.gpkg",
        },
    )
    import geopandas as gpd

    out = gpd.read_file(data / "counts.gpkg")
    assert list(out["points"]) == [2, 0, 1]
    record = _manifest(data, "counts.gpkg")
    assert sorted(i["path"] for i in record["inputs"]) == ["points.gpkg", "squares.gpkg"]


def test_cte_and_subquery_over_one_dataset(app: Any, data: Path) -> None:
    app.run(
        "run_sql",
        {
            "sql": "WITH big AS (SELECT * FROM ST_Read('squares.gpkg') WHERE size > 15) "
            "SELECT id, geom FROM big WHERE id IN (SELECT id FROM big WHERE size < 25)",
            "output_path": "middle.parquet",
        },
    )
    import geopandas as gpd

    assert list(gpd.read_parquet(data / "middle.parquet")["id"]) == [2]
    assert len(_manifest(data, "middle.parquet")["inputs"]) == 1  # one file, named twice, recorded once


def test_points_from_csv_need_a_stated_crs(app: Any, workspace: Path) -> None:
    (workspace / "stations.csv").write_text("name,x,y\na,100,200\nb,300,400\n", "utf-8")
    sql = "SELECT name, ST_Point(x, y) AS geom FROM read_csv('stations.csv') ORDER BY name"
    with pytest.raises(MapSmithError) as refused:
        app.run("run_sql", {"sql": sql, "output_path": "stations.gpkg"})
    assert refused.value.code == "SQL_CRS_REQUIRED"
    app.run("run_sql", {"sql": sql, "output_crs": "EPSG:32633", "output_path": "stations.gpkg"})
    import geopandas as gpd

    out = gpd.read_file(workspace / "stations.gpkg")
    assert out.crs.to_epsg() == 32633
    assert [(g.x, g.y) for g in out.geometry] == [(100.0, 200.0), (300.0, 400.0)]
    assert _manifest(workspace, "stations.gpkg")["inputs"][0]["path"] == "stations.csv"


def test_transform_needs_output_crs(app: Any, data: Path) -> None:
    sql = "SELECT id, ST_Transform(geom, 'EPSG:32633', 'EPSG:3035') AS geom FROM ST_Read('squares.gpkg')"
    with pytest.raises(MapSmithError) as refused:
        app.run("run_sql", {"sql": sql, "output_path": "t.gpkg"})
    assert refused.value.code == "SQL_CRS_REQUIRED"


def test_column_crs_wins_and_a_contradicting_output_crs_is_refused(app: Any, data: Path) -> None:
    # DuckDB 1.5 carries the CRS in the column type (GEOMETRY('EPSG:4326')): p.geom keeps lonlat.gpkg's.
    _points(data / "lonlat.gpkg", [(15.0, 50.0)], crs="EPSG:4326")
    sql = "SELECT p.n, p.geom FROM ST_Read('lonlat.gpkg') p, ST_Read('squares.gpkg') s WHERE s.id = 1"
    with pytest.raises(MapSmithError) as refused:
        app.run("run_sql", {"sql": sql, "output_crs": "EPSG:32633", "output_path": "mixed.gpkg"})
    assert refused.value.code == "SQL_CRS_CONFLICT"
    app.run("run_sql", {"sql": sql, "output_path": "mixed.gpkg"})
    import geopandas as gpd

    assert gpd.read_file(data / "mixed.gpkg").crs.to_epsg() == 4326
    assert len(_manifest(data, "mixed.gpkg")["inputs"]) == 2


def test_result_without_one_geometry_column_is_refused(app: Any, data: Path) -> None:
    with pytest.raises(MapSmithError) as refused:
        app.run("run_sql", {"sql": "SELECT id FROM ST_Read('squares.gpkg')", "output_path": "nogeom.gpkg"})
    assert refused.value.code == "SQL_GEOMETRY_COLUMN"
    assert not (data / "nogeom.gpkg").exists()


def test_unconfined_server_still_refuses_install_and_load(tmp_path: Path) -> None:
    from mapsmith.app import MapSmith

    app = MapSmith({})
    for sql in ("INSTALL httpfs", "LOAD spatial", "SELECT 1; INSTALL httpfs"):
        with pytest.raises(MapSmithError) as refused:
            app.run("run_sql", {"sql": sql, "output_path": str(tmp_path / "x.gpkg")})
        assert refused.value.code in ("SQL_NOT_SELECT", "SQL_MULTIPLE_STATEMENTS")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MAPSMITH_DUCKDB_MEMORY", "lots"),
        ("MAPSMITH_DUCKDB_TEMP_LIMIT", "-1GB"),
        ("MAPSMITH_ALLOW_EXTENSIONS", "httpfs"),
    ],
)
def test_bad_duckdb_settings_are_structured_errors(make_app: Any, data: Path, variable: str, value: str) -> None:
    app = make_app(**{variable: value})
    with pytest.raises(MapSmithError) as refused:
        app.run("run_sql", {"sql": "SELECT id, geom FROM ST_Read('squares.gpkg')", "output_path": "s.gpkg"})
    assert refused.value.code in ("DUCKDB_LIMIT_INVALID", "DUCKDB_EXTENSION_REFUSED")
    assert refused.value.evidence["variable"] == variable


def test_memory_cap_reaches_the_connection(data: Path) -> None:
    from mapsmith_opensource.duckdb_spatial import sandboxed_connect

    sandbox = sandboxed_connect(data, {"MAPSMITH_DUCKDB_MEMORY": "512MB", "MAPSMITH_DUCKDB_TEMP_LIMIT": "1GB"})
    try:
        memory, temp, locked = sandbox.connection.execute(
            "SELECT current_setting('memory_limit'), current_setting('max_temp_directory_size'), "
            "current_setting('lock_configuration')"
        ).fetchone()
    finally:
        sandbox.close()
    assert (memory, temp, locked) == ("488.2 MiB", "953.6 MiB", True)
    assert not sandbox.temp_directory.exists() and not sandbox.extension_directory.exists()
