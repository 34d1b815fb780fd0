"""The records of one run: the provenance manifest of a written output, and the failure record.

The runner calls ``output_record`` once an output's bytes are final (before they are renamed into
place) and ``write_failure`` when a run ends without a good record. Both describe what ran, on which
inputs (by digest), with which engine and checks, and, for an operation a third-party plugin brought,
which code (``x-mapsmith:plugin``: distribution, version, code digest, maturity when it ran).
``warn_if_experimental`` adds the EXPERIMENTAL_OPERATION warning the result and the record carry.

This module must never write a failure record over an earlier record (``failed_manifest_path``
numbers them), and never claim bytes for a failed run unless the bytes at the output path are exactly
those the run produced, read under the output's lock.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import MapSmithError
from mapsmith.outputs import output_lock
from mapsmith.provenance.digests import dataset_digest, digest_rule
from mapsmith.provenance.manifest import base_record, failed_manifest_path, posix_label, utc_now, write_manifest

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from mapsmith.app import MapSmith
    from mapsmith.registry import DatasetInfo, OperationImpl
    from mapsmith.runner import RunContext


class DigestsAhead:
    """The inputs' digests, hashed on a thread of their own while the engine works: the manifest records them
    once the output is final, and hashing them only then kept a core idle through a one-thread engine (DuckDB's
    COPY of buffers) and put the hashing on the run's clock after it. The records ask ``digest``, which waits for
    the thread; an input it was not given (one an engine adds to ``ctx.paths`` as it runs) is hashed by the caller
    (run_sql's SQL-named paths are added by its validation, before the thread starts). A digest error
    is raised where the record asks for it, as when the record hashed the input itself."""

    def __init__(self, digest: Callable[[Path], str], paths: Mapping[str, Path]) -> None:
        self._paths = dict(paths)
        self._found: dict[str, str | Exception] = {}
        self._thread = threading.Thread(target=self._hash, args=(digest,), name="mapsmith-input-digests", daemon=True)
        self._thread.start()

    def _hash(self, digest: Callable[[Path], str]) -> None:
        for name, path in self._paths.items():
            try:
                self._found[name] = digest(path)
            except Exception as exc:  # raised to the record that asks for this input
                self._found[name] = exc

    def digest(self, name: str, path: Path) -> str | None:
        """``path``'s digest when this hashed it as input ``name``, else None."""
        if self._paths.get(name) != path:
            return None
        self._thread.join()
        found = self._found[name]
        if isinstance(found, Exception):
            raise found
        return found


def _input_records(app: MapSmith, ctx: RunContext) -> list[dict[str, Any]]:
    records = []
    ahead = ctx.digests_ahead
    for name, path in ctx.paths.items():
        info = ctx.inputs.get(name)
        digest = ahead.digest(name, path) if ahead is not None else None
        rec: dict[str, Any] = {
            "path": posix_label(ctx.given_paths[name]),
            "sha256": digest if digest is not None else app.digest(path),
            "crs": info.crs_label if info else None,
            "argument": name,
        }
        if ctx.layers.get(name) is not None:
            rec["layer"] = ctx.layers[name]
        if ctx.input_environment.get(name):
            rec["environment"] = dict(ctx.input_environment[name])
        rule = digest_rule(path)
        if rule is not None:
            rec["x-mapsmith:digest_rule"] = rule  # not a rule of manifest-v1 (§3.3): named, never passed off as one
        records.append(rec)
    records.extend(dict(remote) for remote in ctx.remote_inputs)
    return records


def engine_record(ctx: RunContext, choice: dict[str, Any]) -> dict[str, Any]:
    engine: dict[str, Any] = {"name": ctx.engine_name or choice["engine"], "version": ctx.engine_version or "unknown"}
    if ctx.engine_components:
        engine["x-mapsmith:components"] = ctx.engine_components
    return engine


def warn_if_experimental(ctx: RunContext, impl: OperationImpl) -> None:
    """Warn (EXPERIMENTAL_OPERATION) when the chosen engine is an experimental plugin's; called once per run."""
    if impl.maturity == "stable":
        return
    origin = impl.origin or {}
    who = f" from plugin {origin.get('distribution', '?')} {origin.get('version', '')}".rstrip() if origin else ""
    ctx.warn(
        "EXPERIMENTAL_OPERATION",
        f"{ctx.contract.name}{who} is experimental: it has not been promoted on recorded evidence, so its answer "
        "is less proven than a stable operation's; the manifest's x-mapsmith:plugin names the code that ran",
        "check the answer before relying on it (describe_dataset on the output, get_provenance for the record); "
        "list_operations shows each operation's maturity and the stable operations for the same job",
    )


def plugin_identity(app: MapSmith, operation: str, choice: dict[str, Any]) -> dict[str, str] | None:
    """``x-mapsmith:plugin`` for the engine the router chose, when a third-party plugin brought it."""
    impl = next(
        (i for i in app.host.implementations_for(operation, choice["stack"]) if i.engine == choice["engine"]), None
    )
    if impl is None or impl.origin is None:
        return None  # MapSmith's own engine: the producer and engine records say everything
    from mapsmith.pluginkit.maturity import manifest_identity

    return {**manifest_identity(impl.origin), "maturity": impl.maturity}


def _common(app: MapSmith, ctx: RunContext, choice: dict[str, Any], started: str) -> dict[str, Any]:
    record = base_record(ctx.contract.name, started)
    record["parameters"] = ctx.parameters
    record["inputs"] = _input_records(app, ctx)
    record["engine"] = engine_record(ctx, choice)
    if ctx.crs_decisions:
        record["crs_decisions"] = ctx.crs_decisions
    if ctx.notes:
        record["notes"] = list(ctx.notes)
    record["environment"] = {**app.environment_record(), **ctx.environment}
    record["x-mapsmith:engine_choice"] = choice
    identity = plugin_identity(app, ctx.contract.name, choice)
    if identity is not None:
        record["x-mapsmith:plugin"] = identity
    if ctx.warnings:
        record["x-mapsmith:warnings"] = [w.to_dict() for w in ctx.warnings]
    return record


def answer_record(app: MapSmith, ctx: RunContext, choice: dict[str, Any], started: str) -> dict[str, Any]:
    """What a manifest would record for an answer given instead of a dataset: the operation, its
    parameters (the SQL), its inputs by digest, and the engine."""
    record = {
        "operation": ctx.contract.name,
        "parameters": ctx.parameters,
        "inputs": _input_records(app, ctx),
        "engine": engine_record(ctx, choice),
        "started_at": started,
        "finished_at": utc_now(),
    }
    identity = plugin_identity(app, ctx.contract.name, choice)
    if identity is not None:
        record["x-mapsmith:plugin"] = identity
    return record


def output_record(
    app: MapSmith,
    ctx: RunContext,
    choice: dict[str, Any],
    started: str,
    final_temp: Path,
    out_info: DatasetInfo,
    given: str,
    repairs: list[dict[str, Any]],
) -> dict[str, Any]:
    record = _common(app, ctx, choice, started)
    record["output"] = {"path": posix_label(given), "sha256": dataset_digest(final_temp), "crs": out_info.crs_label}
    rule = digest_rule(final_temp)
    if rule is not None:
        record["output"]["x-mapsmith:digest_rule"] = rule  # a folder of Parquet parts: MapSmith's listing rule
    if out_info.kind == "table" and out_info.layer is not None:
        record["output"]["layer"] = out_info.layer  # the sheet of a workbook
    record["verification"] = [c.to_dict() for c in ctx.checks]
    if repairs:
        record["repairs"] = repairs
    record["finished_at"] = utc_now()
    return record


def write_failure(
    app: MapSmith,
    ctx: RunContext,
    choice: dict[str, Any],
    started: str,
    output: Path,
    given: str,
    exc: BaseException,
    new_output: dict[str, Any] | None,
    anchor: Path | None = None,
) -> None:
    """A failed run's record: what ran, what was checked, and that it did not complete.

    When the failure came after the new bytes reached ``output`` (the rename happened, the record
    did not), the record carries ``output`` with their digest, so a lineage walk finds this failed
    run as the producer of those bytes instead of an earlier record describing other bytes.
    ``anchor`` names the record of a layer of a container (``<container>.<layer>``); the lock and the
    digest are the container's.
    """
    try:
        # Implementations add round_trip only once coordinates are back in the caller's CRS (spec
        # §3.7), so whatever crs_decisions holds here is true of this failed run too.
        record = _common(app, ctx, choice, started)
        error = exc.to_dict() if isinstance(exc, MapSmithError) else {"code": "INTERRUPTED", "message": repr(exc)}
        record["verification"] = [c.to_dict() for c in ctx.checks] + [
            {
                "name": "x-mapsmith:run_completed",
                "passed": False,
                "detail": f"the run did not complete: [{error['code']}] {error['message']}",
                "critical": True,
            }
        ]
        record["x-mapsmith:error"] = error
        record["x-mapsmith:intended_output"] = posix_label(given)
        # Under the output's lock: another writer cannot swap the bytes between the digest read here
        # and the record written, nor take the same failure-record name.
        with output_lock(output):
            if new_output is not None and _digest_or_none(output) == new_output["sha256"]:
                record["output"] = new_output
            record["finished_at"] = utc_now()
            write_manifest(failed_manifest_path(anchor or output), record)
    except Exception as inner:  # the original error matters more; say the record could not be made
        print(f"mapsmith: could not write the failure record for {given}: {inner!r}", file=sys.stderr)


def _digest_or_none(path: Path) -> str | None:
    """The digest of what is at ``path`` now, or None when nothing (or no dataset, a folder) is there."""
    try:
        return dataset_digest(path) if path.exists() else None
    except MapSmithError:
        return None
