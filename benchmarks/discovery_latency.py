"""How long one ``list_operations`` search takes over the built-in catalogue and with QGIS's 341 algorithms in.

``bench_discovery.py`` times the real and a synthetic catalogue; this adds the catalogue an installed QGIS
makes, built from the committed extract (``tests/data/qgis_algorithms.json``) so it runs without QGIS. Each
request of the query file, answerable or not, is searched with nothing declared and with every facet its
author declared, with ``engine="auto"``; the first call (the index build) is left out and timed on its own.
It asserts nothing (the suite times nothing). With ``--write`` it records the medians, the 90th percentile,
the machine, the commit and the load average in ``benchmarks/results/discovery_latency.json``, which
``discovery_report.py`` renders into docs/discovery.md's latency section (goal: median under 20 ms with
QGIS's algorithms in the catalogue).

    python benchmarks/discovery_latency.py [--passes 3] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import code_state, machine  # noqa: E402
from discovery_report import LATENCY, ROWS, declared_facets, load_queries, make_app  # noqa: E402


def measure(passes: int) -> dict[str, Any]:
    from mapsmith.catalog import index
    from mapsmith.catalog.search import discover

    data = load_queries()
    texts = data["requests"] + data["unanswerable"]
    loads = [os.getloadavg()[0]]
    catalogues = []
    for label, app in (("built-in", make_app()), ("with QGIS", make_app(with_qgis=True))):
        index.INDEXES.clear()  # the index build is timed: none cached from an earlier catalogue
        start = time.perf_counter()
        discover(app, "warm up the index")
        build_ms = (time.perf_counter() - start) * 1000
        rows = []
        for row, names in (ROWS[0], ROWS[-1]):
            times = []
            for _ in range(passes):
                for r in texts:
                    facets = declared_facets(r["facets"], names)
                    start = time.perf_counter()
                    discover(app, r["request"], **facets)
                    times.append((time.perf_counter() - start) * 1000)
            times.sort()
            rows.append(
                {
                    "row": row,
                    "searches": len(times),
                    "median_ms": round(statistics.median(times), 2),
                    "p90_ms": round(times[int(0.9 * len(times))], 2),
                    "max_ms": round(times[-1], 2),
                }
            )
            loads.append(os.getloadavg()[0])
        catalogues.append(
            {"catalogue": label, "entries": len(app.host.contracts), "index_build_ms": round(build_ms, 1), "rows": rows}
        )
    return {
        "command": "python benchmarks/discovery_latency.py --write",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "passes": passes,
        "load_average_1min": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
        "machine": machine(),
        **code_state(),
        "catalogues": catalogues,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--write", action="store_true", help=f"record the result in {LATENCY}")
    args = parser.parse_args(argv)
    result = measure(args.passes)
    for c in result["catalogues"]:
        print(f"{c['catalogue']:9} {c['entries']:4} entries, index build {c['index_build_ms']:.0f} ms")
        for r in c["rows"]:
            print(
                f"  {r['row']:16}: median {r['median_ms']:6.2f} ms, p90 {r['p90_ms']:6.2f} ms, "
                f"max {r['max_ms']:6.2f} ms over {r['searches']} searches"
            )
    print(f"load average {result['load_average_1min']}")
    if args.write:
        tmp = LATENCY.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        tmp.replace(LATENCY)
        print(f"wrote {LATENCY}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
