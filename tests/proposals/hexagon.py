"""The proposal the tests make: ``hexagon_grid``, as an agent would write it, and its worked answer.

The grid: flat-topped regular hexagons of side s, centres at x = minx + 1.5 s i (i = 0, 1, 2, ...) and
y = miny + sqrt(3) s j, odd columns raised by sqrt(3)/2 s; a cell is kept when it shares area with the
layer's extent (touching an edge is not enough). A regular hexagon of side s has area 3 sqrt(3)/2 s^2,
so the stated cell area A gives s = sqrt(2 A / (3 sqrt(3))).

Worked by hand for the test layer, one square (0, 0)-(300, 300) in EPSG:32631, with
A = 15000 sqrt(3) = 25980.762... m2, so s = sqrt(30000 sqrt(3) / (3 sqrt(3))) = 100 m and the half
height h = sqrt(3)/2 * 100 = 86.60 m:

* columns: centres x = 0, 150, 300 (the code makes ceil(300 / 150) + 1 = 3 columns); each spans x +- 100,
  so all three overlap 0..300;
* even columns (x = 0 and x = 300): centres y = 0, 173.2, 346.4, spanning y +- 86.6: [-86.6, 86.6],
  [86.6, 259.8], [259.8, 433.0], each overlapping 0..300 -> 3 cells each, 6 in all;
* the odd column (x = 150): centres y = 86.6, 259.8, 433.0: [0, 173.2] and [173.2, 346.4] overlap,
  [346.4, 519.6] does not -> 2 cells.

So 8 cells, and their total area is 8 * 15000 sqrt(3) = 120000 sqrt(3) = 207846.0969... m2 (whole
cells: the grid is not clipped to the extent).
"""

from __future__ import annotations

import math

SIDE_M = 100.0
CELL_AREA_M2 = 3 * math.sqrt(3) / 2 * SIDE_M**2  # 15000 sqrt(3) = 25980.762113533...
CELLS = 8
TOTAL_AREA_M2 = 120000 * math.sqrt(3)  # 207846.0969...

CONTRACT = """
name = "hexagon_grid"
title = "Hexagon grid over an extent"
summary = "Cover a layer's extent with regular flat-topped hexagons of a stated area, one polygon per cell."
category = "other"
status = "available"
distinguishes = "Builds hexagonal cells over the input's bounding box; unlike buffer_layer it keeps no input geometry."
keywords = ["hexagon", "hex grid", "tessellation", "binning"]
crs_effect = "preserves"
needs_projected_crs = true
checks = ["crs_present", "crs_matches", "geometry_valid", "geometry_types"]

[[datasets]]
name = "input_path"
kind = "vector"
geometry_types = ["point", "line", "polygon"]
description = "The layer whose extent the grid covers."

[[parameters]]
name = "cell_area_m2"
type = "number"
unit = "square_metre"
required = true
exclusive_minimum = 0
description = "The area of one hexagon, in square metres of the layer's projected CRS."

[output]
kind = "dataset:vector"
argument = "output_path"
geometry_types = ["polygon"]
formats = [".gpkg"]

[[examples]]
description = "Hexagons of 1 km2 over a study area"
arguments = { input_path = "study_area.gpkg", cell_area_m2 = 1000000, output_path = "hexagons.gpkg" }
"""

CODE = """
import math


def hexagon_grid(ctx):
    import geopandas as gpd
    import shapely
    from shapely.geometry import Polygon, box

    source = gpd.read_file(ctx.paths["input_path"], layer=ctx.layers.get("input_path"))
    area = float(ctx.parameters["cell_area_m2"])
    side = math.sqrt(2 * area / (3 * math.sqrt(3)))
    half = math.sqrt(3) / 2 * side
    minx, miny, maxx, maxy = source.total_bounds
    extent = box(minx, miny, maxx, maxy)
    columns = math.ceil((maxx - minx) / (1.5 * side)) + 1
    rows = math.ceil((maxy - miny) / (2 * half)) + 1
    cells = []
    for i in range(columns):
        cx = minx + 1.5 * side * i
        for j in range(rows):
            cy = miny + 2 * half * j + (half if i % 2 else 0.0)
            corners = [(cx + side * math.cos(math.radians(60 * k)), cy + side * math.sin(math.radians(60 * k)))
                       for k in range(6)]
            cell = Polygon(corners)
            if cell.intersection(extent).area > 0:
                cells.append(cell)
    grid = gpd.GeoDataFrame({"cell_id": list(range(1, len(cells) + 1))}, geometry=cells, crs=source.crs)
    ctx.set_engine("shapely", shapely.__version__)
    ctx.answer = {"cell_count": len(cells), "cell_side_m": side}
    grid.to_file(ctx.temp_output, layer=ctx.output_path.stem, driver="GPKG")
"""


def examples(output: str = "hex.gpkg", *, cells: int = CELLS, area: float = TOTAL_AREA_M2) -> list[dict]:
    return [
        {
            "arguments": {"input_path": "square.gpkg", "cell_area_m2": CELL_AREA_M2, "output_path": output},
            "expect": {"feature_count": cells, "total_area_m2": area, "answer": {"cell_count": cells}},
            "tolerance": 1e-6,
        }
    ]


def write_square(workspace) -> None:
    """The test layer: one 300 m square at (0, 0)-(300, 300) in EPSG:32631."""
    import geopandas as gpd
    from shapely.geometry import box

    gpd.GeoDataFrame({"name": ["square"]}, geometry=[box(0, 0, 300, 300)], crs="EPSG:32631").to_file(
        workspace / "square.gpkg", driver="GPKG"
    )


def proposal_with(body: str, name: str = "hexagon_grid") -> tuple[str, str]:
    """A contract for ``name`` and code whose entry runs ``body`` (indented) before writing one cell."""
    contract = CONTRACT.replace('name = "hexagon_grid"', f'name = "{name}"', 1)
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    code = f"""
import math


def {name}(ctx):
{lines}
    import geopandas as gpd
    from shapely.geometry import box
    ctx.answer.setdefault("cell_count", 1)
    gpd.GeoDataFrame({{"cell_id": [1]}}, geometry=[box(0, 0, 1, 1)], crs="EPSG:32631").to_file(
        ctx.temp_output, layer=ctx.output_path.stem, driver="GPKG")
"""
    return contract, code
