"""``mapsmith plugin ...`` from the command line: exit codes, the text and JSON reports, the lazy subcommands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mapsmith.pluginkit.report import RULES


def _mapsmith(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mapsmith", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_new_then_check_from_the_command_line(tmp_path: Path) -> None:
    made = _mapsmith("plugin", "new", "trails", "--dir", str(tmp_path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    plugin = tmp_path / "mapsmith-plugin-trails"
    assert f"wrote {plugin}" in made.stdout
    checked = _mapsmith("plugin", "check", str(plugin), "--json", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["passed"] is True and [r["name"] for r in report["rules"]] == list(RULES)
    text = _mapsmith("plugin", "check", str(plugin), cwd=tmp_path)
    assert text.returncode == 0
    assert text.stdout.count("\nPASS  ") == len(RULES) and "passed in" in text.stdout


def test_a_failing_check_exits_1_with_the_rule_named(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "op.py").write_text("def nothing(ctx):\n    pass\n")
    done = _mapsmith("plugin", "check", str(plain), cwd=tmp_path)
    assert done.returncode == 1
    assert "FAIL  contract_schema             (none): no contract TOML found beside the module" in done.stdout


def test_plugin_without_a_command_prints_usage(tmp_path: Path) -> None:
    done = _mapsmith("plugin", cwd=tmp_path)
    assert done.returncode == 2 and "new NAME" in done.stderr and "check PACKAGE-OR-PATH" in done.stderr
    assert _mapsmith("plugin", "--help", cwd=tmp_path).returncode == 0


def test_the_name_error_reaches_the_command_line(tmp_path: Path) -> None:
    done = _mapsmith("plugin", "new", "9lives", "--dir", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "PLUGIN_NAME_INVALID" in done.stderr
    assert list(tmp_path.iterdir()) == []
