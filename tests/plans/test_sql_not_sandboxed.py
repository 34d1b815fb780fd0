"""A run_sql step is flagged SQL_NOT_SANDBOXED when no workspace is set, and only then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mapsmith.plans.findings import FINDING_CODES
from mapsmith.plans.validate import validate_plan

PLAN = {
    "goal": "areas by SQL",
    "steps": [
        {"id": "q", "operation": "run_sql", "arguments": {"sql": "SELECT 1", "output_path": "q.gpkg"}},
    ],
}


def test_unconfined_run_sql_step_is_flagged(tmp_path: Path, monkeypatch: Any) -> None:
    from mapsmith.app import MapSmith

    monkeypatch.chdir(tmp_path)
    result = validate_plan(MapSmith({}), PLAN)
    codes = [(f.code, f.step, f.argument) for f in result.findings]
    assert ("SQL_NOT_SANDBOXED", "q", "sql") in codes
    assert result.valid is False
    assert "SQL_NOT_SANDBOXED" in FINDING_CODES


def test_confined_run_sql_step_is_not_flagged(app: Any) -> None:
    result = validate_plan(app, PLAN)
    assert "SQL_NOT_SANDBOXED" not in [f.code for f in result.findings]
