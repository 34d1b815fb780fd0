"""One scan of an input, not two: the facts a header read counted (layer_facts) answer a DuckDB engine's input
scan (spatial_join_duckdb._scan) only while the file is unchanged, and only when the read counted validity.

Worked by hand, EPSG:32610, a GeoParquet file whose footer declares Point and no bbox (as DuckDB writes it, so the
header read scans the geometries for the extent):

    Q0 (X0, Y0) valid, Q1 (X0 + 10, NaN) invalid (GEOS: a point needs a finite x and y), Q2 no geometry,
    Q3 an empty point                     -> rows 4, missing 2 (Q2, Q3), invalid 1 (Q1), types (Point,)
    the same four with Q1 at (X0 + 10, Y0 + 5): invalid 0; the WKB of a NaN and of a number are both 8 bytes
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, Polygon, box

from layers import drop_bbox, manifest, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
TRAP = [Point(X0, Y0), Point(X0 + 10, math.nan), None, Point()]
TWIN = [Point(X0, Y0), Point(X0 + 10, Y0 + 5), None, Point()]


@pytest.fixture(autouse=True)
def nothing_kept() -> Any:
    from mapsmith_opensource import layer_facts

    layer_facts._kept.clear()
    yield
    layer_facts._kept.clear()


def _no_bbox(path: Path, geometries: list[Any], **columns: list[Any]) -> Path:
    """``geometries`` as GeoParquet whose footer declares their types but no bbox, uncompressed (so a coordinate's
    eight bytes can be found in the file)."""
    return drop_bbox(write_layer(path, geometries, UTM, **columns), compression="none")


def _scan(path: Path, con: Any = None) -> Any:
    from mapsmith_opensource.join_ops.spatial_join_duckdb import _geoparquet, _scan, duckdb_database

    layer = _geoparquet(path, "input_path")
    if con is not None:
        return _scan(con, layer)
    with duckdb_database().cursor() as cursor:
        return _scan(cursor, layer)


class _NoQuery:
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the input was scanned again")


def test_a_header_read_of_points_counts_validity_and_the_engine_scan_reuses_it(tmp_path: Path) -> None:
    from mapsmith_opensource import io, layer_facts
    from mapsmith_opensource.join_ops.spatial_join_duckdb import _Scan

    path = _no_bbox(tmp_path / "q.parquet", TRAP, pid=["Q0", "Q1", "Q2", "Q3"])
    info = io.inspect(path)  # the header read check_inputs makes: no validity asked
    assert info.invalid_count is None
    assert info.bounds is not None  # the extent was scanned, so the geometries were read
    kept = layer_facts.counted_facts(path)
    assert kept is not None
    assert (kept.rows, kept.missing, kept.invalid, kept.geometry_types) == (4, 2, 1, ("Point",))
    reused = _scan(path, _NoQuery())
    assert reused == _Scan(rows=4, missing=2, invalid=1, types=("Point",))
    layer_facts._kept.clear()
    assert _scan(path) == reused  # the engine's own scan finds the same


def test_a_header_read_without_validity_still_answers_no_invalid_count(tmp_path: Path) -> None:
    """The facts kept count Q1; the answer to a caller that did not ask for validity does not."""
    from mapsmith_opensource import layer_facts

    path = _no_bbox(tmp_path / "q.parquet", TRAP)
    assert layer_facts.scan_facts(path, validity=False).invalid == 0
    assert layer_facts.counted_facts(path).invalid == 1  # type: ignore[union-attr]
    assert layer_facts.scan_facts(path, validity=True).invalid == 1


@pytest.mark.parametrize("change", ["rewritten in place", "replaced", "rewritten, same size and modification time"])
def test_a_file_changed_after_its_header_read_is_scanned_again(tmp_path: Path, change: str) -> None:
    """The trap: the twin was read (0 invalid), then the file became the trap. The kept facts must not answer."""
    from mapsmith_opensource import io, layer_facts

    path = _no_bbox(tmp_path / "q.parquet", TWIN, pid=["Q0", "Q1", "Q2", "Q3"])
    io.inspect(path)
    assert layer_facts.counted_facts(path).invalid == 0  # type: ignore[union-attr]
    before = os.stat(path)
    if change == "replaced":
        os.replace(_no_bbox(tmp_path / "other.parquet", TRAP, pid=["Q0", "Q1", "Q2", "Q3"]), path)
    elif change == "rewritten in place":
        _no_bbox(path, TRAP, pid=["Q0", "Q1", "Q2", "Q3"])
    else:  # Q1's y, Y0 + 5, becomes NaN byte for byte: the file keeps its size, and its time is set back
        data = path.read_bytes()
        y, nan = struct.pack("<d", Y0 + 5), struct.pack("<d", math.nan)
        assert y in data
        with open(path, "r+b") as f:
            f.write(data.replace(y, nan))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert layer_facts.counted_facts(path) is None
    assert _scan(path).invalid == 1


def _point_parts(folder: Path, geometries: list[Any]) -> Path:
    """``geometries`` as a folder of two parts (the first two, then the rest), each as _no_bbox writes it."""
    folder.mkdir()
    _no_bbox(folder / "part-0.parquet", geometries[:2])
    _no_bbox(folder / "part-1.parquet", geometries[2:])
    return folder


def test_a_folder_of_point_parts_keeps_the_facts_of_its_header_read(tmp_path: Path) -> None:
    """The folder's rows are TRAP's four, split over two parts: rows 4, missing 2 (Q2, Q3), invalid 1 (Q1)."""
    from mapsmith_opensource import io, layer_facts

    folder = _point_parts(tmp_path / "q.parquet", TRAP)
    info = io.inspect(folder)
    assert info.invalid_count is None  # not asked for
    kept = layer_facts.counted_facts(folder)
    assert kept is not None
    assert (kept.rows, kept.missing, kept.invalid, kept.geometry_types) == (4, 2, 1, ("Point",))
    assert layer_facts.counted_facts(folder / "part-0.parquet") is None  # a part alone was never scanned


@pytest.mark.parametrize("change", ["a part rewritten", "a part added", "a part removed"])
def test_a_folder_whose_parts_changed_is_scanned_again(tmp_path: Path, change: str) -> None:
    """Read as TWIN (0 invalid); then the folder changes. No answer from the kept facts."""
    from mapsmith_opensource import io, layer_facts

    folder = _point_parts(tmp_path / "q.parquet", TWIN)
    io.inspect(folder)
    assert layer_facts.counted_facts(folder).invalid == 0  # type: ignore[union-attr]
    if change == "a part rewritten":
        _no_bbox(folder / "part-1.parquet", TRAP[2:] + [Point(X0, math.nan)])
    elif change == "a part added":
        _no_bbox(folder / "part-2.parquet", [Point(X0, math.nan)])
    else:
        (folder / "part-1.parquet").unlink()
    assert layer_facts.counted_facts(folder) is None
    again = io.inspect(folder, validity=True)
    assert again.invalid_count == (0 if change == "a part removed" else 1)


def test_a_folder_of_polygon_parts_keeps_nothing(tmp_path: Path) -> None:
    from mapsmith_opensource import io, layer_facts

    folder = tmp_path / "poly.parquet"
    folder.mkdir()
    _no_bbox(folder / "part-0.parquet", [box(0, 0, 1, 1)])
    _no_bbox(folder / "part-1.parquet", [Polygon([(0, 0), (2, 2), (2, 0), (0, 2)])])
    assert io.inspect(folder).bounds == (0.0, 0.0, 2.0, 2.0)
    assert layer_facts.counted_facts(folder) is None


def test_polygons_are_read_without_validity_and_nothing_is_kept(tmp_path: Path) -> None:
    """A polygon's validity is GEOS's work (ST_IsValid), not a small share of the scan: a header read does not
    count it, so there is nothing to reuse, and the engine scans (finding the bow-tie)."""
    from mapsmith_opensource import io, layer_facts

    bow = Polygon([(0, 0), (2, 2), (2, 0), (0, 2)])
    path = _no_bbox(tmp_path / "poly.parquet", [box(0, 0, 1, 1), bow])
    assert io.inspect(path).bounds == (0.0, 0.0, 2.0, 2.0)
    assert layer_facts.counted_facts(path) is None
    assert _scan(path).invalid == 1


def test_select_features_on_duckdb_takes_the_input_check_from_the_header_read(
    make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    """End to end: the run's input check reads 1 of 4 invalid (feature 1), 2 empty or missing, as the engine's own
    scan reads them (test_select_duckdb's case), and the engine's scan was answered by the kept facts."""
    from mapsmith_opensource import layer_facts, select_duckdb

    monkeypatch.setattr(select_duckdb, "SELECT_MIN_ROWS", 0)
    _no_bbox(workspace / "q.parquet", TRAP, pid=["Q0", "Q1", "Q2", "Q3"], k=[0, 1, 2, 3])
    answered: list[bool] = []
    real = layer_facts.counted_facts
    monkeypatch.setattr(layer_facts, "counted_facts", lambda p: answered.append(real(p) is not None) or real(p))
    result = make_app().run(
        "select_features", {"input_path": "q.parquet", "where": "k > 0", "output_path": "out.parquet"}
    )
    assert result.engine["name"] == "duckdb"
    assert answered == [True]
    (validity,) = [
        c for c in manifest(workspace / "out.parquet")["verification"] if c["name"].endswith("geometry_valid")
    ]
    assert "input_path: 1 of 4 geometries invalid (first feature indices [1]" in validity["detail"]
    assert "2 empty or missing" in validity["detail"]
