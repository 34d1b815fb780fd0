"""Discovery: narrow the catalog by declared facets, rank what remains, and never hide the rest.

``discover`` is what ``list_operations`` answers. Facets (``mapsmith.catalog.facets``) remove only
what the caller's own declarations rule out, and the answer says which facet removed what. Rankers
(``lexical``: BM25, always there; ``vector``: static embeddings, when they load) only order. Every
answer names the engine that ordered it.

What this module must never do: download anything, import an engine, let category filter unless asked,
or write a dataset path or an argument into the discovery log.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.catalog.facets import (
    PLAN_TOOLS,
    EntryFacets,
    FacetFilter,
    entry_facets,
    filter_entries,
    normalise_filter,
)
from mapsmith.catalog.lexical import BM25Ranker
from mapsmith.contracts import OperationContract, contracts_root
from mapsmith.errors import ArgumentError, MapSmithError

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

__all__ = [
    "CHOOSE_LIMIT",
    "DISCOVERY_LOG_ENV",
    "ENGINES",
    "RANKED_LIMIT",
    "check_discovery_log",
    "discover",
    "entry_document",
    "record_next_operation",
]

ENGINES = ("auto", "lexical", "vector")
# At most this many remaining entries are all delivered ("choose"): few enough to read in one reply.
CHOOSE_LIMIT = 30
# Above CHOOSE_LIMIT, the top this many are delivered ("ranked") and the answer says how many more.
RANKED_LIMIT = 10
UNSURE_TOP = 3
# Category is a guess about our taxonomy: it adds this share of the best score, it never filters.
CATEGORY_BOOST = 0.1
DISCOVERY_LOG_ENV = "MAPSMITH_DISCOVERY_LOG"
_INDEX_CACHE_SIZE = 8
# Anything that looks like a path or a file name is kept out of the log.
_PATHLIKE = re.compile(r"\S*[/\\]\S*|\S+\.(?:gpkg|shp|geojson|json|tif|tiff|parquet|fgb|csv|gml|kml|vrt|zip)\b", re.I)


def entry_document(contract: OperationContract) -> str:
    """The text an entry is ranked on: name (underscores as spaces), summary, distinguishes, keywords,
    category, dataset descriptions, parameter names and descriptions."""
    parts = [contract.name.replace("_", " "), contract.summary, contract.distinguishes]
    parts += list(contract.keywords)
    parts.append(contract.category)
    parts += [d.description for d in contract.datasets]
    for p in contract.parameters:
        parts += [p.name.replace("_", " "), p.description]
    return "\n".join(parts)


# -- the index over one catalog, built once per catalog ------------------------------------------


@dataclass
class _CatalogIndex:
    key: tuple[tuple[str, int], ...]
    contracts: dict[str, OperationContract]
    facets: list[EntryFacets]
    docs: dict[str, str]
    lexical: BM25Ranker
    categories: frozenset[str]
    _vector: Any = field(default=None, repr=False)
    _vector_reason: str | None = None
    _vector_tried: bool = False

    def vector(self) -> tuple[Any, str | None]:
        """The vector ranker over this catalog, or None and why it is unavailable (tried once)."""
        if not self._vector_tried:
            self._vector_tried = True
            self._vector, self._vector_reason = _load_vector(self.docs)
        return self._vector, self._vector_reason


_INDEXES: list[_CatalogIndex] = []


def _index(contracts: Mapping[str, OperationContract]) -> _CatalogIndex:
    # Keyed on the contract objects themselves, so a plugin registering a contract gets a new index.
    key = tuple((name, id(c)) for name, c in sorted(contracts.items()))
    for idx in _INDEXES:
        if idx.key == key:
            return idx
    ordered = dict(sorted(contracts.items()))
    docs = {name: entry_document(c) for name, c in ordered.items()}
    idx = _CatalogIndex(
        key=key,
        contracts=ordered,
        facets=[entry_facets(c) for c in ordered.values()],
        docs=docs,
        lexical=BM25Ranker(docs),
        categories=frozenset(c.category for c in ordered.values()),
    )
    _INDEXES.insert(0, idx)
    del _INDEXES[_INDEX_CACHE_SIZE:]
    return idx


@cache
def schema_categories() -> frozenset[str]:
    """The categories the contract schema allows: accepted even when no entry has one yet."""
    schema = json.loads((contracts_root() / "schemas" / "operation.schema.json").read_text("utf-8"))
    return frozenset(schema["properties"]["category"]["enum"])


def _load_vector(docs: Mapping[str, str]) -> tuple[Any, str | None]:
    """``mapsmith.catalog.vector.load()`` adapted to this catalog; (None, reason) when it cannot load."""
    try:
        # imported by name: the module is optional in this package, and importing it loads nothing yet
        vector: Any = importlib.import_module("mapsmith.catalog.vector")
    except Exception as exc:  # an optional ranker must never take discovery down
        return None, f"mapsmith.catalog.vector cannot be imported: {type(exc).__name__}: {exc}"
    try:
        ranker = vector.load(docs)
    except TypeError:
        ranker = vector.load()  # a load() that takes no catalog: the ranker is fitted below
    except Exception as exc:
        return None, f"the vector ranker failed to load: {type(exc).__name__}: {exc}"
    if ranker is None:
        reason = getattr(vector, "UNAVAILABLE_REASON", None) or getattr(vector, "unavailable_reason", None)
        if callable(reason):
            reason = reason()
        return None, str(reason or "mapsmith.catalog.vector.load() returned None")
    fit = getattr(ranker, "fit", None) or getattr(ranker, "index", None)
    if callable(fit) and not getattr(ranker, "names", None):
        fitted = fit(docs)
        ranker = fitted if fitted is not None else ranker
    return ranker, None


def _rank(ranker: Any, query: str, names: list[str]) -> dict[str, float]:
    """``{name: score}`` over ``names`` from a ranker whose ``rank(query)`` lists (name, score)."""
    try:
        pairs = ranker.rank(query, names=names)
    except TypeError:
        pairs = ranker.rank(query)
    wanted = set(names)
    scores = {n: float(s) for n, s in pairs if n in wanted}
    return {n: scores.get(n, 0.0) for n in names}


def _top(scores: Mapping[str, float], n: int) -> list[str]:
    # Only a positive score is a guess; an unmatched entry is not one.
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [name for name, score in ordered[:n] if score > 0]


# -- the answer ------------------------------------------------------------------------------------


def _refuse(argument: str, value: Any, accepted: list[Any]) -> ArgumentError:
    listed = ", ".join(map(str, accepted))
    return ArgumentError(
        f"{argument} {value!r} is not accepted; accepted: {listed}",
        code="INVALID_FILTER",
        evidence={"argument": argument, "value": value, "accepted": accepted},
        hint=f"pass {argument} as one of {listed}",
    )


def discover(
    app: MapSmith,
    query: str | None = "",
    input_kind: Any = None,
    produces: Any = None,
    dataset_count: Any = None,
    geometry_types: Any = None,
    projected_crs: Any = None,
    category: Any = None,
    engine: str = "auto",
    detail: bool = False,
    category_filter: bool = False,
    limit: int | None = RANKED_LIMIT,
) -> dict[str, Any]:
    """Search the catalog of ``app``: facets narrow, a ranker orders, the answer says what it did.

    ``status`` is ``empty`` (the facets left nothing: ``removed_by`` says which removed what and how
    many each would leave if dropped), ``unsure`` (the lexical and vector rankers' top-3 share
    nothing: ``guesses`` shows both and ``question`` asks what data the caller has), ``choose`` (at
    most 30 remain: every one, ordered) or ``ranked`` (the top ``limit``, and ``more`` says how many
    remain beyond them; ``limit=None`` delivers all). Raises ``ArgumentError`` INVALID_FILTER for a
    facet value outside its accepted values, and ENGINE_UNAVAILABLE for ``engine="vector"`` when the
    vector ranker does not load.
    """
    if query is None:
        query = ""
    if not isinstance(query, str):
        raise _refuse("query", query, ["a string"])
    if engine not in ENGINES:
        raise _refuse("engine", engine, list(ENGINES))
    if not isinstance(detail, bool):
        raise _refuse("detail", detail, [True, False])
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _refuse("limit", limit, ["an integer >= 1", None])
    idx = _index(app.host.contracts)
    facet_filter = normalise_filter(
        input_kind=input_kind,
        produces=produces,
        dataset_count=dataset_count,
        geometry_types=geometry_types,
        projected_crs=projected_crs,
        category=category,
        category_filter=category_filter,
        categories=idx.categories | schema_categories(),
    )
    remaining, removed_by = filter_entries(idx.facets, facet_filter)
    names = [e.name for e in remaining]

    vector_ranker: Any = None
    vector_reason: str | None = None
    if engine != "lexical" or query.strip():
        vector_ranker, vector_reason = idx.vector()
    if engine == "vector" and vector_ranker is None:
        raise ArgumentError(
            f"the vector ranker is not available: {vector_reason}",
            code="ENGINE_UNAVAILABLE",
            evidence={"engine": "vector", "reason": vector_reason},
            hint="use engine='lexical' (always available) or engine='auto'",
        )
    used = "vector" if engine == "vector" or (engine == "auto" and vector_ranker is not None) else "lexical"

    answer: dict[str, Any] = {"query": query, "engine": used}
    notes: list[str] = []
    scores = dict.fromkeys(names, 0.0)
    guesses: dict[str, list[str]] | None = None
    if query.strip() and names:
        lexical_scores = _rank(idx.lexical, query, names)
        vector_scores = _rank(vector_ranker, query, names) if vector_ranker is not None else None
        scores = vector_scores if used == "vector" and vector_scores is not None else lexical_scores
        if vector_scores is None:
            notes.append(f"vector ranker unavailable ({vector_reason}): 'unsure' cannot be computed")
        else:
            lex_top, vec_top = _top(lexical_scores, UNSURE_TOP), _top(vector_scores, UNSURE_TOP)
            if lex_top and vec_top and not set(lex_top) & set(vec_top):
                guesses = {"lexical": lex_top, "vector": vec_top}
        if not any(s > 0 for s in scores.values()):
            notes.append("no entry matched any word of the query: the order below is by name only")
    elif not query.strip():
        notes.append("no query: the order is by name (category first when given)")
    if category is not None and not category_filter:
        best = max(scores.values(), default=0.0)
        boost = CATEGORY_BOOST * best if best > 0 else CATEGORY_BOOST
        for e in remaining:
            if e.category == category:
                scores[e.name] += boost
    ordered = sorted(names, key=lambda n: (-scores[n], n))

    if not remaining:
        status = "empty"
    elif guesses is not None:
        status = "unsure"
    elif len(remaining) <= CHOOSE_LIMIT:
        status = "choose"
    else:
        status = "ranked"
    deliver_all = status in ("choose", "empty") or len(ordered) <= CHOOSE_LIMIT or limit is None
    delivered = ordered if deliver_all else ordered[:limit]
    candidates = [_candidate(idx.contracts[n], scores[n], detail) for n in delivered]

    answer.update(
        status=status,
        candidates=candidates,
        count=len(candidates),
        remaining=len(remaining),
        more=len(remaining) - len(candidates),
        facets_applied=facet_filter.declared(),
        removed_by=removed_by,
    )
    answer["message"], hint = _explain(status, answer, facet_filter, removed_by, guesses)
    if hint:
        answer["hint"] = hint
    if guesses is not None:
        answer["guesses"] = guesses
        answer["question"] = (
            "The two rankers disagree. What data do you hold (input_kind: vector, raster, table, none), "
            "what do you want back (produces: dataset:vector, dataset:raster, answer, description), and "
            "how many datasets will you pass (dataset_count)?"
        )
    planned = [c["operation"] for c in candidates if c["status"] == "planned"]
    if planned:
        answer["planned"] = planned
        notes.append(f"{', '.join(planned)}: planned, not yet runnable; answer 'not yet' rather than inventing a call")
    answer["notes"] = notes
    _log_search(app, query, facet_filter, used, status, [c["operation"] for c in candidates])
    return answer


def _candidate(contract: OperationContract, score: float, detail: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operation": contract.name,
        "status": contract.status,
        "distinguishes": contract.distinguishes,
        "score": round(score, 6),
    }
    if detail:
        out["summary"] = contract.summary
        out["category"] = contract.category
        out["output_kind"] = contract.output_kind
        out["parameters"] = contract.input_schema()
        out["example"] = dict(contract.examples[0]) if contract.examples else None
    return out


def _explain(
    status: str,
    answer: Mapping[str, Any],
    facet_filter: FacetFilter,
    removed_by: Mapping[str, Mapping[str, Any]],
    guesses: Mapping[str, list[str]] | None,
) -> tuple[str, str | None]:
    if status == "empty":
        parts = [
            f"{facet} removed {len(info['removed'])} (dropping it alone would leave {info['would_remain_if_dropped']})"
            for facet, info in removed_by.items()
        ]
        message = "no operation satisfies every declared facet: " + "; ".join(parts)
        best = max(removed_by.items(), key=lambda item: item[1]["would_remain_if_dropped"], default=None)
        hint = f"drop {best[0]} to see {best[1]['would_remain_if_dropped']}" if best else None
        if facet_filter.input_kind is not None and "plan" in facet_filter.input_kind:
            hint = f"a plan goes to the {', '.join(PLAN_TOOLS)} tools, not to a catalog operation"
        return message, hint
    if status == "unsure":
        assert guesses is not None
        return (
            f"unsure: the lexical ranker guesses {', '.join(guesses['lexical'])}, the vector ranker "
            f"{', '.join(guesses['vector'])}; every remaining candidate is listed",
            "declare input_kind, produces or dataset_count to narrow, then search again",
        )
    if status == "choose":
        return f"{answer['remaining']} operations remain; every one is listed, ordered", None
    return (
        f"{answer['remaining']} operations remain; the top {answer['count']} are listed, {answer['more']} more",
        "declare input_kind, produces, dataset_count or geometry_types to narrow to 30 or fewer and see all",
    )


# -- the discovery log -----------------------------------------------------------------------------

# Per service: the resolved log path, or None when off or refused (decided once, at start).
_LOG_PATHS: weakref.WeakKeyDictionary[Any, Path | None] = weakref.WeakKeyDictionary()


def check_discovery_log(app: MapSmith) -> Path | None:
    """Where ``MAPSMITH_DISCOVERY_LOG`` sends search records, or None (off by default).

    The path must be inside the workspace (relative paths are taken against it); anything else is
    refused with one message on stderr and the log stays off. Call it at start; ``discover`` calls
    it too and the decision is made once per service.
    """
    if app in _LOG_PATHS:
        return _LOG_PATHS[app]
    raw = app.environ.get(DISCOVERY_LOG_ENV)
    path: Path | None = None
    if raw:
        if app.workspace.root is None:
            print(
                f"mapsmith: {DISCOVERY_LOG_ENV} refused: it must be a path inside the workspace and "
                "MAPSMITH_WORKSPACE is not set; the discovery log is off",
                file=sys.stderr,
            )
        else:
            try:
                resolved = app.workspace.resolve(raw, argument=DISCOVERY_LOG_ENV)
            except MapSmithError as exc:
                print(
                    f"mapsmith: {DISCOVERY_LOG_ENV} refused: {exc.message}; the discovery log is off", file=sys.stderr
                )
            else:
                path = resolved if isinstance(resolved, Path) else None
    _LOG_PATHS[app] = path
    return path


def _append(app: MapSmith, record: dict[str, Any]) -> None:
    path = check_discovery_log(app)
    if path is None:
        return
    line = json.dumps(record, ensure_ascii=False, sort_keys=True)
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:  # a log that cannot be written must not fail the search
        print(f"mapsmith: cannot write the discovery log {path}: {exc}", file=sys.stderr)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _log_search(
    app: MapSmith, query: str, facet_filter: FacetFilter, engine: str, status: str, delivered: list[str]
) -> None:
    if check_discovery_log(app) is None:
        return
    _append(
        app,
        {
            "time": _now(),
            "query": _PATHLIKE.sub("<path>", query),
            "facets": facet_filter.declared(),
            "engine": engine,
            "status": status,
            "candidates": delivered,
        },
    )


def record_next_operation(app: MapSmith, name: str) -> None:
    """Log which operation ran after a search (the runner path calls this); never its arguments."""
    _append(app, {"time": _now(), "ran": name})
