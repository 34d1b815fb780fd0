"""describe_dataset on a folder of GeoParquet parts: one dataset, its fields profiled over every part in listing
order, hive keys typed as every engine reads them (before, profiling opened the folder as one file and
failed ENGINE_FAILED "is a directory"). The expected values are worked out from the rows written here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from shapely.geometry import Point

from layers import write_layer

UTM = "EPSG:32610"


def _part(path: Path, pids: list[str], values: list[float | None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    geoms = [Point(500_000 + 10 * i, 5_000_000) for i in range(len(pids))]
    write_layer(path, geoms, UTM, pid=pids, v=values)


def _details(result: Any) -> dict[str, dict[str, Any]]:
    (described,) = result.answer["described"]
    return {d["name"]: d for d in described["field_details"]}


def test_a_hive_folder_is_described_with_its_keys_as_fields(make_app: Callable[..., Any], workspace: Path) -> None:
    # listing order: region=north/year=2023 (a, b), region=north/year=2024 (c), region=south/year=2023 (d, e, f)
    folder = workspace / "pts.parquet"
    _part(folder / "region=north" / "year=2023" / "part-0.parquet", ["a", "b"], [1.0, None])
    _part(folder / "region=north" / "year=2024" / "part-0.parquet", ["c"], [2.0])
    _part(folder / "region=south" / "year=2023" / "part-0.parquet", ["d", "e", "f"], [None, 3.0, 1.0])
    result = make_app().run("describe_dataset", {"input_path": "pts.parquet"})
    (described,) = result.answer["described"]
    assert described["feature_count"] == 6 and described["driver"] == "GeoParquet parts"
    assert described["fields"] == ["pid", "v", "region", "year"]
    details = _details(result)
    assert details["pid"]["samples"] == ["a", "b", "c", "d", "e"]  # the first five, in listing order
    assert (details["v"]["null_count"], details["v"]["samples"]) == (2, [1.0, 2.0, 3.0])
    assert details["region"]["samples"] == ["north", "south"] and details["region"]["null_count"] == 0
    assert details["year"]["samples"] == [2023, 2024]
    # typed as every engine reads the folder (parts.hive_key_types): 2023 and 2024 fit int32, north is text
    assert details["year"]["type"] == "int32" and details["region"]["type"] == "string"


def test_clean_twin_plain_parts_and_one_file_are_described_alike(make_app: Callable[..., Any], workspace: Path) -> None:
    folder = workspace / "plain.parquet"
    _part(folder / "part-0.parquet", ["a", "b"], [1.0, None])
    _part(folder / "part-1.parquet", ["c"], [2.0])
    _part(workspace / "one.parquet", ["a", "b", "c"], [1.0, None, 2.0])
    app = make_app()
    parts_details = _details(app.run("describe_dataset", {"input_path": "plain.parquet"}))
    file_details = _details(app.run("describe_dataset", {"input_path": "one.parquet"}))
    assert parts_details == file_details
    assert parts_details["v"]["null_count"] == 1 and parts_details["pid"]["samples"] == ["a", "b", "c"]
