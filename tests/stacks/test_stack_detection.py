"""Stack detection for the sedona and qgis stacks, through their real detection paths (esri's is in
test_esri_detection.py, the qgis caches in test_catalogue_cache.py).

qgis runs real executables (small shell scripts standing in for ``qgis_process``) found on a real
PATH, with its probe cache in a folder of the test's own; sedona's import probes are steered with a
patched ``find_spec`` and its Java probe runs a real ``java``. The last tests check what detection
says about this very machine against what is actually installed on it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import mapsmith_esri
import mapsmith_qgis
import mapsmith_sedona
from mapsmith._compat import install_command
from mapsmith.plugins import PluginHost

POSIX_ONLY = pytest.mark.skipif(os.name != "posix", reason="the fake executables are POSIX shell scripts")
SYSTEM_PATH = os.pathsep.join(["/usr/bin", "/bin"])

QGIS_322_VERSION_OUTPUT = """\
QGIS 3.22.16-Białowieża 'Białowieża' (6f08e4d4f4)
QGIS code revision 6f08e4d4f4
Qt version 5.15.8
Python version 3.11.2
GDAL/OGR version 3.6.2
PROJ version 9.1.1
EPSG Registry database version v10.076 (2022-08-31)
GEOS version 3.11.1-CAPI-1.17.1
SQLite version 3.40.1
OS Debian GNU/Linux 12 (bookworm)
"""


@pytest.fixture(autouse=True)
def _fresh_probes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test starts with empty probe caches (in memory and on disk) and none of our variables set."""
    for var in (mapsmith_qgis.ENV_VAR, mapsmith_esri.ENV_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MAPSMITH_QGIS_CACHE", str(tmp_path / "qgis-cache"))
    mapsmith_qgis.probe.cache_clear()
    mapsmith_sedona.java_version.cache_clear()
    yield
    mapsmith_qgis.probe.cache_clear()
    mapsmith_sedona.java_version.cache_clear()


def write_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def on_path(monkeypatch: pytest.MonkeyPatch, *directories: Path) -> None:
    """PATH = the given directories, then only the system's own /usr/bin:/bin."""
    monkeypatch.setenv("PATH", os.pathsep.join([*map(str, directories), SYSTEM_PATH]))


def fake_qgis_process(path: Path, output: str = QGIS_322_VERSION_OUTPUT, calls: Path | None = None) -> Path:
    """A qgis_process that insists on being called the way MapSmith must call the real one."""
    record = f'echo run >> "{calls}"\n' if calls else ""
    return write_script(
        path,
        record
        + '[ "$1" = "--version" ] || { echo "unexpected arguments: $*" >&2; exit 2; }\n'
        + '[ "$QT_QPA_PLATFORM" = offscreen ] || { echo "QT_QPA_PLATFORM is not offscreen" >&2; exit 3; }\n'
        + 'case "$PATH" in /usr/bin:/bin:*) ;; *) echo "system dirs not first on PATH: $PATH" >&2; exit 4;; esac\n'
        + "cat <<'EOF'\n"
        + output
        + "EOF\n",
    )


def system_has_qgis() -> bool:
    return any(shutil.which(name, path=SYSTEM_PATH) for name in mapsmith_qgis.EXECUTABLE_NAMES)


# -- qgis ------------------------------------------------------------------------------------------


@POSIX_ONLY
def test_qgis_process_bin_on_path_is_available_with_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = fake_qgis_process(tmp_path / "bin" / "qgis_process.bin")
    on_path(monkeypatch, exe.parent)

    avail = mapsmith_qgis.availability()

    assert avail.available, avail
    assert avail.details["executable"] == str(exe)
    assert avail.details["qgis"] == "3.22.16"
    assert avail.details["qgis_release"] == "Białowieża"
    assert mapsmith_qgis.engine_versions() == {
        "qgis": "3.22.16",
        "qgis_release": "Białowieża",
        "Qt": "5.15.8",
        "Python": "3.11.2",
        "GDAL": "3.6.2",
        "PROJ": "9.1.1",
        "GEOS": "3.11.1-CAPI-1.17.1",
    }


@POSIX_ONLY
def test_qgis_process_bin_is_preferred_over_the_debian_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    write_script(bin_dir / "qgis_process", 'echo "Unknown option --noversioncheck" >&2\nexit 1\n')
    real = fake_qgis_process(bin_dir / "qgis_process.bin")
    on_path(monkeypatch, bin_dir)

    avail = mapsmith_qgis.availability()

    assert avail.available, avail
    assert avail.details["executable"] == str(real)


@POSIX_ONLY
def test_failing_qgis_process_is_unavailable_with_its_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = write_script(
        tmp_path / "bin" / "qgis_process.bin",
        'echo "starting" >&2\necho "Application path not initialized" >&2\nexit 1\n',
    )
    on_path(monkeypatch, exe.parent)

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert "exited with status 1" in avail.reason
    assert "Application path not initialized" in avail.reason
    assert str(exe) in avail.fix


@POSIX_ONLY
def test_crashing_qgis_process_is_unavailable_naming_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = write_script(tmp_path / "bin" / "qgis_process.bin", 'echo "Fatal Python error" >&2\nkill -SEGV $$\n')
    on_path(monkeypatch, exe.parent)

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert "SIGSEGV" in avail.reason and "Fatal Python error" in avail.reason


@POSIX_ONLY
def test_hanging_qgis_process_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = write_script(tmp_path / "bin" / "qgis_process.bin", "exec sleep 30\n")
    on_path(monkeypatch, exe.parent)
    monkeypatch.setattr(mapsmith_qgis, "PROBE_TIMEOUT_S", 1)

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert "did not finish within 1 s" in avail.reason


@POSIX_ONLY
def test_output_without_a_qgis_version_line_is_not_taken_for_qgis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = fake_qgis_process(tmp_path / "bin" / "qgis_process.bin", output="usage: something else\n")
    on_path(monkeypatch, exe.parent)

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert "printed no QGIS version line" in avail.reason and "usage: something else" in avail.reason


@POSIX_ONLY
def test_the_probe_runs_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls.txt"
    exe = fake_qgis_process(tmp_path / "bin" / "qgis_process.bin", calls=calls)
    on_path(monkeypatch, exe.parent)

    assert mapsmith_qgis.availability().available
    assert mapsmith_qgis.availability().available
    assert mapsmith_qgis.engine_versions()["qgis"] == "3.22.16"

    assert calls.read_text().splitlines() == ["run"]


@POSIX_ONLY
def test_env_var_overrides_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_script(tmp_path / "onpath" / "qgis_process.bin", "exit 1\n")
    chosen = fake_qgis_process(tmp_path / "elsewhere" / "my_qgis_process")
    on_path(monkeypatch, tmp_path / "onpath")
    monkeypatch.setenv(mapsmith_qgis.ENV_VAR, str(chosen))

    avail = mapsmith_qgis.availability()

    assert avail.available, avail
    assert avail.details["executable"] == str(chosen)


def test_env_var_naming_a_missing_file_is_unavailable_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere" / "qgis_process"
    monkeypatch.setenv(mapsmith_qgis.ENV_VAR, str(missing))

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert avail.reason == f"MAPSMITH_QGIS_PROCESS={missing} does not exist"
    assert "MAPSMITH_QGIS_PROCESS" in avail.fix


@POSIX_ONLY
def test_env_var_naming_a_non_executable_file_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "qgis_process"
    plain.write_text("not a program\n")
    monkeypatch.setenv(mapsmith_qgis.ENV_VAR, str(plain))

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert avail.reason == f"MAPSMITH_QGIS_PROCESS={plain} is not an executable file"


def test_no_qgis_process_anywhere_gives_the_exact_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if system_has_qgis():
        pytest.skip("this machine has qgis_process in /usr/bin or /bin")
    empty = tmp_path / "empty"
    empty.mkdir()
    on_path(monkeypatch, empty)

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert avail.reason == "qgis_process not on PATH (and MAPSMITH_QGIS_PROCESS not set)"
    assert avail.fix == (
        "apt-get install -y --no-install-recommends qgis (Debian/Ubuntu), "
        "or set MAPSMITH_QGIS_PROCESS to the qgis_process executable"
    )
    assert mapsmith_qgis.engine_versions() == {}


def test_version_parser_reads_the_documented_forms_and_nothing_else() -> None:
    assert mapsmith_qgis.parse_version_output("QGIS version: 3.22.16-Białowieża\n") == {"qgis": "3.22.16"}
    mismatched = "QGIS 3.34.4-Prizren 'Prizren' (abc)\nCompiled against GDAL/OGR 3.6.2\nRunning against GDAL/OGR 3.8.4"
    expected = {"qgis": "3.34.4", "qgis_release": "Prizren", "GDAL": "3.8.4"}
    assert mapsmith_qgis.parse_version_output(mismatched) == expected
    assert mapsmith_qgis.parse_version_output("QGIS code revision 6f08e4d4f4\nGDAL/OGR version 3.6.2\n") == {}
    assert mapsmith_qgis.parse_version_output("") == {}


def test_qgis_detection_reports_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("PATH lookup exploded")

    monkeypatch.setattr(mapsmith_qgis.shutil, "which", broken)

    avail = mapsmith_qgis.availability()

    assert not avail.available
    assert "RuntimeError: PATH lookup exploded" in avail.reason
    assert mapsmith_qgis.engine_versions() == {}


# -- sedona ----------------------------------------------------------------------------------------


def pretend_modules(monkeypatch: pytest.MonkeyPatch, present: set[str]) -> None:
    """find_spec reports exactly ``present`` as importable, and nothing else."""
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        if name in present:
            return object()
        if name.split(".")[0] in {"sedonadb", "geoarrow", "pyspark", "sedona"}:
            return None
        return real_find_spec(name, package)

    monkeypatch.setattr(mapsmith_sedona.importlib.util, "find_spec", find_spec)


ALL_SEDONA_MODULES = {*mapsmith_sedona.SEDONADB_MODULES, *mapsmith_sedona.SPARK_MODULES}


def no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "nojava"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)


def test_sedona_with_nothing_installed_is_unavailable_with_the_pip_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend_modules(monkeypatch, present=set())

    avail = mapsmith_sedona.availability()

    assert not avail.available
    assert "SedonaDB: Python packages not installed: sedonadb, geoarrow-pyarrow" in avail.reason
    assert "Spark: Python packages not installed: pyspark, apache-sedona" in avail.reason
    assert install_command("sedona") in avail.fix
    assert install_command("spark") in avail.fix and "Java 17" in avail.fix
    assert avail.details["sedonadb"].startswith("not usable: ")
    assert avail.details["spark"].startswith("not usable: ")


def test_sedonadb_without_its_geoarrow_companion_is_not_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend_modules(monkeypatch, present={"sedonadb"})

    avail = mapsmith_sedona.availability()

    assert not avail.available
    assert "not installed: geoarrow-pyarrow" in avail.details["sedonadb"]


def test_sedona_packages_present_but_no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pretend_modules(monkeypatch, present=ALL_SEDONA_MODULES)
    no_java(monkeypatch, tmp_path)

    avail = mapsmith_sedona.availability()

    assert avail.available
    assert avail.details["sedonadb"] == "usable"
    assert avail.details["spark"].startswith("not usable: no java executable on PATH and JAVA_HOME is not set")
    assert "Java 17" in avail.details["spark"]


def test_spark_alone_is_enough_for_the_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if shutil.which("java") is None or os.environ.get("JAVA_HOME"):
        pytest.skip("needs a java on PATH and no JAVA_HOME")
    pretend_modules(monkeypatch, present=set(mapsmith_sedona.SPARK_MODULES))
    jars = [tmp_path / "sedona.jar", tmp_path / "geotools-wrapper.jar"]  # stand-ins: detection only checks they exist
    for jar in jars:
        jar.touch()
    monkeypatch.setenv("MAPSMITH_SEDONA_JARS", ",".join(str(j) for j in jars))

    avail = mapsmith_sedona.availability()
    java = mapsmith_sedona.engine_versions().get("java")

    assert java is not None
    major = mapsmith_sedona.java_major(java)
    if major is not None and major < mapsmith_sedona.MIN_JAVA_MAJOR:
        assert not avail.available and "too old" in avail.details["spark"]
    else:
        assert avail.available
        assert avail.details["spark"] == "usable"
        assert avail.details["sedonadb"].startswith("not usable: ")


def test_a_java_home_without_java_breaks_spark_even_with_java_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pretend_modules(monkeypatch, present=ALL_SEDONA_MODULES)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))

    avail = mapsmith_sedona.availability()

    assert avail.available  # SedonaDB still is
    assert f"JAVA_HOME={tmp_path / 'jdk'} has no executable bin/java" in avail.details["spark"]


@POSIX_ONLY
def test_java_older_than_17_is_not_enough_for_spark(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pretend_modules(monkeypatch, present=set(mapsmith_sedona.SPARK_MODULES))
    write_script(tmp_path / "jdk" / "bin" / "java", "echo 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))

    avail = mapsmith_sedona.availability()

    assert not avail.available
    assert "Java 11.0.22" in avail.details["spark"] and "Java 17 or later" in avail.details["spark"]
    assert mapsmith_sedona.engine_versions()["java"] == "11.0.22"


@POSIX_ONLY
def test_a_java_that_fails_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pretend_modules(monkeypatch, present=set(mapsmith_sedona.SPARK_MODULES))
    write_script(tmp_path / "jdk" / "bin" / "java", 'echo "Error: could not create the JVM" >&2\nexit 1\n')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))

    avail = mapsmith_sedona.availability()

    assert not avail.available
    assert "exited with status 1" in avail.details["spark"] and "could not create the JVM" in avail.details["spark"]
    assert "java" not in mapsmith_sedona.engine_versions()


def test_java_major_reads_both_version_schemes() -> None:
    assert mapsmith_sedona.java_major("17.0.15") == 17
    assert mapsmith_sedona.java_major("21") == 21
    assert mapsmith_sedona.java_major("1.8.0_401") == 8
    assert mapsmith_sedona.java_major("unknown") is None


def test_sedona_detection_reports_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str, package: str | None = None) -> None:
        raise RuntimeError("import system exploded")

    monkeypatch.setattr(mapsmith_sedona.importlib.util, "find_spec", broken)

    avail = mapsmith_sedona.availability()

    assert not avail.available
    assert "RuntimeError: import system exploded" in avail.reason
    assert avail.fix == install_command("sedona")


# -- this machine, as it is ------------------------------------------------------------------------


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def test_sedona_detection_matches_what_is_installed_here() -> None:
    sedonadb = importable("sedonadb") and importable("geoarrow.pyarrow")
    spark_packages = importable("pyspark") and importable("sedona")

    avail = mapsmith_sedona.availability()

    assert (avail.details["sedonadb"] == "usable") == sedonadb
    if not spark_packages:
        assert avail.details["spark"].startswith("not usable: Python packages not installed")
    if not sedonadb and not spark_packages:  # the case in the project's development venv
        assert not avail.available
        assert avail.fix.startswith(install_command("sedona"))
        assert "sedonadb" not in mapsmith_sedona.engine_versions()


def test_qgis_detection_matches_this_machine() -> None:
    found = [shutil.which(name) for name in mapsmith_qgis.EXECUTABLE_NAMES]

    avail = mapsmith_qgis.availability()

    if not any(found):
        assert not avail.available
        assert avail.reason == mapsmith_qgis.NOT_FOUND_REASON
        assert avail.fix == mapsmith_qgis.INSTALL_FIX
    else:
        assert avail.details["executable"] == next(f for f in found if f)


def test_the_three_stacks_register_through_the_plugin_host_with_only_mapped_operations() -> None:
    host = PluginHost(
        load_entry_points=False,
        extra_plugins=[("sedona", mapsmith_sedona), ("qgis", mapsmith_qgis), ("esri", mapsmith_esri)],
    )

    assert set(host.stacks) == {"sedona", "qgis", "esri"}
    for spec in host.stacks.values():
        assert spec.licence and spec.summary
        assert spec.dataset_io is None
    # QGIS's own algorithms are the qgis: toolbox, loaded only when asked for: registering registers none of them
    from mapsmith_esri.mapping import MAPPINGS as ESRI_MAPPINGS
    from mapsmith_qgis.mapping import MAPPINGS

    registered = {(i.stack, i.operation) for impls in host.implementations.values() for i in impls}
    sedona = {("sedona", op) for op in ("spatial_join", "count_in_polygons", "summarize_points_in_polygons")}
    sedona |= {("sedona", op) for op in ("nearest_join", "dissolve_layer", "overlay_layers")}
    esri = {("esri", op) for op in ("buffer_layer", "clip_layer", "dissolve_layer", "reproject_layer")}
    esri |= {("esri", op) for op in ("measure_area", "spatial_join", "point_on_surface")}
    assert {("esri", m.operation) for m in ESRI_MAPPINGS} == esri
    assert registered == {("qgis", m.operation) for m in MAPPINGS} | sedona | esri
    assert not any(name.startswith("qgis:") for name in host.contracts.loaded())


def test_importing_the_plugins_imports_no_engine() -> None:
    code = (
        "import sys, mapsmith_sedona, mapsmith_qgis, mapsmith_esri\n"
        "engines = {'sedonadb', 'geoarrow', 'pyspark', 'sedona', 'qgis', 'arcpy', 'winreg'}\n"
        "print(sorted(engines & {m.split('.')[0] for m in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("value", ["lots", "0g", "4 g", "-1g", "4gb"])
def test_a_bad_spark_driver_memory_is_refused_before_spark_starts(value: str) -> None:
    from mapsmith.errors import MapSmithError
    from mapsmith_sedona import spark_session

    with pytest.raises(MapSmithError) as caught:
        spark_session._start("local[1]", {"MAPSMITH_SPARK_DRIVER_MEMORY": value})
    assert caught.value.code == "SPARK_DRIVER_MEMORY_INVALID"
    assert caught.value.evidence["value"] == value.strip()


@pytest.mark.parametrize(("value", "expected"), [("", None), ("8g", "8g"), ("16384m", "16384m"), (" 2G ", "2G")])
def test_spark_driver_memory_setting(value: str, expected: str | None) -> None:
    from mapsmith_sedona import spark_session

    assert spark_session.driver_memory_of({"MAPSMITH_SPARK_DRIVER_MEMORY": value}) == expected
