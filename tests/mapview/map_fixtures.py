"""Layers for the map panel tests, built from the worked example's own data (mapsmith.examples).

``worked_example_layers`` writes the example's inputs into a workspace and runs two of its results
through MapSmith: the river corridor (buffer_layer, a vector) and the elevation reprojected to UTM
(reproject_raster, a raster). ``failed_check_layer`` makes a dataset whose record holds a failed
critical check: MapSmith never writes such a record beside a dataset, so the test edits a real one
(the bytes still match its digest; only a check's outcome changes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Only the stack these tests use: another plugin's state must not decide whether the panel works.
APP_ENV = {"MAPSMITH_PLUGINS": "opensource"}


def worked_example_layers(app: Any, workspace: Path) -> dict[str, str]:
    from mapsmith.examples.worked_example import CORRIDOR_METERS, write_inputs

    write_inputs(workspace)
    app.run(
        "buffer_layer",
        {"input_path": "river.geojson", "distance_meters": CORRIDOR_METERS, "output_path": "corridor.parquet"},
    )
    app.run(
        "reproject_raster",
        {
            "input_path": "elevation.tif",
            "target_crs": "EPSG:32610",
            "resampling": "bilinear",
            "output_path": "elevation_utm.tif",
        },
    )
    return {"vector": "corridor.parquet", "raster": "elevation_utm.tif", "no_manifest": "parcels.geojson"}


def failed_check_layer(app: Any, workspace: Path, name: str = "parcels_checked.parquet") -> str:
    app.run("convert_format", {"input_path": "parcels.geojson", "output_path": name})
    manifest = workspace / f"{name}.provenance.json"
    record = json.loads(manifest.read_text("utf-8"))
    critical = next(c for c in record["verification"] if c.get("critical") is True)
    critical["passed"] = False
    critical["detail"] = "failed on purpose by the test (the record was edited after the run)"
    manifest.write_text(json.dumps(record, indent=2), "utf-8")
    return name
