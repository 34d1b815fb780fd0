"""Inside the isolation sandbox: load one plugin, run one example or refusal through the real runner, report.

``plugin check`` calls ``run_example`` through ``isolation.run_isolated`` (never in its own process): it builds
a ``MapSmith`` on the opensource stack with the plugin under test as its only other plugin, runs the operation
with the example's arguments in the current directory (the sandbox's scratch workspace), and returns the
``OperationResult``, or the refusal with the class the plugin raised. Digests and manifest validation are
done by the caller, outside, on the files left behind; this module only reports what the run said.

This module must never run outside the sandbox on code under check, and never catch a MapSmithError
without reporting where it came from (a plugin's own class, or the runner's translation of a bare one).
"""

from __future__ import annotations

import errno
import importlib
import os
import time
import tomllib
import traceback
from pathlib import Path
from typing import Any

from mapsmith.hookspecs import hookimpl

ALLOWED_STACK = "opensource"


def _register_functions(module: Any, contracts: list[str]) -> None:
    """A plain module without hooks gets one: its function named after each contract is registered for it.

    The hook is set on the module itself, so the plugin MapSmith sees is the submitted module: its code digest
    and maturity are the module's (a wrapper object would carry MapSmith's own identity). This lets an agent
    (propose_operation) or an author submit one function and its contract; the registration is the one the
    template writes by hand.
    """

    def mapsmith_register_operations(register: Any) -> None:
        from mapsmith.errors import PluginError

        for path in contracts:
            data = tomllib.loads(Path(path).read_text("utf-8"))
            function = getattr(module, str(data.get("name")), None)
            if not callable(function):
                raise PluginError(
                    f"the module has no function {data.get('name')!r} for the contract {Path(path).name}",
                    code="PLUGIN_FUNCTION_MISSING",
                    evidence={"contract": Path(path).name, "operation": data.get("name")},
                    hint="name the implementation after its operation, or register it in mapsmith_register_operations",
                )
            register(function, operation=data["name"], stack=ALLOWED_STACK, engine="plugin", contract=data)

    module.mapsmith_register_operations = hookimpl(mapsmith_register_operations)


def _plugin_object(payload: dict[str, Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    module = importlib.import_module(payload["module"])
    seconds = time.perf_counter() - started
    plugin = getattr(module, payload["attribute"]) if payload.get("attribute") else module
    if not hasattr(plugin, "mapsmith_register_operations"):
        _register_functions(module, list(payload.get("contracts") or []))
    return plugin, seconds


def _raised_in(cause: BaseException, folder: str | None) -> bool:
    if not folder:
        return False
    root = os.path.realpath(folder)
    frames = traceback.extract_tb(cause.__traceback__)
    return any(os.path.realpath(f.filename).startswith(root + os.sep) for f in frames)


def _fields(payload: dict[str, Any], result: dict[str, Any]) -> dict[str, list[Any]]:
    """The output's values of the fields the expected answer names, in feature order."""
    wanted = list(payload.get("fields") or [])
    if not wanted or not result.get("output_path"):
        return {}
    from mapsmith.api import read_layer

    gdf = read_layer(Path(result["output_path"]))
    out: dict[str, list[Any]] = {}
    for name in wanted:
        if name in gdf.columns:
            out[name] = [None if v != v else (v.item() if hasattr(v, "item") else v) for v in gdf[name].tolist()]
    return out


def run_example(payload: dict[str, Any]) -> dict[str, Any]:
    """Run ``payload["operation"]`` with ``payload["arguments"]``; return what happened as JSON-able data."""
    from mapsmith.app import MapSmith  # the core first, so the plugin's import time is its own
    from mapsmith.errors import MapSmithError

    plugin, import_s = _plugin_object(payload)
    environ = {
        "MAPSMITH_WORKSPACE": os.getcwd(),
        "MAPSMITH_STACK": ALLOWED_STACK,
        "MAPSMITH_QGIS_ALGORITHMS": "0",
    }
    entry_point = payload.get("entry_point")
    if entry_point:
        # An installed distribution is loaded the way the server loads it: through its entry point.
        app = MapSmith(environ={**environ, "MAPSMITH_PLUGINS": f"{ALLOWED_STACK},{entry_point}"})
    else:
        app = MapSmith(
            environ={**environ, "MAPSMITH_PLUGINS": ALLOWED_STACK},
            extra_plugins=[(payload.get("name") or payload["module"], plugin)],
        )
    try:
        result = app.run(payload["operation"], dict(payload.get("arguments") or {})).to_dict()
    except MapSmithError as exc:
        error: dict[str, Any] = {**exc.to_dict(), "class": f"{type(exc).__module__}.{type(exc).__qualname__}"}
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, MapSmithError):
            error["translated_from"] = f"{type(cause).__module__}.{type(cause).__qualname__}"
            error["raised_in_plugin"] = _raised_in(cause, payload.get("plugin_folder"))
        # The runner translated a limit the process ran into; the caller reports it as that limit.
        if isinstance(cause, MemoryError):
            error["limit"] = "memory"
        elif isinstance(cause, OSError) and cause.errno == errno.EFBIG:
            error["limit"] = "file_size"
        return {"outcome": "refused", "error": error, "plugin_import_s": import_s}
    return {"outcome": "ok", "result": result, "fields": _fields(payload, result), "plugin_import_s": import_s}
