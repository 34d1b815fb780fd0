"""Declared out-of-scope tasks (``mapsmith.catalog.scope``): a request for one is answered ``none`` naming the
task, the same kind of request for something MapSmith does is answered as before (the clean twin), and a task
a toolbox in the catalogue does (QGIS's geocoder, its shortest-path algorithms) is in scope when it is there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mapsmith.app import MapSmith
from mapsmith.catalog import index, support
from mapsmith.catalog.scope import OUT_OF_SCOPE, SCOPE_PREFIX, by_name, in_catalogue, scope_documents
from mapsmith.catalog.search import discover
from mapsmith.contracts import load_builtin_contracts, parse_contract
from mapsmith.workspace import Workspace

EXTRACT = Path(__file__).resolve().parents[2] / "tests" / "data" / "qgis_algorithms.json"


@pytest.fixture(autouse=True)
def fresh_index() -> Iterator[None]:
    index.INDEXES.clear()
    yield
    index.INDEXES.clear()


class _CatalogOnly:
    """What discover reads of a service; a class, since the discovery log keys services by weak reference."""

    def __init__(self, contracts: dict[str, Any]) -> None:
        self.host = SimpleNamespace(contracts=contracts)
        self.environ: dict[str, str] = {}
        self.workspace = Workspace.from_env({})


@pytest.fixture(scope="module")
def qgis_catalogue() -> dict[str, Any]:
    from mapsmith_qgis.algorithms import derive_catalogue

    derived = derive_catalogue(json.loads(EXTRACT.read_text(encoding="utf-8")))
    contracts = dict(load_builtin_contracts())
    for alg_id, imported in derived.items():
        contracts[imported["contract"]["name"]] = parse_contract(imported["contract"], f"extract:{alg_id}")
    return contracts


# Written for this test (not in tests/data/discovery_queries.json): each asks for one declared task.
OUT_OF_SCOPE_REQUESTS = [
    ("geocode the customer addresses into points", "geocoding"),
    ("plan the fastest delivery route between the depots along the roads", "routing"),
    ("drive-time isochrones of 10 minutes around each clinic", "service-areas"),
    ("print the map with a legend, scale bar and north arrow to PDF", "map-layout"),
    ("classify the satellite image into land cover classes from training samples", "image-classification"),
]


@pytest.mark.parametrize(("request_text", "task"), OUT_OF_SCOPE_REQUESTS)
def test_a_request_for_a_declared_gap_is_none_naming_it(app: MapSmith, request_text: str, task: str) -> None:
    answer = discover(app, request_text)
    assert answer["status"] == "none"
    assert answer["candidates"] == [] and answer["count"] == 0
    entry = by_name(SCOPE_PREFIX + task)
    assert answer["out_of_scope"] == {"task": task, "label": entry.label, "kind": "gis"}
    assert answer["message"].startswith(f"none: {entry.label} is not offered")
    nearest = [c["operation"] for c in answer["not_a_match"]]
    assert len(nearest) == support.NOT_A_MATCH_SHOWN and set(nearest) <= set(app.host.contracts)
    assert ", ".join(nearest) in answer["message"]
    assert "list_operations" in answer["hint"]
    # where a toolbox does the task, the hint says which stack and where MapSmith tells how to get it
    if entry.offered_by:
        assert answer["hint"].startswith("the qgis stack offers it: server_info says")
    else:
        assert "server_info" not in answer["hint"]


@pytest.mark.parametrize(
    ("request_text", "first"),
    [
        ("buffer the depots by 500 metres", "buffer_layer"),
        ("turn the spreadsheet of customer latitude and longitude columns into points", "table_to_points"),
        ("the drainage basin upstream of the gauging station", "watershed"),
    ],
)
def test_clean_twin_the_same_kind_of_request_for_an_offered_job_is_answered(
    app: MapSmith, request_text: str, first: str
) -> None:
    answer = discover(app, request_text)
    assert answer["status"] in ("ranked", "choose", "unsure")
    assert "out_of_scope" not in answer and "not_a_match" not in answer
    assert [c["operation"] for c in answer["candidates"]][0] == first


def test_a_task_a_toolbox_in_the_catalogue_does_is_in_scope(qgis_catalogue: dict[str, Any]) -> None:
    # QGIS's Nominatim geocoder is in this catalogue: geocoding is no longer a declared gap
    assert "qgis:native:batchnominatimgeocoder" in qgis_catalogue
    answer = discover(_CatalogOnly(qgis_catalogue), "geocode the customer addresses into points")
    assert answer.get("out_of_scope") is None
    assert answer["status"] != "none"
    assert "qgis:native:batchnominatimgeocoder" in [c["operation"] for c in answer["candidates"]]
    # ...while a gap QGIS does not fill either is still named
    answer = discover(
        _CatalogOnly(qgis_catalogue), "classify the satellite image into land cover classes from training samples"
    )
    assert answer["status"] == "none" and answer["out_of_scope"]["task"] == "image-classification"


def test_scope_documents_leave_out_what_the_catalogue_offers() -> None:
    everything = scope_documents([])
    assert len(everything) == len(OUT_OF_SCOPE)
    with_geocoder = scope_documents(["buffer_layer", "qgis:native:batchnominatimgeocoder"])
    assert set(everything) - set(with_geocoder) == {"scope::geocoding"}
    entry = by_name("scope::geocoding")
    assert everything["scope::geocoding"].splitlines() == [entry.label, *entry.lines]
    assert in_catalogue(entry, ["qgis:native:batchnominatimgeocoder"]) and not in_catalogue(entry, ["buffer_layer"])


def test_the_scope_list_names_no_operation_and_only_real_toolbox_entries(qgis_catalogue: dict[str, Any]) -> None:
    keys = [e.key for e in OUT_OF_SCOPE]
    assert len(keys) == len(set(keys))
    assert {e.family for e in OUT_OF_SCOPE} == {"gis", "software"}
    builtin = set(load_builtin_contracts())
    for entry in OUT_OF_SCOPE:
        assert entry.lines, entry.key
        assert not set(entry.offered_by) & builtin, f"{entry.key}: a built-in operation does it, so it is no gap"
        missing = set(entry.offered_by) - set(qgis_catalogue)
        assert not missing, f"{entry.key}: offered_by names entries QGIS does not register: {sorted(missing)}"


def test_out_of_scope_needs_both_leads_above_their_margins() -> None:
    lex, vec = support.SCOPE_MIN_LEXICAL_LEAD, support.SCOPE_MIN_VECTOR_LEAD
    assert support.out_of_scope(lex + 0.01, vec + 0.01) is True
    assert support.out_of_scope(lex, vec + 0.01) is False  # at the margin is not above it
    assert support.out_of_scope(lex + 0.01, vec) is False
    assert support.out_of_scope(lex + 10, None) is False  # without the vector ranker: never


def test_the_none_rules_together_meet_the_goal_on_the_measured_requests() -> None:
    # support (words the catalogue does not know) and scope (a declared gap) together: under 2 % of the answerable
    # requests answered none, on the whole query file and no contract example; and the gaps catch requests the
    # support signals let through on the held-out half the margins were not fitted on.
    import importlib.util
    import sys

    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "mapsmith_discovery_calibrate", repo / "benchmarks" / "discovery_calibrate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    data = module.load_queries()
    catalog = module.make_app()
    wrong = 0
    for r in data["requests"]:
        answer = discover(catalog, r["request"])
        wrong += answer["status"] == "none"
    assert wrong / len(data["requests"]) < 0.02, wrong
    for text in module.answerable_texts({"requests": []}, catalog):
        assert discover(catalog, text)["status"] != "none", text
    held_out = [r for r in data["unanswerable"] if not module.in_calibration_half(r["id"])]
    named = [r["id"] for r in held_out if discover(catalog, r["request"]).get("out_of_scope")]
    # measured 9 of 78 once the task had to lead on both rankers (support.SCOPE_MIN_VECTOR_LEAD's comment)
    assert len(named) >= 8, named
    # and on the held-out half alone, the answerable requests stay under the goal
    held_answerable = [r for r in data["requests"] if not module.in_calibration_half(r["id"])]
    held_wrong = [r["id"] for r in held_answerable if discover(catalog, r["request"])["status"] == "none"]
    assert len(held_wrong) / len(held_answerable) < 0.02, held_wrong
