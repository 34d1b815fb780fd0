"""Toolboxes: families of operations a plugin can only list at a cost, loaded the first time they are asked for.

A toolbox is every operation whose name starts with one prefix (``qgis:`` for QGIS Processing's
~340 algorithms). Listing it costs a subprocess and hundreds of contracts to validate, so the
plugin declares the toolbox at start (cheap) and the host calls its ``load`` only when a name with
that prefix, or the whole catalogue, is asked for: an operation outside every toolbox pays nothing
for one being installed. ``Catalogue`` is the mapping that makes that happen behind the
``host.contracts`` / ``host.implementations`` names every caller already uses.

It must never load a toolbox on its own (only an access does), never import an engine, and never
let a toolbox register a name outside its prefix (the host checks, ``plugins.py``).

The hook a plugin declares a toolbox with is ``mapsmith_register_toolboxes`` (``hookspecs.py``);
``Toolbox`` is a registry record (``registry.py``), re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TypeVar

from mapsmith.registry import RegisterToolbox, Toolbox

__all__ = ["Catalogue", "RegisterToolbox", "Toolbox"]

V = TypeVar("V")


class Catalogue(MutableMapping[str, V]):
    """A dict that asks ``ensure(key)`` before a lookup and ``ensure(None)`` before a listing.

    ``ensure`` loads whichever toolbox the key (or, for ``None``, every pending toolbox) needs;
    ``loaded()`` is what is there without loading anything (for server_info's counts).
    """

    def __init__(self, data: Mapping[str, V], ensure: Callable[[str | None], None]) -> None:
        self._data: dict[str, V] = dict(data)
        self._ensure = ensure

    def __getitem__(self, key: str) -> V:
        self._ensure(key)
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._ensure(key)
        return key in self._data

    def __setitem__(self, key: str, value: V) -> None:
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        self._ensure(None)
        return iter(list(self._data))

    def __len__(self) -> int:
        self._ensure(None)
        return len(self._data)

    def loaded(self) -> dict[str, V]:
        """A copy of what is registered now; loads nothing."""
        return dict(self._data)

    def __repr__(self) -> str:
        return f"Catalogue({len(self._data)} loaded)"
