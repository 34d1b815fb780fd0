"""MapSmith's own operation before a QGIS algorithm doing the same job, each candidate naming its stack,
and discovery over QGIS's algorithms as built from QGIS's own help (the committed extract, so no QGIS is
needed here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mapsmith.catalog import index, search
from mapsmith.catalog.pairs import SAME_JOB, own_first, same_job_as, stack_of
from mapsmith.contracts import load_builtin_contracts, parse_contract
from mapsmith.workspace import Workspace

EXTRACT = Path(__file__).resolve().parents[2] / "tests" / "data" / "qgis_algorithms.json"


@pytest.fixture(autouse=True)
def fresh_index() -> Iterator[None]:
    index.INDEXES.clear()
    yield
    index.INDEXES.clear()


@pytest.fixture(scope="module")
def qgis_catalogue() -> dict[str, Any]:
    from mapsmith_qgis.algorithms import derive_catalogue

    derived = derive_catalogue(json.loads(EXTRACT.read_text(encoding="utf-8")))
    contracts = dict(load_builtin_contracts())
    for alg_id, imported in derived.items():
        contracts[imported["contract"]["name"]] = parse_contract(imported["contract"], f"extract:{alg_id}")
    return contracts


class _CatalogOnly:
    """What discover reads of a service; a class, since the discovery log keys services by weak reference."""

    def __init__(self, contracts: dict[str, Any]) -> None:
        self.host = SimpleNamespace(contracts=contracts)
        self.environ: dict[str, str] = {}
        self.workspace = Workspace.from_env({})


@pytest.fixture
def qgis_app(qgis_catalogue: dict[str, Any]) -> Any:
    return _CatalogOnly(qgis_catalogue)


def test_own_first_moves_our_operation_before_its_twin_only() -> None:
    ranked = ["qgis:native:buffer", "qgis:native:clip", "slope", "buffer_layer", "clip_layer"]
    assert own_first(ranked) == ["buffer_layer", "qgis:native:buffer", "clip_layer", "qgis:native:clip", "slope"]
    # clean twin: ours already first, or no twin present: nothing moves
    assert own_first(["buffer_layer", "qgis:native:buffer", "slope"]) == ["buffer_layer", "qgis:native:buffer", "slope"]
    assert own_first(["qgis:native:forcerhr", "slope"]) == ["qgis:native:forcerhr", "slope"]


def test_same_job_as_and_stack_of() -> None:
    present = frozenset({"buffer_layer", "qgis:native:buffer", "qgis:native:union"})
    assert same_job_as("buffer_layer", present) == ["qgis:native:buffer"]
    assert same_job_as("qgis:native:buffer", present) == ["buffer_layer"]
    assert same_job_as("qgis:native:union", present) == []  # overlay_layers is not delivered
    assert stack_of("qgis:native:buffer") == "qgis" and stack_of("buffer_layer") == "mapsmith"


def test_every_pair_names_real_entries() -> None:
    ours = load_builtin_contracts()
    algorithms = {f"qgis:{a}" for a in json.loads(EXTRACT.read_text(encoding="utf-8"))["algorithms"]}
    for own, twins in SAME_JOB.items():
        assert own in ours, own
        assert set(twins) <= algorithms, sorted(set(twins) - algorithms)


def test_with_qgis_our_buffer_comes_first_and_both_say_which_is_which(qgis_app: Any) -> None:
    answer = search.discover(qgis_app, "buffer the rivers by 100 metres")
    names = [c["operation"] for c in answer["candidates"]]
    assert names[0] == "buffer_layer"
    first = answer["candidates"][0]
    assert first["stack"] == "mapsmith" and first["same_job_as"] == ["qgis:native:buffer"]
    twin = next(c for c in answer["candidates"] if c["operation"] == "qgis:native:buffer")
    assert twin["stack"] == "qgis" and twin["same_job_as"] == ["buffer_layer"]
    assert names.index("qgis:native:buffer") > 0


def test_qgis_entries_carry_qgis_own_help(qgis_catalogue: dict[str, Any]) -> None:
    buffer = qgis_catalogue["qgis:native:buffer"]
    # the first sentence of QGIS 3.22's shortHelpString for native:buffer
    assert buffer.summary == (
        "QGIS Buffer (Vector geometry): This algorithm computes a buffer area for all the features in an input "
        "layer, using a fixed or dynamic distance."
    )
    assert buffer.distinguishes.startswith("This algorithm computes a buffer area")
    assert {"grow", "distance"} <= set(buffer.keywords)


def test_with_qgis_a_qgis_only_job_is_found_by_its_help(qgis_app: Any) -> None:
    # No MapSmith operation makes Voronoi polygons; QGIS's help says qgis:voronoipolygons does.
    answer = search.discover(qgis_app, "voronoi polygons around the rain gauges")
    assert answer["candidates"][0]["operation"] == "qgis:qgis:voronoipolygons"
    assert answer["candidates"][0]["stack"] == "qgis"


def test_with_qgis_an_algorithm_first_on_both_rankers_stays_first(qgis_app: Any) -> None:
    # qgis:native:creategrid is first on both rankers, our operations behind it: the own prior must not lift one above
    # it (at OWN_PRIOR 0.35 rasterize_layer, second on the vector ranker and third on BM25 before the prior, came first
    # on the vector ranker and in the fusion)
    for engine in ("lexical", "vector", "auto"):
        answer = search.discover(qgis_app, "hexagon grid over the country", engine=engine)
        assert answer["candidates"][0]["operation"] == "qgis:native:creategrid", engine
        assert answer["candidates"][1]["stack"] == "mapsmith", engine


def test_with_qgis_gdal_dissolve_does_not_outrank_our_dissolve(qgis_app: Any) -> None:
    # qgis:gdal:dissolve and qgis:native:dissolve both do dissolve_layer's job: ours comes first, named as such
    answer = search.discover(qgis_app, "dissolve the parcels by owner")
    names = [c["operation"] for c in answer["candidates"]]
    assert names[0] == "dissolve_layer"
    assert set(answer["candidates"][0]["same_job_as"]) <= {"qgis:native:dissolve", "qgis:gdal:dissolve"}
    assert answer["candidates"][0]["same_job_as"]


def test_same_job_as_names_only_delivered_twins(qgis_app: Any) -> None:
    # slope's twins are in the catalogue but not among a buffer query's delivered candidates: not named
    answer = search.discover(qgis_app, "buffer the rivers by 100 metres")
    delivered = {c["operation"] for c in answer["candidates"]}
    for c in answer["candidates"]:
        assert set(c.get("same_job_as", [])) <= delivered


def test_a_qgis_algorithm_that_returns_no_value_declares_what_it_does_instead(qgis_catalogue: dict[str, Any]) -> None:
    from mapsmith.catalog.facets import entry_facets, filter_entries

    answer_kind = {n: c for n, c in qgis_catalogue.items() if n.startswith("qgis:") and c.output_kind == "answer"}
    # In QGIS 3.22's extract 38 algorithms write no layer or file; 4 of them return values (numbers, strings)
    returns_values = {n for n, c in answer_kind.items() if c.output_effect is None}
    assert len(answer_kind) == 38
    assert returns_values == {
        "qgis:native:layertobookmarks",
        "qgis:native:rasterlayerproperties",
        "qgis:native:shpencodinginfo",
        "qgis:native:stringconcatenation",
    }
    assert qgis_catalogue["qgis:native:createspatialindex"].output_effect == (
        "QGIS returns no value for this algorithm, only Indexed layer (outputVector): layers, files or folders it "
        "writes or changes."
    )
    assert qgis_catalogue["qgis:qgis:importintopostgis"].output_effect.startswith("QGIS returns no value")
    # discovery: an answer is asked for -> the ones returning values stay, the others go; asked for nothing, all stay
    facets = [entry_facets(answer_kind[n]) for n in sorted(answer_kind)]
    kept, removed_by = filter_entries(facets, produces="answer")
    assert {e.name for e in kept} == returns_values and len(removed_by["produces"]["removed"]) == 34
    kept, _ = filter_entries(facets)
    assert len(kept) == 38
    assert entry_facets(qgis_catalogue["qgis:native:createspatialindex"]).produces == "effect"
