"""clip_layer on DuckDB reads a GeoParquet mask in input_path's CRS with pyarrow (no pandas); any other mask through
the GeoPandas engine's read_input and align_to. Both reads give the same output, the same checks and the same
warnings: the same mask is written once as GeoParquet and once as a GeoPackage, and the two runs compared.

Local grid in EPSG:32610 (x0 = 500,000 E, y0 = 5,000,000 N), a unit a metre. The mask: S1 = 0..100 x 0..100,
S2 = 200..300 x 0..100 and a feature without geometry. Points: A (50, 50) in S1, B (250, 50) in S2, C (150, 50)
between them. A and B are kept, in that order; C is outside; mask_path has 0 of 3 geometries invalid and 1 missing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, Polygon, box

from layers import manifest, read, write_layer

X0, Y0 = 500_000, 5_000_000
UTM = "EPSG:32610"


def g(x: float, y: float) -> tuple[float, float]:
    return X0 + x, Y0 + y


@pytest.fixture
def duck(make_app: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    from mapsmith_opensource import sql_layer_ops

    monkeypatch.setattr(sql_layer_ops, "CLIP_MIN_ROWS", 0)
    return make_app()


def _case(workspace: Path, mask: list[Any]) -> None:
    write_layer(
        workspace / "pts.parquet", [Point(g(50, 50)), Point(g(150, 50)), Point(g(250, 50))], UTM, pid=["A", "C", "B"]
    )
    for name in ("mask.parquet", "mask.gpkg"):
        write_layer(workspace / name, mask, UTM, mid=list(range(len(mask))))


def _record(workspace: Path, name: str) -> dict[str, Any]:
    m = manifest(workspace / name)
    return {
        "parameters": {k: v for k, v in m["parameters"].items() if k != "x-mapsmith:engine_seconds"},
        "verification": m["verification"],
        "warnings": m.get("warnings"),
        "crs_decisions": m["crs_decisions"],
    }


MASK = [box(*g(0, 0), *g(100, 100)), box(*g(200, 0), *g(300, 100)), None]


def test_a_geoparquet_mask_is_read_without_geopandas_with_the_same_answer_and_record(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    _case(workspace, MASK)
    fast = duck.run(
        "clip_layer", {"input_path": "pts.parquet", "mask_path": "mask.parquet", "output_path": "a.parquet"}
    )
    slow = duck.run("clip_layer", {"input_path": "pts.parquet", "mask_path": "mask.gpkg", "output_path": "b.parquet"})
    assert fast.engine["name"] == slow.engine["name"] == "duckdb"
    for name in ("a.parquet", "b.parquet"):
        out = read(workspace / name)
        assert out["pid"].tolist() == ["A", "B"]
        assert [(p.x, p.y) for p in out.geometry] == [g(50, 50), g(250, 50)]
    assert _record(workspace, "a.parquet") == _record(workspace, "b.parquet")
    (mask_check,) = [
        c
        for c in manifest(workspace / "a.parquet")["verification"]
        if c["name"] == "x-mapsmith:input_geometry_valid" and "mask_path" in c["detail"]
    ]
    assert mask_check["passed"] is True
    assert mask_check["detail"] == "mask_path: 0 of 3 geometries invalid; 1 empty or missing"
    # what read the mask is said: pyarrow and shapely for the GeoParquet file, the GeoPandas stack for the GeoPackage
    fast_parts, slow_parts = (
        manifest(workspace / n)["engine"]["x-mapsmith:components"] for n in ("a.parquet", "b.parquet")
    )
    assert "pyarrow" in fast_parts and "geopandas" not in fast_parts
    assert "geopandas" in slow_parts


def test_a_large_mask_goes_to_duckdb_as_a_table_with_the_same_answer(duck, workspace: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mapsmith_opensource import sql_layer_ops

    _case(workspace, MASK)
    duck.run("clip_layer", {"input_path": "pts.parquet", "mask_path": "mask.parquet", "output_path": "a.parquet"})
    monkeypatch.setattr(sql_layer_ops, "MASK_LITERAL_MAX_BYTES", 0)  # every union is "large": registered
    duck.run("clip_layer", {"input_path": "pts.parquet", "mask_path": "mask.parquet", "output_path": "t.parquet"})
    assert read(workspace / "t.parquet")["pid"].tolist() == ["A", "B"]
    assert _record(workspace, "t.parquet") == _record(workspace, "a.parquet")


def test_a_mask_geos_cannot_union_fails_alike_whichever_read(duck, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    from mapsmith.errors import MapSmithError

    # a bowtie: its two triangles cross at (250, 50), where GEOS's union meets a side location conflict
    bowtie = Polygon([g(200, 0), g(300, 100), g(300, 0), g(200, 100), g(200, 0)])
    _case(workspace, [box(*g(0, 0), *g(100, 100)), bowtie])
    codes = []
    for mask, out in (("mask.parquet", "a.parquet"), ("mask.gpkg", "b.parquet")):
        with pytest.raises(MapSmithError) as caught:
            duck.run("clip_layer", {"input_path": "pts.parquet", "mask_path": mask, "output_path": out})
        codes.append(caught.value.code)
        assert not (workspace / out).exists()
    assert codes[0] == codes[1]
