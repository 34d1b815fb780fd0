"""``plugin check``: the generated plugin passes every rule; each broken variant fails the rule named for its defect.

Every broken plugin is the generated one with one defect written in, so the generated plugin is the clean
twin of each. The runs are real: the examples go through the runner in the isolation sandbox, twice.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mapsmith.pluginkit.check import check_plugin, locate, unit_problems
from mapsmith.pluginkit.report import RULES

OPERATION = "roads_flag_long_lines"
PACKAGE = "mapsmith_plugin_roads"


def _edit(plugin: Path, relative: str, old: str, new: str, count: int = 1) -> None:
    path = plugin / relative
    text = path.read_text("utf-8")
    assert text.count(old) >= count, f"{old!r} not in {relative}"
    path.write_text(text.replace(old, new), "utf-8")


CODE = f"{PACKAGE}/__init__.py"
CONTRACT = f"{PACKAGE}/{OPERATION}.toml"
EXPECTED = f"{PACKAGE}/examples/expected.toml"
WRITE_LINE = "    write_layer(out, ctx.temp_output)"


def test_the_generated_plugin_passes_every_rule(generated: Path, tmp_path: Path) -> None:
    report = check_plugin(generated, workspace=tmp_path / "runs")
    assert report.passed, report.to_text()
    assert [r.name for r in report.rules] == list(RULES)
    assert report.plugin["module"] == PACKAGE and report.plugin["distribution"] == "mapsmith-plugin-roads"
    # Real runs left real files: two runs of the one example, one refusal.
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["refusal-0", f"{OPERATION}-0-run1", f"{OPERATION}-0-run2"]
    record = json.loads((runs / f"{OPERATION}-0-run1" / "lines_flagged.gpkg.provenance.json").read_text("utf-8"))
    assert record["operation"] == OPERATION
    # The report names the code it checked exactly as the run's manifest does (promote compares the two).
    assert record["x-mapsmith:plugin"]["code_sha256"] == report.plugin["code_sha256"]
    assert record["x-mapsmith:plugin"]["maturity"] == "experimental"
    assert report.operations == [OPERATION] and report.to_dict()["operations"] == [OPERATION]
    assert {"crs_present", "crs_matches", "feature_count_exact"} <= {v["name"] for v in record["verification"]}
    assert (runs / "refusal-0" / "flagged_again.gpkg.failed.provenance.json").is_file()
    assert not (runs / "refusal-0" / "flagged_again.gpkg").exists()
    assert report.rule("refusals_structured").evidence["codes"] == ["FIELD_EXISTS"]
    seconds = report.rule("import_time").evidence["seconds"]
    assert 0 <= seconds < 1.0
    as_json = json.loads(report.to_json())
    assert as_json["passed"] is True and [r["name"] for r in as_json["rules"]] == list(RULES)
    assert re.search(r"^PASS  deterministic\s+two runs gave identical digests$", report.to_text(), re.M)


def _invalid_contract(p: Path) -> None:
    _edit(p, CONTRACT, 'category = "measurement"', 'category = "magic"')


def _no_unit(p: Path) -> None:
    for relative in (CONTRACT, CODE, EXPECTED):
        _edit(p, relative, "min_length_meters", "min_length", count=1)
    _edit(p, CONTRACT, 'unit = "metre"\n', "")


def _wrong_answer(p: Path) -> None:
    _edit(
        p, EXPECTED, "answer = { feature_count = 3, long_count = 2 }", "answer = { feature_count = 3, long_count = 3 }"
    )


def _bad_manifest(p: Path) -> None:
    # A check name outside the manifest spec's closed vocabulary: the record cannot conform.
    _edit(p, CODE, WRITE_LINE, '    ctx.check("Looks Fine!", True, "a made-up check name")\n' + WRITE_LINE)


def _nondeterministic(p: Path) -> None:
    _edit(p, CODE, WRITE_LINE, '    import uuid\n\n    out["run_id"] = str(uuid.uuid4())\n' + WRITE_LINE)


def _tries_network(p: Path) -> None:
    attempt = textwrap.indent(
        textwrap.dedent(
            """\
            import socket

            try:  # a plugin "phoning home", swallowing the failure
                socket.create_connection(("192.0.2.10", 443), timeout=2)
            except OSError:
                pass
            """
        ),
        "    ",
    )
    _edit(p, CODE, WRITE_LINE, attempt + WRITE_LINE)


def _writes_outside(p: Path) -> None:
    attempt = textwrap.indent(
        textwrap.dedent(
            f"""\
            try:  # a plugin leaving a file beside its own code
                open({str(p / "left-behind.txt")!r}, "w").write("x")
            except OSError:
                pass
            """
        ),
        "    ",
    )
    _edit(p, CODE, WRITE_LINE, attempt + WRITE_LINE)


def _bare_exception(p: Path) -> None:
    _edit(
        p,
        CODE,
        "        raise InputError(",
        '        raise ValueError(f"the input already has a field {FIELD!r}")\n        raise InputError(',
    )


def _memory_hog(p: Path) -> None:
    _edit(p, CODE, WRITE_LINE, "    hoard = bytearray(64 * 1024**3)  # far over any limit\n" + WRITE_LINE)


BROKEN = {
    "contract_schema": _invalid_contract,
    "parameter_units": _no_unit,
    "example_answers": _wrong_answer,
    "manifests_valid": _bad_manifest,
    "deterministic": _nondeterministic,
    "no_network": _tries_network,
    "no_write_outside_workspace": _writes_outside,
    "refusals_structured": _bare_exception,
    "within_limits": _memory_hog,
}


@pytest.mark.parametrize("rule", list(BROKEN))
def test_a_broken_plugin_fails_the_rule_named_for_its_defect(generated: Path, tmp_path: Path, rule: str) -> None:
    BROKEN[rule](generated)
    report = check_plugin(generated, workspace=tmp_path / "runs")
    assert not report.passed
    failed = report.rule(rule)
    assert not failed.passed, report.to_text()
    assert failed.evidence["summary"]
    assert f"FAIL  {rule}" in report.to_text()
    evidence = json.dumps(failed.evidence)
    if rule == "contract_schema":
        assert "category" in evidence and "magic" in evidence
    elif rule == "parameter_units":
        assert "min_length: measures a length but names no unit" in evidence
        assert report.rule("contract_schema").passed and report.rule("example_answers").passed
    elif rule == "example_answers":
        assert '{"feature_count": 3, "long_count": 2}' in failed.evidence["summary"]
        assert report.rule("deterministic").passed and report.rule("manifests_valid").passed
    elif rule == "manifests_valid":
        assert "Looks Fine!" in evidence
    elif rule == "deterministic":
        digests = next(iter(failed.evidence["differing"].values()))
        assert len(digests) == 2 and digests[0] != digests[1]
        assert report.rule("example_answers").passed  # the answer itself is right
    elif rule == "no_network":
        assert "192.0.2.10:443" in evidence
        assert report.rule("examples_run").passed  # it swallowed the failure; the sandbox still told
    elif rule == "no_write_outside_workspace":
        assert str(generated / "left-behind.txt") in evidence
        assert not (generated / "left-behind.txt").exists()
    elif rule == "refusals_structured":
        assert "builtins.ValueError" in evidence and "the plugin's code" in evidence
    elif rule == "within_limits":
        assert "memory" in evidence


def test_a_plain_folder_with_a_function_and_a_contract_passes(generated: Path, tmp_path: Path) -> None:
    """What propose_operation submits: one module (its function named after the operation), the contract,
    examples/ — no pyproject, no hook."""
    folder = tmp_path / "proposal"
    folder.mkdir()
    shutil.copy(generated / CONTRACT, folder / f"{OPERATION}.toml")
    shutil.copytree(generated / PACKAGE / "examples", folder / "examples")
    code = (generated / CODE).read_text("utf-8")
    code = code.replace("def flag_long_lines(ctx", f"def {OPERATION}(ctx")
    code = code[: code.index("@hookimpl")]  # no registration hook: the check registers the function
    (folder / "proposal.py").write_text(code.replace("from mapsmith.api import hookimpl\n", ""), "utf-8")
    source = locate(folder)
    assert source.module == "proposal" and [p.name for p in source.contracts] == [f"{OPERATION}.toml"]
    report = check_plugin(folder, workspace=tmp_path / "runs")
    assert report.passed, report.to_text()
    record = json.loads((tmp_path / "runs" / f"{OPERATION}-0-run1" / "lines_flagged.gpkg.provenance.json").read_text())
    assert record["x-mapsmith:plugin"]["code_sha256"] == report.plugin["code_sha256"]
    assert record["x-mapsmith:plugin"]["maturity"] == "experimental"


def test_what_is_not_a_plugin_is_said(tmp_path: Path) -> None:
    report = check_plugin(tmp_path / "nowhere")
    assert not report.passed and report.failed == list(RULES)
    assert report.rule("plugin_found").evidence["code"] == "PLUGIN_NOT_FOUND"
    (tmp_path / "two").mkdir()
    for name in ("a.py", "b.py"):
        (tmp_path / "two" / name).write_text("")
    report = check_plugin(tmp_path / "two")
    assert report.rule("plugin_found").evidence["evidence"] == {"modules": ["a.py", "b.py"]}


@pytest.mark.parametrize(
    ("parameters", "problems", "unitless"),
    [
        ([{"name": "distance_meters", "type": "number", "unit": "metre"}], [], []),
        ([{"name": "distance", "type": "number"}], ["distance: measures a distance but names no unit"], []),
        ([{"name": "cell_size_meters", "type": "number"}], ["cell_size_meters: the name carries a unit"], []),
        ([{"name": "area", "type": "number", "unit": "metre"}], ["area: declares unit 'metre'"], []),
        ([{"name": "max_points", "type": "integer"}, {"name": "label", "type": "string"}], [], ["max_points"]),
        ([{"name": "threshold_km2", "type": "number"}], [], ["threshold_km2"]),
    ],
)
def test_unit_rule_by_hand(parameters: list[dict[str, str]], problems: list[str], unitless: list[str]) -> None:
    found, plain = unit_problems(parameters)
    assert [f[: len(p)] for f, p in zip(found, problems, strict=False)] == problems and len(found) == len(problems)
    assert plain == unitless


def test_an_accepted_operation_runs_isolated_in_the_real_workspace(generated: Path, tmp_path: Path) -> None:
    from mapsmith.pluginkit.check import run_plugin_operation

    workspace = tmp_path / "user-workspace"
    workspace.mkdir()
    shutil.copy(generated / PACKAGE / "examples" / "lines.geojson", workspace / "mine.geojson")
    result = run_plugin_operation(
        generated,
        OPERATION,
        {"input_path": "mine.geojson", "min_length_meters": 370.5, "output_path": "long.gpkg"},
        workspace=workspace,
    )
    assert result.ok and result.result["outcome"] == "ok", result.to_dict()
    # by hand: 500 m and 100 m and 370 m; only the diagonal reaches 370.5 m
    assert result.result["result"]["answer"] == {"feature_count": 3, "long_count": 1}
    assert (workspace / "long.gpkg").is_file() and (workspace / "long.gpkg.provenance.json").is_file()
    refused = run_plugin_operation(
        generated,
        OPERATION,
        {"input_path": "long.gpkg", "min_length_meters": 1, "output_path": "again.gpkg"},
        workspace=workspace,
    )
    assert refused.result["outcome"] == "refused" and refused.result["error"]["code"] == "FIELD_EXISTS"


HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "mapsmith-plugin-hello"


def test_an_installed_distribution_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """The hello fixture, pip-installed into its own folder: found by name, run through its entry point. It
    ships no example data, so its example cannot run: the check says so instead of inventing data."""
    source = shutil.copytree(HELLO, tmp_path / "src", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--quiet", "--target", str(site)]
    assert subprocess.run([*pip, str(source)], capture_output=True, timeout=600).returncode == 0
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-m", "mapsmith", "plugin", "check", "mapsmith-plugin-hello", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    found = next(r for r in report["rules"] if r["name"] == "plugin_found")
    assert found["passed"] and found["evidence"]["entry_point"] == "hello"
    assert found["evidence"]["contracts"] == ["count_vertices.toml"]
    rules = {r["name"]: r for r in report["rules"]}
    assert rules["contract_schema"]["passed"] and rules["parameter_units"]["passed"]
    assert "parcels.gpkg" in rules["examples_run"]["evidence"]["summary"]
    assert not rules["refusals_structured"]["passed"]


def test_example_data_that_links_out_is_refused_before_anything_is_copied(generated: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret", "utf-8")
    (generated / PACKAGE / "examples" / "lines_copy.geojson").symlink_to(secret)
    report = check_plugin(generated, workspace=tmp_path / "runs")
    assert not report.rule("plugin_found").passed
    assert report.rule("plugin_found").evidence["evidence"] == {"links": ["examples/lines_copy.geojson"]}
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("lines_copy.geojson"))
