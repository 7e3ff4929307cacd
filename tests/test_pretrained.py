"""BERT backbones (issue 9 part 2): the mean-pooling head, bucketed prediction equal to fully padded
prediction, weight decay exclusions and a time budget's learning-rate decay. Tiny randomly
initialised ``bert-scratch`` models keep these fast."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kformer.text.vocabulary import RESERVED_TOKENS

VOCABULARY = [*RESERVED_TOKENS, "my", "card", "has", "not", "arrived", "refund", "please", "top", "up", "failed",
              *[str(i) for i in range(40)]]


def _tiny(pooling: str = "mean", n_classes: int = 3, max_length: int = 40):
    from kformer.models.pretrained import build_bert_classifier

    return build_bert_classifier("bert-scratch", n_classes, max_length, vocabulary=VOCABULARY, layers=1, dim=16,
                                 heads=2, ff_dim=32, dropout=0.0, pooling=pooling)


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = VOCABULARY[len(RESERVED_TOKENS):]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 20)))) for _ in range(n)]


def _classifier(model, tmp_path: Path, n_classes: int = 3):
    from kformer.tasks.classify import Classifier

    return Classifier(tmp_path, {"labels": [f"c{i}" for i in range(n_classes)], "kind": "bert"}, model)


def test_mean_pooling_averages_only_real_tokens_and_ignores_padding():
    import keras

    from kformer.models.bert_classifier import MeanPoolBertClassifier
    from kformer.models.pretrained import bert_inputs

    model = _tiny()
    assert isinstance(model, MeanPoolBertClassifier)
    ids = np.array([[2, 5, 6, 3, 0, 0, 0, 0]], dtype="int32")  # [CLS] my card [SEP] + padding
    short, long = bert_inputs(keras.ops.convert_to_tensor(ids[:, :4]))[0], bert_inputs(keras.ops.convert_to_tensor(ids))[0]
    out_short = keras.Model.predict_on_batch(model, short)
    out_long = keras.Model.predict_on_batch(model, long)
    np.testing.assert_allclose(out_short, out_long, atol=1e-6)
    # the head sees the mean of the backbone's token vectors over the 4 real tokens
    sequence = np.asarray(model.backbone(long)["sequence_output"])[0]
    logits_layer = model.get_layer("logits")
    expected = keras.activations.softmax(sequence[:4].mean(axis=0, keepdims=True) @ logits_layer.kernel.numpy()
                                         + logits_layer.bias.numpy())
    np.testing.assert_allclose(out_long, np.asarray(expected), atol=1e-5)


@pytest.mark.slow
def test_mean_pooling_model_saves_and_loads_in_safe_mode_and_predicts_raw_text(tmp_path):
    import keras

    model = _tiny()
    path = tmp_path / "m.keras"
    model.save(path)
    import kformer.models.bert_classifier  # noqa: F401  registration, as classify.load does

    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded).__name__ == "MeanPoolBertClassifier" and loaded.get_layer("mean_pooling")
    texts = ["my card has not arrived", "refund please"]
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), model.predict(texts, verbose=0), atol=1e-6)


@pytest.mark.slow
def test_bucketed_bert_prediction_equals_full_padding(tmp_path):
    """Sorted by length, cut to each batch's longest row (width buckets) and padded to batch
    buckets: the same probabilities as every text padded to max_length in input order."""
    classifier = _classifier(_tiny(max_length=24), tmp_path)
    texts = _texts(48)
    ids = classifier.features(texts)
    assert ids.shape == (48, 24)
    bucketed = classifier.probabilities(texts, batch_size=16)  # 3 batches of 16 rows, each its own width
    lengths = np.sort((ids != 0).sum(axis=1))
    assert lengths[15] <= 16 and lengths[-1] > 16  # the texts really fall in different width buckets
    full = classifier._probabilities_of_ids(ids)  # one batch, every row padded to max_length
    assert full.shape == (48, 3)
    np.testing.assert_allclose(bucketed, full, atol=1e-5)
    # batch sizes past the largest batch bucket are cut to it: no new (retraced) shapes
    np.testing.assert_allclose(classifier.probabilities(texts, batch_size=256), full, atol=1e-5)


@pytest.mark.slow
def test_bert_prediction_cuts_each_batch_to_its_longest_row_in_one_traced_graph(tmp_path):
    """On TensorFlow the BERT network runs as one graph of any shape: each length-sorted batch is
    cut to exactly its longest row (no width bucket, no filler rows), traced once for all."""
    classifier = _classifier(_tiny(max_length=24), tmp_path)
    texts = _texts(40, seed=3)
    lengths = np.sort((classifier.features(texts) != 0).sum(axis=1))
    assert classifier.predictor.any_shape
    graph = classifier.predictor.graph
    seen = []
    classifier.predictor.graph = lambda ids: seen.append(ids.shape) or graph(ids)
    probs = classifier.probabilities(texts, batch_size=16)
    assert seen == [(16, lengths[15]), (16, lengths[31]), (8, lengths[39])]
    assert len({width for _, width in seen}) == 3  # three different widths ...
    assert graph.graph.experimental_get_tracing_count() == 1  # ... one trace
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_a_classifier_saved_with_logits_predicts_the_same_probabilities(tmp_path):
    """A KerasHub BERT classifier built without ``activation="softmax"`` (another tool's folder)
    returns logits; kformer reads that from the model, not from the numbers, and applies softmax."""
    from kformer.models.bert_classifier import MeanPoolBertClassifier

    softmax_model = _tiny()
    logits_model = MeanPoolBertClassifier(softmax_model.backbone, num_classes=3,
                                          preprocessor=softmax_model.preprocessor, activation=None, dropout=0.0)
    logits_model.get_layer("logits").set_weights(softmax_model.get_layer("logits").get_weights())
    texts = _texts(12, seed=5)
    expected = _classifier(softmax_model, tmp_path).probabilities(texts)
    np.testing.assert_allclose(_classifier(logits_model, tmp_path).probabilities(texts), expected, atol=1e-5)
    np.testing.assert_allclose(expected.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_compiled_tokenising_gives_the_eager_preprocessors_ids():
    """bert_token_ids runs the preprocessor traced (TensorFlow Text ops); KerasHub's eager call
    takes its pure-Python path. Both must give the same ids: accents, case, punctuation, CJK,
    emoji, unknown words, truncation to max_length."""
    from kformer.models.pretrained import bert_token_ids

    model = _tiny(max_length=12)
    texts = ["My card has NOT arrived!", "Refund, please... top-up failed?", "café naïve résumé", "我的卡 到了吗",
             "card 🙂 please", "zzqx unknownword", " ".join(["card"] * 30), "top up 3 4 5"]
    eager = np.asarray(model.preprocessor(texts)["token_ids"], dtype="int32")
    compiled = bert_token_ids(model, texts, chunk=3)  # several chunks
    assert compiled.shape == (len(texts), 12)
    np.testing.assert_array_equal(compiled, eager)
    assert (compiled[6] != 0).all()  # the long text fills max_length


def test_a_bert_classifiers_accent_rule_travels_to_its_export_and_back(tmp_path):
    """The export's tokenizer metadata carries the classifier's own strip_accents (bert-scratch:
    true, as its vocabulary was learned), and an exported classifier rebuilds its tokenizer with
    it; metadata without the key (an older export) keeps accents, as kformer did."""
    from kformer.models.pretrained import bert_token_ids
    from kformer.tasks.classify.export import tokenizer_spec
    from kformer.tasks.classify.exported import _tokenizer

    model = _tiny(max_length=12)
    spec = tokenizer_spec(_classifier(model, tmp_path))
    assert spec["kind"] == "bert" and spec["lowercase"] is True and spec["strip_accents"] is True
    texts = ["My cárd has NÖT arrivéd", "my card has not arrived"]
    ids = bert_token_ids(_tokenizer(spec, VOCABULARY), texts)
    np.testing.assert_array_equal(ids, bert_token_ids(model, texts))
    np.testing.assert_array_equal(ids[0], ids[1])
    older = bert_token_ids(_tokenizer({k: v for k, v in spec.items() if k != "strip_accents"}, VOCABULARY), texts)
    assert (older[0] == VOCABULARY.index("[UNK]")).sum() == 3 and (older[1] == ids[1]).all()


def test_adamw_leaves_biases_and_layer_norms_undecayed(tmp_path):
    from kformer.tasks.classify import ClassifyConfig
    from kformer.tasks.classify.network import compile_network

    model = _tiny()
    config = ClassifyConfig(backbone="bert-scratch", learning_rate=1e-3, epochs=1)
    compile_network(model, config, 10, "bert")
    decayed = {v.path for v in model.trainable_variables if model.optimizer._use_weight_decay(v)}
    names = {v.path.rsplit("/", 1)[-1] for v in model.trainable_variables if v.path not in decayed}
    assert names == {"bias", "gamma", "beta"}
    assert any(p.endswith("kernel") for p in decayed) and any("embeddings" in p for p in decayed)


def test_time_budget_decays_the_rate_to_zero_by_the_cut(monkeypatch):
    """A run cut by max_minutes ends at a low rate, even though its step-based decay is barely
    started."""
    import time

    import kformer.training as training

    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    class Optimizer:
        class learning_rate:  # noqa: N801
            value = None

            @classmethod
            def assign(cls, value):
                cls.value = value

    class Model:
        optimizer = Optimizer

    callback = training.budget_schedule(1e-4, 10, 10_000, budget_seconds=100.0, final_ratio=0.0, decay="linear")
    callback.set_model(Model)
    callback.on_train_begin()
    rates = []
    for step in range(60):
        callback.on_train_batch_begin(step)
        rates.append(Optimizer.learning_rate.value)
        now[0] += 2.0  # 2 s a batch: the 100 s budget ends after about 50 batches
        callback.on_train_batch_end(step)
    assert rates[9] == pytest.approx(1e-4)  # warmed up
    assert rates[30] == pytest.approx(1e-4 * (1 - 58 / 98), rel=1e-6)  # the clock (from the first batch's end) leads
    assert rates[52] == 0.0 and rates[-1] == 0.0
    resumed = training.budget_schedule(1e-4, 10, 10_000, final_ratio=0.0, decay="linear", initial_step=5_005)
    resumed.set_model(Model)
    resumed.on_train_begin()
    resumed.on_train_batch_begin(0)
    assert Optimizer.learning_rate.value == pytest.approx(1e-4 * 0.5)  # a resumed run continues its decay


def test_bert_training_batches_come_in_few_shapes_for_xla():
    """XLA compiles the BERT step once per batch shape: every training batch has batch_size rows
    (the short one is filled with copies of its rows weighted 0, its real rows weighted up so its
    loss stays their mean) and a width bucket; validation batches keep their rows."""
    from kformer.data.batching import bucket_width
    from kformer.tasks.classify.network import batches as _batches

    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 40, size=40)
    ids = np.zeros((40, 40), dtype="int32")
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(5, 50, size=n)
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, size=40)]
    batches = list(_batches("bert", ids, y, 16, True, seed=1))
    assert len(batches) == 3  # 16 + 16 + 8 rows
    shapes = {tuple(features["token_ids"].shape) for features, _, _ in batches}
    assert {rows for rows, _ in shapes} == {16}
    assert {width for _, width in shapes} <= {bucket_width(n, 40) for n in range(1, 41)}
    weights = [np.asarray(w) for _, _, w in batches]
    assert sorted(sorted(set(w.tolist())) for w in weights) == [[0.0, 2.0], [1.0], [1.0]]
    real = [int(n) for (f, _, _), w in zip(batches, weights, strict=True)
            for n in np.asarray(f["padding_mask"]).sum(axis=1)[w > 0]]
    assert sorted(real) == sorted(lengths.tolist())  # every text once
    for features, _, _ in batches:  # no all-padding row (a mean-pooled 0/0)
        assert np.asarray(features["padding_mask"]).any(axis=1).all()
    valid = list(_batches("bert", ids, y, 16, False))
    assert [len(batch[1]) for batch in valid] == [16, 16, 8]


@pytest.mark.slow
def test_pretrained_run_records_pooling_and_trains_under_a_time_budget(tmp_path, monkeypatch):
    from kformer.tasks import classify
    from kformer.tasks.classify import network

    compiled = []
    original = network.compile_network

    def spy(model, *args, **kwargs):
        callbacks = original(model, *args, **kwargs)
        compiled.append(model.jit_compile)
        return callbacks

    monkeypatch.setattr(network, "compile_network", spy)
    import keras

    import kformer.models.pretrained as pretrained

    validation = []  # (jit_compile, a test function exists) at each epoch end: validation ran as a graph
    make_callback = pretrained.graph_validation

    def watched():
        callback = make_callback()

        class Watch(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                callback.set_model(self.model)
                callback.on_train_begin(logs)

            def on_epoch_end(self, epoch, logs=None):
                validation.append((self.model.jit_compile, self.model.test_function is not None))

            def on_train_end(self, logs=None):
                callback.on_train_end(logs)

        return Watch()

    monkeypatch.setattr(pretrained, "graph_validation", watched)

    rows = [("my card has not arrived " + str(i % 7), "card") for i in range(40)]
    rows += [("refund please " + str(i % 7), "refund") for i in range(40)]
    texts, labels = [t for t, _ in rows], [lb for _, lb in rows]
    settings = {"backbone": "bert-scratch", "dim": 16, "heads": 2, "ff_dim": 32, "blocks": 1, "max_length": 16,
                "epochs": 3, "batch_size": 16, "learning_rate": 5e-3, "max_minutes": 5.0, "vocab_size": 200}
    result = classify.train(settings, (texts, labels), tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["kind"] == "bert" and manifest["pooling"] == "mean"
    model = classify.load(tmp_path / "out")
    assert type(model.model).__name__ == "MeanPoolBertClassifier"
    assert result.metrics["valid"]["accuracy"] >= 0.9
    # the BERT step is XLA-compiled even where Keras' "auto" would not (a CPU-only TensorFlow)
    assert compiled == [True]
    # ... and its validation as a plain graph (no compile per validation shape)
    assert validation and set(validation) == {(False, True)}


def _tiny_bert_folder(folder: Path):
    """A tiny pretrained BERT (a KerasHub preset folder, as ``minilm`` is): ``(backbone, folder)``."""
    import keras_hub

    pretrained = keras_hub.models.BertBackbone(vocabulary_size=len(VOCABULARY), num_layers=1, num_heads=2,
                                               hidden_dim=16, intermediate_dim=32, max_sequence_length=32)
    pretrained.save_to_preset(str(folder))
    keras_hub.models.BertTokenizer(vocabulary=VOCABULARY, lowercase=True).save_to_preset(str(folder))
    return pretrained, folder


@pytest.mark.slow
def test_frozen_backbone_trains_only_the_head_on_cached_vectors(tmp_path):
    from export_helpers import check_classifier_exports, load_as_the_readme_says

    from kformer.models.pretrained import frozen_parts, text_vectors
    from kformer.tasks import classify

    rows = [("my card has not arrived " + str(i % 9), "card") for i in range(40)]
    rows += [("refund please " + str(i % 9), "refund") for i in range(40)]
    texts, labels = [t for t, _ in rows], [lb for _, lb in rows]
    _, backbone = _tiny_bert_folder(tmp_path / "tiny-bert")  # a pretrained folder, as --backbone minilm
    settings = {"backbone": str(backbone), "freeze": True, "max_length": 16, "epochs": 6, "batch_size": 16,
                "learning_rate": 1e-2}
    result = classify.train(settings, (texts, labels), tmp_path / "out")
    cached = np.load(tmp_path / "out" / "training" / "text_vectors.npz")
    assert cached["train"].shape == (72, 16) and cached["valid"].shape == (8, 16)
    model = classify.load(tmp_path / "out")  # the whole network: predicts from raw text like any classifier
    assert model.manifest["recipe"]["freeze"] is True
    encoder, _ = frozen_parts(model.model)
    # the saved backbone is the one the cached vectors came from (it was not trained)
    vectors = text_vectors(encoder, model.features(texts))
    assert max(np.abs(vectors - row).max(axis=1).min() for row in cached["train"]) < 1e-5
    probs = model.probabilities(["my card has not arrived 3", "refund please 4"])
    assert probs.argmax(axis=1).tolist() == [model.labels.index("card"), model.labels.index("refund")]
    assert result.metrics["valid"]["accuracy"] == 1.0
    metadata = check_classifier_exports(tmp_path / "out", [*texts[::10], "", "REFUND, please!!"], tmp_path / "exports")
    assert metadata["onnx"]["tokenizer"]["kind"] == "bert"
    # WordPiece needs TensorFlow Text's ops: its texts signature is a SavedModel of its own, so a fresh Python
    # loads 1/ with plain TensorFlow, and texts/1 after the `import tensorflow_text` its README line names
    sample = [*texts[:2], "REFUND, please!!"]
    fresh = load_as_the_readme_says(tmp_path / "exports" / "saved_model", {
        "serving_default": {"token_ids": model.features(sample).tolist()}, "texts": {"texts": sample}})
    for outputs in fresh.values():
        np.testing.assert_allclose(outputs["probabilities"], model.probabilities(sample), atol=1e-4)


@pytest.mark.slow
def test_freeze_token_embedding_trains_all_but_the_pretrained_token_table(tmp_path):
    """A pretrained folder (a tiny KerasHub preset) fine-tuned with ``freeze_token_embedding``: the
    saved token table is the folder's, the encoder's weights moved; its export graphs and onnx
    runtime give the folder's Mahalanobis scores (saving and loading a BERT export: the previous
    test); a scratch backbone is refused."""
    from export_helpers import check_classifier_graphs

    from kformer.errors import BadInput
    from kformer.tasks import classify

    pretrained, folder = _tiny_bert_folder(tmp_path / "tiny-bert")
    rows = [("my card has not arrived " + str(i % 9), "card") for i in range(40)]
    rows += [("refund please " + str(i % 9), "refund") for i in range(40)]
    settings = {"backbone": str(folder), "freeze_token_embedding": True, "max_length": 16, "epochs": 2,
                "batch_size": 16, "learning_rate": 1e-2, "calibrate": True, "ood_score": "mahalanobis"}
    classify.train(settings, ([t for t, _ in rows], [lb for _, lb in rows]), tmp_path / "out")
    trained = classify.load(tmp_path / "out").model.backbone
    np.testing.assert_array_equal(trained.token_embedding.get_weights()[0], pretrained.token_embedding.get_weights()[0])
    moved = [np.abs(a - b).max() for a, b in zip(trained.transformer_layers[0].get_weights(),
                                                  pretrained.transformer_layers[0].get_weights(), strict=True)]
    assert max(moved) > 1e-3
    texts = [t for t, _ in rows[::8]] + ["", "Card 12 has NOT arrived?"]
    # a fine-tuned BERT exports, its Mahalanobis score computed in the graph
    check_classifier_graphs(tmp_path / "out", texts, tmp_path / "graphs")
    keras_scores = classify.load(tmp_path / "out").scored(texts)[1]
    np.testing.assert_allclose(classify.load(tmp_path / "out", runtime="onnx").scored(texts)[1], keras_scores, rtol=1e-4)
    with pytest.raises(BadInput, match="pretrained BERT backbone"):
        classify.ClassifyConfig(backbone="bert-scratch", freeze_token_embedding=True)
