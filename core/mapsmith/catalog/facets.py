"""Deterministic facets of catalog entries, and the filter that narrows the catalog by them.

A facet is something the caller already knows for certain: what data it holds, what it wants back,
how many datasets it will pass, which geometry types its vector data has, whether a projected CRS
is at hand. Each is derived from a contract's declared fields only (never from its prose), so that
"this entry was filtered out" is always explained by a field an author wrote and a test can check.

What this module must never do: filter by category (a guess about our taxonomy: it only ranks,
unless the caller asks for a hard filter), rank, or hide why an entry was removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mapsmith.contracts import OperationContract
from mapsmith.errors import ArgumentError

__all__ = [
    "FACET_NAMES",
    "GEOMETRY_FAMILIES",
    "HOLDS",
    "PRODUCES",
    "EntryFacets",
    "FacetFilter",
    "entry_facets",
    "filter_entries",
    "normalise_filter",
]

# What a caller can say it holds. "dataset" is any dataset at all; "plan" is a multi-step plan (no
# catalog operation takes one: plans go to the validate_plan/explain_plan/execute_plan tools);
# "none" means the caller has no data yet. "table" is a non-spatial table (join_attributes).
HOLDS = ("vector", "raster", "table", "dataset", "plan", "none")
# The old list_operations accepted "any" for "any dataset"; kept as an alias.
HOLDS_ALIASES = {"any": "dataset"}
PRODUCES = ("dataset:vector", "dataset:raster", "answer", "description")
# What an entry produces when its contract declares ``[output] effect``: not one of PRODUCES, so a caller's
# ``produces`` never keeps it (with none declared it stays a candidate, and "relaxed" names it).
EFFECT = "effect"
GEOMETRY_FAMILIES = ("point", "line", "polygon")
# What describe_dataset (and OGR) call a geometry type, reduced to the family a contract declares.
GEOMETRY_ALIASES = {
    "point": "point",
    "multipoint": "point",
    "line": "line",
    "linestring": "line",
    "multilinestring": "line",
    "polyline": "line",
    "polygon": "polygon",
    "multipolygon": "polygon",
}
# In the order removed_by reports them.
FACET_NAMES = ("input_kind", "produces", "dataset_count", "geometry_types", "projected_crs", "category")
PLAN_TOOLS = ("validate_plan", "explain_plan", "execute_plan")


@dataclass(frozen=True)
class EntryFacets:
    """The declared facets of one contract."""

    name: str
    holds: frozenset[str]
    produces: str
    dataset_count: tuple[int, int | None]  # (min, max); max None = any number
    geometry_types: frozenset[str] | None  # families its vector inputs accept; None = any
    reads_vector: bool
    needs_projected_crs: bool
    category: str
    status: str
    # What its result may be besides ``produces`` (answers_also): a caller's produces matches either.
    also_produces: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        low, high = self.dataset_count
        return {
            "holds": sorted(self.holds),
            "produces": self.produces,
            **({"also_produces": sorted(self.also_produces)} if self.also_produces else {}),
            "dataset_count": {"min": low, "max": high},
            "geometry_types": None if self.geometry_types is None else sorted(self.geometry_types),
            "needs_projected_crs": self.needs_projected_crs,
        }


def entry_facets(contract: OperationContract) -> EntryFacets:
    """The facets ``contract`` declares, from its dataset arguments, output kind and CRS need."""
    holds: set[str] = set()
    low = 0
    high: int | None = 0
    geometry: set[str] | None = set()
    reads_vector = False
    for d in contract.datasets:
        kinds = {"vector", "raster", "table"} if d.kind == "any" else {d.kind}
        holds |= kinds | {"dataset"}
        count = d.min_count if d.multiple else 1
        if d.required:
            low += count
        if d.multiple:
            high = None
        elif high is not None:
            high += 1
        if "vector" in kinds:
            reads_vector = True
            if d.geometry_types is None:
                geometry = None
            elif geometry is not None:
                geometry |= set(d.geometry_types)
    if contract.datasets_named_in is not None:
        # run_sql reads what its SQL names: any number of vector or table datasets, of any geometry.
        holds |= {"vector", "table", "dataset"}
        high = None
        geometry = None
        reads_vector = True
    if not any(d.required for d in contract.datasets):
        holds.add("none")  # runs without any data (resolve_crs), or with optional data only
    return EntryFacets(
        name=contract.name,
        holds=frozenset(holds),
        # An answer that holds no value (``[output] effect``) is no answer a caller can ask for.
        produces=EFFECT if contract.output_effect is not None else contract.output_kind,
        also_produces=answers_also(contract),
        dataset_count=(low, high),
        geometry_types=None if geometry is None else frozenset(geometry),
        reads_vector=reads_vector,
        needs_projected_crs=contract.needs_projected_crs,
        category=contract.category,
        status=contract.status,
    )


def answers_also(contract: OperationContract) -> frozenset[str]:
    """What else than its output kind a contract's result may be, from its declared fields: ``answer`` when its
    output is optional (run_sql without output_path answers with its rows), when it declares what its answer holds
    besides the dataset (``[output] answers``: measure_area's total area), and for a ``description``
    (describe_dataset answers with a dataset's facts: a caller asking for an answer about a dataset wants it).
    A caller's ``produces`` keeps an entry when it names the output kind or one of these."""
    if contract.output_optional or contract.also_answers or contract.output_kind == "description":
        return frozenset({"answer"})
    return frozenset()


@dataclass(frozen=True)
class FacetFilter:
    """The facets a caller declared, normalised; None = not declared."""

    input_kind: frozenset[str] | None = None
    produces: frozenset[str] | None = None
    dataset_count: int | None = None
    geometry_types: frozenset[str] | None = None
    projected_crs: bool | None = None
    category: str | None = None
    category_filter: bool = False

    def declared(self) -> dict[str, Any]:
        """The declared facets as JSON, for answers and the discovery log."""
        out: dict[str, Any] = {}
        if self.input_kind is not None:
            out["input_kind"] = sorted(self.input_kind)
        if self.produces is not None:
            out["produces"] = sorted(self.produces)
        if self.dataset_count is not None:
            out["dataset_count"] = self.dataset_count
        if self.geometry_types is not None:
            out["geometry_types"] = sorted(self.geometry_types)
        if self.projected_crs is not None:
            out["projected_crs"] = self.projected_crs
        if self.category is not None:
            out["category"] = self.category
            out["category_filter"] = self.category_filter
        return out

    def rejects(self, facets: EntryFacets) -> list[str]:
        """The names of the declared facets that ``facets`` does not satisfy, in FACET_NAMES order."""
        out = []
        if self.input_kind is not None and not self._holds_match(facets):
            out.append("input_kind")
        if (
            self.produces is not None
            and facets.produces not in self.produces
            and not self.produces & facets.also_produces
        ):
            out.append("produces")
        if self.dataset_count is not None:
            low, high = facets.dataset_count
            if self.dataset_count < low or (high is not None and self.dataset_count > high):
                out.append("dataset_count")
        # Geometry says nothing about an entry that reads no vector data (a raster-only operation).
        if self.geometry_types is not None and facets.reads_vector and facets.geometry_types is not None:
            if not self.geometry_types & facets.geometry_types:
                out.append("geometry_types")
        if self.projected_crs is False and facets.needs_projected_crs:
            out.append("projected_crs")
        if self.category_filter and self.category is not None and facets.category != self.category:
            out.append("category")
        return out

    def _holds_match(self, facets: EntryFacets) -> bool:
        # The entry can use something the caller holds (or, for "none", needs nothing it lacks).
        assert self.input_kind is not None
        return bool(self.input_kind & facets.holds)


def _invalid(argument: str, value: Any, accepted: Sequence[Any], why: str = "") -> ArgumentError:
    listed = ", ".join(str(a) for a in accepted)
    return ArgumentError(
        f"{argument} {value!r} is not accepted{why}; accepted: {listed}",
        code="INVALID_FILTER",
        evidence={"argument": argument, "value": value, "accepted": list(accepted)},
        hint=f"pass {argument} as one of {listed}, or leave it out",
    )


def _one_or_many(argument: str, value: Any, accepted: Sequence[str], aliases: Mapping[str, str]) -> frozenset[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list | tuple) or not values:
        raise _invalid(argument, value, accepted, " (a string or a non-empty list of strings)")
    out = set()
    for v in values:
        key = v.strip().lower() if isinstance(v, str) else v
        key = aliases.get(key, key)
        if key not in accepted:
            raise _invalid(argument, v, accepted)
        out.add(key)
    return frozenset(out)


def normalise_filter(
    *,
    input_kind: Any = None,
    produces: Any = None,
    dataset_count: Any = None,
    geometry_types: Any = None,
    projected_crs: Any = None,
    category: Any = None,
    category_filter: Any = False,
    categories: Iterable[str] = (),
) -> FacetFilter:
    """Check every declared facet and normalise it; raise ``ArgumentError`` INVALID_FILTER, naming the
    accepted values, on the first one that is not valid. ``categories`` are the categories accepted."""
    kinds = None if input_kind is None else _one_or_many("input_kind", input_kind, HOLDS, HOLDS_ALIASES)
    wanted = None if produces is None else _one_or_many("produces", produces, PRODUCES, {})
    if dataset_count is not None and (
        isinstance(dataset_count, bool) or not isinstance(dataset_count, int) or dataset_count < 0
    ):
        raise _invalid("dataset_count", dataset_count, ["an integer >= 0"])
    families = None
    if geometry_types is not None:
        families = frozenset(
            GEOMETRY_ALIASES[g] for g in _one_or_many("geometry_types", geometry_types, sorted(GEOMETRY_ALIASES), {})
        )
    if projected_crs is not None and not isinstance(projected_crs, bool):
        raise _invalid("projected_crs", projected_crs, [True, False])
    accepted_categories = sorted(set(categories))
    if category is not None and (not isinstance(category, str) or category not in accepted_categories):
        raise _invalid("category", category, accepted_categories)
    if not isinstance(category_filter, bool):
        raise _invalid("category_filter", category_filter, [True, False])
    if category_filter and category is None:
        raise _invalid("category_filter", category_filter, [False], " without a category")
    return FacetFilter(kinds, wanted, dataset_count, families, projected_crs, category, category_filter)


def filter_entries(
    entries: Iterable[EntryFacets], facet_filter: FacetFilter | None = None, **facets: Any
) -> tuple[list[EntryFacets], dict[str, dict[str, Any]]]:
    """The entries every declared facet keeps, and per declared facet what it removed.

    Facets come either checked, as ``facet_filter``, or as keywords (``input_kind=``, ``produces=``,
    ``dataset_count=``, ``geometry_types=``, ``projected_crs=``, ``category=``, ``category_filter=``),
    checked here against the entries' own categories.

    ``removed_by[facet]`` is ``{"removed": [names it rejects], "only_by_this": [names no other
    facet rejects], "would_remain_if_dropped": n}``: how many entries would remain were that facet
    alone not declared. Facets not declared do not appear.
    """
    entries = list(entries)
    if facet_filter is None:
        facet_filter = normalise_filter(categories={e.category for e in entries}, **facets)
    elif facets:
        raise TypeError("pass either facet_filter or facet keywords, not both")
    rejections = {e.name: facet_filter.rejects(e) for e in entries}
    remaining = [e for e in entries if not rejections[e.name]]
    declared = facet_filter.declared()
    removed_by: dict[str, dict[str, Any]] = {}
    for facet in FACET_NAMES:
        if facet not in declared or (facet == "category" and not facet_filter.category_filter):
            continue
        removed = sorted(n for n, r in rejections.items() if facet in r)
        only = sorted(n for n, r in rejections.items() if r == [facet])
        removed_by[facet] = {
            "removed": removed,
            "only_by_this": only,
            "would_remain_if_dropped": len(remaining) + len(only),
        }
    return remaining, removed_by
