"""The shapes of successful tool replies, published to MCP clients as output schemas.

Each reply the server sends is validated against its model before it leaves, so a client that
checks structured content against the schema never sees a shape the schema does not describe.
Errors are not described here: they are ``isError`` results carrying ``{code, message, hint}``.

``published_schema`` is the schema a client is sent: pydantic's JSON Schema with what only costs
tokens taken out (generated titles, ``$defs`` indirection, ``additionalProperties: true``, null
defaults, class docstrings). Pydantic has switches for titles but none that inlines ``$defs`` or
drops the rest, so the walk is written here; it never changes what the schema accepts.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class _Reply(BaseModel):
    model_config = ConfigDict(extra="allow")


class CheckReply(_Reply):
    name: str
    passed: bool
    detail: str
    critical: bool | None = None
    argument: str | None = None
    hint: str | None = None


class WarningReply(_Reply):
    code: str
    message: str
    hint: str


class EngineReply(_Reply):
    name: str
    version: str
    stack: str


class OperationReply(_Reply):
    """What every operation returns: where it wrote, what it answered, what it checked."""

    operation: str
    status: Literal["ok", "ok_with_warnings"]
    output_path: str | None
    manifest_path: str | None
    answer: dict[str, Any]
    checks: list[CheckReply]
    warnings: list[WarningReply]
    repairs: list[dict[str, Any]]
    engine: EngineReply
    crs_decisions: dict[str, Any]
    notes: list[str]


class StackReply(_Reply):
    name: str
    summary: str
    selected: bool
    available: bool
    reason: str | None
    fix: str | None
    details: dict[str, Any]


class ServerInfoReply(_Reply):
    name: str
    version: str
    licence: str
    stack: str
    fallback_stack: str | None
    workspace: str | None
    stacks: list[StackReply]
    engines: dict[str, dict[str, str]]
    plugins: list[dict[str, str]]
    operations: int


class OperationSummaryReply(_Reply):
    operation: str
    status: Literal["available", "planned"]
    summary: str
    category: str
    distinguishes: str
    input_kinds: list[str]
    output_kind: str
    stacks: list[str]


class OperationListReply(_Reply):
    count: int
    operations: list[OperationSummaryReply]


class CandidateReply(_Reply):
    operation: str
    status: Literal["available", "planned"]
    distinguishes: str
    score: float


class DiscoveryReply(_Reply):
    status: Literal["choose", "ranked", "unsure", "relaxed", "none", "empty"]
    engine: Literal["lexical", "vector", "fusion"]
    query: str
    candidates: list[CandidateReply]
    count: int
    remaining: int
    more: int
    facets_applied: dict[str, Any]
    removed_by: dict[str, Any]
    message: str
    notes: list[str]


class ProvenanceReply(_Reply):
    manifest_path: str
    manifest: dict[str, Any]
    conforms: bool
    problems: list[str]
    output_matches: bool
    output_sha256_now: str
    lineage: dict[str, Any]


class FindingReply(_Reply):
    code: str
    message: str
    hint: str
    step: str | None = None
    argument: str | None = None
    evidence: dict[str, Any] = {}


class PlanValidationReply(_Reply):
    """validate_plan: every finding, and what would flow between the steps."""

    valid: bool
    findings: list[FindingReply]
    steps: list[dict[str, Any]]
    fingerprint: str | None = None


class PlanExplanationReply(_Reply):
    valid: bool
    findings: list[FindingReply]
    narrative: list[dict[str, Any]]


class PlanExecutionReply(_Reply):
    """execute_plan: each step's result and manifest, and the plan manifest beside the final output."""

    status: str
    steps: list[dict[str, Any]]


class LineageReply(_Reply):
    hops: list[dict[str, Any]]


class ReplayReply(_Reply):
    identical: bool


class MapProvenanceReply(_Reply):
    state: Literal["verified", "verification_failed", "not_verifiable"]
    state_label: str
    reason: str
    operation: str | None
    engine: dict[str, Any] | None
    manifest_path: str | None
    critical_checks: int
    critical_passed: int
    failed_checks: list[dict[str, Any]]
    sha256: str


class MapLayerReply(_Reply):
    name: str
    path: str
    kind: Literal["vector", "raster"]
    bounds: list[float] | None
    lossy: str
    provenance: MapProvenanceReply
    vector: dict[str, Any] | None = None
    raster: dict[str, Any] | None = None


class MapPreviewReply(_Reply):
    """preview_map: the panel's data, also for clients without MCP Apps (layers, states, bounds, the preview)."""

    layers: list[MapLayerReply]
    bounds: list[float] | None
    display_crs: str
    states: dict[str, int]
    background: dict[str, Any]
    ui_resource: str
    notes: list[str]


class MapExportReply(_Reply):
    operation: Literal["export_map"]
    status: Literal["ok"]
    output_path: str
    manifest_path: str
    bytes: int
    checks: list[CheckReply]
    layers: list[dict[str, Any]]
    states: dict[str, int]
    notes: list[str]


class ProposalReply(_Reply):
    name: str
    status: Literal["registered", "already_registered"]


@cache
def published_schema(model: type[_Reply]) -> dict[str, Any]:
    """The compact output schema of ``model``, accepting exactly what ``model_json_schema()`` accepts."""
    full = model.model_json_schema()
    return _compact(full, full.get("$defs", {}))


# Keywords that annotate a schema without constraining it (pydantic's generated titles, class docstrings,
# defaults), and ``$defs``, whose entries are inlined where they are referenced.
_DROPPED = ("title", "description", "default", "$defs")


def _compact(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_compact(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        # Reply models are not recursive, so every reference can be replaced by what it names.
        return _compact(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or (key == "additionalProperties" and value is True):  # true is the default
            continue
        if key == "properties":  # its keys are field names, never keywords
            out[key] = {name: _compact(sub, defs) for name, sub in value.items()}
            continue
        out[key] = _compact(value, defs)
    if "type" in out and ("enum" in out or "const" in out):
        del out["type"]  # pydantic adds it to Literal fields; the values already say it
    return _nullable_as_type_list(out)


def _nullable_as_type_list(schema: dict[str, Any]) -> dict[str, Any]:
    # pydantic writes ``X | None`` as anyOf[{type: X}, {type: null}]; a type list says the same in half the text.
    options = schema.get("anyOf")
    if not options or len(options) != 2 or {"type": "null"} not in options:
        return schema
    other = options[0] if options[1] == {"type": "null"} else options[1]
    if set(other) != {"type"} or not isinstance(other["type"], str):
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**rest, "type": [other["type"], "null"]}
