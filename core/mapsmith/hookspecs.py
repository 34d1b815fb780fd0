"""The plugin API of MapSmith: every hook a plugin may implement, and nothing else.

Plugins are found through the entry-point group ``mapsmith`` and register what they bring through
a callback the core hands them, so the core owns its registries and validates every registration
(a misspelt operation, a contract that fails the schema, a duplicate engine) before it is used.
The four stacks of this repository are ordinary plugins of this API.

This module must never import an engine: it is loaded at server start-up, which must stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from mapsmith.registry import RegisterOperation, RegisterStack, RegisterToolbox

PROJECT = "mapsmith"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def mapsmith_register_stacks(register: RegisterStack) -> None:
    """Declare the stacks (families of engines) this plugin provides.

    Called once, when the :class:`~mapsmith.plugins.PluginHost` loads, before any operation is
    registered. Call ``register(StackSpec(...))`` once per stack. A stack's ``availability``
    callable must report, without raising, whether the stack can run on this machine and, if not,
    the exact command or step that fixes it. It must detect for real (import probes, executables on
    PATH, install metadata); it is called lazily, when somebody asks.

    :param register: the core's callback; it validates the spec and raises ``PluginError`` on a
        duplicate or malformed stack.
    :return: nothing; all results go through ``register``.
    """


@hookspec
def mapsmith_register_operations(register: RegisterOperation) -> None:
    """Declare operation implementations (and, for new operations, their contracts).

    Called once, after every plugin's :func:`mapsmith_register_stacks`. Call
    ``register(implementation, operation=..., stack=..., engine=...)`` once per engine that can
    run an operation. An operation the catalog does not have yet must come with ``contract=``
    (a path to a TOML contract or the parsed mapping), validated against
    ``contracts/schemas/operation.schema.json``. Several engines may implement one operation in one
    stack; ``preference`` orders them and ``eligible`` says, per run, why an engine cannot take
    this input (for instance CRS unknown or unequal), so the choice is recorded, never guessed.
    ``validate`` checks what the contract cannot express (arguments that only work together) before
    the engine starts, so such a refusal touches no file.

    :param register: the core's callback; it validates the registration and raises
        ``PluginError`` or ``ContractError`` on a bad one.
    :return: nothing; all results go through ``register``.
    """


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
