"""``mapsmith plugin promote``: make a plugin's experimental operation stable, on evidence that is re-checked.

    mapsmith plugin promote OPERATION --report CHECK_REPORT.json --runs N [--workspace DIR] [--json]

Promotion is evidence, not a flag. The command promotes only when both of these hold, and writes what
justified it into the workspace's promotions file (``<workspace>/.mapsmith/promotions.json``, see
``mapsmith.pluginkit.maturity`` for why there):

1. **A passing ``plugin check`` report of this very code.** The JSON report (``plugin check --json``)
   must say ``passed: true`` and name the code digest it checked (``code_sha256``, at the top level or
   under ``plugin``); it must equal the digest of the plugin installed now. The report's SHA-256 is
   recorded, so the file it came from can be produced again and compared.
2. **At least N verified runs, found in the workspace, never taken from the operator.** ``--runs N`` is
   the operator's claim; it must be at least ``MIN_VERIFIED_RUNS`` (3) and the workspace must hold at
   least N runs that verify. A run is a manifest beside a dataset (failure records are not runs) that
   names this operation and this plugin's distribution, version and code digest (``x-mapsmith:plugin``),
   conforms to the manifest schema, has at least one check and no failed critical check, still
   describes the bytes beside it, and replays (``MapSmith.replay``, in a scratch folder) to
   byte-identical outputs. Runs on the same inputs with the same parameters are one piece of evidence,
   not several: they count once.

The threshold is three because one run shows the code can work, two that it can work twice on
different data, and three is the smallest number at which one lucky input does not make half the
evidence; it is a floor, the operator may ask for more with ``--runs``. Every refusal is a
``MapSmithError`` with its own code (``PROMOTION_*``), the evidence (each manifest looked at and why it
did or did not count) and a hint. The promotion takes effect the next time a server starts on that
workspace; it binds to the code digest, so any edit to the plugin's ``.py`` or ``.toml`` files makes
its operations experimental again until they are promoted again.

This module must never count a run it did not verify itself, never write the promotions file other
than atomically (a temporary file renamed into place), and never promote MapSmith's own operations
(already stable) or an operation whose plugin has no code digest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.contracts import STABLE, suggest
from mapsmith.errors import ArgumentError, ConfigurationError, InputError, MapSmithError
from mapsmith.outputs import output_lock
from mapsmith.pluginkit import maturity
from mapsmith.provenance.manifest import MANIFEST_SUFFIX, utc_now

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

MIN_VERIFIED_RUNS = 3
PROMOTE_HINT = "mapsmith plugin promote OPERATION --report CHECK_REPORT.json --runs N"


class PromotionRefused(MapSmithError, RuntimeError):
    """The evidence does not justify a promotion; ``code`` says which part is missing."""

    code = "PROMOTION_REFUSED"


def main(argv: list[str]) -> int:
    """The ``plugin promote`` subcommand; 0 when promoted, 2 when refused (the error on stderr, or as JSON)."""
    parser = argparse.ArgumentParser(
        prog="mapsmith plugin promote",
        description="Record, on verified evidence, that a plugin's experimental operation is stable.",
    )
    parser.add_argument("operation", help="the operation to promote, as list_operations names it")
    parser.add_argument("--report", required=True, type=Path, help="the JSON report of 'mapsmith plugin check'")
    parser.add_argument(
        "--runs", required=True, type=int, help=f"verified runs required (at least {MIN_VERIFIED_RUNS})"
    )
    parser.add_argument("--workspace", type=Path, help="the workspace whose manifests are the evidence")
    parser.add_argument("--json", action="store_true", help="print the promotion record (or the refusal) as JSON")
    args = parser.parse_args(argv)
    try:
        record = promote(args.operation, args.report, args.runs, workspace=args.workspace)
    except MapSmithError as exc:
        if args.json:
            print(json.dumps(exc.to_dict(), indent=2))
        else:
            print(f"mapsmith: promotion refused: [{exc.code}] {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        runs = record["verified_runs"]
        print(
            f"promoted {record['operation']} ({record['distribution']} {record['version']}, code "
            f"{record['code_sha256'][:12]}…): check report {record['check_report']['sha256'][:12]}…, "
            f"{runs['count']} verified runs (required {runs['required']}); recorded in "
            f"{maturity.PROMOTIONS_FOLDER}/{maturity.PROMOTIONS_NAME}"
        )
    return 0


def promote(
    operation: str,
    report: Path,
    runs: int,
    *,
    workspace: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Check the evidence for promoting ``operation`` and record it; returns the promotion record."""
    from mapsmith.app import MapSmith

    env = dict(os.environ if environ is None else environ)
    if workspace is not None:
        env["MAPSMITH_WORKSPACE"] = str(workspace)
    if not env.get("MAPSMITH_WORKSPACE"):
        raise ConfigurationError(
            "promotion needs a workspace: its manifests are the evidence and its promotions file the record",
            code="PROMOTION_NO_WORKSPACE",
            hint="pass --workspace DIR (or set MAPSMITH_WORKSPACE) naming the workspace the runs were made in",
        )
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < MIN_VERIFIED_RUNS:
        raise ArgumentError(
            f"--runs {runs} is below the minimum of {MIN_VERIFIED_RUNS} verified runs a promotion needs",
            code="PROMOTION_TOO_FEW_RUNS",
            evidence={"runs": runs, "minimum": MIN_VERIFIED_RUNS},
            hint=f"run the operation on at least {MIN_VERIFIED_RUNS} different inputs in the workspace "
            f"(run_operation), then pass --runs {MIN_VERIFIED_RUNS} or more",
        )
    app = MapSmith(env)
    root = app.workspace.root
    assert root is not None  # Workspace.from_env refused an unusable MAPSMITH_WORKSPACE already
    origin = _experimental_origin(app, operation)
    check = _check_report(report, origin, operation, root)
    verified, looked_at = verified_runs(app, operation, origin)
    if len(verified) < runs:
        raise PromotionRefused(
            f"{operation}: {len(verified)} verified run(s) in the workspace, {runs} required",
            code="PROMOTION_RUNS_INSUFFICIENT",
            evidence={"required": runs, "verified": len(verified), "manifests": looked_at},
            hint=f"run {operation} on more distinct inputs (run_operation) until {runs} runs verify; each "
            "manifest listed says why it did not count (get_provenance and replay show the same)",
        )
    record = {
        "operation": operation,
        "distribution": origin["distribution"],
        "version": origin["version"],
        "code_sha256": origin["code_sha256"],
        "promoted_at": utc_now(),
        "by": "evidence",
        "check_report": check,
        "verified_runs": {
            "required": runs,
            "minimum": MIN_VERIFIED_RUNS,
            "count": len(verified),
            "runs": verified,
        },
    }
    _append(root, record)
    return record


def _experimental_origin(app: MapSmith, operation: str) -> dict[str, str]:
    """The identity of the plugin that brought ``operation``; refused for unknown or already-stable ones."""
    contract = app.host.contracts.get(operation)
    if contract is None:
        close = suggest(operation, app.host.contracts)
        raise PromotionRefused(
            f"no operation named {operation!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
            code="PROMOTION_UNKNOWN_OPERATION",
            evidence={"operation": operation, "suggestions": close},
            hint="name the operation as list_operations shows it; the plugin must be installed where this runs",
        )
    if contract.origin is None:
        raise PromotionRefused(
            f"{operation} is MapSmith's own operation: it is stable already",
            code="PROMOTION_NOT_NEEDED",
            evidence={"operation": operation, "maturity": contract.maturity},
            hint="only a plugin's experimental operations are promoted; list_operations shows each maturity",
        )
    if contract.maturity == STABLE:
        raise PromotionRefused(
            f"{operation} is promoted already for this code",
            code="PROMOTION_NOT_NEEDED",
            evidence={"operation": operation, "promotion": dict(contract.promotion or {})},
            hint="nothing to do; list_operations shows the promotion and its record",
        )
    origin = dict(contract.origin)
    if not origin.get("code_sha256"):
        raise PromotionRefused(
            f"the plugin behind {operation} has no code digest, so no evidence can be tied to its code",
            code="PROMOTION_NO_CODE_DIGEST",
            evidence={"operation": operation, "plugin": origin},
            hint="install the plugin as a distribution (pip install), so its package files can be digested",
        )
    return origin


def _check_report(report: Path, origin: Mapping[str, str], operation: str, root: Path) -> dict[str, Any]:
    """The check report's record: its digest, and that it passed for exactly this code."""
    try:
        data = report.read_bytes()
        parsed = json.loads(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"the check report {report.name} cannot be read as JSON: {exc}",
            code="PROMOTION_REPORT_UNREADABLE",
            evidence={"report": report.name},
            hint="pass the file written by 'mapsmith plugin check PACKAGE --json'",
        ) from exc
    if not isinstance(parsed, dict):
        raise InputError(
            f"the check report {report.name} is not a JSON object",
            code="PROMOTION_REPORT_UNREADABLE",
            evidence={"report": report.name},
            hint="pass the file written by 'mapsmith plugin check PACKAGE --json'",
        )
    plugin: dict[str, Any] = parsed["plugin"] if isinstance(parsed.get("plugin"), dict) else {}
    checked = parsed.get("code_sha256") or plugin.get("code_sha256")
    if not checked:
        raise PromotionRefused(
            f"the check report {report.name} does not name the code digest it checked",
            code="PROMOTION_REPORT_UNBOUND",
            evidence={"report": report.name, "keys": sorted(parsed)},
            hint="run 'mapsmith plugin check' again with this MapSmith: its report names the code it checked",
        )
    if checked != origin["code_sha256"]:
        raise PromotionRefused(
            f"the check report is of other code ({str(checked)[:12]}…) than the plugin installed now "
            f"({origin['code_sha256'][:12]}…)",
            code="PROMOTION_REPORT_OTHER_CODE",
            evidence={"report_code_sha256": checked, "installed_code_sha256": origin["code_sha256"]},
            hint="run 'mapsmith plugin check' on the installed plugin and pass that report",
        )
    failed = [
        r.get("name")
        for r in parsed.get("rules", [])
        if isinstance(r, dict) and r.get("passed") is False and r.get("severity", "error") == "error"
    ]
    if parsed.get("passed") is not True or failed:
        raise PromotionRefused(
            f"the check report of {operation}'s plugin did not pass"
            + (f": {', '.join(map(str, failed))}" if failed else ""),
            code="PROMOTION_CHECK_FAILED",
            evidence={"report": report.name, "passed": parsed.get("passed"), "failed_rules": failed},
            hint="fix what the failed rules name, run 'mapsmith plugin check' again, and promote with that report",
        )
    operations = parsed.get("operations")
    if isinstance(operations, list) and operations and operation not in operations:
        raise PromotionRefused(
            f"the check report does not cover {operation} (it checked {operations})",
            code="PROMOTION_REPORT_OTHER_CODE",
            evidence={"report_operations": operations, "operation": operation},
            hint="check the plugin that provides this operation and pass that report",
        )
    resolved = report.resolve()
    where = resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else report.name
    return {
        "path": where,
        "sha256": hashlib.sha256(data).hexdigest(),
        "passed": True,
        "rules": len(parsed.get("rules", []) or []),
    }


# -- the runs ---------------------------------------------------------------------------------------


def _manifests(root: Path) -> Iterator[Path]:
    """Every manifest of a written dataset in the workspace: no failure records, no MapSmith state folder."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != maturity.PROMOTIONS_FOLDER)
        for name in sorted(files):
            if name.endswith(MANIFEST_SUFFIX) and ".failed" not in name:
                yield Path(folder) / name


def _same_code(record: Mapping[str, Any], origin: Mapping[str, str]) -> bool:
    plugin = record.get("x-mapsmith:plugin")
    if not isinstance(plugin, dict):
        return False
    return (
        maturity.normalise_distribution(str(plugin.get("distribution", "")))
        == maturity.normalise_distribution(origin["distribution"])
        and plugin.get("version") == origin["version"]
        and plugin.get("code_sha256") == origin["code_sha256"]
    )


def verified_runs(
    app: MapSmith, operation: str, origin: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the runs that verify, counted once per inputs+parameters; every manifest looked at, with its verdict)."""
    from mapsmith.provenance.digests import dataset_digest
    from mapsmith.provenance.validator import validate_manifest

    root = app.workspace.root
    assert root is not None
    verified: list[dict[str, Any]] = []
    seen: set[str] = set()
    looked_at: list[dict[str, Any]] = []
    for mpath in _manifests(root):
        try:
            record = json.loads(mpath.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # not a manifest MapSmith can read: not evidence of anything
        if not isinstance(record, dict) or record.get("operation") != operation or not _same_code(record, origin):
            continue
        label = mpath.relative_to(root).as_posix()
        verdict: dict[str, Any] = {"manifest": label}
        looked_at.append(verdict)
        output: dict[str, Any] = record["output"] if isinstance(record.get("output"), dict) else {}
        layer = output.get("layer")
        dataset = mpath.with_name(mpath.name[: -len(MANIFEST_SUFFIX)])
        if layer:
            dataset = dataset.with_name(dataset.name[: -len(f".{layer}")])
        checks = record.get("verification") or []
        failed = [c.get("name") for c in checks if c.get("critical", True) and not c.get("passed")]
        problems = validate_manifest(record)
        if problems:
            verdict["counted"], verdict["reason"] = False, f"the manifest does not conform: {problems[0]}"
            continue
        if not checks or failed:
            verdict["counted"] = False
            verdict["reason"] = f"critical checks failed: {failed}" if failed else "no check ran"
            continue
        try:
            now = dataset_digest(dataset)
        except (OSError, MapSmithError):
            now = None
        if now != output.get("sha256"):
            verdict["counted"], verdict["reason"] = False, "the dataset beside it no longer has the recorded bytes"
            continue
        try:
            replayed = app.replay(dataset.relative_to(root).as_posix(), layer=layer)
        except MapSmithError as exc:
            verdict["counted"], verdict["reason"] = False, f"replay refused: [{exc.code}] {exc.message}"
            continue
        if not replayed.get("identical"):
            verdict["counted"] = False
            verdict["reason"] = f"replay was not identical ({replayed.get('verdict')})"
            continue
        key = json.dumps(
            [sorted(str(i.get("sha256")) for i in record.get("inputs", [])), _run_parameters(record)], sort_keys=True
        )
        if key in seen:
            verdict["counted"], verdict["reason"] = False, "same inputs and parameters as a run already counted"
            continue
        seen.add(key)
        verdict["counted"] = True
        verified.append(
            {
                "manifest": label,
                "output_sha256": output.get("sha256"),
                "inputs_sha256": sorted(str(i.get("sha256")) for i in record.get("inputs", [])),
                "replay": "identical",
            }
        )
    return verified, looked_at


def _run_parameters(record: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters that make a run what it is: not how long the engine took."""
    params = record.get("parameters") or {}
    return {k: v for k, v in params.items() if k != "x-mapsmith:engine_seconds"}


def _append(root: Path, record: dict[str, Any]) -> None:
    """Add ``record`` to the promotions file, written whole to a temporary file and renamed into place."""
    path = maturity.promotions_path(root)
    assert path is not None
    path.parent.mkdir(exist_ok=True)
    # Read-add-rename under the file's lock: two promotions at once must not lose one of them.
    with output_lock(path):
        existing = maturity.load_promotions(root)  # a broken file is refused, never overwritten
        data = {"format": maturity.PROMOTIONS_FORMAT, "promotions": [*existing, record]}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=2)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
