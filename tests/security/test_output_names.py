"""An output name long enough to be legal, but too long for the names MapSmith writes beside it.

GDAL and the file system accept a 240-byte file name; the temporary file (".<stem>.tmp-<8 hex><suffix>",
14 bytes longer) and the failure record ("<name>.failed.provenance.json", 23 longer) would not fit in
255 bytes, and the run would end in an OSError after the engine ran. It is refused before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shapely.geometry import Point

from layers import write_layer
from mapsmith.errors import MapSmithError


@pytest.mark.parametrize(("stem_bytes", "refused"), [(218, False), (219, True), (245, True)])
def test_output_names_leave_room_for_the_files_beside_them(
    app, workspace: Path, stem_bytes: int, refused: bool
) -> None:
    write_layer(workspace / "pts.gpkg", [Point(500_000, 5_000_000)], "EPSG:32610", id=[1])
    name = "n" * stem_bytes + ".gpkg"  # 5 bytes of suffix: 223 bytes in all is the longest accepted
    arguments = {"input_path": "pts.gpkg", "distance_meters": 10, "output_path": name}
    before = sorted(p.name for p in workspace.iterdir())
    if not refused:
        app.run("buffer_layer", arguments)
        assert (workspace / name).is_file() and (workspace / (name + ".provenance.json")).is_file()
        return
    with pytest.raises(MapSmithError) as caught:
        app.run("buffer_layer", arguments)
    assert caught.value.code == "PATH_TOO_LONG"
    assert caught.value.evidence["name_bytes"] == stem_bytes + 5 and caught.value.evidence["limit"] == 223
    assert sorted(p.name for p in workspace.iterdir()) == before
