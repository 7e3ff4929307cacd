"""The classify task from Python (kformer.tasks.classify), without the CLI, plus the CLI's exit codes.

One tiny classifier is trained in-process from in-memory lists (module fixture) and one from a CSV
file; both are loaded back with ``kformer.load``.
"""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from conftest import TICKET_QUEUES, write_tickets

import kformer
from kformer.cli import main
from kformer.errors import BadInput, CorruptModel, ModelNotFound, Unsupported
from kformer.tasks import classify

TINY = {"max_length": 16, "vocab_size": 200, "batch_size": 16, "dim": 16, "ff_dim": 32, "seed": 3}
LABELS = sorted(TICKET_QUEUES)


def _rows(path):
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r["text"] for r in rows], [r["label"] for r in rows]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks-classify")
    return root, write_tickets(root / "train.csv", 240, seed=5), write_tickets(root / "test.csv", 60, seed=6)


@pytest.fixture(scope="module")
def trained(files):
    """Trained from (texts, labels) lists, with a test split given as lists too."""
    root, train_csv, test_csv = files
    result = classify.train({**TINY, "epochs": 4, "learning_rate": 0.003}, _rows(train_csv), root / "lists",
                            test=_rows(test_csv))
    return result, kformer.load(root / "lists")


def test_train_from_lists_then_predict(trained, files):
    result, model = trained
    assert isinstance(model, classify.Classifier) and model.task == "classify"
    manifest = json.loads((result.folder / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["labels"] == model.labels == LABELS and manifest["format_version"] >= 1
    assert result.metrics["test"]["n"] == 60 and result.metrics["test"]["accuracy"] >= 0.9
    assert "learning_rate" not in result.metrics["auto"] and result.config.learning_rate == 0.003  # given, not chosen

    texts = ["my laptop screen will not boot", "refund the duplicate invoice", "vpn password locked", ""]
    probs = model.probabilities(texts)
    assert probs.shape == (4, 3) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    results = model.predict(texts, top_k=3, batch_size=2)
    assert [r["label"] for r in results[:3]] == ["Hardware", "Billing & Payments", "Access"]
    for row, result_ in zip(probs, results, strict=True):
        top = [t["probability"] for t in result_["top_k"]]
        assert top == sorted(top, reverse=True) and sum(top) == pytest.approx(1.0, abs=1e-4)
        assert result_["top_k"][0]["label"] == result_["label"] == LABELS[int(row.argmax())]
        assert result_["probability"] == pytest.approx(float(row.max()), abs=1e-6) and not result_["unknown"]
    (routed,) = model.predict(["the a today thanks"], threshold=1.0, unknown_label="human")
    assert routed["label"] == "human" and routed["unknown"] and routed["top_k"][0]["label"] in LABELS
    assert classify.predict(model, texts[:1]) == model.predict(texts[:1])  # the module-level alias


def test_predict_as_a_service_asks_and_bad_arguments(trained):
    _, model = trained
    (answer,) = model.predict(["refund the invoice"], **model.check_parameters({"top_k": 2}))
    assert answer["label"] == "Billing & Payments" and len(answer["top_k"]) == 2
    assert model.metadata()["labels"] == LABELS and set(model.parameters) == {"top_k", "threshold", "unknown_label"}
    cases = [
        (lambda: model.check_parameters({"beam": 2}), "parameters.beam"),
        (lambda: model.check_parameters({"top_k": "3"}), "parameters.top_k"),
        (lambda: model.predict(["x"], top_k=0), "top_k"),
        (lambda: model.predict(["x"], threshold=2.0), "threshold"),
        (lambda: model.predict("one string"), "texts"),
        (lambda: model.predict(["x", 3]), "texts[1]"),
    ]
    for call, field in cases:
        with pytest.raises(BadInput) as caught:
            call()
        assert caught.value.field == field


def test_evaluate_matches_training_metrics_and_writes_only_when_asked(trained, files, tmp_path):
    result, model = trained
    _, _, test_csv = files
    scores = model.evaluate(_rows(test_csv))
    assert scores["accuracy"] == pytest.approx(result.metrics["test"]["accuracy"], abs=1e-6)
    assert scores["n"] == 60 and set(scores["per_class"]) == set(LABELS) and scores["unseen_labels"] == []
    assert np.array(scores["confusion"]).sum() == 60 and not (result.folder / "eval").exists()
    report = classify.evaluate(model, test_csv, out=tmp_path / "eval", limit=10)
    assert report["n"] == 10 and (tmp_path / "eval" / "confusion.png").is_file()
    assert json.loads((tmp_path / "eval" / "report.json").read_text(encoding="utf-8"))["n"] == 10


def test_attention_maps_as_arrays(trained):
    _, model = trained
    maps = model.attention_maps("my laptop screen please")
    stack = maps.maps["encoder"]
    assert stack.shape == (1, 2, 4, 4)  # (layers, heads, queries, keys)
    np.testing.assert_allclose(stack.sum(axis=-1), 1.0, atol=1e-5)
    assert maps.rows["encoder"] == maps.cols["encoder"] == ["my", "laptop", "screen", "please"]
    assert maps.output == "Hardware"
    assert len(maps.to_json()["maps"]["encoder"]["weights"][0][1]) == 4


def test_warmup_covers_every_shape_a_request_can_bring(trained, monkeypatch):
    _, model = trained
    shapes = []
    original = model._run_network
    monkeypatch.setattr(model, "_run_network", lambda ids: shapes.append(ids.shape) or original(ids))
    model.warmup()
    warmed = set(shapes)
    assert warmed == {(rows, width) for rows in (1, 4, 16, 64) for width in (8, 16)}  # max_length 16
    shapes.clear()
    texts = [" ".join(["laptop"] * n) for n in range(1, 30)]
    together = model.predict(texts, batch_size=64)
    for batch_size in (1, 3, 5, 29):
        alone = model.predict(texts, batch_size=batch_size)  # padding rows changes no answer (float noise aside)
        assert [r["label"] for r in alone] == [r["label"] for r in together]
        np.testing.assert_allclose([r["probability"] for r in alone], [r["probability"] for r in together], atol=2e-6)
    assert set(shapes) <= warmed


def test_old_folder_without_format_version_still_loads(trained, tmp_path):
    result, model = trained
    old = tmp_path / "old"
    shutil.copytree(result.folder, old, ignore=shutil.ignore_patterns("training"))
    manifest = json.loads((old / "kformer.json").read_text(encoding="utf-8"))
    for key in ("format_version", "kformer_version", "model_file"):
        del manifest[key]
    (old / "kformer.json").write_text(json.dumps(manifest), encoding="utf-8")
    loaded = kformer.load(old)
    assert loaded.metadata()["format_version"] == 0
    np.testing.assert_allclose(loaded.probabilities(["refund please"]), model.probabilities(["refund please"]), atol=1e-6)


@pytest.mark.slow
def test_train_from_a_file_records_auto_choices(files):
    root, train_csv, _ = files
    out = root / "from-file"
    result = classify.train({**TINY, "epochs": 1}, train_csv, out)
    assert result.config.learning_rate == 1e-3
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["auto"]["learning_rate"]["value"] == 1e-3 and "scratch" in metrics["auto"]["learning_rate"]["why"]
    assert metrics["recipe"]["learning_rate"] == 1e-3 and "command" not in metrics
    assert metrics["splits"]["train"] + metrics["splits"]["valid"] == 240
    assert kformer.load(out).labels == LABELS


def test_config_errors_name_the_setting(files, tmp_path):
    _, train_csv, _ = files
    cases = [
        ({"layers": 3}, "layers"),
        ({"epochs": "ten"}, "epochs"),
        ({"epochs": 0}, "epochs"),
        ({"decay": "exponential"}, "decay"),
        ({"ngrams": 2, "tokenizer": "wordpiece"}, "ngrams"),
        ({"model.epochs": 3}, "model.epochs"),
        ({"backbone": str(tmp_path / "missing")}, "backbone"),
    ]
    for settings, field in cases:
        with pytest.raises(BadInput) as caught:
            classify.train(settings, train_csv, tmp_path / "out")
        assert caught.value.field == field, settings
    with pytest.raises(BadInput, match="at least two"):
        classify.train(TINY, (["a", "b", "c"], ["x", "x", "x"]), tmp_path / "out")
    with pytest.raises(BadInput) as caught:
        classify.train(TINY, (["a", "b"], ["x"]), tmp_path / "out")
    assert caught.value.field == "data"
    assert not (tmp_path / "out").exists()
    with pytest.raises(BadInput):
        classify.ClassifyConfig(positions="rotary")


def test_cli_exit_codes_by_error_class(trained, tmp_path, capsys):
    result, _ = trained
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["predict", str(empty), "hello"]) == ModelNotFound.exit_code == 3
    broken = tmp_path / "broken"
    shutil.copytree(result.folder, broken, ignore=shutil.ignore_patterns("training"))
    (broken / "model.keras").write_bytes(b"PK\x03\x04 not a zip")
    assert main(["predict", str(broken), "hello"]) == CorruptModel.exit_code == 4
    manifest = json.loads((broken / "kformer.json").read_text(encoding="utf-8"))
    (broken / "kformer.json").write_text(json.dumps({**manifest, "format_version": 99}), encoding="utf-8")
    assert main(["evaluate", str(broken), "--data", str(tmp_path / "x.csv")]) == Unsupported.exit_code == 5
    capsys.readouterr()
    assert main(["predict", str(result.folder), "hello", "--top-k", "0"]) == BadInput.exit_code == 2
    assert capsys.readouterr().err.strip() == "kformer: error: --top-k must be at least 1, got 0"
    assert main(["train", "classify", "--data", str(tmp_path / "x.csv"), "--epochs", "0"]) == 2
    assert "--epochs must be at least 1" in capsys.readouterr().err


def test_the_parts_belong_to_the_classifier_and_load_takes_a_runtime(trained):
    """The wide part, the threshold and the runtime are parts of a Classifier, set when it is
    loaded or assembled (``with_parts`` makes another one; the first is left as it was)."""
    result, model = trained
    texts = ["my laptop screen will not boot", "refund the duplicate invoice"]
    assert model.wide is not None and model.threshold is None  # auto: a scratch network gets a wide part
    assert model.metadata()["runtime"] == "keras"
    network_only = model.with_parts(wide=None, threshold=1.0)
    assert model.wide is not None and model.threshold is None
    np.testing.assert_allclose(network_only.probabilities(texts), model.network_probabilities(texts), atol=1e-6)
    assert all(answer["unknown"] for answer in network_only.predict(texts))  # its own threshold routes them
    assert not any(answer["unknown"] for answer in model.predict(texts))
    with pytest.raises(BadInput) as caught:
        kformer.load(result.folder, runtime="tflite")
    assert caught.value.field == "runtime"
    with pytest.raises(BadInput) as caught:
        kformer.load(result.folder, device="gpu")
    assert caught.value.field == "device"
