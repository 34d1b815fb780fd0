"""A fake ArcPy for the esri stack's tests: real geometry with geopandas, ArcPy-shaped failures.

Only what MapSmith's worker calls exists. Tool signatures follow ArcPy's keyword names; message
texts follow ArcPy's documented format. Never a stand-in for checking ArcGIS Pro's real behaviour.
"""

import os
import sys
import time

_FLAGS = dict(
    (item.partition("=")[0], item.partition("=")[2] or "1")
    for item in os.environ.get("MAPSMITH_FAKE_ARCPY", "").split(",")
    if item.strip()
)
if "import_error" in _FLAGS:
    raise RuntimeError("Not signed into Portal.")
if "crash" in _FLAGS:
    sys.stderr.write("fatal: simulated crash inside ArcGIS Pro's Python\n")
    sys.stderr.flush()
    os._exit(3)
if "no_result" in _FLAGS:
    os._exit(0)
if "hang" in _FLAGS:
    time.sleep(60)
if "chatter" in _FLAGS:
    print("Some library printed this line")

VERSION = "3.3.1"
_messages = []  # (severity 0/1/2, code int, text)


class ExecuteError(Exception):
    pass


class _Env:
    overwriteOutput = False
    workspace = None


env = _Env()


def ProductInfo():  # noqa: N802 - ArcPy's names
    return _FLAGS.get("product", "ArcInfo")


def GetInstallInfo():  # noqa: N802
    return {"ProductName": "ArcGISPro", "Version": VERSION, "BuildNumber": "51782"}


def CheckExtension(name):  # noqa: N802
    return _FLAGS.get("extension_" + name, "Available")


def CheckOutExtension(name):  # noqa: N802
    return "CheckedOut"


def GetMessageCount():  # noqa: N802
    return len(_messages)


def GetMessage(index):  # noqa: N802
    return _messages[index][2]


def GetSeverity(index):  # noqa: N802
    return _messages[index][0]


def GetReturnCode(index):  # noqa: N802
    return _messages[index][1]


def GetMessages(severity=0):  # noqa: N802
    return "\n".join(text for sev, _, text in _messages if sev >= severity)


class SpatialReference:
    def __init__(self, item=None):
        self.wkid = item if isinstance(item, int) else None
        self.wkt = None

    def loadFromString(self, text):  # noqa: N802
        self.wkt = text

    def user_input(self):
        return f"EPSG:{self.wkid}" if self.wkid else self.wkt


def ListTransformations(from_sr, to_sr, extent=None):  # noqa: N802
    return []


# -- helpers -----------------------------------------------------------------------------------


def _start(tool):
    del _messages[:]
    _messages.append((0, 0, "Start Time: Monday, 30 November 2026 12:00:00"))
    return tool


def _fail(tool, *errors):
    _messages.append((2, 0, "Failed to execute. Parameters are not valid."))
    for code, text in errors:
        _messages.append((2, code, f"ERROR {code:06d}: {text}"))
    _messages.append((2, 0, f"Failed to execute ({tool})."))
    raise ExecuteError(GetMessages(2))


def _succeed():
    _messages.append((0, 0, "Succeeded at Monday, 30 November 2026 12:00:01 (Elapsed Time: 0.01 seconds)"))


def _split(path):
    """(file, layer) of an ArcPy catalog path: <x>.gpkg/main.<layer>, <x>.gdb/<fc>, or a plain file."""
    head, tail = os.path.split(path)
    if head.lower().endswith(".gpkg"):
        return head, tail[5:] if tail.startswith("main.") else tail
    if head.lower().endswith(".gdb"):
        return head, tail
    return path, None


def _read(tool, path, label="Input Features"):
    import geopandas as gpd
    import pyogrio

    source, layer = _split(path)
    exists = os.path.exists(source) and (layer is None or layer in [n for n, _ in pyogrio.list_layers(source)])
    if not exists:
        _fail(tool, (732, f"{label}: Dataset {path} does not exist or is not supported"))
    return gpd.read_file(source, layer=layer)


def _write(frame, path):
    gdb, name = _split(path)
    frame.to_file(gdb, layer=name, driver="OpenFileGDB", TARGET_ARCGIS_VERSION="ARCGIS_PRO_3_2_OR_LATER")


def _distance_metres(tool, text):
    number, _, unit = str(text).partition(" ")
    if unit not in ("Meters", "Kilometers"):
        _fail(tool, (800, "The value is not a member of Meters | Kilometers | Feet."))
    return float(number) * (1000.0 if unit == "Kilometers" else 1.0)


def _choice(tool, value, allowed):
    if value not in allowed:
        _fail(tool, (800, "The value is not a member of {}.".format(" | ".join(allowed))))


class _Toolbox:
    pass


analysis = _Toolbox()
management = _Toolbox()


def _buffer(
    in_features,
    out_feature_class,
    buffer_distance_or_field,
    line_side="FULL",
    line_end_type="ROUND",
    dissolve_option="NONE",
    dissolve_field=None,
    method="PLANAR",
):
    tool = _start("Buffer")
    _choice(tool, method, ("PLANAR", "GEODESIC"))
    frame = _read(tool, in_features)
    metres = _distance_metres(tool, buffer_distance_or_field)
    # Pro writes true curves; these are densified at 90 segments a quarter circle when read back.
    if method == "GEODESIC":
        utm = frame.estimate_utm_crs()
        geometry = frame.geometry.to_crs(utm).buffer(metres, quad_segs=90).to_crs(frame.crs)
    else:
        geometry = frame.geometry.buffer(metres / frame.crs.axis_info[0].unit_conversion_factor, quad_segs=90)
    out = frame.set_geometry(geometry)
    out["BUFF_DIST"] = metres
    out["ORIG_FID"] = range(1, len(out) + 1)
    _write(out, out_feature_class)
    _succeed()


def _clip(in_features, clip_features, out_feature_class, cluster_tolerance=None):
    import geopandas as gpd

    tool = _start("Clip")
    frame = _read(tool, in_features)
    mask = _read(tool, clip_features, "Clip Features").to_crs(frame.crs)
    _write(gpd.clip(frame, mask), out_feature_class)
    _succeed()


def _dissolve(in_features, out_feature_class, dissolve_field=None, statistics_fields=None, multi_part="MULTI_PART"):
    tool = _start("Dissolve")
    frame = _read(tool, in_features)
    keys = list(dissolve_field or [])
    missing = [k for k in keys if k not in frame.columns]
    if missing:
        _fail(tool, (728, f"Field {missing[0]} does not exist within table"))
    if keys:
        out = frame[keys + [frame.geometry.name]].dissolve(by=keys, dropna=False).reset_index()
    else:
        out = frame[[frame.geometry.name]].dissolve()
    _write(out, out_feature_class)
    _succeed()


def _project(in_dataset, out_dataset, out_coor_system, transform_method=None, in_coor_system=None):
    tool = _start("Project")
    frame = _read(tool, in_dataset, "Input Dataset or Feature Class")
    _write(frame.to_crs(out_coor_system.user_input()), out_dataset)
    _succeed()


def _copy(in_features, out_feature_class):
    tool = _start("CopyFeatures")
    _write(_read(tool, in_features), out_feature_class)
    _succeed()


def _calculate_geometry(in_features, geometry_property, length_unit=None, area_unit=None, coordinate_system=None):
    from pyproj import Geod

    tool = _start("CalculateGeometryAttributes")
    frame = _read(tool, in_features)
    for field, prop in geometry_property:
        _choice(tool, prop, ("AREA", "AREA_GEODESIC", "PERIMETER_LENGTH"))
        if prop == "AREA_GEODESIC":
            _choice(tool, area_unit, ("SQUARE_METERS", "HECTARES"))
            lonlat = frame.geometry.to_crs(frame.crs.geodetic_crs)
            geod = Geod(ellps="WGS84")
            frame[field] = [abs(geod.geometry_area_perimeter(g)[0]) for g in lonlat]
        else:
            frame[field] = frame.geometry.area
    _write(frame, in_features)
    _succeed()


def _feature_to_point(in_features, out_feature_class, point_location="CENTROID"):
    tool = _start("FeatureToPoint")
    if ProductInfo() != "ArcInfo":
        _messages.append((2, 824, "ERROR 000824: The tool is not licensed."))
        _messages.append((2, 0, "Failed to execute (FeatureToPoint)."))
        raise ExecuteError(GetMessages(2))
    frame = _read(tool, in_features)
    out = frame.set_geometry(frame.geometry.representative_point() if point_location == "INSIDE" else frame.centroid)
    out["ORIG_FID"] = range(1, len(out) + 1)
    _write(out, out_feature_class)
    _succeed()


_MATCH = {
    "INTERSECT": "intersects",
    "WITHIN": "within",
    "CONTAINS": "contains",
    "BOUNDARY_TOUCHES": "touches",
}


def _spatial_join(
    target_features,
    join_features,
    out_feature_class,
    join_operation="JOIN_ONE_TO_ONE",
    join_type="KEEP_ALL",
    field_mapping=None,
    match_option="INTERSECT",
    search_radius=None,
    distance_field_name=None,
):
    import geopandas as gpd

    tool = _start("SpatialJoin")
    _choice(tool, match_option, tuple(_MATCH) + ("WITHIN_A_DISTANCE_GEODESIC",))
    target = _read(tool, target_features, "Target Features")
    join = _read(tool, join_features, "Join Features").to_crs(target.crs)
    # ArcPy names a join field that clashes with a target field <name>_1
    join = join.rename(columns={c: c + "_1" for c in join.columns if c in target.columns and c != join.geometry.name})
    target = target.assign(TARGET_FID=range(1, len(target) + 1))
    join = join.assign(JOIN_FID=range(1, len(join) + 1))
    how = "left" if join_type == "KEEP_ALL" else "inner"
    if match_option == "WITHIN_A_DISTANCE_GEODESIC":
        utm = target.estimate_utm_crs()
        metres = _distance_metres(tool, search_radius)
        joined = gpd.sjoin(target.to_crs(utm), join.to_crs(utm), how=how, predicate="dwithin", distance=metres)
        joined = joined.to_crs(target.crs)
    else:
        joined = gpd.sjoin(target, join, how=how, predicate=_MATCH[match_option])
    joined = joined.drop(columns=["index_right"])
    joined.insert(0, "Join_Count", joined.groupby("TARGET_FID")["JOIN_FID"].transform("count"))
    _write(joined, out_feature_class)
    _succeed()


analysis.Buffer = _buffer
analysis.Clip = _clip
analysis.SpatialJoin = _spatial_join
management.Dissolve = _dissolve
management.Project = _project
management.CopyFeatures = _copy
management.CalculateGeometryAttributes = _calculate_geometry
management.FeatureToPoint = _feature_to_point
management.CreateFileGDB = lambda out_folder_path, out_name, out_version="CURRENT": None
