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
    "input environment key": "a key of `inputs[].environment`",
    "input key": "a key of an `inputs[]` entry",
    "output key": "a key of `output`",
}

VOCABULARY: dict[str, Extension] = {
    # -- plugins and their maturity (core/mapsmith/pluginkit/maturity.py, run_records.py)
    "x-mapsmith:plugin": Extension(
        "record key",
        "The plugin (not MapSmith's own) whose code produced the values: entry-point `plugin`, `distribution`, "
        "`version`, `code_sha256` (the listing digest of spec §3.3 over the package's .py and .toml files), `source` "
        "for an operation registered at run time, and its `maturity` when it ran (`experimental`, or `stable` once "
        "promoted on evidence); absent for MapSmith's own operations.",
    ),
    # -- folders of Parquet parts (core/mapsmith/parts.py)
    "x-mapsmith:parts_rows": Extension(
        "check name",
        "run_sql writing a folder of Parquet parts (output_path ending .parquet/): the rows DuckDB reported written "
        "equal the sum of the parts' footer row counts.",
    ),
    "x-mapsmith:output_parts": Extension(
        "parameters key", "The number of Parquet part files in an output written as a folder of parts."
    ),
    "x-mapsmith:digest_rule": Extension(
        "output key",
        "parquet-parts-listing when the dataset is a folder of Parquet parts, digested by manifest-v1 §3.3's listing "
        "rule applied to its *.parquet files (relative paths; _- and .-prefixed names and .crc files excluded); also "
        "set on inputs[] entries for such folders.",
    ),
    # -- fetched data (plugins/opensource/mapsmith_opensource/acquire_ops.py, overpass_ops.py, stac_ops.py)
    "x-mapsmith:fetched": Extension(
        "input key",
        "True on an input that is a URL MapSmith fetched (its `path` is the URL, its `sha256` the bytes received): "
        "the dataset it produced is an original, which lineage ends at and replay never fetches again.",
    ),
    "x-mapsmith:digest_of": Extension(
        "input key",
        "What an input's `sha256` digests when it is not the whole source: for fetch_raster, the window written "
        "(the remote GeoTIFF was read by ranges, never whole).",
    ),
    "x-mapsmith:fetch": Extension(
        "parameters key",
        "One download: the URL asked, its http(s) form, the final URL after redirects, each redirect, the HTTP "
        "status, the address connected to, ETag, Last-Modified, Content-Type, bytes, sha256, retrieval time "
        "and seconds.",
    ),
    "x-mapsmith:unpacked_member": Extension(
        "parameters key",
        "fetch_dataset: the one member unpacked from a zip archive the URL served (the input's digest is the "
        "archive's).",
    ),
    "x-mapsmith:endpoint": Extension("parameters key", "query_overpass: the Overpass API asked."),
    "x-mapsmith:overpass_query": Extension(
        "parameters key", "query_overpass: the Overpass QL sent for the data, as MapSmith built it from the arguments."
    ),
    "x-mapsmith:osm_base": Extension(
        "parameters key",
        "query_overpass: the OpenStreetMap database timestamp the answer reflects (`<meta osm_base>`).",
    ),
    "x-mapsmith:elements_received": Extension(
        "parameters key", "query_overpass: how many nodes, ways and relations the answer held."
    ),
    "x-mapsmith:attribution": Extension(
        "parameters key", "The attribution the data's licence requires (OpenStreetMap: ODbL)."
    ),
    "x-mapsmith:search": Extension("parameters key", "stac_search: the catalogue URL and the search as sent."),
    "x-mapsmith:asset_href": Extension(
        "parameters key", "fetch_stac_asset: the asset's URL, resolved against the item's."
    ),
    "x-mapsmith:window": Extension(
        "parameters key",
        "fetch_stac_asset, fetch_raster: the window of the remote grid read (column and row offset, width, height).",
    ),
    "x-mapsmith:bytes_fetched": Extension(
        "parameters key",
        "fetch_stac_asset, fetch_raster: the bytes the range requests brought (through the policy proxy).",
    ),
    "x-mapsmith:item_fetch": Extension(
        "parameters key", "fetch_stac_asset: the download of the STAC item (as `x-mapsmith:fetch`)."
    ),
    "x-mapsmith:fetched_url": Extension("parameters key", "fetch_raster: the http(s) form of the URL read."),
    "x-mapsmith:osm_ids_unique": Extension(
        "check name", "query_overpass: every feature written is one OpenStreetMap element."
    ),
    "x-mapsmith:bytes_as_received": Extension(
        "check name", "fetch_dataset: the file written digests to the sha256 of the bytes received."
    ),
    "x-mapsmith:member_as_archived": Extension(
        "check name", "fetch_dataset: the member unpacked from an archive has the size the archive declares."
    ),
    # -- top-level record keys (core/mapsmith/runner.py)
    "x-mapsmith:engine_choice": Extension(
        "record key",
        "Which stack and engine the router chose (`stack`, `engine`), the engines it passed over and why, "
        "`preferred_by` (`MAPSMITH_ENGINE=…`) when the chosen engine is one the operator's variable puts first, "
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
    "x-mapsmith:map_layers": Extension(
        "record key",
        "`export_map` only: per layer of the exported page, its path, kind, provenance state and the sentence "
        "saying what the preview dropped (features capped, geometry simplified, raster resampled).",
    ),
    "x-mapsmith:media_type": Extension(
        "output key",
        "The media type of an output that is not geodata (`text/html` for `export_map`), whose `crs` is null.",
    ),
    # -- parameters keys
    "x-mapsmith:table_columns": Extension(
        "parameters key", "The columns of a table output with their Arrow types, as written."
    ),
    "x-mapsmith:sheet_name": Extension(
        "parameters key", "The sheet of an .xlsx table output (the output file's name)."
    ),
    "x-mapsmith:sql_result_types": Extension("parameters key", "`run_sql` only: each result column's DuckDB type."),
    "x-mapsmith:sql_encodings": Extension(
        "parameters key",
        "`run_sql` only: the shapefiles read whose .cpg names a code page, and how their text was decoded.",
    ),
    "x-mapsmith:qgis_destinations": Extension(
        "parameters key",
        "`qgis:*` only: each destination besides the main output (argument, QGIS parameter, type, path, sha256, "
        "bytes; per-file digests for a folder, per-layer counts for a GeoPackage).",
    ),
    "x-mapsmith:coordinate_mode": Extension(
        "parameters key",
        "`table_to_points` only: where the coordinates came from, `xy` (two columns) or `wkt` (one column).",
    ),
    "x-mapsmith:skipped_row_count": Extension(
        "parameters key",
        "`table_to_points` only: how many rows were skipped as unreadable under `skip_invalid_rows`.",
    ),
    "x-mapsmith:skipped_rows": Extension(
        "parameters key",
        "`table_to_points` only: the first 100 skipped rows, each with its row number, field, value and reason.",
    ),
    "x-mapsmith:field_replaced": Extension(
        "parameters key",
        "`measure_area`, `measure_length`, `calculate_field`: true when `output_field` existed and was replaced.",
    ),
    "x-mapsmith:expression_canonical": Extension(
        "parameters key",
        "`calculate_field` only: the expression as parsed, fully parenthesised.",
    ),
    "x-mapsmith:field_type": Extension(
        "parameters key",
        "`calculate_field` only: the type the column was written as (`integer`, `real` or `text`).",
    ),
    "x-mapsmith:field_type_source": Extension(
        "parameters key",
        "`calculate_field` only: whether that type was `declared` by the caller or `inferred` from the values.",
    ),
    "x-mapsmith:xy_unit": Extension(
        "parameters key",
        "`calculate_field` only: the unit of `$x` and `$y`, the layer CRS's own (degrees in a geographic CRS).",
    ),
    "x-mapsmith:fields_written": Extension(
        "parameters key",
        "`select_fields` only: the fields written, in the order written.",
    ),
    "x-mapsmith:engine_seconds": Extension(
        "parameters key",
        "Wall-clock seconds the implementation ran (reading, computing, writing the output), before "
        "verification and any repair; an implementation may record its own figure instead.",
    ),
    "x-mapsmith:distance_in_analysis_units": Extension(
        "parameters key",
        "`buffer_layer`, `cluster_points_by_distance`, and `select_features` or `spatial_join` with "
        "`within_distance`: the distance actually applied, in units of the analysis CRS (metres in an "
        "estimated UTM zone, else `distance_meters` divided by the projected CRS's unit in metres).",
    ),
    "x-mapsmith:qgis_algorithm": Extension(
        "parameters key",
        "`qgis:*` operations, and the main algorithm of MapSmith operations run on the qgis stack: the QGIS "
        "Processing algorithm id that ran (`native:buffer`).",
    ),
    "x-mapsmith:qgis_parameters": Extension(
        "parameters key",
        "`qgis:*` operations, and the main algorithm of MapSmith operations run on the qgis stack: the exact "
        "`NAME=value` pairs given to `qgis_process run`, in order, as "
        "`[name, value]`; paths as the caller gave them, the output as `(output_path)`.",
    ),
    "x-mapsmith:qgis_steps": Extension(
        "parameters key",
        "MapSmith operations run with `MAPSMITH_STACK=qgis`: every `qgis_process run` the operation made, in "
        "order, as `{algorithm, parameters}`; parameters as in `x-mapsmith:qgis_parameters`, scratch files as "
        "`(scratch)/<name>`.",
    ),
    "x-mapsmith:esri_tool": Extension(
        "parameters key",
        "Operations run with `MAPSMITH_STACK=esri`: the ArcPy tool that did the operation's main work "
        "(for example `analysis.Buffer`).",
    ),
    "x-mapsmith:esri_steps": Extension(
        "parameters key",
        "Operations run with `MAPSMITH_STACK=esri`: every ArcPy tool call of the run, in order, with its exact "
        "keyword parameters; datasets as the caller gave them, scratch outputs as `(scratch)/<name>`, coordinate "
        "systems as `WKID n` or WKT.",
    ),
    "x-mapsmith:esri_fields_dropped": Extension(
        "parameters key",
        "Fields the ArcPy tool or the file geodatabase added (`BUFF_DIST`, `ORIG_FID`, `Join_Count`, "
        "`Shape_Area`, ...) that the contract does not write, removed before the output was written.",
    ),
    "x-mapsmith:esri_fields_renamed": Extension(
        "parameters key",
        "Join fields ArcGIS suffixed `_1` on a name clash, renamed to the contract's `_join` suffix (old -> new).",
    ),
    "x-mapsmith:spark_job": Extension(
        "parameters key",
        "Operations run with `MAPSMITH_STACK=sedona` on Apache Sedona on Spark: the Spark master URL, Spark's "
        "version, the partitions each input was read in (`input_partitions`, by argument), `output_partitions` "
        "(the parts written: 1 for one file), `default_parallelism`, the seconds the process's SparkSession took to "
        "start (`session_start_seconds`, paid once per process), the part of that start spent waiting for a "
        "cluster's executors (`executor_wait_seconds`) and the seconds of this job (`job_seconds`).",
    ),
    "x-mapsmith:spark_cluster": Extension(
        "parameters key",
        "Operations run on Apache Sedona on Spark (`MAPSMITH_STACK=sedona`): what ran the job, as the driver saw it "
        "at the job's end -- `master` (the master URL; `local[N]` in local mode, N resolved), `deploy` (`local`, "
        "`spark` for a standalone cluster, `k8s`, ...), `application_id`, `executors` (active; 0 in local mode, "
        "where the driver runs the tasks), `executor_cores` (each; a list when they differ; null when unknown), "
        "`executor_memory` (each, Spark's setting), `executor_hosts`, `spark_version` and `sedona_version`.",
    ),
    "x-mapsmith:features_outside_mask": Extension(
        "parameters key",
        "`clip_layer`: how many input features lie wholly outside the mask and were not written.",
    ),
    "x-mapsmith:lower_dimension_fragments_dropped": Extension(
        "parameters key",
        "`clip_layer` and `overlay_layers`: how many points or lines (single parts) left where features met "
        "the mask's or the other layer's edge were dropped, so each output keeps its input geometry's "
        "dimension.",
    ),
    "x-mapsmith:output_format": Extension(
        "parameters key",
        "`convert_format`: the GDAL/OGR driver the output was written with, chosen by the output path's extension.",
    ),
    "x-mapsmith:buffer_projection": Extension(
        "crs_decisions key",
        "buffer_layer only: how the buffers were computed. `method` `single_projection` (with `max_scale_error`, "
        "measured over every buffer's disc, and `tolerance`) or `local_azimuthal_equidistant` (`planes`, "
        "`plane_centres_lonlat`, the `pipeline` template, `densify_segment_m`, `max_distance_shortfall`, "
        "`features_over_tolerance`, the rejected `single_projection` and `single_projection_max_scale_error`, "
        "`antimeridian_rule`).",
    ),
    "x-mapsmith:measure_dimensions": Extension(
        "parameters key",
        "measure_length, measure_area: '3d' when each segment's height difference entered the lengths "
        "(use_z=true), '2d' when the measures are horizontal.",
    ),
    "x-mapsmith:planar_scale_error": Extension(
        "parameters key",
        "A planar measure (method='planar'): how far the planar figures are from the ground (geodesic) figures "
        "of the same features, measured at the data: relative, percent, range per feature, statement, features "
        "compared.",
    ),
    "x-mapsmith:derived_fields": Extension(
        "parameters key",
        "Fields of the output whose values MapSmith derived from each feature's geometry: `field`, `measure`, "
        "`method`, `written_by`, `crs` (planar areas) and `action` (written, kept, recomputed on a geometry this "
        "run changed, dropped); the next run reads it to measure them again after a reshaping operation.",
    ),
    "x-mapsmith:physical_values": Extension(
        "parameters key",
        "Raster operations: for each raster input with a band that declares a scale or offset, per band the "
        "scale, the offset and how its values were used (physical: stored x scale + offset; stored and copied "
        "with the same scale and offset; or not read), and under `output` whether the written values are "
        "physical or stored with the scale and offset the output declares.",
    ),
    "x-mapsmith:normalised_inputs": Extension(
        "parameters key",
        "Raster operations: the inputs that were read in a normalised form (a south-up grid read north-up, "
        "a predictor-encoded file re-encoded for an engine that misreads it), by argument, with what was done.",
    ),
    "x-mapsmith:value_unit": Extension(
        "parameters key",
        "Terrain operations: what the output cell values measure and in what unit (degrees clockwise from north, "
        "1/m, a count of observers).",
    ),
    "x-mapsmith:flat_value": Extension(
        "parameters key",
        "`aspect`: the value written for cells with no slope (-1), which is a value, not nodata.",
    ),
    "x-mapsmith:hillshade_scale": Extension(
        "parameters key",
        "`hillshade`: the formula that turns the lighting into bytes, including the rescale from Whitebox's "
        "0..32767 (1 = unlit, 255 = facing the light, 0 = nodata).",
    ),
    "x-mapsmith:sign_convention": Extension(
        "parameters key",
        "`curvature`: what negative and positive values mean for the curvature type computed.",
    ),
    "x-mapsmith:observer_count": Extension(
        "parameters key",
        "`viewshed`: how many observers were used, which is the largest value a cell can hold.",
    ),
    "x-mapsmith:sql_datasets": Extension(
        "parameters key",
        "`run_sql`: the dataset paths the SQL reads, as written in it (each is also an `inputs[]` entry, "
        "`sql_paths[i]`, with its digest).",
    ),
    "x-mapsmith:duckdb_sandbox": Extension(
        "parameters key",
        "`run_sql`: the DuckDB settings that confined the query, read back from the connection (external "
        "access, allowed directories, disabled file systems, extension policy, memory and temp caps, lock).",
    ),
    "x-mapsmith:zones_recomputed": Extension(
        "parameters key",
        "`zonal_statistics`: zones the engine covered with more cells than their area allows (a boundary running "
        "exactly through cell corners), recomputed with vertices rounded to `vertex_grid` map units, and why.",
    ),
    "x-mapsmith:depression_fill": Extension(
        "parameters key",
        "Hydrology operations: what the priority-flood fill did before the result was computed (its parameters, "
        "cells raised, the largest raise, the smallest flat step measured).",
    ),
    "x-mapsmith:direction_codes": Extension(
        "parameters key",
        "`flow_direction`: the encoding of the written directions: for d8 and rho8 the {direction: code} table of "
        "the chosen encoding, for fd8 the bit values, for dinf degrees clockwise from north with -1 for flats.",
    ),
    "x-mapsmith:no_flow_value": Extension(
        "parameters key",
        "`flow_direction`: the value written where a cell has no downslope neighbour (0 for d8, rho8 and fd8; "
        "-1 for dinf).",
    ),
    "x-mapsmith:stream_threshold": Extension(
        "parameters key",
        "`extract_streams`: the accumulation threshold in cells and in km2, the cell area, how it was given, the "
        "conversion, and the rule that a cell at or above it is a stream.",
    ),
    "x-mapsmith:pour_points": Extension(
        "parameters key",
        "`watershed`: each pour point's label, given and snapped coordinates, cell, whether and how far (metres) "
        "it moved, its accumulation, its watershed's cell count and the outlet it is nested in.",
    ),
    "x-mapsmith:watershed_labels": Extension(
        "parameters key",
        "`watershed`: the label table, each raster value with the pour point (feature order, label field) it "
        "belongs to.",
    ),
    "x-mapsmith:zonal_fields": Extension(
        "parameters key",
        "`zonal_statistics`: the output field each requested statistic was written to.",
    ),
    "x-mapsmith:coverage_rule": Extension(
        "parameters key",
        "`zonal_statistics`: how cells are weighted (by the fraction of each cell a zone covers, count as a sum of "
        "fractions, nodata and NaN excluded).",
    ),
    "x-mapsmith:zonal_counts": Extension(
        "parameters key",
        "`zonal_statistics`: how many zones were computed, lay outside the raster or partly outside, had no valid "
        "cell, had no geometry, or got null weighted statistics.",
    ),
    "x-mapsmith:sampled_fields": Extension(
        "parameters key",
        "`sample_raster_at_points`: each field written, with the raster band number its values were sampled from.",
    ),
    "x-mapsmith:clip_window": Extension(
        "parameters key",
        "`clip_raster`: the window of the input grid kept (row and column offset, rows, columns), the valid cells "
        "kept, and the cells of that window set to nodata because they lie outside the mask.",
    ),
    "x-mapsmith:output_grid": Extension(
        "parameters key",
        "Raster operations that build a new grid (`reproject_raster`, `resample_raster`, `rasterize_layer`, "
        "`euclidean_distance`, `idw_interpolation`): the grid written (width, height, cell size, GDAL transform, "
        "CRS unit, how it was chosen, and for `resample_raster` the scale factor).",
    ),
    "x-mapsmith:reclass_counts": Extension(
        "parameters key",
        "`reclassify_raster`: cells matched by each rule, cells no rule matched and what became of them, input "
        "nodata cells, and the output type and nodata value.",
    ),
    "x-mapsmith:band_bindings": Extension(
        "parameters key",
        "`band_math`: each name in the expression, with the input and band (number and name) it was bound to.",
    ),
    "x-mapsmith:cells_undefined": Extension(
        "parameters key",
        "`band_math`: cells whose bands were valid but whose result was not finite (division by zero, a "
        "logarithm or root out of its domain, overflow), written as nodata.",
    ),
    # -- check names (verification[].name); the spec's core names need no prefix
    "x-mapsmith:table_readable": Extension(
        "check name", "A table output (CSV, JSON, Parquet, XLSX) was read back from the bytes written."
    ),
    "x-mapsmith:row_count": Extension("check name", "A table output read back has as many rows as were written."),
    "x-mapsmith:columns_present": Extension(
        "check name", "A table output read back has the columns written, in order."
    ),
    "x-mapsmith:column_types": Extension(
        "check name",
        "Each column of a table output reads back as the type family written (integer, number, text, boolean, "
        "temporal).",
    ),
    "x-mapsmith:declared_geometry_type": Extension(
        "check name", "`run_sql` only: the result holds only the geometry type declared in `geometry_type`."
    ),
    "x-mapsmith:container_layers_intact": Extension(
        "check name",
        "Adding a layer to a GeoPackage left every other layer's stored rows and metadata rows unchanged "
        "(sha256 of each, before and after).",
    ),
    "x-mapsmith:container_layer_written": Extension(
        "check name", "The layer added to a GeoPackage holds exactly the verified rows (sha256 of the stored rows)."
    ),
    "x-mapsmith:geojson_rows": Extension(
        "check name", "The GeoJSON written with options holds as many features as the verified layer."
    ),
    "x-mapsmith:geojson_crs_member": Extension(
        "check name",
        "A GeoJSON kept in a CRS other than WGS 84 names it in its legacy crs member, and GDAL reads it back as "
        "that CRS.",
    ),
    "x-mapsmith:geojson_members_written": Extension(
        "check name", "The feature_collection_members asked for read back at the top level of the GeoJSON."
    ),
    "x-mapsmith:layers_written": Extension(
        "check name",
        "`qgis:*` with a GeoPackage file destination: the layers the algorithm wrote, each with its feature count, "
        "read back from the file (also a parameters key with the same counts).",
    ),
    "x-mapsmith:rows_accounted": Extension(
        "check name",
        "`table_to_points`: the points written plus the rows skipped equal the table's row count.",
    ),
    "x-mapsmith:fields_as_requested": Extension(
        "check name",
        "`select_fields`, `rename_fields`, `calculate_field`: exactly the intended fields, in order, read back "
        "from the written file (for `calculate_field`, with the type it was written as).",
    ),
    "x-mapsmith:georeferencing_unambiguous": Extension(
        "check name",
        "Precondition on a raster input (named in `argument`): the GeoTIFF's own tags, any `.aux.xml` sidecar and "
        "any world file agree on where it lies, or the caller chose one with `GDAL_GEOREF_SOURCES`; otherwise "
        "the run is refused before the engine starts.",
    ),
    "x-mapsmith:projected_grid": Extension(
        "check name",
        "Precondition for operations that need metres (`needs_projected_crs`): the raster input named in "
        "`argument` is in a projected CRS; a geographic one is refused before the engine starts.",
    ),
    "x-mapsmith:engine_read_matches": Extension(
        "check name",
        "Whitebox operations: a spread of cells read by the engine equals the same cells read by GDAL, so a "
        "decoder that misreads the file (a TIFF predictor it ignores) stops the run instead of computing on it.",
    ),
    "x-mapsmith:whitebox_calls": Extension(
        "parameters key",
        "Whitebox operations: every engine call made, in order, as the tool (`category.tool`) and the keyword "
        "arguments passed (rasters named by type).",
    ),
    "x-mapsmith:coverage_within_zone_area": Extension(
        "check name",
        "`zonal_statistics`: for every zone, the covered cell fractions times the cell area do not exceed the "
        "zone's own area, an independent bound on the engine's coverage.",
    ),
    "x-mapsmith:cell_area_conserved": Extension(
        "check name",
        "`raster_to_polygons`: the written polygons' total planar area equals the valid cells times the cell area, "
        "so no cell was lost or counted twice.",
    ),
    "x-mapsmith:flow_conserved": Extension(
        "check name",
        "`watershed`: each outlet's flow accumulation (cells) equals its watershed's cell count plus those of the "
        "watersheds nested upstream of it.",
    ),
    "x-mapsmith:grid_matches": Extension(
        "check name",
        "Raster outputs: the written file's width, height and geotransform are the ones the operation computed.",
    ),
    "x-mapsmith:nodata_declared": Extension(
        "check name",
        "Raster outputs: the written file declares the nodata value the operation meant to write.",
    ),
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
    "x-mapsmith:coordinates_crs": Extension(
        "crs_decisions key",
        "`convert_format` to a table only: the CRS of the WKT or x/y columns (null when the geometry was left out).",
    ),
    "x-mapsmith:alignment": Extension(
        "crs_decisions key",
        "Second inputs moved into input_path's CRS before computing, by argument: each with `source_crs`, "
        "`target_crs`, `reason` and the `transformation` (same shape as the spec's) that was applied.",
    ),
    "x-mapsmith:tolerance_in_analysis_units": Extension(
        "parameters key",
        "`simplify_layer`: the tolerance actually applied, in units of the analysis CRS (metres in an "
        "estimated UTM zone, else `tolerance_meters` divided by the projected CRS's unit in metres).",
    ),
    "x-mapsmith:within_tolerance": Extension(
        "check name",
        "`simplify_layer`: every feature's vertex-sampled Hausdorff distance to its simplification is within "
        "`tolerance_meters`, and no feature gained vertices (critical only with `preserve_topology`).",
    ),
    "x-mapsmith:points_inside_features": Extension(
        "check name",
        "`point_on_surface`: every output point lies strictly inside its polygon, or on its line.",
    ),
    "x-mapsmith:hulls_contain_features": Extension(
        "check name",
        "`convex_hull`: every written hull covers the features it was made from.",
    ),
    "x-mapsmith:lengths_non_negative": Extension(
        "check name",
        "`measure_length`: every computed `length_m` is finite and zero or more.",
    ),
    "x-mapsmith:repair_report": Extension(
        "parameters key",
        "`repair_geometries`: what the explicit repair changed: invalid counts before and after, counts by "
        "GEOS reason, the features repaired and those left empty (0-based input positions) with type and "
        "geodesic area or length before and after, and the lower-dimension parts dropped.",
    ),
    "x-mapsmith:features_not_emptied": Extension(
        "check name",
        "Non-critical, `repair_geometries`: no repaired feature was left with an empty geometry.",
    ),
    "x-mapsmith:study_area_covers_points": Extension(
        "check name",
        "Non-critical, `nearest_neighbour_index` (returned in the result; the operation writes no dataset): "
        "the stated `area_m2` is at least the area of the points' convex hull.",
    ),
    "x-mapsmith:distance_method": Extension(
        "parameters key",
        "`nearest_join` and `spatial_join` with `within_distance`, `elevation_profile`, `euclidean_distance` and "
        "`idw_interpolation`: how distances in metres were measured: planar in the named CRS (from each cell "
        "centre, for the grids), or geodesic on the named ellipsoid (for the joins, with candidates found in the "
        "named UTM zone).",
    ),
    "x-mapsmith:join_counts": Extension(
        "parameters key",
        "The join operations: how many features or rows of each input matched, stayed unmatched or were left "
        "out, with operation-specific counts (null values, boundary points, allocated quantity, unmatched "
        "keys).",
    ),
    "x-mapsmith:renamed_fields": Extension(
        "parameters key",
        "Fields renamed because both inputs carried the name: original name to new name (join operations), or"
        " original name to `[input_path's, overlay_path's]` new names (`overlay_layers`); `{}` when none.",
    ),
    "x-mapsmith:tie_rule": Extension(
        "parameters key",
        "`nearest_join` and `locate_extreme_cell`: how equally near join features, or cells sharing the extreme "
        "value, are decided between, and how many ties there were.",
    ),
    "x-mapsmith:boundary_rule": Extension(
        "parameters key",
        "`count_in_polygons`, `summarize_points_in_polygons`: how a point on a polygon boundary is counted.",
    ),
    "x-mapsmith:key_normalisation": Extension(
        "parameters key",
        "`join_attributes`: the key types on both sides, whether a number-to-text conversion was applied and "
        "by which rule, or why it was not, with the values that blocked it.",
    ),
    "x-mapsmith:keys_matched": Extension(
        "check name",
        "Non-critical, `join_attributes`: every input feature found a table row; unmatched counts and keys on"
        " both sides in the detail.",
    ),
    "x-mapsmith:quantity_conserved": Extension(
        "check name",
        "Non-critical, `apportion_by_area` with an extensive quantity: no source zone was allocated more than"
        " its total; the total, the allocated amount and the amount outside every target in the detail.",
    ),
    "x-mapsmith:fields_dropped": Extension(
        "parameters key",
        "`dissolve_layer`: the input fields neither used as keys nor given an aggregation, which were not written.",
    ),
    "x-mapsmith:null_key_features": Extension(
        "parameters key",
        "`dissolve_layer`: how many input features had a null in a key field (grouped together with "
        "`null_keys='group'`, never dropped).",
    ),
    "x-mapsmith:fields_filled_with_null": Extension(
        "parameters key",
        "`merge_layers`: by input (`input_paths[i]`), the merged schema's fields that input lacked, so its "
        "features carry null there.",
    ),
    "x-mapsmith:fields_widened": Extension(
        "parameters key",
        "`merge_layers`: fields integer in some inputs and real in others, written as real (refused unless "
        "every integer is within 2^53 in magnitude, so exactly).",
    ),
    "x-mapsmith:where_canonical": Extension(
        "parameters key",
        "`select_features`: the `where` condition as the parser read it, every group in parentheses, keywords"
        " upper-case and field names quoted where needed, so a reader sees the precedence applied.",
    ),
    "x-mapsmith:description": Extension(
        "transformation key",
        "PROJ's name for the coordinate operation applied, e.g. `NAD27 to WGS 84 (4)`.",
    ),
    "x-mapsmith:chosen_by": Extension(
        "transformation key",
        "How the operation was chosen: the ranking `rule`, the `area_of_interest_lonlat` it was ranked for "
        "(null when none was given), how many operations were available and unavailable, every operation "
        "`considered` with its accuracy, area of use, coverage and the `verdict` on it (`considered_not_listed` "
        "counts those left off), the `intermediate_crs` of a path through another datum, and for a ballpark "
        "between different datums its `ballpark` estimate (`expected_error_m`, `estimated_with`, "
        "`sampled_at_lonlat`, `accepted_by`).",
    ),
    "x-mapsmith:better_unavailable": Extension(
        "transformation key",
        "A more accurate operation PROJ knows but cannot run on this machine (`operation`, `accuracy_m`, "
        "`missing_grids`); present only when it beats the one applied.",
    ),
    "x-mapsmith:output_crs_source": Extension(
        "crs_decisions key",
        "`run_sql`: where the result's CRS came from: the geometry column's declared CRS, `output_crs` stated "
        "by the caller, or the one CRS every input shares (never guessed).",
    ),
    "x-mapsmith:output_crs": Extension(
        "crs_decisions key",
        "`run_sql`: the CRS the result is labelled with, as an authority code where PROJ finds one.",
    ),
    "x-mapsmith:resampling": Extension(
        "crs_decisions key",
        "`reproject_raster`: the resampling method that moved cell values onto the new grid, as the caller chose it.",
    ),
    "x-mapsmith:pixel_registration": Extension(
        "crs_decisions key",
        "Raster inputs, by argument: whether values describe cells (`AREA_OR_POINT=Area`) or samples at points "
        "(`Point`), and that positions come from GDAL's geotransform without a second half-cell shift.",
    ),
    "x-mapsmith:map_library_intact": Extension(
        "check name",
        "`export_map`: the map library inlined in the page is byte for byte the pinned release (sha256 per file).",
    ),
    "x-mapsmith:no_remote_resources": Extension(
        "check name",
        "`export_map`: the page loads no script, style, font or image from another origin (background tiles "
        "aside, which are optional and said).",
    ),
    "x-mapsmith:layers_rendered": Extension(
        "check name",
        "`export_map`: every input dataset became a layer of the page.",
    ),
    # -- engine keys
    "x-mapsmith:components": Extension(
        "engine key",
        "Versions of the libraries behind the named engine, by name (for geopandas: shapely, GEOS, pyproj, "
        "PROJ, pyogrio, GDAL), as the implementation reports them.",
    ),
    # -- inputs[].environment keys
    "x-mapsmith:georeferencing_from": Extension(
        "input environment key",
        "Raster inputs positioned by something other than the file's own tags: the file GDAL took the "
        "georeferencing from (a `.aux.xml` sidecar, a world file).",
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
