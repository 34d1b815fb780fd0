"""Valid arguments for any catalog operation, derived from its contract, for catalogue-wide tests.

Every dataset argument gets a small layer of an accepted geometry type in EPSG:32610 (a raster
argument a 40 x 30 DEM, ``sample_dem``), all of them overlapping; parameters come from the
contract's first example; the output is ``out.gpkg`` (``out.tif`` for a raster). Tests that
must cover every operation (refusals, sabotage) build their calls here rather than listing
operations by hand, so a new operation is covered the day its contract lands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shapely.geometry import LineString, Point, box

from layers import write_layer

SAMPLE_GEOMETRIES = {
    "polygon": [box(500_000, 5_000_000, 500_100, 5_000_100), box(500_050, 5_000_050, 500_150, 5_000_150)],
    "line": [
        LineString([(500_000, 5_000_000), (500_100, 5_000_100)]),
        LineString([(500_010, 5_000_000), (500_010, 5_000_090)]),
    ],
    "point": [Point(500_010, 5_000_010), Point(500_060, 5_000_060)],
}


# Every sample layer carries these fields, so contract examples can name them.
SAMPLE_FIELDS = {"id": [1, 2], "name": ["a", "b"], "value": [10.0, 20.0], "code": ["310101", "310102"]}


def sample_dem(path: Path) -> None:
    """A 40 x 30 float32 DEM, 10 m cells, EPSG:32610, covering the sample layers: a tilted plane
    with a round hill on it (so slope, flow and sampling all have something to find), nodata -9999
    in one corner cell."""
    import numpy as np
    import rasterio
    from rasterio.transform import from_origin

    rows, cols = np.mgrid[0:30, 0:40]
    x, y = 499_900 + (cols + 0.5) * 10, 5_000_200 - (rows + 0.5) * 10
    z = (
        100
        + 0.05 * (x - 499_900)
        + 0.02 * (y - 4_999_900)
        + 20 * np.exp(-((x - 500_060) ** 2 + (y - 5_000_060) ** 2) / 3000)
    )
    z = z.astype("float32")
    z[0, 0] = -9999
    with rasterio.open(
        path,
        "w",
        driver="GTiff",
        width=40,
        height=30,
        count=1,
        dtype="float32",
        crs="EPSG:32610",
        transform=from_origin(499_900, 5_000_200, 10, 10),
        nodata=-9999,
    ) as dst:
        dst.write(z, 1)
        dst.set_band_description(1, "elevation")


def _sample(workspace: Path, stem: str, kind: str, family: str, layer: str | None) -> str:
    if kind == "raster":
        path = workspace / f"{stem}.tif"
        if not path.exists():
            sample_dem(path)
        return path.name
    if kind == "table":
        path = workspace / f"{stem}.csv"
        if not path.exists():
            # lon/lat columns too, so an operation that makes points from a table has coordinates to read
            fields = {**SAMPLE_FIELDS, "lon": [-123.0, -122.99], "lat": [45.14, 45.15]}
            rows = zip(*fields.values(), strict=True)
            path.write_text(",".join(fields) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
        return path.name
    path = workspace / f"{stem}_{family}.gpkg"
    if not path.exists():
        write_layer(path, SAMPLE_GEOMETRIES[family], "EPSG:32610", layer=layer, **SAMPLE_FIELDS)
    return path.name


def build_arguments(contract: Any, workspace: Path, override: dict[str, str] | None = None) -> dict[str, Any]:
    """Arguments for ``contract``; ``override`` maps a dataset argument to the family to give it."""
    override = override or {}
    example = dict(contract.examples[0]["arguments"])
    args: dict[str, Any] = {}
    for d in contract.datasets:
        family = override.get(d.name) or (d.geometry_types[0] if d.geometry_types else "polygon")
        layer = example.get("layer") if d.name == "input_path" else None
        if d.multiple:
            args[d.name] = [
                _sample(workspace, f"{d.name}{i}", d.kind, family, None) for i in range(max(2, d.min_count))
            ]
        else:
            args[d.name] = _sample(workspace, d.name, d.kind, family, layer)
    for p in contract.parameters:
        if p.name in example:
            args[p.name] = example[p.name]
    if contract.datasets_named_in:
        # run_sql names its datasets inside the query: read one sample polygon layer.
        sample = _sample(workspace, "sql_input", "vector", "polygon", None)
        args[contract.datasets_named_in] = f"SELECT id, name, geom FROM ST_Read('{sample}')"
    if contract.writes_dataset:
        args["output_path"] = "out.tif" if contract.output_kind == "dataset:raster" else "out.gpkg"
    return args
