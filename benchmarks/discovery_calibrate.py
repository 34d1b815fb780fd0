"""Calibrate the ``none`` status: the support thresholds of ``mapsmith.catalog.support``, measured.

For every request of ``tests/data/discovery_queries.json``, and every worked example's description in the
built-in contracts (answerable by construction: each says what its operation does in a user's words), it
computes the support signals over the built-in catalogue (lexical support: summed idf of the request's
words found in the entry documents; vector support: best cosine with any entry passage; coverage: the share of
its idf the catalogue knows), then tries every pair of lexical and vector thresholds taken from the measured
values, and with the pair fixed sets the coverage cut halfway between the lowest answerable coverage and the
highest unanswerable one below it. It keeps the pair that answers the most unanswerable
requests ``none`` while answering at most ``MAX_WRONG_NONE_SHARE`` of the answerable texts ``none`` and no
contract example (ties: the smallest thresholds, the most cautious). It prints the pair, to be copied into
``support.py`` with this command named, and what it reaches; ``tests/catalog/test_statuses.py`` checks that
the committed constants still meet the goal.

    python benchmarks/discovery_calibrate.py            # the none thresholds
    python benchmarks/discovery_calibrate.py --scope    # the out-of-scope leads, on the calibration half
    python benchmarks/discovery_calibrate.py --fusion   # found@1 of the fusion's k and weights (minutes)

``--scope`` calibrates ``support.SCOPE_MIN_LEXICAL_LEAD`` and ``SCOPE_MIN_VECTOR_LEAD`` (how clearly a declared
out-of-scope task of ``mapsmith.catalog.scope`` must outrank every operation) on the calibration half of the
query file only (``in_calibration_half``: the requests whose id's sha256 starts with an even byte) and the
contracts' examples, and prints what the pair reaches on the other, held-out half, which it never saw.

``--fusion`` counts found@1 over the rows nothing / + wanted output / + geometry type of the page, over the
built-in catalogue and with QGIS's algorithms (``tests/data/qgis_algorithms.json``), for lexical alone and
for each fusion setting tried; ``search.RRF_K`` and ``search.RRF_WEIGHTS`` hold the best.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from discovery_report import QUERIES, in_calibration_half, load_queries, make_app  # noqa: E402

# At most this share of the answerable texts may be answered none; the goal is under 2 %, this keeps a margin
# for requests nobody has written yet.
MAX_WRONG_NONE_SHARE = 0.01


@dataclass(frozen=True)
class Calibration:
    lexical: float
    vector: float
    coverage: float
    answerable_none: int
    answerable: int
    offtopic_none: int
    offtopic: int


def signals(app: Any, text: str) -> tuple[float, float, float]:
    """Lexical support, vector support and coverage of ``text`` over the catalogue of ``app``."""
    from mapsmith.catalog.search import _index, _rank
    from mapsmith.catalog.support import coverage, lexical_support

    idx = _index(app.host.contracts)
    ranker, reason = idx.vector()
    if ranker is None:
        raise SystemExit(f"the vector ranker is unavailable ({reason}); nothing to calibrate")
    names = list(idx.contracts)
    vector = _rank(ranker, text, names)
    return (
        lexical_support(text, idx.vocabulary, len(names)),
        max(vector.values(), default=0.0),
        coverage(text, idx.vocabulary, len(names)),
    )


def answerable_texts(data: dict[str, Any], app: Any) -> list[str]:
    """The answerable requests, then every example description of the built-in contracts (no duplicates)."""
    texts = [r["request"] for r in data["requests"]]
    for name in sorted(app.host.contracts):
        for example in app.host.contracts[name].examples:
            text = str(example.get("description") or "")
            if text and text not in texts:
                texts.append(text)
    return texts


def calibrate(path: Path = QUERIES, app: Any = None) -> Calibration:
    data = load_queries(path)
    app = app or make_app()
    texts = answerable_texts(data, app)
    answerable = [signals(app, text) for text in texts]
    max_wrong = int(MAX_WRONG_NONE_SHARE * len(answerable))
    # A contract's own example answered none is a plain error (tests/catalog/test_every_entry.py): none allowed.
    examples = answerable[len(data["requests"]) :]
    offtopic = [signals(app, r["request"]) for r in data["unanswerable"]]
    lexical_cuts = sorted({0.0, *(round(a, 6) for a, _, _ in answerable + offtopic)})
    vector_cuts = sorted({round(v, 2) for _, v, _ in answerable + offtopic} | {0.0})
    best: tuple[int, float, float, int] | None = None
    for lex in lexical_cuts:
        for vec in vector_cuts:
            wrong = sum(1 for a, v, _ in answerable if a <= lex and v <= vec)
            if wrong > max_wrong or any(a <= lex and v <= vec for a, v, _ in examples):
                break  # larger vector cuts only answer more requests none
            caught = sum(1 for a, v, _ in offtopic if a <= lex and v <= vec)
            key = (caught, -lex, -vec, wrong)
            if best is None or key > (best[0], -best[1], -best[2], best[3]):
                best = (caught, lex, vec, wrong)
    assert best is not None
    _, lex, vec, _ = best

    # Then coverage, with the pair fixed. It must answer no answerable text none (a request the pair lets through
    # is not to be lost to a second rule), and the cut sits halfway between the lowest answerable coverage and
    # the highest unanswerable one below it, the widest margin the data allows on both sides.
    def rule(s: tuple[float, float, float], cut: float) -> bool:
        return (s[0] <= lex and s[1] <= vec) or s[2] <= cut

    lowest = min(c for _, _, c in answerable)
    below = [c for _, _, c in offtopic if c < lowest]
    chosen = round((max(below) + lowest) / 2, 4) if below else 0.0
    wrong = sum(rule(s, chosen) for s in answerable)
    caught = sum(rule(s, chosen) for s in offtopic)
    return Calibration(lex, vec, chosen, wrong, len(answerable), caught, len(offtopic))


def scope_leads(app: Any, text: str) -> tuple[float, float, bool]:
    """The best out-of-scope task's lead over the best operation (BM25 over both, best-passage cosine), and
    whether the support signals alone already answer ``text`` none."""
    from mapsmith.catalog import support
    from mapsmith.catalog.search import _index, _rank

    idx = _index(app.host.contracts)
    ranker, reason = idx.vector()
    if ranker is None:
        raise SystemExit(f"the vector ranker is unavailable ({reason}); nothing to calibrate")
    entries, tasks = list(idx.contracts), list(idx.scope_docs)
    vector = _rank(ranker, text, entries + tasks)
    assert idx.scope_lexical is not None
    lexical = idx.scope_lexical.scores(text)
    best_task = max(tasks, key=lambda n: (vector[n], lexical[n], n))
    lexical_lead = max(lexical[n] for n in tasks) - max(lexical[n] for n in entries)
    vector_lead = vector[best_task] - max(vector[n] for n in entries)
    already = support.is_unsupported(*signals(app, text))
    return lexical_lead, vector_lead, already


@dataclass(frozen=True)
class ScopeCalibration:
    lexical: float
    vector: float
    # (answerable answered none, answerable, unanswerable newly answered none, unanswerable not none by support)
    calibration: tuple[int, int, int, int]
    held_out: tuple[int, int, int, int]


def calibrate_scope(path: Path = QUERIES, app: Any = None) -> ScopeCalibration:
    data = load_queries(path)
    app = app or make_app()
    examples = answerable_texts({"requests": []}, app)
    halves: dict[bool, tuple[list[tuple[float, float, bool]], list[tuple[float, float, bool]]]] = {}
    for side in (True, False):
        answerable = [scope_leads(app, r["request"]) for r in data["requests"] if in_calibration_half(r["id"]) == side]
        offtopic = [
            scope_leads(app, r["request"]) for r in data["unanswerable"] if in_calibration_half(r["id"]) == side
        ]
        halves[side] = (answerable, offtopic)
    example_leads = [scope_leads(app, text) for text in examples]
    answerable, offtopic = halves[True]
    max_wrong = int(MAX_WRONG_NONE_SHARE * len(answerable))
    cuts_l = sorted({round(a, 4) for a, _, _ in answerable + offtopic + example_leads} | {0.0})
    cuts_v = sorted({round(v, 2) for _, v, _ in answerable + offtopic + example_leads} | {0.0})

    def hits(rows: list[tuple[float, float, bool]], lex: float, vec: float) -> int:
        return sum(1 for a, v, already in rows if not already and a > lex and v > vec)

    best: tuple[int, float, float] | None = None
    for lex in cuts_l:
        for vec in cuts_v:
            if hits(answerable, lex, vec) > max_wrong or hits(example_leads, lex, vec):
                continue
            caught = hits(offtopic, lex, vec)
            # ties: the larger leads, the more cautious rule
            if best is None or (caught, lex + vec) > (best[0], best[1] + best[2]):
                best = (caught, lex, vec)
    assert best is not None
    _, lex, vec = best

    def score(side: bool) -> tuple[int, int, int, int]:
        ans, off = halves[side]
        return (hits(ans, lex, vec), len(ans), hits(off, lex, vec), sum(1 for *_, already in off if not already))

    return ScopeCalibration(lex, vec, score(True), score(False))


FUSION_KS = (5, 20, 60)
FUSION_LEXICAL_WEIGHTS = (1.0, 1.5, 2.0)
OWN_PRIORS = (0.0, 0.1, 0.2, 0.35)


def fusion_grid() -> None:
    from discovery_report import ROWS, declared_facets

    from mapsmith.catalog import search

    data = load_queries()
    rows = ROWS[::2]

    def found_at_1(app: Any, engine: str) -> int:
        hits = 0
        for _, names in rows:
            for r in data["requests"]:
                answer = search.discover(app, r["request"], engine=engine, **declared_facets(r["facets"], names))
                first = [c["operation"] for c in answer["candidates"]][:1]
                hits += bool(first) and first[0] in r["accept"]
        return hits

    saved = search.RRF_K, search.RRF_WEIGHTS, search.OWN_PRIOR
    total = len(rows) * len(data["requests"])
    try:
        qgis_app = make_app(with_qgis=True)
        for prior in OWN_PRIORS:
            search.OWN_PRIOR = prior
            first = [c["operation"] for c in search.discover(qgis_app, "hexagon grid over the country")["candidates"]]
            print(
                f"with QGIS: own prior {prior}: fusion {found_at_1(qgis_app, 'fusion')}/{total}; "
                f"'hexagon grid over the country' first: {first[0]}",
                flush=True,
            )
        search.OWN_PRIOR = 0.0
        for label, app in (("built-in", make_app()), ("with QGIS", make_app(with_qgis=True))):
            print(f"{label}: lexical {found_at_1(app, 'lexical')}/{total}", flush=True)
            for k in FUSION_KS:
                for w in FUSION_LEXICAL_WEIGHTS:
                    search.RRF_K, search.RRF_WEIGHTS = k, (w, 1.0)
                    print(f"{label}: fusion k={k} weights=({w}, 1.0) {found_at_1(app, 'fusion')}/{total}", flush=True)
    finally:
        search.RRF_K, search.RRF_WEIGHTS, search.OWN_PRIOR = saved


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--fusion" in args:
        fusion_grid()
        return 0
    if "--scope" in args:
        sc = calibrate_scope()
        print(f"SCOPE_MIN_LEXICAL_LEAD = {sc.lexical}")
        print(f"SCOPE_MIN_VECTOR_LEAD = {sc.vector}")
        for label, (wrong, n, caught, m) in (("calibration half", sc.calibration), ("held-out half", sc.held_out)):
            print(f"{label}: answerable answered none {wrong}/{n}; unanswerable newly answered none {caught}/{m}")
        return 0
    c = calibrate()
    print(f"NONE_MAX_LEXICAL_SUPPORT = {c.lexical:.6f}")
    print(f"NONE_MAX_VECTOR_SUPPORT = {c.vector:.2f}")
    print(f"NONE_MAX_COVERAGE = {c.coverage:.4f}")
    print(f"answerable (requests and contract examples) answered none: {c.answerable_none}/{c.answerable}")
    print(f"unanswerable answered none: {c.offtopic_none}/{c.offtopic}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
