"""The MapSmith service: plugins, router and workspace, built once from the environment.

The MCP server and the CLI are thin shells around this object; tests use it directly. Building it
reads ``MAPSMITH_STACK``, ``MAPSMITH_FALLBACK_STACK``, ``MAPSMITH_WORKSPACE`` and
``MAPSMITH_ALLOW_REMOTE`` once. It must stay cheap to build: engines are imported only when an
operation runs (``server_info`` reads their versions from install metadata, ``mapsmith._compat``),
and a toolbox such as QGIS's ``qgis:`` algorithms loads only when one of its names is asked for.
Diagnostics go through the standard ``logging`` module, to stderr only: on stdio, stdout is the protocol.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mapsmith import __version__
from mapsmith.errors import ArgumentError, ConfigurationError, InputError
from mapsmith.plugins import PluginHost
from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.manifest import MANIFEST_SUFFIX, manifest_path
from mapsmith.registry import DatasetIO
from mapsmith.router import Router
from mapsmith.runner import OperationResult, run_operation
from mapsmith.workspace import Workspace

LICENCE = "MIT"
INPUT_KINDS = ("vector", "raster", "any", "none")
OUTPUT_KINDS = ("dataset:vector", "dataset:raster", "answer", "description")
# Configuration that changes how GDAL/PROJ read data; recorded in every manifest when set.
RECORDED_ENVIRONMENT_PREFIXES = ("GDAL_", "GTIFF_", "OGR_", "CPL_", "PROJ_")
log = logging.getLogger("mapsmith")
# How a stack's availability details say one of its engines cannot run (see startup_warnings).
ENGINE_NOT_USABLE = "not usable: "


def configure_logging(stream: Any = None) -> None:
    """Send the ``mapsmith`` loggers' warnings (``MAPSMITH_LOG_LEVEL`` to change) to stderr, once.

    For the ``mapsmith`` command only: a program embedding MapSmith configures logging itself.
    Never stdout: on stdio that is the MCP protocol stream.
    """
    if log.handlers:
        return
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter("mapsmith: %(levelname)s: %(message)s"))
    log.addHandler(handler)
    level = os.environ.get("MAPSMITH_LOG_LEVEL", "WARNING").strip().upper()
    log.setLevel(level if level in logging.getLevelNamesMapping() else logging.WARNING)
    log.propagate = False


def announce_startup(app: MapSmith) -> list[dict[str, str]]:
    """Say once, on stderr, what a user must fix about how the server was started; return the same notices.

    Called by the ``mapsmith`` command right after building the service (before serving); a second
    call says nothing again. Today:
    a selected or fallback stack that is unavailable here, with its fix. ``server_info`` reports the
    same notices under ``warnings`` every time it is asked.
    """
    configure_logging()
    notices = app.startup_warnings()
    if app.startup_announced:
        return notices
    app.startup_announced = True
    for notice in notices:
        log.warning("%s Fix: %s", notice["message"], notice["hint"])
    return notices


class MapSmith:
    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        extra_plugins: Iterable[tuple[str, object]] = (),
        load_entry_points: bool = True,
    ) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        # PROJ never fetches grids in this process: a CRS (an argument or one declared in a file)
        # naming a grid must not turn into a request, and answers must not depend on connectivity.
        from mapsmith.crsguard import disable_proj_network

        disable_proj_network()
        self.host = PluginHost(self.environ, extra_plugins, load_entry_points)
        self.router = Router.from_env(self.host, self.environ)
        self.workspace = Workspace.from_env(self.environ)
        self.startup_announced = False  # announce_startup says its warnings once per service
        self._proposals_seen: float | None = None  # the store folder's mtime when last read
        self.proposal_problems: list[dict[str, str]] = []
        if self.workspace.root is not None:
            from mapsmith.proposals import STORE_ENV
            from mapsmith.proposals.store import STORE_DIR

            # A replay's scratch service inherits this environment: it finds the sources through it.
            self.environ.setdefault(STORE_ENV, str(Path(self.workspace.root) / STORE_DIR))
        self.refresh_proposals()

    # -- services used by the runner -----------------------------------------------------------

    def dataset_io(self, stack: str) -> DatasetIO:
        """The stack's dataset reader, else the opensource one (every install has it)."""
        for name in (stack, "opensource"):
            spec = self.host.stacks.get(name)
            if spec is not None and spec.dataset_io is not None:
                return spec.dataset_io()
        raise ConfigurationError(
            "no stack provides a dataset reader", hint="install mapsmith with its opensource stack"
        )

    def digest(self, path: Path) -> str:
        return dataset_digest(path)

    def environment_record(self) -> dict[str, str]:
        env = {k: v for k, v in sorted(self.environ.items()) if k.startswith(RECORDED_ENVIRONMENT_PREFIXES)}
        env.setdefault("PROJ_NETWORK", "OFF")
        return env

    # -- what the tools call -------------------------------------------------------------------

    def run(
        self, operation: str, arguments: Mapping[str, Any], progress: Callable[[float, str], None] | None = None
    ) -> OperationResult:
        self.refresh_proposals()
        return run_operation(self, operation, arguments, progress)

    def warm(self) -> dict[str, str]:
        """Import the engines of the stacks a run may use (the chosen one, its fallback, and opensource, which reads
        every dataset) and open the connections they keep for the process, so that the first run pays neither: what a
        raw engine's caller does before its first query (``import duckdb``, connect, ``LOAD spatial``; with
        ``MAPSMITH_SPARK_WARM=1``, a Spark session). The server calls it on starting: each sandboxed engine worker, or,
        in-process, a thread of the server (``InProcessMapSmith.warm_in_background``). Per stack, ``ready`` or
        why it could not warm; never raises (an engine that cannot load is reported by the run that needs it)."""
        wanted = dict.fromkeys(s for s in (self.router.stack, self.router.fallback_stack, "opensource") if s)
        warmed: dict[str, str] = {}
        for name in wanted:
            spec = self.host.stacks.get(name)
            if spec is None or spec.warm is None or not self.router.availability(name).available:
                continue
            try:
                spec.warm(self.environ)
            except Exception as exc:  # noqa: BLE001 - reported, not raised: see the docstring
                warmed[name] = f"{type(exc).__name__}: {exc}"
            else:
                warmed[name] = "ready"
        return warmed

    # -- operations agents propose (mapsmith.proposals) ----------------------------------------

    def refresh_proposals(self) -> None:
        """Register the workspace's stored proposals the catalogue lacks; cheap when the store is unchanged.

        Another process (a second engine worker, an earlier server) may have accepted one: the store
        folder's mtime says whether to look again.
        """
        from mapsmith.proposals import refresh
        from mapsmith.proposals.store import store_root

        root = store_root(self.workspace.root, self.environ)
        try:
            seen = root.stat().st_mtime if root is not None else None
        except OSError:
            seen = None
        if seen is None or seen == self._proposals_seen:
            return
        self._proposals_seen = seen
        self.proposal_problems = refresh(self)

    def propose_operation(self, contract: Any, code: Any, examples: Any) -> dict[str, Any]:
        """Check an agent's operation in the sandbox; register it as experimental for this workspace if it
        keeps its worked examples (``mapsmith.proposals.check.propose``)."""
        from mapsmith.proposals.check import propose

        self.refresh_proposals()
        return propose(self, contract, code, examples)

    def startup_warnings(self) -> list[dict[str, str]]:
        """A selected (or fallback) stack that cannot run here, or one of its engines that cannot: reason and fix.

        An engine a stack reports in its availability details as ``"not usable: <why>; fix: <command>"``
        (the sedona stack's Spark engine without Java or jars) is a warning of its own: the stack runs,
        that engine's operations will be refused.
        """
        out = []
        roles = (("MAPSMITH_STACK", self.router.stack), ("MAPSMITH_FALLBACK_STACK", self.router.fallback_stack))
        for role, name in roles:
            if name is None:
                continue
            avail = self.router.availability(name)
            if not avail.available:
                out.append(
                    {
                        "code": "STACK_UNAVAILABLE",
                        "message": f"{role}={name} selects the {name} stack, which is not available here: "
                        f"{(avail.reason or 'no reason given').rstrip('.')}.",
                        "hint": avail.fix or f"install the {name} stack, or choose another with {role}",
                    }
                )
                continue
            for engine, detail in sorted(avail.details.items()):
                text = str(detail)
                if not text.startswith(ENGINE_NOT_USABLE):
                    continue
                why, _, fix = text[len(ENGINE_NOT_USABLE) :].partition("; fix: ")
                out.append(
                    {
                        "code": "STACK_ENGINE_UNAVAILABLE",
                        "message": f"{role}={name}: the stack's {engine} engine is not usable here: "
                        f"{why.rstrip('.')}; its operations will be refused.",
                        "hint": fix or avail.fix or f"see server_info's {name} stack details",
                    }
                )
        return out

    def server_info(self) -> dict[str, Any]:
        """Version, stacks, engine versions and extras, read without importing any engine.

        Versions come from install metadata (``mapsmith._compat``); a stack's availability is asked
        once per process (QGIS's from a probe cached on disk). ``operations`` counts the catalogue as
        loaded; a toolbox not yet loaded (``toolboxes``) is not counted and is not loaded by asking.
        """
        from mapsmith import _compat

        stacks = []
        engines: dict[str, dict[str, str]] = {}
        for name, spec in sorted(self.host.stacks.items()):
            avail = self.router.availability(name)
            stacks.append(
                {"name": name, "summary": spec.summary, "selected": name == self.router.stack, **avail.to_dict()}
            )
            if avail.available:
                try:
                    engines[name] = {k: str(v) for k, v in spec.engine_versions().items()}
                except Exception as exc:  # a version probe must not take server_info down
                    engines[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return {
            "name": "mapsmith",
            "version": __version__,
            "licence": LICENCE,
            "stack": self.router.stack,
            "fallback_stack": self.router.fallback_stack,
            "workspace": str(self.workspace.root) if self.workspace.root else None,
            "stacks": stacks,
            "engines": engines,
            "extras": _compat.extras(),
            "plugins": [self.host.distributions.get(n, {"plugin": n}) for n in self.host.plugin_names()],
            "operations": len(self.host.contracts.loaded()),
            "toolboxes": [t.to_dict() for _, t in sorted(self.host.toolboxes.items())],
            "warnings": self.startup_warnings(),
        }

    def list_operations(self, input_kind: str | None = None, output_kind: str | None = None) -> list[dict[str, Any]]:
        """The catalog, filtered by what the caller holds (input kind) and wants back (output kind).

        The shape existing callers rely on, computed by ``mapsmith.catalog.discover`` (every remaining
        entry, by name); ``discover`` below is the search an agent calls.
        """
        self.refresh_proposals()
        from mapsmith.catalog import discover

        for name, value, allowed in (
            ("input_kind", input_kind, INPUT_KINDS),
            ("output_kind", output_kind, OUTPUT_KINDS),
        ):
            if value is not None and value not in allowed:
                raise ArgumentError(
                    f"{name} {value!r} is not one of {list(allowed)}",
                    code="INVALID_FILTER",
                    evidence={"argument": name, "value": value},
                    hint=f"pass {name} as one of {', '.join(allowed)}, or leave it out",
                )
        # "any" used to mean "no filter" here (discover reads it as "any dataset")
        held = None if input_kind == "any" else input_kind
        answer = discover(self, input_kind=held, produces=output_kind, limit=None, relax=False)
        out = []
        for candidate in answer["candidates"]:
            name = candidate["operation"]
            summary = self.host.contracts[name].to_summary()
            summary["stacks"] = sorted({i.stack for i in self.host.implementations.get(name, [])})
            out.append(summary)
        return out

    def discover(self, query: str = "", **facets: Any) -> dict[str, Any]:
        """Search the catalog: declared facets narrow it, a ranker orders it (``mapsmith.catalog.discover``)."""
        self.refresh_proposals()
        from mapsmith.catalog import discover

        return discover(self, query, **facets)

    def get_provenance(self, path: str, layer: str | None = None) -> dict[str, Any]:
        """The manifest beside a dataset, whether it still matches the bytes, and its lineage.

        ``layer`` names a layer of a container: its manifest is ``<container>.<layer>.provenance.json``.
        A container with layer manifests and none of its own, asked without ``layer``, is refused with
        the layers that have one (LAYER_REQUIRED): which layer was meant is never guessed.
        """
        from mapsmith.provenance.lineage import lineage_to_dict, walk_lineage
        from mapsmith.provenance.validator import validate_manifest

        resolved = self.workspace.resolve(path, argument="path")
        if not isinstance(resolved, Path):
            raise InputError(
                "provenance is read for local datasets only",
                code="REMOTE_INPUT_UNSUPPORTED",
                evidence={"path": path},
                hint="pass a path inside the workspace",
            )
        if not resolved.exists():
            raise InputError(
                f"no dataset at {path}",
                code="INPUT_NOT_FOUND",
                evidence={"path": path},
                hint="pass the output_path a MapSmith operation wrote",
            )
        if resolved.is_dir() and not resolved.name.lower().endswith(".gdb"):
            # The manifest of a folder sits beside it: for the workspace root that is outside the workspace.
            raise InputError(
                f"{path} is a directory, not a dataset",
                code="INPUT_IS_DIRECTORY",
                evidence={"path": path},
                hint="pass the output_path a MapSmith operation wrote",
            )
        if layer is not None and (
            not isinstance(layer, str) or not layer or "/" in layer or "\\" in layer or "\0" in layer
        ):
            raise ArgumentError(
                f"layer {layer!r} is not a layer name",
                code="INVALID_ARGUMENT",
                evidence={"layer": layer},
                hint="pass a layer name as describe_dataset lists it",
            )
        mpath = manifest_path(resolved if layer is None else resolved.with_name(f"{resolved.name}.{layer}"))
        if not mpath.exists() and layer is None:
            self._refuse_unnamed_layer(path, resolved)
        if not mpath.exists():
            failed = sorted(resolved.parent.glob(resolved.name + ".failed*" + MANIFEST_SUFFIX))
            raise InputError(
                f"no provenance manifest beside {path}",
                code="NO_MANIFEST",
                evidence={"path": path, "failed_records": [self.workspace.relative_label(f) for f in failed]},
                hint="only datasets MapSmith wrote have manifests" + ("; failure records exist" if failed else ""),
            )
        record = json.loads(mpath.read_text("utf-8"))
        digest = dataset_digest(resolved)
        recorded = record.get("output", {}).get("sha256")
        search = [self.workspace.root] if self.workspace.root else [resolved.parent]
        return {
            "manifest_path": self.workspace.relative_label(mpath),
            "manifest": record,
            "conforms": not validate_manifest(record),
            "problems": validate_manifest(record),
            "output_matches": digest == recorded,
            "output_sha256_now": digest,
            "lineage": self._relative_records(lineage_to_dict(walk_lineage(resolved, search, layer=layer))),
        }

    def _refuse_unnamed_layer(self, path: str, resolved: Path) -> None:
        """LAYER_REQUIRED when a container has manifests for its layers but none for itself."""
        suffix = MANIFEST_SUFFIX
        prefix = resolved.name + "."
        layers = sorted(
            p.name[len(prefix) : -len(suffix)]
            for p in resolved.parent.glob(resolved.name + ".*" + suffix)
            if ".failed" not in p.name[len(prefix) :]
        )
        if layers:
            raise InputError(
                f"{path} is a container whose layers have their own manifests: name one with 'layer'",
                code="LAYER_REQUIRED",
                evidence={"path": path, "layers_with_manifests": layers},
                hint=f"pass layer, one of {layers}",
            )

    # -- the map panel (mapsmith.mapview) -------------------------------------------------------

    def preview_map(self, paths: Any, **options: Any) -> dict[str, Any]:
        """Datasets drawn for the map panel (``mapsmith.mapview.preview_map``)."""
        from mapsmith import mapview

        return mapview.preview_map(self, paths, **options)

    def export_map(self, paths: Any, output_path: Any, overwrite: bool = False, **options: Any) -> dict[str, Any]:
        """The map panel as one standalone HTML file with a manifest (``mapsmith.mapview.export_map``)."""
        from mapsmith import mapview

        return mapview.export_map(self, paths, output_path, overwrite, **options)

    # -- plans, lineage, replay (mapsmith.plans, mapsmith.provenance.replay) -------------------

    def validate_plan(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        """Every finding about a plan, without touching any input beyond its header."""
        self.refresh_proposals()
        from mapsmith.plans.validate import validate_plan

        return validate_plan(self, plan).to_dict()

    def explain_plan(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        self.refresh_proposals()
        from mapsmith.plans.explain import explain_plan

        return explain_plan(self, plan)

    def execute_plan(
        self, plan: Mapping[str, Any], progress: Callable[[float, str], None] | None = None
    ) -> dict[str, Any]:
        """Validate, then run every step through the same path as ``run``; the plan manifest is written
        beside the final output. A step that fails stops the plan: the reply says which."""
        self.refresh_proposals()
        from mapsmith.plans.execute import execute_plan

        return execute_plan(self, plan, progress).to_dict()

    def get_lineage(self, path: str, layer: str | None = None) -> dict[str, Any]:
        """``layer`` names the layer when ``path`` is a container of several."""
        from mapsmith.provenance.replay import get_lineage

        return get_lineage(self, path, layer=layer)

    def replay(self, path: str, layer: str | None = None) -> dict[str, Any]:
        from mapsmith.provenance.replay import replay

        return replay(self, path, layer=layer)

    def _relative_records(self, node: dict[str, Any]) -> dict[str, Any]:
        """Record paths as the workspace shows them, not as absolute host paths."""
        for hop in node.get("producers", []):
            hop["record"] = self.workspace.relative_label(Path(hop["record"]))
            for child in hop.get("inputs", []):
                self._relative_records(child)
        return node
