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


def check_workspace_manifests(ws: Path) -> None:
    """Every manifest in ``ws`` conforms and sits beside what it describes.

    A plain dataset's record is ``<dataset>.provenance.json`` and matches its bytes. A layer's record sits
    beside its container as ``<container>.<layer>.provenance.json`` (manifest spec 3.1) and its digest covers
    the whole container (3.3): when a later call adds another layer, an earlier record's digest no longer
    matches although its layer was not touched (6). So only the newest record of a container must match.
    """
    from mapsmith.provenance.digests import dataset_digest

    suffix = ".provenance.json"
    newest: dict[Path, tuple[str, str]] = {}
    for manifest in ws.rglob("*" + suffix):
        record = json.loads(manifest.read_text("utf-8"))
        errors = published_schema_errors(record)
        assert not errors, f"{manifest.name} does not conform: {errors}"
        if ".failed." in manifest.name:
            continue
        layer = record["output"].get("layer")
        # an .xlsx sheet is named as a layer too, in a record of its own file's name
        tail = f".{layer}{suffix}" if layer and manifest.name.endswith(f".{layer}{suffix}") else suffix
        dataset = manifest.with_name(manifest.name[: -len(tail)])
        assert dataset.exists(), f"{manifest.name} describes a dataset that is not there"
        if tail != suffix:
            from mapsmith.deliverables import gpkg_layers

            assert layer in gpkg_layers(dataset), f"{dataset.name} has no layer {layer}"
        if dataset not in newest or record["finished_at"] > newest[dataset][0]:
            newest[dataset] = (record["finished_at"], record["output"]["sha256"])
    for dataset, (_, digest) in newest.items():
        assert digest == dataset_digest(dataset), f"{dataset.name} differs from its newest record"


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """A fresh workspace; afterwards every manifest in it must conform (``check_workspace_manifests``)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    yield ws
    check_workspace_manifests(ws)


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
