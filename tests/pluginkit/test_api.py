"""The public plugin API is what docs/plugins.md says it is, no more, no less, and importing it is cheap."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import mapsmith.api as api
from mapsmith import hookspecs
from mapsmith.pluginkit.report import RULES
from mapsmith.runner import RunContext

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _section(title: str) -> str:
    text = PAGE.read_text("utf-8")
    start = text.index(title)
    following = text.find("\n#", start + len(title))  # up to the next heading of any level
    return text[start : following if following != -1 else len(text)]


def _table_names(section: str) -> list[str]:
    return re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", section, re.M)


def test_the_page_lists_exactly_the_public_names() -> None:
    documented = _table_names(_section("## The public API"))
    assert sorted(documented) == sorted(api.__all__)
    assert len(documented) == len(set(documented))
    for name in api.__all__:
        assert hasattr(api, name), name


def test_every_hook_is_documented() -> None:
    specs = sorted(n for n in dir(hookspecs) if n.startswith("mapsmith_"))
    assert specs == ["mapsmith_register_operations", "mapsmith_register_stacks", "mapsmith_register_toolboxes"]
    hooks = _section("### Hooks")
    for name in specs:
        assert f"`{name}(register)`" in hooks


def test_every_documented_run_context_member_exists() -> None:
    members = _section("### `RunContext` members")
    named = re.findall(r"`([a-z_]+)(?:\([^`]*\))?`", members)
    fields = {f.name for f in dataclasses.fields(RunContext)}
    methods = {"set_engine", "warn", "check"}
    assert set(named) <= fields | methods, set(named) - fields - methods
    assert {"paths", "temp_output", "parameters", "answer", "set_engine", "check"} <= set(named)


def test_every_check_rule_is_documented_in_order() -> None:
    assert _table_names(_section("## `mapsmith plugin check`")) == list(RULES)


def test_importing_the_api_loads_no_engine() -> None:
    code = (
        "import json, sys, mapsmith.api; "
        "print(json.dumps([m for m in ('geopandas', 'shapely', 'pyogrio', 'rasterio', 'duckdb', 'pyproj') "
        "if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
