"""Turn the runs of ``plugin check`` into its rules: answers, manifests, determinism, checks, refusals, isolation.

Each ``judge_*`` function reads ``Run`` records (what the sandbox reported and what was read from the scratch
workspace afterwards) and sets rules of ``report.RULES``. This module must never run anything or read a file:
the runs and their outputs were read before it is called.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapsmith.contracts import OperationContract
from mapsmith.pluginkit.isolation import IsolatedResult, Limits
from mapsmith.pluginkit.locate import EXAMPLES_DIR, EXPECTED_FILE
from mapsmith.pluginkit.report import Rule

IMPORT_LIMIT_S = 1.0  # the server imports every plugin at start; an engine import belongs inside the function


@dataclass
class Run:
    """One isolated run and what was read from its workspace afterwards."""

    label: str
    workspace: Path
    isolated: IsolatedResult
    outcome: dict[str, Any] = field(default_factory=dict)
    digest: str | None = None
    manifest: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    symlinks: list[str] = field(default_factory=list)

    @property
    def limit_hit(self) -> str | None:
        """A limit the sandbox saw, or one the runner translated (a MemoryError became ENGINE_OUT_OF_MEMORY)."""
        return self.isolated.limit_hit or (self.outcome.get("error") or {}).get("limit")


def first_problem(problems: dict[str, Any]) -> str:
    key, value = next(iter(problems.items()))
    return f"{key}: {value[0] if isinstance(value, list) else value}"


def same(expected: Any, got: Any) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        try:
            return math.isclose(float(expected), float(got), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(same(e, g) for e, g in zip(expected, got, strict=True))
    if isinstance(expected, dict) and isinstance(got, dict):
        return all(k in got and same(v, got[k]) for k, v in expected.items())
    return bool(expected == got)


def error_summary(run: Run) -> str:
    iso = run.isolated
    if run.limit_hit:
        return f"hit the {run.limit_hit} limit"
    error = run.outcome.get("error") or iso.error or {}
    if error:
        return f"{error.get('code') or error.get('class')}: {str(error.get('message'))[:200]}"
    return f"exit status {iso.exit_status}" + (f" ({iso.signal})" if iso.signal else "")


def judge_examples(
    rules: dict[str, Rule],
    contracts: list[OperationContract],
    pairs: list[tuple[OperationContract, Mapping[str, Any], list[Run]]],
    answers: dict[tuple[str, str], dict[str, Any]],
    expected_problem: str | None,
) -> None:
    if not contracts:
        for name in (
            "import_time",
            "examples_run",
            "example_answers",
            "manifests_valid",
            "deterministic",
            "checks_ran",
        ):
            rules[name] = Rule(name, False, {"summary": "not run: no valid contract"})
        return
    all_runs = [r for _, _, runs in pairs for r in runs]
    imports = [r.outcome["plugin_import_s"] for r in all_runs if isinstance(r.outcome.get("plugin_import_s"), float)]
    if imports:
        slowest = max(imports)
        rules["import_time"] = Rule(
            "import_time",
            slowest <= IMPORT_LIMIT_S,
            {"summary": f"{slowest:.3f} s (limit {IMPORT_LIMIT_S} s)", "seconds": round(slowest, 4)},
        )
    else:
        failed = next((r for r in all_runs), None)
        rules["import_time"] = Rule(
            "import_time",
            False,
            {"summary": "the plugin did not import" + (f": {error_summary(failed)}" if failed else "")},
        )
    bad_runs = {r.label: error_summary(r) for r in all_runs if r.outcome.get("outcome") != "ok"}
    rules["examples_run"] = Rule(
        "examples_run",
        not bad_runs,
        {
            "summary": f"{len(pairs)} example(s), each run twice" if not bad_runs else first_problem(bad_runs),
            "failed": bad_runs,
        },
    )
    wrong: dict[str, str] = {}
    for contract, example, runs in pairs:
        key = (contract.name, str(example.get("description")))
        label = f"{contract.name}: {example.get('description')}"
        if expected_problem:
            wrong[label] = expected_problem
            continue
        expected = answers.get(key)
        if expected is None:
            wrong[label] = f"no [[answers]] entry in {EXAMPLES_DIR}/{EXPECTED_FILE} for this example"
            continue
        run = runs[0]
        if run.outcome.get("outcome") != "ok":
            wrong[label] = f"not answered: {error_summary(run)}"
            continue
        got = (run.outcome.get("result") or {}).get("answer") or {}
        if "answer" in expected and not same(expected["answer"], got):
            wrong[label] = (
                f"answer {json.dumps(got, default=str)} differs from the expected {json.dumps(expected['answer'])}"
            )
            continue
        got_fields = run.outcome.get("fields") or {}
        for name, values in (expected.get("fields") or {}).items():
            if not same(values, got_fields.get(name)):
                wrong[label] = f"field {name} is {got_fields.get(name)}, expected {values}"
                break
    rules["example_answers"] = Rule(
        "example_answers",
        not wrong,
        {"summary": "every answer equals its hand-worked value" if not wrong else first_problem(wrong), "wrong": wrong},
    )
    invalid = {r.label: r.problems[:5] for r in all_runs if r.problems}
    unread = [r.label for r in all_runs if r.outcome.get("outcome") == "ok" and r.manifest is None and not r.problems]
    missing = {label: ["no manifest read (the run failed or left links)"] for label in unread}
    # The runner validates a record before writing it: a run refused with MANIFEST_INVALID is this rule's failure.
    refused = {
        r.label: [str((r.outcome.get("error") or {}).get("message"))]
        for r in all_runs
        if (r.outcome.get("error") or {}).get("code") == "MANIFEST_INVALID"
    }
    not_run = [r.label for r in all_runs if r.outcome.get("outcome") != "ok" and r.label not in refused]
    problems = {**invalid, **missing, **refused}
    rules["manifests_valid"] = Rule(
        "manifests_valid",
        not problems and not not_run,
        {
            "summary": "every manifest conforms to manifest-v1"
            if not problems and not not_run
            else (first_problem(problems) if problems else f"not checked: {not_run[0]} did not run"),
            "problems": problems,
        },
    )
    differing = {}
    for contract, example, runs in pairs:
        digests = [r.digest for r in runs]
        if None in digests or digests[0] != digests[1]:
            differing[f"{contract.name}: {example.get('description')}"] = digests
    rules["deterministic"] = Rule(
        "deterministic",
        not differing,
        {
            "summary": "two runs gave identical digests" if not differing else f"{first_problem(differing)}",
            "differing": differing,
        },
    )
    missing_checks: dict[str, list[str]] = {}
    for contract, _example, runs in pairs:
        record = runs[0].manifest
        recorded = {v.get("name") for v in (record or {}).get("verification", []) if isinstance(v, dict)}
        absent = [c for c in contract.checks if c not in recorded]
        if absent or record is None:
            missing_checks[f"{runs[0].label}"] = absent if record is not None else ["(no manifest)"]
    rules["checks_ran"] = Rule(
        "checks_ran",
        not missing_checks,
        {"summary": "every declared check is in the manifest" if not missing_checks else first_problem(missing_checks)}
        | {"missing": missing_checks},
    )


def judge_refusals(rules: dict[str, Rule], refusals: list[dict[str, Any]], runs: list[Run], required: bool) -> None:
    if not refusals:
        rules["refusals_structured"] = Rule(
            "refusals_structured",
            not required,
            {"summary": f"no [[refusals]] in {EXAMPLES_DIR}/{EXPECTED_FILE}: declare one bad input and its code"},
        )
        return
    if len(runs) != len(refusals):
        rules["refusals_structured"] = Rule(
            "refusals_structured", False, {"summary": "a refusal names an operation that has no valid contract"}
        )
        return
    problems: dict[str, str] = {}
    for refusal, run in zip(refusals, runs, strict=True):
        label = str(refusal.get("description") or run.label)
        error = run.outcome.get("error") or {}
        if run.outcome.get("outcome") == "ok":
            problems[label] = "the bad input was accepted: the run succeeded"
        elif run.outcome.get("outcome") != "refused":
            problems[label] = f"no structured refusal: {error_summary(run)}"
        elif error.get("translated_from"):
            where = "the plugin's code" if error.get("raised_in_plugin") else "an engine"
            problems[label] = (
                f"{where} raised a bare {error['translated_from']}; MapSmith had to translate it to "
                f"{error.get('code')}: raise a MapSmithError subclass (mapsmith.api) with a code and a hint"
            )
        elif refusal.get("code") and error.get("code") != refusal.get("code"):
            problems[label] = f"refused with {error.get('code')}, expected {refusal.get('code')}"
        elif not error.get("hint"):
            problems[label] = f"{error.get('code')} has no hint an agent can act on"
    rules["refusals_structured"] = Rule(
        "refusals_structured",
        not problems,
        {"summary": f"{len(refusals)} refusal(s) with code and hint" if not problems else first_problem(problems)}
        | {"problems": problems, "codes": [(r.outcome.get("error") or {}).get("code") for r in runs]},
    )


def judge_isolation(rules: dict[str, Rule], runs: list[Run], limits: Limits) -> None:
    network = {r.label: r.isolated.attempts_of("network") for r in runs if r.isolated.attempts_of("network")}
    rules["no_network"] = Rule(
        "no_network",
        not network,
        {
            "summary": "no connection attempted"
            if not network
            else f"{next(iter(network))}: tried {next(iter(network.values()))[0]['target']} (blocked by the sandbox)",
            "attempts": network,
        },
    )
    writes = {r.label: r.isolated.attempts_of("write") for r in runs if r.isolated.attempts_of("write")}
    links = {r.label: r.symlinks for r in runs if r.symlinks}
    rules["no_write_outside_workspace"] = Rule(
        "no_write_outside_workspace",
        not writes and not links,
        {
            "summary": "every write stayed in the workspace"
            if not writes and not links
            else (
                f"{next(iter(writes))}: tried to write {next(iter(writes.values()))[0]['target']} (refused: read-only)"
                if writes
                else f"{next(iter(links))}: left a symbolic link {next(iter(links.values()))[0]}"
            ),
            "attempts": writes,
            "symlinks": links,
        },
    )
    hits = {r.label: r.limit_hit for r in runs if r.limit_hit}
    rules["within_limits"] = Rule(
        "within_limits",
        not hits,
        {"summary": "no limit hit" if not hits else first_problem(hits), "hit": hits, "limits": limits.to_dict()},
    )
