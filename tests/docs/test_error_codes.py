"""docs/errors.md is generated from the code, lists every code the scan finds, and the scan sees the code.

``mapsmith.errorcodes`` reads the source with ``ast``; these tests check the page against it, the scan
against an independent text search and against ``FINDING_CODES``, and the scanner's rules on a small
package written here, so a scan that found nothing (or missed a kind of site) cannot pass unnoticed.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from mapsmith import errorcodes

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "errors.md"
SCAN = errorcodes.scan()
LITERAL_CODE_KEYWORD = re.compile(r"""\bcode\s*=\s*["']([A-Z][A-Z0-9_]+)["']""")


def _rows(page: str) -> list[str]:
    return [line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `")]


def test_the_page_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == errorcodes.render_markdown(SCAN), (
        "docs/errors.md is out of date: python -m mapsmith.errorcodes --write docs/errors.md"
    )


def test_the_command_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert errorcodes.main(["--write", str(tmp_path / "errors.md")]) == 0
    assert (tmp_path / "errors.md").read_text(encoding="utf-8") == errorcodes.render_markdown()
    assert errorcodes.main([]) == 0
    assert capsys.readouterr().out == errorcodes.render_markdown()


def test_the_page_lists_every_code_the_scan_finds_once() -> None:
    rows = _rows(errorcodes.render_markdown(SCAN))
    assert sorted(rows) == sorted(SCAN.entries)
    assert len(rows) == len(set(rows))


@pytest.mark.parametrize(
    "code",
    [
        "GEOREF_CONFLICT",  # raster_io, raised with code=
        "CRS_REQUIRED",  # a class default (CRSRequired) and code= sites
        "FORWARD_REFERENCE",  # a plan finding
        "UNKNOWN_ARGUMENT",
        "PATH_OUTSIDE_WORKSPACE",
        "PLAN_REJECTED",  # the default code of a class defined outside errors.py
        "EXPRESSION_EMPTY_RANGE",  # code= passed to a helper that builds the error
        "KIND_MISMATCH",  # set on a finding after it was built
        "OPERATION_MISSING",  # a value of a module-level table used as code=TABLE[key]
        "SUBSTITUTED_ENGINE",  # a warning
    ],
)
def test_the_scan_sees_known_codes(code: str) -> None:
    # Guards the checks below: a scan that found nothing would pass them vacuously.
    assert code in SCAN.entries


def test_every_literal_code_keyword_in_the_source_is_found() -> None:
    # An independent search over the text: whatever the ast rules miss, this finds.
    found: dict[str, str] = {}
    for root in (REPO / "core", REPO / "plugins"):
        for path in sorted(root.rglob("*.py")):
            if path.name == "errorcodes.py":
                continue  # its docstrings show the pattern with a placeholder code
            for code in LITERAL_CODE_KEYWORD.findall(path.read_text(encoding="utf-8")):
                found.setdefault(code, str(path.relative_to(REPO)))
    assert len(found) > 100
    missing = {code: where for code, where in found.items() if code not in SCAN.entries}
    assert not missing, f"codes in the source that errorcodes.scan() misses: {missing}"


def test_every_plan_finding_code_is_listed_with_its_meaning() -> None:
    from mapsmith.plans.findings import FINDING_CODES

    assert errorcodes.finding_codes().items() >= FINDING_CODES.items()
    for code, meaning in FINDING_CODES.items():
        entry = SCAN.entries[code]
        assert entry.meaning == meaning and "finding" in entry.kinds
        assert "Finding" in entry.carriers


def test_codes_are_upper_snake_case() -> None:
    bad = [code for code in SCAN.entries if not re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*", code)]
    assert not bad


# -- the scanner's rules, on a package written here -------------------------------------------------

PACKAGE = {
    "errors.py": '''
        class MapSmithError(Exception):
            """Root."""
            code = "ROOT_ERROR"

        class InputError(MapSmithError, ValueError):
            """An input cannot be used."""
            code = "INPUT_INVALID"

        class NotAnError(ValueError):
            code = "NOT_A_MAPSMITH_CODE"
        ''',
    "ops.py": """
        from .errors import InputError, MapSmithError

        REASONS = {"a": "REASON_A", "b": "REASON_B"}
        TYPED: dict[str, str] = {"c": "TYPED_TABLE_CODE"}

        def read(path, why, exc):
            if path is None:
                raise InputError("missing", code="INPUT_MISSING", hint="pass a path")
            if why:
                raise MapSmithError("x", code=REASONS[why], hint="h")
            if exc:
                raise InputError("y", code="SIDE_A" if exc else "SIDE_B", hint="h")
            if path == "typed":
                raise InputError("z", code=TYPED[why], hint="h")
            raise InputError("bare")

        def again():
            raise InputError("missing again", code="INPUT_MISSING", hint="another hint")

        def answer():
            return dict(code="EPSG:4326", name="WGS 84")
        """,
    "helpers.py": """
        from .errors import InputError

        def refuse(message, hint, code="HELPER_DEFAULT"):
            return InputError(message, code=code, hint=hint)

        def fail():
            raise refuse("no", "do this", "HELPER_GIVEN")

        def dynamic(which):
            raise InputError("computed", code=which, hint="h")

        def warn_twice(ctx):
            ctx.warn("SOMETHING_ODD", "message", "look again")
        """,
    "findings.py": """
        class Finding:
            pass

        FINDING_CODES = {"PLAN_THING": "A thing about a plan.", "INPUT_MISSING": "No such input."}

        def check():
            return Finding("PLAN_THING", "message", "fix the plan")
        """,
}


@pytest.fixture
def package(tmp_path: Path) -> list[tuple[str, Path]]:
    folder = tmp_path / "fakepkg"
    folder.mkdir()
    (folder / "__init__.py").write_text("", encoding="utf-8")
    for name, text in PACKAGE.items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return [("fakepkg", folder)]


def test_scan_rules(package: list[tuple[str, Path]]) -> None:
    result = errorcodes.scan(package)
    e = result.entries
    assert set(e) == {
        "ROOT_ERROR",
        "INPUT_INVALID",
        "INPUT_MISSING",
        "REASON_A",
        "REASON_B",
        "TYPED_TABLE_CODE",
        "SIDE_A",
        "SIDE_B",
        "HELPER_DEFAULT",
        "HELPER_GIVEN",
        "SOMETHING_ODD",
        "PLAN_THING",
    }, "NOT_A_MAPSMITH_CODE is not a MapSmithError's; EPSG:4326 is not a code"
    assert e["INPUT_INVALID"].modules == {"fakepkg.ops"}, "raised bare: the class default"
    assert e["INPUT_INVALID"].meaning == "An input cannot be used."
    assert e["INPUT_MISSING"].hint == errorcodes.VARIES, "two sites, two hints"
    assert e["INPUT_MISSING"].meaning == "No such input.", "a finding table's meaning wins"
    assert e["REASON_A"].hint == "h" and e["REASON_A"].carriers == {"MapSmithError"}
    assert e["TYPED_TABLE_CODE"].carriers == {"InputError"}, "an annotated table is a table too"
    assert e["HELPER_GIVEN"].carriers == {"InputError"} and e["HELPER_GIVEN"].hint == "do this"
    assert e["HELPER_DEFAULT"].modules == {"fakepkg.helpers"}
    assert e["SOMETHING_ODD"].kinds == {"warning"} and e["SOMETHING_ODD"].hint == "look again"
    assert e["PLAN_THING"].kinds == {"finding"} and e["PLAN_THING"].meaning == "A thing about a plan."
    assert result.dynamic_modules == {"fakepkg.helpers"}, "code=which cannot be read"
    page = errorcodes.render_markdown(result)
    assert "| `SOMETHING_ODD` | `fakepkg.helpers` | look again |" in page
    assert "`fakepkg.helpers`." in page.splitlines()[-1]
