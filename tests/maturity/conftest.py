"""Fixtures for the maturity tests: the hello fixture plugin installed for real, and its code digest by hand.

The plugin (``tests/fixtures/mapsmith-plugin-hello``) is built with pip into a throwaway ``site`` folder
once per session; a test that needs it puts that folder on ``sys.path``, so the plugin reaches MapSmith
through the ``mapsmith`` entry-point group exactly as on a user's machine, and leaves with the test.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mapsmith-plugin-hello"
# GeoPackage writers stamp the wall clock into gpkg_contents unless GDAL is told the date; the hello
# plugin writes with plain geopandas, so without this its replays could never be byte-identical.
PINNED_DATE = "2000-01-01T00:00:00.000Z"


@pytest.fixture(scope="session")
def hello_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hello-plugin-maturity")
    source = shutil.copytree(FIXTURE, root / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--quiet", "--no-compile"]
        + ["--target", str(site), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip could not install the fixture plugin:\n{done.stdout}\n{done.stderr}"
    return site


@pytest.fixture
def hello(hello_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The installed plugin on sys.path for this test only; returns its package folder."""
    monkeypatch.syspath_prepend(str(hello_site))
    monkeypatch.setenv("OGR_CURRENT_DATE", PINNED_DATE)
    return hello_site / "mapsmith_hello"


@pytest.fixture
def hello_digest(hello: Path) -> str:
    """The listing digest of the package's two code files, written out line by line (spec §3.3 form).

    The names sort as bytes: "__init__.py" (0x5f) before "count_vertices.toml" (0x63).
    """
    package = hello
    files = sorted(p.relative_to(package).as_posix() for p in package.rglob("*") if p.suffix in (".py", ".toml"))
    assert files == ["__init__.py", "count_vertices.toml"], files  # the listing below covers them all
    init = hashlib.sha256((package / "__init__.py").read_bytes()).hexdigest()
    toml = hashlib.sha256((package / "count_vertices.toml").read_bytes()).hexdigest()
    listing = b"__init__.py\x00" + init.encode() + b"\n" + b"count_vertices.toml\x00" + toml.encode() + b"\n"
    return hashlib.sha256(listing).hexdigest()
