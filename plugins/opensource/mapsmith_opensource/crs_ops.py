"""CRS answers on the opensource stack: which EPSG code a description means, or which it might.

``resolve_crs`` reads what a person writes for a coordinate system -- an authority code, WKT,
PROJJSON, an EPSG name, or a plain description such as "CGCS2000 3-degree Gauss-Kruger zone 40"
or "西安80 6度带第20带" -- and answers from PROJ's own EPSG database: the code, its name and area of
use, the reading of the description it used, and, when the words fit several systems, every
candidate with what separates them.

This module reads codes and definitions and routes the rest: zone-system phrases to
``crs_zones``, and words that are a CRS's name, alias or country ("RGF93 Lambert 93", "Egypt
national grid") to ``crs_search``; the answer's shape lives in ``crs_answers``.

What this module must never do:

* pick one of several candidates: a datum left unnamed, a zone width left open, or a central
  meridian that fits both a zone-prefixed and an unprefixed grid is answered with
  ``needs_clarification`` and the candidates, because the wrong grid moves data by hundreds of
  kilometres or by a datum shift while looking plausible;
* read ``srid:<n>`` as an EPSG code (an SRID is a database's row number; ``parse_crs`` refuses it);
* hand free text to PROJ's name matching, which approximates: descriptions are parsed here, and
  every code answered is looked up in the database by the attributes parsed;
* import pyproj at module level (the server imports plugins at start-up).
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Any

from mapsmith.crs import parse_crs
from mapsmith.errors import ArgumentError, CRSError
from mapsmith_opensource.crs_answers import (
    _EXAMPLES,
    IDENTIFY_MIN_CONFIDENCE,
    MAX_CANDIDATES,
    _answer,
    _area,
    _epsg_match,
    _names,
    _normalise_name,
    _own_id,
    _resolve_named,
    _resolved_crs,
)
from mapsmith_opensource.crs_zones import _resolve_words
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from pyproj import CRS

    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("resolve_crs", "resolve_crs", engine="pyproj"),)

# Authorities whose codes are numbers, checked when a bare number is given.
NUMERIC_AUTHORITIES = ("EPSG", "ESRI", "IAU_2015")

_SRID = re.compile(r"^srid\s*[:=]?\s*(?P<n>[+-]?\d+)$")
_AUTH_CODE = re.compile(
    r"^(?P<auth>[a-z][a-z0-9_]*)\s*[:：]\s*(?P<code>[a-z0-9_.]+)$|^(?P<auth2>epsg|esri)\s*(?P<code2>\d+)$"
)
_BARE_NUMBER = re.compile(r"^\d+$")
_WKT = re.compile(r"^[a-z_0-9]+\s*\[")


def resolve_crs(ctx: RunContext) -> None:
    import pyproj
    from pyproj.database import get_database_metadata

    epsg_version = get_database_metadata("EPSG.VERSION") or "unknown"
    ctx.set_engine("pyproj", pyproj.__version__, PROJ=pyproj.proj_version_str, EPSG=epsg_version)
    answer = resolve_description(ctx.arguments["description"])
    answer["epsg_database"] = epsg_version
    ctx.answer = answer


def resolve_description(description: str) -> dict[str, Any]:
    """The answer for one description: ``status`` resolved | needs_clarification | not_found.

    Raises ``ArgumentError`` (``DESCRIPTION_EMPTY``) for an empty description and ``CRSError``
    (``CRS_AMBIGUOUS_SRID``, ``CRS_INVALID``) for an SRID without authority or a definition PROJ
    cannot read.
    """
    text = unicodedata.normalize("NFKC", description).strip()
    if not text:
        raise ArgumentError(
            "resolve_crs needs a description; it is empty",
            code="DESCRIPTION_EMPTY",
            evidence={"argument": "description"},
            hint=f"describe the CRS, e.g. {_EXAMPLES}",
        )
    low = " ".join(text.lower().split())
    srid = _SRID.match(low)
    if srid:
        parse_crs(f"srid:{srid.group('n')}")  # raises CRS_AMBIGUOUS_SRID, the refusal every CRS argument gives
    code = _AUTH_CODE.match(low)
    if code and not low.startswith(("http", "urn")):
        auth = (code.group("auth") or code.group("auth2")).upper()
        number = code.group("code") or code.group("code2")
        return _resolve_code(f"{auth}:{number.upper()}", given_code=True)
    if low.startswith(("urn:", "http://", "https://")):
        return _resolve_code(text, given_code=False)
    if _BARE_NUMBER.match(low):
        return _resolve_number(int(low))
    if low.startswith("{"):
        return _resolve_definition(text, "projjson")
    if low.startswith("+proj") or low.startswith("+init"):
        return _resolve_definition(text, "proj_string")
    if _WKT.match(low):
        return _resolve_definition(text, "wkt")
    named = _names().get(_normalise_name(text))
    if named:
        return _resolve_named(named)
    return _resolve_words(low)


# -- codes and definitions --------------------------------------------------------------------


def _resolve_code(value: str, given_code: bool) -> dict[str, Any]:
    """An authority code (or its URN / URL form): a code the database lacks is not found, not malformed."""
    try:
        crs = parse_crs(value)
    except CRSError as exc:
        if exc.code != "CRS_INVALID":
            raise
        return _answer(
            "not_found",
            {"form": "authority_code", "code": value},
            hint=f"PROJ's database has no {value}: check the number (EPSG codes are listed at epsg.org), or "
            f"describe the CRS in words, e.g. {_EXAMPLES}",
        )
    return _resolve_definition(crs, "authority_code", value if given_code else None)


def _resolve_definition(value: str | CRS, form: str, given_code: str | None = None) -> dict[str, Any]:
    crs = parse_crs(value)  # CRS_INVALID when PROJ cannot read it
    parsed: dict[str, Any] = {"form": form}
    own = _own_id(crs)
    if own is not None:
        parsed["authority"], parsed["code"] = own
        return _resolved_crs(crs, parsed, given_code)
    sure, weak = _epsg_match(crs)
    if sure is not None:
        parsed["identified_by"] = (
            f"PROJ matched the definition to EPSG:{sure} with confidence >= {IDENTIFY_MIN_CONFIDENCE}"
        )
        return _resolved_crs(crs, parsed, None)
    if weak:
        from pyproj import CRS

        candidates = []
        for code, confidence in sorted(weak, key=lambda m: -m[1])[:MAX_CANDIDATES]:
            match = CRS.from_epsg(int(code))
            candidates.append(
                {
                    "code": f"EPSG:{code}",
                    "epsg": int(code),
                    "name": match.name,
                    "area_of_use": _area(match),
                    "confidence": confidence,
                }
            )
        return _answer(
            "needs_clarification",
            parsed,
            name=crs.name,
            candidates=candidates,
            missing=["a complete definition"],
            hint="the definition matches these EPSG codes only partly (PROJ's confidence is given; an axis "
            "order or unit left unstated lowers it): use a code if it is the CRS meant, or keep the definition",
        )
    return _answer(
        "not_found",
        parsed,
        name=crs.name,
        hint="PROJ reads this definition, but it matches no EPSG code: pass the definition itself wherever a "
        "CRS is asked for",
    )


def _resolve_number(number: int) -> dict[str, Any]:
    """A bare number: PROJ reads it as an EPSG code; answered so only when no other authority has it."""
    from pyproj import CRS
    from pyproj.exceptions import CRSError as ProjCRSError

    found: dict[tuple[str, str], CRS] = {}
    for auth in NUMERIC_AUTHORITIES:
        try:
            crs = CRS.from_authority(auth, str(number))
        except ProjCRSError:
            continue
        own = _own_id(crs) or (auth, str(number))
        found.setdefault(own, crs)
    parsed: dict[str, Any] = {"form": "bare_number", "number": number}
    if not found:
        return _answer(
            "not_found",
            parsed,
            hint=f"no authority in PROJ's database has a CRS numbered {number}; check the number, or describe the "
            f"CRS in words (e.g. {_EXAMPLES})",
        )
    if len(found) == 1:
        ((auth, code), crs) = next(iter(found.items()))
        parsed["authority"] = auth
        parsed["assumed"] = (
            f"a bare number names no authority; {number} exists only as {auth}:{code} in PROJ's database, "
            "which is also how PROJ reads a bare number"
        )
        return _resolved_crs(crs, parsed, None)
    candidates = [
        {"code": f"{a}:{c}", "epsg": int(c) if a == "EPSG" else None, "name": crs.name, "area_of_use": _area(crs)}
        for (a, c), crs in sorted(found.items())
    ]
    return _answer(
        "needs_clarification",
        parsed,
        candidates=candidates,
        missing=["authority"],
        hint=f"{number} is a code of several authorities: write it with its authority, e.g. {candidates[0]['code']}",
    )
