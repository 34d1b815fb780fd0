"""Promotion is evidence, not a flag: refused without it, recorded with it, and the catalogue says which.

The hello plugin is run for real in the workspace; the runs that count are found and replayed by
``mapsmith plugin promote`` itself. ``--runs`` is the operator's claim and is never taken as evidence.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Polygon

from conftest import published_schema_errors
from layers import manifest, write_layer
from mapsmith.app import MapSmith
from mapsmith.errors import ConfigurationError, MapSmithError
from mapsmith.pluginkit import maturity, promote

OPERATION = "count_vertices"
TRIANGLE = Polygon([(500_000, 5_000_000), (500_100, 5_000_000), (500_000, 5_000_100)])
SQUARE = Polygon([(500_200, 5_000_000), (500_300, 5_000_000), (500_300, 5_000_100), (500_200, 5_000_100)])
PENTAGON = Polygon([(0, 0), (4, 0), (5, 3), (2, 5), (-1, 3)])


def _app(workspace: Path) -> MapSmith:
    return MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_QGIS_ALGORITHMS": "0"})


def _report(workspace: Path, digest: str, *, passed: bool = True, name: str = "hello-check.json") -> Path:
    """A report in the shape ``plugin check --json`` writes (``CheckReport.to_dict``), naming the code it checked."""
    rules = [
        {"name": "contract_schema", "passed": True, "evidence": {"operations": [OPERATION]}},
        {"name": "examples_run", "passed": passed, "evidence": {}},
    ]
    plugin = {
        "name": "hello",
        "module": "mapsmith_hello",
        "entry_point": "hello",
        "distribution": "mapsmith-plugin-hello",
        "version": "0.1.0",
        "contracts": ["count_vertices.toml"],
        "examples": None,
        "code_sha256": digest,
    }
    body = {
        "target": "mapsmith-plugin-hello",
        "passed": passed,
        "failed": [] if passed else ["examples_run"],
        "plugin": plugin,
        "rules": rules,
        "seconds": 1.0,
    }
    path = workspace / "reports" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(body, indent=2), "utf-8")
    return path


def _refused(workspace: Path, report: Path, runs: int = 3, operation: str = OPERATION) -> MapSmithError:
    with pytest.raises(MapSmithError) as refused:
        promote.promote(operation, report, runs, workspace=workspace)
    assert refused.value.hint, refused.value.code
    return refused.value


def _run(app: MapSmith, source: str, target: str) -> dict[str, Any]:
    result = app.run(OPERATION, {"input_path": source, "output_path": target})
    return result.answer


def test_promotion_is_refused_without_evidence_and_recorded_with_it(
    workspace: Path, hello: Path, hello_digest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write_layer(workspace / "tri.gpkg", [TRIANGLE], "EPSG:32610")
    write_layer(workspace / "sq.gpkg", [SQUARE], "EPSG:32610")
    write_layer(workspace / "pent.gpkg", [PENTAGON], "EPSG:32633")
    report = _report(workspace, hello_digest)
    app = _app(workspace)

    # No run yet: nothing in the workspace verifies, whatever the operator claims.
    refused = _refused(workspace, report)
    assert refused.code == "PROMOTION_RUNS_INSUFFICIENT" and refused.evidence["verified"] == 0
    # Fewer than the floor is refused before anything is read.
    assert _refused(workspace, report, runs=2).code == "PROMOTION_TOO_FEW_RUNS"

    # Two different inputs, and the first one again: the repeat is the same evidence, counted once.
    # By hand: a triangle's ring is 3 corners + the closing point, a square's 4 + 1.
    assert _run(app, "tri.gpkg", "tri_v.gpkg") == {"feature_count": 1, "total_vertex_count": 4}
    assert _run(app, "sq.gpkg", "sq_v.gpkg") == {"feature_count": 1, "total_vertex_count": 5}
    assert _run(app, "tri.gpkg", "tri_again.gpkg") == {"feature_count": 1, "total_vertex_count": 4}
    refused = _refused(workspace, report)
    assert refused.code == "PROMOTION_RUNS_INSUFFICIENT"
    assert refused.evidence["verified"] == 2 and refused.evidence["required"] == 3
    verdicts = {m["manifest"]: m for m in refused.evidence["manifests"]}
    # manifests are read in name order: tri_again before tri_v, so tri_v is the repeat
    assert verdicts["tri_v.gpkg.provenance.json"] == {
        "manifest": "tri_v.gpkg.provenance.json",
        "counted": False,
        "reason": "same inputs and parameters as a run already counted",
    }
    assert verdicts["tri_again.gpkg.provenance.json"]["counted"] is True

    # The third different input makes three verified runs ... (a pentagon's ring: 5 + 1)
    assert _run(app, "pent.gpkg", "pent_v.gpkg") == {"feature_count": 1, "total_vertex_count": 6}
    # ... but a record that says a critical check failed is not a verified run, whatever it claims else.
    sq_record = workspace / "sq_v.gpkg.provenance.json"
    original = sq_record.read_text("utf-8")
    edited = json.loads(original)
    edited["verification"][0]["passed"] = False
    sq_record.write_text(json.dumps(edited), "utf-8")
    refused = _refused(workspace, report)
    assert refused.code == "PROMOTION_RUNS_INSUFFICIENT" and refused.evidence["verified"] == 2
    verdicts = {m["manifest"]: m for m in refused.evidence["manifests"]}
    assert verdicts["sq_v.gpkg.provenance.json"]["reason"].startswith("critical checks failed")
    # and bytes that are no longer the recorded ones are not evidence either
    sq_record.write_text(original, "utf-8")
    sq_bytes = (workspace / "sq_v.gpkg").read_bytes()
    (workspace / "sq_v.gpkg").write_bytes(sq_bytes + b"\0")
    refused = _refused(workspace, report)
    assert refused.code == "PROMOTION_RUNS_INSUFFICIENT" and refused.evidence["verified"] == 2
    verdicts = {m["manifest"]: m for m in refused.evidence["manifests"]}
    assert verdicts["sq_v.gpkg.provenance.json"]["reason"] == "the dataset beside it no longer has the recorded bytes"
    (workspace / "sq_v.gpkg").write_bytes(sq_bytes)

    # The report must be a passing one, of this very code.
    failing = _report(workspace, hello_digest, passed=False, name="failing.json")
    refused = _refused(workspace, failing)
    assert refused.code == "PROMOTION_CHECK_FAILED" and refused.evidence["failed_rules"] == ["examples_run"]
    other = _report(workspace, "0" * 64, name="other.json")
    assert _refused(workspace, other).code == "PROMOTION_REPORT_OTHER_CODE"
    unbound = workspace / "reports" / "unbound.json"
    unbound.write_text(json.dumps({"passed": True, "rules": []}), "utf-8")
    assert _refused(workspace, unbound).code == "PROMOTION_REPORT_UNBOUND"
    garbled = workspace / "reports" / "garbled.json"
    garbled.write_text("{not json", "utf-8")
    assert _refused(workspace, garbled).code == "PROMOTION_REPORT_UNREADABLE"
    assert not (workspace / ".mapsmith").exists()  # nothing refused left a record

    # With the evidence: promoted, through the command the CLI calls.
    code = promote.main([OPERATION, "--report", str(report), "--runs", "3", "--workspace", str(workspace), "--json"])
    assert code == 0, capsys.readouterr()
    printed = json.loads(capsys.readouterr().out)
    stored = json.loads((workspace / ".mapsmith" / "promotions.json").read_text("utf-8"))
    assert stored["format"] == "mapsmith-promotions/1" and stored["promotions"] == [printed]
    assert printed["operation"] == OPERATION and printed["version"] == "0.1.0"
    assert printed["code_sha256"] == hello_digest
    assert printed["check_report"] == {
        "path": "reports/hello-check.json",
        "sha256": hashlib.sha256(report.read_bytes()).hexdigest(),
        "passed": True,
        "rules": 2,
    }
    runs = printed["verified_runs"]
    assert (runs["required"], runs["minimum"], runs["count"]) == (3, 3, 3)
    assert [r["manifest"] for r in runs["runs"]] == [
        "pent_v.gpkg.provenance.json",
        "sq_v.gpkg.provenance.json",
        "tri_again.gpkg.provenance.json",  # the first of the two identical runs met, by name
    ]
    assert all(r["replay"] == "identical" for r in runs["runs"])
    assert {r["output_sha256"] for r in runs["runs"]} == {
        manifest(workspace / name)["output"]["sha256"] for name in ("pent_v.gpkg", "sq_v.gpkg", "tri_again.gpkg")
    }

    # From now on (a server started on this workspace): stable, promoted by evidence, with the record.
    promoted = _app(workspace)
    contract = promoted.host.contracts[OPERATION]
    assert contract.maturity == "stable"
    assert contract.promotion == {
        "by": "evidence",
        "promoted_at": printed["promoted_at"],
        "check_report_sha256": printed["check_report"]["sha256"],
        "verified_runs": 3,
        "record": ".mapsmith/promotions.json",
    }
    entry = next(e for e in promoted.list_operations() if e["operation"] == OPERATION)
    assert entry["maturity"] == "stable" and entry["promotion"] == contract.promotion
    result = promoted.run(OPERATION, {"input_path": "pent.gpkg", "output_path": "after.gpkg"})
    assert result.warnings == [] and result.status == "ok"
    after = manifest(workspace / "after.gpkg")
    assert after["x-mapsmith:plugin"]["maturity"] == "stable"  # the code is still named
    assert after["x-mapsmith:plugin"]["code_sha256"] == hello_digest
    assert published_schema_errors(after) == []

    # Promoting again is refused: nothing to do. So is promoting MapSmith's own operation, or a typo.
    assert _refused(workspace, report).code == "PROMOTION_NOT_NEEDED"
    assert _refused(workspace, report, operation="buffer_layer").code == "PROMOTION_NOT_NEEDED"
    typo = _refused(workspace, report, operation="count_vertice")
    assert typo.code == "PROMOTION_UNKNOWN_OPERATION" and typo.evidence["suggestions"][0] == OPERATION


def test_a_promotion_binds_to_the_code_it_was_earned_by(hello_digest: str) -> None:
    record = {
        "operation": OPERATION,
        "distribution": "mapsmith_plugin_hello",  # spelt as the metadata has it: PEP 503 makes them one name
        "version": "0.1.0",
        "code_sha256": hello_digest,
        "promoted_at": "2026-12-02T00:00:00.000000Z",
        "check_report": {"sha256": "a" * 64},
        "verified_runs": {"count": 3},
    }
    origin = {"distribution": "mapsmith-plugin-hello", "version": "0.1.0", "code_sha256": hello_digest}
    assert maturity.decide(OPERATION, origin, [record])[0] == "stable"
    # any edit to the code, another version, or another operation of the plugin: experimental again
    assert maturity.decide(OPERATION, {**origin, "code_sha256": "b" * 64}, [record]) == ("experimental", None)
    assert maturity.decide(OPERATION, {**origin, "version": "0.1.1"}, [record]) == ("experimental", None)
    assert maturity.decide("other_operation", origin, [record]) == ("experimental", None)
    assert maturity.decide(OPERATION, None, []) == ("stable", None)  # MapSmith's own


def test_a_broken_promotions_file_is_refused_not_guessed(workspace: Path, hello: Path, hello_digest: str) -> None:
    state = workspace / ".mapsmith"
    state.mkdir()
    (state / "promotions.json").write_text('{"format": "mapsmith-promotions/1", "promotions": [{"operation": 1}]}')
    with pytest.raises(ConfigurationError) as refused:
        _app(workspace)
    assert refused.value.code == "PROMOTIONS_INVALID"
    assert "lacks" in refused.value.evidence["problem"]

    # promote refuses too, and leaves the file as it was rather than overwrite what it cannot read
    before = (state / "promotions.json").read_bytes()
    with pytest.raises(ConfigurationError):
        promote.promote(OPERATION, _report(workspace, hello_digest), 3, workspace=workspace)
    assert (state / "promotions.json").read_bytes() == before

    # clean twin: an empty, well-formed file promotes nothing and is read without complaint
    (state / "promotions.json").write_text('{"format": "mapsmith-promotions/1", "promotions": []}')
    assert _app(workspace).host.contracts[OPERATION].maturity == "experimental"


def test_promote_needs_a_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.delenv("MAPSMITH_WORKSPACE", raising=False)
    report = tmp_path / "r.json"
    report.write_text("{}")
    assert promote.main([OPERATION, "--report", str(report), "--runs", "3"]) == 2
    assert "PROMOTION_NO_WORKSPACE" in capsys.readouterr().err


def test_the_cli_reaches_promote(workspace: Path, tmp_path: Path) -> None:
    # `mapsmith plugin promote` (core/mapsmith/cli.py) hands its arguments to promote.main: a refusal
    # comes back with its code and exit status 2.
    import os
    import subprocess
    import sys

    report = tmp_path / "r.json"
    report.write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    done = subprocess.run(
        [sys.executable, "-m", "mapsmith", "plugin", "promote", "buffer_layer", "--report", str(report)]
        + ["--runs", "3", "--workspace", str(workspace), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    refusal = json.loads(done.stdout)
    assert refusal["code"] == "PROMOTION_NOT_NEEDED" and refusal["hint"]
