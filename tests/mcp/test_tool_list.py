"""What ``tools/list`` costs a client, and what the lean list still tells it.

One real MCP client session (``python -m mapsmith`` over stdio) lists the tools and makes a few calls;
the tests read that conversation. The budget is measured on the reply as the client holds it,
serialised as compact JSON: ``TOKENS = characters / 4``. No tokenizer can be installed here
(tiktoken downloads its vocabulary), so the measure is stated rather than borrowed, and the raw
character count is what the test compares.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from shapely.geometry import Point, box

from layers import read, write_layer
from mcp_client import Reply, call, mcp_session

pytestmark = pytest.mark.mcp

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DATA = REPO / "core" / "mapsmith" / "examples" / "data"

# 10,000 tokens at 4 characters a token. Before this budget the list was 83,652 characters.
BUDGET_CHARS = 40_000
CHARS_PER_TOKEN = 4

SQUARE_A = box(0, 0, 100, 100)
SQUARE_B = box(200, 0, 300, 100)
# Three points inside A, none inside B, one in neither: point_count is 3 for A and 0 for B.
POINTS = [Point(10, 10), Point(50, 50), Point(90, 20), Point(150, 50)]
COUNT_ARGUMENTS = {"input_path": "squares.gpkg", "points_path": "points.gpkg", "output_path": "counts.gpkg"}


@dataclass
class Conversation:
    workspace: Path
    listed: dict[str, Any] = field(default_factory=dict)  # the tools/list result as JSON
    tools: dict[str, Any] = field(default_factory=dict)
    replies: dict[str, Reply] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)  # each reply's text content as sent


async def converse(workspace: Path) -> Conversation:
    c = Conversation(workspace)
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "buffer": ("buffer_layer", {"input_path": "river.geojson", "distance_meters": 100, "output_path": "b.gpkg"}),
        "run_buffer": (
            "run_operation",
            {
                "operation": "buffer_layer",
                "arguments": {"input_path": "river.geojson", "distance_meters": 50, "output_path": "b50.gpkg"},
            },
        ),
        "server_info": ("server_info", {}),
        "catalog": ("list_operations", {"query": "count points in polygons"}),
        "catalog_detail": ("list_operations", {"query": "count points in polygons", "detail": True}),
        "validate": (
            "validate_plan",
            {
                "plan": {
                    "goal": "a corridor",
                    "steps": [
                        {
                            "id": "a",
                            "operation": "buffer_layer",
                            "arguments": {
                                "input_path": "river.geojson",
                                "distance_meters": 10,
                                "output_path": "plan_b.gpkg",
                            },
                        }
                    ],
                }
            },
        ),
        "operation_as_tool": ("count_in_polygons", COUNT_ARGUMENTS),
        "misspelt_tool": ("bufer_layer", {"input_path": "river.geojson"}),
        "misspelt_operation_as_tool": ("count_in_polygon", {}),
        "nothing_close": ("zzzz", {}),
    }
    async with mcp_session(workspace) as (session, _init):
        listed = await session.list_tools()
        c.listed = listed.model_dump(mode="json", by_alias=True, exclude_none=True)
        c.tools = {t["name"]: t for t in c.listed["tools"]}
        for key, (tool, arguments) in calls.items():
            result = await session.call_tool(tool, arguments)
            c.texts[key] = result.content[0].text
            c.replies[key] = _reply(result)
        # The clean twin of "operation_as_tool": the call the refusal hands back, made as given.
        suggested = c.replies["operation_as_tool"].data["evidence"]["run_operation"]
        c.replies["suggested_call"] = await call(session, "run_operation", suggested)
    return c


def _reply(result: Any) -> Reply:
    text = json.loads(result.content[0].text)
    if result.is_error:
        assert result.structured_content is None  # tests/mcp_client.py says why
        return Reply(True, text, text)
    return Reply(False, result.structured_content or {}, text)


@pytest.fixture(scope="module")
def conversation(tmp_path_factory: pytest.TempPathFactory) -> Conversation:
    ws = tmp_path_factory.mktemp("toollist") / "ws"
    ws.mkdir()
    shutil.copyfile(EXAMPLE_DATA / "river.geojson", ws / "river.geojson")
    write_layer(ws / "squares.gpkg", [SQUARE_A, SQUARE_B], "EPSG:32633", name=["A", "B"])
    write_layer(ws / "points.gpkg", POINTS, "EPSG:32633", id=[1, 2, 3, 4])
    return anyio.run(converse, ws)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# -- the budget ------------------------------------------------------------------------------------


def test_the_whole_tool_list_fits_the_token_budget(conversation: Conversation) -> None:
    chars = len(_compact(conversation.listed))
    tokens = chars / CHARS_PER_TOKEN
    assert chars <= BUDGET_CHARS, f"tools/list is {chars} characters (~{tokens:.0f} tokens), budget {BUDGET_CHARS}"
    # The reply is not trivially small either: 28 tools, each with a schema.
    assert len(conversation.tools) == 28 and chars > 20_000


def test_no_output_schema_is_repeated_and_none_carries_generated_annotations(conversation: Conversation) -> None:
    schemas = [_compact(t["outputSchema"]) for t in conversation.tools.values() if "outputSchema" in t]
    assert len(schemas) == len(set(schemas)) == 12  # one per service tool; operations share run_operation's
    for name, tool in conversation.tools.items():
        text = _compact(tool.get("outputSchema", {}))
        for keyword in ('"title":', '"$defs":', '"$ref":', '"description":', '"additionalProperties":true'):
            assert keyword not in text, (name, keyword)


def test_every_tool_has_a_short_human_title(conversation: Conversation) -> None:
    titles = {name: tool.get("title") for name, tool in conversation.tools.items()}
    assert all(titles.values()), [n for n, t in titles.items() if not t]
    assert len(set(titles.values())) == len(titles)  # no two tools look alike in a client's picker
    for name, title in titles.items():
        assert 3 <= len(title) <= 40 and "_" not in title and title[0].isupper(), (name, title)
    # the contract's declared title, not one derived from the name
    assert titles["buffer_layer"] == "Buffer features"
    assert titles["run_sql"] == "Run spatial SQL"
    assert titles["list_operations"] == "Find an operation"


def test_no_sentence_is_repeated_across_tool_descriptions(conversation: Conversation) -> None:
    seen: dict[str, str] = {}
    for name, tool in conversation.tools.items():
        for sentence in re.split(r"(?<=[.;:])\s+", tool["description"]):
            if len(sentence) < 25:
                continue
            assert sentence not in seen, f"{name} repeats {seen[sentence]}: {sentence!r}"
            seen[sentence] = name


def test_input_schemas_keep_units_bounds_enums_and_defaults(conversation: Conversation) -> None:
    # Values from contracts/operations/buffer_layer.toml and spatial_join.toml, read by eye.
    buffer = conversation.tools["buffer_layer"]["inputSchema"]
    distance = buffer["properties"]["distance_meters"]
    assert distance["type"] == "number" and distance["exclusiveMinimum"] == 0
    assert "Unit: metre." in distance["description"]
    segments = buffer["properties"]["segments_per_quarter_circle"]
    assert (segments["default"], segments["minimum"], segments["maximum"]) == (16, 1, 256)
    assert buffer["properties"]["overwrite"] == {"type": "boolean", "default": False}
    assert ".geojson" in buffer["properties"]["output_path"]["description"]
    assert buffer["required"] == ["input_path", "distance_meters", "output_path"]
    assert buffer["additionalProperties"] is False
    join = conversation.tools["spatial_join"]["inputSchema"]["properties"]
    assert join["predicate"]["default"] == "intersects"
    assert join["predicate"]["enum"] == [
        "intersects",
        "within",
        "contains",
        "touches",
        "crosses",
        "overlaps",
        "within_distance",
    ]
    assert join["how"]["enum"] == ["left", "inner"]
    # a restriction is said; "every geometry type" is not
    clip = conversation.tools["clip_layer"]["inputSchema"]["properties"]
    assert clip["mask_path"]["description"].endswith("Accepted geometry types: polygon.")
    assert "Accepted geometry types" not in clip["input_path"]["description"]
    # what the writing tools no longer repeat is said once, on run_operation
    run = conversation.tools["run_operation"]["description"]
    assert "provenance manifest written beside it" in run and "never an input" in run
    assert "replies in this tool's output schema" in run


# -- the replies the schemas describe ---------------------------------------------------------------


def test_output_schemas_validate_the_real_replies(conversation: Conversation) -> None:
    shared = conversation.tools["run_operation"]["outputSchema"]
    for key, tool in (
        ("buffer", "buffer_layer"),
        ("run_buffer", "run_operation"),
        ("server_info", "server_info"),
        ("catalog", "list_operations"),
        ("validate", "validate_plan"),
        ("suggested_call", "run_operation"),
    ):
        reply = conversation.replies[key]
        assert not reply.is_error, (key, reply.data)
        schema = conversation.tools[tool].get("outputSchema", shared)
        jsonschema.validate(reply.data, schema)
    assert "outputSchema" not in conversation.tools["buffer_layer"]


def test_the_compact_schema_refuses_what_the_full_one_refuses(conversation: Conversation) -> None:
    from mapsmith.server.models import OperationReply

    full = OperationReply.model_json_schema()
    compact = conversation.tools["run_operation"]["outputSchema"]
    good = conversation.replies["run_buffer"].data
    variants = {
        "as sent": (good, True),
        "no output_path": ({**good, "output_path": None}, True),
        "unknown status": ({**good, "status": "fine"}, False),
        "engine without version": ({**good, "engine": {"name": "x", "stack": "opensource"}}, False),
        "check without passed": ({**good, "checks": [{"name": "crs_present", "detail": ""}]}, False),
        "missing checks": ({k: v for k, v in good.items() if k != "checks"}, False),
        "manifest_path a number": ({**good, "manifest_path": 3}, False),
    }
    for label, (instance, valid) in variants.items():
        for schema in (full, compact):
            ok = jsonschema.Draft202012Validator(schema).is_valid(instance)
            assert ok is valid, (label, "full" if schema is full else "compact")


def test_tool_results_are_compact_json_text(conversation: Conversation) -> None:
    for key in ("buffer", "server_info", "operation_as_tool"):
        text = conversation.texts[key]
        # compact JSON has no whitespace between tokens: the text is exactly its compact re-serialisation
        assert text == _compact(json.loads(text)), key
        assert not text.startswith("{\n"), key
    assert json.loads(conversation.texts["buffer"]) == conversation.replies["buffer"].data


# -- an unknown tool name -----------------------------------------------------------------------------


def test_an_operation_called_as_a_tool_is_answered_with_the_run_operation_call(conversation: Conversation) -> None:
    from mapsmith.contracts import load_builtin_contracts

    reply = conversation.replies["operation_as_tool"]
    assert reply.is_error
    data = reply.data
    assert data["code"] == "UNKNOWN_TOOL"
    evidence = data["evidence"]
    assert evidence["run_operation"] == {"operation": "count_in_polygons", "arguments": COUNT_ARGUMENTS}
    schema = evidence["arguments_schema"]
    assert schema == load_builtin_contracts()["count_in_polygons"].input_schema()
    # from contracts/operations/count_in_polygons.toml: two vector datasets and the output
    assert schema["required"] == ["input_path", "points_path", "output_path"]
    assert set(schema["properties"]) == {
        "input_path",
        "points_path",
        "layer",
        "points_layer",
        "output_path",
        "overwrite",
        "output_layer",
        "geojson_keep_crs",
        "feature_collection_members",
        "offset",
        "limit",
    }
    assert evidence["status"] == "available"
    assert "call run_operation with " in data["hint"]
    assert _compact({"operation": "count_in_polygons", "arguments": COUNT_ARGUMENTS}) in data["hint"]


def test_the_suggested_run_operation_call_runs(conversation: Conversation) -> None:
    reply = conversation.replies["suggested_call"]
    assert not reply.is_error, reply.data
    assert reply.data["operation"] == "count_in_polygons"
    out = read(conversation.workspace / "counts.gpkg")
    assert dict(zip(out["name"], out["point_count"], strict=True)) == {"A": 3, "B": 0}


def test_a_misspelt_tool_keeps_the_did_you_mean_answer(conversation: Conversation) -> None:
    data = conversation.replies["misspelt_tool"].data
    assert data["code"] == "UNKNOWN_TOOL"
    assert data["evidence"]["close_tools"][0] == "buffer_layer"
    assert data["hint"].startswith("did you mean tool buffer_layer")
    assert "run_operation" not in data["evidence"]


def test_a_misspelt_operation_name_points_at_run_operation(conversation: Conversation) -> None:
    data = conversation.replies["misspelt_operation_as_tool"].data
    assert data["code"] == "UNKNOWN_TOOL"
    assert "count_in_polygons" in data["evidence"]["close_operations"]
    assert "run_operation with operation='count_in_polygons'" in data["hint"]


def test_a_name_close_to_nothing_points_at_the_lists(conversation: Conversation) -> None:
    data = conversation.replies["nothing_close"].data
    assert data["code"] == "UNKNOWN_TOOL"
    assert data["evidence"] == {"tool": "zzzz", "close_tools": [], "close_operations": []}
    assert "tools/list" in data["hint"] and "list_operations" in data["hint"]


# -- in process: what the conversation above cannot reach -------------------------------------------


def test_a_contract_without_a_title_gets_one_from_its_name() -> None:
    import tomllib

    from mapsmith.contracts import contracts_root, parse_contract

    data = tomllib.loads((contracts_root() / "operations" / "buffer_layer.toml").read_text("utf-8"))
    assert parse_contract(data, source="test").title == "Buffer features"
    del data["title"]
    assert parse_contract(data, source="test").title == "Buffer layer"
    data["name"] = "qgis:native:buffer_vectors"  # a plugin's namespaced name: its last part
    assert parse_contract(data, source="test").title == "Buffer vectors"


def test_a_planned_operation_called_as_a_tool_says_it_does_not_run_yet(tmp_path: Path) -> None:
    import dataclasses

    from mapsmith.app import MapSmith
    from mapsmith.server import unknown_tool

    app = MapSmith({"MAPSMITH_WORKSPACE": str(tmp_path), "MAPSMITH_QGIS_ALGORITHMS": "0"})
    available = unknown_tool(app, "count_in_polygons", {}, ["run_operation"])
    assert available.evidence["status"] == "available" and "planned" not in available.message
    app.host.contracts["count_in_polygons"] = dataclasses.replace(
        app.host.contracts["count_in_polygons"], status="planned"
    )
    planned = unknown_tool(app, "count_in_polygons", {}, ["run_operation"])
    assert planned.code == "UNKNOWN_TOOL"
    assert planned.evidence["status"] == "planned"
    assert "it is planned and does not run yet" in planned.message


def test_operation_tools_abridge_argument_notes_and_list_operations_gives_them_whole(
    conversation: Conversation,
) -> None:
    from mapsmith.contracts import _SENTENCE_END, abridge, load_builtin_contracts
    from mapsmith.server.tools import ABRIDGED_NOTE_CHARS, DEDICATED_OPERATIONS

    contracts = load_builtin_contracts()
    shortened = 0
    for name in DEDICATED_OPERATIONS:
        listed = conversation.tools[name]["inputSchema"]
        whole = contracts[name].input_schema()
        assert listed["required"] == whole["required"] and listed.keys() == whole.keys()
        for argument, spec in whole["properties"].items():
            short = listed["properties"][argument]
            # everything but the prose is kept: type, enum, bounds, default
            assert {k: v for k, v in short.items() if k != "description"} == {
                k: v for k, v in spec.items() if k != "description"
            }
            if "description" not in spec:
                continue
            first = _SENTENCE_END.split(spec["description"])[0]
            assert short["description"].startswith(first), (name, argument)
            shortened += short["description"] != spec["description"]
    assert shortened >= 5  # the budget is met by abridging, not by nothing
    # the unit and the geometry restriction are data, kept whole after the abridged prose
    assert abridge("One. Two is long. Three.", 10) == "One."
    assert abridge("One. Two.", None) == "One. Two."
    assert abridge("Pairs, e.g. 'a:sum'. More words here.", 30) == "Pairs, e.g. 'a:sum'."
    assert len(abridge("a. " * 200, ABRIDGED_NOTE_CHARS)) <= ABRIDGED_NOTE_CHARS
    # list_operations hands the whole notes to an agent that asks about the operation
    candidate = conversation.replies["catalog_detail"].data["candidates"][0]
    assert candidate["parameters"] == contracts[candidate["operation"]].input_schema()
