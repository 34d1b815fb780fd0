"""Run the worked example through a real MCP client over stdio and write ``docs/worked-example.md``.

A thin wrapper: the example itself is ``mapsmith.examples.worked_example`` (``mapsmith example``); this
script only points its ``--write-docs`` at the page in this checkout. Extra arguments are passed on:

    python benchmarks/worked_example.py
    python benchmarks/worked_example.py --workdir /tmp/worked-example
"""

from __future__ import annotations

import sys
from pathlib import Path

from mapsmith.examples.worked_example import main

PAGE = Path(__file__).resolve().parents[1] / "docs" / "worked-example.md"

if __name__ == "__main__":
    sys.exit(main(["--write-docs", str(PAGE), *sys.argv[1:]]))
