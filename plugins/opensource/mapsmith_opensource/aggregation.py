"""Aggregates that respect what a field measures: the weighted mean, the ratio of sums, and the rate rule.

A rate, a percentage, a share or a density is a quotient; the plain mean of quotients over features of
unequal size is not the quotient of the whole (two tracts of density 10 over 100 people and 40 over 300
are together 32.5, not 25). This module gives every operation that summarises a group of features one
way to do it right: ``weighted_mean`` (sum(w*x)/sum(w)) and ``ratio_of_sums`` (sum(a)/sum(b)), per group
or over one set of rows, each reporting how many rows it used and skipped and why a result is undefined;
and one rule, ``rate_like_reason``, saying when a field looks like a quotient so that its plain mean is
warned about (``warn_unweighted_mean``, code UNWEIGHTED_MEAN_OF_RATE) with the weighted alternative named.

Hand-written because no library does the reporting: numpy's ``average`` raises on a zero total weight and
pandas has no weighted groupby mean, and neither says which rows a null removed. The arithmetic is numpy.

What this module must never do: guess a value where the data does not define one (a group whose total
weight is 0, or whose rows all lack a value or a weight, gets None and a reason, never 0 or the plain
mean); drop a row without counting it; accept a negative or infinite weight (refused, code
WEIGHT_INVALID); import an engine other than numpy/pandas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mapsmith.errors import InputError

if TYPE_CHECKING:
    import numpy as np

RATE_WARNING = "UNWEIGHTED_MEAN_OF_RATE"

# Why a result is None (Aggregate.undefined).
NO_ROWS = "no row has both values"
ZERO_TOTAL = "the total weight is 0"
ZERO_DENOMINATOR = "the sum of the denominator is 0"

# Whole name tokens that say "this is a quotient". "rate" only as a whole token: as a substring it is in
# corporate, separate, accurate. "per" catches deaths_per_1000, gdp_per_capita, PerCapita.
RATE_TOKENS = {
    "rate": "rate",
    "rates": "rate",
    "pct": "percent",
    "pcnt": "percent",
    "perc": "percent",
    "percent": "percent",
    "percentage": "percent",
    "share": "share",
    "shares": "share",
    "fraction": "share",
    "frac": "share",
    "proportion": "share",
    "density": "density",
    "densities": "density",
    "dens": "density",
    "ratio": "ratio",
    "ratios": "ratio",
    "per": "rate",
    "percapita": "rate",
    "prevalence": "rate",
    "incidence": "rate",
}
# Stems that end a run-together token unambiguously (popdensity, malepercent, sexratio); "rate" is not one.
RATE_SUFFIXES = {"density": "density", "percent": "percent", "percentage": "percent", "ratio": "ratio"}
# Tokens that start with these are quotients too: pctwhite, per1000, per100k.
RATE_PREFIXES = (
    (re.compile(r"^pct[a-z0-9]"), "percent"),
    (re.compile(r"^per\d"), "rate"),
)
# Field metadata (a contract's field description, a manifest's field record) that settles the question
# whichever way the name points. Extensive kinds win over a rate-like name: a 'count' is never warned about.
RATE_KINDS = {"rate", "percent", "percentage", "share", "density", "ratio", "proportion", "fraction", "intensive"}
EXTENSIVE_KINDS = {"count", "total", "sum", "extensive", "amount", "identifier", "id"}
METADATA_KEYS = ("kind", "quantity", "aggregation_kind", "measure")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")


class Warner(Protocol):
    """What ``warn_unweighted_mean`` needs of a run context (mapsmith.runner.RunContext has it)."""

    def warn(self, code: str, message: str, hint: str) -> None: ...


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of one group: the value, or None with the reason, and what went into it.

    ``total`` is the sum of the weights used (weighted_mean) or of the denominators used (ratio_of_sums);
    ``rows_skipped`` counts rows where the value or the weight (numerator or denominator) was null.
    """

    value: float | None
    rows_used: int
    rows_skipped: int
    total: float
    undefined: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "rows_used": self.rows_used,
            "rows_skipped_null": self.rows_skipped,
            "total": self.total,
            "undefined": self.undefined,
        }


def _floats(values: Any) -> np.ndarray:
    """Any column (numpy, pandas nullable, list with None) as float64 with NaN for every kind of null."""
    import numpy as np
    import pandas as pd

    return np.asarray(pd.array(values, dtype="Float64").to_numpy(dtype="float64", na_value=np.nan), dtype="float64")


def _groups(groups: Any, ngroups: int, n: int) -> np.ndarray:
    import numpy as np

    codes = np.asarray(groups, dtype="int64") if groups is not None else np.zeros(n, dtype="int64")
    if len(codes) != n:
        raise ValueError(f"{len(codes)} group codes for {n} rows")
    if n and (codes.min() < 0 or codes.max() >= ngroups):
        raise ValueError(f"group codes must lie in 0..{ngroups - 1}")
    return codes


def weight_error(field: str, role: str, rows: Sequence[int], values: Sequence[float], count: int) -> InputError:
    """The refusal of ``count`` values of ``field`` that cannot be a ``role`` ("weight": negative or infinite;
    "value", "numerator", "denominator": infinite); ``rows``/``values``: the first few, by row number.
    Public so that an engine computing the aggregates elsewhere (Spark) refuses in the same words."""
    weight = role == "weight"
    return InputError(
        f"the {role} field {field!r} holds {count} value(s) that cannot be "
        + ("a weight (negative or infinite)" if weight else "summed (infinite)"),
        code="WEIGHT_INVALID",
        evidence={"field": field, "role": role, "rows": list(rows), "values": [str(v) for v in values]},
        hint=f"filter those rows out first (select_features with a where on {field!r}), or choose another "
        + ("weight field: a weight is a non-negative size such as a population or an area" if weight else "field"),
    )


def _refuse_bad(values: np.ndarray, field: str, role: str) -> None:
    """A weight must be finite and not negative; a value or a numerator/denominator must be finite."""
    import numpy as np

    bad = np.isinf(values) | ((values < 0) if role == "weight" else False)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise weight_error(field, role, rows[:10].tolist(), values[rows[:10]].tolist(), len(rows))


def _by_group(
    top: Any,
    bottom: Any,
    groups: Any,
    ngroups: int,
    *,
    multiply: bool,
    top_field: str,
    bottom_field: str,
    zero_reason: str,
) -> list[Aggregate]:
    import numpy as np

    x, w = _floats(top), _floats(bottom)
    if len(x) != len(w):
        raise ValueError(f"{len(x)} values for {len(w)} weights")
    codes = _groups(groups, ngroups, len(x))
    _refuse_bad(x, top_field, "value" if multiply else "numerator")
    _refuse_bad(w, bottom_field, "weight" if multiply else "denominator")
    ok = ~(np.isnan(x) | np.isnan(w))
    used = np.bincount(codes[ok], minlength=ngroups)
    skipped = np.bincount(codes[~ok], minlength=ngroups)
    numerator = np.bincount(codes[ok], weights=(x[ok] * w[ok]) if multiply else x[ok], minlength=ngroups)
    total = np.bincount(codes[ok], weights=w[ok], minlength=ngroups)
    out = []
    for g in range(ngroups):
        if used[g] == 0:
            out.append(Aggregate(None, 0, int(skipped[g]), 0.0, NO_ROWS))
        elif total[g] == 0:
            out.append(Aggregate(None, int(used[g]), int(skipped[g]), 0.0, zero_reason))
        else:
            out.append(Aggregate(float(numerator[g] / total[g]), int(used[g]), int(skipped[g]), float(total[g])))
    return out


def weighted_mean_by_group(
    values: Any,
    weights: Any,
    groups: Any,
    ngroups: int,
    *,
    value_field: str = "value",
    weight_field: str = "weight",
) -> list[Aggregate]:
    """sum(w*x)/sum(w) per group, over the rows where both x and w are non-null.

    ``groups``: each row's group number in 0..ngroups-1 (pandas' ``GroupBy.ngroup()``), or None for one
    group. A group with no complete row, or whose weights sum to 0, gets value None and the reason. A
    negative or infinite weight, or an infinite value, is refused (InputError WEIGHT_INVALID).
    """
    return _by_group(
        values,
        weights,
        groups,
        ngroups,
        multiply=True,
        top_field=value_field,
        bottom_field=weight_field,
        zero_reason=ZERO_TOTAL,
    )


def ratio_of_sums_by_group(
    numerators: Any,
    denominators: Any,
    groups: Any,
    ngroups: int,
    *,
    numerator_field: str = "numerator",
    denominator_field: str = "denominator",
) -> list[Aggregate]:
    """sum(a)/sum(b) per group, over the rows where both a and b are non-null (a row with only one of
    them would inflate one side). A group with no complete row or a denominator sum of 0 gets None and
    the reason. Negative values are allowed (a net change over a total); infinite ones are refused."""
    return _by_group(
        numerators,
        denominators,
        groups,
        ngroups,
        multiply=False,
        top_field=numerator_field,
        bottom_field=denominator_field,
        zero_reason=ZERO_DENOMINATOR,
    )


def weighted_mean(values: Any, weights: Any, *, value_field: str = "value", weight_field: str = "weight") -> Aggregate:
    """sum(w*x)/sum(w) over one set of rows; see weighted_mean_by_group."""
    return weighted_mean_by_group(values, weights, None, 1, value_field=value_field, weight_field=weight_field)[0]


def ratio_of_sums(
    numerators: Any, denominators: Any, *, numerator_field: str = "numerator", denominator_field: str = "denominator"
) -> Aggregate:
    """sum(a)/sum(b) over one set of rows; see ratio_of_sums_by_group."""
    return ratio_of_sums_by_group(
        numerators, denominators, None, 1, numerator_field=numerator_field, denominator_field=denominator_field
    )[0]


def _tokens(name: str) -> list[str]:
    return [t.lower() for part in _SPLIT.split(name) for t in _CAMEL.split(part) if t]


def rate_like_reason(field: str, metadata: Mapping[str, Any] | None = None) -> str | None:
    """Why ``field`` looks like a rate, percentage, share, density or ratio, or None when it does not.

    ``metadata``: what is known about the field beyond its name (a contract's or a manifest's field
    record): a ``kind``/``quantity``/``aggregation_kind``/``measure`` of rate, percent, share, density,
    ratio, proportion, fraction or intensive says yes; count, total, sum, extensive, amount or id says no,
    whatever the name; a ``unit`` of '%', 'percent' or one with '/' or ' per ' says yes. Without a
    verdict from the metadata the name decides, token by token (split at non-letters and camelCase).
    """
    for key in METADATA_KEYS:
        kind = str((metadata or {}).get(key) or "").strip().lower()
        if kind in RATE_KINDS:
            return f"its {key} is {kind!r}"
        if kind in EXTENSIVE_KINDS:
            return None
    unit = str((metadata or {}).get("unit") or "").strip().lower()
    if unit and ("%" in unit or "percent" in unit or "/" in unit or " per " in f" {unit} "):
        return f"its unit is {unit!r}, a quotient"
    if "%" in field:
        return "its name holds '%'"
    for token in _tokens(field):
        if token in RATE_TOKENS:
            return f"its name holds {token!r} ({RATE_TOKENS[token]})"
        for stem, kind in RATE_SUFFIXES.items():
            if token.endswith(stem) and token != stem:
                return f"its name ends in {stem!r} ({kind})"
        for pattern, kind in RATE_PREFIXES:
            if pattern.match(token):
                return f"its name holds {token!r} ({kind})"
    return None


def warn_unweighted_mean(
    ctx: Warner,
    field: str,
    reason: str,
    *,
    weighted_syntax: str,
    argument: str,
    ratio_syntax: str | None = None,
    weight_candidates: Sequence[str] = (),
) -> None:
    """Warn (UNWEIGHTED_MEAN_OF_RATE) that a plain mean was taken of a rate-like field.

    ``reason``: rate_like_reason's answer. ``weighted_syntax``: the exact text the caller puts in
    ``argument`` for the weighted alternative, e.g. "density:weighted_mean:<weight field>";
    ``ratio_syntax`` likewise for a ratio of sums, where the operation offers one. ``weight_candidates``:
    fields of the data that could be the weight (its other numeric fields), named in the hint.
    """
    alternatives = f"{argument}={weighted_syntax!r}" + (f" or {argument}={ratio_syntax!r}" if ratio_syntax else "")
    if weight_candidates:
        alternatives += f" (numeric fields here: {', '.join(weight_candidates)})"
    ctx.warn(
        "UNWEIGHTED_MEAN_OF_RATE",
        f"the plain mean of {field!r} treats every feature alike, but {field!r} looks like a rate, share or "
        f"density ({reason}): over features of unequal size the mean of quotients is not the quotient of the "
        "whole",
        f"weight it by the size it is a quotient of: {alternatives} (weighted_mean is sum(w*x)/sum(w)); keep "
        "the plain mean only if every feature should count alike",
    )


def warn_if_rate_like(
    ctx: Warner,
    field: str,
    *,
    weighted_syntax: str,
    argument: str,
    ratio_syntax: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    weight_candidates: Sequence[str] = (),
) -> bool:
    """rate_like_reason + warn_unweighted_mean in one call; True when it warned."""
    reason = rate_like_reason(field, metadata)
    if reason is None:
        return False
    warn_unweighted_mean(
        ctx,
        field,
        reason,
        weighted_syntax=weighted_syntax,
        argument=argument,
        ratio_syntax=ratio_syntax,
        weight_candidates=weight_candidates,
    )
    return True
