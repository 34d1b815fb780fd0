"""Small vector fixtures built in the test, so every expected value can be worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_layer(path: Path, geometries: list[Any], crs: Any, layer: str | None = None, **columns: list[Any]) -> Path:
    import geopandas as gpd

    gdf = gpd.GeoDataFrame(dict(columns), geometry=geometries, crs=crs)
    if path.suffix == ".parquet":
        gdf.to_parquet(path)
    else:
        gdf.to_file(path, layer=layer) if layer else gdf.to_file(path)
    return path


def read(path: Path, layer: str | None = None) -> Any:
    import geopandas as gpd

    return gpd.read_parquet(path) if path.suffix == ".parquet" else gpd.read_file(path, layer=layer)


def manifest(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.with_name(path.name + ".provenance.json").read_text("utf-8"))
