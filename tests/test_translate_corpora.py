"""A translator trained on several corpora: reading them (files, a folder, a manifest), their
sampling weights, their domain tags, and one tiny training run that records them and translates
with and without a domain."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import numpy as np
import pytest
from conftest import number_pairs, write_tsv_pairs

from kformer.data.corpora import Corpus, find_corpora
from kformer.data.pair_batches import PairBatchPlan, weighted_draw
from kformer.data.pairs import Pair
from kformer.errors import BadInput
from kformer.tasks.translate import domains
from kformer.tasks.translate.auto import CORPUS_TEMPERATURE, corpus_weights_rule, describe
from kformer.tasks.translate.pairs import read_pair_data, read_training_data

# --- reading corpora -----------------------------------------------------------------------------


def _pairs(path, n=3, word="a"):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{word}{i}\tt{i}\n" for i in range(n))
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def data_folder(tmp_path):
    """A folder laid out as the shared en-ta data: pairs, metadata, raw downloads, notes."""
    root = tmp_path / "data"
    _pairs(root / "en-ta-bible" / "en-ta.tsv.gz", 4)
    _pairs(root / "en-ta-nlpc-uom" / "en-ta.tsv", 3)
    _pairs(root / "en-ta-nlpc-uom" / "glossary.tsv", 2)
    _pairs(root / "en-ta-tico19" / "en-ta.tsv", 5)
    (root / "en-ta-tico19" / "en-ta.meta.tsv").write_text("line\ttuid\turl\n", encoding="utf-8")
    _pairs(root / "en-ta-tico19" / "original" / "raw.tsv")
    (root / "en-ta-tico19" / "SOURCE.md").write_text("notes", encoding="utf-8")
    return root


def test_a_folder_is_every_pair_file_under_it_named_by_its_path(data_folder):
    corpora = find_corpora(data_folder)
    assert [c.name for c in corpora] == ["en-ta-bible", "en-ta-nlpc-uom", "en-ta-nlpc-uom/glossary", "en-ta-tico19"]
    assert all(c.weight is None and c.tag is None for c in corpora)
    one = find_corpora([data_folder / "en-ta-nlpc-uom", data_folder / "en-ta-tico19"])  # corpus folders themselves
    assert [c.name for c in one] == ["en-ta-nlpc-uom", "en-ta-nlpc-uom/glossary", "en-ta-tico19"]


def test_several_files_comma_separated_or_listed(tmp_path):
    a, b = _pairs(tmp_path / "a.tsv"), _pairs(tmp_path / "x" / "en-ta.tsv")
    assert [c.name for c in find_corpora(f"{a},{b}")] == ["a", "x"]
    assert [c.name for c in find_corpora([a, str(b)])] == ["a", "x"]
    assert [c.name for c in find_corpora(a)] == ["a"]  # one file: one corpus, as always


def test_pairs_carry_their_corpus_and_given_pairs_none(data_folder):
    pairs, corpora = read_training_data(data_folder)
    assert len(pairs) == 14 and Counter(p.corpus for p in pairs)["en-ta-tico19"] == 5
    assert [c.name for c in corpora] == list(dict.fromkeys(p.corpus for p in pairs))
    assert {p.corpus for p in read_pair_data(data_folder)} == {None}  # validation/test pairs given: neutral
    in_memory, one = read_training_data([("a", "b"), Pair("c", "d", corpus="news")])
    assert [p.corpus for p in in_memory] == ["data", "news"] and [c.name for c in one] == ["data", "news"]
    # given in memory, a Pair that names its corpus keeps it (a tagged model validates it with that tag)
    assert [p.corpus for p in read_pair_data([("a", "b"), Pair("c", "d", corpus="news")])] == [None, "news"]


MANIFEST = """\
[[corpus]]
path = "en-ta-tico19/en-ta.tsv"
name = "tico19"
weight = 2
tag = "covid"

[[corpus]]
path = "en-ta-nlpc-uom/glossary.tsv"
"""


def test_a_toml_or_csv_manifest_names_weights_and_tags(data_folder):
    (data_folder / "corpora.toml").write_text(MANIFEST, encoding="utf-8")
    corpora = find_corpora(data_folder / "corpora.toml")
    assert corpora == [Corpus("tico19", data_folder / "en-ta-tico19/en-ta.tsv", 2.0, "covid"),
                       Corpus("en-ta-nlpc-uom/glossary", data_folder / "en-ta-nlpc-uom/glossary.tsv")]
    (data_folder / "corpora.csv").write_text("path,weight,tag\nen-ta-bible/en-ta.tsv.gz,0.5,\n", encoding="utf-8")
    assert find_corpora(data_folder / "corpora.csv") == [Corpus("en-ta-bible", data_folder / "en-ta-bible/en-ta.tsv.gz",
                                                                0.5)]


@pytest.mark.parametrize("manifest, field, words", [
    ('[[corpus]]\npath = "a.tsv"\ncolour = "red"\n', "data.corpus[0].colour", "unknown key"),
    ('[[corpus]]\npath = "missing.tsv"\n', "data.corpus[0].path", "is not a file"),
    ('[[corpus]]\nname = "a"\n', "data.corpus[0].path", "is required"),
    ('[[corpus]]\npath = "a.tsv"\n[[corpus]]\npath = "b.tsv"\nname = "a"\n', "data", "two corpora are named 'a'"),
    ('[[corpus]]\npath = "a.tsv"\nweight = -1\n', "data.corpus[0].weight", "positive number"),
    ('[[corpus]]\npath = "a.tsv"\nweight = "lots"\n', "data.corpus[0].weight", "positive number"),
    ('[[corpus]]\npath = "a.tsv"\ntag = "two words"\n', "data.corpus[0].tag", "a word of letters"),
    ('corpora = []\n', "data.corpora", "unknown key"),
    ('[[corpus]\n', "data", "not valid TOML"),
    ('', "data", "lists no corpus"),
])
def test_a_bad_manifest_is_one_line_naming_the_field(tmp_path, manifest, field, words):
    _pairs(tmp_path / "a.tsv"), _pairs(tmp_path / "b.tsv")
    (tmp_path / "corpora.toml").write_text(manifest, encoding="utf-8")
    with pytest.raises(BadInput) as caught:
        find_corpora(tmp_path / "corpora.toml")
    assert caught.value.field == field and words in str(caught.value) and "\n" not in str(caught.value)


def test_missing_files_and_empty_folders_are_one_line(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        find_corpora(f"{_pairs(tmp_path / 'a.tsv')},{tmp_path / 'b.tsv'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="no pair files"):
        find_corpora(tmp_path / "empty")
    with pytest.raises(BadInput, match="two corpora are named 'a'"):
        find_corpora([tmp_path / "a.tsv", tmp_path / "a.tsv"])


# --- weights ----------------------------------------------------------------------------------------


def test_a_weight_multiplies_a_corpus_share_and_a_fraction_is_redrawn():
    groups = np.array([0] * 10 + [1] * 10)
    first, second = (weighted_draw(groups, (2.0, 0.5), np.random.default_rng(seed)) for seed in (0, 1))
    counts = Counter(first.tolist())
    assert all(counts[i] == 2 for i in range(10)) and sum(counts[i] for i in range(10, 20)) == 5
    assert max(counts[i] for i in range(10, 20)) == 1
    assert set(first[first >= 10]) != set(second[second >= 10])  # a different half each epoch


def test_a_weighted_plan_keeps_its_steps_and_trains_the_draw():
    plan = PairBatchPlan(np.full(20, 4), batch_size=5, groups=np.array([0] * 10 + [1] * 10), weights=(2.0, 0.5))
    assert plan.steps == 5  # 25 pairs an epoch
    for epoch in range(3):
        batches = plan.epoch(epoch)
        rows = Counter(np.concatenate(batches).tolist())
        assert len(batches) == 5 and all(rows[i] == 2 for i in range(10)) and sum(rows.values()) == 25
    with pytest.raises(ValueError):
        PairBatchPlan(np.full(4, 4), batch_size=2, weights=(1.0,))


def test_auto_weights_temper_the_corpus_sizes_and_keep_the_epoch():
    weights, why = corpus_weights_rule({"big": 10_000, "small": 100})
    assert weights["big"] < 1 < weights["small"]
    assert 10_000 * weights["big"] + 100 * weights["small"] == pytest.approx(10_100, rel=1e-3)
    share = 100 * weights["small"] / 10_100
    assert share == pytest.approx(100 ** (1 / CORPUS_TEMPERATURE) / (100 ** 0.2 + 10_000 ** 0.2), rel=1e-3)
    assert f"T={CORPUS_TEMPERATURE:g}" in why and "big 10,000 pairs" in why
    assert corpus_weights_rule({"a": 50, "b": 5000}, temperature=1.0)[0] == {"a": 1.0, "b": 1.0}


def _train_pairs(sizes: dict[str, int]) -> list[Pair]:
    return [Pair(f"s{name}{i}", "t", corpus=name) for name, size in sizes.items() for i in range(size)]


def test_the_mix_chooses_weights_only_when_none_are_given():
    train = _train_pairs({"a": 30, "b": 3})
    auto = domains.corpus_mix([Corpus("a"), Corpus("b")], train, tags_on=False)
    assert auto.weights_why and auto.weights[0] < 1 < auto.weights[1] and auto.tags == []
    given = domains.corpus_mix([Corpus("a", weight=3.0), Corpus("b")], train, tags_on=False)
    assert given.weights == (3.0, 1.0) and given.weights_why is None
    assert len(domains.epoch_rows(given, train, seed=0)) == 93  # what the auto rules size the run by
    alone = domains.corpus_mix([Corpus("a")], train[:30], tags_on=False)
    assert alone.weights is None and alone.weights_why is None  # one corpus: every pair once, as always
    assert list(domains.epoch_rows(alone, train[:30], seed=0)) == list(range(30))
    assert list(auto.groups(train[28:])) == [0, 0, 1, 1, 1]


def test_a_cut_datastore_keeps_the_most_weighted_corpora_first_each_shuffled():
    train = _train_pairs({"big": 30, "small": 3, "mid": 10})  # in file order: big first
    mix = domains.corpus_mix([Corpus("big"), Corpus("small"), Corpus("mid")], train, tags_on=False)
    order = domains.datastore_order(mix, mix.groups(train), len(train), seed=0)
    assert sorted(order) == list(range(len(train)))  # every pair once
    corpora = [train[i].corpus for i in order]
    assert corpora == ["small"] * 3 + ["mid"] * 10 + ["big"] * 30  # auto weights small corpora up per pair
    assert list(order[13:]) != list(range(13, 43))  # a corpus's own pairs in a seeded random order
    assert list(order) == list(domains.datastore_order(mix, mix.groups(train), len(train), seed=0))
    alone = domains.datastore_order(None, None, 30, seed=1)
    assert sorted(alone) == list(range(30)) and list(alone) != list(range(30))


def test_the_settings_line_shows_the_chosen_weights():
    line = describe(10, 20, {"corpus_weights": {"value": {"a": 0.5, "b": 3.25}}, "dim": {"value": 32}})
    assert "corpus_weights=a:0.5,b:3.25, dim=32" in line


# --- tags ------------------------------------------------------------------------------------------


def test_tags_default_to_the_corpus_name_as_a_word_and_neutral_pairs_keep_none():
    train = _train_pairs({"en-ta/news wire": 200, "b": 200})
    mix = domains.corpus_mix([Corpus("en-ta/news wire"), Corpus("b", tag="bee")], train, tags_on=True)
    assert [c.tag for c in mix.corpora] == ["en-ta-news-wire", "bee"] and mix.tags == ["bee", "en-ta-news-wire"]
    table = {"bee": {"id": 7}, "en-ta-news-wire": {"id": 8}}
    ids = domains.training_tags(mix, train, table, seed=0)
    assert set(ids) == {None, 7, 8}
    assert ids.count(None) / len(ids) == pytest.approx(domains.NEUTRAL_SHARE, abs=0.04)
    given = [train[0], Pair("given", "t"), Pair("named", "t", corpus="b"), Pair("other", "t", corpus="zz")]
    assert domains.held_out_tags(mix, given, table) == [8, None, 7, None]  # a corpus the run never trained on: none


def test_each_vocabulary_keeps_a_tag_as_one_id():
    from kformer.text.subword import learn_vocabularies
    from kformer.text.word_vocab import WordVocabulary
    from kformer.text.wordpiece import WordPieceVocabulary

    sources = [f"the cat sat on mat number {i}" for i in range(30)]
    subwords, _ = learn_vocabularies(sources, sources, 300, shared=True, symbols=["<news>", "<law>"])
    words = WordVocabulary.learn([*sources, "<law>", "<news>"])
    wordpiece = WordPieceVocabulary.from_tokens(["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                 "the", "cat"])
    for vocab in (subwords, words):
        table = domains.tag_table(vocab, ["news", "law"])
        assert vocab.pieces([table["news"]["id"], table["law"]["id"]]) == ["<news>", "<law>"]
        assert domains.tagged(vocab, [[9, 10]], [table["law"]["id"]]) == [[table["law"]["id"], 9, 10]]
    table = domains.tag_table(wordpiece, ["news", "law"])  # BERT: [unusedN] in tag order, after [CLS]
    assert table == {"law": {"token": "[unused0]", "id": 1}, "news": {"token": "[unused1]", "id": 2}}
    assert domains.tagged(wordpiece, [[4, 7, 5]], [2]) == [[4, 2, 7, 5]]
    with pytest.raises(BadInput, match="unused"):
        domains.tag_table(wordpiece, ["a", "b", "c"])


def test_a_domain_must_be_one_the_model_knows():
    manifest = {"tags": {"law": {"token": "<law>", "id": 5}, "news": {"token": "<news>", "id": 6}}}
    assert domains.domain_ids(manifest, "news", 2) == [6, 6]
    assert domains.domain_ids(manifest, ["law", None], 2) == [5, None]
    assert domains.domain_ids({}, None, 1) == [None]
    with pytest.raises(BadInput, match="unknown domain 'sport'; known: law, news"):
        domains.domain_ids(manifest, "sport", 1)
    with pytest.raises(BadInput, match="trained without corpus tags"):
        domains.domain_ids({}, "news", 1)
    with pytest.raises(BadInput, match="one per text"):
        domains.domain_ids(manifest, ["law"], 2)


def test_the_service_takes_a_domain_parameter():
    from kformer.tasks.translate import Translator

    translator = Translator(None, None, None, ".", {"tags": {"law": {"token": "<law>", "id": 5}}})
    assert translator.check_parameters({"domain": "law"})["domain"] == "law"
    assert translator.check_parameters({})["domain"] is None
    for bad in ("sport", 3):
        with pytest.raises(BadInput) as caught:
            translator.check_parameters({"domain": bad})
        assert caught.value.field == "parameters.domain"


def test_the_cli_takes_several_corpora_and_a_domain():
    from kformer.cli import build_parser
    from kformer.cli.translate import default_out

    args = build_parser().parse_args(["train", "translate", "--data", "a.tsv,b/", "--corpus-tags"])
    assert args.data == "a.tsv,b/" and args.corpus_tags is True
    assert str(default_out(args.data)) == "runs/a" and str(default_out("data/en-ta-bible/")) == "runs/en-ta-bible"
    assert build_parser().parse_args(["translate", "runs/x", "hi", "--domain", "law"]).domain == "law"


# --- one tiny run ------------------------------------------------------------------------------------

TINY = {"vocab_size": 120, "dim": 32, "heads": 2, "ff_dim": 64, "encoder_layers": 1, "decoder_layers": 1,
        "dropout": 0.0, "batch_size": 16, "learning_rate": 0.01, "label_smoothing": 0.0, "epochs": 1,
        "shared_vocab": True, "jit_compile": False, "corpus_tags": True}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, eager_decoding):
    """Two corpora of number pairs in a manifest (one tagged ``alpha``, one by its name), tags on."""
    from kformer.tasks import translate

    root = tmp_path_factory.mktemp("corpora")
    write_tsv_pairs(root / "first.tsv", number_pairs(40, seed=1))
    (root / "second").mkdir()
    write_tsv_pairs(root / "second" / "en-ta.tsv", number_pairs(40, seed=2))
    (root / "corpora.toml").write_text('[[corpus]]\npath = "first.tsv"\ntag = "alpha"\n\n'
                                       '[[corpus]]\npath = "second/en-ta.tsv"\n', encoding="utf-8")
    result = translate.train(TINY, root / "corpora.toml", root / "model")
    return result, translate.load(root / "model")


def test_a_tagged_run_records_its_corpora_and_translates_by_domain(tiny, capsys):
    from kformer.cli import main

    result, translator = tiny
    manifest = json.loads((result.folder / "kformer.json").read_text(encoding="utf-8"))
    assert [(c["name"], c["tag"]) for c in manifest["corpora"]] == [("first", "alpha"), ("second", "second")]
    assert sum(c["pairs"] for c in manifest["corpora"]) == result.metrics["splits"]["train"]
    weights = result.metrics["auto"]["corpus_weights"]["value"]
    assert weights == {c["name"]: c["weight"] for c in manifest["corpora"]}
    assert sorted(manifest["tags"]) == ["alpha", "second"] and translator.metadata()["domains"] == ["alpha", "second"]
    counted = result.metrics["corpora"]
    assert sum(c["splits"]["test"] for c in counted) == result.metrics["splits"]["test"]
    assert all(isinstance(text, str) for text in translator.translate(["one two"] * 2, domain=["alpha", None]))
    assert translator.predict(["three"], domain="second")[0]["translation"] is not None
    assert translator.evaluate([("one", "ஒன்று")], domain="alpha")["n"] == 1
    assert translator.corpus_domains([Pair("a", "b", corpus="first"), Pair("a", "b")]) == ["alpha", None]
    with pytest.raises(BadInput, match="unknown domain 'news'; known: alpha, second"):
        translator.translate(["one"], domain="news")
    assert main(["translate", str(result.folder), "one", "--domain", "news"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown --domain 'news'" in err[0]


def test_an_onnx_export_and_the_reference_client_translate_by_domain_as_the_folder(tiny, tmp_path):
    """The tags go into metadata.json (a tag's id first in a subword source, ``tag_position`` 0): the
    served export and docs/onnx_translate_client.py translate with each domain as the folder does."""
    from export_helpers import docs_module

    from kformer import load
    from kformer.export import export

    result, translator = tiny
    meta = export(result.folder, tmp_path / "onnx", "onnx").metadata
    assert meta["tags"] == translator.manifest["tags"] and meta["tag_position"] == 0
    client, served = docs_module("onnx_translate_client").OnnxTranslator(tmp_path / "onnx"), load(tmp_path / "onnx")
    texts = ["one two", "three", "ten nine eight"]
    for domain in (None, "alpha", "second"):
        expected = translator.translate(texts, domain=domain)
        assert client.translate(texts, domain=domain) == expected == served.translate(texts, domain=domain)
        assert [client.source_ids(text, domain) for text in texts] == translator.encode_sources(texts, domain)
