"""The one error hierarchy of MapSmith.

Every refusal an agent can receive is a ``MapSmithError``: a stable ``code`` to branch on, a
``message`` saying what is wrong, the ``evidence`` that shows it (which file, which layer, which CRS)
and a ``hint`` saying what to do instead. Engine exceptions are translated into these at the edge
(``raise ... from exc``) so the cause is kept. Never raise a bare builtin for a user-facing problem.
"""

from __future__ import annotations

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
