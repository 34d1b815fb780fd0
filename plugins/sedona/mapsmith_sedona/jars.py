"""The Apache Sedona jars the Spark engine needs: pinned here, found in local caches, fetched on request.

The versions below are the one place they are pinned. They must work together: the shaded jar is
built for one Spark line and one Scala version (``4.0`` and ``2.13`` here), so pyspark must be of
that line, and geotools-wrapper must be the release Sedona names for its version. Sedona 1.9.x has
no jar for Spark 4.1 on the Maven Central this project reaches (its newest shaded jar for Spark 4 is
1.8.0, for Spark 4.0), and the 4.0 jar fails on Spark 4.1 (NoClassDefFoundError
``FoldableUnevaluable``), hence pyspark 4.0 and Sedona 1.8.0 together.

Finding the jars never downloads anything: a server must not stall on the network while it answers.
``python -m mapsmith_sedona.jars fetch`` downloads them once with Maven into the local Maven
repository (``~/.m2/repository``), where they are found afterwards; ``MAPSMITH_SEDONA_JARS`` (paths
separated by commas) overrides the search for clusters that ship jars their own way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SEDONA_VERSION = "1.8.0"
SPARK_LINE = "4.0"  # the Spark major.minor the shaded jar is built for; pyspark must match
PYSPARK_REQUIREMENT = "pyspark>=4.0,<4.1"
SCALA_VERSION = "2.13"
GEOTOOLS_WRAPPER_VERSION = "1.8.0-33.1"  # geotools-wrapper release paired with Sedona 1.8.0
JARS_ENV = "MAPSMITH_SEDONA_JARS"
MAVEN_REPO_ENV = "MAPSMITH_MAVEN_REPO"
FETCH_COMMAND = "python -m mapsmith_sedona.jars fetch"
FETCH_TIMEOUT_S = 600


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def maven_path(self, repo: Path) -> Path:
        return repo.joinpath(*self.group.split("."), self.artifact, self.version, self.file_name)

    def ivy_name(self) -> str:
        """The name Spark's ``spark.jars.packages`` (Ivy) gives the jar in its cache's ``jars`` folder."""
        return f"{self.group}_{self.artifact}-{self.version}.jar"


ARTIFACTS = (
    Artifact("org.apache.sedona", f"sedona-spark-shaded-{SPARK_LINE}_{SCALA_VERSION}", SEDONA_VERSION),
    Artifact("org.datasyslab", "geotools-wrapper", GEOTOOLS_WRAPPER_VERSION),
)


def maven_repo(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    configured = env.get(MAVEN_REPO_ENV, "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".m2" / "repository"


def _ivy_dirs() -> list[Path]:
    home = Path.home()
    return [home / ".ivy2.5.2" / "jars", home / ".ivy2" / "jars"]


def find_jars(environ: Mapping[str, str] | None = None) -> tuple[list[str] | None, str | None]:
    """``(jar paths, None)`` when every pinned jar is on this machine, else ``(None, why not)``."""
    env = os.environ if environ is None else environ
    configured = env.get(JARS_ENV, "").strip()
    if configured:
        paths = [p.strip() for p in configured.split(",") if p.strip()]
        absent = [p for p in paths if not os.path.isfile(p)]
        if absent:
            return None, f"{JARS_ENV} names jars that do not exist: {', '.join(absent)}"
        return paths, None
    repo = maven_repo(env)
    found: list[str] = []
    missing: list[str] = []
    for artifact in ARTIFACTS:
        candidates = [artifact.maven_path(repo)] + [d / artifact.ivy_name() for d in _ivy_dirs()]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is None:
            missing.append(artifact.coordinate)
        else:
            found.append(str(hit))
    if missing:
        return (
            None,
            f"Sedona jars not in the local Maven repository ({repo}) or Spark's Ivy cache: {', '.join(missing)}",
        )
    return found, None


def fetch(environ: Mapping[str, str] | None = None) -> list[str]:
    """Download the pinned jars with Maven (``mvn dependency:get``) into the local repository."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("mvn is not on PATH: install Maven (apt-get install -y maven), or set MAPSMITH_SEDONA_JARS")
    repo = maven_repo(environ)
    for artifact in ARTIFACTS:
        if artifact.maven_path(repo).is_file():
            continue
        argv = [mvn, "-q", "-B", "dependency:get", f"-Dartifact={artifact.coordinate}", "-Dtransitive=false"]
        argv.append(f"-Dmaven.repo.local={repo}")
        done = subprocess.run(argv, timeout=FETCH_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise SystemExit(f"mvn could not fetch {artifact.coordinate} (exit status {done.returncode})")
    jars, problem = find_jars(environ)
    if jars is None:
        raise SystemExit(problem)
    return jars


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mapsmith_sedona.jars", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["fetch", "show"], help="fetch: download with Maven; show: print paths")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        for jar in fetch():
            print(jar)
        return 0
    jars, problem = find_jars()
    if jars is None:
        print(f"{problem}; fix: {FETCH_COMMAND}", file=sys.stderr)
        return 1
    print("\n".join(jars))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
