"""The plan as data: parse it, fingerprint it, find and substitute step references.

A plan is ``{goal, steps: [{id, operation, arguments}]}`` (``contracts/schemas/plan.schema.json``).
An argument value that is exactly ``"$<id>"`` -- a whole string, or one element of a list (the
``*_paths`` arguments) -- means "the output_path of step <id>". ``"$$text"`` is the literal string
``"$text"``: the one escape, so a value that really starts with a dollar can still be passed.
Nothing else inside a string is a reference (``"a$b"`` is just text).

This module checks structure only. It never looks up an operation, resolves a path or opens a
file: that is ``validate.py``'s job, and it must stay cheap enough to call on every request.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from mapsmith.contracts import contracts_root
from mapsmith.errors import ArgumentError

REFERENCE_PREFIX = "$"
ESCAPED_PREFIX = "$$"


@dataclass(frozen=True)
class Step:
    """One step: run ``operation`` with ``arguments`` (which may hold ``"$id"`` references)."""

    id: str
    operation: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "operation": self.operation, "arguments": copy.deepcopy(self.arguments)}


@dataclass(frozen=True)
class Plan:
    """A goal and the steps that reach it, in the order they run."""

    goal: str
    steps: tuple[Step, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"goal": self.goal, "steps": [s.to_dict() for s in self.steps]}

    def step(self, step_id: str) -> Step | None:
        """The first step with that id (ids are unique in a valid plan)."""
        return next((s for s in self.steps if s.id == step_id), None)


@cache
def _plan_validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads((contracts_root() / "schemas" / "plan.schema.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def structure_problems(data: Any) -> list[dict[str, Any]]:
    """Every way ``data`` fails the plan schema, as ``{"where", "message", "validator"}`` dicts,
    ordered by position. An empty list means the structure is right (semantics are not checked)."""
    errors = sorted(_plan_validator().iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    return [
        {
            "where": "/".join(str(p) for p in e.absolute_path) or "(top level)",
            "message": e.message,
            "validator": e.validator,
        }
        for e in errors
    ]


def is_empty_plan_problem(problem: Mapping[str, Any]) -> bool:
    """True for the schema's "steps must not be empty" failure, which is reported as EMPTY_PLAN."""
    return problem["where"] == "steps" and problem["validator"] == "minItems"


def parse_plan(data: Mapping[str, Any]) -> Plan:
    """Check ``data`` against the plan schema and type it.

    Raises ``ArgumentError`` with code ``EMPTY_PLAN`` when there are no steps, and ``PLAN_INVALID``
    for any other structural problem (the evidence lists them all). Duplicate step ids, unknown
    operations and bad references are not structural: ``validate_plan`` reports those.
    """
    problems = structure_problems(data)
    if problems:
        if all(is_empty_plan_problem(p) for p in problems):
            raise ArgumentError(
                "the plan has no steps",
                code="EMPTY_PLAN",
                evidence={"steps": 0},
                hint="add at least one step: {id, operation, arguments}",
            )
        first = problems[0]
        raise ArgumentError(
            f"the plan does not match the plan schema at {first['where']}: {first['message']}",
            code="PLAN_INVALID",
            evidence={"problems": [{k: p[k] for k in ("where", "message")} for p in problems[:20]]},
            hint="a plan is {goal: string, steps: [{id, operation, arguments: {...}}]}; "
            "see contracts/schemas/plan.schema.json",
        )
    return Plan(
        goal=data["goal"],
        steps=tuple(
            Step(id=s["id"], operation=s["operation"], arguments=copy.deepcopy(dict(s["arguments"])))
            for s in data["steps"]
        ),
    )


def plan_fingerprint(plan: Plan) -> str:
    """``"sha256:" + hex`` of the plan's canonical JSON: sorted keys, no spaces, UTF-8, no ASCII
    escaping. Two plans with the same goal, steps and arguments have the same fingerprint however
    their JSON was laid out; ``x-`` annotations are not part of the plan and do not count."""
    canonical = json.dumps(plan.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogatepass: a lone surrogate is valid JSON text ("\\ud800"); it must reach the path checks as a
    # finding, not end validation with a UnicodeEncodeError. Other text encodes exactly as before.
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def reference_of(value: Any) -> str | None:
    """The step id a single value refers to (``"$buffer"`` -> ``"buffer"``), or None."""
    if isinstance(value, str) and value.startswith(REFERENCE_PREFIX) and not value.startswith(ESCAPED_PREFIX):
        return value[len(REFERENCE_PREFIX) :]
    return None


def references(value: Any) -> list[str]:
    """Step ids referenced in an argument value, in order: a whole string, or elements of a list."""
    if isinstance(value, list):
        return [ref for item in value for ref in references(item)]
    ref = reference_of(value)
    return [ref] if ref is not None else []


def _substitute_value(value: Any, outputs: Mapping[str, str]) -> Any:
    if isinstance(value, list):
        return [_substitute_value(v, outputs) for v in value]
    if isinstance(value, str) and value.startswith(ESCAPED_PREFIX):
        return value[1:]
    ref = reference_of(value)
    if ref is None:
        return value
    if ref not in outputs:
        raise ArgumentError(
            f"{value!r} refers to no step that writes a dataset before this one",
            code="DANGLING_REFERENCE",
            evidence={"reference": value, "known": sorted(outputs)},
            hint='refer to an earlier step\'s id as "$<id>"; write "$$text" for a literal "$text"',
        )
    return outputs[ref]


def substitute(arguments: Mapping[str, Any], outputs: Mapping[str, str]) -> dict[str, Any]:
    """The arguments with every ``"$id"`` replaced by ``outputs[id]`` (that step's output_path) and
    every ``"$$text"`` unescaped to ``"$text"``. Raises ``ArgumentError`` (DANGLING_REFERENCE) for a
    reference missing from ``outputs``. Values that are neither strings nor lists pass unchanged."""
    return {key: _substitute_value(value, outputs) for key, value in arguments.items()}
