"""A plugin's whole life, as its author and an operator live it: new, install, check, run, promote.

Every step is the real command in a fresh process (``python -m mapsmith plugin ...``), with the plugin
installed by pip into a throwaway ``site`` folder that reaches MapSmith only through ``PYTHONPATH`` and
the ``mapsmith`` entry-point group, as on a user's machine.

The generated operation flags lines at least ``min_length_meters`` long. Its example data
(``examples/lines.geojson``, EPSG:32610) holds three lines whose lengths are worked out in the
template's ``expected.toml``: diagonal 500 m (a 300-400-500 triangle), short 100 m, corner 250 + 120 =
370 m. So the three runs below flag:

- ``min_length_meters = 100``: 500, 100, 370 are all >= 100 -> 3 long;
- ``min_length_meters = 300``: 500 and 370 -> 2 long;
- ``min_length_meters = 450``: 500 only -> 1 long.

Three runs on different parameters are three pieces of evidence (the promotion floor), and the
promotion is refused until they exist.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="plugin check runs examples under bubblewrap")

OPERATION = "demo_flag_long_lines"
PINNED_DATE = "2000-01-01T00:00:00.000Z"  # GeoPackage writers stamp the clock unless told the date


def _env(site: Path, workspace: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(site),
        "MAPSMITH_WORKSPACE": str(workspace),
        "MAPSMITH_QGIS_ALGORITHMS": "0",
        "OGR_CURRENT_DATE": PINNED_DATE,
    }


def _mapsmith(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mapsmith", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=900
    )


RUN = """
import json, sys
from mapsmith.app import MapSmith
app = MapSmith()
result = app.run(sys.argv[1], json.loads(sys.argv[2])).to_dict()
entry = next(op for op in app.list_operations() if op["operation"] == sys.argv[1])
print(json.dumps({"result": result, "maturity": entry.get("maturity"), "promotion": entry.get("promotion")}))
"""


def _run(env: dict[str, str], cwd: Path, threshold: float, output: str) -> dict[str, Any]:
    arguments = {"input_path": "lines.geojson", "min_length_meters": threshold, "output_path": output}
    done = subprocess.run(
        [sys.executable, "-c", RUN, OPERATION, json.dumps(arguments)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_generated_plugin_is_checked_run_as_experimental_and_promoted_on_evidence(tmp_path: Path) -> None:
    author = tmp_path / "author"
    author.mkdir()
    site, workspace = tmp_path / "site", tmp_path / "workspace"
    workspace.mkdir()
    env = _env(site, workspace)

    made = _mapsmith(["plugin", "new", "demo"], env, author)
    assert made.returncode == 0, made.stderr
    package = author / "mapsmith-plugin-demo"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--quiet", "--target", str(site)]
        + [str(package)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr

    checked = _mapsmith(["plugin", "check", str(package), "--json"], env, author)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    report = json.loads(checked.stdout)
    assert report["passed"] is True
    assert all(rule["passed"] for rule in report["rules"]), [r for r in report["rules"] if not r["passed"]]
    report_path = tmp_path / "check.json"
    report_path.write_text(checked.stdout, encoding="utf-8")

    # No runs yet: the operator's claim of three is not evidence.
    early = _mapsmith(
        ["plugin", "promote", OPERATION, "--report", str(report_path), "--runs", "3", "--json"], env, author
    )
    assert early.returncode == 2
    assert json.loads(early.stdout)["code"] == "PROMOTION_RUNS_INSUFFICIENT"

    shutil.copy(package / "mapsmith_plugin_demo" / "examples" / "lines.geojson", workspace / "lines.geojson")
    expected_long = {100: 3, 300: 2, 450: 1}
    for threshold, long_count in expected_long.items():
        seen = _run(env, workspace, threshold, f"flagged_{threshold}.gpkg")
        assert seen["maturity"] == "experimental"
        result = seen["result"]
        assert result["answer"] == {"feature_count": 3, "long_count": long_count}
        assert [w["code"] for w in result["warnings"]] == ["EXPERIMENTAL_OPERATION"]
        manifest = json.loads((workspace / f"flagged_{threshold}.gpkg.provenance.json").read_text("utf-8"))
        assert manifest["x-mapsmith:plugin"]["code_sha256"] == report["plugin"]["code_sha256"]
        assert manifest["x-mapsmith:plugin"]["maturity"] == "experimental"

    promoted = _mapsmith(
        ["plugin", "promote", OPERATION, "--report", str(report_path), "--runs", "3", "--json"], env, author
    )
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    record = json.loads(promoted.stdout)
    assert record["verified_runs"]["count"] == 3
    assert record["code_sha256"] == report["plugin"]["code_sha256"]

    # A fresh server on that workspace: stable, the promotion shown, no warning (the clean twin of the runs above).
    after = _run(env, workspace, 200, "flagged_200.gpkg")
    assert after["maturity"] == "stable"
    assert after["promotion"]["by"] == "evidence" and after["promotion"]["verified_runs"] == 3
    assert after["promotion"]["check_report_sha256"] == record["check_report"]["sha256"]
    assert after["result"]["answer"] == {"feature_count": 3, "long_count": 2}  # 500 and 370 reach 200 m; 100 does not
    assert after["result"]["warnings"] == []
