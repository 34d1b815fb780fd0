"""The QGIS catalogue cache against a real QGIS: built once per QGIS and MapSmith version, then reused.

Runs in the qgis nox session (QGIS from apt); skipped elsewhere when no qgis_process is installed,
and never skipped when MAPSMITH_QGIS_REQUIRED=1. Each test has its own cache folder, so the first
load really asks QGIS (one QGIS start for every definition) and the second really reads the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mapsmith_qgis
from mapsmith_qgis import algorithms

SYSTEM_PATH = "/usr/bin:/bin"
QGIS = next((p for n in mapsmith_qgis.EXECUTABLE_NAMES if (p := shutil.which(n, path=SYSTEM_PATH))), None)
pytestmark = pytest.mark.skipif(
    QGIS is None, reason="qgis_process is not installed (apt-get install -y --no-install-recommends qgis)"
)
if QGIS is None and os.environ.get("MAPSMITH_QGIS_REQUIRED") == "1":  # CI's qgis session: never skip there
    raise RuntimeError("MAPSMITH_QGIS_REQUIRED=1 but no qgis_process is installed")


def qgis_version_and_algorithms() -> tuple[str, set[str]]:
    """What QGIS itself says, asked here directly: its version line and every algorithm it lists."""
    env = mapsmith_qgis.subprocess_env()
    said = subprocess.run([QGIS, "--version"], capture_output=True, text=True, env=env, check=True).stdout
    version = re.match(r"QGIS (\d+\.\d+\.\d+)", said)
    assert version, said
    listing = subprocess.run([QGIS, "--json", "list"], capture_output=True, env=env, check=True).stdout
    listed = {a for p in json.loads(listing)["providers"].values() for a in p["algorithms"]}
    return version.group(1), listed


def load_in_a_fresh_process(cache: Path, workspace: Path) -> dict[str, object]:
    code = (
        "import json, time\n"
        "from mapsmith.app import MapSmith\n"
        f"app = MapSmith({{'MAPSMITH_WORKSPACE': {str(workspace)!r}}})\n"
        "before = [t['state'] for t in app.server_info()['toolboxes']]\n"
        "buffer = app.router.contract('qgis:native:buffer')\n"
        "names = sorted(n for n in app.host.contracts if n.startswith('qgis:'))\n"
        "print(json.dumps({'before': before, 'buffer_output': buffer.output_kind, 'names': names,\n"
        "                  'after': app.server_info()['toolboxes']}))\n"
    )
    env = {**os.environ, "MAPSMITH_QGIS_CACHE": str(cache), "MAPSMITH_QGIS_ALGORITHMS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return dict(json.loads(done.stdout))


def test_the_real_catalogue_is_built_once_then_read_from_the_cache(tmp_path: Path, workspace: Path) -> None:
    import mapsmith

    version, listed = qgis_version_and_algorithms()
    cache = tmp_path / "cache"
    tag = algorithms.executable_tag(str(QGIS))
    catalogue = cache / f"catalogue-{version}-{algorithms.safe(mapsmith.__version__)}-{tag}.json"

    first = load_in_a_fresh_process(cache, workspace)
    assert first["before"] == ["pending"]
    assert first["buffer_output"] == "dataset:vector"
    assert first["names"] == sorted(f"qgis:{a}" for a in listed)
    stamp = catalogue.stat().st_mtime_ns
    probe = cache / f"probe-{tag}.json"
    assert probe.exists()

    second = load_in_a_fresh_process(cache, workspace)

    assert second["names"] == first["names"]
    assert catalogue.stat().st_mtime_ns == stamp  # read, not rewritten
    (box,) = second["after"]  # type: ignore[misc]
    assert box["state"] == "loaded" and box["operations"] == len(listed)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [f"algorithms-{version}-{tag}.json", catalogue.name, probe.name]
    )


def test_a_catalogue_of_another_mapsmith_version_is_replaced(tmp_path: Path, workspace: Path) -> None:
    import mapsmith

    version, listed = qgis_version_and_algorithms()
    cache = tmp_path / "cache"
    tag = algorithms.executable_tag(str(QGIS))
    load_in_a_fresh_process(cache, workspace)
    current = cache / f"catalogue-{version}-{algorithms.safe(mapsmith.__version__)}-{tag}.json"
    older = cache / f"catalogue-{version}-0.0.1-{tag}.json"
    stale = json.loads(current.read_text("utf-8"))
    stale["mapsmith_version"] = "0.0.1"
    stale["algorithms"] = {}  # were it read, the toolbox would come out empty
    older.write_text(json.dumps(stale), "utf-8")
    current.unlink()

    again = load_in_a_fresh_process(cache, workspace)

    assert again["names"] == sorted(f"qgis:{a}" for a in listed)
    assert current.exists() and not older.exists()
