"""The MCP front end: a thin shell that parses a tool call, calls the MapSmith service, shapes the reply.

The tool list itself (names, titles, schemas) is ``server.tools``. Domain errors become ``isError``
results carrying ``{code, message, hint, evidence}`` as JSON text. Engine work runs in a worker thread,
so the server keeps answering while it computes. Nothing here computes a number or imports an engine.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
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
)

from mapsmith import __version__
from mapsmith.app import MapSmith
from mapsmith.errors import ArgumentError, InputError, MapSmithError, redact_error
from mapsmith.mapview import UI_MIME_TYPE, UI_RESOURCE_META, UI_RESOURCE_URI
from mapsmith.provenance.reading import json_safe
from mapsmith.sandbox import run_cancellable
from mapsmith.server.tools import DEDICATED_OPERATIONS, REPLY_MODELS, list_tools

INSTRUCTIONS = (
    "MapSmith runs geoprocessing on real engines and writes a provenance manifest beside every dataset. "
    "Start with describe_dataset to learn a file's layers and CRS. Distances are in metres whatever the "
    "data's CRS. Errors carry a stable code and a hint: act on the hint rather than retrying unchanged."
)


def _json_text(data: dict[str, Any]) -> str:
    # Compact: the text is read by a model, and indentation is a third of an indented reply's tokens.
    return json.dumps(data, separators=(",", ":"), default=str, ensure_ascii=False)


def unknown_tool(app: MapSmith, name: str, arguments: dict[str, Any], tools: Iterable[str]) -> ArgumentError:
    """The refusal of a tool name the server does not have, with the call that would have worked.

    A catalogue operation without a tool of its own is one ``run_operation`` call away: the refusal
    carries that exact call (the caller's own arguments) and the operation's arguments schema, so the
    agent can retry without reading the catalogue. Any other name gets the closest tools and operations.
    """
    contract = app.host.contracts.get(name)
    if contract is not None:
        call = {"operation": name, "arguments": arguments}
        planned = " (it is planned and does not run yet)" if contract.status == "planned" else ""
        return ArgumentError(
            f"no tool named {name!r}; {name} is a catalogue operation{planned}, run through run_operation",
            code="UNKNOWN_TOOL",
            evidence={
                "tool": name,
                "operation": name,
                "status": contract.status,
                "run_operation": call,
                "arguments_schema": contract.input_schema(),
            },
            hint=f"call run_operation with {json.dumps(call, separators=(',', ':'), default=str)}; "
            "evidence.arguments_schema lists the arguments it takes",
        )
    from mapsmith.contracts import suggest

    tool_names = list(tools)
    close_tools = suggest(name, tool_names)
    close_operations = [op for op in suggest(name, app.host.contracts) if op not in tool_names]
    offers = [f"tool {t}" for t in close_tools] + [f"run_operation with operation={op!r}" for op in close_operations]
    return ArgumentError(
        f"no tool named {name!r}",
        code="UNKNOWN_TOOL",
        evidence={"tool": name, "close_tools": close_tools, "close_operations": close_operations},
        hint=f"did you mean {' or '.join(offers)}?"
        if offers
        else "tools/list shows the tools; list_operations finds an operation for run_operation",
    )


def _ok(data: dict[str, Any]) -> CallToolResult:
    # File names with undecodable bytes are escaped here, so no name in a workspace can break the session.
    data = json_safe(data)
    return CallToolResult(content=[TextContent(type="text", text=_json_text(data))], structured_content=data)


def _error(exc: MapSmithError) -> CallToolResult:
    """A refusal as JSON text only, with no ``structuredContent``.

    A tool's ``outputSchema`` describes its successful result; the TypeScript SDK's client validates any
    ``structuredContent`` it receives against that schema, errors included, and throws the whole result
    away (-32602) when it does not match, while it skips validation for ``isError`` results that carry
    none. The Python SDK skips validation for every error. Text-only errors therefore reach every
    conforming client with their code, message, hint and evidence, and each success schema stays exact.
    """
    return CallToolResult(content=[TextContent(type="text", text=_json_text(json_safe(exc.to_dict())))], is_error=True)


def build_server(app: MapSmith) -> Server[Any]:
    """The MCP server for one MapSmith service."""

    async def run_op(name: str, arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
        from mapsmith.catalog import record_next_operation

        record_next_operation(app, name)  # the discovery log's "what ran next" (a no-op unless it is on)
        # A no-op unless the client sent a progress token.
        await ctx.session.report_progress(0.0, 1.0, f"{name}: checking arguments and inputs")

        def progress(fraction: float, message: str) -> None:
            # Called from the worker thread by engines that report (the Spark engine's stages).
            anyio.from_thread.run(ctx.session.report_progress, fraction, 1.0, f"{name}: {message}")

        result = await run_cancellable(app, lambda: app.run(name, arguments, progress))
        await ctx.session.report_progress(1.0, 1.0, f"{name}: {result.status}")
        return result.to_dict()

    handlers: dict[str, Callable[[dict[str, Any], Any], Awaitable[dict[str, Any]]]] = {}

    async def server_info(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(app.server_info)

    async def list_operations(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        args = dict(args)
        legacy = args.pop("output_kind", None)  # the old name of produces: still taken, no longer listed
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
        return await run_cancellable(app, lambda: app.get_provenance(path, layer_argument(args)))

    def plan_argument(args: dict[str, Any]) -> dict[str, Any]:
        plan = args.get("plan")
        if not isinstance(plan, dict):
            raise ArgumentError(
                "this tool needs 'plan': an object with 'goal' and 'steps'",
                code="MISSING_ARGUMENT",
                hint='pass plan={"goal": "...", "steps": [{"id": "a", "operation": "...", "arguments": {...}}]}',
            )
        return plan

    def layer_argument(args: dict[str, Any]) -> Any:
        return args.get("layer")  # checked by the app: a wrong type is refused, not ignored

    def path_argument(args: dict[str, Any], tool: str) -> str:
        path = args.get("path")
        if not isinstance(path, str):
            raise ArgumentError(f"{tool} needs 'path'", code="MISSING_ARGUMENT", hint="pass the dataset path")
        return path

    async def validate_plan(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        plan = plan_argument(args)
        return await run_cancellable(app, lambda: app.validate_plan(plan))

    async def explain_plan(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        plan = plan_argument(args)
        return await run_cancellable(app, lambda: app.explain_plan(plan))

    async def execute_plan(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        plan = plan_argument(args)

        def progress(fraction: float, message: str) -> None:
            # Called from the worker thread; a no-op unless the client sent a progress token.
            anyio.from_thread.run(ctx.session.report_progress, fraction, 1.0, message)

        result = await run_cancellable(app, lambda: app.execute_plan(plan, progress))
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
        return await run_cancellable(app, lambda: app.get_lineage(path, layer_argument(args)))

    async def replay(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        path = path_argument(args, "replay")
        return await run_cancellable(app, lambda: app.replay(path, layer_argument(args)))

    def map_arguments(args: dict[str, Any]) -> dict[str, Any]:
        return {k: args[k] for k in ("max_features_per_layer", "simplify_meters", "background") if k in args}

    async def preview_map(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        paths = args.get("paths")
        return await run_cancellable(app, lambda: app.preview_map(paths, **map_arguments(args)))

    async def export_map(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        paths, output = args.get("paths"), args.get("output_path")
        overwrite = bool(args.get("overwrite", False))
        return await run_cancellable(app, lambda: app.export_map(paths, output, overwrite, **map_arguments(args)))

    async def propose_operation(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        contract, code, examples = args.get("contract"), args.get("code"), args.get("examples")
        return await run_cancellable(app, lambda: app.propose_operation(contract, code, examples))

    handlers.update(
        propose_operation=propose_operation,
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
        return ListToolsResult(tools=list_tools(app))

    async def on_call_tool(ctx: Any, params: Any) -> CallToolResult:
        handler = handlers.get(params.name)
        if handler is None:
            # In a worker thread: looking the name up may load a plugin's toolbox (QGIS lists its algorithms).
            arguments = dict(params.arguments or {})
            refusal = await anyio.to_thread.run_sync(lambda: unknown_tool(app, params.name, arguments, handlers))
            return _error(refusal)
        try:
            data = await handler(dict(params.arguments or {}), ctx)
        except MapSmithError as exc:
            # Every refusal, whichever tool and process raised it, leaves with host paths redacted.
            return _error(redact_error(exc, app.workspace.root))
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
