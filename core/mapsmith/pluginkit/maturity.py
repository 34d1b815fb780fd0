"""Where an operation's maturity comes from: the plugin's identity, the digest of its code, the promotions.

MapSmith decides maturity; a plugin cannot. An operation is ``stable`` when the plugin that brought it
is one the ``mapsmith`` distribution itself declares in its ``mapsmith`` entry points (the four stacks
in ``plugins/``), or when a promotion record names the same operation, distribution, version and code
digest. Every other plugin's operation is ``experimental``: its results carry EXPERIMENTAL_OPERATION
and its manifests the plugin's identity (``x-mapsmith:plugin``).

**The code digest** is the manifest specification's listing rule (§3.3) applied to the plugin's
package: the SHA-256 of ``<name>\\0<sha256 of the file>\\n``, one line per ``.py`` and ``.toml`` file
under the package folder (``__pycache__`` left out, symbolic links to folders not followed), the name
being the file's ``/``-separated path relative to that folder, lines sorted by the UTF-8 bytes of the
name. A plugin that is a single module (not a package) is the listing of that one file. Hand-written:
``mapsmith.provenance.digests`` applies the rule to datasets only and refuses other folders, which is
right for datasets; no library digests a source tree this way. The digest changes with any edit to the
code or its contracts, so a promotion never carries over to code nobody has checked.

**The promotions file** is ``<workspace>/.mapsmith/promotions.json``. A promotion is earned with
evidence read from a workspace (its manifests and their replays, ``mapsmith.pluginkit.promote``), so it
holds in that workspace and nowhere else; a server without a workspace (``MAPSMITH_WORKSPACE`` unset)
promotes nothing. JSON, not TOML, because it is written by a program (the standard library reads TOML
but cannot write it) and read back by the same schema check every time. A file that does not parse or
does not have the shape is refused (PROMOTIONS_INVALID): which promotions were meant is never guessed.

This module must never import a plugin's code or an engine: it reads files and metadata only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from mapsmith.contracts import EXPERIMENTAL, STABLE
from mapsmith.errors import ConfigurationError, PluginError

MAPSMITH_DISTRIBUTION = "mapsmith"
PROMOTIONS_FOLDER = ".mapsmith"
PROMOTIONS_NAME = "promotions.json"
PROMOTIONS_FORMAT = "mapsmith-promotions/1"
CODE_SUFFIXES = (".py", ".toml")
# The identity a manifest records for a plugin's operation (x-mapsmith:plugin), in this order.
IDENTITY_KEYS = ("plugin", "distribution", "version", "code_sha256", "source")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def normalise_distribution(name: str) -> str:
    """PEP 503's normal form, so ``mapsmith_plugin_hello`` and ``mapsmith-plugin-hello`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


# -- the code digest ------------------------------------------------------------------------------


def code_files(package: Path) -> list[tuple[str, Path]]:
    """The ``.py`` and ``.toml`` files the code digest covers, as (relative posix name, path)."""
    if package.is_file():
        return [(package.name, package)]
    found: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(package, followlinks=False):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(CODE_SUFFIXES):
                path = Path(folder) / name
                found.append((path.relative_to(package).as_posix(), path))
    return found


def code_digest(package: Path) -> str:
    """The listing digest (spec §3.3) of a plugin package's ``.py`` and ``.toml`` files."""
    lines = []
    for name, path in code_files(package):
        lines.append((name.encode("utf-8"), hashlib.sha256(path.read_bytes()).hexdigest().encode("ascii")))
    lines.sort(key=lambda line: line[0])
    return hashlib.sha256(b"".join(name + b"\0" + digest + b"\n" for name, digest in lines)).hexdigest()


def package_of(plugin: object) -> Path | None:
    """The folder (or single file) of the top-level package a plugin object comes from, if it has one."""
    module_name = plugin.__name__ if isinstance(plugin, type(sys)) else type(plugin).__module__
    top = sys.modules.get(module_name.split(".", 1)[0])
    if top is None:
        return None
    paths = list(getattr(top, "__path__", []) or [])
    if paths:
        return Path(paths[0])
    file = getattr(top, "__file__", None)
    return Path(file) if file else None


# -- whose plugin it is ---------------------------------------------------------------------------


def own_plugin_modules() -> frozenset[str]:
    """The modules the ``mapsmith`` distribution declares as its own plugins (its entry points)."""
    try:
        dist = metadata.distribution(MAPSMITH_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return frozenset()  # run from a bare source tree: no plugin can prove it is MapSmith's own
    return frozenset(ep.value for ep in dist.entry_points if ep.group == MAPSMITH_DISTRIBUTION and ep.attr is None)


def is_own_plugin(plugin: object, distribution: str | None) -> bool:
    """True for MapSmith's own stacks: loaded from the ``mapsmith`` distribution's entry points, or (in
    process) the very module one of those entry points names. A third party cannot make either true."""
    if distribution is not None:
        return normalise_distribution(distribution) == MAPSMITH_DISTRIBUTION
    if not isinstance(plugin, type(sys)) or plugin.__name__ not in own_plugin_modules():
        return False
    # The module itself, not another object that took its name.
    return sys.modules.get(plugin.__name__) is plugin


def plugin_origin(plugin: object, name: str, distribution: str, version: str) -> dict[str, str]:
    """The identity of a third-party plugin: entry-point name, distribution, version and code digest."""
    origin = {"plugin": name, "distribution": distribution, "version": version}
    package = package_of(plugin)
    if package is not None and package.exists():
        origin["code_sha256"] = code_digest(package)
    return origin


def check_origin(origin: Mapping[str, Any]) -> dict[str, str]:
    """An origin handed to ``PluginHost.register_experimental``: name, version, code digest, source."""
    problems = []
    for key in ("name", "version", "code_sha256"):
        if not isinstance(origin.get(key), str) or not origin.get(key):
            problems.append(f"{key} must be a non-empty string")
    digest = origin.get("code_sha256")
    if isinstance(digest, str) and digest and not _HEX64.fullmatch(digest):
        problems.append("code_sha256 must be 64 lowercase hexadecimal characters")
    source = origin.get("source")
    if source is not None and (not isinstance(source, str) or Path(source).is_absolute() or ".." in Path(source).parts):
        problems.append("source must be a path relative to the workspace (manifests never carry host paths)")
    unknown = sorted(set(origin) - {"name", "version", "code_sha256", "source"})
    if unknown:
        problems.append(f"unknown keys {unknown}")
    if problems:
        raise PluginError(
            f"the origin of an experimental operation is not valid: {'; '.join(problems)}",
            code="PLUGIN_ORIGIN_INVALID",
            evidence={"problems": problems, "keys": sorted(str(k) for k in origin)},
            hint="pass origin={'name': ..., 'version': ..., 'code_sha256': <sha256 of the code listing>, "
            "'source': <workspace-relative path>}",
        )
    out = {"plugin": str(origin["name"]), "distribution": str(origin["name"]), "version": str(origin["version"])}
    out["code_sha256"] = str(origin["code_sha256"])
    if source is not None:
        out["source"] = Path(source).as_posix()
    return out


def manifest_identity(origin: Mapping[str, str]) -> dict[str, str]:
    """What ``x-mapsmith:plugin`` records: the identity keys present, in a fixed order."""
    return {k: str(origin[k]) for k in IDENTITY_KEYS if origin.get(k)}


# -- the promotions file --------------------------------------------------------------------------


def promotions_path(workspace_root: Path | None) -> Path | None:
    return None if workspace_root is None else workspace_root / PROMOTIONS_FOLDER / PROMOTIONS_NAME


def workspace_root_from(environ: Mapping[str, str]) -> Path | None:
    """The workspace root as ``MAPSMITH_WORKSPACE`` names it, resolved; None when unset."""
    raw = environ.get("MAPSMITH_WORKSPACE")
    return Path(raw).resolve() if raw else None


def load_promotions(workspace_root: Path | None) -> list[dict[str, Any]]:
    """Every promotion recorded for a workspace (none without one, or without a file)."""
    path = promotions_path(workspace_root)
    if path is None or not path.exists():
        return []
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _invalid(path, f"it cannot be read as JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != PROMOTIONS_FORMAT:
        raise _invalid(path, f"it does not declare format {PROMOTIONS_FORMAT!r}")
    records = data.get("promotions")
    if not isinstance(records, list):
        raise _invalid(path, "its 'promotions' is not a list")
    required = ("operation", "distribution", "version", "code_sha256", "promoted_at", "check_report", "verified_runs")
    for i, record in enumerate(records):
        missing = [k for k in required if not isinstance(record, dict) or k not in record]
        if missing:
            raise _invalid(path, f"promotion {i} lacks {missing}")
    return records


def _invalid(path: Path, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"the promotions file {PROMOTIONS_FOLDER}/{PROMOTIONS_NAME} is not valid: {why}",
        code="PROMOTIONS_INVALID",
        evidence={"file": f"{PROMOTIONS_FOLDER}/{PROMOTIONS_NAME}", "problem": why},
        hint="restore the file from backup, or delete it and promote again with "
        "'mapsmith plugin promote OPERATION --report CHECK_REPORT.json --runs N'",
    )


def find_promotion(
    promotions: list[dict[str, Any]], operation: str, origin: Mapping[str, str]
) -> dict[str, Any] | None:
    """The newest promotion of exactly this operation from exactly this code, else None."""
    wanted = (
        operation,
        normalise_distribution(origin.get("distribution", "")),
        origin.get("version"),
        origin.get("code_sha256"),
    )
    matching = [
        p
        for p in promotions
        if (p["operation"], normalise_distribution(str(p["distribution"])), p["version"], p["code_sha256"]) == wanted
    ]
    return max(matching, key=lambda p: str(p["promoted_at"])) if matching and wanted[3] else None


def promotion_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """What list_operations shows of a promotion: that it was earned by evidence, and which."""
    report = record.get("check_report") or {}
    runs = record.get("verified_runs") or {}
    return {
        "by": "evidence",
        "promoted_at": record.get("promoted_at"),
        "check_report_sha256": report.get("sha256") if isinstance(report, dict) else None,
        "verified_runs": runs.get("count") if isinstance(runs, dict) else None,
        "record": f"{PROMOTIONS_FOLDER}/{PROMOTIONS_NAME}",
    }


def decide(
    operation: str, origin: Mapping[str, str] | None, promotions: list[dict[str, Any]]
) -> tuple[str, dict[str, Any] | None]:
    """(maturity, promotion summary) of an operation from a plugin; ``origin`` None is MapSmith's own."""
    if origin is None:
        return STABLE, None
    record = find_promotion(promotions, operation, origin)
    if record is None:
        return EXPERIMENTAL, None
    return STABLE, promotion_summary(record)
