"""Run one imported QGIS algorithm: ``qgis_process --json run <id> -- NAME=value ...`` in a subprocess.

The runner has already checked the arguments against the derived contract, resolved every path in
the workspace and read the inputs' headers; this writes the runner's temporary output path and
nothing else. QGIS's own messages come back whole in the error, never just an exit code.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, EngineError

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

RUN_TIMEOUT_S = 3600
# QGIS's words for failures it knows, to MapSmith codes; anything else is QGIS_ALGORITHM_FAILED.
FAILURE_CODES = {
    "failed": "QGIS_ALGORITHM_FAILED",
    "input": "QGIS_INPUT_UNREADABLE",
    "parameter": "QGIS_INVALID_PARAMETER",
    "algorithm": "QGIS_ALGORITHM_NOT_FOUND",
}
KNOWN_FAILURES = (
    ("Could not load source layer", "input", "check the input path and layer; QGIS could not open it"),
    ("Incorrect parameter value", "parameter", "fix the named parameter; QGIS's message says which"),
    ("Missing parameter value", "parameter", "add the named parameter"),
    ("not found!", "algorithm", "the algorithm is not in this QGIS; list_operations shows what is"),
)


def _value(mapping: dict[str, Any], value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if mapping.get("as") == "enum" and "static" in mapping:
        return [str(value)] if mapping["static"] else [str(mapping["options"].index(value))]
    if isinstance(value, float) and value.is_integer():
        return [repr(value)]
    return [str(value)]


def qgis_parameters(ctx: RunContext, mapping: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(QGIS name, value) pairs in argument order; a list of datasets repeats its name."""
    pairs: list[tuple[str, str]] = []
    for argument, value in ctx.arguments.items():
        target = mapping.get(argument)
        if target is None or value is None:
            continue
        if target["as"] == "dataset":
            slots = [s for s in ctx.paths if s == argument or s.startswith(f"{argument}[")]
            for slot in slots:
                path, layer = str(ctx.paths[slot]), ctx.layers.get(slot)
                pairs.append((target["qgis"], f"{path}|layername={layer}" if layer else path))
        elif target["as"] not in ("output", "destination"):
            pairs += [(target["qgis"], v) for v in _value(target, value)]
    if ctx.temp_output is not None and "output_path" in mapping:
        pairs.append((mapping["output_path"]["qgis"], str(ctx.temp_output)))
    return pairs


def _failure(algorithm: str, done: subprocess.CompletedProcess[bytes], argv: list[str]) -> EngineError:
    stderr = done.stderr.decode("utf-8", "replace")
    stdout = done.stdout.decode("utf-8", "replace")
    said = "\n".join(
        line for line in stderr.splitlines() if line.strip() and not line.startswith(("QStandardPaths:", "<string>:"))
    ).strip()
    kind, hint = "failed", "QGIS's message is above; fix the input or parameter it names"
    for needle, known_kind, known_hint in KNOWN_FAILURES:
        if needle in said or needle in stdout:
            kind, hint = known_kind, known_hint
            break
    return EngineError(
        f"QGIS {algorithm} failed (exit status {done.returncode}): {said or stdout.strip()[-2000:]}",
        code=FAILURE_CODES[kind],
        evidence={"algorithm": algorithm, "exit_status": done.returncode, "stderr": said[-4000:], "argv": argv[1:]},
        hint=hint,
    )


# Under a workspace, QGIS must not be handed anything that can name a file, a folder, a URL or a
# database outside it. Datasets go through the runner's workspace checks; CRS parameters through the
# CRS guard; these parameter types carry only values. Any other type (file, providerconnection,
# databasetable, layout, execute_sql ...) is refused when given, and so is a string that looks like
# a path or URL, and the free-text options gdal:* algorithms pass to GDAL's command-line tools.
CONTAINED_TYPES = frozenset(
    {"number", "boolean", "enum", "field", "distance", "band", "expression", "color", "scale", "duration"}
    | {"area", "volume", "datetime", "range", "matrix", "string", "crs", "extent", "point"}
)
PASSTHROUGH_OPTIONS = frozenset({"EXTRA", "OPTIONS", "CREATION_OPTIONS"})
_NUMERIC_SPATIAL = re.compile(r"^\s*-?[\d.eE+-]+(\s*,\s*-?[\d.eE+-]+){1,3}\s*(\[EPSG:\d+\])?\s*$")
_PATH_LIKE = re.compile(r"[\\/]|^[A-Za-z][A-Za-z0-9+.\-]*:|^~|\.\.")


def check_contained(ctx: RunContext, mapping: dict[str, dict[str, Any]], algorithm: str) -> None:
    """Refuse, before QGIS starts, a parameter value that could reach outside the workspace."""
    workspace = ctx.workspace
    if workspace is None or workspace.root is None:
        return
    from mapsmith import crsguard

    for argument, value in ctx.arguments.items():
        target = mapping.get(argument)
        if target is None or value is None or target["as"] in ("dataset", "output", "destination"):
            continue  # paths: checked by the runner (datasets, output_path) or by plan_destinations
        if isinstance(value, bool):
            continue
        kind, text = target["as"], str(value)
        why = None
        if kind not in CONTAINED_TYPES:
            why = f"its QGIS type {kind!r} can name files, folders, URLs or databases"
        elif kind == "crs":
            crsguard.check_crs_definition(text, argument=argument, workspace_root=workspace.root)
        elif kind in ("extent", "point") and not _NUMERIC_SPATIAL.match(text):
            why = "an extent or point must be numbers (xmin,xmax,ymin,ymax or x,y) with an optional [EPSG:n]"
        elif kind == "string" and target["qgis"] in PASSTHROUGH_OPTIONS and text.strip():
            why = "free-text options are passed to GDAL's command-line tools unchecked"
        elif kind == "string" and _PATH_LIKE.search(text):
            why = "a text value that looks like a path or URL could make QGIS read it"
        if why is not None:
            raise ArgumentError(
                f"{algorithm}: argument {argument!r} is refused under a workspace: {why}",
                code="QGIS_PARAMETER_NOT_CONTAINED",
                evidence={"argument": argument, "qgis_parameter": target["qgis"], "qgis_type": kind, "value": text},
                hint="leave the argument out (QGIS uses its default), give plain values, or run without a "
                "workspace if this algorithm really needs it",
            )


def run_algorithm(
    ctx: RunContext, executable: str, algorithm: str, imported: dict[str, Any], versions: dict[str, str]
) -> None:
    from mapsmith_qgis import subprocess_env
    from mapsmith_qgis.destinations import commit_destinations, describe_file_output, plan_destinations

    mapping = imported["mapping"]
    check_contained(ctx, mapping, algorithm)
    pairs = qgis_parameters(ctx, mapping)
    planned = plan_destinations(ctx, mapping)
    pairs += [(d.qgis, str(d.temp)) for d in planned]
    argv = [executable, "--json", "run", algorithm, "--", *(f"{k}={v}" for k, v in pairs)]
    ctx.set_engine(
        "qgis",
        versions.get("qgis", "unknown"),
        algorithm=algorithm,
        **{k: v for k, v in versions.items() if k != "qgis"},
    )
    given = {str(ctx.paths[s]): ctx.given_paths[s] for s in ctx.paths}
    given.update({str(d.temp): f"({d.argument})" for d in planned})
    if ctx.temp_output is not None and ctx.output_path is not None:
        given[str(ctx.temp_output)] = "(output_path)"
    ctx.parameters["x-mapsmith:qgis_algorithm"] = algorithm
    ctx.parameters["x-mapsmith:qgis_parameters"] = [
        [k, given.get(v.split("|", 1)[0], v) + (("|" + v.split("|", 1)[1]) if "|" in v else "")] for k, v in pairs
    ]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            env=subprocess_env(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _discard(planned)
        raise EngineError(
            f"qgis_process could not run {algorithm}: {exc}",
            code="QGIS_UNAVAILABLE",
            evidence={"algorithm": algorithm, "executable": executable},
            hint="check that qgis_process starts by hand (server_info lists the qgis stack's state)",
        ) from exc
    if done.returncode != 0:
        _discard(planned)
        raise _failure(algorithm, done, argv)
    try:
        result = json.loads(done.stdout.decode("utf-8", "replace"))
    except ValueError:
        result = {}
    results = result.get("results") or {}
    ctx.answer.update({"qgis_results": {k: (given.get(str(v), v)) for k, v in results.items()}})
    if result.get("log"):
        ctx.notes.append(f"QGIS log: {json.dumps(result['log'])[:2000]}")
    if ctx.temp_output is not None and not Path(ctx.temp_output).exists():
        raise EngineError(
            f"QGIS {algorithm} reported success but wrote no output at output_path",
            code="QGIS_NO_OUTPUT",
            evidence={"algorithm": algorithm, "results": results},
            hint="the algorithm may write nothing for these inputs (an empty selection?); check the parameters",
        )
    if mapping.get("output_path", {}).get("destination") == "fileDestination" and ctx.temp_output is not None:
        describe_file_output(ctx)
    commit_destinations(ctx, planned, algorithm)


def _discard(planned: list[Any]) -> None:
    from mapsmith_qgis.destinations import discard

    discard(planned)
