"""Contracts are data, validated in CI, and the code keeps every promise they make."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from catalog_args import build_arguments
from mapsmith.contracts import contracts_root, load_builtin_contracts, parse_contract
from mapsmith.errors import ArgumentError, ContractError, GeometryTypeRefused

CONTRACTS = load_builtin_contracts()
FAMILIES = ("point", "line", "polygon")


def test_every_contract_file_validates_against_the_operation_schema() -> None:
    from jsonschema import Draft202012Validator

    root = contracts_root()
    schema = json.loads((root / "schemas" / "operation.schema.json").read_text("utf-8"))
    Draft202012Validator.check_schema(schema)
    files = sorted((root / "operations").glob("*.toml"))
    assert {f.stem for f in files} >= {
        "describe_dataset",
        "reproject_layer",
        "buffer_layer",
        "clip_layer",
        "measure_area",
        "convert_format",
        "extract_layer",
    }
    for path in files:
        data = tomllib.loads(path.read_text("utf-8"))
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(data)]
        assert not errors, f"{path.name}: {errors}"
        assert data["name"] == path.stem


def test_every_available_contract_has_an_opensource_implementation(app) -> None:
    for name, contract in app.host.contracts.items():
        if contract.status == "available":
            assert app.host.implementations_for(name, "opensource"), name


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_every_example_passes_argument_checking(name: str) -> None:
    contract = CONTRACTS[name]
    for example in contract.examples:
        checked = contract.check_arguments(example["arguments"])
        assert set(example["arguments"]) <= set(checked)


def test_argument_names_follow_the_house_rules() -> None:
    for contract in CONTRACTS.values():
        names = [d.name for d in contract.datasets]
        # the main input is input_path (input_paths when the operation takes a list)
        assert names[:1] in ([], ["input_path"], ["input_paths"]), contract.name
        assert all(n.endswith(("_path", "_paths")) for n in names)
        for p in contract.parameters:
            assert not p.name.endswith(("_m", "_km", "_ft")), f"{contract.name}.{p.name}: spell the unit out"


def test_unknown_argument_names_the_close_one_and_lists_the_accepted() -> None:
    with pytest.raises(ArgumentError) as err:
        CONTRACTS["buffer_layer"].check_arguments({"input_path": "a.gpkg", "distance_m": 5, "output_path": "b.gpkg"})
    assert err.value.code == "UNKNOWN_ARGUMENT"
    assert "did you mean 'distance_meters'" in err.value.message
    assert "distance_meters" in err.value.evidence["accepted"]


@pytest.mark.parametrize(
    ("arguments", "code", "fragment"),
    [
        ({"input_path": "a.gpkg", "output_path": "b.gpkg"}, "MISSING_ARGUMENT", "distance_meters"),
        ({"input_path": "a.gpkg", "distance_meters": True, "output_path": "b.gpkg"}, "WRONG_ARGUMENT_TYPE", "number"),
        ({"input_path": "a.gpkg", "distance_meters": "5", "output_path": "b.gpkg"}, "WRONG_ARGUMENT_TYPE", "number"),
        ({"input_path": "a.gpkg", "distance_meters": 0, "output_path": "b.gpkg"}, "ARGUMENT_OUT_OF_RANGE", "> 0"),
        ({"input_path": "a.gpkg", "distance_meters": 5}, "MISSING_ARGUMENT", "output_path"),
        (
            {"input_path": "a.gpkg", "distance_meters": 5, "output_path": "b.gpkg", "segments_per_quarter_circle": 1.5},
            "WRONG_ARGUMENT_TYPE",
            "integer",
        ),
        (
            {"input_path": "a.gpkg", "distance_meters": 5, "output_path": "b.gpkg", "segments_per_quarter_circle": 0},
            "ARGUMENT_OUT_OF_RANGE",
            ">= 1",
        ),
    ],
)
def test_bad_arguments_get_their_own_codes(arguments: dict, code: str, fragment: str) -> None:
    with pytest.raises(ArgumentError) as err:
        CONTRACTS["buffer_layer"].check_arguments(arguments)
    assert err.value.code == code
    assert fragment in err.value.message
    assert err.value.hint


def test_choices_are_checked_with_a_suggestion_and_defaults_applied() -> None:
    contract = CONTRACTS["measure_area"]
    with pytest.raises(ArgumentError) as err:
        contract.check_arguments({"input_path": "a.gpkg", "output_path": "b.gpkg", "method": "geodesc"})
    assert err.value.code == "ARGUMENT_NOT_IN_CHOICES" and "'geodesic'" in err.value.message
    checked = contract.check_arguments({"input_path": "a.gpkg", "output_path": "b.gpkg"})
    assert checked["method"] == "geodesic" and checked["overwrite"] is False


def test_a_unit_must_be_in_the_parameter_name() -> None:
    data = tomllib.loads((contracts_root() / "operations" / "buffer_layer.toml").read_text("utf-8"))
    data["parameters"][0]["name"] = "distance"
    with pytest.raises(ContractError) as err:
        parse_contract(data, source="test")
    assert "_meters" in err.value.message


def test_a_contract_failing_the_schema_is_refused_with_where() -> None:
    data = tomllib.loads((contracts_root() / "operations" / "clip_layer.toml").read_text("utf-8"))
    data["status"] = "maybe"
    with pytest.raises(ContractError) as err:
        parse_contract(data, source="test")
    assert "status" in err.value.message


def test_input_schema_is_derived_from_the_contract() -> None:
    schema = CONTRACTS["buffer_layer"].input_schema()
    assert schema["required"] == ["input_path", "distance_meters", "output_path"]
    assert schema["properties"]["distance_meters"]["exclusiveMinimum"] == 0
    assert "metre" in schema["properties"]["distance_meters"]["description"]
    assert schema["additionalProperties"] is False


REFUSALS = [
    (name, d.name, family)
    for name, contract in sorted(CONTRACTS.items())
    if contract.status == "available"
    for d in contract.datasets
    if d.geometry_types is not None
    for family in FAMILIES
    if family not in d.geometry_types
]


@pytest.mark.parametrize(("operation", "argument", "family"), REFUSALS)
def test_every_undeclared_geometry_type_is_refused(
    app, workspace: Path, operation: str, argument: str, family: str
) -> None:
    contract = app.host.contracts[operation]
    args = build_arguments(contract, workspace, override={argument: family})
    with pytest.raises(GeometryTypeRefused) as err:
        app.run(operation, args)
    assert err.value.evidence["argument"] == argument
    assert family in err.value.message
    assert not (workspace / "out.gpkg").exists()


def test_the_refusal_table_is_not_empty() -> None:
    # measure_area refuses points and lines; clip_layer's mask refuses points and lines.
    assert {(o, a) for o, a, _ in REFUSALS} >= {("measure_area", "input_path"), ("clip_layer", "mask_path")}


def test_contracts_ship_with_the_package() -> None:
    root = contracts_root()
    assert (root / "schemas" / "operation.schema.json").is_file()
    assert Path(root).name == "contracts"
