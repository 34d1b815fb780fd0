"""Where one profiled MapSmith run of ``bench_vector.py`` spent its time: the engine's phases, then each thing
MapSmith adds (checks, digests, manifest ...), read from cProfile's cumulative seconds by function name.

Split out of ``bench_vector.py``: the children (``vector_children.py``) profile a run, this module reads the profile.
Written by hand because pstats gives per-function figures only; which functions make up a MapSmith phase is
MapSmith's own knowledge. It must never time, spawn or write anything.
"""

from __future__ import annotations

import pstats
from pathlib import Path
from typing import Any

TOP_FUNCTIONS = 12


class Profile:
    """Cumulative seconds of named functions in one cProfile run, optionally along one call edge."""

    def __init__(self, stats: pstats.Stats) -> None:
        self.raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]

    def _keys(self, file: str, func: str) -> list[tuple[str, int, str]]:
        return [k for k in self.raw if k[2] == func and k[0].replace("\\", "/").endswith(file)]

    def cum(self, file: str, func: str, caller: str | None = None) -> float:
        total = 0.0
        for key in self._keys(file, func):
            if caller is None:
                total += self.raw[key][3]
            else:
                total += sum(v[3] for ck, v in self.raw[key][4].items() if ck[2] == caller)
        return total

    def own(self, file: str, func: str) -> float:
        return sum(self.raw[key][2] for key in self._keys(file, func))

    def top(self, count: int) -> list[dict[str, Any]]:
        rows = sorted(self.raw.items(), key=lambda kv: -kv[1][2])[:count]
        out = []
        for (file, line, func), value in rows:
            where = f"{Path(file).name}:{line}" if file != "~" else "(built-in)"
            out.append({"function": f"{where} {func}", "own_seconds": round(value[2], 3), "calls": value[1]})
        return out


def breakdown(stats: pstats.Stats, implementations: list[str]) -> dict[str, Any]:
    """Where one MapSmith run's time went, engine first, then each thing MapSmith adds, by the runner's own steps
    (``mapsmith.runner``: the inputs checked, the engine chosen, the implementation run, the output checked, the
    record written).

    ``implementations`` names the functions that may implement the operation; the one the router chose is the one
    the runner's ``_compute`` called. The inputs' digests are computed in a thread beside the engine
    (``run_records``), which cProfile does not see: only the wait for them, if any, is in the manifest's share.
    """
    p = Profile(stats)
    total = p.cum("mapsmith/runner.py", "run_operation")
    called = [name for name in implementations if p.cum(".py", name, caller="_compute") > 0]
    impl = p.cum("mapsmith/runner.py", "_compute")
    read_input = p.cum("mapsmith_opensource/common.py", "read_input")
    write_output = p.cum("mapsmith_opensource/common.py", "write_output")
    engine = {
        "read (the GeoPandas engine's read_input)": read_input,
        "compute (the implementation, less its read and write)": max(impl - read_input - write_output, 0.0),
        "write (the GeoPandas engine's write_output)": write_output,
    }
    output_digest = p.cum("mapsmith/provenance/digests.py", "dataset_digest", caller="output_record")
    record = p.cum("mapsmith/run_records.py", "output_record")
    overhead = {
        "input checks (header reads, facts, CRS)": p.cum("mapsmith/run_inputs.py", "check_inputs"),
        "engine choice": p.cum("mapsmith/router.py", "choose_engine"),
        "output checks (header read, facts)": p.cum("mapsmith/run_verify.py", "verify_and_repair"),
        "output digest (SHA-256)": output_digest,
        "manifest (build, validate, write; the wait for the inputs' digests)": max(record - output_digest, 0.0)
        + p.cum("mapsmith/provenance/validator.py", "validate_manifest")
        + p.cum("mapsmith/provenance/manifest.py", "write_manifest"),
    }
    engine_total = sum(engine.values())
    overhead["other (arguments, routing, paths, rename)"] = max(total - engine_total - sum(overhead.values()), 0.0)
    return {
        "method": "cProfile (perf_counter timer) around one extra MapSmith run: cumulative seconds of the "
        "runner's and the stack's functions (the main thread only); profiling inflates Python-heavy phases a little",
        "run_seconds": round(total, 3),
        "engine_seconds": {k: round(v, 3) for k, v in engine.items()},
        "overhead_seconds": {k: round(v, 3) for k, v in overhead.items()},
        "overhead_total_seconds": round(total - engine_total, 3),
        "implementation": called[0] if len(called) == 1 else called or None,
        "top_functions_by_own_time": p.top(TOP_FUNCTIONS),
    }
