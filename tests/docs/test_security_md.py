"""SECURITY.md says what the tests check: its counts are the corpora's sizes, and every test file,
error code and environment variable it names exists.

A count on the page is written as "**N <what>**"; each is recomputed here from the corpus the test
runs, so a corpus that grows or shrinks without the page fails this test.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "SECURITY.md").read_text(encoding="utf-8")
TESTS = REPO / "tests"


def _module(relative: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_security_md_{Path(relative).stem}", TESTS / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _counts() -> dict[str, int]:
    crs = _module("security/test_hostile_crs.py")
    sql = _module("security/test_sql_corpus.py")
    declared = _module("security/test_declared_crs.py")
    paths = json.loads((TESTS / "data" / "hostile_paths.json").read_text("utf-8"))["entries"]
    return {
        "hostile paths": len(paths),
        "hostile statements": len(sql.CORPUS),
        "attempts fed to the sandboxed connection directly": len(sql.SANDBOX_ATTEMPTS),
        "hostile CRS definitions": len(crs.HOSTILE),
        "benign ones": len(crs.BENIGN),
        "unchecked formats": len(declared.UNCHECKED),
        "files whose bytes are not what their names say": len(declared.MISNAMED),
    }


def test_every_count_on_the_page_is_the_corpus_size() -> None:
    stated = {m.group(2): int(m.group(1)) for m in re.finditer(r"\*\*(\d+) ([^*]+?)\*\*", PAGE.replace("\n", " "))}
    assert stated == _counts()


def test_the_corpora_are_as_large_as_the_issue_asks() -> None:
    counts = _counts()
    assert counts["hostile paths"] >= 300 and counts["hostile statements"] >= 100


def test_every_test_file_named_exists() -> None:
    named = set(re.findall(r"`(tests/[\w/.]+\.(?:py|json))`", PAGE))
    assert len(named) >= 8
    assert [n for n in sorted(named) if not (REPO / n).is_file()] == []


def test_every_error_code_named_is_documented() -> None:
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", (REPO / "docs" / "errors.md").read_text("utf-8"), re.M))
    named = {
        c for c in re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", PAGE) if not c.startswith(("MAPSMITH_", "PROJ_"))
    }
    assert named and sorted(named - documented) == []


def test_every_environment_variable_named_is_read_by_the_code() -> None:
    source = "".join(p.read_text("utf-8") for p in (REPO / "core").rglob("*.py")) + "".join(
        p.read_text("utf-8") for p in (REPO / "plugins").rglob("*.py")
    )
    named = set(re.findall(r"`(MAPSMITH_[A-Z0-9_]+)", PAGE))
    assert len(named) >= 6
    assert sorted(n for n in named if f'"{n}"' not in source) == []
