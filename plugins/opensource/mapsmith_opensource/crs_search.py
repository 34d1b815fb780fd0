"""resolve_crs's last resort: a description searched for in the whole of PROJ's EPSG database.

Descriptions that are neither a code, a definition, an exact EPSG name nor a zone-system phrase
("RGF93 Lambert 93", "Egypt national grid", "Amersfoort RD New") are matched word by word against
every current EPSG projected, geographic 2D and compound CRS: its name, its aliases (ESRI's and
EPSG's own alternative spellings) and the country its area of use names. A CRS is a candidate only
when it accounts for every distinctive word of the description (or, failing any, most of them);
words such as "national" or "grid" count only when they match.

Hand-written because neither PROJ nor pyproj searches by words: PROJ's name matching
(``CRS.from_user_input`` / ``query_crs_info``) approximates a single name. pyproj 3.7 has no
alias API, so aliases are read from the ``alias_name`` table of pyproj's own ``proj.db`` (sqlite,
opened read-only), the database every other answer of resolve_crs comes from.

What this module must never do: pick one of several candidates -- only a description whose words
are exactly one CRS's name or alias is answered ``resolved``; anything else is
``needs_clarification`` with every candidate and its area of use -- or import pyproj at module level.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from typing import Any

from mapsmith_opensource.crs_answers import MAX_CANDIDATES, _answer, _resolved_crs

# Words that describe any CRS: they rank candidates when they match but never exclude one.
GENERIC_WORDS = frozenset(
    {
        "a",
        "and",
        "coordinate",
        "coordinates",
        "crs",
        "datum",
        "de",
        "des",
        "du",
        "grid",
        "in",
        "la",
        "le",
        "map",
        "national",
        "of",
        "official",
        "projected",
        "projection",
        "reference",
        "srs",
        "system",
        "the",
    }
)
# Words that ask for a projected CRS, so projected candidates are listed before geographic ones.
PROJECTED_WORDS = frozenset({"grid", "projected", "projection", "easting", "northing", "metres", "meters"})
# Below this share of the description's distinctive words (weighted by rarity) nothing is offered.
MIN_PARTIAL_COVERAGE = 0.6
# A resolved answer lists this many other CRSs that also carry every word (RGF93 v1 / v2 / v2b).
MAX_ALSO_MATCHING = 5

# Letters and digits apart: "RGF93" and "RGF 93" are the same words, and "Lambert-93" too.
_TOKEN = re.compile(r"[^\W\d_]+|\d+")


@dataclass(frozen=True)
class _Entry:
    code: int
    name: str
    kind: str  # "projected" | "geographic" | "compound"
    spellings: tuple[tuple[str, frozenset[str]], ...]  # the name and each alias, with their words
    words: frozenset[str]  # every word of every spelling
    country_words: frozenset[str]  # words of the country (or region) its area of use starts with
    area_name: str | None
    area_bounds: tuple[float, float, float, float] | None


def tokens(text: str) -> frozenset[str]:
    """The words of a name or description, lower-case, letters and digits separated."""
    return frozenset(_TOKEN.findall(unicodedata.normalize("NFKC", text).lower()))


@cache
def _index() -> tuple[tuple[_Entry, ...], dict[str, float]]:
    """Every current EPSG CRS of the three kinds, and each word's rarity (inverse document frequency)."""
    from pyproj.database import query_crs_info
    from pyproj.enums import PJType

    kinds = {
        PJType.PROJECTED_CRS: "projected",
        PJType.GEOGRAPHIC_2D_CRS: "geographic",
        PJType.COMPOUND_CRS: "compound",
    }
    aliases = _aliases()
    entries = []
    for pj_type, kind in kinds.items():
        for info in query_crs_info(auth_name="EPSG", pj_types=pj_type, allow_deprecated=False):
            code = int(info.code)
            names = [info.name, *[a for a in aliases.get(code, ()) if a != info.name]]
            spellings = tuple((n, tokens(n)) for n in names)
            area = info.area_of_use
            country = _country(area.name or "") if area is not None else ""
            entries.append(
                _Entry(
                    code=code,
                    name=info.name,
                    kind=kind,
                    spellings=spellings,
                    words=frozenset().union(*(w for _, w in spellings)),
                    country_words=tokens(country) - GENERIC_WORDS,
                    area_name=None if area is None else area.name,
                    area_bounds=None if area is None else (area.west, area.south, area.east, area.north),
                )
            )
    counts: dict[str, int] = {}
    for entry in entries:
        for word in entry.words | entry.country_words:
            counts[word] = counts.get(word, 0) + 1
    total = len(entries)
    rarity = {word: math.log((total + 1) / (n + 0.5)) for word, n in counts.items()}
    return tuple(entries), rarity


def _country(area_name: str) -> str:
    """The country or region an area of use starts with ("Egypt - east of 33°E" names Egypt), or
    nothing for areas described by their bounds, whose lists of countries a UTM zone crosses
    ("Between 30°E and 36°E ... Egypt; Ethiopia ...") do not make it that country's grid."""
    head = area_name.split(" - ")[0]
    if ";" in head or head.lower().startswith(("between", "world")) or len(head.split()) > 5:
        return ""
    return head


def _aliases() -> dict[int, tuple[str, ...]]:
    """EPSG CRS codes to their alternative names, from proj.db's alias_name table (read-only)."""
    import sqlite3
    from pathlib import Path

    import pyproj

    path = Path(pyproj.datadir.get_data_dir().split(":")[0]) / "proj.db"
    out: dict[int, list[str]] = {}
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT code, alt_name FROM alias_name WHERE auth_name = 'EPSG' "
            "AND table_name IN ('projected_crs', 'geodetic_crs', 'compound_crs')"
        ).fetchall()
    finally:
        db.close()
    for code, alt in rows:
        try:
            out.setdefault(int(code), []).append(str(alt))
        except ValueError:
            continue
    return {code: tuple(names) for code, names in out.items()}


def search_database(description: str) -> dict[str, Any] | None:
    """The answer for a description found by its words, or ``None`` when no CRS fits it."""
    from pyproj import CRS

    words = tokens(description)
    if not words:
        return None
    entries, rarity = _index()
    unknown_weight = max(rarity.values(), default=1.0)
    distinctive = (words - GENERIC_WORDS) or words
    weight = {w: rarity.get(w, unknown_weight) for w in distinctive}
    total = sum(weight.values())
    wants_projected = bool(words & PROJECTED_WORDS)

    scored = []
    for entry in entries:
        seen = entry.words | entry.country_words
        matched = distinctive & seen
        if not matched:
            continue
        coverage = sum(weight[w] for w in matched) / total
        if coverage < MIN_PARTIAL_COVERAGE:
            continue
        exact = next((name for name, w in entry.spellings if w == words), None)
        extra = min(len(w - words) for _, w in entry.spellings)
        rank = (
            -round(coverage, 9),
            exact is None,
            -len(words & GENERIC_WORDS & seen),
            wants_projected and entry.kind != "projected",
            extra,
            entry.kind == "compound",
            entry.code,
        )
        scored.append(
            (rank, entry, exact, sorted(distinctive - seen), sorted(matched & entry.country_words - entry.words))
        )
    if not scored:
        return None
    scored.sort(key=lambda item: item[0])
    parsed: dict[str, Any] = {"form": "database_search", "words": sorted(words)}
    exacts = [item for item in scored if item[2] is not None]
    if len(exacts) == 1:
        _, entry, spelling, _, _ = exacts[0]
        parsed["matched_name"] = spelling
        answer = _resolved_crs(CRS.from_epsg(entry.code), parsed, None)
        also = [
            _candidate(e, unmatched, country)
            for r, e, _, unmatched, country in scored
            if e is not entry and r[0] == -1.0
        ]
        if also:
            answer["also_matching"] = also[:MAX_ALSO_MATCHING]
            answer["note"] = (
                f"the words are exactly the EPSG name or alias {spelling!r} of EPSG:{entry.code}; other CRSs "
                "carry every word too (also_matching), check the area of use if another was meant"
            )
        return answer
    candidates = [_candidate(e, unmatched, country) for _, e, _, unmatched, country in scored]
    complete = all(not c.get("unmatched_words") for c in candidates)
    return _answer(
        "needs_clarification",
        parsed,
        candidates=candidates[:MAX_CANDIDATES],
        candidates_total=len(candidates),
        missing=["which of the CRSs matching the description"],
        hint=(
            "several EPSG CRSs fit these words; their areas of use tell them apart: pass the code of the one meant"
            if complete
            else "no EPSG CRS carries every word; these carry most of them (unmatched_words): check the spelling, "
            "or pass the code of the one meant"
        ),
    )


def _candidate(entry: _Entry, unmatched: list[str], country: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "code": f"EPSG:{entry.code}",
        "epsg": entry.code,
        "name": entry.name,
        "kind": entry.kind,
        "area_of_use": None
        if entry.area_name is None
        else {"name": entry.area_name, "bounds": list(entry.area_bounds or ())},
    }
    if country:
        out["matched_by_area_of_use"] = country
    if unmatched:
        out["unmatched_words"] = unmatched
    return out
