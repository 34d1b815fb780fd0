"""Value expressions for calculate_field: arithmetic over a feature's fields and its geometry's measures.

The language: numbers, text in single quotes, field names bare or in double quotes, the measures
``$area`` (m²), ``$length`` and ``$perimeter`` (m) and ``$x`` / ``$y`` (the point's coordinates in
the layer's CRS), ``+ - * /``, unary ``-``, ``||`` to join text, parentheses, and two functions:
``round(x)`` (to a whole number), ``round(x, n)`` and ``abs(x)``. A NULL anywhere in a row makes
that row's value NULL, as in SQL; so does a division by zero; each is counted with its reason.

It shares ``mapsmith.expressions``' pieces rather than copying them: string and quoted-name
scanning, number syntax, the ``ExpressionError`` with its position pointer, and the binder that
refuses an unknown field naming the close matches (``FIELD_NOT_FOUND``). Conditions stay there;
values are here, because a value language has arithmetic the condition language refuses on purpose.

Types are never converted: text and numbers do not mix (``+`` on text, ``||`` on a number are
refused with ``EXPRESSION_TYPE_MISMATCH``). The result type is inferred (integer when every operand
is an integer and only ``+ - *`` and ``round(x)`` are used; real otherwise; text for ``||``), and a
declared type is checked against the values (``FIELD_TYPE_MISMATCH``), never forced on them.

What this module must never do: hand any of the text to ``eval``, ``exec``, ``compile``,
``DataFrame.eval`` or SQL; call a function not named above; import numpy or pandas at module level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from mapsmith import expressions
from mapsmith.expressions import ExpressionError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["Calculation", "Result", "as_column", "bind", "evaluate", "field_kinds", "parse", "settle_type"]

MEASURES = ("area", "length", "perimeter", "x", "y")
FUNCTIONS = {"round": (1, 2), "abs": (1, 1)}  # name -> (fewest, most) arguments
FIELD_TYPES = ("integer", "real", "text")
# Rows named in a FIELD_TYPE_MISMATCH refusal.
ROWS_SHOWN = 10

_GRAMMAR_HINT = (
    "write a value such as: population / ($area / 1000000), or round(length_m / 1000, 2), or "
    "name || ' (' || code || ')'; text in single quotes, field names bare or in double quotes"
)


# -- the tree ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    value: int | float
    pos: int


@dataclass(frozen=True)
class Text:
    value: str
    pos: int


@dataclass(frozen=True)
class FieldRef:
    name: str
    pos: int


@dataclass(frozen=True)
class Measure:
    name: str
    pos: int


@dataclass(frozen=True)
class Negate:
    operand: Value
    pos: int


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / ||
    left: Value
    right: Value
    pos: int


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Value, ...]
    pos: int


Value: TypeAlias = Number | Text | FieldRef | Measure | Negate | Binary | Call


@dataclass(frozen=True)
class Calculation:
    root: Value
    text: str
    argument: str = "expression"

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.name for n in _walk(self.root) if isinstance(n, FieldRef)))

    @property
    def measures(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.name for n in _walk(self.root) if isinstance(n, Measure)))

    def canonical(self) -> str:
        """The expression as read: every operation parenthesised, so the precedence applied is visible."""
        return _render(self.root)


def _walk(node: Value) -> list[Value]:
    if isinstance(node, Negate):
        return [node, *_walk(node.operand)]
    if isinstance(node, Binary):
        return [node, *_walk(node.left), *_walk(node.right)]
    if isinstance(node, Call):
        return [node, *(n for a in node.args for n in _walk(a))]
    return [node]


# -- tokens and parsing -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Tok:
    kind: str  # number | string | name | quoted | measure | op | ( | ) | , | end
    value: Any
    pos: int


def _tokens(text: str, argument: str) -> list[_Tok]:
    out: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        start = i
        number = expressions._NUMBER.match(text, i) if ch in "0123456789." else None
        if number is not None:
            raw = number.group()
            i = number.end()
            if i < n and (text[i].isalnum() or text[i] == "_"):
                raise _syntax(text, argument, i, f"unexpected {text[i]!r} straight after the number {raw}")
            out.append(_Tok("number", int(raw) if not any(c in raw for c in ".eE") else float(raw), start))
        elif ch == "'":
            value, i = expressions._quoted(text, i, "'", argument)
            out.append(_Tok("string", value, start))
        elif ch == '"':
            value, i = expressions._quoted(text, i, '"', argument)
            if not value:
                raise _syntax(text, argument, start, "an empty quoted field name")
            out.append(_Tok("quoted", value, start))
        elif ch == "$":
            i += 1
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            name = text[start + 1 : i].lower()
            if name not in MEASURES:
                raise _syntax(
                    text,
                    argument,
                    start,
                    f"{text[start:i]!r} is not a measure; the measures are " + ", ".join("$" + m for m in MEASURES),
                )
            out.append(_Tok("measure", name, start))
        elif ch.isalpha() or ch == "_":
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            out.append(_Tok("name", text[start:i], start))
        elif text.startswith("||", i):
            out.append(_Tok("op", "||", start))
            i += 2
        elif ch in "+-*/":
            out.append(_Tok("op", ch, start))
            i += 1
        elif ch in "(),":
            out.append(_Tok(ch, ch, start))
            i += 1
        else:
            problem = (
                "a condition is not a value here (select_features takes conditions)"
                if ch in "=<>!"
                else f"the character {ch!r} is not part of the language"
            )
            raise _syntax(text, argument, i, f"unexpected {ch!r}: {problem}")
    out.append(_Tok("end", None, n))
    return out


def _syntax(text: str, argument: str, pos: int, problem: str, hint: str = _GRAMMAR_HINT) -> ExpressionError:
    return expressions._syntax(text, argument, pos, problem, hint)


def parse(text: str, *, argument: str = "expression") -> Calculation:
    """Parse a value expression, or raise ``ExpressionError`` (EXPRESSION_SYNTAX with the position,
    EXPRESSION_TOO_COMPLEX past the limits ``mapsmith.expressions`` sets)."""
    if not isinstance(text, str) or not text.strip():
        raise _syntax(str(text), argument, 0, "the expression is empty")
    if len(text) > expressions.MAX_EXPRESSION_CHARS:
        raise ExpressionError(
            f"{argument} is {len(text)} characters long; at most {expressions.MAX_EXPRESSION_CHARS} are read",
            code="EXPRESSION_TOO_COMPLEX",
            evidence={"argument": argument, "length": len(text), "position": expressions.MAX_EXPRESSION_CHARS},
            hint="calculate in several steps",
        )
    parser = _Parser(text, _tokens(text, argument), argument)
    root = parser.concat()
    end = parser.peek()
    if end.kind != "end":
        raise parser.error(end, "unexpected {found} after a complete value; join values with an operator")
    return Calculation(root, text, argument)


class _Parser:
    """Recursive descent; loosest to tightest: ||, + -, * /, unary -, primary."""

    def __init__(self, text: str, tokens: list[_Tok], argument: str) -> None:
        self.text, self.tokens, self.argument = text, tokens, argument
        self.i = 0
        self.depth = 0

    def peek(self) -> _Tok:
        return self.tokens[self.i]

    def take(self) -> _Tok:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def error(self, token: _Tok, problem: str, hint: str = _GRAMMAR_HINT) -> ExpressionError:
        found = "the end of the expression" if token.kind == "end" else repr(self.text[token.pos : token.pos + 12])
        return _syntax(self.text, self.argument, token.pos, problem.replace("{found}", found), hint)

    def nest(self, token: _Tok) -> None:
        self.depth += 1
        if self.depth > expressions.MAX_NESTING:
            raise ExpressionError(
                f"{self.argument}: nested more than {expressions.MAX_NESTING} levels deep at position {token.pos}",
                code="EXPRESSION_TOO_COMPLEX",
                evidence={"argument": self.argument, "position": token.pos},
                hint="calculate in several steps",
            )

    def binary(self, ops: tuple[str, ...], operand: Any) -> Value:
        left = operand()
        while self.peek().kind == "op" and self.peek().value in ops:
            op = self.take()
            left = Binary(op.value, left, operand(), op.pos)
        return left

    def concat(self) -> Value:
        return self.binary(("||",), self.additive)

    def additive(self) -> Value:
        return self.binary(("+", "-"), self.term)

    def term(self) -> Value:
        return self.binary(("*", "/"), self.unary)

    def unary(self) -> Value:
        token = self.peek()
        if token.kind == "op" and token.value in "+-":
            self.take()
            self.nest(token)
            inner = self.unary()
            self.depth -= 1
            return inner if token.value == "+" else Negate(inner, token.pos)
        return self.primary()

    def primary(self) -> Value:
        token = self.take()
        if token.kind == "number":
            return Number(token.value, token.pos)
        if token.kind == "string":
            return Text(token.value, token.pos)
        if token.kind == "quoted":
            return FieldRef(token.value, token.pos)
        if token.kind == "measure":
            return Measure(token.value, token.pos)
        if token.kind == "name":
            if self.peek().kind == "(":
                return self.call(token)
            return FieldRef(token.value, token.pos)
        if token.kind == "(":
            self.nest(token)
            inner = self.concat()
            self.depth -= 1
            closing = self.take()
            if closing.kind != ")":
                raise self.error(closing, f"expected ')' to close the '(' at position {token.pos}, found {{found}}")
            return inner
        raise self.error(token, "expected a field name, a number, text or a measure, found {found}")

    def call(self, name: _Tok) -> Value:
        fn = name.value.lower()
        if fn not in FUNCTIONS:
            raise self.error(
                name,
                f"{name.value!r} is not a function here; the functions are " + ", ".join(f"{f}()" for f in FUNCTIONS),
                'put a field name that is followed by "(" in double quotes if it is a field',
            )
        opening = self.take()
        self.nest(opening)
        args: list[Value] = []
        if self.peek().kind != ")":
            while True:
                args.append(self.concat())
                if self.peek().kind == ",":
                    self.take()
                    continue
                break
        closing = self.take()
        self.depth -= 1
        if closing.kind != ")":
            raise self.error(closing, f"expected ',' or ')' in {fn}(...), found {{found}}")
        fewest, most = FUNCTIONS[fn]
        if not fewest <= len(args) <= most:
            raise self.error(name, f"{fn}() takes {fewest if fewest == most else f'{fewest} or {most}'} arguments")
        if fn == "round" and len(args) == 2 and not (isinstance(args[1], Number) and isinstance(args[1].value, int)):
            raise self.error(name, "round(x, n) needs n as a whole number written in the expression, e.g. 2")
        return Call(fn, tuple(args), name.pos)


# -- binding: names and types -----------------------------------------------------------------


def field_kinds(frame: pd.DataFrame) -> dict[str, str]:
    """expressions' kinds, with number split into integer and real (integer arithmetic stays whole)."""
    import pandas as pd

    kinds = expressions.field_kinds(frame)
    for name, kind in kinds.items():
        if kind == "number":
            kinds[name] = "integer" if pd.api.types.is_integer_dtype(frame[name].dtype) else "real"
    return kinds


def bind(calculation: Calculation, kinds: Mapping[str, str]) -> str:
    """The result's type (integer, real or text), or ExpressionError: FIELD_NOT_FOUND (from the same
    binder select_features uses) or EXPRESSION_TYPE_MISMATCH naming both types."""
    return _Binder(calculation, kinds).kind(calculation.root)


class _Binder:
    def __init__(self, calculation: Calculation, kinds: Mapping[str, str]) -> None:
        self.calc, self.kinds = calculation, kinds
        # The condition binder owns FIELD_NOT_FOUND's wording and close-match rules.
        probe = expressions.Truthy(expressions.Literal(True, "boolean", 0), 0)
        self.names = expressions._Binder(expressions.Expression(probe, calculation.text, calculation.argument), kinds)

    def mismatch(self, node: Value, problem: str, hint: str) -> ExpressionError:
        text = self.calc.text
        return ExpressionError(
            f"{self.calc.argument}: {problem} (at position {node.pos})",
            code="EXPRESSION_TYPE_MISMATCH",
            evidence={
                "argument": self.calc.argument,
                "expression": text,
                "position": node.pos,
                "pointer": text + "\n" + " " * node.pos + "^",
            },
            hint=hint,
        )

    def kind(self, node: Value) -> str:
        if isinstance(node, Number):
            return "integer" if isinstance(node.value, int) else "real"
        if isinstance(node, Text):
            return "text"
        if isinstance(node, Measure):
            return "real"
        if isinstance(node, FieldRef):
            found = self.names.kind(expressions.Field(node.name, node.pos))  # FIELD_NOT_FOUND, mixed
            found = self.kinds.get(node.name, found)
            if found in ("boolean", "datetime"):
                raise self.mismatch(
                    node,
                    f"field {node.name!r} is {'true/false' if found == 'boolean' else 'a date/time'}; "
                    "calculate_field computes numbers and text",
                    "select on it with select_features instead",
                )
            return "real" if found == "unknown" else found  # an all-NULL column: NULL results, counted
        if isinstance(node, Negate):
            inner = self.kind(node.operand)
            self.numeric(node, inner, "'-'")
            return inner
        if isinstance(node, Call):
            kinds = [self.kind(a) for a in node.args]
            for k in kinds:
                self.numeric(node, k, f"{node.name}()")
            if node.name == "round":
                return "integer" if len(node.args) == 1 else "real"
            return kinds[0]
        left, right = self.kind(node.left), self.kind(node.right)
        if node.op == "||":
            if left != "text" or right != "text":
                raise self.mismatch(
                    node,
                    "|| joins text, and one side is a number; values are never converted",
                    "join text fields and text in single quotes; a number field cannot be joined as text here",
                )
            return "text"
        for k in (left, right):
            self.numeric(node, k, f"'{node.op}'")
        if node.op == "/":
            return "real"
        return "integer" if left == right == "integer" else "real"

    def numeric(self, node: Value, kind: str, what: str) -> None:
        if kind == "text":
            raise self.mismatch(
                node,
                f"{what} needs numbers, and one operand is text; values are never converted",
                "use || to join text; a field of digits stored as text must be converted before arithmetic",
            )


# -- evaluation -------------------------------------------------------------------------------


@dataclass
class Result:
    """One value per row, which rows are NULL, and why (counts by reason)."""

    values: np.ndarray  # float64 for numbers, object for text
    missing: np.ndarray
    kind: str
    null_reasons: dict[str, int] = field(default_factory=dict)


REASON_FIELD = "a field it reads is NULL"
REASON_GEOMETRY = "the feature has no geometry (or it has no such measure)"
REASON_DIVISION = "a division by zero"
REASON_OVERFLOW = "the value is not a finite number"


def evaluate(calculation: Calculation, frame: pd.DataFrame, measures: Mapping[str, Sequence[float | None]]) -> Result:
    """Bind and evaluate over ``frame``, one vectorised step per node; ``measures`` holds the
    per-row values of each measure the expression reads (the plugin computes them)."""
    import numpy as np

    kind = bind(calculation, field_kinds(frame))
    ev = _Evaluator(frame, measures)
    values, missing = ev.node(calculation.root)
    if kind != "text":
        values = np.asarray(values, dtype=float)
        overflow = ~missing & ~np.isfinite(values)
        ev.masks[REASON_OVERFLOW] = overflow
        missing = missing | overflow
    # Each NULL row is counted once, under the first reason that applies to it.
    counted = np.zeros(len(frame), dtype=bool)
    reasons: dict[str, int] = {}
    for reason in (REASON_FIELD, REASON_GEOMETRY, REASON_DIVISION, REASON_OVERFLOW):
        mask = ev.masks.get(reason)
        if mask is None:
            continue
        new = mask & missing & ~counted
        if new.any():
            reasons[reason] = int(new.sum())
        counted |= new
    return Result(values, missing, kind, reasons)


class _Evaluator:
    def __init__(self, frame: pd.DataFrame, measures: Mapping[str, Sequence[float | None]]) -> None:

        self.frame, self.measures, self.n = frame, measures, len(frame)
        self.masks: dict[str, np.ndarray] = {}

    def mark(self, reason: str, mask: np.ndarray) -> None:
        self.masks[reason] = self.masks[reason] | mask if reason in self.masks else mask

    def node(self, node: Value) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        n = self.n
        if isinstance(node, Number):
            return np.full(n, float(node.value)), np.zeros(n, dtype=bool)
        if isinstance(node, Text):
            return np.full(n, node.value, dtype=object), np.zeros(n, dtype=bool)
        if isinstance(node, FieldRef):
            series = self.frame[node.name]
            missing = series.isna().to_numpy(dtype=bool)
            self.mark(REASON_FIELD, missing)
            if series.dtype == object or str(series.dtype).startswith(("str", "string")):
                return series.to_numpy(dtype=object), missing
            return series.to_numpy(dtype=float, na_value=np.nan), missing
        if isinstance(node, Measure):
            raw = self.measures[node.name]
            values = np.array([np.nan if v is None else v for v in raw], dtype=float)
            missing = np.isnan(values)
            self.mark(REASON_GEOMETRY, missing)
            return values, missing
        if isinstance(node, Negate):
            values, missing = self.node(node.operand)
            return -values, missing
        if isinstance(node, Call):
            parts = [self.node(a) for a in node.args]
            x, mx = parts[0]
            if node.name == "abs":
                return np.abs(x), mx
            digits = int(node.args[1].value) if len(node.args) == 2 else 0  # type: ignore[union-attr]
            # Half away from zero, as analysts round by hand (numpy's round is half to even).
            scale = 10.0**digits
            return np.sign(x) * np.floor(np.abs(x) * scale + 0.5) / scale, mx
        (a, ma), (b, mb) = self.node(node.left), self.node(node.right)
        missing = ma | mb
        if node.op == "||":
            joined = np.array([None if m else f"{x}{y}" for x, y, m in zip(a, b, missing, strict=True)], dtype=object)
            return joined, missing
        with np.errstate(all="ignore"):
            if node.op == "+":
                return a + b, missing
            if node.op == "-":
                return a - b, missing
            if node.op == "*":
                return a * b, missing
            zero = (b == 0) & ~missing
            self.mark(REASON_DIVISION, zero)
            return np.where(zero, np.nan, a / np.where(zero, 1.0, b)), missing | zero


# -- the column's type ------------------------------------------------------------------------


def settle_type(calculation: Calculation, result: Result, declared: str | None) -> str:
    """The type written: the declared one if the values fit it, else the inferred one.

    A declared type is a promise about the values, so it is checked, never forced: integer for real
    values holds only if every value is whole; text and numbers never convert into each other.
    """
    import numpy as np

    inferred = result.kind
    if declared is None:
        return inferred
    if (declared == "text") != (inferred == "text"):
        raise ExpressionError(
            f"field_type={declared!r}, but the expression computes {inferred}; values are never converted",
            code="FIELD_TYPE_MISMATCH",
            evidence={"declared": declared, "inferred": inferred, "expression": calculation.text},
            hint="omit field_type to write the inferred type",
        )
    if declared == "integer" and inferred == "real":
        values = result.values[~result.missing]
        fractional = np.flatnonzero(~result.missing & (np.floor(result.values) != result.values))
        if len(values) and len(fractional):
            raise ExpressionError(
                f"field_type='integer', but {len(fractional)} values are not whole numbers "
                f"(row {int(fractional[0])}: {result.values[fractional[0]]!r})",
                code="FIELD_TYPE_MISMATCH",
                evidence={
                    "declared": declared,
                    "inferred": inferred,
                    "not_whole_count": len(fractional),
                    "rows": [int(i) for i in fractional[:ROWS_SHOWN]],
                },
                hint="wrap the expression in round(...) to write whole numbers, or declare field_type='real'",
            )
    return declared


def as_column(result: Result, field_type: str) -> Any:
    """The values as a pandas column of the settled type, NULLs as missing values (never NaN text)."""
    import numpy as np
    import pandas as pd

    if field_type == "text":
        return pd.array([None if m else v for v, m in zip(result.values, result.missing, strict=True)], dtype=object)
    values = np.asarray(result.values, dtype=float)
    if field_type == "integer":
        out = pd.array(np.where(result.missing, 0, values).astype("int64"), dtype="Int64")
        out[result.missing] = pd.NA
        return out
    out = pd.array(values, dtype="Float64")
    out[result.missing] = pd.NA
    return out


# -- rendering --------------------------------------------------------------------------------


def _render(node: Value) -> str:
    if isinstance(node, Number):
        return repr(node.value)
    if isinstance(node, Text):
        return "'" + node.value.replace("'", "''") + "'"
    if isinstance(node, FieldRef):
        return expressions._render_operand(expressions.Field(node.name, node.pos))
    if isinstance(node, Measure):
        return "$" + node.name
    if isinstance(node, Negate):
        return f"(-{_render(node.operand)})"
    if isinstance(node, Call):
        return f"{node.name}(" + ", ".join(_render(a) for a in node.args) + ")"
    return f"({_render(node.left)} {node.op} {_render(node.right)})"
