"""``propose_operation``: check an agent's operation in the jail and, if it keeps its word, register it.

The order is cheapest-first, and each failure is one refusal with a stable code and the evidence:
the sandbox exists (PROPOSAL_SANDBOX_UNAVAILABLE) and there is a workspace to keep it in
(PROPOSAL_NO_WORKSPACE); the contract parses and validates (PROPOSAL_CONTRACT_INVALID), every numeric
parameter names its unit as ``plugin check`` requires (PROPOSAL_PARAMETER_UNIT) and its name is free
(PROPOSAL_NAME_TAKEN); the code parses (PROPOSAL_CODE_INVALID), defines the entry
(PROPOSAL_ENTRY_MISSING) and imports nothing refused (PROPOSAL_IMPORT_REFUSED: advisory, a quick answer
for honest mistakes; the jail is what enforces); the examples are well formed
(PROPOSAL_EXAMPLES_INVALID). Then every example runs twice through the real runner, each time in a fresh
jail: a refusal from the jail keeps its own code (network, files, processes, limits), a failed run is
PROPOSAL_EXAMPLE_FAILED, a value other than the one the agent worked out is PROPOSAL_EXAMPLE_WRONG, and
two runs that differ are PROPOSAL_NONDETERMINISTIC. Only then is the proposal written to the workspace's
store and registered as experimental.

Example outputs are written in a hidden folder of the workspace (never under ``.mapsmith``, where no
operation writes, and never at the paths the agent named) and removed afterwards. This module must never
run the agent's code outside the jail.
"""

from __future__ import annotations

import ast
import math
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from mapsmith.contracts import OUTPUT_ARGUMENT, parse_contract
from mapsmith.errors import ContractError, MapSmithError
from mapsmith.proposals import register
from mapsmith.proposals.store import (
    STORE_DIR,
    ProposalRecord,
    load_record,
    sha256_text,
    store_root,
    write_atomically,
)
from mapsmith.sandbox.jail import JailLimits
from mapsmith.sandbox.policy import bwrap_path
from mapsmith.sandbox.witness import REFUSED_MODULES

if TYPE_CHECKING:
    from mapsmith.app import MapSmith

MAX_SOURCE_CHARS = 100_000
MAX_EXAMPLES = 5
DEFAULT_TOLERANCE = 1e-6
# Calls that start a program, read statically as ``os.<name>(...)``; the jail's witness sees the rest.
REFUSED_OS_CALLS = frozenset({"system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "spawnl", "kill"})
EXPECTATION_KEYS = ("answer", "feature_count", "total_area_m2", "geometry_types")
RETRY = "fix it and call propose_operation again"


def _refuse_contract(message: str, evidence: dict[str, Any], hint: str) -> MapSmithError:
    return MapSmithError(message, code="PROPOSAL_CONTRACT_INVALID", evidence=evidence, hint=hint)


def parse_proposed_contract(app: MapSmith, contract_text: str) -> tuple[dict[str, Any], Any]:
    if not isinstance(contract_text, str) or not contract_text.strip():
        raise _refuse_contract(
            "contract must be TOML text", {}, "pass the contract as TOML text in the form of an operation contract"
        )
    try:
        raw = tomllib.loads(contract_text)
    except tomllib.TOMLDecodeError as exc:
        raise _refuse_contract(
            f"the contract is not valid TOML: {exc}",
            {"toml_error": str(exc)},
            f"write the contract as TOML (one table per operation, as contracts/operations/*.toml); {RETRY}",
        ) from exc
    try:
        contract = parse_contract(raw, source="proposed contract")
    except ContractError as exc:
        raise _refuse_contract(
            f"the contract does not validate: {exc.message}",
            {"contract_error": exc.to_dict()},
            f"{exc.hint or 'follow contracts/schemas/operation.schema.json'}; {RETRY}",
        ) from exc
    if ":" in contract.name or contract.status != "available":
        raise _refuse_contract(
            f"a proposed operation is named without a toolbox prefix and has status 'available' "
            f"(got {contract.name!r}, status {contract.status!r})",
            {"name": contract.name, "status": contract.status},
            f'name it in lower_snake_case and set status = "available"; {RETRY}',
        )
    if contract.output_kind not in ("dataset:vector", "answer"):
        raise _refuse_contract(
            f"a proposed operation writes a vector dataset or gives an answer, not {contract.output_kind}",
            {"output_kind": contract.output_kind},
            f'set [output] kind to "dataset:vector" or "answer"; {RETRY}',
        )
    return raw, contract


def check_code(name: str, source: str) -> None:
    """Static checks: it parses, defines ``name``, imports nothing refused. Advisory: the jail enforces."""
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_SOURCE_CHARS:
        raise MapSmithError(
            f"code must be Python source of 1 to {MAX_SOURCE_CHARS} characters",
            code="PROPOSAL_CODE_INVALID",
            evidence={"characters": len(source) if isinstance(source, str) else None},
            hint=f"pass the implementation's Python source as text; {RETRY}",
        )
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise MapSmithError(
            f"the code does not parse: {exc.msg} (line {exc.lineno})",
            code="PROPOSAL_CODE_INVALID",
            evidence={"line": exc.lineno, "offset": exc.offset, "error": exc.msg},
            hint=f"fix the syntax error; {RETRY}",
        ) from exc
    if not any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
        raise MapSmithError(
            f"the code defines no top-level function {name} (the entry MapSmith calls with the RunContext)",
            code="PROPOSAL_ENTRY_MISSING",
            evidence={"entry": name, "functions": [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]},
            hint=f"define `def {name}(ctx):` that reads ctx.paths and writes ctx.temp_output; {RETRY}",
        )
    for node in ast.walk(tree):
        found: list[str] = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found = [node.module]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in REFUSED_OS_CALLS
        ):
            found = [f"os.{node.attr}"]
        for module in found:
            kind = REFUSED_MODULES.get(module) or REFUSED_MODULES.get(module.split(".")[0])
            if module.startswith("os."):
                kind = "process"
            if kind:
                raise MapSmithError(
                    f"the code uses {module} ({kind}), which a proposed operation may not",
                    code="PROPOSAL_IMPORT_REFUSED",
                    evidence={"name": module, "kind": kind, "line": getattr(node, "lineno", None)},
                    hint="compute with the engines MapSmith ships (shapely, pyproj, numpy, geopandas, pyogrio); "
                    f"this check is advisory, the sandbox refuses the same at run time; {RETRY}",
                )


def check_examples(contract: Any, examples: Any) -> list[dict[str, Any]]:
    def bad(message: str, evidence: dict[str, Any]) -> MapSmithError:
        return MapSmithError(
            message,
            code="PROPOSAL_EXAMPLES_INVALID",
            evidence=evidence,
            hint='pass examples=[{"arguments": {...}, "expect": {"feature_count": N, "total_area_m2": A, '
            f'"answer": {{...}}}}, "tolerance": 1e-6}}] with values worked out by hand; {RETRY}',
        )

    if not isinstance(examples, list) or not 1 <= len(examples) <= MAX_EXAMPLES:
        raise bad(
            f"examples must be a list of 1 to {MAX_EXAMPLES} worked examples", {"examples": type(examples).__name__}
        )
    out = []
    for i, ex in enumerate(examples):
        if not isinstance(ex, Mapping) or not isinstance(ex.get("arguments"), Mapping):
            raise bad(f"example {i} has no 'arguments' object", {"example": i})
        expect = ex.get("expect")
        if not isinstance(expect, Mapping) or not expect or set(expect) - set(EXPECTATION_KEYS):
            raise bad(
                f"example {i} needs 'expect' with some of {list(EXPECTATION_KEYS)} and nothing else",
                {"example": i, "keys": sorted(expect) if isinstance(expect, Mapping) else None},
            )
        if not contract.writes_dataset and set(expect) - {"answer"}:
            raise bad(f"example {i}: an operation that answers is checked on 'answer' only", {"example": i})
        tolerance = ex.get("tolerance", DEFAULT_TOLERANCE)
        if not isinstance(tolerance, (int, float)) or not 0 <= tolerance <= 0.01:
            raise bad(f"example {i}: tolerance is a relative error between 0 and 0.01", {"example": i})
        if contract.writes_dataset and not isinstance(ex["arguments"].get(OUTPUT_ARGUMENT), str):
            raise bad(f"example {i} names no {OUTPUT_ARGUMENT}", {"example": i})
        out.append({"arguments": dict(ex["arguments"]), "expect": dict(expect), "tolerance": float(tolerance)})
    return out


def _close(got: Any, want: Any, tolerance: float) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(float(got), float(want), rel_tol=tolerance, abs_tol=1e-9)
    return bool(got == want)


def observe(app: MapSmith, contract: Any, result: dict[str, Any], expect: Mapping[str, Any]) -> dict[str, Any]:
    """The facts ``expect`` asks about, read from the run's answer and its output file."""
    seen: dict[str, Any] = {}
    if "answer" in expect:
        seen["answer"] = {k: result["answer"].get(k) for k in expect["answer"]}
    if not set(expect) & {"feature_count", "total_area_m2", "geometry_types"}:
        return seen
    import pyogrio
    import shapely
    from pyproj import CRS

    path = app.workspace.resolve(str(result["output_path"]), argument=OUTPUT_ARGUMENT)
    frame = pyogrio.read_dataframe(path)
    seen["feature_count"] = len(frame)
    seen["geometry_types"] = sorted({str(t) for t in frame.geometry.geom_type.dropna()})
    if "total_area_m2" in expect:
        crs = CRS.from_user_input(frame.crs) if frame.crs is not None else None
        if crs is None or not crs.is_projected or crs.axis_info[0].unit_name not in ("metre", "meter"):
            seen["total_area_m2"] = None
            seen["total_area_note"] = "total_area_m2 is checked on outputs in a projected CRS in metres"
        else:
            seen["total_area_m2"] = float(shapely.area(frame.geometry.values).sum())
    return {k: v for k, v in seen.items() if k in expect or k.endswith("_note")}


def compare(expect: Mapping[str, Any], seen: Mapping[str, Any], tolerance: float) -> list[dict[str, Any]]:
    wrong = []
    for key, want in expect.items():
        got = seen.get(key)
        if key == "answer":
            for k, v in want.items():
                if not _close(got.get(k) if isinstance(got, Mapping) else None, v, tolerance):
                    wrong.append({"fact": f"answer.{k}", "expected": v, "got": (got or {}).get(k)})
        elif key == "geometry_types":
            if sorted(want) != got:
                wrong.append({"fact": key, "expected": sorted(want), "got": got})
        elif not _close(got, want, tolerance):
            wrong.append({"fact": key, "expected": want, "got": got})
    return wrong


def require_units(raw: Mapping[str, Any]) -> None:
    """The rule ``plugin check`` applies (``unit_in_parameter_names``): a numeric parameter that measures
    something names its unit, so an agent reading the schema cannot pass feet where metres are meant."""
    from mapsmith.pluginkit.check import unit_problems

    problems, _ = unit_problems(list(raw.get("parameters") or []))
    if problems:
        raise MapSmithError(
            f"{len(problems)} numeric parameter(s) do not name their unit: {problems[0]}",
            code="PROPOSAL_PARAMETER_UNIT",
            evidence={"problems": problems},
            hint="end the parameter's name with its unit and declare it (for example cell_area_m2 with "
            f"unit = 'square_metre', distance_meters with unit = 'metre'); {RETRY}",
        )


def _run_example(app: MapSmith, contract: Any, example: dict[str, Any], folder: str, index: int) -> dict[str, Any]:
    arguments = dict(example["arguments"])
    if contract.writes_dataset:
        name = PurePosixPath(str(arguments[OUTPUT_ARGUMENT])).name
        arguments[OUTPUT_ARGUMENT] = f"{folder}/{name}"
        arguments.pop("overwrite", None)
    try:
        return app.run(contract.name, arguments).to_dict()
    except MapSmithError as exc:
        if exc.code.startswith("PROPOSAL_"):
            exc.evidence = {**exc.evidence, "example": index}
            raise
        raise MapSmithError(
            f"example {index} did not run: [{exc.code}] {exc.message}",
            code="PROPOSAL_EXAMPLE_FAILED",
            evidence={"example": index, "arguments": example["arguments"], "error": exc.to_dict()},
            hint=f"make the example's inputs exist in the workspace and the code accept them; {RETRY}",
        ) from exc


def _fingerprint(app: MapSmith, result: dict[str, Any]) -> dict[str, Any]:
    answer = {k: v for k, v in result["answer"].items() if k != "provenance"}
    digest = None
    if result.get("output_path"):
        digest = app.digest(Path(app.workspace.resolve(str(result["output_path"]), argument=OUTPUT_ARGUMENT)))
    return {"answer": answer, "output_sha256": digest}


def propose(app: MapSmith, contract_text: Any, code: Any, examples: Any) -> dict[str, Any]:
    """Check the proposal; register and store it when every example holds. Returns the check report."""
    if bwrap_path() is None:
        raise MapSmithError(
            "this server cannot sandbox code (bubblewrap is not installed), so it accepts no proposed operation",
            code="PROPOSAL_SANDBOX_UNAVAILABLE",
            evidence={"needed": "bwrap"},
            hint="server_info shows the sandbox state; the operator installs bubblewrap (apt-get install "
            "bubblewrap). Until then use the catalogue's operations (list_operations)",
        )
    root = app.workspace.root
    if root is None:
        raise MapSmithError(
            "a proposed operation is kept in the workspace, and this server has none",
            code="PROPOSAL_NO_WORKSPACE",
            hint="the operator starts the server with MAPSMITH_WORKSPACE set",
        )
    raw, contract = parse_proposed_contract(app, contract_text)
    require_units(raw)
    store = store_root(Path(root), app.environ)
    assert store is not None
    name = contract.name
    existing = store / name
    if existing.exists():
        record = load_record(existing)
        if record.source_sha256 == sha256_text(code if isinstance(code, str) else "") and (
            record.contract_sha256 == sha256_text(contract_text)
        ):
            register.ensure(app, record)
            return {**record.meta, "status": "already_registered"}
    if name in app.host.contracts or existing.exists():
        known = app.host.contracts.get(name)
        raise MapSmithError(
            f"an operation named {name} already exists in this workspace's catalogue",
            code="PROPOSAL_NAME_TAKEN",
            evidence={"name": name, "maturity": getattr(known, "maturity", None), "proposed": existing.exists()},
            hint=f"list_operations shows it: use it if it does the job, else propose under another name "
            f"(for example {name}_v2)",
        )
    check_code(name, code)
    worked = check_examples(contract, examples)
    # The record the examples run under: the source in a staging folder, registered for this check only.
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.check-", dir=_ensure(store)))
    (staging / "source.py").write_text(code, "utf-8")
    source_sha, contract_sha = sha256_text(code), sha256_text(contract_text)
    trial = ProposalRecord(name, staging, raw, contract_sha, source_sha, len(worked), {"name": name})
    register.add(app, trial)
    # The examples' outputs: a hidden folder of the workspace, never under .mapsmith (no operation writes there).
    outputs = Path(tempfile.mkdtemp(prefix=f".{name}.examples-", dir=str(root)))
    runs: list[dict[str, Any]] = []
    try:
        for i, example in enumerate(worked):
            first = _run_example(app, contract, example, _label(app, outputs, f"example{i}-run1"), i)
            second = _run_example(app, contract, example, _label(app, outputs, f"example{i}-run2"), i)
            seen = observe(app, contract, first, example["expect"])
            wrong = compare(example["expect"], seen, example["tolerance"])
            if wrong:
                raise MapSmithError(
                    f"example {i}: the operation's result is not the answer worked out "
                    f"({', '.join(w['fact'] for w in wrong)})",
                    code="PROPOSAL_EXAMPLE_WRONG",
                    evidence={"example": i, "differences": wrong, "tolerance": example["tolerance"], "seen": seen},
                    hint="recompute the expected value by hand or fix the code, then call propose_operation again",
                )
            a, b = _fingerprint(app, first), _fingerprint(app, second)
            if a != b:
                raise MapSmithError(
                    f"example {i} gave different results on two runs of the same inputs",
                    code="PROPOSAL_NONDETERMINISTIC",
                    evidence={"example": i, "first": a, "second": b},
                    hint=f"remove randomness, time and unordered iteration from the code (seed it, sort it); {RETRY}",
                )
            runs.append(
                {"example": i, "seen": seen, "expected": example["expect"], "output_sha256": a["output_sha256"]}
            )
    except BaseException:
        register.remove(app, name)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(outputs, ignore_errors=True)
    register.remove(app, name)
    report = {
        "name": name,
        "status": "registered",
        "maturity": "experimental",
        "source_sha256": source_sha,
        "contract_sha256": contract_sha,
        "example_count": len(worked),
        "examples": runs,
        "limits": JailLimits.from_env(app.environ).to_dict(),
        "sandbox": "bubblewrap: no network, no /proc, inputs read-only, scratch read-write, rlimits, wall clock",
        "store": f"{STORE_DIR.as_posix()}/{name}",
    }
    meta = {k: report[k] for k in ("name", "source_sha256", "contract_sha256", "example_count")}
    meta["examples"] = worked
    folder = write_atomically(store, name, contract_text, code, report, meta)
    register.ensure(app, load_record(folder))
    return report


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _label(app: MapSmith, folder: Path, leaf: str) -> str:
    """A workspace-relative folder for one example run's output, inside the check's outputs folder."""
    root = app.workspace.root
    assert root is not None
    (folder / leaf).mkdir()
    return (folder / leaf).relative_to(Path(root)).as_posix()
