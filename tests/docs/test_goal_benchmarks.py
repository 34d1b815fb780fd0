"""The goal benchmark's arithmetic, answer checks, memory cap and data, against values worked out by hand.

``benchmarks/bench_goals.py`` decides "goal met" from recorded figures (``goal_verdicts``), compares outputs
by a digest of their sorted keys (``output_answer``), caps memory (``memory_cap``) and generates its data in
chunks (``scale_data``). None of it is timed here: the committed results are checked for consistency with
their own runs, and the pages for equality with their renderers.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

import bench_goals  # noqa: E402
import goal_ops  # noqa: E402
import goal_verdicts  # noqa: E402
import memory_cap  # noqa: E402
import render_goals  # noqa: E402
import scale_data  # noqa: E402


def _run(seconds: float, process: float, peak: float) -> dict[str, Any]:
    return {"outcome": "finished", "seconds": seconds, "process_seconds": process, "peak_rss_mib": peak}


# -- verdicts ------------------------------------------------------------------------------------


def test_summary_is_medians_of_finished_runs_and_the_largest_peak() -> None:
    runs = [_run(2.0, 3.0, 100.0), _run(4.0, 5.0, 300.0), {"outcome": "ran out of memory (exit -9): x"}]
    s = goal_verdicts.summarize(runs)
    # medians of (2, 4) and (3, 5); the peak of the two finished runs; the failure kept
    assert s == {
        "runs": 3,
        "finished": 2,
        "outcome": "ran out of memory (exit -9): x",
        "median_seconds": 3.0,
        "median_process_seconds": 4.0,
        "peak_rss_mib": 300.0,
    }


SUMMARIES = {
    "duckdb": {"median_seconds": 2.0, "median_process_seconds": 3.0, "peak_rss_mib": 200.0},
    "sedonadb": {"median_seconds": 1.6, "median_process_seconds": 3.5, "peak_rss_mib": 400.0},
    "mapsmith_api": {"median_seconds": 2.0, "median_process_seconds": 4.0, "peak_rss_mib": 500.0},
}


def test_verdict_against_the_fastest_engine_at_each_level() -> None:
    agreeing = set(SUMMARIES)
    work = goal_verdicts.verdict(SUMMARIES, agreeing, "mapsmith_api", "work")
    # fastest work: SedonaDB 1.6 s; 2.0 / 1.6 = 1.25 (on the limit), 500 / 400 = 1.25 memory
    assert work == {"against": "sedonadb", "time_ratio": 1.25, "memory_ratio": 1.25, "met": True}
    process = goal_verdicts.verdict(SUMMARIES, agreeing, "mapsmith_api", "process")
    # fastest whole process: DuckDB 3.0 s; 4.0 / 3.0 = 1.333, 500 / 200 = 2.5
    assert process == {"against": "duckdb", "time_ratio": 1.333, "memory_ratio": 2.5, "met": False}


def test_an_engine_with_another_answer_is_not_the_yardstick() -> None:
    # SedonaDB is fastest but disagreed: DuckDB is the engine doing the same work; 2.0 / 2.0, 500 / 200
    v = goal_verdicts.verdict(SUMMARIES, {"duckdb", "mapsmith_api"}, "mapsmith_api", "work")
    assert v == {"against": "duckdb", "time_ratio": 1.0, "memory_ratio": 2.5, "met": False}


def test_mapsmith_not_finishing_or_disagreeing_never_meets_the_goal() -> None:
    summaries = {**SUMMARIES, "mapsmith_api": {"outcome": "failed"}}
    assert goal_verdicts.verdict(summaries, set(SUMMARIES), "mapsmith_api", "work") == {
        "against": "sedonadb",
        "met": False,
        "why": "MapSmith did not finish",
    }
    v = goal_verdicts.verdict(SUMMARIES, {"duckdb", "sedonadb"}, "mapsmith_api", "work")
    assert v["met"] is False and v["why"] == "MapSmith's answer differed from the engines'"
    none = goal_verdicts.verdict({"mapsmith_api": SUMMARIES["mapsmith_api"]}, {"mapsmith_api"}, "mapsmith_api", "work")
    assert none == {"against": None, "met": None, "why": "no raw engine finished with the same answer"}


def test_agreement_is_the_majority_answer_with_a_measure_tolerance() -> None:
    same = {"rows": 3, "keys_sha256_16": "aa", "measure": 100.0}
    answers = {
        "duckdb": same,
        "geopandas": {**same, "measure": 100.00005},  # 5e-7 relative: within 1e-6
        "sedonadb": {**same, "measure": 100.001},  # 1e-5 relative: outside
        "mapsmith_api": same,
        "spark": {"rows": 3, "keys_sha256_16": "bb", "measure": 100.0},  # other keys
    }
    agreeing, all_same = goal_verdicts.agreeing_variants(answers, 1e-6)
    assert agreeing == {"duckdb", "geopandas", "mapsmith_api"} and all_same is False
    # clean twin: the same answers without the two outliers all agree
    clean = {k: v for k, v in answers.items() if k in ("duckdb", "geopandas", "mapsmith_api")}
    assert goal_verdicts.agreeing_variants(clean, 1e-6) == ({"duckdb", "geopandas", "mapsmith_api"}, True)


def test_agreement_counts_parts_exactly_where_the_answers_count_them() -> None:
    """Dissolved parcels: the same rows, keys and area within the tolerance, but one engine merged 146 polygons into
    one: not the same answer. Without a part count (older results) the areas alone decide, as before."""
    same = {"rows": 46, "keys_sha256_16": "aa", "measure": 883280757.0, "parts": 146}
    answers = {"duckdb": same, "mapsmith_api": same, "sedonadb": {**same, "measure": 883280755.0, "parts": 1}}
    assert goal_verdicts.agreeing_variants(answers, 1e-6) == ({"duckdb", "mapsmith_api"}, False)
    without = {k: {key: v for key, v in a.items() if key != "parts"} for k, a in answers.items()}
    assert goal_verdicts.agreeing_variants(without, 1e-6) == ({"duckdb", "mapsmith_api", "sedonadb"}, True)


# -- reading outputs back --------------------------------------------------------------------------


def _frame(rows: list[tuple[int | None, int, float]]) -> Any:
    import geopandas as gpd
    import shapely

    return gpd.GeoDataFrame(
        {"point_id": [r[0] for r in rows], "zone_id": [r[1] for r in rows]},
        geometry=[shapely.box(0, 0, r[2], r[2]) for r in rows],
        crs="EPSG:32610",
    )


def _op(measure: str | None) -> goal_ops.GoalOp:
    return goal_ops.GoalOp("t", ("points",), {}, {}, lambda f: None, keys=("point_id", "zone_id"), measure=measure)


def test_output_answer_digests_sorted_keys_and_sums_the_measure(tmp_path: Path) -> None:
    _frame([(2, 5, 1.0), (1, 7, 2.0), (1, 3, 1.0)]).to_parquet(tmp_path / "a.parquet", index=False)
    expected = hashlib.sha256(np.array([[1, 3], [1, 7], [2, 5]], dtype=np.int64).tobytes()).hexdigest()[:16]
    answer = bench_goals.output_answer(tmp_path / "a.parquet", _op("sum(ST_Area(geometry))"))
    assert answer == {"rows": 3, "keys_sha256_16": expected, "measure": 6.0}  # areas 1 + 4 + 1


def test_a_folder_of_parts_answers_like_one_file(tmp_path: Path) -> None:
    one = tmp_path / "one.parquet"
    _frame([(2, 5, 1.0), (1, 7, 2.0), (1, 3, 1.0)]).to_parquet(one, index=False)
    parts = tmp_path / "parts"
    parts.mkdir()
    _frame([(1, 7, 2.0)]).to_parquet(parts / "part-0.parquet", index=False)
    _frame([(2, 5, 1.0), (1, 3, 1.0)]).to_parquet(parts / "part-1.parquet", index=False)
    (parts / "_SUCCESS").write_text("")
    op = _op("sum(ST_Area(geometry))")
    assert bench_goals.output_answer(parts, op) == bench_goals.output_answer(one, op)


def test_a_null_key_reads_as_minus_one(tmp_path: Path) -> None:
    _frame([(None, 5, 1.0), (4, 2, 1.0)]).to_parquet(tmp_path / "n.parquet", index=False)
    expected = hashlib.sha256(np.array([[-1, 5], [4, 2]], dtype=np.int64).tobytes()).hexdigest()[:16]
    assert bench_goals.output_answer(tmp_path / "n.parquet", _op(None))["keys_sha256_16"] == expected


# -- the memory cap --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [("8G", 8 * 2**30), ("8GiB", 8 * 2**30), ("512M", 512 * 2**20), ("1.5g", 3 * 2**29), ("4096", 4096)],
)
def test_parse_size(text: str, size: int) -> None:
    assert memory_cap.parse_size(text) == size


def test_prlimit_wraps_the_command_and_says_what_it_caps() -> None:
    cap = memory_cap.MemoryCap("8G", "prlimit")
    assert cap.command(["python", "x.py"]) == ["prlimit", f"--as={8 * 2**30}", "--", "python", "x.py"]
    assert "virtual address space" in cap.describe()["enforces"]
    with pytest.raises(ValueError, match="unknown memory cap method"):
        memory_cap.MemoryCap("8G", "ulimit")


def _cgroup_v1_writable() -> bool:
    return os.geteuid() == 0 and os.access(memory_cap.V1_ROOT, os.W_OK)


@pytest.mark.skipif(not _cgroup_v1_writable(), reason="needs root and cgroup v1's memory controller")
def test_cgroup_cap_kills_a_run_over_it_and_spares_one_under_it() -> None:
    import subprocess

    def touch(mib: int) -> tuple[int, bool]:
        cap = memory_cap.MemoryCap("96M", "cgroup-v1")
        cap.prepare()
        code = memory_cap._TOUCH.format(n=mib * 2**20)
        try:
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, preexec_fn=cap.enter, timeout=60)
            return done.returncode, cap.oom_killed()
        finally:
            cap.release()

    assert touch(256) == (-9, True)  # 256 MiB touched under 96 MiB: the OOM killer ends it
    assert touch(8) == (0, False)  # the clean twin: 8 MiB under the same cap finishes


# -- the data ----------------------------------------------------------------------------------------


def test_parts_hold_the_same_points_as_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.dataset as ds

    monkeypatch.setattr(scale_data, "CHUNK", 1000)
    parts = scale_data.make_points_parts(tmp_path / "points.parquet", 2500)
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    counts = [ds.dataset(str(p)).count_rows() for p in parts]
    assert counts == [1000, 1000, 500]
    scale_data.make_points(tmp_path / "one.parquet", 2500)
    folder = ds.dataset(str(tmp_path / "points.parquet")).to_table().sort_by("point_id")
    one = ds.dataset(str(tmp_path / "one.parquet")).to_table().sort_by("point_id")
    assert folder.column("point_id").to_pylist() == list(range(2500))
    assert folder.equals(one)
    assert not list((tmp_path / "points.parquet").glob(".*partial"))


def test_parcel_grid_and_bands(tmp_path: Path) -> None:
    import geopandas as gpd

    # 100 parcels: 10 per row over the 200 km wide extent, 20 km squares
    assert scale_data.parcel_grid(100) == (10, 20_000.0)
    scale_data.make_parcels(tmp_path / "p.parquet", 95)  # 95 -> ceil(sqrt(95)) = 10 per row, 10 rows (last short)
    parcels = gpd.read_parquet(tmp_path / "p.parquet")
    assert len(parcels) == 95
    assert parcels.area.round(6).unique().tolist() == [20_000.0**2]
    # 10 rows, 50 bands wanted: one row per band, so rows 0..9 are bands 0..9
    assert sorted(parcels["band"].unique().tolist()) == list(range(10))


# -- the harness's plan ------------------------------------------------------------------------------


def _args(**kw: Any) -> Any:
    import argparse

    base = {
        "engines": ["geopandas", "duckdb", "spark"],
        "spark_operations": ["spatial_join"],
        "mapsmith_stacks": ["opensource", "sedona"],
        "mapsmith_paths": ["api", "mcp"],
        "operations": ["spatial_join"],
        "runs": 1,
        "big_runs": 1,
    }
    return argparse.Namespace(**{**base, **kw})


def test_variants_follow_the_engines_and_spark_operations() -> None:
    names = [v[0] for v in bench_goals.variants(goal_ops.OPERATIONS["spatial_join"], _args())]
    # the variants that start a JVM run last, so that none loads the machine through MapSmith's own run
    assert names == [
        "geopandas",
        "duckdb",
        "mapsmith_api",
        "mapsmith_mcp",
        "spark",
        "mapsmith_api_sedona",
        "mapsmith_mcp_sedona",
    ]
    # each engine named for the opensource stack is a variant of its own, run with MAPSMITH_ENGINE
    named = bench_goals.variants(goal_ops.OPERATIONS["spatial_join"], _args(mapsmith_engines=["auto", "sedonadb"]))
    mine = [(v[0], v[3]) for v in named if v[0].startswith("mapsmith")]
    assert mine == [
        ("mapsmith_api", {}),
        ("mapsmith_mcp", {}),
        ("mapsmith_api@sedonadb", {"MAPSMITH_ENGINE": "sedonadb"}),
        ("mapsmith_mcp@sedonadb", {"MAPSMITH_ENGINE": "sedonadb"}),
        ("mapsmith_api_sedona", {}),
        ("mapsmith_mcp_sedona", {}),
    ]
    assert render_goals.label("mapsmith_api@sedonadb") == "MapSmith, Python API, SedonaDB named"
    # Spark alone is left out of an operation not in --spark-operations
    buffer = [v[0] for v in bench_goals.variants(goal_ops.OPERATIONS["buffer_layer"], _args())]
    assert "spark" not in buffer and "duckdb" in buffer


def test_eta_from_default_rates() -> None:
    args = _args(engines=["duckdb"], mapsmith_stacks=["opensource"], mapsmith_paths=["api"])
    # duckdb and MapSmith's API: each 4 s start-up + 12 s x 2 million; the generator 20 s x 2 million
    assert bench_goals.eta_seconds(2_000_000, args, None) == pytest.approx(2 * (4 + 24) + 40)


def test_presets_name_the_full_capped_and_cluster_runs() -> None:
    capped = bench_goals.parse(["--preset", "capped"])
    assert capped.memory_cap == "8G" and capped.points == "30000000"
    assert capped.operations == "spatial_join,count_in_polygons"
    # the goal's three engines through MapSmith: DuckDB and SedonaDB named, and the Spark cluster
    assert capped.engines == "duckdb,sedonadb,spark_cluster" and capped.mapsmith_engines == "duckdb,sedonadb"
    assert capped.mapsmith_stacks == "opensource,sedona"
    cluster = bench_goals.parse(["--preset", "cluster-100m"])
    assert cluster.points == "100000000" and cluster.partitioned and "spark_cluster" in cluster.engines
    assert cluster.mapsmith_stacks == "sedona"


def test_mapsmith_writes_a_folder_of_parts_beside_spark_when_the_points_are_parts() -> None:
    """With the points as parts (the 100M run) MapSmith is asked for a folder, as Spark alone writes one; with one
    file in, every variant writes one file. The page says which."""
    join = goal_ops.OPERATIONS["spatial_join"]
    parts, single = _args(partitioned=True), _args(partitioned=False)
    assert bench_goals.folder_output(parts, "mapsmith_api", join)
    assert not bench_goals.folder_output(parts, "duckdb", join)
    assert not bench_goals.folder_output(single, "mapsmith_api", join)
    record = json.loads((BENCHMARKS / "results" / "goals_cluster.json").read_text("utf-8"))
    record["parameters"].pop("mapsmith_output_folder", None)  # runs before the folder output did not record it
    page = "\n".join(render_goals.goals_section(record))
    assert "MapSmith wrote one file" in page and "asked for a folder" not in page
    record["parameters"]["mapsmith_output_folder"] = True
    page = "\n".join(render_goals.goals_section(record))
    assert "MapSmith was asked for a folder of parts too" in page and "MapSmith wrote one file" not in page
    record["parameters"]["partitioned_points"] = False
    assert "folder of GeoParquet parts" not in "\n".join(render_goals.goals_section(record))


@pytest.mark.parametrize("preset", ["capped", "cluster-100m", "all"])
def test_the_cluster_presets_refuse_to_run_without_a_cluster(monkeypatch: pytest.MonkeyPatch, preset: str) -> None:
    """Without a master MapSmith's sedona stack would run Spark in local mode under pages that describe the cluster;
    --preset all refuses before its hours of uncapped runs, not after them. With one named, or for --eta, no
    refusal comes (the ETA is printed and the run stops)."""
    monkeypatch.delenv("MAPSMITH_SPARK_MASTER", raising=False)
    with pytest.raises(SystemExit, match="measures a standalone Spark cluster"):
        bench_goals.main(["--preset", preset])
    assert bench_goals.main(["--preset", preset, "--eta"]) == 0
    full = bench_goals.parse(["--preset", "full"])
    bench_goals._cluster_named(full)  # the uncapped set measures Spark in local mode and names no cluster


# -- the committed results and the pages -------------------------------------------------------------


def _goal_results() -> dict[str, dict[str, Any]]:
    results = {p.stem: json.loads(p.read_text("utf-8")) for p in (BENCHMARKS / "results").glob("goals*.json")}
    if not results:
        pytest.skip("no goal results committed: python benchmarks/bench_goals.py --preset all")
    return results


def test_goal_results_have_every_field_the_pages_read() -> None:
    import render as render_page

    for name, r in _goal_results().items():
        assert render_page.missing_fields(r, render_goals.GOAL_FIELDS) == [], name


def test_goal_results_follow_from_their_runs() -> None:
    """Summaries, agreement and verdicts recomputed from the recorded runs equal what was recorded."""
    for r in _goal_results().values():
        tolerance = r["parameters"].get("measure_relative_tolerance", goal_ops.MEASURE_RELATIVE_TOLERANCE)
        for size in r["sizes"]:
            for op in size["operations"].values():
                for s in op["variants"].values():
                    again = goal_verdicts.summarize(s["runs_detail"])
                    assert {k: s[k] for k in again} == again
                    for run in s["runs_detail"]:
                        assert len(run["load_average"]) == 3
                agreeing, same = goal_verdicts.agreeing_variants(op["answers"], tolerance)
                assert sorted(agreeing) == op["agreeing"] and same == op["same_answer"]
                for variant, levels in op["verdicts"].items():
                    for level, v in levels.items():
                        assert goal_verdicts.verdict(op["variants"], agreeing, variant, level) == v


def test_engines_a_run_leaves_out_are_named_not_run() -> None:
    """A page compares with the fastest raw engine it asked: the ones --engines or a preset left out are named."""
    wanted = ["geopandas", "duckdb", "sedonadb"]
    assert bench_goals.not_run(wanted, None) == {"spark": bench_goals.LEFT_OUT, "spark_cluster": bench_goals.LEFT_OUT}
    capped = bench_goals.parse(["--preset", "capped"]).engines.split(",")
    assert capped == ["duckdb", "sedonadb", "spark_cluster"]
    assert {
        e for e, why in bench_goals.not_run(capped, "spark://127.0.0.1:7077").items() if why == bench_goals.LEFT_OUT
    } == {
        "geopandas",
        "spark",
    }


def test_committed_results_name_every_engine_their_command_left_out() -> None:
    for name, r in _goal_results().items():
        args = bench_goals.parse(shlex.split(r["command"])[2:])
        asked = set(args.engines.split(","))
        assert {e for e in bench_goals.ALL_ENGINES if e not in asked} <= set(r["not_run"]), name


def test_goal_verdict_cell_on_the_page() -> None:
    goal = {"time_ratio_max": 1.25, "memory_ratio_max": 1.5}
    met = {"against": "sedonadb", "time_ratio": 1.25, "memory_ratio": 1.25, "met": True}
    assert render_goals._goal_cell(met, goal) == "1.25x time, 1.25x memory: met"
    missed = {**met, "time_ratio": 2.5, "met": False}
    assert render_goals._goal_cell(missed, goal) == "2.50x time, 1.25x memory: **not met**"


def test_goals_section_shows_every_verdict() -> None:
    for name, r in _goal_results().items():
        page = "\n".join(render_goals.goals_section(copy.deepcopy(r)))
        for size in r["sizes"]:
            for op in size["operations"].values():
                for levels in op["verdicts"].values():
                    for v in levels.values():
                        if "time_ratio" in v:
                            assert f"{v['time_ratio']:.2f}x time, {v['memory_ratio']:.2f}x memory" in page, name
        assert f"`{r['command']}`" in page
        assert str(r["code"]["commit"]) in page


def test_a_missing_manifest_is_named_on_the_page() -> None:
    size = {
        "operations": {
            "spatial_join": {"manifests_written": {"mapsmith_api": True, "mapsmith_mcp": False}},
            "clip_layer": {"manifests_written": {"mapsmith_api": True}},
        }
    }
    assert render_goals._manifest_lines(size) == [
        "MapSmith outputs without a provenance manifest beside them: `spatial_join` (MapSmith, MCP stdio).",
        "",
    ]
    size["operations"]["spatial_join"]["manifests_written"]["mapsmith_mcp"] = True  # the clean twin
    assert render_goals._manifest_lines(size) == [
        "Every MapSmith output read back (3) had its provenance manifest beside it.",
        "",
    ]


def test_merge_keeps_the_operations_not_measured_again_with_their_origin() -> None:
    """--merge: spatial_join from an earlier run stays beside the count measured now, marked with that run; an
    operation measured again replaces the earlier one; a size the earlier run did not have is left as measured."""
    earlier = {
        "measured_at": "2026-12-02T10:50:28+00:00",
        "code": {"commit": "01cd463", "uncommitted_changes": True},
        "command": "python benchmarks/bench_goals.py --preset cluster-100m",
        "sizes": [
            {
                "points": 100,
                "inputs": {"points": 100, "zones": 10, "mask": 1},
                "operations": {"spatial_join": {"old": 1}, "count_in_polygons": {"old": 2}},
            }
        ],
    }
    now = [
        {"points": 100, "inputs": {"points": 100, "zones": 10}, "operations": {"count_in_polygons": {"new": 3}}},
        {"points": 200, "operations": {"count_in_polygons": {"new": 4}}},
    ]
    merged = bench_goals.kept_operations(earlier, now)
    origin = {k: earlier[k] for k in ("measured_at", "code", "command")}
    assert merged[0]["operations"] == {
        "spatial_join": {"measured_in": origin, "old": 1},
        "count_in_polygons": {"new": 3},
    }
    assert list(merged[0]["operations"]) == ["spatial_join", "count_in_polygons"]  # kept ones first
    assert merged[0]["inputs"] == {"points": 100, "zones": 10, "mask": 1}  # the kept operations' inputs stay
    assert merged[1] == now[1]
    assert now[0]["operations"] == {"count_in_polygons": {"new": 3}}  # the run's own record is not changed
    # merged twice: the operation keeps the run that measured it, not the file it was last kept from
    again = bench_goals.kept_operations({**earlier, "measured_at": "later", "sizes": merged}, [now[1]])
    assert again == [now[1]]
    third = bench_goals.kept_operations(
        {**earlier, "measured_at": "later", "sizes": merged}, [{"points": 100, "operations": {}}]
    )
    assert third[0]["operations"]["spatial_join"]["measured_in"]["measured_at"] == "2026-12-02T10:50:28+00:00"
    assert "measured_in" not in bench_goals.kept_operations(None, now)[0]["operations"]["count_in_polygons"]
    line = render_goals._kept_lines(merged[0])
    assert line == [
        "`spatial_join` was measured in an earlier run, kept in this file by `--merge`: measured "
        "2026-12-02T10:50:28+00:00, commit 01cd463 with uncommitted changes to the measured code, by "
        "`python benchmarks/bench_goals.py --preset cluster-100m`; its ratios compare the engines of that run.",
        "",
    ]


def _variant(variant: str, key: str, values: tuple[Any, ...]) -> dict[str, Any]:
    """An operation's record with ``variant``'s runs, each with ``key`` set to its value (left out where None)."""
    runs = [{"seconds": 1.0} | ({key: v} if v is not None else {}) for v in values]
    return {"variants": {variant: {"runs_detail": runs}, "duckdb": {"runs_detail": [{"seconds": 0.5}]}}}


def _api_runs(*warmed: str | None) -> dict[str, Any]:
    return _variant("mapsmith_api", "warmed", warmed)


def test_the_page_says_whether_mapsmith_was_warmed_before_its_clock() -> None:
    def sentence(**operations: dict[str, Any]) -> str:
        return render_goals._mapsmith_setup({"sizes": [{"points": 1_000_000, "operations": operations}]})

    warm, cold = sentence(select_features=_api_runs("opensource")), sentence(select_features=_api_runs(None))
    assert warm.startswith("MapSmith's API is then warmed (`MapSmith.warm()`")
    assert cold.startswith("MapSmith loads the engine a run takes") and "on its clock" in cold
    # a run whose warm-up found no stack ready ("") was not warmed; nor is an operation with one cold run of three
    assert sentence(select_features=_api_runs("")) == cold
    mixed = sentence(select_features=_api_runs("opensource"), clip_layer=_api_runs("opensource", None, "opensource"))
    assert mixed.startswith(warm) and "before `warm` existed (`clip_layer` at 1,000,000)" in mixed
    assert "`select_features`" not in mixed
    assert sentence() == cold  # no MapSmith run at all (a capped run of the raw engines only) claims no warm-up
    assert "Spark" not in warm and "Spark" not in cold  # no run on Spark: nothing said of a Spark session
    # a variant with an engine named (MAPSMITH_ENGINE=duckdb) is MapSmith's API too
    assert sentence(spatial_join=_variant("mapsmith_api@duckdb", "warmed", ("opensource",))) == warm
    assert sentence(spatial_join=_variant("mapsmith_api@duckdb", "warmed", (None,))) == cold


def _spark_runs(*warmed: bool | None) -> dict[str, Any]:
    runs = _variant("mapsmith_api_sedona", "spark_session_warmed", warmed)
    for run in runs["variants"]["mapsmith_api_sedona"]["runs_detail"]:
        run["warmed"] = "opensource, sedona"
    return runs


def test_the_page_says_whether_mapsmith_on_spark_started_its_session_before_its_clock() -> None:
    def sentence(**operations: dict[str, Any]) -> str:
        return render_goals._mapsmith_setup({"sizes": [{"points": 30_000_000, "operations": operations}]})

    before = sentence(spatial_join=_spark_runs(True))
    assert before.startswith("MapSmith's API is then warmed")
    assert before.endswith(
        "On the sedona stack the warm-up also started MapSmith's Spark session (`MAPSMITH_SPARK_WARM=1`: what the MCP "
        "server's worker then does on starting), as a raw Spark run's session is started before its clock."
    )
    on_clock = sentence(spatial_join=_spark_runs(False))
    assert on_clock.endswith("where a raw Spark run's session is started before its clock.")
    assert "MapSmith on Spark started its Spark session on its clock" in on_clock
    assert "MAPSMITH_SPARK_WARM" not in on_clock
    # runs recorded before the record existed started it on the clock: named as such
    mixed = sentence(spatial_join=_spark_runs(True), count_in_polygons=_spark_runs(None))
    assert mixed.startswith(before) and mixed.endswith(
        "before `MAPSMITH_SPARK_WARM` existed (`count_in_polygons` at 30,000,000): there MapSmith's Spark session "
        "started on its clock."
    )
    assert render_goals._spark_setup({"sizes": [{"points": 1, "operations": {"x": _api_runs("opensource")}}]}) == ""


def _mcp_runs(*waits: float | None) -> dict[str, Any]:
    return _variant("mapsmith_mcp", "warm_wait_seconds", waits)


def test_the_page_says_when_the_mcp_clock_started() -> None:
    def sentence(**operations: dict[str, Any]) -> str:
        return render_goals._mcp_setup({"sizes": [{"points": 1_000_000, "operations": operations}]})

    waited = sentence(select_features=_mcp_runs(0.75, 1.5), clip_layer=_mcp_runs(0.5))
    assert waited.startswith("Over MCP the work's clock starts once the server's engine worker has said")
    assert "0.50-1.50 s of waiting" in waited
    right_after = sentence(select_features=_mcp_runs(None))
    assert right_after.startswith("Over MCP the work's clock starts when `initialize` is answered")
    # one run of three without the record: the operation is named as measured before
    mixed = sentence(select_features=_mcp_runs(0.75), clip_layer=_mcp_runs(0.5, None))
    assert mixed.startswith("Over MCP the work's clock starts once") and "0.75-0.75 s of waiting" in mixed
    assert mixed.endswith(
        "before the server said so (`clip_layer` at 1,000,000): there the clock started when `initialize` was "
        "answered, while the worker may still have been warming up."
    )
    assert sentence(select_features=_api_runs("opensource")) == ""  # no run over MCP: nothing said


def _leaving_behind(seconds: float) -> int:
    """A process group whose leader exits at once, leaving a ``sleep`` of ``seconds`` behind in it (as a Spark child
    leaves its JVM); the group's id."""
    import subprocess

    child = subprocess.Popen(["sh", "-c", f"sleep {seconds} & exit 0"], start_new_session=True)
    child.wait()
    return child.pid


def test_a_runs_leftovers_end_before_the_next_run_starts() -> None:
    group = _leaving_behind(1.5)
    assert bench_goals.group_members(group)  # the sleep outlived the process that started it
    waited = bench_goals.wait_for_group(group)
    assert 1.0 < waited < 10 and bench_goals.group_members(group) == []


def test_leftovers_past_the_timeout_are_killed() -> None:
    group = _leaving_behind(60)
    waited = bench_goals.wait_for_group(group, timeout=0.5)
    assert 0.5 < waited < 5 and bench_goals.group_members(group) == []


def test_a_merge_keeps_saying_which_engines_an_earlier_run_left_out() -> None:
    """30M: an earlier run left GeoPandas out of count_in_polygons; a merge that runs GeoPandas for overlay_layers alone
    must still name it as not run for count_in_polygons, with the earlier reason."""
    previous = {"not_run": {"geopandas": bench_goals.LEFT_OUT, "spark": "no jars"}}
    sizes = [
        {
            "points": 30_000_000,
            "operations": {
                "count_in_polygons": {"variants": {"duckdb": {}, "sedonadb": {}, "mapsmith_api": {}}},
                "overlay_layers": {"variants": {"geopandas": {}, "duckdb": {}, "sedonadb": {}, "mapsmith_api": {}}},
            },
        }
    ]
    found = bench_goals.merged_not_run({"spark_cluster": "no cluster"}, previous, sizes)
    assert found["geopandas"] == f"{bench_goals.LEFT_OUT} (for count_in_polygons at 30,000,000 points)"
    assert found["spark"] == "no jars (for count_in_polygons at 30,000,000 points, overlay_layers at 30,000,000 points)"
    assert found["spark_cluster"] == "no cluster"
    assert "duckdb" not in found and "sedonadb" not in found
    # without an earlier run's reason, none is made up
    unexplained = bench_goals.merged_not_run({}, None, sizes)
    assert unexplained["geopandas"] == "not run (for count_in_polygons at 30,000,000 points)"
    # its clean twin: every engine ran for every operation kept, so nothing is added
    assert bench_goals.merged_not_run({}, previous, [{"points": 1, "operations": {}}]) == {}
