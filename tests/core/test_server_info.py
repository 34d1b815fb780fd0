"""server_info reads versions without importing an engine, reports the extras, and says what is wrong at start.

The versions it reports are checked against what the engines themselves say when imported (in this
test process, never in the server's); the server's own process is checked, through ``sys.modules``,
to have imported none of them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mapsmith_esri
from mapsmith import _compat
from mapsmith.app import MapSmith

REPO = Path(__file__).resolve().parents[2]
ENGINE_MODULES = (
    "geopandas",
    "shapely",
    "pyproj",
    "pyogrio",
    "duckdb",
    "pyarrow",
    "pandas",
    "numpy",
    "rasterio",
    "exactextract",
    "whitebox_workflows",
    "sedonadb",
    "pyspark",
    "sedona",
)


def server_info_in_a_fresh_process(workspace: Path, **env: str) -> tuple[dict[str, Any], list[str], str, str]:
    code = (
        "import json, sys\n"
        "from mapsmith.app import MapSmith\n"
        f"info = MapSmith({{'MAPSMITH_WORKSPACE': {str(workspace)!r}, **{env!r}}}).server_info()\n"
        f"print(json.dumps([info, sorted(m for m in {ENGINE_MODULES!r} if m in sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    info, imported = json.loads(done.stdout)
    return info, imported, done.stdout, done.stderr


def _installed_editable() -> bool:
    """Read from the installed distribution's PEP 610 record, independently of mapsmith._compat."""
    import json
    from importlib import metadata

    record = json.loads(metadata.distribution("mapsmith").read_text("direct_url.json") or "{}")
    assert record.get("url", "").startswith("file:"), "these tests run on MapSmith installed from its checkout"
    return bool((record.get("dir_info") or {}).get("editable"))


def test_server_info_imports_no_engine_and_reports_what_the_engines_say(workspace: Path) -> None:
    info, imported, _, _ = server_info_in_a_fresh_process(workspace)

    assert imported == []
    import duckdb
    import geopandas
    import pyogrio
    import pyproj
    import shapely

    opensource = info["engines"]["opensource"]
    assert opensource["geopandas"] == geopandas.__version__
    assert opensource["shapely"] == shapely.__version__
    assert opensource["pyproj"] == pyproj.__version__
    assert opensource["pyogrio"] == pyogrio.__version__
    assert opensource["duckdb"] == duckdb.__version__
    assert opensource["GEOS"] == shapely.geos_version_string
    assert opensource["PROJ"] == pyproj.proj_version_str
    assert opensource["GDAL"] == pyogrio.__gdal_version_string__


def test_server_info_lists_the_raster_extras_with_the_versions_they_report(workspace: Path) -> None:
    pytest.importorskip("rasterio")
    pytest.importorskip("exactextract")
    whitebox = pytest.importorskip("whitebox_workflows")
    import exactextract
    import rasterio

    info, imported, _, _ = server_info_in_a_fresh_process(workspace)

    assert imported == []
    assert info["extras"]["raster"] == {
        "installed": True,
        "distributions": {"exactextract": exactextract.__version__, "rasterio": rasterio.__version__},
    }
    wb_version = getattr(whitebox, "__version__", None) or _compat.version_of("whitebox-workflows")
    assert info["extras"]["whitebox"]["installed"] is True
    assert info["extras"]["whitebox"]["distributions"]["whitebox-workflows"] == wb_version
    assert info["engines"]["opensource"]["rasterio"] == rasterio.__version__


def test_a_missing_extra_is_named_with_the_command_that_adds_it_from_this_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = _compat.version_of
    monkeypatch.setattr(_compat, "version_of", lambda name: None if name == "exactextract" else real(name))
    # This test environment is installed from the checkout (PEP 610 direct_url.json says so): editable in a
    # developer's venv, a plain install in a nox session.
    editable = "-e " if _installed_editable() else ""
    expected_fix = f"{sys.executable} -m pip install {editable}'{REPO}[raster]'"

    raster = _compat.extras()["raster"]

    assert raster["installed"] is False
    assert raster["missing"] == ["exactextract"]
    assert raster["distributions"] == {"exactextract": "not installed", "rasterio": real("rasterio")}
    assert raster["fix"] == expected_fix
    assert _compat.missing_extra_message("raster") == (
        f"the [raster] extra is not installed (missing: exactextract); add it with: {expected_fix}"
    )
    assert "mapsmith[" not in expected_fix  # never the unrelated 'mapsmith' on PyPI


def test_an_installed_extra_has_no_fix_and_no_message() -> None:
    if _compat.version_of("rasterio") is None or _compat.version_of("exactextract") is None:
        pytest.skip("the [raster] extra is not installed here")

    assert "fix" not in _compat.extras()["raster"]
    assert _compat.missing_extra_message("raster") is None


class FakeDistribution:
    def __init__(self, direct_url: dict[str, Any] | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        return json.dumps(self.direct_url) if name == "direct_url.json" and self.direct_url else None


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (
            {"url": "file:///home/ana/dist/mapsmith-0.1.0-py3-none-any.whl", "archive_info": {}},
            "{python} -m pip install '/home/ana/dist/mapsmith-0.1.0-py3-none-any.whl[sedona]'",
        ),
        (
            {"url": "file:///home/ana/src/map%20smith", "dir_info": {"editable": True}},
            "{python} -m pip install -e '/home/ana/src/map smith[sedona]'",
        ),
        (
            {"url": "file:///home/ana/src/mapsmith", "dir_info": {}},
            "{python} -m pip install '/home/ana/src/mapsmith[sedona]'",
        ),
        (
            None,
            "{python} -m pip install '<your MapSmith checkout or wheel>[sedona]' "
            "(the 'mapsmith' on PyPI is another project)",
        ),
    ],
)
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX quoting")
def test_the_install_command_follows_where_mapsmith_came_from(
    monkeypatch: pytest.MonkeyPatch, direct_url: dict[str, Any] | None, expected: str
) -> None:
    monkeypatch.setattr(_compat.metadata, "distribution", lambda name: FakeDistribution(direct_url))

    assert _compat.install_command("sedona") == expected.format(python=sys.executable)


# -- a selected stack that cannot run here ---------------------------------------------------------

ANNOUNCE = (
    "import json, sys\n"
    "from mapsmith.app import MapSmith, announce_startup\n"
    "app = MapSmith({{'MAPSMITH_WORKSPACE': {workspace!r}, 'MAPSMITH_STACK': {stack!r}}})\n"
    "announce_startup(app)\n"
    "announce_startup(app)\n"  # a second call must not repeat what the first said
)


@pytest.mark.skipif(sys.platform == "win32", reason="ArcGIS Pro may be installed on Windows")
def test_an_unavailable_selected_stack_is_said_once_on_stderr_and_in_server_info(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ANNOUNCE.format(workspace=str(workspace), stack="esri")],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "MAPSMITH_QGIS_ALGORITHMS": "0"},
    )
    reason = "ArcGIS Pro not found: it runs on Windows only, and MAPSMITH_ARCGIS_PYTHON is not set"
    message = f"MAPSMITH_STACK=esri selects the esri stack, which is not available here: {reason}."

    assert done.stdout == ""  # on stdio, stdout is the protocol
    assert done.stderr.splitlines() == [f"mapsmith: WARNING: {message} Fix: {mapsmith_esri.FIX}"]
    info = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_STACK": "esri"}).server_info()
    assert info["warnings"] == [{"code": "STACK_UNAVAILABLE", "message": message, "hint": mapsmith_esri.FIX}]


def test_an_available_stack_starts_silently(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ANNOUNCE.format(workspace=str(workspace), stack="opensource")],
        capture_output=True,
        text=True,
        check=True,
    )

    assert (done.stdout, done.stderr) == ("", "")
    assert MapSmith({"MAPSMITH_WORKSPACE": str(workspace)}).server_info()["warnings"] == []


def test_qgis_selected_but_its_executable_missing_is_a_warning_with_the_fix(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mapsmith_qgis

    missing = tmp_path / "nowhere" / "qgis_process"
    monkeypatch.setenv(mapsmith_qgis.ENV_VAR, str(missing))
    mapsmith_qgis.probe.cache_clear()

    info = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_STACK": "qgis"}).server_info()

    assert info["warnings"] == [
        {
            "code": "STACK_UNAVAILABLE",
            "message": "MAPSMITH_STACK=qgis selects the qgis stack, which is not available here: "
            f"MAPSMITH_QGIS_PROCESS={missing} does not exist.",
            "hint": "point MAPSMITH_QGIS_PROCESS at an existing qgis_process, or unset it",
        }
    ]


def test_sedona_selected_with_spark_unusable_warns_about_that_engine(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mapsmith_sedona

    if _compat.version_of("sedonadb") is None or _compat.version_of("geoarrow-pyarrow") is None:
        pytest.skip("needs SedonaDB installed, so that the sedona stack itself is available")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))

    info = MapSmith({"MAPSMITH_WORKSPACE": str(workspace), "MAPSMITH_STACK": "sedona"}).server_info()

    # Without pyspark (the plain test session installs no [spark] extra) that is the reason said first
    problem = (
        f"JAVA_HOME={tmp_path / 'jdk'} has no executable bin/java (Spark uses JAVA_HOME when it is set)"
        if _compat.version_of("pyspark") and _compat.version_of("apache-sedona")
        else "Python packages not installed: pyspark, apache-sedona"
    )
    assert info["warnings"] == [
        {
            "code": "STACK_ENGINE_UNAVAILABLE",
            "message": f"MAPSMITH_STACK=sedona: the stack's spark engine is not usable here: {problem}; "
            "its operations will be refused.",
            "hint": mapsmith_sedona.SPARK_FIX,
        }
    ]


def test_a_broken_opensource_install_is_fixed_from_this_checkout_not_pypi(monkeypatch: pytest.MonkeyPatch) -> None:
    import mapsmith_opensource

    real = mapsmith_opensource.importlib.util.find_spec
    monkeypatch.setattr(
        mapsmith_opensource.importlib.util, "find_spec", lambda name, *a: None if name == "duckdb" else real(name, *a)
    )

    avail = mapsmith_opensource.availability()

    assert not avail.available
    assert avail.reason == "missing Python packages: duckdb"
    editable = "-e " if _installed_editable() else ""
    assert avail.fix == f"{sys.executable} -m pip install {editable}{shlex.quote(str(REPO))}"  # no [extra]: the base
