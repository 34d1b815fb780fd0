"""Find a plugin and what it ships, without running any of its code: for ``plugin check`` and ``propose_operation``.

A plugin is a source folder with a ``pyproject.toml`` naming one ``mapsmith`` entry point, a plain folder (contract
TOMLs beside one Python module), or an installed distribution found by its entry point or distribution name. Its
example data and expected answers live in ``examples/`` (``examples/expected.toml``).

This module must never import or execute the plugin's code: it reads file names and TOML only.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from mapsmith.errors import MapSmithError

EXPECTED_FILE = "expected.toml"
EXAMPLES_DIR = "examples"


@dataclass
class PluginSource:
    """Where a plugin is and how the sandbox imports it; found without running any of its code."""

    target: str
    module: str
    attribute: str | None
    folder: Path  # the package (or plain) folder: its files are bound read-only
    import_root: Path | None  # put on PYTHONPATH; None for an installed distribution
    contracts: list[Path]
    examples: Path | None
    expected: Path | None
    entry_point: str | None = None
    distribution: str | None = None
    version: str | None = None
    name: str = ""

    @property
    def code_path(self) -> Path:
        """What the plugin's code digest covers: its package folder, or the one module of a plain folder
        (``maturity.package_of`` finds the same in the running process)."""
        if self.import_root == self.folder and (self.folder / f"{self.module}.py").is_file():
            return self.folder / f"{self.module}.py"
        return self.folder

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "module": self.module,
            "entry_point": self.entry_point,
            "distribution": self.distribution,
            "version": self.version,
            "contracts": [p.name for p in self.contracts],
            "examples": str(self.examples.relative_to(self.folder)) if self.examples else None,
        }


class NotAPlugin(MapSmithError, ValueError):
    code = "PLUGIN_NOT_FOUND"


def _contract_files(folder: Path, recursive: bool) -> list[Path]:
    pattern = "**/*.toml" if recursive else "*.toml"
    return sorted(
        p
        for p in folder.glob(pattern)
        if p.name not in (EXPECTED_FILE, "pyproject.toml") and EXAMPLES_DIR not in p.relative_to(folder).parts[:-1]
    )


def _examples_of(folder: Path) -> tuple[Path | None, Path | None]:
    examples = folder / EXAMPLES_DIR if (folder / EXAMPLES_DIR).is_dir() else None
    if (folder / EXAMPLES_DIR).is_symlink():
        examples = folder / EXAMPLES_DIR
    links = (
        sorted(str(p.relative_to(folder)) for p in [examples, *examples.rglob("*")] if p.is_symlink())
        if examples
        else []
    )
    if links:
        # The example data is copied into each run's workspace by this process: a link would copy whatever
        # it points at on the host (a key, /etc/shadow) to where the plugin's code can read it.
        raise NotAPlugin(
            f"the example data holds symbolic links: {', '.join(links[:5])}",
            evidence={"links": links[:20]},
            hint="ship the data files themselves in examples/, not links to them",
        )
    for candidate in ([examples / EXPECTED_FILE] if examples else []) + [folder / EXPECTED_FILE]:
        if candidate.is_file():
            return examples, candidate
    return examples, None


def _from_pyproject(root: Path, target: str) -> PluginSource:
    data = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    project = data.get("project", {})
    points = project.get("entry-points", {}).get("mapsmith", {})
    if len(points) != 1:
        raise NotAPlugin(
            f"{target}: pyproject.toml declares {len(points)} entry points in the group 'mapsmith'",
            evidence={"entry_points": sorted(points)},
            hint='declare exactly one: [project.entry-points.mapsmith] myplugin = "my_package"',
        )
    ((name, value),) = points.items()
    module, _, attribute = str(value).partition(":")
    import_root = root / "src" if (root / "src" / module.split(".")[0]).is_dir() else root
    package = import_root / module.split(".")[0]
    folder = package if package.is_dir() else import_root
    examples, expected = _examples_of(folder)
    return PluginSource(
        target=target,
        module=module,
        attribute=attribute or None,
        folder=folder,
        import_root=import_root,
        contracts=_contract_files(folder, recursive=True),
        examples=examples,
        expected=expected,
        distribution=project.get("name"),
        version=project.get("version"),
        name=name,
    )


def _plain_folder(root: Path, target: str) -> PluginSource:
    modules = sorted(p for p in root.glob("*.py") if not p.name.startswith(("test_", "_")))
    if len(modules) != 1:
        raise NotAPlugin(
            f"{target} holds {len(modules)} Python modules; a plain plugin folder holds exactly one",
            evidence={"modules": [p.name for p in modules]},
            hint="keep one module (tests as test_*.py), or add a pyproject.toml naming the entry point",
        )
    examples, expected = _examples_of(root)
    return PluginSource(
        target=target,
        module=modules[0].stem,
        attribute=None,
        folder=root,
        import_root=root,
        contracts=_contract_files(root, recursive=False),
        examples=examples,
        expected=expected,
        name=modules[0].stem,
    )


def _installed(target: str) -> PluginSource:
    for ep in metadata.entry_points(group="mapsmith"):
        dist = ep.dist
        if target not in (ep.name, dist.name if dist else None, (dist.name if dist else "").replace("-", "_")):
            continue
        module, _, attribute = ep.value.partition(":")
        top = module.split(".")[0]
        files = [f for f in (dist.files or []) if f.parts and f.parts[0] == top] if dist else []
        if not files:
            break
        folder = Path(str(files[0].locate())).resolve().parents[len(files[0].parts) - 2]
        examples, expected = _examples_of(folder)
        return PluginSource(
            target=target,
            module=module,
            attribute=attribute or None,
            folder=folder,
            import_root=None,
            contracts=_contract_files(folder, recursive=True),
            examples=examples,
            expected=expected,
            entry_point=ep.name,
            distribution=dist.name if dist else None,
            version=dist.version if dist else None,
            name=ep.name,
        )
    raise NotAPlugin(
        f"{target!r} is neither a folder nor an installed plugin (entry point or distribution name)",
        evidence={"target": target},
        hint="pass the plugin's source folder, or install it and pass its distribution name; "
        "`mapsmith info` lists installed plugins",
    )


def locate(target: str | os.PathLike[str]) -> PluginSource:
    """The plugin ``target`` names: a folder with a pyproject.toml, a plain folder, or an installed plugin."""
    path = Path(target)
    if path.is_dir():
        root = path.resolve()
        return (
            _from_pyproject(root, str(target))
            if (root / "pyproject.toml").is_file()
            else _plain_folder(root, str(target))
        )
    if path.exists():
        raise NotAPlugin(
            f"{target} is a file; a plugin is a folder",
            evidence={"target": str(target)},
            hint="pass the folder holding the module and its contract TOML",
        )
    return _installed(str(target))
