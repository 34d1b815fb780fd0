"""One argument value checked against its contract: type, choices, bounds, paths, layer names, GeoJSON members.

Split out of ``mapsmith.contracts`` along its seam: the contract says what an operation takes, this module
says whether one value is acceptable and, if not, raises the ``ArgumentError`` with the code and hint an
agent acts on. ``mapsmith.contracts`` re-exports the public names, so importers keep one place to look.
It must never import an engine, open a dataset, or accept a value it had to coerce beyond the contract
(a JSON ``true`` is never the number 1).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError

if TYPE_CHECKING:
    from mapsmith.contracts import OperationContract, Parameter

# Added the same way where the output formats allow them: the layer to write when the output is a
# GeoPackage (a container of layers), and the two GeoJSON choices beyond RFC 7946's defaults.
OUTPUT_LAYER_ARGUMENT = "output_layer"
GEOJSON_CRS_ARGUMENT = "geojson_keep_crs"
GEOJSON_MEMBERS_ARGUMENT = "feature_collection_members"
# A layer name MapSmith writes: a plain identifier, so it is safe in SQL, in file names beside the
# container (its manifest), and in every GIS; GeoPackage reserves the gpkg_/rtree_ prefixes, SQLite sqlite_.
LAYER_NAME_MAX = 63
_RESERVED_LAYER_PREFIXES = ("gpkg_", "rtree_", "sqlite_")
# Members RFC 7946 (and the legacy 2008 format) give a meaning: a caller's member may not replace them.
RESERVED_GEOJSON_MEMBERS = frozenset({"type", "features", "crs", "bbox", "name", "geometry", "properties"})


def missing_argument(contract: OperationContract, name: str, what: str) -> ArgumentError:
    return ArgumentError(
        f"{contract.name} needs {name!r}: {what}",
        code="MISSING_ARGUMENT",
        evidence={"operation": contract.name, "argument": name},
        hint=f"add {name!r} to the arguments",
    )


def mistyped_argument(contract: OperationContract, name: str, expected: str, value: Any) -> ArgumentError:
    return ArgumentError(
        f"{contract.name}: {name!r} must be a {expected}, got {type(value).__name__} {value!r}",
        code="WRONG_ARGUMENT_TYPE",
        evidence={"operation": contract.name, "argument": name, "value": repr(value)},
        hint=f"pass {name!r} as a {expected}",
    )


WRITER_TYPES = {OUTPUT_LAYER_ARGUMENT: "string", GEOJSON_CRS_ARGUMENT: "boolean", GEOJSON_MEMBERS_ARGUMENT: "object"}


def check_layer_name(contract_name: str, name: Any, argument: str = OUTPUT_LAYER_ARGUMENT) -> str:
    """A layer name MapSmith will create: an identifier of at most 63 characters, not a reserved table."""

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


def check_writer_options(contract: OperationContract, arguments: Mapping[str, Any]) -> dict[str, Any]:
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
                raise mistyped_argument(contract, name, "boolean", value)
            out[name] = value
        else:
            out[name] = _check_members(contract, value)
    return out


def _check_members(contract: OperationContract, value: Any) -> dict[str, Any]:
    """Plain JSON values under names RFC 7946 does not give a meaning to."""
    if not isinstance(value, Mapping):
        raise mistyped_argument(contract, GEOJSON_MEMBERS_ARGUMENT, "object of plain JSON values", value)
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
        raise mistyped_argument(contract, GEOJSON_MEMBERS_ARGUMENT, "object of plain JSON values", value) from exc
    return dict(members)


def check_path_value(contract: OperationContract, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise mistyped_argument(contract, name, "non-empty string path", value)
    return value


def check_parameter(contract: OperationContract, p: Parameter, value: Any) -> Any:
    # bool is an int in Python; a JSON true must not pass as the number 1.
    if p.type == "boolean":
        if not isinstance(value, bool):
            raise mistyped_argument(contract, p.name, "boolean", value)
    elif p.type == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise mistyped_argument(contract, p.name, "integer", value)
    elif p.type == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise mistyped_argument(contract, p.name, "finite number", value)
        value = float(value)
    elif p.type == "string" and not isinstance(value, str):
        raise mistyped_argument(contract, p.name, "string", value)
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
