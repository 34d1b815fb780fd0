"""The optional extras raster and terrain engines need, as router requirements.

An operation whose engine is not installed is refused before any file is read, with the one
command that installs it; the rest of the stack keeps working.
"""

from __future__ import annotations

import importlib.util

from mapsmith._compat import install_command
from mapsmith.registry import Unavailable

EXTRAS = {
    "raster": ("rasterio", "exactextract"),
    "whitebox": ("rasterio", "whitebox_workflows"),
    "stac": ("rasterio", "pystac_client"),
}


def _missing(extra: str) -> Unavailable | None:
    absent = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return Unavailable(
        "stack_unavailable",
        f"this operation needs the [{extra}] extra; not installed here: {', '.join(absent)}",
        install_command(extra),  # from this MapSmith's own checkout or wheel, never PyPI's other 'mapsmith'
    )


def raster() -> Unavailable | None:
    """rasterio and exactextract."""
    return _missing("raster")


def whitebox() -> Unavailable | None:
    """Whitebox Workflows (open tier) and rasterio."""
    return _missing("whitebox")


def stac() -> Unavailable | None:
    """pystac-client, and rasterio for the range reads."""
    return _missing("stac")
