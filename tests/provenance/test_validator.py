"""The project's validator against the published conformance corpus, and against mutations.

Two validators read the specification independently: ``validate_manifest`` (hand-written) and
``schema_errors`` (the packaged JSON Schema through jsonschema). Every test here requires both to
reach the same verdict, and the hand-written one to say why in the words the corpus expects.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mapsmith.provenance import validator as validator_module
from mapsmith.provenance.validator import (
    CORE_CHECK_NAMES,
    CRS_DECISION_KEYS,
    REPAIR_KEYS,
    ROUND_TRIP_KEYS,
    SPEC_VERSION,
    TRANSFORMATION_KEYS,
    load_schema,
    schema_errors,
    validate_manifest,
)

# The repository is cloned with shared/ beside it: /work/main and /work/shared here, any
# <folder>/<repo> and <folder>/shared in CI.
SHARED = Path(__file__).resolve().parents[2].parent / "shared"
SPEC = SHARED / "manifest-spec"
CONFORMANCE = SPEC / "conformance"
NO_SPEC = f"the published manifest spec is not at {SPEC} (shared/ must sit beside the repository)"
requires_spec = pytest.mark.skipif(not CONFORMANCE.is_dir(), reason=NO_SPEC)
PACKAGED_SCHEMA = Path(validator_module.__file__).with_name("manifest-v1.schema.json")


def _fixture_names(kind: str) -> list[Any]:
    folder = CONFORMANCE / kind
    if not folder.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_SPEC), id="no-spec")]
    return sorted(p.name for p in folder.glob("*.json") if p.name != "expected.json")


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _expected() -> dict[str, str]:
    expected: dict[str, str] = _load(CONFORMANCE / "invalid" / "expected.json")
    return expected


# --- the conformance corpus ----------------------------------------------------------------------


@pytest.mark.parametrize("name", _fixture_names("valid"))
def test_valid_fixture_is_accepted_by_both_validators(name: str) -> None:
    record = _load(CONFORMANCE / "valid" / name)
    assert validate_manifest(record) == []
    assert schema_errors(record) == []


@pytest.mark.parametrize("name", _fixture_names("invalid"))
def test_invalid_fixture_is_rejected_with_the_expected_reason(name: str) -> None:
    record = _load(CONFORMANCE / "invalid" / name)
    fragment = _expected().get(name)
    assert fragment is not None, f"{name} has no entry in expected.json"
    reasons = validate_manifest(record)
    assert any(fragment in reason for reason in reasons), (fragment, reasons)
    assert schema_errors(record), "the schema route accepted a record the corpus rejects"


@requires_spec
def test_expected_json_and_the_invalid_fixtures_name_the_same_files() -> None:
    on_disk = {p.name for p in (CONFORMANCE / "invalid").glob("*.json")} - {"expected.json"}
    listed = set(_expected())
    assert on_disk - listed == set(), "invalid fixtures with no expected reason"
    assert listed - on_disk == set(), "expected.json names fixtures that do not exist"


@requires_spec
def test_schema_alone_rejects_every_invalid_fixture_but_the_order_one() -> None:
    # README, point 3: the timestamp order is the one rule the schema cannot express.
    plain = Draft202012Validator(_load(SPEC / "schema" / "manifest-v1.schema.json"))
    passing = {name for name in _expected() if not list(plain.iter_errors(_load(CONFORMANCE / "invalid" / name)))}
    assert passing == {"finished-before-started.json"}


@requires_spec
def test_packaged_schema_is_a_byte_identical_copy_of_the_published_one() -> None:
    published = SPEC / "schema" / "manifest-v1.schema.json"
    assert PACKAGED_SCHEMA.read_bytes() == published.read_bytes()


def test_spec_version_is_the_packaged_schemas_label() -> None:
    assert SPEC_VERSION == "1.0.0-draft.10"
    assert SPEC_VERSION == json.loads(PACKAGED_SCHEMA.read_text(encoding="utf-8"))["x-spec-version"]


def test_packaged_schema_is_a_valid_2020_12_schema() -> None:
    Draft202012Validator.check_schema(load_schema())


def test_hand_written_vocabularies_match_the_schema() -> None:
    # The validator writes the vocabularies down itself; this catches drift on a schema update.
    props = load_schema()["properties"]
    names = props["verification"]["items"]["properties"]["name"]["anyOf"][0]["enum"]
    crs = props["crs_decisions"]
    assert set(names) == CORE_CHECK_NAMES
    assert tuple(crs["propertyNames"]["anyOf"][0]["enum"]) == CRS_DECISION_KEYS
    transformation = crs["properties"]["transformation"]["propertyNames"]["anyOf"][0]["enum"]
    assert tuple(transformation) == TRANSFORMATION_KEYS
    round_trip = crs["properties"]["round_trip"]["propertyNames"]["anyOf"][0]["enum"]
    assert tuple(round_trip) == ROUND_TRIP_KEYS
    assert tuple(props["repairs"]["items"]["propertyNames"]["anyOf"][0]["enum"]) == REPAIR_KEYS


# --- mutations: every field the schema declares, broken one at a time ---------------------------

SHA_A = "a" * 64
SHA_B = "0123456789abcdef" * 4
LEG = {"pipeline": "+proj=noop", "accuracy_m": 0.0, "is_ballpark": False}


def _base() -> dict[str, Any]:
    """A record using every field the schema declares, valid by both validators."""
    return {
        "spec_version": "1.0.0-draft.10",
        "operation": "buffer_layer",
        "parameters": {"distance_meters": 300.0},
        "inputs": [
            {
                "path": "data/rivers.gpkg",
                "sha256": SHA_A,
                "crs": "EPSG:4326",
                "layer": "rivers",
                "argument": "input",
                "environment": {"GDAL_PAM_ENABLED": "YES"},
            }
        ],
        "output": {
            "path": "out/rivers_300m.gpkg",
            "sha256": SHA_B,
            "crs": "EPSG:4326",
            "layer": "rivers_300m",
        },
        "engine": {"name": "geopandas", "version": "1.2.0"},
        "verification": [
            {
                "name": "crs_present",
                "passed": True,
                "detail": "EPSG:4326",
                "critical": True,
                "hint": "reproject the input",
                "argument": "input",
            },
            {"name": "x-mapsmith:no_geometry_is_empty", "passed": False, "detail": "1 empty"},
        ],
        "started_at": "2026-09-28T10:00:00.125Z",
        "finished_at": "2026-09-28T10:00:02Z",
        "crs_decisions": {
            "analysis_crs": "EPSG:32632",
            "reason": "estimated UTM zone, metres needed",
            "source_crs": "EPSG:4326",
            "target_crs": "EPSG:32632",
            "transformation": {**LEG, "better_available_m": None, "x-mapsmith:chosen_by": "pyproj"},
            "round_trip": {
                "transformation": dict(LEG),
                "return_transformation": dict(LEG),
                "x-mapsmith:legs_measured": "both",
            },
            "x-mapsmith:zone": 32,
        },
        "notes": ["input copied before reading"],
        "repairs": [{"action": "make_valid", "check": "geometry_valid", "error": None, "resolved": True}],
        "parameters_redacted": False,
        "producer": {"name": "mapsmith", "version": "0.1.0"},
        "environment": {"PROJ_NETWORK": "OFF"},
    }


_REQUIRED = (
    "spec_version",
    "operation",
    "parameters",
    "inputs",
    "engine",
    "verification",
    "started_at",
    "finished_at",
)
_DELETE = object()
KeyPath = tuple[str | int, ...]


def _mutated(path: KeyPath, value: object) -> dict[str, Any]:
    record = copy.deepcopy(_base())
    target: Any = record
    for part in path[:-1]:
        target = target[part]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return record


def _renamed(path: KeyPath, old: str, new: str) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        record = copy.deepcopy(_base())
        target: Any = record
        for part in path:
            target = target[part]
        target[new] = target.pop(old)
        return record

    return make


def _field(path: KeyPath) -> str:
    """``("inputs", 0, "crs")`` -> ``inputs[].crs``: the schema field a mutation breaks."""
    out = ""
    for part in path:
        out += "[]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[], object]
    fragment: str  # what the hand-written reason must contain
    field: str


def _set(path: KeyPath, value: object, fragment: str, name: str = "") -> Case:
    label = name or f"{_field(path)}={'deleted' if value is _DELETE else repr(value)}"
    return Case(label, lambda: _mutated(path, value), fragment, _field(path))


_LEGS: tuple[KeyPath, ...] = (
    ("crs_decisions", "transformation"),
    ("crs_decisions", "round_trip", "transformation"),
    ("crs_decisions", "round_trip", "return_transformation"),
)

REJECTED: list[Case] = [
    Case("record-not-object", lambda: [_base()], "must be a JSON object", ""),
    *[_set((key,), _DELETE, f"`{key}` is required") for key in _REQUIRED],
    _set(("spec_version",), "2.0.0", "1.x"),
    _set(("spec_version",), "1.0", "1.x"),
    _set(("spec_version",), "1.0.0\n", "1.x"),
    _set(("spec_version",), "1.0.0+build.5", "1.x"),
    _set(("spec_version",), 1, "`spec_version` must be a string"),
    _set(("operation",), "", "`operation` must not be empty"),
    _set(("operation",), 3, "`operation` must be a string"),
    _set(("parameters",), [], "`parameters` has the wrong type"),
    _set(("inputs",), {}, "`inputs` has the wrong type"),
    _set(("inputs", 0), "a.tif", "`inputs[0]` has the wrong type"),
    _set(("inputs", 0, "path"), _DELETE, "`inputs[0].path` is required"),
    _set(("inputs", 0, "path"), "", "`inputs[0].path` must not be empty"),
    _set(("inputs", 0, "path"), "data\\a.tif", "backslash"),
    _set(("inputs", 0, "path"), 5, "`inputs[0].path` must be a string"),
    _set(("inputs", 0, "sha256"), _DELETE, "`inputs[0].sha256` is required"),
    _set(("inputs", 0, "sha256"), "A" * 64, "lowercase hex"),
    _set(("inputs", 0, "sha256"), "a" * 63, "64"),
    _set(("inputs", 0, "sha256"), "a" * 65, "64"),
    _set(("inputs", 0, "sha256"), SHA_A + "\n", "64"),
    _set(("inputs", 0, "sha256"), None, "`inputs[0].sha256` must be a string"),
    *[
        _set(("inputs", 0, key), 1, f"`inputs[0].{key}` must be a string or null")
        for key in ("crs", "layer", "argument")
    ],
    _set(("inputs", 0, "environment"), "PAM on", "`inputs[0].environment` has the wrong type"),
    _set(
        ("inputs", 0, "environment", "GDAL_PAM_ENABLED"),
        True,
        "`inputs[0].environment.GDAL_PAM_ENABLED` must be a string",
    ),
    _set(("output",), "out.tif", "`output` has the wrong type"),
    _set(("output", "path"), _DELETE, "`output.path` is required"),
    _set(("output", "path"), "out\\x.tif", "backslash"),
    _set(("output", "sha256"), _DELETE, "`output.sha256` is required"),
    _set(("output", "sha256"), "abc", "64"),
    _set(("output", "crs"), 4326, "`output.crs` must be a string or null"),
    _set(("output", "layer"), 5, "output.layer"),
    _set(("engine",), "gdal", "`engine` has the wrong type"),
    _set(("engine", "name"), _DELETE, "engine.name"),
    _set(("engine", "name"), 1, "`engine.name` must be a string"),
    _set(("engine", "version"), _DELETE, "engine.version"),
    _set(("engine", "version"), "", "`engine.version` must not be empty"),
    _set(("verification",), {}, "`verification` has the wrong type"),
    _set(("verification",), [], "at least one"),
    _set(("verification", 0), "ok", "`verification[0]` has the wrong type"),
    *[
        _set(("verification", 0, key), _DELETE, f"`verification[0].{key}` is required")
        for key in ("name", "passed", "detail")
    ],
    *[
        _set(("verification", 0, "name"), bad, "neither a core check name")
        for bad in ("CRS_present", "check_1", "x-Acme:c", "x-acme:", "x-:c", "crs_present\n")
    ],
    _set(("verification", 1, "name"), "x-mapsmith:no_geometry_is_empty\n", "neither a core"),
    _set(("verification", 0, "name"), 7, "`verification[0].name` must be a string"),
    _set(("verification", 0, "passed"), "yes", "`verification[0].passed` must be a boolean"),
    _set(("verification", 0, "passed"), 1, "`verification[0].passed` must be a boolean"),
    _set(("verification", 0, "detail"), True, "`verification[0].detail` must be a string"),
    _set(("verification", 0, "critical"), "yes", "`verification[0].critical` must be a boolean"),
    _set(("verification", 0, "hint"), 1, "`verification[0].hint` must be a string or null"),
    _set(("verification", 0, "argument"), 1, "`verification[0].argument` must be a string or"),
    *[
        _set((key,), stamp, "UTC")
        for key in ("started_at", "finished_at")
        for stamp in (
            "2026-09-28 10:00:00Z",
            "2026-09-28T10:00:00",
            "2026-09-28T10:00:00z",
            "2026-09-28T10:00:00+00:00",
            "2026-09-28T10:00:00Z\n",
            "2026-09-28T10:00Z",
        )
    ],
    _set(("finished_at",), 1, "`finished_at` must be a string"),
    _set(("finished_at",), "2026-09-28T09:59:59Z", "precedes"),
    # A difference below a microsecond: ``datetime`` would call these two equal.
    Case(
        "finished-before-started-by-100ns",
        lambda: {
            **_base(),
            "started_at": "2026-09-28T10:00:00.0000001Z",
            "finished_at": "2026-09-28T10:00:00Z",
        },
        "precedes",
        "finished_at",
    ),
    _set(("crs_decisions",), [], "`crs_decisions` has the wrong type"),
    _set(("crs_decisions", "zone"), 32, "`crs_decisions.zone` is neither a key section 3.7"),
    _set(("crs_decisions", "x-Acme:zone"), 32, "is neither a key section 3.7 defines"),
    Case(
        "crs_decisions-key-with-newline",
        _renamed(("crs_decisions",), "x-mapsmith:zone", "x-mapsmith:zone\n"),
        "is neither a key section 3.7 defines",
        "crs_decisions",
    ),
    _set(("crs_decisions", "analysis_crs"), 32632, "`crs_decisions.analysis_crs` must be a string"),
    _set(("crs_decisions", "reason"), None, "`crs_decisions.reason` must be a string"),
    *[
        _set(("crs_decisions", key), 4326, f"`crs_decisions.{key}` must be a string or null")
        for key in ("source_crs", "target_crs")
    ],
    *[_set(leg, "ballpark", f"`{_field(leg)}` has the wrong type") for leg in _LEGS],
    *[_set((*leg, "grid"), "x", f"`{_field(leg)}.grid` is neither") for leg in _LEGS],
    *[
        _set((*leg, key), bad, f"`{_field(leg)}.{key}` must be {expected}")
        for leg in _LEGS
        for key, bad, expected in (
            ("pipeline", 1, "a string or null"),
            ("accuracy_m", "1 m", "a number or null"),
            ("accuracy_m", True, "a number or null"),
            ("is_ballpark", None, "a boolean"),
            ("is_ballpark", 0, "a boolean"),
            ("better_available_m", "1", "a number or null"),
        )
    ],
    _set(("crs_decisions", "round_trip"), "both ways", "`crs_decisions.round_trip` has the wrong"),
    _set(("crs_decisions", "round_trip", "transformation"), _DELETE, "missing `transformation`"),
    _set(
        ("crs_decisions", "round_trip", "return_transformation"),
        _DELETE,
        "missing `return_transformation`",
    ),
    _set(
        ("crs_decisions", "round_trip", "legs_measured"),
        "both",
        "`crs_decisions.round_trip.legs_measured` is neither",
    ),
    Case(
        "round_trip-under-extension-name",
        _renamed(("crs_decisions",), "round_trip", "x-mapsmith:round_trip"),
        "under an extension name",
        "crs_decisions",
    ),
    Case(
        "round_trip-under-off-grammar-extension-name",
        _renamed(("crs_decisions",), "round_trip", "x-Acme Co:round_trip"),
        "under an extension name",
        "crs_decisions",
    ),
    _set(("notes",), "copied", "`notes` has the wrong type"),
    _set(("notes", 0), 1, "`notes[0]` must be a string"),
    _set(("repairs",), {}, "`repairs` has the wrong type"),
    _set(("repairs", 0), "fixed", "`repairs[0]` has the wrong type"),
    _set(("repairs", 0, "action"), _DELETE, "repairs[0].action"),
    _set(("repairs", 0, "round"), 1, "`repairs[0].round` is neither a key section 3.4 defines"),
    *[
        _set(("repairs", 0, key), 1, f"`repairs[0].{key}` must be a string or null")
        for key in ("action", "check", "error")
    ],
    _set(("repairs", 0, "resolved"), "yes", "`repairs[0].resolved` must be a boolean"),
    _set(("parameters_redacted",), "no", "`parameters_redacted` must be a boolean"),
    _set(("producer",), "mapsmith", "`producer` has the wrong type"),
    _set(("producer", "name"), 1, "`producer.name` must be a string"),
    _set(("producer", "version"), 1.0, "`producer.version` must be a string"),
    _set(("environment",), [], "`environment` has the wrong type"),
    _set(("environment", "PROJ_NETWORK"), False, "`environment.PROJ_NETWORK` must be a string"),
]


# Changes a conforming producer may make: both validators must still accept the record.
ACCEPTED: list[tuple[str, Callable[[], object]]] = [
    ("base", _base),
    ("spec-1-0-0", lambda: _mutated(("spec_version",), "1.0.0")),
    ("spec-older-draft", lambda: _mutated(("spec_version",), "1.0.0-draft.1")),
    ("spec-minor", lambda: _mutated(("spec_version",), "1.7.3-rc.1")),
    ("no-optional-fields", lambda: {k: v for k, v in _base().items() if k in _REQUIRED}),
    ("generator", lambda: _mutated(("inputs",), [])),
    ("parameters-empty", lambda: _mutated(("parameters",), {})),
    *[
        (f"input-{key}-null", lambda key=key: _mutated(("inputs", 0, key), None))
        for key in ("crs", "layer", "argument")
    ],
    ("input-unknown-key", lambda: _mutated(("inputs", 0, "anything"), [1, 2])),
    ("input-environment-empty", lambda: _mutated(("inputs", 0, "environment"), {})),
    ("output-crs-null", lambda: _mutated(("output", "crs"), None)),
    ("output-layer-null", lambda: _mutated(("output", "layer"), None)),
    ("output-absent", lambda: _mutated(("output",), _DELETE)),
    ("check-hint-null", lambda: _mutated(("verification", 0, "hint"), None)),
    ("check-argument-null", lambda: _mutated(("verification", 0, "argument"), None)),
    ("check-unknown-key", lambda: _mutated(("verification", 0, "anything"), 1)),
    ("name-x-digits", lambda: _mutated(("verification", 0, "name"), "x-0:0")),
    ("name-x-hyphen", lambda: _mutated(("verification", 0, "name"), "x-some-vendor:a_b")),
    ("same-instant", lambda: _mutated(("finished_at",), "2026-09-28T10:00:00.125Z")),
    ("same-instant-more-digits", lambda: _mutated(("finished_at",), "2026-09-28T10:00:00.1250Z")),
    (
        "leap-second",
        lambda: {
            **_base(),
            "started_at": "2016-12-31T23:59:60Z",
            "finished_at": "2017-01-01T00:00:00Z",
        },
    ),
    ("decisions-empty", lambda: _mutated(("crs_decisions",), {})),
    ("decision-extension-any-type", lambda: _mutated(("crs_decisions", "x-a:b"), [None, {}])),
    ("source-crs-null", lambda: _mutated(("crs_decisions", "source_crs"), None)),
    ("pipeline-null", lambda: _mutated(("crs_decisions", "transformation", "pipeline"), None)),
    ("accuracy-null", lambda: _mutated(("crs_decisions", "transformation", "accuracy_m"), None)),
    ("accuracy-int", lambda: _mutated(("crs_decisions", "transformation", "accuracy_m"), 7)),
    ("better-m", lambda: _mutated(("crs_decisions", "transformation", "better_available_m"), 1.5)),
    ("repair-action-null", lambda: _mutated(("repairs", 0, "action"), None)),
    ("repair-extension-key", lambda: _mutated(("repairs", 0, "x-acme:round"), 2)),
    ("repair-only-action", lambda: _mutated(("repairs",), [{"action": None}])),
    ("notes-empty", lambda: _mutated(("notes",), [])),
    ("producer-empty", lambda: _mutated(("producer",), {})),
    ("environment-empty", lambda: _mutated(("environment",), {})),
    ("unknown-top-level", lambda: _mutated(("mapsmith_version",), {"any": [1]})),
]


@pytest.mark.parametrize("case", REJECTED, ids=[case.id for case in REJECTED])
def test_mutation_is_rejected_by_both_validators(case: Case) -> None:
    record = case.make()
    reasons = validate_manifest(record)
    assert any(case.fragment in reason for reason in reasons), (case.fragment, reasons)
    assert schema_errors(record), "the schema route accepted what the hand-written one rejects"


def _declared_fields(schema: dict[str, Any], root: dict[str, Any], prefix: str) -> set[str]:
    if "$ref" in schema:  # the only references in this schema are local JSON pointers
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
    fields: set[str] = set()
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        fields |= {path} | _declared_fields(sub, root, path)
    if isinstance(schema.get("items"), dict):
        fields |= {f"{prefix}[]"} | _declared_fields(schema["items"], root, f"{prefix}[]")
    return fields


def test_every_field_the_schema_declares_has_a_rejecting_mutation() -> None:
    # The spec's own discipline (section 4): mutate every declared field, require both to reject.
    schema = load_schema()
    declared = _declared_fields(schema, schema, "")
    assert "crs_decisions.round_trip.return_transformation.better_available_m" in declared
    assert declared - {case.field for case in REJECTED} == set()


@pytest.mark.parametrize("make", [m for _, m in ACCEPTED], ids=[i for i, _ in ACCEPTED])
def test_permitted_change_is_accepted_by_both_validators(make: Callable[[], object]) -> None:
    record = make()
    assert validate_manifest(record) == []
    assert schema_errors(record) == []


def test_reasons_name_a_key_ending_in_a_line_break_visibly() -> None:
    record = _renamed(("crs_decisions",), "x-mapsmith:zone", "x-mapsmith:zone\n")()
    (reason,) = validate_manifest(record)
    assert '`crs_decisions["x-mapsmith:zone\\n"]`' in reason


def test_every_problem_is_reported_not_only_the_first() -> None:
    record = _base()
    record["inputs"][0]["sha256"] = "A" * 64
    record["output"]["path"] = "out\\x.gpkg"
    del record["parameters"]
    assert len(validate_manifest(record)) == 3
