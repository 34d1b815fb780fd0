"""No operation writes into ``<workspace>/.mapsmith``, where MapSmith keeps its promotions file and the stored
sources of proposed operations: replacing ``promotions.json`` with a table would stop the next start of the
server (a malformed promotions file is refused, never guessed), and a file beside a proposal's source must not
be mistaken for part of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shapely.geometry import box

from layers import manifest, write_layer


def test_an_output_under_the_internal_folder_is_refused_and_elsewhere_written(app: Any, workspace: Path) -> None:
    from mapsmith.errors import MapSmithError

    write_layer(workspace / "square.gpkg", [box(0, 0, 100, 100)], 32610)
    (workspace / ".mapsmith").mkdir()
    promotions = workspace / ".mapsmith" / "promotions.json"
    promotions.write_text('{"promotions": []}', encoding="utf-8")
    before = promotions.read_bytes()

    for target in (".mapsmith/promotions.json", ".mapsmith/area.gpkg", "sub/../.mapsmith/area.gpkg"):
        arguments = {"input_path": "square.gpkg", "output_path": target, "overwrite": True}
        with pytest.raises(MapSmithError) as refused:
            app.run("measure_area", arguments)
        # refused before any other check of the path (a .json output would otherwise be a format refusal)
        assert refused.value.code == "OUTPUT_IN_INTERNAL_FOLDER"
        assert refused.value.evidence == {"path": target, "folder": ".mapsmith"}
    assert promotions.read_bytes() == before
    assert sorted(p.name for p in (workspace / ".mapsmith").iterdir()) == ["promotions.json"]

    # The clean twin: the same request with the output anywhere else is answered.
    result = app.run("measure_area", {"input_path": "square.gpkg", "output_path": "area.gpkg"})
    assert result.status == "ok"
    assert manifest(workspace / "area.gpkg")["operation"] == "measure_area"
    assert (workspace / "area.gpkg").is_file() and not (workspace / ".mapsmith" / "area.gpkg").exists()
