"""Operation contracts: load, validate, and use them to check arguments and build tool schemas.

A contract is data (``contracts/operations/<name>.toml``), validated against
``contracts/schemas/operation.schema.json``. Argument checking, MCP input schemas and the catalog
all read the same ``OperationContract``, so there is one truth about what an operation takes.
Whether one value is acceptable (type, choices, bounds, paths, layer names) is ``mapsmith.argument_checks``;
its public names are re-exported here. An operation's ``maturity`` is never read from a contract: the
plugin host sets it (``mapsmith.plugins``).
This module must never import an engine or open a dataset.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from mapsmith.argument_checks import GEOJSON_CRS_ARGUMENT as GEOJSON_CRS_ARGUMENT
from mapsmith.argument_checks import GEOJSON_MEMBERS_ARGUMENT as GEOJSON_MEMBERS_ARGUMENT
from mapsmith.argument_checks import LAYER_NAME_MAX as LAYER_NAME_MAX
from mapsmith.argument_checks import OUTPUT_LAYER_ARGUMENT as OUTPUT_LAYER_ARGUMENT
from mapsmith.argument_checks import RESERVED_GEOJSON_MEMBERS as RESERVED_GEOJSON_MEMBERS
from mapsmith.argument_checks import (
    WRITER_TYPES,
    check_parameter,
    check_path_value,
    check_writer_options,
    missing_argument,
    mistyped_argument,
)
from mapsmith.argument_checks import check_layer_name as check_layer_name
from mapsmith.errors import ArgumentError, ContractError

# Units a parameter may declare, and the suffix its name must then carry (house rule: the unit is
# in the name, because an agent reads names, not descriptions).
UNIT_SUFFIXES = {
    "metre": "_meters",
    "square_metre": "_m2",
    "degree": "_degrees",
    "cell": "_cells",
}

# Arguments every dataset-writing operation takes, added by the loader rather than repeated in
# every TOML file.
OUTPUT_ARGUMENT = "output_path"
OVERWRITE_ARGUMENT = "overwrite"
# A second dataset argument ``<role>_path`` takes its layer as ``<role>_layer`` (mask_layer, join_layer);
# input_path keeps the ``layer`` its contract declares.
MAIN_INPUT = "input_path"
MAIN_LAYER = "layer"

# The geometry families a dataset argument may declare; declaring all of them restricts nothing.
GEOMETRY_FAMILIES = ("point", "line", "polygon")

# An operation's maturity. The host decides it from where the operation came from (MapSmith's own
# distribution, or a plugin with or without a promotion record), so a contract file cannot claim it.
STABLE = "stable"
EXPERIMENTAL = "experimental"
MATURITIES = (STABLE, EXPERIMENTAL)
HOST_DECIDED_KEYS = ("maturity", "origin", "promotion")


def contracts_root() -> Path:
    """Where the contract files are: packaged beside the code, or the source tree's ``contracts/``."""
    packaged = Path(__file__).resolve().parent / "contracts"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "contracts"


@dataclass(frozen=True)
class DatasetArgument:
    name: str
    kind: str
    description: str
    geometry_types: tuple[str, ...] | None = None
    required: bool = True
    multiple: bool = False  # a list of paths; the name ends in _paths
    min_count: int = 1


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    description: str
    unit: str | None = None
    required: bool = False
    default: Any = None
    has_default: bool = False
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class OperationContract:
    name: str
    summary: str
    category: str
    status: str
    distinguishes: str
    output_kind: str
    crs_effect: str
    needs_projected_crs: bool
    checks: tuple[str, ...]
    datasets: tuple[DatasetArgument, ...]
    parameters: tuple[Parameter, ...]
    examples: tuple[Mapping[str, Any], ...]
    output_geometry_types: tuple[str, ...] = ()
    output_feature_count: str = "any"
    output_formats: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    # The parameter whose text names the datasets read (run_sql's ``sql``), or None.
    datasets_named_in: str | None = None
    source: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # A short human name (the MCP tool title); parse_contract derives one from the name when none is declared.
    title: str = ""
    # False where inputs lying apart are a normal question (nearest_join): no EXTENTS_DO_NOT_OVERLAP warning.
    needs_overlapping_inputs: bool = True
    # Set by the plugin host, never by a contract file (parse_contract refuses the keys): "stable" for
    # MapSmith's own operations, "experimental" for a plugin's until promoted on recorded evidence.
    maturity: str = STABLE
    # The plugin that brought the operation (distribution, version, code_sha256, ...), when not MapSmith.
    origin: Mapping[str, str] | None = field(default=None, compare=False)
    # The promotion record (mapsmith.pluginkit.maturity) that made a plugin's operation stable.
    promotion: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def writes_dataset(self) -> bool:
        return self.output_kind.startswith("dataset:")

    @property
    def output_table(self) -> Mapping[str, Any]:
        """The contract's ``[output]`` table as written (empty for a contract built without one)."""
        out = self.raw.get("output", {}) if isinstance(self.raw, Mapping) else {}
        return out if isinstance(out, Mapping) else {}

    @property
    def output_optional(self) -> bool:
        """``[output] optional = true``: left out, output_path makes the operation answer in rows (run_sql)."""
        return bool(self.writes_dataset and self.output_table.get("optional"))

    @property
    def also_answers(self) -> str | None:
        """``[output] answers``: what the answer of an operation that writes a dataset holds that a caller may ask
        for by itself (measure_area's total area), or None."""
        answers = self.output_table.get("answers") if self.writes_dataset else None
        return answers if isinstance(answers, str) else None

    @property
    def output_effect(self) -> str | None:
        """``[output] effect``: what an answer-kind operation that returns no value does instead (a QGIS algorithm
        that writes into a database or a folder, or changes a layer in place), or None."""
        effect = self.output_table.get("effect") if self.output_kind == "answer" else None
        return effect if isinstance(effect, str) else None

    @property
    def input_kinds(self) -> tuple[str, ...]:
        return tuple(d.kind for d in self.datasets)

    def argument_names(self) -> list[str]:
        names = [d.name for d in self.datasets] + [p.name for p in self.parameters]
        names += list(self.dataset_layer_arguments())
        if self.writes_dataset:
            names += [OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT, *self.writer_options()]
        return names

    def dataset_layer_arguments(self) -> dict[str, str]:
        """``<role>_layer`` -> ``<role>_path`` for every single vector (or table) dataset but input_path."""
        return {
            d.name[: -len("_path")] + "_layer": d.name
            for d in self.datasets
            if not d.multiple and d.name != MAIN_INPUT and d.kind != "raster" and d.name.endswith("_path")
        }

    def writer_options(self) -> tuple[str, ...]:
        """The output arguments this contract's formats allow beyond output_path and overwrite."""
        names: tuple[str, ...] = ()
        if ".gpkg" in self.output_formats:
            names += (OUTPUT_LAYER_ARGUMENT,)
        if ".geojson" in self.output_formats:
            names += (GEOJSON_CRS_ARGUMENT, GEOJSON_MEMBERS_ARGUMENT)
        return names

    def dataset(self, name: str) -> DatasetArgument | None:
        return next((d for d in self.datasets if d.name == name), None)

    # -- argument checking -------------------------------------------------------------------

    def check_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Return the arguments with defaults applied, or raise ``ArgumentError`` on the first
        unknown, missing, mistyped or out-of-range one (each with its own stable code)."""
        if not isinstance(arguments, Mapping):
            raise ArgumentError(
                f"arguments of {self.name} must be an object, got {type(arguments).__name__}",
                code="ARGUMENTS_NOT_AN_OBJECT",
                hint=f"pass an object with the keys {', '.join(self.argument_names())}",
            )
        accepted = self.argument_names()
        for key in arguments:
            if key not in accepted:
                close = difflib.get_close_matches(key, accepted, n=3, cutoff=0.5)
                raise ArgumentError(
                    f"{self.name} has no argument {key!r}"
                    + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""),
                    code="UNKNOWN_ARGUMENT",
                    evidence={"operation": self.name, "argument": key, "accepted": accepted},
                    hint=f"{self.name} accepts: {', '.join(accepted)}",
                )
        out: dict[str, Any] = {}
        for d in self.datasets:
            value = arguments.get(d.name)
            if value is None:
                if d.required:
                    raise missing_argument(self, d.name, f"a path to a {d.kind} dataset: {d.description}")
                continue
            if d.multiple:
                if not isinstance(value, list) or len(value) < d.min_count:
                    raise mistyped_argument(self, d.name, f"list of at least {d.min_count} paths", value)
                out[d.name] = [check_path_value(self, f"{d.name}[{i}]", v) for i, v in enumerate(value)]
            else:
                out[d.name] = check_path_value(self, d.name, value)
        if self.writes_dataset and not (self.output_optional and arguments.get(OUTPUT_ARGUMENT) is None):
            value = arguments.get(OUTPUT_ARGUMENT)
            if value is None:
                raise missing_argument(self, OUTPUT_ARGUMENT, "the path of the dataset to write")
            out[OUTPUT_ARGUMENT] = check_path_value(self, OUTPUT_ARGUMENT, value)
            overwrite = arguments.get(OVERWRITE_ARGUMENT, False)
            if not isinstance(overwrite, bool):
                raise mistyped_argument(self, OVERWRITE_ARGUMENT, "boolean", overwrite)
            out[OVERWRITE_ARGUMENT] = overwrite
            out.update(check_writer_options(self, arguments))
        for name, dataset in self.dataset_layer_arguments().items():
            if arguments.get(name) is not None:
                if arguments.get(dataset) is None:
                    raise ArgumentError(
                        f"{self.name}: {name!r} names a layer of {dataset}, which was not given",
                        code="LAYER_WITHOUT_DATASET",
                        evidence={"operation": self.name, "argument": name},
                        hint=f"pass {dataset} too, or leave {name} out",
                    )
                out[name] = check_path_value(self, name, arguments[name])
        for p in self.parameters:
            if p.name not in arguments or arguments[p.name] is None:
                if p.required:
                    raise missing_argument(self, p.name, p.description)
                if p.has_default:
                    out[p.name] = p.default
                continue
            out[p.name] = check_parameter(self, p, arguments[p.name])
        return out

    # -- MCP tool schema ---------------------------------------------------------------------

    def input_schema(self, note_chars: int | None = None) -> dict[str, Any]:
        """The JSON Schema of this operation's arguments, as MCP ``tools/list`` publishes it.

        ``note_chars`` abridges each argument's prose to its leading whole sentences within that many
        characters (``abridge``); what the contract states as data (unit, accepted geometry types,
        bounds, choices, default) is always kept whole.
        """
        props: dict[str, Any] = {}
        required: list[str] = []
        for d in self.datasets:
            desc = abridge(d.description, note_chars)
            kind = "Any" if d.kind == "any" else d.kind.capitalize()  # the argument's name says it is a path
            # Naming every family says nothing; only a restriction is worth an agent's tokens.
            if d.geometry_types and set(d.geometry_types) != set(GEOMETRY_FAMILIES):
                desc += f" Accepted geometry types: {', '.join(d.geometry_types)}."
            if d.multiple:
                props[d.name] = {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": d.min_count,
                    "description": f"{kind} datasets. {desc}",
                }
            else:
                props[d.name] = {"type": "string", "description": f"{kind} dataset. {desc}"}
            if d.required:
                required.append(d.name)
        for p in self.parameters:
            schema: dict[str, Any] = {"type": p.type, "description": abridge(p.description, note_chars)}
            if p.unit:
                schema["description"] += f" Unit: {p.unit}."
            if p.has_default:
                schema["default"] = p.default
            if p.minimum is not None:
                schema["minimum"] = p.minimum
            if p.maximum is not None:
                schema["maximum"] = p.maximum
            if p.exclusive_minimum is not None:
                schema["exclusiveMinimum"] = p.exclusive_minimum
            if p.choices is not None:
                schema["enum"] = list(p.choices)
            props[p.name] = schema
            if p.required:
                required.append(p.name)
        for name in self.dataset_layer_arguments():
            props[name] = {"type": "string"}  # beside <role>_path, the name says it all
        if self.writes_dataset:
            # Both are the same on every writing operation; their names say what they are, so only what
            # differs is described (the formats) and what they do beyond their names is said once, in
            # run_operation's description.
            formats = ", ".join(self.output_formats)  # the extension picks the format
            props[OUTPUT_ARGUMENT] = {"type": "string", "description": formats or "The dataset to write."}
            props[OVERWRITE_ARGUMENT] = {"type": "boolean", "default": False}
            # tools/list has a character budget (tests/mcp/test_tool_list.py): names say what these are.
            for name in self.writer_options():
                props[name] = {"type": WRITER_TYPES[name]}
            if not self.output_optional:
                required.append(OUTPUT_ARGUMENT)
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    def to_summary(self) -> dict[str, Any]:
        return {
            "operation": self.name,
            "status": self.status,
            "summary": self.summary,
            "category": self.category,
            "distinguishes": self.distinguishes,
            "input_kinds": list(self.input_kinds),
            "output_kind": self.output_kind,
            "maturity": self.maturity,
            **({"plugin": _plugin_summary(self.origin)} if self.origin else {}),
            **({"promotion": dict(self.promotion)} if self.promotion else {}),
        }


def _plugin_summary(origin: Mapping[str, str]) -> dict[str, str]:
    """What a catalogue entry says about the plugin behind an operation: enough to look it up."""
    return {k: str(origin[k]) for k in ("distribution", "version", "code_sha256") if origin.get(k)}


# A sentence ends at '.' or ';' and a space, but not at the abbreviations the contracts use mid-sentence.
_SENTENCE_END = re.compile(r"(?<!e\.g\.)(?<!i\.e\.)(?<!etc\.)(?<!vs\.)(?<=[.;])\s+")


def abridge(note: str, limit: int | None) -> str:
    """The note's leading whole sentences (each ended by '.' or ';') within ``limit`` characters; the
    first sentence always, however long. ``None`` keeps the note whole."""
    if limit is None:
        return note
    sentences = _SENTENCE_END.split(note)
    kept = sentences[0]
    for sentence in sentences[1:]:
        if len(kept) + 1 + len(sentence) > limit:
            break
        kept += " " + sentence
    return kept


# -- loading ----------------------------------------------------------------------------------


@cache
def _schema_validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads((contracts_root() / "schemas" / "operation.schema.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def parse_contract(data: Mapping[str, Any], source: str, *, validated: bool = False) -> OperationContract:
    """Validate one contract mapping against the schema and the house rules, and type it. ``validated``: the
    same data passed the same schema before (``mapsmith.contract_cache``), so only the house rules run."""
    declared = [k for k in HOST_DECIDED_KEYS if isinstance(data, Mapping) and k in data]
    if declared:
        # Checked before the schema so the refusal says why, not just "unexpected property".
        raise ContractError(
            f"contract {source} declares {declared}: maturity is decided by MapSmith, not by a contract",
            code="CONTRACT_DECLARES_MATURITY",
            evidence={"source": source, "keys": declared},
            hint="remove the keys; a plugin's operations are experimental until an operator promotes them "
            "on evidence (mapsmith plugin promote), and list_operations shows each operation's maturity",
        )
    errors = [] if validated else list(_schema_validator().iter_errors(dict(data)))
    errors.sort(key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(top level)"
        raise ContractError(
            f"contract {source} fails the operation schema at {where}: {errors[0].message}",
            evidence={"source": source, "errors": [e.message for e in errors[:10]]},
            hint="fix the contract so it validates against contracts/schemas/operation.schema.json",
        )
    params = []
    for p in data.get("parameters", []):
        unit = p.get("unit")
        if unit is not None:
            suffix = UNIT_SUFFIXES.get(unit)
            if suffix is None or not p["name"].endswith(suffix):
                raise ContractError(
                    f"contract {source}: parameter {p['name']!r} has unit {unit!r}, so its name must "
                    f"end in {suffix or '(a known unit suffix)'}",
                    hint=f"known units and suffixes: {UNIT_SUFFIXES}",
                )
        params.append(
            Parameter(
                name=p["name"],
                type=p["type"],
                description=p["description"],
                unit=unit,
                required=p.get("required", False),
                default=p.get("default"),
                has_default="default" in p,
                minimum=p.get("minimum"),
                maximum=p.get("maximum"),
                exclusive_minimum=p.get("exclusive_minimum"),
                choices=tuple(p["choices"]) if "choices" in p else None,
            )
        )
    datasets = tuple(
        DatasetArgument(
            name=d["name"],
            kind=d["kind"],
            description=d["description"],
            geometry_types=tuple(d["geometry_types"]) if "geometry_types" in d else None,
            required=d.get("required", True),
            multiple=d.get("multiple", False),
            min_count=d.get("min_count", 1),
        )
        for d in data.get("datasets", [])
    )
    for d in datasets:
        if d.multiple != d.name.endswith("_paths"):
            raise ContractError(
                f"contract {source}: dataset argument {d.name!r}: a list of paths is named *_paths, "
                "a single one *_path",
                hint="set multiple = true for a *_paths argument, and only for one",
            )
    out = data["output"]
    contract = OperationContract(
        name=data["name"],
        summary=data["summary"],
        category=data["category"],
        status=data["status"],
        distinguishes=data["distinguishes"],
        output_kind=out["kind"],
        crs_effect=data["crs_effect"],
        needs_projected_crs=data["needs_projected_crs"],
        checks=tuple(data["checks"]),
        datasets=datasets,
        parameters=tuple(params),
        examples=tuple(data["examples"]),
        output_geometry_types=tuple(out.get("geometry_types", ())),
        output_feature_count=out.get("feature_count", "any"),
        output_formats=tuple(out.get("formats", ())),
        keywords=tuple(data.get("keywords", ())),
        datasets_named_in=data.get("datasets_named_in"),
        source=source,
        raw=dict(data),
        title=data.get("title") or _title_from_name(data["name"]),
        needs_overlapping_inputs=bool(data.get("needs_overlapping_inputs", True)),
    )
    names = [d.name for d in datasets] + [p.name for p in params]
    added = {OUTPUT_ARGUMENT, OVERWRITE_ARGUMENT, *contract.writer_options(), *contract.dataset_layer_arguments()}
    clashes = {n for n in names if names.count(n) > 1} | (added & set(names))
    if clashes:
        raise ContractError(
            f"contract {source}: argument names clash: {sorted(clashes)}",
            hint="output_path, overwrite, output_layer, the GeoJSON options and <role>_layer are added by "
            "the loader; every other name must be unique",
        )
    named_in = contract.datasets_named_in
    if named_in is not None and not any(p.name == named_in and p.type == "string" for p in params):
        raise ContractError(
            f"contract {source}: datasets_named_in = {named_in!r} is not a string parameter of the operation",
            hint="name the string parameter whose text names the datasets read (run_sql's 'sql')",
        )
    if contract.writes_dataset and out.get("argument") != OUTPUT_ARGUMENT:
        raise ContractError(
            f"contract {source}: a dataset output must declare argument = {OUTPUT_ARGUMENT!r}",
            hint="set [output] argument = 'output_path'",
        )
    return contract


def _title_from_name(name: str) -> str:
    # A plugin's operation may be namespaced ("qgis:native:buffer"); the title is its last part.
    words = name.rsplit(":", 1)[-1].replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def _toml(text: str, name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"contract {name} is not valid TOML: {exc}", hint="fix the TOML syntax") from exc


def _named_after_file(contract: OperationContract, path: Path) -> OperationContract:
    if path.stem != contract.name:
        raise ContractError(
            f"contract file {path.name} declares name {contract.name!r}; the file must be named after it",
            hint=f"rename the file to {contract.name}.toml",
        )
    return contract


def load_contract_file(path: Path) -> OperationContract:
    return _named_after_file(parse_contract(_toml(path.read_text("utf-8"), path.name), source=path.name), path)


def load_builtin_contracts() -> dict[str, OperationContract]:
    """MapSmith's own contracts; validated against the schema once per content (``mapsmith.contract_cache``)."""
    from mapsmith import contract_cache

    root = contracts_root()
    paths = sorted((root / "operations").glob("*.toml"))
    files = {p.name: p.read_bytes() for p in paths}
    key = contract_cache.content_key(
        files, (root / "schemas" / "operation.schema.json").read_bytes(), Path(__file__).read_bytes()
    )
    cached = contract_cache.read(key)
    if cached is not None and set(cached) == set(files):
        contracts = [_named_after_file(parse_contract(cached[p.name], p.name, validated=True), p) for p in paths]
    else:
        data = {p.name: _toml(files[p.name].decode("utf-8"), p.name) for p in paths}
        contracts = [_named_after_file(parse_contract(data[p.name], p.name), p) for p in paths]
        contract_cache.write(key, data)
    return {c.name: c for c in contracts}


def suggest(name: str, known: Iterable[str]) -> list[str]:
    """Close names for a misspelt operation or argument ("did you mean")."""
    return difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
