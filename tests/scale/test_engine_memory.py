"""An engine's memory limit (mapsmith_opensource.engine_memory), and SedonaDB and DuckDB's engines running under it.

The cgroup files are written by hand in a temporary folder laid out as /sys/fs/cgroup is: the limit a process
has is the smallest over its group and the group's ancestors (v1 ``memory.limit_in_bytes``, v2
``memory.max``, where ``max`` means none).

The SedonaDB case (worked by hand): 40,000 points on a 200 x 200 grid of 1 m cells (x, y = 0.5 .. 199.5)
and two overlapping squares, A = 0..100 x 0..200 (holds the 100 x 200 = 20,000 points with x < 100) and
B = 50..150 x 0..200 (the 20,000 with 50 < x < 150). Counts [20000, 20000]; 30,000 distinct points counted
(x < 150), 10,000 of them (50 < x < 100) in both, inside both interiors; 10,000 in none. The per-point
grouping (GROUPING SETS) holds 40,000 groups. Under a limit it must answer as without one (the clean twin), and
under one too small to work within it must refuse with ENGINE_OUT_OF_MEMORY, never answer otherwise.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import shapely
from shapely.geometry import box

from layers import manifest, read, write_layer
from mapsmith.errors import ConfigurationError, MapSmithError
from mapsmith_opensource import engine_memory

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
GIB = 2**30


def _tree(tmp: Path, lines: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc = tmp / "cgroup"
    proc.write_text(lines)
    root = tmp / "fs"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return proc, root


def test_v1_limit_is_the_smallest_over_the_group_and_its_ancestors(tmp_path: Path) -> None:
    proc, root = _tree(
        tmp_path,
        "4:memory:/jobs/run7\n3:cpuset:/\n0::/\n",
        {
            "memory/memory.limit_in_bytes": "9223372036854771712",  # v1's "no limit"
            "memory/jobs/memory.limit_in_bytes": str(12 * GIB),
            "memory/jobs/run7/memory.limit_in_bytes": str(8 * GIB),
        },
    )
    assert engine_memory.cgroup_limit(proc, root) == 8 * GIB


def test_v2_max_means_none_and_a_parent_limit_still_holds(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/svc/worker\n", {"svc/worker/memory.max": "max", "svc/memory.max": str(2 * GIB)})
    assert engine_memory.cgroup_limit(proc, root) == 2 * GIB


def test_no_memory_controller_and_no_file_is_no_limit(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "3:cpuset:/\n", {})
    assert engine_memory.cgroup_limit(proc, root) is None
    assert engine_memory.cgroup_limit(tmp_path / "missing", root) is None


def test_machine_memory_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683584 kB\nMemFree:        1000 kB\n")
    assert engine_memory.machine_memory(meminfo) == 24683584 * 1024


def test_the_setting_the_share_and_unlimited(monkeypatch: pytest.MonkeyPatch) -> None:
    var = "MAPSMITH_SEDONADB_MEMORY"
    assert engine_memory.engine_limit({var: "512MiB"}, var, 0.5, "SedonaDB").bytes == 512 * 2**20
    assert engine_memory.engine_limit({var: "1.5GB"}, var, 0.5, "SedonaDB").bytes == int(1.5 * GIB)
    assert engine_memory.engine_limit({var: "unlimited"}, var, 0.5, "SedonaDB").bytes is None
    monkeypatch.setattr(engine_memory, "process_memory", lambda: (8 * GIB, "its memory cgroup's 8.0 GiB limit"))
    default = engine_memory.engine_limit({}, var, 0.5, "SedonaDB")
    assert default.bytes == 4 * GIB
    assert default.how.startswith("4.0 GiB, 50% of its memory cgroup's 8.0 GiB limit")


@pytest.mark.parametrize("raw", ["lots", "0GB", "-1GB", "4"])
def test_a_setting_that_is_not_a_size_is_refused(raw: str) -> None:
    var = "MAPSMITH_SEDONADB_MEMORY"
    with pytest.raises(ConfigurationError) as caught:
        engine_memory.engine_limit({var: raw}, var, 0.5, "SedonaDB")
    assert caught.value.code == "ENGINE_MEMORY_INVALID"
    assert caught.value.evidence == {"variable": var, "value": raw}


# -- SedonaDB under a limit -----------------------------------------------------------------------

sedonadb_only = pytest.mark.skipif(importlib.util.find_spec("sedonadb") is None, reason="SedonaDB not installed")


@pytest.fixture
def fresh_contexts() -> Iterator[None]:
    """SedonaDB's contexts and their limit live as long as the process: each test here starts without them."""
    from mapsmith_opensource import sedonadb_ops
    from mapsmith_opensource.join_ops import spatial_join_sedonadb

    def clear() -> None:
        sedonadb_ops._LIMIT.clear()
        sedonadb_ops._connection.cache_clear()
        spatial_join_sedonadb._context.cache_clear()

    clear()
    yield
    clear()


def _write_grid(workspace: Path) -> None:
    xs, ys = np.meshgrid(np.arange(200) + 0.5, np.arange(200) + 0.5)
    write_layer(workspace / "points.parquet", list(shapely.points(X0 + xs.ravel(), Y0 + ys.ravel())), UTM)
    write_layer(
        workspace / "zones.parquet",
        [box(X0, Y0, X0 + 100, Y0 + 200), box(X0 + 50, Y0, X0 + 150, Y0 + 200)],
        UTM,
        zid=["A", "B"],
    )


def _count(make_app: Callable[..., Any], workspace: Path, out: str, **env: str) -> Any:
    app = make_app(MAPSMITH_ENGINE="sedonadb", **env)
    return app.run(
        "count_in_polygons", {"input_path": "zones.parquet", "points_path": "points.parquet", "output_path": out}
    )


@sedonadb_only
@pytest.mark.usefixtures("fresh_contexts")
def test_sedonadb_under_a_limit_it_spills_within_gives_the_hand_counts(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    _write_grid(workspace)
    result = _count(make_app, workspace, "spilled.parquet", MAPSMITH_SEDONADB_MEMORY="256MiB")
    assert result.engine["name"] == "sedonadb"
    assert read(workspace / "spilled.parquet")["point_count"].tolist() == [20000, 20000]
    assert (result.answer["distinct_point_count"], result.answer["total_point_count"]) == (30000, 40000)
    notes = [n for n in manifest(workspace / "spilled.parquet")["notes"] if n.startswith("SedonaDB's memory")]
    assert notes == [
        "SedonaDB's memory limit: 256 MiB (MAPSMITH_SEDONADB_MEMORY=256MiB); beyond it SedonaDB spills to disk"
    ]


@sedonadb_only
@pytest.mark.usefixtures("fresh_contexts")
def test_a_limit_too_small_to_spill_within_is_refused_as_out_of_memory(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    """Measured: from 1 MiB to 32 MiB SedonaDB 0.5 cannot hold the polygons' index or sort its spill here."""
    _write_grid(workspace)
    with pytest.raises(MapSmithError) as caught:
        _count(make_app, workspace, "tight.parquet", MAPSMITH_SEDONADB_MEMORY="1MiB")
    assert caught.value.code == "ENGINE_OUT_OF_MEMORY"
    assert caught.value.evidence["error"].startswith("Resources exhausted")
    assert "MAPSMITH_SEDONADB_MEMORY" in (caught.value.hint or "")
    assert not (workspace / "tight.parquet").exists()


@sedonadb_only
@pytest.mark.usefixtures("fresh_contexts")
def test_sedonadb_with_no_limit_gives_the_hand_counts(make_app: Callable[..., Any], workspace: Path) -> None:
    _write_grid(workspace)
    result = _count(make_app, workspace, "free.parquet", MAPSMITH_SEDONADB_MEMORY="unlimited")
    assert result.engine["name"] == "sedonadb"
    assert read(workspace / "free.parquet")["point_count"].tolist() == [20000, 20000]
    assert result.answer["distinct_point_count"] == 30000
    notes = [n for n in manifest(workspace / "free.parquet")["notes"] if n.startswith("SedonaDB's memory")]
    assert notes == ["SedonaDB's memory limit: none (MAPSMITH_SEDONADB_MEMORY=unlimited)"]


@sedonadb_only
@pytest.mark.usefixtures("fresh_contexts")
def test_a_bad_memory_setting_stops_the_run_with_its_code(make_app: Callable[..., Any], workspace: Path) -> None:
    _write_grid(workspace)
    with pytest.raises(MapSmithError) as caught:
        _count(make_app, workspace, "bad.parquet", MAPSMITH_SEDONADB_MEMORY="plenty")
    assert caught.value.code == "ENGINE_MEMORY_INVALID"
    assert not (workspace / "bad.parquet").exists()


def test_only_sedonadbs_resources_exhausted_is_out_of_memory() -> None:
    from mapsmith.errors import engine_error_code

    class SedonaError(Exception):  # the name SedonaDB's one exception type has; matched by name, as the table is
        pass

    assert engine_error_code(SedonaError("Resources exhausted: Failed to allocate 2782018 bytes")) == (
        "ENGINE_OUT_OF_MEMORY"
    )
    assert engine_error_code(SedonaError("Invalid or Unsupported Configuration: Invalid size")) == "ENGINE_FAILED"
    assert engine_error_code(ValueError("Resources exhausted: not SedonaDB's")) == "ENGINE_FAILED"


# -- DuckDB's engines under a limit ----------------------------------------------------------------
#
# The same grid and squares, joined (spatial_join, inner, on DuckDB): each point once per square it meets, in input
# row order and then join row order -- 20,000 rows for A and 20,000 for B, 40,000 in all; the 10,000 points with
# 50 < x < 100 come twice, A's row before B's.


@pytest.fixture
def duckdb_limit_restored() -> Iterator[None]:
    """The process's DuckDB engine databases take each run's limit; afterwards they get the process's own back."""
    import os

    from mapsmith_opensource import duckdb_spatial

    yield
    duckdb_spatial.apply_engine_limit(os.environ)


def _join(make_app: Callable[..., Any], out: str, **env: str) -> Any:
    app = make_app(MAPSMITH_ENGINE="duckdb", **env)
    return app.run(
        "spatial_join",
        {"input_path": "points.parquet", "join_path": "zones.parquet", "how": "inner", "output_path": out},
    )


def test_duckdbs_default_is_half_the_process_memory_at_most_one_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    from mapsmith_opensource import duckdb_spatial

    var = "MAPSMITH_DUCKDB_ENGINE_MEMORY"
    monkeypatch.setattr(engine_memory, "process_memory", lambda: (8 * GIB, "its memory cgroup's 8.0 GiB limit"))
    big = duckdb_spatial.engine_memory_limit({})
    assert big == engine_memory.Limit(
        GIB,
        f"1.0 GiB, less than 50% of its memory cgroup's 8.0 GiB limit ({var} overrides); beyond it DuckDB spills to "
        "disk",
    )
    monkeypatch.setattr(engine_memory, "process_memory", lambda: (GIB, "the machine's 1.0 GiB"))
    assert duckdb_spatial.engine_memory_limit({}).bytes == GIB // 2
    monkeypatch.setattr(engine_memory, "process_memory", lambda: (None, "nothing"))
    assert duckdb_spatial.engine_memory_limit({}).bytes == GIB
    assert duckdb_spatial.engine_memory_limit({var: "3GB"}).bytes == 3 * GIB
    assert duckdb_spatial.engine_memory_limit({var: "unlimited"}).bytes is None


@pytest.mark.usefixtures("duckdb_limit_restored")
def test_duckdb_under_a_limit_gives_the_hand_rows_and_says_its_limit(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    import tempfile

    from mapsmith_opensource.join_ops.spatial_join_duckdb import duckdb_database

    _write_grid(workspace)
    result = _join(make_app, "joined.parquet", MAPSMITH_DUCKDB_ENGINE_MEMORY="16MiB")
    assert result.engine["name"] == "duckdb"
    out = read(workspace / "joined.parquet")
    assert len(out) == 40000
    assert out["zid"].value_counts().to_dict() == {"A": 20000, "B": 20000}
    xs = out.geometry.x.to_numpy() - X0
    twice = (xs > 50) & (xs < 100)
    assert int(twice.sum()) == 20000  # 10,000 points, two rows each
    assert out["zid"].to_numpy()[twice][:4].tolist() == ["A", "B", "A", "B"]
    notes = [n for n in manifest(workspace / "joined.parquet")["notes"] if n.startswith("DuckDB's memory")]
    assert notes == [
        "DuckDB's memory limit: 16 MiB (MAPSMITH_DUCKDB_ENGINE_MEMORY=16MiB); beyond it DuckDB spills to disk"
    ]
    with duckdb_database().cursor() as con:
        limit, spill = con.execute(
            "SELECT current_setting('memory_limit'), current_setting('temp_directory')"
        ).fetchone()
    assert limit == "16.0 MiB"
    # its own folder in the system's temporary directory, not DuckDB's default ".tmp" in the working directory
    assert Path(spill).parent == Path(tempfile.gettempdir()) and Path(spill).name.startswith("mapsmith-duckdb-spill-")


@pytest.mark.usefixtures("duckdb_limit_restored")
@pytest.mark.parametrize(
    ("setting", "code"),
    [("1MiB", "ENGINE_OUT_OF_MEMORY"), ("plenty", "ENGINE_MEMORY_INVALID")],
    ids=["too-little-to-work-within", "not-a-size"],
)
def test_duckdb_refuses_too_little_memory_and_a_setting_that_is_not_a_size(
    make_app: Callable[..., Any], workspace: Path, setting: str, code: str
) -> None:
    _write_grid(workspace)
    with pytest.raises(MapSmithError) as caught:
        _join(make_app, "refused.parquet", MAPSMITH_DUCKDB_ENGINE_MEMORY=setting)
    assert caught.value.code == code
    assert "MAPSMITH_DUCKDB_ENGINE_MEMORY" in (caught.value.hint or "")  # the fix names the setting
    if code == "ENGINE_MEMORY_INVALID":
        assert caught.value.evidence == {"variable": "MAPSMITH_DUCKDB_ENGINE_MEMORY", "value": "plenty"}
    assert not (workspace / "refused.parquet").exists()
