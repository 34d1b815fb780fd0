"""The provenance card of one layer: what made it, and one of three honest states.

* ``verified``: the manifest beside the file describes these bytes and every critical check passed;
* ``verification_failed``: a critical check failed, or the bytes are no longer the ones recorded;
* ``not_verifiable``: no manifest, a manifest that does not conform, or no critical check ran.

This module reads records the same way ``get_provenance`` does (the manifest beside the file, the
validator, the content digest); it never writes or repairs one, and never calls a state better than
the record supports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mapsmith.provenance.digests import dataset_digest
from mapsmith.provenance.manifest import MANIFEST_SUFFIX, manifest_path
from mapsmith.provenance.reading import ManifestUnreadable, load_manifest
from mapsmith.provenance.validator import validate_manifest

VERIFIED = "verified"
FAILED = "verification_failed"
NOT_VERIFIABLE = "not_verifiable"
STATE_LABELS = {VERIFIED: "verified", FAILED: "verification failed", NOT_VERIFIABLE: "not verifiable"}


def _critical(record: dict[str, Any]) -> list[dict[str, Any]]:
    # The spec: an absent `critical` means the producer makes no claim, so it is not counted as critical.
    return [c for c in record.get("verification", []) if isinstance(c, dict) and c.get("critical") is True]


def _failed_record_for(path: Path, digest: str) -> tuple[Path, dict[str, Any]] | None:
    """A failure record whose output carries exactly these bytes (the rename happened, the record did not)."""
    for candidate in sorted(path.parent.glob(path.name + ".failed*" + MANIFEST_SUFFIX)):
        try:
            record = load_manifest(candidate)
        except ManifestUnreadable:
            continue
        if isinstance(record, dict) and record.get("output", {}).get("sha256") == digest:
            return candidate, record
    return None


def provenance_card(path: Path, label: Any) -> dict[str, Any]:
    """The card for the dataset at ``path``; ``label`` turns a host path into the workspace's label."""
    digest = dataset_digest(path)
    mpath = manifest_path(path)
    card: dict[str, Any] = {
        "state": NOT_VERIFIABLE,
        "state_label": "",
        "reason": "",
        "operation": None,
        "engine": None,
        "manifest_path": None,
        "critical_checks": 0,
        "critical_passed": 0,
        "failed_checks": [],
        "sha256": digest,
    }
    record: dict[str, Any] | None = None
    if mpath.exists():
        loaded: dict[str, Any] | None
        try:
            loaded = load_manifest(mpath)
        except ManifestUnreadable as exc:
            card["reason"] = f"the manifest beside the file cannot be read: {exc.message}"
            loaded = None
        if isinstance(loaded, dict):
            record = loaded
            card["manifest_path"] = label(mpath)
    else:
        failed = _failed_record_for(path, digest)
        if failed is not None:
            card["manifest_path"] = label(failed[0])
            record = failed[1]
    if record is not None:
        engine: dict[str, Any] = record["engine"] if isinstance(record.get("engine"), dict) else {}
        card["operation"] = record.get("operation")
        card["engine"] = {"name": engine.get("name"), "version": engine.get("version")}
        critical = _critical(record)
        card["critical_checks"] = len(critical)
        card["critical_passed"] = sum(1 for c in critical if c.get("passed") is True)
        card["failed_checks"] = [
            {"name": c.get("name"), "detail": c.get("detail")} for c in critical if c.get("passed") is not True
        ]
        problems = validate_manifest(record)
        recorded = record.get("output", {}).get("sha256") if isinstance(record.get("output"), dict) else None
        if card["failed_checks"]:
            names = ", ".join(str(c["name"]) for c in card["failed_checks"])
            card["state"], card["reason"] = FAILED, f"critical check(s) failed: {names}"
        elif recorded is not None and recorded != digest:
            card["state"] = FAILED
            card["reason"] = "the file's bytes are no longer the ones its manifest records (sha256 differs)"
        elif problems:
            card["reason"] = f"the manifest does not conform to the specification: {problems[0]}"
        elif recorded is None:
            card["reason"] = "the manifest records no output digest, so it cannot be tied to these bytes"
        elif not critical:
            card["reason"] = "no critical check ran for this output"
        else:
            card["state"] = VERIFIED
            card["reason"] = f"all {len(critical)} critical checks passed and the bytes match the manifest"
    elif not card["reason"]:
        card["reason"] = "no provenance manifest beside the file (MapSmith did not write it)"
    card["state_label"] = STATE_LABELS[card["state"]]
    return card
