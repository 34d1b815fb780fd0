# -*- coding: ascii -*-
"""MapSmith's worker inside ArcGIS Pro's own Python: run ArcPy tools named in a JSON request file.

    <Pro's python> worker.py --request <request.json> --result <result.json>

Shipped as package data and run as a separate process; MapSmith never imports this module or
ArcPy. It must run in ArcGIS Pro 3.x's Python with nothing but the standard library and arcpy, and
its source stays ASCII. Data never travels on the command line: the request and the result are
UTF-8 JSON files (Windows consoles and older Pythons mangle non-ASCII arguments); progress goes to
stdout as lines ``MAPSMITH-PROGRESS <fraction 0..1> <message>``. A geoprocessing failure is returned
with ArcPy's whole message queue, never only a code.

Request: {"protocol": 1, "scratch": dir, "datasets": {slot: {"path", "layer"}},
"requires": {"level": "Basic|Standard|Advanced", "extensions": [...]},
"steps": [{"tool": "analysis.Buffer", "parameters": {name: value}}], "output": name}
where a value may be {"$dataset": slot}, {"$scratch": name} or {"$crs": {"wkid": n, "wkt": text}}.
Result: {"protocol": 1, "status": "ok"|"error", "outcome": null|"gp_error"|"licence_tier"|"missing"|
"worker_error", "message", "messages": [{"severity", "code", "text"}], "product", "pro_version",
"output", "steps": [...]}.
"""

import argparse
import json
import os
import sys
import traceback

PROTOCOL = 1
PROGRESS_TAG = "MAPSMITH-PROGRESS"
SCRATCH_GDB = "mapsmith_scratch.gdb"
# arcpy.ProductInfo() names the licence level by its ArcMap-era product codes.
LEVEL_OF_PRODUCT = {"ArcView": "Basic", "ArcEditor": "Standard", "ArcInfo": "Advanced"}
LEVEL_RANK = {"Basic": 1, "Standard": 2, "Advanced": 3}
SEVERITY = {0: "message", 1: "warning", 2: "error"}


def progress(fraction, message):
    line = "{} {:.3f} {}".format(PROGRESS_TAG, fraction, message.replace("\n", " "))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def write_result(path, result):
    result["protocol"] = PROTOCOL
    text = json.dumps(result, ensure_ascii=False, indent=1)
    with open(path + ".part", "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(path + ".part", path)


def message_queue(arcpy):
    """ArcPy's message queue as records: severity, code (the number after ERROR/WARNING) and text."""
    queue = []
    try:
        count = arcpy.GetMessageCount()
    except Exception:
        count = 0
    for index in range(count):
        severity = SEVERITY.get(arcpy.GetSeverity(index), "message")
        code = arcpy.GetReturnCode(index)
        queue.append({"severity": severity, "code": f"{code:06d}" if code else None, "text": arcpy.GetMessage(index)})
    if not queue:
        text = arcpy.GetMessages() or ""
        for line in text.splitlines():
            queue.append({"severity": "error" if line.startswith("ERROR") else "message", "code": None, "text": line})
    return queue


def dataset_path(entry):
    """The catalog path ArcPy reads: a GeoPackage layer is <file>.gpkg/main.<layer>."""
    path, layer = entry["path"], entry.get("layer")
    if path.lower().endswith(".gpkg") and layer:
        return os.path.join(path, "main." + layer)
    if path.lower().endswith(".gdb") and layer:
        return os.path.join(path, layer)
    return path


def resolve(arcpy, value, request, gdb):
    if isinstance(value, dict):
        if "$dataset" in value:
            return dataset_path(request["datasets"][value["$dataset"]])
        if "$scratch" in value:
            return os.path.join(gdb, value["$scratch"])
        if "$crs" in value:
            crs = value["$crs"]
            if crs.get("wkid"):
                return arcpy.SpatialReference(int(crs["wkid"]))
            reference = arcpy.SpatialReference()
            reference.loadFromString(crs["wkt"])
            return reference
        return dict((k, resolve(arcpy, v, request, gdb)) for k, v in value.items())
    if isinstance(value, list):
        return [resolve(arcpy, v, request, gdb) for v in value]
    return value


def licence_problem(arcpy, requires):
    """Why this Pro's licence cannot run the tools, or None. Asked before any tool runs."""
    product = arcpy.ProductInfo()
    level = LEVEL_OF_PRODUCT.get(product)
    needed = requires.get("level", "Basic")
    if level is None:
        return f"ArcPy reports licence {product!r} (not initialised or not signed in)"
    if LEVEL_RANK[level] < LEVEL_RANK[needed]:
        return f"the tool needs ArcGIS Pro {needed}; this licence is {level} (arcpy.ProductInfo() = {product})"
    for extension in requires.get("extensions", []):
        state = arcpy.CheckExtension(extension)
        if state != "Available":
            return f"the tool needs the {extension} extension; arcpy.CheckExtension says {state}"
    return None


def tool_function(arcpy, name):
    toolbox, _, tool = name.partition(".")
    return getattr(getattr(arcpy, toolbox, None), tool, None)


def run(request, result):
    progress(0.02, "importing arcpy")
    try:
        import arcpy
    except ImportError as exc:
        result.update(status="error", outcome="worker_error", message=f"arcpy cannot be imported: {exc}")
        return
    except RuntimeError as exc:  # raised by arcpy itself when no licence can be obtained
        result.update(status="error", outcome="licence_tier", message=f"arcpy refused to start: {exc}")
        return
    result["product"] = arcpy.ProductInfo()
    try:
        result["pro_version"] = arcpy.GetInstallInfo().get("Version")
    except Exception:
        result["pro_version"] = None
    steps = request["steps"]
    for step in steps:
        if tool_function(arcpy, step["tool"]) is None:
            result.update(status="error", outcome="missing", message="this ArcPy has no tool {}".format(step["tool"]))
            return
    problem = licence_problem(arcpy, request.get("requires", {}))
    if problem is not None:
        result.update(status="error", outcome="licence_tier", message=problem)
        return
    for extension in request.get("requires", {}).get("extensions", []):
        arcpy.CheckOutExtension(extension)
    progress(0.1, "creating the scratch file geodatabase")
    arcpy.env.overwriteOutput = True
    gdb = os.path.join(request["scratch"], SCRATCH_GDB)
    if not os.path.exists(gdb):
        arcpy.management.CreateFileGDB(request["scratch"], SCRATCH_GDB)
    result["steps"] = []
    for index, step in enumerate(steps):
        progress(0.1 + 0.85 * index / len(steps), "running {}".format(step["tool"]))
        parameters = resolve(arcpy, step.get("parameters", {}), request, gdb)
        try:
            tool_function(arcpy, step["tool"])(**parameters)
        except arcpy.ExecuteError:
            result.update(
                status="error",
                outcome="gp_error",
                tool=step["tool"],
                message="{} failed".format(step["tool"]),
                messages=message_queue(arcpy),
            )
            return
        result["steps"].append({"tool": step["tool"], "messages": message_queue(arcpy)})
    result.update(status="ok", outcome=None, output=os.path.join(gdb, request["output"]))
    progress(1.0, "done")


def main(argv=None):
    parser = argparse.ArgumentParser(description="MapSmith's ArcPy worker")
    parser.add_argument("--request", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    result = {"status": "error", "outcome": "worker_error", "message": "the worker stopped early"}
    try:
        with open(args.request, encoding="utf-8") as handle:
            request = json.load(handle)
        if request.get("protocol") != PROTOCOL:
            result["message"] = f"request protocol {request.get('protocol')!r}, this worker speaks {PROTOCOL}"
        else:
            run(request, result)
    except Exception as exc:
        result.update(
            status="error",
            outcome="worker_error",
            message=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc()[-4000:],
        )
    write_result(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
