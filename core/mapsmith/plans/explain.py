"""Explain a valid plan in a few sentences, each built only from declared fields.

Every sentence is a fixed template filled with values read from the plan itself (``plan.goal``,
``step:<id>.arguments.<name>``), from the operations' contracts (``contract:<operation>.summary``,
``.crs_effect``, ``.needs_projected_crs``, ``.checks``, ``.output.kind``,
``.parameters.<name>.default`` / ``.choices`` / ``.unit``) or from what validation simulated
(``step:<id>.inputs.<slot>.<fact>``, ``step:<id>.output.<fact>``, ``step:<id>.defaults.<name>``).
Each sentence lists those sources in ``from``, and every value it quotes is one of them, so a
reader (or a test) can trace each word that is not template back to a field. Nothing here may
invent a fact: what a contract does not declare is not said. An invalid plan gets its findings
instead of a narrative.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mapsmith.contracts import OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT, OperationContract
from mapsmith.plans.validate import validate_plan

if TYPE_CHECKING:
    from mapsmith.app import MapSmith


def show(value: Any) -> str:
    """How a quoted value is written in a sentence: text as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


class _Narrator:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def say(self, text: str, sources: list[str], step: str | None = None) -> None:
        self.items.append({"text": text, "from": sources, "step": step})


def explain_plan(app: MapSmith, plan_data: Mapping[str, Any]) -> dict[str, Any]:
    """``{valid, fingerprint, findings, narrative, decisions_left}`` for a plan.

    ``narrative`` and ``decisions_left`` are lists of ``{"text", "from", "step"}``; both are empty
    (and ``findings`` is not) when the plan does not validate.
    """
    validation = validate_plan(app, plan_data)
    result: dict[str, Any] = {
        "valid": validation.valid,
        "fingerprint": validation.fingerprint,
        "findings": [f.to_dict() for f in validation.findings],
        "narrative": [],
        "decisions_left": [],
    }
    if not validation.valid or validation.plan is None:
        return result
    story, left = _Narrator(), _Narrator()
    story.say(f"Goal: {validation.plan.goal}", ["plan.goal"])
    order = ", ".join(f"{s['id']} ({s['operation']})" for s in validation.steps)
    story.say(
        f"The plan runs {len(validation.steps)} steps in this order: {order}.",
        [f"step:{s['id']}.operation" for s in validation.steps],
    )
    for number, step in enumerate(validation.steps, start=1):
        contract = app.router.contract(step["operation"])
        _narrate_step(story, number, step, contract)
        _decisions(left, step, contract)
    last = next((s for s in reversed(validation.steps) if s["output_path"] is not None), None)
    if last is not None:
        story.say(
            f"The final output is {last['output_path']}, written by step '{last['id']}'.",
            [f"step:{last['id']}.arguments.{OUTPUT_ARGUMENT}"],
        )
    result["narrative"] = story.items
    result["decisions_left"] = left.items
    return result


def _dataset_facts(facts: Mapping[str, Any], prefix: str) -> tuple[str, list[str]]:
    """ "a vector dataset in EPSG:4326 holding polygon", with the sources of the known facts."""
    text, sources = f"a {facts['kind']} dataset", [f"{prefix}.kind"]
    if facts.get("crs") is not None:
        text += f" in {facts['crs']}"
        sources.append(f"{prefix}.crs")
    else:
        text += " whose CRS is known only once it is written"
    if facts.get("geometry_types"):
        text += f" holding {', '.join(facts['geometry_types'])} geometries"
        sources.append(f"{prefix}.geometry_types")
    grid = facts.get("grid")
    if grid and grid.get("width") is not None and grid.get("cell_size"):
        text += f" of {grid['width']} x {grid['height']} cells of {' x '.join(show(c) for c in grid['cell_size'])}"
        sources += [f"{prefix}.grid.width", f"{prefix}.grid.height", f"{prefix}.grid.cell_size"]
    return text, sources


def _narrate_step(story: _Narrator, number: int, step: Mapping[str, Any], contract: OperationContract) -> None:
    sid, op = step["id"], contract.name
    story.say(
        f"Step {number}, '{sid}', runs {op}: {contract.summary}",
        [f"step:{sid}.operation", f"contract:{op}.summary"],
        sid,
    )
    for slot, facts in step["inputs"].items():
        prefix = f"step:{sid}.inputs.{slot}"
        what, sources = _dataset_facts(facts, prefix)
        if facts.get("from_step"):
            text = f"It reads {slot} from the output of step '{facts['from_step']}', {facts['path']}: {what}."
            sources = [f"{prefix}.from_step", f"{prefix}.path", *sources]
        else:
            text = f"It reads {slot} from {facts['path']}: {what}."
            sources = [f"{prefix}.path", *sources]
        story.say(text, sources, sid)
    given = [
        name
        for name in step["arguments"]
        if contract.dataset(name) is None and name not in (OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT)
    ]
    if given:
        parts, sources = [], []
        for name in given:
            param = next((p for p in contract.parameters if p.name == name), None)
            unit = f" ({param.unit})" if param is not None and param.unit else ""
            parts.append(f"{name} = {show(step['arguments'][name])}{unit}")
            sources.append(f"step:{sid}.arguments.{name}")
            if unit:
                sources.append(f"contract:{op}.parameters.{name}.unit")
        story.say(f"It is given {'; '.join(parts)}.", sources, sid)
    _narrate_crs(story, step, contract)
    output = step["output"]
    if contract.writes_dataset:
        what, sources = _dataset_facts(output, f"step:{sid}.output")
        story.say(
            f"It writes {step['output_path']} ({contract.output_kind}): {what}; the written file is checked for "
            f"{', '.join(contract.checks)}.",
            [
                f"step:{sid}.arguments.{OUTPUT_ARGUMENT}",
                f"contract:{op}.output.kind",
                *sources,
                f"contract:{op}.checks",
            ],
            sid,
        )
    else:
        story.say(
            f"It writes no dataset: its result is {contract.output_kind}, returned to the caller.",
            [f"contract:{op}.output.kind"],
            sid,
        )


def _narrate_crs(story: _Narrator, step: Mapping[str, Any], contract: OperationContract) -> None:
    sid, op = step["id"], contract.name
    effect = [f"contract:{op}.crs_effect"]
    out_crs = step["output"].get("crs")
    if contract.crs_effect == "preserves" and out_crs is not None:
        story.say(
            f"crs_effect preserves: its output keeps the CRS of its main input, {out_crs}.",
            [*effect, f"step:{sid}.output.crs"],
            sid,
        )
    elif contract.crs_effect == "transforms" and "target_crs" in step["arguments"]:
        story.say(
            f"crs_effect transforms: its output is in target_crs {step['arguments']['target_crs']}, that is {out_crs}.",
            [*effect, f"step:{sid}.arguments.target_crs", f"step:{sid}.output.crs"],
            sid,
        )
    elif contract.crs_effect == "transforms":
        story.say(
            "crs_effect transforms: its output CRS is chosen when it runs and recorded in its manifest.",
            effect,
            sid,
        )
    elif contract.crs_effect == "none":
        story.say("crs_effect none: it does not set a CRS.", effect, sid)
    if contract.needs_projected_crs:
        for slot, facts in step["inputs"].items():
            if facts.get("kind") == "raster" and facts.get("crs") is not None:
                story.say(
                    f"needs_projected_crs = true: {op} computes in metres, and {slot} is in {facts['crs']}.",
                    [f"contract:{op}.needs_projected_crs", f"step:{sid}.inputs.{slot}.crs"],
                    sid,
                )


def _decisions(left: _Narrator, step: Mapping[str, Any], contract: OperationContract) -> None:
    """What the plan leaves to the operation's declared defaults, or leaves unset among declared choices."""
    sid, op = step["id"], contract.name
    for param in contract.parameters:
        if param.name in step["arguments"]:
            continue
        choices = f"; its choices are {', '.join(show(c) for c in param.choices)}" if param.choices else ""
        choice_source = [f"contract:{op}.parameters.{param.name}.choices"] if param.choices else []
        if param.has_default:
            left.say(
                f"Step '{sid}' leaves {param.name} of {op} at its default, {show(param.default)}{choices}.",
                [f"step:{sid}.defaults.{param.name}", f"contract:{op}.parameters.{param.name}.default", *choice_source],
                sid,
            )
        elif param.choices:
            left.say(
                f"Step '{sid}' does not set {param.name} of {op}{choices}.",
                choice_source,
                sid,
            )
