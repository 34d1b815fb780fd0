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
after the stable ones doing its job (``maturity``). The discovery log is ``discovery_log``. The index a search reads
(documents, BM25, the vector ranker) is built once per catalogue by ``index``; the support signals handed to
``support``'s rules are read by ``signals``.

What this module must never do: download anything, import an engine, let category filter unless asked,
relax a facet that describes the caller's data, or hide that a facet was relaxed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mapsmith.catalog.discovery_log import DISCOVERY_LOG_ENV, check_discovery_log, log_search, record_next_operation
from mapsmith.catalog.facets import (
    PLAN_TOOLS,
    FacetFilter,
    filter_entries,
    normalise_filter,
)
from mapsmith.catalog.index import all_scores, catalog_index, ranked_scores, schema_categories
from mapsmith.catalog.maturity import maturity_of, signatures, stable_first
from mapsmith.catalog.pairs import own_first, same_job_as, stack_of
from mapsmith.catalog.scope import OutOfScope
from mapsmith.catalog.signals import declares_data, out_of_scope_task, own_signals
from mapsmith.catalog.support import (
    NOT_A_MATCH_SHOWN,
    WEAK_DECLARED_MIN,
    is_unsupported,
    lexical_support,
    weak_support,
)
from mapsmith.contracts import OperationContract
from mapsmith.errors import ArgumentError

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

__all__ = [
    "AUTO_ENGINE",
    "CHOOSE_LIMIT",
    "DISCOVERY_LOG_ENV",
    "ENGINES",
    "RANKED_LIMIT",
    "check_discovery_log",
    "discover",
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
    idx = catalog_index(app.host.contracts)
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
            all_scores(vector_ranker, query, [*all_names, *idx.scope_docs]) if vector_ranker is not None else None
        )
        vector_all = None if vector_full is None else {n: vector_full[n] for n in all_names}
        support = lexical_support(query, idx.vocabulary, len(all_names))
        unsupported = is_unsupported(support, None if vector_all is None else max(vector_all.values(), default=0.0))
        if not unsupported and vector_full is not None:
            task = out_of_scope_task(idx, query, vector_full)
            unsupported = task is not None
            signals = own_signals(idx, query, vector_full)
            weak_score = weak_support(signals) if signals is not None else -math.inf
            weak = weak_score > 0
            # a declared fact about the caller's data is evidence the score never saw: it must be far stronger
            doubt = weak and (not declares_data(facet_filter) or weak_score > WEAK_DECLARED_MIN)
        if unsupported and not names:
            names = all_names  # the nearest entries are shown as "not a match" even when facets left none
        lexical_scores = ranked_scores(idx.lexical, query, names)
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
            if not declares_data(facet_filter)
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
