"""The built-in contracts, validated once per content and read back from a cache on every later start.

Every process that builds the plugin host (the MCP server, each sandboxed engine worker, a Python API
``MapSmith()``) loads MapSmith's own contract files. Parsing the TOML and validating each file against
``operation.schema.json`` (jsonschema, imported for it) cost about 0.37 s of each start on this machine
(cProfile of ``MapSmith(env)``, 2026-12-07), the same answer every time for the same files.

So the validated data is kept as JSON in one file (``$MAPSMITH_CONTRACT_CACHE``, else
``$XDG_CACHE_HOME/mapsmith/contracts``, else ``~/.cache/mapsmith/contracts``), keyed by a SHA-256 of every
input that decides it: each contract file's name and bytes, the schema's bytes and the source of
``mapsmith.contracts`` (the parser and its house rules). A changed contract, schema or parser is a new key,
so nothing unvalidated is ever read back as valid. On a hit the house rules still run
(``parse_contract(..., validated=True)`` skips only the schema). A file that cannot be read, does not parse
or does not match the key is ignored and rewritten; one that cannot be written only costs the time (a
read-only sandbox, a home without a cache folder), never a failure. Written atomically, as manifests are
(``provenance.manifest.write_json_atomic``).

Written by hand: a content-keyed JSON file is a few lines, and no library caches a schema's verdict.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mapsmith.user_cache import user_cache_dir

CACHE_ENV = "MAPSMITH_CONTRACT_CACHE"
CACHE_FILE = "builtin-contracts.json"
log = logging.getLogger("mapsmith.contracts")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    return user_cache_dir("contracts", CACHE_ENV, environ)


def content_key(files: dict[str, bytes], schema: bytes, parser: bytes) -> str:
    """SHA-256 over every input of the validation: the files (by name), the schema and the parser's source."""
    digest = hashlib.sha256()
    for part in (b"schema", schema, b"parser", parser):
        digest.update(len(part).to_bytes(8, "big") + part)
    for name in sorted(files):
        for part in (name.encode(), files[name]):
            digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def read(key: str) -> dict[str, Any] | None:
    """The cached contract data by file name when the cache file holds ``key``, else None."""
    try:
        data = json.loads((cache_dir() / CACHE_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("contracts"), dict):
        return None
    return data["contracts"]


def write(key: str, contracts: dict[str, Any]) -> bool:
    """Keep ``contracts`` (validated data by file name) under ``key``; False when it cannot be written."""
    from mapsmith.provenance.manifest import write_json_atomic

    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / CACHE_FILE, {"key": key, "contracts": contracts})
    except (TypeError, ValueError) as exc:  # a TOML date has no JSON form: parse the files every time
        log.warning("the built-in contracts cannot be cached as JSON (%s); every start validates them", exc)
        return False
    except OSError as exc:
        log.debug("could not write the contract cache in %s (the next start validates again): %s", folder, exc)
        return False
    return True
