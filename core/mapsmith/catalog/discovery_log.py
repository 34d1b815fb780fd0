"""The discovery log: which searches were made and which operation ran next, when the operator asks for it.

Off by default; ``MAPSMITH_DISCOVERY_LOG`` names a file inside the workspace. Split from ``search`` so the
search module holds only searching.

What this module must never do: write a dataset path or an argument into the log, write outside the
workspace, or fail a search because the log cannot be written.
"""

from __future__ import annotations

import json
import re
import sys
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import MapSmithError

if TYPE_CHECKING:
    from mapsmith.app import MapSmith
    from mapsmith.catalog.facets import FacetFilter

__all__ = ["DISCOVERY_LOG_ENV", "check_discovery_log", "log_search", "record_next_operation"]

DISCOVERY_LOG_ENV = "MAPSMITH_DISCOVERY_LOG"
# Anything that looks like a path or a file name is kept out of the log.
_PATHLIKE = re.compile(r"\S*[/\\]\S*|\S+\.(?:gpkg|shp|geojson|json|tif|tiff|parquet|fgb|csv|gml|kml|vrt|zip)\b", re.I)


# -- the discovery log -----------------------------------------------------------------------------

# Per service: the resolved log path, or None when off or refused (decided once, at start).
_LOG_PATHS: weakref.WeakKeyDictionary[Any, Path | None] = weakref.WeakKeyDictionary()


def check_discovery_log(app: MapSmith) -> Path | None:
    """Where ``MAPSMITH_DISCOVERY_LOG`` sends search records, or None (off by default).

    The path must be inside the workspace (relative paths are taken against it); anything else is
    refused with one message on stderr and the log stays off. Call it at start; ``discover`` calls
    it too and the decision is made once per service.
    """
    if app in _LOG_PATHS:
        return _LOG_PATHS[app]
    raw = app.environ.get(DISCOVERY_LOG_ENV)
    path: Path | None = None
    if raw:
        if app.workspace.root is None:
            print(
                f"mapsmith: {DISCOVERY_LOG_ENV} refused: it must be a path inside the workspace and "
                "MAPSMITH_WORKSPACE is not set; the discovery log is off",
                file=sys.stderr,
            )
        else:
            try:
                resolved = app.workspace.resolve(raw, argument=DISCOVERY_LOG_ENV)
            except MapSmithError as exc:
                print(
                    f"mapsmith: {DISCOVERY_LOG_ENV} refused: {exc.message}; the discovery log is off", file=sys.stderr
                )
            else:
                path = resolved if isinstance(resolved, Path) else None
    _LOG_PATHS[app] = path
    return path


def _append(app: MapSmith, record: dict[str, Any]) -> None:
    path = check_discovery_log(app)
    if path is None:
        return
    line = json.dumps(record, ensure_ascii=False, sort_keys=True)
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:  # a log that cannot be written must not fail the search
        print(f"mapsmith: cannot write the discovery log {path}: {exc}", file=sys.stderr)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def log_search(
    app: MapSmith, query: str, facet_filter: FacetFilter, engine: str, status: str, delivered: list[str]
) -> None:
    if check_discovery_log(app) is None:
        return
    _append(
        app,
        {
            "time": _now(),
            "query": _PATHLIKE.sub("<path>", query),
            "facets": facet_filter.declared(),
            "engine": engine,
            "status": status,
            "candidates": delivered,
        },
    )


def record_next_operation(app: MapSmith, name: str) -> None:
    """Log which operation ran after a search (the runner path calls this); never its arguments."""
    _append(app, {"time": _now(), "ran": name})
