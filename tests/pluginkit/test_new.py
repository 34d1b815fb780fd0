"""``mapsmith plugin new``: the package it writes is complete, imports only the public API, and its tests pass."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mapsmith.errors import MapSmithError
from mapsmith.pluginkit.new import create, names_for


def test_names_follow_from_the_one_given() -> None:
    names = names_for("My-Roads")
    assert (names.distribution, names.package, names.entry_point, names.operation) == (
        "mapsmith-plugin-my-roads",
        "mapsmith_plugin_my_roads",
        "my_roads",
        "my_roads_flag_long_lines",
    )
    assert names_for("mapsmith-plugin-roads").package == "mapsmith_plugin_roads"  # the prefix is not doubled
    assert names_for("roads", "flag_long_roads").operation == "flag_long_roads"


@pytest.mark.parametrize("bad", ["", "9roads", "roads!", "../roads", "ro ads"])
def test_a_name_that_cannot_be_a_package_is_refused(bad: str) -> None:
    with pytest.raises(MapSmithError) as refused:
        names_for(bad)
    assert refused.value.code == "PLUGIN_NAME_INVALID" and refused.value.hint


def test_the_package_has_every_part(generated: Path) -> None:
    files = sorted(str(p.relative_to(generated)) for p in generated.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "mapsmith_plugin_roads/__init__.py",
        "mapsmith_plugin_roads/examples/expected.toml",
        "mapsmith_plugin_roads/examples/flagged.geojson",
        "mapsmith_plugin_roads/examples/lines.geojson",
        "mapsmith_plugin_roads/roads_flag_long_lines.toml",
        "pyproject.toml",
        "tests/test_roads_flag_long_lines.py",
    ]
    project = tomllib.loads((generated / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["entry-points"]["mapsmith"] == {"roads": "mapsmith_plugin_roads"}
    assert project["tool"]["setuptools"]["package-data"]["mapsmith_plugin_roads"] == ["*.toml", "examples/*"]
    assert "$" not in "".join(p.read_text("utf-8") for p in generated.rglob("*") if p.is_file())


def test_the_generated_code_imports_only_the_public_api(generated: Path) -> None:
    for path in generated.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert {m for m in imported if m.split(".")[0] == "mapsmith"} == {"mapsmith.api"}, path


def test_an_existing_folder_is_never_overwritten(generated: Path) -> None:
    marker = generated / "README.md"
    marker.write_text("mine", "utf-8")
    with pytest.raises(MapSmithError) as refused:
        create("roads", generated.parent)
    assert refused.value.code == "PLUGIN_DIR_EXISTS"
    assert marker.read_text("utf-8") == "mine"
    assert [p.name for p in generated.parent.iterdir()] == [generated.name]  # no staging folder left


def test_the_generated_tests_pass_as_generated(generated: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(generated)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=generated,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout
