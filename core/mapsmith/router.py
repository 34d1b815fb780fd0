"""The router: which stack and engine run an operation, or a structured reason why none can.

``MAPSMITH_STACK`` (default ``opensource``) is read once, when the router is built. When the chosen
stack cannot run an operation the router says which of four things is true -- ``missing``,
``licence_tier``, ``online_only``, ``stack_unavailable`` -- because each leads to a different
decision. ``MAPSMITH_FALLBACK_STACK`` names a stack allowed to substitute; a substitution is always
returned to the caller so that it reaches the manifest and the tool result. Nothing is substituted
silently, and nothing here imports an engine.

Inside a stack the engine is the most preferred eligible registration (``choose_engine``). The size
thresholds and preferences that decide it are data of the engines, kept beside the code they measure
(mapsmith_opensource.sedonadb_ops.DIRECT_MIN_FEATURES, join_ops.spatial_join_duckdb.DUCKDB_MIN_ROWS,
join_ops.points_in_polygons_duckdb.DUCKDB_POINTS_MIN_ROWS), each with the measurement that set it. Re-measured
for issue 22 (benchmarks/bench_scale.py's data, 10,000 polygons, whole MapSmith runs in fresh processes,
CPU seconds of the whole process because the shared 2-core machine's load average was 7-58 and wall
times meant nothing; peak RSS): count_in_polygons at 300,000 points: SedonaDB 3.5 s / 585 MiB, GeoPandas
3.6 s / 437 MiB, DuckDB 4.4 s / 365 MiB; at 1,000,000: SedonaDB 6.1 s / 800 MiB (its pairs path before:
9.7 s / 660 MiB), GeoPandas 6.7 s / 763 MiB, DuckDB 11.4 s / 488 MiB, the raw SedonaDB COPY 2.1 s /
218 MiB; at 10,000,000: SedonaDB 58.0 s / 4.3 GiB (before: 57.8 s / 3.9 GiB), raw SedonaDB 18.1 s /
283 MiB. So SedonaDB stayed preferred from 1,000,000 points, GeoPandas below, and DuckDB was only forced.
Since they group the matched points in one query (SedonaDB below 2,000,000 points), SedonaDB is preferred
from 300,000 points (DIRECT_MIN_FEATURES) and, where it does not take the run, DuckDB from 1,000,000
(points_in_polygons_duckdb.DUCKDB_POINTS_MIN_ROWS).
spatial_join has a SedonaDB engine file to file (join_ops.spatial_join_sedonadb: SedonaDB reads both
GeoParquet files, counts their validity, joins, orders and writes; the GeoPandas engine's rows, checks and
record), measured the same way against the DuckDB engine (inner, CPU seconds / peak RSS, load average 9-19):
100,000 points 2.4 s / 412 MiB against 1.7 s / 220 MiB, 300,000 3.3 s / 456 MiB against 2.2 s / 267 MiB,
1,000,000 5.9 s / 560 MiB against 5.6 s / 398 MiB, 10,000,000 37.8 s / 1.7 GiB against 29.3 s / 2.1 GiB
(raw SedonaDB 18.9 s / 551 MiB, raw DuckDB 19.1 s / 943 MiB). It never measured fastest through MapSmith, so
it is off by default (FILE_MIN_FEATURES None, MAPSMITH_SEDONADB_MIN_FEATURES turns it on) and spatial_join
stays on DuckDB from DUCKDB_MIN_ROWS, GeoPandas below; its WKB path stays off too (sedonadb_ops.WKB_MIN_FEATURES).

``MAPSMITH_ENGINE`` is the operator's word over those measurements: a comma list of engine names
(``duckdb``, ``sedonadb`` …) tried first, in that order, by every operation of the chosen stack that has
them. It reorders, and a named engine's size threshold (the measured size from which it is preferred) no
longer applies (``named_by_operator``, which those thresholds ask); every other eligibility rule does, and
a named engine that cannot take the run is passed over with its reason, as any other. The record says
when the variable chose the engine. An unknown name stops the server at start with the engines it knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mapsmith.contracts import OperationContract, suggest
from mapsmith.errors import ConfigurationError, EngineError, OperationUnavailable, UnknownOperation
from mapsmith.plugins import PluginHost
from mapsmith.registry import Availability, OperationImpl, Unavailable

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

DEFAULT_STACK = "opensource"
ENGINE_ENV = "MAPSMITH_ENGINE"

UNAVAILABLE_CODES = {
    "missing": "OPERATION_MISSING",
    "licence_tier": "LICENCE_TIER",
    "online_only": "ONLINE_ONLY",
    "stack_unavailable": "STACK_UNAVAILABLE",
}


@dataclass(frozen=True)
class Candidates:
    """The engines that may run an operation, in preference order, and any substitution made."""

    operation: str
    stack: str
    impls: tuple[OperationImpl, ...]
    substitution: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EngineChoice:
    impl: OperationImpl
    passed_over: tuple[Mapping[str, str], ...] = ()
    substitution: Mapping[str, Any] | None = None
    preferred_by: str | None = None  # "MAPSMITH_ENGINE=…" when the chosen engine is one the variable names

    def record(self) -> dict[str, Any]:
        """The manifest's account of the choice (under ``x-mapsmith:engine_choice``)."""
        out: dict[str, Any] = {"stack": self.impl.stack, "engine": self.impl.engine}
        if self.preferred_by:
            out["preferred_by"] = self.preferred_by
        if self.passed_over:
            out["passed_over"] = [dict(p) for p in self.passed_over]
        if self.substitution:
            out["substitution"] = dict(self.substitution)
        return out


@dataclass
class Router:
    host: PluginHost
    stack: str
    fallback_stack: str | None = None
    preferred_engines: tuple[str, ...] = ()  # MAPSMITH_ENGINE, in its order
    _availability: dict[str, Availability] = field(default_factory=dict)

    @classmethod
    def from_env(cls, host: PluginHost, environ: Mapping[str, str]) -> Router:
        stack = environ.get("MAPSMITH_STACK", "").strip() or DEFAULT_STACK
        fallback = environ.get("MAPSMITH_FALLBACK_STACK", "").strip() or None
        for var, value in (("MAPSMITH_STACK", stack), ("MAPSMITH_FALLBACK_STACK", fallback)):
            if value is not None and value not in host.stacks:
                raise ConfigurationError(
                    f"{var}={value!r} names no known stack; known stacks: {', '.join(sorted(host.stacks))}",
                    code="UNKNOWN_STACK",
                    evidence={"variable": var, "value": value, "known": sorted(host.stacks)},
                    hint=f"set {var} to one of: {', '.join(sorted(host.stacks))}",
                )
        return cls(
            host=host,
            stack=stack,
            fallback_stack=fallback if fallback != stack else None,
            preferred_engines=_preferred_engines(host, environ),
        )

    def availability(self, stack: str) -> Availability:
        """A stack's availability, asked once per process (detection can spawn a subprocess)."""
        if stack not in self._availability:
            try:
                self._availability[stack] = self.host.stacks[stack].availability()
            except Exception as exc:  # a detector must not raise; if it does, say so rather than crash
                self._availability[stack] = Availability(
                    False, reason=f"availability check raised {type(exc).__name__}: {exc}", fix=None
                )
        return self._availability[stack]

    def contract(self, operation: str) -> OperationContract:
        try:
            return self.host.contracts[operation]
        except KeyError:
            self._refuse_toolbox_operation(operation)
            close = suggest(operation, self.host.contracts)
            raise UnknownOperation(
                f"no operation named {operation!r}" + (f"; did you mean {' or '.join(close)}?" if close else ""),
                evidence={"operation": operation, "suggestions": close},
                hint="list_operations shows the catalog" + (f"; closest: {', '.join(close)}" if close else ""),
            ) from None

    def _refuse_toolbox_operation(self, operation: str) -> None:
        """A toolbox name (``qgis:…``) that is not there because its stack or its load failed says so."""
        box = self.host.toolbox_for(operation)
        if box is None:
            return
        stack = box.toolbox.stack
        avail = self.availability(stack)
        if not avail.available:
            reason, fix = f"the {stack} stack is not available here: {avail.reason}", avail.fix
        elif box.state == "failed":
            reason = f"the {stack} toolbox ({box.toolbox.prefix}*) could not be loaded: {box.problem}"
            fix = "server_info shows the problem; fix it and restart MapSmith"
        else:
            return  # loaded and the name is simply not in it: an unknown operation, with suggestions
        raise OperationUnavailable(
            reason,
            code=UNAVAILABLE_CODES["stack_unavailable"],
            evidence={"operation": operation, "stack": stack, "outcome": "stack_unavailable"},
            hint=fix or f"install the {stack} stack",
        )

    def _unavailable_on(self, operation: str, stack: str) -> tuple[list[OperationImpl], Unavailable | None]:
        avail = self.availability(stack)
        if not avail.available:
            return [], Unavailable(
                "stack_unavailable",
                f"the {stack} stack is not available here: {avail.reason}",
                avail.fix or f"install the {stack} stack",
            )
        impls = self.host.implementations_for(operation, stack)
        if not impls:
            return [], Unavailable(
                "missing",
                f"the {stack} stack has no implementation of {operation}",
                f"run {operation} with MAPSMITH_STACK=opensource, or start the server with "
                "MAPSMITH_FALLBACK_STACK=opensource to allow a disclosed substitute",
            )
        usable: list[OperationImpl] = []
        refusals: list[Unavailable] = []
        for impl in impls:
            problem = impl.requirement() if impl.requirement else None
            if problem is None:
                usable.append(impl)
            else:
                refusals.append(problem)
        if usable:
            return usable, None
        return [], refusals[0]

    def candidates(self, operation: str) -> Candidates:
        """The engines allowed to run ``operation``, or ``OperationUnavailable`` with the reason."""
        contract = self.contract(operation)
        if contract.status != "available":
            raise OperationUnavailable(
                f"{operation} is planned, not yet available",
                code="OPERATION_PLANNED",
                evidence={"operation": operation, "status": contract.status},
                hint="answer 'not yet' or use another operation from list_operations",
            )
        owner = operation.split(":", 1)[0] if ":" in operation else None
        if owner is not None and owner in self.host.stacks and owner != self.stack:
            # A stack's own toolbox (qgis:native:buffer) exists on that stack only: it runs there
            # whatever MAPSMITH_STACK says, and the choice is recorded like a substitution would be.
            impls, why = self._unavailable_on(operation, owner)
            if why is None:
                return Candidates(operation, owner, tuple(impls))
            raise OperationUnavailable(
                why.reason,
                code=UNAVAILABLE_CODES[why.kind],
                evidence={"operation": operation, "stack": owner, "outcome": why.kind},
                hint=why.hint,
            )
        impls, why = self._unavailable_on(operation, self.stack)
        if why is None:
            return Candidates(operation, self.stack, tuple(impls))
        if self.fallback_stack:
            sub_impls, sub_why = self._unavailable_on(operation, self.fallback_stack)
            if sub_why is None:
                substitution = {
                    "preferred_stack": self.stack,
                    "outcome": why.kind,
                    "code": UNAVAILABLE_CODES[why.kind],
                    "reason": why.reason,
                    "substitute_stack": self.fallback_stack,
                }
                return Candidates(operation, self.fallback_stack, tuple(sub_impls), substitution)
        raise OperationUnavailable(
            why.reason,
            code=UNAVAILABLE_CODES[why.kind],
            evidence={"operation": operation, "stack": self.stack, "outcome": why.kind},
            hint=why.hint,
        )

    def choose_engine(self, candidates: Candidates, ctx: RunContext) -> EngineChoice:
        """The most preferred eligible engine for this run (MAPSMITH_ENGINE's engines first, in its order);
        every engine passed over is recorded."""
        order = list(candidates.impls)
        if self.preferred_engines:
            rank = {name: n for n, name in enumerate(self.preferred_engines)}
            # sorted() is stable: the engines the variable does not name keep their measured order
            order.sort(key=lambda impl: rank.get(impl.engine, len(rank)))
        passed_over: list[dict[str, str]] = []
        for impl in order:
            reason = impl.eligible(ctx) if impl.eligible else None
            if reason is None:
                by = (
                    f"{ENGINE_ENV}={','.join(self.preferred_engines)}"
                    if impl.engine in self.preferred_engines
                    else None
                )
                return EngineChoice(impl, tuple(passed_over), candidates.substitution, by)
            passed_over.append({"engine": impl.engine, "reason": reason})
        raise EngineError(
            f"no engine of the {candidates.stack} stack can take this input for {candidates.operation}",
            code="NO_ELIGIBLE_ENGINE",
            evidence={"passed_over": passed_over},
            hint="; ".join(p["reason"] for p in passed_over),
        )


def named_by_operator(ctx: RunContext, engine: str) -> bool:
    """Whether MAPSMITH_ENGINE names ``engine``: its size threshold, a preference measured on other runs,
    then gives way to the operator's word (its other eligibility rules do not)."""
    environ = getattr(ctx, "environ", None) or {}
    return engine in {n.strip() for n in environ.get(ENGINE_ENV, "").split(",")}


def _preferred_engines(host: PluginHost, environ: Mapping[str, str]) -> tuple[str, ...]:
    """MAPSMITH_ENGINE's names, each one an engine some operation registers; else a ConfigurationError."""
    names = tuple(n.strip() for n in environ.get(ENGINE_ENV, "").split(",") if n.strip())
    if not names:
        return ()  # nothing to check, and no toolbox loaded to list the engines (QGIS costs seconds)
    known = sorted({impl.engine for impls in host.implementations.values() for impl in impls})
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigurationError(
            f"{ENGINE_ENV} names {', '.join(map(repr, unknown))}, which no operation registers as an engine",
            code="UNKNOWN_ENGINE",
            evidence={"variable": ENGINE_ENV, "value": environ.get(ENGINE_ENV, ""), "unknown": unknown, "known": known},
            hint=f"set {ENGINE_ENV} to engine names from: {', '.join(known)} (comma separated), or unset it",
        )
    return names
