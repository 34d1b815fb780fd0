"""The inputs' digests are hashed on a thread of their own while the engine works (run_records.DigestsAhead):
the manifest records the same digests as before, each input is hashed once, and a digest that fails still fails
the run's record."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import manifest, write_layer
from mapsmith.errors import InputError


def _inputs(workspace: Path) -> tuple[Path, Path]:
    points = write_layer(workspace / "pts.parquet", [Point(1, 1), Point(5, 5), Point(9, 1)], "EPSG:32610", v=[1, 2, 3])
    zones = write_layer(workspace / "zones.parquet", [box(0, 0, 4, 4), box(4, 0, 10, 10)], "EPSG:32610", z=[10, 20])
    return points, zones


def _hashing_threads(app: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record (file name, thread name) of every digest the app takes."""
    seen: list[tuple[str, str]] = []
    real = app.digest

    def digest(path: Path) -> str:
        seen.append((Path(path).name, threading.current_thread().name))
        return real(path)

    monkeypatch.setattr(app, "digest", digest)
    return seen


def test_each_input_is_hashed_once_beside_the_engine_and_recorded_by_its_bytes(
    app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points, zones = _inputs(workspace)
    seen = _hashing_threads(app, monkeypatch)
    result = app.run(
        "count_in_polygons", {"input_path": "zones.parquet", "points_path": "pts.parquet", "output_path": "n.parquet"}
    )
    assert result.status == "ok"
    assert sorted(seen) == [("pts.parquet", "mapsmith-input-digests"), ("zones.parquet", "mapsmith-input-digests")]
    recorded = {i["argument"]: i["sha256"] for i in manifest(workspace / "n.parquet")["inputs"]}
    assert recorded == {
        "input_path": hashlib.sha256(zones.read_bytes()).hexdigest(),
        "points_path": hashlib.sha256(points.read_bytes()).hexdigest(),
    }


def test_a_path_the_sql_names_is_hashed_ahead_too(app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    points, _ = _inputs(workspace)
    seen = _hashing_threads(app, monkeypatch)
    result = app.run(
        "run_sql",
        {"sql": "SELECT v FROM read_parquet('pts.parquet') WHERE v > 1", "output_path": "v.csv"},
    )
    assert result.status in ("ok", "ok_with_warnings")
    # run_sql's validation adds the paths its SQL names before the engine starts, so the thread hashes them
    assert seen == [("pts.parquet", "mapsmith-input-digests")]
    (recorded,) = manifest(workspace / "v.csv")["inputs"]
    assert recorded["sha256"] == hashlib.sha256(points.read_bytes()).hexdigest()


def test_a_path_not_hashed_ahead_is_left_to_the_record(tmp_path: Path) -> None:
    from mapsmith.run_records import DigestsAhead

    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(b"abc")
    second.write_bytes(b"def")
    ahead = DigestsAhead(lambda path: hashlib.sha256(path.read_bytes()).hexdigest(), {"input_path": first})
    # sha256("abc"), from FIPS 180-2's example
    assert ahead.digest("input_path", first) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert ahead.digest("input_path", second) is None  # another path under the same name
    assert ahead.digest("join_path", second) is None  # a name it was not given


def test_a_digest_that_fails_ahead_fails_the_run_as_before(
    app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _inputs(workspace)

    def unreadable(path: Path) -> str:
        raise InputError("cannot read it", code="INPUT_UNREADABLE", hint="check the file")

    monkeypatch.setattr(app, "digest", unreadable)
    with pytest.raises(InputError) as refused:
        app.run(
            "count_in_polygons",
            {"input_path": "zones.parquet", "points_path": "pts.parquet", "output_path": "n.parquet"},
        )
    assert refused.value.code == "INPUT_UNREADABLE"
    assert not (workspace / "n.parquet").exists()
