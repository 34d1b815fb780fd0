"""Measure operation discovery over ``tests/data/discovery_queries.json`` and write ``docs/discovery.md``.

Discovery is a retrieval problem, so it is measured like one. Every request of the query file is put
to ``mapsmith.catalog.search.discover`` five times, declaring one more facet each time (nothing → the
data kind held → the output wanted → the dataset count → the geometry types), once per ranker. Per
facet row and ranker the page shows:

* remaining: how many catalog entries the declared facets leave (mean and median over the answerable
  requests), computed by ``mapsmith.catalog.facets.filter_entries`` alone;
* kept: the share of answerable requests whose remaining set still holds an accepted operation (the
  ceiling of every other column: a facet that removes the right answer cannot be ranked back);
* found@3: the share of answerable requests with an accepted operation among the ranker's first three;
* delivered: the share with an accepted operation among the candidates the answer delivers (the whole
  remaining set when the answer is ``choose``);
* refused: the share of the requests the catalog cannot answer that get ``none``, ``empty`` or
  ``unsure`` instead of a confident list; ``none`` alone is counted too, and the answerable requests
  wrongly answered ``none``.

Rankers are measured one by one (``lexical``, ``vector`` and their reciprocal rank fusion ``fusion``);
the page says which one measures best (found@1 summed over the rows), which is what ``auto`` must be
(``mapsmith.catalog.search.AUTO_ENGINE``; a test holds the two together). A second table measures the same
requests with QGIS's 341 algorithms in the catalogue, from ``tests/data/qgis_algorithms.json`` (QGIS's own
listing, definitions and help, committed by ``benchmarks/build_qgis_extract.py``), so the page renders the
same where QGIS is not installed; there only MapSmith's own operations count as found.

It reads only the repository (the query file, the built-in contracts, the rankers' files or installed
packages): no network, no model download. The page times nothing itself: its one timed section renders
``benchmarks/results/discovery_latency.json`` as ``discovery_latency.py --write`` recorded it, so the same
repository renders the same page; ``--check`` exits 1 when ``docs/discovery.md`` differs from what this script
renders (``tests/docs/test_discovery_report.py`` does the same).

    python benchmarks/discovery_report.py            # write docs/discovery.md
    python benchmarks/discovery_report.py --check    # exit 1 when the page is stale

What the discovery scripts share (the query file, the facet rows, the catalogue searched) is in
``discovery_common``; the page's sections drawn from other files (latency, embeddings, blind sets) in
``discovery_sections``.
"""

from __future__ import annotations

import argparse
import difflib
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The shared pieces are re-exported: the other discovery scripts and the page's test read them from here too.
from discovery_common import (  # noqa: E402
    QGIS_EXTRACT,
    QUERIES,
    RANKERS,
    REFUSING_STATUSES,
    REPO,
    ROWS,
    TOP,
    Discover,
    candidate_name,
    count_pct,
    declared_facets,
    in_calibration_half,
    load_queries,
    make_app,
    ordered_names,
)
from discovery_sections import (  # noqa: E402
    LATENCY,
    blind_history,
    blind_section,
    embeddings_section,
    latency_section,
)

__all__ = [
    "LATENCY",
    "QUERIES",
    "ROWS",
    "Cell",
    "Report",
    "best_engine",
    "blind_history",
    "build_page",
    "declared_facets",
    "found1_sums",
    "in_calibration_half",
    "latency_section",
    "load_queries",
    "main",
    "make_app",
    "measure",
    "render",
]

PAGE = REPO / "docs" / "discovery.md"
COMMAND = "python benchmarks/discovery_report.py"


@dataclass
class Cell:
    """The measurements of one facet row for one ranker."""

    found: int = 0
    found1: int = 0
    delivered: int = 0
    refused: int = 0  # unanswerable requests answered none, empty or unsure
    none: int = 0  # unanswerable requests answered none
    refused_answerable: int = 0  # answerable requests answered none, empty or unsure (false alarms)
    none_answerable: int = 0  # answerable requests answered none (the worst false alarm)
    unsure_answerable: int = 0  # answerable requests answered unsure
    unsure_listed: int = 0  # ... of which an accepted operation is among the delivered candidates
    relaxed: int = 0  # requests answered relaxed (all)
    misses: list[tuple[str, list[str], list[str]]] = field(default_factory=list)  # id, accepted, top 3


@dataclass
class Report:
    answerable: int
    unanswerable: int
    catalog_size: int
    rankers: dict[str, str]  # engine -> what it is, or why it is unavailable
    remaining: dict[str, list[int]]  # row -> remaining size per answerable request
    kept: dict[str, int]  # row -> answerable requests whose remaining set holds an accepted operation
    cells: dict[tuple[str, str], Cell]  # (row, engine) -> measurements
    statuses: dict[tuple[str, str], dict[str, int]]  # (row, engine) -> status counts over all requests
    scopes: dict[str, dict[str, int]] = field(default_factory=dict)  # scope -> statuses, nothing declared, auto
    catalog_names: list[str] = field(default_factory=list)
    # (row, engine) -> request id -> (answerable, status, found@1, out-of-scope task named or "")
    outcomes: dict[tuple[str, str], dict[str, tuple[bool, str, bool, str]]] = field(default_factory=dict)


def ranker_availability(app: Any, discover: Discover) -> dict[str, str]:
    """Per ranker, what it is (the page names it) or ``unavailable: <why>``, as ``discover`` sees it."""
    from mapsmith.catalog.index import LEXICAL_FIELD_WEIGHTS
    from mapsmith.errors import MapSmithError

    weighted = [
        f"the {field} {'twice' if times == 2 else f'{times} times'}"
        for field, times in LEXICAL_FIELD_WEIGHTS.items()
        if times != 1
    ]
    fields = f", an entry's fields counted as BM25F weights (`index.LEXICAL_FIELD_WEIGHTS`: {', '.join(weighted)})"
    out = {"lexical": "Okapi BM25 in plain Python (`mapsmith.catalog.lexical`)" + (fields if weighted else "")}
    try:
        discover(app, "", engine="vector")
    except MapSmithError as exc:
        if exc.code != "ENGINE_UNAVAILABLE":
            raise
        reason = str((exc.evidence or {}).get("reason") or exc.message)
        # The reason's wording depends on how Python failed to import (and names local paths), so
        # it goes to stderr; the page says only that the ranker was not measured.
        print(f"vector ranker unavailable: {reason}", file=sys.stderr)
        out["vector"] = "unavailable: `discover(app, query, engine='vector')` raises ENGINE_UNAVAILABLE"
        out["fusion"] = "unavailable: it fuses the vector ranker's order"
        return out
    from mapsmith.catalog import vector

    model = getattr(vector, "MODEL_NAME", None)
    source = f": {model}" if model else ""
    out["vector"] = f"static embeddings (`mapsmith.catalog.vector`){source}"
    from mapsmith.catalog.search import RRF_K

    out["fusion"] = f"reciprocal rank fusion of the two (k = {RRF_K}, `mapsmith.catalog.search.fuse`)"
    return out


def measure(
    data: Mapping[str, Any], app: Any = None, discover: Discover | None = None, engines_only: Sequence[str] = ()
) -> Report:
    from mapsmith.catalog.facets import entry_facets, filter_entries

    if app is None:
        app = make_app()
    if discover is None:
        from mapsmith.catalog.search import discover as discover_fn

        discover = discover_fn
    contracts = app.host.contracts
    entries = [entry_facets(contracts[name]) for name in sorted(contracts)]
    rankers = ranker_availability(app, discover)
    engines = [e for e in RANKERS if not rankers[e].startswith("unavailable")]
    if engines_only:
        engines = [e for e in engines if e in engines_only]
    requests, unanswerable = data["requests"], data["unanswerable"]

    report = Report(
        answerable=len(requests),
        unanswerable=len(unanswerable),
        catalog_size=len(entries),
        catalog_names=sorted(contracts),
        rankers=rankers,
        remaining={row: [] for row, _ in ROWS},
        kept=dict.fromkeys((row for row, _ in ROWS), 0),
        cells={(row, e): Cell() for row, _ in ROWS for e in engines},
        statuses={(row, e): {} for row, _ in ROWS for e in engines},
    )
    for row, names in ROWS:
        for request in requests:
            declared = declared_facets(request["facets"], names)
            accepted = set(request["accept"])
            remaining, _ = filter_entries(entries, **declared)
            report.remaining[row].append(len(remaining))
            report.kept[row] += bool(accepted & {e.name for e in remaining})
            for engine in engines:
                answer = discover(app, request["request"], engine=engine, **declared)
                _count(report.statuses[(row, engine)], answer)
                cell = report.cells[(row, engine)]
                top = ordered_names(answer, engine)[:TOP]
                delivered = {candidate_name(c) for c in answer.get("candidates", [])}
                if accepted & set(top):
                    cell.found += 1
                else:
                    cell.misses.append((request["id"], sorted(accepted), top))
                cell.found1 += bool(top) and top[0] in accepted
                report.outcomes.setdefault((row, engine), {})[request["id"]] = (
                    True,
                    str(answer.get("status")),
                    bool(top) and top[0] in accepted,
                    str((answer.get("out_of_scope") or {}).get("task", "")),
                )
                cell.delivered += bool(accepted & delivered)
                status = answer.get("status")
                cell.refused_answerable += status in REFUSING_STATUSES
                cell.none_answerable += status == "none"
                cell.relaxed += status == "relaxed"
                if status == "unsure":
                    cell.unsure_answerable += 1
                    cell.unsure_listed += bool(accepted & delivered)
        for request in unanswerable:
            declared = declared_facets(request["facets"], names)
            for engine in engines:
                answer = discover(app, request["request"], engine=engine, **declared)
                if row == ROWS[0][0] and engine == _auto(engines):
                    _count(report.scopes.setdefault(request.get("scope", "unscoped"), {}), answer)
                _count(report.statuses[(row, engine)], answer)
                report.outcomes.setdefault((row, engine), {})[request["id"]] = (
                    False,
                    str(answer.get("status")),
                    False,
                    str((answer.get("out_of_scope") or {}).get("task", "")),
                )
                cell = report.cells[(row, engine)]
                cell.refused += answer.get("status") in REFUSING_STATUSES
                cell.none += answer.get("status") == "none"
                cell.relaxed += answer.get("status") == "relaxed"
    return report


def _auto(engines: Sequence[str]) -> str:
    from mapsmith.catalog.search import AUTO_ENGINE

    return AUTO_ENGINE if AUTO_ENGINE in engines else "lexical"


def _count(counts: dict[str, int], answer: Mapping[str, Any]) -> None:
    status = str(answer.get("status"))
    counts[status] = counts.get(status, 0) + 1


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.0f}%" if total else "–"


def engines_of(report: Report) -> list[str]:
    return [e for e in RANKERS if (ROWS[0][0], e) in report.cells]


def best_engine(report: Report, with_qgis: Report | None = None) -> str:
    """The engine with the most found@1 summed over the facet rows and the catalogues measured (the built-in one, and
    with QGIS's algorithms when ``with_qgis`` is given: ``auto`` serves both), then found@3, then the RANKERS order."""
    reports = [r for r in (report, with_qgis) if r is not None]
    engines = [e for e in engines_of(report) if all((ROWS[0][0], e) in r.cells for r in reports)]

    def key(e: str) -> tuple[int, int, int]:
        cells = [r.cells[(row, e)] for r in reports for row, _ in ROWS]
        return (sum(c.found1 for c in cells), sum(c.found for c in cells), -RANKERS.index(e))

    return max(engines, key=key)


def found1_sums(report: Report, engines: Sequence[str]) -> str:
    """``"`lexical` 614, `vector` 435, ..."``: found@1 summed over the five rows, per engine."""
    return ", ".join(f"`{e}` {sum(report.cells[(row, e)].found1 for row, _ in ROWS)}" for e in engines)


def _table(report: Report, engines: Sequence[str]) -> list[str]:
    header = ["facets declared", "remaining mean", "remaining median", "kept"]
    header += [f"found@1 {e}" for e in engines] + [f"found@3 {e}" for e in engines]
    header += [f"delivered {e}" for e in engines]
    header += ["refused (unanswerable)", "none (unanswerable)", "refused (answerable)", "none (answerable)"]
    header += ["unsure (answerable)", "unsure with the answer listed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row, _ in ROWS:
        sizes = report.remaining[row]
        cells = [
            row,
            f"{statistics.mean(sizes):.1f}",
            f"{statistics.median(sizes):g}",
            _pct(report.kept[row], report.answerable),
        ]
        by_engine = [report.cells[(row, e)] for e in engines]
        cells += [_pct(c.found1, report.answerable) for c in by_engine]
        cells += [_pct(c.found, report.answerable) for c in by_engine]
        cells += [_pct(c.delivered, report.answerable) for c in by_engine]

        # The status does not depend on the engine asked for (none and unsure use both rankers whatever
        # the engine), so one ranker's counts stand for all; a difference is shown.
        def both(values: list[int], total: int) -> str:
            return " / ".join(_pct(n, total) for n in sorted(set(values)))

        unsure = sorted({(c.unsure_answerable, c.unsure_listed) for c in by_engine})
        cells += [
            both([c.refused for c in by_engine], report.unanswerable),
            both([c.none for c in by_engine], report.unanswerable),
            both([c.refused_answerable for c in by_engine], report.answerable),
            both([c.none_answerable for c in by_engine], report.answerable),
            both([c.unsure_answerable for c in by_engine], report.answerable),
            " / ".join(f"{listed} of {n}" for n, listed in unsure),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(report: Report, with_qgis: Report | None = None) -> str:
    from mapsmith.catalog.search import AUTO_ENGINE
    from mapsmith.catalog.support import WEAK_DECLARED_MIN, WEAK_DECLARED_UNSURE_SHARE

    engines = engines_of(report)
    lines = [
        f"<!-- Generated by `{COMMAND}` from tests/data/discovery_queries.json, tests/data/qgis_algorithms.json "
        "and the built-in catalog; do not edit by hand. -->",
        "",
        "# Finding an operation: measured",
        "",
        f"`list_operations` narrows the catalog ({report.catalog_size} operations) by the facets a caller "
        "declares and orders what is left with a ranker. This page measures both over "
        f"{report.answerable} requests written from GIS work scenarios, each with every operation a "
        f"professional would accept, and {report.unanswerable} requests the catalog cannot answer "
        "(GIS tasks it does not offer, other software tasks, nonsense: `tests/data/discovery_queries.json`). "
        "Each row declares one more facet than the row above it.",
        "",
        "Rankers:",
        "",
    ]
    lines += [f"- `{e}`: {report.rankers[e]}" for e in RANKERS]
    lines += ["", *embeddings_section()]
    lines += [
        "",
        "Columns: *remaining* is how many operations the declared facets leave (mean / median over the "
        "answerable requests); *kept* the share of answerable requests whose remaining set still holds an "
        "accepted operation (the ceiling of the next columns); *found@1* and *found@3* the share with an accepted "
        "operation first, or among the ranker's first three; *delivered* the share with an accepted operation among "
        "the candidates the answer delivers; *refused (unanswerable)* the share of the requests the catalog cannot "
        "answer that are answered `none`, `empty` or `unsure` instead of a confident list, *none (unanswerable)* "
        "those answered `none`; *refused (answerable)* and *none (answerable)* the same shares over the answerable "
        "requests (false alarms); *unsure (answerable)* the share of answerable requests answered `unsure`, and how "
        "many of those list an accepted operation among their candidates.",
        "",
        "`none` needs firm evidence: no content word of the request in any entry's vocabulary and no entry close "
        "in meaning, or a declared out-of-scope task leading every operation on both rankers "
        "(`mapsmith.catalog.support`). Thinner support is answered `unsure`, with candidates, when a logistic score "
        "of six support signals (fitted on the calibration half, `benchmarks/discovery_calibrate.py --weak`) says the "
        "request is more likely unanswerable than not. With a fact about the caller's data declared, the score must "
        f"also clear `support.WEAK_DECLARED_MIN` ({WEAK_DECLARED_MIN}: the smallest cut at which at most "
        f"{WEAK_DECLARED_UNSURE_SHARE * 100:g} % of the "
        "calibration half's answerable requests are answered `unsure` with every facet declared, every cause "
        "counted); below it the answer keeps its status and says `support: weak`.",
        "",
    ]
    lines += _table(report, engines)
    unavailable = [e for e in RANKERS if e not in engines]
    if unavailable:
        lines += ["", f"Not measured (unavailable here): {', '.join(f'`{e}`' for e in unavailable)}."]
    best = best_engine(report, with_qgis)
    sums = f"over the built-in catalogue {found1_sums(report, engines)}"
    if with_qgis is not None:
        sums += f"; with QGIS's algorithms {found1_sums(with_qgis, engines_of(with_qgis))}"
    lines += [
        "",
        "## Which ranker is auto",
        "",
        f"Found@1 summed over the five rows, {sums}. `auto` serves both catalogues, so the best is the largest sum "
        f"over both. Measured best: `{best}`; `auto` uses `{AUTO_ENGINE if 'vector' in engines else 'lexical'}`.",
    ]
    lines += [
        "",
        "## Requests the catalogue cannot answer",
        "",
        "Their statuses with nothing declared, by kind of request (`scope` in the query file), with `auto`.",
        "",
        "| scope | requests | statuses |",
        "|---|---:|---|",
    ]
    for scope, counts in sorted(report.scopes.items()):
        text = ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))
        lines.append(f"| {scope} | {sum(counts.values())} | {text} |")
    lines += _scope_section(report, with_qgis)
    lines += _held_out_section(report, with_qgis)
    lines += blind_section()
    lines += ["", "## Answer statuses", "", "Over all requests, answerable and not, per row.", ""]
    lines += ["| facets declared | statuses |", "|---|---|"]
    for row, _ in ROWS:
        texts = {e: ", ".join(f"{s} {n}" for s, n in sorted(report.statuses[(row, e)].items())) for e in engines}
        if len(set(texts.values())) == 1:
            lines.append(f"| {row} | {next(iter(texts.values()))} |")
        else:
            lines += [f"| {row} ({e}) | {t} |" for e, t in texts.items()]
    if with_qgis is not None:
        q_engines = engines_of(with_qgis)
        lines += [
            "",
            "## With QGIS's algorithms in the catalogue",
            "",
            f"The same requests over {with_qgis.catalog_size} entries: the built-in operations and QGIS's "
            f"{with_qgis.catalog_size - report.catalog_size} algorithms as the qgis stack registers them, derived "
            "from `tests/data/qgis_algorithms.json` (QGIS's own help: shortHelpString, parameter descriptions, "
            "tags, group). Only MapSmith's own operations count as found; a QGIS algorithm doing the same job is "
            f"ranked after MapSmith's (`mapsmith.catalog.pairs`). Measured with `{', '.join(q_engines)}`.",
            "",
        ]
        lines += _table(with_qgis, q_engines)
    lines += latency_section()
    last = ROWS[-1][0]
    for e in engines:
        misses = report.cells[(last, e)].misses
        lines += [
            "",
            f"## Misses of `{e}` with every facet declared ({len(misses)})",
            "",
            "Requests whose accepted operations are not among the first three: what to improve next "
            "(an entry's keywords or `distinguishes`, or the request's facets).",
            "",
        ]
        if misses:
            lines += ["| request | accepted | first three |", "|---|---|---|"]
            lines += [f"| `{i}` | {', '.join(a)} | {', '.join(t) or '(none)'} |" for i, a, t in misses]
        else:
            lines.append("None.")
    return "\n".join(lines) + "\n"


def _scope_section(report: Report, with_qgis: Report | None) -> list[str]:
    from mapsmith.catalog.scope import OUT_OF_SCOPE, in_catalogue

    auto = _auto(engines_of(report))
    named: dict[str, int] = {}
    for answerable, status, _, task in report.outcomes.get((ROWS[0][0], auto), {}).values():
        if task and status == "none" and not answerable:
            named[task] = named.get(task, 0) + 1
    qgis_names = set(with_qgis.catalog_names) if with_qgis is not None else set()
    lines = [
        "",
        "## What the catalogue declares it does not do",
        "",
        f"`mapsmith.catalog.scope` lists {len(OUT_OF_SCOPE)} tasks MapSmith has no operation for, written from the "
        "toolbox families of ArcGIS Pro and QGIS Processing and from everyday software work, not from the query "
        "file. They are ranked beside the operations; when one leads every operation on both rankers by the "
        "calibrated margins (`support.SCOPE_MIN_LEXICAL_LEAD`, `SCOPE_MIN_VECTOR_LEAD`), the answer is `none` and "
        "names the task. A task a toolbox in the catalogue does is left out of the index (*with QGIS*: in scope). "
        "*Named* counts the unanswerable requests answered `none` naming it, with nothing declared and `auto`, "
        "over the built-in catalogue.",
        "",
        "| task | kind | with QGIS | named |",
        "|---|---|---|---:|",
    ]
    for entry in OUT_OF_SCOPE:
        offered = "in scope" if in_catalogue(entry, qgis_names) else "not offered"
        lines.append(f"| {entry.label} | {entry.family} | {offered} | {named.get(entry.key, 0)} |")
    return lines


def _held_out_section(report: Report, with_qgis: Report | None) -> list[str]:
    """The key shares over the held-out half alone: the requests no threshold or weight was fitted on."""
    lines = [
        "",
        "## The held-out half",
        "",
        "The `none` margins of the out-of-scope tasks, the weak-support weights and the fusion's weights were "
        "fitted on one half of the query file (`in_calibration_half`: ids whose sha256 starts with an even byte, "
        "`benchmarks/discovery_calibrate.py --scope` and `--weak`); the vector threshold of the `none` status was "
        "fitted on the whole file. The held-out half was read once to choose a rule, that an out-of-scope task must "
        "lead on both rankers (`support.SCOPE_MIN_VECTOR_LEAD`), so it is not quite unseen. Here are the same "
        "shares over each half apart, with `auto`: "
        "what the held-out column shows is what to expect of requests nobody has written yet.",
        "",
        "| catalogue | facets declared | half | answerable | found@1 | none (answerable) | unsure (answerable) "
        "| unanswerable | refused (unanswerable) | none (unanswerable) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, rep in (("built-in", report), ("with QGIS", with_qgis)):
        if rep is None:
            continue
        auto = _auto(engines_of(rep))
        for row in (ROWS[0][0], ROWS[-1][0]):
            outcomes = rep.outcomes.get((row, auto), {})
            for half, side in (("calibration", True), ("held-out", False)):
                mine = [o for rid, o in outcomes.items() if in_calibration_half(rid) == side]
                ans = [o for o in mine if o[0]]
                off = [o for o in mine if not o[0]]
                lines.append(
                    f"| {label} | {row} | {half} | {len(ans)} | {count_pct(sum(o[2] for o in ans), len(ans))} "
                    f"| {count_pct(sum(o[1] == 'none' for o in ans), len(ans))} "
                    f"| {count_pct(sum(o[1] == 'unsure' for o in ans), len(ans))} | {len(off)} "
                    f"| {count_pct(sum(o[1] in REFUSING_STATUSES for o in off), len(off))} "
                    f"| {count_pct(sum(o[1] == 'none' for o in off), len(off))} |"
                )
    return lines


def build_page(path: Path = QUERIES) -> str:
    data = load_queries(path)
    report = measure(data)
    with_qgis = None
    if QGIS_EXTRACT.exists():
        from mapsmith.catalog.search import AUTO_ENGINE

        with_qgis = measure(data, make_app(with_qgis=True), engines_only=(AUTO_ENGINE, "lexical"))
    return render(report, with_qgis)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs; write nothing")
    parser.add_argument("--queries", type=Path, default=QUERIES, help=f"query file (default {QUERIES})")
    parser.add_argument("--output", type=Path, default=PAGE, help=f"page to write or check (default {PAGE})")
    args = parser.parse_args(argv)
    page = build_page(args.queries)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current == page:
            print(f"{args.output} is up to date")
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(current.splitlines(True), page.splitlines(True), str(args.output), "rendered")
        )
        print(f"\n{args.output} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
