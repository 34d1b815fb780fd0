"""Every ``x-mapsmith:`` name MapSmith writes into a provenance manifest: where it goes, what it means.

The manifest specification leaves room for producer extensions named ``x-<producer>:<name>``; this
registry is MapSmith's half of that bargain, so a consumer can look up any extension it meets.
``docs/manifest-vocabulary.md`` is generated from it::

    python -m mapsmith.provenance.vocabulary --write docs/manifest-vocabulary.md

A test keeps it and the code in step: every ``x-mapsmith:`` literal in ``core/`` and ``plugins/``
must be listed here, and every name listed here must occur in that code.

This module is data and a renderer. It must never be read by the code that writes manifests (a name
is emitted where the fact is known, not looked up here), never import an engine or anything outside
``mapsmith.provenance``, and never list a name no code writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

from mapsmith.provenance.validator import SPEC_VERSION

PREFIX = "x-mapsmith:"


class Extension(NamedTuple):
    where: str  # one of PLACES
    meaning: str  # one sentence


# Where in a manifest an extension name can appear, in the order the table lists them.
PLACES: dict[str, str] = {
    "record key": "a top-level key of the manifest",
    "parameters key": "a key of `parameters`",
    "check name": "the `name` of a `verification[]` entry",
    "transformation key": "a key of `crs_decisions.transformation` and of each leg of `crs_decisions.round_trip`",
    "engine key": "a key of `engine`",
    "crs_decisions key": "a key of `crs_decisions`",
    "repairs key": "a key of a `repairs[]` entry",
}

VOCABULARY: dict[str, Extension] = {
    # -- top-level record keys (core/mapsmith/runner.py)
    "x-mapsmith:engine_choice": Extension(
        "record key",
        "Which stack and engine the router chose (`stack`, `engine`), the engines it passed over and why, "
        "and any substitution of another stack allowed by `MAPSMITH_FALLBACK_STACK`.",
    ),
    "x-mapsmith:warnings": Extension(
        "record key",
        "The warnings returned with the result (`code`, `message`, `hint`); present only when there were any.",
    ),
    "x-mapsmith:error": Extension(
        "record key",
        "In a failure record (`*.failed.provenance.json`) only: the error that stopped the run, as "
        "`code`, `message`, `hint`, `evidence` (`INTERRUPTED` when it was not a MapSmith error).",
    ),
    "x-mapsmith:intended_output": Extension(
        "record key",
        "In a failure record only: the `output_path` the run was asked to write, as the caller gave it.",
    ),
    # -- parameters keys
    "x-mapsmith:engine_seconds": Extension(
        "parameters key",
        "Wall-clock seconds the implementation ran (reading, computing, writing the output), before "
        "verification and any repair; an implementation may record its own figure instead.",
    ),
    "x-mapsmith:distance_in_analysis_units": Extension(
        "parameters key",
        "`buffer_layer`: the distance actually applied, in units of the analysis CRS (metres in an "
        "estimated UTM zone, else `distance_meters` divided by the projected CRS's unit in metres).",
    ),
    "x-mapsmith:features_outside_mask": Extension(
        "parameters key",
        "`clip_layer`: how many input features lie wholly outside the mask and were not written.",
    ),
    "x-mapsmith:lower_dimension_fragments_dropped": Extension(
        "parameters key",
        "`clip_layer`: how many points or lines left where features met the mask's edge were dropped, so "
        "each output keeps its input geometry's dimension.",
    ),
    "x-mapsmith:output_format": Extension(
        "parameters key",
        "`convert_format`: the GDAL/OGR driver the output was written with, chosen by the output path's extension.",
    ),
    # -- check names (verification[].name); the spec's core names need no prefix
    "x-mapsmith:input_geometry_types": Extension(
        "check name",
        "Precondition: the input's geometry types are all among those the operation's contract accepts "
        "(otherwise the run is refused before the engine starts).",
    ),
    "x-mapsmith:input_geometry_valid": Extension(
        "check name",
        "Non-critical: how many geometries of one input (named in `argument`) are invalid under OGC rules, "
        "with the first feature indices and GEOS's reasons, and how many are empty or missing; reported, "
        "never fixed or dropped silently.",
    ),
    "x-mapsmith:areas_non_negative": Extension(
        "check name",
        "`measure_area`: every computed `area_m2` is zero or more.",
    ),
    "x-mapsmith:fields_preserved": Extension(
        "check name",
        "`convert_format` and `extract_layer`: every attribute field of the input is present in the written output.",
    ),
    "x-mapsmith:run_completed": Extension(
        "check name",
        "In a failure record only, always failed and critical: the run did not complete, with the error's code "
        "and message.",
    ),
    # -- transformation keys (core/mapsmith/crs.py)
    "x-mapsmith:alignment": Extension(
        "crs_decisions key",
        "Second inputs moved into input_path's CRS before computing, by argument: each with `source_crs`, "
        "`target_crs`, `reason` and the `transformation` (same shape as the spec's) that was applied.",
    ),
    "x-mapsmith:description": Extension(
        "transformation key",
        "PROJ's name for the coordinate operation applied, e.g. `NAD27 to WGS 84 (4)`.",
    ),
    "x-mapsmith:chosen_by": Extension(
        "transformation key",
        "How the operation was chosen: the ranking `rule`, the `area_of_interest_lonlat` it was ranked for "
        "(null when none was given), and how many operations were available and unavailable.",
    ),
    "x-mapsmith:better_unavailable": Extension(
        "transformation key",
        "A more accurate operation PROJ knows but cannot run on this machine (`operation`, `accuracy_m`, "
        "`missing_grids`); present only when it beats the one applied.",
    ),
    # -- engine keys
    "x-mapsmith:components": Extension(
        "engine key",
        "Versions of the libraries behind the named engine, by name (for geopandas: shapely, GEOS, pyproj, "
        "PROJ, pyogrio, GDAL), as the implementation reports them.",
    ),
    # -- repairs[] keys
    "x-mapsmith:report": Extension(
        "repairs key",
        "The repairing engine's own account of one repair round: its `action` and counts such as "
        "`invalid_before` and `lower_dimension_parts_dropped`.",
    ),
}


def render_markdown() -> str:
    """``docs/manifest-vocabulary.md``: the same registry always gives the same bytes."""
    lines = [
        "# Manifest vocabulary: the `x-mapsmith:` extensions",
        "",
        "<!-- Generated by `python -m mapsmith.provenance.vocabulary --write docs/manifest-vocabulary.md` "
        "from core/mapsmith/provenance/vocabulary.py; do not edit by hand. -->",
        "",
        f"These names extend the published provenance manifest specification {SPEC_VERSION}, which allows a "
        "producer's own keys and check names of the form `x-<producer>:<name>`. They are the "
        f"{len(VOCABULARY)} extensions MapSmith writes, listed here generated from the code; a test fails "
        "if the code writes a name this page does not list, or this page lists a name the code does not write.",
        "",
        "| name | where it appears | meaning |",
        "|---|---|---|",
    ]
    order = list(PLACES)
    for name, ext in sorted(VOCABULARY.items(), key=lambda item: (order.index(item[1].where), item[0])):
        meaning = ext.meaning.replace("|", "\\|")  # a pipe would end the table cell
        lines.append(f"| `{name}` | {PLACES[ext.where]} | {meaning} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mapsmith.provenance.vocabulary", description="Print (or write) docs/manifest-vocabulary.md."
    )
    parser.add_argument("--write", type=Path, metavar="PATH", help="write the page to PATH instead of stdout")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
