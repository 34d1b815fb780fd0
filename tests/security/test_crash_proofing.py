"""Inputs that used to kill the server or break a whole workspace, each beside its clean twin.

* ``ST_Read(..., layer='missing')`` segfaults duckdb-spatial 1.5.5 (the process dies with SIGSEGV):
  the layer is checked first, in a child process here so that a regression kills the child, not pytest.
* A file name with bytes that are not UTF-8 made get_lineage's reply unwritable as JSON.
* One deeply nested, malformed, wrongly typed or non-regular manifest anywhere in the workspace broke
  provenance for all of it.
* Engine exceptions escaped raw, with absolute host paths in their text.
* Runaway SQL (an endless recursive CTE, ``range(1e11)``, ``repeat('x', 2e9)``) ran on without limit.
* An output larger than MAPSMITH_MAX_OUTPUT_BYTES was renamed into place.

Expected values are worked out by hand: the test layer holds 3 squares (sides 10, 20, 30 m), so a read
of it has 3 features; a recursive CTE bounded at n < 10 from 1 yields 10 rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError

SECRET_DIR = "/home/someone-else/secret-project"


def _squares(path: Path, layer: str = "parcels") -> None:
    import geopandas as gpd
    from shapely.geometry import box

    gpd.GeoDataFrame(
        {"id": [1, 2, 3]},
        geometry=[box(i * 1000.0, 0.0, i * 1000.0 + s, s) for i, s in enumerate([10.0, 20.0, 30.0])],
        crs="EPSG:32633",
    ).to_file(path, driver="GPKG", layer=layer)


def _encodable(reply: Any) -> bytes:
    """What every MCP transport does with a reply: JSON, then UTF-8 (strict: lone surrogates fail)."""
    return json.dumps(reply, ensure_ascii=False).encode("utf-8")


# -- the missing layer that crashed DuckDB ----------------------------------------------------------

_RUN_SQL_IN_CHILD = """
import json, sys
from mapsmith.app import MapSmith
from mapsmith.errors import MapSmithError
app = MapSmith({"MAPSMITH_WORKSPACE": sys.argv[1]})
try:
    result = app.run("run_sql", {"sql": sys.argv[2], "output_path": sys.argv[3]})
    print(json.dumps({"ok": result.answer}))
except MapSmithError as exc:
    print(json.dumps({"error": exc.to_dict()}))
"""


def _run_sql_in_child(workspace: Path, sql: str, output: str) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_SQL_IN_CHILD, str(workspace), sql, output],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    return proc.returncode, json.loads(last)


def test_st_read_of_a_missing_layer_is_refused_before_duckdb_and_the_process_lives(workspace: Path) -> None:
    _squares(workspace / "parcels.gpkg")
    rc, reply = _run_sql_in_child(
        workspace, "SELECT id, geom FROM ST_Read('parcels.gpkg', layer='missing')", "out.gpkg"
    )
    assert rc == 0, f"the process died with {rc} (-11 is the duckdb-spatial segfault)"
    assert reply["error"]["code"] == "LAYER_NOT_FOUND"
    assert reply["error"]["evidence"]["layers"] == ["parcels"]
    assert reply["error"]["evidence"]["layer"] == "missing"
    assert not (workspace / "out.gpkg").exists()


def test_clean_twin_st_read_of_an_existing_layer_runs(workspace: Path) -> None:
    _squares(workspace / "parcels.gpkg")
    rc, reply = _run_sql_in_child(
        workspace, "SELECT id, geom FROM ST_Read('parcels.gpkg', layer='parcels') ORDER BY id", "out.gpkg"
    )
    assert rc == 0
    assert reply["ok"]["feature_count"] == 3


def test_a_second_read_of_the_same_file_with_a_missing_layer_is_checked_too(app: Any, workspace: Path) -> None:
    _squares(workspace / "parcels.gpkg")
    sql = (
        "SELECT a.id, a.geom FROM ST_Read('parcels.gpkg', layer='parcels') a "
        "JOIN ST_Read('parcels.gpkg', layer='nope') b ON a.id = b.id"
    )
    with pytest.raises(MapSmithError) as info:
        app.run("run_sql", {"sql": sql, "output_path": "out.gpkg"})
    assert info.value.code == "LAYER_NOT_FOUND" and info.value.evidence["layer"] == "nope"


def test_a_layer_that_is_not_a_string_literal_is_refused(app: Any, workspace: Path) -> None:
    _squares(workspace / "parcels.gpkg")
    with pytest.raises(MapSmithError) as info:
        app.run("run_sql", {"sql": "SELECT geom FROM ST_Read('parcels.gpkg', layer=1)", "output_path": "o.gpkg"})
    assert info.value.code == "SQL_OPTION_REFUSED"


# -- replies are always serialisable -------------------------------------------------------------


def test_lineage_through_a_file_name_with_undecodable_bytes_is_serialisable(app: Any, workspace: Path) -> None:
    _squares(workspace / "a.gpkg")
    app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    app.run("buffer_layer", {"input_path": "b.gpkg", "distance_meters": 1, "output_path": "c.gpkg"})
    # b.gpkg and its record renamed to a name that is not UTF-8 (0xff): the walk from c finds b's
    # record by content, under that name.
    root = os.fsencode(workspace)
    os.rename(os.path.join(root, b"b.gpkg"), os.path.join(root, b"\xff.gpkg"))
    os.rename(os.path.join(root, b"b.gpkg.provenance.json"), os.path.join(root, b"\xff.gpkg.provenance.json"))
    reply = app.get_lineage("c.gpkg")
    _encodable(reply)  # raised UnicodeEncodeError before: the stdio session died on it
    records = [hop["record"] for hop in reply["hops"]]
    assert records == ["\\xff.gpkg.provenance.json", "c.gpkg.provenance.json"]
    assert reply["found"] is True


def test_clean_twin_lineage_with_plain_names(app: Any, workspace: Path) -> None:
    _squares(workspace / "a.gpkg")
    app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    app.run("buffer_layer", {"input_path": "b.gpkg", "distance_meters": 1, "output_path": "c.gpkg"})
    reply = app.get_lineage("c.gpkg")
    assert [hop["record"] for hop in reply["hops"]] == ["b.gpkg.provenance.json", "c.gpkg.provenance.json"]
    assert reply["complete"] is True and reply["warnings"] == []


# -- a bad manifest never breaks the others --------------------------------------------------------


def _deep(depth: int) -> str:
    return '{"spec_version": "1.0", "x": ' + "[" * depth + "]" * depth + "}"


def test_bad_manifests_are_skipped_with_a_note_and_the_good_chain_is_still_found(tmp_path: Path) -> None:
    from mapsmith.app import MapSmith

    # Its own workspace: the shared fixture's teardown reads every manifest, and these are meant to be bad.
    workspace = tmp_path / "hostile_ws"
    workspace.mkdir()
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace)})
    _squares(workspace / "a.gpkg")
    app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    bad = workspace / "junk"
    bad.mkdir()
    (bad / "deep.gpkg.provenance.json").write_text(_deep(200_000), "utf-8")  # RecursionError in json.loads
    (bad / "deep65.gpkg.provenance.json").write_text(_deep(64), "utf-8")  # 65 levels with the outer object
    (bad / "list.gpkg.provenance.json").write_text("[1, 2]", "utf-8")
    (bad / "typed.gpkg.provenance.json").write_text(json.dumps({"output": {"sha256": "ab"}, "inputs": 5}), "utf-8")
    (bad / "output.gpkg.provenance.json").write_text(json.dumps({"output": ["x"]}), "utf-8")
    (bad / "nan.gpkg.provenance.json").write_text('{"output": {"sha256": "ab"}, "x": NaN}', "utf-8")
    (bad / "dup.gpkg.provenance.json").write_text('{"output": {"sha256": "ab"}, "output": {}}', "utf-8")
    (bad / "latin1.gpkg.provenance.json").write_bytes(b'{"a": "\xe9"}')
    os.mkfifo(bad / "fifo.gpkg.provenance.json")  # a blocking read would hang the walk forever
    reply = app.get_lineage("b.gpkg")
    _encodable(reply)
    assert [hop["record"] for hop in reply["hops"]] == ["b.gpkg.provenance.json"]
    assert reply["found"] is True and reply["complete"] is True
    noted = sorted(w.split(": ", 1)[0].rsplit("/", 1)[-1] for w in reply["warnings"])
    assert noted == sorted(
        f"{n}.gpkg.provenance.json"
        for n in ("deep", "deep65", "list", "typed", "output", "nan", "dup", "latin1", "fifo")
    )


def test_load_manifest_depth_limit_is_exact(tmp_path: Path) -> None:
    from mapsmith.provenance.reading import MAX_MANIFEST_DEPTH, ManifestUnreadable, load_manifest

    ok = tmp_path / "ok.provenance.json"
    ok.write_text(_deep(MAX_MANIFEST_DEPTH - 1), "utf-8")  # the object plus 63 arrays: 64 levels
    assert load_manifest(ok)["spec_version"] == "1.0"
    deep = tmp_path / "deep.provenance.json"
    deep.write_text(_deep(MAX_MANIFEST_DEPTH), "utf-8")
    with pytest.raises(ManifestUnreadable) as info:
        load_manifest(deep)
    assert info.value.code == "MANIFEST_TOO_DEEP"
    big = tmp_path / "big.provenance.json"
    big.write_text('{"x": "' + "a" * 2000 + '"}', "utf-8")
    with pytest.raises(ManifestUnreadable) as info:
        load_manifest(big, max_bytes=1000)
    assert info.value.code == "MANIFEST_TOO_LARGE" and info.value.evidence["manifest"] == "big.provenance.json"


# -- engine errors: structured, with codes, without host paths -------------------------------------


def _engine_exceptions(workspace: Path) -> list[tuple[BaseException, str]]:
    import rasterio.errors
    import shapely.errors

    inside = f"{workspace}/a.gpkg"
    return [
        (FileNotFoundError(2, "No such file or directory", f"{SECRET_DIR}/grid.tif"), "ENGINE_FILE_MISSING"),
        (IsADirectoryError(21, "Is a directory", f"{SECRET_DIR}/out"), "ENGINE_PATH_IS_DIRECTORY"),
        (
            shapely.errors.GEOSException(f"TopologyException: side location conflict in {SECRET_DIR}"),
            "ENGINE_GEOMETRY_ERROR",
        ),
        (MemoryError(f"cannot allocate 17179869184 bytes for {inside}"), "ENGINE_OUT_OF_MEMORY"),
        (rasterio.errors.RasterioIOError(f"{SECRET_DIR}/dem.tif: No such file or directory"), "ENGINE_READ_ERROR"),
    ]


@pytest.mark.parametrize("position", range(5))
def test_engine_exceptions_become_coded_errors_without_host_paths(
    app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch, position: int
) -> None:
    from mapsmith_opensource import io

    _squares(workspace / "a.gpkg")
    raised, code = _engine_exceptions(workspace)[position]

    def explode(*_args: Any, **_kwargs: Any) -> None:
        raise raised

    monkeypatch.setattr(io, "write_layer", explode)
    with pytest.raises(MapSmithError) as info:
        app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    error = info.value
    assert error.code == code
    assert error.__cause__ is raised
    assert error.evidence["exception"] == type(raised).__name__
    sent = json.dumps(error.to_dict())
    assert SECRET_DIR not in sent and str(workspace) not in sent
    if isinstance(raised, MemoryError):
        assert "for a.gpkg" in error.message  # the workspace path shown relative, not dropped
    (failure,) = workspace.glob("b.gpkg.failed*.provenance.json")
    text = failure.read_text("utf-8")
    assert SECRET_DIR not in text and str(workspace) not in text
    assert json.loads(text)["x-mapsmith:error"]["code"] == code


def test_output_turned_into_a_folder_before_the_rename_is_a_coded_error(
    app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mapsmith_opensource import io

    _squares(workspace / "a.gpkg")
    real = io.write_layer

    def write_then_make_the_output_a_folder(gdf: Any, path: Path, layer: Any = None) -> Any:
        result = real(gdf, path, layer)
        (workspace / "b.gpkg").mkdir()  # os.replace(file, folder) raises IsADirectoryError
        (workspace / "b.gpkg" / "keep").write_text("x")
        return result

    monkeypatch.setattr(io, "write_layer", write_then_make_the_output_a_folder)
    with pytest.raises(MapSmithError) as info:
        app.run(
            "buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg", "overwrite": True}
        )
    assert info.value.code == "OUTPUT_IS_DIRECTORY"
    assert isinstance(info.value.__cause__, IsADirectoryError)
    assert str(workspace) not in json.dumps(info.value.to_dict())
    assert (workspace / "b.gpkg" / "keep").read_text() == "x"
    assert not [p for p in workspace.iterdir() if ".tmp-" in p.name]
    (failure,) = workspace.glob("b.gpkg.failed*.provenance.json")  # written, and claims no bytes
    assert "output" not in json.loads(failure.read_text("utf-8"))


def test_clean_twin_the_same_buffer_without_sabotage_is_written(app: Any, workspace: Path) -> None:
    _squares(workspace / "a.gpkg")
    result = app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    assert result.output_path == "b.gpkg" and (workspace / "b.gpkg.provenance.json").exists()


def test_redact_paths_keeps_urls_and_relative_paths() -> None:
    from mapsmith.errors import REDACTED, redact_paths

    text = "read /ws/x/a.gpkg, /ws-other/b, /etc/passwd and http://h/p and x/y; root /ws"
    assert redact_paths(text, "/ws") == f"read x/a.gpkg, {REDACTED}, {REDACTED} and http://h/p and x/y; root ."
    assert redact_paths(text, None) == text


# -- output size ------------------------------------------------------------------------------


def test_an_output_over_the_size_limit_is_refused_and_nothing_is_left(make_app: Any, workspace: Path) -> None:
    _squares(workspace / "a.gpkg")
    app = make_app(MAPSMITH_MAX_OUTPUT_BYTES="4096")  # a GeoPackage is never under 4 KiB (SQLite pages)
    with pytest.raises(MapSmithError) as info:
        app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    assert info.value.code == "OUTPUT_TOO_LARGE"
    assert info.value.evidence["limit_bytes"] == 4096 and info.value.evidence["bytes"] > 4096
    assert not (workspace / "b.gpkg").exists()
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith(".")) == []


def test_clean_twin_an_output_under_the_size_limit_is_written(make_app: Any, workspace: Path) -> None:
    _squares(workspace / "a.gpkg")
    app = make_app(MAPSMITH_MAX_OUTPUT_BYTES=str(10 * 1024 * 1024))
    app.run("buffer_layer", {"input_path": "a.gpkg", "distance_meters": 1, "output_path": "b.gpkg"})
    assert (workspace / "b.gpkg").stat().st_size <= 10 * 1024 * 1024


def test_a_limit_that_is_not_a_number_is_a_configuration_error() -> None:
    from mapsmith.limits import max_output_bytes

    with pytest.raises(MapSmithError) as info:
        max_output_bytes({"MAPSMITH_MAX_OUTPUT_BYTES": "lots"})
    assert info.value.code == "LIMIT_SETTING_INVALID"


# -- runaway SQL ------------------------------------------------------------------------------

RUNAWAY = {
    "endless recursive CTE": "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
    "SELECT n, ST_Point(n, 0) AS geom FROM t",
    "range(1e11)": "SELECT range AS n, ST_Point(0, 0) AS geom FROM range(100000000000)",
    "repeat('x', 2e9)": "SELECT repeat('x', 2000000000) AS s, ST_Point(0, 0) AS geom",
}


@pytest.mark.parametrize("name", sorted(RUNAWAY))
def test_runaway_sql_stops_with_a_code(make_app: Any, workspace: Path, name: str) -> None:
    app = make_app(MAPSMITH_CALL_TIMEOUT_S="2", MAPSMITH_DUCKDB_MEMORY="256MB")
    started = time.monotonic()
    with pytest.raises(MapSmithError) as info:
        app.run("run_sql", {"sql": RUNAWAY[name], "output_path": "o.gpkg", "output_crs": "EPSG:32633"})
    elapsed = time.monotonic() - started
    assert info.value.code in ("SQL_TIME_LIMIT", "SQL_MEMORY_LIMIT"), info.value
    # DuckDB sees the interrupt between vectors: repeat() only once its 2 GB string is built (measured
    # 12.5 s on an idle machine, 49 s with the other tests running); the others within ~1-4 s of the limit.
    assert elapsed < 150, elapsed
    assert not (workspace / "o.gpkg").exists()


def test_clean_twin_a_bounded_recursive_cte_is_answered(make_app: Any, workspace: Path) -> None:
    app = make_app(MAPSMITH_CALL_TIMEOUT_S="2", MAPSMITH_DUCKDB_MEMORY="256MB")
    sql = (
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 10) "
        "SELECT n, ST_Point(n, 0) AS geom FROM t"
    )
    result = app.run("run_sql", {"sql": sql, "output_path": "o.gpkg", "output_crs": "EPSG:32633"})
    assert result.answer["feature_count"] == 10  # 1..10
