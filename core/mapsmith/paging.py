"""One way for every answer that lists rows to hand them out a page at a time.

An answer (measure_area's rows, a dissolve's groups, describe_dataset's fields) lists what it
computed; a long list is not cut at a fixed cap but paged: the caller passes ``offset`` and
``limit`` (the contract's parameters of those names), the answer carries the page and a ``page``
record with the ``total``, so the agent always knows how many rows exist and how to ask for the
next ones. Hand-written because it is ten lines of arithmetic; what matters is that every answer
uses the same words.

What this module must never do: drop a row without saying so (``total`` always counts them all) or
guess a page the caller did not ask for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from mapsmith.errors import InputError

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "page", "page_window"]

#: Rows in a page when the caller names no ``limit``, and the most one page may hold.
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

T = TypeVar("T")


def page_window(arguments: Mapping[str, Any]) -> tuple[int, int]:
    """``(offset, limit)`` from a call's arguments, defaults filled; refuses values out of range
    (``PAGE_INVALID``) even when a contract's bounds were not checked first."""
    offset = arguments.get("offset")
    limit = arguments.get("limit")
    offset = 0 if offset is None else offset
    limit = DEFAULT_LIMIT if limit is None else limit
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise _invalid("offset", offset, "a whole number from 0")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise _invalid("limit", limit, f"a whole number from 1 to {MAX_LIMIT}")
    return offset, limit


def _invalid(name: str, value: Any, wanted: str) -> InputError:
    return InputError(
        f"{name} must be {wanted}, not {value!r}",
        code="PAGE_INVALID",
        evidence={"argument": name, "value": value},
        hint=f"pass {name} as {wanted}; the answer's page.next_offset is the offset of the next page",
    )


def page(rows: Sequence[T], arguments: Mapping[str, Any]) -> tuple[list[T], dict[str, Any]]:
    """The rows of the page the arguments ask for, and the record that describes it.

    The record: ``offset``, ``limit``, ``returned``, ``total`` (every row, whatever the page),
    ``complete`` (this page reaches the last row) and ``next_offset`` (``None`` on the last page).
    An offset past the end returns no rows and says so; it is not an error.
    """
    offset, limit = page_window(arguments)
    chosen = list(rows[offset : offset + limit])
    total = len(rows)
    end = offset + len(chosen)
    return chosen, {
        "offset": offset,
        "limit": limit,
        "returned": len(chosen),
        "total": total,
        "complete": end >= total,
        "next_offset": end if end < total else None,
    }
