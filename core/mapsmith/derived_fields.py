"""Fields whose values were derived from a feature's geometry, and the rule that keeps them true.

The rule: a value MapSmith derived from a geometry (an area, a length, a distance, a count of points
inside) describes the geometry written beside it, or the run is refused. Two things break it, and both
are handled here once, for every operation and stack, instead of in each operation:

* **the operation's own measure meets an invalid geometry.** The runner's output repair would change
  the geometry after the value was taken (a bow-tie measured 0 m2, written as two triangles of 2 m2).
  Chosen: measure only valid geometry, or refuse. An operation may make its input valid in memory before
  measuring (``mapsmith_opensource.derived.measurable``, disclosed in ``repairs[]`` with each area or
  length before and after), and then its values, its answer and the geometry written agree. Otherwise
  the run is refused with the rows: by the runner when the engine reported invalid input_path geometries
  (``refuse_invalid_source``), by the opensource writer when a value of the run's own sits beside an
  invalid geometry (``MEASURED_GEOMETRY_INVALID``), and by the runner instead of its output repair for an
  engine that writes file to file (``MEASURED_GEOMETRY_REPAIRED``). Recomputing the run's own values
  after the fact was rejected: the answer an operation built from them (totals, rows) cannot be mended
  generically, so a mended field would disagree with the answer beside it.
* **a reshaping operation carries a measure onto a new geometry** (area_m2 through clip_layer). Fields
  a previous MapSmith run wrote are known from the input's manifest (when its digest matches the
  input's bytes); they are measured again on the new geometry, or dropped when they cannot be (a
  distance, or an area on lines), disclosed in the notes and the manifest. Fields MapSmith did not
  write but whose names look like measures (Shape_Area, acres, perimeter ...) get a warning naming them.

Which operations reshape is declared once, in ``RESHAPING_OPERATIONS``: a list, not a contract flag,
because geometry change is a fact about the implementation shared by every stack and the list is
short; ``tests/vector/test_stale_fields.py`` runs every operation on it. Which fields an operation
derives is ``own_fields`` (a function of its arguments, e.g. measure_area's ``output_field``).
Every output MapSmith writes records its derived fields under ``parameters["x-mapsmith:derived_fields"]``,
so the next run knows them without walking lineage.

This module must never import an engine; the only files it reads are input manifests, through
``mapsmith.provenance.reading``, and an unreadable or mismatching manifest is ignored, never trusted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mapsmith.verify import RunWarning

# Operations whose output features carry input attributes on a geometry that is not the input's:
# cut, merged, simplified, grown, hulled, split or repaired. Not here: those that keep each geometry
# (select, join, reproject: a geodesic measure does not depend on the CRS), and those that replace
# polygons by points (centroid_layer, point_on_surface), whose carried area still describes the feature
# they stand for; it is no longer tracked as a measure of the point (see ``fits``).
RESHAPING_OPERATIONS = frozenset(
    {
        "clip_layer",
        "overlay_layers",
        "dissolve_layer",
        "simplify_layer",
        "buffer_layer",
        "convex_hull",
        "explode_layer",
        "repair_geometries",
    }
)

# Measures the opensource writer can take again: (measure, method). Anything else is dropped when stale.
RECOMPUTABLE = frozenset({("area", "geodesic"), ("area", "planar"), ("length", "geodesic")})

# Name tokens that say "this is a measure of the geometry" in the GIS tools people use (Esri's
# Shape_Area / Shape_Leng, QGIS's $area exports, survey acres and hectares).
_MEASURE_TOKENS = frozenset(
    {
        "area",
        "areas",
        "perimeter",
        "perim",
        "length",
        "len",
        "leng",
        "acres",
        "acre",
        "acreage",
        "hectares",
        "hectare",
        "ha",
        "km2",
        "m2",
        "sqkm",
        "sqm",
        "sqmi",
        "sqft",
        "distance",
    }
)
_TOKEN = re.compile(r"[a-z]+[0-9]*|[0-9]+")


def looks_like_measure(name: str) -> bool:
    """Whether a field name reads as a geometry measure: area_m2, Shape_Area, perimeter, ACRES, len_km."""
    words = re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()
    return any(token in _MEASURE_TOKENS for token in _TOKEN.findall(words))


@dataclass(frozen=True)
class DerivedField:
    """A field whose values MapSmith derived from each feature's geometry."""

    name: str
    measure: str  # "area" | "length" | "distance" | "count" | "expression"
    method: str  # "geodesic" | "planar" | "" (not a measure that can be taken again)
    written_by: str  # the operation that wrote it
    crs: str | None = None  # the CRS a planar measure was taken in (label)
    stale: bool = False  # carried onto a geometry that is not the one it was derived from
    own: bool = False  # written by this run's operation

    @property
    def recomputable(self) -> bool:
        return (self.measure, self.method) in RECOMPUTABLE

    def fits(self, families: Iterable[str]) -> bool:
        """Whether the measure still applies to geometries of these families (an area to polygons)."""
        wanted = {"area": "polygon", "length": "line"}.get(self.measure)
        return wanted is None or set(families) <= {wanted}

    def to_record(self, action: str) -> dict[str, Any]:
        record: dict[str, Any] = {
            "field": self.name,
            "measure": self.measure,
            "method": self.method,
            "written_by": self.written_by,
            "action": action,
        }
        if self.crs is not None:
            record["crs"] = self.crs
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> DerivedField | None:
        try:
            return cls(
                name=str(record["field"]),
                measure=str(record["measure"]),
                method=str(record.get("method") or ""),
                written_by=str(record["written_by"]),
                crs=str(record["crs"]) if record.get("crs") is not None else None,
            )
        except (KeyError, TypeError):
            return None


def _length_method(args: Mapping[str, Any]) -> str:
    # A 3-D or planar length is not the geodesic 2-D one the writer can take again: recorded as such.
    method = str(args.get("method") or "geodesic")
    if any(args.get(k) for k in ("use_z", "three_d", "include_z")) or str(args.get("dimensions") or "2") != "2":
        method += "_3d"
    return method


def _geometry_expression(args: Mapping[str, Any]) -> bool:
    from mapsmith.calculations import MEASURES

    text = str(args.get("expression") or "")
    return any(f"${m}" in text for m in MEASURES)


OwnFields = Callable[[Mapping[str, Any], str | None], list[DerivedField]]

# The fields each operation derives from geometry, from its arguments (and the input CRS label).
_OWN: dict[str, OwnFields] = {
    "measure_area": lambda a, crs: [
        DerivedField(
            str(a.get("output_field") or "area_m2"),
            "area",
            str(a.get("method") or "geodesic"),
            "measure_area",
            crs if str(a.get("method") or "geodesic") == "planar" else None,
        )
    ],
    "measure_length": lambda a, crs: [
        DerivedField(str(a.get("output_field") or "length_m"), "length", _length_method(a), "measure_length")
    ],
    "nearest_join": lambda a, crs: [DerivedField("distance_m", "distance", "", "nearest_join")],
    "count_in_polygons": lambda a, crs: [DerivedField("point_count", "count", "", "count_in_polygons")],
    "apportion_by_area": lambda a, crs: (
        [
            DerivedField(f"{a['field']}_apportioned", "apportioned", "", "apportion_by_area"),
            DerivedField("source_coverage", "coverage", "", "apportion_by_area"),
        ]
        if a.get("field")
        else []
    ),
    "summarize_points_in_polygons": lambda a, crs: (
        [
            DerivedField(f"{a['field']}_{stat.strip()}", "points_inside", "", "summarize_points_in_polygons")
            for stat in [*str(a.get("statistics") or "mean,sum,min,max,count").split(","), "null_count"]
            if stat.strip()
        ]
        if a.get("field")
        else []
    ),
    "calculate_field": lambda a, crs: (
        [DerivedField(str(a["output_field"]), "expression", "", "calculate_field")]
        if a.get("output_field") and _geometry_expression(a)
        else []
    ),
}

# Operations whose output geometry is itself derived from each input geometry by a measure (a centre
# of mass): on an invalid input the point is as undefined as an area.
GEOMETRY_DERIVING = frozenset({"centroid_layer", "point_on_surface"})
DERIVING_OPERATIONS = frozenset(_OWN) | GEOMETRY_DERIVING


def own_fields(operation: str, arguments: Mapping[str, Any], crs: str | None = None) -> list[DerivedField]:
    """The fields ``operation`` derives from geometry when run with ``arguments``."""
    make = _OWN.get(operation)
    return [replace(f, own=True) for f in make(arguments, crs)] if make else []


def recorded_fields(record: Mapping[str, Any]) -> list[DerivedField]:
    """The derived fields a manifest says its output holds: the runner's record, or (for a manifest
    written before that record existed) what the operation's own arguments say it wrote."""
    params = record.get("parameters")
    if not isinstance(params, Mapping):
        return []
    listed = params.get("x-mapsmith:derived_fields")
    if isinstance(listed, list):
        found = [DerivedField.from_record(r) for r in listed if isinstance(r, Mapping)]
        return [f for f in found if f is not None and _action(listed, f.name) != "dropped"]
    operation = record.get("operation")
    if not isinstance(operation, str):
        return []
    crs = (record.get("output") or {}).get("crs") if isinstance(record.get("output"), Mapping) else None
    return [replace(f, own=False) for f in own_fields(operation, params, crs)]


def _action(listed: list[Any], name: str) -> str | None:
    for r in listed:
        if isinstance(r, Mapping) and r.get("field") == name:
            return str(r.get("action"))
    return None


def record_path(path: Path, layer: str | None) -> list[Path]:
    """Where a dataset's manifest may be: ``<dataset>.provenance.json``, or a layer's own record
    ``<container>.<layer>.provenance.json`` (manifest spec 3.1)."""
    from mapsmith.provenance.manifest import manifest_path

    found = []
    if layer is not None:
        found.append(manifest_path(path.with_name(f"{path.name}.{layer}")))
    found.append(manifest_path(path))
    return found


def inherited_fields(
    path: Path, layer: str | None, fields: Iterable[str], digest: Callable[[Path], str]
) -> list[DerivedField]:
    """The derived fields of one input, from the manifest beside it when it describes these very bytes.

    ``fields`` are the input's field names: a recorded field no longer there (renamed, dropped by a
    tool outside MapSmith) is not claimed. The digest is taken only when a manifest names a field present.
    """
    from mapsmith.provenance.reading import ManifestUnreadable, load_manifest

    present = set(fields)
    for candidate in record_path(path, layer):
        if not candidate.is_file():
            continue
        try:
            record = load_manifest(candidate)
        except ManifestUnreadable:
            continue
        out = record.get("output")
        if not isinstance(out, Mapping) or (layer is not None and out.get("layer") not in (None, layer)):
            continue
        derived = [f for f in recorded_fields(record) if f.name in present]
        if not derived:
            return []
        # A manifest whose digest is not the file's describes other bytes (edited since): not trusted.
        return derived if out.get("sha256") == digest(path) else []
    return []


@dataclass
class DerivedPlan:
    """What one run must do about derived fields; kept on the RunContext."""

    fields: dict[str, DerivedField]
    reshapes: bool
    derives: bool = False  # the run derives values (or points) from input_path's geometries
    repaired_inputs: set[str] | None = None  # inputs made valid in memory before measuring (measurable)
    refreshed: bool = False  # the writer took the stale and repaired measures again (or dropped them)
    actions: dict[str, str] | None = None  # field -> "written" | "recomputed" | "dropped" | "kept"

    @property
    def stale(self) -> list[DerivedField]:
        return [f for f in self.fields.values() if f.stale]

    def in_output(self, names: Iterable[str]) -> list[DerivedField]:
        present = set(names)
        return [f for f in self.fields.values() if f.name in present]


def plan(
    operation: str,
    arguments: Mapping[str, Any],
    inherited: Iterable[DerivedField],
    main_crs: str | None,
) -> DerivedPlan:
    """Own fields of this run, plus fields inherited from its inputs (stale when the operation reshapes).

    A field the operation writes itself wins over an inherited one of the same name (overwrite_field).
    """
    reshapes = operation in RESHAPING_OPERATIONS
    fields: dict[str, DerivedField] = {}
    for f in inherited:
        fields.setdefault(f.name, replace(f, stale=reshapes, own=False))
    own = own_fields(operation, arguments, main_crs)
    for f in own:
        fields[f.name] = f
    derives = bool(own) or operation in GEOMETRY_DERIVING
    return DerivedPlan(fields=fields, reshapes=reshapes, derives=derives, actions={}, repaired_inputs=set())


def unknown_measures(output_fields: Iterable[str], input_fields: Iterable[str], known: Iterable[str]) -> list[str]:
    """Output fields carried from an input whose names look like measures but that MapSmith did not write."""
    carried = set(input_fields)
    skip = set(known)
    # An aggregate keeps its source's name as a prefix (dissolve's area_sum): carried all the same.
    measured = [c for c in carried if looks_like_measure(c)]
    return [
        n
        for n in output_fields
        if n not in skip and looks_like_measure(n) and (n in carried or any(n.startswith(c + "_") for c in measured))
    ]


# -- what the runner asks of a written output ------------------------------------------------------


def refuse_invalid_source(
    plan: DerivedPlan, operation: str, failed: Mapping[str, str], given: Mapping[str, str]
) -> None:
    """Refuse a run that derived values from invalid input_path geometries without making them valid
    first. ``failed`` maps an input slot to the detail of its failed ``x-mapsmith:input_geometry_valid``
    check (the engine counted them while reading)."""
    from mapsmith.errors import InputError

    if not plan.derives or "input_path" not in failed or "input_path" in (plan.repaired_inputs or set()):
        return
    detail = failed["input_path"]
    raise InputError(
        f"{operation} derives values from each geometry of input_path, and {detail}: a measure (or centre) of "
        "an invalid geometry is undefined (a bow-tie's lobes cancel to an area of 0), and the geometry written "
        "would not be the one measured",
        code="INPUT_GEOMETRY_INVALID",
        evidence={
            "argument": "input_path",
            "path": given.get("input_path", ""),
            "operation": operation,
            "detail": detail,
        },
        hint="run repair_geometries on input_path first (it reports what it changes), then this operation on "
        "its output",
    )


def check_written(plan: DerivedPlan, operation: str, output_fields: Iterable[str]) -> None:
    """Refuse an output that still carries stale derived fields nobody measured again: an engine that
    wrote file to file (QGIS, ArcGIS, Spark) did not go through the opensource writer's refresh."""
    from mapsmith.errors import VerificationFailed

    if plan.refreshed:
        return
    stale = [f for f in plan.stale if f.name in set(output_fields)]
    if stale:
        names = [f.name for f in stale]
        raise VerificationFailed(
            f"{operation} changed the geometries, and the output still carries {', '.join(names)}, which "
            f"{', '.join(sorted({f.written_by for f in stale}))} measured on the input geometries; this engine "
            "cannot measure them again, and MapSmith will not write values that describe other geometries",
            code="STALE_DERIVED_FIELDS",
            evidence={"operation": operation, "fields": [f.to_record("stale") for f in stale]},
            hint=f"drop {', '.join(names)} first (select_fields), run {operation}, then measure again "
            f"({', '.join(sorted({f.written_by for f in stale}))}); or run on the opensource stack, which "
            "measures them again itself",
        )


def refuse_repair(plan: DerivedPlan, operation: str, output_fields: Iterable[str], invalid: int) -> None:
    """The runner would repair the written geometries; a derived field in the output would then describe
    geometry that is no longer there. Refused instead (the opensource writer repairs before measuring)."""
    from mapsmith.errors import VerificationFailed

    present = plan.in_output(output_fields)
    if not present:
        return
    names = [f.name for f in present]
    raise VerificationFailed(
        f"{operation} wrote {invalid} invalid geometries beside {', '.join(names)}, values derived from those "
        "geometries; repairing them now would leave the values describing geometry that is no longer written",
        code="MEASURED_GEOMETRY_REPAIRED",
        evidence={
            "operation": operation,
            "invalid_count": invalid,
            "fields": [f.to_record("derived") for f in present],
        },
        hint="run repair_geometries on the input first (it reports what it changes), then this operation on its output",
    )


def carried_measure_warning(
    plan: DerivedPlan, operation: str, output_fields: Iterable[str], input_fields: Iterable[str]
) -> RunWarning | None:
    """The warning naming measure-like fields a reshaping operation carried that MapSmith did
    not write, so nothing is known of how they were measured; None when there are none."""
    if not plan.reshapes:
        return None
    names = unknown_measures(output_fields, input_fields, plan.fields)
    if not names:
        return None
    return RunWarning(
        "MEASURE_FIELDS_CARRIED",
        f"{operation} changed the geometries but carried {', '.join(names)}, whose names look like measures of "
        "the old geometries; MapSmith did not write them (no input manifest records them), so it neither "
        "measured them again nor dropped them",
        "measure again with measure_area / measure_length (output_field=<name>, overwrite_field=true), or drop "
        "them with select_fields; calculate_field's $area / $length / $perimeter give other measures",
    )


def manifest_record(plan: DerivedPlan, output_fields: Iterable[str], families: Iterable[str]) -> list[dict[str, Any]]:
    """What ``parameters["x-mapsmith:derived_fields"]`` records: each derived field the output holds (and
    each dropped one), with what this run did to it. A measure that no longer fits the output's geometry
    (an area carried onto centroids) is not recorded as a measure of it."""
    actions = plan.actions or {}
    present = set(output_fields)
    fams = list(families)
    out = []
    for f in plan.fields.values():
        action = actions.get(f.name)
        if action == "dropped":
            out.append(f.to_record("dropped"))
        elif f.name in present and f.fits(fams):
            out.append(f.to_record(action or ("written" if f.own else "kept")))
    return out
