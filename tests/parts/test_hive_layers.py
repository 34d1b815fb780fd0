"""select_features, clip_layer, reproject_layer, buffer_layer and spatial_join on DuckDB with a hive-partitioned
folder (key=value/ subfolders): the keys are fields of every row, typed as pyarrow infers them and the GeoPandas
engine reads them (parts.hive_key_types: int32 when every value is a 32-bit integer, else text), after the parts'
own fields in path order, so the rows, fields, types and record are the GeoPandas engine's. Before, a hive folder
went to GeoPandas for these operations (and could not be written as parts: OUTPUT_PARTS_UNSUPPORTED).

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre. The keys are year then region (path
order is not alphabetical, as DuckDB's SELECT * would order them):

    year=2023/region=south: A (10,10) v 1, B (20,10) v 2
    year=2024/region=north: C (30,10) v 3
    year=2024/region=south: D (40,10) v 4, E (50,10) v 5

Worked by hand: ``v > 1.5 AND year = 2024`` keeps C, D, E; ``region = 'south'`` keeps A, B, D, E; the mask
25..45 x 0..20 keeps C and D; the zone Z (0..35 x 0..20) meets A, B, C.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from shapely.geometry import Point, box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"
PARTS = {
    "year=2023/region=south": [("A", 10.0, 1.0), ("B", 20.0, 2.0)],
    "year=2024/region=north": [("C", 30.0, 3.0)],
    "year=2024/region=south": [("D", 40.0, 4.0), ("E", 50.0, 5.0)],
}


@pytest.fixture
def hive(workspace: Path) -> str:
    for sub, rows in PARTS.items():
        (workspace / "pts.parquet" / sub).mkdir(parents=True)
        points = [Point(X0 + x, Y0 + 10) for _, x, _ in rows]
        write_layer(
            workspace / "pts.parquet" / sub / "part-0.parquet",
            points,
            UTM,
            name=[r[0] for r in rows],
            v=[r[2] for r in rows],
        )
    write_layer(workspace / "mask.parquet", [box(X0 + 25, Y0, X0 + 45, Y0 + 20)], UTM, m=["M"])
    write_layer(workspace / "zone.parquet", [box(X0, Y0, X0 + 35, Y0 + 20)], UTM, zid=["Z"])
    return "pts.parquet"


def _both(make_app: Callable[..., Any], workspace: Path, operation: str, arguments: dict[str, Any]) -> pd.DataFrame:
    """The run on DuckDB (named) and on GeoPandas: the same values, stored field types and verification; DuckDB's
    rows."""
    import pyarrow.parquet as pq
    import pyarrow.types as t

    for engine, out in (("duckdb", "d.parquet"), ("geopandas", "g.parquet")):
        result = make_app(MAPSMITH_ENGINE=engine).run(operation, {**arguments, "output_path": out, "overwrite": True})
        assert result.engine["name"] == engine
    duck, ref = read(workspace / "d.parquet"), read(workspace / "g.parquet")
    # the values; the types are compared as the files store them (below): a joined integer is int64 in both, which
    # pandas reads as Int64 from GeoPandas' own pandas metadata only
    pd.testing.assert_frame_equal(duck, ref, check_dtype=False)
    a, b = pq.read_schema(workspace / "d.parquet"), pq.read_schema(workspace / "g.parquet")
    for field in b:
        if t.is_string(field.type) or t.is_large_string(field.type):  # one logical type, however sized
            assert t.is_string(a.field(field.name).type) or t.is_large_string(a.field(field.name).type)
        elif field.name != "geometry":
            assert a.field(field.name).type == field.type, field.name
    assert manifest(workspace / "d.parquet")["verification"] == manifest(workspace / "g.parquet")["verification"]
    return duck


def test_select_reads_the_keys_as_typed_fields(make_app: Callable[..., Any], workspace: Path, hive: str) -> None:
    out = _both(make_app, workspace, "select_features", {"input_path": hive, "where": "v > 1.5 AND year = 2024"})
    assert out["name"].tolist() == ["C", "D", "E"]
    assert list(out.columns) == ["name", "v", "geometry", "year", "region"]  # the keys after, in path order
    assert out["year"].tolist() == [2024] * 3 and str(out["year"].dtype) == "int32"
    assert out["region"].tolist() == ["north", "south", "south"]
    text = _both(make_app, workspace, "select_features", {"input_path": hive, "where": "region = 'south'"})
    assert text["name"].tolist() == ["A", "B", "D", "E"]


def test_clip_reproject_and_buffer_carry_the_keys(make_app: Callable[..., Any], workspace: Path, hive: str) -> None:
    clipped = _both(make_app, workspace, "clip_layer", {"input_path": hive, "mask_path": "mask.parquet"})
    assert clipped["name"].tolist() == ["C", "D"] and clipped["year"].tolist() == [2024, 2024]
    moved = _both(make_app, workspace, "reproject_layer", {"input_path": hive, "target_crs": "EPSG:4326"})
    assert moved["region"].tolist() == ["south", "south", "north", "south", "south"]
    buffered = _both(make_app, workspace, "buffer_layer", {"input_path": hive, "distance_meters": 2})
    assert buffered["year"].tolist() == [2023, 2023, 2024, 2024, 2024]


def test_spatial_join_of_a_hive_folder_on_duckdb(make_app: Callable[..., Any], workspace: Path, hive: str) -> None:
    out = _both(make_app, workspace, "spatial_join", {"input_path": hive, "join_path": "zone.parquet", "how": "inner"})
    assert out["name"].tolist() == ["A", "B", "C"] and out["zid"].tolist() == ["Z"] * 3
    assert out["year"].tolist() == [2023, 2023, 2024]
    # the folder as join_path: the zone gains one row per point it meets, with the points' keys
    joined = _both(make_app, workspace, "spatial_join", {"input_path": "zone.parquet", "join_path": hive})
    assert joined["name"].tolist() == ["A", "B", "C"] and joined["region"].tolist() == ["south", "south", "north"]


def test_a_hive_folder_is_written_as_parts_by_duckdb(make_app: Callable[..., Any], workspace: Path, hive: str) -> None:
    """The output a hive input could not have before (OUTPUT_PARTS_UNSUPPORTED): one part, the keys as fields."""
    result = make_app().run("select_features", {"input_path": hive, "where": "v >= 3", "output_path": "sel.parquet/"})
    assert result.engine["name"] == "duckdb"
    out = read(workspace / "sel.parquet")
    assert out["name"].tolist() == ["C", "D", "E"] and out["region"].tolist() == ["north", "south", "south"]


def test_an_integer_key_with_a_null_subfolder_goes_to_geopandas(
    make_app: Callable[..., Any], workspace: Path, hive: str
) -> None:
    """Trap: year=__HIVE_DEFAULT_PARTITION__ is a null year; pandas reads an int32 key with a null as floats, so the
    GeoPandas engine writes doubles where DuckDB would keep integers: DuckDB is passed over with the reason. The
    clean twin is every test above (no null key)."""
    sub = workspace / "pts.parquet" / "year=__HIVE_DEFAULT_PARTITION__" / "region=north"
    sub.mkdir(parents=True)
    write_layer(sub / "part-0.parquet", [Point(X0 + 60, Y0 + 10)], UTM, name=["F"], v=[6.0])
    app = make_app(MAPSMITH_DUCKDB_LAYER_MIN_FEATURES="0")  # the size alone would keep it from DuckDB
    result = app.run("select_features", {"input_path": hive, "where": "v > 5", "output_path": "n.parquet"})
    assert result.engine["name"] == "geopandas"
    (duck,) = [
        p
        for p in manifest(workspace / "n.parquet")["x-mapsmith:engine_choice"]["passed_over"]
        if p["engine"] == "duckdb"
    ]
    assert "['year'] hold nulls" in duck["reason"]
    out = read(workspace / "n.parquet")
    assert out["name"].tolist() == ["F"] and out["year"].isna().tolist() == [True]


def test_a_key_that_is_also_a_field_of_the_parts_is_refused(make_app: Callable[..., Any], workspace: Path) -> None:
    """Trap: region=north/ holding parts with their own region field (south): which value a row has depends on the
    reader (GeoPandas failed INPUT_UNREADABLE, "Unable to merge", before). Refused before any engine, with the key."""
    from mapsmith.errors import MapSmithError

    sub = workspace / "dup.parquet" / "region=north"
    sub.mkdir(parents=True)
    write_layer(sub / "part-0.parquet", [Point(X0, Y0)], UTM, region=["south"], v=[1.0])
    with pytest.raises(MapSmithError) as refused:
        make_app().run("select_features", {"input_path": "dup.parquet", "where": "v > 0", "output_path": "o.parquet"})
    assert refused.value.code == "PARTS_KEY_IS_FIELD"
    assert refused.value.evidence["key"] == "region" and "merge_layers" in refused.value.hint


def test_a_key_with_only_null_subfolders_is_refused_with_the_key(make_app: Callable[..., Any], workspace: Path) -> None:
    """Trap: every subfolder of k is k=__HIVE_DEFAULT_PARTITION__, so k has no value to type it by (pyarrow raised
    "couldn't infer type" from inside the engines' checks)."""
    from mapsmith.errors import MapSmithError

    sub = workspace / "nk.parquet" / "k=__HIVE_DEFAULT_PARTITION__"
    sub.mkdir(parents=True)
    write_layer(sub / "part-0.parquet", [Point(X0, Y0)], UTM, v=[1.0])
    with pytest.raises(MapSmithError) as refused:
        make_app().run("select_features", {"input_path": "nk.parquet", "where": "v > 0", "output_path": "o.parquet"})
    assert refused.value.code == "PARTS_KEYS_UNTYPED" and refused.value.evidence["keys"] == ["k"]
    # the hint's way out, with MapSmith's own tools: the part read alone, as one file, without the key
    part = "nk.parquet/k=__HIVE_DEFAULT_PARTITION__/part-0.parquet"
    assert "merge_layers" in refused.value.hint and "convert_format for a single part" in refused.value.hint
    make_app().run("convert_format", {"input_path": part, "output_path": "m.parquet"})
    out = read(workspace / "m.parquet")
    assert list(out.columns) == ["v", "geometry"] and out["v"].tolist() == [1.0]
