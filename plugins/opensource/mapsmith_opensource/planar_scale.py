"""The scale error of a planar measure, measured at the data: how far an area or a length taken in a
projected CRS's own plane is from the ground (geodesic) figure of the same features.

Analysts ask for the area "in EPSG:32632", and a planar measure in any projected CRS is a legitimate
answer as long as its distance from the ground figure is stated. The error is measured, not read off
the projection's name or its scale factors at one point: the planar figures of the features (all of
them, or an even sample of ``SCALE_SAMPLE`` on larger layers) are compared with their geodesic figures
on the layer's own ellipsoid. An equal-area CRS comes out near 0 % for areas, a UTM zone near its
central meridian at -0.08 % (k0^2 = 0.9992), a sphere-only equal-area projection (Mollweide on WGS 84)
at a few tenths of a percent, Web Mercator at 46 N at about +108 %.

What this module must never do: accept a geographic CRS (degrees are not lengths), or let a planar
figure leave without its measured scale error in the answer and the manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, is_equal_area
from mapsmith.errors import CRSError
from mapsmith_opensource.common import MAX_SCALE_DISTORTION

if TYPE_CHECKING:
    from pyproj import CRS

    from mapsmith.runner import RunContext

# Features compared with their geodesic figure on a large layer (an even sample: geodesic areas
# are a Python loop per polygon, about 50 microseconds each).
SCALE_SAMPLE = 1000
# An equal-area CRS whose planar areas are this close to the ellipsoid's is equal-area here.
EQUAL_AREA_SLACK = 1e-4


def refuse_degrees(ctx: RunContext, crs: CRS, what: str) -> None:
    """A planar measure needs a projected CRS: degrees of longitude are not a length anywhere."""
    if crs.is_geographic or not crs.is_projected:
        raise CRSError(
            f"a planar {what} in {crs_label(crs)} is not a ground {what}: its coordinates are degrees, not lengths",
            code="CRS_NOT_PROJECTED",
            evidence={"crs": crs_label(crs), "method": "planar", "path": ctx.given_paths.get("input_path", "")},
            hint="use method='geodesic' (the default, right in any CRS), or reproject_layer to a projected CRS "
            "(an equal-area one for areas) and measure planar there",
        )


def sample_rows(count: int) -> list[int]:
    """All rows, or ``SCALE_SAMPLE`` rows spread evenly over the layer (first and last included)."""
    if count <= SCALE_SAMPLE:
        return list(range(count))
    step = (count - 1) / (SCALE_SAMPLE - 1)
    return sorted({round(i * step) for i in range(SCALE_SAMPLE)})


def record_scale_error(
    ctx: RunContext,
    crs: CRS,
    rows: list[int],
    planar: Sequence[float | None],
    ground: Sequence[float | None],
    *,
    what: str,
    unit: str,
    total_count: int,
) -> dict[str, Any]:
    """Compare planar with ground figures of the same ``rows``; record the error everywhere it belongs.

    ``planar`` and ``ground`` are aligned with ``rows``. Returns the record for the answer; the same
    record goes to the manifest's parameters, a note, and (above 1 %) a PLANAR_SCALE_ERROR warning.
    """
    pairs = [(p, g) for p, g in zip(planar, ground, strict=True) if p is not None and g is not None and g > 0]
    planar_sum = sum(p for p, _ in pairs)
    ground_sum = sum(g for _, g in pairs)
    label = crs_label(crs)
    equal_area = is_equal_area(crs)
    if not ground_sum:
        record: dict[str, Any] = {
            "relative": None,
            "statement": f"no feature has a {what} to compare, so the scale error of {label} here is unknown",
        }
    else:
        relative = planar_sum / ground_sum - 1
        ratios = [p / g - 1 for p, g in pairs]
        direction = "below" if relative < 0 else "above"
        kind = ""
        if what == "area":
            # Spherical equal-area methods (Mollweide on WGS 84) are equal-area by name only.
            kind = (
                " (not equal-area)"
                if not equal_area
                else " (equal-area)"
                if abs(relative) <= EQUAL_AREA_SLACK
                else " (equal-area on a sphere, not on this ellipsoid)"
            )
        record = {
            "relative": relative,
            "percent": relative * 100,
            "range_percent": [min(ratios) * 100, max(ratios) * 100],
            "planar_" + unit: planar_sum,
            "ground_" + unit: ground_sum,
            "statement": f"planar {what} in {label}{kind} is {abs(relative):.2%} {direction} the ground "
            f"(geodesic) {what} of these features",
        }
    record.update(
        crs=label,
        equal_area=equal_area,
        features_compared=len(rows),
        feature_count=total_count,
        compared_with=f"geodesic {what} on the {crs.ellipsoid.name if crs.ellipsoid else 'unknown'} ellipsoid",
    )
    ctx.parameters["x-mapsmith:planar_scale_error"] = record
    ctx.notes.append(
        record["statement"]
        + (f" (measured on {len(rows)} of {total_count} features, spread evenly)" if len(rows) < total_count else "")
    )
    relative_error = record["relative"]
    if relative_error is not None and abs(relative_error) > MAX_SCALE_DISTORTION:
        ctx.warn(
            "PLANAR_SCALE_ERROR",
            f"{record['statement']}: {label}'s scale at the data is far from true",
            "use method='geodesic' (the default) for ground figures, or reproject_layer to a CRS whose scale is "
            f"true here ({'an equal-area CRS such as EPSG:6933' if what == 'area' else 'the local UTM zone'})",
        )
    return record
