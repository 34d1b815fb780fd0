"""The resource limits one call may use, read from the environment: wall time and output size.

``MAPSMITH_CALL_TIMEOUT_S`` (seconds, default 600) bounds one call's wall time; engines that can be
interrupted from inside (DuckDB) use it themselves, and the sandboxed worker enforces it from outside.
``MAPSMITH_MAX_OUTPUT_BYTES`` (default 16 GiB) bounds the bytes one output may take, checked before the
output is renamed into place. A value that is set but not a positive number is a configuration error,
never silently replaced by the default: whoever set it meant a limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from mapsmith.errors import ConfigurationError

CALL_TIMEOUT_ENV = "MAPSMITH_CALL_TIMEOUT_S"
DEFAULT_CALL_TIMEOUT_S = 600.0
MAX_OUTPUT_BYTES_ENV = "MAPSMITH_MAX_OUTPUT_BYTES"
DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024**3


def _positive(environ: Mapping[str, str], name: str, default: float, unit: str) -> float:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(
            f"{name}={raw!r} is not a positive number of {unit}",
            code="LIMIT_SETTING_INVALID",
            evidence={"variable": name, "value": raw},
            hint=f"set {name} to a positive number of {unit} (default {default:g}), or unset it",
        )
    return value


def call_timeout_s(environ: Mapping[str, str]) -> float:
    """Seconds one call may run (``MAPSMITH_CALL_TIMEOUT_S``, default 600)."""
    return _positive(environ, CALL_TIMEOUT_ENV, DEFAULT_CALL_TIMEOUT_S, "seconds")


def max_output_bytes(environ: Mapping[str, str]) -> int:
    """Bytes one written output may take (``MAPSMITH_MAX_OUTPUT_BYTES``, default 16 GiB)."""
    return int(_positive(environ, MAX_OUTPUT_BYTES_ENV, DEFAULT_MAX_OUTPUT_BYTES, "bytes"))
