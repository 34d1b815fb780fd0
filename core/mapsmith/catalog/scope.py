"""What the catalogue does not do: declared out-of-scope tasks, ranked beside the operations.

A search engine for a tool catalogue should know the jobs it is asked for and cannot do. The support
signals (``support``) catch a request whose words the catalogue does not know; they cannot catch
"geocode these addresses" or "shortest route to the depot", whose words are GIS words the catalogue
knows well. So each task below is written as a small entry (a label and a few lines saying the job in a
user's words) and indexed with the operations; when one of them outranks every operation clearly
(``search`` decides with calibrated margins), the answer is ``none`` and names the task ("geocoding is
not offered") with the nearest operations listed as not a match.

The list was written from taxonomies of GIS and general software work (the toolbox families of
ArcGIS Pro and QGIS Processing MapSmith has no operation for, and everyday office, media and system
tasks), never from ``tests/data/discovery_queries.json``: the requests measure this list, they did not
shape it. A task some toolbox in the catalogue does (``offered_by``: QGIS's shortest-path algorithms
route; its Nominatim geocoder geocodes) is in scope whenever one of those entries is in the catalogue,
and is then left out of the index.

Written here rather than taken from a library: no library holds a list of what a given tool catalogue
does not do; this is data about MapSmith.

What this module must never do: name an operation of the catalogue as out of scope, rank anything, or
hold a task only because a request in the query file asked for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["OUT_OF_SCOPE", "SCOPE_PREFIX", "OutOfScope", "by_name", "in_catalogue", "is_scope_name", "scope_documents"]

# Index names of the scope entries: a prefix no operation and no toolbox algorithm can have.
SCOPE_PREFIX = "scope::"


@dataclass(frozen=True)
class OutOfScope:
    """One task the catalogue does not offer.

    ``key`` names it in answers; ``label`` is what the answer says is not offered; ``lines`` say the job in a
    user's words (each is a passage of its own, as an operation's lines are); ``family`` is ``gis`` or
    ``software``; ``offered_by`` lists catalogue entries (e.g. QGIS algorithms) that do the job, so that the
    task is in scope whenever one of them is present."""

    key: str
    label: str
    family: str
    lines: tuple[str, ...]
    offered_by: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return SCOPE_PREFIX + self.key

    def document(self) -> str:
        return "\n".join((self.label, *self.lines))


def _gis(key: str, label: str, *lines: str, offered_by: tuple[str, ...] = ()) -> OutOfScope:
    return OutOfScope(key, label, "gis", tuple(lines), offered_by)


def _software(key: str, label: str, *lines: str) -> OutOfScope:
    return OutOfScope(key, label, "software", tuple(lines))


OUT_OF_SCOPE: tuple[OutOfScope, ...] = (
    # -- GIS toolbox families MapSmith has no operation for (ArcGIS Pro / QGIS Processing) -------------------
    _gis(
        "geocoding",
        "geocoding (street addresses or place names to coordinates)",
        "geocode a list of street addresses into points",
        "find the latitude and longitude of each postal address or place name",
        "address matching against an address locator or gazetteer",
        offered_by=("qgis:native:batchnominatimgeocoder",),
    ),
    _gis(
        "reverse-geocoding",
        "reverse geocoding (coordinates to street addresses)",
        "reverse geocode positions to the nearest street address",
        "what is the postal address at this GPS location",
    ),
    _gis(
        "routing",
        "routing along a road network (shortest or fastest route)",
        "shortest or fastest route between two places along the streets",
        "driving directions and travel time over the road network",
        "vehicle routing and delivery route planning, travelling salesman tour",
        offered_by=(
            "qgis:native:shortestpathpointtopoint",
            "qgis:native:shortestpathlayertopoint",
            "qgis:native:shortestpathpointtolayer",
        ),
    ),
    _gis(
        "service-areas",
        "network service areas (drive-time or walk-time isochrones)",
        "isochrones: everywhere reachable within ten minutes by car along the roads",
        "walking time catchment over the street network",
        "closest facility by travel time through the network",
        offered_by=("qgis:native:serviceareafrompoint", "qgis:native:serviceareafromlayer"),
    ),
    _gis(
        "georeferencing",
        "georeferencing scanned maps or images with control points",
        "georeference a scanned paper map by picking ground control points",
        "give an old aerial photograph real-world coordinates from known landmarks",
        "rubber-sheeting an image to match the base map",
    ),
    _gis(
        "3d-rendering",
        "3D scenes and rendering",
        "render a 3D view of the terrain with the buildings extruded",
        "fly-through animation over a 3D scene",
        "3D globe visualisation",
    ),
    _gis(
        "map-layout",
        "map layouts, printing and atlases",
        "design a printed map with a legend, scale bar, north arrow and title",
        "export the map layout to PDF or an image for printing",
        "an atlas of map pages, one page per district",
        offered_by=(
            "qgis:native:printlayouttopdf",
            "qgis:native:printlayouttoimage",
            "qgis:native:atlaslayouttopdf",
            "qgis:native:atlaslayouttoimage",
        ),
    ),
    _gis(
        "symbology",
        "map styling, symbology and labelling",
        "choose colours and symbols for a layer: a choropleth with graduated colour classes",
        "place labels on the map features without overlaps",
        "style the map with a colour ramp and a legend",
    ),
    _gis(
        "tile-serving",
        "web map tiles and map services",
        "generate XYZ or vector tiles for a web map",
        "publish a layer as a WMS or WFS web map service on a map server",
        "a slippy map tile cache for the website",
        offered_by=(
            "qgis:gdal:gdal2tiles",
            "qgis:qgis:tilesxyzdirectory",
            "qgis:qgis:tilesxyzmbtiles",
            "qgis:native:writevectortiles_xyz",
            "qgis:native:writevectortiles_mbtiles",
        ),
    ),
    _gis(
        "editing",
        "editing and digitising features by hand",
        "digitise new features by tracing them on an aerial photo",
        "move vertices and reshape a polygon interactively on screen",
        "draw a new line and snap it to the existing network while editing",
    ),
    _gis(
        "gps-devices",
        "GPS receivers: transferring tracks and waypoints",
        "download the tracks and waypoints from a handheld GPS unit",
        "upload a route to a Garmin receiver",
        offered_by=("qgis:native:downloadgpsdata", "qgis:native:uploadgpsdata"),
    ),
    _gis(
        "point-clouds",
        "lidar point cloud processing",
        "classify ground and vegetation returns in a LAS or LAZ point cloud",
        "thin, filter or colourise lidar point clouds",
    ),
    _gis(
        "image-classification",
        "image classification (supervised, unsupervised, object-based)",
        "classify a satellite image into land cover classes from training samples",
        "unsupervised clustering of pixels with k-means or ISODATA",
        "segment an image into objects and classify them with machine learning",
    ),
    _gis(
        "pansharpening",
        "pansharpening",
        "pansharpen the multispectral bands with the panchromatic band",
        offered_by=("qgis:gdal:pansharp",),
    ),
    _gis(
        "orthorectification",
        "orthorectification of imagery",
        "orthorectify satellite or aerial imagery with its sensor model and a DEM",
        "remove relief displacement from an aerial photograph",
    ),
    _gis(
        "photogrammetry",
        "photogrammetry: drone photos to orthomosaics and surface models",
        "stitch overlapping drone photos into an orthomosaic",
        "structure from motion: a 3D model from photographs",
    ),
    _gis(
        "atmospheric-correction",
        "atmospheric correction of imagery",
        "atmospheric correction of satellite scenes to surface reflectance",
        "remove haze and cloud shadow from the imagery",
    ),
    _gis(
        "raster-mosaic",
        "mosaicking raster tiles",
        "mosaic many raster tiles into one seamless raster",
        "stitch adjacent image tiles together into a single grid",
        offered_by=("qgis:gdal:merge", "qgis:gdal:buildvirtualraster"),
    ),
    _gis(
        "contours",
        "contour lines (isolines) from a surface",
        "generate contour lines from an elevation raster at a fixed interval",
        "isolines of equal value drawn from a grid",
        offered_by=("qgis:gdal:contour", "qgis:gdal:contour_polygon"),
    ),
    _gis(
        "fill-nodata",
        "filling nodata gaps in a raster",
        "fill the holes of missing cells in a raster by interpolating from their edges",
        "void filling of a surface with gaps",
        offered_by=("qgis:gdal:fillnodata", "qgis:native:fillnodata"),
    ),
    _gis(
        "kernel-density",
        "kernel density (heat maps of point density)",
        "a heat map of how dense the points are",
        "kernel density estimation surface from incidents",
        offered_by=("qgis:qgis:heatmapkerneldensityestimation",),
    ),
    _gis(
        "spatial-statistics",
        "hot spot analysis and spatial autocorrelation",
        "hot spot analysis with the Getis-Ord Gi* statistic",
        "global and local Moran's I spatial autocorrelation",
        "geographically weighted regression",
    ),
    _gis(
        "voronoi",
        "Thiessen (Voronoi) polygons",
        "Thiessen polygons around each point",
        "Voronoi diagram of the sites",
        offered_by=("qgis:qgis:voronoipolygons",),
    ),
    _gis(
        "kriging",
        "kriging and geostatistical interpolation",
        "kriging with a fitted semivariogram",
        "geostatistical prediction with a standard error surface",
    ),
    _gis(
        "linear-referencing",
        "linear referencing (route measures and events)",
        "locate events along a route by milepost or chainage measure",
        "dynamic segmentation of route event tables",
    ),
    _gis(
        "cost-distance",
        "cost distance and least-cost paths",
        "least-cost path across a friction or cost surface",
        "accumulated cost distance from sources over a cost raster",
    ),
    _gis(
        "solar-radiation",
        "solar radiation and insolation",
        "incoming solar radiation on the terrain over a year",
        "hours of direct sunshine a roof or slope receives",
    ),
    _gis(
        "terrain-ruggedness",
        "terrain ruggedness and topographic position indices",
        "terrain ruggedness index",
        "topographic position index of the landscape",
        offered_by=(
            "qgis:gdal:roughness",
            "qgis:gdal:tpitopographicpositionindex",
            "qgis:gdal:triterrainruggednessindex",
            "qgis:native:ruggednessindex",
        ),
    ),
    _gis(
        "hydraulic-modelling",
        "hydraulic and flood simulation",
        "simulate a flood wave: water depths and velocities over time from a river flow model",
        "hydraulic model of a dam break",
    ),
    _gis(
        "fishnet",
        "creating regular grids (fishnets, hexagon grids)",
        "create a regular grid of squares or hexagons over the study area",
        "fishnet of cells covering an extent",
        offered_by=("qgis:native:creategrid",),
    ),
    _gis(
        "random-points",
        "random sample points",
        "generate random sample points inside polygons for a field survey",
        "random points along lines or in an extent",
        offered_by=(
            "qgis:native:randompointsinpolygons",
            "qgis:native:randompointsinextent",
            "qgis:native:randompointsonlines",
            "qgis:qgis:randompointsinsidepolygons",
        ),
    ),
    _gis(
        "smoothing",
        "smoothing lines and outlines into curves",
        "smooth jagged lines and polygon outlines into soft curves",
        offered_by=("qgis:native:smoothgeometry",),
    ),
    _gis(
        "geotagged-photos",
        "points from geotagged photos",
        "make points from the GPS position stored in the photos' EXIF tags",
        offered_by=("qgis:native:importphotos",),
    ),
    _gis(
        "charts",
        "charts and plots of attributes",
        "draw a bar chart, box plot or scatter plot of the attribute values",
        offered_by=("qgis:qgis:barplot", "qgis:qgis:boxplot", "qgis:qgis:vectorlayerscatterplot"),
    ),
    _gis(
        "database-loading",
        "loading layers into a spatial database server",
        "import the layer into a PostGIS database table",
        "manage the users and permissions of the spatial database server",
        offered_by=("qgis:qgis:importintopostgis", "qgis:gdal:importvectorintopostgisdatabasenewconnection"),
    ),
    _gis(
        "map-matching",
        "map matching GPS traces to roads",
        "snap noisy GPS traces onto the road network they followed",
    ),
    _gis(
        "animation",
        "time animation of data",
        "animate the tracks over time with a time slider",
        "a video of the map changing through the years",
    ),
    # -- everyday software tasks ---------------------------------------------------------------------------
    _software("email", "email", "send, read, reply to or forward an email message with an attachment"),
    _software("messaging", "messaging and chat", "post a message in a chat channel", "text a colleague by SMS"),
    _software(
        "calendar",
        "calendars, meetings and bookings",
        "schedule a meeting and send the calendar invitation",
        "book a meeting room or a table at a restaurant",
        "set a reminder for tomorrow",
    ),
    _software(
        "documents",
        "writing and formatting documents",
        "write or format a letter or a report in the word processor",
        "check the spelling and grammar of a document",
    ),
    _software(
        "spreadsheets",
        "spreadsheet formatting and formulas",
        "format the cells and fix the formulas of a spreadsheet",
        "make a pivot table in Excel",
    ),
    _software("presentations", "presentations", "make slides for a presentation"),
    _software(
        "photo-editing",
        "photo editing",
        "retouch a photo, remove red eye, apply a filter",
        "crop or resize a picture for social media",
    ),
    _software(
        "video-audio",
        "video and audio editing",
        "edit a video: trim the clips, add subtitles and music",
        "convert or cut an audio recording, play music",
    ),
    _software("web-browsing", "web browsing and search", "search the internet and open a website"),
    _software(
        "shopping-payments",
        "shopping, payments and banking",
        "buy something online, order a product",
        "pay an invoice or transfer money from the bank account",
        "prepare a tax return or the payroll",
    ),
    _software("travel-booking", "travel booking", "book a flight, a hotel room or a train ticket"),
    _software("weather", "weather forecasts", "what will the weather be tomorrow: the forecast"),
    _software(
        "programming",
        "writing and debugging programs",
        "write, debug or compile code; fix a bug in a program",
        "commit and push to the git repository",
    ),
    _software(
        "it-support",
        "installing software and IT support",
        "install or update software and drivers",
        "the printer or the wifi does not work; reset a password",
    ),
    _software(
        "file-management",
        "file management and backups",
        "zip, move or back up files and folders to the cloud",
        "recover a deleted file",
    ),
    _software("translation", "translating text", "translate this text into another language"),
    _software("social-media", "social media", "post an update on social media"),
    _software("entertainment", "games and entertainment", "play a game or recommend a film to watch"),
    _software("cooking", "cooking and recipes", "a recipe for dinner"),
)


def is_scope_name(name: str) -> bool:
    return name.startswith(SCOPE_PREFIX)


def in_catalogue(entry: OutOfScope, catalogue: Iterable[str]) -> bool:
    """True when an entry of ``catalogue`` does the task: it is then in scope, not a declared gap."""
    names = set(catalogue)
    return any(name in names for name in entry.offered_by)


def scope_documents(catalogue: Iterable[str]) -> dict[str, str]:
    """``{index name: document}`` of the tasks the catalogue (its entry names) does not offer."""
    names = set(catalogue)
    return {e.name: e.document() for e in OUT_OF_SCOPE if not in_catalogue(e, names)}


def by_name(name: str) -> OutOfScope:
    """The entry indexed under ``name`` (``scope::<key>``)."""
    key = name.removeprefix(SCOPE_PREFIX)
    for entry in OUT_OF_SCOPE:
        if entry.key == key:
            return entry
    raise KeyError(name)
