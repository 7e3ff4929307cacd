"""``contrastive_weight``: a supervised contrastive term in training (issue 34, "features that
separate") that leaves the saved network, its exports and its predictions as they were. The loss
itself is tested in ``tests/layers/test_contrastive.py``."""

from __future__ import annotations

import zipfile

import keras
import numpy as np
import pytest
from test_unknown_label import OTHER, _tickets

from kformer.errors import BadInput
from kformer.tasks import classify
from kformer.tasks.classify import ClassifyConfig, network


def test_contrastive_settings_refused_where_they_cannot_apply():
    for settings, field, says in (
        ({"contrastive_weight": 0.5, "freeze": True, "backbone": "bert-scratch"}, "contrastive_weight", "freeze"),
        ({"contrastive_weight": -1.0}, "contrastive_weight", "0 (off) or above"),
        ({"contrastive_temperature": 0.0}, "contrastive_temperature", "above 0"),
        ({"contrastive_per_class": -1}, "contrastive_per_class", "0 or more"),
    ):
        with pytest.raises(BadInput) as caught:
            ClassifyConfig(**settings)
        assert caught.value.field == field and says in str(caught.value) and "\n" not in str(caught.value)


def test_contrastive_batches_hold_each_class_in_runs_and_leave_filler_copies_out():
    from kformer.data.batching import class_grouped_batches

    classes = np.repeat([0, 1, 2, 3, 4, -1], [8, 4, 12, 4, 4, 3])  # -1: "none of these" rows
    lengths = np.random.default_rng(1).integers(1, 30, size=len(classes))
    batches = class_grouped_batches(lengths, classes, 10, 4, np.random.default_rng(0))
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(classes)))  # every row once
    for rows in batches:
        assert len(rows) <= 10
        for row in rows[classes[rows] >= 0]:  # every text of a class has a positive in its batch
            assert (classes[rows] == classes[row]).sum() >= 2
    # Keras fixes an epoch's steps from the first: every shuffle packs into as many batches
    counts = {len(class_grouped_batches(lengths, classes, 10, 4, np.random.default_rng(seed))) for seed in range(40)}
    many = np.random.default_rng(2).integers(-1, 77, size=3000)
    counts_many = {len(class_grouped_batches(np.ones(3000, int), many, 32, 4, np.random.default_rng(seed)))
                   for seed in range(10)}
    assert len(counts) == 1 and len(counts_many) == 1
    x, y = np.ones((3, 5), "int32"), np.eye(3, dtype="float32")
    features, _, _ = network.with_contrast_targets(x, y, np.array([1.0, 0.0, 2.0], "float32"))
    assert np.asarray(features["contrast_targets"]).tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 1]]
    assert np.asarray(features["token_ids"]).shape == (3, 5)


@pytest.mark.slow
def test_a_contrastive_run_saves_the_plain_network_which_loads_safely_and_predicts_as_trained(tmp_path, monkeypatch):
    trained = {}
    fit_network = network.fit_network

    def keep(classifier, config, *args, **kwargs):  # the in-memory classifier, after its training
        trained["classifier"], trained["config"] = classifier, config
        return fit_network(classifier, config, *args, **kwargs)

    monkeypatch.setattr(network, "fit_network", keep)
    texts, labels = _tickets(96, 4, 16)
    settings = {"contrastive_weight": 0.5, "unknown_label": OTHER, "calibrate": False, "epochs": 1, "dim": 16,
                "ff_dim": 32, "heads": 2, "blocks": 1, "max_length": 12, "vocab_size": 120, "batch_size": 32,
                "wide": False, "refit": False}
    result = classify.train(settings, (texts, labels), tmp_path / "m")
    assert result.config.contrastive_weight == 0.5 and np.isfinite(result.metrics["valid"]["accuracy"])
    history = (tmp_path / "m" / "training" / "history.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert "val_macro_f1" in history  # the contrastive network reports the same metrics as the plain one
    with zipfile.ZipFile(tmp_path / "m" / "training" / "checkpoint.keras") as checkpoint:  # what fit trained
        assert "SupervisedContrastive" in checkpoint.read("config.json").decode("utf-8")

    classifier = trained["classifier"]
    loaded = result.load()  # model.keras, loaded in safe mode
    ids = classifier.features(texts[:20])
    expected = np.asarray(classifier.model.predict(ids, verbose=0))
    np.testing.assert_allclose(np.asarray(loaded.model.predict(ids, verbose=0)), expected, atol=1e-5)
    saved = keras.saving.load_model(tmp_path / "m" / "model.keras", safe_mode=True)
    assert all(layer.name != "supervised_contrastive" for layer in saved.layers)
    vocabulary = (tmp_path / "m" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    plain, _ = network.build_network(trained["config"], len(loaded.labels), vocabulary)
    # what exports and serving read: the same inputs, outputs and layers as a network trained without it
    assert [t.name for t in saved.inputs] == [t.name for t in plain.inputs] == ["token_ids"]
    assert [tuple(t.shape) for t in saved.outputs] == [tuple(t.shape) for t in plain.outputs] == [(None, len(loaded.labels))]
    assert [layer.name for layer in saved.layers] == [layer.name for layer in plain.layers]


def test_bench_ood_trains_systems_with_the_contrastive_term_by_name():
    from bench.ood import system_parts

    assert system_parts("minilm+none+supcon=0.3") == ("minilm", True, {"contrastive_weight": 0.3})
    assert system_parts("scratch+supcon=1") == ("scratch", False, {"contrastive_weight": 1.0})
    assert system_parts("scratch+none") == ("scratch", True, {})
    for wrong in ("scratch+supcn=1", "bert+none"):
        with pytest.raises(SystemExit, match="unknown system"):
            system_parts(wrong)
