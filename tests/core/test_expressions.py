"""The attribute-expression language: hand-counted selections, SQL's NULL logic, refusals with positions.

Every expected selection below is counted by hand from the six-row table in ``TABLE`` before the
code ran; the comment beside each case says which rows meet it and why.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mapsmith import expressions
from mapsmith.errors import ArgumentError
from mapsmith.expressions import ExpressionError

# id | name     | value | code     | landuse     | owner | flag  | parcel area
#  1 | Alpha    | 10.0  | 310101   | residential | Li    | True  | 100
#  2 | beta     | 20.0  | 310102   | mixed       | NULL  | False | 250
#  3 | Gamma    | NULL  | 310201   | industrial  | Wang  | True  | 400
#  4 | delta    | 35.5  | 320101   | residential | Zhao  | False | 50
#  5 | NULL     |  5.0  | 310103   | park        | NULL  | True  | 1000
#  6 | O'Neil   | 20.0  | 3101%1   | mixed       | Chen  | False | 250
TABLE = {
    "id": [1, 2, 3, 4, 5, 6],
    "name": ["Alpha", "beta", "Gamma", "delta", None, "O'Neil"],
    "value": [10.0, 20.0, None, 35.5, 5.0, 20.0],
    "code": ["310101", "310102", "310201", "320101", "310103", "3101%1"],
    "landuse": ["residential", "mixed", "industrial", "residential", "park", "mixed"],
    "owner": ["Li", None, "Wang", "Zhao", None, "Chen"],
    "flag": [True, False, True, False, True, False],
    "parcel area": [100, 250, 400, 50, 1000, 250],
}
MODULE = Path(__file__).resolve().parents[2] / "core" / "mapsmith" / "expressions.py"


@pytest.fixture
def table() -> pd.DataFrame:
    return pd.DataFrame(TABLE)


def selected(text: str, frame: pd.DataFrame) -> list[int]:
    truth = expressions.evaluate(expressions.parse(text), frame)
    return frame["id"][truth.true].tolist()


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        # 10 <= value < 30: rows 1 (10), 2 (20), 6 (20); row 3's value is NULL, row 4 is 35.5, row 5 is 5
        ("value >= 10 AND value < 30", [1, 2, 6]),
        # AND binds tighter than OR: park (5) OR (mixed AND value > 15: 2, 6)
        ("landuse = 'park' OR landuse = 'mixed' AND value > 15", [2, 5, 6]),
        # the parentheses change it: (park: 5, mixed: 2, 6) AND value > 15 drops 5 (value 5)
        ("(landuse = 'park' OR landuse = 'mixed') AND value > 15", [2, 6]),
        ("landuse IN ('residential', 'mixed')", [1, 2, 4, 6]),
        ("landuse NOT IN ('residential', 'mixed')", [3, 5]),
        ("owner IS NULL", [2, 5]),
        ("owner IS NOT NULL", [1, 3, 4, 6]),
        # both bounds are inside: 10 (row 1) and 20 (rows 2, 6)
        ("value BETWEEN 10 AND 20", [1, 2, 6]),
        # outside 10..20: 35.5 (row 4) and 5 (row 5); row 3 (NULL) is neither inside nor outside
        ("value NOT BETWEEN 10 AND 20", [4, 5]),
        # LIKE is case-sensitive: only 'Alpha' starts with a capital A
        ("name LIKE 'A%'", [1]),
        ("name LIKE '%a'", [1, 2, 3, 4]),
        # second letter e: beta, delta
        ("name LIKE '_e%'", [2, 4]),
        # names not ending in a: O'Neil only; row 5's name is NULL, so unknown
        ("name NOT LIKE '%a'", [6]),
        # '3101' + one or more characters + '1': 310101 and 3101%1 (310201 starts 3102)
        ("code LIKE '3101%1'", [1, 6]),
        # with an escape, the % is literal: only '3101%1'
        ("code LIKE '3101!%1' ESCAPE '!'", [6]),
        # a quote inside a string is doubled
        ("name = 'O''Neil'", [6]),
        # a field name with a space, in double quotes: 250 (2, 6), 400 (3), 1000 (5)
        ('"parcel area" >= 250', [2, 3, 5, 6]),
        ("flag", [1, 3, 5]),
        # NOT flag: 2, 4, 6; with an owner: 4 (Zhao), 6 (Chen)
        ("NOT flag AND owner IS NOT NULL", [4, 6]),
        # keywords in any case: 10..20 (1, 2, 6) and not flag (2, 4, 6)
        ("value between 10 and 20 and not flag", [2, 6]),
        # text orders character by character: 310101, 310102 and 3101%1 (% sorts before 0) precede 310103
        ("code < '310103'", [1, 2, 6]),
        ("id <> 3 AND id != 4 AND id > -1", [1, 2, 5, 6]),
        # field against field: parcel area > value everywhere both exist (row 3's value is NULL)
        ('"parcel area" > value', [1, 2, 4, 5, 6]),
    ],
)
def test_selections_match_the_hand_count(table: pd.DataFrame, text: str, ids: list[int]) -> None:
    assert selected(text, table) == ids


def test_null_follows_sql_three_valued_logic(table: pd.DataFrame) -> None:
    # Row 3 has value NULL, landuse 'industrial'.
    # NOT (value > 15): NULL -> NULL, not selected; a naive "not the selected rows" would take row 3.
    assert selected("NOT value > 15", table) == [1, 5]
    # NULL OR TRUE is TRUE: row 3 is selected through its landuse
    assert selected("value > 15 OR landuse = 'industrial'", table) == [2, 3, 4, 6]
    # NULL OR FALSE is NULL: row 3 is neither selected nor counted as failing
    truth = expressions.evaluate(expressions.parse("value > 15 OR landuse = 'park'"), table)
    assert table["id"][truth.true].tolist() == [2, 4, 5, 6]
    assert table["id"][truth.unknown].tolist() == [3]
    assert table["id"][truth.false].tolist() == [1]
    # NULL AND FALSE is FALSE
    truth = expressions.evaluate(expressions.parse("value > 15 AND landuse = 'park'"), table)
    assert truth.false.tolist() == [True, True, True, True, True, True]


def test_canonical_form_shows_the_precedence_read() -> None:
    parsed = expressions.parse("a = 1 OR b = 2 AND NOT c IS NULL")
    assert parsed.canonical() == "((a = 1) OR ((b = 2) AND (NOT (c IS NULL))))"
    assert expressions.parse("\"land use\" IN ('x', 'O''N') AND \"AND\" > 1.5").canonical() == (
        "((\"land use\" IN ('x', 'O''N')) AND (\"AND\" > 1.5))"
    )
    assert parsed.fields == ("a", "b", "c")


def test_dates_compare_with_typed_literals_only() -> None:
    frame = pd.DataFrame(
        {
            "id": [1, 2, 3],
            "when": pd.to_datetime(["2024-01-01", "2024-06-30", None]),
            "day": ["2024-01-01", "2024-06-30", None],
        }
    )
    # on or after 1 March 2024: row 2 only; row 3 is NULL
    assert selected("when >= DATE '2024-03-01'", frame) == [2]
    assert selected("when < TIMESTAMP '2024-06-30T00:00:01'", frame) == [1, 2]
    # a date stored as text (GeoPackage DATE columns read as text) compares as text: ISO orders correctly
    assert selected("day >= '2024-03-01'", frame) == [2]
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.parse("when >= '2024-03-01'"), frame)
    assert err.value.code == "EXPRESSION_TYPE_MISMATCH" and "DATE" in err.value.hint
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.parse("day >= DATE '2024-03-01'"), frame)
    assert err.value.code == "EXPRESSION_TYPE_MISMATCH" and "as text" in err.value.hint


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        # a text field compared with a number is refused, never coerced ('10' and 10 order differently)
        ("code = 310101", 0, "field 'code' is text and 310101 is a number"),
        ("value = '10'", 0, "field 'value' is a number and '10' is text"),
        ("id > 1 AND landuse IN ('park', 3)", 11, "cannot look for this value with IN"),
        ("value LIKE '1%'", 0, "LIKE matches text"),
        ("flag > FALSE", 0, "does not order true and false"),
        ("value", 0, "a condition must be true or false"),
        ("id = 1 OR name BETWEEN 1 AND 'z'", 10, "cannot use BETWEEN"),
    ],
)
def test_type_mismatches_are_refused_with_position(
    table: pd.DataFrame, text: str, position: int, fragment: str
) -> None:
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.parse(text), table)
    assert err.value.code == "EXPRESSION_TYPE_MISMATCH"
    assert err.value.evidence["position"] == position
    assert fragment in err.value.message
    assert err.value.hint


def test_an_unknown_field_names_the_close_one_and_lists_the_fields(table: pd.DataFrame) -> None:
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.parse("id = 1 AND Value > 3"), table)
    assert err.value.code == "FIELD_NOT_FOUND"
    assert err.value.evidence["position"] == 11
    assert err.value.evidence["did_you_mean"][0] == "value"
    assert err.value.evidence["fields"] == sorted(TABLE)
    assert "did you mean 'value'" in err.value.message
    # a double-quoted word is a field name, as in SQL, not a string
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.parse('name = "Alpha"'), table)
    assert err.value.code == "FIELD_NOT_FOUND" and err.value.evidence["field"] == "Alpha"


def test_a_reversed_between_is_refused_not_answered_empty(table: pd.DataFrame) -> None:
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.parse("value BETWEEN 20 AND 10"), table)
    assert err.value.code == "EXPRESSION_EMPTY_RANGE"


@pytest.mark.parametrize(
    ("text", "position"),
    [
        # Python: a call is refused at its '(' (position 10), whatever the name
        ("__import__('os')", 10),
        ("__import__('os').system('rm -rf /')", 10),
        ("eval('1')", 4),
        ("open('/etc/passwd')", 4),
        # attribute access
        ("a.__class__", 1),
        ("value.__class__.__bases__", 5),
        # SQL: a second statement, a comment
        ("1; DROP TABLE parcels", 1),
        ("value > 1; DROP TABLE parcels", 9),
        ("name = 'x' -- comment", 11),
        # other quoting and syntax
        ("`id` = 1", 0),
        ("[x for x in ()]", 0),
        ("{'a': 1}", 0),
        ("lambda: 1", 6),
        ("id == 1", 3),
        ("id = 1 | 1", 7),
        ("id = $1", 5),
        ("name = 'unclosed", 7),
        ("id = 1 id = 2", 7),
        ("", 0),
        ("id IN ()", 7),
        ("name = NULL", 7),
    ],
)
def test_injection_attempts_and_malformed_text_are_parse_errors_with_position(text: str, position: int) -> None:
    with pytest.raises(ExpressionError) as err:
        expressions.parse(text)
    assert err.value.code == "EXPRESSION_SYNTAX"
    assert err.value.evidence["position"] == position
    assert f"at position {position}" in err.value.message
    assert err.value.evidence["pointer"].endswith(" " * position + "^")
    assert isinstance(err.value, ArgumentError)  # an argument the caller can fix


def test_depth_and_length_are_bounded_before_the_parser_recurses() -> None:
    nested = "(" * 60 + "id = 1" + ")" * 60
    with pytest.raises(ExpressionError) as err:
        expressions.parse(nested)
    assert err.value.code == "EXPRESSION_TOO_COMPLEX"
    with pytest.raises(ExpressionError) as err:
        expressions.parse("NOT " * 60 + "flag")
    assert err.value.code == "EXPRESSION_TOO_COMPLEX"
    with pytest.raises(ExpressionError) as err:
        expressions.parse("id = 1 OR " * 2000 + "id = 2")
    assert err.value.code == "EXPRESSION_TOO_COMPLEX"
    # 40 levels is within bounds and means what it says
    assert expressions.parse("(" * 40 + "id = 1" + ")" * 40).canonical() == "(id = 1)"


def test_range_condition_is_built_as_a_tree_and_checked_like_text(table: pd.DataFrame) -> None:
    # value in 10..20: rows 1, 2, 6
    truth = expressions.evaluate(expressions.range_condition("value", 10, 20), table)
    assert table["id"][truth.true].tolist() == [1, 2, 6]
    # a field name that would be an injection in text is only ever a name here
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.range_condition("value); DROP TABLE x; --", 1, None), table)
    assert err.value.code == "FIELD_NOT_FOUND"
    with pytest.raises(ExpressionError) as err:
        expressions.evaluate(expressions.range_condition("code", None, 5), table)
    assert err.value.code == "EXPRESSION_TYPE_MISMATCH" and err.value.evidence["argument"] == "field"


def test_the_module_hands_no_text_to_an_evaluator() -> None:
    tree = ast.parse(MODULE.read_text("utf-8"))
    forbidden_builtins = {"eval", "exec", "compile", "__import__", "getattr", "setattr"}
    forbidden_methods = {"eval", "query", "execute", "sql"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                assert node.func.id not in forbidden_builtins, f"line {node.lineno}: {node.func.id}()"
            if isinstance(node.func, ast.Attribute):
                assert node.func.attr not in forbidden_methods, f"line {node.lineno}: .{node.func.attr}()"


def test_parsing_imports_no_engine() -> None:
    code = (
        "import json, sys\n"
        "from mapsmith import expressions\n"
        "expressions.parse(\"value >= 10 AND name LIKE 'A%'\")\n"
        "print(json.dumps(sorted(m for m in ('numpy', 'pandas', 'geopandas', 'shapely') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
