"""Two stacks, one answer: MapSmith's own operations on opensource and on qgis, compared.

The comparison runs once per module (about 20 s: each QGIS step is one qgis_process start) in a
workspace whose manifests are validated like every test workspace's. The areas are worked out by
hand; ``docs/stacks.md`` is rendered from the comparison and must match the committed page.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mapsmith_qgis
from mapsmith.errors import ArgumentError, EngineError, OperationUnavailable

REPO = Path(__file__).resolve().parents[2]
QGIS = next((p for n in mapsmith_qgis.EXECUTABLE_NAMES if (p := shutil.which(n, path="/usr/bin:/bin"))), None)
pytestmark = pytest.mark.skipif(
    QGIS is None, reason="qgis_process is not installed (apt-get install -y --no-install-recommends qgis)"
)
if QGIS is None and os.environ.get("MAPSMITH_QGIS_REQUIRED") == "1":  # CI's qgis session: never skip there
    raise RuntimeError("MAPSMITH_QGIS_REQUIRED=1 but no qgis_process is installed")

_spec = importlib.util.spec_from_file_location("mapsmith_stacks_report", REPO / "benchmarks" / "stacks_report.py")
assert _spec is not None and _spec.loader is not None
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

# One 100 m square buffered by 10 m with 8 chords per quarter circle: the square, four 100 x 10
# strips, and a regular 32-gon inscribed in a 10 m circle.
N = 4 * report.SEGMENTS
BUFFERED_SQUARE_M2 = (
    report.SIDE_M**2 + 4 * report.SIDE_M * report.DISTANCE_M + 0.5 * N * 10.0**2 * math.sin(2 * math.pi / N)
)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    from conftest import published_schema_errors

    workspace = tmp_path_factory.mktemp("dual") / "ws"
    workspace.mkdir()
    yield workspace, report.measure(workspace)
    assert not [p.name for p in workspace.iterdir() if p.name.startswith(".")]  # no scratch or temporary left
    manifests = list(workspace.glob("*.provenance.json"))
    assert len(manifests) == 2 * len(report.CASES)
    for manifest in manifests:
        assert not published_schema_errors(json.loads(manifest.read_text("utf-8"))), manifest.name


def test_hand_worked_area_of_the_buffered_square() -> None:
    assert BUFFERED_SQUARE_M2 == pytest.approx(14312.14, abs=0.01)


@pytest.mark.parametrize(
    ("case", "features", "area_m2"),
    [
        ("buffer", 3, 3 * BUFFERED_SQUARE_M2),
        ("clip", 2, 50 * 100 + 100 * 100),  # half the first square, all the second, none of the third
        ("dissolve", 2, 3 * 100 * 100),  # a (two touching squares) and b
        ("reproject", 3, 3 * 100 * 100),  # measured back in EPSG:32633
    ],
)
def test_both_stacks_give_the_answer_worked_out_by_hand(
    compared: tuple[Path, dict[str, Any]], case: str, features: int, area_m2: float
) -> None:
    c = compared[1]["cases"][case]
    assert c["same"]["features"] == features
    for stack in report.STACKS:
        assert c["geometry"]["area_m2"][stack] == pytest.approx(area_m2, rel=1e-6)
    assert c["geometry"]["xor_ratio"] < report.AREA_TOLERANCE


def test_a_geographic_layer_is_buffered_in_metres_on_qgis(compared: tuple[Path, dict[str, Any]]) -> None:
    workspace, measured = compared
    c = measured["cases"]["buffer_degrees"]
    assert c["qgis_algorithms"] == ["native:reprojectlayer", "native:buffer", "native:reprojectlayer"]
    assert c["geometry"]["xor_ratio"] < report.AREA_TOLERANCE
    # 0.01 degree at 45 N is about 787 m by 1112 m; a 10 m buffer adds about 2 * (787 + 1112) * 10 m².
    assert c["geometry"]["area_m2"]["qgis"] == pytest.approx(787 * 1112 + 2 * (787 + 1112) * 10, rel=0.01)
    manifest = json.loads((workspace / "buffer_degrees_qgis.gpkg.provenance.json").read_text("utf-8"))
    assert manifest["engine"]["name"] == "qgis"
    assert manifest["engine"]["x-mapsmith:components"]["algorithm"] == "native:buffer"
    assert manifest["parameters"]["x-mapsmith:qgis_algorithm"] == "native:buffer"
    assert ["DISTANCE", "10.0"] in manifest["parameters"]["x-mapsmith:qgis_parameters"]
    assert manifest["parameters"]["x-mapsmith:distance_in_analysis_units"] == 10.0
    decisions = manifest["crs_decisions"]
    assert decisions["analysis_crs"] == "EPSG:32633" and decisions["source_crs"] == "EPSG:4326"
    first_leg = manifest["parameters"]["x-mapsmith:qgis_steps"][0]["parameters"]
    assert ["INPUT", "degrees.gpkg|layername=degrees"] in first_leg and ["TARGET_CRS", "EPSG:32633"] in first_leg
    assert ["OPERATION", decisions["round_trip"]["transformation"]["pipeline"]] in first_leg


def test_dissolve_writes_only_the_key_field_on_both_stacks(compared: tuple[Path, dict[str, Any]]) -> None:
    c = compared[1]["cases"]["dissolve"]
    assert c["same"]["fields"] == ["name:object"]
    assert c["qgis_algorithms"] == ["native:dissolve", "native:retainfields"]


def test_every_difference_found_is_one_known_today(compared: tuple[Path, dict[str, Any]]) -> None:
    # Found by the first run: QGIS writes every polygon output as MultiPolygon; nothing else differs.
    found = {(case, d["what"]) for case, c in compared[1]["cases"].items() for d in c["differences"]}
    assert found == {(case, "geometry type") for case in ("buffer", "buffer_degrees", "clip", "dissolve")}


def test_docs_stacks_md_is_what_the_comparison_gives_now(compared: tuple[Path, dict[str, Any]]) -> None:
    page = REPO / "docs" / "stacks.md"
    assert page.read_text("utf-8") == report.render(compared[1]), (
        "docs/stacks.md is stale: python benchmarks/stacks_report.py --write"
    )


@pytest.fixture
def qgis_app(make_app: Any, workspace: Path) -> Any:
    report.build_fixtures(workspace)
    return make_app(MAPSMITH_STACK="qgis")


def test_aggregations_are_refused_before_qgis_starts(
    qgis_app: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mapsmith_qgis.mapping

    def no_qgis(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("qgis_process was started")

    monkeypatch.setattr(mapsmith_qgis.mapping.subprocess, "run", no_qgis)
    arguments = {"input_path": "squares.gpkg", "by_fields": "name", "aggregations": "count:sum"}
    with pytest.raises(ArgumentError) as err:
        qgis_app.run("dissolve_layer", {**arguments, "output_path": "d.gpkg"})
    assert err.value.code == "QGIS_UNMAPPED_ARGUMENT"
    assert not list(workspace.glob("d.gpkg*"))


def test_parquet_output_is_refused_on_the_qgis_stack(qgis_app: Any) -> None:
    with pytest.raises(EngineError) as err:
        qgis_app.run("clip_layer", {"input_path": "squares.gpkg", "mask_path": "mask.gpkg", "output_path": "c.parquet"})
    assert err.value.code == "NO_ELIGIBLE_ENGINE"
    assert "cannot write .parquet" in str(err.value.hint)


def test_an_operation_qgis_has_no_equivalent_for_is_missing(qgis_app: Any) -> None:
    with pytest.raises(OperationUnavailable) as err:
        qgis_app.run("measure_area", {"input_path": "squares.gpkg", "output_path": "m.gpkg"})
    assert err.value.code == "OPERATION_MISSING"
    assert err.value.evidence["stack"] == "qgis" and err.value.evidence["outcome"] == "missing"
