"""MapSmith's own operations on the qgis stack: each run as QGIS Processing algorithms, by a table.

With ``MAPSMITH_STACK=qgis`` an operation in ``MAPPINGS`` runs on its QGIS equivalent, under the
operation's own contract: metres stay metres (a geographic layer is buffered in the same estimated
UTM zone the opensource stack uses, reprojected there and back by QGIS with the PROJ operation
MapSmith chose), and a dissolve writes only the fields the contract says it writes. An operation
not in the table has no qgis implementation, and the router says ``missing`` for it.

Like the rest of the sidecar this never imports QGIS. The arguments are checked, and the metric CRS
and PROJ operations chosen, in MapSmith (with pyproj and the opensource stack's header reader);
QGIS only computes, in its own process, and writes into a scratch folder beside the output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mapsmith.errors import ArgumentError, EngineError

if TYPE_CHECKING:
    from mapsmith.runner import RunContext

ENGINE = "qgis_process"
# Formats the GDAL inside QGIS 3.22 writes; GeoParquet needs GDAL >= 3.5 built with Arrow, which
# Debian's QGIS does not have, so a .parquet output is refused up front (NO_ELIGIBLE_ENGINE).
WRITABLE_SUFFIXES = (".gpkg", ".fgb", ".geojson")


@dataclass(frozen=True)
class Mapped:
    """One MapSmith operation and the QGIS algorithms that carry it out, in the order they run."""

    operation: str
    algorithms: tuple[str, ...]
    function: Callable[[RunContext], None]
    how: str  # one line for docs/stacks.md: what the mapping adds to or removes from QGIS's behaviour


# -- running qgis_process -----------------------------------------------------------------------


class _Steps:
    """The qgis_process calls of one run, in a scratch folder beside the output that is always removed."""

    def __init__(self, ctx: RunContext) -> None:
        from mapsmith_qgis import INSTALL_FIX, NOT_FOUND_REASON, find_qgis_process, probe

        executable, _ = find_qgis_process()
        if executable is None:
            raise EngineError(f"qgis_process is gone: {NOT_FOUND_REASON}", code="QGIS_UNAVAILABLE", hint=INSTALL_FIX)
        self.ctx = ctx
        self.executable = executable
        assert ctx.temp_output is not None and ctx.output_path is not None
        self.scratch = ctx.temp_output.parent / f".{ctx.output_path.stem}.qgis-{uuid.uuid4().hex[:8]}"
        versions = dict(probe(executable).versions)
        ctx.set_engine("qgis", versions.get("qgis", "unknown"), **{k: v for k, v in versions.items() if k != "qgis"})
        self.labels = {str(ctx.paths[s]): ctx.given_paths.get(s, str(ctx.paths[s])) for s in ctx.paths}
        self.done: list[dict[str, Any]] = []

    def __enter__(self) -> _Steps:
        self.scratch.mkdir()
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def source(self, slot: str) -> str:
        path, layer = str(self.ctx.paths[slot]), self.ctx.layers.get(slot)
        return f"{path}|layername={layer}" if layer else path

    def scratch_path(self, name: str) -> str:
        return str(self.scratch / f"{name}.gpkg")

    def final_path(self) -> str:
        # QGIS names a GeoPackage layer after the file, so the file it writes carries the output's
        # name and is moved onto the runner's temporary path afterwards.
        assert self.ctx.output_path is not None
        return str(self.scratch / self.ctx.output_path.name)

    def _label(self, value: str) -> str:
        path, _, rest = value.partition("|")
        if path in self.labels:
            label = self.labels[path]
        elif self.ctx.output_path is not None and path == self.final_path():
            label = "(output_path)"
        elif path.startswith(str(self.scratch)):
            label = f"(scratch)/{Path(path).name}"
        else:
            return value
        return label + (f"|{rest}" if rest else "")

    def run(self, algorithm: str, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        from mapsmith_qgis import subprocess_env
        from mapsmith_qgis.run import RUN_TIMEOUT_S, _failure

        argv = [self.executable, "--json", "run", algorithm, "--", *(f"{k}={v}" for k, v in pairs)]
        self.done.append({"algorithm": algorithm, "parameters": [[k, self._label(v)] for k, v in pairs]})
        self.ctx.parameters["x-mapsmith:qgis_steps"] = self.done
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=RUN_TIMEOUT_S, env=subprocess_env(), stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineError(
                f"qgis_process could not run {algorithm}: {exc}",
                code="QGIS_UNAVAILABLE",
                evidence={"algorithm": algorithm, "executable": self.executable},
                hint="check that qgis_process starts by hand (server_info lists the qgis stack's state)",
            ) from exc
        if done.returncode != 0:
            raise _failure(algorithm, done, argv)
        try:
            return dict(json.loads(done.stdout.decode("utf-8", "replace")).get("results") or {})
        except ValueError:
            return {}

    def main(self, algorithm: str, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        """The step that does the operation's work: recorded as the run's algorithm and parameters."""
        results = self.run(algorithm, pairs)
        self.ctx.engine_components["algorithm"] = algorithm
        self.ctx.parameters["x-mapsmith:qgis_algorithm"] = algorithm
        self.ctx.parameters["x-mapsmith:qgis_parameters"] = self.done[-1]["parameters"]
        return results

    def deliver(self) -> None:
        """Move the last step's output onto the runner's temporary path."""
        final = Path(self.final_path())
        if not final.exists():
            raise EngineError(
                f"QGIS {self.done[-1]['algorithm']} reported success but wrote no output",
                code="QGIS_NO_OUTPUT",
                evidence={"steps": self.done},
                hint="the algorithm may write nothing for these inputs; check the parameters",
            )
        assert self.ctx.temp_output is not None
        os.replace(final, self.ctx.temp_output)


def writable(ctx: RunContext) -> str | None:
    """Eligibility: None when QGIS can write the output format, else why not."""
    suffix = ctx.output_path.suffix.lower() if ctx.output_path else ""
    if suffix and suffix not in WRITABLE_SUFFIXES:
        return (
            f"QGIS's GDAL here cannot write {suffix}; write one of {', '.join(WRITABLE_SUFFIXES)} "
            "(convert_format can turn it into GeoParquet afterwards)"
        )
    return None


def _transform(steps: _Steps, source: str, target_crs: Any, record: dict[str, Any], out: str) -> None:
    pairs = [("INPUT", source), ("TARGET_CRS", _crs_arg(target_crs))]
    if record.get("pipeline"):
        pairs.append(("OPERATION", record["pipeline"]))
    pairs.append(("OUTPUT", out))
    steps.run("native:reprojectlayer", pairs)


def _crs_arg(crs: Any) -> str:
    authority = crs.to_authority()
    return f"{authority[0]}:{authority[1]}" if authority else f"WKT:{crs.to_wkt()}"


def _in_metres(ctx: RunContext, steps: _Steps, purpose: str, work: Callable[[str, float, str], None]) -> None:
    """Run ``work(source, metres_per_unit, out)`` in a CRS where a metre is a metre, as the opensource stack does.

    The layer's own CRS when it is projected with a scale within 1 % of true at the data; otherwise
    the UTM zone estimated from the extent, with QGIS reprojecting there and back along the PROJ
    operations MapSmith chose (passed as OPERATION, so QGIS does not pick its own).
    """
    from mapsmith.crs import choose_transformer, crs_label, estimate_utm_crs, linear_unit_metres, parse_crs
    from mapsmith_opensource.common import MAX_SCALE_DISTORTION, UTM_ZONE_SPAN_DEGREES, scale_distortion

    info = ctx.inputs["input_path"]
    source = parse_crs(info.crs_wkt)
    aoi = info.bounds_lonlat
    distortion = None if source.is_geographic else scale_distortion(source, aoi)
    if aoi is None or (not source.is_geographic and (distortion is None or distortion <= MAX_SCALE_DISTORTION)):
        unit = 1.0 if source.is_geographic else linear_unit_metres(source)
        ctx.crs_decisions.update(
            {
                "analysis_crs": crs_label(source),
                "reason": f"{crs_label(source)} is projected with a scale within {MAX_SCALE_DISTORTION:.0%} of true "
                f"at the data, so it was {purpose} in its own units ({unit} m each)"
                if aoi is not None
                else f"empty input: nothing was {purpose}",
                "source_crs": crs_label(source),
                "target_crs": None,
            }
        )
        work(steps.source("input_path"), unit, steps.final_path())
        return
    analysis = estimate_utm_crs(aoi)
    _, leg_in = choose_transformer(source, analysis, aoi)
    _, leg_out = choose_transformer(analysis, source, aoi)
    why = (
        f"{crs_label(source)} is geographic (degrees), so metres cannot be measured in it"
        if source.is_geographic
        else f"{crs_label(source)} distorts distances by {distortion:.1%} at the data's centre"
    )
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(analysis),
            "reason": f"{why}; {purpose} in the UTM zone estimated from the layer's extent "
            f"({crs_label(analysis)}) and transformed back by QGIS along the PROJ operations recorded here",
            "source_crs": crs_label(source),
            "target_crs": crs_label(source),
            "transformation": leg_out,
            "round_trip": {"transformation": leg_in, "return_transformation": leg_out},
        }
    )
    if aoi[2] - aoi[0] > UTM_ZONE_SPAN_DEGREES:
        ctx.warn(
            "WIDE_LAYER_FOR_UTM",
            f"the layer spans {aoi[2] - aoi[0]:.1f} degrees of longitude, wider than one UTM zone; distances far "
            "from the zone's centre are distorted",
            "reproject to a projected CRS suited to the whole area (e.g. an equidistant one) first",
        )
    there, done = steps.scratch_path("in_analysis_crs"), steps.scratch_path("done_in_analysis_crs")
    _transform(steps, steps.source("input_path"), analysis, leg_in, there)
    work(there, 1.0, done)
    _transform(steps, done, source, leg_out, steps.final_path())


# -- the mapped operations ----------------------------------------------------------------------


def buffer_layer(ctx: RunContext) -> None:
    distance = float(ctx.arguments["distance_meters"])
    segments = int(ctx.arguments["segments_per_quarter_circle"])
    with _Steps(ctx) as steps:

        def buffer(source: str, metres_per_unit: float, out: str) -> None:
            units = distance / metres_per_unit
            ctx.parameters["x-mapsmith:distance_in_analysis_units"] = units
            pairs = [("INPUT", source), ("DISTANCE", repr(units)), ("SEGMENTS", str(segments))]
            # Round caps and joins, one output feature per input: buffer_layer's contract.
            pairs += [("END_CAP_STYLE", "0"), ("JOIN_STYLE", "0"), ("MITER_LIMIT", "2"), ("DISSOLVE", "false")]
            steps.main("native:buffer", [*pairs, ("OUTPUT", out)])

        _in_metres(ctx, steps, "buffered", buffer)
        steps.deliver()


def centroid_layer(ctx: RunContext) -> None:
    with _Steps(ctx) as steps:

        def centroids(source: str, _: float, out: str) -> None:
            steps.main("native:centroids", [("INPUT", source), ("ALL_PARTS", "false"), ("OUTPUT", out)])

        _in_metres(ctx, steps, "reduced to centroids", centroids)
        steps.deliver()


def clip_layer(ctx: RunContext) -> None:
    from mapsmith.crs import crs_label, parse_crs

    with _Steps(ctx) as steps:
        source, mask = ctx.inputs["input_path"], ctx.inputs["mask_path"]
        reason = "clipped in input_path's CRS, so the input's coordinates are written unchanged"
        if source.crs_wkt and mask.crs_wkt and not parse_crs(source.crs_wkt).equals(parse_crs(mask.crs_wkt)):
            reason += f"; QGIS transformed the mask from {crs_label(parse_crs(mask.crs_wkt))} on the fly"
        ctx.crs_decisions.update({"analysis_crs": crs_label(parse_crs(source.crs_wkt)), "reason": reason})
        steps.main(
            "native:clip",
            [
                ("INPUT", steps.source("input_path")),
                ("OVERLAY", steps.source("mask_path")),
                ("OUTPUT", steps.final_path()),
            ],
        )
        steps.deliver()


def reproject_layer(ctx: RunContext) -> None:
    from mapsmith.crs import choose_transformer, crs_label, parse_crs

    info = ctx.inputs["input_path"]
    source, target = parse_crs(info.crs_wkt), parse_crs(ctx.arguments["target_crs"])
    _, record = choose_transformer(source, target, info.bounds_lonlat)
    ctx.expected_output_crs = target.to_wkt()
    ctx.parameters["target_crs"] = crs_label(target)
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(target),
            "reason": f"reprojection requested from {crs_label(source)} to {crs_label(target)}; QGIS was given "
            "the PROJ operation MapSmith chose (OPERATION), so both stacks apply the same one",
            "source_crs": crs_label(source),
            "target_crs": crs_label(target),
            "transformation": record,
        }
    )
    with _Steps(ctx) as steps:
        pairs = [("INPUT", steps.source("input_path")), ("TARGET_CRS", _crs_arg(target))]
        if record.get("pipeline"):
            pairs.append(("OPERATION", record["pipeline"]))
        steps.main("native:reprojectlayer", [*pairs, ("OUTPUT", steps.final_path())])
        steps.deliver()


def validate_dissolve(ctx: RunContext) -> None:
    """Refuse what QGIS's dissolve cannot do under dissolve_layer's contract, before QGIS starts."""
    if (ctx.arguments.get("aggregations") or "").strip():
        raise ArgumentError(
            "the qgis stack's dissolve_layer does not aggregate attributes (native:dissolve keeps the first "
            "feature's values, which is not what the aggregations promise)",
            code="QGIS_UNMAPPED_ARGUMENT",
            evidence={"operation": "dissolve_layer", "argument": "aggregations", "stack": "qgis"},
            hint="leave out aggregations, or run dissolve_layer on the opensource stack (MAPSMITH_STACK=opensource), "
            "or call qgis:native:aggregate directly",
        )
    from mapsmith_opensource.overlay_ops import _field_not_found, _parse_by_fields

    fields = list(ctx.inputs["input_path"].fields)
    for name in _parse_by_fields(ctx.arguments.get("by_fields")):
        if name not in fields:
            raise _field_not_found("by_fields", name, fields, ctx.arguments["input_path"])


def dissolve_layer(ctx: RunContext) -> None:
    import pyogrio

    from mapsmith.errors import InputError
    from mapsmith_opensource.overlay_ops import _check_count, _parse_by_fields

    keys = _parse_by_fields(ctx.arguments.get("by_fields"))
    info = ctx.inputs["input_path"]
    table = pyogrio.read_dataframe(ctx.paths["input_path"], layer=ctx.layers.get("input_path"), read_geometry=False)
    nulls = int(table[keys].isna().any(axis=1).sum()) if keys else 0
    if nulls and ctx.arguments["null_keys"] == "refuse":
        raise InputError(
            f"{nulls} features have a null key and null_keys is 'refuse'",
            code="NULL_GROUP_KEY",
            evidence={"null_key_features": nulls},
            hint="fill the null keys first, or pass null_keys='group' to dissolve them into a group of their own",
        )
    expected = len(table[keys].drop_duplicates()) if keys else min(len(table), 1)
    dropped = [f for f in info.fields if f not in keys]
    ctx.parameters["x-mapsmith:fields_dropped"] = dropped
    ctx.parameters["x-mapsmith:null_key_features"] = nulls
    with _Steps(ctx) as steps:
        dissolved = steps.scratch_path("dissolved")
        pairs = [("INPUT", steps.source("input_path")), *[("FIELD", k) for k in keys], ("OUTPUT", dissolved)]
        steps.main("native:dissolve", pairs)
        # native:dissolve keeps every field with the first feature's values; the contract writes the
        # keys only, so the rest are removed rather than passed off as the group's values.
        steps.run(
            "native:retainfields",
            [("INPUT", dissolved), *[("FIELDS", k) for k in keys], ("OUTPUT", steps.final_path())],
        )
        steps.deliver()
    if dropped:
        ctx.notes.append(f"fields not aggregated and not written (no aggregation declared): {', '.join(dropped)}")
    _check_count(
        ctx,
        expected,
        f"the distinct combinations of {', '.join(keys)} in the input, counted before the dissolve"
        if keys
        else "one group for the whole layer",
    )


MAPPINGS: tuple[Mapped, ...] = (
    Mapped("buffer_layer", ("native:buffer",), buffer_layer, "round caps and joins; geographic layers via UTM"),
    Mapped("centroid_layer", ("native:centroids",), centroid_layer, "geographic layers via UTM"),
    Mapped("clip_layer", ("native:clip",), clip_layer, "QGIS transforms a mask in another CRS on the fly"),
    Mapped(
        "dissolve_layer",
        ("native:dissolve", "native:retainfields"),
        dissolve_layer,
        "non-key fields removed; aggregations refused (QGIS_UNMAPPED_ARGUMENT)",
    ),
    Mapped("reproject_layer", ("native:reprojectlayer",), reproject_layer, "QGIS given MapSmith's PROJ operation"),
)
VALIDATORS: dict[str, Callable[[RunContext], None]] = {"dissolve_layer": validate_dissolve}
