"""The statuses issue 21 added: ``none`` (nothing in the catalogue supports the request), ``relaxed``
(``produces`` alone emptied what the caller's data allows), and ``unsure`` on real disagreement or thin support;
each with its clean twin, the same kind of request without the defect, answered as before."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mapsmith.app import MapSmith
from mapsmith.catalog import index, search, signals, support
from mapsmith.catalog.search import _disagree, discover, fuse

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_index() -> Iterator[None]:
    index.INDEXES.clear()
    yield
    index.INDEXES.clear()


def _names(answer: dict[str, Any]) -> list[str]:
    return [c["operation"] for c in answer["candidates"]]


# -- none ---------------------------------------------------------------------------------------------

# Written for this test, not taken from the calibration set: none of their words is in any entry's own
# vocabulary (checked below), and no entry passage is close in meaning.
OFF_TOPIC = [
    "wish my sister a happy birthday",
    "what should I wear to the wedding",
    "play some jazz in the kitchen",
    "tell me a joke about penguins",
]


@pytest.mark.parametrize("request_text", OFF_TOPIC)
def test_an_off_topic_request_is_answered_none_with_the_nearest_as_not_a_match(
    app: MapSmith, request_text: str
) -> None:
    idx = index.catalog_index(app.host.contracts)
    assert support.lexical_support(request_text, idx.vocabulary, len(idx.contracts)) == 0.0
    answer = discover(app, request_text)
    assert answer["status"] == "none"
    assert answer["candidates"] == [] and answer["count"] == 0
    nearest = answer["not_a_match"]
    assert len(nearest) == support.NOT_A_MATCH_SHOWN
    assert all(n["operation"] in app.host.contracts for n in nearest)
    assert "not a match" in answer["message"] and "list_operations" in answer["hint"]


def test_none_holds_under_facets_too(app: MapSmith) -> None:
    # facets narrow what is listed as not a match; they do not make an off-topic request answerable
    answer = discover(app, "play some jazz in the kitchen", input_kind="raster")
    assert answer["status"] == "none" and answer["candidates"] == []
    raster_readers = {n for n, c in app.host.contracts.items() if any(d.kind in ("raster", "any") for d in c.datasets)}
    assert {n["operation"] for n in answer["not_a_match"]} <= raster_readers


@pytest.mark.parametrize(
    ("request_text", "first"),
    [
        ("buffer the rivers by 100 metres", "buffer_layer"),
        ("steepness of the terrain in degrees", "slope"),
        ("the coastline has 400,000 vertices and the browser crashes", "simplify_layer"),
    ],
)
def test_clean_twin_a_gis_request_is_not_none(app: MapSmith, request_text: str, first: str) -> None:
    answer = discover(app, request_text)
    assert answer["status"] in ("ranked", "choose")
    assert "not_a_match" not in answer
    assert _names(answer)[0] == first


def test_an_empty_query_is_never_none(app: MapSmith) -> None:
    assert discover(app, "")["status"] == "ranked"


def test_none_needs_no_known_word_and_no_close_entry() -> None:
    assert support.is_unsupported(0.0, None) is True  # no known word, no vector ranker
    assert support.is_unsupported(0.4, None) is False  # a known word is never none
    assert support.is_unsupported(0.0, support.NONE_MAX_VECTOR_SUPPORT) is True
    assert support.is_unsupported(0.0, support.NONE_MAX_VECTOR_SUPPORT + 0.01) is False  # close in meaning
    assert support.is_unsupported(0.01, 0.0) is False  # however little the known word weighs


def test_bare_numbers_are_not_content_words(app: MapSmith) -> None:
    assert support.content_terms("7 19 301 64") == []
    assert support.content_terms("buffer by 250 m") == ["buffer", "m"]
    assert discover(app, "7 19 301 64")["status"] == "none"
    # clean twin: the same numbers in a request for a job the catalogue does
    answer = discover(app, "buffer the wells by 250 m")
    assert answer["status"] == "ranked" and _names(answer)[0] == "buffer_layer"


def test_lexical_support_sums_the_idf_of_known_words_once_each() -> None:
    # 4 entries; "buffer" is named by 1 of them, "river" by none: idf = ln((4 - 1 + 0.5) / (1 + 0.5) + 1)
    vocabulary = {"buffer": 1, "layer": 4}
    expected = 1.2039728043259361  # ln(3.5 / 1.5 + 1) = ln(10 / 3)
    assert support.lexical_support("buffer buffer the river", vocabulary, 4) == pytest.approx(expected)
    # a word every entry names still counts a little: ln(0.5 / 4.5 + 1)
    assert support.lexical_support("layer", vocabulary, 4) == pytest.approx(0.10536051565782628)
    assert support.lexical_support("river", vocabulary, 4) == 0.0


def test_coverage_is_the_share_of_the_request_the_catalogue_knows() -> None:
    vocabulary = {"buffer": 1, "layer": 4}
    # "my" is a stopword; "buffer" weighs idf(1) = ln(10 / 3), the unknown "email" idf(0) = ln(4.5 / 0.5 + 1)
    known, unknown = math.log(10 / 3), math.log(10)
    assert support.coverage("buffer my email", vocabulary, 4) == pytest.approx(known / (known + unknown))
    assert support.coverage("buffer the layer", vocabulary, 4) == 1.0
    assert support.coverage("email", vocabulary, 4) == 0.0
    assert support.coverage("the of and", vocabulary, 4) == 1.0  # no content word: nothing to judge


def test_thin_support_is_unsure_with_candidates_not_none(app: MapSmith) -> None:
    # The caller's own nouns (trees, parks) are in no catalogue's vocabulary; one known word (count) remains.
    # The rule of the first rounds (low lexical support or coverage) answered this none, though
    # count_in_polygons does it: thin support is answered unsure, with the right operation among the candidates.
    idx = index.catalog_index(app.host.contracts)
    assert 0 < support.lexical_support("count the trees in each park", idx.vocabulary, len(idx.contracts)) < 1
    answer = discover(app, "count the trees in each park")
    assert answer["status"] == "unsure" and answer["support"] == "weak"
    assert "count_in_polygons" in _names(answer)
    assert "little of this request is known" in answer["message"] and "describe_operation" in answer["hint"]
    # a fact about the data is evidence the score never saw: the status is the facets' own, with a note
    declared = discover(app, "count the trees in each park", input_kind="vector", dataset_count=2)
    assert declared["status"] == "choose" and declared["support"] == "weak"
    assert any("support: weak" in note for note in declared["notes"])
    assert "count_in_polygons" in _names(declared)
    # an empty answer (a strict listing a table cannot satisfy) has no candidate to doubt: no mark, no note
    empty = discover(app, "count the trees in each park", input_kind="table", produces="dataset:raster", relax=False)
    assert empty["status"] == "empty" and "support" not in empty and empty["notes"] == []


def _weak_score(app: MapSmith, text: str) -> float:
    idx = index.catalog_index(app.host.contracts)
    ranker, _ = idx.vector()
    found = signals.own_signals(idx, text, index.all_scores(ranker, text, [*idx.contracts, *idx.scope_docs]))
    assert found is not None
    return support.weak_support(found)


# Written for this test, not taken from the query files: a drive-time area (an isochrone, which needs a road
# network MapSmith does not have), asked by a caller who declares a layer of depots.
ISOCHRONE = "drive-time polygons around each depot within ten minutes"


def test_with_a_declared_fact_only_a_far_weaker_support_is_unsure(app: MapSmith) -> None:
    # A score above 0 but below the cut, with a fact declared, keeps the facets' status (the count test above);
    # a score above the cut is answered unsure, every remaining operation still listed, and the hint no longer
    # asks for facets the caller already declared.
    score = _weak_score(app, ISOCHRONE)
    assert score > support.WEAK_DECLARED_MIN > 0
    assert 0 < _weak_score(app, "count the trees in each park") < support.WEAK_DECLARED_MIN
    answer = discover(app, ISOCHRONE, input_kind="vector", dataset_count=1)
    assert answer["status"] == "unsure" and answer["support"] == "weak"
    assert answer["count"] == answer["remaining"] and answer["more"] == 0
    assert set(answer["guesses"]) == {"lexical", "vector"}
    assert "little of this request is known" in answer["message"]
    assert "declare input_kind" not in answer["hint"] and "search again" in answer["hint"]
    # nothing declared: the score above 0 is enough, and the hint asks for the facets
    bare = discover(app, ISOCHRONE)
    assert bare["status"] == "unsure" and "declare input_kind" in bare["hint"]
    # with a facet leaving 30 or fewer, the doubt still comes before "choose": produces is a wish, not a fact
    wished = discover(app, ISOCHRONE, produces="answer")
    assert wished["remaining"] <= search.CHOOSE_LIMIT and wished["status"] == "unsure"


def test_the_declared_cut_keeps_unsure_within_its_budget_and_no_lower_cut_does() -> None:
    # The committed weights and cut are what `python benchmarks/discovery_calibrate.py --weak` gives today. Counted
    # here by discover itself: with every facet declared, the calibration half's answerable requests answered unsure
    # are at most support.WEAK_DECLARED_UNSURE_SHARE of them at the cut, and over it 0.01 lower (the smallest cut).
    module = _calibrate_module()
    weights, bias, declared_min, _ = module.calibrate_weak()
    assert weights == pytest.approx(support.WEAK_WEIGHTS, abs=1e-6) and bias == pytest.approx(support.WEAK_BIAS)
    assert declared_min == support.WEAK_DECLARED_MIN
    data = module.load_queries()
    app = module.make_app()
    every = ("input_kind", "produces", "dataset_count", "geometry_types")
    half = [r for r in data["requests"] if module.in_calibration_half(r["id"])]
    assert support.WEAK_DECLARED_UNSURE_SHARE < 0.05  # the goal for unsure with every facet declared
    budget = int(support.WEAK_DECLARED_UNSURE_SHARE * len(half))
    assert budget == 4  # 4 % of the 114 requests of the calibration half, rounded down

    def unsure_at(cut: float) -> int:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(search, "WEAK_DECLARED_MIN", cut)
            answers = [
                discover(app, r["request"], **{k: r["facets"][k] for k in every if r["facets"][k] is not None})
                for r in half
            ]
        return sum(a["status"] == "unsure" for a in answers)

    assert unsure_at(support.WEAK_DECLARED_MIN) <= budget < unsure_at(round(support.WEAK_DECLARED_MIN - 0.01, 2))


def test_clean_twin_a_well_supported_request_is_ranked_without_a_support_mark(app: MapSmith) -> None:
    answer = discover(app, "count the points that fall inside each polygon")
    assert answer["status"] == "ranked" and "support" not in answer
    assert _names(answer)[0] == "count_in_polygons"


def test_weak_support_is_the_fitted_log_odds() -> None:
    signals = support.Signals(lexical=5.0, coverage=0.5, vector=0.6, vector_lead=-0.1, bm25=4.0, bm25_lead=-2.0)
    w = support.WEAK_WEIGHTS
    by_hand = (
        support.WEAK_BIAS
        + 5.0 * w["lexical"]
        + 0.5 * w["coverage"]
        + 0.6 * w["vector"]
        - 0.1 * w["vector_lead"]
        + 4.0 * w["bm25"]
        - 2.0 * w["bm25_lead"]
    )
    assert support.weak_support(signals) == pytest.approx(by_hand)
    assert set(w) == set(support.SIGNAL_NAMES)


def test_the_logistic_fit_is_a_stationary_point_of_its_penalised_likelihood() -> None:
    # Four points on a line, labels 0 0 1 1 with the middle two overlapping: a finite optimum. At it the gradient
    # of the penalised negative log-likelihood on the standardised column is zero, and symmetry puts the boundary
    # at x = 2.5 (bias = -2.5 * weight).
    import numpy as np

    module = _calibrate_module()
    x = np.array([[1.0], [2.0], [3.0], [4.0], [2.0], [3.0]])
    y = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    (weight,), bias = module.fit_logistic(x, y, l2=1.0)
    assert weight > 0
    assert bias == pytest.approx(-2.5 * weight, abs=1e-9)
    mean, scale = x.mean(), x.std()
    z = (x[:, 0] - mean) / scale
    wz, bz = weight * scale, bias + weight * mean
    p = 1 / (1 + np.exp(-(wz * z + bz)))
    assert float(z @ (p - y) + 1.0 * wz) == pytest.approx(0.0, abs=1e-9)
    assert float((p - y).sum()) == pytest.approx(0.0, abs=1e-9)


def _calibrate_module() -> Any:
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "mapsmith_discovery_calibrate", REPO / "benchmarks" / "discovery_calibrate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_none_thresholds_meet_the_goal_on_the_measured_requests() -> None:
    # Not an equality with a fresh calibration: every contract edit moves the optimum a little, and the
    # constants are re-calibrated by hand (python benchmarks/discovery_calibrate.py). What must hold is the
    # goal: under 2 % of the answerable texts (requests and contract examples) answered none, and the
    # off-topic ones actually caught.
    module = _calibrate_module()
    data = module.load_queries()
    app = module.make_app()
    answerable = [module.signals(app, text) for text in module.answerable_texts(data, app)]
    unanswerable = [module.signals(app, r["request"]) for r in data["unanswerable"]]
    assert len(unanswerable) >= 80 + 60
    wrong = [s for s in answerable if support.is_unsupported(*s)]  # lexical support, vector support
    caught = [s for s in unanswerable if support.is_unsupported(*s)]
    assert len(answerable) == len(set(module.answerable_texts(data, app)))
    assert len(wrong) / len(answerable) < 0.02, wrong
    # measured 17 of 149 with no known word and no close entry; the rest are out of scope (none) or unsure
    assert len(caught) >= 15, "the none threshold catches almost nothing: re-run the calibration"


# -- relaxed ------------------------------------------------------------------------------------------

# The caller holds a DEM and a trail line (2 datasets, one raster, lines) and guessed it wants a vector
# layer back. Every operation that takes that data and writes a vector layer: none (worked out from the
# contracts: elevation_profile answers rows, sample_raster_at_points wants points). produces alone
# empties the set, so it is relaxed and what the data allows is answered, each with what it produces.
TRAIL = {"input_kind": "raster", "dataset_count": 2, "geometry_types": ["line"]}


def test_a_produces_wish_that_alone_empties_the_answer_is_relaxed(app: MapSmith) -> None:
    answer = discover(app, "elevation profile along a trail", produces="dataset:vector", **TRAIL)
    assert answer["status"] == "relaxed"
    assert answer["relaxed"] == {"facet": "produces", "declared": ["dataset:vector"]}
    assert _names(answer)[0] == "elevation_profile"
    produced = {c["operation"]: c["produces"] for c in answer["candidates"]}
    assert produced["elevation_profile"] == "answer"
    assert "dataset:vector" not in produced.values()
    # removed_by still says what produces removed
    assert "elevation_profile" in answer["removed_by"]["produces"]["removed"]
    assert "relaxed" in answer["message"] and "produces" in answer["message"]


def test_clean_twin_the_right_produces_is_not_relaxed(app: MapSmith) -> None:
    answer = discover(app, "elevation profile along a trail", produces="answer", **TRAIL)
    assert answer["status"] == "choose"
    assert "relaxed" not in answer
    assert _names(answer)[0] == "elevation_profile"
    assert all("produces" not in c for c in answer["candidates"])


def test_facts_about_the_data_are_never_relaxed(app: MapSmith) -> None:
    # no operation takes a plan: dropping produces leaves nothing either, so the answer stays empty
    answer = discover(app, "check my processing plan", input_kind="plan", produces="answer")
    assert answer["status"] == "empty" and answer["candidates"] == []
    assert "relaxed" not in answer


# -- the fusion and unsure ----------------------------------------------------------------------------


def test_reciprocal_rank_fusion_by_hand() -> None:
    lexical = {"a": 3.0, "b": 2.0, "c": 1.0}  # ranks a 1, b 2, c 3
    vector = {"a": 0.0, "b": 5.0, "c": 1.0}  # ranks b 1, c 2, a 3
    # k = 1: a = 1/2 + 1/4 = 0.75, b = 1/3 + 1/2 = 0.833333333, c = 1/4 + 1/3 = 0.583333333
    assert fuse(lexical, vector, k=1, weights=(1.0, 1.0)) == {"a": 0.75, "b": 0.833333333, "c": 0.583333333}
    # lexical weighted 2: a = 2/2 + 1/4 = 1.25, b = 2/3 + 1/2 = 1.166666667, c = 2/4 + 1/3 = 0.833333333
    assert fuse(lexical, vector, k=1, weights=(2.0, 1.0)) == {"a": 1.25, "b": 1.166666667, "c": 0.833333333}


def _scores(order: str) -> dict[str, float]:
    # "abc..." -> a scores highest; every name of the alphabet below gets a positive score
    return {name: float(len(order) - i) for i, name in enumerate(order)}


def test_unsure_needs_disagreement_beyond_the_top_three() -> None:
    # top 3 disjoint and neither first choice within the other's top 8: unsure, showing both top 3
    assert _disagree(_scores("abcdefghijklmn"), _scores("lmnkjihgfedcba")) == {
        "lexical": ["a", "b", "c"],
        "vector": ["l", "m", "n"],
    }
    # clean twin: top 3 disjoint, but the lexical first choice "a" is the vector ranker's 4th: not unsure
    assert _disagree(_scores("abcdefghijklmn"), _scores("lmnabcdefghijk")) is None
    # a shared entry in the top 3: not unsure
    assert _disagree(_scores("abcdefghijklmn"), _scores("xyaz")) is None


def test_an_unknown_engine_lists_fusion(app: MapSmith) -> None:
    from mapsmith.errors import ArgumentError

    with pytest.raises(ArgumentError) as err:
        discover(app, "buffer", engine="neural")
    assert err.value.evidence["accepted"] == ["auto", "lexical", "vector", "fusion"]
    assert discover(app, "buffer the rivers", engine="fusion")["engine"] == "fusion"
    assert discover(app, "buffer the rivers")["engine"] == search.AUTO_ENGINE


def test_a_strict_listing_by_facets_is_never_relaxed(app: MapSmith) -> None:
    # MapSmith.list_operations filters strictly (no query): the elevation_profile wish above stays empty there
    assert app.list_operations(input_kind="none", output_kind="description") == []
    answer = discover(app, "elevation profile along a trail", produces="dataset:vector", relax=False, **TRAIL)
    assert answer["status"] == "empty" and "relaxed" not in answer
