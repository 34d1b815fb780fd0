"""The result of ``mapsmith plugin check``: one named rule per line, passed or failed, with its evidence.

``RULES`` is the fixed list, in the order the report prints it; every report carries every rule (a rule that
could not run because an earlier one failed says so, and fails), so a script can rely on the names. This
module must never run plugin code; it only holds and prints what ``check`` found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# name -> what passing means (printed in the text report and docs/plugins.md)
RULES: dict[str, str] = {
    "plugin_found": "the target is a plugin: a module with its hooks (or its functions) and contract TOML files",
    "contract_schema": "every contract validates against contracts/schemas/operation.schema.json",
    "parameter_units": "every numeric parameter that measures something carries its unit in its name",
    "import_time": "importing the plugin takes under the limit (the server imports every plugin at start)",
    "examples_run": "every contract example runs through the real runner, in the sandbox, without error",
    "example_answers": "every example's answer (and named output fields) equals the hand-worked values declared",
    "manifests_valid": "every output's manifest validates against the manifest specification and names the output",
    "deterministic": "every example run twice gives byte-identical outputs (the same digests)",
    "checks_ran": "every output check the contract declares is recorded in the manifest's verification",
    "refusals_structured": "declared bad inputs are refused with a MapSmithError that has the expected code and a hint",
    "no_network": "no run tried to reach the network (the sandbox has none; attempts are named)",
    "no_write_outside_workspace": "no run tried to write outside its scratch workspace",
    "within_limits": "no run hit a CPU, memory, file size, process or time limit",
}


@dataclass
class Rule:
    name: str
    passed: bool
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "evidence": self.evidence}


@dataclass
class CheckReport:
    """Every rule of ``RULES`` with its outcome, for one plugin."""

    target: str
    plugin: dict[str, Any]
    rules: list[Rule]
    seconds: float = 0.0
    operations: list[str] = field(default_factory=list)  # the contracts that were valid, hence checked

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rules)

    def rule(self, name: str) -> Rule:
        return next(r for r in self.rules if r.name == name)

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.rules if not r.passed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "passed": self.passed,
            "failed": self.failed,
            "plugin": self.plugin,
            "operations": self.operations,
            "rules": [r.to_dict() for r in self.rules],
            "seconds": round(self.seconds, 2),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def to_text(self) -> str:
        width = max(len(n) for n in RULES)
        lines = [f"mapsmith plugin check {self.target}"]
        for r in self.rules:
            lines.append(f"{'PASS' if r.passed else 'FAIL'}  {r.name:<{width}}  {_short(r.evidence)}")
        verdict = "passed" if self.passed else f"FAILED ({', '.join(self.failed)})"
        lines.append(f"{verdict} in {self.seconds:.1f} s")
        return "\n".join(lines)


def _short(evidence: dict[str, Any], limit: int = 240) -> str:
    """The evidence on one line: its summary when it has one, else its JSON, cut."""
    text = str(evidence["summary"]) if "summary" in evidence else json.dumps(evidence, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
