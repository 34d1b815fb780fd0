"""A request's support signals (``support.Signals``) read from a catalogue's index, and the out-of-scope task it
asks for: what ``search`` hands to ``support``'s rules to decide ``none``, ``unsure`` or a list.

The signals are measured over the whole catalogue, never only what the facets left, and, whatever toolboxes are
installed, over MapSmith's own operations and the declared tasks (``own_signals``): the weights were fitted there.

What this module must never do: decide a status (``support`` and ``search`` do), or look at a dataset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from mapsmith.catalog.facets import FacetFilter
from mapsmith.catalog.index import CatalogIndex, all_scores, catalog_index
from mapsmith.catalog.pairs import stack_of
from mapsmith.catalog.scope import OutOfScope, by_name
from mapsmith.catalog.support import Signals, coverage, lexical_support, out_of_scope

__all__ = ["declares_data", "out_of_scope_task", "own_signals", "query_signals"]


def query_signals(idx: CatalogIndex, query: str, vector_full: Mapping[str, float]) -> Signals | None:
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


def declares_data(facet_filter: FacetFilter) -> bool:
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


def own_signals(idx: CatalogIndex, query: str, vector_full: Mapping[str, float]) -> Signals | None:
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
    own_idx = catalog_index(own)
    ranker, _ = own_idx.vector()
    if ranker is None:
        return None
    return query_signals(own_idx, query, all_scores(ranker, query, [*own_idx.contracts, *own_idx.scope_docs]))


def out_of_scope_task(idx: CatalogIndex, query: str, vector_full: Mapping[str, float]) -> OutOfScope | None:
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
