"""Where a workspace keeps the operations agents proposed: ``<workspace>/.mapsmith/proposals/<name>/``.

Each accepted proposal is a folder holding ``contract.toml``, ``source.py``, ``check.json`` (the check
report that let it in) and ``proposal.json`` (name, the sha256 of source and contract, the examples, when).
A restarted server registers every folder again; a folder whose files no longer match their recorded
digests is skipped and said, never run. A name, once taken in a workspace, keeps its source for good: a
manifest names the source by sha256, and replay re-runs exactly that source. Folders are written whole
in a staging folder and renamed into place, so a crash never leaves half a proposal.

This module must never execute the code it stores.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapsmith.errors import MapSmithError

STORE_DIR = Path(".mapsmith") / "proposals"
# The replay of an output runs in a scratch workspace: it finds the sources through this variable, which the
# service sets to its own store (the scratch service inherits its environment).
STORE_ENV = "MAPSMITH_PROPOSAL_STORE"
SOURCE, CONTRACT, CHECK, META = "source.py", "contract.toml", "check.json", "proposal.json"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ProposalRecord:
    """One accepted proposal as stored: enough to register it and to re-run its exact source."""

    name: str
    folder: Path
    contract: dict[str, Any]
    contract_sha256: str
    source_sha256: str
    example_count: int
    meta: Mapping[str, Any]

    @property
    def source_label(self) -> str:
        return f"{STORE_DIR.as_posix()}/{self.name}/{SOURCE}"

    def verified_source(self) -> str:
        """The stored source, refused when its bytes are no longer the ones that passed the check."""
        text = (self.folder / SOURCE).read_text("utf-8")
        now = sha256_text(text)
        if now != self.source_sha256:
            raise MapSmithError(
                f"the stored source of the proposed operation {self.name} changed after it was checked",
                code="PROPOSAL_SOURCE_CHANGED",
                evidence={"operation": self.name, "recorded_sha256": self.source_sha256, "sha256_now": now},
                hint=f"propose it again under a new name (the name {self.name} keeps its checked source)",
            )
        return text


def store_root(workspace_root: Path | None, environ: Mapping[str, str]) -> Path | None:
    """The store this service reads: its workspace's, or the one named by MAPSMITH_PROPOSAL_STORE."""
    named = environ.get(STORE_ENV)
    if named:
        return Path(named)
    if workspace_root is None:
        return None
    return Path(workspace_root) / STORE_DIR


def load_record(folder: Path) -> ProposalRecord:
    meta = json.loads((folder / META).read_text("utf-8"))
    contract_text = (folder / CONTRACT).read_text("utf-8")
    if sha256_text(contract_text) != meta.get("contract_sha256"):
        raise MapSmithError(
            f"the stored contract of the proposed operation {folder.name} changed after it was checked",
            code="PROPOSAL_SOURCE_CHANGED",
            evidence={"operation": folder.name, "recorded_sha256": meta.get("contract_sha256")},
            hint=f"propose it again under a new name (the name {folder.name} keeps its checked contract)",
        )
    record = ProposalRecord(
        name=str(meta["name"]),
        folder=folder,
        contract=tomllib.loads(contract_text),
        contract_sha256=str(meta["contract_sha256"]),
        source_sha256=str(meta["source_sha256"]),
        example_count=int(meta.get("example_count", 0)),
        meta=meta,
    )
    record.verified_source()
    return record


def load_all(root: Path | None) -> tuple[list[ProposalRecord], list[dict[str, str]]]:
    """Every stored proposal that still matches its digests, and what was wrong with the others."""
    if root is None or not root.is_dir():
        return [], []
    records, problems = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            records.append(load_record(folder))
        except (MapSmithError, OSError, ValueError, KeyError) as exc:
            problems.append({"proposal": folder.name, "problem": str(exc)[:300]})
    return records, problems


def write_atomically(
    root: Path, name: str, contract_text: str, source: str, report: dict[str, Any], meta: dict[str, Any]
) -> Path:
    """Write the proposal's folder in a staging folder beside it, then rename it into place."""
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.staging-", dir=root))
    try:
        (staging / CONTRACT).write_text(contract_text, "utf-8")
        (staging / SOURCE).write_text(source, "utf-8")
        (staging / CHECK).write_text(json.dumps(report, indent=2, default=str), "utf-8")
        (staging / META).write_text(json.dumps(meta, indent=2, default=str), "utf-8")
        for f in staging.iterdir():
            os.chmod(f, 0o444)  # read-only: a changed file is refused at its next run anyway
        os.chmod(staging, 0o755)
        os.rename(staging, root / name)  # fails if the name was taken meanwhile: never replaces a proposal
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root / name
