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

Engines that read files themselves get ``plain_copy``: north-up, uncompressed, no predictor.

Every open goes through ``open_raster``: rasterio is given the allowed-drivers list of
``mapsmith.gdalpolicy`` (``GTiff`` for a ``.tif``), so GDAL never reads a ``.tif`` as a VRT. A grid is
measured from its header before any cell is read (``check_raster_size``): more cells than
``MAPSMITH_MAX_RASTER_CELLS`` (default 250 million, about 2 GB as doubles) is refused with
``RASTER_TOO_LARGE`` instead of letting an operation exhaust the machine's memory.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ConfigurationError, InputError, OutputError
from mapsmith.gdalpolicy import raster_drivers
from mapsmith.registry import DatasetInfo
from mapsmith.verify import GEOREF_SOURCE_NAMES as SOURCE_FILES
from mapsmith.verify import require_one_georeferencing
from mapsmith_opensource.raster_stats import BLOCK_ROWS as BLOCK_ROWS  # sample_ops reads it from here
from mapsmith_opensource.raster_stats import band_statistics

if TYPE_CHECKING:
    import numpy as np
    from affine import Affine
    from pyproj import CRS

    from mapsmith.runner import RunContext

RASTER_SUFFIXES = frozenset({".tif", ".tiff", ".vrt", ".img", ".asc", ".bil", ".jp2", ".nc", ".dem"})
# Where GDAL can find a GeoTIFF's georeferencing, in the order it consults them by default.
GEOREF_SOURCES = ("PAM", "INTERNAL", "TABFILE", "WORLDFILE")
RASTER_FORMATS = (".tif", ".tiff")


def is_raster(path: Path) -> bool:
    return path.suffix.lower() in RASTER_SUFFIXES


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


def _unreadable(path: Path, exc: Exception) -> InputError:
    return InputError(
        f"cannot read {path.name} as a raster: {exc}",
        code="INPUT_UNREADABLE",
        evidence={"path": str(path), "engine_message": str(exc)},
        hint="check the file is a complete GeoTIFF (or another GDAL raster format)",
    )


def open_raster(path: Path, **env: str) -> Any:
    """``rasterio.open`` for reading, with only the driver ``path``'s extension names allowed.

    ``env`` holds GDAL config options for the open. Raises ``InputError`` (``INPUT_UNREADABLE``)
    before GDAL runs when a ``.tif`` does not start like a TIFF.
    """
    import warnings

    import rasterio
    from rasterio.errors import NotGeoreferencedWarning

    drivers = raster_drivers(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.Env(**env):
            # rasterio takes one name (its docs say a list too; 1.4 raises TypeError): every rule has one.
            return rasterio.open(path, driver=drivers[0]) if drivers else rasterio.open(path)


_quiet_open = open_raster  # the name the rest of this module grew up with


MAX_RASTER_CELLS_ENV = "MAPSMITH_MAX_RASTER_CELLS"
DEFAULT_MAX_RASTER_CELLS = 250_000_000


def max_raster_cells(environ: Any = None) -> int:
    """The cell limit per grid an operation reads (``MAPSMITH_MAX_RASTER_CELLS``, a positive integer)."""
    raw = (os.environ if environ is None else environ).get(MAX_RASTER_CELLS_ENV)
    if raw in (None, ""):
        return DEFAULT_MAX_RASTER_CELLS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(
            f"{MAX_RASTER_CELLS_ENV} must be a positive whole number of cells, not {raw!r}",
            code="LIMIT_SETTING_INVALID",
            evidence={"variable": MAX_RASTER_CELLS_ENV, "value": raw},
            hint=f"set {MAX_RASTER_CELLS_ENV} to e.g. {DEFAULT_MAX_RASTER_CELLS}, or unset it for that default",
        )
    return value


def check_raster_size(slot: str, given: str, width: int, height: int, bands: int = 1) -> None:
    """Refuse a grid whose ``bands`` x height x width cells exceed the limit, from the header alone.

    The size on disk says nothing: a sparse or well-compressed GeoTIFF of a few hundred KB can
    declare 60000 x 60000 cells, and an operation holding it as float64 needs ~29 GB.
    """
    cells = int(width) * int(height) * int(bands)
    limit = max_raster_cells()
    if cells > limit:
        raise InputError(
            f"{slot} ({given}) is {width} x {height} cells x {bands} band(s) = {cells:,} cells, more than the "
            f"{limit:,} one operation may read",
            code="RASTER_TOO_LARGE",
            evidence={"argument": slot, "path": given, "width": width, "height": height, "bands": bands}
            | {"cells": cells, "max_cells": limit, "limit_variable": MAX_RASTER_CELLS_ENV},
            hint="MapSmith's raster operations hold whole grids in memory: cut the raster to the area and cell "
            "size the question needs outside MapSmith first (gdal_translate -projwin ... -tr ...), or restart the "
            f"server with a larger {MAX_RASTER_CELLS_ENV} if this machine has the memory (about 8 bytes a cell)",
        )


def _transform_list(t: Affine) -> list[float]:
    """GDAL order: x origin, x cell width, row rotation, y origin, column rotation, y cell height."""
    return [float(v) for v in t.to_gdal()]


def georef_readings(path: Path) -> list[dict[str, Any]]:
    """Each source's own reading of where ``path`` lies; sources that say nothing are left out."""
    from affine import Affine

    from mapsmith.crs import crs_label

    readings = []
    for source in GEOREF_SOURCES:
        try:
            with _quiet_open(path, GDAL_GEOREF_SOURCES=source) as ds:
                transform, crs = ds.transform, ds.crs
        except Exception:
            continue
        if transform == Affine.identity() and crs is None:
            continue
        readings.append(
            {
                "source": source,
                "from": SOURCE_FILES[source],
                "transform": _transform_list(transform) if transform != Affine.identity() else None,
                "crs": crs_label(crs.to_wkt()) if crs is not None else None,
            }
        )
    return readings


def readings_disagree(readings: Sequence[dict[str, Any]]) -> bool:
    transforms = [r["transform"] for r in readings if r["transform"] is not None]
    crss = {r["crs"] for r in readings if r["crs"] is not None}
    differ = any(
        any(abs(a - b) > 1e-9 * max(1.0, abs(b)) for a, b in zip(t, transforms[0], strict=True)) for t in transforms[1:]
    )
    return differ or len(crss) > 1


def inspect_raster(path: Path, *, statistics: bool = False) -> DatasetInfo:
    """The header of a raster, every georeferencing reading of it, and (when asked) band statistics."""
    from mapsmith.crs import crs_label
    from mapsmith_opensource.io import _lonlat_bounds

    try:
        # Statistics decode every block: on every core (GDAL reads the option when the file is opened).
        ds = _quiet_open(path, **({"GDAL_NUM_THREADS": "ALL_CPUS"} if statistics else {}))
    except InputError:
        raise  # the open policy's own refusal, with its evidence
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    with ds:
        t = ds.transform
        readings = georef_readings(path)
        chosen = os.environ.get("GDAL_GEOREF_SOURCES")
        crs = ds.crs
        from pyproj import CRS as PyprojCRS

        pcrs = PyprojCRS.from_wkt(crs.to_wkt()) if crs is not None else None
        corners = [t @ (c, r) for c, r in ((0, 0), (ds.width, 0), (0, ds.height), (ds.width, ds.height))]
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        bounds = (min(xs), min(ys), max(xs), max(ys))
        grid: dict[str, Any] = {
            "width": ds.width,
            "height": ds.height,
            "count": ds.count,
            "dtypes": list(ds.dtypes),
            "nodata": _nodata_value(ds.nodata),
            "transform": _transform_list(t),
            "res": [abs(t.a), abs(t.e)] if t.b == 0 and t.d == 0 else [math.hypot(t.a, t.d), math.hypot(t.b, t.e)],
            "north_up": t.b == 0 and t.d == 0 and t.e < 0,
            "south_up": t.b == 0 and t.d == 0 and t.e > 0,
            "rotated": t.b != 0 or t.d != 0,
            "area_or_point": ds.tags().get("AREA_OR_POINT", "Area"),
            "band_names": [d or f"band_{i + 1}" for i, d in enumerate(ds.descriptions)],
            "scales": [float(v) for v in ds.scales],
            "offsets": [float(v) for v in ds.offsets],
            "compression": ds.profile.get("compress"),
            "predictor": int(ds.tags(ns="IMAGE_STRUCTURE").get("PREDICTOR", 1)),
            "georeferencing": {
                "source_used": _source_used(readings, chosen),
                "readings": readings,
                "conflict": readings_disagree(readings),
                "GDAL_GEOREF_SOURCES": chosen,
            },
        }
        if statistics:
            import rasterio

            with rasterio.Env(GDAL_NUM_THREADS="ALL_CPUS"):
                grid["statistics"] = band_statistics(ds)
    return DatasetInfo(
        path=str(path),
        kind="raster",
        driver=ds.driver,
        layer=None,
        layers=(),
        crs_wkt=pcrs.to_wkt() if pcrs is not None else None,
        crs_label=crs_label(pcrs) if pcrs is not None else None,
        crs_is_geographic=pcrs.is_geographic if pcrs is not None else None,
        feature_count=None,
        geometry_types=(),
        bounds=bounds,
        bounds_lonlat=_lonlat_bounds(pcrs, bounds) if pcrs is not None else None,
        grid=grid,
    )


def _nodata_value(value: float | None) -> float | None:
    return None if value is None else float(value)


def _source_used(readings: Sequence[dict[str, Any]], chosen: str | None) -> str | None:
    order = [s.strip().upper() for s in chosen.split(",")] if chosen else list(GEOREF_SOURCES)
    present = {r["source"] for r in readings if r["transform"] is not None}
    return next((s for s in order if s in present), None)


# -- reading a grid to compute on ---------------------------------------------------------------


@dataclass
class Grid:
    """A raster input after its checks: north-up, one georeferencing, CRS declared."""

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

    def read(self, band: int | str = 1, *, window: Any = None) -> np.ma.MaskedArray:
        """One band, north-up, nodata and NaN masked. ``window`` is in north-up row/column terms."""
        import numpy as np

        index = self.band_index(band)
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
        return data

    def cell_centres(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map coordinates of cell centres. GDAL's transform already places a pixel-is-point
        raster's samples at cell centres (RFC 33): no further half-cell shift."""
        t = self.transform
        return t.c + (cols + 0.5) * t.a, t.f + (rows + 0.5) * t.e

    def plain_copy(self, directory: Path, band: int | str = 1, dtype: str | None = None) -> Path:
        """One band as a north-up, uncompressed, striped GeoTIFF without a predictor: the encoding every
        engine reads as GDAL does. The caller discloses why it needed it."""
        import numpy as np
        import rasterio

        data = self.read(band)
        out_dtype = dtype or data.dtype.name
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
    return Grid(
        slot=slot,
        path=path,
        crs=parse_crs(info.crs_wkt),
        transform=t,
        width=grid["width"],
        height=grid["height"],
        count=grid["count"],
        nodata=grid["nodata"],
        dtypes=grid["dtypes"],
        band_names=grid["band_names"],
        area_or_point=registration,
        flipped=flipped,
        disclosures=disclosures,
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
