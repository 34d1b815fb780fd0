"""Toolboxes: families of operations a plugin can only list at a cost, loaded the first time they are asked for.

A toolbox is every operation whose name starts with one prefix (``qgis:`` for QGIS Processing's
~340 algorithms). Listing it costs a subprocess and hundreds of contracts to validate, so the
plugin declares the toolbox at start (cheap) and the host calls its ``load`` only when a name with
that prefix, or the whole catalogue, is asked for: an operation outside every toolbox pays nothing
for one being installed. ``Catalogue`` is the mapping that makes that happen behind the
``host.contracts`` / ``host.implementations`` names every caller already uses.

It must never load a toolbox on its own (only an access does), never import an engine, and never
let a toolbox register a name outside its prefix (the host checks, ``plugins.py``).

The hook spec lives here rather than in ``hookspecs.py`` only because that module belongs to
another change in flight; it is an ordinary spec of the ``mapsmith`` project, added to the same
plugin manager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

import pluggy

from mapsmith.hookspecs import PROJECT

if TYPE_CHECKING:
    from mapsmith.registry import RegisterOperation

hookspec = pluggy.HookspecMarker(PROJECT)

V = TypeVar("V")


@dataclass(frozen=True)
class Toolbox:
    """Every operation named ``<prefix>…`` of one stack, registered by ``load`` when first needed.

    ``load(register)`` registers the operations through the same validating callback as
    ``mapsmith_register_operations``; it may register nothing (the stack is not installed here:
    the router then answers with the stack's own reason and fix). An exception from it is reported
    once and the toolbox stays empty for the life of the process.
    """

    stack: str
    prefix: str
    summary: str
    load: Callable[[RegisterOperation], None]


class RegisterToolbox(Protocol):
    def __call__(self, toolbox: Toolbox) -> None: ...


@hookspec
def mapsmith_register_toolboxes(register: RegisterToolbox) -> None:
    """Declare toolboxes: operation families loaded the first time one of their names is asked for.

    Called once, after every plugin's :func:`mapsmith_register_operations`. Call
    ``register(Toolbox(stack=..., prefix=..., summary=..., load=...))`` once per toolbox. Declaring
    must be cheap (no subprocess, no engine import): ``load`` does the work, later, and only when
    an operation named ``<prefix>…`` is looked up or the whole catalogue is listed.

    :param register: the core's callback; it raises ``PluginError`` for an unknown stack, an empty
        prefix or a prefix another toolbox already has.
    :return: nothing; all results go through ``register``.
    """


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
