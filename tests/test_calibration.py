"""--calibrate: the unknown route's threshold chosen on validation data and kept in the folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TICKET_QUEUES, write_csv, write_tickets

from kformer.tasks.classify.calibration import choose_threshold


def test_threshold_maximises_accuracy_over_in_and_out_of_scope_rows():
    best = np.array([0.9, 0.8, 0.7, 0.6, 0.45])
    correct = np.array([True, True, True, False, True])
    oos = np.array([0.3, 0.5, 0.65, 0.2])
    summary = choose_threshold(best, correct, oos)
    # at 0.7: 3 in-scope kept right + 4 out-of-scope routed (0.65 < 0.7) = 7 of 9, the best possible
    assert summary["threshold"] == pytest.approx(0.7)
    assert summary["method"] == "out_of_scope"
    assert summary["in_scope_accuracy"] == pytest.approx(3 / 5) and summary["out_of_scope_recall"] == 1.0
    assert summary["in_scope_accuracy_without"] == pytest.approx(4 / 5)
    # out-of-scope texts the model is surer of than any in-scope one: routing them costs more than it wins
    assert choose_threshold(best, correct, np.array([0.99]))["threshold"] == 0.0


def test_without_out_of_scope_rows_95_percent_of_correct_predictions_stay_above():
    rng = np.random.default_rng(0)
    best = rng.uniform(0.2, 1.0, 1000)
    correct = rng.uniform(size=1000) < 0.8
    summary = choose_threshold(best, correct)
    kept = (best[correct] >= summary["threshold"]).mean()
    assert 0.95 <= kept <= 0.955 and summary["method"] == "keep 95% of correct"
    assert "out_of_scope_recall" not in summary


@pytest.mark.slow
def test_calibrated_folder_routes_low_confidence_texts_to_unknown_by_default(tmp_path):
    from kformer.cli import main
    from kformer.tasks.classify import load

    train = write_tickets(tmp_path / "train.csv", 240, seed=5)
    valid_rows = [(line.split(",", 1)[0], line.rsplit(",", 1)[1])
                  for line in write_tickets(tmp_path / "v.csv", 60, seed=9).read_text(encoding="utf-8").splitlines()[1:]]
    valid_rows += [(f"what is the weather like on day {i} in town", "Weather") for i in range(20)]  # out of scope
    valid = write_csv(tmp_path / "valid.csv", valid_rows)
    out = tmp_path / "model"
    assert main(["train", "classify", "--data", str(train), "--valid", str(valid), "--out", str(out), "--calibrate", "--ood-score", "probability",
                 "--epochs", "8", "--max-length", "16", "--vocab-size", "200", "--batch-size", "16", "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    calibration = metrics["calibration"]
    assert calibration["labels_out_of_scope"] == ["Weather"] and calibration["valid_out_of_scope"] == 20
    assert calibration["valid_in_scope"] == 60 and metrics["valid"]["n"] == 60  # early stopping saw only in-scope
    manifest = json.loads((out / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["threshold"] == calibration["threshold"] and 0.0 < manifest["threshold"] < 1.0
    classifier = load(out)
    texts = [text for text, _ in valid_rows]
    best = classifier.probabilities(texts).max(axis=1)
    routed = [r["unknown"] for r in classifier.predict(texts)]
    assert routed == [bool(p < manifest["threshold"]) for p in best] and any(routed)
    assert np.mean(routed[60:]) == pytest.approx(calibration["out_of_scope_recall"])
    assert not any(r["unknown"] for r in classifier.predict(texts, threshold=0.0))
    assert set(classifier.labels) == set(TICKET_QUEUES)

    # its exports give the same probabilities and carry the threshold (metadata) a client routes by
    from export_helpers import check_classifier_exports

    metadata = check_classifier_exports(out, texts[55:65], tmp_path / "exports")
    assert metadata["onnx"]["threshold"] == manifest["threshold"] and metadata["onnx"]["unknown_label"] == "unknown"


def test_without_calibrate_unseen_validation_labels_are_still_refused(tmp_path):
    from kformer.errors import BadInput
    from kformer.tasks import classify

    texts = ["refund my invoice", "laptop will not boot"] * 10
    labels = ["Billing", "Hardware"] * 10
    with pytest.raises(BadInput, match="--calibrate"):
        classify.train({"epochs": 1}, (texts, labels), tmp_path / "m", valid=(["the weather"] * 2, ["Weather"] * 2))
