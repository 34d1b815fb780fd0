"""An experimental operation is ranked after the stable ones doing its job, still ranks when it is the only
match, and every candidate says its maturity (``mapsmith.catalog.maturity``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from mapsmith.catalog import index
from mapsmith.catalog.facets import EntryFacets
from mapsmith.catalog.maturity import maturity_of, signatures, stable_first
from mapsmith.catalog.search import discover
from mapsmith.contracts import load_builtin_contracts
from mapsmith.workspace import Workspace


@pytest.fixture(autouse=True)
def fresh_index() -> Iterator[None]:
    index.INDEXES.clear()
    yield
    index.INDEXES.clear()


class _CatalogOnly:
    def __init__(self, contracts: dict[str, Any]) -> None:
        self.host = SimpleNamespace(contracts=contracts)
        self.environ: dict[str, str] = {}
        self.workspace = Workspace.from_env({})


def _with_experimental(name: str, like: str, **changes: Any) -> dict[str, Any]:
    """The built-in catalogue plus a synthetic experimental copy of ``like`` (its facets and text) under ``name``."""
    contracts = dict(load_builtin_contracts())
    contracts[name] = dataclasses.replace(contracts[like], name=name, maturity="experimental", **changes)
    return contracts


def _facets(name: str, produces: str, holds: set[str]) -> EntryFacets:
    return EntryFacets(name, frozenset(holds), produces, (1, 1), None, "vector" in holds, False, "vector", "available")


def test_stable_first_by_hand() -> None:
    facets = {
        "exp_buffer": _facets("exp_buffer", "dataset:vector", {"vector", "dataset"}),
        "buffer": _facets("buffer", "dataset:vector", {"vector", "dataset"}),
        "slope": _facets("slope", "dataset:raster", {"raster", "dataset"}),
        "clip": _facets("clip", "dataset:vector", {"vector", "dataset"}),
        "unmatched": _facets("unmatched", "dataset:vector", {"vector", "dataset"}),
    }
    maturity = dict.fromkeys(facets, "stable") | {"exp_buffer": "experimental"}
    scores = {"exp_buffer": 3.0, "slope": 2.9, "buffer": 0.5, "clip": 2.0, "unmatched": 0.0}
    sig = {
        "exp_buffer": frozenset({"distance_meters"}),
        "buffer": frozenset({"distance_meters"}),
        "slope": frozenset({"distance_meters"}),  # the same arguments, another job (it writes a raster)
        "clip": frozenset({"mask_path"}),  # the same facets, other arguments
        "unmatched": frozenset({"distance_meters"}),  # a twin the request did not match at all
    }
    order = ["exp_buffer", "slope", "clip", "buffer", "unmatched"]
    # exp_buffer moves to just after "buffer", its only matched twin
    assert stable_first(order, maturity, facets, scores, sig) == ["slope", "clip", "buffer", "exp_buffer", "unmatched"]
    # clean twin: without buffer's arguments it is nobody's twin and keeps its place
    assert stable_first(order, maturity, facets, scores, {**sig, "buffer": frozenset({"width"})}) == order
    # an entry with no argument of its own (empty signature) is nobody's twin either
    assert stable_first(order, maturity, facets, scores, {**sig, "exp_buffer": frozenset()}) == order


def test_signatures_leave_out_what_a_quarter_of_the_catalogue_takes() -> None:
    p = lambda *names: SimpleNamespace(parameters=[SimpleNamespace(name=n) for n in names])  # noqa: E731
    # 5 entries: "layer" is taken by 2 > 0.25 * 5 = 1.25, so it is generic; "method" by 1, kept
    contracts = {"a": p("layer", "method"), "b": p("layer"), "c": p(), "d": p(), "e": p()}
    assert signatures(contracts) == {
        "a": frozenset({"method"}),
        "b": frozenset(),
        "c": frozenset(),
        "d": frozenset(),
        "e": frozenset(),
    }


def test_an_experimental_twin_ranks_after_the_stable_operation() -> None:
    # the copy has buffer_layer's own text, so the rankers score it as high; it must still come after buffer_layer
    contracts = _with_experimental("buffer_zones_x", "buffer_layer")
    answer = discover(_CatalogOnly(contracts), "buffer the schools by 500 metres")
    names = [c["operation"] for c in answer["candidates"]]
    assert names.index("buffer_layer") < names.index("buffer_zones_x")
    by_name = {c["operation"]: c for c in answer["candidates"]}
    assert by_name["buffer_zones_x"]["maturity"] == "experimental"
    assert by_name["buffer_layer"]["maturity"] == "stable"
    assert all(c["maturity"] in ("stable", "experimental") for c in answer["candidates"])


def test_clean_twin_an_experimental_operation_that_is_the_only_match_still_ranks_first() -> None:
    # A job no stable operation does: counting the vertices of each feature. Only the synthetic entry says so.
    contracts = _with_experimental(
        "count_vertices_x",
        "measure_length",
        summary="Count the vertices of each feature into a vertex_count field.",
        distinguishes="Counts vertices; nothing else in the catalogue counts vertices.",
        keywords=("vertex count", "vertices", "tally of vertices"),
        parameters=(),  # its own arguments: none of measure_length's, so it is no twin of measure_length by them
    )
    for engine in ("lexical", "auto"):
        answer = discover(_CatalogOnly(contracts), "tally of vertices in every feature", engine=engine)
        assert answer["candidates"][0]["operation"] == "count_vertices_x", engine
        assert answer["candidates"][0]["maturity"] == "experimental"
        # the next stable entry is no near tie: 0.8 of the experimental entry's score is more than it has
        first, second = answer["candidates"][:2]
        assert second["maturity"] == "stable" and second["score"] < 0.8 * first["score"]


def test_maturity_defaults_to_stable_where_the_host_set_none() -> None:
    assert maturity_of(SimpleNamespace()) == "stable"
    assert maturity_of(SimpleNamespace(maturity="experimental")) == "experimental"
    assert all(maturity_of(c) == "stable" for c in load_builtin_contracts().values())
