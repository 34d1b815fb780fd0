"""The one error hierarchy of MapSmith.

Every refusal an agent can receive is a ``MapSmithError``: a stable ``code`` to branch on, a
``message`` saying what is wrong, the ``evidence`` that shows it (which file, which layer, which CRS)
and a ``hint`` saying what to do instead. Engine exceptions are translated into these at the edge
(``raise ... from exc``) so the cause is kept, through one table (``ENGINE_ERROR_CODES``), with the
host's absolute paths taken out of the text (``redact_paths``). Never raise a bare builtin for a
user-facing problem, and never send a host path outside the workspace to a client.
"""

from __future__ import annotations

import os
import re
from typing import Any


class MapSmithError(Exception):
    """Root of every MapSmith error. Subclasses fix ``code``; instances may override it."""

    code: str = "MAPSMITH_ERROR"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        evidence: dict[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.evidence = dict(evidence or {})
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        """The structured form sent to MCP clients and written into failure manifests."""
        out: dict[str, Any] = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.evidence:
            out["evidence"] = self.evidence
        return out

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}" + (f" Hint: {self.hint}" if self.hint else "")


class ConfigurationError(MapSmithError, RuntimeError):
    """The server was started with settings it cannot work with (unknown stack, bad env var)."""

    code = "CONFIGURATION_ERROR"


class ContractError(MapSmithError, ValueError):
    """An operation contract (ours or a plugin's) does not satisfy the contract schema."""

    code = "CONTRACT_INVALID"


class PluginError(MapSmithError, RuntimeError):
    """A plugin misbehaved: misspelt hook, bad registration, duplicate name."""

    code = "PLUGIN_ERROR"


class UnknownOperation(MapSmithError, KeyError):
    """No operation of that name is in the catalog."""

    code = "UNKNOWN_OPERATION"

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return MapSmithError.__str__(self)


class ArgumentError(MapSmithError, ValueError):
    """An argument is unknown, missing, mistyped or out of range for the operation's contract."""

    code = "INVALID_ARGUMENT"


class PathError(MapSmithError, ValueError):
    """A path argument is refused by the workspace policy (escape, remote form, device name ...)."""

    code = "PATH_REFUSED"


class InputError(MapSmithError, ValueError):
    """An input dataset cannot be used as given (missing file, ambiguous layer, wrong kind ...)."""

    code = "INPUT_INVALID"


class CRSRequired(InputError):
    """An input has no coordinate reference system, so no distance or area in it means anything."""

    code = "CRS_REQUIRED"


class CRSError(MapSmithError, ValueError):
    """A CRS cannot be parsed, or is unsuitable for what the operation must compute."""

    code = "CRS_INVALID"


class GeometryTypeRefused(InputError):
    """The input holds geometry types the operation does not accept (area of lines ...)."""

    code = "GEOMETRY_TYPE_REFUSED"


class OutputError(MapSmithError, ValueError):
    """The requested output cannot be written as asked (format, overwrite, same as input ...)."""

    code = "OUTPUT_REFUSED"


class OperationUnavailable(MapSmithError, RuntimeError):
    """The chosen stack cannot run the operation; ``code`` says which of the reasons is true.

    ``OPERATION_MISSING`` (the stack has no such tool), ``LICENCE_TIER`` (it has it, the licence on
    this machine does not include it), ``ONLINE_ONLY`` (it needs an online service), or
    ``STACK_UNAVAILABLE`` (the stack itself is not installed here).
    """

    code = "OPERATION_MISSING"


class EngineError(MapSmithError, RuntimeError):
    """An engine failed while computing; the engine's own message is in ``evidence``."""

    code = "ENGINE_FAILED"


class VerificationFailed(MapSmithError, RuntimeError):
    """A critical output check failed and no disclosed repair could fix it."""

    code = "VERIFICATION_FAILED"


# -- engine exceptions translated at the runner's edge ---------------------------------------------
#
# Engines raise their own types (OSError subclasses, shapely's GEOSException, rasterio's RasterioIOError,
# pyogrio's DataSourceError, MemoryError ...) with messages that name absolute host paths. The table maps
# the exception's class name (matched along its MRO, so the core never imports an engine) to a stable
# code; ``translate_engine_error`` builds the MapSmithError and ``redact_paths`` takes the host out of the
# text. The first class name of the MRO found in the table wins; anything else is ENGINE_FAILED.
ENGINE_ERROR_CODES: dict[str, str] = {
    "MemoryError": "ENGINE_OUT_OF_MEMORY",
    "OutOfMemoryException": "ENGINE_OUT_OF_MEMORY",
    "FileNotFoundError": "ENGINE_FILE_MISSING",
    "IsADirectoryError": "ENGINE_PATH_IS_DIRECTORY",
    "NotADirectoryError": "ENGINE_FILE_MISSING",
    "PermissionError": "ENGINE_PERMISSION_DENIED",
    "GEOSException": "ENGINE_GEOMETRY_ERROR",
    "ShapelyError": "ENGINE_GEOMETRY_ERROR",
    "RasterioIOError": "ENGINE_READ_ERROR",
    "RasterioError": "ENGINE_READ_ERROR",
    "CPLE_BaseError": "ENGINE_READ_ERROR",
    "DataSourceError": "ENGINE_READ_ERROR",
    "DataLayerError": "ENGINE_READ_ERROR",
    "FieldError": "ENGINE_READ_ERROR",
    "GeometryError": "ENGINE_GEOMETRY_ERROR",
    "CRSError": "ENGINE_CRS_ERROR",
    "ProjError": "ENGINE_CRS_ERROR",
    "RecursionError": "ENGINE_RECURSION_LIMIT",
    "TimeoutError": "ENGINE_TIME_LIMIT",
    # Every exception's MRO ends here: whatever the table does not name is an engine failure.
    "Exception": "ENGINE_FAILED",
    "BaseException": "ENGINE_FAILED",
}
# Engines that raise one exception type for every failure: the start of its message tells the kind.
ENGINE_MESSAGE_CODES: dict[tuple[str, str], str] = {
    ("SedonaError", "Resources exhausted"): "ENGINE_OUT_OF_MEMORY",  # DataFusion's memory pool said no
}
ENGINE_ERROR_HINTS: dict[str, str] = {
    "ENGINE_OUT_OF_MEMORY": "the engine ran out of memory: work on a smaller extent (clip_layer, select_features) "
    "or fewer features, or raise the memory limit (SedonaDB's: MAPSMITH_SEDONADB_MEMORY; DuckDB's engines': "
    "MAPSMITH_DUCKDB_ENGINE_MEMORY)",
    "ENGINE_FILE_MISSING": "a file the engine needed was not there when it ran (moved or deleted meanwhile); "
    "check the paths (describe_dataset) and run again",
    "ENGINE_PATH_IS_DIRECTORY": "a path the engine wrote or read is a folder; write to a file path inside the "
    "workspace that no folder occupies",
    "ENGINE_PERMISSION_DENIED": "the server may not read or write a path the engine needed; check the file's "
    "permissions or write to another output_path",
    "ENGINE_GEOMETRY_ERROR": "the geometry engine refused a geometry; run repair_geometries on the input first",
    "ENGINE_READ_ERROR": "the engine could not read an input; check it with describe_dataset, or convert it "
    "with convert_format",
    "ENGINE_CRS_ERROR": "the engine could not use a CRS; check the inputs' CRS with describe_dataset",
    "ENGINE_RECURSION_LIMIT": "the input is nested too deeply for the engine; simplify it first",
    "ENGINE_TIME_LIMIT": "the engine took longer than allowed; work on a smaller extent or raise "
    "MAPSMITH_CALL_TIMEOUT_S",
    "ENGINE_FAILED": "the engine's message is above; check the inputs it names",
}
# An absolute POSIX path not preceded by a character that would make it part of a URL or a relative
# path (``http://host/x``, ``a/b``), and a Windows drive path. Both stop at whitespace and quotes.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/[^\s'\"<>|,;()\[\]{}]+|\b[A-Za-z]:\\[^\s'\"<>|,;()\[\]{}]+")
REDACTED = "<outside the workspace>"


def redact_paths(text: str, workspace_root: str | os.PathLike[str] | None) -> str:
    """``text`` with the workspace's absolute paths made relative and every other absolute path replaced.

    Without a workspace the text is returned as it is: the caller is then the machine's own user and
    sees its paths anyway. The workspace is matched both as given and resolved (a symlinked /tmp).
    """
    if workspace_root is None:
        return text
    roots = {os.fspath(workspace_root).rstrip("/"), os.path.realpath(workspace_root).rstrip("/")}
    for root in sorted(roots, key=len, reverse=True):
        if root:
            text = re.sub(re.escape(root) + r"(/|(?![^\s'\"<>|,;()\[\]{}]))", lambda m: "" if m.group(1) else ".", text)
    return _ABSOLUTE_PATH.sub(REDACTED, text)


def _redact_value(value: Any, root: str | os.PathLike[str] | None) -> Any:
    if isinstance(value, str):
        return redact_paths(value, root)
    if isinstance(value, dict):
        return {k: _redact_value(v, root) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v, root) for v in value]
    return value


def redact_error(error: MapSmithError, workspace_root: str | os.PathLike[str] | None) -> MapSmithError:
    """The same error, its message, hint and evidence with host paths redacted (``redact_paths``).

    Adapters word their own messages with the paths the caller gave, but some quote an engine's text,
    which names the host's paths; this is applied to every error leaving the runner.
    """
    if workspace_root is None:
        return error
    error.message = redact_paths(error.message, workspace_root)
    error.args = (error.message, *error.args[1:])
    if error.hint is not None:
        error.hint = redact_paths(error.hint, workspace_root)
    error.evidence = _redact_value(error.evidence, workspace_root)
    return error


def _table_key(exc: BaseException) -> str:
    """The first class of ``exc``'s MRO the table names (``BaseException`` at the latest)."""
    return next(cls.__name__ for cls in type(exc).__mro__ if cls.__name__ in ENGINE_ERROR_CODES)


def engine_error_code(exc: BaseException) -> str:
    """The table's code for ``exc``: by its type and message (ENGINE_MESSAGE_CODES), else the first class of its
    MRO the table names, else ENGINE_FAILED."""
    text = str(exc)
    for (kind, start), code in ENGINE_MESSAGE_CODES.items():
        if type(exc).__name__ == kind and text.startswith(start):
            return code
    return ENGINE_ERROR_CODES[_table_key(exc)]


def translate_engine_error(
    exc: BaseException, *, engine: str, operation: str, workspace_root: str | os.PathLike[str] | None
) -> EngineError:
    """An engine's exception as an ``EngineError`` with a code from the table; raise it ``from exc``.

    The message and evidence carry the exception's type and its text, host paths redacted; the
    original stays reachable as ``__cause__`` for logs on the server's side.
    """
    code = engine_error_code(exc)
    text = redact_paths(str(exc), workspace_root)
    kind = type(exc).__name__
    return EngineError(
        f"{engine} failed in {operation}: {kind}: {text}" if text else f"{engine} failed in {operation}: {kind}",
        code=code,
        evidence={"engine": engine, "operation": operation, "exception": kind, "error": text[:500]},
        hint=ENGINE_ERROR_HINTS[code],
    )
