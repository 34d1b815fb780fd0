"""PluginHost: the one typed facade over pluggy. Nothing else in MapSmith touches ``pm.hook``.

Loads every plugin of the entry-point group ``mapsmith`` (ours and third parties' alike), checks
that every hook they implement exists (``check_pending``), collects their stacks and operation
implementations through validating callbacks, and joins the implementations to the contracts.
Environment:

- ``MAPSMITH_PLUGINS``: comma-separated allow-list of entry-point names; unset loads all.
- ``MAPSMITH_PLUGIN_TRACE=1``: print every hook call and result to stderr.

It must never import an engine itself; plugins import their engines lazily.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pluggy

from mapsmith import hookspecs
from mapsmith.contracts import OperationContract, load_builtin_contracts, load_contract_file, parse_contract
from mapsmith.errors import ContractError, PluginError
from mapsmith.registry import OperationImpl, StackSpec, Unavailable

ENTRY_POINT_GROUP = "mapsmith"


class PluginHost:
    """Loaded plugins, their stacks, and the catalog of contracts with their implementations."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        extra_plugins: Iterable[tuple[str, object]] = (),
        load_entry_points: bool = True,
    ) -> None:
        import os

        env = os.environ if environ is None else environ
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        if env.get("MAPSMITH_PLUGIN_TRACE") == "1":
            self._pm.trace.root.setwriter(lambda msg: print(msg, end="", file=sys.stderr))
            self._pm.enable_tracing()
        self.distributions: dict[str, dict[str, str]] = {}
        if load_entry_points:
            allow = {n.strip() for n in env.get("MAPSMITH_PLUGINS", "").split(",") if n.strip()}
            self._load_entry_points(allow or None)
        for name, plugin in extra_plugins:
            self._pm.register(plugin, name=name)
            self.distributions.setdefault(
                name, {"plugin": name, "distribution": "(registered in process)", "version": ""}
            )
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"a plugin implements a hook MapSmith does not define: {exc}",
                code="PLUGIN_UNKNOWN_HOOK",
                hint="hook names are listed in mapsmith/hookspecs.py; check the spelling",
            ) from exc

        self.stacks: dict[str, StackSpec] = {}
        self.contracts: dict[str, OperationContract] = load_builtin_contracts()
        self.implementations: dict[str, list[OperationImpl]] = {}
        self._pm.hook.mapsmith_register_stacks(register=self._register_stack)
        self._pm.hook.mapsmith_register_operations(register=self._register_operation)
        for impls in self.implementations.values():
            impls.sort(key=lambda i: -i.preference)

    # -- loading -------------------------------------------------------------------------------

    def _load_entry_points(self, allow: set[str] | None) -> None:
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if allow is not None and ep.name not in allow:
                continue
            if self._pm.get_plugin(ep.name) is not None:
                continue  # the same distribution seen twice on sys.path
            try:
                plugin = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}",
                    code="PLUGIN_IMPORT_FAILED",
                    evidence={"entry_point": ep.name, "value": ep.value},
                    hint="reinstall the plugin's distribution, or leave it out with MAPSMITH_PLUGINS",
                ) from exc
            self._pm.register(plugin, name=ep.name)
            dist = ep.dist
            self.distributions[ep.name] = {
                "plugin": ep.name,
                "distribution": dist.name if dist else "",
                "version": dist.version if dist else "",
            }

    def _register_stack(self, spec: StackSpec) -> None:
        if not isinstance(spec, StackSpec):
            raise PluginError(f"register_stacks was given {type(spec).__name__}, not a StackSpec")
        if spec.name in self.stacks:
            raise PluginError(f"stack {spec.name!r} is registered twice", code="PLUGIN_DUPLICATE")
        self.stacks[spec.name] = spec

    def _register_operation(
        self,
        implementation: Callable[..., None],
        *,
        operation: str,
        stack: str,
        engine: str,
        preference: int = 0,
        eligible: Callable[..., str | None] | None = None,
        requirement: Callable[[], Unavailable | None] | None = None,
        contract: Path | Mapping[str, Any] | None = None,
        validate: Callable[..., None] | None = None,
    ) -> None:
        if stack not in self.stacks:
            raise PluginError(
                f"operation {operation!r} is registered for unknown stack {stack!r}",
                code="PLUGIN_UNKNOWN_STACK",
                hint=f"known stacks: {sorted(self.stacks)}",
            )
        if contract is not None:
            parsed = (
                load_contract_file(Path(contract))
                if isinstance(contract, (str, Path))
                else parse_contract(contract, source=f"plugin contract for {operation}")
            )
            if parsed.name != operation:
                raise ContractError(f"contract names {parsed.name!r}, registered as {operation!r}")
            known = self.contracts.get(operation)
            if known is not None and known.raw != parsed.raw:
                raise PluginError(
                    f"operation {operation!r} already has a different contract ({known.source})",
                    code="PLUGIN_CONTRACT_CONFLICT",
                    hint="a plugin may add operations, not redefine existing ones",
                )
            self.contracts[operation] = parsed
        if operation not in self.contracts:
            raise PluginError(
                f"operation {operation!r} has no contract",
                code="PLUGIN_NO_CONTRACT",
                hint="pass contract= with a TOML path or mapping when registering a new operation",
            )
        if not callable(implementation):
            raise PluginError(f"implementation of {operation!r} on {stack!r} is not callable")
        impls = self.implementations.setdefault(operation, [])
        if any(i.stack == stack and i.engine == engine for i in impls):
            raise PluginError(
                f"engine {engine!r} of stack {stack!r} registers {operation!r} twice", code="PLUGIN_DUPLICATE"
            )
        impls.append(
            OperationImpl(operation, stack, engine, implementation, preference, eligible, requirement, validate)
        )

    # -- queries -------------------------------------------------------------------------------

    def plugin_names(self) -> list[str]:
        return sorted(n for n, _ in self._pm.list_name_plugin())

    def implementations_for(self, operation: str, stack: str) -> list[OperationImpl]:
        return [i for i in self.implementations.get(operation, []) if i.stack == stack]
