"""Raster transformations on the opensource stack (rasterio, numpy): clip, reproject, resample,
reclassify, band arithmetic, band extraction and band statistics.

This module declares what the stack registers; the operations live in modules split along their seams:
``raster_grid_ops`` (clip_raster, reproject_raster, resample_raster), ``reclassify_ops``,
``band_math_ops`` (the whitelisted expression language and band_math), ``band_ops`` (extract_band,
band_statistics) and ``raster_shared`` (what they share). Every raster is read through
``raster_io.open_grid`` (grids with two georeferencings, rotated grids, grids without a CRS and bands
with an unusable scale are refused there, as everywhere) and written with ``raster_io.write_raster``.
Every value computed on is physical (a band's scale and offset applied, ``raster_scaling``).

What these modules must never do:

* move values to another grid without the resampling method the caller named (there is no default);
* hand any part of a band_math expression to ``eval``/``exec``/``compile``: the text is parsed with
  ``ast.parse`` and only a whitelisted tree is evaluated, with numpy, on arrays;
* pick a nodata value that is also a data value, or drop cells without counting them;
* compute on a band's stored numbers when it declares a scale or offset;
* import rasterio or numpy at module level (a start-up test checks this).
"""

from __future__ import annotations

from mapsmith_opensource.band_math_ops import band_math as band_math
from mapsmith_opensource.band_math_ops import validate_band_math as validate_band_math
from mapsmith_opensource.band_ops import band_statistics as band_statistics
from mapsmith_opensource.band_ops import extract_band as extract_band
from mapsmith_opensource.band_ops import validate_band_statistics as validate_band_statistics
from mapsmith_opensource.raster_grid_ops import clip_raster as clip_raster
from mapsmith_opensource.raster_grid_ops import reproject_raster as reproject_raster
from mapsmith_opensource.raster_grid_ops import resample_raster as resample_raster
from mapsmith_opensource.raster_grid_ops import validate_clip_raster as validate_clip_raster
from mapsmith_opensource.reclassify_ops import reclassify_raster as reclassify_raster
from mapsmith_opensource.reclassify_ops import validate_reclassify_raster as validate_reclassify_raster
from mapsmith_opensource.registration import Registration

REGISTRATIONS = (
    Registration(
        "clip_raster", "clip_raster", engine="rasterio", validate="validate_clip_raster", requirement="raster"
    ),
    Registration("reproject_raster", "reproject_raster", engine="rasterio", requirement="raster"),
    Registration("resample_raster", "resample_raster", engine="rasterio", requirement="raster"),
    Registration(
        "reclassify_raster",
        "reclassify_raster",
        engine="rasterio",
        validate="validate_reclassify_raster",
        requirement="raster",
    ),
    Registration("band_math", "band_math", engine="rasterio", validate="validate_band_math", requirement="raster"),
    Registration("extract_band", "extract_band", engine="rasterio", requirement="raster"),
    Registration(
        "band_statistics",
        "band_statistics",
        engine="rasterio",
        validate="validate_band_statistics",
        requirement="raster",
    ),
)
