"""Run untrusted plugin code (a Python entry and its JSON arguments) once, in MapSmith's one jail.

``run_isolated`` runs ``"pkg.mod[:function]"`` through ``mapsmith.sandbox.jail.run_child`` (the same
bubblewrap profile, child process and audit witness ``propose_operation`` uses) with the witness in
``observe`` mode, and returns an ``IsolatedResult``: exit status, which limit was hit (if any), the redacted
tails of stdout and stderr, the JSON result or the structured error the entry raised, and every network,
write and process attempt the witness saw. ``plugin check`` runs every example through it. What this
module adds to the jail is the plugin kit's vocabulary: ``Limits`` (validated), the writable workspace at
its own absolute path (manifests name the same paths inside and out), read-only inputs at their own paths,
and the reading of a run into one ``limit_hit``.

What the jail protects against and what not is said once, in ``mapsmith.sandbox.jail`` and SECURITY.md.
This module must never run the code without bubblewrap (it refuses with ISOLATION_UNAVAILABLE instead)
and never return an unredacted host path in a tail.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapsmith.errors import MapSmithError, redact_paths
from mapsmith.sandbox.jail import JailLimits, JailRun, run_child
from mapsmith.sandbox.policy import bwrap_path

__all__ = ["IsolatedResult", "Limits", "run_isolated"]

TAIL_CHARS = 4000


@dataclass(frozen=True)
class Limits:
    """What one isolated run may use. Defaults fit one example of a small plugin on a laptop."""

    cpu_seconds: int = 60
    # Address space, not resident memory. Measured: the template's example runs at 384 MB and fails at 256 MB
    # (Python + GeoPandas + GDAL + PROJ mapped); 2048 leaves room for a real plugin's data.
    memory_mb: int = 2048
    file_size_mb: int = 256
    processes: int = 64  # threads count too (GDAL and numpy start some)
    wall_seconds: float = 120.0
    tmp_mb: int = 256

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "memory_mb", "file_size_mb", "processes", "wall_seconds", "tmp_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise MapSmithError(
                    f"isolation limit {name}={value!r} is not a positive number",
                    code="ISOLATION_LIMIT_INVALID",
                    evidence={"limit": name, "value": repr(value)},
                    hint="give every limit a positive number, or leave it at its default",
                )

    def to_jail(self) -> JailLimits:
        """The same allowance in the jail's terms."""
        return JailLimits(
            timeout_s=float(self.wall_seconds),
            cpu_limit_s=float(self.cpu_seconds),
            memory_mb=int(self.memory_mb),
            output_mb=int(self.file_size_mb),
            processes=int(self.processes),
            tmp_mb=int(self.tmp_mb),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_mb": self.memory_mb,
            "file_size_mb": self.file_size_mb,
            "processes": self.processes,
            "wall_seconds": self.wall_seconds,
            "tmp_mb": self.tmp_mb,
        }


@dataclass
class IsolatedResult:
    """What happened in one isolated run. ``ok`` means: exited 0, no limit hit, and a result came back."""

    exit_status: int | None
    signal: str | None
    limit_hit: str | None
    result: Any
    error: dict[str, Any] | None
    attempts: list[dict[str, Any]]
    stdout_tail: str
    stderr_tail: str
    duration_s: float
    import_s: float | None
    enforcement: dict[str, str] = field(default_factory=dict)
    view: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and self.limit_hit is None and self.error is None

    def attempts_of(self, kind: str) -> list[dict[str, Any]]:
        return [a for a in self.attempts if a.get("kind") == kind]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_status": self.exit_status,
            "signal": self.signal,
            "limit_hit": self.limit_hit,
            "result": self.result,
            "error": self.error,
            "attempts": self.attempts,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "duration_s": round(self.duration_s, 3),
            "import_s": None if self.import_s is None else round(self.import_s, 3),
            "enforcement": self.enforcement,
            "view": self.view,
        }


def _unavailable(reason: str, evidence: dict[str, Any] | None = None) -> MapSmithError:
    return MapSmithError(
        f"plugin code cannot be isolated here: {reason}; it was not run",
        code="ISOLATION_UNAVAILABLE",
        evidence=evidence or {},
        hint="install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces; "
        "`mapsmith info` shows whether the engine sandbox works on this machine",
    )


def run_isolated(
    module: str,
    payload: dict[str, Any],
    *,
    workspace: Path,
    read_only: list[Path] | None = None,
    limits: Limits | None = None,
    python_path: list[Path] | None = None,
    env: Mapping[str, str] | None = None,
) -> IsolatedResult:
    """Run ``module``'s ``main(payload)`` (or ``"module:function"``) once in the jail and say what happened.

    :param module: importable name of the entry inside the sandbox, optionally ``"pkg.mod:function"``;
        the function takes the payload dict and returns something JSON can encode.
    :param payload: JSON-encodable arguments, handed over on stdin.
    :param workspace: the one folder the code may write (bound read-write at the same absolute path; the
        working directory). Created if missing.
    :param read_only: files or folders the code may read (inputs, the plugin's own folder), bound read-only
        at their own paths.
    :param python_path: folders prepended to the sandbox's ``PYTHONPATH`` (bound read-only).
    :param env: extra environment variables for the code (``MAPSMITH_STACK`` …); nothing else is inherited.
    :raises MapSmithError: ``ISOLATION_UNAVAILABLE`` when bubblewrap is missing or cannot start here,
        ``ISOLATION_INPUT_MISSING`` for a read-only path that does not exist.
    """
    limits = limits or Limits()
    if bwrap_path() is None or not sys.platform.startswith("linux"):
        raise _unavailable("bubblewrap (bwrap) is not installed", {"platform": sys.platform})
    workspace = Path(workspace).resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    binds = [Path(p).resolve() for p in (read_only or [])] + [Path(p).resolve() for p in (python_path or [])]
    for p in binds:
        if not p.exists():
            raise MapSmithError(
                f"the read-only input {redact_paths(str(p), workspace)} does not exist",
                code="ISOLATION_INPUT_MISSING",
                evidence={"path": redact_paths(str(p), workspace)},
                hint="pass only existing files or folders as read-only inputs",
            )
    host_pythonpath = os.environ.get("PYTHONPATH")
    pythonpath = [str(Path(p).resolve()) for p in (python_path or [])] + ([host_pythonpath] if host_pythonpath else [])
    request = {
        "target": module,
        "payload": payload,
        # Observe, do not stop: an installed plugin runs as it would in the server; the kernel blocks and the
        # check fails the rule named for what the witness saw.
        "witness": {
            "mode": "observe",
            "writable": [str(workspace), "/tmp", "/dev"],
            "forbidden": [str(p) for p in binds],
        },
        "arm": "now",
    }
    run = run_child(
        request,
        scratch=workspace,
        inputs={str(p): p for p in binds},
        limits=limits.to_jail(),
        environ={"PYTHONPATH": host_pythonpath} if host_pythonpath else {},
        scratch_at=str(workspace),
        env={
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "MAPSMITH_WORKSPACE": str(workspace),
            "MAPSMITH_IN_SANDBOX": "1",
            "PYTHONPATH": ":".join(pythonpath),
            **dict(env or {}),
        },
    )
    if run.returncode == 1 and not run.messages and run.stderr_tail.lstrip().startswith("bwrap:"):
        raise _unavailable("bubblewrap could not build the sandbox", {"bwrap_said": run.stderr_tail.strip()[-400:]})
    stdout = run.stdout.decode("utf-8", "replace")[-TAIL_CHARS:]
    return _interpret(
        run,
        stdout=redact_paths(stdout, workspace),
        stderr=redact_paths(run.stderr_tail[-TAIL_CHARS:], workspace),
        view={"read_only": _read_only_view(run.argv), "read_write": [str(workspace), "/tmp"]},
    )


def _read_only_view(argv: list[str]) -> list[str]:
    cut = argv.index("--")
    return [argv[i + 2] for i in range(cut) if argv[i] == "--ro-bind"]


def _interpret(run: JailRun, *, stdout: str, stderr: str, view: dict[str, list[str]]) -> IsolatedResult:
    messages = run.messages
    final = run.outcome
    result = final.get("result") if final and final.get("outcome") == "result" else None
    error = final.get("error") if final and final.get("outcome") == "error" else None
    imported = next((m for m in messages if m.get("imported")), None)
    import_s = (final or {}).get("import_s", imported.get("import_s") if imported else None)
    status = run.returncode
    signal_name = run.signal  # bwrap's 128+N, or -N when we killed bwrap itself: decoded once, by the jail
    # Which limit ended it is the jail's judgement, the one propose_operation's refusals read too; a limit the
    # runner translated into a refusal (ENGINE_OUT_OF_MEMORY) is read by judge.Run.limit_hit.
    limit = run.limit_hit
    if run.result_overflow and error is None:
        error = {"code": "ISOLATION_RESULT_TOO_LARGE", "message": "the result exceeded the result channel's cap"}
    if final is None and error is None and status == 0:
        error = {"code": "ISOLATION_NO_RESULT", "message": "the entry exited 0 without sending a result"}
    return IsolatedResult(
        exit_status=status,
        signal=signal_name,
        limit_hit=limit,
        result=result,
        error=error,
        attempts=run.attempts,
        stdout_tail=stdout,
        stderr_tail=stderr,
        duration_s=run.seconds,
        import_s=import_s,
        enforcement=run.enforcement,
        view=view,
    )
