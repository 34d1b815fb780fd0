"""Concurrent writers of one output: the manifest beside a dataset always describes its bytes.

Several real processes (and, separately, threads of one process) write the same output with
overwrite=true, each with its own buffer distance, over and over. After every write each writer takes
the output's lock and checks the pair it sees: the manifest's ``output.sha256`` must equal the digest
of the bytes beside it, and the manifest's ``distance_meters`` must be the distance whose bytes those
are (each distance gives different bytes, so a mismatch would show in either). Before the lock, 1 run
in 4 left a manifest describing other bytes. ``clean_stale_temps`` is checked on names built by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

PROCESSES = 3
ROUNDS_PER_PROCESS = 8
THREADS = 4
ROUNDS_PER_THREAD = 6

_WRITER = """
import json, sys, time
from pathlib import Path
import pyogrio
from mapsmith.app import MapSmith
from mapsmith.outputs import output_lock
from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.reading import load_manifest

workspace, distance, rounds, start_at = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace)})
time.sleep(max(0.0, start_at - time.time()))  # every writer starts its first run at the same moment
checks = []
for _ in range(rounds):
    app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": distance, "output_path": "out.gpkg",
                             "overwrite": True})
    with output_lock(workspace / "out.gpkg"):
        record = load_manifest(workspace / "out.gpkg.provenance.json")
        area = float(pyogrio.read_dataframe(workspace / "out.gpkg").geometry.area.sum())
        checks.append([record["output"]["sha256"], dataset_digest(workspace / "out.gpkg"),
                       record["parameters"]["distance_meters"], area])
print(json.dumps(checks))
"""


def _squares(path: Path) -> None:
    import geopandas as gpd
    from shapely.geometry import box

    gpd.GeoDataFrame({"id": [1, 2]}, geometry=[box(0, 0, 10, 10), box(100, 0, 130, 30)], crs="EPSG:32633").to_file(
        path, driver="GPKG", layer="a"
    )


def _area_by_distance(tmp_path: Path, distances: list[float]) -> dict[float, float]:
    """The total area each distance gives, written alone: what the bytes beside a manifest must hold.

    (Digests cannot be compared across runs: a GeoPackage stores its write time.) The squares are
    10 m and 30 m, 70 m apart, so their buffers never merge and each distance has its own area,
    100 + 900 + 4 * (10 + 30) * d + 2 * pi' * d2, where pi' = 3.1214 is the area of the 32-gon GEOS
    draws for a unit circle: 1 m -> 1166.24, 2 m -> 1344.97, 3 m -> 1536.19.
    """
    from mapsmith.app import MapSmith

    solo = tmp_path / "solo"
    solo.mkdir()
    _squares(solo / "a.gpkg")
    app = MapSmith({"MAPSMITH_WORKSPACE": str(solo)})
    out = {}
    for d in distances:
        app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": d, "output_path": f"b{d}.gpkg"})
        out[d] = _area(solo / f"b{d}.gpkg")
    return out


def _area(path: Path) -> float:
    import pyogrio

    return float(pyogrio.read_dataframe(path).geometry.area.sum())


def _mismatches(checks: list[list[Any]], expected: dict[float, float]) -> list[list[Any]]:
    """Pairs whose manifest claims other bytes, or whose bytes are another distance's."""
    return [c for c in checks if c[0] != c[1] or abs(expected[float(c[2])] - c[3]) > 1e-6]


def test_concurrent_processes_never_leave_a_manifest_describing_other_bytes(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _squares(workspace / "a.gpkg")
    distances = [1.0 + i for i in range(PROCESSES)]
    expected = _area_by_distance(tmp_path, distances)
    assert min(abs(a - b) for a in expected.values() for b in expected.values() if a != b) > 100
    assert expected[1.0] == pytest.approx(1000 + 160 + 3.14 * 2, abs=0.5)  # 100 + 900 + 4*(10+30)*1 + 2*pi
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    start_at = time.time() + 8  # time for every child to import the engines first
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(workspace), str(d), str(ROUNDS_PER_PROCESS), str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for d in distances
    ]
    checks: list[list[Any]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        checks += json.loads(out.strip().splitlines()[-1])
    assert len(checks) == PROCESSES * ROUNDS_PER_PROCESS  # 24 checked pairs
    assert _mismatches(checks, expected) == []
    # the final state too, and nothing left beside it: no temporary file, no lock file
    from mapsmith.provenance.digests import dataset_digest

    final = json.loads((workspace / "out.gpkg.provenance.json").read_text("utf-8"))
    assert final["output"]["sha256"] == dataset_digest(workspace / "out.gpkg")
    assert sorted(p.name for p in workspace.iterdir()) == ["a.gpkg", "out.gpkg", "out.gpkg.provenance.json"]


def test_concurrent_threads_never_leave_a_manifest_describing_other_bytes(tmp_path: Path) -> None:
    from mapsmith.app import MapSmith
    from mapsmith.outputs import output_lock
    from mapsmith.provenance.digests import dataset_digest
    from mapsmith.provenance.reading import load_manifest

    workspace = tmp_path / "ws"
    workspace.mkdir()
    _squares(workspace / "a.gpkg")
    distances = [1.0 + i for i in range(THREADS)]
    expected = _area_by_distance(tmp_path, distances)
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace)})
    checks: list[list[Any]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def writer(distance: float) -> None:
        try:
            barrier.wait()
            for _ in range(ROUNDS_PER_THREAD):
                app.run(
                    "buffer_layer",
                    {"input_path": "a.gpkg", "distance_meters": distance, "output_path": "out.gpkg", "overwrite": True},
                )
                with output_lock(workspace / "out.gpkg"):
                    record = load_manifest(workspace / "out.gpkg.provenance.json")
                    checks.append(
                        [
                            record["output"]["sha256"],
                            dataset_digest(workspace / "out.gpkg"),
                            record["parameters"]["distance_meters"],
                            _area(workspace / "out.gpkg"),
                        ]
                    )
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(d,)) for d in distances]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert errors == []
    assert len(checks) == THREADS * ROUNDS_PER_THREAD  # 24 checked pairs
    assert _mismatches(checks, expected) == []


def test_two_writers_without_overwrite_one_wins_and_the_other_is_told(tmp_path: Path) -> None:
    from mapsmith.app import MapSmith
    from mapsmith.errors import MapSmithError

    workspace = tmp_path / "ws"
    workspace.mkdir()
    _squares(workspace / "a.gpkg")
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace)})
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def writer(distance: float) -> None:
        barrier.wait()
        try:
            app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": distance, "output_path": "one.gpkg"})
            outcomes.append("written")
        except MapSmithError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=writer, args=(d,)) for d in (1.0, 2.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(outcomes) == ["OUTPUT_EXISTS", "written"]


def test_a_symlinked_lock_file_is_refused_not_followed(tmp_path: Path) -> None:
    from mapsmith.errors import MapSmithError
    from mapsmith.outputs import output_lock

    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".out.gpkg.lock").symlink_to(outside)
    with pytest.raises(MapSmithError) as info, output_lock(ws / "out.gpkg"):
        pass
    assert info.value.code == "OUTPUT_LOCK_FAILED"
    assert outside.read_text() == "keep"


# -- temporary files a killed run left ----------------------------------------------------------

STALE = [
    ".out.tmp-0a1b2c3d.gpkg",
    ".out.tmp-0a1b2c3d.gpkg-journal",
    ".out.tmp-0a1b2c3d.repair1.gpkg",
    "sub/.dem.tmp-deadbeef.tif",
    "sub/.dem.tmp-deadbeef.tif.aux.xml",
    ".out.gpkg.provenance.json.ab_9cd0e.tmp",
]
KEPT = ["out.gpkg", ".hidden.gpkg", "sub/dem.tmp-deadbeef.tif", ".out.tmp-XYZ.gpkg", ".out.tmp-0a1b2c3.gpkg"]


def _arena(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    for name in STALE + KEPT:
        (ws / name).write_text("x")
    outside = tmp_path / "outside.gpkg"
    outside.write_text("keep")
    (ws / ".link.tmp-01234567.gpkg").symlink_to(outside)  # a temp name that is a link: the link goes
    return ws, outside


def test_clean_stale_temps_removes_mapsmith_temporaries_only(tmp_path: Path) -> None:
    from mapsmith.outputs import clean_stale_temps

    ws, outside = _arena(tmp_path)
    removed = clean_stale_temps(ws, {})
    assert removed == sorted([*STALE, ".link.tmp-01234567.gpkg"])
    assert outside.read_text() == "keep"
    left = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file())
    assert left == sorted(KEPT)  # the claim this process now holds lives outside the workspace
    from mapsmith.outputs import workspace_claim_path

    assert workspace_claim_path(ws).is_file() and not workspace_claim_path(ws).is_relative_to(ws)


_HOLDER = """
import sys, time
from mapsmith.outputs import clean_stale_temps
clean_stale_temps(sys.argv[1], {})
print("claimed", flush=True)
time.sleep(120)
"""


def test_with_another_server_alive_only_old_temporaries_are_removed(tmp_path: Path) -> None:
    from mapsmith.outputs import clean_stale_temps

    ws, _ = _arena(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    # Another server claims this workspace (being alone at its start, it removes the arena's temporaries).
    old = ".old.tmp-00000000.gpkg"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(ws)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
        fresh = ".fresh.tmp-11111111.gpkg"
        (ws / fresh).write_text("x")
        (ws / old).write_text("x")
        an_hour_ago = time.time() - 3600
        os.utime(ws / old, (an_hour_ago, an_hour_ago))
        # call time limit 600 s: only temporaries older than 1200 s may belong to no living run
        removed = clean_stale_temps(ws, {"MAPSMITH_CALL_TIMEOUT_S": "600"})
        assert removed == [old]
        assert (ws / fresh).exists()
    finally:
        holder.kill()
        holder.wait()


def test_clean_twin_a_workspace_without_temporaries_is_left_as_it_is(tmp_path: Path) -> None:
    from mapsmith.outputs import clean_stale_temps

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "out.gpkg").write_text("x")
    assert clean_stale_temps(ws, {}) == []
    assert sorted(p.name for p in ws.iterdir()) == ["out.gpkg"]


_CLAIM_AND_LEAVE = """
import sys
from mapsmith.outputs import clean_stale_temps
clean_stale_temps(sys.argv[1], {})
"""


def test_the_last_server_to_leave_removes_the_workspace_claim_and_no_other(tmp_path: Path) -> None:
    """The claim file lived on after every server: 846 of them in /tmp on the test machine, one per workspace ever
    served. A server leaving normally removes it only when no other server holds it."""
    from mapsmith.outputs import workspace_claim_path

    ws, temp = tmp_path / "ws", tmp_path / "tmp"
    ws.mkdir()
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")} | {"TMPDIR": str(temp)}

    def claims() -> list[str]:
        return sorted(p.name for p in temp.glob("mapsmith-claim-*.lock"))

    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(ws)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
        name = workspace_claim_path(ws).name  # the same name under any temporary folder
        assert claims() == [name]
        # Another server on the workspace leaves while the first is alive: the first's claim stays.
        subprocess.run([sys.executable, "-c", _CLAIM_AND_LEAVE, str(ws)], env=env, check=True, timeout=60)
        assert claims() == [name]
    finally:
        holder.kill()  # killed: nothing runs at its exit, so the file stays for the next server
        holder.wait()
    assert claims() == [name]
    # The clean twin: a server alone on the workspace takes the claim over and, leaving last, removes it.
    subprocess.run([sys.executable, "-c", _CLAIM_AND_LEAVE, str(ws)], env=env, check=True, timeout=60)
    assert claims() == []


def test_a_starting_server_removes_the_claims_no_server_holds_and_keeps_the_held_ones(tmp_path: Path) -> None:
    """Claims left by killed servers (and by versions that never removed theirs: 849 in this machine's /tmp) are
    removed by the next server to start, whatever workspace they name; a claim another server holds stays, and so do
    files that only look like claims."""
    from mapsmith.outputs import workspace_claim_path

    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")} | {"TMPDIR": str(temp)}
    served, other = tmp_path / "served", tmp_path / "other"
    served.mkdir()
    other.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(other)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
        held = workspace_claim_path(other).name
        orphans = [f"mapsmith-claim-{n:024x}.lock" for n in (1, 2)]
        for name in orphans:
            (temp / name).write_text("")
        (temp / "mapsmith-claim-notes.txt").write_text("x")  # not a claim's name
        (temp / f"mapsmith-claim-{3:024x}.lock").symlink_to(temp / "mapsmith-claim-notes.txt")  # never followed
        before = sorted(p.name for p in temp.iterdir())
        assert set(orphans) | {held} <= set(before) and len(before) == 5
        # A server starts on another workspace and leaves: the two orphans go, with its own claim; the rest stays.
        subprocess.run([sys.executable, "-c", _CLAIM_AND_LEAVE, str(served)], env=env, check=True, timeout=60)
        after = sorted(p.name for p in temp.iterdir())
        assert after == sorted({held, "mapsmith-claim-notes.txt", f"mapsmith-claim-{3:024x}.lock"})
    finally:
        holder.kill()
        holder.wait()
    # The clean twin: the killed holder's claim is an orphan now, and the next start removes it.
    subprocess.run([sys.executable, "-c", _CLAIM_AND_LEAVE, str(served)], env=env, check=True, timeout=60)
    assert sorted(p.name for p in temp.iterdir()) == [f"mapsmith-claim-{3:024x}.lock", "mapsmith-claim-notes.txt"]


def test_a_claim_whose_file_a_leaving_server_removed_is_taken_again_on_the_new_file(tmp_path: Path) -> None:
    """A starting server that opened the claim just before a leaving one removed it would hold a file no name leads
    to, invisible to the next server, which would then take the workspace for its own and remove a living run's
    temporaries: holding it again leads to the file the name names now."""
    from mapsmith.outputs import _hold_shared

    path = tmp_path / "mapsmith-claim-x.lock"
    path.write_text("")
    stale = os.open(path, os.O_RDWR)
    path.unlink()  # the leaving server's removal
    path.write_text("")  # a third server created the name again
    fd = _hold_shared(path, stale)
    try:
        assert os.fstat(fd).st_ino == path.stat().st_ino
    finally:
        os.close(fd)
