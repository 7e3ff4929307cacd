"""Pair reading (NFC, errors naming the line) and reproducible random / document hold-outs."""

import gzip
import unicodedata

import pytest

from kformer.data.pairs import (
    Pair,
    curriculum_levels,
    document_holdout,
    normalize_text,
    random_holdout,
    read_document_ids,
    read_pairs,
    source_holdout,
)
from kformer.errors import KformerError

TAMIL_NFC = "\u0b95\u0bca"  # KA + vowel sign O; NFD splits the sign into E + AA
TAMIL_NFD = unicodedata.normalize("NFD", TAMIL_NFC)


def test_reads_pairs_nfc_extra_columns_gz_and_blank_lines(tmp_path):
    path = tmp_path / "pairs.tsv.gz"
    text = f"Hello  there\tHola\tattribution #1\n\n go \t {TAMIL_NFD}போ\n"
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    pairs = read_pairs(path)
    assert pairs == [Pair("Hello there", "Hola", 1), Pair("go", f"{TAMIL_NFC}போ", 3)]
    assert len(TAMIL_NFD) == 3 and pairs[1].target == "\u0b95\u0bca\u0baa\u0bcb"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"a\tb\nno tab here\n", "line 2 has no tab"),
        (b"a\tb\nc\t \n", "line 2 has an empty target"),
        (b"a\tb\n\xff\xfe\tx\n", "line 2 is not valid UTF-8"),
        (b"\n\n", "holds no sentence pairs"),
        (b"", "is empty"),
    ],
)
def test_bad_files_give_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.tsv"
    path.write_bytes(content)
    with pytest.raises(KformerError, match=message) as info:
        read_pairs(path)
    assert "\n" not in str(info.value)


def test_random_holdout_is_reproducible_and_disjoint():
    pairs = [Pair(f"s{i}", f"t{i}", i) for i in range(100)]
    train, held = random_holdout(pairs, 20, seed=3)
    assert len(held) == 20 and len(train) == 80
    assert {p.line for p in train}.isdisjoint({p.line for p in held})
    assert random_holdout(pairs, 20, seed=3)[1] == held
    assert random_holdout(pairs, 20, seed=4)[1] != held
    # a length-sorted file must not give the longest pairs as the test set
    assert 20 < sum(p.line for p in held) / 20 < 80
    with pytest.raises(KformerError):
        random_holdout(pairs, 100)


def test_source_holdout_takes_every_pair_of_a_held_out_source_out_of_training():
    # 30 sources, each translated 1-3 ways
    pairs = [Pair(f"s{i}", f"t{i}-{k}", 10 * i + k) for i in range(30) for k in range(1 + i % 3)]
    train, held = source_holdout(pairs, 8, seed=2)
    assert len(held) == 8 and len({p.source for p in held}) == 8
    assert {p.source for p in train}.isdisjoint({p.source for p in held})
    assert all(p.target.endswith("-0") for p in held)  # the first translation of each held-out source
    assert len(train) == sum(1 for p in pairs if p.source not in {h.source for h in held})
    assert source_holdout(pairs, 8, seed=2) == (train, held)
    assert source_holdout(pairs, 8, seed=3)[1] != held
    with pytest.raises(KformerError, match="distinct source"):
        source_holdout(pairs, 30)


def test_document_holdout_keeps_documents_whole(tmp_path):
    meta = tmp_path / "meta.tsv"
    rows = ["line\ttuid\tsource_url"]
    documents = ["a"] * 40 + ["b"] * 30 + ["c"] * 10 + ["d"] * 10 + ["e"] * 10
    rows += [f"{i + 1}\t{d.upper()}_1:{i + 1}\thttp://x/{d}" for i, d in enumerate(documents)]
    meta.write_text("\n".join(rows) + "\n", encoding="utf-8")
    doc_ids = read_document_ids(meta)
    assert doc_ids[0] == "http://x/a" and len(doc_ids) == 100
    pairs = [Pair(f"s{i}", f"t{i}", i) for i in range(100)]
    train, held, chosen = document_holdout(pairs, doc_ids, fraction=0.2, seed=0)
    held_docs = {doc_ids[p.line] for p in held}
    train_docs = {doc_ids[p.line] for p in train}
    assert held_docs == set(chosen) and held_docs.isdisjoint(train_docs)
    assert 10 <= len(held) <= 30 and len(train) + len(held) == 100
    assert "http://x/a" not in held_docs  # 40 > twice the 20 wanted
    with pytest.raises(KformerError, match="must match"):
        document_holdout(pairs[:50], doc_ids)


def test_curriculum_levels_grow_short_first():
    lengths = [5, 1, 9, 3, 7, 2]
    levels = curriculum_levels(lengths, levels=3)
    assert [len(level) for level in levels] == [2, 4, 6]
    assert set(levels[0]) == {1, 5}  # the two shortest
    assert normalize_text(" a \t b ") == "a b"


def test_pairs_batch_by_length_with_the_shared_bucketing():
    import numpy as np

    from kformer.data.batching import length_bucketed_batches, pad_batch

    lengths = [9, 1, 5, 2, 8, 3, 7, 4, 6, 10]
    batches = length_bucketed_batches(lengths, 3, rng=np.random.default_rng(0))
    assert sorted(np.concatenate(batches).tolist()) == list(range(10))
    spans = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
    assert max(spans) <= 3  # sorted before cutting: each batch holds neighbours in length
    fixed = length_bucketed_batches(lengths, 4)
    assert [b.tolist() for b in fixed] == [[1, 3, 5, 7], [2, 8, 6, 4], [0, 9]]  # no rng: sorted, in order
    padded = pad_batch([[5, 6], [7, 8, 9, 10, 11]])
    assert padded.shape == (2, 8) and padded[0].tolist() == [5, 6, 0, 0, 0, 0, 0, 0]
    assert pad_batch([[1] * 5], limit=6).shape == (1, 6)
    assert pad_batch([[1] * 17]).shape == (1, 24)  # widths come from the shared bucket ladder


@pytest.mark.shared_data
def test_real_corpora_read_and_split(shared_data):
    es = read_pairs(shared_data / "en-es-anki" / "spa.txt.gz")
    assert len(es) == 118_121
    train, held = random_holdout(es, 2000, seed=0)
    assert len(held) == 2000 and len(train) == 116_121
    seen = {p.source for p in train}
    assert 0.15 < sum(p.source in seen for p in held) / len(held) < 0.35  # why en-es holds out by source
    train, held = source_holdout(es, 2000, seed=0)
    assert len(held) == 2000 and not {p.source for p in train} & {p.source for p in held}
    tico = shared_data / "en-ta-tico19"
    pairs = read_pairs(tico / "en-ta.tsv")
    documents = read_document_ids(tico / "en-ta.meta.tsv")
    assert len(pairs) == len(documents) == 3071 and len(set(documents)) == 31
    train, held, chosen = document_holdout(pairs, documents, fraction=0.15, seed=0)
    assert 0.1 * len(pairs) <= len(held) <= 0.2 * len(pairs)
    by_line = dict(zip(range(1, len(pairs) + 1), documents, strict=True))
    assert {by_line[p.line] for p in held} == set(chosen)
    assert not {by_line[p.line] for p in train} & set(chosen)
    assert all(p.target == unicodedata.normalize("NFC", p.target) for p in pairs)
