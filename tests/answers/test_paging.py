"""Answers that list rows page: offset/limit in, the page and the total out, the same way everywhere.

A 25-feature layer of 100 m x 100 m squares in EPSG:3035 (an ellipsoidal equal-area projection),
ids 1..25: every planar area is 10,000 m2, the total 250,000 m2. Dissolved by id % 3 the groups are
0 (ids 3, 6 ... 24: 8 features), 1 (ids 1, 4 ... 25: 9) and 2 (ids 2, 5 ... 23: 8).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import box

from layers import write_layer
from mapsmith import paging
from mapsmith.errors import MapSmithError

IDS = list(range(1, 26))


@pytest.fixture
def squares(workspace: Path) -> str:
    # 4321000 E, 3210000 N lies in central Europe, inside EPSG:3035's area of use
    geoms = [box(4321000 + 200 * i, 3210000, 4321100 + 200 * i, 3210100) for i in range(25)]
    write_layer(workspace / "squares.gpkg", geoms, "EPSG:3035", id=IDS, key=[i % 3 for i in IDS])
    return "squares.gpkg"


def measure(app, squares: str, out: str, **page: int) -> dict:
    arguments = {"input_path": squares, "method": "planar", "output_path": out, **page}
    return app.run("measure_area", arguments).answer


def test_measure_area_pages_its_rows(app, squares: str) -> None:
    first = measure(app, squares, "a.gpkg", limit=10)
    assert [r["id"] for r in first["rows"]] == list(range(1, 11))
    assert first["rows"][0]["area_m2"] == pytest.approx(10_000.0, rel=1e-9)
    assert first["page"] == {
        "offset": 0,
        "limit": 10,
        "returned": 10,
        "total": 25,
        "complete": False,
        "next_offset": 10,
    }
    assert first["total_area_m2"] == pytest.approx(250_000.0, rel=1e-9)  # always every feature, whatever the page

    last = measure(app, squares, "b.gpkg", offset=20, limit=10)
    assert [r["id"] for r in last["rows"]] == [21, 22, 23, 24, 25]
    assert last["page"] == {
        "offset": 20,
        "limit": 10,
        "returned": 5,
        "total": 25,
        "complete": True,
        "next_offset": None,
    }

    past = measure(app, squares, "c.gpkg", offset=30, limit=5)
    assert past["rows"] == [] and past["page"]["total"] == 25 and past["page"]["returned"] == 0


def test_the_default_page_holds_the_first_hundred(app, squares: str) -> None:
    answer = measure(app, squares, "d.gpkg")
    assert len(answer["rows"]) == 25
    assert answer["page"]["limit"] == paging.DEFAULT_LIMIT == 100 and answer["page"]["complete"] is True


def test_dissolve_groups_page_with_their_own_feature_counts(app, squares: str) -> None:
    arguments = {"input_path": squares, "by_fields": "key", "output_path": "groups.gpkg"}
    whole = app.run("dissolve_layer", arguments).answer
    assert [(g["key"], g["feature_count"]) for g in whole["groups"]] == [(0, 8), (1, 9), (2, 8)]
    one = app.run("dissolve_layer", {**arguments, "output_path": "g2.gpkg", "offset": 1, "limit": 1}).answer
    # the second group, with its own count (not the first group's)
    assert [(g["key"], g["feature_count"]) for g in one["groups"]] == [(1, 9)]
    assert one["page"]["total"] == 3 and one["page"]["next_offset"] == 2
    assert one["group_count"] == 3


def test_describe_dataset_pages_its_field_details(app, squares: str) -> None:
    answer = app.run("describe_dataset", {"input_path": squares, "offset": 1, "limit": 1}).answer
    layer = answer["described"][0]
    assert layer["fields"] == ["id", "key"]  # the names are always all there
    assert [f["name"] for f in layer["field_details"]] == ["key"]
    assert layer["field_details"][0]["null_count"] == 0 and layer["field_details"][0]["samples"] == [1, 2, 0]
    assert layer["field_details_page"]["total"] == 2 and layer["field_details_page"]["complete"] is True


@pytest.mark.parametrize("page", [{"limit": 0}, {"limit": 1001}, {"offset": -1}])
def test_a_page_out_of_range_is_refused(app, squares: str, page: dict) -> None:
    with pytest.raises(MapSmithError) as err:
        measure(app, squares, "e.gpkg", **page)
    assert list(page)[0] in str(err.value.evidence) + err.value.message


def test_the_helper_refuses_what_a_contract_did_not_check() -> None:
    with pytest.raises(MapSmithError) as err:
        paging.page([1, 2, 3], {"limit": True})
    assert err.value.code == "PAGE_INVALID"
    rows, window = paging.page(list("abcde"), {"offset": 2, "limit": 2})
    assert rows == ["c", "d"] and window["next_offset"] == 4
