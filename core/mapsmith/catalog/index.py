"""The index over one catalogue, built once per catalogue: each entry's documents, BM25 over them (and over the
declared out-of-scope tasks beside them), the vocabulary the support signals read, and the vector ranker, loaded on
first use.

An entry has two documents (``entry_document``): once each field, which the vector ranker embeds and the vocabulary
counts, and with BM25F's field weights (``LEXICAL_FIELD_WEIGHTS``), which BM25 ranks on. Indexes are kept by the
identity of the contract objects, so a plugin registering a contract gets a new one (``catalog_index``).

What this module must never do: download anything, import an engine, or rank (``search`` orders and answers).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from mapsmith.catalog.facets import EntryFacets, entry_facets
from mapsmith.catalog.lexical import BM25Ranker
from mapsmith.catalog.maturity import maturity_of
from mapsmith.catalog.scope import scope_documents
from mapsmith.catalog.support import entry_vocabulary
from mapsmith.contracts import OperationContract, contracts_root

__all__ = [
    "INDEXES",
    "LEXICAL_FIELD_WEIGHTS",
    "CatalogIndex",
    "all_scores",
    "catalog_index",
    "entry_document",
    "load_vector",
    "ranked_scores",
    "schema_categories",
]

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
# How many indexes are kept, most recent first: one per catalogue a process searches.
INDEX_CACHE_SIZE = 8


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


@dataclass
class CatalogIndex:
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
            self._vector, self._vector_reason = load_vector({**self.docs, **self.scope_docs})
        return self._vector, self._vector_reason


INDEXES: list[CatalogIndex] = []


def catalog_index(contracts: Mapping[str, OperationContract]) -> CatalogIndex:
    # Keyed on the contract objects themselves, so a plugin registering a contract gets a new index.
    key = tuple((name, id(c)) for name, c in sorted(contracts.items()))
    for idx in INDEXES:
        if idx.key == key:
            return idx
    ordered = dict(sorted(contracts.items()))
    docs = {name: entry_document(c) for name, c in ordered.items()}
    lexical_docs = {name: entry_document(c, LEXICAL_FIELD_WEIGHTS) for name, c in ordered.items()}
    scope_docs = scope_documents(ordered)
    idx = CatalogIndex(
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
    INDEXES.insert(0, idx)
    del INDEXES[INDEX_CACHE_SIZE:]
    return idx


@cache
def schema_categories() -> frozenset[str]:
    """The categories the contract schema allows: accepted even when no entry has one yet."""
    schema = json.loads((contracts_root() / "schemas" / "operation.schema.json").read_text("utf-8"))
    return frozenset(schema["properties"]["category"]["enum"])


def load_vector(docs: Mapping[str, str]) -> tuple[Any, str | None]:
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


def ranked_scores(ranker: Any, query: str, names: list[str]) -> dict[str, float]:
    """``{name: score}`` over ``names`` from a ranker whose ``rank(query)`` lists (name, score)."""
    try:
        pairs = ranker.rank(query, names=names)
    except TypeError:
        pairs = ranker.rank(query)
    wanted = set(names)
    scores = {n: float(s) for n, s in pairs if n in wanted}
    return {n: scores.get(n, 0.0) for n in names}


def all_scores(ranker: Any, query: str, names: list[str]) -> dict[str, float]:
    """Like ``ranked_scores``, without the sort: a ranker's ``scores(query)`` where it has one (every name it knows)."""
    score_all = getattr(ranker, "scores", None)
    if not callable(score_all):
        return ranked_scores(ranker, query, names)
    scored = score_all(query)
    return {n: float(scored.get(n, 0.0)) for n in names}
