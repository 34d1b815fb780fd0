"""The tool list MCP clients are sent: names, human titles, descriptions, input and output schemas.

Every client pays for this list in tokens on every conversation, so it says each thing once:
operation tools take their input schemas and descriptions from the contracts, reply shapes are
compact (``models.published_schema``), and the one reply shape every operation shares is published
on ``run_operation`` only. MCP has no reference from one tool's schema to another's (a ``$ref`` to
a URL would make the TypeScript SDK's Ajv fail to compile it), so the choice was to repeat it on
every operation tool (16 more copies, about 20,000 characters: half as much again as the whole list)
or to publish it once. An output schema is optional, and both SDKs validate structured content only
against a schema that is there; run_operation's description says every operation tool replies in
its schema, and the server validates every reply against the same model before sending.
This module never runs a tool.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from mcp.types import Tool, ToolAnnotations

from mapsmith.contracts import contracts_root
from mapsmith.mapview import UI_RESOURCE_URI
from mapsmith.server.models import (
    DiscoveryReply,
    LineageReply,
    MapExportReply,
    MapPreviewReply,
    OperationReply,
    PlanExecutionReply,
    PlanExplanationReply,
    PlanValidationReply,
    ProposalReply,
    ProvenanceReply,
    ReplayReply,
    ServerInfoReply,
    _Reply,
    published_schema,
)

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

# The operations an agent uses most get a tool of their own; every catalog operation (including
# plugins') is reachable through run_operation.
DEDICATED_OPERATIONS = (
    "describe_dataset",
    "reproject_layer",
    "buffer_layer",
    "clip_layer",
    "measure_area",
    "convert_format",
    "extract_layer",
    "overlay_layers",
    "dissolve_layer",
    "spatial_join",
    "nearest_join",
    "merge_layers",
    "simplify_layer",
    "centroid_layer",
    "select_features",
    "run_sql",
)

_RUN_OPERATION_SCHEMA = {
    "type": "object",
    "properties": {
        "operation": {"type": "string", "description": "An operation name from list_operations."},
        "arguments": {"type": "object", "description": "The operation's arguments, as its contract declares."},
    },
    "required": ["operation"],
    "additionalProperties": False,
}
_KINDS_HELD = ["vector", "raster", "table", "dataset", "plan", "none"]
_OUTPUT_KINDS = ["dataset:vector", "dataset:raster", "answer", "description"]
_CATEGORIES = sorted(
    json.loads(contracts_root().joinpath("schemas", "operation.schema.json").read_text("utf-8"))["properties"][
        "category"
    ]["enum"]
)
_LIST_OPERATIONS_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "default": "",
            "description": "What you want to do, in your own words (your data and your goal). Only ranks.",
        },
        "input_kind": {
            "description": "The data you hold: keeps operations that read at least one of these kinds "
            "('dataset' = any dataset; 'none' = you have no data yet; 'plan' = a multi-step plan).",
            "anyOf": [
                {"type": "string", "enum": _KINDS_HELD},
                {"type": "array", "items": {"type": "string", "enum": _KINDS_HELD}, "minItems": 1},
            ],
        },
        "produces": {
            "description": "What you want back: keeps operations whose result is one of these.",
            "anyOf": [
                {"type": "string", "enum": _OUTPUT_KINDS},
                {"type": "array", "items": {"type": "string", "enum": _OUTPUT_KINDS}, "minItems": 1},
            ],
        },
        "dataset_count": {
            "type": "integer",
            "minimum": 0,
            "description": "How many datasets you will pass; operations taking a list of datasets match any count.",
        },
        "geometry_types": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "description": "Geometry types in your vector data: point, line, polygon (MultiPolygon, LineString "
            "and the like are accepted).",
        },
        "projected_crs": {
            "type": "boolean",
            "description": "Whether your data is in a projected CRS; false removes operations that need one.",
        },
        "category": {
            "type": "string",
            "enum": _CATEGORIES,
            "description": "A category you guess; it only ranks (a small boost), never filters.",
        },
        "detail": {
            "type": "boolean",
            "default": False,
            "description": "Add each candidate's parameters and a full example.",
        },
    },
    "additionalProperties": False,
}
_MAP_OPTIONS: dict[str, Any] = {
    "max_features_per_layer": {
        "type": "integer",
        "minimum": 1,
        "default": 2000,
        "description": "At most this many features per vector layer are drawn (the first ones in file order).",
    },
    "simplify_meters": {
        "type": "number",
        "minimum": 0,
        "description": "Simplification tolerance for drawing, in metres; 0 draws geometries as they are; "
        "left out, one thousandth of the layer's extent.",
    },
    "background": {
        "type": "string",
        "enum": ["osm", "none"],
        "default": "osm",
        "description": "'osm': OpenStreetMap tiles behind the layers (the page's only outbound request); "
        "'none': a plain background and no request at all.",
    },
}
_MAP_PATHS = {
    "type": "array",
    "items": {"type": "string"},
    "minItems": 1,
    "maxItems": 20,
    "description": "Datasets to show (vector or raster), drawn in this order (later on top).",
}
_PREVIEW_MAP_SCHEMA = {
    "type": "object",
    "properties": {"paths": _MAP_PATHS, **_MAP_OPTIONS},
    "required": ["paths"],
    "additionalProperties": False,
}


def _as_in_preview_map(option: dict[str, Any]) -> dict[str, Any]:
    # export_map takes preview_map's options; their meaning is said once, on preview_map.
    return {**option, "description": "As in preview_map."}


_EXPORT_MAP_SCHEMA = {
    "type": "object",
    "properties": {
        "paths": _as_in_preview_map(_MAP_PATHS),
        "output_path": {"type": "string", "description": "The .html file to write, inside the workspace."},
        "overwrite": {"type": "boolean", "default": False, "description": "Replace output_path and its manifest."},
        **{name: _as_in_preview_map(option) for name, option in _MAP_OPTIONS.items()},
    },
    "required": ["paths", "output_path"],
    "additionalProperties": False,
}
_EMPTY_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}
_PROPOSE_SCHEMA = {
    "type": "object",
    "properties": {
        "contract": {"type": "string", "description": "TOML, as an operation contract."},
        "code": {"type": "string", "description": "Python defining <name>(ctx)."},
        "examples": {
            "type": "array",
            "items": {"type": "object"},
            "description": '[{"arguments","expect":{feature_count|total_area_m2|geometry_types|answer},'
            '"tolerance"}], worked by hand.',
        },
    },
    "required": ["contract", "code", "examples"],
    "additionalProperties": False,
}


def _plan_schema(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"plan": {"type": "object", "description": description}},
        "required": ["plan"],
        "additionalProperties": False,
    }


# The plan's form is said once, on validate_plan, the tool an agent calls first.
_VALIDATE_PLAN_SCHEMA = _plan_schema(
    'A plan: {"goal": str, "steps": [{"id", "operation", "arguments"}]}; "$<id>" in an argument is the '
    "output of an earlier step (contracts/schemas/plan.schema.json)."
)
_PLAN_SCHEMA = _plan_schema("A plan, in validate_plan's form.")
_PATH_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "A dataset MapSmith wrote."},
        "layer": {"type": "string", "description": "Its layer, in a container of several."},
    },
    "required": ["path"],
    "additionalProperties": False,
}


REPLY_MODELS: dict[str, type[_Reply]] = {
    "server_info": ServerInfoReply,
    "list_operations": DiscoveryReply,
    "run_operation": OperationReply,
    "get_provenance": ProvenanceReply,
    "validate_plan": PlanValidationReply,
    "explain_plan": PlanExplanationReply,
    "execute_plan": PlanExecutionReply,
    "get_lineage": LineageReply,
    "replay": ReplayReply,
    "preview_map": MapPreviewReply,
    "export_map": MapExportReply,
    "propose_operation": ProposalReply,
    **{name: OperationReply for name in DEDICATED_OPERATIONS},
}

_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def _service_tools() -> list[Tool]:
    return [
        Tool(
            name="server_info",
            title="Versions, stacks and engines",
            description="MapSmith's version and licence, every stack with its availability and the fix when "
            "missing, and the engines with their versions.",
            input_schema=_EMPTY_SCHEMA,
            annotations=_READ_ONLY,
        ),
        Tool(
            name="list_operations",
            title="Find an operation",
            description="Find an operation: describe the task in query; declare only what you know for certain. "
            "status 'choose' lists all that remain; 'ranked' the best, how many more; 'unsure' (thin support) "
            "both rankers' guesses; 'none' nothing fits; 'relaxed' produces was dropped; 'empty' which facet "
            "removed what. 'planned' won't run yet.",
            input_schema=_LIST_OPERATIONS_SCHEMA,
            annotations=_READ_ONLY,
        ),
        Tool(
            name="run_operation",
            title="Run any operation",
            description="Run any catalog operation by name; the arguments are checked against its contract "
            "before any file is touched. Unknown names are answered with the closest ones. Every operation tool "
            "(buffer_layer, run_sql, ...) replies in this tool's output schema; one that writes takes "
            "output_path, with its provenance manifest written beside it, and overwrite, which replaces an "
            "earlier output and manifest but never an input. Their argument notes are abridged; "
            "list_operations gives each operation's parameters whole.",
            input_schema=_RUN_OPERATION_SCHEMA,
            annotations=_WRITES,
        ),
        Tool(
            name="get_provenance",
            title="Read a dataset's provenance",
            description="The provenance manifest beside a dataset MapSmith wrote, whether the file still "
            "matches its recorded digest, and its lineage walked back by content.",
            input_schema=_PATH_SCHEMA,
            annotations=_READ_ONLY,
        ),
        Tool(
            name="validate_plan",
            title="Check a plan",
            description="Check a multi-step plan before any file is touched: unknown operations and "
            "arguments, forward or dangling references, missing inputs, colliding outputs, and steps that "
            "cannot take what earlier ones produce (CRS, kind, geometry, grid). Each finding has a code and a hint.",
            input_schema=_VALIDATE_PLAN_SCHEMA,
            annotations=_READ_ONLY,
        ),
        Tool(
            name="explain_plan",
            title="Explain a plan",
            description="A short narrative of a plan (steps, order, CRS decisions, what is left to decide), "
            "each sentence built from a declared field of the contracts or the plan.",
            input_schema=_PLAN_SCHEMA,
            annotations=_READ_ONLY,
        ),
        Tool(
            name="execute_plan",
            title="Run a plan",
            description="Validate a plan, then run its steps in order exactly as run_operation would, "
            "reporting progress per step; writes each step's manifest and <final output>.plan.json. A "
            "failing step stops the plan and is named.",
            input_schema=_PLAN_SCHEMA,
            annotations=_WRITES,
        ),
        Tool(
            name="get_lineage",
            title="Trace a dataset's lineage",
            description="Walk a dataset's history back by content: the record claiming its exact bytes, "
            "then each input's, to the original data; failed checks on the way and where each branch stops.",
            input_schema=_PATH_SCHEMA,
            annotations=_READ_ONLY,
        ),
        Tool(
            name="replay",
            title="Re-run and compare a dataset's history",
            description="Re-run the chain recorded for a dataset in a scratch folder and compare: identical "
            "digests, or the first step that differs and by how much.",
            input_schema=_PATH_SCHEMA,
            annotations=_READ_ONLY,
        ),
        Tool(
            name="preview_map",
            title="Show datasets on a map",
            description="Show datasets on an interactive map in the chat (an MCP Apps panel; other clients get "
            "the same data), each layer with its provenance state, operation and engine. Lossy, and says how: "
            "vectors capped, simplified, in EPSG:4326; rasters as a coloured PNG with a legend.",
            input_schema=_PREVIEW_MAP_SCHEMA,
            annotations=_READ_ONLY,
            _meta={"ui": {"resourceUri": UI_RESOURCE_URI}},
        ),
        Tool(
            name="export_map",
            title="Export a map as HTML",
            description="Write the preview_map panel as one standalone HTML file in the workspace (map library "
            "and data inlined, no CDN) with a provenance manifest naming its inputs by digest.",
            input_schema=_EXPORT_MAP_SCHEMA,
            annotations=_WRITES,
        ),
        Tool(
            name="propose_operation",
            title="Propose an operation",
            description="Add a missing operation: your code runs each example twice in a sandbox (no network, "
            "read-only inputs, limits); if the answers hold it joins this workspace's catalogue as experimental.",
            input_schema=_PROPOSE_SCHEMA,
            annotations=_WRITES,
        ),
    ]


def _tool_description(contract: Any) -> str:
    """The summary, then what sets the operation apart from its neighbours.

    A contract's ``distinguishes`` sentence opens by restating what the operation does (for the
    catalogue's rankers, which read it alone) and then, after a semicolon, names its neighbours; the
    summary already says the first part, so a tool description takes only the second.
    """
    apart = contract.distinguishes
    if ";" in apart:
        tail = apart.split(";", 1)[1].strip()
        apart = tail[:1].upper() + tail[1:]
    return f"{contract.summary} {apart}"


# A dedicated tool's argument notes keep their whole sentences up to this many characters; the rest is
# in list_operations (its candidates' ``parameters``) and in run_operation's refusals. Measured: the
# full notes cost about 5,600 characters of tools/list (a seventh of its budget), mostly in syntax
# notes an agent reads when it uses that argument, not when it picks a tool. Lowered from 180 when
# propose_operation joined the list (its ~950 characters; 150 saves about 800 across the operation tools).
ABRIDGED_NOTE_CHARS = 150


def list_tools(app: MapSmith) -> list[Tool]:
    """Every tool, in the order a client lists them: the service tools, then one per dedicated operation."""
    tools = _service_tools()
    for tool in tools:
        tool.output_schema = published_schema(REPLY_MODELS[tool.name])
    for name in DEDICATED_OPERATIONS:
        contract = app.host.contracts[name]
        tools.append(
            Tool(
                name=name,
                title=contract.title,
                description=_tool_description(contract),
                input_schema=contract.input_schema(note_chars=ABRIDGED_NOTE_CHARS),
                annotations=_WRITES if contract.writes_dataset else _READ_ONLY,
            )
        )
    return tools
