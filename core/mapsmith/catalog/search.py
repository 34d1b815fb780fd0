"""Discovery: narrow the catalog by declared facets, rank what remains, and never hide the rest.

``discover`` is what ``list_operations`` answers. Facets (``mapsmith.catalog.facets``) remove only
what the caller's own declarations rule out, and the answer says which facet removed what. Rankers
(``lexical``: BM25, always there; ``vector``: static embeddings, when they load) only order. ``fusion``
(reciprocal rank fusion of the two) orders by both; ``auto`` is whichever of the three measured best
(``AUTO_ENGINE``). Every answer names the engine that ordered it. A request nothing in the catalogue
supports is answered ``none`` (``support``); a ``produces`` wish that alone empties what the declared
facts about the caller's data leave is relaxed, and said to be (``relaxed``). MapSmith's own operation is
ranked before a QGIS algorithm doing the same job (``pairs``), and weighs a little more than a toolbox's
algorithm of equal score (``OWN_PRIOR``). A request for a task the catalogue declares it does not do
(``scope``: geocoding, routing, ...) is answered ``none`` naming the task. An experimental operation is ranked
after the stable ones doing its job (``maturity``). The discovery log is ``discovery_log``.

What this module must never do: download anything, import an engine, let category filter unless asked,
relax a facet that describes the caller's data, or hide that a facet was relaxed.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith.catalog.discovery_log import DISCOVERY_LOG_ENV, check_discovery_log, log_search, record_next_operation
from mapsmith.catalog.facets import (
    PLAN_TOOLS,
    EntryFacets,
    FacetFilter,
    entry_facets,
    filter_entries,
    normalise_filter,
)
from mapsmith.catalog.lexical import BM25Ranker
from mapsmith.catalog.maturity import maturity_of, signatures, stable_first
from mapsmith.catalog.pairs import own_first, same_job_as, stack_of
from mapsmith.catalog.scope import OutOfScope, by_name, scope_documents
from mapsmith.catalog.support import (
    NOT_A_MATCH_SHOWN,
    WEAK_DECLARED_MIN,
    Signals,
    coverage,
    entry_vocabulary,
    is_unsupported,
    lexical_support,
    out_of_scope,
    weak_support,
)
from mapsmith.contracts import OperationContract, contracts_root
from mapsmith.errors import ArgumentError

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

__all__ = [
    "AUTO_ENGINE",
    "CHOOSE_LIMIT",
    "DISCOVERY_LOG_ENV",
    "ENGINES",
    "LEXICAL_FIELD_WEIGHTS",
    "RANKED_LIMIT",
    "check_discovery_log",
    "discover",
    "entry_document",
    "record_next_operation",
]

ENGINES = ("auto", "lexical", "vector", "fusion")
# What "auto" uses when the vector ranker loads: the engine with the best found@1 summed over the facet rows
# of docs/discovery.md and over both catalogues it measures, built-in and with QGIS's algorithms (`python
# benchmarks/discovery_report.py`, "Which ranker is auto" there); the report's test fails when this is no longer
# the measured best. Without the vector ranker, auto is lexical.
AUTO_ENGINE = "fusion"
# Reciprocal rank fusion: an entry's fused score is the sum over rankers of weight / (RRF_K + its rank). The
# usual k is 60 (Cormack, Clarke and Buettcher, SIGIR 2009); over a catalogue this small the first ranks must
# weigh more. `python benchmarks/discovery_calibrate.py --fusion` tries k in (5, 20, 60) and lexical weights
# (1, 1.5, 2) and counts found@1 (of 426) over the built-in catalogue and with QGIS's algorithms (no own prior):
# lexical alone 240 and 192; k 5 with (1.5, 1.0) 239 and 209; the best sum, k 5 with (2.0, 1.0), 244 and 205.
# The settings within a few requests of each other are one another's noise on 142 requests; (1.5, 1.0) was kept.
# With 206 requests (issue 21, round 2) the grid was re-run on the calibration half only (discovery_calibrate's
# in_calibration_half, 114 requests, 570 searches): lexical 292 built-in / 251 with QGIS; k 5 with (1.5, 1.0)
# 294 / 283, (2.0, 1.0) 299 / 286, (3.0, 1.0) 294 / 276; k 10 with (1.5, 2.0, 3.0) 287 / 283, 292 / 287,
# 297 / 282. k 5 with (2.0, 1.0), the best on both catalogues, is used; docs/discovery.md reports the other half.
# Re-run by the command (every request, the rows nothing / + wanted output / + geometry type, 615 searches, no own
# prior) after the lexical field weights: lexical 388 built-in / 317 with QGIS; k 5 with (1.5, 1.0) 381 / 333,
# (2.0, 1.0) 388 / 335; k 20 and k 60 below both: (2.0, 1.0) at k 5 stays.
RRF_K = 5
RRF_WEIGHTS = (2.0, 1.0)
# BM25F's field weights with integer weights (Robertson, Zaragoza and Taylor, CIKM 2004): a field weighted 2 is
# indexed twice in the lexical document, so its term frequencies and its share of the document's length count twice.
# The name, the one-line summary and the keywords say what the job is called; parameter and dataset descriptions say
# how it is called. `python benchmarks/discovery_calibrate.py --fields` tries 1 or 2 for each of the three and counts
# fusion found@1 on the calibration half (114 requests, the five facet rows, 570 searches) over the built-in catalogue
# and with QGIS's algorithms: each field once 322 / 312; the keywords twice 342 / 308; all three twice 331 / 322, the
# best sum by 1 to 3 over the other settings with the keywords twice, which it calls noise (within 0.5 % of the
# 1,140 searches) and keeps the fewest repetitions of. Larger keyword weights kept rising on that half in a scratch
# run (keywords 6 times and the name twice: 353 / 336) while the held-out half and the blind sets did not: the
# keywords were partly chosen from the query file's misses, so the grid stops at 2.
LEXICAL_FIELD_WEIGHTS: dict[str, int] = {"name": 1, "summary": 1, "keywords": 2}
# At most this many remaining entries are all delivered ("choose"): few enough to read in one reply.
CHOOSE_LIMIT = 30
# Above CHOOSE_LIMIT, the top this many are delivered ("ranked") and the answer says how many more.
RANKED_LIMIT = 10
UNSURE_TOP = 3
# "unsure" needs the rankers to disagree beyond their top 3: neither's first choice among the other's top
# this many. Measured on the 137 requests of the time with every facet declared: depth 3, 5, 8, 12 answered
# 17, 12, 6, 0 of them unsure (the goal is under 5 %), and 91, 84, 74, 67 of the 150 unanswerable ones none or
# unsure with nothing declared; 12 can never fire once facets leave 12 entries, so 8. docs/discovery.md's
# "unsure (answerable)" column is the current measure.
UNSURE_DEPTH = 8
# MapSmith's own operations (verified, with provenance) weigh this much more than a toolbox's algorithms of
# equal score (a positive score is multiplied by 1 + OWN_PRIOR; over MapSmith's catalogue alone it changes no
# order). `python benchmarks/discovery_calibrate.py --fusion` tries 0, 0.1, 0.15, 0.2 and 0.35 with QGIS's
# algorithms in (the rows nothing, + wanted output, + geometry type; 615 searches), measured with the lexical field
# weights (LEXICAL_FIELD_WEIGHTS): fusion found@1 335, 347, 350, 356, 357; 0.2 is kept because at 0.35 "hexagon grid
# over the country" finds rasterize_layer first (second on the vector ranker and third on BM25 before the prior,
# behind qgis:native:creategrid on both), a job only QGIS does. (Before the field weights, of 426 searches: 209, 218,
# 221 and 224 at 0, 0.1, 0.2 and 0.35.) The query file accepts MapSmith's own operations only, so a larger prior
# scores better there whether or not the algorithm it passes was the better answer; 0.15 was tried as the largest
# prior that cannot lift an operation second on both rankers above an algorithm first on both (7/6 - 1 at k = 5):
# with QGIS, the five rows, fusion found@1 on the held-out half 265 of 455 against 279 at 0.2 (blind sets 362
# against 366 of 600), most of the difference where the algorithm it left first was the worse answer
# (qgis:native:promotetomulti for "multipart to single part").
OWN_PRIOR = 0.2
# Category is a guess about our taxonomy: it adds this share of the best score, it never filters.
CATEGORY_BOOST = 0.1
_INDEX_CACHE_SIZE = 8


def entry_document(contract: OperationContract, weights: Mapping[str, int] | None = None) -> str:
    """The text an entry is ranked on: name (underscores as spaces), summary, distinguishes, keywords,
    category, dataset descriptions, parameter names and descriptions.

    ``weights`` repeats a field that many times (``LEXICAL_FIELD_WEIGHTS``: the BM25 document); without it each
    field is there once (the vector ranker's passages and the vocabulary the support signals read)."""
    weight = weights or {}
    parts = [contract.name.replace("_", " ")] * weight.get("name", 1)
    parts += [contract.summary] * weight.get("summary", 1)
    parts.append(contract.distinguishes)
    parts += list(contract.keywords) * weight.get("keywords", 1)
    parts.append(contract.category)
    parts += [d.description for d in contract.datasets]
    for p in contract.parameters:
        parts += [p.name.replace("_", " "), p.description]
    return "\n".join(parts)


# -- the index over one catalog, built once per catalog ------------------------------------------


@dataclass
class _CatalogIndex:
    key: tuple[tuple[str, int], ...]
    contracts: dict[str, OperationContract]
    facets: list[EntryFacets]
    docs: dict[str, str]
    lexical: BM25Ranker
    categories: frozenset[str]
    vocabulary: dict[str, int]
    # the declared out-of-scope tasks this catalogue does not offer, and BM25 over them and the entries together
    scope_docs: dict[str, str] = field(default_factory=dict)
    scope_lexical: BM25Ranker | None = None
    # per entry, its maturity as the host set it (read once: 400 getattr calls cost ms on every search)
    maturity: dict[str, str] = field(default_factory=dict)
    _vector: Any = field(default=None, repr=False)
    _vector_reason: str | None = None
    _vector_tried: bool = False

    def vector(self) -> tuple[Any, str | None]:
        """The vector ranker over this catalog, or None and why it is unavailable (tried once)."""
        if not self._vector_tried:
            self._vector_tried = True
            # the tasks are embedded with the entries (one table, one centring) and never delivered
            self._vector, self._vector_reason = _load_vector({**self.docs, **self.scope_docs})
        return self._vector, self._vector_reason


_INDEXES: list[_CatalogIndex] = []


def _index(contracts: Mapping[str, OperationContract]) -> _CatalogIndex:
    # Keyed on the contract objects themselves, so a plugin registering a contract gets a new index.
    key = tuple((name, id(c)) for name, c in sorted(contracts.items()))
    for idx in _INDEXES:
        if idx.key == key:
            return idx
    ordered = dict(sorted(contracts.items()))
    docs = {name: entry_document(c) for name, c in ordered.items()}
    lexical_docs = {name: entry_document(c, LEXICAL_FIELD_WEIGHTS) for name, c in ordered.items()}
    scope_docs = scope_documents(ordered)
    idx = _CatalogIndex(
        key=key,
        contracts=ordered,
        facets=[entry_facets(c) for c in ordered.values()],
        docs=docs,
        lexical=BM25Ranker(lexical_docs),
        categories=frozenset(c.category for c in ordered.values()),
        vocabulary=entry_vocabulary(docs),
        scope_docs=scope_docs,
        scope_lexical=BM25Ranker({**lexical_docs, **scope_docs}),
        maturity={name: maturity_of(c) for name, c in ordered.items()},
    )
    _INDEXES.insert(0, idx)
    del _INDEXES[_INDEX_CACHE_SIZE:]
    return idx


@cache
def schema_categories() -> frozenset[str]:
    """The categories the contract schema allows: accepted even when no entry has one yet."""
    schema = json.loads((contracts_root() / "schemas" / "operation.schema.json").read_text("utf-8"))
    return frozenset(schema["properties"]["category"]["enum"])


def _load_vector(docs: Mapping[str, str]) -> tuple[Any, str | None]:
    """``mapsmith.catalog.vector.load()`` adapted to this catalog; (None, reason) when it cannot load."""
    try:
        # imported by name: the module is optional in this package, and importing it loads nothing yet
        vector: Any = importlib.import_module("mapsmith.catalog.vector")
    except Exception as exc:  # an optional ranker must never take discovery down
        return None, f"mapsmith.catalog.vector cannot be imported: {type(exc).__name__}: {exc}"
    try:
        ranker = vector.load(docs)
    except TypeError:
        ranker = vector.load()  # a load() that takes no catalog: the ranker is fitted below
    except Exception as exc:
        return None, f"the vector ranker failed to load: {type(exc).__name__}: {exc}"
    if ranker is None:
        reason = getattr(vector, "UNAVAILABLE_REASON", None) or getattr(vector, "unavailable_reason", None)
        if callable(reason):
            reason = reason()
        return None, str(reason or "mapsmith.catalog.vector.load() returned None")
    fit = getattr(ranker, "fit", None) or getattr(ranker, "index", None)
    if callable(fit) and not getattr(ranker, "names", None):
        fitted = fit(docs)
        ranker = fitted if fitted is not None else ranker
    return ranker, None


def _rank(ranker: Any, query: str, names: list[str]) -> dict[str, float]:
    """``{name: score}`` over ``names`` from a ranker whose ``rank(query)`` lists (name, score)."""
    try:
        pairs = ranker.rank(query, names=names)
    except TypeError:
        pairs = ranker.rank(query)
    wanted = set(names)
    scores = {n: float(s) for n, s in pairs if n in wanted}
    return {n: scores.get(n, 0.0) for n in names}


def _scores(ranker: Any, query: str, names: list[str]) -> dict[str, float]:
    """Like ``_rank``, without the sort: a ranker's ``scores(query)`` where it has one (every name it knows)."""
    score_all = getattr(ranker, "scores", None)
    if not callable(score_all):
        return _rank(ranker, query, names)
    scored = score_all(query)
    return {n: float(scored.get(n, 0.0)) for n in names}


def _top(scores: Mapping[str, float], n: int) -> list[str]:
    # Only a positive score is a guess; an unmatched entry is not one.
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [name for name, score in ordered[:n] if score > 0]


def fuse(*rankings: Mapping[str, float], k: int | None = None, weights: tuple[float, ...] = ()) -> dict[str, float]:
    """Reciprocal rank fusion: per name, the sum over rankings of ``1 / (k + rank)``, rank 1 being the best
    (ties broken by name, so the order is total), each ranking's term times its weight (1 when not given).
    ``k`` defaults to ``RRF_K``. Every ranking must score the same names."""
    k = RRF_K if k is None else k
    weights = weights or (RRF_WEIGHTS if len(rankings) == len(RRF_WEIGHTS) else (1.0,) * len(rankings))
    fused: dict[str, float] = {}
    for scores, weight in zip(rankings, weights, strict=True):
        ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        for rank, (name, _) in enumerate(ordered, start=1):
            fused[name] = fused.get(name, 0.0) + weight / (k + rank)
    return {name: round(value, 9) for name, value in fused.items()}


def _disagree(lexical: Mapping[str, float], vector: Mapping[str, float]) -> dict[str, list[str]] | None:
    """Both rankers' top 3 when they disagree enough to ask the caller: no shared entry in their top 3, and
    neither ranker's first choice within the other's top ``UNSURE_DEPTH``; else None.

    With a toolbox's algorithms among the entries, the disagreement is judged on MapSmith's own operations when
    both rankers matched one: hundreds of algorithms with thin help text disagree among themselves by chance,
    which says nothing about which of our operations fits. Measured on the calibration half (114 answerable
    requests, every facet declared, QGIS's 341 algorithms in): unsure 10 of 114 judged on every entry, 1 of 114
    judged on our own; without QGIS nothing changes (2 of 114). The cost: 43 instead of 53 of that half's 71
    unanswerable requests refused with nothing declared, the noise having refused them by chance."""
    own = [n for n in lexical if stack_of(n) == "mapsmith"]
    if len(own) < len(lexical) and any(lexical[n] > 0 for n in own) and any(vector.get(n, 0.0) > 0 for n in own):
        lexical, vector = {n: lexical[n] for n in own}, {n: vector.get(n, 0.0) for n in own}
    lex_top, vec_top = _top(lexical, UNSURE_TOP), _top(vector, UNSURE_TOP)
    if not lex_top or not vec_top or set(lex_top) & set(vec_top):
        return None
    if lex_top[0] in _top(vector, UNSURE_DEPTH) or vec_top[0] in _top(lexical, UNSURE_DEPTH):
        return None
    return {"lexical": lex_top, "vector": vec_top}


# -- the answer ------------------------------------------------------------------------------------


def _refuse(argument: str, value: Any, accepted: list[Any]) -> ArgumentError:
    listed = ", ".join(map(str, accepted))
    return ArgumentError(
        f"{argument} {value!r} is not accepted; accepted: {listed}",
        code="INVALID_FILTER",
        evidence={"argument": argument, "value": value, "accepted": accepted},
        hint=f"pass {argument} as one of {listed}",
    )


def discover(
    app: MapSmith,
    query: str | None = "",
    input_kind: Any = None,
    produces: Any = None,
    dataset_count: Any = None,
    geometry_types: Any = None,
    projected_crs: Any = None,
    category: Any = None,
    engine: str = "auto",
    detail: bool = False,
    category_filter: bool = False,
    limit: int | None = RANKED_LIMIT,
    relax: bool = True,
) -> dict[str, Any]:
    """Search the catalog of ``app``: facets narrow, a ranker orders, the answer says what it did.

    ``status`` is ``none`` (nothing in the catalogue supports the query, or it asks for a task the catalogue
    declares it does not do, named under ``out_of_scope``: no candidate, the nearest few under
    ``not_a_match``), ``empty`` (the facets left nothing: ``removed_by`` says which removed what and how many
    each would leave if dropped), ``relaxed`` (``produces`` alone emptied what the other
    facets leave: those are answered, ``relaxed`` names the facet and each candidate says what it
    ``produces``), ``unsure`` (the lexical and vector rankers disagree, or the request is thinly supported
    (``support.weak_support`` above 0, or above ``support.WEAK_DECLARED_MIN`` when a fact about the caller's data
    is declared), marked ``support: "weak"``; a weaker doubt keeps the status and adds the mark and a note):
    ``guesses`` shows both rankers' first three,
    ``question`` asks what data the caller has, and the first 30 are delivered with each ranker's own
    first 10 added), ``choose`` (at most 30 remain: every one, ordered) or
    ``ranked`` (the top ``limit``, and ``more`` says how many remain beyond them; ``limit=None``
    delivers all). ``relaxed`` needs a query (a task to answer) and ``relax``: a strict listing by facets
    (``MapSmith.list_operations``) never gets entries outside them. Each candidate names its ``stack`` and
    ``maturity`` (an experimental operation comes after a stable one with its facets and arguments); a
    QGIS algorithm doing the job of one of MapSmith's own operations comes after it, and both say
    ``same_job_as``. Raises ``ArgumentError`` INVALID_FILTER for a facet value outside its accepted values,
    and ENGINE_UNAVAILABLE for ``engine="vector"`` or ``"fusion"`` when the vector ranker does not load.
    """
    if query is None:
        query = ""
    if not isinstance(query, str):
        raise _refuse("query", query, ["a string"])
    if engine not in ENGINES:
        raise _refuse("engine", engine, list(ENGINES))
    if not isinstance(detail, bool):
        raise _refuse("detail", detail, [True, False])
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _refuse("limit", limit, ["an integer >= 1", None])
    idx = _index(app.host.contracts)
    facet_filter = normalise_filter(
        input_kind=input_kind,
        produces=produces,
        dataset_count=dataset_count,
        geometry_types=geometry_types,
        projected_crs=projected_crs,
        category=category,
        category_filter=category_filter,
        categories=idx.categories | schema_categories(),
    )
    remaining, removed_by = filter_entries(idx.facets, facet_filter)
    relaxed: dict[str, Any] | None = None
    produces_info = removed_by.get("produces")
    would_remain = 0 if produces_info is None else produces_info["would_remain_if_dropped"]
    if not remaining and relax and query.strip() and would_remain > 0:
        # produces is a wish, the other facets are facts about the caller's data: answer what the facts allow.
        remaining, _ = filter_entries(idx.facets, dataclasses.replace(facet_filter, produces=None))
        relaxed = {"facet": "produces", "declared": sorted(facet_filter.produces or ())}
    names = [e.name for e in remaining]

    vector_ranker: Any = None
    vector_reason: str | None = None
    if engine != "lexical" or query.strip():
        vector_ranker, vector_reason = idx.vector()
    if engine in ("vector", "fusion") and vector_ranker is None:
        raise ArgumentError(
            f"the vector ranker is not available: {vector_reason}",
            code="ENGINE_UNAVAILABLE",
            evidence={"engine": engine, "reason": vector_reason},
            hint="use engine='lexical' (always available) or engine='auto'",
        )
    used = engine if engine != "auto" else (AUTO_ENGINE if vector_ranker is not None else "lexical")

    answer: dict[str, Any] = {"query": query, "engine": used}
    notes: list[str] = []
    scores = dict.fromkeys(names, 0.0)
    guesses: dict[str, list[str]] | None = None
    unsupported = False
    weak = False  # thinly supported (support.weak_support): marked support "weak"
    doubt = False  # so thinly that a list is answered unsure (WEAK_DECLARED_MIN with a declared fact)
    task: OutOfScope | None = None
    all_names = list(idx.contracts)
    lexical_scores: dict[str, float] = {}
    vector_scores: dict[str, float] | None = None
    if query.strip():
        vector_full = (
            _scores(vector_ranker, query, [*all_names, *idx.scope_docs]) if vector_ranker is not None else None
        )
        vector_all = None if vector_full is None else {n: vector_full[n] for n in all_names}
        support = lexical_support(query, idx.vocabulary, len(all_names))
        unsupported = is_unsupported(support, None if vector_all is None else max(vector_all.values(), default=0.0))
        if not unsupported and vector_full is not None:
            task = _out_of_scope(idx, query, vector_full)
            unsupported = task is not None
            signals = own_signals(idx, query, vector_full)
            weak_score = weak_support(signals) if signals is not None else -math.inf
            weak = weak_score > 0
            # a declared fact about the caller's data is evidence the score never saw: it must be far stronger
            doubt = weak and (not _declares_data(facet_filter) or weak_score > WEAK_DECLARED_MIN)
        if unsupported and not names:
            names = all_names  # the nearest entries are shown as "not a match" even when facets left none
        lexical_scores = _rank(idx.lexical, query, names)
        vector_scores = None if vector_all is None else {n: vector_all[n] for n in names}
        if vector_scores is None:
            scores = lexical_scores
            notes.append(f"vector ranker unavailable ({vector_reason}): 'unsure' cannot be computed")
        else:
            scores = {
                "lexical": lexical_scores,
                "vector": vector_scores,
                "fusion": fuse(lexical_scores, vector_scores) if names else {},
            }[used]
            guesses = _disagree(lexical_scores, vector_scores)
        if not any(s > 0 for s in lexical_scores.values()) and used == "lexical":
            notes.append("no entry matched any word of the query: the order below is by name only")
    elif not query.strip():
        notes.append("no query: the order is by name (category first when given)")
    if OWN_PRIOR and query.strip():
        scores = {n: v * (1 + OWN_PRIOR) if v > 0 and stack_of(n) == "mapsmith" else v for n, v in scores.items()}
    if category is not None and not category_filter:
        best = max(scores.values(), default=0.0)
        boost = CATEGORY_BOOST * best if best > 0 else CATEGORY_BOOST
        for e in remaining:
            if e.category == category:
                scores[e.name] += boost
    ordered = own_first(sorted(names, key=lambda n: (-scores[n], n)))
    if "experimental" in idx.maturity.values():
        maturity = {n: idx.maturity[n] for n in ordered}
        facets_by_name = {f.name: f for f in idx.facets}
        ordered = stable_first(ordered, maturity, facets_by_name, scores, signatures(idx.contracts))

    if unsupported:
        status = "none"
    elif not remaining:
        status = "empty"
    elif relaxed is not None:
        status = "relaxed"
    elif guesses is not None:
        status = "unsure"
    elif doubt and vector_scores is not None:
        # little of the request is known to the catalogue: the list is a guess, shown as one
        status = "unsure"
        guesses = {"lexical": _top(lexical_scores, UNSURE_TOP), "vector": _top(vector_scores, UNSURE_TOP)}
    elif len(remaining) <= CHOOSE_LIMIT:
        status = "choose"
    else:
        status = "ranked"
    if weak and status not in ("none", "empty"):  # an empty answer has no candidate to doubt
        answer["support"] = "weak"
        if status != "unsure":
            notes.append(
                "little of this request is known to the catalogue (support: weak): the facets you declared "
                "narrowed the list, but check that a candidate really does what you asked"
            )
    if status == "none":
        delivered: list[str] = []
        shown = ordered[:NOT_A_MATCH_SHOWN]
        answer["not_a_match"] = [_candidate(idx.contracts[n], scores[n], False, frozenset(shown)) for n in shown]
        if task is not None:
            answer["out_of_scope"] = {"task": task.key, "label": task.label, "kind": task.family}
    else:
        deliver_all = status in ("choose", "empty", "relaxed") or len(ordered) <= CHOOSE_LIMIT or limit is None
        delivered = ordered if deliver_all else ordered[:limit]
        if status == "unsure" and not deliver_all and guesses is not None:
            # the caller is asked to narrow: show each ranker's own first RANKED_LIMIT as well as the fused order
            delivered = ordered[: max(limit or 0, CHOOSE_LIMIT)]
            guessed = set(guesses["lexical"] + guesses["vector"])
            for own in (lexical_scores, vector_scores or {}):
                guessed |= set(_top(own, RANKED_LIMIT))
            guessed -= set(delivered)
            delivered += [n for n in ordered if n in guessed]
    # same_job_as names only twins the caller can see in this answer
    present = frozenset(delivered)
    candidates = [_candidate(idx.contracts[n], scores[n], detail, present) for n in delivered]
    if relaxed is not None and status == "relaxed":
        for c in candidates:
            c["produces"] = idx.contracts[c["operation"]].output_kind
        answer["relaxed"] = relaxed

    answer.update(
        status=status,
        candidates=candidates,
        count=len(candidates),
        remaining=len(remaining),
        more=len(remaining) - len(candidates),
        facets_applied=facet_filter.declared(),
        removed_by=removed_by,
    )
    answer["message"], hint = _explain(status, answer, facet_filter, removed_by, guesses, task)
    if hint:
        answer["hint"] = hint
    if guesses is not None:
        answer["guesses"] = guesses
        if status == "unsure":
            answer["question"] = (
                "The two rankers disagree. What data do you hold (input_kind: vector, raster, table, none), "
                "what do you want back (produces: dataset:vector, dataset:raster, answer, description), and "
                "how many datasets will you pass (dataset_count)?"
            )
    planned = [c["operation"] for c in candidates if c["status"] == "planned"]
    if planned:
        answer["planned"] = planned
        notes.append(f"{', '.join(planned)}: planned, not yet runnable; answer 'not yet' rather than inventing a call")
    answer["notes"] = notes
    log_search(app, query, facet_filter, used, status, [c["operation"] for c in candidates])
    return answer


def _candidate(contract: OperationContract, score: float, detail: bool, present: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operation": contract.name,
        "status": contract.status,
        "stack": stack_of(contract.name),
        "maturity": maturity_of(contract),
        "distinguishes": contract.distinguishes,
        "score": round(score, 6),
    }
    twins = same_job_as(contract.name, present)
    if twins:
        out["same_job_as"] = twins
    if detail:
        out["summary"] = contract.summary
        out["category"] = contract.category
        out["output_kind"] = contract.output_kind
        out["parameters"] = contract.input_schema()
        out["example"] = dict(contract.examples[0]) if contract.examples else None
    return out


def _explain(
    status: str,
    answer: Mapping[str, Any],
    facet_filter: FacetFilter,
    removed_by: Mapping[str, Mapping[str, Any]],
    guesses: Mapping[str, list[str]] | None,
    task: OutOfScope | None = None,
) -> tuple[str, str | None]:
    if status == "none" and task is not None:
        nearest = ", ".join(c["operation"] for c in answer.get("not_a_match", []))
        toolboxes = ", ".join(sorted({stack_of(n) for n in task.offered_by}))
        gap_hint = (
            "if your task is a step MapSmith does offer, search again naming that step (the data you hold and the "
            "result you want); list_operations with no query browses the catalogue"
        )
        if toolboxes:
            gap_hint = (
                f"the {toolboxes} stack offers it: server_info says whether that stack is available and how to "
                f"install it; {gap_hint}"
            )
        return (
            f"none: {task.label} is not offered by this catalogue; the nearest operations, not a match: {nearest}",
            gap_hint,
        )
    if status == "none":
        nearest = ", ".join(c["operation"] for c in answer.get("not_a_match", []))
        return (
            "none: no operation in the catalogue matches this request (none of its words is in an entry's "
            f"vocabulary and no entry is close in meaning); the nearest, not a match: {nearest}",
            "this is likely outside what MapSmith does; rephrase in GIS terms (the data you hold and the result "
            "you want) or call list_operations with no query to browse the catalogue",
        )
    if status == "empty":
        parts = [
            f"{facet} removed {len(info['removed'])} (dropping it alone would leave {info['would_remain_if_dropped']})"
            for facet, info in removed_by.items()
        ]
        message = "no operation satisfies every declared facet: " + "; ".join(parts)
        best = max(removed_by.items(), key=lambda item: item[1]["would_remain_if_dropped"], default=None)
        hint = f"drop {best[0]} to see {best[1]['would_remain_if_dropped']}" if best else None
        if facet_filter.input_kind is not None and "plan" in facet_filter.input_kind:
            hint = f"a plan goes to the {', '.join(PLAN_TOOLS)} tools, not to a catalog operation"
        return message, hint
    if status == "relaxed":
        wished = ", ".join(sorted(facet_filter.produces or ()))
        return (
            f"relaxed: no operation that takes your data produces {wished}; produces was relaxed and the "
            f"{answer['remaining']} operations your other facets allow are listed, each with what it produces",
            "if one of these fits, call it and use what it produces; otherwise what you want is not in the catalogue",
        )
    if status == "unsure" and answer.get("support") == "weak":
        assert guesses is not None
        narrow = (
            "or declare input_kind and produces to narrow, then search again"
            if not _declares_data(facet_filter)
            else "and search again"
        )
        return (
            "unsure: little of this request is known to the catalogue, so the order below is a guess (the lexical "
            f"ranker guesses {', '.join(guesses['lexical'])}, the vector ranker {', '.join(guesses['vector'])}); "
            "it may be a task MapSmith does not offer",
            "if one of these fits, call describe_operation on it; otherwise rephrase in GIS terms (the data you hold "
            f"and the result you want) {narrow}",
        )
    if status == "unsure":
        assert guesses is not None
        return (
            f"unsure: the lexical ranker guesses {', '.join(guesses['lexical'])}, the vector ranker "
            f"{', '.join(guesses['vector'])}; the candidates below hold both rankers' first choices",
            "declare input_kind, produces or dataset_count to narrow, then search again",
        )
    if status == "choose":
        return f"{answer['remaining']} operations remain; every one is listed, ordered", None
    return (
        f"{answer['remaining']} operations remain; the top {answer['count']} are listed, {answer['more']} more",
        "declare input_kind, produces, dataset_count or geometry_types to narrow to 30 or fewer and see all",
    )


def query_signals(idx: _CatalogIndex, query: str, vector_full: Mapping[str, float]) -> Signals | None:
    """The support signals of ``query`` over the whole catalogue (``support.Signals``), or None when the catalogue
    declares no out-of-scope task to measure the leads against."""
    if not idx.scope_docs or idx.scope_lexical is None or not idx.contracts:
        return None
    entries, tasks = list(idx.contracts), list(idx.scope_docs)
    vector = max(vector_full[n] for n in entries)
    bm25 = idx.scope_lexical.scores(query)
    best = max(bm25[n] for n in entries)
    return Signals(
        lexical=lexical_support(query, idx.vocabulary, len(entries)),
        coverage=coverage(query, idx.vocabulary, len(entries)),
        vector=vector,
        vector_lead=max(vector_full[n] for n in tasks) - vector,
        bm25=best,
        bm25_lead=max(bm25[n] for n in tasks) - best,
    )


def _declares_data(facet_filter: FacetFilter) -> bool:
    """Whether the caller declared a fact about its data (every facet but the ``produces`` wish and category).

    The weak-support score was fitted on request texts alone; with a declared fact a score above 0 adds a note,
    and only a score above ``support.WEAK_DECLARED_MIN`` answers ``unsure``: the cut keeps unsure to at most
    ``support.WEAK_DECLARED_UNSURE_SHARE`` of the calibration half's answerable requests with every facet declared.
    Measured with no cut, with QGIS's algorithms in and every facet declared: a score above 0 turned 6 of the 206
    answerable requests unsure (11 in all, 5.3 %, against the goal of under 5 %), each listing the right operation.
    A declared fact is no evidence that the request is on topic: an off-topic request declares data as readily (the
    third blind set)."""
    return any(
        value is not None
        for value in (
            facet_filter.input_kind,
            facet_filter.dataset_count,
            facet_filter.geometry_types,
            facet_filter.projected_crs,
        )
    )


def own_signals(idx: _CatalogIndex, query: str, vector_full: Mapping[str, float]) -> Signals | None:
    """``query_signals`` over MapSmith's own operations and every declared task, whatever toolboxes are installed.

    The weak-support weights were fitted on MapSmith's own catalogue; over QGIS's 341 algorithms as well the
    signals shift (the best cosine rises, the task leads fall) and the same weights fired on 17 of the held-out
    half's 78 unanswerable requests instead of 46. Judging support against the catalogue the weights know keeps
    them valid with any toolbox; the toolbox's algorithms are still ranked and listed."""
    own = {n: c for n, c in idx.contracts.items() if stack_of(n) == "mapsmith"}
    if len(own) == len(idx.contracts):
        return query_signals(idx, query, vector_full)
    if not own:
        return None
    own_idx = _index(own)
    ranker, _ = own_idx.vector()
    if ranker is None:
        return None
    return query_signals(own_idx, query, _scores(ranker, query, [*own_idx.contracts, *own_idx.scope_docs]))


def _out_of_scope(idx: _CatalogIndex, query: str, vector_full: Mapping[str, float]) -> OutOfScope | None:
    """The declared task the request asks for when it outranks every entry on both rankers (``support``'s
    calibrated leads), else None."""
    if not idx.scope_docs or idx.scope_lexical is None:
        return None
    entries, tasks = idx.contracts, idx.scope_docs
    vector_lead = max(vector_full[n] for n in tasks) - max((vector_full[n] for n in entries), default=0.0)
    if not out_of_scope(math.inf, vector_lead):
        return None  # the vector lead alone rules it out: BM25 over entries and tasks is not needed
    lexical = idx.scope_lexical.scores(query)
    best_task = max(tasks, key=lambda n: (vector_full[n], lexical[n], n))
    lexical_lead = max(lexical[n] for n in tasks) - max((lexical[n] for n in entries), default=0.0)
    return by_name(best_task) if out_of_scope(lexical_lead, vector_lead) else None
