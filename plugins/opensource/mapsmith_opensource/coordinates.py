"""Reading one coordinate from a table cell: decimal numbers and degrees-minutes-seconds text.

For ``table_to_points``. A cell reads as a number in the CRS's unit, or fails with a sentence
saying why; it is never half-read (``48°51'`` followed by garbage is refused, not truncated to
48.85°), and never guessed: a hemisphere letter on the wrong axis (``N`` in a longitude column)
is an error pointing at swapped columns, not a silent swap.

Hand-written because no well-kept library does this: PROJ and GDAL parse DMS only inside CRS
definitions and neither is exposed for a cell of text through pyproj or pyogrio, and the small
PyPI packages that parse DMS accept ambiguous forms (a sign *and* a hemisphere, minutes of 75)
that this module must refuse. The grammar is small and fully tested (tests/fields/test_coordinates.py).

What this module must never do: import an engine (it is pure Python), or accept a value it had to
correct.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["CoordinateError", "parse_coordinate"]

# Degree, minute and second marks as people type them: ASCII stand-ins, primes, typographic quotes.
DEGREE_MARKS = "°º˚d"
MINUTE_MARKS = "'′’m"
SECOND_MARKS = '"″”s'
HEMISPHERES = {"N": ("y", 1), "S": ("y", -1), "E": ("x", 1), "W": ("x", -1)}
AXIS_WORDS = {"x": "longitude (x_field)", "y": "latitude (y_field)"}

_NUMBER = r"\d+(?:\.\d+)?|\.\d+"
_PLAIN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# A sign or a hemisphere may lead, a hemisphere may trail; between them degrees, then optional
# minutes and seconds, each followed by its mark or by white space (``-33 52.1``).
_DMS = re.compile(
    rf"""
    (?P<lead>[+-]|[NSEWnsew](?=\s*\d))?\s*
    (?P<deg>{_NUMBER})\s*(?P<dmark>[{DEGREE_MARKS}])?\s*
    (?:(?P<min>{_NUMBER})\s*(?P<mmark>[{MINUTE_MARKS}])?\s*
       (?:(?P<sec>{_NUMBER})\s*(?P<smark>[{SECOND_MARKS}]|''|′′)?\s*)?
    )?
    (?P<trail>[NSEWnsew])?
    """,
    re.VERBOSE,
)


class CoordinateError(ValueError):
    """A cell that is not one coordinate; the message says why, in an analyst's words."""


@dataclass(frozen=True)
class Parsed:
    value: float
    form: str  # "decimal" | "dms"


def parse_coordinate(cell: object, axis: str, *, degrees: bool) -> Parsed:
    """The coordinate in ``cell`` for ``axis`` ("x" or "y").

    ``degrees``: the CRS is geographic, so DMS text, hemisphere letters and the ±180/±90 ranges
    apply. In a projected CRS only plain numbers are read (a DMS value there is an error).
    """
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        raise CoordinateError("the cell is empty")
    if isinstance(cell, bool):
        raise CoordinateError(f"{cell!r} is true/false, not a coordinate")
    if isinstance(cell, int | float):
        return Parsed(_in_range(float(cell), axis, degrees), "decimal")
    text = str(cell).strip()
    if not text:
        raise CoordinateError("the cell is empty")
    if _PLAIN.fullmatch(text):
        return Parsed(_in_range(float(text), axis, degrees), "decimal")
    if "," in text and re.fullmatch(r"[+-]?\d+,\d+", text):
        raise CoordinateError(f"{text!r} has a decimal comma; write the decimal separator as a point")
    if not degrees:
        raise CoordinateError(
            f"{text!r} is not a plain number; the CRS is projected, so coordinates are numbers in its unit"
        )
    return Parsed(_in_range(_dms(text, axis), axis, degrees), "dms")


def _dms(text: str, axis: str) -> float:
    match = _DMS.fullmatch(text)
    if match is None:
        raise CoordinateError(f"{text!r} is neither a decimal number nor degrees-minutes-seconds")
    lead, trail = match["lead"], match["trail"]
    letters = [c.upper() for c in (lead, trail) if c and c not in "+-"]
    if len(letters) > 1:
        raise CoordinateError(f"{text!r} names two hemispheres")
    sign = 1
    if letters:
        hemisphere_axis, sign = HEMISPHERES[letters[0]]
        if hemisphere_axis != axis:
            raise CoordinateError(
                f"{text!r} is marked {letters[0]}, a {AXIS_WORDS[hemisphere_axis].split()[0]}, but this is the "
                f"{AXIS_WORDS[axis]} column: are x_field and y_field swapped?"
            )
        if lead in ("+", "-"):
            raise CoordinateError(f"{text!r} has both a sign and a hemisphere letter; keep one")
    elif lead == "-":
        sign = -1
    deg, minutes, seconds = match["deg"], match["min"], match["sec"]
    if minutes is None and match["dmark"] is None and not letters:
        # A plain number matched _PLAIN already, so what reaches here is a sign set apart from its
        # number ("- 48"): refused rather than read one way.
        raise CoordinateError(f"{text!r} is neither a decimal number nor degrees-minutes-seconds")
    if minutes is not None and "." in deg:
        raise CoordinateError(f"{text!r} has decimal degrees followed by minutes; write one or the other")
    if seconds is not None and minutes is not None and "." in minutes:
        raise CoordinateError(f"{text!r} has decimal minutes followed by seconds; write one or the other")
    m = float(minutes) if minutes is not None else 0.0
    s = float(seconds) if seconds is not None else 0.0
    if m >= 60:
        raise CoordinateError(f"{text!r} has {minutes} minutes; minutes run from 0 to 59")
    if s >= 60:
        raise CoordinateError(f"{text!r} has {seconds} seconds; seconds run from 0 to 59.999…")
    return sign * (float(deg) + m / 60 + s / 3600)


def _in_range(value: float, axis: str, degrees: bool) -> float:
    if not math.isfinite(value):
        raise CoordinateError(f"{value!r} is not a finite number")
    if degrees:
        limit = 180.0 if axis == "x" else 90.0
        if abs(value) > limit:
            word = "longitude" if axis == "x" else "latitude"
            raise CoordinateError(f"{value:g} is outside the {word} range ±{limit:g}°")
    return value
