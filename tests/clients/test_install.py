"""Installing MapSmith the ways the README documents, since the name `mapsmith` on PyPI is another project's:
a wheel built from the checkout, run with ``uvx --from <wheel>`` and ``uvx --from <checkout>``, and
``pipx install <checkout>``.

The wheel must carry what an installed MapSmith reads from its own package: the operation contracts and
their schemas (force-included from contracts/), ``py.typed``, and the metadata a package index shows
(project URLs, classifiers). Every expected value is read from the checkout (pyproject.toml, contracts/).
uv resolves the dependencies from its cache, so after the first run this costs a few seconds.

The ``clients`` nox session installs uv and pipx and sets MAPSMITH_CLIENTS_REQUIRED=1, so nothing here skips there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
VERSION = PYPROJECT["project"]["version"]
REQUIRED = os.environ.get("MAPSMITH_CLIENTS_REQUIRED") == "1"


def installer(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        reason = f"{name} is not installed: pip install {name} (the clients nox session installs it)"
        if REQUIRED:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def uv() -> str:
    return installer("uv")


def uv_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAPSMITH_")}
    env["UV_PYTHON_DOWNLOADS"] = "never"  # only package registries are reachable: use this Python
    env["MAPSMITH_QGIS_ALGORITHMS"] = "0"  # the catalog is then exactly contracts/operations
    return env


def run(uv: str, *args: str, cwd: Path) -> str:
    done = subprocess.run([uv, *args], cwd=cwd, env=uv_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"uv {' '.join(args)} exited {done.returncode}: {done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(uv: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(uv, "build", "--wheel", "--out-dir", str(out), str(ROOT), cwd=out)
    [built] = out.glob("*.whl")
    return built


def test_the_wheel_carries_the_contracts_py_typed_and_the_index_metadata(wheel: Path) -> None:
    assert wheel.name == f"mapsmith-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"mapsmith-{VERSION}.dist-info/METADATA").decode("utf-8")
        entry_points = archive.read(f"mapsmith-{VERSION}.dist-info/entry_points.txt").decode("utf-8")
    assert "mapsmith/py.typed" in names
    for folder in ("operations", "schemas"):
        in_checkout = {p.name for p in (ROOT / "contracts" / folder).iterdir() if p.is_file()}
        in_wheel = {Path(n).name for n in names if n.startswith(f"mapsmith/contracts/{folder}/")}
        assert in_wheel == in_checkout, folder
    for label, url in PYPROJECT["project"]["urls"].items():
        assert f"Project-URL: {label}, {url}" in metadata
    for classifier in PYPROJECT["project"]["classifiers"]:
        assert f"Classifier: {classifier}\n" in metadata
    assert "Classifier: Typing :: Typed" in metadata
    assert "mapsmith = mapsmith.cli:main" in entry_points


def test_uvx_from_the_wheel_runs_mapsmith_with_its_contracts(uv: str, wheel: Path, tmp_path: Path) -> None:
    # From an empty folder, so nothing can be read from the checkout.
    common = ["tool", "run", "--isolated", "--python", sys.executable, "--from", str(wheel)]
    assert run(uv, *common, "mapsmith", "--version", cwd=tmp_path).strip() == f"mapsmith {VERSION}"
    info = json.loads(run(uv, *common, "mapsmith", "info", cwd=tmp_path))
    assert (info["name"], info["version"]) == ("mapsmith", VERSION)
    assert info["operations"] == len(list((ROOT / "contracts" / "operations").glob("*.toml")))


def test_uvx_from_the_checkout_runs_mapsmith(uv: str, tmp_path: Path) -> None:
    common = ["tool", "run", "--isolated", "--python", sys.executable, "--from", str(ROOT)]
    assert run(uv, *common, "mapsmith", "--version", cwd=tmp_path).strip() == f"mapsmith {VERSION}"


def test_pipx_installs_mapsmith_from_the_checkout(tmp_path: Path) -> None:
    pipx = installer("pipx")
    env = uv_env() | {
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "bin"),
        "PIPX_MAN_DIR": str(tmp_path / "man"),
    }
    done = subprocess.run(
        [pipx, "install", "--python", sys.executable, str(ROOT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    version = subprocess.run(
        [str(tmp_path / "bin" / "mapsmith"), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == f"mapsmith {VERSION}"
