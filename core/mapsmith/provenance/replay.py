"""Replay: re-run the chain recorded for a dataset and compare each output with the recorded bytes.

``replay`` takes the walk of ``mapsmith.provenance.lineage_report`` (``get_lineage``), copies the originals into a
scratch workspace under their recorded paths, re-runs every hop through ``MapSmith.run`` (the path
every operation takes) and compares each output with the bytes the record claims: identical
digests, or the first step that differs and by how much.

This module must never write into the caller's workspace: every run, every copy and every file a
comparison opens is in the scratch folder, which is removed afterwards unless the caller keeps it.
A folder of Parquet parts (``mapsmith.parts``) is copied whole, re-written as a folder (its recorded
``output.path`` ends in ``/``) and compared by its listing digest. The files run_sql's SQL names are placed
at the paths the SQL names them by.

It must never present a replay as identical when only the content matched, never read a failed
check without ``critical`` as non-critical (the walk reports it as undeclared), and never replay on
originals whose bytes are not the recorded ones: it stops and names them instead.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from mapsmith import parts
from mapsmith.errors import ConfigurationError, InputError, MapSmithError
from mapsmith.provenance.compare import _byte_difference, _compare
from mapsmith.provenance.digests import dataset_digest, dataset_files
from mapsmith.provenance.lineage import (
    Hop,
    LineageNode,
)
from mapsmith.provenance.lineage_report import (
    _beside,
    _leaves,
    _lineage,
    _mapping,
    _postorder,
    _record_of,
    _Walk,
    _walk,
    get_lineage,
)
from mapsmith.provenance.reading import json_safe, load_manifest

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

__all__ = ["_byte_difference", "get_lineage", "replay"]


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
        named_in = getattr(contract, "datasets_named_in", None)
        if named_in is not None and argument.partition("[")[0] not in names:
            # A file the text of ``named_in`` names (run_sql's SQL): the call names it by its recorded path,
            # so it must lie there in the scratch workspace, or the re-run would read something else.
            recorded = entry.get("path")
            if not isinstance(recorded, str) or PurePosixPath(recorded).as_posix() != PurePosixPath(path).as_posix():
                raise InputError(
                    f"inputs[{position}] is named inside {named_in}, and its recorded path {recorded!r} could not be "
                    "kept in the scratch workspace",
                    code="REPLAY_CHAIN_BROKEN",
                    evidence={"operation": record.get("operation"), "input": position, "placed_at": path},
                    hint="a replay of SQL needs each file it reads at the path the SQL names; two different "
                    "originals recorded under one path cannot both be there",
                )
            continue
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
    written = load_manifest(root / f"{out_rel}.provenance.json")
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
    try:
        return json_safe(_replay(app, path, layer, keep))
    except MapSmithError as exc:
        # A name with bytes that are not UTF-8, quoted in a refusal, must not make it unwritable.
        exc.message, exc.evidence = json_safe(exc.message), json_safe(exc.evidence)
        exc.args = (exc.message,)
        raise


def _replay(app: MapSmith, path: str, layer: str | None, keep: bool) -> dict[str, Any]:
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
    recorded_path = output.get("path")
    if isinstance(recorded_path, str) and parts.is_folder_output(recorded_path):
        out_rel += "/"  # the trailing slash is the request for a folder of parts (mapsmith.parts)
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
