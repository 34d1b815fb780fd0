"""Reading one coordinate cell (decimal or degrees-minutes-seconds), against values worked by hand.

Each expected value is degrees + minutes/60 + seconds/3600, negated for S and W, computed in the
comment beside it before the code ran.
"""

from __future__ import annotations

import pytest

from mapsmith_opensource.coordinates import CoordinateError, parse_coordinate


@pytest.mark.parametrize(
    ("cell", "axis", "expected"),
    [
        # 48 + 51/60 + 24/3600 = 48 + 0.85 + 0.0066667 = 48.8566667
        ("48°51'24\"N", "y", 48.856666666666667),
        # 2 + 21/60 + 3/3600 = 2 + 0.35 + 0.00083333 = 2.3508333
        ("2°21'03\"E", "x", 2.3508333333333333),
        # sign, degrees and decimal minutes separated by a space: -(33 + 52.1/60) = -33.8683333
        ("-33 52.1", "y", -33.868333333333333),
        # 151 + 12.5/60 = 151.2083333
        ("151°12.5'E", "x", 151.20833333333333),
        # leading hemisphere, marks left out: -(0 + 7/60 + 39/3600) = -0.1275
        ("W 0 7 39", "x", -0.1275),
        # S after degrees and minutes: -(33 + 52/60) = -33.8666667
        ("33°52'S", "y", -33.866666666666667),
        # ASCII stand-ins for the marks: d m s
        ("48d51m24sN", "y", 48.856666666666667),
        # typographic primes: 40°26′46″ N = 40 + 26/60 + 46/3600 = 40.4461111
        ("40°26′46″ N", "y", 40.446111111111111),
        # decimal text and numbers pass through unchanged
        ("48.8566", "y", 48.8566),
        ("-0.1275", "x", -0.1275),
        (151.2, "x", 151.2),
    ],
)
def test_coordinates_read_as_worked_by_hand(cell: object, axis: str, expected: float) -> None:
    assert parse_coordinate(cell, axis, degrees=True).value == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("cell", "axis", "reason"),
    [
        ("48°51'N", "x", "are x_field and y_field swapped"),  # N in the longitude column
        ("2°21'E", "y", "are x_field and y_field swapped"),
        ("-33°52'S", "y", "both a sign and a hemisphere"),
        ("48°75'N", "y", "75 minutes"),
        ("48°51'60\"N", "y", "60 seconds"),
        ("48.5°30'", "y", "decimal degrees followed by minutes"),
        ("48°30.5'10\"", "y", "decimal minutes followed by seconds"),
        ("91", "y", "outside the latitude range"),
        ("-180.5", "x", "outside the longitude range"),
        ("48,8566", "y", "decimal comma"),
        ("", "y", "empty"),
        (None, "y", "empty"),
        ("abc", "y", "neither a decimal number nor degrees-minutes-seconds"),
        ("48°51'24\"N extra", "y", "neither a decimal number"),  # never half-read
        ("N 48 S", "y", "two hemispheres"),
    ],
)
def test_unreadable_coordinates_say_why(cell: object, axis: str, reason: str) -> None:
    with pytest.raises(CoordinateError, match=reason):
        parse_coordinate(cell, axis, degrees=True)


def test_a_projected_crs_reads_plain_numbers_only() -> None:
    # The clean twin: the same easting as a number is read, unbounded by ±180.
    assert parse_coordinate("530000.5", "x", degrees=False).value == 530000.5
    with pytest.raises(CoordinateError, match="projected"):
        parse_coordinate("51°30'N", "y", degrees=False)
