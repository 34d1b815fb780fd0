"""QGIS Processing algorithms as MapSmith operations: import, cache, and derive contracts.

``qgis_process --json list`` names the algorithms; their parameter definitions come from QGIS's own
Python in one subprocess (``_dump_algorithms.py``), or, where QGIS has no Python, from one
``qgis_process --json help <id>`` per algorithm. Either way the import is cached on disk, keyed by
QGIS version and executable, and the contracts derived from it are cached too, keyed by QGIS version,
MapSmith version and this module's own code (``cache.py`` says where and how). Nothing here runs at
start-up: the host loads the ``qgis:`` toolbox the first time one of its names is asked for.

It must never import QGIS, and never fail the plugin host: an import that cannot be made raises to
the host's toolbox loader, which says why once and leaves the toolbox empty.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mapsmith_qgis.cache import CACHE_ENV, cache_dir, executable_tag, read_json, remove_stale, safe, write_json

__all__ = ["CACHE_ENV", "cache_dir", "load_catalogue", "load_import", "derive_contract"]

PREFIX = "qgis:"
# 2: the import carries QGIS's own help text per algorithm (``help.text``), which discovery ranks on.
CACHE_FORMAT = 2
CATALOGUE_FORMAT = 1
LIST_TIMEOUT_S = 120
DUMP_TIMEOUT_S = 300
HELP_TIMEOUT_S = 60

# QgsProcessing::SourceType values, as raw_definition's data_types / layer_type carry them.
_GEOMETRY_BY_SOURCE_TYPE = {0: "point", 1: "line", 2: "polygon"}
_RASTER_SOURCE_TYPE = 3
_VECTOR_DATASET_TYPES = {"source", "vector"}
_RASTER_DATASET_TYPES = {"raster"}
_VECTOR_OUTPUTS = {"sink", "vectorDestination"}
_RASTER_OUTPUTS = {"rasterDestination"}
# Destinations that are not one layer: a file (a report, a GeoPackage of several layers) or a folder.
_FILE_OUTPUTS = {"fileDestination"}
_FOLDER_OUTPUTS = {"folderDestination"}
DESTINATION_SUFFIX = "_destination"  # the argument a secondary destination is given by: output_html_file_destination
_NUMBER_TYPES = {"number", "distance", "duration", "scale"}
_BIG = 1e300  # QGIS's "no bound" is +-DBL_MAX
# QGIS groups, by the words in them, to the catalog's categories (everything else is "other").
_CATEGORY_BY_GROUP = (
    ("overlay", "overlay"),
    ("selection", "selection"),
    ("terrain", "terrain"),
    ("hydrolog", "hydrology"),
    ("projection", "projection"),
    ("raster", "raster"),
    ("analysis", "measurement"),
    ("database", "sql"),
)


def cache_path(executable: str, qgis_version: str) -> Path:
    return cache_dir() / f"algorithms-{safe(qgis_version)}-{executable_tag(executable)}.json"


def catalogue_path(executable: str, qgis_version: str, mapsmith_version: str) -> Path:
    name = f"catalogue-{safe(qgis_version)}-{safe(mapsmith_version)}-{executable_tag(executable)}.json"
    return cache_dir() / name


@functools.cache
def deriver_digest() -> str:
    """A digest of this module's code: contracts derived by other code are derived again."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _run_json(argv: list[str], timeout: float) -> Any:
    from mapsmith_qgis import subprocess_env

    done = subprocess.run(
        argv, capture_output=True, timeout=timeout, env=subprocess_env(), stdin=subprocess.DEVNULL, check=False
    )
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-800:]
        raise RuntimeError(f"`{' '.join(argv[:4])}` exited with status {done.returncode}: {said}")
    return json.loads(done.stdout.decode("utf-8", "replace"))


def _qgis_python(executable: str) -> str | None:
    """The Python QGIS was built against: the python3 beside qgis_process, else the system's."""
    here = os.path.dirname(os.path.realpath(executable))
    for directory in (here, "/usr/bin", "/bin"):
        found = shutil.which("python3", path=directory)
        if found:
            return found
    return None


def _dump_definitions(executable: str) -> dict[str, Any] | None:
    python = _qgis_python(executable)
    if python is None:
        return None
    script = Path(__file__).with_name("_dump_algorithms.py")
    try:
        return dict(_run_json([python, str(script)], DUMP_TIMEOUT_S))
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired):
        return None  # no QGIS Python bindings here: fall back to qgis_process help


def _help_each(executable: str, ids: list[str]) -> dict[str, Any]:
    def one(alg: str) -> tuple[str, Any]:
        return alg, _run_json([executable, "--json", "help", alg], HELP_TIMEOUT_S)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(pool.map(one, ids))


def build_import(executable: str, qgis_version: str) -> dict[str, Any]:
    """Ask QGIS for every algorithm and its definitions; the cache file's content."""
    listing = _run_json([executable, "--json", "list"], LIST_TIMEOUT_S)
    algorithms: dict[str, Any] = {}
    providers: dict[str, Any] = {}
    for provider_id, provider in listing.get("providers", {}).items():
        providers[provider_id] = {
            "name": provider.get("name"),
            "is_active": bool(provider.get("is_active", True)),
            "version": provider.get("version"),
        }
        for alg_id, details in provider.get("algorithms", {}).items():
            algorithms[alg_id] = {"provider": provider_id, "details": details}
    ids = sorted(algorithms)
    definitions = _dump_definitions(executable)
    source = "qgis python (one process)"
    if definitions is None or any(a not in definitions for a in ids):
        definitions, source = _help_each(executable, ids), "qgis_process --json help (one per algorithm)"
    for alg_id in ids:
        algorithms[alg_id]["help"] = {
            "parameters": definitions[alg_id].get("parameters", {}),
            "outputs": definitions[alg_id].get("outputs", {}),
            # only the one-process dump has it: qgis_process --json help prints no shortHelpString
            "text": definitions[alg_id].get("text") or {},
        }
    return {
        "format": CACHE_FORMAT,
        "qgis_version": qgis_version,
        "executable": executable,
        "definitions_from": source,
        "providers": providers,
        "algorithms": algorithms,
    }


def load_import(executable: str, qgis_version: str) -> dict[str, Any]:
    """The cached import for this QGIS, building (and writing) it the first time."""
    path = cache_path(executable, qgis_version)
    data = read_json(path, {"format": CACHE_FORMAT, "qgis_version": qgis_version})
    if data is not None:
        return data
    data = build_import(executable, qgis_version)
    if write_json(path, data):
        remove_stale(path.parent, f"algorithms-*-{executable_tag(executable)}.json", keep=path)
    return data


def derive_catalogue(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    providers = data["providers"]
    return {
        alg_id: derive_contract(alg_id, entry, providers.get(entry["provider"], {}).get("is_active", True))
        for alg_id, entry in sorted(data["algorithms"].items())
    }


def load_catalogue(executable: str, qgis_version: str, mapsmith_version: str) -> dict[str, dict[str, Any]]:
    """Every algorithm's derived contract and mapping, from the catalogue cache when its key matches.

    The key is the QGIS version (from ``--version``), MapSmith's version and :func:`deriver_digest`;
    a file with any other key is rebuilt from :func:`load_import` (itself cached by QGIS version)
    and replaced atomically, and the files of other versions for this executable are removed.
    """
    path = catalogue_path(executable, qgis_version, mapsmith_version)
    key = {
        "format": CATALOGUE_FORMAT,
        "qgis_version": qgis_version,
        "mapsmith_version": mapsmith_version,
        "deriver": deriver_digest(),
    }
    cached = read_json(path, key)
    if cached is not None and isinstance(cached.get("algorithms"), dict):
        return dict(cached["algorithms"])
    algorithms = derive_catalogue(load_import(executable, qgis_version))
    if write_json(path, {**key, "executable": executable, "algorithms": algorithms}):
        remove_stale(path.parent, f"catalogue-*-{executable_tag(executable)}.json", keep=path)
    return algorithms


# -- contracts -------------------------------------------------------------------------------------


def argument_name(qgis_name: str) -> str:
    """A QGIS parameter name (``INPUT``, ``END_CAP_STYLE``) as a MapSmith argument name."""
    name = re.sub(r"[^a-z0-9_]+", "_", qgis_name.lower()).strip("_") or "value"
    return name if name[0].isalpha() else f"p_{name}"


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if abs(number) < _BIG else None


def _dataset_argument(qgis_name: str, spec: dict[str, Any]) -> dict[str, Any] | None:
    type_id = spec["type"]["id"]
    raw = spec.get("raw_definition") or {}
    kind: str
    geometry: list[str] = []
    if type_id in _RASTER_DATASET_TYPES:
        kind = "raster"
    elif type_id in _VECTOR_DATASET_TYPES:
        kind = "vector"
        types = [t for t in raw.get("data_types") or [] if isinstance(t, int)]
        geometry = sorted({_GEOMETRY_BY_SOURCE_TYPE[t] for t in types if t in _GEOMETRY_BY_SOURCE_TYPE})
        if 5 in types and not geometry:  # TypeVector: tables without geometry are fine too
            kind = "any"
    elif type_id == "multilayer":
        layer_type = raw.get("layer_type")
        kind = "raster" if layer_type == _RASTER_SOURCE_TYPE else "vector" if layer_type in (-1, 0, 1, 2, 5) else "any"
        if layer_type in _GEOMETRY_BY_SOURCE_TYPE:
            geometry = [_GEOMETRY_BY_SOURCE_TYPE[layer_type]]
    else:
        return None
    multiple = type_id == "multilayer"
    base = argument_name(qgis_name)
    out: dict[str, Any] = {
        "name": f"{base}_paths" if multiple else f"{base}_path",
        "kind": kind,
        "description": f"{spec.get('description') or qgis_name} (QGIS parameter {qgis_name}).",
        "required": not spec.get("optional", False),
    }
    if multiple:
        out["multiple"] = True
        out["min_count"] = max(1, int(raw.get("min_inputs") or 1))
    if geometry and kind == "vector":
        out["geometry_types"] = geometry
    return out


def _parameter(qgis_name: str, spec: dict[str, Any]) -> dict[str, Any]:
    type_id = spec["type"]["id"]
    raw = spec.get("raw_definition") or {}
    desc = spec.get("description") or qgis_name
    out: dict[str, Any] = {"name": argument_name(qgis_name), "type": "string"}
    default = spec.get("default_value", raw.get("default"))
    if type_id == "boolean":
        out["type"] = "boolean"
        default = None if default is None else str(default).lower() in ("true", "1") or default is True
    elif type_id in _NUMBER_TYPES or type_id == "band":
        integer = type_id == "band" or (type_id == "number" and raw.get("data_type") == 0)
        out["type"] = "integer" if integer else "number"
        lo, hi = _number(raw.get("min")), _number(raw.get("max"))
        if lo is not None:
            out["minimum"] = int(lo) if integer and float(lo).is_integer() else lo
        if hi is not None:
            out["maximum"] = int(hi) if integer and float(hi).is_integer() else hi
        number = _number(default)
        default = None if number is None else (int(number) if integer else float(number))
    elif type_id == "enum" and raw.get("options") and not raw.get("allow_multiple"):
        options = [str(o) for o in raw["options"]]
        if raw.get("uses_static_strings"):
            out["choices"] = options
        else:
            out["choices"] = options
            number = _number(default)
            default = options[int(number)] if number is not None and 0 <= int(number) < len(options) else None
        desc += ". One of: " + ", ".join(options)
    elif type_id == "enum" and raw.get("options"):
        desc += ". Several of (0-based indexes, comma separated): " + ", ".join(
            f"{i}={o}" for i, o in enumerate(raw["options"])
        )
        default = (
            None
            if default is None
            else ",".join(str(d) for d in default)
            if isinstance(default, list)
            else str(default)
        )
    else:
        default = None if default is None or isinstance(default, (dict, list)) else str(default)
    out["description"] = f"{desc} (QGIS parameter {qgis_name}, type {type_id})."
    if default is not None:
        out["default"] = default
    elif not spec.get("optional", False):
        out["required"] = True
    if "choices" in out and out.get("default") not in out["choices"]:
        out.pop("default", None)
    return out


def file_suffixes(spec: dict[str, Any]) -> list[str]:
    """The extensions a file destination's filter names ("HTML files (*.html)" -> [".html"])."""
    raw = spec.get("raw_definition") or {}
    found = re.findall(r"\*(\.[A-Za-z0-9.]+)", str(raw.get("file_filter") or ""))
    return list(dict.fromkeys(f.lower() for f in found))


def destination_formats(spec: dict[str, Any]) -> list[str]:
    """The extensions a destination may be written as; none for a folder."""
    type_id = spec["type"]["id"]
    if type_id in _VECTOR_OUTPUTS:
        return [".gpkg", ".fgb", ".geojson"]
    if type_id in _RASTER_OUTPUTS:
        return [".tif"]
    return file_suffixes(spec) if type_id in _FILE_OUTPUTS else []


def _destination_argument(qgis_name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A secondary destination as an optional path argument, checked and written inside the workspace."""
    type_id = spec["type"]["id"]
    what = {"fileDestination": "a file", "folderDestination": "a new folder", "rasterDestination": "a raster"}.get(
        type_id, "a vector layer"
    )
    suffixes = destination_formats(spec)
    desc = f"{spec.get('description') or qgis_name}: where QGIS writes {what}"
    if suffixes:
        desc += f" ({', '.join(suffixes)})"
    return {
        "name": argument_name(qgis_name) + DESTINATION_SUFFIX,
        "type": "string",
        "description": f"{desc}; a path inside the workspace, left out for none kept (QGIS parameter {qgis_name}, "
        f"type {type_id}).",
    }


_TAG = re.compile(r"<[^>]+>")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def help_text(entry: dict[str, Any]) -> str:
    """QGIS's own ``shortHelpString`` for the algorithm as plain text (tags removed, spaces collapsed); "" if none."""
    raw = str(((entry.get("help") or {}).get("text") or {}).get("short_help") or "")
    plain = html.unescape(_TAG.sub(" ", raw.replace("<br>", "\n")))
    return re.sub(r"\s+", " ", plain).strip()


def first_sentence(text: str, limit: int = 300) -> str:
    """The first sentence of ``text`` (what a summary or a ``distinguishes`` line can carry), cut at ``limit``."""
    head = _SENTENCE_END.split(text, maxsplit=1)[0].strip() if text else ""
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def leading_sentences(text: str, limit: int = 400) -> str:
    """As many whole sentences of ``text`` as fit in ``limit`` characters (at least the first, cut if need be)."""
    out = ""
    for sentence in _SENTENCE_END.split(text):
        if out and len(out) + 1 + len(sentence) > limit:
            break
        out = f"{out} {sentence}".strip()
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "…"


def _category(group: str) -> str:
    low = group.lower()
    return next((cat for word, cat in _CATEGORY_BY_GROUP if word in low), "other")


# QGIS's outputs that are values an answer can hold; every other output is a layer, file or folder QGIS writes or
# changes itself.
_VALUE_OUTPUTS = frozenset({"outputNumber", "outputString", "outputBoolean", "outputVariant"})


def no_value_effect(help_: dict[str, Any]) -> str | None:
    """For an algorithm without a layer or file destination: None when QGIS returns values (an answer), else what
    it does instead, from the outputs QGIS declares (``[output] effect``)."""
    outputs = help_.get("outputs") or {}
    if any(o.get("type") in _VALUE_OUTPUTS for o in outputs.values()):
        return None
    if not outputs:
        return (
            "QGIS returns no value for this algorithm: it acts outside MapSmith's outputs (a database, a layer in "
            "place, a setting or a check)."
        )
    listed = ", ".join(f"{o.get('description') or name} ({o.get('type')})" for name, o in sorted(outputs.items()))
    return f"QGIS returns no value for this algorithm, only {listed}: layers, files or folders it writes or changes."


def derive_contract(alg_id: str, entry: dict[str, Any], provider_active: bool) -> dict[str, Any]:
    """The contract mapping (checked by the core against operation.schema.json) for one algorithm.

    Also returns, under ``x-qgis``, how each argument maps back to a QGIS parameter; the caller
    strips it before registering.
    """
    details = entry.get("details") or {}
    help_ = entry["help"]
    datasets: list[dict[str, Any]] = []
    parameters: list[dict[str, Any]] = []
    mapping: dict[str, dict[str, Any]] = {}
    output: dict[str, Any] | None = None
    output_name: str | None = None
    skipped: list[str] = []
    taken = {"output_path", "overwrite"}
    specs = help_["parameters"]
    # The main output is OUTPUT if it is a layer, else the first vector or raster destination; an
    # algorithm with no layer destination writes its file destination there (native:package's
    # GeoPackage, a report). Every other destination is an argument of its own (``<name>_destination``)
    # so that no output QGIS declares is lost to its temporary folder.
    destinations = [n for n, s in specs.items() if s.get("is_destination")]
    layer_outs = [n for n in destinations if specs[n]["type"]["id"] in _VECTOR_OUTPUTS | _RASTER_OUTPUTS]
    file_outs = [n for n in destinations if specs[n]["type"]["id"] in _FILE_OUTPUTS]
    if layer_outs:
        output_name = "OUTPUT" if "OUTPUT" in layer_outs else layer_outs[0]
    elif file_outs:
        output_name = "OUTPUT" if "OUTPUT" in file_outs else file_outs[0]
    destination_args: list[dict[str, Any]] = []
    for qgis_name, spec in specs.items():
        if spec.get("is_destination"):
            type_id = spec["type"]["id"]
            if qgis_name == output_name and type_id in _FILE_OUTPUTS:
                # The schema has no "file" output kind; the run describes the file itself (run.py).
                output = {"kind": "dataset:vector", "argument": "output_path"}
                if file_suffixes(spec):  # "All files (*.*)" names none: any extension is QGIS's to write
                    output["formats"] = file_suffixes(spec)
                mapping["output_path"] = {"qgis": qgis_name, "as": "output", "destination": type_id}
            elif qgis_name == output_name:
                kind = "dataset:raster" if type_id in _RASTER_OUTPUTS else "dataset:vector"
                output = {"kind": kind, "argument": "output_path"}
                output["formats"] = [".tif"] if kind == "dataset:raster" else [".gpkg", ".fgb", ".geojson"]
                mapping["output_path"] = {"qgis": qgis_name, "as": "output", "destination": type_id}
            elif type_id in _VECTOR_OUTPUTS | _RASTER_OUTPUTS | _FILE_OUTPUTS | _FOLDER_OUTPUTS:
                destination_args.append(_destination_argument(qgis_name, spec))
                mapping[destination_args[-1]["name"]] = {
                    "qgis": qgis_name,
                    "as": "destination",
                    "destination": type_id,
                    "formats": destination_formats(spec),
                }
            else:
                skipped.append(qgis_name)  # written to QGIS's temporary folder, reported in the answer
            continue
        dataset = _dataset_argument(qgis_name, spec)
        item = dataset if dataset is not None else _parameter(qgis_name, spec)
        if item["name"] in taken:
            item["name"] = ("qgis_" + item["name"]) if dataset is None else f"qgis_{item['name']}"
        taken.add(item["name"])
        (datasets if dataset is not None else parameters).append(item)
        mapping[item["name"]] = {"qgis": qgis_name, "as": "dataset" if dataset is not None else spec["type"]["id"]}
        if dataset is None and "choices" in item:
            raw = spec.get("raw_definition") or {}
            mapping[item["name"]]["static"] = bool(raw.get("uses_static_strings"))
            mapping[item["name"]]["options"] = [str(o) for o in raw.get("options") or []]
    parameters += destination_args
    name = details.get("name") or alg_id
    group = details.get("group") or ""
    # QGIS's own help says what the algorithm does; the listing's short_description is mostly empty.
    own_help = help_text(entry)
    text = (help_.get("text") or {}) if isinstance(help_, dict) else {}
    blurb = details.get("short_description") or text.get("short_description") or first_sentence(own_help)
    tags = {*(details.get("tags") or []), *(text.get("tags") or [])}
    provider = entry.get("provider", alg_id.split(":", 1)[0])
    summary = f"QGIS {name}" + (f" ({group})" if group else "") + (f": {blurb}" if blurb else "")
    if len(summary) < 10:
        summary += " (QGIS Processing algorithm)"
    example_args = {
        d["name"]: (
            [f"{d['name'][:-6]}_1.gpkg"] * d.get("min_count", 1)
            if d.get("multiple")
            else f"{d['name'][:-5]}.{'tif' if d['kind'] == 'raster' else 'gpkg'}"
        )
        for d in datasets
        if d["required"]
    }
    example_args.update(
        {
            p["name"]: p.get("default", p.get("choices", [""])[0] if "choices" in p else "")
            for p in parameters
            if p.get("required")
        }
    )
    if output is not None:
        example_args["output_path"] = "result" + (
            ".tif" if output["kind"] == "dataset:raster" else (output.get("formats") or [".dat"])[0]
        )
    file_output = mapping.get("output_path", {}).get("destination") in _FILE_OUTPUTS
    contract: dict[str, Any] = {
        "name": f"{PREFIX}{alg_id}",
        "summary": summary,
        "category": _category(group),
        "status": "available" if provider_active else "planned",
        # QGIS's help when it has some (the words discovery ranks on); the generic sentence otherwise.
        "distinguishes": (
            leading_sentences(own_help)
            if len(own_help) >= 10  # the schema's minimum for distinguishes
            else f"QGIS Processing algorithm {alg_id} of the {provider} provider, run by qgis_process in "
            "a separate process with QGIS's own parameter names lower-cased."
        ),
        "keywords": sorted({*tags, "qgis", provider, group, name} - {""}),
        "datasets": datasets,
        "parameters": parameters,
        "output": output or {"kind": "answer", **({"effect": e} if (e := no_value_effect(help_)) else {})},
        "crs_effect": "preserves" if output is not None and datasets and not file_output else "none",
        "needs_projected_crs": False,
        "checks": (
            []
            if file_output
            else ["crs_present", "result_not_empty"]
            if output and output["kind"] == "dataset:vector"
            else ["crs_present"]
            if output
            else []
        ),
        "examples": [{"description": f"{name} with QGIS", "arguments": example_args}],
    }
    if output is not None and not datasets:
        contract["crs_effect"] = "none"
    return {"contract": contract, "mapping": mapping, "output": output_name, "skipped_outputs": skipped}
