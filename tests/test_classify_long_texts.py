"""Long-document options of the classify encoder: word-bigram tokens and local (windowed) attention."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TICKET_QUEUES, write_tickets

from kformer.cli import main
from kformer.text.vocabulary import RESERVED_TOKENS
from kformer.text.words import WordTokenizer, bigram_vocabulary


def test_bigram_vocabulary_and_tokens():
    texts = ["not good at all", "not good , not bad", "good film"]
    vocabulary = bigram_vocabulary(texts, len(RESERVED_TOKENS) + 8, RESERVED_TOKENS)
    assert vocabulary[: len(RESERVED_TOKENS)] == list(RESERVED_TOKENS)
    assert "not good" in vocabulary and "good" in vocabulary and len(vocabulary) == len(RESERVED_TOKENS) + 8
    index = {token: i for i, token in enumerate(vocabulary)}
    tokenizer = WordTokenizer(vocabulary, 8, "head")
    (row,) = tokenizer(["Not good at all, really"])
    # half the length for words (unknown ones -> [UNK] = 1), then the known bigrams among them
    words = [index.get(w, 1) for w in ["not", "good", "at", "all"]]
    known_bigrams = [index[b] for b in ["not good", "good at", "at all"] if b in index]
    assert row.tolist() == words + known_bigrams + [0] * (4 - len(known_bigrams))
    assert not WordTokenizer(list(RESERVED_TOKENS) + ["good"], 8).with_bigrams  # plain word vocabularies


@pytest.mark.slow
def test_windowed_encoder_matches_full_attention_within_one_window_and_ignores_padding(tmp_path):
    import keras

    from kformer.folders import load_keras_model
    from kformer.models.classifier import build_encoder_classifier

    keras.utils.set_random_seed(0)
    windowed = build_encoder_classifier(30, 3, 8, dim=8, heads=2, ff_dim=16, window=8, dropout=0.0)
    full = build_encoder_classifier(30, 3, 8, dim=8, heads=2, ff_dim=16, dropout=0.0)
    full.set_weights(windowed.get_weights())  # same weights: the window layers have none
    short = np.array([[4, 5, 6, 7, 0, 0, 0, 0], [9, 8, 7, 6, 5, 4, 3, 2]], dtype="int32")
    np.testing.assert_allclose(windowed.predict(short, verbose=0), full.predict(short, verbose=0), atol=1e-5)

    long = np.zeros((2, 21), dtype="int32")
    long[0, :19], long[1, :3] = np.arange(2, 21), [4, 5, 6]
    probs = windowed.predict(long, verbose=0)
    padded = np.pad(long, [[0, 0], [0, 11]])  # more padding, more (empty) windows: same answer
    np.testing.assert_allclose(windowed.predict(padded, verbose=0), probs, atol=1e-5)
    np.testing.assert_allclose(probs[1], full.predict(long[1:, :8], verbose=0)[0], atol=1e-5)  # one window only
    # A text spanning three windows differs from its first window alone (the later windows count).
    assert np.abs(probs[0] - windowed.predict(long[:1, :8], verbose=0)[0]).max() > 1e-4

    path = tmp_path / "model.keras"
    windowed.save(path)
    np.testing.assert_allclose(load_keras_model(path).predict(long, verbose=0), probs, atol=1e-6)


@pytest.mark.slow
def test_train_with_bigrams_and_windows_then_predict(tmp_path):
    from kformer.tasks.classify import load

    data = write_tickets(tmp_path / "train.csv", 120, seed=2)
    recipe = tmp_path / "long.toml"
    recipe.write_text('ngrams = 2\nwindow = 8\nmax_length = 32\nvocab_size = 300\nepochs = 1\n', encoding="utf-8")
    out = tmp_path / "model"
    assert main(["train", "classify", "--data", str(data), "--out", str(out), "--recipe", str(recipe), "--quiet"]) == 0
    vocabulary = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert any(" " in token for token in vocabulary)  # bigrams learned
    manifest = json.loads((out / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["recipe"]["window"] == 8 and manifest["recipe"]["ngrams"] == 2
    classifier = load(out)
    assert classifier.labels == manifest["labels"] == sorted(TICKET_QUEUES)
    texts = ["my laptop screen is broken " * 10, "refund", "my vpn password " * 3]
    probs = classifier.probabilities(texts, batch_size=2)  # three lengths: three width buckets
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    for row, result in zip(probs, classifier.predict(texts, top_k=2), strict=True):
        assert result["label"] == classifier.labels[int(row.argmax())]
        assert [t["probability"] for t in result["top_k"]] == pytest.approx(sorted(row, reverse=True)[:2], abs=1e-5)
    # one text alone gets the same probabilities as inside a batch of padded rows
    np.testing.assert_allclose(classifier.probabilities(texts[:1]), probs[:1], atol=1e-5)
    maps = classifier.attention_maps(texts[0])
    assert maps.maps["encoder"].shape == (1, 2, 8, 8)  # the first window of 8 tokens
    assert maps.rows["encoder"] == ["my", "laptop", "screen", "[UNK]", "[UNK]", "my", "laptop", "screen"]  # is, broken: unseen

    # a recipe folder exports: word pairs tokenised in the graph too (the SavedModel's texts signature)
    from export_helpers import check_classifier_exports

    metadata = check_classifier_exports(out, [*texts, "", "vpn vpn laptop, Refund!"], tmp_path / "exports")
    assert metadata["saved_model"]["tokenizer"]["word_pairs"] is True
    assert set(metadata["saved_model"]["signatures"]) == {"serving_default", "texts"}


@pytest.mark.parametrize("setting", ["ngrams = 3", "window = -1", 'ngrams = 2\ntokenizer = "wordpiece"'])
def test_bad_long_text_settings_are_refused(tmp_path, setting, capsys):
    data = write_tickets(tmp_path / "train.csv", 30, seed=1)
    recipe = tmp_path / "bad.toml"
    recipe.write_text(setting + "\n", encoding="utf-8")
    assert main(["train", "classify", "--data", str(data), "--out", str(tmp_path / "m"), "--recipe", str(recipe)]) == 2
    assert "setting" in capsys.readouterr().err and not (tmp_path / "m").exists()
