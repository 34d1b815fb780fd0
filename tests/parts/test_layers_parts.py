"""select_features, clip_layer, reproject_layer and buffer_layer on DuckDB with input_path a folder of GeoParquet
parts: DuckDB reads the parts in listing order (the order GeoPandas reads them in), and the rows, fields and record
are the GeoPandas engine's. spatial_join on DuckDB reads folders as either input; SedonaDB's file-to-file join reads
one file, so there a folder takes its WKB path with the reason (it crashed in the eligibility before: "path is a
directory").

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre. The parts are written last to
first, so the order the files were made in is not the listing order:

    part-0: A (10,10) v 1, B (20,10) v 2, C (30,10) v 3
    part-1: D (40,10) v 4, E (50, NaN) v 5 (an invalid point), F (60,10) v 6
    part-2: G (70,10) v 7, H (80,10) v 8

Worked by hand: ``v > 2.5`` keeps C, D, E, F, G, H (6 rows, in that order); the mask 25..65 x 0..20 keeps C, D
and F (E's NaN meets nothing); E is feature 4 of the layer (3 rows in part-0, then index 1 of part-1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
ROWS = [
    [("A", 10.0, 10.0, 1.0), ("B", 20.0, 10.0, 2.0), ("C", 30.0, 10.0, 3.0)],
    [("D", 40.0, 10.0, 4.0), ("E", 50.0, math.nan, 5.0), ("F", 60.0, 10.0, 6.0)],
    [("G", 70.0, 10.0, 7.0), ("H", 80.0, 10.0, 8.0)],
]


def write_parts(folder: Path, clean: bool = False) -> str:
    folder.mkdir()
    for n in reversed(range(len(ROWS))):
        rows = [r for r in ROWS[n] if not (clean and math.isnan(r[2]))]
        points = [Point(X0 + x, Y0 + y) for _, x, y, _ in rows]
        write_layer(folder / f"part-{n}.parquet", points, UTM, name=[r[0] for r in rows], v=[r[3] for r in rows])
    return folder.name


def _both(make_app: Callable[..., Any], workspace: Path, operation: str, arguments: dict[str, Any]) -> list[Any]:
    """The run on DuckDB (named) and on GeoPandas; their outputs are d.parquet and g.parquet."""
    results = []
    for engine, out in (("duckdb", "d.parquet"), ("geopandas", "g.parquet")):
        result = make_app(MAPSMITH_ENGINE=engine).run(operation, {**arguments, "output_path": out})
        assert result.engine["name"] == engine
        results.append(result)
    duck, ref = read(workspace / "d.parquet"), read(workspace / "g.parquet")
    import pandas as pd

    pd.testing.assert_frame_equal(duck, ref)
    mine, theirs = manifest(workspace / "d.parquet"), manifest(workspace / "g.parquet")
    assert mine["verification"] == theirs["verification"]
    assert mine["inputs"] == theirs["inputs"]
    return [duck, mine]


def _invalid_detail(record: dict[str, Any]) -> str:
    (check,) = [
        c
        for c in record["verification"]
        if c["name"] == "x-mapsmith:input_geometry_valid" and c.get("argument") == "input_path"
    ]
    return str(check["detail"])


def test_select_reads_the_parts_in_listing_order(make_app: Callable[..., Any], workspace: Path) -> None:
    folder = write_parts(workspace / "pts.parquet")
    out, record = _both(make_app, workspace, "select_features", {"input_path": folder, "where": "v > 2.5"})
    assert out["name"].tolist() == ["C", "D", "E", "F", "G", "H"]
    assert "1 of 8 geometries invalid (first feature indices [4]" in _invalid_detail(record)


def test_clip_of_the_parts_keeps_the_points_in_the_mask(make_app: Callable[..., Any], workspace: Path) -> None:
    folder = write_parts(workspace / "pts.parquet")
    write_layer(workspace / "mask.parquet", [box(X0 + 25, Y0, X0 + 65, Y0 + 20)], UTM)
    out, record = _both(make_app, workspace, "clip_layer", {"input_path": folder, "mask_path": "mask.parquet"})
    assert out["name"].tolist() == ["C", "D", "F"]
    assert "first feature indices [4]" in _invalid_detail(record)


def test_reproject_and_buffer_of_clean_parts(make_app: Callable[..., Any], workspace: Path) -> None:
    """The clean twin (no invalid point): reprojected and buffered by DuckDB as GeoPandas does, row for row."""
    import shapely

    folder = write_parts(workspace / "pts.parquet", clean=True)
    out, _ = _both(make_app, workspace, "reproject_layer", {"input_path": folder, "target_crs": "EPSG:4326"})
    assert out["name"].tolist() == ["A", "B", "C", "D", "F", "G", "H"]
    assert out.crs.to_epsg() == 4326
    for engine in ("d", "g"):
        (workspace / f"{engine}.parquet").unlink()
        (workspace / f"{engine}.parquet.provenance.json").unlink()
    out, _ = _both(make_app, workspace, "buffer_layer", {"input_path": folder, "distance_meters": 10})
    assert out["name"].tolist() == ["A", "B", "C", "D", "F", "G", "H"]
    # a 10 m buffer of 16 segments a quarter circle (the default): the regular 64-gon, area 64/2 r^2 sin(2 pi / 64)
    expected = 32 * 100 * math.sin(2 * math.pi / 64)
    # (the shoelace sum over coordinates near 5e6 m loses about 1e-11 of the area)
    assert shapely.area(out.geometry.values).tolist() == pytest.approx([expected] * 7, rel=1e-9)


def test_buffer_measure_follows_a_rewritten_part(make_app: Callable[..., Any], workspace: Path) -> None:
    """Trap: the measure is cached per run by the files' bytes; rewriting one part (same folder, same names) must
    be read again, not answered from the cache."""
    folder = write_parts(workspace / "pts.parquet", clean=True)
    app = make_app(MAPSMITH_ENGINE="duckdb")
    first = app.run("buffer_layer", {"input_path": folder, "distance_meters": 10, "output_path": "b1.parquet"})
    assert first.engine["name"] == "duckdb"
    write_layer(workspace / folder / "part-2.parquet", [Point(X0 + 70, Y0 + 10)], UTM, name=["G"], v=[7.0])
    second = app.run("buffer_layer", {"input_path": folder, "distance_meters": 10, "output_path": "b2.parquet"})
    assert second.engine["name"] == "duckdb"
    assert read(workspace / "b2.parquet")["name"].tolist() == ["A", "B", "C", "D", "F", "G"]
    assert _invalid_detail(manifest(workspace / "b1.parquet")) == "input_path: 0 of 7 geometries invalid"
    assert _invalid_detail(manifest(workspace / "b2.parquet")) == "input_path: 0 of 6 geometries invalid"


def _zone_parts(workspace: Path) -> str:
    """join_path as two parts: Z1 = 15..45 x 0..20 (row 0 of part-0), Z2 = 25..65 x 0..20 (row 0 of part-1)."""
    folder = workspace / "zones.parquet"
    folder.mkdir()
    write_layer(folder / "part-0.parquet", [box(X0 + 15, Y0, X0 + 45, Y0 + 20)], UTM, zone=["Z1"])
    write_layer(folder / "part-1.parquet", [box(X0 + 25, Y0, X0 + 65, Y0 + 20)], UTM, zone=["Z2"])
    return folder.name


def test_spatial_join_of_two_folders_on_duckdb_is_geopandas_record(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    """Both inputs folders of parts, read by DuckDB itself. By hand (E left out: A B C | D F | G H): Z1 holds B, C,
    D and Z2 holds C, D, F, so the pairs in (input row, join row) order are B-Z1, C-Z1, C-Z2, D-Z1, D-Z2, F-Z2; 4
    input features matched of 7, both zones. The trap: Z1 and Z2 are each row 0 of their part, and B and F each row
    1 of theirs; taken by their part's row number alone, the zones are one (1 matched, not 2) and B and F one input
    row (3 matched, not 4)."""
    arguments = {
        "input_path": write_parts(workspace / "pts.parquet", clean=True),
        "join_path": _zone_parts(workspace),
        "predicate": "intersects",
        "how": "inner",
    }
    duck, record = _both(make_app, workspace, "spatial_join", arguments)
    assert duck["name"].tolist() == ["B", "C", "C", "D", "D", "F"]
    assert duck["zone"].tolist() == ["Z1", "Z1", "Z2", "Z1", "Z2", "Z2"]
    counts = record["parameters"]["x-mapsmith:join_counts"]
    assert (counts["input_features"], counts["input_features_matched"], counts["join_features_matched"]) == (7, 4, 2)
    assert counts["matched_pairs"] == counts["output_features"] == 6


def test_spatial_join_of_a_folder_on_sedonadb_takes_its_wkb_path_with_the_reason(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    """SedonaDB's file-to-file join reads one file: a folder is read whole and joined on its WKB path, and the
    record says why. By hand: the zone 0..45 x 0..20 holds A, B, C, D (E left out)."""
    pytest.importorskip("sedonadb")
    folder = write_parts(workspace / "pts.parquet", clean=True)
    write_layer(workspace / "zones.parquet", [box(X0, Y0, X0 + 45, Y0 + 20)], UTM, zone=["Z"])
    arguments = {"input_path": folder, "join_path": "zones.parquet", "predicate": "intersects", "how": "inner"}
    result = make_app(MAPSMITH_ENGINE="sedonadb").run("spatial_join", {**arguments, "output_path": "j.parquet"})
    assert result.engine["name"] == "sedonadb"
    assert read(workspace / "j.parquet")["name"].tolist() == ["A", "B", "C", "D"]
    notes = " ".join(manifest(workspace / "j.parquet")["notes"])
    assert "input_path is a folder of parts; the SedonaDB engine joins one GeoParquet file" in notes


# -- folders of parts written by DuckDB (output_path ending in ".parquet/") ---------------------------------


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of one 2,048-row group each (DuckDB's smallest row group), so a test layer makes many."""
    from mapsmith_opensource import sql_layer_ops

    monkeypatch.setattr(sql_layer_ops, "PART_OPTIONS", "ROW_GROUP_SIZE 2048, ROW_GROUPS_PER_FILE 1")


def _many_points(path: Path, n: int) -> None:
    write_layer(
        path,
        [Point(X0 + i % 500, Y0 + i // 500) for i in range(n)],
        UTM,
        pid=list(range(n)),
        v=[i % 7 for i in range(n)],
    )


def test_select_writes_parts_in_row_order(small_parts: None, make_app: Callable[..., Any], workspace: Path) -> None:
    """25,000 rows in 2,048-row parts: 13 parts, part-00000 ... part-00012, so part-00010 lists after part-00002
    (DuckDB's own names, part-10 and part-2, would list 10 first); the folder reads back in the input's order,
    as the GeoPandas engine's one file does."""
    import pandas as pd

    _many_points(workspace / "many.parquet", 25_000)
    arguments = {"input_path": "many.parquet", "where": "v >= 0"}
    result = make_app().run("select_features", {**arguments, "output_path": "sel.parquet/"})
    assert result.engine["name"] == "duckdb"
    names = sorted(p.name for p in (workspace / "sel.parquet").iterdir())
    assert names == [f"part-{n:05d}.parquet" for n in range(13)]
    out = read(workspace / "sel.parquet")
    assert out["pid"].tolist() == list(range(25_000))
    record = manifest(workspace / "sel.parquet")
    assert record["parameters"]["x-mapsmith:output_parts"] == 13
    assert record["output"]["x-mapsmith:digest_rule"] == "parquet-parts-listing"
    # the clean twin: one file, on GeoPandas, the same rows
    make_app(MAPSMITH_ENGINE="geopandas").run("select_features", {**arguments, "output_path": "one.parquet"})
    pd.testing.assert_frame_equal(out, read(workspace / "one.parquet"))


def test_an_empty_selection_is_one_declared_part(make_app: Callable[..., Any], workspace: Path) -> None:
    """Trap: DuckDB writes a part without GeoParquet metadata when no row is written; the part declares the
    geometry column and the layer's CRS, so the empty folder is still a layer in EPSG:32610."""
    import pyarrow.parquet as pq

    folder = write_parts(workspace / "pts.parquet")
    result = make_app().run("select_features", {"input_path": folder, "where": "v > 100", "output_path": "e.parquet/"})
    assert result.engine["name"] == "duckdb"
    (part,) = (workspace / "e.parquet").iterdir()
    assert part.name == "part-00000.parquet" and pq.read_metadata(part).num_rows == 0
    out = read(workspace / "e.parquet")
    assert len(out) == 0 and out.crs.to_epsg() == 32610


def test_a_folder_output_takes_duckdb_below_its_threshold(make_app: Callable[..., Any], workspace: Path) -> None:
    """8 points are far below clip_layer's DuckDB threshold, but only DuckDB writes parts on this stack: it runs,
    and GeoPandas is named as passed over for writing one file. Lines cannot be clipped by DuckDB (cut, not
    filtered): the folder request is refused with a code, nothing written."""
    from shapely.geometry import LineString

    from mapsmith.errors import MapSmithError

    folder = write_parts(workspace / "pts.parquet")
    write_layer(workspace / "mask.parquet", [box(X0 + 25, Y0, X0 + 65, Y0 + 20)], UTM)
    result = make_app().run(
        "clip_layer", {"input_path": folder, "mask_path": "mask.parquet", "output_path": "c.parquet/"}
    )
    assert result.engine["name"] == "duckdb"
    assert read(workspace / "c.parquet")["name"].tolist() == ["C", "D", "F"]
    passed = manifest(workspace / "c.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    assert {
        "engine": "geopandas",
        "reason": "writes one file; output_path ends in '/', which asks for a folder of Parquet parts",
    } in passed
    write_layer(workspace / "lines.parquet", [LineString([(X0, Y0), (X0 + 50, Y0 + 10)])], UTM)
    with pytest.raises(MapSmithError) as refused:
        make_app().run(
            "clip_layer", {"input_path": "lines.parquet", "mask_path": "mask.parquet", "output_path": "l.parquet/"}
        )
    error = refused.value
    assert error.code == "OUTPUT_PARTS_UNSUPPORTED"
    assert [p["engine"] for p in error.evidence["passed_over"]] == ["duckdb", "geopandas"]
    assert "takes single 2-D points only" in error.evidence["passed_over"][0]["reason"]
    assert error.hint.startswith("drop the trailing '/' to write one .parquet file, which geopandas can write")
    assert not (workspace / "l.parquet").exists()
    # the hint followed: one file, clipped by GeoPandas
    clipped = make_app().run(
        "clip_layer", {"input_path": "lines.parquet", "mask_path": "mask.parquet", "output_path": "l.parquet"}
    )
    assert clipped.engine["name"] == "geopandas"
    # the line (0,0)-(50,10) inside x 25..65: from (25,5) to (50,10)
    assert read(workspace / "l.parquet").geometry.iloc[0].length == pytest.approx(math.hypot(25, 5))


def test_a_field_named_file_index_keeps_a_folder_from_duckdb(make_app: Callable[..., Any], workspace: Path) -> None:
    """DuckDB tells a folder's parts apart by its virtual ``file_index`` column, and a layer's own field of that
    name is read in its place (the trap: the rows' positions come out null, and DuckDB, unguarded, recorded 0 input
    features matched instead of 3). Such a folder is passed over with the reason and joined by another engine, with
    the hand answer (Z1 = 15..45 holds B, C, D). Its clean twin, the same folder with the field named ``batch``, is
    joined by DuckDB."""
    folder = workspace / "pts.parquet"
    folder.mkdir()
    write_layer(folder / "part-0.parquet", [Point(X0 + 10, Y0 + 10), Point(X0 + 20, Y0 + 10)], UTM, name=["A", "B"])
    write_layer(folder / "part-1.parquet", [Point(X0 + 30, Y0 + 10), Point(X0 + 40, Y0 + 10)], UTM, name=["C", "D"])
    zones = workspace / "zones.parquet"
    write_layer(zones, [box(X0 + 15, Y0, X0 + 45, Y0 + 20)], UTM, zone=["Z1"])
    arguments = {"input_path": "pts.parquet", "join_path": "zones.parquet", "predicate": "intersects", "how": "inner"}
    for field, engine in (("file_index", "geopandas"), ("batch", "duckdb")):
        for n, part in enumerate(sorted(folder.iterdir())):
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pq.read_table(part)
            for old in ("file_index", "batch"):
                if old in table.column_names:
                    table = table.drop_columns([old])
            pq.write_table(table.append_column(field, pa.array([7 + n] * table.num_rows)), part)
        out = f"j_{field}.parquet"
        result = make_app(MAPSMITH_ENGINE="duckdb").run("spatial_join", {**arguments, "output_path": out})
        assert result.engine["name"] == engine
        got = read(workspace / out)
        assert got["name"].tolist() == ["B", "C", "D"]
        assert got[field].tolist() == [7, 8, 8]
        counts = manifest(workspace / out)["parameters"]["x-mapsmith:join_counts"]
        assert (counts["input_features"], counts["input_features_matched"], counts["matched_pairs"]) == (4, 3, 3)
    passed = manifest(workspace / "j_file_index.parquet")["x-mapsmith:engine_choice"]["passed_over"]
    (duck,) = [p for p in passed if p["engine"] == "duckdb"]
    assert duck["reason"] == "input_path has a field named 'file_index', which DuckDB reserves for row positions"


@pytest.mark.parametrize("how", ["inner", "left"])
def test_spatial_join_writes_parts_in_row_order(
    monkeypatch: pytest.MonkeyPatch, make_app: Callable[..., Any], workspace: Path, how: str
) -> None:
    """The join above to a folder (output_path ending in ".parquet/"), no engine named: DuckDB is the engine that
    writes parts. Two rows in the first part, and parts of one byte asked for after it, so each further part holds
    one row: inner gives B-Z1 C-Z1 | C-Z2 | D-Z1 | D-Z2 | F-Z2, five parts; left adds A, G and H without a zone,
    nine rows in eight parts. Read back in listing order, the rows and their order are the one file's; the record's
    counts are the same and it says how many parts."""
    import pandas as pd

    from mapsmith_opensource.join_ops import spatial_join_duckdb

    monkeypatch.setattr(spatial_join_duckdb, "FIRST_PART_ROWS", 2)
    sizes: list[int] = []
    real = spatial_join_duckdb._declare_geoparquet

    def declared(path: Path, source: Any) -> int:
        sizes.append(path.stat().st_size)
        return real(path, source)

    monkeypatch.setattr(spatial_join_duckdb, "_declare_geoparquet", declared)
    monkeypatch.setattr(spatial_join_duckdb, "PART_BYTES", 1)  # a part holds one row at least
    arguments = {
        "input_path": write_parts(workspace / "pts.parquet", clean=True),
        "join_path": _zone_parts(workspace),
        "predicate": "intersects",
        "how": how,
    }
    result = make_app().run("spatial_join", {**arguments, "output_path": "j.parquet/"})
    assert result.engine["name"] == "duckdb"
    rows = 6 if how == "inner" else 9
    names = sorted(p.name for p in (workspace / "j.parquet").iterdir())
    assert names == [f"part-{n:05d}.parquet" for n in range(rows - 1)]
    assert len(sizes) == rows - 1
    out = read(workspace / "j.parquet")
    record = manifest(workspace / "j.parquet")
    assert record["parameters"]["x-mapsmith:output_parts"] == rows - 1
    assert record["output"]["x-mapsmith:digest_rule"] == "parquet-parts-listing"
    # the clean twin: one file, on GeoPandas, the same rows in the same order and the same counts
    make_app(MAPSMITH_ENGINE="geopandas").run("spatial_join", {**arguments, "output_path": "one.parquet"})
    pd.testing.assert_frame_equal(out, read(workspace / "one.parquet"))
    counts = record["parameters"]["x-mapsmith:join_counts"]
    assert counts == manifest(workspace / "one.parquet")["parameters"]["x-mapsmith:join_counts"]
    assert counts["output_features"] == rows


def test_a_spatial_join_that_matches_nothing_is_one_declared_part(
    make_app: Callable[..., Any], workspace: Path
) -> None:
    """Trap: an inner join with no pair writes one part without rows, which still declares the geometry column and
    input_path's CRS (DuckDB leaves the GeoParquet metadata out of a file without rows)."""
    write_layer(workspace / "far.parquet", [box(X0 + 5000, Y0 + 5000, X0 + 5001, Y0 + 5001)], UTM, zone=["Far"])
    arguments = {"input_path": write_parts(workspace / "pts.parquet", clean=True), "join_path": "far.parquet"}
    result = make_app().run(
        "spatial_join", {**arguments, "predicate": "intersects", "how": "inner", "output_path": "none.parquet/"}
    )
    assert result.engine["name"] == "duckdb"
    assert sorted(p.name for p in (workspace / "none.parquet").iterdir()) == ["part-00000.parquet"]
    out = read(workspace / "none.parquet")
    assert len(out) == 0 and out.crs.to_epsg() == 32610
