"""A folder of Parquet parts digests by the listing rule: the expected digests are computed here by hand.

Each refusal has its clean twin: the same folder without the defect digests.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mapsmith import parts
from mapsmith.errors import InputError
from mapsmith.provenance import digests
from mapsmith.provenance.digests import PARQUET_PARTS_RULE, dataset_digest, digest_rule, listing_digest


def _by_hand(files: dict[str, bytes]) -> str:
    """The listing rule written out: sha256 of each member, lines '<name>\\0<hex>\\n' sorted by name bytes."""
    lines = sorted((name.encode("utf-8"), hashlib.sha256(data).hexdigest().encode()) for name, data in files.items())
    return hashlib.sha256(b"".join(n + b"\0" + h + b"\n" for n, h in lines)).hexdigest()


def _folder(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


THREE = {
    "part-00000.parquet": b"PAR1 first part PAR1",
    "part-00001.parquet": b"PAR1 second part, longer PAR1",
    "part-00002.parquet": b"PAR1 3 PAR1",
}


def test_a_folder_of_three_parts_digests_to_the_listing_of_its_parts(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "points.parquet", THREE)
    expected = _by_hand(THREE)
    assert dataset_digest(folder) == expected
    # The listing is of names and part digests only: the folder's own name is not in it.
    assert dataset_digest(folder.rename(tmp_path / "renamed")) == expected
    assert digest_rule(tmp_path / "renamed") == PARQUET_PARTS_RULE
    assert digest_rule(tmp_path / "renamed" / "part-00000.parquet") is None  # one file: the spec's own rule


def test_spark_and_hadoop_markers_are_not_members(tmp_path: Path) -> None:
    markers = {
        "_SUCCESS": b"",
        "_metadata": b"summary of the footers",
        "_common_metadata": b"schema",
        ".part-00000.parquet.crc": b"crc",
        "part-00001.parquet.crc": b"crc",
    }
    folder = _folder(tmp_path / "spark.parquet", {**THREE, **markers})
    assert dataset_digest(folder) == _by_hand(THREE)
    assert [name for name, _ in parts.part_members(folder)] == sorted(THREE)


def test_a_hive_folder_lists_parts_under_their_relative_paths(tmp_path: Path) -> None:
    files = {"k=0/data_0.parquet": b"PAR1 zero PAR1", "k=1/data_0.parquet": b"PAR1 one PAR1"}
    folder = _folder(tmp_path / "hive.parquet", files)
    assert dataset_digest(folder) == _by_hand(files)
    assert parts.hive_columns(folder) == ("k",)
    # Same bytes under other relative names make another dataset: the layout is part of the data.
    assert dataset_digest(folder) != _by_hand({"data_0.parquet": b"PAR1 zero PAR1", "x.parquet": b"PAR1 one PAR1"})


def test_editing_one_part_changes_the_digest(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "p.parquet", THREE)
    before = dataset_digest(folder)
    (folder / "part-00001.parquet").write_bytes(b"PAR1 edited PAR1")
    assert dataset_digest(folder) == _by_hand({**THREE, "part-00001.parquet": b"PAR1 edited PAR1"}) != before


@pytest.mark.parametrize(
    ("defect", "code"),
    [
        ({"notes.txt": b"a stray file"}, "PARTS_UNEXPECTED_FILE"),
        ({"_temporary/0/part-9.parquet": b"PAR1 PAR1"}, "PARTS_WRITE_INCOMPLETE"),
        ({"_hidden.parquet": b"PAR1 PAR1"}, "PARTS_HIDDEN_PART"),
        ({"k=1/part-9.parquet": b"PAR1 PAR1"}, "PARTS_LAYOUT_MIXED"),
    ],
)
def test_a_folder_that_is_not_one_clean_dataset_is_refused(tmp_path: Path, defect: dict[str, bytes], code: str) -> None:
    folder = _folder(tmp_path / "p.parquet", {**THREE, **defect})
    with pytest.raises(InputError) as caught:
        dataset_digest(folder)
    assert caught.value.code == code
    assert caught.value.hint
    # The clean twin: the same parts without the defect digest as the listing says.
    clean = _folder(tmp_path / "clean.parquet", THREE)
    assert dataset_digest(clean) == _by_hand(THREE)


def test_a_directory_with_no_parts_still_has_no_rule(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "zarr", {"data.bin": b"chunks"})
    with pytest.raises(InputError) as caught:
        dataset_digest(folder)
    assert caught.value.code == "DIGEST_NO_RULE"


def test_a_symbolic_link_in_a_folder_is_neither_member_nor_followed(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "p.parquet", THREE)
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"PAR1 not in the dataset PAR1")
    (folder / "part-00009.parquet").symlink_to(outside)
    assert dataset_digest(folder) == _by_hand(THREE)


def test_listing_digest_combines_digests_hashed_elsewhere_as_dataset_digest_does(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "p.parquet", THREE)
    per_part = [(name, hashlib.sha256(data).hexdigest()) for name, data in reversed(THREE.items())]
    assert listing_digest(per_part) == dataset_digest(folder)


def test_a_file_larger_than_one_read_block_digests_as_its_bytes(tmp_path: Path) -> None:
    data = bytes(range(256)) * ((2 * digests.CHUNK_BYTES + 3) // 256 + 1)
    big = tmp_path / "big.gpkg"
    big.write_bytes(data)
    assert dataset_digest(big) == hashlib.sha256(data).hexdigest()


def test_parts_are_hashed_in_parallel_threads_with_the_same_result(tmp_path: Path, monkeypatch) -> None:
    import threading

    files = {f"part-{i:05d}.parquet": bytes([i]) * (i * 1000 + 1) for i in range(8)}
    folder = _folder(tmp_path / "p.parquet", files)
    seen: set[str] = set()
    real = digests.sha256_file

    def recording(path: Path | str) -> str:
        seen.add(threading.current_thread().name)
        return real(path)

    monkeypatch.setattr(digests, "sha256_file", recording)
    monkeypatch.setattr(digests, "digest_workers", lambda: 4)
    assert dataset_digest(folder) == _by_hand(files)
    assert seen and all(name.startswith("mapsmith-digest") for name in seen)
    # The clean twin: one worker hashes in the calling thread, to the same digest.
    seen.clear()
    monkeypatch.setattr(digests, "digest_workers", lambda: 1)
    assert dataset_digest(folder) == _by_hand(files)
    assert seen == {threading.current_thread().name}


def test_a_file_is_not_a_folder_of_parts(tmp_path: Path) -> None:
    single = tmp_path / "one.parquet"
    single.write_bytes(b"PAR1 PAR1")
    with pytest.raises(InputError) as caught:
        parts.part_members(single)
    assert caught.value.code == "PARTS_NOT_A_FOLDER"
    assert dataset_digest(single) == hashlib.sha256(b"PAR1 PAR1").hexdigest()  # the clean twin: a file's bytes
