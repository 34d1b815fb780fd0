"""The hostile SQL corpus (tests/data/hostile_sql.json) against run_sql under a workspace, and the
sandboxed connection on its own with the parser bypassed.

Each statement must be refused with a structured error of its family; nothing outside the workspace
may be created or changed (a bait folder is snapshotted), and a loopback HTTP server started here
must receive no request at all.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError

CORPUS = json.loads((Path(__file__).parents[1] / "data" / "hostile_sql.json").read_text("utf-8"))["statements"]
FAMILIES = {
    # PRAGMA, DESCRIBE and SUMMARIZE reach the checks as SELECTs over pragma_* / SHOW constructs.
    "statement": {
        "SQL_NOT_SELECT",
        "SQL_MULTIPLE_STATEMENTS",
        "SQL_PARSE_ERROR",
        "SQL_FUNCTION_REFUSED",
        "SQL_TABLE_REFUSED",
        "SQL_CONSTRUCT_REFUSED",
    },
    "function": {
        "SQL_FUNCTION_REFUSED",
        "SQL_TABLE_REFUSED",
        "SQL_OPTION_REFUSED",
        "SQL_CONSTRUCT_REFUSED",
        "SQL_PARSE_ERROR",
    },
    "path": {
        "SQL_PATH_NOT_LITERAL",
        "SQL_PATH_PATTERN",
        "SQL_FORMAT_REFUSED",
        "SQL_FUNCTION_REFUSED",
        "SQL_PARSE_ERROR",
        "REMOTE_INPUT_UNSUPPORTED",
        "INPUT_NOT_FOUND",
    },
    "crs": {"SQL_CRS_NOT_LITERAL"},
}
VRT = '<OGRVRTDataSource><OGRVRTLayer name="s"><SrcDataSource>{src}</SrcDataSource></OGRVRTLayer></OGRVRTDataSource>'


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def _count(self) -> None:
        type(self).hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"a,b\n1,2\n")

    do_GET = do_HEAD = do_POST = _count

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def loopback() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []
    handler = type("Handler", (_Counter,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture
def stage(workspace: Path, tmp_path: Path, loopback: tuple[int, list[str]]) -> dict[str, Any]:
    import geopandas as gpd
    from shapely.geometry import box

    port, _ = loopback
    bait = tmp_path / "bait"
    bait.mkdir()
    square = gpd.GeoDataFrame({"id": [1]}, geometry=[box(0, 0, 10, 10)], crs="EPSG:32633")
    square.to_file(bait / "secret.gpkg", driver="GPKG")
    (bait / "secret.csv").write_text("a,b\n1,2\n", "utf-8")
    (bait / "secret.txt").write_text("secret\n", "utf-8")
    square.to_file(workspace / "in.gpkg", driver="GPKG")
    (workspace / "in.csv").write_text("a,b\n1,2\n", "utf-8")
    os.symlink(bait / "secret.gpkg", workspace / "link_out.gpkg")
    os.symlink(bait, workspace / "linkdir")
    (workspace / "evil.vrt").write_text(VRT.format(src=bait / "secret.csv"), "utf-8")
    for suffix in ("csv", "gpkg", "geojson"):
        (workspace / f"evil_vrt.{suffix}").write_text(VRT.format(src=bait / "secret.csv"), "utf-8")
    (workspace / "x.gml").write_text("<gml/>", "utf-8")
    return {"bait": bait, "port": port}


def _fill(sql: str, stage: dict[str, Any]) -> str:
    return sql.replace("{OUT}", str(stage["bait"])).replace("{PORT}", str(stage["port"]))


def test_corpus_is_large_and_covers_every_family() -> None:
    assert len(CORPUS) >= 100
    assert {entry["family"] for entry in CORPUS} == set(FAMILIES)


def test_every_hostile_statement_is_refused(
    app: Any, workspace: Path, stage: dict[str, Any], loopback: tuple[int, list[str]]
) -> None:
    _, hits = loopback
    before = _snapshot(stage["bait"])
    wrong: list[tuple[str, str]] = []
    for n, entry in enumerate(CORPUS):
        sql = _fill(entry["sql"], stage)
        try:
            app.run("run_sql", {"sql": sql, "output_path": f"out{n}.gpkg"})
        except MapSmithError as exc:
            allowed = FAMILIES[entry["family"]]
            if exc.code not in allowed and not exc.code.startswith("PATH_"):
                wrong.append((sql, exc.code))
            assert exc.hint, sql
        else:
            wrong.append((sql, "ran"))
    assert wrong == [], "\n".join(map(str, wrong))
    assert _snapshot(stage["bait"]) == before
    assert hits == []
    assert not list(workspace.glob("out*.gpkg"))


SANDBOX_ATTEMPTS = [
    "SELECT * FROM read_csv('{OUT}/secret.csv')",
    "SELECT * FROM read_text('{OUT}/secret.txt')",
    "SELECT * FROM ST_Read('{OUT}/secret.gpkg')",
    "SELECT * FROM ST_Read('{WS}/../bait/secret.gpkg')",
    "SELECT * FROM read_csv('{WS}/linkdir/secret.csv')",
    "SELECT * FROM ST_Read('/vsicurl/http://127.0.0.1:{PORT}/x.csv')",
    "SELECT * FROM read_csv('http://127.0.0.1:{PORT}/x.csv')",
    "SELECT * FROM glob('{OUT}/*')",
    "COPY (SELECT 1) TO '{OUT}/written.csv'",
    "ATTACH '{OUT}/db.duckdb'",
    "SET enable_external_access = true",
    "SET allowed_directories = ['/']",
    "RESET lock_configuration",
    "SET lock_configuration = false",
    "INSTALL httpfs",
    "LOAD httpfs",
    "EXPORT DATABASE '{OUT}/export'",
]


def test_the_connection_refuses_without_the_parser(
    workspace: Path, stage: dict[str, Any], loopback: tuple[int, list[str]]
) -> None:
    import duckdb

    from mapsmith_opensource.duckdb_spatial import sandboxed_connect

    _, hits = loopback
    before = _snapshot(stage["bait"])
    sandbox = sandboxed_connect(workspace.resolve(), {})
    ran: list[str] = []
    try:
        con = sandbox.connection
        assert con.execute("SELECT count(*) FROM ST_Read(?)", [str(workspace / "in.gpkg")]).fetchone() == (1,)
        for attempt in SANDBOX_ATTEMPTS:
            sql = attempt.replace("{OUT}", str(stage["bait"])).replace("{PORT}", str(stage["port"]))
            sql = sql.replace("{WS}", str(workspace))
            try:
                con.execute(sql).fetchall()
            except duckdb.Error:
                continue
            ran.append(sql)
        assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)
    finally:
        sandbox.close()
    assert ran == []
    assert _snapshot(stage["bait"]) == before
    assert hits == []
