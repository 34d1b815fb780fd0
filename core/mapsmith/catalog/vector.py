"""Vector ranking of catalog entries with static word embeddings committed in this package.

The embeddings are a table in ``mapsmith/catalog/data/``: one 128-number row per WordPiece of the
all-MiniLM-L6-v2 vocabulary (30,522 rows, int8 with one scale per row, about 4 MB), distilled once from
that sentence-transformers model (Apache-2.0) by ``benchmarks/build_static_model.py``;
``data/PROVENANCE.md`` says from which file, how, and with which checksums. Static means a text's vector
is the mean of its pieces' rows: no transformer runs here, no network, no model download, only numpy.
The tokenizer is BERT's uncased one (basic split, then greedy WordPiece), written out below.

Each catalog document is split into passages (its lines: name, summary, distinguishes sentence,
keywords, ...) and each passage is embedded. Vectors are centred on the mean passage vector before
cosine similarity: mean-pooled static vectors all lean the same way, and without centring every
passage looks alike. An entry's score is its best passage's cosine with the query, rounded to nine
decimals so that ties (two entries sharing a keyword line) break by name on every machine.

What this module must never do:

* download anything: files that are missing or unreadable mean ``load()`` returns None and
  ``unavailable_reason()`` says why, and the lexical ranker answers instead;
* import numpy at module level: ``mapsmith.catalog`` is imported at start-up and the table is paid
  for by the first search that asks for it;
* use files other than the pinned ones: every file's sha256 is checked before it is used, since other
  bytes are other vectors, and the golden-vector test would no longer describe what runs.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DATA_DIR",
    "MODEL_FILES",
    "MODEL_NAME",
    "Encoder",
    "StaticModel",
    "VectorRanker",
    "basic_tokens",
    "load",
    "load_encoder",
    "passages",
    "unavailable_reason",
    "wordpiece_ids",
]

MODEL_NAME = "all-MiniLM-L6-v2 static (128 dims, int8), distilled by benchmarks/build_static_model.py"
DATA_DIR = Path(__file__).resolve().parent / "data"
# file -> sha256; the build script prints these, PROVENANCE.md records them.
MODEL_FILES = {
    "vectors": ("minilm_static_int8.npy", "9e40148b10e90c258f9ff924d0793cac062bf09c61eeb962f999a6940a91856b"),
    "scales": ("minilm_static_scales.npy", "b23ac32848b990a0187486ef393574711603dd65740f8d2b76a1ae0ccaae2724"),
    "vocab": ("minilm_vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
}
_UNKNOWN = "[UNK]"
_MAX_WORD_CHARS = 100  # BERT's WordPiece: a longer word is one unknown piece
_SCORE_DECIMALS = 9

# texts -> one vector each: the committed model answers an array, a test's fake encoder lists
Encoder = Callable[[Sequence[str]], "Sequence[Sequence[float]] | np.ndarray"]

_unavailable: str | None = None
_model: StaticModel | None = None


def unavailable_reason() -> str | None:
    """Why the last ``load()`` or ``load_encoder()`` returned None, or None if it did not."""
    return _unavailable


# -- BERT uncased tokenization ---------------------------------------------------------------------


def _is_punctuation(ch: str) -> bool:
    # BERT counts every non-alphanumeric ASCII symbol as punctuation, as well as Unicode's P* classes.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def basic_tokens(text: str) -> list[str]:
    """BERT's basic uncased tokenization: drop control characters, split on whitespace, lowercase,
    strip accents, and make every punctuation mark and CJK character a token of its own."""
    cleaned: list[str] = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD:
            continue
        if ch in " \t\n\r" or unicodedata.category(ch) == "Zs":
            cleaned.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf"):
            continue
        elif _is_cjk(cp):
            cleaned.append(f" {ch} ")
        else:
            cleaned.append(ch)
    out: list[str] = []
    for word in "".join(cleaned).split():
        word = unicodedata.normalize("NFD", word.lower())
        word = "".join(ch for ch in word if unicodedata.category(ch) != "Mn")
        current = ""
        for ch in word:
            if _is_punctuation(ch):
                if current:
                    out.append(current)
                    current = ""
                out.append(ch)
            else:
                current += ch
        if current:
            out.append(current)
    return out


def wordpiece_ids(text: str, vocab: Mapping[str, int]) -> list[int]:
    """The WordPiece ids of ``text`` (greedy longest match, ``##`` continuations); a word that cannot
    be split into known pieces is the single ``[UNK]`` id."""
    unknown = vocab[_UNKNOWN]
    ids: list[int] = []
    for word in basic_tokens(text):
        if len(word) > _MAX_WORD_CHARS:
            ids.append(unknown)
            continue
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    found = vocab[piece]
                    break
                end -= 1
            if found is None:
                pieces = [unknown]
                break
            pieces.append(found)
            start = end
        ids.extend(pieces)
    return ids


# -- the static model ------------------------------------------------------------------------------


class StaticModel:
    """The committed table: ``encode(texts)`` is, per text, the mean of its known pieces' rows (zeros
    for a text without one). Raises ``ValueError`` when a file's sha256 is not the pinned one."""

    def __init__(self, data_dir: Path | None = None, files: Mapping[str, tuple[str, str]] | None = None) -> None:
        import io

        import numpy as np

        data_dir = DATA_DIR if data_dir is None else data_dir
        raw: dict[str, bytes] = {}
        for key, (name, expected) in (MODEL_FILES if files is None else files).items():
            content = (data_dir / name).read_bytes()
            got = hashlib.sha256(content).hexdigest()
            if got != expected:
                raise ValueError(f"{name} has sha256 {got}, MapSmith is pinned to {expected}")
            raw[key] = content
        self.vectors = np.load(io.BytesIO(raw["vectors"]), allow_pickle=False)
        self.scales = np.load(io.BytesIO(raw["scales"]), allow_pickle=False).astype(np.float64)
        pieces = raw["vocab"].decode("utf-8").split("\n")
        if pieces and pieces[-1] == "":
            pieces.pop()
        if self.vectors.shape[0] != len(pieces) or self.scales.shape != (len(pieces),):
            raise ValueError(
                f"the table has {self.vectors.shape[0]} rows and {self.scales.shape[0]} scales "
                f"for {len(pieces)} vocabulary pieces"
            )
        self.vocab = {piece: index for index, piece in enumerate(pieces)}
        self.dimensions = int(self.vectors.shape[1])
        self._unknown = self.vocab[_UNKNOWN]

    def ids(self, text: str) -> list[int]:
        """The WordPiece ids of ``text`` that have a row (unknown words are left out)."""
        return [i for i in wordpiece_ids(text, self.vocab) if i != self._unknown]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dimensions), dtype=np.float64)
        for row, text in enumerate(texts):
            ids = self.ids(text)
            if ids:
                out[row] = (self.vectors[ids].astype(np.float64) * self.scales[ids, None]).mean(axis=0)
        return out


def load_encoder() -> Encoder | None:
    """The committed model's ``texts -> vectors`` function, or None (see ``unavailable_reason()``).

    The table is read and checked once per process."""
    global _unavailable, _model
    if _model is None:
        try:
            _model = StaticModel()
        except (OSError, ValueError, KeyError, ImportError) as exc:
            _unavailable = f"the static embedding files in {DATA_DIR} cannot be used: {type(exc).__name__}: {exc}"
            return None
    _unavailable = None
    return _model.encode


def load(docs: Mapping[str, str]) -> VectorRanker | None:
    """A ``VectorRanker`` over ``docs`` with the committed static embeddings, or None when they cannot be
    read (``unavailable_reason()`` says why)."""
    encode = load_encoder()
    if encode is None:
        return None
    return VectorRanker(docs, encode)


def passages(text: str) -> list[str]:
    """The non-blank lines of ``text``, stripped: what is embedded, one vector each."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


class VectorRanker:
    """Cosine similarity between a query and each document's best passage, on centred static vectors.

    ``encode`` maps a list of texts to one vector each (the committed model's encoder; tests hand in a
    fake one). Documents are embedded once, here; ``rank`` embeds only the query.
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
        # Passages are stored document by document, so each document's passages are one run: its best cosine
        # is a maximum.reduceat over the runs' starts (np.maximum.at, unbuffered, took 25 ms over QGIS's 400).
        self._with_passages = np.unique(self._owners)
        self._run_starts = np.searchsorted(self._owners, self._with_passages)
        vectors = np.asarray(encode(texts), dtype=np.float64) if texts else np.zeros((0, 0))
        self.dimensions = int(vectors.shape[1]) if vectors.size else 0
        self._mean = vectors.mean(axis=0) if vectors.size else np.zeros(self.dimensions)
        self._passages = _unit_rows(vectors - self._mean) if vectors.size else vectors

    def embed(self, text: str) -> list[float]:
        """The model's raw vector for ``text`` (before centring), as a list of floats."""
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
        # einsum, not @: a matrix-vector product goes to BLAS, whose threads cost 5-10x more than the product
        # itself on a loaded machine (measured: 13-22 ms against 4 ms over QGIS's 8,346 passages, 2 busy cores).
        cosines = np.einsum("ij,j->i", self._passages, q / norm)
        best = np.full(len(self.names), -np.inf)
        best[self._with_passages] = np.maximum.reduceat(cosines, self._run_starts)
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
