"""The worked example: its answer is the one worked out by hand, and docs/worked-example.md is its output.

One run of the example (a real MCP client driving ``python -m mapsmith`` over stdio, in a temporary
workspace) serves every test here. The page is regenerated from that run and must equal the committed
one byte for byte, so the page can never show a number the script did not produce. The answer is
asserted twice: against values known in advance (105 m and 115 m, 19,303.33 m² each), and against
``expected_answer``, which computes it with pyproj and numpy without MapSmith.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import published_schema_errors
from mapsmith.examples import worked_example as example

pytestmark = pytest.mark.mcp

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "worked-example.md"
# The geodesic area of a 0.0015 degree square whose south edge lies on 46.2 N (WGS 84), as the issue states it.
PARCEL_AREA_M2 = 19_303.33


def _validate_manifests(folder: Path) -> None:
    """What the ``workspace`` fixture checks at teardown, for this module-wide workspace."""
    from mapsmith.provenance.digests import dataset_digest

    manifests = sorted(folder.rglob("*.provenance.json"))
    assert len(manifests) == 5, [m.name for m in manifests]
    for manifest in manifests:
        record = json.loads(manifest.read_text("utf-8"))
        assert not published_schema_errors(record), manifest.name
        dataset = manifest.with_name(manifest.name[: -len(".provenance.json")])
        assert record["output"]["sha256"] == dataset_digest(dataset), f"{dataset.name} differs from its record"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("worked-example")
    yield folder
    _validate_manifests(folder)


@pytest.fixture(scope="module")
def result(workdir: Path) -> dict[str, Any]:
    said: list[str] = []
    out: dict[str, Any] = anyio.run(example.run_example, workdir, said.append)
    out["said"] = said
    return out


# -- the answer, by hand ----------------------------------------------------------------------------


def test_the_hand_computed_answer() -> None:
    rows = {p.parcel_id: p for p in example.expected_answer()}
    assert [pid for pid, p in rows.items() if p.in_corridor] == ["P2", "P3", "P4", "P5"]
    assert [pid for pid, p in rows.items() if p.in_answer] == ["P2", "P3"]
    assert {pid: p.mean_elevation_m for pid, p in rows.items()} == {
        "P1": 90.0,
        "P2": 105.0,
        "P3": 115.0,
        "P4": 125.0,
        "P5": 135.0,
        "P6": 150.0,
    }
    for p in rows.values():
        assert round(p.area_m2, 2) == PARCEL_AREA_M2
        # Far from the corridor's edge either way, so the buffer's construction cannot matter.
        assert p.farthest_m < 1400 if p.in_corridor else p.nearest_m > 1600


def test_a_square_elsewhere_has_another_area() -> None:
    # Guards the constant above: the area depends on where the square lies, so 19,303.33 m² pins 46.2 N.
    from pyproj import Geod
    from shapely.geometry import box

    geod = Geod(ellps="WGS84")
    assert round(abs(geod.geometry_area_perimeter(box(0, 46.2, 0.0015, 46.2015))[0]), 2) == PARCEL_AREA_M2
    assert round(abs(geod.geometry_area_perimeter(box(0, 46.1985, 0.0015, 46.2))[0]), 2) != PARCEL_AREA_M2


def test_the_raster_is_the_stated_formula(workdir: Path, result: dict[str, Any]) -> None:
    import numpy as np
    import rasterio

    with rasterio.open(workdir / "elevation.tif") as src:
        grid = src.read(1)
        assert src.crs.to_epsg() == 4326
        lon = src.transform.c + (np.arange(src.width) + 0.5) * src.transform.a
    assert np.allclose(grid, 120 + 1000 * (lon + 122.2), atol=1e-9)
    assert (grid == grid[0]).all(), "every row is the same: the elevation depends on longitude only"


# -- the server's answer ----------------------------------------------------------------------------


def test_the_server_answers_what_was_worked_out_by_hand(result: dict[str, Any]) -> None:
    answer = {row["parcel_id"]: row for row in result["answer"]}
    assert sorted(answer) == ["P2", "P3"]
    assert answer["P2"]["zonal_mean"] == pytest.approx(105.0, abs=1e-6)
    assert answer["P3"]["zonal_mean"] == pytest.approx(115.0, abs=1e-6)
    for row in answer.values():
        assert round(row["area_m2"], 2) == PARCEL_AREA_M2
    assert example.check_answer(result) == []


def test_rejections_name_what_to_fix(result: dict[str, Any]) -> None:
    wrong = result["wrong_order"]["finding"]
    assert (wrong["code"], wrong["step"], wrong["argument"]) == ("FORWARD_REFERENCE", "near_river", "mask_path")
    assert "move step 'corridor' before 'near_river'" in wrong["message"]
    misspelt = result["misspelt"]["finding"]
    assert (misspelt["code"], misspelt["step"], misspelt["argument"]) == ("UNKNOWN_ARGUMENT", "corridor", "distance_m")
    assert "distance_meters" in misspelt["message"] + misspelt["hint"]
    assert not result["wrong_order"]["validation"]["valid"] and not result["misspelt"]["validation"]["valid"]
    assert result["validation"]["valid"] and result["validation"]["findings"] == []


def test_the_plan_ran_every_step(result: dict[str, Any]) -> None:
    execution = result["execution"]
    assert execution["status"] == "ok"
    assert [(s["id"], s["operation"], s["status"]) for s in execution["steps"]] == [
        ("corridor", "buffer_layer", "ok"),
        ("near_river", "clip_layer", "ok"),
        ("elevation", "zonal_statistics", "ok"),
        ("area", "measure_area", "ok"),
        ("low", "select_features", "ok"),
    ]
    assert execution["plan_manifest_path"] == example.FINAL_OUTPUT + ".plan.json"
    # Progress came back to the client step by step, ending at the whole plan.
    assert any("step 5/5" in line for line in result["said"])


def test_lineage_walks_back_to_the_three_inputs(result: dict[str, Any]) -> None:
    lineage = result["lineage"]
    assert lineage["complete"] and lineage["history_sound"]
    assert sorted(h["operation"] for h in lineage["hops"]) == sorted(
        ["buffer_layer", "clip_layer", "zonal_statistics", "measure_area", "select_features"]
    )
    assert sorted(s["path"] for s in lineage["stops"]) == ["elevation.tif", "parcels.geojson", "river.geojson"]
    assert {s["kind"] for s in lineage["stops"]} == {"original"}


def test_replay_is_identical(result: dict[str, Any]) -> None:
    assert result["replay"]["identical"] is True
    assert [s["result"] for s in result["replay"]["steps"]] == ["identical"] * 5


# -- the page ----------------------------------------------------------------------------------------


def test_the_page_is_what_the_script_writes(result: dict[str, Any]) -> None:
    assert PAGE.read_text(encoding="utf-8") == example.render_markdown(result), (
        "docs/worked-example.md is out of date: python benchmarks/worked_example.py"
    )


def test_the_page_holds_nothing_that_changes_between_runs(workdir: Path, result: dict[str, Any]) -> None:
    page = example.render_markdown(result)
    assert page == example.render_markdown(result)
    assert str(workdir) not in page and "/tmp" not in page, "no absolute path"
    assert not re.search(r"[0-9a-f]{64}", page), "no digest: GeoPackage-style outputs would differ run to run"
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:", page), "no timestamp"
    for row in result["answer"]:
        assert f"| {row['parcel_id']} | {row['zonal_mean']:,.2f} | {row['area_m2']:,.2f} |" in page
    assert "```mermaid" in page and "corridor -->|mask_path| near_river" in page


def test_write_docs_writes_the_page(
    tmp_path: Path, result: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def cached(workdir: Path, say: Any = print) -> dict[str, Any]:
        return result

    monkeypatch.setattr(example, "run_example", cached)
    assert example.main(["--workdir", str(tmp_path), "--write-docs", str(tmp_path / "page.md")]) == 0
    assert (tmp_path / "page.md").read_text(encoding="utf-8") == example.render_markdown(result)
    assert "P2" in capsys.readouterr().out


def test_mapsmith_example_runs_this_example(monkeypatch: pytest.MonkeyPatch) -> None:
    from mapsmith import cli

    seen: list[list[str]] = []
    monkeypatch.setattr(example, "main", lambda argv: seen.append(argv) or 0)
    assert cli.main(["example", "--workdir", "w", "--write-docs", "p.md"]) == 0
    assert cli.main(["example"]) == 0
    assert seen == [["--workdir", "w", "--write-docs", "p.md"], []]


def test_a_server_without_the_plan_tools_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(example, "REQUIRED_TOOLS", (*example.REQUIRED_TOOLS, "plan_everything"))
    assert example.main(["--workdir", str(tmp_path)]) == 1
    assert "the server offers no plan_everything tool" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.provenance.json")), "nothing ran"
