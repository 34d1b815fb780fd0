"""run_sql's spare database: opened ahead, taken only for the same workspace and settings, locked as a fresh one,
never carrying a call's state into the next, and gone at exit.

``duckdb_spatial.sandboxed_connect`` gives every run_sql call a database of its own; the spare only moves the
opening (and spatial's load) ahead of the call. Each test says what a fresh database would be and checks the
spare is exactly that.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from mapsmith_opensource import duckdb_spatial


@pytest.fixture(autouse=True)
def no_spare_left() -> Iterator[None]:
    """Each test starts and ends without a spare (a spare is process state)."""
    duckdb_spatial._close_spare()
    yield
    duckdb_spatial._close_spare()


def _spare() -> Any:
    duckdb_spatial.wait_for_spare()
    return duckdb_spatial._SPARE["database"]


def test_the_spare_is_the_next_calls_database_locked_as_a_fresh_one(tmp_path: Path) -> None:
    duckdb_spatial.prepare_spare(tmp_path, {})
    spare = _spare()
    assert spare is not None
    sandbox = duckdb_spatial.sandboxed_connect(tmp_path, {})
    try:
        assert sandbox is spare
        assert sandbox.settings["allowed_directories"] == f"{tmp_path}/"
        assert sandbox.settings["enable_external_access"] == "false"
        assert sandbox.settings["lock_configuration"] == "true"
        with pytest.raises(duckdb.Error, match="locked"):
            sandbox.connection.execute("SET memory_limit = '8GB'")
        with pytest.raises(duckdb.Error):
            sandbox.connection.execute("SELECT * FROM read_csv('/etc/hostname')")  # outside the workspace
        assert sandbox.connection.execute("SELECT count(*) FROM duckdb_tables()").fetchone() == (0,)
        assert sandbox.connection.execute(
            "SELECT ST_Area(ST_GeomFromText('POLYGON((0 0,3 0,3 2,0 2,0 0))'))"
        ).fetchone() == (6.0,)
    finally:
        sandbox.close()
    assert not sandbox.temp_directory.exists() and not sandbox.extension_directory.exists()
    following = _spare()  # closing the call's database built the next one
    assert following is not None and following is not spare


def test_a_call_never_sees_the_tables_of_the_call_before(tmp_path: Path) -> None:
    first = duckdb_spatial.sandboxed_connect(tmp_path, {})
    first.connection.execute("CREATE TABLE left_behind AS SELECT 42 AS answer")
    assert first.connection.execute("SELECT answer FROM left_behind").fetchone() == (42,)
    first.close()
    second = duckdb_spatial.sandboxed_connect(tmp_path, {})
    try:
        assert second is not first
        assert second.connection.execute("SELECT count(*) FROM duckdb_tables()").fetchone() == (0,)
        with pytest.raises(duckdb.CatalogException):
            second.connection.execute("SELECT * FROM left_behind")
    finally:
        second.close()


@pytest.mark.parametrize(
    ("other_root", "environ", "memory"),
    [
        (True, {}, "4GB"),  # another workspace
        (False, {"MAPSMITH_DUCKDB_MEMORY": "512MB"}, "512MB"),  # other settings
    ],
)
def test_a_spare_built_for_other_settings_is_not_taken(
    tmp_path: Path, other_root: bool, environ: dict[str, str], memory: str
) -> None:
    root = tmp_path / "a"
    root.mkdir()
    duckdb_spatial.prepare_spare(root, {})
    spare = _spare()
    assert spare is not None
    wanted = tmp_path / "b" if other_root else root
    wanted.mkdir(exist_ok=True)
    sandbox = duckdb_spatial.sandboxed_connect(wanted, environ)
    try:
        assert sandbox is not spare
        assert sandbox.settings["allowed_directories"] == f"{wanted}/"
        assert sandbox.settings["memory_limit"] == memory
    finally:
        sandbox.close()
    following = _spare()  # the one for the settings in use replaces it, and it is closed
    assert following is not None and following is not spare
    assert not spare.temp_directory.exists()


def test_run_sql_answers_the_same_from_the_spare(
    make_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import geopandas as gpd
    from shapely.geometry import box

    gpd.GeoDataFrame({"id": [1, 2]}, geometry=[box(0, 0, 10, 10), box(0, 0, 20, 30)], crs="EPSG:32633").to_file(
        workspace / "squares.gpkg", driver="GPKG"
    )
    taken: list[bool] = []
    take = duckdb_spatial._take_spare

    def spy(key: tuple[str, ...]) -> Any:
        database = take(key)
        taken.append(database is not None)
        return database

    monkeypatch.setattr(duckdb_spatial, "_take_spare", spy)
    app = make_app()
    sql = "SELECT count(*) AS n, sum(ST_Area(geom)) AS area FROM ST_Read('squares.gpkg')"
    answers = []
    for _ in range(2):
        answer = app.run("run_sql", {"sql": sql}).answer
        answers.append((answer["rows"], answer["provenance"]["parameters"]["x-mapsmith:duckdb_sandbox"]))
        duckdb_spatial.wait_for_spare()
    assert answers[0] == answers[1]
    assert answers[0][0] == [{"n": 2, "area": 700.0}]  # 10 x 10 + 20 x 30
    assert answers[0][1]["lock_configuration"] == "true" and answers[0][1]["allowed_directories"] == "."
    assert taken == [False, True]  # the first call opened its own; the second took the spare the first left


def test_a_spare_being_built_at_exit_is_waited_for_and_removed(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from mapsmith_opensource import duckdb_spatial\n"
        "root = Path(sys.argv[1])\n"
        "duckdb_spatial.prepare_spare(root, {})\n"
        "duckdb_spatial.wait_for_spare()\n"
        "sandbox = duckdb_spatial.sandboxed_connect(root, {})\n"
        "sandbox.close()  # starts the next spare; the interpreter exits while it is being built\n"
        "print(duckdb_spatial._SPARE['building'] is not None or duckdb_spatial._SPARE['database'] is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        env={"TMPDIR": str(scratch), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().lower()) is True  # a spare was under way or built at exit
    assert sorted(p.name for p in scratch.iterdir()) == []  # and its folders were removed
