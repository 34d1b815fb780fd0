"""How long one ``list_operations`` search takes over the built-in catalogue and with QGIS's 341 algorithms in.

``bench_discovery.py`` times the real and a synthetic catalogue; this adds the catalogue an installed QGIS
makes, built from the committed extract (``tests/data/qgis_algorithms.json``) so it runs without QGIS. Each
request of the query file is searched with nothing declared and with every facet its author declared, with
``engine="auto"``; the first call (the index build) is left out. It prints medians and the 90th percentile and
asserts nothing: the suite times nothing.

    python benchmarks/discovery_latency.py [--passes 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from discovery_report import ROWS, declared_facets, load_queries, make_app  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    from mapsmith.catalog.search import discover

    data = load_queries()
    texts = [r for r in data["requests"] + data["unanswerable"]]
    for label, app in (("built-in", make_app()), ("with QGIS", make_app(with_qgis=True))):
        discover(app, "warm up the index")
        for row, names in (ROWS[0], ROWS[-1]):
            times = []
            for _ in range(args.passes):
                for r in texts:
                    facets = declared_facets(r["facets"], names)
                    start = time.perf_counter()
                    discover(app, r["request"], **facets)
                    times.append((time.perf_counter() - start) * 1000)
            times.sort()
            print(
                f"{label:9} {len(app.host.contracts):4} entries, {row:16}: median {statistics.median(times):6.2f} ms, "
                f"p90 {times[int(0.9 * len(times))]:6.2f} ms over {len(times)} searches"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
