"""KML and KMZ in: folders are layers, the CRS is WGS 84 by definition, external references refused.

Every expected coordinate, name and count below is read off the document text written in the test;
the refusals each have a clean twin (the same document without the reference) that is answered.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from layers import manifest
from mapsmith import containers
from mapsmith.errors import InputError, MapSmithError

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n<kml xmlns="http://www.opengis.net/kml/2.2">\n'
WELLS = (
    "<Folder><name>wells</name>"
    "<Placemark><name>W1</name><Point><coordinates>10.5,46.25</coordinates></Point></Placemark>"
    "<Placemark><name>W2</name><Point><coordinates>11,47</coordinates></Point></Placemark>"
    "</Folder>"
)
PARCELS = (
    "<Folder><name>parcels</name><Placemark><name>P1</name><Polygon><outerBoundaryIs><LinearRing>"
    "<coordinates>0,0 1,0 1,1 0,1 0,0</coordinates></LinearRing></outerBoundaryIs></Polygon></Placemark>"
    "</Folder>"
)


def kml(*body: str) -> str:
    return HEAD + "<Document><name>sites</name>" + "".join(body) + "</Document></kml>\n"


def test_a_kml_with_two_folders_is_two_layers_in_wgs84(app, workspace: Path) -> None:
    (workspace / "sites.kml").write_text(kml(WELLS, PARCELS), "utf-8")
    described = app.run("describe_dataset", {"input_path": "sites.kml"}).answer
    assert described["layers"] == ["wells", "parcels"]
    by_layer = {d["layer"]: d for d in described["described"]}
    # wells: the two points (10.5, 46.25) and (11, 47); parcels: the unit square at (0, 0).
    assert by_layer["wells"]["feature_count"] == 2
    assert by_layer["wells"]["bounds"] == [10.5, 46.25, 11.0, 47.0]
    assert by_layer["wells"]["crs"] == "EPSG:4326"
    assert by_layer["wells"]["driver"] == "LIBKML"
    assert by_layer["parcels"]["feature_count"] == 1
    assert by_layer["parcels"]["bounds"] == [0.0, 0.0, 1.0, 1.0]
    names = next(f for f in by_layer["wells"]["field_details"] if f["name"] == "Name")
    assert names["samples"] == ["W1", "W2"] and names["null_count"] == 0

    app.run("convert_format", {"input_path": "sites.kml", "layer": "wells", "output_path": "wells.geojson"})
    written = json.loads((workspace / "wells.geojson").read_text("utf-8"))
    assert [(f["properties"]["Name"], f["geometry"]["coordinates"]) for f in written["features"]] == [
        ("W1", [10.5, 46.25]),
        ("W2", [11.0, 47.0]),
    ]
    record = manifest(workspace / "wells.geojson")
    assert record["parameters"].get("layer", "wells") == "wells"


def test_a_multi_folder_kml_without_a_layer_is_refused_not_guessed(app, workspace: Path) -> None:
    (workspace / "sites.kml").write_text(kml(WELLS, PARCELS), "utf-8")
    with pytest.raises(MapSmithError) as err:
        app.run("convert_format", {"input_path": "sites.kml", "output_path": "x.geojson"})
    assert "wells" in json.dumps(err.value.evidence) and "parcels" in json.dumps(err.value.evidence)
    assert not (workspace / "x.geojson").exists()


def test_a_kmz_is_read_through_its_doc_kml(app, workspace: Path) -> None:
    with zipfile.ZipFile(workspace / "sites.kmz", "w", zipfile.ZIP_DEFLATED) as kmz:
        kmz.writestr("doc.kml", kml(WELLS))
        kmz.writestr("files/readme.txt", "not KML")
    described = app.run("describe_dataset", {"input_path": "sites.kmz"}).answer
    assert described["layers"] == ["wells"]
    assert described["described"][0]["feature_count"] == 2
    assert described["described"][0]["bounds"] == [10.5, 46.25, 11.0, 47.0]
    app.run("convert_format", {"input_path": "sites.kmz", "output_path": "wells.gpkg"})
    assert manifest(workspace / "wells.gpkg")["operation"] == "convert_format"


NETWORK_LINK = "<NetworkLink><name>more</name><Link><href>http://127.0.0.1:9/more.kml</href></Link></NetworkLink>"
OVERLAY = (
    "<GroundOverlay><name>scan</name><Icon><href>../../etc/scan.png</href></Icon>"
    "<LatLonBox><north>1</north><south>0</south><east>1</east><west>0</west></LatLonBox></GroundOverlay>"
)


@pytest.mark.parametrize(
    ("extra", "reference", "element"),
    [
        (NETWORK_LINK, "http://127.0.0.1:9/more.kml", "kml/document/networklink/link/href"),
        (OVERLAY, "../../etc/scan.png", "kml/document/groundoverlay/icon/href"),
        (
            "<Placemark><styleUrl>other.kml#red</styleUrl><Point><coordinates>1,1</coordinates></Point></Placemark>",
            "other.kml#red",
            "kml/document/placemark/styleurl",
        ),
    ],
)
def test_external_references_are_refused_and_the_clean_twin_is_read(
    app, workspace: Path, extra: str, reference: str, element: str
) -> None:
    (workspace / "linked.kml").write_text(kml(WELLS, extra), "utf-8")
    with pytest.raises(InputError) as err:
        app.run("describe_dataset", {"input_path": "linked.kml"})
    assert err.value.code == "KML_EXTERNAL_REFERENCE"
    assert {"element": element, "reference": reference} in err.value.evidence["references"]
    # the same document without the reference
    (workspace / "clean.kml").write_text(kml(WELLS), "utf-8")
    assert app.run("describe_dataset", {"input_path": "clean.kml"}).answer["described"][0]["feature_count"] == 2


def test_a_local_style_reference_is_not_external(app, workspace: Path) -> None:
    body = (
        '<Style id="red"><LineStyle><color>ff0000ff</color></LineStyle></Style>'
        "<Placemark><name>A</name><styleUrl>#red</styleUrl><Point><coordinates>3,4</coordinates></Point></Placemark>"
    )
    (workspace / "styled.kml").write_text(kml(body), "utf-8")
    described = app.run("describe_dataset", {"input_path": "styled.kml"}).answer["described"][0]
    assert described["bounds"] == [3.0, 4.0, 3.0, 4.0]


def test_a_doctype_is_refused_before_any_entity_is_expanded(app, workspace: Path) -> None:
    laughs = '<!DOCTYPE kml [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
    text = kml(WELLS).replace("<kml ", laughs + "<kml ", 1).replace("<name>W1</name>", "<name>&b;</name>")
    (workspace / "laughs.kml").write_text(text, "utf-8")
    with pytest.raises(InputError) as err:
        app.run("describe_dataset", {"input_path": "laughs.kml"})
    assert err.value.code == "KML_DOCTYPE_REFUSED"


def test_a_kml_hiding_a_vrt_is_refused(app, workspace: Path) -> None:
    text = kml(WELLS).replace("<name>W1</name>", "<name>W1</name><description>&lt;OGRVRTDataSource&gt;</description>")
    # escaped in the XML, so KML readers see text; GDAL's VRT driver sniffs the raw bytes
    text = text.replace("&lt;OGRVRTDataSource&gt;", "<![CDATA[<OGRVRTDataSource>]]>")
    (workspace / "vrt.kml").write_text(text, "utf-8")
    with pytest.raises(InputError) as err:
        app.run("describe_dataset", {"input_path": "vrt.kml"})
    assert err.value.code == "KML_FOREIGN_CONTENT"


def test_a_kml_whose_root_is_not_kml_is_refused() -> None:
    with pytest.raises(InputError) as err:
        containers.check_kml_bytes(b"<rss><a/></rss>", name="x.kml")
    assert err.value.code == "KML_UNREADABLE" and err.value.evidence["root_element"] == "rss"


def test_a_kmz_whose_doc_kml_links_out_is_refused(app, workspace: Path) -> None:
    with zipfile.ZipFile(workspace / "linked.kmz", "w") as kmz:
        kmz.writestr("doc.kml", kml(WELLS, NETWORK_LINK))
    with pytest.raises(InputError) as err:
        app.run("describe_dataset", {"input_path": "linked.kmz"})
    assert err.value.code == "KML_EXTERNAL_REFERENCE"
    assert err.value.evidence["path"] == "linked.kmz/doc.kml"


def test_nested_and_same_named_folders_each_keep_their_own_placemarks(app, workspace: Path) -> None:
    # Folder x holds A; a second folder x holds B and a folder "inner" holding C. LIBKML names the
    # second x "x (#2)" and makes the nested folder a layer of its own: every placemark in one layer.
    body = (
        "<Folder><name>x</name><Placemark><name>A</name><Point><coordinates>1,2</coordinates></Point></Placemark>"
        "</Folder><Folder><name>x</name>"
        "<Placemark><name>B</name><Point><coordinates>3,4</coordinates></Point></Placemark>"
        "<Folder><name>inner</name><Placemark><name>C</name><Point><coordinates>5,6</coordinates></Point>"
        "</Placemark></Folder></Folder>"
    )
    (workspace / "nested.kml").write_text(kml(body), "utf-8")
    answer = app.run("describe_dataset", {"input_path": "nested.kml"}).answer
    assert answer["layers"] == ["x", "x (#2)", "inner"]
    found = {
        d["layer"]: (next(f for f in d["field_details"] if f["name"] == "Name")["samples"], d["bounds"])
        for d in answer["described"]
    }
    assert found == {
        "x": (["A"], [1.0, 2.0, 1.0, 2.0]),
        "x (#2)": (["B"], [3.0, 4.0, 3.0, 4.0]),
        "inner": (["C"], [5.0, 6.0, 5.0, 6.0]),
    }
