"""The catalog entry spec documents exactly the schema every contract validates against.

``docs/catalog-entry-spec.md`` must name every property of ``contracts/schemas/operation.schema.json``,
so a field added to the schema without a line on the page fails here. Its worked example must be the
real ``buffer_layer`` entry and tool schema, and every built-in entry must load. This test only reads
files: it never runs an operation.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mapsmith.contracts import contracts_root, load_builtin_contracts

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "catalog-entry-spec.md"
SCHEMA_FILE = contracts_root() / "schemas" / "operation.schema.json"
BACKTICKED = re.compile(r"`([^`\n]+)`")
FENCED = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _page() -> str:
    return PAGE.read_text("utf-8")


def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text("utf-8"))


def _schema_properties() -> list[tuple[str, str]]:
    """(where, property) for the top level and each nested object an entry author writes."""
    schema = _schema()
    props = schema["properties"]
    nested = {
        "top level": props,
        "datasets": props["datasets"]["items"]["properties"],
        "parameters": props["parameters"]["items"]["properties"],
        "output": props["output"]["properties"],
        "examples": props["examples"]["items"]["properties"],
    }
    return [(where, name) for where, found in nested.items() for name in found]


def _fenced(language: str) -> list[str]:
    return [body for lang, body in FENCED.findall(_page()) if lang == language]


@pytest.mark.parametrize(("where", "name"), _schema_properties())
def test_the_spec_names_every_schema_property(where: str, name: str) -> None:
    assert name in set(BACKTICKED.findall(_page())), f"{where} property {name!r} is not named (in backticks)"


def test_the_spec_links_the_schema_it_describes() -> None:
    link = "](../contracts/schemas/operation.schema.json)"
    assert link in _page()
    linked = PAGE.parent / "../contracts/schemas/operation.schema.json"
    # the repository's file, and the same schema the installed package validates contracts with
    assert linked.is_file()
    assert json.loads(linked.read_text("utf-8")) == json.loads(SCHEMA_FILE.read_text("utf-8"))


def test_the_spec_lists_every_accepted_value_of_the_closed_fields() -> None:
    # The enums an author must choose from; a value added to the schema needs a word on the page.
    props = _schema()["properties"]
    closed = {
        "category": props["category"]["enum"],
        "status": props["status"]["enum"],
        "crs_effect": props["crs_effect"]["enum"],
        "datasets.kind": props["datasets"]["items"]["properties"]["kind"]["enum"],
        "parameters.type": props["parameters"]["items"]["properties"]["type"]["enum"],
        "output.kind": props["output"]["properties"]["kind"]["enum"],
        "output.feature_count": props["output"]["properties"]["feature_count"]["enum"],
    }
    named = set(BACKTICKED.findall(_page()))
    missing = {field: [v for v in values if v not in named] for field, values in closed.items()}
    assert not any(missing.values()), missing


def test_every_builtin_contract_validates_against_the_schema() -> None:
    # load_builtin_contracts validates each file against the schema and the house rules, and raises
    # on the first failure; the count proves no file was skipped.
    files = sorted((contracts_root() / "operations").glob("*.toml"))
    contracts = load_builtin_contracts()
    assert files
    assert len(contracts) == len(files)
    assert set(contracts) == {f.stem for f in files}


def test_the_worked_example_is_the_real_buffer_layer_entry() -> None:
    entry = (contracts_root() / "operations" / "buffer_layer.toml").read_text("utf-8")
    shown = [block for block in _fenced("toml") if 'name = "buffer_layer"' in block]
    assert len(shown) == 1
    assert tomllib.loads(shown[0]) == tomllib.loads(entry)


def test_the_worked_example_tool_schema_is_the_one_published() -> None:
    shown = [json.loads(block) for block in _fenced("json")]
    assert load_builtin_contracts()["buffer_layer"].input_schema() in shown
