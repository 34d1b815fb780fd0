"""Whitebox Workflows (2.x, open tier) as an engine: fed only what it reads as GDAL does.

Whitebox reads GeoTIFFs with its own decoder, and that decoder is wrong in ways that raise no
error: it ignores the TIFF predictor tag (so DEFLATE/LZW files with ``PREDICTOR=2`` or ``3`` come
back as raw differences -- the Mount St. Helens DEM reads as -63..2531 instead of 652..2534), it
cannot decode ZSTD, and it drops south-up and rotated geotransforms for 1 m pixel coordinates.
It also silently ignores misspelt keyword arguments. So this adapter:

- hands Whitebox a plain copy (north-up, uncompressed, no predictor) whenever the file is not one
  it reads correctly, and says so in the manifest (``x-mapsmith:normalised_inputs``); a band that
  declares a scale or offset is one (Whitebox reads the stored numbers), so its copy holds physical
  values;
- compares cells read by Whitebox with the same cells read by GDAL before computing
  (``x-mapsmith:engine_read_matches``), so a decoder problem nobody has met yet still stops the run;
- checks every keyword against the tool's own documented parameters before calling it;
- lets Whitebox write into a private folder beside the output and moves the file into place only
  after its grid has been compared with the grid it was given.

Tools are called through the category objects with keyword arguments
(``wbe.terrain.slope(input=...)``): the flat methods are disabled in this build.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, EngineError
from mapsmith_opensource import raster_io

if TYPE_CHECKING:
    from mapsmith.runner import RunContext
    from mapsmith_opensource.raster_io import Grid

# Encodings Whitebox 2.0.x decodes correctly (verified cell by cell against GDAL).
SAFE_COMPRESSION = {None, "none", "deflate", "lzw", "packbits"}
READ_PROBES = 97  # cells compared between Whitebox's read and GDAL's
# Tools whose docstring lists no parameters in this build; these names were verified by their effect.
UNDOCUMENTED_PARAMETERS = {"terrain.hillshade": {"input", "azimuth", "altitude", "z_factor", "output"}}


@cache
def environment() -> Any:
    import whitebox_workflows

    return whitebox_workflows.WbEnvironment()


def version() -> str:
    from importlib.metadata import version as dist_version

    return dist_version("whitebox-workflows")


def set_whitebox_engine(ctx: RunContext) -> None:
    wbe = environment()
    raster_io.set_raster_engine(ctx, "whitebox_workflows", version(), licence=str(wbe.license_info()))


def open_dem(ctx: RunContext, what: str) -> Grid:
    """Record Whitebox as the engine and open input_path as a checked, projected grid."""
    set_whitebox_engine(ctx)
    grid = raster_io.open_grid(ctx)
    raster_io.require_projected(ctx, grid, what)
    return grid


@contextmanager
def workdir(ctx: RunContext) -> Iterator[Path]:
    """A private folder beside the output (same file system, so the final move is a rename); removed
    whatever happens."""
    parent = ctx.temp_output.parent if ctx.temp_output is not None else None
    path = Path(tempfile.mkdtemp(prefix=".mapsmith-wbt-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _needs_plain_copy(grid: Grid) -> list[str]:

    with raster_io.open_raster(grid.path) as ds:
        compression = (ds.profile.get("compress") or "none").lower()
        predictor = int(ds.tags(ns="IMAGE_STRUCTURE").get("PREDICTOR", 1))
        driver = ds.driver
    reasons = []
    if driver != "GTiff":
        reasons.append(f"it is a {driver} file, not a GeoTIFF")
    if predictor != 1:
        reasons.append(f"it is stored with TIFF predictor {predictor}, which Whitebox's decoder ignores")
    if compression not in SAFE_COMPRESSION:
        reasons.append(f"it is {compression}-compressed, which Whitebox cannot decode")
    if grid.flipped:
        reasons.append("it is stored south-up, which Whitebox reads as a 1 m grid at the origin")
    if grid.scaled:
        pairs = enumerate(zip(grid.scales, grid.offsets, strict=True), start=1)
        scales = ", ".join(f"band {b}: x {s:g} + {o:g}" for b, (s, o) in pairs)
        reasons.append(
            f"it declares a scale and offset ({scales}), which Whitebox does not apply: the copy holds the "
            "physical values"
        )
    return reasons


def read_input(ctx: RunContext, grid: Grid, directory: Path, band: int | str = 1, *, float_copy: bool = False) -> Any:
    """The Whitebox raster of one band of ``grid``, read-checked against GDAL. With ``float_copy`` an
    integer band is handed over as float32 (tools that compute in the input's number type)."""
    import numpy as np
    from rasterio.windows import Window

    wbe = environment()
    index = grid.band_index(band)
    dtype = grid.dtypes[index - 1]
    reasons = _needs_plain_copy(grid) if grid.count == 1 else ["it has several bands"]
    integer = not np.issubdtype(np.dtype(dtype), np.floating)
    if float_copy and integer:
        reasons.append(
            f"it holds {dtype} values and this Whitebox tool computes in the input's number type; float32 holds "
            "every integer up to 16,777,216 exactly"
        )
    path = grid.path
    if reasons:
        path = grid.plain_copy(directory, index, dtype="float32" if float_copy and integer else None)
        what = "re-encoded as a plain GeoTIFF (north-up, uncompressed, no predictor) for Whitebox, because " + (
            "; ".join(reasons)
        )
        ctx.parameters.setdefault("x-mapsmith:normalised_inputs", {})[grid.slot] = what
        ctx.notes.append(
            f"{grid.slot} {what}; "
            + ("the values are the physical ones GDAL reads" if grid.scaled else "the values are GDAL's, unchanged")
        )
    raster = wbe.read_raster(str(path))
    # Compare a spread of cells, read one by one: a decoder that misreads the file differs almost everywhere.
    rng = np.random.default_rng(0)
    rows = rng.integers(0, grid.height, READ_PROBES)
    cols = rng.integers(0, grid.width, READ_PROBES)
    bad = []
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        cell = grid.read(index, window=Window(c, r, 1, 1))
        theirs = raster.get_value(r, c)
        if np.ma.getmaskarray(cell)[0, 0]:
            if not raster.is_cell_nodata(r, c):
                bad.append((r, c, "nodata", theirs))
            continue
        ours = float(cell[0, 0])
        if raster.is_cell_nodata(r, c) or abs(float(theirs) - ours) > 1e-6 * max(1.0, abs(ours)):
            bad.append((r, c, ours, theirs))
    ctx.check(
        "x-mapsmith:engine_read_matches",
        not bad,
        f"{READ_PROBES} cells of {grid.slot} read by Whitebox and by GDAL: {len(bad)} differ"
        + (f", e.g. row {bad[0][0]} col {bad[0][1]}: GDAL {bad[0][2]}, Whitebox {bad[0][3]}" if bad else ""),
        argument=grid.slot,
    )
    if bad:
        raise EngineError(
            f"Whitebox reads {grid.slot} differently from GDAL ({len(bad)} of {READ_PROBES} probed cells differ); "
            "MapSmith will not compute on values the engine misread",
            code="ENGINE_MISREAD_INPUT",
            evidence={"argument": grid.slot, "examples": [list(map(str, b)) for b in bad[:5]]},
            hint="convert the raster to an uncompressed GeoTIFF (gdal_translate -co COMPRESS=NONE) and try again",
        )
    return raster


def _documented_parameters(tool: Any) -> set[str]:
    doc = tool.__doc__ or ""
    return set(re.findall(r"^- ([a-z_][a-z0-9_]*):", doc, flags=re.MULTILINE))


@cache
def _tool(category: str, tool: str) -> tuple[Any, frozenset[str]]:
    """The tool's callable and its documented keywords (looking a tool up costs a quarter second)."""
    fn = getattr(getattr(environment(), category), tool)
    documented = _documented_parameters(fn) or UNDOCUMENTED_PARAMETERS.get(f"{category}.{tool}", set())
    return fn, frozenset(documented)


def call(ctx: RunContext, category: str, tool: str, **kwargs: Any) -> Any:
    """``wbe.<category>.<tool>(**kwargs)``, refusing a keyword the tool does not document (Whitebox
    would ignore it silently); the call is recorded in the manifest."""
    fn, documented = _tool(category, tool)
    unknown = sorted(k for k in kwargs if k not in documented)
    if unknown:
        raise ArgumentError(
            f"Whitebox {category}.{tool} does not take {', '.join(unknown)}",
            code="ENGINE_PARAMETER_UNKNOWN",
            evidence={"tool": f"{category}.{tool}", "unknown": unknown},
            hint="this is a bug in the Whitebox adapter: the tool's documented parameters are in its __doc__",
        )
    ctx.parameters.setdefault("x-mapsmith:whitebox_calls", []).append(
        {"tool": f"{category}.{tool}", "arguments": {k: _describe(v) for k, v in kwargs.items()}}
    )
    try:
        return fn(**kwargs)
    except Exception as exc:
        raise EngineError(
            f"Whitebox {category}.{tool} failed: {type(exc).__name__}: {exc}",
            evidence={"tool": f"{category}.{tool}", "exception": type(exc).__name__},
            hint="the engine's message is above; check the input it names",
        ) from exc


def _describe(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return type(value).__name__


def produce_file(ctx: RunContext, raster: Any, grid: Grid, directory: Path, *, edge_cells: int = 0) -> Path:
    """Have Whitebox write ``raster`` (tiled DEFLATE, no predictor) in ``directory``, check it lies on
    ``grid``, and blank ``edge_cells`` rings of edge cells to nodata where the tool's window runs off the
    grid. The file is the caller's to finish or adopt."""
    import numpy as np
    import rasterio
    from rasterio.windows import Window

    produced = directory / "output.tif"
    environment().write_raster(
        raster, str(produced), options={"geotiff": {"compression": "deflate", "layout": "tiled", "tile_size": 256}}
    )
    with rasterio.open(produced, "r+") as ds:
        if (ds.width, ds.height) != (grid.width, grid.height) or not ds.transform.almost_equals(grid.transform):
            raise EngineError(
                f"Whitebox wrote a {ds.width} x {ds.height} grid at {list(ds.transform)[:6]}; it was given "
                f"{grid.width} x {grid.height} at {list(grid.transform)[:6]}",
                code="ENGINE_MOVED_GRID",
                evidence={"written": list(ds.transform)[:6], "given": list(grid.transform)[:6]},
                hint="this is an engine defect; report it with the input file",
            )
        nodata = ds.nodata
        if edge_cells and nodata is not None:
            k = min(edge_cells, grid.height, grid.width)
            for window in (
                Window(0, 0, grid.width, k),
                Window(0, grid.height - k, grid.width, k),
                Window(0, 0, k, grid.height),
                Window(grid.width - k, 0, k, grid.height),
            ):
                ds.write(np.full((int(window.height), int(window.width)), nodata, ds.dtypes[0]), 1, window=window)
    if edge_cells:
        ctx.notes.append(
            f"the outer {edge_cells} ring(s) of cells are nodata: the engine's window there runs off the grid, "
            "and the values it computes at the edge are not the terrain's"
        )
    return produced


def write_output(
    ctx: RunContext,
    raster: Any,
    grid: Grid,
    directory: Path,
    *,
    value_range: tuple[float | None, float | None] | None = None,
    edge_cells: int = 0,
) -> None:
    """``produce_file``, then move the file into the temporary output with the grid it must have."""
    import rasterio

    produced = produce_file(ctx, raster, grid, directory, edge_cells=edge_cells)
    with rasterio.open(produced) as ds:
        nodata = ds.nodata
    raster_io.adopt_engine_output(ctx, produced, transform=grid.transform, nodata=nodata, value_range=value_range)
