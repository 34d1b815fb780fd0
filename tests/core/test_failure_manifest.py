"""A failed run leaves a record that says so, beside every dataset the failure leaves (spec §4).

For every dataset-writing operation in the catalog, a failure is injected after the output's bytes
reach the disk: once in the write itself, once after the rename into place. Each sabotage counts
that it fired, and the test fails if it did not: a sabotage that never fires proves nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog_args import build_arguments
from mapsmith.contracts import load_builtin_contracts
from mapsmith.errors import EngineError, OutputError
from mapsmith.fetch import NETWORK_OPERATIONS
from mapsmith.provenance.digests import dataset_digest

# The fetching operations write what a server sends, not through io.write_layer, and need a server and an
# allow-list: tests/fetch/test_fetch_dataset.py sabotages their rename against a real local server.
WRITERS = sorted(
    n
    for n, c in load_builtin_contracts().items()
    if c.writes_dataset and c.status == "available" and n not in NETWORK_OPERATIONS
)


class Sabotage(OSError):
    pass


def _failure_records(workspace: Path, name: str = "out.gpkg") -> list[dict]:
    return [json.loads(p.read_text("utf-8")) for p in sorted(workspace.glob(f"{name}.failed*.provenance.json"))]


def _output_name(contract) -> str:
    return "out.tif" if contract.output_kind == "dataset:raster" else "out.gpkg"


def _assert_says_incomplete(record: dict) -> None:
    last = record["verification"][-1]
    assert last["name"] == "x-mapsmith:run_completed" and last["passed"] is False and last["critical"] is True
    assert "Sabotage" in last["detail"] or "sabotage" in last["detail"]


@pytest.mark.parametrize("operation", WRITERS)
def test_failure_inside_the_write_leaves_no_dataset_and_a_failure_record(app, workspace, monkeypatch, operation):
    from mapsmith_opensource import io, raster_io

    contract = app.host.contracts[operation]
    name = _output_name(contract)
    fired = []
    if contract.output_kind == "dataset:raster":
        real_commit = raster_io._commit_bytes

        def commit_then_fail(path, produce):
            real_commit(path, produce)
            assert path.exists()
            fired.append(path)
            raise Sabotage("sabotage: disk failed after the write")

        monkeypatch.setattr(raster_io, "_commit_bytes", commit_then_fail)
    else:
        real_write = io.write_layer

        def write_then_fail(gdf, path, layer=None):
            real_write(gdf, path, layer)
            assert path.exists()  # the bytes reached the disk
            fired.append(path)
            raise Sabotage("sabotage: disk failed after the write")

        monkeypatch.setattr(io, "write_layer", write_then_fail)
    args = build_arguments(contract, workspace)
    with pytest.raises(EngineError):
        app.run(operation, args)
    assert fired, "the sabotage never fired"
    assert not (workspace / name).exists()
    assert not (workspace / f"{name}.provenance.json").exists()
    assert not [p for p in workspace.iterdir() if p.name.startswith(".")], "temporary files left behind"
    (record,) = _failure_records(workspace, name)
    _assert_says_incomplete(record)
    assert record["operation"] == operation and "output" not in record
    assert record["x-mapsmith:error"]["code"] == "ENGINE_FAILED"


@pytest.mark.parametrize("operation", WRITERS)
def test_failure_after_the_rename_records_the_bytes_it_left(app, workspace, monkeypatch, operation):
    from mapsmith import runner

    real_replace = runner._replace
    fired = []

    def replace_then_fail(source, target):
        real_replace(source, target)
        fired.append(target)
        raise Sabotage("sabotage: crashed after the rename")

    monkeypatch.setattr(runner, "_replace", replace_then_fail)
    contract = app.host.contracts[operation]
    name = _output_name(contract)
    args = build_arguments(contract, workspace)
    with pytest.raises(OutputError) as info:
        app.run(operation, args)
    # The rename's failure reaches the caller as a coded error that keeps the cause
    assert info.value.code == "OUTPUT_WRITE_FAILED" and isinstance(info.value.__cause__, Sabotage)
    assert fired, "the sabotage never fired"
    out = workspace / name
    assert out.exists() and not (workspace / f"{name}.provenance.json").exists()
    (record,) = _failure_records(workspace, name)
    _assert_says_incomplete(record)
    # the dataset left behind is described by the failure record: a lineage walk finds this run
    assert record["output"]["sha256"] == dataset_digest(out)


def test_a_failure_never_replaces_an_earlier_good_record(app, workspace, monkeypatch):
    from mapsmith import runner

    args = build_arguments(app.host.contracts["buffer_layer"], workspace)
    app.run("buffer_layer", args)
    good = (workspace / "out.gpkg.provenance.json").read_bytes()

    def fail(source, target):
        raise Sabotage("sabotage: rename refused")

    monkeypatch.setattr(runner, "_replace", fail)
    for distance in (7, 8):
        with pytest.raises(OutputError) as info:
            app.run("buffer_layer", {**args, "distance_meters": distance, "overwrite": True})
        assert info.value.code == "OUTPUT_WRITE_FAILED" and isinstance(info.value.__cause__, Sabotage)
    assert (workspace / "out.gpkg.provenance.json").read_bytes() == good
    # the second failure is numbered; neither replaced the other
    first = json.loads((workspace / "out.gpkg.failed.provenance.json").read_text("utf-8"))
    second = json.loads((workspace / "out.gpkg.failed.2.provenance.json").read_text("utf-8"))
    assert (first["parameters"]["distance_meters"], second["parameters"]["distance_meters"]) == (7, 8)
    assert len(_failure_records(workspace)) == 2
