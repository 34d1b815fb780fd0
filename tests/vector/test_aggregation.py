"""mapsmith_opensource.aggregation against sums worked out by hand, and the rate-like field rule.

Two tracts: density 10 over 100 people and 40 over 300. Together they hold 10*100 + 40*300 = 13,000
(density x people) over 400 people: the weighted mean is 13,000 / 400 = 32.5; the plain mean of the two
densities is (10 + 40) / 2 = 25. Each test works out its own numbers in its comments.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from mapsmith.errors import InputError
from mapsmith_opensource import aggregation
from mapsmith_opensource.aggregation import (
    NO_ROWS,
    ZERO_DENOMINATOR,
    ZERO_TOTAL,
    rate_like_reason,
    ratio_of_sums,
    ratio_of_sums_by_group,
    warn_if_rate_like,
    weighted_mean,
    weighted_mean_by_group,
)


class Recorder:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, str, str]] = []

    def warn(self, code: str, message: str, hint: str) -> None:
        self.warnings.append((code, message, hint))


def test_weighted_mean_of_two_densities_is_not_their_plain_mean() -> None:
    got = weighted_mean([10, 40], [100, 300])
    assert got.value == 32.5  # 13,000 / 400
    assert (got.rows_used, got.rows_skipped, got.total, got.undefined) == (2, 0, 400.0, None)
    assert np.mean([10, 40]) == 25.0  # the plain mean it replaces


def test_equal_weights_give_the_plain_mean() -> None:
    # Clean twin: with every weight 1 the weighted mean is the plain one, (10 + 40 + 70) / 3 = 40.
    assert weighted_mean([10, 40, 70], [1, 1, 1]).value == 40.0


def test_ratio_of_sums_is_the_quotient_of_the_totals() -> None:
    # cases 5 and 30 over 100 and 300: (5 + 30) / 400 = 0.0875; the mean of the rates 0.05 and 0.1 is 0.075.
    got = ratio_of_sums([5, 30], [100, 300])
    assert got.value == pytest.approx(0.0875, abs=1e-15) and got.total == 400.0
    assert ratio_of_sums([5, 15], [100, 300]).value == pytest.approx(0.05, abs=1e-15)


def test_a_row_with_a_null_value_or_weight_is_left_out_and_counted() -> None:
    # Rows: (10, 100), (None, 50), (40, None), (40, 300): the complete ones give 32.5; 2 rows skipped.
    for nulls in (None, np.nan, pd.NA):
        got = weighted_mean(
            pd.array([10, nulls, 40, 40], dtype="Float64"), pd.array([100, 50, nulls, 300], dtype="Float64")
        )
        assert (got.value, got.rows_used, got.rows_skipped, got.total) == (32.5, 2, 2, 400.0)
    # A nullable integer column (pyogrio's Int64 with a null) works the same.
    got = weighted_mean(pd.Series([10, None, 40], dtype="Int64"), pd.Series([100, 7, 300], dtype="Int64"))
    assert (got.value, got.rows_skipped) == (32.5, 1)


def test_zero_total_weight_and_no_complete_row_are_null_with_a_reason_never_zero() -> None:
    zero = weighted_mean([10, 40], [0, 0])
    assert zero.value is None and zero.undefined == ZERO_TOTAL and zero.rows_used == 2
    none = weighted_mean([None, 40], [5, None])
    assert none.value is None and none.undefined == NO_ROWS and none.rows_skipped == 2
    assert ratio_of_sums([3, 4], [0, 0]).undefined == ZERO_DENOMINATOR
    empty = weighted_mean([], [])
    assert empty.value is None and empty.undefined == NO_ROWS


def test_negative_or_infinite_weight_is_refused() -> None:
    with pytest.raises(InputError) as err:
        weighted_mean([1, 2, 3], [5, -1, 2], value_field="density", weight_field="pop")
    assert err.value.code == "WEIGHT_INVALID"
    assert err.value.evidence["field"] == "pop" and err.value.evidence["rows"] == [1]
    assert "select_features" in err.value.hint
    with pytest.raises(InputError) as err:
        weighted_mean([1, 2], [5, math.inf])
    assert err.value.evidence["values"] == ["inf"]
    # A negative numerator or denominator is a legitimate net change: (-10 + 30) / (100 + 100) = 0.1.
    assert ratio_of_sums([-10, 30], [100, 100]).value == pytest.approx(0.1, abs=1e-15)


def test_by_group_follows_the_group_codes() -> None:
    # Group 0: (10, 100), (40, 300) -> 32.5. Group 1: (7, 1) and (null, 5) -> 7, one skipped.
    # Group 2: (3, 0) -> total weight 0 -> null. Codes arrive in any row order.
    got = weighted_mean_by_group([40, 7, 10, None, 3], [300, 1, 100, 5, 0], [0, 1, 0, 1, 2], 3)
    assert [g.value for g in got] == [32.5, 7.0, None]
    assert [g.rows_skipped for g in got] == [0, 1, 0]
    assert got[2].undefined == ZERO_TOTAL
    # Groups 2 and 3 have no rows at all: still reported, as undefined (never 0).
    ratios = ratio_of_sums_by_group([5, 15, 2], [100, 300, 4], [0, 0, 1], 4)
    assert [r.value for r in ratios] == [pytest.approx(0.05, abs=1e-15), 0.5, None, None]
    assert [r.undefined for r in ratios][2:] == [NO_ROWS, NO_ROWS]
    with pytest.raises(ValueError):
        weighted_mean_by_group([1, 2], [1, 1], [0, 2], 2)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("density", "density"),
        ("pop_density", "density"),
        ("PopDensity", "density"),
        ("popdensity", "density"),
        ("unemployment_rate", "rate"),
        ("unemploymentRate", "rate"),
        ("pct_white", "percent"),
        ("pctwhite", "percent"),
        ("percent_forest", "percent"),
        ("share_urban", "share"),
        ("sex_ratio", "ratio"),
        ("deaths_per_1000", "rate"),
        ("per100k", "rate"),
        ("GDPPerCapita", "rate"),
        ("fraction_irrigated", "share"),
    ],
)
def test_rate_like_names(name: str, kind: str) -> None:
    reason = rate_like_reason(name)
    assert reason is not None and kind in reason


@pytest.mark.parametrize(
    "name", ["population", "count", "cases", "area_m2", "corporate", "duration", "percentile", "separate", "value"]
)
def test_names_that_are_not_rates(name: str) -> None:
    assert rate_like_reason(name) is None


def test_metadata_decides_over_the_name() -> None:
    assert rate_like_reason("density", {"kind": "count"}) is None  # declared extensive wins over the name
    assert "intensive" in (rate_like_reason("v", {"kind": "intensive"}) or "")
    assert "persons/km2" in (rate_like_reason("v", {"unit": "persons/km2"}) or "")
    assert rate_like_reason("v", {"unit": "m"}) is None
    assert rate_like_reason("share%") is not None


def test_the_warning_names_the_weighted_alternative_with_its_syntax() -> None:
    ctx = Recorder()
    assert warn_if_rate_like(
        ctx,
        "density",
        weighted_syntax="density:weighted_mean:pop",
        argument="aggregations",
        weight_candidates=["pop"],
    )
    ((code, message, hint),) = ctx.warnings
    assert code == aggregation.RATE_WARNING == "UNWEIGHTED_MEAN_OF_RATE"
    assert "'density'" in message and "density" in message
    assert "aggregations='density:weighted_mean:pop'" in hint and "pop" in hint
    # Clean twin: a count field's plain mean is not warned about.
    assert not warn_if_rate_like(ctx, "households", weighted_syntax="x", argument="aggregations")
    assert len(ctx.warnings) == 1
