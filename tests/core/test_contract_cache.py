"""The built-in contracts are validated once per content and read back from the cache after that.

The cache (``mapsmith.contract_cache``) must give exactly what validating the files gives, must never be
trusted for content it was not written for (another file, schema or parser is another key), must keep the
house rules on a hit, and must cost only time when it cannot be read or written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mapsmith import contract_cache, contracts
from mapsmith.contracts import contracts_root, load_builtin_contracts
from mapsmith.errors import ContractError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(contract_cache.CACHE_ENV, str(folder))
    return folder / contract_cache.CACHE_FILE


def _files() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((contracts_root() / "operations").glob("*.toml"))}


def _key() -> str:
    schema = (contracts_root() / "schemas" / "operation.schema.json").read_bytes()
    return contract_cache.content_key(_files(), schema, Path(contracts.__file__).read_bytes())


def _no_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("the schema was consulted")

    monkeypatch.setattr(contracts, "_schema_validator", refuse)


def test_the_first_load_validates_and_writes_the_second_reads_the_same_contracts(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_builtin_contracts()
    written = json.loads(cache.read_text("utf-8"))
    assert written["key"] == _key()
    assert set(written["contracts"]) == set(_files()) and len(written["contracts"]) == len(first)
    _no_schema(monkeypatch)  # a hit must not validate again
    second = load_builtin_contracts()
    assert second == first
    assert second["buffer_layer"].raw == first["buffer_layer"].raw
    assert second["buffer_layer"].parameters == first["buffer_layer"].parameters


def test_the_key_changes_with_every_input_of_the_validation() -> None:
    files = {"a.toml": b"name = 'a'", "b.toml": b"name = 'b'"}
    key = contract_cache.content_key(files, b"{schema}", b"parser")
    assert key == contract_cache.content_key(dict(reversed(list(files.items()))), b"{schema}", b"parser")
    assert key != contract_cache.content_key({**files, "b.toml": b"name = 'B'"}, b"{schema}", b"parser")
    assert key != contract_cache.content_key(
        {"a.toml": files["a.toml"], "c.toml": files["b.toml"]}, b"{schema}", b"parser"
    )
    assert key != contract_cache.content_key(files, b"{schema2}", b"parser")
    assert key != contract_cache.content_key(files, b"{schema}", b"parser2")
    # the parts are length-prefixed: moving a byte from one part to the next is another key
    assert contract_cache.content_key({}, b"ab", b"c") != contract_cache.content_key({}, b"a", b"bc")


def test_a_cache_written_for_other_content_is_not_trusted(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = load_builtin_contracts()
    data = json.loads(cache.read_text("utf-8"))
    # an entry that would not validate, kept under another key (as if the files had changed since)
    data["contracts"]["buffer_layer.toml"]["summary"] = 42
    data["key"] = "0" * 64
    cache.write_text(json.dumps(data), "utf-8")
    assert load_builtin_contracts() == fresh  # the files were validated again
    assert json.loads(cache.read_text("utf-8"))["key"] == _key()  # and the cache rewritten


@pytest.mark.parametrize("text", ["not json", "[]", '{"key": "x"}'])
def test_a_broken_cache_is_rebuilt(cache: Path, text: str) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_text(text, "utf-8")
    assert set(load_builtin_contracts()) == {p.removesuffix(".toml") for p in _files()}
    assert json.loads(cache.read_text("utf-8"))["key"] == _key()


def test_the_house_rules_still_run_on_a_hit(cache: Path) -> None:
    load_builtin_contracts()
    data = json.loads(cache.read_text("utf-8"))
    data["contracts"]["buffer_layer.toml"]["name"] = "buffer_features"  # the file is no longer named after it
    cache.write_text(json.dumps(data), "utf-8")
    with pytest.raises(ContractError, match="buffer_layer.toml declares name 'buffer_features'"):
        load_builtin_contracts()


def test_a_cache_that_cannot_be_written_costs_only_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", "utf-8")
    monkeypatch.setenv(contract_cache.CACHE_ENV, str(blocker / "cache"))
    assert contract_cache.write("k", {"x.toml": {}}) is False
    assert set(load_builtin_contracts()) == {p.removesuffix(".toml") for p in _files()}


def test_the_folder_follows_the_variable_then_xdg_then_home() -> None:
    assert contract_cache.cache_dir({contract_cache.CACHE_ENV: "/c"}) == Path("/c")
    assert contract_cache.cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/mapsmith/contracts")
    assert contract_cache.cache_dir({}) == Path.home() / ".cache" / "mapsmith" / "contracts"
