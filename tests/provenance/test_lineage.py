"""The section 6 lineage walk, on records written by hand beside tiny made-up datasets.

Each dataset is a few arbitrary bytes; each record is a conforming manifest whose digests are the
datasets' real digests, so the walk links them by content exactly as it would in production.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.lineage import (
    LineageNode,
    index_manifests,
    lineage_to_dict,
    walk_lineage,
)
from mapsmith.provenance.validator import validate_manifest

PASS = {"name": "crs_present", "passed": True, "detail": "EPSG:32633"}


def _dataset(folder: Path, name: str, content: bytes) -> Path:
    path = folder / name
    path.write_bytes(content)
    return path


def _record(
    manifests: Path,
    operation: str,
    inputs: list[Path | tuple[Path, str]],
    output: Path,
    *,
    output_layer: str | None = None,
    checks: list[dict[str, Any]] | None = None,
    file_name: str | None = None,
) -> Path:
    """Write a conforming record for ``operation`` reading ``inputs`` and writing ``output``."""
    entries = []
    for item in inputs:
        path, layer = item if isinstance(item, tuple) else (item, None)
        entry: dict[str, Any] = {"path": path.as_posix(), "sha256": dataset_digest(path)}
        if layer is not None:
            entry["layer"] = layer
        entries.append(entry)
    out: dict[str, Any] = {"path": output.as_posix(), "sha256": dataset_digest(output)}
    if output_layer is not None:
        out["layer"] = output_layer
    record = {
        "spec_version": "1.0.0-draft.10",
        "operation": operation,
        "parameters": {},
        "inputs": entries,
        "output": out,
        "engine": {"name": "test-engine", "version": "1.0"},
        "verification": checks if checks is not None else [PASS],
        "started_at": "2026-09-28T10:00:00Z",
        "finished_at": "2026-09-28T10:00:01Z",
    }
    assert validate_manifest(record) == []
    target = manifests / (file_name or f"{output.name}.{operation}.provenance.json")
    target.write_text(json.dumps(record), encoding="utf-8")
    return target


def _only(node: LineageNode) -> Any:
    (hop,) = node.producers
    return hop


def test_a_chain_is_walked_back_to_its_origin(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    c = _dataset(tmp_path, "c.tif", b"C")
    rec_b = _record(tmp_path, "fill_sinks", [a], b)
    rec_c = _record(tmp_path, "slope", [b], c)

    root = walk_lineage(c, [tmp_path])

    assert root.digest == dataset_digest(c) and not root.origin and not root.cycle
    hop_c = _only(root)
    assert (hop_c.record_path, hop_c.operation, hop_c.sound) == (rec_c, "slope", True)
    assert (hop_c.engine.name, hop_c.engine.version) == ("test-engine", "1.0")
    (node_b,) = hop_c.inputs
    assert (node_b.path, node_b.digest) == (b.as_posix(), dataset_digest(b))
    hop_b = _only(node_b)
    assert (hop_b.record_path, hop_b.operation) == (rec_b, "fill_sinks")
    (node_a,) = hop_b.inputs
    assert node_a.origin and node_a.producers == [] and node_a.stopped_because
    assert root.history_sound


def test_a_renamed_copy_still_resolves_by_content(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    _record(tmp_path, "slope", [a], b)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy = _dataset(elsewhere, "renamed.tif", b"B")
    assert _only(walk_lineage(copy, [tmp_path])).operation == "slope"


@pytest.mark.parametrize(
    ("critical", "severity"),
    [({}, "undeclared"), ({"critical": False}, "non-critical"), ({"critical": True}, "critical")],
)
def test_a_hop_with_a_failed_check_is_unsound_whatever_its_severity(
    tmp_path: Path, critical: dict[str, bool], severity: str
) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    failed = {"name": "x-acme:tile_alignment", "passed": False, "detail": "half a cell", **critical}
    _record(tmp_path, "resample", [a], b, checks=[PASS, failed])

    root = walk_lineage(b, [tmp_path])

    hop = _only(root)
    assert hop.sound is False
    assert [(c.name, c.severity, c.detail) for c in hop.failed_checks] == [
        ("x-acme:tile_alignment", severity, "half a cell")
    ]
    assert root.history_sound is False


def test_an_unsound_hop_upstream_makes_the_history_unsound(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    c = _dataset(tmp_path, "c.tif", b"C")
    failed = {"name": "geometry_valid", "passed": False, "detail": "3 invalid"}
    _record(tmp_path, "clip", [a], b, checks=[failed])
    _record(tmp_path, "buffer", [b], c)

    root = walk_lineage(c, [tmp_path])

    assert _only(root).sound is True
    assert root.history_sound is False


def test_a_failure_record_is_unsound_even_when_its_checks_passed(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"partial bytes")
    _record(tmp_path, "slope", [a], b, file_name="b.tif.failed.2.provenance.json")

    hop = _only(walk_lineage(b, [tmp_path]))

    assert hop.failed_run is True and hop.sound is False and hop.failed_checks == []


def test_a_non_conforming_record_is_reported_and_unsound(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    record_path = _record(tmp_path, "slope", [a], b)
    record = json.loads(record_path.read_text(encoding="utf-8"))
    record["verification"] = []  # a found hop with no checks at all is not a verified hop
    record_path.write_text(json.dumps(record), encoding="utf-8")

    hop = _only(walk_lineage(b, [tmp_path]))

    assert hop.sound is False
    assert any("at least one" in problem for problem in hop.record_problems)


def test_a_copy_that_points_at_itself_ends_in_a_cycle(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    copy = _dataset(tmp_path, "copy.tif", b"A")  # byte-identical: output digest == input digest
    _record(tmp_path, "copy", [a], copy)

    root = walk_lineage(copy, [tmp_path])

    hop = _only(root)
    (again,) = hop.inputs
    assert again.digest == root.digest
    assert again.cycle is True and again.producers == [] and again.stopped_because


def test_a_longer_cycle_is_stopped_where_it_repeats(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    _record(tmp_path, "forward", [a], b)
    _record(tmp_path, "back", [b], a)  # b -> a -> b: a loop through two records

    root = walk_lineage(b, [tmp_path])

    node_a = _only(root).inputs[0]
    assert node_a.digest == dataset_digest(a) and not node_a.cycle
    node_b_again = _only(node_a).inputs[0]
    assert node_b_again.digest == root.digest and node_b_again.cycle


def test_a_rejoining_diamond_walks_both_branches_to_the_shared_origin(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    c = _dataset(tmp_path, "c.tif", b"C")
    d = _dataset(tmp_path, "d.tif", b"D")
    _record(tmp_path, "slope", [a], b)
    _record(tmp_path, "aspect", [a], c)
    _record(tmp_path, "combine", [b, c], d)

    root = walk_lineage(d, [tmp_path])

    node_b, node_c = _only(root).inputs
    assert (_only(node_b).operation, _only(node_c).operation) == ("slope", "aspect")
    (a_via_b,) = _only(node_b).inputs
    (a_via_c,) = _only(node_c).inputs
    for node in (a_via_b, a_via_c):  # the second visit is not pruned, and is no cycle
        assert node.digest == dataset_digest(a)
        assert node.origin is True and node.cycle is False


def test_identical_bytes_from_two_runs_list_both_producers(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    first = _record(tmp_path, "slope", [a], b, file_name="run1.provenance.json")
    second = _record(tmp_path, "slope", [a], b, file_name="run2.provenance.json")

    root = walk_lineage(b, [tmp_path])

    assert [hop.record_path for hop in root.producers] == [first, second]


def _two_layer_container(tmp_path: Path) -> tuple[Path, Path, Path, Path, Path]:
    wells = _dataset(tmp_path, "wells.csv", b"wells")
    rivers = _dataset(tmp_path, "rivers.csv", b"rivers")
    gdb = tmp_path / "out.gdb"
    gdb.mkdir()
    (gdb / "a00000009.gdbtable").write_bytes(b"both layers")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    rec_wells = _record(
        manifests,
        "import",
        [wells],
        gdb,
        output_layer="wells",
        file_name="out.gdb.wells.provenance.json",
    )
    rec_rivers = _record(
        manifests,
        "import",
        [rivers],
        gdb,
        output_layer="rivers",
        file_name="out.gdb.rivers.provenance.json",
    )
    return wells, rivers, gdb, rec_wells, rec_rivers


def test_a_container_hop_matches_the_layer_it_was_read_from(tmp_path: Path) -> None:
    wells, _rivers, gdb, rec_wells, rec_rivers = _two_layer_container(tmp_path)
    buffered = _dataset(tmp_path, "wells_500m.gpkg", b"buffered wells")
    _record(tmp_path / "manifests", "buffer", [(gdb, "wells")], buffered)

    root = walk_lineage(buffered, [tmp_path / "manifests"])

    (container,) = _only(root).inputs
    assert container.layer == "wells"
    assert [hop.record_path for hop in container.producers] == [rec_wells]
    assert container.other_layer_records == [rec_rivers]
    (origin,) = _only(container).inputs
    assert origin.digest == dataset_digest(wells) and origin.origin


def test_a_container_walk_starts_from_the_layer_it_is_asked_about(tmp_path: Path) -> None:
    _wells, _rivers, gdb, rec_wells, rec_rivers = _two_layer_container(tmp_path)
    manifests = [tmp_path / "manifests"]
    assert [h.record_path for h in walk_lineage(gdb, manifests, layer="rivers").producers] == [rec_rivers]
    # with no layer named, both records could be the producer, and both are shown
    assert {h.record_path for h in walk_lineage(gdb, manifests).producers} == {
        rec_wells,
        rec_rivers,
    }
    lakes = walk_lineage(gdb, manifests, layer="lakes")
    assert lakes.origin and lakes.producers == []
    assert set(lakes.other_layer_records) == {rec_wells, rec_rivers}
    assert "other layers" in (lakes.stopped_because or "")


def test_the_index_skips_records_without_output_and_reports_unreadable_ones(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    good = _record(tmp_path, "slope", [a], b)
    no_output = json.loads(good.read_text(encoding="utf-8"))
    del no_output["output"]
    (tmp_path / "early.provenance.json").write_text(json.dumps(no_output), encoding="utf-8")
    (tmp_path / "broken.provenance.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "list.provenance.json").write_text("[]", encoding="utf-8")
    nested = tmp_path / "deeper" / "still"
    nested.mkdir(parents=True)
    (nested / "unrelated.plan.json").write_text("{}", encoding="utf-8")

    index = index_manifests([tmp_path, tmp_path / "deeper"])  # overlapping folders count once

    assert [r.path for r in index.by_digest[dataset_digest(b)]] == [good]
    assert index.without_output == [tmp_path / "early.provenance.json"]
    assert len(index.unreadable) == 2
    root = walk_lineage(b, [tmp_path])
    assert len(root.index_warnings) == 2


def test_lineage_to_dict_is_plain_json(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    b = _dataset(tmp_path, "b.tif", b"B")
    failed = {"name": "crs_matches", "passed": False, "detail": "EPSG:4326, expected EPSG:32633"}
    _record(tmp_path, "reproject", [a], b, checks=[failed])

    out = json.loads(json.dumps(lineage_to_dict(walk_lineage(b, [tmp_path]))))

    (producer,) = out["producers"]
    assert producer["operation"] == "reproject"
    assert producer["sound"] is False and out["history_sound"] is False
    assert producer["failed_checks"] == [{"name": "crs_matches", "severity": "undeclared", "detail": failed["detail"]}]
    assert producer["engine"] == {"name": "test-engine", "version": "1.0"}
    assert producer["inputs"][0]["origin"] is True
    assert "\\" not in producer["record"]


def test_a_folder_that_does_not_exist_is_reported_not_ignored(tmp_path: Path) -> None:
    a = _dataset(tmp_path, "a.tif", b"A")
    root = walk_lineage(a, [tmp_path / "manifets"])
    assert root.origin
    assert root.index_warnings == [f"{(tmp_path / 'manifets').as_posix()}: not a folder"]
