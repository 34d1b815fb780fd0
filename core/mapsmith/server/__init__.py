"""The MCP front end: a thin shell that parses a tool call, calls the MapSmith service, shapes the reply.

Tool input schemas come from the operation contracts (one truth about what an operation takes).
Domain errors become ``isError`` results carrying ``{code, message, hint, evidence}``. Engine work
runs in a worker thread, so the server keeps answering while it computes. Nothing here computes a
number or imports an engine.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.types import (
    CallToolResult,
    ListResourcesResult,
    ListToolsResult,
    ReadResourceResult,
    Resource,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)

from mapsmith import __version__
from mapsmith.app import MapSmith
from mapsmith.contracts import contracts_root
from mapsmith.errors import ArgumentError, InputError, MapSmithError
from mapsmith.mapview import UI_MIME_TYPE, UI_RESOURCE_META, UI_RESOURCE_URI
from mapsmith.server.models import (
    DiscoveryReply,
    LineageReply,
    MapExportReply,
    MapPreviewReply,
    OperationReply,
    PlanExecutionReply,
    PlanExplanationReply,
    PlanValidationReply,
    ProvenanceReply,
    ReplayReply,
    ServerInfoReply,
    _Reply,
)

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

INSTRUCTIONS = (
    "MapSmith runs geoprocessing on real engines and writes a provenance manifest beside every dataset. "
    "Start with describe_dataset to learn a file's layers and CRS. Distances are in metres whatever the "
    "data's CRS. Errors carry a stable code and a hint: act on the hint rather than retrying unchanged."
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
        "output_kind": {
            "type": "string",
            "enum": _OUTPUT_KINDS,
            "description": "Deprecated: the same as produces.",
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
        "engine": {
            "type": "string",
            "enum": ["auto", "lexical", "vector"],
            "default": "auto",
            "description": "The ranker: auto (vector when it loads, else lexical), lexical (BM25) or vector.",
        },
        "detail": {
            "type": "boolean",
            "default": False,
            "description": "Add each candidate's parameters and a full example.",
        },
    },
    "additionalProperties": False,
}
_GET_PROVENANCE_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "A dataset MapSmith wrote."}},
    "required": ["path"],
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
_EXPORT_MAP_SCHEMA = {
    "type": "object",
    "properties": {
        "paths": _MAP_PATHS,
        "output_path": {"type": "string", "description": "The .html file to write, inside the workspace."},
        "overwrite": {"type": "boolean", "default": False, "description": "Replace output_path and its manifest."},
        **_MAP_OPTIONS,
    },
    "required": ["paths", "output_path"],
    "additionalProperties": False,
}
_EMPTY_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}
_PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "plan": {
            "type": "object",
            "description": 'A plan: {"goal": str, "steps": [{"id", "operation", "arguments"}]}; "$<id>" in an '
            "argument is the output of an earlier step (contracts/schemas/plan.schema.json).",
        }
    },
    "required": ["plan"],
    "additionalProperties": False,
}
_PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "A dataset MapSmith wrote."}},
    "required": ["path"],
    "additionalProperties": False,
}


def _ok(data: dict[str, Any]) -> CallToolResult:
    text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _error(exc: MapSmithError) -> CallToolResult:
    """A refusal as JSON text only, with no ``structuredContent``.

    A tool's ``outputSchema`` describes its successful result; the TypeScript SDK's client validates any
    ``structuredContent`` it receives against that schema, errors included, and throws the whole result
    away (-32602) when it does not match, while it skips validation for ``isError`` results that carry
    none. The Python SDK skips validation for every error. Text-only errors therefore reach every
    conforming client with their code, message, hint and evidence, and each success schema stays exact.
    """
    data = exc.to_dict()
    text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


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
    **{name: OperationReply for name in DEDICATED_OPERATIONS},
}


def build_server(app: MapSmith) -> Server[Any]:
    """The MCP server for one MapSmith service."""
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    def tools() -> list[Tool]:
        out = [
            Tool(
                name="server_info",
                description="MapSmith's version and licence, every stack with its availability and the fix when "
                "missing, and the engines with their versions.",
                input_schema=_EMPTY_SCHEMA,
                annotations=read_only,
            ),
            Tool(
                name="list_operations",
                description="Find the operation for a task. Describe it in query; declare what you know for "
                "certain (input_kind, produces, dataset_count, geometry_types, projected_crs) to narrow the catalog. "
                "status 'choose' lists every remaining operation, ordered; 'ranked' the best and how many more; "
                "'unsure' both rankers' guesses and a question; 'empty' which facet removed what. Each candidate "
                "says what separates it from its neighbours; 'planned' ones do not run yet.",
                input_schema=_LIST_OPERATIONS_SCHEMA,
                annotations=read_only,
            ),
            Tool(
                name="run_operation",
                description="Run any catalog operation by name; the arguments are checked against its contract "
                "before any file is touched. Unknown names are answered with the closest ones.",
                input_schema=_RUN_OPERATION_SCHEMA,
                annotations=writes,
            ),
            Tool(
                name="get_provenance",
                description="The provenance manifest beside a dataset MapSmith wrote, whether the file still "
                "matches its recorded digest, and its lineage walked back by content.",
                input_schema=_GET_PROVENANCE_SCHEMA,
                annotations=read_only,
            ),
            Tool(
                name="validate_plan",
                description="Check a multi-step plan before any file is touched: unknown operations and "
                "arguments, references that point forward or nowhere, missing inputs, outputs that collide, and "
                "steps that cannot accept what the previous ones would produce (CRS, kind, geometry, grid). "
                "Every finding has a code and a hint.",
                input_schema=_PLAN_SCHEMA,
                annotations=read_only,
            ),
            Tool(
                name="explain_plan",
                description="A short narrative of a plan (steps, order, CRS decisions, what is left to decide), "
                "each sentence built from a declared field of the contracts or the plan.",
                input_schema=_PLAN_SCHEMA,
                annotations=read_only,
            ),
            Tool(
                name="execute_plan",
                description="Validate a plan, then run its steps in order exactly as run_operation would, "
                "reporting progress per step; writes each step's manifest and <final output>.plan.json. A "
                "failing step stops the plan and is named.",
                input_schema=_PLAN_SCHEMA,
                annotations=writes,
            ),
            Tool(
                name="get_lineage",
                description="Walk a dataset's history back by content: the record claiming its exact bytes, "
                "then each input's, to the original data; failed checks on the way and where each branch stops.",
                input_schema=_PATH_SCHEMA,
                annotations=read_only,
            ),
            Tool(
                name="replay",
                description="Re-run the chain recorded for a dataset in a scratch folder and compare: identical "
                "digests, or the first step that differs and by how much.",
                input_schema=_PATH_SCHEMA,
                annotations=read_only,
            ),
            Tool(
                name="preview_map",
                description="Show datasets on an interactive map in the chat (an MCP Apps panel; other clients get "
                "the same data): each layer with its provenance state (verified / verification failed / not "
                "verifiable), operation and engine. A lossy preview, and it says how: vectors capped, simplified "
                "and shown in EPSG:4326, rasters as a coloured PNG with a legend.",
                input_schema=_PREVIEW_MAP_SCHEMA,
                annotations=read_only,
                _meta={"ui": {"resourceUri": UI_RESOURCE_URI}},
            ),
            Tool(
                name="export_map",
                description="Write the preview_map panel as one standalone HTML file in the workspace (map library "
                "and data inlined, no CDN) with a provenance manifest naming its inputs by digest.",
                input_schema=_EXPORT_MAP_SCHEMA,
                annotations=writes,
            ),
        ]
        for name in DEDICATED_OPERATIONS:
            contract = app.host.contracts[name]
            out.append(
                Tool(
                    name=name,
                    description=f"{contract.summary} {contract.distinguishes}",
                    input_schema=contract.input_schema(),
                    annotations=read_only if not contract.writes_dataset else writes,
                )
            )
        for tool in out:
            tool.output_schema = REPLY_MODELS[tool.name].model_json_schema()
        return out

    async def run_op(name: str, arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
        from mapsmith.catalog import record_next_operation

        record_next_operation(app, name)  # the discovery log's "what ran next" (a no-op unless it is on)
        # A no-op unless the client sent a progress token.
        await ctx.session.report_progress(0.0, 1.0, f"{name}: checking arguments and inputs")

        def progress(fraction: float, message: str) -> None:
            # Called from the worker thread by engines that report (the Spark engine's stages).
            anyio.from_thread.run(ctx.session.report_progress, fraction, 1.0, f"{name}: {message}")

        result = await anyio.to_thread.run_sync(lambda: app.run(name, arguments, progress))
        await ctx.session.report_progress(1.0, 1.0, f"{name}: {result.status}")
        return result.to_dict()

    handlers: dict[str, Callable[[dict[str, Any], Any], Awaitable[dict[str, Any]]]] = {}

    async def server_info(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(app.server_info)

    async def list_operations(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        args = dict(args)
        legacy = args.pop("output_kind", None)
        if legacy is not None:
            args.setdefault("produces", legacy)
        return await anyio.to_thread.run_sync(lambda: app.discover(**args))

    async def run_operation(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        operation = args.get("operation")
        if not isinstance(operation, str):
            raise ArgumentError(
                "run_operation needs 'operation' (a name from list_operations)",
                code="MISSING_ARGUMENT",
                hint="pass operation='buffer_layer' and its arguments",
            )
        return await run_op(operation, args.get("arguments") or {}, ctx)

    async def get_provenance(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        path = args.get("path")
        if not isinstance(path, str):
            raise ArgumentError("get_provenance needs 'path'", code="MISSING_ARGUMENT", hint="pass the dataset path")
        return await anyio.to_thread.run_sync(lambda: app.get_provenance(path))

    def plan_argument(args: dict[str, Any]) -> dict[str, Any]:
        plan = args.get("plan")
        if not isinstance(plan, dict):
            raise ArgumentError(
                "this tool needs 'plan': an object with 'goal' and 'steps'",
                code="MISSING_ARGUMENT",
                hint='pass plan={"goal": "...", "steps": [{"id": "a", "operation": "...", "arguments": {...}}]}',
            )
        return plan

    def path_argument(args: dict[str, Any], tool: str) -> str:
        path = args.get("path")
        if not isinstance(path, str):
            raise ArgumentError(f"{tool} needs 'path'", code="MISSING_ARGUMENT", hint="pass the dataset path")
        return path

    async def validate_plan(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        plan = plan_argument(args)
        return await anyio.to_thread.run_sync(lambda: app.validate_plan(plan))

    async def explain_plan(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        plan = plan_argument(args)
        return await anyio.to_thread.run_sync(lambda: app.explain_plan(plan))

    async def execute_plan(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        plan = plan_argument(args)

        def progress(fraction: float, message: str) -> None:
            # Called from the worker thread; a no-op unless the client sent a progress token.
            anyio.from_thread.run(ctx.session.report_progress, fraction, 1.0, message)

        result = await anyio.to_thread.run_sync(lambda: app.execute_plan(plan, progress))
        if result.get("status") == "failed":
            failed = result.get("failed_step")
            error = result.get("error") or {}
            raise MapSmithError(
                f"the plan stopped at step {failed!r}: [{error.get('code')}] {error.get('message')}",
                code="PLAN_STEP_FAILED",
                evidence=result,
                hint=error.get("hint") or "fix the step named and run the plan again",
            )
        return result

    async def get_lineage(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        path = path_argument(args, "get_lineage")
        return await anyio.to_thread.run_sync(lambda: app.get_lineage(path))

    async def replay(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        path = path_argument(args, "replay")
        return await anyio.to_thread.run_sync(lambda: app.replay(path))

    def map_arguments(args: dict[str, Any]) -> dict[str, Any]:
        return {k: args[k] for k in ("max_features_per_layer", "simplify_meters", "background") if k in args}

    async def preview_map(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        paths = args.get("paths")
        return await anyio.to_thread.run_sync(lambda: app.preview_map(paths, **map_arguments(args)))

    async def export_map(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        paths, output = args.get("paths"), args.get("output_path")
        overwrite = bool(args.get("overwrite", False))
        return await anyio.to_thread.run_sync(lambda: app.export_map(paths, output, overwrite, **map_arguments(args)))

    handlers.update(
        preview_map=preview_map,
        export_map=export_map,
        server_info=server_info,
        list_operations=list_operations,
        run_operation=run_operation,
        get_provenance=get_provenance,
        validate_plan=validate_plan,
        explain_plan=explain_plan,
        execute_plan=execute_plan,
        get_lineage=get_lineage,
        replay=replay,
    )

    def dedicated(operation: str) -> Callable[[dict[str, Any], Any], Awaitable[dict[str, Any]]]:
        async def handler(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return await run_op(operation, args, ctx)

        return handler

    for op in DEDICATED_OPERATIONS:
        handlers[op] = dedicated(op)

    async def on_list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=tools())

    async def on_call_tool(ctx: Any, params: Any) -> CallToolResult:
        handler = handlers.get(params.name)
        if handler is None:
            from mapsmith.contracts import suggest

            close = suggest(params.name, handlers)
            return _error(
                ArgumentError(
                    f"no tool named {params.name!r}",
                    code="UNKNOWN_TOOL",
                    hint=f"did you mean {', '.join(close)}?" if close else "tools/list shows the tools",
                )
            )
        try:
            data = await handler(dict(params.arguments or {}), ctx)
        except MapSmithError as exc:
            return _error(exc)
        REPLY_MODELS[params.name].model_validate(data)  # never send a shape the output schema does not allow
        return _ok(data)

    async def on_list_resources(ctx: Any, params: Any) -> ListResourcesResult:
        return ListResourcesResult(
            resources=[
                Resource(
                    uri=UI_RESOURCE_URI,
                    name="mapsmith_map_panel",
                    title="MapSmith map panel",
                    description="The interactive map preview_map renders its result in (MCP Apps).",
                    mime_type=UI_MIME_TYPE,
                    _meta=UI_RESOURCE_META,
                )
            ]
        )

    async def on_read_resource(ctx: Any, params: Any) -> ReadResourceResult:
        if str(params.uri) != UI_RESOURCE_URI:
            raise InputError(
                f"no resource {params.uri}",
                code="UNKNOWN_RESOURCE",
                evidence={"uri": str(params.uri)},
                hint=f"resources/list names the one resource: {UI_RESOURCE_URI}",
            )
        from mapsmith.mapview import panel_html

        html = await anyio.to_thread.run_sync(panel_html)
        return ReadResourceResult(
            contents=[
                TextResourceContents(uri=UI_RESOURCE_URI, mime_type=UI_MIME_TYPE, text=html, _meta=UI_RESOURCE_META)
            ]
        )

    return Server(
        "mapsmith",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_read_resource=on_read_resource,
    )


async def serve_stdio(app: MapSmith) -> None:
    from mcp.server.stdio import stdio_server

    from mapsmith.catalog import check_discovery_log

    check_discovery_log(app)  # a refused MAPSMITH_DISCOVERY_LOG is said on stderr at start, not at the first search
    server = build_server(app)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
