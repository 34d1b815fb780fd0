"""The two catalog rankers: BM25 scores checked against hand arithmetic, determinism, the tokeniser
and stemmer, and the static-embedding ranker (mechanics with a fake encoder; the committed model's
files, tokenizer and vectors with a golden-vector test, never skipped: the model is in the repository)."""

from __future__ import annotations

import hashlib
import math
import shutil
from pathlib import Path

import pytest

from mapsmith.catalog import vector
from mapsmith.catalog.lexical import STOPWORDS, BM25Ranker, stem, tokenize

# -- BM25: a toy corpus scored by hand -------------------------------------------------------------

# Tokens after tokenising (no stopword, no stemming changes except the plurals shown):
#   d1 "buffer road"                 -> [buffer, road]              |d1| = 2
#   d2 "clip roads, road and river"  -> [clip, road, road, river]   |d2| = 4  ("and" is a stopword)
#   d3 "DEM raster grid"             -> [dem, raster, grid]         |d3| = 3
# N = 3, avgdl = (2 + 4 + 3) / 3 = 3, k1 = 1.5, b = 0.75.
TOY = {"d1": "buffer road", "d2": "clip roads, road and river", "d3": "DEM raster grid"}

# idf(t) = ln((N - n + 0.5) / (n + 0.5) + 1)
#   road  (n = 2): ln((3 - 2 + 0.5) / (2 + 0.5) + 1) = ln(1.5 / 2.5 + 1) = ln(1.6)
#   river (n = 1): ln((3 - 1 + 0.5) / (1 + 0.5) + 1) = ln(2.5 / 1.5 + 1) = ln(8 / 3)
IDF_ROAD = math.log(1.6)
IDF_RIVER = math.log(8 / 3)
# term score = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))
#   d1: k1 * (0.25 + 0.75 * 2 / 3) = 1.5 * 0.75 = 1.125
#       road, tf 1: 1 * 2.5 / (1 + 1.125) = 2.5 / 2.125 = 20 / 17
#   d2: k1 * (0.25 + 0.75 * 4 / 3) = 1.5 * 1.25 = 1.875
#       road, tf 2: 2 * 2.5 / (2 + 1.875) = 5 / 3.875 = 40 / 31
#       river, tf 1: 1 * 2.5 / (1 + 1.875) = 2.5 / 2.875 = 20 / 23
#   d3: no query term -> 0
# Terms are summed in sorted order: "river" before "road".
EXPECTED = {
    "d1": IDF_ROAD * 20 / 17,
    "d2": IDF_RIVER * 20 / 23 + IDF_ROAD * 40 / 31,
    "d3": 0.0,
}


def test_bm25_idf_matches_the_formula() -> None:
    ranker = BM25Ranker(TOY)
    assert ranker.doc_count == 3
    assert ranker.avgdl == 3.0
    assert ranker.idf("road") == pytest.approx(IDF_ROAD, abs=1e-12)
    assert ranker.idf("river") == pytest.approx(IDF_RIVER, abs=1e-12)
    # A term no document has: ln((3 + 0.5) / 0.5 + 1) = ln(8).
    assert ranker.idf("lake") == pytest.approx(math.log(8), abs=1e-12)


def test_bm25_scores_match_hand_computation() -> None:
    scores = BM25Ranker(TOY).scores("road river")
    assert scores.keys() == EXPECTED.keys()
    for name, expected in EXPECTED.items():
        assert abs(scores[name] - expected) <= 1e-12, name


def test_bm25_rank_orders_by_score_then_name_and_keeps_unmatched() -> None:
    ranked = BM25Ranker(TOY).rank("road river")
    assert [name for name, _ in ranked] == ["d2", "d1", "d3"]
    assert ranked[-1] == ("d3", 0.0)


def test_bm25_query_stopwords_inflections_and_repeats_do_not_change_scores() -> None:
    ranker = BM25Ranker(TOY)
    plain = ranker.scores("road river")
    # Stopwords drop, plurals stem, punctuation splits, case folds, a repeated term counts once.
    assert ranker.scores("The ROADS and the rivers? road, road!") == plain


def test_bm25_k1_and_b_are_used() -> None:
    # b = 0: no length normalisation, so d1's road (tf 1) scores idf * 1 * 2.5 / (1 + 1.5).
    scores = BM25Ranker(TOY, k1=1.5, b=0.0).scores("road")
    assert abs(scores["d1"] - IDF_ROAD * 2.5 / 2.5) <= 1e-12
    # k1 = 0: term frequency saturates at once, each matching term scores exactly its idf.
    scores = BM25Ranker(TOY, k1=0.0).scores("road river")
    assert abs(scores["d2"] - (IDF_RIVER + IDF_ROAD)) <= 1e-12


@pytest.mark.parametrize(("k1", "b"), [(-0.1, 0.75), (1.5, -0.1), (1.5, 1.1)])
def test_bm25_rejects_invalid_parameters(k1: float, b: float) -> None:
    with pytest.raises(ValueError):
        BM25Ranker(TOY, k1=k1, b=b)


def test_bm25_is_independent_of_insertion_and_query_term_order() -> None:
    forward = BM25Ranker(TOY)
    backward = BM25Ranker(dict(reversed(list(TOY.items()))))
    for query in ["road river", "river road", "grid road clip"]:
        # Exact equality, not approx: the same additions in the same order.
        assert forward.scores(query) == backward.scores(query)
        assert forward.rank(query) == backward.rank(query)
    assert forward.scores("road river") == forward.scores("river road")


def test_bm25_determinism_on_a_larger_shuffled_corpus() -> None:
    words = "buffer clip dissolve raster slope river road parcel zone distance polygon line point".split()
    docs = {f"op{i:02d}": " ".join(words[(i * j) % len(words)] for j in range(1, 4 + i % 5)) for i in range(40)}
    names = sorted(docs)
    shuffled = {name: docs[name] for name in names[1::2] + names[::2]}
    query = "distance from each parcel to the river and the road"
    assert BM25Ranker(docs).rank(query) == BM25Ranker(shuffled).rank(query)


def test_bm25_ties_break_by_name() -> None:
    ranked = BM25Ranker({"b_op": "clip layer", "a_op": "clip layer", "c_op": "slope"}).rank("clip")
    assert [name for name, _ in ranked] == ["a_op", "b_op", "c_op"]
    assert ranked[0][1] == ranked[1][1] > 0


def test_bm25_names_restricts_without_changing_idf() -> None:
    ranker = BM25Ranker(TOY)
    assert ranker.rank("road river", names=["d3", "d1"]) == [("d1", EXPECTED["d1"]), ("d3", 0.0)]
    with pytest.raises(KeyError):
        ranker.rank("road", names=["nope"])


def test_bm25_empty_inputs() -> None:
    assert BM25Ranker({}).rank("road") == []
    ranker = BM25Ranker({"a": "", "b": "the of and"})
    assert ranker.avgdl == 1.0  # nothing indexed; 1.0 only avoids dividing by zero
    assert ranker.rank("road") == [("a", 0.0), ("b", 0.0)]
    assert BM25Ranker(TOY).rank("") == [("d1", 0.0), ("d2", 0.0), ("d3", 0.0)]


# -- tokeniser and stemmer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("polygons", "polygon"),
        ("roads", "road"),
        ("geometries", "geometry"),
        ("boundaries", "boundary"),
        ("boxes", "box"),
        ("patches", "patch"),
        ("classes", "class"),
        ("status", "status"),
        ("analysis", "analysis"),
        ("clipping", "clip"),
        ("clipped", "clip"),
        ("clips", "clip"),
        ("filling", "fill"),
        ("buffered", "buffer"),
        ("buffering", "buffer"),
        ("buildings", "build"),
        ("merge", "merg"),
        ("merges", "merg"),
        ("merged", "merg"),
        ("merging", "merg"),
        ("simplified", "simplify"),
        ("simplifies", "simplify"),
        ("simplifying", "simplify"),
        ("string", "string"),  # "str" has no vowel: not an -ing form
        ("need", "need"),
        ("speed", "speed"),  # -eed is not a past tense
        ("dem", "dem"),
        ("crs", "crs"),
        ("utm33n", "utm33n"),
        ("4326", "4326"),
    ],
)
def test_stem(word: str, expected: str) -> None:
    assert stem(word) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Clip the roads to the county boundaries!", ["clip", "road", "county", "boundary"]),
        ("EPSG:4326 -> UTM zone 33N", ["epsg", "4326", "utm", "zon", "33n"]),
        ("point-in-polygon", ["point", "polygon"]),
        ("the_coastline has 400,000 vertices", ["coastlin", "400", "000", "vertic"]),
        ("naïve café", ["na", "ve", "caf"]),  # only a-z and 0-9 are word characters
        ("", []),
        ("   ...   ", []),
        ("the and of", []),
    ],
)
def test_tokenize(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_stopwords_keep_spatial_words() -> None:
    assert STOPWORDS.isdisjoint({"within", "near", "between", "over", "inside", "outside", "all", "not"})


# -- vector ranker: mechanics with a fake encoder ---------------------------------------------------

_AXES = {"steep": 0, "slope": 0, "terrain": 0, "grow": 1, "buffer": 1, "distance": 1, "crs": 2, "utm": 2}


def fake_encode(texts: list[str] | tuple[str, ...]) -> list[list[float]]:
    """One axis per concept plus a constant axis, so that centring visibly matters."""
    out = []
    for text in texts:
        vec = [0.0, 0.0, 0.0, 5.0]
        for word in text.lower().split():
            if word in _AXES:
                vec[_AXES[word]] += 1.0
        out.append(vec)
    return out


FAKE_DOCS = {
    "slope": "Slope\nsteep terrain",
    "buffer_layer": "Buffer layer\ngrow by distance",
    "reproject_layer": "Reproject layer\nutm crs",
    "empty": "   \n",
}


def test_vector_ranker_picks_the_best_passage() -> None:
    ranker = vector.VectorRanker(FAKE_DOCS, fake_encode)
    assert ranker.names == ("buffer_layer", "empty", "reproject_layer", "slope")
    assert ranker.dimensions == 4
    ranked = ranker.rank("how steep is it")
    assert ranked[0][0] == "slope"
    assert 0 < ranked[0][1] <= 1
    assert ranker.rank("utm")[0][0] == "reproject_layer"
    assert ranker.rank("grow")[0][0] == "buffer_layer"


def test_vector_ranker_scores_are_cosines_of_centred_vectors() -> None:
    ranker = vector.VectorRanker(FAKE_DOCS, fake_encode)

    # Six passages: "Slope" (1, 0, 0, 5), "steep terrain" (2, 0, 0, 5), "Buffer layer" (0, 1, 0, 5),
    # "grow by distance" (0, 2, 0, 5), "Reproject layer" (0, 0, 0, 5), "utm crs" (0, 0, 2, 5); their
    # mean is (1/2, 1/2, 1/3, 5), so the constant axis vanishes once centred. The query "steep steep
    # steep" is (3, 0, 0, 5), centred (5/2, -1/2, -1/3, 0); slope's best passage is "steep terrain".
    def cosine(a: tuple[float, ...], b: tuple[float, ...]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))

    q = (5 / 2, -1 / 2, -1 / 3)
    title, body = (1 / 2, -1 / 2, -1 / 3), (3 / 2, -1 / 2, -1 / 3)
    assert cosine(q, body) > cosine(q, title)
    assert ranker.scores("steep steep steep")["slope"] == pytest.approx(round(cosine(q, body), 9), abs=1e-12)
    # A query equal to a passage scores 1 (up to rounding).
    assert ranker.scores("steep")["slope"] == 1.0


def test_vector_ranker_edge_cases() -> None:
    ranker = vector.VectorRanker(FAKE_DOCS, fake_encode)
    assert ranker.scores("empty")["empty"] == 0.0  # a document without passages scores 0
    assert set(ranker.scores("?!").values()) == {0.0}  # nothing to embed
    assert ranker.rank("utm", names=["slope", "reproject_layer"])[0][0] == "reproject_layer"
    assert len(ranker.rank("utm", names=["slope"])) == 1
    with pytest.raises(KeyError):
        ranker.rank("utm", names=["nope"])
    assert vector.VectorRanker({}, fake_encode).rank("utm") == []


def test_vector_ranker_is_independent_of_insertion_order() -> None:
    forward = vector.VectorRanker(FAKE_DOCS, fake_encode)
    backward = vector.VectorRanker(dict(reversed(list(FAKE_DOCS.items()))), fake_encode)
    for query in ["steep", "grow utm", "terrain crs"]:
        assert forward.rank(query) == backward.rank(query)


def test_passages_are_the_non_blank_lines() -> None:
    assert vector.passages("Clip layer\n  Cut to a mask  \n\n\tclip\n") == ["Clip layer", "Cut to a mask", "clip"]


# -- vector ranker: the committed static model ----------------------------------------------------

# Printed by benchmarks/build_static_model.py when it wrote the files (recorded in data/PROVENANCE.md).
PINNED_SHA256 = {
    "minilm_static_int8.npy": "9e40148b10e90c258f9ff924d0793cac062bf09c61eeb962f999a6940a91856b",
    "minilm_static_scales.npy": "b23ac32848b990a0187486ef393574711603dd65740f8d2b76a1ae0ccaae2724",
    # byte for byte the vocab.txt of all-MiniLM-L6-v2 (bert-base-uncased's WordPiece vocabulary)
    "minilm_vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}


def test_committed_files_are_the_pinned_ones_and_small() -> None:
    assert {name: sha for name, sha in vector.MODEL_FILES.values()} == PINNED_SHA256
    for name, sha in PINNED_SHA256.items():
        assert hashlib.sha256((vector.DATA_DIR / name).read_bytes()).hexdigest() == sha, name
    assert sum((vector.DATA_DIR / name).stat().st_size for name in PINNED_SHA256) < 5_000_000
    for name in ("PROVENANCE.md", "LICENSE-all-MiniLM-L6-v2.txt"):
        assert (vector.DATA_DIR / name).is_file(), name


@pytest.fixture(scope="module")
def encoder() -> vector.Encoder:
    encode = vector.load_encoder()
    assert encode is not None, vector.unavailable_reason()  # committed: never skipped
    return encode


def test_golden_vector(encoder: vector.Encoder) -> None:
    model = vector.StaticModel()
    assert model.vectors.shape == (30522, 128) and str(model.vectors.dtype) == "int8"
    # "river" is WordPiece 2314; its row is int8 * scale.
    assert model.vocab["river"] == 2314
    assert model.vectors[2314][:6].tolist() == [-59, -77, -20, -36, -127, -35]
    assert float(model.scales[2314]) == pytest.approx(0.011269699782133102, rel=1e-7)
    got = [float(x) for x in encoder(["river"])[0]]
    assert len(got) == 128
    golden = [-0.664912287145853, -0.8677668832242489, -0.22539399564266205, -0.4057091921567917, -1.431251872330904]
    assert got[:5] == pytest.approx(golden, abs=1e-9)
    assert math.sqrt(math.fsum(x * x for x in got)) == pytest.approx(4.2292166810955, abs=1e-9)
    # A text's vector is the mean of its pieces' rows; an unknown word adds nothing.
    two = encoder(["river road"])[0]
    mean = (model.vectors[[2314, 2346]].astype(float) * model.scales[[2314, 2346], None]).mean(axis=0)
    assert [float(x) for x in two] == pytest.approx(mean.tolist(), abs=1e-12)
    assert [float(x) for x in encoder(["\u2603 river"])[0]] == pytest.approx(got, abs=1e-12)
    assert set(encoder(["\u2603"])[0].tolist()) == {0.0}


def test_basic_tokens_lowercase_strip_accents_and_split_punctuation() -> None:
    text = "Reproject the GeoPackage to UTM zone 33N, naïve café!"
    expected = ["reproject", "the", "geopackage", "to", "utm", "zone", "33n", ",", "naive", "cafe", "!"]
    assert vector.basic_tokens(text) == expected
    assert vector.basic_tokens("a\x00b\tc\u200bd 北京") == ["ab", "cd", "北", "京"]


def test_wordpiece_greedy_longest_match() -> None:
    vocab = {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "aff": 4, "able": 5, "##ab": 6, "a": 7}
    assert vector.wordpiece_ids("unaffable", vocab) == [1, 2, 3]
    assert vector.wordpiece_ids("able aff", vocab) == [5, 4]
    assert vector.wordpiece_ids("unxx able", vocab) == [0, 5]  # a word that cannot be split is one [UNK]
    assert vector.wordpiece_ids("a" * 101, vocab) == [0]  # longer than 100 characters
    model = vector.StaticModel()
    inverse = {i: piece for piece, i in model.vocab.items()}
    pieces = [inverse[i] for i in model.ids("Reproject the GeoPackage to UTM")]
    assert pieces == ["rep", "##ro", "##ject", "the", "geo", "##pack", "##age", "to", "ut", "##m"]


def test_a_changed_or_missing_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PINNED_SHA256:
        shutil.copyfile(vector.DATA_DIR / name, tmp_path / name)
    assert vector.StaticModel(tmp_path).dimensions == 128
    scales = tmp_path / "minilm_static_scales.npy"
    data = bytearray(scales.read_bytes())
    data[-1] ^= 1
    scales.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="minilm_static_scales.npy has sha256 .* pinned to b23ac328"):
        vector.StaticModel(tmp_path)

    monkeypatch.setattr(vector, "_model", None)
    monkeypatch.setattr(vector, "DATA_DIR", tmp_path)
    scales.unlink()
    assert vector.load(FAKE_DOCS) is None
    reason = vector.unavailable_reason()
    assert reason is not None and reason.startswith(f"the static embedding files in {tmp_path} cannot be used: ")
    assert "FileNotFoundError" in reason


def test_committed_model_ranks_by_meaning(encoder: vector.Encoder) -> None:
    docs = {
        "slope": "Slope\nThe steepness of the terrain, in degrees",
        "buffer_layer": "Buffer layer\nGrow each feature by a distance in metres",
        "reproject_layer": "Reproject layer\nMove coordinates to another coordinate reference system",
    }
    ranker = vector.load(docs)
    assert ranker is not None, vector.unavailable_reason()
    assert vector.unavailable_reason() is None
    # Few or no words shared with the winning text: the order comes from the vectors.
    assert ranker.rank("how steep is the hill")[0][0] == "slope"
    assert ranker.rank("convert to UTM coordinates")[0][0] == "reproject_layer"
    assert ranker.rank("expand polygons by 50 m")[0][0] == "buffer_layer"
