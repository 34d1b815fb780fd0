"""Detection of the esri stack: ArcGIS Pro's Python found through MAPSMITH_ARCGIS_PYTHON or the registry.

Split from test_stack_detection.py (one file per stack's detection). ``MAPSMITH_ARCGIS_PYTHON``
names a real file; the Windows branch runs on any OS with only the registry reads replaced by fake
registry data (no licence is ever checked out, here or in the code).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import mapsmith_esri


@pytest.fixture(autouse=True)
def _no_configured_pro(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(mapsmith_esri.ENV_VAR, raising=False)
    yield


@pytest.mark.skipif(sys.platform == "win32", reason="Pro may really be installed on Windows")
def test_esri_off_windows_is_unavailable_with_the_windows_reason() -> None:
    avail = mapsmith_esri.availability()

    assert not avail.available
    assert avail.reason == "ArcGIS Pro not found: it runs on Windows only, and MAPSMITH_ARCGIS_PYTHON is not set"
    assert avail.fix == (
        "run MapSmith on a Windows machine with ArcGIS Pro 3.x, "
        "or set MAPSMITH_ARCGIS_PYTHON to Pro's propy.bat/python.exe"
    )
    assert mapsmith_esri.engine_versions() == {}


def test_esri_env_var_naming_an_existing_file_is_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    propy = tmp_path / "Pro" / "bin" / "Python" / "Scripts" / "propy.bat"
    propy.parent.mkdir(parents=True)
    propy.write_text("@echo off\n")
    monkeypatch.setenv(mapsmith_esri.ENV_VAR, str(propy))

    avail = mapsmith_esri.availability()

    assert avail.available, avail
    assert avail.details["python"] == str(propy)
    assert avail.details["found_by"] == "MAPSMITH_ARCGIS_PYTHON"
    assert avail.details["licence_level"] == "not read (unknown)"
    if sys.platform != "win32":
        assert avail.details["pro_version"] == "not read (unknown)"


def test_esri_env_var_naming_a_missing_file_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "propy.bat"
    monkeypatch.setenv(mapsmith_esri.ENV_VAR, str(missing))

    avail = mapsmith_esri.availability()

    assert not avail.available
    assert avail.reason == f"MAPSMITH_ARCGIS_PYTHON={missing} does not exist"


def test_esri_env_var_naming_a_directory_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mapsmith_esri.ENV_VAR, str(tmp_path))

    avail = mapsmith_esri.availability()

    assert not avail.available
    assert avail.reason == f"MAPSMITH_ARCGIS_PYTHON={tmp_path} is not a file"


def simulate_windows(
    monkeypatch: pytest.MonkeyPatch, registry: Callable[[], tuple[dict[str, str], str | None]]
) -> None:
    """The Windows branch on any OS: only the registry reads themselves are replaced (no licensing key)."""
    monkeypatch.setattr(mapsmith_esri, "on_windows", lambda: True)
    monkeypatch.setattr(mapsmith_esri, "read_pro_registry", registry)
    monkeypatch.setattr(mapsmith_esri, "read_registry_values", lambda hive, key, names: ({}, f"no {hive}\\{key}"))


def test_esri_on_windows_derives_pros_python_from_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = tmp_path / mapsmith_esri.PRO_PYTHON
    python.parent.mkdir(parents=True)
    python.write_bytes(b"MZ")
    registry = {"InstallDir": str(tmp_path), "Version": "3.3.1", "RealVersion": "13.3.1"}
    simulate_windows(monkeypatch, lambda: (registry, None))

    avail = mapsmith_esri.availability()

    assert avail.available, avail
    assert avail.details["python"] == str(python)
    assert avail.details["pro_version"] == "3.3.1" and avail.details["pro_build"] == "13.3.1"
    assert avail.details["licence_level"] == "not read (unknown)"
    assert mapsmith_esri.engine_versions() == {"ArcGIS Pro": "3.3.1"}


def test_esri_on_windows_with_pro_registered_but_its_python_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulate_windows(monkeypatch, lambda: ({"InstallDir": str(tmp_path), "Version": "3.3.1"}, None))

    avail = mapsmith_esri.availability()

    assert not avail.available
    assert f"ArcGIS Pro is registered at {tmp_path}" in avail.reason and "arcgispro-py3" in avail.reason


def test_esri_on_windows_without_pro(monkeypatch: pytest.MonkeyPatch) -> None:
    simulate_windows(monkeypatch, lambda: ({}, r"registry key HKLM\SOFTWARE\ESRI\ArcGISPro does not exist"))

    avail = mapsmith_esri.availability()

    assert not avail.available
    assert avail.reason.startswith(r"ArcGIS Pro not found: registry key HKLM\SOFTWARE\ESRI\ArcGISPro does not exist")
    assert avail.fix == mapsmith_esri.FIX


def test_esri_detection_reports_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> tuple[dict[str, str], str | None]:
        raise PermissionError("registry access denied")

    simulate_windows(monkeypatch, broken)

    avail = mapsmith_esri.availability()

    assert not avail.available
    assert "PermissionError: registry access denied" in avail.reason
    assert mapsmith_esri.engine_versions() == {}
