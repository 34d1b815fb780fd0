"""resolve_crs's reading of zone-system descriptions: Gauss-Kruger and UTM grids in words.

Reads "CGCS2000 3-degree Gauss-Kruger zone 40", "西安80 6度带第20带" or "WGS 84 UTM 33N" into
datum, zone width, zone, central meridian, false easting and hemisphere, and answers with every
Gauss-Kruger and UTM CRS of PROJ's EPSG database that fits.

What this module must never do: pick one of several candidates (a datum left unnamed, a zone width
left open, a central meridian that fits a zone-prefixed and an unprefixed grid is answered with
``needs_clarification``), hand free text to PROJ's approximate name matching, or import pyproj at
module level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from mapsmith_opensource.crs_answers import (
    _EXAMPLES,
    MAX_CANDIDATES,
    _answer,
    _area,
    _names,
    _normalise_name,
    _resolved_crs,
)
from mapsmith_opensource.crs_search import search_database

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
        area_name = (area.name or "") if area else ""
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
            # Not a zone-system phrase: the words may still be a CRS's name, alias or country.
            found = search_database(low)
            if found is not None:
                return found
            return _answer(
                "not_found",
                parsed,
                hint="no EPSG CRS name, alias or area of use carries these words, and no datum, zone, central "
                f"meridian or code was recognised; check the spelling, or describe the CRS like: {_EXAMPLES}",
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
