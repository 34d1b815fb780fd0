"""The value-expression parser behind calculate_field: precedence, types and what it never accepts.

It parses text into a tree and evaluates the tree; nothing reaches eval. Expected values are
worked by hand in the comments.
"""

from __future__ import annotations

import pandas as pd
import pytest

from mapsmith import calculations
from mapsmith.expressions import MAX_NESTING, ExpressionError


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"a": [1, 2], "b": [0.5, None], "name": ["x", "y"], "ok": [True, False]})


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("a + b * 2", "(a + (b * 2))"),  # * before +
        ("(a + b) * 2", "((a + b) * 2)"),
        ("a - b - 1", "((a - b) - 1)"),  # left to right
        ("-a * 2", "((-a) * 2)"),  # unary minus binds tightest
        ("name || 'z' || name", "((name || 'z') || name)"),
        ('"my field" / 2', '("my field" / 2)'),
        ("round($area / 10000, 2)", "round(($area / 10000), 2)"),
    ],
)
def test_precedence_is_recorded_in_the_canonical_form(text: str, canonical: str) -> None:
    assert calculations.parse(text).canonical() == canonical


def test_values_follow_the_tree_and_nulls_propagate() -> None:
    frame = _frame()
    # a + b * 2: 1 + 0.5 * 2 = 2.0; row 2 reads b = NULL, so NULL
    result = calculations.evaluate(calculations.parse("a + b * 2"), frame, {})
    assert result.kind == "real"
    assert result.values[0] == 2.0 and bool(result.missing[1])
    assert result.null_reasons == {"a field it reads is NULL": 1}
    # a * 3 - 1 stays integer: 2, 5
    result = calculations.evaluate(calculations.parse("a * 3 - 1"), frame, {})
    assert result.kind == "integer" and list(result.values) == [2.0, 5.0]
    # measures come from the caller, per row: $length / 1000 with 1500 m and no geometry
    result = calculations.evaluate(calculations.parse("$length / 1000"), frame, {"length": [1500.0, None]})
    assert result.values[0] == 1.5 and result.null_reasons == {
        "the feature has no geometry (or it has no such measure)": 1
    }


def test_round_is_half_away_from_zero() -> None:
    # 2.5 -> 3 and -2.5 -> -3 (numpy's own round gives 2 and -2)
    frame = pd.DataFrame({"v": [2.5, -2.5, 0.125]})
    result = calculations.evaluate(calculations.parse("round(v)"), frame, {})
    assert list(result.values) == [3.0, -3.0, 0.0]
    result = calculations.evaluate(calculations.parse("round(v, 2)"), frame, {})
    assert list(result.values)[2] == 0.13  # 0.125 is exact in binary: 12.5 -> 13


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("__import__('os').system('x')", "EXPRESSION_SYNTAX"),  # not a function here
        ("a.real", "EXPRESSION_SYNTAX"),  # no attribute access
        ("a ** 2", "EXPRESSION_SYNTAX"),
        ("a > 1", "EXPRESSION_SYNTAX"),  # a condition is not a value
        ("round(a, b)", "EXPRESSION_SYNTAX"),  # digits must be written in the text
        ("abs(a, 1)", "EXPRESSION_SYNTAX"),
        ("$volume", "EXPRESSION_SYNTAX"),
        ("", "EXPRESSION_SYNTAX"),
        ("(" * (MAX_NESTING + 1) + "a" + ")" * (MAX_NESTING + 1), "EXPRESSION_TOO_COMPLEX"),
    ],
)
def test_text_outside_the_language_is_refused(text: str, code: str) -> None:
    with pytest.raises(ExpressionError) as info:
        calculations.parse(text)
    assert info.value.code == code


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("name + 1", "EXPRESSION_TYPE_MISMATCH"),
        ("a || 'x'", "EXPRESSION_TYPE_MISMATCH"),
        ("ok * 2", "EXPRESSION_TYPE_MISMATCH"),  # true/false is not a number
        ("nmae || 'x'", "FIELD_NOT_FOUND"),
    ],
)
def test_binding_refuses_unknown_fields_and_mixed_types(text: str, code: str) -> None:
    with pytest.raises(ExpressionError) as info:
        calculations.bind(calculations.parse(text), calculations.field_kinds(_frame()))
    assert info.value.code == code
    # the clean twin: the same shape on the right types binds
    twin = {"name + 1": "a + 1", "a || 'x'": "name || 'x'", "ok * 2": "a * 2", "nmae || 'x'": "name || 'x'"}[text]
    calculations.bind(calculations.parse(twin), calculations.field_kinds(_frame()))
