"""Write ``docs/scaling.md``: how a 1-billion-point join would run on a Spark cluster, from measured figures.

Every number on the page is read from ``benchmarks/results/scale.json`` (``bench_scale.py``) or worked
out from it here, in the open, by the functions below; the only figure that is not measured is the
price of a vCPU-hour, which is a stated assumption (``PRICE_PER_VCPU_HOUR``) and only multiplies a
measured quantity. ``tests/docs/test_generated_docs.py`` fails when the page and this script disagree.

    python benchmarks/scaling_report.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # render_goals sits beside this file; the docs test loads it by path
    sys.path.insert(0, str(HERE))

from render_goals import goals_scaling_section  # noqa: E402

RESULTS = HERE / "results" / "scale.json"
CAPPED = HERE / "results" / "scale_capped.json"  # the same join under a memory cgroup, when measured
GOALS = HERE / "results" / "goals.json"  # bench_goals.py: every operation against the engines, per size
GOALS_CLUSTER = HERE / "results" / "goals_cluster.json"  # bench_goals.py --preset cluster-100m
CLUSTER_RUN_POINTS = 100_000_000
GOALS_NOT_SIZES = ("goals_capped", "goals_cluster")  # goals_*.json that are not more sizes of the same run
PAGE = HERE.parent / "docs" / "scaling.md"
TARGET_POINTS = 1_000_000_000
CLUSTER_CORES = (64, 256)  # two example clusters the page works the numbers out for
PART_BYTES = 256 * 2**20  # a GeoParquet part of about 256 MiB: big enough to amortise a task, small enough to retry
# Not measured: an assumed on-demand price of one vCPU-hour, to turn measured vCPU-hours into money.
# Substitute your provider's price; every other figure on the page is measured or derived.
PRICE_PER_VCPU_HOUR = 0.05


def load(path: Path = RESULTS) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8"))


def _finished(size: dict[str, Any], engine: str) -> dict[str, Any] | None:
    e = size["engines"].get(engine)
    return e if e and "median_seconds" in e else None


def figures(r: dict[str, Any]) -> dict[str, Any]:
    """The derived quantities the page uses, from the results file."""
    cores = r["machine"]["nproc"]
    sizes = sorted(r["sizes"], key=lambda s: s["points"])
    largest = sizes[-1]
    out: dict[str, Any] = {"cores": cores, "largest": largest["points"], "sizes": sizes}
    per_engine: dict[str, Any] = {}
    for engine in largest["engines"]:
        rows = [(s["points"], _finished(s, engine)) for s in sizes]
        done = [(n, e) for n, e in rows if e is not None]
        info: dict[str, Any] = {"finished_at": [n for n, _ in done], "failed_at": [n for n, e in rows if e is None]}
        if len(done) >= 2:
            (n1, e1), (n2, e2) = done[-2], done[-1]
            info["mib_per_million"] = (e2["median_peak_rss_mib"] - e1["median_peak_rss_mib"]) / ((n2 - n1) / 1e6)
            info["seconds_per_million"] = (e2["median_seconds"] - e1["median_seconds"]) / ((n2 - n1) / 1e6)
        if done:
            n, e = done[-1]
            info["largest"] = {"points": n, "seconds": e["median_seconds"], "peak_mib": e["median_peak_rss_mib"]}
            info["points_per_core_second"] = n / (e["median_seconds"] * cores)
        per_engine[engine] = info
    out["engines"] = per_engine
    out["bytes_per_point"] = largest["points_file_bytes"] / largest["points"]
    out["sha256_mb_per_second"] = largest["points_file_bytes"] / 1e6 / max(largest["points_file_sha256_seconds"], 1e-9)
    ms = largest.get("mapsmith", {}).get("spatial_join", {}).get("engines", {}).get("spark")
    if ms and ms.get("outcome") == "finished":
        out["mapsmith_spark"] = {
            "seconds": ms["seconds"],
            "points_per_core_second": largest["points"] / (ms["seconds"] * cores),
        }
    spark = _finished(largest, "spark")
    if spark:
        run = spark["runs"][0]
        out["spark"] = {
            "setup_seconds": run["setup_seconds"],
            "jvm_peak_mib": run["jvm_peak_rss_mib"],
            "join_strategy": run.get("join_strategy", "not recorded"),
            "driver_memory": run["driver_memory"],
            "output_bytes_per_point": run.get("output_bytes", 0) / largest["points"],
            "pairs_per_point": spark.get("pairs", 0) / largest["points"],
        }
    return out


def _gib(mib: float) -> str:
    return f"{mib / 1024:,.1f}"


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds / 3600:,.1f} h"


def capped_outcomes(c: dict[str, Any]) -> list[str]:
    """One phrase per run of the capped results: who finished, who ran out of memory."""
    out = []
    for size in c["sizes"]:
        for engine, e in size["engines"].items():
            done = "median_seconds" in e
            out.append(f"{engine} alone {'finished' if done else 'ran out of memory'}")
        for operation, op in size.get("mapsmith", {}).items():
            for engine, e in op["engines"].items():
                done = e["outcome"] == "finished"
                out.append(f"MapSmith's `{operation}` on {engine} {'finished' if done else 'ran out of memory'}")
    return out


def cluster_run_projection(f: dict[str, Any]) -> list[str]:
    """What the 100-million-point cluster run should cost, from the Spark rate measured on one machine."""
    spark = f.get("spark")
    if spark is None:
        return []
    rate = f.get("mapsmith_spark", {}).get("points_per_core_second") or f["engines"]["spark"]["points_per_core_second"]
    core_seconds = CLUSTER_RUN_POINTS / rate
    cores = f["cores"]
    seconds = core_seconds / cores + spark["setup_seconds"]
    return [
        "Projected before it is run, from the Spark rate of the one-machine join at the top of this page "
        f"({rate:,.0f} points per core-second): "
        f"{CLUSTER_RUN_POINTS:,} points cost about {core_seconds / 3600:,.2f} core-hours, so about "
        f"{_duration(seconds)} on this machine's {cores} cores (the local cluster's two workers share them), "
        f"{seconds * cores / 3600:,.2f} vCPU-hours, ${seconds * cores / 3600 * PRICE_PER_VCPU_HOUR:,.2f} at the "
        "assumed price. The measured run replaces this paragraph's figures.",
        "",
    ]


CLUSTER_VARIANT = "mapsmith_api_sedona"  # MapSmith's Python API on the sedona stack, on the cluster


def cluster_figures(cluster: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per operation, MapSmith's measured run on the cluster: points, work and whole-process seconds, peak
    memory (driver, JVMs and executors summed), start-up (the whole process less the work) and its rate in
    points per core-second over the machine's cores (the cluster's workers share them)."""
    cores = cluster["machine"]["nproc"]
    out: dict[str, dict[str, float]] = {}
    for size in cluster["sizes"]:
        for operation, op in size["operations"].items():
            v = op["variants"].get(CLUSTER_VARIANT, {})
            if "median_seconds" not in v:
                continue
            out[operation] = {
                "points": size["points"],
                "seconds": v["median_seconds"],
                "process_seconds": v["median_process_seconds"],
                "peak_mib": v["peak_rss_mib"],
                "startup_seconds": max(0.0, v["median_process_seconds"] - v["median_seconds"]),
                "points_per_core_second": size["points"] / (v["median_seconds"] * cores),
            }
    return out


def cluster_cost(cluster: dict[str, Any], f: dict[str, Any]) -> list[str]:
    """The billion-point cost redone from the cluster run: MapSmith's measured rate per operation, carried to
    TARGET_POINTS on CLUSTER_CORES, beside the rate the one-machine plan above assumed."""
    measured = cluster_figures(cluster)
    lines = ["## The billion, redone from the cluster run", ""]
    if not measured:
        return [*lines, "MapSmith did not finish on the cluster, so nothing is redone from it.", ""]
    cores = cluster["machine"]["nproc"]
    local = f.get("mapsmith_spark", {}).get("points_per_core_second")
    lines += [
        f"MapSmith's own runs on the standalone cluster ({cluster['parameters']['spark_cluster_master']}, its "
        f"workers sharing this machine's {cores} cores), checks, digests and manifest included, carried to "
        f"{TARGET_POINTS:,} points at the rate measured (points per core-second over the {cores} cores), with the "
        "start-up measured there (the whole process less the work) paid once:",
        "",
        "| operation | points | work | whole process | peak memory (GiB) | points per core-second | "
        + " | ".join(f"{c} cores: time, vCPU-hours, cost" for c in CLUSTER_CORES)
        + " |",
        "|---|---:|---:|---:|---:|---:|" + "---:|" * len(CLUSTER_CORES),
    ]
    for operation, m in measured.items():
        cells = []
        for c in CLUSTER_CORES:
            seconds = TARGET_POINTS / m["points_per_core_second"] / c + m["startup_seconds"]
            vcpu_hours = seconds * c / 3600
            cells.append(f"{_duration(seconds)}, {vcpu_hours:,.1f}, ${vcpu_hours * PRICE_PER_VCPU_HOUR:,.2f}")
        lines.append(
            f"| `{operation}` | {m['points']:,} | {_duration(m['seconds'])} | {_duration(m['process_seconds'])} | "
            f"{_gib(m['peak_mib'])} | {m['points_per_core_second']:,.0f} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    join = measured.get("spatial_join")
    if join and local:
        lines += [
            f"The one-machine plan above assumed {local:,.0f} points per core-second for `spatial_join` (Spark in "
            f"local mode, {f['largest']:,} points); the cluster run measured {join['points_per_core_second']:,.0f}, "
            f"{join['points_per_core_second'] / local:,.2f} times that. The cost at the assumed price "
            f"(${PRICE_PER_VCPU_HOUR:.2f} per vCPU-hour) scales by the inverse.",
            "",
        ]
    return lines


def render(
    r: dict[str, Any] | None = None,
    capped: dict[str, Any] | None = None,
    goals: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    more: tuple[dict[str, Any], ...] = (),
) -> str:
    if r is None:
        r = load()
        capped = load(CAPPED) if CAPPED.exists() else None
        goals = load(GOALS) if GOALS.exists() else None
        cluster = load(GOALS_CLUSTER) if GOALS_CLUSTER.exists() else None
        more = tuple(load(p) for p in sorted(GOALS.parent.glob("goals_*.json")) if p.stem not in GOALS_NOT_SIZES)
    f = figures(r)
    return _finish(_render_scale(r, capped, f), goals, cluster, f, more)


def _finish(
    lines: list[str],
    goals: dict[str, Any] | None,
    cluster: dict[str, Any] | None,
    f: dict[str, Any],
    more: tuple[dict[str, Any], ...] = (),
) -> str:
    lines = [*lines, *goals_scaling_section(goals, cluster, more)]
    lines += cluster_run_projection(f) if cluster is None else cluster_cost(cluster, f)
    return "\n".join(lines).rstrip("\n") + "\n"


def _render_scale(r: dict[str, Any], capped: dict[str, Any] | None, f: dict[str, Any]) -> list[str]:
    cores, n_max = f["cores"], f["largest"]
    lines = [
        "# Scaling: one billion points on a Spark cluster",
        "",
        "<!-- Generated by `python benchmarks/scaling_report.py` from benchmarks/results/scale.json; "
        "do not edit by hand. -->",
        "",
        f"What it would take to join {TARGET_POINTS:,} points with 10,000 polygons through MapSmith's sedona "
        "stack on a Spark cluster, worked out from the join measured on one machine (`docs/benchmarks.md`, "
        f'section "One join at 1, 10 and 30 million points"): {cores} CPUs, {r["machine"]["memory_gib"]} GiB, '
        "Spark in local mode. Nothing below was run on a cluster: these are the local figures carried forward "
        "with the arithmetic shown, and the last section says what the arithmetic leaves out.",
        "",
        "## What one machine did",
        "",
        "| engine | finished at | failed at | seconds at the largest size | peak memory there (GiB) | "
        "memory per extra million points (MiB) | points per core-second |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for engine, info in f["engines"].items():
        largest = info.get("largest")
        lines.append(
            f"| {engine} | {', '.join(f'{n:,}' for n in info['finished_at']) or 'none'} | "
            f"{', '.join(f'{n:,}' for n in info['failed_at']) or 'none'} | "
            + (f"{largest['seconds']:,.1f} | {_gib(largest['peak_mib'])} | " if largest else " | | ")
            + (f"{info['mib_per_million']:,.0f} | " if "mib_per_million" in info else " | ")
            + (f"{info['points_per_core_second']:,.0f} |" if "points_per_core_second" in info else " |")
        )
    lines += [
        "",
        "Memory per extra million points is the slope of peak memory between the two largest sizes an engine "
        "finished; points per core-second divides the largest finished size by its median time and by "
        f"{cores} cores (the machine was shared, so these rates are low, not high, estimates).",
        "",
    ]
    one_machine = []
    for engine, info in f["engines"].items():
        if "mib_per_million" in info and info["mib_per_million"] > 0:
            need = (
                info["largest"]["peak_mib"]
                + info["mib_per_million"] * (TARGET_POINTS - info["largest"]["points"]) / 1e6
            )
            one_machine.append(f"{engine} about {_gib(need)} GiB")
    if capped:
        cap = capped["parameters"]["memory_limit_gib"]
        sizes = ", ".join(f"{size['points']:,}" for size in capped["sizes"])
        lines += [
            f"With {cap:g} GiB of memory (a memory cgroup, `benchmarks/results/scale_capped.json`) at {sizes} "
            f"points: {'; '.join(capped_outcomes(capped))}.",
            "",
        ]
    if one_machine:
        lines += [
            f"Carried to {TARGET_POINTS:,} points on one machine, those slopes give: {'; '.join(one_machine)}. "
            "An engine that holds every point in memory at once (GeoPandas) cannot do it on any ordinary machine; "
            "the streaming engines need less memory, but one machine's cores then set the time.",
            "",
        ]
    spark = f.get("spark")
    if spark is None:
        lines += ["Spark did not finish at the largest size here, so no cluster plan is derived.", ""]
        return lines
    raw_rate = f["engines"]["spark"]["points_per_core_second"]
    # MapSmith's own run is the plan's unit of work when it was measured: its checks, counts and ordering
    # cost more than the bare join; the bare join is the floor.
    mapsmith_rate = f.get("mapsmith_spark", {}).get("points_per_core_second")
    rate = mapsmith_rate or raw_rate
    core_seconds = TARGET_POINTS / rate
    input_bytes = f["bytes_per_point"] * TARGET_POINTS
    parts = max(1, round(input_bytes / PART_BYTES))
    output_bytes = spark["output_bytes_per_point"] * TARGET_POINTS
    digest_core_seconds = input_bytes / 1e6 / f["sha256_mb_per_second"]
    per_core_mib = spark["jvm_peak_mib"] / cores
    lines += [
        "## The plan",
        "",
        "**Input.** The points as partitioned GeoParquet: at the measured "
        f"{f['bytes_per_point']:.1f} bytes per point, {TARGET_POINTS:,} points are about {input_bytes / 1e9:,.0f} GB, "
        f"or about {parts:,} parts of 256 MiB. Each part becomes at least one Spark task; sorting the points by a "
        "spatial key (a geohash prefix) before writing them keeps each part's bounding box small, so GeoParquet "
        "readers can skip parts a query's area does not touch.",
        "",
        "**The join.** The 10,000 polygons are small, so Sedona broadcasts them to "
        f"every executor and joins each part of the points against an in-memory index: Sedona chose "
        f"`{spark['join_strategy']}` in the measured runs without being asked. The points are never shuffled; "
        "the work is independent per part and grows linearly with the number of points.",
        "",
        (
            f"**Time.** MapSmith's `spatial_join` on Spark ran at {mapsmith_rate:,.0f} points per core-second at "
            f"{n_max:,} points (its validity checks, counts and row order included; the bare join ran at "
            f"{raw_rate:,.0f}). At that rate the join costs about {core_seconds / 3600:,.1f} core-hours "
            f"({TARGET_POINTS / raw_rate / 3600:,.1f} for the bare join). "
            if mapsmith_rate
            else f"**Time.** At the measured {raw_rate:,.0f} points per core-second (the bare join; MapSmith's own "
            f"Spark run was not measured at this size), the join costs about {core_seconds / 3600:,.1f} core-hours. "
        )
        + f"Spread over a cluster, with the session start measured here ({spark['setup_seconds']:,.0f} s, paid "
        "once) on top:",
        "",
        "| cluster cores | join time | vCPU-hours | cost at the assumed price |",
        "|---:|---:|---:|---:|",
    ]
    for c in CLUSTER_CORES:
        seconds = core_seconds / c + spark["setup_seconds"]
        vcpu_hours = seconds * c / 3600
        lines.append(f"| {c} | {_duration(seconds)} | {vcpu_hours:,.1f} | ${vcpu_hours * PRICE_PER_VCPU_HOUR:,.2f} |")
    lines += [
        "",
        f"The price, ${PRICE_PER_VCPU_HOUR:.2f} per vCPU-hour, is an assumption (an on-demand list price of that "
        "order), not a measurement: multiply the vCPU-hours by your own. Storage reads and the cluster's own start "
        "are not in these figures.",
        "",
        f"**Memory.** The JVM peaked at {_gib(spark['jvm_peak_mib'])} GiB for {n_max:,} points on {cores} cores "
        f"(a {spark['driver_memory']} heap allowed), about {_gib(per_core_mib)} GiB per core with the broadcast "
        "index included. A task holds one part and the broadcast polygons, not the whole input, so an executor's "
        "memory depends on its cores and the part size, not on the billion: size executors from the per-core "
        "figure above, with headroom for skewed parts.",
        "",
        f"**Output.** The measured output was {spark['output_bytes_per_point']:.1f} bytes per input point "
        f"({spark['pairs_per_point']:.3f} matched pairs per point, each with its point geometry and both sides' "
        f"attributes), about {output_bytes / 1e9:,.0f} GB for a billion points, written as parts by the tasks in "
        "parallel.",
        "",
        "## Provenance for partitioned GeoParquet",
        "",
        "A manifest names every input by the SHA-256 of its bytes. A partitioned dataset is many files, and the "
        "manifest specification (section 3.3) already says how a dataset made of several files is digested: the "
        "SHA-256 of the sorted listing `<name>\\0<sha256 of that file>\\n`, one line per member. Applied to a "
        "partitioned GeoParquet folder, the members are its part files listed under their paths relative to the "
        "folder; the `_SUCCESS` marker and checksum files Spark writes beside them are not members. The spec "
        "defines this listing for shapefiles and file geodatabases; for GeoParquet folders it is MapSmith's "
        "reading of the same rule, and the manifest says so (`x-mapsmith:digest_rule`: `parquet-parts-listing`).",
        "",
        f"Hashing is the cost: one core hashed {f['sha256_mb_per_second']:,.0f} MB/s here, so digesting the "
        f"{input_bytes / 1e9:,.0f} GB of input costs about {digest_core_seconds / 60:,.1f} core-minutes "
        f"({_duration(digest_core_seconds / CLUSTER_CORES[0])} on {CLUSTER_CORES[0]} cores when each task hashes "
        "its own part and the driver combines the per-part digests into the listing). Where the object store "
        "keeps a full-object SHA-256 of each part, those can be listed instead of re-reading the bytes, provided "
        "the store computed them over the whole object.",
        "",
        "## What runs today, and what the arithmetic leaves out",
        "",
        "- MapSmith's Spark engine runs `spatial_join`, `nearest_join`, `count_in_polygons`, "
        "`summarize_points_in_polygons`, `dissolve_layer` and `overlay_layers` with `MAPSMITH_STACK=sedona` and "
        "`MAPSMITH_SPARK_MASTER` set to a cluster's master (`MAPSMITH_SPARK_DRIVER_MEMORY` sizes the driver). "
        "CI's spark session runs them on a Spark standalone cluster on one machine (a master and two 1-core "
        "workers, `tests/spark_cluster.py`), and the manifest names the cluster (`x-mapsmith:spark_cluster`). "
        "The engine reads a folder of GeoParquet parts and writes one (`mapsmith.parts`: the folder digest "
        "above, recorded as `x-mapsmith:digest_rule`): through MapSmith's runner an `output_path` ending in "
        "`.parquet/` routes the run to an engine registered as writing parts (these six on Spark, DuckDB's below "
        "on the open-source stack) and is refused, before any input is read, on a stack with none. The per-part "
        "digests are computed by the driver after the write, not in the executors.",
        "- On the open-source stack a folder of parts is read part by part, in listing order, by DuckDB for "
        "`count_in_polygons` and `summarize_points_in_polygons` (`points_path`) and for `select_features`, "
        "`clip_layer`, `reproject_layer` and `buffer_layer` (`input_path`) and `spatial_join` (either input), and by "
        "SedonaDB for the two points-in-polygons operations (`tests/parts/test_layers_parts.py`, "
        "`test_hive_layers.py`, `test_points_parts.py`). A hive-partitioned folder's keys (`key=value/` subfolders) "
        "are fields after the parts' own, in path order, typed as pyarrow infers them and GeoPandas reads them "
        "(`int32` when every value is a 32-bit integer, else text: `parts.hive_key_types`); DuckDB is told those "
        "types, so its rows and fields are GeoPandas'. An integer key with a null subfolder goes to GeoPandas (pandas "
        "reads it as floats), as does a value field that is a key of `points_path` for the counts; a key that is "
        "also a field of the parts is refused (`PARTS_KEY_IS_FIELD`), as is a key with no value but nulls "
        "(`PARTS_KEYS_UNTYPED`). SedonaDB's file-to-file join reads one file (a folder takes its WKB path); the "
        "manifest's `x-mapsmith:engine_choice` and notes say why. `run_sql`, the same four layer engines and "
        "DuckDB's `spatial_join` write an `output_path` ending in `.parquet/` as parts of about 256 MiB, in row "
        "order (part-00000, part-00001 ...: the layer engines with one writing thread, `spatial_join` as one COPY "
        "per range of its sorted rows), whatever the input's size; where DuckDB cannot take the input, the request "
        "is refused (`OUTPUT_PARTS_UNSUPPORTED`) with the engines that would write one file.",
        "- Local mode reads from a local disk; a cluster reads from object storage, whose throughput per "
        "executor can be lower than a local disk's, and then sets the pace.",
        "- The measured machine was shared with other work (the load averages are in `docs/benchmarks.md`), so "
        "the rates are lower bounds for quiet cores.",
        "- Skew: points crowded into a few polygons make some tasks slower; the broadcast join's work per task "
        "still depends only on the points in its part.",
        "",
        f"Source: `{r['command']}`, measured {r['measured_at']}, commit {r['code']['commit']}.",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what render() gives")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text("utf-8") != text:
            print(f"{PAGE} is out of date: run python benchmarks/scaling_report.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, "utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
