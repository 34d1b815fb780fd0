"""CRS answers on the opensource stack: which EPSG code a description means, or which it might.

``resolve_crs`` reads what a person writes for a coordinate system -- an authority code, WKT,
PROJJSON, an EPSG name, or a plain description such as "CGCS2000 3-degree Gauss-Kruger zone 40"
or "西安80 6度带第20带" -- and answers from PROJ's own EPSG database: the code, its name and area of
use, the reading of the description it used, and, when the words fit several systems, every
candidate with what separates them.

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
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from mapsmith.crs import parse_crs
from mapsmith.errors import ArgumentError, CRSError
from mapsmith_opensource.registration import Registration

if TYPE_CHECKING:
    from pyproj import CRS

    from mapsmith.runner import RunContext

REGISTRATIONS = (Registration("resolve_crs", "resolve_crs", engine="pyproj"),)

# Enough to show every datum's variants of one central meridian; more is a list nobody reads.
MAX_CANDIDATES = 40
# A definition (WKT, PROJ string) is taken to *be* an EPSG code only at this confidence, the same
# bar mapsmith.crs uses for labels; below it the matches are offered as candidates.
IDENTIFY_MIN_CONFIDENCE = 90
OFFER_MIN_CONFIDENCE = 50
# Authorities whose codes are numbers, checked when a bare number is given.
NUMERIC_AUTHORITIES = ("EPSG", "ESRI", "IAU_2015")

# Datums by the names people write, mapped to the datum part of EPSG's CRS names
# ("Xian 1980 / Gauss-Kruger zone 20"). Other datums are recognised by their EPSG spelling.
DATUM_ALIASES: tuple[tuple[str, str], ...] = (
    (
        "CGCS2000",
        r"cgcs[\s_-]*2000|china[\s_-]+geodetic[\s_-]+coordinate[\s_-]+system[\s_-]+2000"
        r"|国家\s*2000|2000\s*国家|中国\s*2000|2000\s*中国",
    ),
    ("Xian 1980", r"xi[\s'’_-]*an[\s_-]*(?:19)?80|(?:19)?80[\s_-]*xi[\s'’_-]*an|西安[\s_-]*(?:19)?80|(?:19)?80\s*西安"),
    ("Beijing 1954", r"beijing[\s_-]*(?:19)?54|(?:19)?54[\s_-]*beijing|北京[\s_-]*(?:19)?54|(?:19)?54\s*北京"),
    ("New Beijing", r"new[\s_-]*beijing(?:[\s_-]*(?:19)?54)?|新北京(?:\s*(?:19)?54)?"),
    ("WGS 84", r"wgs[\s_-]*(?:19)?84"),
)
# Listed first among candidates: the datums a Gauss-Kruger description most often means.
DATUM_ORDER = ("CGCS2000", "Xian 1980", "Beijing 1954", "New Beijing", "WGS 84")
# The geographic CRS a datum names on its own, where EPSG spells the CRS differently from the datum.
GEOGRAPHIC_BY_DATUM = {"CGCS2000": 4490}

_GK_NAME = re.compile(r"^(?P<datum>.+) / (?P<three>3-degree )?Gauss-Kruger (?:zone \d+|CM \d+E)$")
_UTM_NAME = re.compile(r"^(?P<datum>.+) / UTM zone (?P<zone>\d+)(?P<hemisphere>[NS])$")

_SRID = re.compile(r"^srid\s*[:=]?\s*(?P<n>[+-]?\d+)$")
_AUTH_CODE = re.compile(
    r"^(?P<auth>[a-z][a-z0-9_]*)\s*[:：]\s*(?P<code>[a-z0-9_.]+)$|^(?P<auth2>epsg|esri)\s*(?P<code2>\d+)$"
)
_BARE_NUMBER = re.compile(r"^\d+$")
_WKT = re.compile(r"^[a-z_0-9]+\s*\[")

_WIDTH = (
    (re.compile(r"(?<![0-9.])3\s*(?:-\s*)?(?:degrees?|deg|°|度)|three[\s-]*degrees?|三度"), 3),
    (re.compile(r"(?<![0-9.])6\s*(?:-\s*)?(?:degrees?|deg|°|度)|six[\s-]*degrees?|六度"), 6),
)
_ZONE = (
    re.compile(r"(?<![a-z])zone\s*(?:no\.?|number|#)?\s*(?P<zone>\d{1,2})(?!\d)\s*(?P<h>[ns](?![a-z]))?"),
    re.compile(r"(?<![a-z])utm\s*(?:zone\s*)?(?P<zone>\d{1,2})(?!\d)\s*(?P<h>[ns](?![a-z]))?"),
    re.compile(r"第\s*(?P<zone>\d{1,2})\s*号?\s*(?:度)?带"),
    re.compile(r"(?<![0-9.])(?P<zone>\d{1,2})\s*号?带(?!号)"),
    re.compile(r"带号\s*[:：为是]?\s*(?P<zone>\d{1,2})(?!\d)"),
)
_CM = re.compile(
    r"(?:central[\s_-]*meridian|(?<![a-z])cm|(?<![a-z])lon_?0|中央经线|中央子午线|中央经度)"
    r"\s*(?:=|:|：|is|of|at|为|是)?\s*(?:东经|e(?=\s*\d))?\s*(?P<cm>-?\d{1,3}(?:\.\d+)?)"
    r"\s*(?:°|degrees?|deg|度)?\s*(?P<side>[ew](?![a-z])|east|west|东|西)?"
)
_FALSE_EASTING = re.compile(r"false[\s_-]*easting\s*(?:=|:|is|of)?\s*(?P<fe>\d+(?:\.\d+)?)\s*(?P<unit>km|m)?")
_NO_PREFIX = re.compile(
    r"(?:no|without|w/o)\s+(?:the\s+)?zone[\s-]*(?:prefix|number)|不带带号|不加带号|无带号|不含带号|不带号"
)
_PREFIX = re.compile(
    r"(?:with|including)\s+(?:the\s+)?zone[\s-]*(?:prefix|number)|zone[\s-]*prefixed|带带号|加带号|含带号|有带号"
)
_GK_WORDS = re.compile(r"gauss|kr[uü]e?ger|(?<![a-z])gk(?![a-z])|高斯|克吕格|transverse[\s_-]*mercator|横轴墨卡托")
_UTM_WORD = re.compile(r"(?<![a-z])utm")
_HEMISPHERE = (
    (re.compile(r"(?<![a-z])north(?:ern)?(?![a-z])|北半球"), "N"),
    (re.compile(r"(?<![a-z])south(?:ern)?(?![a-z])|南半球"), "S"),
)

_EXAMPLES = (
    "EPSG:4528; CGCS2000 3-degree Gauss-Kruger zone 40; Xian 1980 6-degree zone 20; "
    "CGCS2000 3-degree central meridian 117 without zone prefix; WGS 84 UTM 33N; CGCS2000 3度带第40带"
)


@dataclass(frozen=True)
class Grid:
    """One projected CRS of a zone system, with the attributes a description can name."""

    epsg: int
    name: str
    datum: str
    family: str  # "gauss_kruger" | "utm"
    zone_width: int
    zone: int | None
    zone_prefix: bool
    hemisphere: str | None
    central_meridian: float
    false_easting: float
    area_name: str
    area_bounds: tuple[float, float, float, float]

    def candidate(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": f"EPSG:{self.epsg}",
            "epsg": self.epsg,
            "name": self.name,
            "area_of_use": {"name": self.area_name, "bounds": list(self.area_bounds)},
            "datum": self.datum,
            "zone": self.zone,
            "central_meridian": self.central_meridian,
            "false_easting": self.false_easting,
        }
        if self.family == "gauss_kruger":
            out["zone_width"] = self.zone_width
            out["zone_prefix"] = self.zone_prefix
        else:
            out["hemisphere"] = self.hemisphere
        return out


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


# -- grids: every Gauss-Kruger and UTM CRS in the database ------------------------------------


@cache
def _grids() -> tuple[Grid, ...]:
    """Every current EPSG Gauss-Kruger and UTM CRS, with its parameters read from the database.

    Gauss-Kruger zone numbers, central meridians and false eastings are read from each CRS's own
    conversion (a false easting of 40,500,000 m is zone 40, prefixed); nothing is inferred from
    the name but the datum and, for Gauss-Kruger, the zone width ("3-degree" or not).
    """
    from pyproj import CRS
    from pyproj.database import query_crs_info
    from pyproj.enums import PJType

    grids: list[Grid] = []
    seen: set[str] = set()
    for info in query_crs_info(auth_name="EPSG", pj_types=[PJType.PROJECTED_CRS], allow_deprecated=False):
        if info.code in seen:  # the database lists a few codes twice
            continue
        seen.add(info.code)
        area = info.area_of_use
        area_name = area.name if area else ""
        bounds = (area.west, area.south, area.east, area.north) if area else (0.0, 0.0, 0.0, 0.0)
        utm = _UTM_NAME.match(info.name)
        if utm:
            zone = int(utm.group("zone"))
            # UTM by definition: 6-degree zones from 180 W, false easting 500 km, no zone prefix.
            grids.append(
                Grid(
                    epsg=int(info.code),
                    name=info.name,
                    datum=utm.group("datum"),
                    family="utm",
                    zone_width=6,
                    zone=zone,
                    zone_prefix=False,
                    hemisphere=utm.group("hemisphere"),
                    central_meridian=float(zone * 6 - 183),
                    false_easting=500_000.0,
                    area_name=area_name,
                    area_bounds=bounds,
                )
            )
            continue
        gk = _GK_NAME.match(info.name)
        if not gk:
            continue
        conversion = CRS.from_epsg(int(info.code)).coordinate_operation
        if conversion is None:
            continue
        params = {p.name: p.value for p in conversion.params}
        cm = float(params.get("Longitude of natural origin", float("nan")))
        fe = float(params.get("False easting", float("nan")))
        width = 3 if gk.group("three") else 6
        prefixed = fe >= 1_000_000
        gk_zone = int(fe // 1_000_000) if prefixed else _zone_of(cm, width)
        grids.append(
            Grid(
                epsg=int(info.code),
                name=info.name,
                datum=gk.group("datum"),
                family="gauss_kruger",
                zone_width=width,
                zone=gk_zone,
                zone_prefix=prefixed,
                hemisphere=None,
                central_meridian=cm,
                false_easting=fe,
                area_name=area_name,
                area_bounds=bounds,
            )
        )
    return tuple(grids)


def _zone_of(cm: float, width: int) -> int | None:
    """The Gauss-Kruger zone whose central meridian is ``cm``: 3-degree zone n at 3n E, 6-degree
    zone n at 6n - 3 E (counted eastwards from Greenwich)."""
    east = cm % 360
    number = east / 3 if width == 3 else (east + 3) / 6
    return int(number) if number == int(number) and number > 0 else None


@cache
def _datum_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Aliases first, then every datum of the grid table by its EPSG spelling (spaces optional)."""
    patterns = [(datum, re.compile(rx)) for datum, rx in DATUM_ALIASES]
    known = {d for d, _ in DATUM_ALIASES}
    for datum in sorted({g.datum for g in _grids()} - known):
        body = "".join(r"[\s_-]*" if ch in " -_" else re.escape(ch) for ch in datum.lower())
        patterns.append((datum, re.compile(rf"(?<![a-z0-9]){body}(?![a-z0-9])")))
    return tuple(patterns)


# -- descriptions in words --------------------------------------------------------------------


@dataclass
class _Reading:
    datums: list[str]
    family: str | None
    widths: set[int]
    zones: set[int]
    cms: set[float]
    prefix: bool | None
    false_easting: float | None
    hemispheres: set[str]
    conflicts: list[str]

    def parsed(self) -> dict[str, Any]:
        def one(values: set[Any] | list[Any]) -> Any:
            items = sorted(values)
            return None if not items else items[0] if len(items) == 1 else items

        out: dict[str, Any] = {
            "form": "description",
            "datum": one(self.datums),
            "projection": self.family,
            "zone_width": one(self.widths),
            "zone": one(self.zones),
            "central_meridian": one(self.cms),
            "zone_prefix": self.prefix,
            "false_easting": self.false_easting,
            "hemisphere": one(self.hemispheres),
        }
        if self.conflicts:
            out["conflicts"] = list(self.conflicts)
        return out


def _read(low: str) -> _Reading:
    spans: list[tuple[int, int, str]] = []
    for datum, pattern in _datum_patterns():
        spans += [(m.start(), m.end(), datum) for m in pattern.finditer(low)]
    # "new beijing 54" also contains "beijing 54": a match inside a longer one is part of it.
    datums = sorted(
        {d for s, e, d in spans if not any(s2 <= s and e <= e2 and (e2 - s2) > (e - s) for s2, e2, _ in spans)},
        key=_datum_rank,
    )
    widths = {w for pattern, w in _WIDTH if pattern.search(low)}
    zones: set[int] = set()
    hemispheres = {h for pattern, h in _HEMISPHERE if pattern.search(low)}
    for pattern in _ZONE:
        for m in pattern.finditer(low):
            zones.add(int(m.group("zone")))
            if "h" in pattern.groupindex and m.group("h"):
                hemispheres.add(m.group("h").upper())
    cms: set[float] = set()
    for m in _CM.finditer(low):
        value = float(m.group("cm"))
        cms.add(-value if m.group("side") in ("w", "west", "西") else value)
    prefix: bool | None = None
    if _NO_PREFIX.search(low):
        prefix = False
    elif _PREFIX.search(low):
        prefix = True
    conflicts: list[str] = []
    false_easting = None
    fe = _FALSE_EASTING.search(low)
    if fe:
        false_easting = float(fe.group("fe")) * (1000 if fe.group("unit") == "km" else 1)
        fe_prefix = false_easting >= 1_000_000
        if prefix is not None and prefix != fe_prefix:
            conflicts.append(f"false easting {false_easting:g} m and the zone-prefix wording disagree")
        prefix = fe_prefix
        if fe_prefix:
            zones.add(int(false_easting // 1_000_000))  # the zone number is the easting's prefix
    if _UTM_WORD.search(low):
        family: str | None = "utm"
    elif _GK_WORDS.search(low) or widths or cms or prefix is not None or (zones and not hemispheres):
        family = "gauss_kruger"
    elif zones and hemispheres:
        family = "utm"
    else:
        family = None
    for label, values in (("datums", datums), ("zone widths", widths), ("zones", zones), ("hemispheres", hemispheres)):
        if len(values) > 1:
            conflicts.append(f"several {label} named: {', '.join(str(v) for v in sorted(values, key=str))}")
    if len(cms) > 1:
        conflicts.append(f"several central meridians named: {', '.join(f'{c:g}' for c in sorted(cms))}")
    return _Reading(datums, family, widths, zones, cms, prefix, false_easting, hemispheres, conflicts)


def _datum_rank(datum: str) -> tuple[int, str]:
    return (DATUM_ORDER.index(datum) if datum in DATUM_ORDER else len(DATUM_ORDER), datum)


def _resolve_words(low: str) -> dict[str, Any]:
    reading = _read(low)
    parsed = reading.parsed()
    if reading.family is None:
        if not reading.datums:
            return _answer(
                "not_found",
                parsed,
                hint=f"no datum, zone, central meridian or code was recognised; describe the CRS like: {_EXAMPLES}",
            )
        return _geographic(reading, parsed)
    candidates = _filter(reading)
    if not candidates:
        return _answer("not_found", parsed, hint=_not_found_hint(reading))
    unnamed = ["datum"] if len(reading.datums) != 1 else []
    if reading.family == "gauss_kruger" and not reading.zones and not reading.cms:
        return _clarify(reading, parsed, candidates, [*unnamed, "zone or central_meridian"])
    if reading.family == "utm" and not reading.zones:
        return _clarify(reading, parsed, candidates, [*unnamed, "zone"])
    missing = _separating(candidates)
    if len(reading.datums) != 1:
        missing = ["datum", *[m for m in missing if m != "datum"]]
    if reading.conflicts and not missing:
        missing = ["consistent description"]
    if missing:
        return _clarify(reading, parsed, candidates, missing)
    (grid,) = candidates
    inferred = _inferred(reading, grid)
    if inferred:
        parsed["inferred"] = inferred
    return _resolved_grid(grid, parsed)


def _filter(reading: _Reading) -> list[Grid]:
    out = []
    for g in _grids():
        if g.family != reading.family:
            continue
        if reading.datums and g.datum not in reading.datums:
            continue
        if reading.widths and g.family == "gauss_kruger" and g.zone_width not in reading.widths:
            continue
        if reading.hemispheres and g.family == "utm" and g.hemisphere not in reading.hemispheres:
            continue
        if reading.zones:
            if g.zone not in reading.zones:
                continue
            # "zone N" names EPSG's zone-prefixed grid; the unprefixed one only when that is said.
            if g.family == "gauss_kruger" and g.zone_prefix != (reading.prefix is not False):
                continue
        elif reading.prefix is not None and g.zone_prefix != reading.prefix:
            continue
        if reading.cms and g.central_meridian not in reading.cms:
            continue
        if reading.false_easting is not None and g.false_easting != reading.false_easting:
            continue
        out.append(g)
    return sorted(out, key=lambda g: (_datum_rank(g.datum), g.zone_width, g.zone_prefix, g.epsg))


def _separating(candidates: list[Grid]) -> list[str]:
    """The attributes whose values differ among the candidates: what the caller must still say."""
    attributes = (
        ("datum", lambda g: g.datum),
        ("zone_width", lambda g: g.zone_width),
        ("zone_prefix", lambda g: g.zone_prefix),
        ("hemisphere", lambda g: g.hemisphere),
        ("zone", lambda g: g.zone),
    )
    differ = [name for name, key in attributes if len({key(g) for g in candidates}) > 1]
    if "zone" in differ and "zone_width" in differ:
        differ.remove("zone")  # the same central meridian is a different zone number in each width
    return differ


def _inferred(reading: _Reading, grid: Grid) -> dict[str, str]:
    """What the description left open but the database settles: one grid of that datum fits."""
    out = {}
    if grid.family == "gauss_kruger" and not reading.widths:
        out["zone_width"] = (
            f"{grid.zone_width}: the only {grid.datum} Gauss-Kruger grid matching the rest is {grid.zone_width}-degree"
        )
    if grid.family == "gauss_kruger" and reading.prefix is None and not reading.zones:
        out["zone_prefix"] = f"{grid.zone_prefix}: the only matching grid has false easting {grid.false_easting:,.0f} m"
    if grid.family == "utm" and not reading.hemispheres:
        out["hemisphere"] = f"{grid.hemisphere}: {grid.datum} has UTM zone {grid.zone} in this hemisphere only"
    return out


def _resolved_grid(grid: Grid, parsed: dict[str, Any]) -> dict[str, Any]:
    answer = _answer(
        "resolved",
        parsed,
        epsg=grid.epsg,
        code=f"EPSG:{grid.epsg}",
        name=grid.name,
        area_of_use={"name": grid.area_name, "bounds": list(grid.area_bounds)},
        projection={
            "central_meridian": grid.central_meridian,
            "false_easting": grid.false_easting,
            "zone": grid.zone,
        },
    )
    if grid.family == "gauss_kruger":
        sibling = next(
            (
                g
                for g in _grids()
                if g.family == grid.family
                and g.datum == grid.datum
                and g.zone_width == grid.zone_width
                and g.central_meridian == grid.central_meridian
                and g.zone_prefix != grid.zone_prefix
            ),
            None,
        )
        if sibling is not None:
            answer["alternative"] = {
                **sibling.candidate(),
                "when": (
                    f"the eastings have no zone number in front (about {sibling.false_easting:,.0f} m at the "
                    "central meridian, six digits before the decimal point)"
                    if grid.zone_prefix
                    else f"the eastings carry the zone number {sibling.zone} in front (about "
                    f"{sibling.false_easting:,.0f} m at the central meridian)"
                ),
            }
    return answer


def _clarify(reading: _Reading, parsed: dict[str, Any], candidates: list[Grid], missing: list[str]) -> dict[str, Any]:
    hints = [_MISSING_HINTS[m](candidates) for m in missing if m in _MISSING_HINTS]
    if reading.conflicts:
        hints.insert(0, "the description contradicts itself (" + "; ".join(reading.conflicts) + ")")
    answer = _answer(
        "needs_clarification",
        parsed,
        candidates=[g.candidate() for g in candidates[:MAX_CANDIDATES]],
        candidate_count=len(candidates),
        missing=missing,
        hint="; ".join(hints) + "; MapSmith does not choose between them",
    )
    return answer


def _example_fe(candidates: list[Grid], prefixed: bool) -> str:
    g = next((g for g in candidates if g.zone_prefix == prefixed), None)
    return f"{g.false_easting:,.0f} m" if g else ("zone number x 1,000,000 + 500,000 m" if prefixed else "500,000 m")


_MISSING_HINTS = {
    "datum": lambda c: "name the datum, one of: " + ", ".join(sorted({g.datum for g in c}, key=_datum_rank)),
    "zone_width": lambda c: "say 3-degree or 6-degree zones (3度带 / 6度带)",
    "zone_prefix": lambda c: (
        "say whether the eastings carry the zone number in front (false easting "
        f"{_example_fe(c, True)}, EPSG's 'zone N' grids) or not (false easting {_example_fe(c, False)}, EPSG's "
        "'CM ...E' grids; 'without zone prefix' / 不带带号)"
    ),
    "hemisphere": lambda c: "say N or S (northern or southern hemisphere)",
    "zone": lambda c: "give the zone number",
    "zone or central_meridian": lambda c: (
        "give the zone number (zone 40 / 第40带) or the central meridian (central meridian 117 / 中央经线117)"
    ),
    "consistent description": lambda c: "say which of the contradicting values is meant",
}


def _geographic(reading: _Reading, parsed: dict[str, Any]) -> dict[str, Any]:
    """A datum named on its own names its geographic (longitude/latitude) CRS."""
    from pyproj import CRS

    found = []
    for datum in reading.datums:
        code = GEOGRAPHIC_BY_DATUM.get(datum)
        if code is None:
            named = [c for c, name in _names().get(_normalise_name(datum), ()) if name == datum]
            geographic = [c for c in named if CRS.from_epsg(c).is_geographic]
            code = geographic[0] if len(geographic) == 1 else None
        if code is not None:
            found.append(CRS.from_epsg(code))
    parsed["projection"] = "none (geographic)"
    if len(found) == 1 and len(reading.datums) == 1:
        answer = _resolved_crs(found[0], parsed, None)
        answer["note"] = (
            "a datum named alone is read as its geographic CRS (longitude/latitude in degrees); if the "
            "coordinates are metres, name the zone (e.g. '3-degree zone 40') or the central meridian"
        )
        return answer
    if not found:
        return _answer(
            "not_found",
            parsed,
            hint="no geographic CRS of that datum is in the EPSG database under that name; give a code",
        )
    return _answer(
        "needs_clarification",
        parsed,
        candidates=[
            {"code": f"EPSG:{c.to_epsg()}", "epsg": c.to_epsg(), "name": c.name, "area_of_use": _area(c)} for c in found
        ],
        missing=["datum"],
        hint="several datums are named; keep one",
    )


def _not_found_hint(reading: _Reading) -> str:
    """Say what does exist for the datum and family given, so the next try can succeed."""
    pool = [g for g in _grids() if g.family == reading.family and (not reading.datums or g.datum in reading.datums)]
    what = "Gauss-Kruger" if reading.family == "gauss_kruger" else "UTM"
    if not pool:
        named = ", ".join(reading.datums) or "any datum"
        return f"the EPSG database has no {what} grid on {named}; check the datum, or give a code"
    parts = []
    if reading.family == "gauss_kruger":
        for width in (3, 6):
            zones = sorted({g.zone for g in pool if g.zone_width == width and g.zone_prefix and g.zone})
            cms = sorted({g.central_meridian for g in pool if g.zone_width == width and not g.zone_prefix})
            if zones:
                parts.append(
                    f"{width}-degree zones {zones[0]}-{zones[-1]} (prefixed), central meridians "
                    f"{cms[0]:g}-{cms[-1]:g} E every {width} degrees (unprefixed)"
                    if cms
                    else f"{width}-degree zones {zones[0]}-{zones[-1]}"
                )
    else:
        zones = sorted({g.zone for g in pool if g.zone})
        parts.append(f"UTM zones {zones[0]}-{zones[-1]}")
    named = ", ".join(reading.datums) or "these datums"
    conflict = f"; the description contradicts itself ({'; '.join(reading.conflicts)})" if reading.conflicts else ""
    return f"no {what} grid matches every part of the description; {named} has: " + "; ".join(parts) + conflict
