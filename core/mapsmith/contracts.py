"""Operation contracts: load, validate, and use them to check arguments and build tool schemas.

A contract is data (``contracts/operations/<name>.toml``), validated against
``contracts/schemas/operation.schema.json``. Argument checking, MCP input schemas and the catalog
all read the same ``OperationContract``, so there is one truth about what an operation takes.
This module must never import an engine or open a dataset.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

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
# Added the same way where the output formats allow them: the layer to write when the output is a
# GeoPackage (a container of layers), and the two GeoJSON choices beyond RFC 7946's defaults.
OUTPUT_LAYER_ARGUMENT = "output_layer"
GEOJSON_CRS_ARGUMENT = "geojson_keep_crs"
GEOJSON_MEMBERS_ARGUMENT = "feature_collection_members"
# A second dataset argument ``<role>_path`` takes its layer as ``<role>_layer`` (mask_layer, join_layer);
# input_path keeps the ``layer`` its contract declares.
MAIN_INPUT = "input_path"
MAIN_LAYER = "layer"
# A layer name MapSmith writes: a plain identifier, so it is safe in SQL, in file names beside the
# container (its manifest), and in every GIS; GeoPackage reserves the gpkg_/rtree_ prefixes, SQLite sqlite_.
LAYER_NAME_MAX = 63
_RESERVED_LAYER_PREFIXES = ("gpkg_", "rtree_", "sqlite_")
# Members RFC 7946 (and the legacy 2008 format) give a meaning: a caller's member may not replace them.
RESERVED_GEOJSON_MEMBERS = frozenset({"type", "features", "crs", "bbox", "name", "geometry", "properties"})

# The geometry families a dataset argument may declare; declaring all of them restricts nothing.
GEOMETRY_FAMILIES = ("point", "line", "polygon")


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

    @property
    def writes_dataset(self) -> bool:
        return self.output_kind.startswith("dataset:")

    @property
    def output_optional(self) -> bool:
        """``[output] optional = true``: left out, output_path makes the operation answer in rows (run_sql)."""
        out = self.raw.get("output", {}) if isinstance(self.raw, Mapping) else {}
        return bool(self.writes_dataset and out.get("optional"))

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
                    raise _missing(self, d.name, f"a path to a {d.kind} dataset: {d.description}")
                continue
            if d.multiple:
                if not isinstance(value, list) or len(value) < d.min_count:
                    raise _mistyped(self, d.name, f"list of at least {d.min_count} paths", value)
                out[d.name] = [_check_path_value(self, f"{d.name}[{i}]", v) for i, v in enumerate(value)]
            else:
                out[d.name] = _check_path_value(self, d.name, value)
        if self.writes_dataset and not (self.output_optional and arguments.get(OUTPUT_ARGUMENT) is None):
            value = arguments.get(OUTPUT_ARGUMENT)
            if value is None:
                raise _missing(self, OUTPUT_ARGUMENT, "the path of the dataset to write")
            out[OUTPUT_ARGUMENT] = _check_path_value(self, OUTPUT_ARGUMENT, value)
            overwrite = arguments.get(OVERWRITE_ARGUMENT, False)
            if not isinstance(overwrite, bool):
                raise _mistyped(self, OVERWRITE_ARGUMENT, "boolean", overwrite)
            out[OVERWRITE_ARGUMENT] = overwrite
            out.update(_check_writer_options(self, arguments))
        for name, dataset in self.dataset_layer_arguments().items():
            if arguments.get(name) is not None:
                if arguments.get(dataset) is None:
                    raise ArgumentError(
                        f"{self.name}: {name!r} names a layer of {dataset}, which was not given",
                        code="LAYER_WITHOUT_DATASET",
                        evidence={"operation": self.name, "argument": name},
                        hint=f"pass {dataset} too, or leave {name} out",
                    )
                out[name] = _check_path_value(self, name, arguments[name])
        for p in self.parameters:
            if p.name not in arguments or arguments[p.name] is None:
                if p.required:
                    raise _missing(self, p.name, p.description)
                if p.has_default:
                    out[p.name] = p.default
                continue
            out[p.name] = _check_parameter(self, p, arguments[p.name])
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
                props[name] = {"type": _WRITER_TYPES[name]}
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
        }


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


def _missing(contract: OperationContract, name: str, what: str) -> ArgumentError:
    return ArgumentError(
        f"{contract.name} needs {name!r}: {what}",
        code="MISSING_ARGUMENT",
        evidence={"operation": contract.name, "argument": name},
        hint=f"add {name!r} to the arguments",
    )


def _mistyped(contract: OperationContract, name: str, expected: str, value: Any) -> ArgumentError:
    return ArgumentError(
        f"{contract.name}: {name!r} must be a {expected}, got {type(value).__name__} {value!r}",
        code="WRONG_ARGUMENT_TYPE",
        evidence={"operation": contract.name, "argument": name, "value": repr(value)},
        hint=f"pass {name!r} as a {expected}",
    )


_WRITER_TYPES = {OUTPUT_LAYER_ARGUMENT: "string", GEOJSON_CRS_ARGUMENT: "boolean", GEOJSON_MEMBERS_ARGUMENT: "object"}


def check_layer_name(contract_name: str, name: Any, argument: str = OUTPUT_LAYER_ARGUMENT) -> str:
    """A layer name MapSmith will create: an identifier of at most 63 characters, not a reserved table."""
    import re

    if (
        not isinstance(name, str)
        or not re.fullmatch(rf"[A-Za-z_][A-Za-z0-9_]{{0,{LAYER_NAME_MAX - 1}}}", name)
        or name.lower().startswith(_RESERVED_LAYER_PREFIXES)
    ):
        raise ArgumentError(
            f"{contract_name}: {argument} {name!r} is not a layer name MapSmith writes",
            code="OUTPUT_LAYER_NAME_INVALID",
            evidence={"operation": contract_name, "argument": argument, "value": repr(name)},
            hint=f"use letters, digits and _ (not first a digit), at most {LAYER_NAME_MAX} characters, "
            "not starting with gpkg_, rtree_ or sqlite_; e.g. 'wells_2024'",
        )
    return name


def _check_writer_options(contract: OperationContract, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """output_layer, geojson_keep_crs and feature_collection_members, when given; absent ones stay absent."""
    out: dict[str, Any] = {}
    for name in contract.writer_options():
        value = arguments.get(name)
        if value is None:
            continue
        if name == OUTPUT_LAYER_ARGUMENT:
            out[name] = check_layer_name(contract.name, value)
        elif name == GEOJSON_CRS_ARGUMENT:
            if not isinstance(value, bool):
                raise _mistyped(contract, name, "boolean", value)
            out[name] = value
        else:
            out[name] = _check_members(contract, value)
    return out


def _check_members(contract: OperationContract, value: Any) -> dict[str, Any]:
    """Plain JSON values under names RFC 7946 does not give a meaning to."""
    if not isinstance(value, Mapping):
        raise _mistyped(contract, GEOJSON_MEMBERS_ARGUMENT, "object of plain JSON values", value)
    reserved = sorted(k for k in value if str(k).lower() in RESERVED_GEOJSON_MEMBERS)
    if reserved:
        raise ArgumentError(
            f"{contract.name}: {GEOJSON_MEMBERS_ARGUMENT} may not set {reserved}: GeoJSON gives them a meaning",
            code="GEOJSON_MEMBER_RESERVED",
            evidence={"operation": contract.name, "members": reserved, "reserved": sorted(RESERVED_GEOJSON_MEMBERS)},
            hint="rename the member (e.g. 'removed_count'); the CRS is chosen with geojson_keep_crs",
        )
    try:
        # Round-tripped so what is written is exactly JSON (no NaN, no tuples, no objects JSON cannot hold).
        members = json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise _mistyped(contract, GEOJSON_MEMBERS_ARGUMENT, "object of plain JSON values", value) from exc
    return dict(members)


def _check_path_value(contract: OperationContract, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _mistyped(contract, name, "non-empty string path", value)
    return value


def _check_parameter(contract: OperationContract, p: Parameter, value: Any) -> Any:
    # bool is an int in Python; a JSON true must not pass as the number 1.
    if p.type == "boolean":
        if not isinstance(value, bool):
            raise _mistyped(contract, p.name, "boolean", value)
    elif p.type == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _mistyped(contract, p.name, "integer", value)
    elif p.type == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _mistyped(contract, p.name, "finite number", value)
        value = float(value)
    elif p.type == "string" and not isinstance(value, str):
        raise _mistyped(contract, p.name, "string", value)
    if p.choices is not None and value not in p.choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in p.choices], n=1)
        raise ArgumentError(
            f"{contract.name}: {p.name!r} must be one of {list(p.choices)}, got {value!r}"
            + (f"; did you mean {close[0]!r}?" if close else ""),
            code="ARGUMENT_NOT_IN_CHOICES",
            evidence={"operation": contract.name, "argument": p.name, "value": value},
            hint=f"choose one of {list(p.choices)}",
        )
    bounds = [
        (p.minimum, lambda v, b: v >= b, ">="),
        (p.exclusive_minimum, lambda v, b: v > b, ">"),
        (p.maximum, lambda v, b: v <= b, "<="),
    ]
    for bound, ok, sign in bounds:
        if bound is not None and not ok(value, bound):
            unit = f" {p.unit}" if p.unit else ""
            raise ArgumentError(
                f"{contract.name}: {p.name!r} must be {sign} {bound}{unit}, got {value}",
                code="ARGUMENT_OUT_OF_RANGE",
                evidence={"operation": contract.name, "argument": p.name, "value": value},
                hint=f"pass {p.name} {sign} {bound}{unit}",
            )
    return value


# -- loading ----------------------------------------------------------------------------------


@cache
def _schema_validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads((contracts_root() / "schemas" / "operation.schema.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def parse_contract(data: Mapping[str, Any], source: str) -> OperationContract:
    """Validate one contract mapping against the schema and the house rules, and type it."""
    errors = sorted(_schema_validator().iter_errors(dict(data)), key=lambda e: list(e.absolute_path))
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


def load_contract_file(path: Path) -> OperationContract:
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(f"contract {path.name} is not valid TOML: {exc}", hint="fix the TOML syntax") from exc
    contract = parse_contract(data, source=path.name)
    if path.stem != contract.name:
        raise ContractError(
            f"contract file {path.name} declares name {contract.name!r}; the file must be named after it",
            hint=f"rename the file to {contract.name}.toml",
        )
    return contract


def load_builtin_contracts() -> dict[str, OperationContract]:
    return {
        c.name: c for c in (load_contract_file(p) for p in sorted((contracts_root() / "operations").glob("*.toml")))
    }


def suggest(name: str, known: Iterable[str]) -> list[str]:
    """Close names for a misspelt operation or argument ("did you mean")."""
    return difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
