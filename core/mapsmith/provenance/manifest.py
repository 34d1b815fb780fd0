"""Build and write provenance manifests (the published spec, ``manifest-v1``).

A manifest sits beside the dataset it describes as ``<output>.provenance.json``; a failed run's
record goes to ``<output>.failed.provenance.json`` (numbered when one exists) and never replaces a
good record. Records are written atomically. This module must never write a record that fails the
project's own validator: ``write_manifest`` refuses to.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mapsmith.errors import MapSmithError
from mapsmith.provenance.validator import SPEC_VERSION, validate_manifest

MANIFEST_SUFFIX = ".provenance.json"
FAILED_SUFFIX = ".failed.provenance.json"


def utc_now() -> str:
    """RFC 3339, UTC, ``Z``: the only timestamp form the spec accepts."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def posix_label(path: str) -> str:
    """A path as given, with ``/`` as the only separator (spec §3.3)."""
    return path.replace("\\", "/")


def manifest_path(output: Path) -> Path:
    return output.with_name(output.name + MANIFEST_SUFFIX)


def failed_manifest_path(output: Path) -> Path:
    """A fresh name for a failure record: an earlier record of either kind is never replaced."""
    candidate = output.with_name(output.name + FAILED_SUFFIX)
    n = 2
    while candidate.exists():
        candidate = output.with_name(f"{output.name}.failed.{n}{MANIFEST_SUFFIX}")
        n += 1
    return candidate


def base_record(operation: str, started_at: str) -> dict[str, Any]:
    from mapsmith import __version__

    return {
        "spec_version": SPEC_VERSION,
        "operation": operation,
        "parameters": {},
        "inputs": [],
        "engine": {"name": "mapsmith", "version": __version__},
        "verification": [],
        "started_at": started_at,
        "finished_at": started_at,
        "producer": {"name": "mapsmith", "version": __version__},
    }


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file in the same directory and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, ensure_ascii=False, sort_keys=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_manifest(path: Path, record: dict[str, Any]) -> Path:
    """Validate ``record`` with the project's own validator, then write it atomically."""
    problems = validate_manifest(record)
    if problems:
        raise MapSmithError(
            f"refusing to write a non-conforming manifest to {path.name}: {problems[0]}",
            code="MANIFEST_INVALID",
            evidence={"problems": problems},
            hint="this is a MapSmith bug; please report it with the evidence",
        )
    write_json_atomic(path, record)
    return path
