"""docs/clients.md against what it describes: every configuration shown is valid JSON, and the Inspector
releases its table names are the ones pinned in tests/clients/node/package.json, the ones CI runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "clients.md").read_text("utf-8")


def test_every_configuration_on_the_page_is_valid_json() -> None:
    blocks = re.findall(r"```json\n(.*?)```", PAGE, flags=re.DOTALL)
    assert len(blocks) == 9
    for block in blocks:
        json.loads(block)


def test_the_inspector_table_names_the_pinned_releases() -> None:
    package = json.loads((ROOT / "tests" / "clients" / "node" / "package.json").read_text("utf-8"))
    pinned = sorted(
        spec.rsplit("@", 1)[1]
        for spec in package["dependencies"].values()
        if spec.startswith("npm:@modelcontextprotocol/inspector@")
    )
    in_table = sorted(re.findall(r"^\| (\d+\.\d+\.\d+)(?: \(newest 0\.x\))? \|", PAGE, flags=re.MULTILINE))
    assert in_table == pinned == ["0.15.0", "0.22.0", "2.12.0"]
    assert package["dependencies"]["node"] == "22.23.3"
