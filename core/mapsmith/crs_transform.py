"""Choosing the operation that moves coordinates between two CRSs, and writing down why.

PROJ offers, for a pair of CRSs and an area of interest, a ranked list of operations it can run
here and a list it cannot (grids missing). This module takes the first of PROJ's operations that
really shifts the datum; when PROJ's direct list holds only a ballpark (datums treated as equal,
coordinates passed unchanged), it looks for a path through an intermediate datum, because PROJ
does not try one once a direct operation exists in its database, even an unrunnable one
(OSGB36 to ETRS89 without the OSTN15 grid is a ballpark, through WGS 84 it is ~3 m). Every
operation looked at is recorded with why it was or was not used.

Hand-written because PROJ's C API has a switch for intermediate CRSs that pyproj does not expose:
the datums that can serve as a pivot are read from PROJ's own ``proj.db`` (sqlite, opened
read-only), and each leg is still chosen by PROJ (``TransformerGroup``) for the area of interest.

What this module must never do:

* pass a ballpark between two different datums off as a transformation: it is refused unless the
  caller accepts it (``allow_ballpark``), with the error expected at the data in metres;
* let PROJ fetch grids over the network: the answer must not depend on connectivity;
* derive a return leg from an outbound one: each direction is asked of PROJ on its own (§3.7);
* import pyproj at module level (the server imports this at start-up through ``mapsmith.crs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith.errors import CRSError

if TYPE_CHECKING:
    from pyproj import CRS, Transformer
    from pyproj.crs import CoordinateOperation

    from mapsmith.crs import CRSLike

__all__ = ["choose_transformer"]

# The datum every other is most often tied to: tried first as a pivot, and the hub of the estimate
# of a ballpark's error when no direct operation exists anywhere.
_HUB_CRS = ("EPSG", "4326")
# Pivots tried beyond the hub. Each costs two PROJ searches (~20 ms); the list from proj.db is
# ordered hub first, then by how many operations tie the pivot to the two datums.
_MAX_PIVOTS = 8
# Entries written into the record; the count of the rest is written too.
_MAX_CONSIDERED = 25
# Where the error of a ballpark is sampled: the area's centre and its four corners.
_SAMPLE_FRACTIONS = ((0.5, 0.5), (0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0))


@dataclass
class _Candidate:
    """One way of moving the coordinates: a PROJ operation, or two legs through a pivot CRS."""

    name: str
    transformer: Transformer
    accuracy_m: float | None
    is_ballpark: bool
    area_of_use: dict[str, Any] | None
    coverage: float | None
    pivot: str | None = None
    legs: list[dict[str, Any]] = field(default_factory=list)

    def entry(self, verdict: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "operation": self.name,
            "accuracy_m": self.accuracy_m,
            "is_ballpark": self.is_ballpark,
            "area_of_use": self.area_of_use,
            "covers_area_of_interest": None if self.coverage is None else round(self.coverage, 4),
            "verdict": verdict,
        }
        if self.pivot is not None:
            out["via"] = self.pivot
            out["legs"] = self.legs
        return out


def choose_transformer(
    src: CRSLike,
    dst: CRSLike,
    area_of_interest: tuple[float, float, float, float] | None,
    *,
    allow_ballpark: bool | None = None,
) -> tuple[Transformer, dict[str, Any]]:
    """See ``mapsmith.crs.choose_transformer``, which delegates here."""
    import pyproj
    from pyproj.exceptions import ProjError
    from pyproj.transformer import AreaOfInterest, TransformerGroup

    from mapsmith.crs import _lonlat_bounds, crs_label, parse_crs

    # Grids must come from disk only: a run whose answer depends on connectivity is not
    # reproducible, and a missing grid is recorded instead.
    pyproj.network.set_network_enabled(False)

    src_crs, dst_crs = parse_crs(src), parse_crs(dst)
    bounds = None if area_of_interest is None else _lonlat_bounds(area_of_interest)
    evidence: dict[str, Any] = {
        "source_crs": crs_label(src_crs),
        "target_crs": crs_label(dst_crs),
        "area_of_interest_lonlat": None if bounds is None else list(bounds),
    }
    try:
        group = TransformerGroup(
            src_crs,
            dst_crs,
            always_xy=True,
            area_of_interest=None if bounds is None else AreaOfInterest(*bounds),
        )
    except ProjError as exc:
        raise CRSError(
            f"PROJ cannot relate {evidence['source_crs']} to {evidence['target_crs']}.",
            code="CRS_NO_TRANSFORMATION",
            evidence={**evidence, "engine_message": str(exc)},
            hint="Check both CRSs describe the same body (Earth) and are not engineering CRSs.",
        ) from exc

    missing = group.unavailable_operations
    if not group.transformers:
        grids = sorted({grid for op in missing for grid in _missing_grids(op)})
        raise CRSError(
            f"No operation from {evidence['source_crs']} to {evidence['target_crs']} is available on this machine.",
            code="CRS_NO_TRANSFORMATION",
            evidence={
                **evidence,
                "unavailable_operations": [op.name for op in missing],
                "missing_grids": grids,
            },
            hint=(
                f"Install the missing PROJ grid files ({', '.join(grids)}) into PROJ's data "
                "directory, e.g. with projsync."
                if grids
                else "PROJ knows no operation between these CRSs (another body, or an "
                "engineering CRS with no link to the Earth): pass a CRS of the same kind."
            ),
        )

    direct = [_direct_candidate(t, bounds) for t in group.transformers]
    chosen = next((c for c in direct if not c.is_ballpark), None)
    pivots: list[_Candidate] = []
    if chosen is None:
        # PROJ had only a ballpark to offer directly; a path through another datum may shift properly.
        pivots = _pivot_candidates(src_crs, dst_crs, bounds)
        usable = [p for p in pivots if not p.is_ballpark and p.accuracy_m is not None]
        if usable:
            chosen = min(usable, key=lambda p: (-(p.coverage or 0.0), p.accuracy_m))
    rule = _rule(chosen, bounds)
    ballpark_note: dict[str, Any] | None = None
    if chosen is None:
        chosen = direct[0]
        if _datums_differ(src_crs, dst_crs):
            ballpark_note = _ballpark_error(src_crs, dst_crs, bounds, chosen.transformer)
            if allow_ballpark is False:
                raise _ballpark_refusal(evidence, ballpark_note, missing, direct, pivots)
            # Say who let it through: the caller knowingly, or a step that warns instead of refusing.
            ballpark_note["accepted_by"] = (
                "allow_ballpark=true"
                if allow_ballpark
                else "not refused: the calling step warns instead (it has no allow_ballpark argument)"
            )
        rule = "only a ballpark is available: PROJ treats the datums as equal"

    better = _best_unavailable(missing)
    considered = _considered(chosen, direct, pivots, missing)
    record: dict[str, Any] = {
        "pipeline": _pipeline_string(chosen.transformer),
        "accuracy_m": chosen.accuracy_m,
        "is_ballpark": chosen.is_ballpark,
        # §3.7 gives this field one meaning: the published operation a ballpark stood in for.
        "better_available_m": better.accuracy if (chosen.is_ballpark and better is not None) else None,
        "x-mapsmith:description": chosen.name,
        "x-mapsmith:chosen_by": {
            "rule": rule,
            "area_of_interest_lonlat": evidence["area_of_interest_lonlat"],
            "available_operations": len(group.transformers),
            "unavailable_operations": len(missing),
            "intermediate_crs": chosen.pivot,
            "considered": considered[:_MAX_CONSIDERED],
            "considered_not_listed": max(0, len(considered) - _MAX_CONSIDERED),
        },
    }
    if ballpark_note is not None:
        record["x-mapsmith:chosen_by"]["ballpark"] = ballpark_note
    # A non-ballpark choice can still be worse than what a missing grid would give (a 10 m
    # Helmert standing in for 5 m NADCON); better_available_m may not say so, this key does.
    if better is not None and (chosen.accuracy_m is None or better.accuracy < chosen.accuracy_m):
        record["x-mapsmith:better_unavailable"] = {
            "operation": better.name,
            "accuracy_m": better.accuracy,
            "missing_grids": _missing_grids(better),
        }
    return chosen.transformer, record


# --- candidates ------------------------------------------------------------------------------


def _direct_candidate(transformer: Transformer, bounds: tuple[float, float, float, float] | None) -> _Candidate:
    area = transformer.area_of_use
    return _Candidate(
        name=transformer.description,
        transformer=transformer,
        accuracy_m=transformer.accuracy if transformer.accuracy >= 0 else None,
        is_ballpark=_is_ballpark(transformer),
        area_of_use=_area_dict(area),
        coverage=_coverage(bounds, None if area is None else tuple(area.bounds)),
    )


def _pivot_candidates(
    src: CRS, dst: CRS, bounds: tuple[float, float, float, float] | None, *, use_area: bool = True
) -> list[_Candidate]:
    """Two-leg paths src -> pivot -> dst, each leg PROJ's best non-ballpark operation for the area."""
    from pyproj import CRS, Transformer
    from pyproj.exceptions import ProjError
    from pyproj.transformer import AreaOfInterest, TransformerGroup

    from mapsmith.crs import crs_label

    aoi = AreaOfInterest(*bounds) if (bounds is not None and use_area) else None
    out = []
    for auth, code in _pivot_crs_codes(_datum_id(src), _datum_id(dst)):
        pivot = CRS.from_authority(auth, code)
        legs = []
        for a, b in ((src, pivot), (pivot, dst)):
            try:
                group = TransformerGroup(a, b, always_xy=True, area_of_interest=aoi)
            except ProjError:
                break
            leg = next((t for t in group.transformers if not _is_ballpark(t)), None)
            if leg is None or leg.accuracy < 0:
                break
            legs.append(leg)
        if len(legs) != 2:
            continue
        first, second = legs
        try:
            chained = Transformer.from_pipeline(_chain(first, second))
        except ProjError:
            continue
        areas = [t.area_of_use for t in legs]
        coverages = [_coverage(bounds, None if a is None else tuple(a.bounds)) for a in areas]
        known = [c for c in coverages if c is not None]
        out.append(
            _Candidate(
                name=f"{_short_name(first)} + {_short_name(second)}",
                transformer=chained,
                # PROJ's own convention for a concatenated operation: the legs' accuracies add.
                accuracy_m=first.accuracy + second.accuracy,
                is_ballpark=False,
                area_of_use=None,
                coverage=min(known) if len(known) == 2 else None,
                pivot=crs_label(pivot),
                legs=[
                    {"operation": _short_name(t), "accuracy_m": t.accuracy, "area_of_use": _area_dict(t.area_of_use)}
                    for t in legs
                ],
            )
        )
    return out


def _short_name(transformer: Transformer) -> str:
    """PROJ's description without its axis-order bookkeeping, which every always_xy leg carries."""
    steps = [part for part in transformer.description.split(" + ") if not part.startswith("axis order change")]
    return " + ".join(steps) or transformer.description


def _chain(first: Transformer, second: Transformer) -> str:
    """One PROJ pipeline running ``first`` then ``second``: both always_xy through the same
    geographic pivot, so the first's output is the second's input as is."""
    steps = []
    for leg in (first, second):
        text = _pipeline_string(leg) or "+proj=noop"
        if text.startswith("+proj=pipeline"):
            steps.append(text[len("+proj=pipeline") :].strip())
        else:
            steps.append(f"+step {text}")
    return "+proj=pipeline " + " ".join(steps)


def _datum_id(crs: CRS) -> tuple[str, str] | None:
    """The authority code of the CRS's horizontal datum (or datum ensemble), if it has one."""
    geodetic = crs.geodetic_crs
    datum = None if geodetic is None else geodetic.datum
    ident = None if datum is None else datum.to_json_dict().get("id")
    if not isinstance(ident, dict):
        return None
    return str(ident.get("authority")), str(ident.get("code"))


@cache
def _pivot_crs_codes(
    src_datum: tuple[str, str] | None, dst_datum: tuple[str, str] | None
) -> tuple[tuple[str, str], ...]:
    """Geographic 2D CRSs whose datum PROJ's database ties by an operation to both datums."""
    if src_datum is None or dst_datum is None:
        return (_HUB_CRS,)
    linked_src, linked_dst = _linked_datums(src_datum), _linked_datums(dst_datum)
    shared = {d: linked_src[d] + linked_dst[d] for d in set(linked_src) & set(linked_dst)} if linked_src else {}
    shared.pop(src_datum, None)
    shared.pop(dst_datum, None)
    order = sorted(shared, key=lambda d: (-shared[d], d))
    codes = [_HUB_CRS]
    with _proj_db() as db:
        for auth, code in order:
            row = db.execute(
                "SELECT auth_name, code FROM geodetic_crs WHERE datum_auth_name = ? AND datum_code = ? "
                "AND type = 'geographic 2D' AND deprecated = 0 ORDER BY auth_name != 'EPSG', CAST(code AS INTEGER)",
                (auth, code),
            ).fetchone()
            if row is not None and (str(row[0]), str(row[1])) not in codes:
                codes.append((str(row[0]), str(row[1])))
    return tuple(codes[: _MAX_PIVOTS + 1])


def _linked_datums(datum: tuple[str, str]) -> dict[tuple[str, str], int]:
    """Datums tied to ``datum`` by a non-deprecated transformation in either direction, with how many."""
    query = (
        "SELECT g2.datum_auth_name, g2.datum_code, count(*) FROM coordinate_operation_view op "
        "JOIN geodetic_crs g1 ON g1.auth_name = op.{a}_crs_auth_name AND g1.code = op.{a}_crs_code "
        "JOIN geodetic_crs g2 ON g2.auth_name = op.{b}_crs_auth_name AND g2.code = op.{b}_crs_code "
        "WHERE op.deprecated = 0 AND g1.datum_auth_name = ? AND g1.datum_code = ? "
        "AND g2.datum_auth_name IS NOT NULL GROUP BY g2.datum_auth_name, g2.datum_code"
    )
    out: dict[tuple[str, str], int] = {}
    with _proj_db() as db:
        for a, b in (("source", "target"), ("target", "source")):
            for auth, code, n in db.execute(query.format(a=a, b=b), datum):
                key = (str(auth), str(code))
                out[key] = out.get(key, 0) + int(n)
    return out


class _proj_db:  # noqa: N801 -- used as a context manager, named like one
    """PROJ's own database, read-only: the same file pyproj's PROJ reads, so codes agree."""

    def __enter__(self) -> Any:
        import sqlite3
        from pathlib import Path

        import pyproj

        path = Path(pyproj.datadir.get_data_dir().split(":")[0]) / "proj.db"
        self.db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        return self.db

    def __exit__(self, *exc: object) -> None:
        self.db.close()


# --- ballparks -------------------------------------------------------------------------------


def _datums_differ(src: CRS, dst: CRS) -> bool:
    """Whether the horizontal datums differ: a ballpark between the same datum moves nothing wrongly."""
    a, b = src.geodetic_crs, dst.geodetic_crs
    if a is None or b is None:
        return True
    return not (a.datum == b.datum and a.prime_meridian == b.prime_meridian)


def _ballpark_error(
    src: CRS, dst: CRS, bounds: tuple[float, float, float, float] | None, ballpark: Transformer
) -> dict[str, Any]:
    """How far the ballpark puts points from where a datum shift would, sampled at the data.

    The shift is taken from the operation PROJ would use with no area of interest (its largest
    area of use), directly or through WGS 84: outside its area of use it is not accurate, but the
    datums' offset is what the ballpark ignores, and this is its size at the data.
    """
    from pyproj import Geod, Transformer
    from pyproj.transformer import TransformerGroup

    estimate_with: _Candidate | None = None
    direct = TransformerGroup(src, dst, always_xy=True)
    found = next((t for t in direct.transformers if not _is_ballpark(t)), None)
    if found is not None:
        estimate_with = _direct_candidate(found, None)
    else:
        pivots = [p for p in _pivot_candidates(src, dst, None, use_area=False) if p.accuracy_m is not None]
        estimate_with = pivots[0] if pivots else None
    note: dict[str, Any] = {"expected_error_m": None, "estimated_with": None, "sampled_at_lonlat": []}
    if estimate_with is None or bounds is None:
        return note
    west, south, east, north = bounds
    if west > east:
        east += 360.0
    samples = [(west + fx * (east - west), south + fy * (north - south)) for fx, fy in _SAMPLE_FRACTIONS]
    samples = [((lon + 180.0) % 360.0 - 180.0, lat) for lon, lat in samples]
    src_geog, dst_geog = src.geodetic_crs, dst.geodetic_crs
    to_src = Transformer.from_crs(src_geog, src, always_xy=True)
    to_geog = Transformer.from_crs(dst, dst_geog, always_xy=True)
    geod = Geod(ellps="WGS84") if dst_geog is None else dst_geog.get_geod()
    distances = []
    for lon, lat in samples:
        x, y = to_src.transform(lon, lat)
        a = to_geog.transform(*ballpark.transform(x, y))
        b = to_geog.transform(*estimate_with.transformer.transform(x, y))
        if geod is None or not all(math.isfinite(v) for v in (*a, *b)):
            continue
        distances.append(geod.inv(a[0], a[1], b[0], b[1])[2])
        note["sampled_at_lonlat"].append([round(lon, 6), round(lat, 6)])
    if distances:
        note["expected_error_m"] = round(max(distances), 1)
        note["estimated_with"] = estimate_with.name
    return note


def _ballpark_refusal(
    evidence: dict[str, Any],
    note: dict[str, Any],
    missing: list[CoordinateOperation],
    direct: list[_Candidate],
    pivots: list[_Candidate],
) -> CRSError:
    error_m = note["expected_error_m"]
    size = (
        f"points would land about {error_m:g} m from where the datum shift puts them (estimated with "
        f"{note['estimated_with']})"
        if error_m is not None
        else "PROJ knows no operation between these datums anywhere, so the error cannot be estimated; "
        "offsets between different datums are commonly tens to hundreds of metres"
    )
    grids = sorted({grid for op in missing for grid in _missing_grids(op)})
    fix = f"install the PROJ grid files {', '.join(grids)} and run again, or " if grids else ""
    return CRSError(
        f"{evidence['source_crs']} and {evidence['target_crs']} are on different datums and the only operation "
        f"available here is a ballpark, which treats them as equal: {size}.",
        code="CRS_BALLPARK_REFUSED",
        evidence={
            **evidence,
            "expected_error_m": error_m,
            "estimated_with": note["estimated_with"],
            "sampled_at_lonlat": note["sampled_at_lonlat"],
            "considered": [c.entry("ballpark") for c in direct if c.is_ballpark][:3]
            + [p.entry("not usable") for p in pivots][:5],
            "unavailable_operations": [op.name for op in missing][:10],
            "missing_grids": grids,
        },
        hint=(
            f"{fix}pass allow_ballpark=true to accept an error of about "
            f"{'an unknown number of' if error_m is None else format(error_m, 'g')} metres knowingly, or "
            "reproject to a CRS on the source's datum (resolve_crs finds one)"
        ),
    )


# --- the record ------------------------------------------------------------------------------


def _rule(chosen: _Candidate | None, bounds: tuple[float, float, float, float] | None) -> str:
    if chosen is None:
        return ""
    if chosen.pivot is not None:
        return (
            f"PROJ offered only a ballpark directly; the most accurate path through an intermediate datum "
            f"({chosen.pivot}) covering the area of interest was taken"
        )
    if bounds is None:
        return (
            "first non-ballpark of PROJ's available operations, ranked by size of area of use "
            "(no area of interest given)"
        )
    return (
        "first non-ballpark of PROJ's available operations, ranked for the area of interest (coverage, then accuracy)"
    )


def _considered(
    chosen: _Candidate, direct: list[_Candidate], pivots: list[_Candidate], missing: list[CoordinateOperation]
) -> list[dict[str, Any]]:
    out = []
    for c in [*direct, *pivots]:
        out.append(c.entry("chosen" if c is chosen else _why_not(c, chosen)))
    for op in missing:
        out.append(
            {
                "operation": op.name,
                "accuracy_m": op.accuracy if op.accuracy >= 0 else None,
                "is_ballpark": bool(op.has_ballpark_transformation),
                "area_of_use": _area_dict(op.area_of_use),
                "verdict": f"not runnable here: needs grid files not installed ({', '.join(_missing_grids(op))})",
            }
        )
    return out


def _why_not(candidate: _Candidate, chosen: _Candidate) -> str:
    if candidate.is_ballpark:
        return "ballpark: treats the datums as equal, no datum shift"
    if chosen.is_ballpark:
        return "not usable"
    if (candidate.coverage or 0.0) < (chosen.coverage or 0.0):
        return (
            f"covers less of the area of interest ({100 * (candidate.coverage or 0.0):.0f} % against "
            f"{100 * (chosen.coverage or 0.0):.0f} %)"
        )
    if candidate.accuracy_m is None:
        return "states no accuracy"
    if chosen.accuracy_m is not None and candidate.accuracy_m > chosen.accuracy_m:
        return f"less accurate ({candidate.accuracy_m:g} m against {chosen.accuracy_m:g} m)"
    if candidate.pivot is not None:
        return "a path through an intermediate datum, used only when PROJ offers no direct datum shift"
    return "ranked lower by PROJ for the area of interest"


def _area_dict(area: Any) -> dict[str, Any] | None:
    if area is None:
        return None
    return {"name": area.name, "bounds_lonlat": [area.west, area.south, area.east, area.north]}


def _coverage(aoi: tuple[float, float, float, float] | None, area: tuple[float, ...] | None) -> float | None:
    """The share of the area of interest (as a lon/lat box) inside an operation's area of use."""
    if aoi is None or area is None:
        return None
    aoi_parts, area_parts = _split(aoi), _split(area)
    total = sum((e - w) * (n - s) for w, s, e, n in aoi_parts)
    if total <= 0.0:
        # A point or a line: inside or not.
        w, s, e, n = aoi_parts[0]
        return 1.0 if any(aw <= w and e <= ae and as_ <= s and n <= an for aw, as_, ae, an in area_parts) else 0.0
    inside = 0.0
    for w, s, e, n in aoi_parts:
        for aw, as_, ae, an in area_parts:
            dx, dy = min(e, ae) - max(w, aw), min(n, an) - max(s, as_)
            if dx > 0 and dy > 0:
                inside += dx * dy
    return min(1.0, inside / total)


def _split(box: tuple[float, ...]) -> list[tuple[float, float, float, float]]:
    """A box crossing the antimeridian as two boxes that do not."""
    w, s, e, n = (float(v) for v in box)
    if w <= e:
        return [(w, s, e, n)]
    return [(w, s, 180.0, n), (-180.0, s, e, n)]


def _pipeline_string(transformer: Transformer) -> str | None:
    """The PROJ string of the operation, the form ``cct`` and ``projinfo`` accept back."""
    from pyproj.exceptions import ProjError

    try:
        return transformer.to_proj4()
    except ProjError:
        # An operation PROJ can run but not export as a PROJ string; its definition is the
        # nearest thing, and §3.7 allows null when there is none.
        return transformer.definition or None


def _is_ballpark(transformer: Transformer) -> bool:
    """Whether PROJ flagged any step of the operation as a ballpark (datums treated as equal).

    Read from PROJ's own flag, not from operation names. A concatenated operation carries the
    flag on its steps (rebuilding the whole from JSON loses it); a single one has no steps, and
    its JSON keeps the flag.
    """
    from pyproj.crs import CoordinateOperation

    steps = transformer.operations
    if steps:
        return any(step.has_ballpark_transformation for step in steps)
    return bool(CoordinateOperation.from_json(transformer.to_json()).has_ballpark_transformation)


def _best_unavailable(operations: list[CoordinateOperation]) -> CoordinateOperation | None:
    """The first operation, in PROJ's ranking for the area, that states an accuracy: the one a
    missing grid kept from being used. Ranked, not merely the smallest number, so that a grid for
    Texas is not reported as what the whole conterminous US is missing.
    """
    for operation in operations:
        if operation.accuracy >= 0 and not operation.has_ballpark_transformation:
            return operation
    return None


def _missing_grids(operation: CoordinateOperation) -> list[str]:
    """Short names of the grid files an operation needs and this machine has not got."""
    return [grid.short_name for grid in operation.grids if not grid.available]
