"""Developer and CI sessions. `nox` with no arguments runs what CI runs: lint, typecheck, tests, then the demo.

Every session installs MapSmith from this checkout into a fresh virtual environment, so a
dependency that is not declared in pyproject.toml fails here as it would for a user.
"""

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "demo"]
nox.options.reuse_existing_virtualenvs = False
PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite on the core and the opensource stack (stack detection included)."""
    session.install(".[test]")
    session.run("pytest", "-q", *session.posargs)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README's worked example, through a real MCP client over stdio, on data it builds."""
    session.install(".[raster]")
    session.run("mapsmith", "example")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint and format check, configured in pyproject.toml."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy on the core package, configured in pyproject.toml."""
    session.install(".", "mypy")
    session.run("mypy")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: measure, then write docs/benchmarks.md from the results."""
    session.install(".[raster,whitebox]")
    session.run("python", "benchmarks/bench_startup.py")
    session.run("python", "benchmarks/bench_vector.py", *session.posargs)
    session.run("python", "benchmarks/bench_zonal.py")
    session.run("python", "benchmarks/bench_terrain.py")
    session.run("python", "benchmarks/render.py")
