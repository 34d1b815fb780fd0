"""Turn a discovery log into candidate test cases for ``tests/data/discovery_queries.json``, and flag misses.

``MAPSMITH_DISCOVERY_LOG`` holds one JSON line per search (``query``, ``facets``, ``engine``,
``status``, ``candidates`` delivered) and, from the runner path, ``{"ran": name}`` when an operation
ran. A search followed by a run (before the next search) is a labelled case: the request, the facets
the caller declared, and the operation it went on to run as the accepted answer. Each case is
checked against what the search delivered:

* ``miss``: the operation that ran was not among the candidates delivered;
* ``low``: it was delivered, but not among the first three;
* ``empty``: the facets left nothing (the answer was ``empty``);
* ``unsure``: the rankers disagreed and the caller had to choose;
* ``no-run``: nothing ran after the search (gave up, or the catalog could not answer: a candidate
  for the ``unanswerable`` list).

It prints; it never writes. A person reads the cases, rephrases nothing, checks the accepted
operation is one a professional would accept, adds any other acceptable ones, and pastes them into
the query file by hand. Requests already in the query file are marked, not repeated.

    python benchmarks/log_to_cases.py LOG [--queries tests/data/discovery_queries.json] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
QUERIES = REPO / "tests" / "data" / "discovery_queries.json"
FACET_KEYS = ("input_kind", "produces", "dataset_count", "geometry_types")
TOP = 3


@dataclass
class Search:
    line: int
    query: str
    facets: dict[str, Any]
    engine: str
    status: str
    candidates: list[str]
    ran: list[str] = field(default_factory=list)

    def flags(self) -> list[str]:
        out = []
        if self.status in ("empty", "unsure"):
            out.append(self.status)
        if not self.ran:
            out.append("no-run")
        for name in self.ran:
            if name not in self.candidates:
                out.append("miss")
            elif name not in self.candidates[:TOP]:
                out.append("low")
        return sorted(set(out))


def read_log(lines: Iterable[str]) -> tuple[list[Search], list[str]]:
    """The searches of a log, each with what ran after it, and a note per line that could not be read."""
    searches: list[Search] = []
    problems: list[str] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not JSON ({exc.msg})")
            continue
        if not isinstance(record, Mapping):
            problems.append(f"line {number}: not an object")
        elif "ran" in record:
            if searches:
                searches[-1].ran.append(str(record["ran"]))
            else:
                problems.append(f"line {number}: {record['ran']!r} ran before any search")
        elif "query" in record:
            searches.append(
                Search(
                    line=number,
                    query=str(record.get("query") or ""),
                    facets=dict(record.get("facets") or {}),
                    engine=str(record.get("engine")),
                    status=str(record.get("status")),
                    candidates=[str(c) for c in record.get("candidates") or []],
                )
            )
        else:
            problems.append(f"line {number}: neither a search nor a run")
    return searches, problems


def case_facets(declared: Mapping[str, Any]) -> dict[str, Any]:
    """The log's declared facets in the query file's form: one value where one was declared."""
    out: dict[str, Any] = {}
    for key in FACET_KEYS:
        value = declared.get(key)
        if isinstance(value, list) and len(value) == 1 and key != "geometry_types":
            value = value[0]
        out[key] = value
    return out


def _slug(text: str, taken: set[str]) -> str:
    base = "-".join(re.findall(r"[a-z0-9]+", text.lower())[:5]) or "request"
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def cases(searches: list[Search], known: set[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(answerable candidates, unanswerable candidates) in the query file's format, with flags."""
    taken: set[str] = set()
    answerable, unanswerable = [], []
    seen: set[tuple[str, str]] = set()
    for s in searches:
        if not s.query.strip():
            continue
        key = (s.query, json.dumps(s.facets, sort_keys=True))
        if key in seen:
            continue
        seen.add(key)
        case: dict[str, Any] = {"id": _slug(s.query, taken), "request": s.query, "facets": case_facets(s.facets)}
        note = {
            "log_line": s.line,
            "engine": s.engine,
            "status": s.status,
            "flags": s.flags(),
            "delivered_first": s.candidates[:TOP],
            "already_in_query_file": s.query.strip().lower() in known,
        }
        if s.ran:
            answerable.append({**case, "accept": sorted(set(s.ran)), "_review": note})
        else:
            unanswerable.append({**case, "_review": note})
    return answerable, unanswerable


def known_requests(path: Path) -> set[str]:
    if not path.exists():
        return set()
    data = json.loads(path.read_text(encoding="utf-8"))
    return {r["request"].strip().lower() for r in data.get("requests", []) + data.get("unanswerable", [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="a MAPSMITH_DISCOVERY_LOG file (JSON lines)")
    parser.add_argument("--queries", type=Path, default=QUERIES, help="query file, to mark requests already in it")
    parser.add_argument("--json", action="store_true", help="print only the candidate cases, as JSON")
    args = parser.parse_args(argv)
    if not args.log.is_file():
        print(f"no such log: {args.log}", file=sys.stderr)
        return 2
    with args.log.open(encoding="utf-8") as fh:
        searches, problems = read_log(fh)
    answerable, unanswerable = cases(searches, known_requests(args.queries))
    out = {"requests": answerable, "unanswerable": unanswerable}
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return 0
    flags = Counter(f for s in searches for f in s.flags())
    print(f"{len(searches)} searches, {sum(bool(s.ran) for s in searches)} followed by a run")
    print("flags: " + (", ".join(f"{f} {n}" for f, n in sorted(flags.items())) or "none"))
    for s in searches:
        if s.flags():
            ran = ", ".join(s.ran) or "nothing"
            print(f"  line {s.line}: [{', '.join(s.flags())}] {s.query!r} -> ran {ran}; delivered {s.candidates[:TOP]}")
    for p in problems:
        print(f"  skipped {p}")
    print("\ncandidate cases (review, then paste by hand into the query file; the '_review' notes are not part of it):")
    print(json.dumps(out, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
