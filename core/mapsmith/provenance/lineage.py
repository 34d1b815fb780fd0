"""Walk a dataset's lineage back through provenance records, by content (spec section 6).

Hash the dataset, find every record whose ``output.sha256`` is that digest (the operations that
produced these exact bytes), then do the same for each of their ``inputs[].sha256``, until a digest
no record claims. No field points at another record; the link is the content.

This module must never present a hop as sound when its record says a check failed (a failed check
that declares no ``critical`` is of undeclared severity, never "non-critical"), never present a
record for another layer of a container as the producer of this layer, never loop on a record that
produced its own input, and never prune a branch because another branch already visited the same
dataset: rejoining lineages are ordinary. Where the walk stops, it says why.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.reading import ManifestUnreadable, display_name, load_manifest
from mapsmith.provenance.validator import validate_manifest

__all__ = [
    "Engine",
    "FailedCheck",
    "Hop",
    "IndexedRecord",
    "LineageNode",
    "ManifestIndex",
    "index_manifests",
    "lineage_to_dict",
    "walk_lineage",
]

Severity = Literal["critical", "non-critical", "undeclared"]

MANIFEST_SUFFIX = ".provenance.json"
# `<output>.failed.provenance.json`, and `<output>.failed.<n>.provenance.json` when a failure
# record already existed: a run that did not complete, whatever its checks say.
_FAILED_RECORD = re.compile(r".*\.failed(\.[0-9]+)?\.provenance\.json")


@dataclass(frozen=True)
class FailedCheck:
    """One ``verification[]`` entry that did not pass, with the severity its producer declared."""

    name: str
    severity: Severity
    detail: str | None = None


@dataclass(frozen=True)
class Engine:
    name: str | None
    version: str | None


@dataclass
class Hop:
    """One record that claims to have produced a node's bytes, and the inputs it read.

    ``sound`` is False when any check failed (whatever its severity), when the record is a
    failure record (``*.failed.provenance.json``), or when the record does not conform to the
    specification (``record_problems``): each is a history nobody should repeat unawares.
    """

    record_path: Path
    operation: str | None
    engine: Engine | None
    sound: bool
    failed_run: bool
    failed_checks: list[FailedCheck]
    record_problems: list[str]
    inputs: list[LineageNode] = field(default_factory=list)


@dataclass
class LineageNode:
    """A dataset met on the walk: its digest, where the referring record put it, who made it.

    ``producers`` holds one ``Hop`` per record claiming these bytes (for this layer): usually one,
    several when identical bytes were produced more than once. A node ends its branch when it is
    an ``origin`` (no record claims it) or a ``cycle`` (it repeats an ancestor on the current
    path); ``stopped_because`` says which, in words.
    """

    digest: str
    path: str | None
    layer: str | None = None
    producers: list[Hop] = field(default_factory=list)
    origin: bool = False
    cycle: bool = False
    stopped_because: str | None = None
    # Records that claim these bytes for another layer of the same container: found, not used.
    other_layer_records: list[Path] = field(default_factory=list)
    # An origin brought in from a URL (fetch_dataset): the URL and the record that says so. The
    # bytes themselves are the original, so a replay re-uses them and never fetches again.
    fetched_from: str | None = None
    fetch_record: Path | None = None
    # Set on the root only: records under the searched folders that could not be read, any of
    # which might be a missing link.
    index_warnings: list[str] = field(default_factory=list)

    @property
    def history_sound(self) -> bool:
        """True when every hop from here back to the origins is sound."""
        return all(hop.sound and all(n.history_sound for n in hop.inputs) for hop in self.producers)


@dataclass(frozen=True)
class IndexedRecord:
    path: Path
    record: dict[str, Any]


@dataclass
class ManifestIndex:
    """Every readable record under some folders, keyed by the ``output.sha256`` it claims."""

    by_digest: dict[str, list[IndexedRecord]] = field(default_factory=dict)
    without_output: list[Path] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def _manifest_files(folder: Path) -> Iterable[Path]:
    # os.walk rather than rglob: it does not follow symbolic links to folders, so a link back up
    # the tree cannot make the index loop or count a record twice.
    for root, _dirs, files in os.walk(folder):
        for name in files:
            if name.endswith(MANIFEST_SUFFIX):
                yield Path(root, name)


def index_manifests(manifest_dirs: Iterable[Path | str]) -> ManifestIndex:
    """Read every ``*.provenance.json`` (failure records included) under ``manifest_dirs``.

    A record without an ``output.sha256`` cannot be reached by content and is only counted; a
    file that ``load_manifest`` refuses (not one JSON object, too large, too deeply nested) or whose
    fields have the wrong JSON types is listed in ``unreadable`` rather than silently ignored, and
    never stops the other records from being read.
    """
    index = ManifestIndex()
    seen: set[Path] = set()
    for folder in map(Path, manifest_dirs):
        if not folder.is_dir():
            # Said, not skipped: a mistyped folder would otherwise make every dataset an origin.
            index.unreadable.append(f"{folder.as_posix()}: not a folder")
            continue
        for file in sorted(_manifest_files(folder)):
            resolved = file.resolve()
            if resolved in seen:  # overlapping folders must not double a producer
                continue
            seen.add(resolved)
            try:
                record = load_manifest(file)
            except ManifestUnreadable as exc:
                # One bad record is reported and skipped; it never stops the others being read.
                index.unreadable.append(f"{display_name(file.as_posix())}: {exc.evidence.get('reason', exc.message)}")
                continue
            wrong = _wrongly_shaped(record)
            if wrong is not None:
                index.unreadable.append(f"{display_name(file.as_posix())}: {wrong}; skipped")
                continue
            output = record.get("output")
            digest = output.get("sha256") if isinstance(output, dict) else None
            if not isinstance(digest, str):
                index.without_output.append(file)
                continue
            index.by_digest.setdefault(digest, []).append(IndexedRecord(file, record))
    return index


# The fields the walk and its readers index into, and the JSON type each must have when present.
_SHAPES: dict[str, tuple[type, ...]] = {
    "output": (dict,),
    "inputs": (list,),
    "verification": (list,),
    "engine": (dict,),
    "parameters": (dict,),
    "operation": (str,),
}


def _wrongly_shaped(record: dict[str, Any]) -> str | None:
    """Why ``record`` cannot be walked (a field of the wrong JSON type), or None.

    Not conformance (the validator reports that, and a non-conforming record is still shown as
    such): only the shapes the code indexes into, so a hostile record cannot raise in the walk.
    """
    for name, types in _SHAPES.items():
        if name in record and not isinstance(record[name], types):
            return f"{name} is a JSON {type(record[name]).__name__}, not {' or '.join(t.__name__ for t in types)}"
    for name in ("inputs", "verification"):
        for position, entry in enumerate(record.get(name) or []):
            if not isinstance(entry, dict):
                return f"{name}[{position}] is a JSON {type(entry).__name__}, not an object"
    return None


def _failed_checks(record: dict[str, Any]) -> list[FailedCheck]:
    entries = record.get("verification")
    failed: list[FailedCheck] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("passed") is True:
            continue
        # Only an explicit boolean declares severity. Absence is the producer saying nothing,
        # and reading silence as "not serious" is the one reading the producer did not give.
        critical = entry.get("critical")
        severity: Severity = "critical" if critical is True else "non-critical" if critical is False else "undeclared"
        name = entry.get("name")
        detail = entry.get("detail")
        failed.append(
            FailedCheck(
                name=name if isinstance(name, str) else repr(name),
                severity=severity,
                detail=detail if isinstance(detail, str) else None,
            )
        )
    return failed


def _engine(record: dict[str, Any]) -> Engine | None:
    engine = record.get("engine")
    if not isinstance(engine, dict):
        return None
    name, version = engine.get("name"), engine.get("version")
    return Engine(
        name=name if isinstance(name, str) else None,
        version=version if isinstance(version, str) else None,
    )


def _claims_layer(record: dict[str, Any], layer: str | None) -> bool:
    """Whether ``record`` may have produced ``layer`` of the bytes it claims (section 6).

    A container's digest covers every layer, so a record naming another layer is not this
    layer's producer. A record naming no layer, or a walk that knows none, cannot exclude it.
    """
    output_layer = record["output"].get("layer")
    return layer is None or output_layer is None or output_layer == layer


def _repeats(key: tuple[str, str | None], ancestors: list[tuple[str, str | None]]) -> bool:
    """Same digest, and the same layer or one of them unknown: following it would go round."""
    digest, layer = key
    return any(d == digest and (layer is None or a is None or a == layer) for d, a in ancestors)


def _walk(
    digest: str,
    path: str | None,
    layer: str | None,
    index: ManifestIndex,
    ancestors: list[tuple[str, str | None]],
) -> LineageNode:
    node = LineageNode(digest=digest, path=path, layer=layer)
    if _repeats((digest, layer), ancestors):
        node.cycle = True
        node.stopped_because = (
            "these bytes are also an ancestor on this path (an operation whose output equals its "
            "input, such as a copy); following them again would never end"
        )
        return node

    candidates = index.by_digest.get(digest, [])
    matching = [c for c in candidates if _claims_layer(c.record, layer)]
    node.other_layer_records = [c.path for c in candidates if not _claims_layer(c.record, layer)]
    if not matching:
        node.origin = True
        node.stopped_because = (
            f"no record claims these bytes for layer {layer!r}; records for other layers of the "
            "same container exist and are not its producer"
            if node.other_layer_records
            else "no record under the searched folders claims these bytes"
        )
        return node

    fetch = next((c for c in matching if _fetched_url(c.record) is not None), None)
    if fetch is not None:
        node.origin = True
        node.fetched_from, node.fetch_record = _fetched_url(fetch.record), fetch.path
        node.stopped_because = (
            f"original data, fetched from {node.fetched_from} (record {fetch.path.name}): the bytes are the "
            "original; replay re-uses them by digest and never fetches again"
        )
        return node

    # Only the current path: a global visited set would silently drop a rejoining branch.
    below = [*ancestors, (digest, layer)]
    for candidate in matching:
        record = candidate.record
        problems = validate_manifest(record)
        failed = _failed_checks(record)
        failed_run = _FAILED_RECORD.fullmatch(candidate.path.name) is not None
        operation = record.get("operation")
        hop = Hop(
            record_path=candidate.path,
            operation=operation if isinstance(operation, str) else None,
            engine=_engine(record),
            sound=not (failed or failed_run or problems),
            failed_run=failed_run,
            failed_checks=failed,
            record_problems=problems,
        )
        inputs = record.get("inputs")
        for position, entry in enumerate(inputs if isinstance(inputs, list) else []):
            hop.inputs.append(_walk_input(entry, position, index, below))
        node.producers.append(hop)
    return node


def _fetched_url(record: dict[str, Any]) -> str | None:
    """The URL a record fetched its output from, when its every input is a fetched URL (fetch_dataset)."""
    inputs = record.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        return None
    if all(isinstance(i, dict) and i.get("x-mapsmith:fetched") is True for i in inputs):
        url = inputs[0].get("path")
        return url if isinstance(url, str) else None
    return None


def _walk_input(
    entry: object, position: int, index: ManifestIndex, ancestors: list[tuple[str, str | None]]
) -> LineageNode:
    entry = entry if isinstance(entry, dict) else {}
    digest, path, layer = entry.get("sha256"), entry.get("path"), entry.get("layer")
    path = path if isinstance(path, str) else None
    layer = layer if isinstance(layer, str) else None
    if not isinstance(digest, str):
        # Kept in the tree rather than dropped, so the reader sees the history has a hole here.
        return LineageNode(
            digest="",
            path=path,
            layer=layer,
            origin=True,
            stopped_because=f"inputs[{position}] of the record carries no sha256 to follow",
        )
    return _walk(digest, path, layer, index, ancestors)


def walk_lineage(
    path: Path | str,
    manifest_dirs: Iterable[Path | str],
    *,
    layer: str | None = None,
    index: ManifestIndex | None = None,
) -> LineageNode:
    """The lineage of the dataset at ``path``, from the records under ``manifest_dirs``.

    ``path`` is digested with the section 3.3 rules (``dataset_digest``; its ``InputError``s
    propagate). ``layer`` names the layer when ``path`` is a container, so that only records for
    that layer are taken as its producers. Pass a prebuilt ``index`` to walk several datasets
    over one scan of the folders.
    """
    dataset = Path(path)
    digest = dataset_digest(dataset)
    if index is None:
        index = index_manifests(manifest_dirs)
    root = _walk(digest, dataset.as_posix(), layer, index, [])
    root.index_warnings = list(index.unreadable)
    return root


def lineage_to_dict(node: LineageNode) -> dict[str, Any]:
    """The walk as plain JSON values (paths with ``/``), for MCP replies and reports."""
    out: dict[str, Any] = {
        "digest": node.digest,
        "path": None if node.path is None else display_name(node.path),
        "layer": node.layer,
        "origin": node.origin,
        "cycle": node.cycle,
        "history_sound": node.history_sound,
        "stopped_because": node.stopped_because,
        "producers": [
            {
                "record": display_name(hop.record_path.as_posix()),
                "operation": hop.operation,
                "engine": None if hop.engine is None else {"name": hop.engine.name, "version": hop.engine.version},
                "sound": hop.sound,
                "failed_run": hop.failed_run,
                "failed_checks": [
                    {"name": c.name, "severity": c.severity, "detail": c.detail} for c in hop.failed_checks
                ],
                "record_problems": list(hop.record_problems),
                "inputs": [lineage_to_dict(child) for child in hop.inputs],
            }
            for hop in node.producers
        ],
    }
    if node.other_layer_records:
        out["other_layer_records"] = [p.as_posix() for p in node.other_layer_records]
    if node.fetched_from is not None:
        out["fetched_from"] = node.fetched_from
    if node.index_warnings:
        out["index_warnings"] = list(node.index_warnings)
    return out
