"""Compare a replayed output with the recorded one: vectors by content, rasters by cells, files by bytes.

Used by ``mapsmith.provenance.replay`` on the two files in its scratch folder. This module must never
report two outputs as equal when a value differs beyond ``_REL_TOLERANCE``, and never open a file
outside the scratch folder it is given.
"""

from __future__ import annotations

import math
import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mapsmith.app import MapSmith


_GPKG_TIMESTAMP_COLUMN = "gpkg_contents.last_change"
# The runner writes to ``.<stem>.tmp-<8 hex><suffix>`` and renames; a writer that stores that name
# (a FlatGeobuf header, a GeoJSON "name") makes every run's bytes differ there.
_TEMP_NAME = re.compile(rb"\.tmp-[0-9a-f]{8}")
# Absolute and relative tolerance under which two floating-point totals are reported as equal.
_REL_TOLERANCE = 1e-12


def _compare(app: MapSmith, recorded: Path, replayed: Path, layer: str | None) -> dict[str, Any]:
    io = app.dataset_io("opensource")
    kind = io.inspect(recorded, layer).kind
    if kind == "raster":
        return _compare_rasters(app, recorded, replayed)
    return _compare_vectors(recorded, replayed, layer)


def _read_vector(path: Path, layer: str | None) -> Any:
    import geopandas as gpd

    if path.suffix.lower() in (".parquet", ".geoparquet"):
        return gpd.read_parquet(path)
    from mapsmith.gdalpolicy import vector_source

    # The driver the file's extension names and no other (mapsmith.gdalpolicy): never a VRT in disguise
    return gpd.read_file(vector_source(path)[0], layer=layer, engine="pyogrio")


def _pair(a: float, b: float) -> dict[str, float]:
    return {"recorded": a, "replayed": b, "difference": b - a}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOLERANCE, abs_tol=0.0)


def _compare_vectors(recorded: Path, replayed: Path, layer: str | None) -> dict[str, Any]:
    import numpy as np
    import pandas as pd
    import shapely

    a, b = _read_vector(recorded, layer), _read_vector(replayed, layer)
    unit = None
    crs_equal = (a.crs is None and b.crs is None) or (a.crs is not None and b.crs is not None and a.crs.equals(b.crs))
    if a.crs is not None:
        unit = a.crs.axis_info[0].unit_name if a.crs.axis_info else None
    # shapely directly: geopandas warns about planar measures in a geographic CRS, and planar in the
    # dataset's own units (labelled) is exactly what a comparison of two files wants.
    area_a, area_b = (float(np.nansum(shapely.area(df.geometry.to_numpy()))) for df in (a, b))
    length_a, length_b = (float(np.nansum(shapely.length(df.geometry.to_numpy()))) for df in (a, b))
    same_count = len(a) == len(b)
    geometry_rows = None
    if same_count:
        wkb_a = a.geometry.to_wkb().to_numpy()
        wkb_b = b.geometry.to_wkb().to_numpy()
        geometry_rows = int(sum(x != y for x, y in zip(wkb_a, wkb_b, strict=True)))
    fields_a = [c for c in a.columns if c != a.geometry.name]
    fields_b = [c for c in b.columns if c != b.geometry.name]
    changed: dict[str, Any] = {}
    for name in (f for f in fields_a if f in fields_b):
        col_a, col_b = a[name], b[name]
        numeric = pd.api.types.is_numeric_dtype(col_a) and pd.api.types.is_numeric_dtype(col_b)
        entry: dict[str, Any] = {}
        if same_count:
            equal = (col_a.to_numpy() == col_b.to_numpy()) | (col_a.isna().to_numpy() & col_b.isna().to_numpy())
            rows = int((~np.asarray(equal, dtype=bool)).sum())
            if rows:
                entry["rows_differing"] = rows
                if numeric:
                    entry["max_abs_difference"] = float(
                        np.nanmax(np.abs(col_b.to_numpy(float) - col_a.to_numpy(float)))
                    )
        if numeric:
            sa, sb = float(col_a.sum()), float(col_b.sum())
            if entry or not _close(sa, sb):
                entry["sum"] = _pair(sa, sb)
        elif not same_count and sorted(map(str, col_a)) != sorted(map(str, col_b)):
            entry["values_differ"] = True
        if entry:
            changed[name] = entry
    identical = same_count and crs_equal and geometry_rows == 0 and fields_a == fields_b and not changed
    area_unit = f"square {unit}" if unit else "square CRS units"
    return {
        "kind": "vector",
        "content_identical": bool(identical),
        "feature_count": {"recorded": len(a), "replayed": len(b), "difference": len(b) - len(a)},
        "crs_equal": bool(crs_equal),
        "crs": None if a.crs is None else a.crs.to_string(),
        # Planar, in the dataset's own CRS: a comparison of two files, not a ground measurement.
        "total_area": {**_pair(area_a, area_b), "unit": area_unit, "planar_in_dataset_crs": True},
        "total_length": {**_pair(length_a, length_b), "unit": unit or "CRS units", "planar_in_dataset_crs": True},
        "geometries_differing": geometry_rows,
        "fields": {
            "added": [f for f in fields_b if f not in fields_a],
            "removed": [f for f in fields_a if f not in fields_b],
            "order_changed": fields_a != fields_b and sorted(fields_a) == sorted(fields_b),
            "changed": changed,
        },
    }


def _compare_rasters(app: MapSmith, recorded: Path, replayed: Path) -> dict[str, Any]:
    io = app.dataset_io("opensource")
    ga = dict(io.inspect(recorded, None, validity=True).grid or {})
    gb = dict(io.inspect(replayed, None, validity=True).grid or {})
    header = {}
    for key in ("width", "height", "count", "dtypes", "nodata", "transform"):
        if ga.get(key) != gb.get(key):
            header[key] = {"recorded": ga.get(key), "replayed": gb.get(key)}
    bands = []
    for i, (sa, sb) in enumerate(zip(ga.get("statistics") or [], gb.get("statistics") or [], strict=False), 1):
        band: dict[str, Any] = {"band": i}
        for stat in ("min", "max", "mean"):
            x, y = sa.get(stat), sb.get(stat)
            band[stat] = {"recorded": x, "replayed": y, "difference": None if x is None or y is None else y - x}
        bands.append(band)
    cells = _cells_differing(recorded, replayed) if not header else None
    return {
        "kind": "raster",
        "content_identical": not header and cells is not None and cells["cells_differing"] == 0,
        "width": {"recorded": ga.get("width"), "replayed": gb.get("width")},
        "height": {"recorded": ga.get("height"), "replayed": gb.get("height")},
        "header_differences": header,
        "bands": bands,
        "cells": cells,
    }


def _cells_differing(recorded: Path, replayed: Path) -> dict[str, Any] | None:
    """Cell by cell, nodata masks included; None when rasterio is not installed (header compared only)."""
    try:
        import numpy as np
        import rasterio
    except ImportError:
        return None
    from mapsmith.gdalpolicy import allowed_driver

    differing, largest = 0, 0.0
    with (
        rasterio.open(recorded, driver=allowed_driver(recorded)) as ra,
        rasterio.open(replayed, driver=allowed_driver(replayed)) as rb,
    ):
        for band in range(1, ra.count + 1):
            x, y = ra.read(band, masked=True), rb.read(band, masked=True)
            mx, my = np.ma.getmaskarray(x), np.ma.getmaskarray(y)
            both = ~mx & ~my
            values_differ = both & (x.filled(0) != y.filled(0))
            differing += int((mx != my).sum() + values_differ.sum())
            if values_differ.any():
                delta = np.abs(y.filled(0).astype("float64") - x.filled(0).astype("float64"))[values_differ]
                largest = max(largest, float(delta.max()))
    return {"cells_differing": differing, "max_abs_difference": largest}


def _byte_difference(recorded: Path, replayed: Path) -> dict[str, Any]:
    """Where two files with equal content differ in bytes, and whether known causes account for every byte.

    Known causes: ``gpkg_last_change`` (GDAL stamps the write time into ``gpkg_contents.last_change``)
    and ``temporary_layer_name`` (a layer name stored in the file that is the runner's temporary file
    name, ``.<stem>.tmp-<8 hex>``, random per run). Differences are ``explained`` only when every
    differing byte lies inside one of them.
    """
    if recorded.is_dir() or replayed.is_dir() or recorded.suffix.lower() == ".shp":
        return {
            "explained": False,
            "causes": [],
            "explanation": "a multi-file dataset differs in bytes; its member files were not compared",
        }
    import numpy as np

    a, b = recorded.read_bytes(), replayed.read_bytes()
    common = min(len(a), len(b))
    offsets = np.flatnonzero(
        np.frombuffer(a, dtype=np.uint8, count=common) != np.frombuffer(b, dtype=np.uint8, count=common)
    ).tolist()
    out: dict[str, Any] = {
        "size": {"recorded": len(a), "replayed": len(b)},
        "bytes_differing": len(offsets) + abs(len(a) - len(b)),
        "first_offset": offsets[0] if offsets else common,
    }
    spans: dict[str, list[tuple[int, int]]] = {}
    notes: dict[str, str] = {}
    if recorded.suffix.lower() == ".gpkg":
        stamps_a, stamps_b = _gpkg_last_change(recorded), _gpkg_last_change(replayed)
        out["gpkg_last_change"] = {"recorded": stamps_a, "replayed": stamps_b}
        spans["gpkg_last_change"] = [s for t in stamps_a for s in _spans(a, t.encode())] + [
            s for t in stamps_b for s in _spans(b, t.encode())
        ]
        notes["gpkg_last_change"] = (
            f"the GeoPackage write time in {_GPKG_TIMESTAMP_COLUMN} ({', '.join(stamps_a)} recorded, "
            f"{', '.join(stamps_b)} replayed): GDAL stamps the wall clock there unless OGR_CURRENT_DATE is set"
        )
    names = [m.span() for m in _TEMP_NAME.finditer(a)] + [m.span() for m in _TEMP_NAME.finditer(b)]
    if names:
        spans["temporary_layer_name"] = names
        notes["temporary_layer_name"] = (
            "the layer name stored in the file, which is the runner's temporary file name (random per run)"
        )
    causes = [cause for cause, found in spans.items() if any(start <= i < end for i in offsets for start, end in found)]
    covered = len(a) == len(b) and all(
        any(start <= i < end for found in spans.values() for start, end in found) for i in offsets
    )
    out["causes"] = causes if covered else []
    out["explained"] = covered
    if covered:
        out["explanation"] = "every differing byte is inside " + "; and ".join(notes[c] for c in causes)
    else:
        out["explanation"] = f"{out['bytes_differing']} byte(s) differ with no known cause found (content equal)"
    return out


def _gpkg_last_change(path: Path) -> list[str]:
    """Every ``gpkg_contents.last_change`` of a GeoPackage (a copy in the scratch folder), read-only."""
    try:
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        return [str(row[0]) for row in con.execute("SELECT last_change FROM gpkg_contents") if row[0]]
    except sqlite3.Error:
        return []
    finally:
        con.close()


def _spans(data: bytes, needle: bytes) -> list[tuple[int, int]]:
    spans, start = [], data.find(needle)
    while start != -1:
        spans.append((start, start + len(needle)))
        start = data.find(needle, start + 1)
    return spans
