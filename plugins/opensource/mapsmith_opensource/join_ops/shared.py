"""What every join operation shares: field lookups and refusals, attaching one table's rows to
another's, the CRS record of a topological test, and ground areas on the ellipsoid.

Nothing here reads or writes a dataset or chooses an engine; the operations' modules do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapsmith.crs import crs_label, linear_unit_metres
from mapsmith.errors import ArgumentError, InputError
from mapsmith.paging import page

if TYPE_CHECKING:
    from collections.abc import Mapping

    import geopandas as gpd
    import numpy as np
    import pandas as pd
    from pyproj import CRS

    from mapsmith.runner import RunContext


# Why invalid geometries are refused, in every refusal of this family.
UNDEFINED_ON_INVALID = "spatial predicates and areas computed on them are undefined"
JOIN_SUFFIX = "_join"
# Areas are measured with a vertex at least this often along every edge (see _geodesic_areas).
AREA_VERTEX_SPACING_METRES = 1000.0
AREA_VERTEX_SPACING_DEGREES = 0.01


# -- shared helpers ---------------------------------------------------------------------------


def _rows(frame: pd.DataFrame, arguments: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page of attribute rows the call's offset/limit ask for, and its ``page`` record."""
    import json

    attrs = [c for c in frame.columns if c != getattr(frame, "_geometry_column_name", None)]
    _, window = page(range(len(frame)), arguments)
    start = window["offset"]
    # Through JSON so numpy and pandas scalars (and NA) become plain values.
    rows = json.loads(frame[attrs].iloc[start : start + window["returned"]].to_json(orient="records"))
    return rows, window


def _plain(value: Any) -> Any:
    """A key or number as a JSON value (numpy scalars become Python ones)."""
    return value.item() if hasattr(value, "item") else value


def _given(ctx: RunContext, key: str) -> str:
    return ctx.given_paths.get(key, str(ctx.arguments.get(key, key)))


def _field_not_found(ctx: RunContext, argument: str, dataset: str, name: str, available: list[str]) -> InputError:
    import difflib

    close = difflib.get_close_matches(name, available, n=1)
    return InputError(
        f"{argument} names the field {name!r}, which {_given(ctx, dataset)} does not have"
        + (f"; did you mean {close[0]!r}?" if close else ""),
        code="FIELD_NOT_FOUND",
        evidence={"argument": argument, "field": name, "fields": available, "path": _given(ctx, dataset)},
        hint=f"name one of the fields {available} (describe_dataset lists them)",
    )


def _refuse_existing(ctx: RunContext, frame: pd.DataFrame, names: list[str], dataset: str = "input_path") -> None:
    """Refuse to write a field the input already has (GeoPackage field names ignore case)."""
    taken = {str(c).casefold(): str(c) for c in frame.columns}
    for name in names:
        if name.casefold() in taken:
            raise InputError(
                f"{dataset} already has a field {taken[name.casefold()]!r}; MapSmith will not overwrite it "
                f"with {name!r}",
                code="FIELD_EXISTS",
                evidence={"field": taken[name.casefold()], "path": _given(ctx, dataset)},
                hint=f"rename or drop the existing {taken[name.casefold()]!r} field first",
            )


def _numeric_field(ctx: RunContext, frame: pd.DataFrame, name: str, dataset: str, argument: str = "field") -> pd.Series:
    """The values of a numeric field, or a refusal naming the field and the type it has."""
    from pandas.api import types

    if name not in frame.columns:
        fields = [str(c) for c in frame.columns if c != getattr(frame, "_geometry_column_name", None)]
        raise _field_not_found(ctx, argument, dataset, name, fields)
    values = frame[name]
    if not types.is_numeric_dtype(values) or types.is_bool_dtype(values):
        raise InputError(
            f"field {name!r} of {_given(ctx, dataset)} holds {values.dtype} values, not numbers",
            code="FIELD_NOT_NUMERIC",
            evidence={"argument": argument, "field": name, "type": str(values.dtype), "path": _given(ctx, dataset)},
            hint="name a numeric field, or convert this one to numbers first (a text field of digits is not "
            "read as numbers: MapSmith does not guess which texts are numbers)",
        )
    return values


def refuse_self_weight(weight: str | None, field: str, evidence: dict[str, Any]) -> None:
    """WEIGHT_INVALID when weight_field is the field being averaged: sum(x^2)/sum(x) is not a mean."""
    if weight is not None and weight == field:
        raise ArgumentError(
            f"weight_field is {weight!r}, the field itself: its mean weighted by itself is sum(x^2)/sum(x), not a mean",
            code="WEIGHT_INVALID",
            evidence={**evidence, "field": weight},
            hint="name the field the values are a quotient of (e.g. population for a rate per person)",
        )


def _rename_clashes(taken: list[str], incoming: list[str], suffix: str) -> dict[str, str]:
    """New names for incoming fields whose names (ignoring case, as GeoPackage does) are taken."""
    used = {str(t).casefold() for t in taken}
    renamed: dict[str, str] = {}
    for name in incoming:
        if str(name).casefold() not in used:
            used.add(str(name).casefold())
            continue
        candidate, n = f"{name}{suffix}", 2
        while candidate.casefold() in used or candidate in incoming:
            candidate, n = f"{name}{suffix}{n}", n + 1
        renamed[name] = candidate
        used.add(candidate.casefold())
    return renamed


def _take(frame: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    """Rows of ``frame`` by position, -1 giving an empty row; integers and booleans stay themselves."""
    from pandas.api import types

    out = frame.reset_index(drop=True)
    for col in out.columns:
        if types.is_bool_dtype(out[col]) and out[col].dtype == bool:
            out[col] = out[col].astype("boolean")
        elif types.is_integer_dtype(out[col]) and not types.is_extension_array_dtype(out[col]):
            out[col] = out[col].astype("Int64")
    return out.reindex(positions).reset_index(drop=True)


def _attach(
    base: gpd.GeoDataFrame,
    other: pd.DataFrame,
    left: np.ndarray,
    right: np.ndarray,
    suffix: str,
    reserved: tuple[str, ...] = (),
) -> tuple[gpd.GeoDataFrame, dict[str, str]]:
    """``base`` rows ``left`` side by side with ``other`` rows ``right`` (-1: none); clashes renamed, with
    ``base``'s fields and the ``reserved`` names the caller adds next (nearest_join's distance_m)."""
    import geopandas as gpd
    import numpy as np
    import pandas as pd

    taken = [str(c) for c in base.columns] + list(reserved)
    renamed = _rename_clashes(taken, [str(c) for c in other.columns], suffix)
    extra = _take(other.rename(columns=renamed), right)
    identity = len(left) == len(base) and bool(np.all(left == np.arange(len(base))))
    kept = base.reset_index(drop=True) if identity else base.iloc[left].reset_index(drop=True)
    out = pd.concat([pd.DataFrame(kept), extra], axis=1)
    return gpd.GeoDataFrame(out, geometry=base.geometry.name, crs=base.crs), renamed


def _attributes(gdf: gpd.GeoDataFrame) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(gdf.drop(columns=gdf.geometry.name))


def _aligned(ctx: RunContext, key: str) -> str:
    return (
        f"; {key} was transformed to it first (see x-mapsmith:alignment)"
        if key in ctx.crs_decisions.get("x-mapsmith:alignment", {})
        else ""
    )


def _record_topological(ctx: RunContext, crs: CRS, key: str, what: str) -> None:
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs),
            "reason": f"{what} in input_path's CRS: a topological test, in which units and scale do not enter, "
            "and the input's coordinates are written unchanged" + _aligned(ctx, key),
            "source_crs": crs_label(crs),
            "target_crs": None,
        }
    )


def _geodesic_areas(geoms: np.ndarray, crs: CRS) -> np.ndarray:
    """Ellipsoidal area (m2) of the polygonal parts of each geometry, on the CRS's own datum."""
    import numpy as np
    import shapely

    if len(geoms) == 0:
        return np.zeros(0)
    # Edges are straight in the layer's CRS; measured between vertices only they would be taken as
    # geodesics, and a piece cut from a zone would not add up to the zone (1e-4 apart for 300 km
    # zones). Vertices every ~1 km keep the two within 1e-9.
    step = AREA_VERTEX_SPACING_DEGREES if crs.is_geographic else AREA_VERTEX_SPACING_METRES / linear_unit_metres(crs)
    geoms = shapely.segmentize(geoms, step)
    if not crs.is_geographic:
        from pyproj import Transformer

        # The geodetic CRS of the same datum: an exact inverse projection, no datum shift.
        to_lonlat = Transformer.from_crs(crs, crs.geodetic_crs, always_xy=True)

        def fn(coords: Any) -> Any:
            x, y = to_lonlat.transform(coords[:, 0], coords[:, 1])
            return np.column_stack([x, y])

        geoms = shapely.transform(geoms, fn)
    geod = crs.get_geod()

    def ring(coords: Any) -> float:
        xy = np.asarray(coords)
        return abs(geod.polygon_area_perimeter(xy[:, 0], xy[:, 1])[0])

    areas = np.zeros(len(geoms))
    for i, geom in enumerate(geoms):
        if geom is None or geom.is_empty:
            continue
        total = 0.0
        for part in shapely.get_parts(shapely.get_parts(geom)):  # collections, then multi-parts
            if part.geom_type != "Polygon" or part.is_empty:
                continue  # lines and points where polygons only touch have no area
            total += ring(part.exterior.coords) - sum(ring(r.coords) for r in part.interiors)
        areas[i] = total
    return areas
