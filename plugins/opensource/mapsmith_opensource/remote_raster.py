"""A window of a remote GeoTIFF read with GDAL's range requests, every request held to the fetch policy.

Shared by fetch_raster (a GeoTIFF's URL) and fetch_stac_asset (a STAC item's asset). GDAL makes its own
requests and follows redirects itself, so it is pointed at ``mapsmith.fetch.proxy.PolicyProxy`` for the
read: every request, redirect and range is checked there (host listed, addresses allowed, bytes and time
limited), and GDAL's netrc and retries are off. The window is the bbox (WGS 84 degrees) transformed to
the raster's CRS, widened to whole cells and cut to the grid; without a bbox the whole grid. Its cell
count is held to ``MAPSMITH_MAX_RASTER_CELLS`` before any cell is read. Cells are copied as stored, with
each band's scale, offset and nodata, on the source's own grid. Nothing is written but
``ctx.temp_output``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, InputError

if TYPE_CHECKING:
    from mapsmith.fetch.policy import FetchPolicy
    from mapsmith.fetch.proxy import PolicyProxy
    from mapsmith.runner import RunContext

ASSET_SUFFIXES = ".tif,.tiff,.TIF,.TIFF"


def bbox_argument(
    value: Any, argument: str = "bbox", *, code: str = "BBOX_INVALID"
) -> tuple[float, float, float, float]:
    """``west,south,east,north`` in WGS 84 degrees, checked; refused with ``code`` otherwise."""
    try:
        west, south, east, north = (float(v) for v in str(value).split(","))
    except ValueError:
        west = south = east = north = float("nan")
    if not (-180 <= west < east <= 180 and -90 <= south < north <= 90):
        raise ArgumentError(
            f"{argument} {value!r} is not west,south,east,north in degrees with west < east and south < north",
            code=code,
            evidence={"argument": argument, "value": value},
            hint=f"pass {argument} as 'west,south,east,north' in WGS 84 degrees",
        )
    return west, south, east, north


def refusal_or(proxy: PolicyProxy, exc: BaseException, what: str, url: str) -> BaseException:
    """The proxy's own refusal when it caused the failure; otherwise an error naming the URL."""
    refused = proxy.first_refusal()
    if refused is not None:
        return refused
    return InputError(
        f"{what} {url} failed: {str(exc)[:300]}",
        code="STAC_REQUEST_FAILED",
        evidence={"url": url, "error": str(exc)[:300]},
        hint="check the URL names a GeoTIFF (or a STAC API / item) that the server answers",
    )


def read_window(ctx: RunContext, policy: FetchPolicy, href: str, bbox: Any) -> tuple[dict[str, int], int]:
    """Write the window of ``href`` the bbox needs to ``ctx.temp_output``; (the window, bytes fetched)."""
    import rasterio
    from rasterio.warp import transform_bounds
    from rasterio.windows import Window, from_bounds

    from mapsmith.fetch.proxy import PolicyProxy
    from mapsmith_opensource.raster_header import check_raster_size

    assert ctx.temp_output is not None
    policy.check(href)  # off, host or address: refused before GDAL sees the URL
    ctx.set_engine("rasterio", rasterio.__version__, GDAL=rasterio.__gdal_version__)
    proxy = PolicyProxy(policy)
    with proxy as proxy_url:
        gdal_env = {
            "GDAL_HTTP_PROXY": proxy_url,
            "GDAL_HTTPS_PROXY": proxy_url,
            "GDAL_HTTP_NETRC": "NO",
            "GDAL_HTTP_MAX_RETRY": "0",
            "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR",
            "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": ASSET_SUFFIXES,
            "GDAL_HTTP_MULTIRANGE": "SERIAL",  # one range per request: plain servers answer those
            "AWS_NO_SIGN_REQUEST": "YES",
            # Never served from GDAL's process-wide cache of earlier reads: every byte of this run is fetched
            # now (through the proxy, counted), so a file changed since an earlier call is read as it is.
            "CPL_VSIL_CURL_NON_CACHED": f"/vsicurl/{href}",
        }
        try:
            with rasterio.Env(**gdal_env), rasterio.open(f"/vsicurl/{href}") as src:
                window = Window(0, 0, src.width, src.height)
                if bbox:
                    west, south, east, north = bbox_argument(bbox, code="BBOX_INVALID")
                    bounds = transform_bounds("EPSG:4326", src.crs, west, south, east, north, densify_pts=21)
                    window = (
                        from_bounds(*bounds, transform=src.transform)
                        .round_offsets(op="floor")
                        .round_lengths(op="ceil")
                        .intersection(window)
                    )
                check_raster_size("url", href, int(window.width), int(window.height), src.count)
                data = src.read(window=window, boundless=False)
                transform = src.window_transform(window)
                profile = src.profile.copy()
                profile.update(
                    driver="GTiff",
                    width=int(window.width),
                    height=int(window.height),
                    transform=transform,
                    tiled=False,
                    compress="deflate",
                    predictor=1,  # no predictor: whitebox-workflows misreads predictor-encoded GeoTIFFs
                )
                for option in ("blockxsize", "blockysize", "interleave", "photometric"):
                    profile.pop(option, None)
                nodata = src.nodata
                scales, offsets = src.scales, src.offsets  # physical values stay what the source declares
        except (InputError, ArgumentError):
            raise
        except Exception as exc:  # noqa: BLE001 - the proxy's refusal, or GDAL's own failure, structured
            raise refusal_or(proxy, exc, "reading the raster at", href) from exc
        relayed = proxy.relayed_bytes
    with rasterio.open(ctx.temp_output, "w", **profile) as out:
        out.write(data)
        out.scales, out.offsets = scales, offsets
    ctx.expected_grid = {
        "width": int(window.width),
        "height": int(window.height),
        "transform": list(transform.to_gdal()),
        "nodata": nodata,
    }
    shown = {
        "col_off": int(window.col_off),
        "row_off": int(window.row_off),
        "width": int(window.width),
        "height": int(window.height),
    }
    return shown, relayed
