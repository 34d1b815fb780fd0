"""Analyst tasks whose deliverables are tables or point layers built from tables: XLSX, JSON, Parquet and CSV
with a named sort order, DMS coordinates, elevation from the Mount St. Helens DEM. Every expected value is
worked out by hand in the comments; every deliverable is written by MapSmith's tools over one MCP session."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from shapely.geometry import LineString, Point, box

from conftest import SHARED
from layers import read, write_layer
from mcp_client import Reply
from tasks.harness import Task, check_manifests, check_task_manifests, run_tasks, succeeded

pytestmark = pytest.mark.mcp

UTM = "EPSG:32633"
LAEA = "EPSG:3035"  # equal-area; near its false origin distances are true to well under 0.1 %
X0, Y0 = 4_321_000, 3_210_000
DEM = SHARED / "data" / "mount_st_helens_dem.tif"


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# 1. degrees-minutes-seconds to points ----------------------------------------------------------------------
def build_dms(ws: Path) -> None:
    with (ws / "stations_dms.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["station", "lat", "lon"])
        writer.writerow(["Paris", "48°51'24\"N", "2°21'03\"E"])
        writer.writerow(["Sydney", "33°52'06\"S", "151°12'30\"E"])
        writer.writerow(["Sydney2", "-33 52.1", "151 12.5"])  # signed degrees and decimal minutes


def grade_dms(ws: Path, replies: list[Reply]) -> None:
    gdf = read(ws / "stations.gpkg")
    assert gdf.crs.to_epsg() == 4326
    got = {s: (g.x, g.y) for s, g in zip(gdf["station"], gdf.geometry, strict=True)}
    # 48 + 51/60 + 24/3600 = 48.856667; 2 + 21/60 + 3/3600 = 2.350833; 33 + 52/60 + 6/3600 = 33.868333 south;
    # 151 + 12/60 + 30/3600 = 151.208333; 52.1 minutes = 52 min 6 s, 12.5 minutes = 12 min 30 s
    assert got["Paris"] == pytest.approx((2 + 21 / 60 + 3 / 3600, 48 + 51 / 60 + 24 / 3600), abs=1e-12)
    sydney = (151 + 12 / 60 + 30 / 3600, -(33 + 52 / 60 + 6 / 3600))
    assert got["Sydney"] == pytest.approx(sydney, abs=1e-12)
    assert got["Sydney2"] == pytest.approx(sydney, abs=1e-12)


DMS = Task(
    "dms_table_to_points",
    "The station list gives positions in degrees, minutes and seconds (some as decimal minutes). Make me a "
    "GeoPackage of points in WGS 84.",
    "stations.gpkg, EPSG:4326, points with station",
    "each station's lon/lat equals the hand conversion of its DMS text; both spellings of Sydney land on the same "
    "point",
    build_dms,
    [
        (
            "table_to_points",
            {
                "input_path": "stations_dms.csv",
                "x_field": "lon",
                "y_field": "lat",
                "crs": "EPSG:4326",
                "output_path": "stations.gpkg",
            },
        )
    ],
    grade_dms,
)


# 2. parcel areas in hectares as XLSX, largest first ---------------------------------------------------------
def build_xlsx(ws: Path) -> None:
    squares = [
        box(X0, Y0, X0 + 100, Y0 + 100),
        box(X0, Y0, X0 + 200, Y0 + 200),
        box(X0, Y0, X0 + 50, Y0 + 50),
        box(X0, Y0, X0 + 300, Y0 + 100),
    ]
    write_layer(ws / "holdings.gpkg", squares, LAEA, parcel_id=[10, 11, 12, 13])


def grade_xlsx(ws: Path, replies: list[Reply]) -> None:
    import pyogrio

    table = pyogrio.read_dataframe(ws / "parcel_areas.xlsx", read_geometry=False)
    assert list(table.columns) == ["parcel_id", "area_ha"]
    assert [int(v) for v in table["parcel_id"]] == [11, 13, 10, 12]
    # 200 x 200 m = 4 ha, 300 x 100 = 3 ha, 100 x 100 = 1 ha, 50 x 50 = 0.25 ha
    assert list(table["area_ha"]) == pytest.approx([4.0, 3.0, 1.0, 0.25], rel=1e-9)


XLSX = Task(
    "parcel_hectares_xlsx",
    "An Excel sheet of the parcels' areas in hectares, largest first, please.",
    "parcel_areas.xlsx, one sheet: parcel_id, area_ha; descending area_ha",
    "columns exactly parcel_id, area_ha; order 11, 13, 10, 12 with 4, 3, 1, 0.25 ha",
    build_xlsx,
    [
        (
            "run_sql",
            {
                "sql": "SELECT parcel_id, ST_Area(geom) / 10000.0 AS area_ha FROM ST_Read('holdings.gpkg') ORDER BY "
                "area_ha DESC",
                "output_path": "parcel_areas.xlsx",
            },
        )
    ],
    grade_xlsx,
)


# 3. mean and highest elevation per zone from the DEM --------------------------------------------------------
ZONE_CELLS = {"crater": (250, 250, 10, 10), "flank": (100, 400, 20, 5)}  # first column, first row, columns, rows


def _zone_polygon(transform: object, col: int, row: int, ncols: int, nrows: int) -> object:
    x0, y0 = transform * (col, row)  # type: ignore[operator]
    x1, y1 = transform * (col + ncols, row + nrows)  # type: ignore[operator]
    # inset by 1 mm: edges computed from the transform land within ~1e-9 m of the cell lines, and a sliver of a
    # neighbouring cell, however thin, counts for max (as in exactextract); 1 mm moves the mean by < 1e-3 m
    inset = 0.001
    return box(min(x0, x1) + inset, min(y0, y1) + inset, max(x0, x1) - inset, max(y0, y1) - inset)


def build_dem(ws: Path) -> None:
    import rasterio

    shutil.copy(DEM, ws / "dem.tif")
    with rasterio.open(DEM) as src:
        polys = [_zone_polygon(src.transform, *cells) for cells in ZONE_CELLS.values()]
        write_layer(ws / "zones.gpkg", polys, src.crs.to_wkt(), zone=list(ZONE_CELLS))


def grade_dem(ws: Path, replies: list[Reply]) -> None:
    import rasterio
    from rasterio.windows import Window

    rows = csv_rows(ws / "zone_elevation.csv")
    assert [r["zone"] for r in rows] == ["crater", "flank"]
    with rasterio.open(DEM) as src:
        for r in rows:
            col, row, ncols, nrows = ZONE_CELLS[r["zone"]]
            cells = src.read(1, window=Window(col, row, ncols, nrows), masked=True)
            assert cells.count() == ncols * nrows  # no nodata in these zones, so the mean is the plain one
            assert float(r["mean_m"]) == pytest.approx(float(cells.mean()), abs=1e-3)
            assert float(r["max_m"]) == pytest.approx(float(cells.max()), abs=1e-9)


DEM_TASK = Task(
    "mean_elevation_per_zone",
    "Mean and highest elevation of each zone from the Mount St. Helens DEM, as zone_elevation.csv (zone, mean_m, "
    "max_m) sorted by zone.",
    "zone_elevation.csv: zone, mean_m, max_m; ascending zone",
    "zones are whole DEM cells (inset 1 mm); mean and max equal those of the cells read with rasterio (10 x 10 and "
    "20 x 5 cells)",
    build_dem,
    [
        (
            "zonal_statistics",
            {
                "input_path": "zones.gpkg",
                "raster_path": "dem.tif",
                "statistics": "mean,max",
                "output_path": "work_zones_elev.gpkg",
            },
        ),
        (
            "run_sql",
            {
                "sql": "SELECT zone, zonal_mean AS mean_m, zonal_max AS max_m FROM ST_Read('work_zones_elev.gpkg') "
                "ORDER BY zone",
                "output_path": "zone_elevation.csv",
            },
        ),
    ],
    grade_dem,
)


# 4. incidents per district, busiest first --------------------------------------------------------------------
def build_incidents(ws: Path) -> None:
    districts = [
        box(X0, Y0, X0 + 1000, Y0 + 1000),
        box(X0 + 1000, Y0, X0 + 2000, Y0 + 1000),
        box(X0, Y0 + 1000, X0 + 1000, Y0 + 2000),
    ]
    write_layer(ws / "districts.gpkg", districts, LAEA, district=["West", "East", "North"])
    # West 2, East 3, North 0
    pts = [(100, 100), (500, 500), (1100, 100), (1500, 900), (1900, 500)]
    write_layer(ws / "incidents.gpkg", [Point(X0 + x, Y0 + y) for x, y in pts], LAEA, incident=[1, 2, 3, 4, 5])


def grade_incidents(ws: Path, replies: list[Reply]) -> None:
    rows = csv_rows(ws / "incidents_per_district.csv")
    assert [(r["district"], r["incidents"]) for r in rows] == [("East", "3"), ("West", "2"), ("North", "0")]


INCIDENTS = Task(
    "incidents_per_district_csv",
    "Count the incidents in each district; incidents_per_district.csv with district and incidents, busiest first "
    "(ties by name).",
    "incidents_per_district.csv: district, incidents; descending incidents, then district",
    "East 3, West 2, North 0 in that order",
    build_incidents,
    [
        (
            "count_in_polygons",
            {
                "input_path": "districts.gpkg",
                "points_path": "incidents.gpkg",
                "output_path": "work_incident_counts.gpkg",
            },
        ),
        (
            "run_sql",
            {
                "sql": "SELECT district, point_count AS incidents FROM ST_Read('work_incident_counts.gpkg') ORDER BY "
                "incidents DESC, district",
                "output_path": "incidents_per_district.csv",
            },
        ),
    ],
    grade_incidents,
)


# 5. which region each store is in, as a plain Parquet table ----------------------------------------------------
def build_stores(ws: Path) -> None:
    regions = [box(X0, Y0, X0 + 1000, Y0 + 1000), box(X0 + 1000, Y0, X0 + 2000, Y0 + 1000)]
    write_layer(ws / "regions.gpkg", regions, LAEA, region=["Lowland", "Upland"])
    stores = [Point(X0 + 1500, Y0 + 10), Point(X0 + 10, Y0 + 10), Point(X0 + 999, Y0 + 500)]
    write_layer(ws / "stores.gpkg", stores, LAEA, store_id=[3, 1, 2])


def grade_stores(ws: Path, replies: list[Reply]) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(ws / "store_regions.parquet")
    assert table.column_names == ["store_id", "region"]
    assert table.to_pylist() == [
        {"store_id": 1, "region": "Lowland"},
        {"store_id": 2, "region": "Lowland"},
        {"store_id": 3, "region": "Upland"},
    ]


STORES = Task(
    "store_regions_parquet",
    "Tag each store with its sales region and give me a plain Parquet table (no geometry), store_id and region, by "
    "store_id.",
    "store_regions.parquet: store_id, region; ascending store_id; no geometry column",
    "columns exactly store_id, region; 1 Lowland, 2 Lowland, 3 Upland",
    build_stores,
    [
        (
            "spatial_join",
            {"input_path": "stores.gpkg", "join_path": "regions.gpkg", "output_path": "work_store_regions.gpkg"},
        ),
        (
            "run_sql",
            {
                "sql": "SELECT store_id, region FROM ST_Read('work_store_regions.gpkg') ORDER BY store_id",
                "output_path": "store_regions.parquet",
            },
        ),
    ],
    grade_stores,
)


# 6. population density per district, densest first -------------------------------------------------------------
def build_density(ws: Path) -> None:
    # 1 km2 with 5000 people, 2 km2 with 3000, 0.25 km2 with 1000: 5000, 1500 and 4000 per km2
    areas = [box(X0, Y0, X0 + 1000, Y0 + 1000), box(X0, Y0, X0 + 2000, Y0 + 1000), box(X0, Y0, X0 + 500, Y0 + 500)]
    write_layer(ws / "census.gpkg", areas, LAEA, name=["Central", "Outer", "Harbour"], population=[5000, 3000, 1000])


def grade_density(ws: Path, replies: list[Reply]) -> None:
    rows = csv_rows(ws / "density.csv")
    assert [r["name"] for r in rows] == ["Central", "Harbour", "Outer"]
    assert [float(r["density"]) for r in rows] == pytest.approx([5000, 4000, 1500], rel=1e-3)


DENSITY = Task(
    "population_density_csv",
    "Work out people per square kilometre for each census district and list them densest first in density.csv "
    "(name, density).",
    "density.csv: name, density (people/km2); descending density",
    "Central 5000, Harbour 4000, Outer 1500 per km2 in that order (ground area of LAEA squares)",
    build_density,
    [
        (
            "calculate_field",
            {
                "input_path": "census.gpkg",
                "output_field": "density",
                "expression": "population / ($area / 1000000)",
                "output_path": "work_density.gpkg",
            },
        ),
        (
            "run_sql",
            {
                "sql": "SELECT name, density FROM ST_Read('work_density.gpkg') ORDER BY density DESC",
                "output_path": "density.csv",
            },
        ),
    ],
    grade_density,
)


# 7. road lengths in km to one decimal ------------------------------------------------------------------------------
def build_roads(ws: Path) -> None:
    roads = [
        LineString([(X0, Y0), (X0 + 3000, Y0)]),  # 3.0 km
        LineString([(X0, Y0), (X0 + 1500, Y0 + 2000)]),  # 3-4-5: 2.5 km
        LineString([(X0, Y0), (X0, Y0 + 1234)]),  # 1.234 km: 1.2
    ]
    write_layer(ws / "roads.gpkg", roads, LAEA, road_id=[1, 2, 3])


def grade_roads(ws: Path, replies: list[Reply]) -> None:
    rows = csv_rows(ws / "roads_km.csv")
    assert [(r["road_id"], float(r["length_km"])) for r in rows] == [("1", 3.0), ("2", 2.5), ("3", 1.2)]


ROADS = Task(
    "road_length_km_csv",
    "Road lengths in kilometres rounded to 0.1 km, longest first: roads_km.csv with road_id and length_km.",
    "roads_km.csv: road_id, length_km; descending length_km",
    "1 3.0, 2 2.5, 3 1.2 exactly (rounded by round(x, 1))",
    build_roads,
    [
        (
            "calculate_field",
            {
                "input_path": "roads.gpkg",
                "output_field": "length_km",
                "expression": "round($length / 1000, 1)",
                "output_path": "work_roads_km.gpkg",
            },
        ),
        (
            "run_sql",
            {
                "sql": "SELECT road_id, length_km FROM ST_Read('work_roads_km.gpkg') ORDER BY length_km DESC",
                "output_path": "roads_km.csv",
            },
        ),
    ],
    grade_roads,
)


# 8. sites within 1 km of the depot as JSON records, nearest first -----------------------------------------------
def build_depot(ws: Path) -> None:
    write_layer(ws / "depot.gpkg", [Point(X0, Y0)], LAEA, depot=["main"])
    # 3-4-5 triangles: 500 m, 1000 m (on the limit: kept), 1500 m (out), 100 m
    sites = [Point(X0 + 300, Y0 + 400), Point(X0 + 600, Y0 + 800), Point(X0, Y0 + 1500), Point(X0 - 60, Y0 - 80)]
    write_layer(ws / "depot_sites.gpkg", sites, LAEA, site_id=[1, 2, 3, 4])


def grade_depot(ws: Path, replies: list[Reply]) -> None:
    records = json.loads((ws / "near_depot.json").read_text("utf-8"))
    assert [r["site_id"] for r in records] == [4, 1, 2]
    assert [r["distance_m"] for r in records] == pytest.approx([100.0, 500.0, 1000.0], abs=1e-9)
    assert all(set(r) == {"site_id", "distance_m"} for r in records)


DEPOT = Task(
    "sites_near_depot_json",
    "Which sites are within 1 km of the depot? A JSON list of records (site_id, distance_m), nearest first.",
    "near_depot.json: an array of {site_id, distance_m}; ascending distance_m; 1000 m inclusive",
    "sites 4 (100 m), 1 (500 m), 2 (1000 m) in that order; site 3 at 1500 m absent; no other keys",
    build_depot,
    [
        (
            "run_sql",
            {
                "sql": "SELECT s.site_id, ST_Distance(s.geom, d.geom) AS distance_m FROM ST_Read('depot_sites.gpkg') "
                "s, "
                "ST_Read('depot.gpkg') d WHERE ST_Distance(s.geom, d.geom) <= 1000 ORDER BY distance_m",
                "output_path": "near_depot.json",
            },
        )
    ],
    grade_depot,
)


# 9. a messy coordinate table: keep the good rows, list the bad ones ------------------------------------------------
def build_messy(ws: Path) -> None:
    (ws / "wells_raw.csv").write_text(
        "well,lon,lat\nA,10.5,46.25\nB,abc,46.0\nC,11.0,47.0\nD,,\nE,12.25,45.5\n", "utf-8"
    )


def grade_messy(ws: Path, replies: list[Reply]) -> None:
    gdf = read(ws / "wells_ok.gpkg")
    assert list(gdf["well"]) == ["A", "C", "E"]
    assert [(g.x, g.y) for g in gdf.geometry] == [(10.5, 46.25), (11.0, 47.0), (12.25, 45.5)]
    answer = replies[0].data["answer"]
    # rows count from 1 after the header: B is row 2 ('abc'), D is row 4 (both cells empty)
    assert answer["skipped_count"] == 2
    assert sorted({r["row"] for r in answer["skipped_rows"]}) == [2, 4]
    assert any(r["value"] == "abc" for r in answer["skipped_rows"])


MESSY = Task(
    "messy_lonlat_table_keep_good_rows",
    "Some rows of this well list have broken coordinates. Give me the good ones as a GeoPackage and tell me which "
    "were skipped.",
    "wells_ok.gpkg, EPSG:4326: wells A, C, E; the answer lists rows B and D",
    "the layer holds exactly A, C, E at their coordinates; the answer counts 2 skipped rows, rows 2 and 4, "
    "and shows the unreadable value 'abc'",
    build_messy,
    [
        (
            "table_to_points",
            {
                "input_path": "wells_raw.csv",
                "x_field": "lon",
                "y_field": "lat",
                "crs": "EPSG:4326",
                "skip_invalid_rows": True,
                "output_path": "wells_ok.gpkg",
            },
        )
    ],
    grade_messy,
)


# 10. points in UTM out as a lon/lat CSV ---------------------------------------------------------------------
def build_lonlat(ws: Path) -> None:
    write_layer(ws / "gauges.gpkg", [Point(500_000, 0), Point(500_000, 5_000_000)], UTM, gauge=["equator", "north"])


def grade_lonlat(ws: Path, replies: list[Reply]) -> None:
    from pyproj import Transformer

    rows = csv_rows(ws / "gauges_lonlat.csv")
    assert list(rows[0]) == ["lon", "lat", "gauge"]
    assert [r["gauge"] for r in rows] == ["equator", "north"]
    # the central meridian on the equator is (15, 0) exactly
    assert (float(rows[0]["lon"]), float(rows[0]["lat"])) == pytest.approx((15.0, 0.0), abs=1e-9)
    north = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True).transform(500_000, 5_000_000)
    assert (float(rows[1]["lon"]), float(rows[1]["lat"])) == pytest.approx(north, abs=1e-9)


LONLAT = Task(
    "utm_points_to_lonlat_csv",
    "The gauges are in UTM 33N; send them as a CSV with lon and lat columns for the spreadsheet people.",
    "gauges_lonlat.csv: lon, lat, gauge (WGS 84 degrees), input order",
    "header lon, lat, gauge; the equator gauge at (15, 0); the other at PROJ's lon/lat of (500000, 5000000)",
    build_lonlat,
    [
        (
            "reproject_layer",
            {"input_path": "gauges.gpkg", "target_crs": "EPSG:4326", "output_path": "work_gauges_4326.gpkg"},
        ),
        (
            "convert_format",
            {"input_path": "work_gauges_4326.gpkg", "geometry_as": "xy", "output_path": "gauges_lonlat.csv"},
        ),
    ],
    grade_lonlat,
)


TASKS = [DMS, XLSX, DEM_TASK, INCIDENTS, STORES, DENSITY, ROADS, DEPOT, MESSY, LONLAT]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Task]]:
    ws = tmp_path_factory.mktemp("table_tasks") / "ws"
    ws.mkdir()
    return ws, run_tasks(ws, TASKS)


@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
def test_task(done: tuple[Path, dict[str, Task]], task_id: str) -> None:
    ws, tasks = done
    task = tasks[task_id]
    task.grade(ws, succeeded(task))
    check_task_manifests(ws, task)


def test_every_manifest_validates(done: tuple[Path, dict[str, Task]]) -> None:
    check_manifests(done[0])


def test_the_readme_lists_every_task() -> None:
    from tasks import test_vector_tasks

    readme = (Path(__file__).parent / "README.md").read_text("utf-8")
    for task in TASKS + test_vector_tasks.TASKS:
        assert f"| `{task.id}` | {task.request} |" in readme, f"{task.id} is missing from tests/tasks/README.md"
