"""--calibrate: the unknown route's threshold chosen on validation data and kept in the folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TICKET_QUEUES, write_csv, write_tickets

from kformer.tasks.classify.calibration import calibrate, choose_threshold


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


def test_unknown_recall_sets_the_lowest_threshold_routing_that_share_of_out_of_scope_rows():
    best = np.array([0.95, 0.9, 0.8, 0.64, 0.63, 0.62])
    correct = np.array([True, False, True, True, True, True])
    oos = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.61, 0.65, 0.85, 0.97])
    summary = choose_threshold(best, correct, oos, recall=0.8)
    # 8 of 10 must fall below: just above the 8th lowest (0.65), rounded up to 6 decimals
    assert summary["threshold"] == pytest.approx(0.650001) and summary["method"] == "out-of-scope recall 0.8"
    assert summary["out_of_scope_recall"] == 0.8
    # routed: 8 out-of-scope rows and the in-scope 0.64, 0.63 and 0.62 rows (all correct: the price)
    assert summary["out_of_scope_precision"] == pytest.approx(8 / 11)
    assert summary["in_scope_accuracy"] == pytest.approx(2 / 6)
    # the maximum-accuracy rule, as before, stops below them and catches fewer
    most_accurate = choose_threshold(best, correct, oos)
    assert most_accurate["threshold"] == pytest.approx(0.62) and most_accurate["out_of_scope_recall"] == 0.7
    # distance scores (minus a distance) work the same; a recall of 1 routes every out-of-scope row
    assert choose_threshold(-best * 100, correct, -oos * 100, floor=None, recall=1.0)["out_of_scope_recall"] == 1.0
    # without out-of-scope rows the recall has nothing to count: unknown_keep decides
    keep = choose_threshold(np.linspace(0.01, 1.0, 100), np.ones(100, dtype=bool), recall=0.8, keep=0.9)
    assert keep["method"] == "keep 90% of correct" and keep["in_scope_accuracy"] == pytest.approx(0.91)


def test_calibrate_reads_the_recall_and_keep_it_is_given():
    class Scored:  # a classifier whose in-scope score is the text's number
        labels, ood = ["a", "b"], None

        def scored(self, texts, batch_size):
            scores = np.array([float(t) for t in texts])
            probs = np.stack([scores, 1 - scores], axis=1)
            return probs, probs.max(axis=1)

    from kformer.data.readers import LabelledTexts

    valid = LabelledTexts(["0.9", "0.8", "0.7"], ["a", "a", "a"], "<valid>")
    oos = LabelledTexts(["0.55", "0.6", "0.75", "0.95"], ["other"] * 4, "<valid>")
    summary = calibrate(Scored(), valid, oos, recall=0.75)
    assert summary["threshold"] == pytest.approx(0.750001) and summary["out_of_scope_recall"] == 0.75
    assert summary["out_of_scope_precision"] == pytest.approx(3 / 4) and summary["labels_out_of_scope"] == ["other"]
    assert calibrate(Scored(), valid, None, keep=1.0)["threshold"] == pytest.approx(0.7)


def test_unknown_examples_in_the_data_turn_the_route_on_and_the_auto_line_says_so():
    from kformer.tasks.classify import ClassifyConfig
    from kformer.tasks.classify.auto import RULES, data_stats, describe

    texts, labels = ["refund my invoice", "laptop will not boot"] * 10, ["Billing", "Hardware"] * 10
    with_unknown = data_stats(texts, labels, valid_rows=6, unknown_rows=2)
    config, chosen = RULES.resolve(ClassifyConfig(), with_unknown)
    assert config.calibrate is True and "2 out-of-scope examples" in chosen.to_json()["calibrate"]["why"]
    assert "calibrate=True" in describe(with_unknown, chosen.to_json())
    assert RULES.resolve(ClassifyConfig(), data_stats(texts, labels))[0].calibrate is False
    assert RULES.resolve(ClassifyConfig(unknown_recall=0.8), data_stats(texts, labels))[0].calibrate is True
    assert RULES.resolve(ClassifyConfig(calibrate=False), with_unknown)[0].calibrate is False  # given wins


def test_bad_unknown_route_settings_are_one_line_errors(capsys):
    from kformer.cli import main
    from kformer.errors import BadInput
    from kformer.tasks.classify import ClassifyConfig

    for settings, field in (({"unknown_recall": 1.5}, "unknown_recall"), ({"unknown_recall": 0.0}, "unknown_recall"),
                            ({"unknown_keep": 1.2}, "unknown_keep"),
                            ({"unknown_recall": 0.8, "calibrate": False}, "unknown_recall"),
                            ({"unknown_recall": 0.8, "refit": True}, "refit")):
        with pytest.raises(BadInput) as caught:
            ClassifyConfig(**settings)
        assert caught.value.field == field and "\n" not in str(caught.value)
    assert main(["train", "classify", "--data", "x.csv", "--out", "m", "--unknown-recall", "1.5"]) != 0
    err = capsys.readouterr().err.strip()
    assert "unknown-recall" in err.replace("_", "-") and "1.5" in err and len(err.splitlines()) == 1


def test_route_counts_report_accuracy_recall_and_precision():
    from kformer.cli.classify import route_line
    from kformer.tasks.classify.calibration import RouteCounts

    counts = RouteCounts()
    labels = ["a", "a", "b", "b", "x", "x", "x", "y"]
    predicted = ["a", "b", "b", "b", "a", "b", "a", "a"]
    counts.add(labels[:5], predicted[:5], np.array([False, False, True, False, True]), {"a", "b"})
    counts.add(labels[5:], predicted[5:], np.array([True, False, True]), {"a", "b"})
    summary = counts.summary()
    assert (summary["in_scope"], summary["out_of_scope"]) == (4, 4)
    assert summary["in_scope_accuracy"] == 0.5 and summary["in_scope_accuracy_without"] == 0.75
    assert summary["out_of_scope_recall"] == 0.75 and summary["out_of_scope_precision"] == 0.75
    line = route_line({"threshold": 0.5, "ood_score": "probability", **summary})
    assert "in-scope accuracy 50.0 %" in line and "recall 75.0 %" in line and "precision 75.0 %" in line


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
    # --contrastive-weight 0: the route by probability as trained without the term (auto turns it on here,
    # out-of-scope validation texts being present; tests/test_classify_contrastive.py trains with it)
    assert main(["train", "classify", "--data", str(train), "--valid", str(valid), "--out", str(out), "--calibrate", "--ood-score", "probability",
                 "--epochs", "8", "--max-length", "16", "--vocab-size", "200", "--batch-size", "16", "--quiet",
                 "--contrastive-weight", "0"]) == 0
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
    # evaluate reports the route at the folder's threshold: on the validation rows, what calibration saw
    route = classifier.evaluate(valid)["unknown_route"]
    assert (route["in_scope"], route["out_of_scope"]) == (60, 20) and route["threshold"] == manifest["threshold"]
    assert route["out_of_scope_recall"] == pytest.approx(calibration["out_of_scope_recall"])
    assert route["in_scope_accuracy"] == pytest.approx(calibration["in_scope_accuracy"], abs=1e-6)
    assert route["out_of_scope_precision"] == pytest.approx(calibration["out_of_scope_precision"], abs=1e-6)

    # its exports give the same probabilities and carry the threshold (metadata) a client routes by
    from export_helpers import check_classifier_exports

    metadata = check_classifier_exports(out, texts[55:65], tmp_path / "exports")
    assert metadata["onnx"]["threshold"] == manifest["threshold"] and metadata["onnx"]["unknown_label"] == "unknown"


def test_with_calibrate_off_unseen_validation_labels_are_still_refused(tmp_path):
    from kformer.errors import BadInput
    from kformer.tasks import classify

    texts = ["refund my invoice", "laptop will not boot"] * 10
    labels = ["Billing", "Hardware"] * 10
    with pytest.raises(BadInput, match="--calibrate"):
        classify.train({"epochs": 1, "calibrate": False}, (texts, labels), tmp_path / "m",
                       valid=(["the weather"] * 2, ["Weather"] * 2))
