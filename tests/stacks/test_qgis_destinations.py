"""The qgis stack's destinations that are not one layer, against a real QGIS.

native:package writes several layers into one GeoPackage (its OUTPUT is a file destination, now the
run's output_path); qgis:basicstatisticsforfields writes an HTML report; native:pointstopath writes a
line layer and, as a second destination, a folder of text files. Every path must stay inside the
workspace. Skipped only when no qgis_process is installed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import mapsmith_qgis
from mapsmith.errors import MapSmithError

SYSTEM_PATH = "/usr/bin:/bin"
QGIS = next((p for n in mapsmith_qgis.EXECUTABLE_NAMES if (p := shutil.which(n, path=SYSTEM_PATH))), None)
pytestmark = pytest.mark.skipif(QGIS is None, reason="qgis_process is not installed")


@pytest.fixture
def qgis_app(make_app: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(mapsmith_qgis.ALGORITHMS_ENV, "1")
    return make_app(MAPSMITH_STACK="qgis")


@pytest.fixture
def layers(workspace: Path) -> tuple[str, str]:
    import geopandas as gpd
    from shapely.geometry import Point, box

    # Three wells (values 1, 2, 3) and two parcels: the counts the package must read back.
    gpd.GeoDataFrame(
        {"value": [1, 2, 3]}, geometry=[Point(0, 0), Point(10, 0), Point(10, 10)], crs="EPSG:32633"
    ).to_file(workspace / "wells.gpkg", layer="wells")
    gpd.GeoDataFrame({"name": ["a", "b"]}, geometry=[box(0, 0, 1, 1), box(2, 2, 3, 3)], crs="EPSG:32633").to_file(
        workspace / "parcels.gpkg", layer="parcels"
    )
    return "wells.gpkg", "parcels.gpkg"


def _manifest(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.with_name(path.name + ".provenance.json").read_text("utf-8")))


def test_package_writes_two_layers_into_one_geopackage(qgis_app: Any, workspace: Path, layers: tuple[str, str]) -> None:
    import pyogrio

    contract = qgis_app.host.contracts["qgis:native:package"]
    assert contract.output_kind == "dataset:vector"
    args = {"layers_paths": list(layers), "save_styles": False, "output_path": "deliverable.gpkg"}
    result = qgis_app.run("qgis:native:package", args)
    out = workspace / "deliverable.gpkg"
    counts = {name: pyogrio.read_info(out, layer=name)["features"] for name, _ in pyogrio.list_layers(out)}
    assert counts == {"wells": 3, "parcels": 2}
    assert pyogrio.read_dataframe(out, layer="wells")["value"].tolist() == [1, 2, 3]
    manifest = _manifest(out)
    assert manifest["parameters"]["x-mapsmith:layers_written"] == {"wells": 3, "parcels": 2}
    assert ["OUTPUT", "(output_path)"] in manifest["parameters"]["x-mapsmith:qgis_parameters"]
    assert manifest["output"]["path"] == "deliverable.gpkg" and len(manifest["output"]["sha256"]) == 64
    assert result.output_path == "deliverable.gpkg"
    # QGIS's default (SAVE_STYLES) adds its layer_styles table, one style per layer: recorded, not hidden.
    qgis_app.run("qgis:native:package", {**args, "save_styles": True, "output_path": "styled.gpkg"})
    styled = _manifest(workspace / "styled.gpkg")["parameters"]["x-mapsmith:layers_written"]
    assert styled == {"wells": 3, "parcels": 2, "layer_styles": 2}


def test_a_report_file_destination_is_the_output(qgis_app: Any, workspace: Path, layers: tuple[str, str]) -> None:
    contract = qgis_app.host.contracts["qgis:qgis:basicstatisticsforfields"]
    assert contract.raw["output"]["formats"] == [".html"]
    result = qgis_app.run(
        "qgis:qgis:basicstatisticsforfields",
        {"input_layer_path": layers[0], "field_name": "value", "output_path": "stats.html"},
    )
    html = (workspace / "stats.html").read_text("utf-8")
    # 1 + 2 + 3 = 6; mean 2; three values.
    assert "Sum: 6" in html and "Mean value: 2" in html and "Count: 3" in html
    assert result.answer["qgis_results"]["SUM"] == 6
    manifest = _manifest(workspace / "stats.html")
    assert manifest["output"]["path"] == "stats.html" and manifest["output"]["crs"] is None


def test_a_report_outside_the_workspace_is_refused(qgis_app: Any, workspace: Path, layers: tuple[str, str]) -> None:
    with pytest.raises(MapSmithError) as err:
        qgis_app.run(
            "qgis:qgis:basicstatisticsforfields",
            {"input_layer_path": layers[0], "field_name": "value", "output_path": "../stats.html"},
        )
    assert err.value.code.startswith("PATH_")
    assert not (workspace.parent / "stats.html").exists()


def test_a_second_destination_folder_is_written_and_recorded(
    qgis_app: Any, workspace: Path, layers: tuple[str, str]
) -> None:
    import pyogrio

    (workspace / "vertices").exists() and pytest.fail("leftover")
    qgis_app.run(
        "qgis:native:pointstopath",
        {
            "input_path": layers[0],
            "order_field": "value",
            "output_path": "path.gpkg",
            "output_text_dir_destination": "vertices",
        },
    )
    # One path through the three wells in value order: (0,0) -> (10,0) -> (10,10).
    lines = pyogrio.read_dataframe(workspace / "path.gpkg")
    assert len(lines) == 1 and list(lines.geometry[0].coords) == [(0, 0), (10, 0), (10, 10)]
    written = sorted(p.name for p in (workspace / "vertices").iterdir())
    assert len(written) == 1 and written[0].endswith(".txt")
    recorded = _manifest(workspace / "path.gpkg")["parameters"]["x-mapsmith:qgis_destinations"]
    assert [(r["argument"], r["qgis_parameter"], r["path"]) for r in recorded] == [
        ("output_text_dir_destination", "OUTPUT_TEXT_DIR", "vertices")
    ]
    assert [f["name"] for f in recorded[0]["files"]] == written and len(recorded[0]["sha256"]) == 64
    assert not [p for p in workspace.iterdir() if p.name.startswith(".vertices")]


@pytest.mark.parametrize(
    ("destination", "code"),
    [("../vertices", "PATH_"), ("/tmp/vertices-elsewhere", "PATH_"), ("nowhere/vertices", "QGIS_DESTINATION_INVALID")],
)
def test_a_second_destination_outside_the_workspace_is_refused(
    qgis_app: Any, workspace: Path, layers: tuple[str, str], destination: str, code: str
) -> None:
    with pytest.raises(MapSmithError) as err:
        qgis_app.run(
            "qgis:native:pointstopath",
            {
                "input_path": layers[0],
                "order_field": "value",
                "output_path": "path.gpkg",
                "output_text_dir_destination": destination,
            },
        )
    assert err.value.code.startswith(code)
    assert not (workspace / "path.gpkg").exists()
    assert not (workspace.parent / "vertices").exists() and not Path("/tmp/vertices-elsewhere").exists()


def test_an_existing_destination_is_kept_unless_overwrite(
    qgis_app: Any, workspace: Path, layers: tuple[str, str]
) -> None:
    (workspace / "vertices").mkdir()
    (workspace / "vertices" / "mine.txt").write_text("keep", "utf-8")
    args = {"input_path": layers[0], "order_field": "value", "output_path": "path.gpkg"}
    with pytest.raises(MapSmithError) as err:
        qgis_app.run("qgis:native:pointstopath", {**args, "output_text_dir_destination": "vertices"})
    assert err.value.code == "OUTPUT_EXISTS"
    assert (workspace / "vertices" / "mine.txt").read_text("utf-8") == "keep"
    # The clean twin: overwrite=true replaces the folder.
    qgis_app.run("qgis:native:pointstopath", {**args, "output_text_dir_destination": "vertices", "overwrite": True})
    assert not (workspace / "vertices" / "mine.txt").exists()
    assert len(list((workspace / "vertices").iterdir())) == 1
