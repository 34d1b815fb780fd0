"""The Dockerfile checked against the checkout, where no container engine is needed: the files it copies
exist and are not excluded by .dockerignore, the Sedona jars it keeps are the ones jars.py pins, the
image users run is unprivileged and serves MapSmith, Chromium is only in the test stage, and the tests
the test stage runs exist. Building and running the image is ``tests/clients/test_container.py``'s.

The instructions are split on their keyword by hand: the checks read a handful of COPY, USER, ENV and
RUN lines, and a Dockerfile parser package would be a test dependency for that alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str, str]]:
    """(stage, keyword, arguments) for every instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text("utf-8"))
    stage, found = "", []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, arguments = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = arguments.split()
            stage = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else f"final:{parts[0]}"
        found.append((stage, keyword, " ".join(arguments.split())))
    return found


def stage_lines(stage: str, keyword: str) -> list[str]:
    return [arguments for s, k, arguments in instructions() if s == stage and k == keyword]


def test_the_stages_and_the_default_target() -> None:
    stages = [s for s, k, _ in instructions() if k == "FROM"]
    assert stages == ["os", "build", "runtime", "test", "final:runtime"]


def test_the_runtime_image_is_unprivileged_and_serves_mapsmith_over_stdio_by_default() -> None:
    assert stage_lines("runtime", "USER") == ["mapsmith"]
    [useradd] = [line for line in stage_lines("runtime", "RUN") if "useradd" in line]
    uid = int(re.search(r"--uid (\d+)", useradd).group(1))  # type: ignore[union-attr]
    assert uid >= 1000
    assert [json.loads(e) for e in stage_lines("runtime", "ENTRYPOINT")] == [["mapsmith"]]
    assert [json.loads(c) for c in stage_lines("runtime", "CMD")] == [[]]
    env = " ".join(stage_lines("runtime", "ENV"))
    assert "MAPSMITH_WORKSPACE=/workspace" in env
    assert "MAPSMITH_HTTP_TOKEN" not in env  # a token is the user's, never baked into an image


def test_chromium_is_only_in_the_test_stage() -> None:
    stages = {stage for stage, _, arguments in instructions() if "chromium" in arguments.split()}
    assert stages == {"test"}


def test_the_runtime_keeps_the_sedona_jars_jars_py_pins() -> None:
    from mapsmith_sedona.jars import ARTIFACTS

    copies = [line.split()[1:] for line in stage_lines("runtime", "COPY") if line.startswith("--from=build ")]
    kept = {source for source, target in copies if source == target and source.startswith("/opt/maven-repository/")}
    wanted = {"/opt/maven-repository/" + artifact.group.replace(".", "/") for artifact in ARTIFACTS}
    assert kept == wanted
    assert "MAPSMITH_MAVEN_REPO=/opt/maven-repository" in " ".join(stage_lines("runtime", "ENV"))


def test_what_the_build_copies_exists_and_is_not_ignored() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text("utf-8").splitlines() if line.strip()} - {""}
    sources = []
    for line in stage_lines("build", "COPY"):
        *names, _target = line.split()
        sources += names
    assert sources == ["pyproject.toml", "README.md", "LICENSE", "core", "plugins", "contracts"]
    for name in sources:
        assert (ROOT / name).exists(), name
        assert name not in ignored, name


def test_the_tests_the_test_stage_runs_exist() -> None:
    [cmd] = stage_lines("test", "CMD")
    paths = [arg for arg in json.loads(cmd) if arg.startswith("tests/")]
    assert len(paths) == 5
    for path in paths:
        assert (ROOT / path).is_file(), path
