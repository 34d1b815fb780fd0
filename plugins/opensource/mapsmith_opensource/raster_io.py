"""Reading and writing rasters for the opensource stack (rasterio, GDAL), refusing grids that lie.

One place decides how a grid is read before any number is computed from it:

- **Two georeferencings.** GDAL reads a GeoTIFF's ``.aux.xml`` sidecar before the file's own tags
  (and a ``.tfw`` world file when the tags are absent). When the readings disagree, describing the
  file lists them all; computing on it is refused, naming both and how to choose. A caller who set
  ``GDAL_GEOREF_SOURCES`` has chosen, and the choice is recorded on that input.
- **Pixel is point.** ``AREA_OR_POINT=Point`` rasters are positioned by GDAL's geotransform, which
  already moves the origin by half a cell (GDAL RFC 33). Nothing here shifts again; the reading is
  recorded in ``crs_decisions``.
- **South-up grids** (positive y cell size) are flipped to north-up in memory, the same cells at the
  same places, and the flip is disclosed. **Rotated** geotransforms are refused: no engine here
  computes slopes or distances on a sheared grid.
- **Scale and offset.** A band that declares them is read as physical values (stored x scale +
  offset, float64) by ``Grid.read``; an operation copying cells unchanged asks for ``stored=True`` and
  writes the same scale and offset on its output. The rules and the manifest record live in
  ``raster_scaling``.

Engines that read files themselves get ``plain_copy``: north-up, uncompressed, no predictor, physical values.

The header side (open policy, size limit, georeferencing readings, ``inspect_raster``) lives in
``raster_header`` and is re-exported here. Every open goes through ``open_raster``: rasterio is given
the allowed-drivers list of ``mapsmith.gdalpolicy`` (``GTiff`` for a ``.tif``), so GDAL never reads a
``.tif`` as a VRT. A grid is measured from its header before any cell is read (``check_raster_size``): more cells than
``MAPSMITH_MAX_RASTER_CELLS`` (default 250 million, about 2 GB as doubles) is refused with
``RASTER_TOO_LARGE`` instead of letting an operation exhaust the machine's memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import InputError, OutputError
from mapsmith.verify import GEOREF_SOURCE_NAMES as SOURCE_FILES
from mapsmith.verify import require_one_georeferencing
from mapsmith_opensource import raster_scaling
from mapsmith_opensource.raster_header import (  # re-exported: callers read them from raster_io
    DEFAULT_MAX_RASTER_CELLS as DEFAULT_MAX_RASTER_CELLS,
)
from mapsmith_opensource.raster_header import GEOREF_SOURCES as GEOREF_SOURCES
from mapsmith_opensource.raster_header import MAX_RASTER_CELLS_ENV as MAX_RASTER_CELLS_ENV
from mapsmith_opensource.raster_header import RASTER_SUFFIXES as RASTER_SUFFIXES
from mapsmith_opensource.raster_header import _quiet_open, _transform_list
from mapsmith_opensource.raster_header import check_raster_size as check_raster_size
from mapsmith_opensource.raster_header import georef_readings as georef_readings
from mapsmith_opensource.raster_header import inspect_raster as inspect_raster
from mapsmith_opensource.raster_header import is_raster as is_raster
from mapsmith_opensource.raster_header import max_raster_cells as max_raster_cells
from mapsmith_opensource.raster_header import open_raster as open_raster
from mapsmith_opensource.raster_header import readings_disagree as readings_disagree
from mapsmith_opensource.raster_stats import BLOCK_ROWS as BLOCK_ROWS  # sample_ops reads it from here

if TYPE_CHECKING:
    import numpy as np
    from affine import Affine
    from pyproj import CRS

    from mapsmith.runner import RunContext

RASTER_FORMATS = (".tif", ".tiff")


@cache
def engine_versions() -> dict[str, str]:
    import numpy
    import rasterio

    return {"rasterio": rasterio.__version__, "GDAL": rasterio.__gdal_version__, "numpy": numpy.__version__}


def set_raster_engine(ctx: RunContext, name: str = "rasterio", version: str | None = None, **extra: str) -> None:
    """Record ``name`` (rasterio unless another engine computed) and the raster libraries under it."""
    versions = engine_versions()
    if name == "rasterio":
        version = versions["rasterio"]
    components = {k: v for k, v in versions.items() if k != name}
    ctx.set_engine(name, version or "unknown", **components, **extra)


# -- reading a grid to compute on ---------------------------------------------------------------


@dataclass
class Grid:
    """A raster input after its checks: north-up, one georeferencing, CRS declared.

    ``dtypes`` are the types ``read`` returns (float64 for a band with a scale or offset);
    ``stored_dtypes`` the file's own."""

    slot: str
    path: Path
    crs: CRS
    transform: Affine  # north-up (flipped from the file's when ``flipped``)
    width: int
    height: int
    count: int
    nodata: float | None
    dtypes: list[str]
    band_names: list[str]
    area_or_point: str
    flipped: bool = False
    disclosures: list[str] = field(default_factory=list)
    stored_dtypes: list[str] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    offsets: list[float] = field(default_factory=list)
    scaling_record: dict | None = field(default=None, repr=False)
    ctx: Any = field(default=None, repr=False)

    def scaling(self, band: int | str) -> tuple[float, float]:
        """(scale, offset) the band declares; (1, 0) when it declares none."""
        index = self.band_index(band)
        if len(self.scales) < index:
            return 1.0, 0.0
        return self.scales[index - 1], self.offsets[index - 1]

    @property
    def scaled(self) -> bool:
        return any(raster_scaling.is_scaled(s, o) for s, o in zip(self.scales, self.offsets, strict=True))

    @property
    def cell_size(self) -> tuple[float, float]:
        return abs(self.transform.a), abs(self.transform.e)

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        t = self.transform
        return t.c, t.f + t.e * self.height, t.c + t.a * self.width, t.f

    def band_index(self, band: int | str) -> int:
        """A 1-based band number from a number, a band name, or a number written as text (as the
        ``band`` arguments are); a name wins over a number. Refuses a band that is not there."""
        if isinstance(band, str) and band not in self.band_names and band.strip().isdigit():
            band = int(band)
        if isinstance(band, str) and band in self.band_names:
            return self.band_names.index(band) + 1
        if isinstance(band, int) and 1 <= band <= self.count:
            return band
        raise InputError(
            f"{self.slot} has no band {band!r}; it has {self.count} band(s) named {self.band_names}",
            code="BAND_NOT_FOUND",
            evidence={"argument": self.slot, "band": band, "bands": self.band_names},
            hint=f"pass a band number 1..{self.count} or one of {self.band_names}",
        )

    def read(self, band: int | str = 1, *, window: Any = None, stored: bool = False) -> np.ma.MaskedArray:
        """One band, north-up, nodata and NaN masked, in physical values (stored x scale + offset, float64,
        when the band declares a scale or offset; recorded). ``stored`` gives the file's own numbers, for
        an operation that copies them and writes the same scale and offset. ``window`` is in north-up
        row/column terms."""
        import numpy as np

        index = self.band_index(band)
        scale, offset = self.scaling(index)
        how = raster_scaling.STORED_CARRIED if stored else raster_scaling.PHYSICAL
        raster_scaling.mark_read(self.ctx, self.scaling_record, self.slot, index, how)
        with _quiet_open(self.path) as ds:
            if self.flipped and window is not None:
                from rasterio.windows import Window

                window = Window(
                    window.col_off, self.height - window.row_off - window.height, window.width, window.height
                )
            data = ds.read(index, window=window, masked=True)
        if self.flipped:
            data = data[::-1, :]
        if np.issubdtype(data.dtype, np.floating):
            data = np.ma.masked_where(np.isnan(data.filled(0)) | np.ma.getmaskarray(data), data)
        if not stored and raster_scaling.is_scaled(scale, offset):
            data = raster_scaling.to_physical(data, scale, offset)
        return data

    def cell_centres(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map coordinates of cell centres. GDAL's transform already places a pixel-is-point
        raster's samples at cell centres (RFC 33): no further half-cell shift."""
        t = self.transform
        return t.c + (cols + 0.5) * t.a, t.f + (rows + 0.5) * t.e

    def plain_copy(self, directory: Path, band: int | str = 1, dtype: str | None = None) -> Path:
        """One band as a north-up, uncompressed, striped GeoTIFF without a predictor: the encoding every
        engine reads as GDAL does, in physical values and without scale or offset tags (an engine reading
        the file would not apply them). The caller discloses why it needed it."""
        import numpy as np
        import rasterio

        index = self.band_index(band)
        data = self.read(index)
        out_dtype = dtype or data.dtype.name
        if raster_scaling.is_scaled(*self.scaling(index)):
            # the stored nodata number may be a physical value now; pick one no valid value takes
            nodata = raster_scaling.free_float_nodata(np.ma.compressed(data))
        else:
            nodata = self.nodata if self.nodata is not None else _default_nodata(out_dtype)
        path = directory / f"{self.slot.replace('[', '_').replace(']', '')}_plain.tif"
        with (
            rasterio.Env(GDAL_PAM_ENABLED="NO"),
            rasterio.open(
                path,
                "w",
                driver="GTiff",
                width=self.width,
                height=self.height,
                count=1,
                dtype=out_dtype,
                crs=self.crs.to_wkt(),
                transform=self.transform,
                nodata=nodata,
            ) as dst,
        ):
            dst.write(np.ma.filled(data.astype(out_dtype), nodata), 1)
        return path


def _default_nodata(dtype: str) -> float:
    import numpy as np

    if np.issubdtype(np.dtype(dtype), np.floating):
        return -9999.0
    info = np.iinfo(np.dtype(dtype))
    return float(info.min if info.min < 0 else info.max)


def open_grid(ctx: RunContext, slot: str = "input_path") -> Grid:
    """The checked grid of one raster input; refuses two georeferencings and rotated grids."""
    from affine import Affine

    from mapsmith.crs import parse_crs

    path = ctx.paths[slot]
    given = ctx.given_paths.get(slot, path.name)
    info = inspect_raster(path)
    grid = dict(info.grid or {})
    check_raster_size(slot, given, grid["width"], grid["height"])
    georef = grid["georeferencing"]
    if georef["GDAL_GEOREF_SOURCES"]:
        ctx.input_environment.setdefault(slot, {})["GDAL_GEOREF_SOURCES"] = georef["GDAL_GEOREF_SOURCES"]
    require_one_georeferencing(info, slot)  # the runner checked already; a direct caller gets the same refusal
    if georef["source_used"] and georef["source_used"] != "INTERNAL":
        ctx.input_environment.setdefault(slot, {})["x-mapsmith:georeferencing_from"] = SOURCE_FILES[
            georef["source_used"]
        ]
    scales = [float(v) for v in grid.get("scales") or [1.0] * grid["count"]]
    offsets = [float(v) for v in grid.get("offsets") or [0.0] * grid["count"]]
    raster_scaling.check_scaling(slot, given, scales, offsets)
    if info.crs_wkt is None:
        raise InputError(
            f"{slot} ({given}) declares no CRS",
            code="CRS_REQUIRED",
            evidence={"argument": slot, "path": given},
            hint="assign the CRS the raster was made in; MapSmith will not guess one",
        )
    t = Affine.from_gdal(*grid["transform"])
    disclosures = []
    flipped = False
    if grid["south_up"]:
        flipped = True
        t = Affine(t.a, 0.0, t.c, 0.0, -t.e, t.f + t.e * grid["height"])
        disclosures.append(
            f"{slot} is stored south-up (positive y cell size); its rows were read bottom-first so the grid is "
            "north-up, the same cells at the same places"
        )
        ctx.notes.append(disclosures[-1])
        ctx.parameters.setdefault("x-mapsmith:normalised_inputs", {})[slot] = "south-up rows flipped to north-up"
    registration = grid["area_or_point"]
    ctx.crs_decisions.setdefault("x-mapsmith:pixel_registration", {})[slot] = (
        "Point: values are samples at the positions GDAL's geotransform gives (already half a cell from the "
        "tag's corner, RFC 33); not shifted again"
        if registration.lower() == "point"
        else "Area: values describe cells; positions are cell centres from the geotransform"
    )
    stored_dtypes = list(grid["dtypes"])
    return Grid(
        slot=slot,
        path=path,
        crs=parse_crs(info.crs_wkt),
        transform=t,
        width=grid["width"],
        height=grid["height"],
        count=grid["count"],
        nodata=grid["nodata"],
        dtypes=[
            "float64" if raster_scaling.is_scaled(s, o) else d
            for d, s, o in zip(stored_dtypes, scales, offsets, strict=True)
        ],
        band_names=grid["band_names"],
        area_or_point=registration,
        flipped=flipped,
        disclosures=disclosures,
        stored_dtypes=stored_dtypes,
        scales=scales,
        offsets=offsets,
        scaling_record=raster_scaling.start_record(ctx, slot, scales, offsets),
        ctx=ctx,
    )


def require_projected(ctx: RunContext, grid: Grid, what: str) -> None:
    """Refuse a grid whose cells are degrees where ``what`` needs metres (the runner refuses first for
    contracts that declare ``needs_projected_crs``), and record the analysis CRS."""
    from mapsmith.crs import crs_label, linear_unit_metres
    from mapsmith.verify import require_projected_grid

    require_projected_grid(ctx.inputs[grid.slot], grid.slot, what)
    unit = linear_unit_metres(grid.crs)
    ctx.crs_decisions.setdefault("analysis_crs", crs_label(grid.crs))
    ctx.crs_decisions.setdefault(
        "reason", f"{what} computed on {grid.slot}'s own grid, whose cells are {grid.cell_size[0] * unit:g} m wide"
    )


# -- writing -----------------------------------------------------------------------------------


def write_raster(
    ctx: RunContext,
    data: Any,
    *,
    transform: Affine,
    crs: CRS,
    nodata: float | None,
    dtype: str | None = None,
    band_names: Sequence[str] | None = None,
    value_range: tuple[float | None, float | None] | None = None,
    tags: dict[str, str] | None = None,
    scales: Sequence[float] | None = None,
    offsets: Sequence[float] | None = None,
) -> None:
    """Write ``data`` (2-D, or 3-D bands-first; masked cells become ``nodata``) to ``ctx.temp_output``
    as a tiled DEFLATE GeoTIFF without a predictor, and tell the runner what grid it meant to write."""
    import numpy as np

    if ctx.temp_output is None or ctx.output_path is None:
        raise OutputError("this operation writes no dataset", code="OUTPUT_NOT_EXPECTED")
    if ctx.output_path.suffix.lower() not in RASTER_FORMATS:
        raise OutputError(
            f"{ctx.output_path.name}: rasters are written as GeoTIFF",
            code="OUTPUT_FORMAT_UNSUPPORTED",
            hint="choose an output_path ending in .tif",
        )
    array = data if data.ndim == 3 else data[np.newaxis, ...]
    out_dtype = dtype or array.dtype.name
    if np.ma.isMaskedArray(array):
        if nodata is None and np.ma.getmaskarray(array).any():
            nodata = _default_nodata(out_dtype)
        array = np.ma.filled(array.astype(out_dtype), nodata if nodata is not None else 0)
    else:
        array = array.astype(out_dtype, copy=False)
    count, height, width = array.shape
    profile: dict[str, Any] = {
        "driver": "GTiff",
        "width": width,
        "height": height,
        "count": count,
        "dtype": out_dtype,
        "crs": crs.to_wkt(),
        "transform": transform,
        "nodata": nodata,
        "compress": "deflate",
        "BIGTIFF": "IF_SAFER",
    }
    if width >= 256 and height >= 256:
        profile.update(tiled=True, blockxsize=256, blockysize=256)
    names, extra = band_names or (), tags or {}
    scaling = (tuple(scales or ()), tuple(offsets or ()))
    _commit_bytes(ctx.temp_output, lambda path: _write_geotiff(path, array, profile, names, extra, scaling))
    raster_scaling.record_output(ctx, scaling[0], scaling[1])
    ctx.expected_grid = {
        "width": width,
        "height": height,
        "transform": _transform_list(transform),
        "nodata": nodata,
        "value_range": list(value_range) if value_range is not None else None,
    }


def adopt_engine_output(
    ctx: RunContext,
    produced: Path,
    *,
    transform: Affine,
    nodata: float | None,
    value_range: tuple[float | None, float | None] | None = None,
) -> None:
    """Move a GeoTIFF an engine wrote (in a folder beside the output) into ``ctx.temp_output``, and
    tell the runner the grid it must have: the grid the engine was given, not the one it claims."""
    if ctx.temp_output is None:
        raise OutputError("this operation writes no dataset", code="OUTPUT_NOT_EXPECTED")
    with _quiet_open(produced) as ds:
        width, height = ds.width, ds.height
    _commit_bytes(ctx.temp_output, lambda path: os.replace(produced, path))
    raster_scaling.record_output(ctx, (), ())  # engines write physical values; none declares a scale
    ctx.expected_grid = {
        "width": width,
        "height": height,
        "transform": _transform_list(transform),
        "nodata": nodata,
        "value_range": list(value_range) if value_range is not None else None,
    }


def _commit_bytes(path: Path, produce: Callable[[Path], None]) -> None:
    """The one place a raster output's bytes reach the temporary output path (tests sabotage it here)."""
    produce(path)


def _write_geotiff(
    path: Path,
    array: Any,
    profile: dict[str, Any],
    band_names: Sequence[str],
    tags: dict[str, str],
    scaling: tuple[tuple[float, ...], tuple[float, ...]] = ((), ()),
) -> None:
    """A raster output's bytes, in the file itself: no ``.aux.xml`` sidecar for names, tags or scaling."""
    import rasterio

    with rasterio.Env(GDAL_PAM_ENABLED="NO"), rasterio.open(path, "w", **profile) as dst:
        dst.write(array)
        for i, name in enumerate(band_names):
            dst.set_band_description(i + 1, name)
        if tags:
            dst.update_tags(**tags)
        scales, offsets = scaling
        if scales:
            dst.scales = scales
        if offsets:
            dst.offsets = offsets
