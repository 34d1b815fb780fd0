"""The facts an output check needs, asked where the data is: one record, two ways of filling it.

An output check (verify.output_checks) reads a feature count, an invalid count, the geometry types
present and the extent. This module says what those facts are (``OutputFacts``), the one SQL query
that asks them of a written file inside the engine that wrote it (DuckDB and SedonaDB share the
dialect), and how a row of that query, or of a streaming pass in Arrow batches (the stack's reader,
mapsmith_opensource.layer_facts.scan_facts), becomes the ``DatasetInfo`` the checks read. Either way the same
checks run on the same facts, under the same names; tests/scale/test_check_parity.py holds the two
ways to the same results on traps and clean twins.

It must never import an engine or open a file (the SQL is text for the caller's engine to run), and
never load a whole output: a fact is an aggregate, not a copy of the rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mapsmith.registry import DatasetInfo

# Geometry type names as the checks and manifests spell them (shapely's, OGC's), keyed by the upper-case
# form engines return (DuckDB's ST_GeometryType: POINT, MULTIPOLYGON ...; SedonaDB's: ST_Point ...).
TYPE_NAMES = (
    "Point",
    "LineString",
    "Polygon",
    "MultiPoint",
    "MultiLineString",
    "MultiPolygon",
    "GeometryCollection",
)
_BY_UPPER = {name.upper(): name for name in TYPE_NAMES}


@dataclass(frozen=True)
class OutputFacts:
    """What the checks read of a written layer, however it was learnt."""

    rows: int
    missing: int  # null or empty geometries
    invalid: int  # present geometries that are not valid (an empty one is valid)
    geometry_types: tuple[str, ...]  # of the present geometries, sorted, named as TYPE_NAMES
    bounds: tuple[float, float, float, float] | None  # of the present geometries; None when none

    def apply(self, info: DatasetInfo) -> DatasetInfo:
        """``info`` (a header read: CRS, fields, layer) with these facts in place of what the header
        claimed: the rows counted, not a footer's or header's count, are the feature count."""
        return dataclasses.replace(
            info,
            feature_count=self.rows,
            invalid_count=self.invalid,
            geometry_types=self.geometry_types if self.rows else info.geometry_types,
            bounds=self.bounds,
        )


def type_name(engine_name: str) -> str:
    """An engine's geometry type name (POINT, ST_MultiPolygon, MultiPolygon) as TYPE_NAMES spells it."""
    key = engine_name.upper().removeprefix("ST_").replace(" ", "")
    return _BY_UPPER.get(key, engine_name)


def facts_sql(source: str, geometry: str, validity: bool = True) -> str:
    """One query for every fact, over ``source`` (a table, view or ``read_parquet(...)``) whose
    geometry column is ``geometry`` (quoted by the caller, cast to the engine's geometry type if needed).
    DuckDB asks the same in a faster form of its own (mapsmith_opensource.duckdb_spatial.facts_sql).

    Each geometry function is written once per aggregate so no engine can hoist a shared call out of
    its type (SedonaDB 0.5 did, see points_in_polygons_sql.point_flags). The extent is taken over
    present geometries; ST_XMin and friends ignore nulls.
    """
    g = geometry
    # Without ``validity`` the invalid count is 0, not counted: for a header read that wants only the types
    # and extent (ST_IsValid was a third of the query's time on 1,000,000 points).
    # Invalid among the present geometries, as the streaming pass counts them (an empty one is missing, not invalid).
    present = f"{g} IS NOT NULL AND NOT ST_IsEmpty({g})"
    invalid = f"count(*) FILTER (WHERE {present} AND NOT ST_IsValid({g}))" if validity else "CAST(0 AS BIGINT)"
    return (
        f"SELECT count(*) AS rows, count(*) FILTER (WHERE {g} IS NULL OR ST_IsEmpty({g})) AS missing, "
        f"{invalid} AS invalid, "
        f"array_agg(DISTINCT ST_GeometryType({g})) FILTER (WHERE {g} IS NOT NULL AND NOT ST_IsEmpty({g})) AS types, "
        f"min(ST_XMin({g})) AS xmin, min(ST_YMin({g})) AS ymin, max(ST_XMax({g})) AS xmax, max(ST_YMax({g})) AS ymax "
        f"FROM {source}"
    )


def facts_from_row(row: dict[str, Any]) -> OutputFacts:
    """facts_sql's one row (a mapping of its column names) as OutputFacts."""
    types = tuple(sorted({type_name(str(t)) for t in (row.get("types") or []) if t is not None}))
    corners = [row.get(k) for k in ("xmin", "ymin", "xmax", "ymax")]
    bounds = None
    if types and all(c is not None for c in corners):
        bounds = (float(corners[0]), float(corners[1]), float(corners[2]), float(corners[3]))  # type: ignore[arg-type]
    return OutputFacts(
        rows=int(row["rows"]),
        missing=int(row["missing"] or 0),
        invalid=int(row["invalid"] or 0),
        geometry_types=types,
        bounds=bounds,
    )
