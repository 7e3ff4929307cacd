"""The wide n-gram part of a classifier (kformer.tasks.classify.wide, .wide_fit): fitted alone it saves and
loads without pickle to the same probabilities; in a model folder the classifier's probabilities
are the mix of the network's and the wide part's by the weight chosen on validation; ``auto``
turns it on for networks learned from scratch only; such a folder exports with the part in the graph."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import write_tickets

from kformer.config import make_config
from kformer.errors import CorruptModel
from kformer.tasks import classify
from kformer.tasks.classify import ClassifyConfig, network
from kformer.tasks.classify import wide_fit as classify_wide
from kformer.tasks.classify.auto import DataStats, choose
from kformer.tasks.classify.wide import WIDE_FILE, WIDE_VOCAB_FILE, WidePart, load_mix, mix
from kformer.tasks.classify.wide_fit import (
    C_GRID,
    WEIGHT_GRID,
    choose_weight,
    feature_plan,
    fit,
    nb_ratios,
)

TOPICS = {"billing": ["refund", "invoice", "charged"], "login": ["password", "locked", "signin"],
          "travel": ["flight", "hotel", "booking"]}
FILLER = [f"word{i}" for i in range(60)]
PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".npy")


def topic_texts(n: int, seed: int, words: int = 6) -> tuple[list[str], list[str]]:
    """``n`` texts of ``words`` filler words plus one keyword (sometimes misspelled) of their topic."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        label = rng.choice(sorted(TOPICS))
        keyword = rng.choice(TOPICS[label])
        if rng.random() < 0.3:
            keyword = keyword[:-1]  # a typo: only character n-grams still see it
        texts.append(" ".join(rng.sample(FILLER, words) + [keyword]))
        labels.append(label)
    return texts, labels


def test_wide_part_round_trips_without_pickle(tmp_path):
    texts, labels = topic_texts(300, seed=1)
    order = ["travel", "login", "billing"]  # outputs follow the classifier's order, not sklearn's
    part = fit(texts, labels, order)
    assert part.labels == order and set(part.features) == {"word 1-2 grams", "char_wb 2-5 grams"}
    probe, truth = topic_texts(60, seed=2)
    probs = part.probabilities(probe)
    assert probs.shape == (60, 3) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert np.mean([order[i] == t for i, t in zip(probs.argmax(axis=1), truth, strict=True)]) > 0.9

    assert sorted(part.save(tmp_path)) == sorted([WIDE_FILE, WIDE_VOCAB_FILE])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([WIDE_FILE, WIDE_VOCAB_FILE])  # no temporary left
    loaded = WidePart.load(tmp_path, order)
    np.testing.assert_allclose(loaded.probabilities(probe), probs, atol=1e-6)
    with np.load(tmp_path / WIDE_FILE, allow_pickle=False) as arrays:  # plain arrays, no objects
        assert arrays["coef"].dtype == np.float16 and arrays["coef"].shape == (3, sum(part.features.values()))
    vocab = json.loads((tmp_path / WIDE_VOCAB_FILE).read_text(encoding="utf-8"))
    assert vocab["labels"] == order and [b["analyzer"] for b in vocab["blocks"]] == ["word", "char_wb"]

    with pytest.raises(CorruptModel, match="labels differ"):
        WidePart.load(tmp_path, sorted(order))
    (tmp_path / WIDE_FILE).write_bytes(b"not an npz")
    with pytest.raises(CorruptModel, match="wide part .* is corrupt"):
        WidePart.load(tmp_path, order)


def review_texts(n: int, seed: int) -> tuple[list[str], list[str]]:
    """Two-class "reviews": 30 filler words and two cue words, one of them for the other class
    a third of the time (so the classes overlap and the fit has something to weigh)."""
    rng = random.Random(seed)
    cues = {"pos": ["great", "superb", "moving"], "neg": ["awful", "boring", "dull"]}
    texts, labels = [], []
    for _ in range(n):
        label = rng.choice(["neg", "pos"])
        other = "neg" if label == "pos" else "pos"
        words = [rng.choice(cues[label]), rng.choice(cues[other] if rng.random() < 0.33 else cues[label])]
        texts.append(" ".join(rng.sample(FILLER, 30) + words))
        labels.append(label)
    return texts, labels


def test_two_classes_get_naive_bayes_scaling_folded_into_the_saved_weights(tmp_path):
    texts, labels = review_texts(400, seed=4)
    part = fit(texts, labels, ["pos", "neg"])
    assert part.about["naive_bayes"] is True and part.about["C"] == classify_wide.C  # no validation split
    x = part.transform(texts)
    ratios = nb_ratios(x, labels)  # classes sorted: "pos" is the second, so its cue words score > 0
    terms = part.blocks[0].terms
    assert ratios[terms.index("superb")] > 1.0 and ratios[terms.index("boring")] < -1.0
    assert abs(ratios[terms.index(FILLER[0])]) < 0.3  # filler says nothing about the class
    # the NB-scaled logistic regression, refitted by hand, is what the part predicts from plain TF-IDF
    from sklearn.linear_model import LogisticRegression

    by_hand = LogisticRegression(C=classify_wide.C, max_iter=1000, solver="liblinear").fit(x.multiply(ratios).tocsr(), labels)
    probe, truth = review_texts(100, seed=5)
    expected = by_hand.predict_proba(part.transform(probe).multiply(ratios).tocsr())[:, list(by_hand.classes_).index("pos")]
    np.testing.assert_allclose(part.probabilities(probe)[:, 0], expected, atol=2e-3)  # float16 weights
    assert np.mean([("pos", "neg")[i] == t for i, t in zip(part.probabilities(probe).argmax(axis=1), truth,
                                                              strict=True)]) > 0.75
    part.save(tmp_path)
    np.testing.assert_allclose(WidePart.load(tmp_path, ["pos", "neg"]).probabilities(probe), part.probabilities(probe),
                               atol=1e-6)
    many = fit(*topic_texts(300, seed=1), ["billing", "login", "travel"])
    assert many.about["naive_bayes"] is False  # more than two classes: plain TF-IDF


def test_two_classes_choose_c_on_validation_by_log_loss():
    texts, labels = review_texts(400, seed=6)
    valid = review_texts(150, seed=7)
    part = fit(texts, labels, ["neg", "pos"], valid=valid)
    scores = part.about["valid_by_c"]
    assert set(scores) == {f"{c:g}" for c in C_GRID}
    assert part.about["C"] == min(C_GRID, key=lambda c: scores[f"{c:g}"]["log_loss"])
    # the part kept is the one scored: its own validation log-loss is the chosen C's
    probs = part.probabilities(valid[0])
    truth = np.array([["neg", "pos"].index(label) for label in valid[1]])
    loss = -np.mean(np.log(probs[np.arange(len(truth)), truth]))
    assert loss == pytest.approx(scores[f"{part.about['C']:g}"]["log_loss"], abs=5e-3)  # float16 weights


def test_long_texts_get_word_ngrams_only_and_many_classes_fewer_columns():
    long_texts, _ = topic_texts(50, seed=3, words=40)
    short_texts, _ = topic_texts(50, seed=3, words=5)
    assert [a for a, _, _ in feature_plan(long_texts, 2)] == ["word"]
    assert [a for a, _, _ in feature_plan(short_texts, 2)] == ["word", "char_wb"]
    wide, narrow = feature_plan(short_texts, 3), feature_plan(short_texts, 600)
    assert wide[0][2] == 400_000 and narrow[0][2] == narrow[1][2] == 10_000  # 12M weights / 600 classes / 2 blocks


def test_word_triples_with_wide_ngrams_3_round_trip(tmp_path):
    from kformer.errors import BadInput
    from kformer.tasks.classify import ClassifyConfig

    texts, labels = review_texts(300, seed=8)
    assert feature_plan(texts, 2, 3)[0][1] == (1, 3)
    part = fit(texts, labels, ["neg", "pos"], word_ngrams=3)
    terms = part.blocks[0].terms
    assert set(part.features) == {"word 1-3 grams", "char_wb 2-5 grams"}  # 32 words: short texts
    assert any(len(term.split()) == 3 for term in terms)
    assert not any(len(term.split()) == 3 for term in fit(texts, labels, ["neg", "pos"]).blocks[0].terms)
    part.save(tmp_path)
    probe, _ = review_texts(40, seed=9)
    np.testing.assert_allclose(WidePart.load(tmp_path, ["neg", "pos"]).probabilities(probe), part.probabilities(probe),
                               atol=1e-6)
    with pytest.raises(BadInput) as raised:
        ClassifyConfig(wide_ngrams=4)
    assert raised.value.field == "wide_ngrams"


def test_mix_rules_and_the_weight_of_lowest_validation_log_loss():
    truth = np.array([0] * 40 + [1] * 40)
    right = np.eye(2)[truth]
    deep, wide = 0.1 + 0.8 * right, 0.35 + 0.3 * right
    product = np.sqrt(deep * wide)  # geometric at w = 0.5: the normalised product of the parts
    np.testing.assert_allclose(mix(deep, wide, 0.5), product / product.sum(axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(mix(deep, wide, 0.5, "linear"), 0.5 * deep + 0.5 * wide, atol=1e-6)
    np.testing.assert_allclose(mix(deep, wide, 0.0), deep, atol=1e-6)
    with pytest.raises(ValueError, match="unknown mix rule"):
        mix(deep, wide, 0.5, "max")
    # the wide part right everywhere (0.65), the network confidently wrong (0.9) on a quarter of
    # the rows: the weight goes to the wide part and the mix is right everywhere
    deep[:20] = 1.0 - deep[:20]
    weight, table = choose_weight(deep, wide, truth)
    assert weight >= 0.5 and table[f"{weight:.2f}"]["correct"] == 80 and table["0.00"]["correct"] == 60
    # a wide part confidently wrong everywhere: any weight on it only adds loss
    weight, table = choose_weight(0.3 + 0.4 * right, 0.95 - 0.9 * right, truth)
    assert weight == 0.0 and table["0.00"]["log_loss"] == pytest.approx(-np.log(0.7), abs=1e-5)
    # the rule against brute force on random probabilities
    rng = np.random.default_rng(0)
    deep, wide = rng.dirichlet(np.ones(4), 200), rng.dirichlet(np.ones(4), 200)
    labels = rng.integers(0, 4, 200)
    weight, table = choose_weight(deep, wide, labels)
    losses = [-np.mean(np.log(mix(deep, wide, w)[np.arange(200), labels])) for w in WEIGHT_GRID]
    assert weight == WEIGHT_GRID[int(np.argmin(losses))]
    assert [table[f"{w:.2f}"]["log_loss"] for w in WEIGHT_GRID] == pytest.approx(losses, abs=1e-5)


def _stats(**kw) -> DataStats:
    return DataStats(9_000, 77, tuple(12.0 for _ in range(101)), 5_000, 1_000, 9_000, **kw)


def test_auto_turns_it_on_for_scratch_only_and_recipes_keep_it_off(tmp_path):
    on, auto = choose(ClassifyConfig(), _stats())
    assert on.wide is True and "learns from this data alone" in auto.to_json()["wide"]["why"]
    assert choose(ClassifyConfig(backbone="bert-scratch"), _stats())[0].wide is True
    minilm, auto = choose(ClassifyConfig(backbone="minilm"), _stats())  # rules only: MiniLM is not loaded
    assert minilm.wide is False and "pretrained" in auto.to_json()["wide"]["why"]
    frozen, auto = choose(ClassifyConfig(backbone="minilm", freeze=True), _stats())
    assert frozen.wide is False and "freeze" in auto.to_json()["wide"]["why"]
    explicit, auto = choose(ClassifyConfig(wide=False), _stats())
    assert explicit.wide is False and "wide" not in auto.to_json()
    # a recipe that does not name it trains as it was measured: no wide part, unless a flag says so
    silent = tmp_path / "silent.toml"
    silent.write_text('task = "classify"\n[model]\ndim = 32\n')
    assert make_config(ClassifyConfig, "classify", silent).wide is False
    assert make_config(ClassifyConfig, "classify", silent, {"wide": True}).wide is True
    assert make_config(ClassifyConfig, "classify", "tickets").wide is True  # measured with it
    # the refit on training + validation texts: off unless asked for (the recipes measured with it ask)
    assert ClassifyConfig().wide_refit is False and make_config(ClassifyConfig, "classify", "imdb").wide_refit is False
    assert make_config(ClassifyConfig, "classify", "banking77-minilm").wide_refit is True
    from kformer.cli import build_parser

    args = build_parser().parse_args(["train", "classify", "--data", "x.csv", "--no-wide"])
    assert args.wide is False
    assert build_parser().parse_args(["train", "classify", "--data", "x.csv"]).wide is None  # auto


@pytest.fixture(scope="module")
def wide_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("wide")
    train, valid, test = (write_tickets(root / f"{name}.csv", n, seed=s)
                          for name, n, s in (("train", 160, 1), ("valid", 40, 2), ("test", 40, 3)))
    settings = {"epochs": 1, "dim": 16, "ff_dim": 32, "vocab_size": 200, "max_length": 16, "batch_size": 32,
                "seed": 1, "max_minutes": 5, "wide_refit": True}
    budgets = []  # --max-minutes counts the wide part, fitted first: say it took 90 s
    fitted, fitted_by = classify_wide.fit_timed, network.fit_network
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(classify_wide, "fit_timed", lambda *a, **k: (fitted(*a, **k)[0], 90.0))
        patch.setattr(network, "fit_network", lambda c, config, *a, **k: budgets.append(config.max_minutes) or fitted_by(c, config, *a, **k))
        result = classify.train(settings, train, root / "model", valid=valid, test=test)
    assert result.config.wide is True  # auto: a scratch backbone
    # the network got what was left: 5 min - 90 s for the fit - 90 s x 200/160 rows for the refit
    assert budgets == [pytest.approx(5 - 1.5 * (1 + 200 / 160))] and result.config.max_minutes == 5
    return root / "model", valid, test


def test_folder_predicts_the_mix_of_its_two_parts(wide_folder):
    folder, valid, test = wide_folder
    assert not [p for p in folder.rglob("*") if p.suffix in PICKLE_SUFFIXES]
    manifest = json.loads((folder / "kformer.json").read_text(encoding="utf-8"))
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    weight = manifest["wide"]["weight"]
    assert manifest["wide"]["file"] == WIDE_FILE and weight in WEIGHT_GRID and metrics["wide"]["weight"] == weight

    model = classify.load(folder)
    texts = classify.as_labelled(str(test)).texts
    mixed = model.probabilities(texts)
    wide = WidePart.load(folder, model.labels).probabilities(texts)
    deep = model.network_probabilities(texts)  # the network alone
    assert manifest["wide"]["rule"] == "geometric"
    np.testing.assert_allclose(mixed, mix(deep, wide, weight), atol=1e-5)

    # the weight is the grid's lowest validation log-loss of the part fitted on the training texts;
    # the folder saves that part fitted again on training + validation texts (same C)
    rows, train = classify.as_labelled(str(valid)), classify.as_labelled(str(folder.parent / "train.csv"))
    index = {label: i for i, label in enumerate(model.labels)}
    truth = np.array([index[label] for label in rows.labels])
    before = classify_wide.fit(train.texts, train.labels, model.labels)
    chosen, table = choose_weight(model.network_probabilities(rows.texts), before.probabilities(rows.texts), truth)
    assert chosen == weight and table == metrics["wide"]["valid_by_weight"]
    refitted = classify_wide.fit([*train.texts, *rows.texts], [*train.labels, *rows.labels], model.labels)
    np.testing.assert_allclose(WidePart.load(folder).probabilities(texts), refitted.probabilities(texts), atol=1e-5)
    assert not np.allclose(before.probabilities(texts), refitted.probabilities(texts), atol=1e-3)
    assert metrics["wide"]["refit"]["rows"] == 200
    assert table[f"{weight:.2f}"]["log_loss"] <= min(table["0.00"]["log_loss"], table["1.00"]["log_loss"])
    parts = metrics["wide"]["valid_accuracy"]
    assert metrics["wide"]["C"] == classify_wide.C and metrics["wide"]["valid_by_c"] is None  # several queues: one C
    assert metrics["wide"]["naive_bayes"] is False
    assert parts["mixed"] == pytest.approx(metrics["valid"]["accuracy"], abs=1e-9)
    from kformer.cli.classify import _summary_line  # what `kformer train classify` prints

    assert f"wide part weight {weight:g} (valid accuracy: transformer {parts['transformer']:.4f}" in _summary_line(
        metrics, folder)
    tested = metrics["wide"]["test_accuracy"]
    assert tested["mixed"] == pytest.approx(metrics["test"]["accuracy"], abs=1e-9)
    assert tested["transformer"] == pytest.approx(float(np.mean(
        [model.labels[i] == t for i, t in zip(deep.argmax(axis=1), classify.as_labelled(str(test)).labels,
                                              strict=True)])), abs=1e-9)


def test_a_folder_from_before_the_geometric_mix_still_mixes_linearly(wide_folder):
    folder, _, test = wide_folder
    manifest = json.loads((folder / "kformer.json").read_text(encoding="utf-8"))
    labels = manifest["labels"]
    entry = {key: value for key, value in manifest["wide"].items() if key != "rule"}  # as written before
    old = load_mix(folder, entry, labels)
    assert old.rule == "linear" and old.weight == manifest["wide"]["weight"]
    texts = classify.as_labelled(str(test)).texts[:8]
    deep = np.full((8, len(labels)), 1.0 / len(labels), dtype="float32")
    np.testing.assert_allclose(old(deep, texts), mix(deep, old.part.probabilities(texts), old.weight, "linear"),
                               atol=1e-6)
    with pytest.raises(CorruptModel, match="bad \"wide\" entry"):
        load_mix(folder, {**entry, "rule": "max"}, labels)


def test_the_default_classifier_exports_with_its_wide_part_in_the_graph(wide_folder, tmp_path, capsys):
    """``auto`` turned the wide part on: both exports carry it (and its mix) and give predict's answers."""
    from export_helpers import check_classifier_exports

    from kformer.cli import main

    folder, _, test = wide_folder
    texts = [*classify.as_labelled(str(test)).texts[:12], "", "Refund my INVOICE, please!\tcafé <br /> 12 ab_c",
             "x " * 30 + "battery laptop"]
    metadata = check_classifier_exports(folder, texts, tmp_path)
    assert metadata["onnx"]["wide"]["weight"] == json.loads((folder / "kformer.json").read_text("utf-8"))["wide"]["weight"]
    assert main(["export", str(folder), "--format", "onnx", "--out", str(tmp_path / "cli")]) == 0
    assert "model.onnx: token_ids, texts -> probabilities, labels" in capsys.readouterr().out
