"""discover() on the real catalog: statuses, facets, engines, planned entries, detail and the discovery log."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mapsmith.app import MapSmith
from mapsmith.catalog import index, search
from mapsmith.catalog.lexical import tokenize
from mapsmith.catalog.search import CHOOSE_LIMIT, RANKED_LIMIT, discover, record_next_operation
from mapsmith.errors import ArgumentError, MapSmithError
from mapsmith.hookspecs import hookimpl


@pytest.fixture(autouse=True)
def fresh_index() -> Iterator[None]:
    # The index caches the vector ranker's load; a test that fakes it must not leak into the next.
    index.INDEXES.clear()
    yield
    index.INDEXES.clear()


def _names(answer: dict[str, Any]) -> list[str]:
    return [c["operation"] for c in answer["candidates"]]


def test_a_query_over_the_whole_catalog_is_ranked_and_says_how_many_more(app: MapSmith) -> None:
    answer = discover(app, "the coastline has 400,000 vertices and the browser crashes", engine="lexical")
    total = len(app.host.contracts)
    assert total > CHOOSE_LIMIT
    assert answer["status"] == "ranked" and answer["engine"] == "lexical"
    assert answer["count"] == RANKED_LIMIT and answer["more"] == total - RANKED_LIMIT
    assert answer["remaining"] == total
    assert _names(answer)[0] == "simplify_layer"
    for c in answer["candidates"]:
        assert set(c) - {"same_job_as"} == {"operation", "status", "stack", "maturity", "distinguishes", "score"}
        assert c["distinguishes"] and c["stack"] == "mapsmith"


def test_limit_none_delivers_everything(app: MapSmith) -> None:
    answer = discover(app, "buffer", engine="lexical", limit=None)
    assert answer["count"] == len(app.host.contracts) and answer["more"] == 0


def test_facets_narrow_to_choose_and_every_remaining_entry_is_delivered_in_order(app: MapSmith) -> None:
    answer = discover(app, "steepness of the terrain in degrees", input_kind="raster", engine="lexical")
    expected = sorted(n for n, c in app.host.contracts.items() if any(d.kind in ("raster", "any") for d in c.datasets))
    assert answer["status"] == "choose"
    assert sorted(_names(answer)) == expected and answer["more"] == 0
    scores = [(-c["score"], c["operation"]) for c in answer["candidates"]]
    assert scores == sorted(scores)
    assert _names(answer)[0] == "slope"
    assert answer["facets_applied"] == {"input_kind": ["raster"]}
    assert answer["removed_by"]["input_kind"]["would_remain_if_dropped"] == len(app.host.contracts)


def test_facets_compose(app: MapSmith) -> None:
    answer = discover(
        app, "", input_kind="vector", produces="dataset:vector", geometry_types=["MultiPolygon"], dataset_count=1
    )
    assert answer["status"] == "choose"
    assert "measure_area" in _names(answer) and "measure_length" not in _names(answer)
    assert "cluster_points_by_distance" not in _names(answer) and "merge_layers" not in _names(answer)
    for name in _names(answer):
        assert app.host.contracts[name].output_kind == "dataset:vector"
    assert set(answer["removed_by"]) == {"input_kind", "produces", "geometry_types", "dataset_count"}


def test_produces_answer_keeps_the_operations_whose_result_may_be_an_answer(app: MapSmith) -> None:
    # run_sql answers with its rows when no output_path is given, describe_dataset with a dataset's facts: asked
    # for an answer from a table, both stay; before, run_sql (output kind dataset:vector) was removed
    answer = discover(app, "total sales per customer last month", input_kind="table", produces="answer", limit=None)
    kept = _names(answer)
    assert {"run_sql", "describe_dataset"} <= set(kept)
    assert "run_sql" not in answer["removed_by"]["produces"]["removed"]
    # every entry kept gives an answer (or a description, or its rows without output_path), never only a file
    for name in kept:
        contract = app.host.contracts[name]
        assert contract.output_kind in ("answer", "description") or contract.output_optional or contract.also_answers
    # the clean twin: asked for a layer, run_sql stays and describe_dataset does not
    layer = _names(discover(app, "total sales per customer", input_kind="table", produces="dataset:vector", limit=None))
    assert "run_sql" in layer and "describe_dataset" not in layer
    # an operation that writes a layer and declares what its answer holds (measure_area: the total area) is kept for
    # an answer too; one that declares nothing (buffer_layer) is not, and both stay for a layer
    area = discover(app, "total area of the parcels", input_kind="vector", produces="answer", limit=None)
    assert "measure_area" in _names(area) and "buffer_layer" not in _names(area)
    assert app.host.contracts["measure_area"].also_answers and not app.host.contracts["buffer_layer"].also_answers
    layer = _names(
        discover(app, "total area of the parcels", input_kind="vector", produces="dataset:vector", limit=None)
    )
    assert {"measure_area", "buffer_layer"} <= set(layer)


def test_produces_alone_emptying_is_relaxed_and_says_which_facet_removed_what(app: MapSmith) -> None:
    # No data held: only operations that need none remain (resolve_crs among them), and none of them writes a
    # description; produces is relaxed (issue 21) and each candidate says what it produces instead.
    answer = discover(app, "describe my dataset", input_kind="none", produces="description")
    need_nothing = sorted(n for n, c in app.host.contracts.items() if not any(d.required for d in c.datasets))
    assert answer["status"] == "relaxed"
    assert sorted(_names(answer)) == need_nothing and "resolve_crs" in need_nothing
    produced = {c["operation"]: c["produces"] for c in answer["candidates"]}
    assert produced["resolve_crs"] == "answer" and "description" not in produced.values()
    by = answer["removed_by"]
    assert "describe_dataset" in by["input_kind"]["removed"]
    assert set(need_nothing) <= set(by["produces"]["removed"])
    assert by["produces"]["would_remain_if_dropped"] == len(need_nothing)
    assert "relaxed" in answer["message"]


def test_empty_when_the_facts_about_the_data_leave_nothing(app: MapSmith) -> None:
    # no operation takes a plan: dropping produces would leave nothing, so nothing is relaxed
    answer = discover(app, "hillshade", input_kind="plan", produces="dataset:raster")
    assert answer["status"] == "empty" and answer["candidates"] == []
    assert answer["removed_by"]["produces"]["would_remain_if_dropped"] == 0
    assert "input_kind removed" in answer["message"]


def test_holding_a_plan_points_to_the_plan_tools(app: MapSmith) -> None:
    answer = discover(app, "check my plan", input_kind="plan")
    assert answer["status"] == "empty"
    assert "validate_plan" in answer["hint"] and "execute_plan" in answer["hint"]


def test_projected_crs_false_removes_operations_that_need_one(app: MapSmith) -> None:
    answer = discover(app, "slope", input_kind="raster", projected_crs=False, engine="lexical")
    assert "slope" not in _names(answer)
    assert "slope" in answer["removed_by"]["projected_crs"]["removed"]


def test_category_only_ranks_unless_a_hard_filter_is_asked(app: MapSmith) -> None:
    plain = discover(app, "", input_kind="raster")
    boosted = discover(app, "", input_kind="raster", category="terrain")
    assert sorted(_names(plain)) == sorted(_names(boosted))
    terrain = sorted(n for n in _names(plain) if app.host.contracts[n].category == "terrain")
    assert sorted(_names(boosted)[: len(terrain)]) == terrain
    hard = discover(app, "", input_kind="raster", category="terrain", category_filter=True)
    assert sorted(_names(hard)) == terrain
    assert "category" in hard["removed_by"]


def test_detail_adds_parameters_and_the_first_full_example(app: MapSmith) -> None:
    answer = discover(app, "buffer", input_kind="vector", detail=True, engine="lexical")
    top = answer["candidates"][0]
    assert top["operation"] == "buffer_layer"
    assert "distance_meters" in top["parameters"]["properties"]
    assert top["example"] == dict(app.host.contracts["buffer_layer"].examples[0])
    assert top["example"]["arguments"]["distance_meters"] == 1500


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"input_kind": "vectr"}, "input_kind"),
        ({"produces": "raster"}, "produces"),
        ({"dataset_count": 1.5}, "dataset_count"),
        ({"geometry_types": "curve"}, "geometry_types"),
        ({"category": "Terrain"}, "category"),
        ({"engine": "neural"}, "engine"),
        ({"query": 42}, "query"),
    ],
)
def test_invalid_values_are_refused_with_the_accepted_ones(
    app: MapSmith, arguments: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ArgumentError) as err:
        discover(app, **arguments)
    assert err.value.code == "INVALID_FILTER" and err.value.evidence["argument"] == argument
    assert err.value.evidence["accepted"]
    if argument == "category":
        assert "terrain" in err.value.evidence["accepted"]


def test_bm25_counts_the_keywords_twice_and_the_vocabulary_once(app: MapSmith) -> None:
    # "gdalwarp" is in reproject_raster's keywords only (35 tokens of keywords, 194 tokens in its plain document):
    # BM25 ranks on a document holding it twice, 194 + 35 = 229 tokens; the vector ranker's passages and the
    # vocabulary the support signals read hold the plain document, where it occurs once, in one entry
    idx = index.catalog_index(app.host.contracts)
    keywords = tokenize(" ".join(app.host.contracts["reproject_raster"].keywords))
    plain = tokenize(idx.docs["reproject_raster"])
    assert (len(keywords), len(plain)) == (35, 194)
    assert idx.lexical.tokens("reproject_raster").count("gdalwarp") == 2 and plain.count("gdalwarp") == 1
    assert len(idx.lexical.tokens("reproject_raster")) == 229
    assert idx.vocabulary["gdalwarp"] == 1


def test_answers_are_deterministic(app: MapSmith) -> None:
    first = discover(app, "count the points that fall in each district", engine="lexical")
    index.INDEXES.clear()
    assert discover(app, "count the points that fall in each district", engine="lexical") == first


# -- engines ---------------------------------------------------------------------------------------


class _FakeVector:
    """Ranks by a fixed preference list, to provoke agreement and disagreement with BM25."""

    def __init__(self, preferred: list[str]) -> None:
        self.preferred = preferred

    def rank(self, query: str) -> list[tuple[str, float]]:
        return [(name, 1.0 - i / 100) for i, name in enumerate(self.preferred)]


def _fake_vector(monkeypatch: pytest.MonkeyPatch, ranker: Any, reason: str | None = None) -> None:
    monkeypatch.setattr(index, "load_vector", lambda docs: (ranker, reason))


def test_auto_uses_vector_when_it_loads(app: MapSmith, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_vector(monkeypatch, _FakeVector(["simplify_layer", "repair_geometries", "convex_hull"]))
    answer = discover(app, "too many vertices, simplify the coastline")
    assert answer["engine"] == search.AUTO_ENGINE == "fusion" and answer["status"] == "ranked"
    # both rankers put simplify_layer first, so the fusion does
    assert _names(answer)[0] == "simplify_layer"
    assert discover(app, "too many vertices, simplify the coastline", engine="vector")["engine"] == "vector"


def test_auto_falls_back_to_lexical_and_says_unsure_cannot_be_computed(
    app: MapSmith, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_vector(monkeypatch, None, "no embeddings installed")
    answer = discover(app, "simplify the coastline")
    assert answer["engine"] == "lexical"
    assert any("no embeddings installed" in n and "unsure" in n for n in answer["notes"])
    with pytest.raises(MapSmithError) as err:
        discover(app, "simplify the coastline", engine="vector")
    assert err.value.code == "ENGINE_UNAVAILABLE" and "lexical" in (err.value.hint or "")


def test_disjoint_top_three_is_unsure_with_both_guesses(app: MapSmith, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_vector(monkeypatch, _FakeVector(["hillshade", "viewshed", "slope"]))
    answer = discover(app, "simplify the coastline, too many vertices")
    assert answer["status"] == "unsure"
    assert answer["guesses"]["vector"] == ["hillshade", "viewshed", "slope"]
    assert answer["guesses"]["lexical"][0] == "simplify_layer"
    assert "What data do you hold" in answer["question"]
    # the guesses never replace delivery: an unsure answer delivers up to CHOOSE_LIMIT, with both rankers' guesses
    assert answer["count"] >= CHOOSE_LIMIT and answer["more"] == answer["remaining"] - answer["count"]
    assert set(answer["guesses"]["vector"]) | set(answer["guesses"]["lexical"]) <= set(_names(answer))


def test_overlapping_top_three_is_not_unsure(app: MapSmith, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_vector(monkeypatch, _FakeVector(["hillshade", "simplify_layer", "slope"]))
    answer = discover(app, "simplify the coastline, too many vertices")
    assert answer["status"] == "ranked" and "guesses" not in answer


def test_lexical_engine_never_loads_the_vector_ranker_without_a_query(
    app: MapSmith, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(docs: Any) -> Any:
        raise AssertionError("loaded")

    monkeypatch.setattr(index, "load_vector", boom)
    assert discover(app, "", engine="lexical")["engine"] == "lexical"


# -- planned operations ----------------------------------------------------------------------------


class PlannedOperation:
    @hookimpl
    def mapsmith_register_operations(self, register: Callable[..., None]) -> None:
        contract = {
            "name": "smooth_coastline",
            "summary": "Smooth a jagged coastline with Chaikin corner cutting.",
            "category": "other",
            "status": "planned",
            "distinguishes": "Rounds corners instead of dropping vertices; unlike simplify_layer it adds vertices.",
            "crs_effect": "preserves",
            "needs_projected_crs": False,
            "checks": [],
            "datasets": [{"name": "input_path", "kind": "vector", "geometry_types": ["line"], "description": "x"}],
            "output": {"kind": "dataset:vector", "argument": "output_path"},
            "examples": [{"description": "smooth", "arguments": {"input_path": "c.gpkg", "output_path": "s.gpkg"}}],
        }
        register(lambda ctx: None, operation="smooth_coastline", stack="opensource", engine="none", contract=contract)


def test_planned_operations_appear_with_status_planned(workspace: Path) -> None:
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace)}, extra_plugins=[("planned", PlannedOperation())])
    answer = discover(app, "smooth the jagged coastline", input_kind="vector", geometry_types="line")
    by_name = {c["operation"]: c for c in answer["candidates"]}
    assert by_name["smooth_coastline"]["status"] == "planned"
    assert by_name["simplify_layer"]["status"] == "available"
    assert answer["planned"] == ["smooth_coastline"]
    assert any("not yet" in n for n in answer["notes"])


# -- the discovery log -----------------------------------------------------------------------------


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_the_log_is_off_by_default(app: MapSmith, workspace: Path) -> None:
    discover(app, "buffer")
    assert search.check_discovery_log(app) is None
    assert not list(workspace.iterdir())


def test_the_log_records_searches_and_the_next_operation_without_paths(
    make_app: Callable[..., MapSmith], workspace: Path
) -> None:
    app = make_app(MAPSMITH_DISCOVERY_LOG="logs/discovery.jsonl")
    (workspace / "logs").mkdir()
    answer = discover(app, "buffer /data/secret/rivers.gpkg by 100 m", input_kind="vector", engine="lexical")
    record_next_operation(app, "buffer_layer")
    first, second = _lines(workspace / "logs" / "discovery.jsonl")
    assert set(first) == {"time", "query", "facets", "engine", "status", "candidates"}
    assert first["query"] == "buffer <path> by 100 m"
    assert first["facets"] == {"input_kind": ["vector"]} and first["engine"] == "lexical"
    assert first["candidates"] == _names(answer)
    assert set(second) == {"time", "ran"} and second["ran"] == "buffer_layer"
    assert "secret" not in (workspace / "logs" / "discovery.jsonl").read_text("utf-8")


def test_a_log_outside_the_workspace_is_refused_on_stderr(
    make_app: Callable[..., MapSmith], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    app = make_app(MAPSMITH_DISCOVERY_LOG=str(outside))
    assert search.check_discovery_log(app) is None
    assert "MAPSMITH_DISCOVERY_LOG refused" in capsys.readouterr().err
    discover(app, "buffer")
    record_next_operation(app, "buffer_layer")
    assert not outside.exists()
    assert capsys.readouterr().err == ""  # refused once, at start


def test_a_log_without_a_workspace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = MapSmith({"MAPSMITH_DISCOVERY_LOG": str(tmp_path / "d.jsonl")})
    discover(app, "buffer")
    assert "MAPSMITH_WORKSPACE is not set" in capsys.readouterr().err
    assert not (tmp_path / "d.jsonl").exists()


def test_auto_uses_the_committed_vector_ranker(app: MapSmith) -> None:
    # The static model is a file in the package: it always loads, so auto means vector.
    answer = discover(app, "how steep is the hillside, in degrees", input_kind="raster")
    assert answer["engine"] == search.AUTO_ENGINE
    assert not any("unavailable" in note for note in answer["notes"])
    assert "slope" in _names(answer)[:3]
    assert discover(app, "how steep is the hillside, in degrees", engine="vector")["engine"] == "vector"


# Asking to move data into a CRS names the CRS, as asking what a CRS is does; the words around it decide.
# Written for this test (in neither query file). Before the reprojection keywords were added, the first
# three ranked watershed, convert_format and fetch_stac_asset first, and neither reproject operation was
# in the first three for the second and third.
@pytest.mark.parametrize(
    ("request_text", "first"),
    [
        ("move the road centrelines from NAD27 into WGS84", "reproject_layer"),
        ("the contour shapefile must go to web mercator for the online map", "reproject_layer"),
        ("the satellite scene is in UTM 32N but the project is in ETRS89 LAEA", "reproject_raster"),
        ("warp the elevation model to the national grid", "reproject_raster"),
        # the clean twin: a question about a CRS's code stays with resolve_crs
        ("what EPSG code is 'ETRS89 / UTM zone 32N'", "resolve_crs"),
    ],
)
def test_a_request_to_move_data_into_a_crs_ranks_a_reprojection_first(
    app: MapSmith, request_text: str, first: str
) -> None:
    assert _names(discover(app, request_text))[0] == first
