"""Attribute expressions for selecting features: a small SQL-like language, parsed here by hand.

The language is a reduced SQL ``WHERE`` clause: comparisons (``= != <> < <= > >=``), ``AND``,
``OR``, ``NOT``, parentheses, ``IN (...)``, ``IS [NOT] NULL``, ``[NOT] BETWEEN ... AND ...``,
``[NOT] LIKE`` with ``%`` and ``_`` (and an optional ``ESCAPE``), string literals in single quotes,
numbers, ``TRUE`` / ``FALSE``, ``DATE '2024-01-31'`` / ``TIMESTAMP '2024-01-31T12:00'``, and field
names, bare or in double quotes. ``NULL`` follows SQL: a comparison with a missing value is
*unknown*, ``NOT unknown`` is unknown, and a row whose condition is unknown is not selected; the
count of such rows is reported so nothing is dropped unseen.

Text goes through three steps, each with its own stable error code and the position (0-based
character offset) of the problem: ``parse`` (``EXPRESSION_SYNTAX``, ``EXPRESSION_TOO_COMPLEX``),
``bind`` against a table's fields (``FIELD_NOT_FOUND`` with the close names,
``EXPRESSION_TYPE_MISMATCH``, ``EXPRESSION_EMPTY_RANGE`` for a BETWEEN whose bounds are
reversed), and ``evaluate`` over a pandas DataFrame, one vectorised operation per node of the tree.

What this module must never do:

* hand any part of the text to ``eval``, ``exec``, ``compile``, ``DataFrame.eval`` / ``query`` or a
  SQL engine: the text is tokenised and parsed here, and only the tree built from it is evaluated,
  so no input can name a Python object, call a function or reach an attribute;
* coerce a type: a text field compared with a number is refused, never converted, because ``'10'``
  and ``10`` order differently and a silent conversion would change which features are selected;
* import numpy or pandas at module level: the core imports this at start-up.
"""

from __future__ import annotations

import datetime as dt
import difflib
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from mapsmith.errors import ArgumentError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = [
    "ExpressionError",
    "Expression",
    "Truth",
    "bind",
    "evaluate",
    "field_kinds",
    "parse",
    "range_condition",
]

# Longer texts and deeper nesting than any hand-written condition needs are refused before the
# parser recurses: the parser's depth is bounded by this, not by Python's recursion limit.
MAX_EXPRESSION_CHARS = 10_000
MAX_NESTING = 50

KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "ESCAPE", "TRUE", "FALSE", "DATE", "TIMESTAMP"}
)
COMPARISONS = ("=", "!=", "<>", "<", "<=", ">", ">=")
ORDERING = frozenset({"<", "<=", ">", ">="})
_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PLAIN_NAME = re.compile(r"[^\W\d]\w*")

# Characters that mean the text was written for another language; each gets a sentence of its own.
_FOREIGN = {
    ";": "';' separates statements; an expression is one condition",
    "`": 'backticks are not quoting here; put a field name in double quotes ("my field")',
    ".": "'.' is not part of the language: there is no attribute access, and numbers need a digit "
    "before or after the point",
    "[": "'[' is not part of the language; put a field name in double quotes (\"my field\")",
    "]": "']' is not part of the language",
    "{": "'{' is not part of the language",
    "}": "'}' is not part of the language",
    "&": "'&' is not an operator here; write AND",
    "|": "'|' is not an operator here; write OR",
    "!": "'!' alone is not an operator here; write NOT, or != for 'not equal'",
    "+": "arithmetic is not part of the language; compare a field with a literal",
    "*": "arithmetic is not part of the language; compare a field with a literal",
    "/": "arithmetic is not part of the language; compare a field with a literal",
    "%": "'%' is a wildcard inside LIKE patterns only, e.g. name LIKE 'A%'",
    "#": "comments are not part of the language",
    "\\": "backslashes are not part of the language outside a string",
    "$": "'$' is not part of the language",
    "@": "'@' is not part of the language",
    ":": "':' is not part of the language",
    "?": "'?' is not part of the language: there are no placeholders",
}


class ExpressionError(ArgumentError):
    """An attribute expression that cannot be parsed, bound to the table's fields, or evaluated."""

    code = "EXPRESSION_SYNTAX"


# -- the tree ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    pos: int


@dataclass(frozen=True)
class Literal:
    value: Any
    kind: str  # "number" | "text" | "boolean" | "datetime"
    pos: int


Operand: TypeAlias = Field | Literal


@dataclass(frozen=True)
class Compare:
    op: str
    left: Operand
    right: Operand
    pos: int


@dataclass(frozen=True)
class InList:
    operand: Operand
    values: tuple[Literal, ...]
    negated: bool
    pos: int


@dataclass(frozen=True)
class IsNull:
    operand: Operand
    negated: bool
    pos: int


@dataclass(frozen=True)
class Between:
    operand: Operand
    low: Operand
    high: Operand
    negated: bool
    pos: int


@dataclass(frozen=True)
class Like:
    operand: Operand
    pattern: Literal
    escape: str | None
    negated: bool
    pos: int


@dataclass(frozen=True)
class Truthy:
    """A boolean field or literal standing alone as a condition (``is_public``, ``TRUE``)."""

    operand: Operand
    pos: int


@dataclass(frozen=True)
class Not:
    operand: Node
    pos: int


@dataclass(frozen=True)
class And:
    operands: tuple[Node, ...]
    pos: int


@dataclass(frozen=True)
class Or:
    operands: tuple[Node, ...]
    pos: int


Node: TypeAlias = Compare | InList | IsNull | Between | Like | Truthy | Not | And | Or


@dataclass(frozen=True)
class Expression:
    """A parsed condition: the tree, the text it came from, and the argument that carried it."""

    root: Node
    text: str
    argument: str = "where"

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names the condition reads, in order of first use."""
        seen: dict[str, None] = {}
        for operand in _operands(self.root):
            if isinstance(operand, Field):
                seen.setdefault(operand.name, None)
        return tuple(seen)

    def canonical(self) -> str:
        """The condition as this parser read it: every group parenthesised, keywords upper-case,
        field names quoted where they must be. Recorded so a reader sees the precedence applied."""
        return _render(self.root)


@dataclass(frozen=True)
class Truth:
    """Kleene three-valued truth, one entry per row: ``true``, ``false``, else unknown (NULL)."""

    true: np.ndarray
    false: np.ndarray

    @property
    def unknown(self) -> np.ndarray:
        return ~(self.true | self.false)


# -- tokens -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    kind: str  # "number" | "string" | "name" | "quoted" | "keyword" | "op" | "(" | ")" | "," | "end" | "bad"
    value: Any
    pos: int
    text: str


def _syntax(text: str, argument: str, pos: int, problem: str, hint: str, **evidence: Any) -> ExpressionError:
    pointer = text + "\n" + " " * pos + "^"
    return ExpressionError(
        f"{argument}: {problem} at position {pos}",
        code="EXPRESSION_SYNTAX",
        evidence={"argument": argument, "expression": text, "position": pos, "pointer": pointer, **evidence},
        hint=hint,
    )


_GRAMMAR_HINT = (
    "write a condition such as: value >= 10 AND name IN ('a', 'b'); text in single quotes, "
    'field names bare or in double quotes ("my field")'
)


def _tokenise(text: str, argument: str) -> list[_Token]:
    """Tokens up to the first unreadable character, which becomes a "bad" token carrying its error:
    the parser raises it only if it gets that far, so the leftmost problem is the one reported."""
    tokens: list[_Token] = []
    try:
        _scan(text, argument, tokens)
    except ExpressionError as exc:
        tokens.append(_Token("bad", exc, int(exc.evidence["position"]), ""))
    tokens.append(_Token("end", None, len(text), ""))
    return tokens


def _scan(text: str, argument: str, tokens: list[_Token]) -> None:
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        start = i
        number = _NUMBER.match(text, i) if ch in "0123456789." else None
        if number is not None:
            raw = number.group()
            i = number.end()
            if i < n and (text[i].isalnum() or text[i] == "_"):
                raise _syntax(
                    text, argument, i, f"unexpected {text[i]!r} straight after the number {raw}", _GRAMMAR_HINT
                )
            is_int = not any(c in raw for c in ".eE")
            tokens.append(_Token("number", int(raw) if is_int else float(raw), start, raw))
        elif ch == "'":
            value, i = _quoted(text, i, "'", argument)
            tokens.append(_Token("string", value, start, text[start:i]))
        elif ch == '"':
            value, i = _quoted(text, i, '"', argument)
            if not value:
                raise _syntax(text, argument, start, "an empty quoted field name", _GRAMMAR_HINT)
            tokens.append(_Token("quoted", value, start, text[start:i]))
        elif ch.isalpha() or ch == "_":
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            word = text[start:i]
            upper = word.upper()
            if upper in KEYWORDS:
                tokens.append(_Token("keyword", upper, start, word))
            else:
                tokens.append(_Token("name", word, start, word))
        elif text.startswith(("<=", ">=", "<>", "!="), i):
            tokens.append(_Token("op", text[i : i + 2], start, text[i : i + 2]))
            i += 2
        elif text.startswith("==", i):
            raise _syntax(text, argument, i, "'==' is not an operator here", "write = for 'equal'")
        elif ch in "=<>":
            tokens.append(_Token("op", ch, start, ch))
            i += 1
        elif ch in "(),":
            tokens.append(_Token(ch, ch, start, ch))
            i += 1
        elif ch == "-":
            tokens.append(_Token("-", ch, start, ch))
            i += 1
        else:
            problem = _FOREIGN.get(ch, f"the character {ch!r} is not part of the language")
            raise _syntax(text, argument, i, f"unexpected {ch!r}: {problem}", _GRAMMAR_HINT, found=ch)


def _quoted(text: str, start: int, quote: str, argument: str) -> tuple[str, int]:
    """A quoted string or name from ``start`` (the opening quote); a doubled quote is a literal one."""
    parts: list[str] = []
    i = start + 1
    while i < len(text):
        if text[i] == quote:
            if text.startswith(quote * 2, i):
                parts.append(quote)
                i += 2
                continue
            return "".join(parts), i + 1
        parts.append(text[i])
        i += 1
    what = "string" if quote == "'" else "quoted field name"
    raise _syntax(
        text,
        argument,
        start,
        f"this {what} is never closed",
        f"close it with {quote}; write a {quote} inside it as {quote * 2}",
    )


# -- parsing ----------------------------------------------------------------------------------


def parse(text: str, *, argument: str = "where") -> Expression:
    """Parse a condition, or raise ``ExpressionError`` saying where and why it cannot be read.

    Codes: ``EXPRESSION_SYNTAX`` (with ``position`` and a ``pointer`` in the evidence) and
    ``EXPRESSION_TOO_COMPLEX`` (longer than ``MAX_EXPRESSION_CHARS`` or nested deeper than
    ``MAX_NESTING``). Field names are not checked here; ``bind`` does that against a table.
    """
    if not isinstance(text, str):
        raise ExpressionError(
            f"{argument} must be a string, got {type(text).__name__}",
            code="EXPRESSION_SYNTAX",
            evidence={"argument": argument, "position": 0},
            hint=_GRAMMAR_HINT,
        )
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(
            f"{argument} is {len(text)} characters long; at most {MAX_EXPRESSION_CHARS} are read",
            code="EXPRESSION_TOO_COMPLEX",
            evidence={"argument": argument, "length": len(text), "position": MAX_EXPRESSION_CHARS},
            hint="select in several steps, or use IN (...) instead of many OR clauses",
        )
    if not text.strip():
        raise _syntax(text, argument, 0, "the expression is empty", _GRAMMAR_HINT)
    parser = _Parser(text, _tokenise(text, argument), argument)
    root = parser.condition()
    parser.expect_end()
    return Expression(root, text, argument)


class _Parser:
    """Recursive descent; precedence from loosest to tightest: OR, AND, NOT, predicate."""

    def __init__(self, text: str, tokens: list[_Token], argument: str) -> None:
        self.text, self.tokens, self.argument = text, tokens, argument
        self.i = 0
        self.depth = 0

    # helpers
    def peek(self, ahead: int = 0) -> _Token:
        token = self.tokens[min(self.i + ahead, len(self.tokens) - 1)]
        if token.kind == "bad":
            raise token.value
        return token

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at_keyword(self, *words: str) -> bool:
        token = self.peek()
        return token.kind == "keyword" and token.value in words

    def error(self, token: _Token, problem: str, hint: str = _GRAMMAR_HINT) -> ExpressionError:
        found = "the end of the expression" if token.kind == "end" else repr(token.text)
        # replace, not format: the problem may quote the caller's text, braces and all
        return _syntax(self.text, self.argument, token.pos, problem.replace("{found}", found), hint, found=token.text)

    def enter(self, token: _Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExpressionError(
                f"{self.argument}: nested more than {MAX_NESTING} levels deep at position {token.pos}",
                code="EXPRESSION_TOO_COMPLEX",
                evidence={"argument": self.argument, "position": token.pos, "max_nesting": MAX_NESTING},
                hint="flatten the condition: AND / OR chains need no parentheses around each term",
            )

    def expect_end(self) -> None:
        token = self.peek()
        if token.kind != "end":
            if token.kind == "(":
                raise self.error(token, "function calls are not part of the language (found '(' after a value)")
            raise self.error(token, "unexpected {found} after a complete condition; join conditions with AND / OR")

    # grammar
    def condition(self) -> Node:
        self.enter(self.peek())
        first = self.conjunction()
        terms = [first]
        while self.at_keyword("OR"):
            self.take()
            terms.append(self.conjunction())
        self.depth -= 1
        return first if len(terms) == 1 else Or(tuple(terms), _pos(first))

    def conjunction(self) -> Node:
        first = self.negation()
        terms = [first]
        while self.at_keyword("AND"):
            self.take()
            terms.append(self.negation())
        return first if len(terms) == 1 else And(tuple(terms), _pos(first))

    def negation(self) -> Node:
        if self.at_keyword("NOT"):
            token = self.take()
            self.enter(token)
            inner = self.negation()
            self.depth -= 1
            return Not(inner, token.pos)
        return self.predicate()

    def predicate(self) -> Node:
        token = self.peek()
        if token.kind == "(":
            self.take()
            inner = self.condition()
            closing = self.peek()
            if closing.kind != ")":
                raise self.error(closing, f"expected ')' to close the '(' at position {token.pos}, found {{found}}")
            self.take()
            after = self.peek()
            if after.kind == "op":
                raise self.error(
                    after, "parentheses group conditions, not values: {found} cannot follow a parenthesised group"
                )
            return inner
        left = self.operand()
        nxt = self.peek()
        if nxt.kind == "op":
            self.take()
            return Compare("<>" if nxt.value == "!=" else nxt.value, left, self.operand(), _pos(left))
        negated = False
        if self.at_keyword("NOT"):
            self.take()
            negated = True
            if not self.at_keyword("IN", "BETWEEN", "LIKE"):
                raise self.error(self.peek(), "expected IN, BETWEEN or LIKE after NOT, found {found}")
        if self.at_keyword("IN"):
            self.take()
            return InList(left, self.literal_list(), negated, _pos(left))
        if self.at_keyword("BETWEEN"):
            self.take()
            low = self.operand()
            if not self.at_keyword("AND"):
                raise self.error(self.peek(), "expected AND between the two bounds of BETWEEN, found {found}")
            self.take()
            return Between(left, low, self.operand(), negated, _pos(left))
        if self.at_keyword("LIKE"):
            self.take()
            pattern = self.peek()
            if pattern.kind != "string":
                raise self.error(pattern, "LIKE needs a pattern in single quotes, e.g. 'A%', found {found}")
            self.take()
            escape = None
            if self.at_keyword("ESCAPE"):
                self.take()
                esc = self.peek()
                if esc.kind != "string" or len(esc.value) != 1:
                    raise self.error(
                        esc, "ESCAPE needs one character in single quotes, e.g. ESCAPE '\\', found {found}"
                    )
                self.take()
                escape = esc.value
            return Like(left, Literal(pattern.value, "text", pattern.pos), escape, negated, _pos(left))
        if self.at_keyword("IS"):
            self.take()
            is_not = False
            if self.at_keyword("NOT"):
                self.take()
                is_not = True
            if not self.at_keyword("NULL"):
                raise self.error(self.peek(), "expected NULL after IS" + (" NOT" if is_not else "") + ", found {found}")
            self.take()
            return IsNull(left, is_not, _pos(left))
        if nxt.kind == "(":
            raise self.error(nxt, "function calls are not part of the language (found '(' after a name)")
        # A value standing alone is a condition only if it is boolean; bind() checks that.
        return Truthy(left, _pos(left))

    def operand(self) -> Operand:
        token = self.peek()
        if token.kind == "number":
            self.take()
            return Literal(token.value, "number", token.pos)
        if token.kind == "-":
            self.take()
            number = self.peek()
            if number.kind != "number":
                raise self.error(number, "'-' must be followed by a number (there is no arithmetic), found {found}")
            self.take()
            return Literal(-number.value, "number", token.pos)
        if token.kind == "string":
            self.take()
            return Literal(token.value, "text", token.pos)
        if token.kind == "name":
            self.take()
            if self.peek().kind == "(":
                raise self.error(
                    self.peek(),
                    f"function calls are not part of the language ({token.text!r} is read as a field name, "
                    "and a field cannot be called)",
                )
            return Field(token.value, token.pos)
        if token.kind == "quoted":
            self.take()
            return Field(token.value, token.pos)
        if token.kind == "keyword":
            if token.value in ("TRUE", "FALSE"):
                self.take()
                return Literal(token.value == "TRUE", "boolean", token.pos)
            if token.value in ("DATE", "TIMESTAMP"):
                return self.typed_literal()
            if token.value == "NULL":
                raise self.error(
                    token,
                    "NULL is not a value to compare with (a comparison with NULL is never true)",
                    "write field IS NULL or field IS NOT NULL",
                )
            raise self.error(
                token,
                "expected a field name or a value, found the keyword {found}",
                f'a field named {token.text} must be written in double quotes: "{token.text}"',
            )
        raise self.error(token, "expected a field name or a value, found {found}")

    def typed_literal(self) -> Literal:
        keyword = self.take()
        token = self.peek()
        if token.kind != "string":
            raise self.error(token, f"{keyword.value} must be followed by a quoted ISO 8601 value, found {{found}}")
        self.take()
        try:
            if keyword.value == "DATE":
                value: Any = dt.date.fromisoformat(token.value)
            else:
                value = dt.datetime.fromisoformat(token.value)
        except ValueError:
            raise self.error(
                token,
                f"{token.text} is not an ISO 8601 {keyword.value.lower()}",
                "write DATE 'YYYY-MM-DD' or TIMESTAMP 'YYYY-MM-DDTHH:MM[:SS][+HH:MM]'",
            ) from None
        return Literal(value, "datetime", keyword.pos)

    def literal_list(self) -> tuple[Literal, ...]:
        opening = self.peek()
        if opening.kind != "(":
            raise self.error(opening, "IN needs a list in parentheses, e.g. IN ('a', 'b'), found {found}")
        self.take()
        values: list[Literal] = []
        while True:
            token = self.peek()
            if token.kind == "keyword" and token.value == "NULL":
                raise self.error(
                    token, "NULL in an IN list never matches", "add OR field IS NULL to select missing values"
                )
            value = self.operand()
            if not isinstance(value, Literal):
                raise self.error(token, "an IN list holds values only, not field names; found {found}")
            values.append(value)
            sep = self.peek()
            if sep.kind == ",":
                self.take()
                continue
            if sep.kind == ")":
                self.take()
                return tuple(values)
            raise self.error(sep, "expected ',' or ')' in the IN list, found {found}")


def _pos(node: Node | Operand) -> int:
    return node.pos


# -- building conditions without text ---------------------------------------------------------


def range_condition(field: str, minimum: float | None, maximum: float | None, *, argument: str = "field") -> Expression:
    """``field BETWEEN minimum AND maximum`` (or ``>=`` / ``<=`` when one bound is None), built as a
    tree so a field name is never spliced into text. Bound and evaluated like any other condition."""
    target = Field(field, 0)
    root: Node
    if minimum is not None and maximum is not None:
        root = Between(target, Literal(minimum, "number", 0), Literal(maximum, "number", 0), False, 0)
    elif minimum is not None:
        root = Compare(">=", target, Literal(minimum, "number", 0), 0)
    elif maximum is not None:
        root = Compare("<=", target, Literal(maximum, "number", 0), 0)
    else:
        raise ValueError("range_condition needs a minimum or a maximum")
    return Expression(root, "", argument)


# -- binding: names and types -----------------------------------------------------------------


def field_kinds(frame: pd.DataFrame) -> dict[str, str]:
    """The kind of every non-geometry column: number, text, boolean, datetime, unknown (all
    missing) or mixed (an object column holding values of several kinds, which is refused)."""
    import pandas as pd

    kinds: dict[str, str] = {}
    for name in frame.columns:
        series = frame[name]
        dtype = series.dtype
        if str(dtype) == "geometry":  # GeoPandas' geometry column is not an attribute
            continue
        if pd.api.types.is_bool_dtype(dtype):
            kinds[str(name)] = "boolean"
        elif pd.api.types.is_numeric_dtype(dtype):
            kinds[str(name)] = "number"
        elif pd.api.types.is_datetime64_any_dtype(dtype):
            kinds[str(name)] = "datetime"
        elif pd.api.types.is_string_dtype(dtype) and not pd.api.types.is_object_dtype(dtype):
            kinds[str(name)] = "text"
        else:
            kinds[str(name)] = _object_kind(series)
    return kinds


def _object_kind(series: pd.Series) -> str:
    found = set()
    for value in series.dropna():
        if isinstance(value, bool):
            found.add("boolean")
        elif isinstance(value, int | float):
            found.add("number")
        elif isinstance(value, str):
            found.add("text")
        elif isinstance(value, dt.date):  # datetime is a date too
            found.add("datetime")
        else:
            found.add("mixed")
        if len(found) > 1:
            return "mixed"
    return found.pop() if found else "unknown"


def bind(expression: Expression, kinds: Mapping[str, str]) -> None:
    """Check every field exists and every comparison compares like with like.

    Raises ``ExpressionError`` with ``FIELD_NOT_FOUND`` (naming the close matches and listing the
    fields) or ``EXPRESSION_TYPE_MISMATCH`` (naming both kinds and how to write the comparison).
    """
    _Binder(expression, kinds).node(expression.root)


class _Binder:
    def __init__(self, expression: Expression, kinds: Mapping[str, str]) -> None:
        self.expression, self.kinds = expression, kinds

    def kind(self, operand: Operand) -> str:
        if isinstance(operand, Literal):
            return operand.kind
        if operand.name not in self.kinds:
            fields = sorted(self.kinds)
            close = difflib.get_close_matches(operand.name, fields, n=3, cutoff=0.6)
            folded = [f for f in fields if f.lower() == operand.name.lower() and f not in close]
            close = folded + close
            raise ExpressionError(
                f"{self.expression.argument}: the layer has no field {operand.name!r}"
                + (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "")
                + f" Its fields: {', '.join(fields) or '(none)'}",
                code="FIELD_NOT_FOUND",
                evidence={
                    "argument": self.expression.argument,
                    "expression": self.expression.text,
                    "field": operand.name,
                    "position": operand.pos,
                    "fields": fields,
                    "did_you_mean": close,
                },
                hint="field names are case-sensitive; quote names with spaces or keywords in double quotes",
            )
        kind = self.kinds[operand.name]
        if kind == "mixed":
            raise self.mismatch(
                operand,
                f"field {operand.name!r} holds values of several kinds (text and numbers, say), so no "
                "comparison with it has one meaning",
                "clean the field to one type first",
            )
        return kind

    def describe(self, operand: Operand, kind: str) -> str:
        if isinstance(operand, Field):
            return f"field {operand.name!r} is {_KIND_WORDS[kind]}"
        return f"{_render_operand(operand)} is {_KIND_WORDS[kind]}"

    def mismatch(
        self, at: Operand | Node, problem: str, hint: str, code: str = "EXPRESSION_TYPE_MISMATCH", **evidence: Any
    ) -> ExpressionError:
        pos = at.pos
        text = self.expression.text
        extra: dict[str, Any] = {"position": pos}
        if text:
            extra["pointer"] = text + "\n" + " " * pos + "^"
        return ExpressionError(
            f"{self.expression.argument}: {problem}" + (f" (at position {pos})" if text else ""),
            code=code,
            evidence={"argument": self.expression.argument, "expression": text, **extra, **evidence},
            hint=hint,
        )

    def same_kind(self, node: Node, a: Operand, b: Operand, what: str) -> str:
        ka, kb = self.kind(a), self.kind(b)
        if "unknown" in (ka, kb) or ka == kb:
            return kb if ka == "unknown" else ka
        field, other = (a, b) if isinstance(a, Field) else (b, a)
        kf, ko = (ka, kb) if field is a else (kb, ka)
        raise self.mismatch(
            node,
            f"{what}: {self.describe(field, kf)} and {self.describe(other, ko)}; values are never converted",
            _mismatch_hint(field, kf, other, ko),
            kinds=[ka, kb],
        )

    def node(self, node: Node) -> None:
        if isinstance(node, And | Or):
            for term in node.operands:
                self.node(term)
        elif isinstance(node, Not):
            self.node(node.operand)
        elif isinstance(node, Compare):
            kind = self.same_kind(node, node.left, node.right, f"cannot compare with {node.op}")
            if kind == "boolean" and node.op in ORDERING:
                raise self.mismatch(node, f"{node.op} does not order true and false", "compare booleans with = or <>")
        elif isinstance(node, InList):
            for value in node.values:
                self.same_kind(node, node.operand, value, "cannot look for this value with IN")
        elif isinstance(node, Between):
            kind = self.same_kind(node, node.operand, node.low, "cannot use BETWEEN")
            self.same_kind(node, node.operand, node.high, "cannot use BETWEEN")
            if kind == "boolean":
                raise self.mismatch(node, "BETWEEN does not order true and false", "compare booleans with = or <>")
            if isinstance(node.low, Literal) and isinstance(node.high, Literal):
                if _greater(node.low.value, node.high.value):
                    raise self.mismatch(
                        node,
                        f"BETWEEN {_render_operand(node.low)} AND {_render_operand(node.high)} is empty: "
                        "the lower bound is above the upper",
                        "write the smaller bound first",
                        code="EXPRESSION_EMPTY_RANGE",
                    )
        elif isinstance(node, Like):
            kind = self.kind(node.operand)
            if kind not in ("text", "unknown"):
                raise self.mismatch(
                    node,
                    f"LIKE matches text, and {self.describe(node.operand, kind)}",
                    "use =, <, BETWEEN or IN for numbers and dates",
                )
        elif isinstance(node, IsNull):
            self.kind(node.operand)
        elif isinstance(node, Truthy):
            kind = self.kind(node.operand)
            if kind not in ("boolean", "unknown"):
                raise self.mismatch(
                    node,
                    f"a condition must be true or false, and {self.describe(node.operand, kind)}",
                    "compare it with something, e.g. value > 0 or name = 'x'",
                )


_KIND_WORDS = {
    "number": "a number",
    "text": "text",
    "boolean": "true/false",
    "datetime": "a date/time",
    "unknown": "always empty",
    "mixed": "of mixed kinds",
}


def _greater(a: Any, b: Any) -> bool:
    try:
        return bool(a > b)
    except TypeError:  # date against datetime: bind() has refused unlike kinds already
        return False


def _mismatch_hint(field: Operand, field_kind: str, other: Operand, other_kind: str) -> str:
    if field_kind == "text" and other_kind == "number" and isinstance(other, Literal):
        return (
            f"this field holds text: compare it with text, e.g. '{_render_number(other.value)}' "
            "(text orders character by character, so '10' < '9'), or convert the field to numbers first"
        )
    if field_kind == "number" and other_kind == "text" and isinstance(other, Literal):
        return "this field holds numbers: write the value without quotes"
    if field_kind == "text" and other_kind == "datetime":
        return "this field holds text: compare ISO dates as text, e.g. '2024-01-31' (they order correctly as text)"
    if field_kind == "datetime" and other_kind == "text":
        return "this field holds dates/times: write DATE 'YYYY-MM-DD' or TIMESTAMP 'YYYY-MM-DDTHH:MM'"
    if other_kind == "boolean" or field_kind == "boolean":
        return "true/false fields compare with TRUE or FALSE only"
    return "compare values of the same kind"


# -- evaluation -------------------------------------------------------------------------------


def evaluate(expression: Expression, frame: pd.DataFrame) -> Truth:
    """Bind ``expression`` to ``frame``'s columns and evaluate it on every row, vectorised.

    Returns a ``Truth``: the rows where the condition holds, where it fails, and (the rest) where
    it is unknown because a value it reads is missing.
    """
    bind(expression, field_kinds(frame))
    return _Evaluator(expression, frame).node(expression.root)


class _Evaluator:
    def __init__(self, expression: Expression, frame: pd.DataFrame) -> None:
        self.expression, self.frame = expression, frame
        self.n = len(frame)

    def node(self, node: Node) -> Truth:
        import numpy as np

        if isinstance(node, And):
            parts = [self.node(term) for term in node.operands]
            true = np.logical_and.reduce([p.true for p in parts])
            false = np.logical_or.reduce([p.false for p in parts])
            return Truth(true, false)
        if isinstance(node, Or):
            parts = [self.node(term) for term in node.operands]
            true = np.logical_or.reduce([p.true for p in parts])
            false = np.logical_and.reduce([p.false for p in parts])
            return Truth(true, false)
        if isinstance(node, Not):
            inner = self.node(node.operand)
            return Truth(inner.false, inner.true)
        if isinstance(node, IsNull):
            _, missing = self.operand(node.operand)
            return Truth(~missing, missing) if node.negated else Truth(missing, ~missing)
        if isinstance(node, Compare):
            (a, ma), (b, mb) = self.operand(node.left), self.operand(node.right)
            return self.known(self.apply(node, _OPERATORS[node.op], a, b), ma | mb)
        if isinstance(node, Between):
            (x, mx), (lo, ml), (hi, mh) = (self.operand(o) for o in (node.operand, node.low, node.high))
            inside = self.apply(node, operator.ge, x, lo) & self.apply(node, operator.le, x, hi)
            return self.negate(self.known(inside, mx | ml | mh), node.negated)
        if isinstance(node, InList):
            x, mx = self.operand(node.operand)
            values = [self.value(v) for v in node.values]
            found = np.zeros(self.n, dtype=bool)
            for value in values:
                found |= self.apply(node, operator.eq, x, value)
            return self.negate(self.known(found, mx), node.negated)
        if isinstance(node, Like):
            x, mx = self.operand(node.operand)
            pattern = _like_regex(node.pattern.value, node.escape)
            column = self.broadcast(x)
            matched = np.fromiter(
                (isinstance(v, str) and re.fullmatch(pattern, v, re.DOTALL) is not None for v in column),
                dtype=bool,
                count=self.n,
            )
            return self.negate(self.known(matched, mx), node.negated)
        if isinstance(node, Truthy):
            x, mx = self.operand(node.operand)
            return self.known(self.apply(node, operator.eq, x, True), mx)
        raise AssertionError(f"unhandled node {type(node).__name__}")

    @staticmethod
    def negate(truth: Truth, negated: bool) -> Truth:
        return Truth(truth.false, truth.true) if negated else truth

    @staticmethod
    def known(result: np.ndarray, missing: np.ndarray) -> Truth:
        return Truth(result & ~missing, ~result & ~missing)

    def value(self, literal: Literal) -> Any:
        import pandas as pd

        if literal.kind == "datetime":
            return pd.Timestamp(literal.value)
        return literal.value

    def operand(self, operand: Operand) -> tuple[Any, np.ndarray]:
        """The operand's values (a column, or a scalar) and which rows lack a value."""
        import numpy as np
        import pandas as pd

        if isinstance(operand, Literal):
            return self.value(operand), np.zeros(self.n, dtype=bool)
        series = self.frame[operand.name]
        missing = series.isna().to_numpy(dtype=bool)
        if missing.all():
            # Nothing to compare (an empty column of any kind); every row is unknown regardless.
            return _ALL_MISSING, missing
        if pd.api.types.is_object_dtype(series.dtype):
            kind = _object_kind(series)
            if kind == "datetime":
                # Python dates (GeoParquet's date columns): the same instants as pandas timestamps.
                series = pd.to_datetime(series)
            elif missing.any():
                # Python's None cannot be ordered against a str; the placeholder is masked out anyway.
                series = series.where(~missing, _PLACEHOLDER[kind])
        return series, missing

    def broadcast(self, values: Any) -> list[Any]:
        import pandas as pd

        if isinstance(values, pd.Series):
            return values.tolist()
        return [None if values is _ALL_MISSING else values] * self.n

    def apply(self, node: Node, op: Callable[[Any, Any], Any], a: Any, b: Any) -> np.ndarray:
        import numpy as np
        import pandas as pd

        if a is _ALL_MISSING or b is _ALL_MISSING:
            return np.zeros(self.n, dtype=bool)  # masked as unknown by the caller
        try:
            result = op(a, b)
        except TypeError as exc:
            # Only timezone-aware against naive times reaches here: bind() refused unlike kinds.
            raise ExpressionError(
                f"{self.expression.argument}: cannot compare at position {node.pos}: {exc}",
                code="EXPRESSION_TYPE_MISMATCH",
                evidence={
                    "argument": self.expression.argument,
                    "expression": self.expression.text,
                    "position": node.pos,
                },
                hint="a timezone-aware field needs a TIMESTAMP with an offset, e.g. TIMESTAMP '2024-01-31T00:00+00:00'",
            ) from exc
        if isinstance(result, pd.Series):
            return np.asarray(result.fillna(False).to_numpy(), dtype=bool) if result.hasnans else result.to_numpy(bool)
        return np.full(self.n, bool(result), dtype=bool)


_PLACEHOLDER: dict[str, Any] = {"text": "", "number": 0, "boolean": False}
_ALL_MISSING = object()


def _like_regex(pattern: str, escape: str | None) -> str:
    """SQL LIKE as a Python regular expression: % any run, _ one character, the rest literal."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return "".join(out)


# -- rendering --------------------------------------------------------------------------------


def _operands(node: Node) -> list[Operand]:
    if isinstance(node, And | Or):
        return [o for term in node.operands for o in _operands(term)]
    if isinstance(node, Not):
        return _operands(node.operand)
    if isinstance(node, Compare):
        return [node.left, node.right]
    if isinstance(node, InList):
        return [node.operand, *node.values]
    if isinstance(node, Between):
        return [node.operand, node.low, node.high]
    if isinstance(node, Like):
        return [node.operand, node.pattern]
    return [node.operand]  # IsNull, Truthy


def _render_number(value: int | float) -> str:
    return repr(value)


def _render_operand(operand: Operand) -> str:
    if isinstance(operand, Field):
        name = operand.name
        if _PLAIN_NAME.fullmatch(name) and name.upper() not in KEYWORDS:
            return name
        return '"' + name.replace('"', '""') + '"'
    if operand.kind == "text":
        return "'" + str(operand.value).replace("'", "''") + "'"
    if operand.kind == "boolean":
        return "TRUE" if operand.value else "FALSE"
    if operand.kind == "datetime":
        keyword = "TIMESTAMP" if isinstance(operand.value, dt.datetime) else "DATE"
        return f"{keyword} '{operand.value.isoformat()}'"
    return _render_number(operand.value)


def _render(node: Node) -> str:
    if isinstance(node, And | Or):
        word = " AND " if isinstance(node, And) else " OR "
        return "(" + word.join(_render(term) for term in node.operands) + ")"
    if isinstance(node, Not):
        return f"(NOT {_render(node.operand)})"
    if isinstance(node, Compare):
        return f"({_render_operand(node.left)} {node.op} {_render_operand(node.right)})"
    negation = "NOT " if isinstance(node, InList | Between | Like) and node.negated else ""
    if isinstance(node, InList):
        values = ", ".join(_render_operand(v) for v in node.values)
        return f"({_render_operand(node.operand)} {negation}IN ({values}))"
    if isinstance(node, Between):
        lo, hi = _render_operand(node.low), _render_operand(node.high)
        return f"({_render_operand(node.operand)} {negation}BETWEEN {lo} AND {hi})"
    if isinstance(node, Like):
        escape = "" if node.escape is None else " ESCAPE " + _render_operand(Literal(node.escape, "text", 0))
        return f"({_render_operand(node.operand)} {negation}LIKE {_render_operand(node.pattern)}{escape})"
    if isinstance(node, IsNull):
        return f"({_render_operand(node.operand)} IS {'NOT ' if node.negated else ''}NULL)"
    return _render_operand(node.operand)  # Truthy
