"""Which QGIS algorithm does the same job as one of MapSmith's own operations, and the order that follows.

With QGIS installed, ~340 ``qgis:`` algorithms join the catalogue; several repeat an operation MapSmith
has its own contract, checks and provenance for. When both are delivered, MapSmith's own comes first and
each candidate says which is which, so an agent does not pick the unverified twin by accident.

The table is written by hand from the two catalogues (QGIS 3.22's algorithm ids, our contracts);
``tests/catalog/test_pairs.py`` checks every name against the built-in contracts and the committed QGIS
extract (``tests/data/qgis_algorithms.json``), so a renamed entry fails a test instead of pairing nothing.

What this module must never do: remove a candidate, import QGIS, or move anything but a paired QGIS entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["SAME_JOB", "own_first", "same_job_as", "stack_of"]

# MapSmith operation -> QGIS algorithms (as catalogue names) that do the same job.
SAME_JOB: Mapping[str, tuple[str, ...]] = {
    "aspect": ("qgis:native:aspect", "qgis:gdal:aspect"),
    "band_math": ("qgis:qgis:rastercalculator", "qgis:gdal:rastercalculator"),
    "band_statistics": ("qgis:native:rasterlayerstatistics",),
    "buffer_layer": ("qgis:native:buffer", "qgis:gdal:buffervectors"),
    "calculate_field": ("qgis:native:fieldcalculator",),
    "centroid_layer": ("qgis:native:centroids",),
    "clip_layer": ("qgis:native:clip", "qgis:gdal:clipvectorbypolygon"),
    "clip_raster": ("qgis:gdal:cliprasterbymasklayer",),
    "convert_format": ("qgis:gdal:convertformat",),
    "convex_hull": ("qgis:native:convexhull", "qgis:qgis:minimumboundinggeometry"),
    "count_in_polygons": ("qgis:native:countpointsinpolygon",),
    "describe_dataset": ("qgis:gdal:ogrinfo", "qgis:gdal:gdalinfo"),
    "dissolve_layer": ("qgis:native:dissolve", "qgis:gdal:dissolve"),
    "euclidean_distance": ("qgis:gdal:proximity",),
    "explode_layer": ("qgis:native:multiparttosingleparts",),
    "fetch_dataset": ("qgis:native:filedownloader",),
    "hillshade": ("qgis:native:hillshade", "qgis:gdal:hillshade"),
    "idw_interpolation": ("qgis:qgis:idwinterpolation", "qgis:gdal:gridinversedistance"),
    "join_attributes": ("qgis:native:joinattributestable",),
    "measure_area": ("qgis:qgis:exportaddgeometrycolumns",),
    "merge_layers": ("qgis:native:mergevectorlayers",),
    "nearest_join": ("qgis:native:joinbynearest",),
    "nearest_neighbour_index": ("qgis:native:nearestneighbouranalysis",),
    "overlay_layers": (
        "qgis:native:intersection",
        "qgis:native:union",
        "qgis:native:difference",
        "qgis:native:symmetricaldifference",
    ),
    "point_on_surface": ("qgis:native:pointonsurface",),
    "rasterize_layer": ("qgis:gdal:rasterize",),
    "reclassify_raster": ("qgis:native:reclassifybytable", "qgis:native:reclassifybylayer"),
    "rename_fields": ("qgis:native:renametablefield",),
    "repair_geometries": ("qgis:native:fixgeometries",),
    "reproject_layer": ("qgis:native:reprojectlayer",),
    "reproject_raster": ("qgis:gdal:warpreproject",),
    "run_sql": ("qgis:qgis:executesql", "qgis:gdal:executesql"),
    "sample_raster_at_points": ("qgis:native:rastersampling",),
    "select_features": (
        "qgis:native:extractbyattribute",
        "qgis:native:extractbyexpression",
        "qgis:native:extractbylocation",
    ),
    "select_fields": ("qgis:native:retainfields",),
    "simplify_layer": ("qgis:native:simplifygeometries",),
    "slope": ("qgis:native:slope", "qgis:gdal:slope"),
    "spatial_join": ("qgis:native:joinattributesbylocation",),
    "table_to_points": ("qgis:native:createpointslayerfromtable",),
    "viewshed": ("qgis:gdal:viewshed",),
    "zonal_statistics": ("qgis:native:zonalstatisticsfb", "qgis:native:zonalstatistics"),
}
_OWN_BY_TWIN = {twin: own for own, twins in SAME_JOB.items() for twin in twins}


def stack_of(name: str) -> str:
    """The stack an entry comes from: a toolbox's prefix (``qgis`` for ``qgis:native:buffer``), else ``mapsmith``."""
    return name.split(":", 1)[0] if ":" in name else "mapsmith"


def same_job_as(name: str, present: set[str] | frozenset[str]) -> list[str]:
    """The entries among ``present`` that do the same job as ``name`` (its QGIS twins, or its own operation)."""
    if name in _OWN_BY_TWIN:
        own = _OWN_BY_TWIN[name]
        return [own] if own in present else []
    return [t for t in SAME_JOB.get(name, ()) if t in present]


def own_first(ordered: Sequence[str]) -> list[str]:
    """``ordered`` with each of MapSmith's operations moved up to just before the first of its QGIS twins
    that was ranked above it; everything else keeps its order."""
    out = list(ordered)
    position = {name: i for i, name in enumerate(out)}
    for own in sorted(SAME_JOB, key=lambda n: position.get(n, len(out))):
        if own not in position:
            continue
        twins = [position[t] for t in SAME_JOB[own] if t in position]
        first_twin = min(twins, default=None)
        if first_twin is not None and first_twin < position[own]:
            out.remove(own)
            out.insert(first_twin, own)
            position = {name: i for i, name in enumerate(out)}
    return out
