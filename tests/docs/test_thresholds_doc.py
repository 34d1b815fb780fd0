"""The router's DuckDB thresholds in the code are the ones the committed measurement supports.

``benchmarks/bench_thresholds.py`` measures each operation with a DuckDB engine against its GeoPandas engine
through MapSmith at growing sizes and writes ``benchmarks/results/thresholds.json``; ``docs/benchmarks.md``
renders it (checked with the whole page in ``test_generated_docs.py``). Here: the rule that reads a
threshold off a size series, on series worked out by hand, and every constant in the code against the rule
applied to the committed measurement. Nothing is timed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "thresholds.json"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"mapsmith_benchmarks_{name}", REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_thresholds = _module("render_thresholds")
render_page = _module("render")


def _row(points: int, geopandas: float, duckdb: float) -> dict[str, Any]:
    return {"points": points, "geopandas": {"seconds_median": geopandas}, "duckdb": {"seconds_median": duckdb}}


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        # DuckDB faster everywhere: from the smallest size measured.
        ([_row(10, 0.2, 0.1), _row(100, 0.2, 0.1), _row(1000, 0.3, 0.2)], 10),
        # slower at 10, faster from 100 on: 100 (rows given out of order on purpose).
        ([_row(1000, 0.3, 0.2), _row(10, 0.1, 0.2), _row(100, 0.2, 0.2)], 100),
        # faster at 10, slower at 100, faster at 1000: only the size from which it stays faster counts.
        ([_row(10, 0.2, 0.1), _row(100, 0.2, 0.3), _row(1000, 0.3, 0.2)], 1000),
        # slower at the largest: no size supports preferring DuckDB.
        ([_row(10, 0.2, 0.1), _row(100, 0.2, 0.25)], None),
    ],
)
def test_the_supported_threshold_is_where_duckdb_stays_faster(
    series: list[dict[str, Any]], expected: int | None
) -> None:
    assert render_thresholds.supported_threshold(series) == expected


def _committed() -> dict[str, Any]:
    return json.loads(RESULTS.read_text(encoding="utf-8"))


def test_the_committed_measurement_has_what_the_page_reads() -> None:
    assert render_page.missing_fields(_committed(), render_thresholds.THRESHOLD_FIELDS) == []


OPERATIONS = ["spatial_join", "reproject_layer", "clip_layer", "select_features", "buffer_layer"]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_threshold_in_the_code_is_the_one_its_measurement_supports(operation: str) -> None:
    entry = _committed()["operations"][operation]
    supported = render_thresholds.supported_threshold(entry["series"])
    assert entry["supported_threshold"] == supported  # the stored value is the rule's, not edited by hand
    module_name, constant = entry["threshold_constant"].rsplit(".", 1)
    in_code = getattr(importlib.import_module(module_name), constant)
    assert supported is not None, f"{operation}: GeoPandas was faster at the largest size measured"
    assert in_code == supported, f"{entry['threshold_constant']} is {in_code:,}; the measurement supports {supported:,}"
    # each series ran both engines and the three raw ones at every size, each run on the engine it named, every run
    # writing the same number of rows, and timed as a whole process too
    for row in entry["series"]:
        assert row["geopandas"]["engines_ran"] == ["geopandas"]
        assert row["duckdb"]["engines_ran"] == ["duckdb"]
        for raw in ("geopandas", "duckdb", "sedonadb"):
            assert row[f"raw_{raw}"]["engines_ran"] == [raw]
        variants = ["geopandas", "duckdb", "raw_geopandas", "raw_duckdb", "raw_sedonadb"]
        assert render_thresholds.rows_agree(row, variants), (operation, row["points"])
        assert all(row[v]["process_seconds_median"] > row[v]["seconds_median"] for v in variants)


def _timed(work: float, whole: float, rows: list[int]) -> dict[str, Any]:
    return {"seconds_median": work, "process_seconds_median": whole, "rows_out": rows}


def test_the_raw_comparison_picks_the_routed_engine_and_the_fastest_raw_one_each_way() -> None:
    row = {
        "points": 1000,
        "raw_geopandas": _timed(0.10, 0.80, [47]),
        "raw_duckdb": _timed(0.01, 0.50, [47]),
        "raw_sedonadb": _timed(0.02, 0.45, [47]),
    }
    raw = ["raw_geopandas", "raw_duckdb", "raw_sedonadb"]
    # fastest by work is DuckDB; by the whole process SedonaDB (its start-up is lighter here, on purpose)
    assert render_thresholds.fastest_raw(row, raw, "seconds_median") == "raw_duckdb"
    assert render_thresholds.fastest_raw(row, raw, "process_seconds_median") == "raw_sedonadb"
    # DuckDB from the threshold on, GeoPandas below it and when no size supports DuckDB
    assert render_thresholds.routed_engine(1000, 1000) == "duckdb"
    assert render_thresholds.routed_engine(999, 1000) == "geopandas"
    assert render_thresholds.routed_engine(10**6, None) == "geopandas"
    assert render_thresholds.rows_agree(row, raw)
    row["raw_sedonadb"]["rows_out"] = [47, 46]  # one run wrote a row fewer
    assert not render_thresholds.rows_agree(row, raw)
