"""Where MapSmith keeps what it can rebuild: one folder per kind under the user's cache directory.

``$<variable>`` when set, else ``$XDG_CACHE_HOME/mapsmith/<name>``, else ``~/.cache/mapsmith/<name>``. Used by
the built-in contracts' cache (``mapsmith.contract_cache``) and the qgis stack's (``mapsmith_qgis.cache``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def user_cache_dir(name: str, variable: str, environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(variable):
        return Path(env[variable]).expanduser()
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mapsmith" / name
