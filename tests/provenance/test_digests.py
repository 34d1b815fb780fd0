"""Digests per spec section 3.3, each expectation computed by hand in the test.

No real shapefile or geodatabase is needed: the rule is about files and names, so the members are
arbitrary bytes and the expected listing text is spelled out line by line with ``hashlib``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mapsmith.errors import InputError
from mapsmith.provenance import digests
from mapsmith.provenance.digests import dataset_digest, dataset_files, sha256_file


def _hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _listing(*lines: tuple[str, bytes]) -> str:
    """The section 3.3 digest of the given (name, content) lines, in the order written."""
    text = b"".join(name.encode("utf-8") + b"\0" + _hex(data).encode() + b"\n" for name, data in lines)
    return _hex(text)


SHP, SHX, DBF, PRJ, CPG = b"shp-bytes", b"shx-bytes", b"dbf-bytes", b'PROJCS["x"]', b"UTF-8"


def _shapefile(folder: Path, stem: str = "roads", ext_case: str = "lower") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    contents = {".shp": SHP, ".shx": SHX, ".dbf": DBF, ".prj": PRJ, ".cpg": CPG}
    for ext, data in contents.items():
        (folder / (stem + (ext.upper() if ext_case == "upper" else ext))).write_bytes(data)
    return folder / (stem + (".SHP" if ext_case == "upper" else ".shp"))


# Sorted by the UTF-8 bytes of the listed name: .cpg < .dbf < .prj < .shp < .shx
EXPECTED_SHAPEFILE = _listing((".cpg", CPG), (".dbf", DBF), (".prj", PRJ), (".shp", SHP), (".shx", SHX))


def test_sha256_file_streams_across_chunk_boundaries(tmp_path: Path) -> None:
    data = bytes(range(256)) * (digests.CHUNK_BYTES // 256 * 2 + 3)  # two chunks and a bit
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    assert sha256_file(path) == _hex(data)


def test_a_single_file_is_digested_as_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "dem.tif"
    path.write_bytes(b"not really a tiff")
    assert dataset_digest(path) == _hex(b"not really a tiff")
    assert dataset_files(path) == [path]


def test_an_empty_file_is_the_digest_of_no_bytes(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    assert dataset_digest(path) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_shapefile_is_the_listing_of_its_members_under_their_extension(tmp_path: Path) -> None:
    shp = _shapefile(tmp_path)
    assert dataset_digest(shp) == EXPECTED_SHAPEFILE
    # the .shp alone, which is what producers recorded before draft.9, is a different digest
    assert dataset_digest(shp) != _hex(SHP)


def test_renaming_the_stem_leaves_the_digest_unchanged(tmp_path: Path) -> None:
    original = _shapefile(tmp_path / "a", stem="roads")
    renamed = _shapefile(tmp_path / "b", stem="Strassen_2026")
    assert dataset_digest(renamed) == dataset_digest(original) == EXPECTED_SHAPEFILE


def test_member_extensions_match_case_insensitively(tmp_path: Path) -> None:
    upper = _shapefile(tmp_path, stem="ROADS", ext_case="upper")
    assert dataset_digest(upper) == EXPECTED_SHAPEFILE
    (tmp_path / "ROADS.DBF").rename(tmp_path / "roads.Dbf")  # the stem is matched the same way
    assert dataset_digest(upper) == EXPECTED_SHAPEFILE


def test_indexes_metadata_and_other_shapefiles_are_not_members(tmp_path: Path) -> None:
    shp = _shapefile(tmp_path)
    for name in ("roads.sbn", "roads.sbx", "roads.qix", "roads.shp.xml", "roads.cpg.bak"):
        (tmp_path / name).write_bytes(b"derived or descriptive")
    (tmp_path / "rivers.dbf").write_bytes(b"another dataset")
    (tmp_path / "roads2.shp").write_bytes(b"another dataset")
    assert dataset_digest(shp) == EXPECTED_SHAPEFILE
    assert [p.name for p in dataset_files(shp)] == [
        "roads.cpg",
        "roads.dbf",
        "roads.prj",
        "roads.shp",
        "roads.shx",
    ]


def test_editing_the_attributes_changes_the_digest(tmp_path: Path) -> None:
    shp = _shapefile(tmp_path)
    (tmp_path / "roads.dbf").write_bytes(b"edited attributes")
    assert dataset_digest(shp) != EXPECTED_SHAPEFILE


def test_absent_members_are_left_out_of_the_listing(tmp_path: Path) -> None:
    (tmp_path / "pts.shp").write_bytes(SHP)
    (tmp_path / "pts.dbf").write_bytes(DBF)
    assert dataset_digest(tmp_path / "pts.shp") == _listing((".dbf", DBF), (".shp", SHP))


def _case_sensitive(folder: Path) -> bool:
    (folder / "probe").write_bytes(b"")
    sensitive = not (folder / "PROBE").exists()
    (folder / "probe").unlink()
    return sensitive


def test_two_files_for_one_member_refuse_a_digest(tmp_path: Path) -> None:
    if not _case_sensitive(tmp_path):
        pytest.skip("this filesystem cannot hold roads.dbf and roads.DBF side by side")
    shp = _shapefile(tmp_path)
    (tmp_path / "roads.DBF").write_bytes(b"which one is the data?")
    with pytest.raises(InputError) as caught:
        dataset_digest(shp)
    error = caught.value
    assert error.code == "DIGEST_AMBIGUOUS"
    assert isinstance(error, ValueError)  # callers that expect a ValueError still catch it
    assert sorted(Path(p).name for p in error.evidence["clashing_files"][".dbf"]) == [
        "roads.DBF",
        "roads.dbf",
    ]
    assert error.hint
    with pytest.raises(InputError, match="DIGEST_AMBIGUOUS"):
        dataset_files(shp)


def _geodatabase(root: Path, name: str = "city.gdb") -> Path:
    gdb = root / name
    (gdb / "sub").mkdir(parents=True)
    (gdb / "a00000001.gdbtable").write_bytes(b"table one")
    (gdb / "a00000001.gdbtablx").write_bytes(b"index one")
    (gdb / "sub" / "nested.bin").write_bytes(b"nested")
    return gdb


EXPECTED_GDB = _listing(
    ("a00000001.gdbtable", b"table one"),
    ("a00000001.gdbtablx", b"index one"),
    ("sub/nested.bin", b"nested"),
)


def test_geodatabase_is_the_listing_of_its_files_by_relative_slash_path(tmp_path: Path) -> None:
    gdb = _geodatabase(tmp_path)
    assert dataset_digest(gdb) == EXPECTED_GDB
    assert [p.relative_to(gdb).as_posix() for p in dataset_files(gdb)] == [
        "a00000001.gdbtable",
        "a00000001.gdbtablx",
        "sub/nested.bin",
    ]


def test_geodatabase_suffix_matches_case_insensitively(tmp_path: Path) -> None:
    assert dataset_digest(_geodatabase(tmp_path, "CITY.GDB")) == EXPECTED_GDB


def test_lock_files_and_desktop_litter_are_excluded_and_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gdb = _geodatabase(tmp_path)
    lock = gdb / "a00000001.host-name.4242.sr.LOCK"
    lock.write_bytes(b"held by another process")
    lock.chmod(0)  # the way a held lock looks; root can read it anyway, hence the spy below
    (gdb / "sub" / "_gdb.host.77.ed.lock").write_bytes(b"")
    for litter in (".DS_Store", "sub/.hidden", "Thumbs.db", "THUMBS.DB", "desktop.ini"):
        (gdb / litter).write_bytes(b"os litter")
    opened: list[Path] = []
    real = digests.sha256_file

    def spy(path: Path | str) -> str:
        opened.append(Path(path))
        return real(path)

    monkeypatch.setattr(digests, "sha256_file", spy)
    assert dataset_digest(gdb) == EXPECTED_GDB
    assert sorted(p.relative_to(gdb).as_posix() for p in opened) == [
        "a00000001.gdbtable",
        "a00000001.gdbtablx",
        "sub/nested.bin",
    ]


def test_symbolic_links_in_a_geodatabase_are_neither_members_nor_followed(tmp_path: Path) -> None:
    gdb = _geodatabase(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"not part of the container")
    os.symlink(outside / "secret.bin", gdb / "link.bin")
    os.symlink(outside, gdb / "linked_dir")
    assert dataset_digest(gdb) == EXPECTED_GDB


def test_listing_sorts_by_utf8_bytes_not_by_case_folded_name(tmp_path: Path) -> None:
    gdb = tmp_path / "sort.gdb"
    gdb.mkdir()
    for name in ("b.bin", "B.bin", "a.bin", "é.bin", "z/a.bin"):
        (gdb / name).parent.mkdir(exist_ok=True)
        (gdb / name).write_bytes(name.encode())
    # "B" (0x42) < "a" (0x61) < "b" < "z" (0x7a) < "é" (0xc3 0xa9)
    expected = _listing(*((name, name.encode()) for name in ("B.bin", "a.bin", "b.bin", "z/a.bin", "é.bin")))
    assert dataset_digest(gdb) == expected


def test_an_empty_geodatabase_is_the_digest_of_the_empty_text(tmp_path: Path) -> None:
    gdb = tmp_path / "empty.gdb"
    (gdb / "only_dirs").mkdir(parents=True)
    (gdb / "x.lock").write_bytes(b"")
    assert dataset_digest(gdb) == _hex(b"")


def test_other_directories_have_no_digest_rule(tmp_path: Path) -> None:
    store = tmp_path / "cube.zarr"
    store.mkdir()
    with pytest.raises(InputError) as caught:
        dataset_digest(store)
    assert caught.value.code == "DIGEST_NO_RULE"
    assert caught.value.hint


def test_a_missing_dataset_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        dataset_digest(tmp_path / "nowhere.shp")
    assert caught.value.code == "DATASET_NOT_FOUND"
