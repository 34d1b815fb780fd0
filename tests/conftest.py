"""Shared fixtures: a workspace per test, a MapSmith service on it, and manifest validation.

Every ``*.provenance.json`` a test leaves in its workspace is validated, at teardown, against the
published JSON Schema in ``../shared/manifest-spec`` (and the timestamp-order rule), so no test can
produce a non-conforming record unnoticed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SPEC_SCHEMA = SHARED / "manifest-spec" / "schema" / "manifest-v1.schema.json"

# Tests about MapSmith's own catalog must not change when QGIS is installed: its ~341 algorithms
# join the catalog only in tests that ask (tests/stacks/test_qgis_*.py set this to 1).
os.environ.setdefault("MAPSMITH_QGIS_ALGORITHMS", "0")


def published_schema_errors(record: dict[str, Any]) -> list[str]:
    """Validate with the published schema itself plus the order rule. Where ``shared/`` is not beside
    this checkout, the packaged copy of the same schema (byte-identical, checked in test_validator)."""
    if not SPEC_SCHEMA.exists():
        from mapsmith.provenance.validator import schema_errors

        return schema_errors(record)
    from jsonschema import Draft202012Validator

    schema = json.loads(SPEC_SCHEMA.read_text("utf-8"))
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(record)]
    try:
        start = datetime.fromisoformat(record["started_at"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(record["finished_at"].replace("Z", "+00:00"))
        if end < start:
            errors.append("finished_at precedes started_at")
    except (KeyError, ValueError) as exc:
        errors.append(f"timestamps unreadable: {exc}")
    return errors


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    yield ws
    for manifest in ws.rglob("*.provenance.json"):
        record = json.loads(manifest.read_text("utf-8"))
        errors = published_schema_errors(record)
        if not manifest.name.endswith(".failed.provenance.json") and ".failed." not in manifest.name:
            # a good record sits beside the bytes it describes
            from mapsmith.provenance.digests import dataset_digest

            dataset = manifest.with_name(manifest.name[: -len(".provenance.json")])
            assert dataset.exists(), f"{manifest.name} describes a dataset that is not there"
            assert record["output"]["sha256"] == dataset_digest(dataset), f"{dataset.name} differs from its record"
        assert not errors, f"{manifest.name} does not conform: {errors}"


@pytest.fixture
def make_app(workspace: Path) -> Callable[..., Any]:
    from mapsmith.app import MapSmith

    def make(**env: str) -> MapSmith:
        environ = {"MAPSMITH_WORKSPACE": str(workspace), **env}
        return MapSmith(environ)

    return make


@pytest.fixture
def app(make_app: Callable[..., Any]) -> Any:
    return make_app()
