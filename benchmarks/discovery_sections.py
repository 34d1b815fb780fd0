"""The sections of docs/discovery.md drawn from files other than the query file: the search latency as
``discovery_latency.py --write`` recorded it, the embeddings compared by ``discovery_embeddings.py``, and the blind
sets (``tests/data/discovery_blind*.json``) measured as they are now, with each set's recorded history.

Rendered by ``discovery_report``; nothing here times anything or writes a file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from discovery_common import (
    QGIS_EXTRACT,
    REFUSING_STATUSES,
    REPO,
    ROWS,
    TOP,
    candidate_name,
    count_pct,
    declared_facets,
    load_queries,
    make_app,
    ordered_names,
)

EMBEDDINGS = REPO / "benchmarks" / "results" / "discovery_embeddings.json"
LATENCY = REPO / "benchmarks" / "results" / "discovery_latency.json"
# The goal for one search with QGIS's algorithms in the catalogue (median, milliseconds).
LATENCY_GOAL_MS = 20.0


def latency_section(path: Path = LATENCY) -> list[str]:
    """How long one search takes (``discovery_latency.py --write``'s results): the one timed section, read from
    its results file so that the page itself stays free of timing and renders the same everywhere."""
    lines = ["", "## How long a search takes", ""]
    if not path.exists():
        return [
            *lines,
            f"(not measured here: `{path.name}` is missing; run `python benchmarks/discovery_latency.py --write`)",
        ]
    data = json.loads(path.read_text(encoding="utf-8"))
    m = data["machine"]
    load = data["load_average_1min"]
    lines += [
        f"Every request of the query file ({data['catalogues'][0]['rows'][0]['searches'] // data['passes']}, "
        f'answerable or not) searched {data["passes"]} times with `engine="auto"`, with nothing declared and with '
        "every facet its author declared; the first search of a catalogue builds its index and is timed apart. "
        f"Measured {data['measured_at']} on commit {data['commit']}"
        + (" with uncommitted changes" if data.get("uncommitted_changes") else "")
        + f", {m['nproc']} CPUs, Python {m['python']}, load average {load['min']}–{load['max']} "
        f"(`{data['command']}`).",
        "",
        "| catalogue | entries | index build | facets declared | searches | median | p90 | max |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    worst = 0.0
    for c in data["catalogues"]:
        for r in c["rows"]:
            lines.append(
                f"| {c['catalogue']} | {c['entries']} | {c['index_build_ms']:.0f} ms | {r['row']} | {r['searches']} | "
                f"{r['median_ms']:.2f} ms | {r['p90_ms']:.2f} ms | {r['max_ms']:.2f} ms |"
            )
            if c["catalogue"] == "with QGIS":
                worst = max(worst, r["median_ms"])
    verdict = "met" if worst < LATENCY_GOAL_MS else "not met"
    lines += [
        "",
        f"Goal: a median under {LATENCY_GOAL_MS:.0f} ms with QGIS's algorithms in the catalogue; the slower row's "
        f"median is {worst:.2f} ms: {verdict}.",
    ]
    return lines


def embeddings_section(path: Path = EMBEDDINGS) -> list[str]:
    """The stronger embeddings looked for, and what they measured (``discovery_embeddings.py``'s results)."""
    lines = [
        "A stronger static embedding was looked for where this project may fetch from, the package registries: "
        "PyPI's `model2vec` is the library without any weights, and the packages built on it that were checked "
        "(`laghu` 0.4.0, a 30 kB wheel) ship none. WordLlama's wheel does ship one (a token-embedding table "
        "distilled from large language models, MIT licence), so it was measured in the same vector ranker. So was "
        "the full transformer the committed table is distilled from, run on every request: the ceiling a better "
        "distillation of that model could approach. Each is measured with the `none` rules off, so that all are "
        "judged on ranking alone; *AUC* is how well the weak-support score, refitted for each embedding on the "
        "calibration half, tells the held-out half's unanswerable requests from its answerable ones, and *caught* "
        "how many held-out unanswerable requests that score flags when it may flag 25 % of the held-out answerable "
        "ones (about what `unsure` flags today with nothing declared). *One request* is the time to embed one "
        "request (median), *index* the time to embed every entry's and task's passages once.",
        "",
    ]
    if not path.exists():
        return [*lines, f"(not measured here: `{path.name}` is missing)"]
    data = json.loads(path.read_text(encoding="utf-8"))
    embeddings = data["embeddings"]
    labels = list(embeddings[0]["rows"])
    header = ["embedding", "licence"]
    for label in labels:
        header += [f"{label}: vector found@1", f"{label}: fusion found@1"]
    header += ["AUC", "caught", "one request", "index"]
    lines += ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (2 * len(labels) + 4)]
    for e in embeddings:
        n = e["requests"]
        cells = [e["name"], e["licence"]]
        for label in labels:
            cells += [f"{e['rows'][label][k]['found_at_1']} of {n}" for k in ("vector", "fusion")]
        held = e["held_out"]
        cells += [
            f"{e['held_out_auc']:.3f}",
            f"{held['caught']['25%']['unanswerable']} of {held['unanswerable']}",
            f"{e['timing']['request_median_ms']:.2f} ms",
            f"{e['timing']['index_build_s']:.2f} s",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    committed = embeddings[0]
    lines.append("")
    for candidate in embeddings[1:]:

        def gain(engine: str, candidate: Mapping[str, Any] = candidate) -> int:
            return sum(
                candidate["rows"][x][engine]["found_at_1"] - committed["rows"][x][engine]["found_at_1"] for x in labels
            )

        auc_change = candidate["held_out_auc"] - committed["held_out_auc"]
        caught = (
            candidate["held_out"]["caught"]["25%"]["unanswerable"]
            - committed["held_out"]["caught"]["25%"]["unanswerable"]
        )
        request_ms = candidate["timing"]["request_median_ms"]
        if gain("fusion") <= 0 or auc_change < 0:
            verdict = "no gain where it counts, so the committed static table stays."
        elif request_ms >= LATENCY_GOAL_MS:
            verdict = (
                f"a gain, but embedding one request alone takes {request_ms:.0f} ms, over the {LATENCY_GOAL_MS:.0f} ms "
                f"goal for a whole search (below), and the index {candidate['timing']['index_build_s']:.0f} s on "
                "every start, so the committed static table stays."
            )
        else:
            verdict = "a gain where it counts: adopting it needs the none, scope and weak calibrations redone."
        lines.append(
            f"- {candidate['name']}: found@1 {gain('vector'):+d} for `vector` alone and {gain('fusion'):+d} for the "
            f"fusion `auto` uses over the three rows, weak-support AUC {auc_change:+.3f}, unanswerable caught "
            f"{caught:+d}: " + verdict
        )
    lines += [
        "",
        "`benchmarks/build_static_model.py` rebuilds the committed table from a local copy of the transformer. "
        f"Measured by `{data['command']}`." + (f" {data['since']}" if data.get("since") else ""),
    ]
    return lines


BLIND = REPO / "tests" / "data" / "discovery_blind.json"
# Written later, each request with the facets its writer would declare: measured with nothing and with every facet.
BLIND_SETS = (BLIND, *(REPO / "tests" / "data" / f"discovery_blind{n}.json" for n in (2, 3, 4)))


def blind_section(paths: Sequence[Path] = BLIND_SETS) -> list[str]:
    """The requests written blind (``tests/data/discovery_blind*.json``), ``auto``: what the held-out half can no
    longer show once it has been read. A set whose requests declare facets is measured with nothing declared and
    with every facet its writer declared."""
    lines = [
        "",
        "## Requests nobody tuned for",
        "",
        "The held-out half above has been read, so it is not quite unseen. These sets were written blind, each once "
        "and never edited after its first search; *listed* counts the `unsure` answers whose candidates hold an "
        "accepted operation.",
    ]
    catalogues = [("built-in", make_app())]
    if QGIS_EXTRACT.exists():
        catalogues.append(("with QGIS", make_app(with_qgis=True)))
    for path in paths:
        lines += blind_set(path, catalogues)
    return lines


def blind_measure(app: Any, data: Mapping[str, Any], facets: Sequence[str]) -> dict[str, Any]:
    """One catalogue's shares over one blind set, declaring ``facets`` of each request (none when it has none)."""
    from mapsmith.catalog.search import AUTO_ENGINE, discover

    found1 = found3 = none = unsure = listed = 0
    for request in data["requests"]:
        answer = discover(app, request["request"], **declared_facets(request.get("facets") or {}, facets))
        accepted = set(request["accept"])
        top = ordered_names(answer, AUTO_ENGINE)[:TOP]
        found1 += bool(top) and top[0] in accepted
        found3 += bool(accepted & set(top))
        none += answer["status"] == "none"
        if answer["status"] == "unsure":
            unsure += 1
            listed += bool(accepted & {candidate_name(c) for c in answer.get("candidates", [])})
    refused: dict[str, list[int]] = {}
    for request in data["unanswerable"]:
        kind = refused.setdefault(request["scope"], [0, 0])
        answer = discover(app, request["request"], **declared_facets(request.get("facets") or {}, facets))
        kind[0] += answer["status"] in REFUSING_STATUSES
        kind[1] += 1
    return {
        "found@1": found1,
        "found@3": found3,
        "none": none,
        "unsure": unsure,
        "listed": listed,
        "refused": sum(k[0] for k in refused.values()),
        "by kind": refused,
    }


def blind_set(path: Path, catalogues: Sequence[tuple[str, Any]]) -> list[str]:
    data = load_queries(path)
    requests, unanswerable = data["requests"], data["unanswerable"]
    with_facets = all("facets" in r for r in requests + unanswerable)
    rows: list[tuple[str, Sequence[str]]] = [("nothing declared", ())]
    if with_facets:
        rows.append(("every facet", ROWS[-1][1]))
    lines = [
        "",
        f"`{path.relative_to(REPO).as_posix()}` holds {len(requests)} answerable and {len(unanswerable)} "
        f"unanswerable requests. {data['about']}",
        "",
        "| catalogue | facets declared | found@1 | found@3 | none (answerable) | unsure (answerable), listed "
        "| refused (unanswerable) | refused by kind |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, app in catalogues:
        for row, facets in rows:
            m = blind_measure(app, data, facets)
            kinds = ", ".join(f"{name} {n} of {of}" for name, (n, of) in sorted(m["by kind"].items()))
            lines.append(
                f"| {label} | {row} | {count_pct(m['found@1'], len(requests))} | "
                f"{count_pct(m['found@3'], len(requests))} | {count_pct(m['none'], len(requests))} | "
                f"{m['unsure']}, {m['listed']} listed | {count_pct(m['refused'], len(unanswerable))} | {kinds} |"
            )
    if data["doubts"]:
        lines += ["", "Doubts the writer noted, labels kept as written:", ""]
        lines += [f"- {doubt}" for doubt in data["doubts"]]
    lines += blind_history(data.get("history", []))
    return lines


def blind_history(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """The set's measurements over time, from its ``history``: an entry with ``measured`` is an earlier
    measurement as recorded then; the one without is the table above. ``change`` is what changed in the
    catalogue before that measurement, ``read`` the set's requests whose answers were read before the change
    (no longer blind: a change may have been shaped by them)."""
    if len(history) < 2:
        return []  # measured once: the table above is the only measurement
    lines = ["", "Measured more than once; what changed in between, and which of these requests were read first:", ""]
    for entry in history:
        when = f"on {entry['measured_on']}" if entry.get("measured_on") else "now (the table above)"
        parts = [f"Measured {when}"]
        if entry.get("change"):
            parts.append(f"after this change: {entry['change']}")
        if entry.get("read"):
            parts.append(f"read before the change: {', '.join(entry['read'])} (no longer blind)")
        measured = entry.get("measured")
        if measured:
            parts.append(
                "; ".join(
                    f"{label}: " + ", ".join(f"{key} {value}" for key, value in numbers.items())
                    for label, numbers in measured.items()
                )
            )
        head, *rest = parts
        lines.append(f"- {head}" + (": " + "; ".join(rest) if rest else "") + ".")
    return lines
