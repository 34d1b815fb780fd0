"""Lineage an agent can read: the walk of a dataset's records, flattened into hops, originals and stops.

``get_lineage`` hashes a dataset, finds the record that claims those exact bytes as its output and
walks every input digest back to original data (``walk_lineage``, spec section 6), then flattens
the walk: the hops from the originals to the final file, the failed checks met on the way, and
where and why each branch stops. ``mapsmith.provenance.replay`` re-runs the same walk.

This module must never read a check without ``critical`` as non-critical (the walk reports it as
undeclared), never read a file outside the workspace (recorded paths outside it are reported, not
opened), and never return a reply a JSON encoder cannot write (names are passed through ``json_safe``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mapsmith.errors import InputError, MapSmithError, PathError
from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.lineage import (
    MANIFEST_SUFFIX,
    Hop,
    LineageNode,
    ManifestIndex,
    index_manifests,
    lineage_to_dict,
    walk_lineage,
)
from mapsmith.provenance.reading import ManifestUnreadable, json_safe, load_manifest

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

__all__ = ["get_lineage"]

StopKind = Literal[
    "original",
    "original_changed",
    "original_missing",
    "original_unreachable",
    "no_record",
    "record_no_longer_matches",
    "other_layer_only",
    "cycle",
    "no_digest",
]
# Stops that end a branch at intact original data; every other kind is a hole in the history.
_INTACT = frozenset({"original"})


# -- shared: resolving paths and locating bytes ------------------------------------------------


def _resolve_local(app: MapSmith, path: str, argument: str) -> Path:
    """The dataset ``path`` names in the workspace; the workspace's own errors for paths outside it."""
    resolved = app.workspace.resolve(path, argument=argument)
    if not isinstance(resolved, Path):
        raise InputError(
            "lineage and replay read local datasets only",
            code="REMOTE_INPUT_UNSUPPORTED",
            evidence={"argument": argument, "path": path},
            hint="pass a path inside the workspace",
        )
    if not resolved.exists():
        raise InputError(
            f"no dataset at {path}",
            code="INPUT_NOT_FOUND",
            evidence={"argument": argument, "path": path},
            hint="pass the output_path a MapSmith operation wrote",
        )
    return resolved


@dataclass
class _Locator:
    """Where recorded paths are now, and which of them still hold given bytes (digests cached)."""

    app: MapSmith
    _digests: dict[Path, str | None]

    def place(self, recorded: str | None) -> tuple[str | None, Path | None]:
        """(label as the workspace shows it, local path) of a path a record wrote down."""
        if recorded is None:
            return None, None
        try:
            resolved = self.app.workspace.resolve(recorded, argument="path")
        except (PathError, MapSmithError):
            return recorded, None  # outside the workspace (or a refused form): never read
        if not isinstance(resolved, Path):
            return recorded, None
        return self.app.workspace.relative_label(resolved), resolved

    def digest(self, path: Path) -> str | None:
        if path not in self._digests:
            try:
                self._digests[path] = dataset_digest(path) if path.exists() else None
            except MapSmithError:
                self._digests[path] = None
        return self._digests[path]

    def find(self, digest: str, candidates: list[Path | None]) -> Path | None:
        """The first candidate that holds exactly ``digest``: the bytes a record claims, by content."""
        for path in candidates:
            if path is not None and self.digest(path) == digest:
                return path
        return None


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _beside(record_path: Path) -> Path:
    """The dataset a record sits beside (``x.gpkg.provenance.json`` -> ``x.gpkg``)."""
    return record_path.with_name(record_path.name[: -len(MANIFEST_SUFFIX)])


def _record_of(index: ManifestIndex, node: LineageNode, hop: Hop) -> dict[str, Any]:
    for candidate in index.by_digest.get(node.digest, []):
        if candidate.path == hop.record_path:
            return candidate.record
    return {}  # unreachable: every hop comes from the index


def _choose(node: LineageNode) -> Hop | None:
    """The producer a summary follows: a sound one first, then one that ran to completion."""
    if not node.producers:
        return None
    return sorted(node.producers, key=lambda hop: (not hop.sound, hop.failed_run))[0]


# -- the walk, flattened ----------------------------------------------------------------------


@dataclass
class _Walk:
    app: MapSmith
    root: LineageNode
    index: ManifestIndex
    locator: _Locator
    root_path: Path
    layer: str | None


def _walk(app: MapSmith, path: str, layer: str | None) -> _Walk:
    resolved = _resolve_local(app, path, "path")
    search = [app.workspace.root] if app.workspace.root else [resolved.parent]
    index = index_manifests(search)
    root = walk_lineage(resolved, search, layer=layer, index=index)
    return _Walk(app, root, index, _Locator(app, {}), resolved, layer)


def _postorder(walk: _Walk) -> Iterator[tuple[LineageNode, Hop]]:
    """(node, chosen producer) with every input's hop before the hop that read it; each record once."""
    seen: set[Path] = set()

    def visit(node: LineageNode) -> Iterator[tuple[LineageNode, Hop]]:
        hop = _choose(node)
        if hop is None:
            return
        for child in hop.inputs:
            yield from visit(child)
        if hop.record_path not in seen:
            seen.add(hop.record_path)
            yield node, hop

    yield from visit(walk.root)


def _leaves(walk: _Walk) -> Iterator[tuple[LineageNode, Hop | None]]:
    """Every node where a followed branch ends, with the hop that read it (None for the root)."""

    def visit(node: LineageNode, reader: Hop | None) -> Iterator[tuple[LineageNode, Hop | None]]:
        hop = _choose(node)
        if hop is None:
            yield node, reader
            return
        for child in hop.inputs:
            yield from visit(child, hop)

    yield from visit(walk.root, None)


def _stop(walk: _Walk, node: LineageNode, reader: Hop | None) -> dict[str, Any]:
    """Where one branch ends, and why, in the words an agent acts on."""
    locator = walk.locator
    label: str | None
    local: Path | None
    if reader is None:
        label, local = walk.app.workspace.relative_label(walk.root_path), walk.root_path
    else:
        label, local = locator.place(node.path)
    out: dict[str, Any] = {"path": label, "sha256": node.digest or None, "layer": node.layer}
    if reader is not None:
        out["read_by"] = {
            "operation": reader.operation,
            "record": walk.app.workspace.relative_label(reader.record_path),
        }
    kind: StopKind
    if node.cycle:
        kind, why = "cycle", node.stopped_because or "these bytes repeat an ancestor on this path"
    elif not node.digest:
        kind, why = "no_digest", node.stopped_because or "the record carries no sha256 for this input"
    elif node.other_layer_records:
        kind = "other_layer_only"
        why = node.stopped_because or "only records for other layers of this container claim these bytes"
        out["other_layer_records"] = [walk.app.workspace.relative_label(p) for p in node.other_layer_records]
    elif reader is None and node.fetched_from is None:
        kind, why = _root_stop(walk, out)
    elif local is None:
        kind = "original_unreachable"
        why = (
            "no record claims these bytes, so this is original data; its recorded path is outside the "
            "workspace, so whether it still holds them was not checked"
        )
    else:
        now = locator.digest(local)
        if now == node.digest:
            kind = "original"
            why = f"original data: no record claims these bytes, and {label} still holds them"
        elif now is None:
            kind = "original_missing"
            why = f"original data: no record claims these bytes, and there is no dataset at {label} any more"
        else:
            kind = "original_changed"
            why = (
                f"original data: no record claims these bytes, and {label} now holds other bytes "
                f"(sha256 {now}): the original changed after the chain ran"
            )
            out["sha256_now"] = now
    if node.fetched_from is not None and kind.startswith("original"):
        out["fetched_from"] = node.fetched_from
        if node.fetch_record is not None:
            out["fetch_record"] = walk.app.workspace.relative_label(node.fetch_record)
        still = {
            "original": f"{label} still holds those bytes",
            "original_missing": f"there is no dataset at {label} any more: put those bytes back (sha256 above)",
            "original_changed": f"{label} now holds other bytes: put the fetched ones back (sha256 above)",
        }.get(kind, why)
        why = (
            f"original data fetched from {node.fetched_from} (record {out.get('fetch_record')}); {still}; "
            "replay never fetches again"
        )
    out["kind"] = kind
    out["reason"] = why
    return out


def _root_stop(walk: _Walk, out: dict[str, Any]) -> tuple[StopKind, str]:
    """Why no record claims the file asked about: original data, or bytes changed after their record."""

    beside = walk.root_path.with_name(walk.root_path.name + MANIFEST_SUFFIX)
    claimed: Any = None
    if beside.exists():
        try:
            claimed = _mapping(load_manifest(beside).get("output")).get("sha256")
        except ManifestUnreadable:
            claimed = None
    if isinstance(claimed, str):
        out["record"] = walk.app.workspace.relative_label(beside)
        out["record_claims_sha256"] = claimed
        return "record_no_longer_matches", (
            f"the record beside it claims sha256 {claimed}, but the file holds other bytes and no record "
            "claims them: it was changed after it was written"
        )
    return "no_record", "no record in the workspace claims these bytes: original data, not written by MapSmith"


def _hop_summary(walk: _Walk, node: LineageNode, hop: Hop, position: int) -> dict[str, Any]:
    app, locator = walk.app, walk.locator
    record = _record_of(walk.index, node, hop)
    output = _mapping(record.get("output"))
    recorded_label, recorded_local = locator.place(output.get("path"))
    node_label, node_local = (
        (app.workspace.relative_label(walk.root_path), walk.root_path)
        if node is walk.root
        else locator.place(node.path)
    )
    found = locator.find(node.digest, [recorded_local, _beside(hop.record_path), node_local])
    if recorded_local is not None and locator.digest(recorded_local) == node.digest:
        output_now = "matches"
    elif recorded_local is not None and recorded_local.exists():
        output_now = "changed"
    else:
        output_now = "missing"
    inputs = []
    recorded_inputs = record.get("inputs")
    for child, entry in zip(hop.inputs, recorded_inputs if isinstance(recorded_inputs, list) else [], strict=False):
        label, _local = locator.place(child.path)
        producer = _choose(child)
        inputs.append(
            {
                "argument": entry.get("argument") if isinstance(entry, dict) else None,
                "path": label,
                "sha256": child.digest or None,
                "layer": child.layer,
                "produced_by": None if producer is None else app.workspace.relative_label(producer.record_path),
            }
        )
    return {
        "position": position,
        "operation": hop.operation,
        "output_path": recorded_label,
        "record": app.workspace.relative_label(hop.record_path),
        "sha256": node.digest,
        "layer": node.layer,
        # The bytes at the record's output path now: "matches", "changed" or "missing" (renamed or deleted).
        "output_at_recorded_path": output_now,
        "found_at": app.workspace.relative_label(found) if found is not None else None,
        "read_as": node_label if node is not walk.root else None,
        "inputs": inputs,
        "sound": hop.sound,
        "failed_run": hop.failed_run,
        "failed_checks": [{"name": c.name, "severity": c.severity, "detail": c.detail} for c in hop.failed_checks],
        "record_problems": list(hop.record_problems),
        "engine": None if hop.engine is None else {"name": hop.engine.name, "version": hop.engine.version},
        "other_producers": [
            app.workspace.relative_label(other.record_path) for other in node.producers if other is not hop
        ],
    }


def _relabel(app: MapSmith, tree: dict[str, Any], locator: _Locator, root_label: str | None) -> dict[str, Any]:
    """Record and dataset paths in the tree as the workspace shows them."""
    if root_label is not None:
        tree["path"] = root_label
    else:
        tree["path"] = locator.place(tree.get("path"))[0]
    for hop in tree.get("producers", []):
        hop["record"] = app.workspace.relative_label(Path(hop["record"]))
        for child in hop.get("inputs", []):
            _relabel(app, child, locator, None)
    if "other_layer_records" in tree:
        tree["other_layer_records"] = [app.workspace.relative_label(Path(p)) for p in tree["other_layer_records"]]
    return tree


def _lineage(walk: _Walk) -> dict[str, Any]:
    app = walk.app
    root_label = app.workspace.relative_label(walk.root_path)
    hops = [_hop_summary(walk, node, hop, i + 1) for i, (node, hop) in enumerate(_postorder(walk))]
    stops = [_stop(walk, node, reader) for node, reader in _leaves(walk)]
    originals: list[dict[str, Any]] = []
    for stop in stops:
        if stop["kind"].startswith("original") and not any(
            (o["path"], o["sha256"]) == (stop["path"], stop["sha256"]) for o in originals
        ):
            originals.append(
                {
                    "path": stop["path"],
                    "sha256": stop["sha256"],
                    "layer": stop["layer"],
                    "status": {"original": "present"}.get(stop["kind"], stop["kind"].removeprefix("original_")),
                }
            )
    failed_checks = [
        {**check, "operation": hop["operation"], "record": hop["record"]}
        for hop in hops
        for check in hop["failed_checks"]
    ]
    warnings = list(walk.root.index_warnings)
    if walk.index.without_output:
        warnings.append(
            f"{len(walk.index.without_output)} record(s) carry no output digest and cannot be reached by content: "
            + ", ".join(app.workspace.relative_label(p) for p in walk.index.without_output[:5])
        )
    return {
        "path": root_label,
        "sha256": walk.root.digest,
        "layer": walk.layer,
        "found": bool(walk.root.producers),
        # Every branch ends at original data that is still there, with no cycle or hole.
        "complete": bool(walk.root.producers) and all(s["kind"] in _INTACT for s in stops),
        "history_sound": walk.root.history_sound,
        "hops": hops,
        "originals": originals,
        "failed_checks": failed_checks,
        "stops": stops,
        "warnings": warnings,
        "tree": _relabel(app, lineage_to_dict(walk.root), walk.locator, root_label),
    }


def get_lineage(app: MapSmith, path: str, *, layer: str | None = None) -> dict[str, Any]:
    """The lineage of the dataset at ``path`` (relative to the workspace), found by content.

    Returns ``hops`` (each record met, in dependency order from the originals to ``path``: operation,
    the output path it recorded, the record, whether its bytes are still at that path, its inputs and
    failed checks), ``originals`` (the data no record claims, with ``status`` present / changed /
    missing / unreachable), ``failed_checks`` (every failed check on the way, with the severity its
    producer declared: critical, non-critical or undeclared), ``stops`` (each place a branch ends:
    ``kind`` and ``reason``), ``complete``, ``history_sound`` and the full ``tree``. ``layer`` names
    the layer when ``path`` is a multi-layer container. Paths outside the workspace raise the
    workspace's ``PathError``; a missing dataset raises ``InputError`` code ``INPUT_NOT_FOUND``.
    """
    # json_safe: a file name with bytes that are not UTF-8 must not make the reply unwritable.
    return json_safe(_lineage(_walk(app, path, layer)))
