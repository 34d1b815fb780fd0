"""Measure how fast MapSmith digests one big file and a folder of 64 parts: before and after streaming.

Not a test (pytest does not collect ``bench_*``): a script whose numbers go into a report. "Before" is
the digest module as committed at a git revision (loaded from ``git show``), "after" the working tree's.
The files are read once before timing so both variants hash from the page cache: what is measured is
MapSmith's hashing path, not the disk. Runs are interleaved and the best of ``--runs`` is kept, because
the machine is shared and the slowest run says more about the neighbours than about the code.
``mb_per_cpu_second`` is the cost per byte, which neighbours do not change; ``cpu_per_wall`` above 1
shows threads hashing at once.

    .venv/bin/python tests/parts/bench_digests.py --workdir /tmp/digestbench --megabytes 1024 --runs 3

This script must never write outside ``--workdir``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _old_module(revision: str, workdir: Path):  # type: ignore[no-untyped-def]
    source = subprocess.run(
        ["git", "show", f"{revision}:core/mapsmith/provenance/digests.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    path = workdir / "digests_before.py"
    path.write_text(source, "utf-8")
    spec = importlib.util.spec_from_file_location("digests_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _make(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    with open(path, "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(left, 16 * 1024 * 1024))
            handle.write(block)
            left -= len(block)


def _folder_digest_before(module, folder: Path) -> str:  # type: ignore[no-untyped-def]
    """What the committed code would do for the same folder: hash every part one after another."""
    import hashlib

    lines = sorted(
        (p.relative_to(folder).as_posix().encode(), module.sha256_file(p).encode()) for p in folder.rglob("*.parquet")
    )
    return hashlib.sha256(b"".join(n + b"\0" + h + b"\n" for n, h in lines)).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--megabytes", type=int, default=1024, help="size of the big file and of the folder")
    parser.add_argument("--parts", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", default="HEAD", help="git revision of the 'before' digest module")
    args = parser.parse_args()
    from mapsmith.provenance import digests

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    size = args.megabytes * 1024 * 1024
    big = work / "big.bin"
    _make(big, size)
    folder = work / "parts.parquet"
    folder.mkdir(exist_ok=True)
    for i in range(args.parts):
        _make(folder / f"part-{i:05d}.parquet", size // args.parts)
    old = _old_module(args.before, work)
    digests.sha256_file(big)  # into the page cache
    for p in folder.iterdir():
        digests.sha256_file(p)

    variants = {
        "big_file_before": lambda: old.sha256_file(big),
        "big_file_after": lambda: digests.dataset_digest(big),
        "folder_before": lambda: _folder_digest_before(old, folder),
        "folder_after": lambda: digests.dataset_digest(folder),
    }
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    answers: dict[str, str] = {}
    for _ in range(args.runs):
        for name, run in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            answers[name] = run()
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
            # CPU seconds of the whole process (every thread): the cost per byte, whatever the neighbours do.
            cpu[name] = min(cpu.get(name, float("inf")), time.process_time() - c0)
    assert answers["big_file_before"] == answers["big_file_after"], "the digest of one file changed"
    assert answers["folder_before"] == answers["folder_after"], "the listing digest changed"
    mb = size / 1e6
    report = {
        "bytes": size,
        "parts": args.parts,
        "workers": digests.digest_workers(),
        "chunk_bytes": digests.CHUNK_BYTES,
        "load_average": os.getloadavg(),
        "mb_per_s": {name: round(mb / seconds, 1) for name, seconds in best.items()},
        "seconds": {name: round(seconds, 3) for name, seconds in best.items()},
        "mb_per_cpu_second": {name: round(mb / seconds, 1) for name, seconds in cpu.items()},
        "cpu_per_wall": {name: round(cpu[name] / best[name], 2) for name in best},
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
