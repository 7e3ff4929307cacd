"""``refit``: once validation has chosen the epoch (and the wide part's weight), the network is
trained again from scratch on the training and validation texts together, for that many epochs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import write_tickets

from kformer.errors import BadInput
from kformer.tasks import classify
from kformer.tasks.classify import ClassifyConfig, network
from kformer.tasks.classify.auto import DataStats, choose, epoch_seconds


def test_refit_refuses_what_would_use_the_validation_texts_twice():
    for clash in ({"calibrate": True}, {"freeze": True, "backbone": "bert-scratch"}):
        with pytest.raises(BadInput) as caught:
            ClassifyConfig(refit=True, **clash)
        assert caught.value.field == "refit" and "\n" not in str(caught.value)
    assert ClassifyConfig(refit=False, calibrate=True).refit is False


def test_a_refit_run_plans_its_epochs_for_both_runs():
    data = DataStats(22_500, 2, tuple(230 * (0.5 + q / 100) for q in range(101)), 70_000, 2_500, 22_500)
    once, _ = choose(ClassifyConfig(max_minutes=12.0, refit=False), data)
    twice, _ = choose(ClassifyConfig(max_minutes=12.0, refit=True), data)
    # the second run reads training + validation texts once more per epoch: about twice the work
    ratio = epoch_seconds(data, twice) / epoch_seconds(data, once)
    assert 2.0 <= ratio <= 2.3
    assert twice.epochs < once.epochs


@pytest.fixture(scope="module")
def refit_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("refit")
    train, valid = (write_tickets(root / f"{name}.csv", n, seed=s) for name, n, s in (("train", 160, 1), ("valid", 40, 2)))
    settings = {"epochs": 3, "patience": 3, "dim": 16, "ff_dim": 32, "heads": 2, "vocab_size": 200, "max_length": 16,
                "batch_size": 32, "seed": 1, "refit": True, "wide": True}
    calls = []
    refit_by = network.fit_without_validation
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(network, "fit_without_validation",
                      lambda c, config, rows, epochs, *a, **k: calls.append((c, rows, epochs)) or refit_by(c, config, rows, epochs, *a,
                                                                                             **k))
        result = classify.train(settings, train, root / "model", valid=valid)
    return root, result, calls


@pytest.mark.slow
def test_the_folder_holds_the_network_trained_on_every_text(refit_run):
    root, result, calls = refit_run
    metrics = json.loads((root / "model" / "metrics.json").read_text(encoding="utf-8"))
    (final, rows, epochs), = calls
    train, valid = (classify.as_labelled(str(root / f"{name}.csv")) for name in ("train", "valid"))
    assert sorted(rows.texts) == sorted(train.texts + valid.texts) and len(rows) == 200
    assert epochs == metrics["best_epoch"] == metrics["refit"]["epochs"] == metrics["refit"]["epochs_run"]
    assert metrics["refit"]["rows"] == 200 and metrics["wide"]["refit"]["rows"] == 200  # the wide part too
    # metrics.json "valid" is the first network's score: the folder's network has seen those texts
    assert metrics["splits"]["valid"] == 40 and metrics["recipe"]["refit"] is True
    folder = classify.load(root / "model")
    texts = valid.texts[:10]
    np.testing.assert_allclose(folder.network_probabilities(texts), final.network_probabilities(texts), atol=1e-5)
