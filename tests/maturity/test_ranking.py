"""list_operations ranks an experimental operation after the stable one that does the same job.

The experimental twin is registered at run time with a contract written to out-score measure_area on the
query (its words repeat the query's), so only its maturity can put it second.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

from mapsmith.app import MapSmith
from mapsmith.contracts import contracts_root

QUERY = "area of each polygon in square metres"
TWIN = "polygon_area_square_metres"
ORIGIN = {"name": "proposal-area", "version": "1", "code_sha256": hashlib.sha256(b"area").hexdigest()}


def _twin_contract() -> dict[str, Any]:
    raw = tomllib.loads((contracts_root() / "operations" / "measure_area.toml").read_text("utf-8"))
    raw.pop("title", None)
    return {
        **raw,
        "name": TWIN,
        "summary": "Area of each polygon in square metres: the area of each polygon, in square metres.",
        "keywords": ["area", "polygon", "square metres", "each polygon", "area of each polygon"],
    }


def _order(app: MapSmith, query: str) -> list[str]:
    return [c["operation"] for c in app.discover(query, limit=None)["candidates"]]


def test_an_experimental_twin_ranks_after_the_stable_operation(workspace: Path) -> None:
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_QGIS_ALGORITHMS": "0"})
    app.host.register_experimental(lambda ctx: None, _twin_contract(), ORIGIN)

    # The twin's text matches the query better: with its maturity ignored it would rank first.
    lexical = app.discover(QUERY, limit=None, engine="lexical")
    scores = {c["operation"]: c["score"] for c in lexical["candidates"]}
    assert scores[TWIN] > scores["measure_area"]

    order = _order(app, QUERY)
    assert order.index("measure_area") < order.index(TWIN)
    entries = {c["operation"]: c for c in app.discover(QUERY, limit=None)["candidates"]}
    assert entries[TWIN]["maturity"] == "experimental" and entries["measure_area"]["maturity"] == "stable"
    listed = {e["operation"]: e["maturity"] for e in app.list_operations()}
    assert listed[TWIN] == "experimental" and listed["measure_area"] == "stable"


def test_a_stable_twin_keeps_its_lexical_place(workspace: Path) -> None:
    # Clean twin: the same contract as MapSmith's own (stable) operation is ranked by its text alone.
    from mapsmith.contracts import parse_contract

    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_QGIS_ALGORITHMS": "0"})
    app.host.contracts[TWIN] = parse_contract(_twin_contract(), source="test twin")  # stable by default
    app.host.implementations[TWIN] = []
    order = _order(app, QUERY)
    assert order.index(TWIN) < order.index("measure_area")
