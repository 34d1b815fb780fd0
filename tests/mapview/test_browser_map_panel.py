"""The exported map page in a real headless Chromium: it loads, lists each layer with its provenance
state, shows a feature's attributes on click, shows a failed-check layer as failed, works with the
background tiles blocked, and keeps a screenshot. Runs in the nox ``browser`` session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mapview.cdp_browser import Browser, chromium_path
from mapview.map_fixtures import APP_ENV, failed_check_layer, worked_example_layers

pytestmark = pytest.mark.skipif(
    chromium_path() is None and not os.environ.get("MAPSMITH_BROWSER_REQUIRED"),
    reason="chromium is not installed (the nox browser session installs it)",
)


@pytest.fixture
def exported(make_app: Any, workspace: Path) -> Path:
    from mapsmith import mapview

    app = make_app(**APP_ENV)
    layers = worked_example_layers(app, workspace)
    failed = failed_check_layer(app, workspace)
    # The parcels come last, so they are drawn on top and the click lands on a parcel.
    paths = [layers["raster"], layers["vector"], failed, layers["no_manifest"]]
    mapview.export_map(app, paths, "map.html", background="osm")
    return workspace / "map.html"


@pytest.fixture
def browser(tmp_path: Path) -> Any:
    session = Browser(tmp_path / "chromium-profile")
    yield session
    session.close()


def test_exported_page_in_chromium(exported: Path, browser: Any, tmp_path: Path) -> None:
    browser.send("Network.enable")
    # As a host that blocks them would: the panel must still work on a plain background.
    browser.send("Network.setBlockedURLs", urls=["*tile.openstreetmap.org*"])
    browser.send("Page.enable")
    browser.send("Page.navigate", url=exported.as_uri())
    browser.wait_for("window.mapsmithPanel && window.mapsmithPanel.ready")

    listed = browser.evaluate(
        "Array.from(document.querySelectorAll('#layers li.layer')).map(li => ({path: li.dataset.path, "
        "kind: li.dataset.kind, state: li.dataset.state, label: li.querySelector('.state').textContent, "
        "operation: li.querySelector('.card dd').textContent}))"
    )
    assert listed == [
        {
            "path": "elevation_utm.tif",
            "kind": "raster",
            "state": "verified",
            "label": "verified",
            "operation": "reproject_raster",
        },
        {
            "path": "corridor.parquet",
            "kind": "vector",
            "state": "verified",
            "label": "verified",
            "operation": "buffer_layer",
        },
        {
            "path": "parcels_checked.parquet",
            "kind": "vector",
            "state": "verification_failed",
            "label": "verification failed",
            "operation": "convert_format",
        },
        {
            "path": "parcels.geojson",
            "kind": "vector",
            "state": "not_verifiable",
            "label": "not verifiable",
            "operation": "(unknown)",
        },
    ]
    failed_text = browser.evaluate(
        "document.querySelector('li[data-state=verification_failed] .failed-checks').textContent"
    )
    assert "failed on purpose by the test" in failed_text

    # The raster is drawn: its PNG decoded in the page, with its legend beside it.
    assert browser.evaluate("document.querySelector('img.leaflet-image-layer').naturalWidth > 0")
    assert browser.evaluate("document.querySelectorAll('li[data-kind=raster] .legend-ramp').length") == 1

    # A real click on parcel P3 (the third feature of parcels.geojson, file order P1..P6).
    point = browser.evaluate("window.mapsmithPanel.featurePoint(3, 2)")
    browser.click(point["x"], point["y"])
    browser.wait_for("!document.getElementById('feature').hidden")
    assert (
        browser.evaluate("document.querySelector('#feature-attributes td[data-field=parcel_id]').textContent") == "P3"
    )
    assert browser.evaluate("document.getElementById('feature').dataset.layer") == "parcels.geojson"

    # Toggling a layer removes it from the map and brings it back.
    paths_before = browser.evaluate("document.querySelectorAll('#map path.leaflet-interactive').length")
    browser.evaluate("document.querySelectorAll('.layer-toggle')[3].click()")
    assert browser.evaluate("document.querySelectorAll('#map path.leaflet-interactive').length") == paths_before - 6
    browser.evaluate("document.querySelectorAll('.layer-toggle')[3].click()")

    # Blocked tiles leave a plain background; nothing else left the page.
    browser.wait_for("document.getElementById('map').dataset.background === 'plain'")
    urls = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    outside = [u for u in urls if not u.startswith(("file:", "data:")) and "tile.openstreetmap.org" not in u]
    assert outside == []

    shot = browser.send("Page.captureScreenshot", format="png")["data"]
    import base64

    png = base64.b64decode(shot)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    artifact = tmp_path / "map_panel.png"
    artifact.write_bytes(png)
    target = os.environ.get("MAPSMITH_TEST_ARTIFACTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(artifact, Path(target) / "map_panel.png")
