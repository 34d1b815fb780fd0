"""``mapsmith plugin check``: does a plugin keep MapSmith's promises? One named rule per line, with evidence.

``check_plugin(target)`` takes a plugin's source folder (a package with a ``pyproject.toml`` naming its
``mapsmith`` entry point), a plain folder (contract TOMLs beside one Python module, as ``propose_operation``
submits them), or the name of an installed distribution / entry point. It reads the contracts here (data,
no code), then runs every example twice and every declared refusal once through the real runner, each run a
fresh process in ``isolation.run_isolated`` (no network, read-only everything but a scratch workspace,
limits). Outputs are digested and their manifests validated here, outside the sandbox, from the files the
run left; symlinks in a scratch workspace are never followed.

Expected answers and bad inputs live beside the example data, in ``examples/expected.toml`` (the contract
schema keeps examples to a description and arguments): see ``docs/plugins.md``.

Layout: ``locate`` finds the plugin and its files, this module reads the contracts and runs everything,
``judge`` turns the runs into rules, ``report`` holds and prints them.

This module must never import or execute the plugin's code in its own process: everything the plugin
wrote is untrusted data here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mapsmith.contracts import UNIT_SUFFIXES, OperationContract, parse_contract
from mapsmith.errors import MapSmithError
from mapsmith.pluginkit.isolation import IsolatedResult, Limits, run_isolated
from mapsmith.pluginkit.judge import Run, first_problem, judge_examples, judge_isolation, judge_refusals
from mapsmith.pluginkit.locate import EXPECTED_FILE, NotAPlugin, PluginSource, locate
from mapsmith.pluginkit.maturity import code_digest
from mapsmith.pluginkit.report import RULES, CheckReport, Rule

__all__ = ["check_plugin", "run_plugin_operation", "locate", "unit_problems", "PluginSource", "NotAPlugin"]

RUNNER = "mapsmith.pluginkit.sandboxed:run_example"
MANIFEST_MAX_BYTES = 10 * 1024 * 1024
# A numeric parameter whose name has one of these words measures something, so its name needs a unit.
ANGLE_WORDS = frozenset({"angle", "azimuth", "bearing"})
QUANTITY_WORDS = frozenset(
    "distance length radius area size height width depth elevation altitude tolerance spacing buffer angle "
    "azimuth bearing duration interval resolution perimeter".split()
)
# Unit endings a name may carry without declaring ``unit`` (the contract schema's units are UNIT_SUFFIXES).
NAMED_UNIT_SUFFIXES = ("_km", "_km2", "_feet", "_seconds", "_minutes", "_hours", "_radians", "_hectares", "_pixels")


def unit_problems(parameters: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Numeric parameters whose name lacks their unit, and the ones judged unitless (counts, factors).

    The contract loader already refuses a declared unit whose suffix is missing (``UNIT_SUFFIXES``); this
    also catches a quantity declared without any unit (``min_length``), which the loader cannot see.
    """
    problems, unitless = [], []
    suffixes = tuple(UNIT_SUFFIXES.values())
    for p in parameters:
        if p.get("type") not in ("number", "integer"):
            continue
        name, unit = str(p.get("name", "")), p.get("unit")
        if unit is not None:
            suffix = UNIT_SUFFIXES.get(unit)
            if suffix is None:
                problems.append(f"{name}: unit {unit!r} is not one of {sorted(UNIT_SUFFIXES)}")
            elif not name.endswith(suffix):
                problems.append(f"{name}: declares unit {unit!r}, so the name must end in {suffix}")
        elif name.endswith(suffixes):
            known = next(u for u, s in UNIT_SUFFIXES.items() if name.endswith(s))
            problems.append(f"{name}: the name carries a unit; declare unit = {known!r} so clients see it")
        elif QUANTITY_WORDS & set(name.split("_")) and not name.endswith(NAMED_UNIT_SUFFIXES):
            word = sorted(QUANTITY_WORDS & set(name.split("_")))[0]
            unit = "square_metre" if word == "area" else "degree" if word in ANGLE_WORDS else "metre"
            problems.append(
                f"{name}: measures {'an' if word[0] in 'aeiou' else 'a'} {word} but names no unit "
                f"(for example {name}{UNIT_SUFFIXES[unit]} with unit = '{unit}')"
            )
        else:
            unitless.append(name)
    return problems, unitless


def _read_contracts(source: PluginSource) -> tuple[list[OperationContract], Rule, Rule]:
    contracts: list[OperationContract] = []
    schema_problems: dict[str, str] = {}
    unit_findings: dict[str, list[str]] = {}
    unitless: list[str] = []
    for path in source.contracts:
        try:
            data = tomllib.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            schema_problems[path.name] = f"not readable TOML: {exc}"
            continue
        problems, plain = unit_problems(list(data.get("parameters") or []))
        unitless += plain
        if problems:
            unit_findings[path.name] = problems
        # The unit house rule is judged by parameter_units; the schema rule reads the rest of the contract.
        stripped = {
            **data,
            "parameters": [{k: v for k, v in p.items() if k != "unit"} for p in data.get("parameters") or []],
        }
        try:
            contracts.append(parse_contract(stripped, source=path.name))
        except MapSmithError as exc:
            schema_problems[path.name] = exc.message
    if not source.contracts:
        schema_problems["(none)"] = "no contract TOML found beside the module"
    schema = Rule(
        "contract_schema",
        not schema_problems,
        {"summary": f"{len(contracts)} contract(s) valid" if not schema_problems else first_problem(schema_problems)}
        | ({"problems": schema_problems} if schema_problems else {"operations": [c.name for c in contracts]}),
    )
    units = Rule(
        "parameter_units",
        not unit_findings,
        {"summary": "every measuring parameter names its unit" if not unit_findings else first_problem(unit_findings)}
        | ({"problems": unit_findings} if unit_findings else {"unitless": unitless}),
    )
    return contracts, schema, units


def _load_expected(
    source: PluginSource,
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[dict[str, Any]], str | None]:
    if source.expected is None:
        return {}, [], None
    try:
        data = tomllib.loads(source.expected.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return {}, [], f"{EXPECTED_FILE} is not readable TOML: {exc}"
    answers = {(str(a.get("operation")), str(a.get("example"))): a for a in data.get("answers", [])}
    return answers, list(data.get("refusals", [])), None


# -- running ----------------------------------------------------------------------------------------------


def _prepare(source: PluginSource, workspace: Path) -> None:
    workspace.mkdir(parents=True)
    if source.examples is not None:
        shutil.copytree(
            source.examples, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns(EXPECTED_FILE, "__pycache__")
        )


def _symlinks(workspace: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(workspace, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                found.append(f"{p.relative_to(workspace)} -> {os.readlink(p)}")
    return found


def _run(source: PluginSource, label: str, workspace: Path, payload: dict[str, Any], limits: Limits) -> Run:
    _prepare(source, workspace)
    isolated = run_isolated(
        RUNNER,
        payload,
        workspace=workspace,
        read_only=[source.folder],
        python_path=[source.import_root] if source.import_root else [],
        limits=limits,
    )
    run = Run(label, workspace, isolated)
    run.outcome = isolated.result if isinstance(isolated.result, dict) else {}
    run.symlinks = _symlinks(workspace)
    result = run.outcome.get("result") or {}
    if run.outcome.get("outcome") != "ok" or run.symlinks:
        return run  # nothing in a workspace holding links is read here: they could point anywhere
    _read_output(run, result)
    return run


def _inside(workspace: Path, relative: Any) -> Path | None:
    if not isinstance(relative, str):
        return None
    p = (workspace / relative).resolve()
    return p if workspace.resolve() in p.parents else None


def _read_output(run: Run, result: dict[str, Any]) -> None:
    from mapsmith.provenance.digests import dataset_digest
    from mapsmith.provenance.validator import schema_errors, validate_manifest

    output = _inside(run.workspace, result.get("output_path"))
    if output is not None and output.exists():
        run.digest = dataset_digest(output)
    elif result.get("output_path") is None:
        run.digest = "answer:" + json.dumps(result.get("answer"), sort_keys=True, default=str)
    manifest = _inside(run.workspace, result.get("manifest_path"))
    if manifest is None or not manifest.is_file():
        if result.get("output_path") is not None:
            run.problems.append("no manifest beside the output")
        return
    if manifest.stat().st_size > MANIFEST_MAX_BYTES:
        run.problems.append(f"the manifest is larger than {MANIFEST_MAX_BYTES} bytes")
        return
    try:
        record = json.loads(manifest.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        run.problems.append(f"the manifest is not JSON: {exc}")
        return
    run.manifest = record if isinstance(record, dict) else None
    run.problems += validate_manifest(record) + [f"(JSON Schema) {p}" for p in schema_errors(record)]
    recorded = (record.get("output") or {}).get("sha256") if isinstance(record, dict) else None
    if run.digest and not run.digest.startswith("answer:") and recorded != run.digest:
        run.problems.append(f"the manifest records output sha256 {recorded}, the file's is {run.digest}")


def _payload(source: PluginSource, operation: str, arguments: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    return {
        "module": source.module,
        "attribute": source.attribute,
        "name": source.name,
        "entry_point": source.entry_point,
        "contracts": [str(p) for p in source.contracts],
        "plugin_folder": str(source.folder),
        "operation": operation,
        "arguments": arguments,
        "fields": fields,
    }


def run_plugin_operation(
    target: str | os.PathLike[str],
    operation: str,
    arguments: Mapping[str, Any],
    *,
    workspace: Path,
    read_only: list[Path] | None = None,
    limits: Limits | None = None,
) -> IsolatedResult:
    """Run one operation of a (checked) plugin through the real runner, in the sandbox, in ``workspace``.

    For operations that must run isolated every time (``propose_operation``'s): ``result.result`` is
    ``{"outcome": "ok", "result": <OperationResult dict>}`` or ``{"outcome": "refused", "error": {...}}``.
    The workspace is bound read-write (outputs and manifests land there as for any run); the plugin's folder
    and ``read_only`` are bound read-only.
    """
    source = locate(target)
    return run_isolated(
        RUNNER,
        _payload(source, operation, dict(arguments), []),
        workspace=Path(workspace),
        read_only=[source.folder, *(read_only or [])],
        python_path=[source.import_root] if source.import_root else [],
        limits=limits,
    )


# -- the whole check --------------------------------------------------------------------------------------


def check_plugin(
    target: str | os.PathLike[str],
    *,
    workspace: Path | None = None,
    limits: Limits | None = None,
    require_refusal: bool = True,
) -> CheckReport:
    """Run every rule of ``report.RULES`` on ``target`` and return the report (``.passed``, ``.rules``).

    :param workspace: an empty folder for the scratch workspaces (one per run, kept for inspection);
        by default a temporary folder, removed afterwards.
    :param require_refusal: fail ``refusals_structured`` when the plugin declares no bad input.
    :raises MapSmithError: ``ISOLATION_UNAVAILABLE`` when no sandbox can be built (nothing is run unsandboxed).
    """
    started = time.perf_counter()
    limits = limits or Limits()
    rules: dict[str, Rule] = {}
    try:
        source = locate(target)
    except NotAPlugin as exc:
        rules["plugin_found"] = Rule("plugin_found", False, {"summary": exc.message, **exc.to_dict()})
        return _finish(str(target), {}, rules, started)
    rules["plugin_found"] = Rule("plugin_found", True, {"summary": f"module {source.module}", **source.describe()})
    contracts, rules["contract_schema"], rules["parameter_units"] = _read_contracts(source)
    answers, refusals, expected_problem = _load_expected(source)
    own = workspace is None
    scratch = Path(tempfile.mkdtemp(prefix="mapsmith-check-")) if workspace is None else Path(workspace)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        pairs, refusal_runs = _run_everything(source, contracts, answers, refusals, scratch, limits)
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)
    judge_examples(rules, contracts, pairs, answers, expected_problem)
    judge_refusals(rules, refusals, refusal_runs, require_refusal)
    judge_isolation(rules, [r for pair in pairs for r in pair[2]] + refusal_runs, limits)
    # Bound to the exact code checked, as the manifests' x-mapsmith:plugin is: promote compares the two.
    plugin = {**source.describe(), "code_sha256": code_digest(source.code_path)}
    return _finish(str(target), plugin, rules, started, [c.name for c in contracts])


def _run_everything(
    source: PluginSource,
    contracts: list[OperationContract],
    answers: dict[tuple[str, str], dict[str, Any]],
    refusals: list[dict[str, Any]],
    scratch: Path,
    limits: Limits,
) -> tuple[list[tuple[OperationContract, Mapping[str, Any], list[Run]]], list[Run]]:
    pairs = []
    for contract in contracts:
        for i, example in enumerate(contract.examples):
            expected = answers.get((contract.name, str(example.get("description"))), {})
            fields = sorted((expected.get("fields") or {}).keys())
            payload = _payload(source, contract.name, dict(example.get("arguments") or {}), fields)
            runs = [
                _run(
                    source,
                    f"{contract.name}[{i}] run {n}",
                    scratch / f"{_slug(contract.name)}-{i}-run{n}",
                    payload,
                    limits,
                )
                for n in (1, 2)
            ]
            pairs.append((contract, example, runs))
    refusal_runs = []
    known = {c.name for c in contracts}
    for i, refusal in enumerate(refusals):
        operation = str(refusal.get("operation") or next(iter(known), ""))
        if operation not in known:
            continue  # judged as a problem of the refusal, below
        payload = _payload(source, operation, dict(refusal.get("arguments") or {}), [])
        refusal_runs.append(_run(source, f"refusal[{i}]", scratch / f"refusal-{i}", payload, limits))
    return pairs, refusal_runs


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _finish(
    target: str, plugin: dict[str, Any], rules: dict[str, Rule], started: float, operations: list[str] | None = None
) -> CheckReport:
    ordered = [rules.get(name) or Rule(name, False, {"summary": "not run: the plugin was not found"}) for name in RULES]
    return CheckReport(target, plugin, ordered, time.perf_counter() - started, operations or [])
