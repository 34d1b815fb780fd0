"""Lineage an agent can read, and replay: re-run the chain recorded for a dataset and compare.

``get_lineage`` hashes a dataset, finds the record that claims those exact bytes as its output and
walks every input digest back to original data (``walk_lineage``, spec section 6), then flattens
the walk: the hops from the originals to the final file, the failed checks met on the way, and
where and why each branch stops. ``replay`` takes the same walk, copies the originals into a
scratch workspace under their recorded paths, re-runs every hop through ``MapSmith.run`` (the path
every operation takes) and compares each output with the bytes the record claims: identical
digests, or the first step that differs and by how much.

This module must never write into the caller's workspace: every run, every copy and every file a
comparison opens is in the scratch folder, which is removed afterwards unless the caller keeps it.
It must never present a replay as identical when only the content matched, never read a failed
check without ``critical`` as non-critical (the walk reports it as undeclared), and never replay on
originals whose bytes are not the recorded ones: it stops and names them instead.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from mapsmith.errors import ConfigurationError, InputError, MapSmithError, PathError
from mapsmith.provenance.digests import dataset_digest, dataset_files
from mapsmith.provenance.lineage import (
    MANIFEST_SUFFIX,
    Hop,
    LineageNode,
    ManifestIndex,
    index_manifests,
    lineage_to_dict,
    walk_lineage,
)

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

__all__ = ["get_lineage", "replay"]

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
_GPKG_TIMESTAMP_COLUMN = "gpkg_contents.last_change"
# The runner writes to ``.<stem>.tmp-<8 hex><suffix>`` and renames; a writer that stores that name
# (a FlatGeobuf header, a GeoJSON "name") makes every run's bytes differ there.
_TEMP_NAME = re.compile(rb"\.tmp-[0-9a-f]{8}")
# Absolute and relative tolerance under which two floating-point totals are reported as equal.
_REL_TOLERANCE = 1e-12


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
    elif reader is None:
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
    out["kind"] = kind
    out["reason"] = why
    return out


def _root_stop(walk: _Walk, out: dict[str, Any]) -> tuple[StopKind, str]:
    """Why no record claims the file asked about: original data, or bytes changed after their record."""
    import json

    beside = walk.root_path.with_name(walk.root_path.name + MANIFEST_SUFFIX)
    claimed: Any = None
    if beside.exists():
        try:
            claimed = json.loads(beside.read_text("utf-8")).get("output", {}).get("sha256")
        except (OSError, ValueError, AttributeError):
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
    for child, entry in zip(hop.inputs, record.get("inputs") or [], strict=False):
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
    return _lineage(_walk(app, path, layer))


# -- replay -----------------------------------------------------------------------------------


@dataclass
class _Scratch:
    """The scratch folder: a workspace for the re-runs and a folder for copies of recorded bytes."""

    root: Path
    workspace: Path
    recorded: Path
    taken: dict[str, str]  # relative path in the scratch workspace -> the digest placed there

    def claim(self, preferred: str, digest: str) -> str:
        """A free relative path for ``digest``: the recorded one when it is free, else a numbered folder."""
        rel = preferred if not PurePosixPath(preferred).is_absolute() else PurePosixPath(preferred).name
        rel = PurePosixPath(rel).as_posix()
        if ".." in PurePosixPath(rel).parts:
            rel = PurePosixPath(rel).name
        n = 1
        candidate = rel
        while candidate in self.taken and self.taken[candidate] != digest:
            n += 1
            candidate = f"_replay_{n}/{rel}"
        self.taken[candidate] = digest
        (self.workspace / candidate).parent.mkdir(parents=True, exist_ok=True)
        return candidate


def _copy_dataset(source: Path, target: Path) -> None:
    """Copy a dataset with every file its digest covers (a shapefile's members, a .gdb tree)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
        return
    if source.suffix.lower() == ".shp":
        stem = target.name[: -len(source.suffix)]
        for member in dataset_files(source):
            shutil.copy2(member, target.with_name(stem + member.name[len(source.stem) :]))
        return
    shutil.copy2(source, target)


def _scratch_apps(app: MapSmith, scratch: _Scratch) -> Callable[[str | None], MapSmith]:
    """One MapSmith per stack, on the scratch workspace, that never falls back to another stack."""
    from mapsmith.app import MapSmith

    cache: dict[str, MapSmith] = {}

    def get(stack: str | None) -> MapSmith:
        key = stack or ""
        if key not in cache:
            env = {
                k: v
                for k, v in app.environ.items()
                if k not in ("MAPSMITH_WORKSPACE", "MAPSMITH_ALLOW_REMOTE", "MAPSMITH_FALLBACK_STACK")
            }
            env["MAPSMITH_WORKSPACE"] = str(scratch.workspace)
            if stack:
                # The recorded engine's stack, substitute or not: a replay on another engine would be
                # a different experiment, so it fails rather than quietly substituting.
                env["MAPSMITH_STACK"] = stack
            cache[key] = MapSmith(env)
        return cache[key]

    return get


def _arguments(contract: Any, record: dict[str, Any], placed: dict[str, str]) -> dict[str, Any]:
    """The call that produced ``record``: its contract parameters, its inputs by argument, no engine notes."""
    names = {p.name for p in contract.parameters}
    parameters = _mapping(record.get("parameters"))
    arguments: dict[str, Any] = {k: v for k, v in parameters.items() if k in names}
    lists: dict[str, dict[int, str]] = {}
    for position, entry in enumerate(record.get("inputs") or []):
        argument = entry.get("argument") if isinstance(entry, dict) else None
        if not isinstance(argument, str):
            raise InputError(
                f"inputs[{position}] of the record names no argument, so the call cannot be rebuilt",
                code="REPLAY_CHAIN_BROKEN",
                evidence={"operation": record.get("operation"), "input": position},
                hint="only records that name each input's argument can be replayed",
            )
        path = placed[entry["sha256"]]
        if "[" in argument:
            name, _, rest = argument.partition("[")
            lists.setdefault(name, {})[int(rest.rstrip("]"))] = path
        else:
            arguments[argument] = path
    for name, items in lists.items():
        arguments[name] = [items[i] for i in sorted(items)]
    return arguments


EXPORT_MAP = "export_map"  # a service tool, not a catalog operation: its page is rebuilt by mapview itself
_EXPORT_MAP_PARAMETERS = ("max_features_per_layer", "simplify_meters", "background")


def _replay_export_map(
    app: MapSmith, record: dict[str, Any], placed: dict[str, str], out_rel: str, step: dict[str, Any]
) -> Any:
    """Rebuild an exported map page from the record (the page is deterministic for the same inputs)."""
    from types import SimpleNamespace

    from mapsmith import mapview

    contract = SimpleNamespace(parameters=[SimpleNamespace(name=n) for n in _EXPORT_MAP_PARAMETERS])
    arguments = {k: v for k, v in _arguments(contract, record, placed).items() if v is not None}
    step["arguments"] = {**arguments, "output_path": out_rel}
    paths = arguments.pop("paths", [])
    mapview.export_map(app, paths, out_rel, False, **arguments)
    root = app.workspace.root
    assert root is not None  # the scratch service is always confined to its scratch folder
    written = json.loads((root / f"{out_rel}.provenance.json").read_text("utf-8"))
    return SimpleNamespace(engine=written["engine"])


def replay(app: MapSmith, path: str, *, layer: str | None = None, keep: bool = False) -> dict[str, Any]:
    """Re-run the chain recorded for the dataset at ``path`` in a scratch folder, and compare.

    The originals are found at their recorded paths and must still hold the recorded bytes, else
    ``InputError`` names them all, with code ``REPLAY_ORIGINAL_CHANGED`` (every one of them holds
    other bytes) or ``REPLAY_ORIGINAL_MISSING`` (some are gone or outside the workspace);
    ``REPLAY_NO_RECORD`` when no record claims ``path``, ``REPLAY_CHAIN_BROKEN`` when the walk has a
    hole (a cycle, an input without a digest, only records for another layer), and
    ``ConfigurationError`` ``REPLAY_SCRATCH_IN_WORKSPACE`` when the temporary folder lies inside
    the workspace. Each hop is re-run in dependency order on the stack its record names, with the record's
    contract parameters and its inputs, and its output digest compared with the recorded one.

    Returns ``identical`` (every digest equal), ``verdict`` (``identical``, ``content_identical``:
    some bytes differ but every dataset's content is equal, ``different`` or ``failed``), ``steps``
    (per hop: arguments as re-run, both digests, ``result`` and, where bytes differ, a content
    comparison and an account of the byte difference), ``first_difference`` (the first step whose
    content differs, with its comparison) and ``scratch`` (the folder, when ``keep``; else removed).
    """
    walk = _walk(app, path, layer)
    lineage = _lineage(walk)
    if not walk.root.producers:
        stop = lineage["stops"][0]
        raise InputError(
            f"nothing to replay: {stop['reason']}",
            code="REPLAY_NO_RECORD",
            evidence={"path": lineage["path"], "sha256": lineage["sha256"], "stop": stop},
            hint="replay re-runs the records that produced a dataset; pass a file a MapSmith operation wrote",
        )
    holes = [s for s in lineage["stops"] if not s["kind"].startswith("original")]
    if holes:
        raise InputError(
            f"the lineage of {lineage['path']} has a hole at {holes[0]['path']}: {holes[0]['reason']}",
            code="REPLAY_CHAIN_BROKEN",
            evidence={"path": lineage["path"], "stops": holes},
            hint="get_lineage shows the walk; only a chain that reaches original data on every branch can be re-run",
        )
    bad = [s for s in lineage["stops"] if s["kind"] != "original"]
    if bad:
        changed = [s for s in bad if s["kind"] == "original_changed"]
        raise InputError(
            "original data not as recorded: "
            + ", ".join(f"{s['path']} ({s['kind'].removeprefix('original_')})" for s in bad),
            code="REPLAY_ORIGINAL_CHANGED" if len(changed) == len(bad) else "REPLAY_ORIGINAL_MISSING",
            evidence={"path": lineage["path"], "originals": bad},
            hint="put the original bytes back at their recorded path (each sha256 is in the evidence); "
            "a replay on other data would compare nothing",
        )

    base = Path(tempfile.mkdtemp(prefix="mapsmith-replay-")).resolve()
    root = app.workspace.root
    if root is not None and (base.is_relative_to(root) or root.is_relative_to(base)):
        shutil.rmtree(base, ignore_errors=True)
        raise ConfigurationError(
            f"the scratch folder {base} would be inside the workspace {root}; replay never writes there",
            code="REPLAY_SCRATCH_IN_WORKSPACE",
            evidence={"scratch": str(base), "workspace_root": str(root)},
            hint="set TMPDIR to a folder outside the workspace",
        )
    scratch = _Scratch(base, base / "workspace", base / "recorded", {})
    scratch.workspace.mkdir()
    scratch.recorded.mkdir()
    try:
        result = _replay_in(walk, lineage, scratch)
    except BaseException:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
        raise
    if keep:
        result["scratch"] = str(base)
    else:
        shutil.rmtree(base, ignore_errors=True)
        result["scratch"] = None
    return result


def _replay_in(walk: _Walk, lineage: dict[str, Any], scratch: _Scratch) -> dict[str, Any]:
    app, locator = walk.app, walk.locator
    placed: dict[str, str] = {}  # recorded digest -> where the scratch workspace holds those bytes
    for node, _reader in _leaves(walk):
        if node.digest in placed:
            continue
        label, local = locator.place(node.path)
        assert local is not None and label is not None  # checked by replay(): every original is intact
        rel = scratch.claim(label, node.digest)
        _copy_dataset(local, scratch.workspace / rel)
        placed[node.digest] = rel

    apps = _scratch_apps(app, scratch)
    steps: list[dict[str, Any]] = []
    verdict = "identical"
    first_difference: dict[str, Any] | None = None
    for position, (node, hop) in enumerate(_postorder(walk), start=1):
        record = _record_of(walk.index, node, hop)
        step = _replay_step(walk, scratch, apps, placed, position, node, hop, record)
        steps.append(step)
        if step["result"] == "failed":
            verdict = "failed"
            break
        if step["result"] == "content_differs" and first_difference is None:
            verdict = "different"
            first_difference = {
                k: step[k] for k in ("position", "operation", "record", "output_path", "comparison", "arguments")
            }
        elif step["result"] == "bytes_differ" and verdict == "identical":
            verdict = "content_identical"
        elif step["result"] == "not_compared" and verdict in ("identical", "content_identical"):
            verdict = "different"  # digests differ and the recorded bytes are gone: no claim of sameness
    return {
        "path": lineage["path"],
        "sha256": lineage["sha256"],
        "identical": verdict == "identical",
        "verdict": verdict,
        "summary": _summary(verdict, steps, first_difference),
        "steps": steps,
        "first_difference": first_difference,
        "originals": lineage["originals"],
        "failed_checks_recorded": lineage["failed_checks"],
    }


def _summary(verdict: str, steps: list[dict[str, Any]], first: dict[str, Any] | None) -> str:
    n = len(steps)
    if verdict == "identical":
        return f"all {n} step(s) re-ran to byte-identical outputs"
    if verdict == "content_identical":
        differing = [s for s in steps if s.get("byte_difference")]
        causes = sorted({c for s in differing for c in s["byte_difference"]["causes"]})
        unexplained = sum(1 for s in differing if not s["byte_difference"]["explained"])
        return (
            f"all {n} step(s) re-ran to the same content; {len(differing)} differ in bytes"
            + (f", only in {', '.join(causes)}" if causes and not unexplained else "")
            + (f" ({unexplained} with no known cause)" if unexplained else "")
        )
    if verdict == "failed":
        last = steps[-1]
        return f"step {last['position']} ({last['operation']}) failed on replay: {last['error'].get('message')}"
    if first is not None:
        return f"step {first['position']} ({first['operation']}) is the first whose content differs"
    return "an output's digest differs and the recorded bytes were not found to compare its content"


def _replay_step(
    walk: _Walk,
    scratch: _Scratch,
    apps: Callable[[str | None], MapSmith],
    placed: dict[str, str],
    position: int,
    node: LineageNode,
    hop: Hop,
    record: dict[str, Any],
) -> dict[str, Any]:
    app, locator = walk.app, walk.locator
    output = _mapping(record.get("output"))
    choice = record.get("x-mapsmith:engine_choice")
    stack = choice.get("stack") if isinstance(choice, dict) and isinstance(choice.get("stack"), str) else None
    recorded_label, recorded_local = locator.place(output.get("path"))
    step: dict[str, Any] = {
        "position": position,
        "operation": hop.operation,
        "record": app.workspace.relative_label(hop.record_path),
        "output_path": recorded_label,
        "stack": stack,
        "recorded_sha256": node.digest,
        "engine_recorded": record.get("engine"),
    }
    out_rel = scratch.claim(recorded_label or f"step_{position}", f"replay:{position}")
    try:
        scratch_app = apps(stack)
        if hop.operation == EXPORT_MAP:
            run: Any = _replay_export_map(scratch_app, record, placed, out_rel, step)
        else:
            contract = scratch_app.router.contract(str(hop.operation))
            arguments = _arguments(contract, record, placed)
            arguments["output_path"] = out_rel
            step["arguments"] = arguments
            run = scratch_app.run(str(hop.operation), arguments)
    except MapSmithError as exc:
        step.update(result="failed", error=exc.to_dict())
        return step
    except Exception as exc:  # a replay reports an engine crash as a step result, not a traceback
        step.update(result="failed", error={"code": "REPLAY_STEP_CRASHED", "message": f"{type(exc).__name__}: {exc}"})
        return step
    produced = scratch.workspace / out_rel
    placed[node.digest] = out_rel  # downstream steps read what the replay made, as the chain would
    step["replayed_sha256"] = dataset_digest(produced)
    step["engine_replayed"] = {k: v for k, v in run.engine.items() if k != "x-mapsmith:components"}
    recorded_engine = _mapping(record.get("engine"))
    step["engine_changed"] = (recorded_engine.get("name"), recorded_engine.get("version")) != (
        run.engine.get("name"),
        run.engine.get("version"),
    )
    if step["replayed_sha256"] == node.digest:
        step["result"] = "identical"
        return step

    kept = locator.find(
        node.digest,
        [
            recorded_local,
            _beside(hop.record_path),
            walk.root_path if node is walk.root else locator.place(node.path)[1],
        ],
    )
    if kept is None:
        step["result"] = "not_compared"
        step["comparison"] = None
        step["note"] = "the recorded bytes are no longer in the workspace, so only the digests were compared"
        return step
    copy = scratch.recorded / str(position) / kept.name
    _copy_dataset(kept, copy)  # compared from a copy: nothing in the real workspace is opened by an engine
    comparison = _compare(app, copy, produced, output.get("layer") if isinstance(output.get("layer"), str) else None)
    step["comparison"] = comparison
    if comparison.get("content_identical"):
        step["result"] = "bytes_differ"
        step["byte_difference"] = _byte_difference(copy, produced)
    else:
        step["result"] = "content_differs"
    return step


# -- comparing two datasets -------------------------------------------------------------------


def _compare(app: MapSmith, recorded: Path, replayed: Path, layer: str | None) -> dict[str, Any]:
    io = app.dataset_io("opensource")
    kind = io.inspect(recorded, layer).kind
    if kind == "raster":
        return _compare_rasters(app, recorded, replayed)
    return _compare_vectors(recorded, replayed, layer)


def _read_vector(path: Path, layer: str | None) -> Any:
    import geopandas as gpd

    if path.suffix.lower() in (".parquet", ".geoparquet"):
        return gpd.read_parquet(path)
    return gpd.read_file(path, layer=layer, engine="pyogrio")


def _pair(a: float, b: float) -> dict[str, float]:
    return {"recorded": a, "replayed": b, "difference": b - a}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOLERANCE, abs_tol=0.0)


def _compare_vectors(recorded: Path, replayed: Path, layer: str | None) -> dict[str, Any]:
    import numpy as np
    import pandas as pd
    import shapely

    a, b = _read_vector(recorded, layer), _read_vector(replayed, layer)
    unit = None
    crs_equal = (a.crs is None and b.crs is None) or (a.crs is not None and b.crs is not None and a.crs.equals(b.crs))
    if a.crs is not None:
        unit = a.crs.axis_info[0].unit_name if a.crs.axis_info else None
    # shapely directly: geopandas warns about planar measures in a geographic CRS, and planar in the
    # dataset's own units (labelled) is exactly what a comparison of two files wants.
    area_a, area_b = (float(np.nansum(shapely.area(df.geometry.to_numpy()))) for df in (a, b))
    length_a, length_b = (float(np.nansum(shapely.length(df.geometry.to_numpy()))) for df in (a, b))
    same_count = len(a) == len(b)
    geometry_rows = None
    if same_count:
        wkb_a = a.geometry.to_wkb().to_numpy()
        wkb_b = b.geometry.to_wkb().to_numpy()
        geometry_rows = int(sum(x != y for x, y in zip(wkb_a, wkb_b, strict=True)))
    fields_a = [c for c in a.columns if c != a.geometry.name]
    fields_b = [c for c in b.columns if c != b.geometry.name]
    changed: dict[str, Any] = {}
    for name in (f for f in fields_a if f in fields_b):
        col_a, col_b = a[name], b[name]
        numeric = pd.api.types.is_numeric_dtype(col_a) and pd.api.types.is_numeric_dtype(col_b)
        entry: dict[str, Any] = {}
        if same_count:
            equal = (col_a.to_numpy() == col_b.to_numpy()) | (col_a.isna().to_numpy() & col_b.isna().to_numpy())
            rows = int((~np.asarray(equal, dtype=bool)).sum())
            if rows:
                entry["rows_differing"] = rows
                if numeric:
                    entry["max_abs_difference"] = float(
                        np.nanmax(np.abs(col_b.to_numpy(float) - col_a.to_numpy(float)))
                    )
        if numeric:
            sa, sb = float(col_a.sum()), float(col_b.sum())
            if entry or not _close(sa, sb):
                entry["sum"] = _pair(sa, sb)
        elif not same_count and sorted(map(str, col_a)) != sorted(map(str, col_b)):
            entry["values_differ"] = True
        if entry:
            changed[name] = entry
    identical = same_count and crs_equal and geometry_rows == 0 and fields_a == fields_b and not changed
    area_unit = f"square {unit}" if unit else "square CRS units"
    return {
        "kind": "vector",
        "content_identical": bool(identical),
        "feature_count": {"recorded": len(a), "replayed": len(b), "difference": len(b) - len(a)},
        "crs_equal": bool(crs_equal),
        "crs": None if a.crs is None else a.crs.to_string(),
        # Planar, in the dataset's own CRS: a comparison of two files, not a ground measurement.
        "total_area": {**_pair(area_a, area_b), "unit": area_unit, "planar_in_dataset_crs": True},
        "total_length": {**_pair(length_a, length_b), "unit": unit or "CRS units", "planar_in_dataset_crs": True},
        "geometries_differing": geometry_rows,
        "fields": {
            "added": [f for f in fields_b if f not in fields_a],
            "removed": [f for f in fields_a if f not in fields_b],
            "order_changed": fields_a != fields_b and sorted(fields_a) == sorted(fields_b),
            "changed": changed,
        },
    }


def _compare_rasters(app: MapSmith, recorded: Path, replayed: Path) -> dict[str, Any]:
    io = app.dataset_io("opensource")
    ga = dict(io.inspect(recorded, None, validity=True).grid or {})
    gb = dict(io.inspect(replayed, None, validity=True).grid or {})
    header = {}
    for key in ("width", "height", "count", "dtypes", "nodata", "transform"):
        if ga.get(key) != gb.get(key):
            header[key] = {"recorded": ga.get(key), "replayed": gb.get(key)}
    bands = []
    for i, (sa, sb) in enumerate(zip(ga.get("statistics") or [], gb.get("statistics") or [], strict=False), 1):
        band: dict[str, Any] = {"band": i}
        for stat in ("min", "max", "mean"):
            x, y = sa.get(stat), sb.get(stat)
            band[stat] = {"recorded": x, "replayed": y, "difference": None if x is None or y is None else y - x}
        bands.append(band)
    cells = _cells_differing(recorded, replayed) if not header else None
    return {
        "kind": "raster",
        "content_identical": not header and cells is not None and cells["cells_differing"] == 0,
        "width": {"recorded": ga.get("width"), "replayed": gb.get("width")},
        "height": {"recorded": ga.get("height"), "replayed": gb.get("height")},
        "header_differences": header,
        "bands": bands,
        "cells": cells,
    }


def _cells_differing(recorded: Path, replayed: Path) -> dict[str, Any] | None:
    """Cell by cell, nodata masks included; None when rasterio is not installed (header compared only)."""
    try:
        import numpy as np
        import rasterio
    except ImportError:
        return None
    differing, largest = 0, 0.0
    with rasterio.open(recorded) as ra, rasterio.open(replayed) as rb:
        for band in range(1, ra.count + 1):
            x, y = ra.read(band, masked=True), rb.read(band, masked=True)
            mx, my = np.ma.getmaskarray(x), np.ma.getmaskarray(y)
            both = ~mx & ~my
            values_differ = both & (x.filled(0) != y.filled(0))
            differing += int((mx != my).sum() + values_differ.sum())
            if values_differ.any():
                delta = np.abs(y.filled(0).astype("float64") - x.filled(0).astype("float64"))[values_differ]
                largest = max(largest, float(delta.max()))
    return {"cells_differing": differing, "max_abs_difference": largest}


def _byte_difference(recorded: Path, replayed: Path) -> dict[str, Any]:
    """Where two files with equal content differ in bytes, and whether known causes account for every byte.

    Known causes: ``gpkg_last_change`` (GDAL stamps the write time into ``gpkg_contents.last_change``)
    and ``temporary_layer_name`` (a layer name stored in the file that is the runner's temporary file
    name, ``.<stem>.tmp-<8 hex>``, random per run). Differences are ``explained`` only when every
    differing byte lies inside one of them.
    """
    if recorded.is_dir() or replayed.is_dir() or recorded.suffix.lower() == ".shp":
        return {
            "explained": False,
            "causes": [],
            "explanation": "a multi-file dataset differs in bytes; its member files were not compared",
        }
    import numpy as np

    a, b = recorded.read_bytes(), replayed.read_bytes()
    common = min(len(a), len(b))
    offsets = np.flatnonzero(
        np.frombuffer(a, dtype=np.uint8, count=common) != np.frombuffer(b, dtype=np.uint8, count=common)
    ).tolist()
    out: dict[str, Any] = {
        "size": {"recorded": len(a), "replayed": len(b)},
        "bytes_differing": len(offsets) + abs(len(a) - len(b)),
        "first_offset": offsets[0] if offsets else common,
    }
    spans: dict[str, list[tuple[int, int]]] = {}
    notes: dict[str, str] = {}
    if recorded.suffix.lower() == ".gpkg":
        stamps_a, stamps_b = _gpkg_last_change(recorded), _gpkg_last_change(replayed)
        out["gpkg_last_change"] = {"recorded": stamps_a, "replayed": stamps_b}
        spans["gpkg_last_change"] = [s for t in stamps_a for s in _spans(a, t.encode())] + [
            s for t in stamps_b for s in _spans(b, t.encode())
        ]
        notes["gpkg_last_change"] = (
            f"the GeoPackage write time in {_GPKG_TIMESTAMP_COLUMN} ({', '.join(stamps_a)} recorded, "
            f"{', '.join(stamps_b)} replayed): GDAL stamps the wall clock there unless OGR_CURRENT_DATE is set"
        )
    names = [m.span() for m in _TEMP_NAME.finditer(a)] + [m.span() for m in _TEMP_NAME.finditer(b)]
    if names:
        spans["temporary_layer_name"] = names
        notes["temporary_layer_name"] = (
            "the layer name stored in the file, which is the runner's temporary file name (random per run)"
        )
    causes = [cause for cause, found in spans.items() if any(start <= i < end for i in offsets for start, end in found)]
    covered = len(a) == len(b) and all(
        any(start <= i < end for found in spans.values() for start, end in found) for i in offsets
    )
    out["causes"] = causes if covered else []
    out["explained"] = covered
    if covered:
        out["explanation"] = "every differing byte is inside " + "; and ".join(notes[c] for c in causes)
    else:
        out["explanation"] = f"{out['bytes_differing']} byte(s) differ with no known cause found (content equal)"
    return out


def _gpkg_last_change(path: Path) -> list[str]:
    """Every ``gpkg_contents.last_change`` of a GeoPackage (a copy in the scratch folder), read-only."""
    try:
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        return [str(row[0]) for row in con.execute("SELECT last_change FROM gpkg_contents") if row[0]]
    except sqlite3.Error:
        return []
    finally:
        con.close()


def _spans(data: bytes, needle: bytes) -> list[tuple[int, int]]:
    spans, start = [], data.find(needle)
    while start != -1:
        spans.append((start, start + len(needle)))
        start = data.find(needle, start + 1)
    return spans
