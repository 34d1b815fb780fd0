"""PluginHost: the one typed facade over pluggy. Nothing else in MapSmith touches ``pm.hook``.

Loads every plugin of the entry-point group ``mapsmith`` (ours and third parties' alike), checks
that every hook they implement exists (``check_pending``), collects their stacks and operation
implementations through validating callbacks, and joins the implementations to the contracts.
Toolboxes (``toolboxes.py``: operation families such as ``qgis:*`` that cost a subprocess to list)
are declared at start and loaded the first time one of their names, or the whole catalogue, is
asked for. Environment:

- ``MAPSMITH_PLUGINS``: comma-separated allow-list of entry-point names; unset loads all.
- ``MAPSMITH_PLUGIN_TRACE=1``: print every hook call and result to stderr.

Maturity is decided here, per plugin, never taken from a plugin: each plugin's hooks are called with a
callback bound to that plugin, so an operation is ``stable`` only when the plugin is one the
``mapsmith`` distribution declares, or a promotion record names its exact code
(``mapsmith.pluginkit.maturity``). Everything else, and every operation registered at run time with
``register_experimental``, is ``experimental``.

It must never import an engine itself; plugins import their engines lazily.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pluggy

from mapsmith import hookspecs
from mapsmith.contracts import (
    EXPERIMENTAL,
    STABLE,
    OperationContract,
    load_builtin_contracts,
    load_contract_file,
    parse_contract,
)
from mapsmith.errors import ContractError, PluginError
from mapsmith.pluginkit import maturity
from mapsmith.registry import OperationImpl, StackSpec, Unavailable
from mapsmith.toolboxes import Catalogue, Toolbox

ENTRY_POINT_GROUP = "mapsmith"
log = logging.getLogger("mapsmith.plugins")


@dataclass(frozen=True)
class Provenance:
    """Where one plugin's registrations come from: its maturity is decided per operation from this."""

    plugin: str
    origin: Mapping[str, str] | None  # None for MapSmith's own plugins


@dataclass
class ToolboxState:
    """A declared toolbox and how far it got: ``pending``, ``loading``, ``loaded`` or ``failed``."""

    toolbox: Toolbox
    plugin: str = ""  # the plugin that declared it: its operations take that plugin's maturity
    state: str = "pending"
    problem: str | None = None
    operations: list[str] = field(default_factory=list)
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stack": self.toolbox.stack,
            "prefix": self.toolbox.prefix,
            "summary": self.toolbox.summary,
            "state": self.state,
        }
        if self.state == "loaded":
            out["operations"] = len(self.operations)
            out["load_seconds"] = round(self.seconds or 0.0, 3)
        if self.problem:
            out["problem"] = self.problem
        return out


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
        # Per plugin: its identity when it is not MapSmith's own (None when it is). Decided here, from
        # where the plugin was loaded, so no plugin can declare its own maturity.
        self._provenance: dict[str, Provenance] = {}
        self._workspace_root = maturity.workspace_root_from(env)
        self._promotions: list[dict[str, Any]] | None = None  # read once, when a third party needs it
        self.experimental_registrations: set[str] = set()  # operations added by register_experimental
        if load_entry_points:
            allow = {n.strip() for n in env.get("MAPSMITH_PLUGINS", "").split(",") if n.strip()}
            self._load_entry_points(allow or None)
        for name, plugin in extra_plugins:
            self._pm.register(plugin, name=name)
            self.distributions.setdefault(
                name, {"plugin": name, "distribution": "(registered in process)", "version": ""}
            )
            self._note_provenance(name, plugin, None, "")
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"a plugin implements a hook MapSmith does not define: {exc}",
                code="PLUGIN_UNKNOWN_HOOK",
                hint="hook names are listed in mapsmith/hookspecs.py; check the spelling",
            ) from exc

        self.stacks: dict[str, StackSpec] = {}
        self.toolboxes: dict[str, ToolboxState] = {}
        # Reentrant: a toolbox's load registers through the same catalogue it is loading into.
        self._toolbox_lock = threading.RLock()
        self.contracts: Catalogue[OperationContract] = Catalogue(load_builtin_contracts(), self._ensure_loaded)
        self.implementations: Catalogue[list[OperationImpl]] = Catalogue({}, self._ensure_loaded)
        self._pm.hook.mapsmith_register_stacks(register=self._register_stack)
        for name in self._hook_plugins("mapsmith_register_operations"):
            self._call_for("mapsmith_register_operations", name, register=self._registrar(name))
        for impls in self.implementations.loaded().values():
            impls.sort(key=_engine_order)
        for name in self._hook_plugins("mapsmith_register_toolboxes"):
            self._call_for(
                "mapsmith_register_toolboxes", name, register=lambda t, _n=name: self._register_toolbox(t, plugin=_n)
            )

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
            self._note_provenance(ep.name, plugin, dist.name if dist else "", dist.version if dist else "")

    def _note_provenance(self, name: str, plugin: object, distribution: str | None, version: str) -> None:
        """Record whose plugin ``name`` is; a third party's gets its identity and code digest."""
        if maturity.is_own_plugin(plugin, distribution or None):
            self._provenance[name] = Provenance(name, None)
            return
        origin = maturity.plugin_origin(plugin, name, distribution or "(registered in process)", version)
        self._provenance[name] = Provenance(name, origin)
        if origin.get("code_sha256"):
            self.distributions[name]["code_sha256"] = origin["code_sha256"]

    def _hook_plugins(self, hook_name: str) -> list[str]:
        """The plugins implementing a hook, in the order pluggy would call them (last registered first)."""
        caller = getattr(self._pm.hook, hook_name)
        return [impl.plugin_name for impl in reversed(caller.get_hookimpls())]

    def _call_for(self, hook_name: str, plugin_name: str, **kwargs: Any) -> None:
        """Call one plugin's implementation of a hook through pluggy (tracing and checks included)."""
        keep = self._pm.get_plugin(plugin_name)
        others = [p for _, p in self._pm.list_name_plugin() if p is not keep]
        self._pm.subset_hook_caller(hook_name, remove_plugins=others)(**kwargs)

    def _registrar(self, plugin_name: str) -> Callable[..., None]:
        """The ``register`` callback one plugin is handed: every registration carries that plugin's provenance."""
        provenance = self._provenance.get(plugin_name, Provenance(plugin_name, None))

        def register(implementation: Callable[..., None], **kwargs: Any) -> None:
            self._register_operation(implementation, provenance=provenance, **kwargs)

        return register

    def promotions(self) -> list[dict[str, Any]]:
        """The workspace's promotion records, read the first time a third party's operation needs them."""
        if self._promotions is None:
            self._promotions = maturity.load_promotions(self._workspace_root)
        return self._promotions

    def _register_stack(self, spec: StackSpec) -> None:
        if not isinstance(spec, StackSpec):
            raise PluginError(f"register_stacks was given {type(spec).__name__}, not a StackSpec")
        if spec.name in self.stacks:
            raise PluginError(f"stack {spec.name!r} is registered twice", code="PLUGIN_DUPLICATE")
        self.stacks[spec.name] = spec

    def _register_toolbox(self, toolbox: Toolbox, plugin: str = "") -> None:
        if not isinstance(toolbox, Toolbox):
            raise PluginError(f"register_toolboxes was given {type(toolbox).__name__}, not a Toolbox")
        if toolbox.stack not in self.stacks:
            raise PluginError(
                f"toolbox {toolbox.prefix!r} is registered for unknown stack {toolbox.stack!r}",
                code="PLUGIN_UNKNOWN_STACK",
                hint=f"known stacks: {sorted(self.stacks)}",
            )
        clash = next((p for p in self.toolboxes if p.startswith(toolbox.prefix) or toolbox.prefix.startswith(p)), None)
        if not toolbox.prefix or clash is not None:
            raise PluginError(
                f"toolbox prefix {toolbox.prefix!r} is empty or overlaps {clash!r}", code="PLUGIN_DUPLICATE"
            )
        self.toolboxes[toolbox.prefix] = ToolboxState(toolbox, plugin=plugin)

    def _ensure_loaded(self, key: str | None) -> None:
        """Load the toolbox ``key`` belongs to (every pending one for ``None``), once per process."""
        if not self.toolboxes:
            return
        wanted = [
            t
            for p, t in self.toolboxes.items()
            if t.state in ("pending", "loading") and (key is None or key.startswith(p))
        ]
        if not wanted:
            return
        # A "loading" toolbox is either this thread's own load registering into the catalogue
        # (the lock is reentrant: go on) or another thread's (wait for it to finish).
        with self._toolbox_lock:
            for state in wanted:
                if state.state == "pending":
                    self._load_toolbox(state)

    def _load_toolbox(self, state: ToolboxState) -> None:
        import time

        toolbox = state.toolbox
        state.state = "loading"
        start = time.perf_counter()
        provenance = self._provenance.get(state.plugin, Provenance(state.plugin, None))

        def register(implementation: Callable[..., None], *, operation: str, **kwargs: Any) -> None:
            if not operation.startswith(toolbox.prefix) or kwargs.get("stack") != toolbox.stack:
                raise PluginError(
                    f"toolbox {toolbox.prefix!r} of stack {toolbox.stack!r} registered {operation!r} "
                    f"for stack {kwargs.get('stack')!r}",
                    code="TOOLBOX_OUTSIDE_PREFIX",
                    evidence={"toolbox": toolbox.prefix, "operation": operation, "stack": kwargs.get("stack")},
                    hint=f"a toolbox registers only operations named {toolbox.prefix}… on its own stack",
                )
            self._register_operation(implementation, operation=operation, provenance=provenance, **kwargs)
            state.operations.append(operation)

        try:
            toolbox.load(register)
        except Exception as exc:  # one broken toolbox must not take the catalogue down: said once, left empty
            for name in state.operations:
                self.contracts.pop(name, None)
                self.implementations.pop(name, None)
            state.operations.clear()
            state.state = "failed"
            state.problem = f"{type(exc).__name__}: {exc}"
            log.warning("the %s toolbox (%s*) could not be loaded: %s", toolbox.stack, toolbox.prefix, state.problem)
            return
        loaded = self.implementations.loaded()
        for name in state.operations:
            loaded[name].sort(key=_engine_order)
        state.seconds = time.perf_counter() - start
        state.state = "loaded"
        log.info("loaded the %s toolbox: %d operations in %.2f s", toolbox.stack, len(state.operations), state.seconds)

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
        provenance: Provenance | None = None,
        writes_parts: bool = False,
    ) -> None:
        origin = provenance.origin if provenance is not None else None
        level, promotion = maturity.decide(operation, origin, self.promotions() if origin is not None else [])
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
            if known is None:  # a new operation takes the maturity of the plugin that brought it
                parsed = dataclasses.replace(parsed, maturity=level, origin=origin, promotion=promotion)
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
            OperationImpl(
                operation,
                stack,
                engine,
                implementation,
                preference,
                eligible,
                requirement,
                validate,
                maturity=level,
                origin=origin,
                promotion=promotion,
                writes_parts=writes_parts,
            )
        )

    # -- queries -------------------------------------------------------------------------------

    def plugin_names(self) -> list[str]:
        return sorted(n for n, _ in self._pm.list_name_plugin())

    def implementations_for(self, operation: str, stack: str) -> list[OperationImpl]:
        return [i for i in self.implementations.get(operation, []) if i.stack == stack]

    def toolbox_for(self, operation: str) -> ToolboxState | None:
        """The toolbox whose prefix ``operation`` has (loaded or not), else None."""
        return next((t for p, t in self.toolboxes.items() if operation.startswith(p)), None)

    # -- operations registered at run time ------------------------------------------------------

    def register_experimental(
        self,
        implementation: Callable[..., None],
        contract: Mapping[str, Any],
        origin: Mapping[str, Any],
        *,
        stack: str = "opensource",
        engine: str = "proposed",
    ) -> OperationContract:
        """Add an operation that is not an installed plugin's (an agent's proposal), as ``experimental``.

        ``contract`` is validated like any plugin contract; ``origin`` is ``{"name", "version",
        "code_sha256", "source"?}`` (``source`` relative to the workspace; recorded in every manifest as
        ``x-mapsmith:plugin``). A name any operation already has (built-in, plugin, toolbox, or an earlier
        proposal) or one inside a toolbox's prefix is refused: a proposal adds, it never replaces.
        Returns the registered contract. Only ``remove_experimental`` takes it out again.
        """
        identity = maturity.check_origin(origin)
        if not isinstance(contract, Mapping):
            raise ContractError(
                f"a proposed contract must be a mapping (parsed TOML), got {type(contract).__name__}",
                hint="parse the TOML with tomllib.loads and pass the mapping",
            )
        name = contract.get("name")
        parsed = parse_contract(contract, source=f"experimental contract for {name}")
        with self._toolbox_lock:  # the catalogue changes under one lock, as a toolbox load does
            prefix = next((p for p in self.toolboxes if parsed.name.startswith(p)), None)
            if prefix is not None:
                raise PluginError(
                    f"operation name {parsed.name!r} is inside the {prefix!r} toolbox's names",
                    code="PLUGIN_NAME_RESERVED",
                    evidence={"operation": parsed.name, "toolbox": prefix},
                    hint=f"choose a name that does not start with {prefix!r}",
                )
            if self.contracts.get(parsed.name) is not None:
                raise PluginError(
                    f"an operation named {parsed.name!r} already exists; a proposal cannot replace it",
                    code="PLUGIN_NAME_TAKEN",
                    evidence={"operation": parsed.name, "existing": self.contracts[parsed.name].maturity},
                    hint="choose another name (list_operations shows the names in use), or use the existing "
                    "operation if it does the job",
                )
            if stack not in self.stacks:
                raise PluginError(
                    f"operation {parsed.name!r} is registered for unknown stack {stack!r}",
                    code="PLUGIN_UNKNOWN_STACK",
                    hint=f"known stacks: {sorted(self.stacks)}",
                )
            if not callable(implementation):
                raise PluginError(f"implementation of {parsed.name!r} is not callable")
            level, promotion = maturity.decide(parsed.name, identity, self.promotions())
            registered = dataclasses.replace(parsed, maturity=level, origin=identity, promotion=promotion)
            self.contracts[parsed.name] = registered
            self.implementations[parsed.name] = [
                OperationImpl(
                    parsed.name, stack, engine, implementation, maturity=level, origin=identity, promotion=promotion
                )
            ]
            self.experimental_registrations.add(parsed.name)
        log.info("registered experimental operation %s (%s %s)", parsed.name, identity["plugin"], identity["version"])
        return registered

    def remove_experimental(self, name: str) -> None:
        """Take out an operation ``register_experimental`` added; any other operation is refused."""
        with self._toolbox_lock:
            if name not in self.experimental_registrations:
                raise PluginError(
                    f"{name!r} was not registered at run time; only such operations can be removed",
                    code="PLUGIN_NOT_REMOVABLE",
                    evidence={"operation": name},
                    hint="installed plugins are removed by uninstalling their distribution",
                )
            self.experimental_registrations.discard(name)
            self.contracts.pop(name, None)
            self.implementations.pop(name, None)

    def maturity_of(self, operation: str) -> str:
        """``stable`` or ``experimental``, as the catalogue shows it."""
        return self.contracts[operation].maturity


def _engine_order(impl: OperationImpl) -> tuple[bool, int]:
    """Stable engines before experimental ones, then by declared preference (highest first)."""
    return (impl.maturity != STABLE, -impl.preference)


__all__ = ["EXPERIMENTAL", "STABLE", "PluginHost", "Provenance", "ToolboxState"]
