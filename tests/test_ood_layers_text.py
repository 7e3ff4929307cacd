"""The out-of-scope scores of issue 34 part 2, on tiny data made here: the layer-wise Mahalanobis
score (every encoder block's pooled output, standardised on the training texts, averaged) against
a hand computation, in NumPy and as graph ops; the wide part's TF-IDF novelty (a novel vocabulary
scores as further away than in-scope wording); and the weight of the combined rule, chosen on
validation AUROC. The scores in a trained folder, its exports and runtimes: tests/test_ood_score.py."""

from __future__ import annotations

import numpy as np
import pytest
from test_ood_score import HELD_OUT, INTENTS, _rows

from kformer.tasks.classify.ood import LAYERS, fit_score, mahalanobis_stats
from kformer.tasks.classify.ood_text import COMBINED_WEIGHTS, choose_weight, fit_tfidf, load_ood


def _hand_mahalanobis(vectors, labels, classes):
    """Nearest-class squared Mahalanobis distances ``(n,)``, each written out as (x - m)' P (x - m)."""
    stats = mahalanobis_stats(vectors, labels, classes)
    return np.array([[(v - m) @ stats["precision"] @ (v - m) for m in stats["means"]] for v in vectors]).min(axis=1)


@pytest.fixture(scope="module")
def two_blocks():
    """``(model, ids (36, 8), labels (36,), pooled [(36, 8)] per block by hand)``: an untrained
    two-block encoder classifier of 3 classes, texts of 1..8 tokens, each block's output averaged
    over the real tokens by hand."""
    import keras

    from kformer.layers import padding_mask
    from kformer.models.classifier import build_encoder_classifier

    keras.utils.set_random_seed(0)
    model = build_encoder_classifier(40, 3, 8, dim=8, heads=2, ff_dim=16, blocks=2, dropout=0.0)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 40, size=(36, 8)).astype("int32")
    ids[np.arange(8)[None, :] >= rng.integers(1, 9, size=36)[:, None]] = 0
    x, mask, real = model.get_layer("embedding")(ids), padding_mask(ids), (ids != 0)[..., None]
    pooled = []
    for i in range(2):
        x = model.get_layer(f"encoder_{i}")(x, mask=mask, training=False)
        pooled.append((np.asarray(x) * real).sum(axis=1) / real.sum(axis=1))
    return model, ids, np.arange(36) % 3, pooled


def test_layer_wise_mahalanobis_equals_a_hand_computation(two_blocks):
    from kformer.models.classifier import with_text_vectors
    from kformer.tasks.classify.ood_graph import tf_ood_score

    model, ids, labels, pooled = two_blocks
    outputs = with_text_vectors(model, layers=True).predict_on_batch(ids)  # (36, 3 + 2 * 8)
    np.testing.assert_allclose(outputs[:, 3:], np.concatenate(pooled, axis=1), atol=1e-5)
    np.testing.assert_allclose(outputs[:, -8:], with_text_vectors(model).predict_on_batch(ids)[:, 3:], atol=1e-6)

    vectors = outputs[:, 3:].astype("float64")
    score = fit_score(LAYERS, vectors, labels, 3, layers=2)
    blocks = [_hand_mahalanobis(vectors[:, i * 8:(i + 1) * 8], labels, 3) for i in range(2)]
    standardised = [(d - d.mean()) / d.std() for d in blocks]  # on the training texts themselves
    np.testing.assert_allclose(score(vectors), -np.mean(standardised, axis=0), rtol=1e-6, atol=1e-9)
    assert score.manifest()["layers"] == 2 and score.dim == 16 and score.vectors == "layers"
    far = vectors + 5.0
    assert (score(far) < score(vectors).min()).all()  # away from every class: lower than any training text
    # the graph form (float32): what the exports compute
    queries = np.concatenate([vectors, far]).astype("float32")
    np.testing.assert_allclose(tf_ood_score(score)(queries).numpy(), score(queries), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_every_blocks_vectors_convert_to_onnx_for_the_onnx_runtimes(two_blocks, tmp_path):
    """The onnx runtimes convert the network with every block's pooled vectors (two blocks here;
    the trained folder of tests/test_ood_score.py has one): the same numbers as Keras."""
    from types import SimpleNamespace

    from kformer.tasks.classify.runtimes import OnnxPredictor

    model, ids, _, pooled = two_blocks
    classifier = SimpleNamespace(model=model, kind="encoder", labels=["a", "b", "c"], max_length=8, folder=tmp_path)
    predictor = OnnxPredictor.for_classifier(classifier, vectors="layers")
    assert predictor.vectors == "layers" and predictor.width == 3 + 2 * 8
    np.testing.assert_allclose(predictor(ids)[:, 3:], np.concatenate(pooled, axis=1), atol=1e-5)
    np.testing.assert_allclose(predictor(ids)[:, :3], model.predict_on_batch(ids), atol=1e-5)


@pytest.fixture(scope="module")
def wide_part():
    from kformer.tasks.classify import wide_fit

    texts, labels = zip(*_rows(20, 1, INTENTS.items()), strict=True)
    return wide_fit.fit(list(texts), list(labels), sorted(INTENTS)), list(texts)


def test_tfidf_novelty_is_higher_for_a_novel_vocabulary(wide_part, tmp_path):
    from kformer.tasks.classify.wide import Mix

    part, texts = wide_part
    novelty = fit_tfidf(part, texts, k=3)
    inside = [t for t, _ in _rows(3, 2, INTENTS.items())]
    outside = [t for t, _ in _rows(3, 3, [HELD_OUT])]  # the filler words are shared, the intent's are new
    assert novelty.of(None, None, outside).max() < novelty.of(None, None, inside).min()
    assert novelty.of(None, None, ["¤¤ ¤¤¤"]) == pytest.approx([-1.0])  # no n-gram of the training texts at all
    # by hand: the cosine of the text's TF-IDF vector with its 3rd most similar training text's
    features = part.transform(texts + inside).toarray().astype("float64")
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    cosines = unit[len(texts):] @ unit[: len(texts)].T
    np.testing.assert_allclose(novelty.of(None, None, inside), -(1.0 - np.sort(cosines, axis=1)[:, -3]), atol=1e-5)
    # a bounded bank: a sample of the training texts
    assert fit_tfidf(part, texts, rows=10).bank.shape == (10, novelty.bank.shape[1])
    # kept in the folder without pickle, read back with the folder's wide part
    novelty.save(tmp_path)
    again = load_ood(tmp_path, novelty.manifest(), Mix(part, 0.0))
    np.testing.assert_array_equal(again.of(None, None, outside), novelty.of(None, None, outside))


def test_the_combined_weight_follows_the_score_that_separates_validation():
    rng = np.random.default_rng(0)
    noise = (rng.normal(size=40), rng.normal(size=20))  # separates nothing
    clean = (rng.normal(size=40) + 3.0, rng.normal(size=20) - 3.0)  # separates in- from out-of-scope
    centre, scale = (0.0, 0.0), (1.0, 1.0)
    weight, table = choose_weight(noise, clean, centre, scale)
    best = max(table.values())
    assert table["1"] == best == 1.0 and table["0"] < 0.8
    assert weight >= 0.5 and weight == min(w for w in COMBINED_WEIGHTS if table[f"{w:g}"] == best)  # ties: the smaller
    weight, table = choose_weight(clean, noise, centre, scale)
    assert weight == 0.0 and list(table) == [f"{w:g}" for w in COMBINED_WEIGHTS]
    # both help: some of each beats either alone
    half = (np.r_[rng.normal(size=20) + 3.0, rng.normal(size=20)], np.r_[rng.normal(size=10) - 3.0, rng.normal(size=10)])
    other = (np.r_[rng.normal(size=20), rng.normal(size=20) + 3.0], np.r_[rng.normal(size=10), rng.normal(size=10) - 3.0])
    weight, table = choose_weight(half, other, centre, scale)
    assert 0.0 < weight < 1.0 and table[f"{weight:g}"] > max(table["0"], table["1"])
