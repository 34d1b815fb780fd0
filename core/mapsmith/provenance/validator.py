"""Check a provenance record against the ``manifest-v1`` specification, two independent ways.

``validate_manifest`` is MapSmith's own validator, written by hand from the specification: every
rule of the schema plus the one rule the schema cannot express (``finished_at`` must not precede
``started_at``), each failure explained in words an agent can act on. ``schema_errors`` runs
the published JSON Schema (the copy packaged beside this module) through ``jsonschema`` and adds
the same timestamp rule. The two are kept apart on purpose: they agree because the tests mutate
records and require both to reject them, not because one calls the other.

This module must never call ``jsonschema`` from ``validate_manifest``, never recompute a digest
(section 4: only someone holding the data can), and never reject a record the schema accepts for
being from an older draft.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from importlib import resources
from typing import Any, TypeGuard

__all__ = ["SCHEMA_RESOURCE", "SPEC_VERSION", "load_schema", "schema_errors", "validate_manifest"]

SCHEMA_RESOURCE = "manifest-v1.schema.json"


@functools.cache
def load_schema() -> dict[str, Any]:
    """The packaged copy of the published schema, so an installed MapSmith needs no ``shared/``."""
    text = resources.files(__package__).joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


# The label of the draft this package implements, read from the schema so the two cannot drift.
SPEC_VERSION: str = load_schema()["x-spec-version"]

# --- the rules, written down from the specification (sections 3.2-3.7), not read from the schema

# Python's ``$`` also matches before a trailing line break; JSON Schema's (ECMA-262) does not.
# Every pattern below is therefore applied with ``fullmatch`` and written without anchors.
_SPEC_VERSION = re.compile(r"1\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_UTC_TIMESTAMP = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"T(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})(?P<fraction>\.[0-9]+)?Z"
)
_EXTENSION_NAME = re.compile(r"x-[a-z0-9][a-z0-9_-]*:[a-z0-9][a-z0-9_]*")
# Broader than the extension grammar on purpose: the schema forbids any `x-...:round_trip` key.
_ROUND_TRIP_UNDER_EXTENSION = re.compile(r"x-[^:]+:round_trip")

CORE_CHECK_NAMES: frozenset[str] = frozenset(
    {
        "crs_present",
        "crs_matches",
        "geometry_valid",
        "feature_count_exact",
        "feature_count_bounded",
        "row_count_exact",
        "result_not_empty",
        "extent_within_expected",
        "shape_preserved",
        "values_in_expected_range",
        "input_crs_present",
        "input_not_empty",
        "inputs_share_crs",
        "inputs_may_intersect",
        "geometry_types",
    }
)
CRS_DECISION_KEYS: tuple[str, ...] = (
    "analysis_crs",
    "reason",
    "source_crs",
    "target_crs",
    "transformation",
    "round_trip",
)
TRANSFORMATION_KEYS: tuple[str, ...] = (
    "pipeline",
    "accuracy_m",
    "is_ballpark",
    "better_available_m",
)
ROUND_TRIP_KEYS: tuple[str, ...] = ("transformation", "return_transformation")
REPAIR_KEYS: tuple[str, ...] = ("action", "check", "error", "resolved")

# Why each mandatory field exists (section 3.2), so a rejection tells the producer what it lost.
_WHY_REQUIRED: dict[str, str] = {
    "spec_version": "without it the record cannot be interpreted once the format has two versions",
    "operation": "it says what was done",
    "parameters": "present even when empty: an absent field cannot be told apart from 'nobody recorded them'",
    "inputs": "present even when empty (a pure generator reads nothing)",
    "engine": "it names what computed the result",
    "verification": "at least one deterministic check must be recorded, passed or failed",
    "started_at": "RFC 3339 in UTC",
    "finished_at": "RFC 3339 in UTC",
}

_STR = (str,)
_STR_OR_NULL = (str, None)
_NUM_OR_NULL = ("number", None)


def _type_name(value: object) -> str:
    """The JSON name of a value's type, as a reader of the record would say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int subclass in Python, not in JSON
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__} (not a JSON type)"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _key_path(parent: str, key: object) -> str:
    """``parent.key`` when the key reads cleanly, ``parent["key"]`` when it would hide something.

    A key ending in a line break is exactly the kind of defect a reason must make visible.
    """
    if isinstance(key, str) and key and re.fullmatch(r"[A-Za-z0-9_:-]+", key):
        return f"{parent}.{key}" if parent else key
    shown = json.dumps(key, ensure_ascii=True) if isinstance(key, str) else repr(key)
    return f"{parent}[{shown}]"


def _shown(value: object, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=True) if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Checker:
    """Collects reasons while descending one record; each method checks one shape of the spec."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)

    # -- generic shapes ------------------------------------------------------------------------

    def is_object(self, value: object, path: str) -> TypeGuard[dict[str, Any]]:
        if isinstance(value, dict):
            return True
        self.fail(f"`{path}` has the wrong type: it must be an object, not {_type_name(value)}")
        return False

    def is_array(self, value: object, path: str) -> TypeGuard[list[Any]]:
        if isinstance(value, list):
            return True
        self.fail(f"`{path}` has the wrong type: it must be an array, not {_type_name(value)}")
        return False

    def required(self, obj: Mapping[str, Any], keys: tuple[str, ...], path: str) -> None:
        for key in keys:
            if key in obj:
                continue
            full = _key_path(path, key)
            if path:
                self.fail(f"`{full}` is required: `{path}` is missing `{key}`")
            else:
                why = _WHY_REQUIRED.get(key, "")
                self.fail(f"`{full}` is required: the record is missing `{key}`" + (f" ({why})" if why else ""))

    def scalar(self, obj: Mapping[str, Any], key: str, allowed: tuple[object, ...], path: str) -> None:
        """Check ``obj[key]`` (when present) against JSON types: str, bool, "number", None."""
        if key not in obj:
            return
        value = obj[key]
        ok = (
            (value is None and None in allowed)
            or (isinstance(value, str) and str in allowed)
            or (isinstance(value, bool) and bool in allowed)
            or (_is_number(value) and "number" in allowed)
        )
        if ok:
            return
        names = {str: "a string", bool: "a boolean", "number": "a number", None: "null"}
        expected = " or ".join(names[t] for t in allowed)
        self.fail(f"`{_key_path(path, key)}` must be {expected}, not {_type_name(value)}")

    def non_empty_string(self, obj: Mapping[str, Any], key: str, path: str) -> bool:
        if key not in obj:
            return False
        value = obj[key]
        if not isinstance(value, str):
            self.fail(f"`{_key_path(path, key)}` must be a string, not {_type_name(value)}")
            return False
        if not value:
            self.fail(f"`{_key_path(path, key)}` must not be empty")
            return False
        return True

    def string_values(self, value: object, path: str) -> None:
        """An object whose every value is a string (``environment``, ``inputs[].environment``)."""
        if not self.is_object(value, path):
            return
        for key, item in value.items():
            if not isinstance(item, str):
                self.fail(f"`{_key_path(path, key)}` must be a string, not {_type_name(item)}")

    def key_names(self, obj: Mapping[str, Any], defined: tuple[str, ...], path: str, where: str) -> None:
        """Every key is one the specification defines here, or an ``x-<producer>:<name>`` key.

        ``where`` completes "a key section ... defines", e.g. ``"3.7 for a round trip"``.
        """
        for key in obj:
            if key in defined:
                continue
            if isinstance(key, str) and _EXTENSION_NAME.fullmatch(key):
                continue
            self.fail(
                f"`{_key_path(path, key)}` is neither a key section {where} "
                f"({', '.join(defined)}) nor an extension key named `x-<producer>:<name>`"
                + _trailing_whitespace_note(key)
            )

    # -- the fields of a record ----------------------------------------------------------------

    def path_field(self, obj: Mapping[str, Any], path: str) -> None:
        if self.non_empty_string(obj, "path", path) and "\\" in obj["path"]:
            self.fail(
                f"`{path}.path` contains a backslash ({_shown(obj['path'])}): paths use `/` as the "
                "only separator on every platform (section 3.3)"
            )

    def sha256_field(self, obj: Mapping[str, Any], path: str) -> None:
        if "sha256" not in obj:
            return
        value = obj["sha256"]
        if not isinstance(value, str):
            self.fail(f"`{path}.sha256` must be a string, not {_type_name(value)}")
        elif not _SHA256.fullmatch(value):
            self.fail(
                f"`{path}.sha256` must be exactly 64 lowercase hex characters (section 3.3), "
                f"got {_shown(value)} ({len(value)} characters)"
            )

    def inputs(self, value: object) -> None:
        if not self.is_array(value, "inputs"):
            return
        for index, entry in enumerate(value):
            path = f"inputs[{index}]"
            if not self.is_object(entry, path):
                continue
            self.required(entry, ("path", "sha256"), path)
            self.path_field(entry, path)
            self.sha256_field(entry, path)
            for key in ("crs", "layer", "argument"):
                self.scalar(entry, key, _STR_OR_NULL, path)
            if "environment" in entry:
                self.string_values(entry["environment"], f"{path}.environment")

    def output(self, value: object) -> None:
        if not self.is_object(value, "output"):
            return
        self.required(value, ("path", "sha256"), "output")
        self.path_field(value, "output")
        self.sha256_field(value, "output")
        for key in ("crs", "layer"):
            self.scalar(value, key, _STR_OR_NULL, "output")

    def engine(self, value: object) -> None:
        if not self.is_object(value, "engine"):
            return
        self.required(value, ("name", "version"), "engine")
        self.non_empty_string(value, "name", "engine")
        self.non_empty_string(value, "version", "engine")

    def verification(self, value: object) -> None:
        if not self.is_array(value, "verification"):
            return
        if not value:
            self.fail(
                "`verification` must hold at least one check: a manifest with no checks at all is "
                "a log entry, not a record (section 3.2)"
            )
        for index, entry in enumerate(value):
            path = f"verification[{index}]"
            if not self.is_object(entry, path):
                continue
            self.required(entry, ("name", "passed", "detail"), path)
            if "name" in entry:
                self.check_name(entry["name"], f"{path}.name")
            self.scalar(entry, "passed", (bool,), path)
            self.scalar(entry, "detail", _STR, path)
            self.scalar(entry, "critical", (bool,), path)
            self.scalar(entry, "hint", _STR_OR_NULL, path)
            self.scalar(entry, "argument", _STR_OR_NULL, path)

    def check_name(self, name: object, path: str) -> None:
        if not isinstance(name, str):
            self.fail(f"`{path}` must be a string, not {_type_name(name)}")
            return
        if name in CORE_CHECK_NAMES or _EXTENSION_NAME.fullmatch(name):
            return
        self.fail(
            f"`{path}` is {_shown(name)}, which is neither a core check name (section 3.6) nor an "
            "extension name of the form `x-<producer>:<name>`" + _trailing_whitespace_note(name)
        )

    def timestamp(self, obj: Mapping[str, Any], key: str) -> re.Match[str] | None:
        if key not in obj:
            return None
        value = obj[key]
        if not isinstance(value, str):
            self.fail(f"`{key}` must be a string, not {_type_name(value)}")
            return None
        match = _UTC_TIMESTAMP.fullmatch(value)
        if match is None:
            self.fail(
                f"`{key}` is {_shown(value)}, which is not an RFC 3339 timestamp in UTC ending in "
                "`Z` (YYYY-MM-DDTHH:MM:SS[.fraction]Z): local times make two records disagree "
                "about the order of events (section 3.3)"
            )
        return match

    def transformation(self, value: object, path: str) -> None:
        if not self.is_object(value, path):
            return
        self.key_names(value, TRANSFORMATION_KEYS, path, "3.7 defines for a transformation")
        self.scalar(value, "pipeline", _STR_OR_NULL, path)
        self.scalar(value, "accuracy_m", _NUM_OR_NULL, path)
        self.scalar(value, "is_ballpark", (bool,), path)
        self.scalar(value, "better_available_m", _NUM_OR_NULL, path)

    def round_trip(self, value: object, path: str) -> None:
        if not self.is_object(value, path):
            return
        self.required(value, ROUND_TRIP_KEYS, path)
        self.key_names(value, ROUND_TRIP_KEYS, path, "3.7 defines for a round trip")
        for leg in ROUND_TRIP_KEYS:
            if leg in value:
                self.transformation(value[leg], f"{path}.{leg}")

    def crs_decisions(self, value: object) -> None:
        path = "crs_decisions"
        if not self.is_object(value, path):
            return
        self.key_names(value, CRS_DECISION_KEYS, path, "3.7 defines")
        for key in value:
            if isinstance(key, str) and _ROUND_TRIP_UNDER_EXTENSION.fullmatch(key):
                self.fail(
                    f"`{_key_path(path, key)}` records a round trip under an extension name: "
                    "`round_trip` is the only name for that fact (section 3.7)"
                )
        self.scalar(value, "analysis_crs", _STR, path)
        self.scalar(value, "reason", _STR, path)
        self.scalar(value, "source_crs", _STR_OR_NULL, path)
        self.scalar(value, "target_crs", _STR_OR_NULL, path)
        if "transformation" in value:
            self.transformation(value["transformation"], f"{path}.transformation")
        if "round_trip" in value:
            self.round_trip(value["round_trip"], f"{path}.round_trip")

    def repairs(self, value: object) -> None:
        if not self.is_array(value, "repairs"):
            return
        for index, entry in enumerate(value):
            path = f"repairs[{index}]"
            if not self.is_object(entry, path):
                continue
            self.required(entry, ("action",), path)
            self.key_names(entry, REPAIR_KEYS, path, "3.4 defines for a repair")
            for key in ("check", "action", "error"):
                self.scalar(entry, key, _STR_OR_NULL, path)
            self.scalar(entry, "resolved", (bool,), path)

    def notes(self, value: object) -> None:
        if not self.is_array(value, "notes"):
            return
        for index, note in enumerate(value):
            if not isinstance(note, str):
                self.fail(f"`notes[{index}]` must be a string, not {_type_name(note)}")

    def producer(self, value: object) -> None:
        if not self.is_object(value, "producer"):
            return
        self.scalar(value, "name", _STR, "producer")
        self.scalar(value, "version", _STR, "producer")


def _trailing_whitespace_note(name: object) -> str:
    if isinstance(name, str) and name != name.rstrip():
        return " (it ends in whitespace or a line break, which the grammar does not allow)"
    return ""


def _instant(match: re.Match[str]) -> tuple[int, int, int, int, int, int, Decimal]:
    """A UTC timestamp as comparable fields.

    Compared field by field rather than through ``datetime``: the schema's pattern admits leap
    second ``:60`` (RFC 3339 does too), which ``datetime`` refuses, and any number of fraction
    digits, which ``datetime`` truncates to microseconds. Both stamps are UTC, so field order is
    time order.
    """
    fraction = Decimal("0" + match["fraction"]) if match["fraction"] else Decimal(0)
    fields = ("year", "month", "day", "hour", "minute", "second")
    year, month, day, hour, minute, second = (int(match[name]) for name in fields)
    return (year, month, day, hour, minute, second, fraction)


def _order_reasons(record: Mapping[str, Any]) -> list[str]:
    """The one rule the schema cannot express (section 4): no run finishes before it starts."""
    started, finished = record.get("started_at"), record.get("finished_at")
    if not (isinstance(started, str) and isinstance(finished, str)):
        return []
    start_match, finish_match = (
        _UTC_TIMESTAMP.fullmatch(started),
        _UTC_TIMESTAMP.fullmatch(finished),
    )
    if start_match is None or finish_match is None:
        return []  # the form is reported elsewhere; malformed stamps have no order to check
    if _instant(finish_match) < _instant(start_match):
        reason = (
            f"`finished_at` ({finished}) precedes `started_at` ({started}): a run cannot finish "
            "before it starts (sections 3.2 and 4)"
        )
        return [reason]
    return []


def validate_manifest(record: object) -> list[str]:
    """Every way ``record`` fails to conform to ``manifest-v1``; an empty list means it conforms.

    ``record`` is the parsed JSON (``json.load``), not a path. Each reason names the field in the
    form ``inputs[1].sha256`` and says what the specification requires there. Unknown fields are
    ignored, as section 3.5 requires, except where the specification closes a vocabulary (check
    names, and the keys of ``crs_decisions``, its transformation and round trip, and ``repairs``).
    """
    if not isinstance(record, dict):
        return [f"the record has the wrong type: it must be a JSON object, not {_type_name(record)}"]
    check = _Checker()
    check.required(record, tuple(_WHY_REQUIRED), "")

    if "spec_version" in record:
        version = record["spec_version"]
        if not isinstance(version, str):
            check.fail(f"`spec_version` must be a string, not {_type_name(version)}")
        elif not _SPEC_VERSION.fullmatch(version):
            check.fail(
                f"`spec_version` is {_shown(version)}, which this schema does not accept: it must "
                "be 1.x.y, semantic versioning within major version 1 (e.g. `1.0.0-draft.10`)"
            )
    check.non_empty_string(record, "operation", "")
    if "parameters" in record:
        check.is_object(record["parameters"], "parameters")
    if "inputs" in record:
        check.inputs(record["inputs"])
    if "output" in record:
        check.output(record["output"])
    if "engine" in record:
        check.engine(record["engine"])
    if "verification" in record:
        check.verification(record["verification"])
    check.timestamp(record, "started_at")
    check.timestamp(record, "finished_at")
    if "crs_decisions" in record:
        check.crs_decisions(record["crs_decisions"])
    if "notes" in record:
        check.notes(record["notes"])
    if "repairs" in record:
        check.repairs(record["repairs"])
    check.scalar(record, "parameters_redacted", (bool,), "")
    if "producer" in record:
        check.producer(record["producer"])
    if "environment" in record:
        check.string_values(record["environment"], "environment")
    return check.reasons + _order_reasons(record)


# --- the schema route --------------------------------------------------------------------------


def _ecma_pattern(pattern: str) -> str:
    """Rewrite a JSON Schema (ECMA-262) pattern so Python's ``re`` gives it the same meaning.

    The one difference that matters for this schema: outside a character class, ECMA's ``$``
    matches only at the very end of the text, Python's also before a final line break. So an
    unescaped ``$`` outside a class becomes ``\\Z``; everything else is copied as it is.
    """
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
        index += 1
    return "".join(out)


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(_ecma_pattern(pattern))


@functools.cache
def _schema_validator() -> Any:
    # Imported here so that importing this module (for ``validate_manifest``) never needs it.
    from jsonschema import Draft202012Validator, ValidationError, validators

    def pattern(validator: Any, patrn: str, instance: object, schema: object) -> Iterator[Any]:
        if isinstance(instance, str) and not _compiled(patrn).search(instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, patterns: dict[str, Any], instance: object, schema: object) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():  # type: ignore[attr-defined]
                if _compiled(patrn).search(key):
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    # jsonschema applies patterns with Python's ``re.search``, whose ``$`` accepts a trailing
    # line break that ECMA-262 (which JSON Schema prescribes) rejects: a sha256 ending in "\n"
    # would pass. The spec met this bug once already (section 3.6); these two keywords fix it.
    ecma_validator = validators.extend(
        Draft202012Validator, {"pattern": pattern, "patternProperties": pattern_properties}
    )
    return ecma_validator(load_schema())


def _error_path(parts: Any) -> str:
    path = ""
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else _key_path(path, part)
    return path or "(record)"


def schema_errors(record: object) -> list[str]:
    """The reasons the packaged JSON Schema, plus the timestamp-order rule, gives for ``record``.

    The second opinion beside ``validate_manifest``: a record both accept conforms by two
    independent readings of the specification. Messages are ``jsonschema``'s own, prefixed with
    the field they concern.
    """
    reasons = [
        f"`{_error_path(error.absolute_path)}`: {error.message}" for error in _schema_validator().iter_errors(record)
    ]
    if isinstance(record, dict):
        reasons.extend(_order_reasons(record))
    return reasons
