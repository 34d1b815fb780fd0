"""Stable before experimental: an experimental operation is ranked after the stable ones that do its job.

MapSmith's own operations (and a plugin's once promoted on evidence) are ``stable``; a plugin's are
``experimental`` until then (the plugin host decides, ``OperationContract.maturity``). An agent reads a
list from the top, so an experimental entry must not sit above a stable entry that does the same job for
this request: it is moved to just after the last such entry.

"Does the same job" is decided from declared fields, never from prose: the same output kind and at least
one kind of input data in common (the facets), a positive score for this request, and the same arguments
(``signatures``: the parameter names, leaving out those a quarter of the catalogue takes, such as ``layer``
or ``limit``; an entry with no other argument has no signature and is nobody's twin). Facets alone are not
enough, nor is a near tie in score: a buffer and a vertex count both write a vector layer from one, and
"number of vertices in each feature" scores simplify_layer within a place of the hello plugin's
count_vertices, which is still the only operation that counts vertices. An experimental entry that is the
only match keeps its place.

What this module must never do: remove a candidate, move a stable entry, or read a contract's prose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mapsmith.catalog.facets import EntryFacets

__all__ = [
    "EXPERIMENTAL",
    "GENERIC_PARAMETER_SHARE",
    "STABLE",
    "maturity_of",
    "signatures",
    "stable_first",
]

STABLE = "stable"
EXPERIMENTAL = "experimental"
# A parameter more than this share of the catalogue takes says nothing about the job (layer, band, limit, offset).
GENERIC_PARAMETER_SHARE = 0.25
_DATA_KINDS = frozenset({"vector", "raster", "table", "none"})


def maturity_of(contract: Any) -> str:
    """The contract's ``maturity`` as the plugin host set it; ``stable`` where the attribute is absent."""
    value = getattr(contract, "maturity", None)
    return str(value) if value else STABLE


def signatures(contracts: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Per entry, the names of its parameters that at most ``GENERIC_PARAMETER_SHARE`` of the entries take."""
    names = {n: frozenset(p.name for p in getattr(c, "parameters", ())) for n, c in contracts.items()}
    counts: dict[str, int] = {}
    for params in names.values():
        for p in params:
            counts[p] = counts.get(p, 0) + 1
    generic = {p for p, k in counts.items() if k > GENERIC_PARAMETER_SHARE * len(names)}
    return {n: params - generic for n, params in names.items()}


def _same_facets(a: EntryFacets, b: EntryFacets) -> bool:
    return a.produces == b.produces and bool(a.holds & b.holds & _DATA_KINDS or not (a.holds | b.holds) & _DATA_KINDS)


def _same_job(
    name: str,
    other: str,
    maturity: Mapping[str, str],
    facets: Mapping[str, EntryFacets],
    scores: Mapping[str, float],
    signature: Mapping[str, frozenset[str]],
) -> bool:
    """Whether the stable ``other`` does the job of the experimental ``name`` for this request (see the module)."""
    score = scores.get(other, 0.0)
    if maturity.get(other, STABLE) != STABLE or score <= 0 or other not in facets:
        return False
    if not _same_facets(facets[name], facets[other]):
        return False
    own = signature.get(name)
    return bool(own) and own == signature.get(other)


def stable_first(
    ordered: Sequence[str],
    maturity: Mapping[str, str],
    facets: Mapping[str, EntryFacets],
    scores: Mapping[str, float],
    signature: Mapping[str, frozenset[str]] | None = None,
) -> list[str]:
    """``ordered`` with each experimental entry moved to just after the last stable entry below it that does the
    same job (see the module); everything else keeps its order."""
    signature = signature or {}
    out = list(ordered)
    for name in [n for n in ordered if maturity.get(n) == EXPERIMENTAL and n in facets]:
        here = out.index(name)
        below = [i for i in range(here + 1, len(out)) if _same_job(name, out[i], maturity, facets, scores, signature)]
        if below:
            out.insert(below[-1], out.pop(here))
    return out
