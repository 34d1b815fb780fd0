"""Facets of synthetic contracts: arity, geometry, CRS, holds, and what removed_by reports."""

from __future__ import annotations

from typing import Any

import pytest

from mapsmith.catalog.facets import EntryFacets, entry_facets, filter_entries, normalise_filter
from mapsmith.contracts import parse_contract
from mapsmith.errors import ArgumentError


def _contract(
    name: str, datasets: list[dict[str, Any]], output: str | dict[str, Any] = "dataset:vector", **extra: Any
) -> EntryFacets:
    data: dict[str, Any] = {
        "name": name,
        "summary": f"Synthetic {name}.",
        "category": extra.pop("category", "other"),
        "status": "available",
        "distinguishes": f"Only {name}.",
        "crs_effect": "none",
        "needs_projected_crs": extra.pop("needs_projected_crs", False),
        "checks": [],
        "datasets": datasets,
        "output": output
        if isinstance(output, dict)
        else {"kind": output, **({"argument": "output_path"} if output.startswith("dataset:") else {})},
        "examples": [{"description": "x", "arguments": {}}],
        **extra,
    }
    return entry_facets(parse_contract(data, f"<{name}>"))


def _ds(name: str, kind: str = "vector", **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "description": f"the {name}", **extra}


ONE_POLYGON = _contract("one_polygon", [_ds("input_path", geometry_types=["polygon"])])
POINTS_IN_POLYGONS = _contract(
    "points_in_polygons", [_ds("input_path", geometry_types=["polygon"]), _ds("points_path", geometry_types=["point"])]
)
MANY = _contract("many", [_ds("input_paths", multiple=True)])
MANY_FROM_TWO = _contract("many_from_two", [_ds("input_paths", multiple=True, min_count=2)])
OPTIONAL_MASK = _contract("optional_mask", [_ds("input_path", "raster"), _ds("mask_path", required=False)])
NO_DATA = _contract("no_data", [], output="answer")
ANY_KIND = _contract("any_kind", [_ds("input_path", "any")], output="description")
PROJECTED = _contract("projected", [_ds("input_path", "raster")], output="dataset:raster", needs_projected_crs=True)
TABLE = _contract("with_table", [_ds("input_path"), _ds("table_path", "table")])
ENTRIES = [ONE_POLYGON, POINTS_IN_POLYGONS, MANY, MANY_FROM_TWO, OPTIONAL_MASK, NO_DATA, ANY_KIND, PROJECTED, TABLE]


def _names(**facets: Any) -> list[str]:
    remaining, _ = filter_entries(ENTRIES, **facets)
    return sorted(e.name for e in remaining)


def test_declared_facets_are_derived_from_dataset_arguments() -> None:
    assert POINTS_IN_POLYGONS.dataset_count == (2, 2)
    assert POINTS_IN_POLYGONS.geometry_types == {"point", "polygon"}
    assert MANY.dataset_count == (1, None)
    assert MANY_FROM_TWO.dataset_count == (2, None)
    assert OPTIONAL_MASK.dataset_count == (1, 2)
    assert OPTIONAL_MASK.holds == {"raster", "vector", "dataset"}
    assert NO_DATA.dataset_count == (0, 0) and NO_DATA.holds == {"none"}
    assert ANY_KIND.holds == {"vector", "raster", "table", "dataset"} and ANY_KIND.geometry_types is None
    assert MANY.geometry_types is None  # no geometry declared: any
    assert ONE_POLYGON.to_dict()["dataset_count"] == {"min": 1, "max": 1}


@pytest.mark.parametrize("count", [1, 2, 3, 7, 250])
def test_variable_arity_matches_any_count(count: int) -> None:
    assert "many" in _names(dataset_count=count)


def test_variable_arity_still_respects_its_minimum() -> None:
    assert "many_from_two" not in _names(dataset_count=1)
    assert "many_from_two" in _names(dataset_count=2) and "many_from_two" in _names(dataset_count=40)


def test_dataset_count_counts_required_and_optional_arguments() -> None:
    assert _names(dataset_count=0) == ["no_data"]
    assert {"optional_mask", "points_in_polygons", "with_table"} <= set(_names(dataset_count=2))
    assert "one_polygon" not in _names(dataset_count=2)
    assert "optional_mask" in _names(dataset_count=1)


def test_input_kind_keeps_entries_that_read_what_the_caller_holds() -> None:
    assert _names(input_kind="none") == ["no_data"]
    assert "any_kind" in _names(input_kind="raster") and "optional_mask" in _names(input_kind="vector")
    assert _names(input_kind="table") == ["any_kind", "with_table"]
    assert "no_data" not in _names(input_kind="dataset")
    assert _names(input_kind="any") == _names(input_kind="dataset")  # the old list_operations alias
    # several kinds held: an entry that reads any one of them is kept
    assert _names(input_kind=["raster", "none"]) == sorted([*_names(input_kind="raster"), "no_data"])
    assert _names(input_kind="plan") == []


def test_geometry_types_accept_what_describe_dataset_reports() -> None:
    assert _names(geometry_types=["MultiPolygon"]) == _names(geometry_types="polygon")
    points = _names(geometry_types="point")
    assert "one_polygon" not in points and "points_in_polygons" in points
    # an entry that reads no vector (or any geometry) is not judged by geometry
    assert {"projected", "no_data", "many", "any_kind"} <= set(points)


def test_projected_crs_false_removes_entries_that_need_one() -> None:
    assert "projected" not in _names(projected_crs=False)
    assert "projected" in _names(projected_crs=True)


def test_produces_keeps_an_entry_by_what_its_result_may_be() -> None:
    # ANY_KIND describes (output "description"): asked for an answer, it is kept; asked for a description, the
    # entries that answer otherwise are not
    assert _names(produces="answer") == ["any_kind", "no_data"]
    assert _names(produces="description") == ["any_kind"]
    # an optional output (the operation answers with its rows without output_path) produces an answer too ...
    rows = _contract("rows", [_ds("input_path")], output={"kind": "dataset:vector", "argument": "output_path"})
    optional = _contract(
        "rows_or_answer",
        [_ds("input_path")],
        output={"kind": "dataset:vector", "argument": "output_path", "optional": True},
    )
    assert (rows.also_produces, optional.also_produces) == (frozenset(), {"answer"})
    assert optional.to_dict()["also_produces"] == ["answer"] and "also_produces" not in rows.to_dict()
    kept, _ = filter_entries([rows, optional], produces="answer")
    assert [e.name for e in kept] == ["rows_or_answer"]
    # ... and is still kept for its dataset (the clean twin), never for another kind
    kept, _ = filter_entries([rows, optional], produces="dataset:vector")
    assert [e.name for e in kept] == ["rows", "rows_or_answer"]
    kept, removed_by = filter_entries([rows, optional], produces="dataset:raster")
    assert kept == [] and removed_by["produces"]["removed"] == ["rows", "rows_or_answer"]


def test_an_answer_that_holds_no_value_is_kept_for_no_produces() -> None:
    effect = _contract(
        "side_effect", [_ds("input_path")], output={"kind": "answer", "effect": "Writes into a database instead."}
    )
    assert effect.produces == "effect" and effect.to_dict()["produces"] == "effect"
    for wanted in ("answer", "description", "dataset:vector"):
        kept, removed_by = filter_entries([effect, NO_DATA], produces=wanted)
        assert "side_effect" in removed_by["produces"]["removed"]
    # with no produces declared it stays a candidate, as the same entry without the effect (the clean twin)
    kept, _ = filter_entries([effect, NO_DATA])
    assert sorted(e.name for e in kept) == ["no_data", "side_effect"]
    kept, _ = filter_entries([NO_DATA], produces="answer")
    assert [e.name for e in kept] == ["no_data"]


def test_category_filters_only_when_asked() -> None:
    remaining, removed_by = filter_entries(ENTRIES, category="other")
    assert len(remaining) == len(ENTRIES) and removed_by == {}
    tagged = [*ENTRIES, _contract("terrain_one", [_ds("input_path", "raster")], category="terrain")]
    remaining, removed_by = filter_entries(tagged, category="terrain", category_filter=True)
    assert [e.name for e in remaining] == ["terrain_one"]
    assert removed_by["category"]["would_remain_if_dropped"] == len(tagged)


def test_empty_result_says_which_facet_removed_what_and_what_each_would_leave() -> None:
    remaining, removed_by = filter_entries(ENTRIES, input_kind="none", produces="dataset:raster")
    assert remaining == []
    assert removed_by["input_kind"]["removed"] == sorted(e.name for e in ENTRIES if e.name != "no_data")
    assert removed_by["produces"]["removed"] == sorted(e.name for e in ENTRIES if e.name != "projected")
    # dropping input_kind leaves what produces alone keeps, and the other way round
    assert removed_by["input_kind"]["would_remain_if_dropped"] == 1
    assert removed_by["input_kind"]["only_by_this"] == ["projected"]
    assert removed_by["produces"]["would_remain_if_dropped"] == 1
    assert removed_by["produces"]["only_by_this"] == ["no_data"]


def test_three_facets_each_report_the_count_without_them() -> None:
    remaining, removed_by = filter_entries(
        ENTRIES, input_kind="vector", dataset_count=2, geometry_types="line", produces="dataset:vector"
    )
    names = {e.name for e in remaining}
    assert names == {"many", "many_from_two", "optional_mask", "with_table"}
    assert sorted(removed_by) == ["dataset_count", "geometry_types", "input_kind", "produces"]
    for facet, info in removed_by.items():
        declared = {"input_kind": "vector", "dataset_count": 2, "geometry_types": "line", "produces": "dataset:vector"}
        others = {k: v for k, v in declared.items() if k != facet}
        assert info["would_remain_if_dropped"] == len(filter_entries(ENTRIES, **others)[0]), facet


@pytest.mark.parametrize(
    ("facets", "argument"),
    [
        ({"input_kind": "vectr"}, "input_kind"),
        ({"input_kind": []}, "input_kind"),
        ({"produces": "dataset"}, "produces"),
        ({"dataset_count": -1}, "dataset_count"),
        ({"dataset_count": True}, "dataset_count"),
        ({"dataset_count": "2"}, "dataset_count"),
        ({"geometry_types": ["triangle"]}, "geometry_types"),
        ({"projected_crs": "yes"}, "projected_crs"),
        ({"category": "nosuch"}, "category"),
        ({"category_filter": True}, "category_filter"),
    ],
)
def test_invalid_facet_values_name_the_accepted_ones(facets: dict[str, Any], argument: str) -> None:
    with pytest.raises(ArgumentError) as err:
        normalise_filter(categories=["other", "terrain"], **facets)
    assert err.value.code == "INVALID_FILTER"
    assert err.value.evidence["argument"] == argument
    assert err.value.evidence["accepted"]
