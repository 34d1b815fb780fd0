"""What the discovery scripts share: the query file and how it is read, the facet rows, the catalogue they search
(the built-in contracts, and QGIS's algorithms from the committed extract), and how an answer's order is read.

``discovery_report`` renders the page from these, ``discovery_sections`` its sections drawn from other files, and
``discovery_calibrate``, ``discovery_latency`` and ``discovery_embeddings`` measure over the same requests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
QUERIES = REPO / "tests" / "data" / "discovery_queries.json"
# Each row declares one more facet than the row above it, in the order an agent learns them.
ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nothing declared", ()),
    ("+ data kind", ("input_kind",)),
    ("+ wanted output", ("input_kind", "produces")),
    ("+ dataset count", ("input_kind", "produces", "dataset_count")),
    ("+ geometry type", ("input_kind", "produces", "dataset_count", "geometry_types")),
)
RANKERS = ("lexical", "vector", "fusion")
# Answers that say "I cannot tell" rather than offer a confident list.
REFUSING_STATUSES = frozenset({"none", "empty", "unsure"})
QGIS_EXTRACT = REPO / "tests" / "data" / "qgis_algorithms.json"
TOP = 3

Discover = Callable[..., Mapping[str, Any]]


def in_calibration_half(request_id: str) -> bool:
    """The half of the query file thresholds and weights are fitted on (``discovery_calibrate.py``): ids whose
    sha256 starts with an even byte. Fixed by the id alone, so a request never changes sides when others are
    added; the other half is held out and reported apart."""
    return hashlib.sha256(request_id.encode("utf-8")).digest()[0] % 2 == 0


def load_queries(path: Path = QUERIES) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if data.get("version") != 1:
        raise ValueError(f"{path}: unsupported version {data.get('version')!r}")
    return data


def declared_facets(facets: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The facets of one row a request declares: those named, leaving out what the person could not say."""
    return {name: facets[name] for name in names if facets.get(name) is not None}


class CatalogOnly:
    """What ``discover`` reads of a service, over the built-in contracts only (plus, when asked, QGIS's
    algorithms from the committed extract): the page must not depend on which third-party plugins happen
    to be installed, nor on a workspace or a discovery log."""

    def __init__(self, with_qgis: bool = False) -> None:
        from mapsmith.contracts import load_builtin_contracts
        from mapsmith.workspace import Workspace

        contracts = load_builtin_contracts()
        if with_qgis:
            contracts.update(qgis_contracts())
        self.host = SimpleNamespace(contracts=contracts)
        self.environ: dict[str, str] = {}
        self.workspace = Workspace.from_env({})


def make_app(with_qgis: bool = False) -> CatalogOnly:
    return CatalogOnly(with_qgis)


def qgis_contracts(path: Path = QGIS_EXTRACT) -> dict[str, Any]:
    """QGIS's algorithms as the qgis stack registers them, derived from the committed extract."""
    from mapsmith.contracts import parse_contract
    from mapsmith_qgis.algorithms import derive_catalogue

    data = json.loads(path.read_text(encoding="utf-8"))
    derived = derive_catalogue(data)
    out = {}
    for alg_id, imported in derived.items():
        contract = parse_contract(imported["contract"], f"{path.name}:{alg_id}")
        out[contract.name] = contract
    return out


def ordered_names(answer: Mapping[str, Any], engine: str) -> list[str]:
    """The candidates in the order ``engine`` ranked them.

    An ``unsure`` answer shows both rankers' guesses; when it keeps them apart (a mapping from engine
    to its list) the engine's own list is used, otherwise the candidates as delivered.
    """
    for key in ("guesses", "by_engine"):
        guesses = answer.get(key)
        if isinstance(guesses, Mapping) and engine in guesses:
            return [candidate_name(c) for c in guesses[engine]]
    return [candidate_name(c) for c in answer.get("candidates", [])]


def candidate_name(candidate: Any) -> str:
    return str(candidate["operation"] if isinstance(candidate, Mapping) else candidate)


def count_pct(n: int, total: int) -> str:
    # counts beside the share: on 92 requests one request is 1.1 points, and a goal of "under 2 %" is two
    return f"{n} ({100 * n / total:.1f}%)" if total else "–"
