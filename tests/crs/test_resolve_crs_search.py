"""resolve_crs on descriptions that are a CRS's name, alias or country rather than a zone phrase.

Expected codes are worked out in each test from PROJ's own database (pyproj.database and the
alias_name table of pyproj's proj.db, read-only), never written down as a guess.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyproj
from pyproj.database import query_crs_info
from pyproj.enums import PJType


def resolve(app, description: str) -> dict:
    return app.run("resolve_crs", {"description": description}).answer


def _aliases_of(code: int) -> set[str]:
    path = Path(pyproj.datadir.get_data_dir().split(":")[0]) / "proj.db"
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT alt_name FROM alias_name WHERE auth_name = 'EPSG' AND code = ? AND table_name = 'projected_crs'",
            (str(code),),
        ).fetchall()
    finally:
        db.close()
    return {r[0] for r in rows}


def test_rgf93_lambert_93_is_epsg_2154_by_its_alias(app) -> None:
    # proj.db: EPSG:2154 is named "RGF93 v1 / Lambert-93" and aliased "RGF93 / Lambert-93", whose
    # words (rgf, 93, lambert) are exactly the description's; RGF93 v2 / v2b carry one more word.
    assert "RGF93 / Lambert-93" in _aliases_of(2154)
    answer = resolve(app, "RGF93 Lambert 93")
    assert answer["status"] == "resolved"
    assert answer["code"] == "EPSG:2154" and answer["epsg"] == 2154
    assert answer["parsed"]["matched_name"] == "RGF93 / Lambert-93"
    assert answer["area_of_use"]["name"].startswith("France")
    # The realisations that also carry every word are named, with their areas, not hidden.
    also = {c["code"] for c in answer["also_matching"]}
    assert {"EPSG:9793", "EPSG:9794"} <= also  # RGF93 v2 / Lambert-93, RGF93 v2b / Lambert-93
    assert all(c["area_of_use"]["name"] for c in answer["also_matching"])


def test_egypt_national_grid_lists_the_egyptian_grids_with_their_areas(app) -> None:
    # By hand from the database: every current EPSG projected CRS whose area of use is in Egypt
    # (the area's name starts with the country), e.g. 22992 "Egypt 1907 / Red Belt".
    egyptian = {
        int(i.code)
        for i in query_crs_info(auth_name="EPSG", pj_types=PJType.PROJECTED_CRS, allow_deprecated=False)
        if i.area_of_use.name.split(" - ")[0] == "Egypt"
    }
    assert {22991, 22992, 22993, 22994} <= egyptian
    answer = resolve(app, "Egypt national grid")
    assert answer["status"] == "needs_clarification"
    codes = [c["epsg"] for c in answer["candidates"]]
    assert egyptian <= set(codes)
    # "grid" asks for a projected CRS: the Egyptian grids come before Egypt's geographic CRSs.
    kinds = [c["kind"] for c in answer["candidates"]]
    assert kinds[: len(egyptian)] == ["projected"] * len(egyptian)
    for c in answer["candidates"]:
        assert c["area_of_use"]["name"] and len(c["area_of_use"]["bounds"]) == 4
    assert "areas of use" in answer["hint"]


def test_an_ambiguous_description_answers_every_candidate_with_its_area(app) -> None:
    # "Lambert 93" is the projection of RGF93 v1, v2 and v2b (France) and of ISN93 (Iceland,
    # "Lambert 1993"): by hand, the projected CRSs whose name or an alias has the words lambert and 93.
    answer = resolve(app, "Lambert 93")
    assert answer["status"] == "needs_clarification"
    codes = {c["epsg"] for c in answer["candidates"]}
    assert {2154, 9793, 9794, 3057} <= codes
    areas = {c["epsg"]: c["area_of_use"]["name"] for c in answer["candidates"]}
    assert areas[2154].startswith("France") and areas[3057].startswith("Iceland")
    assert answer["missing"] == ["which of the CRSs matching the description"]


def test_a_country_named_in_the_description_is_matched_by_area_of_use(app) -> None:
    # "France" is in no CRS name here; it is the country of 2154's area of use.
    answer = resolve(app, "Lambert 93 France")
    first = answer["candidates"][0]
    assert first["epsg"] == 2154 and first["matched_by_area_of_use"] == ["france"]
    assert all(c["area_of_use"]["name"].startswith("France") for c in answer["candidates"][:3])


def test_nonsense_is_not_found_with_a_hint(app) -> None:
    answer = resolve(app, "purple elephant xyzzy")
    assert answer["status"] == "not_found" and answer["candidates"] == []
    assert "check the spelling" in answer["hint"] and "EPSG:4528" in answer["hint"]


def test_zone_phrases_still_go_to_the_zone_reader(app) -> None:
    # Clean twin: a Gauss-Kruger phrase is answered as before, not by word search.
    answer = resolve(app, "CGCS2000 3-degree Gauss-Kruger zone 40")
    assert answer["status"] == "resolved" and answer["epsg"] == 4528
    assert answer["parsed"]["form"] == "description"
