"""The DuckDB engines of the file-to-file operations run without importing pandas, whose import is 0.25 s of a fresh
process's run (a tenth of a 1,000,000-point reproject_layer). Each run is a fresh interpreter, as a benchmark or a
one-shot client starts one; the inputs are written first, in another process. Found by tracing the import: DuckDB
imports pandas to register an Arrow table or bind a Python parameter, and pyarrow's read_table, write_table and
binary to_numpy import it too. clip_layer's mask is read by pyarrow when it is GeoParquet in the points' CRS."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shapely.geometry import Point, box

from layers import write_layer

RUN = """
import json, sys
from mapsmith.app import MapSmith
app = MapSmith({"MAPSMITH_WORKSPACE": sys.argv[1], "MAPSMITH_DUCKDB_LAYER_MIN_FEATURES": "0"})
result = app.run(sys.argv[2], json.loads(sys.argv[3]))
print(json.dumps({"engine": result.engine["name"], "status": result.status, "pandas": "pandas" in sys.modules}))
"""

CASES = {
    "reproject_layer": {"input_path": "pts.parquet", "target_crs": "EPSG:4326", "output_path": "r.parquet"},
    "select_features": {"input_path": "pts.parquet", "where": "v > 1", "output_path": "s.parquet"},
    "run_sql": {"sql": "SELECT count(*) AS n FROM read_parquet('pts.parquet') WHERE v > 1", "output_path": "n.parquet"},
    # the mask (GeoParquet, the points' CRS) read by pyarrow: sql_layer_ops._mask_geoparquet
    "clip_layer": {"input_path": "pts.parquet", "mask_path": "mask.parquet", "output_path": "c.parquet"},
    # nothing selected: DuckDB writes no GeoParquet metadata for an empty file, which the engine adds itself
    "select_features (empty)": {"input_path": "pts.parquet", "where": "v > 10", "output_path": "e.parquet"},
}


@pytest.mark.parametrize("operation", sorted(CASES))
def test_a_duckdb_run_imports_no_pandas(workspace: Path, operation: str) -> None:
    case = operation
    operation = operation.split(" ")[0]
    # three UTM 10N points; v > 1 keeps two of them
    points = [Point(500_000, 5_000_000), Point(500_100, 5_000_100), Point(500_200, 5_000_200)]
    write_layer(workspace / "pts.parquet", points, "EPSG:32610", v=[1.0, 2.0, 3.0])
    write_layer(workspace / "mask.parquet", [box(499_950, 4_999_950, 500_150, 5_000_150)], "EPSG:32610", m=[1])
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(workspace), operation, json.dumps(CASES[case])],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    empty = case.endswith("(empty)")
    assert answer["engine"] == "duckdb" and answer["status"] == ("ok_with_warnings" if empty else "ok")
    assert answer["pandas"] is False
    if empty:  # zero rows, and the GeoParquet metadata (geometry column, the input's CRS) added
        import pyarrow.parquet as pq

        meta = pq.read_metadata(workspace / "e.parquet")
        geo = json.loads(meta.metadata[b"geo"])
        assert meta.num_rows == 0 and geo["primary_column"] == "geometry"
        assert geo["columns"]["geometry"]["crs"]["id"] == {"authority": "EPSG", "code": 32610}


def test_nearest_join_s_columns_path_imports_no_pandas(workspace: Path) -> None:
    # GeoParquet to GeoParquet in UTM 10N: join_ops.nearest_columns (pyarrow's ParquetFile and buffers, never
    # pyarrow.array on numpy, which asks pandas); the points' nearest sites are 100 and 50 m away
    write_layer(
        workspace / "pts.parquet", [Point(500_000, 5_000_000), Point(500_300, 5_000_000)], "EPSG:32610", v=[1, 2]
    )
    write_layer(
        workspace / "sites.parquet", [Point(500_100, 5_000_000), Point(500_350, 5_000_000)], "EPSG:32610", s=[7, 8]
    )
    arguments = {"input_path": "pts.parquet", "join_path": "sites.parquet", "output_path": "n.parquet"}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(workspace), "nearest_join", json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"engine": "geopandas", "status": "ok", "pandas": False}
    import pyarrow.parquet as pq

    written = pq.read_table(workspace / "n.parquet")
    assert (written.column("s").to_pylist(), written.column("distance_m").to_pylist()) == ([7, 8], [100.0, 50.0])
