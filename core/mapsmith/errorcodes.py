"""Every error, finding and warning code MapSmith can send, found in its source: ``docs/errors.md``.

The page is generated, never written by hand: ``python -m mapsmith.errorcodes --write docs/errors.md``.
The scan reads the source of the core and of the built-in stacks with ``ast`` (it imports none of
them, so no engine is loaded) and collects:

* every ``code="X"`` keyword in a call (``raise SomeError(..., code="X")``, ``Finding(code="X", ...)``),
  including both literal branches of ``code="X" if ... else "Y"`` and the literal values of a
  module-level table subscripted as ``code=TABLE[key]``;
* the default ``code`` of every ``MapSmithError`` subclass, and the sites that raise it without one;
* ``Finding("X", ...)`` and warnings (``ctx.warn("X", ...)``, ``RunWarning("X", ...)``);
* the plan finding codes and their meanings from ``mapsmith.plans.findings.FINDING_CODES`` (and any other
  module-level ``*_FINDING_CODES`` table, such as execute's), read as literals too.

A ``code=`` whose value is computed at run time cannot be read here; the modules holding such sites are
named on the page, so the page never claims to be more complete than the scan. The scan must never
execute the code it reads.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT_ERROR = "MapSmithError"
FINDING_CLASS = "Finding"
WARNING_CALLS = ("warn", "RunWarning")
# The packages scanned: the core and the stacks that ship with it (pyproject's wheel packages).
PACKAGES = ("mapsmith", "mapsmith_opensource", "mapsmith_sedona", "mapsmith_qgis", "mapsmith_esri")
CODE = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]{4,}")
VARIES = "varies"
RELABELLED = "(code set after construction)"


@dataclass
class Site:
    """One place a code is produced: the class (or function) that carries it, the module, its hint."""

    code: str
    kind: str  # "error" | "finding" | "warning"
    carrier: str
    module: str
    hint: str | None  # None when the hint is absent or not a literal string


@dataclass
class CodeEntry:
    code: str
    kinds: set[str] = field(default_factory=set)
    carriers: set[str] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)
    hints: list[str | None] = field(default_factory=list)
    meaning: str | None = None

    @property
    def hint(self) -> str:
        """The hint when every site gives the same literal one; "varies" otherwise; "" with no site."""
        if not self.hints:
            return ""
        distinct = set(self.hints)
        if len(distinct) == 1 and None not in distinct:
            return self.hints[0] or ""
        return VARIES


@dataclass
class Scan:
    entries: dict[str, CodeEntry]
    dynamic_modules: set[str]  # modules with a code= computed at run time


# -- reading the source ---------------------------------------------------------------------------


def package_dirs() -> list[tuple[str, Path]]:
    """(package name, its folder) for every package in ``PACKAGES`` found on this interpreter's path,
    located without importing it."""
    out: list[tuple[str, Path]] = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            out.extend((name, Path(loc)) for loc in spec.submodule_search_locations)
    return out


def _modules(packages: Iterable[tuple[str, Path]]) -> Iterator[tuple[str, ast.Module]]:
    for name, folder in packages:
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            module = ".".join((name, *parts))
            if module == __name__ or module == "mapsmith.errorcodes":
                continue  # this scanner names codes in its own docstrings and tests of them; it raises none
            yield module, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _name(node: ast.AST) -> str | None:
    """``Foo`` for ``Foo`` and ``x.y.Foo``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _literal_text(node: ast.AST | None) -> str | None:
    """The string a node always evaluates to (a constant, or constants joined with +), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_text(node.left), _literal_text(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _class_codes(trees: list[tuple[str, ast.Module]]) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """The MapSmithError subclasses: name -> default code (inherited when not set), and
    name -> (module, first docstring line) for those that set their own code."""
    bases: dict[str, list[str]] = {}
    own: dict[str, str] = {}
    defined: dict[str, tuple[str, str]] = {}
    for module, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases[node.name] = [b for b in (_name(base) for base in node.bases) if b]
            for item in node.body:
                target: ast.AST | None = None
                value: ast.AST | None = None
                if isinstance(item, ast.Assign) and len(item.targets) == 1:
                    target, value = item.targets[0], item.value
                elif isinstance(item, ast.AnnAssign):
                    target, value = item.target, item.value
                text = _literal_text(value)
                if isinstance(target, ast.Name) and target.id == "code" and text is not None:
                    own[node.name] = text
                    doc = ast.get_docstring(node) or ""
                    defined[node.name] = (module, doc.strip().splitlines()[0] if doc.strip() else "")

    def is_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == ROOT_ERROR:
            return True
        return name not in seen and any(is_error(b, seen | {name}) for b in bases.get(name, []))

    def default(name: str, seen: frozenset[str] = frozenset()) -> str | None:
        if name in own:
            return own[name]
        for b in bases.get(name, []):
            if b not in seen and (code := default(b, seen | {name})) is not None:
                return code
        return None

    codes = {}
    for name in bases:
        if is_error(name) and (code := default(name)) is not None:
            codes[name] = code
    return codes, {n: d for n, d in defined.items() if n in codes}


def _tables(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level dicts whose values are all string constants (annotated or not): name -> those values."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target: ast.expr = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name):
            value = node.value
            if isinstance(value, ast.Dict) and value.values:
                texts = [_literal_text(v) for v in value.values]
                if all(t is not None for t in texts):
                    out[target.id] = [t for t in texts if t is not None]
    return out


def _codes_in(node: ast.AST, tables: dict[str, list[str]]) -> list[str] | None:
    """The codes a ``code=`` value can take, or None when it is computed at run time."""
    text = _literal_text(node)
    if text is not None:
        return [text]
    if isinstance(node, ast.IfExp):
        branches = [_literal_text(node.body), _literal_text(node.orelse)]
        literal = [b for b in branches if b is not None]
        return literal or None  # a computed branch leaves the other one still worth listing
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in tables:
        return tables[node.value.id]
    return None


@dataclass(frozen=True)
class Signature:
    """Where a callable takes its code and hint, and what it builds: an error class, a Finding, a
    warning, or a module's own helper that passes its ``code`` parameter on to one of those."""

    code_index: int | None
    hint_index: int | None
    carrier: str
    kind: str


KNOWN_SIGNATURES = {
    FINDING_CLASS: Signature(0, 2, FINDING_CLASS, "finding"),  # Finding(code, message, hint, ...)
    **{name: Signature(0, 2, name, "warning") for name in WARNING_CALLS},  # warn(code, message, hint)
}


def _kind_of(carrier: str) -> str:
    return "finding" if carrier == FINDING_CLASS else "warning" if carrier in WARNING_CALLS else "error"


def _helpers(tree: ast.Module) -> dict[str, tuple[Signature, list[str]]]:
    """Functions of one module with a ``code`` parameter: their signature (the carrier is what they
    build with that code) and the literal default of ``code``, if any."""
    out = {}
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        positional = [*func.args.posonlyargs, *func.args.args]
        names = [a.arg for a in positional]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        if "code" not in names and "code" not in [a.arg for a in func.args.kwonlyargs]:
            continue
        carrier = None
        for call in ast.walk(func):
            if isinstance(call, ast.Call):
                passed = [k.value for k in call.keywords if k.arg == "code"] + call.args[:1]
                if any(isinstance(v, ast.Name) and v.id == "code" for v in passed):
                    carrier = _name(call.func)
                    break
        if carrier is None:  # it only reads a code (compares it, looks it up): not a place codes come from
            continue
        signature = Signature(
            names.index("code") if "code" in names else None,
            names.index("hint") if "hint" in names else None,
            carrier,
            _kind_of(carrier),
        )
        out[func.name] = (signature, _default_codes(func))
    return out


def _default_codes(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The literal default of a ``code`` parameter: a helper that builds errors with a default code."""
    positional = [*func.args.posonlyargs, *func.args.args]
    pairs = list(zip(positional[len(positional) - len(func.args.defaults) :], func.args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True) if d is not None]
    texts = [_literal_text(default) for arg, default in pairs if arg.arg == "code"]
    return [t for t in texts if t is not None and CODE.fullmatch(t)]


def _argument(call: ast.Call, keyword: str, index: int | None) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == keyword:
            return k.value
    if index is not None and len(call.args) > index and not isinstance(call.args[index], ast.Starred):
        return call.args[index]
    return None


def scan(packages: Iterable[tuple[str, Path]] | None = None) -> Scan:
    """Every code found in the source of ``packages`` (default: ``package_dirs()``)."""
    trees = list(_modules(package_dirs() if packages is None else packages))
    class_codes, defined = _class_codes(trees)
    sites: list[Site] = []
    dynamic: set[str] = set()
    for module, tree in trees:
        tables = _tables(tree)
        helpers = _helpers(tree)
        for signature, defaults in helpers.values():
            sites.extend(Site(code, signature.kind, signature.carrier, module, None) for code in defaults)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "code" for t in node.targets
            ):  # ``finding.code = "X"``: an error or finding re-labelled after it was built
                text = _literal_text(node.value)
                if text is not None and CODE.fullmatch(text):
                    sites.append(Site(text, "error", RELABELLED, module, None))
                continue
            if not isinstance(node, ast.Call):
                continue
            func = _name(node.func) or ""
            if func in class_codes:
                signature = Signature(None, None, func, "error")
            elif func in KNOWN_SIGNATURES:
                signature = KNOWN_SIGNATURES[func]
            elif func in helpers:
                signature = helpers[func][0]
            else:
                # Any other call given code="X" (a reply dict, a record): counted when X is a literal code.
                signature = Signature(None, None, func or "(computed)", "error")
            # Only calls that build a refusal can hide a code computed at run time; ``code=`` also
            # names CRS codes such as "EPSG:32610" in answers.
            refusal = signature.carrier != func or func in class_codes or any(k.arg == "hint" for k in node.keywords)
            code_node = _argument(node, "code", signature.code_index)
            hint = _literal_text(_argument(node, "hint", signature.hint_index))
            if code_node is None:
                if func not in class_codes:
                    continue
                found: list[str] | None = [class_codes[func]]  # raised with its class's default code
            else:
                found = _codes_in(code_node, tables)
                partial = found is None or isinstance(code_node, ast.IfExp) and len(found) < 2
                passed_on = isinstance(code_node, ast.Name) and code_node.id == "code"  # inside a helper
                if partial and not passed_on and (refusal or func in KNOWN_SIGNATURES):
                    dynamic.add(module)
            sites.extend(
                Site(code, signature.kind, signature.carrier, module, hint)
                for code in found or []
                if CODE.fullmatch(code)
            )
    entries: dict[str, CodeEntry] = {}

    def entry(code: str) -> CodeEntry:
        return entries.setdefault(code, CodeEntry(code))

    for site in sites:
        e = entry(site.code)
        e.kinds.add(site.kind)
        e.carriers.add(site.carrier)
        e.modules.add(site.module)
        e.hints.append(site.hint)
    for cls, (_module, doc) in defined.items():
        e = entry(class_codes[cls])
        e.kinds.add("error")
        e.carriers.add(cls)
        e.meaning = e.meaning or doc or None
    for code, meaning in finding_codes(trees).items():
        e = entry(code)
        e.kinds.add("finding")
        e.carriers.add(FINDING_CLASS)  # these tables list the codes plans report as findings
        e.meaning = meaning  # the plan's own wording wins: it is written for exactly this code
    return Scan(entries, dynamic)


def finding_codes(trees: Iterable[tuple[str, ast.Module]] | None = None) -> dict[str, str]:
    """Every plan finding code with its meaning: the module-level ``FINDING_CODES`` dict of
    ``mapsmith.plans.findings`` and any other ``*_FINDING_CODES`` dict (``EXECUTION_FINDING_CODES``),
    read from the source as literals, like every other code here."""
    out: dict[str, str] = {}
    for _module, tree in _modules(package_dirs()) if trees is None else trees:
        for node in tree.body:
            target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
            value = getattr(node, "value", None)
            if not (
                isinstance(target, ast.Name) and target.id.endswith("FINDING_CODES") and isinstance(value, ast.Dict)
            ):
                continue
            for key, meaning in zip(value.keys, value.values, strict=True):
                code, text = _literal_text(key), _literal_text(meaning)
                if code is not None and text is not None:
                    out[code] = text
    return out


# -- the page -------------------------------------------------------------------------------------


def _carrier(name: str) -> str:
    return name if name == RELABELLED else f"`{name}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(result: Scan | None = None) -> str:
    """``docs/errors.md``: the same source always gives the same bytes."""
    result = scan() if result is None else result
    entries = sorted(result.entries.values(), key=lambda e: e.code)
    errors = [e for e in entries if e.kinds - {"warning"}]
    warnings = [e for e in entries if e.kinds == {"warning"}]
    lines = [
        "# Error codes",
        "",
        "<!-- Generated by `python -m mapsmith.errorcodes --write docs/errors.md` from the source of "
        "core/ and plugins/; do not edit by hand. tests/docs/test_error_codes.py fails when it is stale. -->",
        "",
        "Every refusal MapSmith sends carries a stable `code` to branch on, a `message`, the `evidence` and a "
        "`hint`; `validate_plan` reports plan findings in the same shape, with the `step` and `argument` they "
        f"are about. These are the {len(errors)} codes found in the source, each with the classes that carry it "
        "(an error class, `Finding` for plan validation, or the helper that builds the error), the modules it is "
        "raised in (— when no site names it literally: a class default never raised bare, or a code computed at "
        f'run time), and its hint when every site gives the same literal one ("{VARIES}" when it depends on '
        "the case). Meanings come from the plan finding tables (`FINDING_CODES` in `mapsmith.plans.findings`) "
        "and from the error classes' docstrings.",
        "",
        "| code | meaning | carried by | raised in | hint |",
        "|---|---|---|---|---|",
    ]
    for e in errors:
        lines.append(
            f"| `{e.code}` | {_cell(e.meaning or '')} | {', '.join(_carrier(c) for c in sorted(e.carriers))} "
            f"| {', '.join(f'`{m}`' for m in sorted(e.modules)) or '—'} | {_cell(e.hint)} |"
        )
    lines += [
        "",
        "## Warnings",
        "",
        "A run that completes can still come back `ok_with_warnings`; each warning has a code, a message and a "
        f"hint. These are the {len(warnings)} warning codes found in the source.",
        "",
        "| code | raised in | hint |",
        "|---|---|---|",
    ]
    for e in warnings:
        lines.append(f"| `{e.code}` | {', '.join(f'`{m}`' for m in sorted(e.modules))} | {_cell(e.hint)} |")
    if result.dynamic_modules:
        lines += [
            "",
            "Some sites compute their code at run time, so their codes appear above only where another site "
            "or `FINDING_CODES` names them: " + ", ".join(f"`{m}`" for m in sorted(result.dynamic_modules)) + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mapsmith.errorcodes", description="Print (or write) docs/errors.md."
    )
    parser.add_argument("--write", type=Path, metavar="PATH", help="write the page to PATH instead of stdout")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
