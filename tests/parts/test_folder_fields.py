"""Operations that read a layer's declared field types from its header take a folder of GeoParquet parts as one
dataset: explode_layer, dissolve_layer, merge_layers and overlay_layers opened the folder as one file and failed
ENGINE_FAILED "is a directory" before (io.parquet_schema). The expected values are worked out from the rows
written here; each is checked against the same rows in one file, the clean twin."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import Point, box

from layers import read
from layers import write_layer as _write_layer

UTM = "EPSG:32610"
X0, Y0 = 500_000, 5_000_000
# listing order: region=north (a, b at x 0 and 10; c at x 0), region=south (d, e, f at x 0, 10, 20)


def write_layer(path: Path, geoms: list[Any], crs: str, **columns: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_layer(path, geoms, crs, **columns)


ROWS = {"north": (["a", "b", "c"], [0, 10, 0]), "south": (["d", "e", "f"], [0, 10, 20])}


def _points(workspace: Path) -> None:
    for region, (pids, xs) in ROWS.items():
        write_layer(
            workspace / "pts.parquet" / f"region={region}" / "part-0.parquet",
            [Point(X0 + x, Y0) for x in xs],
            UTM,
            pid=pids,
            v=[1.0] * len(pids),
        )
    # the clean twin: the same rows in one file, the key a plain text field
    geoms = [Point(X0 + x, Y0) for _, xs in ROWS.values() for x in xs]
    pids = [p for ps, _ in ROWS.values() for p in ps]
    write_layer(workspace / "one.parquet", geoms, UTM, pid=pids, v=[1.0] * 6, region=["north"] * 3 + ["south"] * 3)


@pytest.mark.parametrize("source", ["pts.parquet", "one.parquet"])
def test_explode_and_merge_take_a_hive_folder(make_app: Callable[..., Any], workspace: Path, source: str) -> None:
    _points(workspace)
    app = make_app()
    exploded = app.run("explode_layer", {"input_path": source, "output_path": "x.parquet"})
    assert exploded.answer["feature_count"] == 6 and exploded.answer["multi_part_features"] == 0
    out = read(workspace / "x.parquet")
    assert out["pid"].tolist() == ["a", "b", "c", "d", "e", "f"]
    assert [str(v) for v in out["region"]] == ["north"] * 3 + ["south"] * 3
    merged = app.run("merge_layers", {"input_paths": [source, source], "output_path": "m.parquet"})
    assert merged.answer["feature_count"] == 12
    assert read(workspace / "m.parquet")["pid"].tolist() == ["a", "b", "c", "d", "e", "f"] * 2


@pytest.mark.parametrize("source", ["pts.parquet", "one.parquet"])
def test_dissolve_groups_by_a_hive_key(make_app: Callable[..., Any], workspace: Path, source: str) -> None:
    """north: a and c share x 0, so 2 distinct points; south: 3."""
    _points(workspace)
    result = make_app().run("dissolve_layer", {"input_path": source, "by_fields": "region", "output_path": "d.parquet"})
    out = read(workspace / "d.parquet")
    assert [str(v) for v in out["region"]] == ["north", "south"]
    assert [len(g.geoms) for g in out.geometry] == [2, 3]
    assert result.answer["group_count"] == 2 and result.answer["null_key_features"] == 0


def test_overlay_takes_a_folder_of_plain_parts(make_app: Callable[..., Any], workspace: Path) -> None:
    """Two 10 m squares in two parts, x 0..10 and 20..30, cut by a zone x 5..25: 5 x 10 of each, 50 m2 apiece."""
    write_layer(workspace / "sq.parquet" / "part-0.parquet", [box(X0, Y0, X0 + 10, Y0 + 10)], UTM, sid=["s1"])
    write_layer(workspace / "sq.parquet" / "part-1.parquet", [box(X0 + 20, Y0, X0 + 30, Y0 + 10)], UTM, sid=["s2"])
    write_layer(workspace / "zone.parquet", [box(X0 + 5, Y0 - 5, X0 + 25, Y0 + 15)], UTM, zid=["z"])
    make_app().run(
        "overlay_layers",
        {"input_path": "sq.parquet", "overlay_path": "zone.parquet", "how": "intersection", "output_path": "o.parquet"},
    )
    out = read(workspace / "o.parquet")
    assert out["sid"].tolist() == ["s1", "s2"] and out["zid"].tolist() == ["z", "z"]
    assert [round(a, 6) for a in out.geometry.area] == [50.0, 50.0]
