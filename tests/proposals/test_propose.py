"""propose_operation on the service: hexagon_grid passes, runs with an experimental manifest, survives a
restart, serves in a plan and replays identically; every way a proposal fails is refused with its code.

The expected numbers are worked out in ``proposals/hexagon.py``'s docstring: 8 cells of 15000 sqrt(3) m2
over the 300 m square. The plan's points sit at three cell centres, one of them twice, so the counts are
2, 1, 1 and five zeros (worked below).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import check_workspace_manifests
from proposals.hexagon import (
    CELL_AREA_M2,
    CELLS,
    CODE,
    CONTRACT,
    SIDE_M,
    TOTAL_AREA_M2,
    examples,
    proposal_with,
    write_square,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux only")
HALF_M = math.sqrt(3) / 2 * SIDE_M
# Cell centres (flat-topped grid, see hexagon.py): (0, 0) is column 0 row 0; (150, h) column 1 row 0, twice;
# (300, 2h) column 2 row 1. Each point is a centre, inside exactly one cell.
POINTS = [(0.0, 0.0), (150.0, HALF_M), (150.0, HALF_M), (300.0, 2 * HALF_M)]
EXPECTED_COUNTS = [0, 0, 0, 0, 0, 1, 1, 2]


def _env(ws: Path, **extra: str) -> dict[str, str]:
    import os

    return {"MAPSMITH_WORKSPACE": str(ws), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **extra}


@pytest.fixture(scope="module")
def proposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, dict[str, Any]]]:
    import geopandas as gpd
    from shapely.geometry import Point

    from mapsmith.app import MapSmith

    ws = tmp_path_factory.mktemp("propose") / "ws"
    ws.mkdir()
    write_square(ws)
    gpd.GeoDataFrame({"id": [1, 2, 3, 4]}, geometry=[Point(p) for p in POINTS], crs="EPSG:32631").to_file(
        ws / "points.gpkg", driver="GPKG"
    )
    app = MapSmith(_env(ws))
    report = app.propose_operation(CONTRACT, CODE, examples())
    yield app, ws, report
    check_workspace_manifests(ws)


def test_hexagon_grid_passes_with_the_hand_worked_answer(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    app, ws, report = proposed
    assert report["status"] == "registered" and report["maturity"] == "experimental"
    [run] = report["examples"]
    assert run["seen"]["feature_count"] == CELLS == 8
    assert run["seen"]["total_area_m2"] == pytest.approx(207846.0969, abs=1e-3)
    assert run["seen"]["answer"] == {"cell_count": 8}
    folder = ws / ".mapsmith" / "proposals" / "hexagon_grid"
    assert sorted(p.name for p in folder.iterdir()) == ["check.json", "contract.toml", "proposal.json", "source.py"]
    assert hashlib.sha256((folder / "source.py").read_bytes()).hexdigest() == report["source_sha256"]
    assert json.loads((folder / "check.json").read_text())["examples"] == report["examples"]
    # The check's own outputs are gone: only the store folder remains.
    assert [p.name for p in (ws / ".mapsmith" / "proposals").iterdir()] == ["hexagon_grid"]
    assert not (ws / "hex.gpkg").exists()


def test_it_runs_with_a_manifest_marked_experimental(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    app, ws, report = proposed
    done = app.run("hexagon_grid", {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "g.gpkg"})
    assert done.answer["cell_count"] == CELLS
    assert done.answer["cell_side_m"] == pytest.approx(SIDE_M, rel=1e-12)
    assert [w["code"] for w in done.warnings].count("EXPERIMENTAL_OPERATION") == 1
    record = json.loads((ws / "g.gpkg.provenance.json").read_text())
    assert record["engine"]["name"] == "proposed:hexagon_grid"
    assert record["engine"]["version"] == report["source_sha256"]
    assert record["x-mapsmith:plugin"]["maturity"] == "experimental"
    assert record["x-mapsmith:plugin"]["code_sha256"] == report["source_sha256"]
    assert record["x-mapsmith:plugin"]["source"] == ".mapsmith/proposals/hexagon_grid/source.py"
    import pyogrio
    import shapely

    frame = pyogrio.read_dataframe(ws / "g.gpkg")
    assert len(frame) == 8
    assert float(shapely.area(frame.geometry.values).sum()) == pytest.approx(TOTAL_AREA_M2, rel=1e-9)


def test_the_catalogue_lists_it_as_experimental(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    app, _, _ = proposed
    [entry] = [e for e in app.list_operations() if e["operation"] == "hexagon_grid"]
    assert entry["maturity"] == "experimental"
    stable = [e for e in app.list_operations() if e["operation"] == "buffer_layer"]
    assert stable[0]["maturity"] == "stable"  # clean twin: MapSmith's own operation is not marked


def test_a_restarted_service_loads_it_again(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    from mapsmith.app import MapSmith

    _, ws, report = proposed
    fresh = MapSmith(_env(ws))
    assert fresh.host.contracts["hexagon_grid"].maturity == "experimental"
    done = fresh.run(
        "hexagon_grid", {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "r.gpkg"}
    )
    assert done.engine["version"] == report["source_sha256"]


def test_a_plan_uses_it_then_counts_points_per_cell(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    import pyogrio

    app, ws, _ = proposed
    plan = {
        "goal": "points per hexagon",
        "steps": [
            {
                "id": "hex",
                "operation": "hexagon_grid",
                "arguments": {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "p_hex.gpkg"},
            },
            {
                "id": "counts",
                "operation": "count_in_polygons",
                "arguments": {"input_path": "$hex", "points_path": "points.gpkg", "output_path": "p_counts.gpkg"},
            },
        ],
    }
    assert app.validate_plan(plan)["valid"] is True
    done = app.execute_plan(plan)
    assert done["status"] != "failed", done
    counts = sorted(int(c) for c in pyogrio.read_dataframe(ws / "p_counts.gpkg")["point_count"])
    assert counts == EXPECTED_COUNTS


def test_replay_of_its_output_is_identical(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    app, _, _ = proposed
    app.run("hexagon_grid", {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": "rp.gpkg"})
    replayed = app.replay("rp.gpkg")
    assert replayed["identical"] is True, replayed
    assert replayed["steps"][-1]["replayed_sha256"] == replayed["steps"][-1]["recorded_sha256"]


def test_a_changed_source_is_refused_and_the_unchanged_one_loads(
    proposed: tuple[Any, Path, dict[str, Any]], tmp_path: Path
) -> None:
    from mapsmith.errors import MapSmithError
    from mapsmith.proposals.store import load_record

    _, ws, report = proposed
    intact = tmp_path / "intact"
    shutil.copytree(ws / ".mapsmith" / "proposals" / "hexagon_grid", intact)
    assert load_record(intact).source_sha256 == report["source_sha256"]
    changed = tmp_path / "changed"
    shutil.copytree(intact, changed)
    (changed / "source.py").chmod(0o644)
    (changed / "source.py").write_text(CODE + "\n# one more line\n")
    with pytest.raises(MapSmithError) as refused:
        load_record(changed)
    assert refused.value.code == "PROPOSAL_SOURCE_CHANGED"
    assert refused.value.evidence["recorded_sha256"] == report["source_sha256"]


def test_proposing_the_same_again_is_not_a_new_registration(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    app, _, report = proposed
    again = app.propose_operation(CONTRACT, CODE, examples())
    assert again["status"] == "already_registered" and again["source_sha256"] == report["source_sha256"]


# -- refusals: each with what was wrong; the module's accepted proposal is their clean twin --------------


def _refused(app: Any, contract: str, code: str, worked: Any) -> Any:
    from mapsmith.errors import MapSmithError

    with pytest.raises(MapSmithError) as refused:
        app.propose_operation(contract, code, worked)
    assert refused.value.hint
    return refused.value


def test_a_contract_that_is_not_toml(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    error = _refused(proposed[0], "name = ", CODE, examples())
    assert error.code == "PROPOSAL_CONTRACT_INVALID" and "toml_error" in error.evidence


def test_a_contract_that_fails_the_schema(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract = CONTRACT.replace('category = "other"', 'category = "geometry"').replace("hexagon_grid", "hexagon_b", 1)
    error = _refused(proposed[0], contract, CODE.replace("hexagon_grid", "hexagon_b"), examples())
    assert error.code == "PROPOSAL_CONTRACT_INVALID"
    assert "category" in error.evidence["contract_error"]["message"]


def test_a_numeric_parameter_without_its_unit(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    """``cell_area`` measures an area and names no unit: refused by the rule plugin check applies. The
    accepted proposal (``cell_area_m2``, unit square_metre) is the clean twin."""
    contract = (
        CONTRACT.replace('name = "cell_area_m2"', 'name = "cell_area"')
        .replace('unit = "square_metre"\n', "")
        .replace("hexagon_grid", "hexagon_c", 1)
    )
    error = _refused(proposed[0], contract, CODE.replace("hexagon_grid", "hexagon_c"), examples())
    assert error.code == "PROPOSAL_PARAMETER_UNIT"
    assert error.evidence["problems"] == [
        "cell_area: measures an area but names no unit (for example cell_area_m2 with unit = 'square_metre')"
    ]


def test_a_name_that_exists(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, code = proposal_with("pass", name="buffer_layer")
    error = _refused(proposed[0], contract, code, examples())
    assert error.code == "PROPOSAL_NAME_TAKEN" and error.evidence["maturity"] == "stable"
    # The accepted proposal's own name, with different code: a name keeps its source for good.
    error = _refused(proposed[0], CONTRACT, CODE + "\n", examples())
    assert error.code == "PROPOSAL_NAME_TAKEN" and error.evidence["proposed"] is True


def test_code_that_does_not_parse(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, _ = proposal_with("pass", name="broken_syntax")
    error = _refused(proposed[0], contract, "def broken_syntax(ctx)\n    pass\n", examples())
    assert error.code == "PROPOSAL_CODE_INVALID" and error.evidence["line"] == 1


def test_code_without_the_entry(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, code = proposal_with("pass", name="no_entry")
    error = _refused(proposed[0], contract, code.replace("def no_entry(", "def something_else("), examples())
    assert error.code == "PROPOSAL_ENTRY_MISSING" and error.evidence["functions"] == ["something_else"]


def test_code_importing_a_refused_module(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, code = proposal_with("import subprocess", name="plain_import")
    error = _refused(proposed[0], contract, code, examples())
    assert error.code == "PROPOSAL_IMPORT_REFUSED" and error.evidence["name"] == "subprocess"


def test_examples_that_are_not_worked_examples(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, code = proposal_with("pass", name="bad_examples")
    assert _refused(proposed[0], contract, code, []).code == "PROPOSAL_EXAMPLES_INVALID"
    worked = examples()
    worked[0]["expect"] = {"mean_colour": 3}
    assert _refused(proposed[0], contract, code, worked).code == "PROPOSAL_EXAMPLES_INVALID"


def test_a_wrong_worked_answer(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    """7 cells claimed where the grid has 8: refused with both numbers, and not registered."""
    app, ws, _ = proposed
    contract = CONTRACT.replace('name = "hexagon_grid"', 'name = "hexagon_wrong"')
    code = CODE.replace("def hexagon_grid(", "def hexagon_wrong(")
    error = _refused(app, contract, code, examples(cells=7, area=7 * CELL_AREA_M2))
    assert error.code == "PROPOSAL_EXAMPLE_WRONG"
    facts = {d["fact"]: (d["expected"], d["got"]) for d in error.evidence["differences"]}
    assert facts["feature_count"] == (7, 8)
    assert facts["answer.cell_count"] == (7, 8)
    assert facts["total_area_m2"][1] == pytest.approx(TOTAL_AREA_M2)
    assert app.host.contracts.get("hexagon_wrong") is None
    assert not (ws / ".mapsmith" / "proposals" / "hexagon_wrong").exists()


def test_a_nondeterministic_operation(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, code = proposal_with("ctx.answer['draw'] = __import__('random').random()", name="coin_toss")
    error = _refused(proposed[0], contract, code, examples(cells=1, area=1.0))
    assert error.code == "PROPOSAL_NONDETERMINISTIC"
    assert error.evidence["first"]["answer"]["draw"] != error.evidence["second"]["answer"]["draw"]


def test_an_example_whose_input_is_missing(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, code = proposal_with("pass", name="missing_input")
    worked = examples(cells=1, area=1.0)
    worked[0]["arguments"]["input_path"] = "nowhere.gpkg"
    error = _refused(proposed[0], contract, code, worked)
    assert error.code == "PROPOSAL_EXAMPLE_FAILED" and error.evidence["error"]["code"] == "INPUT_NOT_FOUND"


def test_code_that_raises(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, code = proposal_with("raise ValueError('no cells today')", name="raises")
    error = _refused(proposed[0], contract, code, examples(cells=1, area=1.0))
    assert error.code == "PROPOSAL_CODE_FAILED" and "no cells today" in error.evidence["traceback_tail"]


def test_no_sandbox_no_proposal(proposed: tuple[Any, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from mapsmith.proposals import check

    monkeypatch.setattr(check, "bwrap_path", lambda: None)
    contract, code = proposal_with("pass", name="unsandboxed")
    assert _refused(proposed[0], contract, code, examples()).code == "PROPOSAL_SANDBOX_UNAVAILABLE"


def test_no_workspace_no_proposal() -> None:
    import os

    from mapsmith.app import MapSmith

    app = MapSmith({"PATH": os.environ.get("PATH", "")})
    assert _refused(app, CONTRACT, CODE, examples()).code == "PROPOSAL_NO_WORKSPACE"


def test_code_that_writes_no_output(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    contract, _ = proposal_with("pass", name="writes_nothing")
    code = "def writes_nothing(ctx):\n    ctx.answer['cell_count'] = 1\n"
    error = _refused(proposed[0], contract, code, examples(cells=1, area=1.0))
    assert error.code == "PROPOSAL_NO_OUTPUT" and error.evidence["example"] == 0


def test_code_that_kills_its_own_process(proposed: tuple[Any, Path, dict[str, Any]]) -> None:
    """os._exit leaves no reply: judged from outside as a crash, with the exit code."""
    contract, code = proposal_with("__import__('os')._exit(3)", name="exits_early")
    error = _refused(proposed[0], contract, code, examples(cells=1, area=1.0))
    assert error.code == "PROPOSAL_CRASHED" and error.evidence["exit_code"] == 3
