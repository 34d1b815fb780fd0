"""The esri stack without ArcGIS: detection from fake registry data, outcomes, and the real worker
protocol against a simulated Pro Python (tests/stacks/fake_arcgis_pro: the real worker.py, a fake arcpy).

Expected numbers are worked out by hand in the comments beside them.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

import mapsmith_esri
from mapsmith.errors import EngineError, MapSmithError, OperationUnavailable
from mapsmith_esri import mapping, run

FAKE_PRO = Path(__file__).with_name("fake_arcgis_pro")
X0, Y0 = 500000.0, 5000000.0


def fake_registry(values: dict[str, dict[str, str]]) -> Any:
    """A stand-in for mapsmith_esri.read_registry_values: {"HKLM\\<key>": {name: value}}."""

    def read(hive: str, subkey: str, names: tuple[str, ...]) -> tuple[dict[str, str], str | None]:
        found = values.get(f"{hive}\\{subkey}")
        if found is None:
            return {}, f"registry key {hive}\\{subkey} does not exist"
        return {k: v for k, v in found.items() if k in names}, None

    return read


LICENSING = "HKLM\\" + mapsmith_esri.LICENSING_KEY


@pytest.fixture
def simulated_pro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A launcher that runs the given script with this Python and the fake arcpy on its path."""
    launcher = tmp_path / "pro" / "propy"
    launcher.parent.mkdir()
    launcher.write_text(f'#!/bin/sh\nPYTHONPATH="{FAKE_PRO}" exec "{sys.executable}" "$@"\n', "utf-8")
    launcher.chmod(0o755)
    monkeypatch.setenv(mapsmith_esri.ENV_VAR, str(launcher))
    monkeypatch.delenv("MAPSMITH_FAKE_ARCPY", raising=False)
    monkeypatch.setattr(mapsmith_esri, "read_registry_values", fake_registry({}))
    return launcher


def squares(folder: Path, name: str = "squares.gpkg") -> Path:
    import geopandas as gpd
    from shapely.geometry import box

    path = folder / name
    gpd.GeoDataFrame(
        {"name": ["a", "a", "b"]},
        geometry=[
            box(X0, Y0, X0 + 100, Y0 + 100),
            box(X0 + 100, Y0, X0 + 200, Y0 + 100),
            box(X0 + 400, Y0, X0 + 500, Y0 + 100),
        ],
        crs="EPSG:32633",
    ).to_file(path)
    return path


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "level", "kind"),
    [
        ({"AUTHORIZATION_TYPE": "SINGLE_USE", "SOFTWARE_CLASS": "Professional"}, "Advanced", "SINGLE_USE"),
        ({"AUTHORIZATION_TYPE": "CONCURRENT_USE", "SOFTWARE_CLASS": "Editor"}, "Standard", "CONCURRENT_USE"),
        ({"AUTHORIZATION_TYPE": "SINGLE_USE", "SOFTWARE_CLASS": "Viewer"}, "Basic", "SINGLE_USE"),
        (
            {"AUTHORIZATION_TYPE": "NAMED_USER"},
            "not recorded locally (named user: decided by the portal at sign-in)",
            "NAMED_USER",
        ),
        ({"AUTHORIZATION_TYPE": "SINGLE_USE"}, "not recorded locally", "SINGLE_USE"),
        (
            {"AUTHORIZATION_TYPE": "SINGLE_USE", "SOFTWARE_CLASS": "Gold"},
            "not recorded locally (unknown SOFTWARE_CLASS 'Gold')",
            "SINGLE_USE",
        ),
    ],
)
def test_licence_is_read_from_fake_registry_data(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, str], level: str, kind: str
) -> None:
    monkeypatch.setattr(mapsmith_esri, "read_registry_values", fake_registry({LICENSING: values}))

    found = mapsmith_esri.licensing()

    assert found["licence_level"] == level
    assert found["authorization_type"] == kind
    assert found["licence_source"] == "registry HKLM\\SOFTWARE\\ESRI\\ArcGISPro\\Licensing"
    assert found["extensions"].startswith("not recorded locally")
    assert mapsmith_esri.licence_level() == (level if level in ("Basic", "Standard", "Advanced") else None)


def test_licence_server_and_per_user_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    per_user = {"AUTHORIZATION_TYPE": "CONCURRENT_USE", "SOFTWARE_CLASS": "Viewer", "LICENSE_SERVER": "lm01"}
    monkeypatch.setattr(
        mapsmith_esri,
        "read_registry_values",
        fake_registry({"HKCU\\" + mapsmith_esri.LICENSING_KEY: per_user}),
    )

    found = mapsmith_esri.licensing()

    assert (found["licence_level"], found["licence_server"]) == ("Basic", "lm01")
    assert found["licence_source"] == "registry HKCU\\SOFTWARE\\ESRI\\ArcGISPro\\Licensing"


def test_no_licensing_key_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapsmith_esri, "read_registry_values", fake_registry({}))

    found = mapsmith_esri.licensing()

    assert found["licence_level"] == found["authorization_type"] == "not read (unknown)"
    assert mapsmith_esri.licence_level() is None


def test_detection_on_windows_reports_version_and_licence_in_details(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / mapsmith_esri.PRO_PYTHON
    python.parent.mkdir(parents=True)
    python.write_bytes(b"MZ")
    registry = {
        "HKLM\\" + mapsmith_esri.REGISTRY_KEY: {
            "InstallDir": str(tmp_path),
            "Version": "3.3.1",
            "RealVersion": "13.3.1",
        },
        LICENSING: {"AUTHORIZATION_TYPE": "SINGLE_USE", "SOFTWARE_CLASS": "Editor"},
    }
    monkeypatch.delenv(mapsmith_esri.ENV_VAR, raising=False)
    monkeypatch.setattr(mapsmith_esri, "on_windows", lambda: True)
    monkeypatch.setattr(mapsmith_esri, "read_registry_values", fake_registry(registry))

    details = mapsmith_esri.availability().details

    assert details["python"] == str(python)
    assert (details["pro_version"], details["licence_level"], details["authorization_type"]) == (
        "3.3.1",
        "Standard",
        "SINGLE_USE",
    )


# -- this machine, no Pro ------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="Pro may really be installed on Windows")
def test_esri_stack_without_pro_starts_and_answers_every_operation(
    make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(mapsmith_esri.ENV_VAR, raising=False)
    app = make_app(MAPSMITH_STACK="esri")

    esri = next(s for s in app.server_info()["stacks"] if s["name"] == "esri")
    assert not esri["available"] and esri["selected"]
    assert esri["reason"] == mapsmith_esri.NOT_WINDOWS_REASON
    outcomes: dict[str, str] = {}
    for name in sorted(app.host.contracts):
        try:
            app.router.candidates(name)
        except MapSmithError as exc:
            outcomes[name] = exc.code
        else:
            outcomes[name] = "runs"
    for name, code in outcomes.items():  # the stack itself is the first reason, for every operation
        planned = app.host.contracts[name].status != "available"
        assert code == ("OPERATION_PLANNED" if planned else "STACK_UNAVAILABLE"), name
    with pytest.raises(OperationUnavailable) as caught:
        app.run("buffer_layer", {"input_path": "x.gpkg", "distance_meters": 1, "output_path": "y.gpkg"})
    assert caught.value.code == "STACK_UNAVAILABLE"
    assert "runs on Windows only" in caught.value.message and caught.value.hint == mapsmith_esri.FIX


def test_with_pro_every_operation_runs_or_is_missing(simulated_pro: Path, make_app: Any) -> None:
    app = make_app(MAPSMITH_STACK="esri")
    mapped = {m.operation for m in mapping.MAPPINGS}

    for name, contract in sorted(app.host.contracts.items()):
        if contract.status != "available":
            continue
        if name in mapped:
            assert app.router.candidates(name).stack == "esri"
            continue
        with pytest.raises(OperationUnavailable) as caught:
            app.router.candidates(name)
        assert caught.value.code == "OPERATION_MISSING", name
        assert "MAPSMITH_FALLBACK_STACK=opensource" in caught.value.hint


# -- the simulated Pro: success, hand-checked --------------------------------------------------


def test_buffer_through_the_worker_hand_checked_with_a_valid_manifest(
    simulated_pro: Path, workspace: Path, make_app: Any
) -> None:
    squares(workspace)
    seen: list[tuple[float, str]] = []
    app = make_app(MAPSMITH_STACK="esri")

    result = app.run(
        "buffer_layer",
        {"input_path": "squares.gpkg", "distance_meters": 10, "output_path": "buffered.gpkg"},
        progress=lambda f, m: seen.append((f, m)),
    )

    import geopandas as gpd

    out = gpd.read_file(workspace / "buffered.gpkg")
    # 100 m square + 10 m: 100*100 + 4*(100*10) + pi*10^2 = 14314.159 m2; the fake densifies each quarter
    # circle with 90 segments: 0.5*360*100*sin(2*pi/360) = 314.143 instead of 314.159.
    assert list(out.geometry.area.round(2)) == [14314.14] * 3
    assert abs(float(out.geometry.area.iloc[0]) - (10000 + 4000 + math.pi * 100)) < 0.05
    assert list(out.columns) == ["name", "geometry"]  # BUFF_DIST and ORIG_FID dropped
    manifest = json.loads((workspace / "buffered.gpkg.provenance.json").read_text("utf-8"))
    assert manifest["engine"]["name"] == "arcgis-pro" and manifest["engine"]["version"] == "3.3.1"
    assert manifest["engine"]["x-mapsmith:components"]["tool"] == "analysis.Buffer"
    step = manifest["parameters"]["x-mapsmith:esri_steps"][0]
    assert step["tool"] == "analysis.Buffer"
    assert step["parameters"]["in_features"] == "squares.gpkg"
    assert step["parameters"]["buffer_distance_or_field"] == "10.0 Meters"
    assert step["parameters"]["method"] == "PLANAR"  # EPSG:32633 at its central meridian: scale 0.9996
    assert manifest["parameters"]["x-mapsmith:esri_fields_dropped"] == ["BUFF_DIST", "ORIG_FID"]
    assert result.engine["stack"] == "esri"
    assert seen[0] == (0.02, "importing arcpy") and seen[-1] == (1.0, "done")
    assert (0.1, "running analysis.Buffer") in seen


def test_geodesic_area_through_two_tools(simulated_pro: Path, workspace: Path, make_app: Any) -> None:
    squares(workspace)

    result = make_app(MAPSMITH_STACK="esri").run(
        "measure_area", {"input_path": "squares.gpkg", "output_path": "a.gpkg"}
    )

    # A 100 m UTM square at the central meridian has ground sides 100/0.9996: 10000/0.9996^2 = 10008.005 m2 each.
    assert result.answer["total_area_m2"] == pytest.approx(3 * 10008.005, abs=0.05)
    manifest = json.loads((workspace / "a.gpkg.provenance.json").read_text("utf-8"))
    tools = [s["tool"] for s in manifest["parameters"]["x-mapsmith:esri_steps"]]
    assert tools == ["management.CopyFeatures", "management.CalculateGeometryAttributes"]
    assert manifest["parameters"]["x-mapsmith:esri_steps"][1]["parameters"]["geometry_property"] == [
        ["area_m2", "AREA_GEODESIC"]
    ]


def test_dissolve_and_spatial_join(simulated_pro: Path, workspace: Path, make_app: Any) -> None:
    import geopandas as gpd
    from shapely.geometry import box

    squares(workspace)
    gpd.GeoDataFrame(
        {"name": ["zone"]}, geometry=[box(X0 + 50, Y0 - 50, X0 + 250, Y0 + 150)], crs="EPSG:32633"
    ).to_file(workspace / "zone.gpkg")
    app = make_app(MAPSMITH_STACK="esri")

    app.run("dissolve_layer", {"input_path": "squares.gpkg", "by_fields": "name", "output_path": "d.gpkg"})
    app.run(
        "spatial_join",
        {"input_path": "squares.gpkg", "join_path": "zone.gpkg", "how": "inner", "output_path": "j.gpkg"},
    )

    dissolved = gpd.read_file(workspace / "d.gpkg").sort_values("name")
    assert list(dissolved["name"]) == ["a", "b"]
    assert list(dissolved.geometry.area.round(6)) == [20000.0, 10000.0]  # two touching squares, one alone
    joined = gpd.read_file(workspace / "j.gpkg")
    # the zone covers x 50..250: it meets the first two squares, not the third (x 400..500)
    assert len(joined) == 2 and list(joined.columns) == ["name", "name_join", "geometry"]
    assert set(joined["name_join"]) == {"zone"}


def test_non_ascii_workspace_round_trip(simulated_pro: Path, workspace: Path, make_app: Any) -> None:
    folder = workspace / "Zürich_数据"
    folder.mkdir()
    squares(folder, "Flächen.gpkg")

    make_app(MAPSMITH_STACK="esri").run(
        "clip_layer",
        {
            "input_path": "Zürich_数据/Flächen.gpkg",
            "mask_path": "Zürich_数据/Flächen.gpkg",
            "output_path": "Zürich_数据/geschnitten.gpkg",
        },
    )

    import geopandas as gpd

    assert len(gpd.read_file(folder / "geschnitten.gpkg")) == 3
    manifest = json.loads((folder / "geschnitten.gpkg.provenance.json").read_text("utf-8"))
    parameters = manifest["parameters"]["x-mapsmith:esri_steps"][0]["parameters"]
    assert parameters["in_features"] == parameters["clip_features"] == "Zürich_数据/Flächen.gpkg"


# -- outcomes ------------------------------------------------------------------------------------


def _request(folder: Path, tool: str, parameters: dict[str, Any], level: str = "Basic") -> dict[str, Any]:
    return {
        "operation": "test",
        "scratch": str(folder),
        "datasets": {"input_path": {"path": str(folder / "missing.gpkg"), "layer": "missing"}},
        "requires": {"level": level, "extensions": []},
        "steps": [{"tool": tool, "parameters": parameters}],
        "output": "out",
    }


def _worker(simulated_pro: Path, tmp_path: Path, request: dict[str, Any]) -> dict[str, Any]:
    folder = tmp_path / "w"
    folder.mkdir(exist_ok=True)
    request["scratch"] = str(folder)
    result, _ = run.run_worker(str(simulated_pro), request, folder, timeout=60)
    return result


def test_gp_error_returns_the_whole_message_queue_mapped_to_a_code(simulated_pro: Path, tmp_path: Path) -> None:
    request = _request(
        tmp_path,
        "analysis.Buffer",
        {
            "in_features": {"$dataset": "input_path"},
            "out_feature_class": {"$scratch": "out"},
            "buffer_distance_or_field": "5 Meters",
        },
    )
    result = _worker(simulated_pro, tmp_path, request)

    with pytest.raises(EngineError) as caught:
        run.raise_for_outcome(result, "buffer_layer", "analysis.Buffer")
    err = caught.value
    assert err.code == "ESRI_INPUT_NOT_FOUND"
    texts = [m["text"] for m in err.evidence["messages"]]
    missing = str(tmp_path / "missing.gpkg" / "main.missing")
    assert f"ERROR 000732: Input Features: Dataset {missing} does not exist or is not supported" in texts
    assert texts[-1] == "Failed to execute (Buffer)." and texts[0].startswith("Start Time:")
    assert err.evidence["gp_codes"] == ["000732"]
    assert "ERROR 000732" in err.message  # the message carries ArcPy's words, not only the code


def test_value_not_in_list_is_mapped(simulated_pro: Path, tmp_path: Path) -> None:
    squares(tmp_path)
    request = _request(
        tmp_path,
        "analysis.Buffer",
        {
            "in_features": {"$dataset": "input_path"},
            "out_feature_class": {"$scratch": "out"},
            "buffer_distance_or_field": "5 Meters",
            "method": "ROUND",
        },
    )
    request["datasets"]["input_path"] = {"path": str(tmp_path / "squares.gpkg"), "layer": "squares"}

    with pytest.raises(EngineError) as caught:
        run.raise_for_outcome(_worker(simulated_pro, tmp_path, request), "buffer_layer", "analysis.Buffer")

    assert caught.value.code == "ESRI_VALUE_NOT_IN_LIST"
    assert "ERROR 000800: The value is not a member of PLANAR | GEODESIC." in caught.value.message


def test_field_not_found_through_the_runner_leaves_a_failure_record(
    simulated_pro: Path, workspace: Path, make_app: Any
) -> None:
    squares(workspace)

    with pytest.raises(EngineError) as caught:
        make_app(MAPSMITH_STACK="esri").run(
            "dissolve_layer", {"input_path": "squares.gpkg", "by_fields": "nosuch", "output_path": "d.gpkg"}
        )

    assert caught.value.code == "ESRI_FIELD_NOT_FOUND"
    assert "ERROR 000728: Field nosuch does not exist within table" in caught.value.message
    assert not (workspace / "d.gpkg").exists()
    assert list(workspace.glob("d.gpkg.failed*.provenance.json"))


def test_licence_tier_decided_before_running(
    simulated_pro: Path, workspace: Path, make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    squares(workspace)
    monkeypatch.setattr(
        mapsmith_esri,
        "read_registry_values",
        fake_registry({LICENSING: {"AUTHORIZATION_TYPE": "SINGLE_USE", "SOFTWARE_CLASS": "Viewer"}}),
    )
    monkeypatch.setenv("MAPSMITH_FAKE_ARCPY", "crash")  # had a process started, the code would be ESRI_WORKER_CRASHED

    with pytest.raises(OperationUnavailable) as caught:
        make_app(MAPSMITH_STACK="esri").run("point_on_surface", {"input_path": "squares.gpkg", "output_path": "p.gpkg"})

    assert caught.value.code == "LICENCE_TIER"
    assert caught.value.evidence["outcome"] == "licence_tier"
    assert "needs an ArcGIS Pro Advanced licence; this machine's licence is Basic" in caught.value.message
    assert "MAPSMITH_FALLBACK_STACK=opensource" in caught.value.hint
    assert not list(workspace.glob("p.gpkg*"))


def test_licence_tier_substituted_by_opensource_is_disclosed(
    simulated_pro: Path, workspace: Path, make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    squares(workspace)
    monkeypatch.setattr(
        mapsmith_esri,
        "read_registry_values",
        fake_registry({LICENSING: {"AUTHORIZATION_TYPE": "SINGLE_USE", "SOFTWARE_CLASS": "Editor"}}),
    )

    app = make_app(MAPSMITH_STACK="esri", MAPSMITH_FALLBACK_STACK="opensource")
    result = app.run("point_on_surface", {"input_path": "squares.gpkg", "output_path": "p.gpkg"})

    manifest = json.loads((workspace / "p.gpkg.provenance.json").read_text("utf-8"))
    substitution = manifest["x-mapsmith:engine_choice"]["substitution"]
    assert manifest["x-mapsmith:engine_choice"]["stack"] == "opensource"
    assert substitution["outcome"] == "licence_tier" and substitution["preferred_stack"] == "esri"
    assert "licence is Standard" in substitution["reason"]
    assert any(w["code"] == "SUBSTITUTED_ENGINE" for w in result.warnings)


def test_licence_failure_reported_by_the_worker(
    simulated_pro: Path, workspace: Path, make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    squares(workspace)
    monkeypatch.setenv("MAPSMITH_FAKE_ARCPY", "product=ArcView")  # level not recorded locally: ArcPy decides

    with pytest.raises(OperationUnavailable) as caught:
        make_app(MAPSMITH_STACK="esri").run("point_on_surface", {"input_path": "squares.gpkg", "output_path": "p.gpkg"})

    assert caught.value.code == "LICENCE_TIER"
    assert "needs ArcGIS Pro Advanced; this licence is Basic (arcpy.ProductInfo() = ArcView)" in caught.value.message


def test_tool_not_licensed_gp_error_is_licence_tier(
    simulated_pro: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAPSMITH_FAKE_ARCPY", "product=ArcView")
    request = _request(
        tmp_path,
        "management.FeatureToPoint",
        {"in_features": {"$dataset": "input_path"}, "out_feature_class": {"$scratch": "out"}},
    )

    with pytest.raises(OperationUnavailable) as caught:
        run.raise_for_outcome(
            _worker(simulated_pro, tmp_path, request), "point_on_surface", "management.FeatureToPoint"
        )

    assert caught.value.code == "LICENCE_TIER"
    assert "ERROR 000824: The tool is not licensed." in caught.value.message


def test_missing_tool_and_arcpy_refusing_to_start(
    simulated_pro: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(OperationUnavailable) as missing:
        run.raise_for_outcome(
            _worker(simulated_pro, tmp_path, _request(tmp_path, "analysis.PairwiseMagic", {})),
            "x",
            "analysis.PairwiseMagic",
        )
    monkeypatch.setenv("MAPSMITH_FAKE_ARCPY", "import_error")
    with pytest.raises(OperationUnavailable) as refused:
        run.raise_for_outcome(_worker(simulated_pro, tmp_path, _request(tmp_path, "analysis.Buffer", {})), "x", "y")

    assert missing.value.code == "OPERATION_MISSING" and "no tool analysis.PairwiseMagic" in missing.value.message
    assert refused.value.code == "LICENCE_TIER" and "Not signed into Portal." in refused.value.message


def test_online_only_and_extensions_come_from_the_table() -> None:
    online = mapping.Mapped("elevation_profile", ("x.ReadyToUse",), "Basic", lambda ctx: [], "", online=True)
    spatial = mapping.Mapped("slope", ("sa.Slope",), "Basic", lambda ctx: [], "", extensions=("Spatial",))

    assert mapping.licence_refusal(online, "Advanced", None).kind == "online_only"  # type: ignore[union-attr]
    refusal = mapping.licence_refusal(spatial, "Advanced", frozenset({"3D"}))
    assert refusal is not None and refusal.kind == "licence_tier" and "Spatial" in refusal.reason
    assert mapping.licence_refusal(spatial, None, None) is None  # unknown: ArcPy is asked at run time
    assert mapping.licence_refusal(mapping.BY_OPERATION["point_on_surface"], "Standard", None).kind == "licence_tier"  # type: ignore[union-attr]
    assert mapping.licence_refusal(mapping.BY_OPERATION["buffer_layer"], "Basic", None) is None


# -- a broken worker ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "code", "said"),
    [("crash", "ESRI_WORKER_CRASHED", "simulated crash"), ("no_result", "ESRI_WORKER_CRASHED", "")],
)
def test_a_worker_that_writes_no_result(
    simulated_pro: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, code: str, said: str
) -> None:
    monkeypatch.setenv("MAPSMITH_FAKE_ARCPY", flag)

    with pytest.raises(EngineError) as caught:
        _worker(simulated_pro, tmp_path, _request(tmp_path, "analysis.Buffer", {}))

    assert caught.value.code == code
    assert caught.value.evidence["exit_status"] == (3 if flag == "crash" else 0)
    assert said in caught.value.evidence["stderr_tail"]


def test_a_hanging_worker_is_stopped(simulated_pro: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAPSMITH_FAKE_ARCPY", "hang")
    folder = tmp_path / "w"
    folder.mkdir()

    with pytest.raises(EngineError) as caught:
        run.run_worker(str(simulated_pro), _request(folder, "analysis.Buffer", {}), folder, timeout=1.5)

    assert caught.value.code == "ESRI_WORKER_TIMEOUT" and caught.value.evidence["timeout_s"] == 1.5


def test_progress_parser_and_stray_lines(simulated_pro: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAPSMITH_FAKE_ARCPY", "chatter")
    folder = tmp_path / "w"
    folder.mkdir()

    _, stray = run.run_worker(str(simulated_pro), _request(folder, "analysis.Buffer", {}), folder, timeout=60)

    assert stray == ["Some library printed this line"]
    assert run.parse_progress("MAPSMITH-PROGRESS 0.5 half way") == (0.5, "half way")
    assert run.parse_progress("MAPSMITH-PROGRESS 7 over") == (1.0, "over")
    assert run.parse_progress("progress 0.5 x") is None and run.parse_progress("MAPSMITH-PROGRESS x y") is None


def test_inputs_arcgis_cannot_read_are_refused_before_running(
    simulated_pro: Path, workspace: Path, make_app: Any
) -> None:
    import geopandas as gpd
    from shapely.geometry import box

    gpd.GeoDataFrame(geometry=[box(15, 45, 15.01, 45.01)], crs="EPSG:4326").to_file(workspace / "a.geojson")

    with pytest.raises(MapSmithError) as caught:
        make_app(MAPSMITH_STACK="esri").run(
            "buffer_layer", {"input_path": "a.geojson", "distance_meters": 5, "output_path": "b.gpkg"}
        )

    assert caught.value.code == "NO_ELIGIBLE_ENGINE" and "convert_format" in caught.value.hint


def test_worker_source_is_ascii_and_stdlib_only() -> None:
    source = run.WORKER.read_bytes()
    source.decode("ascii")  # raises on any non-ASCII byte
    compile(source, str(run.WORKER), "exec")
    imports = {
        line.split()[1].split(".")[0] for line in source.decode().splitlines() if line.startswith(("import ", "from "))
    }
    assert imports <= {"argparse", "json", "os", "sys", "traceback"}


# -- through a real MCP client ------------------------------------------------------------------


@pytest.mark.mcp
def test_buffer_over_mcp_stdio_with_the_simulated_pro(simulated_pro: Path, workspace: Path) -> None:
    import anyio

    from conftest import published_schema_errors
    from mcp_client import call, mcp_session

    squares(workspace)

    async def converse() -> tuple[Any, Any]:
        # ArcGIS Pro runs on Windows, where there is no bubblewrap sandbox: the simulated Pro (a launcher and
        # a fake arcpy under tests/) is driven the way a Windows server drives the real one, in-process.
        async with mcp_session(
            workspace, MAPSMITH_STACK="esri", MAPSMITH_ARCGIS_PYTHON=str(simulated_pro), MAPSMITH_SANDBOX="off"
        ) as (session, _):
            info = await call(session, "server_info", {})
            ran = await call(
                session,
                "run_operation",
                {
                    "operation": "buffer_layer",
                    "arguments": {"input_path": "squares.gpkg", "distance_meters": 10, "output_path": "b.gpkg"},
                },
            )
            return info, ran

    info, ran = anyio.run(converse)
    esri = next(s for s in info.data["stacks"] if s["name"] == "esri")
    assert esri["available"] and esri["details"]["python"] == str(simulated_pro)
    assert not ran.is_error, ran.data
    manifest = json.loads((workspace / "b.gpkg.provenance.json").read_text("utf-8"))
    assert published_schema_errors(manifest) == []
    assert manifest["engine"]["name"] == "arcgis-pro" and manifest["x-mapsmith:engine_choice"]["stack"] == "esri"


def test_reproject_and_point_on_surface_through_the_worker(simulated_pro: Path, workspace: Path, make_app: Any) -> None:
    import geopandas as gpd

    squares(workspace)
    app = make_app(MAPSMITH_STACK="esri")

    app.run("reproject_layer", {"input_path": "squares.gpkg", "target_crs": "EPSG:4326", "output_path": "r.gpkg"})
    app.run("point_on_surface", {"input_path": "squares.gpkg", "output_path": "p.gpkg"})

    reprojected = gpd.read_file(workspace / "r.gpkg")
    # EPSG:32633's false easting 500000 is its central meridian, 15 E: the first square's west edge is on it
    assert reprojected.crs.to_epsg() == 4326
    assert reprojected.geometry.iloc[0].bounds[0] == pytest.approx(15.0, abs=1e-9)
    manifest = json.loads((workspace / "r.gpkg.provenance.json").read_text("utf-8"))
    assert manifest["parameters"]["x-mapsmith:esri_steps"][0]["parameters"]["out_coor_system"] == "WKID 4326"
    assert "no geographic transformation was needed" in manifest["crs_decisions"]["reason"]  # WGS 84 both sides
    assert "x-mapsmith:warnings" not in manifest
    points = gpd.read_file(workspace / "p.gpkg")
    inputs = gpd.read_file(workspace / "squares.gpkg")
    assert list(points.columns) == ["name", "geometry"]  # ORIG_FID dropped
    assert all(p.within(s) for p, s in zip(points.geometry, inputs.geometry, strict=True))
