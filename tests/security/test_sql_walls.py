"""run_sql's two walls added for issue 18: ST_Read opens a file with the one driver its extension names,
and a CRS hidden in a cast's type modifier is judged like every CRS argument.

The mechanism of the first is tested on DuckDB directly in ``test_hostile_files.py``; here the run_sql
path itself: the statement that runs carries ``allowed_drivers``, and a clean CSV is still answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError


def _points_csv(path: Path) -> None:
    path.write_text("name,x,y\nalpha,500000,4000000\nbeta,500030,4000040\n", "utf-8")


def test_st_read_runs_with_the_extension_driver_only(app: Any, workspace: Path) -> None:
    from mapsmith_opensource.sql_analysis import analyse

    _points_csv(workspace / "pts.csv")
    sql = "SELECT name, ST_Point(CAST(x AS DOUBLE), CAST(y AS DOUBLE)) AS geom FROM ST_Read('pts.csv')"
    found = analyse(sql, app.workspace)
    assert "allowed_drivers" in found.statement and "'CSV'" in found.statement
    # A list the caller gives is replaced by the policy's, never taken
    given = analyse(sql.replace("'pts.csv')", "'pts.csv', allowed_drivers=['OGR_VRT'])"), app.workspace)
    assert "OGR_VRT" not in given.statement and "'CSV'" in given.statement
    # ... and the statement is stable under the second check run_sql makes
    assert analyse(found.statement, app.workspace).statement == found.statement


def test_clean_csv_through_run_sql_is_answered(app: Any, workspace: Path) -> None:
    _points_csv(workspace / "pts.csv")
    sql = (
        "SELECT name, ST_Point(CAST(x AS DOUBLE), CAST(y AS DOUBLE)) AS geom FROM ST_Read('pts.csv') "
        "WHERE CAST(x AS DOUBLE) > 500010"
    )
    result = app.run("run_sql", {"sql": sql, "output_path": "east.parquet", "output_crs": "EPSG:32610"})
    import geopandas as gpd

    frame = gpd.read_parquet(workspace / "east.parquet")
    # Only beta lies east of x = 500010
    assert list(frame["name"]) == ["beta"] and (frame.geometry.x[0], frame.geometry.y[0]) == (500030, 4000040)
    assert result.status == "ok"


@pytest.mark.parametrize(
    "modifier",
    [
        "+proj=longlat +datum=WGS84 +nadgrids=/etc/outside_grid.gsb",
        "+proj=longlat +ellps=GRS80 +geoidgrids=../outside.gtx",
    ],
)
def test_a_crs_in_a_type_modifier_is_checked(app: Any, workspace: Path, modifier: str) -> None:
    sql = f"SELECT ST_Point(1, 2)::GEOMETRY('{modifier}') AS geom"
    with pytest.raises(MapSmithError) as info:
        app.run("run_sql", {"sql": sql, "output_path": "p.parquet"})
    assert info.value.code == "CRS_REFERENCES_FILE"
    assert not (workspace / "p.parquet").exists()


def test_a_plain_crs_in_a_type_modifier_is_no_refusal_reason(app: Any, workspace: Path) -> None:
    from mapsmith_opensource.sql_analysis import analyse

    found = analyse("SELECT ST_Point(1, 2)::GEOMETRY('EPSG:4326') AS geom", app.workspace)
    assert found.crs_literals == ["EPSG:4326"]
