"""Lexical ranking of catalog entries: Okapi BM25 in plain Python.

``list_operations`` must give the same order for the same query on every machine, so this ranker
owns every step that could vary: tokenising, the stopword list and the stemmer are written out here
rather than taken from a library whose rules change between versions, and each document's score is
summed over the query's terms in sorted order, so floating-point addition happens in one order
whatever order the catalog or the query arrived in.

What this module must never do:

* depend on dict insertion order, set iteration order or the hash seed for anything that reaches a
  score or an order: names and terms are sorted before they are used;
* import anything outside the standard library: the lexical ranker is the one that is always there.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["STOPWORDS", "BM25Ranker", "stem", "tokenize"]

# Words that say nothing about which operation is wanted. Kept short on purpose: a word that names
# a spatial idea ("within", "over", "between", "near", "all") is left in, because it can.
STOPWORDS = frozenset(
    """
    a an the and or but of to in on at by for from with as into onto than then
    is are was were be been being am do does did done has have had having
    i me my we our us you your it its they them their this that these those there here
    what which who whom how why when where can could would should will shall may might must
    please want wants wanted like just so very also some any each every about get got make
    """.split()
)

_SPLIT = re.compile(r"[^a-z0-9]+")
_VOWELS = frozenset("aeiouy")


def _has_vowel(word: str) -> bool:
    return any(ch in _VOWELS for ch in word)


def _undouble(word: str) -> str:
    # "clipping" -> "clipp" -> "clip"; a doubled l, s or z is kept ("filling" -> "fill").
    if len(word) >= 3 and word[-1] == word[-2] and word[-1] not in _VOWELS and word[-1] not in "lsz":
        return word[:-1]
    return word


def stem(word: str) -> str:
    """Reduce a lowercase word to the form its inflections share.

    A tiny fixed stemmer, not Porter: strip a plural (``ies`` -> ``y``, ``sses`` -> ``ss``,
    ``xes``/``ches``/``shes``/``zes`` -> drop ``es``, else a final ``s`` unless the word ends in
    ``ss``, ``us`` or ``is``), then ``ing``/``ed`` (``ied`` -> ``y``) when what is left has a vowel
    and at least three letters, undoing a doubled final consonant, then a final ``e``. Words of
    three letters or fewer and words containing a digit are returned unchanged.

    >>> [stem(w) for w in ["polygons", "geometries", "clipping", "merged", "merge", "simplified"]]
    ['polygon', 'geometry', 'clip', 'merg', 'merg', 'simplify']
    """
    if len(word) <= 3 or any(ch.isdigit() for ch in word):
        return word
    # Plurals (and third-person verbs, which share the endings).
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith(("xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    # Verb endings.
    if word.endswith("ied") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("ing") and len(word) - 3 >= 3 and _has_vowel(word[:-3]):
        word = _undouble(word[:-3])
    elif word.endswith("ed") and not word.endswith("eed") and len(word) - 2 >= 3 and _has_vowel(word[:-2]):
        word = _undouble(word[:-2])
    # "merge", "merges", "merging" and "merged" all meet at "merg".
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lowercase ``text``, split it on every non-alphanumeric character, drop stopwords, stem the rest.

    >>> tokenize("Clip the roads to the county boundaries!")
    ['clip', 'road', 'county', 'boundary']
    """
    return [stem(tok) for tok in _SPLIT.split(text.lower()) if tok and tok not in STOPWORDS]


class BM25Ranker:
    """Okapi BM25 over a fixed set of named documents.

    ``docs`` maps a name (an operation) to its text. For a query term ``t`` and a document ``d``::

        idf(t)      = ln((N - n_t + 0.5) / (n_t + 0.5) + 1)
        score(t, d) = idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))

    where ``N`` is the number of documents, ``n_t`` how many contain ``t``, ``tf`` how often ``t``
    occurs in ``d``, ``|d|`` the number of tokens of ``d`` and ``avgdl`` the mean of ``|d|``. The
    ``+ 1`` inside the logarithm (as in Lucene) keeps ``idf`` positive, so a term present in most
    documents still counts a little instead of pushing a document down. A document's score is the
    sum over the query's distinct terms, added in sorted order.
    """

    def __init__(self, docs: Mapping[str, str], k1: float = 1.5, b: float = 0.75) -> None:
        if k1 < 0:
            raise ValueError(f"k1 must be >= 0, got {k1}")
        if not 0 <= b <= 1:
            raise ValueError(f"b must be between 0 and 1, got {b}")
        self.k1 = k1
        self.b = b
        self.names: tuple[str, ...] = tuple(sorted(docs))
        self._doc_tokens: dict[str, tuple[str, ...]] = {name: tuple(tokenize(docs[name])) for name in self.names}
        self.doc_count = len(self.names)
        total = sum(len(toks) for toks in self._doc_tokens.values())
        # An all-empty catalog has no term to match; 1.0 only avoids dividing by zero.
        self.avgdl: float = total / self.doc_count if self.doc_count and total else 1.0
        # Inverted index: term -> ((name, tf), ...) with names in sorted order.
        postings: dict[str, list[tuple[str, int]]] = {}
        for name in self.names:
            for term, tf in sorted(Counter(self._doc_tokens[name]).items()):
                postings.setdefault(term, []).append((name, tf))
        self._postings: dict[str, tuple[tuple[str, int], ...]] = {t: tuple(p) for t, p in postings.items()}
        # The length-normalised part of the denominator depends only on the document.
        self._norm: dict[str, float] = {
            name: k1 * (1 - b + b * len(self._doc_tokens[name]) / self.avgdl) for name in self.names
        }

    def tokens(self, name: str) -> tuple[str, ...]:
        """The tokens the named document was indexed under (after stopwords and stemming)."""
        return self._doc_tokens[name]

    def doc_freq(self, term: str) -> int:
        """How many documents contain the (already stemmed) ``term``."""
        return len(self._postings.get(term, ()))

    def idf(self, term: str) -> float:
        """``ln((N - n + 0.5) / (n + 0.5) + 1)`` for the (already stemmed) ``term``."""
        n = self.doc_freq(term)
        return math.log((self.doc_count - n + 0.5) / (n + 0.5) + 1)

    def scores(self, query: str) -> dict[str, float]:
        """Every document's BM25 score for ``query`` (0.0 where no query term occurs), keyed by name."""
        result = dict.fromkeys(self.names, 0.0)
        k1_plus_1 = self.k1 + 1
        for term in sorted(set(tokenize(query))):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = self.idf(term)
            for name, tf in postings:
                result[name] += idf * tf * k1_plus_1 / (tf + self._norm[name])
        return result

    def rank(self, query: str, *, names: Iterable[str] | None = None) -> list[tuple[str, float]]:
        """``(name, score)`` for every document, or only those in ``names``, sorted by (-score, name).

        Documents no query term matches are included with score 0.0, so that the order is total and
        the caller can deliver a whole remaining set; ``names`` restricts the answer (for instance to
        what the facets left) without changing ``idf``, which stays computed over the whole catalog.
        Unknown names raise ``KeyError``.
        """
        all_scores = self.scores(query)
        if names is None:
            chosen = all_scores
        else:
            chosen = {name: all_scores[name] for name in names}
        return sorted(chosen.items(), key=lambda item: (-item[1], item[0]))
