"""Fixtures for the plugin kit: a folder of throwaway Python modules for isolated runs, and generated plugins.

Never skipped for a missing bubblewrap: the nox tests session installs it, and a machine without it must
fail these tests (the isolation runner refuses rather than run code unsandboxed).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def modules(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``name.py`` with ``source`` into a folder the isolated process imports from; return the folder."""
    folder = tmp_path / "modules"
    folder.mkdir()

    def write(name: str, source: str) -> Path:
        (folder / f"{name}.py").write_text(textwrap.dedent(source), "utf-8")
        return folder

    return write


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    """A fresh plugin from ``mapsmith plugin new``, exactly as generated."""
    from mapsmith.pluginkit.new import create

    return create("roads", tmp_path / "src")
