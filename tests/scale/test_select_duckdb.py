"""select_features by attribute on DuckDB, file to file (mapsmith_opensource.select_duckdb): the rows, the counts
and the record the GeoPandas engine gives (the clean twin of every case), and GeoPandas where they could differ,
with the reason.

Eight points P0..P7 in EPSG:32610, fields:
    n     0 1 2 3 4 5 6 7                        (int64, no nulls)
    v     0.5 NaN 2.5 null 4.5 5.5 6.5 7.5       (float64: P1 a real NaN in the file, P3 a null)
    name  oak Oak pine null o_k 50% élan fir     (text)
    flag  T F T T F T F T                        (boolean)
Worked out by hand, Kleene logic, NaN and null both missing as pandas reads them:
    v > 2 AND name LIKE 'o%'      v > 2: F U T U T T T T; LIKE: T F F U T F F F; AND: F F F U T F F F
                                  -> [P4]; matched 1, not 6, unknown 1
    n NOT BETWEEN v AND 2         unknown where v is missing (P1, P3), even though n <= 2 fails for P3 (3 > 2),
                                  which SQL's plain x >= lo AND x <= hi would call false; elsewhere n < v, so
                                  outside -> [P0, P2, P4, P5, P6, P7]; matched 6, not 0, unknown 2. A NaN
                                  compared as DuckDB orders it (above every number) would have selected P1.
    name IN ('oak', 'fir') OR name IS NULL -> [P0, P3, P7]; unknown 0
    name LIKE '_lan' OR name LIKE '50!%' ESCAPE '!' -> [P5, P6] ('é' is one character)
    flag, with v between 2.5 and 6.5: flag T at P0 P2 P3 P5 P7 (matched 5, not 3); the range T at P2 P4 P5 P6
                                  (4), F at P0 P7 (2), unknown at P1 P3 (2) -> [P2, P5]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import DUCKDB_LIMIT_NOTE, manifest, read, shared_notes, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
PIDS = ["P0", "P1", "P2", "P3", "P4", "P5", "P6", "P7"]


@pytest.fixture
def duck(make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A service whose DuckDB select_features is considered at any size."""
    from mapsmith_opensource import select_duckdb

    monkeypatch.setattr(select_duckdb, "SELECT_MIN_ROWS", 0)
    return make_app()


def _reference(app: Any, monkeypatch: pytest.MonkeyPatch, arguments: dict[str, Any]) -> Any:
    """The same run with the DuckDB engine's threshold out of reach: GeoPandas runs."""
    from mapsmith_opensource import select_duckdb

    with monkeypatch.context() as patch:
        patch.setattr(select_duckdb, "SELECT_MIN_ROWS", 10**12)
        return app.run("select_features", arguments)


def _case(workspace: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_layer(
        workspace / "p.parquet",
        [Point(X0 + 10 * i, Y0 + 5 * i) for i in range(8)],
        UTM,
        pid=PIDS,
        n=list(range(8)),
        v=[0.5, 1.0, 2.5, None, 4.5, 5.5, 6.5, 7.5],
        name=["oak", "Oak", "pine", None, "o_k", "50%", "élan", "fir"],
        flag=[True, False, True, True, False, True, False, True],
    )
    # GeoPandas writes NaN as null; a file written by another tool can hold a real NaN: put one at P1.
    table = pq.read_table(workspace / "p.parquet")
    v = pa.array([0.5, math.nan, 2.5, None, 4.5, 5.5, 6.5, 7.5], type=pa.float64(), from_pandas=False)
    table = table.set_column(table.schema.get_field_index("v"), "v", v)
    pq.write_table(table, workspace / "p.parquet")
    assert pq.read_table(workspace / "p.parquet").column("v").null_count == 1  # P3 only: P1 is NaN


def _same(workspace: Path, got: str, ref: str) -> None:
    """The same rows, fields, types and geometries, and the same record, as the GeoPandas engine's."""
    import geopandas as gpd
    import pandas as pd
    import pyarrow.parquet as pq

    physical = [(c.name, c.physical_type) for c in pq.read_metadata(workspace / got).schema]
    assert physical == [(c.name, c.physical_type) for c in pq.read_metadata(workspace / ref).schema]
    mine, theirs = gpd.read_parquet(workspace / got), gpd.read_parquet(workspace / ref)
    assert mine.crs == theirs.crs
    pd.testing.assert_frame_equal(
        pd.DataFrame(mine.drop(columns="geometry")), pd.DataFrame(theirs.drop(columns="geometry"))
    )
    assert [None if p is None else p.wkb for p in mine.geometry] == [
        None if p is None else p.wkb for p in theirs.geometry
    ]
    a, b = manifest(workspace / got), manifest(workspace / ref)
    timing = "x-mapsmith:engine_seconds"
    assert {k: v for k, v in a["parameters"].items() if k != timing} == {
        k: v for k, v in b["parameters"].items() if k != timing
    }
    assert a["verification"] == b["verification"]
    assert a.get("warnings") == b.get("warnings")
    assert shared_notes(a) == shared_notes(b)  # and the DuckDB engine says its memory limit
    assert [n.startswith(DUCKDB_LIMIT_NOTE) for n in a["notes"]].count(True) == 1


def _run_both(duck: Any, monkeypatch: pytest.MonkeyPatch, workspace: Path, **criteria: Any) -> tuple[Any, list[str]]:
    arguments = {"input_path": "p.parquet", "overwrite": True, **criteria}
    result = duck.run("select_features", {**arguments, "output_path": "d.parquet"})
    assert result.engine["name"] == "duckdb"
    ref = _reference(duck, monkeypatch, {**arguments, "output_path": "ref.parquet"})
    assert ref.engine["name"] == "geopandas"
    assert result.answer == ref.answer
    _same(workspace, "d.parquet", "ref.parquet")
    return result, read(workspace / "d.parquet")["pid"].tolist()


def test_a_where_condition_with_nulls_and_like(duck, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _case(workspace)
    result, pids = _run_both(duck, monkeypatch, workspace, where="v > 2 AND name LIKE 'o%'")
    assert pids == ["P4"]
    (criterion,) = result.answer["criteria"]
    assert (criterion["matched"], criterion["not_matched"], criterion["unknown_because_null"]) == (1, 6, 1)
    assert result.answer["selected_count"] == 1 and result.answer["total_count"] == 8
    notes = manifest(workspace / "d.parquet")["notes"]
    assert any(n.startswith("1 feature was not selected because where is unknown for it") for n in notes)


def test_between_is_unknown_where_a_value_or_bound_is_missing_nan_too(duck, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _case(workspace)
    result, pids = _run_both(duck, monkeypatch, workspace, where="n NOT BETWEEN v AND 2")
    assert pids == ["P0", "P2", "P4", "P5", "P6", "P7"]
    (criterion,) = result.answer["criteria"]
    assert (criterion["matched"], criterion["not_matched"], criterion["unknown_because_null"]) == (6, 0, 2)


def test_in_is_null_and_like_with_escape(duck, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _case(workspace)
    _, pids = _run_both(duck, monkeypatch, workspace, where="name IN ('oak', 'fir') OR name IS NULL")
    assert pids == ["P0", "P3", "P7"]
    _, pids = _run_both(duck, monkeypatch, workspace, where="name LIKE '_lan' OR name LIKE '50!%' ESCAPE '!'")
    assert pids == ["P5", "P6"]


def test_a_boolean_field_and_a_range_together(duck, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _case(workspace)
    result, pids = _run_both(duck, monkeypatch, workspace, where="flag", field="v", min_value=2.5, max_value=6.5)
    assert pids == ["P2", "P5"]
    where, span = result.answer["criteria"]
    assert (where["mode"], where["matched"], where["not_matched"], where["unknown_because_null"]) == ("where", 5, 3, 0)
    assert (span["mode"], span["matched"], span["not_matched"], span["unknown_because_null"]) == ("range", 4, 2, 2)
    assert span["condition"] == "(v BETWEEN 2.5 AND 6.5)"


def test_nothing_selected_is_an_empty_layer_with_the_warning(duck, monkeypatch, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _case(workspace)
    result, pids = _run_both(duck, monkeypatch, workspace, where="n > 100")
    assert pids == []
    assert result.answer["selected_count"] == 0
    assert [w["code"] for w in result.warnings] == ["SELECTION_EMPTY"]
    empty = next(c for c in result.checks if c["name"] == "result_not_empty")
    assert empty["passed"] is False and empty["critical"] is False


def _passed_over(workspace: Path, name: str) -> str:
    (passed,) = manifest(workspace / name)["x-mapsmith:engine_choice"]["passed_over"]
    assert passed["engine"] == "duckdb"
    return str(passed["reason"])


def test_what_duckdb_could_evaluate_otherwise_stays_with_geopandas(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _case(workspace)
    write_layer(workspace / "zone.parquet", [box(X0, Y0, X0 + 25, Y0 + 25)], UTM, z=[1])
    # a spatial relation: P0, P1 and P2 (x 0..20) intersect the 25 m square, P3 (30, 15) does not
    relation = {"relation": "intersects", "relation_path": "zone.parquet"}
    spatial = duck.run("select_features", {"input_path": "p.parquet", **relation, "output_path": "s.parquet"})
    assert spatial.engine["name"] == "geopandas"
    assert read(workspace / "s.parquet")["pid"].tolist() == ["P0", "P1", "P2"]
    assert "spatial relation is tested by the GeoPandas engine" in _passed_over(workspace, "s.parquet")
    # a LIKE pattern ending in its escape: DuckDB refuses it, the evaluator reads the '!' as itself
    lone_escape = "name LIKE 'oak!' ESCAPE '!'"
    lone = duck.run("select_features", {"input_path": "p.parquet", "where": lone_escape, "output_path": "l.parquet"})
    assert lone.engine["name"] == "geopandas"
    assert lone.answer["selected_count"] == 0
    assert "ends in its escape character" in _passed_over(workspace, "l.parquet")
    # an unknown field: the GeoPandas engine refuses it with the close names
    from mapsmith.errors import MapSmithError

    with pytest.raises(MapSmithError) as refused:
        duck.run("select_features", {"input_path": "p.parquet", "where": "nmae = 'oak'", "output_path": "u.parquet"})
    assert refused.value.code == "FIELD_NOT_FOUND"
    assert refused.value.evidence["did_you_mean"] == ["name"]


def test_a_boolean_field_empty_in_every_row_stays_with_geopandas(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_layer(workspace / "e.parquet", [Point(X0, Y0), Point(X0 + 1, Y0)], UTM, note=[True, None], k=[1, 2])
    table = pq.read_table(workspace / "e.parquet")  # a boolean column with no value, as another tool writes it
    table = table.set_column(table.schema.get_field_index("note"), "note", pa.array([None, None], type=pa.bool_()))
    pq.write_table(table, workspace / "e.parquet")
    result = duck.run(
        "select_features", {"input_path": "e.parquet", "where": "note = 5 OR k = 2", "output_path": "e_out.parquet"}
    )
    assert result.engine["name"] == "geopandas"  # GeoPandas binds an all-missing field to any kind
    assert result.answer["selected_count"] == 1
    assert "empty in every row" in _passed_over(workspace, "e_out.parquet")


def test_below_the_threshold_geopandas_runs(make_app: Callable[..., Any], workspace: Path) -> None:
    from mapsmith_opensource import select_duckdb

    _case(workspace)
    assert select_duckdb.SELECT_MIN_ROWS > 8
    arguments = {"input_path": "p.parquet", "where": "n > 5", "output_path": "t.parquet"}
    result = make_app().run("select_features", arguments)
    assert result.engine["name"] == "geopandas"
    assert read(workspace / "t.parquet")["pid"].tolist() == ["P6", "P7"]


@pytest.mark.mcp
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_selection_runs_on_duckdb_over_mcp(workspace: Path, anyio_backend: str) -> None:
    """A real MCP stdio conversation (the Python SDK's client), the threshold at 0: the first case's answer."""
    from mcp_client import call, mcp_session

    _case(workspace)
    arguments = {"input_path": "p.parquet", "where": "v > 2 AND name LIKE 'o%'", "output_path": "m.parquet"}
    async with mcp_session(workspace, MAPSMITH_DUCKDB_LAYER_MIN_FEATURES="0") as (session, _):
        selected = await call(session, "run_operation", {"operation": "select_features", "arguments": arguments})
    assert not selected.is_error, selected.data
    assert selected.data["engine"]["name"] == "duckdb"
    assert selected.data["answer"]["selected_count"] == 1
    (criterion,) = selected.data["answer"]["criteria"]
    assert (criterion["matched"], criterion["not_matched"], criterion["unknown_because_null"]) == (1, 6, 1)
    assert read(workspace / "m.parquet")["pid"].tolist() == ["P4"]
    assert manifest(workspace / "m.parquet")["x-mapsmith:engine_choice"]["engine"] == "duckdb"


def test_invalid_and_missing_input_geometries_are_counted_as_geopandas_counts_them(
    duck, monkeypatch, workspace: Path
) -> None:  # type: ignore[no-untyped-def]
    """Q0 (0, 0) valid, Q1 (10, NaN) invalid, Q2 no geometry, Q3 an empty point: the check reads 1 of 4 invalid
    (feature 1), 2 empty or missing; k > 0 selects Q1..Q3, written as read."""
    write_layer(
        workspace / "p.parquet",
        [Point(X0, Y0), Point(X0 + 10, math.nan), None, Point()],
        UTM,
        pid=["Q0", "Q1", "Q2", "Q3"],
        k=[0, 1, 2, 3],
    )
    _, pids = _run_both(duck, monkeypatch, workspace, where="k > 0")
    assert pids == ["Q1", "Q2", "Q3"]
    (validity,) = [c for c in manifest(workspace / "d.parquet")["verification"] if c["name"].endswith("geometry_valid")]
    assert validity["passed"] is False
    assert "input_path: 1 of 4 geometries invalid (first feature indices [1]" in validity["detail"]
    assert "2 empty or missing" in validity["detail"]


def test_a_float32_field_stays_with_geopandas_which_compares_it_in_single_precision(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    """f holds float32's 0.1 (0.100000001490116...): numpy compares it with 0.1 in single precision, so
    f = 0.1 holds; DuckDB would widen f to a double and find it above 0.1."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_layer(workspace / "f.parquet", [Point(X0, Y0), Point(X0 + 1, Y0)], UTM, f=[0.1, 0.5])
    table = pq.read_table(workspace / "f.parquet")
    f32 = pa.array(np.array([0.1, 0.5], dtype=np.float32))
    pq.write_table(table.set_column(table.schema.get_field_index("f"), "f", f32), workspace / "f.parquet")
    result = duck.run(
        "select_features", {"input_path": "f.parquet", "where": "f = 0.1", "output_path": "f_out.parquet"}
    )
    assert result.engine["name"] == "geopandas"
    assert result.answer["selected_count"] == 1
    assert "float" in _passed_over(workspace, "f_out.parquet")
