"""Analyst tasks whose deliverables are layers: GeoPackages with named layers, GeoJSON in a national grid,
KML/KMZ and zipped shapefiles brought in. Every expected value is worked out by hand in the comments;
the inputs are built here, every deliverable is written by MapSmith's tools over one MCP session."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import pyogrio
import pytest
from shapely.geometry import LineString, Point, box

from layers import read, write_layer
from mcp_client import Reply
from tasks.harness import Task, check_manifests, check_task_manifests, run_tasks, succeeded

pytestmark = pytest.mark.mcp

UTM = "EPSG:32633"  # UTM 33N: central meridian 15 E, false easting 500 000 m
LAEA = "EPSG:3035"  # equal-area, so ground areas are the planar ones; origin near 10 E 52 N
X0, Y0 = 4_321_000, 3_210_000  # LAEA's false origin: distances there are true to well under 0.1 %


# 1. wells per parish -------------------------------------------------------------------------------------
def build_parishes(ws: Path) -> None:
    # Ashby (3) holds three wells, Barton (1) one, Cole (2) none; one well lies outside every parish.
    squares = [box(0, 0, 1000, 1000), box(1000, 0, 2000, 1000), box(2000, 0, 3000, 1000)]
    write_layer(ws / "parishes.gpkg", squares, UTM, parish_id=[3, 1, 2], parish_name=["Ashby", "Barton", "Cole"])
    wells = [Point(100, 100), Point(200, 500), Point(900, 900), Point(1500, 500), Point(5000, 5000)]
    write_layer(ws / "wells.gpkg", wells, UTM, well_id=[1, 2, 3, 4, 5])


def grade_parishes(ws: Path, replies: list[Reply]) -> None:
    import csv

    with (ws / "wells_per_parish.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [
        ["parish_id", "parish_name", "well_count"],
        ["1", "Barton", "1"],
        ["2", "Cole", "0"],
        ["3", "Ashby", "3"],
    ]


PARISHES = Task(
    "wells_per_parish",
    "Write wells_per_parish.csv with parish_id, parish_name and well_count, sorted by id. Parishes without wells "
    "count 0.",
    "wells_per_parish.csv: parish_id, parish_name, well_count; ascending parish_id",
    "header and every row exactly (1 Barton 1, 2 Cole 0, 3 Ashby 3); the well outside every parish is not counted",
    build_parishes,
    [
        (
            "run_sql",
            {
                "sql": "SELECT p.parish_id, p.parish_name, count(w.well_id) AS well_count "
                "FROM ST_Read('parishes.gpkg') p LEFT JOIN ST_Read('wells.gpkg') w ON ST_Contains(p.geom, w.geom) "
                "GROUP BY p.parish_id, p.parish_name ORDER BY p.parish_id",
                "output_path": "wells_per_parish.csv",
            },
        )
    ],
    grade_parishes,
)


# 2. one GeoPackage, a layer per geometry type ------------------------------------------------------------
def build_mixed(ws: Path) -> None:
    geoms = [
        Point(1, 1),
        box(0, 0, 1, 1),
        LineString([(0, 0), (1, 1)]),
        Point(2, 2),
        box(2, 2, 3, 3),
        box(4, 4, 5, 5),
    ]
    write_layer(ws / "survey_mixed.geojson", geoms, "EPSG:4326", fid_=[1, 2, 3, 4, 5, 6])


def grade_mixed(ws: Path, replies: list[Reply]) -> None:
    layers = {name: kind for name, kind in pyogrio.list_layers(ws / "survey_by_type.gpkg")}
    assert layers == {"points": "Point", "lines": "LineString", "polygons": "Polygon"}
    ids = {name: sorted(read(ws / "survey_by_type.gpkg", name)["fid_"]) for name in layers}
    assert ids == {"points": [1, 4], "lines": [3], "polygons": [2, 5, 6]}


def _by_type(kind: str, layer: str) -> tuple[str, dict[str, str]]:
    sql = f"SELECT fid_, geom FROM ST_Read('survey_mixed.geojson') WHERE ST_GeometryType(geom)::VARCHAR = '{kind}'"
    return ("run_sql", {"sql": sql, "output_path": "survey_by_type.gpkg", "output_layer": layer})


MIXED = Task(
    "layer_per_geometry_type",
    "Our survey GeoJSON mixes points, lines and polygons. Deliver one GeoPackage with a layer per geometry type.",
    "survey_by_type.gpkg with layers points (Point), lines (LineString), polygons (Polygon), each keeping fid_",
    "the three layer names and geometry types, and which ids landed in each (points 1,4; lines 3; polygons 2,5,6)",
    build_mixed,
    [_by_type("POINT", "points"), _by_type("LINESTRING", "lines"), _by_type("POLYGON", "polygons")],
    grade_mixed,
)


# 3. KML sites to a GeoPackage in UTM ---------------------------------------------------------------------
KML = """<?xml version="1.0" encoding="UTF-8"?>
<kml xmlns="http://www.opengis.net/kml/2.2"><Document><Folder><name>sites</name>
<Placemark><name>Alpha</name><Point><coordinates>15.0,45.0</coordinates></Point></Placemark>
<Placemark><name>Bravo</name><Point><coordinates>15.0,46.0</coordinates></Point></Placemark>
<Placemark><name>Charlie</name><Point><coordinates>16.0,45.0</coordinates></Point></Placemark>
</Folder></Document></kml>
"""


def build_kml(ws: Path) -> None:
    (ws / "sites.kml").write_text(KML, "utf-8")


def grade_kml(ws: Path, replies: list[Reply]) -> None:
    from pyproj import Transformer

    gdf = read(ws / "sites_utm.gpkg")
    assert gdf.crs.to_epsg() == 32633
    name = next(c for c in gdf.columns if c.lower() == "name")
    at = {n: (g.x, g.y) for n, g in zip(gdf[name], gdf.geometry, strict=True)}
    assert set(at) == {"Alpha", "Bravo", "Charlie"}
    # on the central meridian the easting is the false easting exactly
    assert at["Alpha"][0] == pytest.approx(500_000, abs=1e-6) and at["Bravo"][0] == pytest.approx(500_000, abs=1e-6)
    # one degree east of it, at 45 N: about 78.8 km east; checked against PROJ directly
    expected = Transformer.from_crs("EPSG:4326", UTM, always_xy=True).transform(16.0, 45.0)
    assert at["Charlie"] == pytest.approx(expected, abs=1e-6)
    assert 78_000 < at["Charlie"][0] - 500_000 < 79_500


KML_TASK = Task(
    "kml_sites_to_utm_geopackage",
    "Here are the sites as a KML. Give me a GeoPackage in UTM zone 33N.",
    "sites_utm.gpkg, one layer, EPSG:32633, the three placemarks with their names",
    "CRS is EPSG:32633; Alpha and Bravo (on 15 E) have easting 500000; Charlie matches PROJ's transform of 16 E 45 N",
    build_kml,
    [("reproject_layer", {"input_path": "sites.kml", "target_crs": UTM, "output_path": "sites_utm.gpkg"})],
    grade_kml,
)


# 4. GeoJSON kept in the British National Grid, with the number removed noted in the file ----------------
def build_bng(ws: Path) -> None:
    # three trees inside the 1 km study square, two outside it: two removed
    trees = [
        Point(500_100, 100_100),
        Point(500_500, 100_500),
        Point(500_900, 100_200),
        Point(502_000, 100_500),
        Point(499_000, 99_000),
    ]
    write_layer(ws / "trees.gpkg", trees, "EPSG:27700", tree_id=[1, 2, 3, 4, 5])
    write_layer(ws / "study_area.gpkg", [box(500_000, 100_000, 501_000, 101_000)], "EPSG:27700", name=["study"])


def grade_bng(ws: Path, replies: list[Reply]) -> None:
    removed = replies[0].data["answer"]["rows"]
    assert removed == [{"removed": 2}]
    doc = json.loads((ws / "trees_in_study_area.geojson").read_text("utf-8"))
    assert "27700" in json.dumps(doc["crs"])
    assert doc["features_removed"] == 2
    coords = sorted((f["properties"]["tree_id"], tuple(f["geometry"]["coordinates"])) for f in doc["features"])
    assert coords == [(1, (500_100, 100_100)), (2, (500_500, 100_500)), (3, (500_900, 100_200))]


BNG = Task(
    "geojson_in_national_grid",
    "Clip the trees to the study area, keep the result as GeoJSON in our national grid (EPSG:27700), and note in "
    "the file how many features were removed.",
    "trees_in_study_area.geojson in EPSG:27700 (legacy crs member), member features_removed, features with tree_id",
    "the count answered by run_sql is 2, the file names EPSG:27700, carries features_removed = 2 and the three "
    "inside trees at their BNG coordinates",
    build_bng,
    [
        (
            "run_sql",
            {
                "sql": "SELECT count(*) AS removed FROM ST_Read('trees.gpkg') t, ST_Read('study_area.gpkg') a "
                "WHERE NOT ST_Intersects(t.geom, a.geom)"
            },
        ),
        (
            "clip_layer",
            {
                "input_path": "trees.gpkg",
                "mask_path": "study_area.gpkg",
                "output_path": "trees_in_study_area.geojson",
                "geojson_keep_crs": True,
                "feature_collection_members": {"features_removed": 2},
            },
        ),
    ],
    grade_bng,
)


# 5. buffers with their areas as a named layer -------------------------------------------------------------
def build_buffers(ws: Path) -> None:
    write_layer(ws / "bores.gpkg", [Point(X0, Y0), Point(X0 + 1000, Y0), Point(X0, Y0 + 1000)], LAEA, bore_id=[7, 8, 9])


def grade_buffers(ws: Path, replies: list[Reply]) -> None:
    assert [name for name, _ in pyogrio.list_layers(ws / "bore_buffers.gpkg")] == ["buffers"]
    gdf = read(ws / "bore_buffers.gpkg", "buffers")
    # 8 segments a quarter circle: a regular 32-gon of circumradius 50 m, area n/2 r^2 sin(2 pi / n)
    n, r = 32, 50.0
    polygon = n / 2 * r * r * math.sin(2 * math.pi / n)
    assert list(gdf["bore_id"]) == [7, 8, 9]
    assert list(gdf["area_m2"]) == pytest.approx([polygon] * 3, rel=1e-9)
    assert polygon == pytest.approx(7803.7, abs=0.1)  # a little under pi r^2 = 7854.0


BUFFERS = Task(
    "bore_buffers_with_area",
    "Buffer each borehole by 50 m (8 segments a quarter circle) and deliver bore_buffers.gpkg with a layer named "
    "buffers holding bore_id and the buffer's area in m2 as area_m2.",
    "bore_buffers.gpkg, layer buffers: bore_id, area_m2, polygons",
    "the only layer is buffers; bore_id 7, 8, 9 in order; area_m2 equals a 32-gon of radius 50 m (7803.7 m2)",
    build_buffers,
    [
        (
            "buffer_layer",
            {
                "input_path": "bores.gpkg",
                "distance_meters": 50,
                "segments_per_quarter_circle": 8,
                "output_path": "work_buffers.parquet",
            },
        ),
        (
            "measure_area",
            {
                "input_path": "work_buffers.parquet",
                "method": "planar",
                "output_field": "area_m2",
                "output_path": "bore_buffers.gpkg",
                "output_layer": "buffers",
            },
        ),
    ],
    grade_buffers,
)


# 6. dissolve land use by zone, area per zone --------------------------------------------------------------
def build_landuse(ws: Path) -> None:
    # three adjacent 100 m squares of housing (30 000 m2) and one of commerce (10 000 m2)
    cells = [box(X0 + i * 100, Y0, X0 + (i + 1) * 100, Y0 + 100) for i in range(4)]
    write_layer(ws / "landuse.gpkg", cells, LAEA, zone=["res", "res", "com", "res"])


def grade_landuse(ws: Path, replies: list[Reply]) -> None:
    import csv

    with (ws / "zone_areas.csv").open(newline="") as f:
        rows = [(r["zone"], float(r["area_m2"])) for r in csv.DictReader(f)]
    assert [z for z, _ in rows] == ["com", "res"]
    assert [a for _, a in rows] == pytest.approx([10_000, 30_000], rel=1e-9)


LANDUSE = Task(
    "area_per_landuse_zone",
    "Dissolve the land-use parcels by zone and give me zone_areas.csv with zone and area_m2, sorted by zone.",
    "zone_areas.csv: zone, area_m2; ascending zone",
    "rows com 10000 m2 then res 30000 m2",
    build_landuse,
    [
        ("dissolve_layer", {"input_path": "landuse.gpkg", "by_fields": "zone", "output_path": "work_zones.gpkg"}),
        ("measure_area", {"input_path": "work_zones.gpkg", "method": "planar", "output_path": "work_zones_area.gpkg"}),
        (
            "run_sql",
            {
                "sql": "SELECT zone, area_m2 FROM ST_Read('work_zones_area.gpkg') ORDER BY zone",
                "output_path": "zone_areas.csv",
            },
        ),
    ],
    grade_landuse,
)


# 7. a zipped shapefile to GeoJSON -----------------------------------------------------------------------
def build_zip(ws: Path) -> None:
    folder = ws.parent / "shp_build"
    folder.mkdir(exist_ok=True)
    write_layer(folder / "hydrants.shp", [Point(500_000, 5_000_000), Point(500_000, 5_100_000)], UTM, hyd_id=[1, 2])
    with zipfile.ZipFile(ws / "hydrants.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for part in sorted(folder.glob("hydrants.*")):
            archive.write(part, part.name)


def grade_zip(ws: Path, replies: list[Reply]) -> None:
    from pyproj import Transformer

    doc = json.loads((ws / "hydrants.geojson").read_text("utf-8"))
    got = {f["properties"]["hyd_id"]: f["geometry"]["coordinates"] for f in doc["features"]}
    to_lonlat = Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    for hyd_id, y in ((1, 5_000_000), (2, 5_100_000)):
        assert got[hyd_id][0] == pytest.approx(15.0, abs=1e-9)  # the central meridian
        assert got[hyd_id] == pytest.approx(list(to_lonlat.transform(500_000, y)), abs=1e-9)


ZIP = Task(
    "zipped_shapefile_to_geojson",
    "The hydrants came as a zipped shapefile in UTM 33N. I need them as plain GeoJSON (WGS 84 longitude/latitude).",
    "hydrants.geojson (RFC 7946, lon/lat) with hyd_id",
    "both hydrants on longitude 15 exactly and at PROJ's latitude for their northing",
    build_zip,
    [("reproject_layer", {"input_path": "hydrants.zip", "target_crs": "EPSG:4326", "output_path": "hydrants.geojson"})],
    grade_zip,
)


# 8. a KMZ with two folders into two GeoPackage layers ----------------------------------------------------
KMZ_DOC = """<?xml version="1.0" encoding="UTF-8"?>
<kml xmlns="http://www.opengis.net/kml/2.2"><Document>
<Folder><name>Wells</name>
<Placemark><name>W1</name><Point><coordinates>10.5,46.25</coordinates></Point></Placemark>
<Placemark><name>W2</name><Point><coordinates>11.0,47.0</coordinates></Point></Placemark>
</Folder>
<Folder><name>Pipes</name>
<Placemark><name>P1</name><LineString><coordinates>10.5,46.25 11.0,47.0</coordinates></LineString></Placemark>
</Folder>
</Document></kml>
"""


def build_kmz(ws: Path) -> None:
    with zipfile.ZipFile(ws / "network.kmz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("doc.kml", KMZ_DOC)


def grade_kmz(ws: Path, replies: list[Reply]) -> None:
    layers = dict(pyogrio.list_layers(ws / "network.gpkg"))
    assert layers == {"wells": "Point", "pipes": "LineString"}
    wells = read(ws / "network.gpkg", "wells")
    assert wells.crs.to_epsg() == 4326
    assert sorted((g.x, g.y) for g in wells.geometry) == [(10.5, 46.25), (11.0, 47.0)]
    pipe = read(ws / "network.gpkg", "pipes").geometry.iloc[0]
    assert list(pipe.coords) == [(10.5, 46.25), (11.0, 47.0)]


KMZ = Task(
    "kmz_folders_to_geopackage_layers",
    "Our field team sent a KMZ with a Wells folder and a Pipes folder. Put them in one GeoPackage, layers wells and "
    "pipes.",
    "network.gpkg with layers wells (Point) and pipes (LineString), EPSG:4326",
    "exactly the two layers and their types; the wells' and the pipe's coordinates as placed in the KML",
    build_kmz,
    [
        (
            "convert_format",
            {"input_path": "network.kmz", "layer": "Wells", "output_path": "network.gpkg", "output_layer": "wells"},
        ),
        (
            "convert_format",
            {"input_path": "network.kmz", "layer": "Pipes", "output_path": "network.gpkg", "output_layer": "pipes"},
        ),
    ],
    grade_kmz,
)


# 9. keep two fields and give them the names the client asked for ----------------------------------------
def build_clean(ws: Path) -> None:
    squares = [box(X0, Y0, X0 + 10, Y0 + 10), box(X0 + 20, Y0, X0 + 30, Y0 + 10)]
    write_layer(
        ws / "raw_parcels.gpkg", squares, LAEA, ID=[101, 102], NAME=["Mill", "Ford"], OWNER=["x", "y"], TMP=[0, 0]
    )


def grade_clean(ws: Path, replies: list[Reply]) -> None:
    gdf = read(ws / "parcels_clean.gpkg")
    assert list(gdf.columns) == ["parcel_id", "parcel_name", "geometry"]
    assert list(gdf["parcel_id"]) == [101, 102] and list(gdf["parcel_name"]) == ["Mill", "Ford"]


CLEAN = Task(
    "keep_and_rename_fields",
    "Send the parcels with only their id and name, called parcel_id and parcel_name; drop everything else.",
    "parcels_clean.gpkg: parcel_id, parcel_name, geometry (input order)",
    "the column list is exactly parcel_id, parcel_name, geometry, with values 101 Mill, 102 Ford",
    build_clean,
    [
        (
            "select_fields",
            {"input_path": "raw_parcels.gpkg", "keep_fields": "ID,NAME", "output_path": "work_parcels.gpkg"},
        ),
        (
            "rename_fields",
            {
                "input_path": "work_parcels.gpkg",
                "renames": "ID:parcel_id, NAME:parcel_name",
                "output_path": "parcels_clean.gpkg",
            },
        ),
    ],
    grade_clean,
)


# 10. a WKT column in the national grid to points ---------------------------------------------------------
def build_wkt(ws: Path) -> None:
    (ws / "listed_sites.csv").write_text(
        'site,geom_wkt\nAbbey,"POINT (530000 180000)"\nBridge,"POINT (531250.5 179000.25)"\n', "utf-8"
    )


def grade_wkt(ws: Path, replies: list[Reply]) -> None:
    gdf = read(ws / "listed_sites.gpkg")
    assert gdf.crs.to_epsg() == 27700
    got = {s: (g.x, g.y) for s, g in zip(gdf["site"], gdf.geometry, strict=True)}
    assert got == {"Abbey": (530000.0, 180000.0), "Bridge": (531250.5, 179000.25)}


WKT = Task(
    "wkt_table_to_points_bng",
    "This CSV has a WKT column in British National Grid. Turn it into a GeoPackage of points.",
    "listed_sites.gpkg, EPSG:27700, points with site",
    "CRS 27700 and both sites at exactly the coordinates written in the WKT",
    build_wkt,
    [
        (
            "table_to_points",
            {
                "input_path": "listed_sites.csv",
                "wkt_field": "geom_wkt",
                "crs": "EPSG:27700",
                "output_path": "listed_sites.gpkg",
            },
        )
    ],
    grade_wkt,
)


# 11. a plan: buffer schools, count houses in each ----------------------------------------------------------
def build_schools(ws: Path) -> None:
    write_layer(
        ws / "schools.gpkg", [Point(X0, Y0), Point(X0 + 5000, Y0), Point(X0 + 10_000, Y0)], LAEA, school_id=[1, 2, 3]
    )
    # school 1: houses at 100 m and 150 m (in), 250 m (out); school 2: one at 50 m; school 3: none
    houses = [Point(X0 + 100, Y0), Point(X0, Y0 + 150), Point(X0 - 250, Y0), Point(X0 + 5000, Y0 - 50)]
    write_layer(ws / "houses.gpkg", houses, LAEA, house_id=[1, 2, 3, 4])


def grade_schools(ws: Path, replies: list[Reply]) -> None:
    import csv

    with (ws / "houses_per_school.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["school_id"], r["point_count"]) for r in rows] == [("1", "2"), ("2", "1"), ("3", "0")]


SCHOOLS = Task(
    "houses_within_200m_of_schools_plan",
    "As one plan: buffer the schools by 200 m, count the houses in each buffer, and give me houses_per_school.csv "
    "(school_id, point_count, in school order), no geometry.",
    "houses_per_school.csv: school_id, point_count; input (school_id) order",
    "school 1 has 2 houses (100 m, 150 m; the one at 250 m is out), school 2 has 1, school 3 none",
    build_schools,
    [
        (
            "execute_plan",
            {
                "plan": {
                    "goal": "houses within 200 m of each school",
                    "steps": [
                        {
                            "id": "zones",
                            "operation": "buffer_layer",
                            "arguments": {
                                "input_path": "schools.gpkg",
                                "distance_meters": 200,
                                "output_path": "work_school_zones.gpkg",
                            },
                        },
                        {
                            "id": "counted",
                            "operation": "count_in_polygons",
                            "arguments": {
                                "input_path": "$zones",
                                "points_path": "houses.gpkg",
                                "output_path": "work_school_counts.gpkg",
                            },
                        },
                        {
                            "id": "table",
                            "operation": "convert_format",
                            "arguments": {
                                "input_path": "$counted",
                                "geometry_as": "none",
                                "output_path": "houses_per_school.csv",
                            },
                        },
                    ],
                }
            },
        )
    ],
    grade_schools,
)


# 12. flooded area of each parcel ------------------------------------------------------------------------
def build_flood(ws: Path) -> None:
    parcels = [
        box(X0, Y0, X0 + 100, Y0 + 100),
        box(X0 + 100, Y0, X0 + 200, Y0 + 100),
        box(X0 + 300, Y0, X0 + 400, Y0 + 100),
    ]
    write_layer(ws / "flood_parcels.gpkg", parcels, LAEA, parcel_id=[21, 22, 23])
    # the flood covers a 50 x 50 m corner of parcels 21 and 22 each (2 500 m2), and misses parcel 23
    write_layer(ws / "flood.gpkg", [box(X0 + 50, Y0, X0 + 150, Y0 + 50)], LAEA, event=["2024-05"])


def grade_flood(ws: Path, replies: list[Reply]) -> None:
    import csv

    with (ws / "flooded_parcels.csv").open(newline="") as f:
        rows = [(r["parcel_id"], float(r["flooded_m2"])) for r in csv.DictReader(f)]
    assert [p for p, _ in rows] == ["21", "22"]
    assert [a for _, a in rows] == pytest.approx([2500.0, 2500.0], rel=1e-9)


FLOOD = Task(
    "flooded_area_per_parcel",
    "Which parcels does the flood touch and how much of each is under water? flooded_parcels.csv with parcel_id and "
    "flooded_m2, sorted by parcel_id; untouched parcels left out.",
    "flooded_parcels.csv: parcel_id, flooded_m2; ascending parcel_id",
    "parcels 21 and 22 with 2500 m2 each; parcel 23 absent",
    build_flood,
    [
        (
            "overlay_layers",
            {
                "input_path": "flood_parcels.gpkg",
                "overlay_path": "flood.gpkg",
                "how": "intersection",
                "output_path": "work_flooded.gpkg",
            },
        ),
        (
            "measure_area",
            {
                "input_path": "work_flooded.gpkg",
                "method": "planar",
                "output_field": "flooded_m2",
                "output_path": "work_flooded_area.gpkg",
            },
        ),
        (
            "run_sql",
            {
                "sql": "SELECT parcel_id, flooded_m2 FROM ST_Read('work_flooded_area.gpkg') ORDER BY parcel_id",
                "output_path": "flooded_parcels.csv",
            },
        ),
    ],
    grade_flood,
)


TASKS = [PARISHES, MIXED, KML_TASK, BNG, BUFFERS, LANDUSE, ZIP, KMZ, CLEAN, WKT, SCHOOLS, FLOOD]


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Task]]:
    ws = tmp_path_factory.mktemp("vector_tasks") / "ws"
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
