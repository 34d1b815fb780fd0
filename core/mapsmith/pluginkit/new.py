"""``mapsmith plugin new NAME``: write a working operation plugin package from the template in ``template/``.

The package passes ``mapsmith plugin check`` and its own tests as generated: one operation (flag lines at
least ``min_length_meters`` long) with its contract, example data, hand-worked answers and a bad input. The
template files are text with ``string.Template`` placeholders (``.tmpl``), so neither pytest nor ruff reads
them as code here. The package is written into a temporary sibling folder and renamed into place, so a
failure leaves nothing half-written.

This module must never overwrite an existing folder, and never write a template that imports anything of
``mapsmith`` but ``mapsmith.api``.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mapsmith.errors import MapSmithError

TEMPLATE = Path(__file__).resolve().parent / "template"
NAME = re.compile(r"^[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*$")
PREFIXES = ("mapsmith-plugin-", "mapsmith_plugin_")


@dataclass(frozen=True)
class Names:
    """Every name the template needs, derived from the one the author gave."""

    slug: str  # demo_roads
    distribution: str  # mapsmith-plugin-demo-roads
    package: str  # mapsmith_plugin_demo_roads
    entry_point: str  # demo_roads
    operation: str  # demo_roads_flag_long_lines

    def mapping(self) -> dict[str, str]:
        return {
            "distribution": self.distribution,
            "package": self.package,
            "entry_point": self.entry_point,
            "operation": self.operation,
        }


def names_for(name: str, operation: str | None = None) -> Names:
    raw = name.strip().lower()
    for prefix in PREFIXES:
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
    if not NAME.match(raw):
        raise MapSmithError(
            f"{name!r} is not a plugin name: lower-case letters, digits, '-' or '_', starting with a letter",
            code="PLUGIN_NAME_INVALID",
            evidence={"name": name},
            hint="pass a name such as roads or my-roads; the package becomes mapsmith_plugin_<name>",
        )
    slug = raw.replace("-", "_")
    op = operation or f"{slug}_flag_long_lines"
    if not re.match(r"^[a-z][a-z0-9_]*$", op):
        raise MapSmithError(
            f"{op!r} is not an operation name: lower-case letters, digits and '_', starting with a letter",
            code="PLUGIN_NAME_INVALID",
            evidence={"operation": op},
            hint="pass --operation like flag_long_roads (the contract schema's pattern)",
        )
    return Names(slug, f"mapsmith-plugin-{slug.replace('_', '-')}", f"mapsmith_plugin_{slug}", slug, op)


def _target_of(relative: Path, names: Names) -> Path:
    """Where one template file goes in the package (``.tmpl`` dropped, placeholders in the path filled)."""
    parts = list(relative.parts)
    if parts[0] == "package":
        parts[0] = names.package
    if parts[-1] == "contract.toml.tmpl":
        parts[-1] = f"{names.operation}.toml"
    elif parts[-1] == "test_operation.py.tmpl":
        parts[-1] = f"test_{names.operation}.py"
    elif parts[-1].endswith(".tmpl"):
        parts[-1] = parts[-1][: -len(".tmpl")]
    return Path(*parts)


def create(name: str, directory: Path | None = None, operation: str | None = None) -> Path:
    """Write the package for ``name`` into ``directory`` (the current one by default); return its folder."""
    names = names_for(name, operation)
    parent = Path(directory or Path.cwd()).resolve()
    target = parent / names.distribution
    if target.exists():
        raise MapSmithError(
            f"{target.name} already exists in {parent}; plugin new never overwrites",
            code="PLUGIN_DIR_EXISTS",
            evidence={"folder": target.name},
            hint="choose another name or --dir, or remove the folder yourself",
        )
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{names.distribution}-", dir=parent))
    try:
        for source in sorted(p for p in TEMPLATE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            relative = source.relative_to(TEMPLATE)
            out = staging / _target_of(relative, names)
            out.parent.mkdir(parents=True, exist_ok=True)
            text = source.read_text("utf-8")
            if source.suffix == ".tmpl":
                text = string.Template(text).substitute(names.mapping())
            out.write_text(text, "utf-8")
        os.chmod(staging, 0o755)  # mkdtemp makes it private; a package folder is not
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def main(argv: list[str]) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="mapsmith plugin new", description="Write a working operation plugin.")
    parser.add_argument("name", help="the plugin's name (roads → mapsmith-plugin-roads, package mapsmith_plugin_roads)")
    parser.add_argument("--dir", type=Path, help="the folder to create it in (default: the current folder)")
    parser.add_argument("--operation", help="the operation's name (default: <name>_flag_long_lines)")
    args = parser.parse_args(argv)
    try:
        folder = create(args.name, args.dir, args.operation)
    except MapSmithError as exc:
        print(f"mapsmith plugin new: {exc}", file=sys.stderr)
        return 2
    names = names_for(args.name, args.operation)
    print(f"wrote {folder}")
    print(f"  operation {names.operation}, package {names.package}, entry point {names.entry_point}")
    print(f"next: cd {folder.name} && pip install -e '.[test]' && pytest && mapsmith plugin check .")
    return 0
