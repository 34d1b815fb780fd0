"""The workspace of the multi-layer tests: the root fixture's manifest checks, with the rule for layers.

A layer's record sits beside its container as ``<container>.<layer>.provenance.json`` (manifest spec
§3.1) and its digest covers the whole container (§3.3): when a later call adds another layer, the
earlier record's digest no longer matches although its layer was not touched (§6). So every record
must conform, name a container that exists and a layer it holds, and the newest record of each
container must match the container's bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import published_schema_errors

SUFFIX = ".provenance.json"


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    from mapsmith.deliverables import gpkg_layers
    from mapsmith.provenance.digests import dataset_digest

    ws = tmp_path / "ws"
    ws.mkdir()
    yield ws
    newest: dict[Path, tuple[str, str]] = {}
    for manifest in ws.rglob("*" + SUFFIX):
        record = json.loads(manifest.read_text("utf-8"))
        errors = published_schema_errors(record)
        assert not errors, f"{manifest.name} does not conform: {errors}"
        if ".failed." in manifest.name:
            continue
        layer = record["output"].get("layer")
        tail = f".{layer}{SUFFIX}" if layer else SUFFIX
        assert manifest.name.endswith(tail), f"{manifest.name} does not carry its layer's name"
        dataset = manifest.with_name(manifest.name[: -len(tail)])
        assert dataset.exists(), f"{manifest.name} describes a dataset that is not there"
        if layer:
            assert layer in gpkg_layers(dataset), f"{dataset.name} has no layer {layer}"
        if dataset not in newest or record["finished_at"] > newest[dataset][0]:
            newest[dataset] = (record["finished_at"], record["output"]["sha256"])
    for dataset, (_, digest) in newest.items():
        assert digest == dataset_digest(dataset), f"{dataset.name} differs from its newest record"
