"""A contract per catalog entry: the facets an agent holding the entry's own first example's data would
declare never filter the entry out, and a search made from that example's description delivers it.

The facets are built from the example's arguments (the datasets it passes and their declared kinds and
geometry), never from the catalog text the rankers read, so an entry cannot pass by describing itself.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from mapsmith.app import MapSmith
from mapsmith.catalog.facets import entry_facets, filter_entries, normalise_filter
from mapsmith.catalog.search import discover
from mapsmith.contracts import OperationContract, load_builtin_contracts

CONTRACTS = load_builtin_contracts()
RASTER_SUFFIXES = {".tif", ".tiff", ".vrt", ".img", ".asc", ".nc"}
TABLE_SUFFIXES = {".csv", ".xlsx", ".ods", ".dbf"}


def _kind_of(path: str) -> str:
    suffix = PurePosixPath(path).suffix.lower()
    return "raster" if suffix in RASTER_SUFFIXES else "table" if suffix in TABLE_SUFFIXES else "vector"


def held_facets(contract: OperationContract) -> dict[str, Any]:
    """What an agent holding the data of ``contract``'s first example would declare about it."""
    arguments = contract.examples[0]["arguments"]
    kinds: set[str] = set()
    geometry: set[str] = set()
    count = 0
    for d in contract.datasets:
        value = arguments.get(d.name)
        if value is None:
            continue
        paths = value if isinstance(value, list) else [value]
        count += len(paths)
        kind = _kind_of(paths[0]) if d.kind == "any" else d.kind
        kinds.add(kind)
        if kind == "vector" and d.geometry_types:
            geometry.add(d.geometry_types[0])  # one layer holds one geometry type
    facets: dict[str, Any] = {
        "input_kind": sorted(kinds) or "none",
        "produces": contract.output_kind,
        "dataset_count": count,
        "projected_crs": contract.needs_projected_crs,
    }
    if geometry:
        facets["geometry_types"] = sorted(geometry)
    return facets


@pytest.fixture(scope="module")
def service() -> MapSmith:
    return MapSmith({})


def test_the_catalog_is_all_here() -> None:
    assert len(CONTRACTS) >= 50


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_its_declared_facets_never_filter_it_out(name: str) -> None:
    contract = CONTRACTS[name]
    facets = held_facets(contract)
    remaining, removed_by = filter_entries([entry_facets(c) for c in CONTRACTS.values()], normalise_filter(**facets))
    assert name in {e.name for e in remaining}, (facets, removed_by)
    # every declared facet actually constrains something, or it would prove nothing
    assert len(remaining) < len(CONTRACTS)


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_it_is_found_from_its_own_first_example(service: MapSmith, name: str) -> None:
    contract = CONTRACTS[name]
    query = contract.examples[0]["description"]
    answer = discover(service, query, engine="lexical", **held_facets(contract))
    assert answer["status"] in ("choose", "ranked", "unsure")
    assert name in [c["operation"] for c in answer["candidates"]], answer["message"]
