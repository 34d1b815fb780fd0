"""The qgis stack's caches without a real QGIS: the version probe and the derived algorithm catalogue.

The QGIS version comes from a real executable on a real PATH, a shell script standing in for
``qgis_process`` that logs every call; QGIS's own algorithm listing (``build_import``, one QGIS start
in real life) is replaced by one algorithm in the exact shape QGIS 3.22 prints, and counted. The
real-QGIS twin of these tests is tests/stacks/test_qgis_catalogue.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mapsmith_qgis
from mapsmith_qgis import algorithms

POSIX_ONLY = pytest.mark.skipif(os.name != "posix", reason="the fake qgis_process is a POSIX shell script")

VERSION_OUTPUT = "QGIS {version}-Białowieża 'Białowieża' (6f08e4d4f4)\nGDAL/OGR version 3.6.2\n"

# native:centroids as `qgis_process --json list` and the definitions dump give it (trimmed to what is read)
CENTROIDS = {
    "provider": "native",
    "details": {"group": "Vector geometry", "name": "Centroids", "short_description": None, "tags": ["centroid"]},
    "help": {
        "parameters": {
            "INPUT": {
                "name": "INPUT",
                "description": "Input layer",
                "optional": False,
                "is_destination": False,
                "default_value": None,
                "raw_definition": {"data_types": [], "default": None, "parameter_type": "source"},
                "type": {"id": "source"},
            },
            "ALL_PARTS": {
                "name": "ALL_PARTS",
                "description": "Create centroid for each part",
                "optional": False,
                "is_destination": False,
                "default_value": False,
                "raw_definition": {"default": False, "parameter_type": "boolean"},
                "type": {"id": "boolean"},
            },
            "OUTPUT": {
                "name": "OUTPUT",
                "description": "Centroids",
                "optional": False,
                "is_destination": True,
                "default_value": None,
                "raw_definition": {"data_type": 0, "default": None, "parameter_type": "sink"},
                "type": {"id": "sink"},
            },
        },
        "outputs": {"OUTPUT": {"description": "Centroids", "type": "outputVector"}},
    },
}


class FakeImport:
    """Stands in for ``build_import`` (QGIS's listing); counts the QGIS versions it was asked about."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, executable: str, qgis_version: str) -> dict[str, Any]:
        self.calls.append(qgis_version)
        return {
            "format": algorithms.CACHE_FORMAT,
            "qgis_version": qgis_version,
            "executable": executable,
            "definitions_from": "a test",
            "providers": {"native": {"name": "QGIS (native c++)", "is_active": True, "version": None}},
            "algorithms": {"native:centroids": CENTROIDS},
        }


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MAPSMITH_QGIS_CACHE", str(folder))
    mapsmith_qgis.probe.cache_clear()
    yield folder
    mapsmith_qgis.probe.cache_clear()


@pytest.fixture
def fake_import(monkeypatch: pytest.MonkeyPatch) -> FakeImport:
    fake = FakeImport()
    monkeypatch.setattr(algorithms, "build_import", fake)
    return fake


def fake_qgis(bin_dir: Path, version: str, calls: Path) -> Path:
    exe = bin_dir / "qgis_process.bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        f'#!/bin/sh\necho "$*" >> "{calls}"\ncat <<\'EOF\'\n' + VERSION_OUTPUT.format(version=version) + "EOF\n",
        encoding="utf-8",
    )
    exe.chmod(0o755)
    return exe


def calls_of(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_the_catalogue_is_built_once_and_reused(cache: Path, fake_import: FakeImport) -> None:
    first = algorithms.load_catalogue("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0")
    second = algorithms.load_catalogue("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0")

    assert fake_import.calls == ["3.22.16"]
    assert second == first
    contract = first["native:centroids"]["contract"]
    assert contract["name"] == "qgis:native:centroids"
    assert contract["summary"] == "QGIS Centroids (Vector geometry)"
    assert [(d["name"], d["kind"], d["required"]) for d in contract["datasets"]] == [("input_path", "vector", True)]
    assert [(p["name"], p["type"], p["default"]) for p in contract["parameters"]] == [("all_parts", "boolean", False)]
    assert contract["output"] == {
        "kind": "dataset:vector",
        "argument": "output_path",
        "formats": [".gpkg", ".fgb", ".geojson"],
    }
    tag = algorithms.executable_tag("/opt/qgis/bin/qgis_process")
    assert sorted(p.name for p in cache.iterdir()) == [
        f"algorithms-3.22.16-{tag}.json",
        f"catalogue-3.22.16-0.1.0-{tag}.json",
    ]
    stored = json.loads((cache / f"catalogue-3.22.16-0.1.0-{tag}.json").read_text("utf-8"))
    assert (stored["qgis_version"], stored["mapsmith_version"]) == ("3.22.16", "0.1.0")
    assert stored["algorithms"] == first


def test_a_reused_catalogue_is_not_derived_again(
    cache: Path, fake_import: FakeImport, monkeypatch: pytest.MonkeyPatch
) -> None:
    algorithms.load_catalogue("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0")
    derived: list[int] = []
    real = algorithms.derive_catalogue
    monkeypatch.setattr(algorithms, "derive_catalogue", lambda data: derived.append(1) or real(data))

    algorithms.load_catalogue("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0")

    assert derived == []


def test_a_new_qgis_version_rebuilds_and_drops_the_old_files(cache: Path, fake_import: FakeImport) -> None:
    exe = "/opt/qgis/bin/qgis_process"
    tag = algorithms.executable_tag(exe)
    algorithms.load_catalogue(exe, "3.22.16", "0.1.0")

    upgraded = algorithms.load_catalogue(exe, "3.34.4", "0.1.0")

    assert fake_import.calls == ["3.22.16", "3.34.4"]
    assert upgraded["native:centroids"]["contract"]["name"] == "qgis:native:centroids"
    assert sorted(p.name for p in cache.iterdir()) == [
        f"algorithms-3.34.4-{tag}.json",
        f"catalogue-3.34.4-0.1.0-{tag}.json",
    ]


def test_a_new_mapsmith_version_derives_again_without_asking_qgis(
    cache: Path, fake_import: FakeImport, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = "/opt/qgis/bin/qgis_process"
    tag = algorithms.executable_tag(exe)
    algorithms.load_catalogue(exe, "3.22.16", "0.1.0")
    derived: list[int] = []
    real = algorithms.derive_catalogue
    monkeypatch.setattr(algorithms, "derive_catalogue", lambda data: derived.append(1) or real(data))

    algorithms.load_catalogue(exe, "3.22.16", "0.2.0")

    assert fake_import.calls == ["3.22.16"]  # QGIS's own listing depends on QGIS only
    assert derived == [1]
    assert sorted(p.name for p in cache.iterdir()) == [
        f"algorithms-3.22.16-{tag}.json",
        f"catalogue-3.22.16-0.2.0-{tag}.json",
    ]


def test_changed_deriving_code_derives_again(
    cache: Path, fake_import: FakeImport, monkeypatch: pytest.MonkeyPatch
) -> None:
    algorithms.load_catalogue("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0")
    monkeypatch.setattr(algorithms, "deriver_digest", lambda: "another-deriver")
    derived: list[int] = []
    real = algorithms.derive_catalogue
    monkeypatch.setattr(algorithms, "derive_catalogue", lambda data: derived.append(1) or real(data))

    algorithms.load_catalogue("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0")

    assert derived == [1]


def test_a_damaged_cache_file_is_rebuilt_not_trusted(cache: Path, fake_import: FakeImport) -> None:
    exe = "/opt/qgis/bin/qgis_process"
    first = algorithms.load_catalogue(exe, "3.22.16", "0.1.0")
    catalogue = algorithms.catalogue_path(exe, "3.22.16", "0.1.0")
    raw = algorithms.cache_path(exe, "3.22.16")
    catalogue.write_text(catalogue.read_text("utf-8")[:100], "utf-8")  # cut short, as by a crash mid-write
    raw.write_text("{}", "utf-8")

    again = algorithms.load_catalogue(exe, "3.22.16", "0.1.0")

    assert again == first
    assert fake_import.calls == ["3.22.16", "3.22.16"]
    assert json.loads(catalogue.read_text("utf-8"))["algorithms"] == first
    assert [p.name for p in cache.iterdir() if p.name.endswith(".tmp")] == []


def test_an_unwritable_cache_costs_time_not_the_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_import: FakeImport, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("MAPSMITH_QGIS_CACHE", str(blocker))

    with caplog.at_level("WARNING", logger="mapsmith.qgis"):
        got = algorithms.load_catalogue("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0")

    assert got["native:centroids"]["contract"]["name"] == "qgis:native:centroids"
    assert any("could not write the QGIS cache file" in r.message for r in caplog.records)


def test_the_cache_folder_defaults_to_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAPSMITH_QGIS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    assert algorithms.catalogue_path("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0+g1a/b").parent == (
        tmp_path / "xdg" / "mapsmith" / "qgis"
    )
    assert algorithms.catalogue_path("/opt/qgis/bin/qgis_process", "3.22.16", "0.1.0+g1a/b").name.startswith(
        "catalogue-3.22.16-0.1.0_g1a_b-"
    )


# -- the version probe -----------------------------------------------------------------------------


@POSIX_ONLY
def test_the_probe_is_reused_across_processes_while_the_executable_is_unchanged(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.txt"
    exe = fake_qgis(tmp_path / "bin", "3.22.16", log)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")

    assert mapsmith_qgis.availability().details["qgis"] == "3.22.16"
    mapsmith_qgis.probe.cache_clear()  # what a new process starts with
    again = mapsmith_qgis.availability()

    assert again.available and again.details["qgis"] == "3.22.16"
    assert calls_of(log) == ["--version"]


@POSIX_ONLY
def test_a_replaced_executable_is_probed_again(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "calls.txt"
    exe = fake_qgis(tmp_path / "bin", "3.22.16", log)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    assert mapsmith_qgis.availability().details["qgis"] == "3.22.16"
    mapsmith_qgis.probe.cache_clear()

    fake_qgis(tmp_path / "bin", "3.34.14", log)  # an upgrade: a different file at the same path
    upgraded = mapsmith_qgis.availability()

    assert upgraded.details["qgis"] == "3.34.14"
    assert calls_of(log) == ["--version", "--version"]


@POSIX_ONLY
def test_a_failed_probe_is_not_kept(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "bin" / "qgis_process.bin"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho 'Application path not initialized' >&2\nexit 1\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")

    assert not mapsmith_qgis.availability().available
    assert not cache.exists() or list(cache.glob("probe-*.json")) == []


# -- the toolbox, end to end through the host ------------------------------------------------------


@POSIX_ONLY
def test_qgis_pays_nothing_until_a_qgis_name_is_asked_for(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_import: FakeImport, workspace: Path
) -> None:
    from mapsmith.app import MapSmith

    log = tmp_path / "calls.txt"
    exe = fake_qgis(tmp_path / "bin", "3.22.16", log)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    monkeypatch.setenv(mapsmith_qgis.ALGORITHMS_ENV, "1")

    from shapely.geometry import box

    from layers import write_layer

    write_layer(workspace / "square.gpkg", [box(500000, 5000000, 500100, 5000100)], "EPSG:32633", id=[1])
    app = MapSmith({"MAPSMITH_WORKSPACE": str(workspace)})
    measured = app.run("measure_area", {"input_path": "square.gpkg", "output_path": "area.gpkg"})
    assert measured.engine["stack"] == "opensource"
    assert app.router.contract("buffer_layer").name == "buffer_layer"
    assert calls_of(log) == [] and fake_import.calls == []
    assert app.host.toolboxes["qgis:"].state == "pending"

    contract = app.router.contract("qgis:native:centroids")

    assert contract.output_kind == "dataset:vector"
    assert calls_of(log) == ["--version"] and fake_import.calls == ["3.22.16"]
    assert "qgis:native:centroids" in {e["operation"] for e in app.list_operations()}
    assert app.router.candidates("qgis:native:centroids").stack == "qgis"
    assert calls_of(log) == ["--version"] and fake_import.calls == ["3.22.16"]
