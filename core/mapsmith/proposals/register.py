"""Putting a proposal into a service's catalogue and taking it out: a thin adapter over the plugin host.

``PluginHost.register_experimental`` (``mapsmith.plugins``) validates the contract, refuses a name in use
and marks the operation experimental with its origin (name, version, code digest, source), which the
runner records in every manifest as ``x-mapsmith:plugin``. This module only builds the jailed
implementation and the origin for it. It must never register a proposal's code as anything but the
jailed wrapper.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapsmith.proposals.jailrun import jailed_implementation
from mapsmith.proposals.store import ProposalRecord

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

ORIGIN_VERSION = "proposed"


def add(app: MapSmith, record: ProposalRecord) -> None:
    origin = {
        "name": f"proposal:{record.name}",
        "version": ORIGIN_VERSION,
        "code_sha256": record.source_sha256,
        "source": record.source_label,
    }
    app.host.register_experimental(
        jailed_implementation(record, app.environ), record.contract, origin, engine="proposal-sandbox"
    )


def remove(app: MapSmith, name: str) -> None:
    if name in app.host.experimental_registrations:
        app.host.remove_experimental(name)


def ensure(app: MapSmith, record: ProposalRecord) -> None:
    """Registered once, with this record's folder: replaces a registration made for the check."""
    remove(app, record.name)
    add(app, record)
