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


def drop_bbox(path: Path, compression: str = "snappy") -> Path:
    """Rewrite the GeoParquet file ``path`` with no bbox in its footer (as DuckDB writes one), its declared geometry
    types kept: a header read must then scan the geometries for the extent."""
    import json

    import pyarrow.parquet as pq

    table = pq.read_table(path)
    geo = json.loads(table.schema.metadata[b"geo"])
    geo["columns"][geo["primary_column"]].pop("bbox", None)
    metadata = {**table.schema.metadata, b"geo": json.dumps(geo).encode()}
    pq.write_table(table.replace_schema_metadata(metadata), path, compression=compression)
    return path


DUCKDB_LIMIT_NOTE = "DuckDB's memory limit: "


def shared_notes(manifest_: dict[str, Any]) -> list[str]:
    """A manifest's notes but the one a DuckDB engine adds about its memory limit (other engines have none)."""
    return [n for n in manifest_.get("notes") or [] if not n.startswith(DUCKDB_LIMIT_NOTE)]
