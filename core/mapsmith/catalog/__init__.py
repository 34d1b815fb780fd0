"""The operation catalog as a search: declared facets narrow it, rankers order what remains.

``discover`` answers ``list_operations``. Facets live in ``facets``, the BM25 ranker in ``lexical``,
the static-embedding ranker in ``vector`` (its model is committed with the package; lexical answers
if those files are missing or altered), whether a request is supported at all (the ``none`` status) in
``support``, the tasks the catalogue declares it does not do (geocoding, routing, ...) in ``scope``, which
QGIS algorithm does the job of one of ours in ``pairs``, experimental operations after the stable ones doing
their job in ``maturity``, the index built once per catalogue (documents, BM25, the vector ranker) in ``index``, the
support signals read from it in ``signals``, and the opt-in log of searches in ``discovery_log``. Importing this
package must stay cheap: it imports no engine and loads no embedding until a search asks for one.
"""

from __future__ import annotations

from mapsmith.catalog.facets import (
    FACET_NAMES,
    GEOMETRY_FAMILIES,
    HOLDS,
    PRODUCES,
    EntryFacets,
    FacetFilter,
    entry_facets,
    filter_entries,
    normalise_filter,
)
from mapsmith.catalog.index import entry_document
from mapsmith.catalog.search import (
    CHOOSE_LIMIT,
    DISCOVERY_LOG_ENV,
    ENGINES,
    RANKED_LIMIT,
    check_discovery_log,
    discover,
    record_next_operation,
)

__all__ = [
    "CHOOSE_LIMIT",
    "DISCOVERY_LOG_ENV",
    "ENGINES",
    "FACET_NAMES",
    "GEOMETRY_FAMILIES",
    "HOLDS",
    "PRODUCES",
    "RANKED_LIMIT",
    "EntryFacets",
    "FacetFilter",
    "check_discovery_log",
    "discover",
    "entry_document",
    "entry_facets",
    "filter_entries",
    "normalise_filter",
    "record_next_operation",
]
