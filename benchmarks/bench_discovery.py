"""How long ``list_operations`` takes to answer: with the real catalog, and with 1,000 synthetic entries.

Each call is one search as an agent makes it: a request of ``tests/data/discovery_queries.json`` with
every facet its author declared, and the same request with no facet (the whole catalog to rank).
The clock covers the call only; the first call on a catalog builds its index (BM25 postings, and the
entry embeddings when the vector ranker loads) and is timed apart as ``cold_first_call_ms``. The
synthetic catalog repeats the built-in contracts under new names with a distinct word added to each
summary, so that the index really holds 1,000 documents.

What is timed is ``app.list_operations(query, ...)`` when the service has been wired to discovery,
else ``mapsmith.catalog.search.discover(app, query, ...)`` (the function list_operations answers
with); the results file says which. Targets: median under 20 ms with the real catalog and under
100 ms with 1,000 entries, for ``engine="auto"`` (the default). It measures only: it never asserts
and the test suite times nothing.

Writes ``benchmarks/results/discovery.json``.

    python benchmarks/bench_discovery.py [--passes 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import inspect
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from common import code_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "discovery.json"
QUERIES = REPO / "tests" / "data" / "discovery_queries.json"
COMMAND = "python benchmarks/bench_discovery.py --passes {passes}"
SYNTHETIC_ENTRIES = 1000
TARGETS_MS = {"real": 20.0, "synthetic": 100.0}
ENGINES = ("auto", "lexical", "vector", "fusion")


class CatalogOnly:
    """What discovery reads of a service (contracts, environment, workspace), over a given catalog."""

    def __init__(self, contracts: Mapping[str, Any]) -> None:
        from mapsmith.workspace import Workspace

        self.host = SimpleNamespace(contracts=dict(contracts))
        self.environ: dict[str, str] = {}
        self.workspace = Workspace.from_env({})


def synthetic_contracts(n: int = SYNTHETIC_ENTRIES) -> dict[str, Any]:
    """``n`` entries: the built-in contracts again and again, renamed, each summary with its own word."""
    from mapsmith.contracts import load_builtin_contracts

    real = [c for _, c in sorted(load_builtin_contracts().items())]
    out = {}
    for i in range(n):
        base = real[i % len(real)]
        name = f"{base.name}_synthetic_{i:04d}"
        out[name] = dataclasses.replace(base, name=name, summary=f"{base.summary} variant{i:04d}")
    return out


def searches() -> list[tuple[str, dict[str, Any]]]:
    """(query, facets) pairs: every request with its declared facets, and again with none."""
    data = json.loads(QUERIES.read_text(encoding="utf-8"))
    out = []
    for r in data["requests"] + data["unanswerable"]:
        facets = {k: v for k, v in r["facets"].items() if v is not None}
        out += [(r["request"], facets), (r["request"], {})]
    return out


def caller(app: Any) -> tuple[str, Callable[..., Any]]:
    """``app.list_operations`` when it takes a query (wired to discovery), else ``discover`` itself."""
    from mapsmith.catalog.search import discover

    method = getattr(app, "list_operations", None)
    if method is not None and "query" in inspect.signature(method).parameters:
        return "app.list_operations", method
    return "mapsmith.catalog.search.discover", lambda query, **kw: discover(app, query, **kw)


def time_engine(
    call: Callable[..., Any], engine: str, pairs: list[tuple[str, dict[str, Any]]], passes: int
) -> dict[str, Any] | None:
    from mapsmith.errors import MapSmithError

    start = time.perf_counter()
    try:
        first = call(pairs[0][0], engine=engine, **pairs[0][1])
    except MapSmithError as exc:
        if exc.code == "ENGINE_UNAVAILABLE":
            return None
        raise
    cold = time.perf_counter() - start
    times = []
    for _ in range(passes):
        for query, facets in pairs:
            t0 = time.perf_counter()
            call(query, engine=engine, **facets)
            times.append(time.perf_counter() - t0)
    ms = sorted(t * 1000 for t in times)
    return {
        "engine": engine,
        "engine_used": first.get("engine"),
        "calls": len(ms),
        "median_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3),
        "min_ms": round(ms[0], 3),
        "max_ms": round(ms[-1], 3),
        "cold_first_call_ms": round(cold * 1000, 3),
    }


def machine() -> dict[str, Any]:
    import mapsmith

    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "mapsmith_version": mapsmith.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3, help="passes over every search (default 3)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"where to write (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error("--passes must be at least 1")
    from mapsmith.app import MapSmith

    pairs = searches()
    load_before = os.getloadavg()[0]
    catalogs: dict[str, Any] = {"real": MapSmith({}), "synthetic": CatalogOnly(synthetic_contracts())}
    series = []
    timed = {}
    for catalog, app in catalogs.items():
        what, call = caller(app)
        timed[catalog] = what
        for engine in ENGINES:
            timing = time_engine(call, engine, pairs, args.passes)
            if timing is None:
                series.append({"catalog": catalog, "engine": engine, "unavailable": True})
                continue
            series.append({"catalog": catalog, "entries": len(app.host.contracts), "timed": what, **timing})
    load_after = os.getloadavg()[0]

    def auto(catalog: str) -> dict[str, Any]:
        return next(s for s in series if s["catalog"] == catalog and s["engine"] == "auto")

    result: dict[str, Any] = {
        "benchmark": "discovery",
        "description": "Milliseconds per list_operations search (query plus declared facets, and the query alone), "
        "with the real catalog and with 1,000 synthetic entries, per engine; the index build is timed apart.",
        "command": COMMAND.format(passes=args.passes),
        "date": dt.date.today().isoformat(),
        "machine": {**machine(), "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)}},
        "code": code_state(),
        "timed": timed,
        "searches": len(pairs),
        "passes": args.passes,
        "series": series,
        "target": {
            "real_catalog_median_ms": TARGETS_MS["real"],
            "real_catalog_met": auto("real")["median_ms"] < TARGETS_MS["real"],
            "synthetic_entries": SYNTHETIC_ENTRIES,
            "synthetic_median_ms": TARGETS_MS["synthetic"],
            "synthetic_met": auto("synthetic")["median_ms"] < TARGETS_MS["synthetic"],
        },
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for s in series:
        if s.get("unavailable"):
            print(f"{s['catalog']:9} {s['engine']:7} unavailable")
        else:
            print(
                f"{s['catalog']:9} {s['entries']:5} entries {s['engine']:7} ({s['engine_used']}): median "
                f"{s['median_ms']:.2f} ms, p90 {s['p90_ms']:.2f} ms, first call {s['cold_first_call_ms']:.1f} ms"
            )
    print(f"targets met: real {result['target']['real_catalog_met']}, synthetic {result['target']['synthetic_met']}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
