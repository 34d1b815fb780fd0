"""overlay_layers(how='intersection') on SedonaDB, GeoParquet file to GeoParquet file: SedonaDB reads both
layers, counts their validity, finds the intersecting pairs, cuts each pair's piece and writes the output itself;
only the rare pieces that are not already a valid polygon pass through Python.

The WKB path (``sedonadb_overlay.sedonadb_overlay_intersection``) reads both layers into GeoDataFrames and hands
their geometries to SedonaDB as WKB: at benchmarks/goal_ops' 1,000,000 parcels it held 2.1 GiB against raw
SedonaDB's 0.27 GiB (docs/benchmarks.md, the 10M goal table). Here no layer is read into Python:

1. the pieces: each pair's ``ST_Intersection`` (GEOS, as shapely's) with both rows' fields, numbered by row
   (``row_number() OVER ()`` in file order, spatial_join_sedonadb's context) and flagged when the piece is not a
   valid Polygon or MultiPolygon, are written to a temporary Parquet file;
2. the flagged pieces (lines and points where the layers only touch, collections, invalid polygons) are read back
   and given exactly the treatment overlay_ops gives every piece (make_valid for a polygonal one, as geopandas
   does, then the polygonal part kept and every lower-dimension fragment counted: ``overlay_ops.polygonal_parts``);
3. the output is written by SedonaDB, the pieces in the GeoPandas engine's order (input row, then overlay row),
   fields renamed as ``overlay_ops.overlay_fields`` names them, the geometry column last as ``geometry``.

The notes, counts, answer, checks and CRS record are overlay_ops'; tests/vector/test_sedonadb_overlay_files.py
compares the two paths' files byte for byte in their geometries and field by field. Taken when both inputs and the
output are single GeoParquet files the file-to-file engines carry (``spatial_join_duckdb._geoparquet``), in one
CRS, with features in both, no field named ``geometry`` beside the geometry column and no derived field an
earlier run wrote (the GeoPandas engine measures those again on the pieces); otherwise the WKB path runs and a
note says why. Written by hand because no library does it: the composition of SedonaDB's queries into
overlay_ops' rules, and the output's GeoParquet metadata (SedonaDB writes none).

Memory, measured on benchmarks/goal_ops' 1,000,000 parcels and 10,000 zones (warm run, peak RSS 0.72 GiB against the
WKB path's 2.1 GiB and raw SedonaDB's 0.27): MapSmith with SedonaDB imported holds 0.28 GiB before any work;
SedonaDB 0.5's ``row_number() OVER ()`` holds the numbered layer whole (the numbering alone, written out: 370 against
264 MiB without it), and the final ORDER BY about 0.19 GiB more. Numbering the rows in Python instead (an Arrow stream
of the file's batches with their positions) held more (412 MiB for the numbering alone).

It must never cut layers in two CRS, cut an invalid input, keep a piece overlay_ops would not keep or in another
form, write rows in another order than the GeoPandas engine's, or import sedonadb when imported.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mapsmith_opensource import overlay_ops, sedonadb_ops
from mapsmith_opensource.join_ops import points_in_polygons_sql as sql
from mapsmith_opensource.join_ops import spatial_join_duckdb as files

if TYPE_CHECKING:
    from mapsmith.runner import RunContext
    from mapsmith.verify.facts import OutputFacts

KEYS = ("input_path", "overlay_path")
ENGINE_NAME = "SedonaDB (file to file)"  # how spatial_join_duckdb._geoparquet's reasons name this path
PATH_NOTE = (
    "engine path: file to file -- SedonaDB read input_path and overlay_path itself (GeoParquet), counted their "
    "null, empty and invalid geometries, found the intersecting pairs, cut each pair's piece (ST_Intersection, "
    "GEOS as in shapely) and wrote the output itself in input row, then overlay row order; only the pieces that "
    "were not a valid polygon (where the layers only touch, or a cut gave a collection) passed through Python, "
    "for overlay_ops' own treatment"
)
CONSEQUENCE = "an overlay of them is undefined"  # overlay_ops' require_valid refusal, word for word
# The geometry types a piece may have to be written as SedonaDB cut it (after a validity test).
POLYGONAL = ("ST_Polygon", "ST_MultiPolygon")


def files_problem(ctx: RunContext) -> tuple[dict[str, files._GeoParquet], str | None]:
    """Both inputs' footers, and why this path cannot take the run (None when it can): read before any data."""
    from mapsmith import parts
    from mapsmith.derived_fields import DerivedPlan
    from mapsmith_opensource import io

    for key in KEYS:
        path = ctx.paths[key]
        if not io.is_parquet(path) or not path.is_file():
            return {}, f"{key} is not one GeoParquet file"
        if not ctx.inputs[key].feature_count:
            return {}, f"{key} has no features"
    given = str(ctx.arguments.get("output_path") or "")
    if ctx.output_path is None or not io.is_parquet(ctx.output_path) or parts.is_folder_output(given):
        return {}, "output_path is not one GeoParquet file"
    plan: DerivedPlan | None = getattr(ctx, "derived", None)
    if plan is not None and plan.fields:
        names = ", ".join(sorted(plan.fields))
        return {}, f"the inputs carry derived fields ({names}), which the GeoPandas engine measures again on the pieces"
    layers = {key: files._geoparquet(ctx.paths[key], key, ENGINE_NAME) for key in KEYS}
    for key, layer in layers.items():
        if layer.problem:
            return layers, layer.problem
        if any(c == "geometry" for c in layer.columns if c != layer.geometry):
            return layers, f"{key} has a field named 'geometry' beside its geometry column {layer.geometry!r}"
    return layers, None


def overlay_files(ctx: RunContext, min_features: int | None) -> bool:
    """Run the intersection file to file and write the output: True; False when this path cannot take the run
    (nothing recorded but a note naming the reason). ``min_features``: the SedonaDB overlay's size threshold, which
    the router applied (its note names it)."""
    layers, problem = files_problem(ctx)
    if problem is not None:
        ctx.notes.append(f"engine path: WKB -- the file-to-file path was not taken: {problem}")
        return False
    _file_to_file(ctx, layers, min_features)
    return True


def _file_to_file(ctx: RunContext, layers: dict[str, files._GeoParquet], min_features: int | None) -> None:
    from mapsmith.crs import crs_label, parse_crs
    from mapsmith.runner import OutputStats
    from mapsmith_opensource.common import INVALID_ROWS_SHOWN, invalid_input_error, record_input_validity
    from mapsmith_opensource.derived import record_unchanged
    from mapsmith_opensource.join_ops.spatial_join_sedonadb import (
        _context,
        _facts,
        _geo_metadata,
        _inspect,
        _rows_written,
    )

    sedonadb_ops._set_engine(ctx, KEYS, min_features)
    ctx.notes.append(PATH_NOTE)
    how = ctx.arguments["how"]
    left, right = layers["input_path"], layers["overlay_path"]
    left_fields, right_fields = left.fields, right.fields
    # the GeoPandas engine's refusal of a suffixed name already taken, before anything is read
    renamed, output_fields = overlay_ops.overlay_fields(how, left_fields, right_fields)
    crs = parse_crs(ctx.inputs["input_path"].crs_wkt or "")
    ctx.crs_decisions.update(
        {
            "analysis_crs": crs_label(crs),
            "reason": "overlaid in input_path's CRS (planar: edges are straight lines in its coordinates), so the "
            "input's coordinates are written unchanged",
        }
    )
    q = sql.quote
    suffix = uuid.uuid4().hex
    views = {key: f"mapsmith_{key}_{suffix}" for key in KEYS}
    pieces_view, kept_view = f"mapsmith_pieces_{suffix}", f"mapsmith_kept_{suffix}"
    taken = [*left.columns, *right.columns, *output_fields]
    i, j, x, kind, g = (q(files._spare_name(n, taken)) for n in ("__i", "__j", "__piece", "__kind", "__g"))
    assert ctx.temp_output is not None
    pieces_path = ctx.temp_output.with_name(ctx.temp_output.name + ".pieces.parquet")
    sd = _context()
    try:
        for key, layer in layers.items():
            # both CRS are equal (eligibility); SedonaDB compares them by name, so both are read without one
            nocrs = {layer.geometry: {"encoding": "WKB"}}
            sedonadb_ops.read_parquet(sd, [layer.path], geometry_columns=nocrs).to_view(views[key])
        inspected = _inspect(sd, views, {"input_path": left, "overlay_path": right})
        for key, ((scan, invalid), _) in inspected.items():
            record_input_validity(
                ctx, key, rows=scan.rows, invalid_count=scan.invalid, missing_count=scan.missing, invalid=invalid
            )
        for key, ((scan, invalid), _) in inspected.items():
            if scan.invalid:
                shown = invalid[:INVALID_ROWS_SHOWN]
                raise invalid_input_error(
                    ctx, key, scan.invalid, [n for n, _ in shown], [r for _, r in shown], CONSEQUENCE
                )
        without_geometry = {}
        for key, (_, facts) in inspected.items():
            if facts.missing:
                without_geometry[key] = facts.missing
                ctx.notes.append(
                    f"{key}: {facts.missing} features have no geometry (null or empty) and take no part in the overlay"
                )

        # 1. every pair's piece with both rows' fields, flagged unless a valid polygon
        def numbered(key: str, layer: files._GeoParquet, row: str) -> str:
            carried = "".join(f", {q(c)}" for c in layer.fields)
            return f"(SELECT row_number() OVER () AS {row}, {q(layer.geometry)} AS {g}{carried} FROM {views[key]})"

        split = len(left_fields)
        payload = [f"l.{q(c)} AS {q(n)}" for c, n in zip(left_fields, output_fields[:split], strict=True)]
        payload += [f"r.{q(c)} AS {q(n)}" for c, n in zip(right_fields, output_fields[split:], strict=True)]
        cut = (
            f"SELECT l.{i} AS {i}, r.{j} AS {j}, {''.join(p + ', ' for p in payload)}"
            f"ST_Intersection(l.{g}, r.{g}) AS {x} "
            f"FROM {numbered('input_path', left, i)} AS l JOIN {numbered('overlay_path', right, j)} AS r "
            f"ON ST_Intersects(l.{g}, r.{g})"
        )
        flagged = (
            f"SELECT *, CASE WHEN ST_GeometryType({x}) IN ({', '.join(repr(t) for t in POLYGONAL)}) "
            f"AND ST_IsValid({x}) THEN 0 ELSE 1 END AS {kind} FROM ({cut})"
        )
        sd.sql(flagged).to_parquet(str(pieces_path))  # GeoParquet: read back with its geometry type
        sd.read_parquet(str(pieces_path)).to_view(pieces_view)

        # 2. the flagged pieces, as overlay_ops treats them
        odd = sd.sql(f"SELECT {i}, {j}, ST_AsBinary({x}) AS w FROM {pieces_view} WHERE {kind} = 1").to_arrow_table()
        kept, fragments, no_area = _treat(odd)
        counted = sd.sql(f"SELECT count(*) AS n FROM {pieces_view}").to_arrow_table().column("n")[0].as_py()
        as_cut = _facts(
            sd, f"(SELECT {x} AS {g} FROM {pieces_view} WHERE {kind} = 0 AND NOT ST_IsEmpty({x}))", g, validity=False
        )

        # 3. the output, in the GeoPandas engine's order
        names = [*(q(n) for n in output_fields), "geometry"]
        carried = "".join(f"{q(n)}, " for n in output_fields)
        source = f"SELECT {i}, {j}, {carried}{x} AS geometry FROM {pieces_view} WHERE {kind} = 0"
        if kept.num_rows:  # the treated pieces beside them (as WKB: SedonaDB writes a union's geometry as binary)
            sd.create_data_frame(kept).to_view(kept_view)
            source += (
                f" UNION ALL SELECT p.{i}, p.{j}, {''.join(f'p.{q(n)}, ' for n in output_fields)}k.w AS geometry "
                f"FROM {pieces_view} AS p JOIN {kept_view} AS k ON p.{i} = k.{i} AND p.{j} = k.{j}"
            )
        out_facts = _merge_facts(as_cut, kept)
        written_layer = replace(left, geometry="geometry")
        sedonadb_ops.write_geoparquet(
            sd,
            f"SELECT {', '.join(names)} FROM ({source}) ORDER BY {i}, {j}",
            ctx.temp_output,
            _geo_metadata(written_layer, out_facts),
        )
    finally:
        sedonadb_ops.drop_views(sd, (*views.values(), pieces_view, kept_view))
        pieces_path.unlink(missing_ok=True)

    written = _rows_written(ctx.temp_output)
    tally = overlay_ops.OverlayTally(counted, written, no_area, fragments)
    overlay_ops.record_overlay(
        ctx, f"{OVERLAY_LABEL}(how={how!r}, keep_geom_type=False)", tally, renamed, without_geometry
    )
    record_unchanged(ctx, [*output_fields, "geometry"])
    # Every piece written is valid: as cut (ST_IsValid above) or as overlay_ops' treatment left it (counted).
    ctx.output_stats = OutputStats(
        feature_count=written, invalid_count=out_facts.invalid, geometry_types=out_facts.geometry_types
    )


OVERLAY_LABEL = "SedonaDB (ST_Intersects join, ST_Intersection per pair, file to file)"


def _treat(odd: Any) -> tuple[Any, int, int]:
    """The flagged pieces (``odd``: row numbers and WKB) as overlay_ops treats every piece: the kept ones as an
    Arrow table (row numbers, WKB ``w``), the lower-dimension fragments dropped and the pieces left with no area."""
    import numpy as np
    import pyarrow as pa
    import shapely

    i_name, j_name = odd.column_names[:2]
    pieces = shapely.from_wkb(odd.column("w").to_numpy(zero_copy_only=False))
    polygonal = np.isin(shapely.get_type_id(pieces), (3, 6))
    pieces[polygonal] = shapely.make_valid(pieces[polygonal])  # as geopandas does to polygonal pieces
    kept, fragments = overlay_ops.polygonal_parts(pieces)
    present = ~shapely.is_missing(kept)
    table = pa.table(
        {
            i_name: odd.column(i_name).filter(pa.array(present)),
            j_name: odd.column(j_name).filter(pa.array(present)),
            "w": pa.array(shapely.to_wkb(kept[present]), type=pa.binary()),
        }
    )
    return table, fragments, int((~present).sum())


def _merge_facts(as_cut: OutputFacts, kept: Any) -> OutputFacts:
    """The output's facts: those of the valid polygons as cut (SedonaDB counted them, empty ones left out) with
    those of the treated pieces (layer_facts.FactsTally, validity counted)."""
    import shapely

    from mapsmith.verify.facts import OutputFacts as Facts
    from mapsmith_opensource.layer_facts import FactsTally

    tally = FactsTally()
    if kept.num_rows:
        tally.add(shapely.from_wkb(kept.column("w").to_numpy(zero_copy_only=False)))
    treated = tally.facts()
    boxes = [b for b in (as_cut.bounds, treated.bounds) if b is not None]
    bounds = (
        (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))
        if boxes
        else None
    )
    types = tuple(sorted(set(as_cut.geometry_types) | set(treated.geometry_types)))
    return Facts(as_cut.rows + treated.rows, treated.missing, as_cut.invalid + treated.invalid, types, bounds)
