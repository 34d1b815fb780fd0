"""Operations an agent writes: checked in a jail, kept in the workspace, run in the jail every time.

Layout: ``check`` (``propose``: the refusals, the examples, the store write), ``store`` (the folder per
proposal and its digests), ``jailrun`` (the implementation the runner calls: the source in
``mapsmith.sandbox.jail``, MapSmith's one sandbox, judged from outside), ``inside`` (what the jail's
child runs: the context, the agent's code under the armed witness, the reply), ``register`` (into the
plugin host, as experimental). ``refresh`` registers what the store holds and the catalogue does not
yet (a restarted server, or another worker that accepted a proposal).

This package must never run a proposal's code outside the jail, and never let a proposal replace an
operation that exists.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from mapsmith.proposals.store import STORE_ENV, load_all, store_root

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

log = logging.getLogger("mapsmith.proposals")
__all__ = ["STORE_ENV", "refresh"]


def refresh(app: MapSmith) -> list[dict[str, str]]:
    """Register every stored proposal the catalogue lacks; the stored ones that could not be, and why."""
    from mapsmith.proposals import register

    root = app.workspace.root
    records, problems = load_all(store_root(Path(root) if root else None, app.environ))
    for record in records:
        if record.name in app.host.experimental_registrations:
            continue
        if app.host.contracts.get(record.name) is not None:
            problems.append({"proposal": record.name, "problem": "an installed operation now has this name"})
            continue
        try:
            register.add(app, record)
        except Exception as exc:  # noqa: BLE001 - one bad folder must not keep the server from starting
            problems.append({"proposal": record.name, "problem": f"{type(exc).__name__}: {exc}"[:300]})
    for p in problems:
        log.warning("stored proposal %s not registered: %s", p["proposal"], p["problem"])
    return problems
