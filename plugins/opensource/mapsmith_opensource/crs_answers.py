"""What every resolve_crs answer is made of: its shape, a CRS's own code and area of use, EPSG names.

Shared by the readers of codes and definitions (``crs_ops``), of zone descriptions
(``crs_zones``) and the database search (``crs_search``), so that each answers in the same form.

What this module must never do: pick one of several CRSs sharing a name (they are answered as
candidates), or import pyproj at module level (the server imports plugins at start-up).
"""

from __future__ import annotations

import unicodedata
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyproj import CRS

# Enough to show every datum's variants of one central meridian; more is a list nobody reads.
MAX_CANDIDATES = 40
# A definition (WKT, PROJ string) is taken to *be* an EPSG code only at this confidence, the same
# bar mapsmith.crs uses for labels; below it the matches are offered as candidates.
IDENTIFY_MIN_CONFIDENCE = 90
OFFER_MIN_CONFIDENCE = 50

_EXAMPLES = (
    "EPSG:4528; CGCS2000 3-degree Gauss-Kruger zone 40; Xian 1980 6-degree zone 20; "
    "CGCS2000 3-degree central meridian 117 without zone prefix; WGS 84 UTM 33N; CGCS2000 3度带第40带"
)


# -- a CRS's identity and area ---------------------------------------------------------------


def _own_id(crs: CRS) -> tuple[str, str] | None:
    """The identifier the definition itself carries (``EPSG:102100`` is ESRI's, and says so)."""
    ident = crs.to_json_dict().get("id")
    if not ident:
        return None
    return str(ident["authority"]), str(ident["code"])


def _area(crs: CRS) -> dict[str, Any] | None:
    area = crs.area_of_use
    if area is None:
        return None
    return {"name": area.name, "bounds": [area.west, area.south, area.east, area.north]}


def _epsg_match(crs: CRS) -> tuple[int | None, list[tuple[str, int]]]:
    """The EPSG code ``crs`` is, if PROJ is sure, and any weaker matches as (code, confidence)."""
    matches = crs.list_authority(auth_name="EPSG", min_confidence=OFFER_MIN_CONFIDENCE)
    sure = {m.code for m in matches if m.confidence >= IDENTIFY_MIN_CONFIDENCE}
    weak = [(m.code, m.confidence) for m in matches]
    return (int(next(iter(sure))) if len(sure) == 1 else None), weak


def _answer(status: str, parsed: dict[str, Any], **fields: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "status": status,
        "epsg": None,
        "code": None,
        "name": None,
        "area_of_use": None,
        "candidates": [],
        "parsed": parsed,
    }
    answer.update(fields)
    return answer


def _resolved_crs(crs: CRS, parsed: dict[str, Any], code: str | None, **extra: Any) -> dict[str, Any]:
    own = _own_id(crs)
    epsg: int | None = int(own[1]) if own and own[0] == "EPSG" else None
    notes: list[str] = []
    if epsg is None:
        epsg, _ = _epsg_match(crs)
        if epsg is not None and own is not None:
            notes.append(f"{own[0]}:{own[1]} is the same definition as EPSG:{epsg}")
    if own is not None and code is not None and code != f"{own[0]}:{own[1]}":
        notes.append(f"{code} is not a code of its own: PROJ reads it as {own[0]}:{own[1]}")
    if crs.is_deprecated:
        replacements = [f"{c.to_authority()[0]}:{c.to_authority()[1]}" for c in crs.get_non_deprecated()]
        notes.append("this code is deprecated" + (f"; replaced by {', '.join(replacements)}" if replacements else ""))
        extra["deprecated"] = True
    answer = _answer(
        "resolved",
        parsed,
        epsg=epsg,
        code=f"{own[0]}:{own[1]}" if own else (f"EPSG:{epsg}" if epsg else code),
        name=crs.name,
        area_of_use=_area(crs),
        **extra,
    )
    if notes:
        answer["note"] = "; ".join(notes)
    return answer


# -- names ------------------------------------------------------------------------------------


def _normalise_name(name: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", name).lower().split())


@cache
def _names() -> dict[str, tuple[tuple[int, str], ...]]:
    """Current EPSG projected, geographic 2D and compound CRS names (normalised) to their codes."""
    from pyproj.database import query_crs_info
    from pyproj.enums import PJType

    out: dict[str, list[tuple[int, str]]] = {}
    types = [PJType.PROJECTED_CRS, PJType.GEOGRAPHIC_2D_CRS, PJType.COMPOUND_CRS]
    for info in query_crs_info(auth_name="EPSG", pj_types=types, allow_deprecated=False):
        entry = (int(info.code), info.name)
        bucket = out.setdefault(_normalise_name(info.name), [])
        if entry not in bucket:
            bucket.append(entry)
    return {k: tuple(v) for k, v in out.items()}


def _resolve_named(matches: tuple[tuple[int, str], ...]) -> dict[str, Any]:
    from pyproj import CRS

    parsed: dict[str, Any] = {"form": "name"}
    if len(matches) == 1:
        return _resolved_crs(CRS.from_epsg(matches[0][0]), parsed, None)
    candidates = []
    for code, name in matches:
        crs = CRS.from_epsg(code)
        candidates.append({"code": f"EPSG:{code}", "epsg": code, "name": name, "area_of_use": _area(crs)})
    return _answer(
        "needs_clarification",
        parsed,
        candidates=candidates,
        missing=["which of the CRSs sharing this name"],
        hint="several current EPSG CRSs carry exactly this name; pass the code of the one meant",
    )
