"""preview_map's data on small fixtures whose numbers are worked out by hand: counts, the cap, the
simplification tolerance, the three provenance states, the raster's legend and size, and refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mapsmith.errors import MapSmithError
from mapview.map_fixtures import APP_ENV, failed_check_layer


def _points(path: Path, count: int) -> None:
    # count points along the equator, 0.001 degree apart, each with its index as "n".
    features = [
        {
            "type": "Feature",
            "properties": {"n": i, "label": f"pt{i}"},
            "geometry": {"type": "Point", "coordinates": [0.001 * i, 0.0]},
        }
        for i in range(count)
    ]
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}), "utf-8")


def _raster(path: Path) -> None:
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    # 4 x 2 cells, values 1..8, one nodata cell (-1) in place of 8.
    values = np.array([[1, 2, 3, 4], [5, 6, 7, -1]], dtype="float32")
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=4,
        height=2,
        count=1,
        dtype="float32",
        crs="EPSG:4326",
        transform=from_origin(10.0, 1.0, 0.01, 0.01),
        nodata=-1,
    ) as dst:
        dst.write(values, 1)


@pytest.fixture
def app(make_app: Any) -> Any:
    return make_app(**APP_ENV)


def test_vector_counts_cap_and_no_manifest(app: Any, workspace: Path) -> None:
    from mapsmith import mapview

    _points(workspace / "pts.geojson", 7)
    data = mapview.preview_map(app, ["pts.geojson"], max_features_per_layer=5)
    layer = data["layers"][0]
    vector = layer["vector"]
    assert (vector["feature_count_total"], vector["feature_count_shown"], vector["capped"]) == (7, 5, True)
    # The first five in file order, with their attributes.
    assert [f["properties"]["n"] for f in vector["geojson"]["features"]] == [0, 1, 2, 3, 4]
    assert vector["geojson"]["features"][3]["geometry"] == {"type": "Point", "coordinates": [0.003, 0.0]}
    # Extent of the five shown: 0.004 degree of longitude at the equator = 445.3 m (in UTM 31N, about the
    # same); a thousandth of it is 0.45 m, 0.4 m to one significant figure.
    assert vector["simplified_to_meters"] == pytest.approx(0.4)
    assert layer["lossy"].startswith("showing 5 of 7 features, simplified to 0.4 m")
    assert layer["bounds"] == pytest.approx([0.0, 0.0, 0.004, 0.0], abs=1e-9)
    assert layer["provenance"]["state"] == "not_verifiable"
    assert data["states"] == {"verified": 0, "verification_failed": 0, "not_verifiable": 1}
    assert data["background"]["kind"] == "osm"


def test_simplification_removes_a_vertex_smaller_than_the_tolerance(app: Any, workspace: Path) -> None:
    from mapsmith import mapview

    # A 0.01-degree-long line at the equator with a middle vertex 0.00001 degree (1.1 m) off the line.
    line = {
        "type": "Feature",
        "properties": {},
        "geometry": {"type": "LineString", "coordinates": [[0, 0], [0.005, 0.00001], [0.01, 0]]},
    }
    (workspace / "line.geojson").write_text(json.dumps({"type": "FeatureCollection", "features": [line]}))
    data = mapview.preview_map(app, ["line.geojson"], simplify_meters=5)
    vector = data["layers"][0]["vector"]
    assert (vector["vertex_count_before"], vector["vertex_count_after"]) == (3, 2)
    kept = mapview.preview_map(app, ["line.geojson"], simplify_meters=0)["layers"][0]["vector"]
    assert kept["vertex_count_after"] == 3


def test_raster_png_and_legend(app: Any, workspace: Path) -> None:
    import base64

    from mapsmith import mapview

    _raster(workspace / "grid.tif")
    layer = mapview.preview_map(app, ["grid.tif"])["layers"][0]
    raster = layer["raster"]
    # Values 1..7 are valid (8's cell is nodata): the legend spans 1..7.
    assert (raster["legend"]["min"], raster["legend"]["max"]) == (1.0, 7.0)
    assert raster["source"] == {"width": 4, "height": 2, "crs": "EPSG:4326", "bands": 1}
    assert raster["decimated"] is False
    png = base64.b64decode(raster["png_data_uri"].split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert layer["bounds"] == pytest.approx([10.0, 0.98, 10.04, 1.0])


def test_three_states(app: Any, workspace: Path) -> None:
    from mapsmith import mapview
    from mapsmith.examples.worked_example import write_inputs

    write_inputs(workspace)
    app.run("convert_format", {"input_path": "parcels.geojson", "output_path": "good.parquet"})
    failed = failed_check_layer(app, workspace, "bad.parquet")
    data = mapview.preview_map(app, ["good.parquet", failed, "river.geojson"])
    states = [layer["provenance"]["state"] for layer in data["layers"]]
    assert states == ["verified", "verification_failed", "not_verifiable"]
    good, bad, _ = (layer["provenance"] for layer in data["layers"])
    assert good["operation"] == "convert_format" and good["critical_passed"] == good["critical_checks"] > 0
    assert bad["critical_passed"] == bad["critical_checks"] - 1
    assert "failed on purpose" in bad["failed_checks"][0]["detail"]
    assert data["states"] == {"verified": 1, "verification_failed": 1, "not_verifiable": 1}


def test_no_critical_check_is_not_verifiable(app: Any, workspace: Path) -> None:
    from mapsmith import mapview
    from mapsmith.examples.worked_example import write_inputs

    write_inputs(workspace)
    app.run("convert_format", {"input_path": "parcels.geojson", "output_path": "nocrit.parquet"})
    manifest = workspace / "nocrit.parquet.provenance.json"
    record = json.loads(manifest.read_text("utf-8"))
    for check in record["verification"]:
        check["critical"] = False
    manifest.write_text(json.dumps(record), "utf-8")
    card = mapview.preview_map(app, ["nocrit.parquet"])["layers"][0]["provenance"]
    assert (card["state"], card["critical_checks"]) == ("not_verifiable", 0)


@pytest.mark.parametrize(
    ("paths", "code"),
    [
        ([], "MISSING_ARGUMENT"),
        (["missing.geojson"], "INPUT_NOT_FOUND"),
        (["../outside.geojson"], None),  # the workspace policy's own refusal code
        (["."], "INPUT_IS_DIRECTORY"),
        ([f"p{i}.geojson" for i in range(21)], "MAP_TOO_MANY_LAYERS"),
    ],
)
def test_refusals(app: Any, workspace: Path, paths: list[str], code: str | None) -> None:
    from mapsmith import mapview

    with pytest.raises(MapSmithError) as caught:
        mapview.preview_map(app, paths)
    if code is not None:
        assert caught.value.code == code
    else:
        assert "outside" in caught.value.message.lower() or "workspace" in caught.value.message.lower()
    assert caught.value.hint


def test_bad_options_refused(app: Any, workspace: Path) -> None:
    from mapsmith import mapview

    _points(workspace / "pts.geojson", 2)
    for kwargs in ({"max_features_per_layer": -3}, {"simplify_meters": -1}, {"background": "satellite"}):
        with pytest.raises(MapSmithError) as caught:
            mapview.preview_map(app, ["pts.geojson"], **kwargs)
        assert caught.value.code == "INVALID_ARGUMENT"


def test_a_folder_of_parts_a_run_wrote_is_one_verified_layer(app: Any, workspace: Path) -> None:
    """select_features writes 'sel.parquet/' (a folder of parts, issue 22): the panel draws it as one layer, its
    count summed over the parts' footers, its manifest's digest checked by the folder listing rule (refused
    INPUT_IS_DIRECTORY before, whose hint sent the caller to exactly this output). Points 0..6, n >= 4 keeps 3."""
    from mapsmith import mapview

    _points(workspace / "pts.geojson", 7)
    app.run("reproject_layer", {"input_path": "pts.geojson", "target_crs": "EPSG:4326", "output_path": "pts.parquet"})
    app.run("select_features", {"input_path": "pts.parquet", "where": "n >= 4", "output_path": "sel.parquet/"})
    assert (workspace / "sel.parquet").is_dir()
    layer = mapview.preview_map(app, ["sel.parquet"])["layers"][0]
    assert (layer["vector"]["feature_count_total"], layer["vector"]["feature_count_shown"]) == (3, 3)
    assert sorted(f["properties"]["n"] for f in layer["vector"]["geojson"]["features"]) == [4, 5, 6]
    assert layer["provenance"]["state"] == "verified"
    assert layer["provenance"]["operation"] == "select_features"
    # the clean twin of the refusal it replaced: a folder that is not a dataset is still refused
    (workspace / "notes").mkdir()
    (workspace / "notes" / "readme.txt").write_text("x", "utf-8")
    with pytest.raises(MapSmithError) as refused:
        mapview.preview_map(app, ["notes"])
    assert refused.value.code == "INPUT_IS_DIRECTORY"
